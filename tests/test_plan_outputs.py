"""`remat plan` reports and outputs: the JSON report's figures are the simulator's, the
Chrome trace's memory counter is the simulator's per-step memory, the DOT file styles
exactly the kept / recomputed / skipped / target nodes, and plots are real images."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli import generators, training
from remat_cli.cli import cli
from remat_cli.errors import NoPlanError
from remat_cli.loaders import remat_json
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.report.dot import plan_to_dot
from remat_cli.report.facts import step_categories
from remat_cli.report.tables import plan_report_json, render_plan
from remat_cli.report.trace import trace_events
from remat_cli.schedule import COMPUTE
from remat_cli.simulate import simulate
from remat_cli.strategies import STRATEGIES

import trace_reference
from conftest import EVERY_KTH

ROOT = Path(__file__).resolve().parents[1]


def _train(fwd):
    return training.checkmate_training_graph(fwd)


def _tight_plan(graph):
    """every-kth at the smallest budget it meets among a few ratios (so it recomputes)."""
    ref = make_plan(graph, "store-all").metrics.peak_bytes
    for ratio in (0.6, 0.7, 0.8, 0.9):
        try:
            return make_plan(graph, EVERY_KTH, int(ratio * ref))
        except NoPlanError:  # this test strategy cannot meet every budget
            continue
    return make_plan(graph, EVERY_KTH, None)


@pytest.fixture(scope="module")
def plan():
    fwd = generators.unet(2, base_mem=1 << 16)
    secs = fwd.cost * 1e-6
    # same graph with a time model, so est. seconds are reported

    fwd = fwd.with_arrays(ops=["Conv"] * fwd.n, seconds=secs, fixed_mem=1 << 18, name="unet2")
    p = _tight_plan(_train(fwd))
    assert p.metrics.recomputations > 0
    return p


# ------------------------------------------------------------------ report
def test_report_json_equals_simulator(plan):
    doc = plan_report_json(plan)
    sim = simulate(plan.graph, plan.schedule)
    m = sim.metrics
    assert doc["metrics"]["peak_bytes"] == m.peak_bytes
    assert doc["metrics"]["fixed_bytes"] == plan.graph.fixed_mem == m.fixed_bytes
    assert doc["activation_peak_bytes"] == m.peak_bytes - m.fixed_bytes
    assert doc["metrics"]["lower_bound_bytes"] == plan.graph.lb
    assert doc["metrics"]["cost"] == m.cost and doc["metrics"]["base_cost"] == m.base_cost
    assert doc["metrics"]["overhead"] == pytest.approx(m.overhead)
    assert doc["metrics"]["est_seconds"] == pytest.approx(m.est_seconds)
    assert doc["metrics"]["recomputations"] == m.recomputations
    assert doc["base_seconds"] == pytest.approx(float(plan.graph.seconds[plan.graph.needed].sum()))
    counts = np.bincount(plan.schedule.compute_nodes, minlength=plan.graph.n)
    assert doc["recomputed_values"] == int((counts > 1).sum())
    most = doc["recomputed_most"]
    assert most and len(most) <= 5
    for r in most:
        v = plan.graph.index[r["node"]]
        assert r["computes"] == counts[v] > 1 and r["bytes"] == plan.graph.mem[v] and r["op"] == "Conv"
    ranked = sorted(((-c, -int(plan.graph.mem[v])) for v, c in enumerate(counts) if c > 1))
    assert [(-r["computes"], -r["bytes"]) for r in most] == ranked[: len(most)]
    fw = doc["forward_kept"]
    fwd_mask = np.array([k == "forward" for k in plan.graph.kinds])
    assert fw["nodes"] == int(fwd_mask.sum())
    assert fw["kept_nodes"] == int((fwd_mask & (counts == 1)).sum()) < fw["nodes"]
    assert fw["kept_bytes"] == int(plan.graph.mem[fwd_mask & (counts == 1)].sum())


def test_store_all_keeps_the_whole_forward_pass():
    g = _train(generators.chain(6))
    doc = plan_report_json(make_plan(g, "store-all"))
    assert doc["forward_kept"]["fraction"] == 1.0 and doc["recomputed_most"] == []


def test_report_is_the_plan_document_without_its_schedule(plan):
    from remat_cli.plandoc import plan_to_json

    doc = plan_to_json(plan)
    doc.pop("schedule")
    report = plan_report_json(plan)
    assert list(report)[: len(doc)] == list(doc)  # same keys in the same order, then the facts
    assert {k: report[k] for k in doc} == doc


def test_the_report_replays_no_plan_the_planner_replayed(plan, monkeypatch):
    """Tables and JSON need no per-step replay (the planner validated the plan); the
    timeline and the trace replay it on first use, once, to the simulator's memory."""
    from rich.console import Console

    import remat_cli.report.facts as facts_mod

    calls = []
    real = facts_mod.simulate
    monkeypatch.setattr(facts_mod, "simulate", lambda *a, **k: calls.append(k) or real(*a, **k))
    facts = facts_mod.plan_facts(plan)
    plan_report_json(plan, facts)
    render_plan(plan, Console(file=open(os.devnull, "w")), facts)
    assert calls == []
    want = simulate(plan.graph, plan.schedule, per_step=True).memory.tolist()
    assert facts.memory.tolist() == want and facts.memory.tolist() == want
    assert calls == [{"per_step": True}]


