"""exact: Checkmate's MILP (solved by HiGHS), proven optimal over all schedules where it can be.

Jain et al., *Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization*
(MLSys 2020), §4. The needed nodes are put in a topological order v_0..v_{T-1}; stage t
ends with the first computation of v_t and may recompute any earlier node before it:

* ``R[t,i]``: v_i is computed in stage t (i ≤ t, ``R[t,t] = 1``);
* ``S[t,i]``: v_i is resident when stage t begins (i < t);
* ``F[t,i,k]``: v_i is freed right after v_k is computed in stage t (v_i an input of v_k,
  or v_k itself), allowed only when v_k is computed, v_i is not kept for stage t+1 and no
  later consumer of v_i is computed in stage t;
* ``U[t,k]``: memory right after v_k's step in stage t.

Dependencies ``R[t,k] ≤ R[t,i] + S[t,i]``, retention ``S[t+1,i] ≤ S[t,i] + R[t,i]``, and
memory ``U[t,k] + workspace(v_k)·R[t,k] ≤ budget − fixed`` exactly as the simulator counts
it (DESIGN §1); the objective is Σ cost·R.

One family of valid inequalities is ours, not Checkmate's, and it is what makes the model
solvable: ``U[t,k] ≥ (mem(v_k) + Σ mem(inputs of v_k))·R[t,k] + Σ_{i ≤ k, v_i not among
those} mem(v_i)·S[t+1,i]``. A value that stage t+1 starts with is resident all through
stage t from its computation on (a carried value cannot be recomputed within the stage),
so it occupies memory at every step k ≥ i. Integer solutions satisfy it anyway; the LP
relaxation did not (it freed fractions of kept values), and with it the root bound on
``sample_graphs/unet_train.json`` at 0.9× rises from +3.14% to +3.69% overhead (optimum
+3.76%), so HiGHS proves optimality in seconds instead of stopping at the time limit
(``scripts/bench_exact.py``). O(T²) binaries; practical for training graphs
of up to about 60 nodes. The solution is turned into a schedule whose frees are taken at
the earliest moment the solution allows, and the simulator's figures are reported.

**What is proven, and over which schedules.** Checkmate's model is narrower than the set
of all schedules: it fixes the order of first computations, and within a stage it computes
each value at most once, in that same order. For the graph's own order its optimum can
exceed the true one (issue 10's 13-node DAG at budget 16: 48 against 45), and solving
every order does not lift the second restriction, so its bounds and "optimal" speak only
for that model. What this strategy reports:

* ``status: optimal`` (``optimal_over: all schedules``) only when the cost is proven least
  over ALL valid schedules within the budget: store-all fits (cost = base cost, which no
  schedule beats), or the exhaustive search of :mod:`remat_cli.strategies.search` (A* over
  resident sets, run when there are at most ``search_nodes`` = 20 needed nodes) finished.
* otherwise ``status: best in Checkmate's model`` when every MILP finished: no schedule of
  the model is cheaper (``optimal_over: fixed order`` with ``order`` the node ids, or
  ``every order`` when all topological orders were solved: at most ``enumerate_nodes`` =
  12 needed nodes and ``max_orders`` = 120 orders); or ``status: time limit`` (or ``not
  proven`` when a MILP solution failed the simulator), with ``optimal_over: nothing
  proven``.
* ``lower_bound`` and ``gap`` are over ALL schedules: the base cost, raised to the search's
  proven bound where it ran (least f = g + h on its open list; proof in that module).
  ``model_bound`` is the MILP's bound, valid only over the model's schedules; an order
  whose solution the simulator rejects contributes the base cost, never nothing.

The cheapest plan of the fast baselines is the starting incumbent: each MILP only looks
for strictly cheaper schedules, so "infeasible" proves the incumbent best in the model,
and the search prunes every state that cannot beat the best plan found.

Needs ``scipy`` (HiGHS): ``pip install 'remat-cli[exact]'``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_cli.errors import InputError, NoPlanError
from remat_cli.graph import Graph
from remat_cli.units import fmt_bytes_exact
from remat_cli.schedule import Schedule, ScheduleBuilder
from remat_cli.simulate import Metrics, simulate
from remat_cli.strategies.base import RunContext, Strategy, StrategyResult
from remat_cli.strategies.search import cheapest_schedule
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan

__all__ = ["STRATEGY", "ExactOptions", "MilpResult", "solve_milp", "lp_lower_bound", "topological_orders"]

INSTALL_HINT = "the exact solver needs scipy (HiGHS): pip install 'remat-cli[exact]'"

# ``optimal_over``: the schedules over which the plan is proven cheapest (report/ words them)
OVER_ALL = "all schedules"
OVER_EVERY_ORDER = "every order"  # Checkmate's model, every order of first computations
OVER_ORDER = "fixed order"  # Checkmate's model, first computations in ``info["order"]``
OVER_NOTHING = "nothing proven"


@dataclass(frozen=True, eq=False)
class MilpResult:
    """One solve: the schedule found (if any), the solver's bounds and status."""

    schedule: Schedule | None
    objective: float | None  # the solver's cost for that schedule
    bound: float | None  # proven lower bound on the cost in this model
    status: str  # "optimal", "time limit", "infeasible", ...
    seconds: float
    peak_var: float | None = None  # when minimising the peak: its value


