"""Capture: a PyTorch model and example inputs -> a remat training graph (DESIGN §7).

``torch.export`` lowers (model, loss) to functional core ATen; one instrumented training
step, run op by op by the executor, then measures what the graph needs:

* forward nodes are the ops that allocate (ids are FX node names, e.g. ``addmm_3``);
  views and tuple items are not nodes: whoever reads or saves a view reads its base,
  so a kept view keeps its whole base alive, as in PyTorch;
* ``mem`` is the bytes of the new storages an op leaves alive, ``workspace`` the extra
  bytes it needs only while it runs (both counted by storage tracking, not estimated);
* ``bwd:X`` is the gradient step of op X: it reads the gradient steps of X's consumers
  and exactly the activations autograd saved for X (seen through ``saved_tensors_hooks``);
* ``bwd:X.params`` (only for an op with trainable parameters): the share of X's gradient
  step that only its first computation does. Parameter gradients are accumulated once,
  so a recomputed ``bwd:X`` only redoes X's input gradients: ``bwd:X`` costs the FLOPs
  the executor's own recomputation of it counts, and ``bwd:X.params`` (zero bytes, reads
  ``bwd:X``, computed once) the rest, so the total is the measured gradient step's and
  a plan that recomputes gradient steps predicts the FLOPs it really costs;
* ``cost`` is FLOPs (``torch.utils.flop_counter`` formulas for matmul/conv/attention,
  one per output element for other ops), ``seconds`` the op's measured time;
* parameters, buffers, constants, inputs, parameter gradients and BatchNorm's new running
  statistics are fixed memory.

Without ``loss_fn`` the loss is the sum of the model's outputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from remat_cli.graph import Graph, NodeSpec
from remat_cli.torch._measure import _distinct_bytes
from remat_cli.torch._runtime import (
    STATS,
    Executor,
    Program,
    Tracker,
    export_program,
    is_owner,
    now,
    owner_of,
    stats_nodes,
)

__all__ = ["capture", "provenance", "needed_ops"]

LOSS = "loss"
BWD = "bwd:"
PARAMS = ".params"  # bwd:X.params: the parameter-gradient share of bwd:X (module doc)
AGAIN = "again:"  # capture's own key: seconds of a recomputed bwd:X


def capture(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    loss_fn: Callable[..., Any] | None = None,
    *,
    factory: str | None = None,
) -> Graph:
    """The training graph of one step of ``model`` on ``example_inputs`` (see module doc).

    ``factory`` (``FILE.py:NAME``) is recorded in the provenance when known. Raises
    :class:`~remat_cli.errors.InputError` (one line) when the model cannot be captured.
    """
    graph, _prog = capture_program(model, example_inputs, loss_fn, factory=factory)
    return graph


def capture_program(
    model: torch.nn.Module,
    example_inputs: Sequence[Any],
    loss_fn: Callable[..., Any] | None = None,
    *,
    factory: str | None = None,
    timing_runs: int = 2,
) -> tuple[Graph, Program]:
    """:func:`capture`, also returning the executable program apply runs.

    ``timing_runs`` store-all steps time each node (0: no seconds, as apply needs none).
    """
    inputs = tuple(example_inputs)
    where = factory or type(model).__name__
    prog = export_program(model, inputs, loss_fn, where)
    order = needed_ops(prog)
    params = [t for t in prog.fixed.values() if isinstance(t, torch.nn.Parameter) and t.requires_grad]
    if not params:
        from remat_cli.errors import InputError

        raise InputError(f"{where}: the model has no parameters that require gradients: nothing to train")
    old_grads = [p.grad for p in params]
    rng = torch.random.get_rng_state()
    try:
        for p in params:
            p.grad = torch.zeros_like(p)
        facts = _profile(prog, inputs, order, params)
        seconds = _time(prog, inputs, order, params, timing_runs) if timing_runs > 0 else {}
    finally:
        for p, g in zip(params, old_grads):
            p.grad = g
        torch.random.set_rng_state(rng)
    graph = _build(prog, inputs, order, facts, seconds, provenance(model, inputs, loss_fn, factory, prog))
    return graph, prog


def needed_ops(prog: Program) -> list[str]:
    """Owner ops the loss depends on, in program order; a normalization op X is followed
    by its statistics node ``X.stats`` (see :func:`~remat_cli.torch._runtime.stats_nodes`)."""
    seen: set[str] = set()
    stack = [prog.loss]
    while stack:
        n = stack.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        stack.extend(n.all_input_nodes)
    stats = {owner: name for name, (owner, _idx) in stats_nodes(prog).items()}
    out: list[str] = []
    for n in prog.ops:
        if n.name in seen and is_owner(n):
            out.append(n.name)
            if n.name in stats:
                out.append(stats[n.name])
    return out


def provenance(
    model: torch.nn.Module, inputs: Sequence[Any], loss_fn: Callable[..., Any] | None, factory: str | None, prog: Program
) -> dict[str, Any]:
    """What a graph was captured from; plans carry it and apply compares it."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
    for name, b in model.named_buffers():
        h.update(f"{name}:{tuple(b.shape)}:{b.dtype};".encode())
    return {
        "torch": torch.__version__,
        "factory": factory,
        "model": type(model).__qualname__,
        "parameters": h.hexdigest()[:16],
        "inputs": [_describe(t) for t in inputs],
        "loss": "sum of outputs" if loss_fn is None else getattr(loss_fn, "__qualname__", type(loss_fn).__name__),
        "device": str(_device(inputs, model)),
        "training": bool(model.training),
    }


