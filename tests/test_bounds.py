"""The structural lower bound (remat_cli.bounds) against a brute-forced minimum peak.

A lower bound is only worth printing when it is true: on tiny graphs, no valid schedule
(brute force over resident sets, tests/brute_force.py) peaks below it, and it is never
below the largest-operation bound.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brute_force import optimal_cost
from remat_cli import generators as gen
from remat_cli.bounds import reach_lower_bound, structural_lower_bound
from remat_cli.graph import Graph, NodeSpec
from remat_cli.planner import store_all_peak
from remat_cli.training import checkmate_training_graph

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def min_peak(graph: Graph) -> int:
    """The smallest peak of any valid schedule, by binary search over brute-force feasibility."""
    lo, hi = graph.lb, store_all_peak(graph)
    while lo < hi:
        mid = (lo + hi) // 2
        if optimal_cost(graph, mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return lo


@st.composite
def tiny_graphs(draw) -> Graph:
    """At most 9 nodes: training graphs of 1-4 forward nodes, or plain DAGs, random sizes."""
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):
        n = draw(st.integers(2, 8))
        g = gen.random_dag(n, draw(st.floats(0.2, 0.7)), seed=seed)
        src, dst = g.edges()
        return gen.from_edges(n, np.stack([src, dst], axis=1), mem=rng.integers(0, 9, n), fixed_mem=int(rng.integers(0, 3)))
    k = draw(st.integers(1, 4))
    fwd = gen.random_dag(k, 0.6, seed=seed)
    src, dst = fwd.edges()
    fwd = gen.from_edges(k, np.stack([src, dst], axis=1), mem=rng.integers(1, 9, k))
    return checkmate_training_graph(fwd)


@SETTINGS
@given(tiny_graphs(), st.integers(0, 5))
def test_bound_never_exceeds_the_brute_forced_minimum(g: Graph, depth: int) -> None:
    game = structural_lower_bound(g, depth=depth, reach_work=0)
    assert game.bytes >= g.lb == game.op_bound_bytes and game.argument == "game tree"
    assert game.bytes <= min_peak(g)
    if depth == 0:
        assert game.bytes == g.lb
    both = structural_lower_bound(g, depth=depth)
    assert game.bytes <= both.bytes <= min_peak(g)  # never weaker, still proven


@SETTINGS
@given(tiny_graphs(), st.sampled_from([1, 5, 5_000]))
def test_reach_search_is_a_bound_and_exact_when_it_finishes(g: Graph, per_node: int) -> None:
    """The reach search never exceeds the brute-forced minimum peak, however early it is cut;
    when every target's search finished it IS that minimum (module docstring's converse)."""
    reach = reach_lower_bound(g, per_node=per_node, max_work=1_000_000)
    low = min_peak(g)
    assert g.lb <= reach.bytes <= low
    if reach.exact:
        assert reach.bytes == low
    if per_node == 5_000:
        assert reach.exact  # at most 2^9 sets per search: it always finishes


def test_reach_search_beats_the_game_tree_bound() -> None:
    """A graph where the depth-limited game tree stops at the operation bound but the reach
    search proves, and attains, the brute-forced minimum."""
    g = _reach_example()
    game = structural_lower_bound(g, reach_work=0)
    both = structural_lower_bound(g)
    assert game.bytes < both.bytes == min_peak(g)
    assert both.argument == "reach search" and both.exact


def test_bound_is_tight_where_the_operation_bound_is_not() -> None:
    """in → x → a → b, out = add(x, b): one of x, b is computed while the other is resident,
    with its own inputs: at least 25 bytes, where the largest operation needs 21."""
    nodes = [
        NodeSpec("in", [], mem=5),
        NodeSpec("x", ["in"], mem=10),
        NodeSpec("a", ["x"], mem=10),
        NodeSpec("b", ["a"], mem=10),
        NodeSpec("out", ["x", "b"], mem=1),
    ]
    g = Graph.from_nodes(nodes, source="test")
    bound = structural_lower_bound(g)
    assert g.lb == 21
    assert bound.bytes == 25 == min_peak(g)
    assert bound.complete and bound.gain > 1


def test_bound_holds_on_generated_training_graphs() -> None:
    """Larger graphs (no brute force): the bound stays between the operation bound and the
    store-all peak, and depth only raises it."""
    for fwd in (gen.skip_chain(12), gen.unet(2, convs=1), gen.diamonds(3)):
        g = checkmate_training_graph(fwd)
        shallow = structural_lower_bound(g, depth=1)
        deep = structural_lower_bound(g, depth=4)
        assert g.lb <= shallow.bytes <= deep.bytes <= store_all_peak(g)


def test_info_and_plan_report_the_structural_bound(tmp_path) -> None:
    """`remat info` and `remat plan` print the bound where it beats the operation bound, and
    the JSON forms carry it as numbers."""
    import json

    from click.testing import CliRunner

    from remat_cli.cli import cli
    from remat_cli.loaders.remat_json import to_json

    nodes = [
        NodeSpec("in", [], mem=5),
        NodeSpec("x", ["in"], mem=10),
        NodeSpec("a", ["x"], mem=10),
        NodeSpec("b", ["a"], mem=10),
        NodeSpec("out", ["x", "b"], mem=1),
    ]
    path = tmp_path / "res.json"
    path.write_text(json.dumps(to_json(Graph.from_nodes(nodes, source="test"))))
    runner = CliRunner()
    info = runner.invoke(cli, ["info", str(path), "--no-decompose"], catch_exceptions=False)
    assert info.exit_code == 0
    line = next(ln for ln in info.output.splitlines() if ln.startswith("structural bound"))
    assert "25 B" in line and "1.190x" in line
    doc = json.loads(runner.invoke(cli, ["info", str(path), "--format", "json"], catch_exceptions=False).output)
    assert doc["structural_bound"]["bytes"] == 25 and doc["lower_bound_bytes"] == 21
    plan = runner.invoke(cli, ["plan", str(path), "-s", "store-all", "--format", "json"], catch_exceptions=False)
    assert json.loads(plan.output)["structural_bound"]["bytes"] == 25


def _reach_example() -> Graph:
    """The training graph of a 5-node forward DAG (0 feeds 1, 2 and 3; 2 feeds 4), found
    by a search over small random graphs: game tree 24 B, least peak 25 B."""
    fwd = gen.from_edges(5, np.array([[0, 1], [0, 2], [0, 3], [2, 4]]), mem=np.array([2, 8, 1, 1, 5]))
    return checkmate_training_graph(fwd)
