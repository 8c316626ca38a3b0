"""The memory/compute trade-off of a graph: every strategy at every budget of a sweep.

:func:`sweep` runs each strategy through :func:`remat_cli.planner.make_plan` (so every
schedule passes the simulator) at budgets between the lower bound and the store-all peak,
and reports per (budget, strategy) the peak, cost, overhead and estimated seconds of the
plan, or why there is none. The Pareto frontier is computed across all strategies in
(peak, cost); per strategy, the smallest budget it was found to meet (searched by
:mod:`remat_cli.sweep`, the same figure ``plan`` and ``check`` give) and the lowest peak
it reached are summarised. Results are frozen dataclasses with CSV and JSON writers.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from remat_cli.budget import Budget, parse_budget
from remat_cli.errors import InputError, NoPlanError, RematError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.units import fmt_bytes
from remat_cli.strategies import Strategy, fast_strategies, get_strategy
from remat_cli.sweep import SmallestBudget, searchable, smallest_budget

__all__ = [
    "SweepPoint",
    "StrategyBest",
    "Tradeoff",
    "sweep",
    "sweep_budgets",
    "parse_budget_list",
    "resolve_strategies",
    "pareto_mask",
    "tradeoff_to_json",
    "tradeoff_to_csv",
    "CSV_FIELDS",
]

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


ProgressFn = Callable[[int, int, str], None]


def sweep(
    graph: Graph,
    strategies: Sequence[Strategy],
    budgets: Sequence[Budget | int] | None = None,
    *,
    points: int = 8,
    options: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
    search: bool = True,
) -> Tradeoff:
    """Run every strategy at every budget and collect the trade-off.

    ``budgets``: sizes or ratios (``Budget`` objects or bytes); default ``points`` budgets
    evenly spaced from LB to the store-all peak. A strategy that ignores budgets runs once
    and is checked against each budget. With ``search``, each fast strategy's smallest
    budget is searched (:func:`remat_cli.sweep.smallest_budget`). ``progress(done, total,
    label)`` is called before each run (``label`` names it) and once at the end. Cost:
    one plan per (budget-aware strategy, budget), plus about a dozen per searched strategy.
    """
    if not strategies:
        raise InputError("no strategies to sweep")
    names = [s.name for s in strategies]
    if len(set(names)) != len(names):
        raise InputError(f"strategy listed twice: {', '.join(names)}")
    ref = store_all_peak(graph)
    if budgets is None:
        budget_bytes = sweep_budgets(graph.lb, ref, points)
    else:
        budget_bytes = sorted({_resolve(b, ref, graph.lb) for b in budgets}, reverse=True)
        if not budget_bytes:
            raise InputError("no budgets to sweep")
    searched = [s for s in strategies if search and searchable(s)]
    total = sum(1 if not s.uses_budget else len(budget_bytes) for s in strategies) + len(searched)
    done = 0
    cells: dict[tuple[int, str], SweepPoint] = {}
    for strat in strategies:
        if not strat.uses_budget:
            if progress:
                progress(done, total, strat.name)
            point = _run(graph, strat, None, ref, options)
            done += 1
            for b in budget_bytes:
                cells[(b, strat.name)] = _against(point, b, ref, graph.lb)
            continue
        for b in budget_bytes:
            if progress:
                progress(done, total, f"{strat.name} @ {fmt_bytes(b)}")
            cells[(b, strat.name)] = _run(graph, strat, b, ref, options)
            done += 1
    found: dict[str, SmallestBudget | None] = {}
    for strat in searched:
        if progress:
            progress(done, total, f"{strat.name}: smallest budget")
        try:
            found[strat.name] = smallest_budget(graph, strat, options, reference_peak=ref)
        except RematError:  # the strategy refuses this graph: its cells say why
            found[strat.name] = None
        done += 1
    if progress:
        progress(done, total, "done")
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


def parse_budget_list(text: str) -> list[Budget]:
    """``0.9x,0.7x,8GiB`` -> budgets; ``none`` makes no sense in a sweep."""
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        budget = parse_budget(part)
        if budget.is_none:
            raise InputError(f"--budgets: {part.strip()!r} is not a budget (a sweep needs sizes or ratios)")
        out.append(budget)
    if not out:
        raise InputError("--budgets: give at least one budget, e.g. 0.9x,0.7x,8GiB")
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


# --------------------------------------------------------------------- writers
CSV_FIELDS = (
    "budget_bytes",
    "budget_ratio",
    "strategy",
    "status",
    "peak_bytes",
    "cost",
    "overhead",
    "est_seconds",
    "recomputations",
    "solve_seconds",
    "on_frontier",
    "message",
)


def tradeoff_to_csv(t: Tradeoff) -> str:
    """One row per (budget, strategy), raw values; empty fields where there is no plan."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for p in t.points:
        writer.writerow(
            [
                p.budget_bytes,
                _num(p.budget_ratio),
                p.strategy,
                p.status,
                _num(p.peak_bytes),
                _num(p.cost),
                _num(p.overhead),
                _num(p.est_seconds),
                _num(p.recomputations),
                _num(None if p.solve_seconds is None else round(p.solve_seconds, 6)),
                "true" if p.on_frontier else "false",
                p.message,
            ]
        )
    return buf.getvalue()


