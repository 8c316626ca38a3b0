"""What an operation costs: FLOPs, bytes moved, and seconds on a device (roofline).

``op_flops`` counts floating-point operations of one ONNX op from its input and output
shapes (a multiply-add is 2 FLOPs, as in every published FLOP count of these models);
its bytes are those it reads plus those it writes (the ONNX loader sums them from the
tensors' shapes and dtypes). ``roofline_seconds`` turns both into time on a :class:`DeviceProfile`: ``max(FLOPs / peak FLOP/s, bytes / bandwidth)``
(Williams, Waterman and Patterson, *Roofline*, CACM 2009), the peak taken for the op's
dtype. Built-in profiles are the vendors' published peaks; ``--device FILE.json`` reads
a custom one.

Conventions (kept simple and stated, since no count of elementwise work is canonical):
arithmetic and comparison ops count 1 FLOP per output element, transcendental functions
(exp, log, tanh, erf, …) 4, compound activations the sum of their parts; pure data
movement (transpose, concat, gather, reshape, cast, …) 0 FLOPs, its cost being bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from remat_cli.errors import InputError
from remat_cli.units import Fact, Phrase

__all__ = [
    "DeviceProfile",
    "PROFILES",
    "COST_KINDS",
    "COST_UNITS",
    "load_device",
    "op_flops",
    "roofline_seconds",
    "cost_vector",
    "known_op",
]

Shape = tuple[int, ...]

COST_KINDS = ("flops", "bytes", "unit", "roofline")
#: the graph's ``cost_unit`` for each ``--cost`` choice
COST_UNITS = {"flops": "flops", "bytes": "bytes", "unit": "unit", "roofline": "seconds"}


# ---------------------------------------------------------------------------- devices
@dataclass(frozen=True)
class DeviceProfile:
    """Peak compute per dtype (FLOP/s), memory bandwidth (bytes/s), memory size (bytes)."""

    name: str
    peak_flops: Mapping[str, float]  # dtype name -> FLOP/s; "default" is used for the rest
    bandwidth: float
    memory_bytes: int | None = None
    source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for an op computing in ``dtype`` (e.g. ``float32``, ``float16``)."""
        return float(self.peak_flops.get(dtype, self.peak_flops["default"]))

    def phrase(self) -> Phrase:
        """What ``remat info`` says of the device: its name, peak FLOP/s and bandwidth."""
        f32 = self.peak("float32")
        half = self.peak("float16")
        rates = (Fact(f32, "flop rate"),) + ((Fact(half, "flop rate"),) if half != f32 else ())
        template = "{}: {} fp32" + (", {} fp16" if half != f32 else "") + ", {}"
        return Phrase(template, (self.name, *rates, Fact(self.bandwidth, "bandwidth")))


PROFILES: dict[str, DeviceProfile] = {
    # NVIDIA A100 SXM4 80GB datasheet: FP32 19.5 TFLOP/s, TF32 156, FP16/BF16 312 (dense
    # tensor cores), FP64 9.7; HBM2e 2,039 GB/s.
    "a100": DeviceProfile(
        name="a100",
        peak_flops={"default": 19.5e12, "float32": 19.5e12, "float16": 312e12, "bfloat16": 312e12, "float64": 9.7e12, "tf32": 156e12},
        bandwidth=2039e9,
        memory_bytes=80 * 10**9,
        source="NVIDIA A100 80GB SXM datasheet",
    ),
    # NVIDIA H100 SXM5 datasheet: FP32 67 TFLOP/s, TF32 494.7, BF16/FP16 989.4 (dense),
    # FP8 1,979, FP64 34; HBM3 3,350 GB/s.
    "h100": DeviceProfile(
        name="h100",
        peak_flops={
            "default": 67e12,
            "float32": 67e12,
            "float16": 989.4e12,
            "bfloat16": 989.4e12,
            "float64": 34e12,
            "tf32": 494.7e12,
            "float8": 1979e12,
        },
        bandwidth=3350e9,
        memory_bytes=80 * 10**9,
        source="NVIDIA H100 SXM datasheet",
    ),
    # A generic 8-core x86 CPU at 3 GHz with AVX2 and two FMA units: 8 x 3e9 x 32 FP32
    # FLOP/cycle = 768 GFLOP/s (half for float64, no native fp16 arithmetic);
    # dual-channel DDR4-3200: 51.2 GB/s.
    "cpu": DeviceProfile(
        name="cpu",
        peak_flops={"default": 768e9, "float32": 768e9, "float64": 384e9},
        bandwidth=51.2e9,
        memory_bytes=None,
        source="8 cores x 3 GHz x 32 FP32 FLOP/cycle (AVX2, 2 FMA), DDR4-3200 dual channel",
    ),
}


