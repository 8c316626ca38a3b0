"""The rows of ``remat batch`` and ``remat check``: their schema, CSV / JSON-lines files, resume.

A :class:`Row` is one (file, strategy, budget) result; a run writes them with
:class:`RowWriter` as files finish (so a killed run keeps what it finished), reads an
earlier run's back with :func:`read_rows`, and :func:`reusable` picks the earlier rows
that ``--resume`` may keep instead of planning again.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remat_cli.errors import InputError

if TYPE_CHECKING:
    from remat_cli.batch.tasks import FileTask

__all__ = [
    "OK",
    "NO_PLAN",
    "BAD_INPUT",
    "TOO_LARGE",
    "TIMEOUT",
    "CRASH",
    "ERROR",
    "STATUSES",
    "FAILED",
    "Row",
    "COLUMNS",
    "FileResult",
    "BatchResult",
    "read_rows",
    "RowWriter",
    "csv_line",
    "reusable",
    "format_dims",
    "unused_dims",
]

OK = "ok"
NO_PLAN = "no-plan"  # the strategy cannot meet the budget
BAD_INPUT = "bad-input"  # the file (or an option for it) is unreadable: exit 2 for `check`
TOO_LARGE = "too-large"  # more nodes than --max-nodes
TIMEOUT = "timeout"  # no result within --timeout; the worker was killed
CRASH = "crash"  # the worker died (segfault, abort, out of memory)
ERROR = "error"  # an unexpected exception (a bug): reported, never fatal to the run
STATUSES = (OK, NO_PLAN, BAD_INPUT, TOO_LARGE, TIMEOUT, CRASH, ERROR)
FAILED = frozenset(STATUSES) - {OK}
# Results that the same input and options would reproduce; --resume keeps them.
_REUSABLE = frozenset({OK, NO_PLAN, BAD_INPUT, TOO_LARGE})


@dataclass(frozen=True)
class Row:
    """One (file, strategy, budget) result: a CSV row and a JSON-lines record."""

    file: str
    strategy: str
    budget: str
    status: str
    message: str = ""
    key: str = ""  # sha256 of the file's bytes and every option that shaped this row
    graph: str = ""
    nodes: int | None = None
    edges: int | None = None
    dims: str = ""  # the symbolic dims this file was loaded with, "batch=8 seq=128"
    budget_bytes: int | None = None
    budget_ratio: float | None = None
    peak_bytes: int | None = None
    fixed_bytes: int | None = None
    lower_bound_bytes: int | None = None
    store_all_peak_bytes: int | None = None
    min_budget_bytes: int | None = None
    cost: float | None = None
    base_cost: float | None = None
    overhead: float | None = None
    recomputations: int | None = None
    est_seconds: float | None = None
    solve_seconds: float | None = None
    plan_file: str = ""

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    def to_record(self) -> dict[str, Any]:
        """Plain JSON values, in column order."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Row:
        """Back from a JSON-lines record or a CSV row (strings); unknown keys are ignored."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in record:
                continue
            raw = record[f.name]
            if f.name in _INT_FIELDS:
                values[f.name] = None if raw in (None, "") else int(raw)
            elif f.name in _FLOAT_FIELDS:
                values[f.name] = None if raw in (None, "") else float(raw)
            else:
                values[f.name] = "" if raw is None else str(raw)
        return cls(**values)


_INT_FIELDS = frozenset(
    {
        "nodes",
        "edges",
        "budget_bytes",
        "peak_bytes",
        "fixed_bytes",
        "lower_bound_bytes",
        "store_all_peak_bytes",
        "min_budget_bytes",
        "recomputations",
    }
)
_FLOAT_FIELDS = frozenset({"budget_ratio", "cost", "base_cost", "overhead", "est_seconds", "solve_seconds"})
COLUMNS = tuple(f.name for f in fields(Row))


@dataclass(frozen=True)
class FileResult:
    """The rows of one file, and the plan documents to write (relative name, JSON text)."""

    path: str
    rows: tuple[Row, ...]
    plans: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class BatchResult:
    """Rows of every finished file, in input order; how the run ended."""

    rows: tuple[Row, ...]
    files: int  # files asked for
    done: int  # files with rows (computed or reused)
    reused: int  # files whose rows came from --resume
    interrupted: bool = False  # Ctrl-C
    stopped: bool = False  # --fail-fast stopped at a failure

    @property
    def failures(self) -> int:
        return sum(1 for r in self.rows if r.failed)


def format_dims(dims: Any) -> str:
    """A file's dims as the row shows them: ``batch=8 seq=128`` ("" for none)."""
    if not isinstance(dims, Mapping):
        return ""
    return " ".join(f"{k}={v}" for k, v in dims.items())


