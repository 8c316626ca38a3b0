"""treewidth: Kumar et al.'s divide and conquer over a balanced separator tree, with budgets.

Reference: R. Kumar, M. Purohit, Z. Svitkina, E. Vee, J. Wang, *Efficient
Rematerialization for Deep Networks*, NeurIPS 2019 (the tree-decomposition algorithm).

**The bare recursion** (``--budget none``). ``solve(X, S, keep)`` computes the node set S,
all owned by the subtree of separator-tree node X, assuming every value from outside the
subtree that it reads is resident:

1. for each node v owned by X that S needs (an ancestor of S inside the subtree), in
   topological order: compute v's missing inputs by ``solve(child, inputs, keep=True)``,
   compute v and keep it, free those inputs;
2. compute the rest of S child by child (``solve(child, S ∩ child, keep)``);
3. free the nodes of X computed in 1 unless ``keep`` asks for them.

The top call is ``solve(root, targets, keep=False)``. Only ancestors of the targets are
ever computed. We decompose the moral skeleton (a node and its inputs form a clique), so
the inputs a call asks for always lie in one bag; their owners then lie on one
root-to-leaf path, each call asks one child at a time, and with unit sizes

* **peak ≤ (w+1)·(depth+1) values**: each stacked call holds at most its own bag's
  owned nodes (≤ w+1), and the call that computes v holds v's returned inputs (≤ w) on
  top, which only happens above the deepest level;
* **computes of a node owned at depth d ≤ (w+2)^d**: a call spawns at most w+2 calls into
  any one child (one per owned node, plus step 2), so in total at most
  n·(w+2)^depth = n^(1+log2(w+2)) computes, polynomial for fixed w (depth ≤ log2 n).

**With a budget** (ours, not the paper's; docs/algorithms.md §3):

* if the store-all plan fits, it is the plan (cost = base cost);
* a call whose plain schedule (its missing ancestors once each, topological order,
  freed after last use) fits what the pinned values leave of the budget runs it
  instead of recursing;
* values the recursion would free stay in an evictable cache (most recently cached,
  or cheapest to recompute per byte, evicted first) and are reused; the recursion
  plans as if they were gone, so the cache never pins memory;
* a bag that needs several inputs from one child asks for them at once (prefetch);
* candidates: the cacheless recursion at B (monotone in B by construction), the bare
  recursion, and the cached recursion with prefetch at each point of a fixed budget
  ladder at or below B, and twremat's memory-limit pass at B
  (:mod:`remat_cli.strategies.evict`) over the bare recursion (what the paper's
  reference code returns, so we never cost more) and over the cheapest fitting
  candidate. Each is replayed by the simulator; the cheapest that fits wins. If none fits: NoPlanError with the smallest budget
  known to work.

**Scale** (``LARGE_GRAPH_NODES``, 5,000 needed nodes or more): one ladder point, and no
budgeted run where the decomposition is too wide to bound anything; the info says so.

**Limits** (docs/algorithms.md §6): each run stops past :func:`work_limit` units (its
schedule has ≤ 2 steps per unit, so memory is O(n + limit)), past the deadline
(``RunContext.deadline``), or, on the ladder, once it costs more than the best fitting
plan so far; the cheapest finished plan that fits wins (anytime). A bare recursion that
stopped is replaced by store-all, and the plan's mode says so.

**Speed** (same schedules): the bare recursion records each call that keeps its targets
and replays its steps when the same call recurs on the same state (the (w+2)^depth
repeats), counting the same work; the decompositions, separator trees, the bare run and
its clean-up are kept on the graph, so repeated plans of one graph (a search for the
smallest budget) make them once, and so is the budgeted runs' memo of sub-problems (walks,
plain plans, greedy orders), which the next plan's runs start from; plain schedules of many nodes are laid out with numpy; recent-first eviction takes the
cached values from a stack (the heap's order when every eviction value is 0), and
cheap-first eviction pushes them onto its heap only when an eviction needs it.
A capped run is charged a recomputation as soon as it frees a value that a needed node
still to come reads. Standalone on ``PARALLEL_NEEDED`` nodes or more, a forked second
process makes the memory-limit pass over the bare run and then the ladder's lower points
(docs/algorithms.md §6); below ``LARGE_GRAPH_NODES`` it starts before the bare recursion,
makes it and sends its steps back, while this process makes the cacheless budgeted run,
then the ladder's top runs until the steps come (kept as ladder runs, under caps no
lower than the ladder's: reused exactly), then measures them. The two go down the
ladder from either end and say on a shared page which run each is at, so no run is
made twice; while the pass over the bare run comes, this process makes the pass over
the cheapest candidate and the keep moves over the cheapest so far.
"""

from __future__ import annotations

import heapq
import math
import time
from array import array
from bisect import bisect_right
from dataclasses import dataclass, replace
from itertools import compress
from operator import not_
from typing import Any

import numpy as np

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.units import Fact, Phrase, fmt_bytes_exact
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import Metrics, simulate
from remat_cli.strategies.base import RunContext, Strategy, StrategyResult
from remat_cli.algorithms.orders import memory_greedy_order
from remat_cli.algorithms.decompose import MORAL_DEGREE_CAP, SeparatorTree, separator_tree, shared, shared_tree_decomposition
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan

__all__ = [
    "STRATEGY",
    "FIT_PROBE",
    "DecompositionOptions",
    "RecursionStopped",
    "RecursionBug",
    "recursive_schedule",
    "plan_over_separator_tree",
    "unit_peak_values",
    "compute_bound",
    "work_limit",
]

#: The recursion stops (:class:`RecursionStopped`) after max(``WORK_FLOOR``,
#: ``WORK_PER_NODE`` · n) units of work (a compute step, or a node of a sub-problem the
#: recursion looks at), so its time and its schedule (≤ 2 steps per unit) stay bounded
#: on graphs whose decomposition is wide (random or dense DAGs): there (w+2)^depth
#: recomputations are not polynomial in any useful sense.
WORK_FLOOR = 2_000_000
WORK_PER_NODE = 100
#: Plain schedules of at least this many nodes are laid out with numpy (the same plan).
PLAIN_VECTOR_MIN = 256
#: On graphs of at least this many needed nodes (scale mode; every sample and the 1k
#: benchmarks are far below it) a budgeted run takes seconds (about 5 s of CPU on a
#: 10,000-node grid), so: the budget ladder runs its highest point at or below the budget
#: only (``LARGE_LADDER_POINTS``, prefetch with recent-first eviction), and where the
#: decomposition's bound (w+1)·(depth+1) is no fewer values than the needed nodes (random
#: DAGs) no budgeted run is made at all: only the bare recursion (work-limited) and the
#: memory-limit pass over it. The plan's info says which.
LARGE_GRAPH_NODES = 5000
LARGE_LADDER_POINTS = 1
#: From this many needed nodes, a standalone run (not inside ``auto``, which already
#: shares its strategies with a second process, nor in a daemon worker) cleans up the bare
#: recursion and runs the memory-limit pass over it, then the budget ladder's lower
#: points, in a forked second process while this one runs the ladder from the top: the
#: same plan, both cores at work.
PARALLEL_NEEDED = 500

#: A plain schedule: its order, and the (step, value) releases sorted by step.
_PlainPlan = tuple[list[int], list[int], list[int]]


def _first(pair: tuple[int, int]) -> int:
    return pair[0]


