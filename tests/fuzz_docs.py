"""Hostile documents for every format remat reads, and the contract every answer must keep.

Shared by ``tests/test_fuzz.py`` (hypothesis drives the choices and prints the failing draws) and
``scripts/fuzz.py`` (a seeded ``random.Random`` drives them, for thousands of inputs).
A generator takes a :class:`Chooser` and returns ``(file name, bytes)``.

The contract (:func:`check_answer`): remat either refuses the input with exit 2 and
exactly one ``remat: error:`` line on stderr (after any one-line ``remat: warning:``
lines), or answers (exit 0, or 1 for "no plan fits"/"check failed") without an internal
error, with strict JSON where JSON was asked for, and with a plan that replays through
the simulator to the metrics it states.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Chooser",
    "RandomChooser",
    "GENERATORS",
    "PLAN_GENERATORS",
    "Verdict",
    "check_answer",
    "check_claims",
    "check_validated",
    "NAMES",
    "NUMBERS",
]


class Chooser:
    """The choices a generator makes; hypothesis and ``random`` both implement it."""

    def choice(self, options: Sequence[Any]) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def integer(self, lo: int, hi: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def chance(self, p: float) -> bool:
        return self.integer(0, 999) < p * 1000


class RandomChooser(Chooser):
    """Choices from a seeded ``random.Random`` (scripts/fuzz.py)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choice(self, options: Sequence[Any]) -> Any:
        return options[self.rng.randrange(len(options))]

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


# Names that have broken renderers, parsers and writers before: markup, newlines, spaces,
# control characters, non-ASCII digits, very long, empty, numeric, JSON-ish.
NAMES = (
    "a",
    "b",
    "x1",
    "[/x]",
    "[bold red]boom[/]",
    "a\nb",
    "x y",
    "tab\there",
    "\x00nul",
    "é",
    "名字",
    "²",
    "",
    " ",
    "0",
    "-1",
    "1e5",
    '"q"',
    "{",
    "#c",
    "node",
    "cpu",
    "mem",
    "target",
    "c",
    "f",
    "a" * 300,
    "\u202eevil",
    "\x1b[31mred\x1b]0;title\x07",
    ":smile:",
    "🙂",
    "..",
    "../x",
    "<script>",
    "%s%n",
    "\r",
)
# Numbers at every edge: zero, negatives, int64 and float limits, non-finite, wrong types.
NUMBERS = (
    0,
    1,
    2,
    7,
    100,
    4096,
    -1,
    -4096,
    2**31,
    2**53 + 1,
    2**62,
    2**63 - 1,
    2**63,
    2**64,
    10**30,
    10**400,
    0.5,
    -0.0,
    1e308,
    1e-300,
    float("inf"),
    float("-inf"),
    float("nan"),
    "12",
    "",
    None,
    True,
    False,
    [],
    {},
)


def _name(c: Chooser, pool: list[str]) -> str:
    if pool and c.chance(0.6):
        return c.choice(pool)
    if c.chance(0.5):
        return f"n{c.integer(0, 12)}"
    return c.choice(NAMES)


def _number(c: Chooser, sane: tuple[int, int] = (0, 64)) -> Any:
    """A sane integer, or (with the document's hostility, see :func:`_hostility`) an extreme value."""
    return c.choice(NUMBERS) if c.chance(getattr(c, "hostility", 0.3)) else c.integer(*sane)


def _hostility(c: Chooser) -> None:
    """How often this document's values are extreme: some documents are clean, some hostile all over."""
    c.hostility = c.choice([0.0, 0.0, 0.02, 0.1, 0.3])  # type: ignore[attr-defined]


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _graph_shape(c: Chooser) -> tuple[list[str], list[list[str]]]:
    """Node ids and input lists: mostly DAGs, sometimes cycles, self loops, dangling refs, duplicates."""
    n = c.integer(1, 8)
    ids = [f"n{k}" if c.chance(0.85) else c.choice(NAMES) for k in range(n)]
    inputs = []
    for k in range(n):
        ins = [ids[j] for j in range(k) if c.chance(0.35)]
        if c.chance(0.08):
            ins.append(ids[c.integer(0, n - 1)])  # maybe a later node: a cycle, or a self loop
        if c.chance(0.06):
            ins.append(c.choice(NAMES))  # dangling
        if ins and c.chance(0.05):
            ins.append(ins[0])  # duplicate input
        inputs.append(ins)
    return ids, inputs


