"""Rich tables for the terminal (plain aligned text when piped), and their JSON twins."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from remat_cli.plan import Plan, metrics_to_json, plan_to_json
from remat_cli.report.units import fmt_bytes, fmt_cost, fmt_count, fmt_pct, fmt_ratio, fmt_seconds
from remat_cli.simulate import Metrics
from remat_cli.summary import GraphSummary

__all__ = ["render_info", "render_plan", "render_metrics", "summary_to_json", "plan_report_json", "kv_table"]


def kv_table(console: Console, title: str | None = None) -> Table:
    """A two-column key/value table that reads well on a terminal and when piped."""
    table = Table(
        title=title,
        show_header=False,
        box=box.SIMPLE if console.is_terminal else None,
        pad_edge=False,
        title_justify="left",
    )
    table.add_column(style="bold" if console.is_terminal else None, no_wrap=True)
    table.add_column(overflow="fold")
    return table


def _list_table(console: Console, title: str, columns: list[tuple[str, str]]) -> Table:
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD if console.is_terminal else None,
        pad_edge=False,
        title_justify="left",
    )
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    return table


def render_info(s: GraphSummary, console: Console) -> None:
    """``remat info``: counts, bounds, store-all, memory by op, largest values."""
    t = kv_table(console, f"graph {s.name}")
    t.add_row("nodes", f"{fmt_count(s.nodes)} ({', '.join(f'{v} {k}' for k, v in s.kinds.items())})")
    t.add_row("edges", fmt_count(s.edges))
    t.add_row("targets", f"{fmt_count(s.targets)} (needed nodes: {fmt_count(s.needed)})")
    t.add_row("fixed memory", fmt_bytes(s.fixed_bytes))
    t.add_row("activations (all)", fmt_bytes(s.activation_bytes))
    t.add_row("lower bound", f"{fmt_bytes(s.lower_bound_bytes)}  at {s.lower_bound_node} ({s.lower_bound_op or 'op'})")
    t.add_row("store-all peak", f"{fmt_bytes(s.store_all.peak_bytes)}  (order: {s.store_all_order})")
    t.add_row("base cost", f"{fmt_cost(s.base_cost, s.cost_unit)} ({s.cost_unit})")
    if s.base_seconds is not None:
        t.add_row("est. step time", fmt_seconds(s.base_seconds))
    for key, value in s.extra.items():
        t.add_row(str(key), str(value))
    console.print(t)
    ops = _list_table(console, "memory by op type (needed nodes)", [("op", "left"), ("count", "right"), ("memory", "right"), ("share", "right"), ("cost", "right")])
    total = max(s.activation_bytes, 1)
    for share in s.by_op[:12]:
        ops.add_row(share.op, fmt_count(share.count), fmt_bytes(share.mem_bytes), f"{100 * share.mem_bytes / total:.1f}%", fmt_cost(share.cost, s.cost_unit))
    if len(s.by_op) > 12:
        ops.add_row(f"… {len(s.by_op) - 12} more", "", "", "", "")
    console.print(ops)
    big = _list_table(console, "largest values", [("node", "left"), ("op", "left"), ("size", "right")])
    for node, op, size in s.largest:
        big.add_row(node, op, fmt_bytes(size))
    console.print(big)


def summary_to_json(s: GraphSummary) -> dict[str, Any]:
    out = asdict(s)
    out["store_all"] = metrics_to_json(s.store_all)
    out["by_op"] = [asdict(x) for x in s.by_op]
    out["largest"] = [{"id": i, "op": op, "bytes": b} for i, op, b in s.largest]
    return out


def render_metrics(m: Metrics, console: Console, cost_unit: str, title: str) -> Table:
    """Peak, bounds, cost and overhead of one valid schedule, as a key/value table."""
    t = kv_table(console, title)
    t.add_row("peak", f"{fmt_bytes(m.peak_bytes)}  (fixed {fmt_bytes(m.fixed_bytes)} + activations {fmt_bytes(m.activation_peak_bytes)})")
    t.add_row("lower bound", fmt_bytes(m.lower_bound_bytes))
    t.add_row("cost", f"{fmt_cost(m.cost, cost_unit)}  (base {fmt_cost(m.base_cost, cost_unit)})")
    t.add_row("overhead", fmt_pct(m.overhead))
    t.add_row("recomputations", f"{fmt_count(m.recomputations)} of {fmt_count(m.computes)} computes")
    t.add_row("est. seconds", fmt_seconds(m.est_seconds) if m.est_seconds is not None else "- (graph has no time model)")
    t.add_row("steps", fmt_count(m.steps))
    return t


def render_plan(plan: Plan, console: Console) -> None:
    """``remat plan``: the plan's metrics against its budget."""
    m = plan.metrics
    t = render_metrics(m, console, plan.graph.cost_unit, f"plan for {plan.graph.name}: {plan.strategy}")
    if plan.budget_bytes is None:
        t.add_row("budget", "none")
    else:
        t.add_row("budget", f"{fmt_bytes(plan.budget_bytes)} ({fmt_ratio(plan.budget_ratio)} of store-all {fmt_bytes(plan.store_all_peak)}) - fits")
    for key, value in plan.info.items():
        t.add_row(str(key), str(value))
    t.add_row("solve time", fmt_seconds(plan.solve_seconds))
    console.print(t)


def plan_report_json(plan: Plan) -> dict[str, Any]:
    """The report of ``remat plan --format json``: the plan document without its schedule."""
    doc = plan_to_json(plan)
    doc.pop("schedule")
    doc["fits"] = plan.fits
    return doc
