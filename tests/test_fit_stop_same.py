"""Fit probes that stop a candidate run as soon as it cannot fit (issue 14 item 1) give the
verdicts of the code they replace (tests/fit_stop_reference.py, treewidth.py as of
7937637):

* a budgeted run with ``stop_above`` (a fit probe's ladder runs, the cache included)
  stops "over the budget" exactly where the reference's run, replayed by the simulator,
  peaks above that budget, and otherwise makes the reference's steps;
* treewidth's and pathwidth's fit probes give the reference's probes' verdicts, messages
  and named budgets over budgets probed one after another on one graph (its runs kept
  from probe to probe, as in the search), with the second process on and off; and
  whole plans of that graph afterwards are the reference's plans of its graph, probed
  alike, and of a fresh graph (a run a probe stopped is never kept on the graph as
  anything a later plan could misread).

Every schedule goes through the simulator."""

from __future__ import annotations

import fit_stop_reference as reference
import numpy as np
import pytest
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.algorithms import decompose as D
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth
from remat_cli.strategies.base import RunContext
from remat_cli.units import say

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"])
#: the ladder's variants: (eager, evict)
VARIANTS = ((True, "recent"), (True, "cheap"), (False, "recent"), (False, "cheap"))


def _sep(g: Graph, tree: str):
    if tree == "tree":
        return D.separator_tree(g, D.tree_decomposition(g))
    return D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))


def _budgets(g: Graph, sep) -> list[int]:
    """From the lower bound to the store-all peak, with the bare peak and its neighbours."""
    peak = store_all_peak(g)
    bare = simulate(g, treewidth.recursive_schedule(g, sep, None)[0]).metrics.peak_bytes
    out = {g.lb, int(0.3 * peak), int(0.5 * peak), int(0.7 * peak), int(0.9 * peak), peak - 1, bare - 1, bare, bare + 1}
    return sorted(b for b in out if g.lb <= b <= peak)


@SETTINGS
@given(KINDS, st.integers(4, 24), st.integers(0, 10_000), st.sampled_from(["tree", "path"]), st.booleans())
def test_a_run_stopped_over_the_budget_is_one_the_reference_makes_above_it(
    kind: str, n: int, seed: int, tree: str, numpy_plain: bool
) -> None:
    """A cached run (with and without prefetch, both eviction orders, one memo per plan)
    at each ladder-like point below a budget stops "over the budget" exactly when the
    reference's run at that point peaks above the budget; otherwise the same steps. With
    a cost cap too: the run stops for one of the reasons the reference's runs give."""
    g = tied_graph(kind, n, seed)
    sep = _sep(g, tree)
    mp = pytest.MonkeyPatch()
    if numpy_plain:
        mp.setattr(treewidth, "PLAIN_VECTOR_MIN", 1)
        mp.setattr(reference, "PLAIN_VECTOR_MIN", 1)
    try:
        peak = store_all_peak(g)
        base = float(g.cost[g.needed].sum())
        memo_new: dict = {}
        memo_old: dict = {}
        for budget in _budgets(g, sep):
            above = budget - g.fixed_mem
            for point in sorted({budget, g.lb, (g.lb + budget) // 2, int(0.9 * budget)}):
                if not g.lb <= point <= budget:
                    continue
                for eager, evict in VARIANTS:
                    kw = {"cache": True, "eager": eager, "evict": evict}
                    limit = point - g.fixed_mem
                    try:
                        old = reference.recursive_schedule(g, sep, limit, memo=memo_old, **kw)[0]
                    except reference.RecursionStopped as exc:  # (its work limit: not on these graphs)
                        pytest.fail(f"the reference stopped: {exc}")
                    old_peak = simulate(g, old).metrics.peak_bytes
                    try:
                        new = treewidth.recursive_schedule(g, sep, limit, memo=memo_new, stop_above=above, **kw)[0]
                    except treewidth.RecursionStopped as exc:
                        assert str(exc) == treewidth.OVER_BUDGET and old_peak > budget, (point, budget, old_peak)
                    else:
                        assert old_peak <= budget, (point, budget, old_peak)
                        assert (new.ops.tolist(), new.nodes.tolist()) == (old.ops.tolist(), old.nodes.tolist())
                        assert simulate(g, new).metrics.peak_bytes <= budget
                    for max_cost in (base, base * 1.2):  # caps: "cannot win" or over the budget first
                        try:
                            treewidth.recursive_schedule(g, sep, limit, memo=memo_new, stop_above=above, max_cost=max_cost, **kw)
                            got = "finished"
                        except treewidth.RecursionStopped as exc:
                            got = str(exc)
                        try:
                            capped = reference.recursive_schedule(g, sep, limit, memo=memo_old, max_cost=max_cost, **kw)[0]
                            expected = "finished"
                            assert simulate(g, capped).metrics.cost <= max_cost * (1 + 1e-9)
                        except reference.RecursionStopped as exc:
                            expected = str(exc)
                        if old_peak > budget:
                            assert got in (treewidth.OVER_BUDGET, expected), (got, expected)
                        else:
                            assert got == expected
        with pytest.raises(ValueError):  # a budget below the limit would miss computes
            treewidth.recursive_schedule(g, sep, peak, cache=True, stop_above=peak - 1)
    finally:
        mp.undo()


def _probe(module, g: Graph, sep, budget: int | None, parallel: bool, fit_only: bool):
    """("fits", peak[, the plan]) or ("no plan", message, min_budget); a fitting schedule is
    replayed by the simulator and must be within the budget."""
    try:
        result = module.plan_over_separator_tree(
            g, sep, budget, module.DecompositionOptions(), RunContext(parallel=parallel),
            kind="tree (test)", decompose_seconds=0.0, fit_only=fit_only,
        )  # fmt: skip
    except NoPlanError as e:
        return ("no plan", str(e), e.min_budget)
    sim = simulate(g, result.schedule)
    assert sim.valid, sim.error
    assert budget is None or sim.metrics.peak_bytes <= budget
    if fit_only:
        return ("fits",)
    info = {k: say(v) for k, v in result.info.items() if "second" not in k}
    return ("fits", result.schedule.ops.tolist(), result.schedule.nodes.tolist(), sim.metrics.cost, info)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    KINDS,
    st.integers(6, 30),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["down", "up", "lb first"]),
)
def test_fit_probes_are_the_reference_probes(kind: str, n: int, seed: int, tree: str, parallel: bool, scale: bool, order: str) -> None:
    """Probes one after another on one graph (after a failed plan at the lower bound, as
    the search starts; budgets falling, rising, or the lower bound and then falling): the
    same verdict, message and named budget as the reference's probes on a graph of their
    own. Then whole plans of the probed graph (every budget, and none) equal the
    reference's plans of its graph, probed alike, and of a fresh graph. ``parallel`` with ``PARALLEL_NEEDED`` lowered: the
    second process runs (and stops ladder runs over the budget too); ``scale``: scale mode."""
    mp = pytest.MonkeyPatch()
    for module in (treewidth, reference):
        mp.setattr(module, "PARALLEL_NEEDED", 1)
        if scale:
            mp.setattr(module, "LARGE_GRAPH_NODES", 1)
    try:
        g_new, g_old = tied_graph(kind, n, seed), tied_graph(kind, n, seed)
        sep_new, sep_old = _sep(g_new, tree), _sep(g_old, tree)
        budgets = _budgets(g_new, sep_new)
        budgets = {"down": budgets[::-1], "up": budgets, "lb first": budgets[:1] + budgets[:0:-1]}[order]
        lb = g_new.lb
        assert _probe(treewidth, g_new, sep_new, lb, parallel, False) == _probe(reference, g_old, sep_old, lb, parallel, False)
        for budget in budgets:
            got = _probe(treewidth, g_new, sep_new, budget, parallel, True)
            assert got == _probe(reference, g_old, sep_old, budget, parallel, True), budget
        for budget in budgets + [None]:
            expected = _probe(reference, g_old, sep_old, budget, parallel, False)
            assert _probe(treewidth, g_new, sep_new, budget, parallel, False) == expected, budget
            fresh = tied_graph(kind, n, seed)
            assert _probe(reference, fresh, _sep(fresh, tree), budget, parallel, False) == expected, budget
    finally:
        mp.undo()


