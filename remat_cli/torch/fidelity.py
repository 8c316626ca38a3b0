"""Fidelity: predicted against measured, for store-all and each plan (DESIGN §7).

Captures the model once, plans it with each strategy, runs each plan with the executor
(:mod:`remat_cli.torch._apply`), measures it (:mod:`remat_cli.torch._measure`) and
compares its gradients with plain eager training. Also measured: the eager step itself
(``eager``, predicted = store-all's numbers) and, per plan, its keep-set exported as a
selective-checkpointing policy (``STRATEGY+sac``), whose recomputation PyTorch decides.
Returns typed facts; formatting is in :mod:`remat_cli.report.fidelity`.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from remat_cli.budget import Budget
from remat_cli.errors import InputError, NoPlanError
from remat_cli.graph import Graph
from remat_cli.plandoc import Plan
from remat_cli.planner import make_plan, resolve_budget
from remat_cli.torch._apply import Step, checkpoint_policy
from remat_cli.torch._capture import capture_program
from remat_cli.torch._measure import Measurement, measure, paired_seconds
from remat_cli.torch._runtime import Program

__all__ = ["FidelityRow", "FidelityReport", "fidelity", "load_factory", "eager_step", "captured_step"]


@dataclass(frozen=True)
class FidelityRow:
    """One plan (or the eager step) predicted against measured."""

    strategy: str
    budget_bytes: int | None
    predicted_peak_bytes: int | None
    measured_peak_bytes: int | None
    predicted_overhead: float | None
    measured_flops_overhead: float | None
    predicted_seconds: float | None
    measured_seconds: float | None
    fallbacks: int | None
    grads_match: bool | None
    max_grad_error: float | None = None
    predicted_fixed_bytes: int | None = None
    measured_fixed_bytes: int | None = None
    note: str = ""
    # time of this step / (eager step's time x (1 + measured extra FLOPs)) - 1, the two
    # timed alternately: what running the step costs beyond its own arithmetic
    executor_overhead: float | None = None
    # the same figure from the first and third quartiles of the pairs' time ratios
    executor_overhead_iqr: tuple[float, float] | None = None

    @property
    def peak_ratio(self) -> float | None:
        if not self.predicted_peak_bytes or self.measured_peak_bytes is None:
            return None
        return self.measured_peak_bytes / self.predicted_peak_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "budget_bytes": self.budget_bytes,
            "predicted_peak_bytes": self.predicted_peak_bytes,
            "measured_peak_bytes": self.measured_peak_bytes,
            "peak_ratio": self.peak_ratio,
            "predicted_fixed_bytes": self.predicted_fixed_bytes,
            "measured_fixed_bytes": self.measured_fixed_bytes,
            "predicted_overhead": self.predicted_overhead,
            "measured_flops_overhead": self.measured_flops_overhead,
            "predicted_seconds": self.predicted_seconds,
            "measured_seconds": self.measured_seconds,
            "fallbacks": self.fallbacks,
            "grads_match": self.grads_match,
            "max_grad_error": self.max_grad_error,
            "executor_overhead": self.executor_overhead,
            "executor_overhead_iqr": None if self.executor_overhead_iqr is None else list(self.executor_overhead_iqr),
            "note": self.note,
        }


@dataclass(frozen=True)
class FidelityReport:
    """Everything ``remat fidelity`` prints."""

    name: str
    nodes: int
    store_all_peak: int
    lower_bound: int
    fixed_bytes: int
    device: str
    runs: int
    rows: tuple[FidelityRow, ...]
    provenance: dict[str, Any] = field(default_factory=dict)


def load_factory(
    spec: str, device: str = "cpu", kwargs: Mapping[str, Any] | None = None
) -> tuple[torch.nn.Module, tuple[Any, ...], Callable[..., Any] | None]:
    """Run ``FILE.py:FACTORY`` (this executes FILE.py) and return (model, inputs, loss_fn).

    ``FACTORY(**kwargs)`` returns ``(model, inputs)`` or ``(model, inputs, loss_fn)``;
    ``inputs`` is a tensor or a tuple of them. Model and tensor inputs are moved to
    ``device``. A keyword the factory does not take is one line naming it (``remat fit``
    passes ``--dim NAME=VALUE`` as keywords), checked before the factory runs.
    """
    kwargs = dict(kwargs or {})
    path_s, sep, name = spec.rpartition(":")
    if not sep or not path_s or not name:
        raise InputError(f"{spec}: expected FILE.py:FACTORY, e.g. examples/mlp.py:make")
    path = Path(path_s)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    mod_name = f"_remat_factory_{abs(hash(str(path.resolve())))}"
    try:
        mspec = importlib.util.spec_from_file_location(mod_name, path)
        if mspec is None or mspec.loader is None:
            raise InputError(f"{path}: cannot be loaded as a Python file")
        module = importlib.util.module_from_spec(mspec)
        sys.modules[mod_name] = module
        mspec.loader.exec_module(module)
    except InputError:
        raise
    except BaseException as exc:  # the user's file: any failure is one line
        raise InputError(f"{path}: running it raised {type(exc).__name__}: {_first_line(exc)}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise InputError(f"{path}: has no function {name!r}")
    _check_keywords(spec, fn, kwargs)
    try:
        result = fn(**kwargs)
    except BaseException as exc:
        raise InputError(f"{spec}: the factory raised {type(exc).__name__}: {_first_line(exc)}") from None
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise InputError(f"{spec}: the factory must return (model, inputs) or (model, inputs, loss_fn)")
    model, inputs = result[0], result[1]
    loss_fn = result[2] if len(result) == 3 else None
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"{spec}: the factory's model is a {type(model).__name__}, not a torch.nn.Module")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise InputError(f"{spec}: the factory's inputs must be a tensor or a tuple of tensors")
    if loss_fn is not None and not callable(loss_fn):
        raise InputError(f"{spec}: the factory's loss_fn is not callable")
    dev = torch.device(device)
    model = model.to(dev)
    inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs)
    return model, inputs, loss_fn


def _check_keywords(spec: str, fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
    """Raise one line when ``fn`` cannot take every name of ``kwargs`` as a keyword."""
    if not kwargs:
        return
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): let the call decide
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [k for k in kwargs if k not in takes]
    if missing:
        name = spec.rpartition(":")[2]
        call = ", ".join(f"{k}=..." for k in kwargs)
        raise InputError(
            f"{spec}: the factory takes no keyword argument {missing[0]!r} (it is called as "
            f"{name}({call})); add it, e.g. def {name}({missing[0]}=1, ...)"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def eager_step(model: torch.nn.Module, loss_fn: Callable[..., Any] | None) -> Callable[..., torch.Tensor]:
    """Plain eager training: ``loss_fn(model(*inputs)).backward()`` (sum of outputs without loss_fn)."""

    def step(*inputs: Any) -> torch.Tensor:
        out = model(*inputs)
        loss = loss_fn(out) if loss_fn is not None else _sum_outputs(out)
        loss.backward()
        return loss.detach()

    return step


def captured_step(prog: Program) -> Callable[..., torch.Tensor]:
    """The captured core-ATen program run by plain autograd: its FX graph's forward, then
    ``loss.backward()`` through PyTorch's engine. Same kernels as the executor runs, no
    schedule and no executor: the reference that splits an ``exec`` figure into what the
    program costs beyond eager PyTorch and what the executor costs beyond the program.
    Buffer updates the program computes are dropped (timing only)."""
    gm = prog.gm
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    fixed = prog.fixed
    user = prog.user_inputs
    loss_at = [n.name for n in _outputs(gm)].index(prog.loss.name)

    def step(*inputs: Any) -> torch.Tensor:
        given = dict(zip(user, inputs))
        out = gm(*[given[n] if n in given else fixed[n] for n in names])
        loss = out[loss_at] if isinstance(out, (tuple, list)) else out
        loss.backward()
        return loss.detach()

    return step


def _outputs(gm: Any) -> list[Any]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    args = out.args[0]
    return list(args) if isinstance(args, (tuple, list)) else [args]


def _sum_outputs(out: Any) -> torch.Tensor:
    flat = list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (tuple, list)) else [out]
    loss = flat[0].sum()
    for t in flat[1:]:
        loss = loss + t.sum()
    return loss


def sac_step(model: torch.nn.Module, plan: Plan, loss_fn: Callable[..., Any] | None) -> Callable[..., torch.Tensor]:
    """Eager training with the whole forward pass under one selective-checkpointing region
    whose policy is the plan's keep-set (:func:`~remat_cli.torch._apply.checkpoint_policy`)."""
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    policy = checkpoint_policy(plan)

    def step(*inputs: Any) -> torch.Tensor:
        policy.reset()  # type: ignore[attr-defined]
        out = checkpoint(model, *inputs, use_reentrant=False, context_fn=lambda: create_selective_checkpoint_contexts(policy))
        loss = loss_fn(out) if loss_fn is not None else _sum_outputs(out)
        loss.backward()
        return loss.detach()

    return step


