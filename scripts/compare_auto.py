#!/usr/bin/env python3
"""auto's plan quality before/after a speed change: cost and peak of ``remat plan -s auto``
on every sample graph and on bench_speed's 1k graphs at 0.5x/0.7x/0.9x, one process each.

    PYTHONPATH=. python scripts/compare_auto.py --save before.json
    PYTHONPATH=. python scripts/compare_auto.py --against before.json   # after the change

With ``--against`` each row shows the saved cost beside the new one and a mark where the
new plan is costlier (``WORSE``) or cheaper; the exit code is 1 when any plan got costlier
or stopped fitting. Wall seconds per process are printed too (whole process, bytecode as
installed). Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

BUDGETS = ("0.5x", "0.7x", "0.9x")


def graphs(tmp: Path, sizes: list[int]) -> list[Path]:
    """The sample graphs, then bench_speed's training graphs of the given sizes as JSON."""
    from bench_speed import shapes  # noqa: PLC0415 - a sibling script

    from remat_cli.loaders import remat_json

    files = sorted(p for p in (ROOT / "sample_graphs").iterdir() if p.suffix in (".onnx", ".json", ".txt"))
    for size in sizes:
        for shape, graph in shapes(size).items():
            path = tmp / f"{shape}{size}.json"
            path.write_text(remat_json.dumps(graph))
            files.append(path)
    return files


def dims(path: Path) -> list[str]:
    """``--dim`` options for an ONNX sample: its example dims (scripts/sample_shapes.json)."""
    shapes = json.loads((ROOT / "scripts" / "sample_shapes.json").read_text())
    given = shapes.get(path.stem, {}).get("example_dims", {}) if path.suffix == ".onnx" else {}
    return [a for k, v in given.items() for a in ("--dim", f"{k}={v}")]


def plan(path: Path, budget: str) -> dict:
    """cost/peak/winner of one whole-process ``remat plan -s auto`` (None cost: no fit)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [sys.executable, "-m", "remat_cli", "plan", str(path), "-s", "auto", "-b", budget, "--format", "json", *dims(path)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        return {"cost": None, "peak": None, "winner": None, "rc": proc.returncode, "wall": wall}
    doc = json.loads(proc.stdout)
    m = doc["metrics"]
    return {"cost": m["cost"], "peak": m["peak_bytes"], "winner": doc["info"]["winner"], "rc": 0, "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save", type=Path, help="write the results as JSON")
    ap.add_argument("--against", type=Path, help="compare with results saved earlier")
    ap.add_argument("--sizes", default="1000", help="bench_speed graph sizes to add ('' for none)")
    ap.add_argument("--only", default="", help="only graphs whose file name contains this")
    args = ap.parse_args()
    before = json.loads(args.against.read_text()) if args.against else {}
    results: dict[str, dict] = {}
    worse = 0
    print(f"{'graph':28s} {'budget':>6s} {'cost':>14s} {'before':>14s} {'winner':>12s} {'wall s':>7s}")
    with tempfile.TemporaryDirectory() as tmp:
        sizes = [int(s) for s in args.sizes.split(",") if s]
        for path in graphs(Path(tmp), sizes):
            if args.only not in path.name:
                continue
            for budget in BUDGETS:
                key = f"{path.name} {budget}"
                r = results[key] = plan(path, budget)
                old = before.get(key)
                mark = ""
                if old is not None:
                    if old["cost"] is not None and (r["cost"] is None or r["cost"] > old["cost"] * (1 + 1e-9)):
                        mark, worse = "WORSE", worse + 1
                    elif old["cost"] is None and r["cost"] is not None or (r["cost"] or 0) < (old["cost"] or 0):
                        mark = "better"
                cost = "no fit" if r["cost"] is None else f"{r['cost']:.6g}"
                prev = "" if old is None else ("no fit" if old["cost"] is None else f"{old['cost']:.6g}")
                print(f"{path.name:28s} {budget:>6s} {cost:>14s} {prev:>14s} {r['winner'] or '-':>12s} {r['wall']:7.2f} {mark}", flush=True)
    if args.save:
        args.save.write_text(json.dumps(results, indent=1))
    if args.against:
        print(f"{worse} plan(s) costlier than before")
        sys.exit(1 if worse else 0)


if __name__ == "__main__":
    main()
