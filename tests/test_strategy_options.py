"""Typed strategy options, the run context, and what the registry decides (issue 12).

Each strategy declares its options as a frozen dataclass; what a run shares (time limit,
deadline, progress, memo) is one RunContext; every command that plans takes --time-limit
the same way; exact's incumbents come from the registry; the memory-greedy order is one
function; store-all is built once per graph.
"""

from __future__ import annotations

import dataclasses
import heapq
import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as gen
from remat_cli.loaders import remat_json
from remat_cli.algorithms.orders import memory_greedy_order
from remat_cli.cli import cli
from remat_cli.errors import InputError, NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import STRATEGIES, RunContext, Strategy, StrategyResult
from remat_cli.strategies import store_all as store_all_mod
from remat_cli.training import checkmate_training_graph


def _training(n: int = 8, seed: int = 0) -> Graph:
    return checkmate_training_graph(gen.random_dag(n, p=0.3, seed=seed, max_size=5))


# ------------------------------------------------------------------ typed options
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_declares_frozen_options_with_defaults(name: str) -> None:
    strat = STRATEGIES[name]
    assert dataclasses.is_dataclass(strat.options) and strat.options.__dataclass_params__.frozen
    opts = strat.make_options()  # every field has a default: today's behaviour
    assert isinstance(opts, strat.options) and strat.make_options(opts) is opts
    for f in dataclasses.fields(opts):
        assert strat.make_options({f.name: getattr(opts, f.name)}) == opts


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_an_unknown_option_is_bad_usage_naming_the_strategy(name: str) -> None:
    g = _training()
    with pytest.raises(InputError) as err:
        make_plan(g, name, None, {"no_such_option": 1})
    assert repr(name) in err.value.message and "'no_such_option'" in err.value.message


def test_exact_max_nodes_is_now_milp_nodes() -> None:
    g = _training()
    budget = max(g.lb, int(0.7 * store_all_peak(g)))
    with pytest.raises(InputError, match="'exact' has no option 'max_nodes'"):
        make_plan(g, "exact", budget, {"max_nodes": 1})
    with pytest.raises(NoPlanError, match="option milp_nodes"):
        make_plan(g, "exact", budget, {"milp_nodes": 1})


def test_options_change_what_a_strategy_does() -> None:
    # the typed field is read: chain-dp's borrowed checkpoints off cost more on this chain
    fwd = gen.chain(4, mem=[1, 3, 3, 4], cost=[6.0, 5.0, 1.0, 6.0])
    graph = checkmate_training_graph(fwd)
    chain_dp = STRATEGIES["chain-dp"]
    with_borrow = make_plan(graph, "chain-dp", 14, chain_dp.options())
    without = make_plan(graph, "chain-dp", 14, chain_dp.options(borrow_segments=0))
    assert with_borrow.metrics.cost == 77 < without.metrics.cost


def test_run_wide_keys_of_a_mapping_go_to_the_context() -> None:
    seen: list[RunContext] = []
    probe = _probe_strategy(seen)
    g = _training()
    make_plan(g, probe, None, {"time_limit": 3.0, "parallel": False})
    ctx = seen[-1]
    assert ctx.time_limit == 3.0 and ctx.parallel is False and ctx.deadline is not None  # the planner sets it
    make_plan(g, probe, None, context=RunContext(time_limit=4.0))
    assert seen[-1].time_limit == 4.0


def _probe_strategy(seen: list[RunContext], *, name: str = "probe", need_limit: float | None = None, incumbent: int = 0) -> Strategy:
    """A test strategy returning the store-all plan; it records the context it got, and
    declines (NoPlanError) unless the run's time limit is ``need_limit`` when that is set."""

    def solve(graph: Graph, budget: int | None, options: object, context: RunContext) -> StrategyResult:
        seen.append(context)
        if need_limit is not None and context.time_limit != need_limit:
            raise NoPlanError(f"{name}: run without --time-limit {need_limit:g} (got {context.time_limit})")
        return StrategyResult(store_all_mod.store_all_plan(graph).schedule)

    return Strategy(name=name, summary="test only", solve=solve, uses_budget=True, incumbent=incumbent)


# ------------------------------------------------------------------ --time-limit everywhere
@pytest.fixture
def limited(tmp_path, monkeypatch):
    """A graph file and a registered strategy that fits only under --time-limit 7."""
    seen: list[RunContext] = []
    strat = _probe_strategy(seen, name="needs-limit", need_limit=7.0)
    monkeypatch.setitem(STRATEGIES, strat.name, strat)
    path = tmp_path / "g.json"
    path.write_text(remat_json.dumps(_training()))
    return path


def test_plan_passes_time_limit(limited) -> None:
    run = CliRunner().invoke
    assert run(cli, ["plan", str(limited), "-s", "needs-limit", "--time-limit", "7"]).exit_code == 0
    assert run(cli, ["plan", str(limited), "-s", "needs-limit"]).exit_code == 1  # default 60


def test_tradeoff_passes_time_limit(limited) -> None:
    args = ["tradeoff", str(limited), "-S", "needs-limit", "-n", "2", "--format", "json"]
    doc = json.loads(CliRunner().invoke(cli, args + ["--time-limit", "7"]).output)
    assert doc["points"][0]["budget_ratio"] == 1.0 and doc["points"][0]["fits"]  # store-all's peak
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0 and not any(p["fits"] for p in json.loads(res.output)["points"])


