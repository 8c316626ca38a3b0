"""ONNX models -> the forward graph, then the training graph (DESIGN §1, §2, §4).

Only structure and metadata are read: weights may be embedded, external or absent.
Symbolic dimensions are set with ``--dim NAME=VALUE`` before ONNX shape inference (with
data propagation) gives every value its shape; dtypes give bytes.

What becomes a node, and what does not:

* every op is one node whose value is the sum of its outputs (multi-output ops too);
* graph inputs, initializers and ``Constant`` outputs are **fixed memory**, never
  scheduled; so are small integer tensors computable at load time (shape arithmetic such
  as ``Shape -> Gather -> Concat`` once every dimension is known), which are folded;
* zero-copy views (``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Identity``)
  share their input's storage and are folded into their producer (``--keep-views``
  keeps them as nodes of their own, with their full size); so is the ``Transpose`` of a
  parameter (``Linear`` exported as ``MatMul(x, Transpose(W))``), which kernels read in
  place;
* control flow (``If``, ``Loop``, ``Scan``) is one opaque node that reads the outer values
  its subgraphs use and costs the sum of its subgraphs;
* ops outside the default domain, or without a cost formula, get a default cost and are
  reported once in a warning; values whose shape inference cannot find get a size
  estimated from the op's inputs, and are listed in ``remat info``.

Costs come from :mod:`remat_cli.costmodel` (FLOPs, bytes, roofline seconds on a device).
:func:`read` returns the forward graph with its per-node
:class:`~remat_cli.training.ForwardFacts` (what the graph passes and the autograd
convention need); :func:`forward_graph` and :func:`training_graph` are the explicit steps
that :mod:`remat_cli.loaders` composes into the graph to schedule.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

from remat_cli.attention import DEFAULT_ATTENTION, fuse_attention
from remat_cli.costmodel import (
    COST_KINDS,
    COST_UNITS,
    DeviceProfile,
    cost_vector,
    known_op,
    load_device,
    op_flops,
    roofline_seconds,
)
from remat_cli.errors import InputError
from remat_cli.graph import MAX_TOTAL_BYTES, MAX_VALUE_BYTES, Graph
from remat_cli.units import fmt_bytes, fmt_cost
from remat_cli.training import ForwardFacts, build_training_graph

__all__ = ["read", "forward_graph", "training_graph", "read_model", "inference_export_signs", "VIEW_OPS", "CONTROL_FLOW", "dtype_bits"]

VIEW_OPS = frozenset(["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"])
CONTROL_FLOW = frozenset(["If", "Loop", "Scan"])
DEFAULT_DOMAINS = ("", "ai.onnx")
#: ops that draw random numbers: never folded into constants
RANDOM_OPS = frozenset(["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"])
#: integer results below this many bytes whose inputs are all known are folded (shape arithmetic)
FOLD_LIMIT = 64 * 1024
#: ops whose cost or statistics need attributes
NEEDS_ATTRS = frozenset(
    ["Gemm", "Einsum", "MaxPool", "AveragePool", "LpPool", "Resize", "Upsample", "LSTM", "GRU", "RNN",
     "LayerNormalization", "GroupNormalization", "Loop", "If", "Scan", "RMSNormalization", "SimplifiedLayerNormalization"]
)

# element type -> bits (TensorProto.DataType)
_BITS = {0: 32, 1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 8: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64,
         15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2, 27: 6, 28: 6}
_FLOAT = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16", 17: "float8", 18: "float8", 19: "float8", 20: "float8"}


def dtype_bits(elem_type: int) -> int:
    """Bits per element of an ONNX element type (32 when unknown)."""
    return _BITS.get(int(elem_type), 32)


def _nbytes(elem_type: int, dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return (n * dtype_bits(elem_type) + 7) // 8


# ---------------------------------------------------------------------------- entry points
def read(path: Path, data: bytes, options: Any, warn: Callable[[str], None]) -> tuple[Graph, ForwardFacts, tuple[str, ...]]:
    """Read an ONNX file: its forward graph, the per-node facts the graph passes and the
    autograd convention need, and the signs that it was exported in inference mode."""
    if options.cost not in COST_KINDS:
        raise InputError(f"--cost {options.cost!r}: choose one of {', '.join(COST_KINDS)}")
    profile = load_device(options.device)
    model = _parse(path, data)
    limits = getattr(options, "limits", None)
    if limits is not None:
        check_dim_limit(model, path, limits.max_dim)
    fwd, facts = read_model(
        model,
        source=str(path),
        name=path.stem,
        dims=dict(options.dims),
        keep_views=options.keep_views,
        cost=options.cost,
        device=profile,
        warn=warn,
        strict_dims=getattr(options, "strict_dims", True),
    )
    return fwd, facts, tuple(inference_export_signs(model))


def forward_graph(fwd: Graph, facts: ForwardFacts, options: Any) -> tuple[Graph, ForwardFacts | None]:
    """The forward graph as trained: ``--attention`` first (it rewrites the per-node facts
    that ``--precision`` then reads), then ``--precision``."""
    fwd, new_facts = fuse_attention(fwd, facts, getattr(options, "attention", DEFAULT_ATTENTION))
    from remat_cli.precision import apply_precision

    return apply_precision(fwd, new_facts, getattr(options, "precision", "fp32") or "fp32", load_device(options.device))


def training_graph(
    fwd: Graph, facts: ForwardFacts | None, export_signs: tuple[str, ...], options: Any, path: Path,
    warn: Callable[[str], None],
) -> Graph:
    """The training graph of the forward graph (``options.convention``, autograd by
    default); warns when the export was made in inference mode or uses ops the autograd
    table does not know."""
    graph = build_training_graph(fwd, convention=options.convention or "autograd", optimizer=options.optimizer or "sgd", facts=facts)
    if export_signs:
        warn(
            f"{path}: exported in inference mode ({', '.join(export_signs)}): the training graph differs from "
            "real training; re-export with torch.onnx.export(..., "
            "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)"
        )
        info = dict(graph.meta.get("info") or {})
        info["export mode"] = "inference (" + ", ".join(export_signs) + "): re-export in training mode"
        graph = _with_meta(graph, export_mode="inference", info=info)
    unknown = graph.meta.get("autograd_unknown_ops") or {}
    if unknown:
        warn(
            f"{path}: {sum(unknown.values())} op(s) not in the autograd table save all their inputs and output: "
            + ", ".join(f"{_shown(op)} x{c}" for op, c in unknown.items())
        )
    return graph


def inference_export_signs(model) -> list[str]:
    """What shows that ``model`` was exported in inference mode, in words (empty: none).

    A training-mode export keeps BatchNormalization's ``training_mode=1`` and its running
    statistics outputs, and Dropout with a true ``training_mode`` input; an inference
    export drops both (Dropout is often removed altogether, and with constant folding
    BatchNormalization is folded into the convolution before it, which no file shows).
    """
    bn = dropout = 0
    constants = {t.name: t for t in model.graph.initializer}
    for nd in model.graph.node:
        if nd.op_type == "Constant" and nd.output:
            value = next((a.t for a in nd.attribute if a.name == "value"), None)
            if value is not None:
                constants[nd.output[0]] = value
    for nd in model.graph.node:
        if nd.op_type == "BatchNormalization":
            mode = next((a.i for a in nd.attribute if a.name == "training_mode"), 0)
            outputs = sum(1 for o in nd.output if o)
            if not mode and outputs <= 1:
                bn += 1
        elif nd.op_type == "Dropout":
            flag = nd.input[2] if len(nd.input) > 2 else ""
            if not flag or (flag in constants and not _truthy(constants[flag])):
                dropout += 1
    signs = []
    if bn:
        signs.append(f"{bn} BatchNormalization without training outputs")
    if dropout:
        signs.append(f"{dropout} Dropout in inference mode")
    return signs


def _truthy(tensor) -> bool:
    try:
        from onnx import numpy_helper

        return bool(np.asarray(numpy_helper.to_array(tensor)).any())
    except Exception:  # noqa: BLE001 - weights dropped or unreadable: assume training
        return True


def _with_meta(graph: Graph, **extra: Any) -> Graph:
    return dataclasses.replace(graph, meta={**graph.meta, **extra})


def _parse(path: Path, data: bytes):
    """Parse the protobuf; every way it can be wrong becomes one line."""
    try:
        import onnx
        from google.protobuf.message import DecodeError
    except ImportError as exc:  # pragma: no cover - onnx is a core dependency
        raise InputError(f"{path}: reading ONNX needs the onnx package ({exc})") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise InputError(f"{path}: not a valid ONNX file: the protobuf does not parse (truncated or corrupt?): {exc}") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputError(f"{path}: not an ONNX model (no IR version or no graph in the protobuf)")
    if len(model.graph.node) == 0:
        raise InputError(f"{path}: the ONNX graph has no operations")
    check_external_data(model, path)
    if len(model.functions):  # model-local functions (as the dynamo exporter writes): expand them
        try:
            import onnx.inliner

            model = onnx.inliner.inline_local_functions(model)
        except Exception:  # noqa: BLE001 - a function the inliner rejects stays an opaque op
            pass
    return model


def check_external_data(model, path: Path) -> None:
    """Refuse external-data ``location`` values that leave the model's folder.

    remat never reads external weights (structure is enough), but a location that is
    absolute, climbs out with ``..`` or names a device is refused anyway, with the tensor
    named, so no later tool is pointed at ``/etc/passwd`` by a model remat accepted.
    """
    import posixpath

    for tensor in _all_tensors(model):
        for entry in tensor.external_data:
            if entry.key != "location":
                continue
            loc = entry.value
            norm = posixpath.normpath(loc.replace("\\", "/"))
            if (
                not loc
                or "\0" in loc
                or loc.startswith(("/", "\\"))
                or (len(loc) > 1 and loc[1] == ":")  # C:\...
                or norm == ".."
                or norm.startswith("../")
                or Path(loc).is_absolute()
            ):
                raise InputError(
                    f"{path}: tensor {tensor.name!r}: external data location {loc!r} is outside the "
                    "model's folder (only relative paths below it are allowed)"
                )


def check_dim_limit(model, path: Path, max_dim: int) -> None:
    """Refuse a dimension stated in the file (inputs, outputs, value infos, initializers) above ``max_dim``."""
    from remat_cli.limits import LimitError

    def refuse(name: str, value: int) -> None:
        raise LimitError(
            f"{path}: tensor {name!r} has a dimension of {value}, more than the dimension limit "
            f"{max_dim} (raise it with --max-dim)"
        )

    g = model.graph
    for vi in (*g.input, *g.output, *g.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value > max_dim:
                refuse(vi.name, d.dim_value)
    for t in g.initializer:
        for value in t.dims:
            if value > max_dim:
                refuse(t.name, value)


def _all_tensors(model):
    """Every TensorProto in the model: initializers and attributes, subgraphs and functions included."""
    def in_graph(g):
        yield from g.initializer
        for sp in g.sparse_initializer:
            yield sp.values
            yield sp.indices
        for nd in g.node:
            yield from in_nodes([nd])

    def in_nodes(nodes):
        for nd in nodes:
            for a in nd.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("sparse_tensor"):
                    yield a.sparse_tensor.values
                    yield a.sparse_tensor.indices
                if a.HasField("g"):
                    yield from in_graph(a.g)
                for sub in a.graphs:
                    yield from in_graph(sub)

    yield from in_graph(model.graph)
    for fn in model.functions:
        yield from in_nodes(fn.node)


# ---------------------------------------------------------------------------- the reader
@dataclass
class _Node:
    """One scheduled op while the graph is being read."""

    id: str
    op: str
    slots: list[int]
    preds: list[int]
    mem: int
    flops: float
    nbytes: float
    dtype: str
    float_out: bool
    param_bytes: int
    reads_float_input: bool
    stats_bytes: int


def read_model(
    model,
    *,
    source: str = "<onnx>",
    name: str = "model",
    dims: dict[str, int] | None = None,
    keep_views: bool = False,
    cost: str = "roofline",
    device: DeviceProfile | None = None,
    warn: Callable[[str], None] | None = None,
    strict_dims: bool = True,
) -> tuple[Graph, ForwardFacts]:
    """The forward graph of an ONNX ``ModelProto`` and its per-node facts (the model is
    changed in place: dims are set on it)."""
    warn = warn or (lambda _msg: None)
    device = device or load_device("a100")
    _drop_weight_data(model)
    g = model.graph
    dims = dict(dims or {})
    dims = _set_dims(g, dims, source, strict=strict_dims)  # those the model has
    _check_declared_dims(g, source)
    initializers = {t.name: t for t in g.initializer}
    graph_inputs = [i for i in g.input if i.name not in initializers]
    input_names = {i.name for i in graph_inputs}
    nodes_pb = list(g.node)
    order = _topological(nodes_pb, initializers, input_names, source)

    used: set[str] = set()
    for nd in nodes_pb:
        used.update(x for x in nd.input if x)
        if nd.op_type in CONTROL_FLOW:
            used.update(_outer_names(nd))
    _check_unresolved(graph_inputs, used, source)

    # trainable parameters: float initializers with more than one element (not BN running stats)
    buffers: set[str] = set()
    for nd in nodes_pb:
        if nd.op_type == "BatchNormalization" and len(nd.input) >= 5:
            buffers.update(nd.input[3:5])
    trainable: dict[str, int] = {}
    init_bytes = 0
    for t in g.initializer:
        if t.name not in used:
            continue
        b = _nbytes(t.data_type, tuple(t.dims))
        init_bytes += b
        numel = math.prod(t.dims)
        if t.data_type in _FLOAT and numel > 1 and t.name not in buffers:
            trainable[t.name] = b
    if init_bytes > MAX_TOTAL_BYTES:
        raise InputError(
            f"{source}: the initializers hold {init_bytes:.3g} B, above the {MAX_TOTAL_BYTES:.3g} B "
            "(2**62) remat can count"
        )
    shapes, small = _infer(model, nodes_pb, order, set(trainable), source, warn)
    _check_shapes(shapes, nodes_pb, source)
    input_bytes = 0
    for i in graph_inputs:
        if i.name in used or any(o.name == i.name for o in g.output):
            elem, shp = shapes.get(i.name, (1, None))
            input_bytes += _nbytes(elem, shp) if shp is not None else 0
    float_inputs = {i.name for i in graph_inputs if shapes.get(i.name, (0, None))[0] in _FLOAT}
    differentiate_inputs = not trainable  # no parameters: gradients w.r.t. the float inputs

    producer: dict[str, int] = {}  # value -> scheduled node (views resolve to their producer)
    root: dict[str, str] = {}  # view of a fixed value -> that value
    static: set[str] = {t for t in initializers if t not in trainable}  # values known at load time
    nodes: list[_Node] = []
    float_bytes: list[int] = []  # per node: bytes of its float outputs (precision.py rescales them)
    used_ids: set[str] = set()
    const_bytes = 0
    folded_views = 0
    folded_static = 0
    estimated: list[str] = []
    first_shapes: list[tuple[int, ...] | None] = []  # per node: its first output's shape
    inexact = 0  # ops whose FLOPs are an estimate (a shape or a formula missing)
    unknown_ops: Counter[str] = Counter()
    control: Counter[str] = Counter()
    onnx_ops: Counter[str] = Counter()

    def value_bytes(x: str) -> int | None:
        """Bytes of a value: from its shape, else its producer's (possibly estimated) size."""
        elem, shp = shapes.get(x, (1, None))
        if shp is not None:
            return _nbytes(elem or 1, shp)
        return nodes[producer[x]].mem if x in producer else None

    for k in order:
        nd = nodes_pb[k]
        op = _utf8(nd.op_type)
        default = nd.domain in DEFAULT_DOMAINS
        label = op if default else f"{_utf8(nd.domain)}.{op}"
        onnx_ops[label] += 1
        ins = list(nd.input)
        outs = [o for o in nd.output if o]
        if not outs:
            continue
        if default and op == "Constant":
            for o in outs:
                elem, shp = shapes.get(o, (1, None))
                const_bytes += _nbytes(elem, shp) if shp is not None else 0
                static.add(o)
            continue
        if default and op in VIEW_OPS and not keep_views and ins and ins[0]:
            src = ins[0]
            if src in producer:
                for o in outs:
                    producer[o] = producer[src]
            else:  # a view of a fixed value (an input, a parameter, a constant) is that value
                for o in outs:
                    root[o] = root.get(src, src)
                if src in static:
                    static.update(outs)
            folded_views += 1
            continue
        if default and op == "Transpose" and not keep_views and ins and ins[0] and root.get(ins[0], ins[0]) in trainable:
            # a transposed weight: matmul kernels read the parameter transposed, no copy is kept
            for o in outs:
                root[o] = root.get(ins[0], ins[0])
            folded_views += 1
            continue
        if default and op not in CONTROL_FLOW and op not in RANDOM_OPS and _foldable(outs, shapes, small):
            for o in outs:
                elem, shp = shapes[o]
                const_bytes += _nbytes(elem, shp)
            static.update(outs)
            folded_static += 1
            continue
        attrs = _attrs(nd) if (op in NEEDS_ATTRS or not default) else {}
        in_shapes = [shapes.get(x, (0, None))[1] if x else None for x in ins]
        out_shapes = [shapes.get(o, (0, None))[1] for o in outs]
        out_elems = [shapes.get(o, (0, None))[0] for o in outs]
        if any(e == 0 for e in out_elems):  # type unknown (e.g. a custom op): as its inputs
            in_elems = [shapes[x][0] for x in ins if x in shapes and shapes[x][0]]
            guess = next((e for e in in_elems if e in _FLOAT), in_elems[0] if in_elems else 1)
            out_elems = [e or guess for e in out_elems]
        # sizes of the outputs (estimated from the inputs where shapes are unknown)
        out_bytes = []
        for o, shp, elem in zip(outs, out_shapes, out_elems):
            if shp is not None:
                out_bytes.append(_nbytes(elem, shp))
            else:
                guess = _estimate(op, [b for b in (value_bytes(x) for x in ins if x) if b is not None])
                if default and op == "Split":  # its outputs partition its input: n parts, not n copies
                    guess = -(-guess // len(outs))
                out_bytes.append(guess)
                estimated.append(o)
        slots = [producer.get(x, -2 if root.get(x, x) in trainable else -1) if x else -1 for x in ins]
        implicit: list[int] = []
        if op in CONTROL_FLOW:
            control[op] += 1
            outer = _outer_names(nd)
            implicit = [producer[x] for x in outer if x in producer]
            flops, exact = _control_flops(nd, shapes, small)
            slots = slots + implicit
        elif default and op in VIEW_OPS:  # kept views: no arithmetic, no copy
            flops, exact = 0.0, True
        elif default and known_op(op):
            flops, exact = op_flops(op, attrs, in_shapes, out_shapes)
        else:
            flops, exact = op_flops("", {}, in_shapes, out_shapes)
            unknown_ops[label] += 1
        if not exact:
            inexact += 1
        in_bytes = sum(value_bytes(x) or 0 for x in dict.fromkeys(x for x in ins if x))
        nbytes = 0.0 if (default and op in VIEW_OPS) else float(in_bytes + sum(out_bytes))
        float_out = any(e in _FLOAT for e in out_elems)
        dtype = next((_FLOAT[e] for e in out_elems if e in _FLOAT), None)
        if dtype is None:
            dtype = next((_FLOAT[shapes[x][0]] for x in ins if x in shapes and shapes[x][0] in _FLOAT), "float32")
        roots = [root.get(x, x) for x in ins if x]
        pbytes = sum(trainable.get(x, 0) for x in dict.fromkeys(roots))
        reads_input = differentiate_inputs and any(x in float_inputs for x in roots)
        node_id = _unique_id(_utf8(nd.name) or f"{op}_{k}", used_ids, k)
        preds = list(dict.fromkeys(s for s in slots if s >= 0))
        idx = len(nodes)
        nodes.append(
            _Node(
                id=node_id,
                op=label,
                slots=slots,
                preds=preds,
                mem=int(sum(out_bytes)),
                flops=float(flops),
                nbytes=nbytes,
                dtype=dtype,
                float_out=float_out,
                param_bytes=pbytes,
                reads_float_input=reads_input,
                stats_bytes=_stats_bytes(op, attrs, in_shapes) if default else 0,
            )
        )
        float_bytes.append(sum(b for b, e in zip(out_bytes, out_elems) if e in _FLOAT))  # --precision
        first_shapes.append(tuple(out_shapes[0]) if out_shapes and out_shapes[0] is not None else None)
        for o in outs:
            producer[o] = idx

    if not nodes:
        raise InputError(f"{source}: the ONNX graph has no operations to schedule (only constants, views and inputs)")
    defined = set(producer) | static | input_names
    for o in g.output:
        if o.name not in defined and not any(o.name in nd.output for nd in nodes_pb):
            raise InputError(f"{source}: graph output {o.name!r} is produced by no node, input or initializer")
    targets = sorted({producer[o.name] for o in g.output if o.name in producer})
    if not targets:
        raise InputError(
            f"{source}: the graph's outputs depend on no operation (they are inputs or constants); nothing to schedule"
        )

    # ---- arrays
    n = len(nodes)
    flops = np.array([nd.flops for nd in nodes], dtype=np.float64)
    nbytes = np.array([nd.nbytes for nd in nodes], dtype=np.float64)
    peaks = np.array([device.peak(nd.dtype) for nd in nodes], dtype=np.float64)
    seconds = roofline_seconds(flops, nbytes, peaks, device.bandwidth)
    cost_vec = cost_vector(cost, flops, nbytes, np.ones(n, dtype=np.float64), seconds)
    src = np.fromiter((u for nd in nodes for u in nd.preds), dtype=np.int64)
    dst = np.fromiter((i for i, nd in enumerate(nodes) for _ in nd.preds), dtype=np.int64)
    facts = ForwardFacts(
        slots=tuple(tuple(nd.slots) for nd in nodes),
        float_out=np.array([nd.float_out for nd in nodes], dtype=bool),
        grad_source=np.array([nd.param_bytes > 0 or nd.reads_float_input for nd in nodes], dtype=bool),
        param_bytes=np.array([nd.param_bytes for nd in nodes], dtype=np.int64),
        stats_bytes=np.array([nd.stats_bytes for nd in nodes], dtype=np.int64),
        flops=flops,
        nbytes=nbytes,
        peak=peaks,
        bandwidth=device.bandwidth,
        cost_kind=cost,
        dtypes=tuple(nd.dtype for nd in nodes),
        float_bytes=tuple(float_bytes),
        shapes=tuple(first_shapes),
    )
    param_bytes = int(sum(trainable.values()))
    param_count = sum(math.prod(initializers[t].dims) for t in trainable)
    fixed = input_bytes + init_bytes + const_bytes

    # ---- what `remat info` reports, and warnings
    if unknown_ops:
        warn(
            f"{source}: {sum(unknown_ops.values())} op(s) without a cost model get a default cost (1 FLOP per output element): "
            + ", ".join(f"{_shown(op)} x{c}" for op, c in sorted(unknown_ops.items()))
        )
    if estimated:
        warn(f"{source}: {len(estimated)} value(s) have no inferred shape; their sizes are estimated from their op's inputs (see remat info)")
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    top_ops = ", ".join(f"{op} {c}" for op, c in onnx_ops.most_common(8))
    info: dict[str, Any] = {
        "model": f"ONNX opset {opset}, {model.producer_name or 'unknown producer'} {model.producer_version}".strip(),
        "ONNX ops": f"{sum(onnx_ops.values())} ({top_ops}{', …' if len(onnx_ops) > 8 else ''})",
        "dimensions": ", ".join(f"{k}={v}" for k, v in dims.items()) or "all static",
        "parameters": f"{param_count:,} ({fmt_bytes(param_bytes)})",
        "fixed memory parts": f"inputs {fmt_bytes(input_bytes)}, parameters {fmt_bytes(param_bytes)}, constants and buffers {fmt_bytes(fixed - input_bytes - param_bytes)}",
        "forward FLOPs": fmt_cost(float(flops.sum()), "flops") + (f" ({inexact} ops estimated)" if inexact else ""),
        "device": device.describe(),
        "cost": f"{cost} ({COST_UNITS[cost]})",
        "folded": f"{folded_views} views into their producers, {folded_static} shape computations into constants"
        + (" (--keep-views: views kept)" if keep_views else ""),
        "estimated sizes": "none" if not estimated else f"{len(estimated)}: " + _names(estimated),
        "unknown ops": "none" if not unknown_ops else ", ".join(f"{op} x{c}" for op, c in sorted(unknown_ops.items())) + " (default cost)",
    }
    if control:
        info["control flow"] = ", ".join(f"{op} x{c}" for op, c in sorted(control.items())) + " (opaque; cost = sum of subgraphs)"
    meta = {
        "source_format": "onnx",
        "parameter_bytes": param_bytes,
        "fixed_parts": {"inputs": input_bytes, "parameters": param_bytes, "constants and buffers": fixed - input_bytes - param_bytes},
        "parameter_count": param_count,
        "input_bytes": input_bytes,
        "forward_flops": float(flops.sum()),
        "dims": dict(dims),
        "device": device.name,
        "estimated_values": list(estimated),
        "unknown_ops": dict(sorted(unknown_ops.items())),
        "onnx_ops": dict(sorted(onnx_ops.items())),
        "info": info,
    }
    graph = Graph.from_arrays(
        ids=[nd.id for nd in nodes],
        ops=[nd.op for nd in nodes],
        kinds=["forward"] * n,
        mem=[nd.mem for nd in nodes],  # Python ints: Graph checks them before int64
        cost=cost_vec,
        src=src,
        dst=dst,
        targets=targets,
        fixed_mem=fixed,
        cost_unit=COST_UNITS[cost],
        seconds=seconds,
        name=name,
        source=source,
        meta=meta,
        _checked=True,
    )
    return graph, facts


# ---------------------------------------------------------------------------- dims, shapes
def _drop_weight_data(model) -> None:
    """Forget the data of large initializers (their shapes and dtypes stay): remat needs
    only shapes, and copying embedded weights for shape inference would dominate loading."""
    import onnx

    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL and t.ByteSize() > FOLD_LIMIT:
            for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
                t.ClearField(f)
            t.data_location = onnx.TensorProto.EXTERNAL
            entry = t.external_data.add()
            entry.key, entry.value = "location", "(dropped by remat)"



def _set_dims(g, dims: dict[str, int], source: str, strict: bool = True) -> dict[str, int]:
    """Name anonymous input dimensions (``input.axis``), check ``dims``' names, set them.

    ``strict`` refuses a name the model does not have (a typo); a batch over mixed models
    passes ``strict=False`` so that ``--dim sequence=…`` skips models without one.
    Returns the dims the model has (the ones that took effect).
    """
    initializers = {t.name for t in g.initializer}
    names: dict[str, None] = {}
    for inp in g.input:
        if inp.name in initializers or not inp.type.HasField("tensor_type"):
            continue
        tt = inp.type.tensor_type
        if not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                continue
            if not d.dim_param:
                d.dim_param = f"{inp.name}.{axis}"
            names[d.dim_param] = None
    known = set(names)
    for vi in list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            known.update(d.dim_param for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param"))
    for key in dims:
        if strict and key not in known:
            have = ", ".join(sorted(names)) if names else "none (every input dimension is fixed)"
            raise InputError(f"{source}: --dim {key}: the model has no dimension named {key!r}; its input dimensions: {have}")
    dims = {k: v for k, v in dims.items() if k in known}
    if not dims:
        return dims
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in dims:
                    value = int(dims[d.dim_param])
                    if not 0 < value <= MAX_VALUE_BYTES:
                        raise InputError(f"{source}: --dim {d.dim_param}={value}: a dimension must be in [1, 2**53]")
                    d.dim_value = value
    return dims


def _check_declared_dims(g, source: str) -> None:
    """Refuse the dimensions a file states that no tensor can have: a negative dimension
    anywhere, a zero dimension of a model input, or an initializer above MAX_VALUE_BYTES."""
    for t in g.initializer:
        for axis, d in enumerate(t.dims):
            if d < 0:
                raise InputError(f"{source}: initializer {t.name!r}: dimension #{axis} is {d} (negative)")
        if _nbytes(t.data_type, tuple(t.dims)) > MAX_VALUE_BYTES:
            raise InputError(
                f"{source}: initializer {t.name!r}: shape {list(t.dims)} is above {MAX_VALUE_BYTES} B (2**53)"
            )
    initializers = {t.name for t in g.initializer}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if not (vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")):
            continue
        what = "input" if any(vi is x for x in g.input) and vi.name not in initializers else "value"
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                continue
            if d.dim_value < 0 or (d.dim_value == 0 and what == "input"):
                raise InputError(
                    f"{source}: {what} {vi.name!r}: dimension #{axis} is {d.dim_value} "
                    f"({'negative' if d.dim_value < 0 else 'zero: the input would be empty'})"
                )


def _check_shapes(shapes, nodes_pb, source: str) -> None:
    """After inference: no value has a negative dimension or more than MAX_VALUE_BYTES."""
    made_by = {o: nd for nd in nodes_pb for o in nd.output if o}
    for value, (elem, dims) in shapes.items():
        if dims is None:
            continue
        where = f"value {value!r}"
        if value in made_by:
            where += f" (output of node {(_utf8(made_by[value].name) or _utf8(made_by[value].op_type))!r})"
        for axis, d in enumerate(dims):
            if d < 0:
                raise InputError(f"{source}: {where}: dimension #{axis} is {d} (negative)")
        if _nbytes(elem or 1, dims) > MAX_VALUE_BYTES:
            raise InputError(f"{source}: {where}: shape {list(dims)} is above {MAX_VALUE_BYTES} B (2**53)")


def _check_unresolved(graph_inputs, used: set[str], source: str) -> None:
    """Exit 2 naming every symbolic dimension of a used input that is still unset."""
    missing: dict[str, None] = {}
    for inp in graph_inputs:
        if inp.name not in used or not inp.type.HasField("tensor_type"):
            continue
        if not inp.type.tensor_type.HasField("shape"):
            raise InputError(f"{source}: input {inp.name!r} has no shape in the file (not even its rank); remat needs the shapes of the model's inputs")
        for d in inp.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                missing[d.dim_param] = None
    if missing:
        names = list(missing)
        example = " ".join(f"--dim {m}=1" for m in names)
        raise InputError(
            f"{source}: unresolved dimension{'s' if len(names) > 1 else ''} {', '.join(names)}: "
            f"set {'them' if len(names) > 1 else 'it'} with --dim, e.g. {example}"
        )


def _infer(model, nodes_pb, order: list[int], trainable: set[str], source: str, warn: Callable[[str], None]):
    """Shapes of every value, and the values of small tensors computable at load time.

    ONNX shape inference (with data propagation) runs first on a copy without large
    weights (only their shapes matter). Its data propagation misses much shape arithmetic
    (``Div``, ``Where``, ``Range``, ``Expand``, …), so a second pass in topological order
    evaluates every small tensor whose inputs are all known (with ONNX's reference
    implementation of the op), and re-infers the shapes that are still unknown one node at
    a time, now with those values. Returns ``{name: (elem_type, dims or None)}`` (dims
    None unless every dimension is a number) and ``{name: ndarray}`` of known values.
    Trainable parameters are never treated as known values.
    """
    import onnx

    g = model.graph
    old = {vi.name: vi for vi in g.value_info}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # onnx raises several types; any of them means "no inference"
        warn(f"{source}: ONNX shape inference failed ({str(exc).splitlines()[0][:200]}); using the shapes stored in the file")
        inferred = probe
    shapes: dict[str, tuple[int, tuple[int, ...] | None]] = {}
    types: dict[str, Any] = {}  # top-level TypeProtos (partial shapes help per-node inference)
    values: dict[str, np.ndarray] = {}

    def put(vi, overwrite: bool = True, top: bool = False) -> None:
        if not vi.type.HasField("tensor_type"):
            return
        tt = vi.type.tensor_type
        dims: tuple[int, ...] | None = None
        if tt.HasField("shape"):
            vals: list[int] | None = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value >= 0:
                    vals.append(int(d.dim_value))  # type: ignore[union-attr]
                else:
                    vals = None
                    break
            dims = tuple(vals) if vals is not None else None
        prev = shapes.get(vi.name)
        if prev is None or (overwrite and dims is not None) or (prev[1] is None and dims is not None):
            shapes[vi.name] = (int(tt.elem_type), dims)
            if top:
                types[vi.name] = vi.type

    def walk(graph, top: bool) -> None:
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            put(vi, top=top)
        for t in graph.initializer:
            shapes[t.name] = (int(t.data_type), tuple(int(d) for d in t.dims))
        for nd in graph.node:
            if nd.op_type == "Constant":
                _constant_shape(nd, shapes, values)
            for _, sub in _subgraphs(nd):
                walk(sub, False)

    walk(inferred.graph, True)
    for name, vi in old.items():  # the file's own annotations, where inference found nothing
        if shapes.get(name, (0, None))[1] is None:
            put(vi, overwrite=False, top=True)
    for t in g.initializer:
        if t.name not in trainable and _numel_dims(t.dims) <= VALUE_LIMIT and t.data_location != onnx.TensorProto.EXTERNAL:
            try:
                values[t.name] = _to_array(t)
            except Exception:  # malformed or absent data: shape only
                pass
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 17)
    _refine(nodes_pb, order, shapes, types, values, opset, list(model.opset_import), model.ir_version)
    return shapes, values


#: tensors up to this many elements are evaluated at load time when their inputs are known
VALUE_LIMIT = 4096
#: ops whose output may be large although their inputs are small: shape first, then evaluate
_MAY_GROW = frozenset(["ConstantOfShape", "Expand", "Tile", "Range", "EyeLike", "OneHot", "Resize", "Pad", "Upsample", "Trilu"])


def _refine(nodes_pb, order, shapes, types, values, opset: int, opset_imports, ir_version: int) -> None:
    """Evaluate small known tensors and re-infer unknown shapes, node by node (see _infer)."""
    runners: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for k in order:
        nd = nodes_pb[k]
        op = nd.op_type
        if nd.domain not in DEFAULT_DOMAINS or op in CONTROL_FLOW or op == "Constant":
            continue
        ins = list(nd.input)
        outs = [o for o in nd.output if o]
        if not outs:
            continue
        if op in RANDOM_OPS:  # never evaluated, but their shapes are inferred (Dropout keeps its input's)
            if any(shapes.get(o, (0, None))[1] is None for o in outs):
                present = [x for x in ins if x]
                _infer_node(nd, present, shapes, types, values, opset, opset_imports, ir_version, schemas)
            continue
        if op in ("Shape", "Size"):
            shp = shapes.get(ins[0], (0, None))[1] if ins else None
            if shp is not None:
                if op == "Size":
                    values[outs[0]] = np.array(_numel_dims(shp), dtype=np.int64)
                else:
                    a = _attrs(nd)
                    start, end = a.get("start", 0), a.get("end", len(shp))
                    values[outs[0]] = np.array(shp[slice(start, end)], dtype=np.int64)
                shapes[outs[0]] = (7, tuple(values[outs[0]].shape))
            continue
        present = [x for x in ins if x]
        all_known = bool(present) and all(x in values for x in present)
        if all_known and op not in _MAY_GROW and _evaluate(nd, ins, outs, shapes, types, values, opset, runners):
            continue
        if any(shapes.get(o, (0, None))[1] is None for o in outs):
            _infer_node(nd, present, shapes, types, values, opset, opset_imports, ir_version, schemas)
        if all_known and op in _MAY_GROW and all(shapes.get(o, (0, None))[1] is not None for o in outs):
            _evaluate(nd, ins, outs, shapes, types, values, opset, runners)


def _evaluate(nd, ins, outs, shapes, types, values, opset, runners) -> bool:
    """Compute a small node's outputs from known inputs; False when it cannot."""
    from onnx import helper

    if any(_numel_dims(s) > VALUE_LIMIT for s in (shapes.get(o, (0, None))[1] for o in outs) if s is not None):
        return False
    result = _run_op(nd, [values.get(x) if x else None for x in ins], opset, runners)
    if result is None:
        return False
    for o, r in zip(nd.output, result):
        if not o or r is None:
            continue
        arr = np.asarray(r)
        try:
            elem = int(helper.np_dtype_to_tensor_dtype(arr.dtype))
        except Exception:
            elem = shapes.get(o, (1, None))[0]
        shapes[o] = (elem, tuple(int(d) for d in arr.shape))
        types.pop(o, None)
        if arr.size <= VALUE_LIMIT:
            values[o] = arr
    return True


def _infer_node(nd, present, shapes, types, values, opset, opset_imports, ir_version, schemas) -> None:
    """ONNX shape inference for one node, given its inputs' types and known values."""
    import onnx
    from onnx import helper, shape_inference

    schema = schemas.get(nd.op_type)
    if schema is None:
        try:
            schema = onnx.defs.get_schema(nd.op_type, opset, "")
        except Exception:
            schema = False
        schemas[nd.op_type] = schema
    if not schema:
        return
    in_types = {}
    for x in present:
        if x in types:
            in_types[x] = types[x]
        elif x in shapes:
            elem, shp = shapes[x]
            in_types[x] = helper.make_tensor_type_proto(elem, shp)
        else:
            return
    data = {}
    for x in present:
        if x in values:
            try:
                data[x] = onnx.numpy_helper.from_array(values[x], x)
            except Exception:
                pass
    try:
        res = shape_inference.infer_node_outputs(schema, nd, in_types, data, opset_imports=opset_imports, ir_version=ir_version)
    except Exception:
        return
    for o, tp in res.items():
        if not tp.HasField("tensor_type"):
            continue
        tt = tp.tensor_type
        known = tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim)
        dims = tuple(int(d.dim_value) for d in tt.shape.dim) if known else None
        if dims is not None or o not in types:
            shapes[o] = (int(tt.elem_type) or shapes.get(o, (1, None))[0], dims)
            types[o] = tp


def _run_op(nd, inputs: list[np.ndarray | None], opset: int, runners: dict[str, Any]):
    """Run one op with ONNX's reference implementation; None if it cannot."""
    try:
        from onnx.reference.ops import load_op

        cls = runners.get(nd.op_type)
        if cls is None:
            cls = load_op("", nd.op_type, opset)
            runners[nd.op_type] = cls
        inst = cls(nd, {"log": lambda *a, **k: None, "opsets": {"": opset}, "new_ops": None, "verbose": 0})
        out = inst.run(*inputs)
    except Exception:
        return None
    return out if isinstance(out, (tuple, list)) else (out,)


def _numel_dims(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _to_array(t) -> np.ndarray:
    """The values of a tensor stored in the file; external data is never opened."""
    import onnx
    from onnx import numpy_helper

    if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
        raise ValueError("external data is not read")
    return numpy_helper.to_array(t)


def _constant_shape(nd, shapes, values) -> None:
    """Shape (and value, when small) of a Constant node's output from its attribute."""
    out = nd.output[0] if nd.output else ""
    for a in nd.attribute:
        if a.name == "value":
            shapes.setdefault(out, (int(a.t.data_type), tuple(int(d) for d in a.t.dims)))
            if _numel_dims(a.t.dims) <= VALUE_LIMIT:
                try:
                    values[out] = _to_array(a.t)
                except Exception:  # external or malformed data: shape only
                    pass
        elif a.name in ("value_float", "value_int"):
            shapes.setdefault(out, (1 if a.name == "value_float" else 7, ()))
            values[out] = np.array(a.f, dtype=np.float32) if a.name == "value_float" else np.array(a.i, dtype=np.int64)
        elif a.name in ("value_floats", "value_ints"):
            vals = a.floats if a.name == "value_floats" else a.ints
            shapes.setdefault(out, (1 if a.name == "value_floats" else 7, (len(vals),)))
            values[out] = np.array(list(vals), dtype=np.float32 if a.name == "value_floats" else np.int64)


def _foldable(outs: list[str], shapes, values: dict[str, np.ndarray]) -> bool:
    """Small results computed at load time (shape arithmetic): folded into constants."""
    total = 0
    for o in outs:
        if o not in values:
            return False
        elem, shp = shapes.get(o, (0, None))
        if shp is None:
            return False
        total += _nbytes(elem, shp)
    return total <= FOLD_LIMIT


def _estimate(op: str, input_sizes: list[int]) -> int:
    """Bytes of an output whose shape is unknown: its inputs' (their sum for Concat, else
    the largest), so that an unknown shape is never silently zero bytes."""
    if not input_sizes:
        return 0
    return int(sum(input_sizes)) if op == "Concat" else int(max(input_sizes))


def _stats_bytes(op: str, attrs: dict[str, Any], in_shapes) -> int:
    """Bytes of the statistics (mean, inverse std in float32) a normalization's backward keeps."""
    x = in_shapes[0] if in_shapes else None
    if x is None or len(x) < 2:
        return 0
    if op == "BatchNormalization":
        return 2 * 4 * int(x[1])
    if op == "InstanceNormalization":
        return 2 * 4 * int(x[0]) * int(x[1])
    if op == "GroupNormalization":
        return 2 * 4 * int(x[0]) * int(attrs.get("num_groups", 1))
    if op in ("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"):
        axis = int(attrs.get("axis", -1))
        axis = axis + len(x) if axis < 0 else axis
        rows = 1
        for d in x[:axis]:
            rows *= int(d)
        return (1 if op != "LayerNormalization" else 2) * 4 * rows
    return 0


# ---------------------------------------------------------------------------- structure
def _topological(nodes_pb, initializers, input_names: set[str], source: str) -> list[int]:
    """Node indices in an order where producers come first (the file's, when it is one)."""
    prod: dict[str, int] = {}
    for i, nd in enumerate(nodes_pb):
        for o in nd.output:
            if o:
                if o in prod:
                    raise InputError(f"{source}: value {o!r} is produced by two nodes ({(nodes_pb[prod[o]].name or prod[o])!r} and {(nd.name or i)!r})")
                prod[o] = i
    deps: list[list[int]] = []
    sorted_already = True
    for i, nd in enumerate(nodes_pb):
        names = [x for x in nd.input if x]
        if nd.op_type in CONTROL_FLOW:
            names += _outer_names(nd)
        d = []
        for x in names:
            j = prod.get(x)
            if j is None:
                if x not in initializers and x not in input_names:
                    raise InputError(
                        f"{source}: node {(nd.name or nd.op_type + '#' + str(i))!r} reads {x!r}, which no node, input or initializer defines"
                    )
                continue
            if j == i:
                raise InputError(f"{source}: node {(nd.name or i)!r} reads its own output (cycle)")
            if j > i:
                sorted_already = False
            d.append(j)
        deps.append(d)
    if sorted_already:
        return list(range(len(nodes_pb)))
    import heapq

    n = len(nodes_pb)
    indeg = [len(set(d)) for d in deps]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, d in enumerate(deps):
        for j in set(d):
            succ[j].append(i)
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for w in succ[i]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    if len(order) < n:
        stuck = next(i for i in range(n) if indeg[i] > 0)
        raise InputError(f"{source}: the ONNX graph has a cycle through node {nodes_pb[stuck].name or stuck!r}")
    return order


def _subgraphs(nd):
    import onnx

    for a in nd.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            for sub in a.graphs:
                yield a.name, sub


def _outer_names(nd) -> list[str]:
    """Values a control-flow node's subgraphs read from the enclosing graph (implicit inputs)."""
    found: dict[str, None] = {}

    def visit(graph, outer_defined: set[str]) -> None:
        defined = set(outer_defined)
        defined.update(i.name for i in graph.input)
        defined.update(t.name for t in graph.initializer)
        for sub_nd in graph.node:
            for x in sub_nd.input:
                if x and x not in defined:
                    found[x] = None
            for _, sub in _subgraphs(sub_nd):
                visit(sub, defined)
            defined.update(o for o in sub_nd.output if o)
        for out in graph.output:  # a branch may return an outer value as it is
            if out.name and out.name not in defined:
                found[out.name] = None

    for _, sub in _subgraphs(nd):
        visit(sub, set())
    return list(found)


def _control_flops(nd, shapes, small) -> tuple[float, bool]:
    """FLOPs of If (both branches), Loop (body x trip count) and Scan (body x length)."""
    total = 0.0
    exact = True
    trips = 1
    if nd.op_type == "Loop":
        m = nd.input[0] if nd.input else ""
        if m and m in small and small[m].size == 1:
            trips = max(int(small[m].reshape(-1)[0]), 0)
        else:
            exact = False
    elif nd.op_type == "Scan":
        first = [x for x in nd.input if x]
        shp = shapes.get(first[-1], (0, None))[1] if first else None
        if shp:
            trips = int(shp[0])
        else:
            exact = False
    for _, sub in _subgraphs(nd):
        f, e = _graph_flops(sub, shapes, small)
        total += f
        exact = exact and e
    return total * trips, exact


def _graph_flops(graph, shapes, small) -> tuple[float, bool]:
    total = 0.0
    exact = True
    for nd in graph.node:
        if nd.op_type in CONTROL_FLOW:
            f, e = _control_flops(nd, shapes, small)
        else:
            ins = [shapes.get(x, (0, None))[1] if x else None for x in nd.input]
            outs = [shapes.get(o, (0, None))[1] for o in nd.output if o]
            f, e = op_flops(nd.op_type if known_op(nd.op_type) else "", _attrs(nd), ins, outs)
        total += f
        exact = exact and e
    return total, exact


def _attrs(nd) -> dict[str, Any]:
    """Scalar and list attributes as Python values (subgraphs and tensors left out)."""
    import onnx

    out: dict[str, Any] = {}
    for a in nd.attribute:
        if a.type == onnx.AttributeProto.INT:
            out[a.name] = int(a.i)
        elif a.type == onnx.AttributeProto.FLOAT:
            out[a.name] = float(a.f)
        elif a.type == onnx.AttributeProto.STRING:
            out[a.name] = a.s.decode("utf-8", "replace")
        elif a.type == onnx.AttributeProto.INTS:
            out[a.name] = [int(x) for x in a.ints]
        elif a.type == onnx.AttributeProto.FLOATS:
            out[a.name] = [float(x) for x in a.floats]
    return out


def _shown(name: str) -> str:
    """A name for a one-line message: as is when plainly printable, else quoted (repr)."""
    return name if name and name.isprintable() and name.strip() == name else repr(name)


def _utf8(text: str | bytes) -> str:
    """A name from the protobuf as text: protobuf hands back ``bytes`` for a string field
    that is not valid UTF-8; such bytes are decoded with U+FFFD in place of bad bytes."""
    return text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text


def _unique_id(base: str, used: set[str], k: int) -> str:
    """The node's name, made unique with ``#k`` (its position in the file) when taken."""
    node_id = base
    suffix = 0
    while node_id in used:
        node_id = f"{base}#{k}" if suffix == 0 else f"{base}#{k}.{suffix}"
        suffix += 1
    used.add(node_id)
    return node_id


def _names(values: list[str], limit: int = 6) -> str:
    shown = ", ".join(values[:limit])
    return shown + (f", … ({len(values) - limit} more)" if len(values) > limit else "")
