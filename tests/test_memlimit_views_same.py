"""The memory-limit pass reading its per-compute and per-free facts through memoryviews
(issue 14 item 1, r17: ``lazy_eviction`` reads the value and the frees before each compute,
and ``_frees`` hands back each free's value, next compute and heap key, as views of numpy
arrays, not as lists made of every step; the computes' running count is summed in int32;
a value's entry in ``cheap`` is marked by its ``latest`` alone; a compute's room is made
once)
equals the code it replaced (tests/memlimit_views_reference.py, evict.py as of cdf8379):
``_frees``, one round of ``lazy_eviction`` (from the input and from its clean-up) and the
whole ``memlimit_pass`` give the reference's facts and steps, node for node, on the
schedules the strategies hand the pass (the bare treewidth/pathwidth recursion, budgeted
runs, store-all), on random valid schedules that recompute and free anywhere, and on long
inputs like grid1000's bare run, at limits from below the lower bound to above the
store-all peak, with sizes and costs of 0 (ties); keys past int64 and ids past 16 bits;
stopped at the deadline. Every schedule goes through the simulator."""

from __future__ import annotations

import math

import memlimit_views_reference as reference
import numpy as np
import pytest
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_memlimit_same import _long_inputs, _random_schedule, _schedules, _steps

from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies import evict, treewidth
from remat_cli.strategies.store_all import store_all_plan
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _limits(g: Graph) -> list[int]:
    peak = store_all_peak(g)
    return sorted({max(0, int(g.lb) - 1), int(g.lb), int(0.3 * peak), int(0.5 * peak), int(0.8 * peak), peak + 1})


def _facts(out: tuple) -> tuple:
    """``_frees``' answer as plain lists (views and lists alike)."""
    fnode, fnext, keys, dead, firsts = out
    return list(fnode), list(fnext), list(keys), list(dead), np.asarray(firsts).tolist()


def _check(g: Graph, s: Schedule, limit: int) -> int:
    """``_frees`` and one round over ``s`` and over its clean-up, and the whole pass, as
    the reference gives them; each output valid. The values the rounds evicted."""
    evicted = 0
    for given_ in (s, evict.cleanup(g, s)):
        comp = given_.ops == COMPUTE
        assert _facts(evict._frees(g, given_, comp)) == _facts(reference._frees(g, given_, comp))
        got = evict.lazy_eviction(g, given_, limit)
        assert _steps(got) == _steps(reference.lazy_eviction(g, given_, limit))
        result = simulate(g, got)
        assert result.valid, result.error
        evicted += int((got.ops == FREE).sum()) if len(got) < len(given_) else 0
    whole = evict.memlimit_pass(g, s, limit)
    assert _steps(whole) == _steps(reference.memlimit_pass(g, s, limit))
    assert simulate(g, whole).valid
    return evicted


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(4, 28),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
)
def test_memlimit_pass_is_the_reference(kind: str, n: int, seed: int, tree: str) -> None:
    """Each schedule a plan hands the pass, and two random ones, at every limit."""
    g = tied_graph(kind, n, seed)
    for s in _schedules(g, seed, tree):
        for limit in _limits(g):
            _check(g, s, limit)


@SETTINGS
@given(st.integers(2, 60), st.integers(0, 10_000), st.floats(0.0, 0.9))
def test_random_schedules_are_the_reference(n: int, seed: int, p_free: float) -> None:
    """Random valid schedules: values recomputed while resident elsewhere, freed at random,
    never read again; limits from below the lower bound up."""
    g = tied_graph("dag", n, seed)
    s = _random_schedule(g, seed, p_free)
    for limit in _limits(g):
        _check(g, s, limit)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([("grid", 60, 200), ("pkt", 60, 200), ("dag", 30, 80)]), st.floats(0, 1), st.integers(0, 10_000))
def test_long_inputs_are_the_reference(shape: tuple[str, int, int], at: float, seed: int) -> None:
    """Long inputs (test_memlimit_same's: the bare recursion and min-memory's computes
    repeated, frees at last use or just before the next compute)."""
    kind, lo, hi = shape
    g = tied_graph(kind, lo + int(at * (hi - lo)), seed)
    peak = store_all_peak(g)
    for s in _long_inputs(g):
        for limit in sorted({max(0, int(g.lb) - 1), int(0.3 * peak), int(0.6 * peak), peak + 1}):
            _check(g, s, limit)


@pytest.mark.parametrize("rows,cols", [(4, 40), (6, 30)])
def test_a_grids_bare_run_is_the_reference(rows: int, cols: int) -> None:
    """The case the change is for (grid1000's bare treewidth run, in small): a grid's
    training graph, its bare recursion at 0.9x-0.3x; the rounds evict thousands of times."""
    g = checkmate_training_graph(G.grid(rows, cols))
    bare = treewidth.recursive_schedule(g, D.separator_tree(g, D.tree_decomposition(g)), None)[0]
    peak = store_all_peak(g)
    evicted = sum(_check(g, bare, int(r * peak)) for r in (0.9, 0.7, 0.5, 0.3))
    assert evicted > 1000, evicted


def test_keys_as_python_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys past int64 (a list of Python's integers, not a view) give the same rounds."""
    monkeypatch.setattr(evict, "KEY_BOUND", 0)
    monkeypatch.setattr(reference, "KEY_BOUND", 0)
    for seed in range(6):
        g = tied_graph("grid", 18, seed)
        for s in (_random_schedule(g, seed, 0.3), *_schedules(g, seed, "tree")[:1]):
            for limit in _limits(g):
                _check(g, s, limit)


def test_more_than_65536_nodes() -> None:
    """Node ids past 16 bits (no 16-bit sort key) give the same round."""
    n = 70_000
    rng = np.random.default_rng(1)
    edges = np.array([(i, i + 1) for i in range(n - 1)] + [(i, i + 7) for i in range(0, n - 7, 5)], dtype=np.int64)
    g = G.from_edges(n, edges, mem=rng.integers(0, 4, n), cost=rng.choice([0.0, 1.0, 2.0], n))
    s = store_all_plan(g).schedule
    limit = (int(g.lb) + store_all_peak(g)) // 2
    got = evict.lazy_eviction(g, s, limit)
    assert _steps(got) == _steps(reference.lazy_eviction(g, s, limit))
    assert simulate(g, got).valid


@pytest.mark.parametrize("kind", ["grid", "pkt"])
def test_past_its_deadline_is_the_reference(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the deadline both stop at the same chunk (the clock looked at every few steps);
    empty and cut inputs too."""
    monkeypatch.setattr(evict, "DEADLINE_EVERY", 7)
    monkeypatch.setattr(reference, "DEADLINE_EVERY", 7)
    g = tied_graph(kind, 40, 3)
    bare = treewidth.recursive_schedule(g, D.separator_tree(g, D.tree_decomposition(g)), None)[0]
    limit = int(0.5 * store_all_peak(g))
    for s in (bare, Schedule(bare.ops[:5], bare.nodes[:5]), Schedule(bare.ops[:0], bare.nodes[:0])):
        for deadline in (-math.inf, 0.0, None):
            got = evict.lazy_eviction(g, s, limit, deadline)
            assert _steps(got) == _steps(reference.lazy_eviction(g, s, limit, deadline))
            if got is not None and s is bare:  # (the cut ones compute no targets)
                assert simulate(g, got).valid
        assert _steps(evict.memlimit_pass(g, s, limit, deadline=0.0)) == _steps(reference.memlimit_pass(g, s, limit, deadline=0.0))
