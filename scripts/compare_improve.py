#!/usr/bin/env python3
"""The plan-improvement pass before/after a speed change: the same plans in, the same plans
out (issue 14 item 1). Three steps, the first and second on the old code:

    PYTHONPATH=OLD python scripts/compare_improve.py plans /tmp/plans      # input plans
    PYTHONPATH=OLD python scripts/compare_improve.py run /tmp/plans old.json
    PYTHONPATH=.   python scripts/compare_improve.py run /tmp/plans new.json
    python scripts/compare_improve.py diff old.json new.json

Inputs: the plans of treewidth, pathwidth, chain-dp and greedy at 0.9/0.7/0.5/0.3x on every
sample graph (ONNX with ``--dim batch=8``, sequence 128 where asked), on bench_quality's
CNN-shaped graphs and on the 1k graphs given with ``--graphs`` (remat JSON). ``run`` calls
``improve_plan(..., replay=True)`` (no deadline: the work limit alone bounds it, so the
output is deterministic) on each and writes a hash of the schedule, the ``improved`` flag,
cost, how it was found, and the pass's seconds in this process. ``diff`` prints the cells
whose output differs (exit 1 if any) and the seconds side by side. Asserts nothing about
time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("treewidth", "pathwidth", "chain-dp", "greedy")
RATIOS = (0.9, 0.7, 0.5, 0.3)


def graphs(extra: list[str]) -> dict:
    """name -> Graph: the samples, bench_quality's CNN-shaped graphs, then ``extra`` files."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_quality import cnn_shaped, sample_graphs  # noqa: PLC0415 - a sibling script

    from remat_cli.loaders import load_graph

    out = {}
    for g in sample_graphs([]) + cnn_shaped():
        out[g.name] = g
    for path in extra:
        out[Path(path).stem] = load_graph(path)
    return out


def make_plans(folder: Path, extra: list[str]) -> None:
    from remat_cli.errors import RematError
    from remat_cli.planner import make_plan
    from remat_cli.planner import store_all_peak

    folder.mkdir(parents=True, exist_ok=True)
    for name, g in graphs(extra).items():
        peak = store_all_peak(g)
        for ratio in RATIOS:
            budget = int(ratio * peak)
            for strategy in STRATEGIES:
                try:
                    plan = make_plan(g, strategy, budget, {})
                except RematError:
                    continue
                key = f"{name}@{ratio}@{strategy}"
                np.savez(
                    folder / f"{len(list(folder.iterdir())):04d}.npz",
                    ops=plan.schedule.ops,
                    nodes=plan.schedule.nodes,
                    key=key,
                    budget=budget,
                )
                print(key, flush=True)


def run(folder: Path, out: Path, extra: list[str]) -> None:
    from remat_cli.algorithms.improve import improve_plan
    from remat_cli.schedule import Schedule

    gs = graphs(extra)
    rows = {}
    for f in sorted(folder.glob("*.npz")):
        z = np.load(f)
        key = str(z["key"])
        g = gs[key.split("@")[0]]
        schedule = Schedule(z["ops"], z["nodes"])
        started = time.perf_counter()
        imp = improve_plan(g, schedule, int(z["budget"]), replay=True)
        took = time.perf_counter() - started
        digest = hashlib.sha256(imp.schedule.ops.tobytes() + imp.schedule.nodes.astype(np.int32).tobytes()).hexdigest()
        rows[key] = {
            "hash": digest[:16],
            "improved": imp.improved,
            "cost": imp.metrics.cost,
            "found": [imp.score, imp.restart, imp.ranking, imp.stopped],
            "seconds": took,
        }
        print(f"{key:50} {took:7.3f}s {'improved' if imp.improved else '-':9} {digest[:16]}", flush=True)
    out.write_text(json.dumps(rows, indent=1))


def diff(old: Path, new: Path) -> int:
    a, b = json.loads(old.read_text()), json.loads(new.read_text())
    changed = 0
    total_a = total_b = 0.0
    for key in a:
        if key not in b:
            print(f"{key}: missing")
            changed += 1
            continue
        x, y = a[key], b[key]
        same = all(x[k] == y[k] for k in ("hash", "improved", "cost", "found"))
        changed += not same
        total_a += x["seconds"]
        total_b += y["seconds"]
        print(f"{key:50} {x['seconds']:7.3f}s -> {y['seconds']:7.3f}s {'same' if same else 'CHANGED'}")
    print(f"{len(a)} cells, {changed} changed; pass seconds in all {total_a:.2f} -> {total_b:.2f}")
    return 1 if changed else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("plans", "run", "diff"))
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--graphs", nargs="*", default=[], help="more graph files (the 1k graphs)")
    args = ap.parse_args()
    if args.step == "plans":
        make_plans(args.paths[0], args.graphs)
    elif args.step == "run":
        run(args.paths[0], args.paths[1], args.graphs)
    else:
        sys.exit(diff(args.paths[0], args.paths[1]))


if __name__ == "__main__":
    main()