def unused_dims(rows: Iterable[Row], names: Iterable[str]) -> list[str]:
    """The ``--dim`` names that no loaded file has (a typo, as single-file commands say).

    Empty when no file loaded: then nothing is known about the files' dimensions."""
    loaded = [r for r in rows if r.nodes is not None]
    if not loaded:
        return []
    used = {part.split("=", 1)[0] for r in loaded for part in r.dims.split()}
    return [n for n in names if n not in used]


# --------------------------------------------------------------------------- resume


def reusable(tasks: Sequence[FileTask], previous: Sequence[Row], out_dir: str | Path | None) -> dict[int, FileResult]:
    """For ``--resume``: the tasks (by index) whose every row ``previous`` already holds.

    A row is reused when its key (the file's bytes and every option that shaped it)
    matches and a rerun would reproduce its status. The key is content and options, not
    the path, so a moved tree still resumes; a row of the same path is preferred, and
    required when plans are written (they are per path, and must still be there).
    """
    usable = [r for r in previous if r.key and r.status in _REUSABLE]
    by_file_key = {(r.file, r.key): r for r in usable}
    by_key = {} if out_dir is not None else {r.key: r for r in usable}
    results: dict[int, FileResult] = {}
    for i, task in enumerate(tasks):
        reused = [by_file_key.get((task.path, k)) or by_key.get(k) for k in task.keys]
        if all(r is not None and _plan_present(r, out_dir) for r in reused):
            results[i] = FileResult(task.path, tuple(replace(r, file=task.path) for r in reused if r is not None))
    return results


def _plan_present(row: Row, out_dir: str | Path | None) -> bool:
    if out_dir is None or row.status != OK:
        return True
    return bool(row.plan_file) and (Path(out_dir) / row.plan_file).is_file()


# --------------------------------------------------------------------------- files


def read_rows(path: str | Path) -> list[Row]:
    """Rows of an earlier run's ``--jsonl`` or ``--csv`` output (by its suffix).

    A missing file gives no rows; a torn last line (a run killed mid-write) is ignored.
    """
    path = Path(path)
    if not path.exists():
        return []
    from remat_cli.limits import check_regular_file

    check_regular_file(path, "results file")  # a FIFO here would block the run before it starts
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read earlier results for --resume: {exc}") from None
    rows: list[Row] = []
    if path.suffix.lower() == ".csv":
        for record in csv.DictReader(io.StringIO(text)):
            if None in record.values() or None in record:  # a torn or padded line: not a whole row
                continue
            try:
                rows.append(Row.from_record(record))
            except (TypeError, ValueError):
                continue
        return rows
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            rows.append(Row.from_record(record))
        except (ValueError, TypeError, AttributeError):
            continue
    return rows


class RowWriter:
    """CSV or JSON-lines output that is always well-formed.

    Rows are appended (and flushed) as files finish, so an interrupted or killed run
    keeps what it finished; :meth:`finish` rewrites the file atomically in input order.
    With ``resume`` the earlier file is kept and appended to (never truncated), so a
    resumed run that is killed in turn loses nothing; later records of the same row win.
    """

    def __init__(self, path: str | Path, resume: bool = False) -> None:
        self.path = Path(path)
        self.csv = self.path.suffix.lower() == ".csv"
        self.resumed = False
        try:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            size = self.path.stat().st_size if resume and self.path.is_file() else 0
            self.resumed = size > 0
            self._fh: Any = self.path.open("a" if self.resumed else "w", newline="")
            if self.resumed:
                with self.path.open("rb") as fh:
                    fh.seek(size - 1)
                    if fh.read(1) != b"\n":  # a torn last line from a killed run
                        self._fh.write("\n")
        except OSError as exc:
            raise InputError(f"{self.path}: cannot write: {exc.strerror or exc}") from None
        if self.csv and not self.resumed:
            self._fh.write(csv_line(COLUMNS))
        self._fh.flush()

    def append(self, rows: Iterable[Row]) -> None:
        text = "".join(self._line(r) for r in rows)
        if text:
            self._fh.write(text)
            self._fh.flush()

    def finish(self, rows: Iterable[Row]) -> None:
        """Replace the file with exactly ``rows`` (write a temporary file, then rename)."""
        self._fh.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="") as fh:
            if self.csv:
                fh.write(csv_line(COLUMNS))
            for r in rows:
                fh.write(self._line(r))
        os.replace(tmp, self.path)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def _line(self, row: Row) -> str:
        record = row.to_record()
        if self.csv:
            return csv_line(["" if record[c] is None else record[c] for c in COLUMNS])
        return json.dumps(record) + "\n"


def csv_line(values: Iterable[Any]) -> str:
    """One CSV line (``\\n``-terminated) of ``values``."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(list(values))
    return buf.getvalue()
