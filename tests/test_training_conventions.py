"""Golden tests of the two training-graph conventions (DESIGN §2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _onnx_models import by_id, init, load, mlp_model, model, preds, save, tensor
from onnx import helper

from remat_cli import generators
from remat_cli.graph import Graph, NodeSpec
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule
from remat_cli.training import (
    AUTOGRAD,
    autograd_training_graph,
    build_training_graph,
    checkmate_training_graph,
    saves_for,
)


def _edges(graph: Graph) -> set[tuple[str, str]]:
    src, dst = graph.edges()
    return {(graph.ids[u], graph.ids[v]) for u, v in zip(src.tolist(), dst.tolist())}


def _store_all_valid(graph: Graph):
    schedule, _ = store_all_schedule(graph)
    return require_valid(graph, schedule)


# ---------------------------------------------------------------------------- checkmate
def _branchy() -> Graph:
    """a -> b -> d -> e, a -> c -> d (a branch), a -> e (a skip)."""
    spec = [
        NodeSpec("a", [], mem=10, cost=1),
        NodeSpec("b", ["a"], mem=20, cost=2),
        NodeSpec("c", ["a"], mem=30, cost=3),
        NodeSpec("d", ["b", "c"], mem=40, cost=4),
        NodeSpec("e", ["d", "a"], mem=50, cost=5),
    ]
    return Graph.from_nodes(spec, name="branchy")


def test_checkmate_edges_match_hand_derivation():
    train = checkmate_training_graph(_branchy())
    # derived by hand from DESIGN §2, rule by rule
    forward = {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e"), ("a", "e")}
    loss = {("e", "loss"), ("loss", "bwd:e")}
    own = {("a", "bwd:a"), ("b", "bwd:b"), ("c", "bwd:c"), ("d", "bwd:d"), ("e", "bwd:e")}
    grad_chain = {  # bwd(v) -> bwd(u) per forward edge u -> v
        ("bwd:b", "bwd:a"),
        ("bwd:c", "bwd:a"),
        ("bwd:d", "bwd:b"),
        ("bwd:d", "bwd:c"),
        ("bwd:e", "bwd:d"),
        ("bwd:e", "bwd:a"),
    }
    consumer = {  # v -> bwd(u) per forward edge u -> v
        ("b", "bwd:a"),
        ("c", "bwd:a"),
        ("d", "bwd:b"),
        ("d", "bwd:c"),
        ("e", "bwd:d"),
        ("e", "bwd:a"),
    }
    expected = forward | loss | own | grad_chain | consumer
    assert len(expected) == 25
    assert _edges(train) == expected
    assert train.n == 2 * 5 + 1
    g = by_id(train)
    for u, m, c in [("a", 10, 1), ("b", 20, 2), ("c", 30, 3), ("d", 40, 4), ("e", 50, 5)]:
        assert train.mem[g[f"bwd:{u}"]] == m
        assert train.cost[g[f"bwd:{u}"]] == 2 * c
        assert train.kinds[g[f"bwd:{u}"]] == "backward"
    assert train.kinds[g["loss"]] == "loss"
    assert sorted(train.ids[t] for t in train.targets) == [f"bwd:{x}" for x in "abcde"]
    _store_all_valid(train)


def test_checkmate_drops_unneeded_nodes():
    spec = [NodeSpec("a", [], mem=1), NodeSpec("b", ["a"], mem=1), NodeSpec("dead", ["a"], mem=7)]
    fwd = Graph.from_nodes(spec, targets=["b"])
    train = checkmate_training_graph(fwd)
    assert "dead" not in train.index and "bwd:dead" not in train.index
    assert train.n == 2 * 2 + 1


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 14), p=st.floats(0.1, 0.6), seed=st.integers(0, 10_000))
def test_checkmate_rules_on_random_dags(n, p, seed):
    fwd = generators.random_dag(n, p=p, seed=seed, max_size=5)
    train = checkmate_training_graph(fwd)
    L = int(fwd.needed.sum())
    assert train.n == 2 * L + 1
    edges = _edges(train)
    src, dst = fwd.edges()
    fwd_edges = {(fwd.ids[u], fwd.ids[v]) for u, v in zip(src.tolist(), dst.tolist())}
    sinks = {fwd.ids[v] for v in range(fwd.n) if not fwd.succ_lists[v]}
    expected = set(fwd_edges)
    for u, v in fwd_edges:
        expected |= {(f"bwd:{v}", f"bwd:{u}"), (v, f"bwd:{u}")}
    for u in fwd.ids:
        expected.add((u, f"bwd:{u}"))
    for s in sinks:
        expected |= {(s, "loss"), ("loss", f"bwd:{s}")}
    assert edges == expected
    _store_all_valid(train)


# ---------------------------------------------------------------------------- autograd
def _single_op_model(op: str, tmp_path, opset: int = 17, **attrs):
    """x -> MatMul(W) = a ; MatMul(W') = b ; op(a, b) or op(a) -> MatMul(W3) = out."""
    binary = op in ("Add", "Sub", "Mul", "Div")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="pa"),
        helper.make_node("MatMul", ["x", "W2"], ["b"], name="pb"),
        helper.make_node(op, ["a", "b"] if binary else ["a"], ["y"], name="op", **attrs),
        helper.make_node("MatMul", ["y", "W3"], ["out"], name="post"),
    ]
    inits = [init("W", (4, 4)), init("W2", (4, 4)), init("W3", (4, 4))]
    return load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], inits, opset=opset), tmp_path))


