"""Terminal views of ``remat batch`` and ``remat check``: a progress bar and summary tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from remat_cli.batch import COLUMNS, FileResult, FileTask, Row, csv_line
from remat_cli.check import PASS, CheckReport
from remat_cli.report.units import fmt_bytes, fmt_pct, fmt_seconds

__all__ = ["BatchProgress", "render_rows", "rows_json", "rows_csv", "render_check"]


class BatchProgress:
    """A rich progress bar on stderr (files done, current file, failures); silent when piped."""

    def __init__(self, console: Console, total: int, label: str = "planning") -> None:
        self.enabled = console.is_terminal and total > 0
        self.failures = 0
        self.running: dict[str, None] = {}
        self._progress: Progress | None = None
        self._task: Any = None
        if self.enabled:
            self._progress = Progress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("files"),
                TextColumn("[red]{task.fields[failures]}"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[current]}"),
                console=console,
                transient=True,
            )
            self._task = self._progress.add_task(label, total=total, failures="", current="")

    def __enter__(self) -> BatchProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()

    def start(self, task: FileTask) -> None:
        self.running[task.name or task.path] = None
        self._refresh(advance=0)

    def done(self, task: FileTask, result: FileResult) -> None:
        self.running.pop(task.name or task.path, None)
        if any(r.failed for r in result.rows):
            self.failures += 1
        self._refresh(advance=1)

    def skip(self, count: int) -> None:
        """Files taken from earlier results (--resume) count as done."""
        if self._progress is not None and count:
            self._progress.update(self._task, advance=count)

    def _refresh(self, advance: int) -> None:
        if self._progress is None:
            return
        names = list(self.running)
        current = ""
        if names:
            current = _short(names[-1]) + (f" (+{len(names) - 1} running)" if len(names) > 1 else "")
        failures = f"{self.failures} failed" if self.failures else ""
        self._progress.update(self._task, advance=advance, current=current, failures=failures)


def _short(path: str, width: int = 48) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1):]


def render_rows(rows: Sequence[Row], console: Console, title: str) -> None:
    """A table of (file, strategy, budget) rows, then one line per failed row saying why."""
    if not console.is_terminal:  # piped: one line per row, however long
        console = Console(file=console.file, width=100_000, highlight=False, color_system=None)
    table = Table(title=title, box=box.SIMPLE_HEAD if console.is_terminal else None, pad_edge=False, title_justify="left", collapse_padding=True)
    for name, justify in (("file", "left"), ("strategy", "left"), ("budget", "right"), ("status", "left"), ("nodes", "right"), ("peak", "right"), ("overhead", "right"), ("time", "right")):
        table.add_column(name, justify=justify, overflow="fold", no_wrap=name not in ("file", "budget"))  # type: ignore[arg-type]
    problems: list[str] = []
    for r in rows:
        status = escape(r.status)
        if console.is_terminal:
            status = f"[green]{status}" if not r.failed else f"[red]{status}"
        budget = r.budget
        if r.budget_bytes is not None and budget != str(r.budget_bytes):
            budget = f"{budget} = {fmt_bytes(r.budget_bytes)}"
        table.add_row(
            escape(r.file),
            escape(r.strategy),
            escape(budget),
            status,
            "-" if r.nodes is None else f"{r.nodes:,}",
            fmt_bytes(r.peak_bytes),
            fmt_pct(r.overhead),
            fmt_seconds(r.solve_seconds),
        )
        if r.failed:
            note = r.message[len(r.file) + 2:] if r.message.startswith(f"{r.file}: ") else r.message
            problems.append(f"{r.file} [{r.strategy}, {r.budget}] {r.status}: {note}")
    if console.is_terminal:
        console.print(table)
        for line in problems:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        return
    with console.capture() as capture:
        console.print(table)
    text = "\n".join(line.rstrip() for line in capture.get().splitlines())
    console.file.write(text + "\n" + "".join(line + "\n" for line in problems))


def rows_json(rows: Sequence[Row]) -> str:
    return json.dumps([r.to_record() for r in rows], indent=1)


def rows_csv(rows: Sequence[Row]) -> str:
    lines = [csv_line(COLUMNS)]
    for r in rows:
        record = r.to_record()
        lines.append(csv_line(["" if record[c] is None else record[c] for c in COLUMNS]))
    return "".join(lines)


def render_check(report: CheckReport, console: Console) -> None:
    """One line per model, then the tally."""
    for r in report.results:
        line = r.line()
        if console.is_terminal:
            colour = "green" if r.verdict == PASS else "red"
            console.print(f"[bold {colour}]{r.verdict.upper()}[/] {escape(r.spec.name)}: {escape(r.reason)}", highlight=False, soft_wrap=True)
        else:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    c = report.counts
    missing = report.models - len(report.results)
    tail = f", {missing} not checked" if missing else ""
    console.print(f"{report.models} model{'s' if report.models != 1 else ''}: {c['pass']} passed, {c['fail']} failed, {c['error']} error{'s' if c['error'] != 1 else ''}{tail}", highlight=False, markup=False)
