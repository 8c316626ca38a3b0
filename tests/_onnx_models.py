"""Small ONNX models built with onnx.helper for the ONNX tests (no torch anywhere)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from remat_cli.graph import Graph
from remat_cli.loaders import LoadOptions, load_graph

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def init(name: str, shape, dtype=np.float32, value=None) -> onnx.TensorProto:
    """An initializer with real data (small tests) of the given shape."""
    arr = np.asarray(value, dtype=dtype) if value is not None else np.zeros(shape, dtype=dtype)
    return numpy_helper.from_array(arr.reshape(shape) if value is None else arr, name)


def model(nodes, inputs, outputs, initializers=(), opset: int = 17, value_info=()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), initializer=list(initializers), value_info=list(value_info))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    m.ir_version = 8
    return m


def tensor(name: str, shape, dtype=F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def save(m: onnx.ModelProto, tmp_path: Path, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())
    return path


def load(path: Path, **kw) -> Graph:
    dims = kw.pop("dims", {})
    return load_graph(path, LoadOptions(dims=tuple(dims.items()), **kw))


def by_id(graph: Graph) -> dict[str, int]:
    return dict(graph.index)


def preds(graph: Graph, node_id: str) -> set[str]:
    """Ids of a node's inputs."""
    v = graph.index[node_id]
    return {graph.ids[u] for u in graph.pred_lists[v]}


def mlp_model(batch="batch") -> onnx.ModelProto:
    """x[batch,8] -> MatMul(W1) -> Relu -> Sigmoid, Mul(r, s) -> LayerNorm -> Add(ln, r) -> MatMul(W2).

    The branches exercise every kind of saved tensor: inputs of a product (Mul), output
    of an activation (Relu, Sigmoid), input and statistics of a normalization, nothing
    for Add, activation inputs of a contraction (MatMul).
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["s"], name="sig"),
        helper.make_node("Mul", ["r", "s"], ["m"], name="mul"),
        helper.make_node("LayerNormalization", ["m", "scale", "bias"], ["ln"], name="ln", axis=-1),
        helper.make_node("Add", ["ln", "r"], ["y"], name="add"),
        helper.make_node("MatMul", ["y", "W2"], ["out"], name="mm2"),
    ]
    inits = [init("W1", (8, 8)), init("scale", (8,)), init("bias", (8,)), init("W2", (8, 4))]
    return model(nodes, [tensor("x", [batch, 8])], [tensor("out", [batch, 4])], inits)
