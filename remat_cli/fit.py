"""How much fits: the largest value of one model dimension whose training step fits a budget.

``remat fit MODEL --budget 80GiB --dim batch=?`` answers the question people ask before
"does batch 8 fit?": the largest batch (or sequence length) for which a plan fits the
budget, within an overhead limit, and what it costs against training without
recomputation.

The search probes integer values: 1, 2, 4, … (doubling) until one does not fit, then
bisects between the last value that fit and the first that did not. Every probe loads
the model with the dimension set, builds the training graph, and plans it; the plan is
replayed by the simulator (:func:`remat_cli.planner.make_plan`), so "fits" means a real
schedule peaks within the budget (and, with a limit, adds at most that much compute).

What it assumes: memory grows with the dimension, so that once a value does not fit, no
larger value does. The answer v is always a value whose plan was found to fit, and v + 1
(or the upper end of the range) always a value whose plan was not: both were probed. Only
values above v + 1 are not examined; for strategies whose plans are not monotone in the
budget (``greedy``, ``dtr``, ``auto``), a larger value might still fit.

PyTorch factories (``FILE.py:FACTORY``): :func:`factory_loader` calls
``FACTORY(NAME=v, **fixed)`` and captures one real training step at each probed value on
the CPU, so a probe's memory (and time) grows with v; a capture that fails (out of
memory, the factory raising) is that probe failing, with its one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Mapping

from remat_cli.errors import InputError, NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import make_plan
from remat_cli.units import Phrase

__all__ = ["FitPoint", "FitProbe", "FitResult", "factory_loader", "fit_dimension", "largest_fitting"]

#: the largest value the search tries unless told otherwise (2^20)
DEFAULT_MAX_VALUE = 1 << 20


@dataclass(frozen=True)
class FitPoint:
    """A plan at one value of the dimension: what it peaks at and what it costs."""

    value: int
    strategy: str  # the strategy whose plan it is (auto: the winner)
    peak_bytes: int
    overhead: float
    est_seconds: float | None
    nodes: int

    @property
    def throughput(self) -> float | None:
        """Values per estimated second of the step (samples/s for a batch dimension)."""
        return self.value / self.est_seconds if self.est_seconds else None


@dataclass(frozen=True)
class FitProbe:
    """One probe of the search: the value, whether it fit, and why not."""

    value: int
    fits: bool
    reason: str  # "" when it fits; else no plan fits / overhead above the limit / the load error


@dataclass(frozen=True)
class FitResult:
    """The answer of :func:`fit_dimension`, for the chosen strategy and for store-all."""

    dim: str
    budget_bytes: int
    max_overhead: float | None
    strategy: str
    max_value: int
    min_value: int
    best: FitPoint | None  # largest value that fits with the strategy (None: not even min_value)
    store_all: FitPoint | None  # largest value that fits without recomputation
    first_too_large: int | None  # best.value + 1 (or None when best reached max_value)
    probes: tuple[FitProbe, ...]
    store_all_probes: tuple[FitProbe, ...]

    @property
    def throughput_gain(self) -> float | None:
        """(value / est. step time) of ``best`` over that of ``store_all``, minus 1."""
        if self.best is None or self.store_all is None:
            return None
        a, b = self.best.throughput, self.store_all.throughput
        return a / b - 1.0 if a is not None and b else None


def largest_fitting(fits: Callable[[int], bool], max_value: int, min_value: int = 1) -> tuple[int, int | None]:
    """Largest v in [min_value, max_value] with ``fits(v)``, by doubling from ``min_value``
    then bisection, assuming ``fits`` is true up to some value and false beyond;
    (min_value - 1, min_value) when ``fits(min_value)`` is false.

    Returns (v, the smallest value probed above v that did not fit, or None when v is
    max_value). O(log(v / min_value)) probes.
    """
    if max_value < min_value or not fits(min_value):
        return min_value - 1, min_value
    lo = min_value
    while True:
        nxt = min(2 * lo, max_value)
        if nxt == lo:
            return lo, None
        if not fits(nxt):
            hi = nxt
            break
        lo = nxt
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def fit_dimension(
    load: Callable[[int], Graph],
    dim: str,
    budget_bytes: int,
    *,
    strategy: str = "auto",
    max_overhead: float | None = None,
    max_value: int = DEFAULT_MAX_VALUE,
    min_value: int = 1,
    progress: Callable[[Phrase], None] | None = None,
) -> FitResult:
    """Largest value of ``dim`` whose plan with ``strategy`` fits ``budget_bytes`` (with at
    most ``max_overhead`` extra compute), and the largest that fits with store-all.

    ``load(v)`` returns the graph to plan with the dimension set to v. A load error at
    ``min_value`` is raised (bad input); above it, it is recorded as a probe that does not fit
    (e.g. a size limit reached), with its message.
    """
    if not 1 <= min_value <= max_value:
        raise InputError(f"--min-value {min_value} must be between 1 and --max-value {max_value}")
    if budget_bytes <= 0:
        raise InputError("remat fit needs a positive absolute budget, e.g. --budget 80GiB")
    graphs: dict[int, Graph] = {}
    progress = progress or (lambda _msg: None)

    def graph_at(v: int) -> Graph | str:
        if v not in graphs:
            try:
                graphs[v] = load(v)
            except InputError as exc:
                if v == min_value:
                    raise
                return f"cannot load with {dim}={v}: {exc.message}"
        return graphs[v]

    def search(name: str, limit: float | None) -> tuple[FitPoint | None, int | None, tuple[FitProbe, ...]]:
        points: dict[int, FitPoint] = {}
        probes: list[FitProbe] = []

        def fits(v: int) -> bool:
            progress(Phrase("{}: {}={}", (name, dim, v)))
            g = graph_at(v)
            if isinstance(g, str):
                probes.append(FitProbe(v, False, g))
                return False
            try:
                plan = make_plan(g, name, budget_bytes)
            except NoPlanError:
                probes.append(FitProbe(v, False, "no plan fits the budget"))
                return False
            m = plan.metrics
            if limit is not None and m.overhead > limit + 1e-12:
                probes.append(FitProbe(v, False, f"overhead {m.overhead:.1%} above the limit"))
                return False
            winner = str((plan.info or {}).get("winner") or plan.strategy)
            points[v] = FitPoint(v, winner, m.peak_bytes, m.overhead, m.est_seconds, g.n)
            probes.append(FitProbe(v, True, ""))
            return True

        v, above = largest_fitting(fits, max_value, min_value)
        return points.get(v), above, tuple(probes)

    best, above, probes = search(strategy, max_overhead)
    if strategy == "store-all":
        sa, sa_probes = best, probes
    else:
        sa, _, sa_probes = search("store-all", None)
    return FitResult(
        dim=dim,
        budget_bytes=budget_bytes,
        max_overhead=max_overhead,
        strategy=strategy,
        max_value=max_value,
        min_value=min_value,
        best=best,
        store_all=sa,
        first_too_large=above,
        probes=probes,
        store_all_probes=sa_probes,
    )


def factory_loader(
    spec: str, dim: str, fixed: Mapping[str, Any] | None = None, *, device: str = "cpu", max_nodes: int | None = None
) -> Callable[[int], Graph]:
    """``load(v)`` for :func:`fit_dimension` from a PyTorch factory ``FILE.py:FACTORY``.

    ``load(v)`` runs ``FACTORY(dim=v, **fixed)`` (executing FILE.py) and captures its
    training step (:func:`remat_cli.torch._capture.capture_program`: one real step on
    ``device``, memory growing with v). Every failure, including running out of memory
    and the factory or the export raising, is one :class:`InputError` line; the model and
    its tensors are dropped before returning, so a probe holds only its graph.
    """
    from remat_cli.torch import require_torch

    require_torch("remat fit FILE.py:FACTORY")
    import gc

    from remat_cli.torch._capture import capture_program
    from remat_cli.torch.fidelity import load_factory

    base = dict(fixed or {})

    def load(v: int) -> Graph:
        kwargs = {**base, dim: v}
        call = f"{spec.rpartition(':')[2]}({', '.join(f'{k}={x}' for k, x in kwargs.items())})"
        try:
            model, inputs, loss_fn = load_factory(spec, device, kwargs)
            graph, _ = capture_program(model, inputs, loss_fn, factory=f"{spec} as {call}")
        except InputError:
            raise
        except MemoryError:
            raise InputError(f"{spec}: out of memory capturing {call} (raise --max-memory or lower --max-value)") from None
        except Exception as exc:  # torch's out-of-memory is a RuntimeError; the user's code raises anything
            text = (str(exc).strip().splitlines() or [""])[0][:200]
            raise InputError(f"{spec}: capturing {call} raised {type(exc).__name__}: {text}") from None
        finally:
            model = inputs = loss_fn = None  # noqa: F841 - free the step's tensors before the next probe
            gc.collect()
        if max_nodes is not None and graph.n > max_nodes:
            raise InputError(f"{spec}: {call} captures {graph.n} nodes, more than --max-nodes {max_nodes}")
        return graph

    return load
