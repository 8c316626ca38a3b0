"""Forward graph -> training graph (forward + loss + backward), DESIGN §2.

Two conventions, both deterministic:

* ``checkmate`` (:func:`checkmate_training_graph`) for graphs without op semantics: one
  backward node per forward node, reading its forward node, its consumers and their
  backward nodes (Jain et al., *Checkmate*, MLSys 2020).
* ``autograd`` (:func:`autograd_training_graph`, the default for ONNX): one backward node
  per differentiable forward op, reading only what reverse-mode autodiff saves for that
  op type. What each op saves is the table :data:`AUTOGRAD`, written to be read and
  extended; ops missing from it save all their inputs and their output, and are reported.

Fixed memory for training is the forward graph's fixed memory (inputs, parameters,
constants) plus one copy of the parameters for their gradients and 0/1/2 more for the
optimizer state (``sgd``/``momentum``/``adam``). Transforms are functions from graph to a
new graph; the input is never changed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_cli.costmodel import cost_vector, roofline_seconds
from remat_cli.errors import InputError
from remat_cli.graph import MAX_VALUE_BYTES, Graph
from remat_cli.units import Fact, Phrase, to_data

__all__ = [
    "build_training_graph",
    "checkmate_training_graph",
    "autograd_training_graph",
    "ForwardFacts",
    "Saves",
    "AUTOGRAD",
    "UNKNOWN_SAVES",
    "NON_DIFFERENTIABLE",
    "CONVENTIONS",
    "OPTIMIZERS",
    "saves_for",
]

CONVENTIONS = ("checkmate", "autograd")
#: extra copies of the parameters each optimizer keeps (momentum buffer; Adam's two moments)
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}


# ---------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Saves:
    """What the backward of one op type reads besides the incoming gradient.

    ``inputs``: input slots it keeps (``"all"``: every input); ``product``: the factors
    of a product (``a*b``, ``X@W``), each kept only when another factor needs a gradient
    (d(ab)/db needs a, and nobody needs b when only a wants a gradient, as in ``x * 0.5``);
    ``output``: its own output; ``stats``: per-row/per-channel statistics of a
    normalization (mean, inverse std), held in a small node of their own; ``factor``:
    backward cost / forward cost. Inputs that are fixed memory (parameters, constants)
    are resident anyway and add no edge.
    """

    inputs: tuple[int, ...] | str = ()
    product: tuple[int, ...] = ()
    output: bool = False
    stats: bool = False
    factor: float = 2.0


_NOTHING = Saves(factor=1.0)
_OUTPUT = Saves(output=True, factor=1.0)
_INPUT = Saves(inputs=(0,), factor=1.0)
_CONTRACTION = Saves(product=(0, 1), factor=2.0)
_NORM = Saves(inputs=(0,), stats=True, factor=2.0)

#: What reverse-mode autodiff saves per ONNX op type (as PyTorch's autograd formulas do).
AUTOGRAD: dict[str, Saves] = {
    # y = f(x) whose derivative is a function of y
    **dict.fromkeys(["Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp", "Sqrt", "Reciprocal", "Elu", "Dropout"], _OUTPUT),
    # y = f(x) whose derivative needs x
    **dict.fromkeys(
        [
            "LeakyRelu",
            "Gelu",
            "FastGelu",
            "QuickGelu",
            "Erf",
            "Log",
            "Sin",
            "Cos",
            "Tan",
            "Abs",
            "Clip",
            "HardSigmoid",
            "HardSwish",
            "Softplus",
            "Softsign",
            "Mish",
            "Selu",
            "Celu",
            "ThresholdedRelu",
            "Shrink",
            "Atan",
            "Asin",
            "Acos",
            "Sinh",
            "Cosh",
            "ReduceSumSquare",
        ],
        _INPUT,
    ),
    # products: each input's gradient needs the other inputs
    **dict.fromkeys(["Mul", "Div"], Saves(product=(0, 1), factor=1.0)),
    **dict.fromkeys(["PRelu", "Max", "Min"], Saves(inputs="all", factor=1.0)),
    "Pow": Saves(inputs="all", output=True, factor=2.0),
    # linear in the inputs or pure data movement: the gradient needs shapes only
    **dict.fromkeys(
        [
            "Add",
            "Sub",
            "Neg",
            "Sum",
            "Mean",
            "Identity",
            "Reshape",
            "Flatten",
            "Squeeze",
            "Unsqueeze",
            "Transpose",
            "Concat",
            "Split",
            "Slice",
            "Pad",
            "Expand",
            "Tile",
            "Cast",
            "CastLike",
            "DepthToSpace",
            "SpaceToDepth",
            "Resize",
            "Upsample",
            "AveragePool",
            "GlobalAveragePool",
            "ReduceSum",
            "ReduceMean",
            "CumSum",
            "Trilu",
        ],
        _NOTHING,
    ),
    # indexing: the gradient is scattered back by the indices
    **dict.fromkeys(["Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements"], Saves(inputs=(1,), factor=1.0)),
    "Where": Saves(inputs=(0,), factor=1.0),
    # contractions: dX needs W and dW needs X (a bias needs neither)
    **dict.fromkeys(["Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"], _CONTRACTION),
    # normalizations: the input and the statistics computed from it
    **dict.fromkeys(
        [
            "BatchNormalization",
            "LayerNormalization",
            "GroupNormalization",
            "InstanceNormalization",
            "RMSNormalization",
            "SimplifiedLayerNormalization",
        ],
        _NORM,
    ),
    # selections: where the maximum was (input and output locate it)
    **dict.fromkeys(
        ["MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "TopK", "ReduceL2", "ReduceLogSumExp", "ReduceProd", "LpNormalization"],
        Saves(inputs=(0,), output=True, factor=1.0),
    ),
    "Attention": Saves(inputs="all", output=True, factor=2.5),
    **dict.fromkeys(["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"], Saves(inputs="all", factor=1.0)),
}

#: ops not in the table: keep everything (safe, and reported)
UNKNOWN_SAVES = Saves(inputs="all", output=True, factor=2.0)

#: ops through which no gradient flows (integer/boolean results, or piecewise constant)
NON_DIFFERENTIABLE = frozenset(
    """Shape Size ArgMax ArgMin Equal Less LessOrEqual Greater GreaterOrEqual Not And Or Xor Floor Ceil Round
    Sign NonZero Range ConstantOfShape EyeLike OneHot RandomNormal RandomUniform RandomNormalLike
    RandomUniformLike Bernoulli Multinomial IsNaN IsInf BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot
    Hardmax Constant""".split()
)


def saves_for(op: str) -> tuple[Saves, bool]:
    """The table entry for ``op`` and whether it is known (else :data:`UNKNOWN_SAVES`)."""
    entry = AUTOGRAD.get(op)
    return (entry, True) if entry is not None else (UNKNOWN_SAVES, False)


# ---------------------------------------------------------------------------- facts
@dataclass(frozen=True, eq=False)
class ForwardFacts:
    """Per forward node, what the autograd convention and the cost model need beyond the Graph.

    A loader that knows op semantics (ONNX) fills it in and returns it next to the graph
    (:class:`remat_cli.loaders.Loaded`); the graph passes (attention, precision) take it
    and return it rewritten with their graph. For other graphs :meth:`default` assumes
    every node is a differentiable float op. It never travels in ``Graph.meta``.
    """

    # per node, per input slot: the node read; -1 a fixed value or absent; -2 a trainable parameter
    slots: tuple[tuple[int, ...], ...]
    float_out: np.ndarray  # bool: the output is floating point
    grad_source: np.ndarray  # bool: reads a value whose gradient is wanted (a parameter)
    param_bytes: np.ndarray  # int64: bytes of trainable parameters the node reads
    stats_bytes: np.ndarray  # int64: bytes of the statistics a normalization keeps
    flops: np.ndarray  # float64 forward FLOPs
    nbytes: np.ndarray  # float64 bytes read + written by the forward op
    peak: np.ndarray  # float64 peak FLOP/s for the op's dtype on the device
    bandwidth: float  # bytes/s
    cost_kind: str  # flops | bytes | unit | roofline
    # per node, as exported (ONNX; None for other graphs or once --precision has rewritten them):
    dtypes: tuple[str, ...] | None = None  # the float dtype the op computes in
    float_bytes: tuple[int, ...] | None = None  # bytes of its float outputs (--precision rescales them)
    shapes: tuple[tuple[int, ...] | None, ...] | None = None  # its first output's shape (--attention)

    @classmethod
    def default(cls, graph: Graph) -> ForwardFacts:
        """Facts for a graph without op semantics: float, differentiable, sources trainable."""
        n = graph.n
        preds = graph.pred_lists
        return cls(
            slots=tuple(tuple(p) for p in preds),
            float_out=np.ones(n, dtype=bool),
            grad_source=np.array([not p for p in preds], dtype=bool),
            param_bytes=np.zeros(n, dtype=np.int64),
            stats_bytes=np.zeros(n, dtype=np.int64),
            flops=np.asarray(graph.cost, dtype=np.float64),
            nbytes=np.zeros(n, dtype=np.float64),
            peak=np.ones(n, dtype=np.float64),
            bandwidth=1.0,
            cost_kind="given",
        )

    def cost(self, flops: np.ndarray, nbytes: np.ndarray, units: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """The cost vector in this graph's unit (:func:`remat_cli.costmodel.cost_vector`)."""
        return cost_vector(self.cost_kind, flops, nbytes, units, seconds)


