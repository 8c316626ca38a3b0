"""Zero-byte target sinks folded out before treewidth/pathwidth plan (algorithms/fold.py)."""

from __future__ import annotations

import numpy as np
from brute_force import optimal_cost
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms.fold import fold_sinks
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import get_strategy
from remat_cli.training import checkmate_training_graph


def _with_sinks(kind: str, n: int, seed: int) -> tuple[Graph, Graph]:
    """A training graph, and the same graph with zero-byte target sinks hung off some of its
    backward nodes (as a captured gradient step's ``bwd:X.params``)."""
    fwd = {"chain": lambda: G.chain(n), "skip": lambda: G.skip_chain(n, skip=2), "dag": lambda: G.random_dag(n, 0.3, seed=seed)}[kind]()
    rng = np.random.default_rng(seed)
    src, dst = fwd.edges()
    fwd = G.from_edges(fwd.n, np.stack([src, dst], axis=1), mem=rng.integers(1, 9, fwd.n), cost=rng.integers(1, 6, fwd.n).astype(float))
    base = checkmate_training_graph(fwd)
    src, dst = base.edges()
    backward = [i for i in range(base.n) if base.kinds[i] == "backward"]
    parents = sorted(rng.choice(backward, size=max(1, len(backward) // 2), replace=False).tolist())
    ids = list(base.ids) + [f"{base.ids[p]}.params" for p in parents]
    sinks = np.arange(base.n, base.n + len(parents))
    full = Graph.from_arrays(
        ids=ids,
        ops=list(base.ops) + ["linear.backward.params"] * len(parents),
        kinds=list(base.kinds) + ["backward"] * len(parents),
        mem=np.concatenate((base.mem, np.zeros(len(parents), np.int64))),
        cost=np.concatenate((base.cost, rng.integers(1, 6, len(parents)).astype(float))),
        src=np.concatenate((src, parents)),
        dst=np.concatenate((dst, sinks)),
        targets=np.concatenate((base.targets, sinks)),
        fixed_mem=base.fixed_mem,
    )
    return base, full


graphs = st.builds(_with_sinks, st.sampled_from(["chain", "skip", "dag"]), st.integers(2, 8), st.integers(0, 999))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=graphs, ratio=st.sampled_from([0.5, 0.7, 1.0]), name=st.sampled_from(["treewidth", "pathwidth"]))
def test_folded_plan_is_the_plan_without_the_sinks(pair, ratio, name):
    """The decompositions plan the graph as if the sinks were not there: the same peak, and
    the cost of the plan without them plus each sink once; every schedule simulated."""
    base, full = pair
    folded = fold_sinks(full)
    assert folded is not None and folded.graph.n == base.n and folded.graph.ids == base.ids
    budget = int(ratio * store_all_peak(full))
    try:
        plan = make_plan(full, name, budget)
    except NoPlanError:
        assert _no_plan(folded.graph, name, budget)
        return
    sim = simulate(full, plan.schedule)
    assert sim.error is None and sim.metrics.peak_bytes == plan.metrics.peak_bytes <= budget
    alone = get_strategy(name).run(folded.graph, budget)
    alone_sim = simulate(folded.graph, alone.schedule)
    assert alone_sim.metrics.peak_bytes == plan.metrics.peak_bytes
    sinks_cost = float(full.cost[folded.sinks].sum())
    assert np.isclose(plan.metrics.cost, alone_sim.metrics.cost + sinks_cost)
    assert int((plan.schedule.nodes[plan.schedule.ops == 0][:, None] == folded.sinks).sum()) == folded.sinks.size


def _no_plan(graph: Graph, name: str, budget: int) -> bool:
    try:
        make_plan(graph, name, budget)
    except NoPlanError:
        return True
    return False


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pair=st.builds(_with_sinks, st.sampled_from(["chain", "dag"]), st.integers(2, 4), st.integers(0, 999)),
    ratio=st.sampled_from([0.6, 0.8]),
)
def test_folding_keeps_the_optimum(pair, ratio):
    """Brute force: the full graph's cheapest schedule costs the folded graph's cheapest
    plus the sinks' cost once, at the same budget (folding loses nothing)."""
    _, full = pair
    folded = fold_sinks(full)
    assert folded is not None
    budget = max(full.lb, int(ratio * store_all_peak(full)))
    best_full = optimal_cost(full, budget)
    best_folded = optimal_cost(folded.graph, budget)
    if best_folded is None:
        assert best_full is None
        return
    assert best_full is not None and np.isclose(best_full, best_folded + float(full.cost[folded.sinks].sum()))


def test_graphs_without_sinks_are_not_folded():
    g = checkmate_training_graph(G.chain(6))
    assert fold_sinks(g) is None


def test_only_the_captures_split_leaves_are_folded():
    """A zero-byte target sink of another op (an ONNX graph's) is planned as it is."""
    _, full = _with_sinks("chain", 5, 1)
    other = full.with_arrays(ops=[op.replace(".backward.params", "") for op in full.ops])
    assert fold_sinks(other) is None and fold_sinks(full) is not None
