"""min-memory at scale (issue 14 item 2): its variants are skipped, not run, where a lower
bound on their computes (:func:`min_memory.least_computes`) already passes the compute cap.

The bound must never exceed what a variant computes (else a variant that fits the cap
would be skipped and plans would change), and skipping must give exactly the variants
that running them gives. Every schedule goes through the simulator; no timing is asserted.
"""

from __future__ import annotations

import numpy as np
import pytest
from graphgen import forward_graph, training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _graph(kind: str, n: int, seed: int) -> Graph:
    if kind == "dag" and seed % 3 == 0:
        return forward_graph(kind, n, seed, grid_rows=2)  # plain DAGs too
    return training_graph(kind, n, seed, grid_rows=2)


def _computes(graph: Graph, schedule) -> int:
    assert simulate(graph, schedule).metrics is not None  # valid
    return int(np.count_nonzero(schedule.ops == COMPUTE))


@SETTINGS
@given(kind=st.sampled_from(["chain", "skip", "grid", "dag"]), n=st.integers(1, 14), seed=st.integers(0, 60))
def test_least_computes_is_a_lower_bound_of_every_variant(kind, n, seed):
    g = _graph(kind, n, seed)
    big = 10**9
    bound = M.least_computes(g, big)
    with pytest.MonkeyPatch.context() as mp:  # the search per target gives the same bound
        mp.setattr(M, "_BOUND_BITS", 0)
        assert M.least_computes(g, big) == bound
    rank = g.topo_rank.tolist()
    order = sorted(g.targets.tolist(), key=rank.__getitem__)
    made = [M.min_memory_schedule(g, order, memo, big) for memo in (True, False)]
    made.append(M.scratch_schedule(g, order, big))
    for schedule in made:
        assert schedule is not None
        assert bound <= _computes(g, schedule)
    # and each variant the strategy keeps (store-all order, targets recomputed, lowered)
    # computes at least the bound, store-all aside
    for name, schedule, _ in M.min_memory_variants(g)[1:]:
        assert bound <= _computes(g, schedule), name
    # past a cap the bound stops early, at a number above the cap
    if bound > 1:
        assert M.least_computes(g, bound - 1) > bound - 1


@SETTINGS
@given(kind=st.sampled_from(["chain", "skip", "grid", "dag"]), n=st.integers(2, 14), seed=st.integers(0, 60))
def test_skipping_gives_the_variants_running_them_gives(kind, n, seed):
    """With the cap set so that the bound passes it (where it can), the variants made
    with the skip equal those made by running every variant to the cap."""
    cap = max(1, M.least_computes(_graph(kind, n, seed), 10**9) - 1 - seed % 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "MAX_COMPUTES", cap)
        skipped = M.min_memory_variants(_graph(kind, n, seed))  # a fresh graph: nothing cached
        mp.setattr(M, "least_computes", lambda graph, cap: 0)
        ran = M.min_memory_variants(_graph(kind, n, seed))
    assert [(a[0], a[1].ops.tolist(), a[1].nodes.tolist()) for a in skipped] == [
        (b[0], b[1].ops.tolist(), b[1].nodes.tolist()) for b in ran
    ]
    assert len(skipped) == 1  # past the cap only store-all is left, either way


@SETTINGS
@given(kind=st.sampled_from(["chain", "skip", "grid", "dag"]), n=st.integers(2, 14), seed=st.integers(0, 60))
def test_a_passed_deadline_stops_the_variants_and_keeps_nothing(kind, n, seed):
    """Past the deadline min-memory returns what it made (store-all at least), valid, and
    does not keep that partial list: a later call without a deadline makes them all."""
    import time

    g = _graph(kind, n, seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "DEADLINE_EVERY", 1)
        partial = M.min_memory_variants(g, time.perf_counter() - 1.0)
    assert partial and partial[0][0].startswith("store-all")
    full = M.min_memory_variants(g)
    fresh = M.min_memory_variants(_graph(kind, n, seed))
    assert [v[0] for v in full] == [v[0] for v in fresh]
    for _, schedule, metrics in partial + full:
        replay = simulate(g, schedule).metrics
        assert replay is not None and replay.peak_bytes == metrics.peak_bytes
    if len(fresh) > 1 and M.least_computes(g, 10**9) > 0:
        assert len(partial) < len(fresh)  # it did stop