def _milp():
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix
    except ImportError:  # pragma: no cover - depends on the environment
        raise InputError(INSTALL_HINT) from None
    return milp, LinearConstraint, Bounds, coo_matrix


class _Model:
    """Checkmate's MILP for one topological order, as sparse arrays for scipy's HiGHS."""

    def __init__(self, graph: Graph, order: Sequence[int], limit: float | None, minimise_peak: bool = False) -> None:
        T = len(order)
        pos = {v: p for p, v in enumerate(order)}
        self.order = list(order)
        self.T = T
        self.preds = [[pos[u] for u in graph.pred_lists[v]] for v in order]
        users: list[list[int]] = [[] for _ in range(T)]
        for k in range(T):
            for i in self.preds[k]:
                users[i].append(k)
        self.users = users
        # bytes and costs are scaled to about 1..1000 so that HiGHS's simplex stays
        # well-conditioned (real models have values of 1e8 bytes and 1e12 FLOPs)
        big = max([int(graph.mem[v]) for v in order] + [int(graph.workspace[v]) for v in order] + [1])
        self.mscale = big / 1000.0 if big > 1000 else 1.0
        top = max([float(graph.cost[v]) for v in order] + [0.0])
        self.cscale = top / 1000.0 if top > 1000 else 1.0
        mem = [int(graph.mem[v]) / self.mscale for v in order]
        ws = [int(graph.workspace[v]) / self.mscale for v in order]
        cost = [float(graph.cost[v]) / self.cscale for v in order]
        tri = lambda t: t * (t + 1) // 2  # noqa: E731
        self.r0 = 0
        self.s0 = tri(T)
        self.u0 = self.s0 + tri(T - 1)
        self.f0 = self.u0 + tri(T)
        fidx: dict[tuple[int, int, int], int] = {}
        nxt = self.f0
        for t in range(T):
            for k in range(t + 1):
                for i in (*self.preds[k], k):
                    fidx[(t, i, k)] = nxt
                    nxt += 1
        self.fidx = fidx
        self.pvar = nxt if minimise_peak else None
        nvar = nxt + (1 if minimise_peak else 0)
        self.nvar = nvar
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        lo: list[float] = []
        hi: list[float] = []

        def row(entries: list[tuple[int, float]], a: float, b: float) -> None:
            r = len(lo)
            for c, v in entries:
                rows.append(r)
                cols.append(c)
                vals.append(v)
            lo.append(a)
            hi.append(b)

        R, S, U = self.R, self.S, self.U
        inf = math.inf
        for t in range(T):
            for k in range(t + 1):
                for i in self.preds[k]:  # inputs resident or computed earlier in the stage
                    row([(R(t, k), 1.0), (R(t, i), -1.0), (S(t, i), -1.0)], -inf, 0.0)
            if t + 1 < T:
                for i in range(t + 1):  # keep only what was resident or computed
                    entries = [(S(t + 1, i), 1.0), (R(t, i), -1.0)]
                    if i < t:
                        entries.append((S(t, i), -1.0))
                    row(entries, -inf, 0.0)
            for i in range(t):
                row([(R(t, i), 1.0), (S(t, i), 1.0)], -inf, 1.0)
            # memory after each step, and the peak at each compute
            row([(U(t, 0), 1.0), (R(t, 0), -mem[0])] + [(S(t, i), -mem[i]) for i in range(t)], 0.0, 0.0)
            for k in range(1, t + 1):
                entries = [(U(t, k), 1.0), (U(t, k - 1), -1.0), (R(t, k), -mem[k])]
                entries += [(fidx[(t, i, k - 1)], mem[i]) for i in (*self.preds[k - 1], k - 1)]
                row(entries, 0.0, 0.0)
            for k in range(t + 1):
                entries = [(U(t, k), 1.0), (R(t, k), ws[k])]
                if minimise_peak:
                    row(entries + [(nvar - 1, -1.0)], -inf, 0.0)
                else:
                    row(entries, -inf, float(limit) / self.mscale)
            # while v_k is computed, it and its inputs are resident, and so is every value
            # v_i (i ≤ k) that stage t+1 starts with: carried through stage t (it cannot be
            # recomputed there) or computed at i ≤ k and held to the end of the stage
            for k in range(t + 1):
                near = (*self.preds[k], k)
                need = mem[k] + sum(mem[i] for i in self.preds[k])
                entries = [(U(t, k), 1.0), (R(t, k), -need)]
                if t + 1 < T:
                    entries += [(S(t + 1, i), -mem[i]) for i in range(k + 1) if i not in near]
                row(entries, 0.0, inf)
            # frees: only after a compute, not kept, no later consumer in this stage
            for k in range(t + 1):
                for i in (*self.preds[k], k):
                    f = fidx[(t, i, k)]
                    row([(f, 1.0), (R(t, k), -1.0)], -inf, 0.0)
                    if t + 1 < T:
                        row([(f, 1.0), (S(t + 1, i), 1.0)], -inf, 1.0)
                    for j in users[i]:
                        if k < j <= t:
                            row([(f, 1.0), (R(t, j), 1.0)], -inf, 1.0)
        self.rows, self.cols, self.vals, self.lo, self.hi = rows, cols, vals, lo, hi
        c = np.zeros(nvar)
        for t in range(T):
            for i in range(t + 1):
                c[R(t, i)] = cost[i]
        if minimise_peak:
            c *= 1e-9  # a cheap schedule among the lowest-peak ones, peak first
            c[nvar - 1] = 1.0
        self.c = c
        lb = np.zeros(nvar)
        ub = np.ones(nvar)
        ub[self.u0 : self.f0] = inf
        for t in range(T):
            lb[R(t, t)] = 1.0
        if minimise_peak:
            ub[nvar - 1] = inf
        self.lb, self.ub = lb, ub
        integrality = np.zeros(nvar)
        integrality[: self.u0] = 1
        self.integrality = integrality

    def R(self, t: int, i: int) -> int:
        return self.r0 + t * (t + 1) // 2 + i

    def S(self, t: int, i: int) -> int:
        return self.s0 + t * (t - 1) // 2 + i

    def U(self, t: int, k: int) -> int:
        return self.u0 + t * (t + 1) // 2 + k

    def solve(self, time_limit: float, relax: bool = False, cutoff: float | None = None):
        """HiGHS through scipy; ``cutoff`` adds ``cost ≤ cutoff`` (prunes with a known plan)."""
        milp, LinearConstraint, Bounds, coo_matrix = _milp()
        A = coo_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.lo), self.nvar)).tocsr()
        constraints = [LinearConstraint(A, np.asarray(self.lo), np.asarray(self.hi))]
        if cutoff is not None:
            constraints.append(LinearConstraint(self.c.reshape(1, -1), -np.inf, cutoff / self.cscale))
        return milp(
            self.c,
            constraints=constraints,
            integrality=np.zeros(self.nvar) if relax else self.integrality,
            bounds=Bounds(self.lb, self.ub),
            options={"time_limit": max(0.1, float(time_limit)), "disp": False, "mip_rel_gap": 1e-7},
        )

    def schedule(self, x: np.ndarray) -> Schedule:
        """The solution's schedule: stage by stage, computes in order, frees as early as allowed."""
        T = self.T
        on = x > 0.5
        b = ScheduleBuilder()
        resident: set[int] = set()
        for t in range(T):
            computed = [k for k in range(t + 1) if on[self.R(t, k)]]
            used = {i for k in computed for i in self.preds[k]}
            keep_next = {i for i in range(t + 1) if t + 1 < T and on[self.S(t + 1, i)]}
            for i in sorted(resident):
                if not on[self.S(t, i)] or (i not in used and i not in keep_next):
                    b.free(self.order[i])
                    resident.discard(i)
            for n_, k in enumerate(computed):
                if k in resident:  # the model never asks for it; be safe
                    continue
                b.compute(self.order[k])
                resident.add(k)
                later = computed[n_ + 1 :]
                for i in (*self.preds[k], k):
                    if i in resident and i not in keep_next and not any(i in self.preds[j] for j in later):
                        b.free(self.order[i])
                        resident.discard(i)
        return b.build()


