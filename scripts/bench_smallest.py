"""How low a plan goes, against how low a plan can go, per sample graph.

    PYTHONPATH=. python scripts/bench_smallest.py [--transformers] [GRAPH ...]
    PYTHONPATH=. python scripts/bench_smallest.py --per-strategy GRAPH

Per graph: the largest-operation bound LB and the structural bound (both proven over all
schedules, remat_cli/bounds.py), min-memory's lowest peak, and auto's smallest budget
(the search of remat_cli/sweep.py, every probe a replayed plan), each as a ratio to LB; a
ratio of 1.000 is a proven minimum. ONNX models are read at batch 8 (sequence 128 with
``--transformers``, which adds bert, gpt2 and vit_b16: minutes). ``--per-strategy`` prints,
for one graph, every fast strategy's smallest budget (ratio of the store-all peak), the
plans its search made and its wall time. Figures only; no assertions.

Every ratio is against LB, the largest-operation bound (DESIGN §1); the ``best bound``
column names the larger of the two proven bounds and the ``auto/best`` ratio is against
it (on every sample so far the structural bound equals LB, so the two ratios agree).

Measured (auto's smallest budget / LB, batch 8):

    sample          before min-memory   min-memory   + from-scratch   + lower_peak
    unet.onnx             1.665            1.083            1.083          1.000
    random_dag            1.792            1.485            1.230          1.230
    unet4 (unet_train)    1.143            1.000            1.000          1.000
    diamonds8             1.125            1.000            1.000          1.000
    resnet18              1.000            1.000            1.000          1.000
    mobilenet_v2          1.000            1.000            1.000          1.000

With ``--transformers`` (sequence 128; ``--attention`` fused, then unfused), before and
after ``lower_peak`` (min-memory's pass that recomputes values idle at its peak):

    sample          fused before  fused after   unfused before  unfused after
    vit_b16             1.022        1.022          1.035          1.035
    bert                1.016        1.016          1.017          1.017
    gpt2                1.000        1.000          1.000          1.000

unet.onnx after lower_peak is 1.00001x LB (min-memory's lowest peak): the gap to the
proven bound is closed there; the structural bound equals LB on every sample.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from remat_cli.bounds import structural_lower_bound
from remat_cli.graph import Graph
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.planner import store_all_peak
from remat_cli.strategies import fast_strategies, get_strategy
from remat_cli.strategies.min_memory import min_memory_variants
from remat_cli.sweep import smallest_budget
from remat_cli.units import fmt_bytes

SAMPLES = [
    "sample_graphs/unet_train.json",
    "sample_graphs/diamond_dag.nodelink.json",
    "sample_graphs/random_dag.twremat.txt",
    "sample_graphs/unet.onnx",
    "sample_graphs/resnet18.onnx",
    "sample_graphs/mobilenet_v2.onnx",
]
TRANSFORMERS = ["sample_graphs/bert.onnx", "sample_graphs/gpt2.onnx", "sample_graphs/vit_b16.onnx"]


def _load(path: str, attention: str = "fused") -> Graph:
    if path.endswith(".onnx"):
        dims = (("batch", 8), ("sequence", 128))
        return load_graph(path, replace(LoadOptions(), dims=dims, strict_dims=False, attention=attention))
    return load_graph(path)


def table(paths: list[str], attention: str = "fused") -> None:
    """One line per graph: bounds, min-memory's lowest peak and auto's smallest budget."""
    print(
        f"{'graph':24s} {'nodes':>5s} {'LB':>9s} {'struct/LB':>9s} {'min-mem/LB':>10s} {'auto/LB':>8s} "
        f"{'best bound':>10s} {'auto/best':>9s} {'auto s':>7s}"
    )
    for path in paths:
        graph = _load(path, attention)
        ref = store_all_peak(graph)
        bound = structural_lower_bound(graph)
        lowest = min(m.peak_bytes for _, _, m in min_memory_variants(graph))
        started = time.perf_counter()
        found = smallest_budget(graph, get_strategy("auto"), reference_peak=ref)
        seconds = time.perf_counter() - started
        auto = "-" if found.budget_bytes is None else f"{found.budget_bytes / graph.lb:.3f}"
        which, best = ("structural", bound.bytes) if bound.bytes > graph.lb else ("operation", graph.lb)
        vs_best = "-" if found.budget_bytes is None else f"{found.budget_bytes / best:.3f}"
        name = path.rsplit("/", 1)[-1][:24]
        print(
            f"{name:24s} {graph.n:5d} {fmt_bytes(graph.lb):>9s} {bound.bytes / graph.lb:9.3f} "
            f"{lowest / graph.lb:10.3f} {auto:>8s} {which:>10s} {vs_best:>9s} {seconds:7.1f}",
            flush=True,
        )


def per_strategy(path: str) -> None:
    """Every fast strategy's smallest budget on one graph, as a ratio of the store-all peak."""
    graph = _load(path)
    ref = store_all_peak(graph)
    print(f"{graph.name}: {graph.n} nodes, LB {graph.lb / ref:.4f}x of store-all {ref} B")
    for strat in [*fast_strategies(), get_strategy("auto")]:
        started = time.perf_counter()
        found = smallest_budget(graph, strat, reference_peak=ref)
        seconds = time.perf_counter() - started
        figure = "-" if found.budget_bytes is None else f"{found.budget_bytes / ref:.4f}x"
        note = "exact" if found.exact else ("" if found.monotone else "not monotone")
        print(f"{strat.name:12s} {figure:>8s}  {found.probes:3d} plans  {seconds:7.2f} s  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("graphs", nargs="*", help="graph files (default: the samples)")
    parser.add_argument("--transformers", action="store_true", help="also bert, gpt2, vit_b16 (minutes)")
    parser.add_argument("--per-strategy", metavar="GRAPH", help="every fast strategy on one graph")
    parser.add_argument("--attention", choices=("fused", "unfused"), default="fused", help="as remat's --attention")
    args = parser.parse_args()
    if args.per_strategy:
        per_strategy(args.per_strategy)
        return
    table(args.graphs or SAMPLES + (TRANSFORMERS if args.transformers else []), args.attention)


if __name__ == "__main__":
    main()
