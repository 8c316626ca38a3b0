"""Budget searches and sweeps: the smallest budget a strategy meets, and the trade-off.

Computation only (frozen dataclasses out); ``remat_cli.report`` renders the results.

**The smallest budget**, found by bisection over bytes.

One search serves ``plan`` (the smallest budget named when no plan fits), ``tradeoff``
(its "smallest budget each strategy meets") and ``check``, so the three commands print
the same figure for the same graph and strategy.

Every probe is a real plan made by :func:`remat_cli.planner.make_plan`, hence replayed by
the simulator; the reported budget is one a plan was actually found for. The search:

* starts from the facts it has: below the lower bound LB no schedule fits (proven, §1 of
  DESIGN), and a budget-aware strategy is expected to fit the store-all peak;
* bisects over the grid LB + k * tolerance, where the tolerance is 0.1% of the
  store-all peak, at least 1 byte (``tolerance_bytes``), between the largest grid budget
  probed without a plan and the smallest probed with one, until they are neighbours;
  a budget a failing strategy says it meets is probed first (snapped to the grid), and
  where it fits, for a monotone strategy or ``auto``, the grid point just below it next
  (where that fails, the search is over);
* then probes the found plan's own peak once, as a budget.

It **assumes** that a strategy that fits budget B fits every larger budget (monotone).
``tests/test_sweep.py`` checks that on generated graphs for every fast strategy; where it
does not hold, the figure is still a budget a plan was found for and a smaller budget
(``failed_bytes``) that was probed without one, but not a proven minimum, which is why
:class:`SmallestBudget` never calls it one. Budget-blind strategies need no search: their
one plan's peak is their smallest budget, exactly.

Slow strategies (``exact``) are not searched: each probe may take their whole time limit.

**The trade-off** (:func:`sweep`): every strategy at every budget of a sweep, each run
through :func:`remat_cli.planner.make_plan` (so every schedule passes the simulator) at
budgets between the lower bound and the store-all peak, reporting per (budget, strategy)
the peak, cost, overhead and estimated seconds of the plan, or why there is none. The
Pareto frontier is computed across all strategies in (peak, cost); per strategy, the
smallest budget it was found to meet (the search above, the same figure ``plan`` and
``check`` give) and the lowest peak it reached are summarised. On graphs of
``SHARED_SWEEP_NODES`` nodes or more, two processes share the strategies, each taking the
next one's plans and search when it is free (:class:`_SweepWorker`; every plan in one
process, the same results). CSV and JSON writers live in :mod:`remat_cli.report.tradeoff`.
"""

from __future__ import annotations

import time

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from remat_cli.budget import Budget
from remat_cli.errors import InputError, NoPlanError, RematError
from remat_cli.graph import Graph
from remat_cli.plandoc import Plan
from remat_cli.strategies import RunContext, Strategy, fast_strategies, get_strategy
from remat_cli.units import Fact, Phrase

__all__ = [
    "SmallestBudget",
    "smallest_budget",
    "search_tolerance",
    "searchable",
    "NOT_MONOTONE",
    "JUST_BELOW",
    "SweepPoint",
    "StrategyBest",
    "Tradeoff",
    "sweep",
    "sweep_budgets",
    "resolve_strategies",
    "pareto_mask",
    "budget_ratio",
]

RELATIVE_TOLERANCE = 0.001  # of the store-all peak
#: The part of the time left that a probe of a guessed budget gets (:func:`smallest_budget`).
GUESS_SHARE = 0.5
# Strategies that tests/test_sweep.py shows fitting a budget and failing a larger one on
# some graph: for them the search's figure is a budget found, and smaller ones may fit.
NOT_MONOTONE = frozenset({"greedy", "dtr", "auto"})
#: Of those, the ones whose search probes the grid point just below a stated budget that
#: fits next, as for the monotone ones (:func:`smallest_budget`).
JUST_BELOW = frozenset({"auto"})


@dataclass(frozen=True)
class SmallestBudget:
    """What the search found for one strategy on one graph.

    ``budget_bytes``: the smallest budget a plan was found for (``None``: none found,
    even at the store-all peak); ``peak_bytes``, ``overhead``, ``cost``, ``est_seconds``:
    that plan's figures; ``failed_bytes``: the largest budget probed without a plan below
    it (``None`` when ``budget_bytes`` is the lower bound, below which nothing fits);
    ``exact``: ``budget_bytes`` is the lower bound, or the strategy ignores budgets, so no
    smaller budget can fit it (proven, not searched); ``monotone``: False for a strategy
    known to fit some budget and fail a larger one (``NOT_MONOTONE``), where a budget
    below ``failed_bytes`` may still fit.
    """

    strategy: str
    budget_bytes: int | None
    failed_bytes: int | None
    tolerance_bytes: int
    probes: int
    exact: bool
    peak_bytes: int | None = None
    cost: float | None = None
    overhead: float | None = None
    est_seconds: float | None = None
    monotone: bool = True

    @property
    def found(self) -> bool:
        return self.budget_bytes is not None

    complete: bool = True  # False: the search stopped at its deadline; a smaller budget may fit
    #: True: it stopped before its deadline, as a failing plan took longer than the time left
    #: (a probe cut short at the deadline tells nothing); ``complete`` is False then too
    foreseen: bool = False


