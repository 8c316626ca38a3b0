"""ONNX models exported in inference mode (issue 10, item 12): BatchNormalization without
its training outputs, Dropout switched off. The training graph built from them differs
from real training, so loading one for training warns once, in one line, saying how to
export in training mode; a training-mode export and --inference do not warn."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner
from onnx import helper

from _onnx_models import init, model, save, tensor
from remat_cli.cli import cli
from remat_cli.loaders import LoadOptions, load_graph


def _bn_model(training_mode: bool, dropout: str = "none"):
    """x -> Conv -> BatchNormalization -> Relu [-> Dropout]."""
    bn_out = ["b", "rm", "rv"] if training_mode else ["b"]
    attrs = {"training_mode": 1} if training_mode else {}
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bias", "mean", "var"], bn_out, name="bn", **attrs),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
    ]
    inits = [init("W", (4, 3, 3, 3)), init("s", (4,)), init("bias", (4,)), init("mean", (4,)), init("var", (4,))]
    out = "r"
    if dropout != "none":
        inits += [init("ratio", (), value=0.1), init("train", (), dtype=np.bool_, value=dropout == "training")]
        nodes.append(helper.make_node("Dropout", ["r", "ratio", "train"], ["d"], name="drop"))
        out = "d"
    return model(nodes, [tensor("x", ["batch", 3, 8, 8])], [tensor(out, ["batch", 4, 8, 8])], inits, opset=17)


def _warnings(path: Path, **kw) -> list[str]:
    seen: list[str] = []
    load_graph(path, LoadOptions(dims=(("batch", 2),), **kw), warn=seen.append)
    return seen


def test_inference_export_warns_once_with_the_export_call(tmp_path: Path) -> None:
    path = save(_bn_model(training_mode=False, dropout="inference"), tmp_path)
    warnings = [w for w in _warnings(path) if "inference mode" in w]
    assert len(warnings) == 1
    (w,) = warnings
    assert "\n" not in w
    assert "1 BatchNormalization without training outputs" in w and "1 Dropout in inference mode" in w
    assert "torch.onnx.TrainingMode.TRAINING" in w and "do_constant_folding=False" in w


def test_training_export_and_inference_scheduling_do_not_warn(tmp_path: Path) -> None:
    trained = save(_bn_model(training_mode=True, dropout="training"), tmp_path, "t.onnx")
    assert not [w for w in _warnings(trained) if "inference mode" in w]
    inference = save(_bn_model(training_mode=False), tmp_path, "i.onnx")
    assert not [w for w in _warnings(inference, training=False) if "inference mode" in w]


def test_cli_warns_once_and_info_says_so(tmp_path: Path) -> None:
    path = save(_bn_model(training_mode=False), tmp_path)
    res = CliRunner().invoke(cli, ["info", str(path), "--dim", "batch=2", "--no-decompose"])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("exported in inference mode") == 1
    assert "export mode" in res.stdout and "inference" in res.stdout
