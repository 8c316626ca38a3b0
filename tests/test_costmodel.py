"""FLOPs of known ops, counted by hand; device profiles; roofline seconds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

from _onnx_models import init, load, model, save, tensor

from remat_cli.costmodel import COST_KINDS, COST_UNITS, PROFILES, cost_vector, load_device, op_flops, roofline_seconds
from remat_cli.errors import InputError


def test_conv_flops():
    # out 2x4x8x8 = 512 values, each a 3x3x3 window: 27 multiply-adds
    assert op_flops("Conv", {}, [(2, 3, 8, 8), (4, 3, 3, 3)], [(2, 4, 8, 8)]) == (2 * 512 * 27, True)
    # with a bias: one add per output
    assert op_flops("Conv", {}, [(2, 3, 8, 8), (4, 3, 3, 3), (4,)], [(2, 4, 8, 8)])[0] == 2 * 512 * 27 + 512


def test_depthwise_conv_flops():
    # group=4: each of the 36 outputs reads one channel's 3x3 window (W is 4x1x3x3)
    assert op_flops("Conv", {"group": 4}, [(1, 4, 5, 5), (4, 1, 3, 3)], [(1, 4, 3, 3)])[0] == 2 * 36 * 9


def test_conv_transpose_flops():
    # every input value (1*2*4*4 = 32) is scattered into 3 channels x 2x2 kernel
    assert op_flops("ConvTranspose", {}, [(1, 2, 4, 4), (2, 3, 2, 2)], [(1, 3, 8, 8)])[0] == 2 * 32 * 3 * 4


def test_matmul_flops():
    # (2,3,4) @ (4,5): 30 outputs, 4 multiply-adds each
    assert op_flops("MatMul", {}, [(2, 3, 4), (4, 5)], [(2, 3, 5)])[0] == 2 * 30 * 4
    # vector @ matrix
    assert op_flops("MatMul", {}, [(4,), (4, 5)], [(5,)])[0] == 2 * 5 * 4


def test_gemm_flops():
    # A is 4x3 transposed: M=3, K=4; B 4x5: N=5; C adds 15
    assert op_flops("Gemm", {"transA": 1}, [(4, 3), (4, 5), (5,)], [(3, 5)])[0] == 2 * 3 * 5 * 4 + 15
    assert op_flops("Gemm", {}, [(3, 4), (4, 5)], [(3, 5)])[0] == 2 * 3 * 5 * 4


def test_einsum_flops():
    assert op_flops("Einsum", {"equation": "bij,bjk->bik"}, [(2, 3, 4), (2, 4, 5)], [(2, 3, 5)])[0] == 2 * 2 * 3 * 4 * 5
    assert op_flops("Einsum", {"equation": "...ij,...jk->...ik"}, [(6, 3, 4), (6, 4, 5)], [(6, 3, 5)])[0] == 2 * 6 * 3 * 4 * 5


def test_elementwise_reduction_norm_pool_flops():
    assert op_flops("Add", {}, [(2, 3), (3,)], [(2, 3)]) == (6.0, True)
    assert op_flops("Tanh", {}, [(10,)], [(10,)])[0] == 40  # transcendental: 4 per element
    assert op_flops("ReduceMean", {}, [(4, 5)], [(4, 1)])[0] == 20
    assert op_flops("Softmax", {}, [(4, 5)], [(4, 5)])[0] == 5 * 20
    assert op_flops("LayerNormalization", {}, [(4, 5), (5,), (5,)], [(4, 5)])[0] == 8 * 20
    assert op_flops("MaxPool", {"kernel_shape": [2, 2]}, [(1, 1, 4, 4)], [(1, 1, 2, 2)])[0] == 4 * 4
    assert op_flops("GlobalAveragePool", {}, [(1, 2, 4, 4)], [(1, 2, 1, 1)])[0] == 32
    assert op_flops("Transpose", {}, [(4, 5)], [(5, 4)]) == (0.0, True)
    assert op_flops("Resize", {"mode": "nearest"}, [(1, 1, 2, 2)], [(1, 1, 4, 4)])[0] == 0


def test_unknown_or_shapeless_ops_are_estimates():
    flops, exact = op_flops("Frobnicate", {}, [(3, 3)], [(3, 3)])
    assert flops == 9 and not exact
    assert op_flops("MatMul", {}, [None, (4, 5)], [None]) == (0.0, False)


def test_roofline_is_the_max_of_compute_and_memory_time():
    a100 = PROFILES["a100"]
    flops = np.array([19.5e12, 1.0])
    nbytes = np.array([1.0, 2039e9])
    peaks = np.array([a100.peak("float32")] * 2)
    assert roofline_seconds(flops, nbytes, peaks, a100.bandwidth).tolist() == pytest.approx([1.0, 1.0])
    assert a100.peak("float16") == 312e12 and a100.peak("int8") == a100.peak("default")


def test_one_cost_table_names_every_cost_kind():
    parts = {kind: np.array([float(i + 1)]) for i, kind in enumerate(("flops", "bytes", "unit", "roofline"))}
    for kind in COST_KINDS:
        assert cost_vector(kind, parts["flops"], parts["bytes"], parts["unit"], parts["roofline"]) is parts[kind]
        assert kind in COST_UNITS
    with pytest.raises(InputError, match="--cost 'watts'"):
        cost_vector("watts", *parts.values())


def test_device_profiles_builtin_and_from_json(tmp_path):
    assert load_device("H100").name == "h100"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"name": "mine", "peak_flops": {"float32": 1e12, "float16": 4e12}, "bandwidth": 1e11}))
    dev = load_device(str(path))
    assert dev.peak("float16") == 4e12 and dev.peak("bfloat16") == 1e12 and dev.bandwidth == 1e11
    path.write_text(json.dumps({"peak_flops": 5e12, "bandwidth": 0}))
    with pytest.raises(InputError, match="bandwidth"):
        load_device(str(path))
    with pytest.raises(InputError, match="not a built-in device"):
        load_device("tpu9")


def test_conv_cost_through_the_loader(tmp_path):
    """A Conv model's node cost is the hand count; its seconds are the roofline's."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    m = model(nodes, [tensor("x", [2, 3, 8, 8])], [tensor("y", [2, 4, 8, 8])], [init("W", (4, 3, 3, 3)), init("B", (4,))])
    path = save(m, tmp_path)
    flops_g = load(path, training=False, cost="flops")
    want = 2 * 512 * 27 + 512
    assert flops_g.cost[0] == want
    bytes_g = load(path, training=False, cost="bytes")
    moved = (2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 4 + 2 * 4 * 8 * 8) * 4
    assert bytes_g.cost[0] == moved
    path_dev = tmp_path / "dev.json"
    path_dev.write_text(json.dumps({"peak_flops": 1e6, "bandwidth": 1e9}))
    slow = load(path, training=False, device=str(path_dev))
    assert slow.cost_unit == "seconds" and slow.cost[0] == pytest.approx(max(want / 1e6, moved / 1e9))
    cpu = load(path, training=False, device="cpu")
    assert cpu.cost[0] == pytest.approx(max(want / 768e9, moved / 51.2e9))