def _status(res) -> str:
    return {0: "optimal", 1: "time limit", 2: "infeasible", 3: "unbounded"}.get(res.status, f"status {res.status}")


def solve_milp(
    graph: Graph,
    budget: int,
    order: Sequence[int] | None = None,
    time_limit: float = 60.0,
    cutoff: float | None = None,
) -> MilpResult:
    """Checkmate's MILP for ``order`` (default: the graph's topological order) within ``budget``.

    With ``cutoff`` only schedules costing at most that much are sought: "infeasible" then
    proves that none exists in this model.
    """
    order = list(graph.needed_nodes.tolist() if order is None else order)
    started = time.perf_counter()
    model = _Model(graph, order, budget - graph.fixed_mem)
    res = model.solve(time_limit, cutoff=cutoff)
    elapsed = time.perf_counter() - started
    schedule = model.schedule(res.x) if res.x is not None else None
    bound = getattr(res, "mip_dual_bound", None)
    if res.status == 0 and res.x is not None:
        bound = float(res.fun) if bound is None or not math.isfinite(bound) else bound
    if bound is not None:
        bound *= model.cscale
    return MilpResult(
        schedule,
        None if res.x is None else float(res.fun) * model.cscale,
        None if bound is None or not math.isfinite(bound) else float(bound),
        _status(res),
        elapsed,
    )


