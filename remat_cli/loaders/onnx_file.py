"""ONNX files as protobuf: parse, refuse what is unsafe or malformed, order the nodes.

The lowest layer of the ONNX loader (:mod:`remat_cli.loaders.onnx` reads the graph,
:mod:`remat_cli.loaders.onnx_shapes` finds shapes): parsing with every failure as one
line, external-data locations, the dimension limit, a topological order of the nodes,
the outer values control flow reads, the signs of an inference-mode export, and small
protobuf helpers (element sizes, attributes, subgraphs, names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from remat_cli.errors import InputError

__all__ = [
    "CONTROL_FLOW",
    "DEFAULT_DOMAINS",
    "BITS",
    "FLOAT_TYPES",
    "dtype_bits",
    "tensor_bytes",
    "attributes",
    "subgraphs",
    "utf8",
    "outer_names",
    "topological_order",
    "parse_model",
    "check_external_data",
    "check_dim_limit",
    "inference_export_signs",
]

CONTROL_FLOW = frozenset(["If", "Loop", "Scan"])
DEFAULT_DOMAINS = ("", "ai.onnx")

# element type -> bits (TensorProto.DataType)
BITS = {
    0: 32,
    1: 32,
    2: 8,
    3: 8,
    4: 16,
    5: 16,
    6: 32,
    7: 64,
    8: 64,
    9: 8,
    10: 16,
    11: 64,
    12: 32,
    13: 64,
    14: 64,
    15: 128,
    16: 16,
    17: 8,
    18: 8,
    19: 8,
    20: 8,
    21: 4,
    22: 4,
    23: 4,
    24: 8,
    25: 2,
    26: 2,
    27: 6,
    28: 6,
}
FLOAT_TYPES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16", 17: "float8", 18: "float8", 19: "float8", 20: "float8"}


def dtype_bits(elem_type: int) -> int:
    """Bits per element of an ONNX element type (32 when unknown)."""
    return BITS.get(int(elem_type), 32)


def tensor_bytes(elem_type: int, dims: tuple[int, ...]) -> int:
    """Bytes of a tensor of this element type and shape (sub-byte types rounded up)."""
    n = 1
    for d in dims:
        n *= d
    return (n * dtype_bits(elem_type) + 7) // 8


def parse_model(path: Path, data: bytes):
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
            if utf8(entry.key) != "location":
                continue
            loc = utf8(entry.value)  # (protobuf hands back bytes that are not UTF-8 as bytes)
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
                    f"{path}: tensor {utf8(tensor.name)!r}: external data location {loc!r} is outside the "
                    "model's folder (only relative paths below it are allowed)"
                )


def check_dim_limit(model, path: Path, max_dim: int) -> None:
    """Refuse a dimension stated in the file (inputs, outputs, value infos, initializers) above ``max_dim``."""
    from remat_cli.limits import LimitError

    def refuse(name: str, value: int) -> None:
        raise LimitError(
            f"{path}: tensor {name!r} has a dimension of {value}, more than the dimension limit {max_dim} (raise it with --max-dim)"
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


def inference_export_signs(model) -> list[str]:
    """What shows that ``model`` was exported in inference mode, in words (empty: none).

    A training-mode export keeps BatchNormalization's ``training_mode=1`` and its running
    statistics outputs, and Dropout with a true ``training_mode`` input; an inference
    export drops both (Dropout is often removed altogether, and with constant folding
    BatchNormalization is folded into the convolution before it, which no file shows).
    """
    bn = dropout = 0
    flags = {nd.input[2] for nd in model.graph.node if nd.op_type == "Dropout" and len(nd.input) > 2 and nd.input[2]}
    constants = {t.name: t for t in model.graph.initializer if t.name in flags}
    for nd in model.graph.node:  # (only the constants a Dropout reads as its training flag)
        if nd.op_type == "Constant" and nd.output and nd.output[0] in flags:
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


# ---------------------------------------------------------------------------- structure
def topological_order(nodes_pb, initializers, input_names: set[str], source: str) -> list[int]:
    """Node indices in an order where producers come first (the file's, when it is one)."""
    prod: dict[str, int] = {}
    for i, nd in enumerate(nodes_pb):
        for o in nd.output:
            if o:
                if o in prod:
                    raise InputError(
                        f"{source}: value {utf8(o)!r} is produced by two nodes ({_label(nodes_pb[prod[o]], prod[o])!r} and {_label(nd, i)!r})"
                    )
                prod[o] = i
    deps: list[list[int]] = []
    sorted_already = True
    for i, nd in enumerate(nodes_pb):
        names = [x for x in nd.input if x]
        if nd.op_type in CONTROL_FLOW:
            names += outer_names(nd)
        d = []
        for x in names:
            j = prod.get(x)
            if j is None:
                if x not in initializers and x not in input_names:
                    raise InputError(f"{source}: node {_label(nd, i)!r} reads {utf8(x)!r}, which no node, input or initializer defines")
                continue
            if j == i:
                raise InputError(f"{source}: node {_label(nd, i)!r} reads its own output (cycle)")
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
        raise InputError(f"{source}: the ONNX graph has a cycle through node {_label(nodes_pb[stuck], stuck)!r}")
    return order


def subgraphs(nd):
    import onnx

    for a in nd.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.name, a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            for sub in a.graphs:
                yield a.name, sub


def outer_names(nd) -> list[str]:
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
            for _, sub in subgraphs(sub_nd):
                visit(sub, defined)
            defined.update(o for o in sub_nd.output if o)
        for out in graph.output:  # a branch may return an outer value as it is
            if out.name and out.name not in defined:
                found[out.name] = None

    for _, sub in subgraphs(nd):
        visit(sub, set())
    return list(found)


def attributes(nd) -> dict[str, Any]:
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


def _label(nd: Any, i: int) -> str:
    """How an error names node ``i``: its name, else its op and index (as text)."""
    return utf8(nd.name) or f"{utf8(nd.op_type)}#{i}"


def utf8(text: str | bytes) -> str:
    """A name from the protobuf as text: protobuf hands back ``bytes`` for a string field
    that is not valid UTF-8; such bytes are decoded with U+FFFD in place of bad bytes."""
    return text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
