"""The search for the smallest budget after a failed plan (planner._with_smallest):
proportionate to the attempt, it starts from what the attempt said, a probe cut short by
the deadline is not counted as a failure, and auto's second process hands back the facts
it derived from the graph so that the probes after the attempt do not derive them again."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from remat_cli import generators as G
from remat_cli import planner
from remat_cli.errors import NoPlanError
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import auto, min_memory
from remat_cli.strategies.base import Strategy, StrategyResult
from remat_cli.strategies.store_all import store_all_plan
from remat_cli.sweep import search_tolerance, smallest_budget
from remat_cli.training import checkmate_training_graph
from remat_cli.units import fmt_bytes


def _graph(n: int = 12, seed: int = 3):
    rng = np.random.default_rng(seed)
    return checkmate_training_graph(G.skip_chain(n, skip=3, mem=rng.integers(1, 9, n), cost=rng.integers(1, 9, n).astype(float)))


def test_the_search_probes_the_budget_the_failed_attempt_named_first(monkeypatch):
    """treewidth's failure names the peak of its smallest plan; the search probes it right
    after the store-all peak (before, it bisected from the lower bound first)."""
    g = _graph()
    budgets = _budgets_planned(monkeypatch)
    with pytest.raises(NoPlanError) as info:
        make_plan(g, "treewidth", g.lb, find_smallest=True)
    stated = _stated(g)
    assert stated is not None and stated > g.lb
    tol = search_tolerance(store_all_peak(g))
    snapped = g.lb + -(-(stated - g.lb) // tol) * tol
    assert budgets[:3] == [g.lb, store_all_peak(g), min(snapped, store_all_peak(g))]
    assert info.value.min_budget is not None and info.value.min_budget <= stated
    plan = make_plan(g, "treewidth", info.value.min_budget)
    assert simulate(g, plan.schedule).metrics.peak_bytes <= info.value.min_budget


def test_a_stated_budget_that_fits_is_checked_from_just_below(monkeypatch):
    """Where the budget the failed attempt named fits, the grid point just below it is the
    next probe (a monotone strategy); when that fails, the search is over: no bisection up
    from the lower bound, and the error says none fits one step less."""
    g = _graph()
    stated = _stated(g)
    tol = search_tolerance(store_all_peak(g))
    assert stated is not None and stated - tol >= g.lb  # (the graph leaves room below it)
    budgets = _budgets_planned(monkeypatch)
    with pytest.raises(NoPlanError) as info:
        make_plan(g, "treewidth", g.lb, find_smallest=True)
    snapped = min(g.lb + -(-(stated - g.lb) // tol) * tol, store_all_peak(g))
    found = info.value.min_budget
    assert found is not None and budgets[2] == snapped and budgets[3] == snapped - tol
    if found == snapped:  # the stated budget was the smallest: settled in two probes after it
        assert len(budgets) <= 5 and f"none at {fmt_bytes(tol)} less" in info.value.message  # (5th: its plan's own peak)
    assert found == smallest_budget(g, "treewidth").budget_bytes  # the plain bisection's answer


def _budgets_planned(monkeypatch) -> list[int | None]:
    """The budgets of the plans made from now on, in order (each probe of a search is one)."""
    budgets: list[int | None] = []
    real = planner._make_plan

    def spy(graph, strat, budget, *args):
        budgets.append(budget)
        return real(graph, strat, budget, *args)

    monkeypatch.setattr(planner, "_make_plan", spy)
    return budgets


def _stated(g) -> int | None:
    """The smallest budget treewidth's failure at the lower bound names (no search)."""
    try:
        make_plan(g, "treewidth", g.lb)
    except NoPlanError as exc:
        return exc.min_budget
    return None


