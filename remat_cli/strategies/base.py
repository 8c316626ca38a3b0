"""What every strategy is: a function from (graph, budget) to a schedule, plus a name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remat_cli.graph import Graph
from remat_cli.schedule import Schedule

__all__ = ["Strategy", "StrategyResult", "StrategyFn"]


@dataclass(frozen=True, eq=False)
class StrategyResult:
    """A strategy's answer: the schedule, facts worth reporting, and the kept forward values."""

    schedule: Schedule
    info: Mapping[str, Any] = field(default_factory=dict)
    keep: tuple[int, ...] | None = None


StrategyFn = Callable[[Graph, "int | None", Mapping[str, Any]], StrategyResult]


@dataclass(frozen=True)
class Strategy:
    """A registered strategy.

    ``run(graph, budget, options)`` returns a :class:`StrategyResult` whose schedule should
    peak at most ``budget`` bytes (fixed memory included) when a budget is given, or
    raises :class:`~remat_cli.errors.NoPlanError` naming the smallest budget it can meet.
    The planner validates every schedule with the simulator either way.
    """

    name: str
    summary: str
    run: StrategyFn
    uses_budget: bool  # False: the plan is the same whatever the budget
    fast: bool = True  # part of `auto` and the default trade-off sweep
    reference: str = ""
