"""`remat check`: exit codes, one line per model, JUnit XML, and the configuration file."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_cli import generators, training
from remat_cli.batch import NO_PLAN, OK, Row
from remat_cli.budget import parse_budget
from remat_cli.check import CheckReport, CheckSpec, junit_tree, merge_load, resolve_check, specs_from_entries, verdict, write_junit
from remat_cli.cli import cli
from remat_cli.config import find_config, load_config, parse_dims, parse_overhead
from remat_cli.errors import InputError
from remat_cli.loaders import LoadOptions, load_graph, remat_json
from remat_cli.planner import make_plan
from remat_cli.simulate import simulate


def _graph_file(path: Path, seed: int, n: int = 12) -> int:
    """Write a training graph; return its store-all peak (replayed by the simulator)."""
    g = training.checkmate_training_graph(generators.random_dag(n, 0.3, seed=seed, max_size=4))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(remat_json.dumps(g))
    plan = make_plan(load_graph(path), "store-all")
    sim = simulate(plan.graph, plan.schedule)
    assert sim.metrics is not None and sim.metrics.peak_bytes == plan.metrics.peak_bytes
    return plan.metrics.peak_bytes


@pytest.fixture()
def models(tmp_path: Path) -> tuple[Path, list[int]]:
    peaks = [_graph_file(tmp_path / "models" / f"m{k}.json", seed=k) for k in range(3)]
    (tmp_path / ".git").mkdir()  # bounds the search for a configuration file to this tree
    return tmp_path, peaks


def _run(args: list[str], cwd: Path):
    """`remat check ARGS` in ``cwd`` (the configuration file is looked for from there)."""
    runner = CliRunner()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(cli, ["check", *args])
    finally:
        os.chdir(old)


# --------------------------------------------------------------------------- exit codes


def test_pass_fail_and_bad_input_exit_codes(models: tuple[Path, list[int]]) -> None:
    root, peaks = models
    files = [str(root / "models" / f"m{k}.json") for k in range(3)]
    top = max(peaks)
    res = _run([*files, "--budget", str(top), "-s", "store-all"], cwd=root)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[:3]] == ["PASS"] * 3
    assert all(f in ln for f, ln in zip(files, lines))
    assert "3 models: 3 passed, 0 failed, 0 errors" in res.stdout
    # one byte below the largest store-all peak: exactly that model fails, with the reason
    res = _run([*files, "--budget", str(top - 1), "-s", "store-all"], cwd=root)
    assert res.exit_code == 1
    verdicts = [ln.split()[0] for ln in res.stdout.splitlines()[:3]]
    assert verdicts == ["FAIL" if p == top else "PASS" for p in peaks]
    fail_line = res.stdout.splitlines()[peaks.index(top)]
    assert "no plan fits" in fail_line and f"{top} B" in fail_line
    # bad input wins over failure: exit 2
    broken = root / "models" / "broken.json"
    broken.write_text("{")
    res = _run([*files, str(broken), "--budget", str(top - 1)], cwd=root)
    assert res.exit_code == 2
    assert res.stdout.splitlines()[3].startswith("ERROR ") and "not valid JSON" in res.stdout
    # bad usage: no budget, unknown strategy, unreadable overhead
    assert _run([files[0]], cwd=root).exit_code == 2
    assert _run([files[0], "--budget", "1GiB", "-s", "nope"], cwd=root).exit_code == 2
    assert _run([files[0], "--budget", "1GiB", "--max-overhead", "lots"], cwd=root).exit_code == 2


def test_relative_budget_and_json_output(models: tuple[Path, list[int]]) -> None:
    root, peaks = models
    res = _run([str(root / "models"), "--budget", "1x", "--max-overhead", "0%", "--format", "json"], cwd=root)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["models"] == 3 and doc["passed"] == 3 and doc["exit_code"] == 0
    assert [r["peak_bytes"] for r in doc["results"]] == peaks
    assert all(r["budget_bytes"] == r["store_all_peak_bytes"] for r in doc["results"])


def test_verdict_overhead_limit() -> None:
    spec = CheckSpec(path="m.json", name="m", load=LoadOptions(), budget=parse_budget("100"), strategy="x", max_overhead=0.3)
    row = Row(file="m.json", strategy="x", budget="100", status=OK, budget_bytes=100, peak_bytes=80, overhead=0.25)
    assert verdict(spec, row).verdict == "pass"
    over = verdict(spec, Row(**{**row.to_record(), "overhead": 0.31}))
    assert over.verdict == "fail" and "+31.0%" in over.reason and "+30.0%" in over.reason
    no_plan = verdict(
        spec, Row(file="m.json", strategy="x", budget="100", status=NO_PLAN, message="m.json: too small", min_budget_bytes=120)
    )
    assert no_plan.verdict == "fail" and no_plan.reason.startswith("no plan fits: too small") and "120 B" in no_plan.reason
    crashed = verdict(spec, Row(file="m.json", strategy="x", budget="100", status="crash", message="m.json: the worker died"))
    assert crashed.verdict == "error" and not crashed.bad_input
    assert CheckReport((crashed,), models=1).exit_code == 1
    assert CheckReport((verdict(spec, row),), models=1).exit_code == 0
    assert CheckReport((verdict(spec, row),), models=2).exit_code == 1  # a model left unchecked


# --------------------------------------------------------------------------- JUnit


def test_junit_xml_structure(models: tuple[Path, list[int]]) -> None:
    root, peaks = models
    (root / "models" / "zz_broken.json").write_text('{"format": "remat-graph"}')
    report_path = root / "report.xml"
    top = max(peaks)
    res = _run([str(root / "models"), "--strategy", "store-all", "--budget", str(top - 1), "--junit", str(report_path)], cwd=root)
    assert res.exit_code == 2
    tree = ET.parse(report_path)
    suites = tree.getroot()
    assert suites.tag == "testsuites"
    (suite,) = suites.findall("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 4
    failures = [c for c in cases if c.find("failure") is not None]
    errors = [c for c in cases if c.find("error") is not None]
    passes = [c for c in cases if c.find("failure") is None and c.find("error") is None]
    assert (len(passes), len(failures), len(errors)) == (sum(p < top for p in peaks), sum(p == top for p in peaks), 1)
    for node in (suites, suite):
        assert node.get("tests") == "4"
        assert node.get("failures") == str(len(failures))
        assert node.get("errors") == "1"
        float(node.get("time"))
    for case in cases:
        assert case.get("classname") == "remat.check" and case.get("name") and case.get("file")
        float(case.get("time"))
        assert case.find("system-out") is not None and "strategy: " in case.find("system-out").text
    assert errors[0].get("name").endswith("zz_broken.json")
    assert errors[0].find("error").get("type") == "bad-input"
    assert failures[0].find("failure").get("type") == NO_PLAN
    assert "no plan fits" in failures[0].find("failure").get("message")


def test_junit_escapes_awkward_text(tmp_path: Path) -> None:
    spec = CheckSpec(path='a<b>&"c".json', name='a<b>&"c"', load=LoadOptions(), budget=parse_budget("1"), strategy="s")
    row = Row(file=spec.path, strategy="s", budget="1", status="error", message="boom <&> \x1b")
    path = tmp_path / "r.xml"
    write_junit(CheckReport((verdict(spec, row),), models=1), path)
    case = ET.parse(path).getroot().find("testsuite/testcase")
    assert case is not None and case.get("name") == spec.name
    assert "boom <&> \\x1b" in case.find("error").get("message")
    assert junit_tree(CheckReport((), models=0)).getroot().get("tests") == "0"


# --------------------------------------------------------------------------- configuration


def test_config_file_drives_a_check_with_no_arguments(models: tuple[Path, list[int]]) -> None:
    root, peaks = models
    top = max(peaks)
    (root / "remat.toml").write_text(
        f"""
