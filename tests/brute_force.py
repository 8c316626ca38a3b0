"""An independent oracle for tests: the cheapest valid schedule of a tiny graph, by
Dijkstra over (resident set, computed targets) states. Exponential; graphs of ≤ 10 nodes."""

from __future__ import annotations

import heapq

from remat_cli.graph import Graph


def optimal_cost(graph: Graph, limit: int) -> float | None:
    """Least total compute cost of a schedule peaking at most ``limit`` bytes, or None."""
    n = graph.n
    mem = [int(x) for x in graph.mem]
    ws = [int(x) for x in graph.workspace]
    cost = [float(x) for x in graph.cost]
    pred_mask = [sum(1 << int(u) for u in graph.preds(v)) for v in range(n)]
    targets = [int(t) for t in graph.targets]
    tbit = {t: 1 << i for i, t in enumerate(targets)}
    done_all = (1 << len(targets)) - 1
    start = (0, 0)
    dist = {start: 0.0}
    heap = [(0.0, 0, 0)]
    while heap:
        c, res, done = heapq.heappop(heap)
        if dist.get((res, done), float("inf")) < c:
            continue
        if done == done_all:
            return c
        used = graph.fixed_mem + sum(mem[v] for v in range(n) if res >> v & 1)
        for v in range(n):
            bit = 1 << v
            if res & bit:
                nxt = (res & ~bit, done)
                nc = c
            else:
                if res & pred_mask[v] != pred_mask[v] or used + mem[v] + ws[v] > limit:
                    continue
                nxt = (res | bit, done | tbit.get(v, 0))
                nc = c + cost[v]
            if nc < dist.get(nxt, float("inf")):
                dist[nxt] = nc
                heapq.heappush(heap, (nc, nxt[0], nxt[1]))
    return None
