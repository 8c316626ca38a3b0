"""Frozen copy of the simulator's replay as of 9f4c28d (before its whole-array replay sorted
the events by radix): the reference that tests/test_simulate_same.py compares the tool's
simulator with. Do not edit: it is what the simulator must keep computing."""

from __future__ import annotations

import numpy as np

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import InvalidStep, Metrics, SimResult

#: Schedules of this many steps or more are checked with whole-array operations first
#: (:func:`_replay_arrays`); shorter ones, and any that breaks a rule, step by step.
ARRAY_STEPS = 256


def simulate(graph: Graph, schedule: Schedule, *, per_step: bool = False) -> SimResult:
    """Replay ``schedule`` on ``graph``; O(steps + edges), in numpy for long schedules.

    Memory at ``compute v`` is fixed + resident values + mem(v) + workspace(v); at
    ``free v`` it is what remains after the free. Returns the first rule broken, if any.
    """
    if len(schedule) >= ARRAY_STEPS:
        fast = _replay_arrays(graph, schedule, per_step)
        if fast is not None:
            return _finish(graph, schedule, *fast)
    return _replay_steps(graph, schedule, per_step)


def _replay_steps(graph: Graph, schedule: Schedule, per_step: bool) -> SimResult:
    """The replay step by step: the reference, and the one that names the first broken rule."""
    n = graph.n
    ops = schedule.ops.tolist()
    nodes = schedule.nodes.tolist()
    ids = graph.ids
    preds = graph.pred_lists
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    resident = bytearray(n)
    trace: list[int] | None = [] if per_step else None
    cur = graph.fixed_mem
    peak = cur
    peak_step = -1

    def fail(step: int, v: int, reason: str) -> SimResult:
        name = ids[v] if 0 <= v < n else str(v)
        return SimResult(None, InvalidStep(step, name, reason))

    for step, (op, v) in enumerate(zip(ops, nodes)):
        if not 0 <= v < n:
            return fail(step, v, f"node index {v} is not in the graph")
        if op == COMPUTE:
            if resident[v]:
                return fail(step, v, f"compute {ids[v]!r}: it is already resident")
            for u in preds[v]:
                if not resident[u]:
                    return fail(step, v, f"compute {ids[v]!r}: input {ids[u]!r} is not resident")
            now = cur + mem[v] + ws[v]
            if now > peak:
                peak = now
                peak_step = step
            cur += mem[v]
            resident[v] = 1
            if trace is not None:
                trace.append(now)
        elif op == FREE:
            if not resident[v]:
                return fail(step, v, f"free {ids[v]!r}: it is not resident")
            cur -= mem[v]
            resident[v] = 0
            if trace is not None:
                trace.append(cur)
        else:
            return fail(step, v, f"unknown step kind {op}")
    memory = None if trace is None else np.asarray(trace, dtype=np.int64)
    return _finish(graph, schedule, int(peak), peak_step, memory)


def _replay_arrays(graph: Graph, schedule: Schedule, per_step: bool) -> tuple[int, int, np.ndarray | None] | None:
    """(peak, peak step, per-step memory or None) of a schedule that breaks no rule of
    steps 1-2 (DESIGN §1), by whole-array operations; None when it breaks one (or might
    overflow 62 bits), which :func:`_replay_steps` then names. Same figures as the step
    by step replay: memory is a running sum, and a step's validity depends only on the
    previous step of the same node (compute and free alternate, compute first) and on the
    latest step of each input before it (a compute: resident)."""
    n = graph.n
    ops = np.asarray(schedule.ops)
    nodes = np.asarray(schedule.nodes, dtype=np.int64)
    steps = len(ops)
    mem, ws = graph.mem, graph.workspace
    if nodes.min() < 0 or nodes.max() >= n or not np.all((ops == COMPUTE) | (ops == FREE)):
        return None
    if graph.fixed_mem + float(mem.sum(dtype=np.float64)) + float(ws.max(initial=0)) >= 2.0**62:
        return None  # (hostile sizes: Python's integers, step by step)
    comp = ops == COMPUTE
    # each node's steps in order: compute first, then alternating
    order = np.argsort(nodes, kind="stable")
    by_node, by_op = nodes[order], comp[order]
    first = np.ones(steps, dtype=bool)
    first[1:] = by_node[1:] != by_node[:-1]
    if not np.all(by_op[first]) or np.any(by_op[1:][~first[1:]] == by_op[:-1][~first[1:]]):
        return None
    # every input of a compute resident: its latest step before is a compute
    at = np.flatnonzero(comp)
    v = nodes[at]
    deg = graph.pred_ptr[v + 1] - graph.pred_ptr[v]
    total = int(deg.sum())
    if total:
        offset = np.repeat(np.cumsum(deg) - deg, deg)
        inputs = graph.pred_idx[np.repeat(graph.pred_ptr[v], deg) + np.arange(total) - offset].astype(np.int64)
        key = by_node * steps + order  # sorted: by node, then step
        pos = np.searchsorted(key, inputs * steps + np.repeat(at, deg)) - 1
        if np.any(pos < 0) or np.any(by_node[np.maximum(pos, 0)] != inputs) or not np.all(by_op[np.maximum(pos, 0)]):
            return None
    size = mem[nodes]
    after = graph.fixed_mem + np.cumsum(np.where(comp, size, -size))
    trace = np.where(comp, after + ws[nodes], after)
    peak, peak_step = graph.fixed_mem, -1
    if at.size:
        top = int(trace[at].max())
        if top > peak:  # the first step that reaches it, as the step by step replay
            peak, peak_step = top, int(at[np.argmax(trace[at] == top)])
    return peak, peak_step, (trace.astype(np.int64) if per_step else None)


def _finish(graph: Graph, schedule: Schedule, peak: int, peak_step: int, memory: np.ndarray | None) -> SimResult:
    """Metrics of a schedule whose steps are valid, or the first target never computed."""
    n = graph.n
    ids = graph.ids

    def fail(step: int, v: int, reason: str) -> SimResult:
        return SimResult(None, InvalidStep(step, ids[v], reason))

    ops = schedule.ops
    computed_nodes = schedule.compute_nodes
    counts = np.bincount(computed_nodes, minlength=n) if computed_nodes.size else np.zeros(n, np.int64)
    missing = np.flatnonzero(counts[graph.targets] == 0)
    if missing.size:
        t = int(graph.targets[missing[0]])
        return fail(len(ops), t, f"target {ids[t]!r} is never computed")
    cost = float(counts @ graph.cost)
    base = graph.base_cost
    if base > 0 and counts.max(initial=0) <= 1 and np.array_equal(counts > 0, graph.needed):
        cost, overhead = base, 0.0  # each needed node once: exactly the base, not float noise
    elif base > 0:
        overhead = cost / base - 1.0
    else:
        overhead = 0.0 if cost == 0 else float("inf")
    computes = int(computed_nodes.size)
    metrics = Metrics(
        peak_bytes=int(peak),
        fixed_bytes=graph.fixed_mem,
        lower_bound_bytes=graph.lb,
        cost=cost,
        base_cost=base,
        overhead=overhead,
        computes=computes,
        recomputations=computes - int(np.count_nonzero(counts)),
        est_seconds=None if graph.seconds is None else float(counts @ graph.seconds),
        peak_step=peak_step,
        steps=len(ops),
    )
    return SimResult(metrics, None, memory)
