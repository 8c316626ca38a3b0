"""auto's plans equal those of the frozen copy it replaces (tests/auto_reference.py, main
before r11-rand), whichever process runs what: this process now makes the last resort's
variants (min-memory) when it would only wait for the second one (``_Child.idle_here``,
pausing once a plan fits), and auto reuses min-memory's replayed metrics instead of
replaying its plan again (``_replayed``). The same winner, schedule, figures and "tried"
facts, or the same failure, on generated graphs and budgets, with one process or two and
either process held up. Every plan goes through the simulator (the planner replays it)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import auto_reference as reference
import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remat_cli.strategies as registry
from remat_cli.errors import NoPlanError
from remat_cli.loaders import load_graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import auto
from remat_cli.strategies import min_memory as M
from remat_cli.units import say

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"


def _hold(monkeypatch, where: str, name: str, seconds: float) -> None:
    """Strategy ``name`` sleeps ``seconds`` first in this process (``where`` "here") or in
    the second one ("there"), so that the other process takes the queued strategies and
    the last resort at other times."""
    parent = os.getpid()
    real = registry.fast_strategies

    def wrapped(strategy):
        def solve(graph, budget, options, context):
            if context.parallel and (os.getpid() == parent) == (where == "here"):
                time.sleep(seconds)
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [wrapped(s) if s.name == name else s for s in real()])


def _outcome(graph_of, strategy, budget: int, parallel: bool):
    """(schedule steps, figures, winner, tried) of the plan, or the failure's message;
    each run on its own copy of the graph (nothing derived is shared between runs)."""
    g = graph_of()
    try:
        plan = make_plan(g, strategy, budget, {"parallel": parallel})
    except NoPlanError as exc:
        return ("no plan", exc.message, exc.min_budget)
    m = simulate(g, plan.schedule).metrics
    assert m is not None and m.peak_bytes <= budget
    return (
        plan.schedule.ops.tolist(),
        plan.schedule.nodes.tolist(),
        plan.metrics.cost,
        plan.metrics.peak_bytes,
        plan.info["winner"],
        say(plan.info["tried"]),
    )


def _check(monkeypatch, graph_of, ratio: float, hold: tuple[str, str, float] | None) -> None:
    budget = max(graph_of().lb, int(ratio * store_all_peak(graph_of())))
    old = _outcome(graph_of, reference.STRATEGY, budget, False)
    with monkeypatch.context() as m:
        m.setattr(auto, "PARALLEL_NODES", 10)
        if hold is not None:
            _hold(m, *hold)
        for parallel in (True, False):
            assert _outcome(graph_of, "auto", budget, parallel) == old


HOLDS = [None, ("there", "treewidth", 0.3), ("there", "pathwidth", 0.3), ("here", "greedy", 0.3), ("here", "dtr", 0.2)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["chain", "skip", "dag"]),
    n=st.integers(6, 30),
    seed=st.integers(0, 1000),
    ratio=st.floats(0.3, 1.0),
    hold=st.sampled_from(HOLDS),
)
def test_auto_plans_as_the_reference(monkeypatch, kind, n, seed, ratio, hold):
    _check(monkeypatch, lambda: training_graph(kind, n, seed, p=0.25), ratio, hold)


@pytest.mark.parametrize("ratio", [0.9, 0.7, 0.5, 0.4])
@pytest.mark.parametrize("hold", HOLDS[:3])
def test_auto_plans_a_random_dag_as_the_reference(monkeypatch, ratio, hold):
    """The sample random DAG, where below ~0.6x only min-memory fits (its last resort)."""
    _check(monkeypatch, lambda: load_graph(SAMPLES / "random_dag.twremat.txt"), ratio, hold)


def _second_takes_treewidth(monkeypatch, flag: Path, seconds: float) -> None:
    """greedy waits here until the second process has begun treewidth (so it takes it),
    which then sleeps ``seconds`` there."""
    parent = os.getpid()
    real = registry.fast_strategies

    def wrapped(strategy):
        def solve(graph, budget, options, context):
            if context.parallel and os.getpid() == parent and strategy.name == "greedy":
                end = time.perf_counter() + 30.0
                while not flag.exists() and time.perf_counter() < end:
                    time.sleep(0.01)
            if context.parallel and os.getpid() != parent and strategy.name == "treewidth":
                flag.write_text("")
                time.sleep(seconds)
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [wrapped(s) for s in real()])


def test_this_process_makes_the_last_resort_while_the_second_one_runs_a_queued_strategy(monkeypatch, tmp_path):
    """Nothing fits and this process has nothing else to run while the second one runs
    treewidth (held): it makes min-memory's variants then, and runs min-memory itself (no
    "second process" label); the plan is the reference's, min-memory's."""
    g = load_graph(SAMPLES / "random_dag.twremat.txt")
    budget = int(0.5 * store_all_peak(g))
    old = make_plan(load_graph(SAMPLES / "random_dag.twremat.txt"), reference.STRATEGY, budget, {"parallel": False})
    seen: list[str] = []
    made: list[int] = []
    real = M.min_memory_variants

    def variants(graph, deadline=None, stop=None):
        made.append(os.getpid())
        return real(graph, deadline, stop)

    monkeypatch.setattr(M, "min_memory_variants", variants)
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    _second_takes_treewidth(monkeypatch, tmp_path / "took", 1.0)
    two = make_plan(g, "auto", budget, {"parallel": True, "progress": lambda d, t, label: seen.append(say(label))})
    assert old.info["winner"] == two.info["winner"] == "min-memory"
    assert two.schedule.ops.tolist() == old.schedule.ops.tolist() and two.schedule.nodes.tolist() == old.schedule.nodes.tolist()
    assert say(two.info["tried"]) == say(old.info["tried"])
    assert "auto: min-memory" in seen and "auto: min-memory (second process)" not in seen, seen
    assert made and set(made) == {os.getpid()}


def test_the_last_resort_made_here_pauses_once_a_plan_fits(monkeypatch, tmp_path):
    """A plan of the second process fits (its treewidth, held) while this process makes
    min-memory's variants (each look at the stop request slowed): the making pauses at
    its next look, treewidth's plan wins and min-memory is reported skipped, as before."""
    g = training_graph("skip", 30, 4)
    budget = int(0.7 * store_all_peak(g))
    looks: list[bool] = []
    real = M._stopped

    def stopped(clock):
        time.sleep(0.1)
        looks.append(real(clock))
        return looks[-1]

    monkeypatch.setattr(M, "_stopped", stopped)
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    _second_takes_treewidth(monkeypatch, tmp_path / "took", 0.5)
    real_fast = registry.fast_strategies
    parent = os.getpid()

    def failing(strategy):
        def solve(graph, budget, options, context):
            if context.parallel and os.getpid() == parent and strategy.name not in ("store-all", "min-memory"):
                if strategy.name == "greedy":
                    strategy.solve(graph, budget, options, context)  # (waits for the second process)
                raise NoPlanError(f"{strategy.name}: held to fail here")  # nothing fits here
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [failing(s) for s in real_fast()])
    two = make_plan(g, "auto", budget, {"parallel": True})
    assert two.info["winner"] == "treewidth" and "min-memory skipped (a cheaper plan fits)" in say(two.info["tried"])
    assert True in looks  # it paused
    assert not M.variants_made(g)  # and was not finished


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["skip", "dag", "diamonds"]), n=st.integers(4, 24), seed=st.integers(0, 1000), pauses=st.integers(1, 40))
def test_variants_paused_by_a_stop_request_are_those_made_at_once(kind, n, seed, pauses):
    """min-memory's variants made in pieces (a stop request that says stop at its first
    ``pauses`` looks, the making resumed after each) are those of one uninterrupted making:
    the same names, steps and figures (each replayed by the simulator)."""
    from graphgen import tied_graph

    whole = M.min_memory_variants(tied_graph(kind, n, seed))
    g = tied_graph(kind, n, seed)
    asked = [0]

    def stop() -> bool:
        asked[0] += 1
        return asked[0] <= pauses

    got = None
    for _ in range(pauses + 1):
        got = M.min_memory_variants(g, None, stop)
        if M.variants_made(g):
            break
    got = M.min_memory_variants(g)  # done (resumed without a stop request if it was not)
    assert [(name, s.ops.tolist(), s.nodes.tolist(), m) for name, s, m in got] == [
        (name, s.ops.tolist(), s.nodes.tolist(), m) for name, s, m in whole
    ]
    for _, s, m in got:
        assert simulate(g, s).metrics == m


