"""The ``remat batch`` run: prepare the tasks, plan them on an executor, keep what finished.

:func:`prepare_batch` turns what the command line asked (:class:`BatchRequest`) into a
:class:`BatchJob`: the files found, one task per file, the earlier rows ``--resume`` may
reuse. :func:`run_batch` sends tasks to an executor (:mod:`remat_cli.executors`), turns
hangs and crashes into rows too, writes rows and plans as files finish, and returns the
rows in input order whatever the parallelism; :func:`interrupt_flag` turns the first
Ctrl-C into a flag so a run stops its workers and still writes its results so far.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from remat_cli.batch.discover import discover
from remat_cli.batch.rows import BatchResult, FileResult, Row, RowWriter, read_rows, reusable, unused_dims
from remat_cli.batch.tasks import DEFAULT_STRATEGY, FileTask, failure_result, loads_per_file, make_tasks, plan_file
from remat_cli.budget import Budget
from remat_cli.errors import InputError
from remat_cli.executors import LocalExecutor
from remat_cli.loaders import LoadOptions

__all__ = ["BatchRequest", "BatchJob", "prepare_batch", "run_batch", "interrupt_flag"]


@dataclass(frozen=True)
class BatchRequest:
    """What ``remat batch`` is asked to do (the command line, parsed); checked when made.

    ``dims_by_file`` holds models' own dims (remat.toml's ``[[models]]``, keyed by path),
    under the ``--dim`` values in ``load``, which win.
    """

    paths: tuple[str, ...]
    load: LoadOptions
    strategies: tuple[str, ...] = (DEFAULT_STRATEGY,)
    budgets: tuple[Budget, ...] = ()
    globs: tuple[str, ...] = ()
    max_nodes: int | None = None
    dims_by_file: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    csv_path: str | None = None
    jsonl_path: str | None = None
    out_dir: str | None = None
    resume: bool = False
    fail_fast: bool = False
    warn: Callable[[str], None] | None = None  # the loader's warnings and notes (module-level functions)
    note: Callable[[str], None] | None = None
    plan_options: Mapping[str, Any] | None = None  # as make_plan takes them ({"time_limit": 10})

    def __post_init__(self) -> None:
        from remat_cli.strategies import get_strategy

        for name in self.strategies:
            get_strategy(name)  # an unknown name is bad usage before any work starts
        if self.resume and not (self.jsonl_path or self.csv_path):
            raise InputError("--resume needs --jsonl or --csv: the results to resume from")


@dataclass(frozen=True)
class BatchJob:
    """A prepared batch: the files found, one task per file, rows ``--resume`` may reuse."""

    request: BatchRequest
    files: tuple[str, ...]
    tasks: tuple[FileTask, ...]
    previous: tuple[Row, ...] = ()

    def run(
        self,
        executor: Any,
        *,
        on_start: Callable[[FileTask], None] | None = None,
        on_done: Callable[[FileTask, FileResult], None] | None = None,
        stop: threading.Event | None = None,
    ) -> BatchResult:
        """Plan every task on ``executor``, writing ``--jsonl``/``--csv`` rows and plans as they finish."""
        req = self.request
        writers = [RowWriter(p, resume=req.resume) for p in (req.jsonl_path, req.csv_path) if p]
        try:
            return run_batch(
                self.tasks,
                executor=executor,
                previous=self.previous,
                fail_fast=req.fail_fast,
                on_start=on_start,
                on_done=on_done,
                writers=writers,
                out_dir=req.out_dir,
                stop=stop,
            )
        finally:
            for w in writers:
                w.close()

    def check_dims(self, result: BatchResult) -> None:
        """Refuse a ``--dim`` that no loaded file has (exit 2), as single-file commands do.

        One ``--dim`` list serves many models, and a model without that dimension skips
        it; a name no file has is a typo. Not judged after ``--fail-fast`` stopped early.
        """
        if result.stopped:
            return
        unused = unused_dims(result.rows, [k for k, _ in self.request.load.dims])
        if unused:
            raise InputError(
                f"--dim {unused[0]}: no file has a dimension named {unused[0]!r} (each row's dims column shows what every file used)"
            )


def prepare_batch(request: BatchRequest) -> BatchJob:
    """Find the files, make one task per file, and read the rows ``--resume`` may reuse."""
    files = discover(request.paths, request.globs)
    if not files:
        where = ", ".join(request.paths)
        raise InputError(f"no graph files found under {where}" + (f" matching {', '.join(request.globs)}" if request.globs else ""))
    # a --dim the only file lacks is an error there, as for single-file commands
    load = replace(request.load, strict_dims=len(files) == 1)
    loads = loads_per_file(files, load, request.dims_by_file)
    tasks = make_tasks(
        files,
        strategies=request.strategies,
        budgets=request.budgets,
        load=loads,
        max_nodes=request.max_nodes,
        out_dir=request.out_dir,
        warn=request.warn,
        note=request.note,
        plan_options=request.plan_options,
    )
    previous: list[Row] = []
    if request.resume:
        previous = read_rows(request.jsonl_path) if request.jsonl_path else []
        if not previous and request.csv_path:
            previous = read_rows(request.csv_path)
    return BatchJob(request, tuple(files), tuple(tasks), tuple(previous))


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
    results = reusable(tasks, previous, out_dir)
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
                result = failure_result(task, outcome)
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
