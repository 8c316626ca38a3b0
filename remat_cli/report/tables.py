"""Rich tables for the terminal (plain aligned text when piped), and their JSON twins."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from remat_cli.plandoc import Plan, metrics_to_json, plan_to_json
from remat_cli.report.facts import PlanFacts, plan_facts
from remat_cli.report.plain import PlainConsole, PlainTable
from remat_cli.schedule import Schedule
from remat_cli.units import fmt_bytes, fmt_cost, fmt_count, fmt_pct, fmt_ratio, fmt_seconds, say, shorten_all, visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from remat_cli.bounds import StructuralBound
    from remat_cli.simulate import Metrics
    from remat_cli.summary import GraphSummary
    from remat_cli.sweep import SweepPoint, Tradeoff

# rich is imported where a table is drawn, not at import: `remat plan --format json`
# never draws one, and rich.console + rich.table cost 60-100 ms of start-up (issue 14).

_NO_STEPS = Schedule.from_steps(())

__all__ = [
    "render_info",
    "render_plan",
    "render_metrics",
    "render_tradeoff",
    "summary_to_json",
    "plan_report_json",
    "kv_table",
]


@functools.cache
def _plain_table_class() -> type[Table]:
    """The table class of :func:`_plain_table` (made once rich is first needed)."""
    from rich.table import Table
    from rich.text import Text

    class _PlainTable(Table):
        """A table whose string cells are shown as they are, never read as rich markup:
        cells hold names from files (``[/x]`` must not crash, ``[bold red]`` must not style)."""

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            super().add_row(*(Text(visible(r)) if isinstance(r, str) else r for r in renderables), **kwargs)

    return _PlainTable


def _plain_table(**kwargs: Any) -> Table:
    """A rich table whose string cells are plain text, never markup."""
    return _plain_table_class()(**kwargs)


def kv_table(console: Console | PlainConsole, title: str | None = None) -> Table | PlainTable:
    """A two-column key/value table that reads well on a terminal and when piped."""
    terminal = console.is_terminal
    table = _new_table(
        console,
        title,
        escape_title=True,  # titles name files and graphs
        show_header=False,
        box=_box("SIMPLE") if terminal else None,
        pad_edge=False,
        title_justify="left",
    )
    table.add_column(style="bold" if terminal else None, no_wrap=True)
    table.add_column(overflow="fold")
    return table


def _list_table(console: Console | PlainConsole, title: str, columns: list[tuple[str, str]]) -> Table | PlainTable:
    table = _new_table(
        console,
        title,
        box=_box("SIMPLE_HEAD") if console.is_terminal else None,
        pad_edge=False,
        title_justify="left",
    )
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    return table


def _new_table(console: Console | PlainConsole, title: str | None, *, escape_title: bool = False, **options: Any) -> Any:
    """A table for ``console``: a :class:`PlainTable` for a plain console (drawn without
    rich where it can be), else rich's table with plain cells."""
    if isinstance(console, PlainConsole):
        return PlainTable(title=title, escape_title=escape_title, **options)
    return rich_table(title, escape_title=escape_title, **options)


def rich_table(title: str | None, *, escape_title: bool = False, **options: Any) -> Table:
    """rich's table with plain cells, its title escaped where it names files or graphs
    (rich reads titles as markup)."""
    if title is not None:
        title = visible(title)
    if escape_title and title is not None:
        from rich.markup import escape

        title = escape(title)
    return _plain_table(title=title, **options)


def _box(name: str) -> Any:
    """A rich box style by name (rich is imported only for a terminal)."""
    from rich import box

    return getattr(box, name)