def fidelity(
    model: torch.nn.Module,
    inputs: Sequence[Any],
    loss_fn: Callable[..., Any] | None,
    budget: Budget | int | None,
    strategies: Sequence[str],
    *,
    factory: str | None = None,
    runs: int = 3,
    sac: bool = True,
    seed: int = 0,
    captured: tuple[Graph, Any] | None = None,
    pairs: int | None = None,
) -> FidelityReport:
    """Capture, plan with each strategy, run, measure; see the module docstring.

    A budget below the lower bound is raised to it (said in the row's note); a strategy
    that cannot meet the budget gives a row with its reason and no measurement.
    ``captured`` reuses a ``capture_program`` result for the same model and inputs.
    ``pairs``: how many (step, eager step) pairs time the executor's overhead
    (default ``max(runs, 3)``).
    """
    inputs = tuple(inputs)
    n_pairs = pairs or max(runs, 3)
    graph, prog = captured or capture_program(model, inputs, loss_fn, factory=factory)
    buffers = {k: b.clone() for k, b in model.named_buffers()}
    try:
        store_all = make_plan(graph, "store-all", None)
        ref_peak = store_all.metrics.peak_bytes
        budget_bytes = resolve_budget(graph, budget, ref_peak)
        note = ""
        if budget_bytes is not None and budget_bytes < graph.lb:
            note = "budget raised to the lower bound"
            budget_bytes = graph.lb
        reference = _grads(eager_step(model, loss_fn), model, inputs, seed)
        params = [p for p in model.parameters() if p.requires_grad]
        eager = eager_step(model, loss_fn)
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        sa_step = Step(prog, graph, store_all.schedule, "store-all", inputs)
        sa_m = measure(sa_step, inputs, runs=runs)
        base_flops = sa_m.flops
        sa_grads = _grads(sa_step, model, inputs, seed)
        eager_m = measure(eager, inputs, runs=runs, fixed=_fixed(model) + [p.grad for p in params])
        rows = [
            _row(
                "store-all",
                None,
                store_all,
                sa_m,
                base_flops,
                graph,
                sa_grads,
                reference,
                overhead=_overhead(sa_step, eager, inputs, n_pairs, sa_m, base_flops),
            )
        ]
        rows.append(_row("eager", None, store_all, eager_m, base_flops, None, reference, reference, "PyTorch's own step", None))
        for name in strategies:
            if name == "store-all":
                continue
            try:
                plan = make_plan(graph, name, budget_bytes, reference_peak=ref_peak)
            except NoPlanError as exc:
                rows.append(FidelityRow(name, budget_bytes, None, None, None, None, None, None, None, None, note=f"no fit: {exc}"))
                continue
            step = Step(prog, graph, plan.schedule, name, inputs)
            got = _grads(step, model, inputs, seed)
            m = measure(step, inputs, runs=runs)
            rows.append(
                _row(
                    name,
                    budget_bytes,
                    plan,
                    m,
                    base_flops,
                    graph,
                    got,
                    reference,
                    note,
                    overhead=_overhead(step, eager, inputs, n_pairs, m, base_flops),
                )
            )
            if sac:
                s = sac_step(model, plan, loss_fn)
                try:
                    got_s = _grads(s, model, inputs, seed)
                    ms = measure(s, inputs, runs=runs, fixed=_fixed(model) + [p.grad for p in params])
                except Exception as exc:  # noqa: BLE001 - reported in the row, never hidden
                    rows.append(
                        FidelityRow(
                            name + "+sac",
                            budget_bytes,
                            plan.metrics.peak_bytes,
                            None,
                            plan.metrics.overhead,
                            None,
                            None,
                            None,
                            None,
                            None,
                            note=f"failed: {type(exc).__name__}: {_first_line(exc)}",
                        )
                    )
                    continue
                rows.append(
                    _row(
                        name + "+sac",
                        budget_bytes,
                        plan,
                        ms,
                        base_flops,
                        graph,
                        got_s,
                        reference,
                        "keep-set as a checkpoint policy",
                        fallbacks=None,
                        overhead=_overhead(s, eager, inputs, n_pairs, ms, base_flops),
                    )
                )
    finally:
        with torch.no_grad():
            for k, b in model.named_buffers():
                b.copy_(buffers[k])
    device = str(next((t.device for t in inputs if isinstance(t, torch.Tensor)), "cpu"))
    return FidelityReport(
        name=graph.name,
        nodes=graph.n,
        store_all_peak=ref_peak,
        lower_bound=graph.lb,
        fixed_bytes=graph.fixed_mem,
        device=device,
        runs=runs,
        rows=tuple(rows),
        provenance=dict(graph.meta.get("torch", {})),
    )


