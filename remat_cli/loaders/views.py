"""View folding: zero-copy views share their base's storage, so they are no node of their own.

A view (``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``, ``Identity``) of a node's
value *is* that node: whoever reads the view reads the node, so keeping the view keeps
its base alive, and folding it drops no memory that is really allocated. A view of a
fixed value (a model input, a parameter, a constant) is that fixed value. The
``Transpose`` of a trainable parameter (``Linear`` exported as ``MatMul(x, Transpose(W))``)
is the parameter too: matmul kernels read it transposed, no copy is kept. Every other op,
including a ``Transpose`` of an activation, is a copy and stays a node. ``--keep-views``
turns the pass off: each view is then a node of its full size that costs nothing.

:func:`fold_views` is a pass over the ONNX reader's list of ops (in topological order),
not a graph -> graph pass over a finished :class:`~remat_cli.graph.Graph`, because the
reader's later results depend on what was folded and a finished graph no longer holds
what the fold needs:

* views of fixed values are not nodes (inputs, parameters and constants are fixed
  memory), yet which parameter a consumer reads through a view decides its parameter
  bytes and whether it has a gradient;
* a value whose shape inference failed gets its size estimated from its inputs; through
  a folded view that estimate is the base node's size, through a kept view node it is
  the view's own estimate, and the difference propagates to every later estimate;
* node ids are made unique with a ``#k`` suffix in file order among the *scheduled*
  nodes only, so a view that takes a name first would rename a later node;
* a small view of a load-time constant counts as a folded view here, and as a folded
  shape computation with ``--keep-views``.

So the reader first lists every op, the pass decides which views fold and what each
folded output shares storage with, and the reader then builds nodes for the ops that
remain (:func:`remat_cli.loaders.onnx.read_model`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["VIEW_OPS", "ReadOp", "ViewFolding", "fold_views"]

#: zero-copy ops of the default ONNX domain: their output shares their first input's storage
VIEW_OPS = frozenset(["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"])


@dataclass(frozen=True)
class ReadOp:
    """One op of the file as the pass sees it (the reader's list, in topological order)."""

    op: str  # the op type
    default: bool  # in the default ONNX domain: only those are views
    inputs: tuple[str, ...]  # as in the file ("" for an absent optional input)
    outputs: tuple[str, ...]  # the non-empty outputs
    scheduled: bool  # becomes a node unless folded here (False: a Constant, a load-time value)


@dataclass(frozen=True)
class ViewFolding:
    """Which ops were folded as views, and what each folded output shares storage with."""

    folded: frozenset[int] = frozenset()  # positions in the op list
    base: Mapping[str, str] = field(default_factory=dict)  # view output -> a scheduled op's output
    root: Mapping[str, str] = field(default_factory=dict)  # view output -> a fixed value

    @property
    def count(self) -> int:
        """How many view ops were folded."""
        return len(self.folded)


def fold_views(ops: Sequence[ReadOp], trainable: Collection[str], keep_views: bool = False) -> ViewFolding:
    """Fold the zero-copy views of ``ops`` into what they view.

    Parameters: ``ops`` in topological order; ``trainable`` the names of the trainable
    parameters (their ``Transpose`` is folded too); ``keep_views`` folds nothing.
    Returns the folded positions, and for each folded output the scheduled op's output
    (``base``) or the fixed value (``root``) it is, chains of views resolved to their end.
    Linear in the number of op inputs and outputs.
    """
    if keep_views:
        return ViewFolding()
    folded: set[int] = set()
    base: dict[str, str] = {}
    root: dict[str, str] = {}
    produced: set[str] = set()  # outputs of scheduled ops, and views of them
    for i, rop in enumerate(ops):
        if not rop.outputs:
            continue
        if rop.default and _fold(rop, trainable, produced, base, root):
            folded.add(i)
        elif rop.scheduled:
            produced.update(rop.outputs)
    return ViewFolding(frozenset(folded), base, root)


def _fold(rop: ReadOp, trainable: Collection[str], produced: set[str], base: dict[str, str], root: dict[str, str]) -> bool:
    """Record ``rop``'s outputs as views of its first input; False when it is not a view."""
    if not rop.inputs or not rop.inputs[0]:
        return False
    src = rop.inputs[0]
    if rop.op in VIEW_OPS:
        if src in produced:
            produced.update(rop.outputs)
            for o in rop.outputs:
                base[o] = base.get(src, src)
        else:
            for o in rop.outputs:
                root[o] = root.get(src, src)
        return True
    if rop.op == "Transpose" and root.get(src, src) in trainable:
        for o in rop.outputs:
            root[o] = root.get(src, src)
        return True
    return False
