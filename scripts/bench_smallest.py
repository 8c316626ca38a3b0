"""Cost of the smallest-budget search (remat_cli/sweep.py) per strategy on one graph.

    PYTHONPATH=. python scripts/bench_smallest.py [GRAPH]

Prints, per strategy, the budget found (as a ratio of the store-all peak), the number of
plans the search made and its wall time. Timings only; no assertions.
"""

from __future__ import annotations

import sys
import time

from remat_cli.loaders import load_graph
from remat_cli.planner import store_all_peak
from remat_cli.strategies import fast_strategies, get_strategy
from remat_cli.sweep import smallest_budget


def main(path: str = "sample_graphs/unet_train.json") -> None:
    graph = load_graph(path)
    ref = store_all_peak(graph)
    print(f"{graph.name}: {graph.n} nodes, LB {graph.lb / ref:.4f}x of store-all {ref} B")
    for strat in [*fast_strategies(), get_strategy("auto")]:
        started = time.perf_counter()
        found = smallest_budget(graph, strat, reference_peak=ref)
        seconds = time.perf_counter() - started
        figure = "-" if found.budget_bytes is None else f"{found.budget_bytes / ref:.4f}x"
        note = "exact" if found.exact else ("" if found.monotone else "not monotone")
        print(f"{strat.name:12s} {figure:>8s}  {found.probes:3d} plans  {seconds:7.2f} s  {note}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
