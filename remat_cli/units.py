"""Numbers in human units for terminal output; JSON always carries the raw values.

Every formatter prints at most three or four significant digits and never scientific
notation: a value that rounds up to the next unit's threshold moves to that unit
(``1023.7 MiB`` reads ``1.00 GiB``, not ``1.02e+03 MiB``).

A bottom-layer module (it imports nothing of remat_cli), so that the core, report/ and
cli.py can all use it without the core importing the report layer.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "fmt_bytes",
    "fmt_seconds",
    "fmt_pct",
    "fmt_ratio",
    "fmt_count",
    "fmt_cost",
    "fmt_bytes_pair",
    "shorten",
    "shorten_all",
    "visible",
    "fmt_bytes_exact",
    "Fact",
    "Phrase",
    "say",
    "to_data",
    "from_data",
]

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
# (seconds per unit, name, value from which the next unit takes over)
_TIME_UNITS = (
    (1e-9, "ns", 1000.0),
    (1e-6, "µs", 1000.0),
    (1e-3, "ms", 1000.0),
    (1.0, "s", 120.0),
    (60.0, "min", 120.0),
    (3600.0, "h", 48.0),
    (86400.0, "days", math.inf),
)


def _digits(value: float) -> str:
    """``value`` (>= 0) with three significant digits, without an exponent: 1.50, 12.5, 512, 1010."""
    if value >= 99.95:
        return f"{value:.0f}"
    if value >= 9.995:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_bytes(n: float | int | None) -> str:
    """1536 -> '1.50 KiB' (binary units, three significant digits; below 1 KiB exact bytes)."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "-"
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    if value < 1024:
        return f"{sign}{int(abs(n))} B"
    k = 0
    while k + 1 < len(_BYTE_UNITS) and value >= 1024:
        value /= 1024
        k += 1
    if round(value) >= 1024 and k + 1 < len(_BYTE_UNITS):  # 1023.7 MiB reads 1.00 GiB
        value /= 1024
        k += 1
    return f"{sign}{_digits(value)} {_BYTE_UNITS[k]}"


def fmt_bytes_exact(n: int) -> str:
    """1536 -> '1.50 KiB (1536 B)': human units and the exact count, as error lines give sizes."""
    return f"{fmt_bytes(n)} ({n} B)"


def fmt_bytes_pair(a: int, b: int) -> tuple[str, str]:
    """``a`` and ``b`` in human units, with exact byte counts added where the two would
    otherwise read the same (so '1.50 GiB is above 1.50 GiB' never happens)."""
    fa, fb = fmt_bytes(a), fmt_bytes(b)
    if fa == fb and a != b:
        return f"{fa} ({a:,} B)", f"{fb} ({b:,} B)"
    return fa, fb


def fmt_seconds(s: float | None) -> str:
    """Seconds in ns/µs/ms/s/min/h/days as fits, three significant digits."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    if math.isinf(s):
        return "inf" if s > 0 else "-inf"
    if s == 0:
        return "0 s"
    sign = "-" if s < 0 else ""
    s = abs(float(s))
    if s < 0.005e-9:
        return f"{sign}<0.01 ns"
    for k, (scale, unit, top) in enumerate(_TIME_UNITS):
        value = s / scale
        text = _digits(value)
        if float(text) < top or k + 1 == len(_TIME_UNITS):
            return f"{sign}{text} {unit}"
    raise AssertionError("unreachable")


def fmt_pct(x: float | None) -> str:
    """0.253 -> '+25.3%'."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) < 5e-4:  # float noise around zero must not read "-0.0%"
        x = 0.0
    return f"{x * 100:+.1f}%"


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


def fmt_count(n: int | float) -> str:
    return f"{int(n):,}"


