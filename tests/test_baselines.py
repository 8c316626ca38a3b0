"""Baselines, exact and auto against an independent brute-force optimum and each other.

Every schedule goes through the simulator (via ``make_plan`` or ``simulate``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from brute_force import optimal_cost
from remat_cli import generators as gen
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph, NodeSpec
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import fast_strategies, STRATEGIES
from remat_cli.algorithms.segments import checkpoint_sequence, schedule_from_sequence, segment, split
from remat_cli.training import checkmate_training_graph

pytest.importorskip("scipy")

BUDGET_DRIVEN = [s.name for s in STRATEGIES.values() if s.uses_budget]
# every registered strategy but exact (checked on its own) and store-all (listed apart):
# a strategy is tested against brute force by its registry line alone
HEURISTICS = [name for name in STRATEGIES if name not in ("exact", "store-all")]
FAST_OPTS = {"time_limit": 20}
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _with_workspace(g: Graph, ws: np.ndarray) -> Graph:
    return g.with_arrays(workspace=ws)


@st.composite
def tiny_graphs(draw) -> Graph:
    """Graphs of at most 8 nodes: training graphs of 1-3 forward nodes, or plain DAGs."""
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    family = draw(st.sampled_from(["train-dag", "train-chain", "plain"]))
    if family == "plain":
        n = draw(st.integers(3, 7))
        g = gen.random_dag(n, 0.4, seed=seed, mem=rng.integers(1, 5, n), cost=rng.integers(1, 6, n).astype(float))
    else:
        k = draw(st.integers(1, 3))
        fwd = gen.chain(k) if family == "train-chain" else gen.random_dag(k, 0.6, seed=seed)
        fwd = gen.from_edges(k, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 6, k), cost=rng.integers(1, 6, k).astype(float))
        g = checkmate_training_graph(fwd)
    if draw(st.booleans()):
        g = _with_workspace(g, rng.integers(0, 3, g.n))
    return g


def _plan_or_none(graph: Graph, name: str, budget: int, options: dict | None = None):
    try:
        return make_plan(graph, name, budget, FAST_OPTS if options is None else options)
    except NoPlanError as exc:
        return exc


@SETTINGS
@given(tiny_graphs(), st.floats(0.0, 1.0))
def test_tiny_graphs_against_brute_force(graph: Graph, where: float) -> None:
    peak = store_all_peak(graph)
    budget = graph.lb + int(round(where * (peak - graph.lb)))
    opt = optimal_cost(graph, budget)
    if opt is None:  # LB is only a bound: then no strategy may claim a plan
        for name in HEURISTICS + ["exact", "store-all"]:
            assert isinstance(_plan_or_none(graph, name, budget), NoPlanError), name
        return
    # exact's search proves the optimum over all schedules on graphs this small
    exact = make_plan(graph, "exact", budget, FAST_OPTS)
    assert exact.metrics.peak_bytes <= budget
    assert exact.info["status"].startswith("optimal") and exact.info["optimal_over"] == "all schedules"
    assert exact.metrics.cost == pytest.approx(opt) == exact.info["lower_bound"]
    # Checkmate's MILP alone (every order when there are at most 120, else the graph's):
    # its bound holds for all schedules, its cost is the optimum's or above, and it says
    # "optimal" only when that is the optimum
    milp = _plan_or_none(graph, "exact", budget, {**FAST_OPTS, "search_nodes": 0})
    if not isinstance(milp, NoPlanError):
        assert milp.info["lower_bound"] <= opt + 1e-9 <= milp.metrics.cost + 2e-9
        if milp.info["status"].startswith("optimal"):
            assert milp.metrics.cost == pytest.approx(opt)
        else:
            assert milp.info["optimal_over"] in ("fixed order", "every order", "nothing proven")
    for name in HEURISTICS + ["store-all"]:
        got = _plan_or_none(graph, name, budget)
        if isinstance(got, NoPlanError):
            assert got.min_budget is None or got.min_budget > budget
            continue
        assert simulate(graph, got.schedule).valid
        assert got.metrics.peak_bytes <= budget
        assert got.metrics.cost >= opt - 1e-9, name


@SETTINGS
@given(st.integers(1, 6), st.integers(0, 10_000), st.floats(0.0, 1.0), st.booleans())
def test_chain_dp_is_optimal_on_chains(layers: int, seed: int, where: float, workspace: bool) -> None:
    # the bounds of chain-dp's summary: "training chains of 1-6 layers at every budget"
    rng = np.random.default_rng(seed)
    fwd = gen.chain(layers, mem=rng.integers(1, 7, layers), cost=rng.integers(1, 9, layers).astype(float))
    graph = checkmate_training_graph(fwd)
    if workspace:
        graph = _with_workspace(graph, rng.integers(0, 3, graph.n))
    budget = graph.lb + int(round(where * (store_all_peak(graph) - graph.lb)))
    opt = optimal_cost(graph, budget)
    if opt is None:  # the lower bound is not always reachable: no plan may claim to fit
        with pytest.raises(NoPlanError):
            make_plan(graph, "chain-dp", budget)
        return
    plan = make_plan(graph, "chain-dp", budget)
    assert plan.metrics.peak_bytes <= budget
    assert plan.metrics.cost == pytest.approx(opt)


@SETTINGS
@given(st.integers(4, 6), st.integers(0, 10_000), st.integers(0, 3), st.booleans())
@example(5, 986, 0, True)  # with workspaces no schedule reaches the lower bound (14 B): must refuse
def test_chain_dp_is_optimal_near_the_lower_bound_on_longer_chains(layers: int, seed: int, extra: int, workspace: bool) -> None:
    # where rotor's recursion is not optimal: tight budgets, where the optimum uses a
    # checkpoint for one advance, frees it and rebuilds it from an earlier one
    rng = np.random.default_rng(seed)
    fwd = gen.chain(layers, mem=rng.integers(1, 7, layers), cost=rng.integers(1, 9, layers).astype(float))
    graph = checkmate_training_graph(fwd)
    if workspace:
        graph = _with_workspace(graph, rng.integers(0, 3, graph.n))
    budget = min(graph.lb + extra, store_all_peak(graph))
    opt = optimal_cost(graph, budget)
    if opt is None:  # the lower bound is not always reachable: no plan may claim to fit
        with pytest.raises(NoPlanError):
            make_plan(graph, "chain-dp", budget)
        return
    plan = make_plan(graph, "chain-dp", budget)
    assert plan.metrics.peak_bytes <= budget
    assert plan.metrics.cost == pytest.approx(opt)


def test_chain_dp_borrows_a_checkpoint_where_rotor_cannot() -> None:
    # 4 layers, sizes (1, 3, 3, 4), costs (6, 5, 1, 6), budget = lower bound (14): the
    # optimum keeps a_0, frees it after advancing from it once and rebuilds it (77);
    # the recursion without borrowed checkpoints costs 83
    graph = checkmate_training_graph(gen.chain(4, mem=[1, 3, 3, 4], cost=[6.0, 5.0, 1.0, 6.0]))
    assert graph.lb == 14
    assert optimal_cost(graph, 14) == 77
    plan = make_plan(graph, "chain-dp", 14)
    assert plan.metrics.peak_bytes <= 14 and plan.metrics.cost == 77
    without = make_plan(graph, "chain-dp", 14, {"borrow_segments": 0})
    assert without.metrics.cost > 77


def _min_budget(graph: Graph, name: str) -> int:
    """The strategy's own smallest budget: what it names when declining the lower bound."""
    strat = STRATEGIES[name]
    if not strat.uses_budget:
        return make_plan(graph, name, None).metrics.peak_bytes
    try:
        make_plan(graph, name, graph.lb, FAST_OPTS)
        return graph.lb
    except NoPlanError as exc:
        assert exc.min_budget is not None and exc.min_budget > graph.lb
        return exc.min_budget


