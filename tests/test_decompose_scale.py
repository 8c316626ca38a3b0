"""The elimination's memory bound at scale (issue 14 item 2): the skeleton never grows by
more than ``decompose.FILL_EDGE_MAX`` edges, whatever its size, and the decomposition
stays valid. The caps are lowered here so that small generated graphs reach them; the
elimination is replayed from its bags to count the edges it held."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.training import checkmate_training_graph


def _most_fill(adj: list[set[int]], td: D.TreeDecomposition) -> int:
    """Replay the elimination the bags record; the largest growth of the edge count."""
    adj = [set(a) for a in adj]
    start = edges = sum(map(len, adj)) // 2
    most = 0
    bags = td.bags[:-1] if td.core else td.bags
    for bag in bags:
        v, nb = bag[0], set(bag[1:])
        assert adj[v] == nb  # each bag is the node and its neighbours when it went
        for a in nb:
            adj[a].discard(v)
            new = nb - adj[a] - {a}
            adj[a] |= new
            edges += len(new) / 2
        edges -= len(nb)
        adj[v] = set()
        most = max(most, edges - start)
    return int(most)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(4, 40), p=st.floats(0.05, 0.5), seed=st.integers(0, 50), fill=st.integers(0, 60))
def test_fill_stays_under_its_cap_and_the_decomposition_is_valid(n, p, seed, fill):
    g = checkmate_training_graph(G.random_dag(n, p, seed=seed))
    nodes, adj = D.skeleton(g)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(D, "FILL_EDGE_MAX", fill)
        mp.setattr(D, "FILL_EDGE_SLACK", 0)
        td = D.elimination_decomposition([set(a) for a in adj], "min-degree")
        full = D.tree_decomposition(g, methods=("min-degree",))
    assert _most_fill(adj, td) <= fill
    bags = [tuple(nodes[list(b)].tolist()) for b in td.bags]
    assert D.validate_decomposition(g, bags, td.tree_edges()) == []
    assert D.validate_decomposition(g, full.bags, full.tree_edges()) == []
    # on graphs this small the default caps never bind: the same bags as with no cap
    default = D.elimination_decomposition([set(a) for a in adj], "min-degree")
    free = D.elimination_decomposition([set(a) for a in adj], "min-degree", max_degree=None)
    assert default.bags == free.bags and not default.core
