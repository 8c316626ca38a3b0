"""The recursion's speed work of r17-rw (the failing budgeted runs of random1000 near its
store-all peak, issue 14 item 1) equals the code it replaced (tests/search_memo_reference.py,
treewidth.py and orders.py as of cdf8379):

* every run a plan makes (the bare recursion, the cacheless budgeted run stopped over its
  limit, the cached runs with and without prefetch, both eviction orders, fit probes'
  runs stopped over the budget, cost caps), with one memo shared by runs at several
  budgets (as a plan's runs, and a search's plans, share it), plain schedules laid out in
  loops and with numpy: the same steps, the same "fits" flag, the same reason to stop;
* a run given an empty memo (a new plan's) starts from the last memo given over the tree,
  and makes the steps the reference makes without any memo;
* whole plans and fit probes of treewidth and pathwidth, one after another on one graph
  (with the second process on and off): the reference's plans, verdicts and messages.

Every schedule goes through the simulator."""

from __future__ import annotations

import math

import numpy as np
import search_memo_reference as reference
import pytest
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remat_cli.generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.schedule import Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth
from remat_cli.strategies.base import RunContext
from remat_cli.training import checkmate_training_graph
from remat_cli.units import say

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag", "wide"])
#: (cache, eager, evict) of the runs a plan makes: cacheless, cached, cached with prefetch
RUNS = ((False, False, "recent"), (True, False, "recent"), (True, True, "recent"), (True, True, "cheap"), (True, False, "cheap"))


def _graph(kind: str, n: int, seed: int) -> Graph:
    """tied_graph, or ("wide") a denser random DAG's training graph with small sizes: one
    wide bag, random1000's shape in small."""
    if kind != "wide":
        return tied_graph(kind, n, seed)
    rng = np.random.default_rng(seed)
    g = G.random_dag(n, p=0.4, seed=seed)
    g = g.with_arrays(mem=rng.integers(1, 4, g.n), cost=rng.choice([1.0, 2.0, 3.5], g.n))
    return checkmate_training_graph(g)


def _sep(g: Graph, tree: str):
    if tree == "tree":
        return D.separator_tree(g, D.tree_decomposition(g))
    return D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))


def _outcome(module, g: Graph, sep, limit, memo, **kw):
    """(ops, nodes, fits) of one run, or the reason it stopped; a schedule must be valid."""
    try:
        sched, fits = module.recursive_schedule(g, sep, limit, memo=memo, **kw)
    except module.RecursionStopped as exc:
        return ("stopped", str(exc))
    assert simulate(g, Schedule(sched.ops, sched.nodes)).valid
    return (sched.ops.tolist(), sched.nodes.tolist(), fits)


