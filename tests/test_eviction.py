"""greedy and dtr do what their summaries say (`remat strategies`), checked on every step.

Summaries: greedy "replay store-all; when the budget would be exceeded evict the largest
resident value the compute under way does not need; recompute evicted values on demand";
dtr "the same replay, evicting the value with the least h = (its cost + its evicted
neighbours' costs) / (size · staleness), scoring at most 64 sampled values". Each plan is
replayed here: the first computations follow store-all's order; every eviction (a free
of a value that a first computation still to come reads) happens only when the next
compute would not fit; and the victim is the best by the strategy's rule among the values
that no compute up to the next first computation reads (the values the strategy may not
evict are among those). Every schedule also goes through the simulator.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as gen
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.schedule import COMPUTE
from remat_cli.simulate import simulate
from remat_cli.strategies import STRATEGIES
from remat_cli.strategies.greedy import dtr_score
from remat_cli.strategies.store_all import store_all_plan
from remat_cli.training import checkmate_training_graph


@st.composite
def graphs(draw) -> Graph:
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(3, 10))
    fwd = gen.chain(n) if draw(st.booleans()) else gen.random_dag(n, 0.35, seed=seed)
    fwd = gen.from_edges(n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, n), cost=rng.integers(1, 6, n).astype(float))
    return checkmate_training_graph(fwd)


def _check_replay(graph: Graph, name: str, budget: int) -> int:
    """Replay ``name``'s plan and assert its summary's rules; returns the evictions seen."""
    try:
        schedule = STRATEGIES[name].run(graph, budget, {}).schedule
    except NoPlanError:
        return 0
    metrics = simulate(graph, schedule).metrics
    assert metrics is not None and metrics.peak_bytes <= budget
    ops, nodes = schedule.ops.tolist(), schedule.nodes.tolist()
    mem, ws, preds = graph.mem.tolist(), graph.workspace.tolist(), graph.pred_lists
    first = []
    seen: set[int] = set()
    for op, v in zip(ops, nodes):
        if op == COMPUTE and v not in seen:
            seen.add(v)
            first.append(v)
    assert first == store_all_plan(graph).schedule.compute_nodes.tolist(), "first computations replay store-all"
    state = SimpleNamespace(
        mem=mem,
        cost=graph.cost.tolist(),
        preds=preds,
        succs=graph.succ_lists,
        nbrs=[(*p, *q) for p, q in zip(preds, graph.succ_lists)],
        evicted=bytearray(graph.n),
        last_access=[0] * graph.n,
        clock=0,
    )
    resident: set[int] = set()
    cur = graph.fixed_mem
    computed: set[int] = set()
    evictions = 0
    for k, (op, v) in enumerate(zip(ops, nodes)):
        if op == COMPUTE:
            resident.add(v)
            computed.add(v)
            cur += mem[v]
            state.evicted[v] = 0
            state.clock += 1
            state.last_access[v] = state.clock
            for u in preds[v]:
                state.last_access[u] = state.clock
            continue
        later = [j for j in range(k + 1, len(ops)) if ops[j] == COMPUTE]
        # an eviction: a first computation still to come reads v (other frees follow the
        # last such read, even when v is rebuilt later for a recomputed consumer)
        if any(nodes[j] not in computed and v in preds[nodes[j]] for j in later):
            evictions += 1
            nxt = nodes[later[0]]
            assert cur + mem[nxt] + ws[nxt] > budget, "evicted although the next compute fits"
            window: set[int] = set()
            for j in later:  # computes up to and including the next first computation
                window.update(preds[nodes[j]])
                if nodes[j] not in computed:
                    break
            free = [w for w in resident if w not in window and mem[w] > 0]
            if name == "greedy":
                assert all(mem[v] >= mem[w] for w in free), "greedy evicts the largest value"
            elif len(resident) <= 64:  # dtr scores every resident value when so few
                assert all(dtr_score(state, v) <= dtr_score(state, w) for w in free), "dtr evicts the least h"
            state.evicted[v] = 1
        resident.discard(v)
        cur -= mem[v]
    return evictions


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.floats(0.0, 1.0))
def test_greedy_and_dtr_follow_their_summaries(graph: Graph, where: float) -> None:
    budget = graph.lb + int(round(where * (store_all_peak(graph) - graph.lb)))
    for name in ("greedy", "dtr"):
        _check_replay(graph, name, budget)


def test_the_replay_sees_evictions() -> None:
    # the property above is not vacuous: on a 6-layer training chain below store-all both
    # strategies evict
    rng = np.random.default_rng(3)
    graph = checkmate_training_graph(gen.chain(6, mem=rng.integers(1, 9, 6), cost=rng.integers(1, 6, 6).astype(float)))
    budget = (graph.lb + store_all_peak(graph)) // 2
    assert _check_replay(graph, "greedy", budget) > 0
    assert _check_replay(graph, "dtr", budget) > 0


def test_dtr_score_is_the_summarys_formula() -> None:
    # v (cost 3, size 5) read 4 clock ticks ago; one evicted neighbour of cost 2, one
    # resident neighbour of cost 7: h = (3 + 2) / (5 · 4)
    state = SimpleNamespace(
        mem=[5, 1, 1],
        cost=[3.0, 2.0, 7.0],
        preds=[[], [0], [0]],
        succs=[[1, 2], [], []],
        nbrs=[(1, 2), (0,), (0,)],
        evicted=bytearray([0, 1, 0]),
        last_access=[7, 0, 0],
        clock=10,
    )
    assert dtr_score(state, 0)[0] == (3 + 2) / (5 * 4)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(40, 120), st.floats(0.3, 0.9))
def test_dtr_scoring_cut_short_picks_the_same_victims(seed: int, n: int, frac: float) -> None:
    """dtr stops scoring a value once its partial ratio passes the best so far (and keeps
    its walks, :class:`_DtrPicker`); its replay is the same, step for step, as one that
    scores every candidate to the end (more than 64 values resident: the sampled path), and
    valid."""
    from remat_cli.strategies.greedy import evict_schedule

    rng = np.random.default_rng(seed)
    fwd = gen.random_dag(n, 3.0 / n, seed=seed)
    fwd = gen.from_edges(n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, n), cost=rng.integers(1, 6, n).astype(float))
    graph = checkmate_training_graph(fwd)

    def full(state, v):  # the same score, without the cut-short walk
        return dtr_score(state, v)

    full.floor = dtr_score.floor  # type: ignore[attr-defined]
    order = store_all_plan(graph).schedule.compute_nodes.tolist()
    budget = max(graph.lb, int(store_all_peak(graph) * frac))
    cut = evict_schedule(graph, budget, dtr_score, order, sample=16)
    whole = evict_schedule(graph, budget, full, order, sample=16)
    assert (cut is None) == (whole is None)
    if cut is not None:
        assert cut.ops.tolist() == whole.ops.tolist() and cut.nodes.tolist() == whole.nodes.tolist()
        sim = simulate(graph, cut)
        assert sim.metrics is not None and sim.metrics.peak_bytes <= budget