def load_device(spec: str) -> DeviceProfile:
    """A built-in profile by name (``cpu``, ``a100``, ``h100``) or a JSON file.

    The file holds ``{"name": "...", "peak_flops": 1.2e14 | {"float32": ..., "float16":
    ..., "default": ...}, "bandwidth": bytes_per_second, "memory_bytes": optional}``.
    """
    key = spec.strip().lower()
    if key in PROFILES:
        return PROFILES[key]
    path = Path(spec)
    if not path.suffix.lower() == ".json" and not path.exists():
        raise InputError(f"--device {spec!r}: not a built-in device ({', '.join(PROFILES)}) nor a JSON file")
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"{spec}: cannot read device profile: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{spec}: device profile is not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{spec}: device profile must be a JSON object")
    peak = doc.get("peak_flops")
    if isinstance(peak, (int, float)) and not isinstance(peak, bool):
        peak = {"default": peak}
    if not isinstance(peak, dict) or not peak:
        raise InputError(f'{spec}: "peak_flops" must be a number or an object of dtype -> FLOP/s')
    peaks = {}
    for k, v in peak.items():
        peaks[str(k)] = _positive(v, f'{spec}: "peak_flops" {k!r}')
    peaks.setdefault("default", peaks.get("float32", max(peaks.values())))
    bandwidth = _positive(doc.get("bandwidth"), f'{spec}: "bandwidth" (bytes/s)')
    memory = doc.get("memory_bytes")
    if memory is not None:
        memory = int(_positive(memory, f'{spec}: "memory_bytes"'))
    return DeviceProfile(
        name=str(doc.get("name") or path.stem), peak_flops=peaks, bandwidth=bandwidth, memory_bytes=memory, source=str(path)
    )


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{what} must be a positive number, not {value!r}")
    return float(value)


def roofline_seconds(flops: np.ndarray, nbytes: np.ndarray, peaks: np.ndarray, bandwidth: float) -> np.ndarray:
    """Per op: ``max(flops / peak, bytes / bandwidth)`` seconds (vectorised).

    The one roofline formula: the ONNX loader, the training graph and the graph passes
    (precision, attention) all compute their seconds with it."""
    return np.maximum(np.asarray(flops, np.float64) / np.asarray(peaks, np.float64), np.asarray(nbytes, np.float64) / bandwidth)


