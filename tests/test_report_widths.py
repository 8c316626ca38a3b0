"""Reports in a practitioner's words, within 100 columns (issue 10, item 11): the batch
table, the plan report and its "values recomputed most", rendered at 100 columns; names
cut in the middle so rows never read the same; internals only with --verbose."""

from __future__ import annotations

import io
import re

from rich.console import Console

from remat_cli import training
from remat_cli.batch import Row
from remat_cli.budget import parse_budget
from remat_cli.graph import Graph, NodeSpec
from remat_cli.planner import make_plan
from remat_cli.report.batch_view import render_rows
from remat_cli.report.facts import plan_facts
from remat_cli.report.tables import render_plan
from remat_cli.units import shorten, shorten_all

INTERNAL = ("bare bound", "slot_bytes", "slot bytes", "attach", "optimal_over", "(w+1)")


def _console(width: int = 100, terminal: bool = False) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=terminal, color_system=None, highlight=False), out


def _widths(text: str) -> list[int]:
    return [len(re.sub(r"\x1b\[[0-9;]*m", "", line)) for line in text.splitlines()]


def _rows() -> list[Row]:
    rows = []
    for k in range(6):
        path = f"/home/someone/projects/vision/checkpoints/exported/2024-05-0{k}/densenet121_variant_{k}.onnx"
        for strategy in ("chen-greedy", "treewidth"):
            rows.append(
                Row(
                    file=path,
                    strategy=strategy,
                    budget="0.55x",
                    status="ok" if k % 3 else "no-plan",
                    message=f"{path}: budget 1.01 GiB is below the lower bound 1.23 GiB: node 'bwd:/features/x' needs more",
                    nodes=12345,
                    dims="batch=32 sequence=128",
                    budget_bytes=1084000000 + k,
                    peak_bytes=1070000000 + k,
                    overhead=0.1234,
                    solve_seconds=12.5,
                )
            )
    return rows


def test_batch_table_fits_100_columns_and_keeps_files_apart() -> None:
    for terminal in (False, True):
        console, out = _console(100, terminal)
        render_rows(_rows(), console, "12 rows")
        text = out.getvalue()
        # the table, then one line per failed row saying why, however long (grep-able)
        problems = [line for line in text.splitlines() if "] no-plan: " in line]
        table = "\n".join(line for line in text.splitlines() if line not in problems)
        assert max(_widths(table)) <= 100, text
        assert len(problems) == 4
        files = {line.split()[0] for line in text.splitlines() if "batch=32" in line}
        assert len(files) == 6, files  # six files, six different names
        assert all(f.endswith(".onnx") for f in files)  # the end that tells them apart is kept
        assert "batch=32 sequence=128" in text


def test_batch_verbose_shows_everything() -> None:
    console, out = _console(100)
    render_rows(_rows(), console, "12 rows", verbose=True)
    text = out.getvalue()
    assert "solve time" in text and "12,345" in text
    assert "/home/someone/projects/vision/checkpoints/exported/2024-05-00/densenet121_variant_0.onnx" in text


def _densenet_like_plan():
    ids = [f"/features/denseblock3/denselayer{k}/conv1/Conv" for k in range(1, 25)]
    nodes = [NodeSpec(id=i, op="Conv", inputs=[ids[k - 1]] if k else [], mem=1 << 20, cost=1.0) for k, i in enumerate(ids)]
    fwd = Graph.from_nodes(nodes, source="test", name="densenet-like")
    graph = training.checkmate_training_graph(fwd)
    return make_plan(graph, "treewidth", parse_budget("0.5x"))


def test_plan_report_fits_100_columns_and_names_differ() -> None:
    plan = _densenet_like_plan()
    facts = plan_facts(plan)
    assert len(facts.recomputed_most) >= 3
    console, out = _console(100)
    render_plan(plan, console, facts)
    text = out.getvalue()
    assert max(_widths(text)) <= 100, text
    lines = text.split("values recomputed most")[1].splitlines()[2:]
    names = [line.split()[0] for line in lines if line.strip()]
    assert len(set(names)) == len(names) == len(facts.recomputed_most), names
    for word in INTERNAL:
        assert word not in text, word
    assert "--verbose" in text  # the details are one flag away


def test_plan_verbose_shows_the_strategy_internals() -> None:
    plan = _densenet_like_plan()
    console, out = _console(100)
    render_plan(plan, console, verbose=True)
    assert "bare bound" in out.getvalue()


def test_shorten_keeps_width_and_distinguishing_end() -> None:
    names = [f"/features/denseblock3/denselayer{k}/conv1/Conv" for k in range(1, 30)]
    for width in (8, 12, 20, 30):
        short = shorten_all(names, width)
        assert len(set(short)) == len(names)
    assert shorten("abcdefghijklmnopqrstuvwxyz", 10) == "abcd…vwxyz"
    assert all(len(shorten(n, 20)) == 20 for n in names)
