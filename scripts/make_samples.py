#!/usr/bin/env python3
"""Regenerate the small synthetic sample graphs in sample_graphs/ (deterministic).

    python scripts/make_samples.py

Writes one graph per non-ONNX format the tool reads: remat JSON, node-link JSON
(Checkmate/MOCCASIN shape) and twremat text. Real ONNX samples come from
scripts/export_samples.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from remat_cli import generators as G
from remat_cli.loaders import remat_json, twremat
from remat_cli.training import checkmate_training_graph

OUT = Path(__file__).resolve().parent.parent / "sample_graphs"


def node_link(graph) -> dict:
    """Checkmate-style node-link JSON for a training graph."""
    src, dst = graph.edges()
    return {
        "directed": True,
        "multigraph": False,
        "graph": {"name": graph.name},
        "nodes": [
            {
                "id": v,
                "name": graph.ids[v],
                "backward": graph.kinds[v] == "backward",
                "cost_cpu": float(graph.cost[v]),
                "cost_ram": int(graph.mem[v]),
            }
            for v in range(graph.n)
        ],
        "links": [{"source": int(u), "target": int(v)} for u, v in zip(src, dst)],
    }


def main() -> None:
    OUT.mkdir(exist_ok=True)
    unet = checkmate_training_graph(G.unet(4, base_mem=64 << 20, name="unet4"))
    (OUT / "unet_train.json").write_text(remat_json.dumps(unet))
    chain = checkmate_training_graph(G.chain(32, name="chain32"))
    (OUT / "training_chain_32.json").write_text(remat_json.dumps(chain))
    diamonds = checkmate_training_graph(G.diamonds(8, 3, mem=4096, cost=1.0, name="diamonds8"))
    (OUT / "diamond_dag.nodelink.json").write_text(json.dumps(node_link(diamonds), indent=1) + "\n")
    dag = checkmate_training_graph(G.random_dag(40, 0.08, seed=7, max_size=50, name="randdag40"))
    ints = dag.with_arrays(ids=[str(i) for i in range(dag.n)], name="randdag40")
    (OUT / "random_dag.twremat.txt").write_text(twremat.dumps(ints))
    for path in sorted(OUT.iterdir()):
        print(f"{path.name:32s} {path.stat().st_size:>9,d} bytes")


if __name__ == "__main__":
    main()
