"""The clean-up of the bare run sent back (r18-end: where the second process's memory-limit
pass over the bare run does not fit the budget, it sends back the clean-up it made for that
pass, with its metrics, and a plan that fails names that peak without making the clean-up
and its measure again here) changes no plan: each treewidth and pathwidth plan, and after
each failure the fit probes the search for the smallest budget makes (at the budget the
failure names and one byte below), equals the one r17's driver makes
(``tests/end_reference.py``, a frozen copy over the same recursion and second process),
with the second process on (``PARALLEL_NEEDED`` lowered so that every graph here forks): the
same steps, info (timings aside), message word for word and smallest budget. Plans follow
one another on the same graph, so the bare run and its clean-up kept from one plan are
reused by the next; ``slow`` holds the second process's pass back, so that this process
waits for it. Every plan is replayed by the simulator. Also: a plan's ``peak (values)``
counted from its steps equals r17's replay of it on a unit-size copy of the graph."""

from __future__ import annotations

import os

import end_reference
import pytest
from graphgen import tied_graph, training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fork_overlap_same import _sep, hold_back_bare_pass
from test_memlimit_same import _random_schedule

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import evict, treewidth
from remat_cli.strategies.base import RunContext

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _graph(kind: str, n: int, seed: int) -> Graph:
    return training_graph(kind[6:], n, seed) if kind.startswith("train-") else tied_graph(kind, n, seed)


def _outcomes(g: Graph, tree: str, budgets: list[int], plan) -> list:
    """Each budget's plan in turn on one graph; after a failure that names a smallest
    budget, fit probes there and one byte below (as the search probes them), as plain data."""
    sep = _sep(g, tree)
    out = []
    todo = [(b, False) for b in budgets]
    while todo:
        budget, fit_only = todo.pop(0)
        try:
            result = plan(
                g, sep, budget, treewidth.DecompositionOptions(), RunContext(parallel=True),
                kind="tree (test)", decompose_seconds=0.0, fit_only=fit_only,
            )  # fmt: skip
        except NoPlanError as e:
            out.append(("no plan", budget, fit_only, str(e), e.min_budget))
            if not fit_only and e.min_budget is not None:
                todo[:0] = [(e.min_budget, True), (e.min_budget - 1, True)]
            continue
        sim = simulate(g, result.schedule)
        assert sim.valid, sim.error
        assert budget is None or sim.metrics.peak_bytes <= budget
        info = {k: str(v) for k, v in result.info.items() if "second" not in k}
        out.append((budget, fit_only, result.schedule.ops.tolist(), result.schedule.nodes.tolist(), sim.metrics, info))
    return out


def _both(kind: str, n: int, seed: int, tree: str, ratios: list[float], slow: bool) -> tuple[int, int]:
    """Both drivers' outcomes on one graph (asserted equal); how many clean-ups of the bare
    run each made in this process (for its message or its pass)."""
    g = _graph(kind, n, seed)
    peak = store_all_peak(g)
    budgets = [max(0, int(r * peak)) for r in ratios] + [g.lb]
    here = os.getpid()
    made = [0]
    real_cleanup = evict.cleanup

    def counted(*args, **kw):
        import inspect

        made[0] += os.getpid() == here and any(f.function == "cleaned_bare" for f in inspect.stack()[1:3])
        return real_cleanup(*args, **kw)

    counts = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(treewidth, "PARALLEL_NEEDED", 1)
        mp.setattr(evict, "cleanup", counted)
        if slow:
            hold_back_bare_pass(mp)
        outcomes = []
        for plan in (end_reference.plan_over_separator_tree, treewidth.plan_over_separator_tree):
            made[0] = 0
            outcomes.append(_outcomes(_graph(kind, n, seed), tree, budgets, plan))
            counts.append(made[0])
    assert outcomes[1] == outcomes[0]
    return counts[0], counts[1]


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag", "train-grid", "train-skip", "train-chain", "train-dag"]),
    st.integers(8, 40),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.lists(st.sampled_from([0.1, 0.3, 0.5, 0.7, 0.9, 1.1]), min_size=1, max_size=3),
    st.booleans(),
)
def test_the_clean_up_sent_back_changes_no_plan(kind: str, n: int, seed: int, tree: str, ratios: list[float], slow: bool) -> None:
    _both(kind, n, seed, tree, ratios, slow)


def test_the_clean_up_comes_from_the_second_process() -> None:
    """Not vacuous: on graphs where low budgets fail, this process makes fewer clean-ups of
    the bare run than r17's driver (the second process's is used), never more."""
    fewer = 0
    for kind in ("train-grid", "train-skip", "train-chain", "dag", "grid"):
        for seed in range(3):
            ref, new = _both(kind, 30, seed, "path" if seed % 2 else "tree", [0.1, 0.3], False)
            assert new <= ref
            fewer += new < ref
    assert fewer >= 5, fewer


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag", "train-grid", "train-skip", "train-chain", "train-dag"]),
    st.integers(6, 60),
    st.integers(0, 10_000),
    st.floats(0.0, 0.6),
)
def test_the_unit_peak_counted_is_the_simulators(kind: str, n: int, seed: int, p_free: float) -> None:
    """``unit_peak_values`` (a running count of computes less frees) equals r17's (the
    simulator's peak on a unit-size copy of the graph) on random valid schedules with
    recomputations and early frees, on the store-all plan and on the bare recursion."""
    from remat_cli.strategies.store_all import store_all_plan

    g = _graph(kind, n, seed)
    schedules = [_random_schedule(g, seed, p_free), store_all_plan(g).schedule]
    schedules.append(treewidth.recursive_schedule(g, _sep(g, "tree" if seed % 2 else "path"), None)[0])
    for s in schedules:
        assert simulate(g, s).valid
        assert treewidth.unit_peak_values(g, s) == end_reference.unit_peak_values(g, s)
