"""min-memory: the lowest peak first, whatever the recomputation costs.

Every other strategy starts from store-all and recomputes only what the budget forces;
near the lower bound they run out of room before they run out of ideas. This one starts
from the other end: **targets** (for a training graph, the backward nodes) are computed
once each, in a topological order, and kept until the last target that reads them; every
other value (the forward activations) is recomputed on demand, recursively from whatever
is resident, and freed again as soon as the compute that wanted it is done.

The recursion is Sethi–Ullman's (*The generation of optimal code for arithmetic
expressions*, JACM 1970) on the graph unfolded into a tree: to compute v, compute its
missing inputs one at a time, the one with the largest (peak to compute it − its size)
first, holding each until v is computed. Among the orders that finish one input before
starting the next, this is the one of least peak on a tree; on a DAG the unfolding
recomputes shared ancestors, which is the price of the memory.

Two variants of the recursion, each in two orders of the targets (the topological one
and the store-all plan's):

* ``tree``: a recomputed value is freed right after its consumer, unless a pending
  compute of the recursion still lists it as a missing input (so a value read twice by
  one operation, as a normalization reads its input and its statistics, is made once);
* ``dag``: each value a target needs is recomputed once for that target and freed after
  its last reader there (a store-all schedule of the target's missing ancestors).

Keeping every target until its last reader can hold large gradients for a long time (a
U-Net's skip gradients wait for the whole deeper backward pass). So each schedule that
peaks above the lower bound is improved in rounds: among the kept targets resident at
its peak step but not read there, the largest whose recomputation on demand (instead of
keeping it) lowers the peak is recomputed from then on; at most ``MAX_ROUNDS`` rounds of
``TRIES`` candidates, within a compute budget.

A fifth schedule keeps nothing: each target is computed from nothing by the pure
unfolded-tree recursion and everything is freed after it (:func:`scratch_schedule`). Its
peak is at most the largest tree number of a target; it costs far more, and it is the
lowest where kept targets (gradients held across the backward pass) set the others' peaks.

Last, the schedules before those rounds (and the fifth) are lowered, lowest peak first, by
:func:`lower_peak`: a value resident but idle at the peak step (a held gradient, a forward
value kept for a later reader) is freed after its last read before the peak and recomputed
from what is resident just before its next read (by the unfolded tree, or each missing
ancestor once); rounds while the peak goes down, within a budget of rebuilt steps shared by
the seeds (``PEAK_STEPS_PER_NODE`` per needed node, at most ``PEAK_STEPS``); a lowered
schedule is added as one more variant. This generalises the rounds above (which recompute
only targets, and only by rebuilding the schedule) and goes lower: on unet.onnx (batch 8) it
takes the peak from 1.145x LB (1.083x after the rounds) to 1.00001x LB, at a large
recomputation cost (about 1,000x the base cost: the recomputed gradients unfold the
backward pass as a tree; ``auto``'s polishing passes take it to +306% at a 404 MB budget,
1.00006x LB); on vit_b16 (sequence 128) from 1.022x to 1.021x LB. It adds at
most about 2 s per graph.

These schedules and the store-all plan (so that at the store-all peak the
plan costs the base cost, as every budget-driven strategy's must) are replayed by the
simulator; the cheapest that fits the budget is returned, the lowest peak when there is
no budget. They do not depend on the budget and are cached per graph (the dag runs share
their turns, :class:`TurnBlocks`; the making can pause at a deadline or a stop request
and resume where it paused, :func:`min_memory_variants`). Cost: the
schedules' length, at most ``MAX_COMPUTES_PER_NODE`` computes per needed node and
``MAX_COMPUTES`` in all (a chain of L layers costs O(L²); ``tree`` on reconvergent
branches may cost exponentially more: past the cap a variant is dropped; where a lower
bound on every variant's computes, :func:`least_computes`, passes the cap, none is run;
a variant whose target order begins with the turns in which the other order's run passed
the cap is not run either: it passes it in the same turn; the tree and from-scratch
variants are counted before they run, :func:`_tree_turn_past` and :func:`_scratch_past`,
and not run where the count passes the cap).

No optimality is claimed: it is a memory-first heuristic, and ``auto`` runs it only when
no other strategy fits the budget. Where its peak equals the largest-operation bound
``graph.lb``, that peak is the least of all valid schedules. Measured
(``scripts/bench_smallest.py``, batch 8): so on the U-Net and diamond samples, resnet18
and mobilenet_v2; 1.00001x LB on unet.onnx (1.083x before :func:`lower_peak`); on
random_dag 1.485x before the from-scratch variant, 1.230x with it; on the transformers at
sequence 128 within 1.04x (whose lower bounds are not known to be tight).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import Metrics, simulate
from remat_cli.strategies.base import NoOptions, RunContext, Strategy, StrategyResult
from remat_cli.units import fmt_bytes_exact

__all__ = [
    "STRATEGY",
    "chosen",
    "least_computes",
    "lower_peak",
    "min_memory_schedule",
    "min_memory_variants",
    "replayed",
    "scratch_schedule",
    "tree_numbers",
    "variants_made",
    "variants_so_far",
]

#: A variant that would compute more than this many times the graph's nodes is dropped.
MAX_COMPUTES_PER_NODE = 400
#: ... and any variant past this many computes (a few seconds of work).
MAX_COMPUTES = 2_000_000
#: Rounds of "recompute one more target instead of keeping it", and candidates per round.
MAX_ROUNDS = 12
TRIES = 8
#: ... while the schedules made so far hold fewer computes than this many per needed node
#: (or ``ROUNDS_COMPUTES`` in all, whichever is more).
ROUNDS_COMPUTES_PER_NODE = 200
ROUNDS_COMPUTES = 200_000
#: :func:`lower_peak`: values tried per round, and steps rebuilt and replayed in all (per
#: needed node, or ``PEAK_STEPS``, whichever is less).
PEAK_TRIES = 6
PEAK_STEPS_PER_NODE = 20_000
PEAK_STEPS = 3_000_000
#: ... and one recomputation block is given up past this many steps per needed node (or the
#: schedule's length, whichever is more); a block given up counts as that many steps.
PEAK_BLOCK_STEPS_PER_NODE = 2_500


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


def least_computes(graph: Graph, cap: int) -> int:
    """A lower bound on the computes of every variant (dag, tree, from scratch, either
    order of the targets), or some number above ``cap`` once the bound passes it.

    Both orders of the targets are topological, so each target gets its own turn, and
    at its start only targets are resident (everything recomputed for the previous one
    was freed): the turn computes the target and every non-target ancestor reached
    through non-targets. The sum over targets is the bound. Lets the variants be skipped
    on graphs where all of them would pass the cap (random DAGs: the variants took about
    24 s of CPU on a 10,000-node one to produce nothing). O(n + E) with bit sets per
    non-target while they fit ``_BOUND_BITS`` bits in all, else a search per target
    stopped at ``cap``."""
    preds = graph.pred_lists
    is_target = bytearray(graph.n)
    targets = graph.targets.tolist()
    for t in targets:
        is_target[t] = 1
    needed = graph.needed_nodes.tolist()
    free = [v for v in needed if not is_target[v]]
    total = 0
    if len(free) * len(free) <= _BOUND_BITS:
        bit = {v: 1 << i for i, v in enumerate(free)}
        reach: dict[int, int] = {}  # each non-target: itself and its non-target ancestors
        for v in graph.topo.tolist():
            if v not in bit and not is_target[v]:
                continue  # not needed
            m = 0
            for u in preds[v]:
                if not is_target[u]:
                    m |= reach[u]
            if is_target[v]:
                total += 1 + m.bit_count()
                if total > cap:
                    return total
            else:
                reach[v] = m | bit[v]
        return total
    for t in targets:
        total += 1
        seen = {t}
        todo = [t]
        while todo:
            for u in preds[todo.pop()]:
                if not is_target[u] and u not in seen:
                    seen.add(u)
                    todo.append(u)
                    total += 1
                    if total > cap:
                        return total
    return total


#: :func:`least_computes` keeps one bit set per non-target up to this many bits in all.
_BOUND_BITS = 400_000_000


def _ancestor_bits(graph: Graph) -> list[int] | None:
    """Per node, its ancestors as a bit set (bit u: node u); None where ``graph.n`` squared
    passes ``_BOUND_BITS`` (the sets would not fit memory)."""
    if graph.n * graph.n > _BOUND_BITS:
        return None
    preds = graph.pred_lists
    anc = [0] * graph.n
    for v in graph.topo.tolist():
        m = 0
        for u in preds[v]:
            m |= anc[u] | (1 << u)
        anc[v] = m
    return anc


#: The counts of :func:`_tree_turn_past` and :func:`_scratch_past` give up (the run itself
#: goes on, as without them) past a quarter of the cap in distinct subproblems, or past this
#: many bits in the subproblems' sets (about 30 MB held).
_COUNT_BITS = 100_000_000


def _count_limit(n: int, cap: int) -> int:
    """How many distinct subproblems a count on a graph of ``n`` nodes may meet before it
    gives up: each is a frame of the run counted, so a count never costs more than a part
    of the run it spares (``cap``: the run's cap)."""
    return min(max(cap, 0) // 4, _COUNT_BITS // max(n, 1))


def _tree_turn_past(
    graph: Graph, targets: list[int], cap: int, drop: frozenset[int], preds: list[list[int]], by_su: list[list[int]]
) -> int | None:
    """The turn (1-based) in which :func:`min_memory_schedule` without ``memo`` passes
    ``cap`` computes; 0 when it does not; None when not known (the count gave up).

    The run's computes, counted without running it: the recursion below a frame for v
    depends only on v and on which of v's ancestors are resident (they stay resident while
    the frame is on the stack: pinned, wanted by a frame above, or kept targets) or
    *sticky* (not resident, but kept once made: wanted by a frame above, or a kept target),
    and it leaves resident the sticky values it makes. So each subproblem (v, resident,
    sticky) is counted once, with the sticky values it makes, and met again at the cost
    of a dictionary lookup: on random1000 400,960 computes in 2,900 subproblems (16 ms
    against 0.4 s for the run). The count adds up computes in the run's order, so it
    passes ``cap`` in the turn the run does. Bit sets of ancestors (:func:`_ancestor_bits`)."""
    anc = _ancestor_bits(graph)
    if anc is None:
        return None
    limit = _count_limit(graph.n, cap)
    uses = [0] * graph.n
    for t in targets:
        for u in preds[t]:
            uses[u] += 1
    kept = 0  # targets kept once made: read by a target still to come, not dropped
    for t in targets:
        if uses[t] > 0 and t not in drop:
            kept |= 1 << t
    memo: dict[tuple[int, int, int], tuple[int, int]] = {}  # (v, resident, sticky) -> (computes, sticky made)
    total = 0
    resident = 0  # at the start of a turn: kept targets made so far
    for turn, t in enumerate(targets, 1):
        if resident >> t & 1:
            continue  # made and kept by an earlier turn (the run skips it, uses unchanged)
        a = anc[t]
        # frames: node, resident, sticky (both within its ancestors), inputs not yet taken,
        # next input, computes so far, sticky values made so far, its memo key
        stack: list[list[Any]] = [[t, resident & a, kept & a & ~resident, 0, 0, 1, 0, None]]
        made = 0
        while stack:
            frame = stack[-1]
            v, r, s, pending, i, acc, z, key = frame
            ins = by_su[v]
            if not i:
                for u in ins:
                    pending |= 1 << u
            m = len(ins)
            while i < m:
                u = ins[i]
                b = 1 << u
                pending &= ~b
                i += 1
                if r & b:
                    continue
                au = anc[u]
                sub = (u, r & au, (s | pending) & au & ~r)  # v wants the inputs after u
                hit = memo.get(sub)
                if hit is None:
                    frame[1], frame[3], frame[4], frame[5], frame[6] = r, pending, i - 1, acc, z
                    stack.append([u, sub[1], sub[2], 0, 0, 1, 0, sub])
                    break
                total += hit[0]
                if total > cap:
                    return turn
                acc += hit[0]
                r |= hit[1] | b
                z |= hit[1] | b
            else:
                stack.pop()
                total += 1
                if total > cap:
                    return turn
                z &= s  # what it made that stays made for the frames above
                if key is not None:
                    memo[key] = (acc, z)
                    if len(memo) > limit:
                        return None
                if stack:
                    parent = stack[-1]
                    parent[1] |= z | (1 << v)
                    parent[4] += 1
                    parent[5] += acc
                    parent[6] |= z | (1 << v)
                else:
                    made = z
        for u in preds[t]:
            uses[u] -= 1
            if not uses[u]:
                kept &= ~(1 << u)
        resident = (resident | made | (1 << t)) & kept
    return 0


def _scratch_past(graph: Graph, targets: list[int], cap: int, order: list[list[int]]) -> bool | None:
    """Whether :func:`scratch_schedule` passes ``cap`` computes; None when not known (the
    count gave up). Counted as :func:`_tree_turn_past` counts, with nothing sticky: the
    recursion below a frame for v depends only on v and on which of v's ancestors the
    frames above hold (every turn starts from nothing). On the ONNX samples and the
    1000-node graphs the run passes the cap (most in its first turn, after 0.03-0.25 s);
    the count knows it after 1-6 ms."""
    anc = _ancestor_bits(graph)
    if anc is None:
        return None
    total = _unfolded_computes(targets, 0, order, anc, cap, _count_limit(graph.n, cap))
    return None if total is None else total > cap


def _unfolded_computes(roots: list[int], start: int, order: list[list[int]], anc: list[int], most: int, limit: int) -> int | None:
    """The computes of the unfolded-tree recursion (:func:`scratch_schedule`,
    :func:`_recompute` without ``memo``) making each of ``roots`` in turn from the values of
    bit set ``start`` (resident throughout); once past ``most``, some number above it;
    None past ``limit`` distinct subproblems (v, what is held among v's ancestors), each
    counted once (:func:`_scratch_past`)."""
    memo: dict[tuple[int, int], int] = {}  # (v, held) -> computes
    total = 0
    for t in roots:
        key = (t, start & anc[t])
        stack: list[list[Any]] = [[t, key[1], 0, 1, key]]  # node, held (within its ancestors), next input, computes, key
        while stack:
            frame = stack[-1]
            v, r, i, acc, key = frame
            ins = order[v]
            m = len(ins)
            while i < m:
                u = ins[i]
                b = 1 << u
                i += 1
                if r & b:
                    continue
                sub = (u, r & anc[u])
                hit = memo.get(sub)
                if hit is None:
                    frame[1], frame[2], frame[3] = r, i - 1, acc
                    stack.append([u, sub[1], 0, 1, sub])
                    break
                total += hit
                if total > most:
                    return total
                acc += hit
                r |= b
            else:
                stack.pop()
                total += 1
                if total > most:
                    return total
                memo[key] = acc
                if len(memo) > limit:
                    return None
                if stack:
                    parent = stack[-1]
                    parent[1] |= 1 << v
                    parent[2] += 1
                    parent[3] += acc
    return total


def _search_orders(graph: Graph) -> tuple[list[list[int]], list[list[int]]]:
    """Each node's distinct inputs ascending, and the same by (size - tree number), ties
    by id: a frame's input order in :func:`min_memory_schedule` is these with the resident
    ones first (a stable sort on (not resident, size - tree number))."""
    mem = graph.mem.tolist()
    preds = [sorted(set(p)) for p in graph.pred_lists]
    su = tree_numbers(graph)
    return preds, [sorted(p, key=lambda u: mem[u] - su[u]) for p in preds]


def min_memory_schedule(
    graph: Graph,
    targets: list[int],
    memo: bool,
    max_computes: int,
    drop: frozenset[int] = frozenset(),
    deadline: float | None = None,
    turns: list[int] | None = None,
    blocks: TurnBlocks | None = None,
) -> Schedule | None:
    """Compute ``targets`` in this order as the module docstring says (``memo``: the dag
    variant); targets in ``drop`` are not kept but recomputed on demand like the other
    values. None when that takes more than ``max_computes`` computes; raises
    :class:`_Stopped` past ``deadline`` (a ``time.perf_counter()`` value).

    ``blocks``: the dag variant's turns made by earlier runs on the same graph
    (:class:`TurnBlocks`), reused where a turn starts from the same resident ancestors;
    the same steps as without.

    ``turns``: where None is returned, how many targets had had their turn (the one under
    way included) is appended to it. Up to there the run depends only on those targets, in
    that order, and on the set of all targets (which values are kept): a run of the same
    targets in an order with that same beginning (and the same ``memo``, ``drop`` and cap)
    passes the cap in the same turn (:func:`_variants` skips it)."""
    preds, by_su = _search_orders(graph)
    if not memo:  # the tree variant often passes the cap: counted first, at a fraction of the cost
        past = _made_ahead(graph, "tree", (tuple(targets), max_computes, drop))
        if past is _MISSING:
            past = _tree_turn_past(graph, targets, max_computes, drop, preds, by_su)
        if past:
            if turns is not None:
                turns.append(past)
            return None
    else:
        made_fast = _dag_schedule(targets, preds, by_su, max_computes, drop, deadline, turns, blocks)
        if made_fast is not False:
            return made_fast
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
    steps: list[int] = []  # each step as 2 · node + (1 for a free): one append per step (hot loop)
    put = steps.append
    computes = 0
    look = _next_look(0, max_computes, deadline)  # the next compute count with a check to make

    def release(u: int) -> None:
        """Free ``u`` unless a target still to come reads it (targets are kept)."""
        if resident[u] and not pins[u] and not wanted[u] and not (is_target[u] and uses[u] > 0 and u not in drop):
            resident[u] = 0
            fresh[u] = 0
            put(u << 1 | 1)

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
        # the frames, as three stacks: node, its inputs (resident first, then largest tree
        # number first; None until the frame is first seen), and how many it holds so far
        at: list[int] = [t]
        inputs: list[list[int] | None] = [None]
        held: list[int] = [0]
        while at:
            v = at[-1]
            ins = inputs[-1]
            if ins is None:  # the resident inputs (first) are taken at once: pinned; the others wanted
                ins = []
                rest = []
                for u in by_su[v]:
                    if resident[u]:
                        pins[u] += 1
                        ins.append(u)
                    else:
                        wanted[u] += 1
                        rest.append(u)
                k = len(ins)
                if rest:
                    ins += rest
                inputs[-1] = ins
            else:
                k = held[-1]
            m = len(ins)
            while k < m:  # inputs made resident since (by a child frame or a sibling's)
                u = ins[k]
                if not resident[u]:
                    break
                pins[u] += 1
                wanted[u] -= 1
                k += 1
            if k < m:
                held[-1] = k
                at.append(u)
                inputs.append(None)
                held.append(0)
                continue
            at.pop()
            inputs.pop()
            held.pop()
            put(v << 1)
            computes += 1
            if computes >= look:
                if computes > max_computes:
                    if turns is not None:
                        turns.append(turn)
                    return None
                if deadline is not None and not computes % DEADLINE_EVERY and time.perf_counter() > deadline:
                    raise _Stopped
                look = _next_look(computes, max_computes, deadline)
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
                        put(u << 1 | 1)
        for u in preds[t]:
            uses[u] -= 1
        for u in made:
            release(u)
        made.clear()
        for u in preds[t]:
            release(u)
        release(t)
    return _from_steps(steps)


class TurnBlocks:
    """The turns of :func:`min_memory_schedule`'s dag variant made so far on one graph, for
    the next runs (the other order of the targets, the rounds that drop a target).

    A turn starts with only kept targets resident (everything it recomputes it frees by
    its end), and its steps up to the releases after it depend only on its target t and
    on which of t's ancestors are resident then: the search reads nothing else. So a turn
    is kept under (t, that set as a bit set over ``anc``, :func:`_ancestor_bits`) with its
    steps, its computes and the targets it recomputes (a run whose kept targets include
    one of those cannot use it: the general loop runs, as without). On random1000 389 of
    the 500 turns of the store-all order's run were made by the file order's already."""

    __slots__ = ("anc", "made", "posts", "taken")

    def __init__(self, anc: list[int]) -> None:
        self.anc = anc
        #: (t, resident ancestors) -> (computes, steps as :func:`_from_steps` reads them,
        #: ((compute ordinal within the turn, target), ...) for the targets it recomputes)
        self.made: dict[tuple[int, int], tuple[int, list[int], tuple[tuple[int, int], ...]]] = {}
        self.taken = False  # whether the turns made ahead (:func:`make_ahead`) are in ``made``
        self.posts: _PostOrders | None = None  # the searches' post-orders (:func:`_dag_at_once`)

    def take_ahead(self, graph: Graph) -> None:
        """Put the turns made ahead on the graph (:func:`make_ahead`), once there, into
        ``made``: the same steps as this process would make."""
        if not self.taken:
            got = _made_ahead(graph, "turns")
            if got is not _MISSING:
                self.taken = True
                for key, block in got.items():
                    self.made.setdefault(key, block)


#: :class:`_PostOrders` holds at most this many entries in all (two int32 arrays: 32 MB);
#: past it :func:`_dag_at_once` leaves the run to the loop.
POST_ENTRIES = 4_000_000


class _PostOrders:
    """Per node u with no target among its ancestors, the post-order of
    :func:`_dag_schedule`'s search from u when none of u's ancestors is resident (inputs by
    ``by_su``), with each node's frame start in it (the position of the first compute made
    while its frame is on the stack). P(u) is its inputs' post-orders one after the other,
    each node where it first comes (the search skips a node made already, and the nodes
    made by the earlier inputs are closed under ancestors, so each later search is its own
    post-order less those, in the same order, and each frame keeps its nodes less those:
    its start moves to its first node kept), then u."""

    __slots__ = ("by_su", "indptr", "indices", "order", "size")

    def __init__(self, by_su: list[list[int]]) -> None:
        n = len(by_su)
        lens = np.fromiter((len(p) for p in by_su), np.int64, n)
        self.by_su = by_su
        self.indptr = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=self.indptr[1:])
        self.indices = np.fromiter((u for p in by_su for u in p), np.int64, int(self.indptr[-1]))
        self.order: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # u -> (post-order, frame starts)
        self.size = 0

    def of(self, u: int) -> tuple[np.ndarray, np.ndarray] | None:
        """u's post-order and frame starts (made with its ancestors' where missing); None
        once the arrays would pass :data:`POST_ENTRIES`."""
        order = self.order
        hit = order.get(u)
        if hit is not None:
            return hit
        by_su = self.by_su
        stack = [u]
        while stack:
            v = stack[-1]
            if v in order:
                stack.pop()
                continue
            missing = [w for w in by_su[v] if w not in order]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            made = _concat_posts([order[w] for w in by_su[v]], v)
            self.size += len(made[0])
            if self.size > POST_ENTRIES:
                return None
            order[v] = made
        return order[u]


def _concat_posts(parts: list[tuple[np.ndarray, np.ndarray]], last: int) -> tuple[np.ndarray, np.ndarray]:
    """The post-orders ``parts`` one after the other, each node kept where it first comes,
    then ``last`` (whose frame starts at 0); with each kept node's frame start (the nodes
    kept before its frame's first node)."""
    if not parts:
        return np.asarray([last], np.int32), np.zeros(1, np.int32)
    if len(parts) == 1:
        post, begin = parts[0]
        return np.append(post, np.int32(last)), np.append(begin, np.int32(0))
    cat = np.concatenate([p[0] for p in parts])
    offsets = np.cumsum([0] + [len(p[0]) for p in parts[:-1]])
    begin = np.concatenate([p[1] + np.int32(o) for p, o in zip(parts, offsets)])
    _, first = np.unique(cat, return_index=True)
    keep = np.zeros(len(cat), dtype=bool)
    keep[first] = True
    before = (np.cumsum(keep) - keep).astype(np.int32)
    return np.append(cat[keep], np.int32(last)), np.append(before[begin[keep]], np.int32(0))


def _turn_keys(targets: list[int], preds: list[list[int]], anc: list[int]) -> list[tuple[int, int]]:
    """The keys (:class:`TurnBlocks`) of the turns of :func:`_dag_schedule` over ``targets``
    (nothing dropped), in order, where the run neither passes a cap nor recomputes a kept
    target: a turn starts from the targets kept so far (read by a target still to come)."""
    uses = [0] * len(preds)
    for t in targets:
        for u in preds[t]:
            uses[u] += 1
    live = 0
    keys: list[tuple[int, int]] = []
    for t in targets:
        if live >> t & 1:
            continue
        keys.append((t, live & anc[t]))
        live |= 1 << t
        for u in preds[t]:
            uses[u] -= 1
        for u in (*preds[t], t):
            if live >> u & 1 and uses[u] <= 0:
                live &= ~(1 << u)
    return keys


#: The pieces of :func:`_variants` made ahead (:func:`make_ahead`) are kept on the graph
#: under this prefix and their name.
AHEAD = "_min_memory_ahead "
_MISSING = object()


def _made_ahead(graph: Graph, name: str, inputs: Any = None) -> Any:
    """The piece ``name`` made ahead for ``inputs`` (:func:`make_ahead`; without
    ``inputs``: all of it); ``_MISSING`` where it is not on the graph."""
    got = graph.derived_items(lambda key: key == AHEAD + name).get(AHEAD + name, _MISSING)
    if got is _MISSING or inputs is None:
        return got
    return got.get(inputs, _MISSING)


def make_ahead(graph: Graph, stop: Callable[[], bool]) -> Any:
    """Pieces of :func:`min_memory_variants`'s work that do not wait for the store-all
    order's dag run, which its making does first: the file order's dag turns that run does
    not make (:class:`TurnBlocks`), then the counts of the tree runs and of the
    from-scratch run (:func:`_tree_turn_past`, :func:`_scratch_past`). Yields
    (:data:`AHEAD` key, value) as each is made; ``stop`` asked between them (and between
    turns) ends it. A process that makes the variants finds each piece on the graph (its
    key set there) and uses it instead of making it: the same steps and counts.
    ``auto``'s second process makes them while it waits for its first plan to pass over
    (on random1000 at 0.7x: 0.07 s of the 0.4 s the other process spent)."""
    if variants_made(graph):
        return
    file_order, sa_order, cap = _target_orders(graph)
    if least_computes(graph, cap) > cap:
        return
    preds, by_su = _search_orders(graph)
    anc = _ancestor_bits(graph)
    if anc is not None and sa_order != file_order:
        blocks = TurnBlocks(anc)
        try:
            _dag_schedule(file_order, preds, by_su, cap, frozenset(), None, None, blocks, set(_turn_keys(sa_order, preds, anc)), stop)
        except _Stopped:
            pass
        if blocks.made:
            yield AHEAD + "turns", blocks.made
    if stop():
        return
    none: frozenset[int] = frozenset()
    tree = {(tuple(file_order), cap, none): _tree_turn_past(graph, file_order, cap, none, preds, by_su)}
    past = tree[(tuple(file_order), cap, none)]
    if sa_order != file_order and not (past and sa_order[:past] == file_order[:past]):  # (as :func:`_variants` skips it)
        if stop():
            return
        tree[(tuple(sa_order), cap, none)] = _tree_turn_past(graph, sa_order, cap, none, preds, by_su)
    yield AHEAD + "tree", tree
    if stop():
        return
    yield AHEAD + "scratch", {(tuple(file_order), cap): _scratch_past(graph, file_order, cap, _scratch_order(graph))}


def _dag_schedule(
    targets: list[int],
    preds: list[list[int]],
    by_su: list[list[int]],
    max_computes: int,
    drop: frozenset[int],
    deadline: float | None,
    turns: list[int] | None,
    blocks: TurnBlocks | None = None,
    skip: set[tuple[int, int]] | None = None,
    stop: Callable[[], bool] | None = None,
) -> Schedule | None | bool:
    """:func:`min_memory_schedule`'s dag variant, the same steps made with less bookkeeping;
    False where it cannot tell (a kept target recomputed: an order of the targets that is
    not topological), and the general loop runs instead.

    In a turn each missing ancestor is made once and stays until its last reader in the
    turn (``cnt``), so no frame's pins or wants need counting: the computes are the
    post-order of a depth-first search over inputs by tree number, and a recomputed input
    is freed at its last reader unless kept. A compute that frees several inputs frees
    them in the general loop's order, those resident when its frame began first (made
    before it, ``when``). ``blocks``: turns kept from earlier runs (:class:`TurnBlocks`),
    replayed where their key matches, and this run's turns kept there.

    With ``blocks``, the run is made at once where :func:`_dag_at_once` applies (the same
    steps). ``skip`` (with ``blocks``): turns of these keys are not made (their steps are left out:
    a run that only keeps its other turns in ``blocks``, :func:`make_ahead`); ``stop``,
    asked before each turn there, raises :class:`_Stopped` where it says True."""
    n = len(preds)
    if blocks is not None and skip is None:
        at_once = _dag_at_once(targets, preds, by_su, max_computes, drop, turns, blocks)
        if at_once is not False:
            if deadline is not None and time.perf_counter() > deadline:
                raise _Stopped
            return at_once
    is_target = bytearray(n)
    uses = [0] * n
    for t in targets:
        is_target[t] = 1
        for u in preds[t]:
            uses[u] += 1
    resident = bytearray(n)
    # readers of a recomputed value still to be computed in this turn: > 0 exactly while it is
    # resident and was recomputed in this turn (never kept: see below), 0 between turns
    cnt = [0] * n
    when = [0] * n  # the compute count at which a recomputed value was made
    steps: list[int] = []
    put = steps.append
    computes = 0
    look = _next_look(0, max_computes, deadline)

    anc = None if blocks is None else blocks.anc
    made = None if blocks is None else blocks.made
    live = 0  # with ``blocks``: the resident values as a bit set (at a turn's start: kept targets)

    def release(u: int) -> None:
        nonlocal live
        if resident[u] and not (is_target[u] and uses[u] > 0 and u not in drop):
            resident[u] = 0
            put(u << 1 | 1)
            live &= ~(1 << u)

    key: tuple[int, int] | None = None
    for turn, t in enumerate(targets, 1):
        if resident[t]:
            continue
        if made is not None:
            key = (t, live & anc[t])  # type: ignore[index]
            left = False  # a turn left to another run: only what it leaves resident
            if skip is not None:
                if stop is not None and stop():
                    raise _Stopped
                left = key in skip
            hit = None if left else made.get(key)
            if hit is not None:  # the turn as an earlier run made it
                size, block, again = hit
                bad = next((i for i, v in again if uses[v] > 0 and v not in drop), None)
                past = max_computes - computes + 1  # the ordinal at which it passes the cap
                if past <= size and (bad is None or past <= bad):
                    if turns is not None:
                        turns.append(turn)
                    return None
                if bad is not None:
                    return False  # a kept target recomputed, as the search below finds
                if (
                    deadline is not None
                    and (computes + size) // DEADLINE_EVERY > computes // DEADLINE_EVERY
                    and time.perf_counter() > deadline
                ):
                    raise _Stopped
                steps.extend(block)
                computes += size
                look = _next_look(computes, max_computes, deadline)
            if left or hit is not None:
                resident[t] = 1
                live |= 1 << t
                for u in preds[t]:
                    uses[u] -= 1
                for u in preds[t]:
                    release(u)
                release(t)
                continue
            start = len(steps)
            base = computes
            again_here: list[tuple[int, int]] = []
        todo = [t]  # (every count is 0 between turns: the first reader counted finds a value new)
        while todo:
            for u in preds[todo.pop()]:
                if not resident[u]:
                    c = cnt[u]
                    cnt[u] = c + 1
                    if not c:
                        todo.append(u)
        at = [t]  # the frames: node, next input, the compute count when it began
        nxt = [0]
        began = [computes]
        while at:
            v = at[-1]
            ins = by_su[v]
            i = nxt[-1]
            m = len(ins)
            while i < m and resident[ins[i]]:
                i += 1
            if i < m:
                nxt[-1] = i + 1
                at.append(ins[i])
                nxt.append(0)
                began.append(computes)
                continue
            at.pop()
            nxt.pop()
            c0 = began.pop()
            put(v << 1)
            computes += 1
            if computes >= look:
                if computes > max_computes:
                    if turns is not None:
                        turns.append(turn)
                    return None
                if deadline is not None and not computes % DEADLINE_EVERY and time.perf_counter() > deadline:
                    raise _Stopped
                look = _next_look(computes, max_computes, deadline)
            resident[v] = 1
            if v != t:
                if is_target[v]:
                    if uses[v] > 0 and v not in drop:
                        return False  # kept once recomputed: the general loop's pins and wants matter
                    if made is not None:
                        again_here.append((computes - base, v))
                when[v] = computes
            late = None  # its last reader: freed now, those resident when the frame began first
            for u in ins:
                c = cnt[u]  # > 0 where u was recomputed in this turn: v is one of its readers counted
                if c:
                    c -= 1
                    cnt[u] = c
                    if c:
                        continue
                    if when[u] > c0:
                        if late is None:
                            late = [u]
                        else:
                            late.append(u)
                        continue
                    resident[u] = 0
                    put(u << 1 | 1)
            if late is not None:
                for u in late:
                    resident[u] = 0
                    put(u << 1 | 1)
        if made is not None:
            made[key] = (computes - base, steps[start:], tuple(again_here))  # type: ignore[index]
            live |= 1 << t
        for u in preds[t]:  # every value recomputed in the turn is freed by now
            uses[u] -= 1
        for u in preds[t]:
            release(u)
        release(t)
    return _from_steps(steps)


#: :func:`_dag_at_once` works on arrays of at most this many entries per compute the cap
#: allows, and ``AT_ONCE_ENTRIES`` in all (else the loop runs, which stops at the cap and
#: looks at the deadline as it goes: an at-once run looks only at its end, some 0.3 s at
#: most); and on tables by (turn, node) where those have at most ``AT_ONCE_TABLE``
#: entries (else it sorts).
AT_ONCE_PER_COMPUTE = 4
AT_ONCE_ENTRIES = 4_000_000
AT_ONCE_TABLE = 4_000_000


def _dag_at_once(
    targets: list[int],
    preds: list[list[int]],
    by_su: list[list[int]],
    max_computes: int,
    drop: frozenset[int],
    turns: list[int] | None,
    blocks: TurnBlocks,
) -> Schedule | None | bool:
    """:func:`_dag_schedule` with ``blocks``, the turns not kept there made at once with
    numpy (the kept ones replayed); False where it does not apply and the loop runs: a
    turn to make whose missing inputs of t (its roots) include a target or have a target
    among their ancestors (then a root may have resident ancestors, or a target is
    recomputed), a kept turn that recomputes a target, or arrays past
    :data:`AT_ONCE_PER_COMPUTE` per compute the cap allows.

    Otherwise a turn's computes are its roots' post-orders (:class:`_PostOrders`) one after
    the other, each node where it first comes, then t; each value made in the turn is freed
    right after its last reader there, those made before the reader's frame began first,
    each group in the order of ``by_su``; after the turn the kept targets no longer read
    are freed (inputs of t ascending, then t), as the loop frees them. The same steps, the
    same turns kept in ``blocks``, the same None and turn past the cap. On random1000's
    store-all order (500 turns, 121k computes): one pass over all turns' arrays instead of
    a Python frame per compute."""
    n = len(preds)
    anc = blocks.anc
    made = blocks.made
    is_target = bytearray(n)
    every = 0  # the targets as a bit set
    uses = [0] * n
    for t in targets:
        is_target[t] = 1
        every |= 1 << t
        for u in preds[t]:
            uses[u] += 1
    clean: dict[int, bool] = {}
    live = 0
    keys: list[tuple[int, int]] = []
    hits: list[Any] = []  # per turn: its kept block, or None (to make)
    roots_of: list[list[int]] = []  # per turn to make
    released: list[list[int]] = []
    for t in targets:
        if live >> t & 1:
            return False
        key = (t, live & anc[t])
        hit = made.get(key)
        if hit is not None:
            if hit[2]:
                return False  # it recomputes a target: the loop tells whether it is kept
        else:
            roots = []
            for u in by_su[t]:
                if is_target[u]:
                    if not live >> u & 1:
                        return False
                    continue
                ok = clean.get(u)
                if ok is None:
                    ok = clean[u] = not anc[u] & every
                if not ok:
                    return False
                roots.append(u)
            roots_of.append(roots)
        keys.append(key)
        hits.append(hit)
        live |= 1 << t
        for u in preds[t]:
            uses[u] -= 1
        gone = []
        for u in (*preds[t], t):
            if live >> u & 1 and not (uses[u] > 0 and u not in drop):
                live &= ~(1 << u)
                gone.append(u)
        released.append(gone)
    if blocks.posts is None:
        blocks.posts = _PostOrders(by_su)
    posts = blocks.posts
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    part_turn: list[int] = []
    most = min(AT_ONCE_PER_COMPUTE * max(max_computes, 1), AT_ONCE_ENTRIES)
    size = 0
    for j, roots in enumerate(roots_of):
        for r in roots:
            got = posts.of(r)
            if got is None:
                return False
            size += len(got[0])
            if size > most:
                return False
            parts.append(got)
            part_turn.append(j)
    tnew = np.asarray([t for t, hit in zip(targets, hits) if hit is None], np.int64)
    J = len(tnew)  # turns to make
    dense = J * n <= AT_ONCE_TABLE  # (turn, node) tables instead of sorts
    if parts:
        plen = np.fromiter((len(p[0]) for p in parts), np.int64, len(parts))
        cat = np.concatenate([p[0] for p in parts]).astype(np.int64)
        pturn = np.repeat(np.asarray(part_turn, np.int64), plen)
        pstart = np.cumsum(plen) - plen
        beg = np.concatenate([p[1] for p in parts]).astype(np.int64) + np.repeat(pstart, plen)
        key = pturn * n + cat
        if dense:  # each (turn, node)'s first place in ``cat``
            table = np.full(J * n, len(cat), np.int64)
            np.minimum.at(table, key, np.arange(len(cat)))
            keep = table[key] == np.arange(len(cat))
        else:
            order = np.argsort(key, kind="stable")
            sk = key[order]
            first = np.ones(len(sk), dtype=bool)
            first[1:] = sk[1:] != sk[:-1]
            keep = np.zeros(len(cat), dtype=bool)
            keep[order[first]] = True
        before = np.cumsum(keep) - keep
        kc, kturn, kbeg = cat[keep], pturn[keep], before[beg[keep]]
    else:
        kc = kturn = kbeg = np.zeros(0, np.int64)
    k = np.bincount(kturn, minlength=J)  # each turn's recomputed values
    cumk = np.cumsum(k)
    L = int(cumk[-1]) + J if J else 0
    comp = np.empty(L, np.int64)  # the computes of the turns to make: recomputed values, then t
    kpos = np.arange(len(kc)) + kturn
    tpos = cumk + np.arange(J)
    comp[kpos] = kc
    comp[tpos] = tnew
    cturn = np.empty(L, np.int64)
    cturn[kpos] = kturn
    cturn[tpos] = np.arange(J)
    c0 = np.empty(L, np.int64)  # where each compute's frame began
    c0[kpos] = kbeg + kturn
    c0[tpos] = tpos - k
    # each (reader, input) edge whose input was made in the reader's turn
    lens = posts.indptr[comp + 1] - posts.indptr[comp]
    ends = np.cumsum(lens)
    rows = np.repeat(np.arange(L), lens)
    ins = posts.indices[np.arange(int(ends[-1]) if L else 0) - np.repeat(ends - lens, lens) + np.repeat(posts.indptr[comp], lens)]
    ckey = cturn * n + comp
    ekey = cturn[rows] * n + ins
    if dense:
        where = np.full(J * n, -1, np.int64)
        where[ckey] = np.arange(L)  # (each (turn, node) once)
        upos = where[ekey]
        found = upos >= 0
        rows, upos = rows[found], upos[found]
    else:
        sidx = np.argsort(ckey)
        skey = ckey[sidx]
        loc = np.minimum(np.searchsorted(skey, ekey), max(L - 1, 0))
        found = skey[loc] == ekey if L else np.zeros(0, dtype=bool)
        rows, upos = rows[found], sidx[loc[found]]
    last = np.full(L, -1, np.int64)  # each value's last reader in its turn: its last edge
    np.maximum.at(last, upos, np.arange(len(upos)))
    free = last[last >= 0]
    frow, fup = rows[free], upos[free]
    late = fup >= c0[frow]
    by = np.lexsort((free, late, frow))
    frow, fnode = frow[by], comp[fup[by]]
    out = np.empty(L + len(frow), np.int64)  # the turns made, one after the other
    per = np.bincount(frow, minlength=L)
    out[np.arange(L) + np.cumsum(per) - per] = comp << 1  # after the frees of earlier rows
    out[frow + 1 + np.arange(len(frow))] = fnode << 1 | 1
    block_end = 2 * cumk + np.arange(1, J + 1)
    block_start = (block_end - (2 * k + 1)).tolist()
    block_end = block_end.tolist()
    sizes = (k + 1).tolist()
    pieces: list[Any] = []
    computes = 0
    j = 0
    for turn, (key, hit, gone) in enumerate(zip(keys, hits, released), 1):
        if hit is None:
            size, block = sizes[j], out[block_start[j] : block_end[j]]
        else:
            size, block = hit[0], None
        if computes + size > max_computes:  # it passes the cap in this turn
            if turns is not None:
                turns.append(turn)
            return None
        computes += size
        if hit is None:
            made[key] = (size, block.tolist(), ())
            j += 1
            pieces.append(block)
        else:
            pieces.append(np.asarray(hit[1], np.int64))
        if gone:
            pieces.append(np.asarray(gone, np.int64) << 1 | 1)
    steps = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    return Schedule(np.where(steps & 1, FREE, COMPUTE).astype(np.int8), (steps >> 1).astype(np.int32))


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
    order = _scratch_order(graph)
    past = _made_ahead(graph, "scratch", (tuple(targets), max_computes))
    if past is _MISSING:
        past = _scratch_past(graph, targets, max_computes, order)
    if past:  # counted first, at a fraction of the cost
        return None
    holds = [0] * graph.n  # frames whose compute waits for this resident value
    resident = bytearray(graph.n)
    steps: list[int] = []  # each step as 2 · node + (1 for a free): one append per step (hot loop)
    put = steps.append
    computes = 0
    look = _next_look(0, max_computes, deadline)  # the next compute count with a check to make
    for t in targets:
        at = [t]  # the frames, as two stacks: node, and how many of its inputs it holds
        held = [0]
        while at:
            v = at[-1]
            k = held[-1]
            ins = order[v]
            m = len(ins)
            while k < m:
                u = ins[k]
                if not resident[u]:
                    break
                holds[u] += 1
                k += 1
            if k < m:
                held[-1] = k
                at.append(u)
                held.append(0)
                continue
            at.pop()
            held.pop()
            put(v << 1)
            computes += 1
            if computes >= look:
                if computes > max_computes:
                    return None
                if deadline is not None and not computes % DEADLINE_EVERY and time.perf_counter() > deadline:
                    raise _Stopped
                look = _next_look(computes, max_computes, deadline)
            resident[v] = 1
            for u in ins:
                holds[u] -= 1
                if not holds[u]:
                    resident[u] = 0
                    put(u << 1 | 1)
            if at:
                holds[v] += 1
                held[-1] += 1
            else:
                resident[v] = 0
                put(v << 1 | 1)
    return _from_steps(steps)


def _scratch_order(graph: Graph) -> list[list[int]]:
    """Each node's distinct inputs by tree number - size, largest first (ties by id): the
    order in which :func:`scratch_schedule` computes them."""
    mem = graph.mem.tolist()
    su = tree_numbers(graph)
    return [sorted(sorted(set(p)), key=lambda u: su[u] - mem[u], reverse=True) for p in graph.pred_lists]


def _next_look(computes: int, max_computes: int, deadline: float | None) -> int:
    """The compute count after ``computes`` at which a recursion must look at its cap (one
    past ``max_computes``) or at its deadline (every ``DEADLINE_EVERY`` computes)."""
    if deadline is None:
        return max_computes + 1
    return min(max_computes + 1, (computes // DEADLINE_EVERY + 1) * DEADLINE_EVERY)


def _from_steps(steps: list[int]) -> Schedule:
    """The schedule of steps encoded as 2 · node + (1 for a free, 0 for a compute)."""
    arr = np.asarray(steps, dtype=np.int64)
    ops = np.where(arr & 1, FREE, COMPUTE).astype(np.int8)
    return Schedule(ops, (arr >> 1).astype(np.int32))


def min_memory_variants(
    graph: Graph, deadline: float | None = None, stop: Callable[[], bool] | None = None
) -> list[tuple[str, Schedule, Metrics]]:
    """The variants of the module docstring that stay within the compute cap, each with
    its simulated metrics. They do not depend on the budget, so they are made once per
    graph and cached on it (as ``store_all_plan`` is): a budget search replays none.
    Anytime: past ``deadline`` (a ``time.perf_counter()`` value) the variants made so far
    (store-all at least, and what lowering a peak had reached), not cached as the graph's
    variants; the making pauses there and the next call on the graph resumes it, redoing
    only the variant it was in, so the variants it ends with are those of one call
    without a deadline (a search's probes of BERT at its lower bound, each given half the
    time left, made none before). ``stop``: asked before each recursion and each trial of
    a lowering; where it says True the making pauses as at the deadline (``auto`` makes
    the variants ahead of need and stops once a plan of another strategy fits)."""
    kept = graph.derived("_min_memory_variants", dict)
    if "all" in kept:
        return kept["all"]
    making = graph.derived("_min_memory_making", dict)  # not handed back by auto (a generator)
    if "run" not in making:
        out: list[tuple[str, Schedule, Metrics]] = []
        clock: _Clock = [deadline, stop]
        ahead: list[_Variant] = []
        making["run"] = (_variants(graph, out, clock, ahead), out, clock, ahead)
    run, out, clock, ahead = making["run"]
    clock[0], clock[1] = deadline, stop
    try:
        for partial in run:  # paused at the deadline: what it has (the run made ahead too), not kept
            return out + [v for v in ahead if not any(v[1] is o[1] for o in out)] + partial
    except BaseException:
        del making["run"]  # it raised (and is closed): the next call starts afresh
        raise
    del making["run"]
    kept["all"] = out
    return out


def variants_made(graph: Graph) -> bool:
    """Whether :func:`min_memory_variants` has made the graph's variants and kept them (here,
    or handed back by ``auto``'s second process): running the strategy then makes nothing
    again and costs a scan of the variants. Asks without creating the cache entry."""
    kept = graph.derived_items(lambda key: key == "_min_memory_variants").get("_min_memory_variants")
    return isinstance(kept, dict) and "all" in kept


def variants_so_far(graph: Graph) -> list[tuple[str, Schedule, Metrics]]:
    """The variants :func:`min_memory_variants` has made of the graph so far, in order: all
    of them once made, else those of a making paused or under way (each with its replayed
    metrics; none of a lowering's partial results), then the one made ahead of its turn
    (:func:`_variants`: the store-all order's dag run, which its rounds may yet replace). ``auto`` asks from a stop
    request which of them would be min-memory's plan at its budget, to have the second
    process polish it while this one makes the rest."""
    held = graph.derived_items(lambda key: key in ("_min_memory_variants", "_min_memory_making"))
    kept = held.get("_min_memory_variants")
    if isinstance(kept, dict) and "all" in kept:
        return kept["all"]
    run = held.get("_min_memory_making", {}).get("run")
    if run is None:
        return []
    out, ahead = run[1], run[3]
    return list(out) + [v for v in ahead if not any(v[1] is o[1] for o in out)]


def replayed(graph: Graph, schedule: Schedule) -> Metrics | None:
    """The simulator's metrics of ``schedule`` when it has the steps of one of the graph's
    kept variants (:func:`min_memory_variants` replays each as it makes it); None otherwise.
    ``auto`` asks before replaying min-memory's plan again (242k steps on random1000: 0.06 s)."""
    kept = graph.derived_items(lambda key: key == "_min_memory_variants").get("_min_memory_variants")
    if not isinstance(kept, dict) or "all" not in kept:
        return None
    for _, made, metrics in kept["all"]:
        if made is schedule or (
            len(made) == len(schedule) and np.array_equal(made.nodes, schedule.nodes) and np.array_equal(made.ops, schedule.ops)
        ):
            return metrics
    return None


class _Stopped(Exception):
    """A variant passed the deadline."""


#: Computes between two looks at the deadline.
DEADLINE_EVERY = 4096

_Variant = tuple[str, Schedule, Metrics]
#: When a making pauses: [the deadline (a ``time.perf_counter()`` value), a stop request]
#: (:func:`min_memory_variants`); the caller sets both before each resumption.
_Clock = list[Any]


def _stopped(clock: _Clock) -> bool:
    """Whether the clock's stop request (if any) says to pause."""
    return clock[1] is not None and bool(clock[1]())


def _until_done(make: Any, clock: _Clock) -> Any:
    """``make()`` (which reads the current deadline), paused (a yield of no partial
    variant) before it starts while the clock's stop request holds, and each time it
    stops at the deadline; started again when resumed."""
    while True:
        if _stopped(clock):
            yield []
            continue
        try:
            return make()
        except _Stopped:
            yield []


def _target_orders(graph: Graph) -> tuple[list[int], list[int], int]:
    """The targets in file (topological) order, in the store-all plan's order of first
    computes, and the variants' compute cap."""
    from remat_cli.strategies.store_all import store_all_plan

    needed = int(graph.needed.sum())
    rank = graph.topo_rank.tolist()
    file_order = sorted(graph.targets.tolist(), key=rank.__getitem__)
    first: dict[int, int] = {}  # each node's first compute in the store-all plan
    store_all = store_all_plan(graph)
    for op, v in zip(store_all.schedule.ops.tolist(), store_all.schedule.nodes.tolist()):
        if op == COMPUTE:
            first.setdefault(v, len(first))
    sa_order = sorted(file_order, key=lambda t: first.get(t, len(first)))
    return file_order, sa_order, min(MAX_COMPUTES_PER_NODE * max(needed, 1), MAX_COMPUTES)


def _variants(graph: Graph, out: list[_Variant], clock: _Clock, ahead: list[_Variant] | None = None) -> Any:
    """Make the variants into ``out``, in order; a generator that yields (the partial
    variants usable now, not in ``out``) wherever it pauses at the deadline ``clock[0]``
    or at the stop request ``clock[1]``, which the caller sets before each resumption.

    The store-all order's dag run is made first (into ``ahead`` with its metrics), and
    taken in its turn: the dag runs share their turns (:class:`TurnBlocks`), so the file
    order's run then reuses its turns as it reused the file order's, and the variants are
    the same; its plan (on random1000 the lowest peak of the runs, min-memory's plan from
    0.7x down) is known 0.1 s sooner (``auto`` offers it to its second process)."""
    from remat_cli.strategies.store_all import store_all_plan

    def late() -> bool:
        return (clock[0] is not None and time.perf_counter() > clock[0]) or _stopped(clock)

    needed = int(graph.needed.sum())
    store_all = store_all_plan(graph)
    file_order, sa_order, cap = _target_orders(graph)
    out.append(("store-all (nothing recomputed)", store_all.schedule, store_all.metrics))
    if least_computes(graph, cap) > cap:  # every variant below would pass the cap: none is made
        return
    orders = [("file order", file_order)] + ([("store-all order", sa_order)] if sa_order != file_order else [])
    spent = 0
    anc = _ancestor_bits(graph)
    blocks = None if anc is None else TurnBlocks(anc)  # the dag runs share their turns
    early: tuple[Schedule | None, list[int], Metrics | None] | None = None  # the store-all order's dag run
    if len(orders) > 1:

        def sa_dag() -> tuple[Schedule | None, list[int]]:
            turns: list[int] = []
            return min_memory_schedule(graph, sa_order, True, cap, deadline=clock[0], turns=turns, blocks=blocks), turns

        made, made_turns = yield from _until_done(sa_dag, clock)
        early = (made, made_turns, None if made is None else simulate(graph, made).metrics)
        if ahead is not None and made is not None and early[2] is not None:
            ahead.append(("dag, targets in store-all order", made, early[2]))
    seeds: list[_Variant] = []  # before the rounds below: lower_peak's inputs
    passed: dict[bool, tuple[list[int], int]] = {}  # per memo: an order whose run passed the cap, and in which turn
    for order_name, order in orders:
        for memo in (True, False):
            if memo in passed and order[: passed[memo][1]] == passed[memo][0][: passed[memo][1]]:
                continue  # the same first turns as a run that passed the cap: it passes it there too

            def whole(order: list[int] = order, memo: bool = memo) -> tuple[Schedule | None, list[int]]:
                turns: list[int] = []
                if blocks is not None:
                    blocks.take_ahead(graph)  # (made by another process meanwhile)
                return min_memory_schedule(graph, order, memo, cap, deadline=clock[0], turns=turns, blocks=blocks), turns

            if memo and early is not None and order is sa_order:
                schedule, turns, m = early  # made first (above)
            else:
                schedule, turns = yield from _until_done(whole, clock)
                m = None if schedule is None else simulate(graph, schedule).metrics
            if turns:
                passed[memo] = (order, turns[0])
            if schedule is None or m is None:
                continue
            spent += len(schedule)
            name = f"{'dag' if memo else 'tree'}, targets in {order_name}"
            seeds.append((name, schedule, m))
            drop: frozenset[int] = frozenset()
            for _ in range(MAX_ROUNDS):  # recompute a kept target resident at the peak instead
                if m.peak_bytes <= graph.lb or spent > min(MAX_COMPUTES, max(ROUNDS_COMPUTES, ROUNDS_COMPUTES_PER_NODE * needed)):
                    break
                better = None
                for u in _held_at_peak(graph, schedule, drop)[:TRIES]:
                    trial = yield from _until_done(
                        lambda order=order, memo=memo, drop=drop, u=u: min_memory_schedule(
                            graph, order, memo, cap, drop | {u}, clock[0], blocks=blocks
                        ),
                        clock,
                    )
                    tm = None if trial is None else simulate(graph, trial).metrics
                    spent += 0 if trial is None else len(trial)
                    if trial is not None and tm is not None and tm.peak_bytes < m.peak_bytes:
                        better = (u, trial, tm)
                        break
                if better is None:
                    break
                drop, schedule, m = drop | {better[0]}, better[1], better[2]
            if drop:
                name += f", {len(drop)} target{'s' if len(drop) > 1 else ''} recomputed"
            out.append((name, schedule, m))
    scratch = yield from _until_done(lambda: scratch_schedule(graph, file_order, cap, clock[0]), clock)
    if scratch is not None:
        out.append(("every target from scratch", scratch, simulate(graph, scratch).metrics))
        seeds.append(out[-1])
    left = min(PEAK_STEPS, PEAK_STEPS_PER_NODE * needed)  # lower_peak on the seeds, lowest first
    for name, schedule, m in sorted(seeds, key=lambda v: (v[2].peak_bytes, v[2].cost)):
        if left <= 0 or min(v[2].peak_bytes for v in out) <= graph.lb:
            break
        while late():
            yield []
        lowering = _lowering(graph, schedule, left, clock)
        while True:
            try:
                paused = next(lowering)
            except StopIteration as done:
                lowered, evicted, used = done.value
                break
            yield _lowered(graph, name, m, *paused[:2])  # usable now; resumed from its round
        left -= used
        out.extend(_lowered(graph, name, m, lowered, evicted))


def _lowered(graph: Graph, name: str, m: Metrics, lowered: Schedule, evicted: int) -> list[_Variant]:
    """The variant a lowering of variant ``name`` (peak in ``m``) made, if it lowered the peak."""
    lm = simulate(graph, lowered).metrics if evicted else None
    if lm is None or lm.peak_bytes >= m.peak_bytes:
        return []
    return [(f"{name}, {evicted} idle value{'s' if evicted > 1 else ''} recomputed", lowered, lm)]


def _held_at_peak(graph: Graph, schedule: Schedule, drop: frozenset[int]) -> list[int]:
    """The targets resident at the schedule's (first) peak step that the step does not
    read, largest first: the values whose recomputation may lower that peak."""
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    resident: set[int] = set()
    cur = 0
    peak = -1
    held: list[int] = []
    for op, v in zip(schedule.ops.tolist(), schedule.nodes.tolist()):
        if op == COMPUTE:
            here = cur + mem[v] + ws[v]
            if here > peak:
                peak = here
                reads = set(graph.pred_lists[v])
                held = [u for u in resident if u not in reads]
            resident.add(v)
            cur += mem[v]
        else:
            resident.discard(v)
            cur -= mem[v]
    targets = set(graph.targets.tolist())
    return sorted((u for u in held if u in targets and u not in drop and mem[u] > 0), key=lambda u: (-mem[u], u))


def _run(graph: Graph, budget: int | None, options: NoOptions, context: RunContext) -> StrategyResult:
    variants = min_memory_variants(graph, context.deadline)
    pick = chosen(variants, budget)
    if pick is None:
        floor = min((v[2].peak_bytes for v in variants), default=None)
        raise NoPlanError(
            f"min-memory: no variant fits budget {fmt_bytes_exact(budget) if budget is not None else 'none'}"
            + (f"; its lowest peak is {fmt_bytes_exact(floor)}" if floor is not None else ""),
            min_budget=floor,
        )
    name, schedule, _ = pick
    return StrategyResult(schedule, {"variant": name})


def chosen(variants: list[tuple[str, Schedule, Metrics]], budget: int | None) -> tuple[str, Schedule, Metrics] | None:
    """The variant that is min-memory's plan among ``variants`` (name, schedule, replayed
    metrics): the cheapest that fits ``budget``, then the lowest; with no budget the lowest
    peak, then the cheapest. None where none fits. ``auto`` asks it of the variants made so
    far (:func:`variants_so_far`) to offer that plan for polishing ahead."""
    fits = [v for v in variants if budget is None or v[2].peak_bytes <= budget]
    if not fits:
        return None
    key = (lambda v: (v[2].cost, v[2].peak_bytes)) if budget is not None else (lambda v: (v[2].peak_bytes, v[2].cost))
    return min(fits, key=key)


STRATEGY = Strategy(
    name="min-memory",
    summary="Lowest peak first: targets computed once and kept, everything else recomputed on demand.",
    solve=_run,
    uses_budget=True,
    fast=True,
    reference="Sethi and Ullman, JACM 1970 (evaluation order of least memory on trees)",
)


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


def _lowering(graph: Graph, schedule: Schedule, max_steps: int, clock: _Clock) -> Any:
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
    n = graph.n

    def result(ops: np.ndarray, nodes: np.ndarray, evicted: int, spent: int) -> tuple[Schedule, int, int]:
        if not evicted:
            return schedule, 0, spent
        return Schedule(ops.astype(np.int8), nodes.astype(np.int32)), evicted, spent

    while spent < max_steps and score[0] > floor:
        at = score[-1]  # its first step at the peak
        begun = spent
        profile = _Profile(ops, nodes, mem, ws, cost)  # the round's trials are scored against it
        held = _balance(ops, nodes, 0, at, n)  # computes less frees of each value before ``at``
        while True:  # the round, again from its start after each pause
            spent = begun
            better: list[Any] | None = None  # [trial, (peak, count, first step), its cost or None]
            late = False
            for u in _idle_at_peak(ops, nodes, at, preds, mem_list)[:PEAK_TRIES]:
                if late:
                    break
                for memo in (True, False):
                    cap = min(max_steps - spent, max(len(ops), block_steps))
                    deadline = clock[0]
                    trial = _evict_at(ops, nodes, at, u, succs[u], order, cap, memo, deadline, anc, profile.comp, held)
                    late = (deadline is not None and time.perf_counter() > deadline) or _stopped(clock)
                    if trial is None:
                        spent += cap
                        if late:
                            break
                        continue
                    spent += _trial_length(len(ops), trial)
                    got = profile.score(trial, mem_list[u], mem, ws)
                    if got[:2] < score[:2] and (better is None or _before(got, trial, better, ops, nodes, profile)):
                        better = [trial, got, None]
                    if spent >= max_steps or late:
                        break
            if not late:
                break
            if better is not None:
                yield result(*_trial_arrays(ops, nodes, better[0]), evicted + 1, spent)
            else:
                yield result(ops, nodes, evicted, spent)
        if better is None:
            break
        ops, nodes = _trial_arrays(ops, nodes, better[0])
        score = better[1]
        evicted += 1
    return result(ops, nodes, evicted, spent)


#: A trial of :func:`_lowering` as positions in the schedule it changes: (u, the step after
#: which u is freed, the step before which the block goes (or the free of u it drops, or the
#: schedule's length), the block's ops and nodes (None: u is not read again before that free)).
_Trial = tuple[int, int, int, Any, Any]


def _trial_arrays(ops: np.ndarray, nodes: np.ndarray, trial: _Trial) -> tuple[np.ndarray, np.ndarray]:
    """The trial's schedule: ``ops``/``nodes`` with the trial's free and block put in."""
    u, last, stop, block_ops, block_nodes = trial
    free = np.asarray([FREE]), np.asarray([u])
    if block_ops is None:  # idle until freed: free it early, drop the late free
        return (
            np.concatenate([ops[: last + 1], free[0], ops[last + 1 : stop], ops[stop + 1 :]]),
            np.concatenate([nodes[: last + 1], free[1], nodes[last + 1 : stop], nodes[stop + 1 :]]),
        )
    return (
        np.concatenate([ops[: last + 1], free[0], ops[last + 1 : stop], block_ops, ops[stop:]]),
        np.concatenate([nodes[: last + 1], free[1], nodes[last + 1 : stop], block_nodes, nodes[stop:]]),
    )


def _trial_length(length: int, trial: _Trial) -> int:
    """The steps of the trial's schedule, of a schedule of ``length`` steps."""
    _, _, stop, block_ops, _ = trial
    if block_ops is None:
        return length + 1 - (stop < length)
    return length + 1 + len(block_ops)


def _before(got: tuple[int, int, int], trial: _Trial, better: list[Any], ops: np.ndarray, nodes: np.ndarray, profile: _Profile) -> bool:
    """Whether a trial of score ``got`` comes before ``better`` in :func:`_lowering`'s order:
    (peak, compute steps at it, total cost); the costs (:meth:`_Profile.cost`) are made only
    to break a tie."""
    if got[:2] != better[1][:2]:
        return got[:2] < better[1][:2]
    if better[2] is None:
        better[2] = profile.cost(ops, nodes, better[0])
    return profile.cost(ops, nodes, trial) < better[2]


def _balance(ops: np.ndarray, nodes: np.ndarray, begin: int, end: int, n: int) -> np.ndarray:
    """Per node, its computes less its frees among steps ``begin`` to ``end`` (excluded)."""
    head, comp = nodes[begin:end], ops[begin:end] == COMPUTE
    return np.bincount(head[comp], minlength=n) - np.bincount(head[~comp], minlength=n)


class _Profile:
    """A schedule's memory at each step, with the largest of each prefix and suffix (how
    often and first where), so that a trial of :func:`_lowering`, which changes the memory
    only between u's early free and its recomputation, is scored from those and its own
    steps: its :func:`_peak_score` less the cost, without a pass over the whole schedule."""

    def __init__(self, ops: np.ndarray, nodes: np.ndarray, mem: np.ndarray, ws: np.ndarray, cost: np.ndarray) -> None:
        comp = ops == COMPUTE
        self.costs = cost
        # where every cost is a whole number and the costs of a schedule add up to less than
        # 2**53 in magnitude, each addition is exact in any order: a trial's total is the
        # round's plus its block's, as a pass over its whole schedule adds them
        self.top = float(np.abs(cost).max()) if cost.size else 0.0
        self.exact = bool(np.all(cost == np.floor(cost))) and self.top * (len(ops) + 1) < 2.0**53
        self.total = int(cost[nodes[comp]].astype(np.int64).sum()) if self.exact else 0
        size = mem[nodes]
        delta = np.where(comp, size, -size)
        self.before = np.cumsum(delta) - delta
        here = np.where(comp, self.before + size + ws[nodes], -1)
        self.comp, self.here = comp, here
        self.pmax, self.pcount, self.pfirst = _running_max(here)
        smax, scount, slast = _running_max(here[::-1], last=True)
        self.smax, self.scount, self.slast = smax, scount, slast  # of the reversed profile

    def cost(self, ops: np.ndarray, nodes: np.ndarray, trial: _Trial) -> float:
        """The trial's total cost as :func:`_peak_score` sums it over its whole schedule."""
        _, _, _, block_ops, block_nodes = trial
        if self.exact and self.top * (len(ops) + 1 + (0 if block_ops is None else len(block_ops))) < 2.0**53:
            extra = 0 if block_ops is None else int(self.costs[block_nodes[block_ops == COMPUTE]].astype(np.int64).sum())
            return float(self.total + extra)
        ops, nodes = _trial_arrays(ops, nodes, trial)
        return float(self.costs[nodes[ops == COMPUTE]].sum())

    def score(self, trial: _Trial, size: int, mem: np.ndarray, ws: np.ndarray) -> tuple[int, int, int]:
        """(peak, compute steps at it, the first of them) of the trial's schedule."""
        _, last, stop, block_ops, block_nodes = trial
        length = len(self.here)
        parts: list[tuple[int, int, int]] = [(int(self.pmax[last]), int(self.pcount[last]), int(self.pfirst[last]))]
        region = self.here[last + 1 : stop]
        if region.size:  # u gone: the computes there hold size bytes less
            lowered = np.where(self.comp[last + 1 : stop], region - size, -1)
            parts.append(_top(lowered, last + 2))
        if block_ops is not None:
            comp = block_ops == COMPUTE
            bsize = mem[block_nodes]
            delta = np.where(comp, bsize, -bsize)
            start = int(self.before[stop]) - size  # (``stop`` reads u: a step of the schedule)
            before = start + np.cumsum(delta) - delta
            parts.append(_top(np.where(comp, before + bsize + ws[block_nodes], -1), stop + 1))
            tail, shift = stop, 1 + len(block_ops)  # u is back, the block's values freed: as before
        else:
            tail, shift = stop + 1, 0
        if tail < length:
            k = length - 1 - tail  # the suffix from ``tail``, in the reversed profile
            parts.append((int(self.smax[k]), int(self.scount[k]), length - 1 - int(self.slast[k]) + shift))
        peak = max(p[0] for p in parts)
        return peak, sum(p[1] for p in parts if p[0] == peak), next(p[2] for p in parts if p[0] == peak)


def _top(values: np.ndarray, offset: int) -> tuple[int, int, int]:
    """(largest value, how often, ``offset`` + its first position)."""
    peak = int(values.max())
    return peak, int(np.count_nonzero(values == peak)), offset + int(np.argmax(values))


def _running_max(values: np.ndarray, last: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prefix of ``values``: its largest value, how often it occurs there, and its first
    position (with ``last``: its last)."""
    top = np.maximum.accumulate(values)
    pos = np.arange(values.size)
    rises = np.ones(values.size, dtype=bool)
    rises[1:] = top[1:] != top[:-1]
    first = np.maximum.accumulate(np.where(rises, pos, 0))
    hits = np.cumsum(values == top)
    count = hits - hits[first] + 1
    if last:
        return top, count, np.maximum.accumulate(np.where(values == top, pos, 0))
    return top, count, first


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


def _resident_before(ops: np.ndarray, nodes: np.ndarray, k: int) -> np.ndarray:
    """The values resident just before step ``k``, ascending: those computed more often than
    freed before it (a valid schedule alternates each value's computes and frees, so these
    are the values whose last step before ``k`` computes them). O(k + n), no sort."""
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    head = nodes[:k]
    comp = ops[:k] == COMPUTE
    size = int(head.max()) + 1
    balance = np.bincount(head[comp], minlength=size) - np.bincount(head[~comp], minlength=size)
    return np.flatnonzero(balance > 0)


def _idle_at_peak(ops: np.ndarray, nodes: np.ndarray, at: int, preds: list[set[int]], mem: list[int]) -> list[int]:
    """The values resident before step ``at`` that it does not read, largest first."""
    reads = preds[int(nodes[at])]
    resident = _resident_before(ops, nodes, at).tolist()
    return sorted((u for u in resident if u not in reads and mem[u] > 0), key=lambda u: (-mem[u], u))


def _evict_at(
    ops: np.ndarray,
    nodes: np.ndarray,
    at: int,
    u: int,
    readers: np.ndarray,
    order: list[list[int]],
    cap: int,
    memo: bool,
    deadline: float | None,
    anc: list[int] | None,
    comp: np.ndarray,
    held: np.ndarray,
) -> _Trial | None:
    """The trial (:data:`_Trial`) that frees ``u`` (resident and idle at step ``at``) after
    its last read before ``at`` and recomputes it before its first read after
    (:func:`lower_peak`); None when the recomputation takes more than ``cap`` steps or runs
    past ``deadline``. ``readers``: u's consumers. ``anc``: the graph's ancestor bit sets
    (:func:`_ancestor_bits`), to count an unfolded recomputation (without ``memo``) before
    making it: its steps are twice its computes less one (each value it makes but u is
    freed once), so one that passes ``cap`` is None at once (on bert most of min-memory's
    time went to recomputations given up at their cap). ``comp``: the schedule's compute
    steps; the reads of u are looked for between its compute before ``at`` and its free
    after. ``held``: :func:`_balance` up to ``at``; the resident values before u's next
    read are found from it and the steps since."""
    n = held.size
    mine = np.flatnonzero(nodes == u)
    start = int(mine[(mine < at) & (ops[mine] == COMPUTE)].max())
    later = mine[mine > at]
    end = int(later[0]) if later.size else len(ops)  # the free that closes this stay, if any
    reader = np.zeros(n, dtype=bool)
    reader[readers] = True
    reads = start + 1 + np.flatnonzero(comp[start + 1 : end] & reader[nodes[start + 1 : end]])
    before = reads[reads < at]
    last = int(before[-1]) if before.size else start
    after = reads[reads > at]
    if not after.size:
        return (u, last, end, None, None)
    nxt = int(after[0])
    resident = set(np.flatnonzero(held + _balance(ops, nodes, at, nxt, n) > 0).tolist())  # _resident_before(nxt)
    resident.discard(u)
    if not memo and anc is not None:
        bits = 0
        for w in resident:
            bits |= 1 << w
        computes = _unfolded_computes([u], bits, order, anc, (cap + 1) // 2, _count_limit(len(anc), cap))
        if computes is not None and 2 * computes - 1 > cap:
            return None
    block = _recompute(u, resident, order, cap, memo, deadline)
    if block is None:
        return None
    return (u, last, nxt, np.asarray(block[0], np.int64), np.asarray(block[1], np.int64))


def _recompute(
    u: int, resident: set[int], order: list[list[int]], cap: int, memo: bool, deadline: float | None = None
) -> tuple[list[int], list[int]] | None:
    """Steps computing ``u`` from ``resident`` by the unfolded-tree recursion, freeing
    every value they compute except ``u`` and nothing in ``resident``; None past ``cap``
    or ``deadline`` (looked at every ``DEADLINE_EVERY`` computes).
    ``memo``: each missing ancestor is computed once and freed after its last reader in the
    block (cheaper, more memory), else as soon as no pending compute holds it."""
    ops: list[int] = []
    nodes: list[int] = []
    have = set(resident)
    holds: dict[int, int] = {}
    readers: dict[int, int] = {}  # memo: readers in the block still to be computed
    if memo:
        todo = [u]
        seen = {u}
        while todo:
            for w in order[todo.pop()]:
                if w not in resident:
                    readers[w] = readers.get(w, 0) + 1
                    if w not in seen:
                        seen.add(w)
                        todo.append(w)
    look = DEADLINE_EVERY  # the length at which the deadline is looked at next
    stack: list[list[int]] = [[u, 0]]
    while stack:
        frame = stack[-1]
        v, i = frame
        ins = order[v]
        if i < len(ins):
            w = ins[i]
            if w in have:
                holds[w] = holds.get(w, 0) + 1
                frame[1] += 1
            else:
                stack.append([w, 0])
            continue
        stack.pop()
        ops.append(COMPUTE)
        nodes.append(v)
        have.add(v)
        for w in ins:
            holds[w] -= 1
            if w in resident:
                continue
            if memo:
                readers[w] -= 1
                if readers[w]:
                    continue
            elif holds[w]:
                continue
            have.discard(w)
            ops.append(FREE)
            nodes.append(w)
        if stack:
            holds[v] = holds.get(v, 0) + 1
            stack[-1][1] += 1
        if len(ops) > cap:
            return None
        if deadline is not None and len(ops) >= look:
            look += DEADLINE_EVERY
            if time.perf_counter() > deadline:
                return None
    return ops, nodes
