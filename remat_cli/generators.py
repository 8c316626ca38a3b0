"""Synthetic graph families for tests, samples and benchmarks (deterministic given a seed).

Each function returns a forward :class:`Graph`; wrap it with
:func:`remat_cli.training.checkmate_training_graph` for a training graph.
"""

from __future__ import annotations

import numpy as np

from remat_cli.graph import Graph

__all__ = [
    "chain",
    "random_dag",
    "ladder",
    "grid",
    "unet",
    "diamonds",
    "skip_chain",
    "series_parallel",
    "partial_ktree",
    "transformer",
    "from_edges",
    "resnet",
    "mobilenet",
    "vgg",
    "fcn",
    "segnet",
    "unet_cnn",
]


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
    graph = from_edges(
        n, edges, mem=np.asarray(mem), cost=np.asarray(cost), name=kw.pop("name", f"transformer{layers}"), cost_unit="FLOP", **kw
    )
    return Graph.from_arrays(
        ids=graph.ids,
        ops=ops,
        kinds=graph.kinds,
        mem=graph.mem,
        cost=graph.cost,
        src=graph.edges()[0],
        dst=graph.edges()[1],
        name=graph.name,
        cost_unit="FLOP",
        fixed_mem=graph.fixed_mem,
        _checked=True,
    )


# ---------------------------------------------------------------- CNN-shaped graphs
# Forward graphs shaped like the Checkmate / MOCCASIN benchmark networks, with realistic
# sizes: a node is one fused conv (+ batch norm + ReLU) or pool/add/concat, its size is
# batch × channels × height × width × dtype bytes, its cost the FLOPs of the op. Channels
# double where height and width halve, so per-layer sizes halve at each pooling.


