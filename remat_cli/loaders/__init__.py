"""Read graph files of every supported format, detected by content (DESIGN §4).

``load_graph(path, options)`` is the one entry point: it detects the format, reads the
graph, and applies the transforms the options ask for (training graph, views, …).
"""

from __future__ import annotations

import dataclasses

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.limits import DEFAULT_LIMITS, LimitError, Limits, format_bytes, read_regular_file

__all__ = ["LoadOptions", "load_graph", "detect_format", "check_limits"]


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
    extra: dict[str, Any] = field(default_factory=dict)


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
    raise InputError(
        f"{path}: not a graph file remat reads (ONNX, remat JSON, node-link JSON, twremat text)"
    )


_BOM = b"\xef\xbb\xbf"
_CONTENT = re.compile(rb"[^ \t\r\n\x0b\x0c]")  # the first byte that is not ASCII whitespace


def load_graph(path: str | Path, options: LoadOptions | None = None) -> Graph:
    """Read ``path`` into a :class:`Graph`, by content, applying ``options``.

    Only regular files are read, up to ``options.limits.max_file_bytes``; the graph must
    keep within the node-count and total-size limits (:mod:`remat_cli.limits`).
    """
    options = options or LoadOptions()
    path = Path(path)
    limits = options.limits
    for key, value in options.dims:
        if value > limits.max_dim:
            raise LimitError(f"--dim {key}={value} is more than the dimension limit {limits.max_dim} (raise it with --max-dim)")
    data = read_regular_file(path, limits.max_file_bytes, "graph file")
    kind = detect_format(path, data)
    if kind == "json":
        graph = _load_json(path, data)
    elif kind == "twremat":
        from remat_cli.loaders import twremat

        graph = twremat.read(_text(path, data), source=str(path), name=path.stem)
    else:
        return check_limits(_how_trained(_load_onnx(path, data, options), options, path), limits, path)
    if getattr(options, "precision", "fp32") != "fp32":
        raise InputError(f"{path}: --precision {options.precision} needs an ONNX model (this graph states its sizes in bytes)")
    if options.training:
        graph = _training(graph, options, path)
    return check_limits(_how_trained(graph, options, path), limits, path)


def _how_trained(graph: Graph, options: LoadOptions, path: Path) -> Graph:
    """Apply --world-size/--shard (sharding.py) and --profile (profile.py) to a loaded graph."""
    world, shard = getattr(options, "world_size", 1), getattr(options, "shard", "none")
    if world != 1 or shard != "none":
        from remat_cli.sharding import apply_sharding

        graph = apply_sharding(graph, world, shard, str(path))
        make = graph.meta.get("_companion")  # the ONNX loader's other graph (remat info)
        if callable(make):

            def companion(make=make):
                kind, other = make()
                return kind, apply_sharding(other, world, shard, str(path))

            graph = dataclasses.replace(graph, meta={**graph.meta, "_companion": companion})
    if getattr(options, "profile", None):
        from remat_cli.profile import apply_profile

        warn = options.extra.get("warn") if isinstance(options.extra, dict) else None
        graph, fact = apply_profile(graph, options.profile, max_bytes=options.limits.max_file_bytes, warn=warn if callable(warn) else None)
        note = options.extra.get("note") if isinstance(options.extra, dict) else None
        if callable(note) and fact.matched_nodes:
            note("profile: " + fact.describe())
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


def _load_json(path: Path, data: bytes) -> Graph:
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
        return remat_json.read(doc, source=str(path), name=path.stem)
    if isinstance(doc, dict) and doc.get("format") == "remat-plan":
        raise InputError(f"{path}: this is a plan file, not a graph (use it with `remat validate GRAPH PLAN`)")
    if nodelink.accepts(doc):
        return nodelink.read(doc, source=str(path), name=path.stem)
    raise InputError(
        f"{path}: JSON of an unknown shape: expected a remat-graph document "
        '({"format": "remat-graph", "nodes": [...]}) or node-link JSON ({"nodes": [...], "links": [...]})'
    )


def _load_onnx(path: Path, data: bytes, options: LoadOptions) -> Graph:
    from remat_cli.loaders import onnx as onnx_loader

    return onnx_loader.load(path, data, options)


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
