#!/usr/bin/env python
"""How far is each strategy from the best possible? Overhead and solve time per strategy.

For every graph (the files in ``sample_graphs/``, ONNX models at batch 8 and sequence 128,
plus a few generated training graphs)
and budgets of 0.9, 0.7, 0.5 and 0.3 × the store-all peak, runs every fast strategy and
the exact solver (graphs up to ``--exact-max-nodes`` needed nodes, within
``--time-limit``) and prints one table per graph:

    strategy   0.9x            0.7x  ...
    chain-dp   +4.1%  0.01s    ...

A cell is the overhead (extra compute over the base cost) and the solve time, ``-`` when
the strategy cannot fit the budget (with the smallest budget it can meet). The ``exact``
row is the optimum over all schedules (``opt``) or the best plan with its gap; the
``bound`` row is exact's lower bound on the overhead over all schedules (the base cost, or
the exhaustive search's bound on small graphs), or, for graphs too large for the MILP, the
LP relaxation of Checkmate's model for the graph's order (``LP, fixed order``: a bound for
that order only). Every plan is replayed by the simulator through ``make_plan``.

Usage: PYTHONPATH=. python scripts/bench_quality.py [--time-limit 60] [GRAPH ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from remat_cli import generators as gen
from remat_cli.errors import NoPlanError, RematError
from remat_cli.graph import Graph
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.strategies import STRATEGIES, fast_strategies
from remat_cli.training import checkmate_training_graph

ROOT = Path(__file__).resolve().parent.parent


def generated() -> list[Graph]:
    """A few training graphs of the families the paper and the baselines care about."""
    return [
        checkmate_training_graph(gen.chain(16, mem=[1, 2, 3, 4] * 4, cost=[4.0, 1.0, 2.0, 3.0] * 4, name="hetero-chain16")),
        checkmate_training_graph(gen.skip_chain(20, name="resnet-like20")),
        checkmate_training_graph(gen.diamonds(6, name="inception-like6")),
        checkmate_training_graph(gen.unet(2, convs=1, base_mem=1 << 16)),
        checkmate_training_graph(gen.random_dag(24, 0.15, seed=3, max_size=4)),
    ]


def sample_graphs(paths: list[str]) -> list[Graph]:
    files = [Path(p) for p in paths] or sorted(p for p in (ROOT / "sample_graphs").glob("*") if p.is_file())
    out = []
    for f in files:
        if f.suffix == ".md":
            continue
        for dims in ((("batch", 8), ("sequence", 128)), (("batch", 8),), ()):
            try:
                out.append(load_graph(f, LoadOptions(dims=dims)))
                break
            except RematError as exc:
                error = exc.message
        else:
            print(f"skipping {f}: {error}", file=sys.stderr)
    return out


def cell(graph: Graph, name: str, budget: int, peak: int, opts: dict) -> tuple[str, dict | None]:
    started = time.perf_counter()
    try:
        plan = make_plan(graph, name, budget, opts, reference_peak=peak)
    except NoPlanError as exc:
        took = time.perf_counter() - started
        floor = f" (min {exc.min_budget / peak:.2f}x)" if exc.min_budget and peak else ""
        return f"-{floor} {took:.2f}s", None
    took = time.perf_counter() - started
    text = f"{plan.metrics.overhead:+.1%} {took:.2f}s"
    if name == "exact":
        gap = plan.info.get("gap", 0.0)
        text += " opt" if plan.info.get("status") == "optimal" else f" gap {gap:.0%}"
    return text, dict(plan.info) | {"cost": plan.metrics.cost}


def bench(graph: Graph, ratios: list[float], time_limit: float, exact_max: int) -> None:
    peak = store_all_peak(graph)
    names = [s.name for s in fast_strategies()] + ["auto"]
    n_needed = int(graph.needed.sum())
    use_exact = "exact" in STRATEGIES and n_needed <= exact_max
    opts = {"time_limit": time_limit}
    rows: dict[str, list[str]] = {n: [] for n in names + ["exact", "bound"]}
    for ratio in ratios:
        budget = max(int(ratio * peak), 0)
        for name in names:
            rows[name].append(cell(graph, name, budget, peak, opts)[0])
        if budget < graph.lb:
            rows["exact"].append("- (below LB)")
            rows["bound"].append("")
            continue
        if use_exact:
            text, info = cell(graph, "exact", budget, peak, opts)
            rows["exact"].append(text)
            lb = None if info is None else info.get("lower_bound")  # over all schedules
            rows["bound"].append("" if lb is None else f"{lb / graph.base_cost - 1:+.1%}")
        else:
            from remat_cli.strategies.exact import lp_lower_bound

            rows["exact"].append(f"- ({n_needed} nodes)")
            lp = lp_lower_bound(graph, budget, time_limit=time_limit) if n_needed <= 4 * exact_max else None
            # the LP of Checkmate's model for the graph's order: a bound for that order only
            rows["bound"].append("" if lp is None else f"{lp / graph.base_cost - 1:+.1%} (LP, fixed order)")
    head = f"{graph.name}: {graph.n} nodes, store-all peak {peak} B, LB {graph.lb} B ({graph.lb / peak:.2f}x)"
    print(head)
    width = max(len(c) for r in rows.values() for c in r) + 2
    print("  " + "strategy".ljust(12) + "".join(f"{r:.1f}x".ljust(width) for r in ratios))
    for name, cells in rows.items():
        if cells:
            print("  " + name.ljust(12) + "".join(c.ljust(width) for c in cells))
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="*", help="graph files (default: sample_graphs/*)")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--budgets", default="0.9,0.7,0.5,0.3")
    ap.add_argument("--exact-max-nodes", type=int, default=80)
    ap.add_argument("--no-generated", action="store_true")
    args = ap.parse_args()
    ratios = [float(x) for x in args.budgets.split(",")]
    graphs = sample_graphs(args.graphs) + ([] if args.no_generated else generated())
    for g in graphs:
        bench(g, ratios, args.time_limit, args.exact_max_nodes)


if __name__ == "__main__":
    main()
