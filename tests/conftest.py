"""Shared test helpers: random DAG generation (hypothesis) and an independent reference simulator."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from remat_cli.graph import Graph, NodeSpec
from remat_cli.schedule import COMPUTE, FREE, Schedule

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@dataclass(frozen=True)
class RawGraph:
    """A graph as plain Python data, for building and for the reference simulator."""

    nodes: list[NodeSpec]
    targets: list[str] | None
    fixed: int

    def build(self) -> Graph:
        return Graph.from_nodes(self.nodes, targets=self.targets, fixed_mem=self.fixed, source="test")


@st.composite
def raw_dags(draw, max_nodes: int = 12, shuffle: bool = True) -> RawGraph:
    """Random DAGs: topological labels, then listed in a shuffled file order."""
    n = draw(st.integers(1, max_nodes))
    p = draw(st.floats(0.0, 0.6))
    seed = draw(st.integers(0, 2**31))
    rng = random.Random(seed)
    nodes = []
    for v in range(n):
        inputs = [f"v{u}" for u in range(v) if rng.random() < p]
        rng.shuffle(inputs)
        nodes.append(
            NodeSpec(
                id=f"v{v}",
                inputs=inputs,
                mem=rng.randint(0, 20),
                cost=float(rng.randint(0, 10)),
                workspace=rng.choice([0, 0, 0, rng.randint(1, 5)]),
                op=rng.choice(["Conv", "Relu", "Add", ""]),
            )
        )
    if shuffle:
        rng.shuffle(nodes)
    targets = None
    if draw(st.booleans()):
        k = rng.randint(1, n)
        targets = sorted(rng.sample([nd.id for nd in nodes], k))
    return RawGraph(nodes, targets, draw(st.integers(0, 50)))


def reference_simulate(raw: RawGraph, steps: list[tuple[str, str]]):
    """Independent replay of DESIGN §1 on plain dicts; returns (peak, cost, first_bad_step)."""
    by_id = {nd.id: nd for nd in raw.nodes}
    resident: set[str] = set()
    computed: set[str] = set()
    peak = raw.fixed
    cost = 0.0
    for k, (op, v) in enumerate(steps):
        nd = by_id[v]
        if op == "compute":
            if v in resident or any(u not in resident for u in nd.inputs):
                return None, None, k
            now = raw.fixed + sum(by_id[u].mem for u in resident) + nd.mem + nd.workspace
            peak = max(peak, now)
            resident.add(v)
            computed.add(v)
            cost += nd.cost
        else:
            if v not in resident:
                return None, None, k
            resident.discard(v)
    targets = raw.targets
    if targets is None:
        consumed = {u for nd in raw.nodes for u in nd.inputs}
        targets = [nd.id for nd in raw.nodes if nd.id not in consumed]
    if any(t not in computed for t in targets):
        return None, None, len(steps)
    return peak, cost, None


def named_steps(graph: Graph, schedule: Schedule) -> list[tuple[str, str]]:
    return [("compute" if o == COMPUTE else "free", graph.ids[v]) for o, v in zip(schedule.ops.tolist(), schedule.nodes.tolist())]


def to_schedule(graph: Graph, steps: list[tuple[str, str]]) -> Schedule:
    return Schedule.from_steps((COMPUTE if op == "compute" else FREE, graph.index[v]) for op, v in steps)


@pytest.fixture
def tmp_graph_file(tmp_path):
    """Write text to a file in tmp_path and return its path."""

    def write(name: str, content: str | bytes):
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path

    return write
