"""Plots of the trade-off and of a plan's memory timeline (matplotlib, optional extra).

matplotlib is imported only here and only when a plot is asked for; without it
:func:`require_matplotlib` raises one line saying how to install it. Figures are drawn on
a :class:`matplotlib.figure.Figure` with the Agg canvas, never through pyplot, so no GUI
backend or global figure state is touched and rendering works headless.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from remat_cli.errors import InputError
from remat_cli.plandoc import Plan
from remat_cli.report.facts import PlanFacts, plan_facts, step_categories
from remat_cli.sweep import Tradeoff
from remat_cli.units import fmt_bytes, fmt_pct

__all__ = [
    "require_matplotlib",
    "check_plot_path",
    "plot_tradeoff",
    "plot_timeline",
    "tradeoff_figure",
    "timeline_figure",
    "seconds_follow_cost",
    "PLOT_SUFFIXES",
    "INSTALL_HINT",
]

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
INSTALL_HINT = "pip install 'remat-cli[plot]'"

# kinds of compute step -> (label, colour) for the timeline's shaded regions
_REGIONS = {
    "forward": ("forward", "#4c72b0"),
    "recompute": ("recompute", "#dd8452"),
    "loss": ("loss", "#8c8c8c"),
    "backward": ("backward", "#55a868"),
}


def require_matplotlib(option: str = "--plot") -> None:
    """Raise :class:`InputError` (exit 2) in one line when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
        import matplotlib.figure  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise InputError(f"{option} needs matplotlib, which is not installed: {INSTALL_HINT}") from None


def check_plot_path(path: str | Path, option: str = "--plot") -> Path:
    """Refuse (exit 2) a file name whose suffix is not an image format we write."""
    p = Path(path)
    if p.suffix.lower() not in PLOT_SUFFIXES:
        raise InputError(f"{option} {p}: name the image .png, .svg or .pdf")
    return p


def plot_tradeoff(t: Tradeoff, path: str | Path) -> Path:
    """Overhead (and est. step time, when the graph has a time model) against peak memory:
    one line per strategy through its plans, the Pareto frontier highlighted, the lower
    bound and the store-all peak as vertical lines. Returns the path written.

    When every plan's step time is the base time scaled by its extra compute (seconds
    proportional to cost), a second panel would repeat the first: the step time is then a
    second scale on the right of the one panel. Otherwise it gets a panel of its own. The
    frontier is a grey band with halos drawn *under* the strategies' markers, and the
    legend sits outside the axes, so no marker is hidden.
    """
    require_matplotlib("--plot")
    out = check_plot_path(path, "--plot")
    return _save(tradeoff_figure(t), out)


