"""algorithms.orders: the memory-greedy order against a plain reference.

The order is the loop the recursion and store-all rely on; its fast form (a value's
``frees`` asked once, hoisted heap calls) must give the reference's order exactly, on
whole graphs and on sub-problems with values the caller keeps.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Collection, MutableSequence, Sequence

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms.orders import memory_greedy_order
from remat_cli.training import checkmate_training_graph


def _reference_order(
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

    def delta(v: int) -> int:
        d = mem[v]
        for u in preds[v]:
            if remaining[u] == 1 and (frees is None or frees(u)):
                d -= mem[u]
        return d

    heap: list[tuple[int, int, int]] = []  # (delta, rank, v)
    for v in need:
        if missing[v] == 0:
            current[v] = delta(v)
            heap.append((current[v], rank[v], v))
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        d, _, v = heapq.heappop(heap)
        if placed[v] or d != current[v]:
            continue
        placed[v] = 1
        order.append(v)
        for u in preds[v]:
            remaining[u] -= 1
            if remaining[u] == 1:  # its one reader left now frees it
                for w in succs[u]:
                    if w in need and not placed[w] and missing[w] == 0:
                        current[w] = delta(w)
                        heapq.heappush(heap, (current[w], rank[w], w))
        for w in succs[v]:
            if w in need:
                missing[w] -= 1
                if missing[w] == 0:
                    current[w] = delta(w)
                    heapq.heappush(heap, (current[w], rank[w], w))
    return order


def _graph(kind: str, n: int, seed: int):
    if kind == "grid":
        g = G.grid(3, max(2, n // 3))
    elif kind == "skip":
        g = G.skip_chain(n, skip=2 + seed % 3)
    else:
        g = G.random_dag(n, p=0.25, seed=seed)
    rng = np.random.default_rng(seed)
    g = g.with_arrays(mem=rng.integers(0, 10, g.n))
    return checkmate_training_graph(g) if seed % 2 else g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["grid", "skip", "dag"]), st.integers(3, 30), st.integers(0, 10_000), st.floats(0.05, 1.0))
def test_memory_greedy_order_is_the_reference_order(kind: str, n: int, seed: int, share: float) -> None:
    """Whole graphs (no ``frees``) and random sub-problems (a random share of the nodes,
    the dense and the dict-counter paths, a random set of kept values) give the reference's
    order, node for node."""
    g = _graph(kind, n, seed)
    preds, succs, mem, rank = g.pred_lists, g.succ_lists, g.mem.tolist(), g.topo_rank.tolist()
    rng = np.random.default_rng(seed)
    every = set(range(g.n))
    assert memory_greedy_order(every, preds, succs, mem, rank) == _reference_order(every, preds, succs, mem, rank)
    need = {v for v in range(g.n) if rng.random() < share}
    kept = {v for v in range(g.n) if rng.random() < 0.3}

    def frees(u: int) -> bool:
        return u not in kept

    got = memory_greedy_order(need, preds, succs, mem, rank, frees)
    assert got == _reference_order(need, preds, succs, mem, rank, frees)
    assert sorted(got) == sorted(need)