# ---------------------------------------------------------------------------- builders
def build_training_graph(
    graph: Graph, *, convention: str = "checkmate", optimizer: str = "sgd", facts: ForwardFacts | None = None
) -> Graph:
    """Build the training graph of the forward graph ``graph`` under ``convention``
    (``facts``: the loader's per-node facts, which the autograd convention reads)."""
    if optimizer not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if convention == "checkmate":
        return checkmate_training_graph(graph, optimizer=optimizer)
    if convention == "autograd":
        return autograd_training_graph(graph, optimizer=optimizer, facts=facts)
    raise InputError(f"unknown training-graph convention {convention!r}; choose one of {', '.join(CONVENTIONS)}")


def training_fixed_memory(graph: Graph, optimizer: str) -> tuple[int, dict[str, int]]:
    """Fixed memory of training: forward fixed + gradients + optimizer state, and its parts."""
    params = graph.meta.get("parameter_bytes", 0) or 0
    if isinstance(params, bool) or not isinstance(params, int) or not 0 <= params <= MAX_VALUE_BYTES:
        raise InputError(f"{graph.name}: meta parameter_bytes {params!r} is not a whole number of bytes in [0, 2**53]")
    copies = OPTIMIZERS[optimizer]
    given = graph.meta.get("fixed_parts")
    sound = isinstance(given, dict) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in given.values())
    parts = dict(given) if sound and sum(given.values()) == graph.fixed_mem else {"forward": int(graph.fixed_mem)}
    parts["gradients"] = params
    parts[f"optimizer state ({optimizer})"] = copies * params
    return int(graph.fixed_mem) + params * (1 + copies), parts


