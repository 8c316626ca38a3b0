"""Plot structure (issue 10, item 13): no strategy marker hides under the frontier's
marks, no panel repeats another, and legends cover neither data nor the peak label."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from remat_cli import generators, training  # noqa: E402
from remat_cli.budget import parse_budget  # noqa: E402
from remat_cli.graph import Graph  # noqa: E402
from remat_cli.planner import make_plan  # noqa: E402
from remat_cli.report.plots import seconds_follow_cost, timeline_figure, tradeoff_figure  # noqa: E402
from remat_cli.sweep import resolve_strategies, sweep  # noqa: E402

STRATEGIES = "store-all,treewidth,chain-dp,dtr"


def _graph(seconds: str) -> Graph:
    """A small U-Net training graph; seconds proportional to cost, or not."""
    g = training.checkmate_training_graph(generators.unet(2, base_mem=1 << 20, name="unet2"))
    rng = np.random.default_rng(0)
    secs = g.cost * 1e-6 if seconds == "proportional" else g.cost * 1e-6 * rng.uniform(0.2, 5.0, g.n)
    return g.with_arrays(fixed_mem=1 << 20, seconds=secs)


@pytest.fixture(scope="module")
def proportional():
    return sweep(_graph("proportional"), resolve_strategies(STRATEGIES), points=4)


def _panels(fig) -> list:
    """Data panels: axes that are not a secondary scale of another."""
    return [ax for ax in fig.axes if type(ax).__name__ != "SecondaryAxis"]


def _bbox(artist, fig):
    fig.canvas.draw()
    return artist.get_window_extent(fig.canvas.get_renderer())


def test_time_proportional_to_cost_is_a_second_scale_not_a_repeated_panel(proportional) -> None:
    assert seconds_follow_cost(proportional)
    fig = tradeoff_figure(proportional)
    (ax,) = _panels(fig)
    secondary = [a for a in ax.child_axes if type(a).__name__ == "SecondaryAxis"]
    assert len(secondary) == 1 and secondary[0].get_ylabel().startswith("est. step time")
    # the right scale maps 0% extra compute to the base step time
    base = proportional.base_seconds
    fwd = secondary[0]._functions[0]
    assert fwd(np.array([0.0]))[0] * 1.0 == pytest.approx(base / _unit_scale(secondary[0].get_ylabel()))


def _unit_scale(label: str) -> float:
    return {"(µs)": 1e-6, "(ms)": 1e-3, "(s)": 1.0, "(min)": 60.0}[label.split()[-1]]


def test_time_not_proportional_to_cost_gets_its_own_panel() -> None:
    t = sweep(_graph("roofline-like"), resolve_strategies(STRATEGIES), points=4)
    assert not seconds_follow_cost(t)
    fig = tradeoff_figure(t)
    assert [ax.get_ylabel().split(" (")[0] for ax in _panels(fig)] == ["extra compute", "est. step time"]


def test_no_marker_hides_under_the_frontier(proportional) -> None:
    fig = tradeoff_figure(proportional)
    (ax,) = _panels(fig)
    markers = [ln for ln in ax.get_lines() if isinstance(ln, Line2D) and ln.get_marker() not in (None, "None", "", " ")]
    frontier = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert markers and frontier
    top_of_frontier = max(c.get_zorder() for c in frontier)
    for ln in markers:
        assert ln.get_zorder() > top_of_frontier, ln.get_label()
        assert ln.get_markersize() >= 5, ln.get_label()
    # every strategy that has a plan has a marker in the legend
    names = {ln.get_label() for ln in markers}
    assert {p.strategy for p in proportional.points if p.fits} <= names


def test_tradeoff_legend_covers_no_panel(proportional) -> None:
    fig = tradeoff_figure(proportional)
    (legend,) = fig.legends
    box = _bbox(legend, fig)
    for ax in _panels(fig):
        assert not box.overlaps(ax.get_window_extent())


@pytest.mark.parametrize("budget", ["0.8x", "0.95x"])
def test_timeline_legend_does_not_cover_the_peak_label(budget: str) -> None:
    graph = _graph("proportional")
    plan = make_plan(graph, "treewidth", parse_budget(budget))
    fig = timeline_figure(plan)
    (ax,) = _panels(fig)
    labels = [t for t in ax.texts if t.get_gid() == "peak-label"]
    assert len(labels) == 1 and labels[0].get_text().startswith("peak ")
    label = _bbox(labels[0], fig)
    legends = list(fig.legends) + ([ax.get_legend()] if ax.get_legend() else [])
    assert legends
    for legend in legends:
        assert not label.overlaps(legend.get_window_extent())
    # the label stays inside the plot area
    area = ax.get_window_extent()
    assert area.x0 <= label.x0 and label.x1 <= area.x1 and label.y1 <= area.y1
