"""Anytime strategies (issue 14 item 2): past ``options["deadline"]`` greedy, dtr,
chen-greedy and chain-dp return the best valid plan found so far or a clear NoPlanError
naming a budget that works. No timing is asserted: a deadline already passed makes every
check of it stop, and the tests count the work done and replay every schedule."""

from __future__ import annotations

import time

import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import chain_dp, chen, greedy

ANYTIME = ["greedy", "dtr", "chen-greedy", "chain-dp"]


def _past() -> dict:
    return {"deadline": time.perf_counter() - 1.0}


def _checked(graph: Graph, schedule, budget: int) -> None:
    result = simulate(graph, schedule)
    assert result.metrics is not None, result.error
    assert result.metrics.peak_bytes <= budget


def _graph(kind: str, n: int, seed: int) -> Graph:
    return training_graph(kind, n, seed, p=0.25)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(ANYTIME),
    kind=st.sampled_from(["chain", "skip", "dag"]),
    n=st.integers(2, 24),
    seed=st.integers(0, 50),
    ratio=st.floats(0.0, 1.0),
)
def test_a_passed_deadline_gives_a_valid_plan_or_a_budget_that_works(name, kind, n, seed, ratio):
    g = _graph(kind, n, seed)
    sa = store_all_peak(g)
    budget = max(g.lb, int(ratio * sa))
    try:
        plan = make_plan(g, name, budget, _past())
    except NoPlanError as exc:
        assert exc.min_budget is not None and exc.min_budget > budget
        again = make_plan(g, name, exc.min_budget)  # the budget it names works
        _checked(g, again.schedule, exc.min_budget)
        return
    _checked(g, plan.schedule, budget)


