"""Plan many graph files: ``remat batch``, and the machinery ``remat check`` runs on.

* :mod:`~remat_cli.batch.discover` finds graph files under directories, by content
  (the loaders' format detection), in a deterministic order;
* :mod:`~remat_cli.batch.tasks` is what a worker runs for one file: load it once, plan
  it for every (strategy, budget) pair, and turn every failure into a row (never raise);
* :mod:`~remat_cli.batch.rows` is the row schema, its CSV / JSON-lines files (appended
  as files finish, rewritten in input order at the end) and what ``--resume`` reuses;
* :mod:`~remat_cli.batch.run` prepares a run from the command line's request and runs
  it on an executor (:mod:`remat_cli.executors`), surviving hangs, crashes and Ctrl-C.

The names below are the package's API; import them from here.
"""

from __future__ import annotations

from remat_cli.batch.discover import discover
from remat_cli.batch.rows import (
    BAD_INPUT,
    COLUMNS,
    CRASH,
    ERROR,
    FAILED,
    NO_PLAN,
    OK,
    STATUSES,
    TIMEOUT,
    TOO_LARGE,
    BatchResult,
    FileResult,
    Row,
    RowWriter,
    csv_line,
    format_dims,
    read_rows,
    unused_dims,
)
from remat_cli.batch.run import BatchJob, BatchRequest, interrupt_flag, prepare_batch, run_batch
from remat_cli.batch.tasks import DEFAULT_STRATEGY, FileTask, file_sha256, loads_per_file, make_tasks, plan_file, plan_name, row_key

__all__ = [
    "DEFAULT_STRATEGY",
    "STATUSES",
    "FAILED",
    "OK",
    "NO_PLAN",
    "BAD_INPUT",
    "TOO_LARGE",
    "TIMEOUT",
    "CRASH",
    "ERROR",
    "COLUMNS",
    "Row",
    "FileTask",
    "FileResult",
    "BatchResult",
    "BatchRequest",
    "BatchJob",
    "discover",
    "make_tasks",
    "file_sha256",
    "row_key",
    "plan_name",
    "plan_file",
    "prepare_batch",
    "run_batch",
    "interrupt_flag",
    "read_rows",
    "RowWriter",
    "csv_line",
    "format_dims",
    "loads_per_file",
    "unused_dims",
]
