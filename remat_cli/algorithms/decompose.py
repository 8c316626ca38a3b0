"""Tree and path decompositions of a computation graph, and the separator tree built on them.

What the treewidth and pathwidth strategies (Kumar et al., *Efficient Rematerialization
for Deep Networks*, NeurIPS 2019) divide and conquer over. Everything works on integer
adjacency sets of the needed nodes; networkx is never used here.

The graph decomposed is the **moral skeleton** of the needed part of the DAG: the
undirected edges u–v of the DAG plus an edge between every two inputs of the same node.
So every compute step (a node and all its inputs) lies inside one bag (nodes with more
than ``MORAL_DEGREE_CAP`` inputs excepted, to keep the skeleton small). Without this a
node with k inputs could force k+1 resident values while the skeleton has width 1,
and no (w+1)·(depth+1) bound could hold. ``moral=False`` gives the plain skeleton.

Public functions:

* :func:`tree_decomposition` – elimination orderings (min-degree, min-fill), the narrower;
* :func:`separator_tree` – re-rooted at centroid bags, each node owned by its highest bag;
* :func:`path_decomposition` – bags from a linear order with small vertex separation;
* :func:`path_separator_tree` – the same balanced split over the bag sequence;
* :func:`validate_decomposition` – every node and edge covered, every node's bags connected.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from itertools import chain
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from functools import cached_property

import numpy as np

from remat_cli.graph import Graph, distinct_sorted

T = TypeVar("T")

__all__ = [
    "TreeDecomposition",
    "PathDecomposition",
    "SeparatorTree",
    "skeleton",
    "tree_decomposition",
    "shared_tree_decomposition",
    "shared_path_decomposition",
    "elimination_decomposition",
    "separator_tree",
    "path_decomposition",
    "path_separator_tree",
    "validate_decomposition",
    "decomposition_widths",
]

#: Above this many nodes min-fill only rescores the direct neighbours of an eliminated
#: node (exact min-fill also rescores their neighbours); the result is still a valid
#: decomposition, only the heuristic's choices are approximate.
MIN_FILL_EXACT_LIMIT = 3000
#: Up to this many nodes elimination keeps neighbourhoods as integer bitsets (n²/8 bytes
#: in all) and scans one array of scores for the least; above it adjacency sets and heaps.
BITSET_LIMIT = 3000
#: ... where the mean degree is at most this: building the bitsets costs O(E·n/64) word
#: operations, more than the whole set loop on dense random DAGs, which stop at the
#: width cap after a few dozen steps (2,001 nodes, mean degree 570: 63 -> 126 ms).
BITSET_MEAN_DEGREE = 200
#: A node with more neighbours than this has its fill-in estimated by d·(d−1)/2.
FILL_DEGREE_CAP = 48
#: The inputs of a node with more inputs than this are not joined into a clique (that
#: would cost d² edges); the decomposition stays valid for the skeleton it was given,
#: but the (w+1)·(depth+1) bound no longer covers that node's compute step.
MORAL_DEGREE_CAP = 64
#: Elimination stops when the next node to eliminate has more neighbours than
#: max(``WIDTH_CAP``, √(``ELIMINATION_WORK``/n)), or when the fill-in would push the
#: skeleton past ``FILL_EDGE_FACTOR`` times its starting size (plus ``FILL_EDGE_SLACK``
#: edges): the nodes left form one bag (the *core*). The result is still a valid
#: decomposition, only wider; it keeps time at O(n·cap² + E) and memory at O(E) on
#: graphs of large treewidth (random DAGs, dense DAGs, wide grids), where exact
#: elimination grows the skeleton to Θ(n²) edges. Small graphs are never capped.
WIDTH_CAP = 100
ELIMINATION_WORK = 20_000_000
FILL_EDGE_FACTOR = 4
FILL_EDGE_SLACK = 200_000
#: ... and the skeleton never grows by more than this many edges, whatever its size: an
#: edge costs about 150 bytes in the adjacency sets (both ends), so this bounds the
#: elimination's memory to the skeleton's plus about 300 MB (random 100k-node training
#: graphs have 3.5 million skeleton edges; 4× that took 1 GB more and ended, 9 s later,
#: with a core of three quarters of the graph anyway). Graphs of up to 10,000 nodes stay
#: below it.
FILL_EDGE_MAX = 2_000_000


@dataclass(frozen=True, eq=False)
class TreeDecomposition:
    """Bags (tuples of node indices) joined in a tree by ``parent`` (−1 at the root)."""

    bags: tuple[tuple[int, ...], ...]
    parent: np.ndarray  # int64, parent bag of each bag, -1 for the root
    width: int  # max bag size - 1
    method: str  # "min-degree" or "min-fill"
    seconds: float
    core: int = 0  # size of the bag of nodes left when elimination stopped at a cap (0: none)

    def tree_edges(self) -> list[tuple[int, int]]:
        return [(int(p), b) for b, p in enumerate(self.parent.tolist()) if p >= 0]


@dataclass(frozen=True, eq=False)
class PathDecomposition:
    """Bags in a sequence; consecutive bags are joined.

    Stored as intervals: graph node ``nodes[i]`` lies in bags ``first[i]..last[i]``
    (O(n) memory). ``bags`` builds the bags themselves on demand, O(n·width).
    """

    nodes: np.ndarray  # graph index of each decomposed node
    first: np.ndarray  # its first bag
    last: np.ndarray  # its last bag
    width: int
    order: str  # which linear order gave it
    seconds: float

    @property
    def size(self) -> int:
        """Number of bags (one per node of the linear order)."""
        return int(self.nodes.size)

    @cached_property
    def bags(self) -> tuple[tuple[int, ...], ...]:
        expire: list[list[int]] = [[] for _ in range(self.size)]
        at: list[int] = [0] * self.size
        for v, a, b in zip(self.nodes.tolist(), self.first.tolist(), self.last.tolist()):
            at[a] = v
            expire[b].append(v)
        active: set[int] = set()
        bags: list[tuple[int, ...]] = []
        for i in range(self.size):
            active.add(at[i])
            bags.append(tuple(sorted(active)))
            active.difference_update(expire[i])
        return tuple(bags)

    def tree_edges(self) -> list[tuple[int, int]]:
        return [(i, i + 1) for i in range(self.size - 1)]


@dataclass(frozen=True, eq=False)
class SeparatorTree:
    """A balanced rooted tree of bags; every needed graph node is owned by exactly one bag.

    ``owner[v]`` is the tree node owning graph node ``v`` (−1 for nodes not decomposed);
    ``owned[x]`` lists what tree node ``x`` owns in topological order. Subtrees are
    contiguous ranges of the pre-order numbering: ``x`` is an ancestor of ``y`` (or ``y``
    itself) iff ``tin[x] <= tin[y] < tout[x]``. Tree nodes that own nothing are spliced
    out, so ``depth`` (edges on the longest root-to-leaf path) counts only owning bags.
    """

    parent: np.ndarray
    children: tuple[tuple[int, ...], ...]
    depth_of: np.ndarray
    tin: np.ndarray
    tout: np.ndarray
    owned: tuple[tuple[int, ...], ...]
    owner: np.ndarray
    root: int
    depth: int
    width: int  # of the decomposition it came from
    seconds: float

    @property
    def size(self) -> int:
        return len(self.owned)


# ---------------------------------------------------------------------- skeleton
def skeleton(graph: Graph, *, moral: bool = True) -> tuple[np.ndarray, list[set[int]]]:
    """The undirected (moral) skeleton of the needed nodes, on local ids ``0..m-1``.

    Returns ``(nodes, adj)``: ``nodes[i]`` is the graph index of local node ``i`` (in
    topological order) and ``adj[i]`` its neighbour set. O(E + Σ indeg²) with ``moral``;
    the inputs of a node with more than ``MORAL_DEGREE_CAP`` inputs are not joined.
    """
    nodes = graph.needed_nodes
    local = np.full(graph.n, -1, dtype=np.int64)
    local[nodes] = np.arange(nodes.size)
    loc = local.tolist()
    preds = graph.pred_lists
    adj: list[set[int]] = [set() for _ in range(nodes.size)]
    for i, v in enumerate(nodes.tolist()):
        ins = [loc[u] for u in preds[v]]
        ai = adj[i]
        for a in ins:
            ai.add(a)
            adj[a].add(i)
        if moral and 1 < len(ins) <= MORAL_DEGREE_CAP:
            for x in range(len(ins)):
                ax = adj[ins[x]]
                for y in range(x + 1, len(ins)):
                    ax.add(ins[y])
                    adj[ins[y]].add(ins[x])
    return nodes, adj


# ---------------------------------------------------------------------- tree decompositions
def shared(memo: dict[Any, Any] | None, graph: Graph, key: str, make: Callable[[], T]) -> T:
    """``make()`` memoised in ``memo`` (when the caller gave one) for ``graph``; without
    one, kept on the graph itself (:meth:`Graph.derived`), so that the plans a search for
    the smallest budget makes decompose the graph once (the skeleton, O(E), is not kept)."""
    if not isinstance(memo, dict):
        return make() if key == "skeleton" else graph.derived("decompose: " + key, make)
    hit = memo.get(key)
    if hit is not None and hit[0] is graph:
        return hit[1]
    value = make()
    memo[key] = (graph, value)
    return value


def shared_tree_decomposition(
    graph: Graph,
    memo: dict[Any, Any] | None,
    methods: Sequence[str],
    deadline: float | None = None,
    skels: list[tuple[np.ndarray, list[set[int]]]] | None = None,
) -> TreeDecomposition:
    """:func:`tree_decomposition` of the moral skeleton, memoised in ``memo`` (a run's
    ``RunContext.shared``) so that the strategies ``auto`` runs decompose each graph once
    per heuristic. Past ``deadline`` (a ``time.perf_counter()`` value) no further heuristic
    is started (min-fill on a 10,000-node grid: 1-4 s). ``skels``: a list that holds the
    skeleton once built (the caller's, to use it again), else one of its own."""
    held = [] if skels is None else skels  # the skeleton, built at most once, when needed
    best: TreeDecomposition | None = None
    for method in methods:  # as tree_decomposition does, one heuristic at a time
        if best is not None and (best.core or (deadline is not None and time.perf_counter() > deadline)):
            break
        td = shared(
            memo, graph, "td " + method, lambda m=method: tree_decomposition(graph, methods=(m,), skel=_skeleton_once(memo, graph, held))
        )
        if best is None or td.width < best.width:
            best = td
    assert best is not None
    return best


def shared_path_decomposition(graph: Graph, memo: dict[Any, Any] | None) -> PathDecomposition:
    """:func:`path_decomposition` (guided by a min-degree tree decomposition), memoised
    like :func:`shared_tree_decomposition`."""
    skels: list[tuple[np.ndarray, list[set[int]]]] = []  # the skeleton, built once for both
    td = shared_tree_decomposition(graph, memo, ("min-degree",), skels=skels)
    return shared(memo, graph, "pd", lambda: path_decomposition(graph, td=td, skel=_skeleton_once(memo, graph, skels)))


def _skeleton_once(
    memo: dict[Any, Any] | None, graph: Graph, skels: list[tuple[np.ndarray, list[set[int]]]]
) -> tuple[np.ndarray, list[set[int]]]:
    """The moral skeleton (:func:`skeleton`), built at most once per ``skels`` (a list that
    holds it: one call's, or shared by a caller that decomposes twice)."""
    if not skels:
        skels.append(shared(memo, graph, "skeleton", lambda: skeleton(graph)))
    return skels[0]


def tree_decomposition(
    graph: Graph,
    *,
    moral: bool = True,
    methods: Sequence[str] = ("min-degree", "min-fill"),
    skel: tuple[np.ndarray, list[set[int]]] | None = None,
) -> TreeDecomposition:
    """The narrower of the elimination-ordering decompositions named in ``methods``.

    Bags hold graph node indices (needed nodes only). See :func:`elimination_decomposition`
    (and ``WIDTH_CAP``). ``skel`` is :func:`skeleton`'s result when the caller has it.
    min-fill is skipped when min-degree already stopped at a cap: it would stop too.
    """
    nodes, adj = skel if skel is not None else skeleton(graph, moral=moral)
    best: TreeDecomposition | None = None
    for method in methods:
        if best is not None and best.core:
            break
        td = elimination_decomposition([set(a) for a in adj], method)
        if best is None or td.width < best.width:
            best = td
    assert best is not None
    mapping = nodes.tolist()
    bags = tuple(tuple(sorted(mapping[x] for x in bag)) for bag in best.bags)
    return TreeDecomposition(bags, best.parent, best.width, best.method, best.seconds, best.core)


def elimination_decomposition(adj: list[set[int]], method: str = "min-degree", *, max_degree: int | None = -1) -> TreeDecomposition:
    """Tree decomposition by greedy vertex elimination (Bodlaender & Koster, *Treewidth
    computations I. Upper bounds*, 2010).

    Repeatedly eliminate the node of least degree (``min-degree``) or least fill-in
    (``min-fill``: fewest missing edges among its neighbours), ties going to the lower id,
    turn its neighbourhood into a clique, and record the bag {v} ∪ N(v). The bag of v
    hangs below the bag of the neighbour eliminated first after v. Up to
    ``BITSET_LIMIT`` nodes (of mean degree at most ``BITSET_MEAN_DEGREE``) the neighbourhoods are integer bitsets and the scores sit in
    one array searched for its least entry per step (:func:`_eliminate_bitsets`: O(n) per
    step, and a few O(n/64)-word integer operations per neighbour and per fill edge); above
    it adjacency sets and priority queues with lazy deletion (:func:`_eliminate_sets`:
    O((n + fill) log n) for min-degree; min-fill pays O(d²) per rescore and only rescores
    the eliminated node's neighbours above ``MIN_FILL_EXACT_LIMIT`` nodes). Min-fill is
    exact up to that limit either way: each node's triangle count is kept current.
    ``adj`` is consumed. Bags use the local ids of ``adj``: the eliminated node first,
    then its neighbours (ascending where bitsets are used).

    With ``max_degree`` (−1: the default cap, see ``WIDTH_CAP``; None: no cap),
    elimination stops before a node with
    more neighbours than that, or before the fill-in grows the skeleton past
    ``FILL_EDGE_FACTOR`` × its size + ``FILL_EDGE_SLACK``; the remaining nodes then form
    one root bag and ``core`` says how many. Time O(n log n + E·max_degree), memory O(E).
    """
    started = time.perf_counter()
    n = len(adj)
    if method not in ("min-degree", "min-fill"):
        raise ValueError(f"unknown elimination heuristic {method!r}")
    fill = method == "min-fill"
    if max_degree is not None and max_degree < 0:
        max_degree = max(WIDTH_CAP, math.isqrt(ELIMINATION_WORK // max(n, 1)))
    bitsets = n <= BITSET_LIMIT and sum(map(len, adj)) <= BITSET_MEAN_DEGREE * n
    eliminate = _eliminate_bitsets if bitsets else _eliminate_sets
    order, bags, position, core = eliminate(adj, fill, max_degree)
    # bag k belongs to order[k]; its parent is the bag of the earliest-eliminated neighbour
    parent = np.full(len(bags), -1, dtype=np.int64)
    at = position.__getitem__
    for k, bag in enumerate(bags):
        if len(bag) > 1:
            p = min(map(at, bag[1:]))
            parent[k] = p if p != k else -1  # the core bag is a root
    roots = np.flatnonzero(parent < 0)
    for r in roots[:-1].tolist():  # join the components' trees into one (empty intersections)
        parent[r] = int(roots[-1])
    width = max((len(b) for b in bags), default=1) - 1
    return TreeDecomposition(tuple(bags), parent, width, method, time.perf_counter() - started, core)


def _edge_cap(edges: int) -> int:
    """How many skeleton edges the fill-in may grow ``edges`` to before elimination stops."""
    return edges + min((FILL_EDGE_FACTOR - 1) * edges + FILL_EDGE_SLACK, FILL_EDGE_MAX)


def _fill_score(d: int, tri: int) -> int:
    """Min-fill's score of a node of degree ``d`` with ``tri`` edges among its neighbours:
    the missing ones (estimated by all pairs above ``FILL_DEGREE_CAP`` neighbours)."""
    return d * (d - 1) // 2 if d > FILL_DEGREE_CAP else d * (d - 1) // 2 - tri


def _bits(x: int, bit: list[int]) -> list[int]:
    """The positions of the set bits of ``x`` (≥ 0), ascending; ``bit[i]`` is 1 << i."""
    out = []
    while x:
        b = x.bit_length() - 1
        out.append(b)
        x ^= bit[b]
    out.reverse()
    return out


def _eliminate_bitsets(adj: list[set[int]], fill: bool, max_degree: int | None) -> tuple[list[int], list[tuple[int, ...]], list[int], int]:
    """:func:`elimination_decomposition`'s loop over bitsets: ``(order, bags, position,
    core)``, each node's neighbourhood one Python int (bit u: neighbour u).

    The eliminated node is the least entry of one array of scores (eliminated nodes
    score above any), its lowest id among equals: the least (score, id) pair, as a
    priority queue would pop it. Min-fill keeps, per node, its degree and the edges among
    its neighbours (``tri``) current. Eliminating v with neighbourhood N (d nodes): a ∈ N
    loses v, hence the edges from v into N(a), ``z[a]`` = |N(a) ∩ N| of them; then the
    fill edges {a, b} (b ∈ N not adjacent to a) are added. A node w outside N gains one
    edge among its neighbours per fill edge with both ends in N(w). A node a ∈ N gains
    its new neighbours B_a, so (with c_ab the common neighbours of a and b before the
    fill, o_ab those outside N, F the fill edges) tri[a] grows by the edges from B_a into
    N(a), Σ_b c_ab, those within B_a, Σ_b (z[b] − (c_ab − o_ab)) / 2, and the fill edges
    among its neighbours, F − |B_a|: one AND and two popcounts per fill edge instead of a
    walk over its common neighbours. Only nodes in N and those outside it that gained an
    edge change score.
    """
    n = len(adj)
    bit = [1 << v for v in range(n)]
    adjb = [sum(map(bit.__getitem__, a)) for a in adj]
    deg = list(map(len, adj))
    tri: list[int] = []
    if fill:
        tri = [sum((adjb[u] & b).bit_count() for u in a) // 2 for a, b in zip(adj, adjb)]
        scores = np.fromiter(map(_fill_score, deg, tri), dtype=np.int64, count=n)
    else:
        scores = np.fromiter(deg, dtype=np.int64, count=n)
    done = np.iinfo(np.int64).max  # an eliminated node's score
    least = scores.argmin
    eliminated = [False] * n
    position = [0] * n
    order: list[int] = []
    bags: list[tuple[int, ...]] = []
    z = [0] * n  # z[a]: |N(a) ∩ N| for a ∈ N, the edges a loses with v
    acc = [0] * n  # twice what tri[a] gains from the fill, a ∈ N
    edges = sum(deg) // 2
    edge_cap = _edge_cap(edges)
    core = 0
    for _ in range(n):
        v = int(least())
        d = deg[v]
        if max_degree is not None and (d > max_degree or edges + d * (d - 1) // 2 > edge_cap):
            core = _rest_in_one_bag(eliminated, position, order, bags)
            break
        eliminated[v] = True
        scores[v] = done
        position[v] = len(order)
        order.append(v)
        nbits = adjb[v]
        adjb[v] = 0
        nb = _bits(nbits, bit)
        bags.append((v, *nb))
        vb = bit[v]
        if not fill:
            added = 0  # Σ over a ∈ N of (new degree − old degree)
            for a in nb:
                aa = (adjb[a] | nbits) ^ (bit[a] | vb)
                adjb[a] = aa
                da = aa.bit_count()
                added += da - deg[a]
                deg[a] = da
                scores[a] = da
            edges += (added + d) // 2 - d  # + the fill edges − v's edges
            continue
        for a in nb:
            aa = adjb[a] ^ vb
            adjb[a] = aa
            za = (aa & nbits).bit_count()
            z[a] = za
            tri[a] -= za
            acc[a] = 0
        fills = 0
        outside = ~nbits
        touched: list[int] = []
        for a in nb:  # the fill edges {a, b}, b > a, on the graph before any is added
            aa = adjb[a]
            missing = nbits & ~aa  # (a too: the loop ends there)
            while True:
                b = missing.bit_length() - 1
                if b <= a:
                    break
                missing ^= bit[b]
                fills += 1
                common = aa & adjb[b]
                c = common.bit_count()
                out = common & outside
                if out:
                    for w in _bits(out, bit):
                        tri[w] += 1
                        touched.append(w)
                    c += out.bit_count()  # c_ab + o_ab
                acc[a] += c + z[b]
                acc[b] += c + z[a]
        twice = 2 * fills - 2  # 2F − 2|B_a| = twice − 2 (new degree − old degree)
        for a in nb:
            aa = (adjb[a] | nbits) ^ bit[a]
            adjb[a] = aa
            da = aa.bit_count()
            ta = tri[a] + (acc[a] + twice - 2 * (da - deg[a])) // 2
            tri[a] = ta
            deg[a] = da
            scores[a] = da * (da - 1) // 2 if da > FILL_DEGREE_CAP else da * (da - 1) // 2 - ta
        for w in touched:
            scores[w] = _fill_score(deg[w], tri[w])
        edges += fills - d
    return order, bags, position, core


def _eliminate_sets(adj: list[set[int]], fill: bool, max_degree: int | None) -> tuple[list[int], list[tuple[int, ...]], list[int], int]:
    """:func:`elimination_decomposition`'s loop over adjacency sets and priority queues:
    ``(order, bags, position, core)``."""
    n = len(adj)
    two_hop = fill and n <= MIN_FILL_EXACT_LIMIT

    def score(v: int) -> int:
        nb = adj[v]
        d = len(nb)
        if not fill:
            return d
        if d > FILL_DEGREE_CAP:
            return d * (d - 1) // 2
        # pairs of neighbours minus the edges among them (each counted from both ends);
        # set intersections run in C, the same count as a loop over the pairs
        return d * (d - 1) // 2 - sum(map(len, map(nb.intersection, map(adj.__getitem__, nb)))) // 2

    # exact min-fill keeps, per node, the edges among its neighbours (the triangles through
    # it) up to date as edges come and go, so a rescore is O(1) instead of O(d²): the same
    # scores as ``score``, hence the same order and bags
    tri: list[int] = []
    if two_hop:
        tri = [sum(map(len, map(adj[v].intersection, map(adj.__getitem__, adj[v])))) // 2 for v in range(n)]

    def fill_of(v: int) -> int:
        d = len(adj[v])
        return d * (d - 1) // 2 if d > FILL_DEGREE_CAP else d * (d - 1) // 2 - tri[v]

    current = [fill_of(v) for v in range(n)] if two_hop else [score(v) for v in range(n)]
    # min-fill: one heap of (score, node); min-degree: one heap of nodes per degree (a
    # bucket queue; int heaps are cheaper than tuple heaps). Both pop the least
    # (score, node) still current, so they eliminate in the same order.
    heap = [(current[v], v) for v in range(n)] if fill else []
    heapq.heapify(heap)
    buckets: list[list[int]] = [[] for _ in range(max(current, default=0) + 1)] if not fill else []
    if not fill:
        for v in range(n):  # ascending ids: each bucket is already a heap
            buckets[current[v]].append(v)
    low = 0  # no bucket below it holds a current entry
    eliminated = [False] * n
    position = [0] * n
    order: list[int] = []
    bags: list[tuple[int, ...]] = []
    edges = sum(len(a) for a in adj) // 2
    edge_cap = _edge_cap(edges)
    core = 0
    while True:
        if fill:
            if not heap:
                break
            s, v = heapq.heappop(heap)
        else:
            while low < len(buckets) and not buckets[low]:
                low += 1
            if low == len(buckets):
                break
            s, v = low, heapq.heappop(buckets[low])
        if eliminated[v] or s != current[v]:
            continue
        d = len(adj[v])
        if max_degree is not None and (d > max_degree or edges + d * (d - 1) // 2 > edge_cap):
            core = _rest_in_one_bag(eliminated, position, order, bags)
            break
        eliminated[v] = True
        position[v] = len(order)
        order.append(v)
        nb = list(adj[v])
        bags.append((v, *nb))
        for a in nb:
            adj[a].discard(v)
        nbs = set(nb)
        if two_hop:  # v's edges go: a loses the edges v-b of its neighbours b in N(v)
            for a in nb:
                tri[a] -= len(adj[a] & nbs)
        # turn the neighbourhood into a clique: each new edge is added from both ends
        added = 0
        touched = set(nbs)
        if two_hop:  # one new edge a-b at a time: each common neighbour w gains a triangle
            for a in nb:
                aa = adj[a]
                for b in nbs - aa:
                    if b <= a:
                        continue
                    ab = adj[b]
                    common = aa & ab
                    for w in common:
                        tri[w] += 1
                    tri[a] += len(common)
                    tri[b] += len(common)
                    touched |= common
                    aa.add(b)
                    ab.add(a)
                    added += 2
        else:
            for a in nb:
                aa = adj[a]
                new_nb = nbs - aa
                new_nb.discard(a)
                if new_nb:
                    aa |= new_nb
                    added += len(new_nb)
        edges += added // 2 - len(nb)
        adj[v] = set()
        for a in touched:
            new = fill_of(a) if two_hop else score(a) if fill else len(adj[a])
            if new != current[a]:
                current[a] = new
                if fill:
                    heapq.heappush(heap, (new, a))
                    continue
                if new >= len(buckets):
                    buckets.extend([] for _ in range(new + 1 - len(buckets)))
                heapq.heappush(buckets[new], a)
                if new < low:
                    low = new
    return order, bags, position, core


# ---------------------------------------------------------------------- separator tree
def separator_tree(graph: Graph, td: TreeDecomposition) -> SeparatorTree:
    """Re-root ``td`` at centroid bags (Kumar et al. §4): the root is a bag whose removal
    leaves components of at most half the bags, each component is treated the same way,
    and its centroid becomes a child. Depth ≤ log2(bags). Each graph node is owned by the
    highest bag containing it. O(bags · log bags + Σ|bag|).
    """
    started = time.perf_counter()
    m = len(td.bags)
    nbrs: list[list[int]] = [[] for _ in range(m)]
    for b, p in enumerate(td.parent.tolist()):
        if p >= 0:
            nbrs[b].append(p)
            nbrs[p].append(b)
    sep_parent = _centroid_decomposition(nbrs)
    return _finish_separator_tree(graph, td.bags, sep_parent, td.width, started)


def _centroid_decomposition(nbrs: list[list[int]]) -> list[int]:
    """Parent of each tree node in the centroid decomposition of the tree ``nbrs``."""
    m = len(nbrs)
    removed = [False] * m
    sep_parent = [-1] * m
    size = [0] * m
    stack: list[tuple[int, int]] = [(0, -1)] if m else []
    while stack:
        start, par = stack.pop()
        # iterative DFS over the component of `start` for subtree sizes
        order: list[int] = []
        tpar = {start: -1}
        todo = [start]
        while todo:
            x = todo.pop()
            order.append(x)
            for y in nbrs[x]:
                if not removed[y] and y != tpar[x]:
                    tpar[y] = x
                    todo.append(y)
        for x in reversed(order):
            s = 1
            for y in nbrs[x]:
                if not removed[y] and y != tpar[x]:
                    s += size[y]
            size[x] = s
        total = len(order)
        c = start
        while True:
            heavy = next(
                (y for y in nbrs[c] if not removed[y] and y != tpar[c] and 2 * size[y] > total),
                None,
            )
            if heavy is None:
                break
            c = heavy
        removed[c] = True
        sep_parent[c] = par
        for y in nbrs[c]:
            if not removed[y]:
                stack.append((y, c))
    return sep_parent


def _finish_separator_tree(
    graph: Graph,
    bags: Sequence[Sequence[int]] | None,
    sep_parent: Sequence[int],
    width: int,
    started: float,
    *,
    owner: list[int] | None = None,
) -> SeparatorTree:
    """Ownership by highest bag (unless ``owner`` is given), splice out bags that own
    nothing, number the subtrees."""
    m = len(sep_parent)
    children: list[list[int]] = [[] for _ in range(m)]
    root = -1
    for x, p in enumerate(sep_parent):
        if p < 0:
            root = x
        else:
            children[p].append(x)
    depth = [0] * m
    order = [root]
    for x in order:
        for y in children[x]:
            depth[y] = depth[x] + 1
            order.append(y)
    if owner is None:
        assert bags is not None
        owner = [-1] * graph.n
        for x, bag in enumerate(bags):
            dx = depth[x]
            for v in bag:
                o = owner[v]
                if o < 0 or depth[o] > dx:
                    owner[v] = x
    rank_l = graph.topo_rank.tolist()
    owned_lists: list[list[int]] = [[] for _ in range(m)]
    for v, o in enumerate(owner):
        if o >= 0:
            owned_lists[o].append(v)
    # splice out tree nodes owning nothing (keep the root's place if it owns nothing)
    keep = [bool(owned_lists[x]) for x in range(m)]
    keep[root] = True
    new_id = [-1] * m
    kept: list[int] = []
    new_parent: list[int] = []
    # walk in BFS order; a kept node's parent is its nearest kept ancestor
    nearest = [-1] * m
    for x in order:
        p = sep_parent[x]
        up = -1 if p < 0 else (p if keep[p] else nearest[p])
        nearest[x] = up
        if keep[x]:
            new_id[x] = len(kept)
            kept.append(x)
            new_parent.append(-1 if up < 0 else new_id[up])
    k = len(kept)
    new_children: list[list[int]] = [[] for _ in range(k)]
    for i, p in enumerate(new_parent):
        if p >= 0:
            new_children[p].append(i)
    # pre-order numbering, depths
    tin = [0] * k
    tout = [0] * k
    ndepth = [0] * k
    counter = 0
    stack2: list[tuple[int, bool]] = [(0, False)]
    while stack2:
        x, done = stack2.pop()
        if done:
            tout[x] = counter
            continue
        tin[x] = counter
        counter += 1
        stack2.append((x, True))
        for y in reversed(new_children[x]):
            ndepth[y] = ndepth[x] + 1
            stack2.append((y, False))
    owner_new = np.full(graph.n, -1, dtype=np.int64)
    owned: list[tuple[int, ...]] = []
    for i, x in enumerate(kept):
        lst = sorted(owned_lists[x], key=rank_l.__getitem__)
        owned.append(tuple(lst))
        owner_new[lst] = i
    owned_depth = max((ndepth[i] for i in range(k) if owned[i]), default=0)
    return SeparatorTree(
        parent=np.asarray(new_parent, dtype=np.int64),
        children=tuple(tuple(c) for c in new_children),
        depth_of=np.asarray(ndepth, dtype=np.int64),
        tin=np.asarray(tin, dtype=np.int64),
        tout=np.asarray(tout, dtype=np.int64),
        owned=tuple(owned),
        owner=owner_new,
        root=0,
        depth=int(owned_depth),
        width=width,
        seconds=time.perf_counter() - started,
    )


# ---------------------------------------------------------------------- path decompositions
def path_decomposition(
    graph: Graph,
    *,
    moral: bool = True,
    td: TreeDecomposition | None = None,
    skel: tuple[np.ndarray, list[set[int]]] | None = None,
) -> PathDecomposition:
    """A path decomposition from the best of a few linear orders of the needed nodes.

    For a linear order π the bags are B_i = {π_i} ∪ {u before π_i with a neighbour at or
    after π_i}; the width is then the order's vertex separation number, which bounds
    the pathwidth from above (Kinnersley 1992). Orders tried: the topological order,
    Cuthill–McKee breadth-first orders from a pseudo-peripheral node, and (with ``td``)
    the order in which a depth-first walk of the tree decomposition first meets each
    node. O(E) per order; the bags are kept as one interval per node (O(n) memory).
    """
    started = time.perf_counter()
    nodes, adj = skel if skel is not None else skeleton(graph, moral=moral)
    m = len(adj)
    csr = _Csr.of(adj)
    candidates: dict[str, list[int]] = {"topological": list(range(m))}
    candidates["cuthill-mckee"] = _cuthill_mckee(csr)
    if td is not None:
        local = {v: i for i, v in enumerate(nodes.tolist())}
        candidates["tree walk"] = _tree_walk_order(td, local, m)
    best: tuple[int, str] | None = None
    for name, order in candidates.items():
        width = _order_width(csr, order)
        if best is None or width < best[0]:
            best = (width, name)
    assert best is not None
    pos, last = _last_positions(csr, candidates[best[1]])
    return PathDecomposition(
        nodes=nodes.copy(),
        first=pos,
        last=last,
        width=best[0],
        order=best[1],
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True, eq=False)
class _Csr:
    """The skeleton as arrays: node v's neighbours are ``idx[ptr[v]:ptr[v + 1]]``, sorted
    by (degree, id) (the order Cuthill–McKee visits them in); ``ptr_l``/``idx_l`` are
    the same as lists, for the loops that read a few rows at a time."""

    ptr: np.ndarray
    idx: np.ndarray
    deg: np.ndarray
    ptr_l: list[int]
    idx_l: list[int]

    @staticmethod
    def of(adj: list[set[int]]) -> _Csr:
        m = len(adj)
        deg = np.fromiter(map(len, adj), dtype=np.int64, count=m)
        ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(deg, out=ptr[1:])
        idx = np.fromiter(chain.from_iterable(adj), dtype=np.int64, count=int(ptr[-1]))
        rows = np.repeat(np.arange(m, dtype=np.int64), deg)
        idx = idx[np.lexsort((idx, deg[idx], rows))]
        return _Csr(ptr, idx, deg, ptr.tolist(), idx.tolist())


def _last_positions(csr: _Csr, order: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each node's position in ``order`` and the last position of it or a neighbour. O(E)."""
    m = len(order)
    pos = np.empty(m, dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(m, dtype=np.int64)
    last = pos.copy()
    rows = np.flatnonzero(csr.deg)
    if rows.size:
        last[rows] = np.maximum(last[rows], np.maximum.reduceat(pos[csr.idx], csr.ptr[rows]))
    return pos, last


def _order_width(csr: _Csr, order: list[int]) -> int:
    """Width of the order's bags (max |B_i| − 1) in O(E), without building them: bag i
    holds the i + 1 nodes placed so far less those whose last neighbour came before i."""
    m = len(order)
    if m == 0:
        return 0
    _, last = _last_positions(csr, order)
    ends = np.bincount(last, minlength=m)
    gone = np.concatenate(([0], np.cumsum(ends)[:-1]))  # nodes whose bags ended before i
    return int((np.arange(1, m + 1) - gone).max()) - 1


def _cuthill_mckee(csr: _Csr) -> list[int]:
    """Breadth-first order, neighbours by increasing degree, from pseudo-peripheral nodes."""
    m = len(csr.ptr_l) - 1
    seen = bytearray(m)
    mark = bytearray(m)  # _bfs_far's visited marks, cleared after each search
    order: list[int] = []
    ptr, idx = csr.ptr_l, csr.idx_l
    for s0 in range(m):
        if seen[s0]:
            continue
        # pseudo-peripheral: repeat BFS to the farthest node a few times
        start = s0
        for _ in range(3):
            far = _bfs_far(csr, start, mark)
            if far == start:
                break
            start = far
        seen[start] = 1
        queue = deque([start])
        while queue:
            v = queue.popleft()
            order.append(v)
            for u in idx[ptr[v] : ptr[v + 1]]:  # by (degree, id)
                if not seen[u]:
                    seen[u] = 1
                    queue.append(u)
    return order


#: _bfs_far expands a level of at least this many nodes with numpy, smaller ones in Python.
_BFS_VECTOR_MIN = 64


def _bfs_far(csr: _Csr, s: int, mark: bytearray) -> int:
    """The node farthest from ``s`` (the least id among the farthest), level by level."""
    marks = np.frombuffer(mark, dtype=np.uint8)
    ptr, idx = csr.ptr_l, csr.idx_l
    mark[s] = 1
    level: list[int] | np.ndarray = [s]
    levels: list[list[int] | np.ndarray] = []
    while len(level):
        levels.append(level)
        if len(level) < _BFS_VECTOR_MIN:
            nxt: list[int] | np.ndarray = []
            for v in level:
                for u in idx[ptr[v] : ptr[v + 1]]:
                    if not mark[u]:
                        mark[u] = 1
                        nxt.append(u)  # type: ignore[union-attr]
        else:
            f = np.asarray(level, dtype=np.int64)
            starts = csr.ptr[f]
            lens = csr.ptr[f + 1] - starts
            at = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()), dtype=np.int64)
            nb = csr.idx[at]
            nxt = distinct_sorted(nb[marks[nb] == 0])
            marks[nxt] = 1
        level = nxt
    far = int(min(levels[-1]))
    for lv in levels:
        marks[np.asarray(lv, dtype=np.int64)] = 0
    return far


def _tree_walk_order(td: TreeDecomposition, local: dict[int, int], m: int) -> list[int]:
    """Nodes in the order a depth-first walk of the tree decomposition first meets them;
    smaller subtrees are walked first so that big ones do not stay open long."""
    nb = len(td.bags)
    children: list[list[int]] = [[] for _ in range(nb)]
    roots = []
    for b, p in enumerate(td.parent.tolist()):
        (children[p] if p >= 0 else roots).append(b)
    size = [1] * nb
    post: list[int] = []
    stack = list(roots)
    while stack:
        x = stack.pop()
        post.append(x)
        stack.extend(children[x])
    for x in reversed(post):
        for y in children[x]:
            size[x] += size[y]
    seen = [False] * m
    order: list[int] = []
    stack = list(roots)
    while stack:
        x = stack.pop()
        for v in td.bags[x]:
            i = local[v]
            if not seen[i]:
                seen[i] = True
                order.append(i)
        stack.extend(sorted(children[x], key=lambda y: -size[y]))
    return order


def path_separator_tree(graph: Graph, pd: PathDecomposition) -> SeparatorTree:
    """Balanced split of the bag sequence: the middle bag is the root, the middle bags of
    the left and right parts its children, and so on (depth ≤ log2(bags)). A node lies in
    an interval of bags; it is owned by the one split point of least depth in it, found
    by descending from the root in O(log bags), so the bags are never built."""
    started = time.perf_counter()
    m = pd.size
    sep_parent = [-1] * m
    stack = [(0, m, -1)]
    while stack:
        lo, hi, par = stack.pop()
        if lo >= hi:
            continue
        mid = (lo + hi) // 2
        sep_parent[mid] = par
        stack.append((lo, mid, mid))
        stack.append((mid + 1, hi, mid))
    owner = [-1] * graph.n
    for v, a, b in zip(pd.nodes.tolist(), pd.first.tolist(), pd.last.tolist()):
        lo, hi = 0, m
        while True:
            mid = (lo + hi) // 2
            if b < mid:
                hi = mid
            elif a > mid:
                lo = mid + 1
            else:
                owner[v] = mid
                break
    return _finish_separator_tree(graph, None, sep_parent, pd.width, started, owner=owner)


# ---------------------------------------------------------------------- validation
def validate_decomposition(
    graph: Graph, bags: Sequence[Sequence[int]], tree_edges: Sequence[tuple[int, int]], *, moral: bool = True
) -> list[str]:
    """Problems with a decomposition of the (moral) skeleton of the needed nodes; [] if valid.

    Checks: the bags form a tree; every needed node is in some bag; every edge has both
    ends in some bag; the bags holding any one node form a connected subtree.
    """
    problems: list[str] = []
    m = len(bags)
    if len(tree_edges) != max(m - 1, 0):
        problems.append(f"{len(tree_edges)} tree edges for {m} bags: not a tree")
    nbrs: list[list[int]] = [[] for _ in range(m)]
    for a, b in tree_edges:
        nbrs[a].append(b)
        nbrs[b].append(a)
    if m:
        seen = {0}
        stack = [0]
        while stack:
            x = stack.pop()
            for y in nbrs[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        if len(seen) != m:
            problems.append("the bag tree is not connected")
    where: dict[int, list[int]] = {}
    for x, bag in enumerate(bags):
        for v in bag:
            where.setdefault(v, []).append(x)
    nodes, adj = skeleton(graph, moral=moral)
    mapping = nodes.tolist()
    bag_sets = [set(b) for b in bags]
    for i, v in enumerate(mapping):
        if v not in where:
            problems.append(f"node {graph.ids[v]!r} is in no bag")
            continue
        for j in adj[i]:
            if j > i:
                u = mapping[j]
                if not any(u in bag_sets[x] for x in where[v]):
                    problems.append(f"edge {graph.ids[v]!r}–{graph.ids[u]!r} is in no bag")
        holders = set(where[v])
        start = where[v][0]
        seen = {start}
        stack = [start]
        while stack:
            x = stack.pop()
            for y in nbrs[x]:
                if y in holders and y not in seen:
                    seen.add(y)
                    stack.append(y)
        if len(seen) != len(holders):
            problems.append(f"the bags holding {graph.ids[v]!r} are not connected")
    return problems


def decomposition_widths(graph: Graph) -> dict[str, object]:
    """Treewidth and pathwidth upper bounds of the moral skeleton and how long each took."""
    t0 = time.perf_counter()
    skel = skeleton(graph)
    td = tree_decomposition(graph, skel=skel)
    t1 = time.perf_counter()
    pd = path_decomposition(graph, td=td, skel=skel)
    t2 = time.perf_counter()
    return {
        "treewidth_ub": td.width,
        "treewidth_method": td.method,
        "treewidth_seconds": t1 - t0,
        "pathwidth_ub": pd.width,
        "pathwidth_order": pd.order,
        "pathwidth_seconds": t2 - t1,
    }


def _rest_in_one_bag(eliminated: Any, position: list[int], order: list[int], bags: list[tuple[int, ...]]) -> int:
    """Where an elimination stops (too wide), the nodes not eliminated yet go into one last
    bag, all at the next position, with the first of them standing for it in ``order``;
    returns how many they are (the core)."""
    rest = [u for u in range(len(eliminated)) if not eliminated[u]]
    for u in rest:
        position[u] = len(order)
    order.append(rest[0])
    bags.append(tuple(rest))
    return len(rest)
