"""The faster re-eviction (and prune_unread) of the improvement pass (issue 14 item 1) equals the implementation
it replaced (tests/improve_reference.py): the same compute sequence, the same ``close`` set
(the victims and runners-up the hill climbs perturb) and the same work spent, for every
score, lingering or not, with and without weights (zeros and infinities too), at limits
from below the lower bound to above the peak and at work limits that stop it part way.
Every sequence either returns goes through the simulator."""

from __future__ import annotations

import math
import random

import improve_reference as reference
from graphgen import shape
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms import improve
from remat_cli.algorithms.improve import SCORES, _first_computes, _greedy_cover, _Limits, _reevict
from remat_cli.algorithms.segments import prune_unread, schedule_from_sequence
from remat_cli.errors import RematError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs(draw) -> Graph:
    """Training graphs of chains, skip chains, diamonds and random DAGs (2-16 forward nodes)
    with sizes, costs and workspaces from small sets (ties between keys are common, and so
    are sizes and costs of 0), or sizes near 2^52 (size · d² no longer fits 64-bit integers)."""
    kind = draw(st.sampled_from(["chain", "skip", "diamonds", "dag"]))
    n = draw(st.integers(2, 16))
    seed = draw(st.integers(0, 10_000))
    huge = draw(st.integers(0, 9)) == 0
    fwd = shape(kind, n, seed, p=draw(st.floats(0.1, 0.6)) if kind == "dag" else 0.3)
    rng = np.random.default_rng(seed)
    src, dst = fwd.edges()
    mem = rng.integers(0, 4, fwd.n) * (2**51 if huge else 1)
    cost = rng.choice([0.0, 1.0, 2.0, 0.5, 3.0], fwd.n)
    fwd = G.from_edges(fwd.n, np.stack([src, dst], axis=1), mem=mem, cost=cost)
    g = checkmate_training_graph(fwd)
    src, dst = g.edges()
    workspace = rng.choice([0, 0, 0, 1], g.n) * (2**51 if huge else 1)
    return Graph.from_arrays(
        ids=g.ids, ops=g.ops, kinds=g.kinds, mem=g.mem, cost=g.cost, workspace=workspace, src=src, dst=dst, fixed_mem=1, name=g.name
    )


def _orders(g: Graph, seed: int) -> list[list[int]]:
    """Orders to replay: the topological order of the needed nodes, a random topological
    order of them, and the first computations of a plan that recomputes."""
    rng = random.Random(seed)
    preds = g.pred_lists
    needed = g.needed_nodes.tolist()
    wanted = set(needed)
    indeg = {v: sum(1 for u in preds[v] if u in wanted) for v in needed}
    ready = [v for v in needed if indeg[v] == 0]
    shuffled = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        shuffled.append(v)
        for s in g.succ_lists[v]:
            if s in indeg:
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append(s)
    plan = make_plan(g, "chen-sqrt", None, {})
    return [needed, shuffled, _first_computes(plan.schedule.compute_nodes.tolist(), g.n)]


def _same(
    g: Graph, order: list[int], limit: int, score: str, work: int, weight: list[float] | None, linger: bool, facts: dict | None = None
) -> None:
    """The new replay equals the reference: sequence, close set, work left, whether it
    scores the live values in numpy or in plain Python (``_SCAN_LIVE``), and with
    ``facts`` kept from other replays of the same order (``improve._order_facts``: shared
    lists the replay must only read); and what it returns replays within the limit."""
    old_close: set[int] = set()
    old_limits = _Limits(None, work)
    old = reference._reevict(g, order, limit, score, old_limits, weight, linger, old_close)
    for scan in (0, 4, 10**9):  # numpy scans of the live values, plain Python ones, and both (arrays made mid-replay)
        new_close: set[int] = set()
        new_limits = _Limits(None, work)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(improve, "_SCAN_LIVE", scan)
            new = _reevict(g, order, limit, score, new_limits, weight, linger, new_close)
        what = f"{score} linger={linger} limit={limit} work={work} weight={'none' if weight is None else 'given'} scan={scan}"
        assert new == old, what
        assert new_close == old_close, what
        assert new_limits.work == old_limits.work, what
    if facts is not None:  # what earlier replays of this order (other scores, lingering) left
        new_close, new_limits = set(), _Limits(None, work)
        new = _reevict(g, order, limit, score, new_limits, weight, linger, new_close, None, facts)
        assert (new, new_close, new_limits.work) == (old, old_close, old_limits.work), f"{what} with kept facts"
    if new is not None:
        m = simulate(g, schedule_from_sequence(g, new)).metrics
        assert m is not None, what
        assert m.peak_bytes <= limit, what


