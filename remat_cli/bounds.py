"""Lower bounds on the peak memory of every valid schedule of a graph (DESIGN §1).

The largest-operation bound ``graph.lb`` looks at one compute step: v and its inputs.
:func:`structural_lower_bound` follows the inputs back in time, which no schedule can
avoid, recomputation or not.

**The argument.** Say a schedule computes c at step τ while every value of a set S is
resident (S ∌ c). For each s ∈ S let t_s < τ be the step of its latest compute before
τ; s is resident from t_s to τ (a free in between would need another compute to make it
resident at τ). Let s* be the s with the latest t_s. At t_{s*}, every other s ∈ S is
resident (computed earlier, kept until τ) and so is every input of s*. So the schedule
computes s* at some step while all of S' = (S − {s*}) ∪ inputs(s*) is resident. Hence
the lower bound F on the peak of such a schedule obeys

    F(S, c) ≥ fixed + mem(S) + mem(c) + workspace(c)
    F(S, c) ≥ min over s ∈ S of F((S − {s}) ∪ inputs(s), s)

(the schedule chooses s*, so the bound takes the minimum), and since every needed v is
computed with its inputs resident, every valid schedule peaks at least
max over needed v of F(inputs(v), v). With no expansion this is exactly ``graph.lb``;
each level of expansion can only raise it, and every truncated expansion is still a
valid bound (it drops terms from a maximum). Proven for all schedules, including ones
that recompute; nothing about the graph's shape is assumed.

**Evaluation.** Depth-limited game-tree search with alpha pruning: a node's value only
matters when it beats the best bound found so far, so the minimum over s stops at the
first child that cannot; children are tried smallest-first. Work is capped (``max_work``
expansions in all); the bound reported is the best proven within the cap, and the fact
says whether every node was searched to the full depth.
"""

from __future__ import annotations

from dataclasses import dataclass

from remat_cli.graph import Graph

__all__ = ["StructuralBound", "structural_lower_bound"]


@dataclass(frozen=True)
class StructuralBound:
    """A proven lower bound on every valid schedule's peak, fixed memory included."""

    bytes: int
    node: str  # the node whose compute the argument starts from
    op_bound_bytes: int  # the largest-operation bound (graph.lb), for comparison
    depth: int  # how many steps back in time the argument follows inputs
    complete: bool  # every needed node searched to ``depth`` within the work cap
    expansions: int  # search steps spent

    @property
    def gain(self) -> float:
        """How much the structural bound raises the largest-operation bound (ratio ≥ 1)."""
        return self.bytes / self.op_bound_bytes if self.op_bound_bytes else 1.0


def structural_lower_bound(graph: Graph, *, depth: int = 4, max_work: int = 2_000) -> StructuralBound:
    """The bound of the module docstring, searched ``depth`` levels deep.

    Never below ``graph.lb`` (depth 0 is exactly it). Work: at most ``max_work`` set
    expansions, each O(in-degree · |S|); start-up cost is one pass over the needed nodes.
    """
    preds = graph.pred_lists
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    fixed = graph.fixed_mem
    needed_nodes = graph.needed_nodes.tolist()
    best = graph.lb - fixed  # activation bytes; the op bound is the floor
    best_node = int(graph.lb_node)
    work = 0
    complete = True
    memo: dict[tuple[frozenset[int], int, int], int] = {}

    class _Exhausted(Exception):
        pass

    def value(s_set: frozenset[int], c: int, d: int, alpha: int) -> int:
        """F_d(S, c) exactly when it exceeds ``alpha``; otherwise some value ≤ alpha."""
        nonlocal work
        held = sum(mem[u] for u in s_set)
        term = held + mem[c] + ws[c]
        if d == 0 or not s_set:
            return term
        key = (s_set, c, d)
        hit = memo.get(key)
        if hit is not None:
            return hit
        work += 1
        if work > max_work:
            raise _Exhausted
        thr = max(alpha, term)
        # child s: S − {s} ∪ inputs(s) resident while s is computed; its own term first
        children = sorted((held + sum(mem[u] for u in preds[s] if u not in s_set) + ws[s], s) for s in s_set)
        low = None
        for _, s in children:
            got = value((s_set - {s}).union(preds[s]), s, d - 1, thr)
            if got <= thr:
                return max(term, got)  # the schedule can do no worse than thr here
            low = got if low is None else min(low, got)
        assert low is not None
        result = max(term, low)
        memo[key] = result  # exact: every child beat the threshold
        return result

    demand = graph.demand
    order = sorted(needed_nodes, key=lambda v: (-int(demand[v]), v))
    for v in order:
        try:
            got = value(frozenset(preds[v]), v, depth, best)
        except _Exhausted:
            complete = False
            break
        if got > best:
            best, best_node = got, v
    return StructuralBound(
        bytes=int(best + fixed),
        node=graph.ids[best_node],
        op_bound_bytes=int(graph.lb),
        depth=depth,
        complete=complete,
        expansions=min(work, max_work),
    )
