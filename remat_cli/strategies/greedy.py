"""Eviction-based rematerialization: one simulation, two eviction scores.

The store-all order is replayed step by step under the budget. Before a compute that
would exceed the budget, resident values are evicted (freed) one at a time, never an
input of the compute under way or of a compute waiting for it; a value needed again
after eviction is recomputed on demand, recursively from whatever is resident. Values
are freed for good after their last use in the order, as store-all does.

* ``greedy`` (GreedyRemat, as in Kumar et al. 2019's comparison and Checkmate's
  baselines): evict the largest value.
* ``dtr`` (Kirisame et al., *Dynamic Tensor Rematerialization*, ICLR 2021): evict the
  value with the least h(t) = (cost(t) + cost of its evicted neighbourhood) /
  (size(t) · staleness(t)), the neighbourhood being the evicted ancestors that would have
  to be recomputed with it and the evicted values that depend on it.

Victims are found in O(log n) (greedy, a heap) or by scoring a seeded sample of at most
64 resident values (dtr, as DTR's own implementation samples; the walks over evicted
neighbourhoods are kept between evictions while nothing they read changed,
:class:`_DtrPicker`, so the same victims cost fewer walks); a run that computes more
than ``max_factor`` (10) times the graph gives up (eviction can thrash near the lower
bound) and the strategy declines; it gives up sooner, with the same verdict, once the
evicted values still to be read need more recomputations than the cap leaves.

Anytime: the replay at the budget is one bounded run (at most ``max_factor`` × the
graph's computes) that stops at ``RunContext.deadline`` (looked at every 4,096 computes,
so small graphs always finish); when it fails, the search for the smallest budget
the strategy meets (a bisection of whole replays) stops at ``RunContext.deadline`` (a
``time.perf_counter()`` value) or after ``SEARCH_FACTOR`` times the failed replay's
seconds (at least ``MIN_SEARCH_SECONDS``), and names the smallest budget found by then.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.units import fmt_bytes_exact
from remat_cli.schedule import Schedule, ScheduleBuilder
from remat_cli.strategies.base import RunContext, Strategy, StrategyFn, StrategyResult
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan

__all__ = ["GREEDY", "DTR", "EvictOptions", "CostlierThan", "ReplayStopped", "evict_schedule", "largest_first", "dtr_score"]

# score(state, v) -> key; the resident, unpinned value with the SMALLEST key is evicted
Score = Callable[["_State", int], tuple]


class _State:
    """What a score may look at: sizes, costs, residency, last access, evicted set."""

    __slots__ = ("graph", "mem", "cost", "resident", "evicted", "last_access", "computed_at", "clock", "preds", "succs", "nbrs")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.mem = graph.mem.tolist()
        self.cost = graph.cost.tolist()
        self.preds = graph.pred_lists
        self.succs = graph.succ_lists
        # inputs then consumers of each node, built once: dtr_score walks them per eviction
        self.nbrs = [(*p, *q) for p, q in zip(self.preds, self.succs)]
        self.resident = bytearray(graph.n)
        self.evicted = bytearray(graph.n)  # freed while still needed later
        self.last_access = [0] * graph.n
        self.computed_at = [0] * graph.n
        self.clock = 0


def largest_first(state: _State, v: int) -> tuple:
    """GreedyRemat: the largest value first; ties to the one computed longest ago. The key
    is fixed while v is resident, so the replay keeps candidates in a heap."""
    return (-state.mem[v], state.computed_at[v], v)


def dtr_score(state: _State, v: int, limit: int = 32) -> tuple:
    """DTR's h(t): evicted-neighbourhood recompute cost / (size · staleness); smallest first.
    The replay's victim search (:class:`_DtrPicker`) walks the same nodes in the same order
    and adds the same floats, cut short once a value cannot be the victim."""
    cost, evicted, nbrs = state.cost, state.evicted, state.nbrs
    denom = state.mem[v] * (state.clock - state.last_access[v] + 1)
    total = cost[v]
    seen = {v}
    stack = [v]
    while stack and len(seen) < limit:
        for w in nbrs[stack.pop()]:
            if evicted[w] and w not in seen:
                seen.add(w)
                total += cost[w]
                stack.append(w)
    return (total / denom, v)


def _dtr_floor(state: _State, v: int) -> tuple:
    """A key no larger than ``dtr_score(state, v)``: v's own cost alone (the evicted
    neighbourhood only adds non-negative costs)."""
    return (state.cost[v] / (state.mem[v] * (state.clock - state.last_access[v] + 1)), v)


dtr_score.floor = _dtr_floor  # type: ignore[attr-defined]


class _DtrPicker:
    """dtr's victim among candidates with less work: the value of least
    :func:`dtr_score` key, the same one (ties included) as scoring each candidate to the end.

    Two things are kept between evictions. Per node, the tuple of its evicted neighbours
    (in ``nbrs`` order; dropped when a neighbour is evicted or recomputed, rebuilt when a
    walk next expands the node), so a walk skips the resident ones. Per scored value, what
    its walk found: the whole numerator, or the part summed before the walk stopped above
    the best, with the nodes it expanded; valid while no neighbour of those nodes changed
    status, since the walk would then expand the same nodes in the same order and add the
    same floats. A whole numerator is the key without a walk; a part is a tighter floor
    than the value's own cost (the costs left to add are non-negative)."""

    __slots__ = ("st", "evn", "changed", "tick", "found", "limit")

    def __init__(self, st: _State, limit: int = 32) -> None:
        self.st = st
        n = st.graph.n
        self.evn: list[tuple[int, ...] | None] = [None] * n
        self.changed = [0] * n  # per node: the tick of its neighbours' last status change
        self.tick = 0
        # per value: (numerator so far, whether whole, nodes its walk expanded, tick, and
        # for a part: the walk's seen set, stack, the tuple it was scanning and where)
        self.found: dict[int, tuple] = {}
        self.limit = limit

    def flipped(self, x: int) -> None:
        """``x`` was evicted or recomputed: its neighbours' walks and tuples are stale."""
        self.tick += 1
        tick, changed, evn = self.tick, self.changed, self.evn
        for y in self.st.nbrs[x]:
            changed[y] = tick
            evn[y] = None

    def pick(self, pool: list[int], pins: list[int]) -> int | None:
        """The unpinned value of ``pool`` with the least key; None when all are pinned."""
        st = self.st
        cost, mem, last, clock = st.cost, st.mem, st.last_access, st.clock
        found, changed = self.found, self.changed
        lows = []  # (floor of the key's ratio, value, its denominator, its valid kept walk)
        for v in pool:
            if pins[v]:
                continue
            denom = mem[v] * (clock - last[v] + 1)
            f = found.get(v)
            if f is not None:
                t0 = f[3]
                for y in f[2]:
                    if changed[y] > t0:
                        f = None
                        break
            lows.append((cost[v] / denom if f is None else f[0] / denom, v, denom, f))
        lows.sort()
        best = None
        ratio = math.inf
        for low, v, denom, f in lows:
            if best is not None and (low > ratio or (low == ratio and v > best)):
                break  # every key left is at least its floor
            if f is None or not f[1]:
                got = self._walk(v, denom, ratio, f)
                if got is None:
                    continue
                low = got
            if best is None or low < ratio or (low == ratio and v < best):
                best, ratio = v, low
        return best

    def _walk(self, v: int, denom: int, best: float, part: tuple | None = None) -> float | None:
        """:func:`dtr_score`'s walk (the same nodes, order and additions) over the kept
        tuples of evicted neighbours, resumed from ``part`` (a valid kept walk that stopped
        above an earlier best) where given; keeps what it found."""
        st = self.st
        cost, evicted, nbrs, evn = st.cost, st.evicted, st.nbrs, self.evn
        if part is None:
            total = cost[v]
            if total / denom > best:
                return None
            seen = {v}
            stack = [v]
            expanded: list[int] = []
            near: tuple[int, ...] = ()
            i = 0
        else:
            total, _, expanded, _, seen, stack, near, i = part
            if total / denom > best:
                return None
            stack.append(near[i])  # the value whose cost stopped it, not yet expanded
            i += 1
        limit = self.limit
        low = best * denom * _BELOW  # below any total whose ratio passes best (a float compare)
        while True:
            for w in near[i:] if i else near:
                if w not in seen:
                    seen.add(w)
                    total += cost[w]
                    if total > low and total / denom > best:
                        # (w's first place from i: a copy of it before that would be in seen)
                        self.found[v] = (total, False, expanded, self.tick, seen, stack, near, near.index(w, i))
                        return None
                    stack.append(w)
            if not stack or len(seen) >= limit:
                break
            x = stack.pop()
            expanded.append(x)
            near = evn[x]  # type: ignore[assignment]
            if near is None:
                near = evn[x] = tuple([w for w in nbrs[x] if evicted[w]])
            i = 0
        self.found[v] = (total, True, expanded, self.tick)
        return total / denom


