"""The smallest budget a strategy meets, found by bisection over bytes.

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
  a budget a failing strategy says it meets is probed first (snapped to the grid);
* then probes the found plan's own peak once, as a budget.

It **assumes** that a strategy that fits budget B fits every larger budget (monotone).
``tests/test_sweep.py`` checks that on generated graphs for every fast strategy; where it
does not hold, the figure is still a budget a plan was found for and a smaller budget
(``failed_bytes``) that was probed without one, but not a proven minimum, which is why
:class:`SmallestBudget` never calls it one. Budget-blind strategies need no search: their
one plan's peak is their smallest budget, exactly.

Slow strategies (``exact``) are not searched: each probe may take their whole time limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.plan import Plan
from remat_cli.strategies import Strategy, get_strategy

__all__ = ["SmallestBudget", "smallest_budget", "search_tolerance", "searchable", "NOT_MONOTONE"]

RELATIVE_TOLERANCE = 0.001  # of the store-all peak
# Strategies that tests/test_sweep.py shows fitting a budget and failing a larger one on
# some graph: for them the search's figure is a budget found, and smaller ones may fit.
NOT_MONOTONE = frozenset({"greedy", "dtr", "auto"})


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


def search_tolerance(store_all_peak: int) -> int:
    """Bytes the bisection stops within: 0.1% of the store-all peak, at least 1."""
    return max(1, int(store_all_peak * RELATIVE_TOLERANCE))


def searchable(strategy: str | Strategy) -> bool:
    """Whether :func:`smallest_budget` searches this strategy (not the slow ones)."""
    strat = strategy if isinstance(strategy, Strategy) else get_strategy(strategy)
    return strat.fast or strat.name == "auto"


def smallest_budget(
    graph: Graph,
    strategy: str | Strategy,
    options: Mapping[str, Any] | None = None,
    *,
    reference_peak: int | None = None,
) -> SmallestBudget:
    """Search the smallest budget ``strategy`` meets on ``graph`` (see the module doc).

    The bisection runs over the grid ``LB + k * tolerance`` (capped at the store-all
    peak), so for a monotone strategy the answer is the grid's first fitting budget
    whatever order the probes take: ``plan``, ``tradeoff`` and ``check`` agree. Then the
    found plan's own peak is probed once. Raises what :func:`make_plan` raises other
    than :class:`NoPlanError` (a strategy that refuses the graph). Cost: about
    log2(1 / 0.001) = 10 plans, plus at most three.
    """
    from remat_cli.planner import make_plan, store_all_peak

    strat = strategy if isinstance(strategy, Strategy) else get_strategy(strategy)
    ref = store_all_peak(graph) if reference_peak is None else reference_peak
    tol = search_tolerance(ref)
    lb = graph.lb
    top = max(ref, lb)
    probes = 0
    tried: dict[int, Plan | None] = {}
    hints: list[int] = []

    def probe(budget: int | None) -> Plan | None:
        nonlocal probes
        if budget is not None and budget in tried:
            return tried[budget]
        probes += 1
        try:
            plan = make_plan(graph, strat, budget, options, reference_peak=ref)
        except NoPlanError as exc:
            if exc.min_budget is not None:
                hints.append(exc.min_budget)
            plan = None
        if budget is not None:
            tried[budget] = plan
        return plan

    if not strat.uses_budget:
        free = probe(None)
        assert free is not None  # a budget-blind strategy meets "no budget"
        best = probe(free.metrics.peak_bytes)
        assert best is not None
        return _result(strat.name, best, failed=None, tol=tol, probes=probes, exact=True)

    def grid(k: int) -> int:
        return min(lb + k * tol, top)

    steps = -(-(top - lb) // tol)  # grid(steps) == top
    best = probe(top)
    hi = steps
    if best is None:  # no fit at the store-all peak: its own no-budget plan, if that fits
        free = probe(None)
        best = probe(free.metrics.peak_bytes) if free is not None else None
        if best is None:
            return SmallestBudget(strat.name, None, None, tol, probes, exact=False, monotone=strat.name not in NOT_MONOTONE)
        hi = -(-(best.metrics.peak_bytes - lb) // tol)  # the grid point at or above it
        at_grid = probe(grid(hi)) if grid(hi) != best.metrics.peak_bytes else best
        if at_grid is None:  # off the grid only: report that budget, searched no further
            return _result(strat.name, best, failed=None, tol=tol, probes=probes, exact=False)
        best = at_grid
    lo = -1  # grid(-1) = LB - 1: proven, nothing fits below LB
    while True:
        # a budget the strategy said it meets, snapped up to the grid, is probed first
        pending = sorted({-(-(h - lb) // tol) for h in hints if lb <= h} & set(range(lo + 1, hi)))
        hints.clear()
        if pending:
            mid = pending[0]
        elif hi - lo > 1:
            mid = (lo + hi) // 2
        else:
            break
        plan = probe(grid(mid))
        if plan is None:
            lo = max(lo, mid)
        else:
            best, hi = plan, mid
    found = grid(hi)
    failed = grid(lo) if lo >= 0 else None
    peak = best.metrics.peak_bytes
    if peak < found and (failed is None or peak > failed):  # its plan may fit its own peak
        plan = probe(peak)
        if plan is not None:
            best, found = plan, peak
    return _result(strat.name, best, failed=failed, tol=tol, probes=probes, exact=found == lb)


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
