"""The executor shared by capture and apply: one core-ATen program run op by op.

``torch.export`` turns (model, loss) into a functional core-ATen FX graph. The executor
runs it one op at a time: every op that allocates (an *owner*) reads detached copies of
its inputs as autograd leaves, so each op has its own one-node autograd graph, and the
backward pass is driven by us, op by op, in whatever order the schedule says — autograd
never chooses the order. Views (``permute``, ``view``, ``getitem`` …) are not steps:
they are rebuilt from their base whenever needed and keep their base alive, which is how
PyTorch's storage sharing works. Saved tensors go through ``saved_tensors_hooks``: a
saved activation is kept as (owner node, view geometry), never as a reference, so its
memory lives exactly as long as the schedule keeps its owner resident.

Private module: :mod:`remat_cli.torch.capture` and :mod:`remat_cli.torch.apply` are the
public faces.
"""

from __future__ import annotations

import operator
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.graph import GradientEdge, get_gradient_edge, saved_tensors_hooks
from torch.fx.node import map_arg
from torch.utils._python_dispatch import TorchDispatchMode

from remat_cli.errors import InputError

_EMPTY_CACHE: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


# ---------------------------------------------------------------- measuring ops
def _flop_formulas() -> dict[Any, Callable[..., int]]:
    from torch.utils.flop_counter import FlopCounterMode

    return dict(FlopCounterMode(display=False).flop_registry)


class Tracker(TorchDispatchMode):
    """Counts FLOPs and live storage bytes of every op dispatched while active.

    FLOPs: ``torch.utils.flop_counter``'s formulas for matmul, convolution and attention
    ops, one per output element for every other op that is not a view. Memory: each new
    storage an op returns is registered with a ``weakref.finalize`` that subtracts it
    when the storage dies (also while autograd holds it); storages in ``ignore`` (fixed
    memory that existed before) are never counted. Kernel scratch memory is invisible.
    """

    def __init__(self, ignore: Sequence[torch.Tensor] = ()) -> None:
        super().__init__()
        self.flops = 0
        self.live = 0
        self.peak = 0
        self._seen: set[int] = {_ptr(t) for t in ignore if isinstance(t, torch.Tensor)}
        self._formulas = _flop_formulas()

    def mark(self) -> int:
        """Reset the running peak to the current live bytes; returns them."""
        self.peak = self.live
        return self.live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self._formulas.get(func._overloadpacket)
        tensors = [t for t in _flat(out) if isinstance(t, torch.Tensor)]
        if formula is not None:
            self.flops += int(formula(*args, **kwargs, out_val=out))
        elif not getattr(func, "is_view", False):
            self.flops += sum(t.numel() for t in tensors if t.is_floating_point())
        for t in tensors:
            self._register(t)
        return out

    def _register(self, t: torch.Tensor) -> None:
        if t.layout != torch.strided or t.device.type == "meta":
            return
        st = t.untyped_storage()
        key = st.data_ptr()
        nbytes = st.nbytes()
        if key in self._seen or nbytes == 0 or t.device.type == "meta":
            return
        self._seen.add(key)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(st, self._died, key, nbytes)

    def _died(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _flat(x: Any) -> list[Any]:
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in _flat(item)]
    return [x]


def _empty_like_meta(t: torch.Tensor) -> torch.Tensor:
    key = (t.dtype, t.device)
    if key not in _EMPTY_CACHE:
        _EMPTY_CACHE[key] = torch.empty(0, dtype=t.dtype, device=t.device)
    return _EMPTY_CACHE[key]


# ---------------------------------------------------------------- the program
class _LossModule(torch.nn.Module):
    """model + loss as one module, so export sees the loss ops too."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable[..., Any] | None) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *inputs: Any) -> torch.Tensor:
        out = self.model(*inputs)
        if self.loss_fn is not None:
            return self.loss_fn(out)
        flat = [t for t in _flat(out.values() if isinstance(out, dict) else out) if isinstance(t, torch.Tensor)]
        loss = flat[0].sum()
        for t in flat[1:]:
            loss = loss + t.sum()
        return loss


@dataclass
class Program:
    """A model's training step as a functional core-ATen FX graph and its fixed tensors."""

    module: _LossModule
    gm: torch.fx.GraphModule
    ops: list[torch.fx.Node]  # call_function nodes in program order
    fixed: dict[str, torch.Tensor]  # placeholder name -> parameter / buffer / constant
    user_inputs: list[str]  # placeholder names of the step's inputs, in order
    buffer_updates: dict[str, str]  # output node name -> buffer target it overwrites
    loss: torch.fx.Node
    by_name: dict[str, torch.fx.Node] = field(default_factory=dict)


