"""Rendering of a trade-off sweep (:func:`remat_cli.sweep.sweep`): CSV rows and the
``remat-tradeoff`` v1 JSON document, raw values throughout. Tables and plots of it live
in :mod:`remat_cli.report.tables` and :mod:`remat_cli.report.plots`.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from remat_cli.plandoc import finite_or_none as _finite
from remat_cli.sweep import SweepPoint, Tradeoff, budget_ratio

__all__ = ["tradeoff_to_json", "tradeoff_to_csv", "CSV_FIELDS"]


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
        "budgets": [{"bytes": b, "ratio": budget_ratio(b, t.store_all_peak_bytes)} for b in t.budgets],
        "points": [_point_json(p) for p in t.points],
        "frontier": [
            {
                "strategy": p.strategy,
                "budget_bytes": p.budget_bytes,
                "peak_bytes": p.peak_bytes,
                "cost": p.cost,
                "overhead": _finite(p.overhead),
                "est_seconds": p.est_seconds,
            }
            for p in t.frontier
        ],
        "smallest": [
            {
                "strategy": b.strategy,
                "smallest_budget_bytes": b.smallest_budget_bytes,
                "smallest_budget_ratio": None
                if b.smallest_budget_bytes is None
                else budget_ratio(b.smallest_budget_bytes, t.store_all_peak_bytes),
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
