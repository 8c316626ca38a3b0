"""Read graph files of every supported format, detected by content (DESIGN §4).

Two explicit steps, and one call that composes them:

* :func:`read_file` reads what the file says: a :class:`Loaded` holding the graph as read
  (an ONNX model's forward graph; a JSON or twremat graph as given), the ONNX loader's
  per-node :class:`~remat_cli.training.ForwardFacts`, the signs of an inference-mode
  export, and the warnings it gave;
* :func:`build_graph` turns a :class:`Loaded` into the graph to schedule: attention and
  precision (ONNX), the training graph (:mod:`remat_cli.training`), sharding and a
  measured profile, then the input limits; :func:`other_variant` builds the other one
  of an ONNX model's training/inference pair, for ``remat info``;
* :func:`load_graph` is ``build_graph(read_file(path))``'s graph.

Warnings and notes are returned in the :class:`Loaded` and, when a ``warn`` / ``note``
callback is passed, also given to it as they happen. ``Graph.meta`` holds plain data only.
The format modules: :mod:`.onnx` (with :mod:`.onnx_shapes`), :mod:`.remat_json`,
:mod:`.nodelink`, :mod:`.twremat`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.limits import DEFAULT_LIMITS, LimitError, Limits, format_bytes, read_regular_file

if TYPE_CHECKING:
    from remat_cli.training import ForwardFacts

__all__ = [
    "LoadOptions",
    "Loaded",
    "load_graph",
    "read_file",
    "build_graph",
    "other_variant",
    "detect_format",
    "check_limits",
]

Say = Callable[[str], None]


@dataclass(frozen=True)
class LoadOptions:
    """How to turn a file into the graph to schedule (the CLI's shared graph options)."""

    dims: tuple[tuple[str, int], ...] = ()
    training: bool | None = None  # None: the format's default (ONNX: build it; JSON: as given)
    convention: str | None = None  # checkmate | autograd (None: the format's default)
    optimizer: str = "sgd"
    cost: str = "roofline"
    device: str = "a100"
    keep_views: bool = False
    strict_dims: bool = True  # a --dim the model lacks is an error (False: ignored, for batches)
    attention: str = "fused"  # fused | unfused: how exported attention is modelled (attention.py)
    limits: Limits = DEFAULT_LIMITS  # file size, node count, dimension and total size (limits.py)
    precision: str = "fp32"  # fp32 | bf16 | fp16 | amp (precision.py)
    world_size: int = 1  # data-parallel devices (sharding.py)
    shard: str = "none"  # none | optimizer | gradients | parameters (ZeRO stages 1-3)
    profile: str | None = None  # measured per-op times, a Chrome trace or node,seconds CSV (profile.py)


@dataclass(frozen=True, eq=False)
class Loaded:
    """What reading a file found (:func:`read_file`), or the graph built from it (:func:`build_graph`).

    ``path``: the file, as given; ``graph``: the graph; ``format``: ``onnx``, ``remat-json``, ``node-link`` or
    ``twremat``; ``facts``: the ONNX loader's per-node facts of a forward graph (None for
    other formats and for a training graph); ``export_signs``: what shows an ONNX model
    was exported in inference mode, in words; ``warnings`` / ``notes``: every message
    given so far, in order.
    """

    path: str
    graph: Graph
    format: str
    facts: ForwardFacts | None = None
    export_signs: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def detect_format(path: str | Path, data: bytes) -> str:
    """Name the format of ``data`` by its content (the suffix only breaks ties for binary files)."""
    path = Path(path)
    body = data[len(_BOM) :] if data.startswith(_BOM) else data
    start = _CONTENT.search(body)  # sniff after any amount of leading whitespace
    if start is None:
        raise InputError(f"{path}: the file is empty" if not body else f"{path}: the file holds only whitespace")
    head = body[start.start() : start.start() + 4096]
    if head[:1] in (b"{", b"["):
        return "json"
    text_head = head.decode("utf-8", errors="replace")
    first = next((ln.strip() for ln in text_head.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    if first.startswith("p remat2") or first.startswith("node ") or first.startswith("memlimit"):
        return "twremat"
    if path.suffix.lower() == ".onnx" or _looks_like_protobuf(data):
        return "onnx"
    if path.suffix.lower() == ".json":
        return "json"
    raise InputError(f"{path}: not a graph file remat reads (ONNX, remat JSON, node-link JSON, twremat text)")


_BOM = b"\xef\xbb\xbf"
_CONTENT = re.compile(rb"[^ \t\r\n\x0b\x0c]")  # the first byte that is not ASCII whitespace


def load_graph(path: str | Path, options: LoadOptions | None = None, *, warn: Say | None = None, note: Say | None = None) -> Graph:
    """Read ``path`` into the :class:`Graph` to schedule, by content, applying ``options``
    (:func:`read_file`, then :func:`build_graph`).

    Only regular files are read, up to ``options.limits.max_file_bytes``; the graph must
    keep within the node-count and total-size limits (:mod:`remat_cli.limits`). ``warn``
    and ``note`` receive the loader's warnings and notes as they happen.
    """
    options = options or LoadOptions()
    return build_graph(read_file(path, options, warn=warn), options, warn=warn, note=note).graph


def read_file(path: str | Path, options: LoadOptions | None = None, *, warn: Say | None = None) -> Loaded:
    """What the file at ``path`` says, detected by content: its graph as read and, for ONNX,
    the per-node facts and export-mode signs (:class:`Loaded`). No training graph yet."""
    options = options or LoadOptions()
    path = Path(path)
    limits = options.limits
    for key, value in options.dims:
        if value > limits.max_dim:
            raise LimitError(f"--dim {key}={value} is more than the dimension limit {limits.max_dim} (raise it with --max-dim)")
    data = read_regular_file(path, limits.max_file_bytes, "graph file")
    kind = detect_format(path, data)
    said, say = _collector(warn)
    if kind == "json":
        graph, kind = _load_json(path, data)
        return Loaded(str(path), graph, kind)
    if kind == "twremat":
        from remat_cli.loaders import twremat

        return Loaded(str(path), twremat.read(_text(path, data), source=str(path), name=path.stem), "twremat")
    onnx_loader = _onnx_module(path)
    graph, facts, signs = onnx_loader.read(path, data, options, say)
    return Loaded(str(path), graph, "onnx", facts=facts, export_signs=signs, warnings=tuple(said))


def build_graph(loaded: Loaded, options: LoadOptions | None = None, *, warn: Say | None = None, note: Say | None = None) -> Loaded:
    """The graph to schedule from what :func:`read_file` found, as ``options`` ask.

    ONNX: attention and precision, then the training graph unless ``--inference``; other
    formats: as given, or the training graph with ``--training``. Then sharding and a
    measured profile, and the input limits. The result's ``facts`` are the forward
    graph's (None once a training graph is built); its messages follow ``loaded``'s.
    """
    options = options or LoadOptions()
    path = Path(loaded.path)
    said, say = _collector(warn)
    said_notes, say_note = _collector(note)
    graph, facts = loaded.graph, loaded.facts
    if loaded.format == "onnx":
        onnx_loader = _onnx_module(path)
        graph, facts = onnx_loader.forward_graph(graph, facts, options)
        if options.training is None or bool(options.training):
            graph = onnx_loader.training_graph(graph, facts, loaded.export_signs, options, path, say)
            facts = None
    else:
        if getattr(options, "precision", "fp32") != "fp32":
            raise InputError(f"{path}: --precision {options.precision} needs an ONNX model (this graph states its sizes in bytes)")
        if options.training:
            graph = _training(graph, options, path)
    graph = _how_trained(graph, options, path, say, say_note)
    graph = check_limits(graph, options.limits, path)
    return replace(loaded, graph=graph, facts=facts, warnings=loaded.warnings + tuple(said), notes=loaded.notes + tuple(said_notes))


def other_variant(loaded: Loaded, options: LoadOptions | None = None) -> tuple[str, Graph] | None:
    """The other graph of an ONNX model's training/inference pair, named (``"inference"``
    or ``"training"``), as ``options`` would build it otherwise, sharding included; None
    for formats that are scheduled as given. Its warnings are not repeated."""
    if loaded.format != "onnx":
        return None
    options = options or LoadOptions()
    path = Path(loaded.path)
    onnx_loader = _onnx_module(path)
    fwd, facts = onnx_loader.forward_graph(loaded.graph, loaded.facts, options)
    if options.training is None or bool(options.training):
        label, other = "inference", fwd
    else:
        label, other = "training", onnx_loader.training_graph(fwd, facts, loaded.export_signs, options, path, lambda _m: None)
    return label, _sharded(other, options, path)


def _collector(callback: Say | None) -> tuple[list[str], Say]:
    """A list that records messages, and a function that records one and passes it on."""
    said: list[str] = []

    def say(message: str) -> None:
        said.append(message)
        if callback is not None:
            callback(message)

    return said, say


def _sharded(graph: Graph, options: LoadOptions, path: Path) -> Graph:
    """``graph`` with --world-size/--shard applied (sharding.py), when they are set."""
    world, shard = getattr(options, "world_size", 1), getattr(options, "shard", "none")
    if world != 1 or shard != "none":
        from remat_cli.sharding import apply_sharding

        graph = apply_sharding(graph, world, shard, str(path))
    return graph


def _how_trained(graph: Graph, options: LoadOptions, path: Path, warn: Say, note: Say) -> Graph:
    """Apply --world-size/--shard (sharding.py) and --profile (profile.py) to a loaded graph."""
    graph = _sharded(graph, options, path)
    if getattr(options, "profile", None):
        from remat_cli.profile import apply_profile

        graph, fact = apply_profile(graph, options.profile, max_bytes=options.limits.max_file_bytes, warn=warn)
        if fact.matched_nodes:
            from remat_cli.units import say

            note("profile: " + say(fact.phrase()))
    return graph


def check_limits(graph: Graph, limits: Limits, path: str | Path) -> Graph:
    """``graph`` if it keeps within ``limits`` (node count, total size), else :class:`LimitError`."""
    if graph.n > limits.max_nodes:
        raise LimitError(f"{path}: {graph.n} nodes is more than --max-nodes {limits.max_nodes} (raise it with --max-nodes)")
    total = int(graph.fixed_mem) + sum(int(x) for x in graph.mem.tolist()) + sum(int(x) for x in graph.workspace.tolist())
    if total > limits.max_total_bytes:
        raise LimitError(
            f"{path}: its sizes sum to {total} bytes, more than the {format_bytes(limits.max_total_bytes)} "
            "total size limit (raise it with --max-total-size)"
        )
    return graph


def _load_json(path: Path, data: bytes) -> tuple[Graph, str]:
    """A JSON graph and its format's name (remat-json or node-link)."""
    from remat_cli.loaders import nodelink, remat_json

    try:
        doc = json.loads(_text(path, data))  # NaN / Infinity reach the checks that name the node
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise InputError(f"{path}: the JSON is nested too deeply to be a graph") from None
    except ValueError as exc:  # an integer too long to convert
        raise InputError(f"{path}: not valid JSON: {str(exc).splitlines()[0]}") from None
    if isinstance(doc, dict) and doc.get("format") == remat_json.FORMAT:
        return remat_json.read(doc, source=str(path), name=path.stem), "remat-json"
    if isinstance(doc, dict) and doc.get("format") == "remat-plan":
        raise InputError(f"{path}: this is a plan file, not a graph (use it with `remat validate GRAPH PLAN`)")
    if nodelink.accepts(doc):
        return nodelink.read(doc, source=str(path), name=path.stem), "node-link"
    raise InputError(
        f"{path}: JSON of an unknown shape: expected a remat-graph document "
        '({"format": "remat-graph", "nodes": [...]}) or node-link JSON ({"nodes": [...], "links": [...]})'
    )


def _onnx_module(path: Path):  # noqa: ANN202 - the module, imported lazily (onnx is heavy)
    from remat_cli.loaders import onnx as onnx_loader

    return onnx_loader


def _training(graph: Graph, options: LoadOptions, path: Path) -> Graph:
    from remat_cli.training import build_training_graph

    if graph.is_training:
        return graph
    return build_training_graph(graph, convention=options.convention or "checkmate", optimizer=options.optimizer)


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (and not ONNX)") from None


def _looks_like_protobuf(data: bytes) -> bool:
    """ONNX ModelProto usually starts with field 1 (ir_version, varint): byte 0x08."""
    return data[:1] == b"\x08"
