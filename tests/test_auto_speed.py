"""What `auto` skips to go faster (issue 14 items 1-2) never changes its plan.

auto runs greedy and dtr without their search for the smallest budget and stops them
once they cost more than the third cheapest fitting plan so far; these tests check that
the stop is exact (a replay that is not stopped is the same replay) and that auto's plan
is the one it makes without the caps. Every schedule goes through the simulator.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.loaders import load_graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import auto, greedy
from remat_cli.strategies.store_all import store_all_plan


def _graph(kind: str, n: int, seed: int) -> Graph:
    return training_graph(kind, n, seed, p=0.25)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    score=st.sampled_from([greedy.largest_first, greedy.dtr_score]),
    kind=st.sampled_from(["chain", "skip", "dag"]),
    n=st.integers(2, 20),
    seed=st.integers(0, 40),
    ratio=st.floats(0.3, 1.0),
    cut=st.floats(0.0, 1.2),
)
def test_a_cost_cap_stops_exactly_the_replays_that_cost_more(score, kind, n, seed, ratio, cut):
    g = _graph(kind, n, seed)
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    order = store_all_plan(g).schedule.compute_nodes.tolist()
    free = greedy.evict_schedule(g, budget, score, order)
    if free is None:
        return
    m = simulate(g, free).metrics
    assert m is not None and m.peak_bytes <= budget
    cap = m.cost * cut
    if m.cost > cap:
        with pytest.raises(greedy.CostlierThan):
            greedy.evict_schedule(g, budget, score, order, max_cost=cap)
    else:
        capped = greedy.evict_schedule(g, budget, score, order, max_cost=cap)
        assert capped is not None
        assert capped.ops.tolist() == free.ops.tolist() and capped.nodes.tolist() == free.nodes.tolist()


@pytest.mark.parametrize("name", ["greedy", "dtr"])
def test_without_search_a_failing_replay_runs_once(monkeypatch, name):
    g = _graph("dag", 30, 0)
    calls = [0]
    real = greedy.evict_schedule

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(greedy, "evict_schedule", counted)
    with pytest.raises(NoPlanError) as searched:
        make_plan(g, name, g.lb)
    assert calls[0] > 1 and searched.value.min_budget is not None
    calls[0] = 0
    with pytest.raises(NoPlanError) as once:
        make_plan(g, name, g.lb, {"search": False})
    assert calls[0] == 1 and once.value.min_budget is None
    assert "not searched" in once.value.message


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["chain", "skip", "dag"]),
    n=st.integers(2, 16),
    seed=st.integers(0, 40),
    ratio=st.floats(0.2, 1.0),
)
def test_auto_plans_the_same_with_and_without_the_caps(kind, n, seed, ratio):
    g = _graph(kind, n, seed)
    _same_with_and_without_caps(g, max(g.lb, int(ratio * store_all_peak(g))))


def _same_with_and_without_caps(g: Graph, budget: int) -> None:
    def plan(uncapped: bool):
        real = auto._options
        if uncapped:
            auto._options = lambda name, fitting: None
        try:
            return make_plan(g, "auto", budget, {"parallel": False})
        except NoPlanError:
            return None
        finally:
            auto._options = real

    capped, free = plan(False), plan(True)
    assert (capped is None) == (free is None)
    if capped is not None:
        assert capped.metrics.peak_bytes <= budget
        assert (capped.metrics.cost, capped.metrics.peak_bytes) == (free.metrics.cost, free.metrics.peak_bytes)
        assert capped.schedule.ops.tolist() == free.schedule.ops.tolist()


SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"


@pytest.mark.parametrize("ratio", [0.5, 0.7, 0.9])
@pytest.mark.parametrize("sample", ["unet_train.json", "random_dag.twremat.txt"])
def test_auto_plans_samples_where_eviction_wins_the_same_with_and_without_the_caps(sample, ratio):
    """On these samples greedy or dtr wins auto at some of the budgets, so a cap that stops
    a replay that could win changes the plan here."""
    g = load_graph(SAMPLES / sample)
    budget = int(ratio * store_all_peak(g))
    _same_with_and_without_caps(g, budget)


def test_the_smallest_budget_search_is_proportionate_to_the_failed_attempt(monkeypatch):
    """A plan that fails at once is followed by a short search, not by SEARCH_SECONDS of it."""
    from remat_cli import planner, sweep

    g = _graph("dag", 12, 3)
    seen: list[float] = []
    real = sweep.smallest_budget

    def spy(*args, deadline=None, **kwargs):
        seen.append(deadline - time.perf_counter())
        return real(*args, deadline=deadline, **kwargs)

    monkeypatch.setattr(sweep, "smallest_budget", spy)
    with pytest.raises(NoPlanError):
        make_plan(g, "greedy", g.lb - 1, find_smallest=True)
    assert len(seen) == 1 and seen[0] <= planner.MIN_SEARCH_SECONDS < planner.SEARCH_SECONDS
    assert planner.search_seconds(0.01, None) == planner.MIN_SEARCH_SECONDS
    assert planner.search_seconds(1e6, None) == planner.SEARCH_SECONDS
    assert planner.search_seconds(1e6, 3.0) == 3.0
    lows = [planner.search_seconds(t, None) for t in (0.0, 1.0, 4.0, 8.0, 15.0, 30.0)]
    assert lows == sorted(lows)


@pytest.mark.parametrize("name", ["greedy", "dtr"])
def test_a_replay_stops_at_the_deadline_naming_a_budget_that_works(monkeypatch, name):
    """Past its deadline a replay stops (looked at every DEADLINE_EVERY computes; 1 here)
    and the error names the store-all peak, which always works; without one it fits."""
    g = _graph("skip", 40, 2)
    budget = int(0.6 * store_all_peak(g))
    plan = make_plan(g, name, budget)
    assert simulate(g, plan.schedule).metrics.peak_bytes <= budget
    monkeypatch.setattr(greedy, "DEADLINE_EVERY", 1)
    with pytest.raises(NoPlanError) as stopped:
        make_plan(g, name, budget, {"deadline": time.perf_counter() - 1.0})
    assert "time limit" in stopped.value.message and stopped.value.min_budget == store_all_peak(g)


def test_auto_plans_of_one_graph_decompose_it_once(monkeypatch):
    """The plans of a search for the smallest budget (or a sweep) reuse the decompositions
    kept on the graph: a second auto plan of the same graph decomposes nothing, and its
    plan is the one a fresh graph gets."""
    from remat_cli.algorithms import decompose

    calls = [0]
    real = decompose.tree_decomposition

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(decompose, "tree_decomposition", counted)
    g = _graph("skip", 30, 1)
    sa = store_all_peak(g)
    first = make_plan(g, "auto", int(0.6 * sa), {"parallel": False})
    assert calls[0] > 0
    calls[0] = 0
    again = make_plan(g, "auto", int(0.65 * sa), {"parallel": False})
    assert calls[0] == 0
    fresh = make_plan(_graph("skip", 30, 1), "auto", int(0.65 * sa), {"parallel": False})
    for plan, budget in ((first, int(0.6 * sa)), (again, int(0.65 * sa))):
        m = simulate(g, plan.schedule).metrics
        assert m is not None and m.peak_bytes <= budget
    assert again.schedule.ops.tolist() == fresh.schedule.ops.tolist()
    assert again.schedule.nodes.tolist() == fresh.schedule.nodes.tolist()


def test_the_second_process_takes_queued_strategies_only_while_this_one_is_busy(monkeypatch):
    """treewidth, pathwidth and chain-dp are a queue both processes take from, the longest
    usually first: while the second process is held up in treewidth (the first in the
    queue), this one runs pathwidth and chain-dp both (before, the second process started
    on chain-dp, the shortest on the 1k graphs, and went on to treewidth). The plan is the
    one made in one process."""
    from dataclasses import replace

    import remat_cli.strategies as registry

    real = registry.fast_strategies

    def slow_treewidth(graph, budget, options, context):
        time.sleep(3.0)  # in whichever process takes it
        return tw.solve(graph, budget, options, context)

    def slow_greedy(graph, budget, options, context):
        time.sleep(1.0)  # here only (not queued): the second process, started just before it, takes treewidth meanwhile
        return greedy.solve(graph, budget, options, context)

    tw = next(s for s in real() if s.name == "treewidth")
    greedy = next(s for s in real() if s.name == "greedy")
    slow = {tw: slow_treewidth, greedy: slow_greedy}
    monkeypatch.setattr(registry, "fast_strategies", lambda: [replace(s, solve=slow[s]) if s in slow else s for s in real()])
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    g = _graph("skip", 30, 2)
    budget = int(0.6 * store_all_peak(g))
    seen: list[str] = []

    def heard(done, total, label):
        from remat_cli.units import say

        seen.append(say(label))

    two = make_plan(g, "auto", budget, {"parallel": True, "progress": heard})
    one = make_plan(g, "auto", budget, {"parallel": False})
    m = simulate(g, two.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    assert two.schedule.ops.tolist() == one.schedule.ops.tolist() and two.schedule.nodes.tolist() == one.schedule.nodes.tolist()
    where = {}
    for name in ("chain-dp", "treewidth", "pathwidth"):
        runs = [s for s in seen if s in (f"auto: {name}", f"auto: {name} (second process)")]
        assert len(runs) == 1, (name, seen)
        where[name] = runs[0].endswith("(second process)")
    # treewidth went first, to the second process; the other two ran together, here
    assert where["treewidth"] and not where["pathwidth"] and not where["chain-dp"], seen


def test_the_second_process_starts_the_last_resort_while_nothing_fits(monkeypatch):
    """min-memory is used only when no other plan fits; while this process is held up in
    a failing dtr, the idle second process runs it (before, it ran here, after dtr). The
    plan is the one made in one process, and min-memory's (nothing else fits here)."""
    from dataclasses import replace

    import remat_cli.strategies as registry

    real = registry.fast_strategies
    dtr = next(s for s in real() if s.name == "dtr")

    def slow_dtr(graph, budget, options, context):
        time.sleep(3.0)
        return dtr.solve(graph, budget, options, context)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [replace(s, solve=slow_dtr) if s is dtr else s for s in real()])
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    g = load_graph(SAMPLES / "random_dag.twremat.txt")
    budget = int(0.5 * store_all_peak(g))
    seen: list[str] = []

    def heard(done, total, label):
        from remat_cli.units import say

        seen.append(say(label))

    two = make_plan(g, "auto", budget, {"parallel": True, "progress": heard})
    one = make_plan(g, "auto", budget, {"parallel": False})
    m = simulate(g, two.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    assert one.info["winner"] == two.info["winner"] == "min-memory"
    assert two.schedule.ops.tolist() == one.schedule.ops.tolist() and two.schedule.nodes.tolist() == one.schedule.nodes.tolist()
    assert "auto: min-memory (second process)" in seen and "auto: min-memory" not in seen, seen


def test_the_second_process_starts_the_last_resort_while_this_one_runs_a_queued_strategy(monkeypatch, tmp_path):
    """Nothing fits yet and the second process has nothing else to run: it starts min-memory
    while this process still runs pathwidth (here held until min-memory has begun in the
    second process; on random1000 at 0.7x the second process sat idle 0.4 s, then this one
    ran min-memory alone). The plan is the one made in one process, and min-memory's."""
    import os
    from dataclasses import replace

    import remat_cli.strategies as registry

    real = registry.fast_strategies
    parent = os.getpid()
    took, entered, begun = tmp_path / "treewidth there", tmp_path / "pathwidth here", tmp_path / "min-memory there"

    def wait_for(flag: Path) -> bool:
        end = time.perf_counter() + 30.0
        while not flag.exists() and time.perf_counter() < end:
            time.sleep(0.01)
        return flag.exists()

    def wrapped(strategy):
        def solve(graph, budget, options, context):
            here = os.getpid() == parent and context.parallel
            there = os.getpid() != parent
            if strategy.name == "greedy" and here:
                wait_for(took)  # so that the second process takes treewidth
            if strategy.name == "treewidth" and there:
                took.write_text("")
                wait_for(entered)  # and this process pathwidth
            if strategy.name == "pathwidth" and here:
                entered.write_text("")
                (tmp_path / "saw").write_text(str(wait_for(begun)))
            if strategy.name == "min-memory" and there:
                begun.write_text("")
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [wrapped(s) for s in real()])
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    g = load_graph(SAMPLES / "random_dag.twremat.txt")
    budget = int(0.5 * store_all_peak(g))
    seen: list[str] = []

    def heard(done, total, label):
        from remat_cli.units import say

        seen.append(say(label))

    two = make_plan(g, "auto", budget, {"parallel": True, "progress": heard})
    one = make_plan(load_graph(SAMPLES / "random_dag.twremat.txt"), "auto", budget, {"parallel": False})
    m = simulate(g, two.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    assert one.info["winner"] == two.info["winner"] == "min-memory"
    assert two.schedule.ops.tolist() == one.schedule.ops.tolist() and two.schedule.nodes.tolist() == one.schedule.nodes.tolist()
    assert str(two.info.get("tried")) == str(one.info.get("tried"))
    assert "auto: pathwidth" in seen and "auto: min-memory (second process)" in seen, seen
    assert (tmp_path / "saw").read_text() == "True"  # min-memory began there while pathwidth ran here


def test_this_process_polishes_while_the_second_one_still_runs(monkeypatch):
    """Once this process has nothing left to run and the second one is still busy (here in
    treewidth, which waits until this process has started auto's improvement pass), the
    polishing passes run on the plans known so far; the final passes reuse what they
    still apply to. Before, this process only waited: the second one would time out. The
    plan is the one made in one process."""
    import multiprocessing as mp
    import os
    from dataclasses import replace

    import remat_cli.strategies as registry

    real = registry.fast_strategies
    first = next(s for s in real() if s.name == "treewidth")  # the first in the queue
    slow = next(s for s in real() if s.name == "greedy")
    started = mp.get_context("fork").Event()  # set when this process starts improving
    seen = mp.get_context("fork").Value("i", 0)  # treewidth (second process) saw it set
    parent = os.getpid()

    def gated_first(graph, budget, options, context):
        if os.getpid() != parent:
            seen.value = int(started.wait(15.0))
        return first.solve(graph, budget, options, context)

    def slow_greedy(graph, budget, options, context):
        time.sleep(1.0)  # so that the second process takes treewidth first
        return slow.solve(graph, budget, options, context)

    def swap(s):
        return replace(s, solve=gated_first) if s is first else replace(s, solve=slow_greedy) if s is slow else s

    real_improve = auto._improve

    def improving(*args, **kw):
        if os.getpid() == parent:
            started.set()
        return real_improve(*args, **kw)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [swap(s) for s in real()])
    monkeypatch.setattr(auto, "_improve", improving)
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    g = _graph("skip", 30, 2)
    budget = int(0.6 * store_all_peak(g))
    labels: list[str] = []

    def heard(done, total, label):
        from remat_cli.units import say

        labels.append(say(label))

    two = make_plan(g, "auto", budget, {"parallel": True, "progress": heard})
    assert "auto: treewidth (second process)" in labels, labels
    assert seen.value == 1  # this process improved while treewidth was running there
    one = make_plan(g, "auto", budget, {"parallel": False})
    m = simulate(g, two.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    assert two.schedule.ops.tolist() == one.schedule.ops.tolist() and two.schedule.nodes.tolist() == one.schedule.nodes.tolist()


def test_each_process_walks_the_queue_in_its_order():
    """A process that takes a queued strategy takes the ones before it in the queue too
    (``_Child.claim``), so this process meets the queued strategies in the queue's order,
    in a plan and in a fit probe; otherwise a strategy skipped that way would run nowhere."""
    for run_first, queue in ((auto._RUN_FIRST, auto._PARALLEL), (auto._FIT_RUN_FIRST, auto._FIT_FIRST)):
        queued = [name for name in run_first if name in queue]
        assert queued == [name for name in queue if name in run_first]