def _training_info(fwd: Graph, parts: dict[str, int], extra: dict[str, Any]) -> dict[str, Any]:
    """``remat info`` lines of a training graph: the forward graph's, plus what training adds."""
    info = dict(fwd.meta.get("info", {})) if isinstance(fwd.meta.get("info"), dict) else {}
    info.update({k: to_data(v) for k, v in extra.items()})
    template = ", ".join("{} {}" for _ in parts)
    if "parameter_bytes" not in fwd.meta:
        template += " (the graph states no parameter sizes: no gradients or optimizer state added)"
    info["fixed memory parts"] = to_data(Phrase(template, tuple(x for k, v in parts.items() for x in (k, Fact(v, "bytes")))))
    return info


def checkmate_training_graph(fwd: Graph, *, backward_cost_factor: float = 2.0, optimizer: str = "sgd") -> Graph:
    """The Checkmate convention (DESIGN §2), for graphs without op semantics.

    Forward nodes keep their order (0..L-1, topological); one ``loss`` node is fed by the
    forward sinks; ``bwd(u)`` (gradient of u's output, mem(u), cost 2·cost(u)) reads
    ``bwd(v)`` and ``v`` for every forward edge u->v, and ``u`` itself; ``bwd(sink)``
    reads the loss. The loss node's size and cost are the largest of the sinks'.
    Nodes that no target needs are dropped first. Result: 2L+1 nodes.
    """
    keep = fwd.needed_nodes  # topological order of the needed forward nodes
    L = int(keep.size)
    new_of = np.full(fwd.n, -1, dtype=np.int64)
    new_of[keep] = np.arange(L)
    src, dst = fwd.edges()
    mask = (new_of[src] >= 0) & (new_of[dst] >= 0)
    u, v = new_of[src[mask]], new_of[dst[mask]]
    out_deg = np.bincount(u, minlength=L)
    sinks = np.flatnonzero(out_deg == 0)
    loss = L
    bwd = np.arange(L) + L + 1  # bwd(i) = L + 1 + i
    # edges: forward; sinks -> loss; loss -> bwd(sink); u -> bwd(u); bwd(v) -> bwd(u), v -> bwd(u)
    e_src = np.concatenate([u, sinks, np.full(sinks.size, loss), np.arange(L), bwd[v], v])
    e_dst = np.concatenate([v, np.full(sinks.size, loss), bwd[sinks], bwd, bwd[u], bwd[u]])
    pairs = np.unique(np.stack([e_src, e_dst], axis=1), axis=0)
    # keep a deterministic, readable input order: sort by (dst, src)
    order = np.lexsort((pairs[:, 0], pairs[:, 1]))
    pairs = pairs[order]
    mem_f = fwd.mem[keep]
    cost_f = fwd.cost[keep]
    ids_f = [fwd.ids[i] for i in keep.tolist()]
    ids = ids_f + ["loss"] + [f"bwd:{x}" for x in ids_f]
    if "loss" in set(ids_f):
        ids[L] = "loss:" + fwd.name
    seconds = None
    if fwd.seconds is not None:
        sec_f = fwd.seconds[keep]
        seconds = np.concatenate([sec_f, [sec_f[sinks].max()], backward_cost_factor * sec_f])
    fixed, parts = training_fixed_memory(fwd, optimizer)
    meta = {k: val for k, val in fwd.meta.items() if not k.startswith("_")}
    meta["training_convention"] = "checkmate"
    meta["optimizer"] = optimizer
    meta["fixed_parts"] = parts
    extra: dict[str, Any] = {"training graph": Phrase("checkmate convention: {} backward nodes, optimizer {}", (L, optimizer))}
    if "forward_flops" in fwd.meta:
        extra["step FLOPs"] = Phrase("{} (backward = 2 x forward)", (Fact(3.0 * float(fwd.meta["forward_flops"]), "flops"),))
    meta["info"] = _training_info(fwd, parts, extra)
    return Graph.from_arrays(
        ids=ids,
        ops=[fwd.ops[i] for i in keep.tolist()] + ["Loss"] + [f"{fwd.ops[i]}Grad" if fwd.ops[i] else "Grad" for i in keep.tolist()],
        kinds=["forward"] * L + ["loss"] + ["backward"] * L,
        mem=np.concatenate([mem_f, [mem_f[sinks].max()], mem_f]),
        cost=np.concatenate([cost_f, [cost_f[sinks].max()], backward_cost_factor * cost_f]),
        workspace=np.concatenate([fwd.workspace[keep], [0], fwd.workspace[keep]]),
        src=pairs[:, 0],
        dst=pairs[:, 1],
        fixed_mem=fixed,
        cost_unit=fwd.cost_unit,
        seconds=seconds,
        name=f"{fwd.name}-train",
        meta=meta,
    )


