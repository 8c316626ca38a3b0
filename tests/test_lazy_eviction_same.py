"""The faster round of lazy eviction (issue 14 item 1: only the computes are replayed one
by one; the frees are read at an eviction, with heap keys made beforehand with numpy,
``evict._frees``) equals the round it replaced (tests/lazy_eviction_reference.py, evict.py
as of 0414331) step for step: on the schedules the strategies hand the memory-limit pass
(the bare treewidth/pathwidth recursion, budgeted runs, store-all), cleaned up or not,
and on random valid schedules that recompute and free at random, at limits from below the
lower bound to above the store-all peak, with sizes and costs of 0 (ties); the whole pass
too, and the round stopped at its deadline. Every schedule goes through the simulator."""

from __future__ import annotations

import math

import lazy_eviction_reference as reference
import numpy as np
import pytest
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_memlimit_same import _random_schedule, _schedules, _steps

from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.schedule import FREE, Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies import evict, treewidth
from remat_cli.strategies.store_all import store_all_plan

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference_pass(g: Graph, s: Schedule, limit: int, rounds: int = 4) -> Schedule:
    """``memlimit_pass`` with the frozen round (the same cleanup)."""
    current = evict.cleanup(g, s)
    for _ in range(rounds):
        nxt = evict.cleanup(g, reference.lazy_eviction(g, current, limit))
        if _steps(nxt) == _steps(current):
            break
        current = nxt
    return current


def _check(g: Graph, s: Schedule, limit: int) -> bool:
    """One round over ``s`` and over its clean-up, and the whole pass, as the reference;
    each output valid. Whether the round evicted anything (the comparison is not vacuous)."""
    evicted = False
    for given_ in (s, evict.cleanup(g, s)):
        got = evict.lazy_eviction(g, given_, limit)
        assert _steps(got) == _steps(reference.lazy_eviction(g, given_, limit))
        result = simulate(g, got)
        assert result.valid, result.error
        evicted |= int((got.ops == FREE).sum()) > 0 and len(got) < len(given_)
    whole = evict.memlimit_pass(g, s, limit)
    assert _steps(whole) == _steps(_reference_pass(g, s, limit))
    assert simulate(g, whole).valid
    return evicted


def _limits(g: Graph) -> list[int]:
    peak = store_all_peak(g)
    return sorted({max(0, int(g.lb) - 1), int(g.lb), int(0.3 * peak), int(0.5 * peak), int(0.8 * peak), peak + 1})


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(4, 28),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
)
def test_lazy_eviction_is_the_reference(kind: str, n: int, seed: int, tree: str) -> None:
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


def test_the_comparisons_evict() -> None:
    """Not vacuous: on most graphs some limit makes the round evict (and drop recomputes)."""
    hits = 0
    for seed in range(12):
        g = tied_graph("pkt", 24, seed)
        s = treewidth.recursive_schedule(g, D.separator_tree(g, D.tree_decomposition(g)), None)[0]
        hits += any(_check(g, s, limit) for limit in _limits(g))
    assert hits >= 8, hits


def test_keys_as_python_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys past int64 (made one by one as Python's integers) give the same rounds."""
    monkeypatch.setattr(evict, "KEY_BOUND", 0)
    for seed in range(6):
        g = tied_graph("grid", 18, seed)
        s = _random_schedule(g, seed, 0.3)
        for limit in _limits(g):
            _check(g, s, limit)


def test_more_than_65536_nodes() -> None:
    """Node ids past 16 bits sort without the 16-bit key (the same round)."""
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
    """Past the deadline both stop at the same chunk (the clock looked at every few steps)."""
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