def test_replayed_metrics_are_the_simulators():
    """``replayed``: a kept variant's metrics for a schedule with its steps (another object),
    None for a schedule with other steps."""
    from remat_cli.schedule import Schedule

    g = load_graph(SAMPLES / "random_dag.twremat.txt")
    assert M.replayed(g, M.min_memory_variants(g)[0][1]) is not None
    for _, s, m in M.min_memory_variants(g):
        copy = Schedule(s.ops.copy(), s.nodes.copy())
        assert M.replayed(g, copy) == m == simulate(g, copy).metrics
        other = Schedule(s.ops[:-1].copy(), s.nodes[:-1].copy())
        assert M.replayed(g, other) is None


#: per auto run (:func:`_offers_adopted`): whether the second process sent plans up (it made the last resort)
sent_up: list[bool] = []


def _offers_adopted(monkeypatch) -> list[tuple[bool, bool, bool]]:
    """Per auto run: whether the plan to polish was offered to the second process, and
    whether its memory-limit pass and improvement pass were put in ``memo`` by the
    adoption (before the final passes could make them here)."""
    got: list[tuple[bool, bool, bool]] = []
    sent_up.clear()
    polish, improve = auto._Child.adopt_offered_polish, auto._Child.adopt_offered_improve

    def adopt_polish(self, fitting, memo, deadline):
        polish(self, fitting, memo, deadline)
        offered = any(p is k[4].schedule for k in fitting for p in self.offered)
        got.append((offered, any(k[0] == "polish" for k in memo), False))
        sent_up.append(bool(self.ups))

    def adopt_improve(self, best, memo, deadline):
        improve(self, best, memo, deadline)
        got[-1] = (*got[-1][:2], ("improve", id(best[4].schedule)) in memo)

    monkeypatch.setattr(auto._Child, "adopt_offered_polish", adopt_polish)
    monkeypatch.setattr(auto._Child, "adopt_offered_improve", adopt_improve)
    return got


