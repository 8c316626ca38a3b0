"""The faster memory-limit pass (issue 14 item 1: ``cleanup`` lays out its schedule with one
stable sort by node, ``segments._by_node``, which ``schedule_from_sequence`` uses from
``BY_NODE_COMPUTES`` computes) equals the code it replaced
(tests/memlimit_reference.py): ``cleanup``, one round of ``lazy_eviction`` and the whole
``memlimit_pass`` give the reference's steps, node for node, on the schedules the
strategies hand it (the bare treewidth/pathwidth recursion, budgeted runs, store-all) and
on random valid schedules that recompute and free at random, at limits from below the
lower bound to above the store-all peak, with sizes and costs of 0 (ties). Every schedule
goes through the simulator."""

from __future__ import annotations

import math

import memlimit_reference as reference
import numpy as np
from graphgen import tied_graph
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.algorithms import segments
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies import evict, treewidth
from remat_cli.strategies.store_all import store_all_plan

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _random_schedule(g: Graph, seed: int, p_free: float) -> Schedule:
    """A valid schedule of every target that computes the needed nodes in topological
    order, recomputing missing inputs on demand (depth first), and frees each resident
    value with probability ``p_free`` after every step: recomputations, frees that are
    not at last use, values never read again."""
    rng = np.random.default_rng(seed)
    preds = g.pred_lists
    resident = [False] * g.n
    ops: list[int] = []
    nodes: list[int] = []

    def obtain(v: int) -> None:
        for u in preds[v]:
            if not resident[u]:
                obtain(u)
        for u in preds[v]:  # an input freed while obtaining another one comes back
            if not resident[u]:
                obtain(u)
        ops.append(COMPUTE)
        nodes.append(v)
        resident[v] = True

    for v in np.argsort(g.topo_rank).tolist():
        if not g.needed[v]:
            continue
        if not resident[v] or rng.random() < 0.2:
            if resident[v]:
                ops.append(FREE)
                nodes.append(v)
                resident[v] = False
            obtain(v)
        for u in [u for u in range(g.n) if resident[u] and u != v and rng.random() < p_free]:
            ops.append(FREE)
            nodes.append(u)
            resident[u] = False
    s = Schedule(np.asarray(ops, dtype=np.int8), np.asarray(nodes, dtype=np.int32))
    assert simulate(g, s).valid
    return s


def _steps(s: Schedule | None) -> tuple[list[int], list[int]] | None:
    return None if s is None else (s.ops.tolist(), s.nodes.tolist())


def _schedules(g: Graph, seed: int, tree: str) -> list[Schedule]:
    """What the strategies pass to the pass: the bare recursion, a budgeted run, store-all;
    and two random schedules."""
    if tree == "tree":
        sep = D.separator_tree(g, D.tree_decomposition(g))
    else:
        sep = D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))
    out = [treewidth.recursive_schedule(g, sep, None)[0], store_all_plan(g).schedule]
    peak = store_all_peak(g)
    try:
        out.append(treewidth.recursive_schedule(g, sep, int(0.6 * peak) - g.fixed_mem, cache=True, eager=True)[0])
    except treewidth.RecursionStopped:
        pass
    out.extend(_random_schedule(g, seed + k, p) for k, p in enumerate((0.05, 0.4)))
    return out


def _check(g: Graph, s: Schedule, limit: int) -> None:
    """cleanup, one round and the whole pass (from the schedule, and from its clean-up)
    as the reference gives them; each output valid."""
    clean = evict.cleanup(g, s)
    assert _steps(clean) == _steps(reference.cleanup(g, s))
    assert simulate(g, clean).valid
    once = evict.lazy_eviction(g, clean, limit)
    assert _steps(once) == _steps(reference.lazy_eviction(g, clean, limit))
    for cleaned, given_ in ((False, s), (True, clean)):
        for rounds in (1, 4):
            got = evict.memlimit_pass(g, given_, limit, rounds=rounds, cleaned=cleaned)
            assert _steps(got) == _steps(reference.memlimit_pass(g, given_, limit, rounds=rounds, cleaned=cleaned))
            result = simulate(g, got)
            assert result.valid, result.error


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(4, 24),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
)
def test_memlimit_pass_is_the_reference(kind: str, n: int, seed: int, tree: str) -> None:
    """The pass over each schedule a plan hands it, at limits from below the lower bound
    (nothing fits: the soft limit) to above the store-all peak (nothing is evicted)."""
    g = tied_graph(kind, n, seed)
    peak = store_all_peak(g)
    for s in _schedules(g, seed, tree):
        for limit in sorted({max(0, int(g.lb) - 1), int(0.3 * peak), int(0.5 * peak), int(0.8 * peak), peak + 1}):
            _check(g, s, limit)


@SETTINGS
@given(st.integers(2, 60), st.integers(0, 10_000), st.floats(0.0, 0.9))
def test_from_sequence_is_the_reference(n: int, seed: int, p_free: float) -> None:
    """The schedule laid out from a compute sequence (instances read by later computes,
    values never read, several frees due at one step) is the reference's."""
    g = tied_graph("dag", n, seed)
    s = _random_schedule(g, seed, p_free)
    seq = s.compute_nodes.tolist()
    want = _steps(reference.schedule_from_sequence(g, seq))
    assert _steps(segments._by_node(g, np.asarray(seq, dtype=np.int64))) == want  # (short: called directly)
    got = segments.schedule_from_sequence(g, seq)
    assert _steps(got) == want and simulate(g, got).valid
    assert _steps(segments.schedule_from_sequence(g, [])) == _steps(reference.schedule_from_sequence(g, []))


