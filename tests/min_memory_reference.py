"""A frozen copy of min-memory's recursions as of d23b961 (remat_cli/strategies/
min_memory.py's ``tree_numbers``, ``min_memory_schedule`` and ``scratch_schedule``), the
reference their faster loops must equal (tests/test_min_memory_same.py): the same steps,
the same None past the cap and the same turn at which the cap was passed. Not used by the
tool."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.strategies.min_memory import DEADLINE_EVERY, _Stopped

__all__ = ["min_memory_schedule", "scratch_schedule", "tree_numbers"]


def tree_numbers(graph: Graph) -> list[int]:
    """Per node, the Sethi–Ullman number of the unfolded tree: the peak (activation bytes)
    of computing it from nothing when every input is computed missing-input by missing-input
    in the order of :func:`min_memory_schedule`. O(n + edges · log)."""
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    preds = graph.pred_lists
    su = [0] * graph.n
    for v in graph.topo.tolist():
        ins = sorted(set(preds[v]), key=lambda u: su[u] - mem[u], reverse=True)
        held = 0
        peak = 0
        for u in ins:
            peak = max(peak, held + su[u])
            held += mem[u]
        su[v] = max(peak, held + mem[v] + ws[v])
    return su


def min_memory_schedule(
    graph: Graph,
    targets: list[int],
    memo: bool,
    max_computes: int,
    drop: frozenset[int] = frozenset(),
    deadline: float | None = None,
    turns: list[int] | None = None,
) -> Schedule | None:
    """Compute ``targets`` in this order as the module docstring says (``memo``: the dag
    variant); targets in ``drop`` are not kept but recomputed on demand like the other
    values. None when that takes more than ``max_computes`` computes; raises
    :class:`_Stopped` past ``deadline`` (a ``time.perf_counter()`` value).

    ``turns``: where None is returned, how many targets had had their turn (the one under
    way included) is appended to it. Up to there the run depends only on those targets, in
    that order, and on the set of all targets (which values are kept): a run of the same
    targets in an order with that same beginning (and the same ``memo``, ``drop`` and cap)
    passes the cap in the same turn (:func:`_variants` skips it)."""
    mem = graph.mem.tolist()
    preds = [sorted(set(p)) for p in graph.pred_lists]
    su = tree_numbers(graph)
    # each node's inputs by (size - tree number), ties by id: a frame's input order is these
    # with the resident ones first (a stable sort on (not resident, size - tree number))
    by_su = [sorted(p, key=lambda u: mem[u] - su[u]) for p in preds]
    n = graph.n
    is_target = bytearray(n)
    uses = [0] * n  # reads of each value by targets not yet computed
    for t in targets:
        is_target[t] = 1
        for u in preds[t]:
            uses[u] += 1
    resident = bytearray(n)
    fresh = bytearray(n)  # recomputed for the current target
    pins = [0] * n  # frames whose compute waits for this value
    wanted = [0] * n  # frames on the stack that will still ask for this value
    made: list[int] = []
    ops: list[int] = []  # the steps (a ScheduleBuilder's lists, appended to directly: hot loop)
    nodes: list[int] = []
    step, node = ops.append, nodes.append
    computes = 0

    def release(u: int) -> None:
        """Free ``u`` unless a target still to come reads it (targets are kept)."""
        if resident[u] and not pins[u] and not wanted[u] and not (is_target[u] and uses[u] > 0 and u not in drop):
            resident[u] = 0
            fresh[u] = 0
            step(FREE)
            node(u)

    cnt = [0] * n  # dag: consumers of a recomputed value still to be computed for this target
    for turn, t in enumerate(targets, 1):
        if resident[t]:
            continue
        if memo:
            todo = [t]
            seen = {t}
            while todo:
                v = todo.pop()
                for u in preds[v]:
                    if not resident[u]:
                        cnt[u] += 1
                        if u not in seen:
                            seen.add(u)
                            todo.append(u)
        # frames: [node, its inputs (resident first, then largest tree number first), next]
        stack: list[list[Any]] = [[t, None, 0]]
        while stack:
            frame = stack[-1]
            v = frame[0]
            ins = frame[1]
            if ins is None:
                ins = by_su[v]
                if len(ins) > 1:
                    ins = [u for u in ins if resident[u]] + [u for u in ins if not resident[u]]
                frame[1] = ins
                k = 0  # the resident inputs (first) are taken at once: wanted, then pinned
                for u in ins:
                    if resident[u]:
                        pins[u] += 1
                        k += 1
                    else:
                        wanted[u] += 1
                frame[2] = k
            k = frame[2]
            if k < len(ins):
                u = ins[k]
                if not resident[u]:
                    stack.append([u, None, 0])
                    continue
                pins[u] += 1
                wanted[u] -= 1
                frame[2] = k + 1
                continue
            stack.pop()
            step(COMPUTE)
            node(v)
            computes += 1
            if computes > max_computes:
                if turns is not None:
                    turns.append(turn)
                return None
            if deadline is not None and not computes % DEADLINE_EVERY and time.perf_counter() > deadline:
                raise _Stopped
            resident[v] = 1
            if v != t:
                fresh[v] = 1
                made.append(v)
            for u in ins:
                pins[u] -= 1
                if fresh[u]:
                    if memo:
                        cnt[u] -= 1
                        if cnt[u] > 0:
                            continue
                    # release(u), inlined (a fresh value is resident)
                    if not pins[u] and not wanted[u] and not (is_target[u] and uses[u] > 0 and u not in drop):
                        resident[u] = 0
                        fresh[u] = 0
                        step(FREE)
                        node(u)
        for u in preds[t]:
            uses[u] -= 1
        for u in made:
            release(u)
        made.clear()
        for u in preds[t]:
            release(u)
        release(t)
    return Schedule(np.asarray(ops, dtype=np.int8), np.asarray(nodes, dtype=np.int32))


def scratch_schedule(graph: Graph, targets: list[int], max_computes: int, deadline: float | None = None) -> Schedule | None:
    """Each target computed from nothing by Sethi–Ullman's recursion on the unfolded tree,
    then everything freed: no value outlives the compute that wanted it, so its peak is at
    most ``graph.fixed_mem + max(tree_numbers(graph)[t] for t in targets)``.

    To compute v, its distinct inputs are computed one at a time in the order of
    :func:`tree_numbers` (largest tree number − size first), each held until v is computed;
    an input that is already resident (held by a frame further up) is read, not recomputed
    (the model forbids computing a resident value, and reading it adds no memory). So the
    resident values at any step are a subset of the copies the unfolded tree holds, and its
    computes a subset of the tree's: the peak is at most the tree's. None past
    ``max_computes`` computes (the unfolding can be exponential on reconvergent graphs);
    :class:`_Stopped` past ``deadline``."""
    mem = graph.mem.tolist()
    su = tree_numbers(graph)
    order = [sorted(sorted(set(p)), key=lambda u: su[u] - mem[u], reverse=True) for p in graph.pred_lists]
    holds = [0] * graph.n  # frames whose compute waits for this resident value
    resident = bytearray(graph.n)
    ops: list[int] = []  # the steps, appended to directly (hot loop)
    nodes: list[int] = []
    step, node = ops.append, nodes.append
    computes = 0
    for t in targets:
        stack: list[list[int]] = [[t, 0]]  # [node, inputs held so far]
        while stack:
            frame = stack[-1]
            v, i = frame
            ins = order[v]
            if i < len(ins):
                u = ins[i]
                if resident[u]:
                    holds[u] += 1
                    frame[1] += 1
                else:
                    stack.append([u, 0])
                continue
            stack.pop()
            step(COMPUTE)
            node(v)
            computes += 1
            if computes > max_computes:
                return None
            if deadline is not None and not computes % DEADLINE_EVERY and time.perf_counter() > deadline:
                raise _Stopped
            resident[v] = 1
            for u in ins:
                holds[u] -= 1
                if not holds[u]:
                    resident[u] = 0
                    step(FREE)
                    node(u)
            if stack:
                holds[v] += 1
                stack[-1][1] += 1
            else:
                resident[v] = 0
                step(FREE)
                node(v)
    return Schedule(np.asarray(ops, dtype=np.int8), np.asarray(nodes, dtype=np.int32))
