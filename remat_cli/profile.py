"""Measured per-op times (``--profile FILE``) in place of the roofline estimate.

Two formats, told apart by content:

* CSV ``node,seconds`` (an optional header row ``node,seconds``): seconds per node id of
  the graph that is scheduled (forward ids, ``bwd:ID`` for backward nodes). Matched by id.
* a Chrome trace from ``torch.profiler`` (``prof.export_chrome_trace``): JSON
  ``{"traceEvents": [...]}`` whose complete events (``"ph": "X"``) have a ``name`` and
  a ``dur`` in microseconds. Event names that equal node ids are matched by id (each id's
  durations summed, divided by the number of steps ``ProfilerStep#N`` in the trace, at
  least one). When no name matches a node id, events are aggregated per op type
  (:data:`ATEN_OPS`: ``aten::conv2d`` -> ``Conv``, ``ConvolutionBackward0`` -> the
  ``ConvGrad`` backward nodes, …): the mean measured time per call of that type is
  spread over the graph's nodes of that type in proportion to their roofline estimates,
  so their total is (mean per call) x (number of nodes).

Nodes that match get the measured seconds (and, when the graph's cost unit is seconds,
that cost); the rest keep the roofline. :class:`ProfileMatch` says how many matched and
how; no match at all is reported as a warning.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.units import Phrase, to_data

__all__ = ["ProfileMatch", "ATEN_OPS", "read_profile", "apply_profile"]

#: ONNX op type -> PyTorch profiler event names, the first present taken (nested events
#: such as aten::linear > aten::addmm would count twice if both were)
ATEN_OPS: dict[str, tuple[str, ...]] = {
    "Conv": ("aten::conv2d", "aten::conv1d", "aten::conv3d", "aten::convolution"),
    "ConvTranspose": ("aten::conv_transpose2d", "aten::conv_transpose1d", "aten::conv_transpose3d"),
    "MatMul": ("aten::matmul", "aten::bmm", "aten::mm"),
    "Gemm": ("aten::linear", "aten::addmm"),
    "Relu": ("aten::relu", "aten::relu_"),
    "Gelu": ("aten::gelu",),
    "Sigmoid": ("aten::sigmoid",),
    "Tanh": ("aten::tanh",),
    "Softmax": ("aten::softmax", "aten::_softmax"),
    "LogSoftmax": ("aten::log_softmax", "aten::_log_softmax"),
    "LayerNormalization": ("aten::layer_norm", "aten::native_layer_norm"),
    "BatchNormalization": ("aten::batch_norm", "aten::native_batch_norm", "aten::cudnn_batch_norm"),
    "Add": ("aten::add", "aten::add_"),
    "Sub": ("aten::sub",),
    "Mul": ("aten::mul",),
    "Div": ("aten::div",),
    "MaxPool": ("aten::max_pool2d", "aten::max_pool2d_with_indices"),
    "AveragePool": ("aten::avg_pool2d",),
    "GlobalAveragePool": ("aten::adaptive_avg_pool2d", "aten::mean"),
    "Gather": ("aten::embedding", "aten::index_select"),
    "Dropout": ("aten::dropout", "aten::native_dropout"),
    "Concat": ("aten::cat",),
    "ConvGrad": ("ConvolutionBackward0",),
    "ConvTransposeGrad": ("ConvolutionBackward0",),
    "MatMulGrad": ("MmBackward0", "BmmBackward0", "UnsafeViewBackward0"),
    "GemmGrad": ("AddmmBackward0",),
    "ReluGrad": ("ReluBackward0",),
    "GeluGrad": ("GeluBackward0",),
    "SigmoidGrad": ("SigmoidBackward0",),
    "TanhGrad": ("TanhBackward0",),
    "SoftmaxGrad": ("SoftmaxBackward0",),
    "LogSoftmaxGrad": ("LogSoftmaxBackward0",),
    "LayerNormalizationGrad": ("NativeLayerNormBackward0",),
    "BatchNormalizationGrad": ("CudnnBatchNormBackward0", "NativeBatchNormBackward0"),
    "AddGrad": ("AddBackward0",),
    "MulGrad": ("MulBackward0",),
    "MaxPoolGrad": ("MaxPool2DWithIndicesBackward0",),
    "GatherGrad": ("EmbeddingBackward0",),
}
_AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "


@dataclasses.dataclass(frozen=True)
class ProfileMatch:
    """How a profile was used: its format, how it matched, and how many nodes it timed."""

    source: str
    format: str  # csv | chrome-trace
    matched_by: str  # node id | op type
    matched_nodes: int
    nodes: int
    entries: int  # distinct names in the file (node ids or event names)
    unmatched_entries: tuple[str, ...]  # the first few names that matched nothing
    op_types: tuple[str, ...] = ()  # op types timed (matched_by == "op type")
    steps: int = 1

    def phrase(self) -> Phrase:
        """What ``remat info`` and the profile note say of the match."""
        how = (
            "by node id"
            if self.matched_by == "node id"
            else Phrase("by op type (" + ", ".join("{}" for _ in self.op_types) + ")", self.op_types)
        )
        return Phrase("{} of {} nodes timed from {} {}, {}", (self.matched_nodes, self.nodes, self.format, self.source, how))


def read_profile(path: str | Path, max_bytes: int | None = None) -> tuple[str, dict[str, list[float]], int]:
    """``(format, name -> seconds per occurrence, steps)`` from a CSV or a Chrome trace."""
    from remat_cli.limits import read_regular_file

    path = Path(path)
    data = read_regular_file(path, max_bytes, "profile")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: profile is not a text file (expected a Chrome trace JSON or a node,seconds CSV)") from None
    if not text.strip():
        raise InputError(f"{path}: the profile is empty")
    if text.lstrip()[:1] in "{[":
        return ("chrome-trace",) + _read_trace(path, text)
    return "csv", _read_csv(path, text), 1


def _seconds(value: Any, where: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {value!r} is not a number of seconds") from None
    if isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise InputError(f"{where}: {value!r} must be a finite number of seconds >= 0")
    return x


def _read_csv(path: Path, text: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: not a node,seconds CSV ({exc})") from None
    for lineno, row in rows:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise InputError(f"{path}:{lineno}: expected 'node,seconds', got {len(row)} fields")
        node, sec = row[0].strip(), row[1].strip()
        if not out and node.lower() == "node" and sec.lower() == "seconds":
            continue
        if not node:
            raise InputError(f"{path}:{lineno}: empty node id")
        if node in out:
            raise InputError(f"{path}:{lineno}: node {node!r} is listed twice")
        out[node] = [_seconds(sec, f"{path}:{lineno}")]
    if not out:
        raise InputError(f"{path}: the profile lists no node,seconds rows")
    return out


def _read_trace(path: Path, text: str) -> tuple[dict[str, list[float]], int]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: profile is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{path}: profile JSON nested too deeply to read") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InputError(f'{path}: a Chrome trace needs a "traceEvents" list')
    out: dict[str, list[float]] = {}
    steps = 0
    for k, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        name = ev.get("name")
        if not isinstance(name, str):
            raise InputError(f'{path}: traceEvents[{k}] has no "name" string')
        if "dur" not in ev:
            raise InputError(f'{path}: traceEvents[{k}] ({name!r}) has no "dur"')
        dur = _seconds(ev["dur"], f"{path}: traceEvents[{k}] ({name!r}) dur") * 1e-6
        if re.fullmatch(r"ProfilerStep#\d+", name):
            steps += 1
            continue
        if name.startswith(_AUTOGRAD_PREFIX):
            name = name[len(_AUTOGRAD_PREFIX) :]
        out.setdefault(name, []).append(dur)
    if not out:
        raise InputError(f'{path}: the trace has no complete ("ph": "X") events with a name and a dur')
    return out, max(steps, 1)


def apply_profile(
    graph: Graph, path: str | Path, *, max_bytes: int | None = None, warn: Callable[[str], None] | None = None
) -> tuple[Graph, ProfileMatch]:
    """``graph`` with measured seconds where ``path`` times its nodes (see the module doc),
    and how many it timed."""
    fmt, entries, steps = read_profile(path, max_bytes)
    if graph.seconds is None and graph.cost_unit != "seconds":
        raise InputError(
            f"{path}: --profile needs a graph with a time model (an ONNX model, or a graph with seconds); "
            f"{graph.name}'s costs are {graph.cost_unit}"
        )
    base = np.array(graph.seconds if graph.seconds is not None else graph.cost, dtype=np.float64)
    seconds = base.copy()
    index = graph.index
    by_id = {name: sum(v) / steps for name, v in entries.items() if name in index}
    op_types: list[str] = []
    if by_id or fmt == "csv":
        for name, sec in by_id.items():
            seconds[index[name]] = sec
        matched = np.zeros(graph.n, dtype=bool)
        matched[[index[x] for x in by_id]] = True
        how = "node id"
        used_names = set(by_id)
    else:
        how = "op type"
        matched = np.zeros(graph.n, dtype=bool)
        used_names = set()
        ops = np.array(graph.ops, dtype=object)
        for op in sorted(set(graph.ops)):
            names = ATEN_OPS.get(op, ())
            name = next((x for x in names if x in entries), None)
            if name is None:
                continue
            calls = entries[name]
            mean = sum(calls) / len(calls)
            nodes = np.flatnonzero(ops == op)
            est = base[nodes]
            share = est / est.mean() if est.mean() > 0 else np.ones(nodes.size)
            seconds[nodes] = mean * share
            matched[nodes] = True
            op_types.append(f"{op}<-{name}")
            used_names.add(name)
    unmatched = tuple(sorted(set(entries) - used_names))[:5]
    fact = ProfileMatch(
        source=str(path),
        format=fmt,
        matched_by=how,
        matched_nodes=int(matched.sum()),
        nodes=graph.n,
        entries=len(entries),
        unmatched_entries=unmatched,
        op_types=tuple(op_types),
        steps=steps,
    )
    if fact.matched_nodes == 0 and warn is not None:
        warn(f"{path}: --profile matched none of {graph.name}'s {graph.n} nodes (by node id or op type); the roofline stays")
    meta = dict(graph.meta)
    meta["profile"] = dataclasses.asdict(fact)
    info = dict(meta.get("info") or {})
    info["measured costs"] = to_data(fact.phrase())
    meta["info"] = info
    cost = seconds if graph.cost_unit == "seconds" else graph.cost
    graph = dataclasses.replace(graph, seconds=_frozen(seconds), cost=_frozen(np.asarray(cost, dtype=np.float64)), meta=meta)
    return graph, fact


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, dtype=np.float64)
    arr.setflags(write=False)
    return arr