@SETTINGS
@given(graphs(), st.integers(0, 10_000), st.floats(0.0, 1.2), st.sampled_from([10**9, 10**9, 200, 40, 0]))
def test_reevict_equals_the_reference(g: Graph, seed: int, where: float, work: int) -> None:
    rng = random.Random(seed)
    peak = store_all_peak(g)
    limit = int(g.lb * 0.9 + where * (peak - g.lb * 0.9))
    for order in _orders(g, seed):
        facts: dict = {}  # kept across this order's replays, as improve_plan keeps them
        for score in SCORES:
            for linger in (False, True):
                weight = rng.choice([None, [1.0] * g.n, [rng.choice((0.0, 0.01, 0.3, 1.0, 3.0, 100.0, math.inf)) for _ in range(g.n)]])
                _same(g, order, limit, score, work, weight, linger, facts)


def test_reevict_equals_the_reference_on_larger_graphs() -> None:
    """Longer live lists (dozens of resident values): CNN-shaped and random training
    graphs, and a chain of sizes near 2^52 (keys past 64-bit integers), each score, lingering and not, at 0.7x and 0.4x of the store-all peak, with the
    weights of a hill climb's perturbation."""
    rng = random.Random(7)
    sizes = [2**52 - 1 - 2**40 * i for i in range(60)]  # size · d² overflows 64-bit integers
    for fwd in (G.resnet((2, 2, 2, 2)), G.mobilenet(), G.random_dag(60, p=0.06, seed=3), G.chain(60, mem=sizes)):
        g = checkmate_training_graph(fwd)
        peak = store_all_peak(g)
        order = g.needed_nodes.tolist()
        facts: dict = {}
        for ratio in (0.7, 0.4):
            limit = max(int(ratio * peak), g.lb)
            for score in SCORES:
                for linger in (False, True):
                    weight = [rng.choice((0.1, 1.0, 1.0, 1.0, 10.0)) for _ in range(g.n)]
                    _same(g, order, limit, score, 10**9, weight, linger, facts)


def _fresh_round(kept: dict, seq: list[int], limits: _Limits, run):
    """improve._replayed without keeping anything: every round runs."""
    return run()


def _fresh_replay(graph: Graph, seq: list[int], sims: dict):
    """improve._simulated without keeping anything: every sequence is replayed."""
    schedule = schedule_from_sequence(graph, seq)
    return schedule, simulate(graph, schedule, per_step=True)


def _same_fresh(g: Graph, plan, budget: int, work: int | None, restarts: int) -> None:
    """improve_plan as it is, and with every round, re-eviction and descent run afresh and
    nothing kept: the same plan, found the same way, stopped at the same point."""
    import remat_cli.algorithms.improve as improve

    kept = improve.improve_plan(g, plan, budget, replay=True, max_work=work, restarts=restarts)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(improve, "_replayed", _fresh_round)
        mp.setattr(improve, "_simulated", _fresh_replay)
        mp.setattr(improve, "_rechosen", lambda trace, old, new: None)  # every replay runs
        mp.setattr(improve, "_descended", lambda kept, seq, limits, run: run())  # every descent runs
        fresh = improve.improve_plan(g, plan, budget, replay=True, max_work=work, restarts=restarts)
    what = f"{g.name} budget={budget} work={work}"
    assert np.array_equal(kept.schedule.ops, fresh.schedule.ops), what
    assert np.array_equal(kept.schedule.nodes, fresh.schedule.nodes), what
    assert (kept.metrics, kept.score, kept.restart, kept.ranking, kept.stopped) == (
        fresh.metrics,
        fresh.score,
        fresh.restart,
        fresh.ranking,
        fresh.stopped,
    ), what
    m = simulate(g, kept.schedule).metrics
    assert m is not None and m.peak_bytes <= max(budget, simulate(g, plan).metrics.peak_bytes), what


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.floats(0.3, 1.0), st.sampled_from([None, 30_000, 3_000, 300]))
def test_kept_rounds_and_replays_change_nothing(g: Graph, ratio: float, work: int | None) -> None:
    """improve_plan keeps the replays and hoist rounds of sequences it has seen; with every
    round run afresh (and nothing kept) it returns the same plan, found the same way, and
    stops at the same point, whatever work it is given."""
    budget = max(int(ratio * store_all_peak(g)), g.lb)
    try:
        plan = make_plan(g, "chen-sqrt", budget, {}).schedule
    except RematError:
        return
    _same_fresh(g, plan, budget, work, 4)


