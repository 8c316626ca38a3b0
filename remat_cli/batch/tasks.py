"""What a ``remat batch`` worker does: one :class:`FileTask` per file, planned by :func:`plan_file`.

:func:`make_tasks` turns files and options into tasks, each with the ``--resume`` key of
every row it will produce (:func:`row_key`: the file's bytes and every option that shapes
the row); :func:`plan_file` loads the file once, plans it for every (strategy, budget)
pair and turns every failure into a :class:`~remat_cli.batch.rows.Row` (it never raises).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from remat_cli.batch.rows import BAD_INPUT, CRASH, ERROR, NO_PLAN, OK, TIMEOUT, TOO_LARGE, FileResult, Row, format_dims
from remat_cli.budget import Budget
from remat_cli.errors import InputError, NoPlanError, RematError
from remat_cli.executors import Outcome
from remat_cli.limits import LimitError
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.plandoc import finite_or_none as _finite, load_record, plan_json_text
from remat_cli.planner import make_plan, resolve_budget, store_all_peak

__all__ = [
    "DEFAULT_STRATEGY",
    "FileTask",
    "make_tasks",
    "loads_per_file",
    "file_sha256",
    "row_key",
    "plan_name",
    "plan_file",
    "failure_result",
]

# The strategy `remat batch` and `remat check` use when none is given.
DEFAULT_STRATEGY = "auto"


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
    # where the loader's warnings and notes go (module-level functions: workers import them)
    warn: Callable[[str], None] | None = None
    note: Callable[[str], None] | None = None

    @property
    def pairs(self) -> list[tuple[str, Budget]]:
        return [(s, b) for s in self.strategies for b in self.budgets]


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
    load_doc = asdict(load)
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
    warn: Callable[[str], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> list[FileTask]:
    """One :class:`FileTask` per file; ``load`` may be one options object per file;
    ``warn`` / ``note`` receive the loader's messages (in the worker)."""
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
                warn=warn,
                note=note,
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


def loads_per_file(files: Sequence[str], load: LoadOptions, dims_by_file: Mapping[str, Sequence[tuple[str, int]]]) -> list[LoadOptions]:
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


#: What :func:`plan_file` does with a plan that failed: given the graph, strategy, budget,
#: options, store-all peak, the error and the seconds it took, the row's message and
#: smallest budget (``remat check``: the search for it, :func:`remat_cli.check.check_file`).
OnNoPlan = Callable[[Any, str, Budget, dict[str, Any], int, NoPlanError, float], tuple[str, int | None]]


def plan_file(task: FileTask, on_no_plan: OnNoPlan | None = None) -> FileResult:
    """Load ``task.path`` once and plan it for every (strategy, budget); never raises.

    This is what workers run; every failure is a row with a status and one-line message.
    ``on_no_plan``: the message and smallest budget of a row without a plan, from its error
    (default: the error's own).
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
        graph = load_graph(task.path, task.load, warn=task.warn, note=task.note)
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
        started = time.perf_counter()
        try:
            plan = make_plan(graph, strategy, budget, options, reference_peak=reference, searched=on_no_plan is not None)
        except NoPlanError as exc:
            message, smallest = exc.message, exc.min_budget
            if on_no_plan is not None:
                message, smallest = on_no_plan(graph, strategy, budget, options, reference, exc, time.perf_counter() - started)
            rows.append(replace(base, status=NO_PLAN, message=message, min_budget_bytes=smallest))
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
            plans.append((plan_file_name, plan_json_text(plan, load_record(task.load, graph))))
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


def failure_result(task: FileTask, outcome: Outcome) -> FileResult:
    """The rows of a task whose worker timed out, crashed or failed outside :func:`plan_file`."""
    status = {"timeout": TIMEOUT, "crash": CRASH}.get(outcome.failure or "", ERROR)
    message = f"{task.path}: {outcome.message}"
    if status == CRASH:
        message += " while planning this file"
    rows = tuple(
        Row(file=task.path, strategy=s, budget=b.text, status=status, message=message, key=task.keys[k])
        for k, (s, b) in enumerate(task.pairs)
    )
    return FileResult(task.path, rows)
