#!/usr/bin/env python
"""How far is each strategy from the best possible? Overhead and solve time per strategy.

For every graph (the files in ``sample_graphs/``, ONNX models at batch 8 and sequence 128,
plus a few generated training graphs)
and budgets of 0.9, 0.7, 0.5 and 0.3 × the store-all peak, runs every fast strategy and
the exact solver (graphs up to ``--exact-max-nodes`` needed nodes, within
``--time-limit``) and prints one table per graph:

    strategy   0.9x            0.7x  ...
    chain-dp   +4.1%  0.01s    ...

A cell is the overhead (extra compute over the base cost) and the solve time, ``-`` when
the strategy cannot fit the budget (with the smallest budget it can meet). The ``exact``
row is the optimum over all schedules (``opt``) or the best plan with its gap; the
``bound`` row is exact's lower bound on the overhead over all schedules (the base cost, or
the exhaustive search's bound on small graphs), or, for graphs too large for the MILP, the
LP relaxation of Checkmate's model for the graph's order (``LP, fixed order``: a bound for
that order only); the ``auto/exact`` row is auto's cost over exact's best plan's, minus 1
(+0.00% or less: auto is at or below it). Every plan is replayed by the simulator through
``make_plan``.

Sections (``--section``, default all):

* ``reference``: on unit training chains (16/128/1024 layers, next to the seed reference's
  twremat figures) and residual / inverted-residual / U-Net / transformer training graphs,
  the paper's recursion with twremat's memory-limit pass against treewidth, pathwidth and
  auto, in evaluations per needed node and cost per base cost;
* ``bound``: the structural lower bound against the largest-operation bound, and auto's
  lowest peak as a multiple of it;
* ``exact``: the table above, for the sample graphs, small generated families and
  CNN-shaped training graphs with realistic sizes (``--families``);
* ``improve``: the plan-improvement pass (``remat_cli.algorithms.improve``) on the
  CNN-shaped graphs and a transformer: per budget the reference (as above), treewidth,
  auto before and after the pass, and the exact solver's best plan (``--time-limit``),
  as cost / base cost; then the pass's own time on auto's plans of 1,000-node training
  graphs (``bench_speed``'s shapes; the pass spends its whole work limit there).

Usage: PYTHONPATH=. python scripts/bench_quality.py [--time-limit 60] [--section S] [--only NAME] [GRAPH ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from remat_cli import generators as gen
from remat_cli.errors import NoPlanError, RematError
from remat_cli.graph import Graph
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.strategies import STRATEGIES, fast_strategies
from remat_cli.training import checkmate_training_graph

ROOT = Path(__file__).resolve().parent.parent


def generated() -> list[Graph]:
    """A few training graphs of the families the paper and the baselines care about."""
    return [
        checkmate_training_graph(gen.chain(16, mem=[1, 2, 3, 4] * 4, cost=[4.0, 1.0, 2.0, 3.0] * 4, name="hetero-chain16")),
        checkmate_training_graph(gen.skip_chain(20, name="resnet-like20")),
        checkmate_training_graph(gen.diamonds(6, name="inception-like6")),
        checkmate_training_graph(gen.unet(2, convs=1, base_mem=1 << 16)),
        checkmate_training_graph(gen.random_dag(24, 0.15, seed=3, max_size=4)),
    ]


def cnn_shaped() -> list[Graph]:
    """Training graphs shaped like the Checkmate / MOCCASIN benchmark CNNs, with realistic
    per-layer sizes (batch 8, fp32, halving at each pooling) and FLOP costs."""
    return [
        checkmate_training_graph(gen.resnet((2, 2, 2, 2), name="resnet18-shaped")),
        checkmate_training_graph(gen.mobilenet(name="mobilenetv2-shaped")),
        checkmate_training_graph(gen.vgg((2, 2, 3, 3, 3), name="vgg16-shaped")),
        checkmate_training_graph(gen.fcn(name="fcn8s-shaped")),
        checkmate_training_graph(gen.segnet((2, 2, 3, 3), name="segnet-shaped")),
        checkmate_training_graph(gen.unet_cnn(4, name="unet-shaped")),
    ]


SEED_CHAIN_FIGURES = {  # twremat on unit training chains (seed-reference.md): cost in evaluations / (2L+1)
    16: ("1.97", "2.30", "3.00", "over"),
    128: ("1.11", "2.64", "3.62", "4.18"),
    1024: ("1.10", "3.22", "4.55", "5.43"),
}


def reference_rows(graph: Graph, ratios: list[float], names: list[str]) -> None:
    """Per budget: the paper's recursion with twremat's memory-limit pass (our
    implementation of that pass over our bare recursion) against ``names``. Cells are
    evaluations / needed nodes (the seed reference's unit) and cost / base cost."""
    from remat_cli.simulate import simulate
    from remat_cli.algorithms import decompose as D
    from remat_cli.strategies.evict import memlimit_pass
    from remat_cli.strategies.treewidth import recursive_schedule

    peak = store_all_peak(graph)
    needed = int(graph.needed.sum())
    bare, _ = recursive_schedule(graph, D.separator_tree(graph, D.tree_decomposition(graph)), None)
    rows: dict[str, list[str]] = {"reference": []} | {n: [] for n in names}
    for ratio in ratios:
        budget = int(ratio * peak)
        m = simulate(graph, memlimit_pass(graph, bare, budget)).metrics
        assert m is not None
        over = "" if m.peak_bytes <= budget else " over"
        rows["reference"].append(f"{m.computes / needed:.2f}/{m.cost / m.base_cost:.3f}{over}")
        for name in names:
            try:
                plan = make_plan(graph, name, budget, {}, reference_peak=peak)
                rows[name].append(f"{plan.metrics.computes / needed:.2f}/{plan.metrics.cost / plan.metrics.base_cost:.3f}")
            except NoPlanError:
                rows[name].append("-")
    print(f"{graph.name}: {graph.n} nodes; cells: evaluations per needed node / cost per base cost")
    print("  " + "strategy".ljust(12) + "".join(f"{r:.1f}x".ljust(18) for r in ratios))
    for name, cells in rows.items():
        print("  " + name.ljust(12) + "".join(c.ljust(18) for c in cells))
    layers = (needed - 1) // 2
    if graph.name.startswith("chain") and layers in SEED_CHAIN_FIGURES:
        print("  " + "twremat".ljust(12) + "".join(c.ljust(18) for c in SEED_CHAIN_FIGURES[layers]) + "(seed-reference.md)")
    print()


def bound_row(graph: Graph) -> None:
    """The structural lower bound against the largest-operation bound, and auto's smallest
    budget (each replayed by the simulator) as a multiple of it."""
    from remat_cli.bounds import structural_lower_bound

    started = time.perf_counter()
    bound = structural_lower_bound(graph)
    took = time.perf_counter() - started
    try:
        plan = make_plan(graph, "auto", graph.lb, {})
        smallest = plan.metrics.peak_bytes
    except NoPlanError as exc:
        smallest = exc.min_budget
        if smallest is not None:
            smallest = make_plan(graph, "auto", smallest, {}).metrics.peak_bytes
    ratio = f"{smallest / bound.bytes:.3f}" if smallest else "-"
    state = "" if bound.complete else " cut short"
    print(
        f"  {graph.name[:26]:26} {graph.lb:>14,} {bound.bytes:>14,} {bound.gain:6.3f}x{state} {took:5.2f}s {smallest or 0:>14,} {ratio:>7}x"
    )


def improve_rows(graph: Graph, ratios: list[float], time_limit: float, exact_max: int) -> None:
    """Cost / base cost per budget: the reference, treewidth, auto before and after the
    improvement pass (before: from the change auto's ``improved`` fact states), exact."""
    from remat_cli.simulate import simulate
    from remat_cli.algorithms import decompose as D
    from remat_cli.strategies.evict import memlimit_pass
    from remat_cli.strategies.treewidth import recursive_schedule

    peak = store_all_peak(graph)
    base = graph.base_cost
    bare, _ = recursive_schedule(graph, D.separator_tree(graph, D.tree_decomposition(graph)), None)
    use_exact = "exact" in STRATEGIES and int(graph.needed.sum()) <= exact_max
    print(f"{graph.name}: {graph.n} nodes; cells: cost / base cost (exact: its status, seconds)")
    print("  " + "".join(h.ljust(13) for h in ("budget", "reference", "treewidth", "auto before", "auto after")) + "exact")
    for ratio in ratios:
        budget = int(ratio * peak)
        if budget < graph.lb:
            print(f"  {ratio:.2f}x".ljust(15) + "below LB")
            continue
        m = simulate(graph, memlimit_pass(graph, bare, budget)).metrics
        assert m is not None
        cells = [f"{m.cost / base:.4f}" + ("" if m.peak_bytes <= budget else " over")]
        try:
            cells.append(f"{make_plan(graph, 'treewidth', budget, {}).metrics.cost / base:.4f}")
        except NoPlanError:
            cells.append("-")
        try:
            auto = make_plan(graph, "auto", budget, {})
            fact = auto.info.get("improved")
            change = fact.args[0].value if fact is not None else 0.0
            cells += [f"{auto.metrics.cost / (1 + change) / base:.4f}", f"{auto.metrics.cost / base:.4f}"]
        except NoPlanError:
            cells += ["-", "-"]
        exact = ""
        if use_exact:
            started = time.perf_counter()
            try:
                plan = make_plan(graph, "exact", budget, {"time_limit": time_limit})
                exact = f"{plan.metrics.cost / base:.4f} ({plan.info.get('status')}, {time.perf_counter() - started:.0f}s)"
            except NoPlanError:
                exact = "-"
        print(f"  {ratio:.2f}x".ljust(15) + "".join(c.ljust(13) for c in cells) + exact)
    print()


def improve_cost() -> None:
    """Seconds of the improvement pass (re-eviction on) on auto's plan of 1,000-node
    training graphs: auto's plan is already improved, so the pass finds nothing and spends
    its whole work limit, its most expensive case."""
    from remat_cli.algorithms.improve import improve_plan, work_limit

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_speed import shapes

    for name, g in shapes(1000).items():
        for ratio in (0.7, 0.5):
            budget = int(ratio * store_all_peak(g))
            try:
                plan = make_plan(g, "auto", budget, {})
            except NoPlanError:
                print(f"  {name}{g.n} {ratio:.1f}x: auto has no plan")
                continue
            started = time.perf_counter()
            improve_plan(g, plan.schedule, budget, replay=True)
            took = time.perf_counter() - started
            print(f"  {name}{g.n} {ratio:.1f}x: pass {took:.2f}s (work limit {work_limit(g, plan.schedule):,} units)")
    print()


def sample_graphs(paths: list[str]) -> list[Graph]:
    files = [Path(p) for p in paths] or sorted(p for p in (ROOT / "sample_graphs").glob("*") if p.is_file())
    out = []
    for f in files:
        if f.suffix == ".md":
            continue
        for dims in ((("batch", 8), ("sequence", 128)), (("batch", 8),), ()):
            try:
                out.append(load_graph(f, LoadOptions(dims=dims)))
                break
            except RematError as exc:
                error = exc.message
        else:
            print(f"skipping {f}: {error}", file=sys.stderr)
    return out


def cell(graph: Graph, name: str, budget: int, peak: int, opts: dict) -> tuple[str, dict | None]:
    started = time.perf_counter()
    try:
        plan = make_plan(graph, name, budget, opts, reference_peak=peak)
    except NoPlanError as exc:
        took = time.perf_counter() - started
        floor = f" (min {exc.min_budget / peak:.2f}x)" if exc.min_budget and peak else ""
        return f"-{floor} {took:.2f}s", None
    took = time.perf_counter() - started
    text = f"{plan.metrics.overhead:+.1%} {took:.2f}s"
    if name == "exact":
        gap = plan.info.get("gap", 0.0)
        text += " opt" if plan.info.get("status") == "optimal" else f" gap {gap:.0%}"
    return text, dict(plan.info) | {"cost": plan.metrics.cost}


def bench(graph: Graph, ratios: list[float], time_limit: float, exact_max: int) -> None:
    peak = store_all_peak(graph)
    names = [s.name for s in fast_strategies()] + ["auto"]
    n_needed = int(graph.needed.sum())
    use_exact = "exact" in STRATEGIES and n_needed <= exact_max
    opts = {"time_limit": time_limit}
    rows: dict[str, list[str]] = {n: [] for n in names + ["exact", "bound", "auto/exact"]}
    for ratio in ratios:
        budget = max(int(ratio * peak), 0)
        auto_cost = None
        for name in names:
            text, info = cell(graph, name, budget, peak, opts)
            rows[name].append(text)
            if name == "auto" and info is not None:
                auto_cost = info["cost"]
        if budget < graph.lb:
            rows["exact"].append("- (below LB)")
            rows["bound"].append("")
            rows["auto/exact"].append("")
            continue
        if use_exact:
            text, info = cell(graph, "exact", budget, peak, opts)
            rows["exact"].append(text)
            # auto's cost over exact's best plan: at or below +0.00%, auto is at or below it
            both = auto_cost is not None and info is not None
            rows["auto/exact"].append(f"{auto_cost / info['cost'] - 1:+.2%}" if both else "")
            lb = None if info is None else info.get("lower_bound")  # over all schedules
            rows["bound"].append("" if lb is None else f"{lb / graph.base_cost - 1:+.1%}")
        else:
            from remat_cli.strategies.exact import lp_lower_bound

            rows["exact"].append(f"- ({n_needed} nodes)")
            rows["auto/exact"].append("")
            lp = lp_lower_bound(graph, budget, time_limit=time_limit) if n_needed <= 4 * exact_max else None
            # the LP of Checkmate's model for the graph's order: a bound for that order only
            rows["bound"].append("" if lp is None else f"{lp / graph.base_cost - 1:+.1%} (LP, fixed order)")
    head = f"{graph.name}: {graph.n} nodes, store-all peak {peak} B, LB {graph.lb} B ({graph.lb / peak:.2f}x)"
    print(head)
    width = max(len(c) for r in rows.values() for c in r) + 2
    print("  " + "strategy".ljust(12) + "".join(f"{r:.1f}x".ljust(width) for r in ratios))
    for name, cells in rows.items():
        if cells:
            print("  " + name.ljust(12) + "".join(c.ljust(width) for c in cells))
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="*", help="graph files (default: sample_graphs/*)")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--budgets", default="0.9,0.7,0.5,0.3")
    ap.add_argument("--exact-max-nodes", type=int, default=80)
    ap.add_argument("--no-generated", action="store_true")
    ap.add_argument("--only", default="", help="only graphs whose name contains this (run a family in pieces)")
    ap.add_argument(
        "--section",
        choices=["all", "exact", "reference", "bound", "improve"],
        default="all",
        help="exact: every strategy vs the exact solver; reference: treewidth/pathwidth/auto vs "
        "the paper's recursion with twremat's memory-limit pass; bound: the structural lower bound; "
        "improve: auto before/after the plan-improvement pass against exact",
    )
    ap.add_argument(
        "--families",
        default="samples,generated,cnn",
        help="graphs of the exact section: samples (sample_graphs/), generated (small families), cnn (CNN-shaped, realistic sizes)",
    )
    args = ap.parse_args()
    ratios = [float(x) for x in args.budgets.split(",")]
    samples = sample_graphs(args.graphs)
    if args.section in ("all", "reference"):
        print("== the paper's recursion + twremat's memory-limit pass vs ours ==\n")
        refs = [checkmate_training_graph(gen.chain(n)) for n in (16, 128, 1024)]
        refs += [
            checkmate_training_graph(gen.resnet((2, 2, 2, 2), name="resnet18-shaped")),
            checkmate_training_graph(gen.mobilenet(name="mobilenetv2-shaped")),
            checkmate_training_graph(gen.unet_cnn(4, name="unet-shaped")),
            checkmate_training_graph(gen.transformer(6, name="transformer6")),
        ]
        for g in refs:
            reference_rows(g, ratios, ["treewidth", "pathwidth", "auto"])
    if args.section in ("all", "bound"):
        print("== structural lower bound (remat_cli.bounds) and auto's lowest peak ==\n")
        print(f"  {'graph':26} {'op bound B':>14} {'structural B':>14} {'gain':>7} {'time':>6} {'auto lowest B':>14} {'/bound':>8}")
        for g in samples + cnn_shaped():
            bound_row(g)
        print()
    if args.section in ("all", "improve"):
        print("== the plan-improvement pass: auto before/after, against the exact solver ==\n")
        for g in cnn_shaped() + [checkmate_training_graph(gen.transformer(6, name="transformer6"))]:
            if args.only not in g.name:
                continue
            improve_rows(g, ratios, args.time_limit, args.exact_max_nodes)
        print("the pass's own time on auto's plans, 1,000-node training graphs:")
        improve_cost()
    if args.section in ("all", "exact"):
        families = set(args.families.split(","))
        graphs = (samples if "samples" in families else []) + (
            [] if args.no_generated else ((generated() if "generated" in families else []) + (cnn_shaped() if "cnn" in families else []))
        )
        for g in graphs:
            if args.only in g.name:
                bench(g, ratios, args.time_limit, args.exact_max_nodes)


if __name__ == "__main__":
    main()
