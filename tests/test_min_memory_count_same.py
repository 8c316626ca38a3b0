"""min-memory's counted caps and its lighter dag loop (issue 14 item 1: random1000's tree
and from-scratch variants ran 0.4 s and 0.2 s to pass their cap and give nothing) leave
every run as the frozen recursions make it (tests/min_memory_reference.py, the code as
of d23b961, which the loops they replace equal: tests/test_min_memory_same.py): the same
steps, the same None past the cap and the same turn in which it was passed, for both
variants and the from-scratch schedule, topological orders and any other, dropped targets,
caps below, at and above the run's computes, and counts that give up. The counts
themselves are exact: a cap one below a run's computes is passed in the run's last turn, a
cap equal to them is not. Every schedule goes through the simulator."""

from __future__ import annotations

import min_memory_reference as reference
import numpy as np
import pytest
from graphgen import shape
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw) -> tuple[Graph, list[int], frozenset[int], bool]:
    """(graph, targets, dropped targets, whether the order is topological): training graphs
    (or plain DAGs) of chains, skip chains, diamonds and random DAGs up to 30 forward nodes,
    sizes and workspaces from small sets (ties in tree numbers), targets in topological
    order (as min-memory runs them) or permuted."""
    kind = draw(st.sampled_from(["chain", "skip", "diamonds", "dag", "dag"]))
    n = draw(st.integers(2, 30))
    seed = draw(st.integers(0, 10_000))
    fwd = shape(kind, n, seed, p=draw(st.floats(0.05, 0.6)) if kind == "dag" else 0.3)
    rng = np.random.default_rng(seed)
    src, dst = fwd.edges()
    fwd = G.from_edges(fwd.n, np.stack([src, dst], axis=1), mem=rng.integers(0, 4, fwd.n), cost=rng.choice([0.0, 1.0, 2.5], fwd.n))
    g = checkmate_training_graph(fwd) if draw(st.integers(0, 3)) else fwd
    src, dst = g.edges()
    g = Graph.from_arrays(
        ids=g.ids,
        ops=g.ops,
        kinds=g.kinds,
        mem=g.mem,
        cost=g.cost,
        workspace=rng.choice([0, 0, 1, 3], g.n),
        src=src,
        dst=dst,
        fixed_mem=0,
        name=g.name,
        targets=g.targets,
    )
    rank = g.topo_rank.tolist()
    targets = sorted(g.targets.tolist(), key=rank.__getitem__)
    topological = draw(st.integers(0, 3)) > 0
    if not topological:
        targets = list(draw(st.permutations(targets)))
    drop = frozenset(t for t in targets if draw(st.integers(0, 5)) == 0)
    return g, targets, drop, topological


def _steps(s) -> tuple | None:
    if s is None:
        return None
    return (s.ops.tolist(), s.nodes.tolist())


def _computes(s) -> int:
    return int(np.count_nonzero(s.ops == COMPUTE))


#: The largest cap tried: runs past it (unfoldings) are tried at caps up to it.
BIG = 30_000


def _caps(whole, data) -> list[int]:
    """Caps around a run's computes (``whole``, None past :data:`BIG`): past them, at them,
    one below, and some way below."""
    top = BIG if whole is None else _computes(whole)
    below = data.draw(st.integers(1, max(1, top - 1)), label="cap below")
    return sorted({1, below, max(1, top - 1), top, top + 1})


def _same_runs(g: Graph, targets: list[int], drop: frozenset[int], data) -> None:
    for memo in (True, False):
        whole = reference.min_memory_schedule(g, targets, memo, BIG, drop)
        for cap in _caps(whole, data):
            turns: list[int] = []
            old_turns: list[int] = []
            new = M.min_memory_schedule(g, targets, memo, cap, drop, None, turns)
            old = reference.min_memory_schedule(g, targets, memo, cap, drop, None, old_turns)
            assert _steps(new) == _steps(old) and turns == old_turns
            event(f"{'dag' if memo else 'tree'} run {'made' if new is not None else 'past its cap'}")
            if new is not None:
                assert simulate(g, new).metrics is not None
    whole = reference.scratch_schedule(g, targets, BIG)
    for cap in _caps(whole, data):
        new = M.scratch_schedule(g, targets, cap)
        assert _steps(new) == _steps(reference.scratch_schedule(g, targets, cap))
        event(f"from-scratch run {'made' if new is not None else 'past its cap'}")
        if new is not None:
            assert simulate(g, new).metrics is not None


@SETTINGS
@given(cases(), st.data())
def test_runs_are_the_references(case, data) -> None:
    g, targets, drop, _ = case
    _same_runs(g, targets, drop, data)


@SETTINGS
@given(cases(), st.data())
def test_runs_are_the_references_when_the_counts_give_up(case, data) -> None:
    """Counts that give up at once, or part way, leave the runs to themselves."""
    g, targets, drop, _ = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "_COUNT_BITS", g.n * data.draw(st.integers(0, 6), label="subproblems"))
        _same_runs(g, targets, drop, data)


