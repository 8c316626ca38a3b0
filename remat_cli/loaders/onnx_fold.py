"""ONNX ops on small known tensors, in numpy: load-time constant folding without
``onnx.reference``.

:mod:`.onnx_shapes` evaluates small tensors whose inputs are known at load time (shape
arithmetic: ``Shape -> Gather -> Unsqueeze -> Concat``, ``Div``, ``Cast``, ``Range``, …).
ONNX's reference implementation takes 0.1-0.4 s to import and wraps every call in
checks; the ops such graphs fold are a few numpy calls each, written here one function
per op. Each computes what the reference implementation of the installed ``onnx``
(1.23) computes for that op and opset, with the same numpy calls, so that a model's
folded values, and so its graph, are the same as with the reference:

* a result is the reference's result (dtype, shape and values);
* ``None`` (the op fails) only where the reference raises too (same computation);
* :class:`NotHandled` for what the table leaves to the reference: an op not in it, an
  unusual dtype, attribute or arity; the caller then runs ``onnx.reference``.

``tests/test_onnx_fold.py`` checks all three against ``onnx.reference`` per op over
generated inputs and attributes. The function bodies follow ``onnx/reference/ops``
(Apache-2.0), including its quirks (e.g. ``GatherElements`` fails on some valid inputs:
so does this table, keeping graphs unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["NotHandled", "OPS", "run"]


class NotHandled(Exception):
    """The table does not compute this call; the reference implementation should."""


#: dtypes the table computes with (others, e.g. strings, bfloat16 or float8, are not handled)
_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
)
#: ONNX element type -> numpy dtype, for ``Cast`` (the types of :data:`_DTYPES`)
_ELEM_DTYPES = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}
_INTEGER_INDICES = frozenset([np.dtype(np.int32), np.dtype(np.int64)])

Inputs = Sequence[Any]  # np.ndarray, or None for an absent optional input
Result = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class _Op:
    """One op of the table: its function, the reference's implementation versions
    (``()``: one for every opset) and, per version, the attributes it takes and their
    defaults (an attribute named with default ``...`` is required)."""

    fn: Callable[[int | None, dict[str, Any], Inputs], Result]
    versions: tuple[int, ...] = ()
    attrs: Callable[[int | None], dict[str, Any]] = lambda _v: {}


def run(nd: Any, inputs: Inputs, opset: int) -> Result | None:
    """Outputs of node ``nd`` (a NodeProto of the default domain) on ``inputs`` at
    ``opset``, as ONNX's reference implementation computes them; None where it fails.

    Raises :class:`NotHandled` for an op, dtype, attribute or arity this table leaves to
    the reference implementation.
    """
    op = OPS.get(nd.op_type)
    if op is None:
        raise NotHandled(nd.op_type)
    version: int | None = None
    if op.versions:
        version = max((v for v in op.versions if v <= opset), default=None)
        if version is None:
            return None  # the reference has no implementation this old
    try:
        attrs = _attributes(nd, op.attrs(version))
    except NotHandled:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. a string that is not UTF-8: the reference decides
        raise NotHandled("unreadable attribute") from exc
    for x in inputs:
        if x is not None and (not isinstance(x, np.ndarray) or x.dtype not in _DTYPES):
            raise NotHandled("dtype")
    with np.errstate(all="ignore"):
        try:
            out = op.fn(version, attrs, inputs)
        except NotHandled:
            raise
        except Exception:  # noqa: BLE001 - the same numpy computation raises in the reference
            return None
    return tuple(np.asarray(r) for r in out)


#: the AttributeProto type each attribute of the table has (INT when not named here):
#: another type (a malformed file) is left to the reference
_ATTRIBUTE_TYPES = {"axes": 7, "perm": 7, "starts": 7, "ends": 7, "value": 4, "round_mode": 3}


def _attributes(nd: Any, allowed: dict[str, Any]) -> dict[str, Any]:
    """The node's attributes as the reference reads them, with the schema's defaults;
    NotHandled for an attribute the version does not take or a required one missing."""
    found: dict[str, Any] = {}
    for a in nd.attribute:
        if a.name not in allowed or a.ref_attr_name or a.type != _ATTRIBUTE_TYPES.get(a.name, 2):
            raise NotHandled(f"attribute {a.name}")
        if a.type == 2:  # INT
            found[a.name] = int(a.i)
        elif a.type == 7:  # INTS
            found[a.name] = [int(i) for i in a.ints]
        elif a.type == 3:  # STRING
            found[a.name] = a.s.decode("utf-8")
        elif a.type == 4:  # TENSOR
            from onnx import numpy_helper

            found[a.name] = numpy_helper.to_array(a.t)
        else:
            raise NotHandled(f"attribute type {a.type}")
    for name, default in allowed.items():
        if name not in found:
            if default is ...:
                raise NotHandled(f"attribute {name} missing")
            found[name] = default
    return found


def _arity(inputs: Inputs, low: int, high: int | None = None) -> list[Any]:
    """The inputs, when there are ``low`` to ``high`` of them and the first ``low`` are present."""
    high = low if high is None else high
    if not low <= len(inputs) <= high or any(x is None for x in inputs[:low]):
        raise NotHandled("arity")
    return list(inputs) + [None] * (high - len(inputs))


# ---------------------------------------------------------------------------- elementwise
def _binary_num(f: Callable[[np.ndarray, np.ndarray], Any]) -> Callable[..., Result]:
    """Add, Sub, Mul, Div (OpRunBinaryNumpy): equal dtypes in, the same dtype out."""

    def run_binary(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
        x, y = _arity(inputs, 2)
        if x.dtype != y.dtype:
            raise NotHandled("dtypes differ")
        r = np.asarray(f(x, y))
        if r.dtype != x.dtype:
            raise NotHandled("result dtype")
        return (r,)

    return run_binary


def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if issubclass(x.dtype.type, np.integer):  # truncates toward zero (C++-style)
        q = np.floor_divide(x, y)
        r = np.remainder(x, y)
        needs_adjust = (r != 0) & ((x < 0) ^ (y < 0))
        return q + needs_adjust.astype(q.dtype)
    if x.dtype.kind != "f":
        raise NotHandled("Div of booleans")
    return np.divide(x, y)


def _compare(f: Callable[[np.ndarray, np.ndarray], Any]) -> Callable[..., Result]:
    """Comparisons and logical ops (OpRunBinary): equal dtypes in."""

    def run_compare(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
        x, y = _arity(inputs, 2)
        if x.dtype != y.dtype:
            raise NotHandled("dtypes differ")
        return (f(x, y),)

    return run_compare


def _unary_num(f: Callable[[np.ndarray], Any]) -> Callable[..., Result]:
    """Neg, Abs, Floor, Ceil, Sqrt (OpRunUnaryNum): the input's dtype out."""

    def run_unary(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
        (x,) = _arity(inputs, 1)
        r = np.asarray(f(x))
        if r.dtype != x.dtype:
            raise NotHandled("result dtype")
        return (r,)

    return run_unary


def _not(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    (x,) = _arity(inputs, 1)
    return (np.logical_not(x),)


def _identity(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    (x,) = _arity(inputs, 1)
    return (x.copy(),)


def _mod(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    x, y = _arity(inputs, 2)
    if x.dtype != y.dtype:
        raise NotHandled("dtypes differ")
    return (np.fmod(x, y) if a["fmod"] == 1 else np.mod(x, y),)


def _pow(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    x, y = _arity(inputs, 2)
    return (np.power(x, y).astype(x.dtype),)


def _min_max(f: Callable[[np.ndarray, np.ndarray], Any]) -> Callable[..., Result]:
    """Min and Max of one or more tensors of one dtype."""

    def run_min_max(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
        data = _arity(inputs, 1, max(len(inputs), 1))
        if any(x is None or x.dtype != data[0].dtype for x in data):
            raise NotHandled("dtypes differ")
        if len(data) == 1:
            return (data[0].copy(),)
        r = data[0]
        for x in data[1:]:
            r = f(r, x)
        r = np.asarray(r)
        if r.dtype != data[0].dtype:
            raise NotHandled("result dtype")
        return (r,)

    return run_min_max


def _where(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    cond, x, y = _arity(inputs, 3)
    if x.dtype != y.dtype:
        raise NotHandled("dtypes differ")
    return (np.where(cond, x, y).astype(x.dtype),)


def _cast(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    (x,) = _arity(inputs, 1)
    dtype = _ELEM_DTYPES.get(a["to"])
    if dtype is None:
        raise NotHandled("Cast to a type outside the table")
    return (x.astype(dtype),)


def _cast_like(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    x, like = _arity(inputs, 2)
    return (x.astype(like.dtype),)


# ---------------------------------------------------------------------------- shapes
def _concat(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    data = _arity(inputs, 1, max(len(inputs), 1))
    if any(x is None or x.dtype != data[0].dtype for x in data):
        raise NotHandled("dtypes differ")
    axis = a["axis"]
    for x in data:
        if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
            return_failure()
    return (np.concatenate(data, axis),)


def return_failure() -> None:
    """Raise as the reference does for these inputs (the op fails: not folded)."""
    raise ValueError("the reference implementation refuses these inputs")


def _gather(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    x, indices = _arity(inputs, 2)
    if indices.dtype not in _INTEGER_INDICES:
        raise NotHandled("indices dtype")
    if not x.flags["C_CONTIGUOUS"]:  # (np.ascontiguousarray makes a scalar 1-D: only when needed)
        x = np.ascontiguousarray(x)
    if not indices.flags["C_CONTIGUOUS"]:
        indices = np.ascontiguousarray(indices)
    return (np.take(x, indices, axis=a["axis"]),)


def _gather_elements(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    """As the reference computes it (``np.choose``), failing where it fails."""
    data, indices = _arity(inputs, 2)
    if indices.dtype not in _INTEGER_INDICES:
        raise NotHandled("indices dtype")
    if indices.size == 0:
        return (np.empty(indices.shape, dtype=data.dtype),)
    dim = a["axis"]
    if indices.shape[:dim] + indices.shape[dim + 1 :] != data.shape[:dim] + data.shape[dim + 1 :]:
        return_failure()
    data_swapped = np.swapaxes(data, 0, dim)
    index_swapped = np.swapaxes(indices, 0, dim)
    try:
        gathered = np.choose(index_swapped, data_swapped, mode="wrap")
    except ValueError:
        if len(index_swapped.shape) == 2 and len(data_swapped.shape) == 2:
            rows = [row[i[0]] for row, i in zip(data, indices, strict=True)]
            return (np.array(rows, dtype=data.dtype).reshape(indices.shape),)
        raise
    return (np.swapaxes(gathered, 0, dim),)


def _unsqueeze(v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    if v is not None and v < 13:  # axes is an attribute
        (data,) = _arity(inputs, 1)
        axes = a["axes"]
        if not axes:
            return_failure()
        for axis in axes:
            data = np.expand_dims(data, axis=axis)
        return (data,)
    data, axes = _arity(inputs, 2)
    if axes.ndim == 0:
        raise NotHandled("scalar axes")
    return (np.expand_dims(data, axis=tuple(axes)),)


def _squeeze(v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    if v is not None and v < 13:  # axes is an attribute
        (data,) = _arity(inputs, 1)
        axes = a["axes"]
        if not axes:
            return (np.squeeze(data),)
        for axis in reversed(axes):
            data = np.squeeze(data, axis=axis)
        return (data,)
    data, axes = _arity(inputs, 1, 2)
    if axes is None:
        return (np.squeeze(data),)
    if axes.ndim == 0:
        raise NotHandled("scalar axes")
    return (np.squeeze(data, axis=tuple(axes)),)


def _slice(v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    if v is not None and v < 10:  # starts, ends, axes are attributes
        (data,) = _arity(inputs, 1)
        if not a["starts"] or not a["ends"]:
            raise NotHandled("Slice-1 without starts or ends")
        starts, ends, steps = np.array(a["starts"]), np.array(a["ends"]), None
        axes = np.array(a["axes"]) if a["axes"] else None
    else:
        data, starts, ends, axes, steps = _arity(inputs, 3, 5)
    if starts.ndim == 0:
        starts = np.array([starts])
    if ends.ndim == 0:
        ends = np.array([ends])
    if axes is None:
        if steps is None:
            slices = [slice(s, e) for s, e in zip(starts, ends, strict=False)]
        else:
            slices = [slice(s, e, d) for s, e, d in zip(starts, ends, steps, strict=False)]
    else:
        slices = [slice(0, n) for n in data.shape]
        if steps is None:
            for s, e, ax in zip(starts, ends, axes, strict=False):
                slices[ax] = slice(s, e)
        else:
            for s, e, ax, d in zip(starts, ends, axes, steps, strict=False):
                slices[ax] = slice(s, e, d)
    return (data[tuple(slices)],)


def _reshape(v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    data, shape = _arity(inputs, 2)
    new_shape = np.copy(shape)
    if a.get("allowzero", 0) != 1:
        zeros_index = np.where(shape == 0)
        new_shape[zeros_index] = np.array(data.shape)[zeros_index]
    return (np.reshape(data, new_shape),)


def _flatten(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    (x,) = _arity(inputs, 1)
    i = a["axis"]
    new_shape = (1, -1) if i == 0 else (np.prod(x.shape[:i]).astype(int), -1)
    return (x.reshape(new_shape),)


def _transpose(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    (data,) = _arity(inputs, 1)
    perm = a["perm"] or None
    if perm is None:
        return (np.transpose(data),)
    if len(perm) != data.ndim:
        return_failure()
    return (np.transpose(data, axes=perm),)


def _expand(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    data, shape = _arity(inputs, 2)
    return (data * np.ones(shape, dtype=data.dtype),)


def _tile(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    x, repeats = _arity(inputs, 2)
    return (np.tile(x, repeats),)


def _constant_of_shape(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    (shape,) = _arity(inputs, 1)
    value = a["value"]
    if value is None:
        fill: Any = np.array(0, dtype=np.float32)
    else:
        if value.dtype not in _DTYPES:
            raise NotHandled("value dtype")
        if value.size != 1:
            return_failure()
        fill = value.flat[0]
    return (np.full(tuple(shape), fill),)


def _range(_v: int | None, _a: dict[str, Any], inputs: Inputs) -> Result:
    start, limit, delta = _arity(inputs, 3)
    if start.dtype == np.float16:
        raise NotHandled("float16 Range (stash_type)")
    return (np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype),)


def _trilu(_v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
    x, k = _arity(inputs, 1, 2)
    k = 0 if k is None else k.item()
    if a["upper"]:
        return (np.triu(x, k),)
    return (np.tril(x, k).astype(x.dtype),)


# ---------------------------------------------------------------------------- reductions
def _reduce(f: Callable[..., Any], axes_input_since: int, bool_keepdims: bool) -> Callable[..., Result]:
    """ReduceProd and ReduceSum: ``axes`` an attribute before ``axes_input_since``, an
    input from then on (``bool_keepdims``: that version compares keepdims with 0 first)."""

    def run_reduce(v: int | None, a: dict[str, Any], inputs: Inputs) -> Result:
        keepdims = a["keepdims"]
        if v is not None and v < axes_input_since:
            (data,) = _arity(inputs, 1)
            axes = tuple(a["axes"]) if a["axes"] else None
        else:
            data, given = _arity(inputs, 1, 2)
            axes = _handle_axes(given, a["noop_with_empty_axes"])
            if bool_keepdims:
                keepdims = keepdims != 0
        return (f(data, axis=axes, keepdims=keepdims, dtype=data.dtype),)

    return run_reduce


def _handle_axes(axes: np.ndarray | None, noop_with_empty_axes: int) -> Any:
    """The axes input as the reference's reductions read it."""
    if axes is None:
        return () if noop_with_empty_axes else None
    if axes.ndim == 0:
        return int(axes)
    if 0 in axes.shape:
        return () if noop_with_empty_axes else None
    return tuple(axes.ravel().tolist())


def _reduce_attrs(axes_input_since: int) -> Callable[[int | None], dict[str, Any]]:
    def attrs(v: int | None) -> dict[str, Any]:
        if v is not None and v < axes_input_since:
            return {"axes": None, "keepdims": 1}
        return {"keepdims": 1, "noop_with_empty_axes": 0}

    return attrs


OPS: dict[str, _Op] = {
    "Add": _Op(_binary_num(np.add)),
    "Sub": _Op(_binary_num(np.subtract)),
    "Mul": _Op(_binary_num(np.multiply)),
    "Div": _Op(_binary_num(_div)),
    "Mod": _Op(_mod, attrs=lambda _v: {"fmod": 0}),
    "Pow": _Op(_pow),
    "Min": _Op(_min_max(np.minimum)),
    "Max": _Op(_min_max(np.maximum)),
    "Equal": _Op(_compare(np.equal)),
    "Less": _Op(_compare(np.less)),
    "LessOrEqual": _Op(_compare(np.less_equal)),
    "Greater": _Op(_compare(np.greater)),
    "GreaterOrEqual": _Op(_compare(np.greater_equal)),
    "And": _Op(_compare(np.logical_and)),
    "Or": _Op(_compare(np.logical_or)),
    "Xor": _Op(_compare(np.logical_xor)),
    "Not": _Op(_not),
    "Neg": _Op(_unary_num(np.negative)),
    "Abs": _Op(_unary_num(np.absolute)),
    "Floor": _Op(_unary_num(np.floor)),
    "Ceil": _Op(_unary_num(np.ceil)),
    "Sqrt": _Op(_unary_num(lambda x: np.sqrt(x).astype(x.dtype))),
    "Identity": _Op(_identity),
    "Where": _Op(_where),
    "Cast": _Op(
        _cast,
        versions=(1, 19, 24),
        attrs=lambda v: {"to": ...} | ({"saturate": 1} if v >= 19 else {}) | ({"round_mode": "up"} if v >= 24 else {}),
    ),
    "CastLike": _Op(_cast_like, versions=(15, 19), attrs=lambda v: {"saturate": 1} if v >= 19 else {}),
    "Concat": _Op(_concat, attrs=lambda _v: {"axis": ...}),
    "Gather": _Op(_gather, attrs=lambda _v: {"axis": 0}),
    "GatherElements": _Op(_gather_elements, attrs=lambda _v: {"axis": 0}),
    "Unsqueeze": _Op(_unsqueeze, versions=(1, 11, 13), attrs=lambda v: {"axes": ...} if v < 13 else {}),
    "Squeeze": _Op(_squeeze, versions=(1, 11, 13), attrs=lambda v: {"axes": None} if v < 13 else {}),
    "Slice": _Op(_slice, versions=(1, 10), attrs=lambda v: {"starts": ..., "ends": ..., "axes": None} if v < 10 else {}),
    "Reshape": _Op(_reshape, versions=(5, 14), attrs=lambda v: {"allowzero": 0} if v >= 14 else {}),
    "Flatten": _Op(_flatten, attrs=lambda _v: {"axis": 1}),
    "Transpose": _Op(_transpose, attrs=lambda _v: {"perm": None}),
    "Expand": _Op(_expand),
    "Tile": _Op(_tile),
    "ConstantOfShape": _Op(_constant_of_shape, attrs=lambda _v: {"value": None}),
    "Range": _Op(_range, attrs=lambda _v: {"stash_type": 1}),
    "Trilu": _Op(_trilu, attrs=lambda _v: {"upper": 1}),
    "ReduceProd": _Op(_reduce(np.prod, 18, True), versions=(1, 18), attrs=_reduce_attrs(18)),
    "ReduceSum": _Op(_reduce(np.sum, 13, False), versions=(1, 13), attrs=_reduce_attrs(13)),
}