@pytest.mark.parametrize("parallel", [False, True])
def test_a_probe_stops_ladder_runs_over_its_budget_and_keeps_none_of_them(parallel: bool) -> None:
    """On a graph where no candidate fits the probe's budget (random1000's case, small): the
    probe's ladder runs stop over the budget (with ``parallel``, the second process's too,
    which this process then takes as such instead of making them), none is kept on the
    graph, and whole plans of that graph afterwards are the plans of a fresh graph."""
    import remat_cli.generators as G

    def graph() -> Graph:
        rng = np.random.default_rng(3)
        g = G.random_dag(40, p=0.3, seed=3)
        return g.with_arrays(mem=rng.integers(1, 4, g.n))

    g = graph()
    sep = _sep(g, "path")
    bare = simulate(g, treewidth.recursive_schedule(g, sep, None)[0]).metrics.peak_bytes
    peak = store_all_peak(g)
    stopped: list[str] = []
    real = treewidth.recursive_schedule

    def spy(*args, **kw):
        try:
            return real(*args, **kw)
        except treewidth.RecursionStopped as exc:
            stopped.append(str(exc))
            raise

    mp = pytest.MonkeyPatch()
    mp.setattr(treewidth, "recursive_schedule", spy)
    for module in (treewidth, reference):
        mp.setattr(module, "PARALLEL_NEEDED", 1)
    try:
        budget = None
        for b in range(min(bare, peak) - 1, g.lb, -1):  # the highest budget no candidate fits
            if _probe(reference, graph(), sep, b, False, True)[0] == "no plan":
                budget = b
                break
        assert budget is not None
        assert not g.derived("ladder runs", dict)
        got = _probe(treewidth, g, sep, budget, parallel, True)
        assert got == _probe(reference, graph(), sep, budget, parallel, True)
        assert got[0] == "no plan"
        assert treewidth.OVER_BUDGET in stopped
        assert not g.derived("ladder runs", dict)  # none of the stopped runs kept
        for b in (budget + 1, (budget + peak) // 2, None):
            fresh = graph()
            expected = _probe(reference, fresh, _sep(fresh, "path"), b, parallel, False)
            assert _probe(treewidth, g, sep, b, parallel, False) == expected
    finally:
        mp.undo()