def lp_lower_bound(graph: Graph, budget: int, order: Sequence[int] | None = None, time_limit: float = 60.0) -> float | None:
    """The LP relaxation's optimum: a lower bound on the cost of any schedule within
    ``budget`` in the MILP's model (first computations in ``order``). None if the LP is
    infeasible or not solved in time. Polynomial; usable where the MILP is too large."""
    order = list(graph.needed_nodes.tolist() if order is None else order)
    model = _Model(graph, order, budget - graph.fixed_mem)
    res = model.solve(time_limit, relax=True)
    if res.status != 0 or res.x is None:
        return None
    return max(float(res.fun) * model.cscale, graph.base_cost)


def min_peak(graph: Graph, order: Sequence[int] | None = None, time_limit: float = 60.0) -> int | None:
    """Smallest budget at which the MILP has a solution (fixed memory included), or None."""
    order = list(graph.needed_nodes.tolist() if order is None else order)
    model = _Model(graph, order, None, minimise_peak=True)
    res = model.solve(time_limit)
    if res.x is None:
        return None
    return graph.fixed_mem + int(math.ceil(res.x[model.pvar] * model.mscale - 1e-6))


def topological_orders(graph: Graph, limit: int) -> list[list[int]] | None:
    """Every topological order of the needed nodes, or None if there are more than ``limit``."""
    needed = graph.needed_nodes.tolist()
    preds = graph.pred_lists
    out: list[list[int]] = []

    def walk(done: list[int], placed: set[int]) -> Iterator[list[int]]:
        if len(done) == len(needed):
            yield list(done)
            return
        for v in needed:
            if v not in placed and all(u in placed for u in preds[v]):
                placed.add(v)
                done.append(v)
                yield from walk(done, placed)
                done.pop()
                placed.discard(v)

    for order in walk([], set()):
        out.append(order)
        if len(out) > limit:
            return None
    return out