def autograd_training_graph(fwd: Graph, *, optimizer: str = "sgd", facts: ForwardFacts | None = None) -> Graph:
    """The autograd convention (DESIGN §2): saved tensors per op type, from :data:`AUTOGRAD`.

    A forward node *requires grad* when its output is floating point, its op is
    differentiable, and it reads a parameter or a node that requires grad. The gradient
    *reaches* a node that feeds the loss or a consumer whose backward passes it a
    gradient. Every node that requires grad and is reached gets ``bwd(v)``, computing the
    gradients of v's inputs (mem = Σ mem of the inputs that require grad; parameter
    gradients are fixed memory). ``bwd(v)`` reads the loss (if v is a model output), the
    backward nodes of v's consumers that pass it a gradient, and the tensors its op saves;
    normalizations get a ``v:stats`` node between their input and v, which bwd(v) reads.

    The loss reads the model outputs that require grad and produces their gradients
    (mem = Σ their mem). Nodes are ordered forward, loss, backward in reverse; the result
    lists unknown op types in ``meta["info"]``. Linear in nodes + edges.
    """
    if facts is None or len(facts.slots) != fwd.n:
        facts = ForwardFacts.default(fwd)
    keep = fwd.needed_nodes.tolist()
    n = fwd.n
    ops = fwd.ops
    slots = facts.slots
    float_out = facts.float_out.tolist()
    source = facts.grad_source.tolist()
    mem = fwd.mem.tolist()
    succs = fwd.succ_lists
    needed = fwd.needed.tolist()

    # requires grad, forward in topological order
    rg = [False] * n
    for v in keep:
        if float_out[v] and ops[v] not in NON_DIFFERENTIABLE:
            rg[v] = source[v] or any(u >= 0 and rg[u] for u in slots[v])
    grad_inputs: list[list[int]] = [[] for _ in range(n)]
    for v in keep:
        if rg[v]:
            seen: set[int] = set()
            for u in slots[v]:
                if u >= 0 and rg[u] and u not in seen:
                    seen.add(u)
                    grad_inputs[v].append(u)
    targets = [int(t) for t in fwd.targets.tolist() if rg[t]]
    if not targets:
        raise InputError(
            f"{fwd.name}: no model output depends on a trainable parameter, so there is nothing to train "
            "(use --inference to schedule the forward pass)"
        )
    is_out = [False] * n
    for t in targets:
        is_out[t] = True
    # gradient reaches v: reverse topological order
    has_bwd = [False] * n
    for v in reversed(keep):
        if rg[v] and (is_out[v] or any(has_bwd[c] and v in grad_inputs[c] for c in succs[v] if needed[c])):
            has_bwd[v] = True

    # ---- assemble: forward (with stats nodes), loss, backward in reverse order
    stats_b = facts.stats_bytes.tolist()
    ids: list[str] = []
    gops: list[str] = []
    kinds: list[str] = []
    gmem: list[int] = []
    ws: list[int] = []
    flops: list[float] = []
    nbytes: list[float] = []
    units: list[float] = []
    peaks: list[float] = []
    src: list[int] = []
    dst: list[int] = []
    new = [-1] * n
    stats_of = [-1] * n
    f_flops = facts.flops.tolist()
    f_bytes = facts.nbytes.tolist()
    f_peak = facts.peak.tolist()
    f_cost = fwd.cost.tolist()
    f_ws = fwd.workspace.tolist()
    given = facts.cost_kind == "given"
    f_sec = fwd.seconds.tolist() if fwd.seconds is not None else None
    seconds: list[float] = []

    def add(
        node_id: str, op: str, kind: str, m: int, fl: float, nb: float, unit: float, peak: float, w: int = 0, sec: float | None = None
    ) -> int:
        ids.append(node_id)
        gops.append(op)
        kinds.append(kind)
        gmem.append(int(m))
        ws.append(int(w))
        flops.append(fl)
        nbytes.append(nb)
        units.append(unit)
        peaks.append(peak)
        seconds.append(0.0 if sec is None else sec)
        return len(ids) - 1

    unknown: Counter[str] = Counter()
    entries: dict[int, Saves] = {}
    for v in keep:
        if has_bwd[v]:
            entry, known = saves_for(ops[v])
            entries[v] = entry
            if not known:
                unknown[ops[v] or "(no op)"] += 1
    for v in keep:
        entry = entries.get(v)
        fl, nb = f_flops[v], f_bytes[v]
        if entry is not None and entry.stats and stats_b[v] > 0:
            x = slots[v][0] if slots[v] else -1
            x_bytes = mem[x] if x >= 0 else 0
            s_fl = min(fl, 3.0 * x_bytes / 4)  # mean and variance: ~3 FLOPs per float32 element
            s_nb = float(x_bytes + stats_b[v])
            s = add(f"{fwd.ids[v]}:stats", f"{ops[v]}Stats", "forward", stats_b[v], s_fl, s_nb, 0.0 if given else 1.0, f_peak[v], sec=None)
            stats_of[v] = s
            if x >= 0:
                src.append(new[x])
                dst.append(s)
            fl = fl - s_fl
        new[v] = add(fwd.ids[v], ops[v], "forward", mem[v], fl, nb, 1.0, f_peak[v], f_ws[v], sec=None if f_sec is None else f_sec[v])
        if stats_of[v] >= 0:
            src.append(stats_of[v])
            dst.append(new[v])
        for u in dict.fromkeys(fwd.pred_lists[v]):
            src.append(new[u])
            dst.append(new[v])
    loss_in = sum(mem[t] for t in targets)
    loss_name = "loss" if "loss" not in fwd.index else f"loss:{fwd.name}"
    loss = add(loss_name, "Loss", "loss", loss_in, float(loss_in), 2.0 * loss_in, 1.0, _median(f_peak) if f_peak else 1.0)
    for t in targets:
        src.append(new[t])
        dst.append(loss)
    bwd = [-1] * n
    p_bytes = facts.param_bytes.tolist()
    for v in reversed(keep):
        if not has_bwd[v]:
            continue
        entry = entries[v]
        m = sum(mem[u] for u in grad_inputs[v])
        reads: list[int] = []
        if is_out[v]:
            reads.append(loss)
        for c in succs[v]:
            if has_bwd[c] and v in grad_inputs[c]:
                reads.append(bwd[c])
        saved = _saved_nodes(entry, slots[v], v, stats_of[v] >= 0, rg)
        for u in saved:
            reads.append(stats_of[v] if u == -2 else new[u])
        saved_bytes = sum(stats_b[v] if u == -2 else mem[u] for u in saved)
        fl = entry.factor * f_flops[v]
        nb = float(mem[v] + saved_bytes + m + 2 * p_bytes[v])
        sec = None if f_sec is None else entry.factor * f_sec[v]
        b = add(
            f"bwd:{fwd.ids[v]}", f"{ops[v]}Grad" if ops[v] else "Grad", "backward", m, fl, nb, entry.factor, f_peak[v], f_ws[v], sec=sec
        )
        bwd[v] = b
        for r in dict.fromkeys(reads):
            src.append(r)
            dst.append(b)

    flops_a = np.asarray(flops)
    nbytes_a = np.asarray(nbytes)
    sec_a = roofline_seconds(flops_a, nbytes_a, np.asarray(peaks), facts.bandwidth)
    if given:
        # no op semantics: costs scale the given ones (forward as given, loss = largest output)
        cost = np.asarray(flops_a)
        cost[loss] = max((f_cost[t] for t in targets), default=0.0)
        sec_out = None
        if f_sec is not None:
            sec_out = np.asarray(seconds)
            sec_out[loss] = max((f_sec[t] for t in targets), default=0.0)
    else:
        cost = facts.cost(flops_a, nbytes_a, np.asarray(units), sec_a)
        sec_out = sec_a
    fixed, parts = training_fixed_memory(fwd, optimizer)
    meta = {k: val for k, val in fwd.meta.items() if not k.startswith("_")}
    n_bwd = sum(has_bwd)
    n_stats = sum(1 for s in stats_of if s >= 0)
    extra: dict[str, Any] = {
        "training graph": Phrase("autograd convention: {} backward nodes, {} statistics nodes, optimizer {}", (n_bwd, n_stats, optimizer))
    }
    if not given:
        extra["step FLOPs"] = Phrase("{} (forward, loss, backward)", (Fact(float(flops_a.sum()), "flops"),))
    if unknown:
        ops = sorted(unknown.items())
        extra["saved everything (op not in autograd table)"] = Phrase(
            ", ".join("{} x{}" for _ in ops), tuple(x for pair in ops for x in pair)
        )
    info = _training_info(fwd, parts, extra)
    meta["info"] = info
    meta["training_convention"] = "autograd"
    meta["optimizer"] = optimizer
    meta["fixed_parts"] = parts
    meta["autograd_unknown_ops"] = dict(sorted(unknown.items()))
    if not given:
        meta["training_flops"] = float(flops_a.sum())
    return Graph.from_arrays(
        ids=ids,
        ops=gops,
        kinds=kinds,
        mem=gmem,  # Python ints: Graph checks them against its limits before int64
        cost=np.maximum(cost, 0.0),
        workspace=ws,
        src=np.asarray(src, dtype=np.int64),
        dst=np.asarray(dst, dtype=np.int64),
        fixed_mem=fixed,
        cost_unit=fwd.cost_unit,
        seconds=sec_out,
        name=f"{fwd.name}-train",
        meta=meta,
    )


