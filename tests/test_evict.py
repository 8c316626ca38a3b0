"""The memory-limit pass (twremat's post-processing) and its use in treewidth/pathwidth.

Every schedule goes through the simulator. Properties: the pass keeps a valid schedule
valid, never adds a compute, never raises a fitting schedule's peak above the limit, and
with room for every value at once computes each needed node once; treewidth and pathwidth
never cost more than the pass over their own bare recursion would (the paper's algorithm
with its reference implementation's memory-limit pass).
"""

from __future__ import annotations

import numpy as np
from graphgen import shape
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import simulate
from remat_cli.algorithms import decompose as D
from remat_cli.algorithms.segments import schedule_from_sequence
from remat_cli.strategies.evict import cleanup, memlimit_pass
from remat_cli.strategies.treewidth import recursive_schedule
from remat_cli.training import checkmate_training_graph
from remat_cli.units import say

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _graph(kind: str, n: int, seed: int) -> Graph:
    """A small generated training graph with random sizes and costs."""
    fwd = shape(kind, n, seed)
    rng = np.random.default_rng(seed)
    src, dst = fwd.edges()
    fwd = G.from_edges(fwd.n, np.stack([src, dst], axis=1), mem=rng.integers(1, 9, fwd.n), cost=rng.integers(1, 6, fwd.n).astype(float))
    return checkmate_training_graph(fwd)


graphs = st.builds(_graph, st.sampled_from(["chain", "skip", "diamonds", "dag"]), st.integers(3, 14), st.integers(0, 99))


def _bare(g: Graph) -> Schedule:
    sep = D.separator_tree(g, D.tree_decomposition(g))
    return recursive_schedule(g, sep, None)[0]


@SETTINGS
@given(graphs, st.floats(0.0, 1.2))
def test_pass_keeps_schedules_valid_and_within_a_reachable_limit(g: Graph, where: float) -> None:
    bare = _bare(g)
    before = simulate(g, bare).metrics
    assert before is not None
    peak = store_all_peak(g)
    limit = int(g.lb + where * (peak - g.lb))
    out = memlimit_pass(g, bare, limit)
    after = simulate(g, out).metrics
    assert after is not None, simulate(g, out).error
    assert after.computes <= before.computes
    assert after.cost <= before.cost
    if limit >= before.peak_bytes:  # the input fits: so does the output
        assert after.peak_bytes <= limit
    everything = g.fixed_mem + int(g.mem[g.needed].sum()) + int(g.workspace.max(initial=0))
    room = simulate(g, memlimit_pass(g, bare, everything)).metrics
    assert room is not None  # room for every value at once: nothing is ever recomputed
    assert room.recomputations == 0 and room.peak_bytes <= everything


@SETTINGS
@given(graphs)
def test_cleanup_only_removes_and_moves_frees_earlier(g: Graph) -> None:
    bare = _bare(g)
    out = cleanup(g, bare)
    b, a = simulate(g, bare).metrics, simulate(g, out).metrics
    assert b is not None and a is not None
    assert a.peak_bytes <= b.peak_bytes and a.computes <= b.computes
    # every free follows the value's last read: dropping any free... would not lower peak;
    # instead check that no value is resident at a compute that no later step reads
    ops, nodes = out.ops.tolist(), out.nodes.tolist()
    for k, (op, v) in enumerate(zip(ops, nodes)):
        if op == COMPUTE and int(v) not in set(g.targets.tolist()):
            later = [w for o, w in zip(ops[k + 1 :], nodes[k + 1 :]) if o == COMPUTE and v in g.pred_lists[w]]
            assert later, f"compute {g.ids[v]} is never read"