def test_render_plan_fits_80_columns(plan):
    from rich.console import Console

    buf = Console(width=80, record=True, file=open(os.devnull, "w"))
    render_plan(plan, buf)
    text = buf.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for word in ("fixed", "activations", "lower bound", "overhead", "est. seconds", "forward kept", "values recomputed most"):
        assert word in text


# ------------------------------------------------------------------ trace
def _check_trace(plan, doc):
    sim = simulate(plan.graph, plan.schedule, per_step=True)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [e["args"]["bytes"] for e in counters] == sim.memory.tolist()
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    compute = plan.schedule.compute_nodes.tolist()
    assert [plan.graph.index[e["name"]] for e in slices] == compute
    ts = [e["ts"] for e in slices]
    assert ts == sorted(ts) and all(e["dur"] >= 0 for e in slices)
    seen = set()
    for e, v in zip(slices, compute):
        assert e["args"]["recompute"] == (v in seen)
        seen.add(v)
    assert max(e["args"]["bytes"] for e in counters) == sim.metrics.peak_bytes


def test_trace_counter_is_the_simulators_memory(plan, tmp_path):
    from remat_cli.report.trace import write_trace

    path = write_trace(plan, tmp_path / "t.json")
    doc = json.loads(path.read_text())
    _check_trace(plan, doc)
    assert doc["otherData"]["time"] == "estimated seconds"


@settings(max_examples=12, deadline=None)
@given(st.integers(4, 14), st.floats(0.1, 0.5), st.integers(0, 10_000))
def test_trace_and_dot_on_random_graphs(n, p, seed):
    g = _train(generators.random_dag(n, p, seed=seed, max_size=5))
    plan = _tight_plan(g)
    _check_trace(plan, json.loads(json.dumps(trace_events(plan))))
    _check_dot(plan, plan_to_dot(plan))
    cats = step_categories(plan)
    assert len(cats) == int((plan.schedule.ops == COMPUTE).sum())
    assert cats.count("backward") == sum(1 for k in g.kinds if k == "backward")


# ------------------------------------------------------------------ DOT
def _check_dot(plan, text):
    g = plan.graph
    assert text.startswith("digraph ") and text.rstrip().endswith("}")
    node_lines = re.findall(r"^  n(\d+) \[(.*)\];$", text, flags=re.M)
    edge_lines = re.findall(r"^  n(\d+) -> n(\d+);$", text, flags=re.M)
    assert len(node_lines) == g.n and len(edge_lines) == g.num_edges
    src, dst = g.edges()
    assert sorted((int(a), int(b)) for a, b in edge_lines) == sorted(zip(src.tolist(), dst.tolist()))
    counts = np.bincount(plan.schedule.compute_nodes, minlength=g.n)
    for v, attrs in node_lines:
        v = int(v)
        role = re.search(r'class="(\w+)"', attrs).group(1)
        assert role == ("skipped" if counts[v] == 0 else "kept" if counts[v] == 1 else "recomputed")
        assert ("peripheries=2" in attrs) == (v in set(g.targets.tolist()))
        assert attrs.count('"') % 2 == 0


def test_dot_styles(plan, tmp_path):
    from remat_cli.report.dot import write_dot

    text = write_dot(plan, tmp_path / "g.dot").read_text()
    _check_dot(plan, text)
    assert 'class="recomputed"' in text and 'class="kept"' in text


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_dot_parses_with_a_real_dot_parser(plan):
    pydot = pytest.importorskip("pydot")
    (parsed,) = pydot.graph_from_dot_data(plan_to_dot(plan))
    g = plan.graph
    nodes = {n.get_name(): n for n in parsed.get_nodes() if n.get_name() not in ("node", "edge", "graph")}
    assert len(nodes) == g.n and len(parsed.get_edges()) == g.num_edges
    counts = np.bincount(plan.schedule.compute_nodes, minlength=g.n)
    roles = {name: node.get("class").strip('"') for name, node in nodes.items()}
    assert sum(r == "recomputed" for r in roles.values()) == int((counts > 1).sum())
    assert sum(r == "kept" for r in roles.values()) == int((counts == 1).sum())
    assert sum(1 for n in nodes.values() if n.get("peripheries") == "2") == g.targets.size
    v = int(np.argmax(counts))
    assert nodes[f"n{v}"].get("label").strip('"').split("\\n")[0] == g.ids[v]


