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

**A second argument: the reach search** (:func:`reach_lower_bound`). Follow the same
chain back to the start: from a set S resident at some compute step, the latest-computed
s ∈ S was computed at an earlier step with S' = (S − {s}) ∪ inputs(s) resident, at memory
at least w(S, s) = mem(S ∪ inputs(s)) + workspace(s); repeat until S' is empty (every step
goes strictly back in time, so the chain ends). Each valid schedule therefore contains,
for every needed v, a path inputs(v) = S₀ → S₁ → … → ∅ in the graph of node sets whose
edge weights are memories at distinct steps, so its peak is at least
P(v) = max(term(v), G(inputs(v))) with G(S) the least over such paths of the largest
edge weight (a bottleneck shortest path). Conversely every such path, run forwards
(compute s, free what S does not keep), is a valid schedule that ends with S resident, and
targets can be computed one after another from nothing: so the least peak of all valid
schedules is exactly fixed + max over targets of P(t), and the search below computes it
where it finishes.

G is found by best-first search in order of f(S) = max(g(S), h(S)), g the largest weight
so far and h(S) ≤ G(S): h(S) = mem(S) + min over s ∈ S of the extra memory computing s
needs (the first edge out of S weighs that much), and the bounds already proven for
S's members (a path from S computes each u ∈ S from its inputs: G(S) ≥ P(u); nodes are
searched in topological order, so those bounds exist; G is monotone, as a path from a
superset, with the members not in the subset skipped, is a path from the subset with no
larger weights). States reached again with a
smaller g are searched again. While the search runs, every path to ∅ passes through a
state on the open list whose f is at most that path's largest weight, so the least f on
the open list is a proven lower bound on G when the search is cut short, and it equals G
when ∅ is taken from the list. Work: at most ``per_node`` expansions per node and
``max_work`` in all; past that, a node's bound is its own term and its inputs' bounds
(computing v computes each input: P(v) ≥ P(u)).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace

from remat_cli.graph import Graph

__all__ = ["ReachBound", "StructuralBound", "reach_lower_bound", "structural_bound_key", "structural_lower_bound"]


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


#: :func:`structural_lower_bound`'s defaults, which the report uses (and its key names)
DEPTH, MAX_WORK, REACH_WORK = 4, 2_000, 1_000


def structural_lower_bound(graph: Graph, *, depth: int = DEPTH, max_work: int = MAX_WORK, reach_work: int = REACH_WORK) -> StructuralBound:
    """The larger of the module docstring's two bounds (``reach_work=0``: the game tree only),
    and which argument gave it.

    Never below ``graph.lb`` (depth 0 is exactly it). Work: at most ``max_work`` set
    expansions, each O(in-degree · |S|); start-up cost is one pass over the needed nodes.
    Made once per graph and arguments (:meth:`Graph.derived`): the search is capped by work,
    not time, so it is the same wherever it is made, and a planning run may make it while it
    waits on its second process (``RunContext.idle``), before the report asks for it.
    """
    key = structural_bound_key(depth, max_work, reach_work)
    return graph.derived(key, lambda: _structural_lower_bound(graph, depth, max_work, reach_work))


def structural_bound_key(depth: int = DEPTH, max_work: int = MAX_WORK, reach_work: int = REACH_WORK) -> str:
    """The :meth:`Graph.derived` key :func:`structural_lower_bound` keeps its bound under."""
    return f"structural lower bound {depth} {max_work} {reach_work}"


def _structural_lower_bound(graph: Graph, depth: int, max_work: int, reach_work: int) -> StructuralBound:
    inputs = _Inputs(graph)
    game = _game_tree_bound(graph, depth, max_work, inputs)
    if reach_work <= 0:
        return game
    reach = _reach_lower_bound(graph, 300, reach_work, inputs)
    if reach.bytes > game.bytes or (reach.exact and reach.bytes == game.bytes):
        return replace(game, bytes=reach.bytes, node=reach.node, argument="reach search", exact=reach.exact)
    return game


class _Inputs:
    """Each node's inputs as a list (in-edge order) and a set, the bytes of the distinct
    inputs, and the nodes that read an input twice: so the bytes of v's inputs outside a set
    S are ``set_bytes[v]`` less the bytes of ``sets[v] & S`` (one C-level intersection,
    usually empty) instead of a Python loop over v's inputs."""

    def __init__(self, graph: Graph) -> None:
        self.lists = graph.pred_lists
        self.mem = graph.mem.tolist()
        self.ws = graph.workspace.tolist()
        self.sets = [frozenset(p) for p in self.lists]
        mem = self.mem
        self.set_bytes = [sum(map(mem.__getitem__, p)) for p in self.sets]
        self.repeats = [len(p) != len(q) for p, q in zip(self.lists, self.sets)]


