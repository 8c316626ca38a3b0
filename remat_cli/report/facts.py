"""Facts about one plan that its reports share: per-node compute counts, what is
recomputed most, how much of the forward pass is kept, and the simulator's per-step memory.

Every byte figure comes from the simulator (:func:`remat_cli.simulate.simulate` with
``per_step=True``); the per-node counts are read off the schedule's compute steps, which
is exactly what the simulator counts too. The per-step replay runs when a report first
asks for it (the timeline and the trace do; tables and JSON do not): the planner has
already replayed the plan once to validate it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from remat_cli.bounds import StructuralBound, structural_bound_key, structural_lower_bound
from remat_cli.errors import InvalidScheduleError
from remat_cli.graph import Graph
from remat_cli.plandoc import Plan
from remat_cli.schedule import COMPUTE
from remat_cli.simulate import simulate
from remat_cli.strategies.base import IdleWork

__all__ = ["Recomputed", "ForwardKept", "PlanFacts", "plan_facts", "step_categories"]


@dataclass(frozen=True)
class Recomputed:
    """A value computed more than once: its node, op, size and number of computes."""

    node: str
    op: str
    bytes: int
    computes: int


@dataclass(frozen=True)
class ForwardKept:
    """How much of the forward pass a plan keeps: forward values computed exactly once.

    A needed forward value that is computed once is held until its last reader (backward
    nodes included) has run; one computed more than once was dropped and recomputed.
    For a graph without node kinds every needed node counts as forward.
    """

    nodes: int  # needed forward nodes
    kept_nodes: int  # of them, computed exactly once
    bytes: int  # Σ mem of the needed forward nodes
    kept_bytes: int  # Σ mem of those computed exactly once

    @property
    def fraction(self) -> float:
        return self.kept_nodes / self.nodes if self.nodes else 1.0

    @property
    def bytes_fraction(self) -> float:
        return self.kept_bytes / self.bytes if self.bytes else 1.0


@dataclass(frozen=True, eq=False)
class PlanFacts:
    """Derived facts about a validated plan (see module docstring)."""

    counts: np.ndarray  # int64 per node: number of compute steps
    recomputed_most: tuple[Recomputed, ...]
    forward: ForwardKept
    base_seconds: float | None  # Σ seconds of the needed nodes, once each
    bound: StructuralBound | None = None  # proven lower bound on any schedule's peak
    plan: Plan | None = field(default=None, repr=False)  # replayed for :attr:`memory`

    @property
    def recomputed_nodes(self) -> int:
        return int(np.count_nonzero(self.counts > 1))

    @cached_property
    def memory(self) -> np.ndarray:
        """int64 per step: the simulator's memory at that step (replayed on first use)."""
        if self.plan is None:
            raise ValueError("PlanFacts made without its plan has no per-step memory")
        sim = simulate(self.plan.graph, self.plan.schedule, per_step=True)
        if sim.error is not None or sim.memory is None:  # plans are validated; this is a bug
            raise InvalidScheduleError(f"plan is invalid at {sim.error}")
        return sim.memory


def facts_ahead(graph: Graph) -> IdleWork:
    """The part of :func:`plan_facts` that depends on ``graph`` alone (its structural bound,
    kept on the graph), for a planning run to make where it would wait on its second process
    (``RunContext.idle``): 0.015-0.08 s on 1,000-node graphs that the report then skips."""
    return IdleWork(structural_bound_key(), lambda: structural_lower_bound(graph))


def plan_facts(plan: Plan, *, top: int = 5) -> PlanFacts:
    """Derive the shared report facts of ``plan`` (a plan the planner has validated)."""
    graph = plan.graph
    counts = np.bincount(plan.schedule.compute_nodes, minlength=graph.n).astype(np.int64)
    again = np.flatnonzero(counts > 1)
    order = again[np.lexsort((again, -graph.mem[again], -counts[again]))][:top]
    most = tuple(Recomputed(graph.ids[v], graph.ops[v] or "op", int(graph.mem[v]), int(counts[v])) for v in order.tolist())
    forward = _forward_mask(graph) & graph.needed
    once = forward & (counts == 1)
    kept = ForwardKept(
        nodes=int(forward.sum()),
        kept_nodes=int(once.sum()),
        bytes=int(graph.mem[forward].sum()),
        kept_bytes=int(graph.mem[once].sum()),
    )
    return PlanFacts(counts, most, kept, graph.base_seconds, structural_lower_bound(graph), plan)


def _forward_mask(graph: Graph) -> np.ndarray:
    kinds = np.asarray(graph.kinds, dtype=object)
    if graph.is_training:
        return kinds == "forward"
    return np.ones(graph.n, dtype=bool)


def step_categories(plan: Plan) -> list[str]:
    """Per compute step: ``forward`` (a forward node's first compute), ``recompute`` (a
    forward node again), ``loss``, ``backward``, or ``compute`` for graphs without kinds."""
    graph = plan.graph
    seen = bytearray(graph.n)
    out: list[str] = []
    kinds = graph.kinds
    for op, v in zip(plan.schedule.ops.tolist(), plan.schedule.nodes.tolist()):
        if op != COMPUTE:
            continue
        kind = kinds[v] or "compute"
        if kind in ("forward", "compute") and seen[v]:
            kind = "recompute"
        seen[v] = 1
        out.append(kind)
    return out
