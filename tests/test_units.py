"""The human-unit formatters over the whole range of magnitudes (hypothesis properties),
and float noise in overhead (a plan that computes each needed node once costs exactly
its base cost: overhead 0, never -1.1e-16)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli.graph import Graph, NodeSpec
from remat_cli.plandoc import metrics_to_json
from remat_cli.units import fmt_bytes, fmt_bytes_pair, fmt_cost, fmt_pct, fmt_seconds
from remat_cli.schedule import Schedule
from remat_cli.simulate import simulate
from remat_cli.strategies.store_all import store_all_schedule

from conftest import raw_dags

_BYTES = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}
# units past EiB: only 1000-1023 EiB rounds up into them (no graph is that large: MAX_TOTAL_BYTES)
_PARSE = {**_BYTES, "ZiB": 2**70, "YiB": 2**80}
_SECONDS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "days": 86400.0}
_LIMIT = {"ns": 1000, "µs": 1000, "ms": 1000, "s": 120, "min": 120, "h": 48}
_NUMBER = r"\d+(?:\.\d+)?"


def _parse_bytes(text: str) -> float:
    m = re.fullmatch(rf"({_NUMBER}) (B|KiB|MiB|GiB|TiB|PiB|EiB|ZiB|YiB)", text)
    assert m, f"{text!r} is not '<number> <unit>'"
    return float(m.group(1)) * _PARSE.get(m.group(2), 1)


# every magnitude, and the values right around each power of two (unit boundaries)
_ANY_BYTES = st.one_of(
    st.integers(0, 2**62),
    st.builds(lambda e, d: min(max(0, (1 << e) + d), 2**62), st.integers(0, 62), st.integers(-3, 3)),
    st.builds(lambda e, f: int(f * (1 << e)), st.integers(10, 60), st.floats(0.97, 1.0)),
)


@given(_ANY_BYTES)
def test_fmt_bytes_is_a_short_true_number_in_one_unit(n: int) -> None:
    """No exponent, at most three significant digits before the unit (four from 1000 up),
    the number below the unit's 1024, and within rounding of the true value."""
    text = fmt_bytes(n)
    assert "e" not in text.split()[0] and len(text) <= 9, text
    value = _parse_bytes(text)
    number, unit = text.split()
    if unit == "B":
        assert int(number) == n  # below 1 KiB: exact
    else:
        assert 1 <= float(number) < 1024, text
        assert abs(value - n) <= 0.0051 * n, (n, text)  # three significant digits


@given(st.sampled_from(list(_BYTES.values())), st.integers(1000, 1023), st.floats(0, 0.999))
def test_fmt_bytes_1000_to_1023_of_a_unit_reads_plainly(unit: int, whole: int, frac: float) -> None:
    """The reported bug: 1000-1023 MiB printed as '1.01e+03 MiB'."""
    text = fmt_bytes(int((whole + frac) * unit))
    assert "e+" not in text and re.fullmatch(rf"{_NUMBER} \w+", text), text
    assert abs(_parse_bytes(text) - (whole + frac) * unit) <= 0.0051 * (whole + frac) * unit


def test_fmt_bytes_examples() -> None:
    assert fmt_bytes(0) == "0 B" and fmt_bytes(1) == "1 B" and fmt_bytes(1023) == "1023 B"
    assert fmt_bytes(1536) == "1.50 KiB"
    assert fmt_bytes(1010 * 2**20) == "1010 MiB"
    assert fmt_bytes(int(1023.7 * 2**20)) == "1.00 GiB"
    assert fmt_bytes(2**62) == "4.00 EiB"
    assert fmt_bytes(None) == "-"


@given(st.integers(0, 2**62), st.integers(0, 2**62))
def test_fmt_bytes_pair_tells_different_values_apart(a: int, b: int) -> None:
    fa, fb = fmt_bytes_pair(a, b)
    assert (fa == fb) == (a == b)


