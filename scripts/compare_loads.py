#!/usr/bin/env python3
"""Proof that two versions of the ONNX loader load the very same graphs.

Prints one line per ONNX input: a sha256 of everything the load produced (the training
graph's ids, ops, kinds, mem, cost, workspace, edges, targets, fixed memory, lower bound
and meta, the forward graph's per-node facts, every warning), or of the one-line error
and exit code where the load refused the input. Run it under each version and diff::

    python scripts/compare_loads.py --capture /tmp/cases          # once: record test inputs
    PYTHONPATH=/tmp/onnxbase python scripts/compare_loads.py --cases /tmp/cases > old.txt
    PYTHONPATH=. python scripts/compare_loads.py --cases /tmp/cases > new.txt
    diff old.txt new.txt && echo identical

The inputs: every ``sample_graphs/*.onnx`` (``batch=8``, ``sequence=128`` where the model
has it), loaded the way ``remat plan`` does; and, with ``--cases``, every model the test
suite hands to the ONNX reader, recorded by ``--capture`` (which runs the ONNX tests with
this file as a pytest plugin that saves each ``read_model`` call's model and arguments).
Whichever ``remat_cli`` is first on ``sys.path`` is the version measured.

``--bench OLD_ROOT`` times both versions instead (alternating runs, medians): one
``load_graph`` per fresh process, and the whole ``remat plan -s auto -b 0.7x``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the test files that build or read ONNX models (their read_model calls are recorded)
CAPTURE_TESTS = (
    "tests/test_onnx_loader.py",
    "tests/test_onnx_cli.py",
    "tests/test_hostile_content.py",
    "tests/test_fuzz.py",
    "tests/test_fuzz_files.py",
    "tests/test_views.py",
    "tests/test_inference_export.py",
    "tests/test_costmodel.py",
    "tests/test_attention.py",
    "tests/test_precision.py",
    "tests/test_loading_steps.py",
    "tests/test_meta_facts.py",
    "tests/test_validate_load.py",
    "tests/test_training_conventions.py",
    "tests/test_batch_dims.py",
    "tests/test_sharding.py",
    "tests/test_onnx_fold.py",
)
_CAPTURE_ENV = "REMAT_COMPARE_LOADS_CAPTURE"


def _digest(parts: list[Any]) -> str:
    h = hashlib.sha256()
    for p in parts:
        if hasattr(p, "tobytes"):
            h.update(str(p.dtype).encode() + str(p.shape).encode() + p.tobytes())
        else:
            h.update(json.dumps(p, sort_keys=True, default=repr).encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


def _graph_parts(g: Any) -> list[Any]:
    src, dst = g.edges()
    return [
        g.name,
        list(g.ids),
        list(g.ops),
        list(g.kinds),
        g.mem,
        g.cost,
        g.workspace,
        src,
        dst,
        g.targets,
        int(g.fixed_mem),
        g.cost_unit,
        g.seconds if g.seconds is not None else None,
        int(g.lb),
        int(g.lb_node),
        dict(g.meta),
    ]


def _facts_parts(facts: Any) -> list[Any]:
    if facts is None:
        return [None]
    import dataclasses

    return [
        getattr(facts, f.name) if hasattr(getattr(facts, f.name), "tobytes") else getattr(facts, f.name) for f in dataclasses.fields(facts)
    ]


def _sample_line(path: Path) -> str:
    """Load a sample as ``remat plan`` does: the forward graph, then the training graph."""
    from remat_cli.errors import RematError
    from remat_cli.loaders import LoadOptions, build_graph, read_file

    options = LoadOptions(dims=(("batch", 8), ("sequence", 128)), strict_dims=False)
    try:
        loaded = read_file(path, options)
        facts = _facts_parts(loaded.facts)
        built = build_graph(loaded, options)
        sha = _digest([*_graph_parts(loaded.graph), *facts, *_graph_parts(built.graph), list(built.warnings), list(built.notes)])
    except RematError as exc:
        sha = _digest(["error", str(exc), getattr(exc, "exit_code", 2)])
    return f"{path.relative_to(ROOT)} {sha}"


def _case_line(case: Path) -> str:
    """Replay one recorded ``read_model`` call, then build its training graph."""
    import onnx

    from remat_cli.costmodel import load_device
    from remat_cli.errors import RematError
    from remat_cli.loaders import LoadOptions
    from remat_cli.loaders import onnx as onnx_loader

    args = json.loads(case.with_suffix(".json").read_text())
    model = onnx.ModelProto()
    model.ParseFromString(case.read_bytes())
    said: list[str] = []
    try:
        device = load_device(args.pop("device"))
    except Exception as exc:  # noqa: BLE001 - a device file the test made and removed
        return f"{case.name} skipped ({type(exc).__name__})"
    try:
        fwd, facts = onnx_loader.read_model(model, device=device, warn=said.append, **args)
        parts = [*_graph_parts(fwd), *_facts_parts(facts)]
        options = LoadOptions()
        fwd2, facts2 = onnx_loader.forward_graph(fwd, facts, options)
        train = onnx_loader.training_graph(fwd2, facts2, (), options, Path(args.get("source", "m.onnx")), said.append)
        parts += _graph_parts(train)
    except RematError as exc:
        parts = ["error", str(exc), getattr(exc, "exit_code", 2)]
    except Exception as exc:  # noqa: BLE001 - a crash is a difference too
        parts = ["crash", type(exc).__name__, str(exc)]
    return f"{case.name} {_digest([*parts, said])}"


# ---------------------------------------------------------------------------- capture
def pytest_configure(config: Any) -> None:
    """As a pytest plugin (``-p compare_loads``): save every ``read_model`` call's inputs."""
    out = os.environ.get(_CAPTURE_ENV)
    if not out:
        return
    from remat_cli.loaders import onnx as onnx_loader

    original = onnx_loader.read_model
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)

    def recording(model: Any, **kwargs: Any) -> Any:
        data = model.SerializeToString()
        device = kwargs.get("device")
        args = {
            "source": kwargs.get("source", "<onnx>"),
            "name": kwargs.get("name", "model"),
            "dims": dict(kwargs.get("dims") or {}),
            "keep_views": bool(kwargs.get("keep_views", False)),
            "cost": kwargs.get("cost", "roofline"),
            "device": device.name if device is not None else "a100",
            "strict_dims": bool(kwargs.get("strict_dims", True)),
        }
        key = hashlib.sha256(data + json.dumps(args, sort_keys=True).encode()).hexdigest()[:20]
        (folder / f"{key}.onnx").write_bytes(data)
        (folder / f"{key}.json").write_text(json.dumps(args, sort_keys=True))
        return original(model, **kwargs)

    onnx_loader.read_model = recording


