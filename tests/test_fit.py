"""``remat fit`` (issue 15 item 4): the largest value of a dimension whose plan fits."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli.cli import cli
from remat_cli.errors import NoPlanError
from remat_cli.fit import fit_dimension, largest_fitting
from remat_cli.planner import make_plan
from tests._onnx_models import load, mlp_model, save
from tests.test_attention import gpt2_model


@settings(max_examples=60, deadline=None)
@given(threshold=st.integers(0, 600), max_value=st.integers(1, 700), min_value=st.integers(1, 50))
def test_doubling_then_bisection_finds_the_threshold(threshold, max_value, min_value):
    probed: list[int] = []

    def fits(v: int) -> bool:
        probed.append(v)
        return v <= threshold

    v, above = largest_fitting(fits, max_value, min_value)
    if min_value > max_value or threshold < min_value:
        assert (v, above) == (min_value - 1, min_value)
        return
    assert v == min(threshold, max_value)
    if v < max_value:
        assert above == v + 1 and above in probed
    else:
        assert above is None
    assert len(probed) <= 2 * math.ceil(math.log2(max_value + 1)) + 2
    assert all(1 <= p <= max_value for p in probed)


def _store_all_peak(path, **dims) -> int:
    return make_plan(load(path, dims=dims), "store-all").metrics.peak_bytes


@settings(max_examples=6, deadline=None)
@given(k=st.integers(1, 40), slack=st.integers(0, 2000))
def test_store_all_fit_on_a_model_growing_with_batch(tmp_path_factory, k, slack):
    """Memory grows with the batch: v fits, v + 1 does not, both replayed by the simulator."""
    path = save(mlp_model(), tmp_path_factory.mktemp("fit"))
    budget = _store_all_peak(path, batch=k) + slack
    result = fit_dimension(lambda v: load(path, dims={"batch": v}), "batch", budget, strategy="store-all", max_value=4096)
    v = result.best.value
    assert v >= k
    assert result.store_all == result.best
    assert _store_all_peak(path, batch=v) <= budget < _store_all_peak(path, batch=v + 1)
    assert result.first_too_large == v + 1
    assert result.best.peak_bytes == _store_all_peak(path, batch=v)


@pytest.mark.parametrize("dim,fixed", [("batch", {"seq": 16}), ("seq", {"batch": 2})])
def test_recomputation_fits_more_than_store_all(tmp_path, dim, fixed):
    """On a GPT-2-style stack the strategy fits v and not v + 1; store-all fits no more."""
    path = save(gpt2_model(layers=3), tmp_path)

    def at(v: int):
        return load(path, dims={**fixed, dim: v})

    budget = make_plan(at(12), "store-all").metrics.peak_bytes
    result = fit_dimension(at, dim, budget, strategy="chain-dp", max_value=512)
    v = result.best.value
    plan = make_plan(at(v), "chain-dp", budget)
    assert plan.metrics.peak_bytes <= budget and plan.metrics.peak_bytes == result.best.peak_bytes
    with pytest.raises(NoPlanError):
        make_plan(at(v + 1), "chain-dp", budget)
    sa = result.store_all.value
    assert sa >= 12 and v >= sa
    assert make_plan(at(sa), "store-all").metrics.peak_bytes <= budget < make_plan(at(sa + 1), "store-all").metrics.peak_bytes
    gain = result.throughput_gain
    want = (v / result.best.est_seconds) / (sa / result.store_all.est_seconds) - 1
    assert gain == pytest.approx(want)


def test_max_overhead_is_respected(tmp_path):
    path = save(gpt2_model(layers=3), tmp_path)

    def at(v: int):
        return load(path, dims={"seq": 16, "batch": v})

    budget = make_plan(at(8), "store-all").metrics.peak_bytes
    free = fit_dimension(at, "batch", budget, strategy="chain-dp", max_value=256)
    capped = fit_dimension(at, "batch", budget, strategy="chain-dp", max_overhead=0.05, max_value=256)
    assert capped.best.overhead <= 0.05 + 1e-12
    assert capped.best.value <= free.best.value
    nxt = capped.first_too_large
    reason = next(p.reason for p in capped.probes if p.value == nxt)
    assert reason == "no plan fits the budget" or reason.startswith("overhead")
    assert not next(p.fits for p in capped.probes if p.value == nxt)


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_cli_json_value_and_text(tmp_path):
    path = save(mlp_model(), tmp_path)
    budget = _store_all_peak(path, batch=100)
    res = run("fit", path, "--budget", budget, "--dim", "batch=?", "-s", "store-all", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    v = doc["value"]
    assert v >= 100 and doc["first_too_large"] == v + 1
    assert _store_all_peak(path, batch=v) <= budget < _store_all_peak(path, batch=v + 1)
    assert doc["store_all"]["value"] == v and doc["plan"]["peak_bytes"] <= budget
    res = run("fit", path, "--budget", budget, "--dim", "batch=?")
    assert res.exit_code == 0, res.output
    assert f"batch={v + 1} does not fit" in res.stdout and "assumes memory grows with batch" in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 100


def test_cli_nothing_fits_exits_1(tmp_path):
    path = save(mlp_model(), tmp_path)
    res = run("fit", path, "--budget", "16", "--dim", "batch=?", "--format", "json")
    assert res.exit_code == 1
    assert json.loads(res.stdout)["value"] is None


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--budget", "0.5x", "--dim", "batch=?"], "absolute budget"),
        (["--budget", "1GiB"], "exactly one dimension"),
        (["--budget", "1GiB", "--dim", "batch=?", "--dim", "seq=?"], "exactly one dimension"),
        (["--budget", "1GiB", "--dim", "width=?"], "width"),
        (["--budget", "1GiB", "--dim", "batch=?", "--max-overhead", "lots"], "max overhead"),
    ],
)
def test_cli_bad_usage_is_one_line_exit_2(tmp_path, args, needle):
    path = save(mlp_model(), tmp_path)
    res = run("fit", path, *args)
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output


def test_cli_pytorch_factory_without_torch_is_one_line(tmp_path):
    """Without torch, FILE.py:FACTORY is one line naming remat-cli[torch], exit 2 (tests/test_torch_fit.py: with it)."""
    import subprocess
    import sys

    (tmp_path / "f.py").write_text("def make(batch=1):\n    raise AssertionError('never run')\n")
    code = (
        "import sys; sys.modules['torch'] = None; from remat_cli.cli import main; "
        f"sys.argv = ['remat', 'fit', {str(tmp_path / 'f.py')!r} + ':make', '--budget', '1GiB', '--dim', 'batch=?']; main()"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "remat-cli[torch]" in lines[0] and "never run" not in res.stderr