def test_relu_backward_reads_relu_output_not_its_input(tmp_path):
    g = _single_op_model("Relu", tmp_path)
    assert preds(g, "bwd:op") == {"bwd:post", "op"}
    assert "pa" not in preds(g, "bwd:op")


def test_add_backward_reads_neither_input(tmp_path):
    g = _single_op_model("Add", tmp_path)
    assert preds(g, "bwd:op") == {"bwd:post"}
    # it produces both inputs' gradients
    assert g.mem[g.index["bwd:op"]] == g.mem[g.index["pa"]] + g.mem[g.index["pb"]]


@pytest.mark.parametrize(
    "op, saved",
    [
        ("Sigmoid", {"op"}),
        ("Tanh", {"op"}),
        ("Softmax", {"op"}),
        ("Exp", {"op"}),
        ("Gelu", {"pa"}),
        ("Erf", {"pa"}),
        ("Mul", {"pa", "pb"}),
        ("Sub", set()),
        ("Transpose", set()),
    ],
)
def test_saved_tensors_per_op(tmp_path, op, saved):
    g = _single_op_model(op, tmp_path, opset=20, **({"axis": -1} if op == "Softmax" else {}))
    assert preds(g, "bwd:op") == {"bwd:post"} | saved
    assert saves_for(op)[1], f"{op} should be in the autograd table"


