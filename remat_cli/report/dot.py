"""A plan's graph as Graphviz DOT: which values it keeps, which it recomputes, the targets.

Node styles (one ``class`` attribute per node names its role, so scripts can count them):
* ``kept``       computed once (held until its last reader): filled light blue;
* ``recomputed`` computed more than once: filled orange, label says how often;
* ``skipped``    never computed (not needed by any target): dashed grey outline;
* targets additionally get a double outline (``peripheries=2``) and bold text.
Needs nothing beyond the standard library; render with ``dot -Tsvg plan.dot``.
"""

from __future__ import annotations

from pathlib import Path

from remat_cli.errors import InputError
from remat_cli.plandoc import Plan
from remat_cli.report.facts import PlanFacts, plan_facts
from remat_cli.units import fmt_bytes

__all__ = ["plan_to_dot", "write_dot", "STYLES"]

STYLES = {
    "kept": 'style=filled, fillcolor="#cfe2f3", color="#4c72b0"',
    "recomputed": 'style=filled, fillcolor="#f9cb9c", color="#dd8452"',
    "skipped": 'style=dashed, color="#999999", fontcolor="#999999"',
}


def plan_to_dot(plan: Plan, facts: PlanFacts | None = None) -> str:
    """DOT text for ``plan``'s graph, nodes styled by what the plan does with them."""
    facts = facts or plan_facts(plan)
    graph = plan.graph
    counts = facts.counts.tolist()
    targets = set(graph.targets.tolist())
    m = plan.metrics
    title = (
        f"{graph.name}: {plan.strategy}, peak {fmt_bytes(m.peak_bytes)}, "
        f"overhead {m.overhead * 100:+.1f}%, {facts.recomputed_nodes} values recomputed"
    )
    lines = [
        f"digraph {_quote(graph.name)} {{",
        f"  label={_quote(title)}; labelloc=t; fontsize=12;",
        "  rankdir=TB;",
        '  node [shape=box, fontname="Helvetica", fontsize=10];',
        '  edge [color="#777777", arrowsize=0.6];',
    ]
    for v in range(graph.n):
        c = counts[v]
        role = "skipped" if c == 0 else ("kept" if c == 1 else "recomputed")
        parts = [graph.ids[v], f"{graph.ops[v] or 'op'} {fmt_bytes(int(graph.mem[v]))}"]
        if c > 1:
            parts.append(f"computed {c}x")
        label = '"' + "\\n".join(_escape(p) for p in parts) + '"'
        attrs = [f"label={label}", STYLES[role], f'class="{role}"']
        if v in targets:
            attrs.append('peripheries=2, fontname="Helvetica-Bold"')
        lines.append(f"  n{v} [{', '.join(attrs)}];")
    preds = graph.pred_lists
    for v in range(graph.n):
        for u in preds[v]:
            lines.append(f"  n{u} -> n{v};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(plan: Plan, path: str | Path, facts: PlanFacts | None = None) -> Path:
    """Write the DOT text of ``plan`` to ``path``."""
    out = Path(path)
    try:
        out.write_text(plan_to_dot(plan, facts))
    except OSError as exc:
        raise InputError(f"{out}: cannot write: {exc.strerror or exc}") from None
    return out


def _escape(text: str) -> str:
    """Text safe inside a DOT double-quoted string (backslashes, quotes, newlines)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _quote(text: str) -> str:
    return f'"{_escape(text)}"'
