"""twremat's text format (``p remat2``, ``memlimit N``, ``node ID deps … cpu C mem M [target]``).

twremat ids are integers; a graph whose ids are not is renumbered by index when written.
The format has no fixed memory, op names, kinds or workspace: those are not written.
"""

from __future__ import annotations

import re

from remat_cli.errors import InputError
from remat_cli.graph import Graph, NodeSpec

__all__ = ["read", "dumps"]

_KEYWORDS = {"deps", "cpu", "mem", "target", "effectful", "pointer"}
#: the grammar's numbers: ASCII digits only (``int()`` would also take ``'٣'`` or ``'1_0'``)
_WHOLE = re.compile(r"[0-9]+\Z")
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_FIELD = re.compile(r"[ \t]+")


def _lines(text: str) -> list[str]:
    """Lines split at ``\\n`` only (``str.splitlines`` also breaks at ``\\x1c``, ``\\u2028``, …)."""
    return [line.rstrip("\r") for line in text.split("\n")]


def _fields(line: str) -> list[str]:
    """Fields separated by ASCII spaces and tabs, as the format writes them."""
    return [f for f in _FIELD.split(line) if f]


def read(text: str, *, source: str, name: str = "graph") -> Graph:
    """Parse twremat text. ``pointer``/``effectful`` nodes are taken as size 0 and cost 0."""
    specs = []
    targets: list[str] = []
    memlimit = None
    for lineno, raw in enumerate(_lines(text), 1):
        parts = _fields(raw)
        if not parts or parts[0].startswith("#"):
            continue
        where = f"{source}:{lineno}"
        if parts[0] == "p":
            if parts[1:] != ["remat2"]:
                raise InputError(f"{where}: unknown problem line {raw.strip()!r} (expected 'p remat2')")
            continue
        if parts[0] == "memlimit":
            if len(parts) != 2 or not _WHOLE.match(parts[1]) or len(parts[1]) > 30:
                raise InputError(f"{where}: memlimit needs one whole number, got {raw.strip()!r}")
            memlimit = int(parts[1])
            continue
        if parts[0] != "node" or len(parts) < 2:
            raise InputError(f"{where}: expected 'node ID deps … cpu C mem M [target]', got {raw.strip()!r}")
        node_id = parts[1]
        deps: list[str] = []
        cpu = mem = None
        special = False
        k = 2
        while k < len(parts):
            tok = parts[k]
            if tok == "deps":
                k += 1
                while k < len(parts) and parts[k] not in _KEYWORDS:
                    deps.append(parts[k])
                    k += 1
                continue
            if tok in ("cpu", "mem"):
                if k + 1 >= len(parts):
                    raise InputError(f"{where}: node {node_id!r}: {tok} needs a value")
                value = _parse_number(parts[k + 1], tok, node_id, where)
                if tok == "cpu":
                    cpu = value
                else:
                    mem = value
                k += 2
                continue
            if tok == "target":
                targets.append(node_id)
            elif tok in ("effectful", "pointer"):
                special = True
            else:
                raise InputError(f"{where}: node {node_id!r}: unexpected word {tok!r}")
            k += 1
        if mem is None and not special:
            raise InputError(f"{where}: node {node_id!r} has no 'mem' size")
        specs.append(NodeSpec(id=node_id, inputs=deps, mem=mem or 0, cost=cpu or 0, op=""))
    if not specs:
        raise InputError(f"{source}: the graph has no nodes")
    meta = {"source_format": "twremat"}
    if memlimit is not None:
        meta["memlimit"] = memlimit
    return Graph.from_nodes(specs, name=name, targets=targets or None, source=source, meta=meta)


def dumps(graph: Graph, memlimit: int | None = None) -> str:
    """twremat text for ``graph``; ``memlimit`` defaults to the file's or the sum of all sizes."""
    ids = graph.ids
    if not all(_WHOLE.match(x) for x in ids):
        ids = tuple(str(v) for v in range(graph.n))
    if memlimit is None:
        stated = graph.meta.get("memlimit")
        ok = isinstance(stated, int) and not isinstance(stated, bool) and stated >= 0
        memlimit = stated if ok else int(graph.mem.sum())
    targets = set(graph.targets.tolist())
    lines = ["p remat2", f"memlimit {memlimit}"]
    preds = graph.pred_lists
    cost = graph.cost.tolist()
    mem = graph.mem.tolist()
    for v in range(graph.n):
        deps = " ".join(ids[u] for u in preds[v])
        c = int(cost[v]) if float(cost[v]).is_integer() else cost[v]
        line = f"node {ids[v]} deps {deps} cpu {c} mem {mem[v]}".replace("deps  cpu", "deps cpu")
        if v in targets:
            line += " target"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _parse_number(tok: str, label: str, node_id: str, where: str) -> float | int:
    """A size (ASCII digits) or a cost (ASCII digits, optionally decimal / exponent)."""
    if _WHOLE.match(tok) and len(tok) > 30:  # beyond every limit; int() refuses > 4300 digits
        raise InputError(f"{where}: node {node_id!r}: {label} {tok[:20]}… ({len(tok)} digits) is too large")
    if _WHOLE.match(tok):
        return int(tok)
    if label == "cpu" and _DECIMAL.match(tok):
        return float(tok)
    what = "a whole number of bytes" if label == "mem" else "a number >= 0"
    raise InputError(f"{where}: node {node_id!r}: {label} {tok!r} is not {what} (ASCII digits)")
