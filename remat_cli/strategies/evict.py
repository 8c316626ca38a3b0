"""A memory-limit pass over a schedule: keep what the limit allows, recompute only the rest.

Reference: the post-processing of twremat (nshepperd's Haskell implementation of Kumar et
al., NeurIPS 2019), described in /work/shared/research/seed-reference.md; written here
from that description, not from its code. The pass only ever *removes* computations
from the schedule it is given and never reorders them, so it needs a schedule that
already recomputes enough (the bare treewidth/pathwidth recursion, which peaks low).

1. **Clean up** (:func:`cleanup`): delete every compute whose value is freed before any
   step reads it (unless it is the last compute of a target that nothing else computes),
   repeatedly until nothing changes (one backward pass reaches that fixpoint), and move
   every free to right after the value's last use (a value never read again is freed right
   after it is computed).
2. **Lazy eviction** (:func:`lazy_eviction`): replay the computes in order. A scheduled
   free does not free; it makes the value an eviction candidate. A compute of a value
   that is still resident is dropped (and the value stops being a candidate until its
   next scheduled free). When the next compute would exceed the limit, candidates are
   evicted until it fits: first values that no later step reads or computes, then the
   one cheapest to recompute per byte. Evicting only candidates keeps the schedule
   valid: the input schedule frees a candidate before it reads it again, so it computes
   it again first, and that compute is kept because the value is gone.
3. Rounds of 1 and 2 until the schedule stops changing (at most ``rounds``).

Memory at every compute is at most max(limit, the input's memory at that compute): lazy
residency is a superset of the input's, and the extra values are all candidates, evicted
before anything goes over. So an input that fits the limit gives an output that fits;
otherwise the limit is soft as in twremat and the compute goes over. :func:`memlimit_pass` returns the schedule
either way; callers replay it with the simulator and use it only when it fits.

Cost per round: one stable sort of the steps by node (numpy; by radix for 16-bit ids), then
a Python loop over the computes it keeps (each value's first, and the next compute of each
value it evicts: the others find their value resident), which reads the frees only when it
evicts, with two heaps of at most one entry per value (O(log n) per heap operation, at most
one per free and one per eviction). The clean-up is one more such sort
(:func:`~remat_cli.algorithms.segments.prune_and_lay_out`).
"""

from __future__ import annotations

import heapq
import math
import time
from typing import Any

import numpy as np

from remat_cli.algorithms.segments import prune_and_lay_out
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule

__all__ = ["memlimit_pass", "cleanup", "lazy_eviction"]

#: Steps a round of lazy eviction replays between two looks at its deadline.
DEADLINE_EVERY = 8192
#: The eviction keys are made in int64 when they stay below this bound (else as Python's
#: integers, one by one).
KEY_BOUND = 1 << 62


def memlimit_pass(
    graph: Graph, schedule: Schedule, limit: int, *, rounds: int = 4, cleaned: bool = False, deadline: float | None = None
) -> Schedule:
    """twremat's memory-limit post-processing of ``schedule`` for a peak of ``limit`` bytes
    (fixed memory included). Returns a valid schedule with no more computes than the input
    (given a valid input); its peak may exceed ``limit`` when nothing can be evicted.
    ``cleaned``: ``schedule`` is already :func:`cleanup`'s output (the caller kept it).
    Anytime: past ``deadline`` (a ``time.perf_counter()`` value) the rounds done so far
    (none: the input cleaned up); a round looks at it every ``DEADLINE_EVERY`` steps."""
    current = schedule if cleaned else cleanup(graph, schedule)
    for _ in range(max(1, rounds)):
        evicted = lazy_eviction(graph, current, limit, deadline)
        if evicted is None:
            break  # past the deadline within the round
        nxt = cleanup(graph, evicted)
        if len(nxt) == len(current) and (nxt.nodes == current.nodes).all() and (nxt.ops == current.ops).all():
            break
        current = nxt
    return current


