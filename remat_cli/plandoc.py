"""Plan documents: a :class:`Plan` (a schedule the simulator replayed, with its metrics)
and its files (DESIGN §4): written, read back, and their claims validated.

(:mod:`remat_cli.planner` runs the strategies that make plans; this module only holds
them and their files.)

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
from remat_cli.units import Fact, Phrase, say

__all__ = [
    "Plan",
    "plan_to_json",
    "write_plan",
    "read_plan",
    "plan_to_twremat",
    "PLAN_FORMAT",
    "ClaimValidation",
    "validate_claims",
    "load_record",
    "finite_or_none",
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


def finite_or_none(x: float | None) -> float | None:
    """``x``, or None where JSON has no number for it (NaN, infinities)."""
    return None if x is None or not math.isfinite(x) else x


def metrics_to_json(m: Metrics, solve_seconds: float | None = None) -> dict[str, Any]:
    """The ``metrics`` object of plan files and reports."""
    out: dict[str, Any] = {
        "peak_bytes": m.peak_bytes,
        "fixed_bytes": m.fixed_bytes,
        "lower_bound_bytes": m.lower_bound_bytes,
        "cost": m.cost,
        "base_cost": m.base_cost,
        "overhead": finite_or_none(m.overhead),
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
        "precision": getattr(options, "precision", "fp32"),
        "world_size": int(getattr(options, "world_size", 1)),
        "shard": getattr(options, "shard", "none"),
        "profile": getattr(options, "profile", None),
        "attention": _attention_mode(graph.meta.get("attention")),  # ONNX only: fused | unfused
    }


def _attention_mode(facts: Any) -> str | None:
    """The mode in ``meta["attention"]`` (the dict :mod:`remat_cli.attention` writes), if any."""
    mode = facts.get("mode") if isinstance(facts, Mapping) else None
    return mode if isinstance(mode, str) else None


def _flag(key: str, value: Any) -> str:
    """One load option as the command-line flag that sets it."""
    if key == "dims":
        return " ".join(f"--dim {k}={v}" for k, v in (value or {}).items()) or "no --dim"
    if key == "training":
        return "--training" if value else "--inference"
    if key == "keep_views":
        return "--keep-views" if value else "no --keep-views"
    flag = key.replace("_", "-")
    if value is None:
        return f"no --{flag}"
    return f"--{flag} {value}"


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


def plan_to_json(plan: Plan, load: Mapping[str, Any] | None = None, *, steps: bool = True) -> dict[str, Any]:
    """The ``remat-plan`` v1 document; ``load`` (see :func:`load_record`) is recorded.
    ``steps=False``: ``"schedule"`` holds None, in its place (:func:`plan_json_text` writes it)."""
    g = plan.graph
    doc = {
        "format": PLAN_FORMAT,
        "version": PLAN_VERSION,
        "graph": {"name": g.name, "sha256": g.sha256, "nodes": g.n},
        "strategy": plan.strategy,
        "budget_bytes": plan.budget_bytes,
        "budget_ratio": plan.budget_ratio,
        "store_all_peak_bytes": plan.store_all_peak,
        "schedule": plan.schedule.named(g.ids) if steps else None,
        "metrics": metrics_to_json(plan.metrics, plan.solve_seconds),
        "keep": None if plan.keep is None else [g.ids[v] for v in plan.keep],
        "info": _jsonable(dict(plan.info)),
        **_provenance(g),
    }
    if load is not None:
        doc["load"] = _jsonable(dict(load))
    return doc


def _provenance(g: Graph) -> dict[str, Any]:
    """What a captured graph came from (remat_cli.torch); apply refuses other models."""
    prov = g.meta.get("torch") if isinstance(g.meta, Mapping) else None
    return {"provenance": _jsonable(prov)} if isinstance(prov, Mapping) else {}


def plan_to_twremat(plan: Plan) -> str:
    """twremat's output text: one ``c ID`` or ``f ID`` line per step.

    The text has no quoting, so an id that is empty or holds whitespace cannot be written
    (it would not read back as the same node): :class:`InputError` names it.
    """
    ids = plan.graph.ids
    used = set(plan.schedule.nodes.tolist())
    bad = next((ids[v] for v in sorted(used) if not ids[v] or any(c.isspace() for c in ids[v])), None)
    if bad is not None:
        raise InputError(f"node id {bad!r} holds whitespace, which twremat c/f text cannot hold; write the plan as JSON (-o plan.json)")
    lines = [f"{'c' if op == COMPUTE else 'f'} {ids[v]}" for op, v in zip(plan.schedule.ops.tolist(), plan.schedule.nodes.tolist())]
    return "\n".join(lines) + "\n"


def write_plan(plan: Plan, path: str | Path, load: Mapping[str, Any] | None = None) -> None:
    """Write ``plan`` as remat-plan JSON (recording ``load``), or twremat text when the
    name ends in ``.txt``."""
    path = Path(path)
    if path.suffix == ".txt":
        try:
            text = plan_to_twremat(plan)
        except InputError as exc:
            raise InputError(f"{path}: {exc.message}") from None
    else:
        text = plan_json_text(plan, load)
    path.write_text(text)


def plan_json_text(plan: Plan, load: Mapping[str, Any] | None = None) -> str:
    """The plan file's text: ``json.dumps(plan_to_json(plan, load), indent=1) + "\\n"``, byte
    for byte, with the schedule written without ``json``'s pure-Python indenting encoder
    (and without naming the steps first): four lines per step, the ids quoted once each by
    its C quoting. A 300k-step plan of nn100000: 0.69-0.79 s -> 0.09-0.12 s."""
    from json.encoder import encode_basestring_ascii as quote

    doc = plan_to_json(plan, load, steps=False)
    schedule, ids = plan.schedule, plan.graph.ids
    keys = list(doc)
    at = keys.index("schedule")
    before = json.dumps({k: doc[k] for k in keys[:at]}, indent=1, allow_nan=False)
    after = json.dumps({k: doc[k] for k in keys[at + 1 :]}, indent=1, allow_nan=False)
    if schedule.ops.size == 0:
        steps = "[]"
    else:
        quoted = [quote(x) for x in ids]
        head = ('  [\n   "free",\n   ', '  [\n   "compute",\n   ')
        lines = [head[o == COMPUTE] + quoted[v] + "\n  ]" for o, v in zip(schedule.ops.tolist(), schedule.nodes.tolist())]
        steps = "[\n" + ",\n".join(lines) + "\n ]"
    parts = [before[:-2] if at else "{", "\n" if not at else ",\n", ' "schedule": ', steps]
    parts.append(",\n" + after[2:] if len(keys) > at + 1 else "\n}")
    return "".join(parts) + "\n"


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
            doc = json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
        except RecursionError:
            raise InputError(f"{path}: the JSON is nested too deeply to be a plan") from None
        except ValueError as exc:  # NaN / Infinity, or an integer too long to parse
            raise InputError(f"{path}: not valid JSON: {exc}") from None
        return _plan_from_json(doc, graph, path, load), doc
    return _plan_from_twremat(text, graph, path), {}


def _plan_from_json(doc: Any, graph: Graph, path: Path, load: Mapping[str, Any] | None = None) -> Schedule:
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise InputError(f'{path}: not a remat-plan file (no "format": "{PLAN_FORMAT}")')
    version = doc.get("version")
    if isinstance(version, bool) or version != PLAN_VERSION:
        raise InputError(f"{path}: remat-plan version {version!r} is not supported")
    head = doc.get("graph")
    if head is None:
        head = {}
    if not isinstance(head, dict):
        raise InputError(f'{path}: "graph" must be an object {{"name", "sha256", "nodes"}}, not {_kind(head)}')
    sha = head.get("sha256")
    if sha is not None and not isinstance(sha, str):
        raise InputError(f'{path}: "graph.sha256" must be a string, not {_kind(sha)}')
    if sha is not None and sha != graph.sha256:
        recorded = doc.get("load")
        if isinstance(recorded, Mapping) and load is not None:
            diff = load_differences(recorded, load)
            if diff:
                raise InputError(
                    f"{path}: this plan was made under other load options: {'; '.join(diff)}; validate with the plan's options"
                )
            raise InputError(
                f"{path}: this plan was made for another graph with the same load options "
                f"(sha256 {str(sha)[:12]}…, this graph is {graph.sha256[:12]}…): the model file differs"
            )
        raise InputError(f"{path}: this plan was made for another graph (sha256 {str(sha)[:12]}…, this graph is {graph.sha256[:12]}…)")
    steps = doc.get("schedule")
    if not isinstance(steps, list):
        raise InputError(f'{path}: "schedule" must be a list of ["compute"|"free", id] steps')
    index = graph.index
    for k, step in enumerate(steps):
        if not (
            isinstance(step, list)
            and len(step) == 2
            and isinstance(step[0], str)
            and step[0] in ("compute", "free")
            and isinstance(step[1], str)
        ):
            raise InputError(f'{path}: step {k} is not ["compute"|"free", id]: {_short(step)}')
        if step[1] not in index:
            raise InputError(f"{path}: step {k} names unknown node {step[1]!r}")
    return Schedule.from_named(steps, index)


def _ascii_number(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts '²' (which ``int`` refuses) and '١'
    (which ``int`` reads as 1), neither of which a twremat number is."""
    return text.isascii() and text.isdigit()