@SETTINGS
@given(cases())
def test_counts_are_exact(case) -> None:
    """Unless they give up: the tree variant's count passes a cap one below the run's
    computes in the turn the run does, and not a cap equal to them; so does the
    from-scratch one."""
    g, targets, drop, _ = case
    mem = g.mem.tolist()
    preds = [sorted(set(p)) for p in g.pred_lists]
    su = M.tree_numbers(g)
    by_su = [sorted(p, key=lambda u: mem[u] - su[u]) for p in preds]
    whole = reference.min_memory_schedule(g, targets, False, BIG, drop)
    c = BIG + 1 if whole is None else _computes(whole)  # past BIG: the count passes BIG in the run's turn
    big = 4 * c + 8  # so that the count may meet every subproblem
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "_count_limit", lambda n, cap: big)
        if whole is not None:
            assert M._tree_turn_past(g, targets, c, drop, preds, by_su) == 0
        if c:
            turns: list[int] = []
            assert reference.min_memory_schedule(g, targets, False, c - 1, drop, turns=turns) is None
            assert M._tree_turn_past(g, targets, c - 1, drop, preds, by_su) == turns[0]
    order = [sorted(sorted(set(p)), key=lambda u: su[u] - mem[u], reverse=True) for p in g.pred_lists]
    whole = reference.scratch_schedule(g, targets, BIG)
    scratch = BIG + 1 if whole is None else _computes(whole)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "_count_limit", lambda n, cap: 4 * scratch + 8)
        if whole is not None:
            assert M._scratch_past(g, targets, scratch, order) is False
        if scratch:
            assert M._scratch_past(g, targets, scratch - 1, order) is True


@SETTINGS
@given(cases())
def test_the_dag_loop_runs_on_topological_orders(case) -> None:
    """The lighter dag loop makes the run whenever the order is topological (min-memory's
    orders), and gives way to the general loop only where a kept target is recomputed."""
    g, targets, drop, topological = case
    mem = g.mem.tolist()
    preds = [sorted(set(p)) for p in g.pred_lists]
    su = M.tree_numbers(g)
    by_su = [sorted(p, key=lambda u: mem[u] - su[u]) for p in preds]
    made = M._dag_schedule(targets, preds, by_su, BIG, drop, None, None)
    if topological:
        assert made is not False
    event("dag loop made it" if made is not False else "general loop made it")
    if made is not False:
        assert _steps(made) == _steps(reference.min_memory_schedule(g, targets, True, BIG, drop))


def test_a_large_random_dag_passes_its_caps_where_the_reference_does() -> None:
    """A 240-node training DAG whose tree and from-scratch runs unfold far past a cap of 40
    computes per node (as random1000's do): None, in the reference's turn."""
    fwd = G.random_dag(120, 0.1, seed=5)
    rng = np.random.default_rng(5)
    fwd = G.from_edges(fwd.n, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 9, fwd.n), cost=rng.integers(1, 5, fwd.n).astype(float))
    g = checkmate_training_graph(fwd)
    targets = sorted(g.targets.tolist(), key=g.topo_rank.tolist().__getitem__)
    cap = 40 * g.n
    for memo in (True, False):
        turns: list[int] = []
        old_turns: list[int] = []
        new = M.min_memory_schedule(g, targets, memo, cap, turns=turns)
        assert _steps(new) == _steps(reference.min_memory_schedule(g, targets, memo, cap, turns=old_turns))
        assert turns == old_turns
    assert M.min_memory_schedule(g, targets, False, cap) is None  # the case the count is for
    assert M.scratch_schedule(g, targets, cap) is None
    assert reference.scratch_schedule(g, targets, cap) is None


@SETTINGS
@given(cases(), st.data())
def test_unfolded_recomputations_are_counted_exactly(case, data) -> None:
    """lower_peak's recomputation of a value from what is resident, unfolded (no ``memo``):
    the count of its computes is the recursion's own (its steps are twice that less one),
    from any resident set, so _evict gives up exactly where the recursion passes its cap."""
    g, targets, drop, _ = case
    mem = g.mem.tolist()
    su = M.tree_numbers(g)
    order = [sorted(sorted(set(p)), key=lambda u: su[u] - mem[u], reverse=True) for p in g.pred_lists]
    anc = M._ancestor_bits(g)
    u = data.draw(st.sampled_from(range(g.n)), label="u")
    resident = {w for w in range(g.n) if w != u and data.draw(st.integers(0, 2), label="resident") == 0}
    held = sum(1 << w for w in resident)
    block = M._recompute(u, resident, order, BIG, False)
    count = M._unfolded_computes([u], held, order, anc, BIG, 10**9)
    if block is None:  # past BIG steps
        assert 2 * count - 1 > BIG
        return
    assert 2 * count - 1 == len(block[0]) and count == block[0].count(COMPUTE)
    for cap in {max(0, len(block[0]) - 1), len(block[0])}:
        assert (M._recompute(u, resident, order, cap, False) is None) == (2 * count - 1 > cap)


@SETTINGS
@given(cases())
def test_lower_peak_is_the_same_with_its_recomputations_counted(case) -> None:
    """lower_peak on each variant's schedule, with and without the counts (no ancestor bit
    sets: the loop as before): the same schedule, values recomputed and steps spent, also
    under step budgets that stop it part way. Every schedule goes through the simulator."""
    g, targets, drop, _ = case
    seeds = [M.min_memory_schedule(g, targets, memo, BIG, drop) for memo in (True, False)]
    seeds.append(M.scratch_schedule(g, targets, BIG))
    for seed in seeds:
        if seed is None or simulate(g, seed).metrics is None:
            continue
        for steps in (50, 2_000, 200_000):
            new = M.lower_peak(g, seed, steps)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(M, "_ancestor_bits", lambda graph: None)
                old = M.lower_peak(g, seed, steps)
            assert _steps(new[0]) == _steps(old[0]) and new[1:] == old[1:]
            assert simulate(g, new[0]).metrics is not None
