"""Find the graph files under directories, for ``remat batch`` and ``remat check``.

Which format a file holds is the loaders' decision (:func:`remat_cli.loaders.detect_format`,
the same sniffing ``load_graph`` does); this module only adds what a directory search
needs on top: which JSON is a graph rather than something else (plan files, results,
other tools' JSON), and that a broken model still becomes a row instead of vanishing.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Sequence
from pathlib import Path

from remat_cli.errors import InputError
from remat_cli.loaders import detect_format

__all__ = ["discover"]

_GRAPH_SUFFIXES = (".onnx", ".json")
_SNIFF_BYTES = 4096  # what discovery reads of each file to tell its format
_SNIFF_LIMIT = 64 << 20  # JSON above this is taken without parsing it during discovery
_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})


def discover(paths: Sequence[str | Path], globs: Sequence[str] = ()) -> list[str]:
    """Graph files under ``paths`` (files named directly are always taken), sorted, unique.

    In directories a file is taken when its content says it is a graph: ``.onnx`` files,
    twremat text, and JSON that is not something else (plan files, other tools' JSON).
    JSON that does not parse is taken, so that a broken model becomes an error row rather
    than disappearing. ``globs`` (matched against the path below the directory and the
    file name) narrow the search. Hidden directories are skipped. A subdirectory that
    cannot be listed, and a FIFO, device or socket with a graph suffix, are taken too, so
    that they become rows saying why they were not planned instead of vanishing.
    """
    found: dict[str, None] = {}
    for root in paths:
        root_path = Path(root)
        if not root_path.exists():
            raise InputError(f"{root}: no such file or directory")
        if not root_path.is_dir():
            found[str(root_path)] = None
            continue
        candidates = []

        def unreadable(exc: OSError) -> None:
            if exc.filename and Path(exc.filename) != root_path:
                found[str(exc.filename)] = None  # a row: "cannot list this directory"
            elif exc.filename:
                raise InputError(f"{root}: cannot list the directory: {exc.strerror or exc}")

        for dirpath, dirnames, filenames in os.walk(root_path, onerror=unreadable):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
            for fname in sorted(filenames):
                full = Path(dirpath) / fname
                rel = full.relative_to(root_path).as_posix()
                if globs and not any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(fname, g) for g in globs):
                    continue
                candidates.append(full)
        for full in candidates:
            if full.name.startswith("."):
                continue
            if full.is_file():
                if _looks_like_graph(full):
                    found[str(full)] = None
            elif full.suffix.lower() in _GRAPH_SUFFIXES and not full.is_dir():
                found[str(full)] = None  # a FIFO or device named like a model: a row says why not
    return sorted(found, key=_sort_key)


def _sort_key(path: str) -> tuple[str, ...]:
    return tuple(Path(path).parts)


def _looks_like_graph(path: Path) -> bool:
    """Whether a file found in a directory is planned (or reported) as a graph.

    ONNX is taken by its suffix (a protobuf has no signature that tells it from other
    binary files), even when empty or broken; everything else by the loaders' format
    detection on its content, JSON then by :func:`_json_may_be_graph`.
    """
    suffix = path.suffix.lower()
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError:
        return suffix in _GRAPH_SUFFIXES  # unreadable: report it as a row
    if suffix == ".onnx":
        return True
    try:  # by content alone: a .json file that holds no JSON (e.g. one with comments) is no graph here
        kind = detect_format(path.with_name("content"), head)
    except InputError:  # empty, or not a format remat reads
        return False
    if kind == "twremat":
        return True
    if kind != "json":
        return False  # protobuf-like bytes without the .onnx suffix
    if b'"remat-plan"' in head.lstrip()[:512]:
        return False
    if b'"remat-graph"' in head:
        return True  # a graph, or a broken one that should be reported
    if suffix != ".json":
        return False  # e.g. our own --jsonl output, whose records have "nodes" too
    return b'"nodes"' in head or _json_may_be_graph(path)


def _json_may_be_graph(path: Path) -> bool:
    """A remat-graph document, JSON with a ``nodes`` list (node-link), or JSON that does not parse."""
    try:
        if path.stat().st_size > _SNIFF_LIMIT:
            return True  # too big to parse just to look: the worker reads it (and reports it)
        doc = json.loads(path.read_bytes())
    except (ValueError, OSError, RecursionError):  # nested too deeply: a broken model, a row
        return path.suffix.lower() == ".json"
    if not isinstance(doc, dict) or doc.get("format") == "remat-plan":
        return False
    return doc.get("format") == "remat-graph" or isinstance(doc.get("nodes"), list)