strategy = "store-all"
budget = "{top}"
junit = "reports/remat.xml"
jobs = 2
timeout = 120

[[models]]
path = "models/m*.json"
dims = {{ batch = 8 }}

[[models]]
path = "models/m0.json"
name = "tight"
budget = "{peaks[0] - 1}"
"""
    )
    (root / "reports").mkdir()
    res = _run([], cwd=root)
    assert res.exit_code == 1, res.output
    lines = res.stdout.splitlines()
    assert [ln.split()[:2] for ln in lines[:4]] == [
        ["PASS", "models/m0.json:"],
        ["PASS", "models/m1.json:"],
        ["PASS", "models/m2.json:"],
        ["FAIL", "tight:"],
    ]
    assert ET.parse(root / "reports" / "remat.xml").getroot().get("failures") == "1"
    # a command-line budget wins over the file's; a subdirectory finds the same file
    sub = root / "models"
    assert _run(["--budget", str(top)], cwd=sub).exit_code == 0
    # models named on the command line use the file's defaults (its budget here)
    assert _run(["models/m1.json"], cwd=root).exit_code == 0


def test_resolve_check_merges_the_command_line_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `remat check` runs, decided without running it: given values win, the file
    fills the rest, and the file's JUnit report is only for the file's own models."""
    (tmp_path / "models").mkdir()
    _graph_file(tmp_path / "models/a.json", seed=1)
    _graph_file(tmp_path / "models/b.json", seed=2)
    conf = tmp_path / "remat.toml"
    conf.write_text('budget = "0.9x"\njobs = 2\ntimeout = 120\njunit = "out/r.xml"\n[[models]]\npath = "models/a.json"\nbudget = "0.5x"\n')
    run = resolve_check((), config_file=str(conf))
    assert [(Path(s.path).name, s.budget.text) for s in run.specs] == [("a.json", "0.5x")]
    assert (run.jobs, run.timeout, run.junit) == (2, 120, str(tmp_path / "out/r.xml"))
    run = resolve_check((), config_file=str(conf), jobs=1, timeout=5, junit="mine.xml", budget=parse_budget("0.7x"))
    assert (run.jobs, run.timeout, run.junit) == (1, 5, "mine.xml") and run.specs[0].budget.text == "0.7x"
    # models named here take the file's defaults, and get no report unless asked
    named = str(tmp_path / "models")
    run = resolve_check((named,), config_file=str(conf))
    assert [Path(s.path).name for s in run.specs] == ["a.json", "b.json"] and {s.budget.text for s in run.specs} == {"0.9x"}
    assert run.junit is None and run.jobs == 2
    monkeypatch.chdir(tmp_path / "models")  # no configuration here or above: nothing to check
    conf.unlink()
    with pytest.raises(InputError, match="no models given"):
        resolve_check(())