def export_program(model: torch.nn.Module, inputs: Sequence[Any], loss_fn: Callable[..., Any] | None, where: str) -> Program:
    """``torch.export`` (model, loss) to core ATen; refusals become one-line InputErrors."""
    wrapper = _LossModule(model, loss_fn)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(wrapper, tuple(inputs)).run_decompositions()
    except Exception as exc:  # export raises many types; all mean "cannot capture"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(
            f"{where}: torch.export cannot capture the model (data-dependent control flow or an "
            f"unsupported op?): {type(exc).__name__}: {first[:200]}"
        ) from None
    gm = ep.graph_module
    sig = ep.graph_signature
    from torch.export.graph_signature import InputKind, OutputKind

    fixed: dict[str, torch.Tensor] = {}
    user: list[str] = []
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.PARAMETER:
            fixed[name] = wrapper.get_parameter(spec.target)
        elif spec.kind == InputKind.BUFFER:
            fixed[name] = wrapper.get_buffer(spec.target)
        elif spec.kind in (InputKind.CONSTANT_TENSOR,):
            fixed[name] = ep.constants[spec.target]
        elif spec.kind == InputKind.USER_INPUT:
            user.append(name)
        else:
            raise InputError(f"{where}: unsupported exported input kind {spec.kind.name} ({name})")
    updates: dict[str, str] = {}
    loss_name = None
    for spec in sig.output_specs:
        if spec.kind == OutputKind.BUFFER_MUTATION:
            updates[spec.arg.name] = spec.target
        elif spec.kind == OutputKind.USER_OUTPUT:
            loss_name = spec.arg.name
        else:
            raise InputError(f"{where}: the model mutates something export calls {spec.kind.name}; not supported")
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    for n in ops:
        schema = getattr(n.target, "_schema", None)
        if schema is not None and schema.is_mutable:
            raise InputError(f"{where}: node {n.name!r}: in-place op {n.target} in the exported program; not supported")
    by_name = {n.name: n for n in gm.graph.nodes}
    if loss_name is None or loss_name not in by_name or by_name[loss_name].op != "call_function":
        raise InputError(f"{where}: the loss is not computed by the model (is it a constant?)")
    return Program(wrapper, gm, ops, fixed, user, updates, by_name[loss_name], by_name)


# ---------------------------------------------------------------- per-op recipes
# How an op's local input is obtained (see _Recipe.steps).
_INPUT, _FIXED, _OWNER, _ITEM, _GETITEM, _VIEW = range(6)


@dataclass(frozen=True)
class _Recipe:
    """What running owner op ``node`` needs, worked out once per program, not per step.

    ``steps`` lists every node the op's arguments are built from, bases before the views
    of them, as (node, how, name or index): a step input, a fixed tensor, an owner's value
    (``_OWNER``) or one output of a multi-output owner (``_ITEM``), an item of a local
    tuple (``_GETITEM``), or a view rebuilt from its local base (``_VIEW``).
    """

    node: torch.fx.Node
    call: Callable[..., Any]  # the op itself, without OpOverload's Python wrapper
    steps: tuple[tuple[torch.fx.Node, int, Any], ...]
    random: bool
    updates: tuple[tuple[str, int], ...]  # (output node, index): buffer updates it produces
    consumers: tuple[str, ...]  # owner ops (and ``loss``) that read it


def recipes(prog: Program) -> dict[str, _Recipe]:
    """One :class:`_Recipe` per owner op of ``prog`` (cached on the program)."""
    cached = prog.__dict__.get("_recipes")
    if cached is not None:
        return cached
    cons = consumers(prog)
    out: dict[str, _Recipe] = {}
    for n in prog.ops:
        if not is_owner(n):
            continue
        steps: list[tuple[torch.fx.Node, int, Any]] = []
        seen: set[torch.fx.Node] = set()

        def visit(a: torch.fx.Node) -> None:
            if a in seen:
                return
            seen.add(a)
            if a.op == "placeholder":
                steps.append((a, _INPUT if a.name in prog.user_inputs else _FIXED, a.name))
            elif is_owner(a):
                steps.append((a, _OWNER, a.name))
            elif a.target is operator.getitem and is_owner(a.args[0]):
                steps.append((a, _ITEM, (a.args[0].name, a.args[1])))
            elif a.target is operator.getitem:
                visit(a.args[0])
                steps.append((a, _GETITEM, a.args[1]))
            else:
                for b in a.all_input_nodes:
                    visit(b)
                steps.append((a, _VIEW, _fast(a.target)))

        for a in n.all_input_nodes:
            visit(a)
        updates = tuple((u.name, u.args[1]) for u in n.users if u.target is operator.getitem and u.name in prog.buffer_updates)
        out[n.name] = _Recipe(n, _fast(n.target), tuple(steps), _is_random(n), updates, tuple(sorted(cons[n.name])))
    prog.__dict__["_recipes"] = out
    return out


@dataclass(frozen=True)
class _Static:
    """Per-program facts every step's :class:`Executor` reads (:func:`_static`)."""

    consumers: dict[str, tuple[str, ...]]  # owner op -> the ops (and ``loss``) that read it
    split: dict[str, tuple[str, tuple[int, ...]]]  # op X -> (X.stats, statistics outputs)
    fixed_ptrs: frozenset[int]  # storages of parameters, buffers and constants
    buffers: tuple[tuple[str, torch.fx.Node, torch.Tensor], ...]  # (output, its node, buffer it overwrites)


def _static(prog: Program) -> _Static:
    """:class:`_Static` for ``prog``, built on the first step and cached on the program
    (parameters and buffers are updated in place, as optimizers and ``finish`` do, so
    their storages stay those of the first step)."""
    cached = prog.__dict__.get("_static")
    if cached is None:
        rs = recipes(prog)
        cached = prog.__dict__["_static"] = _Static(
            {name: r.consumers for name, r in rs.items()},
            {owner: (name, idx) for name, (owner, idx) in stats_nodes(prog).items()},
            frozenset(_ptr(t) for t in prog.fixed.values() if isinstance(t, torch.Tensor) and t.numel()),
            tuple((o, prog.by_name[o], prog.module.get_buffer(t)) for o, t in prog.buffer_updates.items()),
        )
    return cached