def test_a_probe_cut_short_by_the_deadline_is_not_a_failure():
    """A strategy that fits at once from some budget up and, below it, only stops at its
    deadline: the search says it stopped, and names no failed budget."""
    g = _graph()
    peak = store_all_peak(g)
    enough = (g.lb + peak) // 2
    store = store_all_plan(g)

    def solve(graph, budget, options, context):
        if budget is None or budget >= peak:
            return StrategyResult(store.schedule)
        if budget >= enough:
            raise NoPlanError("costly", min_budget=peak)  # (it still fits only at the peak)
        while context.deadline is not None and time.perf_counter() < context.deadline:
            time.sleep(0.01)
        raise NoPlanError("stopped at its deadline")

    strat = Strategy(name="slow-below", summary="test", solve=solve, uses_budget=True)
    found = smallest_budget(g, strat, reference_peak=peak, deadline=time.perf_counter() + 0.5)
    assert not found.complete and found.budget_bytes == peak
    assert found.failed_bytes is None or found.failed_bytes >= enough  # never a cut-short probe


def test_the_search_is_proportionate_to_the_attempt():
    assert planner.search_seconds(0.0, None) == planner.MIN_SEARCH_SECONDS
    assert planner.search_seconds(10.0, None) == pytest.approx(planner.SEARCH_FACTOR * 10.0)
    assert planner.SEARCH_FACTOR < 1.0  # less than the attempt itself took
    assert planner.search_seconds(1e6, None) == planner.SEARCH_SECONDS


def test_the_second_process_hands_back_min_memorys_variants(monkeypatch):
    """min-memory runs in the second process while this one is held up in a failing dtr;
    its variants (budget-independent) come back and are kept on this process's graph, so
    the plans after it (a search for the smallest budget) do not make them again."""
    from dataclasses import replace
    from pathlib import Path

    import remat_cli.strategies as registry
    from remat_cli.loaders import load_graph

    real = registry.fast_strategies
    dtr = next(s for s in real() if s.name == "dtr")

    def slow_dtr(graph, budget, options, context):
        time.sleep(3.0)  # as test_auto_speed: the second process reaches min-memory first
        return dtr.solve(graph, budget, options, context)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [replace(s, solve=slow_dtr) if s is dtr else s for s in real()])
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    g = load_graph(Path(__file__).resolve().parent.parent / "sample_graphs" / "random_dag.twremat.txt")
    budget = int(0.5 * store_all_peak(g))
    assert "_min_memory_variants" not in g.derived_items(lambda k: True)
    made: list[int] = []
    real_variants = min_memory._variants

    def counting(graph, *args):  # (graph, out, deadline) since min-memory's deadline
        made.append(1)
        return real_variants(graph, *args)

    monkeypatch.setattr(min_memory, "_variants", counting)
    plan = make_plan(g, "auto", budget, {"parallel": True})
    assert plan.info["winner"] == "min-memory" and not made  # made in the second process
    kept = g.derived_items(lambda k: k == "_min_memory_variants")
    assert kept, "min-memory's variants were not handed back"
    again = make_plan(g, "auto", budget, {"parallel": False})  # here: no new variants
    assert not made
    assert again.schedule.ops.tolist() == plan.schedule.ops.tolist() and again.schedule.nodes.tolist() == plan.schedule.nodes.tolist()
    assert simulate(g, again.schedule).metrics.peak_bytes <= budget


def _slow_below(g, peak: int, calls: list[int], failing: float) -> Strategy:
    """Fits at once at the store-all peak and above; below it fails after ``failing`` s."""
    store = store_all_plan(g)

    def solve(graph, budget, options, context):
        if budget is None or budget >= peak:
            return StrategyResult(store.schedule)
        calls.append(budget)
        time.sleep(failing)
        raise NoPlanError("it fails below the peak")

    return Strategy(name="slow-below", summary="test", solve=solve, uses_budget=True, fast=True)


def test_a_probe_that_would_be_cut_short_is_not_started():
    """A plan of the strategy took longer to fail than the search has left: the search
    starts no bisection probe (it would be cut short at the deadline and tell nothing),
    says so (``foreseen``), and names the budget it found."""
    g = _graph()
    peak = store_all_peak(g)
    calls: list[int] = []
    strat = _slow_below(g, peak, calls, 0.0)
    found = smallest_budget(g, strat, reference_peak=peak, deadline=time.perf_counter() + 30.0, failing_seconds=60.0)
    assert calls == [] and found.foreseen and not found.complete and found.budget_bytes == peak
    done = smallest_budget(g, strat, reference_peak=peak, deadline=time.perf_counter() + 30.0, failing_seconds=0.0)
    assert calls and done.complete and not done.foreseen and done.failed_bytes is not None