def cleanup(graph: Graph, schedule: Schedule) -> Schedule:
    """Delete computes whose value is never read before it is freed (keeping one compute
    of every target) and free every value right after its last read; never adds a step."""
    # then free each instance right after its last read (or its own compute when never read)
    return prune_and_lay_out(graph, schedule.compute_nodes)


def lazy_eviction(graph: Graph, schedule: Schedule, limit: int, deadline: float | None = None) -> Schedule | None:
    """One round of lazy eviction of ``schedule`` (a valid schedule) under ``limit`` bytes
    (fixed included); see the module docstring. Frees become eviction candidates, recomputes
    of resident values are dropped, candidates are evicted only when the next compute needs
    room. None once ``deadline`` has passed (looked at every ``DEADLINE_EVERY`` steps).

    Only the kept computes are replayed one by one. In a valid schedule each value's steps
    alternate compute, free, compute, …, so a free always makes a resident value a
    candidate and a compute either is kept (the value is gone: never computed, or evicted
    since its last compute, and then this is the value's next compute after the eviction)
    or takes a candidate back; the frees are read only when an eviction needs the
    candidates: those since the last eviction whose value is not computed again before it,
    each with its heap key made beforehand (:func:`_frees`)."""
    mem = graph.mem.tolist()
    needs = [m + w for m, w in zip(mem, graph.workspace.tolist())]  # a compute's bytes (Python ints)
    n = graph.n
    steps = len(schedule)
    comp = schedule.ops == COMPUTE
    cpos = np.flatnonzero(comp)
    # per compute, its value and the frees before it; read only at the kept computes, so as
    # memoryviews (each read gives a Python int) instead of lists made of every compute
    cnode = memoryview(schedule.nodes[cpos].astype(np.int64))
    fbefore = memoryview(cpos - np.arange(cpos.size))
    fnode, fnext, fkey, dead_at, first_computes = _frees(graph, schedule, comp)
    gone = len(fnode)  # a free index whose "next compute" (-1) has always come: no candidacy
    dead_at.append(gone + 1)  # (past every free: ends the look for last frees)
    # the computes to keep, as far as known: each value's first, and (set at its eviction)
    # the next compute of each value evicted from `cheap`; every other compute finds its
    # value resident (computed before, not evicted since) and is dropped, so the loop goes
    # from one kept compute to the next with bytearray.find (C) instead of visiting each
    flags = np.zeros(cpos.size, dtype=np.uint8)
    flags[first_computes] = 1
    kept_at = bytearray(flags.tobytes())
    find = kept_at.find

    # Two heaps of keys (:func:`_frees`): `dead` holds the candidacies no later step reads or
    # computes (a value's last free), each evicted before `cheap` is read; `cheap` the others
    # (each computed again later, unless evicted first). `cheap` holds one entry per value at
    # most (those whose ``latest`` is not ``gone``): the key of its candidacy now or of an
    # earlier one (smaller: the stamps grow, the rank is the value's), so every candidate's
    # key is at least its entry's and an entry on top that is its value's candidacy now is
    # the least candidate's; one that is older gives way to it, one of a value that is no
    # candidate now leaves.
    dead: list[int] = []
    cheap: list[int] = []
    # per value, the free of its latest candidacy in `cheap`; gone: it has no entry there
    # (evicted, or its entry left as no candidate: then it is read again only once a later
    # free of the value has set it)
    latest = [gone] * n
    cur = graph.fixed_mem
    out: list[int] = []  # the steps kept: v for compute v, ~v for free v (no builder calls: hot loop)
    seen = 0  # the frees before this index have been looked at
    seen_dead = 0  # and the first of the last frees not yet in `dead`
    push, pop, replace = heapq.heappush, heapq.heappop, heapq.heapreplace
    keep = out.append
    # chunks of DEADLINE_EVERY steps (one without a deadline); the clock is looked at
    # before each but the first
    chunk = DEADLINE_EVERY if deadline is not None else max(steps, 1)
    lo = 0
    for start in range(0, steps, chunk):
        if start and time.perf_counter() > deadline:  # type: ignore[operator]
            return None
        hi = int(np.searchsorted(cpos, min(start + chunk, steps)))  # the computes before that step
        ci = find(1, lo, hi)
        while ci >= 0:
            v = cnode[ci]
            room = limit - needs[v]  # (the compute fits while cur <= room)
            if cur > room:
                upto = fbefore[ci]
                for k in range(seen, upto):  # the candidacies begun since the last eviction
                    if fnext[k] > ci:  # (else computed again since; or a last free: below)
                        u = fnode[k]
                        if latest[u] == gone:
                            push(cheap, fkey[k])
                        latest[u] = k
                seen = upto
                while dead_at[seen_dead] < upto:
                    push(dead, fkey[dead_at[seen_dead]])
                    seen_dead += 1
                while cur > room:
                    if dead:  # no later step reads or computes it: always a candidate
                        u = pop(dead) % n
                    else:
                        while cheap:
                            key = cheap[0]
                            u = key % n
                            k = latest[u]
                            if fnext[k] <= ci:
                                pop(cheap)  # no longer a candidate in `cheap`
                                latest[u] = gone
                            elif fkey[k] == key:
                                break  # the least candidate
                            else:
                                replace(cheap, fkey[k])  # its candidacy now (a larger key)
                        if not cheap:
                            break  # soft limit: nothing left to evict
                        pop(cheap)
                        latest[u] = gone
                        kept_at[fnext[k]] = 1  # u's next compute finds it gone
                    cur -= mem[u]  # evict u
                    keep(~u)
            keep(v)
            cur += mem[v]
            ci = find(1, ci + 1, hi)
        lo = hi
    kept = np.asarray(out, dtype=np.int64)
    frees = kept < 0
    return Schedule(np.where(frees, FREE, COMPUTE).astype(np.int8), np.where(frees, ~kept, kept).astype(np.int32))