def test_pyproject_tool_remat_and_config_errors(models: tuple[Path, list[int]]) -> None:
    root, peaks = models
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "x"\n\n[tool.remat]\nbudget = "{max(peaks)}"\nstrategy = "store-all"\n[[tool.remat.models]]\npath = "models"\n'
    )
    assert find_config(root / "models") == root / "pyproject.toml"
    res = _run([], cwd=root)
    assert res.exit_code == 0, res.output
    assert "3 models: 3 passed" in res.stdout
    # errors in the file are bad input, naming the file and the key
    (root / "remat.toml").write_text('budegt = "1GiB"\n[[models]]\npath = "models/m0.json"\n')
    res = _run([], cwd=root)
    assert res.exit_code == 2 and "remat.toml" in res.stderr and "budegt" in res.stderr
    (root / "remat.toml").write_text('[[models]]\npath = "nothing/*.onnx"\n')
    res = _run([], cwd=root)
    assert res.exit_code == 2 and "matches no files" in res.stderr
    (root / "remat.toml").write_text("budget = [")
    assert _run([], cwd=root).exit_code == 2
    # no configuration at all
    bare = root / "bare"
    bare.mkdir()
    (bare / ".git").mkdir()
    res = _run([], cwd=bare)
    assert res.exit_code == 2 and "no models given" in res.stderr


def test_config_values_and_dims_reach_load_options(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "remat.toml").write_text(
        'budget = "24GiB"\nmax_overhead = "30%"\ndims = { batch = 32, seq = 128 }\noptimizer = "adam"\n'
        '[[models]]\npath = "m.onnx"\ndims = ["seq=256"]\ninference = true\nmax_overhead = 0.1\n'
    )
    conf = load_config(tmp_path / "remat.toml", cwd=tmp_path)
    (entry,) = conf.models
    assert entry.path == "m.onnx" and entry.dims == (("batch", 32), ("seq", 256))
    assert entry.training is False and entry.max_overhead == 0.1 and entry.optimizer == "adam"
    assert entry.budget == parse_budget("24GiB")
    (spec,) = specs_from_entries([entry], cli_load=LoadOptions(dims=(("batch", 4),)), default_strategy="store-all")
    assert spec.load.dims == (("batch", 4), ("seq", 256))  # the command line wins, by name
    assert spec.load.training is False and spec.load.optimizer == "adam"
    assert spec.strategy == "store-all" and spec.max_overhead == 0.1
    (spec,) = specs_from_entries([entry], budget=parse_budget("1GiB"), max_overhead=0.5, default_strategy="store-all")
    assert spec.budget == parse_budget("1GiB") and spec.max_overhead == 0.5