def render_info(s: GraphSummary, console: Console | PlainConsole) -> None:
    """``remat info``: counts, bounds, store-all, memory by op, largest values."""
    t = kv_table(console, f"graph {s.name}")
    t.add_row("nodes", f"{fmt_count(s.nodes)} ({', '.join(f'{v} {k}' for k, v in s.kinds.items())})")
    t.add_row("edges", fmt_count(s.edges))
    t.add_row("targets", f"{fmt_count(s.targets)} (needed nodes: {fmt_count(s.needed)})")
    t.add_row("fixed memory", fmt_bytes(s.fixed_bytes))
    t.add_row("activations (all)", fmt_bytes(s.activation_bytes))
    t.add_row("lower bound", f"{fmt_bytes(s.lower_bound_bytes)}  at {s.lower_bound_node} ({s.lower_bound_op or 'op'})")
    if s.structural_bound is not None:
        t.add_row("structural bound", structural_bound_text(s.structural_bound))
    t.add_row("store-all peak", f"{fmt_bytes(s.store_all.peak_bytes)}  (order: {s.store_all_order})")
    t.add_row("base cost", f"{fmt_cost(s.base_cost, s.cost_unit)} ({s.cost_unit})")
    if s.base_seconds is not None:
        t.add_row("est. step time", fmt_seconds(s.base_seconds))
    for key, value in s.extra.items():
        t.add_row(str(key), str(say(value)))
    console.print(t)
    ops = _list_table(
        console,
        "memory by op type (needed nodes)",
        [("op", "left"), ("count", "right"), ("memory", "right"), ("share", "right"), ("cost", "right")],
    )
    total = max(s.activation_bytes, 1)
    for share in s.by_op[:12]:
        ops.add_row(
            share.op,
            fmt_count(share.count),
            fmt_bytes(share.mem_bytes),
            f"{100 * share.mem_bytes / total:.1f}%",
            fmt_cost(share.cost, s.cost_unit),
        )
    if len(s.by_op) > 12:
        ops.add_row(f"… {len(s.by_op) - 12} more", "", "", "", "")
    console.print(ops)
    big = _list_table(console, "largest values", [("node", "left"), ("op", "left"), ("size", "right")])
    names = shorten_all([node for node, _, _ in s.largest], 48)  # cut in the middle, still distinct
    for (_node, op, size), name in zip(s.largest, names):
        big.add_row(name, op, fmt_bytes(size))
    console.print(big)


def structural_bound_text(b: StructuralBound) -> str:
    """One line: the proven bound, how it compares with the largest-operation bound, and
    how far its argument searched (bounds.py)."""
    steps = f"searched {b.depth} steps back" + ("" if b.complete else ", cut short")
    if b.argument == "reach search":
        steps = "reach search" + ("; the least peak of any schedule" if b.exact else ", cut short")
    if b.bytes > b.op_bound_bytes:
        return f"{fmt_bytes(b.bytes)}  at {b.node} ({b.gain:.3f}x the lower bound; {steps})"
    return f"{fmt_bytes(b.bytes)}  (same as the lower bound; {steps})"


def summary_to_json(s: GraphSummary) -> dict[str, Any]:
    out = asdict(s)
    out["extra"] = {k: say(v) for k, v in s.extra.items()}
    out["store_all"] = metrics_to_json(s.store_all)
    out["by_op"] = [asdict(x) for x in s.by_op]
    out["largest"] = [{"id": i, "op": op, "bytes": b} for i, op, b in s.largest]
    return out


def render_metrics(
    m: Metrics, console: Console | PlainConsole, cost_unit: str, title: str, *, base_seconds: float | None = None
) -> Table | PlainTable:
    """Peak, bounds, cost and overhead of one valid schedule, as a key/value table.

    ``base_seconds`` (one pass of every needed node) adds the time overhead in seconds.
    """
    t = kv_table(console, title)
    t.add_row("peak", f"{fmt_bytes(m.peak_bytes)}  (fixed {fmt_bytes(m.fixed_bytes)} + activations {fmt_bytes(m.activation_peak_bytes)})")
    t.add_row("lower bound", fmt_bytes(m.lower_bound_bytes))
    t.add_row("cost", f"{fmt_cost(m.cost, cost_unit)}  (base {fmt_cost(m.base_cost, cost_unit)})")
    t.add_row("overhead", fmt_pct(m.overhead))
    t.add_row("recomputations", f"{fmt_count(m.recomputations)} of {fmt_count(m.computes)} computes")
    if m.est_seconds is None:
        t.add_row("est. seconds", "- (graph has no time model)")
    elif base_seconds is None:
        t.add_row("est. seconds", fmt_seconds(m.est_seconds))
    else:
        extra = m.est_seconds - base_seconds
        if extra <= 1e-9 * max(base_seconds, 1e-12):  # float noise: every needed node runs once
            extra = 0.0
        t.add_row("est. seconds", f"{fmt_seconds(m.est_seconds)}  (base {fmt_seconds(base_seconds)}, +{fmt_seconds(extra)})")
    t.add_row("steps", fmt_count(m.steps))
    return t


