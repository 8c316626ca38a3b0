"""remat JSON (``remat-graph`` v1): the tool's own lossless graph format (DESIGN §4)."""

from __future__ import annotations

import json
from typing import Any

from remat_cli.errors import InputError
from remat_cli.graph import Graph, NodeSpec

__all__ = ["FORMAT", "VERSION", "read", "to_json", "dumps"]

FORMAT = "remat-graph"
VERSION = 1


def read(doc: dict[str, Any], *, source: str, name: str = "graph") -> Graph:
    """Build a graph from a parsed ``remat-graph`` document; errors name the node and field."""
    if doc.get("version", VERSION) != VERSION:
        raise InputError(f"{source}: remat-graph version {doc.get('version')!r} is not supported (expected {VERSION})")
    nodes_doc = doc.get("nodes")
    if not isinstance(nodes_doc, list):
        raise InputError(f'{source}: "nodes" must be a list of node objects')
    specs = []
    for i, nd in enumerate(nodes_doc):
        if not isinstance(nd, dict):
            raise InputError(f"{source}: node #{i} is not an object")
        if "id" not in nd:
            raise InputError(f'{source}: node #{i} has no "id"')
        node_id = _ident(nd["id"], source, f"node #{i} id")
        inputs = nd.get("inputs", [])
        if not isinstance(inputs, list):
            raise InputError(f'{source}: node {node_id!r}: "inputs" must be a list of ids')
        if "mem" not in nd:
            raise InputError(f'{source}: node {node_id!r}: missing "mem" (bytes of its output)')
        specs.append(
            NodeSpec(
                id=node_id,
                inputs=[_ident(x, source, f"node {node_id!r} input") for x in inputs],
                mem=nd["mem"],
                cost=nd.get("cost", 0),
                op=str(nd.get("op", "") or ""),
                workspace=nd.get("workspace", 0),
                kind=str(nd.get("kind", "") or ""),
                seconds=nd.get("seconds"),
            )
        )
    targets = doc.get("targets")
    if targets is not None:
        if not isinstance(targets, list):
            raise InputError(f'{source}: "targets" must be a list of node ids')
        targets = [_ident(t, source, "target") for t in targets]
    meta = _shallow_meta(doc.get("meta"))
    return Graph.from_nodes(
        specs,
        name=str(doc.get("name") or name),
        targets=targets,
        fixed_mem=doc.get("fixed_mem", 0),
        cost_unit=str(doc.get("cost_unit", "unit")),
        source=source,
        meta=meta,
    )


def to_json(graph: Graph, *, with_targets: bool = True) -> dict[str, Any]:
    """The ``remat-graph`` v1 document for ``graph`` (round-trips exactly)."""
    nodes = []
    for spec in graph.node_specs():
        node: dict[str, Any] = {"id": spec.id, "op": spec.op, "inputs": list(spec.inputs), "mem": spec.mem}
        node["cost"] = int(spec.cost) if float(spec.cost).is_integer() and abs(spec.cost) < 2**53 else spec.cost
        if spec.workspace:
            node["workspace"] = spec.workspace
        if spec.kind:
            node["kind"] = spec.kind
        if spec.seconds is not None:
            node["seconds"] = spec.seconds
        nodes.append(node)
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "name": graph.name,
        "cost_unit": graph.cost_unit,
        "fixed_mem": graph.fixed_mem,
    }
    if with_targets:
        doc["targets"] = [graph.ids[t] for t in graph.targets.tolist()]
    jsonable_meta = {k: v for k, v in graph.meta.items() if _is_json(v)}
    if jsonable_meta:
        doc["meta"] = jsonable_meta
    doc["nodes"] = nodes
    return doc


def dumps(graph: Graph) -> str:
    """remat JSON text, one node per line so diffs stay readable."""
    doc = to_json(graph)
    nodes = doc.pop("nodes")
    head = json.dumps(doc, indent=1, allow_nan=False)[:-2]
    body = ",\n  ".join(json.dumps(nd, separators=(", ", ": "), allow_nan=False) for nd in nodes)
    return f'{head},\n "nodes": [\n  {body}\n ]\n}}\n'


def _ident(value: Any, source: str, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"{source}: {what} {value!r} is not a string id")
    return str(value)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


#: meta entries nested deeper than this are dropped on load: remat reads none of them, and
#: printing or copying them must not recurse without bound
META_DEPTH = 16


def _shallow_meta(meta: Any) -> dict[str, Any]:
    """The document's ``meta`` without entries nested deeper than META_DEPTH or holding
    numbers strict JSON has no words for (NaN, Infinity): remat could not write them back."""
    if not isinstance(meta, dict):
        return {}
    return {str(k): v for k, v in meta.items() if _depth(v, META_DEPTH) <= META_DEPTH and _is_json(v)}


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value (0 for a scalar), counted up to ``limit + 1`` only."""
    if not isinstance(value, (dict, list)):
        return 0
    if limit < 0:
        return 1
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(v, limit - 1) for v in items), default=0)