@pytest.mark.parametrize("ratio", [0.5, 0.4])  # (each look slowed: 15 s a budget)
def test_the_second_process_polishes_the_last_resort_offered_while_this_one_makes_the_rest(monkeypatch, tmp_path, ratio):
    """Nothing fits, this process makes min-memory's variants (the second one runs
    treewidth, held) and each look at its stop request is slowed, so the second process,
    its queue done, waits for an offer while they are made: it gets min-memory's plan so
    far and makes the final passes over it, and this process adopts them. The plan,
    figures and "tried" facts are the reference's (one process, no offers)."""
    g = load_graph(SAMPLES / "random_dag.twremat.txt")
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    old = _outcome(lambda: load_graph(SAMPLES / "random_dag.twremat.txt"), reference.STRATEGY, budget, False)
    real = M._stopped

    def stopped(clock):
        time.sleep(0.02)
        return real(clock)

    monkeypatch.setattr(M, "_stopped", stopped)
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    parent = os.getpid()
    made = M.min_memory_variants

    def variants(graph, deadline=None, stop=None):  # here: lets the second process's treewidth end
        if os.getpid() == parent:
            (tmp_path / "making").write_text("")
        return made(graph, deadline, stop)

    monkeypatch.setattr(M, "min_memory_variants", variants)
    treewidth = registry.fast_strategies

    def wait(flag: str) -> None:
        end = time.perf_counter() + 30.0
        while not (tmp_path / flag).exists() and time.perf_counter() < end:
            time.sleep(0.01)

    def held(strategy):  # greedy here waits until the second process has begun treewidth, which
        # waits there until this process makes min-memory's variants
        def solve(graph, budget, options, context):
            if context.parallel and os.getpid() == parent and strategy.name == "greedy":
                wait("treewidth")
            if context.parallel and os.getpid() != parent and strategy.name == "treewidth":
                (tmp_path / "treewidth").write_text("")
                wait("making")
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [held(s) for s in treewidth()])
    adopted = _offers_adopted(monkeypatch)
    assert _outcome(lambda: g, "auto", budget, True) == old
    if old[0] != "no plan" and old[4] == "min-memory":
        # the plan was offered (at these budgets a variant before the lowered ones) and both
        # passes over it came from the second process
        assert adopted == [(True, True, True)] if ratio >= 0.45 else adopted[0][1:] == (adopted[0][0],) * 2
        assert sent_up == [False]  # this process made min-memory


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["skip", "dag"]), n=st.integers(8, 30), seed=st.integers(0, 1000), ratio=st.floats(0.2, 0.8))
def test_auto_plans_as_the_reference_with_offers(monkeypatch, tmp_path_factory, kind, n, seed, ratio):
    """Generated graphs and budgets, with the second process free to take offers while
    this one makes min-memory's variants (as above): auto's outcome is the reference's."""
    real = M._stopped

    def stopped(clock):
        time.sleep(0.005)
        return real(clock)

    with monkeypatch.context() as m:
        m.setattr(M, "_stopped", stopped)
        _second_takes_treewidth(m, tmp_path_factory.mktemp("took") / "took", 0.2)
        _check(m, lambda: training_graph(kind, n, seed, p=0.25), ratio, None)