def test_dot_escapes_awkward_ids():
    from remat_cli.graph import NodeSpec, Graph

    g = Graph.from_nodes([NodeSpec('a"b\\', mem=1, cost=1), NodeSpec("c\nd", inputs=['a"b\\'], mem=1, cost=1)])
    text = plan_to_dot(make_plan(g, "store-all"))
    assert 'a\\"b\\\\' in text and "c\\nd" in text
    assert len(re.findall(r"^  n\d+ \[", text, flags=re.M)) == 2


# ------------------------------------------------------------------ plots
def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_svg(path: Path) -> bool:
    import xml.etree.ElementTree as ET

    return ET.parse(path).getroot().tag == "{http://www.w3.org/2000/svg}svg"


def test_timeline_png_and_svg(plan, tmp_path):
    pytest.importorskip("matplotlib")
    from remat_cli.report.plots import plot_timeline

    png = plot_timeline(plan, tmp_path / "t.png")
    svg = plot_timeline(plan, tmp_path / "t.svg")
    assert _is_png(png) and png.stat().st_size > 10_000
    assert _is_svg(svg) and svg.stat().st_size > 10_000
    assert "budget" in svg.read_text() and "recompute" in svg.read_text()


def test_tradeoff_plot_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib")
    from remat_cli.report.plots import plot_tradeoff
    from remat_cli.sweep import sweep
    from remat_cli.strategies import get_strategy

    t = sweep(_train(generators.unet(2, base_mem=1 << 16)), [get_strategy("store-all"), EVERY_KTH], points=5)
    png = plot_tradeoff(t, tmp_path / "t.png")
    svg = plot_tradeoff(t, tmp_path / "t.svg")
    assert _is_png(png) and png.stat().st_size > 10_000
    assert _is_svg(svg) and svg.stat().st_size > 10_000
    text = svg.read_text()
    assert "every-kth" in text and "Pareto frontier" in text and "lower bound" in text


def test_cli_plan_writes_all_outputs_headless(tmp_path):
    """The real CLI in a fresh process without a display: Agg only, never pyplot."""
    pytest.importorskip("matplotlib")
    g = tmp_path / "g.json"
    g.write_text(remat_json.dumps(_train(generators.unet(2, base_mem=1 << 16))))
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = str(ROOT)
    code = (
        "import sys\n"
        "from remat_cli.cli import cli\n"
        "try:\n"
        "    cli.main(sys.argv[1:], prog_name='remat', standalone_mode=False)\n"
        "finally:\n"
        "    import matplotlib\n"
        "    assert 'matplotlib.pyplot' not in sys.modules\n"
        "    print('backend-ok')\n"
    )
    out = {s: tmp_path / f"o.{s}" for s in ("png", "json", "dot")}
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "plan",
            str(g),
            "--budget",
            "1.0x",
            "--timeline",
            str(out["png"]),
            "--trace",
            str(out["json"]),
            "--dot",
            str(out["dot"]),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "backend-ok" in res.stdout and "timeline written to" in res.stdout
    assert _is_png(out["png"]) and json.loads(out["json"].read_text())["traceEvents"]
    assert out["dot"].read_text().startswith("digraph")


def test_without_matplotlib_plots_say_how_to_install(tmp_path, monkeypatch):
    g = tmp_path / "g.json"
    g.write_text(remat_json.dumps(_train(generators.chain(5))))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    runner = CliRunner()
    for args in (["plan", str(g), "--timeline", str(tmp_path / "t.png")], ["tradeoff", str(g), "--plot", str(tmp_path / "p.svg")]):
        res = runner.invoke(cli, args)
        assert res.exit_code == 2
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "pip install 'remat-cli[plot]'" in lines[0]
    assert not (tmp_path / "t.png").exists() and not (tmp_path / "p.svg").exists()
    # everything else still works
    res = runner.invoke(cli, ["plan", str(g), "--trace", str(tmp_path / "t.json"), "--dot", str(tmp_path / "g.dot")])
    assert res.exit_code == 0 and (tmp_path / "t.json").exists() and (tmp_path / "g.dot").exists()
    res = runner.invoke(cli, ["tradeoff", str(g), "-n", "3"])
    assert res.exit_code == 0 and "Pareto frontier" in res.output


