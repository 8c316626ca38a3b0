"""Properties of the treewidth and pathwidth strategies on generated graph families.

Every schedule goes through the simulator. Bounds (docs/algorithms.md): with unit sizes
the bare recursion peaks at most (w+1)·(depth+1) values and computes a node owned at
separator depth d at most (w+2)^d times; with a budget B the plan never exceeds B, is
found whenever B ≥ the bare peak, costs the base cost when B ≥ the store-all peak, and
never costs more when B grows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate, require_valid
from remat_cli.algorithms import decompose as D
from remat_cli.strategies import get_strategy
from remat_cli.strategies.treewidth import RecursionStopped, compute_bound, recursive_schedule
from remat_cli.training import checkmate_training_graph

STRATS = ("treewidth", "pathwidth")


def _sep_trees(g: Graph):
    td = D.tree_decomposition(g)
    pd = D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",)))
    return {"treewidth": D.separator_tree(g, td), "pathwidth": D.path_separator_tree(g, pd)}


def _family(kind: str, n: int, seed: int) -> Graph:
    """One small generated graph; odd seeds give the training graph of the forward one."""
    n = max(n, 4)
    if kind == "chain":
        g = G.chain(n)
    elif kind == "ladder":
        g = G.ladder(max(2, n // 2))
    elif kind == "grid":
        g = G.grid(3, max(2, n // 3))
    elif kind == "sp":
        g = G.series_parallel(n, seed=seed)
    elif kind == "pkt":
        g = G.partial_ktree(n, 2 + seed % 2, seed=seed)
    elif kind == "skip":
        g = G.skip_chain(n, skip=2 + seed % 3)
    elif kind == "diamonds":
        g = G.diamonds(max(1, n // 4), width=2 + seed % 2)
    else:
        g = G.random_dag(n, p=0.25, seed=seed)
    return checkmate_training_graph(g) if seed % 2 else g


FAMILIES = ("chain", "ladder", "grid", "sp", "pkt", "skip", "diamonds", "dag")
graphs = st.builds(_family, st.sampled_from(FAMILIES), st.integers(4, 22), st.integers(0, 50))


def _weighted(g: Graph, seed: int) -> Graph:
    """The same structure with random sizes 1..9 and costs 1..5."""
    rng = np.random.default_rng(seed)
    return g.with_arrays(
        mem=rng.integers(1, 10, g.n), cost=rng.integers(1, 6, g.n).astype(float), fixed_mem=int(rng.integers(0, 5)), name=g.name + "-w"
    )


# ---------------------------------------------------------------------- decompositions
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs)
def test_decompositions_are_valid(g: Graph) -> None:
    for moral in (True, False):
        for method in ("min-degree", "min-fill"):
            td = D.tree_decomposition(g, moral=moral, methods=(method,))
            assert D.validate_decomposition(g, td.bags, td.tree_edges(), moral=moral) == []
            assert td.width == max(len(b) for b in td.bags) - 1
        pd = D.path_decomposition(g, moral=moral, td=td)
        assert D.validate_decomposition(g, pd.bags, pd.tree_edges(), moral=moral) == []
        assert pd.width == max(len(b) for b in pd.bags) - 1
        # both are heuristics, so pd.width >= td.width need not hold; what must hold is that
        # no decomposition is narrower than the treewidth, itself at least the degeneracy
        low = _degeneracy(D.skeleton(g, moral=moral)[1])
        assert td.width >= low and pd.width >= low


def _degeneracy(adj: list[set[int]]) -> int:
    """Largest minimum degree over subgraphs: a lower bound on the treewidth."""
    adj = [set(a) for a in adj]
    alive = set(range(len(adj)))
    best = 0
    while alive:
        v = min(alive, key=lambda x: len(adj[x]))
        best = max(best, len(adj[v]))
        for u in adj[v]:
            adj[u].discard(v)
        alive.discard(v)
    return best


def _greedy_width(adj: list[set[int]], method: str) -> int:
    """Reference: eliminate, one node at a time, the node of least (score, id), rescoring all.

    Plain O(n^3) code for what ``elimination_decomposition`` claims to compute with a heap
    and partial rescoring: min-degree scores the degree, min-fill the missing edges among
    the neighbours (d(d-1)/2 above ``FILL_DEGREE_CAP`` neighbours).
    """
    adj = [set(a) for a in adj]
    alive = set(range(len(adj)))

    def score(v: int) -> int:
        nb = sorted(adj[v])
        if method == "min-degree":
            return len(nb)
        if len(nb) > D.FILL_DEGREE_CAP:
            return len(nb) * (len(nb) - 1) // 2
        return sum(1 for i, a in enumerate(nb) for b in nb[i + 1 :] if b not in adj[a])

    width = 0
    while alive:
        v = min(alive, key=lambda x: (score(x), x))
        nb = adj[v]
        width = max(width, len(nb))
        for a in nb:
            adj[a].discard(v)
            adj[a] |= nb - {a}
        alive.discard(v)
        adj[v] = set()
    return width


def test_widths_are_the_greedy_eliminations_they_claim() -> None:
    """Each heuristic's width equals a plain reference elimination with the same rule and
    tie-break, exactly; the decomposition keeps the narrower. (networkx's heuristics are
    the same greedy rules but break ties by other orders, so their widths differ either
    way by a few; they are no exact reference.)"""
    for i, kind in enumerate(FAMILIES * 3):
        g = _family(kind, 12 + 3 * i, i)
        _, adj = D.skeleton(g)
        widths = {}
        for method in ("min-degree", "min-fill"):
            widths[method] = D.tree_decomposition(g, methods=(method,)).width
            assert widths[method] == _greedy_width(adj, method), (kind, i, method)
        assert D.tree_decomposition(g).width == min(widths.values())


def _greedy_order(adj: list[set[int]]) -> list[int]:
    """Reference min-fill order: each step rescores every node from scratch (missing edges
    among its neighbours, d(d-1)/2 above ``FILL_DEGREE_CAP``) and eliminates the least
    (score, id)."""
    adj = [set(a) for a in adj]
    alive = set(range(len(adj)))

    def score(v: int) -> int:
        nb = sorted(adj[v])
        if len(nb) > D.FILL_DEGREE_CAP:
            return len(nb) * (len(nb) - 1) // 2
        return sum(1 for i, a in enumerate(nb) for b in nb[i + 1 :] if b not in adj[a])

    order = []
    while alive:
        v = min(alive, key=lambda x: (score(x), x))
        order.append(v)
        for a in adj[v]:
            adj[a].discard(v)
            adj[a] |= adj[v] - {a}
        alive.discard(v)
        adj[v] = set()
    return order


def test_min_fill_order_is_the_reference_order() -> None:
    """Exact min-fill keeps each node's triangle count up to date instead of rescoring it
    (O(1) per rescore, not O(d²)): its elimination order is the from-scratch reference's,
    step for step, on every family (a wrong count changes some choice)."""
    for i, kind in enumerate(FAMILIES * 3):
        g = _family(kind, 14 + 4 * i, 7 + i)
        _, adj = D.skeleton(g)
        td = D.elimination_decomposition([set(a) for a in adj], "min-fill", max_degree=None)
        assert [bag[0] for bag in td.bags] == _greedy_order(adj), (kind, i)


def test_known_widths() -> None:
    """Chains have width 1, ladders 2, partial k-trees at most k (plain skeleton)."""
    assert D.tree_decomposition(G.chain(50), moral=False).width == 1
    assert D.path_decomposition(G.chain(50), moral=False).width == 1
    assert D.tree_decomposition(G.ladder(30), moral=False).width == 2
    for k in (2, 3):
        assert D.tree_decomposition(G.partial_ktree(60, k, seed=k), moral=False).width <= k
    assert D.tree_decomposition(G.series_parallel(80, seed=1), moral=False).width <= 2


def test_validator_catches_broken_decompositions() -> None:
    g = G.chain(5)
    td = D.tree_decomposition(g)
    bags = [list(b) for b in td.bags]
    assert D.validate_decomposition(g, bags, td.tree_edges()) == []
    holder = next(i for i, b in enumerate(bags) if 2 in b and 3 in b)
    broken = [[v for v in b if not (i == holder and v == 3)] for i, b in enumerate(bags)]
    broken = [b if any(3 in c for c in broken) or i != holder else b + [3] for i, b in enumerate(broken)]
    problems = D.validate_decomposition(g, broken, td.tree_edges())
    assert any("edge" in p for p in problems)
    # node 0 in two bags that are not adjacent: disconnected
    chain_bags = [[0, 1], [1, 2], [2, 3], [3, 4, 0]]
    problems = D.validate_decomposition(g, chain_bags, [(0, 1), (1, 2), (2, 3)])
    assert any("not connected" in p for p in problems)


def test_separator_tree_is_balanced_and_owns_each_node_once() -> None:
    g = checkmate_training_graph(G.chain(300))
    for name, sep in _sep_trees(g).items():
        owned = [v for o in sep.owned for v in o]
        assert sorted(owned) == sorted(g.needed_nodes.tolist()), name
        assert sep.depth <= int(np.ceil(np.log2(g.n))) + 1, name
        for x, o in enumerate(sep.owned):
            assert all(sep.owner[v] == x for v in o)
        # every edge joins an owner and one of its ancestors (or the same owner)
        src, dst = g.edges()
        for u, v in zip(src.tolist(), dst.tolist()):
            a, b = int(sep.owner[u]), int(sep.owner[v])
            lo, hi = (a, b) if sep.depth_of[a] <= sep.depth_of[b] else (b, a)
            assert sep.tin[lo] <= sep.tin[hi] < sep.tout[lo]


# ---------------------------------------------------------------------- the bare recursion
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs)
def test_bare_recursion_bounds(g: Graph) -> None:
    """Unit sizes: valid, only needed nodes, peak ≤ (w+1)(depth+1), computes ≤ (w+2)^depth."""
    for name, sep in _sep_trees(g).items():
        schedule, _ = recursive_schedule(g, sep, None)
        m = require_valid(g, schedule, what=name)
        assert m.peak_bytes <= (sep.width + 1) * (sep.depth + 1), name
        counts = np.bincount(schedule.compute_nodes, minlength=g.n)
        assert not counts[~g.needed].any(), "computed a node no target needs"
        for v in np.flatnonzero(counts).tolist():
            assert counts[v] <= compute_bound(sep, v), (name, g.ids[v])
        assert counts.sum() <= g.needed.sum() * (sep.width + 2) ** sep.depth


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.sampled_from([None, 40, 400]))
def test_bare_recursion_replay_is_the_same_schedule(g: Graph, max_work: int | None) -> None:
    """Replaying recurring calls (the default) gives step for step the schedule of walking
    each call again, and stops at the same work limit."""
    for name, sep in _sep_trees(g).items():
        runs = []
        for replay in (False, True):
            try:
                s, _ = recursive_schedule(g, sep, None, max_work=max_work, replay=replay)
            except RecursionStopped as exc:
                runs.append(str(exc))
                continue
            require_valid(g, s, what=name)
            runs.append((s.ops.tolist(), s.nodes.tolist()))
        assert runs[0] == runs[1], name


def test_bare_recursion_on_a_long_training_chain_is_logarithmic() -> None:
    g = checkmate_training_graph(G.chain(512))
    for name in STRATS:
        plan = make_plan(g, name, None)
        assert plan.metrics.peak_bytes <= plan.info["bare bound (w+1)(depth+1)"]
        assert plan.metrics.peak_bytes < 40  # vs 514 for store-all
        assert plan.info["peak (values)"] == plan.metrics.peak_bytes  # unit graph


# ---------------------------------------------------------------------- budgets
def _sweep_checks(g: Graph, name: str, ratios) -> None:
    """Budget sweep: within budget, a plan whenever B >= the bare peak, base cost at B >=
    store-all. Cost never rises with B without the memory-limit pass (the monotone part,
    docs/algorithms.md §3); with it, cost is at most that at every budget (the pass only
    adds candidates), but it may rise with B (its evictions depend on B)."""
    sa = store_all_peak(g)
    bare = simulate(g, get_strategy(name).run(g, None, {}).schedule).metrics
    costs, monotone_costs = [], []
    for r in ratios:
        budget = max(g.lb, int(r * sa))
        try:
            res = get_strategy(name).run(g, budget, {})
        except NoPlanError as exc:
            assert budget < bare.peak_bytes, f"{name}: no plan at {budget} although the bare peak is {bare.peak_bytes}"
            assert exc.min_budget is not None and exc.min_budget > budget
            costs.append(None)
            monotone_costs.append(None)
            continue
        m = require_valid(g, res.schedule, what=name)
        assert m.peak_bytes <= budget, f"{name} over budget: {m.peak_bytes} > {budget}"
        assert not any(k.startswith("discarded") for k in res.info), res.info
        if budget >= sa:
            assert m.cost == pytest.approx(m.base_cost)
        costs.append(m.cost)
        try:
            plain = require_valid(g, get_strategy(name).run(g, budget, {"memlimit": False}).schedule, what=name)
        except NoPlanError:
            monotone_costs.append(None)
            continue
        assert plain.peak_bytes <= budget
        assert m.cost <= plain.cost + 1e-9, f"{name}: the memory-limit pass made the plan dearer"
        monotone_costs.append(plain.cost)
    found = [c for c in monotone_costs if c is not None]
    for a, b in zip(found, found[1:]):
        assert b <= a + 1e-9, f"{name}: cost rose with the budget: {monotone_costs}"
    # once a plan exists, every larger budget has one
    first = next((i for i, c in enumerate(costs) if c is not None), len(costs))
    assert all(c is not None for c in costs[first:])


RATIOS = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.sampled_from(STRATS))
def test_budget_properties_unit(g: Graph, name: str) -> None:
    _sweep_checks(g, name, RATIOS)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 1000), st.sampled_from(STRATS))
def test_budget_properties_weighted(g: Graph, seed: int, name: str) -> None:
    _sweep_checks(_weighted(g, seed), name, RATIOS)


def test_training_chain_quality() -> None:
    """The issue's bar: twremat pays 4.55x at 0.5x and 3.2x at 0.7x on this chain."""
    g = checkmate_training_graph(G.chain(1024))
    for name in STRATS:
        half = make_plan(g, name, int(0.5 * store_all_peak(g)))
        assert half.metrics.cost / half.metrics.base_cost < 1.3
        most = make_plan(g, name, int(0.7 * store_all_peak(g)))
        assert most.metrics.cost / most.metrics.base_cost < 1.15


