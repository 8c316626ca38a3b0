"""Fused attention (issue 15 item 2): exported attention blocks are recognised, and in
``fused`` mode the training graph keeps no [batch, heads, seq, seq] tensor for backward."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from remat_cli.cli import cli
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule
from tests._onnx_models import init, load, model, save, tensor

HEADS, HEAD_DIM = 4, 8
EMBED = HEADS * HEAD_DIM


def gpt2_model(layers: int = 1, scale: str = "div", mask: str = "where", batch="batch", seq="seq"):
    """A GPT-2-style stack: per layer Q, K, V projections, heads split by Reshape/Transpose,
    MatMul(Q, Kᵀ) → scale (Div/Mul/none) → mask (Where/Add/none) → Softmax → MatMul(·, V),
    heads merged, output projection, residual Add and LayerNorm."""
    nodes, inits = (
        [],
        [
            init("split", (4,), np.int64, [0, 0, HEADS, HEAD_DIM]),
            init("merge", (3,), np.int64, [0, 0, EMBED]),
            init("c", (), np.float32, [HEAD_DIM**0.5]),
            init("neg", (), np.float32, [-1e9]),
        ],
    )
    inputs = [tensor("x", [batch, seq, EMBED])]
    if mask == "where":
        inputs.append(tensor("causal", [1, 1, seq, seq], TensorProto.BOOL))
    elif mask == "add":
        inputs.append(tensor("amask", [batch, 1, 1, seq]))
    h = "x"
    for i in range(layers):
        p = f"l{i}_"
        for name in "qkv":
            inits.append(init(f"{p}W{name}", (EMBED, EMBED)))
            nodes.append(helper.make_node("MatMul", [h, f"{p}W{name}"], [f"{p}{name}"], name=f"{p}{name}proj"))
            nodes.append(helper.make_node("Reshape", [f"{p}{name}", "split"], [f"{p}{name}4"], name=f"{p}{name}split"))
        nodes.append(helper.make_node("Transpose", [f"{p}q4"], [f"{p}qh"], name=f"{p}qT", perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Transpose", [f"{p}k4"], [f"{p}kh"], name=f"{p}kT", perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Transpose", [f"{p}v4"], [f"{p}vh"], name=f"{p}vT", perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("MatMul", [f"{p}qh", f"{p}kh"], [f"{p}s"], name=f"{p}scores"))
        cur = f"{p}s"
        if scale != "none":
            nodes.append(helper.make_node("Div" if scale == "div" else "Mul", [cur, "c"], [f"{p}ss"], name=f"{p}scale"))
            cur = f"{p}ss"
        if mask == "where":
            nodes.append(helper.make_node("Where", ["causal", cur, "neg"], [f"{p}sm"], name=f"{p}mask"))
            cur = f"{p}sm"
        elif mask == "add":
            nodes.append(helper.make_node("Add", [cur, "amask"], [f"{p}sm"], name=f"{p}mask"))
            cur = f"{p}sm"
        nodes.append(helper.make_node("Softmax", [cur], [f"{p}p"], name=f"{p}softmax", axis=-1))
        nodes.append(helper.make_node("MatMul", [f"{p}p", f"{p}vh"], [f"{p}o"], name=f"{p}pv"))
        nodes.append(helper.make_node("Transpose", [f"{p}o"], [f"{p}om"], name=f"{p}oT", perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [f"{p}om", "merge"], [f"{p}o3"], name=f"{p}merge"))
        inits.append(init(f"{p}Wo", (EMBED, EMBED)))
        nodes.append(helper.make_node("MatMul", [f"{p}o3", f"{p}Wo"], [f"{p}proj"], name=f"{p}oproj"))
        nodes.append(helper.make_node("Add", [f"{p}proj", h], [f"{p}res"], name=f"{p}residual"))
        inits += [init(f"{p}g", (EMBED,)), init(f"{p}b", (EMBED,))]
        nodes.append(helper.make_node("LayerNormalization", [f"{p}res", f"{p}g", f"{p}b"], [f"{p}ln"], name=f"{p}ln", axis=-1))
        h = f"{p}ln"
    return model(nodes, inputs, [tensor(h, [batch, seq, EMBED])], inits, opset=17)


def _saved_sizes(g) -> set[int]:
    """Sizes of the forward values some backward node reads (what is kept for backward)."""
    out = set()
    for v in range(g.n):
        if g.kinds[v] == "backward":
            out.update(int(g.mem[u]) for u in g.pred_lists[v] if g.kinds[u] == "forward")
    return out


def _saved_bytes(g) -> int:
    """Bytes of the forward values some backward node reads."""
    back = [k == "backward" for k in g.kinds]
    return sum(int(g.mem[v]) for v in range(g.n) if g.kinds[v] == "forward" and any(back[w] for w in g.succ_lists[v]))


def _store_all_peak(g) -> int:
    schedule, _ = store_all_schedule(g)
    return require_valid(g, schedule).peak_bytes


@pytest.mark.parametrize("b,s", [(2, 16), (3, 24)])
def test_fused_keeps_no_seq_by_seq_tensor_for_backward(tmp_path, b, s):
    path = save(gpt2_model(layers=2), tmp_path)
    dims = {"batch": b, "seq": s}
    probs = b * HEADS * s * s * 4
    fused = load(path, dims=dims, attention="fused")
    unfused = load(path, dims=dims, attention="unfused")
    assert probs not in _saved_sizes(fused)
    assert probs in _saved_sizes(unfused)  # the Softmax output, read by its backward and by bwd(P@V)
    assert fused.meta["attention"]["blocks"] == unfused.meta["attention"]["blocks"] == 2
    # the fused node's value: the output [b,h,s,d] plus the fp32 logsumexp [b,h,s]
    att = [v for v in range(fused.n) if fused.ops[v] == "Attention" and fused.kinds[v] == "forward"]
    assert len(att) == 2
    assert all(int(fused.mem[v]) == b * HEADS * s * HEAD_DIM * 4 + b * HEADS * s * 4 for v in att)
    # its backward reads Q, Kᵀ, V and the fused value, nothing of size seq x seq
    bwd = fused.index["bwd:" + fused.ids[att[0]]]
    assert {fused.ops[u] for u in fused.pred_lists[bwd]} >= {"Attention", "Transpose"}
    # both plans replayed by the simulator; fused peaks lower
    assert _store_all_peak(fused) < _store_all_peak(unfused)


def test_fused_backward_costs_two_and_a_half_forward(tmp_path):
    g = load(save(gpt2_model(layers=1), tmp_path), dims={"batch": 2, "seq": 16}, attention="fused", cost="flops")
    v = next(v for v in range(g.n) if g.ops[v] == "Attention")
    fwd = 2 * 2 * HEADS * 16 * 16 * HEAD_DIM * 2  # two matmuls, 2 FLOPs per multiply-add
    assert g.cost[v] >= fwd
    assert g.cost[g.index["bwd:" + g.ids[v]]] == pytest.approx(2.5 * g.cost[v])


@settings(max_examples=12, deadline=None)
@given(
    layers=st.integers(1, 3),
    scale=st.sampled_from(["div", "mul", "none"]),
    mask=st.sampled_from(["where", "add", "none"]),
    b=st.integers(1, 3),
    s=st.integers(2, 24),
)
def test_every_block_is_recognised_and_fused_saves_memory_beyond_head_dim(tmp_path_factory, layers, scale, mask, b, s):
    """Fused keeps the output O [b,h,s,d] and the logsumexp [b,h,s] where unfused keeps the
    probabilities P [b,h,s,s] (both keep Q, Kᵀ, V): exactly that difference per layer (fused
    keeps less once seq > head_dim + 1; the peak also depends on the backward's transients)."""
    path = save(gpt2_model(layers=layers, scale=scale, mask=mask), tmp_path_factory.mktemp("att"))
    dims = {"batch": b, "seq": s}
    fused = load(path, dims=dims, attention="fused")
    unfused = load(path, dims=dims, attention="unfused")
    assert fused.meta["attention"]["blocks"] == layers
    assert unfused.meta["attention"]["probability_bytes"] == layers * b * HEADS * s * s * 4
    assert sum(op == "Softmax" for op in fused.ops) == 0
    assert sum(op == "Softmax" for op in unfused.ops) == layers
    kept_f, kept_u = _saved_bytes(fused), _saved_bytes(unfused)
    per_layer = b * HEADS * s * 4 * (s - HEAD_DIM - 1)  # P minus (O + logsumexp)
    assert kept_u - kept_f == layers * per_layer
    _store_all_peak(fused), _store_all_peak(unfused)  # both replay in the simulator


def test_a_classifier_softmax_is_not_attention(tmp_path):
    """MatMul with a weight → Softmax → MatMul with a weight is a linear layer, not attention."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="pa"),
        helper.make_node("Softmax", ["a"], ["p"], name="sm", axis=-1),
        helper.make_node("MatMul", ["p", "W2"], ["out"], name="post"),
    ]
    m = model(nodes, [tensor("x", [2, 8])], [tensor("out", [2, 4])], [init("W", (8, 8)), init("W2", (8, 4))])
    g = load(save(m, tmp_path), attention="fused")
    assert g.meta["attention"]["blocks"] == 0 and "Softmax" in g.ops


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit_b16"])
def test_samples_recognise_twelve_blocks(name):
    g = load(f"sample_graphs/{name}.onnx", dims={"batch": 2, "sequence": 128}, strict_dims=False, attention="fused")
    assert g.meta["attention"]["blocks"] == 12
    assert "Softmax" not in g.ops


def test_cli_reports_the_blocks(tmp_path):
    path = str(save(gpt2_model(layers=3), tmp_path))
    runner = CliRunner()
    res = runner.invoke(cli, ["plan", path, "--dim", "batch=2", "--dim", "seq=8", "-s", "store-all", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["attention"] == {
        "mode": "fused",
        "blocks": 3,
        "native_ops": 0,
        "probability_bytes": 3 * 2 * HEADS * 64 * 4,
    }
    res = runner.invoke(cli, ["plan", path, "--dim", "batch=2", "--dim", "seq=8", "-s", "store-all", "--attention", "unfused"])
    assert res.exit_code == 0, res.output
    assert "attention: 3 block(s) recognised; unfused" in res.stdout
    res = runner.invoke(cli, ["info", path, "--dim", "batch=2", "--dim", "seq=8", "--no-decompose"])
    assert res.exit_code == 0 and "3 block(s) recognised; fused" in res.stdout
    res = runner.invoke(cli, ["info", path, "--dim", "batch=2", "--dim", "seq=8", "--attention", "flash"])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_plan_file_records_the_attention_mode(tmp_path):
    """A plan made with fused attention names the mode, and validating it against the
    unfused graph says which option differs instead of only a missing node."""
    path = str(save(gpt2_model(layers=1), tmp_path))
    out = str(tmp_path / "p.json")
    runner = CliRunner()
    dims = ["--dim", "batch=2", "--dim", "seq=8"]
    res = runner.invoke(cli, ["plan", path, *dims, "-s", "store-all", "-o", out])
    assert res.exit_code == 0, res.output
    assert json.loads(open(out).read())["load"]["attention"] == "fused"
    res = runner.invoke(cli, ["validate", path, out, *dims])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["validate", path, out, *dims, "--attention", "unfused"])
    assert res.exit_code != 0 and "--attention fused" in res.output and "Traceback" not in res.output
