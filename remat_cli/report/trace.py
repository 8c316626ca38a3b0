"""A plan as a Chrome trace event file (opens in Perfetto or chrome://tracing).

One complete-event slice ("ph": "X") per compute step, on a forward / backward track by
node kind, and one counter event ("ph": "C") per schedule step carrying the simulator's
memory at that step, in schedule order. Time is the graph's estimated seconds when it
has them, else its cost unit shown as microseconds (1 unit = 1 µs; said in the file's
metadata), else one microsecond per compute step. Needs nothing beyond the standard
library. Format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from remat_cli.errors import InputError
from remat_cli.plandoc import Plan
from remat_cli.report.facts import PlanFacts, plan_facts

__all__ = ["trace_events", "trace_text", "write_trace"]

_PID = 1
_TRACKS = {"forward": 1, "recompute": 1, "loss": 2, "backward": 3, "": 1}
_TRACK_NAMES = {1: "forward", 2: "loss", 3: "backward"}


def trace_events(plan: Plan, facts: PlanFacts | None = None) -> dict[str, Any]:
    """The trace document for ``plan``: ``{"traceEvents": [...], "otherData": {...}}``."""
    return json.loads(trace_text(plan, facts))


def trace_text(plan: Plan, facts: PlanFacts | None = None) -> str:
    """The trace document for ``plan`` as compact JSON text (``separators=(",", ":")``).

    Each step's event is written straight into the text (names quoted by json's C quoting,
    numbers as ``repr``, which json uses too) instead of a dict per step for ``json.dumps``:
    the 450k events of a 300k-step nn100000 plan took 1.2 s to build and 1.1 s to encode
    (write_trace 2.7 -> 1.2 s; `remat plan --trace` 5.0-5.2 -> 3.6-3.8 s, the same bytes)."""
    from json.encoder import encode_basestring_ascii as quote

    facts = facts or plan_facts(plan)
    graph = plan.graph
    ops = plan.schedule.ops.tolist()
    nodes = plan.schedule.nodes.tolist()
    memory = facts.memory.tolist()
    if graph.seconds is not None:
        durations = (graph.seconds * 1e6).tolist()
        time_unit = "estimated seconds"
    elif float(graph.cost[graph.needed].sum()) > 0:
        durations = graph.cost.tolist()
        time_unit = f"cost ({graph.cost_unit}), 1 unit shown as 1 µs"
    else:
        durations = [1.0] * graph.n
        time_unit = "compute steps, 1 step shown as 1 µs"
    compact = {"separators": (",", ":")}
    meta = [{"name": "process_name", "ph": "M", "pid": _PID, "tid": 0, "args": {"name": f"remat plan: {graph.name} ({plan.strategy})"}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": name}} for tid, name in _TRACK_NAMES.items()]
    parts = [json.dumps(e, **compact) for e in meta]
    kinds, ids, op_names, mem = graph.kinds, graph.ids, graph.ops, graph.mem.tolist()
    quoted: dict[int, tuple[str, str, str]] = {}  # per node: its name, cat and the args' op, quoted
    first_cat = {k: quote(k or "compute") for k in set(kinds)}
    recompute_cat = quote("recompute")
    seen = bytearray(graph.n)
    now = 0.0
    add = parts.append
    for step, (op, v) in enumerate(zip(ops, nodes)):
        add(f'{{"name":"memory","ph":"C","ts":{now!r},"pid":{_PID},"args":{{"bytes":{memory[step]!r}}}}}')
        if op != 0:
            continue
        q = quoted.get(v)
        if q is None:
            q = quoted[v] = (quote(ids[v]), first_cat[kinds[v]], quote(op_names[v]))
        recompute = bool(seen[v])
        seen[v] = 1
        dur = durations[v]
        add(
            f'{{"name":{q[0]},"cat":{recompute_cat if recompute else q[1]},"ph":"X","ts":{now!r},"dur":{dur!r},'
            f'"pid":{_PID},"tid":{_TRACKS.get(kinds[v], 1)},"args":{{"op":{q[2]},"bytes":{mem[v]!r},'
            f'"step":{step},"recompute":{"true" if recompute else "false"}}}}}'
        )
        now += dur
    m = plan.metrics
    other = {
        "graph": graph.name,
        "strategy": plan.strategy,
        "time": time_unit,
        "peak_bytes": m.peak_bytes,
        "budget_bytes": plan.budget_bytes,
        "lower_bound_bytes": graph.lb,
        "overhead": m.overhead if math.isfinite(m.overhead) else None,
    }
    return '{"traceEvents":[' + ",".join(parts) + '],"displayTimeUnit":"ms","otherData":' + json.dumps(other, **compact) + "}"


def write_trace(plan: Plan, path: str | Path, facts: PlanFacts | None = None) -> Path:
    """Write the trace JSON of ``plan`` to ``path``."""
    out = Path(path)
    try:
        out.write_text(trace_text(plan, facts) + "\n")
    except OSError as exc:
        raise InputError(f"{out}: cannot write: {exc.strerror or exc}") from None
    return out
