"""``remat check``: pass/fail memory gates for CI, with a JUnit XML report.

A model passes when its strategy finds a plan within its budget (fixed memory included)
and, if a limit is set, with at most ``max_overhead`` extra compute. Exit codes follow
DESIGN §5: 0 every model passes, 1 some model fails (or hangs, or crashes its worker),
2 some model is bad input (unreadable file, bad dims, no budget).
"""

from __future__ import annotations

import os
import re
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from remat_cli.batch import DEFAULT_STRATEGY, BAD_INPUT, NO_PLAN, OK, FileResult, FileTask, Row, discover, make_tasks, plan_file, run_batch
from remat_cli.budget import Budget
from remat_cli.config import ModelEntry, find_config, load_config
from remat_cli.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, InputError, NoPlanError
from remat_cli.loaders import LoadOptions
from remat_cli.planner import with_smallest
from remat_cli.units import fmt_bytes, fmt_bytes_exact, fmt_pct, fmt_seconds
from remat_cli.strategies import get_strategy

__all__ = [
    "CheckSpec",
    "CheckResult",
    "CheckReport",
    "CheckRun",
    "resolve_check",
    "specs_from_entries",
    "merge_load",
    "run_check",
    "check_file",
    "verdict",
    "write_junit",
    "junit_tree",
]

PASS = "pass"
FAIL = "fail"
ERROR = "error"


@dataclass(frozen=True)
class CheckSpec:
    """One model to check: where it is, how to load it, and its limits."""

    path: str
    name: str
    load: LoadOptions
    budget: Budget
    strategy: str
    max_overhead: float | None = None
    max_nodes: int | None = None


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one model (``pass``, ``fail`` or ``error``), why, and its batch row."""

    spec: CheckSpec
    verdict: str
    reason: str
    row: Row

    @property
    def bad_input(self) -> bool:
        return self.row.status == BAD_INPUT

    def line(self) -> str:
        """``PASS name: why`` (one line per model)."""
        return f"{self.verdict.upper()} {self.spec.name}: {self.reason}"


@dataclass(frozen=True)
class CheckReport:
    """Every model's result, in the order given, and whether Ctrl-C cut the run short."""

    results: tuple[CheckResult, ...]
    models: int
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        if any(r.bad_input for r in self.results):
            return EXIT_BAD_INPUT
        if self.interrupted or len(self.results) < self.models or any(r.verdict != PASS for r in self.results):
            return EXIT_FAILED
        return EXIT_OK

    @property
    def counts(self) -> dict[str, int]:
        out = {PASS: 0, FAIL: 0, ERROR: 0}
        for r in self.results:
            out[r.verdict] += 1
        return out


def merge_load(base: LoadOptions, override: LoadOptions, given: Collection[str] | None = None) -> LoadOptions:
    """``override``'s settings over ``base``: dims merged by name, other fields where set.

    ``given`` names the fields the user set (on the command line): those win even when
    their value equals the default (``--optimizer sgd`` over ``optimizer = "adam"``).
    Without it, a field counts as set when it differs from the default.
    """
    default = LoadOptions()
    changes: dict[str, Any] = {}
    for f in fields(LoadOptions):
        value = getattr(override, f.name)
        if f.name == "dims":
            merged = dict(base.dims)
            merged.update(dict(value))
            changes["dims"] = tuple(sorted(merged.items()))
        elif (given is not None and f.name in given) or value != getattr(default, f.name):
            changes[f.name] = value
    return replace(base, **changes)


def specs_from_entries(
    entries: Sequence[ModelEntry],
    *,
    cli_load: LoadOptions = LoadOptions(),
    cli_given: Collection[str] | None = None,
    budget: Budget | None = None,
    max_overhead: float | None = None,
    strategy: str | None = None,
    max_nodes: int | None = None,
    default_strategy: str,
) -> list[CheckSpec]:
    """Check specs from config entries; command-line values win over the file's.

    ``cli_given`` names the :class:`LoadOptions` fields set on the command line (see
    :func:`merge_load`): they win even where they equal the default.
    """
    specs = []
    for e in entries:
        chosen_budget = budget if budget is not None else e.budget
        if chosen_budget is None or chosen_budget.is_none:
            raise InputError(f"{e.name}: no budget to check against: pass --budget or set budget in the configuration")
        load = LoadOptions(
            dims=e.dims,
            training=e.training,
            convention=e.convention,
            optimizer=e.optimizer or LoadOptions().optimizer,
            device=e.device or LoadOptions().device,
            cost=e.cost_model or LoadOptions().cost,
            precision=e.precision or LoadOptions().precision,
            world_size=e.world_size or LoadOptions().world_size,
            shard=e.shard or LoadOptions().shard,
        )
        name = strategy or e.strategy or default_strategy
        get_strategy(name)  # an unknown name is bad usage before any work starts
        specs.append(
            CheckSpec(
                path=e.path,
                name=e.name,
                load=merge_load(load, cli_load, cli_given),
                budget=chosen_budget,
                strategy=name,
                max_overhead=max_overhead if max_overhead is not None else e.max_overhead,
                max_nodes=max_nodes if max_nodes is not None else e.max_nodes,
            )
        )
    return specs