def remat_json(c: Chooser) -> tuple[str, bytes]:
    _hostility(c)
    ids, inputs = _graph_shape(c)
    nodes = []
    for v, ins in zip(ids, inputs):
        node: dict[str, Any] = {
            "id": v,
            "op": c.choice(["Relu", "MatMul", "", "[/x]", "a\nb"]),
            "inputs": ins,
            "mem": _number(c),
            "cost": _number(c, (0, 10)),
        }
        if c.chance(0.3):
            node["workspace"] = _number(c, (0, 8))
        if c.chance(0.3):
            node["kind"] = c.choice(["forward", "loss", "backward", "", "sideways"])
        for key in list(node):
            if c.chance(getattr(c, "hostility", 0.1) / 3):
                node[key] = c.choice(NUMBERS + NAMES[:4])  # wrong type
            elif c.chance(0.02):
                del node[key]
        nodes.append(node)
    doc: dict[str, Any] = {
        "format": "remat-graph",
        "version": 1 if c.chance(0.95) else c.choice(NUMBERS),
        "name": c.choice(NAMES),
        "cost_unit": c.choice(["flops", "seconds", "units", "[/x]"]),
        "fixed_mem": _number(c),
        "nodes": nodes,
    }
    if c.chance(0.4):
        doc["targets"] = [_name(c, ids) for _ in range(c.integer(0, 3))]
    depth = c.integer(1, 3000) if c.chance(0.1) else 0
    if depth:
        doc["meta"] = "__NESTED__"  # spliced in as text below: json.dumps itself cannot nest that deep
    if c.chance(0.05):
        doc["nodes"] = c.choice(NUMBERS)
    if c.chance(0.03):
        doc = [doc]  # type: ignore[assignment]
    data = _dumps(doc)
    if depth:
        data = data.replace(b'"__NESTED__"', b'{"a": ' * depth + b"1" + b"}" * depth)
    return "g.json", data


def node_link(c: Chooser) -> tuple[str, bytes]:
    _hostility(c)
    ids, inputs = _graph_shape(c)
    key = c.choice(["id", "id", "name"])
    nodes = []
    for k, v in enumerate(ids):
        node: dict[str, Any] = {"id": k if c.chance(0.7) else v, "name": v}
        if c.chance(0.8):
            node["cost_cpu" if c.chance(0.7) else "duration"] = _number(c, (0, 10))
        if c.chance(0.8):
            node["cost_ram" if c.chance(0.7) else "out_cost"] = _number(c)
        if c.chance(0.5):
            node["backward"] = c.choice([True, False, 0, 1, "yes", None])
        nodes.append(node)
    id_of = {v: n["id"] for v, n in zip(ids, nodes)}
    links = [{"source": id_of.get(u, u), "target": id_of[v]} for v, ins in zip(ids, inputs) for u in ins]
    if c.chance(0.1):
        links.append({"source": c.choice(NUMBERS), "target": nodes[0][key] if key in nodes[0] else 0})
    doc: dict[str, Any] = {
        "directed": c.choice([True, True, False]),
        "multigraph": c.chance(0.1),
        "nodes": nodes,
        c.choice(["links", "links", "edges"]): links,
    }
    return "g.json", _dumps(doc)