def test_info_reports_the_decomposition() -> None:
    g = checkmate_training_graph(G.ladder(20))
    for name in STRATS:
        plan = make_plan(g, name, int(0.6 * store_all_peak(g)))
        for key in ("width", "separator depth", "peak (values)", "mode", "decompose seconds"):
            assert key in plan.info
        assert plan.metrics.peak_bytes <= plan.budget_bytes


def test_below_everything_raises_with_min_budget() -> None:
    g = _weighted(checkmate_training_graph(G.chain(40)), 3)
    for name in STRATS:
        with pytest.raises(NoPlanError) as info:
            get_strategy(name).run(g, g.lb, {})
        if info.value.min_budget is not None:
            plan = make_plan(g, name, info.value.min_budget)
            assert plan.metrics.peak_bytes <= info.value.min_budget


# ---------------------------------------------------------------------- edge cases and CLI
def _specs_graph(specs, targets=None, fixed=0) -> Graph:
    from remat_cli.graph import NodeSpec

    return Graph.from_nodes([NodeSpec(*s) for s in specs], targets=targets, fixed_mem=fixed)


@pytest.mark.parametrize("name", STRATS)
def test_edge_cases(name: str) -> None:
    single = _specs_graph([("a", (), 5, 1.0)])
    isolated = _specs_graph([("a", (), 2, 1.0), ("b", (), 3, 1.0), ("c", ("a",), 1, 1.0)])
    # workspace, fixed memory, and a node no target needs ("dead")
    work = _specs_graph(
        [("x", (), 4, 1.0), ("dead", ("x",), 100, 1.0), ("y", ("x",), 4, 2.0, "", 7), ("z", ("y", "x"), 4, 1.0)],
        targets=["z"],
        fixed=10,
    )
    for g in (single, isolated, work):
        for budget in (None, g.lb, store_all_peak(g)):
            try:
                res = get_strategy(name).run(g, budget, {})
            except NoPlanError:
                assert budget is not None and budget < store_all_peak(g)
                continue
            m = require_valid(g, res.schedule)
            assert budget is None or m.peak_bytes <= budget
            assert not np.isin(res.schedule.compute_nodes, np.flatnonzero(~g.needed)).any()


