"""min-memory's faster recursions (issue 14 item 1: frames as parallel stacks, one pass over
a frame's inputs, steps as one list of encoded ints, one comparison per compute for the cap
and the deadline) and its O(k + n) resident set equal the implementations they replaced
(tests/min_memory_reference.py and ``_resident_before`` as of d23b961): the same steps,
the same None past the cap, the same turn at which it was passed, for both variants and
the from-scratch schedule, any order of the targets, dropped targets, and caps that stop
them part way. Every schedule either returns goes through the simulator."""

from __future__ import annotations

import time

import min_memory_reference as reference
import numpy as np
from graphgen import shape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw) -> tuple[Graph, list[int], int, frozenset[int]]:
    """(graph, targets in some topological-or-not order, cap, dropped targets): training
    graphs of chains, skip chains, diamonds and random DAGs with sizes and workspaces from
    small sets (ties in tree numbers are common), or plain DAGs whose targets are sinks."""
    kind = draw(st.sampled_from(["chain", "skip", "diamonds", "dag"]))
    n = draw(st.integers(2, 18))
    seed = draw(st.integers(0, 10_000))
    fwd = shape(kind, n, seed, p=draw(st.floats(0.1, 0.6)) if kind == "dag" else 0.3)
    rng = np.random.default_rng(seed)
    src, dst = fwd.edges()
    fwd = G.from_edges(fwd.n, np.stack([src, dst], axis=1), mem=rng.integers(0, 4, fwd.n), cost=rng.choice([0.0, 1.0, 2.5], fwd.n))
    g = checkmate_training_graph(fwd) if draw(st.booleans()) else fwd
    src, dst = g.edges()
    g = Graph.from_arrays(
        ids=g.ids,
        ops=g.ops,
        kinds=g.kinds,
        mem=g.mem,
        cost=g.cost,
        workspace=rng.choice([0, 0, 1, 3], g.n),
        src=src,
        dst=dst,
        fixed_mem=0,
        name=g.name,
        targets=g.targets,
    )
    targets = g.targets.tolist()
    rank = g.topo_rank.tolist()
    targets.sort(key=rank.__getitem__)
    if draw(st.booleans()):
        targets = draw(st.permutations(targets))
    drop = frozenset(t for t in targets if draw(st.integers(0, 3)) == 0)
    cap = draw(st.sampled_from([1, 5, 20, 60, 10**6]))
    return g, list(targets), cap, drop


def _steps(s) -> tuple | None:
    if s is None:
        return None
    return (s.ops.tolist(), s.nodes.tolist())


@SETTINGS
@given(cases(), st.booleans())
def test_recursions_are_the_references(case, timed: bool) -> None:
    """With and without a deadline (an hour away: the cap is looked at on the deadline's
    path too, every compute either way)."""
    g, targets, cap, drop = case
    deadline = time.perf_counter() + 3600 if timed else None
    for memo in (True, False):
        turns: list[int] = []
        old_turns: list[int] = []
        new = M.min_memory_schedule(g, targets, memo, cap, drop, deadline, turns)
        old = reference.min_memory_schedule(g, targets, memo, cap, drop, deadline, old_turns)
        assert _steps(new) == _steps(old) and turns == old_turns
        if new is not None:
            assert simulate(g, new).metrics is not None
    new = M.scratch_schedule(g, targets, cap, deadline)
    assert _steps(new) == _steps(reference.scratch_schedule(g, targets, cap, deadline))
    if new is not None:
        assert simulate(g, new).metrics is not None


def _resident_before_reference(ops: np.ndarray, nodes: np.ndarray, k: int) -> np.ndarray:
    """``_resident_before`` as of d23b961."""
    back = nodes[:k][::-1]
    uniq, first = np.unique(back, return_index=True)
    return uniq[ops[:k][::-1][first] == COMPUTE]


@SETTINGS
@given(cases(), st.floats(0.0, 1.0))
def test_resident_before_is_the_reference(case, where: float) -> None:
    """On the valid schedules the recursions make (and their lowered versions), at any step."""
    g, targets, _, drop = case
    made = [M.min_memory_schedule(g, targets, memo, 10**6, drop) for memo in (True, False)]
    made.append(M.scratch_schedule(g, targets, 10**6))
    made += [M.lower_peak(g, s, 10**5)[0] for s in made if s is not None]
    for s in made:
        if s is None:
            continue
        assert simulate(g, s).metrics is not None
        ops, nodes = s.ops.astype(np.int64), s.nodes.astype(np.int64)
        k = int(round(where * len(ops)))
        assert M._resident_before(ops, nodes, k).tolist() == _resident_before_reference(ops, nodes, k).tolist()


def test_variants_are_those_of_a_large_graph() -> None:
    """Not only tiny graphs: a 120-node training DAG's recursions (which pass a cap of 3,000
    computes part way) are the reference's, step for step and turn for turn."""
    fwd = G.random_dag(60, 0.08, seed=3)
    rng = np.random.default_rng(3)
    fwd = G.from_edges(fwd.n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, fwd.n), cost=rng.integers(1, 5, fwd.n).astype(float))
    g = checkmate_training_graph(fwd)
    targets = sorted(g.targets.tolist(), key=g.topo_rank.tolist().__getitem__)
    for cap in (3_000, 10**7):
        for memo in (True, False):
            turns: list[int] = []
            old_turns: list[int] = []
            new = M.min_memory_schedule(g, targets, memo, cap, turns=turns)
            assert _steps(new) == _steps(reference.min_memory_schedule(g, targets, memo, cap, turns=old_turns))
            assert turns == old_turns
        assert _steps(M.scratch_schedule(g, targets, cap)) == _steps(reference.scratch_schedule(g, targets, cap))