def test_from_sequence_on_more_than_65536_nodes() -> None:
    """Node ids past 16 bits sort without the 16-bit key (the same layout)."""
    n = 70_000
    edges = np.array([(i, i + 1) for i in range(n - 1)] + [(n - 60, n - 1), (5, n - 2)], dtype=np.int64)
    g = G.from_edges(n, edges, mem=np.ones(n, dtype=np.int64), cost=np.ones(n))
    seq = list(range(n)) + [n - 3, n - 2, n - 1]
    assert len(seq) >= segments.BY_NODE_COMPUTES  # (laid out by node)
    assert _steps(segments.schedule_from_sequence(g, seq)) == _steps(reference.schedule_from_sequence(g, seq))


@pytest.mark.parametrize("kind", ["grid", "pkt"])
def test_memlimit_pass_past_its_deadline_is_the_reference(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the deadline both stop at the same round (the clock looked at every few steps)."""
    monkeypatch.setattr(evict, "DEADLINE_EVERY", 7)
    monkeypatch.setattr(reference, "DEADLINE_EVERY", 7)
    g = tied_graph(kind, 40, 3)
    sep = D.separator_tree(g, D.tree_decomposition(g))
    bare = treewidth.recursive_schedule(g, sep, None)[0]
    limit = int(0.5 * store_all_peak(g))
    for deadline in (-math.inf, 0.0):
        got = evict.memlimit_pass(g, bare, limit, deadline=deadline)
        assert _steps(got) == _steps(reference.memlimit_pass(g, bare, limit, deadline=deadline))
        assert simulate(g, got).valid
        assert _steps(evict.lazy_eviction(g, bare, limit, deadline)) == _steps(reference.lazy_eviction(g, bare, limit, deadline))


#: The longest compute sequence ``_long_inputs`` hands the (slow) reference.
LONG_CAP = 30_000


def _long_inputs(g: Graph) -> list[Schedule]:
    """Long schedules like those the pass meets on a thousand nodes (the bare recursion on
    grid1000: 175,000 computes of about 1,000 values, every one read; min-memory's plans:
    recomputes everywhere), from ``BY_NODE_COMPUTES`` to ``LONG_CAP`` computes: the bare
    recursion's and min-memory's tree-variant computes (one repeated until that long where
    it is shorter: each copy recomputes what it reads), laid out with frees at last use,
    and the same computes with each value freed only just before it is computed again."""
    from remat_cli.strategies import min_memory as M

    sep = D.separator_tree(g, D.tree_decomposition(g))
    sequences = [treewidth.recursive_schedule(g, sep, None)[0].compute_nodes.tolist()]
    targets = sorted(g.targets.tolist(), key=g.topo_rank.__getitem__)
    made = M.min_memory_schedule(g, targets, False, LONG_CAP)
    if made is not None:
        sequences.append(made.compute_nodes.tolist())
    out = []
    for seq in sequences:
        long = list(seq)
        while seq and len(long) < segments.BY_NODE_COMPUTES:
            long += seq
        if not segments.BY_NODE_COMPUTES <= len(long) <= LONG_CAP:
            continue
        out.append(segments.schedule_from_sequence(g, long))
        ops: list[int] = []
        nodes: list[int] = []
        resident = [False] * g.n
        for v in long:
            if resident[v]:
                ops.append(FREE)
                nodes.append(v)
            ops.append(COMPUTE)
            nodes.append(v)
            resident[v] = True
        out.append(Schedule(np.asarray(ops, dtype=np.int8), np.asarray(nodes, dtype=np.int32)))
    for s in out:
        assert simulate(g, s).valid
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([("grid", 60, 200), ("pkt", 60, 200), ("diamonds", 60, 200), ("dag", 30, 80)]),
    st.floats(0, 1),
    st.integers(0, 10_000),
)
def test_memlimit_pass_on_long_inputs_is_the_reference(shape: tuple[str, int, int], at: float, seed: int) -> None:
    """On long inputs (``_long_inputs``: cleanup's sort shared by its look ahead and its
    layout, the last reads found at run ends; the round's last touches off the graph's
    edges, its frees counted per compute) cleanup, one round from the input and from its
    clean-up, and the whole pass are the reference's, at limits from below the lower bound
    to above the store-all peak; each output valid."""
    kind, lo, hi = shape
    g = tied_graph(kind, lo + int(at * (hi - lo)), seed)
    peak = store_all_peak(g)
    for s in _long_inputs(g):
        clean = evict.cleanup(g, s)
        assert _steps(clean) == _steps(reference.cleanup(g, s))
        assert simulate(g, clean).valid
        for limit in sorted({max(0, int(g.lb) - 1), int(0.3 * peak), int(0.6 * peak), peak + 1}):
            for given_ in (s, clean):
                once = evict.lazy_eviction(g, given_, limit)
                assert _steps(once) == _steps(reference.lazy_eviction(g, given_, limit))
                assert simulate(g, once).valid
            got = evict.memlimit_pass(g, clean, limit, cleaned=True)
            assert _steps(got) == _steps(reference.memlimit_pass(g, clean, limit, cleaned=True))
            result = simulate(g, got)
            assert result.valid, result.error
