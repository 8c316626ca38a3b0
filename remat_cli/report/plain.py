"""Key/value and list tables drawn as plain text when stdout is not a terminal, without
importing rich (rich.console and rich.table cost 50-70 ms of every `remat plan`; issue 14).

:class:`PlainConsole` stands in for rich's ``Console`` where a report only prints
:class:`PlainTable` objects and plain lines. It draws them itself exactly as rich draws
them on a non-terminal (no box, no styles; cells padded to their column; lines as wide as
the table; a key/value table wider than the console narrowed by wrapping its values as
rich wraps them) and hands anything outside that simple case to a real rich console,
where rich's layout decides: another table or a line wider than the console, a title
wider than its table, text rich would read differently (emoji codes like ``:x:``,
brackets, tabs, control or wide characters), a cell holding a newline. Tests compare the
two renderings on generated tables (tests/test_plain_tables.py).
"""

from __future__ import annotations

import builtins
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from remat_cli.units import visible

__all__ = ["PlainConsole", "PlainTable", "plain_width"]

# Characters drawn one cell wide by rich and read by it as themselves: printable ASCII
# and the two non-ASCII characters that the reports write ("…" of shortened names, "µs").
_SIMPLE = re.compile(r"[ -~…µ]*")
_EMOJI_CODE = re.compile(r":\S*?:")  # what rich's emoji replacement may act on


def plain_width(environ: dict[str, str] | os._Environ[str] | None = None) -> int | None:
    """The width rich gives a console on a non-terminal stdout: ``COLUMNS`` if it is a
    number, else the terminal size of stdin, stdout or stderr (the first that has one),
    else 80. None where rich's own answer may differ (Windows, Jupyter)."""
    env = os.environ if environ is None else environ
    if sys.platform.startswith("win") or hasattr(builtins, "get_ipython") or "IPython" in sys.modules:
        return None
    columns = env.get("COLUMNS")
    if columns is not None and columns.isdigit():
        return int(columns) if int(columns) > 0 else None
    width = None
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
        except (AttributeError, ValueError, OSError):
            continue
        break
    return width or 80


def _simple(text: str) -> bool:
    """Text that rich prints as it is, one cell per character."""
    return _SIMPLE.fullmatch(text) is not None and _EMOJI_CODE.search(text) is None and "[" not in text


_WORD = re.compile(r"\s*\S+\s*")


def _fold(text: str, width: int) -> list[str]:
    """``text`` (one cell per character) wrapped at words into lines of at most ``width``,
    words longer than that folded: rich's ``divide_line`` with ``fold=True``, then its
    ``rstrip_end`` (trailing blanks beyond the width dropped)."""
    breaks: list[int] = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            chunks = [word[i : i + width] for i in range(0, len(word), width)]
            for k, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if k == len(chunks) - 1:
                    offset = len(chunk)
                else:
                    start += len(chunk)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    lines = [text[a:b] for a, b in zip([0, *breaks], [*breaks, len(text)])]
    out = []
    for line in lines:
        if len(line) > width:
            blanks = len(line) - len(line.rstrip())
            line = line[: len(line) - min(blanks, len(line) - width)]
        out.append(line[:width])
    return out