#: ``total / denom > best`` implies ``total > best * denom * _BELOW``: the rounding of the
#: division, of the product and of a denominator past 2**53 is far less than 2**-40.
_BELOW = 1.0 - 2.0**-40


def sample_like_random(rng: random.Random, population: list[int], k: int) -> list[int]:
    """``rng.sample(population, k)``, the same values in the same order from the same draws
    of ``rng`` (CPython's algorithm since 3.2: a partial shuffle of a copy for small
    populations, else draws into a set; each index by rejection from ``getrandbits``), so
    a replay samples as it did, without ``random``'s two calls per draw: 40% less time
    than ``rng.sample`` for dtr's 64 of ~150 values (9,784 samples of a failing
    random1000 replay: ~0.04 s). ``0 < k <= len(population)``."""
    n = len(population)
    bits = rng.getrandbits
    out = []
    keep = out.append
    if n <= 21 + (4 ** math.ceil(math.log(k * 3, 4)) if k > 5 else 0):  # (random.sample's setsize)
        pool = population[:]
        for m in range(n, n - k, -1):
            width = m.bit_length()
            j = bits(width)
            while j >= m:
                j = bits(width)
            keep(pool[j])
            pool[j] = pool[m - 1]
        return out
    width = n.bit_length()
    taken: set[int] = set()
    for _ in range(k):
        j = bits(width)
        while j >= n or j in taken:
            j = bits(width)
        taken.add(j)
        keep(population[j])
    return out


