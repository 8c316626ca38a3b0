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

__all__ = ["trace_events", "write_trace"]

_PID = 1
_TRACKS = {"forward": 1, "recompute": 1, "loss": 2, "backward": 3, "": 1}
_TRACK_NAMES = {1: "forward", 2: "loss", 3: "backward"}


def trace_events(plan: Plan, facts: PlanFacts | None = None) -> dict[str, Any]:
    """The trace document for ``plan``: ``{"traceEvents": [...], "otherData": {...}}``."""
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
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": _PID, "tid": 0, "args": {"name": f"remat plan: {graph.name} ({plan.strategy})"}},
    ]
    for tid, name in _TRACK_NAMES.items():
        events.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": name}})
    seen = bytearray(graph.n)
    now = 0.0
    for step, (op, v) in enumerate(zip(ops, nodes)):
        events.append({"name": "memory", "ph": "C", "ts": now, "pid": _PID, "args": {"bytes": memory[step]}})
        if op != 0:
            continue
        kind = graph.kinds[v]
        recompute = bool(seen[v])
        seen[v] = 1
        dur = durations[v]
        events.append(
            {
                "name": graph.ids[v],
                "cat": "recompute" if recompute else (kind or "compute"),
                "ph": "X",
                "ts": now,
                "dur": dur,
                "pid": _PID,
                "tid": _TRACKS.get(kind, 1),
                "args": {"op": graph.ops[v], "bytes": int(graph.mem[v]), "step": step, "recompute": recompute},
            }
        )
        now += dur
    m = plan.metrics
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "graph": graph.name,
            "strategy": plan.strategy,
            "time": time_unit,
            "peak_bytes": m.peak_bytes,
            "budget_bytes": plan.budget_bytes,
            "lower_bound_bytes": graph.lb,
            "overhead": m.overhead if math.isfinite(m.overhead) else None,
        },
    }


def write_trace(plan: Plan, path: str | Path, facts: PlanFacts | None = None) -> Path:
    """Write the trace JSON of ``plan`` to ``path``."""
    out = Path(path)
    try:
        out.write_text(json.dumps(trace_events(plan, facts), separators=(",", ":")) + "\n")
    except OSError as exc:
        raise InputError(f"{out}: cannot write: {exc.strerror or exc}") from None
    return out
