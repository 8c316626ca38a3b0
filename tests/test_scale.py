"""Bounded time on bounded input (issue 14 items 1–2, issue 11 "hangs").

What is checked here is correctness under the limits that keep large or dense graphs
bounded, never time: a capped elimination is still a valid tree decomposition; the
interval form of a path decomposition owns each node where its bags would; a recursion
that passes its work limit or deadline stops and the strategy still returns a valid plan
within its budget (or says none fits); ``auto`` shares its work and honours its deadline;
and start-up imports nothing heavy. Every schedule goes through the simulator.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.algorithms import decompose as D
from remat_cli.strategies import treewidth as T
from remat_cli.training import checkmate_training_graph
from remat_cli.units import say


def dense_dag(n: int) -> Graph:
    """Every node reads every earlier node (the shape that hung `remat info` and `plan`)."""
    return G.from_edges(n, [(u, v) for v in range(n) for u in range(v)], name=f"dense{n}")


def _checked(graph: Graph, plan_schedule, budget: int | None) -> None:
    result = simulate(graph, plan_schedule)
    assert result.metrics is not None, result.error
    if budget is not None:
        assert result.metrics.peak_bytes <= budget


@settings(max_examples=25)
@given(
    n=st.integers(6, 40),
    p=st.floats(0.1, 0.9),
    seed=st.integers(0, 99),
    cap=st.integers(0, 6),
    method=st.sampled_from(["min-degree", "min-fill"]),
)
def test_capped_elimination_is_a_valid_decomposition(n, p, seed, cap, method):
    g = G.random_dag(n, p=p, seed=seed)
    nodes, adj = D.skeleton(g)
    td = D.elimination_decomposition([set(a) for a in adj], method, max_degree=cap)
    mapping = nodes.tolist()
    bags = [[mapping[x] for x in bag] for bag in td.bags]
    assert D.validate_decomposition(g, bags, td.tree_edges()) == []
    assert td.width == max(len(b) for b in bags) - 1
    if td.core:  # the nodes left at the cap form one root bag
        assert len(td.bags[-1]) == td.core and td.parent[-1] == -1


def test_dense_graphs_stop_eliminating_at_the_cap(monkeypatch):
    """A dense DAG has treewidth n−1: elimination stops at the cap and the rest is one bag,
    so the skeleton never grows past its size; the strategies still plan it."""
    monkeypatch.setattr(D, "WIDTH_CAP", 5)
    monkeypatch.setattr(D, "ELIMINATION_WORK", 0)
    g = checkmate_training_graph(dense_dag(30))
    td = D.tree_decomposition(g)
    assert td.core > 0 and td.width == max(len(b) for b in td.bags) - 1
    assert D.validate_decomposition(g, td.bags, td.tree_edges()) == []
    sa = store_all_peak(g)
    for name in ("treewidth", "pathwidth", "auto"):
        for budget in (None, int(0.8 * sa)):
            try:
                plan = make_plan(g, name, budget)
            except NoPlanError:
                assert budget is not None
                continue
            _checked(g, plan.schedule, budget)


@settings(max_examples=25)
@given(kind=st.sampled_from(["dag", "grid", "skip"]), n=st.integers(4, 30), seed=st.integers(0, 40))
def test_path_owners_match_the_highest_bag(kind, n, seed):
    """The interval form owns each node at the split point of least depth among its bags,
    exactly where the explicit bags put it."""
    g = {"dag": lambda: G.random_dag(n, p=0.3, seed=seed), "grid": lambda: G.grid(3, n), "skip": lambda: G.skip_chain(n, 3)}[kind]()
    g = checkmate_training_graph(g) if seed % 2 else g
    pd = D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",)))
    assert D.validate_decomposition(g, pd.bags, pd.tree_edges()) == []
    assert pd.width == max(len(b) for b in pd.bags) - 1
    fast = D.path_separator_tree(g, pd)
    parent = [-1] * pd.size
    stack = [(0, pd.size, -1)]
    while stack:
        lo, hi, par = stack.pop()
        if lo < hi:
            mid = (lo + hi) // 2
            parent[mid] = par
            stack += [(lo, mid, mid), (mid + 1, hi, mid)]
    slow = D._finish_separator_tree(g, pd.bags, parent, pd.width, 0.0)
    assert fast.owned == slow.owned and fast.depth == slow.depth
    assert fast.children == slow.children


def test_recursion_stops_at_its_work_limit():
    g = checkmate_training_graph(G.grid(3, 8))
    sep = D.separator_tree(g, D.tree_decomposition(g))
    with pytest.raises(T.RecursionStopped):
        T.recursive_schedule(g, sep, None, max_work=5)
    with pytest.raises(T.RecursionStopped):
        T.recursive_schedule(g, sep, None, max_cost=1.0)
    schedule, _ = T.recursive_schedule(g, sep, None)  # the default limit lets it finish
    _checked(g, schedule, None)


@pytest.mark.parametrize("name", ["treewidth", "pathwidth"])
def test_a_stopped_recursion_still_gives_a_valid_plan(monkeypatch, name):
    """Past the work limit the bare recursion falls back to store-all and says so; with a
    budget every plan returned fits it, else NoPlanError names a budget that works."""
    monkeypatch.setattr(T, "WORK_FLOOR", 10)
    monkeypatch.setattr(T, "WORK_PER_NODE", 0)
    g = checkmate_training_graph(dense_dag(12))
    plan = make_plan(g, name, None)
    _checked(g, plan.schedule, None)
    assert "stopped" in say(plan.info["mode"])
    sa = store_all_peak(g)
    for budget in (sa, int(0.7 * sa)):
        try:
            plan = make_plan(g, name, budget)
        except NoPlanError as exc:
            assert exc.min_budget is not None and exc.min_budget > budget
            make_plan(g, "store-all", exc.min_budget)  # the budget it names does work
            continue
        _checked(g, plan.schedule, budget)


def test_past_the_deadline_strategies_return_what_they_have():
    g = checkmate_training_graph(G.skip_chain(40, skip=3))
    sa = store_all_peak(g)
    past = {"deadline": time.perf_counter() - 1.0}
    for name in ("treewidth", "pathwidth", "auto"):
        for budget in (None, int(0.6 * sa)):
            try:
                plan = make_plan(g, name, budget, past)
            except NoPlanError:
                continue
            _checked(g, plan.schedule, budget)
    plan = make_plan(g, "auto", int(0.6 * sa), past)
    assert "skipped (time limit)" in say(plan.info["tried"])


def test_auto_shares_decompositions_and_stops_at_the_base_cost():
    g = checkmate_training_graph(G.skip_chain(30, skip=3))
    shared: dict = {}
    sa = store_all_peak(g)
    plan = make_plan(g, "auto", int(0.7 * sa), {"shared": shared})
    _checked(g, plan.schedule, int(0.7 * sa))
    assert {"skeleton", "td min-degree", "pd"} <= set(shared)
    # store-all fits at 1x: no other strategy is run, none could be cheaper
    plan = make_plan(g, "auto", sa)
    assert plan.metrics.cost == g.base_cost and say(plan.info["tried"]).count("skipped") == 6  # min-memory too


def test_progress_is_reported():
    g = checkmate_training_graph(G.skip_chain(30, skip=3))
    seen: list[str] = []
    make_plan(g, "auto", int(0.6 * store_all_peak(g)), {"progress": lambda done, total, label: seen.append(say(label))})
    assert any(s.startswith("auto: treewidth") for s in seen) and any(s.startswith("treewidth:") for s in seen)


def test_start_up_imports_nothing_heavy():
    code = "import sys, remat_cli.cli; print(sorted(m for m in ('numpy', 'rich', 'remat_cli.strategies', 'remat_cli.graph') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    out = subprocess.run([sys.executable, "-m", "remat_cli", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == "remat, version 0.1.0\n"
    out = subprocess.run([sys.executable, "-m", "remat_cli", "--help"], capture_output=True, text=True, check=True)
    assert all(cmd in out.stdout for cmd in ("info", "plan", "tradeoff", "batch", "check", "validate", "convert", "strategies"))


def test_lazy_package_keeps_its_public_names():
    import remat_cli
    import remat_cli.simulate  # noqa: F401  (the submodule must not shadow the function)
    from remat_cli import batch
    from remat_cli.cli import DEFAULT_STRATEGY

    assert callable(remat_cli.simulate) and remat_cli.simulate.__name__ == "simulate"
    assert remat_cli.make_plan is make_plan and remat_cli.Graph is Graph
    assert DEFAULT_STRATEGY == batch.DEFAULT_STRATEGY
    with pytest.raises(AttributeError):
        remat_cli.no_such_name  # noqa: B018


def test_auto_in_two_processes_picks_the_same_plan(monkeypatch):
    """chain-dp in a second process changes where it runs, not which plan wins."""
    from remat_cli.strategies import auto

    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    g = checkmate_training_graph(G.skip_chain(20, skip=3))
    budget = int(0.6 * store_all_peak(g))
    one = make_plan(g, "auto", budget, {"parallel": False})
    two = make_plan(g, "auto", budget, {"parallel": True})
    _checked(g, two.schedule, budget)
    assert one.info["winner"] == two.info["winner"] and one.info["tried"] == two.info["tried"]
    assert one.schedule.ops.tolist() == two.schedule.ops.tolist()
    assert one.schedule.nodes.tolist() == two.schedule.nodes.tolist()
    # chain-dp, treewidth and pathwidth are a queue the two processes share: each runs
    # exactly once, in one of them (which one depends on timing), the rest here
    seen: list[str] = []
    make_plan(g, "auto", budget, {"parallel": True, "progress": lambda done, total, label: seen.append(say(label))})
    for name in ("chain-dp", "treewidth", "pathwidth"):
        runs = [s for s in seen if s in (f"auto: {name}", f"auto: {name} (second process)")]
        assert len(runs) == 1, (name, seen)
        if runs[0].endswith("(second process)"):
            assert not any(s.startswith(f"{name}:") for s in seen)  # its own progress stayed there
    assert "auto: greedy" in seen and "auto: dtr" in seen


@pytest.mark.parametrize("capped", [False, True])
def test_info_on_a_dense_dag_reports_its_exact_width(monkeypatch, capped):
    """`remat info` on a DAG whose every node reads all earlier ones (it used to hang):
    its skeleton is complete, so treewidth = pathwidth = n − 1, and both bounds say so."""
    from remat_cli.summary import summarize

    if capped:
        monkeypatch.setattr(D, "WIDTH_CAP", 5)
        monkeypatch.setattr(D, "ELIMINATION_WORK", 0)
    g = dense_dag(70)
    extra = summarize(g, decompose=True).extra
    assert extra["treewidth upper bound"] == extra["pathwidth upper bound"] == g.n - 1