def fmt_cost(x: float, unit: str) -> str:
    """A cost in its unit, compact (FLOPs get k/M/G/T/P/E prefixes)."""
    if unit in ("flops", "FLOPs"):
        if x < 999.5:
            return "<0.01 FLOP" if 0 < x < 0.005 else f"{_digits(x)} FLOP"
        for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if x >= scale * 0.9995 or prefix == "k":
                return f"{_digits(x / scale)} {prefix}FLOP"
    if unit in ("seconds", "s"):
        return fmt_seconds(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return _plain(x)


def _plain(x: float) -> str:
    """Four significant digits in positional notation (no exponent), thousands separated."""
    if x == 0 or not math.isfinite(x):
        return str(x)
    places = max(0, 3 - math.floor(math.log10(abs(x))))
    if places > 18:
        return "<0.000000000000000001" if x > 0 else "-<0.000000000000000001"
    text = f"{x:,.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def visible(text: str, *, breaks: bool = True) -> str:
    """``text`` with each character that prints nothing written out as Python would (ESC as
    ``\\x1b``, CR as ``\\r``), line breaks kept unless ``breaks`` is false (a message of
    one line: ``\\n``): a name from a file must not move the cursor, colour or retitle the
    user's terminal, nor hide part of itself."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or (breaks and c == "\n") else repr(c)[1:-1] for c in text)


def shell_word(text: str) -> str:
    """``text`` as one word of a POSIX shell command a user can paste: ``shlex.quote``'s
    form, or where it holds a character that prints nothing (which :func:`visible` would
    write out, so the pasted word would name another file) bash's and zsh's ``$'...'``
    with that character escaped (``$'a\\x1bb.json'``)."""
    import shlex

    if text.isprintable():
        return shlex.quote(text)
    out = []
    for c in text:
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        else:
            o = ord(c)
            if 0xDC80 <= o <= 0xDCFF:  # a byte of the name that is not UTF-8 (surrogateescape)
                out.append(f"\\x{o - 0xDC00:02x}")
            else:
                out.append(f"\\x{o:02x}" if o < 0x80 else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
    return "$'" + "".join(out) + "'"


def shorten(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters (``/features/…/conv1/Conv``):
    the start says where a value lives, the end which one it is."""
    if width <= 0 or len(text) <= width:
        return text
    if width == 1:
        return "…"
    tail = (width - 1) * 3 // 5  # the end tells names apart: give it more room
    head = width - 1 - tail
    return text[:head] + "…" + text[len(text) - tail :]


def shorten_all(texts: list[str], width: int) -> list[str]:
    """Each text shortened to ``width`` (see :func:`shorten`), widened where needed so that
    different texts never read the same."""
    out = [shorten(t, width) for t in texts]
    w = width
    while len(set(out)) < len(set(texts)) and w < max((len(t) for t in texts), default=0):
        w += 4
        out = [shorten(t, w) for t in texts]
    return out


#: What a :class:`Fact`'s number measures, which decides how it reads:
#: ``bytes`` -> :func:`fmt_bytes`; ``change`` (a relative change, 0.0123) -> '+1.23%';
#: ``count`` -> '11,689,512'; ``byte count`` (exact bytes) -> '46,758,048 B';
#: ``flops`` -> :func:`fmt_cost` in FLOPs ('1.82 GFLOP'); ``flop rate`` (FLOP/s) ->
#: '19.5 TFLOP/s'; ``bandwidth`` (bytes/s) -> '2039 GB/s'.
FactKind = Literal["bytes", "change", "count", "byte count", "flops", "flop rate", "bandwidth"]
FACT_KINDS: tuple[str, ...] = ("bytes", "change", "count", "byte count", "flops", "flop rate", "bandwidth")


@dataclass(frozen=True)
class Fact:
    """A number with what it measures: strategies hand these up in ``StrategyResult.info``
    instead of formatted text, and :func:`say` turns them into words."""

    value: float | int
    kind: FactKind


@dataclass(frozen=True)
class Phrase:
    """A fixed sentence with typed facts in it: ``template`` holds one ``{}`` per item of
    ``args`` (each a :class:`Fact`, a nested :class:`Phrase`, or a plain str/int), so the
    numbers stay data until :func:`say` renders them."""

    template: str
    args: tuple[Any, ...] = ()


def say(value: Any) -> Any:
    """The one renderer of facts: a :class:`Fact` or :class:`Phrase` in words; any other
    value (plain numbers, texts, lists) unchanged, for tables and JSON alike."""
    if isinstance(value, Fact):
        return _say_fact(value)
    if isinstance(value, Phrase):
        return value.template.format(*(str(say(a)) for a in value.args))
    return value


def _say_fact(fact: Fact) -> str:
    v = fact.value
    if fact.kind == "bytes":
        return fmt_bytes(v)
    if fact.kind == "change":
        return f"{v:+.2%}"
    if fact.kind == "count":
        return fmt_count(v)
    if fact.kind == "byte count":
        return f"{int(v):,} B"
    if fact.kind == "flops":
        return fmt_cost(float(v), "flops")
    if fact.kind == "flop rate":
        return f"{v / 1e12:.3g} TFLOP/s"
    if fact.kind == "bandwidth":
        return f"{v / 1e9:.4g} GB/s"
    raise ValueError(f"unknown fact kind {fact.kind!r}")


def to_data(value: Any) -> Any:
    """``value`` as plain JSON data, for ``Graph.meta``: a :class:`Fact` becomes
    ``{"value": v, "kind": k}``, a :class:`Phrase` ``{"phrase": template, "args": [...]}``;
    other values are returned as they are. :func:`from_data` reads them back."""
    if isinstance(value, Fact):
        return {"value": value.value, "kind": value.kind}
    if isinstance(value, Phrase):
        return {"phrase": value.template, "args": [to_data(a) for a in value.args]}
    return value


def from_data(value: Any) -> Any:
    """The :class:`Fact` or :class:`Phrase` that :func:`to_data` wrote; any other value (a
    plain string an older remat wrote into a saved graph, a number, or data that is not a
    well-formed fact) is returned as it is, so that rendering it never fails."""
    if isinstance(value, dict) and set(value) == {"value", "kind"}:
        v, kind = value["value"], value["kind"]
        ok = kind in FACT_KINDS and (
            (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63) or (isinstance(v, float) and math.isfinite(v))
        )
        return Fact(v, kind) if ok else value
    if isinstance(value, dict) and set(value) == {"phrase", "args"}:
        template, args = value["phrase"], value["args"]
        if not isinstance(template, str) or not isinstance(args, list) or _fields(template) != len(args):
            return value
        return Phrase(template, tuple(from_data(a) for a in args))
    return value


def _fields(template: str) -> int:
    """How many plain ``{}`` fields ``template`` has; -1 if it has any other kind (named,
    numbered, with a format spec) or does not parse: a saved file may hold anything."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return -1
    fields = [(name, spec, conv) for _, name, spec, conv in parts if name is not None]
    if any(f != ("", "", None) for f in fields):
        return -1
    return len(fields)