def test_kept_rounds_change_nothing_where_the_work_limit_binds() -> None:
    """The same on CNN-shaped training graphs, where the pass spends its whole work limit
    (hill climbs) and where a smaller limit cuts it at other points: a replayed round spends
    what it spent when it ran, spend by spend."""
    for fwd, ratio, works in ((G.resnet((2, 2, 2, 2)), 0.5, (120_000, 40_000)), (G.segnet((2, 2, 3, 3)), 0.5, (None, 40_000))):
        g = checkmate_training_graph(fwd)
        budget = max(int(ratio * store_all_peak(g)), g.lb)
        plan = make_plan(g, "greedy", budget, {}).schedule
        for work in works:
            _same_fresh(g, plan, budget, work, 64)


@SETTINGS
@given(graphs(), st.integers(0, 10_000), st.floats(0.0, 1.0), st.booleans())
def test_a_rechosen_trace_is_the_replay(g: Graph, seed: int, where: float, linger: bool) -> None:
    """Where _rechosen says a re-eviction under perturbed weights evicts what the traced
    one did, running it gives that trace: the same sequence, close set, work and choices
    (runners-up included), so a hill climb may step on it; and where it says None, some
    victim differs. Each replay goes through the simulator."""
    rng = random.Random(seed)
    peak = store_all_peak(g)
    limit = int(g.lb + where * (peak - g.lb))
    order = g.needed_nodes.tolist()
    movable = [v for v in order if g.mem[v] > 0]
    for score in SCORES:
        weight = [rng.choice((0.1, 1.0, 1.0, 3.0)) for _ in range(g.n)]
        base = improve._Trace()
        if _reevict(g, order, limit, score, _Limits(None, 10**9), weight, linger, set(), base) is None:
            continue
        for _ in range(4):
            new = improve._perturb(weight, movable, rng)
            got = improve._rechosen(base, weight, new)
            run = improve._Trace()
            close: set[int] = set()
            limits = _Limits(None, 10**9)
            seq = _reevict(g, order, limit, score, limits, new, linger, close, run)
            if got is None:
                assert seq is None or [c[3] for c in run.choices] != [c[3] for c in base.choices]
                continue
            assert seq == got.seq and close == got.close
            assert 10**9 - limits.work == sum(got.spends) and run.spends == got.spends
            assert run.choices == got.choices
            m = simulate(g, schedule_from_sequence(g, seq)).metrics
            assert m is not None and m.peak_bytes <= limit


def test_rechosen_skips_replays_on_a_chain() -> None:
    """On a training chain at half its store-all peak, a hill climb's perturbations often
    leave every victim as it was: _rechosen finds such replays (it is not vacuous)."""
    g = checkmate_training_graph(G.chain(24))
    limit = store_all_peak(g) // 2
    order = g.needed_nodes.tolist()
    movable = [v for v in order if g.mem[v] > 0]
    rng = random.Random(1)
    weight = [1.0] * g.n
    base = improve._Trace()
    assert _reevict(g, order, limit, "r/size/d", _Limits(None, 10**9), weight, True, set(), base) is not None
    found = sum(improve._rechosen(base, weight, improve._perturb(weight, movable, rng)) is not None for _ in range(40))
    assert found > 0


def test_a_full_trace_keeps_nothing_and_changes_nothing() -> None:
    """A trace past _TRACE_ITEMS candidates keeps no choices (its replay is run again), and
    improve_plan then returns the very plan it returns with traces kept."""
    g = checkmate_training_graph(G.chain(24))
    budget = store_all_peak(g) * 6 // 10
    plan = make_plan(g, "greedy", budget, {}).schedule
    trace = improve._Trace()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(improve, "_TRACE_ITEMS", 3)
        assert _reevict(g, g.needed_nodes.tolist(), budget, "r/size/d", _Limits(None, 10**9), [1.0] * g.n, True, set(), trace)
        assert trace.full and trace.choices == []
        small = improve.improve_plan(g, plan, budget, replay=True)
    kept = improve.improve_plan(g, plan, budget, replay=True)
    assert np.array_equal(small.schedule.nodes, kept.schedule.nodes) and np.array_equal(small.schedule.ops, kept.schedule.ops)
    assert (small.metrics, small.score, small.restart, small.ranking, small.stopped) == (
        kept.metrics,
        kept.score,
        kept.restart,
        kept.ranking,
        kept.stopped,
    )