def twremat_text(c: Chooser) -> tuple[str, bytes]:
    _hostility(c)
    ids, inputs = _graph_shape(c)
    lines = ["p remat2"] if c.chance(0.9) else []
    if c.chance(0.5):
        lines.append(f"memlimit {_token(c)}")
    for v, ins in zip(ids, inputs):
        parts = ["node", v if c.chance(0.8) else c.choice(["1", "x y", "²", "-3"]), "deps", *ins, "cpu", _token(c), "mem", _token(c)]
        if c.chance(0.2):
            parts.append("target")
        if c.chance(0.04):
            del parts[c.integer(0, len(parts) - 1)]
        lines.append(" ".join(str(p) for p in parts))
    if c.chance(0.1):
        lines.insert(c.integer(0, len(lines)), c.choice(["", "# comment", "garbage line", "node", "\x00"]))
    return "g.txt", ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def _token(c: Chooser) -> str:
    if not c.chance(getattr(c, "hostility", 0.25)):
        return str(c.integer(0, 100))
    return str(c.choice(["-1", "²", "1e3", "0x10", "9" * 25, "NaN", "inf", "1_000", "", "٣", "2.5"]))


def onnx_model(c: Chooser) -> tuple[str, bytes]:
    """A small ONNX model built with onnx.helper: odd dims, names, dangling inputs, cycles."""
    from onnx import TensorProto, helper

    dim_choices = [1, 2, 4, 8, "batch", "n", 0, -1, -5, 2**31, 2**40, 2**62, 2**63 - 1]
    width = c.choice([1, 2, 4, 8, 16])
    dims = [c.choice(dim_choices) if c.chance(0.3) else width for _ in range(2)]
    x = helper.make_tensor_value_info(c.choice(["x", "x", "[/x]", "a\nb"]), c.choice([1, 1, 10, 7, 0, 99]), dims)
    nodes = []
    names = [x.name]
    inits = []
    for k in range(c.integer(1, 6)):
        op = c.choice(["Relu", "Relu", "Add", "MatMul", "Sigmoid", "Softmax", "Identity", "Mul", "Conv", "Weird"])
        src = c.choice(names)
        out = f"t{k}" if c.chance(0.9) else c.choice(names + list(NAMES[:6]))
        if op in ("Add", "Mul"):
            ins = [src, c.choice(names)]
        elif op == "MatMul":
            w = f"w{k}"
            wd = [width, c.choice([width, 1, 3, 0, -2, 2**40]) if c.chance(0.3) else width]
            inits.append(helper.make_tensor_value_info(w, TensorProto.FLOAT, wd))  # a weight as an input
            ins = [src, w]
        elif op == "Conv":
            ins = [src, f"cw{k}"]
        else:
            ins = [src]
        if c.chance(0.05):
            ins.append(c.choice(["missing", f"t{k + 1}"]))  # dangling, or a cycle
        nodes.append(helper.make_node(op, ins, [out], name=c.choice(["", f"op{k}", "[bold]x", "z\nz"])))
        names.append(out)
    y = helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, None)
    graph_inputs = [x] + [vi for vi in inits]
    graph = helper.make_graph(nodes, c.choice(["g", "[/x]"]), graph_inputs, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", c.choice([13, 17, 17, 1, 99]))])
    model.ir_version = c.choice([8, 8, 8, 0, 3, 99])
    data = model.SerializeToString()
    if c.chance(0.1):  # truncated or bit-flipped
        cut = c.integer(1, max(1, len(data) - 1))
        data = data[:cut] if c.chance(0.5) else data[:cut] + bytes([data[cut] ^ 0xFF]) + data[cut + 1 :]
    return "m.onnx", data


GENERATORS: dict[str, Callable[[Chooser], tuple[str, bytes]]] = {
    "remat-json": remat_json,
    "node-link": node_link,
    "twremat": twremat_text,
    "onnx": onnx_model,
}


# --------------------------------------------------------------------------- plans


SAFE_GRAPH = {
    "format": "remat-graph",
    "version": 1,
    "name": "g",
    "cost_unit": "flops",
    "fixed_mem": 10,
    "nodes": [
        {"id": "a", "op": "x", "inputs": [], "mem": 100, "cost": 1},
        {"id": "b", "op": "x", "inputs": ["a"], "mem": 50, "cost": 2},
        {"id": "c", "op": "x", "inputs": ["a", "b"], "mem": 70, "cost": 3},
    ],
}


def plan_json(c: Chooser) -> tuple[str, bytes]:
    _hostility(c)
    """A plan file for SAFE_GRAPH with hostile steps, header and claims."""
    steps: list[Any] = []
    if c.chance(0.4):  # a valid schedule, so that the header's claims are what is tested
        steps = [["compute", "a"], ["compute", "b"], ["compute", "c"]]
        if c.chance(0.5):
            steps.insert(2, ["free", "a"] if c.chance(0.2) else ["compute", "b"])
    for _ in range(c.integer(0, 9) if not steps or c.chance(0.2) else 0):
        op = c.choice(["compute", "compute", "free", "c", "COMPUTE", None, 1])
        steps.append([op, c.choice(["a", "b", "c", "a", "b", "c", "d", [], None, 1, "[/x]"])])
        if c.chance(0.03):
            steps[-1] = c.choice(NUMBERS)
    doc: dict[str, Any] = {
        "format": "remat-plan",
        "version": 1 if c.chance(0.9) else c.choice(NUMBERS),
        "graph": {"name": "g", "nodes": 3} if c.chance(0.9) else c.choice(NUMBERS + ("g",)),
        "strategy": c.choice(["store-all", "[/x]", 3]),
        "budget_bytes": _number(c, (0, 400)),
        "schedule": steps if c.chance(0.95) else c.choice(NUMBERS),
    }
    if c.chance(0.5):
        doc["metrics"] = {"peak_bytes": _number(c, (0, 400)), "cost": _number(c, (0, 20)), "valid": c.choice([True, False, 1])}
    return "plan.json", _dumps(doc)


def plan_text(c: Chooser) -> tuple[str, bytes]:
    lines = []
    for _ in range(c.integer(0, 9)):
        if c.chance(0.8):
            lines.append(f"{c.choice(['c', 'c', 'f'])} {c.choice(['a', 'b', 'c'])}")
        else:
            lines.append(f"{c.choice(['c', 'f', 'x', '', 'C'])} {c.choice(['a', 'd', 'a b', '²', '', '[/x]'])}")
    return "plan.txt", ("\n".join(lines) + "\n").encode()


PLAN_GENERATORS: dict[str, Callable[[Chooser], tuple[str, bytes]]] = {"plan-json": plan_json, "plan-text": plan_text}


# --------------------------------------------------------------------------- the contract


@dataclass(frozen=True)
class Verdict:
    """``outcome``: clean-error | ok | exception | wrong; ``detail``: one line why."""

    outcome: str
    detail: str = ""


def check_answer(
    exit_code: int,
    stdout: str,
    stderr: str,
    *,
    json_out: bool = False,
    graph_path: Path | None = None,
    plan_path: Path | None = None,
    dims: tuple[tuple[str, int], ...] = (),
) -> Verdict:
    """Judge one CLI answer against the contract (see the module docstring)."""
    err_lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in err_lines if ln.startswith("remat: error:")]
    if "internal error" in stderr or "Traceback" in stderr or "Traceback" in stdout:
        return Verdict("exception", (errors or err_lines or ["?"])[-1][:300])
    if any(c in out for out in (stdout, stderr) for c in "\x1b\r\x07"):
        return Verdict("wrong", "a name's control character reached the terminal: " + repr((stdout + stderr)[:200]))
    if "😄" in stdout + stderr:
        return Verdict("wrong", "an emoji code in a name was printed as an emoji")
    if "RuntimeWarning" in stderr or "Warning:" in stderr:
        return Verdict("exception", "a Python warning reached the user: " + stderr.strip().splitlines()[0][:200])
    others = [ln for ln in err_lines if not ln.startswith(("remat: error:", "remat: warning:"))]
    if exit_code == 2:
        if len(errors) == 1 and not others:  # warnings before it are fine, each one line
            return Verdict("clean-error", errors[0][:300])
        return Verdict("exception", f"exit 2 with {len(err_lines)} stderr lines: {stderr.strip()[:300]!r}")
    if exit_code not in (0, 1):
        return Verdict("exception", f"exit code {exit_code}: {stderr.strip()[:300]!r}")
    if exit_code == 1 and errors and len(errors) != 1:
        return Verdict("exception", f"exit 1 with {len(errors)} error lines")
    if json_out and exit_code == 0:
        try:
            json.loads(stdout, parse_constant=_refuse_constant)
        except ValueError as exc:
            return Verdict("wrong", f"--format json output is not strict JSON: {exc}")
    if plan_path is not None and exit_code == 0 and graph_path is not None:
        return _check_plan(graph_path, plan_path, dims)
    return Verdict("ok")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _check_plan(graph_path: Path, plan_path: Path, dims: tuple[tuple[str, int], ...] = ()) -> Verdict:
    """The plan written by ``remat plan -o`` replays to the metrics it states."""
    from remat_cli.loaders import LoadOptions, load_graph
    from remat_cli.plandoc import read_plan
    from remat_cli.simulate import simulate

    if not plan_path.exists():
        return Verdict("wrong", "exit 0 but no plan file written")
    try:
        doc = json.loads(plan_path.read_text(), parse_constant=_refuse_constant)
    except ValueError as exc:
        return Verdict("wrong", f"the plan file is not strict JSON: {exc}")
    try:
        graph = load_graph(graph_path, LoadOptions(dims=dims))
        schedule, _ = read_plan(plan_path, graph)
    except Exception as exc:  # noqa: BLE001 - whatever remat writes, remat must read
        return Verdict("wrong", f"remat cannot read back its own plan: {type(exc).__name__}: {exc}"[:300])
    result = simulate(graph, schedule)
    if result.error is not None:
        return Verdict("wrong", f"the written plan does not replay: {result.error}"[:300])
    return check_claims(doc, result.metrics, written=True)