def _roles(monkeypatch, tmp_path: Path) -> None:
    """This process runs pathwidth until the second one has begun min-memory's variants,
    whose making waits at its first look until this process waits for its outcome: greedy
    waits here until the second process has begun treewidth, which waits there until this
    process has begun pathwidth (so the second process runs chain-dp and min-memory)."""
    parent = os.getpid()
    real = registry.fast_strategies

    def wait(flag: str) -> None:
        end = time.perf_counter() + 30.0
        while not (tmp_path / flag).exists() and time.perf_counter() < end:
            time.sleep(0.01)

    def wrapped(strategy):
        def solve(graph, budget, options, context):
            here = os.getpid() == parent
            if context.parallel and here and strategy.name == "greedy":
                wait("treewidth")
            if context.parallel and not here and strategy.name == "treewidth":
                (tmp_path / "treewidth").write_text("")
                wait("pathwidth")
            if context.parallel and here and strategy.name == "pathwidth":
                (tmp_path / "pathwidth").write_text("")
                wait("min-memory")
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [wrapped(s) for s in real()])
    looked = M._stopped

    def stopped(clock):
        if os.getpid() != parent:
            (tmp_path / "min-memory").write_text("")
            wait("waiting")
        return looked(clock)

    monkeypatch.setattr(M, "_stopped", stopped)
    result = auto._Child.result

    def waiting(self, name, deadline):
        if name == "min-memory":
            (tmp_path / "waiting").write_text("")
        return result(self, name, deadline)

    monkeypatch.setattr(auto._Child, "result", waiting)


@pytest.mark.parametrize("ratio", [0.5, 0.4])  # (each look slowed: 15 s a budget)
def test_this_process_polishes_the_last_resort_the_second_one_makes_while_it_waits(monkeypatch, tmp_path, ratio):
    """The other way round: this process runs pathwidth (held) while the second one runs
    chain-dp and then min-memory (its making held until this process waits, each look at
    its stop request slowed); this process waits for min-memory's outcome and meanwhile
    makes the final passes over the
    plans the second process sends as it makes the variants; the outcome's plan is one of
    them (the same steps), so those passes are adopted. The plan, figures and "tried"
    facts are the reference's."""
    g = load_graph(SAMPLES / "random_dag.twremat.txt")
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    old = _outcome(lambda: load_graph(SAMPLES / "random_dag.twremat.txt"), reference.STRATEGY, budget, False)
    real = M._stopped

    def stopped(clock):
        time.sleep(0.02)
        return real(clock)

    monkeypatch.setattr(M, "_stopped", stopped)
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    _roles(monkeypatch, tmp_path)
    adopted = _offers_adopted(monkeypatch)
    assert _outcome(lambda: g, "auto", budget, True) == old
    if old[0] != "no plan" and old[4] == "min-memory":
        assert adopted == [(True, True, True)] if ratio >= 0.45 else adopted[0][1:] == (adopted[0][0],) * 2
        assert sent_up == [True]  # the second process made min-memory and sent its plans