@pytest.mark.parametrize("command", ["batch", "check"])
def test_batch_and_check_pass_time_limit(limited, monkeypatch, command: str) -> None:
    # their workers are separate processes (a test strategy is not registered there): check
    # that each file's task carries the limit; make_plan reads it as RunContext.time_limit
    import remat_cli.batch.run as batch_run
    import remat_cli.check as check_mod

    module = batch_run if command == "batch" else check_mod
    given: list[object] = []
    real = module.make_tasks

    def recording(*args, **kw):
        given.append(kw.get("plan_options"))
        return real(*args, **kw)

    monkeypatch.setattr(module, "make_tasks", recording)
    args = [command, str(limited), "-s", "store-all", "-b", "1x", "--jobs", "1", "--format", "json"]
    assert CliRunner().invoke(cli, args + ["--time-limit", "7"]).exit_code == 0
    assert CliRunner().invoke(cli, args).exit_code == 0
    assert given == [{"time_limit": 7.0}, None]  # none given: the resume fingerprint stays


# ------------------------------------------------------------------ the registry decides
def test_exact_takes_its_incumbents_from_the_registry(monkeypatch) -> None:
    registered = sorted((s for s in STRATEGIES.values() if s.incumbent), key=lambda s: s.incumbent)
    assert [s.name for s in registered] == ["chain-dp", "dtr", "greedy", "chen-greedy"]
    seen: list[RunContext] = []
    extra = _probe_strategy(seen, name="extra-incumbent", incumbent=99)
    monkeypatch.setitem(STRATEGIES, extra.name, extra)
    g = _training(7, seed=3)
    budget = max(g.lb, int(0.8 * store_all_peak(g)))
    if budget >= store_all_peak(g):
        pytest.skip("store-all fits: exact asks no incumbent")
    plan = make_plan(g, "exact", budget, {"time_limit": 30})
    assert seen, "a strategy registered with incumbent > 0 seeds exact"
    assert simulate(g, plan.schedule).metrics.peak_bytes <= budget


# ------------------------------------------------------------------ one memory-greedy order
def _reference_store_all_order(graph: Graph) -> list[int]:
    """store-all's memory-greedy order as it was written before it was shared."""
    needed = graph.needed.tolist()
    preds, succs, mem = graph.pred_lists, graph.succ_lists, graph.mem.tolist()
    rank = graph.topo_rank.tolist()
    remaining = [sum(1 for w in succs[v] if needed[w]) if needed[v] else 0 for v in range(graph.n)]
    missing = [len(preds[v]) for v in range(graph.n)]
    done = [False] * graph.n

    def delta(v: int) -> int:
        return mem[v] - sum(mem[u] for u in preds[v] if remaining[u] == 1)

    current = [0] * graph.n
    heap = []
    for v in graph.needed_nodes.tolist():
        if missing[v] == 0:
            current[v] = delta(v)
            heap.append((current[v], rank[v], v))
    heapq.heapify(heap)
    order = []
    while heap:
        d, _, v = heapq.heappop(heap)
        if done[v] or d != current[v]:
            continue
        done[v] = True
        order.append(v)
        for u in preds[v]:
            remaining[u] -= 1
            if remaining[u] == 1:
                w = next(x for x in succs[u] if needed[x] and not done[x])
                if missing[w] == 0:
                    current[w] -= mem[u]
                    heapq.heappush(heap, (current[w], rank[w], w))
        for w in succs[v]:
            if needed[w]:
                missing[w] -= 1
                if missing[w] == 0:
                    current[w] = delta(w)
                    heapq.heappush(heap, (current[w], rank[w], w))
    return order


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 30), p=st.floats(0.05, 0.6), seed=st.integers(0, 10_000), training=st.booleans())
def test_the_shared_memory_greedy_order_is_store_alls(n: int, p: float, seed: int, training: bool) -> None:
    g = gen.random_dag(n, p=p, seed=seed, max_size=9)
    if training:
        g = checkmate_training_graph(g)
    order = store_all_mod.memory_greedy_order(g)
    assert order == _reference_store_all_order(g)
    pos = {v: i for i, v in enumerate(order)}
    assert sorted(order) == sorted(g.needed_nodes.tolist())
    assert all(pos[u] < pos[v] for v in order for u in g.pred_lists[v])
    # a sub-problem with a kept value: that value never counts as freed
    need = set(order[len(order) // 2 :])
    keep = set(order[-1:])
    sub = memory_greedy_order(need, g.pred_lists, g.succ_lists, g.mem.tolist(), g.topo_rank.tolist(), lambda u: u not in keep)
    sub_pos = {v: i for i, v in enumerate(sub)}
    assert set(sub) == need
    assert all(sub_pos[u] < sub_pos[v] for v in sub for u in g.pred_lists[v] if u in need)


# ------------------------------------------------------------------ store-all once per graph
def test_store_all_is_built_once_per_graph_for_auto_facts_and_summary(monkeypatch) -> None:
    from remat_cli.report.facts import plan_facts
    from remat_cli.summary import summarize

    calls: list[int] = []
    real = store_all_mod.greedy_order

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(store_all_mod, "greedy_order", counting)
    g = _training(12, seed=5)
    plan = make_plan(g, "auto", max(g.lb, int(0.6 * store_all_peak(g))), context=RunContext(parallel=False))
    plan_facts(plan)
    summarize(g)
    make_plan(g, "store-all")
    assert len(calls) == 1