def _game_tree_bound(graph: Graph, depth: int, max_work: int, inputs: _Inputs | None = None) -> StructuralBound:
    """The depth-limited game-tree bound (module docstring, first argument).

    Each set's bytes are handed down from its parent (S − {s} ∪ inputs(s) holds
    mem(S) − mem(s) + the bytes of s's inputs outside S), and the last level's values are
    their terms, read off without building their sets: the same search, value for value."""
    inputs = inputs or _Inputs(graph)
    preds, psets, pbytes, repeats = inputs.lists, inputs.sets, inputs.set_bytes, inputs.repeats
    any_repeats = any(repeats)
    mem = inputs.mem
    ws = inputs.ws
    fixed = graph.fixed_mem
    needed_nodes = graph.needed_nodes.tolist()
    best = graph.lb - fixed  # activation bytes; the op bound is the floor
    best_node = int(graph.lb_node)
    work = 0
    complete = True
    memo: dict[tuple[frozenset[int], int, int], int] = {}

    class _Exhausted(Exception):
        pass

    def value(s_set: frozenset[int], held: int, c: int, d: int, alpha: int) -> int:
        """F_d(S, c) exactly when it exceeds ``alpha``; otherwise some value ≤ alpha.
        ``held`` is mem(S)."""
        nonlocal work
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
        # (an input read twice counts twice in the order, as it always has)
        children = []
        for s in s_set:
            if repeats[s]:
                order = sum(mem[u] for u in preds[s] if u not in s_set)
            else:
                shared = psets[s] & s_set
                order = pbytes[s] - sum(map(mem.__getitem__, shared)) if shared else pbytes[s]
            children.append((held + order + ws[s], s))
        if d == 1 and not any_repeats:
            # each child's value is its term, which is its key: the first in key order
            # decides, or all beat the threshold and the least is the value
            low = min(children)[0]
            if low <= thr:
                return max(term, low)
        else:
            children.sort()
            low = None
            for key_s, s in children:
                if repeats[s]:
                    shared = psets[s] & s_set
                    held_s = held - mem[s] + pbytes[s] - (sum(map(mem.__getitem__, shared)) if shared else 0)
                else:
                    held_s = key_s - ws[s] - mem[s]  # mem(S) − mem(s) + s's inputs outside S
                if d == 1:
                    got = held_s + mem[s] + ws[s]  # value(child, s, 0, ·) is the child's term
                else:
                    got = value((s_set - {s}).union(preds[s]), held_s, s, d - 1, thr)
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
            got = value(frozenset(preds[v]), pbytes[v], v, depth, best)
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
    return _reach_lower_bound(graph, per_node, max_work, _Inputs(graph))


def _reach_lower_bound(graph: Graph, per_node: int, max_work: int, inputs: _Inputs) -> ReachBound:
    """:func:`reach_lower_bound` with the inputs' sets and bytes made once."""
    preds = inputs.sets
    pbytes = inputs.set_bytes
    mem = inputs.mem
    ws = inputs.ws
    needed = graph.needed
    is_target = bytearray(graph.n)
    for t in graph.targets.tolist():
        is_target[t] = 1
    plb = [0] * graph.n  # proven lower bound on P(v), activation bytes
    work = 0
    exact = True

    need = [b + w for b, w in zip(pbytes, ws)]  # s's distinct inputs and workspace

    def h(s_set: frozenset[int], held: int) -> int:
        """A lower bound on G(S) (module docstring); s's inputs in S are not extra."""
        if not s_set:
            return 0
        first = min((need[s] - sum(map(mem.__getitem__, shared))) if (shared := preds[s] & s_set) else need[s] for s in s_set)
        return max(held + first, max(map(plb.__getitem__, s_set)))

    for v in graph.topo.tolist():
        if not needed[v]:
            continue
        start = preds[v]
        held0 = pbytes[v]
        bound = max(held0 + mem[v] + ws[v], max(map(plb.__getitem__, start), default=0))  # all >= 0
        cap = min(per_node, max_work - work)
        if cap > 0 and start:
            got, spent, done = _bottleneck(start, held0, preds, pbytes, mem, ws, h, cap)
            work += spent
            bound = max(bound, got)
        else:
            done = not start
        plb[v] = bound
        if is_target[v] and not done:
            exact = False
    best = max((v for v in graph.needed_nodes.tolist()), key=lambda v: (plb[v], -v))
    return ReachBound(int(plb[best] + graph.fixed_mem), graph.ids[best], exact, work)


def _bottleneck(start, held0, preds, pbytes, mem, ws, h, cap) -> tuple[int, int, bool]:
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
            shared = preds[s] & s_set  # s's inputs already held: not extra
            extra = pbytes[s] - sum(map(mem.__getitem__, shared)) if shared else pbytes[s]
            g2 = max(g, held + extra + ws[s])
            nxt = (s_set - {s}) | preds[s]
            if g2 < best_g.get(nxt, g2 + 1):
                best_g[nxt] = g2
                held2 = held - mem[s] + extra
                tick += 1
                heapq.heappush(heap, (max(g2, h(nxt, held2)), g2, tick, held2, nxt))
    return 0, spent, False  # unreachable: ∅ is always reachable from a set of needed nodes
