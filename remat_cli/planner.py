"""Run a strategy against a budget and return a validated :class:`~remat_cli.plan.Plan`.

This is the one door between strategies and reports: every schedule passes the simulator
here, and a plan above its budget is never returned as if it fit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from remat_cli.budget import Budget
from remat_cli.errors import InvalidScheduleError, NoPlanError
from remat_cli.graph import Graph
from remat_cli.plan import Plan
from remat_cli.report.units import fmt_bytes
from remat_cli.simulate import simulate
from remat_cli.strategies import Strategy, get_strategy
from remat_cli.strategies.store_all import store_all_plan

__all__ = ["make_plan", "store_all_peak", "resolve_budget", "check_lower_bound"]


def store_all_peak(graph: Graph) -> int:
    """Peak of the store-all plan: the reference for relative budgets."""
    return store_all_plan(graph).metrics.peak_bytes


def resolve_budget(graph: Graph, budget: Budget | int | None, reference_peak: int | None = None) -> int | None:
    """Budget in bytes for ``graph`` (relative budgets against the store-all peak)."""
    if budget is None or isinstance(budget, int):
        return budget
    if budget.ratio is not None and reference_peak is None:
        reference_peak = store_all_peak(graph)
    return budget.resolve(reference_peak or 0)


def check_lower_bound(graph: Graph, budget_bytes: int | None) -> None:
    """Refuse a budget below LB, naming the node that forces LB (exit 1)."""
    if budget_bytes is not None and budget_bytes < graph.lb:
        v = graph.lb_node
        raise NoPlanError(
            f"budget {fmt_bytes(budget_bytes)} ({budget_bytes} B) is below the lower bound "
            f"{fmt_bytes(graph.lb)} ({graph.lb} B): node {graph.ids[v]!r} ({graph.ops[v] or 'op'}) "
            "needs its inputs, its output and its workspace resident at once"
            + (f", on top of {fmt_bytes(graph.fixed_mem)} fixed memory" if graph.fixed_mem else ""),
            min_budget=graph.lb,
        )


def make_plan(
    graph: Graph,
    strategy: str | Strategy,
    budget: Budget | int | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    reference_peak: int | None = None,
) -> Plan:
    """Plan ``graph`` with ``strategy`` under ``budget``; validated, never over budget.

    ``strategy`` is a registered name or a :class:`Strategy` object (sweeps and tests
    pass objects). Raises :class:`NoPlanError` (exit 1) when the budget is below LB or
    the strategy cannot meet it. ``options["time_limit"]`` (seconds) becomes a deadline
    that anytime strategies (auto, treewidth, pathwidth) honour by returning the best
    plan found by then; ``options["progress"](done, total, label)`` hears how it goes.
    """
    strat = strategy if isinstance(strategy, Strategy) else get_strategy(strategy)
    strategy = strat.name
    if reference_peak is None:
        reference_peak = store_all_peak(graph)
    budget_bytes = resolve_budget(graph, budget, reference_peak)
    check_lower_bound(graph, budget_bytes)
    started = time.perf_counter()
    opts = dict(options or {})
    if opts.get("time_limit") is not None and "deadline" not in opts:  # anytime strategies
        opts["deadline"] = started + float(opts["time_limit"])
    result = strat.run(graph, budget_bytes, opts)
    solve_seconds = time.perf_counter() - started
    sim = simulate(graph, result.schedule)
    if sim.error is not None:
        raise InvalidScheduleError(
            f"internal error: strategy {strategy!r} produced an invalid schedule "
            f"({sim.error}); please report this with the graph file"
        )
    assert sim.metrics is not None
    if budget_bytes is not None and sim.metrics.peak_bytes > budget_bytes:
        raise NoPlanError(
            f"{strategy} cannot fit budget {fmt_bytes(budget_bytes)} ({budget_bytes} B): "
            f"its plan peaks at {fmt_bytes(sim.metrics.peak_bytes)} ({sim.metrics.peak_bytes} B)"
            + ("" if strat.uses_budget else "; it ignores budgets, so that is the smallest it can meet"),
            min_budget=None if strat.uses_budget else sim.metrics.peak_bytes,
        )
    return Plan(
        graph=graph,
        strategy=strategy,
        budget_bytes=budget_bytes,
        schedule=result.schedule,
        metrics=sim.metrics,
        solve_seconds=solve_seconds,
        store_all_peak=reference_peak,
        keep=result.keep,
        info=dict(result.info),
    )
