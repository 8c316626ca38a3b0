"""Check that two checkouts of remat print the same thing: a fixed set of commands (plan,
info, tradeoff, check, batch, validate; table, JSON and CSV; -o files) run in each, and
their stdout, stderr, exit codes and written files compared, timings masked.

A change that is only meant to make remat faster (issue 14 item 1: start-up and report
costs) must leave every byte of its output as it was:

    git worktree add /tmp/startbase main
    python scripts/same_output.py /tmp/startbase .          # exit 1 on any difference

Both checkouts run with this interpreter (``sys.executable``), each from its own root so
that ``python -m remat_cli`` imports that root's package. Masked: numbers followed by
`` s``/``ms``/``seconds`` and the ``solve_seconds`` fields (wall-clock timings).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NN1000 = "/work/graphs19/nn1000.json"

# (name, arguments); {out} is a fresh per-checkout output directory.
COMMANDS: list[tuple[str, list[str]]] = [
    ("plan-narrow", ["plan", "sample_graphs/unet_train.json", "-s", "treewidth", "-b", "0.7x", "--env", "COLUMNS=50"]),
    ("info-narrow", ["info", "sample_graphs/unet_train.json", "--env", "COLUMNS=44"]),
    ("plan-terminal", ["plan", "sample_graphs/unet_train.json", "-s", "treewidth", "-b", "0.7x", "--env", "FORCE_COLOR=1"]),
    ("info-terminal", ["info", "sample_graphs/training_chain_32.json", "--env", "TTY_COMPATIBLE=1"]),
    ("plan-table", ["plan", "sample_graphs/training_chain_32.json", "-b", "0.5x"]),
    ("plan-json", ["plan", "sample_graphs/training_chain_32.json", "-b", "0.5x", "--format", "json"]),
    ("plan-verbose", ["plan", "sample_graphs/unet_train.json", "-s", "treewidth", "-b", "0.7x", "-v"]),
    ("plan-unet-json", ["plan", "sample_graphs/unet_train.json", "-s", "chen-sqrt", "-b", "0.8x", "--format", "json"]),
    ("plan-o-json", ["plan", "sample_graphs/unet_train.json", "-s", "treewidth", "-b", "0.7x", "-o", "{out}/p.json"]),
    ("plan-o-txt", ["plan", "sample_graphs/random_dag.twremat.txt", "-s", "chen-sqrt", "-b", "0.9x", "-o", "{out}/p.txt"]),
    (
        "plan-o-json-fmt",
        ["plan", "sample_graphs/diamond_dag.nodelink.json", "-s", "store-all", "-b", "none", "--format", "json", "-o", "{out}/q.json"],
    ),
    ("plan-nn1000-table", ["plan", NN1000, "-s", "chen-sqrt", "-b", "0.5x"]),
    ("plan-nn1000-json", ["plan", NN1000, "-s", "chen-sqrt", "-b", "0.5x", "--format", "json"]),
    ("plan-nn1000-o", ["plan", NN1000, "-s", "chen-sqrt", "-b", "0.5x", "-o", "{out}/nn.json"]),
    ("plan-resnet", ["plan", "sample_graphs/resnet18.onnx", "--dim", "batch=8", "-s", "chen-sqrt", "-b", "0.6x"]),
    (
        "plan-gpt2-json",
        [
            "plan",
            "sample_graphs/gpt2.onnx",
            "--dim",
            "batch=1",
            "--dim",
            "sequence=64",
            "-s",
            "chen-sqrt",
            "-b",
            "0.8x",
            "--format",
            "json",
        ],
    ),
    ("plan-gpt2-table", ["plan", "sample_graphs/gpt2.onnx", "--dim", "batch=1", "--dim", "sequence=64", "-s", "chen-sqrt", "-b", "0.8x"]),
    ("plan-bert-table", ["plan", "sample_graphs/bert.onnx", "--dim", "batch=1", "--dim", "sequence=128", "-s", "chen-sqrt", "-b", "0.95x"]),
    (
        "plan-bert-json",
        [
            "plan",
            "sample_graphs/bert.onnx",
            "--dim",
            "batch=1",
            "--dim",
            "sequence=128",
            "-s",
            "treewidth",
            "-b",
            "0.5act",
            "--format",
            "json",
        ],
    ),
    ("plan-below-lb", ["plan", "sample_graphs/training_chain_32.json", "-s", "chen-sqrt", "-b", "1"]),
    ("plan-no-fit", ["plan", "sample_graphs/unet_train.json", "-s", "store-all", "-b", "0.5x"]),
    ("plan-bad-file", ["plan", "sample_graphs/README.md", "-b", "0.5x"]),
    ("plan-missing", ["plan", "no/such/file.json", "-b", "0.5x"]),
    ("plan-bad-budget", ["plan", "sample_graphs/training_chain_32.json", "-b", "lots"]),
    ("plan-bad-option", ["plan", "sample_graphs/training_chain_32.json", "--bogus"]),
    ("validate", ["validate", "sample_graphs/unet_train.json", "{out}/p.json"]),
    ("validate-json", ["validate", "sample_graphs/unet_train.json", "{out}/p.json", "--format", "json"]),
    ("info-table", ["info", "sample_graphs/unet_train.json"]),
    ("info-json", ["info", "sample_graphs/unet_train.json", "--format", "json"]),
    ("info-nn1000", ["info", NN1000]),
    ("tradeoff-table", ["tradeoff", "sample_graphs/training_chain_32.json", "-n", "3", "-S", "chen-sqrt,treewidth"]),
    ("tradeoff-csv", ["tradeoff", "sample_graphs/training_chain_32.json", "-n", "3", "-S", "chen-sqrt,store-all", "--format", "csv"]),
    ("tradeoff-json", ["tradeoff", "sample_graphs/unet_train.json", "-n", "2", "-S", "chen-sqrt", "--format", "json"]),
    ("check", ["check", "sample_graphs/training_chain_32.json", "sample_graphs/unet_train.json", "-b", "0.6x", "-s", "chen-sqrt"]),
    ("check-json", ["check", "sample_graphs/unet_train.json", "-b", "0.1x", "-s", "treewidth", "--format", "json"]),
    (
        "batch-csv",
        [
            "batch",
            "sample_graphs/training_chain_32.json",
            "sample_graphs/unet_train.json",
            "-s",
            "chen-sqrt",
            "-b",
            "0.7x",
            "--format",
            "csv",
            "-j",
            "1",
        ],
    ),
    ("batch-table", ["batch", "sample_graphs/training_chain_32.json", "-s", "chen-sqrt", "-b", "0.7x", "-j", "1"]),
    ("strategies", ["strategies"]),
    ("help", ["--help"]),
    ("plan-help", ["plan", "--help"]),
    ("version", ["--version"]),
]

# wall-clock figures only (estimated seconds are deterministic and compared): solve times
_SOLVE = re.compile(r'("(?:solve_seconds|\w+ seconds)": )[-\d.e+]+')  # not est_/base_seconds
_SECONDS_ROW = re.compile(r"^((?: |\x1b\[[\d;]*m)*\w[\w ]* seconds(?: |\x1b\[[\d;]*m)+)[\d.e+-]+ *$", re.M)  # info rows


def _mask(text: str) -> str:
    text = _SOLVE.sub(r"\1T", text)
    text = _SECONDS_ROW.sub(r"\1T", text)
    text = re.sub(r"(solve time(?: |\x1b\[[\d;]*m)+)\S+ \S+ *$", r"\1T", text, flags=re.M)  # ANSI too
    return text


def _mask_csv(text: str) -> str:
    """Blank the solve-seconds column of CSV output."""
    lines = text.splitlines()
    if not lines or "solve_seconds" not in lines[0]:
        return text
    col = lines[0].split(",").index("solve_seconds")
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) > col:
            cells[col] = "T"
        out.append(",".join(cells))
    return "\n".join(out)


def _run(root: Path, out: Path, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    argv = [a.replace("{out}", str(out)) for a in args]
    if "--env" in argv:  # e.g. the console width, or a terminal, as rich reads them
        k = argv.index("--env")
        key, value = argv[k + 1].split("=", 1)
        env = {**env, key: value}
        del argv[k : k + 2]
    p = subprocess.run([sys.executable, "-m", "remat_cli", *argv], cwd=root, capture_output=True, text=True, env=env, timeout=600)
    norm = lambda s: _mask_csv(_mask(s.replace(str(out), "OUT")))  # noqa: E731
    return p.returncode, norm(p.stdout), norm(p.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="checkout of the reference (e.g. a worktree of main)")
    ap.add_argument("new", type=Path, help="checkout to compare")
    ap.add_argument("-k", default="", help="only commands whose name contains this")
    ns = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "REMAT_DEBUG")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        outs = {side: Path(tmp, side) for side in ("old", "new")}
        for d in outs.values():
            d.mkdir()
        for name, args in COMMANDS:
            if ns.k not in name:
                continue
            got = {side: _run(root.resolve(), outs[side], args, env) for side, root in (("old", ns.old), ("new", ns.new))}
            if got["old"] != got["new"]:
                bad += 1
                print(f"DIFFERENT {name}: exit {got['old'][0]} vs {got['new'][0]}")
                for i, what in ((1, "stdout"), (2, "stderr")):
                    diff = difflib.unified_diff(
                        got["old"][i].splitlines(), got["new"][i].splitlines(), f"old {what}", f"new {what}", lineterm="", n=1
                    )
                    print("\n".join(list(diff)[:30]))
            else:
                print(f"same      {name} (exit {got['old'][0]})")
        old_files = sorted(p.name for p in outs["old"].iterdir())
        new_files = sorted(p.name for p in outs["new"].iterdir())
        if old_files != new_files:
            bad += 1
            print(f"DIFFERENT written files: {old_files} vs {new_files}")
        for fname in old_files:
            if fname not in new_files:
                continue
            a = _mask(outs["old"].joinpath(fname).read_text())
            b = _mask(outs["new"].joinpath(fname).read_text())
            print(("same      " if a == b else "DIFFERENT ") + f"file {fname}")
            bad += a != b
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{bad} difference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
