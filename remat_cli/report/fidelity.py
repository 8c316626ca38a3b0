"""``remat fidelity`` as a table for people or JSON for machines."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from remat_cli.units import fmt_bytes, fmt_pct, fmt_seconds, visible

__all__ = ["render_fidelity", "fidelity_to_json"]


def fidelity_to_json(report: Any) -> dict[str, Any]:
    """The JSON document: the captured graph's facts and one object per plan."""
    return {
        "name": report.name,
        "nodes": report.nodes,
        "device": report.device,
        "runs": report.runs,
        "store_all_peak_bytes": report.store_all_peak,
        "lower_bound_bytes": report.lower_bound,
        "fixed_bytes": report.fixed_bytes,
        "provenance": report.provenance,
        "plans": [row.to_json() for row in report.rows],
    }


def render_fidelity(report: Any, console: Console) -> None:
    """Predicted against measured, one row per plan; notes (no fit, sac) below."""
    console.print(f"fidelity for {visible(report.name)}: {report.nodes} nodes ({report.device})", markup=False)
    console.print(
        f"fixed {fmt_bytes(report.fixed_bytes)}, store-all {fmt_bytes(report.store_all_peak)}, "
        f"lower bound {fmt_bytes(report.lower_bound)}; seconds: median of {report.runs} steps",
        markup=False,
    )
    table = Table(box=None, pad_edge=False, show_edge=False, collapse_padding=True)
    for col in ("strategy", "budget", "peak", "measured", "ratio", "+FLOPs", "measured", "time", "measured", "exec", "fb", "grads"):
        table.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
    notes = []
    for row in report.rows:
        if row.measured_peak_bytes is None:
            notes.append(f"{row.strategy}: {row.note}")
            table.add_row(row.strategy, fmt_bytes(row.budget_bytes), "no fit", *[""] * 9)
            continue
        if row.note and row.strategy != "eager" and not row.strategy.endswith("+sac"):
            notes.append(f"{row.strategy}: {row.note}")
        ratio = row.peak_ratio
        table.add_row(
            row.strategy,
            fmt_bytes(row.budget_bytes) if row.budget_bytes is not None else "-",
            fmt_bytes(row.predicted_peak_bytes),
            fmt_bytes(row.measured_peak_bytes),
            "-" if ratio is None else f"{ratio:.3f}",
            fmt_pct(row.predicted_overhead),
            fmt_pct(row.measured_flops_overhead),
            fmt_seconds(row.predicted_seconds),
            fmt_seconds(row.measured_seconds),
            fmt_pct(row.executor_overhead),
            "-" if row.fallbacks is None else str(row.fallbacks),
            "-" if row.grads_match is None else ("equal" if row.grads_match else f"DIFFER {row.max_grad_error:.0e}"),
        )
    console.print(table)
    console.print(
        "peak, +FLOPs (extra over store-all), time: predicted, then measured; fixed memory "
        "included; ratio = measured / predicted peak; exec = the step's own time over eager's "
        "(scaled by its measured FLOPs); fb = fallback recomputations. eager: "
        "PyTorch's own step; +sac: the plan's keep-set as a checkpoint policy.",
        markup=False,
    )
    for note in notes:
        console.print(f"  {note}", markup=False, soft_wrap=True)
