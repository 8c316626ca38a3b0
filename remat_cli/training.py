"""Forward graph -> training graph (forward + loss + backward), DESIGN §2.

Transforms are functions from graph to a new graph; the input is never changed.
"""

from __future__ import annotations

import numpy as np

from remat_cli.errors import InputError
from remat_cli.graph import Graph

__all__ = ["checkmate_training_graph", "build_training_graph", "CONVENTIONS"]

CONVENTIONS = ("checkmate", "autograd")


def build_training_graph(graph: Graph, *, convention: str = "checkmate", optimizer: str = "sgd") -> Graph:
    """Build the training graph of ``graph`` under ``convention``."""
    if convention == "checkmate":
        return checkmate_training_graph(graph)
    raise InputError(f"training-graph convention {convention!r} is not available for this graph (use checkmate)")


def checkmate_training_graph(fwd: Graph, *, backward_cost_factor: float = 2.0) -> Graph:
    """The Checkmate convention (DESIGN §2), for graphs without op semantics.

    Forward nodes keep their order (0..L-1, topological); one ``loss`` node is fed by the
    forward sinks; ``bwd(u)`` (gradient of u's output, mem(u), cost 2·cost(u)) reads
    ``bwd(v)`` and ``v`` for every forward edge u->v, and ``u`` itself; ``bwd(sink)``
    reads the loss. The loss node's size and cost are the largest of the sinks'.
    Nodes that no target needs are dropped first. Result: 2L+1 nodes.
    """
    keep = fwd.needed_nodes  # topological order of the needed forward nodes
    L = int(keep.size)
    new_of = np.full(fwd.n, -1, dtype=np.int64)
    new_of[keep] = np.arange(L)
    src, dst = fwd.edges()
    mask = (new_of[src] >= 0) & (new_of[dst] >= 0)
    u, v = new_of[src[mask]], new_of[dst[mask]]
    out_deg = np.bincount(u, minlength=L)
    sinks = np.flatnonzero(out_deg == 0)
    loss = L
    bwd = np.arange(L) + L + 1  # bwd(i) = L + 1 + i
    # edges: forward; sinks -> loss; loss -> bwd(sink); u -> bwd(u); bwd(v) -> bwd(u), v -> bwd(u)
    e_src = np.concatenate([u, sinks, np.full(sinks.size, loss), np.arange(L), bwd[v], v])
    e_dst = np.concatenate([v, np.full(sinks.size, loss), bwd[sinks], bwd, bwd[u], bwd[u]])
    pairs = np.unique(np.stack([e_src, e_dst], axis=1), axis=0)
    # keep a deterministic, readable input order: sort by (dst, src)
    order = np.lexsort((pairs[:, 0], pairs[:, 1]))
    pairs = pairs[order]
    mem_f = fwd.mem[keep]
    cost_f = fwd.cost[keep]
    ids_f = [fwd.ids[i] for i in keep.tolist()]
    ids = ids_f + ["loss"] + [f"bwd:{x}" for x in ids_f]
    if "loss" in set(ids_f):
        ids[L] = "loss:" + fwd.name
    seconds = None
    if fwd.seconds is not None:
        sec_f = fwd.seconds[keep]
        seconds = np.concatenate([sec_f, [sec_f[sinks].max()], backward_cost_factor * sec_f])
    return Graph.from_arrays(
        ids=ids,
        ops=[fwd.ops[i] for i in keep.tolist()] + ["Loss"] + [f"{fwd.ops[i]}Grad" if fwd.ops[i] else "Grad" for i in keep.tolist()],
        kinds=["forward"] * L + ["loss"] + ["backward"] * L,
        mem=np.concatenate([mem_f, [mem_f[sinks].max()], mem_f]),
        cost=np.concatenate([cost_f, [cost_f[sinks].max()], backward_cost_factor * cost_f]),
        workspace=np.concatenate([fwd.workspace[keep], [0], fwd.workspace[keep]]),
        src=pairs[:, 0],
        dst=pairs[:, 1],
        fixed_mem=fwd.fixed_mem,
        cost_unit=fwd.cost_unit,
        seconds=seconds,
        name=f"{fwd.name}-train",
        meta={**fwd.meta, "training_convention": "checkmate"},
    )
