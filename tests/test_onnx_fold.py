"""The numpy op table that folds load-time shape arithmetic (``loaders/onnx_fold.py``)
against ONNX's reference implementation, which the loader used before.

Per op, over generated inputs and attributes (broadcasting, negative and out-of-range
axes, empty tensors, int64 extremes, NaN, the opsets where attributes became inputs):
where the table gives a result, the reference gives the same dtype, shape and bytes;
where the table says the op fails, the reference raises too; only ``NotHandled`` leaves
a call to the reference. Typical calls (one dtype, well-formed attributes) must be
handled by the table, so that the properties cannot pass by handing everything over.
Then the samples: loading them never imports ``onnx.reference``, and gives the same
graph as folding everything with the reference.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import helper

from remat_cli.loaders import onnx_fold
from remat_cli.loaders.onnx_shapes import _run_reference

TYPICAL = [np.int64, np.int32, np.float32, np.float64]
ALL = [*TYPICAL, np.bool_, np.uint8, np.int8, np.float16]
FEW = settings(max_examples=40, deadline=None)


# ---------------------------------------------------------------------------- the check
def _compare(nd: Any, inputs: list[Any], opset: int) -> str:
    """'result', 'failed' or 'not handled'; asserts the table agrees with the reference."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ref = _run_reference(nd, inputs, opset, {})
    try:
        mine = onnx_fold.run(nd, inputs, opset)
    except onnx_fold.NotHandled:
        return "not handled"
    if mine is None:
        assert ref is None, f"{nd.op_type}: the table fails where the reference gives {ref!r}"
        return "failed"
    assert ref is not None, f"{nd.op_type}: the table gives {mine!r} where the reference fails"
    assert len(mine) == len(ref)
    for a, b in zip(mine, ref):
        b = np.asarray(b)
        assert a.dtype == b.dtype, (nd.op_type, a.dtype, b.dtype)
        assert a.shape == b.shape, (nd.op_type, a.shape, b.shape)
        assert a.tobytes() == b.tobytes(), (nd.op_type, a, b)
    return "result"


def _node(op: str, n_inputs: int | list[str], **attrs: Any) -> onnx.NodeProto:
    names = n_inputs if isinstance(n_inputs, list) else [f"x{i}" for i in range(n_inputs)]
    nd = helper.make_node(op, names, ["y"], **{k: v for k, v in attrs.items() if not isinstance(v, list)})
    for key, value in attrs.items():  # lists, empty ones too, as INTS
        if isinstance(value, list):
            nd.attribute.append(helper.make_attribute(key, value, attr_type=onnx.AttributeProto.INTS))
    return nd


def _elements(dtype: Any) -> st.SearchStrategy:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        info = np.iinfo(dt)
        small = st.integers(max(-5, int(info.min)), min(5, int(info.max)))
        return st.one_of(small, small, st.sampled_from([int(info.min), int(info.max), int(info.min) + 1, int(info.max) - 1]))
    return st.one_of(st.integers(-5, 5).map(float), st.floats(width=dt.itemsize * 8, allow_nan=True, allow_infinity=True))


def _array(dtype: Any, shape: tuple[int, ...]) -> st.SearchStrategy:
    return hnp.arrays(np.dtype(dtype), shape, elements=_elements(dtype))


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)


# ---------------------------------------------------------------------------- elementwise
BINARY = ["Add", "Sub", "Mul", "Div", "Mod", "Pow", "Min", "Max", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]
LOGICAL = ["And", "Or", "Xor"]


@FEW
@given(st.data())
def test_binary_ops_equal_the_reference(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(BINARY + LOGICAL))
    dtype = data.draw(st.sampled_from([np.bool_] if op in LOGICAL else ALL))
    other = dtype if data.draw(st.integers(0, 5)) else data.draw(st.sampled_from(ALL))
    if data.draw(st.integers(0, 6)):
        sa, sb = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    else:  # maybe not broadcastable
        sa, sb = data.draw(shapes), data.draw(shapes)
    a, b = data.draw(_array(dtype, sa)), data.draw(_array(other, sb))
    attrs = {"fmod": data.draw(st.integers(0, 1))} if op == "Mod" and data.draw(st.booleans()) else {}
    opset = data.draw(st.sampled_from([13, 17, 20]))
    outcome = _compare(_node(op, 2, **attrs), [a, b], opset)
    if other is dtype and _broadcast(a.shape, b.shape) and (dtype in TYPICAL or op in LOGICAL) and op != "Pow":
        assert outcome == "result", (op, dtype, outcome)


