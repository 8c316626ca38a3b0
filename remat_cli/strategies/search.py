"""The cheapest schedule over ALL valid schedules, by A* search over resident sets.

Used by ``exact`` to prove (or refute) optimality on small graphs, where Checkmate's MILP
only optimises over schedules with one fixed order of first computations.

A state is (R, D): the set R of resident values and the set D of targets computed so far.
That is all the future depends on (DESIGN §1: memory at a compute counts fixed memory,
the resident values, the value computed and its workspace), so a cheapest path from
(∅, ∅) to any state with D = all targets is a cheapest valid schedule. Steps are
``compute v`` (v not resident, its inputs resident, memory within the budget; cost(v))
and ``free v`` (cost 0).

Two reductions keep every optimum reachable. Call v *useful* in (R, D) when v is an
ancestor of (or is) a target not in D. (1) A useless value is freed at once: its value can
only feed useless computations, so dropping it and every later computation of a useless
node from any schedule leaves a valid schedule that is no costlier and no larger.
(2) For the same reason useless nodes are never computed. Only needed nodes are looked at.

**Heuristic.** h(R, D) = Σ cost over C(R, D), where C is the smallest set that holds every
target not in D and every non-resident input of a member of C. Each member must be
computed at least once more: a target not in D has not been computed, and a non-resident
input of a node that must be computed must itself be made resident again, which only a
compute does. So h is admissible. It is also consistent: freeing only shrinks R, so C
can only grow; computing v (its inputs resident, so no chain of C continues through v)
removes at most v from C, so h(s) ≤ cost(v) + h(s'); the automatic frees of (1) only
grow C. With a consistent heuristic the first time A* pops a state its cost is least.

**Bound when stopped early.** Before the search ends, some state of a cheapest schedule
is on the open list with its least cost g (the first state on that path that has not been
expanded: its predecessor was expanded with least cost, and pushed it, since g + h ≤
optimum ≤ ``upper`` there), and g + h ≤ optimum for it.
So the least g + h on the open list is a lower bound on the cost of EVERY valid schedule
within the budget; ``upper`` (the cost of a known valid schedule) only prunes states with
g + h above it, which no cheaper schedule passes through.

Exponential in the number of needed nodes: for graphs of up to a few dozen nodes.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

from remat_cli.graph import Graph
from remat_cli.schedule import Schedule, ScheduleBuilder

__all__ = ["SearchResult", "cheapest_schedule"]


@dataclass(frozen=True, eq=False)
class SearchResult:
    """What the search proved.

    ``complete``: the search ran to its end, so ``schedule`` (when not None) is a cheapest
    schedule over all valid schedules within the budget; None then means no schedule
    costs at most ``upper`` (or, without ``upper``, none fits at all). ``lower_bound`` is
    a lower bound on the cost of every valid schedule within the budget, finished or not
    (``inf`` when the search proved that none fits).
    """

    schedule: Schedule | None
    cost: float | None
    lower_bound: float
    complete: bool
    states: int  # states expanded


def cheapest_schedule(
    graph: Graph,
    budget: int,
    upper: float | None = None,
    max_states: int = 200_000,
    deadline: float | None = None,
) -> SearchResult:
    """A* over (resident set, computed targets) for the cheapest schedule peaking ≤ ``budget``.

    ``upper``: the cost of a known valid schedule within the budget; states whose bound
    exceeds it are pruned. ``max_states`` / ``deadline`` (``time.perf_counter()``) stop the
    search early; the result then carries the bound proven so far (module docstring).
    O(states · m · (m + edges)) for m needed nodes.
    """
    nodes = [int(v) for v in graph.needed_nodes.tolist()]
    m = len(nodes)
    local = {v: i for i, v in enumerate(nodes)}
    mem = [int(graph.mem[v]) for v in nodes]
    ws = [int(graph.workspace[v]) for v in nodes]
    cost = [float(graph.cost[v]) for v in nodes]
    preds = [sorted({local[int(u)] for u in graph.preds(v)}) for v in nodes]
    pmask = [sum(1 << u for u in p) for p in preds]
    anc = [0] * m  # ancestors of i, i included (nodes are in topological order)
    for i in range(m):
        a = 1 << i
        for u in preds[i]:
            a |= anc[u]
        anc[i] = a
    targets = [local[int(t)] for t in graph.targets.tolist()]
    all_targets = sum(1 << t for t in targets)
    room = budget - graph.fixed_mem
    slack = 1e-9 * max(1.0, abs(upper)) if upper is not None else 0.0
    cap = None if upper is None else upper + slack

    def useful(done: int) -> int:
        u = 0
        for t in targets:
            if not done >> t & 1:
                u |= anc[t]
        return u

    def h(res: int, done: int) -> float:
        need = all_targets & ~done
        stack = [i for i in targets if need >> i & 1]
        while stack:
            v = stack.pop()
            for u in preds[v]:
                bit = 1 << u
                if not (res | need) & bit:
                    need |= bit
                    stack.append(u)
        total = 0.0
        while need:
            low = need & -need
            total += cost[low.bit_length() - 1]
            need ^= low
        return total

    start = (0, 0)
    h0 = h(0, 0)
    if cap is not None and h0 > cap:
        return SearchResult(None, None, min(h0, upper), True, 0)
    dist: dict[tuple[int, int], float] = {start: 0.0}
    parent: dict[tuple[int, int], tuple[tuple[int, int], list[tuple[int, int]]]] = {}
    heap: list[tuple[float, float, int, int, int]] = [(h0, 0.0, 0, 0, 0)]  # f, g, used, R, D
    expanded = 0
    while heap:
        if expanded >= max_states or (deadline is not None and expanded % 256 == 0 and time.perf_counter() > deadline):
            bound = heap[0][0]
            return SearchResult(None, None, bound if upper is None else min(bound, upper), False, expanded)
        f, g, used, res, done = heapq.heappop(heap)
        if dist.get((res, done), float("inf")) < g:
            continue  # stale entry
        if done == all_targets:
            return SearchResult(_rebuild(parent, (res, done), nodes), g, g, True, expanded)
        expanded += 1
        keep = useful(done)
        succ: list[tuple[float, int, int, int, list[tuple[int, int]]]] = []
        for v in range(m):
            bit = 1 << v
            if res & bit:  # free v
                succ.append((g, used - mem[v], res & ~bit, done, [(1, v)]))
            elif keep & bit and res & pmask[v] == pmask[v] and used + mem[v] + ws[v] <= room:
                ndone = done | (bit & all_targets)
                nres = res | bit
                steps = [(0, v)]
                nkeep = useful(ndone) if ndone != done else keep
                drop = nres & ~nkeep
                nused = used + mem[v]
                while drop:  # reduction (1): useless values are freed at once
                    low = drop & -drop
                    i = low.bit_length() - 1
                    steps.append((1, i))
                    nused -= mem[i]
                    drop ^= low
                succ.append((g + cost[v], nused, nres & nkeep, ndone, steps))
        for ng, nused, nres, ndone, steps in succ:
            key = (nres, ndone)
            if ng >= dist.get(key, float("inf")):
                continue
            nf = ng + h(nres, ndone)
            if cap is not None and nf > cap:
                continue
            dist[key] = ng
            parent[key] = ((res, done), steps)
            heapq.heappush(heap, (nf, ng, nused, nres, ndone))
    # exhausted: nothing within ``upper`` (or nothing fits at all)
    return SearchResult(None, None, float("inf") if upper is None else upper, True, expanded)


def _rebuild(parent: dict, key: tuple[int, int], nodes: list[int]) -> Schedule:
    """The schedule of the path to ``key``, in graph node indices."""
    chunks = []
    while key in parent:
        key, steps = parent[key]
        chunks.append(steps)
    b = ScheduleBuilder()
    for steps in reversed(chunks):
        for op, i in steps:
            (b.compute if op == 0 else b.free)(nodes[i])
    return b.build()