def tradeoff_figure(t: Tradeoff) -> Any:
    """The matplotlib Figure that :func:`plot_tradeoff` writes."""
    scale, unit = _byte_unit(max(t.store_all_peak_bytes, t.lower_bound_bytes, 1))
    time_panel = t.has_seconds and not seconds_follow_cost(t)
    panels = 2 if time_panel else 1
    fig, axes = _figure(panels, (9.0, 3.6 * panels + 0.6))
    metrics: list[tuple[str, str, float]] = [("overhead", "extra compute (%)", 100.0)]
    if time_panel:
        sec_scale, sec_unit = _seconds_unit(max((p.est_seconds or 0.0) for p in t.points) or (t.base_seconds or 1.0))
        metrics.append(("est_seconds", f"est. step time ({sec_unit})", 1.0 / sec_scale))
    colours = _colours(len(t.strategies))
    markers = "osD^v<>phX*"
    for ax, (field, label, factor) in zip(axes, metrics):
        front = sorted({(p.peak_bytes, getattr(p, field)) for p in t.frontier if getattr(p, field) is not None})
        if front:
            fx = np.array([x for x, _ in front], dtype=float) / scale
            fy = np.array([y for _, y in front], dtype=float) * factor
            ax.step(fx, fy, where="post", color="black", lw=5, alpha=0.15, zorder=2, label="Pareto frontier")
            # a halo behind the frontier's plans: every marker stays on top of it
            ax.scatter(fx, fy, s=260, color="#f2d24b", alpha=0.55, lw=0, zorder=2.5, label="plan on the frontier")
        for k, name in enumerate(t.strategies):
            pts = sorted(
                {(p.peak_bytes, getattr(p, field)) for p in t.points if p.strategy == name and p.fits and getattr(p, field) is not None}
            )
            if not pts:
                continue
            xs = np.array([x for x, _ in pts], dtype=float) / scale
            ys = np.array([y for _, y in pts], dtype=float) * factor
            ax.plot(xs, ys, drawstyle="steps-post", lw=1.3, color=colours[k], zorder=3)
            # earlier strategies get larger markers and sit lower, so shared points show all
            ax.plot(
                xs,
                ys,
                ls="none",
                marker=markers[k % len(markers)],
                ms=max(11 - k, 5),
                color=colours[k],
                markeredgecolor="white",
                markeredgewidth=0.6,
                label=name,
                zorder=4 + k * 0.01,
            )
        ax.axvline(t.lower_bound_bytes / scale, color="#c44e52", ls="--", lw=1.2, label=f"lower bound {fmt_bytes(t.lower_bound_bytes)}")
        ax.axvline(
            t.store_all_peak_bytes / scale, color="#555555", ls=":", lw=1.4, label=f"store-all peak {fmt_bytes(t.store_all_peak_bytes)}"
        )
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        top = max((getattr(p, field) or 0.0) * factor for p in t.points)
        ax.set_ylim(0, max(top * 1.12, 5.0 if field == "overhead" else 1e-9))
    if t.has_seconds and not time_panel and t.base_seconds:
        base = float(t.base_seconds)
        sec_scale, sec_unit = _seconds_unit(base * (1 + axes[0].get_ylim()[1] / 100.0))
        axes[0].secondary_yaxis(
            "right",
            functions=(lambda pct: base * (1 + pct / 100.0) / sec_scale, lambda sec: (sec * sec_scale / base - 1) * 100.0),
        ).set_ylabel(f"est. step time ({sec_unit})")
    axes[-1].set_xlabel(f"peak memory ({unit}, fixed memory included)")
    axes[0].set_title(f"{t.graph_name}: extra compute vs peak memory", fontsize=11)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="outside right upper", framealpha=0.9)
    return fig


def seconds_follow_cost(t: Tradeoff, rel: float = 1e-6) -> bool:
    """True when every plan's est. step time is base seconds x (1 + overhead): a time
    panel would then only repeat the extra-compute panel."""
    if not t.base_seconds:
        return False
    for p in t.points:
        if p.fits and p.est_seconds is not None and p.overhead is not None:
            expected = t.base_seconds * (1 + p.overhead)
            if abs(p.est_seconds - expected) > rel * max(expected, 1e-300):
                return False
    return True


def plot_timeline(plan: Plan, path: str | Path, facts: PlanFacts | None = None) -> Path:
    """Memory at each compute step of ``plan`` (the simulator's per-step figures), with
    forward, recompute, loss and backward regions shaded, fixed memory as a band, and the
    budget and lower bound as horizontal lines. Returns the path written."""
    require_matplotlib("--timeline")
    out = check_plot_path(path, "--timeline")
    return _save(timeline_figure(plan, facts), out)


