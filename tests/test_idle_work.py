"""The caller's idle work (``RunContext.idle``: the report's structural bound, which
``remat plan`` hands its run) is made where a run would wait on its second process, once
a plan that fits is held, and never where no plan fits: the plan is the same as without
it, the bound the report reads is the one made from scratch, and auto's second process,
which may make it instead, hands it back. Every plan goes through the simulator (the
planner replays it)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remat_cli.strategies as registry
from remat_cli.bounds import _structural_lower_bound, structural_bound_key, structural_lower_bound
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.report.facts import facts_ahead, plan_facts
from remat_cli.strategies import auto, treewidth
from remat_cli.strategies.base import IdleWork, RunContext

KEY = structural_bound_key()


def _recording(graph: Graph, log: Path) -> IdleWork:
    """The report's idle work on ``graph``, each making logged (by pid) in ``log``."""

    def make() -> object:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return structural_lower_bound(graph)

    return IdleWork(KEY, make)


def _outcome(graph: Graph, strategy: str, budget: int, idle: IdleWork | None):
    try:
        plan = make_plan(graph, strategy, budget, context=RunContext(idle=idle))
    except NoPlanError as exc:
        return ("no plan", exc.message, exc.min_budget), None
    steps = (plan.schedule.ops.tolist(), plan.schedule.nodes.tolist(), plan.metrics.cost, plan.metrics.peak_bytes)
    return (*steps, plan.info.get("winner")), plan


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["chain", "skip", "dag"]),
    n=st.integers(6, 30),
    seed=st.integers(0, 1000),
    ratio=st.floats(0.2, 1.0),
    strategy=st.sampled_from(["auto", "treewidth", "pathwidth"]),
)
def test_idle_work_changes_no_plan_and_is_made_only_where_a_plan_fits(monkeypatch, tmp_path_factory, kind, n, seed, ratio, strategy):
    """With both processes on (the thresholds lowered so every graph here forks), the plan
    or failure is the one made without idle work; where a plan fits, the bound the report
    reads equals the bound made from scratch, made at most once per process; where none
    fits, it was never made."""
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    monkeypatch.setattr(treewidth, "PARALLEL_NEEDED", 10)
    log = tmp_path_factory.mktemp("idle") / "made"
    g0 = training_graph(kind, n, seed, p=0.25)
    budget = max(g0.lb, int(ratio * store_all_peak(g0)))
    plain, _ = _outcome(training_graph(kind, n, seed, p=0.25), strategy, budget, None)
    g = training_graph(kind, n, seed, p=0.25)
    got, plan = _outcome(g, strategy, budget, _recording(g, log))
    assert got == plain
    pids = log.read_text().split() if log.exists() else []
    assert len(pids) == len(set(pids))  # at most once in each process
    if plan is None:
        assert pids == []  # no plan fits: the work would be wasted, so it is not made
        return
    fresh = _structural_lower_bound(training_graph(kind, n, seed, p=0.25), 4, 2_000, 1_000)
    assert plan_facts(plan).bound == fresh


def test_the_second_process_makes_it_and_hands_it_back(monkeypatch, tmp_path):
    """auto's first process is held in pathwidth while the second one, its queue done and a
    plan known to fit (greedy's, here), has nothing left: the second one makes the bound
    and hands it back, and this process, which reads it, does not make it again."""
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    parent = os.getpid()
    real = registry.fast_strategies

    def held(strategy):
        def solve(graph, budget, options, context):
            if context.parallel and os.getpid() == parent:
                time.sleep(1.0)
            return strategy.solve(graph, budget, options, context)

        return replace(strategy, solve=solve)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [held(s) if s.name == "pathwidth" else s for s in real()])
    monkeypatch.setattr(auto, "_PARALLEL", ("treewidth", "chain-dp", "pathwidth", "min-memory"))  # pathwidth here
    g = training_graph("skip", 30, 7, p=0.25)
    budget = int(0.8 * store_all_peak(g))
    log = tmp_path / "made"
    plan = make_plan(g, "auto", budget, context=RunContext(idle=_recording(g, log)))
    assert plan.metrics.peak_bytes <= budget
    made = [int(p) for p in log.read_text().split()]
    assert made and parent not in made  # the second process made it, and only there
    assert KEY in g.derived_items(lambda k: k == KEY)  # handed back: the report reads it
    assert plan_facts(plan).bound == _structural_lower_bound(training_graph("skip", 30, 7, p=0.25), 4, 2_000, 1_000)


@pytest.mark.parametrize("strategy", ["treewidth", "auto"])
def test_remat_plan_hands_its_run_the_report_bound(monkeypatch, strategy):
    """``facts_ahead`` is the report's own bound: made by a run, it is what plan_facts shows."""
    monkeypatch.setattr(treewidth, "PARALLEL_NEEDED", 10)
    g = training_graph("dag", 40, 3, p=0.25)
    work = facts_ahead(g)
    assert work.key == KEY
    plan = make_plan(g, strategy, int(0.9 * store_all_peak(g)), context=RunContext(idle=work))
    assert plan_facts(plan).bound == work.make() == structural_lower_bound(g)