@SETTINGS
@given(graphs, st.floats(0.0, 1.0), st.sampled_from(["treewidth", "pathwidth"]))
def test_decomposition_strategies_never_cost_more_than_the_reference_pass(g: Graph, where: float, name: str) -> None:
    peak = store_all_peak(g)
    budget = int(g.lb + where * (peak - g.lb))
    ref = simulate(g, memlimit_pass(g, _bare(g), budget)).metrics
    assert ref is not None
    try:
        plan = make_plan(g, name, budget, {})
    except NoPlanError:
        # the reference fits nowhere either (pathwidth's bare recursion may differ, so
        # only treewidth's is compared here)
        assert name == "pathwidth" or ref.peak_bytes > budget
        return
    assert plan.metrics.peak_bytes <= budget
    if name == "treewidth" and ref.peak_bytes <= budget:
        assert plan.metrics.cost <= ref.cost + 1e-9


@pytest.mark.parametrize("layers", [16, 128])
@pytest.mark.parametrize("ratio", [0.9, 0.7, 0.5, 0.3])
def test_unit_chains_no_worse_than_the_reference(layers: int, ratio: float) -> None:
    """Unit training chains at the seed reference's budgets: treewidth ≤ the twremat-style
    pass over its own bare recursion, and the pass's plan replays within the budget."""
    g = checkmate_training_graph(G.chain(layers))
    budget = int(ratio * store_all_peak(g))
    ref = simulate(g, memlimit_pass(g, _bare(g), budget)).metrics
    assert ref is not None
    try:
        plan = make_plan(g, "treewidth", budget, {})
    except NoPlanError:
        assert ref.peak_bytes > budget
        return
    assert plan.metrics.peak_bytes <= budget
    if ref.peak_bytes <= budget:
        assert plan.metrics.cost <= ref.cost


def test_pass_keeps_everything_when_the_budget_allows() -> None:
    """Just under the store-all peak the pass recomputes little: on a residual training
    graph at 0.95x it costs less than the bare recursion and stays within the limit."""
    g = checkmate_training_graph(G.skip_chain(24))
    bare = _bare(g)
    budget = int(0.95 * store_all_peak(g))
    out = simulate(g, memlimit_pass(g, bare, budget)).metrics
    raw = simulate(g, bare).metrics
    assert out is not None and raw is not None
    assert out.peak_bytes <= budget
    assert out.cost < raw.cost


def test_auto_polishes_the_best_plans_with_the_pass() -> None:
    """auto runs the memory-limit pass over its cheapest fitting plans: on this irregular
    training graph at 0.7x it beats every fast strategy's own plan (each replayed)."""
    from remat_cli.strategies import fast_strategies

    g = checkmate_training_graph(G.random_dag(24, 0.15, seed=3, max_size=4))
    budget = int(0.7 * store_all_peak(g))
    auto = make_plan(g, "auto", budget, {})
    assert auto.metrics.peak_bytes <= budget
    others = []
    for s in fast_strategies():
        try:
            others.append(make_plan(g, s.name, budget, {}).metrics.cost)
        except NoPlanError:
            pass
    assert auto.metrics.cost < min(others)
    assert "memory-limit pass" in say(auto.info["polished"])


@SETTINGS
@given(graphs, st.floats(0.0, 0.5), st.sampled_from(["treewidth", "pathwidth"]))
def test_the_smallest_budget_named_is_met(g: Graph, where: float, name: str) -> None:
    """A budget that does not fit names a smallest budget, and planning at it succeeds."""
    budget = int(g.lb + where * (store_all_peak(g) - g.lb))
    try:
        make_plan(g, name, budget, {})
    except NoPlanError as exc:
        assert exc.min_budget is not None and exc.min_budget > budget
        assert make_plan(g, name, exc.min_budget, {}).metrics.peak_bytes <= exc.min_budget


