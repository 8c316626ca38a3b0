"""The faster treewidth/pathwidth recursion (issue 14 item 1) equals the code it replaced
(tests/treewidth_reference.py, as of d23b961): for every run a plan makes (the bare
recursion, the cacheless budgeted run, the cached runs with and without prefetch, each
eviction order, with cost caps that stop some of them and one memo shared by a plan's
runs, plain schedules laid out in loops and with numpy), the same steps, the same
"fits" flag, the same reason to stop; and the memory-greedy order the same order. Every
schedule goes through the simulator."""

from __future__ import annotations

import math

import numpy as np
from graphgen import tied_graph
import pytest
import treewidth_reference as reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.algorithms import decompose as D
from remat_cli.algorithms.orders import memory_greedy_order
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.schedule import Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: (cache, eager, evict) of the runs a plan makes: cacheless, cached, cached with prefetch
RUNS = ((False, False, "recent"), (True, False, "recent"), (True, True, "recent"), (True, True, "cheap"), (True, False, "cheap"))


def _outcome(module, g: Graph, sep, limit, memo, **kw):
    """(ops, nodes, fits) of one run, or the reason it stopped."""
    try:
        sched, fits = module.recursive_schedule(g, sep, limit, memo=memo, **kw)
    except module.RecursionStopped as exc:
        return ("stopped", str(exc))
    return (sched.ops.tolist(), sched.nodes.tolist(), fits)


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(4, 24),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.booleans(),
)
def test_recursion_is_the_reference(kind: str, n: int, seed: int, tree: str, numpy_plain: bool) -> None:
    """Every run of one plan, at budgets from below the lower bound to above the store-all
    peak, with and without cost caps (a cap between the base cost and the uncapped cost
    stops runs part way: "cannot win"), gives the reference's steps, node for node."""
    g = tied_graph(kind, n, seed)
    if tree == "tree":
        sep = D.separator_tree(g, D.tree_decomposition(g))
    else:
        sep = D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))
    mp = pytest.MonkeyPatch()
    if numpy_plain:  # every plain schedule laid out with numpy (both codes)
        mp.setattr(treewidth, "PLAIN_VECTOR_MIN", 1)
        mp.setattr(reference, "PLAIN_VECTOR_MIN", 1)
    try:
        bare = _outcome(treewidth, g, sep, None, None)
        assert bare == _outcome(reference, g, sep, None, None)
        peak = store_all_peak(g)
        base = float(g.cost[g.needed].sum())
        memo_new: dict = {}
        memo_old: dict = {}  # one memo per plan, shared by its runs (as the strategy does)
        for ratio in (0.3, 0.5, 0.7, 0.9, 1.1):
            limit = int(ratio * peak) - g.fixed_mem
            for cache, eager, evict in RUNS:
                for max_cost in (math.inf, base * 1.2, base):
                    kw = {"cache": cache, "eager": eager, "evict": evict, "max_cost": max_cost, "stop_over": not cache}
                    got = _outcome(treewidth, g, sep, limit, memo_new, **kw)
                    assert got == _outcome(reference, g, sep, limit, memo_old, **kw), (ratio, cache, eager, evict, max_cost)
                    if got[0] != "stopped":
                        sched = Schedule(np.asarray(got[0], dtype=np.int8), np.asarray(got[1], dtype=np.int32))
                        assert simulate(g, sched).valid
    finally:
        mp.undo()


@SETTINGS
@given(st.sampled_from(["grid", "skip", "pkt", "dag"]), st.integers(6, 40), st.integers(0, 10_000), st.floats(0.05, 1.0))
def test_memory_greedy_order_is_the_reference(kind: str, n: int, seed: int, share: float) -> None:
    """The memory-greedy order (a ready node's key updated by the freed value's size, not
    recomputed) gives the reference's order on whole graphs and on random sub-problems
    with kept values, sizes of 0 included (a freed value that gives nothing back)."""
    g = tied_graph(kind, n, seed)
    preds, succs, mem, rank = g.pred_lists, g.succ_lists, g.mem.tolist(), g.topo_rank.tolist()
    every = set(range(g.n))
    assert memory_greedy_order(every, preds, succs, mem, rank) == reference.memory_greedy_order(every, preds, succs, mem, rank)
    rng = np.random.default_rng(seed)
    need = {v for v in range(g.n) if rng.random() < share}
    kept = {v for v in range(g.n) if rng.random() < 0.3}

    def frees(u: int) -> bool:
        return u not in kept

    got = memory_greedy_order(need, preds, succs, mem, rank, frees)
    assert got == reference.memory_greedy_order(need, preds, succs, mem, rank, frees)
