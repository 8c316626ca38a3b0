"""A frozen copy of the memory-limit pass as of 7c9fd41 (remat_cli/strategies/evict.py's
``memlimit_pass``, ``cleanup``, ``lazy_eviction`` and ``_last_touch``, with
remat_cli/algorithms/segments.py's ``prune_unread`` and ``schedule_from_sequence`` that
``cleanup`` calls), the reference the faster pass must equal step for step
(tests/test_memlimit_same.py). Not used by the tool."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence

import numpy as np

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule

__all__ = ["cleanup", "lazy_eviction", "memlimit_pass", "prune_unread", "schedule_from_sequence"]

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
    cost = graph.cost.tolist()
    n = graph.n
    ops = schedule.ops.tolist()
    nodes = schedule.nodes.tolist()
    last_touch = _last_touch(graph, schedule)
    per_byte = [cost[v] / mem[v] if mem[v] else math.inf for v in range(n)]

    state = [0] * n  # 0 gone, 1 resident, 2 resident and an eviction candidate
    stamp = [0] * n  # bumped at every change of candidacy: a heap entry is live iff its stamp is
    dead: list[tuple[int, int, int]] = []  # (last touch, stamp, v): values no later step needs
    cheap: list[tuple[float, int, int, int]] = []  # (cost per byte, -mem, stamp, v)
    cur = graph.fixed_mem
    out_ops: list[int] = []  # the steps kept, appended directly (no builder calls: hot loop)
    out_nodes: list[int] = []

    # new candidates wait here, (pos, stamp, v), and go into their heap only when an
    # eviction needs the heaps: most are taken back first (the value is computed again
    # while resident), and those never reach a heap. The heaps then hold the same live
    # entries as with an immediate push, and their keys are distinct, so the evictions
    # are the same.
    pending: list[tuple[int, int, int]] = []
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
                    st = stamp[v] + 1
                    stamp[v] = st
                    wait((pos, st, v))
                continue
            if s:  # still resident: the recompute is not needed
                if s == 2:
                    state[v] = 1
                    stamp[v] += 1
                continue
            need = mem[v] + ws[v]
            if cur + need > limit:
                if pending:
                    for at, st, u in pending:
                        if stamp[u] != st:
                            continue
                        # one heap per candidate: a value no later step touches is evicted
                        # from `dead` before `cheap` is ever read; any other is computed again
                        # (the input frees it before its next use) or evicted, either way
                        # before it would be dead
                        if last_touch[u] < at:
                            push(dead, (last_touch[u], st, u))
                        else:
                            push(cheap, (per_byte[u], -mem[u], st, u))
                    pending.clear()
                while cur + need > limit:
                    if dead and dead[0][0] < pos:  # no later step reads or computes it
                        _, st, u = pop(dead)
                        if stamp[u] != st:
                            continue
                    else:
                        while cheap and stamp[cheap[0][3]] != cheap[0][2]:
                            pop(cheap)
                        if not cheap:
                            break  # soft limit: nothing left to evict
                        u = pop(cheap)[3]
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


def schedule_from_sequence(graph: Graph, seq: Sequence[int]) -> Schedule:
    """Schedule computing ``seq`` in order, freeing each instance right after its last reader.

    An instance of v is read by the computes of v's consumers up to v's next compute; one
    that nobody reads is freed at once. ``seq`` must compute each node's inputs before it.
    Vectorised (sorts, no loop per step): O((m + reads) log m) for m computes.
    """
    s = np.asarray(seq, dtype=np.int64).reshape(-1)
    m = int(s.size)
    if m == 0:
        return Schedule(np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.int32))
    ptr = graph.pred_ptr
    indeg = ptr[s + 1] - ptr[s]
    reader = np.repeat(np.arange(m, dtype=np.int64), indeg)  # position of each read
    # the predecessors read at each position: CSR rows of seq's nodes, concatenated
    offset = np.repeat(ptr[s] - np.cumsum(indeg) + indeg, indeg)
    read = graph.pred_idx[offset + np.arange(reader.size, dtype=np.int64)].astype(np.int64)
    # the instance read: the latest compute of that node before the reader
    stride = m + 1
    keys = s * stride + np.arange(m, dtype=np.int64)  # increasing within a node
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    instance = order[np.searchsorted(sorted_keys, read * stride + reader) - 1]
    last = np.arange(m, dtype=np.int64)  # an instance nobody reads is freed at once
    np.maximum.at(last, instance, reader)
    # steps: compute p, then the frees due at p in the order of their instances
    step_pos = np.concatenate([np.arange(m, dtype=np.int64), last])
    step_kind = np.concatenate([np.zeros(m, dtype=np.int64), np.ones(m, dtype=np.int64)])
    step_tie = np.concatenate([np.zeros(m, dtype=np.int64), np.arange(m, dtype=np.int64)])
    steps = np.lexsort((step_tie, step_kind, step_pos))
    ops = np.where(step_kind[steps] == 0, COMPUTE, FREE).astype(np.int8)
    nodes = np.concatenate([s, s])[steps].astype(np.int32)
    return Schedule(ops, nodes)


def prune_unread(graph: Graph, seq: Sequence[int]) -> list[int]:
    """The compute sequence ``seq`` without the computes whose value nobody reads before
    its next compute (the last compute of each target stays). One backward pass reaches the
    fixpoint of "delete unread computes, repeat": whether a compute is read depends only on
    the computes kept after it, which are decided first."""
    preds = graph.pred_lists
    pending = [False] * graph.n  # a target whose last compute is still to come (from the end)
    for t in graph.targets.tolist():
        pending[t] = True
    read = [False] * graph.n  # a kept compute after this point reads v before v's next one
    kept: list[int] = []
    for v in reversed(seq):
        if read[v] or pending[v]:
            kept.append(v)
            read[v] = False
            for u in preds[v]:
                read[u] = True
        pending[v] = False
    kept.reverse()
    return kept