def test_whole_small_model_backward_inputs(tmp_path):
    g = load(save(mlp_model(), tmp_path), dims={"batch": 2})
    expected = {
        "loss": {"mm2"},
        "bwd:mm2": {"loss", "add"},  # MatMul: its activation input (W2 is fixed memory)
        "bwd:add": {"bwd:mm2"},  # Add: nothing saved
        "bwd:ln": {"bwd:add", "mul", "ln:stats"},  # LayerNorm: input and statistics
        "bwd:mul": {"bwd:ln", "relu", "sig"},  # Mul: both inputs
        "bwd:sig": {"bwd:mul", "sig"},  # Sigmoid: its output
        "bwd:relu": {"bwd:add", "bwd:mul", "bwd:sig", "relu"},  # gradients from 3 consumers + output
        "bwd:mm1": {"bwd:relu"},  # x is a model input (no gradient), W1 fixed
        "ln:stats": {"mul"},
        "ln": {"mul", "ln:stats"},
    }
    for node, want in expected.items():
        assert preds(g, node) == want, node
    n_fwd = sum(k == "forward" for k in g.kinds)
    assert n_fwd == 8 and g.kinds.count("backward") == 7 and g.kinds.count("loss") == 1
    m = {i: int(g.mem[v]) for i, v in g.index.items()}
    assert m["relu"] == 2 * 8 * 4
    assert m["bwd:mul"] == m["relu"] + m["sig"]
    assert m["bwd:add"] == m["ln"] + m["relu"]
    assert m["bwd:mm1"] == 0  # only parameter gradients, which are fixed memory
    assert m["ln:stats"] == 2 * 2 * 4  # mean and inverse std per row, float32
    assert m["loss"] == m["mm2"]
    # fixed: input 64 B + parameters (8*8 + 8 + 8 + 8*4) * 4 B = 448 B, and their gradients
    assert g.fixed_mem == 64 + 448 + 448
    adam = load(save(mlp_model(), tmp_path, "adam.onnx"), dims={"batch": 2}, optimizer="adam")
    momentum = load(save(mlp_model(), tmp_path, "mom.onnx"), dims={"batch": 2}, optimizer="momentum")
    assert adam.fixed_mem == g.fixed_mem + 2 * 448
    assert momentum.fixed_mem == g.fixed_mem + 448
    _store_all_valid(g)
    _store_all_valid(adam)


def test_unknown_op_saves_everything_and_is_reported(tmp_path):
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="pa"),
        helper.make_node("MatMul", ["x", "W2"], ["b"], name="pb"),
        helper.make_node("Mystery", ["a", "b"], ["y"], name="op", domain="custom.ops"),
        helper.make_node("MatMul", ["y", "W3"], ["out"], name="post"),
    ]
    # no shape or type for y: the loader estimates its size and takes its dtype from the inputs
    m = model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], [init("W", (4, 4)), init("W2", (4, 4)), init("W3", (4, 4))])
    m.opset_import.append(helper.make_opsetid("custom.ops", 1))
    g = load(save(m, tmp_path))
    assert preds(g, "bwd:op") == {"bwd:post", "pa", "pb", "op"}
    assert g.meta["autograd_unknown_ops"] == {"custom.ops.Mystery": 1}
    assert g.meta["estimated_values"] == ["y"]
    assert g.mem[g.index["op"]] == 2 * 4 * 4  # the largest input's size


def test_autograd_without_parameters_differentiates_the_inputs():
    # a plain graph (no op semantics): sources are where gradients are wanted
    fwd = generators.skip_chain(6)
    train = autograd_training_graph(fwd)
    assert train.kinds.count("backward") == 6
    _store_all_valid(train)


def test_build_training_graph_rejects_unknown_names():
    from remat_cli.errors import InputError

    with pytest.raises(InputError):
        build_training_graph(generators.chain(3), convention="tape")
    with pytest.raises(InputError):
        build_training_graph(generators.chain(3), optimizer="lion")


def test_no_trainable_path_is_bad_input(tmp_path):
    from remat_cli.errors import InputError

    nodes = [helper.make_node("ArgMax", ["x"], ["s"], name="argmax", axis=1), helper.make_node("Cast", ["s"], ["out"], to=1, name="cast")]
    m = model(nodes, [tensor("x", [4, 3])], [tensor("out", [4, 1])], [])
    with pytest.raises(InputError, match="nothing to train"):
        load(save(m, tmp_path))


def test_table_entries_are_consistent():
    for op, entry in AUTOGRAD.items():
        assert entry.factor > 0, op
        assert entry.inputs == "all" or all(isinstance(s, int) and s >= 0 for s in entry.inputs), op


def test_checkmate_convention_on_onnx(tmp_path):
    g = load(save(mlp_model(), tmp_path), dims={"batch": 2}, convention="checkmate")
    L = g.kinds.count("forward")
    assert g.n == 2 * L + 1 and L == 7  # no statistics nodes in this convention
    assert preds(g, "bwd:relu") == {"relu", "sig", "mul", "add", "bwd:sig", "bwd:mul", "bwd:add"}
    assert np.isclose(g.cost[g.index["bwd:relu"]], 2 * g.cost[g.index["relu"]])
    assert g.fixed_mem == 64 + 448 + 448
    _store_all_valid(g)


