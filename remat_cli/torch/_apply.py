"""Apply: a training step that follows a plan's schedule exactly (DESIGN §7).

``apply(model, plan, example_inputs, loss_fn)`` re-captures the model, checks that the
plan was made from the same thing (torch version, model, parameters, input shapes,
loss, device; then node ids), and returns a :class:`Step`. Calling it runs forward, loss
and backward one schedule step at a time: ``compute X`` runs op X (with autograd the
first time, plainly when it is a recomputation, with the RNG state of its first run for
random ops such as dropout), ``free X`` drops it, ``compute bwd:X`` runs X's gradient
step, ``free bwd:X`` drops the gradients it produced. A value the schedule does not
hold when an op needs it is recomputed on demand and counted as a *fallback*; with a
capture-made graph there should be none. Gradients accumulate into ``.grad`` as
``loss.backward()`` would; buffers (BatchNorm running statistics) are updated at the end.

``checkpoint_policy(plan)`` exports a plan's keep-set as a selective-activation-
checkpointing policy for ``torch.utils.checkpoint``; it only says which op outputs to
save, so recomputation happens per checkpoint region, not as the schedule says.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.plandoc import Plan
from remat_cli.schedule import COMPUTE, Schedule
from remat_cli.simulate import simulate
from remat_cli.torch._capture import BWD, LOSS, PARAMS, capture_program
from remat_cli.torch._runtime import STATS, Executor, Program, recipes, stats_nodes

__all__ = ["apply", "Step", "checkpoint_policy", "provenance_mismatch"]


class Step:
    """One training step under a plan: ``loss = step(*inputs)``.

    Attributes after a call: ``fallbacks`` (values recomputed on demand in that step,
    beyond the plan) and ``fallback_nodes``. ``graph`` and ``schedule`` are what it follows.
    """

    def __init__(
        self, prog: Program, graph: Graph, schedule: Schedule, strategy: str, example: Sequence[Any], *, fuse: bool = True
    ) -> None:
        self.prog = prog
        self.graph = graph
        self.schedule = schedule
        self.strategy = strategy
        self._shapes = [_sig(t) for t in example]
        ids = graph.ids
        self._steps = [(op == COMPUTE, ids[v]) for op, v in zip(schedule.ops.tolist(), schedule.nodes.tolist())]
        # ops that run fused (see fusable_ops); fuse=False runs every op as a one-op graph
        self.fused = fusable_ops(prog, graph, self._steps) if fuse else {}
        # the same steps as (what to do, op name), decoded once rather than at every call
        self._program = _decode_all(self._steps, self.fused)
        self.fallbacks = 0
        self.fallback_nodes: list[str] = []
        for p in self.parameters():  # gradients are fixed memory: allocate them once
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def parameters(self) -> list[torch.Tensor]:
        return [t for t in self.prog.fixed.values() if isinstance(t, torch.nn.Parameter) and t.requires_grad]

    def fixed_tensors(self) -> list[torch.Tensor]:
        """Tensors that exist before and after a step (parameters, gradients, buffers, constants)."""
        ts = [t for t in self.prog.fixed.values() if isinstance(t, torch.Tensor)]
        return ts + [p.grad for p in self.parameters() if p.grad is not None]

    def __call__(self, *inputs: Any) -> torch.Tensor:
        got = [_sig(t) for t in inputs]
        if got != self._shapes:
            raise InputError(f"step inputs {got} differ from the captured inputs {self._shapes}")
        ex = Executor(self.prog, inputs)
        loss = None
        compute, free, backward, grads = ex.compute, ex.free, ex.backward, ex.grads.pop
        fused, backward_fused, plain = ex.compute_fused, ex.backward_fused, ex.compute_plain
        saves = {name: got[0] for name, got in self.fused.items()}
        # pack hooks only around one-op first computations: a fused op's saved tensors
        # are autograd's own (the hooks' unpacking is bound to each saved tensor)
        push = torch._C._autograd._push_saved_tensors_default_hooks
        pop = torch._C._autograd._pop_saved_tensors_default_hooks
        pack, unpack = ex._pack, ex._unpack
        hooks = False
        ex.hooked = True
        try:
            for what, node in self._program:
                if what == _FUSED:
                    held = saves[node]
                    if hooks and held is not None:
                        pop()
                        hooks = False
                    elif not hooks and held is None:
                        push(pack, unpack)
                        hooks = True
                    fused(node, held)
                elif what == _COMPUTE:
                    if not hooks:
                        push(pack, unpack)
                        hooks = True
                    compute(node)
                elif what == _FREE:
                    free(node)
                elif what == _PLAIN:
                    plain(node)
                elif what == _BACKWARD_FUSED:
                    backward_fused(node)
                elif what == _BACKWARD:
                    backward(node)
                elif what == _FREE_BACKWARD:
                    grads(node, None)
                elif what == _NOOP:
                    pass  # bwd:X.params: the first bwd:X accumulated the parameter gradients
                else:
                    loss = ex.seed()
        finally:
            if hooks:
                pop()
            ex.hooked = False
        ex.finish()
        self.fallbacks = ex.fallbacks
        self.fallback_nodes = list(ex.fallback_nodes)
        assert loss is not None
        return loss.detach()


_COMPUTE, _FREE, _BACKWARD, _FREE_BACKWARD, _SEED, _FUSED, _BACKWARD_FUSED, _PLAIN, _NOOP = range(9)


def fusable_ops(prog: Program, graph: Graph, steps: Sequence[tuple[bool, str]]) -> dict[str, tuple[frozenset[str] | None, int]]:
    """Ops that run fused: op -> (the owners it saves, the step that records it).

    In a fused run consecutive computations share one autograd graph
    (:meth:`Executor.compute_fused`). An op qualifies when it has one tensor output and
    no buffer update, or is a norm or dropout with an ``X.stats`` node (several outputs,
    only the first differentiable), and its gradient step ``bwd:X`` runs exactly once.
    The last computation of X before ``bwd:X`` records the autograd graph; earlier ones
    run without autograd, as checkpointing's first forward pass does (a random op, or one
    that updates buffers, only qualifies when that is its first computation, so its
    random numbers are drawn and its running statistics taken once). When the plan keeps
    every value ``bwd:X`` reads (the saved tensors) resident from that computation until
    ``bwd:X``, autograd holds them itself (the set is returned); otherwise (None) they
    are handles that follow the plan's frees, as for a one-op graph. A norm's or
    dropout's saved statistics are always handles, read from ``X.stats`` as the graph
    says. Other ops run as one-op graphs.
    """
    recipes_ = recipes(prog)
    split = {owner for owner, _ in stats_nodes(prog).values()}
    computes: dict[str, list[int]] = {}
    bwd_at: dict[str, list[int]] = {}
    frees: dict[str, list[int]] = {}
    for k, (is_compute, node) in enumerate(steps):
        if node.startswith(BWD):
            if is_compute and not node.endswith(PARAMS):
                bwd_at.setdefault(node[len(BWD) :], []).append(k)
        elif is_compute:
            computes.setdefault(node, []).append(k)
        else:
            frees.setdefault(node, []).append(k)
    out: dict[str, tuple[frozenset[str] | None, int]] = {}
    for name, ks in computes.items():
        r = recipes_.get(name)
        if r is None or len(bwd_at.get(name, ())) != 1:
            continue
        val = r.node.meta.get("val")
        stats = name in split  # a norm or dropout: its statistics are read from X.stats
        if stats:
            if not isinstance(val, (tuple, list)) or not isinstance(val[0], torch.Tensor):
                continue
        elif r.updates or not isinstance(val, torch.Tensor):
            continue
        saves = _saved_owners(graph, name)
        k1 = bwd_at[name][0]
        before = [k for k in ks if k < k1]
        if saves is None or not before or ((r.random or r.updates) and len(before) > 1):
            continue
        k0 = before[-1]
        if stats or any(k0 < f < k1 for v in saves for f in frees.get(v, ())):
            out[name] = (None, k0)  # saved tensors as handles: they follow the plan's frees
        else:
            out[name] = (saves, k0)
    return out


def _saved_owners(graph: Graph, name: str) -> frozenset[str] | None:
    """The forward values ``bwd:name`` reads in the captured graph: what autograd saves
    for op ``name`` (None when the graph has no such gradient step)."""
    v = graph.index.get(BWD + name)
    if v is None:
        return None
    return frozenset(graph.ids[u] for u in graph.pred_lists[v] if graph.kinds[u] == "forward")


def _decode_all(steps: Sequence[tuple[bool, str]], fused: Mapping[str, tuple[Any, int]]) -> list[tuple[int, str]]:
    """Every schedule step as (executor action, op name), decoded once per plan. For a
    fused op: computations before the recording one run without autograd (``_PLAIN``),
    the recording one and the gradient step take the fused actions."""
    out = []
    for k, (is_compute, node) in enumerate(steps):
        what, name = _decode(is_compute, node)
        got = fused.get(name)
        if got is not None:
            if what == _COMPUTE and k < got[1]:
                what = _PLAIN
            elif what == _COMPUTE and k == got[1]:
                what = _FUSED
            elif what == _BACKWARD:
                what = _BACKWARD_FUSED
        out.append((what, name))
    return out


def _decode(is_compute: bool, node: str) -> tuple[int, str]:
    """A schedule step as (executor action, op name) for :meth:`Step.__call__`."""
    if node == LOSS:
        return (_SEED, node) if is_compute else (_FREE_BACKWARD, LOSS)
    if node.startswith(BWD) and node.endswith(PARAMS):
        return (_NOOP, node)  # holds nothing; its FLOPs were done by the first bwd:X
    if node.startswith(BWD):
        return (_BACKWARD if is_compute else _FREE_BACKWARD, node[len(BWD) :])
    return (_COMPUTE if is_compute else _FREE, node)


def apply(
    model: torch.nn.Module,
    plan: Plan | str | Path | Mapping[str, Any],
    example_inputs: Sequence[Any],
    loss_fn: Callable[..., Any] | None = None,
    *,
    factory: str | None = None,
) -> Step:
    """A :class:`Step` that runs ``plan`` (a Plan, a plan file or its JSON) on ``model``.

    Refuses, with one line naming what differs, a plan captured from another model,
    input shape, loss, device or torch version.
    """
    graph, prog = capture_program(model, example_inputs, loss_fn, factory=factory, timing_runs=0)
    strategy, names, prov, where = _plan_parts(plan)
    if prov is not None:
        diff = provenance_mismatch(prov, graph.meta.get("torch", {}))
        if diff:
            raise InputError(f"{where}: this plan was captured from something else: {diff}")
    names = _with_param_steps(names, graph)
    index = graph.index
    for k, (_op, node) in enumerate(names):
        if node not in index:
            raise InputError(f"{where}: step {k} names node {node!r}, which this model's capture does not have")
    schedule = Schedule.from_named(names, index)
    sim = simulate(graph, schedule)
    if sim.error is not None:
        raise InputError(f"{where}: the plan's schedule is invalid for this model's graph: {sim.error}")
    return Step(prog, graph, schedule, strategy, example_inputs)


def _with_param_steps(names: list[list[str]], graph: Graph) -> list[list[str]]:
    """A plan made before captures split off ``bwd:X.params`` (see
    :mod:`~remat_cli.torch._capture`) lacks those steps: compute each right after the
    first ``compute bwd:X`` (zero bytes, nothing to run), so the old plan still applies."""
    if any(str(node).endswith(PARAMS) for _op, node in names):
        return names
    index = graph.index
    out: list[list[str]] = []
    done: set[str] = set()
    for op, node in names:
        out.append([op, node])
        extra = f"{node}{PARAMS}"
        if op == "compute" and str(node).startswith(BWD) and extra in index and extra not in done:
            done.add(extra)
            out.append(["compute", extra])
    return out


def _plan_parts(plan: Any) -> tuple[str, list[list[str]], dict[str, Any] | None, str]:
    if isinstance(plan, Plan):
        return plan.strategy, plan.schedule.named(plan.graph.ids), plan.graph.meta.get("torch"), "plan"
    where = "plan"
    if isinstance(plan, (str, Path)):
        where = str(plan)
        try:
            plan = json.loads(Path(plan).read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"{where}: cannot read plan: {exc}") from None
    if not isinstance(plan, Mapping) or not isinstance(plan.get("schedule"), list):
        raise InputError(f"{where}: not a remat-plan document (no schedule)")
    return str(plan.get("strategy", "?")), plan["schedule"], plan.get("provenance"), where


def provenance_mismatch(planned: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """'' when a plan's provenance matches a fresh capture's, else what differs (one line)."""
    labels = {
        "torch": "torch version",
        "model": "model class",
        "parameters": "parameter shapes",
        "inputs": "inputs",
        "loss": "loss",
        "device": "device",
        "training": "train/eval mode",
    }
    diffs = []
    for key, label in labels.items():
        if key in planned and planned.get(key) != now.get(key):
            diffs.append(f"{label} {_short(planned.get(key))} (plan) vs {_short(now.get(key))} (now)")
    return "; ".join(diffs)


def _short(x: Any) -> str:
    if isinstance(x, list) and all(isinstance(i, dict) and "shape" in i for i in x):
        return "[" + ", ".join(f"{i['dtype']}{i['shape']}" for i in x) + "]"
    return str(x)


def _sig(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return (tuple(t.shape), str(t.dtype).replace("torch.", ""), t.device.type)
    return repr(t)


# ---------------------------------------------------------------- selective checkpointing
def checkpoint_policy(plan: Plan) -> Callable[..., Any]:
    """A ``create_selective_checkpoint_contexts`` policy from a plan's keep-set.

    Ops are matched to the plan's nodes by kind and occurrence (the k-th ``addmm`` the
    region runs is the k-th ``addmm`` node of the capture). An op whose output autograd
    saves and the plan computes only once (a value it keeps) is ``MUST_SAVE``; every
    other op is ``PREFER_RECOMPUTE``. Use it as ``context_fn=lambda:
    create_selective_checkpoint_contexts(policy)`` around the whole forward pass; call
    ``policy.reset()`` before each step.
    """
    from torch.utils.checkpoint import CheckpointPolicy

    g = plan.graph
    counts = [0] * g.n
    for v in plan.schedule.compute_nodes.tolist():
        counts[v] += 1
    by_kind: dict[str, list[bool]] = {}
    for v in g.topo.tolist():
        if g.kinds[v] != "forward" or g.ids[v].endswith(STATS):
            continue
        # autograd saves it (a norm's statistics: through its X.stats copy)
        saved = any(g.kinds[s] == "backward" or g.ids[s] == g.ids[v] + STATS for s in g.succ_lists[v])
        by_kind.setdefault(g.ops[v], []).append(counts[v] <= 1 and saved)
    seen: dict[tuple[bool, str], int] = {}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        key = str(op).replace("aten.", "", 1)
        k = seen.get((ctx.is_recompute, key), 0)  # the recomputation replays the same ops
        seen[(ctx.is_recompute, key)] = k + 1
        keeps = by_kind.get(key)
        if keeps is not None and k < len(keeps) and keeps[k]:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    policy.reset = seen.clear  # type: ignore[attr-defined]
    return policy