class PlainTable:
    """The part of ``rich.table.Table`` the reports use: a title, columns (header, justify
    and rich's other column options, kept for :meth:`to_rich`), rows of strings."""

    def __init__(self, *, title: str | None = None, escape_title: bool = False, **options: Any) -> None:
        self.title = None if title is None else visible(title)  # as shown
        self._escape_title = escape_title  # rich reads titles as markup: escape names from files
        self._options = options
        self._columns: list[tuple[str, dict[str, Any]]] = []
        self._rows: list[tuple[str, ...]] = []

    def add_column(self, header: str = "", **options: Any) -> None:
        self._columns.append((header, options))

    def add_row(self, *cells: str) -> None:
        self._rows.append(tuple(visible(c) for c in cells) + ("",) * (len(self._columns) - len(cells)))

    def lines(self, width: int) -> list[str] | None:
        """The table's lines as rich draws it ``width`` columns wide (no box, no edge
        padding, one space of padding each side of a column boundary); None where rich's
        layout may differ (see the module docstring)."""
        if self._options.get("box") is not None or self._options.get("pad_edge", True) or not self._columns:
            return None
        header = self._options.get("show_header", True)
        rows = ([tuple(h for h, _ in self._columns)] if header else []) + self._rows
        if not rows or not all(_simple(cell) for row in rows for cell in row):
            return None  # (rich makes a column without cells as wide as the console)
        n = len(self._columns)
        widths = [max((len(row[c]) for row in rows), default=0) for c in range(n)]
        widths = [w + (c > 0) + (c < n - 1) for c, w in enumerate(widths)]  # padding
        total = sum(widths)
        if total == 0:
            return None
        if total > width:  # rich narrows the one column that may wrap, if that is enough
            if not self._wraps_last() or widths[-1] - (total - width) < 2:
                return None
            widths[-1] -= total - width
            total = width
        out = []
        if self.title:
            if not _simple(self.title) or "\\" in self.title or len(self.title) > total:
                return None  # rich would wrap it, or read markup in it
            out.append(self.title.ljust(total))
        for row in rows:
            cells: list[list[str]] = []
            for c, (cell, (_, opts)) in enumerate(zip(row, self._columns)):
                inner = widths[c] - (c > 0) - (c < n - 1)
                justify = opts.get("justify", "left")
                if justify not in ("left", "right"):
                    return None
                pieces = _fold(cell, inner) if len(cell) > inner else [cell]
                pad = (" " if c > 0 else "", " " if c < n - 1 else "")
                cells.append([pad[0] + (p.rstrip().rjust(inner) if justify == "right" else p.ljust(inner)) + pad[1] for p in pieces])
            height = max(len(lines) for lines in cells)
            for k in range(height):
                out.append("".join(lines[k] if k < len(lines) else " " * widths[c] for c, lines in enumerate(cells)))
        return out

    def _wraps_last(self) -> bool:
        """Only the last column may wrap (folding words longer than it), as in a key/value
        table: rich then narrows that column alone to fit the console."""
        *fixed, (_, last) = self._columns
        return all(opts.get("no_wrap") for _, opts in fixed) and last.get("overflow") == "fold" and not last.get("no_wrap")

    def to_rich(self) -> Any:
        """The same table as the rich table the reports would have made (plain cells)."""
        from remat_cli.report.tables import rich_table

        table = rich_table(self.title, escape_title=self._escape_title, **self._options)
        for header, opts in self._columns:
            table.add_column(header, **opts)
        for row in self._rows:
            table.add_row(*row)
        return table


class PlainConsole:
    """Prints :class:`PlainTable` objects and plain lines as rich would on a non-terminal
    stdout; anything else goes to ``fallback()``, the invocation's rich console."""

    is_terminal = False

    def __init__(self, width: int, fallback: Callable[[], Any]) -> None:
        self.width = width
        self._fallback = fallback

    def print(self, obj: Any = "", **kwargs: Any) -> None:
        """rich's ``Console.print`` for one object with ``markup=False`` / ``highlight=False``."""
        lines: list[str] | None = None
        if isinstance(obj, PlainTable) and not kwargs:
            lines = obj.lines(self.width)
        elif isinstance(obj, str) and set(kwargs) <= {"markup", "highlight"} and kwargs.get("markup") is False:
            lines = [obj] if _simple(obj) and len(obj) <= self.width else None
        if lines is None or not self._encodable(lines):
            self._fallback().print(obj.to_rich() if isinstance(obj, PlainTable) else obj, **kwargs)
            return
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()

    @staticmethod
    def _encodable(lines: list[str]) -> bool:
        if all(line.isascii() for line in lines):
            return True
        return (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "") == "utf8"
