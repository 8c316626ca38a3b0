"""min-memory's first dag run on a graph made at once with numpy (``_dag_at_once``: every
turn's computes from its roots' post-orders, its frees from each value's last reader)
equals the loop of the frozen copy it replaces (tests/min_memory_ahead_reference.py, main
before r16-mm): the same steps, the same None and turn past the cap, the same turns kept
for the next runs (``TurnBlocks``), with (turn, node) tables and with sorts; and where it
does not apply (a target recomputed, a root with a target among its ancestors) the loop
runs as before. Every schedule goes through the simulator."""

from __future__ import annotations

import min_memory_ahead_reference as reference
import numpy as np
import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_min_memory_blocks_same import _topological_targets
from test_min_memory_same import cases

from remat_cli.loaders import load_graph
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _steps(s) -> tuple | None:
    return None if s is None or s is False else (s.ops.tolist(), s.nodes.tolist())


def _first_run(g, targets: list[int], cap: int, drop: frozenset[int]) -> bool:
    """The first dag run of a fresh ``TurnBlocks``, new and frozen: the same outcome, the
    same turn past the cap, the same turns kept. True where the new one was made at once."""
    preds, by_su = M._search_orders(g)
    anc = M._ancestor_bits(g)
    assert anc is not None
    new_blocks, old_blocks = M.TurnBlocks(anc), reference.TurnBlocks(anc)
    new_turns: list[int] = []
    old_turns: list[int] = []
    at_once = M._dag_at_once(targets, preds, by_su, cap, drop, [], M.TurnBlocks(anc)) is not False
    new = M._dag_schedule(targets, preds, by_su, cap, drop, None, new_turns, new_blocks)
    old = reference._dag_schedule(targets, preds, by_su, cap, drop, None, old_turns, old_blocks)
    assert (new is False) == (old is False)
    assert _steps(new) == _steps(old) and new_turns == old_turns
    assert new_blocks.made == old_blocks.made
    if new is not None and new is not False:
        assert simulate(g, new).metrics is not None
    return at_once


@SETTINGS
@given(case=cases(), dense=st.booleans(), seed=st.integers(0, 10_000), how=st.integers(0, 2))
def test_the_first_dag_run_is_the_loops(monkeypatch, case, dense, seed, how):
    """Drawn graphs (training graphs and plain DAGs), target orders (topological or not),
    caps and dropped targets; also a random topological order with its first targets
    dropped (the rounds of ``_variants``)."""
    g, targets, cap, drop = case
    if not dense:
        monkeypatch.setattr(M, "AT_ONCE_TABLE", 0)
    if how:
        targets = _topological_targets(g, seed)
        drop = frozenset(targets[:how])
    _first_run(g, targets, cap, drop)


@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("kind", ["chain", "skip", "dag"])
def test_training_graphs_are_made_at_once(monkeypatch, dense, kind):
    """On training graphs (targets: the backward nodes, in file order and in other
    topological orders) the run is made at once, and it is the loop's; with caps passed
    part way too."""
    if not dense:
        monkeypatch.setattr(M, "AT_ONCE_TABLE", 0)
    for seed in range(6):
        g = training_graph(kind, 30 + seed, seed, p=0.25)
        file_order, sa_order, cap = M._target_orders(g)
        for order in (file_order, sa_order, _topological_targets(g, seed)):
            assert _first_run(g, order, cap, frozenset())
            for run_cap in (400, 40, 3):  # (small caps: arrays past the cap's share go to the loop)
                _first_run(g, order, run_cap, frozenset())


@pytest.mark.parametrize("name", ["random1000", "nn1000", "grid1000"])
def test_the_1000_node_graphs_are_made_at_once(name):
    """The store-all order's run of min-memory's variants (the first dag run) on the
    1,000-node graphs, and the file order's, at once and as the loop makes them."""
    g = load_graph(f"/work/graphs/{name}.json") if __import__("os").path.exists(f"/work/graphs/{name}.json") else None
    if g is None:
        pytest.skip("the 1,000-node graphs are not here")
    file_order, sa_order, cap = M._target_orders(g)
    assert _first_run(g, sa_order, cap, frozenset())
    assert _first_run(g, file_order, cap, frozenset())


def test_a_recomputed_target_leaves_it_to_the_loop():
    """Targets in an order that is not topological (a target recomputed in a turn): not
    made at once; the loop's outcome."""
    g = training_graph("dag", 20, 3, p=0.3)
    targets = sorted(g.targets.tolist(), key=g.topo_rank.tolist().__getitem__)[::-1]
    assert not _first_run(g, targets, 10**6, frozenset())
    rng = np.random.default_rng(0)
    assert not _first_run(g, list(rng.permutation(targets)), 10**6, frozenset(targets[:3]))


@SETTINGS
@given(
    case=cases(),
    dense=st.booleans(),
    runs=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from([1, 5, 20, 60, 10**6]), st.integers(0, 3)), min_size=1, max_size=4),
)
def test_runs_sharing_turns_are_the_loops(monkeypatch, case, dense, runs):
    """Runs one after the other on one ``TurnBlocks`` (as ``_variants``'s: the other order
    of the targets, the rounds that drop a target), new and frozen, each with its own:
    the kept turns are replayed and the others made at once where that applies; the same
    outcomes, turns past the cap and turns kept after every run."""
    g, targets, cap, drop = case
    if not dense:
        monkeypatch.setattr(M, "AT_ONCE_TABLE", 0)
    preds, by_su = M._search_orders(g)
    anc = M._ancestor_bits(g)
    assert anc is not None
    new_blocks, old_blocks = M.TurnBlocks(anc), reference.TurnBlocks(anc)
    plan = [(targets, cap, drop)]
    for seed, run_cap, how in runs:
        order = _topological_targets(g, seed)
        plan.append((order, run_cap, drop if how == 0 else frozenset(order[: how - 1]) | (drop if how == 1 else frozenset())))
        plan.append((targets, run_cap, plan[-1][2]))
    for order, run_cap, run_drop in plan:
        new_turns: list[int] = []
        old_turns: list[int] = []
        new = M.min_memory_schedule(g, order, True, run_cap, run_drop, None, new_turns, blocks=new_blocks)
        old = reference.min_memory_schedule(g, order, True, run_cap, run_drop, None, old_turns, blocks=old_blocks)
        assert _steps(new) == _steps(old) and new_turns == old_turns
        assert new_blocks.made == old_blocks.made
        if new is not None:
            assert simulate(g, new).metrics is not None
