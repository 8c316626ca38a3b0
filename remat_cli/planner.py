"""Run a strategy against a budget and return a validated :class:`~remat_cli.plandoc.Plan`.

This is the one door between strategies and reports: every schedule passes the simulator
here, and a plan above its budget is never returned as if it fit.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from remat_cli.budget import Budget
from remat_cli.errors import InvalidScheduleError, NoPlanError
from remat_cli.graph import Graph
from remat_cli.plandoc import Plan
from remat_cli.units import fmt_bytes, fmt_bytes_exact, shell_word
from remat_cli.simulate import simulate
from remat_cli.strategies import REGISTRY, STRATEGIES, RunContext, Strategy, get_strategy
from remat_cli.strategies.base import folding_sinks
from remat_cli.strategies.store_all import store_all_plan

__all__ = ["make_plan", "store_all_peak", "resolve_budget", "check_lower_bound", "ratio_at_least", "activation_at_least", "search_seconds"]


def store_all_peak(graph: Graph) -> int:
    """Peak of the store-all plan: the reference for relative budgets."""
    return store_all_plan(graph).metrics.peak_bytes


def resolve_budget(graph: Graph, budget: Budget | int | None, reference_peak: int | None = None) -> int | None:
    """Budget in bytes for ``graph`` (ratios of the store-all peak; activation fractions
    between the lower bound and the store-all peak)."""
    if budget is None or isinstance(budget, int):
        return budget
    if (budget.ratio is not None or budget.activation is not None) and reference_peak is None:
        reference_peak = store_all_peak(graph)
    return budget.resolve(reference_peak or 0, graph.lb)


def check_lower_bound(graph: Graph, budget_bytes: int | None) -> None:
    """Refuse a budget below LB, naming the node that forces LB (exit 1)."""
    if budget_bytes is not None and budget_bytes < graph.lb:
        v = graph.lb_node
        raise NoPlanError(
            f"budget {fmt_bytes_exact(budget_bytes)} is below the lower bound "
            f"{fmt_bytes_exact(graph.lb)}: node {graph.ids[v]!r} ({graph.ops[v] or 'op'}) "
            "needs its inputs, its output and its workspace resident at once"
            + (f", on top of {fmt_bytes(graph.fixed_mem)} fixed memory" if graph.fixed_mem else ""),
            min_budget=graph.lb,
        )


def make_plan(
    graph: Graph,
    strategy: str | Strategy,
    budget: Budget | int | None = None,
    options: Any = None,
    *,
    context: RunContext | None = None,
    reference_peak: int | None = None,
    find_smallest: bool = False,
    searched: bool = False,
    graph_file: str = "GRAPH",
) -> Plan:
    """Plan ``graph`` with ``strategy`` under ``budget``; validated, never over budget.

    ``strategy`` is a registered name or a :class:`Strategy` object (sweeps and tests
    pass objects). Raises :class:`NoPlanError` (exit 1) when the budget is below LB or
    the strategy cannot meet it. With ``find_smallest``, that error names the smallest
    budget :func:`remat_cli.sweep.smallest_budget` found a plan for (its ``min_budget``;
    ``None`` when none was found), as ratios too, and what to run next (on ``graph_file``).
    ``searched``: the caller searches after a failure itself (:func:`with_smallest`). Either
    way the strategy may make the search's first probe below the failure ahead
    (``RunContext.probe_next``).

    ``options``: the strategy's options (its dataclass, or a mapping of their names; an
    unknown name is bad usage naming the strategy). ``context``: the run-wide
    :class:`RunContext`; its ``time_limit`` (seconds) becomes a deadline that anytime
    strategies (auto, treewidth, pathwidth) honour by returning the best plan found by
    then, and its ``progress(done, total, label)`` hears how it goes. A mapping of options
    may also hold the context's fields by name (``{"time_limit": 10}``).
    """
    strat = strategy if isinstance(strategy, Strategy) else get_strategy(strategy)
    opts, ctx = strat.split(options, context)
    if reference_peak is None:
        reference_peak = store_all_peak(graph)
    budget_bytes = resolve_budget(graph, budget, reference_peak)
    if (find_smallest or searched) and budget_bytes is not None and ctx.probe_next is None:
        ctx = replace(ctx, probe_next=search_ahead(graph, strat, reference_peak))
    started = time.perf_counter()
    try:
        return _make_plan(graph, strat, budget_bytes, opts, ctx, reference_peak)
    except NoPlanError as exc:
        if not find_smallest or budget_bytes is None:
            raise
        spent = time.perf_counter() - started
        raise _with_smallest(graph, strat, exc, budget_bytes, opts, ctx, reference_peak, graph_file, spent) from None


def search_ahead(graph: Graph, strat: Strategy, reference_peak: int) -> Callable[[int], int | None]:
    """``RunContext.probe_next`` for a plan whose failure is searched (``find_smallest``, or
    :func:`with_smallest` after it): the search's probe after the failure's smallest budget."""
    from remat_cli.sweep import probe_after

    return lambda hint: probe_after(graph, strat, reference_peak, hint)


def _make_plan(graph: Graph, strat: Strategy, budget_bytes: int | None, opts: Any, ctx: RunContext, reference_peak: int) -> Plan:
    strategy = strat.name
    check_lower_bound(graph, budget_bytes)
    started = time.perf_counter()
    if ctx.time_limit is not None and ctx.deadline is None:  # anytime strategies
        ctx = replace(ctx, deadline=started + float(ctx.time_limit))
    result = strat.solve(graph, budget_bytes, opts, ctx)
    solve_seconds = time.perf_counter() - started
    sim = simulate(graph, result.schedule)
    if sim.error is not None:
        raise InvalidScheduleError(
            f"internal error: strategy {strategy!r} produced an invalid schedule ({sim.error}); please report this with the graph file"
        )
    assert sim.metrics is not None
    if budget_bytes is not None and sim.metrics.peak_bytes > budget_bytes:
        raise NoPlanError(
            f"{strategy} cannot fit budget {fmt_bytes_exact(budget_bytes)}: "
            f"its plan peaks at {fmt_bytes_exact(sim.metrics.peak_bytes)}"
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


def ratio_at_least(nbytes: int, store_all: int) -> float | None:
    """The smallest 3-decimal ``x`` ratio whose budget (``Budget.resolve``) is >= ``nbytes``."""
    if store_all <= 0:
        return None
    r = math.ceil(nbytes * 1000 / store_all) / 1000
    while Budget("", ratio=r).resolve(store_all) < nbytes:  # float rounding
        r = round(r + 0.001, 3)
    return r


def activation_at_least(nbytes: int, store_all: int, lower_bound: int) -> float | None:
    """The smallest 3-decimal ``act`` fraction whose budget is >= ``nbytes`` (None if LB = peak)."""
    if store_all <= lower_bound:
        return None
    f = max(0.0, math.ceil((nbytes - lower_bound) * 1000 / (store_all - lower_bound)) / 1000)
    while (Budget("", activation=f).resolve(store_all, lower_bound) or 0) < nbytes:
        f = round(f + 0.001, 3)
    return f


def _forms(graph: Graph, nbytes: int, store_all: int) -> str:
    """``1.20 GiB (1288490188 B, 0.650x, 0.120act)``: ratios rounded up, so they resolve
    to at least ``nbytes`` when typed back."""
    ratio = ratio_at_least(nbytes, store_all)
    act = activation_at_least(nbytes, store_all, graph.lb)
    forms = [f"{nbytes} B"] + ([f"{ratio:.3f}x"] if ratio is not None else []) + ([f"{act:.3f}act"] if act is not None else [])
    return f"{fmt_bytes(nbytes)} ({', '.join(forms)})"


#: Longest the search for the smallest budget may take after a plan fails (seconds; less
#: with a smaller --time-limit). Within that, it is proportionate to the failed attempt:
#: at most SEARCH_FACTOR times the seconds that attempt took, and never less than
#: MIN_SEARCH_SECONDS (the user waits for an error message; each probe is a whole plan).
SEARCH_SECONDS = 20.0
SEARCH_FACTOR = 0.5
MIN_SEARCH_SECONDS = 2.0


def search_seconds(attempt_seconds: float, time_limit: float | None) -> float:
    """How long the smallest-budget search may take after an attempt of ``attempt_seconds``
    failed, under ``time_limit`` (None: none given)."""
    limit = min(SEARCH_SECONDS, max(MIN_SEARCH_SECONDS, SEARCH_FACTOR * attempt_seconds))
    return min(limit, float(time_limit)) if time_limit else limit


#: Strategies whose module defines a ``FIT_PROBE``: the strategy run only to answer whether
#: it fits a budget (the first candidate found to fit), which the search probes instead.
FIT_PROBES = ("treewidth", "pathwidth")


def _fit_probe(strat: Strategy) -> Strategy | None:
    """The registered ``strat``'s fit probe, made as the registry makes the strategy (its
    graph folded where the registry folds it); None for any other strategy."""
    if strat.name not in FIT_PROBES or strat.name not in REGISTRY or STRATEGIES[strat.name] is not strat:
        return None
    module, _, fold = REGISTRY[strat.name]
    probe: Strategy = importlib.import_module(f"remat_cli.strategies.{module}").FIT_PROBE
    return replace(strat, solve=folding_sinks(probe.solve) if fold else probe.solve)


def with_smallest(
    graph: Graph,
    strategy: str | Strategy,
    budget: Budget | int | None,
    exc: NoPlanError,
    options: Any = None,
    *,
    context: RunContext | None = None,
    reference_peak: int | None = None,
    graph_file: str = "GRAPH",
    spent: float = 0.0,
) -> NoPlanError:
    """``exc``, the error of a plan of ``graph`` that failed (``spent`` seconds), restated
    as ``make_plan(..., find_smallest=True)`` raises it: with the smallest budget the search
    found. For a caller that already made the failed plan (``remat check``): it is not made
    again, and the search reuses what that plan kept on the graph."""
    strat = strategy if isinstance(strategy, Strategy) else get_strategy(strategy)
    opts, ctx = strat.split(options, context)
    if reference_peak is None:
        reference_peak = store_all_peak(graph)
    budget_bytes = resolve_budget(graph, budget, reference_peak)
    if budget_bytes is None:
        return exc
    return _with_smallest(graph, strat, exc, budget_bytes, opts, ctx, reference_peak, graph_file, spent)


def _with_smallest(
    graph: Graph,
    strat: Strategy,
    exc: NoPlanError,
    budget_bytes: int,
    options: Any,
    context: RunContext,
    reference_peak: int,
    graph_file: str,
    spent: float = 0.0,
) -> NoPlanError:
    """``exc`` restated with the smallest budget the search found, in bytes and ratios."""
    from remat_cli.sweep import searchable, smallest_budget

    asked = f"budget {fmt_bytes(budget_bytes)} ({budget_bytes} B"
    if reference_peak > 0:
        asked += f", {budget_bytes / reference_peak:.3f}x of the store-all peak {fmt_bytes(reference_peak)}"
    asked += ")"
    if budget_bytes < graph.lb:
        v = graph.lb_node
        head = (
            f"{asked} is below the lower bound {_forms(graph, graph.lb, reference_peak)}: node "
            f"{graph.ids[v]!r} ({graph.ops[v] or 'op'}) needs its inputs, its output and its workspace resident at once"
            + (
                f", on top of {fmt_bytes(graph.fixed_mem)} fixed memory (an x budget counts it, an act budget does not)"
                if graph.fixed_mem
                else ""
            )
        )
    else:
        head = f"{strat.name} cannot fit {asked}"
    hint = f"; compare strategies: remat tradeoff {shell_word(graph_file)}"
    if not searchable(strat):  # a slow strategy: its own words, not searched
        return NoPlanError(head + (f"; {exc.message}" if budget_bytes >= graph.lb else "") + hint, min_budget=None)
    # bounded: the user is waiting for an error message (each probe is a whole plan)
    limit = search_seconds(spent, context.time_limit)
    begun = time.perf_counter()
    full: Strategy | None = None  # the strategy itself, where its probes are fit probes
    if strat.name == "auto":  # its probes ask only whether some candidate fits
        from remat_cli.strategies.auto import FIT_PROBE

        probed = FIT_PROBE
    else:
        probed = _fit_probe(strat) or strat
        full = strat if probed is not strat else None
    found = smallest_budget(
        graph,
        probed,
        options,
        full=full,
        context=replace(context, probe_next=None),  # (its probes are not searched)
        reference_peak=reference_peak,
        deadline=begun + limit,
        hint=None if budget_bytes < graph.lb else exc.min_budget,
        failing_seconds=spent,
        guess=graph.lb if budget_bytes < graph.lb else None,  # (below it, exc names it)
    )
    if found.foreseen:  # stopped before its limit: the seconds it took, and why
        stop = (
            f"; the search stopped after {time.perf_counter() - begun:.1f} s of its {limit:.1f} s"
            f" (a failed plan took {spent:.1f} s, so its next probe was not started), so a smaller one may fit"
        )
    else:
        stop = f"; the search stopped after {limit:.1f} s, so a smaller one may fit"
    if found.budget_bytes is None:
        tail = f"; {strat.name} found no plan even at the store-all peak"
    elif found.exact:
        tail = f"; the smallest budget {strat.name} meets is {_forms(graph, found.budget_bytes, reference_peak)}"
        if found.budget_bytes == graph.lb and strat.uses_budget:
            tail += ", the lower bound itself"
    else:
        if found.failed_bytes is not None:
            below = f"none at {fmt_bytes(found.budget_bytes - found.failed_bytes)} less"
        elif found.complete:
            below = "within that of the lower bound"
        else:
            below = "no smaller budget was tried to the end"
        tail = (
            f"; the smallest budget {strat.name} was found to meet is {_forms(graph, found.budget_bytes, reference_peak)}"
            f" (a search in steps of {fmt_bytes(found.tolerance_bytes)}: {below}"
            + ("" if found.monotone else f"; {strat.name} can fit a budget and fail a larger one, so a smaller one may fit")
            + ("" if found.complete else stop)
            + ")"
        )
    return NoPlanError(head + tail + hint, min_budget=found.budget_bytes)
