"""Shared test helpers: random DAG generation (hypothesis), an independent reference
simulator, and a small budget-aware strategy built only for the report tests (the report
code must work with any strategy, so its tests inject this one)."""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph, NodeSpec
from remat_cli.schedule import COMPUTE, FREE, Schedule, ScheduleBuilder
from remat_cli.simulate import simulate
from remat_cli.strategies import Strategy, StrategyResult
from remat_cli.strategies.store_all import memory_greedy_order

settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))


def drop_schedule(graph: Graph, order: list[int], dropped: set[int]) -> Schedule:
    """Run ``order``; values in ``dropped`` are freed right after the step that made them
    and recomputed on demand (recursively) whenever a later step reads them again."""
    preds = graph.pred_lists
    pos = {v: k for k, v in enumerate(order)}
    last = {v: k for k, v in enumerate(order)}
    for k, v in enumerate(order):
        for u in preds[v]:
            last[u] = max(last[u], k)
    resident: set[int] = set()
    b = ScheduleBuilder()

    def make(v: int) -> None:
        for u in preds[v]:
            if u not in resident:
                make(u)
        b.compute(v)
        resident.add(v)

    for k, v in enumerate(order):
        make(v)
        for u in sorted(resident):
            if last[u] <= k or (u in dropped and pos[u] <= k):
                b.free(u)
                resident.discard(u)
    return b.build()


def _every_kth_run(graph: Graph, budget: int | None, options: Any, context: Any) -> StrategyResult:
    """Keep every k-th forward value, recompute the rest; the cheapest k that fits."""
    order = memory_greedy_order(graph)
    forward = [v for v in order if graph.kinds[v] in ("forward", "")]
    best: tuple[float, int, Schedule, int] | None = None
    for k in range(1, len(forward) + 1):
        dropped = {v for i, v in enumerate(forward) if i % k != k - 1} if k > 1 else set()
        sched = drop_schedule(graph, order, dropped)
        m = simulate(graph, sched).metrics
        assert m is not None
        if budget is None or m.peak_bytes <= budget:
            if best is None or (m.cost, m.peak_bytes) < (best[0], best[1]):
                best = (m.cost, m.peak_bytes, sched, k)
            if budget is None:
                break
    if best is None:
        raise NoPlanError("every-kth: no spacing fits the budget")
    return StrategyResult(best[2], {"k": best[3]})


EVERY_KTH = Strategy(
    name="every-kth",
    summary="test only: keep every k-th forward value, recompute the rest on demand",
    solve=_every_kth_run,
    uses_budget=True,
)


@pytest.fixture
def every_kth() -> Strategy:
    return EVERY_KTH