def _broadcast(*shapes_: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(*shapes_)
    except ValueError:
        return False
    return True


@FEW
@given(st.data())
def test_variadic_min_max_equal_the_reference(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(["Min", "Max"]))
    dtype = data.draw(st.sampled_from(TYPICAL))
    k = data.draw(st.integers(1, 4))
    ins = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=k, max_dims=3, max_side=3)).input_shapes
    arrays = [data.draw(_array(dtype, s)) for s in ins]
    assert _compare(_node(op, k), arrays, 18) == "result"


UNARY = ["Neg", "Abs", "Floor", "Ceil", "Sqrt", "Not", "Identity"]


@FEW
@given(st.data())
def test_unary_ops_equal_the_reference(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(UNARY))
    dtype = data.draw(st.sampled_from(ALL))
    x = data.draw(_array(dtype, data.draw(shapes)))
    outcome = _compare(_node(op, 1), [x], 17)
    if (op == "Not" and dtype is np.bool_) or (op not in ("Not",) and dtype in (np.float32, np.float64)):
        assert outcome == "result"


@FEW
@given(st.data())
def test_where_equals_the_reference(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(ALL))
    sc, sx, sy = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3)).input_shapes
    cond = data.draw(_array(np.bool_, sc))
    x, y = data.draw(_array(dtype, sx)), data.draw(_array(dtype, sy))
    assert _compare(_node("Where", 3), [cond, x, y], 16) == "result"


ELEM_TYPES = [1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 16]  # 16 (bfloat16) is left to the reference


@FEW
@given(st.data())
def test_cast_and_cast_like_equal_the_reference(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(ALL))
    x = data.draw(_array(dtype, data.draw(shapes)))
    to = data.draw(st.sampled_from(ELEM_TYPES))
    opset = data.draw(st.sampled_from([9, 13, 19, 21, 24]))
    if data.draw(st.booleans()):
        attrs: dict[str, Any] = {"to": to}
        if opset >= 19 and data.draw(st.booleans()):
            attrs["saturate"] = data.draw(st.integers(0, 1))
        outcome = _compare(_node("Cast", 1, **attrs), [x], opset)
        if to != 16:
            assert outcome == "result"
    else:
        like = np.zeros((1,), dtype=helper.tensor_dtype_to_np_dtype(to)) if to != 16 else np.zeros(1, np.float32)
        outcome = _compare(_node("CastLike", 2), [x, like], max(opset, 15))
        assert outcome == "result"


# ---------------------------------------------------------------------------- shapes
@FEW
@given(st.data())
def test_concat_equals_the_reference(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(TYPICAL))
    base = data.draw(shapes)
    rank = len(base)
    axis = data.draw(st.integers(-rank - 1, rank))
    k = data.draw(st.integers(1, 3))
    arrays = []
    for _ in range(k):
        shape = list(base)
        if 0 <= axis % max(rank, 1) < rank and rank:
            shape[axis % rank] = data.draw(st.integers(0, 3))
        arrays.append(data.draw(_array(dtype, tuple(shape))))
    outcome = _compare(_node("Concat", k, axis=axis), arrays, 13)
    if rank and -rank <= axis < rank:
        assert outcome == "result"
    else:
        assert outcome == "failed"