@pytest.mark.parametrize("layers", [2, 3, 5, 8, 13, 21, 32])
def test_every_strategy_fits_its_minimal_budget_on_training_chains(layers: int) -> None:
    rng = np.random.default_rng(layers)
    fwd = gen.chain(layers, mem=rng.integers(1, 9, layers), cost=rng.integers(1, 9, layers).astype(float))
    graph = checkmate_training_graph(fwd)
    names = [n for n in STRATEGIES if n != "exact" or layers <= 8]
    at_lb = {}  # cost of each strategy that fits the lower bound
    for name in names:
        budget = _min_budget(graph, name)
        plan = make_plan(graph, name, budget, FAST_OPTS)
        assert simulate(graph, plan.schedule).valid
        assert plan.metrics.peak_bytes <= budget, name
        if budget == graph.lb:
            at_lb[name] = plan.metrics.cost
    # chain-dp reaches the lower bound on these chains, so no schedule at all fits below its
    # minimal budget (LB is proven); for up to 8 layers (17 nodes) its cost there is the
    # brute-force optimum, so no strategy is cheaper. Beyond that nothing is proven: auto's
    # memory-limit pass beats chain-dp at LB on 21 layers (513 vs 671).
    dp_min = _min_budget(graph, "chain-dp")
    assert dp_min == graph.lb
    dp_cost = at_lb["chain-dp"]
    if layers <= 8:
        assert dp_cost == optimal_cost(graph, dp_min)
        assert all(cost >= dp_cost for cost in at_lb.values()), at_lb


