"""Graph formats: lossless round trips, detection by content, and the node-link/twremat shapes."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
from hypothesis import given

from remat_cli import generators as G
from remat_cli.loaders import load_graph, remat_json, twremat
from remat_cli.training import checkmate_training_graph
from tests.conftest import raw_dags


def _same(a, b, *, ops=True):
    assert a.ids == b.ids
    assert np.array_equal(a.pred_ptr, b.pred_ptr) and np.array_equal(a.pred_idx, b.pred_idx)
    assert np.array_equal(a.mem, b.mem) and np.array_equal(a.cost, b.cost)
    assert np.array_equal(a.targets, b.targets)
    if ops:
        assert a.ops == b.ops and a.kinds == b.kinds
        assert np.array_equal(a.workspace, b.workspace)
        assert a.fixed_mem == b.fixed_mem and a.cost_unit == b.cost_unit and a.name == b.name
        assert a.sha256 == b.sha256


@given(raw_dags())
def test_remat_json_round_trip_is_lossless(raw):
    import tempfile
    from pathlib import Path

    g = raw.build()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.json"
        path.write_text(remat_json.dumps(g))
        _same(g, load_graph(path))


def test_remat_json_keeps_seconds_and_kinds(tmp_path):
    g = checkmate_training_graph(G.unet(2))
    path = tmp_path / "u.json"
    path.write_text(remat_json.dumps(g))
    back = load_graph(path)
    _same(g, back)
    assert back.is_training


@given(raw_dags(shuffle=False))
def test_twremat_round_trip_keeps_structure_sizes_costs_targets(raw):
    import tempfile
    from pathlib import Path

    g = raw.build()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "g.txt"
        path.write_text(twremat.dumps(g))
        back = load_graph(path)
    # ids renumbered by index (twremat ids are integers); structure and numbers survive
    assert back.n == g.n
    assert [list(map(int, (back.ids[u] for u in back.preds(v)))) for v in range(g.n)] == [g.preds(v).tolist() for v in range(g.n)]
    assert np.array_equal(back.mem, g.mem) and np.array_equal(back.cost, g.cost)
    assert np.array_equal(back.targets, g.targets)


def test_twremat_reads_its_own_syntax(tmp_graph_file):
    text = "p remat2\nmemlimit 100\nnode 1 deps cpu 3 mem 10\nnode 2 deps 1 cpu 4 mem 20\nnode 3 deps 1 2 cpu 5 mem 30 target\n"
    g = load_graph(tmp_graph_file("any.name", text))
    assert g.ids == ("1", "2", "3") and g.mem.tolist() == [10, 20, 30]
    assert g.cost.tolist() == [3, 4, 5] and g.targets.tolist() == [2]
    assert g.meta["memlimit"] == 100


def test_node_link_checkmate_shape(tmp_graph_file):
    fwd = checkmate_training_graph(G.diamonds(2))
    nxg = nx.DiGraph()
    for v in range(fwd.n):
        nxg.add_node(v, name=fwd.ids[v], backward=fwd.kinds[v] == "backward", cost_cpu=float(fwd.cost[v]), cost_ram=int(fwd.mem[v]))
    src, dst = fwd.edges()
    nxg.add_edges_from(zip(src.tolist(), dst.tolist()))
    doc = nx.node_link_data(nxg, edges="links")
    g = load_graph(tmp_graph_file("cm.json", json.dumps(doc)))
    assert g.n == fwd.n and g.num_edges == fwd.num_edges
    assert np.array_equal(g.mem, fwd.mem) and np.array_equal(g.cost, fwd.cost)
    # backward-flagged nodes become the targets
    assert set(g.targets.tolist()) == {v for v in range(fwd.n) if fwd.kinds[v] == "backward"}


def test_node_link_moccasin_variant_with_edges_key(tmp_graph_file):
    doc = {
        "directed": True,
        "nodes": [{"id": 0, "duration": 2, "out_cost": 8}, {"id": 1, "duration": 3, "out_cost": 4}],
        "edges": [{"source": 0, "target": 1}],
    }
    g = load_graph(tmp_graph_file("m.json", json.dumps(doc)))
    assert g.mem.tolist() == [8, 4] and g.cost.tolist() == [2, 3] and g.targets.tolist() == [1]


def test_detected_by_content_not_suffix(tmp_graph_file):
    g = G.chain(4)
    assert load_graph(tmp_graph_file("graph.txt", remat_json.dumps(g))).n == 4
    assert load_graph(tmp_graph_file("graph.json", twremat.dumps(g))).n == 4
