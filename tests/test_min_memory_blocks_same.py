"""min-memory's dag runs share their turns (``TurnBlocks``: a turn is kept under its target
and the resident ancestors it starts from, and replayed by the next run that starts that
turn from the same ones): every run equals the frozen recursion of
tests/min_memory_reference.py whatever the runs before it kept: the same steps, the same
None past the cap, the same turn at which it was passed, and the general loop where a
kept turn recomputes a target the run keeps. Every schedule goes through the simulator."""

from __future__ import annotations

import time

import min_memory_reference as reference
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_min_memory_same import cases

from remat_cli import generators as G
from remat_cli.graph import Graph
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _steps(s) -> tuple | None:
    return None if s is None else (s.ops.tolist(), s.nodes.tolist())


def _topological_targets(g: Graph, seed: int) -> list[int]:
    """The targets in a random topological order of the graph (Kahn's, ready nodes drawn by
    ``seed``): another order in which every turn may start from other kept targets."""
    rng = np.random.default_rng(seed)
    indeg = [len(set(p)) for p in g.pred_lists]
    ready = [v for v in range(g.n) if not indeg[v]]
    order: list[int] = []
    while ready:
        v = ready.pop(int(rng.integers(len(ready))))
        order.append(v)
        for w in set(g.succ_lists[v]):
            indeg[w] -= 1
            if not indeg[w]:
                ready.append(w)
    is_target = set(g.targets.tolist())
    return [v for v in order if v in is_target]


def _run_both(g: Graph, blocks: M.TurnBlocks, targets: list[int], cap: int, drop: frozenset[int], deadline: float | None) -> None:
    turns: list[int] = []
    old_turns: list[int] = []
    new = M.min_memory_schedule(g, targets, True, cap, drop, deadline, turns, blocks=blocks)
    old = reference.min_memory_schedule(g, targets, True, cap, drop, deadline, old_turns)
    assert _steps(new) == _steps(old) and turns == old_turns
    if new is not None:
        assert simulate(g, new).metrics is not None


@SETTINGS
@given(
    cases(),
    st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from([1, 5, 20, 60, 10**6]), st.integers(0, 3)), min_size=1, max_size=4),
    st.booleans(),
)
def test_dag_runs_sharing_turns_are_the_reference(case, runs, timed: bool) -> None:
    """A run of the drawn order, cap and dropped targets, then runs of random topological
    orders with their own caps and dropped targets (some the drawn ones: the rounds of
    :func:`_variants` drop one more target each), all sharing one ``TurnBlocks``."""
    g, targets, cap, drop = case
    anc = M._ancestor_bits(g)
    assert anc is not None
    blocks = M.TurnBlocks(anc)
    deadline = time.perf_counter() + 3600 if timed else None
    _run_both(g, blocks, targets, cap, drop, deadline)
    for seed, run_cap, how in runs:
        order = _topological_targets(g, seed)
        run_drop = drop if how == 0 else frozenset(order[: how - 1]) | (drop if how == 1 else frozenset())
        _run_both(g, blocks, order, run_cap, run_drop, deadline)
        _run_both(g, blocks, targets, run_cap, run_drop, deadline)


def test_a_large_graph_reuses_turns_and_is_the_reference() -> None:
    """A 200-node training DAG in its two target orders of :func:`_variants` (file order,
    then store-all order) and a round dropping a target: most of the second run's turns
    are replayed, and every run is the reference's step for step."""
    fwd = G.random_dag(100, 0.05, seed=5)
    rng = np.random.default_rng(5)
    fwd = G.from_edges(fwd.n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, fwd.n), cost=rng.integers(1, 5, fwd.n).astype(float))
    g = checkmate_training_graph(fwd)
    anc = M._ancestor_bits(g)
    assert anc is not None
    blocks = M.TurnBlocks(anc)
    file_order = sorted(g.targets.tolist(), key=g.topo_rank.tolist().__getitem__)
    other = _topological_targets(g, 7)
    assert other != file_order
    _run_both(g, blocks, file_order, 10**7, frozenset(), None)
    kept = len(blocks.made)
    assert kept == len(file_order)
    _run_both(g, blocks, other, 10**7, frozenset(), None)
    assert len(blocks.made) < 2 * kept  # some turns were replayed, not made again
    _run_both(g, blocks, other, 10**7, frozenset(other[3:4]), None)
    _run_both(g, blocks, other, 2_000, frozenset(), None)  # a cap passed part way
