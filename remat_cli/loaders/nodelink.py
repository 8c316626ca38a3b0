"""networkx node-link JSON as Checkmate and MOCCASIN write it (DESIGN §4).

Nodes ``{id, name, backward, cost_cpu, cost_ram}`` (or ``duration``/``out_cost``), edges
``links`` (or ``edges``, networkx ≥ 3.4) of ``{source, target}``. Read-only: to write
node-link, ``networkx.node_link_data(graph.to_networkx(), edges="links")``
(:meth:`~remat_cli.graph.Graph.to_networkx`), which this reader reads back.

Why this reader and not ``networkx.node_link_graph``: networkx builds a dict-of-dicts
graph that silently merges duplicate node ids, fails on a node or
link without a key with a bare ``KeyError``, and accepts any attribute values; a file
remat reads must instead be refused in one line naming the file, the node and what is
wrong (DESIGN §5), and be read straight into the array :class:`~remat_cli.graph.Graph`
without an intermediate copy of a 10⁵-node graph (DESIGN §6).
"""

from __future__ import annotations

from typing import Any

from remat_cli.errors import InputError
from remat_cli.graph import Graph, NodeSpec

__all__ = ["accepts", "read"]

_MEM_KEYS = ("cost_ram", "out_cost", "mem", "memory")
_COST_KEYS = ("cost_cpu", "duration", "cost")


def accepts(doc: Any) -> bool:
    """Whether ``doc`` has the node-link shape."""
    return isinstance(doc, dict) and isinstance(doc.get("nodes"), list) and isinstance(doc.get("links", doc.get("edges")), list)


def read(doc: dict[str, Any], *, source: str, name: str = "graph") -> Graph:
    """Build a graph from node-link JSON; backward-flagged nodes become the targets."""
    inputs: dict[str, list[str]] = {}
    records = []
    for i, nd in enumerate(doc["nodes"]):
        if not isinstance(nd, dict) or "id" not in nd:
            raise InputError(f'{source}: node #{i} has no "id"')
        if isinstance(nd["id"], (dict, list, bool)) or nd["id"] is None:
            raise InputError(f"{source}: node #{i} id {nd['id']!r} is not a string or integer")
        node_id = str(nd["id"])
        mem = _first(nd, _MEM_KEYS)
        if mem is _MISSING:
            raise InputError(f"{source}: node {node_id!r}: no size (expected one of {', '.join(_MEM_KEYS)})")
        cost = _first(nd, _COST_KEYS)
        records.append((node_id, nd, mem, 1 if cost is _MISSING else cost))
        inputs.setdefault(node_id, [])
    links = doc.get("links", doc.get("edges"))
    for k, link in enumerate(links):
        if not isinstance(link, dict) or "source" not in link or "target" not in link:
            raise InputError(f'{source}: link #{k} needs "source" and "target"')
        src, dst = str(link["source"]), str(link["target"])
        if dst not in inputs:
            raise InputError(f"{source}: link #{k} targets {dst!r}, which names no node")
        inputs[dst].append(src)
    has_backward = any("backward" in nd for _, nd, _, _ in records)
    specs = []
    for node_id, nd, mem, cost in records:
        kind = ""
        if has_backward:
            kind = "backward" if nd.get("backward") else "forward"
        specs.append(
            NodeSpec(
                id=node_id,
                inputs=inputs[node_id],
                mem=mem,
                cost=cost,
                op=str(nd.get("name", nd.get("op", "")) or ""),
                kind=kind,
            )
        )
    graph_attrs = doc.get("graph") if isinstance(doc.get("graph"), dict) else {}
    return Graph.from_nodes(
        specs,
        name=str(graph_attrs.get("name") or name),
        fixed_mem=graph_attrs.get("fixed_mem", 0),
        cost_unit=str(graph_attrs.get("cost_unit", "unit")),
        source=source,
        meta={"source_format": "node-link"},
    )


_MISSING = object()


def _first(nd: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in nd:
            return nd[key]
    return _MISSING