def _counting(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize("name", ["greedy", "dtr"])
def test_eviction_stops_searching_its_smallest_budget_at_the_deadline(monkeypatch, name):
    """Below what eviction meets, the bisection of whole replays stops at the deadline and
    names the store-all peak (which always works) instead of the smallest budget."""
    g = _graph("dag", 30, 0)
    calls = _counting(monkeypatch, greedy, "evict_schedule")
    with pytest.raises(NoPlanError) as searched:
        make_plan(g, name, g.lb)
    assert calls[0] > 1 and searched.value.min_budget < store_all_peak(g)
    calls[0] = 0
    with pytest.raises(NoPlanError) as stopped:
        make_plan(g, name, g.lb, _past())
    assert calls[0] == 1 and stopped.value.min_budget == store_all_peak(g)
    assert "time limit" in stopped.value.message


def test_chen_greedy_returns_its_first_fitting_grouping_past_the_deadline(monkeypatch):
    g = _graph("skip", 24, 1)
    budget = int(0.7 * store_all_peak(g))
    calls = _counting(monkeypatch, chen, "chen_plan")
    full = make_plan(g, "chen-greedy", budget)
    assert calls[0] > 1
    calls[0] = 0
    plan = make_plan(g, "chen-greedy", budget, _past())
    assert calls[0] == 1
    _checked(g, plan.schedule, budget)
    assert plan.metrics.cost >= full.metrics.cost  # the full search can only do better


def test_chain_dp_solves_no_further_attachment_rule_past_the_deadline(monkeypatch):
    """A table filled before the deadline passed gives its plan, and no other rule is
    solved after it (the first table here ignores the deadline, as if it passed during it)."""
    g = _graph("skip", 20, 2)
    budget = int(0.6 * store_all_peak(g))
    calls = _counting(monkeypatch, chain_dp, "_best_plan")
    full = make_plan(g, "chain-dp", budget)
    assert calls[0] > 1
    calls[0] = 0
    real = chain_dp.solve_chain
    tables = [0]

    def first_in_time(*args, deadline=None, **kwargs):
        tables[0] += 1
        return real(*args, deadline=None if tables[0] == 1 else deadline, **kwargs)

    monkeypatch.setattr(chain_dp, "solve_chain", first_in_time)
    plan = make_plan(g, "chain-dp", budget, _past())
    assert calls[0] == 1
    _checked(g, plan.schedule, budget)
    assert plan.metrics.cost >= full.metrics.cost


def test_chain_dp_stops_filling_a_table_past_the_deadline(monkeypatch):
    """A table is O(L³·M) work (nn1000's took 1 s past a 0.2 s limit): past the deadline
    its filling stops and its rule has no plan; with none, chain-dp says it stopped and
    names a budget it meets (store-all's peak)."""
    g = _graph("skip", 20, 2)
    budget = int(0.6 * store_all_peak(g))
    make_plan(g, "chain-dp", budget)  # it fits without a deadline
    with pytest.raises(NoPlanError) as stopped:
        make_plan(g, "chain-dp", budget, _past())
    assert "found before its time limit" in stopped.value.message
    assert stopped.value.min_budget == store_all_peak(g)
    seg = chain_dp.segment(g)
    with pytest.raises(chain_dp.TableStopped):
        chain_dp.solve_chain(g, seg, deadline=time.perf_counter() - 1.0)


@pytest.mark.parametrize("name", ["greedy", "dtr"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eviction_search_is_proportionate_and_names_a_budget_that_works(monkeypatch, name, seed):
    """The bisection after a failed replay stops after SEARCH_FACTOR times that replay's
    seconds (at least MIN_SEARCH_SECONDS; both 0 here, so it stops at once), without any
    deadline given, and the budget it names is one the strategy meets."""
    g = _graph("dag", 30, seed)
    monkeypatch.setattr(greedy, "MIN_SEARCH_SECONDS", 0.0)
    monkeypatch.setattr(greedy, "SEARCH_FACTOR", 0.0)
    calls = _counting(monkeypatch, greedy, "evict_schedule")
    with pytest.raises(NoPlanError) as stopped:
        make_plan(g, name, g.lb)
    assert calls[0] == 1 and stopped.value.min_budget == store_all_peak(g)
    assert "search stopped after" in stopped.value.message and "time limit" not in stopped.value.message
    again = make_plan(g, name, stopped.value.min_budget)
    _checked(g, again.schedule, stopped.value.min_budget)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["greedy", "dtr"]), kind=st.sampled_from(["chain", "skip", "dag"]), n=st.integers(3, 24), seed=st.integers(0, 50)
)
def test_a_replay_stops_after_its_seconds_and_auto_gives_large_graphs_a_share(name, kind, n, seed):
    """``max_seconds`` (auto's share per replay on large graphs) stops a replay that does
    not fit at once: it fails naming the store-all peak, never returns an unchecked plan."""
    from remat_cli.strategies import auto

    g = _graph(kind, n, seed)
    sa = store_all_peak(g)
    budget = max(g.lb, sa - 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(greedy, "DEADLINE_EVERY", 1)
        try:
            plan = make_plan(g, name, budget, {"max_seconds": 0.0})
        except NoPlanError as exc:
            assert "time limit" in exc.message and exc.min_budget == sa
        else:  # only where the store-all plan fits already (no replay is made)
            assert sa <= budget
            _checked(g, plan.schedule, budget)
    assert auto.SCALE_REPLAY_SECONDS > 0 and auto.SCALE_NODES >= 10_000  # 10k replays keep the deadline


@pytest.mark.parametrize("name", ["treewidth", "pathwidth"])
@pytest.mark.parametrize("seed", [0, 1])
def test_past_the_deadline_the_decompositions_make_no_pass_over_the_bare_run(monkeypatch, name, seed):
    """The memory-limit pass over the bare recursion, and the clean-up its error message
    measures, are O(steps) each (0.3-0.5 s on grid1000 at its lower bound, past a 1 s
    limit): past the deadline neither is made, and the error names the bare recursion's
    own peak, a budget the strategy meets."""
    from remat_cli.strategies import evict, treewidth

    g = _graph("dag", 24, seed)
    calls = _counting(monkeypatch, evict, "cleanup")
    with pytest.raises(NoPlanError) as full:
        make_plan(g, name, g.lb)
    assert calls[0] > 0 and "frees moved to last use" in full.value.message
    calls[0] = 0
    monkeypatch.setattr(treewidth, "_past", lambda deadline: True)  # (the recursion has no deadline)
    g = _graph("dag", 24, seed)  # the same graph, nothing derived from it kept yet
    with pytest.raises(NoPlanError) as late:
        make_plan(g, name, g.lb)
    assert calls[0] == 0 and "found by its time limit (the bare recursion)" in late.value.message
    assert late.value.min_budget is not None and late.value.min_budget >= full.value.min_budget
    plan = make_plan(g, name, late.value.min_budget)
    _checked(g, plan.schedule, late.value.min_budget)
