"""min-memory's variants made with pieces made ahead by another process (``make_ahead``:
the file order's dag turns that the store-all order's run does not make, the counts of the
tree and from-scratch runs; ``auto``'s second process makes them before its first offer)
equal those of the frozen copy made without them (tests/min_memory_ahead_reference.py,
main before r16-mm): the same names, steps and figures, in the same order, whether all,
some or none of the pieces came (a stop request ends the making ahead part way), on
generated graphs with caps that stop runs part way, made at once or paused. And auto's
plans where min-memory wins, with both processes forced on, equal the frozen auto's
(tests/auto_reference.py). Every schedule goes through the simulator."""

from __future__ import annotations

from pathlib import Path

import min_memory_ahead_reference as reference
import pytest
from graphgen import tied_graph, training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_auto_same import _check

from remat_cli.loaders import load_graph
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"


def _flat(variants) -> list[tuple]:
    return [(name, s.ops.tolist(), s.nodes.tolist(), m) for name, s, m in variants]


def _same(graph_of, monkeypatch, per_node: int, rounds: int, looks: int | None, pauses: int = 0) -> list[str]:
    """The variants of a fresh copy of the graph made with the pieces another copy made
    ahead (its stop request says stop from its ``looks``-th look; None: never), new, and
    those of the frozen copy; with ``pauses`` the new making is paused by a stop request
    at its first ``pauses`` looks. Returns the names of the pieces made ahead."""
    for module in (M, reference):
        monkeypatch.setattr(module, "MAX_COMPUTES_PER_NODE", per_node)
        monkeypatch.setattr(module, "ROUNDS_COMPUTES", rounds)
    old = reference.min_memory_variants(graph_of())
    asked = [0]

    def enough() -> bool:
        asked[0] += 1
        return looks is not None and asked[0] >= looks

    elsewhere = graph_of()
    pieces = list(M.make_ahead(elsewhere, enough))
    g = graph_of()
    for key, value in pieces:
        assert key.startswith(M.AHEAD)
        g.derived(key, lambda value=value: value)
    paused = [0]

    def stop() -> bool:
        paused[0] += 1
        return paused[0] <= pauses

    for _ in range(pauses + 1):
        M.min_memory_variants(g, None, stop if pauses else None)
        if M.variants_made(g):
            break
    got = M.min_memory_variants(g)
    assert _flat(got) == _flat(old)
    for _, s, m in got:
        assert simulate(g, s).metrics == m
    return [key[len(M.AHEAD) :] for key, _ in pieces]


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@SETTINGS
@given(
    kind=st.sampled_from(["grid", "skip", "ktree", "diamonds", "dag"]),
    n=st.integers(4, 30),
    seed=st.integers(0, 10_000),
    per_node=st.sampled_from([1, 2, 4, 12, 400]),
    rounds=st.sampled_from([0, 50, 200_000]),
    looks=st.sampled_from([None, None, 1, 2, 3, 5, 20]),
    pauses=st.sampled_from([0, 0, 3, 40]),
)
def test_variants_with_pieces_made_ahead_are_the_references(monkeypatch, kind, n, seed, per_node, rounds, looks, pauses):
    _same(lambda: tied_graph(kind, n, seed), monkeypatch, per_node, rounds, looks, pauses)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["chain", "skip", "dag"]),
    n=st.integers(6, 40),
    seed=st.integers(0, 1000),
    per_node=st.sampled_from([3, 400]),
    looks=st.sampled_from([None, None, 2, 10]),
)
def test_variants_of_training_graphs_with_pieces_made_ahead_are_the_references(monkeypatch, kind, n, seed, per_node, looks):
    _same(lambda: training_graph(kind, n, seed, p=0.25), monkeypatch, per_node, 200_000, looks)


@pytest.mark.parametrize("name", ["random_dag.twremat.txt", "unet_train.json", "diamond_dag.nodelink.json", "training_chain_32.json"])
@pytest.mark.parametrize("looks", [None, 3])
def test_variants_of_the_samples_with_pieces_made_ahead_are_the_references(monkeypatch, name, looks):
    _same(lambda: load_graph(SAMPLES / name), monkeypatch, 400, 200_000, looks)


def test_a_training_dag_gets_every_piece(monkeypatch):
    """On a random training DAG whose two orders of the targets differ, every piece is made
    ahead (turns of the file order's run, the tree counts, the from-scratch count) and used:
    the variants are the reference's."""
    names = _same(lambda: training_graph("dag", 40, 7, p=0.25), monkeypatch, 400, 200_000, None)
    assert names == ["turns", "tree", "scratch"]


def test_the_file_orders_turns_made_ahead_are_those_the_store_all_orders_run_does_not_make():
    """The turns made ahead are the file order's turns whose keys the store-all order's run
    does not have (``_turn_keys`` predicts that run's keys: those it keeps in its blocks)."""
    g = training_graph("dag", 40, 7, p=0.25)
    file_order, sa_order, cap = M._target_orders(g)
    preds, by_su = M._search_orders(g)
    anc = M._ancestor_bits(g)
    blocks = M.TurnBlocks(anc)
    assert M.min_memory_schedule(g, sa_order, True, cap, blocks=blocks) is not None
    assert set(blocks.made) == set(M._turn_keys(sa_order, preds, anc))
    ahead = dict(M.make_ahead(load_copy := training_graph("dag", 40, 7, p=0.25), lambda: False))[M.AHEAD + "turns"]
    assert load_copy is not g and ahead
    assert not set(ahead) & set(blocks.made)
    assert set(ahead) | set(blocks.made) >= set(M._turn_keys(file_order, preds, anc))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(12, 40),
    seed=st.integers(0, 1000),
    ratio=st.floats(0.3, 0.6),
    hold=st.sampled_from([None, ("there", "pathwidth", 0.3), ("here", "dtr", 0.2)]),
)
def test_auto_plans_where_min_memory_wins_as_the_reference(monkeypatch, n, seed, ratio, hold):
    """Random training DAGs at budgets where often only min-memory fits, both processes
    forced on (``PARALLEL_NODES`` 10, test_auto_same's check): the second process makes
    the pieces ahead while it waits for an offer; the plan is the frozen auto's."""
    _check(monkeypatch, lambda: training_graph("dag", n, seed, p=0.25), ratio, hold)


@pytest.mark.parametrize("ratio", [0.6, 0.5, 0.4])
@pytest.mark.parametrize("hold", [None, ("there", "pathwidth", 0.3), ("here", "dtr", 0.3)])
def test_auto_plans_the_random_dag_sample_as_the_reference(monkeypatch, ratio, hold):
    """The sample random DAG, where below ~0.6x only min-memory fits."""
    _check(monkeypatch, lambda: load_graph(SAMPLES / "random_dag.twremat.txt"), ratio, hold)
