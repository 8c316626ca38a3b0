#!/usr/bin/env python3
"""Benchmark the treewidth and pathwidth strategies: quality against twremat's published
figures, and the time to decompose, schedule and simulate on 1,000- and 10,000-node
training graphs. Prints figures; asserts nothing.

    PYTHONPATH=. python scripts/bench_strategies.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from remat_cli import generators as G
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import get_strategy
from remat_cli.algorithms import decompose as D
from remat_cli.training import checkmate_training_graph

STRATS = ("treewidth", "pathwidth")


def vgg_like(blocks=(2, 2, 3, 3, 3), base: int = 64 * 224 * 224 * 4) -> Graph:
    """A VGG-shaped forward chain: conv+relu pairs, activations halving at each pool."""
    mem: list[int] = []
    size = base
    for convs in blocks:
        mem += [size, size] * convs
        size //= 2
        mem.append(size)
    n = len(mem)
    return G.from_edges(n, [(i, i + 1) for i in range(n - 1)], mem=np.asarray(mem), cost=np.asarray(mem) / 1e6, name=f"vgg{sum(blocks)}")


def run(graph: Graph, name: str, budget: int | None):
    """(metrics, seconds) of one strategy run, or (None, seconds) when nothing fits."""
    started = time.perf_counter()
    try:
        result = get_strategy(name).run(graph, budget, {})
    except NoPlanError:
        return None, time.perf_counter() - started, None
    seconds = time.perf_counter() - started
    metrics = simulate(graph, result.schedule).metrics
    assert metrics is not None and (budget is None or metrics.peak_bytes <= budget)
    return metrics, seconds, result.info


def min_ratio(graph: Graph, name: str, sa: int) -> float:
    """Smallest budget (as a ratio of the store-all peak) the strategy meets, by bisection."""
    lo, hi = graph.lb - 1, sa
    while hi - lo > max(1, sa // 500):
        mid = (lo + hi) // 2
        if run(graph, name, mid)[0] is None:
            lo = mid
        else:
            hi = mid
    return hi / sa


def quality_chain() -> None:
    g = checkmate_training_graph(G.chain(1024))
    sa = store_all_peak(g)
    print(f"\n== 1,024-layer unit training chain ({g.n} nodes, store-all peak {sa}, LB {g.lb}) ==")
    print("twremat (published): 4.55x base cost at 0.5x store-all, 3.2x at 0.7x; optimal about 1.25x at 0.5x")
    print(f"{'budget':>8} " + " ".join(f"{s:>22}" for s in STRATS))
    for r in (0.1, 0.3, 0.5, 0.7, 0.9, None):
        cells = []
        for name in STRATS:
            m, sec, _ = run(g, name, None if r is None else int(r * sa))
            cells.append("no plan" if m is None else f"{m.cost / m.base_cost:.3f}x cost {m.peak_bytes / sa:.3f}x pk")
        print(f"{'none' if r is None else f'{r}x':>8} " + " ".join(f"{c:>22}" for c in cells))


def quality_min_budget(graphs: list[Graph]) -> None:
    print("\n== smallest budget met (ratio of the store-all peak) ==")
    print("twremat (published) on small VGG-style graphs: 0.99x although LB is 0.83x")
    print(f"{'graph':>24} {'nodes':>6} {'LB':>7} " + " ".join(f"{s:>22}" for s in STRATS))
    for g in graphs:
        sa = store_all_peak(g)
        cells = []
        for name in STRATS:
            r = min_ratio(g, name, sa)
            m, _, _ = run(g, name, int(np.ceil(r * sa)))
            cells.append(f"{r:.3f}x at {m.cost / m.base_cost:.2f}x cost" if m else f"{r:.3f}x")
        print(f"{g.name:>24} {g.n:>6} {g.lb / sa:>6.3f}x " + " ".join(f"{c:>22}" for c in cells))


def quality_sweep(graphs: list[Graph]) -> None:
    print("\n== cost (x base) across budgets (x store-all peak); '-' = no plan ==")
    ratios = (0.2, 0.3, 0.5, 0.7, 0.9)
    print(f"{'graph':>24} {'strategy':>10} " + " ".join(f"{r:>6}" for r in ratios) + f" {'bare':>14}")
    for g in graphs:
        sa = store_all_peak(g)
        for name in STRATS:
            cells = []
            for r in ratios:
                m, _, _ = run(g, name, int(r * sa))
                cells.append("-" if m is None else f"{m.cost / m.base_cost:.2f}")
            m, _, info = run(g, name, None)
            bare = f"{m.peak_bytes / sa:.2f}x/{m.cost / m.base_cost:.1f}x"
            print(
                f"{g.name:>24} {name:>10} "
                + " ".join(f"{c:>6}" for c in cells)
                + f" {bare:>14}  w={info['width']} d={info['separator depth']}"
            )


def performance(graphs: list[Graph]) -> None:
    print("\n== performance (seconds; targets: 1,000 nodes < 2 s, 10,000 nodes < 30 s) ==")
    print("plan = the whole strategy run (its own decomposition included); simulate = the replay that measures it")
    print(
        f"{'graph':>24} {'nodes':>6} {'tree dec':>9} {'tw':>3} {'sep':>6} {'d':>3} {'path dec':>9} {'pw':>3} {'strategy':>10} {'budget':>6} {'plan':>9} {'simulate':>9} {'total':>7} {'cost':>7}"
    )
    for g in graphs:
        t0 = time.perf_counter()
        td = D.tree_decomposition(g)
        t1 = time.perf_counter()
        sep = D.separator_tree(g, td)
        t2 = time.perf_counter()
        pd = D.path_decomposition(g, td=td)
        t3 = time.perf_counter()
        sa = store_all_peak(g)
        for name in STRATS:
            for r in (None, 0.5):
                budget = None if r is None else int(r * sa)
                started = time.perf_counter()
                try:
                    result = get_strategy(name).run(g, budget, {})
                except NoPlanError:
                    print(f"{g.name:>24} {name:>10}: no plan at {r}x")
                    continue
                planned = time.perf_counter()
                metrics = simulate(g, result.schedule).metrics
                simulated = time.perf_counter()
                print(
                    f"{g.name:>24} {g.n:>6} {t1 - t0:>9.2f} {td.width:>3} {t2 - t1:>6.2f} {sep.depth:>3} {t3 - t2:>9.2f} {pd.width:>3} {name:>10} "
                    f"{'none' if r is None else f'{r}x':>6} {planned - started:>9.2f} {simulated - planned:>9.2f} {simulated - started:>7.2f} "
                    f"{metrics.cost / metrics.base_cost:>6.2f}x"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 10,000-node graphs")
    args = parser.parse_args()
    T = checkmate_training_graph
    quality_chain()
    quality_min_budget(
        [T(vgg_like()), T(vgg_like((1, 1, 2, 2, 2))), T(vgg_like((1, 1, 1))), T(G.unet(3)), T(G.skip_chain(60)), T(G.transformer(4))]
    )
    quality_sweep(
        [T(G.skip_chain(500)), T(G.transformer(36)), T(G.unet(4)), T(G.ladder(100)), T(G.grid(4, 30)), T(G.random_dag(60, 0.1, seed=1))]
    )
    perf = [T(G.skip_chain(500)), T(G.transformer(36))]
    if not args.quick:
        perf += [T(G.skip_chain(5000)), T(G.transformer(357))]
    performance(perf)


if __name__ == "__main__":
    main()