# What a strategy's ``info`` says, in a practitioner's words: key -> label in the report.
# Other keys (solver internals: slot sizes, unit-size bounds, timings) are shown only with
# --verbose, and always in --format json.
_INFO_LABELS = {
    "winner": "chosen strategy",
    "mode": "method",
    "status": "solver status",
    "segments": "segments",
    "width": "decomposition width",
}


def render_plan(plan: Plan, console: Console | PlainConsole, facts: PlanFacts | None = None, *, verbose: bool = False) -> None:
    """``remat plan``: the plan's metrics against its budget, what it recomputes most and
    how much of the forward pass it keeps. Strategy internals only with ``verbose``."""
    facts = facts or plan_facts(plan)
    m = plan.metrics
    t = render_metrics(m, console, plan.graph.cost_unit, f"plan for {plan.graph.name}: {plan.strategy}", base_seconds=facts.base_seconds)
    if plan.budget_bytes is None:
        t.add_row("budget", "none")
    else:
        t.add_row(
            "budget",
            f"{fmt_bytes(plan.budget_bytes)} ({fmt_ratio(plan.budget_ratio)} of store-all {fmt_bytes(plan.store_all_peak)}) - fits",
        )
    if facts.bound is not None and (verbose or facts.bound.bytes > facts.bound.op_bound_bytes):
        t.add_row("structural bound", structural_bound_text(facts.bound))  # news only when higher
    if m.recomputations:
        t.add_row("recomputed values", f"{fmt_count(facts.recomputed_nodes)} distinct")
    fw = facts.forward
    label = "forward kept" if plan.graph.is_training else "computed once"
    t.add_row(
        label,
        f"{fmt_count(fw.kept_nodes)} of {fmt_count(fw.nodes)} values ({100 * fw.fraction:.0f}%), "
        f"{fmt_bytes(fw.kept_bytes)} of {fmt_bytes(fw.bytes)} ({100 * fw.bytes_fraction:.0f}%)",
    )
    rows, hidden = _info_rows(plan.info, verbose)
    for key, value in rows:
        t.add_row(key, value)
    t.add_row("solve time", fmt_seconds(plan.solve_seconds))
    if hidden:
        t.add_row("details", f"{hidden} more about {plan.strategy}: --verbose or --format json")
    console.print(t)
    if facts.recomputed_most:
        most = _list_table(console, "values recomputed most", [("node", "left"), ("op", "left"), ("size", "right"), ("computes", "right")])
        width = 10_000 if verbose else 48
        nodes = shorten_all([r.node for r in facts.recomputed_most], width)
        ops = shorten_all([r.op for r in facts.recomputed_most], 10_000 if verbose else 20)
        for r, node, op in zip(facts.recomputed_most, nodes, ops):
            most.add_row(node, op, fmt_bytes(r.bytes), f"{r.computes}x")
        console.print(most)


