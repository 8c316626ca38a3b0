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
from remat_cli.torch._capture import BWD, LOSS, capture_program
from remat_cli.torch._runtime import STATS, Executor, Program

__all__ = ["apply", "Step", "checkpoint_policy", "provenance_mismatch"]


class Step:
    """One training step under a plan: ``loss = step(*inputs)``.

    Attributes after a call: ``fallbacks`` (values recomputed on demand in that step,
    beyond the plan) and ``fallback_nodes``. ``graph`` and ``schedule`` are what it follows.
    """

    def __init__(self, prog: Program, graph: Graph, schedule: Schedule, strategy: str, example: Sequence[Any]) -> None:
        self.prog = prog
        self.graph = graph
        self.schedule = schedule
        self.strategy = strategy
        self._shapes = [_sig(t) for t in example]
        ids = graph.ids
        self._steps = [(op == COMPUTE, ids[v]) for op, v in zip(schedule.ops.tolist(), schedule.nodes.tolist())]
        # the same steps as (what to do, op name), decoded once rather than at every call
        self._program = [_decode(is_compute, node) for is_compute, node in self._steps]
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
        compute, free, backward, grads = ex.compute, ex.env.pop, ex.backward, ex.grads.pop
        with ex.saving():
            ex.hooked = True
            for what, node in self._program:
                if what == _COMPUTE:
                    compute(node)
                elif what == _FREE:
                    free(node, None)
                elif what == _BACKWARD:
                    backward(node)
                elif what == _FREE_BACKWARD:
                    grads(node, None)
                else:
                    loss = ex.seed()
            ex.hooked = False
        ex.finish()
        self.fallbacks = ex.fallbacks
        self.fallback_nodes = list(ex.fallback_nodes)
        assert loss is not None
        return loss.detach()


_COMPUTE, _FREE, _BACKWARD, _FREE_BACKWARD, _SEED = range(5)


def _decode(is_compute: bool, node: str) -> tuple[int, str]:
    """A schedule step as (executor action, op name) for :meth:`Step.__call__`."""
    if node == LOSS:
        return (_SEED, node) if is_compute else (_FREE_BACKWARD, LOSS)
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
    index = graph.index
    for k, (_op, node) in enumerate(names):
        if node not in index:
            raise InputError(f"{where}: step {k} names node {node!r}, which this model's capture does not have")
    schedule = Schedule.from_named(names, index)
    sim = simulate(graph, schedule)
    if sim.error is not None:
        raise InputError(f"{where}: the plan's schedule is invalid for this model's graph: {sim.error}")
    return Step(prog, graph, schedule, strategy, example_inputs)


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
