#!/usr/bin/env python3
"""Speed benchmark: whole-process wall time of `remat` per strategy and graph size.

Per size (1k, 10k, 100k nodes of training graph) and shape (NN-shaped: a residual
chain with sizes that vary; random: an Erdős–Rényi forward DAG with about two edges per
node, e.g. the 10k training graph of ``random_dag(5000, p=0.0008)``; a wide grid), it
writes the graph as remat JSON and times ``remat plan FILE -s S -b 0.5x`` for each
strategy in its own process (load, plan, simulate and report included), plus
``remat info`` and the start-up time of ``remat --version`` and ``remat --help``, and of
``import onnx``, which every ONNX load adds.
A run past ``--timeout`` is killed and shown as ``>T``; ``--rss`` adds each process's peak
resident memory (MB, from ``wait4``), the figure the docs' memory bound is checked against.
The load average is printed per row (the CPU seconds are the steadier figure on a shared
machine). Prints figures; asserts nothing.

Bytecode: an installed package has its ``.pyc`` files (pip writes them at install), so the
benchmark compiles the timed checkout's ``remat_cli`` first and lets the timed processes
read (and write) bytecode even where ``PYTHONDONTWRITEBYTECODE`` is set; it prints how long
that compilation took, which is what a start without any ``.pyc`` would add at most (only
the modules a command imports are compiled; ``remat --version`` imports few).

Interpreter: ``--python`` times another one (default: this one). A virtualenv with an
editable install (``pip install -e``) runs its import finder at every start, 15-45 ms that a
user's ``pip install .`` does not pay; the line "start-up python -c pass" shows it. To time
as installed, give the python of a venv with a regular install (or with the dependencies
only): ``PYTHONPATH`` puts the timed checkout first either way.

    PYTHONPATH=. python scripts/bench_speed.py [--sizes 1000,10000] [--timeout 120] [--graphs DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from remat_cli import generators as G
from remat_cli.graph import Graph
from remat_cli.loaders import remat_json
from remat_cli.training import checkmate_training_graph

STRATEGIES = ("store-all", "chen-sqrt", "chen-greedy", "chain-dp", "greedy", "dtr", "treewidth", "pathwidth", "auto")


def sparse_random_dag(n: int, degree: float, seed: int = 0) -> Graph:
    """Erdős–Rényi DAG with about ``degree`` edges per node, sampled without the n² pairs
    that ``generators.random_dag`` enumerates (which does not fit memory at 50k nodes)."""
    rng = np.random.default_rng(seed)
    m = int(n * degree)
    a = rng.integers(0, n, m)
    b = rng.integers(0, n, m)
    keep = a != b
    src, dst = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    pairs = np.unique(np.stack([src, dst], axis=1), axis=0)
    return G.from_edges(n, pairs, name=f"random{n}")


def shapes(size: int) -> dict[str, Graph]:
    """Training graphs of about ``size`` nodes (the checkmate convention doubles a forward graph)."""
    half = size // 2
    rng = np.random.default_rng(1)
    nn = G.skip_chain(half, skip=3, mem=rng.integers(1 << 10, 1 << 20, half), cost=rng.random(half) + 0.5)
    if size == 10_000:
        rnd = G.random_dag(5000, p=0.0008)  # the graph issue 14 reports
    else:
        rnd = sparse_random_dag(half, 4.0)
    side = max(2, int(round((half / 8) ** 0.5)))
    grid = G.grid(side, 8 * side)  # wide: 8× more columns than rows
    return {
        "nn": checkmate_training_graph(nn),
        "random": checkmate_training_graph(rnd),
        "grid": checkmate_training_graph(grid),
    }


def graph_files(size: int, wanted: list[str], folder: Path) -> dict[str, tuple[Path, int]]:
    """The remat JSON files of ``shapes(size)`` that are ``wanted``, written to ``folder``
    unless already there (a graph is made once per folder: the 100k ones take seconds),
    with their node counts. Made in a forked child process: a process's peak resident
    memory (``ru_maxrss``) counts its parent's at the fork, so this process stays small
    (making the 10k graphs here grew it to 339 MB, and every timed process showed that)."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(_graph_files, (size, wanted, folder))


def _graph_files(size: int, wanted: list[str], folder: Path) -> dict[str, tuple[Path, int]]:
    paths = {shape: folder / f"{shape}{size}.json" for shape in wanted}
    if not all(p.exists() for p in paths.values()):
        for shape, graph in shapes(size).items():
            if shape in paths and not paths[shape].exists():
                paths[shape].write_text(remat_json.dumps(graph))
    return {shape: (path, len(json.loads(path.read_text())["nodes"])) for shape, path in paths.items()}


ROOT = str(Path(__file__).resolve().parent.parent)


