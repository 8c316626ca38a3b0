"""The one simulator: replay a schedule against a graph exactly by DESIGN §1.

Every number the tool reports about a schedule (peak, cost, overhead, recomputations,
estimated seconds, per-step memory) is computed here and nowhere else. There are no
modes: memory is counted the same way for every strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat_cli.errors import InvalidScheduleError
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule

__all__ = ["Metrics", "InvalidStep", "SimResult", "simulate", "require_valid"]


@dataclass(frozen=True)
class Metrics:
    """What a valid schedule costs. Bytes include fixed memory; costs are in the graph's unit."""

    peak_bytes: int
    fixed_bytes: int
    lower_bound_bytes: int
    cost: float
    base_cost: float
    overhead: float  # cost / base_cost - 1
    computes: int
    recomputations: int  # compute steps beyond the first of each node
    est_seconds: float | None  # from the graph's per-node seconds, when it has them
    peak_step: int  # index of the step that attains the peak (-1 for an empty schedule)
    steps: int

    @property
    def activation_peak_bytes(self) -> int:
        return self.peak_bytes - self.fixed_bytes


@dataclass(frozen=True)
class InvalidStep:
    """The first step that breaks a rule; ``step == len(schedule)`` for a missing target."""

    step: int
    node: str
    reason: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.reason}"


@dataclass(frozen=True, eq=False)
class SimResult:
    """Outcome of a replay: metrics when valid, else the first invalid step."""

    metrics: Metrics | None
    error: InvalidStep | None
    memory: np.ndarray | None = None  # bytes at each step, when asked for

    @property
    def valid(self) -> bool:
        return self.error is None


def simulate(graph: Graph, schedule: Schedule, *, per_step: bool = False) -> SimResult:
    """Replay ``schedule`` on ``graph``; linear in steps + edges.

    Memory at ``compute v`` is fixed + resident values + mem(v) + workspace(v); at
    ``free v`` it is what remains after the free. Returns the first rule broken, if any.
    """
    n = graph.n
    ops = schedule.ops.tolist()
    nodes = schedule.nodes.tolist()
    ids = graph.ids
    preds = graph.pred_lists
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    resident = bytearray(n)
    trace: list[int] | None = [] if per_step else None
    cur = graph.fixed_mem
    peak = cur
    peak_step = -1

    def fail(step: int, v: int, reason: str) -> SimResult:
        name = ids[v] if 0 <= v < n else str(v)
        return SimResult(None, InvalidStep(step, name, reason))

    for step, (op, v) in enumerate(zip(ops, nodes)):
        if not 0 <= v < n:
            return fail(step, v, f"node index {v} is not in the graph")
        if op == COMPUTE:
            if resident[v]:
                return fail(step, v, f"compute {ids[v]!r}: it is already resident")
            for u in preds[v]:
                if not resident[u]:
                    return fail(step, v, f"compute {ids[v]!r}: input {ids[u]!r} is not resident")
            now = cur + mem[v] + ws[v]
            if now > peak:
                peak = now
                peak_step = step
            cur += mem[v]
            resident[v] = 1
            if trace is not None:
                trace.append(now)
        elif op == FREE:
            if not resident[v]:
                return fail(step, v, f"free {ids[v]!r}: it is not resident")
            cur -= mem[v]
            resident[v] = 0
            if trace is not None:
                trace.append(cur)
        else:
            return fail(step, v, f"unknown step kind {op}")

    computed_nodes = schedule.compute_nodes
    counts = np.bincount(computed_nodes, minlength=n) if computed_nodes.size else np.zeros(n, np.int64)
    missing = np.flatnonzero(counts[graph.targets] == 0)
    if missing.size:
        t = int(graph.targets[missing[0]])
        return fail(len(ops), t, f"target {ids[t]!r} is never computed")
    cost = float(counts @ graph.cost)
    base = graph.base_cost
    if base > 0 and counts.max(initial=0) <= 1 and np.array_equal(counts > 0, graph.needed):
        cost, overhead = base, 0.0  # each needed node once: exactly the base, not float noise
    elif base > 0:
        overhead = cost / base - 1.0
    else:
        overhead = 0.0 if cost == 0 else float("inf")
    computes = int(computed_nodes.size)
    metrics = Metrics(
        peak_bytes=int(peak),
        fixed_bytes=graph.fixed_mem,
        lower_bound_bytes=graph.lb,
        cost=cost,
        base_cost=base,
        overhead=overhead,
        computes=computes,
        recomputations=computes - int(np.count_nonzero(counts)),
        est_seconds=None if graph.seconds is None else float(counts @ graph.seconds),
        peak_step=peak_step,
        steps=len(ops),
    )
    memory = None if trace is None else np.asarray(trace, dtype=np.int64)
    return SimResult(metrics, None, memory)


def require_valid(graph: Graph, schedule: Schedule, *, what: str = "schedule") -> Metrics:
    """The metrics of a schedule that must be valid: simulate, or raise
    :class:`InvalidScheduleError` naming the first invalid step. (``validate`` is the
    command that replays a plan file and its claims: :func:`remat_cli.plandoc.validate_claims`.)"""
    result = simulate(graph, schedule)
    if result.error is not None:
        raise InvalidScheduleError(f"{what} is invalid at {result.error}")
    assert result.metrics is not None
    return result.metrics
