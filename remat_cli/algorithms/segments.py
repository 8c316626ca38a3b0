"""Shared machinery of the checkpointing baselines (chen-*, chain-dp).

* :func:`split` separates the *forward part* (nodes that are not backward and have no
  backward ancestor: forward nodes and the loss) from the *backward part*;
* :func:`segment` cuts the forward part at its articulation points: positions of a
  topological order after which the only forward value still read later is the one just
  computed (Chen et al. 2016, §4.3). Consecutive pieces can be merged into groups;
* each backward node is attached to a segment (the latest segment whose forward values
  it reads), so the backward pass visits segments last to first;
* :func:`schedule_from_sequence` turns a *compute sequence* (nodes, repetitions allowed)
  into a schedule by freeing every computed instance right after its last reader.

Works on any DAG: a graph without backward nodes is all forward part; a graph without
articulation points is one segment. Every schedule built here still goes through the
simulator before it is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule

#: From this many computes :func:`schedule_from_sequence` lays its steps out by node
#: (:func:`_by_node`); below, its per-read search is faster (fewer numpy calls): 71 vs 97 µs
#: on 95 computes, even at about 2,000.
BY_NODE_COMPUTES = 2048

__all__ = ["Segmentation", "split", "segment", "schedule_from_sequence", "checkpoint_sequence", "prune_unread", "prune_and_lay_out"]


@dataclass(frozen=True)
class Segmentation:
    """The forward part cut into consecutive segments, with the backward nodes of each.

    ``nodes[k]`` are segment k's forward nodes in topological order (its last node is its
    *boundary*, the only value later forward nodes read); ``bwd[k]`` its backward nodes in
    an order that, concatenated from the last segment to the first, is topological.
    """

    forward: tuple[int, ...]
    nodes: tuple[tuple[int, ...], ...]
    bwd: tuple[tuple[int, ...], ...]

    @property
    def count(self) -> int:
        return len(self.nodes)

    def boundary(self, k: int) -> int:
        return self.nodes[k][-1]

    def backward_order(self) -> list[int]:
        return [b for k in reversed(range(self.count)) for b in self.bwd[k]]

    def merged(self, starts: Sequence[int]) -> Segmentation:
        """Group consecutive segments: group g covers segments ``starts[g] .. starts[g+1]-1``."""
        bounds = list(starts) + [self.count]
        nodes = tuple(tuple(v for k in range(a, b) for v in self.nodes[k]) for a, b in zip(bounds, bounds[1:]))
        bwd = tuple(tuple(v for k in reversed(range(a, b)) for v in self.bwd[k]) for a, b in zip(bounds, bounds[1:]))
        return Segmentation(self.forward, nodes, bwd)


def split(graph: Graph) -> tuple[list[int], list[int]]:
    """Needed nodes as (forward part, backward part), each in topological order.

    A graph without backward nodes is all forward part; so is one without forward nodes.
    """
    order = graph.needed_nodes.tolist()
    preds = graph.pred_lists
    kinds = graph.kinds
    is_bwd = [False] * graph.n
    for v in order:
        if kinds[v] == "backward" or any(is_bwd[u] for u in preds[v]):
            is_bwd[v] = True
    forward = [v for v in order if not is_bwd[v]]
    if not forward:  # nothing to checkpoint: schedule the graph as one forward part
        return order, []
    return forward, [v for v in order if is_bwd[v]]


def segment(graph: Graph, rule: str | int = "max") -> Segmentation:
    """Cut the forward part at every articulation point; attach backward nodes. O(V + E).

    A backward node goes to the latest (``rule="max"``) or earliest (``"min"``) segment
    whose forward values it reads, and never after a backward node it reads. An integer
    ``rule`` p switches: earliest for nodes reading a segment before p, latest otherwise.
    """
    forward, backward = split(graph)
    preds = graph.pred_lists
    pos = {v: k for k, v in enumerate(forward)}
    L = len(forward)
    # position k is a cut unless some forward edge u->w has pos(u) < k < pos(w)
    cover = np.zeros(L + 1, dtype=np.int64)
    for w in forward:
        pw = pos[w]
        for u in preds[w]:
            pu = pos[u]
            if pw - pu >= 2:
                cover[pu + 1] += 1
                cover[pw] -= 1
    covered = np.cumsum(cover)[:L]
    ends = [k for k in range(L) if covered[k] == 0 or k == L - 1]
    seg_of = {}
    nodes = []
    start = 0
    for idx, end in enumerate(ends):
        part = tuple(forward[start : end + 1])
        for v in part:
            seg_of[v] = idx
        nodes.append(part)
        start = end + 1
    count = len(nodes)
    bwd_seg: dict[int, int] = {}
    for b in backward:  # topological: backward predecessors are already placed
        fwd_in = [seg_of[u] for u in preds[b] if u in seg_of]
        if not fwd_in:
            s = count - 1
        elif rule == "min" or (isinstance(rule, int) and min(fwd_in) < rule):
            s = min(fwd_in)
        else:
            s = max(fwd_in)
        for u in preds[b]:
            if u in bwd_seg:
                s = min(s, bwd_seg[u])
        bwd_seg[b] = max(s, 0)
    bwd: list[list[int]] = [[] for _ in range(count)]
    for b in backward:
        bwd[bwd_seg[b]].append(b)
    return Segmentation(tuple(forward), tuple(nodes), tuple(tuple(x) for x in bwd))


def checkpoint_sequence(seg: Segmentation, kept: set[int]) -> list[int]:
    """Chen's schedule: the forward pass once, then per segment (last to first) recompute
    its forward nodes that are not ``kept`` and run its backward nodes. The last segment
    is not recomputed: its values are still there from the forward pass.
    """
    seq = list(seg.forward)
    last = seg.count - 1
    for k in reversed(range(seg.count)):
        if k != last:
            seq.extend(v for v in seg.nodes[k] if v not in kept)
        seq.extend(seg.bwd[k])
    return seq


def schedule_from_sequence(graph: Graph, seq: Sequence[int]) -> Schedule:
    """Schedule computing ``seq`` in order, freeing each instance right after its last reader.

    An instance of v is read by the computes of v's consumers up to v's next compute; one
    that nobody reads is freed at once. ``seq`` must compute each node's inputs before it.
    Vectorised (sorts, no loop per step): O((m + reads) log m) for m computes; from
    ``BY_NODE_COMPUTES`` computes laid out by :func:`_by_node` (the same steps), faster
    there (grid10000, 50k computes: 16 -> 10 ms) and slower on short sequences.
    """
    s = np.asarray(seq, dtype=np.int64).reshape(-1)
    m = int(s.size)
    if m == 0:
        return Schedule(np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.int32))
    if m >= BY_NODE_COMPUTES:
        return _by_node(graph, s)
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


def _by_node(graph: Graph, s: np.ndarray, sorted_events: _Sorted | None = None) -> Schedule:
    """:func:`schedule_from_sequence`'s steps for the (non-empty, int64) compute sequence
    ``s``, built with one stable sort by node of the reads and computes instead of a search
    per read and a three-key sort of the steps: the bare recursion's 175,000 computes on
    grid1000 in 0.02 s instead of 0.05 s. ``sorted_events``: :func:`_sort_events` of ``s``
    made already (by :func:`prune_and_lay_out`).

    The reads and computes, in step order (at step p: the reads of p's inputs, then p's
    compute), sorted stably by node, put each read right after the instance it reads
    (the latest compute of that node before it: a valid ``seq`` computes a node before
    any step reads it). Where ``s`` is valid (every node's first event a compute) an
    instance's last read is the last event before the next compute in that order (its
    own step where none is a read); elsewhere the latest compute at or before each read
    is found and the reads' steps maxed per instance, as before. The frees, sorted stably
    by their step, then take their places: the k-th free due after step p lands at index
    k + p + 1."""
    m = int(s.size)
    ev = _sort_events(graph, s) if sorted_events is None else sorted_events
    events = ev.is_comp.size
    idx = np.int32 if events < 1 << 31 else np.int64
    pos_sorted = ev.pos_sorted(m, idx)
    comp_sorted = ev.comp_sorted
    if ev.valid:
        starts = np.flatnonzero(comp_sorted)  # the instances' runs, in sorted order
        ends = np.empty(starts.size, dtype=np.int64)
        ends[:-1] = starts[1:] - 1
        ends[-1] = events - 1
        last = np.empty(m, dtype=idx)
        last[pos_sorted[starts]] = pos_sorted[ends]
    else:
        latest = np.where(comp_sorted, np.arange(events, dtype=idx), -1).astype(idx, copy=False)
        np.maximum.accumulate(latest, out=latest)  # per event, the last compute at or before it
        reads = ~comp_sorted
        last = np.arange(m, dtype=idx)  # an instance nobody reads is freed at once
        np.maximum.at(last, pos_sorted[latest[reads]], pos_sorted[reads])
    by_step = np.argsort(last, kind="stable")  # frees by (step, instance)
    free_at = np.arange(m, dtype=np.int64) + last[by_step] + 1
    ops = np.zeros(2 * m, dtype=np.int8)  # COMPUTE is 0
    nodes = np.empty(2 * m, dtype=np.int32)
    ops[free_at] = FREE
    nodes[free_at] = s[by_step]
    computes = np.ones(2 * m, dtype=bool)
    computes[free_at] = False
    nodes[computes] = s
    return Schedule(ops, nodes)


def prune_and_lay_out(graph: Graph, seq: Sequence[int] | np.ndarray) -> Schedule:
    """``schedule_from_sequence(graph, prune_unread(graph, seq))`` (the memory-limit pass's
    clean-up), with one sort by node of the reads and computes shared by the look ahead of
    :func:`prune_unread` and the layout of :func:`_by_node` where ``seq`` is long and
    nothing in it is unread (the bare recursion: one sort instead of two)."""
    s = np.asarray(seq, dtype=np.int64).reshape(-1)
    if s.size < BY_NODE_COMPUTES:
        return schedule_from_sequence(graph, prune_unread(graph, s.tolist()))
    ev = _sort_events(graph, s)
    if _all_read(graph, s, ev):
        return _by_node(graph, s, ev)
    return schedule_from_sequence(graph, _prune_backward(graph, s.tolist()))


def prune_unread(graph: Graph, seq: Sequence[int]) -> list[int]:
    """The compute sequence ``seq`` without the computes whose value nobody reads before
    its next compute (the last compute of each target stays). One backward pass reaches the
    fixpoint of "delete unread computes, repeat": whether a compute is read depends only on
    the computes kept after it, which are decided first.

    From ``BY_NODE_COMPUTES`` computes, :func:`_all_read` first looks with one stable sort
    whether any compute is unread at all: when none is (the bare treewidth recursion's
    175,000 computes on grid1000: 7 ms instead of the pass's 21), the pass keeps every one
    (from the end, each compute is read by a kept one), and ``seq`` is the answer."""
    if len(seq) >= BY_NODE_COMPUTES:
        s = np.fromiter(seq, dtype=np.int64, count=len(seq))
        if _all_read(graph, s):
            return list(seq)
    return _prune_backward(graph, seq)


def _prune_backward(graph: Graph, seq: Sequence[int]) -> list[int]:
    """:func:`prune_unread`'s backward pass (no look ahead)."""
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


def _all_read(graph: Graph, s: np.ndarray, ev: _Sorted | None = None) -> bool:
    """Whether every compute of the (int64) sequence ``s`` is read before its node's next
    compute, or is the last compute of a target: then :func:`prune_unread` deletes nothing.
    ``ev``: :func:`_sort_events` of ``s`` where made already. As in :func:`_by_node`, the reads and computes
    in step order (at step p: the reads of p's inputs, then p's compute), sorted stably by
    node, put each read right after the instance it reads; an instance is read iff the
    event after it is a read of its node. False also where ``s`` reads a node before
    computing it (the pass then decides)."""
    ev = _sort_events(graph, s) if ev is None else ev
    events = ev.is_comp.size
    comp_sorted = ev.comp_sorted
    same_next = ev.same_next
    read_next = np.zeros(events, dtype=bool)  # the next event is of the same node and a read
    read_next[:-1] = same_next[:-1] & ~comp_sorted[1:]
    if not ev.valid:
        return False  # a read before any compute of its node
    unread = comp_sorted & ~read_next
    if not unread.any():
        return True
    target = np.zeros(graph.n, dtype=bool)
    target[graph.targets] = True
    # an unread compute stays only as the last compute of a target (no compute of it after)
    at = np.flatnonzero(unread)
    return bool(np.all(~same_next[at] & target[ev.node_sorted[at]]))


@dataclass(frozen=True)
class _Sorted:
    """The reads and computes of a compute sequence (:func:`_events`) sorted stably by
    node, with what :func:`_all_read` and :func:`_by_node` both read off them (made once
    for both by :func:`prune_and_lay_out`): each compute's in-degree and index among the
    events, which events are computes, the stable order by node, which sorted events are
    computes and their nodes, whether the next sorted event is of the same node, and
    whether every node's first event is a compute (no read before a compute: ``valid``)."""

    indeg: np.ndarray
    comp_at: np.ndarray
    is_comp: np.ndarray
    order: np.ndarray
    comp_sorted: np.ndarray
    node_sorted: np.ndarray
    same_next: np.ndarray
    valid: bool

    def pos_sorted(self, m: int, idx: type) -> np.ndarray:
        """Each sorted event's step (the index of its compute in the sequence)."""
        ev_pos = np.empty(self.is_comp.size, dtype=idx)
        ev_pos[self.comp_at] = np.arange(m, dtype=idx)
        ev_pos[~self.is_comp] = np.repeat(np.arange(m, dtype=idx), self.indeg)
        return ev_pos[self.order]


def _sort_events(graph: Graph, s: np.ndarray) -> _Sorted:
    """:class:`_Sorted` of the (non-empty, int64) compute sequence ``s``."""
    indeg, comp_at, is_comp, ev_node = _events(graph, s)
    order = np.argsort(ev_node, kind="stable")  # within a node, events stay in step order
    comp_sorted = is_comp[order]
    node_sorted = ev_node[order]
    same_next = np.zeros(is_comp.size, dtype=bool)  # the next event is of the same node
    same_next[:-1] = node_sorted[1:] == node_sorted[:-1]
    valid = bool(comp_sorted[0]) and not np.any(~comp_sorted[1:] & ~same_next[:-1])
    return _Sorted(indeg, comp_at, is_comp, order, comp_sorted, node_sorted, same_next, valid)


def _events(graph: Graph, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reads and computes of the (non-empty, int64) compute sequence ``s`` in step order
    (at step p: the reads of p's inputs, then p's compute), for :func:`_by_node` and
    :func:`_all_read`: each compute's in-degree, each compute's index among the events,
    which events are computes, and each event's node (16-bit where the ids fit: fewer pages
    to fault in, and numpy sorts such keys by radix)."""
    ptr = graph.pred_ptr
    indeg = ptr[s + 1] - ptr[s]
    comp_at = np.cumsum(indeg + 1) - 1  # each compute's index among the events
    events = int(comp_at[-1]) + 1
    is_comp = np.zeros(events, dtype=bool)
    is_comp[comp_at] = True
    ev_node = np.empty(events, dtype=np.uint16 if graph.n <= 1 << 16 else np.int64)
    ev_node[comp_at] = s
    offset = np.repeat(ptr[s] - np.cumsum(indeg) + indeg, indeg)  # the CSR rows, concatenated
    ev_node[~is_comp] = graph.pred_idx[offset + np.arange(events - s.size, dtype=np.int64)]
    return indeg, comp_at, is_comp, ev_node
