"""Topological orders that keep memory low: the memory-greedy order.

One function, shared by ``store-all`` (over all needed nodes) and the ``treewidth`` /
``pathwidth`` recursion (over one sub-problem's missing ancestors, on top of pinned values).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence

__all__ = ["memory_greedy_order"]


def memory_greedy_order(
    need: Collection[int],
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    mem: Sequence[int],
    rank: Sequence[int],
    frees: Callable[[int], bool] | None = None,
) -> list[int]:
    """A topological order of ``need`` that always runs the ready node whose step grows
    resident memory least: its output minus the inputs it frees, i.e. those whose last
    reader in ``need`` it is (and, when ``frees`` is given, for which ``frees(u)`` holds:
    values the caller keeps are not freed). Ties go to the lower ``rank`` (a topological
    rank of the whole graph). Inputs outside ``need`` count as already resident.

    O(E log V) over the sub-graph with a lazily updated heap (a node's key only drops, when
    one of its inputs is left with it as the one reader).
    """
    remaining: dict[int, int] = {}  # per input: readers in ``need`` not yet placed
    missing: dict[int, int] = {}  # per node: inputs in ``need`` not yet placed
    for v in need:
        c = 0
        for u in preds[v]:
            remaining[u] = remaining.get(u, 0) + 1
            if u in need:
                c += 1
        missing[v] = c

    def delta(v: int) -> int:
        d = mem[v]
        for u in preds[v]:
            if remaining[u] == 1 and (frees is None or frees(u)):
                d -= mem[u]
        return d

    current: dict[int, int] = {}
    heap: list[tuple[int, int, int]] = []  # (delta, rank, v)
    for v in need:
        if missing[v] == 0:
            current[v] = delta(v)
            heap.append((current[v], rank[v], v))
    heapq.heapify(heap)
    order: list[int] = []
    placed: set[int] = set()
    while heap:
        d, _, v = heapq.heappop(heap)
        if v in placed or d != current[v]:
            continue
        placed.add(v)
        order.append(v)
        for u in preds[v]:
            remaining[u] -= 1
            if remaining[u] == 1:  # its one reader left now frees it
                for w in succs[u]:
                    if w in need and w not in placed and missing[w] == 0:
                        current[w] = delta(w)
                        heapq.heappush(heap, (current[w], rank[w], w))
        for w in succs[v]:
            if w in need:
                missing[w] -= 1
                if missing[w] == 0:
                    current[w] = delta(w)
                    heapq.heappush(heap, (current[w], rank[w], w))
    return order
