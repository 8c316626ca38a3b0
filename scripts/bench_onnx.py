#!/usr/bin/env python3
"""Time the ONNX path: load every sample and a synthetic model of N ops, build the training
graph, and run store-all through the simulator. Prints figures; asserts nothing.

    PYTHONPATH=. python scripts/bench_onnx.py            # samples + 5,000-op synthetic model
    PYTHONPATH=. python scripts/bench_onnx.py --ops 20000

The synthetic model is a stack of transformer-like blocks built with onnx.helper (MatMul,
Add, LayerNormalization, Softmax, Gelu, Reshape/Transpose views, shape arithmetic with a
symbolic batch dimension), so it exercises the same paths as an exported model.
Target (DESIGN §6, issue 3): under 10 s for 5,000 ops on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remat_cli.loaders import LoadOptions, load_graph  # noqa: E402
from remat_cli.simulate import simulate  # noqa: E402
from remat_cli.strategies.store_all import store_all_schedule  # noqa: E402


def synthetic_model(n_ops: int, hidden: int = 256, heads: int = 4):
    """A transformer-like stack of at least ``n_ops`` ONNX ops with a symbolic ``batch``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = []
    inits = []
    seq = 128
    head = hidden // heads

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(name, shape):
        # weights without data: only their shape matters (as in a stripped export)
        t = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
        t.data_location = TensorProto.EXTERNAL
        entry = t.external_data.add()
        entry.key, entry.value = "location", "absent.bin"
        inits.append(t)
        return name

    const("axes0", np.array([0], np.int64))
    const("idx0", np.array(0, np.int64))
    const("tail", np.array([seq, heads, head], np.int64))
    const("merge", np.array([seq, hidden], np.int64))
    x = "x"
    block = 0
    while len(nodes) < n_ops:
        p = f"b{block}."

        def node(op, ins, attrs=None, n_out=1, name=None):
            outs = [f"{p}{name or op}{len(nodes)}_{i}" for i in range(n_out)]
            nodes.append(helper.make_node(op, ins, outs, name=f"{p}{name or op}{len(nodes)}", **(attrs or {})))
            return outs[0] if n_out == 1 else outs

        ln1 = node("LayerNormalization", [x, weight(p + "ln1.w", [hidden]), weight(p + "ln1.b", [hidden])], {"axis": -1})
        qkv = node("MatMul", [ln1, weight(p + "qkv", [hidden, 3 * hidden])])
        q, k, v = node("Split", [qkv], {"axis": -1, "num_outputs": 3}, n_out=3)
        shape = node("Shape", [x])
        b = node("Gather", [shape, "idx0"], {"axis": 0})
        b1 = node("Unsqueeze", [b, "axes0"])
        target = node("Concat", [b1, "tail"], {"axis": 0})
        heads_t = []
        for t in (q, k, v):
            r = node("Reshape", [t, target])
            heads_t.append(node("Transpose", [r], {"perm": [0, 2, 1, 3]}))
        kt = node("Transpose", [heads_t[1]], {"perm": [0, 1, 3, 2]})
        scores = node("MatMul", [heads_t[0], kt])
        scaled = node("Mul", [scores, const(p + "scale", np.array(head**-0.5, np.float32))])
        probs = node("Softmax", [scaled], {"axis": -1})
        ctx = node("MatMul", [probs, heads_t[2]])
        ctx_t = node("Transpose", [ctx], {"perm": [0, 2, 1, 3]})
        merge_t = node("Concat", [b1, "merge"], {"axis": 0})
        merged = node("Reshape", [ctx_t, merge_t])
        proj = node("MatMul", [merged, weight(p + "proj", [hidden, hidden])])
        res1 = node("Add", [x, proj])
        ln2 = node("LayerNormalization", [res1, weight(p + "ln2.w", [hidden]), weight(p + "ln2.b", [hidden])], {"axis": -1})
        up = node("MatMul", [ln2, weight(p + "up", [hidden, 4 * hidden])])
        act = node("Gelu", [up])
        down = node("MatMul", [act, weight(p + "down", [4 * hidden, hidden])])
        x = node("Add", [res1, down])
        block += 1
    graph = helper.make_graph(
        nodes,
        "synthetic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", seq, hidden])],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def bench(path: Path, dims: dict[str, int], label: str) -> dict:
    row = {"model": label}
    for mode, training in (("inference", False), ("training", True)):
        t0 = time.perf_counter()
        graph = load_graph(path, LoadOptions(dims=tuple(dims.items()), training=training))
        t1 = time.perf_counter()
        schedule, _ = store_all_schedule(graph)
        result = simulate(graph, schedule)
        t2 = time.perf_counter()
        assert result.metrics is not None
        row[f"{mode}_nodes"] = graph.n
        row[f"{mode}_load_s"] = round(t1 - t0, 3)
        row[f"{mode}_store_all_s"] = round(t2 - t1, 3)
        row[f"{mode}_peak_GiB"] = round(result.metrics.peak_bytes / 2**30, 3)
        row[f"{mode}_est_ms"] = round(1e3 * (result.metrics.est_seconds or 0), 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=5000, help="ops in the synthetic model (default 5000)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--sequence", type=int, default=512)
    parser.add_argument("--no-samples", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    if not args.no_samples:
        index = json.loads((ROOT / "scripts" / "sample_shapes.json").read_text())
        for name, entry in index.items():
            dims = {k: (args.batch if k == "batch" else args.sequence) for k in entry["example_dims"]}
            rows.append(bench(ROOT / entry["file"], dims, f"{name} ({entry['nodes']} ops)"))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        m = synthetic_model(args.ops)
        path = Path(tmp) / "synthetic.onnx"
        path.write_bytes(m.SerializeToString())
        build = time.perf_counter() - t0
        rows.append(bench(path, {"batch": args.batch}, f"synthetic ({len(m.graph.node)} ops)"))
        print(f"built the synthetic model in {build:.2f} s")
    cols = [
        "model",
        "inference_nodes",
        "inference_load_s",
        "training_nodes",
        "training_load_s",
        "training_store_all_s",
        "inference_peak_GiB",
        "training_peak_GiB",
        "training_est_ms",
    ]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
    synthetic = rows[-1]
    total = synthetic["training_load_s"] + synthetic["training_store_all_s"]
    print(f"synthetic model: load + training graph + store-all in {total:.2f} s (target < 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