def check_claims(doc: Any, m: Any, written: bool = False) -> Verdict:
    """The claims a plan document states (peak, cost, budget) against replayed metrics ``m``.

    A plan remat wrote must state them all; a plan ``validate`` accepted must not state
    false ones (it may leave them out).
    """
    stated = doc.get("metrics") if isinstance(doc, dict) else None
    stated = stated if isinstance(stated, dict) else {}
    peak = stated.get("peak_bytes")
    if (written or peak is not None) and peak != m.peak_bytes:
        return Verdict("wrong", f"plan states peak {peak!r}, replay gives {m.peak_bytes}")
    budget = doc.get("budget_bytes") if isinstance(doc, dict) else None
    if isinstance(budget, (int, float)) and not isinstance(budget, bool) and m.peak_bytes > budget:
        return Verdict("wrong", f"plan peak {m.peak_bytes} is above its stated budget {budget}")
    cost = stated.get("cost")
    if isinstance(cost, (int, float)) and not math.isclose(cost, m.cost, rel_tol=1e-9, abs_tol=1e-9):
        return Verdict("wrong", f"plan states cost {cost}, replay gives {m.cost}")
    return Verdict("ok")


def check_validated(graph_path: Path, plan_path: Path) -> Verdict:
    """A plan that ``remat validate`` accepted (exit 0): it replays, and its stated claims are true."""
    from remat_cli.loaders import load_graph
    from remat_cli.plandoc import read_plan
    from remat_cli.simulate import simulate

    graph = load_graph(graph_path)
    try:
        schedule, header = read_plan(plan_path, graph)
    except Exception as exc:  # noqa: BLE001 - validate read it, so must this
        return Verdict("wrong", f"validate accepted a plan read_plan refuses: {exc}"[:300])
    result = simulate(graph, schedule)
    if result.error is not None:
        return Verdict("wrong", f"validate accepted a plan that does not replay: {result.error}"[:300])
    verdict = check_claims(header, result.metrics)
    if verdict.outcome == "wrong":
        return Verdict("wrong", f"validate accepted a false claim: {verdict.detail}")
    return verdict
