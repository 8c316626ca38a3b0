"""--profile: measured per-op seconds from a CSV or a torch.profiler Chrome trace."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.cli import cli
from remat_cli.errors import InputError
from remat_cli.simulate import require_valid
from remat_cli.strategies.store_all import store_all_schedule

from _onnx_models import load, mlp_model, save


@pytest.fixture()
def mlp(tmp_path):
    return save(mlp_model(), tmp_path)


def test_csv_times_nodes_by_id(mlp, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("node,seconds\nmm1,0.5\nbwd:mm1,1.25\nnot-a-node,3\n")
    plain = load(mlp, dims={"batch": 4})
    timed = load(mlp, dims={"batch": 4}, profile=str(csv))
    i, b = timed.index["mm1"], timed.index["bwd:mm1"]
    assert timed.seconds[i] == 0.5 and timed.seconds[b] == 1.25
    assert timed.cost[i] == 0.5  # roofline graphs: the cost is seconds
    others = np.ones(timed.n, dtype=bool)
    others[[i, b]] = False
    assert np.array_equal(timed.seconds[others], plain.seconds[others])
    fact = timed.meta["profile"]
    assert fact["matched_nodes"] == 2 and fact["matched_by"] == "node id" and list(fact["unmatched_entries"]) == ["not-a-node"]
    schedule, _ = store_all_schedule(timed)
    metrics = require_valid(timed, schedule)
    assert metrics.cost == pytest.approx(plain.base_cost - plain.cost[i] - plain.cost[b] + 1.75)


def _trace(events, steps=1):
    evs = [{"ph": "X", "name": f"ProfilerStep#{k}", "dur": 1e6, "ts": 0} for k in range(steps)]
    return json.dumps({"traceEvents": evs + [{"ph": "X", "ts": 0, **e} for e in events] + [{"ph": "M", "name": "meta"}]})


def test_trace_aggregates_per_op_type_when_names_do_not_match(mlp, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(
        _trace(
            [
                {"name": "aten::matmul", "dur": 10.0},
                {"name": "aten::matmul", "dur": 30.0},
                {"name": "autograd::engine::evaluate_function: MmBackward0", "dur": 50.0},
                {"name": "aten::relu", "dur": 4.0},
            ]
        )
    )
    plain = load(mlp, dims={"batch": 4})
    timed = load(mlp, dims={"batch": 4}, profile=str(trace))
    mm = [timed.index["mm1"], timed.index["mm2"]]
    # the mean per call (20 us) over the two MatMul nodes, in proportion to their estimates
    assert timed.seconds[mm].sum() == pytest.approx(2 * 20e-6)
    ratio = plain.seconds[mm[0]] / plain.seconds[mm[1]]
    assert timed.seconds[mm[0]] / timed.seconds[mm[1]] == pytest.approx(ratio)
    grads = [timed.index["bwd:mm1"], timed.index["bwd:mm2"]]
    assert timed.seconds[grads].sum() == pytest.approx(2 * 50e-6)
    assert timed.seconds[timed.index["relu"]] == pytest.approx(4e-6)
    fact = timed.meta["profile"]
    assert fact["matched_by"] == "op type" and fact["matched_nodes"] == 5
    assert timed.seconds[timed.index["ln"]] == plain.seconds[plain.index["ln"]]  # not in the trace


def test_trace_by_node_name_divides_by_steps(mlp, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(_trace([{"name": "relu", "dur": 6.0}, {"name": "relu", "dur": 8.0}], steps=2))
    timed = load(mlp, dims={"batch": 4}, profile=str(trace))
    assert timed.seconds[timed.index["relu"]] == pytest.approx(7e-6)
    assert timed.meta["profile"]["matched_nodes"] == 1


def test_cli_reports_matches_and_warns_when_none_match(mlp, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("mm1,0.5\n")
    r = CliRunner().invoke(cli, ["plan", str(mlp), "--dim", "batch=4", "--profile", str(csv)])
    assert r.exit_code == 0, r.output
    assert "1 of 16 nodes timed from csv" in r.output
    csv.write_text("nothing,0.5\n")
    r = CliRunner().invoke(cli, ["plan", str(mlp), "--dim", "batch=4", "--profile", str(csv)])
    assert r.exit_code == 0 and "matched none" in r.output


@pytest.mark.parametrize(
    "text, needle",
    [
        ("mm1,abc\n", ":1:"),
        ("mm1,nan\n", "finite"),
        ("mm1,-1\n", "finite"),
        ("mm1,1\nmm1,2\n", "twice"),
        ("mm1,1,2\n", "fields"),
        ("", "empty"),
        ('{"traceEvents": 3}', "traceEvents"),
        ('{"traceEvents": [{"ph": "X", "name": "a"}]}', "dur"),
        ('{"traceEvents": [{"ph": "X", "name": "a", "dur": "x"}]}', "seconds"),
        ('{"traceEvents": [', "JSON"),
        ("[" * 100000, "JSON"),
    ],
)
def test_bad_profiles_are_one_line_exit_2(mlp, tmp_path, text, needle):
    bad = tmp_path / "bad.prof"
    bad.write_text(text)
    r = CliRunner().invoke(cli, ["info", str(mlp), "--dim", "batch=4", "--profile", str(bad)])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output
    assert len([ln for ln in r.output.splitlines() if ln.startswith("remat: error")]) == 1


def test_profile_needs_a_time_model():
    from remat_cli.loaders import LoadOptions, load_graph

    with pytest.raises(InputError, match="time model"):
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "t.csv"
            p.write_text("0,1\n")
            load_graph("sample_graphs/training_chain_32.json", LoadOptions(profile=str(p)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_hostile_profiles_never_crash(mlp, tmp_path, text):
    bad = tmp_path / "fuzz.prof"
    bad.write_text(text, encoding="utf-8", errors="surrogatepass")
    r = CliRunner().invoke(cli, ["info", str(mlp), "--dim", "batch=4", "--profile", str(bad)])
    assert r.exit_code in (0, 2), r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["ph", "name", "dur", "x"]), inner, max_size=4),
    max_leaves=10,
)
_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "B", "M"]), "name": st.sampled_from(["mm1", "relu", "aten::matmul", "ProfilerStep#1"]) | _JSON},
    optional={"dur": st.floats(allow_nan=True) | st.integers(-5, 10**30) | _JSON},
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.fixed_dictionaries({"traceEvents": st.lists(_EVENT, max_size=5) | _JSON}) | _JSON)
def test_hostile_traces_never_crash(mlp, tmp_path, doc):
    bad = tmp_path / "fuzz.json"
    bad.write_text(json.dumps(doc))
    r = CliRunner().invoke(cli, ["info", str(mlp), "--dim", "batch=4", "--profile", str(bad), "--no-decompose"])
    assert r.exit_code in (0, 2), r.output
    assert "internal error" not in r.output
