"""The two processes' overlap (r14: this process makes the ladder's top runs while the
second one makes the bare run, and the memory-limit pass over the cheapest candidate and
the keep moves over the cheapest so far while the pass over the bare run comes; the
second skips the ladder runs this process has come to) changes no plan: each treewidth and
pathwidth plan, fit probe and failure equals the one r13's flow makes
(``tests/fork_reference.py``, a frozen copy over the same recursion), with the second
process on (``PARALLEL_NEEDED`` lowered so that every graph here forks): the same steps,
info (timings aside), message and smallest budget. Plans follow one another on the same
graph, so runs kept from one plan are reused by the next; ``ahead`` makes this process
run the whole ladder ahead (as if the bare run never came in time), from points below
the bare peak's floor down to LB; ``slow`` holds the second process's pass back a little,
so that this process waits for it (how long decides only what is made while it waits).
Every plan is replayed by the simulator."""

from __future__ import annotations

import time

import fork_reference
import pytest
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.algorithms import decompose as D
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth
from remat_cli.strategies.base import RunContext

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sep(g: Graph, tree: str):
    if tree == "tree":
        return D.separator_tree(g, D.tree_decomposition(g))
    return D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))


def _outcomes(g: Graph, tree: str, budgets: list[int], plan) -> list:
    """Each budget's plan in turn on one graph (then a fit probe at each), as plain data."""
    sep = _sep(g, tree)
    out = []
    for fit_only in (False, True):
        for budget in budgets:
            try:
                result = plan(
                    g, sep, budget, treewidth.DecompositionOptions(), RunContext(parallel=True),
                    kind="tree (test)", decompose_seconds=0.0, fit_only=fit_only,
                )  # fmt: skip
            except NoPlanError as e:
                out.append(("no plan", str(e), e.min_budget))
                continue
            sim = simulate(g, result.schedule)
            assert sim.valid, sim.error
            assert budget is None or sim.metrics.peak_bytes <= budget
            info = {k: str(v) for k, v in result.info.items() if "second" not in k}
            out.append((result.schedule.ops.tolist(), result.schedule.nodes.tolist(), sim.metrics, info))
    return out


def _both(kind: str, n: int, seed: int, tree: str, ratios: list[float], ahead: bool, slow: bool = False) -> None:
    g = tied_graph(kind, n, seed)
    peak = store_all_peak(g)
    budgets = [max(0, int(r * peak)) for r in ratios] + [g.lb, g.lb - 1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(treewidth, "PARALLEL_NEEDED", 1)
        old = _outcomes(tied_graph(kind, n, seed), tree, budgets, fork_reference.plan_over_separator_tree)
        if ahead:
            mp.setattr(treewidth, "_bare_arrived", lambda forked: False)
        if slow:
            hold_back_bare_pass(mp)
        new = _outcomes(tied_graph(kind, n, seed), tree, budgets, treewidth.plan_over_separator_tree)
    assert new == old


def hold_back_bare_pass(mp) -> None:
    """The second process's pass over the bare run starts 20 ms late (it then comes after
    this process's budgeted runs; also for tests/test_clean_sent_same.py)."""
    real = treewidth._bare_pass_arrays

    def held_back(*args, **kw):
        time.sleep(0.02)
        return real(*args, **kw)

    mp.setattr(treewidth, "_bare_pass_arrays", held_back)


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(6, 40),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.lists(st.sampled_from([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.1]), min_size=1, max_size=4),
    st.booleans(),
    st.booleans(),
)
def test_the_overlapped_processes_change_no_plan(
    kind: str, n: int, seed: int, tree: str, ratios: list[float], ahead: bool, slow: bool
) -> None:
    _both(kind, n, seed, tree, ratios, ahead, slow)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["grid", "skip", "pkt", "dag"]),
    st.integers(10, 40),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.integers(20, 400),
)
def test_the_overlap_changes_no_plan_where_runs_stop_at_the_work_limit(kind: str, n: int, seed: int, tree: str, work: int) -> None:
    """The work limit lowered until the bare run and some ladder runs stop: a run made
    ahead that stops there is not kept (the ladder makes it under its own cap)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(treewidth, "WORK_FLOOR", work)
        mp.setattr(treewidth, "WORK_PER_NODE", 0)
        _both(kind, n, seed, tree, [0.5, 0.7, 0.9], True, True)


def test_started_follows_this_processs_order() -> None:
    """``_started``: this process goes down the points, and at each point through recent,
    cheap, then cache-only; a run is started once this process is at it or past it."""
    code = treewidth._job_code
    order = [code(p, e, ev) for p in (300, 200, 100) for e, ev in ((True, "recent"), (True, "cheap"), (False, "recent"))]
    for i, mine in enumerate(order):
        for j, job in enumerate(order):
            assert treewidth._started(mine, job) == (j <= i)
        assert not treewidth._started(-1, mine)


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(12, 40),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.booleans(),
)
def test_what_this_process_makes_while_the_pass_comes_changes_no_plan(kind: str, n: int, seed: int, tree: str, ahead: bool) -> None:
    """The pass over the bare run held back: this process makes the pass over the cheapest
    candidate and the keep moves over the cheapest so far before it comes; the keep moves
    are the plan's only where that one is still the cheapest with the pass."""
    _both(kind, n, seed, tree, [0.4, 0.6, 0.8], ahead, True)
