"""Chen et al. 2016, *Training Deep Nets with Sublinear Memory Cost* (arXiv:1604.06174).

Both strategies cut the forward part at articulation points (:mod:`.segments`), keep
the values at chosen segment boundaries from the forward pass, and recompute each
segment once in the backward pass, just before its gradients are computed.

* ``chen-sqrt`` (§4.1): about √n groups of about √n forward nodes each; the plan does not
  depend on the budget. Peak O(√n) values, one extra forward pass.
* ``chen-greedy`` (§4.3, Algorithm 2 with the budget search): walk the forward part and
  close a group at the first articulation point after more than ``b`` bytes of forward
  values; ``b`` is searched over a grid and the cheapest plan that fits the budget wins.
  Anytime: past ``RunContext.deadline`` (a ``time.perf_counter()`` value) the search
  stops after at least one grouping and returns the cheapest fitting plan so far, or
  says that none fitted.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.units import Fact, Phrase, fmt_bytes_exact
from remat_cli.simulate import Metrics, simulate
from remat_cli.strategies.base import NoOptions, RunContext, Strategy, StrategyResult
from remat_cli.algorithms.segments import Segmentation, checkpoint_sequence, schedule_from_sequence, segment
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan

__all__ = ["SQRT", "GREEDY", "GreedyOptions", "chen_plan", "sqrt_groups", "greedy_groups"]


def chen_plan(graph: Graph, seg: Segmentation, starts: list[int]) -> tuple[StrategyResult, Metrics]:
    """Group the segments at ``starts``, keep group boundaries, recompute each group once."""
    groups = seg.merged(starts)
    kept = {groups.boundary(g) for g in range(groups.count)}
    schedule = schedule_from_sequence(graph, checkpoint_sequence(groups, kept))
    metrics = simulate(graph, schedule).metrics
    assert metrics is not None, "chen: checkpoint sequence is invalid"
    info = {"segments": seg.count, "groups": groups.count}
    keep = tuple(sorted(kept))
    return StrategyResult(schedule, info, keep), metrics


def sqrt_groups(seg: Segmentation) -> list[int]:
    """Start segments of about √L groups of about √L forward nodes (L forward nodes)."""
    sizes = [len(x) for x in seg.nodes]
    total = sum(sizes)
    k = max(1, round(math.sqrt(total)))
    per = total / k
    starts = [0]
    done = 0
    for i, size in enumerate(sizes[:-1]):
        done += size
        if done >= per * len(starts) - 1e-9:
            starts.append(i + 1)
    return starts


def greedy_groups(graph: Graph, seg: Segmentation, threshold: float) -> list[int]:
    """Chen's Algorithm 2: close a group once its forward values exceed ``threshold`` bytes."""
    mem = graph.mem
    starts = [0]
    temp = 0
    for i, part in enumerate(seg.nodes[:-1]):
        temp += int(mem[list(part)].sum())
        if temp > threshold:
            starts.append(i + 1)
            temp = 0
    return starts


def _groups_of(fwd_mem: list[int], threshold: float) -> list[int]:
    """:func:`greedy_groups` from the segments' forward bytes (``fwd_mem``), computed once."""
    starts = [0]
    temp = 0
    for i, m in enumerate(fwd_mem[:-1]):
        temp += m
        if temp > threshold:
            starts.append(i + 1)
            temp = 0
    return starts


def _recomputed(graph: Graph, seg: Segmentation, seg_cost: list[float], starts: tuple[int, ...]) -> float:
    """Cost of what :func:`chen_plan` recomputes for ``starts``: every group but the last
    again, less its kept boundary."""
    cost = graph.cost
    bounds = list(starts) + [seg.count]
    return sum(sum(seg_cost[a:b]) - float(cost[seg.boundary(b - 1)]) for a, b in zip(bounds[:-2], bounds[1:-1]))


@dataclass(frozen=True)
class GreedyOptions:
    """``chen-greedy``'s options: ``grid`` thresholds (geometric, from the smallest
    segment's forward bytes to all of them) are tried."""

    grid: int = 48


