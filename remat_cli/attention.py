"""Fused attention: recognise exported attention and model it as one fused kernel.

ONNX exports spell attention out as ``MatMul(Q, Kᵀ) → [Mul|Div scale] → [Add|Where mask]
→ Softmax → [Cast, Dropout] → MatMul(·, V)``, and reverse-mode autodiff of that spelling keeps
the ``[batch, heads, seq, seq]`` probabilities for the backward pass. Fused kernels
(PyTorch's ``scaled_dot_product_attention``, FlashAttention) never write those
probabilities to memory: the forward keeps the output and one fp32 statistic per row
(the logsumexp, ``[batch, heads, seq]``), and the backward recomputes the scores tile by
tile. FlashAttention-2 (Dao, 2023, "FlashAttention-2: Faster Attention with Better
Parallelism and Work Partitioning", backward pass) does 5 matrix products in the backward pass
against 2 in the forward, so the backward costs about 2.5× the forward.

:func:`fuse_attention` is a transform from a forward graph and its loader facts
(:class:`~remat_cli.training.ForwardFacts`) to a new forward graph and facts
(torch.fx-style: the input is not changed): in ``fused`` mode each recognised block
becomes one node of op ``Attention`` (the training table's fused-kernel entry: it saves
its inputs and its output, backward 2.5× forward), whose value is the output plus the
logsumexp; in ``unfused`` mode the graph is returned as it is. Both modes count the blocks
and state them as :class:`AttentionFacts`, written as plain data in ``meta["attention"]``. ``Attention`` ops already in the model (ONNX
opset 23, ``com.microsoft``) are counted and left as they are (the training table models
opset 23's op as a fused kernel; contrib ops are unknown ops there).

The default is ``fused``: PyTorch ≥ 2.0 runs ``scaled_dot_product_attention`` (used by
``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer`` and Hugging Face models'
default ``sdpa`` implementation) with a fused kernel, and the ONNX exporter decomposes
that call into exactly the pattern above. An export cannot say whether the model called
SDPA or wrote the softmax itself; ``--attention unfused`` models the latter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from remat_cli.costmodel import roofline_seconds
from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.training import ForwardFacts
from remat_cli.units import Phrase, to_data

__all__ = ["ATTENTION_MODES", "DEFAULT_ATTENTION", "AttentionFacts", "fuse_attention", "find_attention_blocks"]

ATTENTION_MODES = ("fused", "unfused")
DEFAULT_ATTENTION = "fused"
#: ops between the scores' MatMul and the Softmax: scale, mask, dtype casts
_SCORE_OPS = frozenset(["Mul", "Div", "Add", "Where", "Cast"])
#: native attention ops (already one kernel)
NATIVE_OPS = frozenset(["Attention", "com.microsoft.Attention", "com.microsoft.MultiHeadAttention"])
_LSE_BYTES = 4  # the logsumexp statistic is fp32 whatever the activations' dtype


@dataclass(frozen=True)
class AttentionFacts:
    """How attention was modelled: the mode, the blocks recognised, the native ops seen,
    and the bytes of the ``[batch, heads, seq, seq]`` probabilities of the recognised blocks
    (kept for backward when unfused, never materialised when fused)."""

    mode: str
    blocks: int
    native_ops: int
    probability_bytes: int

    @classmethod
    def from_meta(cls, value: Any) -> AttentionFacts | None:
        """The facts :func:`fuse_attention` wrote in ``meta["attention"]`` (a dict), or None
        when ``value`` is not such a dict (a graph file may state anything there)."""
        if not isinstance(value, dict) or set(value) != {f.name for f in dataclasses.fields(cls)}:
            return None
        if not isinstance(value["mode"], str) or not all(
            isinstance(value[k], int) and not isinstance(value[k], bool) for k in ("blocks", "native_ops", "probability_bytes")
        ):
            return None
        return cls(**value)

    def phrase(self) -> Phrase:
        """What ``remat info`` and ``remat plan`` say of the attention blocks."""
        how = (
            "fused: keeps output + fp32 logsumexp"
            if self.mode == "fused"
            else "unfused: keeps the softmax probabilities (seq x seq per head)"
        )
        if self.native_ops:
            return Phrase("{} block(s) recognised; {}; {} Attention op(s) (fused kernels)", (self.blocks, how, self.native_ops))
        return Phrase("{} block(s) recognised; {}", (self.blocks, how))


@dataclass(frozen=True)
class _Block:
    members: tuple[int, ...]  # forward nodes of the block, topological; the last is the output MatMul
    softmax: int
    inputs: tuple[int, ...]  # slots of the fused node: Q, Kᵀ, V, then mask values


def find_attention_blocks(graph: Graph, facts: ForwardFacts) -> list[_Block]:
    """Attention blocks of a forward graph: ``MatMul → scale/mask ops → Softmax → [Cast, Dropout]
    → MatMul`` where Q, Kᵀ and V are activations (not weights) and every value but the
    last is read by the next op of the block only.
    Linear in nodes + edges."""
    ops = graph.ops
    succs = graph.succ_lists
    slots = facts.slots
    is_target = np.zeros(graph.n, dtype=bool)
    is_target[graph.targets] = True

    def only_next(v: int) -> int | None:
        """The single consumer of v, when v is read by exactly one node and is no output."""
        s = succs[v]
        return s[0] if len(s) == 1 and not is_target[v] else None

    blocks: list[_Block] = []
    for s in range(graph.n):
        if ops[s] != "Softmax" or not slots[s] or slots[s][0] < 0:
            continue
        chain = [s]
        cur = slots[s][0]
        ok = True
        while ops[cur] in _SCORE_OPS:
            if only_next(cur) != chain[-1]:
                ok = False
                break
            chain.append(cur)
            nxt = _score_operand(ops[cur], slots[cur], ops, lambda u, c=cur: only_next(u) == c)
            if nxt is None:
                ok = False
                break
            cur = nxt
        if not ok or ops[cur] != "MatMul" or only_next(cur) != chain[-1] or len(slots[cur]) < 2:
            continue
        m1 = cur
        after = only_next(s)
        tail: list[int] = []
        while after is not None and ops[after] in ("Dropout", "Cast") and len(tail) < 3:
            tail.append(after)
            after = only_next(after)
        last = tail[-1] if tail else s
        if after is None or ops[after] != "MatMul" or len(slots[after]) < 2 or slots[after][0] != last:
            continue
        m2 = after
        if min(slots[m1][0], slots[m1][1], slots[m2][1]) < 0:
            continue  # Q, Kᵀ and V are activations; a product with a weight is a linear layer
        members = [m1, *reversed(chain), *tail, m2]
        inside = set(members)
        extra = [u for v in members[1:-1] for u in slots[v] if u >= 0 and u not in inside]
        inputs = tuple(dict.fromkeys([slots[m1][0], slots[m1][1], slots[m2][1], *extra]))
        blocks.append(_Block(members=tuple(members), softmax=s, inputs=inputs))
    return blocks


def _score_operand(op: str, sl: tuple[int, ...], ops: list[str], private: Callable[[int], bool]) -> int | None:
    """The input of a scale/mask op that carries the scores (the other operands are
    constants or masks; the scores are read by this op alone, a mask may be shared);
    None when the op is not a plain scale or mask."""
    if op == "Cast":
        return sl[0] if sl and sl[0] >= 0 else None
    if op == "Where":  # Where(cond, scores, fill) or Where(cond, fill, scores)
        cands = [u for u in sl[1:3] if u >= 0 and ops[u] in _SCORE_OPS | {"MatMul"} and private(u)]
        return cands[0] if len(cands) == 1 else None
    if op in ("Mul", "Div"):  # scores * c, scores / c (c a constant)
        if len(sl) != 2:
            return None
        a, b = sl
        if op == "Div":
            return a if a >= 0 and b == -1 else None
        if (a >= 0) == (b >= 0) or -2 in (a, b):
            return None
        return a if a >= 0 else b
    if op == "Add":  # scores + mask
        cands = [u for u in sl[:2] if u >= 0 and ops[u] in _SCORE_OPS | {"MatMul"} and private(u)]
        return cands[0] if len(cands) == 1 else None
    return None


def fuse_attention(graph: Graph, facts: ForwardFacts | None, mode: str = DEFAULT_ATTENTION) -> tuple[Graph, ForwardFacts | None]:
    """The forward graph and its facts with attention modelled per ``mode`` (module
    docstring), with :class:`AttentionFacts` as a dict in ``meta["attention"]`` and a line
    in ``meta["info"]``.

    Needs the ONNX loader's facts with their shapes; a graph without them is returned
    unchanged.
    """
    if mode not in ATTENTION_MODES:
        raise InputError(f"--attention {mode!r}: choose one of {', '.join(ATTENTION_MODES)}")
    shapes = facts.shapes if facts is not None else None
    if facts is None or shapes is None or len(facts.slots) != graph.n:
        return graph, facts
    blocks = find_attention_blocks(graph, facts)
    native = sum(1 for op in graph.ops if op in NATIVE_OPS)
    mem = graph.mem.tolist()
    prob_bytes = sum(mem[b.softmax] for b in blocks)
    afacts = AttentionFacts(mode=mode, blocks=len(blocks), native_ops=native, probability_bytes=int(prob_bytes))
    if mode == "unfused" or not blocks:
        return _with_attention(graph, afacts), facts
    return _fused(graph, facts, shapes, blocks, afacts)


def _with_attention(graph: Graph, afacts: AttentionFacts) -> Graph:
    """``graph`` with the facts in its meta (and a line of ``remat info``)."""
    meta = dict(graph.meta)
    info = dict(meta.get("info") or {})
    info["attention"] = to_data(afacts.phrase())
    meta["info"] = info
    meta["attention"] = dataclasses.asdict(afacts)
    return dataclasses.replace(graph, meta=meta)


def _fused(graph: Graph, facts: ForwardFacts, shapes: Any, blocks: list[_Block], afacts: AttentionFacts) -> tuple[Graph, ForwardFacts]:
    """Rebuild the forward graph with each block's nodes replaced by one fused node placed
    where the block's output MatMul was (its inputs all come earlier: indices are topological)."""
    n = graph.n
    owner = [-1] * n  # node -> block index
    for k, b in enumerate(blocks):
        for v in b.members:
            owner[v] = k
    last = {b.members[-1]: k for k, b in enumerate(blocks)}
    keep = [v for v in range(n) if owner[v] < 0 or v in last]
    new = [-1] * n
    for i, v in enumerate(keep):
        new[v] = i
    for b in blocks:
        for v in b.members:
            new[v] = new[b.members[-1]]

    ids, ops = graph.ids, graph.ops
    used = set(ids)
    f_mem = graph.mem.tolist()
    f_ws = graph.workspace.tolist()
    flops, nbytes, peak = facts.flops, facts.nbytes, facts.peak
    out = {key: [] for key in ("ids", "ops", "mem", "ws", "flops", "nbytes", "peak", "slots", "float", "gsrc", "pbytes", "stats", "shape")}
    src: list[int] = []
    dst: list[int] = []
    preds = graph.pred_lists
    for i, v in enumerate(keep):
        k = last.get(v)
        if k is None:
            sl = tuple(new[u] if u >= 0 else u for u in facts.slots[v])
            ps = list(dict.fromkeys(new[u] for u in preds[v]))
            row = (
                ids[v],
                ops[v],
                f_mem[v],
                f_ws[v],
                flops[v],
                nbytes[v],
                peak[v],
                sl,
                bool(facts.float_out[v]),
                bool(facts.grad_source[v]),
                int(facts.param_bytes[v]),
                int(facts.stats_bytes[v]),
                shapes[v],
            )
        else:
            b = blocks[k]
            m = list(b.members)
            lse = _lse_bytes(shapes[b.softmax], f_mem[b.softmax])
            value = f_mem[v] + lse
            sl = tuple(new[u] for u in b.inputs)
            ps = list(dict.fromkeys(sl))
            node_id = f"attention:{ids[v]}"
            while node_id in used:
                node_id += "'"
            used.add(node_id)
            reads = float(sum(f_mem[u] for u in b.inputs))
            row = (
                node_id,
                "Attention",
                value,
                0,
                float(flops[m].sum()),
                reads + value,
                float(peak[m[0]]),
                sl,
                True,
                bool(facts.grad_source[m].any()),
                int(facts.param_bytes[m].sum()),
                0,
                shapes[v],
            )
        for key, val in zip(out, row):
            out[key].append(val)
        for u in ps:
            src.append(u)
            dst.append(i)
    fl = np.asarray(out["flops"], dtype=np.float64)
    nb = np.asarray(out["nbytes"], dtype=np.float64)
    pk = np.asarray(out["peak"], dtype=np.float64)
    seconds = roofline_seconds(fl, nb, pk, facts.bandwidth)
    # a fused node runs in its output MatMul's dtype and only its output follows --precision
    # (the logsumexp statistic stays fp32)
    dtypes = None if facts.dtypes is None else tuple(facts.dtypes[v] for v in keep)
    fb = facts.float_bytes
    new_facts = ForwardFacts(
        slots=tuple(out["slots"]),
        float_out=np.asarray(out["float"], dtype=bool),
        grad_source=np.asarray(out["gsrc"], dtype=bool),
        param_bytes=np.asarray(out["pbytes"], dtype=np.int64),
        stats_bytes=np.asarray(out["stats"], dtype=np.int64),
        flops=fl,
        nbytes=nb,
        peak=pk,
        bandwidth=facts.bandwidth,
        cost_kind=facts.cost_kind,
        dtypes=dtypes,
        float_bytes=None if fb is None else tuple(f_mem[v] if v in last else fb[v] for v in keep),
        shapes=tuple(out["shape"]),
    )
    cost = new_facts.cost(fl, nb, np.ones(len(keep)), seconds)
    meta = dict(graph.meta)
    meta["forward_flops"] = float(fl.sum())
    fused = Graph.from_arrays(
        ids=out["ids"],
        ops=out["ops"],
        kinds=["forward"] * len(keep),
        mem=np.asarray(out["mem"], dtype=np.int64),
        cost=cost,
        workspace=np.asarray(out["ws"], dtype=np.int64),
        src=np.asarray(src, dtype=np.int64),
        dst=np.asarray(dst, dtype=np.int64),
        targets=sorted({new[int(t)] for t in graph.targets}),
        fixed_mem=graph.fixed_mem,
        cost_unit=graph.cost_unit,
        seconds=seconds if graph.seconds is not None else None,
        name=graph.name,
        source=graph.meta.get("source", graph.name) if isinstance(graph.meta.get("source"), str) else graph.name,
        meta=meta,
    )
    return _with_attention(fused, afacts), new_facts


def _lse_bytes(softmax_shape: Any, softmax_bytes: int) -> int:
    """Bytes of the fp32 logsumexp: one per row of the scores (all axes but the last)."""
    if softmax_shape:
        rows = 1
        for d in softmax_shape[:-1]:
            rows *= int(d)
        return rows * _LSE_BYTES
    return 0 if softmax_bytes == 0 else max(_LSE_BYTES, softmax_bytes // 64)  # unknown shape: a guess