def cost_vector(kind: str, flops: np.ndarray, nbytes: np.ndarray, units: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """The per-node cost a graph states for ``--cost kind`` (one of :data:`COST_KINDS`):
    FLOPs, bytes moved, one unit per node, or roofline seconds."""
    table = {"flops": flops, "bytes": nbytes, "unit": units, "roofline": seconds}
    if kind not in table:
        raise InputError(f"--cost {kind!r}: choose one of {', '.join(COST_KINDS)}")
    return table[kind]


# ---------------------------------------------------------------------------- FLOPs
#: FLOPs per output element of elementwise ops
ELEMENTWISE: dict[str, float] = {
    **dict.fromkeys(
        [
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Neg",
            "Abs",
            "Relu",
            "Max",
            "Min",
            "Where",
            "Equal",
            "Less",
            "LessOrEqual",
            "Greater",
            "GreaterOrEqual",
            "And",
            "Or",
            "Xor",
            "Not",
            "Sign",
            "Floor",
            "Ceil",
            "Round",
            "Reciprocal",
            "Mod",
            "BitShift",
            "IsNaN",
            "IsInf",
            "Sqrt",
            "BitwiseAnd",
            "BitwiseOr",
            "BitwiseXor",
            "BitwiseNot",
        ],
        1.0,
    ),
    **dict.fromkeys(["LeakyRelu", "PRelu", "Clip", "ThresholdedRelu", "Shrink"], 2.0),
    **dict.fromkeys(
        ["Exp", "Log", "Tanh", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Pow"], 4.0
    ),
    "Sigmoid": 6.0,  # exp, add, divide
    "HardSigmoid": 3.0,
    "HardSwish": 4.0,
    "Elu": 6.0,
    "Selu": 7.0,
    "Celu": 7.0,
    "Softplus": 9.0,  # exp, add, log
    "Softsign": 3.0,
    "Mish": 20.0,  # softplus, tanh, multiply
    "Gelu": 10.0,  # erf form: divide, erf, add, two multiplies
    "FastGelu": 10.0,
    "QuickGelu": 8.0,
    "BiasGelu": 11.0,
    "Dropout": 2.0,  # draw a mask, scale
    "Trilu": 1.0,
}

#: ops that only move or reinterpret data: no arithmetic, their cost is bytes
DATA_MOVEMENT = frozenset(
    """Identity Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice Gather GatherElements GatherND
    Scatter ScatterElements ScatterND Pad Expand Tile Shape Size Cast CastLike ConstantOfShape Constant
    DepthToSpace SpaceToDepth Compress NonZero OneHot Range EyeLike ReverseSequence SplitToSequence
    SequenceConstruct SequenceAt SequenceEmpty SequenceInsert SequenceLength ConcatFromSequence
    RandomNormal RandomUniform RandomNormalLike RandomUniformLike Bernoulli Multinomial
    Optional OptionalGetElement OptionalHasElement CenterCropPad Col2Im""".split()
)

REDUCTIONS = frozenset(
    """ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
    ReduceSumSquare ArgMax ArgMin CumSum CumProd TopK""".split()
)

#: FLOPs per element of the (largest) input
NORMALIZATIONS = {
    "Softmax": 5.0,  # max, subtract, exp, sum, divide
    "LogSoftmax": 5.0,
    "Hardmax": 2.0,
    "LayerNormalization": 8.0,  # mean, variance, normalise, scale, shift
    "SimplifiedLayerNormalization": 6.0,
    "RMSNormalization": 6.0,
    "SkipLayerNormalization": 9.0,
    "BatchNormalization": 8.0,  # training mode: statistics then normalise; inference needs 4
    "InstanceNormalization": 8.0,
    "GroupNormalization": 8.0,
    "MeanVarianceNormalization": 7.0,
    "LpNormalization": 3.0,
    "LRN": 6.0,
}

POOLS = frozenset(["MaxPool", "AveragePool", "LpPool", "MaxRoiPool", "RoiAlign", "MaxUnpool"])
GLOBAL_POOLS = frozenset(["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
#: ops with a formula of their own in :func:`op_flops`
SPECIAL = frozenset(
    [
        "Conv",
        "ConvTranspose",
        "ConvInteger",
        "QLinearConv",
        "MatMul",
        "MatMulInteger",
        "QLinearMatMul",
        "Gemm",
        "Einsum",
        "Resize",
        "Upsample",
        "Attention",
        "Sum",
        "Mean",
        "Det",
        "GridSample",
        "NegativeLogLikelihoodLoss",
        "SoftmaxCrossEntropyLoss",
        "LSTM",
        "GRU",
        "RNN",
    ]
)


def known_op(op: str) -> bool:
    """Whether :func:`op_flops` has a formula for ``op`` (default ONNX domain)."""
    return (
        op in ELEMENTWISE
        or op in DATA_MOVEMENT
        or op in REDUCTIONS
        or op in NORMALIZATIONS
        or op in POOLS
        or op in GLOBAL_POOLS
        or op in SPECIAL
    )


def op_flops(op: str, attrs: Mapping[str, Any], ins: Sequence[Shape | None], outs: Sequence[Shape | None]) -> tuple[float, bool]:
    """FLOPs of one ONNX op (default domain) from its shapes; ``(flops, exact)``.

    ``ins``/``outs`` are the input and output shapes (None where unknown or absent).
    ``exact`` is False where a shape was missing or the op has no formula; the count is
    then an estimate (one FLOP per output element for unknown ops). Control-flow ops are
    counted by the loader, which sums their subgraphs.
    """
    out0 = outs[0] if outs else None
    out_n = _numel(out0)
    in0 = ins[0] if ins else None
    try:
        if op in ELEMENTWISE:
            n = out_n if out_n is not None else _max_numel(ins)
            return ELEMENTWISE[op] * (n or 0), n is not None
        if op in DATA_MOVEMENT:
            return 0.0, True
        if op in ("Sum", "Mean"):
            n = out_n if out_n is not None else _max_numel(ins)
            k = max(len([s for s in ins if s is not None]) - (1 if op == "Sum" else 0), 1)
            return float(k * (n or 0)), n is not None
        if op in REDUCTIONS:
            n = _numel(in0)
            return float(n or 0), n is not None
        if op in NORMALIZATIONS:
            n = _numel(in0) if in0 is not None else out_n
            return NORMALIZATIONS[op] * (n or 0), n is not None
        if op in GLOBAL_POOLS:
            n = _numel(in0)
            return float(n or 0), n is not None
        if op in POOLS:
            kernel = attrs.get("kernel_shape") or ()
            return float((out_n or 0) * _prod(kernel)), out_n is not None and bool(kernel)
        if op in ("Conv", "ConvInteger", "QLinearConv"):
            w = ins[3] if op == "QLinearConv" and len(ins) > 3 else (ins[1] if len(ins) > 1 else None)
            if out_n is None or w is None or len(w) < 2:
                return float(out_n or 0), False
            macs = out_n * w[1] * _prod(w[2:])
            bias = len(ins) > 2 and ins[2] is not None and op == "Conv"
            return float(2 * macs + (out_n if bias else 0)), True
        if op == "ConvTranspose":
            w = ins[1] if len(ins) > 1 else None
            x_n = _numel(in0)
            if x_n is None or w is None or len(w) < 2:
                return float(out_n or 0), False
            macs = x_n * w[1] * _prod(w[2:])
            bias = len(ins) > 2 and ins[2] is not None
            return float(2 * macs + ((out_n or 0) if bias else 0)), True
        if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
            a = ins[0]
            if a is None or out_n is None or len(a) == 0:
                return float(out_n or 0), False
            return float(2 * out_n * a[-1]), True
        if op == "Gemm":
            a = ins[0]
            if a is None or out_n is None or len(a) != 2:
                return float(out_n or 0), False
            k = a[0] if attrs.get("transA", 0) else a[1]
            c = len(ins) > 2 and ins[2] is not None
            return float(2 * out_n * k + (out_n if c else 0)), True
        if op == "Einsum":
            return _einsum_flops(str(attrs.get("equation", "")), ins, out_n)
        if op in ("Resize", "Upsample"):
            mode = attrs.get("mode", "nearest")
            mode = mode.decode() if isinstance(mode, bytes) else str(mode)
            if out_n is None:
                return 0.0, False
            spatial = max(len(out0) - 2, 1) if out0 is not None else 2
            per = {"nearest": 0, "linear": 3 * 2**spatial, "bilinear": 3 * 2**spatial, "cubic": 3 * 4**spatial}.get(mode, 1)
            return float(per * out_n), True
        if op == "Attention":
            return _attention_flops(ins)
        if op in ("NegativeLogLikelihoodLoss",):
            n = _numel(in0)
            return float(n or 0), n is not None
        if op == "SoftmaxCrossEntropyLoss":
            n = _numel(in0)
            return float(6 * (n or 0)), n is not None
        if op in ("LSTM", "GRU", "RNN"):
            return _rnn_flops(op, attrs, ins)
        if op in ("Det", "GridSample"):
            return float(8 * (out_n or 0)), False
    except (TypeError, ValueError, IndexError):
        pass
    n = out_n if out_n is not None else _max_numel(ins)
    return float(n or 0), False


def _einsum_flops(equation: str, ins: Sequence[Shape | None], out_n: int | None) -> tuple[float, bool]:
    """2 x the product of every index's extent (one multiply-add per point of the index space)."""
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",") if lhs else []
    if not terms or len(terms) != len(ins) or any(s is None for s in ins):
        return float(out_n or 0), False
    sizes: dict[str, int] = {}
    ellipsis = 1
    for term, shape in zip(terms, ins):
        assert shape is not None
        letters = term.replace("...", "")
        n_ell = len(shape) - len(letters)
        if "..." in term:
            pos = term.index("...")
            ell_dims = shape[pos : pos + n_ell]
            ellipsis = max(ellipsis, _prod(ell_dims))
            shape = tuple(shape[:pos]) + tuple(shape[pos + n_ell :])
        for ch, d in zip(letters, shape):
            sizes[ch] = max(sizes.get(ch, 1), int(d))
    space = ellipsis * _prod(sizes.values())
    return float(space if len(terms) == 1 else 2 * space), True


def _attention_flops(ins: Sequence[Shape | None]) -> tuple[float, bool]:
    """ONNX Attention (opset 23): Q·Kᵀ and P·V matmuls plus the softmax over the scores."""
    q = ins[0] if ins else None
    k = ins[1] if len(ins) > 1 else None
    v = ins[2] if len(ins) > 2 else None
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4:
        return float(_numel(q) or 0), False
    b, h, sq, d = q
    skv = k[2]
    dv = v[-1]
    scores = b * h * sq * skv
    return float(2 * scores * d + 5 * scores + 2 * scores * dv), True


def _rnn_flops(op: str, attrs: Mapping[str, Any], ins: Sequence[Shape | None]) -> tuple[float, bool]:
    """Gates x (input + recurrent matmuls) per step and direction."""
    x, w = ins[0], ins[1] if len(ins) > 1 else None
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return float(_numel(x) or 0), False
    seq, batch, inp = x
    dirs, gates_h, _ = w
    hidden = int(attrs.get("hidden_size") or gates_h // {"LSTM": 4, "GRU": 3}.get(op, 1))
    gates = {"LSTM": 4, "GRU": 3}.get(op, 1)
    per_step = 2 * batch * gates * hidden * (inp + hidden) + 8 * batch * gates * hidden
    return float(dirs * seq * per_step), True


def _numel(shape: Shape | None) -> int | None:
    if shape is None:
        return None
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _max_numel(shapes: Sequence[Shape | None]) -> int | None:
    sizes = [n for n in (_numel(s) for s in shapes) if n is not None]
    return max(sizes) if sizes else None


def _prod(values) -> int:
    n = 1
    for v in values:
        n *= int(v)
    return n
