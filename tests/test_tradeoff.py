"""`remat tradeoff`: the sweep's numbers are the simulator's, its frontier is exactly the
non-dominated plans, its CSV and JSON agree, and the CLI output fits 80 columns."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli import generators, training
from remat_cli.budget import parse_budget, parse_budget_list
from remat_cli.cli import cli
from remat_cli.errors import InputError
from remat_cli.loaders import remat_json
from remat_cli.report.tradeoff import CSV_FIELDS, tradeoff_to_csv, tradeoff_to_json
from remat_cli.sweep import pareto_mask, smallest_budget, sweep, sweep_budgets
from remat_cli.planner import make_plan
from remat_cli.simulate import simulate
from remat_cli.strategies import STRATEGIES, get_strategy
from remat_cli.units import say

from conftest import EVERY_KTH


def _graph(kind: str = "unet"):
    if kind == "unet":
        fwd = generators.unet(2, base_mem=1 << 16)
    else:
        fwd = generators.chain(9, mem=np.arange(1, 10) * 1000, cost=np.arange(1, 10).astype(float))
    return training.checkmate_training_graph(fwd)


@pytest.fixture(scope="module")
def unet_sweep():
    g = _graph("unet")
    return g, sweep(g, [get_strategy("store-all"), EVERY_KTH], points=7)


def _dominated(a, b) -> bool:
    """b dominates a."""
    return b[0] <= a[0] and b[1] <= a[1] and b != a


def test_numbers_equal_the_simulator(unet_sweep):
    g, t = unet_sweep
    doc = tradeoff_to_json(t)
    assert doc["lower_bound_bytes"] == g.lb
    strategies = {"store-all": get_strategy("store-all"), "every-kth": EVERY_KTH}
    checked = 0
    for p in doc["points"]:
        if not p["fits"]:
            assert p["peak_bytes"] is None and p["cost"] is None
            continue
        s = strategies[p["strategy"]]
        result = s.run(g, p["budget_bytes"] if s.uses_budget else None, {})
        m = simulate(g, result.schedule).metrics
        assert m is not None
        assert p["peak_bytes"] == m.peak_bytes <= p["budget_bytes"]
        assert p["cost"] == m.cost
        assert p["overhead"] == pytest.approx(m.overhead)
        assert p["recomputations"] == m.recomputations
        assert p["est_seconds"] == m.est_seconds
        checked += 1
    assert checked >= 2  # store-all at 1.0x and every-kth somewhere below
    ref = simulate(g, get_strategy("store-all").run(g, None, {}).schedule).metrics
    assert doc["store_all_peak_bytes"] == ref.peak_bytes
    assert doc["base_cost"] == ref.base_cost


def test_budgets_span_lb_to_store_all(unet_sweep):
    g, t = unet_sweep
    assert t.budgets[0] == t.store_all_peak_bytes and t.budgets[-1] == g.lb
    assert list(t.budgets) == sorted(set(t.budgets), reverse=True) and len(t.budgets) == 7
    assert sweep_budgets(10, 10, 5) == [10]
    assert sweep_budgets(0, 100, 3) == [100, 50, 0]
    with pytest.raises(InputError):
        sweep_budgets(0, 100, 0)


def test_store_all_is_judged_against_each_budget(unet_sweep):
    _, t = unet_sweep
    peak = t.store_all_peak_bytes
    for b in t.budgets:
        p = t.point(b, "store-all")
        assert p.fits == (b >= peak)
        if b < t.lower_bound_bytes:
            assert p.status == "below-lb"


def test_frontier_is_exactly_the_non_dominated_plans(unet_sweep):
    _, t = unet_sweep
    fit = [(p.peak_bytes, p.cost) for p in t.points if p.fits]
    for p in t.points:
        if not p.fits:
            assert not p.on_frontier
            continue
        me = (p.peak_bytes, p.cost)
        assert p.on_frontier == (not any(_dominated(me, q) for q in fit))
    front = [(p.peak_bytes, p.cost) for p in t.frontier]
    assert front == sorted(front)
    costs = [c for _, c in front]
    assert all(a >= b for a, b in zip(costs, costs[1:]))  # more memory never costs more


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.tuples(st.integers(0, 6), st.integers(0, 6))), max_size=25))
def test_pareto_mask_matches_brute_force(points):
    pts = [None if p is None else (p[0], float(p[1])) for p in points]
    mask = pareto_mask(pts)
    valid = [p for p in pts if p is not None]
    for p, m in zip(pts, mask):
        expected = p is not None and not any(_dominated(p, q) for q in valid)
        assert bool(m) == expected


def test_smallest_budget_each_strategy_meets(unet_sweep):
    g, t = unet_sweep
    for best in t.best:
        fits = [p for p in t.points if p.strategy == best.strategy and p.fits]
        assert best.fits == len(fits)
        assert best.smallest_swept_budget_bytes == min(p.budget_bytes for p in fits)
        assert best.lowest_peak_bytes <= min(p.peak_bytes for p in fits)
        # the searched figure, not a grid point: the one `plan` and `check` name too
        strat = EVERY_KTH if best.strategy == "every-kth" else get_strategy(best.strategy)
        found = smallest_budget(g, strat)
        assert best.smallest_budget_bytes == found.budget_bytes
        assert best.search_failed_bytes == found.failed_bytes and best.search in ("exact", "bisection")
        assert make_plan(g, strat, best.smallest_budget_bytes).metrics.peak_bytes <= best.smallest_budget_bytes
        assert best.lowest_peak_bytes == min([found.peak_bytes] + [p.peak_bytes for p in fits])
    sa = next(b for b in t.best if b.strategy == "store-all")
    assert sa.smallest_budget_bytes == t.store_all_peak_bytes and sa.overhead_at_lowest == 0.0
    kth = next(b for b in t.best if b.strategy == "every-kth")
    assert kth.smallest_budget_bytes < t.store_all_peak_bytes  # it does trade compute for memory
    assert kth.overhead_at_lowest > 0


def test_csv_parses_back_to_the_json(unet_sweep):
    _, t = unet_sweep
    rows = list(csv.DictReader(io.StringIO(tradeoff_to_csv(t))))
    doc = tradeoff_to_json(t)
    assert tuple(rows[0].keys()) == CSV_FIELDS
    assert len(rows) == len(doc["points"]) == len(t.budgets) * len(t.strategies)
    for row, p in zip(rows, doc["points"]):
        assert int(row["budget_bytes"]) == p["budget_bytes"]
        assert row["strategy"] == p["strategy"] and row["status"] == p["status"]
        assert float(row["budget_ratio"]) == p["budget_ratio"]
        assert (row["on_frontier"] == "true") == p["on_frontier"]
        if p["fits"]:
            assert int(row["peak_bytes"]) == p["peak_bytes"]
            assert float(row["cost"]) == p["cost"]
            assert float(row["overhead"]) == p["overhead"]
            assert int(row["recomputations"]) == p["recomputations"]
        else:
            assert row["peak_bytes"] == row["cost"] == ""


def test_explicit_budgets_resolve_against_store_all():
    g = _graph("chain")
    budgets = parse_budget_list("0.9x, 50%,1.0x, 123456")
    t = sweep(g, [get_strategy("store-all")], budgets)
    ref = t.store_all_peak_bytes
    expect = {parse_budget(x).resolve(ref) for x in ("0.9x", "50%", "1.0x", "123456")}
    assert set(t.budgets) == expect
    assert t.point(ref, "store-all").fits
    for bad in ("", "none", "0.9x,lots"):
        with pytest.raises(InputError):
            parse_budget_list(bad)


def test_strategy_errors_are_reported_not_raised():
    from remat_cli.errors import InputError as IE
    from remat_cli.strategies import Strategy

    def refuse(graph, budget, options, context):
        raise IE("refuses this graph")

    boom = Strategy("refuser", "test", refuse, uses_budget=True)
    g = _graph("chain")
    t = sweep(g, [get_strategy("store-all"), boom], points=3)
    pts = [p for p in t.points if p.strategy == "refuser"]
    assert all(p.status in ("error", "below-lb") for p in pts) and any(p.status == "error" for p in pts)
    assert next(b for b in t.best if b.strategy == "refuser").smallest_budget_bytes is None


# ------------------------------------------------------------------ CLI
@pytest.fixture
def graph_file(tmp_path, monkeypatch):
    monkeypatch.setitem(STRATEGIES, EVERY_KTH.name, EVERY_KTH)
    path = tmp_path / "unet.json"
    path.write_text(remat_json.dumps(_graph("unet")))
    return path


def test_cli_json_csv_and_table(graph_file):
    runner = CliRunner()
    args = ["tradeoff", str(graph_file), "--strategies", "store-all,every-kth", "--points", "5"]
    res = runner.invoke(cli, args + ["--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["strategies"] == ["store-all", "every-kth"] and len(doc["budgets"]) == 5
    res_csv = runner.invoke(cli, args + ["--format", "csv"])
    assert res_csv.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(res_csv.output)))
    assert [int(r["peak_bytes"]) for r in rows if r["status"] == "fit"] == [p["peak_bytes"] for p in doc["points"] if p["fits"]]
    res_t = runner.invoke(cli, args)
    assert res_t.exit_code == 0
    out = res_t.output
    assert "\x1b[" not in out  # plain when piped
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "Pareto frontier" in out and "smallest budget each strategy meets" in out
    assert "no fit" in out and "*" in out


def test_cli_table_splits_many_strategies_to_fit_80_columns(graph_file, monkeypatch):
    from dataclasses import replace

    for i in range(6):
        clone = replace(EVERY_KTH, name=f"every-kth-clone-{i}")
        monkeypatch.setitem(STRATEGIES, clone.name, clone)
    names = ",".join(["store-all"] + [f"every-kth-clone-{i}" for i in range(6)])
    res = CliRunner().invoke(cli, ["tradeoff", str(graph_file), "-S", names, "-n", "3"])
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    for i in range(6):
        assert f"every-kth-clone-{i}" in res.output


def test_cli_bad_input_is_one_line_exit_2(graph_file, tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["tradeoff", str(graph_file), "-S", "nope"])
    assert res.exit_code == 2 and "unknown strategy 'nope'" in res.output
    res = runner.invoke(cli, ["tradeoff", str(graph_file), "--budgets", "0.5x,huge"])
    assert res.exit_code == 2 and "cannot read budget" in res.output
    res = runner.invoke(cli, ["tradeoff", str(graph_file), "--plot", str(tmp_path / "x.gif")])
    assert res.exit_code == 2 and ".png, .svg or .pdf" in res.output
    assert "Traceback" not in res.output


def test_cli_default_uses_fast_strategies(graph_file):
    res = CliRunner().invoke(cli, ["tradeoff", str(graph_file), "-n", "2", "--format", "json"])
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert doc["strategies"] == [s.name for s in STRATEGIES.values() if s.fast]
    assert all(math.isfinite(b["ratio"]) for b in doc["budgets"])
    assert re.fullmatch(r"[0-9a-f]{64}", doc["graph"]["sha256"])


@settings(max_examples=10, deadline=None)
@given(st.integers(3, 12), st.floats(0.1, 0.6), st.integers(0, 10_000), st.integers(2, 6))
def test_sweeps_of_random_graphs_agree_with_the_simulator(n, p, seed, points):
    g = training.checkmate_training_graph(generators.random_dag(n, p, seed=seed, max_size=7))
    t = sweep(g, [get_strategy("store-all"), EVERY_KTH], points=points)
    fit = [(q.peak_bytes, q.cost) for q in t.points if q.fits]
    for q in t.points:
        assert g.lb <= q.budget_bytes <= t.store_all_peak_bytes
        if q.fits:
            s = EVERY_KTH if q.strategy == "every-kth" else get_strategy("store-all")
            m = simulate(g, s.run(g, q.budget_bytes, {}).schedule).metrics
            assert (q.peak_bytes, q.cost, q.recomputations) == (m.peak_bytes, m.cost, m.recomputations)
            assert m.peak_bytes <= q.budget_bytes
            assert q.on_frontier == (not any(_dominated((q.peak_bytes, q.cost), r) for r in fit))
    assert t.point(t.store_all_peak_bytes, "store-all").fits


def test_budgets_below_the_lower_bound_are_marked(graph_file):
    res = CliRunner().invoke(cli, ["tradeoff", str(graph_file), "--budgets", "1.0x,100", "-S", "store-all,every-kth", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    low = [p for p in doc["points"] if p["budget_bytes"] == 100]
    assert len(low) == 2 and all(p["status"] == "below-lb" for p in low)
    table = CliRunner().invoke(cli, ["tradeoff", str(graph_file), "--budgets", "1.0x,100"])
    assert "< LB" in table.output


def test_progress_counts_every_run_once():
    g = _graph("chain")
    calls = []
    t = sweep(g, [get_strategy("store-all"), EVERY_KTH], points=4, progress=lambda d, n, label: calls.append((d, n, say(label))))
    total = 1 + len(t.budgets) + 2  # store-all ignores budgets: one run; one search each
    assert all(n == total for _, n, _ in calls)
    assert [d for d, _, _ in calls] == list(range(total + 1))
    assert calls[0][2] == "store-all" and calls[1][2].startswith("every-kth @ ")
    assert [c[2] for c in calls[-3:-1]] == ["store-all: smallest budget", "every-kth: smallest budget"]