def _describe(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
    return repr(x)[:60]


def _device(inputs: Sequence[Any], model: torch.nn.Module) -> torch.device:
    for t in inputs:
        if isinstance(t, torch.Tensor):
            return t.device
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _fixed_tensors(prog: Program, inputs: Sequence[Any], params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    ts = [t for t in prog.fixed.values() if isinstance(t, torch.Tensor)]
    ts += [t for t in inputs if isinstance(t, torch.Tensor)]
    ts += [p.grad for p in params if p.grad is not None]
    return ts


def _profile(prog: Program, inputs: Sequence[Any], order: list[str], params: Sequence[torch.Tensor]) -> dict[str, Any]:
    """One instrumented store-all step: per node mem, workspace, FLOPs, saved owners."""
    ex = Executor(prog, inputs)
    tracker = Tracker(_fixed_tensors(prog, inputs, params))
    out: dict[str, Any] = {"mem": {}, "ws": {}, "flops": {}, "requires": {}, "again": {}}
    with tracker:
        for name in order:
            before = tracker.mark()
            f0 = tracker.flops
            ex.compute(name)
            _record(out, name, tracker, before, f0)
            out["requires"][name] = bool(ex.edges[name][1])
        before = tracker.mark()
        f0 = tracker.flops
        ex.seed()
        _record(out, LOSS, tracker, before, f0)
        for name in reversed(order):
            if not out["requires"][name]:
                continue
            before = tracker.mark()
            f0 = tracker.flops
            ex.backward(name)
            # a gradient step may pass its incoming gradient through (add, views): the
            # storage then lives as long as either holds it, so it counts for both
            held = _distinct_bytes(ex.grads[name].values())
            _record(out, BWD + name, tracker, before, f0, mem=max(held, tracker.live - before))
            if ex.edges[name][3]:  # it has parameters: count what a recomputation of it does
                f0 = tracker.flops
                ex.backward(name)  # input gradients only (the executor's recompute path)
                out["again"][name] = min(tracker.flops - f0, out["flops"][BWD + name])
    out["saved"] = {name: sorted({s.owner for s in ex.saved_by.get(name, []) if s.owner}) for name in order}
    out["untracked_saved"] = ex.untracked_saved
    out["fallbacks"] = ex.fallbacks
    out["updates"] = sum(t.untyped_storage().nbytes() for t in ex.updates.values())
    out["update_owner"] = {}
    for k, t in ex.updates.items():
        owner = prog.by_name[k].args[0].name
        out["update_owner"][owner] = out["update_owner"].get(owner, 0) + t.untyped_storage().nbytes()
    ex.finish_without_updates()
    return out


def _record(out: dict[str, Any], node: str, tracker: Tracker, before: int, f0: int, mem: int | None = None) -> None:
    mem = max(0, tracker.live - before) if mem is None else mem
    out["mem"][node] = mem
    out["ws"][node] = max(0, tracker.peak - before - mem)
    out["flops"][node] = tracker.flops - f0


def _time(prog: Program, inputs: Sequence[Any], order: list[str], params: Sequence[torch.Tensor], runs: int) -> dict[str, float]:
    """Seconds of each node: the fastest of ``runs`` store-all steps, op by op."""
    best: dict[str, float] = {}
    cuda = _device(inputs, prog.module).type == "cuda"

    def clock() -> float:
        if cuda:
            torch.cuda.synchronize()
        return now()

    for _ in range(max(1, runs)):
        ex = Executor(prog, inputs)
        times: dict[str, float] = {}
        for name in order:
            t0 = clock()
            ex.compute(name)
            times[name] = clock() - t0
        t0 = clock()
        ex.seed()
        times[LOSS] = clock() - t0
        for name in reversed(order):
            if not ex.edges[name][1]:
                continue
            t0 = clock()
            ex.backward(name)
            times[BWD + name] = clock() - t0
            if ex.edges[name][3]:  # the recomputation's time, as _profile counts its FLOPs
                t0 = clock()
                ex.backward(name)
                times[AGAIN + name] = clock() - t0
        ex.finish_without_updates()
        for k, v in times.items():
            best[k] = min(best.get(k, v), v)
    return best


def _build(
    prog: Program,
    inputs: Sequence[Any],
    order: list[str],
    facts: dict[str, Any],
    seconds: dict[str, float],
    meta: dict[str, Any],
) -> Graph:
    requires = facts["requires"]
    stats = stats_nodes(prog)
    read_by_bwd = {o for owners in facts["saved"].values() for o in owners}
    # a statistics node no gradient step reads (a frozen norm) is left out of the graph
    order = [name for name in order if name not in stats or name in read_by_bwd]
    cons: dict[str, list[str]] = {name: [] for name in order}
    for name in order:
        if name in stats:
            continue
        for a in prog.by_name[name].all_input_nodes:
            own = owner_of(a)
            if own is not None and own[0] in cons and name not in cons[own[0]]:
                cons[own[0]].append(name)
    loss_owner = owner_of(prog.loss)
    assert loss_owner is not None
    specs: list[NodeSpec] = []
    for name in order:
        if name in stats:
            owner = stats[name][0]
            specs.append(
                NodeSpec(
                    id=name,
                    inputs=[owner],
                    mem=facts["mem"][name],
                    cost=facts["flops"][name],
                    op=_op_name(prog.by_name[owner]) + STATS,
                    workspace=facts["ws"][name],
                    kind="forward",
                    seconds=seconds.get(name),
                )
            )
            continue
        n = prog.by_name[name]
        mem = facts["mem"][name]
        if name in facts["update_owner"]:
            mem = max(0, mem - facts["update_owner"][name])
        inputs_of = []
        for a in n.all_input_nodes:
            own = owner_of(a)
            if own is not None and own[0] not in inputs_of:
                inputs_of.append(own[0])
        specs.append(
            NodeSpec(
                id=name,
                inputs=inputs_of,
                mem=mem,
                cost=facts["flops"][name],
                op=_op_name(n),
                workspace=facts["ws"][name],
                kind="forward",
                seconds=seconds.get(name),
            )
        )
    specs.append(
        NodeSpec(
            id=LOSS,
            inputs=[loss_owner[0]],
            mem=facts["mem"][LOSS],
            cost=facts["flops"][LOSS],
            op="loss",
            workspace=facts["ws"][LOSS],
            kind="loss",
            seconds=seconds.get(LOSS),
        )
    )
    for name in reversed(order):
        if not requires[name]:
            continue
        reads = [BWD + c for c in cons[name] if requires.get(c)]
        if name == loss_owner[0]:
            reads.append(LOSS)
        reads += facts["saved"][name]
        flops = facts["flops"][BWD + name]
        again = facts["again"].get(name, flops)
        split = again < flops
        secs = seconds.get(BWD + name)
        secs_again = seconds.get(AGAIN + name) if split else secs
        if secs is None or secs_again is None:
            secs_again = secs
        else:
            secs_again = min(secs, secs_again)
        specs.append(
            NodeSpec(
                id=BWD + name,
                inputs=list(dict.fromkeys(reads)),
                mem=facts["mem"][BWD + name],
                cost=again,
                op=_op_name(prog.by_name[name]) + ".backward",
                workspace=facts["ws"][BWD + name],
                kind="backward",
                seconds=secs_again,
            )
        )
        if split:  # the parameter gradients: done by the first bwd:X only
            specs.append(
                NodeSpec(
                    id=BWD + name + PARAMS,
                    inputs=[BWD + name],
                    mem=0,
                    cost=flops - again,
                    op=_op_name(prog.by_name[name]) + ".backward.params",
                    workspace=0,
                    kind="backward",
                    seconds=None if secs is None or secs_again is None else secs - secs_again,
                )
            )
    fixed = _fixed_bytes(prog, inputs) + facts["updates"]
    meta = {
        "torch": meta,
        "captured": {
            "untracked_saved_bytes": facts["untracked_saved"],
            "fixed_breakdown": "parameters, gradients, buffers, constants, inputs, new running stats",
        },
    }
    name = meta["torch"]["factory"] or meta["torch"]["model"]
    return Graph.from_nodes(specs, name=name, fixed_mem=fixed, cost_unit="FLOP", source=name, meta=meta)


def _op_name(n: torch.fx.Node) -> str:
    t = n.target
    return str(getattr(t, "__name__", t)) if not hasattr(t, "_schema") else str(t).replace("aten.", "", 1)


def _fixed_bytes(prog: Program, inputs: Sequence[Any]) -> int:
    """Distinct storages of parameters, buffers, constants and inputs, plus one gradient
    per trainable parameter."""
    seen: dict[int, int] = {}
    for t in list(prog.fixed.values()) + [x for x in inputs if isinstance(x, torch.Tensor)]:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    grads = sum(p.numel() * p.element_size() for p in prog.fixed.values() if isinstance(p, torch.nn.Parameter) and p.requires_grad)
    return sum(seen.values()) + grads
