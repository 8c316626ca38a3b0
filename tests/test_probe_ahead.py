"""auto's probe ahead (issue 14 item 1): where its plan looks lost, its idle second process
makes the outcomes of the fit probe's candidates at the budget the search for the smallest
budget probes after the failure (``RunContext.probe_next``, :func:`sweep.probe_after`), and
the probe takes them instead of running those candidates. What the user reads is the same:
``probe_after`` is the search's own next probe, a probe that takes outcomes made ahead
gives the verdict and the floors of one that runs them, and a failed plan says the same
with the probe ahead as without it. Every plan a probe returns is replayed here."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli import planner
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import auto
from remat_cli.strategies.base import RunContext, Strategy
from remat_cli.sweep import probe_after
from remat_cli.training import checkmate_training_graph


def _dag(n: int, seed: int, p: float) -> Graph:
    rng = np.random.default_rng(seed)
    fwd = G.random_dag(n, p, seed=seed)
    src, dst = fwd.edges()
    return checkmate_training_graph(
        G.from_edges(n, np.stack([src, dst], axis=1), mem=rng.integers(1, 9, n), cost=rng.integers(1, 5, n).astype(float))
    )


def _spy_budgets(monkeypatch) -> list[tuple[int | None, bool]]:
    """The (budget, whether it fit) of each plan made from now on, in order."""
    made: list[tuple[int | None, bool]] = []
    real = planner._make_plan

    def spy(graph, strat, budget, *args):
        try:
            plan = real(graph, strat, budget, *args)
        except NoPlanError:
            made.append((budget, False))
            raise
        made.append((budget, True))
        return plan

    monkeypatch.setattr(planner, "_make_plan", spy)
    return made


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.integers(8, 30), st.floats(0.1, 0.5), st.sampled_from(["auto", "treewidth"]), st.floats(0.0, 0.6))
def test_probe_after_is_the_probe_the_search_makes_after_the_stated_budget(monkeypatch, seed, n, p, name, ratio):
    """Over random DAGs and budgets a plan fails: where the search's probe of the budget the
    failure stated fits, its next probe is ``probe_after``'s budget (None: it makes no
    probe just below, as where the stated budget is the grid's first point)."""
    g = _dag(n, seed, p)
    ref = store_all_peak(g)
    budget = max(g.lb, int(ratio * ref))
    try:
        make_plan(g, name, budget, {"parallel": False})
        return  # it fits: nothing is searched
    except NoPlanError as exc:
        stated = exc.min_budget
    if stated is None:
        return
    made = _spy_budgets(monkeypatch)
    with pytest.raises(NoPlanError):
        make_plan(g, name, budget, {"parallel": False}, find_smallest=True)
    probes = made[1:]  # (the first is the attempt)
    at = next((i for i, (b, _) in enumerate(probes) if b is not None and b >= stated and i > 0), None)
    after = probe_after(g, name, ref, stated)
    if at is None or not probes[at][1] or at + 1 >= len(probes):
        return  # the stated budget was not probed on the grid, or did not fit: bisection
    if after is None:
        assert probes[at + 1][0] != probes[at][0] - 1 or probes[at][0] == g.lb
    else:
        assert probes[at + 1][0] == after


def _ahead_here(g: Graph, budget: int) -> list[str]:
    """Run :func:`auto._probe_ahead` in this process for ``budget`` and put what it sends on
    ``g`` as the parent's pipe reader does; the names it made, in order."""
    sent: list[tuple] = []

    class Box:
        put = staticmethod(sent.append)

    context = RunContext(probe_next=lambda floor: budget)
    names = list(auto._probe_ahead(g, context, lambda: budget + 1, Box()))
    for _, kind, facts in sent:
        assert kind == "derived"
        for key, value in facts.items():
            g.derived(key, lambda v=value: v)
    return names


def _fit_probe(g: Graph, budget: int) -> tuple[str, int | None, int | None]:
    """The fit probe's verdict at ``budget`` in one process: ("fit", its peak, None) or
    ("no fit", None, the smallest budget it names), with its message's figures."""
    try:
        plan = make_plan(g, auto.FIT_PROBE, budget, {"parallel": False})
    except NoPlanError as exc:
        return ("no fit " + exc.message, None, exc.min_budget)
    m = simulate(g, plan.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    return ("fit", m.peak_bytes, None)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.integers(10, 40), st.floats(0.1, 0.4), st.floats(0.0, 1.0))