def test_cli_plan_and_info(tmp_path) -> None:
    from click.testing import CliRunner

    from remat_cli.cli import cli
    from remat_cli.loaders import remat_json

    path = tmp_path / "g.json"
    path.write_text(remat_json.dumps(checkmate_training_graph(G.skip_chain(40))))
    runner = CliRunner()
    out = runner.invoke(cli, ["info", str(path)])
    assert out.exit_code == 0, out.output
    assert "treewidth upper bound" in out.output and "pathwidth seconds" in out.output
    out = runner.invoke(cli, ["info", str(path), "--no-decompose"])
    assert out.exit_code == 0 and "treewidth" not in out.output
    for name in STRATS:
        out = runner.invoke(cli, ["plan", str(path), "-s", name, "-b", "0.5x", "-o", str(tmp_path / "p.json"), "--format", "json"])
        assert out.exit_code == 0, out.output
        assert '"separator depth"' in out.output and '"peak (values)"' in out.output
        out = runner.invoke(cli, ["validate", str(path), str(tmp_path / "p.json"), "-b", "0.5x"])
        assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["plan", str(path), "-s", "treewidth", "-b", "0.01x"])
    assert out.exit_code == 1


def test_budget_ladder_does_not_depend_on_the_budget() -> None:
    """Monotonicity rests on this: a larger budget sees every ladder point a smaller one saw."""
    from remat_cli.strategies.treewidth import _ladder

    full = _ladder(10**9, 37, 100_000)
    assert full == sorted(full, reverse=True) and full[-1] >= 37
    assert 95_000 in full and 50_000 in full and 20_000 in full and 10_000 in full
    for budget in (40, 5_000, 49_999, 50_000, 99_999):
        assert _ladder(budget, 37, 100_000) == [p for p in full if p <= budget]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.floats(0.3, 1.0))
