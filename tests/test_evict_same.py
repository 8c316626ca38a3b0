"""The faster dtr victim search (issue 14 item 1: kept tuples of evicted neighbours and kept
walk results, ``greedy._DtrPicker``) replays exactly as the implementation it replaced
(tests/evict_reference.py, greedy.py as of d23b961): the same schedule step for step, the
same failures (None, :class:`CostlierThan` and its message), hence the same draws of the
seeded sample, for dtr and greedy, at budgets from below the lower bound to the store-all
peak, with sample sizes that take the sampled path, compute caps that stop thrashing
replays, and costs that are fractions (the numerator is a float sum: its order matters)
or zeros. Every schedule either returns goes through the simulator."""

from __future__ import annotations

import math
from fractions import Fraction

import evict_reference as reference
import numpy as np
from graphgen import shape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import greedy
from remat_cli.strategies.store_all import store_all_plan
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _graph(kind: str, n: int, seed: int, p: float, huge: bool, training: bool) -> Graph:
    """A forward shape with sizes from 0–4 (times 2^51 when ``huge``) and costs from a small
    set of fractions and zeros; its training graph when ``training``."""
    fwd = shape(kind, n, seed, p=p)
    rng = np.random.default_rng(seed)
    src, dst = fwd.edges()
    mem = rng.integers(0, 5, fwd.n) * (2**51 if huge else 1)
    cost = rng.choice([0.0, 0.1, 0.3, 1.0, 2.5, 7.0], fwd.n)
    g = G.from_edges(fwd.n, np.stack([src, dst], axis=1), mem=mem, cost=cost)
    return checkmate_training_graph(g) if training else g


@st.composite
def cases(draw, small: bool = True) -> tuple[Graph, int, int, int, float | None]:
    """(graph, budget, sample, max_factor, max_cost)."""
    kind = draw(st.sampled_from(["chain", "skip", "diamonds", "dag"]))
    n = draw(st.integers(3, 24) if small else st.integers(40, 120))
    seed = draw(st.integers(0, 10_000))
    p = draw(st.floats(0.1, 0.5)) if small else 3.0 / n
    g = _graph(kind, n, seed, p, draw(st.integers(0, 9)) == 0, draw(st.integers(0, 4)) > 0)
    peak = store_all_peak(g)
    budget = draw(st.integers(max(0, int(g.lb) - 1), max(int(g.lb), peak)))
    sample = draw(st.sampled_from([2, 4, 16, 64]))
    max_factor = draw(st.sampled_from([2, 10]))
    base = float(g.cost[g.needed].sum())
    max_cost = draw(st.sampled_from([None, None, 1.2, 2.0]))
    return g, budget, sample, max_factor, None if max_cost is None else max_cost * base


def _outcome(module, g: Graph, budget: int, score_name: str, sample: int, max_factor: int, max_cost: float | None):
    """The steps of the replay, or None, or the failure's type and message."""
    score = {"dtr": module.dtr_score, "greedy": module.largest_first}[score_name]
    order = store_all_plan(g).schedule.compute_nodes.tolist()
    try:
        s = module.evict_schedule(g, budget, score, order, max_factor, sample=sample, max_cost=max_cost)
    except NoPlanError as e:
        return (type(e).__name__, str(e))
    if s is None:
        return None
    metrics = simulate(g, s).metrics
    assert metrics is not None and metrics.peak_bytes <= budget
    return (s.ops.tolist(), s.nodes.tolist())


def _same(case: tuple[Graph, int, int, int, float | None]) -> None:
    for score in ("dtr", "greedy"):
        assert _outcome(greedy, *case[:2], score, *case[2:]) == _outcome(reference, *case[:2], score, *case[2:]), score


@SETTINGS
@given(cases())
def test_small_replays_are_the_references(case) -> None:
    _same(case)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(small=False))
def test_thrashing_replays_are_the_references(case) -> None:
    """Larger graphs (40–120 forward nodes): many evictions, walks that reach their limit
    of 32 values, and pools of more than ``sample`` resident values."""
    _same(case)


def _least_cap(g: Graph, budget: int, score: str, sample: int, most: int) -> int | None:
    """The least compute cap (a count, passed as a fraction of the order's length) under
    which the reference's replay succeeds, if one up to ``most`` does: a cap only stops a
    replay, so success is monotone in it."""
    n = len(store_all_plan(g).schedule.compute_nodes)
    if _outcome(reference, g, budget, score, sample, Fraction(most, n), None) is None:
        return None
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi) // 2
        if _outcome(reference, g, budget, score, sample, Fraction(mid, n), None) is None:
            lo = mid + 1
        else:
            hi = mid
    return lo


@SETTINGS
@given(cases())
def test_a_replay_gives_up_early_only_where_it_must(case) -> None:
    """A replay gives up as soon as the evicted values still read need more recomputations
    than its compute cap leaves: never where it would succeed. At the least cap under which
    the reference succeeds (its last recomputation starts at the cap itself, the tightest
    case), it succeeds with the same steps; one below, both fail."""
    g, budget, sample = case[:3]
    n = len(store_all_plan(g).schedule.compute_nodes)
    for score in ("dtr", "greedy"):
        cap = _least_cap(g, budget, score, sample, 40 * n)
        if cap is None:
            continue  # it fails whatever the cap: the other tests compare those
        assert _outcome(greedy, g, budget, score, sample, Fraction(cap, n), None) == _outcome(
            reference, g, budget, score, sample, Fraction(cap, n), None
        )
        if cap > 0:
            assert _outcome(greedy, g, budget, score, sample, Fraction(cap - 1, n), None) is None