def test_the_plan_error_says_the_search_stopped_before_its_limit(monkeypatch):
    """The failed attempt took longer than the search may: the message gives the seconds
    the search took, within its limit, and why it stopped."""
    g = _graph()
    peak = store_all_peak(g)
    calls: list[int] = []
    monkeypatch.setattr(planner, "MIN_SEARCH_SECONDS", 0.2)
    strat = _slow_below(g, peak, calls, 0.5)
    with pytest.raises(NoPlanError) as info:
        make_plan(g, strat, g.lb, find_smallest=True)
    message = info.value.message
    assert calls == [g.lb] and info.value.min_budget == peak
    took = re.search(r"the search stopped after ([0-9.]+) s of its ([0-9.]+) s", message)
    assert "its next probe was not started" in message and took is not None
    assert float(took[1]) <= float(took[2]) + 0.05  # (each rounded to a tenth)


@pytest.mark.parametrize("seed", range(3))
def test_auto_fit_probe_fits_exactly_where_auto_fits(seed):
    """The search's probe of auto (the first candidate plan that fits, unpolished) fits a
    budget exactly when auto does, within it (simulated), at six budgets of the range."""
    g = _graph(14, seed)
    peak = store_all_peak(g)
    for frac in np.linspace(0.0, 1.0, 6):
        budget = g.lb + int(frac * (peak - g.lb))
        try:
            full = make_plan(g, "auto", budget)
        except NoPlanError:
            full = None
        try:
            probe = make_plan(g, auto.FIT_PROBE, budget)
        except NoPlanError:
            probe = None
        assert (full is None) == (probe is None), budget
        if probe is not None:
            m = simulate(g, probe.schedule).metrics
            assert m is not None and m.peak_bytes <= budget and m.cost >= full.metrics.cost


def test_a_fit_probe_asks_min_memory_first_once_its_variants_are_made(monkeypatch):
    """After a failed plan made min-memory's variants (budget-independent, kept on the graph),
    a fit probe at a budget one of them meets runs no other candidate (before: the
    decompositions and the greedy/dtr replays ran first, and failed); below every variant's
    peak it goes on to the others and fits exactly where auto does."""
    from dataclasses import replace
    from pathlib import Path

    import remat_cli.strategies as registry
    from remat_cli.loaders import load_graph

    real = registry.fast_strategies
    ran: list[str] = []

    def spying(s):
        def solve(graph, budget, options, context):
            ran.append(s.name)
            return s.solve(graph, budget, options, context)

        return replace(s, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [spying(s) for s in real()])
    g = load_graph(Path(__file__).resolve().parent.parent / "sample_graphs" / "random_dag.twremat.txt")
    assert not min_memory.variants_made(g)
    lowest = min(m.peak_bytes for _, _, m in min_memory.min_memory_variants(g))
    assert min_memory.variants_made(g) and lowest < store_all_peak(g)
    probe = make_plan(g, auto.FIT_PROBE, lowest, {"parallel": False})
    assert set(ran) == {"store-all", "min-memory"}, ran
    assert simulate(g, probe.schedule).metrics.peak_bytes <= lowest
    ran.clear()
    below = max(g.lb, lowest - 1)
    try:
        make_plan(g, auto.FIT_PROBE, below, {"parallel": False})
        fits = True
    except NoPlanError:
        fits = False
    assert ran[:2] == ["store-all", "min-memory"] and len(ran) > 2
    try:
        make_plan(g, "auto", below, {"parallel": False})
        assert fits
    except NoPlanError:
        assert not fits