def test_cli_plan_json_report(tmp_path, monkeypatch):
    monkeypatch.setitem(STRATEGIES, EVERY_KTH.name, EVERY_KTH)
    g = tmp_path / "g.json"
    graph = _train(generators.unet(2, base_mem=1 << 16))
    g.write_text(remat_json.dumps(graph))
    res = CliRunner().invoke(
        cli, ["plan", str(g), "-s", "every-kth", "--budget", "0.9x", "--format", "json", "--trace", str(tmp_path / "t.json")]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["strategy"] == "every-kth" and doc["fits"] and doc["metrics"]["peak_bytes"] <= doc["budget_bytes"]
    assert "trace written" in res.stderr


def test_store_all_time_overhead_reads_zero(tmp_path):

    fwd = generators.chain(7, cost=np.linspace(0.1, 0.7, 7))
    fwd = fwd.with_arrays(seconds=fwd.cost * 0.1)
    g = tmp_path / "g.json"
    g.write_text(remat_json.dumps(_train(fwd)))
    res = CliRunner().invoke(cli, ["plan", str(g)])
    line = next(x for x in res.output.splitlines() if x.startswith("est. seconds"))
    assert line.rstrip().endswith("+0 s)"), line


_IDS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6) | st.sampled_from(
    ['"', "\\", "\x1b", "é", "名", "\U0001f642", ""]
)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 14),
    seed=st.integers(0, 1000),
    ids=st.lists(_IDS, min_size=14, max_size=14),
    strategy=st.sampled_from(["store-all", "chen-sqrt", "chain-dp", "dtr"]),
    load=st.none() | st.just({"dims": {"batch": 8}, "training": True}),
)
def test_the_plan_writer_writes_what_json_dumps_writes(n, seed, ids, strategy, load):
    """write_plan assembles the schedule's lines itself (json's indenting encoder is pure
    Python: 0.66 s for 300k steps); the file is json.dumps(doc, indent=1) byte for byte,
    whatever the ids hold (quotes, backslashes, controls, non-ASCII), and reads back."""
    from remat_cli.graph import Graph, NodeSpec
    from remat_cli.plandoc import plan_json_text, plan_to_json

    fwd = generators.random_dag(n, 0.3, seed=seed)
    names = [f"{x}#{k}" for k, x in enumerate(ids[:n])]  # (distinct, non-empty)
    nodes = [NodeSpec(id=names[v], inputs=[names[u] for u in fwd.pred_lists[v]], mem=int(fwd.mem[v]), cost=1.0) for v in range(n)]
    g = Graph.from_nodes(nodes)
    try:
        plan = make_plan(g, strategy, int(0.8 * g.lb + 0.2 * store_all_peak(g)))
    except NoPlanError:
        plan = make_plan(g, "store-all", None)
    doc = plan_to_json(plan, load)
    text = plan_json_text(plan, load)
    assert text == json.dumps(doc, indent=1, allow_nan=False) + "\n"
    assert json.loads(text)["schedule"] == plan.schedule.named(g.ids)


# ------------------------------------------------------------------ trace text, byte for byte
_TRACE_NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=5) | st.sampled_from(
    ['"', "\\", "\x1b[1m", "é", "\U0001f642"]
)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(3, 12),
    seed=st.integers(0, 1000),
    names=st.lists(_TRACE_NAMES, min_size=12, max_size=12),
    timing=st.sampled_from(["seconds", "cost", "none"]),
    strategy=st.sampled_from(["store-all", "chen-sqrt", "dtr", "chain-dp"]),
)
def test_the_trace_text_is_what_a_dict_per_event_gave(n, seed, names, timing, strategy):
    """write_trace writes each event's JSON itself (a dict per step and json.dumps took 2.3 s
    for 300k steps): the same bytes as the dict-per-event writer it replaced, with ids, ops
    and graph names that need quoting, durations from seconds, costs or steps."""
    from remat_cli.graph import Graph, NodeSpec
    from remat_cli.report.trace import trace_text

    fwd = generators.random_dag(n, 0.3, seed=seed)
    ids = [f"{x}#{k}" for k, x in enumerate(names[:n])]
    rng = np.random.default_rng(seed)
    cost = 0.0 if timing == "none" else 1.0
    nodes = [
        NodeSpec(
            id=ids[v],
            op=names[(v + 1) % n],
            inputs=[ids[u] for u in fwd.pred_lists[v]],
            mem=int(fwd.mem[v]),
            cost=cost * float(rng.choice([0.5, 1.0, 3.25])),
            seconds=float(rng.choice([1e-7, 0.0021, 1.5])) if timing == "seconds" else None,
        )
        for v in range(n)
    ]
    g = _train(Graph.from_nodes(nodes, name=names[0] + "g"))
    try:
        plan = make_plan(g, strategy, int(0.7 * store_all_peak(g)))
    except NoPlanError:
        plan = make_plan(g, "store-all", None)
    text = trace_text(plan)
    assert text == json.dumps(trace_reference.trace_events(plan), separators=(",", ":"))
    unit = {"seconds": "estimated seconds", "cost": "cost (", "none": "compute steps"}[timing]
    assert json.loads(text)["otherData"]["time"].startswith(unit)  # (each way of timing is drawn)
