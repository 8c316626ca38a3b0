"""treewidth's and pathwidth's fit probes (``FIT_PROBE``: the search for the smallest budget
asks only whether a budget fits) answer as their plans do: a fit probe fits exactly where
the plan fits, with a schedule the simulator replays within the budget, and where it does
not, it fails with the plan's message and the budget it names, word for word. Budgets from
below the lower bound to the store-all peak, around the bare recursion's peak and that of
the bare recursion cleaned up (where the memory-limit pass over it starts to fit), on a
graph planned afresh and after a failed plan (its runs kept on the graph, as in the
search), with the second process on and off. The search itself (planner.py) then probes
the same budgets and gives the same answer and message with the fit probes as with whole
plans, also where the grid's step is more than one byte (so the plan's own peak is probed
last)."""

from __future__ import annotations

import numpy as np
import pytest
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import planner
from remat_cli.algorithms import decompose as D
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import pathwidth, treewidth
from remat_cli.strategies.base import RunContext
from remat_cli.strategies.evict import cleanup
from remat_cli.sweep import search_tolerance, smallest_budget

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sep(g: Graph, tree: str):
    if tree == "tree":
        return D.separator_tree(g, D.tree_decomposition(g))
    return D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))


def _plan(g: Graph, sep, budget: int | None, parallel: bool, fit_only: bool):
    """("fits", schedule) or ("no plan", message, min_budget); a fitting schedule is
    replayed by the simulator and must be within the budget."""
    try:
        result = treewidth.plan_over_separator_tree(
            g, sep, budget, treewidth.DecompositionOptions(), RunContext(parallel=parallel),
            kind="tree (test)", decompose_seconds=0.0, fit_only=fit_only,
        )  # fmt: skip
    except NoPlanError as e:
        return ("no plan", str(e), e.min_budget)
    sim = simulate(g, result.schedule)
    assert sim.valid, sim.error
    assert budget is None or sim.metrics.peak_bytes <= budget
    return ("fits", sim.metrics.peak_bytes)


def _budgets(g: Graph, sep) -> list[int]:
    """From below LB to above the store-all peak, with the bare peak and the cleaned-up
    bare peak and their neighbours."""
    peak = store_all_peak(g)
    bare = treewidth.recursive_schedule(g, sep, None)[0]
    bare_peak = simulate(g, bare).metrics.peak_bytes
    clean_peak = simulate(g, cleanup(g, bare)).metrics.peak_bytes
    out = {g.lb - 1, g.lb, int(0.3 * peak), int(0.5 * peak), int(0.7 * peak), int(0.9 * peak), peak - 1, peak}
    for b in (bare_peak, clean_peak):
        out |= {b - 1, b, b + 1}
    return sorted(b for b in out if b >= 0)


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(6, 30),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.booleans(),
    st.booleans(),
)
def test_fit_probe_fits_exactly_where_the_plan_fits(kind: str, n: int, seed: int, tree: str, parallel: bool, attempt: bool) -> None:
    """``attempt``: the graph had a failed plan first (at its lower bound: the bare run and
    its clean-up are kept on the graph, as when the search starts), else it is fresh for
    each budget. ``parallel`` with ``PARALLEL_NEEDED`` lowered: the second process runs."""
    mp = pytest.MonkeyPatch()
    mp.setattr(treewidth, "PARALLEL_NEEDED", 1)
    try:
        g0 = tied_graph(kind, n, seed)
        budgets = _budgets(g0, _sep(g0, tree))
        searched = tied_graph(kind, n, seed)  # the fit probes' graph: its runs kept from probe to probe
        sep_searched = _sep(searched, tree)
        if attempt:
            _plan(searched, sep_searched, g0.lb, parallel, fit_only=False)
        for budget in budgets:
            whole = tied_graph(kind, n, seed)  # planned afresh: the plan as it stands alone
            expected = _plan(whole, _sep(whole, tree), budget, parallel, fit_only=False)
            got = _plan(searched, sep_searched, budget, parallel, fit_only=True)
            if expected[0] == "fits":
                assert got[0] == "fits", (budget, got)
            else:
                assert got == expected, budget
    finally:
        mp.undo()


