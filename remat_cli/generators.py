"""Synthetic graph families for tests, samples and benchmarks (deterministic given a seed).

Each function returns a forward :class:`Graph`; wrap it with
:func:`remat_cli.training.checkmate_training_graph` for a training graph.
"""

from __future__ import annotations

import numpy as np

from remat_cli.graph import Graph

__all__ = ["chain", "random_dag", "ladder", "grid", "unet", "diamonds", "skip_chain", "series_parallel", "partial_ktree", "transformer", "from_edges"]


def from_edges(
    n: int,
    edges: list[tuple[int, int]] | np.ndarray,
    *,
    mem: np.ndarray | int = 1,
    cost: np.ndarray | float = 1.0,
    name: str = "graph",
    op: str = "op",
    cost_unit: str = "unit",
    fixed_mem: int = 0,
) -> Graph:
    """A graph on nodes ``0..n-1`` (ids ``n0``…) from ``(u, v)`` edges with ``u < v``."""
    arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if arr.size:
        arr = np.unique(arr, axis=0)
    mem_a = np.broadcast_to(np.asarray(mem, dtype=np.int64), (n,)).copy()
    cost_a = np.broadcast_to(np.asarray(cost, dtype=np.float64), (n,)).copy()
    return Graph.from_arrays(
        ids=[f"n{i}" for i in range(n)],
        ops=[op] * n,
        kinds=[""] * n,
        mem=mem_a,
        cost=cost_a,
        src=arr[:, 0],
        dst=arr[:, 1],
        name=name,
        cost_unit=cost_unit,
        fixed_mem=fixed_mem,
    )


def chain(n: int, **kw) -> Graph:
    """A path 0 -> 1 -> … -> n-1."""
    return from_edges(n, [(i, i + 1) for i in range(n - 1)], name=kw.pop("name", f"chain{n}"), **kw)


def skip_chain(n: int, skip: int = 3, **kw) -> Graph:
    """A chain with a residual edge i -> i+skip every ``skip`` nodes (ResNet-like)."""
    edges = [(i, i + 1) for i in range(n - 1)] + [(i, i + skip) for i in range(0, n - skip, skip)]
    return from_edges(n, edges, name=kw.pop("name", f"skipchain{n}"), **kw)


def random_dag(n: int, p: float = 0.2, seed: int = 0, *, max_size: int = 1, **kw) -> Graph:
    """Erdős–Rényi DAG on a random order; sizes and costs in ``1..max_size`` when > 1."""
    rng = np.random.default_rng(seed)
    iu = np.triu_indices(n, k=1)
    mask = rng.random(iu[0].size) < p
    edges = np.stack([iu[0][mask], iu[1][mask]], axis=1)
    if max_size > 1:
        kw.setdefault("mem", rng.integers(1, max_size + 1, n))
        kw.setdefault("cost", rng.integers(1, max_size + 1, n).astype(float))
    return from_edges(n, edges, name=kw.pop("name", f"dag{n}-{seed}"), **kw)


def ladder(k: int, **kw) -> Graph:
    """Two chains of length k with rungs a_i -> b_i (treewidth 2)."""
    edges = []
    for i in range(k):
        a, b = 2 * i, 2 * i + 1
        edges.append((a, b))
        if i + 1 < k:
            edges += [(a, a + 2), (b, b + 2)]
    return from_edges(2 * k, edges, name=kw.pop("name", f"ladder{k}"), **kw)


def grid(rows: int, cols: int, **kw) -> Graph:
    """A rows×cols grid, edges right and down."""
    idx = lambda r, c: r * cols + c  # noqa: E731
    edges = [(idx(r, c), idx(r, c + 1)) for r in range(rows) for c in range(cols - 1)]
    edges += [(idx(r, c), idx(r + 1, c)) for r in range(rows - 1) for c in range(cols)]
    return from_edges(rows * cols, edges, name=kw.pop("name", f"grid{rows}x{cols}"), **kw)


def diamonds(k: int, width: int = 2, **kw) -> Graph:
    """k diamonds in series: a split into ``width`` branches joined again (Inception-like)."""
    edges = []
    node = 0
    for _ in range(k):
        top = node
        branches = list(range(top + 1, top + 1 + width))
        join = top + 1 + width
        edges += [(top, b) for b in branches] + [(b, join) for b in branches]
        node = join
    return from_edges(node + 1, edges, name=kw.pop("name", f"diamonds{k}x{width}"), **kw)