@FEW
@given(st.data())
def test_gather_equals_the_reference(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(ALL))
    x = data.draw(_array(dtype, data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))))
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim)) if x.ndim else 0
    n = x.shape[axis] if -x.ndim <= axis < x.ndim else 1
    idx_dtype = data.draw(st.sampled_from([np.int64, np.int32]))
    indices = data.draw(hnp.arrays(idx_dtype, data.draw(shapes), elements=st.integers(-n - 1, n)))
    attrs = {"axis": axis} if axis or data.draw(st.booleans()) else {}
    outcome = _compare(_node("Gather", 2, **attrs), [x, indices], 13)
    assert outcome in ("result", "failed")
    if x.ndim and -x.ndim <= axis < x.ndim and ((indices >= -n) & (indices < n)).all() and n:
        assert outcome == "result"


@FEW
@given(st.data())
def test_gather_elements_equals_the_reference(data: st.DataObject) -> None:
    rank = data.draw(st.integers(1, 3))
    dshape = data.draw(hnp.array_shapes(min_dims=rank, max_dims=rank, min_side=1, max_side=3))
    axis = data.draw(st.integers(-rank, rank - 1))
    ishape = list(dshape)
    ishape[axis] = data.draw(st.integers(0, 4))
    if not data.draw(st.integers(0, 4)):  # other dims differ: the reference fails
        ishape = list(data.draw(hnp.array_shapes(min_dims=rank, max_dims=rank, min_side=1, max_side=3)))
    x = data.draw(_array(np.int64, dshape))
    n = dshape[axis]
    indices = data.draw(hnp.arrays(np.int64, tuple(ishape), elements=st.integers(-n, n - 1)))
    assert _compare(_node("GatherElements", 2, axis=axis), [x, indices], 13) != "not handled"


def test_gather_elements_fails_where_the_reference_fails_on_bert() -> None:
    """BERT's token_type_ids slice (1, 512) -> (1, 128) along axis 1: the reference's
    np.choose raises, so the table fails too (the graph keeps that value unknown)."""
    x = np.arange(512, dtype=np.int64).reshape(1, 512)
    indices = np.arange(128, dtype=np.int64).reshape(1, 128)
    assert _compare(_node("GatherElements", 2, axis=1), [x, indices], 20) == "failed"


@FEW
@given(st.data())
def test_unsqueeze_and_squeeze_equal_the_reference(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(["Unsqueeze", "Squeeze"]))
    opset = data.draw(st.sampled_from([11, 13, 21]))
    x = data.draw(_array(np.int64, data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=2))))
    r = x.ndim + (1 if op == "Unsqueeze" else 0)
    axes = data.draw(st.lists(st.integers(-r - 1, r), min_size=0 if op == "Squeeze" else 1, max_size=3))
    absent = op == "Squeeze" and data.draw(st.booleans())
    if opset < 13:
        nd = _node(op, 1, **({} if absent else {"axes": axes}))
        ins = [x]
    else:
        nd = _node(op, 1 if absent else 2)
        ins = [x] if absent else [x, np.array(axes, dtype=np.int64)]
    outcome = _compare(nd, ins, opset)
    assert outcome != "not handled" or (opset < 13 and op == "Unsqueeze" and not axes)


@FEW
@given(st.data())
def test_slice_equals_the_reference(data: st.DataObject) -> None:
    x = data.draw(_array(np.int64, data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))))
    k = data.draw(st.integers(1, x.ndim))
    bound = st.one_of(st.integers(-6, 6), st.sampled_from([-(2**63), 2**63 - 1, -(2**31), 2**31 - 1]))
    starts = data.draw(st.lists(bound, min_size=k, max_size=k))
    ends = data.draw(st.lists(bound, min_size=k, max_size=k))
    axes = data.draw(st.none() | st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=k, max_size=k, unique=True))
    steps = data.draw(st.none() | st.lists(st.sampled_from([-3, -1, 1, 2, 2**62]), min_size=k, max_size=k))
    opset = data.draw(st.sampled_from([9, 10, 13]))
    if opset < 10:
        attrs: dict[str, Any] = {"starts": starts, "ends": ends}
        if axes is not None:
            attrs["axes"] = axes
        outcome = _compare(_node("Slice", 1, **attrs), [x], opset)
    else:
        arr = [np.array(v, dtype=np.int64) for v in (starts, ends)]
        ins: list[Any] = [x, *arr]
        names = ["x", "s", "e"]
        if axes is not None or steps is not None:
            ins.append(None if axes is None else np.array(axes, dtype=np.int64))
            names.append("" if axes is None else "a")
        if steps is not None:
            ins.append(np.array(steps, dtype=np.int64))
            names.append("t")
        outcome = _compare(_node("Slice", names), ins, opset)
    assert outcome == "result"


