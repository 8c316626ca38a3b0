"""pathwidth: Kumar et al.'s divide and conquer over a path decomposition, with budgets.

Reference: R. Kumar, M. Purohit, Z. Svitkina, E. Vee, J. Wang, *Efficient
Rematerialization for Deep Networks*, NeurIPS 2019 (the path-decomposition algorithm).

The bags of a path decomposition (:func:`~remat_cli.algorithms.decompose.path_decomposition`)
form a sequence; the middle bag splits it into a left and a right part, whose middle
bags are split again, and so on. That balanced split is a separator tree of depth
≤ log2(bags) in which each node is owned by the highest bag holding it, so the same
recursion as ``treewidth`` runs over it (see :mod:`remat_cli.strategies.treewidth` for
the recursion, its bounds and the budget refinements): the left and right schedules are
built recursively and merged around the middle bag. Only needed nodes are decomposed,
so bags after the last one holding a needed node never exist. With unit sizes the peak
is at most (p+1)·(depth+1) values for pathwidth bound p.
"""

from __future__ import annotations

import time
from dataclasses import replace

from remat_cli.graph import Graph
from remat_cli.strategies.base import RunContext, Strategy, StrategyResult
from remat_cli.algorithms.decompose import path_separator_tree, shared, shared_path_decomposition
from remat_cli.strategies.treewidth import DecompositionOptions, plan_over_separator_tree

__all__ = ["STRATEGY", "FIT_PROBE"]


def _run(graph: Graph, budget: int | None, options: DecompositionOptions, context: RunContext, fit_only: bool = False) -> StrategyResult:
    started = time.perf_counter()
    pd = shared_path_decomposition(graph, context.shared)
    sep = shared(context.shared, graph, f"path separator tree {id(pd)}", lambda: path_separator_tree(graph, pd))
    seconds = time.perf_counter() - started
    kind = f"path ({pd.order} order)"
    return plan_over_separator_tree(graph, sep, budget, options, context, kind=kind, decompose_seconds=seconds, fit_only=fit_only)


def _run_fit(graph: Graph, budget: int | None, options: DecompositionOptions, context: RunContext) -> StrategyResult:
    return _run(graph, budget, options, context, fit_only=True)


STRATEGY = Strategy(
    name="pathwidth",
    summary="Kumar et al.: path decomposition split at middle bags, left and right schedules "
    "built recursively and merged; with a budget it stops recursing where a plain schedule "
    "fits and reuses values while the budget allows.",
    solve=_run,
    uses_budget=True,
    options=DecompositionOptions,
    reference="Kumar, Purohit, Svitkina, Vee, Wang. Efficient Rematerialization for Deep Networks. NeurIPS 2019.",
)

#: pathwidth as the search for the smallest budget probes it: only whether it fits (the
#: first candidate found to fit), as treewidth's :data:`~remat_cli.strategies.treewidth.FIT_PROBE`.
FIT_PROBE = replace(STRATEGY, solve=_run_fit)