def search_tolerance(store_all_peak: int) -> int:
    """Bytes the bisection stops within: 0.1% of the store-all peak, at least 1."""
    return max(1, int(store_all_peak * RELATIVE_TOLERANCE))


@dataclass(frozen=True)
class _Grid:
    """The budgets :func:`smallest_budget` probes: ``lb + k * tol`` for k = 0..``steps``,
    capped at ``top`` (the store-all peak, or the lower bound where that is higher)."""

    lb: int
    tol: int
    top: int

    @classmethod
    def of(cls, graph: Graph, reference_peak: int) -> _Grid:
        return cls(graph.lb, search_tolerance(reference_peak), max(reference_peak, graph.lb))

    def at(self, k: int) -> int:
        return min(self.lb + k * self.tol, self.top)

    def snap(self, nbytes: int) -> int:
        """The index of the grid point at or above ``nbytes``."""
        return -(-(nbytes - self.lb) // self.tol)

    @property
    def steps(self) -> int:
        return self.snap(self.top)  # at(steps) == top


def probe_after(graph: Graph, strategy: str | Strategy, reference_peak: int, hint: int) -> int | None:
    """The budget :func:`smallest_budget` probes next when the stated budget ``hint`` (a
    failed plan's ``min_budget``) fits: the grid point just below it, for a strategy that is
    probed there (monotone ones and :data:`JUST_BELOW`); None where the search probes no
    such point (``hint`` off the grid's inside, or a strategy that bisects instead). A
    strategy that foresees its failure can make that probe ahead (``RunContext.probe_next``)."""
    name = strategy if isinstance(strategy, str) else strategy.name
    grid = _Grid.of(graph, reference_peak)
    k = grid.snap(hint)
    if hint < grid.lb or not 1 <= k < grid.steps or (name in NOT_MONOTONE and name not in JUST_BELOW):
        return None
    return grid.at(k - 1)


def searchable(strategy: str | Strategy) -> bool:
    """Whether :func:`smallest_budget` searches this strategy (not the slow ones)."""
    strat = strategy if isinstance(strategy, Strategy) else get_strategy(strategy)
    return strat.fast or strat.name == "auto"


def smallest_budget(
    graph: Graph,
    strategy: str | Strategy,
    options: Any = None,
    *,
    context: RunContext | None = None,
    reference_peak: int | None = None,
    deadline: float | None = None,
    hint: int | None = None,
    failing_seconds: float | None = None,
    guess: int | None = None,
    full: str | Strategy | None = None,
) -> SmallestBudget:
    """Search the smallest budget ``strategy`` meets on ``graph`` (see the module doc).

    ``options`` and ``context`` as :func:`~remat_cli.planner.make_plan` takes them.
    ``deadline`` (a ``time.perf_counter()`` value) bounds the search: each probe gets
    the time left as its ``time_limit``, and past it the bisection stops with what it has
    (``complete`` False: the budget found fits, a smaller one may too).

    The bisection runs over the grid ``LB + k * tolerance`` (capped at the store-all
    peak), so for a monotone strategy the answer is the grid's first fitting budget
    whatever order the probes take: ``plan``, ``tradeoff`` and ``check`` agree. Then the
    found plan's own peak is probed once. ``hint``: a budget the strategy said it meets
    (a failed plan's ``min_budget``), probed first like the ones probes state. Raises what :func:`make_plan` raises other
    than :class:`NoPlanError` (a strategy that refuses the graph). Cost: about
    log2(1 / 0.001) = 10 plans, plus at most three.

    ``failing_seconds``: how long a plan of the strategy took to fail (the attempt before
    the search). With a ``deadline``, a bisection probe starts only while at least the
    shortest such time (that one, or a probe's that failed since) is left: a probe cut
    short at the deadline is not counted, so one that would most likely be cut is not
    started (the result says ``foreseen``). Probes of stated budgets are always started.
    ``guess``: a budget no plan stated but worth a probe first (below the lower bound, the
    lower bound itself: the answer if it fits); its probe gets ``GUESS_SHARE`` of the time
    left, and cut short there it settles nothing (it is not probed again) and the
    bisection goes on without it.

    ``full``: the strategy itself where ``strategy`` is its fit probe (planner.py: a probe
    that answers only whether it fits, with the first candidate plan found to fit). The
    search then takes the same steps and gives the same answer as with ``full`` alone: its
    verdicts are the same, and where a plan's own figures steer the search (the probes
    after a failure at the store-all peak, and the peak probed last) they are ``full``'s
    plans (one more plan, at the budget found, only where a peak could lie strictly
    between the failed budget and it). The result's plan figures are then those of a
    plan that fits the budget found, not necessarily ``full``'s.
    """
    from remat_cli.planner import make_plan, store_all_peak

    strat = strategy if isinstance(strategy, Strategy) else get_strategy(strategy)
    whole = strat if full is None else full if isinstance(full, Strategy) else get_strategy(full)
    options, context = strat.split(options, context)
    ref = store_all_peak(graph) if reference_peak is None else reference_peak
    points = _Grid.of(graph, ref)
    tol, lb = points.tol, points.lb
    snap, grid = points.snap, points.at
    probes = 0
    tried: dict[int, Plan | None] = {}
    tried_by: dict[int, Strategy] = {}  # the strategy that made each (strat or whole)
    hints: list[int] = [] if hint is None else [hint]
    hints += [] if guess is None else [guess]
    failing = math.inf if failing_seconds is None else failing_seconds  # shortest failure seen

    # grid points some plan said it meets (the one other pending point: the guess)
    claimed: set[int] = set() if hint is None else {snap(hint)}

    def probe(budget: int | None, share: float = 1.0, using: Strategy = strat) -> Plan | None:
        """The plan at ``budget`` or None; a probe gets ``share`` of the time left (a
        failure past its own limit is not kept: it was cut short, not proven). ``using``:
        the strategy that makes it (the fit probe or ``full``)."""
        nonlocal probes, failing
        if budget is not None and budget in tried and (using is strat or tried_by.get(budget) is using):
            return tried[budget]
        probes += 1
        started = time.perf_counter()
        ctx = context
        end = deadline
        if deadline is not None:
            left = max(0.1, share * (deadline - started))
            end = started + left
            ctx = replace(context, time_limit=min(left, float(context.time_limit or left)))
        try:
            plan = make_plan(graph, using, budget, options, context=ctx, reference_peak=ref)
        except NoPlanError as exc:
            if exc.min_budget is not None:
                hints.append(exc.min_budget)
                claimed.add(snap(exc.min_budget))
            plan = None
            if end is not None and time.perf_counter() > end:
                return None  # cut short: not a failure the strategy proved
            failing = min(failing, time.perf_counter() - started)
        if budget is not None:
            tried[budget] = plan
            tried_by[budget] = using
        return plan

    if not strat.uses_budget:
        free = probe(None)
        assert free is not None  # a budget-blind strategy meets "no budget"
        best = probe(free.metrics.peak_bytes)
        assert best is not None
        return _result(strat.name, best, failed=None, tol=tol, probes=probes, exact=True)

    steps = points.steps
    best = probe(points.top)
    hi = steps
    if best is None:  # no fit at the store-all peak: its own no-budget plan, if that fits
        free = probe(None, using=whole)  # (their figures steer the search: whole plans)
        best = probe(free.metrics.peak_bytes, using=whole) if free is not None else None
        if best is None:
            return SmallestBudget(strat.name, None, None, tol, probes, exact=False, monotone=strat.name not in NOT_MONOTONE)
        hi = snap(best.metrics.peak_bytes)  # the grid point at or above it
        at_grid = probe(grid(hi), using=whole) if grid(hi) != best.metrics.peak_bytes else best
        if at_grid is None:  # off the grid only: report that budget, searched no further
            return _result(strat.name, best, failed=None, tol=tol, probes=probes, exact=False)
        best = at_grid
    lo = -1  # grid(-1) = LB - 1: proven, nothing fits below LB
    unsettled: set[int] = set()  # the guess, where its probe was cut short at its share
    complete = True
    foreseen = False
    # a stated budget that fits is most often the strategy's smallest: the grid point just
    # below it is probed next, and if that fails the search is over in one probe where
    # bisecting up from LB takes log2 of the range (for a monotone strategy the same answer:
    # the grid's first fitting budget, whatever the order of the probes). Of the others,
    # auto too (:data:`JUST_BELOW`): a budget found with one that failed just below it, as
    # the bisection's answer is, instead of a bisection whose probes far below what auto
    # meets take longest to fail; greedy and dtr keep the bisection, which finds budgets
    # they meet below a larger one they fail (dtr on grid1000 at 0.3x: 136 B, below 157 B)
    just_below = strat.name not in NOT_MONOTONE or strat.name in JUST_BELOW
    below: int | None = None
    while True:
        if deadline is not None and time.perf_counter() > deadline:
            complete = False
            break
        # a budget the strategy said it meets, snapped up to the grid, is probed first
        pending = sorted({snap(h) for h in hints if lb <= h} & set(range(lo + 1, hi)) - unsettled)
        hints.clear()
        share = 1.0
        if pending:
            mid = pending[0]
            if mid not in claimed:
                # a guess (the lower bound) can take a whole plan's time to fail (auto on
                # BERT at its lower bound: 3 s): half the time left, the bisection the rest
                share = GUESS_SHARE
        elif hi - lo > 1:
            mid = below if below is not None and lo < below < hi else (lo + hi) // 2
            below = None
            if deadline is not None and deadline - time.perf_counter() < failing:
                complete, foreseen = False, True  # it would most likely be cut short
                break
        else:
            break
        plan = probe(grid(mid), share)
        if plan is None and deadline is not None and time.perf_counter() > deadline:
            complete = False  # cut short by the deadline: not a failure the strategy proved
            break
        if plan is None and grid(mid) not in tried:  # cut short at its share: unknown (the
            unsettled.add(mid)  # bisection settles the answer without it: below hi, it is
            continue  # at or below lo, which failed)
        if plan is None:
            lo = max(lo, mid)
        else:
            best, hi = plan, mid
            if mid in claimed and just_below:
                below = mid - 1
    found = grid(hi)
    failed = grid(lo) if lo >= 0 else None
    if complete and whole is not strat and tried_by.get(found) is not whole and found - (lb - 1 if failed is None else failed) > 1:
        # the peak probed next is that of the strategy's own plan at the budget found
        own = _whole_plan(graph, whole, found, options, context, ref, deadline)
        if own is None:  # (past the deadline)
            complete = False
        else:
            best = own
    peak = best.metrics.peak_bytes
    if complete and peak < found and (failed is None or peak > failed):  # its plan may fit its own peak
        plan = probe(peak)
        if plan is not None:
            best, found = plan, peak
    result = _result(strat.name, best, failed=failed, tol=tol, probes=probes, exact=found == lb)
    return result if complete else replace(result, complete=False, foreseen=foreseen)


def _whole_plan(
    graph: Graph, strat: Strategy, budget: int, options: Any, context: RunContext, ref: int, deadline: float | None
) -> Plan | None:
    """``strat``'s own plan at ``budget``, which its fit probe found to fit (None where it
    does not by the ``deadline``)."""
    from remat_cli.planner import make_plan

    if deadline is not None:
        left = max(0.1, deadline - time.perf_counter())
        context = replace(context, time_limit=min(left, float(context.time_limit or left)))
    try:
        return make_plan(graph, strat, budget, options, context=context, reference_peak=ref)
    except NoPlanError:
        return None


def _result(name: str, plan: Plan, *, failed: int | None, tol: int, probes: int, exact: bool) -> SmallestBudget:
    m = plan.metrics
    return SmallestBudget(
        strategy=name,
        budget_bytes=plan.budget_bytes,
        failed_bytes=failed,
        tolerance_bytes=tol,
        probes=probes,
        exact=exact,
        peak_bytes=m.peak_bytes,
        cost=m.cost,
        overhead=m.overhead,
        est_seconds=m.est_seconds,
        monotone=name not in NOT_MONOTONE,
    )


# ===================================================================== the trade-off sweep
# why a (budget, strategy) cell has no plan
FIT = "fit"
NO_FIT = "no-fit"  # the strategy could not meet the budget
BELOW_LB = "below-lb"  # no schedule can: budget < lower bound
ERROR = "error"  # the strategy failed (invalid schedule, refused the graph, …)


@dataclass(frozen=True)
class SweepPoint:
    """One strategy at one budget. Plan figures are ``None`` unless ``status == "fit"``."""

    strategy: str
    budget_bytes: int
    budget_ratio: float  # of the store-all peak
    status: str  # fit | no-fit | below-lb | error
    peak_bytes: int | None = None
    cost: float | None = None
    overhead: float | None = None
    est_seconds: float | None = None
    recomputations: int | None = None
    solve_seconds: float | None = None
    on_frontier: bool = False
    message: str = ""  # why it does not fit, when it does not
    min_budget_hint: int | None = None  # the strategy's own smallest budget, when it said

    @property
    def fits(self) -> bool:
        return self.status == FIT


@dataclass(frozen=True)
class StrategyBest:
    """Per strategy: the smallest budget it was found to meet, and its lowest-peak plan.

    ``smallest_budget_bytes`` comes from :func:`remat_cli.sweep.smallest_budget` (the
    figure ``plan`` and ``check`` name too) where ``search`` is ``"bisection"`` or
    ``"exact"``; for a strategy not searched (``"grid"``: slow ones) it is the smallest
    swept budget with a plan. Either way a plan was found and replayed at that budget.
    """

    strategy: str
    smallest_budget_bytes: int | None  # smallest budget a plan was found for (see above)
    lowest_peak_bytes: int | None  # lowest peak over all its plans (swept and searched)
    overhead_at_lowest: float | None  # overhead of that lowest-peak plan
    est_seconds_at_lowest: float | None
    stated_min_budget_bytes: int | None  # smallest budget the strategy said it can meet
    fits: int  # number of swept budgets met
    errors: int  # number of runs that failed with an error (not a plain "does not fit")
    search: str = "grid"  # bisection | exact (LB, or a budget-blind plan's peak) | grid
    search_failed_bytes: int | None = None  # largest budget the search probed without a plan
    search_tolerance_bytes: int | None = None  # the search's grid step
    monotone: bool = True  # False: a budget below the figure may fit (sweep.NOT_MONOTONE)
    smallest_swept_budget_bytes: int | None = None  # smallest budget of the sweep with a plan


@dataclass(frozen=True)
class Tradeoff:
    """A whole sweep: the graph's reference figures, the budgets, and every point."""

    graph_name: str
    graph_sha256: str
    nodes: int
    cost_unit: str
    fixed_bytes: int
    lower_bound_bytes: int
    store_all_peak_bytes: int
    base_cost: float
    base_seconds: float | None
    budgets: tuple[int, ...]  # descending
    strategies: tuple[str, ...]
    points: tuple[SweepPoint, ...]  # budget-major, in the order of budgets x strategies
    best: tuple[StrategyBest, ...]

    def point(self, budget_bytes: int, strategy: str) -> SweepPoint:
        """The point of ``strategy`` at ``budget_bytes`` (KeyError when not swept)."""
        return self._by_key[(budget_bytes, strategy)]

    @cached_property
    def _by_key(self) -> dict[tuple[int, str], SweepPoint]:
        return {(p.budget_bytes, p.strategy): p for p in self.points}

    @property
    def frontier(self) -> tuple[SweepPoint, ...]:
        """The non-dominated plans, by peak, one per distinct (strategy, peak, cost)."""
        seen: set[tuple[str, int, float]] = set()
        out = []
        for p in sorted((p for p in self.points if p.on_frontier), key=lambda p: (p.peak_bytes, p.cost, p.strategy, -p.budget_bytes)):
            key = (p.strategy, int(p.peak_bytes or 0), float(p.cost or 0.0))
            if key not in seen:
                seen.add(key)
                out.append(p)
        return tuple(out)

    @property
    def has_seconds(self) -> bool:
        return self.base_seconds is not None


ProgressFn = Callable[[int, int, str | Phrase], None]  # label: a name or a phrase the caller renders


def sweep(
    graph: Graph,
    strategies: Sequence[Strategy],
    budgets: Sequence[Budget | int] | None = None,
    *,
    points: int = 8,
    context: RunContext | None = None,
    progress: ProgressFn | None = None,
    search: bool = True,
) -> Tradeoff:
    """Run every strategy at every budget and collect the trade-off.

    ``budgets``: sizes or ratios (``Budget`` objects or bytes); default ``points`` budgets
    evenly spaced from LB to the store-all peak. A strategy that ignores budgets runs once
    and is checked against each budget. With ``search``, each fast strategy's smallest
    budget is searched (:func:`remat_cli.sweep.smallest_budget`). ``progress(done, total,
    label)`` is called before each run (``label`` names it) and once at the end. Every
    plan gets ``context`` (its ``time_limit`` per plan) and its strategy's default options. Cost:
    one plan per (budget-aware strategy, budget), plus about a dozen per searched strategy,
    shared by two processes where :func:`_shares_cores` (``context.parallel`` False: one).
    """
    if not strategies:
        raise InputError("no strategies to sweep")
    names = [s.name for s in strategies]
    if len(set(names)) != len(names):
        raise InputError(f"strategy listed twice: {', '.join(names)}")
    from remat_cli.planner import store_all_peak

    ref = store_all_peak(graph)
    if budgets is None:
        budget_bytes = sweep_budgets(graph.lb, ref, points)
    else:
        budget_bytes = sorted({_resolve(b, ref, graph.lb) for b in budgets}, reverse=True)
        if not budget_bytes:
            raise InputError("no budgets to sweep")
    searched = {s.name for s in strategies if search and searchable(s)}
    total = sum(1 if not s.uses_budget else len(budget_bytes) for s in strategies) + len(searched)
    cells: dict[tuple[int, str], SweepPoint] = {}
    found: dict[str, SmallestBudget | None] = {}
    counted = [0]

    def told(label: str | Phrase) -> None:
        if progress:
            progress(counted[0], total, label)
        counted[0] += 1

    jobs = [(strat, strat.name in searched) for strat in strategies]
    shared = _SweepWorker.start(graph, jobs, budget_bytes, ref, context) if _shares_cores(graph, jobs, context) else None
    if shared is None:  # every strategy's plans, then the searches
        for strat, _ in jobs:
            _strategy_job(graph, strat, False, budget_bytes, ref, context, told, cells, found)
        for strat, searching in jobs:
            if searching:
                _strategy_job(graph, strat, True, budget_bytes, ref, context, told, cells, found, plans=False)
    else:
        shared.run(told, cells, found)
    if progress:
        progress(total, total, "done")
    ordered = [cells[(b, s)] for b in budget_bytes for s in names]
    on = pareto_mask(
        [(p.peak_bytes, p.cost) if p.fits else None for p in ordered]  # type: ignore[misc]
    )
    ordered = [_replace(p, on_frontier=bool(f)) for p, f in zip(ordered, on)]
    best = tuple(_best(name, [p for p in ordered if p.strategy == name], found.get(name)) for name in names)
    return Tradeoff(
        graph_name=graph.name,
        graph_sha256=graph.sha256,
        nodes=graph.n,
        cost_unit=graph.cost_unit,
        fixed_bytes=graph.fixed_mem,
        lower_bound_bytes=graph.lb,
        store_all_peak_bytes=ref,
        base_cost=graph.base_cost,
        base_seconds=graph.base_seconds,
        budgets=tuple(budget_bytes),
        strategies=tuple(names),
        points=tuple(ordered),
        best=best,
    )


def _strategy_job(
    graph: Graph,
    strat: Strategy,
    searching: bool,
    budget_bytes: list[int],
    ref: int,
    context: RunContext | None,
    told: Callable[[str | Phrase], None],
    cells: dict[tuple[int, str], SweepPoint],
    found: dict[str, SmallestBudget | None],
    plans: bool = True,
) -> None:
    """One strategy's part of a sweep: its plan at each budget (one plan where it ignores
    budgets) into ``cells`` (unless not ``plans``), then its smallest budget into ``found``
    where ``searching``; ``told(label)`` before each run."""
    if plans and not strat.uses_budget:
        told(strat.name)
        point = _run(graph, strat, None, ref, context)
        for b in budget_bytes:
            cells[(b, strat.name)] = _against(point, b, ref, graph.lb)
    elif plans:
        for b in budget_bytes:
            told(Phrase("{} @ {}", (strat.name, Fact(b, "bytes"))))
            cells[(b, strat.name)] = _run(graph, strat, b, ref, context)
    if searching:
        told(Phrase("{}: smallest budget", (strat.name,)))
        try:
            found[strat.name] = smallest_budget(graph, strat, context=context, reference_peak=ref)
        except RematError:  # the strategy refuses this graph: its cells say why
            found[strat.name] = None


#: A sweep of graphs from this many nodes, over two strategies or more, runs its
#: strategies in two processes (each takes the next strategy when it is free), every plan
#: in one process (``RunContext.parallel`` False: the same plans, the strategies' own
#: second processes would only compete for the cores). ``remat tradeoff`` of its nine fast
#: strategies, whole process, one → two: grid1000 11.0 → 5.8 s, nn1000 5.1 → 2.7,
#: random1000 9.8 → 5.3 (dtr's thrashing replays at the budgets take 5 s), ViT-B/16
#: 4.1 → 2.6, BERT 3.4 → 1.8, U-Net 1.7 → 1.2, MobileNetV2 0.9 → 0.7, nn10000 43 → 28;
#: the same tables.
SHARED_SWEEP_NODES = 100
#: The order the two processes take strategies in: the ones that usually take longest
#: first (grid1000: treewidth 3.8 s, dtr 2.8, pathwidth 2.2, greedy 1.3, min-memory 0.5;
#: the rest 0.2 s together), so that neither waits long for the other at the end; the
#: others after them, as listed.
_LONGEST_FIRST = ("exact", "auto", "treewidth", "dtr", "pathwidth", "greedy", "min-memory", "chain-dp")
#: Strategies whose plans share nothing between budgets but the store-all plan (made
#: before the second process starts): each replays the store-all order afresh. Their
#: search is a job of its own, which either process may take (random1000's tradeoff: dtr's
#: plans 5.0 s and its search 1.7 s were one job, 6.8 s of the sweep's wall; ViT-B/16:
#: greedy's 0.4 s and 1.4 s).
_REPLAYS = ("greedy", "dtr")


def _shares_cores(graph: Graph, jobs: list[tuple[Strategy, bool]], context: RunContext | None) -> bool:
    """Whether a sweep runs its strategies in two processes: two cores, fork, not inside a
    worker of ``remat batch`` (a daemon), a graph of :data:`SHARED_SWEEP_NODES` nodes or more,
    two strategies or more, and ``context.parallel`` not False."""
    import multiprocessing as mp
    import os

    if context is not None and not context.parallel:
        return False
    if graph.n < SHARED_SWEEP_NODES or len(jobs) < 2 or (os.cpu_count() or 1) < 2:
        return False
    return "fork" in mp.get_all_start_methods() and not mp.current_process().daemon


class _SweepWorker:
    """A second process for a sweep: both processes take strategies from one counter (in
    :data:`_LONGEST_FIRST` order) and run each one's part (:func:`_strategy_job`: its plans
    and its search; a replay's plans and search are two parts, :data:`_REPLAYS`); the
    second sends its cells, smallest budget and progress labels back. A part it took but
    did not send (it raised, or the process ended) is run here again, so an error is met
    and reported here, as in one process. Every plan runs with ``parallel`` False."""

    def __init__(self, proc: Any, conn: Any, taken: Any, jobs: list[tuple[Strategy, bool, bool]], run_job: Callable[..., None]) -> None:
        self.proc, self.conn, self.taken, self.jobs, self.run_job = proc, conn, taken, jobs, run_job

    @classmethod
    def start(
        cls, graph: Graph, jobs: list[tuple[Strategy, bool]], budget_bytes: list[int], ref: int, context: RunContext | None
    ) -> _SweepWorker | None:
        import multiprocessing as mp

        rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
        parts = []  # (strategy, its search, its plans): a replay's search is a job of its own
        for strat, searching in sorted(jobs, key=lambda job: rank.get(job[0].name, len(rank))):  # (stable)
            if searching and strat.name in _REPLAYS:
                parts += [(strat, False, True), (strat, True, False)]
            else:
                parts.append((strat, searching, True))
        one = replace(context or RunContext(), parallel=False)
        quiet = replace(one, progress=None, idle=None)
        ctx = mp.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        taken = ctx.Value("i", 0)
        proc = ctx.Process(target=_sweep_worker_main, args=(graph, parts, budget_bytes, ref, quiet, taken, send), daemon=True)
        try:
            proc.start()
        except OSError:
            return None
        send.close()

        def run_job(i: int, told: Callable[..., None], cells: dict, found: dict) -> None:
            strat, searching, plans = parts[i]
            _strategy_job(graph, strat, searching, budget_bytes, ref, one, told, cells, found, plans=plans)

        return cls(proc, recv, taken, parts, run_job)

    def run(self, told: Callable[[str | Phrase], None], cells: dict, found: dict) -> None:
        """Take strategies until none is left, then wait for the second process's; what it
        sends lands in ``cells`` and ``found`` (its labels go to ``told`` as they come)."""
        mine: set[int] = set()
        sent: set[int] = set()

        def receive(wait: bool) -> bool:
            """Handle one message from the second process (``wait``: for it); False when
            none is waiting, or none will come (its end of the pipe is closed)."""
            if not wait and not self.conn.poll(0):
                return False
            try:
                kind, *payload = self.conn.recv()
            except (EOFError, OSError):
                return False
            if kind == "told":
                told(payload[0])
            else:  # "job": a part it made
                i, its_cells, its_found = payload
                cells.update(its_cells)
                found.update(its_found)
                sent.add(i)
            return True

        def relay(label: str | Phrase) -> None:
            while receive(False):
                pass
            told(label)

        try:
            while True:
                i = _take(self.taken, len(self.jobs))
                if i is None:
                    break
                mine.add(i)
                self.run_job(i, relay, cells, found)
            while receive(True):  # until the second process has ended
                pass
            self.proc.join()
            for i in range(len(self.jobs)):  # taken there, not sent: made here (its error too)
                if i not in mine and i not in sent:
                    self.run_job(i, told, cells, found)
        finally:
            if self.proc.is_alive():
                self.proc.terminate()
                self.proc.join()


def _take(taken: Any, jobs: int) -> int | None:
    """The next strategy's index from the shared counter, or None when all are taken."""
    with taken.get_lock():
        i = taken.value
        if i >= jobs:
            return None
        taken.value = i + 1
    return i


def _sweep_worker_main(
    graph: Graph, jobs: list[tuple[Strategy, bool, bool]], budget_bytes: list[int], ref: int, context: RunContext, taken: Any, send: Any
) -> None:
    """The second process of a sweep (:class:`_SweepWorker`); it ends within half a second
    of the first one (killed: no sweep left to send to), as auto's second process does,
    and leaves Ctrl-C to the first one, which ends it (it printed a traceback of its own)."""
    import signal

    from remat_cli.executors import end_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()

    def told(label: str | Phrase) -> None:
        send.send(("told", label))

    while True:
        i = _take(taken, len(jobs))
        if i is None:
            return
        strat, searching, plans = jobs[i]
        cells: dict[tuple[int, str], SweepPoint] = {}
        found: dict[str, SmallestBudget | None] = {}
        try:
            _strategy_job(graph, strat, searching, budget_bytes, ref, context, told, cells, found, plans=plans)
            send.send(("job", i, cells, found))
        except BaseException:  # (the first process runs it again and meets it; or it
            return  # has gone, and there is no one to tell)


def sweep_budgets(lower_bound: int, store_all: int, points: int) -> list[int]:
    """``points`` distinct budgets evenly spaced from ``store_all`` down to ``lower_bound``."""
    if points < 1:
        raise InputError(f"--points must be at least 1, not {points}")
    hi = max(store_all, lower_bound)
    if points == 1 or hi == lower_bound:
        return [hi]
    values = np.linspace(hi, lower_bound, points)
    out = sorted({int(round(v)) for v in values.tolist()}, reverse=True)
    return out


def resolve_strategies(text: str | None) -> list[Strategy]:
    """``treewidth,chen-sqrt`` -> strategies (unknown names: exit 2); default: the fast ones."""
    if text is None or not text.strip() or text.strip() == "fast":
        return fast_strategies()
    if text.strip() == "all":
        from remat_cli.strategies import STRATEGIES

        return list(STRATEGIES.values())
    names = [x.strip() for x in text.split(",") if x.strip()]
    out: list[Strategy] = []
    for name in names:
        strat = get_strategy(name)
        if strat not in out:
            out.append(strat)
    return out


def pareto_mask(points: Sequence[tuple[int, float] | None]) -> np.ndarray:
    """True for each (peak, cost) no other point dominates (≤ in both, < in one).

    ``None`` entries (no plan) are never on the frontier. Equal points do not dominate
    each other, so every copy of a non-dominated point is marked. O(P log P).
    """
    mask = np.zeros(len(points), dtype=bool)
    valid = [(p[0], p[1], i) for i, p in enumerate(points) if p is not None]
    valid.sort()
    best_before = math.inf  # lowest cost among strictly smaller peaks
    k = 0
    while k < len(valid):
        peak = valid[k][0]
        j = k
        while j < len(valid) and valid[j][0] == peak:
            j += 1
        group_min = valid[k][1]  # sorted by cost within equal peaks
        if group_min < best_before:
            for _, cost, i in valid[k:j]:
                if cost == group_min:
                    mask[i] = True
        best_before = min(best_before, group_min)
        k = j
    return mask


# --------------------------------------------------------------------- helpers
def _resolve(b: Budget | int, ref: int, lb: int) -> int:
    if isinstance(b, Budget):
        value = b.resolve(ref, lb)
        if value is None:
            raise InputError("a sweep needs sizes or ratios, not 'none'")
        return value
    return int(b)


def budget_ratio(b: int, ref: int) -> float:
    """``b`` as a fraction of the store-all peak ``ref`` (inf when ``ref`` is 0)."""
    return b / ref if ref > 0 else math.inf


def _run(graph: Graph, strat: Strategy, budget: int | None, ref: int, context: RunContext | None) -> SweepPoint:
    """One plan; ``budget=None`` for strategies that ignore budgets."""
    b = ref if budget is None else budget
    ratio = budget_ratio(b, ref)
    if budget is not None and budget < graph.lb:
        return SweepPoint(strat.name, b, ratio, BELOW_LB, message=f"below the lower bound {graph.lb} B", min_budget_hint=graph.lb)
    from remat_cli.planner import make_plan

    try:
        plan = make_plan(graph, strat, budget, context=context, reference_peak=ref)
    except NoPlanError as exc:
        return SweepPoint(strat.name, b, ratio, NO_FIT, message=exc.message, min_budget_hint=exc.min_budget)
    except RematError as exc:
        return SweepPoint(strat.name, b, ratio, ERROR, message=exc.message)
    m = plan.metrics
    return SweepPoint(
        strat.name,
        b,
        ratio,
        FIT,
        peak_bytes=m.peak_bytes,
        cost=m.cost,
        overhead=m.overhead,
        est_seconds=m.est_seconds,
        recomputations=m.recomputations,
        solve_seconds=plan.solve_seconds,
    )


def _against(point: SweepPoint, budget: int, ref: int, lb: int) -> SweepPoint:
    """A budget-blind strategy's single plan, judged against ``budget``."""
    ratio = budget_ratio(budget, ref)
    if budget < lb:
        return SweepPoint(point.strategy, budget, ratio, BELOW_LB, message=f"below the lower bound {lb} B", min_budget_hint=lb)
    if not point.fits:
        return _replace(point, budget_bytes=budget, budget_ratio=ratio)
    assert point.peak_bytes is not None
    if point.peak_bytes > budget:
        return SweepPoint(
            point.strategy,
            budget,
            ratio,
            NO_FIT,
            message=f"its plan peaks at {point.peak_bytes} B and it ignores budgets",
            min_budget_hint=point.peak_bytes,
        )
    return _replace(point, budget_bytes=budget, budget_ratio=ratio)


def _best(name: str, pts: list[SweepPoint], found: SmallestBudget | None) -> StrategyBest:
    fit = [p for p in pts if p.fits]
    hints = [p.min_budget_hint for p in pts if p.status == NO_FIT and p.min_budget_hint is not None]
    lowest = min(fit, key=lambda p: (p.peak_bytes, p.cost)) if fit else None
    swept = min(p.budget_bytes for p in fit) if fit else None
    searched: dict[str, Any] = {}
    low = None if lowest is None else (lowest.peak_bytes, lowest.cost, lowest.overhead, lowest.est_seconds)
    if found is not None and found.peak_bytes is not None and (low is None or (found.peak_bytes, found.cost) < low[:2]):
        low = (found.peak_bytes, found.cost, found.overhead, found.est_seconds)  # the search's plan is lower
    if found is not None:
        searched = dict(
            search="exact" if found.exact else "bisection",
            search_failed_bytes=found.failed_bytes,
            search_tolerance_bytes=found.tolerance_bytes,
            monotone=found.monotone,
        )
    return StrategyBest(
        strategy=name,
        smallest_budget_bytes=found.budget_bytes if found is not None else swept,
        smallest_swept_budget_bytes=swept,
        **searched,
        lowest_peak_bytes=None if low is None else low[0],
        overhead_at_lowest=None if low is None else low[2],
        est_seconds_at_lowest=None if low is None else low[3],
        stated_min_budget_bytes=min(hints) if hints else None,
        fits=len(fit),
        errors=sum(1 for p in pts if p.status == ERROR),
    )


def _replace(p: SweepPoint, **changes: Any) -> SweepPoint:
    return replace(p, **changes)
