"""Plan improvement: make a finished valid plan cheaper without leaving the budget.

:func:`improve_plan` takes any valid schedule that fits a budget and returns one that
costs at most as much, fits the same budget and is valid; the simulator checks every
result, and the input comes back unchanged when nothing better is found. It is a local
search, ours (not from a paper), in the spirit of twremat's memory-limit pass
(:mod:`remat_cli.strategies.evict`), which it complements: that pass keeps values in
time order until memory runs out; this one chooses globally which recomputations to
drop.

**The move** ("keep instead of recompute"). Write the plan as its compute sequence with
every value freed right after its last reader (that form never peaks higher than the
plan itself). A recomputation of v at step k, whose previous copy was freed at step f,
is dropped by keeping that copy: memory rises by mem(v) at every step strictly between
f and k, the compute at k disappears, and nothing else changes. The move is accepted
when the simulator's memory at those steps plus mem(v) stays within the budget. After
a round of moves, computations nobody reads any more (inputs recomputed only to feed a
dropped recomputation) are deleted, which only lowers memory, and the plan is rebuilt
and replayed.

**Hoist moves** (with ``replay``, where no keep move fits). A recomputation of v whose
inputs were themselves recomputed for it is moved earlier: to just after the last read of
an earlier copy of one of its inputs, or to just before the first of those
recomputations, wherever every input of v still has a copy; v is then kept until its
readers, and the recomputations that nobody reads any more are deleted. The first move
that lowers the cost and that the simulator replays within the budget is taken (a
simulation per candidate: so only on the plain replays' plans and on the final one).
The exact solver's plans do this (compute a value early, while its inputs are still
there); an on-demand replay never does.

**Swap moves** (with ``replay``, on the final plan only). A recomputation that no keep
move can drop, because keeping its value would exceed the budget at some steps of its
gap, is dropped anyway (with the recomputations only it read), and the excess that the
new plan's replay shows is covered by *splits*: a copy of another value w that nobody
reads between two of its reads is freed after the first and computed again (with those
of its inputs whose copies are gone by then, at most 16 computes) just before the
second. Splits are chosen greedily by cost per byte of excess covered and only while
they cost less than the drop saves; a split moves memory too, so the cover is repeated
on the new plan's replay (three passes at most). The first swap that the simulator
replays within the budget at a lower cost is taken, and the keep, hoist and swap moves
repeat until none applies. This is the exchange a keep move cannot make (keep one value,
recompute cheaper ones in its place), and what the exact solver's plans do on the
CNN-shaped graphs: on ResNet-18's shape at 0.7× conv3 stays and the cheap additions
are recomputed instead (1.0213 → 1.0013525), on the U-Net shape at 0.5× 1.1571 → 1.1490
(exact: 1.1506 at 120 s). The swap polish gets its own 1/8 of the work limit
(:data:`POLISH_SHARE`), on top of it.

**Releases and stretches** (the polish, where the moves above stall). A keep move's
check counts the memory of keeping v but not what dropping its recomputation frees: an
input copy whose last reader was that recomputation is then freed after its previous
reader. A *keep move with release* checks again with that credit (an under-count: copies
that an earlier move of the round extended or released are left out) and takes it from
the profile when accepted. A *stretch* is a split that computes w again from the latest
copies of its inputs, which then stay until it, instead of recomputing the inputs whose
copies are gone; its relief at a step is w's size less the stretched inputs' sizes, and
the next replay checks the rest. Swaps with stretches try twice as many candidates (16).
Both are tried only after the swap moves find nothing: they extend a descent only where
it would have ended (they share the polish's work, so a later ranking's descent may get
less of it; ``scripts/bench_quality.py``: no cell got costlier). On ResNet-18's shape at 0.7× this is the exact
solver's plan: add26 stays by releasing conv25 (1.0013502), then bwd:add29 stays and
add29 is recomputed from add26 and a stretched conv28 instead (1.0013479, the exact
solver's best in Checkmate's model; found at 88 s).

**Order.** Within a round, moves are tried greedily, best first, against a memory
profile updated after each accepted move, by one of two rankings: cost saved per byte
kept, or cost saved per byte·step kept (short gaps first). Rounds repeat until no move
is accepted; each ranking is run from the input and the cheapest result wins.

**Re-eviction** (``replay=True``; what ``auto`` asks for). Keep moves only drop
recomputations, so they cannot undo a poor choice of *which* values the plan recomputes.
So the plan's order of first computations is also replayed offline under the budget
(Belady-style: the replay knows every future use): before a compute that would exceed
the budget, the resident value with the least score is freed, never one the compute
needs; a freed value is recomputed on demand, recursively from what is resident; each
value is freed for good after its last use. Scores, each a variant: r / (size · d),
r / (size · d²), r / size and c / (size · d), where c is the value's cost, r its cost
plus that of the freed ancestors its recomputation would need, and d the distance (in
the order) to its next use. Each replay's plan then gets the keep moves.

*Lingering values.* A plain replay frees a value after its last reader in the order, so
a later recomputation of one of its successors has to recompute it too, however cheap
keeping it would have been. In the lingering variant a value stays evictable while a
successor of it is read later: it is the first to go when room is needed unless a
successor that is not resident will be read (then that read counts as its next use and
it is scored like any other value). On the SegNet-shaped graph at 0.5× the exact
solver's plan keeps the encoder's small pooled output and a decoder convolution only to
recompute a cheap unpooling from them at the very end; without lingering no choice of
victims gives that plan.

*Restarts: hill climbs over the scores' weights.* After the plain replays (each score,
lingering and not), the lingering replays of :data:`CLIMBS` (r/(size·d) and r/size) are
hill climbs: the next replay multiplies the weights (initially 1) of one to three
values by a factor in {0.01, 0.1, 0.3, 3, 10, 100}, and the step is kept when the plan
after keep moves costs no more (sideways steps cross plateaus). The values whose weights
change are drawn from the victims and runners-up of the chain's last kept replay (the
choices that a small change flips), with a seeded generator: the same plan every run.
The two climbs take turns until the work limit. A climb's replay is not run again
where, at every eviction of the replay it stands on, the new weights choose the same
victim (the candidates' keys before weights are kept): it is that very replay, and its
work is spent as if it ran. Nor is a climb's descent from a sequence met before (half of
them on the sample chain): its outcome and its work are kept. At 0.5× of the store-all peak this
takes auto from 1.126 to 1.105 times the base cost on the SegNet shape (the exact
solver's best in Checkmate's model) and, with the hoist moves, from 1.190 to 1.157 on
the U-Net shape (the swap moves then reach 1.149, below the exact solver's 1.151)
(``scripts/bench_quality.py --section improve``).

**Guarantee.** Each accepted keep move keeps every step's memory within the budget
(checked against the profile, which only over-estimates after deletions; a release's
credit only under-counts) and every step valid, and removes a compute: the cost never
rises. A hoist or swap move is taken only
when the simulator replays its plan within the budget at a lower cost. The returned schedule is
replayed by the simulator; one that failed (a bug) would never be returned.

**Cost.** A round is O(steps + Σ gap lengths) with numpy slices for the checks, plus a
replay; a re-eviction is O(evictions · resident values) in numpy (one expression scores
every live value; a plain scan, the same keys, where at most 48 values are live) plus O(edges · degree) per pass over the order to keep next uses, lingering
next uses and r up to date, and is charged as the per-value scan it replaced was
(resident values, plus their out-degrees when lingering), so the same work limit stops it
at the same point; a hoist round simulates at most 8 candidates, O(steps) each (counted as 4
units per step); a swap round prunes at most 16 candidates and covers at most 8 of
them three times (each pass a replay and the splits: counted as 6 units per step; with
stretches, 16 candidates); a keep round with releases reuses the last keep round's
replay of the same plan, a swap round with stretches the plain round's candidates. A
sequence met again in the same pass is neither replayed nor hoisted again (kept by
content; a kept hoist round is charged again, spend by spend); the re-evictions of one
order share what depends only on it (:func:`_order_facts`), and a climb's replay met
again is not pruned again. Everything stops at the work limit or at ``deadline`` (a
``time.perf_counter()`` value): anytime, the best plan so far is returned.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat_cli.algorithms.segments import prune_unread, schedule_from_sequence
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, Schedule
from remat_cli.simulate import Metrics, SimResult, simulate

__all__ = ["Improvement", "improve_plan", "work_limit", "RANKINGS", "SCORES", "CLIMBS", "WORK_PER_STEP", "WORK_FLOOR", "POLISH_SHARE"]

#: How a round orders its candidate moves: by cost saved per byte kept ("per-byte"), or
#: per byte·step kept ("per-byte-step", short gaps first).
RANKINGS = ("per-byte", "per-byte-step")
#: Re-eviction scores, least evicted first (module docstring): r/(size·d), r/size,
#: r/(size·d²), c/(size·d); tried in this order until the deadline.
SCORES = ("r/size/d", "r/size", "r/size/d2", "c/size/d")
#: The scores whose lingering replays the restarts hill-climb on (the other two won no
#: cell of scripts/bench_quality.py's CNN-shaped graphs that these did not).
CLIMBS = ("r/size/d", "r/size")

#: Memory of a step that no longer exists (its compute or free was removed): never binds.
_GONE = -(2**62)
#: A re-eviction gives up past this many computes per node of its order (it thrashes).
_MAX_FACTOR = 20
#: Default work units per step of the plan and node of the graph (:func:`work_limit`).
WORK_PER_STEP = 300
#: ... and at least this many (about 0.2 s on this project's 2-core machine when idle).
WORK_FLOOR = 600_000
#: Nodes a recomputation-cost estimate r looks at (freed ancestors, depth first).
_R_NODES = 16
#: The swap moves' polish gets this share of the work limit on top of it (1/8).
POLISH_SHARE = 8


def work_limit(graph: Graph, schedule: Schedule) -> int:
    """Units of work :func:`improve_plan` spends at most by default: ``WORK_PER_STEP`` per
    step of the plan and node of the graph, at least ``WORK_FLOOR`` (about a quarter of auto's own time on 1,000-node
    training graphs: 0.3–0.8 s; scripts/bench_quality.py --section improve)."""
    return max(WORK_FLOOR, WORK_PER_STEP * (len(schedule) + graph.n))


class _Limits:
    """Work left and the deadline: :meth:`spend` says when either has run out. With a
    ``log`` (a list), each spend is written down, and ``short`` says whether one ran out:
    a round that did not run out can be replayed from its log (:func:`_replayed`)."""

    __slots__ = ("deadline", "work", "granted", "log", "short")

    def __init__(self, deadline: float | None, work: int) -> None:
        self.deadline = deadline
        self.work = work
        self.granted = work
        self.log: list[int] | None = None
        self.short = False

    def spend(self, units: int) -> bool:
        """Spend ``units``; True when the work or the time is spent."""
        self.work -= units
        out = self.out()
        if self.log is not None:
            self.log.append(units)
            self.short = self.short or out
        return out

    def out(self) -> bool:
        return self.work < 0 or (self.deadline is not None and time.perf_counter() > self.deadline)


@dataclass(frozen=True, eq=False)
class Improvement:
    """What :func:`improve_plan` returns: the schedule (the input itself when nothing
    cheaper was found), its simulated metrics, how it was found (``score``: the
    re-eviction score, None for the input plan; ``restart``: 0, or which perturbed
    re-eviction; ``ranking``: the keep moves' ranking; None when unchanged), and
    whether the deadline or the work limit cut the search short."""

    schedule: Schedule
    metrics: Metrics
    score: str | None
    restart: int
    ranking: str | None
    stopped: bool

    @property
    def improved(self) -> bool:
        return self.ranking is not None


def improve_plan(
    graph: Graph,
    schedule: Schedule,
    budget: int,
    *,
    deadline: float | None = None,
    max_work: int | None = None,
    replay: bool = False,
    restarts: int = 64,
    max_rounds: int = 64,
) -> Improvement:
    """A plan for ``graph`` that costs at most what ``schedule`` costs and peaks at most
    ``max(budget, schedule's peak)`` bytes (fixed memory included): keep moves on the
    plan, and with ``replay`` also on re-evictions of its order, each score plain and
    then ``restarts`` times perturbed (module docstring).
    ``schedule`` must be valid (ValueError otherwise). Stops with the best plan so far
    at ``deadline`` (``time.perf_counter()`` seconds) or after ``max_work`` units of work
    (default :func:`work_limit`; a unit is a step replayed or checked, or a value scored
    for eviction), which bounds it deterministically: same input, same plan."""
    sim = simulate(graph, schedule)
    if sim.metrics is None:
        raise ValueError(f"improve_plan needs a valid schedule: {sim.error}")
    start = sim.metrics
    limit = max(int(budget), start.peak_bytes)
    best = Improvement(schedule, start, None, 0, None, False)

    limits = _Limits(deadline, work_limit(graph, schedule) if max_work is None else max_work)
    late = limits.out
    # the same sequence comes back (both rankings start from it; the polish starts from
    # the best plan): its replay and its hoist round are kept (by content, bounded)
    sims: dict[tuple[int, ...], tuple[Schedule, SimResult]] = {}
    hoisted: dict[tuple[int, ...], tuple[list[int], list[int] | None]] = {}
    descents: dict[tuple[int, ...], tuple[list[int], tuple[float, bool]]] = {}

    def descend(seq: list[int], score: str | None, restart: int = 0, hoist: bool | None = None, swap: bool = False) -> tuple[float, bool]:
        """Keep moves from ``seq`` under each ranking, and hoist moves where no keep move
        fits (restarts: the first ranking only and no hoists, for time), then (``swap``,
        the polish) swap moves, swaps with stretches and keep moves with releases, in that
        order, so each comes in only where the ones before it stall; keeps the cheapest. Returns the cost reached (inf: none fits) and
        False when late."""
        nonlocal best
        reached = math.inf
        replayed: dict = {}  # the keep round's last replay, for the release round
        for ranking in RANKINGS[:1] if restart else RANKINGS:
            cur = seq
            for _ in range(max_rounds):
                if late():
                    break
                nxt = _keep_round(graph, cur, limit, ranking, limits, replayed=replayed if swap else None, sims=sims)
                if nxt is None and (replay and not restart if hoist is None else hoist):
                    nxt = _replayed(hoisted, cur, limits, lambda: _hoist_round(graph, cur, limit, limits))
                if nxt is None and swap:
                    nxt = _swap_round(graph, cur, limit, limits, replayed=replayed)
                if nxt is None and swap:  # the polish: swaps whose splits may stretch inputs
                    nxt = _swap_round(graph, cur, limit, limits, True, replayed)
                if nxt is None and swap:  # the polish: keep moves that fit by what they release
                    nxt = _keep_round(graph, cur, limit, ranking, limits, True, replayed)
                if nxt is None:
                    break
                cur = nxt
            candidate, sim = _simulated(graph, cur, sims)
            m = sim.metrics
            # every accepted move is safe by construction; the replay is what we rely on
            if m is not None and m.peak_bytes <= limit:
                reached = min(reached, m.cost)
                if m.cost < best.metrics.cost:
                    best = Improvement(candidate, m, score, restart, ranking, False)
            if late():
                return reached, False
        return reached, True

    finished = True
    if start.recomputations:
        finished = descend(prune_unread(graph, schedule.compute_nodes.tolist()), None)[1]
    if replay and finished and best.metrics.cost > graph.base_cost:
        order = _first_computes(schedule.compute_nodes.tolist(), graph.n)
        mem = graph.mem.tolist()
        movable = [v for v in order if mem[v] > 0]  # the values an eviction can choose
        rng = random.Random(0)  # deterministic restarts
        # the plain replays first (lingering and not), then hill climbs on two lingering ones
        chains = [_Chain(score, linger, [1.0] * graph.n) for linger in (True, False) for score in SCORES]
        facts: dict = {}  # what every replay of ``order`` starts from (_order_facts)
        climbs = [c for c in chains if c.linger and c.score in CLIMBS]
        for attempt in range(len(chains) + len(climbs) * restarts):
            if best.metrics.cost <= graph.base_cost:
                break  # nothing is cheaper
            if attempt < len(chains):
                chain, weight = chains[attempt], chains[attempt].weight
            else:
                chain = climbs[(attempt - len(chains)) % len(climbs)]
                weight = _perturb(chain.weight, chain.close or movable, rng)
            same = None if chain.trace is None else _rechosen(chain.trace, chain.weight, weight)
            if same is not None:  # the very replay: not run again (its work is spent)
                trace = same
                seq, close = trace.replay(limits), set(trace.close)
            else:
                trace = _Trace() if chain.linger and chain.score in CLIMBS else None  # only climbs look
                close = set()
                seq = _reevict(graph, order, limit, chain.score, limits, weight, chain.linger, close, trace, facts)
            if seq is None:
                if late():
                    finished = False
                    break
                continue
            label = chain.score + (" lingering" if chain.linger else "")
            restart = max(0, attempt - len(chains) + 1)
            if same is not None and trace.pruned is not None:
                pruned = list(trace.pruned)  # the very replay: pruned as it was
            else:
                pruned = prune_unread(graph, seq)
                if trace is not None:
                    trace.pruned = list(pruned)
            if restart:  # a climb's descent depends on the sequence only: kept by content
                reached, finished = _descended(descents, pruned, limits, lambda: descend(pruned, label, restart))
            else:
                reached, finished = descend(pruned, label, restart)
            if reached <= chain.cost:  # sideways steps too: plateaus are wide
                chain.weight, chain.cost, chain.close = weight, reached, sorted(close)
                chain.trace = None if trace is None or trace.full else trace
            if not finished:
                break
        if finished and best.restart:  # a climb's plan has had no hoist moves yet
            finished = descend(best.schedule.compute_nodes.tolist(), best.score, best.restart, True)[1]
        if best.metrics.cost > graph.base_cost:  # swap moves polish the final plan only
            limits.work = max(limits.work, 0) + limits.granted // POLISH_SHARE
            finished = descend(best.schedule.compute_nodes.tolist(), best.score, best.restart, True, True)[1] and finished
    if not finished:
        best = Improvement(best.schedule, best.metrics, best.score, best.restart, best.ranking, True)
    return best


#: Sequences whose replay or hoist round improve_plan keeps at most (then it starts over).
_KEPT = 64


def _simulated(graph: Graph, seq: list[int], sims: dict) -> tuple[Schedule, SimResult]:
    """The schedule of ``seq`` (frees at last read) and its replay with per-step memory,
    kept in ``sims`` by content: the same sequence is replayed once."""
    key = tuple(seq)
    hit = sims.get(key)
    if hit is None:
        if len(sims) >= _KEPT:
            sims.clear()
        schedule = schedule_from_sequence(graph, seq)
        hit = sims[key] = (schedule, simulate(graph, schedule, per_step=True))
    return hit


def _replayed(kept: dict, seq: list[int], limits: _Limits, run) -> list[int] | None:
    """``run()``, a round over ``seq`` whose outcome depends only on ``seq``'s content and on
    whether ``limits`` run out at one of its spends, or its outcome kept in ``kept``: the
    work it spent is spent again, spend by spend, and where that runs out the round
    returns None as it would have; a round that ran out is not kept."""
    return _kept_or_run(kept, seq, limits, run, None, lambda out: True, _copy)


def _copy(seq: list[int] | None) -> list[int] | None:
    """A copy of a kept sequence (the caller may change the one it gets)."""
    return None if seq is None else list(seq)


def _descended(kept: dict, seq: list[int], limits: _Limits, run) -> tuple[float, bool]:
    """``run()``, a climb's descent from ``seq`` (keep moves under the first ranking, no
    hoists), or its outcome kept in ``kept`` as :func:`_replayed` keeps a round's: the work
    it spent is spent again, spend by spend; where that runs out it returns (inf, False),
    as the descent would have stopped there. A descent met again cannot lower the best
    plan (it reaches what it reached, and every plan on its way costs at least that), so
    only its outcome and its work matter. One that ran out or was late is not kept."""
    assert limits.log is None, "a climb's descent has no hoist rounds, which log their own work"
    return _kept_or_run(kept, seq, limits, run, (math.inf, False), lambda out: out[1])


def _kept_or_run(kept: dict, seq: list[int], limits: _Limits, run, stopped: Any, keep: Any, copy: Any = None) -> Any:
    """The outcome of ``run()`` on ``seq``, kept in ``kept`` by content (bounded) where it did
    not run out of ``limits`` and ``keep(outcome)`` holds, with the work it spent written
    down; a kept one spends that work again, spend by spend, and returns ``stopped`` where
    that runs out, as the run would have. ``copy``: what is kept, and what a kept one
    returns, is a copy made by it."""
    key = tuple(seq)
    hit = kept.get(key)
    if hit is not None:
        for units in hit[0]:
            if limits.spend(units):
                return stopped
        return hit[1] if copy is None else copy(hit[1])
    limits.log, limits.short = [], False
    try:
        out = run()
        log, short = limits.log, limits.short
    finally:
        limits.log, limits.short = None, False
    if not short and keep(out):
        if len(kept) >= _KEPT:
            kept.clear()
        kept[key] = (log, out if copy is None else copy(out))
    return out


@dataclass
class _Chain:
    """One hill climb over re-eviction weights: its score, whether values linger, the
    weights it stands on and the cost they reached (after keep moves)."""

    score: str
    linger: bool
    weight: list[float]
    cost: float = math.inf
    close: list[int] | None = None
    trace: _Trace | None = None  # the replay with ``weight``


#: Hoist moves a round simulates at most (the recomputations whose recomputed inputs cost
#: the most first).
_HOIST_TRIES = 8
#: Factors a restart multiplies a few values' eviction weights by.
_FACTORS = (0.01, 0.1, 0.3, 3.0, 10.0, 100.0)


def _perturb(weight: list[float], movable: list[int], rng: random.Random) -> list[float]:
    """``weight`` with one to three of the ``movable`` values' weights multiplied by a
    factor of :data:`_FACTORS` (a neighbour in the hill climb)."""
    out = list(weight)
    if movable:
        for _ in range(rng.choice((1, 1, 2, 3))):
            out[rng.choice(movable)] *= rng.choice(_FACTORS)
    return out


def _first_computes(seq: list[int], n: int) -> list[int]:
    """The nodes of ``seq`` in the order of their first computation."""
    seen = [False] * n
    out = []
    for v in seq:
        if not seen[v]:
            seen[v] = True
            out.append(v)
    return out


def _reevict(
    graph: Graph,
    order: list[int],
    limit: int,
    score: str,
    limits: _Limits,
    weight: list[float] | None = None,
    linger: bool = False,
    close: set[int] | None = None,
    trace: _Trace | None = None,
    facts: dict | None = None,
) -> list[int] | None:
    """The compute sequence of replaying ``order`` (each node's inputs before it) within
    ``limit`` bytes, evicting by ``score`` with knowledge of every future use; None when
    it cannot fit (a compute finds nothing evictable), thrashes, or runs out of ``limits``.
    ``trace`` (empty) records what the weights could change (:class:`_Trace`). ``facts``
    keeps what depends only on the graph and ``order`` between replays of the same order
    (:func:`_order_facts`).

    The victim is the resident value (not pinned: not an input of the compute under way) of
    least key, the first in the live order among equals; a value nobody reads again wins
    outright. The facts a key needs are kept up to date as the replay moves instead of being
    looked up per value and eviction: each value's next use (advanced when the position
    passes a use), with ``linger`` the earliest next use of its successors that are not
    resident, and its recomputation cost r (cached until a value its search looked at
    changes residency); the keys of all live values are then one numpy expression, in the
    same float operations as one value's: cost / (size · d^p), times its weight (:func:`_key`).
    Up to :data:`_SCAN_LIVE` live values a plain Python scan makes the same choice faster."""
    n = graph.n
    mem, ws, cost, degree, uses_at, first_use, first_soon = _order_facts(graph, order, linger, facts)
    preds = graph.pred_lists
    succs = graph.succ_lists
    never = len(order) + 1  # "no next use": later than every position
    ptr = [0] * n
    nxt = list(first_use)  # next use at or after pos
    resident = [False] * n
    pins = [0] * n
    live: list[int] = []  # resident values of nonzero size (eviction candidates)
    where = [-1] * n
    out: list[int] = []
    cur = graph.fixed_mem
    pos = 0
    passed = 0  # the uses at positions before this one are behind pos
    max_computes = _MAX_FACTOR * max(len(order), 1)
    use_r = score.startswith("r")
    power = 0 if score == "r/size" else 2 if score == "r/size/d2" else 1
    # linger: per value, the earliest next use of a successor that is not resident
    soon = list(first_soon) if linger else nxt
    # what a scan reads, per value: its wanted position (-1 while pinned), and the work
    # its successors add to a lingering scan (0 while pinned)
    want = [a if a < b else b for a, b in zip(nxt, soon)]
    units = list(degree)
    # r cache: valid until a value its search looked at changes residency
    r = [0.0] * n
    r_ok = [False] * n
    # the same as arrays, for numpy scans of long live lists: made (from the lists) the
    # first time the live list grows past _SCAN_LIVE, then kept equal to the lists; until
    # then only the lists are kept (most replays of small graphs never need the arrays)
    arrays = False
    live_a = want_a = units_a = r_a = r_ok_a = mem_a = cost_a = weight_a = np.zeros(0)
    exact = True
    watchers: list[list[int]] = [[] for _ in range(n)]  # value -> cached r that looked at it

    def as_arrays() -> None:
        """Make the arrays from the lists (the live list is about to outgrow a plain scan)."""
        nonlocal arrays, live_a, want_a, units_a, r_a, r_ok_a, mem_a, cost_a, weight_a, exact
        arrays = True
        live_a = np.zeros(n, dtype=np.int64)
        live_a[: len(live)] = live
        want_a = np.array(want, dtype=np.int64)
        units_a = np.array(units, dtype=np.int64)
        r_a = np.array(r, dtype=np.float64)
        r_ok_a = np.array(r_ok, dtype=bool)
        mem_a = graph.mem.astype(np.int64)
        cost_a = graph.cost.astype(np.float64)
        weight_a = None if weight is None else np.asarray(weight, dtype=np.float64)
        # keys in int64 while size · d^p cannot overflow (d <= never + 1), else per value
        exact = int(graph.mem.max(initial=0)) * (never + 1) ** power < 2**62

    def settle(u: int) -> None:
        """``u``'s next use or its successors' changed: what a scan reads of it."""
        if not pins[u]:
            w = want[u] = nxt[u] if nxt[u] < soon[u] else soon[u]
            if arrays:
                want_a[u] = w

    def rise(s: int, old: int) -> None:
        """Successor ``s``'s lingering next use rose from ``old``: the predecessors whose
        earliest it was look again."""
        for u in preds[s]:
            if soon[u] == old:
                best = never
                for t in succs[u]:
                    if not resident[t] and nxt[t] < best:
                        best = nxt[t]
                if best != old:
                    soon[u] = best
                    settle(u)

    def residency(v: int, now: bool) -> None:
        """``v`` became resident (``now``) or was freed: the facts that depend on it."""
        resident[v] = now
        if watchers[v]:
            for u in watchers[v]:
                r_ok[u] = False
                if arrays:
                    r_ok_a[u] = False
            watchers[v] = []
        if linger and nxt[v] != never:
            if now:
                rise(v, nxt[v])
            else:
                t = nxt[v]
                for u in preds[v]:
                    if t < soon[u]:
                        soon[u] = t
                        settle(u)

    def move_to(q: int) -> None:
        """Set the position to ``q``: the uses before it are behind."""
        nonlocal pos, passed
        pos = q
        while passed < q:
            for u in preds[order[passed]]:
                lst = uses_at[u]
                i = ptr[u] + 1  # the use at ``passed`` is u's next use
                ptr[u] = i
                old = nxt[u]
                nxt[u] = lst[i] if i < len(lst) else never
                settle(u)
                if linger and not resident[u]:
                    rise(u, old)
            passed += 1

    def dead(u: int) -> bool:
        """True when nothing reads ``u`` again, nor (``linger``) any successor of it."""
        return nxt[u] == never and not (linger and any(nxt[s] != never for s in succs[u]))

    def recompute_cost(u: int) -> float:
        """r: cost of ``u`` plus that of the freed ancestors it needs (depth first, at most
        :data:`_R_NODES`); the values it looked at are watched."""
        total = cost[u]
        if all(resident[w] for w in preds[u]):
            for w in preds[u]:
                watchers[w].append(u)
            return total  # the common case: its inputs are all there
        seen = {u}
        stack = [u]
        while stack and len(seen) < _R_NODES:
            for w in preds[stack.pop()]:
                watchers[w].append(u)
                if not resident[w] and w not in seen:
                    seen.add(w)
                    total += cost[w]
                    stack.append(w)
        return total

    def free(u: int) -> None:
        nonlocal cur
        residency(u, False)
        k = where[u]
        if k >= 0:
            last = live.pop()
            if last != u:
                live[k] = last
                if arrays:
                    live_a[k] = last
                where[last] = k
            where[u] = -1
        cur -= mem[u]

    def r_of(u: int) -> float:
        """``u``'s r, from the cache or computed (and cached)."""
        if not r_ok[u]:
            x = r[u] = recompute_cost(u)
            r_ok[u] = True
            if arrays:
                r_a[u] = x
                r_ok_a[u] = True
        return r[u]

    def scan() -> tuple[int, int, int]:
        """The victim, the runner-up (-1: none) and the work units of one eviction, by a
        plain scan of the live values in order: what :func:`pick` and ``room``'s numpy
        expressions choose (a value never read again outright, else the first of least key,
        then the first of least key among the others; strict ``<`` in live order), with
        the same keys (:func:`_key`, the same float operations) but no fixed overhead per
        numpy call, which dominates on short live lists."""
        spent = len(live)
        wanted = list(map(want.__getitem__, live))
        if never in wanted:
            i = wanted.index(never)
            if linger:
                spent += sum(map(units.__getitem__, live[: i + 1]))
            return live[i], -1, spent
        if linger:
            spent += sum(map(units.__getitem__, live))
        cands = [u for u, w in zip(live, wanted) if w >= 0]  # not pinned
        nums = [r[u] if r_ok[u] else r_of(u) for u in cands] if use_r else list(map(cost.__getitem__, cands))
        # _key's divisions, inlined per power (no call per value): the same float operations
        q = pos - 1
        if power == 1:
            raw = [x / (mem[u] * (want[u] - q)) for x, u in zip(nums, cands)]
        elif power == 0:
            raw = [x / mem[u] for x, u in zip(nums, cands)]
        else:
            raw = [x / (mem[u] * (want[u] - q) * (want[u] - q)) for x, u in zip(nums, cands)]
        i, j = _least_two(raw if weight is None else [k * weight[u] for k, u in zip(raw, cands)])
        victim, runner_up = (cands[i] if i >= 0 else -1), (cands[j] if j >= 0 else -1)
        if trace is not None and victim >= 0:
            trace.choose(cands, raw, victim, runner_up)
        return victim, runner_up, spent

    def pick(lv: np.ndarray, want: np.ndarray, unpinned: np.ndarray) -> tuple[int, int]:
        """The victim and the runner-up (-1: none) among the live values ``lv`` (their
        wanted positions ``want``) by least key: the first of the least, then the first of
        the least among the others."""
        if use_r:
            for i in np.flatnonzero(unpinned & ~r_ok_a[lv]).tolist():
                r_of(live[i])
            num = r_a[lv]
        else:
            num = cost_a[lv]
        raw = None
        with np.errstate(all="ignore"):
            if exact:
                key = _key(num, mem_a[lv], want - (pos - 1), power)
            else:  # as Python does it: the exact integer, then one rounding
                key = np.array(
                    [
                        _key(x, mem[u], w - pos + 1, power) if w >= 0 else math.inf
                        for x, u, w in zip(num.tolist(), lv.tolist(), want.tolist())
                    ]
                )
            if trace is not None and not trace.full:
                raw = key[unpinned].tolist()
            if weight_a is not None:
                key *= weight_a[lv]
            key[~(unpinned & (key < math.inf))] = math.inf  # pinned, and NaN: never chosen
        i = int(key.argmin())
        if not key[i] < math.inf:
            return -1, -1
        key[i] = math.inf
        j = int(key.argmin())
        victim, runner_up = live[i], live[j] if key[j] < math.inf else -1
        if trace is not None and not trace.full:
            trace.choose(lv[unpinned].tolist(), raw, victim, runner_up)
        return victim, runner_up

    def room(need: int) -> bool:
        while cur + need > limit:
            m = len(live)
            if not m:
                return False  # nothing to evict
            if m <= _SCAN_LIVE:
                victim, runner_up, spent = scan()
            else:
                if not arrays:
                    as_arrays()
                lv = live_a[:m]
                wanted = want_a[lv]
                gone = wanted == never
                spent = m
                if gone.any():  # never read again: free the first such value
                    i = int(gone.argmax())
                    victim, runner_up = live[i], -1
                    if linger:
                        spent += int(units_a[lv[: i + 1]].sum())
                else:
                    if linger:
                        spent += int(units_a[lv].sum())
                    victim, runner_up = pick(lv, wanted, wanted >= 0)
            if victim < 0:
                return False
            if trace is not None:
                trace.spends.append(spent)
            if limits.spend(spent):
                return False
            if close is not None and runner_up >= 0:
                close.update((victim, runner_up))  # a choice a small change of weights flips
            free(victim)
        return True

    def compute(v: int) -> bool:
        nonlocal cur
        need = mem[v] + ws[v]
        if len(out) >= max_computes or (cur + need > limit and not room(need)):
            return False
        out.append(v)
        residency(v, True)
        cur += mem[v]
        if mem[v] > 0:
            where[v] = len(live)
            if arrays:
                live_a[len(live)] = v
            live.append(v)
        return True

    def pin(u: int) -> None:
        """A compute under way needs ``u``: it cannot be evicted."""
        pins[u] += 1
        if pins[u] == 1:
            want[u] = -1
            units[u] = 0
            if arrays:
                want_a[u] = -1
                units_a[u] = 0

    def release(u: int) -> None:
        """Undo a :func:`pin`; ``u`` is freed when no longer pinned and dead."""
        pins[u] -= 1
        if not pins[u]:
            units[u] = degree[u]
            w = want[u] = nxt[u] if nxt[u] < soon[u] else soon[u]  # settle(u)
            if arrays:
                units_a[u] = degree[u]
                want_a[u] = w
            if resident[u] and nxt[u] == never and not (linger and any(nxt[s] != never for s in succs[u])):
                free(u)  # dead(u)

    def ensure(target: int) -> bool:
        """Make ``target`` resident and pin it, recomputing freed ancestors (iteratively)."""
        if resident[target]:
            pin(target)  # the common case
            return True
        stack = [(target, False)]
        while stack:
            v, ready = stack.pop()
            if not ready:
                if resident[v]:
                    pin(v)
                    continue
                stack.append((v, True))
                stack.extend((u, False) for u in reversed(preds[v]))
                continue
            if not compute(v):  # its inputs are resident and pinned
                return False
            for u in preds[v]:
                release(u)
            pin(v)
        return True

    for p, v in enumerate(order):
        if passed < p:
            move_to(p)
        else:
            pos = p  # (move_to's work when no use is left behind)
        if resident[v]:
            continue  # already there (a target computed early): nothing to do
        for u in preds[v]:
            if resident[u]:
                pin(u)  # (ensure's common case)
            elif not ensure(u):
                return None
        if not compute(v):
            return None
        move_to(p + 1)
        for u in preds[v]:
            release(u)
        if pins[v] == 0 and dead(v):
            free(v)
    if trace is not None:
        trace.seq = out
        trace.close = set(close) if close is not None else set()
    return out


def _order_facts(
    graph: Graph, order: list[int], linger: bool, facts: dict | None
) -> tuple[list[int], list[int], list[float], list[int], list[list[int]], list[int], list[int]]:
    """What a re-eviction of ``order`` starts from and only reads: sizes, workspaces, costs
    and out-degrees as lists, the positions in ``order`` that read each value, each value's
    first use and (``linger``) its successors' earliest first use (never: ``len(order) +
    1``). Kept in ``facts`` (None: made afresh) while it is asked for the same ``order``
    object: :func:`improve_plan` replays one order dozens of times."""
    if facts is not None and facts.get("order") is order and linger in facts:
        return facts[linger]
    n = graph.n
    preds = graph.pred_lists
    succs = graph.succ_lists
    never = len(order) + 1
    uses_at: list[list[int]] = [[] for _ in range(n)]  # positions in order that read v
    for p, v in enumerate(order):
        for u in preds[v]:
            uses_at[u].append(p)
    first = [lst[0] if lst else never for lst in uses_at]
    soon = [min((first[s] for s in succs[u]), default=never) for u in range(n)] if linger else first
    out = (graph.mem.tolist(), graph.workspace.tolist(), graph.cost.tolist(), [len(s) for s in succs], uses_at, first, soon)
    if facts is not None:
        if facts.get("order") is not order:
            facts.clear()
            facts["order"] = order
        facts[linger] = out
    return out


def _least_two(keys: list[float]) -> tuple[int, int]:
    """Positions of the least key and of the least among the others (-1: none; inf and
    NaN never count), the first of equals: what two argmins over the keys take."""
    i = j = -1
    a = b = math.inf
    for k, x in enumerate(keys):
        if x < a:
            i, a, j, b = k, x, i, a
        elif x < b:
            j, b = k, x
    return i, j


#: Candidates a re-eviction's trace keeps at most (about 7 MB; a replay's candidates are its
#: work units, which reach millions on 10,000-node graphs): a longer replay is run again.
_TRACE_ITEMS = 100_000


@dataclass
class _Trace:
    """What a re-eviction did that its weights could change: the work units of each
    eviction (``spends``) and, per eviction chosen by key, (index in ``spends``, the
    candidates in live order, their keys before weights, the victim, the runner-up); its
    sequence and ``close`` set. A replay under other weights that evicts the same values
    is this very replay, but for its runners-up (:func:`_rechosen`); ``pruned``: its
    sequence without unread computes, kept once made (a replay met again is not pruned
    again)."""

    spends: list[int] = field(default_factory=list)
    choices: list[tuple[int, list[int], list[float], int, int]] = field(default_factory=list)
    seq: list[int] | None = None
    close: set[int] = field(default_factory=set)
    pruned: list[int] | None = None  # ``seq`` without its unread computes, once made
    items: int = 0  # candidates kept in ``choices``
    full: bool = False  # past :data:`_TRACE_ITEMS`: nothing kept, the replay runs again

    def choose(self, cands: list[int], raw: list[float], victim: int, runner_up: int) -> None:
        """Keep one eviction's choice, unless the trace would hold more than
        :data:`_TRACE_ITEMS` candidates (then it is full: it keeps nothing)."""
        if self.full:
            return
        self.items += len(cands)
        if self.items > _TRACE_ITEMS:
            self.full, self.choices = True, []
            return
        self.choices.append((len(self.spends), cands, raw, victim, runner_up))

    def replay(self, limits: _Limits) -> list[int] | None:
        """The sequence, after spending the work the replay spent (None where it runs out,
        as the replay would have stopped there)."""
        for units in self.spends:
            if limits.spend(units):
                return None
        return None if self.seq is None else list(self.seq)


def _rechosen(trace: _Trace, old: list[float], new: list[float]) -> _Trace | None:
    """The trace of re-evicting with weights ``new`` where it evicts the same values as
    ``trace``, a replay with weights ``old`` (of the same order, limit, score and
    lingering); None where a victim changes. The keys before weights and the candidates of
    each eviction are those of the replay so far, so where each victim under ``new`` is
    the same, so is the next eviction's state (by induction): the same sequence and work;
    only runners-up may differ, and with them the ``close`` set. Only evictions among
    whose candidates a weight changed are looked at again."""
    changed = {u for u, (a, b) in enumerate(zip(old, new)) if a != b}
    choices = trace.choices
    for c, (at, cands, raw, victim, runner_up) in enumerate(trace.choices):
        if changed.isdisjoint(cands):
            continue
        i, j = _least_two([k * new[u] for k, u in zip(raw, cands)])
        if i < 0 or cands[i] != victim:
            return None
        second = cands[j] if j >= 0 else -1
        if second != runner_up:
            if choices is trace.choices:
                choices = list(choices)
            choices[c] = (at, cands, raw, victim, second)
    if choices is trace.choices:
        return trace
    close = {x for _, _, _, victim, runner_up in choices if runner_up >= 0 for x in (victim, runner_up)}
    return _Trace(trace.spends, choices, trace.seq, close, trace.pruned)


#: Live values up to which a re-eviction scans them in plain Python (:func:`_reevict`'s
#: ``scan``) rather than in numpy, whose fixed cost per call dominates on short lists. The
#: choice is the same either way: this only sets the speed.
_SCAN_LIVE = 48


def _key(num: float | np.ndarray, size: int | np.ndarray, d: int | np.ndarray, power: int) -> float | np.ndarray:
    """A re-eviction key before its weight: ``num`` (r or c) / (size · d^power), the exact
    integer divisor (Python integers, or int64 arrays where they cannot overflow) and then one
    division, so a value gets the same float whether scored alone or in an array."""
    return num / (size if power == 0 else size * d if power == 1 else size * d * d)


def _keep_round(
    graph: Graph,
    seq: list[int],
    limit: int,
    ranking: str,
    limits: _Limits,
    release: bool = False,
    replayed: dict | None = None,
    sims: dict | None = None,
) -> list[int] | None:
    """One round of keep moves over the compute sequence ``seq`` (frees at last read);
    the new sequence, unread computes deleted, or None when no move fits. With
    ``release``, a move that does not fit as it stands is checked again with what it
    releases (:func:`_release_credit`). ``replayed`` keeps the last sequence's schedule
    and memory profile, for the next round on the same sequence object; ``sims`` the
    replays by content (:func:`_simulated`)."""
    hit = None if replayed is None else replayed.get("keep")
    if hit is not None and hit[0] is seq:
        schedule, profile = hit[1], hit[2]
    else:
        schedule, sim = _simulated(graph, seq, {} if sims is None else sims)
        profile = sim.memory
        assert profile is not None, "the sequence of a valid plan stays valid"
        if replayed is not None:
            replayed["keep"] = (seq, schedule, profile)
    memory = profile.copy()
    ops = schedule.ops.tolist()
    nodes = schedule.nodes.tolist()
    mem = graph.mem.tolist()
    cost = graph.cost.tolist()
    preds = graph.pred_lists
    n = graph.n
    last_free = [-1] * n
    latest = [-1] * n  # compute step of each node's latest copy
    readers: dict[int, list[int]] = {}  # compute step of a copy -> steps of its readers
    src: dict[int, list[int]] = {}  # compute step -> the copies (compute steps) it reads
    moves: list[tuple[float, int, int, int, int]] = []  # (-score, step, free step, v, copy)
    compute_index: dict[int, int] = {}  # compute step -> its position in seq
    c = 0
    for k, (op, v) in enumerate(zip(ops, nodes)):
        if op != COMPUTE:
            last_free[v] = k
            continue
        compute_index[k] = c
        c += 1
        if release:  # who reads which copy: only a release needs it
            src[k] = [latest[u] for u in preds[v]]
            for u in preds[v]:
                readers.setdefault(latest[u], []).append(k)
        if latest[v] >= 0 and cost[v] > 0:
            f = last_free[v]
            if mem[v] == 0:
                score = math.inf
            elif ranking == "per-byte":
                score = cost[v] / mem[v]
            else:
                score = cost[v] / (mem[v] * (k - f))
            moves.append((-score, k, f, v, latest[v]))
        latest[v] = k
    if not moves:
        return None
    moves.sort()
    dropped: set[int] = set()
    changed: set[int] = set()  # copies (compute steps) a move of this round extended or released
    limits.spend(len(ops))
    for _, k, f, v, copy in moves:
        if limits.spend(k - f):
            break
        m = mem[v]
        if copy in changed:
            continue  # released: its residency was credited away, extending it undoes that
        credit: list[tuple[int, int, int]] = []
        if k - f > 1 and int(memory[f + 1 : k].max()) + m > limit:
            if not release:
                continue
            # it does not fit as it stands: count what dropping the compute releases
            credit = _release_credit(mem, ops, nodes, k, src[k], readers, changed)
            if not credit or limits.spend(k - f):
                continue
            window = memory[f + 1 : k].copy()
            for q, size, _ in credit:
                window[max(q - f - 1, 0) :] -= size
            if int(window.max()) + m > limit:
                continue
        memory[f + 1 : k] += m
        for q, size, released in credit:
            memory[q:k] -= size
            changed.add(released)
        memory[f] = memory[k] = _GONE
        changed.add(copy)
        dropped.add(compute_index[k])
    if not dropped:
        return None
    return prune_unread(graph, [v for i, v in enumerate(seq) if i not in dropped])


def _release_credit(
    mem: list[int],
    ops: list[int],
    nodes: list[int],
    k: int,
    inputs: list[int],
    readers: dict[int, list[int]],
    changed: set[int],
) -> list[tuple[int, int, int]]:
    """What dropping the compute at step ``k`` frees besides itself (a keep move's
    *release*): each copy among its ``inputs`` whose last reader is step ``k`` is then freed
    after its previous reader (read by nobody else, it is not needed at all), so memory
    falls by its size from the first compute after that reader up to ``k``. Copies in
    ``changed`` (extended or released by an earlier move of the round) are left out.
    Returns (first step, bytes, copy) per released input; it under-counts where a reader
    was dropped earlier in the round, and never over-counts."""
    out: list[tuple[int, int, int]] = []
    for copy in inputs:
        rs = readers[copy]
        size = mem[nodes[copy]]
        if rs[-1] != k or size == 0 or copy in changed:
            continue
        q = (rs[-2] if len(rs) > 1 else copy) + 1
        while ops[q] != COMPUTE:
            q += 1  # the frees right after the previous reader: not counted
        out.append((q, size, copy))
    return out


def _hoist_round(graph: Graph, seq: list[int], limit: int, limits: _Limits) -> list[int] | None:
    """One round of hoist moves over the compute sequence ``seq`` (frees at last read):
    a recomputation of v whose inputs were themselves recomputed for it moves to just
    after the last read of an earlier copy of an input (or before the first of those
    recomputations), where every input still has a copy; the recomputations nobody reads
    any more are deleted. The first move that lowers the cost and fits ``limit`` (by the
    simulator) is taken: the new sequence, or None when none does."""
    preds = graph.pred_lists
    cost = graph.cost.tolist()
    n = graph.n
    # per compute index: which copy of each node is the latest before it, and last reads
    latest = [-1] * n
    copies: list[list[int]] = [[] for _ in range(n)]  # compute indices of each node
    last_read: dict[int, int] = {}  # compute index of a copy -> index of its last reader
    reads: list[list[int]] = []  # per compute index, the copies it reads
    for i, v in enumerate(seq):
        used = [latest[u] for u in preds[v]]
        for c in used:
            last_read[c] = i
        reads.append(used)
        latest[v] = i
        copies[v].append(i)
    if limits.spend(len(seq)):
        return None
    base = sum(cost[v] for v in seq)
    moves: list[tuple[float, int, list[int]]] = []  # (-cost of the fresh inputs, index, spots)
    for c, v in enumerate(seq):
        if copies[v][0] == c or not preds[v]:
            continue  # a first computation, or a source (nothing to save)
        fresh = [i for i in reads[c] if copies[seq[i]][0] != i]  # inputs recomputed
        if not fresh:
            continue
        start = min(fresh)
        spots = {start - 1}
        for u in preds[v]:
            older = [i for i in copies[u] if i < start]
            if older:
                spots.add(last_read.get(older[-1], older[-1]))
        ok = sorted((j for j in spots if 0 <= j < start and all(copies[u][0] <= j for u in preds[v])), reverse=True)
        if ok:
            moves.append((-sum(cost[seq[i]] for i in fresh), c, ok[:3]))
    moves.sort()
    for _, c, spots in moves[:_HOIST_TRIES]:
        v = seq[c]
        for j in spots:
            if limits.spend(4 * len(seq)):  # prune, rebuild and simulate
                return None
            cand = prune_unread(graph, seq[: j + 1] + [v] + seq[j + 1 : c] + seq[c + 1 :])
            if sum(cost[x] for x in cand) >= base:
                continue
            m = simulate(graph, schedule_from_sequence(graph, cand)).metrics
            if m is not None and m.peak_bytes <= limit:
                return cand
    return None


#: Swap moves a round simulates at most (the recomputations that save the most first).
_SWAP_TRIES = 8
#: Recomputations whose saving a swap round computes (the best estimates first).
_SWAP_CANDIDATES = 16
#: Computes a split may insert to rebuild one value (it and its inputs that are gone).
_REGROW_NODES = 16
#: Times a swap covers the excess its candidate's replay shows (splits move memory too).
_COVER_PASSES = 3


def _copies(graph: Graph, seq: list[int]) -> tuple[list[list[int]], dict[int, list[int]]]:
    """Per compute index of ``seq``, the copies (compute indices) it reads, and per copy
    the indices of its readers."""
    preds = graph.pred_lists
    latest = [-1] * graph.n
    reads: dict[int, list[int]] = {}
    src: list[list[int]] = []
    for i, v in enumerate(seq):
        used = [latest[u] for u in preds[v]]
        for c in used:
            reads.setdefault(c, []).append(i)
        src.append(used)
        latest[v] = i
    return src, reads


def _swap_round(
    graph: Graph, seq: list[int], limit: int, limits: _Limits, extend: bool = False, replayed: dict | None = None
) -> list[int] | None:
    """One round of swap moves over the compute sequence ``seq`` (frees at last read): a
    recomputation that a keep move cannot drop (memory would exceed ``limit`` in its gap)
    is dropped anyway, with the recomputations only it read, and the excess is then
    covered by splits (:func:`_cover`) that cost less than what was saved. The first swap
    that the simulator replays within ``limit`` at a lower cost is taken: the new
    sequence, or None when none is. ``extend``: splits may also keep a value's inputs
    until its second computation instead of recomputing them (:func:`_cover`).
    ``replayed`` keeps the candidates of the last sequence, for the next round on the same
    sequence object."""
    L = len(seq)
    if limits.spend(L):
        return None
    cost = graph.cost.tolist()
    base = sum(cost[v] for v in seq)
    hit = None if replayed is None else replayed.get("swap")
    fresh = hit is None or hit[0] is not seq
    moves = _swap_candidates(graph, seq, base, limits) if fresh else hit[1]
    if moves is None:
        return None
    covers = None
    if replayed is not None:
        replayed["swap"] = (seq, moves)
        if fresh:
            replayed["cover"] = {}  # the plain round's first covers, for the stretching round
        covers = replayed["cover"]
    for _, cand in moves[: _SWAP_TRIES * (2 if extend else 1)]:
        kept = covers  # the first pass covers the candidate itself, as the other round does
        for _ in range(_COVER_PASSES):
            if limits.spend(6 * L):  # rebuild and simulate, splits, prune
                return None
            allowance = base - sum(cost[x] for x in cand)
            nxt = _cover(graph, cand, limit, allowance, extend, kept) if allowance > 0 else None
            kept = None
            if nxt is None:
                break
            if nxt is cand:  # it fits: the replay is the proof
                return cand
            cand = nxt
    return None


def _swap_candidates(graph: Graph, seq: list[int], base: float, limits: _Limits) -> list[tuple[float, list[int]]] | None:
    """The swap candidates of ``seq`` (whose computes cost ``base``), most saving first:
    (-saving, the sequence without the recomputation and those only it read); None when
    ``limits`` run out."""
    L = len(seq)
    cost = graph.cost.tolist()
    mem = graph.mem.tolist()
    src, reads = _copies(graph, seq)
    # the recomputations, by an estimate of what dropping one saves: it and the
    # recomputed copies read only on its behalf
    first = [-1] * graph.n
    prev = [-1] * graph.n
    estimates: list[tuple[float, int]] = []
    for i, v in enumerate(seq):
        prior, prev[v] = prev[v], i
        if prior < 0:
            first[v] = i
            continue
        gain, stack, walked = cost[v], list(src[i]), 0
        while stack and walked < 4 * _REGROW_NODES:
            c = stack.pop()
            walked += 1
            if c >= 0 and c != first[seq[c]] and len(reads.get(c, ())) == 1:
                gain += cost[seq[c]]
                stack.extend(src[c])
        if gain > 0 and mem[v] > 0:
            estimates.append((-gain, i))
    estimates.sort()
    moves: list[tuple[float, list[int]]] = []  # (-saving, the sequence without it)
    for _, i in estimates[:_SWAP_CANDIDATES]:
        if limits.spend(L):
            return None
        cand = prune_unread(graph, seq[:i] + seq[i + 1 :])
        save = base - sum(cost[x] for x in cand)
        if save > 0:
            moves.append((-save, cand))
    moves.sort(key=lambda m: m[0])
    return moves


def _cover(graph: Graph, seq: list[int], limit: int, allowance: float, extend: bool = False, kept: dict | None = None) -> list[int] | None:
    """``seq`` itself when its replay fits ``limit``; otherwise ``seq`` with *splits* that
    cover each step's excess (by the replay's memory profile): a copy of w not read
    between two of its reads is freed after the first and computed again (with those of
    its inputs whose copies are gone by then) just before the second. Splits are chosen
    greedily by cost per byte of excess covered, costing less than ``allowance`` in all:
    the new sequence (unread computes deleted; not yet replayed), or None when no such
    cover exists. With ``extend``, each split also comes as a *stretch*: w alone is
    computed again, reading the latest copies of its inputs, which then stay until it
    (their extra memory is what the next replay checks). ``kept``: the replay and the
    copies of the sequences a plain cover was asked for, by content, each taken out by the
    first cover with stretches of the same sequence (both start from the same candidates)."""
    key = tuple(seq)
    hit = None if kept is None else kept.pop(key, None)
    if hit is None:
        schedule = schedule_from_sequence(graph, seq)
        sim = simulate(graph, schedule, per_step=True)
        if sim.memory is None:
            return None
        at = sim.memory[schedule.ops == COMPUTE].tolist()  # memory at each compute
        src, reads = _copies(graph, seq)
        hit = (at, src, reads, {c: r[-1] for c, r in reads.items()})
        if kept is not None and not extend:
            kept[key] = hit
    at, src, reads, last = hit
    need = {j: x - limit for j, x in enumerate(at) if x > limit}
    if not need:
        return seq
    cost = graph.cost.tolist()
    mem = graph.mem.tolist()
    steps = list(need)  # ascending

    def regrow(c: int, b: int) -> list[int] | None:
        """The computes that rebuild copy ``c`` right before index ``b``: its inputs whose
        copies are no longer read at ``b`` first (depth first), then it; None if too many."""
        out: list[int] = []
        seen: set[int] = set()
        stack = [(c, False)]
        while stack:
            x, ready = stack.pop()
            if ready:
                out.append(seq[x])
                if len(out) > _REGROW_NODES:
                    return None
                continue
            stack.append((x, True))
            for u in src[x]:
                if u >= 0 and last.get(u, u) < b and u not in seen:
                    seen.add(u)
                    stack.append((u, False))
        return out

    lo, hi = min(need), max(need)
    splits = []  # (insert before, {excess step: bytes it relieves}, computes)
    stretches = 0
    for c, rs in reads.items():
        w = mem[seq[c]]
        if w == 0 or rs[-1] <= lo or c >= hi:
            continue  # (no gap of this copy's reads spans an excess step: skipped below)
        points = [c, *rs]
        for a, b in zip(points, points[1:]):
            if b <= lo or a >= hi:
                continue
            covered = steps[bisect.bisect_right(steps, a) : bisect.bisect_left(steps, b)]  # a < j < b
            chain = regrow(c, b) if covered else None
            if chain is not None:
                splits.append((b, dict.fromkeys(covered, w), chain))
            if extend and covered and (chain is None or len(chain) > 1):
                # the stretch: inputs whose copies would be gone stay until b instead; at
                # step j it relieves w less the inputs whose last read is before j
                gone = sorted((last.get(u, u), mem[seq[u]]) for u in src[c] if u >= 0 and last.get(u, u) < b)
                relief = {}
                k, held = 0, 0
                for j in covered:
                    while k < len(gone) and gone[k][0] < j:
                        held += gone[k][1]
                        k += 1
                    if w - held > 0:
                        relief[j] = w - held
                if relief:
                    splits.append((b, relief, [seq[c]]))
                    stretches += 1
    if extend and not stretches:
        return None  # nothing the plain cover has not tried
    chosen = _greedy_cover(splits, need, [sum(cost[x] for x in chain) for _, _, chain in splits], allowance)
    if chosen is None:
        return None
    out: list[int] = []
    for j, x in enumerate(seq):
        out.extend(chosen.get(j, ()))
        out.append(x)
    return prune_unread(graph, out)


def _greedy_cover(
    splits: list[tuple[int, dict[int, int], list[int]]], need: dict[int, int], prices: list[float], allowance: float
) -> dict[int, list[int]] | None:
    """The splits :func:`_cover` takes, as {insert before index: computes}: greedily the
    split of least price per byte of excess it still relieves (ties: the earliest), while
    the prices stay under ``allowance``, until no step has excess left; None when the
    splits cannot cover it.

    Each round scores every split at once over flat arrays of (split, step, bytes): the
    gains are exact integer sums, each ratio is the one float division ``price / gain``,
    and argmin takes the first least ratio, so the picks are those of a scan in order."""
    if not splits:
        return None if any(x > 0 for x in need.values()) else {}
    reliefs = [relief for _, relief, _ in splits]
    sizes = np.fromiter(map(len, reliefs), np.int64, len(splits))
    total = int(sizes.sum())
    # each relief's steps as positions in ``need``: found by a sort, not a lookup per step
    keys = np.fromiter(need, np.int64, len(need))
    by_key = np.argsort(keys, kind="stable")
    at = np.fromiter(itertools.chain.from_iterable(reliefs), np.int64, total)
    step = by_key[np.searchsorted(keys[by_key], at)]
    most = max(max(need.values()), max(map(max, map(dict.values, reliefs))))
    # a gain sums at most one relief's bytes: exact in 64 bits unless that could overflow
    exact = np.int64 if abs(most) * (int(sizes.max()) + 1) < 2**62 else object
    left = np.array(list(need.values()), dtype=exact)
    if exact is object:
        size = np.array(list(itertools.chain.from_iterable(map(dict.values, reliefs))), dtype=object)
    else:
        size = np.fromiter(itertools.chain.from_iterable(map(dict.values, reliefs)), np.int64, total)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    price = np.asarray(prices, dtype=np.float64)
    open_ = np.ones(len(splits), dtype=bool)  # not taken yet
    spent = 0.0
    chosen: dict[int, list[int]] = {}  # insert before index -> computes
    while (left > 0).any():
        short = left[step]
        gain = np.add.reduceat(np.where(short > 0, np.minimum(short, size), 0), starts)
        ok = open_ & np.asarray(gain > 0, dtype=bool) & (spent + price < allowance)
        if not ok.any():
            return None
        ratio = np.full(len(splits), np.inf)
        ratio[ok] = price[ok] / gain[ok]
        k = int(np.argmin(ratio))
        open_[k] = False
        spent += prices[k]
        b, _, chain = splits[k]
        chosen.setdefault(b, []).extend(chain)
        lo = int(starts[k])
        at = slice(lo, lo + int(sizes[k]))
        left[step[at]] -= size[at]
    return chosen