def _cleanup_by_fixpoint(g: Graph, schedule: Schedule) -> list[int]:
    """The kept computes of :func:`cleanup` as first written: delete unread computes and
    repeat until nothing changes (the reference for the one-pass version)."""
    computes = schedule.compute_nodes.tolist()
    targets = set(g.targets.tolist())
    alive = [True] * len(computes)
    while True:
        current: dict[int, int] = {}
        used = [False] * len(computes)
        last_target: dict[int, int] = {}
        for k, v in enumerate(computes):
            if alive[k]:
                for u in g.pred_lists[v]:
                    used[current[u]] = True
                current[v] = k
                if v in targets:
                    last_target[v] = k
        dead = [k for k, v in enumerate(computes) if alive[k] and not used[k] and last_target.get(v) != k]
        if not dead:
            return [v for k, v in enumerate(computes) if alive[k]]
        for k in dead:
            alive[k] = False


@SETTINGS
@given(graphs, st.integers(0, 2**32 - 1))
def test_cleanup_keeps_what_the_fixpoint_keeps(g: Graph, seed: int) -> None:
    """The one-pass cleanup equals repeated deletion, also where deleting one compute makes
    its inputs' computes unread in turn (extra chains of recomputes, inserted at random)."""
    bare = _bare(g)
    seq = bare.compute_nodes.tolist()
    rng = np.random.default_rng(seed)
    for _ in range(int(rng.integers(0, 6))):  # recompute a random ancestor chain again
        k = int(rng.integers(0, len(seq)))
        v = seq[k]
        chain = [v]
        while g.pred_lists[chain[-1]] and rng.random() < 0.7:
            chain.append(int(rng.choice(g.pred_lists[chain[-1]])))
        seq[k + 1 : k + 1] = chain[::-1]
    from remat_cli.algorithms.segments import schedule_from_sequence

    noisy = schedule_from_sequence(g, seq)
    assert simulate(g, noisy).metrics is not None
    cleaned = cleanup(g, noisy)
    assert cleaned.compute_nodes.tolist() == _cleanup_by_fixpoint(g, noisy)
    assert simulate(g, cleaned).metrics is not None


def _frees_after_last_reader(g: Graph, seq: list[int]) -> tuple[list[int], list[int]]:
    """schedule_from_sequence written as the plain loop it replaces (the reference)."""
    preds = g.pred_lists
    latest = [-1] * g.n
    last_read: dict[int, int] = {}
    for p, v in enumerate(seq):
        for u in preds[v]:
            last_read[latest[u]] = p
        latest[v] = p
    frees_at: list[list[int]] = [[] for _ in seq]
    for p, v in enumerate(seq):
        frees_at[last_read.get(p, p)].append(v)
    ops: list[int] = []
    nodes: list[int] = []
    for p, v in enumerate(seq):
        ops.append(COMPUTE)
        nodes.append(v)
        for u in frees_at[p]:
            ops.append(FREE)
            nodes.append(u)
    return ops, nodes


@SETTINGS
@given(graphs, st.integers(0, 99))
def test_schedule_from_sequence_matches_the_loop(g: Graph, seed: int) -> None:
    """The vectorised schedule_from_sequence gives the loop's steps on recomputing sequences
    (the bare recursion's computes, and a random valid repetition of them); all valid."""
    seq = _bare(g).compute_nodes.tolist()
    rng = np.random.default_rng(seed)
    # recompute a few nodes at the end, each after its inputs (which seq computed already)
    extra: list[int] = []
    for v in rng.choice(seq, size=min(5, len(seq)), replace=False).tolist():
        extra.extend([*g.pred_lists[v], v])
    for s in (seq, seq + extra):
        want = _frees_after_last_reader(g, s)
        got = schedule_from_sequence(g, s)
        assert (got.ops.tolist(), got.nodes.tolist()) == want
        assert simulate(g, got).metrics is not None  # replayed by the simulator: valid