def timeline_figure(plan: Plan, facts: PlanFacts | None = None) -> Any:
    """The matplotlib Figure that :func:`plot_timeline` writes."""
    facts = facts or plan_facts(plan)
    graph = plan.graph
    is_compute = plan.schedule.ops == 0
    memory = facts.memory[is_compute]
    cats = np.array(step_categories(plan), dtype=object)
    top = max(int(memory.max()) if memory.size else 0, plan.budget_bytes or 0, graph.lb, 1)
    scale, unit = _byte_unit(top)
    fig, (ax,) = _figure(1, (8.5, 4.4))
    x = np.arange(1, memory.size + 1)
    y = memory.astype(float) / scale
    for key, (label, colour) in _REGIONS.items():
        spans = _runs(cats == key)
        if spans:
            count = int(np.count_nonzero(cats == key))
            ax.broken_barh(
                [(a + 0.5, b - a) for a, b in spans],
                (0, 1),
                transform=ax.get_xaxis_transform(),
                color=colour,
                alpha=0.18,
                lw=0,
                label=f"{label} ({count} step{'s' if count != 1 else ''})",
            )
    ax.fill_between(x, 0, y, step="mid", color="#3a3a5a", alpha=0.2, lw=0)
    ax.step(x, y, where="mid", color="#22223a", lw=1.0, label="memory")
    if graph.fixed_mem:
        ax.axhspan(
            0, graph.fixed_mem / scale, facecolor="none", edgecolor="#777777", hatch="//", lw=0, label=f"fixed {fmt_bytes(graph.fixed_mem)}"
        )
    if plan.budget_bytes is not None:
        ax.axhline(plan.budget_bytes / scale, color="#c44e52", ls="--", lw=1.3, label=f"budget {fmt_bytes(plan.budget_bytes)}")
    ax.axhline(graph.lb / scale, color="#8172b3", ls=":", lw=1.2, label=f"lower bound {fmt_bytes(graph.lb)}")
    if memory.size:
        k = int(np.argmax(memory))
        right = k > 0.75 * memory.size  # near the right edge the label goes to the left
        ax.annotate(
            f"peak {fmt_bytes(int(memory[k]))}",
            (x[k], y[k]),
            xytext=(-6 if right else 6, 4),
            textcoords="offset points",
            ha="right" if right else "left",
            fontsize=8,
            gid="peak-label",
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
        )
    ax.set_xlim(0.5, max(memory.size, 1) + 0.5)
    ax.set_ylim(0, top / scale * 1.12)
    ax.set_xlabel("compute step")
    ax.set_ylabel(f"memory ({unit})")
    m = plan.metrics
    ax.set_title(f"{graph.name}: {plan.strategy}, peak {fmt_bytes(m.peak_bytes)}, overhead {fmt_pct(m.overhead)}", fontsize=11)
    # below the axes: the legend never covers the memory curve or the peak label
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="outside lower center", ncol=4, framealpha=0.9)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# ------------------------------------------------------------------ helpers
def _figure(panels: int, size: tuple[float, float]) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0].tolist()
    return fig, axes


def _save(fig: Any, out: Path) -> Path:
    """Write the figure; metadata that changes from run to run is left out."""
    import matplotlib

    fmt = out.suffix.lower().lstrip(".")
    metadata = {"Date": None} if fmt == "svg" else ({"CreationDate": None} if fmt == "pdf" else {"Software": None})
    try:
        with matplotlib.rc_context({"svg.hashsalt": "remat"}):
            fig.savefig(out, format=fmt, metadata=metadata)
    except OSError as exc:
        raise InputError(f"{out}: cannot write: {exc.strerror or exc}") from None
    return out


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True in ``mask`` as half-open index ranges ``(start, end)``."""
    padded = np.concatenate([[False], mask.astype(bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def _byte_unit(top: int) -> tuple[float, str]:
    """The binary unit in which ``top`` bytes reads as a number between 1 and 1024."""
    for k, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB")):
        if top < 1024 ** (k + 1) or unit == "TiB":
            return float(1024**k), unit
    raise AssertionError("unreachable")


def _seconds_unit(top: float) -> tuple[float, str]:
    if top < 1e-3:
        return 1e-6, "µs"
    if top < 1:
        return 1e-3, "ms"
    if top < 120:
        return 1.0, "s"
    return 60.0, "min"


def _colours(n: int) -> list[str]:
    base = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"]
    return [base[i % len(base)] for i in range(n)]
