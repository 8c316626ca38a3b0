#!/usr/bin/env python3
"""Plans before/after a speed change that must not change them: per sample graph, budget
(0.9x, 0.7x, 0.5x) and strategy (auto, treewidth, pathwidth, chain-dp), the outcome (0: a
plan, 1: none fits, 2: bad input), cost, peak, winner, a sha256 of the schedule and of the
plan's info without its seconds, and the in-process solve seconds; one process per graph.

    PYTHONPATH=. python scripts/compare_plans.py --save before.json     # on the old tree
    PYTHONPATH=. python scripts/compare_plans.py --against before.json  # on the new one

With ``--against`` every cell whose plan differs is marked ``CHANGED`` (exit code 1) and the
solve seconds are shown side by side. The ONNX samples use ``--dim batch=8`` (and
``sequence=128`` for bert and gpt2). Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = (0.9, 0.7, 0.5)
STRATEGIES = ("auto", "treewidth", "pathwidth", "chain-dp")
DIMS = {"bert": {"batch": 8, "sequence": 128}, "gpt2": {"batch": 8, "sequence": 128}}


def samples() -> list[Path]:
    """The sample graphs: every ONNX model and JSON graph, and the twremat text."""
    return sorted(p for p in (ROOT / "sample_graphs").iterdir() if p.suffix in (".onnx", ".json", ".txt"))


def run_graph(path: str, strategies: list[str]) -> dict[str, dict]:
    """Every cell of one graph, in this process (the child of :func:`main`)."""
    import hashlib  # noqa: PLC0415
    import time  # noqa: PLC0415

    from remat_cli.errors import RematError  # noqa: PLC0415
    from remat_cli.loaders import LoadOptions, load_graph  # noqa: PLC0415
    from remat_cli.planner import make_plan, store_all_peak  # noqa: PLC0415

    p = Path(path)
    dims = DIMS.get(p.stem, {"batch": 8}) if p.suffix == ".onnx" else {}
    graph = load_graph(p, LoadOptions(dims=tuple(dims.items())))
    peak = store_all_peak(graph)
    out: dict[str, dict] = {}
    for ratio in BUDGETS:
        for name in strategies:
            key = f"{p.name} {ratio}x {name}"
            started = time.perf_counter()
            try:
                plan = make_plan(graph, name, int(ratio * peak), reference_peak=peak)
            except RematError as e:
                out[key] = {"rc": e.exit_code, "seconds": time.perf_counter() - started}
                continue
            seconds = time.perf_counter() - started
            sched = plan.schedule
            sha = hashlib.sha256(sched.ops.tobytes() + sched.nodes.astype("int64").tobytes()).hexdigest()[:16]
            info = {k: str(v) for k, v in plan.info.items() if "second" not in k}
            out[key] = {
                "rc": 0,
                "cost": plan.metrics.cost,
                "peak": plan.metrics.peak_bytes,
                "winner": str(plan.info.get("winner", name)),
                "sha": sha,
                "info": hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()[:16],
                "texts": {k: info[k] for k in ("improved", "polished") if k in info},
                "seconds": seconds,
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save", type=Path, help="write the results as JSON")
    ap.add_argument("--against", type=Path, help="compare with results saved earlier")
    ap.add_argument("--only", default="", help="only graphs whose file name contains this")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    strategies = args.strategies.split(",")
    if args.child:
        print(json.dumps(run_graph(args.child, strategies)))
        return
    before = json.loads(args.against.read_text()) if args.against else {}
    results: dict[str, dict] = {}
    changed = 0
    for path in samples():
        if args.only not in path.name:
            continue
        cmd = [sys.executable, __file__, "--child", str(path), "--strategies", args.strategies]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
        for key, r in json.loads(proc.stdout).items():
            results[key] = r
            old = before.get(key)
            same = ("rc", "cost", "peak", "winner", "sha", "info")
            mark = "" if old is None or all(old.get(f) == r.get(f) for f in same) else "CHANGED"
            changed += mark == "CHANGED"
            cost = "no fit" if r["rc"] else f"{r['cost']:.6g}"
            was = "" if old is None else f"{old['seconds']:7.3f}"
            print(f"{key:42s} {cost:>12s} {r.get('winner') or '-':>10s} {r['seconds']:7.3f} {was:>7s} {mark}", flush=True)
    if args.save:
        args.save.write_text(json.dumps(results, indent=1))
    if args.against:
        print(f"{changed} cell(s) changed")
        sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
