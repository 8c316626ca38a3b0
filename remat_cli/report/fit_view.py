"""``remat fit``: the answer as a table for people and as JSON for machines."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from remat_cli.fit import FitPoint, FitResult
from remat_cli.units import fmt_bytes, fmt_pct, fmt_seconds, visible

__all__ = ["fit_to_json", "render_fit", "ASSUMPTION"]

ASSUMPTION = (
    "memory grows with the dimension: the search doubles, then bisects; the value found fits and the next one was probed and does not"
)


def _point(p: FitPoint | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {**asdict(p), "throughput": p.throughput}


def fit_to_json(result: FitResult) -> dict[str, Any]:
    """The answer: the found value under ``value`` (null when even 1 does not fit)."""
    return {
        "dim": result.dim,
        "value": result.best.value if result.best else None,
        "budget_bytes": result.budget_bytes,
        "max_overhead": result.max_overhead,
        "strategy": result.strategy,
        "plan": _point(result.best),
        "first_too_large": result.first_too_large,
        "store_all": _point(result.store_all),
        "throughput_gain": result.throughput_gain,
        "max_value": result.max_value,
        "min_value": result.min_value,
        "probes": [asdict(p) for p in result.probes],
        "store_all_probes": [asdict(p) for p in result.store_all_probes],
        "assumes": ASSUMPTION,
    }


def render_fit(result: FitResult, console: Console, name: str) -> None:
    """Value, peak, overhead, est. step time and throughput with the strategy and with
    store-all; the throughput gain; the first value that did not fit and why."""
    dim = result.dim
    limit = f", overhead <= {fmt_pct(result.max_overhead)}" if result.max_overhead is not None else ""
    console.print(
        f"largest {visible(dim)} for {visible(name)} within {fmt_bytes(result.budget_bytes)}{limit}", markup=False, highlight=False
    )
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("plan", dim, "peak", "overhead", "est. step", f"{dim}/s"):
        table.add_column(col, justify="left" if col == "plan" else "right")
    rows = [(f"{result.strategy}", result.best)]
    if result.strategy != "store-all":
        rows.append(("store-all", result.store_all))
    for label, p in rows:
        if p is None:
            table.add_row(label, "none", "-", "-", "-", "-")
            continue
        if p.strategy != label:
            label = f"{label} ({p.strategy})"
        tput = f"{p.throughput:,.1f}" if p.throughput is not None else "-"
        table.add_row(label, f"{p.value:,}", fmt_bytes(p.peak_bytes), fmt_pct(p.overhead), fmt_seconds(p.est_seconds), tput)
    console.print(table)
    gain = result.throughput_gain
    if gain is not None and result.best and result.store_all:
        console.print(
            f"throughput gain {fmt_pct(gain)} ({dim}/s: {result.best.value:,} with recomputation vs {result.store_all.value:,} without)",
            markup=False,
            highlight=False,
        )
    if result.first_too_large is not None:
        why = next((p.reason for p in result.probes if p.value == result.first_too_large), "")
        console.print(f"{dim}={result.first_too_large:,} does not fit ({why})", markup=False, highlight=False)
    elif result.best is not None:
        console.print(f"{dim}={result.best.value:,} is the largest value tried (--max-value)", markup=False, highlight=False)
    console.print(f"assumes memory grows with {dim} (doubling, then bisection)", markup=False, highlight=False)