def _plan_from_twremat(text: str, graph: Graph, path: Path) -> Schedule:
    """twremat ``c``/``f`` lines. twremat ids are integers: for a graph whose ids are not
    (an ONNX model) and where no id is all digits, an id that names no node is read as the node's number, the way
    ``remat convert`` numbers them (so a plan made on the converted text replays on the
    model itself)."""
    index = graph.index
    numbered = not any(_ascii_number(x) for x in graph.ids)  # no id could be read as a number
    steps = []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or parts[0] not in ("c", "f"):
            raise InputError(f"{path}:{lineno}: expected 'c ID' or 'f ID', got {line.strip()!r}")
        node = parts[1]
        if node not in index:
            if not (numbered and _ascii_number(node) and int(node) < graph.n):
                raise InputError(f"{path}:{lineno}: unknown node {node!r}")
            node = graph.ids[int(node)]
        steps.append(("compute" if parts[0] == "c" else "free", node))
    return Schedule.from_named(steps, index)


@dataclass(frozen=True)
class ClaimValidation:
    """What ``validate`` made of the claims a plan file states about itself.

    ``checked`` names the claims compared with the replay; ``ignored`` the fields that are
    taken as notes (who made the plan, how long it took); ``wrong`` is the first false
    claim as ``(field, stated, replayed)``, or None when every checked claim holds.
    """

    checked: tuple[str, ...]
    ignored: tuple[str, ...]
    wrong: tuple[str, Any, Any] | None