@dataclass(frozen=True)
class CheckRun:
    """What ``remat check`` runs: the models' specs, and the run settings (file's or given)."""

    specs: tuple[CheckSpec, ...]
    jobs: int | None = None
    timeout: float | None = None
    junit: str | None = None


def resolve_check(
    models: Sequence[str],
    *,
    config_file: str | None = None,
    cli_load: LoadOptions = LoadOptions(),
    cli_given: Collection[str] | None = None,
    budget: Budget | None = None,
    max_overhead: float | None = None,
    strategy: str | None = None,
    max_nodes: int | None = None,
    jobs: int | None = None,
    timeout: float | None = None,
    junit: str | None = None,
) -> CheckRun:
    """Merge the command line over the configuration into what ``remat check`` runs.

    With no ``models`` they come from the configuration (``config_file``, else the nearest
    remat.toml or ``[tool.remat]``), with their dims, budgets and limits; models named on
    the command line take the file's defaults. Command-line values win over the file's;
    the file's JUnit report is written only for the file's own models.
    """
    config_path = Path(config_file) if config_file else find_config()
    conf = load_config(config_path) if config_path else None
    if models:
        defaults = conf.defaults if conf else ModelEntry(path="", name="")
        # in the order given; a missing file stays, to be reported as an error row with the rest
        files = dict.fromkeys(f for m in models for f in (discover([m]) if os.path.lexists(m) else [m]))
        entries = [replace(defaults, path=f, name=f) for f in files]
    elif conf is not None:
        entries = list(conf.models)
    else:
        raise InputError("no models given and no remat.toml (or [tool.remat] in pyproject.toml) found here or above")
    specs = specs_from_entries(
        entries,
        cli_load=replace(cli_load, strict_dims=len(entries) == 1),
        cli_given=cli_given,
        budget=budget,
        max_overhead=max_overhead,
        strategy=strategy,
        max_nodes=max_nodes,
        default_strategy=DEFAULT_STRATEGY,
    )
    if conf is not None:
        jobs = jobs or conf.jobs
        timeout = timeout or conf.timeout
        if not models:  # the file's report is for the file's models
            junit = junit or (str(Path(conf.source).parent / conf.junit) if conf.junit else None)
    return CheckRun(tuple(specs), jobs=jobs, timeout=timeout, junit=junit)


def verdict(spec: CheckSpec, row: Row) -> CheckResult:
    """Judge one model's batch row against its budget and overhead limit."""
    if row.status == OK:
        peak = f"peak {fmt_bytes(row.peak_bytes)} <= budget {fmt_bytes(row.budget_bytes)}"
        overhead = row.overhead or 0.0
        if spec.max_overhead is not None and overhead > spec.max_overhead + 1e-12:
            return CheckResult(
                spec,
                FAIL,
                f"overhead {fmt_pct(overhead)} is above the limit {fmt_pct(spec.max_overhead)} ({peak}, {row.strategy})",
                row,
            )
        limit = f" <= {fmt_pct(spec.max_overhead)}" if spec.max_overhead is not None else ""
        return CheckResult(spec, PASS, f"{peak}, overhead {fmt_pct(overhead)}{limit} ({row.strategy})", row)
    if row.status == NO_PLAN:
        # check_file's message (planner, find_smallest) names the lower bound and the
        # smallest budget a plan was found for, each for what it is
        reason = f"no plan fits: {_strip_path(row.message, spec.path)}"
        if row.min_budget_bytes is not None and fmt_bytes(row.min_budget_bytes) not in reason:
            reason += f"; smallest budget a plan was found for: {fmt_bytes(row.min_budget_bytes)}"
        return CheckResult(spec, FAIL, reason, row)
    return CheckResult(spec, ERROR, f"{row.status}: {_strip_path(row.message, spec.path)}", row)


def _strip_path(message: str, path: str) -> str:
    prefix = f"{path}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


def run_check(
    specs: Sequence[CheckSpec],
    *,
    executor: Any = None,
    on_start: Callable[[FileTask], None] | None = None,
    on_done: Callable[[FileTask, FileResult], None] | None = None,
    stop: threading.Event | None = None,
    warn: Callable[[str], None] | None = None,
    note: Callable[[str], None] | None = None,
    plan_options: Mapping[str, Any] | None = None,
) -> CheckReport:
    """Plan every model (in parallel on ``executor``) and judge each one; ``warn`` /
    ``note`` receive the loader's messages; ``plan_options`` as
    :func:`~remat_cli.planner.make_plan` takes them (``{"time_limit": 10}``)."""
    tasks: list[FileTask] = []
    for spec in specs:
        tasks += make_tasks(
            [spec.path],
            strategies=[spec.strategy],
            budgets=[spec.budget],
            load=spec.load,
            max_nodes=spec.max_nodes,
            names=[spec.name],
            warn=warn,
            note=note,
            plan_options=plan_options,
        )
    result = run_batch(tasks, executor=executor, on_start=on_start, on_done=on_done, stop=stop, work=check_file)
    by_path: dict[tuple[str, str], Row] = {(r.file, r.key): r for r in result.rows}
    results = []
    for spec, task in zip(specs, tasks):
        row = by_path.get((task.path, task.keys[0]))
        if row is not None:
            results.append(verdict(spec, row))
    return CheckReport(tuple(results), models=len(specs), interrupted=result.interrupted)


