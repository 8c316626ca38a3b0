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

What lives where: :mod:`.onnx_file` parses the protobuf, refuses unsafe or malformed
files and orders the nodes; :mod:`.onnx_shapes` sets ``--dim`` values, infers shapes and
evaluates small load-time tensors; :mod:`.views` decides which views fold into what;
this module reads the nodes (:func:`read_model`: dims, inputs and parameters, shapes, one
node per op with views and constants folded, targets, facts and costs, what ``remat
info`` says).
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
from remat_cli.graph import MAX_TOTAL_BYTES, Graph
from remat_cli.loaders.onnx_file import (
    CONTROL_FLOW,
    DEFAULT_DOMAINS,
    FLOAT_TYPES,
    attributes,
    check_dim_limit,
    dtype_bits,
    inference_export_signs,
    outer_names,
    parse_model,
    subgraphs,
    tensor_bytes,
    topological_order,
    utf8,
)
from remat_cli.loaders.onnx_shapes import (
    RANDOM_OPS,
    check_declared_dims,
    check_shapes,
    check_unresolved,
    drop_weight_data,
    foldable,
    infer_shapes,
    set_dims,
)
from remat_cli.loaders.views import VIEW_OPS, ReadOp, ViewFolding, fold_views
from remat_cli.training import ForwardFacts, build_training_graph
from remat_cli.units import Fact, Phrase, to_data

__all__ = ["read", "forward_graph", "training_graph", "read_model", "inference_export_signs", "VIEW_OPS", "CONTROL_FLOW", "dtype_bits"]

#: ops whose cost or statistics need attributes
NEEDS_ATTRS = frozenset(
    [
        "Gemm",
        "Einsum",
        "MaxPool",
        "AveragePool",
        "LpPool",
        "Resize",
        "Upsample",
        "LSTM",
        "GRU",
        "RNN",
        "LayerNormalization",
        "GroupNormalization",
        "Loop",
        "If",
        "Scan",
        "RMSNormalization",
        "SimplifiedLayerNormalization",
    ]
)


# ---------------------------------------------------------------------------- entry points
def read(path: Path, data: bytes, options: Any, warn: Callable[[str], None]) -> tuple[Graph, ForwardFacts, tuple[str, ...]]:
    """Read an ONNX file: its forward graph, the per-node facts the graph passes and the
    autograd convention need, and the signs that it was exported in inference mode."""
    if options.cost not in COST_KINDS:
        raise InputError(f"--cost {options.cost!r}: choose one of {', '.join(COST_KINDS)}")
    profile = load_device(options.device)
    model = parse_model(path, data)
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
    fwd: Graph,
    facts: ForwardFacts | None,
    export_signs: tuple[str, ...],
    options: Any,
    path: Path,
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
        signs = Phrase("inference (" + ", ".join("{}" for _ in export_signs) + "): re-export in training mode", export_signs)
        info["export mode"] = to_data(signs)
        graph = _with_meta(graph, export_mode="inference", info=info)
    unknown = graph.meta.get("autograd_unknown_ops") or {}
    if unknown:
        warn(
            f"{path}: {sum(unknown.values())} op(s) not in the autograd table save all their inputs and output: "
            + ", ".join(f"{_shown(op)} x{c}" for op, c in unknown.items())
        )
    return graph