def _heuristic(graph: Graph, budget: int) -> tuple[Schedule, Metrics] | None:
    """The cheapest plan of the registered incumbents (``Strategy.incumbent``, the fast
    budget-driven baselines): an incumbent and a cutoff."""
    from remat_cli.strategies import STRATEGIES  # the registry imports this module

    best = None
    for strat in sorted((s for s in STRATEGIES.values() if s.incumbent > 0), key=lambda s: s.incumbent):
        try:
            schedule = strat.run(graph, budget).schedule
        except NoPlanError:
            continue
        m = simulate(graph, schedule).metrics
        if m is not None and m.peak_bytes <= budget and (best is None or m.cost < best[1].cost):
            best = (schedule, m)
    return best


#: Seconds the solver may take when the run sets no ``RunContext.time_limit``.
DEFAULT_TIME_LIMIT = 60.0


@dataclass(frozen=True)
class ExactOptions:
    """``exact``'s options: the MILP is refused above ``milp_nodes`` needed nodes (the LP
    bound is then computed with ``lp_bound``); every topological order is solved up to
    ``enumerate_nodes`` needed nodes and ``max_orders`` orders; the exhaustive search runs
    up to ``search_nodes`` needed nodes and ``search_states`` states. The time limit is
    the run's (``RunContext.time_limit``, default :data:`DEFAULT_TIME_LIMIT`)."""

    milp_nodes: int = 300
    lp_bound: bool = False
    enumerate_nodes: int = 12
    max_orders: int = 120
    search_nodes: int = 20
    search_states: int = 200_000


