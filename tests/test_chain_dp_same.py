"""The faster chain-dp (issue 14 item 1) equals the implementation it replaced
(tests/chain_dp_reference.py, chain_dp.py as of d23b961): the same table (slot size, levels,
cost per level of the top state) and the same plan at every level, and the same outcome
of the strategy (schedule, info, or the error with its smallest budget) at budgets from
below the lower bound to above the store-all peak, with merged groups, borrowed
checkpoints and switch points. Every schedule compared goes through the simulator."""

from __future__ import annotations

import chain_dp_reference as reference
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as gen
from remat_cli.algorithms.segments import schedule_from_sequence, segment
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import chain_dp
from remat_cli.strategies.base import RunContext
from remat_cli.strategies.chain_dp import ChainOptions, _merge_starts, solve_chain
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def training_graphs(draw) -> Graph:
    """Training graphs of chains, skip chains and random DAGs (2-30 forward nodes), with
    or without workspaces, sizes from a small set (ties are common) or wide ones."""
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(2, 30))
    mem = rng.integers(1, 4, n) if draw(st.booleans()) else rng.integers(1, 1 << 20, n)
    cost = rng.choice([0.5, 1.0, 2.0, 3.0], n) if draw(st.booleans()) else rng.random(n) + 0.1
    kind = draw(st.sampled_from(["chain", "skip", "random"]))
    if kind == "chain":
        fwd = gen.chain(n, mem=mem, cost=cost)
    elif kind == "skip":
        fwd = gen.skip_chain(n, skip=draw(st.integers(2, 4)), mem=mem, cost=cost)
    else:
        fwd = gen.random_dag(n, 0.15, seed=seed, mem=mem, cost=cost)
    g = checkmate_training_graph(fwd)
    if draw(st.booleans()):
        g = g.with_arrays(workspace=rng.integers(0, int(mem.max()) + 1, g.n) * rng.integers(0, 2, g.n))
    return g


def _checked(graph: Graph, seq: list[int]) -> tuple[float, int]:
    """Cost and peak of a compute sequence, replayed by the simulator."""
    metrics = simulate(graph, schedule_from_sequence(graph, seq)).metrics
    assert metrics is not None
    return metrics.cost, metrics.peak_bytes


@SETTINGS
@given(
    training_graphs(),
    st.sampled_from(["max", "min", 1, 2]),
    st.sampled_from([12, 40, 500]),
    st.one_of(st.none(), st.floats(-0.1, 1.2)),
    st.sampled_from([4, 12]),
)
def test_the_same_table_and_plans(graph: Graph, rule, max_slots: int, frac, groups: int) -> None:
    seg = segment(graph, rule=rule)
    if seg.count > groups:
        seg = seg.merged(_merge_starts(seg, groups))
    borrow = seg.count <= 8
    cap = None if frac is None else int(frac * store_all_peak(graph))
    new = solve_chain(graph, seg, max_slots, borrow, max_bytes=cap)
    old = reference.solve_chain(graph, seg, max_slots, borrow, max_bytes=cap)
    assert (new.q, new.slots, new.min_slots()) == (old.q, old.slots, old.min_slots())
    np.testing.assert_array_equal(new.top, old.top)
    for m in np.flatnonzero(np.isfinite(old.top)).tolist():
        seq = new.sequence(m)
        assert seq == old.sequence(m)
        assert _checked(graph, seq)[0] == pytest.approx(float(graph.cost[seq].sum()))


def _outcome(run, graph: Graph, budget: int, options: ChainOptions) -> tuple:
    """The strategy's plan (its sequence of steps and info) or its error."""
    try:
        res = run(graph, budget, options, RunContext())
    except NoPlanError as e:
        return ("error", str(e), e.min_budget)
    s = res.schedule
    assert simulate(graph, s).metrics is not None
    return ("plan", s.ops.tolist(), s.nodes.tolist(), dict(res.info))


@SETTINGS
@given(
    training_graphs(),
    st.lists(st.floats(0.0, 1.05), min_size=1, max_size=4),
    st.sampled_from([ChainOptions(), ChainOptions(max_segments=6, max_slots=60), ChainOptions(switch_segments=3, max_slots=25)]),
)
def test_the_same_outcome_of_the_strategy(graph: Graph, fracs: list[float], options: ChainOptions) -> None:
    peak = store_all_peak(graph)
    for frac in fracs:
        budget = int(frac * peak)
        assert _outcome(chain_dp._run, graph, budget, options) == _outcome(reference.run, graph, budget, options)


@pytest.mark.parametrize("n", [24, 90])
def test_below_every_plan_the_smallest_is_named_as_before(n: int) -> None:
    """A budget below the smallest plan: the error names the same smallest budget as the
    full table gave (the growing caps find the same smallest level and plan)."""
    rng = np.random.default_rng(n)
    fwd = gen.skip_chain(n, skip=3, mem=rng.integers(1 << 10, 1 << 20, n), cost=rng.random(n) + 0.5)
    graph = checkmate_training_graph(fwd)
    for frac in (0.0, 0.1, 0.2, 0.3):
        budget = int(frac * store_all_peak(graph))
        assert _outcome(chain_dp._run, graph, budget, ChainOptions()) == _outcome(reference.run, graph, budget, ChainOptions())
