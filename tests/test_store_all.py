"""store-all: valid, each needed node exactly once, peak ≥ LB, the better of its candidate orders."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from remat_cli import generators as G
from remat_cli.planner import make_plan
from remat_cli.simulate import simulate
from remat_cli.algorithms.segments import schedule_from_sequence
from remat_cli.strategies.store_all import memory_greedy_order, store_all_schedule
from remat_cli.training import checkmate_training_graph
from tests.conftest import raw_dags


def _check(g):
    schedule, _ = store_all_schedule(g)
    result = simulate(g, schedule)
    assert result.valid, result.error
    m = result.metrics
    computed = schedule.compute_nodes
    assert sorted(computed.tolist()) == sorted(np.flatnonzero(g.needed).tolist())
    assert m.recomputations == 0 and m.overhead == 0
    assert m.peak_bytes >= g.lb
    # the better of the two orders it tries
    for order in (g.needed_nodes.tolist(), memory_greedy_order(g)):
        other = simulate(g, schedule_from_sequence(g, order))
        assert other.valid and m.peak_bytes <= other.metrics.peak_bytes
    return m


@given(raw_dags(max_nodes=16))
def test_store_all_on_random_dags(raw):
    _check(raw.build())


def test_store_all_on_families():
    for fwd in (G.chain(30), G.unet(4), G.diamonds(6, 3), G.grid(5, 5), G.random_dag(60, 0.1, 3, max_size=9)):
        for g in (fwd, checkmate_training_graph(fwd)):
            _check(g)


def test_memory_greedy_is_topological_over_needed_nodes():
    g = checkmate_training_graph(G.random_dag(80, 0.08, 5, max_size=20))
    order = memory_greedy_order(g)
    assert sorted(order) == sorted(np.flatnonzero(g.needed).tolist())
    pos = {v: k for k, v in enumerate(order)}
    src, dst = g.edges()
    assert all(pos[u] < pos[v] for u, v in zip(src.tolist(), dst.tolist()) if g.needed[v])


def test_store_all_drops_unneeded_nodes():
    g = G.from_edges(4, [(0, 1), (0, 2), (2, 3)])

    g = g.with_arrays(targets=[1])
    plan = make_plan(g, "store-all")
    assert sorted(plan.schedule.compute_nodes.tolist()) == [0, 1]
    assert plan.metrics.base_cost == 2


def test_training_chain_peak_is_all_activations():
    """On a unit training chain store-all keeps every forward value until its gradient."""
    L = 20
    m = _check(checkmate_training_graph(G.chain(L)))
    # at bwd(n{L-1}) all L forward values, the loss, and bwd itself are resident
    assert m.peak_bytes == L + 2