def test_merge_load_keeps_base_where_override_is_default() -> None:
    base = LoadOptions(dims=(("a", 1),), training=True, optimizer="adam")
    merged = merge_load(base, LoadOptions(dims=(("b", 2),)))
    assert merged == LoadOptions(dims=(("a", 1), ("b", 2)), training=True, optimizer="adam")


@pytest.mark.parametrize(("text", "value"), [("30%", 0.3), ("0.3", 0.3), (0.25, 0.25), ("0%", 0.0), ("150%", 1.5)])
def test_parse_overhead(text: object, value: float) -> None:
    assert parse_overhead(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["-5%", "lots", "", "nan"])
def test_parse_overhead_rejects(text: str) -> None:
    with pytest.raises(InputError):
        parse_overhead(text)


@pytest.mark.parametrize("value", ["nan", "-inf", "0", "-1.5"])
def test_config_numbers_must_be_positive_numbers(tmp_path: Path, value: str) -> None:
    """A worker timeout of NaN passes every comparison but one: refused like 0, one line."""
    _graph_file(tmp_path / "a.json", seed=1)
    conf = tmp_path / "remat.toml"
    conf.write_text(f'timeout = {value}\n[[models]]\npath = "a.json"\n')
    with pytest.raises(InputError, match="timeout must be positive"):
        load_config(conf)


def test_parse_dims() -> None:
    assert parse_dims({"batch": 2}) == {"batch": 2}
    assert parse_dims(["batch=2", "seq = 7"]) == {"batch": 2, "seq": 7}
    for bad in ({"batch": 0}, {"batch": "x"}, ["batch"], "batch=2", {"b": True}):
        with pytest.raises(InputError):
            parse_dims(bad)


# --------------------------------------------------------------------------- issue 10


def test_missing_file_still_prints_every_other_result_as_json(models: tuple[Path, list[int]]) -> None:
    root, peaks = models
    files = [str(root / "models" / "m0.json"), str(root / "models" / "missing.json"), str(root / "models" / "m1.json")]
    res = _run([*files, "--budget", str(max(peaks)), "-s", "store-all", "--format", "json", "-j", "1"], cwd=root)
    assert res.exit_code == 2, res.output
    doc = json.loads(res.stdout)
    assert doc["models"] == 3 and doc["passed"] == 2 and doc["exit_code"] == 2
    assert [r["file"] for r in doc["results"]] == files
    assert [r["verdict"] for r in doc["results"]] == ["pass", "error", "pass"]
    assert "no such file" in doc["results"][1]["reason"].lower() and doc["results"][1]["status"] == "bad-input"
    # and the same three lines as text
    res = _run([*files, "--budget", str(max(peaks)), "-s", "store-all", "-j", "1"], cwd=root)
    assert res.exit_code == 2
    assert [ln.split()[0] for ln in res.stdout.splitlines()[:3]] == ["PASS", "ERROR", "PASS"]


