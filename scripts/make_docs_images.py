#!/usr/bin/env python3
"""Regenerate the README's trade-off table and the images under docs/ with one command.

    python scripts/make_docs_images.py            # uses docs/unet4_train.json
    python scripts/make_docs_images.py GRAPH      # any graph remat reads

Runs the real CLI (so what the README shows is what the commands print):
  remat tradeoff GRAPH --points 8 --plot docs/tradeoff.png      -> table into README.md
  remat plan GRAPH -s S --budget B --timeline docs/timeline.png  (S, B: the frontier plan
      with the lowest peak; store-all without a budget when nothing else is registered)
and rewrites the README block between the ``<!-- tradeoff:start -->`` and
``<!-- tradeoff:end -->`` markers. Needs matplotlib (``pip install -e '.[plot]'``).

docs/unet4_train.json is synthetic, made here when missing: a 4-level U-Net forward
graph from ``remat_cli.generators.unet`` (64 MiB top-level activations) turned into a
training graph by ``training.checkmate_training_graph``, with 1 GiB of fixed memory and
per-node seconds proportional to cost (a made-up time model, so est. step time shows).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DEFAULT_GRAPH = DOCS / "unet4_train.json"
START, END = "<!-- tradeoff:start -->", "<!-- tradeoff:end -->"


def make_sample(path: Path) -> None:
    """Write the synthetic U-Net training graph described in the module docstring."""
    sys.path.insert(0, str(ROOT))
    from remat_cli import generators, training
    from remat_cli.loaders import remat_json

    fwd = generators.unet(4, base_mem=64 << 20, name="unet4")
    g = training.checkmate_training_graph(fwd)
    g = g.with_arrays(fixed_mem=1 << 30, seconds=g.cost * 2e-6)
    path.write_text(remat_json.dumps(g))


def remat(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-m", "remat_cli", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"remat {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


def main() -> None:
    graph = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_GRAPH
    DOCS.mkdir(exist_ok=True)
    if graph == DEFAULT_GRAPH and not graph.exists():
        make_sample(graph)
    rel = os.path.relpath(graph, ROOT)
    table_cmd = ["tradeoff", rel, "--points", "8", "--plot", "docs/tradeoff.png"]
    table = remat(*table_cmd)
    table = "\n".join(line.rstrip() for line in table.splitlines())  # as printed: check_docs.py runs it
    doc = json.loads(remat("tradeoff", rel, "--points", "8", "--format", "json"))
    front = doc["frontier"]
    if front:
        low = min(front, key=lambda p: (p["peak_bytes"], p["cost"]))
        # the frontier names a plan once; the smallest swept budget that gave that plan
        same = [
            q
            for q in doc["points"]
            if q["fits"] and (q["strategy"], q["peak_bytes"], q["cost"]) == (low["strategy"], low["peak_bytes"], low["cost"])
        ]
        ratio = min(q["budget_bytes"] for q in same or [low]) / doc["store_all_peak_bytes"]
        strategy, budget = low["strategy"], f"{math.ceil(ratio * 1000 - 1e-9) / 1000:.3f}x"
    else:
        strategy, budget = "store-all", "none"
    plan_cmd = ["plan", rel, "-s", strategy, "--budget", budget, "--timeline", "docs/timeline.png"]
    remat(*plan_cmd)
    block = "\n".join(
        [
            START,
            "```console",
            f"$ remat {' '.join(table_cmd)}",
            table.strip("\n"),
            "```",
            "",
            "![extra compute and estimated step time against peak memory](docs/tradeoff.png)",
            "",
            "Each strategy's plans as its budget shrinks: peak memory (x) against extra compute",
            "(left axis). Plans on the Pareto frontier (no other plan is both smaller and cheaper)",
            "sit on yellow halos along the grey band. Here the estimated step time is the base time",
            "scaled by the extra compute, so it is a second scale on the right axis; when it is not",
            "(a roofline time model), the plot gets a second panel of its own.",
            "",
            "Memory over the schedule of the plan at the smallest budget on the frontier: the",
            "simulator's memory at each compute step, fixed memory hatched, the steps shaded by",
            "kind (forward, recompute, loss, backward), the budget and the lower bound as lines:",
            "",
            "<!-- check-docs: skip: its output is the figure below (scripts/check_docs.py) -->",
            "```console",
            f"$ remat {' '.join(plan_cmd)}",
            "```",
            "",
            "![memory over the schedule](docs/timeline.png)",
            END,
        ]
    )
    readme = ROOT / "README.md"
    text = readme.read_text() if readme.exists() else ""
    if START in text and END in text:
        text = re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    readme.write_text(text)
    print(f"wrote docs/tradeoff.png, docs/timeline.png and the README block ({graph})")


if __name__ == "__main__":
    main()
