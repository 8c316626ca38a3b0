"""The strategy registry: one module per strategy, one line here per strategy."""

from __future__ import annotations

from dataclasses import replace

from remat_cli.errors import InputError
from remat_cli.strategies import auto, chain_dp, chen, exact, greedy, min_memory, pathwidth, store_all, treewidth
from remat_cli.strategies.base import NoOptions, RunContext, Strategy, StrategyResult, folding_sinks

__all__ = ["Strategy", "StrategyResult", "RunContext", "NoOptions", "STRATEGIES", "get_strategy", "fast_strategies"]

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        store_all.STRATEGY,
        # the decompositions' plans depend on the graph's shape: zero-byte leaves are folded
        # out before they see it (algorithms/fold.py; same peak, an optimal plan stays optimal)
        replace(treewidth.STRATEGY, solve=folding_sinks(treewidth.STRATEGY.solve)),
        replace(pathwidth.STRATEGY, solve=folding_sinks(pathwidth.STRATEGY.solve)),
        chen.SQRT,
        chen.GREEDY,
        chain_dp.STRATEGY,
        greedy.GREEDY,
        greedy.DTR,
        min_memory.STRATEGY,
        exact.STRATEGY,
        auto.STRATEGY,
    )
}


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
