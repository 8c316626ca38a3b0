#!/usr/bin/env python3
"""How well each strategy honours its deadline (``--time-limit``): per graph and strategy,
the seconds a plan takes under a time limit T, and how far past T it ran.

Each strategy runs in this process on a graph loaded once (a fresh copy per run, so that
nothing one run derives, a decomposition or min-memory's variants, helps the next), at a
budget given as a fraction of the store-all peak (``--budget``, default: the lower bound,
where every strategy works hardest and most fail), under each limit of ``--limits``. A
strategy honours its deadline when it returns by T plus the time of one step it cannot
interrupt (a decomposition, a DP table, one replay between two looks at the clock).
Columns: seconds taken, then ``+x`` the seconds past T (``ok``: within 0.05 s), and
``plan`` (a plan came back: the planner then checks it against the budget; chen-sqrt
ignores budgets) / ``none`` (no plan fits; the strategy said so) for what came back. The graphs:
the ONNX samples BERT (sequence 128) and MobileNetV2 (batch 8) and, with ``--graphs DIR``,
the remat JSON files there (``scripts/bench_speed.py`` writes nn/grid/random 1k and 10k
ones). Prints figures; asserts nothing.

    PYTHONPATH=. python scripts/bench_deadline.py [--limits 0.2,1] [--budget lb] [--graphs DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from remat_cli.errors import NoPlanError, RematError
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.planner import store_all_peak
from remat_cli.strategies import fast_strategies
from remat_cli.strategies.base import RunContext

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = {
    "bert": (ROOT / "sample_graphs" / "bert.onnx", (("batch", 8), ("sequence", 128))),
    "mobilenet_v2": (ROOT / "sample_graphs" / "mobilenet_v2.onnx", (("batch", 8),)),
}


def run_once(path: Path, dims: tuple, strategy: str, budget: str, limit: float) -> tuple[float, str]:
    """Seconds one plan took under ``limit`` on a freshly loaded graph, and what came back."""
    graph = load_graph(path, LoadOptions(dims=dims, strict_dims=False))
    nbytes = graph.lb if budget == "lb" else max(graph.lb, int(float(budget) * store_all_peak(graph)))
    strat = next(s for s in fast_strategies() if s.name == strategy)
    started = time.perf_counter()
    try:
        strat.run(graph, nbytes, None, RunContext(time_limit=limit, deadline=started + limit))
        what = "plan"
    except NoPlanError:
        what = "none"
    except RematError as exc:
        what = f"error: {exc.message[:40]}"
    return time.perf_counter() - started, what


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limits", default="0.2,1", help="time limits in seconds, comma-separated")
    ap.add_argument("--budget", default="lb", help="'lb' (the lower bound) or a fraction of the store-all peak")
    ap.add_argument("--graphs", type=Path, help="a folder of remat JSON graphs to add")
    ap.add_argument("--strategies", help="comma-separated (default: every fast one but store-all)")
    args = ap.parse_args()
    limits = [float(x) for x in args.limits.split(",")]
    graphs = dict(SAMPLES)
    if args.graphs is not None:
        for path in sorted(args.graphs.glob("*.json")):
            if not any(path.stem.endswith(s) for s in ("100000",)):  # 100k: minutes to load each run
                graphs[path.stem] = (path, ())
    names = args.strategies.split(",") if args.strategies else [s.name for s in fast_strategies() if s.name != "store-all"]
    print(f"budget {args.budget}; per limit T: seconds taken, then +seconds past T ('ok': within 0.05 s)")
    head = f"{'graph':16s} {'strategy':12s}" + "".join(f" {'T=' + format(t, 'g') + ' s':>22s}" for t in limits)
    print(head)
    print("-" * len(head))
    worst = 0.0
    for gname, (path, dims) in graphs.items():
        for name in names:
            cells = []
            for limit in limits:
                took, what = run_once(path, dims, name, args.budget, limit)
                late = took - limit
                worst = max(worst, late)
                cells.append(f"{took:6.2f} {'ok' if late <= 0.05 else f'+{late:.2f}':>6s} {what:>6s}")
            print(f"{gname:16s} {name:12s}" + "".join(f" {c:>22s}" for c in cells), flush=True)
    print(f"largest overrun: {worst:.2f} s")


if __name__ == "__main__":
    main()