def test_plain_plans_laid_out_by_numpy_or_loop_agree(g: Graph, ratio: float) -> None:
    """Large plain schedules are laid out with numpy, small ones with a loop: forcing either
    layout everywhere gives the same plan step for step (and the simulator accepts it)."""
    import remat_cli.strategies.treewidth as T

    budget = max(g.lb, int(ratio * store_all_peak(g)))
    saved = T.PLAIN_VECTOR_MIN
    for name in STRATS:
        runs = []
        for threshold in (0, 10**9):
            T.PLAIN_VECTOR_MIN = threshold
            try:
                plan = make_plan(g, name, budget)
                runs.append((plan.schedule.ops.tolist(), plan.schedule.nodes.tolist(), plan.metrics.peak_bytes))
            except NoPlanError as exc:
                runs.append(exc.min_budget)
            finally:
                T.PLAIN_VECTOR_MIN = saved
        assert runs[0] == runs[1], name


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FAMILIES), st.integers(4, 22), st.integers(0, 50))
def test_runs_kept_on_the_graph_change_no_plan(kind: str, n: int, seed: int) -> None:
    """Planning one graph at several budgets reuses the decompositions, the bare run and
    the ladder runs kept on it; each plan equals the plan of a freshly built copy."""
    g = _family(kind, n, seed)
    peak = store_all_peak(g)
    for name in STRATS:
        for ratio in (0.9, 0.4, 0.6, 0.3):
            budget = max(g.lb, int(ratio * peak))
            got = []
            for graph in (g, _family(kind, n, seed)):  # the reused one, a fresh one
                try:
                    plan = make_plan(graph, name, budget)
                    got.append((plan.schedule.ops.tolist(), plan.schedule.nodes.tolist(), plan.metrics.peak_bytes))
                except NoPlanError as exc:
                    got.append(exc.min_budget)
            assert got[0] == got[1], (name, ratio)