def test_parameters_seen_through_views_still_get_gradients(tmp_path):
    # the bias is reshaped (a folded view) before it is added: Add still reads a parameter
    nodes = [
        helper.make_node("Reshape", ["bias", "shape"], ["bias2"], name="view"),
        helper.make_node("Add", ["x", "bias2"], ["y"], name="add"),
        helper.make_node("Relu", ["y"], ["out"], name="relu"),
    ]
    inits = [init("bias", (4,)), init("shape", (2,), np.int64, [1, 4])]
    g = load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], inits), tmp_path))
    assert {"bwd:add", "bwd:relu"} <= set(g.ids)
    assert preds(g, "bwd:add") == {"bwd:relu"}
    assert g.fixed_mem == 2 * 4 * 4 + 2 * 4 * 4 + 2 * 8  # input, bias + its gradient, shape


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 14), p=st.floats(0.1, 0.6), seed=st.integers(0, 10_000))
def test_autograd_on_plain_graphs(n, p, seed):
    """Without op semantics every node is differentiable and saves inputs and output."""
    fwd = generators.random_dag(n, p=p, seed=seed, max_size=5)
    train = autograd_training_graph(fwd)
    keep = [fwd.ids[v] for v in fwd.needed_nodes.tolist()]
    assert train.n == 2 * len(keep) + 1
    for v in fwd.needed_nodes.tolist():
        name = fwd.ids[v]
        consumers = {fwd.ids[c] for c in fwd.succ_lists[v] if fwd.needed[c]}
        want = {f"bwd:{c}" for c in consumers} | {fwd.ids[u] for u in fwd.pred_lists[v]} | {name}
        if v in fwd.targets.tolist():
            want.add("loss")
        assert preds(train, f"bwd:{name}") == want
        assert train.mem[train.index[f"bwd:{name}"]] == sum(int(fwd.mem[u]) for u in fwd.pred_lists[v])
        assert train.cost[train.index[f"bwd:{name}"]] == 2 * fwd.cost[v]
    _store_all_valid(train)


def test_json_graph_training_flags(tmp_path):
    from remat_cli.loaders import LoadOptions, load_graph
    from remat_cli.loaders import remat_json

    fwd = generators.unet(2)
    path = tmp_path / "unet.json"
    path.write_text(remat_json.dumps(fwd))
    as_given = load_graph(path, LoadOptions())
    assert not as_given.is_training and as_given.sha256 == fwd.sha256
    cm = load_graph(path, LoadOptions(training=True))
    ag = load_graph(path, LoadOptions(training=True, convention="autograd"))
    assert cm.meta["training_convention"] == "checkmate" and ag.meta["training_convention"] == "autograd"
    assert cm.n == ag.n == 2 * fwd.n + 1
    _store_all_valid(cm)
    _store_all_valid(ag)


def test_products_keep_a_factor_only_for_the_other_factors_gradient(tmp_path):
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),  # x: model input, W: parameter
        helper.make_node("Mul", ["a", "half"], ["h"], name="scale"),  # times a constant
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "W2", "B2"], ["g"], name="gemm"),
        helper.make_node("Mul", ["g", "r"], ["out"], name="gate"),  # two activations
    ]
    inits = [init("W", (4, 4)), init("half", (), np.float32, 0.5), init("W2", (4, 4)), init("B2", (4,))]
    g = load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], inits), tmp_path))
    assert preds(g, "bwd:scale") == {"bwd:relu"}  # d(a*0.5)/da = 0.5: nothing kept
    assert preds(g, "bwd:gemm") == {"bwd:gate", "relu"}  # dW2 needs r; dr needs W2 (fixed)
    assert preds(g, "bwd:gate") == {"loss", "gemm", "relu"}
    assert preds(g, "bwd:mm") == {"bwd:scale"}  # dW needs x, a model input: fixed memory