def test_slice_with_a_zero_step_fails_as_in_the_reference() -> None:
    x = np.arange(6, dtype=np.int64)
    ins = [x, np.array([0]), np.array([6]), np.array([0]), np.array([0])]
    assert _compare(_node("Slice", 5), ins, 13) == "failed"


@FEW
@given(st.data())
def test_reshape_and_flatten_equal_the_reference(data: st.DataObject) -> None:
    x = data.draw(_array(np.float32, data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))))
    if data.draw(st.booleans()):
        opset = data.draw(st.sampled_from([4, 5, 13, 14, 21]))  # 4: no implementation in the reference
        target = list(x.shape)
        data.draw(st.randoms()).shuffle(target)
        target = [d for d in target]
        if target and data.draw(st.booleans()):
            target[data.draw(st.integers(0, len(target) - 1))] = -1
        if target and data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(target) - 1))
            target[i] = 0
        attrs = {"allowzero": data.draw(st.integers(0, 1))} if opset >= 14 and data.draw(st.booleans()) else {}
        outcome = _compare(_node("Reshape", 2, **attrs), [x, np.array(target, dtype=np.int64)], opset)
        assert outcome in ("result", "failed")
    else:
        axis = data.draw(st.integers(-x.ndim - 1, x.ndim + 1))
        attrs = {"axis": axis} if data.draw(st.booleans()) else {}
        outcome = _compare(_node("Flatten", 1, **attrs), [x], 13)
        assert outcome in ("result", "failed")


@FEW
@given(st.data())
def test_transpose_expand_tile_equal_the_reference(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(["Transpose", "Expand", "Tile"]))
    x = data.draw(_array(np.int64, data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))))
    if op == "Transpose":
        perm = data.draw(st.permutations(list(range(x.ndim))))
        if not data.draw(st.integers(0, 5)):
            perm = perm + [0]
        attrs = {"perm": perm} if data.draw(st.booleans()) else {}
        outcome = _compare(_node(op, 1, **attrs), [x], 13)
        assert outcome == ("failed" if len(perm) != x.ndim and attrs and perm else "result")
    elif op == "Expand":
        target = data.draw(hnp.broadcastable_shapes(x.shape, max_dims=4, max_side=3))
        outcome = _compare(_node(op, 2), [x, np.array(target, dtype=np.int64)], 13)
        assert outcome == "result"
    else:
        repeats = data.draw(st.lists(st.integers(0, 2), min_size=x.ndim, max_size=x.ndim))
        outcome = _compare(_node(op, 2), [x, np.array(repeats, dtype=np.int64)], 13)
        assert outcome == "result"