@given(st.floats(min_value=1e-15, max_value=1e9, allow_nan=False))
def test_fmt_seconds_is_a_short_true_number(s: float) -> None:
    text = fmt_seconds(s)
    if text == "<0.01 ns":
        assert s < 0.005e-9
        return
    m = re.fullmatch(rf"({_NUMBER}) (ns|µs|ms|s|min|h|days)", text)
    assert m, text
    number, unit = float(m.group(1)), m.group(2)
    if unit in _LIMIT:
        assert number < _LIMIT[unit], text  # 1000 ms reads 1.00 s
    value = number * _SECONDS[unit]
    assert abs(value - s) <= 0.0051 * s + 0.005e-9, (s, text)


def test_fmt_seconds_examples() -> None:
    assert fmt_seconds(0) == "0 s" and fmt_seconds(None) == "-" and fmt_seconds(float("nan")) == "-"
    assert fmt_seconds(0.9996) == "1.00 s"
    assert fmt_seconds(2.5e-4) == "250 µs"
    assert fmt_seconds(1e30).endswith(" days") and "e" not in fmt_seconds(1e30).split()[0]
    assert fmt_seconds(1e-20) == "<0.01 ns"


@given(st.floats(min_value=0, max_value=1e24, allow_nan=False))
def test_fmt_cost_flops_has_no_exponent(x: float) -> None:
    text = fmt_cost(x, "flops")
    m = re.fullmatch(rf"(<?{_NUMBER}) ([kMGTPE]?)FLOP", text)
    assert m, text
    if not m.group(1).startswith("<"):
        scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}[m.group(2)]
        assert abs(float(m.group(1)) * scale - x) <= 0.0051 * x + 0.005


@given(st.floats(min_value=1e-9, max_value=1e15, allow_nan=False))
def test_fmt_cost_other_units_have_no_exponent(x: float) -> None:
    text = fmt_cost(x, "unit")
    assert "e" not in text, text
    assert math.isclose(float(text.replace(",", "")), x, rel_tol=1e-3), (x, text)


@given(st.floats(min_value=-1e-3, max_value=1e-3, allow_nan=False))
def test_fmt_pct_noise_never_reads_negative_zero(x: float) -> None:
    assert fmt_pct(x) not in ("-0.0%", "+-0.0%")
    assert "e" not in fmt_pct(x)


@settings(max_examples=40)
@given(raw_dags(max_nodes=14), st.lists(st.floats(1e-6, 1e6), min_size=14, max_size=14))
def test_store_all_overhead_is_exactly_zero(raw, costs) -> None:
    """Each needed node computed once costs exactly the base cost: JSON says 0.0, not
    -1.1e-16, whatever order the float costs are summed in."""
    nodes = [replace(spec, cost=costs[k]) for k, spec in enumerate(raw.nodes)]
    graph = replace(raw, nodes=nodes).build()
    schedule, _order = store_all_schedule(graph)
    m = simulate(graph, schedule).metrics
    assert m is not None
    assert m.overhead == 0.0 and m.cost == m.base_cost
    assert json.loads(json.dumps(metrics_to_json(m)))["overhead"] == 0.0


def test_float_noise_in_costs_gives_zero_overhead() -> None:
    """Costs whose sum depends on the order still give overhead exactly 0 (these twelve
    gave -1.1e-16 when the plan's cost and the base cost were summed differently)."""
    costs = [
        803856.280984168,
        907153.7669968901,
        840718.5222468971,
        746184.8854047761,
        689595.179300575,
        178154.86564514544,
        432638.0009768043,
        157896.94375300268,
        714824.4519690964,
        667778.7396858742,
        252586.40779463082,
        64414.193348596884,
    ]
    needed = [k for k in range(12) if k not in (0, 1, 4)]
    nodes = [NodeSpec(id=f"n{i}", op="op", mem=1, cost=c) for i, c in enumerate(costs)]
    graph = Graph.from_nodes(nodes, targets=[f"n{k}" for k in needed], source="test")
    schedule = Schedule.from_named([("compute", f"n{k}") for k in needed], graph.index)
    m = simulate(graph, schedule).metrics
    assert m is not None and m.overhead == 0.0 and m.cost == m.base_cost