def _capture(folder: Path) -> int:
    env = dict(os.environ, **{_CAPTURE_ENV: str(folder)})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "scripts"), str(ROOT), env.get("PYTHONPATH", "")])
    tests = [t for t in CAPTURE_TESTS if (ROOT / t).exists()]
    cmd = [sys.executable, "-m", "pytest", "-p", "compare_loads", "-p", "no:cacheprovider", "-x", *tests]
    return subprocess.call(cmd, cwd=ROOT, env=env)


# ---------------------------------------------------------------------------- timing
_LOAD_ONCE = """
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
from remat_cli.loaders import LoadOptions, load_graph
t1, c1 = time.perf_counter(), time.process_time()
load_graph(sys.argv[1], LoadOptions(dims=(("batch", 8), ("sequence", 128)), strict_dims=False))
t2, c2 = time.perf_counter(), time.process_time()
print(t2 - t1, c2 - c1)
"""
BENCH_SAMPLES = ("bert", "gpt2", "mobilenet_v2", "vit_b16")


def _bench(old: Path, runs: int) -> None:
    """Seconds, old version against this one, alternating runs: ``load_graph`` in a fresh
    process (onnx imports included, remat_cli.loaders already imported), and the whole
    ``remat plan X.onnx --dim batch=8 [--dim sequence=128] -s auto -b 0.7x --format json``.
    Medians of wall and CPU seconds; timings vary with the machine's load."""
    import resource
    import statistics
    import time

    versions = {"old": old.resolve(), "new": ROOT}
    print(f"{'sample':<14}{'what':<8}" + "".join(f"{v + ' wall':>11}{v + ' cpu':>10}" for v in versions))
    for name in BENCH_SAMPLES:
        path = ROOT / "sample_graphs" / f"{name}.onnx"
        dims = ["--dim", "batch=8"] + (["--dim", "sequence=128"] if name in ("bert", "gpt2") else [])
        plan = ["-m", "remat_cli", "plan", str(path), *dims, "-s", "auto", "-b", "0.7x", "--format", "json"]
        found: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(runs):
            for label, root in versions.items():
                env = dict(os.environ, PYTHONPATH=str(root))
                out = subprocess.run(
                    [sys.executable, "-c", _LOAD_ONCE, str(path)], cwd=root, env=env, capture_output=True, text=True, check=True
                )
                wall, cpu = (float(x) for x in out.stdout.split())
                found.setdefault((label, "load"), []).append((wall, cpu))
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run([sys.executable, *plan], cwd=root, env=env, capture_output=True, check=True)
                wall = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                found.setdefault((label, "plan"), []).append((wall, cpu))
        for what in ("load", "plan"):
            cells = ""
            for label in versions:
                rows = found[(label, what)]
                cells += f"{statistics.median(r[0] for r in rows):>11.3f}{statistics.median(r[1] for r in rows):>10.3f}"
            print(f"{name:<14}{what:<8}{cells}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, help="run the ONNX tests and record their models into this folder")
    parser.add_argument("--cases", type=Path, help="also replay the models recorded in this folder")
    parser.add_argument("--bench", type=Path, metavar="OLD_ROOT", help="time loads and plans: the checkout at OLD_ROOT against this one")
    parser.add_argument("--runs", type=int, default=6, help="runs per version with --bench (default 6)")
    args = parser.parse_args()
    if args.capture:
        return _capture(args.capture)
    if args.bench:
        _bench(args.bench, args.runs)
        return 0
    import remat_cli

    print(f"# remat_cli from {Path(remat_cli.__file__).parent}", file=sys.stderr)
    for path in sorted((ROOT / "sample_graphs").glob("*.onnx")):
        print(_sample_line(path), flush=True)
    if args.cases:
        for case in sorted(args.cases.glob("*.onnx")):
            print(_case_line(case), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
