"""auto: run every fast strategy and keep the cheapest plan that fits the budget.

Each candidate is replayed by the simulator here, so a strategy that misjudges its peak
cannot win. Ties on cost go to the lower peak, then to the registry's order. The three
cheapest fitting plans are then polished by twremat's memory-limit pass
(:mod:`remat_cli.strategies.evict`); a polished plan wins only if it replays within the
budget and costs less.
"""

from __future__ import annotations

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
    fitting: list[tuple[float, int, int, str, StrategyResult]] = []
    for rank, strat in enumerate(fast_strategies()):
        if strat.name == STRATEGY.name:
            continue
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
        fitting.append(key)
        if best is None or key[:3] < best[:3]:
            best = key
    if best is None:
        floor = min(floors) if floors else None
        raise NoPlanError(
            f"auto: no strategy fits budget {fmt_bytes(budget or 0)} ({budget} B)"
            + (f"; the smallest budget one of them meets is {fmt_bytes(floor)} ({floor} B)" if floor else ""),
            min_budget=floor,
        )
    best = _polish(graph, budget, fitting, best)
    name, result = best[3], best[4]
    info = {"winner": name, **{f"{k}": v for k, v in result.info.items()}, "tried": ", ".join(f"{k} {v}" for k, v in tried.items())}
    return StrategyResult(result.schedule, info, result.keep)


def _polish(graph: Graph, budget: int | None, fitting: list, best: tuple) -> tuple:
    """Run twremat's memory-limit pass (:mod:`remat_cli.strategies.evict`) at the budget over
    the three cheapest fitting plans that recompute: it only drops computes and keeps
    what the budget allows, so a result that replays within the budget can only be
    cheaper. Returns the cheapest of ``best`` and the polished plans."""
    if budget is None:
        return best
    from remat_cli.strategies.evict import memlimit_pass

    for cost, _, rank, name, result in sorted(fitting, key=lambda k: k[:3])[:3]:
        schedule = memlimit_pass(graph, result.schedule, budget)
        m = simulate(graph, schedule).metrics
        if m is None or m.peak_bytes > budget or m.cost >= cost:
            continue
        info = {**result.info, "polished": f"memory-limit pass: cost {m.cost / cost - 1:+.2%} on {name}'s plan"}
        key = (m.cost, m.peak_bytes, rank, name, StrategyResult(schedule, info, None))
        if key[:3] < best[:3]:
            best = key
    return best


STRATEGY = Strategy(
    name="auto",
    summary="Runs every fast strategy and returns the cheapest plan within the budget, naming the winner.",
    run=_run,
    uses_budget=True,
    fast=False,
    reference="",
)
