"""min-memory's peak lowering scores each trial from the round's memory profile (its
prefix and suffix maxima, ``_Profile``) and the steps the trial changes, and makes a trial's
schedule only for the one it keeps (or to break a tie on cost), instead of a pass over a
copy of the whole schedule per trial: the same schedule, evictions and steps spent as the
frozen copy (tests/lower_peak_reference.py), under step budgets that stop it part way and
with its deadline passed. Every schedule goes through the simulator."""

from __future__ import annotations

import lower_peak_reference as reference
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_min_memory_same import cases

from remat_cli import generators as G
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same(g, seed, steps: int, deadline: float | None = None) -> None:
    new = M.lower_peak(g, seed, steps, deadline)
    old = reference.lower_peak(g, seed, steps, deadline)
    assert (new[0].ops.tolist(), new[0].nodes.tolist()) == (old[0].ops.tolist(), old[0].nodes.tolist())
    assert new[1:] == old[1:]
    assert simulate(g, new[0]).metrics is not None


@SETTINGS
@given(cases(), st.sampled_from([20, 200, 2_000, 10**6]), st.booleans())
def test_lower_peak_is_the_reference(case, steps: int, passed: bool) -> None:
    """On each variant's schedule (dag, tree, from scratch) of generated graphs."""
    g, targets, _, drop = case
    seeds = [M.min_memory_schedule(g, targets, memo, 10**6, drop) for memo in (True, False)]
    seeds.append(M.scratch_schedule(g, targets, 10**6))
    for seed in seeds:
        if seed is None or simulate(g, seed).metrics is None:
            continue
        _same(g, seed, steps, 0.0 if passed else None)


def test_lower_peak_of_a_large_graph_is_the_reference() -> None:
    """A 240-node training DAG's dag and tree variants, lowered for several rounds."""
    fwd = G.random_dag(120, 0.05, seed=11)
    rng = np.random.default_rng(11)
    fwd = G.from_edges(fwd.n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, fwd.n), cost=rng.integers(1, 5, fwd.n).astype(float))
    g = checkmate_training_graph(fwd)
    targets = sorted(g.targets.tolist(), key=g.topo_rank.tolist().__getitem__)
    lowered = 0
    for memo in (True, False):
        seed = M.min_memory_schedule(g, targets, memo, 10**7)
        if seed is not None:
            _same(g, seed, 10**6)
            lowered += M.lower_peak(g, seed, 10**6)[1]
    assert lowered > 1  # rounds past the first were compared