def test_a_guess_slow_to_fail_leaves_the_bisection_time():
    """Below the lower bound the search guesses the lower bound first (the answer, if it
    fits), but that probe can take a whole plan's time to fail (auto on BERT: 3 s of a 2 s
    search, which then named the store-all peak). It gets half the time left; cut short
    there it settles nothing, and the bisection still finds the smallest budget that fits.
    A budget a plan stated is no guess: its probe gets all the time left."""
    g = _graph()
    peak = store_all_peak(g)
    enough = (g.lb + peak) // 2
    store = store_all_plan(g)
    tol = search_tolerance(peak)
    limits: dict[int, float] = {}
    wait = [True]

    def solve(graph, budget, options, context):
        limits.setdefault(budget, context.deadline - time.perf_counter())
        if budget is None or budget >= enough:
            return StrategyResult(store.schedule if budget is None or budget >= peak else _fitting(graph, budget))
        if budget == graph.lb and wait[0]:
            while context.deadline is not None and time.perf_counter() < context.deadline:
                time.sleep(0.01)
            raise NoPlanError("stopped at its deadline")
        raise NoPlanError("no plan")

    strat = Strategy(name="slow-at-lb", summary="test", solve=solve, uses_budget=True)
    found = smallest_budget(g, strat, reference_peak=peak, deadline=time.perf_counter() + 2.0, guess=g.lb, failing_seconds=0.0)
    assert found.complete and found.budget_bytes is not None
    assert enough <= found.budget_bytes < enough + tol  # the grid's first fitting budget
    assert found.failed_bytes is not None and found.failed_bytes < enough  # a proven failure, not the cut one
    assert found.failed_bytes != g.lb
    assert limits[g.lb] <= 1.0  # half of what was left of 2 s
    limits.clear()
    wait[0] = False  # (a failure at once: the search goes on)
    stated = smallest_budget(g, strat, reference_peak=peak, deadline=time.perf_counter() + 2.0, hint=g.lb, failing_seconds=0.0)
    assert limits[g.lb] > 1.0 and stated.budget_bytes == found.budget_bytes  # all that was left


def _fitting(graph, budget: int):
    """A plan of ``graph`` within ``budget`` (treewidth's; the tests' graphs fit it)."""
    return make_plan(graph, "treewidth", budget).schedule


def test_a_stated_budget_that_fits_is_checked_from_just_below_for_auto_too(monkeypatch):
    """auto is not monotone in the budget, and the grid point just below a stated budget that
    fits is still its next probe: on the sample random DAG at 0.3x its failed attempt names
    min-memory's lowest peak, which fits, and the point below fails: the search is over
    after it (before, it bisected from the lower bound and stopped at its 2 s). Each figure
    the message gives is true: a plan fits the budget named and none fits one step less."""
    from pathlib import Path

    from remat_cli.loaders import load_graph

    g = load_graph(Path(__file__).resolve().parent.parent / "sample_graphs" / "random_dag.twremat.txt")
    tol = search_tolerance(store_all_peak(g))
    budget = max(g.lb, int(0.3 * store_all_peak(g)))
    try:
        make_plan(g, "auto", budget)
        pytest.skip("auto fits 0.3x here")
    except NoPlanError as exc:
        stated = exc.min_budget
    assert stated is not None
    budgets = _budgets_planned(monkeypatch)
    with pytest.raises(NoPlanError) as info:
        make_plan(g, "auto", budget, {"time_limit": 60}, find_smallest=True)
    found = info.value.min_budget
    snapped = min(g.lb + -(-(stated - g.lb) // tol) * tol, store_all_peak(g))
    assert budgets[:4] == [budget, store_all_peak(g), snapped, snapped - tol], budgets
    assert found == snapped and len(budgets) == 4
    assert f"none at {fmt_bytes(tol)} less; auto can fit a budget and fail a larger one, so a smaller one may fit)" in info.value.message
    plan = make_plan(load_graph(Path(__file__).resolve().parent.parent / "sample_graphs" / "random_dag.twremat.txt"), "auto", found)
    assert simulate(g, plan.schedule).metrics.peak_bytes <= found
    with pytest.raises(NoPlanError):
        make_plan(load_graph(Path(__file__).resolve().parent.parent / "sample_graphs" / "random_dag.twremat.txt"), "auto", found - tol)
