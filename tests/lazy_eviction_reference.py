"""A frozen copy of remat_cli/strategies/evict.py's ``lazy_eviction`` as of 0414331 (a
replay of every step with a candidacy state per value), the reference the faster round
(computes only, candidates read off the frees at each eviction) must equal step for step
(tests/test_lazy_eviction_same.py). Not used by the tool."""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule

__all__ = ["lazy_eviction"]

#: Steps a round of lazy eviction replays between two looks at its deadline.
DEADLINE_EVERY = 8192


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