# ---------------------------------------------------------------------- ladder cost caps
def _spy_runs(log: list[dict]):
    """A stand-in for ``recursive_schedule`` that records each run's options, its cap and
    its outcome (the simulator's metrics, or why it stopped)."""
    import remat_cli.strategies.treewidth as T

    real = T.recursive_schedule

    def spy(graph, sep, limit=None, **kw):
        entry = {"limit": limit, "cache": kw.get("cache", False), "eager": kw.get("eager", False)}
        entry["cap"] = kw.get("max_cost", float("inf"))
        log.append(entry)
        try:
            schedule, within = real(graph, sep, limit, **kw)
        except RecursionStopped as exc:
            entry["stopped"] = str(exc)
            raise
        entry["metrics"] = simulate(graph, schedule).metrics
        return schedule, within

    return spy


def _uncapped(graph, sep, limit=None, **kw):
    """``recursive_schedule`` with every cost cap lifted: each run goes to its end."""
    import remat_cli.strategies.treewidth as T

    kw.pop("max_cost", None)
    return T._real_recursive_schedule(graph, sep, limit, **kw)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 1000), st.sampled_from([0.3, 0.5, 0.7]))
def test_ladder_cost_caps_change_no_plan(g: Graph, seed: int, ratio: float) -> None:
    """Every ladder run is capped at the best fitting cost so far, the prefetch runs too
    (whose fit decides whether the cache-only run is a candidate): the plan, with and
    without the memory-limit pass, is step for step the plan of runs that all go to their
    end (a fresh copy of the graph each time: no runs kept from the other)."""
    import remat_cli.strategies.treewidth as T

    def build() -> Graph:
        return _weighted(g, seed) if seed % 2 else g.with_arrays(name=g.name + "-copy")

    budget = max(g.lb, int(ratio * store_all_peak(g)))
    for name in STRATS:
        for memlimit in (False, True):
            got = []
            for capped in (True, False):
                if not capped:
                    T._real_recursive_schedule = T.recursive_schedule
                    T.recursive_schedule = _uncapped
                try:
                    graph = build()
                    res = get_strategy(name).run(graph, max(graph.lb, int(ratio * store_all_peak(graph))), {"memlimit": memlimit})
                    got.append((res.schedule.ops.tolist(), res.schedule.nodes.tolist()))
                except NoPlanError as exc:
                    got.append(exc.min_budget)
                finally:
                    if not capped:
                        T.recursive_schedule = T._real_recursive_schedule
                        del T._real_recursive_schedule
            assert got[0] == got[1], (name, memlimit, budget)


