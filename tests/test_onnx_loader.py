"""The ONNX loader: dims, views, multi-output ops, fixed memory, control flow, samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from _onnx_models import init, load, mlp_model, model, preds, save, tensor

from remat_cli.errors import InputError
from remat_cli.loaders import LoadOptions, build_graph, load_graph, other_variant, read_file
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule
from remat_cli.units import from_data, say


def _said(graph, key: str) -> str:
    """The ``remat info`` line ``key`` of ``graph`` (its meta holds facts, rendered here)."""
    return str(say(from_data(graph.meta["info"][key])))


ROOT = Path(__file__).resolve().parent.parent
SAMPLES = json.loads((ROOT / "scripts" / "sample_shapes.json").read_text())


def _valid_store_all(graph):
    schedule, _ = store_all_schedule(graph)
    return require_valid(graph, schedule)


def test_symbolic_dims_scale_sizes(tmp_path):
    path = save(mlp_model(), tmp_path)
    small = load(path, dims={"batch": 2}, training=False)
    big = load(path, dims={"batch": 16}, training=False)
    assert small.ids == big.ids
    relu = small.index["relu"]
    assert small.mem[relu] == 2 * 8 * 4 and big.mem[relu] == 16 * 8 * 4
    assert big.fixed_mem - small.fixed_mem == (16 - 2) * 8 * 4  # the input grows, weights don't
    assert small.meta["dims"] == {"batch": 2}


def test_unresolved_dims_name_them(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", ["batch", "seq", 4])], [tensor("y", ["batch", "seq", 4])])
    with pytest.raises(InputError) as err:
        load(save(m, tmp_path), training=False)
    msg = err.value.message
    assert "batch, seq" in msg and "--dim batch=" in msg and "--dim seq=" in msg
    with pytest.raises(InputError, match="unresolved dimension seq"):
        load(save(m, tmp_path), training=False, dims={"batch": 2})
    g = load(save(m, tmp_path), training=False, dims={"batch": 2, "seq": 3})
    assert int(g.mem[0]) == 2 * 3 * 4 * 4


def test_anonymous_input_dims_get_names(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", [None, 4])], [tensor("y", [None, 4])])
    with pytest.raises(InputError, match=r"x\.0"):
        load(save(m, tmp_path), training=False)
    assert int(load(save(m, tmp_path), training=False, dims={"x.0": 5}).mem[0]) == 5 * 4 * 4


def test_unknown_dim_name_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="no dimension named 'sequence'.*batch"):
        load(save(mlp_model(), tmp_path), dims={"batch": 2, "sequence": 8})


def _view_model():
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
        helper.make_node("Reshape", ["a", "shape"], ["a2"], name="reshape"),
        helper.make_node("Unsqueeze", ["a2", "axes"], ["a3"], name="unsq"),
        helper.make_node("Relu", ["a3"], ["r"], name="relu"),
        helper.make_node("Squeeze", ["r", "axes"], ["r2"], name="sq"),
        helper.make_node("MatMul", ["r2", "W2"], ["out"], name="mm2"),
    ]
    inits = [init("W", (4, 6)), init("shape", (2,), np.int64, [3, 4]), init("axes", (1,), np.int64, [0]), init("W2", (4, 2))]
    return model(nodes, [tensor("x", [2, 4])], [tensor("out", [3, 2])], inits)


def test_views_are_folded_into_their_producer(tmp_path):
    g = load(save(_view_model(), tmp_path), training=False)
    assert set(g.ids) == {"mm", "relu", "mm2"}
    assert preds(g, "relu") == {"mm"} and preds(g, "mm2") == {"relu"}
    assert "2 views" in _said(g, "folded") or "3 views" in _said(g, "folded")
    kept = load(save(_view_model(), tmp_path), training=False, keep_views=True)
    assert set(kept.ids) == {"mm", "reshape", "unsq", "relu", "sq", "mm2"}
    assert preds(kept, "relu") == {"unsq"} and preds(kept, "unsq") == {"reshape"}
    # a kept view is a node of its full size that costs nothing
    assert kept.mem[kept.index["reshape"]] == kept.mem[kept.index["mm"]] == 2 * 6 * 4
    assert kept.cost[kept.index["reshape"]] == 0
    # training graphs of both: views have no backward node when folded
    train = load(save(_view_model(), tmp_path))
    assert "bwd:reshape" not in train.index and preds(train, "bwd:relu") == {"bwd:mm2", "relu"}
    _valid_store_all(train)
    _valid_store_all(load(save(_view_model(), tmp_path), keep_views=True))


def test_multi_output_op_is_one_node(tmp_path):
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
        helper.make_node("Split", ["a", "split"], ["p", "q"], name="split", axis=1),
        helper.make_node("Relu", ["p"], ["rp"], name="relu"),
        helper.make_node("Mul", ["rp", "q"], ["out"], name="mul"),
    ]
    inits = [init("W", (4, 6)), init("split", (2,), np.int64, [2, 4])]
    g = load(save(model(nodes, [tensor("x", [3, 4])], [tensor("out", [3, 2])], inits), tmp_path), training=False)
    assert g.mem[g.index["split"]] == 3 * 2 * 4 + 3 * 4 * 4  # both outputs
    assert preds(g, "relu") == {"split"} and preds(g, "mul") == {"relu", "split"}
    _valid_store_all(g)


def test_constants_initializers_and_inputs_are_fixed(tmp_path):
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const", value=helper.make_tensor("cv", 1, [2, 4], [1.0] * 8)),
        helper.make_node("Mul", ["x", "c"], ["m"], name="mul"),
        helper.make_node("MatMul", ["m", "W"], ["out"], name="mm"),
    ]
    g = load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 3])], [init("W", (4, 3))]), tmp_path), training=False)
    assert set(g.ids) == {"mul", "mm"}  # the Constant is not scheduled
    assert g.fixed_mem == 2 * 4 * 4 + 4 * 3 * 4 + 2 * 4 * 4  # input + W + constant
    assert preds(g, "mul") == set()
    parts = g.meta["fixed_parts"]
    assert parts == {"inputs": 32, "parameters": 48, "constants and buffers": 32}


def test_shape_arithmetic_is_folded_and_sizes_exact(tmp_path):
    # Reshape to (Shape(x)[0] // 2, -1): needs Div, which ONNX data propagation skips
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Div", ["n", "two"], ["half"], name="div"),
        helper.make_node("Unsqueeze", ["half", "axes"], ["half1"], name="unsq"),
        helper.make_node("Concat", ["half1", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "target"], ["rr"], name="reshape"),
        helper.make_node("Transpose", ["rr"], ["out"], name="t", perm=[1, 0]),
    ]
    inits = [
        init("zero", (), np.int64, 0),
        init("two", (), np.int64, 2),
        init("axes", (1,), np.int64, [0]),
        init("minus1", (1,), np.int64, [-1]),
    ]
    g = load(save(model(nodes, [tensor("x", ["batch", 6])], [tensor("out", None)], inits), tmp_path), training=False, dims={"batch": 4})
    assert set(g.ids) == {"relu", "t"}
    assert g.mem[g.index["t"]] == 4 * 6 * 4
    assert g.meta["estimated_values"] == []
    assert _said(g, "folded").startswith("2 views into their producers, 4 shape computations")


def test_control_flow_is_one_opaque_node(tmp_path):
    then_g = helper.make_graph([helper.make_node("MatMul", ["a", "W"], ["t_out"], name="then_mm")], "then", [], [tensor("t_out", [2, 4])])
    else_g = helper.make_graph([helper.make_node("Relu", ["a"], ["e_out"], name="else_relu")], "else", [], [tensor("e_out", [2, 4])])
    nodes = [
        helper.make_node("MatMul", ["x", "W0"], ["a"], name="pre"),
        helper.make_node("ReduceSum", ["x"], ["sum"], name="rsum", keepdims=0),
        helper.make_node("Greater", ["sum", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("MatMul", ["y", "W2"], ["out"], name="post"),
    ]
    inits = [init("W0", (4, 4)), init("W", (4, 4)), init("W2", (4, 4)), init("zero", (), np.float32, 0.0)]
    g = load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], inits), tmp_path), training=False, cost="flops")
    assert "then_mm" not in g.index and "else_relu" not in g.index
    assert preds(g, "branch") == {"gt", "pre"}  # the condition and the outer value its branches read
    assert g.cost[g.index["branch"]] == 2 * 2 * 4 * 4 + 2 * 4  # then MatMul + else Relu
    assert "If x1" in _said(g, "control flow")
    train = load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], inits), tmp_path, "t.onnx"))
    assert "bwd:branch" in train.index  # unknown to the table: saves everything
    _valid_store_all(train)


def test_unknown_ops_are_warned_once(tmp_path):
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
        helper.make_node("Frob", ["a"], ["b"], name="f1", domain="acme"),
        helper.make_node("Frob", ["b"], ["c"], name="f2", domain="acme"),
        helper.make_node("Relu", ["c"], ["out"], name="relu"),
    ]
    m = model(
        nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], [init("W", (4, 4))], value_info=[tensor("b", [2, 4]), tensor("c", [2, 4])]
    )
    m.opset_import.append(helper.make_opsetid("acme", 1))
    seen: list[str] = []
    g = load_graph(save(m, tmp_path), LoadOptions(training=False), warn=seen.append)
    cost_warnings = [w for w in seen if "without a cost model" in w]
    assert len(cost_warnings) == 1 and "acme.Frob x2" in cost_warnings[0]
    assert g.meta["unknown_ops"] == {"acme.Frob": 2}
    assert g.cost[g.index["f1"]] > 0  # a default cost, not zero


def test_outputs_depending_on_nothing(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["unused"], name="r")]
    m = model(nodes, [tensor("x", [2])], [tensor("x", [2])])
    with pytest.raises(InputError, match="depend on no operation"):
        load(save(m, tmp_path), training=False)


def test_reading_an_undefined_value_names_it(tmp_path):
    m = model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(InputError, match="'ghost'"):
        load(save(m, tmp_path), training=False)


def test_nodes_out_of_order_are_sorted(tmp_path):
    nodes = [
        helper.make_node("Relu", ["a"], ["out"], name="second"),
        helper.make_node("MatMul", ["x", "W"], ["a"], name="first"),
    ]
    g = load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], [init("W", (4, 4))]), tmp_path), training=False)
    assert preds(g, "second") == {"first"}
    _valid_store_all(g)


def test_cost_kinds_and_seconds(tmp_path):
    path = save(mlp_model(), tmp_path)
    by_kind = {k: load(path, dims={"batch": 2}, training=False, cost=k) for k in ("flops", "bytes", "unit", "roofline")}
    assert by_kind["flops"].cost_unit == "flops" and by_kind["roofline"].cost_unit == "seconds"
    assert by_kind["unit"].cost.tolist() == [1.0] * by_kind["unit"].n
    mm1 = by_kind["flops"].index["mm1"]
    assert by_kind["flops"].cost[mm1] == 2 * 2 * 8 * 8
    assert by_kind["bytes"].cost[mm1] == (2 * 8 + 8 * 8 + 2 * 8) * 4
    for g in by_kind.values():  # every variant carries roofline seconds for est_seconds
        assert g.seconds is not None and np.allclose(g.seconds, by_kind["roofline"].cost)
        m = _valid_store_all(g)
        assert m.est_seconds == pytest.approx(float(by_kind["roofline"].cost.sum()))


# ---------------------------------------------------------------------------- samples
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_load_exactly(name):
    entry = SAMPLES[name]
    path = ROOT / entry["file"]
    assert path.stat().st_size < 2 * 1024 * 1024
    dims = {k: (2 if k == "batch" else 64) for k in entry["example_dims"]}
    options = LoadOptions(dims=tuple(dims.items()))
    loaded = read_file(path, options)
    train = build_graph(loaded, options).graph
    label, fwd = other_variant(loaded, options)
    assert label == "inference" and fwd.kinds.count("backward") == 0
    assert fwd.meta["estimated_values"] == [] and fwd.meta["unknown_ops"] == {}
    assert train.meta["autograd_unknown_ops"] == {}
    assert fwd.meta["parameter_count"] == entry["parameters"]  # torch's own count at export
    assert train.kinds.count("backward") > 0.7 * fwd.n
    m_train = _valid_store_all(train)
    m_fwd = _valid_store_all(fwd)
    assert m_train.peak_bytes > m_fwd.peak_bytes >= fwd.lb
    assert m_train.est_seconds > m_fwd.est_seconds > 0


def test_sample_batch_scales_activations():
    path = ROOT / SAMPLES["resnet18"]["file"]
    two, four = load(path, dims={"batch": 2}, training=False), load(path, dims={"batch": 4}, training=False)
    bn = np.array([op == "BatchNormalization" for op in two.ops])
    assert np.array_equal(four.mem[~bn], 2 * two.mem[~bn])
    # training-mode BatchNormalization also outputs its running mean and variance (2 x C floats)
    assert set((2 * two.mem[bn] - four.mem[bn]).tolist()) == {8 * c for c in (64, 128, 256, 512)}
    # 1.82 G multiply-adds per 224x224 image (He et al. 2016, Table 1): about 3.6 GFLOP
    assert two.meta["forward_flops"] / 2 == pytest.approx(3.64e9, rel=0.02)


def test_local_functions_are_expanded(tmp_path):
    # gelu(x) = x * sigmoid(1.702 x), written as a model-local function
    fn = helper.make_function(
        "local",
        "QuickGelu",
        ["x"],
        ["y"],
        [
            helper.make_node("Constant", [], ["k"], value=helper.make_tensor("k", 1, [], [1.702])),
            helper.make_node("Mul", ["x", "k"], ["kx"]),
            helper.make_node("Sigmoid", ["kx"], ["s"]),
            helper.make_node("Mul", ["x", "s"], ["y"]),
        ],
        [helper.make_opsetid("", 17)],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"),
        helper.make_node("QuickGelu", ["a"], ["out"], name="act", domain="local"),
    ]
    m = model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], [init("W", (4, 4))])
    m.functions.append(fn)
    m.opset_import.append(helper.make_opsetid("local", 1))
    g = load(save(m, tmp_path), training=False)
    assert sorted(g.ops) == ["MatMul", "Mul", "Mul", "Sigmoid"]
    assert g.meta["unknown_ops"] == {}


def test_loop_costs_its_body_times_the_trip_count(tmp_path):
    from onnx import TensorProto

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["v_in", "W"], ["v_out"]),
        ],
        "body",
        [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL), tensor("v_in", [2, 4])],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("v_out", [2, 4])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="pre"),
        helper.make_node("Loop", ["trips", "", "a"], ["looped"], name="loop", body=body),
        helper.make_node("Relu", ["looped"], ["out"], name="post"),
    ]
    inits = [init("trips", (), np.int64, 3), init("W", (4, 4))]
    g = load(save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], inits), tmp_path), training=False, cost="flops")
    assert g.cost[g.index["loop"]] == 3 * (2 * 2 * 4 * 4)
    assert preds(g, "loop") == {"pre"} and g.mem[g.index["loop"]] == 2 * 4 * 4
    assert _said(g, "control flow").startswith("Loop x1")


def test_input_without_shape_is_bad_input(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", None)], [tensor("y", None)])
    with pytest.raises(InputError, match="input 'x' has no shape"):
        load(save(m, tmp_path), training=False)


def test_transposed_weights_are_the_weights(tmp_path):
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], name="wt", perm=[1, 0]),
        helper.make_node("MatMul", ["x", "Wt"], ["a"], name="mm"),
        helper.make_node("Relu", ["a"], ["out"], name="relu"),
    ]
    path = save(model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 3])], [init("W", (3, 4))]), tmp_path)
    g = load(path)
    assert "wt" not in g.index and g.meta["parameter_bytes"] == 48
    assert preds(g, "bwd:mm") == {"bwd:relu"}  # dW needs x (an input), dx is not wanted
    kept = load(path, keep_views=True)
    assert "wt" in kept.index


def test_dropout_shapes_are_inferred_at_small_sequence_lengths():
    # Dropout draws random numbers so it is never evaluated, but its output shape is its
    # input's: skipping its shape inference left everything after the first attention
    # dropout "estimated", and the estimates compounded into sizes of ~1e16 B (gpt2 at
    # sequence 8 was refused as above the size limit; bert at sequence 1 reported ~3e18 B).
    path = ROOT / SAMPLES["gpt2"]["file"]
    small = load(path, dims={"batch": 1, "sequence": 8}, training=False)
    big = load(path, dims={"batch": 1, "sequence": 16}, training=False)
    assert small.meta["estimated_values"] == [] and big.meta["estimated_values"] == []
    assert small.ids == big.ids
    # every activation of a 768-wide model at batch 1 holds at most 4 * 16 * 50257 fp32 logits
    assert int(big.mem.max()) <= 4 * 16 * 50257
    # sizes grow with the sequence: linearly (most), quadratically (attention scores), or not
    ratio = big.mem[small.mem > 0] / small.mem[small.mem > 0]
    assert set(np.round(ratio, 6).tolist()) <= {1.0, 2.0, 4.0}
    assert (ratio == 2.0).mean() > 0.5
    assert _valid_store_all(small).peak_bytes < _valid_store_all(big).peak_bytes
    bert = load(ROOT / SAMPLES["bert"]["file"], dims={"batch": 1, "sequence": 1}, training=False)
    assert bert.meta["estimated_values"] == []
    assert int(bert.mem.max()) <= 4 * 3072 and bert.fixed_mem < 2**32
    _valid_store_all(bert)


def test_estimated_split_outputs_partition_their_input(tmp_path):
    # an output of unknown shape is estimated from its inputs; for Split each of the n outputs
    # is one part of the input, not a copy of it (n copies compounded, layer after layer,
    # into sizes far beyond the model's: 3x per attention block in gpt2)
    nodes = [
        helper.make_node("Frob", ["x"], ["a"], name="f", domain="acme"),
        helper.make_node("Split", ["a"], ["p", "q", "r"], name="split", axis=1),
        helper.make_node("Concat", ["p", "q", "r"], ["out"], name="cat", axis=1),
    ]
    m = model(nodes, [tensor("x", [2, 6])], [tensor("out", [2, 6])])
    m.opset_import.append(helper.make_opsetid("acme", 1))
    g = load_graph(save(m, tmp_path), LoadOptions(training=False))
    assert "p" in g.meta["estimated_values"]
    assert g.mem[g.index["f"]] == 2 * 6 * 4
    assert g.mem[g.index["split"]] == 3 * -(-(2 * 6 * 4) // 3) == 2 * 6 * 4
    assert _valid_store_all(g).peak_bytes >= g.lb
