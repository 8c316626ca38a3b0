"""`remat batch` with per-model dims (issue 10, item 7): each model's own dims from
remat.toml's [[models]] tables, the dims every row used (table column and JSON field),
and a --dim that no file has is an error (exit 2), as in the single-file commands."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from _onnx_models import mlp_model, save
from remat_cli.cli import cli


def _models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    save(mlp_model("batch"), root, "a.onnx")
    save(mlp_model("n"), root, "b.onnx")  # its dimension has another name
    return root


def _batch(*args: str) -> tuple[int, str]:
    """Exit code and stdout (stderr's notes apart)."""
    res = CliRunner().invoke(cli, ["batch", *args, "-j", "1", "-s", "store-all"])
    return res.exit_code, res.stdout


def test_per_model_dims_from_config_and_reported_per_row(tmp_path: Path) -> None:
    root = _models(tmp_path)
    config = tmp_path / "remat.toml"
    config.write_text('[[models]]\npath = "models/b.onnx"\ndims = { n = 3 }\n')
    code, out = _batch(str(root), "--dim", "batch=4", "--config", str(config), "--format", "json")
    assert code == 0, out
    rows = {Path(r["file"]).name: r for r in json.loads(out)}
    assert rows["a.onnx"]["dims"] == "batch=4" and rows["b.onnx"]["dims"] == "n=3"
    assert all(r["status"] == "ok" for r in rows.values())
    # the dims change the graphs: b at n=3 is 3/4 of a at batch=4 in activations
    assert rows["b.onnx"]["peak_bytes"] < rows["a.onnx"]["peak_bytes"]
    code, out = _batch(str(root), "--dim", "batch=4", "--config", str(config))
    assert code == 0, out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("file"))
    assert "dims" in header.split()
    assert any("n=3" in line and "b.onnx" in line for line in out.splitlines())


def test_without_the_config_the_other_model_says_which_dim_is_unset(tmp_path: Path) -> None:
    root = _models(tmp_path)
    code, out = _batch(str(root), "--dim", "batch=4", "--format", "json")
    rows = {Path(r["file"]).name: r for r in json.loads(out)}
    assert code != 0
    assert rows["a.onnx"]["status"] == "ok" and rows["b.onnx"]["status"] == "bad-input"
    assert "'n'" in rows["b.onnx"]["message"] or " n" in rows["b.onnx"]["message"]


def test_a_dim_that_no_file_has_is_an_error(tmp_path: Path) -> None:
    root = _models(tmp_path)
    res = CliRunner().invoke(
        cli, ["batch", str(root), "-j", "1", "-s", "store-all", "--dim", "batch=4", "--dim", "n=2", "--dim", "seqlen=8"]
    )
    assert res.exit_code == 2, res.output
    assert "--dim seqlen: no file has a dimension named 'seqlen'" in res.output
    assert "Traceback" not in res.output


def test_plans_written_by_batch_record_each_models_dims(tmp_path: Path) -> None:
    root = _models(tmp_path)
    config = tmp_path / "remat.toml"
    config.write_text('[[models]]\npath = "models/b.onnx"\ndims = { n = 3 }\n')
    out = tmp_path / "plans"
    code, text = _batch(str(root), "--dim", "batch=4", "--config", str(config), "--out-dir", str(out))
    assert code == 0, text
    docs = {p.name.split(".")[0]: json.loads(p.read_text()) for p in out.rglob("*.plan.json")}
    assert docs["a"]["load"]["dims"] == {"batch": 4} and docs["b"]["load"]["dims"] == {"n": 3}
    # and each plan validates on its model under the dims it records
    res = CliRunner().invoke(cli, ["validate", str(root / "b.onnx"), str(next(out.rglob("b.onnx*.plan.json"))), "--dim", "n=3"])
    assert res.exit_code == 0, res.output
