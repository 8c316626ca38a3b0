"""auto's fit probe (``FIT_PROBE``, the search for the smallest budget after a failed plan)
now queues the greedy and dtr replays for both processes (``_FIT_FIRST``): a process done
with the decompositions takes them instead of waiting. Its answers are those of the frozen
copy it replaces (tests/auto_balance_reference.py, main before r16-bal), run in one
process: the same verdict at every budget, and where nothing fits the same message and
the same budget named, word for word; a plan that fits replays (simulator) within the
budget. So are auto's plans and the whole search's message after a failed plan. On
generated graphs with both processes forced on (a low ``PARALLEL_NODES``), at budgets
where nothing fits and where only the replays (and the last resort) fit, with either
process held up in one strategy so that the other takes the queue at other times."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import auto_balance_reference as reference
import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_auto_same import _hold

import remat_cli.strategies as registry
from remat_cli import planner
from remat_cli.errors import NoPlanError, RematError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import auto
from remat_cli.units import say

#: (where, strategy, seconds): the strategy sleeps first in this process ("here") or in the
#: second one ("there"); None: no one is held
HOLDS = [
    None,
    ("here", "pathwidth", 0.2),
    ("here", "chain-dp", 0.2),
    ("there", "treewidth", 0.2),
    ("there", "greedy", 0.2),
    ("there", "dtr", 0.2),
]


def _probe(g: Graph, probe, budget: int, parallel: bool) -> tuple:
    """("fits",) with the plan replayed within the budget, or ("no plan", message, min_budget)."""
    try:
        plan = make_plan(g, probe, budget, {"parallel": parallel})
    except NoPlanError as exc:
        return ("no plan", exc.message, exc.min_budget)
    m = simulate(g, plan.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    return ("fits",)


def _plan(g: Graph, strategy, budget: int, parallel: bool) -> tuple:
    """(steps, figures, winner, tried) of auto's plan, or its failure."""
    try:
        plan = make_plan(g, strategy, budget, {"parallel": parallel})
    except NoPlanError as exc:
        return ("no plan", exc.message, exc.min_budget)
    m = simulate(g, plan.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    return (plan.schedule.ops.tolist(), plan.schedule.nodes.tolist(), m.cost, m.peak_bytes, plan.info["winner"], say(plan.info["tried"]))


def _fitting(g: Graph, budget: int) -> set[str]:
    """The candidates whose own plan (with the options a fit probe gives them) fits."""
    fit = set()
    for s in registry.fast_strategies():
        if s.name == "auto":
            continue
        try:
            r = s.run(g, budget, auto._options(s.name, []))
        except RematError:
            continue
        m = simulate(g, r.schedule).metrics
        if m is not None and m.peak_bytes <= budget:
            fit.add(s.name)
    return fit


def _budgets(g: Graph, fracs: list[float]) -> list[int]:
    peak = store_all_peak(g)
    return sorted({g.lb + int(f * (peak - g.lb)) for f in fracs})


def _check_probes(monkeypatch, graph_of, budgets: list[int], hold) -> None:
    """At each budget: the fit probe on a fresh graph and on one a failed plan has left its
    work on (min-memory's variants: asked first), both processes on and one process, equal
    to the reference's in one process; auto's plan too."""
    with monkeypatch.context() as m:
        m.setattr(auto, "PARALLEL_NODES", 10)
        old = {b: _probe(graph_of(), reference.FIT_PROBE, b, False) for b in budgets}
        plans = {b: _plan(graph_of(), reference.STRATEGY, b, False) for b in budgets}
        if hold is not None:
            _hold(m, *hold)
        for parallel in (True, False):
            for b in budgets:
                assert _probe(graph_of(), auto.FIT_PROBE, b, parallel) == old[b], (b, parallel)
            after = graph_of()
            try:
                make_plan(after, "auto", budgets[0], {"parallel": parallel})  # (min-memory's variants made, if it fails)
            except NoPlanError:
                pass
            for b in budgets:
                assert _probe(after, auto.FIT_PROBE, b, parallel) == old[b], (b, parallel, "after a plan")
        for b in budgets:
            assert _plan(graph_of(), "auto", b, True) == plans[b], b


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["chain", "skip", "dag", "grid"]),
    n=st.integers(8, 30),
    seed=st.integers(0, 1000),
    fracs=st.lists(st.floats(0.0, 0.9), min_size=1, max_size=3),
    hold=st.sampled_from(HOLDS),
)
def test_fit_probes_answer_as_the_reference(monkeypatch, kind, n, seed, fracs, hold):
    budgets = _budgets(training_graph(kind, n, seed, p=0.25), fracs)
    _check_probes(monkeypatch, lambda: training_graph(kind, n, seed, p=0.25), budgets, hold)