def evict_schedule(
    graph: Graph,
    budget: int,
    score: Score,
    order: list[int],
    max_factor: int = 10,
    sample: int = 64,
    max_cost: float | None = None,
    deadline: float | None = None,
) -> Schedule | None:
    """Replay ``order`` within ``budget`` evicting by ``score``; None when it cannot.

    ``max_cost``: raise :class:`CostlierThan` as soon as the computes so far cost more
    (costs only add up, so the finished plan would too): ``auto`` passes the cost a plan
    must beat to matter. ``deadline`` (a ``time.perf_counter()`` value), looked at every
    :data:`DEADLINE_EVERY` computes: raise :class:`ReplayStopped` once it has passed (a
    replay near the lower bound can thrash for up to ``max_factor`` × the graph's computes).

    ``largest_first`` keeps candidates in a heap. Other scores change with time, so (as
    DTR's implementation does) at most ``sample`` resident values, drawn by a seeded
    generator, are scored per eviction; all of them when fewer are resident.
    """
    st = _State(graph)
    mem, preds = st.mem, st.preds
    ws = graph.workspace.tolist()
    n = graph.n
    uses = [0] * n  # remaining uses by computes of ``order``
    for v in order:
        for u in preds[v]:
            uses[u] += 1
    pins = [0] * n
    resident = st.resident
    live: list[int] = []  # resident values of nonzero size, for sampling
    where: dict[int, int] = {}
    heap: list[tuple] = []
    use_heap = score is largest_first
    rng = random.Random(0)
    cur = graph.fixed_mem
    b = ScheduleBuilder()
    budget_computes = max_factor * max(len(order), 1)
    computes = 0
    # evicted values a later compute reads: each is computed again, by ensure (below), which
    # gives up once the computes before it pass budget_computes; so with ``pending`` of them
    # the last comes after at least computes + pending - 1, and once that passes the cap the
    # replay fails for sure: it gives up at once (not with a cost cap, which may stop it first)
    pending = 0
    doomed_past = budget_computes + 1 if max_cost is None else math.inf
    costs = st.cost
    spent = 0.0
    cap = math.inf if max_cost is None else max_cost

    def free(v: int) -> None:
        nonlocal cur
        resident[v] = 0
        k = where.pop(v, None)
        if k is not None:
            last = live.pop()
            if last != v:
                live[k] = last
                where[last] = k
        cur -= mem[v]
        b.free(v)

    # pinned values popped from the heap wait here until unpinned (then they go back):
    # re-pushing them after every eviction cost O(pinned · log n) each time
    parked: dict[int, tuple] = {}

    def pick_from_heap() -> int | None:
        while heap:
            key = heapq.heappop(heap)
            v = key[-1]
            if not resident[v] or key != largest_first(st, v):
                continue  # stale entry: v was freed (it is pushed again when recomputed)
            if pins[v]:
                parked[v] = key
                continue
            return v
        return None

    def unpin(u: int) -> None:
        pins[u] -= 1
        if not pins[u] and parked:
            key = parked.pop(u, None)
            if key is not None:
                heapq.heappush(heap, key)

    floor = getattr(score, "floor", None)
    pick_dtr = _DtrPicker(st) if score is dtr_score else None  # dtr's walks, cut short and kept

    def pick_scored() -> int | None:
        pool = live if len(live) <= sample else sample_like_random(rng, live, sample)
        if pick_dtr is not None:
            best = pick_dtr.pick(pool, pins)
            return best if best is not None or pool is live else pick_dtr.pick(live, pins)
        best, best_key = None, None
        for _ in range(2):
            if floor is not None:  # the same minimum with fewer scores: lowest floors first
                for low in sorted(floor(st, v) for v in pool if pins[v] == 0):
                    if best_key is not None and low > best_key:
                        break  # every key left is at least its floor
                    key = score(st, low[-1])
                    if best_key is None or key < best_key:
                        best, best_key = low[-1], key
            else:
                for v in pool:
                    if pins[v] == 0:
                        key = score(st, v)
                        if best_key is None or key < best_key:
                            best, best_key = v, key
            if best is not None or pool is live:
                break
            pool = live  # every sampled value was pinned: look at all of them
        return best

    def make_room(need: int) -> bool:
        nonlocal pending
        while cur + need > budget:
            victim = pick_from_heap() if use_heap else pick_scored()
            if victim is None:
                return False
            free(victim)
            st.evicted[victim] = 1
            if uses[victim]:
                pending += 1
            if pick_dtr is not None:
                pick_dtr.flipped(victim)
        return True

    def compute(v: int) -> bool:
        nonlocal cur, computes, spent, pending
        if not make_room(mem[v] + ws[v]):
            return False
        computes += 1
        spent += costs[v]
        if spent > cap:
            raise CostlierThan(f"stopped once its plan cost more than {cap:g}", max_cost=cap)
        if deadline is not None and computes % DEADLINE_EVERY == 0 and time.perf_counter() > deadline:
            raise ReplayStopped(f"stopped at its time limit after {computes} computes")
        b.compute(v)
        resident[v] = 1
        if st.evicted[v]:
            st.evicted[v] = 0
            if uses[v]:
                pending -= 1
            if pick_dtr is not None:
                pick_dtr.flipped(v)
        st.clock += 1
        st.computed_at[v] = st.clock
        if mem[v] > 0:
            where[v] = len(live)
            live.append(v)
            if use_heap:
                heapq.heappush(heap, largest_first(st, v))
        cur += mem[v]
        st.last_access[v] = st.clock
        for u in preds[v]:
            st.last_access[u] = st.clock
        return True

    def ensure(target: int) -> bool:
        """Make ``target`` resident and pin it, recomputing evicted ancestors (iteratively)."""
        stack = [(target, 0)]
        while stack:
            v, stage = stack.pop()
            if stage == 0:
                if resident[v]:
                    pins[v] += 1
                    continue
                stack.append((v, 1))
                for u in reversed(preds[v]):
                    stack.append((u, 0))
            else:  # inputs are resident and pinned: compute v, release them
                if computes > budget_computes or computes + pending > doomed_past or not compute(v):
                    return False
                for u in preds[v]:
                    unpin(u)
                    if uses[u] == 0 and pins[u] == 0 and resident[u]:
                        free(u)
                pins[v] += 1
        return True

    for v in order:
        for u in preds[v]:
            if not ensure(u):
                return None
        if not compute(v):
            return None
        for u in preds[v]:
            unpin(u)
            uses[u] -= 1
            if uses[u] == 0 and pins[u] == 0 and resident[u]:
                free(u)
        if uses[v] == 0:
            free(v)
    return b.build()


