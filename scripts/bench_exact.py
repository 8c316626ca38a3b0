#!/usr/bin/env python
"""Can ``exact`` prove optimality within its time limit? Status, gap and time per case.

The gap is against the lower bound over all schedules; the model bound is the MILP's,
valid for schedules of Checkmate's model with the graph's order only.

The cases are the hard ones of issue 5: ``sample_graphs/unet_train.json`` (63 needed
nodes) at 0.9/0.7/0.5 × the store-all peak and a 49-node random training DAG at 0.7 ×.
Every plan goes through ``make_plan`` (the simulator).

Usage: PYTHONPATH=. python scripts/bench_exact.py [--time-limit 60] [--solver highs|cpsat]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from remat_cli import generators as gen
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.training import checkmate_training_graph

ROOT = Path(__file__).resolve().parent.parent


def cases():
    unet = load_graph(ROOT / "sample_graphs" / "unet_train.json", LoadOptions())
    rnd = checkmate_training_graph(gen.random_dag(24, 0.15, seed=1))
    yield from ((unet, 0.9), (unet, 0.7), (unet, 0.5), (rnd, 0.7))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--solver", default=None)
    ap.add_argument("--only", type=int, default=None, help="run only case number N (0-based)")
    a = ap.parse_args()
    opts = {"time_limit": a.time_limit}
    if a.solver:
        opts["solver"] = a.solver
    for n, (g, x) in enumerate(cases()):
        if a.only is not None and n != a.only:
            continue
        budget = int(x * store_all_peak(g))  # DESIGN §1: "0.5x" is relative to the store-all peak
        t0 = time.perf_counter()
        plan = make_plan(g, "exact", budget, opts)
        dt = time.perf_counter() - t0
        i = plan.info
        print(
            f"{g.name:<28} n={int(g.needed.sum()):3d} {x:.1f}x  {i['status']:<10} gap {100 * i['gap']:6.2f}%  "
            f"cost {plan.metrics.cost:g} lb {i['lower_bound']:g} (all schedules) "
            f"model bound {i.get('model_bound', i['lower_bound']):g}  {dt:6.1f}s  "
            f"peak {plan.metrics.peak_bytes}<={budget}",
            flush=True,
        )


if __name__ == "__main__":
    main()
