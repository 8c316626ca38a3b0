"""Benchmark `remat batch`: plan 200 generated graphs with -j 1 and -j 2; print the speed-up.

    PYTHONPATH=. python scripts/bench_batch.py [--files 200] [--nodes 400] [--jobs 1,2]

The graphs (training graphs of random DAGs, as remat JSON) are written to a temporary
directory; each run is the real command line in a fresh process, so worker start-up and
result transfer are included. Prints wall times, files per second, and the speed-up of
each -j over the first. Expect about 2x on two idle cores for graphs that take well over
a worker's per-file overhead (a few ms); much less when other work shares the cores.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remat_cli import generators, training  # noqa: E402
from remat_cli.loaders import remat_json  # noqa: E402


def write_graphs(directory: Path, files: int, nodes: int) -> None:
    """Training graphs of model-shaped families (residual chains, transformers, U-Nets,
    Inception-like diamonds, partial 3-trees), about ``nodes`` forward nodes each."""
    import numpy as np

    for k in range(files):
        rng = np.random.default_rng(k)
        sizes = rng.integers(1 << 10, 1 << 20, nodes)
        family = k % 5
        if family == 0:
            fwd = generators.skip_chain(nodes, skip=int(rng.integers(2, 6)), mem=sizes)
        elif family == 1:
            fwd = generators.transformer(max(1, nodes // 13))
        elif family == 2:
            fwd = generators.unet(int(rng.integers(3, 6)), convs=max(2, nodes // 40))
        elif family == 3:
            fwd = generators.diamonds(max(1, nodes // 5), 3, mem=sizes[: 4 * max(1, nodes // 5) + 1])
        else:
            fwd = generators.partial_ktree(nodes, 3, seed=k, mem=sizes)
        (directory / f"g{k:04d}.json").write_text(remat_json.dumps(training.checkmate_training_graph(fwd)))


def run(directory: Path, jobs: int, budgets: str, strategy: str, out: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable,
        "-m",
        "remat_cli",
        "batch",
        str(directory),
        "-j",
        str(jobs),
        "-s",
        strategy,
        "--budgets",
        budgets,
        "--jsonl",
        str(out),
        "--format",
        "csv",
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"remat batch failed ({proc.returncode}): {proc.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=150, help="forward nodes per graph (training graphs are ~2x)")
    parser.add_argument("--strategy", default="treewidth", help="strategy planned for every file (auto runs them all: slower)")
    parser.add_argument("--jobs", default="1,2", help="comma-separated -j values to compare")
    parser.add_argument("--budgets", default="none,0.7x", help="budget sweep planned for every file")
    args = parser.parse_args()
    jobs = [int(j) for j in args.jobs.split(",")]
    with tempfile.TemporaryDirectory(prefix="remat-bench-") as tmp:
        directory = Path(tmp) / "graphs"
        directory.mkdir()
        started = time.perf_counter()
        write_graphs(directory, args.files, args.nodes)
        print(f"wrote {args.files} graphs ({args.nodes} forward nodes each) in {time.perf_counter() - started:.2f} s")
        print(f"cores: {os.cpu_count()}; strategy {args.strategy}; budgets per file: {args.budgets}")
        times: dict[int, float] = {}
        outputs: dict[int, list[dict]] = {}
        for j in jobs:
            out = Path(tmp) / f"j{j}.jsonl"
            times[j] = run(directory, j, args.budgets, args.strategy, out)
            outputs[j] = [{k: v for k, v in json.loads(line).items() if k != "solve_seconds"} for line in out.read_text().splitlines()]
            print(f"-j {j}: {times[j]:7.2f} s   {args.files / times[j]:7.1f} files/s")
        base = jobs[0]
        for j in jobs[1:]:
            same = "identical rows" if outputs[j] == outputs[base] else "ROWS DIFFER"
            print(f"speed-up of -j {j} over -j {base}: {times[base] / times[j]:.2f}x ({same})")


if __name__ == "__main__":
    main()
