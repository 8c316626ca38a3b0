"""chain-dp solves its table only up to the budget's memory level (``solve_chain``'s
``max_bytes``): a plan within the budget reads no state above that level, so the capped
table must give the same costs and the same plans at every level it holds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as gen
from remat_cli.algorithms.segments import schedule_from_sequence, segment
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import chain_dp
from remat_cli.strategies.chain_dp import _merge_starts, solve_chain
from remat_cli.training import checkmate_training_graph


@st.composite
def training_graphs(draw):
    """Training graphs of chains, skip chains and random DAGs, with or without workspaces."""
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(2, 30))
    mem, cost = rng.integers(1, 50, n), rng.random(n) + 0.1
    kind = draw(st.sampled_from(["chain", "skip", "random"]))
    if kind == "chain":
        fwd = gen.chain(n, mem=mem, cost=cost)
    elif kind == "skip":
        fwd = gen.skip_chain(n, skip=draw(st.integers(2, 4)), mem=mem, cost=cost)
    else:
        fwd = gen.random_dag(n, 0.15, seed=seed, mem=mem, cost=cost)
    g = checkmate_training_graph(fwd)
    if draw(st.booleans()):
        g = g.with_arrays(workspace=rng.integers(0, 20, g.n))
    return g


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    training_graphs(),
    st.sampled_from(["max", "min", 1]),
    st.sampled_from([40, 500]),
    st.floats(0.02, 0.9),
)
def test_capped_table_equals_the_full_one_below_its_cap(graph, rule, max_slots: int, frac: float) -> None:
    seg = segment(graph, rule=rule)
    if seg.count > 12:
        seg = seg.merged(_merge_starts(seg, 12))
    borrow = seg.count <= 8
    full = solve_chain(graph, seg, max_slots, borrow)
    capped = solve_chain(graph, seg, max_slots, borrow, max_bytes=int(frac * full.slots * full.q))
    assert capped.q == full.q and capped.slots <= full.slots
    top = full.top[: capped.slots + 1]
    np.testing.assert_array_equal(capped.top, top)
    for m in np.flatnonzero(np.isfinite(top)).tolist():
        seq = capped.sequence(m)
        assert seq == full.sequence(m)
        sim = simulate(graph, schedule_from_sequence(graph, seq))
        assert sim.metrics is not None and sim.metrics.cost == pytest.approx(float(graph.cost[seq].sum()))


def test_chain_dp_solves_only_the_levels_of_its_budget(monkeypatch) -> None:
    """At 0.5x of the store-all peak the table holds about a quarter of the levels, and the
    plan is the one the full table gives."""
    rng = np.random.default_rng(3)
    fwd = gen.skip_chain(60, skip=3, mem=rng.integers(1 << 10, 1 << 20, 60), cost=rng.random(60) + 0.5)
    graph = checkmate_training_graph(fwd)
    budget = store_all_peak(graph) // 2
    slots: list[int] = []
    real = chain_dp.solve_chain

    def spy(*args, **kw):
        table = real(*args, **kw)
        slots.append(table.slots)
        return table

    monkeypatch.setattr(chain_dp, "solve_chain", spy)
    plan = make_plan(graph, "chain-dp", budget)
    assert plan.metrics.peak_bytes <= budget
    assert slots and max(slots) < 500 // 2
    # the same plan as with every level solved
    monkeypatch.setattr(chain_dp, "solve_chain", lambda *a, max_bytes=None, **kw: real(*a, **kw))
    again = make_plan(graph, "chain-dp", budget)
    assert again.schedule.nodes.tolist() == plan.schedule.nodes.tolist()
    assert again.metrics.cost == plan.metrics.cost
