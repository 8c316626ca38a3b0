"""auto: run every fast strategy and keep the cheapest plan that fits the budget.

Each candidate is replayed by the simulator here, so a strategy that misjudges its peak
cannot win. Ties on cost go to the lower peak, then to the registry's order.

Work is shared: the store-all plan is computed once per graph, and the decompositions
once per run (``options["shared"]``). Candidates stop as soon as none can win: when a
plan costs the base cost (each needed node once), no plan is cheaper. Anytime: with
``options["deadline"]`` (``time.perf_counter()`` seconds; the planner sets it from
``time_limit``) the strategies not started by then are skipped and named, and the
cheapest plan found so far is returned. ``options["progress"]`` hears of each strategy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from remat_cli.errors import NoPlanError, RematError
from remat_cli.graph import Graph
from remat_cli.report.units import fmt_bytes
from remat_cli.simulate import simulate
from remat_cli.strategies.base import Strategy, StrategyResult

__all__ = ["STRATEGY"]


def _run(graph: Graph, budget: int | None, options: Mapping[str, Any]) -> StrategyResult:
    from remat_cli.strategies import fast_strategies  # the registry imports this module

    best: tuple[float, int, int, str, StrategyResult] | None = None
    tried: dict[str, str] = {}
    floors: list[int] = []
    options = dict(options)
    if not isinstance(options.get("shared"), dict):
        options["shared"] = {}  # decompositions computed once for treewidth and pathwidth
    deadline = options.get("deadline")
    progress = options.get("progress")
    base = graph.base_cost
    candidates = [s for s in fast_strategies() if s.name != STRATEGY.name]
    for rank, strat in enumerate(candidates):
        if best is not None and best[0] <= base:
            tried[strat.name] = "skipped (a plan at the base cost already fits)"
            continue
        if deadline is not None and time.perf_counter() > deadline and best is not None:
            tried[strat.name] = "skipped (time limit)"
            continue
        if progress is not None:
            progress(rank, len(candidates), f"auto: {strat.name}")
        try:
            result = strat.run(graph, budget, options)
        except NoPlanError as exc:
            tried[strat.name] = "no fit"
            if exc.min_budget is not None:
                floors.append(exc.min_budget)
            continue
        except RematError as exc:  # a strategy that cannot handle this graph
            tried[strat.name] = f"failed: {exc.message}"
            continue
        sim = simulate(graph, result.schedule)
        if sim.metrics is None:
            tried[strat.name] = f"invalid ({sim.error})"
            continue
        m = sim.metrics
        if budget is not None and m.peak_bytes > budget:
            tried[strat.name] = f"over budget ({fmt_bytes(m.peak_bytes)})"
            floors.append(m.peak_bytes)
            continue
        tried[strat.name] = f"{m.overhead:+.2%}"
        key = (m.cost, m.peak_bytes, rank, strat.name, result)
        if best is None or key[:3] < best[:3]:
            best = key
    if best is None:
        floor = min(floors) if floors else None
        raise NoPlanError(
            f"auto: no strategy fits budget {fmt_bytes(budget or 0)} ({budget} B)"
            + (f"; the smallest budget one of them meets is {fmt_bytes(floor)} ({floor} B)" if floor else ""),
            min_budget=floor,
        )
    name, result = best[3], best[4]
    info = {"winner": name, **{f"{k}": v for k, v in result.info.items()}, "tried": ", ".join(f"{k} {v}" for k, v in tried.items())}
    return StrategyResult(result.schedule, info, result.keep)


STRATEGY = Strategy(
    name="auto",
    summary="Runs every fast strategy and returns the cheapest plan within the budget, naming the winner.",
    run=_run,
    uses_budget=True,
    fast=False,
    reference="",
)
