"""The command line, through click's runner (and once as a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_cli.cli import cli
from remat_cli.loaders import load_graph
from remat_cli.plandoc import read_plan
from remat_cli.simulate import simulate

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"
UNET = str(SAMPLES / "unet_train.json")
NON_ONNX_SAMPLES = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".json", ".txt"))


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_error_line(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("sample", NON_ONNX_SAMPLES, ids=lambda p: p.name)
def test_info_and_plan_on_every_sample(sample):
    info = run("info", str(sample), "--format", "json")
    assert info.exit_code == 0, info.output
    doc = json.loads(info.stdout)
    g = load_graph(sample)
    assert doc["nodes"] == g.n and doc["lower_bound_bytes"] == g.lb
    assert doc["store_all"]["peak_bytes"] >= g.lb
    plan = run("plan", str(sample), "--format", "json")
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["metrics"]["peak_bytes"] == doc["store_all"]["peak_bytes"]
    assert run("info", str(sample)).exit_code == 0


def test_plan_writes_a_plan_that_validates(tmp_path):
    out = tmp_path / "plan.json"
    res = run("plan", UNET, "-s", "store-all", "--budget", "1x", "-o", str(out), "--format", "json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    doc = json.loads(out.read_text())
    assert doc["format"] == "remat-plan" and doc["version"] == 1
    g = load_graph(UNET)
    assert doc["graph"]["sha256"] == g.sha256 and doc["graph"]["nodes"] == g.n
    schedule, _ = read_plan(out, g)
    m = simulate(g, schedule).metrics
    assert doc["metrics"]["peak_bytes"] == m.peak_bytes == report["metrics"]["peak_bytes"]
    assert doc["metrics"]["cost"] == m.cost and doc["metrics"]["valid"] is True
    assert doc["budget_bytes"] == m.peak_bytes and doc["budget_ratio"] == 1.0
    val = run("validate", UNET, str(out), "--format", "json")
    assert val.exit_code == 0 and json.loads(val.stdout)["peak_bytes"] == m.peak_bytes
    # and as twremat c/f text
    txt = tmp_path / "plan.txt"
    assert run("plan", UNET, "-o", str(txt)).exit_code == 0
    assert txt.read_text().splitlines()[0].startswith("c ")
    assert run("validate", UNET, str(txt)).exit_code == 0


def test_budget_below_lower_bound_names_lb_and_node():
    g = load_graph(UNET)
    line = one_error_line(run("plan", UNET, "--budget", str(g.lb - 1)), code=1)
    assert str(g.lb) in line and repr(g.ids[g.lb_node]) in line


def test_store_all_over_budget_is_not_reported_as_fitting():
    g = load_graph(UNET)
    line = one_error_line(run("plan", UNET, "-s", "store-all", "--budget", str(g.lb)), code=1)
    assert "cannot fit" in line


def test_validate_reports_first_invalid_step(tmp_path):
    out = tmp_path / "plan.json"
    assert run("plan", UNET, "-o", str(out)).exit_code == 0
    doc = json.loads(out.read_text())
    doc["schedule"].insert(3, doc["schedule"][0])  # compute the first node again while resident
    out.write_text(json.dumps(doc))
    line = one_error_line(run("validate", UNET, str(out)), code=1)
    assert "step 3" in line and "already resident" in line


def test_validate_budget_check(tmp_path):
    out = tmp_path / "plan.json"
    assert run("plan", UNET, "-o", str(out)).exit_code == 0
    assert run("validate", UNET, str(out), "--budget", "0.9x").exit_code == 1
    assert run("validate", UNET, str(out), "--budget", "1x").exit_code == 0


def test_convert_round_trip(tmp_path):
    src = SAMPLES / "diamond_dag.nodelink.json"
    out = tmp_path / "d.json"
    assert run("convert", str(src), str(out)).exit_code == 0
    a, b = load_graph(src), load_graph(out)
    assert a.sha256 == b.sha256 and a.ops == b.ops
    txt = tmp_path / "d.txt"
    assert run("convert", str(out), str(txt)).exit_code == 0
    assert txt.read_text().startswith("p remat2")
    assert load_graph(txt).n == a.n


def test_strategies_lists_store_all():
    res = run("strategies", "--format", "json")
    assert res.exit_code == 0
    assert "store-all" in {s["name"] for s in json.loads(res.stdout)}


def _graph_doc(nodes, **extra):
    return json.dumps({"format": "remat-graph", "version": 1, "nodes": nodes, **extra})


BAD_GRAPHS = {
    "empty": ("", "the file is empty"),
    "not_json": ("{not json", "not valid JSON"),
    "unknown_shape": (json.dumps({"hello": 1}), "JSON of an unknown shape"),
    "duplicate": (_graph_doc([{"id": "a", "mem": 1}, {"id": "a", "mem": 1}]), "duplicate node id 'a'"),
    "unknown_input": (_graph_doc([{"id": "a", "mem": 1, "inputs": ["ghost"]}]), "input 'ghost' names no node"),
    "cycle": (_graph_doc([{"id": "a", "mem": 1, "inputs": ["b"]}, {"id": "b", "mem": 1, "inputs": ["a"]}]), "cycle"),
    "negative": (_graph_doc([{"id": "a", "mem": -4}]), "node 'a': mem -4 is negative"),
    "nan": ('{"format": "remat-graph", "nodes": [{"id": "a", "mem": 1, "cost": NaN}]}', "node 'a': cost is nan"),
    "non_numeric": (_graph_doc([{"id": "a", "mem": "lots"}]), "node 'a': mem 'lots' is not a number"),
    "bad_target": (_graph_doc([{"id": "a", "mem": 1}], targets=["zz"]), "target 'zz' is not a node"),
    "no_nodes": (_graph_doc([]), "no nodes"),
    "missing_mem": (_graph_doc([{"id": "a"}]), 'missing "mem"'),
    "bad_twremat": ("p remat2\nnode 1 deps cpu x mem 3\n", "cpu 'x' is not a number"),
    "binary": (b"\xff\xfe\x00garbage", "not a graph file"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
@pytest.mark.parametrize("command", ["info", "plan", "convert"])
def test_bad_graph_input_one_line_exit_2(case, command, tmp_path):
    content, message = BAD_GRAPHS[case]
    path = tmp_path / f"{case}.dat"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    args = [command, str(path)] + ([str(tmp_path / "out.json")] if command == "convert" else [])
    line = one_error_line(run(*args))
    assert str(path) in line and message in line


def test_missing_file_and_directory(tmp_path):
    assert "cannot read" in one_error_line(run("info", str(tmp_path / "nope.json")))
    assert "is a directory" in one_error_line(run("info", str(tmp_path)))


@pytest.fixture
def graph_and_plan(tmp_path):
    out = tmp_path / "plan.json"
    assert run("plan", UNET, "-o", str(out)).exit_code == 0
    return tmp_path, out


def test_plan_for_another_graph_is_refused(graph_and_plan):
    tmp_path, out = graph_and_plan
    other = SAMPLES / "training_chain_32.json"
    line = one_error_line(run("validate", str(other), str(out)))
    assert "made for another graph" in line and str(out) in line


def test_plan_naming_unknown_nodes_is_refused(graph_and_plan):
    tmp_path, out = graph_and_plan
    doc = json.loads(out.read_text())
    doc["graph"].pop("sha256")
    doc["schedule"][2] = ["compute", "ghost"]
    out.write_text(json.dumps(doc))
    line = one_error_line(run("validate", UNET, str(out)))
    assert "unknown node 'ghost'" in line
    txt = tmp_path / "p.txt"
    txt.write_text("c n0\nc ghost\n")
    assert "unknown node 'ghost'" in one_error_line(run("validate", UNET, str(txt)))


@pytest.mark.parametrize("budget", ["lots", "-3GiB", "0x"])
def test_bad_budget_is_usage_error(budget):
    res = run("plan", UNET, "--budget", budget)
    assert res.exit_code == 2 and "budget" in res.output.lower() and "Traceback" not in res.output


@pytest.mark.parametrize(
    ("args", "option"), [(("plan", UNET, "--time-limit", "nan"), "--time-limit"), (("batch", UNET, "--timeout", "NaN"), "--timeout")]
)
def test_seconds_that_are_not_a_number_are_usage_errors(args, option):
    """NaN passes a range check (every comparison with it is false) and a deadline of NaN
    never passes: refused in one line, exit code 2. inf stays: no limit."""
    line = one_error_line(run(*args))
    assert option in line and "is not a number of seconds" in line
    assert run("plan", UNET, "--budget", "0.9x", "--time-limit", "inf").exit_code == 0


def test_unknown_strategy():
    assert "unknown strategy 'nope'" in one_error_line(run("plan", UNET, "--strategy", "nope"))


def test_real_subprocess_entry_points(tmp_path):
    """`python -m remat_cli` runs as a real process, with exit codes and stderr lines."""
    ok = subprocess.run([sys.executable, "-m", "remat_cli", "plan", UNET, "--budget", "1x"], capture_output=True, text=True)
    assert ok.returncode == 0 and "overhead" in ok.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    fail = subprocess.run([sys.executable, "-m", "remat_cli", "info", str(bad)], capture_output=True, text=True)
    assert fail.returncode == 2 and fail.stderr.count("\n") == 1 and "not valid JSON" in fail.stderr
    assert fail.stdout == ""


def test_standard_input_is_not_read_and_says_so(tmp_path, monkeypatch):
    """`-` names no file: one line saying stdin is not read; a file named `-` is read."""
    assert "standard input is not read: give the path of a graph file" in one_error_line(run("info", "-"))
    assert "standard input is not read: give the path of a plan file" in one_error_line(run("validate", UNET, "-"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text(Path(UNET).read_text())
    assert run("info", "-").exit_code == 0


def test_internal_errors_are_one_line_unless_debugging(monkeypatch):

    def boom(*_a, **_k):
        raise ZeroDivisionError("synthetic bug")

    monkeypatch.setattr("remat_cli.summary.summarize", boom)
    line = one_error_line(run("info", UNET), code=1)
    assert "internal error: ZeroDivisionError: synthetic bug" in line
    monkeypatch.setenv("REMAT_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        run("info", UNET)


@pytest.mark.parametrize(
    "args",
    [
        ("info", UNET),  # plain writes
        ("plan", UNET, "--budget", "0.5x", "--format", "json"),
        ("tradeoff", UNET, "--points", "2"),  # rich's console
        ("batch", UNET),
        ("--help",),  # click's own
    ],
)
def test_a_reader_that_went_away_ends_quietly(args):
    """`remat … | head`: standard output's reader is gone before anything is written. The
    run ends with exit code 1 (as rich and click end then) and writes nothing to stderr:
    no "internal error", no traceback, no "Exception ignored" at exit."""
    import os

    r, w = os.pipe()
    os.close(r)
    try:
        done = subprocess.run([sys.executable, "-m", "remat_cli", *args], stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert (done.returncode, done.stderr) == (1, "")


def test_a_broken_pipe_that_is_not_the_readers_is_an_internal_error(monkeypatch):
    """A BrokenPipeError while the output's reader is still there is a bug, said in one
    line: output to memory here, and to an open pipe in a real process (as in CI)."""

    def boom(*_a, **_k):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("remat_cli.summary.summarize", boom)
    line = one_error_line(run("info", UNET), code=1)
    assert "internal error: BrokenPipeError" in line
    code = (
        "import sys, remat_cli.summary as s\n"
        "def boom(*a, **k):\n    raise BrokenPipeError(32, 'Broken pipe')\n"
        "s.summarize = boom\n"
        f"sys.argv = ['remat', 'info', {UNET!r}]\n"
        "from remat_cli.cli import main\nmain()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "internal error: BrokenPipeError" in done.stderr and done.stderr.count("\n") == 1


def test_plan_defaults_to_auto_and_fits_a_tight_budget():
    """`remat plan GRAPH --budget B` with no strategy returns the cheapest fitting plan."""
    res = run("plan", UNET, "--budget", "0.6x", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["strategy"] == "auto" and doc["fits"]
    assert doc["metrics"]["peak_bytes"] <= doc["budget_bytes"] == int(0.6 * doc["store_all_peak_bytes"])
    assert doc["info"]["winner"] in {s["name"] for s in json.loads(run("strategies", "--format", "json").stdout)}


@pytest.mark.parametrize(
    ("args", "through_rich"),
    [
        (["plan", UNET, "-s", "store-all", "--format", "json", "-o", "{tmp}/plan.json"], False),
        (["tradeoff", UNET, "-S", "store-all,chain-dp", "-n", "2"], True),
        (["validate", UNET, "{tmp}/missing.plan.json"], False),
    ],
    ids=["plan", "tradeoff", "validate-error"],
)
def test_one_console_per_stream_per_invocation(args, through_rich, tmp_path, monkeypatch):
    """Output and messages each go through one rich console per invocation (STYLE); one-line
    messages (an error, "plan written to") through none: they are plain text."""
    import rich.console

    made: list[bool] = []

    class Counting(rich.console.Console):
        def __init__(self, *a, **kw):
            made.append(bool(kw.get("stderr")))
            super().__init__(*a, **kw)

    monkeypatch.setattr(rich.console, "Console", Counting)
    for _ in range(2):  # a second invocation gets consoles of its own
        made.clear()
        CliRunner().invoke(cli, [a.format(tmp=tmp_path) for a in args])
        assert made.count(True) <= 1 and made.count(False) <= 1, made
        assert bool(made) == through_rich, made