def _info_rows(info: Mapping[str, Any], verbose: bool) -> tuple[list[tuple[str, str]], int]:
    """A strategy's facts as rows, and how many details were left out (shown with
    ``verbose``); exact's proof scope and bounds are always said, in words."""
    rows: list[tuple[str, str]] = []
    hidden = 0
    for key, value in info.items():
        if key == "optimal_over":
            from remat_cli.strategies import exact  # only exact's plans say it

            scope = {
                exact.OVER_ALL: "all schedules (proven)",
                exact.OVER_EVERY_ORDER: "Checkmate's model for every order of first computations "
                "(each value computed at most once between two first computations)",
                exact.OVER_NOTHING: f"nothing proven ({info.get('status')})",
            }
            if value == exact.OVER_ORDER:
                order = list(info.get("order", []))
                shown = ", ".join(order[:4]) + (f", … {order[-1]}" if len(order) > 4 else "")
                text = f"schedules that first compute nodes in the order {shown} ({len(order)} nodes)"
            else:
                text = scope.get(value, str(value))
            rows.append(("best over", text))
        elif key == "lower_bound":
            rows.append(("cost lower bound", f"{value:g} (over all schedules)"))
        elif key == "model_bound":
            rows.append(("bound in the model", f"{value:g} (over the schedules above only)"))
        elif key == "order":
            continue
        elif key in _INFO_LABELS:
            rows.append((_INFO_LABELS[key], str(say(value))))
        elif verbose:
            rows.append((str(key).replace("_", " "), str(say(value))))
        else:
            hidden += 1
    return rows, hidden


def plan_report_json(plan: Plan, facts: PlanFacts | None = None) -> dict[str, Any]:
    """The report of ``remat plan --format json``: the plan document without its schedule,
    plus the report's derived facts (raw bytes, counts and seconds)."""
    facts = facts or plan_facts(plan)
    doc = plan_to_json(replace(plan, schedule=_NO_STEPS))  # not a name per step, to drop
    doc.pop("schedule")
    doc["fits"] = plan.fits
    doc["activation_peak_bytes"] = plan.metrics.activation_peak_bytes
    doc["base_seconds"] = facts.base_seconds
    doc["recomputed_values"] = facts.recomputed_nodes
    if facts.bound is not None:
        doc["structural_bound"] = asdict(facts.bound)
    doc["recomputed_most"] = [asdict(r) for r in facts.recomputed_most]
    fw = facts.forward
    doc["forward_kept"] = {
        "nodes": fw.nodes,
        "kept_nodes": fw.kept_nodes,
        "bytes": fw.bytes,
        "kept_bytes": fw.kept_bytes,
        "fraction": fw.fraction,
        "bytes_fraction": fw.bytes_fraction,
    }
    return doc


# ------------------------------------------------------------------ trade-off
def render_tradeoff(t: Tradeoff, console: Console) -> None:
    """``remat tradeoff``: reference figures, the budget x strategy grid (split so each
    table fits the console width), the Pareto frontier, and each strategy's best."""
    head = kv_table(console, f"trade-off for {t.graph_name}")
    head.add_row("lower bound", fmt_bytes(t.lower_bound_bytes) + (f"  (fixed {fmt_bytes(t.fixed_bytes)})" if t.fixed_bytes else ""))
    head.add_row("store-all peak", fmt_bytes(t.store_all_peak_bytes))
    base = f"{fmt_cost(t.base_cost, t.cost_unit)} ({t.cost_unit})"
    if t.base_seconds is not None:
        base += f", est. {fmt_seconds(t.base_seconds)}"
    head.add_row("base cost", base)
    console.print(head)
    console.print()
    width = max(console.width, 40)
    for chunk in _chunks(t.strategies, width):
        grid = _list_table(console, "", [("budget", "right"), ("ratio", "right")] + [(s, "right") for s in chunk])
        grid.title = None
        for b in t.budgets:
            row = [fmt_bytes(b), fmt_ratio(b / t.store_all_peak_bytes if t.store_all_peak_bytes else None)]
            row += [_cell(t.point(b, s), t.has_seconds) for s in chunk]
            grid.add_row(*row)
        console.print(grid)
    console.print(
        "cells: extra compute" + (" / est. step time" if t.has_seconds else "") + "; * = on the Pareto frontier",
        style="dim" if console.is_terminal else None,
        highlight=False,
    )
    console.print()
    front = _list_table(
        console,
        "Pareto frontier (peak vs cost)",
        [("peak", "right"), ("ratio", "right"), ("overhead", "right")]
        + ([("est. time", "right")] if t.has_seconds else [])
        + [("strategies", "left")],
    )
    front.columns[-1].overflow = "fold"
    groups: dict[tuple[int, float], list[str]] = {}
    first: dict[tuple[int, float], SweepPoint] = {}
    for p in t.frontier:
        key = (int(p.peak_bytes or 0), float(p.cost or 0.0))
        groups.setdefault(key, [])
        if p.strategy not in groups[key]:
            groups[key].append(p.strategy)
        first.setdefault(key, p)
    for key, names in groups.items():
        p = first[key]
        row = [fmt_bytes(p.peak_bytes), fmt_ratio(key[0] / t.store_all_peak_bytes if t.store_all_peak_bytes else None), fmt_pct(p.overhead)]
        if t.has_seconds:
            row.append(fmt_seconds(p.est_seconds))
        row.append(", ".join(names))
        front.add_row(*row)
    console.print(front)
    console.print()
    best = _list_table(
        console,
        "smallest budget each strategy meets",
        [("strategy", "left"), ("smallest budget", "right"), ("lowest peak", "right"), ("overhead", "right")]
        + ([("est. time", "right")] if t.has_seconds else []),
    )
    for b in t.best:
        if b.smallest_budget_bytes is None:
            note = "fits none"
            if b.stated_min_budget_bytes is not None:
                note += f"; needs {fmt_bytes(b.stated_min_budget_bytes)}"
            if b.errors:
                note = f"failed ({b.errors} errors)"
            row = [b.strategy, note, "-", "-"] + (["-"] if t.has_seconds else [])
        else:
            ratio = b.smallest_budget_bytes / t.store_all_peak_bytes if t.store_all_peak_bytes else None
            row = [
                b.strategy,
                f"{fmt_bytes(b.smallest_budget_bytes)} {fmt_ratio(ratio)}",
                fmt_bytes(b.lowest_peak_bytes),
                fmt_pct(b.overhead_at_lowest),
            ]
            if t.has_seconds:
                row.append(fmt_seconds(b.est_seconds_at_lowest))
        best.add_row(*row)
    console.print(best)
    console.print(_smallest_note(t), highlight=False, markup=False, soft_wrap=False)


