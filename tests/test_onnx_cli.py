"""The command line on ONNX models: shared graph flags, remat info, convert, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

from _onnx_models import mlp_model, model, save, tensor

from remat_cli.cli import cli
from remat_cli.loaders import LoadOptions, load_graph
from remat_cli.plandoc import read_plan
from remat_cli.simulate import require_valid

ROOT = Path(__file__).resolve().parent.parent
RESNET = str(ROOT / "sample_graphs" / "resnet18.onnx")


def run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("remat: error: ")
    assert "Traceback" not in result.output
    return lines[0]


# ---------------------------------------------------------------------------- bad input
def test_truncated_protobuf(tmp_path):
    data = Path(RESNET).read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 3])
    line = _one_line_error(run("info", path, "--dim", "batch=2"))
    assert "cut.onnx" in line and "not a valid ONNX file" in line


def test_corrupt_protobuf(tmp_path):
    path = tmp_path / "noise.onnx"
    path.write_bytes(bytes(range(256)) * 8)
    assert "noise.onnx" in _one_line_error(run("info", path))


def test_non_onnx_file_named_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("these are my notes, not a model\n")
    line = _one_line_error(run("info", path))
    assert "notes.onnx" in line and "ONNX" in line


def test_empty_file_and_empty_graph(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert "empty" in _one_line_error(run("info", empty))
    m = model([], [tensor("x", [2])], [tensor("x", [2])])
    assert "no operations" in _one_line_error(run("info", save(m, tmp_path, "nothing.onnx")))


def test_outputs_depending_on_nothing(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", [2])], [tensor("x", [2])])
    assert "depend on no operation" in _one_line_error(run("info", save(m, tmp_path), "--inference"))


def test_unknown_dim_name():
    line = _one_line_error(run("info", RESNET, "--dim", "batch=2", "--dim", "seq=5"))
    assert "--dim seq" in line and "batch" in line


@pytest.mark.parametrize("value", ["batch=two", "batch=2.5", "batch", "=3", "batch=-1"])
def test_bad_dim_values(value):
    line = _one_line_error(run("info", RESNET, "--dim", value))
    assert "--dim" in line


def test_unresolved_dims_list_names_and_example():
    line = _one_line_error(run("info", RESNET))
    assert "unresolved dimension batch" in line and "--dim batch=1" in line


@pytest.mark.parametrize("name", [b"bat\x9ch", b"two words"])
def test_unresolved_dims_with_odd_names_are_one_clean_line(tmp_path, name):
    """A symbolic input dimension whose name is not UTF-8 (protobuf hands it back as bytes:
    an internal error before) or holds a space: one line, exit 2, the name shown decoded
    (U+FFFD for bad bytes) and the --dim example quoted for a shell."""
    m = mlp_model()
    placeholder = "Q" * len(name)  # (bytes of the same length replace it in the file)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = placeholder
    raw = m.SerializeToString()
    assert raw.count(placeholder.encode()) == 1
    raw = raw.replace(placeholder.encode(), name)
    path = tmp_path / "odd.onnx"
    path.write_bytes(raw)
    line = _one_line_error(run("info", str(path)))
    shown = name.decode("utf-8", errors="replace")
    assert f"unresolved dimension {shown}" in line and f"--dim '{shown}=1'" in line
    line = _one_line_error(run("info", str(path), "--dim", "nope=1"))  # (a typo lists the names)
    assert "no dimension named 'nope'" in line and shown in line


def test_bad_device(tmp_path):
    assert "not a built-in device" in _one_line_error(run("info", RESNET, "--dim", "batch=2", "--device", "abacus"))
    bad = tmp_path / "dev.json"
    bad.write_text("{")
    assert "dev.json" in _one_line_error(run("info", RESNET, "--dim", "batch=2", "--device", bad))


# ---------------------------------------------------------------------------- commands
def test_info_on_onnx_shows_model_facts():
    result = run("info", RESNET, "--dim", "batch=2", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    extra = doc["extra"]
    for key in (
        "ONNX ops",
        "parameters",
        "forward FLOPs",
        "step FLOPs",
        "device",
        "estimated sizes",
        "unknown ops",
        "fixed memory parts",
        "store-all peak (inference)",
    ):
        assert key in extra, key
    assert extra["parameters"].startswith("11,689,512")
    assert doc["kinds"]["backward"] > 0 and doc["base_seconds"] > 0
    assert doc["store_all"]["est_seconds"] == pytest.approx(doc["base_seconds"])
    table = run("info", RESNET, "--dim", "batch=2", "--inference")
    assert table.exit_code == 0 and "store-all peak (training)" in table.output


def test_plan_and_validate_on_onnx(tmp_path):
    out = tmp_path / "plan.json"
    result = run("plan", RESNET, "--dim", "batch=2", "--optimizer", "adam", "-o", out, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["metrics"]["est_seconds"] > 0
    graph = load_graph(RESNET, LoadOptions(dims=(("batch", 2),), optimizer="adam"))
    schedule, _ = read_plan(str(out), graph)
    metrics = require_valid(graph, schedule)
    assert metrics.peak_bytes == report["metrics"]["peak_bytes"]
    again = run("validate", RESNET, out, "--dim", "batch=2", "--optimizer", "adam")
    assert again.exit_code == 0, again.output
    # the same plan on the graph built with other flags is a different graph: refused
    other = run("validate", RESNET, out, "--dim", "batch=2", "--convention", "checkmate")
    assert other.exit_code != 0


def test_convert_writes_the_training_graph(tmp_path):
    path = save(mlp_model(), tmp_path)
    out = tmp_path / "train.json"
    result = run("convert", path, out, "--dim", "batch=3", "--training", "--convention", "autograd")
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    kinds = [nd.get("kind") for nd in doc["nodes"]]
    assert kinds.count("backward") == 7 and kinds.count("loss") == 1
    direct = load_graph(path, LoadOptions(dims=(("batch", 3),)))
    back = load_graph(out, LoadOptions())
    assert back.sha256 == direct.sha256
    # a JSON graph that already has backward nodes is taken as it is, even with --training
    again = load_graph(out, LoadOptions(training=True))
    assert again.sha256 == direct.sha256
    fwd_json = tmp_path / "fwd.json"
    assert run("convert", path, fwd_json, "--dim", "batch=3", "--inference").exit_code == 0
    plain = load_graph(fwd_json, LoadOptions())
    assert not plain.is_training
    built = load_graph(fwd_json, LoadOptions(training=True, optimizer="adam"))  # checkmate for JSON
    assert built.n == 2 * plain.n + 1
    assert built.fixed_mem == plain.fixed_mem + 3 * plain.meta["parameter_bytes"]


def test_unknown_ops_warning_is_one_line_on_stderr(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r"),
        helper.make_node("Frob", ["a"], ["b"], name="f1", domain="acme"),
        helper.make_node("Frob", ["b"], ["out"], name="f2", domain="acme"),
    ]
    m = model(nodes, [tensor("x", [2, 4])], [tensor("out", [2, 4])], value_info=[tensor("b", [2, 4])])
    m.opset_import.append(helper.make_opsetid("acme", 1))
    runner = CliRunner()
    result = runner.invoke(cli, ["info", str(save(m, tmp_path)), "--inference"])
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.stderr.splitlines() if "without a cost model" in ln]
    assert len(warnings) == 1 and "acme.Frob x2" in warnings[0]


def test_keep_views_flag(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r"),
        helper.make_node("Flatten", ["a"], ["f"], name="flat"),
        helper.make_node("Sigmoid", ["f"], ["out"], name="s"),
    ]
    path = save(model(nodes, [tensor("x", [2, 3, 4])], [tensor("out", [2, 12])]), tmp_path)
    folded = json.loads(run("info", path, "--inference", "--format", "json").output)
    kept = json.loads(run("info", path, "--inference", "--keep-views", "--format", "json").output)
    assert folded["nodes"] == 2 and kept["nodes"] == 3


def test_saved_model_with_external_weights_missing(tmp_path):
    """Weights moved to an external file that is gone: the structure is enough."""
    m = mlp_model()
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    (tmp_path / "ext.onnx.data").unlink()
    result = run("info", path, "--dim", "batch=2", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["extra"]["parameters"].startswith("112 ")


@pytest.mark.parametrize(("location", "refused"), [(b"ex\x9c.onnx.data", False), (b"/tmp\x9c/onnx.da", True), (b"../\x9c/../x.dat", True)])
def test_external_data_locations_that_are_not_utf8_are_checked_as_text(tmp_path, location, refused):
    """protobuf hands back a location that is not UTF-8 as bytes: the folder check was an
    internal error (TypeError, found by fuzzing); now it reads it as text (U+FFFD for bad
    bytes) and refuses one outside the model's folder in one line."""
    m = mlp_model()
    path = tmp_path / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    data = path.read_bytes()
    assert len(location) == len(b"ext.onnx.data") and b"ext.onnx.data" in data
    path.write_bytes(data.replace(b"ext.onnx.data", location))
    result = run("info", path, "--dim", "batch=2", "--format", "json")
    assert "internal error" not in result.output
    if refused:
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and "outside the model's folder" in lines[0], result.output
    else:
        assert result.exit_code == 0, result.output


def test_embedded_weights_are_read_for_their_shapes(tmp_path):
    from _onnx_models import init

    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="mm"), helper.make_node("Relu", ["a"], ["out"], name="relu")]
    m = model(nodes, [tensor("x", [2, 512])], [tensor("out", [2, 1024])], [init("W", (512, 1024))])
    path = save(m, tmp_path)
    assert path.stat().st_size > 2 * 1024 * 1024  # 2 MiB of embedded weights
    result = run("info", path, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["extra"]["parameters"].startswith("524,288 ")
    assert doc["fixed_bytes"] == 2 * 512 * 4 + 2 * 512 * 1024 * 4  # input, weights and their gradients