def _frees(graph: Graph, schedule: Schedule, comp: np.ndarray) -> tuple[Any, ...]:
    """The frees of ``schedule`` (valid; ``comp``: which steps are computes) for
    :func:`lazy_eviction`, in step order: their values, the index among the computes of
    the value's next compute (-1 where no later step reads or computes the value: its last
    free), their heap keys (these two with one more entry, -1: no candidacy); the
    indices of the last frees, whose keys go to ``dead``; and the index among the computes
    of each node's first compute (an array). The first three are memoryviews of int64
    arrays (a read gives a Python int; the keys a list where they pass int64): the round
    reads about half of them, and a list of every free took longer to make (on grid1000's
    bare run, 175k frees, about 5 ms per list) than all its reads through a view.

    A key is one int ordered as the tuple it stands for (ints compare faster than
    tuples): (last touch, stamp, v) in ``dead`` as ((last touch + 1)·S + stamp)·n + v;
    (cost per byte, -mem, stamp, v) in ``cheap`` as (rank·S + stamp)·n + v, rank the
    dense rank of (cost per byte, -mem) (made once per graph). The stamp counts the
    changes of v's candidacy (each free and each compute of a candidate; each eviction,
    which a kept compute follows) before the free: the steps of v before it, less one.
    S = 2·steps + 2 bounds the stamps. One stable sort of the steps by node (by radix
    where the ids fit 16 bits); the keys in int64 where they fit. (A free's index is the
    number of frees before its step: :func:`lazy_eviction` counts them per compute.)"""
    nodes = schedule.nodes
    steps = nodes.size
    key = nodes.astype(np.uint16) if graph.n <= 1 << 16 else nodes.astype(np.int64)
    order = np.argsort(key, kind="stable")  # each node's steps together, in step order
    by_node = nodes[order]
    first = np.ones(steps, dtype=bool)
    first[1:] = by_node[1:] != by_node[:-1]
    starts = np.flatnonzero(first)
    before = np.arange(steps, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, steps)))
    nxt = np.full(steps, -1, dtype=np.int64)  # the node's next step
    same = ~first[1:]
    nxt[order[:-1][same]] = order[1:][same]
    stamps = np.empty(steps, dtype=np.int64)
    stamps[order] = before - 1  # (at a free: the node's steps before it, less one)
    free_at = np.flatnonzero(~comp)
    fnodes = nodes[free_at].astype(np.int64)
    at = np.flatnonzero(comp[order])  # the computes, by node, each node's in step order
    node = by_node[at].astype(np.int64)
    lt = _last_touch(graph, order, at, node)[fnodes]
    is_dead = lt < free_at  # (then no later compute: its next step is none, -1)
    rank = np.asarray(graph.derived("memory-limit pass: eviction ranks", lambda: _eviction_ranks(graph)), dtype=np.int64)
    n, span = graph.n, 2 * steps + 2
    first_part = np.where(is_dead, lt + 1, rank[fnodes])  # the key's leading field
    st = stamps[free_at]
    keys: Any
    if (int(first_part.max(initial=0)) + 1) * span * n < KEY_BOUND:
        keys = memoryview(np.append((first_part * span + st) * n + fnodes, -1))
    else:  # (Python's integers)
        keys = [(a * span + s) * n + u for a, s, u in zip(first_part.tolist(), st.tolist(), fnodes.tolist())]
        keys.append(-1)
    nf = nxt[free_at]
    # per step, the index of the last compute at or before it (int32 sums run many times faster)
    cindex = np.cumsum(comp, dtype=np.int32 if steps < 1 << 31 else np.int64) - 1
    fnext = memoryview(np.append(np.where(nf >= 0, cindex[nf], -1).astype(np.int64), -1))  # (that compute's index)
    firsts = np.ones(at.size, dtype=bool)  # the first compute of its node
    firsts[1:] = node[1:] != node[:-1]
    return memoryview(fnodes), fnext, keys, np.flatnonzero(is_dead).tolist(), cindex[order[at[firsts]]]