#: (kind, n, seed, budget fraction of the range LB .. store-all peak) where the only plans
#: that fit are the replays' and the last resort's (:func:`_fitting` says so), and where none fits
REPLAYS_ONLY = [("skip", 10, 2, 1 / 8), ("skip", 10, 4, 1 / 8), ("dag", 10, 0, 2 / 8), ("dag", 20, 1, 4 / 8), ("dag", 30, 0, 5 / 8)]
NONE_FITS = [("dag", 30, 5, 0.0), ("skip", 30, 7, 0.0), ("dag", 24, 1, 0.0)]


@pytest.mark.parametrize("hold", HOLDS)
@pytest.mark.parametrize("case", REPLAYS_ONLY + NONE_FITS)
def test_fit_probes_where_only_the_replays_fit_or_nothing(monkeypatch, case, hold):
    kind, n, seed, frac = case
    g = training_graph(kind, n, seed, p=0.25)
    (budget,) = _budgets(g, [frac])
    fit = _fitting(g, budget)
    if case in REPLAYS_ONLY:
        assert fit & {"greedy", "dtr"} and fit <= {"greedy", "dtr", "min-memory"}, fit
    else:
        assert not fit - {"min-memory"}, fit  # (a fit probe on a fresh graph asks min-memory last)
    _check_probes(monkeypatch, lambda: training_graph(kind, n, seed, p=0.25), [budget], hold)


@pytest.mark.parametrize("case", NONE_FITS + [("dag", 24, s, 0.0) for s in (0, 2, 3, 5)])
def test_the_search_after_a_failed_plan_says_what_the_reference_says(monkeypatch, case):
    """The whole search for the smallest budget (its fit probes in two processes) ends in
    the reference's message, word for word, naming the same budget."""
    kind, n, seed, frac = case
    monkeypatch.setattr(planner, "MIN_SEARCH_SECONDS", 120.0)  # (never stopped by the clock)
    monkeypatch.setattr(planner, "SEARCH_SECONDS", 120.0)
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    g = training_graph(kind, n, seed, p=0.25)
    (budget,) = _budgets(g, [frac])

    def search(strategy, parallel: bool) -> tuple:
        try:
            make_plan(training_graph(kind, n, seed, p=0.25), strategy, budget, {"parallel": parallel}, find_smallest=True)
        except NoPlanError as exc:
            return (exc.message, exc.min_budget)
        return ("fits",)

    with monkeypatch.context() as m:
        m.setattr(auto, "FIT_PROBE", reference.FIT_PROBE)  # the planner probes auto with it
        old = search(reference.STRATEGY, False)
    assert search("auto", True) == old


@pytest.mark.parametrize("scale", [False, True])
def test_the_second_process_takes_the_replays_while_this_one_runs_a_decomposition(monkeypatch, tmp_path, scale):
    """A fit probe where nothing fits: while this process runs pathwidth (held), the second
    one, done with treewidth and chain-dp, runs greedy and dtr (before, it sat idle and
    this process ran them after pathwidth), with the options this process gives them: no
    search for their smallest budget, no cost cap, and on a graph of ``SCALE_NODES`` or
    more (``scale``: lowered to this one's size) a time share each. The same answer as
    the reference's."""
    parent = os.getpid()
    real = registry.fast_strategies
    took = tmp_path / "treewidth"
    seen = tmp_path / "options"

    def wait(flag) -> None:
        end = time.perf_counter() + 30.0
        while not flag.exists() and time.perf_counter() < end:
            time.sleep(0.01)

    def wrapped(strategy):
        def solve(graph, budget, options, context):
            here = os.getpid() == parent
            if context.parallel and here and strategy.name == "chen-sqrt":
                wait(took)  # so that the second process takes treewidth
            if context.parallel and not here and strategy.name == "treewidth":
                took.write_text("")
            if context.parallel and here and strategy.name == "pathwidth":
                time.sleep(1.0)
            if strategy.name in auto._CAPPED:
                with open(seen, "a") as f:
                    f.write(f"{'here' if here else 'there'} {strategy.name} {options.search} {options.max_cost} {options.max_seconds}\n")
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    g = training_graph("dag", 30, 5, p=0.25)
    budget = g.lb
    old = _probe(training_graph("dag", 30, 5, p=0.25), reference.FIT_PROBE, budget, False)
    assert old[0] == "no plan"
    monkeypatch.setattr(registry, "fast_strategies", lambda: [wrapped(s) for s in real()])
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    if scale:
        monkeypatch.setattr(auto, "SCALE_NODES", 10)
    labels: list[str] = []
    try:
        make_plan(g, auto.FIT_PROBE, budget, {"parallel": True, "progress": lambda d, t, label: labels.append(say(label))})
        got: tuple = ("fits",)
    except NoPlanError as exc:
        got = ("no plan", exc.message, exc.min_budget)
    assert got == old
    assert "auto: pathwidth" in labels and "auto: treewidth (second process)" in labels, labels
    assert "auto: greedy (second process)" in labels and "auto: dtr (second process)" in labels, labels
    share = auto.SCALE_REPLAY_SECONDS if scale else None
    assert sorted(seen.read_text().splitlines()) == [f"there dtr False None {share}", f"there greedy False None {share}"]