def test_a_doomed_replay_gives_up_before_its_cap(monkeypatch) -> None:
    """Not vacuous: a thrashing dtr replay that fails by its cap gives up with fewer
    computes than the reference makes before it fails (and fails as it does)."""
    g = checkmate_training_graph(G.random_dag(200, 0.02, seed=3))
    budget = int(0.3 * store_all_peak(g))
    made = {}
    for module in (greedy, reference):
        counts = []

        class Counting(module.ScheduleBuilder):  # type: ignore[name-defined]
            def compute(self, v: int) -> None:
                counts.append(v)
                super().compute(v)

        monkeypatch.setattr(module, "ScheduleBuilder", Counting)
        assert _outcome(module, g, budget, "dtr", 64, 10, None) is None
        made[module.__name__] = len(counts)
    n = len(store_all_plan(g).schedule.compute_nodes)
    assert made[reference.__name__] > 10 * n  # (it failed by its cap)
    assert made[greedy.__name__] < made[reference.__name__]


def test_kept_walks_are_used(monkeypatch) -> None:
    """Not vacuous: on a thrashing replay most candidates are scored from kept walks (fewer
    walks than unpinned candidates), and the replay is still the reference's."""
    fwd = G.random_dag(150, 0.03, seed=5)
    rng = np.random.default_rng(5)
    fwd = G.from_edges(fwd.n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, fwd.n), cost=rng.choice([0.1, 0.3, 1.0], fwd.n))
    g = checkmate_training_graph(fwd)
    budget = (int(g.lb) + store_all_peak(g)) // 2
    counts = {"walks": 0, "candidates": 0}
    walk, pick = greedy._DtrPicker._walk, greedy._DtrPicker.pick

    def counted_walk(self, *args):
        counts["walks"] += 1
        return walk(self, *args)

    def counted_pick(self, pool, pins):
        counts["candidates"] += sum(1 for v in pool if not pins[v])
        return pick(self, pool, pins)

    monkeypatch.setattr(greedy._DtrPicker, "_walk", counted_walk)
    monkeypatch.setattr(greedy._DtrPicker, "pick", counted_pick)
    assert _outcome(greedy, g, budget, "dtr", 64, 10, None) == _outcome(reference, g, budget, "dtr", 64, 10, None)
    assert counts["candidates"] > 1000 and counts["walks"] < counts["candidates"] / 2, counts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(20, 90), st.floats(0.3, 0.95))
def test_picks_and_walks_equal_dtr_score(seed: int, n: int, dense: float) -> None:
    """Directly, over random evictions and recomputations with most values evicted (walks
    that stop at their limit of 32 values) and costs that are arbitrary floats (sums whose
    order shows): each walk's key is ``dtr_score``'s exactly, and each pick is the least
    ``dtr_score`` key among the unpinned candidates (None when all are pinned)."""
    rng = np.random.default_rng(seed)
    fwd = G.random_dag(n, 4.0 / n, seed=seed)
    fwd = G.from_edges(n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, n), cost=rng.random(n) * 10)
    g = checkmate_training_graph(fwd)
    state = greedy._State(g)
    picker = greedy._DtrPicker(state)
    pins = [0] * g.n
    for _ in range(30):
        for x in rng.choice(g.n, size=max(1, g.n // 8), replace=False).tolist():
            want = int(rng.random() < dense)
            if state.evicted[x] != want:
                state.evicted[x] = want
                picker.flipped(x)
        state.clock += int(rng.integers(0, 3))
        for x in rng.choice(g.n, size=3, replace=False).tolist():
            state.last_access[x] = state.clock
        pool = [v for v in rng.permutation(g.n).tolist()[:20] if not state.evicted[v]]
        pins = [int(rng.random() < 0.2) for _ in range(g.n)]
        for v in pool:  # walks stopped above rising bests, each resumed from the last
            denom = state.mem[v] * (state.clock - state.last_access[v] + 1)
            exact = greedy.dtr_score(state, v)[0]
            for best in [*sorted((rng.random(3) * 2 * exact).tolist()), math.inf]:
                part = picker.found.get(v)
                if part is not None and (part[1] or any(picker.changed[y] > part[3] for y in part[2])):
                    part = None
                assert picker._walk(v, denom, best, part) == (None if exact > best else exact)
        free = [v for v in pool if not pins[v]]
        want_pick = min(free, key=lambda v: greedy.dtr_score(state, v)) if free else None
        assert picker.pick(pool, pins) == want_pick


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 400), st.integers(0, 2**32), st.integers(1, 4))
def test_sample_like_random_draws_as_random_sample(n: int, k: int, seed: int, rounds: int) -> None:
    """``sample_like_random`` returns what ``random.Random.sample`` returns, and leaves the
    generator where it leaves it (the next samples agree too), on both of its paths (a
    population at most random's set size, and above it), for any k up to the population."""
    import random

    k = min(k, n)
    population = [3 * i + 1 for i in range(n)]
    ours, theirs = random.Random(seed), random.Random(seed)
    for _ in range(rounds):
        assert greedy.sample_like_random(ours, population, k) == theirs.sample(population, k)
    assert ours.getrandbits(64) == theirs.getrandbits(64)


@settings(max_examples=2000, deadline=None)
@given(
    st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False) | st.just(math.inf),
    st.integers(1, 2**80),
    st.integers(-64, 64),
)
def test_the_walks_float_precheck_never_hides_a_cut(best: float, denom: int, steps: int) -> None:
    """The walk adds a cost and compares ``total > best * denom * _BELOW`` before it divides:
    wherever the ratio passes ``best`` the product test passes too (totals drawn a few
    floats either side of ``best * denom``, where rounding decides)."""
    total = best * denom if math.isfinite(best) else 1e300
    for _ in range(abs(steps)):
        total = math.nextafter(total, math.inf if steps > 0 else 0.0)
    if total / denom > best:
        assert total > best * denom * greedy._BELOW