@SETTINGS
@given(KINDS, st.integers(4, 30), st.integers(0, 10_000), st.sampled_from(["tree", "path"]), st.booleans())
def test_recursion_is_the_reference(kind: str, n: int, seed: int, tree: str, numpy_plain: bool) -> None:
    """Every run of a search's plans (budgets from below the lower bound to above the
    store-all peak, the bare peak's neighbours among them), with and without cost caps
    and fit probes' ``stop_above``, one memo shared by all of them: the reference's
    steps, node for node, or the same reason to stop."""
    g = _graph(kind, n, seed)
    sep = _sep(g, tree)
    mp = pytest.MonkeyPatch()
    if numpy_plain:  # every plain schedule laid out with numpy (both codes)
        mp.setattr(treewidth, "PLAIN_VECTOR_MIN", 1)
        mp.setattr(reference, "PLAIN_VECTOR_MIN", 1)
    try:
        bare = _outcome(treewidth, g, sep, None, None)
        assert bare == _outcome(reference, g, sep, None, None)
        bare_peak = simulate(g, Schedule(np.asarray(bare[0], np.int8), np.asarray(bare[1], np.int32))).metrics.peak_bytes
        peak = store_all_peak(g)
        base = float(g.cost[g.needed].sum())
        memo_new: dict = {}
        memo_old: dict = {}
        budgets = sorted({int(r * peak) for r in (0.3, 0.5, 0.7, 0.9, 1.1)} | {bare_peak - 1, bare_peak, peak - 1})
        for budget in budgets:
            limit = budget - g.fixed_mem
            for cache, eager, evict in RUNS:
                for max_cost in (math.inf, base * 1.2, base):
                    kw = {"cache": cache, "eager": eager, "evict": evict, "max_cost": max_cost, "stop_over": not cache}
                    got = _outcome(treewidth, g, sep, limit, memo_new, **kw)
                    assert got == _outcome(reference, g, sep, limit, memo_old, **kw), (budget, cache, eager, evict, max_cost)
                if cache:  # a fit probe's ladder run, at a point below its budget
                    point = max(0, (limit + g.lb - g.fixed_mem) // 2)
                    kw = {"cache": True, "eager": eager, "evict": evict, "stop_above": max(point, limit)}
                    got = _outcome(treewidth, g, sep, point, memo_new, **kw)
                    assert got == _outcome(reference, g, sep, point, memo_old, **kw), (budget, point, eager, evict)
    finally:
        mp.undo()


def _plan(module, g: Graph, sep, budget: int | None, parallel: bool, fit_only: bool):
    """("fits", ...) with the plan's steps, cost and info (the fit probe's verdict alone), or
    ("no plan", message, min_budget); a schedule is replayed by the simulator and fits."""
    try:
        result = module.plan_over_separator_tree(
            g, sep, budget, module.DecompositionOptions(), RunContext(parallel=parallel),
            kind="path (test)", decompose_seconds=0.0, fit_only=fit_only,
        )  # fmt: skip
    except NoPlanError as e:
        return ("no plan", str(e), e.min_budget)
    sim = simulate(g, result.schedule)
    assert sim.valid, sim.error
    assert budget is None or sim.metrics.peak_bytes <= budget
    if fit_only:
        return ("fits",)
    info = {k: say(v) for k, v in result.info.items() if "second" not in k}
    return ("fits", result.schedule.ops.tolist(), result.schedule.nodes.tolist(), sim.metrics.cost, info)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(KINDS, st.integers(6, 30), st.integers(0, 10_000), st.sampled_from(["tree", "path"]), st.booleans())
def test_plans_and_probes_are_the_reference(kind: str, n: int, seed: int, tree: str, parallel: bool) -> None:
    """A failed plan, fit probes from the bare peak down (a search's), then whole plans at
    every budget and none, one after another on one graph: the reference's verdicts,
    messages, named budgets and plans, on a graph of its own probed alike. ``parallel``
    with ``PARALLEL_NEEDED`` lowered: the second process runs."""
    mp = pytest.MonkeyPatch()
    for module in (treewidth, reference):
        mp.setattr(module, "PARALLEL_NEEDED", 1)
    try:
        g_new, g_old = _graph(kind, n, seed), _graph(kind, n, seed)
        sep_new, sep_old = _sep(g_new, tree), _sep(g_old, tree)
        peak = store_all_peak(g_new)
        bare = simulate(g_new, treewidth.recursive_schedule(g_new, sep_new, None)[0]).metrics.peak_bytes
        budgets = sorted(
            {
                b
                for b in (g_new.lb, int(0.5 * peak), int(0.7 * peak), int(0.9 * peak), bare - 2, bare - 1, bare, peak - 1)
                if g_new.lb <= b <= peak
            }
        )
        first = budgets[len(budgets) // 2]
        assert _plan(treewidth, g_new, sep_new, first, parallel, False) == _plan(reference, g_old, sep_old, first, parallel, False)
        for budget in budgets[::-1]:
            assert _plan(treewidth, g_new, sep_new, budget, parallel, True) == _plan(reference, g_old, sep_old, budget, parallel, True), (
                budget
            )
        for budget in budgets + [None]:
            got = _plan(treewidth, g_new, sep_new, budget, parallel, False)
            assert got == _plan(reference, g_old, sep_old, budget, parallel, False), budget
    finally:
        mp.undo()


@SETTINGS
@given(KINDS, st.integers(4, 30), st.integers(0, 10_000), st.sampled_from(["tree", "path"]))
def test_a_new_memo_starts_from_the_last_one_and_changes_no_run(kind: str, n: int, seed: int, tree: str) -> None:
    """Runs one after another on one graph, each with a memo of its own (as a search's
    plans are): an empty memo starts as the last one given over the tree, and every run
    gives the reference's steps without any memo, or the same reason to stop."""
    g = _graph(kind, n, seed)
    sep = _sep(g, tree)
    peak = store_all_peak(g)
    last: dict | None = None
    for r in (0.5, 0.95, 0.7, 0.9, 0.4):
        for cache, eager, evict in RUNS:
            kw = {"cache": cache, "eager": eager, "evict": evict, "stop_over": not cache}
            limit = max(0, int(r * peak) - g.fixed_mem)
            memo: dict = {}
            if last:  # (seeded before any work: a run stopped at once has it too)
                with pytest.raises(treewidth.RecursionStopped):
                    treewidth.recursive_schedule(g, sep, limit, memo=memo, max_work=-1, **kw)
                assert memo == last
                memo = {}
            assert _outcome(treewidth, g, sep, limit, memo, **kw) == _outcome(reference, g, sep, limit, None, **kw), (r, kw)
            last = dict(memo)