#: How many computes a replay makes between two looks at its deadline.
DEADLINE_EVERY = 64
#: The search for the smallest budget after a failed replay takes at most SEARCH_FACTOR
#: times that replay's seconds, and never less than MIN_SEARCH_SECONDS (small graphs
#: always finish it: a replay of 1,000 nodes takes milliseconds).
SEARCH_FACTOR = 3.0
MIN_SEARCH_SECONDS = 2.0


class ReplayStopped(NoPlanError):
    """The replay passed its deadline before it finished (not a budget failure)."""


class CostlierThan(NoPlanError):
    """The replay stopped once its plan cost more than ``max_cost`` (not a budget failure)."""

    def __init__(self, message: str, max_cost: float) -> None:
        super().__init__(message, min_budget=None)
        self.max_cost = max_cost


@dataclass(frozen=True)
class EvictOptions:
    """``greedy``'s and ``dtr``'s options: a run that computes more than ``max_factor``
    times the graph gives up (eviction can thrash near the lower bound). ``search``: when
    the budget cannot be met, bisect for the smallest budget it meets (``auto`` only needs
    to know that it failed). ``max_cost``: stop (:class:`CostlierThan`) once the plan costs
    more than this. ``max_seconds``: the replay stops (it fails, saying so) after this many
    seconds, before the deadline (``auto`` gives each replay of a large graph a share)."""

    max_factor: int = 10
    search: bool = True
    max_cost: float | None = None
    max_seconds: float | None = None


