"""report/trace.py's trace_events as of 958e0d5, frozen: a dict per event for json.dumps.
tests/test_plan_outputs.py checks that the text trace.py now writes is byte for byte
json.dumps of this document. Not for use outside the tests."""

from __future__ import annotations

import math


def trace_events(plan, facts=None):
    """report/trace.py's trace_events as of 958e0d5: a dict per event, for json.dumps."""
    from remat_cli.report.facts import plan_facts
    from remat_cli.report.trace import _PID, _TRACK_NAMES, _TRACKS

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
    events = [
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