def _smallest_note(t: Tradeoff) -> str:
    """How the smallest budgets were found, and which are not minimums (issue 10, item 3)."""
    searched = [b for b in t.best if b.search != "grid" and b.smallest_budget_bytes is not None]
    lines = []
    if searched:
        step = fmt_bytes(searched[0].search_tolerance_bytes)
        lines.append(f"smallest budget: searched in {step} steps (0.1% of store-all); plans replayed")
    loose = [b.strategy for b in searched if not b.monotone]
    if loose:
        lines.append(f"{', '.join(loose)}: not monotone in the budget; a smaller budget may fit")
    grid = [b.strategy for b in t.best if b.search == "grid" and b.smallest_budget_bytes is not None]
    if grid:
        lines.append(f"{', '.join(grid)}: not searched (slow): the smallest swept budget")
    return "\n".join(lines)


def _cell(p: SweepPoint, seconds: bool) -> Text:
    """One grid cell: overhead (and est. seconds), a frontier mark, or why there is no plan."""
    from rich.text import Text

    if p.status == "below-lb":
        return Text("< LB", style="dim")
    if p.status == "no-fit":
        return Text("no fit", style="dim")
    if p.status == "error":
        return Text("error", style="red")
    text = fmt_pct(p.overhead) + ("*" if p.on_frontier else " ")
    if seconds and p.est_seconds is not None:
        text += "\n" + fmt_seconds(p.est_seconds) + " "
    style = "bold green" if p.on_frontier else ("yellow" if (p.overhead or 0) > 0.5 else "")
    return Text(text, style=style)


def _chunks(names: tuple[str, ...], width: int) -> list[tuple[str, ...]]:
    """Split strategy columns into groups whose table fits ``width`` columns."""
    fixed = 20  # budget + ratio columns with padding
    out: list[tuple[str, ...]] = []
    cur: list[str] = []
    used = fixed
    for name in names:
        w = max(len(name), 8) + 2
        if cur and used + w > width:
            out.append(tuple(cur))
            cur, used = [], fixed
        cur.append(name)
        used += w
    if cur:
        out.append(tuple(cur))
    return out