def test_ladder_prefetch_runs_are_capped(monkeypatch) -> None:
    """Once a fitting plan exists, no ladder run goes past its cost: a prefetch run is
    redone uncapped (to learn whether it fits its point) only right after a cache-only
    run at the same point finished under its cap (old code ran the first prefetch run of
    every point uncapped)."""
    import remat_cli.strategies.treewidth as T

    rng = np.random.default_rng(3)
    fwd = G.skip_chain(60, skip=3, mem=rng.integers(1, 9, 60), cost=rng.integers(1, 9, 60).astype(float))
    g = checkmate_training_graph(fwd)
    budget = int(0.5 * store_all_peak(g))
    log: list[dict] = []
    monkeypatch.setattr(T, "recursive_schedule", _spy_runs(log))
    for name in STRATS:
        log.clear()
        plan = make_plan(g.with_arrays(name=f"copy-{name}"), name, budget)
        assert plan.metrics.peak_bytes <= budget
        first = log[0]  # the budgeted recursion at the budget, uncached
        assert not first["cache"] and first["metrics"].peak_bytes <= budget - g.fixed_mem
        ladder = [e for e in log if e["cache"]]
        assert len(ladder) >= 4 and any(e.get("stopped") == "cannot win" for e in ladder)
        for i, e in enumerate(ladder):
            if e["cap"] == float("inf"):
                j = i - 1  # past the other prefetch runs redone at this point
                while j >= 0 and ladder[j]["eager"] and ladder[j]["cap"] == float("inf") and ladder[j]["limit"] == e["limit"]:
                    j -= 1
                prev = ladder[j] if j >= 0 else None
                assert prev is not None and not prev["eager"] and prev["limit"] == e["limit"] and "metrics" in prev, (name, i)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 1000), st.floats(0.2, 0.9), st.floats(0.0, 1.0), st.booleans())
