"""The one immutable computation graph that every loader builds and every pass reads.

Nodes are integers ``0..n-1``; their string ids are kept in a name table. Per-node data
(``mem``, ``cost``, ``workspace``) are numpy arrays and edges are stored twice in
compressed sparse row form (predecessors and successors), so hot loops never touch dicts
of strings. A graph is validated once when built (DESIGN §1) and never changed after.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from remat_cli.errors import InputError

__all__ = ["Graph", "NodeSpec", "KINDS", "MAX_VALUE_BYTES", "MAX_TOTAL_BYTES", "MAX_COST", "distinct_sorted"]

KINDS = ("forward", "loss", "backward")

#: Largest single size (mem, workspace, fixed memory) a graph may state: 8 PiB, where
#: float64 still counts every byte. Larger sizes cannot be real and are refused on load.
MAX_VALUE_BYTES = 2**53
#: Largest fixed + Σ mem + Σ workspace: every sum the tool forms stays exact in int64.
MAX_TOTAL_BYTES = 2**62
#: Largest cost or seconds of one node: sums over any schedule stay finite in float64.
MAX_COST = 1e30


@dataclass(frozen=True)
class NodeSpec:
    """One node as a loader reads it, before the graph is assembled and checked."""

    id: str
    inputs: Sequence[str] = ()
    mem: Any = 0
    cost: Any = 0.0
    op: str = ""
    workspace: Any = 0
    kind: str = ""
    seconds: Any = None


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable DAG of operations, one value per node (DESIGN §1).

    Build it with :meth:`from_nodes` or :meth:`from_arrays`; both validate the input and
    derive the topological order, the needed set and the lower bound.
    """

    name: str
    ids: tuple[str, ...]
    ops: tuple[str, ...]
    kinds: tuple[str, ...]
    mem: np.ndarray  # int64 bytes of each node's output
    cost: np.ndarray  # float64 compute cost, in ``cost_unit``
    workspace: np.ndarray  # int64 temporary bytes while the node runs
    pred_ptr: np.ndarray  # int64, CSR row pointers into pred_idx
    pred_idx: np.ndarray  # int32, distinct predecessors in input order
    succ_ptr: np.ndarray
    succ_idx: np.ndarray  # int32, successors in increasing index
    targets: np.ndarray  # int32, sorted
    fixed_mem: int
    cost_unit: str
    seconds: np.ndarray | None  # float64 estimated seconds per compute, when known
    topo: np.ndarray  # int32 topological order (stable: file order where possible)
    needed: np.ndarray  # bool: ancestors of the targets, targets included
    lb: int  # DESIGN §1 lower bound on any schedule's peak, fixed memory included
    lb_node: int  # the node that attains lb
    meta: Mapping[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[NodeSpec],
        *,
        name: str = "graph",
        targets: Iterable[str] | None = None,
        fixed_mem: Any = 0,
        cost_unit: str = "unit",
        source: str = "<graph>",
        meta: Mapping[str, Any] | None = None,
    ) -> Graph:
        """Assemble and validate a graph from node records; errors name ``source`` and the node."""
        if not nodes:
            raise InputError(f"{source}: the graph has no nodes")
        index: dict[str, int] = {}
        for i, node in enumerate(nodes):
            if not isinstance(node.id, str) or node.id == "":
                raise InputError(f"{source}: node #{i} has no id")
            if node.id in index:
                raise InputError(f"{source}: duplicate node id {node.id!r}")
            index[node.id] = i
        src: list[int] = []
        dst: list[int] = []
        for i, node in enumerate(nodes):
            seen: set[int] = set()
            for name_in in node.inputs:
                j = index.get(name_in)
                if j is None:
                    raise InputError(f"{source}: node {node.id!r}: input {name_in!r} names no node")
                if j == i:
                    raise InputError(f"{source}: node {node.id!r} reads its own output (cycle)")
                if j not in seen:
                    seen.add(j)
                    src.append(j)
                    dst.append(i)
        mem = [_number(nd.mem, "mem", nd.id, source, integer=True) for nd in nodes]
        cost = np.array([_number(nd.cost, "cost", nd.id, source) for nd in nodes], dtype=np.float64)
        workspace = [_number(nd.workspace, "workspace", nd.id, source, integer=True) for nd in nodes]
        seconds = None
        if any(nd.seconds is not None for nd in nodes):
            seconds = np.array(
                [0.0 if nd.seconds is None else _number(nd.seconds, "seconds", nd.id, source) for nd in nodes],
                dtype=np.float64,
            )
        kinds = []
        for nd in nodes:
            kind = nd.kind or ""
            if kind and kind not in KINDS:
                raise InputError(f"{source}: node {nd.id!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
            kinds.append(kind)
        target_idx = None
        if targets is not None:
            target_idx = []
            for t in targets:
                if t not in index:
                    raise InputError(f"{source}: target {t!r} is not a node")
                target_idx.append(index[t])
        return cls.from_arrays(
            ids=[nd.id for nd in nodes],
            ops=[nd.op or "" for nd in nodes],
            kinds=kinds,
            mem=mem,
            cost=cost,
            workspace=workspace,
            src=np.asarray(src, dtype=np.int64),
            dst=np.asarray(dst, dtype=np.int64),
            targets=target_idx,
            # (a sum of parameters, gradients and state: the graph's own limit, as for a graph
            # built from arrays, so that what `remat convert` writes reads back)
            fixed_mem=_number(fixed_mem, "fixed_mem", None, source, integer=True, most=MAX_TOTAL_BYTES),
            cost_unit=cost_unit,
            seconds=seconds,
            name=name,
            source=source,
            meta=meta,
            _checked=True,
        )

    @classmethod
    def from_arrays(
        cls,
        *,
        ids: Sequence[str],
        ops: Sequence[str],
        kinds: Sequence[str],
        mem: np.ndarray,
        cost: np.ndarray,
        src: np.ndarray,
        dst: np.ndarray,
        workspace: np.ndarray | None = None,
        targets: Iterable[int] | None = None,
        fixed_mem: int = 0,
        cost_unit: str = "unit",
        seconds: np.ndarray | None = None,
        name: str = "graph",
        source: str = "<graph>",
        meta: Mapping[str, Any] | None = None,
        _checked: bool = False,
    ) -> Graph:
        """Assemble a graph from integer edges (``src[k] -> dst[k]``), as transforms do.

        Edges must be distinct; their order among a node's predecessors is kept.
        """
        n = len(ids)
        if n == 0:
            raise InputError(f"{source}: the graph has no nodes")
        mem = _sizes(mem, "mem", ids, source)
        if workspace is None:
            workspace = np.zeros(n, dtype=np.int64)
        workspace = _sizes(workspace, "workspace", ids, source)
        fixed_mem = _fixed(fixed_mem, source)
        total = fixed_mem + int(mem.sum(dtype=np.float64)) + int(workspace.sum(dtype=np.float64))
        if total > MAX_TOTAL_BYTES:
            raise InputError(
                f"{source}: fixed memory + all sizes + all workspace is about {total:.3g} B, "
                f"above the {MAX_TOTAL_BYTES:.3g} B (2**62) remat can count exactly"
            )
        cost = _costs(cost, "cost", ids, source)
        if seconds is not None:
            seconds = _costs(seconds, "seconds", ids, source)
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if not _checked:
            if len(set(ids)) != n:
                dup = next(x for x in ids if list(ids).count(x) > 1)
                raise InputError(f"{source}: duplicate node id {dup!r}")
            if src.size and (src.min() < 0 or dst.min() < 0 or max(src.max(), dst.max()) >= n):
                raise InputError(f"{source}: an edge names a node index out of range")
        pred_ptr, pred_idx = _csr(dst, src, n, stable=True)
        succ_ptr, succ_idx = _csr(src, dst, n, stable=False)
        topo = _topological_order(pred_ptr, pred_idx, succ_ptr, succ_idx, n, ids, source)
        kinds_t = tuple(kinds)
        if targets is None:
            backward = [i for i, k in enumerate(kinds_t) if k == "backward"]
            if backward:
                target_arr = np.asarray(backward, dtype=np.int32)
            else:
                target_arr = np.flatnonzero(np.diff(succ_ptr) == 0).astype(np.int32)
        else:
            target_arr = distinct_sorted(np.asarray(list(targets), dtype=np.int32))
        if target_arr.size == 0:
            raise InputError(f"{source}: the graph has no targets")
        needed = _ancestors(pred_ptr, pred_idx, target_arr, n)
        demand = _demand(mem, workspace, src, dst, n)
        demand_needed = np.where(needed, demand, -1)
        lb_node = int(np.argmax(demand_needed))
        fixed = int(fixed_mem)
        return cls(
            name=name,
            ids=tuple(ids),
            ops=tuple(ops),
            kinds=kinds_t,
            mem=_frozen(mem),
            cost=_frozen(cost),
            workspace=_frozen(workspace),
            pred_ptr=_frozen(pred_ptr),
            pred_idx=_frozen(pred_idx),
            succ_ptr=_frozen(succ_ptr),
            succ_idx=_frozen(succ_idx),
            targets=_frozen(target_arr),
            fixed_mem=fixed,
            cost_unit=cost_unit,
            seconds=None if seconds is None else _frozen(seconds),
            topo=_frozen(topo),
            needed=_frozen(needed),
            lb=fixed + int(demand[lb_node]),
            lb_node=lb_node,
            meta=dict(meta or {}),
        )

    def with_arrays(self, **changes: Any) -> Graph:
        """This graph with some of its parts replaced, rebuilt as :meth:`from_arrays` builds
        it, so the order, needed set and lower bound follow the change.

        ``changes`` names :meth:`from_arrays` arguments (``mem=``, ``workspace=``,
        ``seconds=``, ``fixed_mem=``, ``targets=``, ``name=``, ``meta=``, ...; ``src`` and
        ``dst`` together); every part not named is kept as it is, targets included
        (``targets=None`` derives them anew). Replaces the ~20-argument rebuilds that
        transforms and tests wrote out to change one or two arrays.
        """
        unknown = sorted(set(changes) - _PARTS)
        if unknown:
            raise TypeError(f"with_arrays: not a part of a graph: {', '.join(unknown)}")
        if ("src" in changes) != ("dst" in changes):
            raise TypeError("with_arrays: give src and dst together")
        src, dst = self.edges()
        parts: dict[str, Any] = {
            "ids": self.ids,
            "ops": self.ops,
            "kinds": self.kinds,
            "mem": self.mem,
            "cost": self.cost,
            "workspace": self.workspace,
            "src": src,
            "dst": dst,
            "targets": self.targets,
            "fixed_mem": self.fixed_mem,
            "cost_unit": self.cost_unit,
            "seconds": self.seconds,
            "name": self.name,
            "source": self.name,
            "meta": self.meta,
        }
        parts.update(changes)
        return Graph.from_arrays(**parts, _checked="ids" not in changes and "src" not in changes)

    # ------------------------------------------------------------------ queries
    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self.ids)

    @property
    def num_edges(self) -> int:
        return int(self.pred_idx.size)

    @cached_property
    def index(self) -> dict[str, int]:
        """Map from node id to integer index."""
        return {name: i for i, name in enumerate(self.ids)}

    def preds(self, v: int) -> np.ndarray:
        """Distinct inputs of node ``v``, in input order."""
        return self.pred_idx[self.pred_ptr[v] : self.pred_ptr[v + 1]]

    def succs(self, v: int) -> np.ndarray:
        """Consumers of node ``v``, in increasing index."""
        return self.succ_idx[self.succ_ptr[v] : self.succ_ptr[v + 1]]

    @cached_property
    def pred_lists(self) -> list[list[int]]:
        """Predecessors as plain Python lists: fastest for per-step loops."""
        ptr = self.pred_ptr.tolist()
        idx = self.pred_idx.tolist()
        return [idx[ptr[v] : ptr[v + 1]] for v in range(self.n)]

    @cached_property
    def succ_lists(self) -> list[list[int]]:
        """Successors as plain Python lists."""
        ptr = self.succ_ptr.tolist()
        idx = self.succ_idx.tolist()
        return [idx[ptr[v] : ptr[v + 1]] for v in range(self.n)]

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """All edges as ``(src, dst)`` index arrays."""
        dst = np.repeat(np.arange(self.n, dtype=np.int32), np.diff(self.pred_ptr))
        return self.pred_idx.copy(), dst

    def derived(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per graph and kept on it under ``key``: the graph is
        immutable, so a fact derived from it (the store-all plan, min-memory's variants)
        holds as long as the graph does, as :func:`functools.cached_property` keeps the
        graph's own derived arrays."""
        if key not in self.__dict__:
            self.__dict__[key] = make()
        return self.__dict__[key]

    def derived_items(self, keep: Callable[[str], bool]) -> dict[str, Any]:
        """The facts :meth:`derived` holds whose key passes ``keep`` (another process that
        planned a copy of this graph hands them back: :mod:`remat_cli.strategies.auto`)."""
        return {k: v for k, v in self.__dict__.items() if isinstance(k, str) and keep(k)}

    @cached_property
    def topo_rank(self) -> np.ndarray:
        """Per node: its position in :attr:`topo` (ties between ready nodes go to the lower)."""
        rank = np.empty(self.n, dtype=np.int64)
        rank[self.topo] = np.arange(self.n)
        return rank

    @cached_property
    def needed_nodes(self) -> np.ndarray:
        """Indices of needed nodes in topological order."""
        return self.topo[self.needed[self.topo]]

    @property
    def base_cost(self) -> float:
        """Cost of computing every needed node once."""
        return float(self.cost[self.needed].sum())

    @property
    def base_seconds(self) -> float | None:
        """Estimated seconds of computing every needed node once (None without a time model)."""
        return None if self.seconds is None else float(self.seconds[self.needed].sum())

    @property
    def is_training(self) -> bool:
        return "backward" in self.kinds

    @property
    def demand(self) -> np.ndarray:
        """Per node: mem + workspace + Σ mem(inputs); its maximum over needed nodes is LB − fixed."""
        src, dst = self.edges()
        return _demand(self.mem, self.workspace, src, dst, self.n)

    @cached_property
    def sha256(self) -> str:
        """Content fingerprint: ids, edges, sizes, costs, targets, fixed memory (not the name)."""
        h = hashlib.sha256()
        h.update("\0".join(self.ids).encode())
        for arr in (self.pred_ptr, self.pred_idx, self.mem, self.workspace, self.targets):
            h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
        h.update(np.ascontiguousarray(self.cost, dtype=np.float64).tobytes())
        h.update(str(self.fixed_mem).encode())
        return h.hexdigest()

    def node_specs(self) -> list[NodeSpec]:
        """The nodes back as records (for writers and transforms)."""
        ids = self.ids
        preds = self.pred_lists
        mem = self.mem.tolist()
        cost = self.cost.tolist()
        ws = self.workspace.tolist()
        secs = None if self.seconds is None else self.seconds.tolist()
        return [
            NodeSpec(
                id=ids[v],
                inputs=[ids[u] for u in preds[v]],
                mem=mem[v],
                cost=cost[v],
                op=self.ops[v],
                workspace=ws[v],
                kind=self.kinds[v],
                seconds=None if secs is None else secs[v],
            )
            for v in range(self.n)
        ]

    def to_networkx(self) -> Any:
        """This graph as a ``networkx.DiGraph``, for exploring it with networkx's algorithms.

        Nodes are the string ids, with attributes ``op``, ``mem``, ``cost``, ``workspace``,
        ``kind`` and ``target`` (bool), and ``backward`` (bool) when the graph has kinds;
        edges run from each input to its reader, in input order; the graph attributes are
        ``name``, ``fixed_mem`` and ``cost_unit``. networkx is imported here, on first use
        (it is for convenience at the edges, never in hot loops: DESIGN §6).

        ``networkx.node_link_data(graph.to_networkx(), edges="links")`` is node-link JSON
        that :mod:`remat_cli.loaders.nodelink` reads back: ids, edges, sizes, costs and
        backward flags (not workspaces, and each node's inputs in networkx's link order).
        """
        import networkx as nx

        g = nx.DiGraph(name=self.name, fixed_mem=int(self.fixed_mem), cost_unit=self.cost_unit)
        is_target = np.zeros(self.n, dtype=bool)
        is_target[self.targets] = True
        has_kinds = any(self.kinds)
        mem, cost, ws = self.mem.tolist(), self.cost.tolist(), self.workspace.tolist()
        for v in range(self.n):
            attrs = {"op": self.ops[v], "mem": mem[v], "cost": cost[v], "workspace": ws[v], "kind": self.kinds[v]}
            attrs["target"] = bool(is_target[v])
            if has_kinds:
                attrs["backward"] = self.kinds[v] == "backward"
            g.add_node(self.ids[v], **attrs)
        ids = self.ids
        g.add_edges_from((ids[u], ids[v]) for v, preds in enumerate(self.pred_lists) for u in preds)
        return g

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, n={self.n}, edges={self.num_edges}, targets={self.targets.size})"


# ---------------------------------------------------------------------- helpers
#: What :meth:`Graph.with_arrays` may replace: the arguments of :meth:`Graph.from_arrays`.
_PARTS = frozenset(
    (
        "ids",
        "ops",
        "kinds",
        "mem",
        "cost",
        "workspace",
        "src",
        "dst",
        "targets",
        "fixed_mem",
        "cost_unit",
        "seconds",
        "name",
        "source",
        "meta",
    )
)


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of 1-d ``values``, sorted: ``np.unique(values)``, which imports
    numpy.ma at its first call (10-15 ms of a process: of start-up here, of pathwidth's
    decomposition in :mod:`remat_cli.algorithms.decompose`)."""
    out = np.sort(values)
    return out[np.concatenate(([True], out[1:] != out[:-1]))[: out.size]]


def _number(value: Any, label: str, node: str | None, source: str, integer: bool = False, most: int = MAX_VALUE_BYTES):
    """Parse one size (at most ``most`` bytes) or cost; reject non-numbers, NaN, infinities
    and negatives."""
    where = f"{source}: node {node!r}: " if node is not None else f"{source}: "
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{where}{label} {value!r} is not a number")
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        raise InputError(f"{where}{label} is {value}, not a finite number")
    if value < 0:
        raise InputError(f"{where}{label} {value} is negative")
    if integer:
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise InputError(f"{where}{label} {value} is not a whole number of bytes")
        value = int(value)
        if value > most:
            raise InputError(f"{where}{label} {value} B is above the limit of {most} B (2**{most.bit_length() - 1})")
        return value
    if value > MAX_COST:
        shown = f"{float(value):g}" if value < 1e300 else f"{str(value)[:12]}… ({len(str(value))} digits)"
        raise InputError(f"{where}{label} {shown} is above the limit of {MAX_COST:g}")
    return float(value) + 0.0  # + 0.0 turns -0.0 into 0.0: one graph, one hash


def _sizes(values: Any, label: str, ids: Sequence[str], source: str) -> np.ndarray:
    """Per-node byte sizes as int64, refusing negatives and sizes above MAX_VALUE_BYTES.

    Lists are checked as Python integers before conversion, so nothing wraps or overflows.
    """
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        arr = values.astype(np.int64, copy=False)
        bad = np.flatnonzero((arr < 0) | (arr > MAX_VALUE_BYTES))
        first = int(bad[0]) if bad.size else -1
        value = int(values[first]) if bad.size else 0
    else:
        seq = list(values)
        first, value = -1, 0
        for i, x in enumerate(seq):
            if isinstance(x, (float, np.floating)) and not (math.isfinite(x) and float(x).is_integer()):
                raise InputError(f"{source}: node {ids[i]!r}: {label} {x!r} is not a whole number of bytes")
            if not 0 <= int(x) <= MAX_VALUE_BYTES:
                first, value = i, int(x)
                break
        arr = np.asarray([int(x) for x in seq], dtype=np.int64) if first < 0 else np.zeros(0, np.int64)
    if first >= 0:
        why = "is negative" if value < 0 else f"B is above the limit of {MAX_VALUE_BYTES} B (2**53)"
        raise InputError(f"{source}: node {ids[first]!r}: {label} {value} {why}")
    if arr.shape != (len(ids),):
        raise InputError(f"{source}: {label} has {arr.size} entries for {len(ids)} nodes")
    return arr


def _fixed(value: Any, source: str) -> int:
    """Fixed memory as a checked Python int."""
    value = int(value)
    if value < 0:
        raise InputError(f"{source}: fixed memory {value} is negative")
    if value > MAX_TOTAL_BYTES:
        raise InputError(f"{source}: fixed memory {value} B is above the limit of {MAX_TOTAL_BYTES} B (2**62)")
    return value


def _costs(values: Any, label: str, ids: Sequence[str], source: str) -> np.ndarray:
    """Per-node costs (or seconds) as float64: finite, >= 0 and at most MAX_COST; -0.0 is 0."""
    with np.errstate(over="ignore", invalid="ignore"):
        arr = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0) | (arr > MAX_COST))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{source}: node {ids[i]!r}: {label} {arr[i]:g} is not a finite number in [0, {MAX_COST:g}]")
    return arr + 0.0


def _demand(mem, workspace, src, dst, n) -> np.ndarray:
    """mem + workspace + Σ mem(distinct inputs), per node, in exact integers."""
    in_mem = np.zeros(n, dtype=np.int64)
    np.add.at(in_mem, dst, mem[src])
    return mem + workspace + in_mem


def _csr(rows: np.ndarray, cols: np.ndarray, n: int, stable: bool) -> tuple[np.ndarray, np.ndarray]:
    """Group ``cols`` by ``rows``; ``stable`` keeps the given order inside a row, else sorts it."""
    if stable:
        order = np.argsort(rows, kind="stable")
    else:
        order = np.lexsort((cols, rows))
    counts = np.bincount(rows, minlength=n) if rows.size else np.zeros(n, dtype=np.int64)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, cols[order].astype(np.int32)


def _topological_order(pred_ptr, pred_idx, succ_ptr, succ_idx, n, ids, source) -> np.ndarray:
    """Kahn's algorithm, smallest index first, so a file already in topological order keeps it."""
    dst = np.repeat(np.arange(n), np.diff(pred_ptr))
    if np.all(pred_idx < dst):
        return np.arange(n, dtype=np.int32)
    indeg = np.diff(pred_ptr).tolist()
    sp = succ_ptr.tolist()
    si = succ_idx.tolist()
    heap = [v for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        v = heapq.heappop(heap)
        order.append(v)
        for w in si[sp[v] : sp[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, w)
    if len(order) < n:
        raise InputError(f"{source}: {_describe_cycle(pred_ptr, pred_idx, indeg, ids)}")
    return np.asarray(order, dtype=np.int32)


def _describe_cycle(pred_ptr, pred_idx, indeg, ids) -> str:
    """Walk backwards through unfinished nodes until one repeats: that loop is a cycle."""
    start = next(v for v in range(len(indeg)) if indeg[v] > 0)
    pos: dict[int, int] = {}
    path: list[int] = []
    v = start
    while v not in pos:
        pos[v] = len(path)
        path.append(v)
        v = next(int(u) for u in pred_idx[pred_ptr[v] : pred_ptr[v + 1]] if indeg[u] > 0)
    loop = path[pos[v] :][::-1]
    names = [ids[u] for u in loop]
    if len(names) > 8:
        names = names[:4] + ["…"] + names[-3:]
    return "the graph has a cycle: " + " -> ".join(repr(x) for x in names + [names[0]])


def _ancestors(pred_ptr, pred_idx, targets, n) -> np.ndarray:
    """Boolean mask of the targets and all their ancestors."""
    mark = np.zeros(n, dtype=bool)
    ptr = pred_ptr.tolist()
    idx = pred_idx.tolist()
    stack = [int(t) for t in targets]
    for t in stack:
        mark[t] = True
    mark_l = mark.tolist()
    while stack:
        v = stack.pop()
        for u in idx[ptr[v] : ptr[v + 1]]:
            if not mark_l[u]:
                mark_l[u] = True
                stack.append(u)
    return np.asarray(mark_l, dtype=bool)


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr
