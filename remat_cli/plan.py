"""Plans (a validated schedule with its metrics) and their file formats (DESIGN §4).

``remat-plan`` v1 JSON and twremat ``c``/``f`` text are written from a :class:`Plan` and
read back into a :class:`~remat_cli.schedule.Schedule` against a graph, refusing plans
made for another graph (sha256 mismatch) or naming unknown nodes.

A plan document also records the load options that turned the model file into the graph
(``"load"``: dims, training or inference, convention, optimizer, cost model, device,
views), so that a plan replayed under other options is refused naming the option that
differs, not only "made for another graph".
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, Schedule
from remat_cli.simulate import Metrics

__all__ = [
    "Plan", "plan_to_json", "write_plan", "read_plan", "plan_to_twremat", "load_record", "PLAN_FORMAT",
]

PLAN_FORMAT = "remat-plan"
PLAN_VERSION = 1


@dataclass(frozen=True, eq=False)
class Plan:
    """A schedule that passed the simulator, with everything a report needs."""

    graph: Graph
    strategy: str
    budget_bytes: int | None
    schedule: Schedule
    metrics: Metrics
    solve_seconds: float
    store_all_peak: int
    keep: tuple[int, ...] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def budget_ratio(self) -> float | None:
        if self.budget_bytes is None or self.store_all_peak <= 0:
            return None
        return self.budget_bytes / self.store_all_peak

    @property
    def fits(self) -> bool:
        return self.budget_bytes is None or self.metrics.peak_bytes <= self.budget_bytes


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def metrics_to_json(m: Metrics, solve_seconds: float | None = None) -> dict[str, Any]:
    """The ``metrics`` object of plan files and reports."""
    out: dict[str, Any] = {
        "peak_bytes": m.peak_bytes,
        "fixed_bytes": m.fixed_bytes,
        "lower_bound_bytes": m.lower_bound_bytes,
        "cost": m.cost,
        "base_cost": m.base_cost,
        "overhead": _finite(m.overhead),
        "recomputations": m.recomputations,
        "computes": m.computes,
        "steps": m.steps,
        "est_seconds": m.est_seconds,
    }
    if solve_seconds is not None:
        out["solve_seconds"] = round(solve_seconds, 6)
    out["valid"] = True
    return out


def load_record(options: Any, graph: Graph) -> dict[str, Any]:
    """The load options (a :class:`~remat_cli.loaders.LoadOptions`) that made ``graph``, as
    the plan file's ``"load"`` object; dims, training and convention as they took effect
    (an ONNX model's dims are those it has, of the ones given)."""
    used = graph.meta.get("dims")
    dims = used.items() if isinstance(used, Mapping) else (getattr(options, "dims", ()) or ())
    return {
        "dims": {str(k): int(v) for k, v in sorted(dims)},
        "training": bool(graph.is_training),
        "convention": graph.meta.get("training_convention") if graph.is_training else None,
        "optimizer": getattr(options, "optimizer", None),
        "cost": getattr(options, "cost", None),
        "device": getattr(options, "device", None),
        "keep_views": bool(getattr(options, "keep_views", False)),
        "attention": getattr(graph.meta.get("attention"), "mode", None),  # ONNX only: fused | unfused
    }


def _flag(key: str, value: Any) -> str:
    """One load option as the command-line flag that sets it."""
    if key == "dims":
        return " ".join(f"--dim {k}={v}" for k, v in (value or {}).items()) or "no --dim"
    if key == "training":
        return "--training" if value else "--inference"
    if key == "keep_views":
        return "--keep-views" if value else "no --keep-views"
    if value is None:
        return f"no --{key}"
    return f"--{key} {value}"


def load_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The options that differ, as ``--optimizer adam (this run: --optimizer sgd)``."""
    out = []
    for key, now in current.items():
        if key not in recorded:
            continue
        then = recorded[key]
        if key == "dims" and isinstance(then, Mapping):
            then = {str(k): v for k, v in then.items()}
        if then != now:
            out.append(f"{_flag(key, then)} (this run: {_flag(key, now)})")
    return out


def plan_to_json(plan: Plan, load: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``remat-plan`` v1 document; ``load`` (see :func:`load_record`) is recorded."""
    g = plan.graph
    doc = {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "graph": {"name": g.name, "sha256": g.sha256, "nodes": g.n},
        "strategy": plan.strategy,
        "budget_bytes": plan.budget_bytes,
        "budget_ratio": plan.budget_ratio,
        "store_all_peak_bytes": plan.store_all_peak,
        "schedule": plan.schedule.named(g.ids),
        "metrics": metrics_to_json(plan.metrics, plan.solve_seconds),
        "keep": None if plan.keep is None else [g.ids[v] for v in plan.keep],
        "info": _jsonable(dict(plan.info)),
    }
    if load is not None:
        doc["load"] = _jsonable(dict(load))
    return doc


def plan_to_twremat(plan: Plan) -> str:
    """twremat's output text: one ``c ID`` or ``f ID`` line per step."""
    ids = plan.graph.ids
    if any(len(x.split()) != 1 for x in ids):  # an id with spaces: number the nodes instead
        ids = tuple(str(v) for v in range(plan.graph.n))
    lines = [
        f"{'c' if op == COMPUTE else 'f'} {ids[v]}"
        for op, v in zip(plan.schedule.ops.tolist(), plan.schedule.nodes.tolist())
    ]
    return "\n".join(lines) + "\n"


def write_plan(plan: Plan, path: str | Path, load: Mapping[str, Any] | None = None) -> None:
    """Write ``plan`` as remat-plan JSON (recording ``load``), or twremat text when the
    name ends in ``.txt``."""
    path = Path(path)
    if path.suffix == ".txt":
        path.write_text(plan_to_twremat(plan))
    else:
        path.write_text(json.dumps(plan_to_json(plan, load), indent=1) + "\n")


def read_plan(
    path: str | Path, graph: Graph, load: Mapping[str, Any] | None = None, max_bytes: int | None = None
) -> tuple[Schedule, dict[str, Any]]:
    """Read a plan file (remat-plan JSON or twremat c/f text) as a schedule over ``graph``.

    Returns the schedule and the document's header (empty for twremat text). Raises
    :class:`InputError` for unreadable files, another graph's plan (naming the load
    options that differ from ``load``, this run's :func:`load_record`, when the plan
    recorded its own), or unknown nodes.
    """
    from remat_cli.limits import read_regular_file

    path = Path(path)
    data = read_regular_file(path, max_bytes, "plan file")  # no FIFOs, devices or huge files
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: cannot read plan: {exc}") from None
    if not text.strip():
        raise InputError(f"{path}: the plan file is empty")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
        return _plan_from_json(doc, graph, path, load), doc
    return _plan_from_twremat(text, graph, path), {}


def _plan_from_json(doc: Any, graph: Graph, path: Path, load: Mapping[str, Any] | None = None) -> Schedule:
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise InputError(f"{path}: not a remat-plan file (no \"format\": \"{PLAN_FORMAT}\")")
    if doc.get("version") != PLAN_VERSION:
        raise InputError(f"{path}: remat-plan version {doc.get('version')!r} is not supported")
    sha = (doc.get("graph") or {}).get("sha256")
    if sha is not None and sha != graph.sha256:
        recorded = doc.get("load")
        if isinstance(recorded, Mapping) and load is not None:
            diff = load_differences(recorded, load)
            if diff:
                raise InputError(
                    f"{path}: this plan was made under other load options: {'; '.join(diff)}; "
                    "validate with the plan's options"
                )
            raise InputError(
                f"{path}: this plan was made for another graph with the same load options "
                f"(sha256 {str(sha)[:12]}…, this graph is {graph.sha256[:12]}…): the model file differs"
            )
        raise InputError(
            f"{path}: this plan was made for another graph (sha256 {str(sha)[:12]}…, "
            f"this graph is {graph.sha256[:12]}…)"
        )
    steps = doc.get("schedule")
    if not isinstance(steps, list):
        raise InputError(f"{path}: \"schedule\" must be a list of [\"compute\"|\"free\", id] steps")
    index = graph.index
    for k, step in enumerate(steps):
        if not (isinstance(step, list) and len(step) == 2 and step[0] in ("compute", "free")):
            raise InputError(f"{path}: step {k} is not [\"compute\"|\"free\", id]: {step!r}")
        if step[1] not in index:
            raise InputError(f"{path}: step {k} names unknown node {step[1]!r}")
    return Schedule.from_named(steps, index)


def _plan_from_twremat(text: str, graph: Graph, path: Path) -> Schedule:
    """twremat ``c``/``f`` lines. twremat ids are integers: for a graph whose ids are not
    (an ONNX model), an id that names no node is read as the node's number, the way
    ``remat convert`` numbers them (so a plan made on the converted text replays on the
    model itself)."""
    index = graph.index
    numbered = not all(x.isdigit() for x in graph.ids)
    steps = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or parts[0] not in ("c", "f"):
            raise InputError(f"{path}:{lineno}: expected 'c ID' or 'f ID', got {line.strip()!r}")
        node = parts[1]
        if node not in index:
            if not (numbered and node.isdigit() and int(node) < graph.n):
                raise InputError(f"{path}:{lineno}: unknown node {node!r}")
            node = graph.ids[int(node)]
        steps.append(("compute" if parts[0] == "c" else "free", node))
    return Schedule.from_named(steps, index)


def _jsonable(obj: Any) -> Any:
    """Strategy info as plain JSON values (numpy scalars and tuples converted)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