def _runner(name: str, score: Score) -> StrategyFn:
    def run(graph: Graph, budget: int | None, options: EvictOptions, context: RunContext) -> StrategyResult:
        fits = store_all_if_fits(graph, budget)
        if fits is not None:
            return StrategyResult(fits.schedule, {"evict": "largest" if name == "greedy" else "DTR h(t)", "plan": "store-all fits"})
        assert budget is not None
        store_all = store_all_plan(graph)
        store, store_peak = store_all.schedule, store_all.metrics.peak_bytes
        order = store.compute_nodes.tolist()
        max_factor = int(options.max_factor)
        deadline = context.deadline
        started = time.perf_counter()
        if options.max_seconds is not None:
            share = started + float(options.max_seconds)
            deadline = share if deadline is None else min(deadline, share)
        try:
            schedule = evict_schedule(graph, budget, score, order, max_factor, max_cost=options.max_cost, deadline=deadline)
        except ReplayStopped as exc:
            raise NoPlanError(
                f"{name} cannot fit budget {fmt_bytes_exact(budget)} by its time limit (its replay {exc.message});"
                f" a budget it meets is the store-all peak {fmt_bytes_exact(store_peak)}",
                min_budget=store_peak,
            ) from None
        if schedule is not None:
            return StrategyResult(schedule, {"evict": "largest" if name == "greedy" else "DTR h(t)"})
        if not options.search:
            raise NoPlanError(f"{name} cannot fit budget {fmt_bytes_exact(budget)} (its smallest budget was not searched)")
        # the smallest budget it meets, by bisection; past the deadline the smallest found
        # so far (every probe is a whole replay, stopped at the deadline too). Proportionate:
        # at most SEARCH_FACTOR times the failed replay's seconds (at least MIN_SEARCH_SECONDS),
        # since a thrashing replay of a large graph takes seconds and a search ~12 of them
        now = time.perf_counter()
        search_end = now + max(MIN_SEARCH_SECONDS, SEARCH_FACTOR * (now - started))
        given = deadline
        deadline = search_end if deadline is None else min(deadline, search_end)
        lo, hi = max(budget, graph.lb - 1), store_peak  # hi always succeeds
        stopped = False
        while hi - lo > 1:
            if deadline is not None and time.perf_counter() > deadline:
                stopped = True
                break
            mid = (lo + hi) // 2
            try:
                fitted = evict_schedule(graph, mid, score, order, max_factor, deadline=deadline) is not None
            except ReplayStopped:
                stopped = True
                break
            if fitted:
                hi = mid
            else:
                lo = mid
        what = "the smallest budget it meets"
        if stopped:
            past_limit = given is not None and time.perf_counter() > given
            why = "its time limit" if past_limit else f"its search stopped after {search_end - now:.1f} s"
            what = f"a budget it meets (found before {why})"
        raise NoPlanError(
            f"{name} cannot fit budget {fmt_bytes_exact(budget)}; {what} is {fmt_bytes_exact(hi)}",
            min_budget=hi,
        )

    return run


GREEDY = Strategy(
    name="greedy",
    summary="GreedyRemat: replay store-all; when the budget would be exceeded evict the largest "
    "resident value the compute under way does not need; recompute evicted values on demand.",
    solve=_runner("greedy", largest_first),
    uses_budget=True,
    options=EvictOptions,
    incumbent=3,
    reference="Kumar et al. 2019 (NeurIPS) baseline; Jain et al. 2020 (Checkmate) §6",
)

DTR = Strategy(
    name="dtr",
    summary="Dynamic Tensor Rematerialization: the same replay, evicting the value with the "
    "least (its cost + its evicted neighbours' costs) / (size · staleness), scoring at most 64 "
    "sampled values.",
    solve=_runner("dtr", dtr_score),
    uses_budget=True,
    options=EvictOptions,
    incumbent=2,
    reference="Kirisame et al. 2021, Dynamic Tensor Rematerialization (ICLR)",
)