class _CNN:
    """Builds a forward graph node by node; ``finish`` turns it into a :class:`Graph`."""

    def __init__(self, batch: int, dtype_bytes: int) -> None:
        self.batch = batch
        self.bytes = dtype_bytes
        self.mem: list[int] = []
        self.cost: list[float] = []
        self.ops: list[str] = []
        self.edges: list[tuple[int, int]] = []
        self.shape: list[tuple[int, int]] = []  # (channels, side)

    def add(self, op: str, channels: int, side: int, inputs: list[int], flops: float = 0.0) -> int:
        node = len(self.mem)
        elems = self.batch * channels * side * side
        self.mem.append(elems * self.bytes)
        self.cost.append(max(flops, float(elems)))
        self.ops.append(op)
        self.shape.append((channels, side))
        self.edges.extend((u, node) for u in inputs)
        return node

    def conv(self, x: int, channels: int, k: int = 3, stride: int = 1, groups: int = 1, op: str = "Conv") -> int:
        cin, side = self.shape[x]
        out = max(1, side // stride)
        flops = 2.0 * self.batch * (cin // groups) * channels * k * k * out * out
        return self.add(op, channels, out, [x], flops)

    def pool(self, x: int, op: str = "MaxPool") -> int:
        c, side = self.shape[x]
        return self.add(op, c, max(1, side // 2), [x])

    def finish(self, name: str) -> Graph:
        n = len(self.mem)
        g = from_edges(n, self.edges, mem=np.asarray(self.mem), cost=np.asarray(self.cost), name=name, cost_unit="FLOP")
        return g.with_arrays(ids=[f"{op.lower()}{i}" for i, op in enumerate(self.ops)], ops=self.ops)


def resnet(
    blocks: tuple[int, ...] = (2, 2, 2, 2),
    *,
    batch: int = 8,
    side: int = 224,
    width: int = 64,
    dtype_bytes: int = 4,
    name: str | None = None,
) -> Graph:
    """ResNet-shaped (basic blocks): stem conv + pool, then per stage ``blocks[i]`` blocks of
    conv → conv → add(skip), the first of each later stage strided with a 1×1 projection."""
    net = _CNN(batch, dtype_bytes)
    x = net.add("Input", 3, side, [])
    x = net.pool(net.conv(x, width, k=7, stride=2))
    for stage, count in enumerate(blocks):
        channels = width << stage
        for b in range(count):
            stride = 2 if stage and not b else 1
            y = net.conv(net.conv(x, channels, stride=stride), channels)
            skip = net.conv(x, channels, k=1, stride=stride) if stride == 2 else x
            x = net.add("Add", channels, net.shape[y][1], [skip, y])
    x = net.add("GlobalAveragePool", net.shape[x][0], 1, [x])
    net.add("Gemm", 1000, 1, [x], 2.0 * batch * net.shape[x][0] * 1000)
    return net.finish(name or f"resnet{'-'.join(map(str, blocks))}")


def mobilenet(
    blocks: tuple[tuple[int, int, int, int], ...] = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2), (6, 96, 1, 1)),
    *,
    batch: int = 8,
    side: int = 224,
    dtype_bytes: int = 4,
    name: str | None = None,
) -> Graph:
    """MobileNetV2-shaped: inverted residual blocks (expand 1×1 → depthwise 3×3 → project
    1×1, add when shape is kept); ``blocks`` are (expansion, channels, repeats, stride)."""
    net = _CNN(batch, dtype_bytes)
    x = net.conv(net.add("Input", 3, side, []), 32, stride=2)
    for t, channels, repeats, stride in blocks:
        for r in range(repeats):
            s = stride if r == 0 else 1
            cin = net.shape[x][0]
            h = net.conv(x, cin * t, k=1) if t != 1 else x
            h = net.conv(h, cin * t, k=3, stride=s, groups=cin * t, op="DepthwiseConv")
            y = net.conv(h, channels, k=1)
            x = net.add("Add", channels, net.shape[y][1], [x, y]) if s == 1 and cin == channels else y
    x = net.add("GlobalAveragePool", net.shape[x][0], 1, [net.conv(x, 1280, k=1)])
    net.add("Gemm", 1000, 1, [x], 2.0 * batch * 1280 * 1000)
    return net.finish(name or "mobilenet")


def vgg(
    stages: tuple[int, ...] = (2, 2, 3, 3, 3),
    *,
    batch: int = 8,
    side: int = 224,
    width: int = 64,
    dtype_bytes: int = 4,
    name: str | None = None,
) -> Graph:
    """VGG-shaped: ``stages[i]`` 3×3 convs then a max-pool per stage, channels doubling up to
    8× ``width``; two fully connected layers at the end."""
    net = _CNN(batch, dtype_bytes)
    x = net.add("Input", 3, side, [])
    for stage, count in enumerate(stages):
        for _ in range(count):
            x = net.conv(x, width << min(stage, 3))
        x = net.pool(x)
    c, s = net.shape[x]
    x = net.add("Gemm", 4096, 1, [x], 2.0 * batch * c * s * s * 4096)
    net.add("Gemm", 1000, 1, [x], 2.0 * batch * 4096 * 1000)
    return net.finish(name or f"vgg{sum(stages) + 2}")


def _encoder(net: _CNN, stages: tuple[int, ...], side: int, width: int) -> tuple[int, list[int], list[int]]:
    """VGG-style encoder: returns the last node, the pre-pool and the pool node of each stage."""
    x = net.add("Input", 3, side, [])
    before, pools = [], []
    for stage, count in enumerate(stages):
        for _ in range(count):
            x = net.conv(x, width << min(stage, 3))
        before.append(x)
        x = net.pool(x)
        pools.append(x)
    return x, before, pools


def fcn(
    stages: tuple[int, ...] = (2, 2, 3, 3, 3),
    *,
    classes: int = 21,
    batch: int = 8,
    side: int = 224,
    width: int = 64,
    dtype_bytes: int = 4,
    name: str | None = None,
) -> Graph:
    """FCN-8s-shaped: a VGG encoder, 1×1 class scores at the last three pools, upsampled ×2
    and added (skip edges from pool3 and pool4), then upsampled to the input size."""
    net = _CNN(batch, dtype_bytes)
    x, _, pools = _encoder(net, stages, side, width)
    score = net.conv(x, classes, k=1)
    for skip in (pools[-2], pools[-3]):
        side_up = net.shape[skip][1]
        up = net.add("ConvTranspose", classes, side_up, [score], 2.0 * batch * classes * classes * 16 * side_up * side_up)
        score = net.add("Add", classes, side_up, [up, net.conv(skip, classes, k=1)])
    net.add("Resize", classes, side, [score])
    return net.finish(name or "fcn8s")


def segnet(
    stages: tuple[int, ...] = (2, 2, 3, 3, 3),
    *,
    classes: int = 21,
    batch: int = 8,
    side: int = 224,
    width: int = 64,
    dtype_bytes: int = 4,
    name: str | None = None,
) -> Graph:
    """SegNet-shaped: a VGG encoder whose max-pools keep their indices, and a mirrored
    decoder whose unpooling reads the matching pool (edges across the network)."""
    net = _CNN(batch, dtype_bytes)
    x, before, pools = _encoder(net, stages, side, width)
    for stage in reversed(range(len(stages))):
        c, s = net.shape[before[stage]]
        x = net.add("MaxUnpool", net.shape[x][0], s, [x, pools[stage]])
        for k in range(stages[stage]):
            last = k == stages[stage] - 1
            x = net.conv(x, (width << max(min(stage, 3) - 1, 0)) if last and stage else c)
    net.conv(x, classes, k=1)
    return net.finish(name or "segnet")


def unet_cnn(
    depth: int = 4, *, convs: int = 2, batch: int = 8, side: int = 256, width: int = 64, dtype_bytes: int = 4, name: str | None = None
) -> Graph:
    """U-Net-shaped with realistic sizes: ``depth`` encoder levels of ``convs`` 3×3 convs and a
    pool, a bottleneck, and a decoder of up-convolution → concat(skip) → convs."""
    net = _CNN(batch, dtype_bytes)
    x = net.add("Input", 3, side, [])
    skips = []
    for level in range(depth):
        for _ in range(convs):
            x = net.conv(x, width << level)
        skips.append(x)
        x = net.pool(x)
    for _ in range(convs):
        x = net.conv(x, width << depth)
    for level in reversed(range(depth)):
        c, s = net.shape[skips[level]]
        up = net.add("ConvTranspose", c, s, [x], 2.0 * batch * net.shape[x][0] * c * 4 * s * s)
        x = net.add("Concat", 2 * c, s, [up, skips[level]])
        for _ in range(convs):
            x = net.conv(x, c)
    net.conv(x, 2, k=1)
    return net.finish(name or f"unet-cnn{depth}")
