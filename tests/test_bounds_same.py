"""The faster structural bound (issue 14 item 1: every plan's report computes it) equals the
implementation it replaced (tests/bounds_reference.py) field for field: the same bytes,
node, argument, completeness, exactness and expansions, at every depth and work cap."""

from __future__ import annotations

from dataclasses import astuple

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bounds_reference as reference
from graphgen import training_graph
from remat_cli.bounds import reach_lower_bound, structural_lower_bound
from remat_cli.graph import Graph

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs(draw) -> Graph:
    """Training graphs of chains, skip chains, grids and random DAGs (3-30 forward nodes),
    or a random DAG with random sizes and workspaces (zeros too) whose nodes may read an
    input twice."""
    seed = draw(st.integers(0, 10_000))
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["chain", "skip", "grid", "dag"]))
        return training_graph(kind, draw(st.integers(3, 30)), seed, p=draw(st.floats(0.1, 0.5)))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(2, 25))
    pairs = [(u, v) for v in range(1, n) for u in range(v) if rng.random() < 0.3]
    pairs += [pairs[i] for i in rng.integers(0, len(pairs), len(pairs) // 4)] if pairs and draw(st.booleans()) else []
    src = np.array([u for u, _ in pairs], dtype=np.int64)
    dst = np.array([v for _, v in pairs], dtype=np.int64)
    return Graph.from_arrays(
        ids=[f"n{i}" for i in range(n)],
        ops=["op"] * n,
        kinds=[""] * n,
        mem=rng.integers(0, 9, n),
        cost=np.ones(n),
        workspace=rng.integers(0, 3, n) * rng.integers(0, 2, n),
        src=src,
        dst=dst,
        fixed_mem=int(rng.integers(0, 5)),
    )


@SETTINGS
@given(graphs(), st.integers(0, 5), st.sampled_from([1, 3, 20, 2_000]), st.sampled_from([0, 1, 7, 1_000]))
def test_structural_bound_equals_the_reference(g: Graph, depth: int, max_work: int, reach_work: int) -> None:
    got = structural_lower_bound(g, depth=depth, max_work=max_work, reach_work=reach_work)
    want = reference.structural_lower_bound(g, depth=depth, max_work=max_work, reach_work=reach_work)
    assert astuple(got) == astuple(want)


@SETTINGS
@given(graphs(), st.sampled_from([1, 2, 300]), st.sampled_from([1, 5, 1_000, 100_000]))
def test_reach_bound_equals_the_reference(g: Graph, per_node: int, max_work: int) -> None:
    got = reach_lower_bound(g, per_node=per_node, max_work=max_work)
    assert astuple(got) == astuple(reference.reach_lower_bound(g, per_node=per_node, max_work=max_work))


def test_the_defaults_equal_the_reference_on_a_thousand_node_graph() -> None:
    g = training_graph("dag", 500, 7, p=0.012)
    assert astuple(structural_lower_bound(g)) == astuple(reference.structural_lower_bound(g))