#: metric claims that must equal the replay exactly (bytes and counts)
_EXACT = ("peak_bytes", "fixed_bytes", "lower_bound_bytes", "recomputations", "computes", "steps")
#: metric claims that must equal the replay up to float rounding
_CLOSE = ("cost", "base_cost", "overhead", "est_seconds")
#: top-level fields that are read or checked; any other field is a note, reported as ignored
_READ = ("format", "version", "graph", "schedule", "budget_bytes", "budget_ratio", "metrics")


def validate_claims(doc: Mapping[str, Any], graph: Graph, metrics: Metrics, path: str | Path) -> ClaimValidation:
    """Compare what a remat-plan document states with the replay of its schedule.

    Checked: ``graph.nodes``, ``budget_bytes`` (the replayed peak must fit it),
    ``budget_ratio`` (must be budget_bytes / store_all_peak_bytes), every number in
    ``metrics`` but ``solve_seconds``, and ``metrics.valid``. A claim of the wrong type is
    an :class:`InputError` (exit 2); a false claim is returned in ``wrong`` (exit 1).
    """
    checked: list[str] = []
    wrong: tuple[str, Any, Any] | None = None

    def note(name: str, stated: Any, actual: Any) -> None:
        nonlocal wrong
        checked.append(name)
        if wrong is None and stated != actual:
            wrong = (name, stated, actual)

    head = doc.get("graph") or {}
    if "nodes" in head:
        note("graph.nodes", _int_claim(head["nodes"], "graph.nodes", path), graph.n)
    budget = doc.get("budget_bytes")
    if budget is not None:
        budget = _int_claim(budget, "budget_bytes", path)
        checked.append("budget_bytes")
        if wrong is None and metrics.peak_bytes > budget:
            wrong = ("budget_bytes", budget, metrics.peak_bytes)
    ratio = doc.get("budget_ratio")
    if ratio is not None:
        ratio = _float_claim(ratio, "budget_ratio", path)
        store = doc.get("store_all_peak_bytes")
        store = None if store is None else _int_claim(store, "store_all_peak_bytes", path)
        expect = None if budget is None or not store else budget / store
        checked.append("budget_ratio")
        if wrong is None and (expect is None or not _close(ratio, expect)):
            wrong = ("budget_ratio", ratio, expect)
    stated = doc.get("metrics")
    if stated is not None and not isinstance(stated, dict):
        raise InputError(f'{path}: "metrics" must be an object, not {_kind(stated)}')
    replay = metrics_to_json(metrics)
    for key in _EXACT:
        if stated and key in stated:
            note(f"metrics.{key}", _int_claim(stated[key], f"metrics.{key}", path), replay[key])
    for key in _CLOSE:
        if stated and key in stated:
            value = stated[key]
            value = None if value is None else _float_claim(value, f"metrics.{key}", path)
            checked.append(f"metrics.{key}")
            actual = replay[key]
            same = value is actual is None or (value is not None and actual is not None and _close(value, actual))
            if wrong is None and not same:
                wrong = (f"metrics.{key}", value, actual)
    if stated and "valid" in stated:
        note("metrics.valid", stated["valid"], True)
    ignored = [f"graph.{k}" for k in head if k not in ("sha256", "nodes")]
    ignored += [k for k in doc if k not in _READ]
    ignored += [f"metrics.{k}" for k in (stated or {}) if k not in _EXACT + _CLOSE + ("valid",)]
    return ClaimValidation(tuple(checked), tuple(ignored), wrong)


def _int_claim(value: Any, name: str, path: str | Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise InputError(f'{path}: "{name}" must be a whole number in [0, 2**63), not {_short(value)}')
    return value


def _float_claim(value: Any, name: str, path: str | Path) -> float:
    ok = not isinstance(value, bool) and (
        (isinstance(value, int) and abs(value) < 2**1000) or (isinstance(value, float) and math.isfinite(value))
    )
    if not ok:
        raise InputError(f'{path}: "{name}" must be a finite number, not {_short(value)}')
    return float(value)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _kind(value: Any) -> str:
    """A JSON value's type in JSON's words, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 60) -> str:
    """``repr`` of a value from a file, cut to ``limit`` characters (one line, always)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _jsonable(obj: Any) -> Any:
    """Strategy info as plain JSON values (numpy scalars and tuples converted, typed facts
    in words, as :func:`remat_cli.units.say` reads them)."""
    if isinstance(obj, (Fact, Phrase)):
        return say(obj)
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
