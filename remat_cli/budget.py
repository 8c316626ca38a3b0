"""Memory budgets: absolute sizes (``12GiB``, ``800MB``, ``123456``), relative to the
store-all peak (``0.5x``, ``50%``), as DESIGN §1 fixes, or a fraction of the activation
memory (``0.5act``). ``none`` means no budget.

``F act`` leaves fixed memory (parameters, gradients, optimizer state, inputs) out, the
way PyTorch's ``activation_memory_budget`` does: ``0act`` is as little as any schedule
can use (the lower bound LB), ``1act`` is what storing everything uses (the store-all
peak), and ``F act`` is ``LB + F * (store-all peak - LB)`` bytes, fixed memory included.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from remat_cli.errors import InputError

__all__ = ["Budget", "parse_budget", "parse_budget_list", "parse_size", "UNITS"]

UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e(\d+))?\s*([a-zA-Z]*)\s*$")
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(x|%)\s*$", re.IGNORECASE)
_ACTIVATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*act\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Budget:
    """A parsed budget: at most one of ``bytes``, ``ratio`` (of the store-all peak) and
    ``activation`` (fraction of the activation memory) is set; none of them for ``none``."""

    text: str
    bytes: int | None = None
    ratio: float | None = None
    activation: float | None = None

    @property
    def is_none(self) -> bool:
        return self.bytes is None and self.ratio is None and self.activation is None

    def resolve(self, store_all_peak: int, lower_bound: int | None = None) -> int | None:
        """Bytes this budget allows for a graph whose store-all plan peaks at ``store_all_peak``.

        An activation fraction also needs the graph's ``lower_bound`` (ValueError without).
        """
        if self.bytes is not None:
            return self.bytes
        if self.ratio is not None:
            return int(math.floor(self.ratio * store_all_peak))
        if self.activation is not None:
            if lower_bound is None:
                raise ValueError(f"budget {self.text!r} needs the graph's lower bound to resolve")
            span = max(store_all_peak - lower_bound, 0)
            return lower_bound + int(math.floor(self.activation * span))
        return None

    def __str__(self) -> str:
        return self.text


def parse_size(text: str) -> int:
    """Parse an absolute size: a number of bytes with an optional unit (KB=1000, KiB=K=1024)."""
    m = _SIZE.match(text)
    if not m or m.group(3).lower() not in UNITS:
        raise InputError(f"cannot read size {text!r}: use bytes with an optional unit, e.g. 12GiB, 800MB, 123456")
    value = float(m.group(1)) * (10 ** int(m.group(2)) if m.group(2) else 1)
    return int(value * UNITS[m.group(3).lower()])


def parse_budget(text: str) -> Budget:
    """Parse ``12GiB``, ``800MB``, ``123456``, ``0.5x``, ``50%``, ``0.5act`` or ``none``."""
    stripped = text.strip()
    if stripped.lower() in ("none", "off", ""):
        return Budget(text=stripped or "none")
    m = _ACTIVATION.match(stripped)
    if m:
        return Budget(text=stripped, activation=float(m.group(1)))
    m = _RELATIVE.match(stripped)
    if m:
        ratio = float(m.group(1))
        if m.group(2) == "%":
            ratio /= 100.0
        if ratio <= 0:
            raise InputError(f"budget {text!r} must be positive")
        return Budget(text=stripped, ratio=ratio)
    try:
        size = parse_size(stripped)
    except InputError:
        raise InputError(
            f"cannot read budget {text!r}: use a size (12GiB, 800MB, 123456), "
            "a ratio of the store-all peak (0.5x, 50%), a fraction of the activation memory "
            "(0.5act: 0act = the lower bound, 1act = the store-all peak), or none"
        ) from None
    return Budget(text=stripped, bytes=size)


def parse_budget_list(text: str, *, allow_none: bool = False) -> tuple[Budget, ...]:
    """``0.9x,0.7x,8GiB`` -> budgets: the one parser of ``--budgets`` (tradeoff and batch).

    Items are comma-separated, each parsed by :func:`parse_budget`; blanks around items
    and empty items are ignored; at least one budget is required (else InputError).
    ``none`` is accepted only with ``allow_none``: ``batch`` plans each file once per
    budget, and a plan without a budget is a meaningful row there, whereas a trade-off
    sweep places each point at a budget on the memory axis and needs a size or ratio.
    """
    out = []
    for part in text.split(","):
        if not part.strip():
            continue
        budget = parse_budget(part)
        if budget.is_none and not allow_none:
            raise InputError(f"--budgets: {part.strip()!r} is not a budget (a sweep needs sizes or ratios)")
        out.append(budget)
    if not out:
        raise InputError(f"--budgets {text!r}: give at least one budget, comma-separated, e.g. 0.9x,0.7x,8GiB")
    return tuple(out)
