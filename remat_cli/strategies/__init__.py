"""The strategy registry: one module per strategy, one line here per strategy.

A strategy's module is imported the first time the strategy is looked up, not when the
registry is: ``remat plan -s treewidth`` does not pay for importing the other ten (issue
14: start-up time). Listing the names imports nothing; reading a strategy's attributes
(summary, options, ``fast``) imports its module.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from dataclasses import replace

from remat_cli.errors import InputError
from remat_cli.strategies.base import NoOptions, RunContext, Strategy, StrategyResult, folding_sinks

__all__ = ["Strategy", "StrategyResult", "RunContext", "NoOptions", "STRATEGIES", "get_strategy", "fast_strategies"]

#: name -> (module under remat_cli.strategies, attribute holding its Strategy, whether its
#: plans are made on the graph with zero-byte target sinks folded out), in listing order.
#: The decompositions' plans depend on the graph's shape: zero-byte leaves are folded out
#: before they see it (algorithms/fold.py; same peak, an optimal plan stays optimal).
REGISTRY: dict[str, tuple[str, str, bool]] = {
    "store-all": ("store_all", "STRATEGY", False),
    "treewidth": ("treewidth", "STRATEGY", True),
    "pathwidth": ("pathwidth", "STRATEGY", True),
    "chen-sqrt": ("chen", "SQRT", False),
    "chen-greedy": ("chen", "GREEDY", False),
    "chain-dp": ("chain_dp", "STRATEGY", False),
    "greedy": ("greedy", "GREEDY", False),
    "dtr": ("greedy", "DTR", False),
    "min-memory": ("min_memory", "STRATEGY", False),
    "exact": ("exact", "STRATEGY", False),
    "auto": ("auto", "STRATEGY", False),
}


def _load(module: str, attribute: str, fold: bool) -> Strategy:
    """The registered strategy: its module's attribute, wrapped by :func:`folding_sinks`
    where the registry says so."""
    strategy: Strategy = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    return replace(strategy, solve=folding_sinks(strategy.solve)) if fold else strategy


class _Registry(MutableMapping[str, Strategy]):
    """Strategies by name, in :data:`REGISTRY` order; each module is imported on its first
    lookup and the strategy kept, so every lookup of a name gives the same object. Entries
    may be added and removed as in a dict (tests register stand-ins)."""

    def __init__(self, table: dict[str, tuple[str, str, bool]]) -> None:
        self._table: dict[str, tuple[str, str, bool] | None] = dict(table)
        self._loaded: dict[str, Strategy] = {}

    def __getitem__(self, name: str) -> Strategy:
        got = self._loaded.get(name)
        if got is None:
            spec = self._table[name]  # KeyError for an unknown name, as a dict
            assert spec is not None  # an added entry is in _loaded
            got = self._loaded[name] = _load(*spec)
        return got

    def __setitem__(self, name: str, strategy: Strategy) -> None:
        self._table.setdefault(name, None)
        self._loaded[name] = strategy

    def __delitem__(self, name: str) -> None:
        del self._table[name]
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._table  # no import to answer

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


STRATEGIES: MutableMapping[str, Strategy] = _Registry(REGISTRY)


def get_strategy(name: str) -> Strategy:
    """Look a strategy up by name; an unknown name is bad usage (exit 2)."""
    try:
        return STRATEGIES[name]
    except KeyError:
        known = ", ".join(STRATEGIES)
        raise InputError(f"unknown strategy {name!r}; known strategies: {known}") from None


def fast_strategies() -> list[Strategy]:
    """Every strategy cheap enough to run by default (all but the exact solver)."""
    return [s for s in STRATEGIES.values() if s.fast]