def _fixed(model: torch.nn.Module) -> list[torch.Tensor]:
    return list(model.parameters()) + list(model.buffers())


def _overhead(
    step: Callable[..., Any],
    eager: Callable[..., Any],
    inputs: Sequence[Any],
    pairs: int,
    m: Measurement,
    base_flops: int | None,
) -> tuple[float, tuple[float, float]] | None:
    """Time of ``step`` over the eager step's time scaled by the step's measured FLOPs,
    minus 1: the executor's own cost (median over ``pairs`` pairs timed alternately),
    and the same from the quartiles of the pairs' ratios."""
    if not base_flops:
        return None
    pair = paired_seconds(step, eager, inputs, pairs=pairs)
    scale = m.flops / base_flops
    q1, q3 = pair.ratio_quartiles
    return pair.ratio / scale - 1.0, (q1 / scale - 1.0, q3 / scale - 1.0)


def _grads(step: Callable[..., Any], model: torch.nn.Module, inputs: Sequence[Any], seed: int) -> list[torch.Tensor]:
    """Gradients of one step from zero, with a fixed RNG seed (so dropout draws the same)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is not None:
            p.grad.zero_()
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        step(*inputs)
    finally:
        torch.random.set_rng_state(state)
    return [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]


def _row(
    name: str,
    budget: int | None,
    plan: Plan,
    m: Measurement,
    base_flops: int | None,
    graph: Graph | None,
    got: list[torch.Tensor],
    ref: list[torch.Tensor],
    note: str = "",
    fallbacks: int | None | str = "step",
    overhead: tuple[float, tuple[float, float]] | None = None,
) -> FidelityRow:
    err = max((float((a - b).abs().max()) for a, b in zip(got, ref)), default=0.0)
    match = all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(got, ref))
    return FidelityRow(
        strategy=name,
        budget_bytes=budget,
        predicted_peak_bytes=plan.metrics.peak_bytes,
        measured_peak_bytes=m.peak_bytes,
        predicted_overhead=plan.metrics.overhead,
        measured_flops_overhead=None if not base_flops else m.flops / base_flops - 1.0,
        predicted_seconds=plan.metrics.est_seconds,
        measured_seconds=m.seconds,
        fallbacks=m.fallbacks if fallbacks == "step" else None,
        grads_match=match,
        max_grad_error=err,
        predicted_fixed_bytes=plan.metrics.fixed_bytes,
        measured_fixed_bytes=m.fixed_bytes,
        note=note,
        executor_overhead=None if overhead is None else overhead[0],
        executor_overhead_iqr=None if overhead is None else overhead[1],
    )
