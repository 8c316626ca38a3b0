"""remat_cli/bounds.py as of 9984b62 (before the issue 14 speed-up): the reference its faster
evaluation must equal field for field (tests/test_bounds_speed.py). Not used by the tool."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from remat_cli.graph import Graph

__all__ = ["ReachBound", "StructuralBound", "reach_lower_bound", "structural_lower_bound"]


@dataclass(frozen=True)
class StructuralBound:
    """A proven lower bound on every valid schedule's peak, fixed memory included."""

    bytes: int
    node: str  # the node whose compute the argument starts from
    op_bound_bytes: int  # the largest-operation bound (graph.lb), for comparison
    depth: int  # how many steps back in time the argument follows inputs
    complete: bool  # every needed node searched to ``depth`` within the work cap
    expansions: int  # search steps spent
    argument: str = "game tree"  # which argument gave ``bytes``: "game tree" or "reach search"
    exact: bool = False  # the reach search finished for every target: ``bytes`` is the least peak

    @property
    def gain(self) -> float:
        """How much the structural bound raises the largest-operation bound (ratio ≥ 1)."""
        return self.bytes / self.op_bound_bytes if self.op_bound_bytes else 1.0


def structural_lower_bound(graph: Graph, *, depth: int = 4, max_work: int = 2_000, reach_work: int = 1_000) -> StructuralBound:
    """The larger of the module docstring's two bounds (``reach_work=0``: the game tree only),
    and which argument gave it.

    Never below ``graph.lb`` (depth 0 is exactly it). Work: at most ``max_work`` set
    expansions, each O(in-degree · |S|); start-up cost is one pass over the needed nodes.
    """
    game = _game_tree_bound(graph, depth, max_work)
    if reach_work <= 0:
        return game
    reach = reach_lower_bound(graph, max_work=reach_work)
    if reach.bytes > game.bytes or (reach.exact and reach.bytes == game.bytes):
        return replace(game, bytes=reach.bytes, node=reach.node, argument="reach search", exact=reach.exact)
    return game


def _game_tree_bound(graph: Graph, depth: int, max_work: int) -> StructuralBound:
    """The depth-limited game-tree bound (module docstring, first argument)."""
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


@dataclass(frozen=True)
class ReachBound:
    """The reach search's bound (module docstring), fixed memory included."""

    bytes: int
    node: str  # a node whose bound P(v) gives ``bytes``
    exact: bool  # every target's search finished: ``bytes`` is the least peak of all schedules
    expansions: int


def reach_lower_bound(graph: Graph, *, per_node: int = 300, max_work: int = 1_000) -> ReachBound:
    """max over needed v of a proven lower bound on P(v), by the bottleneck best-first search
    of the module docstring. Never below ``graph.lb`` (each bound starts at the node's term).
    Cost: one pass over the needed nodes and edges, plus at most ``max_work`` expansions,
    each O(|S| · in-degree)."""
    preds = [frozenset(p) for p in graph.pred_lists]
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    needed = graph.needed
    is_target = bytearray(graph.n)
    for t in graph.targets.tolist():
        is_target[t] = 1
    plb = [0] * graph.n  # proven lower bound on P(v), activation bytes
    work = 0
    exact = True

    def h(s_set: frozenset[int], held: int) -> int:
        """A lower bound on G(S) (module docstring)."""
        if not s_set:
            return 0
        first = min(sum(mem[u] for u in preds[s] if u not in s_set) + ws[s] for s in s_set)
        return max(held + first, max(plb[u] for u in s_set))

    for v in graph.topo.tolist():
        if not needed[v]:
            continue
        start = preds[v]
        held0 = sum(mem[u] for u in start)
        bound = max([held0 + mem[v] + ws[v]] + [plb[u] for u in start])
        cap = min(per_node, max_work - work)
        if cap > 0 and start:
            got, spent, done = _bottleneck(start, held0, preds, mem, ws, h, cap)
            work += spent
            bound = max(bound, got)
        else:
            done = not start
        plb[v] = bound
        if is_target[v] and not done:
            exact = False
    best = max((v for v in graph.needed_nodes.tolist()), key=lambda v: (plb[v], -v))
    return ReachBound(int(plb[best] + graph.fixed_mem), graph.ids[best], exact, work)


def _bottleneck(start, held0, preds, mem, ws, h, cap) -> tuple[int, int, bool]:
    """G(start) (done) or a lower bound on it (the least f on the open list when ``cap``
    expansions are spent), the expansions spent, and whether ∅ was reached."""
    heap = [(h(start, held0), 0, 0, held0, start)]
    best_g = {start: 0}
    tick = 0
    spent = 0
    while heap:
        f, g, _, held, s_set = heap[0]
        if best_g[s_set] < g:  # a stale entry: reached again with a smaller g
            heapq.heappop(heap)
            continue
        if not s_set:
            return f, spent, True
        if spent >= cap:
            return f, spent, False
        heapq.heappop(heap)
        spent += 1
        for s in s_set:
            extra = sum(mem[u] for u in preds[s] if u not in s_set)
            g2 = max(g, held + extra + ws[s])
            nxt = (s_set - {s}) | preds[s]
            if g2 < best_g.get(nxt, g2 + 1):
                best_g[nxt] = g2
                held2 = held - mem[s] + extra
                tick += 1
                heapq.heappush(heap, (max(g2, h(nxt, held2)), g2, tick, held2, nxt))
    return 0, spent, False  # unreachable: ∅ is always reachable from a set of needed nodes
