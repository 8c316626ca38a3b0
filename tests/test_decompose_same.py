"""The faster eliminations (issue 14 item 1: integer bitsets and one array of scores up to
``decompose.BITSET_LIMIT`` nodes) equal the code they replaced
(tests/decompose_reference.py, as of 553b7c9): for min-degree and min-fill, with the
default caps, without caps, and with caps low enough to stop part way (a core bag), the
same elimination order, the same bags (each bag's first node, and its nodes), the same
tree, width and core; ``tree_decomposition`` the same bags node for node; and the bare
recursion over the same separator tree the same schedule, which the simulator accepts.
The adjacency-set loop kept above the limit is checked the same way (the limit lowered
to 0), exact and approximate min-fill both. Graphs: grids (wide ones too), skip chains,
partial k-trees, diamonds and random DAGs, forward and training (tests/graphgen.py), and
arbitrary undirected graphs, sparse to dense (degrees past ``FILL_DEGREE_CAP``)."""

from __future__ import annotations

import decompose_reference as reference
import numpy as np
import pytest
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
METHODS = ("min-degree", "min-fill")


def _same(new: D.TreeDecomposition, old: D.TreeDecomposition) -> None:
    """The same elimination, step for step (a bag's neighbours may come in another order)."""
    assert [b[0] for b in new.bags] == [b[0] for b in old.bags]
    assert [sorted(b) for b in new.bags] == [sorted(b) for b in old.bags]
    assert new.parent.tolist() == old.parent.tolist()
    assert (new.width, new.core, new.method) == (old.width, old.core, old.method)


def _both(adj: list[set[int]], method: str, **kw) -> None:
    new = D.elimination_decomposition([set(a) for a in adj], method, **kw)
    old = reference.elimination_decomposition([set(a) for a in adj], method, **kw)
    _same(new, old)


def _adj(n: int, edges: list[tuple[int, int]]) -> list[set[int]]:
    adj: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    return adj


def _patch(mp: pytest.MonkeyPatch, name: str, value: int) -> None:
    """Set a cap in both codes."""
    mp.setattr(D, name, value)
    mp.setattr(reference, name, value)


def _graph(kind: str, n: int, seed: int):
    if kind == "wide grid":  # a forward grid of 3–6 rows and its training graph
        g = G.grid(3 + seed % 4, max(2, n // 3))
        return checkmate_training_graph(g) if seed % 2 else g
    return tied_graph(kind, n, seed)


KINDS = ["grid", "wide grid", "skip", "pkt", "diamonds", "dag"]


@SETTINGS
@given(st.sampled_from(KINDS), st.integers(4, 60), st.integers(0, 10_000), st.booleans())
def test_eliminations_are_the_references(kind: str, n: int, seed: int, moral: bool) -> None:
    """Both heuristics on the (moral or plain) skeleton of generated graphs, with the
    default caps and with none."""
    g = _graph(kind, n, seed)
    _, adj = D.skeleton(g, moral=moral)
    for method in METHODS:
        _both(adj, method)
        _both(adj, method, max_degree=None)


@SETTINGS
@given(st.integers(1, 70), st.floats(0.0, 1.0), st.integers(0, 10_000), st.integers(0, 30), st.integers(0, 400))
def test_arbitrary_graphs_and_caps(n: int, p: float, seed: int, cap: int, slack: int) -> None:
    """Arbitrary undirected graphs, sparse to dense (isolated nodes, cliques, degrees past
    a lowered ``FILL_DEGREE_CAP``), with a degree cap and a fill-edge cap that stop the
    elimination part way (a core bag)."""
    rng = np.random.default_rng(seed)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < p]
    adj = _adj(n, pairs)
    with pytest.MonkeyPatch.context() as mp:
        for method in METHODS:
            _both(adj, method)
            _both(adj, method, max_degree=None)
            _both(adj, method, max_degree=cap)
        _patch(mp, "FILL_DEGREE_CAP", cap // 3)
        _both(adj, "min-fill", max_degree=None)
        _patch(mp, "FILL_EDGE_SLACK", slack)
        _patch(mp, "FILL_EDGE_MAX", slack // 2)
        for method in METHODS:
            _both(adj, method)


@SETTINGS
@given(st.sampled_from(KINDS), st.integers(4, 50), st.integers(0, 10_000), st.booleans())
def test_the_set_loop_is_the_references(kind: str, n: int, seed: int, exact: bool) -> None:
    """Above ``BITSET_LIMIT`` (lowered to 0 here) the adjacency-set loop: the reference's,
    exact min-fill and (``MIN_FILL_EXACT_LIMIT`` lowered to 0) the approximate one."""
    g = _graph(kind, n, seed)
    _, adj = D.skeleton(g)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(D, "BITSET_LIMIT", 0)
        if not exact:
            _patch(mp, "MIN_FILL_EXACT_LIMIT", 0)
        for method in METHODS:
            _both(adj, method)
            _both(adj, method, max_degree=3 + seed % 5)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KINDS), st.integers(4, 40), st.integers(0, 10_000))
def test_tree_decompositions_and_bare_runs_are_the_references(kind: str, n: int, seed: int) -> None:
    """``tree_decomposition`` (the narrower of the two) gives the bags node for node, the
    tree and the width the reference's elimination gives; the bare recursion over its
    separator tree the same steps, valid in the simulator."""
    g = _graph(kind, n, seed)
    new = D.tree_decomposition(g)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(D, "elimination_decomposition", reference.elimination_decomposition)
        old = D.tree_decomposition(g)
    assert new.bags == old.bags
    assert new.parent.tolist() == old.parent.tolist()
    assert (new.width, new.method, new.core) == (old.width, old.method, old.core)
    run = treewidth.recursive_schedule(g, D.separator_tree(g, new), None)[0]
    ref = treewidth.recursive_schedule(g, D.separator_tree(g, old), None)[0]
    assert run.ops.tolist() == ref.ops.tolist() and run.nodes.tolist() == ref.nodes.tolist()
    assert simulate(g, run).valid


@pytest.mark.parametrize("rows,cols", [(4, 60), (8, 64), (16, 12), (3, 200)])
def test_grids_are_the_references(rows: int, cols: int) -> None:
    """Training graphs of wide grids (grid1000 is the 8 × 64 one: 1,025 nodes), where
    min-fill adds thousands of fill edges."""
    g = checkmate_training_graph(G.grid(rows, cols))
    _, adj = D.skeleton(g)
    for method in METHODS:
        _both(adj, method)