def _scaled(kind: str, n: int, seed: int, scale: int) -> Graph:
    """:func:`tied_graph` with every size times ``scale`` plus a little noise: a store-all
    peak of thousands of bytes makes the search's grid step more than one byte."""
    g = tied_graph(kind, n, seed)
    rng = np.random.default_rng(seed + 1)
    return g.with_arrays(mem=g.mem * scale + rng.integers(0, max(1, scale // 3), g.n) * (g.mem > 0))


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(6, 30),
    st.integers(0, 10_000),
    st.sampled_from(["treewidth", "pathwidth"]),
    st.sampled_from([1, 700]),
    st.sampled_from([0.0, 0.3, 0.6]),
)
def test_the_search_is_the_same_with_fit_probes(kind: str, n: int, seed: int, name: str, scale: int, frac: float) -> None:
    """A failed plan's message (with the smallest budget the search found) and the search's
    answer are the same whether its probes are fit probes or whole plans; with ``scale``
    700 the grid's step is more than a byte, so the found plan's own peak is probed last."""
    peak = store_all_peak(_scaled(kind, n, seed, scale))
    g_lb = _scaled(kind, n, seed, scale).lb
    budget = g_lb + int(frac * (peak - g_lb))
    if scale > 1:
        assert search_tolerance(peak) > 1 or peak < 2000

    def failed(use_probe: bool):
        g = _scaled(kind, n, seed, scale)
        mp = pytest.MonkeyPatch()
        probes: list[tuple[bool, int | None]] = []  # (a whole plan, its budget)
        real = planner._make_plan

        def spy(graph, strat, b, *args):
            probes.append((strat is planner.STRATEGIES[name], b))
            return real(graph, strat, b, *args)

        mp.setattr(planner, "_make_plan", spy)
        if not use_probe:
            mp.setattr(planner, "_fit_probe", lambda strat: None)
        try:
            make_plan(g, name, budget, {"time_limit": 600}, find_smallest=True)
        except NoPlanError as e:
            return (str(e), e.min_budget, probes)
        finally:
            mp.undo()
        return ("fits", None, None)

    with_probes, without = failed(True), failed(False)
    assert with_probes[:2] == without[:2]
    if with_probes[2] is not None:  # the same budgets probed in the same order, besides
        assert _same_probes(with_probes[2], without[2])  # one whole plan at the budget found

    g = _scaled(kind, n, seed, scale)
    strat = planner.STRATEGIES[name]
    probe = planner._fit_probe(strat)
    assert probe is not None and probe is not strat
    a = smallest_budget(g, probe, full=strat)
    b = smallest_budget(_scaled(kind, n, seed, scale), strat)
    assert (a.budget_bytes, a.failed_bytes, a.exact, a.complete, a.probes, a.tolerance_bytes) == (
        b.budget_bytes,
        b.failed_bytes,
        b.exact,
        b.complete,
        b.probes,
        b.tolerance_bytes,
    )
    plan = make_plan(g, name, a.budget_bytes)  # the budget named is one the plan meets
    assert simulate(g, plan.schedule).metrics.peak_bytes <= a.budget_bytes


def _same_probes(got: list[tuple[bool, int | None]], expected: list[tuple[bool, int | None]]) -> bool:
    """The budgets of ``got`` are those of ``expected`` (whole plans), less at most one
    whole plan after the first (the failed attempt) at a budget a fit probe found to fit."""
    budgets = [b for _, b in expected]
    if [b for _, b in got] == budgets:
        return True
    for i in range(1, len(got)):
        whole, b = got[i]
        if whole and b in [x for _, x in got[1:i]] and [x for _, x in got[:i] + got[i + 1 :]] == budgets:
            return True
    return False


@pytest.mark.parametrize("module", [treewidth, pathwidth])
def test_fit_probe_is_the_strategy_run_for_a_fit_only(module) -> None:
    """The registry's strategy and its fit probe differ only in how they solve; the planner
    hands the search the fit probe for the registered strategy only (a stand-in of the
    same name, as tests register, is probed by whole plans)."""
    from dataclasses import fields, replace

    strat = planner.STRATEGIES[module.STRATEGY.name]
    probe = planner._fit_probe(strat)
    assert probe is not None
    for f in fields(strat):
        if f.name != "solve":
            assert getattr(probe, f.name) == getattr(strat, f.name)
    assert planner._fit_probe(replace(strat, summary="a stand-in")) is None
    assert planner._fit_probe(planner.STRATEGIES["store-all"]) is None
