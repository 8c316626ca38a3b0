"""`remat validate` (issue 10, item 8): plan files record the load options, a plan made
under other options is refused naming the option that differs, budget errors speak human
units, and a twremat text plan made on a converted ONNX model replays on the model."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from _onnx_models import mlp_model, save
from remat_cli.cli import cli


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _plan(tmp_path: Path, *options: str) -> tuple[Path, Path]:
    model = save(mlp_model("batch"), tmp_path)
    plan = tmp_path / "plan.json"
    res = _run("plan", str(model), "-s", "store-all", "-o", str(plan), *options)
    assert res.exit_code == 0, res.output
    return model, plan


def test_plan_file_records_the_load_options(tmp_path: Path) -> None:
    _model, plan = _plan(tmp_path, "--dim", "batch=4", "--optimizer", "adam")
    load = json.loads(plan.read_text())["load"]
    assert load["dims"] == {"batch": 4} and load["optimizer"] == "adam"
    assert load["training"] is True and load["convention"] == "autograd"
    assert load["cost"] == "roofline" and load["device"] == "a100" and load["keep_views"] is False


def test_validate_names_the_option_that_differs(tmp_path: Path) -> None:
    model, plan = _plan(tmp_path, "--dim", "batch=4", "--optimizer", "adam")
    ok = _run("validate", str(model), str(plan), "--dim", "batch=4", "--optimizer", "adam")
    assert ok.exit_code == 0, ok.output
    res = _run("validate", str(model), str(plan), "--dim", "batch=4")
    assert res.exit_code == 2
    assert "--optimizer adam (this run: --optimizer sgd)" in res.output
    assert "--dim" not in res.output.split("other load options:")[1]  # the dims agree
    res = _run("validate", str(model), str(plan), "--dim", "batch=2", "--optimizer", "adam")
    assert res.exit_code == 2 and "--dim batch=4 (this run: --dim batch=2)" in res.output
    res = _run("validate", str(model), str(plan), "--dim", "batch=4", "--optimizer", "adam", "--inference")
    assert res.exit_code == 2 and "--training (this run: --inference)" in res.output


def test_validate_budget_error_in_human_units(tmp_path: Path) -> None:
    model, plan = _plan(tmp_path, "--dim", "batch=4")
    res = _run("validate", str(model), str(plan), "--dim", "batch=4", "--budget", "1KiB")
    assert res.exit_code == 1
    line = res.output.strip().splitlines()[-1]
    assert "is above the budget 1.00 KiB" in line and " B is above" not in line


def test_twremat_plan_of_a_converted_onnx_model_validates_on_the_model(tmp_path: Path) -> None:
    model = save(mlp_model("batch"), tmp_path)
    text = tmp_path / "model.txt"
    assert _run("convert", str(model), str(text), "--dim", "batch=4").exit_code == 0
    plan = tmp_path / "plan.txt"
    res = _run("plan", str(text), "-s", "store-all", "-o", str(plan))
    assert res.exit_code == 0, res.output
    assert plan.read_text().split()[1].isdigit()  # twremat numbers the nodes
    res = _run("validate", str(model), str(plan), "--dim", "batch=4", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    direct = _run("plan", str(model), "-s", "store-all", "--dim", "batch=4", "--format", "json")
    # the same schedule on the same graph: the model's own figures (fixed memory included)
    assert doc["peak_bytes"] == json.loads(direct.stdout)["metrics"]["peak_bytes"]
    assert doc["cost"] == json.loads(direct.stdout)["metrics"]["cost"]