def _eviction_ranks(graph: Graph) -> list[int]:
    """Per node, the dense rank of (cost per byte, -mem), cost per byte inf for an empty
    output: the cheap-first eviction order up to the stamp and the node
    (:func:`lazy_eviction`'s heap keys). Kept on the graph (it depends on nothing else)."""
    mem, cost = graph.mem.tolist(), graph.cost.tolist()
    keys = [(cost[v] / mem[v] if mem[v] else math.inf, -mem[v]) for v in range(graph.n)]
    rank = [0] * graph.n
    r, prev = 0, None
    for v in sorted(range(graph.n), key=keys.__getitem__):
        if prev is not None and keys[v] != prev:
            r += 1
        prev = keys[v]
        rank[v] = r
    return rank


def _last_touch(graph: Graph, order: np.ndarray, at: np.ndarray, node: np.ndarray) -> np.ndarray:
    """Per node, the position (step index) of the last compute step that computes it or
    reads it, -1 if none (int64); from the steps sorted stably by node (``order``) and where
    the computes are in that order (``at``) with their nodes (``node``). A compute of w reads every
    input of w, so a node's last read is the last compute of one of its successors: the
    latest compute of each node (the last of its computes in that order), then a maximum
    over the graph's edges instead of over every read of the schedule."""
    final = np.ones(at.size, dtype=bool)  # the last compute of its node
    final[:-1] = node[1:] != node[:-1]
    last = np.full(graph.n, -1, dtype=np.int64)
    last[node[final]] = order[at[final]]
    ptr = graph.succ_ptr
    src = np.repeat(np.arange(graph.n, dtype=np.int64), np.diff(ptr))
    touch = last.copy()
    np.maximum.at(touch, src, last[graph.succ_idx])
    return touch