# ---------------------------------------------------------------- statistics nodes
STATS = ".stats"

_aten = torch.ops.aten
# Multi-output ops whose gradient step reads small outputs (a norm's per-channel or
# per-row statistics, dropout's one-byte mask) but not the big main output: their indices.
_STAT_OUTPUTS: dict[Any, tuple[int, ...]] = {
    _aten._native_batch_norm_legit_functional.default: (1, 2),
    _aten.native_layer_norm.default: (1, 2),
    _aten.native_group_norm.default: (1, 2),
    _aten.native_dropout.default: (1,),
}


def stats_nodes(prog: Program) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``X.stats`` -> (X, output indices) for every normalization or dropout op X of ``prog``.

    A remat node is one storage-owning value, so a five-output BatchNorm would keep its
    normalized output resident for the 128 bytes of statistics its gradient step reads
    (and dropout its output for the mask). ``X.stats`` is a copy of those outputs (a
    cheap op of its own, read by ``bwd:X`` instead of X), so a plan can free X after its
    last forward reader, as eager PyTorch does. Recomputing ``X.stats`` needs X
    resident, so it recomputes the op if X is gone.
    """
    cached = prog.__dict__.get("_stats")
    if cached is None:
        cached = {}
        for n in prog.ops:
            idx = _STAT_OUTPUTS.get(n.target)
            if idx is not None:
                cached[n.name + STATS] = (n.name, idx)
        prog.__dict__["_stats"] = cached
    return cached


# ---------------------------------------------------------------- saved tensors
class _Saved:
    """What a pack hook keeps: a fixed tensor, or (owner, output index, geometry)."""

    __slots__ = ("tensor", "owner", "index", "size", "stride", "offset", "ptr")

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor: torch.Tensor | None = t  # geometry is filled in once the owner is known
        self.owner: str | None = None
        self.index: int | None = None
        self.ptr = t.untyped_storage().data_ptr() if t.numel() else 0

    def resolve(self, owner: str, index: int | None) -> None:
        """Keep (owner, geometry) instead of the tensor, so the memory can die with the owner."""
        t = self.tensor
        assert t is not None
        self.size = t.size()
        self.stride = t.stride()
        self.offset = t.storage_offset()
        self.owner, self.index, self.tensor = owner, index, None


# ---------------------------------------------------------------- the executor
class Executor:
    """Runs a :class:`Program` one op at a time, forward and backward, as told.

    ``compute(name)`` / ``free(name)`` for owner ops, ``backward(name)`` for the op's
    gradient step, ``free_backward(name)`` to drop the gradients it produced. Values of
    owners that are not resident when needed are recomputed on demand and counted in
    :attr:`fallbacks`. Per-op work that does not depend on the step (which inputs are
    views of what, consumers, random ops) is done once per program (:func:`recipes`):
    the executor's own time per op is what a training step pays on top of eager PyTorch.
    """

    def __init__(self, prog: Program, inputs: Sequence[torch.Tensor]) -> None:
        self.prog = prog
        self.inputs = dict(zip(prog.user_inputs, inputs))
        self.env: dict[str, Any] = {}  # owner name -> detached value (tensor or tuple)
        self.requires: dict[str, Any] = {}  # owner name -> bool or tuple of bools
        self.edges: dict[str, tuple[bool, list[tuple[int, Any]], list[tuple[Any, torch.Tensor]], list[tuple[Any, torch.Tensor]]]] = {}
        self.rng: dict[str, Any] = {}
        self.grads: dict[str, dict[Any, torch.Tensor]] = {}  # bwd(name) -> {(owner, idx): grad}
        self.updates: dict[str, torch.Tensor] = {}
        self.fallbacks = 0
        self.fallback_nodes: list[str] = []
        self._fallback_held: set[str] = set()
        self.recipes = recipes(prog)
        self._direct_ok: dict[str, bool] = prog.__dict__.setdefault("_direct", {})
        self._expect: dict[Any, list[tuple[torch.dtype, torch.Size]]] = prog.__dict__.setdefault("_expect", {})
        self.hooked = False  # True while the caller holds saving() for the whole step
        static = _static(prog)  # what does not change between steps, worked out once
        self.consumers = static.consumers
        self.done_forward: set[str] = set()
        self.done_backward: set[str] = set()
        self.saved_by: dict[str, list[_Saved]] = {}
        self._pending: list[_Saved] = []
        self.untracked_saved = 0
        self._fixed_of_program = static.fixed_ptrs
        self._fixed_ptrs_now: set[int] | None = None  # with the inputs', when a pack hook needs it
        self._buffers = static.buffers
        self._stats = stats_nodes(prog)  # X.stats -> (X, statistics output indices)
        self._split = static.split
        # fused runs (compute_fused / backward_fused): outputs with their autograd history
        # while the forward stretch lasts, and per op what its gradient step needs
        self.live: dict[str, torch.Tensor] = {}
        self.fused: dict[str, tuple[Any, dict[Any, Any], dict[int, Any], tuple[str, int | None]]] = {}
        self._trees: dict[str, bool] = prog.__dict__.setdefault("_fused_trees", {})

    # -------------------------------------------------- values
    is_owner = staticmethod(lambda n: is_owner(n))

    def value(self, n: torch.fx.Node) -> Any:
        """The current value of any node, without autograd (views rebuilt from bases)."""
        if n.op == "placeholder":
            return self.inputs[n.name] if n.name in self.inputs else self.prog.fixed[n.name]
        if self.is_owner(n):
            if n.name not in self.env:
                self._fallback(n.name)
            return self.env[n.name]
        args, kwargs = self._args(n, self.value)
        with torch.no_grad():
            return n.target(*args, **kwargs)

    def _args(self, n: torch.fx.Node, get: Callable[[torch.fx.Node], Any]) -> tuple[Any, Any]:
        args = torch.fx.node.map_arg(n.args, get)
        kwargs = torch.fx.node.map_arg(n.kwargs, get)
        return args, kwargs

    def _owned(self, name: str) -> Any:
        v = self.env.get(name)
        if v is None:
            self._fallback(name)
            v = self.env[name]
        return v

    # -------------------------------------------------- forward
    def compute(self, name: str) -> None:
        """Compute owner op ``name``: with autograd the first time, plain after that.

        The first time, each input produced by another op is a fresh autograd leaf (a
        detached alias of the owner's value), so the op gets its own one-op autograd
        graph; views of inputs are rebuilt from those leaves under autograd.
        """
        if name in self._stats:
            self._copy_stats(name)
            if self._fallback_held:
                self.release_fallbacks()
            return
        if name in self.done_forward:
            self._recompute(self.prog.by_name[name])
            return
        r = self.recipes[name]
        n = r.node
        if r.random:
            self.rng[name] = _rng_state(self._device())
        leaves: list[tuple[Any, torch.Tensor]] = []
        params: list[tuple[Any, torch.Tensor]] = []
        owned: list[tuple[tuple[str, int | None], torch.Tensor]] = []
        memo: dict[torch.fx.Node, Any] = {}
        requires = self.requires
        self._pending = []
        for a, how, what in r.steps:
            if how == _OWNER or how == _ITEM:
                if how == _OWNER:
                    key = (what, None)
                    t = self._owned(what)
                    req = requires[what]
                else:
                    key = what
                    t = self._owned(what[0])[what[1]]
                    req = requires[what[0]][what[1]]
                if req:
                    v = t.detach().requires_grad_(True)
                    leaves.append((key, v))
                else:
                    v = t
                if isinstance(v, torch.Tensor):
                    owned.append((key, v))
            elif how == _FIXED:
                v = self.prog.fixed[what]
                if v.requires_grad:
                    params.append((("param", what), v))
            elif how == _INPUT:
                v = self.inputs[what]
            elif how == _GETITEM:
                v = memo[a.args[0]][what]
            else:  # a view of something: rebuilt under autograd from its local base
                v = what(*map_arg(a.args, memo.__getitem__), **map_arg(a.kwargs, memo.__getitem__))
            memo[a] = v
        if self.hooked:
            out = r.call(*map_arg(n.args, memo.__getitem__), **map_arg(n.kwargs, memo.__getitem__))
        else:
            with self.saving():
                out = r.call(*map_arg(n.args, memo.__getitem__), **map_arg(n.kwargs, memo.__getitem__))
        memo.clear()
        multi = isinstance(out, (tuple, list))
        outs = tuple(out) if multi else (out,)
        self._resolve_pending(name, owned, outs, multi)
        del owned
        req = tuple(isinstance(t, torch.Tensor) and t.requires_grad for t in outs)
        edges = [(i, _edge(t)) for i, t in enumerate(outs) if req[i]]
        self.edges[name] = (multi, edges, leaves, params)
        for _key, v in leaves:  # the leaf must not keep its storage alive
            v.data = _empty_like_meta(v)
        det = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in outs)
        del out, outs
        if multi:
            self.env[name] = det
            self.requires[name] = req
        else:
            self.env[name] = det[0]
            self.requires[name] = req[0]
        for user, idx in r.updates:  # buffer updates (BatchNorm running stats) are applied at the end
            self.updates[user] = det[idx]
        self.done_forward.add(name)
        if self._fallback_held:
            self.release_fallbacks()

    def compute_fused(self, name: str, saves: frozenset[str] | None) -> None:
        """First computation of op ``name`` inside a fused run (one output, or a norm's or
        dropout's several of which only the first is differentiable).

        Inputs computed earlier in the same forward stretch (:attr:`live`) are read with
        their autograd history, so consecutive ops form one autograd graph and autograd
        holds what they save (no pack hooks, no detached leaves between them). Only
        inputs from outside the run become leaves; a leaf whose value the op does not
        save (``saves``: the owners its gradient step reads) is emptied, so it keeps
        no storage alive. The caller guarantees what makes this exact: the op is
        computed with autograd once, its gradient step runs once, and the plan keeps
        every value in ``saves`` resident until then, which is how long autograd holds it.
        With ``saves`` None the plan does not keep them: the op runs under the pack hooks
        the caller holds (saved tensors become handles, as for a one-op graph) and every
        leaf is emptied.
        """
        r = self.recipes[name]
        n = r.node
        if r.random and name not in self.rng:
            self.rng[name] = _rng_state(self._device())
        # An op whose autograd graph is not a tree (attention's views of one split) goes
        # through the engine, which walks everything reachable from the op: that would be
        # the whole run. Once that is known (the first step), its in-run inputs become
        # leaves as inputs from outside the run do, so the engine sees the op alone.
        live = self.live if self._trees.get(name) is not False else {}
        requires = self.requires
        stops: dict[Any, Any] = {}  # grad_fn of an in-run input -> its owner key
        leaves: dict[int, Any] = {}  # id(leaf or parameter) -> its key
        empty: list[torch.Tensor] = []
        owned: list[tuple[tuple[str, int | None], torch.Tensor]] = []  # for handles
        hooked = saves is None
        if hooked:
            saves = frozenset()
            self._pending = []
        memo: dict[torch.fx.Node, Any] = {}
        for a, how, what in r.steps:
            if how == _OWNER:
                v = live.get(what)
                if v is not None:
                    if v.grad_fn is not None:
                        stops[v.grad_fn] = (what, None)
                else:
                    v = self._owned(what)
                    if requires[what]:
                        v = v.detach().requires_grad_(True)
                        leaves[id(v)] = ((what, None), v)
                        if what not in saves:
                            empty.append(v)
                if hooked:
                    owned.append(((what, None), v))
            elif how == _ITEM:
                owner, idx = what
                got = live.get(owner)
                if got is not None and got[idx].grad_fn is not None:
                    v = got[idx]  # the differentiable output of a fused norm or dropout
                    stops[v.grad_fn] = what
                else:
                    v = self._owned(owner)[idx]
                    if requires[owner][idx]:
                        v = v.detach().requires_grad_(True)
                        leaves[id(v)] = (what, v)
                        if owner not in saves:
                            empty.append(v)
                if hooked and isinstance(v, torch.Tensor):
                    owned.append((what, v))
            elif how == _FIXED:
                v = self.prog.fixed[what]
                if v.requires_grad:
                    leaves[id(v)] = (("param", what), v)
            elif how == _INPUT:
                v = self.inputs[what]
            elif how == _GETITEM:
                v = memo[a.args[0]][what]
            else:
                v = what(*map_arg(a.args, memo.__getitem__), **map_arg(a.kwargs, memo.__getitem__))
            memo[a] = v
        out = r.call(*map_arg(n.args, memo.__getitem__), **map_arg(n.kwargs, memo.__getitem__))
        memo.clear()
        multi = isinstance(out, (tuple, list))
        if multi:  # a norm or dropout: only output 0 is differentiable
            out = tuple(out)
            main = out[0]
            req = main.requires_grad
            det = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in out)
            self.env[name] = det
            requires[name] = (req,) + (False,) * (len(out) - 1)
            for user, idx in r.updates:  # buffer updates (BatchNorm running stats), applied at the end
                self.updates[user] = det[idx]
        else:
            main = out
            req = out.requires_grad
            self.env[name] = out.detach()
            requires[name] = req
        if hooked:
            self._resolve_pending(name, owned, out if multi else (out,), multi)
            del owned
        for v in empty:  # autograd does not save it: the leaf must not keep its storage
            v.data = _empty_like_meta(v)
        self.fused[name] = (main.grad_fn if req else None, stops, leaves, (name, 0 if multi else None))
        if req:
            self.live[name] = out
        self.done_forward.add(name)
        if self._fallback_held:
            self.release_fallbacks()

    def compute_plain(self, name: str) -> None:
        """A computation of a fused op before the one that records its autograd graph:
        no autograd, as a recomputation (its first output needs gradients, others do not)."""
        r = self.recipes[name]
        if r.random and name not in self.rng:
            self.rng[name] = _rng_state(self._device())
        self._recompute(r.node)
        out = self.env[name]  # one output, or a norm's several with only the first differentiable
        self.requires[name] = (True,) + (False,) * (len(out) - 1) if isinstance(out, tuple) else True
        self.done_forward.add(name)
        if self._fallback_held:
            self.release_fallbacks()

    def backward_fused(self, name: str) -> None:
        """Gradient step of an op computed by :meth:`compute_fused`: its autograd nodes
        are called directly down to the in-run ops it read (whose gradients it leaves,
        as a one-op step would), the leaves and the parameters. Then the op's nodes are
        dropped, and with them what autograd saved for it."""
        fn, stops, leaves, key = self.fused.pop(name)
        self.live.clear()  # the forward stretch is over: no history may outlive its step
        grads = self.grads
        g = None
        for c in self.consumers[name]:
            got = grads.get(c)
            if got:
                gc = got.get(key)
                if gc is not None:
                    g = gc if g is None else g + gc
        produced: dict[Any, torch.Tensor] = {}
        self.done_backward.add(name)
        if g is not None and fn is not None:
            tree = self._trees.get(name)
            if tree is None:
                tree = self._trees[name] = _is_tree_above(fn, stops)
            if tree:
                expect = self._expect.get(name)
                if expect is None:
                    expect = self._expect[name] = []
                _walk_grad(fn, g, stops, leaves, produced, self.prog.fixed, expect)
            else:
                self._engine_fused(fn, g, stops, leaves, produced)
        del fn, stops, leaves, g
        grads[name] = produced
        if self._fallback_held:
            self.release_fallbacks()

    def _engine_fused(
        self, fn: Any, g: torch.Tensor, stops: dict[Any, Any], leaves: dict[int, Any], produced: dict[Any, torch.Tensor]
    ) -> None:
        """:meth:`backward_fused` through the engine, for graphs that are not trees."""
        keys = [k for k in stops.values()] + [k for k, _ in leaves.values()]
        ins = [GradientEdge(f, 0) for f in stops] + [t for _, t in leaves.values()]
        got = _grad([GradientEdge(fn, 0)], [g], ins)
        for k, gk in zip(keys, got):
            if gk is not None and not _add_param_grad(self.prog.fixed, k, gk):
                produced[k] = gk if k not in produced else produced[k] + gk

    def _recompute(self, n: torch.fx.Node) -> None:
        r = self.recipes[n.name]
        memo: dict[torch.fx.Node, Any] = {}
        with torch.no_grad():
            for a, how, what in r.steps:
                if how == _OWNER:
                    v = self._owned(what)
                elif how == _ITEM:
                    v = self._owned(what[0])[what[1]]
                elif how == _FIXED:
                    v = self.prog.fixed[what]
                elif how == _INPUT:
                    v = self.inputs[what]
                elif how == _GETITEM:
                    v = memo[a.args[0]][what]
                else:
                    v = what(*map_arg(a.args, memo.__getitem__), **map_arg(a.kwargs, memo.__getitem__))
                memo[a] = v
            with _rng_restored(self.rng.get(n.name), self._device()):
                out = r.call(*map_arg(n.args, memo.__getitem__), **map_arg(n.kwargs, memo.__getitem__))
        memo.clear()
        self.env[n.name] = tuple(out) if isinstance(out, (tuple, list)) else out

    def _copy_stats(self, name: str) -> None:
        """Compute statistics node ``X.stats``: copies of X's statistics outputs (None in
        the other places, so that output indices stay those of X)."""
        owner, idx = self._stats[name]
        base = self._owned(owner)
        with torch.no_grad():
            self.env[name] = tuple(t.clone() if i in idx else None for i, t in enumerate(base))
        if name not in self.done_forward:
            self.done_forward.add(name)
            self.edges[name] = (False, [], [], [])
            self.requires[name] = False

    def free(self, name: str) -> None:
        self.env.pop(name, None)
        self.live.pop(name, None)

    def _fallback(self, name: str) -> None:
        """A value the schedule does not hold is needed: recompute it (counted)."""
        self.fallbacks += 1
        self.fallback_nodes.append(name)
        if name not in self.done_forward:
            raise RuntimeError(f"internal error: {name} is needed before its first computation")
        if name in self._stats:
            self._copy_stats(name)
        else:
            self._recompute(self.prog.by_name[name])
        self._fallback_held.add(name)

    def release_fallbacks(self) -> None:
        """Drop values recomputed on demand once the op that needed them has run."""
        for name in self._fallback_held:
            self.env.pop(name, None)
        self._fallback_held = set()

    # -------------------------------------------------- saved tensors
    def saving(self) -> saved_tensors_hooks:
        """The saved-tensor hooks every first computation runs under. A caller that runs
        a whole step may enter them once around it (and set :attr:`hooked`) rather than
        once per op: only first computations record autograd graphs, so only they pack."""
        return saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: torch.Tensor) -> _Saved:
        s = _Saved(t)
        self._pending.append(s)
        return s

    def _resolve_pending(
        self, name: str, owned: list[tuple[tuple[str, int | None], torch.Tensor]], outs: Sequence[Any], multi: bool
    ) -> None:
        """Turn what op ``name`` saved into (owner, geometry) handles, dropping references.

        An op can only save its inputs, its outputs or fixed tensors, so the owners are
        looked up among those.
        """
        saved = self._pending
        self._pending = []
        self.saved_by[name] = saved
        if not saved:
            return
        fixed_ptrs = self._fixed_ptrs_now
        if fixed_ptrs is None:
            ins = {_ptr(t) for t in self.inputs.values() if isinstance(t, torch.Tensor) and t.numel()}
            fixed_ptrs = self._fixed_ptrs_now = self._fixed_of_program | ins
        owners: dict[int, tuple[str, int | None]] = {}
        for key, t in owned:
            if t.numel():
                owners[_ptr(t)] = key
        split = self._split.get(name)
        for i, t in enumerate(outs):
            if isinstance(t, torch.Tensor) and t.numel():
                if split is not None and i in split[1]:
                    owners[_ptr(t)] = (split[0], i)  # saved statistics are read from X.stats
                else:
                    owners[_ptr(t)] = (name, i if multi else None)
        for s in saved:
            if s.ptr == 0 or s.ptr in fixed_ptrs:
                continue  # fixed memory (or empty): keep the reference
            owner = owners.get(s.ptr)
            if owner is None:
                assert s.tensor is not None
                self.untracked_saved += s.tensor.untyped_storage().nbytes()
                continue
            s.resolve(*owner)

    def _unpack(self, s: _Saved) -> torch.Tensor:
        if s.tensor is not None:
            return s.tensor
        assert s.owner is not None
        base = self.env.get(s.owner)
        if base is None:
            self._fallback(s.owner)
            base = self.env[s.owner]
        if s.index is not None:
            base = base[s.index]
        return torch.as_strided(base, s.size, s.stride, s.offset)

    # -------------------------------------------------- backward
    def seed(self) -> torch.Tensor:
        """Start the backward pass: d loss / d loss = 1. Returns the loss value."""
        self.live.clear()
        loss = self.value(self.prog.loss)
        self.grads["loss"] = {owner_of(self.prog.loss): torch.ones_like(loss)}
        return loss

    def backward(self, name: str) -> None:
        """Gradient step of owner op ``name``: reads the output gradients its consumers'
        gradient steps (or the loss) produced, leaves its inputs' gradients."""
        if self.live:
            self.live.clear()
        multi, edges, leaves, params = self.edges[name]  # kept: a plan may recompute it
        outs: dict[Any, torch.Tensor] = {}
        grads = self.grads
        for c in self.consumers[name]:
            got = grads.get(c)
            if not got:
                continue
            for key, g in got.items():
                if key[0] == name:
                    outs[key[1]] = g if key[1] not in outs else outs[key[1]] + g
        use = [(e, outs[i if multi else None]) for i, e in edges if (i if multi else None) in outs]
        again = name in self.done_backward  # a recomputation: parameters got theirs already
        self.done_backward.add(name)
        inputs = leaves if again else leaves + params
        produced: dict[Any, torch.Tensor] = {}
        if use and inputs and not again and len(use) == 1 and self._direct(name, use[0][0]):
            key = (name, tuple(k for k, _ in inputs))  # which inputs need gradients
            expect = self._expect.get(key)
            if expect is None:
                expect = self._expect[key] = []
            ends = {id(t): (k, t) for k, t in inputs}
            _walk_grad(use[0][0].node, use[0][1], {}, ends, produced, self.prog.fixed, expect)
        elif use and inputs:
            got_grads = _grad([e for e, _ in use], [g for _, g in use], [t for _, t in inputs])
            for (key, _t), g in zip(inputs, got_grads):
                if g is not None and not _add_param_grad(self.prog.fixed, key, g):
                    produced[key] = g
            del got_grads
        del outs, use
        grads[name] = produced
        if self._fallback_held:
            self.release_fallbacks()

    def _direct(self, name: str, edge: Any) -> bool:
        """Whether op ``name``'s gradient step can call its autograd nodes directly
        (:func:`_walk_grad`); decided once per program, the graph's shape is fixed."""
        ok = self._direct_ok.get(name)
        if ok is None:
            ok = self._direct_ok[name] = _is_simple_tree(edge)
        return ok

    def free_backward(self, name: str) -> None:
        self.grads.pop(name, None)

    def finish(self) -> None:
        """Apply buffer updates (BatchNorm running statistics) and drop everything."""
        with torch.no_grad():
            for out_name, n, buffer in self._buffers:
                value = self.updates.get(out_name)
                if value is None:  # e.g. num_batches_tracked + 1: an op outside the plan
                    if is_owner(n) and n.name not in self.env:
                        self._recompute(n)
                    value = self.value(n)
                buffer.copy_(value)
        self.env.clear()
        self.grads.clear()
        self.edges.clear()
        self.updates.clear()
        self.live.clear()
        self.fused.clear()

    def finish_without_updates(self) -> None:
        """Drop everything the step held, leaving buffers as they were (capture's runs)."""
        self.updates.clear()
        self.env.clear()
        self.grads.clear()
        self.edges.clear()

    def _device(self) -> torch.device:
        for t in self.inputs.values():
            if isinstance(t, torch.Tensor):
                return t.device
        return torch.device("cpu")


def _fast(target: Any) -> Callable[..., Any]:
    """The C++ callable behind an ``OpOverload`` (its ``__call__`` only forwards to it)."""
    return getattr(target, "op", target) if isinstance(target, torch._ops.OpOverload) else target


def _edge(t: torch.Tensor) -> Any:
    """The autograd edge of an op output (``get_gradient_edge`` without its checks)."""
    fn = t.grad_fn
    return GradientEdge(fn, t.output_nr) if fn is not None else get_gradient_edge(t)


def _grad(outputs: Sequence[Any], grad_outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> Any:
    """``torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True,
    retain_graph=True)``, straight to the engine when it is reachable.

    The public function re-checks and re-packs its arguments on every call; for a
    one-op graph that costs about as much as the engine itself. Shapes here come from
    autograd's own outputs, so the checks cannot fail.
    """
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    if engine is None:  # pragma: no cover - older or newer torch without it
        return torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True, retain_graph=True)
    return engine.run_backward(tuple(outputs), tuple(grad_outputs), True, False, tuple(inputs), True, False)


def _is_simple_tree(edge: Any) -> bool:
    """True when the autograd graph below ``edge`` is a tree of single-input nodes ending
    in leaves: the root is a one-output op, every node between it and the leaves (views
    rebuilt under autograd, such as ``t(weight)``) has one input and one consumer. Then a
    one-op gradient step may call its nodes directly (:func:`_walk_grad` without stops)."""
    root = edge.node
    return root is not None and edge.output_nr == 0 and _is_tree_above(root, {})


_ACCUMULATE = torch._C._functions.AccumulateGrad  # the node that ends at a leaf


def _is_tree_above(root: Any, stops: Mapping[Any, Any]) -> bool:
    """True when the autograd graph from ``root`` down to ``stops`` (nodes of other ops
    of the run) and leaves is a tree: no node between them is reached twice, every one
    of them has one input. Then :func:`_walk_grad` may call each node once, in any order."""
    if len(root._input_metadata) != 1:
        return False
    seen: list[Any] = []
    stack = [root]
    while stack:
        fn = stack.pop()
        for nxt, _nr in fn.next_functions:
            if nxt is None or type(nxt) is _ACCUMULATE or nxt in stops:
                continue
            if len(nxt._input_metadata) != 1 or any(nxt is s for s in seen):
                return False
            seen.append(nxt)
            stack.append(nxt)
    return True


def _walk_grad(
    root: Any,
    grad: torch.Tensor,
    stops: Mapping[Any, Any],
    leaves: Mapping[int, Any],
    produced: dict[Any, torch.Tensor],
    fixed: Mapping[str, torch.Tensor],
    expect: list[tuple[torch.dtype, torch.Size]],
) -> None:
    """One op's gradient step without the engine: call the op's autograd node and the
    view nodes below it, as the engine would, stopping at the nodes of other ops of a
    fused run (``stops``: their gradient goes to ``produced`` under their key) and at
    leaves (``leaves``: id -> (key, tensor); a parameter's gradient is added to its
    ``.grad``, another leaf's goes to ``produced``; a leaf not in it is not asked about).

    For a one-op graph (no stops) the engine's set-up (a graph task, dependency counts,
    capture hooks) costs more than the node itself. Only for graphs :func:`_is_tree_above`
    accepts, where every node is reached once. Each gradient is fitted to its receiver's
    dtype and shape as the engine's ``validate_outputs`` does (a bias's ``[batch, n]``
    gradient is summed to ``[n]``); ``expect`` holds those, edge by edge, filled on the
    first call for this op and set of inputs (the graph's shape does not change between
    steps) and read after that."""
    fill = not expect
    k = 0
    stack = [(root, grad)]
    enabled = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)
    try:
        while stack:
            fn, g = stack.pop()
            outs = fn(g)
            if not isinstance(outs, tuple):
                outs = (outs,)
            for (nxt, nr), go in zip(fn.next_functions, outs):
                if nxt is None:
                    continue
                if fill:
                    meta = nxt._input_metadata[nr]
                    expect.append((meta.dtype, torch.Size(meta.shape)))
                dtype, shape = expect[k]
                k += 1
                if go is None:
                    continue
                if go.dtype != dtype:
                    go = go.to(dtype)
                if go.shape != shape:
                    go = go.sum_to_size(shape)
                key = stops.get(nxt)
                if key is None and type(nxt) is _ACCUMULATE:
                    got = leaves.get(id(nxt.variable))
                    if got is None:
                        continue  # a leaf the op was not asked about
                    key = got[0]
                    if _add_param_grad(fixed, key, go):
                        continue
                if key is None:
                    stack.append((nxt, go))
                else:
                    produced[key] = go if key not in produced else produced[key] + go
    finally:
        torch._C._set_grad_enabled(enabled)


