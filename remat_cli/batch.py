"""Plan many graph files: discovery, per-file work, resumable CSV / JSON-lines output.

``remat batch`` and ``remat check`` are built from the pieces here:

* :func:`discover` finds graph files under directories, by content (DESIGN §4), in a
  deterministic order;
* :func:`plan_file` is what a worker runs for one file: load it once, plan it for every
  (strategy, budget) pair, and turn every failure into a :class:`Row` (it never raises);
* :func:`run_batch` sends :class:`FileTask`\\ s to an executor
  (:mod:`remat_cli.executors`), turns hangs and crashes into rows too, skips work already
  in the output (``--resume``), and returns the rows in input order whatever the
  parallelism;
* :class:`RowWriter` writes CSV / JSON lines as results arrive (so an interrupted run
  keeps what it finished) and rewrites them in order at the end.
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import hashlib
import io
import json
import os
import re
import signal
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from remat_cli.budget import Budget
from remat_cli.errors import InputError, NoPlanError, RematError
from remat_cli.executors import LocalExecutor, Outcome
from remat_cli.limits import LimitError
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.plan import finite_or_none as _finite, load_record, plan_to_json
from remat_cli.planner import make_plan, resolve_budget, store_all_peak

__all__ = [
    "DEFAULT_STRATEGY",
    "STATUSES",
    "FAILED",
    "Row",
    "FileTask",
    "FileResult",
    "BatchResult",
    "discover",
    "make_tasks",
    "plan_file",
    "run_batch",
    "read_rows",
    "RowWriter",
    "format_dims",
    "loads_per_file",
    "unused_dims",
]

# The strategy `remat batch` and `remat check` use when none is given.
DEFAULT_STRATEGY = "auto"

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

_GRAPH_SUFFIXES = (".onnx", ".json")
_SNIFF_LIMIT = 64 << 20  # JSON above this is taken without parsing it during discovery
_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})


# --------------------------------------------------------------------------- records


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
    {"nodes", "edges", "budget_bytes", "peak_bytes", "fixed_bytes", "lower_bound_bytes", "store_all_peak_bytes", "min_budget_bytes", "recomputations"}
)
_FLOAT_FIELDS = frozenset({"budget_ratio", "cost", "base_cost", "overhead", "est_seconds", "solve_seconds"})
COLUMNS = tuple(f.name for f in fields(Row))
# Columns that measure this machine rather than the plan; they differ between runs.
TIMING_COLUMNS = ("solve_seconds",)


@dataclass(frozen=True)
class FileTask:
    """Everything a worker needs to plan one file (picklable, independent of the parent)."""

    path: str
    load: LoadOptions
    strategies: tuple[str, ...]
    budgets: tuple[Budget, ...]
    keys: tuple[str, ...]  # one per (strategy, budget), strategies outer
    max_nodes: int | None = None
    plan_options: tuple[tuple[str, Any], ...] = ()
    plan_stem: str | None = None  # where plans go under --out-dir (None: no plans)
    name: str = ""  # how reports call this file (check: the model's name)

    @property
    def pairs(self) -> list[tuple[str, Budget]]:
        return [(s, b) for s in self.strategies for b in self.budgets]


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


# --------------------------------------------------------------------------- discovery


def discover(paths: Sequence[str | Path], globs: Sequence[str] = ()) -> list[str]:
    """Graph files under ``paths`` (files named directly are always taken), sorted, unique.

    In directories a file is taken when its content says it is a graph: ``.onnx`` files,
    twremat text, and JSON that is not something else (plan files, other tools' JSON).
    JSON that does not parse is taken, so that a broken model becomes an error row rather
    than disappearing. ``globs`` (matched against the path below the directory and the
    file name) narrow the search. Hidden directories are skipped. A subdirectory that
    cannot be listed, and a FIFO, device or socket with a graph suffix, are taken too, so
    that they become rows saying why they were not planned instead of vanishing.
    """
    found: dict[str, None] = {}
    for root in paths:
        root_path = Path(root)
        if not root_path.exists():
            raise InputError(f"{root}: no such file or directory")
        if not root_path.is_dir():
            found[str(root_path)] = None
            continue
        candidates = []

        def unreadable(exc: OSError) -> None:
            if exc.filename and Path(exc.filename) != root_path:
                found[str(exc.filename)] = None  # a row: "cannot list this directory"
            elif exc.filename:
                raise InputError(f"{root}: cannot list the directory: {exc.strerror or exc}")

        for dirpath, dirnames, filenames in os.walk(root_path, onerror=unreadable):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
            for fname in sorted(filenames):
                full = Path(dirpath) / fname
                rel = full.relative_to(root_path).as_posix()
                if globs and not any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(fname, g) for g in globs):
                    continue
                candidates.append(full)
        for full in candidates:
            if full.name.startswith("."):
                continue
            if full.is_file():
                if _looks_like_graph(full):
                    found[str(full)] = None
            elif full.suffix.lower() in _GRAPH_SUFFIXES and not full.is_dir():
                found[str(full)] = None  # a FIFO or device named like a model: a row says why not
    return sorted(found, key=_sort_key)


def _sort_key(path: str) -> tuple[str, ...]:
    return tuple(Path(path).parts)


def _looks_like_graph(path: Path) -> bool:
    suffix = path.suffix.lower()
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return suffix in _GRAPH_SUFFIXES  # unreadable: report it as a row
    if suffix == ".onnx":
        return True
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        if b'"remat-plan"' in stripped[:512]:
            return False
        if b'"remat-graph"' in head:
            return True  # a graph, or a broken one that should be reported
        if suffix != ".json":
            return False  # e.g. our own --jsonl output, whose records have "nodes" too
        return b'"nodes"' in head or _json_may_be_graph(path)
    text = head.decode("utf-8", errors="replace")
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    return first.startswith(("p remat2", "memlimit", "node "))


def _json_may_be_graph(path: Path) -> bool:
    """A remat-graph document, JSON with a ``nodes`` list (node-link), or JSON that does not parse."""
    try:
        if path.stat().st_size > _SNIFF_LIMIT:
            return True  # too big to parse just to look: the worker reads it (and reports it)
        doc = json.loads(path.read_bytes())
    except (ValueError, OSError, RecursionError):  # nested too deeply: a broken model, a row
        return path.suffix.lower() == ".json"
    if not isinstance(doc, dict) or doc.get("format") == "remat-plan":
        return False
    return doc.get("format") == "remat-graph" or isinstance(doc.get("nodes"), list)


# --------------------------------------------------------------------------- tasks


def file_sha256(path: str | Path) -> str:
    """sha256 of a regular file's bytes ('' for anything else: the worker reports why).

    Opened non-blocking and checked with ``fstat``: a FIFO or device must not block or
    stream forever here, before any worker (and its --timeout) exists.
    """
    h = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with os.fdopen(fd, "rb", closefd=False) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return h.hexdigest()


def _options_fingerprint(load: LoadOptions, max_nodes: int | None, plan_options: Mapping[str, Any]) -> str:
    load_doc = {k: v for k, v in asdict(load).items() if k != "extra"}  # extra: hooks, not options
    doc = {"load": load_doc, "max_nodes": max_nodes, "plan_options": dict(plan_options)}
    return json.dumps(doc, sort_keys=True, default=str)


def row_key(content_sha: str, fingerprint: str, strategy: str, budget: Budget) -> str:
    """The --resume key of one row: file bytes and everything that shapes its result."""
    h = hashlib.sha256()
    for part in (content_sha, fingerprint, strategy, budget.text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def make_tasks(
    files: Sequence[str],
    *,
    strategies: Sequence[str],
    budgets: Sequence[Budget],
    load: LoadOptions | Sequence[LoadOptions] = LoadOptions(),
    max_nodes: int | None = None,
    plan_options: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    names: Sequence[str] | None = None,
) -> list[FileTask]:
    """One :class:`FileTask` per file; ``load`` may be one options object per file."""
    loads = [load] * len(files) if isinstance(load, LoadOptions) else list(load)
    options = dict(plan_options or {})
    stems = _plan_stems(files) if out_dir is not None else [None] * len(files)
    tasks = []
    for i, path in enumerate(files):
        content = file_sha256(path)
        fp = _options_fingerprint(loads[i], max_nodes, options)
        keys = tuple(row_key(content, fp, s, b) if content else "" for s in strategies for b in budgets)
        tasks.append(
            FileTask(
                path=path,
                load=loads[i],
                strategies=tuple(strategies),
                budgets=tuple(budgets),
                keys=keys,
                max_nodes=max_nodes,
                plan_options=tuple(sorted(options.items())),
                plan_stem=stems[i],
                name=names[i] if names else path,
            )
        )
    return tasks


def _plan_stems(files: Sequence[str]) -> list[str]:
    """Per-file names under --out-dir: the path below the files' common directory."""
    if not files:
        return []
    parents = [os.path.dirname(os.path.abspath(f)) for f in files]
    common = os.path.commonpath(parents)
    return [Path(os.path.relpath(os.path.abspath(f), common)).as_posix() for f in files]


def plan_name(stem: str, strategy: str, budget: Budget, sweep: bool) -> str:
    """``sub/model.onnx.store-all.plan.json``; budgets are named when there are several."""
    slug = ""
    if sweep or not budget.is_none:
        slug = "." + re.sub(r"[^A-Za-z0-9.]+", "_", budget.text.replace("%", "pct"))
    return f"{stem}.{strategy}{slug}.plan.json"


def format_dims(dims: Any) -> str:
    """A file's dims as the row shows them: ``batch=8 seq=128`` ("" for none)."""
    if not isinstance(dims, Mapping):
        return ""
    return " ".join(f"{k}={v}" for k, v in dims.items())


def loads_per_file(
    files: Sequence[str], load: LoadOptions, dims_by_file: Mapping[str, Sequence[tuple[str, int]]]
) -> list[LoadOptions]:
    """Per file, ``load`` with that model's own dims (from remat.toml's ``[[models]]``,
    keyed by path) under the command line's ``--dim`` values, which win."""
    own = {os.path.realpath(p): dict(d) for p, d in dims_by_file.items()}
    out = []
    for f in files:
        dims = own.get(os.path.realpath(f), {})
        if not dims:
            out.append(load)
            continue
        dims.update(dict(load.dims))
        out.append(replace(load, dims=tuple(sorted(dims.items()))))
    return out


def unused_dims(rows: Iterable[Row], names: Iterable[str]) -> list[str]:
    """The ``--dim`` names that no loaded file has (a typo, as single-file commands say).

    Empty when no file loaded: then nothing is known about the files' dimensions."""
    loaded = [r for r in rows if r.nodes is not None]
    if not loaded:
        return []
    used = {part.split("=", 1)[0] for r in loaded for part in r.dims.split()}
    return [n for n in names if n not in used]


# --------------------------------------------------------------------------- per-file work


def plan_file(task: FileTask) -> FileResult:
    """Load ``task.path`` once and plan it for every (strategy, budget); never raises.

    This is what workers run; every failure is a row with a status and one-line message.
    """
    pairs = task.pairs

    def all_rows(status: str, message: str, **extra: Any) -> FileResult:
        rows = tuple(
            Row(file=task.path, strategy=s, budget=b.text, status=status, message=message, key=task.keys[k], **extra)
            for k, (s, b) in enumerate(pairs)
        )
        return FileResult(task.path, rows)

    if os.path.isdir(task.path):  # found by discovery but not listable
        try:
            os.listdir(task.path)
            problem = "is a directory"
        except OSError as exc:
            problem = f"cannot list this directory: {exc.strerror or exc}"
        return all_rows(BAD_INPUT, f"{task.path}: {problem}; its files were not planned")
    try:
        graph = load_graph(task.path, task.load)
    except LimitError as exc:
        return all_rows(TOO_LARGE, exc.message)
    except RematError as exc:
        return all_rows(BAD_INPUT, exc.message)
    except RecursionError:
        return all_rows(BAD_INPUT, f"{task.path}: nested too deeply to read")
    except MemoryError:
        return all_rows(TOO_LARGE, f"{task.path}: ran out of memory while loading")
    except Exception as exc:  # a loader bug must not stop the batch
        return all_rows(ERROR, f"{task.path}: internal error while loading: {type(exc).__name__}: {exc}")
    facts: dict[str, Any] = {"graph": graph.name, "nodes": graph.n, "edges": graph.num_edges, "dims": format_dims(graph.meta.get("dims"))}
    if task.max_nodes is not None and graph.n > task.max_nodes:
        return all_rows(TOO_LARGE, f"{task.path}: {graph.n} nodes is more than --max-nodes {task.max_nodes}", **facts)
    try:
        reference = store_all_peak(graph)
    except Exception as exc:
        return all_rows(ERROR, f"{task.path}: internal error in store-all: {type(exc).__name__}: {exc}", **facts)
    facts.update(fixed_bytes=graph.fixed_mem, lower_bound_bytes=graph.lb, store_all_peak_bytes=reference)
    options = dict(task.plan_options)
    rows: list[Row] = []
    plans: list[tuple[str, str]] = []
    sweep = len(task.budgets) > 1
    for k, (strategy, budget) in enumerate(pairs):
        base = Row(file=task.path, strategy=strategy, budget=budget.text, status=OK, key=task.keys[k], **facts)
        try:
            budget_bytes = resolve_budget(graph, budget, reference)
        except Exception:
            budget_bytes = None
        base = replace(base, budget_bytes=budget_bytes, budget_ratio=_ratio(budget_bytes, reference))
        try:
            plan = make_plan(graph, strategy, budget, options, reference_peak=reference)
        except NoPlanError as exc:
            rows.append(replace(base, status=NO_PLAN, message=exc.message, min_budget_bytes=exc.min_budget))
            continue
        except InputError as exc:
            rows.append(replace(base, status=BAD_INPUT, message=exc.message))
            continue
        except RematError as exc:
            rows.append(replace(base, status=ERROR, message=exc.message))
            continue
        except MemoryError:
            rows.append(replace(base, status=TOO_LARGE, message=f"{task.path}: {strategy} ran out of memory (--max-memory)"))
            continue
        except Exception as exc:
            rows.append(replace(base, status=ERROR, message=f"internal error in {strategy}: {type(exc).__name__}: {exc}"))
            continue
        m = plan.metrics
        plan_file_name = ""
        if task.plan_stem is not None:
            plan_file_name = plan_name(task.plan_stem, strategy, budget, sweep)
            plans.append((plan_file_name, json.dumps(plan_to_json(plan, load_record(task.load, graph)), indent=1) + "\n"))
        rows.append(
            replace(
                base,
                peak_bytes=m.peak_bytes,
                cost=m.cost,
                base_cost=m.base_cost,
                overhead=_finite(m.overhead),
                recomputations=m.recomputations,
                est_seconds=m.est_seconds,
                solve_seconds=round(plan.solve_seconds, 6),
                plan_file=plan_file_name,
            )
        )
    return FileResult(task.path, tuple(rows), tuple(plans))


def _ratio(budget_bytes: int | None, reference: int) -> float | None:
    if budget_bytes is None or reference <= 0:
        return None
    return round(budget_bytes / reference, 6)


def _failure_result(task: FileTask, outcome: Outcome) -> FileResult:
    status = {"timeout": TIMEOUT, "crash": CRASH}.get(outcome.failure or "", ERROR)
    message = f"{task.path}: {outcome.message}"
    if status == CRASH:
        message += " while planning this file"
    rows = tuple(
        Row(file=task.path, strategy=s, budget=b.text, status=status, message=message, key=task.keys[k])
        for k, (s, b) in enumerate(task.pairs)
    )
    return FileResult(task.path, rows)


# --------------------------------------------------------------------------- output files


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
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(list(values))
    return buf.getvalue()


# --------------------------------------------------------------------------- the run


@contextlib.contextmanager
def interrupt_flag() -> Iterator[threading.Event]:
    """An event set by the first Ctrl-C; a second Ctrl-C interrupts as usual.

    Catching the signal as a flag (instead of a KeyboardInterrupt raised at a random
    line) lets the run stop its workers and write its results so far.
    """
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        flag.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def run_batch(
    tasks: Sequence[FileTask],
    *,
    executor: Any = None,
    previous: Sequence[Row] = (),
    fail_fast: bool = False,
    on_start: Callable[[FileTask], None] | None = None,
    on_done: Callable[[FileTask, FileResult], None] | None = None,
    writers: Sequence[RowWriter] = (),
    out_dir: str | Path | None = None,
    stop: threading.Event | None = None,
    work: Callable[[FileTask], FileResult] = plan_file,
) -> BatchResult:
    """Plan every task on ``executor`` (default: local workers, one per core).

    ``previous`` rows (from ``--resume``) whose key matches a task's and whose status a
    rerun would reproduce are reused instead of recomputed. Rows are appended to
    ``writers`` as files finish and rewritten in input order at the end; plans go under
    ``out_dir``. ``stop`` (set by Ctrl-C) ends the run early, keeping finished files.
    ``work`` is the per-file function the workers run (a module-level function, so
    workers can import it); it should return a :class:`FileResult` and never raise.
    """
    executor = executor or LocalExecutor()
    stop = stop or threading.Event()
    results: dict[int, FileResult] = {}
    # The key is content and options, not the path: a moved tree still resumes. A row of
    # the same path is preferred, and required when plans are written (they are per path).
    usable = [r for r in previous if r.key and r.status in _REUSABLE]
    by_file_key = {(r.file, r.key): r for r in usable}
    by_key = {} if out_dir is not None else {r.key: r for r in usable}
    for i, task in enumerate(tasks):
        reused = [by_file_key.get((task.path, k)) or by_key.get(k) for k in task.keys]
        if all(r is not None for r in reused) and all(_plan_present(r, out_dir) for r in reused):  # type: ignore[arg-type]
            results[i] = FileResult(task.path, tuple(replace(r, file=task.path) for r in reused))  # type: ignore[arg-type]
    reused_count = len(results)
    todo = [i for i in range(len(tasks)) if i not in results]
    for w in writers:
        if not w.resumed:  # a resumed file still holds them
            w.append(r for i in sorted(results) for r in results[i].rows)
    stopped = False
    events = executor.run(work, [tasks[i] for i in todo], stop.is_set)
    try:
        for event in events:
            task = tasks[todo[event.index]]
            if event.kind == "start":
                if on_start:
                    on_start(task)
                continue
            outcome = event.outcome
            assert outcome is not None
            if outcome.failure is None and isinstance(outcome.value, FileResult):
                result = outcome.value
            else:
                result = _failure_result(task, outcome)
            if result.plans and out_dir is not None:
                _write_plans(out_dir, result.plans)
                result = replace(result, plans=())
            results[todo[event.index]] = result
            for w in writers:
                w.append(result.rows)
            if on_done:
                on_done(task, result)
            if fail_fast and any(r.failed for r in result.rows):
                stopped = True
                break
    finally:
        close = getattr(events, "close", None)
        if close:
            close()
    rows = tuple(r for i in sorted(results) for r in results[i].rows)
    for w in writers:
        w.finish(rows)
    return BatchResult(
        rows=rows,
        files=len(tasks),
        done=len(results),
        reused=reused_count,
        interrupted=stop.is_set(),
        stopped=stopped,
    )


def _plan_present(row: Row, out_dir: str | Path | None) -> bool:
    if out_dir is None or row.status != OK:
        return True
    return bool(row.plan_file) and (Path(out_dir) / row.plan_file).is_file()


def _write_plans(out_dir: str | Path, plans: Iterable[tuple[str, str]]) -> None:
    for name, text in plans:
        target = Path(out_dir) / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, target)  # an interrupted run never leaves half a plan behind
        except OSError as exc:
            raise InputError(f"{target}: cannot write plan: {exc.strerror or exc}") from None
