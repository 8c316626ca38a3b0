"""store-all: no rematerialization, every needed node once, each value freed after its last use.

It is the reference every relative budget (``0.5x``) is measured against, so its order is
chosen with care: among a few topological orders (the file's, and a greedy one that prefers
steps that free memory) the one with the lowest simulated peak is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from remat_cli.graph import Graph
from remat_cli.schedule import Schedule
from remat_cli.simulate import Metrics, simulate
from remat_cli.algorithms.orders import memory_greedy_order as greedy_order
from remat_cli.algorithms.segments import schedule_from_sequence
from remat_cli.strategies.base import NoOptions, RunContext, Strategy, StrategyResult


__all__ = ["STRATEGY", "StoreAllPlan", "store_all_plan", "store_all_if_fits", "store_all_schedule", "memory_greedy_order"]


@dataclass(frozen=True, eq=False)
class StoreAllPlan:
    """The store-all schedule, the name of the order it follows, and its simulated metrics."""

    schedule: Schedule
    order: str
    metrics: Metrics


def store_all_plan(graph: Graph) -> StoreAllPlan:
    """The lowest-peak store-all schedule among the candidate orders, measured once by the
    simulator (callers need its peak: keep the metrics instead of replaying it again).

    Computed once per graph: the graph is immutable, so the plan is cached on it as
    ``functools.cached_property`` caches Graph's own derived facts; the planner, ``auto``
    and every strategy it runs share it.
    """
    return graph.derived("_store_all_plan", lambda: _best_store_all(graph))


def _best_store_all(graph: Graph) -> StoreAllPlan:
    candidates = {
        "file order": graph.needed_nodes.tolist(),
        "memory-greedy": memory_greedy_order(graph),
    }
    best: StoreAllPlan | None = None
    for name, order in candidates.items():
        schedule = schedule_from_sequence(graph, order)
        result = simulate(graph, schedule)
        assert result.metrics is not None, f"store-all ({name}) produced {result.error}"
        if best is None or result.metrics.peak_bytes < best.metrics.peak_bytes:
            best = StoreAllPlan(schedule, name, result.metrics)
    assert best is not None
    return best


def store_all_schedule(graph: Graph) -> tuple[Schedule, str]:
    """The lowest-peak store-all schedule and the order's name (see :func:`store_all_plan`)."""
    best = store_all_plan(graph)
    return best.schedule, best.order


def memory_greedy_order(graph: Graph) -> list[int]:
    """Topological order of the needed nodes that always runs the ready node whose step
    changes resident memory the least (its output minus the inputs it frees); ties go to
    the earlier node in file order (:func:`remat_cli.algorithms.orders.memory_greedy_order`).
    """
    needed = set(graph.needed_nodes.tolist())
    return greedy_order(needed, graph.pred_lists, graph.succ_lists, graph.mem.tolist(), graph.topo_rank.tolist())


def store_all_if_fits(graph: Graph, budget: int | None) -> StoreAllPlan | None:
    """The store-all plan when it fits ``budget`` (None: no budget), else None. It costs the
    base cost, which no schedule beats, so the budget-driven strategies return it then."""
    store = store_all_plan(graph)
    return store if budget is None or store.metrics.peak_bytes <= budget else None


def _run(graph: Graph, budget: int | None, options: NoOptions, context: RunContext) -> StrategyResult:
    best = store_all_plan(graph)
    keep = tuple(int(v) for v in graph.needed_nodes if graph.kinds[v] == "forward")
    return StrategyResult(best.schedule, {"order": best.order}, keep or None)


STRATEGY = Strategy(
    name="store-all",
    summary="No rematerialization: every needed node once, in a memory-aware topological "
    "order, each value freed after its last use. The reference for `x` budgets.",
    solve=_run,
    uses_budget=False,
    reference="",
)
