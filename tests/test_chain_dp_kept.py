"""chain-dp solves fewer tables for the same plans: a table kept on the graph serves every
later budget whose levels it holds (a search for the smallest budget plans ten or more),
and below every plan the store-all peak's levels are solved before the whole table. The
plans are the reference's (tests/chain_dp_reference.py) and go through the simulator."""

from __future__ import annotations

import chain_dp_reference as reference
import numpy as np
import pytest

from remat_cli import generators as gen
from remat_cli.errors import NoPlanError
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import chain_dp
from remat_cli.strategies.base import RunContext
from remat_cli.strategies.chain_dp import ChainOptions, slot_size
from remat_cli.training import checkmate_training_graph


def _graph(n: int = 60):
    rng = np.random.default_rng(n)
    fwd = gen.skip_chain(n, skip=3, mem=rng.integers(1 << 10, 1 << 20, n), cost=rng.random(n) + 0.5)
    return checkmate_training_graph(fwd)


def _spy(monkeypatch) -> list[int]:
    """The slots of every table chain-dp solves from now on."""
    solved: list[int] = []
    real = chain_dp._solve

    def spy(graph, seg, q, S, *args):
        solved.append(S)
        return real(graph, seg, q, S, *args)

    monkeypatch.setattr(chain_dp, "_solve", spy)
    return solved


def test_a_smaller_budget_reuses_the_kept_tables(monkeypatch) -> None:
    graph = _graph()
    peak = store_all_peak(graph)
    solved = _spy(monkeypatch)
    for frac in (0.7, 0.5, 0.4):
        before = len(solved)
        plan = make_plan(graph, "chain-dp", int(frac * peak))
        assert (len(solved) > before) == (frac == 0.7)  # one table per rule, at 0.7x only
        assert plan.metrics.peak_bytes <= int(frac * peak)
        old = reference.run(graph, int(frac * peak), ChainOptions(), RunContext())
        assert plan.schedule.nodes.tolist() == old.schedule.nodes.tolist()
        assert simulate(graph, plan.schedule).metrics.cost == plan.metrics.cost
    # a larger budget needs more levels: new tables, which replace the kept ones
    before = len(solved)
    make_plan(graph, "chain-dp", int(0.9 * peak))
    assert len(solved) > before


def test_below_every_plan_the_whole_table_is_not_solved(monkeypatch) -> None:
    graph = _graph()
    solved = _spy(monkeypatch)
    with pytest.raises(NoPlanError) as new:
        chain_dp._run(graph, int(0.01 * store_all_peak(graph)), ChainOptions(), RunContext())
    with pytest.raises(NoPlanError) as old:
        reference.run(graph, int(0.01 * store_all_peak(graph)), ChainOptions(), RunContext())
    assert str(new.value) == str(old.value) and new.value.min_budget == old.value.min_budget
    assert solved and max(solved) < slot_size(graph, ChainOptions().max_slots)[1]
