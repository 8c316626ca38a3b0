"""Topological orders that keep memory low: the memory-greedy order.

One function, shared by ``store-all`` (over all needed nodes) and the ``treewidth`` /
``pathwidth`` recursion (over one sub-problem's missing ancestors, on top of pinned values).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Collection, MutableSequence, Sequence

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
    # per-node counters: plain lists when ``need`` is much of the graph (store-all), dicts
    # that read 0 when missing on small sub-problems (the recursion's), same code either way
    n = len(preds)
    dense = 4 * len(need) >= n
    remaining: MutableSequence[int] | dict[int, int] = [0] * n if dense else defaultdict(int)  # readers in need not placed
    missing: MutableSequence[int] | dict[int, int] = [0] * n if dense else defaultdict(int)  # inputs in need not placed
    placed: MutableSequence[int] | dict[int, int] = bytearray(n) if dense else defaultdict(int)
    current: MutableSequence[int] | dict[int, int] = [0] * n if dense else {}
    for v in need:
        c = 0
        for u in preds[v]:
            remaining[u] += 1
            if u in need:
                c += 1
        missing[v] = c
    # what freeing a value gives back: mem[u] where ``frees(u)``, else 0; asked once per
    # value (``frees`` is the caller's fixed predicate), then looked up
    gain: dict[int, int] = {}

    def delta(v: int) -> int:
        d = mem[v]
        for u in preds[v]:
            if remaining[u] == 1:
                g = gain.get(u)
                if g is None:
                    g = gain[u] = mem[u] if frees is None or frees(u) else 0
                d -= g
        return d

    heap: list[tuple[int, int, int]] = []  # (delta, rank, v)
    for v in need:
        if missing[v] == 0:
            d = current[v] = delta(v)
            heap.append((d, rank[v], v))
    heapq.heapify(heap)
    order: list[int] = []
    pop, push, append = heapq.heappop, heapq.heappush, order.append
    while heap:
        d, _, v = pop(heap)
        if placed[v] or d != current[v]:
            continue
        placed[v] = 1
        append(v)
        for u in preds[v]:
            r = remaining[u] - 1
            remaining[u] = r
            if r == 1:  # its one reader left now frees it (no gain: no key changes)
                g = gain.get(u)
                if g is None:
                    g = gain[u] = mem[u] if frees is None or frees(u) else 0
                if not g:
                    continue
                for w in succs[u]:
                    if w in need and not placed[w] and missing[w] == 0:
                        d = current[w] = current[w] - g
                        push(heap, (d, rank[w], w))
        for w in succs[v]:
            if w in need:
                m = missing[w] - 1
                missing[w] = m
                if m == 0:
                    d = current[w] = delta(w)
                    push(heap, (d, rank[w], w))
    return order
