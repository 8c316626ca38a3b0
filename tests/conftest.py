"""Shared test helpers: a small budget-aware strategy built only for the report tests.

The real strategies live in ``remat_cli/strategies``; the report code must work with any
of them, so its tests inject this one instead of depending on which are registered.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import pytest

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.schedule import Schedule, ScheduleBuilder
from remat_cli.simulate import simulate
from remat_cli.strategies import Strategy, StrategyResult
from remat_cli.strategies.store_all import memory_greedy_order

sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))


def drop_schedule(graph: Graph, order: list[int], dropped: set[int]) -> Schedule:
    """Run ``order``; values in ``dropped`` are freed right after the step that made them
    and recomputed on demand (recursively) whenever a later step reads them again."""
    preds = graph.pred_lists
    pos = {v: k for k, v in enumerate(order)}
    last = {v: k for k, v in enumerate(order)}
    for k, v in enumerate(order):
        for u in preds[v]:
            last[u] = max(last[u], k)
    resident: set[int] = set()
    b = ScheduleBuilder()

    def make(v: int) -> None:
        for u in preds[v]:
            if u not in resident:
                make(u)
        b.compute(v)
        resident.add(v)

    for k, v in enumerate(order):
        make(v)
        for u in sorted(resident):
            if last[u] <= k or (u in dropped and pos[u] <= k):
                b.free(u)
                resident.discard(u)
    return b.build()


def _every_kth_run(graph: Graph, budget: int | None, options: Mapping[str, Any]) -> StrategyResult:
    """Keep every k-th forward value, recompute the rest; the cheapest k that fits."""
    order = memory_greedy_order(graph)
    forward = [v for v in order if graph.kinds[v] in ("forward", "")]
    best: tuple[float, int, Schedule, int] | None = None
    for k in range(1, len(forward) + 1):
        dropped = {v for i, v in enumerate(forward) if i % k != k - 1} if k > 1 else set()
        sched = drop_schedule(graph, order, dropped)
        m = simulate(graph, sched).metrics
        assert m is not None
        if budget is None or m.peak_bytes <= budget:
            if best is None or (m.cost, m.peak_bytes) < (best[0], best[1]):
                best = (m.cost, m.peak_bytes, sched, k)
            if budget is None:
                break
    if best is None:
        raise NoPlanError("every-kth: no spacing fits the budget")
    return StrategyResult(best[2], {"k": best[3]})


EVERY_KTH = Strategy(
    name="every-kth",
    summary="test only: keep every k-th forward value, recompute the rest on demand",
    run=_every_kth_run,
    uses_budget=True,
)


@pytest.fixture
def every_kth() -> Strategy:
    return EVERY_KTH