def check_file(task: FileTask) -> FileResult:
    """:func:`remat_cli.batch.plan_file`, and for each row without a plan the smallest
    budget the search (:mod:`remat_cli.sweep`) finds, as ``plan`` reports it: from the
    failed plan, on the same graph (the plan is not made again: it was, on a graph loaded
    again, and a failing random1000 check at 0.3x took 2.4 s; now 1.5 s, as `remat plan`).

    ``min_budget_bytes`` of such a row is then a budget a plan was found for (replayed by
    the simulator), or ``None``; never the lower bound, which is its own column.
    """

    def search(
        graph: Any, strategy: str, budget: Any, options: dict[str, Any], reference: int, exc: NoPlanError, spent: float
    ) -> tuple[str, int | None]:
        try:
            named = with_smallest(graph, strategy, budget, exc, options, reference_peak=reference, graph_file=task.path, spent=spent)
        except Exception as failed:  # the search failed: say so rather than keep a hint
            return f"{exc.message} (searching the smallest budget failed: {failed})", None
        return named.message, named.min_budget

    return plan_file(task, on_no_plan=search)


# Characters XML 1.0 cannot carry at all (even escaped): shown as \xNN instead.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junit_tree(report: CheckReport, suite: str = "remat check") -> ET.ElementTree:
    """JUnit XML: one ``testsuite`` with one ``testcase`` per model.

    A failed check is a ``failure``; a model that could not be checked (bad input, hang,
    crash) is an ``error``; the plan's figures go in ``system-out``.
    """
    counts = report.counts
    total_time = sum(r.row.solve_seconds or 0.0 for r in report.results)
    attrs = {
        "name": suite,
        "tests": str(len(report.results)),
        "failures": str(counts[FAIL]),
        "errors": str(counts[ERROR]),
        "skipped": "0",
        "time": f"{total_time:.3f}",
    }
    root = ET.Element("testsuites", attrs)
    ts = ET.SubElement(root, "testsuite", attrs)
    for r in report.results:
        case = ET.SubElement(
            ts,
            "testcase",
            {
                "classname": "remat.check",
                "name": _xml_text(r.spec.name),
                "file": _xml_text(r.spec.path),
                "time": f"{r.row.solve_seconds or 0.0:.3f}",
            },
        )
        if r.verdict == FAIL:
            ET.SubElement(case, "failure", {"message": _xml_text(r.reason), "type": r.row.status}).text = _xml_text(r.line())
        elif r.verdict == ERROR:
            ET.SubElement(case, "error", {"message": _xml_text(r.reason), "type": r.row.status}).text = _xml_text(r.line())
        ET.SubElement(case, "system-out").text = _xml_text(_details(r))
    ET.indent(root)
    return ET.ElementTree(root)


def _details(r: CheckResult) -> str:
    row = r.row
    lines = [f"strategy: {row.strategy}", f"budget: {row.budget} ({fmt_bytes(row.budget_bytes)})"]
    if row.peak_bytes is None and row.lower_bound_bytes is not None:
        lines += [
            f"store-all peak: {fmt_bytes(row.store_all_peak_bytes)}",
            f"lower bound (no schedule fits below): {fmt_bytes(row.lower_bound_bytes)}",
            "smallest budget a plan was found for: "
            + (fmt_bytes_exact(row.min_budget_bytes) if row.min_budget_bytes is not None else "none"),
        ]
    if row.peak_bytes is not None:
        lines += [
            f"peak: {fmt_bytes_exact(row.peak_bytes)}",
            f"store-all peak: {fmt_bytes(row.store_all_peak_bytes)}",
            f"lower bound: {fmt_bytes(row.lower_bound_bytes)}",
            f"overhead: {fmt_pct(row.overhead)}",
            f"recomputations: {row.recomputations}",
            f"solve time: {fmt_seconds(row.solve_seconds)}",
        ]
    if row.message:
        lines.append(f"message: {row.message}")
    return "\n".join(lines)


def write_junit(report: CheckReport, path: str | Path) -> None:
    """Write :func:`junit_tree` to ``path``."""
    try:
        junit_tree(report).write(str(path), encoding="utf-8", xml_declaration=True)
    except OSError as exc:
        raise InputError(f"{path}: cannot write the JUnit report: {exc.strerror or exc}") from None
