"""treewidth/pathwidth in scale mode (issue 14 item 2): on graphs of
``LARGE_GRAPH_NODES`` needed nodes or more the budget ladder runs one point, and where the
decomposition's bound (w+1)·(depth+1) is no fewer values than the needed nodes no budgeted
run is made. The threshold is lowered here so that small generated graphs take that path;
every plan is replayed by the simulator, and no timing is asserted."""

from __future__ import annotations

import numpy as np
import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import require_valid, simulate
from remat_cli.strategies import get_strategy
from remat_cli.strategies import treewidth as T
from remat_cli.training import checkmate_training_graph

STRATS = ("treewidth", "pathwidth")


def _graph(kind: str, n: int, seed: int) -> Graph:
    return training_graph(kind, n, seed)


def _run(g: Graph, name: str, budget: int | None, nodes: int):
    """The strategy's result (or NoPlanError) with scale mode from ``nodes`` needed nodes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(T, "LARGE_GRAPH_NODES", nodes)
        return get_strategy(name).run(g, budget, {})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(STRATS),
    kind=st.sampled_from(["chain", "skip", "grid", "dag"]),
    n=st.integers(3, 20),
    seed=st.integers(0, 60),
    ratio=st.floats(0.05, 1.0),
)
def test_scale_mode_plans_are_valid_and_say_what_was_left_out(name, kind, n, seed, ratio):
    g = _graph(kind, n, seed)
    sa = store_all_peak(g)
    budget = max(g.lb, int(ratio * sa))
    bare = simulate(g, get_strategy(name).run(g, None, {}).schedule).metrics
    try:
        res = _run(g, name, budget, nodes=1)
    except NoPlanError as exc:
        # the bare recursion stays a candidate: a budget at its peak always has a plan
        assert budget < bare.peak_bytes
        assert exc.min_budget is not None and exc.min_budget > budget
        return
    m = require_valid(g, res.schedule, what=name)
    assert m.peak_bytes <= budget
    assert not any(k.startswith("discarded") for k in res.info), res.info
    if budget >= sa:
        assert m.cost == pytest.approx(m.base_cost)
        return
    needed = int(np.count_nonzero(g.needed))
    too_wide = (res.info["width"] + 1) * (res.info["separator depth"] + 1) >= needed
    # the info names each part left out, and a left-out part made no candidate
    assert ("budgeted recursion" in res.info) == too_wide, res.info
    assert "not run" in str(res.info.get("budgeted recursion", "not run"))
    mode = str(res.info["mode"])
    if too_wide:
        assert "budgeted recursion" not in mode, mode
        assert "budget ladder" not in res.info
    elif "budget ladder" in res.info:
        assert "cheap evicted first" not in mode, mode


@pytest.mark.parametrize("name", STRATS)
def test_scale_mode_is_off_below_the_threshold(name):
    """A graph below LARGE_GRAPH_NODES gets the same plan as before (no scale info)."""
    g = _graph("skip", 30, 3)
    budget = int(0.5 * store_all_peak(g))
    full = get_strategy(name).run(g, budget, {})
    assert "budget ladder" not in full.info and "budgeted recursion" not in full.info
    assert int(np.count_nonzero(g.needed)) < T.LARGE_GRAPH_NODES
    again = _run(g, name, budget, nodes=T.LARGE_GRAPH_NODES)
    assert (again.schedule.nodes == full.schedule.nodes).all() and (again.schedule.ops == full.schedule.ops).all()


def test_a_long_chain_in_scale_mode_cuts_the_ladder_and_still_fits():
    """A 200-layer training chain: narrow (no 'not run'), many ladder points below 0.9x;
    scale mode runs one, says so, and its plan fits and is no dearer than twice the base."""
    g = checkmate_training_graph(G.chain(200))
    budget = int(0.9 * store_all_peak(g))
    res = _run(g, "treewidth", budget, nodes=1)
    assert "budget ladder" in res.info and "budgeted recursion" not in res.info
    m = require_valid(g, res.schedule, what="treewidth")
    assert m.peak_bytes <= budget and m.cost <= 2 * m.base_cost
