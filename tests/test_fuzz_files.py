"""Hostile files, limits and usage errors: one clear line and exit 2, never a hang.

Files that are not files (FIFOs, devices) must not block or fill memory; every limit
(file size, node count, dimension, total size, memory) is enforced with a flag to raise
it; every bad option value is one ``remat: error:`` line; ONNX external data cannot point
outside the model's folder; nothing read from a file is executed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from remat_cli.cli import cli

REPO = Path(__file__).resolve().parents[1]
GRAPH = {
    "format": "remat-graph",
    "version": 1,
    "name": "g",
    "cost_unit": "flops",
    "fixed_mem": 0,
    "nodes": [
        {"id": "a", "op": "x", "inputs": [], "mem": 100, "cost": 1},
        {"id": "b", "op": "x", "inputs": ["a"], "mem": 50, "cost": 2},
        {"id": "c", "op": "x", "inputs": ["a", "b"], "mem": 70, "cost": 3},
    ],
}


def one_line(res, code: int = 2) -> str:
    """The single stderr line of a refused command."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == code, (res.exit_code, res.stderr, res.stdout)
    assert len(lines) == 1 and lines[0].startswith("remat: error: "), res.stderr
    assert "internal error" not in lines[0] and "Usage:" not in res.stderr
    return lines[0]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def run_proc(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """In a subprocess, so that a hang on old code fails the test instead of blocking it."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "remat_cli", *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(GRAPH))
    return path


# --------------------------------------------------------------------------- not files


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_as_graph_or_plan_is_refused_without_blocking(tmp_path: Path, graph: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    res = run_proc("info", str(fifo))
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "named pipe" in res.stderr and "not a graph file" in res.stderr
    res = run_proc("validate", str(graph), str(fifo))
    assert res.returncode == 2 and "named pipe" in res.stderr and "not a plan file" in res.stderr


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_devices_are_refused_even_behind_a_symlink(tmp_path: Path) -> None:
    link = tmp_path / "model.json"
    link.symlink_to("/dev/zero")
    for target in ("/dev/zero", str(link)):
        res = run_proc("info", target, "--max-memory", "1GiB")
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "character device" in res.stderr


def test_directory_is_refused(tmp_path: Path) -> None:
    assert "is a directory" in one_line(run("info", str(tmp_path)))


# --------------------------------------------------------------------------- limits


def test_file_size_limit_is_said_and_can_be_raised(graph: Path) -> None:
    size = graph.stat().st_size
    line = one_line(run("info", str(graph), "--max-file-size", str(size - 1)))
    assert f"{size} bytes" in line and "--max-file-size" in line
    assert run("info", str(graph), "--max-file-size", str(size), "--no-decompose").exit_code == 0


def test_plan_file_size_limit(graph: Path, tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    assert run("plan", str(graph), "-s", "store-all", "-o", str(plan)).exit_code == 0
    limit = graph.stat().st_size
    assert plan.stat().st_size > limit
    line = one_line(run("validate", str(graph), str(plan), "--max-file-size", str(limit)))
    assert "file size limit" in line and str(plan) in line
    assert run("validate", str(graph), str(plan)).exit_code == 0


def test_node_limit(graph: Path) -> None:
    line = one_line(run("plan", str(graph), "--max-nodes", "2"))
    assert "3 nodes is more than --max-nodes 2" in line
    assert run("plan", str(graph), "--max-nodes", "3", "-s", "store-all").exit_code == 0


def test_total_size_limit(graph: Path) -> None:
    line = one_line(run("info", str(graph), "--max-total-size", "219"))
    assert "220 bytes" in line and "--max-total-size" in line
    assert run("info", str(graph), "--max-total-size", "220", "--no-decompose").exit_code == 0


def test_dimension_limit(graph: Path) -> None:
    line = one_line(run("info", str(graph), "--dim", f"batch={2**41}"))
    assert "--max-dim" in line and str(2**41) in line


def test_memory_guard_turns_exhaustion_into_one_line(graph: Path) -> None:
    # 1 MB of address space cannot even hold the graph's arrays: a clear line, exit 2
    res = run_proc("info", str(graph), "--max-memory", "1MB")
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("remat: error: out of memory") and res.stderr.count("\n") == 1
    assert "--max-memory" in res.stderr


def test_limits_are_in_help() -> None:
    text = run("plan", "--help").stdout
    for flag in ("--max-file-size", "--max-nodes", "--max-dim", "--max-total-size", "--max-memory"):
        assert flag in text
    assert "--max-nodes" in run("batch", "--help").stdout


# --------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "{graph}", "-b", "12XB"),
        ("plan", "{graph}", "-b", "9" * 500 + "e999GiB"),
        ("plan", "{graph}", "--max-nodes", "abc"),
        ("plan", "{graph}", "--max-nodes", "0"),
        ("plan", "{graph}", "-o", "{tmp}"),
        ("plan", "{graph}", "--max-file-size", "lots"),
        ("plan", "{graph}", "--max-memory", "-5"),
        ("plan", "{graph}", "-s"),
        ("plan", "{graph}", "--no-such-option"),
        ("plan",),
        ("nosuchcommand",),
        ("--bogus",),
        ("batch", "{tmp}", "-j", "0"),
        ("info", "{graph}", "--format", "xml"),
    ],
)
def test_every_bad_option_value_is_one_line(args: tuple[str, ...], graph: Path, tmp_path: Path) -> None:
    argv = [a.format(graph=graph, tmp=tmp_path) for a in args]
    one_line(run(*argv))


def test_plan_output_that_cannot_be_written_is_one_line(graph: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_line(run("plan", str(graph), "-s", "store-all", "-o", str(blocker / "plan.json")))
    assert "plan.json" in line
    line = one_line(run("convert", str(graph), str(tmp_path / "no" / "such" / "dir" / "g.json")))
    assert "cannot write" in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_plan_into_unwritable_directory_is_one_line(graph: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        line = one_line(run("plan", str(graph), "-s", "store-all", "-o", str(locked / "plan.json")))
        assert "Permission denied" in line
    finally:
        locked.chmod(0o700)


# --------------------------------------------------------------------------- nothing executed


def _onnx_with_location(tmp_path: Path, location: str, *, in_constant: bool = False) -> Path:
    import onnx
    from onnx import TensorProto, helper

    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "64")):
        entry = w.external_data.add()
        entry.key, entry.value = k, v
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    if in_constant:
        nodes = [helper.make_node("Constant", [], ["w"], value=w), helper.make_node("MatMul", ["x", "w"], ["y"])]
        inits = []
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        inits = [w]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=inits), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(model.SerializeToString())
    onnx.load(str(path), load_external_data=False)  # a well-formed model
    return path


@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd", "a/../../x.bin", "..", "C:\\weights.bin"])
@pytest.mark.parametrize("in_constant", [False, True])
def test_onnx_external_data_cannot_leave_the_model_folder(tmp_path: Path, location: str, in_constant: bool) -> None:
    path = _onnx_with_location(tmp_path, location, in_constant=in_constant)
    line = one_line(run("info", str(path), "--no-decompose"))
    assert "outside the model's folder" in line and "'w'" in line


def test_onnx_external_data_inside_the_folder_is_fine_and_never_read(tmp_path: Path) -> None:
    path = _onnx_with_location(tmp_path, "weights/w.bin", in_constant=True)
    # the weights file does not exist: structure is enough, nothing is opened
    res = run("info", str(path), "--no-decompose", "--inference")
    assert res.exit_code == 0, res.stderr


def test_nothing_from_a_file_is_unpickled_or_evaluated() -> None:
    """Audit: no pickle/eval/exec/yaml.load/allow_pickle on input data anywhere in the package.

    executors.py pickles only its own messages between the parent and its workers.
    """
    pattern = re.compile(r"\b(pickle\.loads?|eval|exec|yaml\.load|marshal\.loads?|torch\.load|shelve\.open)\s*\(|allow_pickle\s*=\s*True")
    offenders = []
    for path in sorted((REPO / "remat_cli").rglob("*.py")):
        if path.name == "executors.py":
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line.split("#")[0]):
                offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert offenders == []


def test_dimension_limit_applies_to_dims_in_onnx_files(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2**41, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2**41, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    line = one_line(run("info", str(path), "--inference", "--no-decompose"))
    assert "'x'" in line and str(2**41) in line and "--max-dim" in line
    res = run("info", str(path), "--inference", "--no-decompose", "--max-dim", str(2**41))
    assert "--max-dim" not in res.stderr
