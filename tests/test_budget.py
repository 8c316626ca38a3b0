"""Budget parsing per DESIGN §1."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remat_cli.budget import parse_budget
from remat_cli.errors import InputError
from remat_cli.planner import activation_at_least, ratio_at_least


@pytest.mark.parametrize(
    "text, nbytes",
    [
        ("123456", 123456),
        ("12GiB", 12 * 2**30),
        ("800MB", 800 * 10**6),
        ("1.5KiB", 1536),
        ("2kb", 2000),
        ("3G", 3 * 2**30),
        ("7 B", 7),
        ("1e3", 1000),
    ],
)
def test_absolute(text, nbytes):
    b = parse_budget(text)
    assert b.bytes == nbytes and b.ratio is None and b.resolve(10**12) == nbytes


@pytest.mark.parametrize("text, ratio", [("0.5x", 0.5), ("50%", 0.5), ("1X", 1.0), ("125%", 1.25)])
def test_relative(text, ratio):
    b = parse_budget(text)
    assert b.ratio == pytest.approx(ratio) and b.bytes is None
    assert b.resolve(1000) == int(ratio * 1000)


def test_none():
    assert parse_budget("none").is_none and parse_budget("none").resolve(5) is None


@pytest.mark.parametrize("text", ["abc", "12 parsecs", "-5", "0x", "-1%", "GiB"])
def test_bad(text):
    with pytest.raises(InputError):
        parse_budget(text)


# --------------------------------------------------------------------------- activation fractions


@pytest.mark.parametrize("text, fraction", [("0.5act", 0.5), ("0act", 0.0), ("1act", 1.0), (".25 ACT", 0.25), ("1.5act", 1.5)])
def test_activation_fraction_parses(text, fraction):
    b = parse_budget(text)
    assert b.activation == pytest.approx(fraction) and b.bytes is None and b.ratio is None and not b.is_none


@pytest.mark.parametrize("text", ["-0.5act", "act", "0.5 acts", "act=0.5"])
def test_activation_fraction_rejects(text):
    with pytest.raises(InputError) as info:
        parse_budget(text)
    assert "0.5act" in info.value.message  # the error shows the form it accepts


@given(lb=st.integers(0, 10**12), span=st.integers(0, 10**12), f=st.floats(0, 2))
def test_activation_fraction_resolves_between_lb_and_store_all(lb, span, f):
    """0act is the lower bound, 1act the store-all peak, fixed memory outside the fraction."""
    ref = lb + span
    b = parse_budget(f"{f:.6f}act")
    f = b.activation
    got = b.resolve(ref, lb)
    assert got == lb + int(math.floor(f * span))
    assert parse_budget("0act").resolve(ref, lb) == lb and parse_budget("1act").resolve(ref, lb) == ref
    assert lb <= got and (f > 1 or got <= ref)
    with pytest.raises(ValueError):
        b.resolve(ref)  # the lower bound is needed


@given(nbytes=st.integers(1, 10**13), ref=st.integers(1, 10**13), lb=st.integers(0, 10**12))
def test_printed_ratios_resolve_to_at_least_the_budget(nbytes, ref, lb):
    """The 3-decimal ratios an error prints, typed back in, give at least that many bytes."""
    r = ratio_at_least(nbytes, ref)
    assert r is not None and parse_budget(f"{r:.3f}x").resolve(ref) >= nbytes
    assert r == 0.001 or parse_budget(f"{r - 0.001:.3f}x").resolve(ref) < nbytes or r * ref - nbytes < 2
    if ref > lb:
        a = activation_at_least(nbytes, ref, lb)
        assert a is not None and parse_budget(f"{a:.3f}act").resolve(ref, lb) >= nbytes


def _plain_graph():
    from remat_cli import generators, training

    g = generators.random_dag(14, 0.3, seed=5, max_size=7)
    return training.checkmate_training_graph(g)


def test_activation_budget_plans_through_the_planner():
    from remat_cli.planner import make_plan, resolve_budget, store_all_peak
    from remat_cli.simulate import simulate

    g = _plain_graph()
    ref = store_all_peak(g)
    assert resolve_budget(g, parse_budget("0act")) == g.lb and resolve_budget(g, parse_budget("1act")) == ref
    plan = make_plan(g, "store-all", parse_budget("1act"))
    assert plan.budget_bytes == ref and simulate(g, plan.schedule).metrics.peak_bytes <= ref
    plan = make_plan(g, "treewidth", parse_budget("0.9act"))
    want = g.lb + int(0.9 * (ref - g.lb))
    assert plan.budget_bytes == want and simulate(g, plan.schedule).metrics.peak_bytes <= want


def test_activation_budget_on_the_command_line(tmp_path):
    from click.testing import CliRunner

    from remat_cli.cli import cli
    from remat_cli.loaders import remat_json
    from remat_cli.planner import store_all_peak

    g = _plain_graph()
    path = tmp_path / "g.json"
    path.write_text(remat_json.dumps(g))
    ref = store_all_peak(g)
    res = CliRunner().invoke(cli, ["plan", str(path), "-s", "store-all", "--budget", "1act", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["budget_bytes"] == ref
    res = CliRunner().invoke(cli, ["tradeoff", str(path), "-S", "store-all", "--budgets", "0act,1act", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert [b["bytes"] for b in json.loads(res.stdout)["budgets"]] == [ref, g.lb]
    assert "0.5act" in CliRunner().invoke(cli, ["plan", "--help"]).output


def test_ratio_budget_below_the_lower_bound_says_ratios_and_what_to_run(tmp_path):
    from click.testing import CliRunner

    from remat_cli.cli import cli
    from remat_cli.loaders import remat_json
    from remat_cli.planner import store_all_peak
    from remat_cli.sweep import smallest_budget

    g = _plain_graph()
    path = tmp_path / "g.json"
    path.write_text(remat_json.dumps(g))
    ref = store_all_peak(g)
    ratio = (g.lb - 1) / ref
    res = CliRunner().invoke(cli, ["plan", str(path), "-s", "treewidth", "--budget", f"{ratio:.6f}x"])
    assert res.exit_code == 1
    err = res.stderr
    assert "lower bound" in err and f"{ratio_at_least(g.lb, ref):.3f}x" in err and "0.000act" in err
    found = smallest_budget(g, "treewidth")
    assert f"{ratio_at_least(found.budget_bytes, ref):.3f}x" in err
    assert f"{activation_at_least(found.budget_bytes, ref, g.lb):.3f}act" in err
    assert f"remat tradeoff {path}" in err
    assert len(err.strip().splitlines()) == 1


def test_one_budget_list_parser_accepts_none_only_where_allowed() -> None:
    """``tradeoff`` and ``batch`` share one ``--budgets`` parser; only batch takes ``none``."""
    from remat_cli.budget import parse_budget_list

    assert [b.text for b in parse_budget_list(" 0.9x, ,50%,8GiB ")] == ["0.9x", "50%", "8GiB"]
    assert [b.is_none for b in parse_budget_list("none,0.5x", allow_none=True)] == [True, False]
    for bad, allow in (("none,0.5x", False), (" , ", True), ("", False), ("1x,lots", True)):
        with pytest.raises(InputError):
            parse_budget_list(bad, allow_none=allow)
