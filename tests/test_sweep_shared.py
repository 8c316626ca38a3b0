"""A sweep over two strategies or more of a graph of ``SHARED_SWEEP_NODES`` nodes or more
runs its strategies in two processes (``remat_cli.sweep._SweepWorker``). These tests check
that it is the same sweep as in one process: the same cells, smallest budgets and
frontier (timings aside), every label told once with its count, and a strategy the second
process fails on made again in the first, its error included."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import sweep as sweep_mod
from remat_cli.planner import make_plan
from remat_cli.simulate import simulate
from remat_cli.strategies import RunContext, get_strategy
from remat_cli.sweep import SHARED_SWEEP_NODES, searchable, sweep

NAMES = ("store-all", "chen-sqrt", "greedy", "dtr", "treewidth", "pathwidth", "chain-dp", "min-memory")


def _untimed(result) -> dict:
    """The sweep's figures without its timings (which differ run to run)."""
    doc = dataclasses.asdict(result)
    for point in doc["points"]:
        point["solve_seconds"] = None
    return doc


def _graph(kind: str, n: int, seed: int):
    graph = training_graph(kind, n, seed)
    assert graph.n >= SHARED_SWEEP_NODES
    return graph


def _spy_processes(monkeypatch, tmp_path=None) -> None:
    """Make each strategy's part tell "pid N" first, N the process that runs it (the second
    process's tells come here through the pipe: :func:`_told_pids` reads them). With
    ``tmp_path``, this process's first part waits until the second process has started
    one (a file it writes), so that both take part."""
    real = sweep_mod._strategy_job
    me = os.getpid()
    mark = None if tmp_path is None else tmp_path / "second-started"

    def spy(*args, **kwargs):
        if mark is not None and os.getpid() != me:
            mark.write_text("")
        elif mark is not None:
            deadline = time.monotonic() + 60
            while not mark.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
        args[6](f"pid {os.getpid()}")
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_mod, "_strategy_job", spy)


def _told_pids(labels: list[tuple[int, int, str]]) -> set[int]:
    return {int(label[4:]) for _, _, label in labels if label.startswith("pid ")}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["chain", "skip", "dag", "grid"]),
    seed=st.integers(0, 1000),
    names=st.lists(st.sampled_from(NAMES), min_size=2, max_size=5, unique=True),
)
def test_two_processes_sweep_as_one_does(monkeypatch, kind, seed, names):
    graph = _graph(kind, 60, seed)
    strategies = [get_strategy(name) for name in names]
    labels: list[tuple[int, int, str]] = []
    one = sweep(graph, strategies, points=3, context=RunContext(parallel=False))
    two = sweep(graph, strategies, points=3, progress=lambda done, total, label: labels.append((done, total, str(label))))
    assert _untimed(two) == _untimed(one)
    # every run told once, counted in order, then "done" at the total
    runs = sum(len(one.budgets) if s.uses_budget else 1 for s in strategies) + sum(1 for s in strategies if searchable(s))
    assert [d for d, _, _ in labels] == list(range(runs)) + [runs] and {t for _, t, _ in labels} == {runs}
    assert labels[-1][2] == "done"
    for point in two.points:  # a fitting cell is a plan the simulator replays within its budget
        if point.fits:
            plan = make_plan(graph, point.strategy, point.budget_bytes)
            m = simulate(graph, plan.schedule).metrics
            assert (m.peak_bytes, m.cost) == (point.peak_bytes, point.cost) and m.peak_bytes <= point.budget_bytes


def test_both_processes_take_strategies(monkeypatch, tmp_path):
    """Not vacuous: the second process runs strategies (its labels arrive here), and the
    sweep is still the one-process sweep."""
    graph = _graph("skip", 60, 5)
    strategies = [get_strategy(n) for n in ("treewidth", "pathwidth", "greedy", "chen-sqrt")]
    one = sweep(graph, strategies, points=3, context=RunContext(parallel=False))
    _spy_processes(monkeypatch, tmp_path)
    labels: list[tuple[int, int, str]] = []
    two = sweep(graph, strategies, points=3, progress=lambda done, total, label: labels.append((done, total, str(label))))
    assert _untimed(two) == _untimed(one)
    pids = _told_pids(labels)
    assert os.getpid() in pids and len(pids) == 2, labels


