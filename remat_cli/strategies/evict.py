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

Cost: O(steps · log steps) per round.
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from remat_cli.algorithms.segments import prune_unread, schedule_from_sequence
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule

__all__ = ["memlimit_pass", "cleanup", "lazy_eviction"]

#: Steps a round of lazy eviction replays between two looks at its deadline.
DEADLINE_EVERY = 8192


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
    kept = prune_unread(graph, schedule.compute_nodes.tolist())
    # free each instance right after its last read (or its own compute when never read)
    return schedule_from_sequence(graph, kept)


def lazy_eviction(graph: Graph, schedule: Schedule, limit: int, deadline: float | None = None) -> Schedule | None:
    """One round of lazy eviction of ``schedule`` under ``limit`` bytes (fixed included);
    see the module docstring. Frees become eviction candidates, recomputes of resident
    values are dropped, candidates are evicted only when the next compute needs room.
    None once ``deadline`` has passed (looked at every ``DEADLINE_EVERY`` steps)."""
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    n = graph.n
    ops = schedule.ops.tolist()
    nodes = schedule.nodes.tolist()
    last_touch = _last_touch(graph, schedule)

    state = [0] * n  # 0 gone, 1 resident, 2 resident and an eviction candidate
    stamp = [0] * n  # bumped at every change of candidacy: a heap entry is live iff its stamp is
    # the heaps hold one int per entry, ordered as the tuple it stands for (ints compare
    # faster than tuples): (last touch, stamp, v) in `dead`, values no later step needs,
    # as ((last touch + 1)·S + stamp)·n + v; (cost per byte, -mem, stamp, v) in `cheap` as
    # (rank·S + stamp)·n + v, rank the dense rank of (cost per byte, -mem) (made once per
    # graph). S bounds the stamps: a bump per step at most, and one per eviction (fewer
    # than the steps)
    span = 2 * len(ops) + 2  # S
    rank = graph.derived("memory-limit pass: eviction ranks", lambda: _eviction_ranks(graph))
    dead: list[int] = []
    cheap: list[int] = []
    cur = graph.fixed_mem
    out_ops: list[int] = []  # the steps kept, appended directly (no builder calls: hot loop)
    out_nodes: list[int] = []

    # new candidates wait here (v; the step it became one in `since`) and go into their
    # heap only when an eviction needs the heaps: most are taken back first (the value
    # is computed again while resident), and those never reach a heap; one that became a
    # candidate twice since the last eviction enters once, with its current stamp. The
    # heaps then hold the same live entries as with an immediate push, and their keys are
    # distinct, so the evictions are the same.
    pending: list[int] = []
    since = [0] * n  # the step at which each candidate became one
    queued = [-1] * n  # the stamp with which it last entered a heap
    push, pop = heapq.heappush, heapq.heappop
    wait, keep_op, keep_node = pending.append, out_ops.append, out_nodes.append
    steps = len(ops)
    # chunks of DEADLINE_EVERY steps (one without a deadline); the clock is looked at
    # before each but the first
    chunk = DEADLINE_EVERY if deadline is not None else max(steps, 1)
    for start in range(0, steps, chunk):
        if start and time.perf_counter() > deadline:  # type: ignore[operator]
            return None
        end = min(start + chunk, steps)
        for pos, v, op in zip(range(start, end), nodes[start:end], ops[start:end]):
            s = state[v]
            if op:  # FREE: it becomes a candidate
                if s == 1:
                    state[v] = 2
                    stamp[v] += 1
                    since[v] = pos
                    wait(v)
                continue
            if s:  # still resident: the recompute is not needed
                if s == 2:
                    state[v] = 1
                    stamp[v] += 1
                continue
            need = mem[v] + ws[v]
            if cur + need > limit:
                if pending:
                    for u in pending:
                        if state[u] != 2 or queued[u] == (st := stamp[u]):
                            continue  # no longer a candidate, or queued already
                        queued[u] = st
                        at = since[u]
                        # one heap per candidate: a value no later step touches is evicted
                        # from `dead` before `cheap` is ever read; any other is computed again
                        # (the input frees it before its next use) or evicted, either way
                        # before it would be dead
                        lt = last_touch[u]
                        if lt < at:
                            push(dead, ((lt + 1) * span + st) * n + u)
                        else:
                            push(cheap, (rank[u] * span + st) * n + u)
                    pending.clear()
                now = (pos + 1) * span * n  # a dead key below it: last touch before pos
                while cur + need > limit:
                    if dead and dead[0] < now:  # no later step reads or computes it
                        key = pop(dead)
                        u = key % n
                        if stamp[u] != key // n % span:
                            continue
                    else:
                        while cheap:
                            key = cheap[0]
                            u = key % n
                            if stamp[u] == key // n % span:
                                break
                            pop(cheap)
                        if not cheap:
                            break  # soft limit: nothing left to evict
                        pop(cheap)
                    state[u] = 0  # evict u
                    stamp[u] += 1
                    cur -= mem[u]
                    keep_op(FREE)
                    keep_node(u)
            keep_op(COMPUTE)
            keep_node(v)
            state[v] = 1
            cur += mem[v]
    return Schedule(np.asarray(out_ops, dtype=np.int8), np.asarray(out_nodes, dtype=np.int32))


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


def _last_touch(graph: Graph, schedule: Schedule) -> list[int]:
    """Per node, the position (step index) of the last compute step that computes it or
    reads it, -1 if none: vectorised (one pass over the computes' CSR input rows)."""
    compute_pos = np.flatnonzero(schedule.ops == COMPUTE)
    computed = schedule.nodes[compute_pos].astype(np.int64)
    ptr = graph.pred_ptr
    indeg = ptr[computed + 1] - ptr[computed]
    read_pos = np.repeat(compute_pos, indeg)
    offset = np.repeat(ptr[computed] - np.cumsum(indeg) + indeg, indeg)
    read = graph.pred_idx[offset + np.arange(read_pos.size, dtype=np.int64)]
    last = np.full(graph.n, -1, dtype=np.int64)
    np.maximum.at(last, computed, compute_pos)
    np.maximum.at(last, read, read_pos)
    return last.tolist()
