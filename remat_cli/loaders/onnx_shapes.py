"""Dimensions, shapes and load-time values of an ONNX model.

``--dim`` values are set on the model's symbolic dimensions (:func:`set_dims`), the
dimensions a file states are checked, and :func:`infer_shapes` gives every value its
element type and shape: ONNX shape inference with data propagation, then a pass in
topological order that evaluates small tensors computable at load time (shape
arithmetic, with the numpy ops of :mod:`.onnx_fold`, which compute what ONNX's reference
ops do) and re-infers the shapes still unknown.
:func:`foldable` says which such results become constants (fixed memory) instead of
nodes. Used by :mod:`remat_cli.loaders.onnx`; built on :mod:`remat_cli.loaders.onnx_file`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from remat_cli.errors import InputError
from remat_cli.graph import MAX_VALUE_BYTES
from remat_cli.loaders import onnx_fold
from remat_cli.loaders.onnx_file import CONTROL_FLOW, DEFAULT_DOMAINS, attributes, subgraphs, tensor_bytes, utf8
from remat_cli.units import shell_word

__all__ = [
    "RANDOM_OPS",
    "FOLD_LIMIT",
    "VALUE_LIMIT",
    "drop_weight_data",
    "set_dims",
    "check_declared_dims",
    "check_shapes",
    "check_unresolved",
    "infer_shapes",
    "foldable",
]

#: ops that draw random numbers: never folded into constants
RANDOM_OPS = frozenset(["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"])
#: integer results below this many bytes whose inputs are all known are folded (shape arithmetic)
FOLD_LIMIT = 64 * 1024


# ---------------------------------------------------------------------------- dims, shapes
def drop_weight_data(model) -> None:
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


def set_dims(g, dims: dict[str, int], source: str, strict: bool = True) -> dict[str, int]:
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
                d.dim_param = f"{utf8(inp.name)}.{axis}"
            names[d.dim_param] = None
    known = set(names)
    for vi in list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            known.update(d.dim_param for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param"))
    for key in dims:
        if strict and key not in known:
            have = ", ".join(sorted(utf8(n) for n in names)) if names else "none (every input dimension is fixed)"
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


def check_declared_dims(g, source: str) -> None:
    """Refuse the dimensions a file states that no tensor can have: a negative dimension
    anywhere, a zero dimension of a model input, or an initializer above MAX_VALUE_BYTES."""
    for t in g.initializer:
        for axis, d in enumerate(t.dims):
            if d < 0:
                raise InputError(f"{source}: initializer {utf8(t.name)!r}: dimension #{axis} is {d} (negative)")
        if tensor_bytes(t.data_type, tuple(t.dims)) > MAX_VALUE_BYTES:
            raise InputError(f"{source}: initializer {utf8(t.name)!r}: shape {list(t.dims)} is above {MAX_VALUE_BYTES} B (2**53)")
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
                    f"{source}: {what} {utf8(vi.name)!r}: dimension #{axis} is {d.dim_value} "
                    f"({'negative' if d.dim_value < 0 else 'zero: the input would be empty'})"
                )


def check_shapes(shapes, nodes_pb, source: str) -> None:
    """After inference: no value has a negative dimension or more than MAX_VALUE_BYTES."""

    def where(value: str) -> str:  # only for the message: the producer is looked up then
        made_by = next((nd for nd in nodes_pb for o in nd.output if o and o == value), None)
        if made_by is None:
            return f"value {value!r}"
        return f"value {value!r} (output of node {(utf8(made_by.name) or utf8(made_by.op_type))!r})"

    for value, (elem, dims) in shapes.items():
        if dims is None:
            continue
        for axis, d in enumerate(dims):
            if d < 0:
                raise InputError(f"{source}: {where(value)}: dimension #{axis} is {d} (negative)")
        if tensor_bytes(elem or 1, dims) > MAX_VALUE_BYTES:
            raise InputError(f"{source}: {where(value)}: shape {list(dims)} is above {MAX_VALUE_BYTES} B (2**53)")


def check_unresolved(graph_inputs, used: set[str], source: str) -> None:
    """Exit 2 naming every symbolic dimension of a used input that is still unset."""
    missing: dict[str, None] = {}
    for inp in graph_inputs:
        if inp.name not in used or not inp.type.HasField("tensor_type"):
            continue
        if not inp.type.tensor_type.HasField("shape"):
            raise InputError(
                f"{source}: input {utf8(inp.name)!r} has no shape in the file (not even its rank); remat needs the shapes of the model's inputs"
            )
        for d in inp.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                missing[utf8(d.dim_param)] = None  # (bytes where the file's name is not UTF-8)
    if missing:
        names = list(missing)
        example = " ".join(f"--dim {shell_word(f'{m}=1')}" for m in names)
        raise InputError(
            f"{source}: unresolved dimension{'s' if len(names) > 1 else ''} {', '.join(names)}: "
            f"set {'them' if len(names) > 1 else 'it'} with --dim, e.g. {example}"
        )


def infer_shapes(model, nodes_pb, order: list[int], trainable: set[str], source: str, warn: Callable[[str], None]):
    """Shapes of every value, and the values of small tensors computable at load time.

    ONNX shape inference (with data propagation) runs first on a copy without large
    weights (only their shapes matter). Its data propagation misses much shape arithmetic
    (``Div``, ``Where``, ``Range``, ``Expand``, …), so a second pass in topological order
    evaluates every small tensor whose inputs are all known (:func:`_run_op`: the op as
    ONNX's reference implementation computes it), and re-infers the shapes that are still
    unknown one node at a time, now with those values. Returns ``{name: (elem_type, dims or None)}`` (dims
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
            for _, sub in subgraphs(nd):
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
    """Evaluate small known tensors and re-infer unknown shapes, node by node (see infer_shapes)."""
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
                    a = attributes(nd)
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
            elem = _elem_type(arr.dtype)
        except Exception:
            elem = shapes.get(o, (1, None))[0]
        shapes[o] = (elem, tuple(int(d) for d in arr.shape))
        types.pop(o, None)
        if arr.size <= VALUE_LIMIT:
            values[o] = arr
    return True


#: numpy dtype (``dtype.str``) -> ONNX element type, as onnx.helper.np_dtype_to_tensor_dtype maps them
_ELEM_TYPES = {"<f4": 1, "|u1": 2, "|i1": 3, "<u2": 4, "<i2": 5, "<i4": 6, "<i8": 7, "|b1": 9, "<f2": 10, "<f8": 11, "<u4": 12, "<u8": 13}


def _elem_type(dtype: np.dtype) -> int:
    """The ONNX element type of a numpy dtype: onnx.helper's answer, without its per-call
    cost for the common types."""
    elem = _ELEM_TYPES.get(dtype.str)
    if elem is None:
        from onnx import helper

        elem = int(helper.np_dtype_to_tensor_dtype(dtype))
    return elem


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
    """Run one op: with :mod:`.onnx_fold`'s numpy table (the reference's results, without
    importing it), else with ONNX's reference implementation; None if it cannot."""
    try:
        return onnx_fold.run(nd, inputs, opset)
    except onnx_fold.NotHandled:
        return _run_reference(nd, inputs, opset, runners)


def _run_reference(nd, inputs: list[np.ndarray | None], opset: int, runners: dict[str, Any]):
    """Run one op with ONNX's reference implementation; None if it cannot."""
    try:
        from onnx.reference.ops import load_op

        cls = runners.get(nd.op_type)
        if cls is None:
            cls = load_op("", nd.op_type, opset)
            runners[nd.op_type] = cls
        inst = cls(nd, {"log": lambda *a, **k: None, "opsets": {"": opset}, "new_ops": None, "verbose": 0})
        with warnings.catch_warnings(), np.errstate(all="ignore"):  # its numpy warnings are no news to the user
            warnings.simplefilter("ignore")
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


def foldable(outs: list[str], shapes, values: dict[str, np.ndarray]) -> bool:
    """Small results computed at load time (shape arithmetic): folded into constants."""
    total = 0
    for o in outs:
        if o not in values:
            return False
        elem, shp = shapes.get(o, (0, None))
        if shp is None:
            return False
        total += tensor_bytes(elem, shp)
    return total <= FOLD_LIMIT
