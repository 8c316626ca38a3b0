"""A fuzzing campaign against the remat CLI: thousands of hostile inputs, counted by outcome.

Inputs are generated documents of every format (tests/fuzz_docs.py: remat JSON, node-link,
twremat text, ONNX built with onnx.helper, plan JSON, plan text) and mutations of the
files in sample_graphs/ (values swapped for extreme numbers and hostile names, keys
dropped, nodes duplicated, bytes flipped, files cut short). Each input runs through the
CLI (``info``, ``plan -o`` and a replay of the written plan, or ``validate`` for plans)
in a worker process with a time limit and a memory limit; the worker is killed and
replaced when it hangs or dies. Every answer is judged by ``fuzz_docs.check_answer``.

Prints counts per outcome (clean error / ok / exception / wrong / timeout / crash), per
kind of input, and the most frequent reasons for every bad outcome. Asserts nothing.

    PYTHONPATH=. python scripts/fuzz.py --count 2000 --seed 1 --jobs 2
    PYTHONPATH=. python scripts/fuzz.py --count 200 --kinds onnx --save-dir /tmp/fuzz-bad
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_docs import (  # noqa: E402
    GENERATORS,
    NAMES,
    NUMBERS,
    PLAN_GENERATORS,
    SAFE_GRAPH,
    RandomChooser,
    check_answer,
    check_validated,
)

OUTCOMES = ("clean-error", "ok", "exception", "wrong", "timeout", "crash")
STRATEGIES = ("store-all", "greedy", "dtr", "chain-dp", "chen-sqrt", "treewidth", "pathwidth", "auto")
BUDGETS = ("none", "1x", "0.8x", "0.5x", "100", "1GiB")
SAMPLE_LIMIT = 300_000  # bytes: larger samples are too slow to mutate thousands of times


# --------------------------------------------------------------------------- inputs


def _samples() -> list[tuple[str, bytes, list[str]]]:
    """Sample graphs small enough to mutate, each with --dim options for its symbolic dimensions."""
    out = []
    for path in sorted((ROOT / "sample_graphs").iterdir()):
        if path.is_file() and path.suffix in (".json", ".txt", ".onnx") and path.stat().st_size <= SAMPLE_LIMIT:
            out.append((path.name, path.read_bytes(), _dim_args(path)))
    return out


def _dim_args(path: Path) -> list[str]:
    if path.suffix != ".onnx":
        return []
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names = sorted({d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param})
    return [arg for name in names for arg in ("--dim", f"{name}=2")]


def _mutate_json(doc: Any, rng: random.Random, edits: int) -> Any:
    """Replace, drop or duplicate random values anywhere in a JSON document."""
    for _ in range(edits):
        parents: list[tuple[Any, Any]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for k, v in node.items():
                    parents.append((node, k))
                    walk(v)
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    parents.append((node, i))
                    walk(v)

        walk(doc)
        if not parents:
            return doc
        container, key = rng.choice(parents)
        action = rng.random()
        if action < 0.45:
            container[key] = rng.choice(NUMBERS)
        elif action < 0.7:
            container[key] = rng.choice(NAMES)
        elif action < 0.85:
            if isinstance(container, dict):
                del container[key]
            else:
                container.pop(key)
        elif isinstance(container, list):
            container.insert(key, json.loads(json.dumps(container[key], allow_nan=True)))  # a duplicate
        else:
            container[key] = [container[key], container[key]]
    return doc


def _mutate_text(text: str, rng: random.Random, edits: int) -> str:
    lines = text.splitlines()
    for _ in range(edits):
        if not lines:
            break
        k = rng.randrange(len(lines))
        parts = lines[k].split()
        action = rng.random()
        if parts and action < 0.6:
            parts[rng.randrange(len(parts))] = str(rng.choice(NUMBERS + NAMES))
            lines[k] = " ".join(parts)
        elif action < 0.8:
            lines.insert(k, lines[k])
        else:
            del lines[k]
    return "\n".join(lines) + "\n"


def _mutate_onnx(data: bytes, rng: random.Random, edits: int) -> bytes:
    """Edit dims, names and inputs of a parsed model; sometimes flip or cut bytes instead."""
    if rng.random() < 0.3:
        buf = bytearray(data)
        for _ in range(edits):
            if rng.random() < 0.3:
                return bytes(buf[: rng.randrange(1, len(buf))])
            k = rng.randrange(len(buf))
            buf[k] ^= 1 << rng.randrange(8)
        return bytes(buf)
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(data)
    g = model.graph
    for _ in range(edits):
        action = rng.random()
        vis = list(g.input) + list(g.value_info) + list(g.output)
        if action < 0.4 and vis:
            vi = rng.choice(vis)
            dims = vi.type.tensor_type.shape.dim
            if len(dims):
                d = dims[rng.randrange(len(dims))]
                choice = rng.choice([0, -1, -7, 2**31, 2**40, 2**62, 2**63 - 1, "batch", "[/x]", 3])
                if isinstance(choice, int):
                    d.dim_value = choice
                else:
                    d.dim_param = choice
        elif action < 0.6 and len(g.node):
            nd = g.node[rng.randrange(len(g.node))]
            nd.name = str(rng.choice(NAMES))
        elif action < 0.8 and len(g.node):
            nd = g.node[rng.randrange(len(g.node))]
            if len(nd.input):
                nd.input[rng.randrange(len(nd.input))] = rng.choice(["missing", g.node[-1].output[0] if g.node[-1].output else "z"])
        elif len(g.initializer):
            t = g.initializer[rng.randrange(len(g.initializer))]
            if len(t.dims):
                t.dims[rng.randrange(len(t.dims))] = rng.choice([0, 2**40, 2**62, 1])
    return model.SerializeToString()


def make_case(index: int, seed: int, kinds: tuple[str, ...], samples: list[tuple[str, bytes, list[str]]]) -> dict[str, Any]:
    """The ``index``-th input of the campaign with ``seed``: deterministic, independent of --jobs."""
    rng = random.Random(f"{seed}:{index}")
    kind = rng.choice(kinds)
    chooser = RandomChooser(rng)
    case: dict[str, Any] = {"index": index, "kind": kind, "dims": []}
    if kind in GENERATORS:
        case["name"], case["data"] = GENERATORS[kind](chooser)
    elif kind in PLAN_GENERATORS:
        case["name"], case["data"] = PLAN_GENERATORS[kind](chooser)
    else:  # "mutant": a sample graph, mutated
        name, data, case["dims"] = rng.choice(samples)
        edits = rng.choice([1, 1, 2, 3, 8])
        case["kind"] = f"mutant-{Path(name).suffix.lstrip('.')}"
        if name.endswith(".json"):
            doc = _mutate_json(json.loads(data), rng, edits)
            case["data"] = json.dumps(doc).encode()
        elif name.endswith(".onnx"):
            case["data"] = _mutate_onnx(data, rng, edits)
        else:
            case["data"] = _mutate_text(data.decode(), rng, edits).encode()
        case["name"] = name
    case["strategy"] = rng.choice(STRATEGIES)
    case["budget"] = rng.choice(BUDGETS)
    return case


# --------------------------------------------------------------------------- one input


_WORST = {"ok": 0, "clean-error": 0, "wrong": 2, "exception": 1}


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Run the CLI on one input (in a worker) and judge every answer; the worst one counts."""
    from click.testing import CliRunner

    from remat_cli.cli import cli

    def run(args: list[str]) -> tuple[int, str, str]:
        res = CliRunner().invoke(cli, args)
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            return 99, res.stdout, f"Traceback: {type(res.exception).__name__}: {res.exception}"
        return res.exit_code, res.stdout, res.stderr

    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / case["name"]
        path.write_bytes(case["data"])
        if case["kind"].startswith("plan-"):
            graph = Path(tmp) / "g.json"
            graph.write_text(json.dumps(SAFE_GRAPH))
            code, out, err = run(["validate", str(graph), str(path), "--format", "json"])
            verdict = check_answer(code, out, err, json_out=True)
            if code == 0 and verdict.outcome == "ok":
                verdict = check_validated(graph, path)
            verdicts.append(("validate", verdict))
        else:
            dims = case["dims"]
            code, out, err = run(["info", str(path), "--format", "json", *dims])
            verdicts.append(("info", check_answer(code, out, err, json_out=True)))
            plan = Path(tmp) / "out.plan.json"
            args = ["plan", str(path), "-s", case["strategy"], "-b", case["budget"], "-o", str(plan), "--format", "json", *dims]
            code, out, err = run(args)
            dim_pairs = tuple((a.split("=")[0], int(a.split("=")[1])) for a in dims[1::2])
            verdicts.append(("plan", check_answer(code, out, err, json_out=True, graph_path=path, plan_path=plan, dims=dim_pairs)))
            conv = Path(tmp) / "conv.json"
            code, out, err = run(["convert", str(path), str(conv), *dims])
            verdict = check_answer(code, out, err)
            if code == 0:
                code, out, err = run(["info", str(conv), "--no-decompose", "--format", "json"])
                verdict = check_answer(code, out, err, json_out=True)
                if verdict.outcome == "clean-error":  # remat refused what it wrote itself
                    verdict = type(verdict)("wrong", f"convert output not readable: {verdict.detail}")
            verdicts.append(("convert", verdict))
    command, worst = max(verdicts, key=lambda cv: _WORST[cv[1].outcome])
    return {"outcome": worst.outcome, "detail": f"{command}: {worst.detail}" if worst.detail else command}