def _run(graph: Graph, budget: int | None, options: ExactOptions, context: RunContext) -> StrategyResult:
    _milp()  # fail early, with the install hint, when scipy is missing
    time_limit = float(DEFAULT_TIME_LIMIT if context.time_limit is None else context.time_limit)
    started = time.perf_counter()
    base = graph.base_cost
    fits = store_all_if_fits(graph, budget)
    if fits is not None:  # cost = base cost, a bound for all
        info = {"status": "optimal (store-all fits)", "optimal_over": OVER_ALL, "lower_bound": base, "gap": 0.0}
        return StrategyResult(fits.schedule, info)
    assert budget is not None
    store_metrics = store_all_plan(graph).metrics
    needed = int(graph.needed.sum())
    max_nodes = int(options.milp_nodes)
    if needed > max_nodes:
        lp = lp_lower_bound(graph, budget, time_limit=time_limit) if options.lp_bound else None
        raise NoPlanError(
            f"exact: {needed} nodes is too many for the MILP (limit {max_nodes}, option milp_nodes)"
            + (f"; LP lower bound (for the graph's order of first computations): {lp:g}" if lp is not None else ""),
            min_budget=None,
        )
    all_orders = None
    if needed <= int(options.enumerate_nodes):
        all_orders = topological_orders(graph, int(options.max_orders))
    orders = all_orders or [graph.needed_nodes.tolist()]
    integral = bool(np.all(graph.cost[graph.needed] == np.round(graph.cost[graph.needed])))
    use_search = needed <= int(options.search_nodes)
    best = _heuristic(graph, budget)
    source = "baselines" if best is not None else None
    # on small graphs the search proves the optimum over all schedules, often at once;
    # where it stops early it leaves a bound, and the MILP looks for a better plan
    search = None
    if use_search:
        search = cheapest_schedule(
            graph,
            budget,
            upper=None if best is None else best[1].cost,
            max_states=int(options.search_states),
            deadline=started + time_limit / 2,
        )
        if search.schedule is not None:
            m = simulate(graph, search.schedule).metrics
            assert m is not None and m.peak_bytes <= budget, "exact: the search's schedule is invalid"
            if best is None or (m.cost, m.peak_bytes) < (best[1].cost, best[1].peak_bytes):
                best, source = (search.schedule, m), "search"
    milp_orders = orders
    if search is not None and search.complete:
        orders = []  # nothing left to prove
    deadline = started + time_limit
    bounds: list[float] = []  # per order: a bound over the schedules of Checkmate's model
    finished = True
    rejected = False  # a MILP solution failed the simulator
    for order in orders:
        left = deadline - time.perf_counter()
        if left <= 0:
            finished = False
            bounds.append(base)
            continue
        if best is not None:  # look only for strictly cheaper schedules
            cutoff = best[1].cost - 0.5 if integral else best[1].cost * (1 - 1e-9) - 1e-9
        else:
            cutoff = None
        res = solve_milp(graph, budget, order, left, cutoff)
        if res.schedule is not None:
            m = simulate(graph, res.schedule).metrics
            if m is None or m.peak_bytes > budget:  # the solver's tolerance on scaled bytes
                finished, rejected = False, True  # nothing proven for this order: base cost
                bounds.append(base)
                continue
            if best is None or (m.cost, m.peak_bytes) < (best[1].cost, best[1].peak_bytes):
                best, source = (res.schedule, m), "MILP"
        if res.status == "optimal":
            bounds.append(res.objective if res.objective is not None else base)
        elif res.status == "infeasible":
            bounds.append(best[1].cost if cutoff is not None and best is not None else math.inf)
        else:
            finished = False
            bounds.append(res.bound if res.bound is not None else base)
    if best is None:
        proven_none = search is not None and search.complete
        if finished or proven_none:
            peaks = []
            for o in milp_orders[:4]:
                left = max(1.0, started + 2 * time_limit - time.perf_counter())  # at most one more limit
                p = min_peak(graph, o, left)
                if p is not None:
                    peaks.append(p)
            mb = min(peaks) if peaks else store_metrics.peak_bytes
            what = (
                "no schedule fits budget {} (proven over all schedules)"
                if proven_none
                else "no schedule of Checkmate's model (fixed order of first computations) fits budget {}"
            ).format(fmt_bytes_exact(budget))
            raise NoPlanError(
                f"exact: {what}; the smallest budget it can meet is {fmt_bytes_exact(mb)}",
                min_budget=mb,
            )
        raise NoPlanError(f"exact: no schedule found within the time limit of {time_limit:g} s (--time-limit)")
    schedule, m = best
    proven = search is not None and search.complete
    # only bounds over ALL schedules: the base cost, and what the search proved
    lower = m.cost if proven else max(base, search.lower_bound if search is not None else base)
    lower = min(lower, m.cost)
    model_bound = min(m.cost, max(base, min(bounds))) if bounds else base
    if proven:
        status, over = "optimal", OVER_ALL
    elif finished:
        status, over = "best in Checkmate's model", OVER_EVERY_ORDER if all_orders else OVER_ORDER
    else:
        status, over = ("not proven (a MILP solution failed the simulator)" if rejected else "time limit"), OVER_NOTHING
    info: dict[str, Any] = {
        "status": status,
        "optimal_over": over,
        "lower_bound": round(lower, 9),
        "gap": 0.0 if m.cost <= 0 else round(max(0.0, (m.cost - lower) / m.cost), 9),
        "best_from": source,
        "solver": ("exhaustive search" if proven and not bounds else "HiGHS (scipy.optimize.milp)")
        + (" and exhaustive search" if use_search and bounds else ""),
    }
    if over == OVER_ORDER:
        info["order"] = [graph.ids[v] for v in orders[0]]
    if not proven:
        info["model_bound"] = round(model_bound, 9)
    if search is not None:
        info["search_states"] = search.states
    return StrategyResult(schedule, info)


STRATEGY = Strategy(
    name="exact",
    summary="Exhaustive search that, when it finishes (graphs of up to 20 needed nodes), "
    "proves the plan optimal over all schedules; else Checkmate's MILP (HiGHS, time limit) "
    "for a fixed order of first computations. Says over which schedules the plan is best; "
    "its lower bound and gap hold for all schedules.",
    solve=_run,
    uses_budget=True,
    fast=False,
    reference="Jain et al. 2020, Checkmate (MLSys) §4",
    options=ExactOptions,
)
