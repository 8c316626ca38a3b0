"""min-memory's variants made with the store-all order's dag run first (``_variants``'s
``ahead``: ``auto`` offers its plan to its second process sooner) equal those of the frozen
copy that made the file order's run first (tests/min_memory_variants_reference.py, main
before r14-mm): the same names, steps and figures, in the same order, on generated graphs
with caps that stop runs part way (the skips of a run that passes the cap in the same
turns as another, the rounds that recompute a kept target), made at once or paused by a
stop request. Every variant goes through the simulator."""

from __future__ import annotations

from pathlib import Path

import min_memory_variants_reference as reference
import pytest
from graphgen import tied_graph, training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.loaders import load_graph
from remat_cli.simulate import simulate
from remat_cli.strategies import min_memory as M

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"


def _flat(variants) -> list[tuple]:
    return [(name, s.ops.tolist(), s.nodes.tolist(), m) for name, s, m in variants]


def _same(graph_of, monkeypatch, per_node: int, rounds: int, pauses: int = 0) -> None:
    """The variants of a fresh copy of the graph, new and frozen, with the caps set to
    ``per_node`` computes per needed node and ``rounds`` computes for the rounds; with
    ``pauses``, the new making is paused by a stop request at its first ``pauses`` looks."""
    for module in (M, reference):
        monkeypatch.setattr(module, "MAX_COMPUTES_PER_NODE", per_node)
        monkeypatch.setattr(module, "ROUNDS_COMPUTES", rounds)
    old = reference.min_memory_variants(graph_of())
    g = graph_of()
    asked = [0]

    def stop() -> bool:
        asked[0] += 1
        return asked[0] <= pauses

    for _ in range(pauses + 1):
        got = M.min_memory_variants(g, None, stop if pauses else None)
        if M.variants_made(g):
            break
    got = M.min_memory_variants(g)
    assert _flat(got) == _flat(old)
    assert M.variants_so_far(g) is got
    for _, s, m in got:
        assert simulate(g, s).metrics == m


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@SETTINGS
@given(
    kind=st.sampled_from(["grid", "skip", "ktree", "diamonds", "dag"]),
    n=st.integers(4, 30),
    seed=st.integers(0, 10_000),
    per_node=st.sampled_from([1, 2, 4, 12, 400]),
    rounds=st.sampled_from([0, 50, 200_000]),
    pauses=st.sampled_from([0, 0, 3, 40]),
)
def test_variants_are_the_references(monkeypatch, kind, n, seed, per_node, rounds, pauses):
    _same(lambda: tied_graph(kind, n, seed), monkeypatch, per_node, rounds, pauses)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["chain", "skip", "dag"]), n=st.integers(6, 40), seed=st.integers(0, 1000), per_node=st.sampled_from([3, 400]))
def test_variants_of_training_graphs_are_the_references(monkeypatch, kind, n, seed, per_node):
    _same(lambda: training_graph(kind, n, seed, p=0.25), monkeypatch, per_node, 200_000)


@pytest.mark.parametrize("name", ["random_dag.twremat.txt", "unet_train.json", "diamond_dag.nodelink.json", "training_chain_32.json"])
def test_variants_of_the_samples_are_the_references(monkeypatch, name):
    """Where the two orders of the targets differ (the store-all order's run is made first)."""
    if not (SAMPLES / name).exists():
        pytest.skip(f"no sample {name}")
    _same(lambda: load_graph(SAMPLES / name), monkeypatch, 400, 200_000)


def test_the_store_all_orders_run_is_offered_before_the_file_orders_is_made():
    """Paused at its first look after the store-all order's dag run, the making offers that
    run (``variants_so_far``) and returns it with store-all's plan; on random_dag it is the
    variant of least peak of the two dag runs."""
    g = load_graph(SAMPLES / "random_dag.twremat.txt")
    looks = [0]

    def stop() -> bool:
        looks[0] += 1
        return M.variants_so_far(g)[-1][0] == "dag, targets in store-all order"

    part = M.min_memory_variants(g, None, stop)
    assert not M.variants_made(g)
    assert [v[0] for v in part] == ["store-all (nothing recomputed)", "dag, targets in store-all order"]
    assert [v[0] for v in M.variants_so_far(g)] == [v[0] for v in part]
    whole = M.min_memory_variants(g)
    sa = next(v for v in whole if v[0].startswith("dag, targets in store-all order"))
    assert sa[1] is part[1][1] or sa[0] != part[1][0]  # the same object, unless its rounds replaced it