def unet(depth: int, convs: int = 2, base_mem: int = 1 << 20, **kw) -> Graph:
    """A U-Net-shaped graph: an encoder of ``depth`` levels, a decoder, skip edges across.

    Sizes halve per level down and double back up (``base_mem`` at the top level).
    """
    edges: list[tuple[int, int]] = []
    mem: list[int] = []
    node = -1

    def add(size: int, after: list[int]) -> int:
        nonlocal node
        node += 1
        mem.append(size)
        edges.extend((a, node) for a in after)
        return node

    prev = add(base_mem, [])
    skips = []
    for level in range(depth):
        size = base_mem >> level
        for _ in range(convs):
            prev = add(size, [prev])
        skips.append(prev)
        prev = add(size >> 1, [prev])  # downsample
    for _ in range(convs):
        prev = add(base_mem >> depth, [prev])
    for level in reversed(range(depth)):
        size = base_mem >> level
        prev = add(size, [prev])  # upsample
        prev = add(2 * size, [prev, skips[level]])  # concat
        for _ in range(convs):
            prev = add(size, [prev])
    n = node + 1
    kw.setdefault("cost", np.asarray(mem, dtype=np.float64) / 1024)
    return from_edges(n, edges, mem=np.asarray(mem), name=kw.pop("name", f"unet{depth}"), **kw)


def series_parallel(n: int, seed: int = 0, **kw) -> Graph:
    """A random two-terminal series-parallel DAG with about ``n`` edges (treewidth ≤ 2)."""
    rng = np.random.default_rng(seed)
    edges = [(0, 1)]
    count = 2
    while len(edges) < n:
        k = int(rng.integers(len(edges)))
        u, v = edges[k]
        w = count
        count += 1
        if rng.random() < 0.5:  # series: u -> w -> v
            edges[k] = (u, w)
            edges.append((w, v))
        else:  # parallel: another path u -> w -> v
            edges += [(u, w), (w, v)]
    # relabel topologically so that u < v
    import networkx as nx

    g = nx.DiGraph(edges)
    order = {x: i for i, x in enumerate(nx.topological_sort(g))}
    return from_edges(count, [(order[u], order[v]) for u, v in edges], name=kw.pop("name", f"sp{n}-{seed}"), **kw)


def partial_ktree(n: int, k: int, p: float = 0.7, seed: int = 0, **kw) -> Graph:
    """A random partial k-tree on n nodes, oriented by creation order (treewidth ≤ k)."""
    rng = np.random.default_rng(seed)
    cliques = [tuple(range(k + 1))]
    edges = {(i, j) for i in range(k + 1) for j in range(i + 1, k + 1)}
    for v in range(k + 1, n):
        base = cliques[int(rng.integers(len(cliques)))]
        drop = int(rng.integers(k + 1))
        members = tuple(x for i, x in enumerate(base) if i != drop)
        edges |= {(u, v) for u in members}
        cliques.append(members + (v,))
    kept = [e for e in sorted(edges) if rng.random() < p or e[1] == e[0] + 1]
    return from_edges(n, kept, name=kw.pop("name", f"pkt{n}-{k}-{seed}"), **kw)


def transformer(layers: int, seq: int = 512, hidden: int = 768, heads: int = 12, *, dtype_bytes: int = 4, **kw) -> Graph:
    """A transformer-shaped forward graph: ``layers`` pre-norm blocks of
    LayerNorm → Q, K, V → scores → softmax → attention → projection → residual add →
    LayerNorm → MLP up → GELU → MLP down → residual add (13 nodes per block, one input
    embedding node first). Sizes in bytes for one sequence; costs in FLOPs.
    """
    act = seq * hidden * dtype_bytes
    scores = heads * seq * seq * dtype_bytes
    mm = 2.0 * seq * hidden * hidden
    edges: list[tuple[int, int]] = []
    mem: list[int] = []
    cost: list[float] = []
    ops: list[str] = []

    def add(op: str, size: int, flops: float, inputs: list[int]) -> int:
        node = len(mem)
        mem.append(size)
        cost.append(flops)
        ops.append(op)
        edges.extend((u, node) for u in inputs)
        return node

    x = add("Embed", act, float(seq * hidden), [])
    for _ in range(layers):
        ln = add("LayerNorm", act, 5.0 * seq * hidden, [x])
        q = add("MatMul", act, mm, [ln])
        k = add("MatMul", act, mm, [ln])
        v = add("MatMul", act, mm, [ln])
        s = add("MatMul", scores, 2.0 * seq * seq * hidden, [q, k])
        p = add("Softmax", scores, 5.0 * heads * seq * seq, [s])
        a = add("MatMul", act, 2.0 * seq * seq * hidden, [p, v])
        o = add("MatMul", act, mm, [a])
        r = add("Add", act, float(seq * hidden), [x, o])
        ln2 = add("LayerNorm", act, 5.0 * seq * hidden, [r])
        up = add("MatMul", 4 * act, 4 * mm, [ln2])
        g = add("Gelu", 4 * act, 8.0 * seq * hidden * 4, [up])
        down = add("MatMul", act, 4 * mm, [g])
        x = add("Add", act, float(seq * hidden), [r, down])
    n = len(mem)
    graph = from_edges(n, edges, mem=np.asarray(mem), cost=np.asarray(cost), name=kw.pop("name", f"transformer{layers}"), cost_unit="FLOP", **kw)
    return Graph.from_arrays(
        ids=graph.ids, ops=ops, kinds=graph.kinds, mem=graph.mem, cost=graph.cost,
        src=graph.edges()[0], dst=graph.edges()[1], name=graph.name, cost_unit="FLOP",
        fixed_mem=graph.fixed_mem, _checked=True,
    )
