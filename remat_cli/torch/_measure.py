"""Measure what one training step really uses: peak bytes, FLOPs, seconds (DESIGN §7).

On CPU the peak comes from storage tracking (every storage an op returns is counted
until a ``weakref.finalize`` says it died; kernel scratch memory is invisible); on CUDA
from the caching allocator's ``max_memory_allocated``. Fixed memory (tensors that exist
before the step: parameters, gradients, buffers, inputs) is reported apart. FLOPs use
the same counting rule as capture (so predicted and measured compare like with like);
seconds are the median of several plain, untracked steps.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from remat_cli.torch._runtime import Tracker, now

__all__ = ["Measurement", "measure", "Paired", "paired_seconds"]


@dataclass(frozen=True)
class Measurement:
    """One step's real cost. Bytes include fixed memory, as the simulator's do."""

    peak_bytes: int
    fixed_bytes: int
    flops: int
    seconds: float  # median of ``runs`` timed steps
    runs: int
    fallbacks: int  # recomputations the executor added beyond the plan (0 for eager)
    device: str
    method: str  # "storage tracking" or "cuda allocator"

    @property
    def activation_peak_bytes(self) -> int:
        return self.peak_bytes - self.fixed_bytes


def measure(
    step: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    runs: int = 5,
    fixed: Sequence[torch.Tensor] | None = None,
    device: torch.device | str | None = None,
) -> Measurement:
    """Run ``step(*inputs)`` 1 + 1 + ``runs`` times: warm-up, tracked, timed.

    ``fixed`` lists the tensors that outlive the step (default: ``step.fixed_tensors()``
    for an applied plan). Gradients accumulate across the runs, as in training.
    ``device`` (default: that of the fixed tensors and inputs) picks how the peak is
    read: CUDA's allocator for ``cuda``, storage tracking otherwise.
    """
    inputs = tuple(inputs)
    step(*inputs)  # warm-up: lazy allocations, first-call costs
    if fixed is None:
        fixed = step.fixed_tensors() if hasattr(step, "fixed_tensors") else []
    fixed_all = list(fixed) + [t for t in inputs if isinstance(t, torch.Tensor)]
    fixed_bytes = _distinct_bytes(fixed_all)
    if device is None:
        device = next((t.device for t in fixed_all if isinstance(t, torch.Tensor)), torch.device("cpu"))
    device = torch.device(device)
    tracker = Tracker(fixed_all)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        with tracker:
            step(*inputs)
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base + fixed_bytes
        method = "cuda allocator"
    else:
        with tracker:
            step(*inputs)
        peak = fixed_bytes + tracker.peak
        method = "storage tracking"
    fallbacks = int(getattr(step, "fallbacks", 0))
    times = []
    for _ in range(max(1, runs)):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = now()
        step(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(now() - t0)
    return Measurement(
        peak_bytes=int(peak),
        fixed_bytes=int(fixed_bytes),
        flops=int(tracker.flops),
        seconds=statistics.median(times),
        runs=len(times),
        fallbacks=fallbacks,
        device=str(device),
        method=method,
    )


@dataclass(frozen=True)
class Paired:
    """A step timed against a reference step, the two run alternately."""

    seconds: float  # median of the step's times
    reference_seconds: float  # median of the reference's times
    ratio: float  # median over the pairs of step / reference (robust to load changing)
    pairs: int
    # first and third quartiles of the pair ratios: how far one pair can be from another
    ratio_quartiles: tuple[float, float] = (0.0, 0.0)


def paired_seconds(
    step: Callable[..., Any],
    reference: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    pairs: int = 5,
    device: torch.device | str | None = None,
) -> Paired:
    """Time ``step(*inputs)`` and ``reference(*inputs)`` alternately, ``pairs`` times each.

    On a shared machine the load changes between two measurements taken one after the
    other; a ratio taken pair by pair (each pair within a few milliseconds, the order
    alternating) keeps most of that out. Both should already be warm.
    """
    inputs = tuple(inputs)
    if device is None:
        device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
    device = torch.device(device)
    cuda = device.type == "cuda"

    def timed(fn: Callable[..., Any]) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = now()
        fn(*inputs)
        if cuda:
            torch.cuda.synchronize(device)
        return now() - t0

    mine: list[float] = []
    ref: list[float] = []
    for k in range(max(1, pairs)):
        if k % 2:
            mine.append(timed(step))
            ref.append(timed(reference))
        else:
            ref.append(timed(reference))
            mine.append(timed(step))
    ratios = [a / b for a, b in zip(mine, ref)]
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return Paired(
        seconds=statistics.median(mine),
        reference_seconds=statistics.median(ref),
        ratio=statistics.median(ratios),
        pairs=len(mine),
        ratio_quartiles=(quartiles[0], quartiles[2]),
    )


def _distinct_bytes(tensors: Sequence[Any]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())