def _run_sqrt(graph: Graph, budget: int | None, options: NoOptions, context: RunContext) -> StrategyResult:
    seg = segment(graph)
    result, _ = chen_plan(graph, seg, sqrt_groups(seg))
    return result


def _run_greedy(graph: Graph, budget: int | None, options: GreedyOptions, context: RunContext) -> StrategyResult:
    fits = store_all_if_fits(graph, budget)
    if fits is not None:
        return StrategyResult(fits.schedule, {"segments": segment(graph).count, "groups": 1, "threshold": "none (store-all fits)"})
    assert budget is not None
    store_metrics = store_all_plan(graph).metrics
    seg = segment(graph)
    fwd_mem = [int(graph.mem[list(p)].sum()) for p in seg.nodes]
    total = sum(fwd_mem)
    smallest = max(1, min(fwd_mem))
    steps = int(options.grid)
    thresholds = sorted({0.0, float(total)} | {smallest * (total / smallest) ** (i / steps) for i in range(steps + 1)})
    # each distinct grouping once, with the smallest threshold that yields it
    groupings: dict[tuple[int, ...], float] = {}
    for b in thresholds:
        groupings.setdefault(tuple(_groups_of(fwd_mem, b)), b)
    # the finest grouping first (the least memory: a plan early, for the deadline), then
    # from the coarsest down, skipping groupings whose cost (known without a replay)
    # exceeds the best fitting plan's; ties go to the smaller threshold, as in a plain scan
    order = list(groupings.items())
    order = order[:1] + order[1:][::-1]
    base = float(graph.cost[list(seg.forward)].sum() + sum(graph.cost[list(b)].sum() for b in seg.bwd))
    seg_cost = [float(graph.cost[list(p)].sum()) for p in seg.nodes]
    best: tuple[float, int, float, StrategyResult] | None = None
    min_peak: int | None = None
    deadline = context.deadline
    stopped = False
    tried = 0
    for starts, b in order:
        if tried and deadline is not None and time.perf_counter() > deadline:
            stopped = True  # anytime: the best grouping so far (at least one was tried)
            break
        if best is not None and base + _recomputed(graph, seg, seg_cost, starts) > best[0] * (1 + 1e-9):
            continue  # costlier than a fitting plan: it cannot win, whatever its peak
        tried += 1
        result, metrics = chen_plan(graph, seg, list(starts))
        min_peak = metrics.peak_bytes if min_peak is None else min(min_peak, metrics.peak_bytes)
        if metrics.peak_bytes <= budget:
            cand = (metrics.cost, metrics.peak_bytes, b, result)
            if best is None or cand[:3] < best[:3]:
                best = cand
    if best is None:
        assert min_peak is not None
        raise NoPlanError(
            f"chen-greedy cannot fit budget {fmt_bytes_exact(budget)}; its smallest plan "
            f"{'found before its time limit ' if stopped else ''}peaks at {fmt_bytes_exact(min_peak)}",
            min_budget=min(min_peak, store_metrics.peak_bytes),
        )
    _, _, b, result = best
    info = {**result.info, "threshold": Fact(int(b), "bytes")}
    if stopped:
        info["stopped"] = Phrase("time limit, after {} of {} groupings", (tried, len(order)))
    return StrategyResult(result.schedule, info, result.keep)


SQRT = Strategy(
    name="chen-sqrt",
    summary="Chen et al. 2016: about √n segments cut at articulation points, boundaries kept, "
    "each segment recomputed once in the backward pass.",
    solve=_run_sqrt,
    uses_budget=False,
    reference="Chen, Xu, Zhang, Guestrin 2016, arXiv:1604.06174 §4.1",
)

GREEDY = Strategy(
    name="chen-greedy",
    summary="Chen et al. 2016 greedy segmenting under a per-segment memory threshold, searched for the cheapest plan that fits the budget.",
    solve=_run_greedy,
    uses_budget=True,
    options=GreedyOptions,
    incumbent=4,
    reference="Chen, Xu, Zhang, Guestrin 2016, arXiv:1604.06174 §4.3",
)