def tradeoff_to_json(t: Tradeoff) -> dict[str, Any]:
    """The ``remat-tradeoff`` v1 document: raw bytes, costs and ratios."""
    return {
        "format": "remat-tradeoff",
        "version": 1,
        "graph": {"name": t.graph_name, "sha256": t.graph_sha256, "nodes": t.nodes, "cost_unit": t.cost_unit},
        "fixed_bytes": t.fixed_bytes,
        "lower_bound_bytes": t.lower_bound_bytes,
        "store_all_peak_bytes": t.store_all_peak_bytes,
        "base_cost": t.base_cost,
        "base_seconds": t.base_seconds,
        "strategies": list(t.strategies),
        "budgets": [{"bytes": b, "ratio": _ratio(b, t.store_all_peak_bytes)} for b in t.budgets],
        "points": [_point_json(p) for p in t.points],
        "frontier": [
            {"strategy": p.strategy, "budget_bytes": p.budget_bytes, "peak_bytes": p.peak_bytes, "cost": p.cost, "overhead": _finite(p.overhead), "est_seconds": p.est_seconds}
            for p in t.frontier
        ],
        "smallest": [
            {
                "strategy": b.strategy,
                "smallest_budget_bytes": b.smallest_budget_bytes,
                "smallest_budget_ratio": None if b.smallest_budget_bytes is None else _ratio(b.smallest_budget_bytes, t.store_all_peak_bytes),
                "lowest_peak_bytes": b.lowest_peak_bytes,
                "overhead_at_lowest": _finite(b.overhead_at_lowest),
                "est_seconds_at_lowest": b.est_seconds_at_lowest,
                "stated_min_budget_bytes": b.stated_min_budget_bytes,
                "fits": b.fits,
                "errors": b.errors,
                "search": b.search,
                "search_failed_bytes": b.search_failed_bytes,
                "search_tolerance_bytes": b.search_tolerance_bytes,
                "monotone": b.monotone,
                "smallest_swept_budget_bytes": b.smallest_swept_budget_bytes,
            }
            for b in t.best
        ],
    }


# --------------------------------------------------------------------- helpers
def _resolve(b: Budget | int, ref: int, lb: int) -> int:
    if isinstance(b, Budget):
        value = b.resolve(ref, lb)
        if value is None:
            raise InputError("a sweep needs sizes or ratios, not 'none'")
        return value
    return int(b)


def _ratio(b: int, ref: int) -> float:
    return b / ref if ref > 0 else math.inf


def _run(graph: Graph, strat: Strategy, budget: int | None, ref: int, options: Mapping[str, Any] | None) -> SweepPoint:
    """One plan; ``budget=None`` for strategies that ignore budgets."""
    b = ref if budget is None else budget
    ratio = _ratio(b, ref)
    if budget is not None and budget < graph.lb:
        return SweepPoint(strat.name, b, ratio, BELOW_LB, message=f"below the lower bound {graph.lb} B", min_budget_hint=graph.lb)
    try:
        plan = make_plan(graph, strat, budget, options, reference_peak=ref)
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
    ratio = _ratio(budget, ref)
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


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _num(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else ""
    return str(x)


def _point_json(p: SweepPoint) -> dict[str, Any]:
    return {
        "strategy": p.strategy,
        "budget_bytes": p.budget_bytes,
        "budget_ratio": _finite(p.budget_ratio),
        "status": p.status,
        "fits": p.fits,
        "peak_bytes": p.peak_bytes,
        "cost": p.cost,
        "overhead": _finite(p.overhead),
        "est_seconds": p.est_seconds,
        "recomputations": p.recomputations,
        "solve_seconds": None if p.solve_seconds is None else round(p.solve_seconds, 6),
        "on_frontier": p.on_frontier,
        "message": p.message or None,
    }