#: Why a cacheless run stopped where it went over its limit (``stop_over``).
OVER_LIMIT = "over the limit"
#: Why a budgeted run of a fit probe stopped where it went over the probe's budget
#: (``stop_above``): its schedule would peak above the budget, so it could not fit it.
OVER_BUDGET = "over the budget"


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
    stop_above: int | None = None,
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
    orders and plain plans between them (at most max(20·n, 500,000) node ids stored); an
    empty one starts as the last memo given over this tree (kept with its statics): every
    entry depends only on its key, and a search for the smallest budget plans the same
    graph again and again, each plan with a memo of its own. ``replay`` (bare recursion only)
    records the steps of each call that leaves its targets pinned and copies them when the
    same call recurs on the same state (:meth:`_Recursion.solve`): the same schedule, and
    the same work counted, without walking the sub-problem again.

    ``stop_over`` (cacheless budgeted runs): raise :class:`RecursionStopped` ("over the
    limit") at the first compute that goes over ``limit``. Without a cache the run counts
    the resident bytes exactly as the simulator does, so such a run's schedule would peak
    above the budget: it could not be a plan.

    ``stop_above`` (budgeted runs of a fit probe; at least ``limit``): raise
    :class:`RecursionStopped` ("over the budget") at the first compute for which the
    resident bytes, the cache included (exactly as the simulator counts them), and the
    compute's own output and workspace pass ``stop_above``: the schedule would peak above
    it. Evictions keep every compute within ``limit`` while the cache holds values, so
    this can only happen where the run goes over ``limit`` with nothing left to evict.
    """
    if stop_above is not None and (limit is None or stop_above < limit):
        raise ValueError("stop_above needs a limit no higher than it")
    planner = _Recursion(graph, sep, limit, cache, eager, evict)
    planner.stop_over = stop_over and not planner.caching
    planner.stop_above = math.inf if stop_above is None else stop_above
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
    if memo is not None:
        if not memo and statics.memo is not None and statics.memo is not memo:
            memo.update(statics.memo)  # (the sub-problems of the last plan over this tree)
        statics.memo = memo
    planner.memo = memo
    if replay and limit is None and planner.cost_left == math.inf:
        planner.replay = {}
    planner.solve(sep.root, statics.targets[:], False)
    # the steps are kept in a bytearray and a C-int array: numpy reads them as buffers
    ops = np.frombuffer(planner.ops, dtype=np.int8).copy()
    schedule = Schedule(ops, np.frombuffer(planner.nodes, dtype=np.intc).astype(np.int32))
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
        # values cached, (v, stamp), in caching order. Recent-first eviction (all values 0)
        # takes them from its end: the heap's order, since each stamp is the newest. With
        # cheap-first eviction they enter the heap only when an eviction needs it
        # (:meth:`_flush`); most are taken back first and never do
        self.fresh: list[tuple[int, int]] = []
        self.lifo = evict != "cheap"
        self.rank = statics.rank
        cost = statics.cost
        # eviction order: "recent" evicts the most recently cached value first; "cheap"
        # evicts the value cheapest to recompute per byte first (recency breaks ties)
        self.value = statics.per_byte() if evict == "cheap" else statics.zeros
        self.ops = bytearray()  # the steps so far (COMPUTE or FREE, node)
        self.nodes = array("i")
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
        self.stop_above: float = math.inf  # RecursionStopped("over the budget") once past it

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
            self.fresh.append((u, self.clock))
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

    def _flush(self) -> None:
        """Push the values cached since the last eviction that are still cached onto the
        cache heap. Their keys are distinct (each stamp is new), so the heap pops the same
        live entries in the same order as if each had been pushed when it was cached."""
        cache, stamps, value, heappush = self.cache, self.stamp, self.value, heapq.heappush
        for u, st in self.fresh:
            if stamps[u] == st:
                heappush(cache, (value[u], -st, st, u))
        self.fresh.clear()

    def _evict(self, need: int) -> None:
        lifo, fresh = self.lifo, self.fresh
        if fresh and not lifo:
            self._flush()
        cache, stamps, resident, pin = self.cache, self.stamp, self.resident, self.pin
        limit, heappop = self.limit, heapq.heappop
        pool = fresh if lifo else cache
        while self.cur + need > limit and pool:
            if lifo:
                u, stamp = fresh.pop()
            else:
                _, _, stamp, u = heappop(cache)
            if stamps[u] == stamp and resident[u] and pin[u] == 0:
                stamps[u] = -1
                self._free(u)
        if self.cur + need > self.limit:
            self.over = True
            if self.stop_over:
                raise RecursionStopped(OVER_LIMIT)
            if self.cur + need > self.stop_above:
                raise RecursionStopped(OVER_BUDGET)

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
                    if j > last:
                        last = j
            else:
                early.setdefault(last, []).append(p)
                early_set.add(p)
        for u in early.pop(-1, ()):
            self.release(u)
        prefetched: dict[int, list[int]] = {}  # index of the last reader -> values to unpin
        later: list[Any] = []  # what owned_need reads from each child, made at the first prefetch
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
                if caching and self._prefetch(x, child, inputs, owned_need, i, prefetched, later):
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
        slot_of: dict[int, int] = {}  # per reader met, the slot of its child (-1: none)
        for p in [v for v in here if v not in wanted] + list(boundary):
            if p in early_set:
                continue
            last = -1
            for w in succs[p]:
                if w in need and owner[w] != x:
                    k = slot_of.get(w)
                    if k is None:  # (_child_of, inlined)
                        k = slot_of[w] = slot.get(children_x[bisect_right(child_tins, node_tin[w]) - 1], -1)
                    if k > last:
                        last = k
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

    def _prefetch(
        self,
        x: int,
        child: int,
        inputs: list[int],
        owned_need: list[int],
        i: int,
        prefetched: dict[int, list[int]],
        later: list[Any],
    ) -> bool:
        """Ask ``child`` at once for ``inputs`` and for what later nodes of x read from it,
        if one plain schedule fits; the extra values stay pinned until their last reader.

        ``later`` holds (made at the first call of a :meth:`_solve`, whose ``owned_need`` does
        not change) per child, the reads of owned_need from outside x's own nodes in scan
        order (node by node, each node's inputs in order) as (positions, values): each call
        then scans only the reads after position i of its child, instead of every input of
        every later node with a search for its child (wide bags of random DAGs). The
        values kept are those the scan finds not resident and not asked for already, each
        with its last position, in the order first met: as before."""
        resident = self.resident
        if not later:
            preds, owner, node_tin = self.preds, self.owner, self.node_tin
            child_tins, children_x = self.child_tins[x], self.children[x]
            by_child: dict[int, tuple[list[int], list[int]]] = {}
            for j, w in enumerate(owned_need):
                for u in preds[w]:
                    if owner[u] != x:
                        c = children_x[bisect_right(child_tins, node_tin[u]) - 1]
                        reads = by_child.get(c)
                        if reads is None:
                            reads = by_child[c] = ([], [])
                        reads[0].append(j)
                        reads[1].append(u)
            later.append(by_child)
        reads = later[0].get(child)
        if reads is None:
            return False
        at, values = reads
        first = set(inputs)
        last: dict[int, int] = {}
        for k in range(bisect_right(at, i), len(at)):
            u = values[k]
            if not resident[u] and u not in first:
                last[u] = at[k]
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
        caching, cache, fresh, lifo = self.caching, self.cache, self.fresh, self.lifo
        pool = fresh if lifo else cache  # where evictions take from
        deadline = self.deadline
        heappop = heapq.heappop
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
                    if fresh and not lifo:
                        self._flush()
                    while cur + need > limit and pool:
                        if lifo:
                            u, st = fresh.pop()
                        else:
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
                        if cur + need > self.stop_above:
                            raise RecursionStopped(OVER_BUDGET)
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
                    fresh.append((u, clock))
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
        #: the memo of the last runs given one (:func:`recursive_schedule`'s ``memo``)
        self.memo: dict[Any, Any] | None = None

    @classmethod
    def of(cls, graph: Graph, sep: SeparatorTree) -> _Statics:
        """The statics of ``sep`` over ``graph``, made once (a few trees per graph kept)."""
        kept = graph.derived("recursion statics", dict)
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

    ops: bytearray  # its steps (slices of the run's)
    nodes: array
    units: int  # work it counted
    closure: tuple[int, ...]  # its targets' ancestors inside the subtree: none resident
    boundary: tuple[int, ...]  # what it reads from outside: all resident
    computed: tuple[int, ...]  # nodes it computes
    pins: tuple[tuple[int, int], ...]  # (target, pins it leaves)


# ---------------------------------------------------------------------- the strategy
@dataclass(frozen=True)
class DecompositionOptions:
    """``treewidth``'s and ``pathwidth``'s options (both off only to test parts alone):
    ``cache`` runs the cached recursion on the budget ladder, ``memlimit`` adds twremat's
    memory-limit pass over the bare recursion and the best candidate."""

    cache: bool = True
    memlimit: bool = True


@dataclass(frozen=True)
class _Attempt:
    schedule: Schedule
    metrics: Metrics
    label: str | Phrase  # what the run was, reported as info["mode"]


def plan_over_separator_tree(
    graph: Graph,
    sep: SeparatorTree,
    budget: int | None,
    options: DecompositionOptions,
    context: RunContext,
    *,
    kind: str,
    decompose_seconds: float,
    fit_only: bool = False,
) -> StrategyResult:
    """The strategy body shared by ``treewidth`` and ``pathwidth`` (``kind`` names which).

    Every candidate schedule is measured by the simulator; a plan above ``budget`` is
    never returned. Anytime: a candidate that passes its work limit or the deadline
    (``context.deadline``, a ``time.perf_counter()`` value) is dropped and the cheapest
    finished one that fits wins; ``context.progress(done, total, label)`` hears of each
    candidate.

    ``fit_only`` (:data:`FIT_PROBE`, the search for the smallest budget): return the first
    candidate found to fit ``budget``, unpolished, as soon as one is: the plan fits exactly
    when one of its candidates does, so the verdict is the plan's, in less time. The kept
    bare run, and the memory-limit pass over it where the kept clean-up of it peaks within
    the budget, are looked at first; then the candidates come as in the plan, each
    replayed by the simulator. Where none fits: the plan's NoPlanError, word for word.
    Its ladder runs, here and in the second process, stop at their first compute over the
    budget (``stop_above``: they could not fit it); a run stopped so is noted for this
    probe only, never kept on the graph (it says nothing about other budgets).
    """
    try:
        return _plan_over_separator_tree(
            graph, sep, budget, options, context, kind=kind, decompose_seconds=decompose_seconds, fit_only=fit_only
        )
    except _Fitted as found:  # (a fit probe's answer)
        return StrategyResult(found.run.schedule, {"decomposition": kind, "mode": found.run.label}, None)


class _Fitted(Exception):
    """A fit probe found a candidate that fits (:func:`plan_over_separator_tree`)."""

    def __init__(self, run: _Attempt) -> None:
        super().__init__("fits")
        self.run = run


def _plan_over_separator_tree(
    graph: Graph,
    sep: SeparatorTree,
    budget: int | None,
    options: DecompositionOptions,
    context: RunContext,
    *,
    kind: str,
    decompose_seconds: float,
    fit_only: bool = False,
) -> StrategyResult:
    """:func:`plan_over_separator_tree`; in a fit probe it raises :class:`_Fitted`."""
    started = time.perf_counter()
    deadline = context.deadline
    progress = context.progress
    idle = [context.idle]
    info: dict[str, Any] = {
        "decomposition": kind,
        "width": sep.width,
        "separator depth": sep.depth,
        "bare bound (w+1)(depth+1)": (sep.width + 1) * (sep.depth + 1),
        "decompose seconds": round(decompose_seconds, 4),
    }
    wide = int(np.count_nonzero(np.diff(graph.pred_ptr)[graph.needed] > MORAL_DEGREE_CAP))
    if wide:
        info["nodes outside the bound"] = Phrase("{} (more than {} inputs: not moralized)", (wide, MORAL_DEGREE_CAP))
    stopped: list[Phrase] = []  # "label (why)" of each run stopped at a limit

    def done_if_fits(run: _Attempt | None) -> None:
        """In a fit probe, end the plan with ``run`` if it fits the budget."""
        if fit_only and run is not None and budget is not None and run.metrics.peak_bytes <= budget:
            raise _Fitted(run)

    def attempt(label: str | Phrase, limit: int | None, *, ran: tuple[Schedule | None, str] | None = None, **kw: Any) -> _Attempt | None:
        """One run of the recursion, measured; None when it stopped at a limit. ``ran``:
        its outcome already (:func:`run_only`), to measure and count here."""
        schedule, why = run_only(label, limit, **kw) if ran is None else ran
        if schedule is None:
            if why == "cannot win":
                pruned[0] += 1
            elif why in (OVER_LIMIT, OVER_BUDGET):
                unfit[0] += 1  # a candidate that does not fit, counted as tried
            else:
                stopped.append(Phrase("{} ({})", (label, why)))
            return None
        return _Attempt(schedule, _measure(graph, schedule), label)

    def run_only(label: str | Phrase, limit: int | None, **kw: Any) -> tuple[Schedule | None, str]:
        """One run of the recursion: its schedule, or None and why it stopped."""
        if progress is not None:
            progress(tried[0], 0, Phrase("{}: {}", ("treewidth" if kind.startswith("tree") else "pathwidth", label)))
        tried[0] += 1
        try:
            return recursive_schedule(graph, sep, limit, deadline=deadline, memo=memo, **kw)[0], ""
        except RecursionStopped as exc:
            return None, str(exc)

    tried = [0]
    pruned = [0]
    unfit = [0]  # cacheless runs stopped over the budget (they would not fit it)
    memo: dict[Any, Any] = {}
    # a ladder run depends on its point, not on the budget: kept on the graph for the next
    # plan of it (a search for the smallest budget); (tree id, point, eager, evict) ->
    # (tree, its run or None, the cost cap it was stopped under, why it stopped)
    ladder_runs = graph.derived("ladder runs", dict)
    # a fit probe stops a ladder run at its first compute over the budget (it cannot fit
    # it: ``stop_above``); that says nothing about other budgets, so such runs are noted
    # here, for this plan only, never in ladder_runs
    above = None if not fit_only or budget is None else budget - graph.fixed_mem
    over_budget: set[tuple[int, int, bool, str]] = set()

    def ladder_attempt(label: Phrase, point: int, eager: bool, evict: str, max_cost: float) -> _Attempt | None:
        key = (id(sep), point, eager, evict)
        if forked is not None:  # the second process is making this run: its outcome, not
            code = _job_code(point, eager, evict)  # the same run again here (it started
            while (
                key not in ladder_runs and key not in over_budget and forked.claimed() == code and not forked.ended and not _past(deadline)
            ):
                absorb(wait=True, ahead=True)  # under a cap no lower than this one: caps only fall)
        if key in over_budget and key not in ladder_runs:  # (the second process's run)
            tried[0] += 1
            unfit[0] += 1
            return None
        hit = ladder_runs.get(key)
        if hit is not None and hit[0] is sep:
            _, run, cap, why = hit
            if run is not None and run.metrics.cost <= max_cost:  # it finishes under this cap too
                tried[0] += 1
                return _Attempt(run.schedule, run.metrics, label)
            if run is not None or (why == "cannot win" and max_cost <= cap):  # stopped again
                tried[0] += 1
                pruned[0] += 1
                return None
            if why == "work limit":
                tried[0] += 1
                stopped.append(Phrase("{} ({})", (label, why)))
                return None
        was_pruned, was_stopped = pruned[0], len(stopped)
        run = attempt(label, point - graph.fixed_mem, cache=True, eager=eager, evict=evict, max_cost=max_cost, stop_above=above)
        if run is not None:
            keep_run(key, run, None, None)
        elif pruned[0] > was_pruned:
            keep_run(key, None, max_cost, "cannot win")
        elif len(stopped) > was_stopped and stopped[-1].args[1] == "work limit":
            keep_run(key, None, None, "work limit")
        return run

    def keep_run(key: tuple, run: _Attempt | None, cap: float | None, why: str | None) -> None:
        """Keep a ladder run's outcome (a finished run, or why it stopped and under which
        cap) for the next plan of the graph; bounded: a few searches' worth."""
        if len(ladder_runs) >= 64:
            ladder_runs.clear()
        ladder_runs[key] = (sep, run, cap, why)

    # the bare recursion does not depend on the budget: one run per tree, kept on the graph
    # (a search for the smallest budget plans the same graph ten times)
    runs = graph.derived("bare recursion runs", dict)
    hit = runs.get(id(sep))
    if hit is None or hit[0] is not sep:
        hit = [sep, None, None, None, None]  # tree, its run or None, why it stopped, cleaned-up run, its metrics

    def bare_attempt(ran: tuple[Schedule | None, str] | None = None) -> _Attempt | None:
        """The bare run, measured (``ran``: its recursion made already, by :func:`run_only`)."""
        if hit[1] is not None or hit[2] is not None:
            if hit[1] is None:
                stopped.append(Phrase("{} ({})", ("bare recursion", hit[2])))
            return hit[1]
        before = len(stopped)
        run = attempt("bare recursion", None, ran=ran)
        why = None if run is not None else (stopped[-1].args[1] if len(stopped) > before else "cannot win")
        if run is not None or why == "work limit":  # a time limit may pass next time
            hit[1], hit[2] = run, why
            if len(runs) >= 4:  # bounded: a few trees per graph
                runs.clear()
            runs[id(sep)] = hit
        return run

    def clean_kept(bare: Schedule) -> bool:
        """Whether :func:`cleaned_bare` of ``bare`` is made already (kept in ``hit``)."""
        return hit[3] is not None and hit[1] is not None and hit[1].schedule is bare

    # the clean-up of this plan's bare run and its metrics, as the second process made them
    # for its pass (it sends them where that pass does not fit the budget: the failure's
    # message may need that peak); what cleaned_bare makes, taken when it is asked for
    given: list[Any] = []

    def cleaned_bare(bare: Schedule) -> Schedule:
        """The bare run with frees moved to last use (evict.cleanup), made once (or taken
        from the second process: ``given``, the same steps from the same run)."""
        from remat_cli.strategies.evict import cleanup

        if not clean_kept(bare):
            hit[3], hit[4] = (given[0], (given[0], given[1])) if given else (cleanup(graph, bare), None)
        return hit[3]

    def cleaned_peak(bare: Schedule) -> int:
        """The peak of :func:`cleaned_bare`, measured once."""
        clean = cleaned_bare(bare)
        if hit[4] is None or hit[4][0] is not clean:
            hit[4] = (clean, _measure(graph, clean))
        return hit[4][1].peak_bytes

    if budget is None:
        bare_run = bare_attempt()
        if bare_run is None:
            store = store_all_plan(graph)
            info["mode"] = Phrase("store-all: the bare recursion stopped at its {}", (stopped[0].args[1],))
            info["work limit (units)"] = work_limit(graph)
            return _result(graph, store.schedule, store.metrics, info, started)
        info["mode"] = "bare recursion"
        return _result(graph, bare_run.schedule, bare_run.metrics, info, started)
    fits = store_all_if_fits(graph, budget)
    if fits is not None:
        info["mode"] = "store-all fits the budget"
        return _result(graph, fits.schedule, fits.metrics, info, started)
    sa = store_all_plan(graph).metrics
    candidates: list[_Attempt] = []
    needed = int(np.count_nonzero(graph.needed))
    bound = (sep.width + 1) * (sep.depth + 1)
    too_wide = needed >= LARGE_GRAPH_NODES and bound >= needed
    if too_wide:  # the budgeted runs would spend minutes for a bound store-all meets
        info["budgeted recursion"] = Phrase(
            "not run: its bound (w+1)(depth+1) = {} values is no fewer than the {} needed nodes"
            " (a graph of {} needed nodes or more); the bare recursion and the memory-limit pass only",
            (bound, needed, LARGE_GRAPH_NODES),
        )
    sent: list[Any] = []  # the memory-limit pass over the bare run (the second process's)
    if fit_only and hit[1] is not None:  # the kept bare run fits, or the pass over it may
        done_if_fits(hit[1])
        if options.memlimit and hit[3] is not None and cleaned_peak(hit[1].schedule) <= budget:
            sent.append(_bare_pass(graph, hit[3], budget, deadline))  # (it fits every budget
            done_if_fits(sent[0])  # from that peak up: evict.py)
    variants: tuple[tuple[bool, str], ...] = ((True, "recent"), (True, "cheap"), (False, "recent"))
    few = needed >= LARGE_GRAPH_NODES  # scale mode: one ladder point (see LARGE_LADDER_POINTS)

    def ladder_points(bare_peak: int | None) -> list[int]:
        """The budget ladder's points (none without ``options.cache`` or when too wide),
        given the bare run's peak (None: it stopped)."""
        if not options.cache or too_wide:
            return []
        floor = graph.lb if bare_peak is None else max(graph.lb, int(0.8 * bare_peak))
        return _ladder(budget, floor, sa.peak_bytes)

    def to_beat() -> float:
        return min((c.metrics.cost for c in candidates if c.metrics.peak_bytes <= budget), default=math.inf)

    def fork_from(bare_schedule: Schedule | None) -> _Forked | None:
        """The second process, from the bare run's steps: the memory-limit pass over them
        (unless made here already: ``sent``), then the ladder's lower points (None where it
        cannot start). ``bare_schedule`` None: it makes the bare run first and sends it
        back (:func:`receive_bare`), or ends where it stops (or meets a bug)."""

        import os

        me = os.getpid()  # (this process; the second one's parent)
        with_pass = not sent
        # (where it makes the clean-up of the bare run for its pass, not kept here, it sends
        # it back should the pass not fit: then this process knows it comes)
        cleans[:] = [with_pass and (bare_schedule is None or not clean_kept(bare_schedule))]

        def second(send: Any, cap: Any, note: Any, claim: Any, mine: Any) -> None:
            steps = bare_schedule
            if steps is None:  # the same run as run_only("bare recursion", None) here
                try:
                    steps = recursive_schedule(graph, sep, None, deadline=deadline, memo=memo)[0]
                except RecursionStopped as exc:
                    send({"kind": "bare", "why": str(exc)})
                    return
                except RecursionBug:
                    return  # this process makes the run again and meets it
                send({"kind": "bare"}, steps.ops, steps.nodes, aside=True)  # (1.8 MB on grid1000)
            passed = None
            if with_pass:
                clean = cleaned_bare(steps)
                ops, nodes, metrics = _bare_pass_arrays(graph, clean, budget, deadline)
                send({"kind": "pass", "metrics": metrics}, ops, nodes)
                passed = (Schedule(ops, nodes), metrics)
                if cleans[0] and metrics.peak_bytes > budget:  # (the plan may fail: its
                    kept = {"kind": "clean", "metrics": _measure(graph, clean)}  # message
                    send(kept, clean.ops, clean.nodes, aside=True)  # names this peak)
            # the ladder runs start under the cost cap they started under before: that of
            # the budgeted and the bare run, which this process writes on the shared page,
            # then the bare peak (measured there by now: it takes less than this pass);
            # should this process die first (killed), the wait ends with it, not never
            while note() < 0:
                if os.getppid() != me:
                    return
                time.sleep(0.001)
            bare_peak = note()
            points = ladder_points(bare_peak)
            if few:
                points = points[:LARGE_LADDER_POINTS]
            # the ladder runs of the lower points, lowest first, while this process works
            # down from the top: each one's outcome lands in ladder_runs, as if it had run
            # here (the cache-only run too, where the point is not below the bare peak: it
            # runs here where no prefetch run fits the point)
            jobs = [(p, e, ev) for p in reversed(points[1:]) for e, ev in variants if e or p >= bare_peak]
            # (a run this process has started, it finishes: it goes down the same jobs in
            # the opposite order and writes on the shared page which one it is at)
            for point, eager, evict in jobs:
                code = _job_code(point, eager, evict)
                if (id(sep), point, eager, evict) in ladder_runs or _started(mine(), code):
                    continue
                claim(code)
                if _started(mine(), code):  # (it started there meanwhile: should it wait
                    claim(-1)  # on the claim, a message wakes it)
                    send({"kind": "unclaimed"})
                    continue
                max_cost = cap()
                try:
                    run, _ = recursive_schedule(
                        graph, sep, point - graph.fixed_mem, cache=True, eager=eager, evict=evict,
                        max_cost=max_cost, deadline=deadline, memo=memo, stop_above=above,
                    )  # fmt: skip
                    job = {"kind": "run", "point": point, "eager": eager, "evict": evict}
                    send({**job, "metrics": _measure(graph, run)}, run.ops, run.nodes)
                except RecursionStopped as exc:
                    why = str(exc)
                    if why != "time limit":
                        job = {"kind": "run", "point": point, "eager": eager, "evict": evict, "why": why}
                        send({**job, "cap": max_cost if why == "cannot win" else None})
                except RecursionBug:
                    continue  # this process meets it again and counts it
            # no ladder run left: the keep moves over the pass, which this process makes
            # last where the pass is the cheapest candidate (only then: it fits and costs no
            # more than the cap, the cheapest other candidate's cost); sent for it to use
            if passed is not None and above is None and passed[1].recomputations and passed[1].peak_bytes <= budget:
                if passed[1].cost <= cap():
                    from remat_cli.algorithms.improve import improve_plan

                    claim(_KEEPING)
                    imp = improve_plan(graph, passed[0], budget, deadline=deadline)
                    kept = {"kind": "kept", "improved": imp.improved, "metrics": imp.metrics}
                    send(kept, *((imp.schedule.ops, imp.schedule.nodes) if imp.improved else ()))

        return _Forked.start(second)

    def receive_bare() -> tuple[Schedule | None, str]:
        """The bare run the second process made (its first message), as :func:`run_only`
        returns it; made here where none came (the second process ended: it met a bug,
        which this run meets again, or it was killed). Its later messages are kept for
        :func:`absorb`."""
        assert forked is not None
        got = forked.messages(wait=True)
        if got and got[0][0]["kind"] == "bare":
            forked.held.extend(got[1:])
            msg, schedule = got[0]
            return schedule, "" if schedule is not None else msg["why"]
        try:
            return recursive_schedule(graph, sep, None, deadline=deadline, memo=memo)[0], ""
        except RecursionStopped as exc:
            return None, str(exc)

    def run_ahead() -> None:
        """While the second process makes the bare run: the ladder's top runs, its prefetch
        ones from the top down, each kept in ladder_runs, where the ladder finds it (and
        books it as it books a run it makes). Each is capped at the
        best fitting cost so far among the candidates and these runs, which is no lower
        than the cap the ladder asks for it then (caps only fall; the points are those of
        the floor LB: the bare peak only raises the floor), so the ladder reuses each
        exactly; a run that stops at its work limit is not kept (under a lower cap it
        might stop as one that cannot win)."""
        assert forked is not None
        best = to_beat()
        for point in ladder_points(None):
            for eager, evict in variants:
                if not eager:
                    continue  # (whether it runs depends on the bare peak)
                if best <= sa.base_cost or _past(deadline) or _bare_arrived(forked):
                    return
                key = (id(sep), point, eager, evict)
                kept = ladder_runs.get(key)
                if kept is None or kept[0] is not sep:  # (no set_mine: the point may be below
                    cap = best * (1 + 1e-9)  # the floor, and the ladder's other runs to come)
                    try:
                        run, _ = recursive_schedule(
                            graph, sep, point - graph.fixed_mem, cache=True, eager=eager, evict=evict,
                            max_cost=cap, deadline=deadline, memo=memo,
                        )  # fmt: skip
                        kept = (sep, _Attempt(run, _measure(graph, run), "run ahead"), None, None)
                    except RecursionStopped as exc:
                        if str(exc) != "cannot win":
                            return
                        kept = (sep, None, cap, "cannot win")
                    except RecursionBug:
                        return  # (the ladder meets it again)
                    keep_run(key, *kept[1:])
                run = kept[1]
                if run is not None and run.metrics.peak_bytes <= budget:
                    best = min(best, run.metrics.cost)

    # standalone, on PARALLEL_NEEDED nodes or more, a second process makes the bare run's
    # memory-limit pass and the ladder's lower points. Below LARGE_GRAPH_NODES it starts
    # before the bare recursion, makes it, sends its steps back and goes on to its clean-up
    # and pass (the longest path on grid1000), while this process makes the budgeted run,
    # then measures the bare one: the same runs, booked in the same order. On larger graphs
    # (nn10000: this process's work copy-on-write under a live child cost more than it
    # gained at load 2) it starts once both are made here, as before
    forkable = options.memlimit and context.parallel and needed >= PARALLEL_NEEDED and _Forked.possible()
    early = forkable and not few
    ahead: tuple[Schedule | None, str] | None = None
    forked: _Forked | None = None
    cleans: list[bool] = [False]  # the second process sends its clean-up of the bare run back
    late_end: list[bool | None] = [None]  # past the deadline before waiting for that clean-up
    awaited = False  # the bare run comes from the second process (receive_bare)
    if early and hit[1] is None and hit[2] is None:
        forked = fork_from(None)
        if forked is None:
            ahead = run_only("bare recursion", None)
        else:
            awaited = True
            if progress is not None:
                progress(tried[0], 0, Phrase("{}: {}", ("treewidth" if kind.startswith("tree") else "pathwidth", "bare recursion")))
            tried[0] += 1  # (as run_only counts it)
    elif early and hit[1] is not None:
        forked = fork_from(hit[1].schedule)
    if fit_only and forked is not None and hit[1] is not None:
        # a fit probe's ladder runs go uncapped until a candidate fits (and then it ends):
        # with the bare peak known, the second process starts on them at once
        forked.set_note(hit[1].metrics.peak_bytes)
    first: _Attempt | None = None  # the cacheless budgeted run
    try:
        if not too_wide:
            first = attempt("budgeted recursion", budget - graph.fixed_mem, cache=False, stop_over=True)
            if first is not None:
                candidates.append(first)
                done_if_fits(first)
        if awaited:
            if forked is not None and first is not None and first.metrics.peak_bytes <= budget:
                run_ahead()  # (where the budgeted run fits, the ladder's top points likely do)
            ahead = receive_bare()
            if ahead[0] is None and forked is not None:  # stopped: no second process, as
                forked.stop()  # where this process made the run and it stopped
                forked = None
        bare_run = bare_attempt(ahead)
        done_if_fits(bare_run)
    except BaseException:
        if forked is not None:
            forked.stop()
        raise
    bare = None if bare_run is None else bare_run.metrics
    if bare_run is not None:
        info["bare peak (bytes)"] = bare_run.metrics.peak_bytes
        candidates.append(bare_run)
    points = ladder_points(None if bare is None else bare.peak_bytes)
    if len(points) > LARGE_LADDER_POINTS and few:
        info["budget ladder"] = Phrase(
            "{} of {} points, prefetch with recent-first eviction only: a graph of {} needed nodes or more",
            (LARGE_LADDER_POINTS, len(points), LARGE_GRAPH_NODES),
        )
        points = points[:LARGE_LADDER_POINTS]
        variants = ((True, "recent"), (False, "recent"))  # cheap-first eviction left out too
    if forkable and not early and bare_run is not None:
        forked = fork_from(bare_run.schedule)
    if forked is not None and bare is not None:  # (forked: the bare run finished, so it is measured)
        forked.set_cap(to_beat() * (1 + 1e-9))
        forked.set_note(bare.peak_bytes)

    def absorb(wait: bool = False, ahead: bool = False) -> None:
        """Keep what the second process has sent: ladder runs in ladder_runs (where this
        process has none for the key), the bare run's pass in ``sent`` (with ``wait``, at
        least one message, waiting until the deadline at most; with ``ahead`` too, the pass
        over the cheapest candidate so far is made first: :func:`polished_now`)."""
        if forked is None:
            return
        if wait and idle[0] is not None and to_beat() < math.inf:  # (a plan that fits is held)
            work, idle[0] = idle[0], None
            work.make()  # the caller's work (RunContext.idle), done where this process would wait
        if wait and ahead and options.memlimit and not fit_only:
            polished_now()
        for msg, schedule in forked.messages(wait, deadline):
            metrics = None if msg.get("metrics") is None else Metrics(**msg["metrics"])
            if msg["kind"] == "pass":
                sent.append(_Attempt(schedule, metrics, _BARE_PASS))
                done_if_fits(sent[-1])
                continue
            if msg["kind"] == "kept":  # the keep moves over the pass (improved, schedule, metrics)
                pass_kept[:] = [msg["improved"], schedule, metrics]
                continue
            if msg["kind"] == "clean":  # its clean-up of the bare run (schedule, metrics)
                given[:] = [schedule, metrics]
                continue
            if msg["kind"] != "run":  # (a claim given up)
                continue
            key = (id(sep), msg["point"], msg["eager"], msg["evict"])
            if key in ladder_runs:
                continue
            if msg.get("why") == OVER_BUDGET:  # this plan's budget only: not kept on the graph
                over_budget.add(key)
                continue
            if schedule is not None:
                keep_run(key, _Attempt(schedule, metrics, "second process"), None, None)
            else:
                keep_run(key, None, msg["cap"], msg["why"])

    improved: tuple[_Attempt, Any] | None = None  # keep moves made while the pass came: (over which, outcome)
    pass_kept: list[Any] = []  # the keep moves over the pass, made by the second process
    bare_pass: _Attempt | None = None  # (its pass, once in)
    ahead_polish: list[Any] = []  # the pass over the cheapest candidate, made ahead: (over which, its outcome)

    def polished_now() -> list[_Attempt]:
        """:func:`_polished_best` of the candidates now: the one made ahead where it is
        over the same cheapest candidate (the same input, so the same outcome), else made
        here and kept. Made ahead where this process waits on a ladder run the second one
        is making at the end of the ladder (grid1000 0.5x: 10-15 ms), it is then ready;
        that run, like every run below the top points there, stops as one that cannot win."""
        base = _cheapest(candidates, budget)
        if not ahead_polish or ahead_polish[0] is not base:
            ahead_polish[:] = [base, _polished_best(graph, candidates, budget, deadline)]
        return ahead_polish[1]

    try:
        discarded = 0

        def _fits_point(label: Phrase, point: int, eager: bool, evict: str) -> bool:
            """Whether a ladder run stopped under a cost cap fits its point: redone uncapped
            (a candidate then, as it would have been uncapped; costlier than the best)."""
            nonlocal discarded
            absorb()
            try:
                run = ladder_attempt(label, point, eager, evict, math.inf)
            except RecursionBug:
                discarded += 1
                return False
            if run is None:
                return False
            candidates.append(run)
            done_if_fits(run)
            return run.metrics.peak_bytes <= point

        if points:
            for point in points:
                if to_beat() <= sa.base_cost:
                    break  # nothing can be cheaper than computing each node once
                if deadline is not None and time.perf_counter() > deadline:
                    stopped.append(Phrase("{} ({})", ("the rest of the budget ladder", "time limit")))
                    break
                fitted = False
                # every run is capped at the best fitting cost so far (a costlier run cannot
                # win); a capped prefetch run that stops leaves unknown whether it fits its
                # point, which decides only whether the cache-only run is a candidate: that is
                # settled (the stopped runs redone uncapped) only if the cache-only run finishes
                # under its cap, so the candidates that can win are those of uncapped runs
                unknown: list[tuple[Phrase, bool, str]] = []
                for eager, evict in variants:
                    if not eager and (fitted or (bare is not None and point < bare.peak_bytes)):
                        break  # the cache-only run only where no prefetch run fits the point
                    label = Phrase(
                        "budgeted recursion with cache ({} evicted first){} at {}",
                        (evict, " and prefetch" if eager else "", Fact(point, "bytes")),
                    )
                    cap = to_beat() * (1 + 1e-9)
                    was_pruned = pruned[0]
                    if forked is not None:
                        forked.set_cap(cap)
                        forked.set_mine(_job_code(point, eager, evict))
                        absorb()
                    try:
                        run = ladder_attempt(label, point, eager, evict, cap)
                    except RecursionBug:  # an internal error in a refinement: never let it
                        discarded += 1  # cost a plan; the tests require this to stay 0
                        continue
                    if run is None:
                        if eager and pruned[0] > was_pruned:
                            unknown.append((label, eager, evict))
                        continue
                    if not eager and unknown:
                        fitted = any(_fits_point(lab, point, e, ev) for lab, e, ev in unknown)
                        if fitted:
                            break  # a prefetch run fits the point: no cache-only run here
                    candidates.append(run)
                    done_if_fits(run)
                    fitted = fitted or run.metrics.peak_bytes <= point
        if pruned[0]:
            info["runs stopped once costlier than the best"] = pruned[0]
        if stopped:
            shown = stopped[:3]
            more = "; …" if len(stopped) > 3 else ""
            info["stopped runs"] = Phrase("{}: " + "; ".join("{}" for _ in shown) + more, (len(stopped), *shown))
        if options.memlimit:  # off only to test the monotone part on its own
            polished: list[_Attempt] | None = None
            if forked is not None and not sent:
                # while the pass over the bare run comes: the pass over the cheapest candidate
                # (it does not depend on the other), and should it still not have come, the
                # keep moves over the cheapest so far (used where that one is still the best)
                polished = polished_now()
                absorb()
                if not sent and not forked.ended:
                    ahead_best = _cheapest(candidates + polished, budget)
                    if ahead_best is not None and ahead_best.metrics.recomputations:
                        from remat_cli.algorithms.improve import improve_plan

                        improved = (ahead_best, improve_plan(graph, ahead_best.schedule, budget, deadline=deadline))
            while forked is not None and not sent and not forked.ended and not _past(deadline):
                absorb(wait=True)
            if forked is not None:  # its other ladder runs are not needed any more: it takes
                forked.set_mine(0)  # none (all started here), and makes the keep moves over its pass
            bare_pass = sent[0] if sent else None  # (its clean-up stays there)
            # past the deadline the bare run's pass is not made here (its clean-up alone is
            # O(steps): 0.3 s on grid1000 at its lower bound)
            late = _past(deadline)
            clean = None if bare_run is None or bare_pass is not None or late else cleaned_bare(bare_run.schedule)
            if polished is None and ahead_polish:  # (made ahead: reused where it is still the one)
                polished = polished_now()
            for run in _memlimit_candidates(graph, candidates, clean, budget, bare_pass, deadline, polished):
                candidates.append(run)
                done_if_fits(run)
            if forked is not None and bare_pass is not None and _cheapest(candidates, budget) is bare_pass:
                absorb()  # the keep moves over the pass: the second process's, where it makes them
                while not pass_kept and forked.claimed() == _KEEPING and not forked.ended and not _past(deadline):
                    absorb(wait=True)
            if (
                forked is not None and cleans[0] and bare_pass is not None and bare_pass.metrics.peak_bytes > budget
                and _cheapest(candidates, budget) is None
            ):  # fmt: skip
                # no plan: the message names the peak of the bare run cleaned up, which the
                # second process made for its pass and sends right after it (a measure
                # there), instead of the clean-up and its measure again here (10-60 ms); the
                # time limit is looked at before this wait, where it was looked at before
                late_end[0] = _past(deadline)
                while not given and not forked.ended and not _past(deadline):
                    absorb(wait=True)
    finally:
        if forked is not None:
            forked.stop()
    best = _cheapest(candidates, budget)
    if best is None:
        if bare_run is None:
            least = sa.peak_bytes
            why = "its recursion stopped at its work or time limit; store-all"
        elif (_past(deadline) if late_end[0] is None else late_end[0]) and not clean_kept(bare_run.schedule):
            least = min(bare_run.metrics.peak_bytes, sa.peak_bytes)  # a candidate: it fits that
            why = "its smallest plan found by its time limit (the bare recursion)"
        else:
            # the memory-limit pass over the bare recursion fits every budget at or above the
            # peak of the bare recursion cleaned up (evict.py), which is at most the bare peak
            least = min(cleaned_peak(bare_run.schedule), sa.peak_bytes)
            why = "its smallest plan (the bare recursion, frees moved to last use)"
        raise NoPlanError(
            f"{kind} cannot fit budget {fmt_bytes_exact(budget)}: {why} peaks at {fmt_bytes_exact(least)}",
            min_budget=least,
        )
    if options.memlimit and best.metrics.recomputations:  # drop recomputations the budget allows
        from remat_cli.algorithms.improve import improve_plan

        if pass_kept and best is bare_pass:  # (made there from the same schedule: the same moves)
            better, schedule, metrics = pass_kept
        else:
            imp = (
                improved[1]
                if improved is not None and improved[0] is best
                else improve_plan(graph, best.schedule, budget, deadline=deadline)
            )
            better, schedule, metrics = imp.improved, imp.schedule, imp.metrics
        best = _Attempt(schedule, metrics, Phrase("{} + keep moves", (best.label,))) if better else best
    info["mode"] = best.label
    info["candidates tried"] = len(candidates) + unfit[0]
    if discarded:
        info["discarded candidates (internal error)"] = discarded
    return _result(graph, best.schedule, best.metrics, info, started)


def _bare_arrived(forked: _Forked) -> bool:
    """Whether the second process's bare run has come (or it has ended):
    what :func:`receive_bare` waits for (the messages read are kept for it)."""
    forked.held = forked.messages()  # (those held first, then those read now)
    return forked.ended or any(msg["kind"] == "bare" for msg, _ in forked.held)


def _past(deadline: float | None) -> bool:
    """Whether ``deadline`` (a ``time.perf_counter()`` value, or None: none) has passed."""
    return deadline is not None and time.perf_counter() > deadline


def _memlimit_candidates(
    graph: Graph,
    candidates: list[_Attempt],
    bare: Schedule | None,
    budget: int,
    bare_pass: _Attempt | None = None,
    deadline: float | None = None,
    polished: list[_Attempt] | None = None,
) -> list[_Attempt]:
    """twremat's memory-limit pass (:mod:`remat_cli.strategies.evict`) at ``budget`` over the
    bare recursion (what the paper's reference code returns, already cleaned up; None when
    it stopped at a limit; ``bare_pass``: that pass made already, by :func:`_bare_pass`)
    and over the cheapest candidate that fits (the pass never raises a fitting schedule's
    cost or peak; ``polished``: that one made already, by :func:`_polished_best`). Past
    ``deadline`` each pass keeps the rounds it has done."""
    out = []
    if bare_pass is not None:
        out.append(bare_pass)
    elif bare is not None:
        out.append(_bare_pass(graph, bare, budget, deadline))
    return out + (_polished_best(graph, candidates, budget, deadline) if polished is None else polished)


def _polished_best(graph: Graph, candidates: list[_Attempt], budget: int, deadline: float | None = None) -> list[_Attempt]:
    """twremat's memory-limit pass at ``budget`` over the cheapest candidate that fits, where
    it recomputes anything (:func:`_memlimit_candidates`), measured; none where none fits."""
    from remat_cli.strategies.evict import memlimit_pass

    best = _cheapest(candidates, budget)
    if best is not None and best.metrics.recomputations:
        polished = memlimit_pass(graph, best.schedule, budget, deadline=deadline)
        return [_Attempt(polished, _measure(graph, polished), Phrase("{} + memory-limit pass", (best.label,)))]
    return []


def _cheapest(candidates: list[_Attempt], budget: int) -> _Attempt | None:
    """The cheapest of ``candidates`` that fits ``budget`` (ties: the lower peak, then the
    earlier), None where none fits: the plan's choice, and what its passes start from."""
    return min(
        (c for c in candidates if c.metrics.peak_bytes <= budget),
        key=lambda c: (c.metrics.cost, c.metrics.peak_bytes),
        default=None,
    )


def _bare_pass(graph: Graph, clean: Schedule, budget: int, deadline: float | None = None) -> _Attempt:
    """twremat's memory-limit pass at ``budget`` over the bare recursion cleaned up
    (``clean``), measured: what :func:`_memlimit_candidates` adds for the bare run."""
    from remat_cli.strategies.evict import memlimit_pass

    s = memlimit_pass(graph, clean, budget, cleaned=True, deadline=deadline)
    return _Attempt(s, _measure(graph, s), _BARE_PASS)


_BARE_PASS = "bare recursion + memory-limit pass (twremat)"


def _bare_pass_arrays(graph: Graph, clean: Schedule, budget: int, deadline: float | None = None) -> tuple[Any, ...]:
    """:func:`_bare_pass` as its schedule's arrays and metrics, as the second process sends
    it back."""
    run = _bare_pass(graph, clean, budget, deadline)
    return run.schedule.ops, run.schedule.nodes, run.metrics


class _Forked:
    """A forked second process (``os.fork``) that sends messages back through a pipe (each
    a JSON header, then a schedule's two arrays as raw bytes), and reads a shared number (the cost cap this process
    runs its ladder under) from an anonymous shared page. :meth:`start` returns None where
    that does not pay or is not allowed: one core, no fork, a daemon worker (``remat
    batch``), or a process that already runs another one (``auto``'s)."""

    def __init__(self, pid: int, fd: int, shared: Any) -> None:
        self.pid, self.fd, self.shared = pid, fd, shared
        self.buf = b""
        self.ended = False  # the pipe reached its end
        self.held: list[tuple[dict[str, Any], Schedule | None]] = []  # read, not yet handed out
        self.mine = -1  # the ladder run this process is at (set_mine)

    @staticmethod
    def possible() -> bool:
        """Whether :meth:`start` may start one here (fork, two cores, no daemon worker, no
        other process of ours running)."""
        import os
        import sys

        mp = sys.modules.get("multiprocessing")  # imported wherever a worker or auto forked
        if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
            return False
        return mp is None or not (mp.current_process().daemon or mp.active_children())

    @classmethod
    def start(cls, fn: Any) -> _Forked | None:
        """Run ``fn(send, cap, note, claim, mine)`` in a second process: ``send(header, ops, nodes)``
        sends a message back (``header`` a dict of plain values and dataclasses; ``ops``
        and ``nodes`` a schedule's arrays, or none; with ``aside=True`` a thread writes it
        while ``fn`` goes on, for a schedule larger than the pipe holds that this
        process reads only once its own run is made), ``cap()`` reads the number
        :meth:`set_cap` last wrote, ``note()`` the integer :meth:`set_note` last wrote
        (−1 before), ``claim(k)`` says what it works on (:meth:`claimed` reads it),
        ``mine()`` which ladder run this process is at (:meth:`set_mine`; −1 before)."""
        import mmap
        import os
        import struct

        if not cls.possible():
            return None
        shared = mmap.mmap(-1, 32)
        shared[:32] = struct.pack("dqqq", math.inf, -1, -1, -1)
        read, write = os.pipe()
        try:  # room for a ladder run's schedule in the pipe (Linux; best effort)
            import fcntl

            fcntl.fcntl(write, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except (ImportError, OSError):
            pass
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return None
        if pid == 0:  # the second process: compute, send, end without any clean-up
            code = 1
            try:
                import dataclasses
                import json

                os.close(read)

                def plain(value: Any) -> Any:
                    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value.item()

                writing: list[Any] = []  # the thread still writing a message sent aside

                def write_all(view: memoryview) -> None:
                    while view:
                        view = view[os.write(write, view) :]

                def send(header: dict[str, Any], ops: Any = None, nodes: Any = None, aside: bool = False) -> None:
                    steps = -1 if ops is None else len(ops)
                    head = json.dumps({**header, "steps": steps}, default=plain).encode()
                    body = (
                        b""
                        if ops is None
                        else np.ascontiguousarray(ops, np.int8).tobytes() + np.ascontiguousarray(nodes, np.int32).tobytes()
                    )
                    view = memoryview(struct.pack("QQ", len(head), len(body)) + head + body)
                    while writing:  # messages arrive in the order they were sent
                        writing.pop().join()
                    if aside:  # more than the pipe holds may wait for this process's reader
                        import threading

                        writing.append(threading.Thread(target=write_all, args=(view,), daemon=True))
                        writing[-1].start()
                    else:
                        write_all(view)

                def claim(value: int) -> None:
                    shared[16:24] = struct.pack("q", value)

                fn(
                    send,
                    lambda: struct.unpack("d", shared[:8])[0],
                    lambda: struct.unpack("q", shared[8:16])[0],
                    claim,
                    lambda: struct.unpack("q", shared[24:32])[0],
                )
                while writing:
                    writing.pop().join()
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        return cls(pid, read, shared)

    def set_cap(self, value: float) -> None:
        import struct

        self.shared[:8] = struct.pack("d", value)

    def claimed(self) -> int:
        """What the second process last said it works on (``claim``; −1: nothing)."""
        import struct

        return struct.unpack("q", self.shared[16:24])[0]

    def set_note(self, value: int) -> None:
        import struct

        self.shared[8:16] = struct.pack("q", value)

    def set_mine(self, code: int) -> None:
        """Say which ladder run (:func:`_job_code`) this process is at, for the second
        process's ``mine()``; only forward in this process's order (:func:`_started`)."""
        import struct

        if not _started(self.mine, code):
            self.mine = code
            self.shared[24:32] = struct.pack("q", code)

    def messages(self, wait: bool = False, until: float | None = None) -> list[tuple[dict[str, Any], Schedule | None]]:
        """The messages that have arrived, as (header, schedule or None) (with ``wait``, at
        least one unless the second process has ended or ``until``, a ``time.perf_counter()``
        value, has passed); a message cut short is dropped."""
        import json
        import os
        import select
        import struct

        out, self.held = self.held, []
        while not self.ended:
            timeout = (None if until is None else max(0.0, until - time.perf_counter())) if wait and not out else 0
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                break
            try:
                chunk = os.read(self.fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                self.ended = True
            self.buf += chunk
            while len(self.buf) >= 16:
                head, body = struct.unpack("QQ", self.buf[:16])
                if len(self.buf) < 16 + head + body:
                    break
                header = json.loads(self.buf[16 : 16 + head])
                steps = header.pop("steps")
                schedule = None
                if steps >= 0:
                    raw = self.buf[16 + head : 16 + head + body]
                    ops = np.frombuffer(raw, np.int8, steps).copy()
                    nodes = np.frombuffer(raw, np.int32, steps, offset=steps).copy()
                    schedule = Schedule(ops, nodes)
                out.append((header, schedule))
                self.buf = self.buf[16 + head + body :]
            if out and not wait:
                continue
            if out:
                break
        return out

    def stop(self) -> None:
        """End the second process (if still running) and reap it; idempotent."""
        import os
        import signal

        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0
            os.close(self.fd)
            self.shared.close()


#: The second process's claim while it makes the keep moves over its pass (no ladder run).
_KEEPING = -2


def _job_code(point: int, eager: bool, evict: str) -> int:
    """A ladder run as one integer, for the second process's claim (:class:`_Forked`)."""
    return 4 * point + (0 if not eager else 1 if evict == "recent" else 2)


#: Where each variant's code (:func:`_job_code`: cache-only 0, recent 1, cheap 2) comes at a
#: point in this process's order (the ladder's ``variants``).
_VARIANT_RANK = (2, 0, 1)


def _started(mine: int, code: int) -> bool:
    """Whether this process, at ladder run ``mine`` (−1: none yet), has come to run ``code``:
    it goes down the points, and at each through ``variants`` in order."""
    if mine < 0:
        return False
    (mp, mv), (cp, cv) = divmod(mine, 4), divmod(code, 4)
    return cp > mp or (cp == mp and _VARIANT_RANK[cv] <= _VARIANT_RANK[mv])


def _ladder(budget: int, floor: int, store_all: int) -> list[int]:
    """The fixed budget ladder at or below ``budget`` at which the cached variant runs,
    highest first.

    Points: store_all × 0.95, 0.90, …, 0.20, then halving again and again down to
    ``floor`` (the caller passes max(LB, 0.8 × the bare recursion's peak): runs far
    below the bare peak do not fit). The points depend on the graph only, not on B, so
    a larger budget sees every point a smaller one saw and the cheapest plan can only
    get cheaper (monotone cost); the cacheless recursion at B itself is monotone by
    construction (docs/algorithms.md).
    """
    points = [int(store_all * (20 - k) / 20) for k in range(1, 17)]  # 0.95 … 0.20
    low = store_all / 5 / 2
    while low >= floor:
        points.append(int(low))
        low /= 2
    return [p for p in points if floor <= p <= budget]


def _measure(graph: Graph, schedule: Schedule) -> Metrics:
    result = simulate(graph, schedule)
    if result.metrics is None:
        raise RecursionBug(f"internal error: the recursion produced an invalid schedule: {result.error}")
    return result.metrics


def unit_peak_values(graph: Graph, schedule: Schedule) -> int:
    """Peak of ``schedule`` (a valid one: measured already) in values: the simulator's peak
    on a unit-size copy of ``graph``, no fixed memory, no workspace. With unit sizes that
    is the most values resident at a compute, the value computed included: a running count
    of computes less frees (numpy; the unit copy of the graph and its replay took 2-4 ms
    on a 1k-node graph for a plan's info)."""
    comp = schedule.ops == COMPUTE
    if not comp.any():
        return 0
    return int(np.cumsum(np.where(comp, 1, -1))[comp].max())


def _result(graph: Graph, schedule: Schedule, metrics: Metrics, info: dict[str, Any], started: float) -> StrategyResult:
    info["peak (values)"] = unit_peak_values(graph, schedule)
    info["schedule seconds"] = round(time.perf_counter() - started, 4)
    return StrategyResult(schedule, info, None)


def _run(graph: Graph, budget: int | None, options: DecompositionOptions, context: RunContext, fit_only: bool = False) -> StrategyResult:
    started = time.perf_counter()
    td = shared_tree_decomposition(graph, context.shared, ("min-degree", "min-fill"), context.deadline)
    sep = shared(context.shared, graph, f"separator tree {id(td)}", lambda: separator_tree(graph, td))
    info_seconds = time.perf_counter() - started
    kind = f"tree ({td.method})"
    return plan_over_separator_tree(graph, sep, budget, options, context, kind=kind, decompose_seconds=info_seconds, fit_only=fit_only)


def _run_fit(graph: Graph, budget: int | None, options: DecompositionOptions, context: RunContext) -> StrategyResult:
    return _run(graph, budget, options, context, fit_only=True)


STRATEGY = Strategy(
    name="treewidth",
    summary="Kumar et al.: tree decomposition (min-fill/min-degree), balanced separator tree, "
    "recursive schedule in O(w log n) values; with a budget it stops recursing where a plain "
    "schedule fits and reuses values while the budget allows.",
    solve=_run,
    uses_budget=True,
    options=DecompositionOptions,
    reference="Kumar, Purohit, Svitkina, Vee, Wang. Efficient Rematerialization for Deep Networks. NeurIPS 2019.",
)

#: treewidth as the search for the smallest budget after a failed plan probes it
#: (planner.py): each probe asks only whether treewidth fits, which is whether any of its
#: candidates does, so it returns the first candidate plan found to fit, unpolished
#: (:func:`plan_over_separator_tree`'s ``fit_only``); where none fits, the plan's error.
FIT_PROBE = replace(STRATEGY, solve=_run_fit)
