"""Numbers in human units for terminal output; JSON always carries the raw values."""

from __future__ import annotations

import math

__all__ = ["fmt_bytes", "fmt_seconds", "fmt_pct", "fmt_ratio", "fmt_count", "fmt_cost"]


def fmt_bytes(n: float | int | None) -> str:
    """1536 -> '1.50 KiB' (binary units, three significant digits)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.3g} {unit}" if abs(value) >= 100 else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_seconds(s: float | None) -> str:
    """Seconds in µs/ms/s/min as fits."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    if s == 0:
        return "0 s"
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    if s < 120:
        return f"{s:.3g} s"
    return f"{s / 60:.3g} min"


def fmt_pct(x: float | None) -> str:
    """0.253 -> '+25.3%'."""
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    if abs(x) < 5e-4:  # float noise around zero must not read "-0.0%"
        x = 0.0
    return f"{x * 100:+.1f}%"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


def fmt_count(n: int | float) -> str:
    return f"{int(n):,}"


def fmt_cost(x: float, unit: str) -> str:
    """A cost in its unit, compact (FLOPs get G/T prefixes)."""
    if unit in ("flops", "FLOPs"):
        for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if x >= scale:
                return f"{x / scale:.3g} {prefix}FLOP"
        return f"{x:.3g} FLOP"
    if unit in ("seconds", "s"):
        return fmt_seconds(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:.4g}"