def timed(cmd: list[str], timeout: float) -> tuple[float, float, int | None, float]:
    """Wall seconds, CPU seconds (user + system, its own child processes included), exit
    code (None when killed at ``timeout``) and peak resident memory in MB (the process's
    ``ru_maxrss``, or its waited-for children's where larger) of one process. On a shared
    machine the CPU figure is the steadier one; the wall figure is what a user waits."""
    started = time.perf_counter()
    # cwd: `python -m` puts it first on sys.path, before PYTHONPATH (--root would not count)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=ROOT)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    killed = not timer.is_alive()
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    code: int | None = None if killed else proc.returncode
    cpu = usage.ru_utime + usage.ru_stime
    return time.perf_counter() - started, cpu, code, usage.ru_maxrss / 1024


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: .pyc files are read and kept
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def fmt(seconds: float, cpu: float, code: int | None, rss: float, timeout: float, *, show_rss: bool = False) -> str:
    if code is None:
        return f">{timeout:.0f}"
    mark = "" if code == 0 else ("!" if code == 1 else f"(rc{code})")
    return f"{seconds:.1f}/{cpu:.1f}" + (f"/{rss:.0f}" if show_rss else "") + mark


def precompile(root: str) -> float:
    """Compile ``root``'s remat_cli to bytecode, as ``pip install`` does; returns the seconds
    a fresh compilation of every module takes (timed with ``force``, in a child process)."""
    script = (
        "import compileall, sys, time; t = time.perf_counter(); "
        "compileall.compile_dir(sys.argv[1], quiet=1, force=True); print(time.perf_counter() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(Path(root) / "remat_cli")], capture_output=True, text=True, check=True, env=_env()
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,10000,100000", help="training-graph sizes, comma-separated")
    ap.add_argument("--shapes", default="nn,random,grid", help="which graph shapes")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--budget", default="0.5x")
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds before a run is killed")
    ap.add_argument("--cell-width", type=int, default=12)
    ap.add_argument("--root", default=ROOT, help="the remat checkout to time (e.g. an older one, for before/after)")
    ap.add_argument("--rss", action="store_true", help="also show each process's peak resident memory (MB)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to time with (see above)")
    ap.add_argument("--graphs", help="folder to keep the generated graphs in and reuse (100k ones take ~10 s each to make)")
    args = ap.parse_args()
    ROOT = args.root
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    print(f"bytecode: remat_cli precompiled, as pip does at install (compiling all of it takes {precompile(ROOT):.2f} s)")
    python = args.python
    editable = subprocess.run(
        [python, "-c", "import sys; print(any('__editable__' in m for m in sys.modules))"], capture_output=True, text=True, env=_env()
    ).stdout.strip()
    print(f"interpreter: {python} ({'with' if editable == 'True' else 'without'} an editable install's import finder at start)")
    remat = [python, "-m", "remat_cli"]
    for what in (["--version"], ["--help"]):
        runs = [timed(remat + what, 30)[:2] for _ in range(5)]
        wall, cpu = (statistics.median(r[i] for r in runs) for i in (0, 1))
        base = statistics.median(timed([python, "-c", "pass"], 30)[0] for _ in range(5))
        print(f"start-up remat {what[0]:10s} median wall {wall:.3f} s, cpu {cpu:.3f} s (python -c pass: {base:.3f} s)")
    # every ONNX plan imports onnx (and numpy, and onnx's ml_dtypes): not in the rows below,
    # which time JSON graphs; ml_dtypes 0.7.0 alone took 0.6 s of it (pyproject leaves it out)
    runs = [timed([python, "-c", "import onnx"], 30)[:2] for _ in range(5)]
    wall, cpu = (statistics.median(r[i] for r in runs) for i in (0, 1))
    print(f"import onnx (each ONNX load) median wall {wall:.3f} s, cpu {cpu:.3f} s")
    strategies = args.strategies.split(",")
    wanted = args.shapes.split(",")
    what = "wall/cpu seconds/peak RSS MB" if args.rss else "wall/cpu seconds"
    print(f"\n{what} per process, budget {args.budget}; ! = exit 1 (no plan fits)")
    print("cpu: user + system seconds of the process and its children (auto's second process too);")
    print(f"load: the 1-minute load average after the row, of {os.cpu_count()} cores (wall grows with it)")
    w = args.cell_width
    print(f"{'graph':14s} {'nodes':>7s} {'info':>{w}s} " + " ".join(f"{s:>{w}s}" for s in strategies) + "  load")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.graphs or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for size in (int(s) for s in args.sizes.split(",")):
            for shape, (path, nodes) in graph_files(size, wanted, folder).items():
                info = timed(remat + ["info", str(path)], args.timeout)
                cells = []
                for s in strategies:
                    run = timed(remat + ["plan", str(path), "-s", s, "-b", args.budget, "--format", "json"], args.timeout)
                    cells.append(fmt(*run, args.timeout, show_rss=args.rss))
                print(
                    f"{shape + str(size):14s} {nodes:7d} {fmt(*info, args.timeout, show_rss=args.rss):>{w}s} "
                    + " ".join(f"{c:>{w}s}" for c in cells)
                    + f"  {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    if args.rss:
        import resource

        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"(peak RSS counts the parent's at the fork: this benchmark's own is {own:.0f} MB, so a figure near it is at most that)")


if __name__ == "__main__":
    main()
