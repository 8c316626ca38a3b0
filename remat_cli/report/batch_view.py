"""Terminal views of ``remat batch`` and ``remat check``: a progress bar and summary tables."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.cells import cell_len
from rich.table import Table

from remat_cli.batch import COLUMNS, BatchResult, FileResult, FileTask, Row, csv_line
from remat_cli.check import PASS, CheckReport
from remat_cli.units import fmt_bytes, fmt_pct, fmt_seconds, shorten_all, visible

__all__ = ["BatchProgress", "render_rows", "rows_json", "rows_csv", "batch_summary", "render_check", "check_to_json"]


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
            # (the column reads markup: a file named a[/]b.json must neither style nor crash it)
            current = escape(visible(_short(names[-1]))) + (f" (+{len(names) - 1} running)" if len(names) > 1 else "")
        failures = f"{self.failures} failed" if self.failures else ""
        self._progress.update(self._task, advance=advance, current=current, failures=failures)


def _short(path: str, width: int = 48) -> str:
    return path if len(path) <= width else "…" + path[-(width - 1) :]


def render_rows(rows: Sequence[Row], console: Console, title: str, *, verbose: bool = False, width: int = 100) -> None:
    """A table of (file, strategy, budget) rows, then one line per failed row saying why.

    By default the table fits ``width`` columns (the terminal's width when narrower): file
    names are cut in the middle, keeping the end that tells files apart. ``verbose`` adds
    the graph size and solve time and never cuts a name.
    """
    terminal = console.is_terminal
    limit = min(width, console.width) if terminal else width
    columns: list[tuple[str, str]] = [("file", "left")]
    with_dims = any(r.dims for r in rows)
    if with_dims:
        columns.append(("dims", "left"))
    columns += [("strategy", "left"), ("budget", "right"), ("status", "left")]
    if verbose:
        columns.append(("nodes", "right"))
    columns += [("peak", "right"), ("overhead", "right")]
    if verbose:
        columns.append(("solve time", "right"))
    cells: list[list[str]] = []
    problems: list[str] = []
    for r in rows:
        budget = r.budget
        if r.budget_bytes is not None and budget != str(r.budget_bytes):
            budget = f"{budget} = {fmt_bytes(r.budget_bytes)}"
        row = [r.file] + ([r.dims or "-"] if with_dims else []) + [r.strategy, budget, r.status]
        if verbose:
            row.append("-" if r.nodes is None else f"{r.nodes:,}")
        row += [fmt_bytes(r.peak_bytes), fmt_pct(r.overhead)]
        if verbose:
            row.append(fmt_seconds(r.solve_seconds))
        cells.append(row)
        if r.failed:
            note = r.message[len(r.file) + 2 :] if r.message.startswith(f"{r.file}: ") else r.message
            problems.append(visible(f"{r.file} [{r.strategy}, {r.budget}] {r.status}: {note}", breaks=False))
    files = [c[0] for c in cells]
    file_width = max((len(f) for f in files), default=0)
    if not verbose and cells:  # first guess: the other columns at their width, one space apart
        others = sum(max(len(name), *(len(c[k]) for c in cells)) for k, (name, _) in enumerate(columns) if k)
        file_width = max(limit - others - len(columns) + 1, 16)
    failed = {k for k, r in enumerate(rows) if r.failed}
    status = columns.index(("status", "left"))
    while True:
        shown = files if verbose else shorten_all(files, file_width)
        table = Table(
            title=title,
            box=box.SIMPLE_HEAD if terminal else None,
            pad_edge=False,
            title_justify="left",
            collapse_padding=True,
            show_edge=False,
        )
        for name, justify in columns:
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for k, c in enumerate(cells):
            row = [escape(visible(x)) for x in [shown[k], *c[1:]]]
            if terminal:
                row[status] = f"[{'red' if k in failed else 'green'}]{row[status]}"
            table.add_row(*row)
        wide = Console(
            width=100_000,
            highlight=False,
            emoji=False,
            color_system=console.color_system if terminal else None,
            force_terminal=terminal,
            file=io.StringIO(),
        )
        with wide.capture() as capture:
            wide.print(table)
        text = "\n".join(line.rstrip() for line in capture.get().splitlines())
        over = max((cell_len(_strip(line)) for line in text.splitlines() if _strip(line).strip() != title), default=0) - limit
        if verbose or over <= 0 or file_width <= 16:
            break
        file_width = max(file_width - over, 16)
    # then why each row failed: one line each, however long (grep-able, like every error)
    console.file.write(text + "\n" + "".join(line + "\n" for line in problems))


def _strip(line: str) -> str:
    """``line`` without ANSI colour codes (its width on screen)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", line)


def rows_json(rows: Sequence[Row]) -> str:
    return json.dumps([r.to_record() for r in rows], indent=1)


def rows_csv(rows: Sequence[Row]) -> str:
    lines = [csv_line(COLUMNS)]
    for r in rows:
        record = r.to_record()
        lines.append(csv_line(["" if record[c] is None else record[c] for c in COLUMNS]))
    return "".join(lines)


def batch_summary(result: BatchResult) -> str:
    """The line ``remat batch`` ends with on stderr: files done, reused, with failures, how it stopped."""
    bad_files = len({r.file for r in result.rows if r.failed})
    note = f"{result.done} of {result.files} files done"
    if result.reused:
        note += f" ({result.reused} reused from earlier results)"
    note += f", {bad_files} with failures"
    if result.interrupted:
        return f"remat: interrupted: {note}; the results so far are kept"
    if result.stopped:
        note += "; stopped at the first failure (--fail-fast)"
    return note


def render_check(report: CheckReport, console: Console) -> None:
    """One line per model, then the tally."""
    for r in report.results:
        if console.is_terminal:
            colour = "green" if r.verdict == PASS else "red"
            name, reason = visible(r.spec.name, breaks=False), visible(r.reason, breaks=False)
            console.print(f"[bold {colour}]{r.verdict.upper()}[/] {escape(name)}: {escape(reason)}", highlight=False, soft_wrap=True)
        else:
            console.print(visible(r.line(), breaks=False), highlight=False, markup=False, soft_wrap=True)
    c = report.counts
    missing = report.models - len(report.results)
    tail = f", {missing} not checked" if missing else ""
    console.print(
        f"{report.models} model{'s' if report.models != 1 else ''}: {c['pass']} passed, {c['fail']} failed, {c['error']} error{'s' if c['error'] != 1 else ''}{tail}",
        highlight=False,
        markup=False,
    )


def check_to_json(report: CheckReport) -> dict[str, Any]:
    """``remat check --format json``: the tally, the exit code, and every model's verdict and row."""
    return {
        "models": report.models,
        "passed": report.counts["pass"],
        "exit_code": report.exit_code,
        "results": [
            {"name": r.spec.name, "file": r.spec.path, "verdict": r.verdict, "reason": r.reason, **r.row.to_record()}
            for r in report.results
        ],
    }
