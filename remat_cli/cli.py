"""The ``remat`` command line: thin click commands that parse, call the library, render.

Every failure the user can cause becomes one line on stderr and exit code 2 (bad input)
or 1 (no plan fits / a check failed); see DESIGN §5.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from remat_cli import __version__
from remat_cli.budget import Budget, parse_budget
from remat_cli.errors import EXIT_FAILED, InputError, RematError
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.loaders import remat_json, twremat
from remat_cli.plan import read_plan, write_plan
from remat_cli.planner import make_plan
from remat_cli.report.tables import (
    plan_report_json,
    render_info,
    render_metrics,
    render_plan,
    summary_to_json,
)
from remat_cli.simulate import simulate
from remat_cli.strategies import STRATEGIES
from remat_cli.summary import summarize

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class BudgetType(click.ParamType):
    """``12GiB``, ``800MB``, ``123456``, ``0.5x``, ``50%`` or ``none``."""

    name = "BUDGET"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Budget:
        if isinstance(value, Budget):
            return value
        try:
            return parse_budget(str(value))
        except InputError as exc:
            self.fail(exc.message, param, ctx)


class RematGroup(click.Group):
    """Turns :class:`RematError` into one line on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RematError as exc:
            _stderr().print(f"remat: error: {exc.message}", highlight=False, markup=False, soft_wrap=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            _stderr().print("remat: interrupted", highlight=False)
            ctx.exit(130)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _stdout() -> Console:
    return Console(highlight=False)


def graph_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by every command that reads a graph."""
    return func


def _load_options(**kwargs: Any) -> LoadOptions:
    return LoadOptions()


FORMAT_OPTION = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for machines.",
)


@click.group(cls=RematGroup, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="remat")
def cli() -> None:
    """Make neural-network training fit in memory by recomputing instead of storing.

    remat reads a computation graph (ONNX, remat JSON, node-link JSON or twremat text),
    plans which values to keep and which to recompute under a memory budget, checks every
    plan with one simulator, and reports peak memory against extra compute.

    \b
    Examples:
      remat info sample_graphs/unet_train.json
      remat plan sample_graphs/unet_train.json --strategy store-all
      remat plan model.onnx --budget 12GiB -o plan.json
      remat validate model.onnx plan.json

    Budgets are sizes (12GiB, 800MB, 123456 bytes) or ratios of the store-all peak
    (0.5x, 50%). Exit codes: 0 ok, 1 no plan fits or a check failed, 2 bad input.
    """


@cli.command(context_settings=CONTEXT)
@click.argument("graph_file", metavar="GRAPH", type=click.Path(dir_okay=False))
@click.option("--decompose/--no-decompose", default=True, show_default=True, help="Also find treewidth and pathwidth upper bounds (moral skeleton) and time them.")
@graph_options
@FORMAT_OPTION
def info(graph_file: str, fmt: str, decompose: bool, **graph_kw: Any) -> None:
    """Describe a graph: size, lower bound, store-all peak, where the memory is."""
    graph = load_graph(graph_file, _load_options(**graph_kw))
    summary = summarize(graph, decompose=decompose)
    if fmt == "json":
        click.echo(json.dumps(summary_to_json(summary), indent=1))
    else:
        render_info(summary, _stdout())


@cli.command(context_settings=CONTEXT)
@click.argument("graph_file", metavar="GRAPH", type=click.Path(dir_okay=False))
@click.option("-s", "--strategy", default="store-all", show_default=True, metavar="NAME", help="Strategy to plan with; see `remat strategies`.")
@click.option("-b", "--budget", type=BudgetType(), default="none", show_default=True, help="Memory budget, fixed memory included: 12GiB, 800MB, 123456, 0.5x, 50% or none.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the plan: remat-plan JSON, or twremat c/f text if it ends in .txt.")
@graph_options
@FORMAT_OPTION
def plan(graph_file: str, strategy: str, budget: Budget, output: str | None, fmt: str, **graph_kw: Any) -> None:
    """Plan a schedule for GRAPH under a memory budget and report what it costs.

    The plan is replayed by the simulator before anything is printed; a plan that does
    not fit the budget is never reported as fitting (exit 1, naming the smallest budget
    the strategy can meet when known).
    """
    graph = load_graph(graph_file, _load_options(**graph_kw))
    result = make_plan(graph, strategy, budget)
    if output:
        write_plan(result, output)
    if fmt == "json":
        click.echo(json.dumps(plan_report_json(result), indent=1))
    else:
        console = _stdout()
        render_plan(result, console)
        if output:
            console.print(f"plan written to {output}")


@cli.command(context_settings=CONTEXT)
@click.argument("graph_file", metavar="GRAPH", type=click.Path(dir_okay=False))
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("-b", "--budget", type=BudgetType(), default="none", help="Also fail (exit 1) if the plan peaks above this budget.")
@graph_options
@FORMAT_OPTION
def validate(graph_file: str, plan_file: str, budget: Budget, fmt: str, **graph_kw: Any) -> None:
    """Replay PLAN (remat-plan JSON or twremat c/f text) on GRAPH and print its metrics.

    Exit 1 with the first invalid step if the plan breaks a rule, or if it peaks above
    --budget.
    """
    from remat_cli.planner import resolve_budget

    graph = load_graph(graph_file, _load_options(**graph_kw))
    schedule, _header = read_plan(plan_file, graph)
    result = simulate(graph, schedule)
    if result.error is not None:
        if fmt == "json":
            click.echo(json.dumps({"valid": False, "step": result.error.step, "node": result.error.node, "reason": result.error.reason}))
        raise RematError(f"{plan_file}: invalid at {result.error}", EXIT_FAILED)
    m = result.metrics
    assert m is not None
    budget_bytes = resolve_budget(graph, budget)
    over = budget_bytes is not None and m.peak_bytes > budget_bytes
    if fmt == "json":
        from remat_cli.plan import metrics_to_json

        doc = metrics_to_json(m)
        doc["budget_bytes"] = budget_bytes
        doc["fits"] = not over
        click.echo(json.dumps(doc, indent=1))
    else:
        console = _stdout()
        console.print(render_metrics(m, console, graph.cost_unit, f"{plan_file}: valid"))
    if over:
        raise RematError(f"{plan_file}: peak {m.peak_bytes} B is above the budget {budget_bytes} B", EXIT_FAILED)


@cli.command(context_settings=CONTEXT)
@click.argument("input_file", metavar="IN", type=click.Path(dir_okay=False))
@click.argument("output_file", metavar="OUT", type=click.Path(dir_okay=False))
@click.option("--to", "to", type=click.Choice(["remat-json", "twremat"]), default=None, help="Output format (default: twremat for .txt, else remat JSON).")
@graph_options
def convert(input_file: str, output_file: str, to: str | None, **graph_kw: Any) -> None:
    """Convert any graph file remat reads into remat JSON (or twremat text)."""
    graph = load_graph(input_file, _load_options(**graph_kw))
    if to is None:
        to = "twremat" if Path(output_file).suffix == ".txt" else "remat-json"
    text = twremat.dumps(graph) if to == "twremat" else remat_json.dumps(graph)
    try:
        Path(output_file).write_text(text)
    except OSError as exc:
        raise InputError(f"{output_file}: cannot write: {exc.strerror or exc}") from None
    _stderr().print(f"wrote {output_file} ({to}, {graph.n} nodes, {graph.num_edges} edges)")


@cli.command(context_settings=CONTEXT)
@FORMAT_OPTION
def strategies(fmt: str) -> None:
    """List the planning strategies and what each does."""
    rows = [
        {"name": s.name, "uses_budget": s.uses_budget, "fast": s.fast, "summary": s.summary, "reference": s.reference}
        for s in STRATEGIES.values()
    ]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    from remat_cli.report.tables import kv_table

    console = _stdout()
    table = kv_table(console, "strategies")
    for row in rows:
        notes = [] if row["uses_budget"] else ["ignores --budget"]
        if not row["fast"]:
            notes.append("slow: not run by auto")
        text = row["summary"] + (f" [{'; '.join(notes)}]" if notes else "")
        table.add_row(row["name"], text)
    console.print(table)


def main() -> None:
    """Console entry point."""
    try:
        cli.main(prog_name="remat")
    except BrokenPipeError:  # pragma: no cover - `remat … | head`
        sys.stderr.close()
        sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
