"""Budget parsing per DESIGN §1."""

from __future__ import annotations

import pytest

from remat_cli.budget import parse_budget
from remat_cli.errors import InputError


@pytest.mark.parametrize(
    "text, nbytes",
    [("123456", 123456), ("12GiB", 12 * 2**30), ("800MB", 800 * 10**6), ("1.5KiB", 1536), ("2kb", 2000), ("3G", 3 * 2**30), ("7 B", 7), ("1e3", 1000)],
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
