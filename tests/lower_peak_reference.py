"""A frozen copy of min-memory's peak lowering as of r11-rand's start (remat_cli/strategies/
min_memory.py's ``lower_peak``, ``_lowering``, ``_peak_score``, ``_idle_at_peak`` and
``_evict``), the reference the faster lowering must equal (tests/test_lower_peak_same.py):
the same schedule, evictions and steps spent, paused or not. Not used by the tool."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.strategies.min_memory import (
    PEAK_BLOCK_STEPS_PER_NODE,
    PEAK_TRIES,
    _ancestor_bits,
    _count_limit,
    _recompute,
    _resident_before,
    _stopped,
    _unfolded_computes,
    tree_numbers,
)

__all__ = ["lower_peak"]


def lower_peak(graph: Graph, schedule: Schedule, max_steps: int, deadline: float | None = None) -> tuple[Schedule, int, int]:
    """The schedule with values idle at its peak recomputed instead of held, how many, and
    the steps rebuilt to find it.

    One round: at the (first) step of largest memory, take the resident values that step
    does not read, largest first; for such a value u, free it right after its last read
    before the peak and, if a later step reads it before the schedule frees it, insert
    before that read a recomputation of u from what is resident there (:func:`_recompute`:
    the unfolded-tree recursion of :func:`scratch_schedule`, or each missing ancestor once;
    it frees its temporaries and nothing else). The result is valid whenever the input is:
    u is not read while it is gone, and every compute of the inserted block has its inputs
    resident. Of the trials that lower the peak, or keep it and attain it at fewer steps,
    the lowest (then the cheapest) is kept; at most ``PEAK_TRIES`` values per round, rounds
    until none helps, the peak is LB, or ``max_steps`` steps were rebuilt (blocks given up
    included, ``PEAK_BLOCK_STEPS_PER_NODE``) in all. Anytime: past ``deadline`` (a
    ``time.perf_counter()`` value, looked at after each trial) it returns the rounds done
    and the best trial of the round under way (:func:`_lowering`, which pauses there).
    Cost: O(schedule length) numpy work per value tried, plus the inserted block.
    A heuristic: no optimality is claimed."""
    lowering = _lowering(graph, schedule, max_steps, [deadline, None])
    try:
        return next(lowering)  # paused at the deadline
    except StopIteration as done:
        return done.value


def _lowering(graph: Graph, schedule: Schedule, max_steps: int, clock: list[Any]) -> Any:
    """:func:`lower_peak` as a generator that pauses at the deadline ``clock[0]`` (read at
    each look; the caller may move it before resuming) or where the stop request
    ``clock[1]`` says so after a trial, yielding what it has then (the
    rounds done, with the best trial of the round under way: valid, usable now), and
    returns its result. Resumed, it starts the round under way again with the steps it had
    spent at its start, so its result is the one a run without a deadline returns."""
    mem = graph.mem.astype(np.int64)
    ws = graph.workspace.astype(np.int64)
    cost = graph.cost.astype(np.float64)
    mem_list = mem.tolist()
    preds = [set(p) for p in graph.pred_lists]
    succs = [np.asarray(sorted(set(q)), dtype=np.int64) for q in graph.succ_lists]
    su = tree_numbers(graph)
    order = [sorted(sorted(set(p)), key=lambda u: su[u] - mem_list[u], reverse=True) for p in graph.pred_lists]
    anc = _ancestor_bits(graph)  # to count an unfolded recomputation before making it
    floor = int(graph.lb) - graph.fixed_mem
    block_steps = PEAK_BLOCK_STEPS_PER_NODE * int(graph.needed.sum())
    ops = schedule.ops.astype(np.int64)
    nodes = schedule.nodes.astype(np.int64)
    score = _peak_score(ops, nodes, mem, ws, cost)
    spent = 0
    evicted = 0

    def result(ops: np.ndarray, nodes: np.ndarray, evicted: int, spent: int) -> tuple[Schedule, int, int]:
        if not evicted:
            return schedule, 0, spent
        return Schedule(ops.astype(np.int8), nodes.astype(np.int32)), evicted, spent

    while spent < max_steps and score[0] > floor:
        at = score[3]
        begun = spent
        while True:  # the round, again from its start after each pause
            spent = begun
            better = None
            late = False
            for u in _idle_at_peak(ops, nodes, at, preds, mem_list)[:PEAK_TRIES]:
                if late:
                    break
                for memo in (True, False):
                    cap = min(max_steps - spent, max(len(ops), block_steps))
                    deadline = clock[0]
                    trial = _evict(ops, nodes, at, u, succs[u], order, cap, memo, deadline, anc)
                    late = (deadline is not None and time.perf_counter() > deadline) or _stopped(clock)
                    if trial is None:
                        spent += cap
                        if late:
                            break
                        continue
                    spent += len(trial[0])
                    got = _peak_score(trial[0], trial[1], mem, ws, cost)
                    key = (got[0], got[1], got[2])
                    if got[:2] < score[:2] and (better is None or key < better[2]):
                        better = (trial, got, key)
                    if spent >= max_steps or late:
                        break
            if not late:
                break
            yield result(*better[0], evicted + 1, spent) if better is not None else result(ops, nodes, evicted, spent)
        if better is None:
            break
        (ops, nodes), score, _ = better
        evicted += 1
    return result(ops, nodes, evicted, spent)


def _peak_score(ops: np.ndarray, nodes: np.ndarray, mem: np.ndarray, ws: np.ndarray, cost: np.ndarray) -> tuple[int, int, float, int]:
    """(largest memory at a compute step, how many compute steps reach it, the total cost,
    the first step at the peak); activation bytes only (fixed memory is the same at every step)."""
    comp = ops == COMPUTE
    size = mem[nodes]
    delta = np.where(comp, size, -size)
    before = np.cumsum(delta) - delta
    here = np.where(comp, before + size + ws[nodes], -1)
    at = int(np.argmax(here))
    peak = int(here[at])
    return peak, int(np.count_nonzero(here == peak)), float(cost[nodes[comp]].sum()), at


def _idle_at_peak(ops: np.ndarray, nodes: np.ndarray, at: int, preds: list[set[int]], mem: list[int]) -> list[int]:
    """The values resident before step ``at`` that it does not read, largest first."""
    reads = preds[int(nodes[at])]
    resident = _resident_before(ops, nodes, at).tolist()
    return sorted((u for u in resident if u not in reads and mem[u] > 0), key=lambda u: (-mem[u], u))


def _evict(
    ops: np.ndarray,
    nodes: np.ndarray,
    at: int,
    u: int,
    readers: np.ndarray,
    order: list[list[int]],
    cap: int,
    memo: bool,
    deadline: float | None = None,
    anc: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """``ops``/``nodes`` with ``u`` (resident and idle at step ``at``) freed after its last
    read before ``at`` and recomputed before its first read after (:func:`lower_peak`);
    None when the recomputation takes more than ``cap`` steps or runs past ``deadline``.
    ``readers``: u's consumers. ``anc``: the graph's ancestor bit sets
    (:func:`_ancestor_bits`), to count an unfolded recomputation (without ``memo``) before
    making it: its steps are twice its computes less one (each value it makes but u is
    freed once), so one that passes ``cap`` is None at once (on bert most of min-memory's
    time went to recomputations given up at their cap)."""
    mine = np.flatnonzero(nodes == u)
    start = int(mine[(mine < at) & (ops[mine] == COMPUTE)].max())
    later = mine[mine > at]
    end = int(later[0]) if later.size else len(ops)  # the free that closes this stay, if any
    reads = np.flatnonzero((ops == COMPUTE) & np.isin(nodes, readers))
    before = reads[(reads > start) & (reads < at)]
    last = int(before[-1]) if before.size else start
    after = reads[(reads > at) & (reads < end)]
    free = np.asarray([FREE]), np.asarray([u])
    if not after.size:  # idle until freed: free it early, drop the late free
        return (
            np.concatenate([ops[: last + 1], free[0], ops[last + 1 : end], ops[end + 1 :]]),
            np.concatenate([nodes[: last + 1], free[1], nodes[last + 1 : end], nodes[end + 1 :]]),
        )
    nxt = int(after[0])
    resident = set(_resident_before(ops, nodes, nxt).tolist())
    resident.discard(u)
    if not memo and anc is not None:
        held = 0
        for w in resident:
            held |= 1 << w
        computes = _unfolded_computes([u], held, order, anc, (cap + 1) // 2, _count_limit(len(anc), cap))
        if computes is not None and 2 * computes - 1 > cap:
            return None
    block = _recompute(u, resident, order, cap, memo, deadline)
    if block is None:
        return None
    return (
        np.concatenate([ops[: last + 1], free[0], ops[last + 1 : nxt], np.asarray(block[0], np.int64), ops[nxt:]]),
        np.concatenate([nodes[: last + 1], free[1], nodes[last + 1 : nxt], np.asarray(block[1], np.int64), nodes[nxt:]]),
    )
