"""The bare recursion made in the forked second process (issue 14 item 1: it starts
before the bare run, makes it and sends its steps back while this process makes the
budgeted run) changes no plan: with ``PARALLEL_NEEDED`` lowered so that every graph here
forks, each treewidth and pathwidth plan, fit probe and failure equals the one made in
one process (``parallel`` off, the code path this change leaves as it was): the same
steps, info (timings aside), message and smallest budget. Plans follow one another on
the same graph (the bare run kept from the first is then reused, and forked from), and
with the work limit lowered the bare run stops (the second process says so and ends).
Every plan is replayed by the simulator."""

from __future__ import annotations

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

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sep(g: Graph, tree: str):
    if tree == "tree":
        return D.separator_tree(g, D.tree_decomposition(g))
    return D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))


def _outcomes(g: Graph, tree: str, budgets: list[int], parallel: bool) -> list:
    """Each budget's plan in turn on one graph (then a fit probe at each), as plain data."""
    sep = _sep(g, tree)
    out = []
    for fit_only in (False, True):
        for budget in budgets:
            try:
                result = treewidth.plan_over_separator_tree(
                    g, sep, budget, treewidth.DecompositionOptions(), RunContext(parallel=parallel),
                    kind="tree (test)", decompose_seconds=0.0, fit_only=fit_only,
                )  # fmt: skip
            except NoPlanError as e:
                out.append(("no plan", str(e), e.min_budget))
                continue
            sim = simulate(g, result.schedule)
            assert sim.valid, sim.error
            info = {k: str(v) for k, v in result.info.items() if "second" not in k}
            out.append((result.schedule.ops.tolist(), result.schedule.nodes.tolist(), sim.metrics.peak_bytes, info))
    return out


def _both(kind: str, n: int, seed: int, tree: str, ratios: list[float]) -> None:
    g = tied_graph(kind, n, seed)
    peak = store_all_peak(g)
    budgets = [max(0, int(r * peak)) for r in ratios] + [g.lb, g.lb - 1]
    forked = _outcomes(tied_graph(kind, n, seed), tree, budgets, parallel=True)
    alone = _outcomes(tied_graph(kind, n, seed), tree, budgets, parallel=False)
    assert forked == alone


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(6, 40),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.lists(st.sampled_from([0.3, 0.5, 0.7, 0.9, 1.1]), min_size=1, max_size=3),
)
def test_forked_bare_run_changes_no_plan(kind: str, n: int, seed: int, tree: str, ratios: list[float]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(treewidth, "PARALLEL_NEEDED", 1)
        _both(kind, n, seed, tree, ratios)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["grid", "skip", "pkt", "dag"]),
    st.integers(10, 40),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.integers(20, 400),
)
def test_a_bare_run_stopped_in_the_second_process_changes_no_plan(kind: str, n: int, seed: int, tree: str, work: int) -> None:
    """The work limit lowered until the bare run (and some budgeted runs) stop: the second
    process reports why and ends; the plan goes on in one process, as it did."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(treewidth, "PARALLEL_NEEDED", 1)
        mp.setattr(treewidth, "WORK_FLOOR", work)
        mp.setattr(treewidth, "WORK_PER_NODE", 0)
        _both(kind, n, seed, tree, [0.5, 0.9])
