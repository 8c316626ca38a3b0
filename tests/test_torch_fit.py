"""``remat fit FILE.py:FACTORY --dim batch=?``: capture the training step at each probed value.

A tiny MLP factory whose activations grow with ``batch``; each capture runs one real step
on the CPU (about a second or two), so captures are cached across examples and the CLI
runs use a narrow --min-value/--max-value range. Every answer is checked by capturing and
planning v and v + 1 directly (make_plan replays each plan in the simulator).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from remat_cli.cli import cli  # noqa: E402
from remat_cli.errors import InputError, NoPlanError  # noqa: E402
from remat_cli.fit import factory_loader, fit_dimension  # noqa: E402
from remat_cli.graph import Graph  # noqa: E402
from remat_cli.planner import make_plan  # noqa: E402

FACTORY = """
import torch
from torch import nn


def make(batch=1, width=32):
    torch.manual_seed(0)
    layers = [nn.Linear(16, width), nn.ReLU()]
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 4))
    return model, (torch.randn(batch, 16),)


def no_batch(width=32):
    return make(1, width)


def fails_above_8(batch=1):
    if batch > 8:
        raise RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 1 TiB")
    return make(batch)
"""


@pytest.fixture(scope="module")
def factory_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("torch_fit") / "f.py"
    path.write_text(FACTORY)
    return str(path)


@pytest.fixture(scope="module")
def captured(factory_file):
    """``at(v)``: the graph of make(batch=v), captured once per v."""
    load = factory_loader(f"{factory_file}:make", "batch")
    cache: dict[int, Graph] = {}

    def at(v: int) -> Graph:
        if v not in cache:
            cache[v] = load(v)
        return cache[v]

    return at


def _fits(g: Graph, strategy: str, budget: int) -> bool:
    try:
        plan = make_plan(g, strategy, budget)
    except NoPlanError:
        return False
    assert plan.metrics.peak_bytes <= budget
    return True


def test_activations_grow_with_batch(captured):
    peaks = [make_plan(captured(v), "store-all").metrics.peak_bytes for v in (1, 2, 4)]
    assert peaks[0] < peaks[1] < peaks[2]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.integers(1, 12), slack=st.integers(0, 300), strategy=st.sampled_from(["store-all", "chain-dp"]))
def test_factory_fit_value_fits_and_next_does_not(captured, k, slack, strategy):
    budget = make_plan(captured(k), "store-all").metrics.peak_bytes + slack
    result = fit_dimension(captured, "batch", budget, strategy=strategy, max_value=13)
    v = result.best.value
    assert v >= k
    assert _fits(captured(v), strategy, budget)
    assert result.best.peak_bytes == make_plan(captured(v), strategy, budget).metrics.peak_bytes
    if v < 13:
        assert result.first_too_large == v + 1
        assert not _fits(captured(v + 1), strategy, budget)
    sa = result.store_all.value
    assert _fits(captured(sa), "store-all", budget)
    assert sa == 13 or not _fits(captured(sa + 1), "store-all", budget)


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_cli_fit_factory_json(factory_file, captured):
    """The CLI captures FACTORY(batch=v) itself; v fits and v + 1 does not, checked here."""
    budget = make_plan(captured(20), "store-all").metrics.peak_bytes + 100
    res = run(
        "fit",
        f"{factory_file}:make",
        "--budget",
        budget,
        "--dim",
        "batch=?",
        "-s",
        "store-all",
        "--min-value",
        16,
        "--max-value",
        24,
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    v = doc["value"]
    assert 20 <= v < 24 and doc["first_too_large"] == v + 1
    assert _fits(captured(v), "store-all", budget) and not _fits(captured(v + 1), "store-all", budget)
    assert doc["plan"]["peak_bytes"] == make_plan(captured(v), "store-all").metrics.peak_bytes


def test_cli_fixed_dims_are_keywords(factory_file):
    """--dim width=8 reaches the factory: a narrower MLP fits a larger batch in the same budget."""
    narrow = factory_loader(f"{factory_file}:make", "batch", {"width": 8})
    budget = make_plan(narrow(4), "store-all").metrics.peak_bytes
    res = run(
        "fit",
        f"{factory_file}:make",
        "--budget",
        budget,
        "--dim",
        "width=8",
        "--dim",
        "batch=?",
        "-s",
        "store-all",
        "--min-value",
        4,
        "--max-value",
        5,
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["value"] == 4 and doc["first_too_large"] == 5
    assert doc["plan"]["peak_bytes"] == budget


def test_factory_without_the_keyword_is_one_line(factory_file):
    res = run("fit", f"{factory_file}:no_batch", "--budget", "1GiB", "--dim", "batch=?")
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "takes no keyword argument 'batch'" in lines[0] and "Traceback" not in res.output


def test_failing_capture_is_a_failing_probe(factory_file):
    """A factory that raises (out of memory) above 8: batch=8 is the answer, batch=9 the probe that failed."""
    res = run(
        "fit",
        f"{factory_file}:fails_above_8",
        "--budget",
        "1GiB",
        "--dim",
        "batch=?",
        "-s",
        "store-all",
        "--min-value",
        8,
        "--max-value",
        9,
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["value"] == 8 and doc["first_too_large"] == 9
    text = json.dumps(doc)
    assert "batch=9" in text and "RuntimeError" in text and "not enough memory" in text
    res = run("fit", f"{factory_file}:fails_above_8", "--budget", "1GiB", "--dim", "batch=?", "--min-value", 9)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "not enough memory" in res.output


def test_onnx_only_options_are_refused(factory_file):
    res = run("fit", f"{factory_file}:make", "--budget", "1GiB", "--dim", "batch=?", "--precision", "bf16")
    assert res.exit_code == 2 and "--precision applies to ONNX models" in res.output


def test_loader_errors_are_input_errors(factory_file):
    with pytest.raises(InputError, match="no function 'nope'"):
        factory_loader(f"{factory_file}:nope", "batch")(1)