@SETTINGS
@given(graphs(), st.integers(0, 10_000))
def test_prune_unread_equals_the_reference(g: Graph, seed: int) -> None:
    """prune_unread (one backward pass, the kept computes gathered as it goes) returns what
    the replaced implementation did, on random sequences with unread computes and repeats."""
    rng = random.Random(seed)
    needed = g.needed_nodes.tolist()
    seq = [v for v in needed for _ in range(rng.choice((0, 1, 1, 2)))]
    rng.shuffle(seq)
    assert prune_unread(g, seq) == reference.prune_unread(g, seq)
    plan = make_plan(g, "chen-sqrt", None, {}).schedule.compute_nodes.tolist()
    seq = [v for v in plan if rng.random() < 0.9] + plan
    out = prune_unread(g, seq)
    assert out == reference.prune_unread(g, seq)
    assert simulate(g, schedule_from_sequence(g, out)).metrics is not None


@SETTINGS
@given(graphs(), st.integers(0, 10_000), st.floats(0.0, 1.0), st.sampled_from([0.5, 2.0, 8.0, 1e9]))
def test_cover_equals_the_reference(g: Graph, seed: int, where: float, allowance: float) -> None:
    """_cover (steps found by bisection, stretches' reliefs summed as the steps pass, the
    replay and copies kept by content, the greedy cover's arrays built without a lookup
    per step) offers the same splits in the same order as the frozen copy, so it returns
    the same sequence, plain and with stretches, and again from what it kept; each
    sequence it returns replays validly."""
    rng = random.Random(seed)
    peak = store_all_peak(g)
    limit = int(g.lb + where * (peak - g.lb))
    try:
        # planned for more memory than the cover gets: there is excess to cover
        plan = make_plan(g, rng.choice(["chen-sqrt", "greedy", "dtr"]), max(limit + int(rng.random() * (peak - limit)), g.lb), {})
    except RematError:
        return
    seq = prune_unread(g, plan.schedule.compute_nodes.tolist())
    for cand in (seq, prune_unread(g, [v for v in seq if rng.random() < 0.9] + seq)):
        kept: dict = {}
        for extend in (False, True, False):
            want = reference.cover(g, cand, limit, allowance, extend)
            assert improve._cover(g, cand, limit, allowance, extend, kept) == want, extend
            assert improve._cover(g, cand, limit, allowance, extend) == want, extend
            if want is not None:
                assert simulate(g, schedule_from_sequence(g, want)).metrics is not None


@st.composite
def covers(draw) -> tuple[list[tuple[int, dict[int, int], list[int]]], dict[int, int], list[float], float]:
    """A cover problem as ``_cover`` poses it: steps with excess bytes, splits that relieve
    some of them (sizes and prices from small sets, so that ratios tie often; or sizes near
    2^60, past what 64-bit sums hold), chain costs and an allowance."""
    huge = draw(st.integers(0, 7)) == 0
    unit = 2**60 if huge else 1
    steps = draw(st.lists(st.integers(0, 40), min_size=1, max_size=12, unique=True))
    need = {j: draw(st.integers(1, 6)) * unit for j in steps}
    cost = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]), min_size=1, max_size=8))
    splits = []
    for _ in range(draw(st.integers(0, 14))):
        covered = draw(st.lists(st.sampled_from(steps), min_size=1, max_size=len(steps), unique=True))
        relief = {j: draw(st.integers(1, 5)) * unit for j in covered}
        chain = draw(st.lists(st.integers(0, len(cost) - 1), min_size=1, max_size=3))
        splits.append((draw(st.integers(0, 30)), relief, chain))
    allowance = draw(st.sampled_from([0.5, 2.0, 4.0, 8.0, 1e9]))
    return splits, need, cost, allowance


@SETTINGS
@given(covers())
def test_greedy_cover_equals_the_reference(problem) -> None:
    """The vectorised greedy cover takes the very splits, in the same order, as the scan it
    replaced, or fails where it fails (ties in ratio go to the earliest split)."""
    splits, need, cost, allowance = problem
    prices = [sum(cost[x] for x in chain) for _, _, chain in splits]
    got = _greedy_cover(list(splits), dict(need), prices, allowance)
    want = reference.greedy_cover(list(splits), dict(need), cost, allowance)
    assert got == want