def _saved_nodes(entry: Saves, slots: tuple[int, ...], v: int, has_stats: bool, rg: list[bool]) -> list[int]:
    """Forward nodes the backward of ``v`` reads (-2 stands for v's statistics node)."""
    out: list[int] = []
    picks = range(len(slots)) if entry.inputs == "all" else entry.inputs
    for s in picks:
        if s < len(slots) and slots[s] >= 0:
            out.append(slots[s])

    def wants_grad(s: int) -> bool:
        u = slots[s]
        return u == -2 or (u >= 0 and rg[u])

    for s in entry.product:
        if s < len(slots) and slots[s] >= 0:
            if any(wants_grad(t) for t in entry.product if t != s and t < len(slots)):
                out.append(slots[s])
    if entry.output:
        out.append(v)
    if entry.stats and has_stats:
        out.append(-2)
    return list(dict.fromkeys(out))


def _median(values: list[float]) -> float:
    """``float(np.median(values))`` of a non-empty list, bit for bit, without numpy's first-call
    cost (np.median imports numpy.ma and more: about 40 ms of every ONNX load, issue 14)."""
    if any(v != v for v in values):
        return float("nan")  # np.median: NaN when any value is NaN
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (float(ordered[mid - 1]) + float(ordered[mid])) / 2.0