@FEW
@given(st.data())
def test_constant_of_shape_and_range_equal_the_reference(data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        shape = data.draw(st.lists(st.integers(0, 3), max_size=3))
        dtype = data.draw(st.sampled_from(ALL))
        value = data.draw(st.none() | _array(dtype, (1,)))
        attrs = {} if value is None else {"value": onnx.numpy_helper.from_array(value)}
        outcome = _compare(_node("ConstantOfShape", 1, **attrs), [np.array(shape, dtype=np.int64)], 20)
        assert outcome == "result"
    else:
        dtype = data.draw(st.sampled_from(TYPICAL))
        start = data.draw(st.integers(-20, 20))
        delta = data.draw(st.integers(-4, 4))
        limit = start + delta * data.draw(st.integers(-2, 12)) + data.draw(st.integers(-1, 1))
        ins = [np.array(v, dtype=dtype) for v in (start, limit, delta)]
        outcome = _compare(_node("Range", 3), ins, 11)
        assert outcome == ("failed" if delta == 0 else "result")


@FEW
@given(st.data())
def test_reductions_and_trilu_equal_the_reference(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(["ReduceProd", "ReduceSum", "Trilu"]))
    dtype = data.draw(st.sampled_from(ALL))
    if op == "Trilu":
        x = data.draw(_array(dtype, data.draw(hnp.array_shapes(min_dims=2, max_dims=3, min_side=0, max_side=4))))
        k = data.draw(st.none() | st.integers(-5, 5))
        attrs = {"upper": data.draw(st.integers(0, 1))} if data.draw(st.booleans()) else {}
        ins = [x] if k is None else [x, np.array(k, dtype=np.int64)]
        assert _compare(_node(op, len(ins), **attrs), ins, 14) == "result"
        return
    x = data.draw(_array(dtype, data.draw(shapes)))
    axes = data.draw(st.none() | st.lists(st.integers(-x.ndim - 1, x.ndim), max_size=3))
    attrs = {"keepdims": data.draw(st.integers(0, 1))} if data.draw(st.booleans()) else {}
    opset = data.draw(st.sampled_from([11, 13, 18]))
    if opset < (18 if op == "ReduceProd" else 13):
        if axes is not None:
            attrs["axes"] = axes
        outcome = _compare(_node(op, 1, **attrs), [x], opset)
    else:
        if data.draw(st.booleans()):
            attrs["noop_with_empty_axes"] = data.draw(st.integers(0, 1))
        ins = [x] if axes is None else [x, np.array(axes, dtype=np.int64)]
        outcome = _compare(_node(op, len(ins), **attrs), ins, opset)
    valid = axes is None or (all(-x.ndim <= i < x.ndim for i in axes) and len({i % max(x.ndim, 1) for i in axes}) == len(axes))
    if valid and dtype in TYPICAL:
        assert outcome == "result", (op, outcome)


def test_ops_outside_the_table_and_odd_calls_go_to_the_reference() -> None:
    x = np.arange(4, dtype=np.int64)
    with pytest.raises(onnx_fold.NotHandled):
        onnx_fold.run(_node("CumSum", 2), [x, np.array(0)], 14)
    with pytest.raises(onnx_fold.NotHandled):  # an attribute Add does not take
        onnx_fold.run(_node("Add", 2, alpha=1.0), [x, x], 17)
    with pytest.raises(onnx_fold.NotHandled):  # strings
        onnx_fold.run(_node("Identity", 1), [np.array(["a"])], 17)
    bad = _node("Cast", 1, to=7)  # an attribute string that is not UTF-8 (a hostile file)
    bad.attribute.append(helper.make_attribute("round_mode", b"\xff\xfe"))
    with pytest.raises(onnx_fold.NotHandled):
        onnx_fold.run(bad, [x], 24)
    assert _run_reference(bad, [x], 24, {}) is None  # ... which the reference refuses
    odd = _node("Gather", 2)  # an attribute of another type than the spec's
    odd.attribute.append(helper.make_attribute("axis", [0]))
    with pytest.raises(onnx_fold.NotHandled):
        onnx_fold.run(odd, [x, np.array(1)], 13)


def test_ops_left_to_the_reference_give_no_numpy_warnings() -> None:
    """Log of 0 (outside the table) is -inf, as before, without numpy's divide warning."""
    from remat_cli.loaders.onnx_shapes import _run_op

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _run_op(_node("Log", 1), [np.array([0.0, 1.0], dtype=np.float32)], 17, {})
    assert out is not None and np.array_equal(out[0], np.array([-np.inf, 0.0], dtype=np.float32))


# ---------------------------------------------------------------------------- the samples
def test_loading_the_samples_never_imports_onnx_reference() -> None:
    code = (
        "import sys\n"
        "from remat_cli.loaders import LoadOptions, load_graph\n"
        "for name in ('bert', 'gpt2', 'mobilenet_v2', 'resnet18', 'unet', 'vit_b16'):\n"
        "    load_graph(f'sample_graphs/{name}.onnx', LoadOptions(dims=(('batch', 2), ('sequence', 16)), strict_dims=False))\n"
        "print(sorted(m for m in sys.modules if m.startswith('onnx.reference')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_samples_fold_the_same_as_with_the_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from remat_cli.loaders import LoadOptions, load_graph

    options = LoadOptions(dims=(("batch", 2), ("sequence", 16)), strict_dims=False)
    table = load_graph(f"sample_graphs/{name}.onnx", options)

    def nothing_handled(*_a: Any) -> Any:
        raise onnx_fold.NotHandled("test")

    monkeypatch.setattr(onnx_fold, "run", nothing_handled)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = load_graph(f"sample_graphs/{name}.onnx", options)
    assert table.sha256 == reference.sha256
    assert table.ids == reference.ids and table.fixed_mem == reference.fixed_mem and table.lb == reference.lb
    assert np.array_equal(table.mem, reference.mem) and np.array_equal(table.cost, reference.cost)
    assert table.meta == reference.meta


@pytest.mark.parametrize("dtype", [*ALL, np.uint16, np.int16, np.uint32, np.uint64, np.longlong, np.intc, np.str_, np.object_])
def test_element_types_of_results_are_onnx_helpers(dtype: Any) -> None:
    """The loader's dtype -> ONNX element type shortcut gives onnx.helper's answer."""
    from remat_cli.loaders.onnx_shapes import _elem_type

    try:
        expected = int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except Exception:  # noqa: BLE001 - onnx has no element type for it: neither may the shortcut
        with pytest.raises(Exception):  # noqa: B017
            _elem_type(np.dtype(dtype))
        return
    assert _elem_type(np.dtype(dtype)) == expected


# ---------------------------------------------------------------------------- whole models
def _shape_model(opset: int, blocks: list[str]) -> onnx.ModelProto:
    """A model whose activations are reshaped, sliced and masked through shape arithmetic
    on a symbolic ``[batch, seq, 8]`` input, as exporters write it (attribute forms of
    Unsqueeze, Slice and ReduceProd below the opsets that made them inputs)."""
    from tests._onnx_models import init, model, tensor

    nodes: list[onnx.NodeProto] = []
    inits = [init("i0", (), np.int64, 0), init("i1", (), np.int64, 1), init("two", (1,), np.int64, [2]), init("m1", (1,), np.int64, [-1])]
    inits += [init("ax0", (1,), np.int64, [0]), init("ax1", (1,), np.int64, [1]), init("one_f", (), np.float32, 1.0)]
    outputs = []

    def unsqueeze(x: str, y: str) -> None:
        if opset < 13:
            nodes.append(helper.make_node("Unsqueeze", [x], [y], axes=[0]))
        else:
            nodes.append(helper.make_node("Unsqueeze", [x, "ax0"], [y]))

    nodes += [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["b"], axis=0)]
    nodes += [helper.make_node("Gather", ["s", "i1"], ["t"], axis=0)]
    unsqueeze("b", "bu")
    unsqueeze("t", "tu")
    if "heads" in blocks:  # x.view(b, t, 2, -1).transpose(1, 2) * (1 / sqrt(head_dim))
        nodes += [helper.make_node("Concat", ["bu", "tu", "two", "m1"], ["hs"], axis=0), helper.make_node("Reshape", ["x", "hs"], ["h"])]
        nodes += [helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 2, 1, 3]), helper.make_node("Shape", ["h"], ["hsh"])]
        nodes += [helper.make_node("Gather", ["hsh", "m1"], ["hd"], axis=0), helper.make_node("Cast", ["hd"], ["hdf"], to=1)]
        nodes += [helper.make_node("Sqrt", ["hdf"], ["sq"]), helper.make_node("Div", ["one_f", "sq"], ["scale"])]
        nodes += [helper.make_node("Mul", ["ht", "scale"], ["heads"])]
        outputs.append(tensor("heads", None))
    if "half" in blocks:  # x[:, : (b * t) // (2 * b)] through integer Div and Slice
        nodes += [helper.make_node("Mul", ["b", "t"], ["bt"]), helper.make_node("Mul", ["b", "two"], ["b2"])]
        nodes += [helper.make_node("Div", ["bt", "b2"], ["half"]), helper.make_node("Mod", ["bt", "two"], ["rem"])]
        nodes += [helper.make_node("Add", ["half", "rem"], ["end"])]
        nodes += [helper.make_node("Slice", ["x", "ax0", "end", "ax1"], ["sl"]), helper.make_node("Relu", ["sl"], ["half_out"])]
        outputs.append(tensor("half_out", None))
    if "mask" in blocks:  # a causal mask from Range, Where and Expand
        nodes += [helper.make_node("Range", ["i0", "t", "i1"], ["r"])]
        unsqueeze("r", "ru")
        nodes += [
            helper.make_node("Unsqueeze", ["r"], ["rc"], axes=[1]) if opset < 13 else helper.make_node("Unsqueeze", ["r", "ax1"], ["rc"])
        ]
        nodes += [helper.make_node("Less", ["ru", "rc"], ["lt"]), helper.make_node("Cast", ["lt"], ["ltf"], to=1)]
        nodes += [helper.make_node("Concat", ["tu", "tu"], ["tt"], axis=0), helper.make_node("Expand", ["ltf", "tt"], ["mk"])]
        nodes += [helper.make_node("MatMul", ["mk", "x"], ["masked"])]
        outputs.append(tensor("masked", None))
    if "numel" in blocks:  # x.flatten(1) sized through ReduceProd of the shape
        if opset < 18:  # axes an attribute, then an input
            nodes += [helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1, axes=[0])]
        else:
            nodes += [helper.make_node("ReduceProd", ["s", "ax0"], ["n"], keepdims=1)]
        nodes += [helper.make_node("Div", ["n", "bu"], ["per"]), helper.make_node("Concat", ["bu", "per"], ["fs"], axis=0)]
        nodes += [helper.make_node("Reshape", ["x", "fs"], ["flat"]), helper.make_node("Sigmoid", ["flat"], ["numel_out"])]
        outputs.append(tensor("numel_out", None))
    return model(nodes, [tensor("x", ["batch", "seq", 8])], outputs, inits, opset=opset)


