"""What ``remat info`` says about a graph: sizes, costs, bounds, where the memory is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat_cli.bounds import StructuralBound, structural_lower_bound
from remat_cli.graph import Graph
from remat_cli.simulate import Metrics
from remat_cli.strategies.store_all import store_all_plan
from remat_cli.units import Fact, Phrase, from_data

__all__ = ["OpShare", "GraphSummary", "summarize"]


@dataclass(frozen=True)
class OpShare:
    """Memory and cost of all needed nodes of one op type."""

    op: str
    count: int
    mem_bytes: int
    cost: float


@dataclass(frozen=True)
class GraphSummary:
    """Facts about one graph, all computed from it (nothing assumed)."""

    name: str
    nodes: int
    edges: int
    needed: int
    targets: int
    kinds: dict[str, int]
    fixed_bytes: int
    activation_bytes: int  # Σ mem of needed nodes
    cost_unit: str
    base_cost: float
    base_seconds: float | None
    lower_bound_bytes: int
    lower_bound_node: str
    lower_bound_op: str
    store_all: Metrics
    store_all_order: str
    by_op: tuple[OpShare, ...]
    largest: tuple[tuple[str, str, int], ...]  # (id, op, bytes)
    extra: dict[str, Any] = field(default_factory=dict)  # loader facts (units.Fact/Phrase) and numbers
    structural_bound: StructuralBound | None = None  # proven over all schedules (bounds.py)


def summarize(graph: Graph, *, top: int = 10, decompose: bool = False, companion: tuple[str, Graph] | None = None) -> GraphSummary:
    """Summarize ``graph``; runs store-all through the simulator for its peak.

    With ``decompose``, also the treewidth and pathwidth upper bounds of the moral
    skeleton (what the treewidth/pathwidth strategies use) and how long each took.
    ``companion``: the other graph of the pair (``("inference", g)`` or ``("training", g)``,
    :func:`remat_cli.loaders.other_variant`), whose store-all peak is shown too.
    """
    store = store_all_plan(graph)
    needed = graph.needed
    ops = np.asarray(graph.ops, dtype=object)
    shares = []
    for op in sorted(set(ops[needed].tolist())):
        mask = needed & (ops == op)
        shares.append(
            OpShare(
                op=op or "(none)",
                count=int(mask.sum()),
                mem_bytes=int(graph.mem[mask].sum()),
                cost=float(graph.cost[mask].sum()),
            )
        )
    shares.sort(key=lambda s: (-s.mem_bytes, s.op))
    candidates = np.flatnonzero(needed)
    order = candidates[np.lexsort((candidates, -graph.mem[candidates]))][:top]
    kinds: dict[str, int] = {}
    for k in graph.kinds:
        kinds[k or "plain"] = kinds.get(k or "plain", 0) + 1
    return GraphSummary(
        name=graph.name,
        nodes=graph.n,
        edges=graph.num_edges,
        needed=int(needed.sum()),
        targets=int(graph.targets.size),
        kinds=kinds,
        fixed_bytes=graph.fixed_mem,
        activation_bytes=int(graph.mem[needed].sum()),
        cost_unit=graph.cost_unit,
        base_cost=graph.base_cost,
        base_seconds=graph.base_seconds,
        lower_bound_bytes=graph.lb,
        lower_bound_node=graph.ids[graph.lb_node],
        lower_bound_op=graph.ops[graph.lb_node],
        store_all=store.metrics,
        store_all_order=store.order,
        by_op=tuple(shares),
        largest=tuple((graph.ids[v], graph.ops[v], int(graph.mem[v])) for v in order.tolist()),
        extra=_extra(graph, decompose, companion),
        structural_bound=structural_lower_bound(graph),
    )


def _extra(graph: Graph, decompose: bool, companion: tuple[str, Graph] | None) -> dict[str, Any]:
    """Loader facts, the other variant's store-all peak, and decomposition widths."""
    info = graph.meta.get("info")
    extra: dict[str, Any] = {k: from_data(v) for k, v in info.items()} if isinstance(info, dict) else {}
    if companion is not None:
        extra.update(_companion(*companion))
    if decompose:
        from remat_cli.algorithms.decompose import decomposition_widths

        w = decomposition_widths(graph)
        extra["treewidth upper bound"] = w["treewidth_ub"]
        extra["treewidth seconds"] = round(float(w["treewidth_seconds"]), 3)
        extra["pathwidth upper bound"] = w["pathwidth_ub"]
        extra["pathwidth seconds"] = round(float(w["pathwidth_seconds"]), 3)
    return extra


def _companion(label: str, other: Graph) -> dict[str, Any]:
    """Store-all peak and LB of the graph's other variant (training <-> inference), so
    ``remat info`` shows both."""
    peak = store_all_plan(other).metrics.peak_bytes
    facts = (Fact(peak, "bytes"), Fact(int(other.lb), "bytes"), Fact(int(other.fixed_mem), "bytes"))
    return {f"store-all peak ({label})": Phrase("{} (lower bound {}, fixed {})", facts)}