def _lazy_eviction_reference(g: Graph, schedule: Schedule, limit: int) -> Schedule:
    """lazy_eviction as the module docstring states it, each new candidate pushed at once:
    frees make candidates, recomputes of resident values are dropped, and evictions take
    the values no later step touches first, then the cheapest per byte (larger first,
    then the earliest stamp, then the lower id)."""
    import heapq
    import math

    ops, nodes = schedule.ops.tolist(), schedule.nodes.tolist()
    last_touch = [-1] * g.n
    for pos, (op, v) in enumerate(zip(ops, nodes)):
        if op == COMPUTE:
            last_touch[v] = pos
            for u in g.pred_lists[v]:
                last_touch[u] = pos
    mem, ws, cost = g.mem.tolist(), g.workspace.tolist(), g.cost.tolist()
    resident, candidate, stamp = [False] * g.n, [False] * g.n, [0] * g.n
    dead: list[tuple[int, int, int]] = []
    cheap: list[tuple[float, int, int, int]] = []
    cur, out = g.fixed_mem, []
    for pos, (op, v) in enumerate(zip(ops, nodes)):
        if op != COMPUTE:
            if resident[v] and not candidate[v]:
                candidate[v] = True
                stamp[v] += 1
                if last_touch[v] < pos:
                    heapq.heappush(dead, (last_touch[v], stamp[v], v))
                else:
                    heapq.heappush(cheap, (cost[v] / mem[v] if mem[v] else math.inf, -mem[v], stamp[v], v))
            continue
        if resident[v]:
            if candidate[v]:
                candidate[v] = False
                stamp[v] += 1
            continue
        while cur + mem[v] + ws[v] > limit:
            live = [e for e in dead if candidate[e[2]] and stamp[e[2]] == e[1]]
            if live:
                u = min(live)[2]
            else:
                live = [e for e in cheap if candidate[e[3]] and stamp[e[3]] == e[2]]
                if not live:
                    break
                u = min(live)[3]
            resident[u] = candidate[u] = False
            stamp[u] += 1
            cur -= mem[u]
            out.append((FREE, u))
        out.append((COMPUTE, v))
        resident[v] = True
        cur += mem[v]
    return Schedule(np.asarray([o for o, _ in out], dtype=np.int8), np.asarray([v for _, v in out], dtype=np.int32))


@SETTINGS
@given(graphs, st.floats(0.0, 1.0))
def test_lazy_eviction_is_the_reference_pass(g: Graph, where: float) -> None:
    """lazy_eviction defers each candidate's heap push to the first eviction after it (most
    are taken back before): its steps equal a plain reference that pushes at once and scans
    for the least live entry, step for step, on the cleaned bare recursion."""
    from remat_cli.strategies.evict import lazy_eviction

    bare = cleanup(g, _bare(g))
    limit = int(g.lb + where * (store_all_peak(g) - g.lb))
    got = lazy_eviction(g, bare, limit)
    want = _lazy_eviction_reference(g, bare, limit)
    assert got.ops.tolist() == want.ops.tolist() and got.nodes.tolist() == want.nodes.tolist()


@SETTINGS
@given(graphs, st.floats(0.0, 1.0))
def test_the_pass_past_its_deadline_keeps_the_rounds_it_did(g: Graph, where: float) -> None:
    """Anytime (a round on grid1000 at its lower bound: 0.3 s of clean-up and eviction past
    a 1 s limit): with the deadline passed, a round looking at it every step stops (None)
    and the pass returns its input cleaned up: valid, no compute added; with no deadline,
    the same pass as before."""
    import time

    from remat_cli.strategies import evict

    bare = _bare(g)
    limit = int(g.lb + where * (store_all_peak(g) - g.lb))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evict, "DEADLINE_EVERY", 1)
        late = time.perf_counter() - 1.0
        clean = cleanup(g, bare)
        if len(clean) > 1:
            assert evict.lazy_eviction(g, clean, limit, late) is None
        stopped = memlimit_pass(g, bare, limit, deadline=late)
    assert stopped.ops.tolist() == clean.ops.tolist() and stopped.nodes.tolist() == clean.nodes.tolist()
    assert simulate(g, stopped).metrics is not None
    full = memlimit_pass(g, bare, limit)
    again = memlimit_pass(g, bare, limit, deadline=time.perf_counter() + 3600.0)
    assert full.ops.tolist() == again.ops.tolist() and full.nodes.tolist() == again.nodes.tolist()
