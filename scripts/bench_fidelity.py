"""Predicted against measured for three models at 1x, 0.7x and 0.5x of the store-all peak.

    PYTHONPATH=. python scripts/bench_fidelity.py [--device cuda] [--runs 5] [-s chain-dp -s dtr]

Models are the factories in examples/ (MLP chain, residual CNN with BatchNorm, small
transformer with attention, LayerNorm and dropout). A budget below the lower bound is
raised to it; a strategy that cannot meet a budget prints "no fit". Prints figures only,
asserts nothing. On CPU the peak is storage tracking; on CUDA the allocator's peak.

Column `exec`: the executor's own overhead, time / (eager time x (1 + measured extra
FLOPs)) - 1, the plan's step and PyTorch's eager step timed alternately (median over
--pairs pairs of their ratio, default 30), one torch thread unless --threads says
otherwise: what running the plan costs beyond its arithmetic. The quartiles of the
pairs' ratios follow each row: on a shared machine the spread is part of the figure.

--executor: the exec figure taken apart. Four steps are timed in the same rounds
(rotating order, --pairs rounds): PyTorch's eager step; the captured core-ATen program
run by plain autograd (``captured_step``: the same kernels as the executor, PyTorch's
engine, no schedule); the plan under the executor with fused runs; and under one-op
graphs (the executor before fused runs, ``Step(..., fuse=False)``). Median [quartiles]
of the pairs' ratios, in percent: per model, ``program`` = captured / eager - 1 (what
the decomposed program costs beyond the model's own eager code; no plan in it; from
the store-all rounds); per plan, ``exec/eager`` = fused / (eager x (1 + measured extra
FLOPs)) - 1 (the exec column of the main table), ``exec/capt`` = fused / (captured x
(1 + extra FLOPs)) - 1 (the executor's own share: same kernels, recomputation paid for
by its FLOPs), ``exec/capt t`` the same with recomputation priced by each recomputed
op's own time as the capture measured it (plan's / store-all's predicted seconds: a
recomputed BatchNorm or ReLU costs more time per FLOP than a matmul), ``1-op/capt``
as exec/capt for one-op graphs; and the load average before and after.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remat_cli.budget import parse_budget  # noqa: E402
from remat_cli.units import fmt_bytes, fmt_pct, fmt_seconds  # noqa: E402
from remat_cli.torch._capture import capture_program  # noqa: E402
from remat_cli.torch.fidelity import fidelity, load_factory  # noqa: E402

MODELS = ["examples/mlp.py:make", "examples/cnn.py:make", "examples/transformer.py:make"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-s", "--strategy", action="append", default=None)
    ap.add_argument("--budgets", default="1x,0.7x,0.5x")
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--no-sac", action="store_true")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads (default 1: on a shared machine spinning threads distort times; 0 keeps torch's)",
    )
    ap.add_argument("--pairs", type=int, default=30, help="(plan step, eager step) pairs timed for the exec column")
    ap.add_argument("--executor", action="store_true", help="fused against one-op executor overhead only (see above)")
    args = ap.parse_args()
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.executor:
        executor_overhead(args)
        return
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print(f"bench_fidelity.py: --device {args.device}: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        sys.exit(2)
    strategies = args.strategy or ["chain-dp", "dtr", "treewidth"]
    print(
        f"{'model':<12} {'budget':>6} {'strategy':<14} {'pred peak':>10} {'measured':>10} {'ratio':>6} "
        f"{'+FLOPs pred':>11} {'measured':>9} {'t pred':>8} {'t meas':>8} {'exec':>6} {'fb':>3} grads"
    )
    for spec in args.models:
        model, inputs, loss_fn = load_factory(str(ROOT / spec), args.device)
        name = Path(spec.split(":")[0]).stem
        started = time.perf_counter()
        captured = capture_program(model, inputs, loss_fn, factory=spec)
        print(f"{name:<12} captured: {captured[0].n} nodes in {time.perf_counter() - started:.0f} s")
        for b in args.budgets.split(","):
            started = time.perf_counter()
            rep = fidelity(
                model,
                inputs,
                loss_fn,
                parse_budget(b),
                strategies,
                factory=spec,
                runs=args.runs,
                sac=not args.no_sac,
                captured=captured,
                pairs=args.pairs,
            )
            for row in rep.rows:
                if b != args.budgets.split(",")[0] and row.strategy in ("store-all", "eager"):
                    continue
                if row.measured_peak_bytes is None:
                    print(f"{name:<12} {b:>6} {row.strategy:<14} no fit ({fmt_bytes(row.budget_bytes)})")
                    continue
                ratio = row.peak_ratio or 0.0
                grads = "equal" if row.grads_match else f"DIFFER {row.max_grad_error:.1e}"
                fb = "-" if row.fallbacks is None else str(row.fallbacks)
                print(
                    f"{name:<12} {b:>6} {row.strategy:<14} {fmt_bytes(row.predicted_peak_bytes):>10} "
                    f"{fmt_bytes(row.measured_peak_bytes):>10} {ratio:6.3f} {fmt_pct(row.predicted_overhead):>11} "
                    f"{fmt_pct(row.measured_flops_overhead):>9} {fmt_seconds(row.predicted_seconds):>8} "
                    f"{fmt_seconds(row.measured_seconds):>8} {_ovh(row.executor_overhead):>6} {fb:>3} {grads} {_iqr(row.executor_overhead_iqr)}"
                )
            print(
                f"{name:<12} {b:>6} (store-all {fmt_bytes(rep.store_all_peak)}, LB {fmt_bytes(rep.lower_bound)}, "
                f"fixed {fmt_bytes(rep.fixed_bytes)}; {time.perf_counter() - started:.0f} s)"
            )


def executor_overhead(args: argparse.Namespace) -> None:
    """Per plan: program, executor and one-op shares of the exec figure, timed in the same rounds."""
    import statistics

    from remat_cli.errors import NoPlanError
    from remat_cli.planner import make_plan
    from remat_cli.torch._apply import Step
    from remat_cli.torch._measure import measure
    from remat_cli.torch._runtime import now
    from remat_cli.torch.fidelity import captured_step, eager_step

    print(f"load average before: {_load()}; torch threads {args.threads}; {args.pairs} rounds per plan")
    print("median [quartiles] in %: program = captured/eager, exec = fused, 1-op = one-op executor")
    head = ["exec/eager", "exec/capt", "exec/capt t", "1-op/capt"]
    print(f"{'model':<11} {'budget':>6} {'strategy':<9} {'eager':>7}" + "".join(f" {h:>16}" for h in head))
    for spec in args.models:
        model, inputs, loss_fn = load_factory(str(ROOT / spec), args.device)
        name = Path(spec.split(":")[0]).stem
        graph, prog = capture_program(model, inputs, loss_fn, factory=spec, timing_runs=3)
        store_all = make_plan(graph, "store-all")
        eager = eager_step(model, loss_fn)
        captured = captured_step(prog)
        base = measure(Step(prog, graph, store_all.schedule, "store-all", inputs), inputs, runs=1).flops
        plans = [("1x", store_all)]
        for b in args.budgets.split(","):
            for strategy in args.strategy or ["chain-dp", "dtr"]:
                try:
                    budget = max(graph.lb, parse_budget(b).resolve(store_all.metrics.peak_bytes) or 0)  # as fidelity() does
                    plans.append((b, make_plan(graph, strategy, budget, reference_peak=store_all.metrics.peak_bytes)))
                except NoPlanError:
                    print(f"{name:<11} {b:>6} {strategy:<9} no fit")
        for b, plan in plans:
            steps = [Step(prog, graph, plan.schedule, plan.strategy, inputs, fuse=f) for f in (True, False)]
            scale = measure(steps[0], inputs, runs=1).flops / base
            t_scale = (plan.metrics.est_seconds or 0.0) / (store_all.metrics.est_seconds or 1.0) or scale
            fns = [eager, captured, *steps]
            for fn in fns * 2:  # warm
                fn(*inputs)
            times: list[list[float]] = [[] for _ in fns]
            for k in range(args.pairs):
                for j in range(len(fns)):
                    i = (j + k) % len(fns)
                    t0 = now()
                    fns[i](*inputs)
                    times[i].append(now() - t0)
            cols = []
            for i, ref, s in ((1, 0, 1.0), (2, 0, scale), (2, 1, scale), (2, 1, t_scale), (3, 1, scale)):
                ratios = [t / r / s - 1 for t, r in zip(times[i], times[ref])]
                q = statistics.quantiles(ratios, n=4)
                cols.append(f"{statistics.median(ratios) * 100:+.1f} [{q[0] * 100:+.0f},{q[2] * 100:+.0f}]")
            program = cols.pop(0)
            if plan is store_all:
                print(f"{name:<11} program (captured / eager): {program}")
            eager_s = fmt_seconds(statistics.median(times[0]))
            print(f"{name:<11} {b:>6} {plan.strategy:<9} {eager_s:>7}" + "".join(f" {c:>16}" for c in cols))
    print(f"load average after: {_load()}")


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _ovh(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _iqr(q: tuple[float, float] | None) -> str:
    return "" if q is None else f"(exec quartiles {_ovh(q[0])}..{_ovh(q[1])})"


if __name__ == "__main__":
    main()
