"""Plain tables (remat_cli.report.plain) print exactly what rich prints on a non-terminal.

`remat plan` and `remat info` draw their tables without importing rich when stdout is not a
terminal (issue 14 item 1); every table and line goes through either path, so both must give
the same bytes: generated tables (titles, headers, justification, awkward characters, widths
below and above the table's) are printed both ways and compared.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from remat_cli.report import tables
from remat_cli.report.plain import PlainConsole, PlainTable, plain_width

# mostly what reports hold, and what rich reads differently: markup, emoji codes, tabs,
# wide and zero-width characters, newlines, backslashes
_PLAIN = st.sampled_from(list("ab xyz09.,%()-+/_") + ["…", "µ"])
_CHARS = _PLAIN | st.sampled_from([":", "[", "]", "\\", "\t", "漢", "\u0301", "\n", "é", "·"])
_TEXT = (
    st.text(_PLAIN, max_size=14)
    | st.text(_CHARS, max_size=14)
    | st.sampled_from(["", "n373", "1023 KiB", "2x", ":smile:", "[bold]x[/bold]", "a  b", "x ", " x", "a:b:c"])
)


class _Stdout(io.TextIOWrapper):
    """A UTF-8 text stream like a piped stdout's, whose text can be read back."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", newline="")

    def getvalue(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode()  # type: ignore[attr-defined]


def _rich(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, highlight=False)


def _plain_output(width: int, draw: Callable[[Any], None]) -> tuple[str, str]:
    """What ``draw(console)`` prints through a PlainConsole, and through rich alone."""
    fallback = _rich(width)
    out, saved = _Stdout(), sys.stdout
    sys.stdout = out
    try:
        draw(PlainConsole(width, lambda: fallback))
    finally:
        sys.stdout = saved
    reference = _rich(width)
    draw(reference)
    return out.getvalue() + fallback.file.getvalue(), reference.file.getvalue()


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["kv", "list"]),
    awkward=st.booleans(),  # else only what the reports write: mostly drawn without rich
    justify=st.lists(st.sampled_from(["left", "right"]), min_size=1, max_size=5),
    width=st.integers(12, 100),
    data=st.data(),
)
def test_tables_print_as_rich_prints_them(kind: str, awkward: bool, justify: list[str], width: int, data: st.DataObject) -> None:
    text = _TEXT if awkward else st.text(_PLAIN, max_size=12) | st.text(_PLAIN, max_size=90)  # long: wrapped
    title = data.draw(st.none() | text)
    headers = data.draw(st.lists(text, min_size=5, max_size=5))
    rows = data.draw(st.lists(st.lists(text, min_size=1, max_size=5), max_size=6))

    def draw(console: Any) -> None:
        if kind == "kv":
            t = tables.kv_table(console, title)
            n = 2
        else:
            n = len(justify)
            t = tables._list_table(console, title or "", list(zip(headers, justify)))
        for row in rows:
            t.add_row(*row[:n])
        console.print(t)

    got, want = _plain_output(width, draw)
    assert got == want


_WORDS = st.lists(st.text(st.sampled_from("abc…µ"), min_size=1, max_size=30), max_size=12).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(
    title=st.none() | st.text(_PLAIN, max_size=30),
    rows=st.lists(st.tuples(st.text(_PLAIN, max_size=20), _WORDS | st.text(_PLAIN, max_size=120)), min_size=1, max_size=5),
    width=st.integers(8, 90),
)
def test_long_values_wrap_as_rich_wraps_them(title: str | None, rows: list[tuple[str, str]], width: int) -> None:
    """A key/value table wider than the console: rich narrows the value column and wraps
    its words (folding longer ones); the plain table does the same, or leaves it to rich."""

    def draw(console: Any) -> None:
        t = tables.kv_table(console, title)
        for row in rows:
            t.add_row(*row)
        console.print(t)

    got, want = _plain_output(width, draw)
    assert got == want


@settings(max_examples=150, deadline=None)
@given(line=_TEXT | st.text(_CHARS, max_size=120), width=st.integers(10, 100), highlight=st.booleans())
def test_lines_print_as_rich_prints_them(line: str, width: int, highlight: bool) -> None:
    got, want = _plain_output(width, lambda c: c.print(line, markup=False, highlight=highlight))
    assert got == want


def test_a_plan_report_is_drawn_without_rich(monkeypatch) -> None:
    """The comparison above is not vacuous: the tables of a plan report take the plain path."""
    from remat_cli import generators, training
    from remat_cli.planner import make_plan

    plan = make_plan(training.checkmate_training_graph(generators.chain(12)), "chen-sqrt", None)
    fell_back = []
    console = PlainConsole(80, lambda: fell_back.append(1) or _rich(80))
    out = _Stdout()
    monkeypatch.setattr(sys, "stdout", out)
    tables.render_plan(plan, console)
    monkeypatch.undo()
    assert fell_back == [] and out.getvalue().startswith("plan for ")
    reference = _rich(80)
    tables.render_plan(plan, reference)
    assert out.getvalue() == reference.file.getvalue()


def test_unknown_widths_and_wide_tables_go_to_rich() -> None:
    t = PlainTable(title="t", box=None, pad_edge=False)
    t.add_column("a")
    t.add_row("x" * 30)
    assert t.lines(30) == ["t" + " " * 29, "a" + " " * 29, "x" * 30]
    assert t.lines(29) is None  # rich would wrap it
    boxed = PlainTable(box=object(), pad_edge=False)
    boxed.add_column("a")
    assert boxed.lines(80) is None


def test_width_is_the_one_rich_finds() -> None:
    for columns in (None, "", "0", "abc", "100", "37", " 90", "12x"):
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        if columns is not None:
            env["COLUMNS"] = columns
        got = plain_width(env)
        want = Console(file=io.StringIO(), _environ=env).width
        assert got == want or (got is None and want < 1), (columns, got, want)
