"""What every strategy is: a function from (graph, budget) to a schedule, plus a name.

A strategy declares its options as a frozen dataclass (:attr:`Strategy.options`, defaults
are what it does unless told otherwise); what one planning run shares with every strategy
it runs (time limit, deadline, progress, a memo, parallelism) is one :class:`RunContext`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from remat_cli.errors import InputError
from remat_cli.graph import Graph
from remat_cli.schedule import Schedule
from remat_cli.units import Phrase

__all__ = ["Strategy", "StrategyResult", "StrategyFn", "RunContext", "IdleWork", "NoOptions", "ProgressFn", "CONTEXT_KEYS", "folding_sinks"]

#: ``progress(done, total, label)``: hears how a run goes (``total`` 0 when unknown); the
#: label is a name or a :class:`~remat_cli.units.Phrase` that the caller renders.
ProgressFn = Callable[[int, int, str | Phrase], None]


@dataclass(frozen=True, eq=False)
class StrategyResult:
    """A strategy's answer: the schedule, facts worth reporting, and the kept forward values.

    ``info`` holds data, not display text: numbers, plain words, lists of ids, and sizes or
    changes as :class:`~remat_cli.units.Fact` / :class:`~remat_cli.units.Phrase`, which
    :func:`remat_cli.units.say` renders for tables and plan JSON alike."""

    schedule: Schedule
    info: Mapping[str, Any] = field(default_factory=dict)
    keep: tuple[int, ...] | None = None


@dataclass(frozen=True)
class NoOptions:
    """The options of a strategy that takes none."""


@dataclass(frozen=True)
class IdleWork:
    """Work the caller of a planning run does after it (the report's structural bound),
    which the run may do instead where it would wait on its second process: ``make()``
    keeps its result on the graph under ``key`` (:meth:`Graph.derived`), so the caller
    finds it made, and ``auto``'s second process, which plans a copy of the graph, can make
    it and hand it back."""

    key: str
    make: Callable[[], object]


@dataclass(frozen=True, eq=False)
class RunContext:
    """What one planning run shares with every strategy it runs; not a strategy's options.

    ``time_limit``: seconds the run may take (the exact solver's limit; None: its default).
    ``deadline``: a ``time.perf_counter()`` value by which anytime strategies (auto,
    treewidth, pathwidth) return the best plan found so far; the planner sets it from
    ``time_limit``. ``progress``: see :data:`ProgressFn`. ``shared``: a memo of work that
    several strategies reuse on one graph (decompositions), each entry keyed with the
    graph's identity; None: nothing is shared (``auto`` makes one for its run).
    ``parallel``: ``auto`` may share its costliest strategies with a second process.
    ``idle``: :class:`IdleWork` a strategy may do while it waits on its second process,
    once a plan that fits is held (so the run succeeds and the caller needs the work): the
    other core takes more of the strategy's work meanwhile. Made at most once; None: none.
    ``probe_next``: where the caller searches for the smallest budget should the run fail,
    the budget its search probes after ``b``, the smallest budget the failure names (None:
    no such probe). ``auto`` answers that probe ahead with its idle core once its run
    looks lost, so the search finds it made. None: the caller does not search.
    """

    time_limit: float | None = None
    deadline: float | None = None
    progress: ProgressFn | None = None
    shared: dict[Any, Any] | None = None
    parallel: bool = True
    idle: IdleWork | None = None
    probe_next: Callable[[int], int | None] | None = None


#: Keys of a plain options mapping that belong to the :class:`RunContext`.
CONTEXT_KEYS = tuple(f.name for f in fields(RunContext))

#: ``solve(graph, budget, options, context)``; ``options`` is the strategy's own dataclass.
StrategyFn = Callable[[Graph, "int | None", Any, RunContext], StrategyResult]


@dataclass(frozen=True)
class Strategy:
    """A registered strategy.

    ``solve(graph, budget, options, context)`` returns a :class:`StrategyResult` whose
    schedule should peak at most ``budget`` bytes (fixed memory included) when a budget
    is given, or raises :class:`~remat_cli.errors.NoPlanError` naming the smallest budget
    it can meet. The planner validates every schedule with the simulator either way.
    ``options`` is the frozen dataclass of its options (defaults: what it does unless
    told); ``incumbent`` > 0 makes ``exact`` start from this strategy's plan (lowest
    first; of equal costs the first wins).
    """

    name: str
    summary: str
    solve: StrategyFn
    uses_budget: bool  # False: the plan is the same whatever the budget
    fast: bool = True  # part of `auto` and the default trade-off sweep
    reference: str = ""
    options: type = NoOptions
    incumbent: int = 0

    def make_options(self, given: Any = None) -> Any:
        """This strategy's options from ``given``: None (defaults), an instance of its
        options class, or a mapping of option names; an unknown name is bad usage (exit 2)
        naming the strategy and its options."""
        if given is None:
            return self.options()
        if isinstance(given, self.options):
            return given
        if not isinstance(given, Mapping):
            raise InputError(f"strategy {self.name!r} takes {self.options.__name__}, not {type(given).__name__}")
        known = [f.name for f in fields(self.options)]
        unknown = sorted(str(k) for k in given if k not in known)
        if unknown:
            raise InputError(
                f"strategy {self.name!r} has no option {unknown[0]!r}; "
                + (f"its options: {', '.join(known)}" if known else "it takes no options")
            )
        return self.options(**given)

    def split(self, options: Any = None, context: RunContext | None = None) -> tuple[Any, RunContext]:
        """Typed options and run context from what a caller gave: a mapping may mix option
        names with :data:`CONTEXT_KEYS` (those go to the context, over ``context``)."""
        context = context or RunContext()
        if isinstance(options, Mapping):
            run_wide = {k: options[k] for k in CONTEXT_KEYS if k in options}
            if run_wide:
                context = replace(context, **run_wide)
            options = {k: v for k, v in options.items() if k not in CONTEXT_KEYS}
        return self.make_options(options), context

    def run(self, graph: Graph, budget: int | None, options: Any = None, context: RunContext | None = None) -> StrategyResult:
        """Run the strategy itself (no simulator: :func:`remat_cli.planner.make_plan` is
        the door that validates); ``options`` and ``context`` as :meth:`split` takes them."""
        opts, ctx = self.split(options, context)
        return self.solve(graph, budget, opts, ctx)


def folding_sinks(solve: StrategyFn) -> StrategyFn:
    """``solve`` run on the graph with its zero-byte target sinks folded out
    (:func:`remat_cli.algorithms.fold.fold_sinks`), its schedule and kept set mapped back:
    the same peak, the sinks' cost once; graphs without such sinks are passed as they are."""
    from remat_cli.algorithms.fold import fold_sinks

    def run(graph: Graph, budget: int | None, options: Any, context: RunContext) -> StrategyResult:
        folded = fold_sinks(graph)
        if folded is None:
            return solve(graph, budget, options, context)
        result = solve(folded.graph, budget, options, context)
        return replace(result, schedule=folded.unfold(result.schedule), keep=folded.keep_in_full(result.keep))

    return run