def test_command_line_wins_over_config_even_with_default_values(models: tuple[Path, list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    import remat_cli.check as check_mod

    root, peaks = models
    (root / "remat.toml").write_text(
        f'budget = "{max(peaks)}"\nstrategy = "store-all"\noptimizer = "adam"\ndevice = "h100"\ncost_model = "flops"\n'
        '[[models]]\npath = "models/m0.json"\n'
    )
    seen: list[CheckSpec] = []

    def fake_run_check(specs, **kw):
        seen.extend(specs)
        return CheckReport((), models=len(specs))

    monkeypatch.setattr(check_mod, "run_check", fake_run_check)
    _run([], cwd=root)
    assert (seen[0].load.optimizer, seen[0].load.device, seen[0].load.cost) == ("adam", "h100", "flops")
    seen.clear()
    # the defaults' own values, given on the command line, still win
    _run(["--optimizer", "sgd", "--device", "a100", "--cost", "roofline"], cwd=root)
    assert (seen[0].load.optimizer, seen[0].load.device, seen[0].load.cost) == ("sgd", "a100", "roofline")
    seen.clear()
    _run(["models/m0.json", "--optimizer", "sgd"], cwd=root)  # models named: the file's defaults
    assert (seen[0].load.optimizer, seen[0].load.device) == ("sgd", "h100")


def test_merge_load_given_fields_win_even_at_their_default() -> None:
    base = LoadOptions(optimizer="adam", device="h100", training=False)
    assert merge_load(base, LoadOptions()) == base
    merged = merge_load(base, LoadOptions(), given={"optimizer", "device"})
    assert (merged.optimizer, merged.device, merged.training) == ("sgd", "a100", False)


def test_no_plan_names_lower_bound_and_smallest_found_budget_apart(models: tuple[Path, list[int]]) -> None:
    from remat_cli.units import fmt_bytes
    from remat_cli.sweep import smallest_budget

    root, _ = models
    path = root / "models" / "m0.json"
    graph = load_graph(path)
    for strategy in ("treewidth", "store-all"):
        found = smallest_budget(graph, strategy)
        assert found.budget_bytes is not None and found.budget_bytes > graph.lb  # else this test is vacuous
        for budget in (graph.lb - 1, found.budget_bytes - 1):
            junit = root / "r.xml"
            res = _run([str(path), "--budget", str(budget), "-s", strategy, "--format", "json", "-j", "1", "--junit", str(junit)], cwd=root)
            out = ET.parse(junit).getroot().find("testsuite/testcase/system-out").text
            assert f"lower bound (no schedule fits below): {fmt_bytes(graph.lb)}" in out
            assert f"smallest budget a plan was found for: {fmt_bytes(found.budget_bytes)} ({found.budget_bytes} B)" in out
            assert res.exit_code == 1, res.output
            (r,) = json.loads(res.stdout)["results"]
            assert r["min_budget_bytes"] == found.budget_bytes != r["lower_bound_bytes"] == graph.lb
            assert "known to work" not in r["reason"]
            assert f"lower bound {fmt_bytes(graph.lb)}" in r["reason"] or budget >= graph.lb
            assert fmt_bytes(found.budget_bytes) in r["reason"]
            plan = make_plan(graph, strategy, r["min_budget_bytes"])  # a plan was found there
            assert simulate(graph, plan.schedule).metrics.peak_bytes <= r["min_budget_bytes"]


@pytest.mark.parametrize(("strategy", "ratio"), [("auto", 0.3), ("treewidth", 0.4), ("greedy", 0.35), ("auto", 0.0)])
def test_check_makes_the_failed_plan_once_and_says_what_plan_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: str, ratio: float
) -> None:
    """A model that fails its budget: check plans it once (then searches the smallest
    budget from that failure, on the same graph), and its message is `remat plan`'s,
    smallest budget included (made here by make_plan with find_smallest)."""
    from remat_cli import batch as batch_pkg
    from remat_cli.batch import make_tasks
    from remat_cli.batch import tasks as tasks_mod
    from remat_cli import check as check_mod
    from remat_cli.check import check_file
    from remat_cli.errors import NoPlanError

    path = tmp_path / "m.json"
    peak = _graph_file(path, seed=5, n=30)
    budget = parse_budget(f"{max(1, int(ratio * peak))}B")
    graph = load_graph(path)
    with pytest.raises(NoPlanError) as want:
        make_plan(graph, strategy, budget, find_smallest=True, graph_file=str(path))
    made: list[int] = []
    real = tasks_mod.make_plan

    def counted(graph, strat, at, *args, **kwargs):
        made.append(1)
        return real(graph, strat, at, *args, **kwargs)

    monkeypatch.setattr(tasks_mod, "make_plan", counted)
    monkeypatch.setattr(check_mod, "make_plan", counted, raising=False)  # (a second plan was made there)
    (task,) = make_tasks([str(path)], strategies=[strategy], budgets=[budget])
    (row,) = check_file(task).rows
    assert batch_pkg.NO_PLAN == row.status and made == [1]
    assert (row.message, row.min_budget_bytes) == (want.value.message, want.value.min_budget)
    if want.value.min_budget is not None:  # a budget a plan was found for, replayed
        plan = make_plan(load_graph(path), strategy, want.value.min_budget)
        assert simulate(load_graph(path), plan.schedule).metrics.peak_bytes <= want.value.min_budget
