"""A schedule as plain data: parallel arrays of step kinds and node indices (DESIGN §1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["COMPUTE", "FREE", "Schedule", "ScheduleBuilder"]

COMPUTE = 0
FREE = 1
_NAMES = ("compute", "free")


@dataclass(frozen=True, eq=False)
class Schedule:
    """Steps ``compute v`` / ``free v``: ``ops[k]`` is COMPUTE or FREE, ``nodes[k]`` the node index."""

    ops: np.ndarray  # int8
    nodes: np.ndarray  # int32

    def __post_init__(self) -> None:
        for arr in (self.ops, self.nodes):
            arr.setflags(write=False)

    @classmethod
    def from_steps(cls, steps: Iterable[tuple[int, int]]) -> Schedule:
        """Build from ``(op, node)`` pairs."""
        pairs = list(steps)
        if not pairs:
            return cls(np.zeros(0, np.int8), np.zeros(0, np.int32))
        arr = np.asarray(pairs, dtype=np.int64)
        return cls(arr[:, 0].astype(np.int8), arr[:, 1].astype(np.int32))

    @classmethod
    def from_named(cls, steps: Sequence[Sequence[str]], index: dict[str, int]) -> Schedule:
        """Build from ``[["compute", id], ["free", id]]``; raises KeyError/ValueError on unknowns."""
        ops = np.empty(len(steps), dtype=np.int8)
        nodes = np.empty(len(steps), dtype=np.int32)
        for k, (op, node) in enumerate(steps):
            ops[k] = _NAMES.index(op)
            nodes[k] = index[node]
        return cls(ops, nodes)

    def __len__(self) -> int:
        return int(self.ops.size)

    @property
    def compute_nodes(self) -> np.ndarray:
        """Node of every compute step, in order."""
        return self.nodes[self.ops == COMPUTE]

    def named(self, ids: Sequence[str]) -> list[list[str]]:
        """``[["compute", id], …]`` for plan files."""
        return [[_NAMES[o], ids[v]] for o, v in zip(self.ops.tolist(), self.nodes.tolist())]


class ScheduleBuilder:
    """Append steps cheaply, then :meth:`build` a frozen :class:`Schedule`."""

    __slots__ = ("_ops", "_nodes")

    def __init__(self) -> None:
        self._ops: list[int] = []
        self._nodes: list[int] = []

    def compute(self, v: int) -> None:
        self._ops.append(COMPUTE)
        self._nodes.append(v)

    def free(self, v: int) -> None:
        self._ops.append(FREE)
        self._nodes.append(v)

    def __len__(self) -> int:
        return len(self._ops)

    def build(self) -> Schedule:
        return Schedule(np.asarray(self._ops, dtype=np.int8), np.asarray(self._nodes, dtype=np.int32))