def test_cost_cap_stops_exactly_the_runs_that_cost_more(g: Graph, seed: int, ratio: float, where: float, eager: bool) -> None:
    """A capped budgeted run (recomputations charged when a value still to be read is
    freed) finishes exactly when its uncapped run costs at most the cap, with the same
    schedule step for step."""
    g = _weighted(g, seed)
    sep = _sep_trees(g)["treewidth"]
    limit = max(0, int(ratio * store_all_peak(g)) - g.fixed_mem)
    kw = {"cache": True, "eager": eager, "evict": "cheap" if seed % 3 else "recent"}
    try:
        full, _ = recursive_schedule(g, sep, limit, **kw)
    except RecursionStopped:
        return
    cost = require_valid(g, full).cost
    base = float(g.cost[g.needed].sum())
    cap = base + where * (cost - base) * 1.2
    try:
        capped, _ = recursive_schedule(g, sep, limit, max_cost=cap, **kw)
    except RecursionStopped as exc:
        assert str(exc) == "cannot win" and cost > cap, (cost, cap)
        return
    assert cost <= cap * (1 + 1e-12)
    assert capped.ops.tolist() == full.ops.tolist() and capped.nodes.tolist() == full.nodes.tolist()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 1000), st.floats(0.05, 1.0), st.sampled_from(STRATS))
def test_cacheless_run_stops_over_its_limit_exactly_when_it_would_not_fit(g: Graph, seed: int, ratio: float, name: str) -> None:
    """A cacheless budgeted run with ``stop_over`` stops ("over the limit") exactly when
    the same run without it peaks above the budget (its own count of resident bytes is
    the simulator's), and otherwise gives the same schedule step for step."""
    from remat_cli.strategies.treewidth import OVER_LIMIT

    g = _weighted(g, seed)
    sep = _sep_trees(g)[name]
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    limit = budget - g.fixed_mem
    full, _ = recursive_schedule(g, sep, limit, cache=False)
    peak = require_valid(g, full).peak_bytes
    try:
        stopped, _ = recursive_schedule(g, sep, limit, cache=False, stop_over=True)
    except RecursionStopped as exc:
        assert str(exc) == OVER_LIMIT and peak > budget, (peak, budget)
        return
    assert peak <= budget
    assert stopped.ops.tolist() == full.ops.tolist() and stopped.nodes.tolist() == full.nodes.tolist()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 1000), st.sampled_from(STRATS))
def test_walks_and_plans_kept_across_runs_change_no_schedule(g: Graph, seed: int, name: str) -> None:
    """Budgeted runs that share one memo (the walks of sub-problems, the plain plans and
    orders, as a plan's ladder runs do) give the schedules of runs without it, step for
    step, whatever ran before them; a tiny memo cap (cleared again and again) too."""
    g = _weighted(g, seed)
    sep = _sep_trees(g)[name]
    top = store_all_peak(g)
    runs = [
        (max(0, int(r * top) - g.fixed_mem), cache, eager, evict)
        for r in (0.9, 0.6, 0.4, 0.6)
        for cache, eager, evict in ((False, False, "recent"), (True, True, "recent"), (True, True, "cheap"), (True, False, "recent"))
    ]
    memo: dict = {}
    for limit, cache, eager, evict in runs:
        kw = {"cache": cache, "eager": eager, "evict": evict}
        try:
            alone, _ = recursive_schedule(g, sep, limit, **kw)
        except RecursionStopped:
            continue
        shared, _ = recursive_schedule(g, sep, limit, memo=memo, **kw)
        assert shared.ops.tolist() == alone.ops.tolist() and shared.nodes.tolist() == alone.nodes.tolist()
    assert any(isinstance(k, tuple) and k[0] == "walk" for k in memo)


def test_cost_cap_charges_a_recomputation_at_the_free(monkeypatch) -> None:
    """A run capped at the base cost stops as soon as it frees a value that a needed node
    still to be computed reads (that value must be computed again), before the first
    recomputation (old code stopped only at the recomputation itself)."""
    import remat_cli.strategies.treewidth as T

    g = checkmate_training_graph(G.chain(40))
    sep = _sep_trees(g)["treewidth"]
    limit = int(0.3 * store_all_peak(g)) - g.fixed_mem
    full, _ = recursive_schedule(g, sep, limit, cache=True, eager=True)
    seen = np.zeros(g.n, dtype=bool)
    first_again = None
    for k, (op, v) in enumerate(zip(full.ops.tolist(), full.nodes.tolist())):
        if op == 0:  # COMPUTE
            if seen[v]:
                first_again = k
                break
            seen[v] = True
    assert first_again is not None  # the run recomputes
    runs: list = []
    real_init = T._Recursion.__init__

    def spy_init(self, *a, **kw):
        real_init(self, *a, **kw)
        runs.append(self)

    monkeypatch.setattr(T._Recursion, "__init__", spy_init)
    with pytest.raises(RecursionStopped, match="cannot win"):
        recursive_schedule(g, sep, limit, cache=True, eager=True, max_cost=float(g.cost[g.needed].sum()))
    stopped_at = len(runs[0].ops)
    assert stopped_at < first_again and runs[0].ops[-1] == 1  # it stopped at a free


