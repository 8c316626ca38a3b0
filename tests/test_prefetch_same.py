"""The prefetch of the cached recursion (what later nodes of a bag read from one child,
gathered once per call by child and position instead of scanned with a search per input at
each prefetch) asks for the same values in the same order as the frozen copy
(tests/treewidth_reference.py): every cached run with prefetch, both eviction orders,
under cost caps, on wider generated graphs than test_treewidth_same's (random DAGs and
partial k-trees of up to 90 nodes, whose bags own many nodes), over tree and path
decompositions, gives the reference's steps node for node; each schedule replays validly."""

from __future__ import annotations

import math

import numpy as np
import treewidth_reference as reference
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.algorithms import decompose as D
from remat_cli.planner import store_all_peak
from remat_cli.schedule import Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(module, g, sep, limit, memo, **kw):
    """(ops, nodes, fits) of one run, or the reason it stopped."""
    try:
        sched, fits = module.recursive_schedule(g, sep, limit, memo=memo, **kw)
    except module.RecursionStopped as exc:
        return ("stopped", str(exc))
    return (sched.ops.tolist(), sched.nodes.tolist(), fits)


@SETTINGS
@given(
    st.sampled_from(["dag", "pkt", "grid", "diamonds"]),
    st.integers(20, 90),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
)
def test_prefetch_runs_are_the_reference(kind: str, n: int, seed: int, tree: str) -> None:
    g = tied_graph(kind, n, seed)
    if tree == "tree":
        sep = D.separator_tree(g, D.tree_decomposition(g))
    else:
        sep = D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))
    peak = store_all_peak(g)
    base = float(g.cost[g.needed].sum())
    memo_new: dict = {}
    memo_old: dict = {}
    for ratio in (0.4, 0.6, 0.8, 0.95):
        limit = int(ratio * peak) - g.fixed_mem
        for evict in ("recent", "cheap"):
            for max_cost in (math.inf, base * 1.3):
                kw = {"cache": True, "eager": True, "evict": evict, "max_cost": max_cost}
                got = _outcome(treewidth, g, sep, limit, memo_new, **kw)
                assert got == _outcome(reference, g, sep, limit, memo_old, **kw), (ratio, evict, max_cost)
                if got[0] != "stopped":
                    assert simulate(g, Schedule(np.asarray(got[0], dtype=np.int8), np.asarray(got[1], dtype=np.int32))).valid


def test_a_wide_bag_prefetches_through_the_gathered_reads(monkeypatch) -> None:
    """On a random DAG (wide bags) the prefetch is asked many times per call: the reads
    gathered at the first ask serve the others, and the run equals the reference's."""
    g = tied_graph("dag", 120, 7)
    sep = D.separator_tree(g, D.tree_decomposition(g))
    calls = []
    real = treewidth._Recursion._prefetch

    def counting(self, x, child, inputs, owned_need, i, prefetched, later):
        calls.append(bool(later))
        return real(self, x, child, inputs, owned_need, i, prefetched, later)

    monkeypatch.setattr(treewidth._Recursion, "_prefetch", counting)
    limit = int(0.7 * store_all_peak(g)) - g.fixed_mem
    kw = {"cache": True, "eager": True, "evict": "recent"}
    assert _outcome(treewidth, g, sep, limit, {}, **kw) == _outcome(reference, g, sep, limit, {}, **kw)
    assert sum(calls) >= 10 and not all(calls)  # gathered once per call, used again after