def _with_meta(graph: Graph, **extra: Any) -> Graph:
    return dataclasses.replace(graph, meta={**graph.meta, **extra})


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
    float_bytes: int  # bytes of its float outputs (--precision rescales them)
    shape: tuple[int, ...] | None  # its first output's shape (--attention)


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
    changed in place: dims are set on it).

    The steps: set and check the dimensions; find the inputs and the trainable
    parameters; infer every value's shape (:mod:`.onnx_shapes`); read the nodes in
    topological order, fold views (:func:`.views.fold_views`), and build the nodes
    of the other ops, folding load-time constants (:class:`_Reader`); find the
    targets; cost the nodes (:mod:`remat_cli.costmodel`); describe what was read.
    """
    warn = warn or (lambda _msg: None)
    device = device or load_device("a100")
    drop_weight_data(model)
    dims = set_dims(model.graph, dict(dims or {}), source, strict=strict_dims)  # those the model has
    check_declared_dims(model.graph, source)
    top = _TopLevel.of(model.graph, source)
    shapes, small = infer_shapes(model, top.nodes_pb, top.order, set(top.trainable), source, warn)
    check_shapes(shapes, top.nodes_pb, source)
    reader = _Reader(top, shapes, small)
    ops = [reader.listed(k) for k in top.order]
    folding = fold_views(ops, top.trainable, keep_views)
    for i, k in enumerate(top.order):
        reader.read(k, ops[i], i in folding.folded, folding)
    targets = _targets(model.graph, top, reader, source)
    graph_inputs = top.input_bytes(model.graph, shapes)
    fixed_parts = {
        "inputs": graph_inputs,
        "parameters": int(sum(top.trainable.values())),
        "constants and buffers": top.init_bytes + reader.const_bytes - int(sum(top.trainable.values())),
    }
    facts = _forward_facts(reader.nodes, device, cost)
    seconds = roofline_seconds(facts.flops, facts.nbytes, facts.peak, facts.bandwidth)
    n = len(reader.nodes)
    meta = _describe(model, top, reader, dims, fixed_parts, facts, device, cost, keep_views, source, warn)
    graph = Graph.from_arrays(
        ids=[nd.id for nd in reader.nodes],
        ops=[nd.op for nd in reader.nodes],
        kinds=["forward"] * n,
        mem=[nd.mem for nd in reader.nodes],  # Python ints: Graph checks them before int64
        cost=cost_vector(cost, facts.flops, facts.nbytes, np.ones(n, dtype=np.float64), seconds),
        src=np.fromiter((u for nd in reader.nodes for u in nd.preds), dtype=np.int64),
        dst=np.fromiter((i for i, nd in enumerate(reader.nodes) for _ in nd.preds), dtype=np.int64),
        targets=targets,
        fixed_mem=sum(fixed_parts.values()),
        cost_unit=COST_UNITS[cost],
        seconds=seconds,
        name=name,
        source=source,
        meta=meta,
        _checked=True,
    )
    return graph, facts


@dataclass
class _TopLevel:
    """The model's top-level graph as the reader needs it: nodes in order, inputs, and
    the trainable parameters (float initializers with more than one element that are not
    BatchNormalization running statistics)."""

    nodes_pb: list[Any]
    order: list[int]
    initializers: dict[str, Any]
    graph_inputs: list[Any]
    input_names: set[str]
    used: set[str]
    trainable: dict[str, int]  # name -> bytes
    init_bytes: int  # bytes of every initializer a node reads

    @classmethod
    def of(cls, g: Any, source: str) -> _TopLevel:
        initializers = {t.name: t for t in g.initializer}
        graph_inputs = [i for i in g.input if i.name not in initializers]
        input_names = {i.name for i in graph_inputs}
        nodes_pb = list(g.node)
        order = topological_order(nodes_pb, initializers, input_names, source)
        used: set[str] = set()
        for nd in nodes_pb:
            used.update(x for x in nd.input if x)
            if nd.op_type in CONTROL_FLOW:
                used.update(outer_names(nd))
        check_unresolved(graph_inputs, used, source)
        buffers: set[str] = set()
        for nd in nodes_pb:
            if nd.op_type == "BatchNormalization" and len(nd.input) >= 5:
                buffers.update(nd.input[3:5])
        trainable: dict[str, int] = {}
        init_bytes = 0
        for t in g.initializer:
            if t.name not in used:
                continue
            b = tensor_bytes(t.data_type, tuple(t.dims))
            init_bytes += b
            if t.data_type in FLOAT_TYPES and math.prod(t.dims) > 1 and t.name not in buffers:
                trainable[t.name] = b
        if init_bytes > MAX_TOTAL_BYTES:
            raise InputError(
                f"{source}: the initializers hold {init_bytes:.3g} B, above the {MAX_TOTAL_BYTES:.3g} B (2**62) remat can count"
            )
        return cls(nodes_pb, order, initializers, graph_inputs, input_names, used, trainable, init_bytes)

    def input_bytes(self, g: Any, shapes: dict[str, Any]) -> int:
        """Bytes of the model inputs that are read or returned."""
        total = 0
        for i in self.graph_inputs:
            if i.name in self.used or any(o.name == i.name for o in g.output):
                elem, shp = shapes.get(i.name, (1, None))
                total += tensor_bytes(elem, shp) if shp is not None else 0
        return total


class _Reader:
    """Reads the top-level nodes in topological order into :class:`_Node` s.

    Two steps around the view pass: :meth:`listed` says what each op is (the pass's
    input), :meth:`read` then builds the nodes. Constants, folded views (see
    :mod:`.views`) and small results computable at load time (folded into constants)
    become no node; every other op becomes one node, with its sizes, FLOPs and parameter
    reads.
    """

    def __init__(self, top: _TopLevel, shapes: dict[str, Any], small: dict[str, np.ndarray]) -> None:
        self.top = top
        self.shapes = shapes
        self.small = small
        self.float_inputs = {i.name for i in top.graph_inputs if shapes.get(i.name, (0, None))[0] in FLOAT_TYPES}
        self.differentiate_inputs = not top.trainable  # no parameters: gradients w.r.t. the float inputs
        self.producer: dict[str, int] = {}  # value -> scheduled node (views resolve to their producer)
        self.root: dict[str, str] = {}  # view of a fixed value -> that value
        self.static: set[str] = {t for t in top.initializers if t not in top.trainable}  # values known at load time
        self.nodes: list[_Node] = []
        self.used_ids: set[str] = set()
        self.const_bytes = 0
        self.folded_views = 0
        self.folded_static = 0
        self.estimated: list[str] = []
        self.inexact = 0  # ops whose FLOPs are an estimate (a shape or a formula missing)
        self.unknown_ops: Counter[str] = Counter()
        self.control: Counter[str] = Counter()
        self.onnx_ops: Counter[str] = Counter()

    def listed(self, k: int) -> ReadOp:
        """Node ``k`` of the file as the view pass sees it: not scheduled when it is a
        ``Constant`` or a small value computable at load time."""
        nd = self.top.nodes_pb[k]
        op = utf8(nd.op_type)
        default = nd.domain in DEFAULT_DOMAINS
        outs = [o for o in nd.output if o]
        static = default and (
            op == "Constant" or (op not in CONTROL_FLOW and op not in RANDOM_OPS and foldable(outs, self.shapes, self.small))
        )
        return ReadOp(op=op, default=default, inputs=tuple(nd.input), outputs=tuple(outs), scheduled=not static)

    def read(self, k: int, listed: ReadOp, folded: bool, folding: ViewFolding) -> None:
        """Read node ``k`` of the file (``listed`` as :meth:`listed` saw it): a folded view
        (``folded``, see ``folding``), a constant, a load-time value, or a node."""
        nd = self.top.nodes_pb[k]
        op, default = listed.op, listed.default
        label = op if default else f"{utf8(nd.domain)}.{op}"
        self.onnx_ops[label] += 1
        ins = list(nd.input)
        outs = [o for o in nd.output if o]
        if not outs:
            return
        if folded:
            self._folded_view(outs, folding)
        elif not listed.scheduled and op == "Constant":
            self._constant(outs)
        elif not listed.scheduled:
            self._fold_static(outs)
        else:
            self._op_node(k, nd, op, label, default, ins, outs)

    def value_bytes(self, x: str) -> int | None:
        """Bytes of a value: from its shape, else its producer's (possibly estimated) size."""
        elem, shp = self.shapes.get(x, (1, None))
        if shp is not None:
            return tensor_bytes(elem or 1, shp)
        return self.nodes[self.producer[x]].mem if x in self.producer else None

    def _constant(self, outs: list[str]) -> None:
        for o in outs:
            elem, shp = self.shapes.get(o, (1, None))
            self.const_bytes += tensor_bytes(elem, shp) if shp is not None else 0
            self.static.add(o)

    def _folded_view(self, outs: list[str], folding: ViewFolding) -> None:
        """A folded view's outputs are its base node, or the fixed value it views."""
        for o in outs:
            if o in folding.base:
                self.producer[o] = self.producer[folding.base[o]]
            else:
                self.root[o] = folding.root[o]
                if self.root[o] in self.static:
                    self.static.add(o)
        self.folded_views += 1

    def _fold_static(self, outs: list[str]) -> None:
        for o in outs:
            elem, shp = self.shapes[o]
            self.const_bytes += tensor_bytes(elem, shp)
        self.static.update(outs)
        self.folded_static += 1

    def _op_node(self, k: int, nd: Any, op: str, label: str, default: bool, ins: list[str], outs: list[str]) -> None:
        """Add the op as a node: output sizes (estimated where no shape is known), FLOPs,
        bytes moved, dtype, and which parameters and inputs it reads."""
        shapes = self.shapes
        attrs = attributes(nd) if (op in NEEDS_ATTRS or not default) else {}
        in_shapes = [shapes.get(x, (0, None))[1] if x else None for x in ins]
        out_shapes = [shapes.get(o, (0, None))[1] for o in outs]
        out_elems = [shapes.get(o, (0, None))[0] for o in outs]
        if any(e == 0 for e in out_elems):  # type unknown (e.g. a custom op): as its inputs
            in_elems = [shapes[x][0] for x in ins if x in shapes and shapes[x][0]]
            guess = next((e for e in in_elems if e in FLOAT_TYPES), in_elems[0] if in_elems else 1)
            out_elems = [e or guess for e in out_elems]
        out_bytes = []
        for o, shp, elem in zip(outs, out_shapes, out_elems):
            if shp is not None:
                out_bytes.append(tensor_bytes(elem, shp))
            else:
                guess = _estimate(op, [b for b in (self.value_bytes(x) for x in ins if x) if b is not None])
                if default and op == "Split":  # its outputs partition its input: n parts, not n copies
                    guess = -(-guess // len(outs))
                out_bytes.append(guess)
                self.estimated.append(o)
        trainable, root = self.top.trainable, self.root
        slots = [self.producer.get(x, -2 if root.get(x, x) in trainable else -1) if x else -1 for x in ins]
        if op in CONTROL_FLOW:
            self.control[op] += 1
            slots = slots + [self.producer[x] for x in outer_names(nd) if x in self.producer]
            flops, exact = _control_flops(nd, shapes, self.small)
        elif default and op in VIEW_OPS:  # kept views: no arithmetic, no copy
            flops, exact = 0.0, True
        elif default and known_op(op):
            flops, exact = op_flops(op, attrs, in_shapes, out_shapes)
        else:
            flops, exact = op_flops("", {}, in_shapes, out_shapes)
            self.unknown_ops[label] += 1
        if not exact:
            self.inexact += 1
        in_bytes = sum(self.value_bytes(x) or 0 for x in dict.fromkeys(x for x in ins if x))
        dtype = next((FLOAT_TYPES[e] for e in out_elems if e in FLOAT_TYPES), None)
        if dtype is None:
            dtype = next((FLOAT_TYPES[shapes[x][0]] for x in ins if x in shapes and shapes[x][0] in FLOAT_TYPES), "float32")
        roots = [root.get(x, x) for x in ins if x]
        idx = len(self.nodes)
        self.nodes.append(
            _Node(
                id=_unique_id(utf8(nd.name) or f"{op}_{k}", self.used_ids, k),
                op=label,
                slots=slots,
                preds=list(dict.fromkeys(s for s in slots if s >= 0)),
                mem=int(sum(out_bytes)),
                flops=float(flops),
                nbytes=0.0 if (default and op in VIEW_OPS) else float(in_bytes + sum(out_bytes)),
                dtype=dtype,
                float_out=any(e in FLOAT_TYPES for e in out_elems),
                param_bytes=sum(trainable.get(x, 0) for x in dict.fromkeys(roots)),
                reads_float_input=self.differentiate_inputs and any(x in self.float_inputs for x in roots),
                stats_bytes=_stats_bytes(op, attrs, in_shapes) if default else 0,
                float_bytes=sum(b for b, e in zip(out_bytes, out_elems) if e in FLOAT_TYPES),
                shape=tuple(out_shapes[0]) if out_shapes and out_shapes[0] is not None else None,
            )
        )
        for o in outs:
            self.producer[o] = idx


def _targets(g: Any, top: _TopLevel, reader: _Reader, source: str) -> list[int]:
    """The nodes producing the graph's outputs; refuses a graph with nothing to schedule."""
    if not reader.nodes:
        raise InputError(f"{source}: the ONNX graph has no operations to schedule (only constants, views and inputs)")
    defined = set(reader.producer) | reader.static | top.input_names
    for o in g.output:
        if o.name not in defined and not any(o.name in nd.output for nd in top.nodes_pb):
            raise InputError(f"{source}: graph output {utf8(o.name)!r} is produced by no node, input or initializer")
    targets = sorted({reader.producer[o.name] for o in g.output if o.name in reader.producer})
    if not targets:
        raise InputError(f"{source}: the graph's outputs depend on no operation (they are inputs or constants); nothing to schedule")
    return targets


def _forward_facts(nodes: list[_Node], device: DeviceProfile, cost: str) -> ForwardFacts:
    """Per node: what the training graph, the graph passes and the cost model need."""
    return ForwardFacts(
        slots=tuple(tuple(nd.slots) for nd in nodes),
        float_out=np.array([nd.float_out for nd in nodes], dtype=bool),
        grad_source=np.array([nd.param_bytes > 0 or nd.reads_float_input for nd in nodes], dtype=bool),
        param_bytes=np.array([nd.param_bytes for nd in nodes], dtype=np.int64),
        stats_bytes=np.array([nd.stats_bytes for nd in nodes], dtype=np.int64),
        flops=np.array([nd.flops for nd in nodes], dtype=np.float64),
        nbytes=np.array([nd.nbytes for nd in nodes], dtype=np.float64),
        peak=np.array([device.peak(nd.dtype) for nd in nodes], dtype=np.float64),
        bandwidth=device.bandwidth,
        cost_kind=cost,
        dtypes=tuple(nd.dtype for nd in nodes),
        float_bytes=tuple(nd.float_bytes for nd in nodes),
        shapes=tuple(nd.shape for nd in nodes),
    )


def _describe(
    model: Any,
    top: _TopLevel,
    reader: _Reader,
    dims: dict[str, int],
    fixed_parts: dict[str, int],
    facts: ForwardFacts,
    device: DeviceProfile,
    cost: str,
    keep_views: bool,
    source: str,
    warn: Callable[[str], None],
) -> dict[str, Any]:
    """The forward graph's meta (plain data, with the lines ``remat info`` shows), and the
    warnings about unknown ops and estimated sizes."""
    unknown_ops, estimated, onnx_ops = reader.unknown_ops, reader.estimated, reader.onnx_ops
    if unknown_ops:
        warn(
            f"{source}: {sum(unknown_ops.values())} op(s) without a cost model get a default cost (1 FLOP per output element): "
            + ", ".join(f"{_shown(op)} x{c}" for op, c in sorted(unknown_ops.items()))
        )
    if estimated:
        warn(
            f"{source}: {len(estimated)} value(s) have no inferred shape; their sizes are estimated from their op's inputs (see remat info)"
        )
    input_bytes, param_bytes = fixed_parts["inputs"], fixed_parts["parameters"]
    param_count = sum(math.prod(top.initializers[t].dims) for t in top.trainable)
    forward_flops = float(facts.flops.sum())
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    top_ops = onnx_ops.most_common(8)
    producer = f"{model.producer_name or 'unknown producer'} {model.producer_version}".rstrip()
    info: dict[str, Any] = {
        "model": Phrase("ONNX opset {}, {}", (opset, producer)),
        "ONNX ops": Phrase(
            "{} (" + ", ".join("{} {}" for _ in top_ops) + (", …" if len(onnx_ops) > 8 else "") + ")",
            (sum(onnx_ops.values()), *_flat(top_ops)),
        ),
        "dimensions": Phrase(", ".join("{}={}" for _ in dims), _flat(dims.items())) if dims else "all static",
        "parameters": Phrase("{} ({})", (Fact(param_count, "count"), Fact(param_bytes, "bytes"))),
        "fixed memory parts": Phrase(
            "inputs {}, parameters {}, constants and buffers {}",
            (Fact(input_bytes, "bytes"), Fact(param_bytes, "bytes"), Fact(fixed_parts["constants and buffers"], "bytes")),
        ),
        "forward FLOPs": Phrase("{} ({} ops estimated)", (Fact(forward_flops, "flops"), reader.inexact))
        if reader.inexact
        else Phrase("{}", (Fact(forward_flops, "flops"),)),
        "device": device.phrase(),
        "cost": Phrase("{} ({})", (cost, COST_UNITS[cost])),
        "folded": Phrase(
            "{} views into their producers, {} shape computations into constants" + (" (--keep-views: views kept)" if keep_views else ""),
            (reader.folded_views, reader.folded_static),
        ),
        "estimated sizes": "none" if not estimated else Phrase("{}: {}", (len(estimated), _names(estimated))),
        "unknown ops": "none" if not unknown_ops else _op_counts(unknown_ops, " (default cost)"),
    }
    if reader.control:
        info["control flow"] = _op_counts(reader.control, " (opaque; cost = sum of subgraphs)")
    info = {k: to_data(v) for k, v in info.items()}
    return {
        "source_format": "onnx",
        "parameter_bytes": param_bytes,
        "fixed_parts": dict(fixed_parts),
        "parameter_count": param_count,
        "input_bytes": input_bytes,
        "forward_flops": forward_flops,
        "dims": dict(dims),
        "device": device.name,
        "estimated_values": list(estimated),
        "unknown_ops": dict(sorted(unknown_ops.items())),
        "onnx_ops": dict(sorted(onnx_ops.items())),
        "info": info,
    }


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
    for _, sub in subgraphs(nd):
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
            f, e = op_flops(nd.op_type if known_op(nd.op_type) else "", attributes(nd), ins, outs)
        total += f
        exact = exact and e
    return total, exact


def _shown(name: str) -> str:
    """A name for a one-line message: as is when plainly printable, else quoted (repr)."""
    return name if name and name.isprintable() and name.strip() == name else repr(name)


def _unique_id(base: str, used: set[str], k: int) -> str:
    """The node's name, made unique with ``#k`` (its position in the file) when taken."""
    node_id = base
    suffix = 0
    while node_id in used:
        node_id = f"{base}#{k}" if suffix == 0 else f"{base}#{k}.{suffix}"
        suffix += 1
    used.add(node_id)
    return node_id


def _flat(pairs: Any) -> tuple[Any, ...]:
    """``[(a, 1), (b, 2)]`` -> ``(a, 1, b, 2)``: the arguments of a phrase that lists pairs."""
    return tuple(x for pair in pairs for x in pair)


def _op_counts(counts: dict[str, int], tail: str) -> Phrase:
    """'Loop x2, If x1' + ``tail``, as a phrase (op names sorted)."""
    return Phrase(", ".join("{} x{}" for _ in counts) + tail, _flat(sorted(counts.items())))


def _names(values: list[str], limit: int = 6) -> Phrase:
    """The first ``limit`` names, and how many more there are."""
    shown = values[:limit]
    more = len(values) - len(shown)
    return Phrase(", ".join("{}" for _ in shown) + (", … ({} more)" if more else ""), (*shown, *((more,) if more else ())))