# ---------------------------------------------------------------------- second process
def _plans(g: Graph, budget: int) -> list:
    out = []
    for name in STRATS:
        try:
            plan = make_plan(g.with_arrays(name=g.name + "-fresh"), name, budget)
            out.append((plan.schedule.ops.tolist(), plan.schedule.nodes.tolist(), plan.metrics.peak_bytes, plan.info["mode"]))
        except NoPlanError as exc:
            out.append(exc.min_budget)
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 1000), st.sampled_from([0.3, 0.5, 0.8]))
def test_bare_pass_in_a_second_process_changes_no_plan(g: Graph, seed: int, ratio: float) -> None:
    """The memory-limit pass over the bare run made in a forked second process (every
    graph here: the size threshold lowered to 0) gives the plan made in one process."""
    import remat_cli.strategies.treewidth as T

    g = _weighted(g, seed)
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    saved = T.PARALLEL_NEEDED
    try:
        T.PARALLEL_NEEDED = 0
        forked = _plans(g, budget)
        T.PARALLEL_NEEDED = 10**12
        alone = _plans(g, budget)
    finally:
        T.PARALLEL_NEEDED = saved
    assert forked == alone


def test_bare_pass_runs_in_a_second_process(monkeypatch, tmp_path) -> None:
    """Standalone, the bare run's clean-up and memory-limit pass run in a forked process
    (the pid that ran it is not this one) and the plan is the one-process plan; if that
    process fails, this one makes the pass itself (same plan)."""
    import os

    import remat_cli.strategies.treewidth as T

    g = checkmate_training_graph(G.skip_chain(40, skip=3))
    budget = int(0.4 * store_all_peak(g))
    monkeypatch.setattr(T, "PARALLEL_NEEDED", 10**12)
    alone = _plans(g, budget)
    monkeypatch.setattr(T, "PARALLEL_NEEDED", 0)
    pids = tmp_path / "pids"
    real = T._bare_pass_arrays

    def spy(*a, **kw):
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(*a, **kw)

    monkeypatch.setattr(T, "_bare_pass_arrays", spy)
    assert _plans(g, budget) == alone
    ran = pids.read_text().split()
    assert len(ran) == len(STRATS) and str(os.getpid()) not in ran

    def broken(*a, **kw):
        raise RuntimeError("the second process fails")

    monkeypatch.setattr(T, "_bare_pass_arrays", broken)
    assert _plans(g, budget) == alone


def test_second_process_runs_lower_ladder_points(monkeypatch, tmp_path) -> None:
    """The second process, once it has sent the bare run's pass, runs the ladder's lower
    points (lowest first) and this process takes their outcomes as kept runs: here it
    waits for one of them before its own ladder runs; the plan is the one-process plan."""
    import os
    import time

    import remat_cli.strategies.treewidth as T

    rng = np.random.default_rng(5)
    fwd = G.skip_chain(50, skip=3, mem=rng.integers(1, 9, 50), cost=rng.integers(1, 9, 50).astype(float))
    g = checkmate_training_graph(fwd)
    budget = int(0.6 * store_all_peak(g))
    monkeypatch.setattr(T, "PARALLEL_NEEDED", 10**12)
    alone = _plans(g, budget)
    monkeypatch.setattr(T, "PARALLEL_NEEDED", 0)
    log = tmp_path / "runs"
    log.write_text("")
    me = os.getpid()
    real = T.recursive_schedule
    waits: list[int] = []

    def spy(graph, sep, limit=None, **kw):
        if kw.get("cache") and os.getpid() != me:
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")
        elif kw.get("cache") and not waits:  # once, for at most 20 s
            waits.append(1)
            for _ in range(2000):
                if log.read_text():
                    break
                time.sleep(0.01)
        return real(graph, sep, limit, **kw)

    monkeypatch.setattr(T, "recursive_schedule", spy)
    assert _plans(g, budget) == alone
    assert log.read_text().split() and str(me) not in log.read_text().split()
