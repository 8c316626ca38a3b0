#!/usr/bin/env python3
"""Core benchmark: build a 10^5-node training graph, run store-all and the simulator.

    python scripts/bench_core.py [--nodes 100000]

Prints wall times; no assertions (see DESIGN §6).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from remat_cli import generators as G
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies.store_all import store_all_schedule
from remat_cli.training import checkmate_training_graph


def timed(label: str, fn):
    t0 = time.perf_counter()
    out = fn()
    print(f"{label:44s} {time.perf_counter() - t0:8.3f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=100_000, help="approximate node count of the training graph")
    args = ap.parse_args()
    forward_nodes = args.nodes // 2
    rng = np.random.default_rng(0)
    fwd = timed(
        f"forward graph ({forward_nodes:,} nodes, skips)",
        lambda: G.skip_chain(forward_nodes, skip=4, mem=rng.integers(1 << 10, 1 << 20, forward_nodes), cost=1.0),
    )
    g = timed("checkmate training graph", lambda: checkmate_training_graph(fwd))
    print(f"{'':44s} {g.n:,} nodes, {g.num_edges:,} edges, LB {g.lb:,} B")
    schedule, order = timed("store-all (two orders, each simulated)", lambda: store_all_schedule(g))
    result = timed(f"simulate store-all ({len(schedule):,} steps)", lambda: simulate(g, schedule))
    print(f"{'':44s} peak {result.metrics.peak_bytes:,} B via {order}")
    timed("simulate with per-step memory", lambda: simulate(g, schedule, per_step=True))
    # a 10^6-step schedule: store-all plus many compute/free pairs of a source node
    src = int(g.topo[0])
    extra = 1_000_000 - len(schedule)
    pairs = max(extra // 2, 0)
    big = Schedule(
        np.concatenate([np.tile(np.array([COMPUTE, FREE], np.int8), pairs), schedule.ops]),
        np.concatenate([np.full(2 * pairs, src, np.int32), schedule.nodes]),
    )
    r = timed(f"simulate {len(big):,} steps", lambda: simulate(g, big))
    assert r.valid


if __name__ == "__main__":
    main()
