"""What ``exact`` claims is true against the brute-force optimum (tests/brute_force.py).

On graphs with more than 12 needed nodes (where Checkmate's MILP is solved for one
order of first computations only): the reported lower bound ≤ the true optimum ≤ the
reported cost, and "optimal" implies cost = optimum, whichever way the plan was found.
Every schedule goes through the simulator (``make_plan``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brute_force import optimal_cost
from remat_cli import generators as gen
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph, NodeSpec
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import exact
from remat_cli.strategies.search import cheapest_schedule
from remat_cli.training import checkmate_training_graph

pytest.importorskip("scipy")

# generous limits: a busy machine must not turn a proof into "time limit" (these finish in
# well under a second each when the machine is idle)
OPTS = {"time_limit": 120}
MILP_ONLY = {"time_limit": 120, "search_nodes": 0}  # Checkmate's model for the graph's order


def issue_10_dag() -> Graph:
    """Issue 10's reproducer: v0..v12, each reading each of its three predecessors with
    probability 0.45, sizes and costs in 1..6, drawn with ``random.Random(0)``."""
    rng = random.Random(0)
    specs = []
    for i in range(13):
        ins = [f"v{j}" for j in range(max(0, i - 3), i) if rng.random() < 0.45]
        specs.append(NodeSpec(f"v{i}", ins, mem=rng.randint(1, 6), cost=float(rng.randint(1, 6))))
    return Graph.from_nodes(specs)


def _check_claims(graph: Graph, budget: int, opt: float | None, options: dict) -> dict:
    """The property: bound ≤ optimum ≤ cost, 'optimal' ⇒ equal; returns the plan's info."""
    try:
        plan = make_plan(graph, "exact", budget, options)
    except NoPlanError as exc:  # a decline claims "no schedule fits" only when proven
        assert opt is None or "all schedules" not in str(exc)
        return {}
    assert opt is not None, "a plan where brute force proves that none fits"
    assert simulate(graph, plan.schedule).valid and plan.metrics.peak_bytes <= budget
    info = plan.info
    assert info["lower_bound"] <= opt + 1e-9 <= plan.metrics.cost + 2e-9
    assert 0.0 <= info["gap"] <= 1.0
    if info["status"].startswith("optimal"):
        assert info["optimal_over"] == exact.OVER_ALL
        assert plan.metrics.cost == pytest.approx(opt)
        assert info["lower_bound"] == pytest.approx(opt)
    else:
        assert info["optimal_over"] != exact.OVER_ALL
    return dict(info)


def test_issue_10_reproducer_is_solved_and_the_fixed_order_is_not_called_optimal() -> None:
    graph = issue_10_dag()
    assert int(graph.needed.sum()) == 13
    assert optimal_cost(graph, 16) == 45
    plan = make_plan(graph, "exact", 16, OPTS)
    assert plan.metrics.cost == 45 and plan.info["status"] == "optimal"
    assert plan.info["optimal_over"] == exact.OVER_ALL and plan.info["gap"] == 0
    milp = make_plan(graph, "exact", 16, MILP_ONLY)  # the MILP alone finds 48
    assert milp.metrics.cost == 48
    assert milp.info["status"] != "optimal" and milp.info["optimal_over"] == exact.OVER_ORDER
    assert milp.info["order"] == [graph.ids[v] for v in graph.needed_nodes.tolist()]
    assert milp.info["lower_bound"] <= 45 and milp.info["gap"] > 0


@st.composite
def graphs_over_12(draw) -> Graph:
    """Graphs with 13 or 14 needed nodes: plain random DAGs, or training graphs of 6 layers."""
    seed = draw(st.integers(0, 100_000))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):
        n = draw(st.integers(13, 14))
        g = gen.random_dag(n, 0.3, seed=seed, mem=rng.integers(1, 7, n), cost=rng.integers(1, 7, n).astype(float))
        # one sink reading every other sink keeps all n nodes needed and the targets few
        sinks = [v for v in range(n) if g.succs(v).size == 0]
        src, dst = g.edges()
        extra = np.array([(s, n - 1) for s in sinks if s != n - 1], dtype=np.int64).reshape(-1, 2)
        edges = np.concatenate([np.stack([src, dst], axis=1), extra])
        return gen.from_edges(n, edges, mem=g.mem, cost=g.cost)
    fwd = gen.random_dag(6, 0.4, seed=seed)
    fwd = gen.from_edges(6, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 6, 6), cost=rng.integers(1, 6, 6).astype(float))
    return checkmate_training_graph(fwd)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs_over_12(), st.floats(0.0, 1.0))