@SETTINGS
@given(
    kind=st.sampled_from(["skip", "grid", "dag"]),
    n=st.integers(3, 14),
    seed=st.integers(0, 60),
    memo=st.booleans(),
    data=st.data(),
)
def test_a_run_that_passes_the_cap_says_in_which_turn(kind, n, seed, memo, data):
    """A run stopped at the cap names the turn it stopped in; any order of the same targets
    that begins with the same turns stops there too, so ``_variants`` need not run it (the
    tree variant in the store-all order on random1000: 400,000 computes for nothing)."""
    g = _graph(kind, n, seed)
    rank = g.topo_rank.tolist()
    order = sorted(g.targets.tolist(), key=rank.__getitem__)
    turns: list[int] = []
    whole = M.min_memory_schedule(g, order, memo, 10**9, turns=turns)
    assert whole is not None and turns == []
    full = _computes(g, whole)
    if full < 2:
        return
    cap = data.draw(st.integers(1, full - 1), label="cap")
    assert M.min_memory_schedule(g, order, memo, cap, turns=turns) is None
    (k,) = turns
    assert 1 <= k <= len(order)
    # the same first k targets, the others in any topological order of their own
    rest = sorted(order[k:], key=lambda t: (data.draw(st.integers(0, 3), label="shuffle"), rank[t]))
    other = order[:k] + sorted(rest, key=rank.__getitem__) if data.draw(st.booleans(), label="topo") else order[:k] + rest
    again: list[int] = []
    assert M.min_memory_schedule(g, other, memo, cap, turns=again) is None and again == [k]


def _counted(fn, steps: list[int]):
    def counted(*args, **kwargs):
        steps[0] += 1
        return fn(*args, **kwargs)

    return counted


class _Clock:
    """A clock for min_memory that moves one tick per reading: a deadline k ticks ahead
    lets the making read it k times, wherever those readings fall."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


@SETTINGS
@given(
    kind=st.sampled_from(["chain", "skip", "grid", "dag"]),
    n=st.integers(2, 14),
    seed=st.integers(0, 60),
    ticks=st.integers(1, 6),
)
def test_variants_made_in_pieces_are_those_made_at_once(kind, n, seed, ticks):
    """Paused at each deadline and resumed by the next call, the making ends with the very
    variants one call without a deadline makes (each pause redoes only the variant it was
    in), and every call before that returns valid variants, store-all first, none kept.
    (A step longer than every call's time never ends: calls here get longer and longer.)"""
    steps = [0]  # the making's steps started (a variant's replay, lowering a peak)
    with pytest.MonkeyPatch.context() as mp:
        for name in ("min_memory_schedule", "scratch_schedule", "_lowering"):
            mp.setattr(M, name, _counted(getattr(M, name), steps))
        whole = M.min_memory_variants(_graph(kind, n, seed))
        once, steps[0] = steps[0], 0
        g = _graph(kind, n, seed)
        clock = _Clock()
        mp.setattr(M, "DEADLINE_EVERY", 1)
        mp.setattr(M, "time", clock)
        for call in range(64):  # each call a little longer: every step fits one at last
            got = M.min_memory_variants(g, clock.now + ticks * 2 ** (call // 2))
            if M.variants_made(g):
                break
            assert got[0][0].startswith("store-all")
            for _, schedule, metrics in got:
                assert simulate(g, schedule).metrics.peak_bytes == metrics.peak_bytes
        assert M.variants_made(g)
    assert steps[0] <= once + call  # a pause redoes one step at most: nothing done is redone
    assert [(v[0], v[1].ops.tolist(), v[1].nodes.tolist()) for v in got] == [(v[0], v[1].ops.tolist(), v[1].nodes.tolist()) for v in whole]


def test_a_making_that_raised_starts_afresh_and_keeps_nothing(monkeypatch):
    """A making stopped by an error (here an interrupt in its first variant) is not kept
    half made: the error reaches the caller, and the next call makes every variant."""
    g = _graph("skip", 8, 1)
    real = M.min_memory_schedule

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(M, "min_memory_schedule", interrupted)
    with pytest.raises(KeyboardInterrupt):
        M.min_memory_variants(g)
    assert not M.variants_made(g)
    monkeypatch.setattr(M, "min_memory_schedule", real)
    made = M.min_memory_variants(g)
    fresh = M.min_memory_variants(_graph("skip", 8, 1))
    assert [v[0] for v in made] == [v[0] for v in fresh] and len(made) > 1