def test_a_fit_probe_takes_the_outcomes_made_ahead_and_answers_the_same(monkeypatch, seed, n, p, ratio):
    """The outcomes ``_probe_ahead`` makes at a budget (each of the queued candidates but the
    last resort) are those the probe's own runs give: a probe on the graph that holds them
    runs none of those candidates and gives the same verdict, peak and floors, and its
    message is the same, as a probe on a fresh copy of the graph."""
    g = _dag(n, seed, p)
    budget = max(g.lb, int(g.lb + ratio * (store_all_peak(g) - g.lb)))
    want = _fit_probe(_dag(n, seed, p), budget)
    names = _ahead_here(g, budget)
    assert names == [s for s in auto._FIT_FIRST if s not in auto._LAST_RESORT]
    ran: list[str] = []
    real = Strategy.run

    def spy(self, graph, b, options=None, context=None):
        ran.append(self.name)
        return real(self, graph, b, options, context)

    monkeypatch.setattr(Strategy, "run", spy)
    assert _fit_probe(g, budget) == want
    assert not set(ran) & set(names), ran


def test_outcomes_made_ahead_are_kept_by_budget():
    """What is made ahead at one budget is not taken at another."""
    g = _dag(30, 1, 0.2)
    budget = g.lb + (store_all_peak(g) - g.lb) // 3
    _ahead_here(g, budget)
    assert set(auto._made_ahead(g, budget)) == {s for s in auto._FIT_FIRST if s not in auto._LAST_RESORT}
    assert auto._made_ahead(g, budget + 1) == {}


@pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2, reason="auto's second process needs fork and two cores")
def test_a_failed_plan_says_the_same_with_the_probe_ahead(monkeypatch):
    """End to end, on a 301-node training graph at budgets where auto fails: the parent's
    dtr replay is held up (a sleep, in the parent only), so that the second process is done
    with its queue, runs the last resort, which fails, and makes the probe ahead. The error
    names the same smallest budget with the same message as a run in one process, and the
    search's probe below it runs none of the candidates made ahead."""
    from remat_cli.strategies import greedy

    parent = os.getpid()
    real_replay = greedy.evict_schedule
    hold = [False]  # set for each attempt: its dtr replay only, not the probes' after it

    def slow(graph, budget, score, *args, **kwargs):
        if os.getpid() == parent and score is greedy.dtr_score and hold[0]:
            hold[0] = False
            time.sleep(0.5)
        return real_replay(graph, budget, score, *args, **kwargs)

    monkeypatch.setattr(greedy, "evict_schedule", slow)
    checked = 0
    for seed in range(6):
        g = _dag(150, seed, 0.02)
        budget = max(g.lb, int(0.3 * store_all_peak(g)))
        try:
            make_plan(_dag(150, seed, 0.02), "auto", budget, {"parallel": False})
            continue  # it fits: nothing is searched
        except NoPlanError:
            pass
        with pytest.raises(NoPlanError) as alone:
            make_plan(_dag(150, seed, 0.02), "auto", budget, {"parallel": False}, find_smallest=True)
        ran: list[tuple[str, int | None]] = []
        real_run = Strategy.run

        def spy(self, graph, b, options=None, context=None, ran=ran):
            if os.getpid() == parent:
                ran.append((self.name, b))
            return real_run(self, graph, b, options, context)

        monkeypatch.setattr(Strategy, "run", spy)
        hold[0] = True
        with pytest.raises(NoPlanError) as shared:
            make_plan(g, "auto", budget, find_smallest=True)
        monkeypatch.setattr(Strategy, "run", real_run)
        assert shared.value.message == alone.value.message
        assert shared.value.min_budget == alone.value.min_budget
        made = set()  # (name, budget) of each outcome the second process made ahead
        for key in g.derived_items(lambda k: k.startswith(auto._AHEAD)):
            at, name = key[len(auto._AHEAD) :].split(" B: ")
            made.add((name, int(at)))
        if made:  # (it made some before the parent's dtr ended; all of them, unless held up)
            assert not made & set(ran), sorted(made & set(ran))  # none of them ran here again
            checked += 1
    assert checked >= 1  # (the sleep makes the parent's dtr the last to end)