def test_claims_hold_against_brute_force_above_12_nodes(graph: Graph, where: float) -> None:
    assert int(graph.needed.sum()) > 12
    budget = graph.lb + int(round(where * (store_all_peak(graph) - graph.lb)))
    opt = optimal_cost(graph, budget)
    full = _check_claims(graph, budget, opt, OPTS)
    if opt is not None:  # the search finishes on graphs this small: proven optimal
        assert full["status"].startswith("optimal")
    _check_claims(graph, budget, opt, MILP_ONLY)
    _check_claims(graph, budget, opt, {**OPTS, "search_states": 40})  # stopped early: a bound


def test_a_rejected_milp_solution_does_not_drop_its_orders_bound(monkeypatch) -> None:
    # 7 nodes, 7 orders of first computations, budget 11: only one order reaches the
    # optimum 32. Pretend the simulator rejects every optimal MILP solution (as it does when
    # HiGHS's tolerance lets a scaled memory row slip over the budget): the orders left all
    # cost more, and taking their bounds alone would claim a bound above 32.
    rng = np.random.default_rng(9)
    graph = gen.random_dag(7, 0.35, seed=9, mem=rng.integers(1, 6, 7), cost=rng.integers(1, 6, 7).astype(float))
    assert len(exact.topological_orders(graph, 120)) == 7
    opt = optimal_cost(graph, 11)
    assert opt == 32
    real = exact.solve_milp
    over = store_all_peak(graph)
    assert over > 11

    def rejecting(graph_, budget, order=None, time_limit=60.0, cutoff=None):
        res = real(graph_, budget, order, time_limit, cutoff)
        if res.objective is not None and res.objective <= opt + 1e-6:  # swap in an over-budget plan
            store = exact.store_all_plan(graph_).schedule
            return exact.MilpResult(store, res.objective, res.bound, res.status, res.seconds)
        return res

    monkeypatch.setattr(exact, "solve_milp", rejecting)
    monkeypatch.setattr(exact, "_heuristic", lambda graph_, budget: None)  # no cutoff: every order solved
    info = _check_claims(graph, 11, opt, MILP_ONLY)
    assert info["status"].startswith("not proven") and info["optimal_over"] == exact.OVER_NOTHING
    assert info["model_bound"] <= opt
    info = _check_claims(graph, 11, opt, OPTS)  # the search still proves the optimum
    assert info["status"] == "optimal"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(5, 9), st.floats(0.0, 1.0), st.integers(1, 60))
def test_search_is_the_brute_force_optimum_and_its_early_bound_is_below_it(seed: int, n: int, where: float, states: int) -> None:
    rng = np.random.default_rng(seed)
    graph = gen.random_dag(n, 0.35, seed=seed, mem=rng.integers(1, 6, n), cost=rng.integers(1, 6, n).astype(float))
    if rng.random() < 0.5:
        ws = rng.integers(0, 3, n)
        graph = graph.with_arrays(workspace=ws)
    budget = graph.lb + int(round(where * (store_all_peak(graph) - graph.lb)))
    opt = optimal_cost(graph, budget)
    done = cheapest_schedule(graph, budget)
    assert done.complete
    if opt is None:
        assert done.schedule is None
    else:
        metrics = simulate(graph, done.schedule).metrics
        assert metrics is not None and metrics.peak_bytes <= budget
        assert metrics.cost == pytest.approx(opt) == done.cost
    stopped = cheapest_schedule(graph, budget, max_states=states)
    if opt is not None:
        assert stopped.lower_bound <= opt + 1e-9
        if stopped.complete:
            assert stopped.cost == pytest.approx(opt)


def test_the_report_says_over_which_schedules_the_plan_is_best() -> None:
    import io

    from rich.console import Console

    from remat_cli.report.tables import render_plan

    graph = issue_10_dag()
    out = {}
    for name, options in (("proven", OPTS), ("milp", MILP_ONLY)):
        buf = io.StringIO()
        render_plan(make_plan(graph, "exact", 16, options), Console(file=buf, force_terminal=False, width=100))
        out[name] = buf.getvalue()
        assert max(len(line) for line in out[name].splitlines()) <= 100
    assert "all schedules (proven)" in out["proven"]
    assert "cost lower bound  45 (over all schedules)" in out["proven"]
    assert "first compute nodes in the order v0, v1, v2, v3, … v12 (13 nodes)" in out["milp"]
    assert "all schedules (proven)" not in out["milp"]
    assert "45 (over all schedules)" in out["milp"]  # the base cost: all that is proven there