@settings(max_examples=15, deadline=None)
@given(
    opset=st.sampled_from([11, 13, 17, 18, 20]),
    blocks=st.lists(st.sampled_from(["heads", "half", "mask", "numel"]), min_size=1, max_size=4, unique=True),
    batch=st.integers(1, 9),
    seq=st.integers(1, 40),
)
def test_models_load_to_the_same_graph_as_with_the_reference(opset: int, blocks: list[str], batch: int, seq: int) -> None:
    """Generated shape-arithmetic models: the forward graph, its facts and meta (folded
    counts included), and the values folded are the same whether the table or
    ``onnx.reference`` evaluates the ops."""
    import dataclasses

    from remat_cli.loaders import onnx as onnx_loader

    def read(m: onnx.ModelProto) -> tuple[Any, Any, list[str]]:
        said: list[str] = []
        copy = onnx.ModelProto()
        copy.CopyFrom(m)
        g, facts = onnx_loader.read_model(copy, dims={"batch": batch, "seq": seq}, warn=said.append)
        return g, facts, said

    m = _shape_model(opset, blocks)
    table = read(m)
    original = onnx_fold.run
    try:

        def nothing_handled(*_a: Any) -> Any:
            raise onnx_fold.NotHandled("test")

        onnx_fold.run = nothing_handled  # type: ignore[assignment]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = read(m)
    finally:
        onnx_fold.run = original  # type: ignore[assignment]
    (g1, f1, w1), (g2, f2, w2) = table, reference
    assert g1.sha256 == g2.sha256 and g1.meta == g2.meta and w1 == w2
    assert g1.ids == g2.ids and np.array_equal(g1.mem, g2.mem) and np.array_equal(g1.cost, g2.cost)
    for field in dataclasses.fields(f1):
        a, b = getattr(f1, field.name), getattr(f2, field.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, field.name
    assert g1.meta["info"]["folded"] and "Shape" not in g1.ops  # shape arithmetic did fold
