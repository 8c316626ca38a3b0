"""A frozen copy of the eviction replay as of d23b961 (remat_cli/strategies/greedy.py's
``_State``, ``largest_first``, ``dtr_score`` with its floor and cut-short walk, and
``evict_schedule``), the reference the faster dtr victim search must equal
(tests/test_evict_same.py): the same schedules, the same failures, the same draws of the
seeded sample. Not used by the tool."""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable

from remat_cli.graph import Graph
from remat_cli.schedule import Schedule, ScheduleBuilder
from remat_cli.strategies.greedy import DEADLINE_EVERY, CostlierThan, ReplayStopped

__all__ = ["dtr_score", "evict_schedule", "largest_first"]

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
    """DTR's h(t): evicted-neighbourhood recompute cost / (size · staleness); smallest first."""
    key = _dtr_within(state, v, math.inf, limit)  # never cut short below infinity
    assert key is not None
    return key


def _dtr_floor(state: _State, v: int) -> tuple:
    """A key no larger than ``dtr_score(state, v)``: v's own cost alone (the evicted
    neighbourhood only adds non-negative costs)."""
    return (state.cost[v] / (state.mem[v] * (state.clock - state.last_access[v] + 1)), v)


def _dtr_within(state: _State, v: int, best: float, limit: int = 32) -> tuple | None:
    """``dtr_score(state, v)``, or None once it is proven above ``best`` (its ratio): the
    neighbourhood's costs only add up, so the walk stops as soon as the partial ratio passes
    ``best`` (a value that cannot be the victim is not scored to the end). Same walk and the
    same arithmetic as :func:`dtr_score`, so a key it returns is that key exactly."""
    cost, evicted, nbrs = state.cost, state.evicted, state.nbrs
    denom = state.mem[v] * (state.clock - state.last_access[v] + 1)
    total = cost[v]
    if total / denom > best:
        return None
    seen = {v}
    stack = [v]
    while stack and len(seen) < limit:
        for w in nbrs[stack.pop()]:
            if evicted[w] and w not in seen:
                seen.add(w)
                total += cost[w]
                if total / denom > best:  # division is monotone: the final ratio is larger still
                    return None
                stack.append(w)
    return (total / denom, v)


dtr_score.floor = _dtr_floor  # type: ignore[attr-defined]
dtr_score.within = _dtr_within  # type: ignore[attr-defined]


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
    within = getattr(score, "within", None)

    def pick_scored() -> int | None:
        pool = live if len(live) <= sample else rng.sample(live, sample)
        best, best_key = None, None
        for _ in range(2):
            if floor is not None:  # the same minimum with fewer scores: lowest floors first
                for low in sorted(floor(st, v) for v in pool if pins[v] == 0):
                    if best_key is not None and low > best_key:
                        break  # every key left is at least its floor
                    if best_key is not None and within is not None:
                        key = within(st, low[-1], best_key[0])  # None: proven above the best
                        if key is None:
                            continue
                    else:
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
        while cur + need > budget:
            victim = pick_from_heap() if use_heap else pick_scored()
            if victim is None:
                return False
            free(victim)
            st.evicted[victim] = 1
        return True

    def compute(v: int) -> bool:
        nonlocal cur, computes, spent
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
        st.evicted[v] = 0
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
                if computes > budget_computes or not compute(v):
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
