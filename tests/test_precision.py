"""--precision: sizes, saved tensors, fixed memory and roofline peaks per training dtype."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule

from _onnx_models import init, load, mlp_model, model, save, tensor


def _store_all_peak(graph) -> int:
    schedule, _ = store_all_schedule(graph)
    return int(require_valid(graph, schedule).peak_bytes)


def linear_stack(layers: int, width: int, act: str = "Relu"):
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"h{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node(act, [f"h{i}"], [f"a{i}"], name=f"act{i}"))
        inits.append(init(f"W{i}", (width, width)))
        x = f"a{i}"
    return model(nodes, [tensor("x", ["batch", width])], [tensor(x, ["batch", width])], inits)


def conv_stack(layers: int, channels: int):
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        nodes.append(helper.make_node("Conv", [x, f"W{i}", f"B{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        inits += [init(f"W{i}", (channels, channels, 3, 3)), init(f"B{i}", (channels,))]
        x = f"r{i}"
    return model(nodes, [tensor("x", ["batch", channels, 8, 8])], [tensor(x, ["batch", channels, 8, 8])], inits)


def attention_block():
    """x -> q,k (MatMul) -> scores MatMul -> Softmax -> P @ v -> LayerNorm."""
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "Wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["x", "Wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"], name="pv"),
        helper.make_node("LayerNormalization", ["o", "g", "b"], ["y"], name="ln", axis=-1),
    ]
    inits = [init("Wq", (16, 16)), init("Wk", (16, 16)), init("Wv", (16, 16)), init("g", (16,)), init("b", (16,))]
    return model(nodes, [tensor("x", ["batch", 32, 16])], [tensor("y", ["batch", 32, 16])], inits)


def _activation_peak(graph) -> int:
    return _store_all_peak(graph) - int(graph.fixed_mem)


@settings(max_examples=8, deadline=None)
@given(layers=st.integers(1, 4), width=st.sampled_from([4, 8, 12]), batch=st.integers(1, 6), conv=st.booleans())
def test_bf16_halves_the_activation_part_of_store_all(tmp_path_factory, layers, width, batch, conv):
    tmp = tmp_path_factory.mktemp("p")
    m = conv_stack(layers, width) if conv else linear_stack(layers, width)
    path = save(m, tmp)
    g32 = load(path, dims={"batch": batch})
    g16 = load(path, dims={"batch": batch}, precision="bf16")
    assert _activation_peak(g16) * 2 == _activation_peak(g32)
    # every value is exactly half (no normalization statistics in these stacks)
    assert g16.ids == g32.ids
    assert (g16.mem * 2 == g32.mem).all()
    # parameters, gradients (sgd: one copy) in bf16 too; the inputs stay as exported
    params32 = g32.meta["parameter_bytes"]
    assert g16.meta["parameter_bytes"] * 2 == params32
    assert g32.fixed_mem - g16.fixed_mem == params32  # params and grads: 2 x half of params32
    assert g16.meta["precision"] == "bf16"


def test_bf16_keeps_normalization_statistics_fp32(tmp_path):
    path = save(mlp_model(), tmp_path)
    g32 = load(path, dims={"batch": 4})
    g16 = load(path, dims={"batch": 4}, precision="bf16")
    stats = g32.index["ln:stats"]
    assert g16.mem[g16.index["ln:stats"]] == g32.mem[stats]  # the documented exception
    for node in ("mm1", "relu", "sig", "mul", "ln", "add", "mm2"):
        assert g16.mem[g16.index[node]] * 2 == g32.mem[g32.index[node]]


def test_amp_runs_matmuls_in_half_and_softmax_norm_in_fp32(tmp_path):
    path = save(attention_block(), tmp_path)
    # as exported (unfused): the probabilities are a node of their own
    g32 = load(path, dims={"batch": 2}, attention="unfused")
    amp = load(path, dims={"batch": 2}, precision="amp", attention="unfused")
    size = lambda g, n: int(g.mem[g.index[n]])  # noqa: E731
    for node in ("q", "k", "v", "scores", "pv"):
        assert size(amp, node) * 2 == size(g32, node), node
    for node in ("softmax", "ln"):
        assert size(amp, node) == size(g32, node), node  # fp32 list: softmax, layer_norm
    # P @ V reads a half-precision cast of the fp32 probabilities, and its backward saves
    # that cast (not the fp32 softmax output), while softmax's backward saves its output
    cast = "softmax:to_float16:pv"
    assert size(amp, cast) * 2 == size(g32, "softmax")
    bwd_pv = {amp.ids[u] for u in amp.pred_lists[amp.index["bwd:pv"]]}
    assert cast in bwd_pv and "softmax" not in bwd_pv
    assert "softmax" in {amp.ids[u] for u in amp.pred_lists[amp.index["bwd:softmax"]]}
    # layer norm casts its half input up to fp32 and saves that
    assert size(amp, "pv:to_float32:ln") == size(g32, "pv")
    # fixed memory: fp32 parameters + grads + the cached half copies of the three weights
    parts = amp.meta["fixed_parts"]
    assert parts["half weight copies (amp)"] == 3 * 16 * 16 * 2
    assert amp.fixed_mem == g32.fixed_mem + 3 * 16 * 16 * 2
    _store_all_peak(amp)


def test_amp_with_fused_attention_halves_its_output_not_its_statistic(tmp_path):
    """--attention fused runs before --precision: the fused node runs in half under amp,
    its output halves while the fp32 logsumexp statistic does not."""
    path = save(attention_block(), tmp_path)
    g32 = load(path, dims={"batch": 2})
    amp = load(path, dims={"batch": 2}, precision="amp")
    fused = [v for v in range(g32.n) if g32.ops[v] == "Attention"]
    assert len(fused) == 1 and g32.meta["attention"]["blocks"] == 1
    node = g32.ids[fused[0]]
    unfused = load(path, dims={"batch": 2}, attention="unfused")
    out = int(unfused.mem[unfused.index["pv"]])
    lse = int(g32.mem[fused[0]]) - out
    assert lse > 0
    assert int(amp.mem[amp.index[node]]) == out // 2 + lse
    _store_all_peak(amp)


def test_roofline_uses_the_half_precision_peak(tmp_path):
    path = save(linear_stack(2, 64), tmp_path)
    g32 = load(path, dims={"batch": 4096}, device="a100")
    g16 = load(path, dims={"batch": 4096}, device="a100", precision="fp16")
    mm32, mm16 = g32.index["mm0"], g16.index["mm0"]
    flops = 2 * 4096 * 64 * 64
    assert g32.seconds[mm32] == pytest.approx(
        max(flops / 19.5e12, 3 * 4096 * 64 * 4 / 2039e9, (2 * 4096 * 64 + 64 * 64) * 4 / 2039e9), rel=0.01
    )
    bytes16 = (2 * 4096 * 64 + 64 * 64) * 2
    assert g16.seconds[mm16] == pytest.approx(max(flops / 312e12, bytes16 / 2039e9), rel=1e-6)


def test_precision_is_recorded_and_named_by_validate(tmp_path):
    from click.testing import CliRunner

    from remat_cli.cli import cli as main

    path = save(mlp_model(), tmp_path)
    plan = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", str(path), "--dim", "batch=4", "--precision", "bf16", "-o", str(plan)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["validate", str(path), str(plan), "--dim", "batch=4"])
    assert r.exit_code == 2
    assert "--precision bf16 (this run: --precision fp32)" in r.output
    r = CliRunner().invoke(main, ["validate", str(path), str(plan), "--dim", "batch=4", "--precision", "bf16"])
    assert r.exit_code == 0, r.output


def test_precision_on_a_json_graph_is_one_line_exit_2(tmp_path):
    from click.testing import CliRunner

    from remat_cli.cli import cli as main

    r = CliRunner().invoke(main, ["info", "sample_graphs/training_chain_32.json", "--precision", "bf16"])
    assert r.exit_code == 2
    assert "--precision" in r.output and "Traceback" not in r.output
    assert np.isfinite(1.0)
