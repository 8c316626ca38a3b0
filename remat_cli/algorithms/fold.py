"""Fold zero-byte sinks out of a graph before a strategy sees it, and back into its schedule.

A target ``s`` with no bytes, no workspace, one input ``v`` and no consumers (a captured
PyTorch gradient step's ``bwd:X.params``: the parameter gradients, fixed memory) costs
nothing to hold and is never read: computing it right after the first computation of ``v``
adds no memory at that step and its cost once, so every schedule of the graph without it
(``v`` made a target instead) becomes one of the full graph with the same peak and the same
cost plus the sinks' — and an optimal one stays optimal. Strategies that look at the
graph's structure (treewidth's elimination order) plan worse with such leaves attached;
folded, they see the graph as it was before the leaves were added.

Only the leaves the PyTorch capture splits off a gradient step (op ``….backward.params``)
are folded: they are part of their parent's computation, and folding them gives the
decompositions the graph they planned before that split. Other zero-byte sinks (an ONNX
graph has one or two) stay: folding them moves the heuristics' plans both ways (measured
on the samples: vit_b16 pathwidth 0.5x +35.9% -> +58.7%, resnet18 0.7x no fit -> fits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, Schedule

__all__ = ["Folded", "fold_sinks", "SPLIT_OP"]

#: The op suffix of the share of a gradient step the PyTorch capture splits off (the
#: parameter gradients, done once): the leaves this module folds.
SPLIT_OP = ".backward.params"


@dataclass(frozen=True)
class Folded:
    """``graph`` without the folded sinks; ``kept[i]`` is its node ``i``'s index in the
    full graph; ``sinks``/``parents`` are the folded sinks and their one input (full-graph
    indices, parents in ascending order of the sink)."""

    graph: Graph
    kept: np.ndarray
    sinks: np.ndarray
    parents: np.ndarray

    def unfold(self, schedule: Schedule) -> Schedule:
        """The full graph's schedule: each sink computed right after its parent's first computation."""
        nodes = self.kept[schedule.nodes]
        ops = schedule.ops
        is_compute = ops == COMPUTE
        first = np.full(int(self.kept.max()) + 1 if self.kept.size else 0, -1, dtype=np.int64)
        steps = np.flatnonzero(is_compute)
        # the first computation of each node: the last write wins, so write in reverse
        first[nodes[steps[::-1]]] = steps[::-1]
        at = first[self.parents]
        if (at < 0).any():  # a parent never computed: the schedule is not valid anyway
            return Schedule(ops, nodes.astype(np.int32))
        order = np.argsort(at, kind="stable")
        new_ops = np.insert(ops, at[order] + 1, COMPUTE)
        new_nodes = np.insert(nodes, at[order] + 1, self.sinks[order])
        return Schedule(new_ops.astype(np.int8), new_nodes.astype(np.int32))

    def keep_in_full(self, keep: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """A strategy's kept node set in full-graph indices."""
        return None if keep is None else tuple(int(self.kept[k]) for k in keep)


def fold_sinks(graph: Graph) -> Folded | None:
    """The graph with its zero-byte, zero-workspace, single-input target sinks of op
    ``….backward.params`` folded out, or
    ``None`` when it has none (the graph is then planned as it is). Kept on the graph
    (:meth:`Graph.derived`), so repeated plans of it reuse one folded graph and its caches."""
    return graph.derived("fold: zero-byte sinks", lambda: _fold(graph))


def _fold(graph: Graph) -> Folded | None:
    n = graph.n
    indeg = np.diff(graph.pred_ptr)
    outdeg = np.diff(graph.succ_ptr)
    is_target = np.zeros(n, dtype=bool)
    is_target[graph.targets] = True
    split = np.fromiter((op.endswith(SPLIT_OP) for op in graph.ops), dtype=bool, count=n)
    sink = split & is_target & (outdeg == 0) & (indeg == 1) & (graph.mem == 0) & (graph.workspace == 0)
    if not sink.any() or sink.all():
        return None
    sinks = np.flatnonzero(sink)
    parents = graph.pred_idx[graph.pred_ptr[sinks]].astype(np.int64)
    kept = np.flatnonzero(~sink)
    new_index = np.full(n, -1, dtype=np.int64)
    new_index[kept] = np.arange(kept.size)
    src, dst = graph.edges()
    keep_edge = ~sink[dst]  # a sink has no outgoing edges: only edges into sinks go
    targets = np.concatenate((graph.targets[~sink[graph.targets]], parents))  # from_arrays dedupes
    reduced = Graph.from_arrays(
        ids=[graph.ids[i] for i in kept],
        ops=[graph.ops[i] for i in kept],
        kinds=[graph.kinds[i] for i in kept],
        mem=graph.mem[kept],
        cost=graph.cost[kept],
        workspace=graph.workspace[kept],
        src=new_index[src[keep_edge]],
        dst=new_index[dst[keep_edge]],
        targets=new_index[targets],
        fixed_mem=graph.fixed_mem,
        cost_unit=graph.cost_unit,
        seconds=None if graph.seconds is None else graph.seconds[kept],
        name=graph.name,
        source=graph.name,
        meta=graph.meta,
        _checked=True,
    )
    return Folded(graph=reduced, kept=kept, sinks=sinks, parents=parents)
