"""A frozen copy of the greedy vertex elimination as of 553b7c9
(remat_cli/algorithms/decompose.py's ``elimination_decomposition``: min-degree with one
heap per degree, exact min-fill with triangle counts kept current, the approximate
min-fill above ``MIN_FILL_EXACT_LIMIT``, the width and fill-edge caps), the reference the
faster eliminations must equal (tests/test_decompose_same.py): the same elimination
order, the same bags (their first node, and their nodes as sets), the same tree, width
and core. Not used by the tool."""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from remat_cli.algorithms.decompose import (
    ELIMINATION_WORK,
    FILL_DEGREE_CAP,
    FILL_EDGE_FACTOR,
    FILL_EDGE_MAX,
    FILL_EDGE_SLACK,
    MIN_FILL_EXACT_LIMIT,
    WIDTH_CAP,
    TreeDecomposition,
)

__all__ = ["elimination_decomposition"]


def elimination_decomposition(adj: list[set[int]], method: str = "min-degree", *, max_degree: int | None = -1) -> TreeDecomposition:
    """Tree decomposition by greedy vertex elimination (Bodlaender & Koster, *Treewidth
    computations I. Upper bounds*, 2010).

    Repeatedly eliminate the node of least degree (``min-degree``) or least fill-in
    (``min-fill``: fewest missing edges among its neighbours), turn its neighbourhood into
    a clique, and record the bag {v} ∪ N(v). The bag of v hangs below the bag of the
    neighbour eliminated first after v. Priority queues with lazy deletion (for
    min-degree one small heap of node ids per degree) keep it O((n + fill) log n) for
    min-degree, ties going to the lower id either way; exact min-fill keeps each node's
    triangle count current (O(common neighbours) per fill edge, O(1) per rescore); above
    ``MIN_FILL_EXACT_LIMIT`` nodes it pays O(d²) per rescore and only rescores the
    eliminated node's neighbours.
    ``adj`` is consumed. Bags use the local ids of ``adj``.

    With ``max_degree`` (−1: the default cap, see ``WIDTH_CAP``; None: no cap),
    elimination stops before a node with
    more neighbours than that, or before the fill-in grows the skeleton past
    ``FILL_EDGE_FACTOR`` × its size + ``FILL_EDGE_SLACK``; the remaining nodes then form
    one root bag and ``core`` says how many. Time O(n log n + E·max_degree), memory O(E).
    """
    started = time.perf_counter()
    n = len(adj)
    if method not in ("min-degree", "min-fill"):
        raise ValueError(f"unknown elimination heuristic {method!r}")
    fill = method == "min-fill"
    two_hop = fill and n <= MIN_FILL_EXACT_LIMIT

    def score(v: int) -> int:
        nb = adj[v]
        d = len(nb)
        if not fill:
            return d
        if d > FILL_DEGREE_CAP:
            return d * (d - 1) // 2
        # pairs of neighbours minus the edges among them (each counted from both ends);
        # set intersections run in C, the same count as a loop over the pairs
        return d * (d - 1) // 2 - sum(map(len, map(nb.intersection, map(adj.__getitem__, nb)))) // 2

    # exact min-fill keeps, per node, the edges among its neighbours (the triangles through
    # it) up to date as edges come and go, so a rescore is O(1) instead of O(d²): the same
    # scores as ``score``, hence the same order and bags
    tri: list[int] = []
    if two_hop:
        tri = [sum(map(len, map(adj[v].intersection, map(adj.__getitem__, adj[v])))) // 2 for v in range(n)]

    def fill_of(v: int) -> int:
        d = len(adj[v])
        return d * (d - 1) // 2 if d > FILL_DEGREE_CAP else d * (d - 1) // 2 - tri[v]

    current = [fill_of(v) for v in range(n)] if two_hop else [score(v) for v in range(n)]
    # min-fill: one heap of (score, node); min-degree: one heap of nodes per degree (a
    # bucket queue; int heaps are cheaper than tuple heaps). Both pop the least
    # (score, node) still current, so they eliminate in the same order.
    heap = [(current[v], v) for v in range(n)] if fill else []
    heapq.heapify(heap)
    buckets: list[list[int]] = [[] for _ in range(max(current, default=0) + 1)] if not fill else []
    if not fill:
        for v in range(n):  # ascending ids: each bucket is already a heap
            buckets[current[v]].append(v)
    low = 0  # no bucket below it holds a current entry
    eliminated = [False] * n
    position = [0] * n
    order: list[int] = []
    bags: list[tuple[int, ...]] = []
    if max_degree is not None and max_degree < 0:
        max_degree = max(WIDTH_CAP, math.isqrt(ELIMINATION_WORK // max(n, 1)))
    edges = sum(len(a) for a in adj) // 2
    edge_cap = edges + min((FILL_EDGE_FACTOR - 1) * edges + FILL_EDGE_SLACK, FILL_EDGE_MAX)
    core = 0
    while True:
        if fill:
            if not heap:
                break
            s, v = heapq.heappop(heap)
        else:
            while low < len(buckets) and not buckets[low]:
                low += 1
            if low == len(buckets):
                break
            s, v = low, heapq.heappop(buckets[low])
        if eliminated[v] or s != current[v]:
            continue
        d = len(adj[v])
        if max_degree is not None and (d > max_degree or edges + d * (d - 1) // 2 > edge_cap):
            rest = [u for u in range(n) if not eliminated[u]]
            core = len(rest)
            for u in rest:
                position[u] = len(order)
            order.append(rest[0])
            bags.append(tuple(rest))
            break
        eliminated[v] = True
        position[v] = len(order)
        order.append(v)
        nb = list(adj[v])
        bags.append((v, *nb))
        for a in nb:
            adj[a].discard(v)
        nbs = set(nb)
        if two_hop:  # v's edges go: a loses the edges v-b of its neighbours b in N(v)
            for a in nb:
                tri[a] -= len(adj[a] & nbs)
        # turn the neighbourhood into a clique: each new edge is added from both ends
        added = 0
        touched = set(nbs)
        if two_hop:  # one new edge a-b at a time: each common neighbour w gains a triangle
            for a in nb:
                aa = adj[a]
                for b in nbs - aa:
                    if b <= a:
                        continue
                    ab = adj[b]
                    common = aa & ab
                    for w in common:
                        tri[w] += 1
                    tri[a] += len(common)
                    tri[b] += len(common)
                    touched |= common
                    aa.add(b)
                    ab.add(a)
                    added += 2
        else:
            for a in nb:
                aa = adj[a]
                new_nb = nbs - aa
                new_nb.discard(a)
                if new_nb:
                    aa |= new_nb
                    added += len(new_nb)
        edges += added // 2 - len(nb)
        adj[v] = set()
        for a in touched:
            new = fill_of(a) if two_hop else score(a) if fill else len(adj[a])
            if new != current[a]:
                current[a] = new
                if fill:
                    heapq.heappush(heap, (new, a))
                    continue
                if new >= len(buckets):
                    buckets.extend([] for _ in range(new + 1 - len(buckets)))
                heapq.heappush(buckets[new], a)
                if new < low:
                    low = new
    # bag k belongs to order[k]; its parent is the bag of the earliest-eliminated neighbour
    parent = np.full(len(bags), -1, dtype=np.int64)
    for k, bag in enumerate(bags):
        if len(bag) > 1:
            p = min(position[x] for x in bag[1:])
            parent[k] = p if p != k else -1  # the core bag is a root
    roots = np.flatnonzero(parent < 0)
    for r in roots[:-1].tolist():  # join the components' trees into one (empty intersections)
        parent[r] = int(roots[-1])
    width = max((len(b) for b in bags), default=1) - 1
    return TreeDecomposition(tuple(bags), parent, width, method, time.perf_counter() - started, core)
