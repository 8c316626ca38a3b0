"""Training precision: in which dtype each op runs, and what that does to sizes and time.

``--precision`` picks how the model is trained; :func:`apply_precision` turns the forward
graph an ONNX export gives (its values in their exported dtypes, fp32 for a normal
export) and the loader's per-node :class:`~remat_cli.training.ForwardFacts` into the
forward graph and facts of that setting, before the training graph is built:

* ``fp32`` (default): as exported; nothing changes.
* ``bf16`` / ``fp16``: pure half precision (``model.to(torch.bfloat16)``): every float
  value, every parameter, and so every gradient and optimizer state is 2 bytes.
* ``amp``: ``torch.autocast`` (CUDA, float16) with fp32 parameters. Ops in PyTorch's
  lower-precision list (:data:`AMP_HALF`: matmuls, convolutions, linear layers) run in
  half precision; ops in its fp32 list (:data:`AMP_FP32`: softmax, norms, reductions,
  losses, exp/log/pow) run in fp32; every other op runs in the widest dtype of its float
  activation inputs (parameters and constants do not promote: an exported Linear's bias
  ``Add`` belongs to PyTorch's ``linear``, which runs in half). An autocast op whose
  input has another dtype reads a cast copy, and autograd saves that copy: a ``Cast``
  node is inserted per such (input, op) pair, as autocast does not cache casts of
  activations. The half copies of the weights that half ops read are cached by autocast
  and saved for backward, so they count as fixed memory next to the fp32 parameters.

Normalization statistics (mean, inverse std) stay fp32 in every setting (PyTorch keeps
them in the accumulation type); model inputs, constants and buffers stay as exported.
FLOPs do not change; bytes moved scale with each op's dtype; the roofline takes the
device's peak for the dtype each op runs in (:meth:`DeviceProfile.peak`).

Reference: PyTorch, *Automatic Mixed Precision*, "Autocast Op Reference" (CUDA ops that
can autocast to float16 / to float32). See docs/precision.md for the table of what is
counted in which dtype.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from remat_cli.costmodel import DeviceProfile, roofline_seconds
from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.training import ForwardFacts
from remat_cli.units import Fact, Phrase, to_data

__all__ = ["PRECISIONS", "AMP_HALF", "AMP_FP32", "apply_precision", "run_dtypes", "BITS"]

PRECISIONS = ("fp32", "bf16", "fp16", "amp")
#: dtype name -> bits per element
BITS = {"float32": 32, "float16": 16, "bfloat16": 16, "float64": 64, "float8": 8}
_HALF = {"bf16": "bfloat16", "fp16": "float16", "amp": "float16"}

#: ONNX ops that run in half precision under CUDA autocast (matmul, mm, bmm, addmm, linear,
#: conv*, conv_transpose*, einsum, prelu, RNN cells)
AMP_HALF = frozenset(["Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "PRelu", "LSTM", "GRU", "RNN", "Attention"])
#: ONNX ops that run in fp32 under CUDA autocast (softmax, log_softmax, layer_norm,
#: group_norm, norm, sum, prod, cumsum, cumprod, exp, log, pow, reciprocal, rsqrt, acos,
#: asin, cosh, sinh, tan, softplus, the losses)
AMP_FP32 = frozenset(
    """Softmax LogSoftmax LayerNormalization GroupNormalization RMSNormalization SimplifiedLayerNormalization
    SkipLayerNormalization LpNormalization ReduceL1 ReduceL2 ReduceSum ReduceSumSquare ReduceProd
    ReduceLogSumExp CumSum CumProd Exp Log Pow Reciprocal Acos Asin Cosh Sinh Tan Softplus
    SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss""".split()
)


def run_dtypes(fwd: Graph, facts: ForwardFacts | None, precision: str) -> list[str | None]:
    """Per forward node: the float dtype it runs in under ``precision`` (None: not float)."""
    dtypes = facts.dtypes if facts is not None else None
    if facts is None or dtypes is None:
        raise InputError(f"{fwd.name}: --precision needs an ONNX model (other graphs state sizes in bytes)")
    floats = facts.float_out.tolist()
    if precision == "fp32":
        return [d if f else None for d, f in zip(dtypes, floats)]
    half = _HALF[precision]
    if precision in ("bf16", "fp16"):
        return [half if f else None for f in floats]
    out: list[str | None] = [None] * fwd.n
    for v in fwd.topo.tolist():
        if not floats[v]:
            continue
        op = fwd.ops[v]
        if op in AMP_HALF:
            out[v] = half
        elif op in AMP_FP32:
            out[v] = "float32"
        else:
            ins = [out[u] for u in facts.slots[v] if u >= 0 and out[u] is not None]
            out[v] = max(ins, key=lambda d: BITS[d]) if ins else "float32"
    return out


def apply_precision(fwd: Graph, facts: ForwardFacts | None, precision: str, device: DeviceProfile) -> tuple[Graph, ForwardFacts | None]:
    """The forward graph ``fwd`` and its ``facts`` (from the ONNX loader) as trained under
    ``precision``.

    Float values take the size of the dtype their op runs in; under ``amp`` a ``Cast``
    node is added for each autocast op input of another dtype; parameter bytes, fixed
    memory and its parts follow the setting; costs are recomputed on ``device``. The new
    facts no longer state exported dtypes, float bytes or shapes (they are spent here).
    """
    if precision not in PRECISIONS:
        raise InputError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    meta: dict[str, Any] = dict(fwd.meta)
    meta["precision"] = precision
    info = dict(meta.get("info") or {})
    info["precision"] = _describe(precision)
    meta["info"] = info
    if precision == "fp32":
        if facts is not None:
            meta["max_op_parameter_bytes"] = int(facts.param_bytes.max(initial=0))
        return dataclasses.replace(fwd, meta=meta), facts
    run = run_dtypes(fwd, facts, precision)
    assert facts is not None and facts.dtypes is not None  # run_dtypes refuses a graph without them
    dtypes: list[str] = list(facts.dtypes)
    float_bytes: list[int] = list(facts.float_bytes or fwd.mem.tolist())
    old = fwd.mem.tolist()
    slots = facts.slots

    # ---- new nodes: casts before their consumer (amp), then the node itself
    ids: list[str] = []
    ops: list[str] = []
    mem: list[int] = []
    flops: list[float] = []
    nbytes: list[float] = []
    peaks: list[float] = []
    new_slots: list[tuple[int, ...]] = []
    float_out: list[bool] = []
    grad_source: list[bool] = []
    param_b: list[int] = []
    stats_b: list[int] = []
    ws: list[int] = []
    new_of = [-1] * fwd.n
    used = set(fwd.ids)
    n_casts = 0
    cast_ops = AMP_HALF | AMP_FP32 if precision == "amp" else frozenset()
    f_flops = facts.flops.tolist()
    f_bytes = facts.nbytes.tolist()
    half_bits = BITS[_HALF[precision]]
    for v in fwd.topo.tolist():
        dt = run[v]
        slot_v = list(slots[v])
        if dt is not None and fwd.ops[v] in cast_ops:
            for s, u in enumerate(slot_v):
                if u < 0 or run[u] is None or run[u] == dt:
                    continue
                numel = float_bytes[u] * 8 // BITS.get(dtypes[u], 32)
                size = (numel * BITS[dt] + 7) // 8
                cid = _unique(f"{fwd.ids[u]}:to_{dt}:{fwd.ids[v]}", used)
                ids.append(cid)
                ops.append("Cast")
                mem.append(int(size))
                flops.append(0.0)
                nbytes.append(float(_scaled(float_bytes[u], dtypes[u], run[u]) + size))
                peaks.append(device.peak(dt))
                new_slots.append((new_of[u],))
                float_out.append(True)
                grad_source.append(False)
                param_b.append(0)
                stats_b.append(0)
                ws.append(0)
                slot_v[s] = -(len(ids) - 1) - 3  # placeholder for the cast: resolved below
                n_casts += 1
        ratio = 1.0 if dt is None else BITS[dt] / BITS.get(dtypes[v], 32)
        fb = float_bytes[v]
        new_mem = old[v] - fb + (_scaled(fb, dtypes[v], dt) if dt is not None else fb)
        ids.append(fwd.ids[v])
        ops.append(fwd.ops[v])
        mem.append(int(new_mem))
        flops.append(f_flops[v])
        nbytes.append(f_bytes[v] * ratio)
        peaks.append(device.peak(dt) if dt is not None else facts.peak[v])
        new_of[v] = len(ids) - 1
        new_slots.append(tuple(_resolve(s, new_of) for s in slot_v))
        float_out.append(bool(facts.float_out[v]))
        grad_source.append(bool(facts.grad_source[v]))
        pb = int(facts.param_bytes[v])
        param_b.append(pb if precision == "amp" else (pb * half_bits) // 32)  # exported fp32 -> half
        stats_b.append(int(facts.stats_bytes[v]))
        ws.append(int(fwd.workspace[v]))

    flops_a = np.asarray(flops)
    nbytes_a = np.asarray(nbytes)
    peaks_a = np.asarray(peaks)
    seconds = roofline_seconds(flops_a, nbytes_a, peaks_a, facts.bandwidth)
    cost = facts.cost(flops_a, nbytes_a, np.ones(len(ids)), seconds) if facts.cost_kind != "given" else flops_a
    new_facts = ForwardFacts(
        slots=tuple(new_slots),
        float_out=np.asarray(float_out, dtype=bool),
        grad_source=np.asarray(grad_source, dtype=bool),
        param_bytes=np.asarray(param_b, dtype=np.int64),
        stats_bytes=np.asarray(stats_b, dtype=np.int64),
        flops=flops_a,
        nbytes=nbytes_a,
        peak=peaks_a,
        bandwidth=facts.bandwidth,
        cost_kind=facts.cost_kind,
    )
    src = [u for v, sl in enumerate(new_slots) for u in dict.fromkeys(s for s in sl if s >= 0)]
    dst = [v for v, sl in enumerate(new_slots) for _ in dict.fromkeys(s for s in sl if s >= 0)]

    # ---- fixed memory
    parts = dict(meta.get("fixed_parts") or {})
    params = int(meta.get("parameter_bytes", 0) or 0)
    count = int(meta.get("parameter_count", 0) or 0)
    fixed = int(fwd.fixed_mem)
    if precision in ("bf16", "fp16"):
        new_params = count * half_bits // 8
        fixed += new_params - params
        parts["parameters"] = new_params
        meta["parameter_bytes"] = new_params
    else:  # amp: fp32 parameters plus the half copies autocast caches for half ops
        copies = sum(int(facts.param_bytes[v]) * half_bits // 32 for v in range(fwd.n) if run[v] is not None and fwd.ops[v] in AMP_HALF)
        fixed += copies
        parts["half weight copies (amp)"] = copies
    meta["fixed_parts"] = parts
    meta["max_op_parameter_bytes"] = int(max(param_b, default=0))
    half_ops = sum(1 for d in run if d is not None and BITS[d] == 16)
    float_ops = sum(1 for d in run if d)
    if precision == "amp":
        said = Phrase(
            "{}; {} of {} float ops in half precision, {} cast copies saved", (_describe(precision), half_ops, float_ops, n_casts)
        )
    else:
        said = Phrase("{}; {} of {} float ops in half precision", (_describe(precision), half_ops, float_ops))
    info["precision"] = to_data(said)
    info["fixed memory parts"] = to_data(
        Phrase(", ".join("{} {}" for _ in parts), tuple(x for k, v in parts.items() for x in (k, Fact(v, "byte count"))))
    )
    meta["info"] = info
    meta["precision_casts"] = n_casts
    targets = [new_of[t] for t in fwd.targets.tolist()]
    graph = Graph.from_arrays(
        ids=ids,
        ops=ops,
        kinds=["forward"] * len(ids),
        mem=np.asarray(mem, dtype=np.int64),
        cost=np.maximum(np.asarray(cost, dtype=np.float64), 0.0),
        src=np.asarray(src, dtype=np.int64),
        dst=np.asarray(dst, dtype=np.int64),
        workspace=np.asarray(ws, dtype=np.int64),
        targets=targets,
        fixed_mem=fixed,
        cost_unit=fwd.cost_unit,
        seconds=seconds,
        name=fwd.name,
        meta=meta,
        _checked=True,
    )
    return graph, new_facts


def _describe(precision: str) -> str:
    return {
        "fp32": "fp32 (as exported)",
        "bf16": "bf16 (pure: values, parameters, gradients, optimizer state in bfloat16)",
        "fp16": "fp16 (pure: values, parameters, gradients, optimizer state in float16)",
        "amp": "amp (autocast float16; fp32 parameters, gradients, optimizer state)",
    }[precision]


def _scaled(nbytes: int, exported: str, dtype: str | None) -> int:
    """``nbytes`` of values in dtype ``exported`` re-counted in ``dtype``."""
    if dtype is None:
        return nbytes
    bits = BITS.get(exported, 32)
    return (nbytes * 8 // bits * BITS[dtype] + 7) // 8


def _resolve(slot: int, new_of: list[int]) -> int:
    """A slot in the new numbering: cast k is the placeholder ``-k-3``; -1/-2 keep their meaning."""
    if slot >= 0:
        return new_of[slot]
    if slot in (-1, -2):
        return slot
    return -slot - 3


def _unique(base: str, used: set[str]) -> str:
    name, k = base, 1
    while name in used:
        k += 1
        name = f"{base}#{k}"
    used.add(name)
    return name