@st.composite
def training_graphs(draw) -> Graph:
    seed = draw(st.integers(0, 10_000))
    family = draw(st.sampled_from(["dag", "diamonds", "skip", "sp", "ladder", "unet", "plain"]))
    n = draw(st.integers(3, 12))
    rng = np.random.default_rng(seed)
    if family == "dag":
        fwd = gen.random_dag(n, 0.3, seed=seed, max_size=6)
    elif family == "diamonds":
        fwd = gen.diamonds(max(1, n // 3), width=2 + seed % 2, mem=rng.integers(1, 6, 1))
    elif family == "skip":
        fwd = gen.skip_chain(n, mem=rng.integers(1, 6, n), cost=rng.integers(1, 6, n).astype(float))
    elif family == "sp":
        fwd = gen.series_parallel(n, seed=seed)
    elif family == "ladder":
        fwd = gen.ladder(max(2, n // 2))
    elif family == "unet":
        return checkmate_training_graph(gen.unet(1 + seed % 2, convs=1, base_mem=64))
    else:
        return gen.random_dag(n, 0.3, seed=seed, max_size=5)  # no backward nodes at all
    return checkmate_training_graph(fwd)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_graphs())
def test_budget_at_store_all_peak_costs_exactly_base(graph: Graph) -> None:
    peak = store_all_peak(graph)
    for name in BUDGET_DRIVEN:
        plan = make_plan(graph, name, peak, FAST_OPTS)
        assert plan.metrics.peak_bytes <= peak
        assert plan.metrics.cost == graph.base_cost, name
        assert plan.metrics.recomputations == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_graphs(), st.floats(0.05, 1.0))
def test_no_strategy_returns_a_plan_above_its_budget(graph: Graph, ratio: float) -> None:
    peak = store_all_peak(graph)
    budget = max(graph.lb, int(ratio * peak))
    for name in [n for n in STRATEGIES if n != "exact"]:
        strat = STRATEGIES[name]
        try:
            result = strat.run(graph, budget, FAST_OPTS)
        except NoPlanError as exc:
            assert strat.uses_budget, f"{name} ignores budgets; the planner declines for it"
            assert exc.min_budget is not None and exc.min_budget > budget, name
            plan = make_plan(graph, name, exc.min_budget, FAST_OPTS)  # and it keeps its word
            assert plan.metrics.peak_bytes <= exc.min_budget
            continue
        metrics = simulate(graph, result.schedule).metrics
        assert metrics is not None, name
        if strat.uses_budget:
            assert metrics.peak_bytes <= budget, name
        else:
            got = _plan_or_none(graph, name, budget)
            assert isinstance(got, NoPlanError) == (metrics.peak_bytes > budget)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_graphs(), st.floats(0.3, 0.95))
def test_auto_is_the_cheapest_fast_strategy(graph: Graph, ratio: float) -> None:
    budget = max(graph.lb, int(ratio * store_all_peak(graph)))
    costs = {}
    for name in [s.name for s in fast_strategies()]:  # every registered fast strategy
        got = _plan_or_none(graph, name, budget)
        if not isinstance(got, NoPlanError):
            costs[name] = got.metrics.cost
    got = _plan_or_none(graph, "auto", budget)
    if not costs:
        assert isinstance(got, NoPlanError)
        return
    assert got.metrics.cost <= min(costs.values())
    if "polished" in got.info or "improved" in got.info:  # a pass made the winner's plan cheaper
        assert got.metrics.cost < costs[got.info["winner"]]
    else:
        assert got.metrics.cost == min(costs.values()) == costs[got.info["winner"]]


# ---------------------------------------------------------------- segments and sequences
def test_segments_of_a_chain_are_single_nodes_and_a_grid_has_few() -> None:
    chain = checkmate_training_graph(gen.chain(6))
    seg = segment(chain)
    assert [len(p) for p in seg.nodes] == [1] * 7  # six layers and the loss
    assert sorted(seg.backward_order()) == sorted(split(chain)[1])
    grid = checkmate_training_graph(gen.grid(3, 3))
    assert segment(grid).count == 3  # the source, the 3x3 interior up to the sink, the loss
    plain = gen.random_dag(9, 0.5, seed=1)
    fwd, bwd = split(plain)
    assert bwd == [] and len(fwd) == int(plain.needed.sum())


@pytest.mark.parametrize(
    "graph",
    [
        checkmate_training_graph(gen.diamonds(3)),
        checkmate_training_graph(gen.unet(2, convs=1, base_mem=16)),
        gen.random_dag(10, 0.3, seed=4),
    ],
)
def test_checkpoint_sequences_are_valid_for_any_kept_set(graph: Graph) -> None:
    seg = segment(graph)
    rng = np.random.default_rng(0)
    for _ in range(5):
        starts = sorted({0} | {int(x) for x in rng.integers(0, seg.count, 3)})
        groups = seg.merged(starts)
        kept = {groups.boundary(g) for g in range(groups.count)}
        sched = schedule_from_sequence(graph, checkpoint_sequence(groups, kept))
        assert simulate(graph, sched).valid


# ---------------------------------------------------------------- exact specifics
def test_exact_reports_bounds_and_lp_bound_is_below_the_models_optimum() -> None:
    from remat_cli.strategies.exact import lp_lower_bound, solve_milp

    graph = checkmate_training_graph(gen.diamonds(2, mem=np.array([3])))
    budget = int(0.6 * store_all_peak(graph))
    plan = make_plan(graph, "exact", budget, FAST_OPTS)
    assert plan.info["status"] == "optimal" and plan.info["gap"] == 0
    assert plan.info["lower_bound"] == pytest.approx(plan.metrics.cost)
    # the LP relaxes Checkmate's model for one order: below that model's optimum, which
    # itself is at or above the optimum over all schedules (not a bound on that)
    lp = lp_lower_bound(graph, budget)
    milp = solve_milp(graph, budget)
    assert milp.status == "optimal" and milp.objective >= plan.metrics.cost - 1e-6
    assert lp is not None and graph.base_cost <= lp <= milp.objective + 1e-6


def test_exact_without_scipy_says_how_to_install(monkeypatch) -> None:
    import sys

    from remat_cli.errors import InputError

    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    graph = checkmate_training_graph(gen.chain(3))
    with pytest.raises(InputError, match=r"pip install 'remat-cli\[exact\]'"):
        make_plan(graph, "exact", graph.lb)


def test_cli_plan_with_exact_and_a_declining_baseline(tmp_path) -> None:
    from click.testing import CliRunner

    from remat_cli.cli import cli
    from remat_cli.loaders import remat_json

    graph = checkmate_training_graph(gen.chain(6))
    path = tmp_path / "chain.json"
    path.write_text(remat_json.dumps(graph))
    runner = CliRunner()
    ok = runner.invoke(cli, ["plan", str(path), "-s", "exact", "-b", "0.5x", "--time-limit", "10", "--format", "json"])
    assert ok.exit_code == 0, ok.output
    assert '"strategy": "exact"' in ok.output
    low = runner.invoke(cli, ["plan", str(path), "-s", "chen-sqrt", "-b", str(graph.lb)])
    assert low.exit_code == 1
    assert "chen-sqrt" in low.output


@pytest.mark.parametrize(
    "graph",
    [
        Graph.from_nodes([NodeSpec("a", mem=4, cost=1.0)]),
        Graph.from_nodes([NodeSpec("a", mem=4, cost=1.0, kind="backward"), NodeSpec("b", ["a"], mem=2, cost=1.0, kind="backward")]),
        Graph.from_nodes(
            [
                NodeSpec("x", mem=3, cost=1.0),
                NodeSpec("g", ["x"], mem=1, cost=1.0, kind="backward"),
                NodeSpec("y", ["g"], mem=2, cost=1.0, kind="forward"),
                NodeSpec("z", ["y", "x"], mem=2, cost=1.0, kind="backward"),
            ]
        ),
        checkmate_training_graph(gen.chain(5, mem=0)),
        checkmate_training_graph(gen.chain(5, cost=0.0)),
        checkmate_training_graph(gen.chain(6, fixed_mem=1000)),
    ],
    ids=["single", "all-backward", "forward-after-backward", "zero-sizes", "zero-costs", "fixed-memory"],
)
def test_odd_graphs_get_valid_plans_or_a_clear_decline(graph: Graph) -> None:
    peak = store_all_peak(graph)
    for name in STRATEGIES:
        for budget in (graph.lb, peak):
            got = _plan_or_none(graph, name, budget)
            if isinstance(got, NoPlanError):
                assert budget < peak or not STRATEGIES[name].uses_budget, name
                continue
            assert simulate(graph, got.schedule).valid and got.metrics.peak_bytes <= budget, name
