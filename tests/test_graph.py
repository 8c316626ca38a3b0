"""The Graph: structure, order, needed set and lower bound agree with direct definitions."""

from __future__ import annotations

import json
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given

from remat_cli.errors import InputError
from remat_cli.graph import Graph, NodeSpec
from tests.conftest import raw_dags


@given(raw_dags())
def test_structure_matches_definitions(raw):
    g = raw.build()
    nxg = nx.DiGraph()
    nxg.add_nodes_from(nd.id for nd in raw.nodes)
    nxg.add_edges_from((u, nd.id) for nd in raw.nodes for u in nd.inputs)
    assert g.n == len(raw.nodes) and g.num_edges == nxg.number_of_edges()
    # topological order is a permutation in which every edge goes forward
    pos = np.empty(g.n, int)
    pos[g.topo] = np.arange(g.n)
    assert sorted(g.topo.tolist()) == list(range(g.n))
    src, dst = g.edges()
    assert np.all(pos[src] < pos[dst])
    # inputs keep file order
    for v, nd in enumerate(raw.nodes):
        assert [g.ids[u] for u in g.preds(v)] == list(nd.inputs)
        assert sorted(g.ids[w] for w in g.succs(v)) == sorted(nxg.successors(nd.id))
    # targets: given, else sinks
    expected_targets = raw.targets if raw.targets is not None else [x for x in nxg if nxg.out_degree(x) == 0]
    assert sorted(g.ids[t] for t in g.targets) == sorted(expected_targets)
    # needed = targets and their ancestors
    needed = set(expected_targets).union(*(nx.ancestors(nxg, t) for t in expected_targets))
    assert {g.ids[v] for v in np.flatnonzero(g.needed)} == needed
    # LB by its definition
    by_id = {nd.id: nd for nd in raw.nodes}
    demand = {v: by_id[v].mem + by_id[v].workspace + sum(by_id[u].mem for u in by_id[v].inputs) for v in needed}
    assert g.lb == raw.fixed + max(demand.values())
    assert demand[g.ids[g.lb_node]] == g.lb - raw.fixed
    assert math.isclose(g.base_cost, sum(by_id[v].cost for v in needed))


@given(raw_dags())
def test_to_networkx_carries_every_node_edge_and_size(raw):
    g = raw.build()
    nxg = g.to_networkx()
    assert list(nxg.nodes) == list(g.ids) and nxg.number_of_edges() == g.num_edges
    assert nxg.graph == {"name": g.name, "fixed_mem": g.fixed_mem, "cost_unit": g.cost_unit}
    targets = {g.ids[t] for t in g.targets}
    for nd in raw.nodes:
        attrs = nxg.nodes[nd.id]
        assert list(nxg.predecessors(nd.id)) == list(nd.inputs)  # input order kept
        assert (attrs["mem"], attrs["cost"], attrs["workspace"], attrs["op"]) == (nd.mem, nd.cost, nd.workspace, nd.op)
        assert attrs["target"] == (nd.id in targets) and "backward" not in attrs
    # networkx's own algorithms agree with the graph's needed set
    needed = targets.union(*(nx.ancestors(nxg, t) for t in targets))
    assert {g.ids[v] for v in np.flatnonzero(g.needed)} == needed


@given(raw_dags())
def test_node_link_written_by_networkx_reads_back(raw):
    """``nx.node_link_data(g.to_networkx())`` is node-link JSON our reader reads as ``g``
    (less what node-link does not carry: workspaces, targets other than the sinks, and
    the order of each node's inputs, since networkx lists the links by source)."""
    from remat_cli.loaders import nodelink

    g = raw.build()
    doc = json.loads(json.dumps(nx.node_link_data(g.to_networkx(), edges="links")))
    back = nodelink.read(doc, source="nl.json")
    assert back.ids == g.ids and back.name == g.name and back.fixed_mem == g.fixed_mem
    assert [sorted(p) for p in back.pred_lists] == [sorted(p) for p in g.pred_lists] and back.ops == g.ops
    assert back.mem.tolist() == g.mem.tolist() and back.cost.tolist() == g.cost.tolist()
    sinks = np.flatnonzero(np.diff(g.succ_ptr) == 0).tolist()
    assert back.targets.tolist() == sinks


def test_to_networkx_marks_backward_nodes_of_a_training_graph():
    from remat_cli import generators
    from remat_cli.training import checkmate_training_graph

    g = checkmate_training_graph(generators.chain(3))
    nxg = g.to_networkx()
    assert [v for v, d in nxg.nodes(data=True) if d["backward"]] == [g.ids[v] for v in range(g.n) if g.kinds[v] == "backward"]
    assert {v for v, d in nxg.nodes(data=True) if d["target"]} == {g.ids[t] for t in g.targets}


def test_file_order_kept_when_topological():
    g = Graph.from_nodes([NodeSpec("a"), NodeSpec("c"), NodeSpec("b", ["a"]), NodeSpec("d", ["b", "c"])])
    assert g.topo.tolist() == [0, 1, 2, 3]


def test_arrays_are_read_only():
    g = Graph.from_nodes([NodeSpec("a", mem=3), NodeSpec("b", ["a"], mem=4)])
    with pytest.raises(ValueError):
        g.mem[0] = 7
    with pytest.raises(AttributeError):
        g.fixed_mem = 3  # type: ignore[misc]


def test_sha256_depends_on_content_not_name():
    a = Graph.from_nodes([NodeSpec("a", mem=3), NodeSpec("b", ["a"], mem=4)], name="x")
    b = Graph.from_nodes([NodeSpec("a", mem=3), NodeSpec("b", ["a"], mem=4)], name="y")
    c = Graph.from_nodes([NodeSpec("a", mem=3), NodeSpec("b", ["a"], mem=5)], name="x")
    assert a.sha256 == b.sha256 != c.sha256


@pytest.mark.parametrize(
    "nodes, targets, message",
    [
        ([NodeSpec("a"), NodeSpec("a")], None, "duplicate node id 'a'"),
        ([NodeSpec("a", ["zz"])], None, "node 'a': input 'zz' names no node"),
        ([NodeSpec("a", ["c"]), NodeSpec("b", ["a"]), NodeSpec("c", ["b"])], None, "cycle"),
        ([NodeSpec("a", ["a"])], None, "reads its own output"),
        ([NodeSpec("a", mem=-1)], None, "node 'a': mem -1 is negative"),
        ([NodeSpec("a", cost=float("nan"))], None, "node 'a': cost is nan"),
        ([NodeSpec("a", mem="big")], None, "node 'a': mem 'big' is not a number"),
        ([NodeSpec("a", mem=1.5)], None, "not a whole number"),
        ([NodeSpec("a", cost=float("inf"))], None, "not a finite number"),
        ([NodeSpec("a")], ["b"], "target 'b' is not a node"),
        ([], None, "no nodes"),
    ],
)
def test_bad_graphs_are_refused_with_a_clear_message(nodes, targets, message):
    with pytest.raises(InputError) as exc:
        Graph.from_nodes(nodes, targets=targets, source="f.json")
    assert message in str(exc.value)
    assert str(exc.value).startswith("f.json: ")
    assert exc.value.exit_code == 2


def test_cycle_message_names_the_nodes_on_it():
    nodes = [NodeSpec("x"), NodeSpec("a", ["x", "c"]), NodeSpec("b", ["a"]), NodeSpec("c", ["b"])]
    with pytest.raises(InputError) as exc:
        Graph.from_nodes(nodes, source="f.json")
    msg = str(exc.value)
    assert all(f"'{v}'" in msg for v in "abc") and "'x'" not in msg