def test_a_strategy_the_second_process_fails_on_is_made_here(monkeypatch):
    """The second process dies in the middle of a strategy's part: this process makes that
    part itself, and the sweep is the one-process sweep."""
    graph = _graph("dag", 60, 7)
    strategies = [get_strategy(n) for n in ("treewidth", "greedy", "chen-sqrt", "store-all")]
    one = sweep(graph, strategies, points=3, context=RunContext(parallel=False))
    me = os.getpid()
    real = sweep_mod._strategy_job

    def dies_there(graph, strat, *args, **kwargs):
        if os.getpid() != me:
            os._exit(3)
        return real(graph, strat, *args, **kwargs)

    monkeypatch.setattr(sweep_mod, "_strategy_job", dies_there)
    assert _untimed(sweep(graph, strategies, points=3)) == _untimed(one)


def test_a_bug_in_a_strategy_is_raised_as_in_one_process(monkeypatch):
    """A strategy that raises (a bug, not a failed plan) raises the same in a shared sweep,
    whichever process took it: the first process makes it again and meets it."""
    graph = _graph("chain", 60, 3)
    strategies = [get_strategy(n) for n in ("treewidth", "greedy", "chen-sqrt")]
    real = sweep_mod._run

    def buggy(graph, strat, *args, **kwargs):
        if strat.name == "greedy":
            raise ZeroDivisionError("synthetic bug")
        return real(graph, strat, *args, **kwargs)

    monkeypatch.setattr(sweep_mod, "_run", buggy)
    with pytest.raises(ZeroDivisionError, match="synthetic bug"):
        sweep(graph, strategies, points=3)


def test_small_graphs_and_single_strategies_sweep_in_one_process(monkeypatch):
    _spy_processes(monkeypatch)
    labels: list[tuple[int, int, str]] = []

    def told(done, total, label):
        labels.append((done, total, str(label)))

    small = training_graph("chain", 20, 1)
    assert small.n < SHARED_SWEEP_NODES
    two = [get_strategy("treewidth"), get_strategy("greedy")]
    sweep(small, two, points=2, progress=told)
    sweep(_graph("chain", 60, 1), two[:1], points=2, progress=told)
    sweep(_graph("chain", 60, 1), two, points=2, context=RunContext(parallel=False), progress=told)
    assert _told_pids(labels) == {os.getpid()}


def test_a_replays_search_is_a_part_of_its_own():
    """greedy's and dtr's plans share nothing between budgets, so their search is a part
    either process may take (the others keep plans and search together, which share the
    graph's decompositions); the parts' cells and searches are the one-process sweep's."""
    graph = _graph("dag", 60, 2)
    names = ("greedy", "treewidth", "dtr", "chen-sqrt")
    one = sweep(graph, [get_strategy(n) for n in names], points=3, context=RunContext(parallel=False))
    worker = sweep_mod._SweepWorker.start(
        graph, [(get_strategy(n), True) for n in names], list(one.budgets), one.store_all_peak_bytes, None
    )
    assert worker is not None
    cells: dict = {}
    found: dict = {}
    try:
        parts = [(strat.name, searching, plans) for strat, searching, plans in worker.jobs]
        assert parts == [
            ("treewidth", True, True),
            ("dtr", False, True),
            ("dtr", True, False),
            ("greedy", False, True),
            ("greedy", True, False),
            ("chen-sqrt", True, True),
        ]
    finally:
        worker.run(lambda label: None, cells, found)
    assert {(p.budget_bytes, p.strategy): dataclasses.replace(p, solve_seconds=None, on_frontier=False) for p in one.points} == {
        key: dataclasses.replace(p, solve_seconds=None) for key, p in cells.items()
    }
    assert {b.strategy: b.smallest_budget_bytes for b in one.best} == {name: s.budget_bytes for name, s in found.items()}
