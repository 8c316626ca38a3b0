"""Frozen copies of the treewidth/pathwidth recursion as of d23b961 (before issue 14 item 1's
speed work on it): ``recursive_schedule`` with its ``_Recursion``, ``_Statics`` and
``_Recorded``, and ``algorithms/orders.py``'s ``memory_greedy_order``, the references the
faster code must equal step for step (tests/test_treewidth_same.py). Not used by the tool.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Collection, MutableSequence, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import not_
from typing import Any

import numpy as np

from remat_cli.algorithms.decompose import SeparatorTree
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule

__all__ = ["RecursionStopped", "memory_greedy_order", "recursive_schedule"]


#: The recursion stops (:class:`RecursionStopped`) after max(``WORK_FLOOR``,
#: ``WORK_PER_NODE`` · n) units of work (a compute step, or a node of a sub-problem the
#: recursion looks at), so its time and its schedule (≤ 2 steps per unit) stay bounded
#: on graphs whose decomposition is wide (random or dense DAGs): there (w+2)^depth
#: recomputations are not polynomial in any useful sense.
WORK_FLOOR = 2_000_000
WORK_PER_NODE = 100
#: Plain schedules of at least this many nodes are laid out with numpy (the same plan).
PLAIN_VECTOR_MIN = 256

_PlainPlan = tuple[list[int], list[int], list[int]]


def _first(pair: tuple[int, int]) -> int:
    return pair[0]


#: Why a cacheless run stopped where it went over its limit (``stop_over``).
OVER_LIMIT = "over the limit"


class RecursionStopped(Exception):
    """The recursion passed its work limit or its deadline; it built no schedule."""


class RecursionBug(Exception):
    """An internal error of the recursion (it read outside its subtree, or its schedule
    failed the simulator). A budgeted refinement that raises it is discarded, never
    reported as a plan; elsewhere it propagates as the bug it is."""


def work_limit(graph: Graph) -> int:
    """Units of work one run of the recursion may spend on ``graph`` (see ``WORK_FLOOR``)."""
    return max(WORK_FLOOR, WORK_PER_NODE * graph.n)


def recursive_schedule(
    graph: Graph,
    sep: SeparatorTree,
    limit: int | None = None,
    *,
    cache: bool = False,
    eager: bool = False,
    evict: str = "recent",
    max_work: int | None = None,
    deadline: float | None = None,
    max_cost: float = math.inf,
    memo: dict[Any, Any] | None = None,
    replay: bool = True,
    stop_over: bool = False,
) -> tuple[Schedule, bool]:
    """The schedule of the recursion over ``sep``.

    ``limit`` None gives the bare recursion. Otherwise ``limit`` is the activation budget
    (bytes, fixed memory excluded) that the budgeted refinements spend: ``cache`` keeps
    freed values for reuse (``evict`` "recent" or "cheap" says which go first), ``eager``
    prefetches a child's inputs for several nodes of a bag at once. Returns the
    schedule and whether the planner's own count stayed within the limit (the caller
    must still check with the simulator). Raises :class:`RecursionStopped` past
    ``max_work`` units (default :func:`work_limit`), past ``deadline`` (a
    ``time.perf_counter()`` value), or once its compute cost exceeds ``max_cost`` (it
    cannot beat a plan of that cost: costs only grow as steps are added). ``memo``, a
    dict the caller keeps across runs on the same graph and tree, shares sub-problem
    orders and plain plans between them (at most max(20·n, 500,000) node ids stored). ``replay`` (bare recursion only)
    records the steps of each call that leaves its targets pinned and copies them when the
    same call recurs on the same state (:meth:`_Recursion.solve`): the same schedule, and
    the same work counted, without walking the sub-problem again.

    ``stop_over`` (cacheless budgeted runs): raise :class:`RecursionStopped` ("over the
    limit") at the first compute that goes over ``limit``. Without a cache the run counts
    the resident bytes exactly as the simulator does, so such a run's schedule would peak
    above the budget: it could not be a plan.
    """
    planner = _Recursion(graph, sep, limit, cache, eager, evict)
    planner.stop_over = stop_over and not planner.caching
    planner.budget_left = work_limit(graph) if max_work is None else max_work
    planner.deadline = deadline
    # every needed node is computed at least once by any valid schedule, so a run whose
    # recomputations alone exceed max_cost − base cost cannot win: stop it as soon as they do
    planner.cost_left = max_cost - float(graph.cost[graph.needed].sum()) if max_cost < math.inf else math.inf
    statics = planner.statics
    planner.needed = statics.needed
    if planner.cost_left < math.inf:
        # a value freed while a needed node that reads it is still to be computed for the
        # first time must be computed again: its recomputation is charged at the free
        planner.pending = statics.needed_readers()[:]
        planner.owed = [False] * graph.n
    planner.memo = memo
    if replay and limit is None and planner.cost_left == math.inf:
        planner.replay = {}
    planner.solve(sep.root, statics.targets[:], False)
    schedule = Schedule(np.asarray(planner.ops, dtype=np.int8), np.asarray(planner.nodes, dtype=np.int32))
    return schedule, not planner.over


def compute_bound(sep: SeparatorTree, v: int) -> int:
    """Most times the bare recursion computes node ``v``: (w+2)^depth(owner(v))."""
    return (sep.width + 2) ** int(sep.depth_of[sep.owner[v]])


class _Recursion:
    """State of one run: resident values, pins, the evictable cache, the steps so far."""

    def __init__(
        self, graph: Graph, sep: SeparatorTree, limit: int | None, cache: bool, eager: bool = False, evict: str = "recent"
    ) -> None:
        self.preds = graph.pred_lists
        self.pred_ptr, self.pred_idx = graph.pred_ptr, graph.pred_idx
        self.succs = graph.succ_lists
        statics = self.statics = _Statics.of(graph, sep)
        self.mem_np, self.ws_np = statics.mem_np, statics.ws_np
        self.mem, self.ws = statics.mem, statics.ws
        self.owner, self.tin, self.tout = statics.owner, statics.tin, statics.tout
        self.owned = sep.owned
        self.children = sep.children
        self.child_tins = statics.child_tins
        self.node_tin = statics.node_tin  # tin of each graph node's owner
        self.budgeted = limit is not None
        self.caching = cache and limit is not None
        self.eager = eager and self.caching
        self.limit = math.inf if limit is None else limit
        n = graph.n
        self.resident = [False] * n
        self.pin = [0] * n
        self.done = [False] * n  # computed at least once (targets need no second time)
        self.cur = 0  # resident bytes
        self.pinned = 0  # bytes of pinned resident values
        self.stamp = [0] * n
        self.clock = 0
        # (eviction value, -stamp, stamp, v): lowest value first, then the most recent
        self.cache: list[tuple[float, int, int, int]] = []
        self.rank = statics.rank
        cost = statics.cost
        # eviction order: "recent" evicts the most recently cached value first; "cheap"
        # evicts the value cheapest to recompute per byte first (recency breaks ties)
        self.value = statics.per_byte() if evict == "cheap" else statics.zeros
        self.ops: list[int] = []  # the steps so far (COMPUTE or FREE, node)
        self.nodes: list[int] = []
        # bare recursion: (x, targets) -> what the call did (see solve); None: off
        self.replay: dict[tuple[int, tuple[int, ...]], _Recorded] | None = None
        self.replay_cap = max(1_000_000, 20 * n)  # steps stored at most (bounded memory)
        self.replay_size = 0
        self.over = False
        self.budget_left = work_limit(graph)  # units of work before RecursionStopped
        self.deadline: float | None = None
        self.checks = 0
        self.costs = cost
        self.cost_left = math.inf  # RecursionStopped("cannot win") once spent below 0
        self.needed = [True] * n  # first computes of needed nodes are prepaid in cost_left
        # with a cost cap: per value, its needed readers not yet computed once (None: not
        # tracked), and whether its next computation is prepaid in cost_left (owed)
        self.pending: list[int] | None = None
        self.owed: list[bool] = []
        self.memo: dict[Any, Any] | None = None  # plain orders shared by the runs of one call
        self.memo_cap = max(20 * n, 500_000)  # node ids stored in the memo at most
        self.stop_over = False  # RecursionStopped("over the limit") once over it

    def spend(self, units: int) -> None:
        """Count work; stop the run past its work limit or deadline."""
        self.budget_left -= units
        if self.budget_left < 0:
            raise RecursionStopped("work limit")
        self.checks += 1
        if self.deadline is not None and not self.checks & 255 and time.perf_counter() > self.deadline:
            raise RecursionStopped("time limit")

    # -------------------------------------------------------------- memory primitives
    def compute(self, v: int) -> None:
        self.spend(1)
        pending = self.pending
        done = self.done
        first = not done[v] and self.needed[v]  # its first compute is prepaid in cost_left
        if pending is not None and self.owed[v]:
            self.owed[v] = False  # charged when it was freed
        elif not first:
            self.cost_left -= self.costs[v]
        if self.cost_left < 0:
            raise RecursionStopped("cannot win")
        if pending is not None and first:
            for u in self.preds[v]:
                pending[u] -= 1
        m = self.mem[v]
        need = m + self.ws[v]
        if self.cur + need > self.limit:
            self._evict(need)
        self.ops.append(COMPUTE)
        self.nodes.append(v)
        done[v] = True
        self.resident[v] = True
        self.pin[v] = 1
        self.cur += m
        self.pinned += m

    def obtain(self, v: int) -> None:
        """Make ``v`` resident and pinned: reuse it from the cache, or compute it."""
        if self.resident[v]:
            self.acquire(v)
        else:
            self.compute(v)

    def acquire(self, u: int) -> None:
        """Pin a resident value (taking it out of the cache if it was there)."""
        if self.pin[u] == 0:
            self.pinned += self.mem[u]
            self.stamp[u] = -1  # invalidates its cache entry
        self.pin[u] += 1

    def release(self, u: int) -> None:
        """Unpin; at zero pins the value is freed (bare) or cached (budgeted)."""
        self.pin[u] -= 1
        if self.pin[u]:
            return
        self.pinned -= self.mem[u]
        if self.caching:
            self.clock += 1
            self.stamp[u] = self.clock
            heapq.heappush(self.cache, (self.value[u], -self.clock, self.clock, u))
        else:
            self._free(u)

    def _free(self, u: int) -> None:
        self.ops.append(FREE)
        self.nodes.append(u)
        self.resident[u] = False
        self.cur -= self.mem[u]
        pending = self.pending
        if pending is not None and pending[u] > 0:
            # a needed reader of u is still to come: u is computed again before it, a
            # recomputation every schedule from here pays (charged once, now)
            self.owed[u] = True
            self.cost_left -= self.costs[u]
            if self.cost_left < 0:
                raise RecursionStopped("cannot win")

    def _evict(self, need: int) -> None:
        cache, stamps, resident, pin = self.cache, self.stamp, self.resident, self.pin
        limit, heappop = self.limit, heapq.heappop
        while self.cur + need > limit and cache:
            _, _, stamp, u = heappop(cache)
            if stamps[u] == stamp and resident[u] and pin[u] == 0:
                stamps[u] = -1
                self._free(u)
        if self.cur + need > self.limit:
            self.over = True
            if self.stop_over:
                raise RecursionStopped(OVER_LIMIT)

    # -------------------------------------------------------------- the recursion
    def _child_of(self, x: int, u: int) -> int:
        """The child of separator node ``x`` whose subtree owns graph node ``u``."""
        k = bisect_right(self.child_tins[x], self.node_tin[u]) - 1
        return self.children[x][k]

    def solve(
        self,
        x: int,
        targets: list[int],
        keep: bool,
        handoff: list[int] | tuple[int, ...] = (),
        plain_only: bool = False,
        tentative: bool = False,
    ) -> bool:
        """:meth:`_solve`, replayed where it recurs (bare recursion, ``replay`` on).

        A call that keeps its targets, with nothing of its sub-problem resident (its
        targets' ancestors inside x's subtree) and every value it reads from outside
        resident, does the same steps every time: they depend only on x, the targets and
        that state. Its steps, work units, the nodes it computes and the pins it leaves
        on its targets are recorded the first time and copied when the call recurs in
        that state — the (w+2)^depth recomputations are mostly such repeats.
        """
        replay = self.replay
        if replay is None or not keep or handoff or plain_only or tentative:
            return self._solve(x, targets, keep, handoff, plain_only, tentative)
        resident = self.resident
        key = (x, tuple(targets))
        rec = replay.get(key)
        if rec is not None and not any(map(resident.__getitem__, rec.closure)) and all(map(resident.__getitem__, rec.boundary)):
            self._replay(rec)
            return True
        if any(map(resident.__getitem__, targets)) or self.replay_size > self.replay_cap:
            return self._solve(x, targets, keep)
        start = len(self.ops)
        units = self.budget_left
        walk: list[Any] = []
        self._solve(x, targets, keep, walk=walk)
        if not walk:
            return True
        need, boundary, clean = walk
        wanted = set(targets)
        if clean and not any(resident[u] for u in need if u not in wanted):
            ops, nodes = self.ops[start:], self.nodes[start:]
            computed = tuple(set(compress(nodes, map(not_, ops))))  # COMPUTE is 0
            pins = tuple((t, self.pin[t]) for t in wanted)
            replay[key] = _Recorded(ops, nodes, units - self.budget_left, tuple(need), tuple(boundary), computed, pins)
            self.replay_size += len(ops) + len(need)
        return True

    def _replay(self, rec: _Recorded) -> None:
        """Redo a recorded call: its work, steps, computed nodes and target pins."""
        self.spend(rec.units)
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise RecursionStopped("time limit")
        self.ops.extend(rec.ops)
        self.nodes.extend(rec.nodes)
        done = self.done
        for v in rec.computed:
            done[v] = True
        mem = self.mem
        for t, pins in rec.pins:
            self.resident[t] = True
            self.pin[t] = pins
            self.cur += mem[t]
            self.pinned += mem[t]

    def _solve(
        self,
        x: int,
        targets: list[int],
        keep: bool,
        handoff: list[int] | tuple[int, ...] = (),
        plain_only: bool = False,
        tentative: bool = False,
        walk: list[Any] | None = None,
    ) -> bool:
        """Compute ``targets`` (owned inside x's subtree); with ``keep`` leave each pinned once.

        ``handoff``: pins the caller holds only for this call; they are released as soon as
        this call has pinned what it reads itself, so each value lives only as long as a
        reader still needs it. ``tentative``: do nothing and return False if the targets
        read a value the caller has not computed yet; ``plain_only``: also unless the
        plain schedule fits (both used to prefetch several requests in one go).
        ``walk``: filled with (the missing ancestors, the outside values read, whether no
        resident value inside x's subtree was met) for :meth:`solve`'s replay.
        """
        resident = self.resident
        preds = self.preds
        todo: list[int] = []
        done = self.done
        kept: list[int] = []
        for s in targets:
            if keep:
                if resident[s]:
                    self.acquire(s)
                    kept.append(s)
                else:
                    todo.append(s)
            elif not done[s]:  # a target computed once already needs nothing more
                todo.append(s)
        if not todo:
            for u in handoff:
                self.release(u)
            return True
        # the ancestors of the targets that are missing (all inside x's subtree)
        owner = self.owner
        memo = self.memo if self.budgeted else None
        walked = None if memo is None else memo.get(("walk", x, tuple(todo)))
        clean_now = None if walked is None else self._walk_holds(walked)
        if clean_now is not None:
            need, boundary, clean = walked[0], walked[1], clean_now
        else:
            need, boundary, clean = self._walk(x, todo, tentative, kept)
            if need is None:
                return False
            if memo is not None:
                self._keep_walk(memo, x, todo, need, boundary)
        self.spend(len(need) + len(boundary))
        if walk is not None:
            walk.extend((need, boundary, clean))
        for u in boundary:
            self.acquire(u)
        wanted = set(todo) if keep else set()
        plan = self._fitting_plain(need, boundary, wanted) if self.budgeted else None
        if plan is not None:
            for u in handoff:
                self.release(u)
            self._plain(plan)
            return True
        if plain_only:
            for u in boundary:
                self.release(u)
            for s in kept:
                self.release(s)
            return False
        for u in handoff:
            self.release(u)
        here: list[int] = []
        owned_x = self.owned[x]
        if 4 * len(need) < len(owned_x):  # a wide bag (random DAGs): look only at what is needed
            owned_need = sorted([v for v in need if owner[v] == x], key=self.rank.__getitem__)
        else:  # owned_x is in topological order
            owned_need = [v for v in owned_x if v in need]
        succs = self.succs
        # values only x's own nodes read are released right after their last reader
        pos = {v: i for i, v in enumerate(owned_need)}
        early: dict[int, list[int]] = {}  # index after which to release -> values
        early_set: set[int] = set()
        for p in list(boundary) + [v for v in owned_need if v not in wanted]:
            last = pos.get(p, -1)
            for w in succs[p]:
                if w in need:
                    j = pos.get(w)
                    if j is None:
                        break
                    last = max(last, j)
            else:
                early.setdefault(last, []).append(p)
                early_set.add(p)
        for u in early.pop(-1, ()):
            self.release(u)
        prefetched: dict[int, list[int]] = {}  # index of the last reader -> values to unpin
        child_tins, children_x = self.child_tins[x], self.children[x]
        node_tin = self.node_tin
        acquire, release, solve, caching = self.acquire, self.release, self.solve, self.caching
        for i, v in enumerate(owned_need):
            missing: dict[int, list[int]] = {}
            held: list[int] = []
            for u in preds[v]:
                if resident[u]:
                    acquire(u)
                    held.append(u)
                else:  # the child whose subtree owns u (_child_of)
                    child = children_x[bisect_right(child_tins, node_tin[u]) - 1]
                    if child in missing:
                        missing[child].append(u)
                    else:
                        missing[child] = [u]
            for child, inputs in missing.items():
                if caching and self._prefetch(x, child, inputs, owned_need, i, prefetched):
                    continue
                solve(child, inputs, True)
            if resident[v]:  # obtain
                acquire(v)
            else:
                self.compute(v)
            here.append(v)
            for inputs in missing.values():
                for u in inputs:
                    release(u)
            for u in held:
                release(u)
            if i in prefetched:
                for u in prefetched.pop(i):
                    release(u)
            if i in early:
                for u in early.pop(i):
                    release(u)
        rest: dict[int, list[int]] = {}
        for s in todo:
            if owner[s] != x and (keep or not done[s]):
                rest.setdefault(self._child_of(x, s), []).append(s)
        # release each other pinned value after the last child that may still read it
        slot = {c: i for i, c in enumerate(rest)}
        after: list[list[int]] = [[] for _ in range(len(rest) + 1)]
        for p in [v for v in here if v not in wanted] + list(boundary):
            if p in early_set:
                continue
            last = -1
            for w in succs[p]:
                if w in need and owner[w] != x:
                    last = max(last, slot.get(self._child_of(x, w), -1))
            after[last + 1].append(p)
        for u in after[0]:
            self.release(u)
        for i, (child, group) in enumerate(rest.items()):
            self.solve(child, group, keep, after[i + 1])
        return True

    def _walk(self, x: int, todo: list[int], tentative: bool, kept: list[int]) -> tuple[Any, Any, bool]:
        """The missing ancestors of ``todo`` inside x's subtree (``need``, todo first), the
        values read from outside them (``boundary``: pinned, or outside the subtree) and
        whether no resident value inside the subtree was met. (None, None, False) when
        ``tentative`` and a value outside is missing (the kept pins released)."""
        resident, preds, pin = self.resident, self.preds, self.pin
        need: set[int] = set(todo)
        boundary: set[int] = set()
        stack = list(todo)
        tin_x, tout_x = self.tin[x], self.tout[x]
        node_tin = self.node_tin
        clean = True  # no resident value inside the subtree met
        pop, add = stack.pop, stack.append
        while stack:
            v = pop()
            for u in preds[v]:
                if u in need:
                    continue
                inside = tin_x <= node_tin[u] < tout_x
                if resident[u]:
                    clean = clean and not inside
                    # a cached value inside the subtree is planned as missing (and reused
                    # if it is still cached when its turn comes): caching never pins memory
                    if pin[u] or not inside:
                        boundary.add(u)
                        continue
                elif not inside:
                    if tentative:  # reads a value the caller has not computed yet
                        for s in kept:
                            self.release(s)
                        return None, None, False
                    raise RecursionBug("the recursion reached outside its subtree")
                need.add(u)
                add(u)
        return need, boundary, clean

    def _keep_walk(self, memo: dict[Any, Any], x: int, todo: list[int], need: set[int], boundary: set[int]) -> None:
        """Keep a walk in ``memo`` for the next runs (budgeted runs of one plan ask for the
        same sub-problems again and again): its sets, and what :meth:`_walk_holds` checks."""
        wanted = set(todo)
        tin_x, tout_x, node_tin = self.tin[x], self.tout[x], self.node_tin
        inner = tuple([u for u in need if u not in wanted])
        bound_inside = tuple([tin_x <= node_tin[u] < tout_x for u in boundary])
        stored = len(need) + 2 * len(boundary)
        memo_size = memo.get("size", 0) + stored
        if memo_size > self.memo_cap:  # bounded memory: start again
            memo.clear()
            memo_size = stored
        memo[("walk", x, tuple(todo))] = (need, boundary, inner, tuple(boundary), bound_inside)
        memo["size"] = memo_size

    def _walk_holds(self, walked: tuple[Any, ...]) -> bool | None:
        """None unless :meth:`_walk` would find the kept walk again now, set for set in the
        same order: the walk is steered only by the branch it takes at each value it meets,
        and it takes the same ones where every value it put in ``need`` beyond the targets
        is unpinned (so inside and missing or merely cached) and every boundary value is
        resident and pinned or outside the subtree. Else: whether it would be clean now
        (no resident value inside the subtree among those it meets)."""
        _, _, inner, bound, bound_inside = walked
        pin, resident = self.pin, self.resident
        if any(map(pin.__getitem__, inner)):
            return None
        for u, inside in zip(bound, bound_inside):
            if not resident[u] or (inside and not pin[u]):
                return None
        return not any(bound_inside) and not any(map(resident.__getitem__, inner))

    def _prefetch(self, x: int, child: int, inputs: list[int], owned_need: list[int], i: int, prefetched: dict[int, list[int]]) -> bool:
        """Ask ``child`` at once for ``inputs`` and for what later nodes of x read from it,
        if one plain schedule fits; the extra values stay pinned until their last reader."""
        resident, preds, owner, node_tin = self.resident, self.preds, self.owner, self.node_tin
        child_tins, children_x = self.child_tins[x], self.children[x]
        first = set(inputs)
        last: dict[int, int] = {}
        for j in range(i + 1, len(owned_need)):
            for u in preds[owned_need[j]]:
                if not resident[u] and u not in first and owner[u] != x and children_x[bisect_right(child_tins, node_tin[u]) - 1] == child:
                    last[u] = j
        if not last:
            return False
        if not self.solve(child, inputs + list(last), True, plain_only=not self.eager, tentative=True):
            return False
        for u, j in last.items():
            prefetched.setdefault(j, []).append(u)
        return True

    # -------------------------------------------------------------- plain schedules
    def _fitting_plain(self, need: set[int], boundary: set[int], wanted: set[int]) -> _PlainPlan | None:
        """The lower-peak of two plain schedules of ``need`` (each node once: the graph's
        topological order, and a memory-greedy one) if it stays within the limit, else
        None. The cache counts as free room: it is evicted on demand."""
        best: tuple[float, _PlainPlan] | None = None
        frozen: tuple[Any, ...] | None = None  # the memo key's sets, made once for both plans
        if self.memo is not None:
            pin = self.pin
            frozen = (frozenset(need), frozenset(wanted), tuple(boundary), tuple([pin[u] == 1 for u in boundary]))
        for greedy in (False, True):
            plan, peak = self._plain_plan(need, boundary, wanted, greedy, frozen)
            if peak <= self.limit and (best is None or peak < best[0]):
                best = (peak, plan)
        return None if best is None else best[1]

    def _plain_plan(
        self, need: set[int], boundary: set[int], wanted: set[int], greedy: bool, frozen: tuple[Any, ...] | None = None
    ) -> tuple[_PlainPlan, int]:
        """A topological order of ``need`` (the graph's, or memory-greedy), the values
        released after each step (as (step, value) pairs sorted by step: per step, the
        order's own values in order, then the boundary's), and the peak of running it on
        top of the pinned values (a value counts as freed if the plan owns it or holds its
        only pin). Large plans are laid out with numpy, small ones with a loop. Memoised
        across the runs of one strategy call (``memo``; the ladder's runs ask for the same
        sub-problems again and again): the plan and its peak above the pinned values depend
        only on the key below, the boundary in its iteration order (the release order);
        ``frozen``: its sets, when the caller made them already."""
        memo = self.memo
        key: tuple[Any, ...] | None = None
        if memo is not None:
            if frozen is None:
                pin = self.pin
                frozen = (frozenset(need), frozenset(wanted), tuple(boundary), tuple([pin[u] == 1 for u in boundary]))
            key = ("plain", greedy, *frozen)
            hit = memo.get(key)
            if hit is not None:
                return hit[0], self.pinned + hit[1]
        plan, peak = self._plain_plan_of(need, boundary, wanted, greedy, frozen)
        if memo is not None:
            stored = 3 * len(need) + 2 * len(boundary)  # the order and the releases
            memo_size = memo.get("size", 0) + stored
            if memo_size > self.memo_cap:  # bounded memory: start again
                memo.clear()
                memo_size = stored
            memo[key] = (plan, peak - self.pinned)
            memo["size"] = memo_size
        return plan, peak

    def _plain_plan_of(
        self, need: set[int], boundary: set[int], wanted: set[int], greedy: bool, frozen: tuple[Any, ...] | None = None
    ) -> tuple[_PlainPlan, int]:
        order = self._greedy_order(need, wanted, frozen) if greedy else sorted(need, key=self.rank.__getitem__)
        if len(order) >= PLAIN_VECTOR_MIN:
            return self._plain_plan_np(order, boundary, wanted)
        last: dict[int, int] = {}
        preds = self.preds
        for k, v in enumerate(order):
            last[v] = k
            for u in preds[v]:
                last[u] = k
        events = [(last[v], v) for v in order if v not in wanted]
        events.extend((last[u], u) for u in boundary)
        events.sort(key=_first)  # stable: the order within a step is kept
        mem, ws, pin = self.mem, self.ws, self.pin
        cur = peak = self.pinned
        j, count = 0, len(events)
        for k, v in enumerate(order):
            peak = max(peak, cur + mem[v] + ws[v])
            cur += mem[v]
            while j < count and events[j][0] == k:
                u = events[j][1]
                if u in need or pin[u] == 1:
                    cur -= mem[u]
                j += 1
        return (order, [k for k, _ in events], [u for _, u in events]), peak

    def _plain_plan_np(self, order: list[int], boundary: set[int], wanted: set[int]) -> tuple[_PlainPlan, int]:
        """:meth:`_plain_plan`'s layout and peak with numpy (same result)."""
        o = np.asarray(order, dtype=np.int64)
        m = o.size
        ptr = self.pred_ptr
        indeg = ptr[o + 1] - ptr[o]
        reader = np.repeat(np.arange(m, dtype=np.int64), indeg)
        offset = np.repeat(ptr[o] - np.cumsum(indeg) + indeg, indeg)
        read = self.pred_idx[offset + np.arange(reader.size, dtype=np.int64)]
        last = np.full(len(self.mem), -1, dtype=np.int64)
        np.maximum.at(last, read, reader)
        last[o] = np.maximum(last[o], np.arange(m, dtype=np.int64))
        own = o if not wanted else o[~np.isin(o, np.fromiter(wanted, dtype=np.int64, count=len(wanted)))]
        bound = np.fromiter(boundary, dtype=np.int64, count=len(boundary))  # the set's order
        pin = self.pin
        bound_freed = np.fromiter((pin[u] == 1 for u in boundary), dtype=bool, count=len(boundary))
        ev_k = np.concatenate([last[own], last[bound]])
        ev_u = np.concatenate([own, bound])
        freed = np.concatenate([np.ones(own.size, dtype=bool), bound_freed])
        by_step = np.argsort(ev_k, kind="stable")
        ev_k, ev_u, freed = ev_k[by_step], ev_u[by_step], freed[by_step]
        mem_o = self.mem_np[o]
        released = np.zeros(m, dtype=np.int64)
        np.add.at(released, ev_k[freed], self.mem_np[ev_u[freed]])
        before = np.concatenate([[0], np.cumsum(mem_o - released)[:-1]])  # resident before step k
        peak = max(self.pinned, self.pinned + int((before + mem_o + self.ws_np[o]).max()))
        return (order, ev_k.tolist(), ev_u.tolist()), peak

    def _greedy_order(self, need: set[int], wanted: set[int], frozen: tuple[Any, ...] | None = None) -> list[int]:
        """Topological order of ``need`` that always runs the ready node whose step grows
        memory least (its output minus the inputs it frees), ties to the earlier node in
        the graph's order; as store-all's memory-greedy order, on the sub-problem only.
        O(k log k) for k nodes with a lazily updated heap. Memoised across the runs of
        one strategy call (``memo``): the order depends only on the key below."""
        preds = self.preds
        pin = self.pin
        memo = self.memo
        if memo is not None:
            outside = frozenset(u for v in need for u in preds[v] if u not in need and pin[u] == 1)
            key = (frozenset(need), frozenset(wanted), outside) if frozen is None else (frozen[0], frozen[1], outside)
            hit = memo.get(key)
            if hit is not None:
                return hit
            order = self._greedy_order_of(need, wanted)
            memo_size = memo.get("size", 0) + len(order)
            if memo_size > self.memo_cap:  # bounded memory: start again
                memo.clear()
                memo_size = len(order)
            memo[key] = order
            memo["size"] = memo_size
            return order
        return self._greedy_order_of(need, wanted)

    def _greedy_order_of(self, need: set[int], wanted: set[int]) -> list[int]:
        pin = self.pin
        return memory_greedy_order(
            need, self.preds, self.succs, self.mem, self.rank, lambda u: u not in wanted and (u in need or pin[u] == 1)
        )

    def _plain(self, plan: _PlainPlan) -> None:
        """Run a plain plan: :meth:`obtain` each node, :meth:`release` after each step.

        The primitives (compute, acquire, release, evict, free) are inlined here over
        local counters, the hottest loop of a budgeted run (~10⁵ steps per plan on a
        1k-node graph): the same steps in the same order, the same work and cost counted.
        A run that stops raises before its counters are written back (it is discarded).
        """
        order, ev_k, ev_u = plan
        resident, pin, mem, stamp = self.resident, self.pin, self.mem, self.stamp
        done, needed, costs = self.done, self.needed, self.costs
        ws, preds, pending, owed = self.ws, self.preds, self.pending, self.owed
        ops, nodes, limit = self.ops, self.nodes, self.limit
        caching, cache, value = self.caching, self.cache, self.value
        deadline = self.deadline
        heappush, heappop = heapq.heappush, heapq.heappop
        cur, pinned, clock = self.cur, self.pinned, self.clock
        budget_left, checks, cost_left = self.budget_left, self.checks, self.cost_left
        over = False
        j, count = 0, len(ev_k)
        for k, v in enumerate(order):
            if resident[v]:  # acquire
                if pin[v] == 0:
                    pinned += mem[v]
                    stamp[v] = -1
                pin[v] += 1
            else:  # compute
                budget_left -= 1
                if budget_left < 0:
                    raise RecursionStopped("work limit")
                checks += 1
                if deadline is not None and not checks & 255 and time.perf_counter() > deadline:
                    raise RecursionStopped("time limit")
                first = not done[v] and needed[v]
                if pending is not None and owed[v]:
                    owed[v] = False
                elif not first:
                    cost_left -= costs[v]
                if cost_left < 0:
                    raise RecursionStopped("cannot win")
                if pending is not None and first:
                    for u in preds[v]:
                        pending[u] -= 1
                m = mem[v]
                need = m + ws[v]
                if cur + need > limit:  # evict
                    while cur + need > limit and cache:
                        _, _, st, u = heappop(cache)
                        if stamp[u] == st and resident[u] and pin[u] == 0:
                            stamp[u] = -1
                            ops.append(FREE)  # free
                            nodes.append(u)
                            resident[u] = False
                            cur -= mem[u]
                            if pending is not None and pending[u] > 0:
                                owed[u] = True
                                cost_left -= costs[u]
                                if cost_left < 0:
                                    raise RecursionStopped("cannot win")
                    if cur + need > limit:
                        over = True
                        if self.stop_over:
                            raise RecursionStopped(OVER_LIMIT)
                ops.append(COMPUTE)
                nodes.append(v)
                done[v] = True
                resident[v] = True
                pin[v] = 1
                cur += m
                pinned += m
            while j < count and ev_k[j] == k:  # release
                u = ev_u[j]
                j += 1
                left = pin[u] - 1
                pin[u] = left
                if left:
                    continue
                pinned -= mem[u]
                if caching:
                    clock += 1
                    stamp[u] = clock
                    heappush(cache, (value[u], -clock, clock, u))
                else:  # free
                    ops.append(FREE)
                    nodes.append(u)
                    resident[u] = False
                    cur -= mem[u]
                    if pending is not None and pending[u] > 0:
                        owed[u] = True
                        cost_left -= costs[u]
                        if cost_left < 0:
                            raise RecursionStopped("cannot win")
        self.cur, self.pinned, self.clock = cur, pinned, clock
        self.budget_left, self.checks, self.cost_left = budget_left, checks, cost_left
        if over:
            self.over = True


class _Statics:
    """What every run over one (graph, separator tree) reads and none changes: the graph's
    and the tree's arrays as lists, made once per tree and kept on the graph (a plan makes
    ~20 runs over the same tree; a search for the smallest budget, ten plans)."""

    def __init__(self, graph: Graph, sep: SeparatorTree) -> None:
        self._csr = (graph.pred_ptr, graph.pred_idx, graph.needed)  # for needed_readers
        self.mem_np = graph.mem.astype(np.int64)
        self.ws_np = graph.workspace.astype(np.int64)
        self.mem: list[int] = graph.mem.tolist()
        self.ws: list[int] = graph.workspace.tolist()
        self.owner: list[int] = sep.owner.tolist()
        self.tin: list[int] = sep.tin.tolist()
        self.tout: list[int] = sep.tout.tolist()
        self.child_tins = [[self.tin[c] for c in ch] for ch in sep.children]
        self.node_tin = [self.tin[o] for o in self.owner]
        self.rank: list[int] = graph.topo_rank.tolist()
        self.cost: list[float] = graph.cost.tolist()
        self.needed: list[bool] = graph.needed.tolist()
        self.targets: list[int] = graph.targets[graph.needed[graph.targets]].tolist()
        self.zeros = [0.0] * graph.n
        self._per_byte: list[float] | None = None
        self._readers: list[int] | None = None

    @classmethod
    def of(cls, graph: Graph, sep: SeparatorTree) -> _Statics:
        """The statics of ``sep`` over ``graph``, made once (a few trees per graph kept)."""
        kept = graph.derived("reference recursion statics", dict)
        hit = kept.get(id(sep))
        if hit is not None and hit[0] is sep:
            return hit[1]
        if len(kept) >= 4:
            kept.clear()
        made = cls(graph, sep)
        kept[id(sep)] = (sep, made)
        return made

    def per_byte(self) -> list[float]:
        """Per node, its cost per byte of output (inf for empty outputs): cheap-first eviction."""
        if self._per_byte is None:
            cost, mem = self.cost, self.mem
            self._per_byte = [cost[v] / mem[v] if mem[v] else math.inf for v in range(len(mem))]
        return self._per_byte

    def needed_readers(self) -> list[int]:
        """Per value, how many needed nodes read it (copy before counting down)."""
        if self._readers is None:
            ptr, idx, needed = self._csr
            readers = np.repeat(np.arange(needed.size, dtype=np.int64), np.diff(ptr))
            self._readers = np.bincount(idx[needed[readers]], minlength=needed.size).tolist()
        return self._readers


@dataclass(frozen=True)
class _Recorded:
    """One call of the bare recursion, as :meth:`_Recursion.solve` replays it."""

    ops: list[int]  # its steps
    nodes: list[int]
    units: int  # work it counted
    closure: tuple[int, ...]  # its targets' ancestors inside the subtree: none resident
    boundary: tuple[int, ...]  # what it reads from outside: all resident
    computed: tuple[int, ...]  # nodes it computes
    pins: tuple[tuple[int, int], ...]  # (target, pins it leaves)


def memory_greedy_order(
    need: Collection[int],
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    mem: Sequence[int],
    rank: Sequence[int],
    frees: Callable[[int], bool] | None = None,
) -> list[int]:
    """A topological order of ``need`` that always runs the ready node whose step grows
    resident memory least: its output minus the inputs it frees, i.e. those whose last
    reader in ``need`` it is (and, when ``frees`` is given, for which ``frees(u)`` holds:
    values the caller keeps are not freed). Ties go to the lower ``rank`` (a topological
    rank of the whole graph). Inputs outside ``need`` count as already resident.

    O(E log V) over the sub-graph with a lazily updated heap (a node's key only drops, when
    one of its inputs is left with it as the one reader).
    """
    # per-node counters: plain lists when ``need`` is much of the graph (store-all), dicts
    # that read 0 when missing on small sub-problems (the recursion's), same code either way
    n = len(preds)
    dense = 4 * len(need) >= n
    remaining: MutableSequence[int] | dict[int, int] = [0] * n if dense else defaultdict(int)  # readers in need not placed
    missing: MutableSequence[int] | dict[int, int] = [0] * n if dense else defaultdict(int)  # inputs in need not placed
    placed: MutableSequence[int] | dict[int, int] = bytearray(n) if dense else defaultdict(int)
    current: MutableSequence[int] | dict[int, int] = [0] * n if dense else {}
    for v in need:
        c = 0
        for u in preds[v]:
            remaining[u] += 1
            if u in need:
                c += 1
        missing[v] = c
    # frees(u) asked once per value (it is the caller's fixed predicate), then looked up
    freeable: dict[int, bool] = {}

    def delta(v: int) -> int:
        d = mem[v]
        for u in preds[v]:
            if remaining[u] == 1:
                f = freeable.get(u)
                if f is None:
                    f = freeable[u] = frees is None or frees(u)
                if f:
                    d -= mem[u]
        return d

    heap: list[tuple[int, int, int]] = []  # (delta, rank, v)
    for v in need:
        if missing[v] == 0:
            d = current[v] = delta(v)
            heap.append((d, rank[v], v))
    heapq.heapify(heap)
    order: list[int] = []
    pop, push, append = heapq.heappop, heapq.heappush, order.append
    while heap:
        d, _, v = pop(heap)
        if placed[v] or d != current[v]:
            continue
        placed[v] = 1
        append(v)
        for u in preds[v]:
            r = remaining[u] - 1
            remaining[u] = r
            if r == 1:  # its one reader left now frees it
                for w in succs[u]:
                    if w in need and not placed[w] and missing[w] == 0:
                        d = current[w] = delta(w)
                        push(heap, (d, rank[w], w))
        for w in succs[v]:
            if w in need:
                m = missing[w] - 1
                missing[w] = m
                if m == 0:
                    d = current[w] = delta(w)
                    push(heap, (d, rank[w], w))
    return order