# --------------------------------------------------------------------------- the campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000, help="inputs to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", "-j", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per input")
    parser.add_argument("--max-memory", type=float, default=2.0, help="GiB of address space per worker")
    all_kinds = (*GENERATORS, *PLAN_GENERATORS, "mutant")
    parser.add_argument("--kinds", default=",".join(all_kinds), help=f"comma-separated subset of {','.join(all_kinds)}")
    parser.add_argument("--save-dir", type=Path, help="write every input with a bad outcome there")
    parser.add_argument("--show", type=int, default=6, help="reasons listed per bad outcome")
    args = parser.parse_args(argv)

    from remat_cli.executors import LocalExecutor

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = set(kinds) - set(all_kinds)
    if unknown:
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    samples = _samples()
    cases = [make_case(i, args.seed, kinds, samples) for i in range(args.count)]
    executor = LocalExecutor(args.jobs, timeout=args.timeout, memory_limit=int(args.max_memory * (1 << 30)))
    counts: collections.Counter[str] = collections.Counter()
    per_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    start = time.monotonic()
    done = 0
    for event in executor.run(run_case, cases):
        if event.kind != "done":
            continue
        case = cases[event.index]
        outcome = event.outcome
        if outcome.failure is None:
            result = outcome.value
        elif outcome.failure == "timeout":
            result = {"outcome": "timeout", "detail": f"{case['strategy']}: {outcome.message}"}
        elif outcome.failure == "crash":
            result = {"outcome": "crash", "detail": outcome.message}
        else:
            result = {"outcome": "exception", "detail": f"in the harness: {outcome.message}"}
        counts[result["outcome"]] += 1
        per_kind[case["kind"]][result["outcome"]] += 1
        if result["outcome"] not in ("ok", "clean-error"):
            reasons[result["outcome"]][_reason(result["detail"])] += 1
            if args.save_dir:
                args.save_dir.mkdir(parents=True, exist_ok=True)
                stem = f"{case['index']:05d}-{result['outcome']}-{case['kind']}"
                (args.save_dir / f"{stem}-{case['name'].replace('/', '_')}").write_bytes(case["data"])
                (args.save_dir / f"{stem}.why.txt").write_text(f"strategy {case['strategy']} budget {case['budget']}\n{result['detail']}\n")
        done += 1
        if done % 200 == 0:
            print(f"  {done}/{len(cases)} inputs, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - start
    print(
        f"remat fuzz: {len(cases)} inputs, seed {args.seed}, {args.jobs} jobs, "
        f"{args.timeout:g} s and {args.max_memory:g} GiB per input, {elapsed:.0f} s"
    )
    print("  ".join(f"{o}: {counts[o]}" for o in OUTCOMES))
    width = max(len(k) for k in per_kind) if per_kind else 4
    print(f"{'kind':<{width}}  " + "  ".join(f"{o:>11}" for o in OUTCOMES))
    for kind in sorted(per_kind):
        print(f"{kind:<{width}}  " + "  ".join(f"{per_kind[kind][o]:>11}" for o in OUTCOMES))
    for outcome in OUTCOMES[2:]:
        if reasons[outcome]:
            print(f"\n{outcome}: most frequent reasons")
            for reason, n in reasons[outcome].most_common(args.show):
                print(f"  {n:>5}  {reason[:90]}")
    return 0


def _reason(detail: str) -> str:
    """Group similar failures: paths, numbers and quoted names removed."""
    import re

    text = re.sub(r"/\S+/", "", detail)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    return re.sub(r"\d+", "N", text)


if __name__ == "__main__":
    sys.exit(main())