def _add_param_grad(fixed: Mapping[str, Any], key: tuple[Any, ...], g: torch.Tensor) -> bool:
    """Accumulate ``g`` into the parameter's ``.grad`` when ``key`` names a parameter
    (``("param", name)``); False for any other key (the caller keeps that gradient)."""
    if key[0] != "param":
        return False
    p = fixed[key[1]]
    if p.grad is None:
        p.grad = g
    else:
        p.grad.add_(g)
    return True


def is_owner(n: torch.fx.Node) -> bool:
    """An op that allocates its output (not a view, not a tuple getitem)."""
    return n.op == "call_function" and n.target is not operator.getitem and not _is_view(n)


def owner_of(n: torch.fx.Node) -> tuple[str, int | None] | None:
    """The owner op (and output index) whose storage ``n`` shares; None if fixed."""
    while True:
        if n.op != "call_function":
            return None
        if n.target is operator.getitem:
            base, idx = n.args
            if is_owner(base):
                return base.name, idx
            n = base
            continue
        if _is_view(n):
            n = n.args[0]
            continue
        return n.name, None


def consumers(prog: Program) -> dict[str, set[str]]:
    """Owner op -> the owner ops (and ``loss``) that read it, directly or through views."""
    out: dict[str, set[str]] = {n.name: set() for n in prog.ops if is_owner(n)}
    for n in prog.ops:
        if not is_owner(n):
            continue
        for a in _reads(n):
            own = owner_of(a)
            if own is not None:
                out[own[0]].add(n.name)
    own = owner_of(prog.loss)
    if own is not None:
        out[own[0]].add("loss")
    return out


def _reads(n: torch.fx.Node) -> list[torch.fx.Node]:
    return list(n.all_input_nodes)


def _is_view(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and getattr(n.target, "is_view", False)


def _is_random(n: torch.fx.Node) -> bool:
    tags = getattr(n.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def _rng_state(device: torch.device) -> Any:
    if device.type == "cuda":
        return ("cuda", device, torch.cuda.get_rng_state(device))
    return ("cpu", device, torch.get_rng_state())


class _rng_restored:
    """Run a recomputation of a random op with the RNG state of its first run."""

    def __init__(self, state: Any, device: torch.device) -> None:
        self.state = state
        self.device = device
        self.saved: Any = None

    def __enter__(self) -> None:
        if self.state is None:
            return
        self.saved = _rng_state(self.device)
        _set_rng(self.state)

    def __exit__(self, *exc: Any) -> None:
        if self.saved is not None:
            _set_rng(self.saved)


def _set_rng(state: Any) -> None:
    kind, device, value = state
    if kind == "cuda":
        torch.cuda.set_rng_state(value, device)
    else:
        torch.set_rng_state(value)


def now() -> float:
    return time.perf_counter()
