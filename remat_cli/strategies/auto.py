"""auto: run every fast strategy and keep the cheapest plan that fits the budget.

Each candidate is replayed by the simulator here, so a strategy that misjudges its peak
cannot win. Ties on cost go to the lower peak, then to the registry's order. The three
cheapest fitting plans are then polished by twremat's memory-limit pass
(:mod:`remat_cli.strategies.evict`); a polished plan wins only if it replays within the
budget and costs less. The improvement pass (:mod:`remat_cli.algorithms.improve`) then
runs over each of the three in its best form, not only over the cheapest
(:func:`_improve_runners_up`), and the cheapest result wins.

Work is shared: the store-all plan is computed once per graph, and so are the
decompositions with treewidth's and pathwidth's bare and ladder runs (kept on the graph,
:meth:`Graph.derived`, unless the caller gives a ``RunContext.shared`` memo), so the ten
or so plans of a search for the smallest budget do not redo them. Candidates that cannot win are not run: when the
store-all plan fits, the strategies that would return that same plan are skipped (and
every strategy once a plan costs the base cost at the lower bound). Cheap strategies run
first. Each runs with its default options. Anytime: with ``RunContext.deadline``
(``time.perf_counter()`` seconds; the planner sets it from ``time_limit``) the
strategies not started by then are skipped and named, and the cheapest plan found so far
is returned. ``RunContext.progress`` hears of each strategy. On graphs of
``PARALLEL_NODES`` nodes or more, the costly strategies (``chain-dp``, ``treewidth``,
``pathwidth``, and last ``min-memory`` while no plan is known to fit; in a fit probe
the ``greedy`` and ``dtr`` replays before it) are a queue that two processes share
(``RunContext.parallel`` False turns that off): a second process starts on the first while the cheap ones run here, and each
process takes the next one not yet taken when it is free, so neither waits while work is
left (this process too takes the last resort, min-memory, when it would otherwise wait for
the second one's queued strategy with no plan known to fit: it makes min-memory's variants
then, pausing once a plan fits). The choice of plan is the same: every candidate runs with the same options and
the cheapest is chosen by (cost, peak, registry order), whichever process ran it.
Where nothing but the last resort fits, the process that does not make min-memory's
variants makes the final passes over the variant that is its plan so far, while the other
makes the rest (:meth:`_Child.offer` and :func:`_serve`; :func:`_offer_up` and
:meth:`_Child.result`); they are used only where that variant is the plan.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from remat_cli.errors import NoPlanError, RematError
from remat_cli.graph import Graph
from remat_cli.units import Fact, Phrase, fmt_bytes_exact
from remat_cli.simulate import simulate
from remat_cli.schedule import Schedule
from remat_cli.strategies.base import IdleWork, NoOptions, RunContext, Strategy, StrategyResult
from remat_cli.strategies.greedy import CostlierThan

__all__ = ["STRATEGY"]


#: Graphs from this many nodes share these strategies (most of the work: chain-dp's
#: O(L³·M) dynamic program and the two decompositions with their recursions) between this
#: process and a second one, in this order, each taking the next one when it is free. The
#: second process starts on the first while this one runs the cheap strategies, so the
#: longest usually goes first: treewidth (grid1000 0.5x, CPU s: treewidth 2.0, pathwidth
#: 1.1, chain-dp 0.14; nn1000 0.39 / 0.37 / 0.30), then pathwidth, and chain-dp, the
#: shortest since its table stops at the budget's level, last (it was first: the second
#: process ran it, then treewidth, which ended auto's run 0.14 s later on grid1000).
#: From 100 nodes it pays already: in-process auto at 0.5x, wall s, one process / two:
#: mobilenet_v2 (357 nodes) 0.72 / 0.45-0.53, unet.onnx (153) 0.44-0.49 / 0.24-0.36.
PARALLEL_NODES = 100
_PARALLEL = ("treewidth", "pathwidth", "chain-dp", "min-memory")
#: The same queue when only whether a plan fits is asked (:data:`FIT_PROBE`): the
#: decompositions first: the budget the search probes first is the one the failed attempt
#: named, often the peak of a decomposition's bare recursion (as on random10000 at 0.5x).
#: Then the replays of :data:`_CAPPED`, so that a process done with the decompositions takes
#: them instead of waiting for the other (random1000's probe at 512 B after a failed plan
#: at 0.5x: the second process sat idle from its chain-dp's end while this one ran pathwidth
#: and then greedy and dtr, ~0.1 s). A probe stops at the first plan that fits, so where a
#: replay runs no plan fits yet: the options it gets are those of no fitting plan
#: (:func:`_replay_options`), in either process.
_FIT_FIRST = ("treewidth", "pathwidth", "chain-dp", "greedy", "dtr", "min-memory")
#: And this process runs the decompositions before the replays, which thrash where they
#: fail (a failed dtr replay of random10000 at 0.5x: 3 s), and stops once either process
#: has a plan that fits.
_FIT_RUN_FIRST = ("store-all", "chen-sqrt", "chen-greedy", "treewidth", "pathwidth", "chain-dp", "greedy", "dtr")
#: The order candidates run in: the cheap ones first, so that a deadline finds good plans
#: already made. Ties between equal plans still go to the registry's order. The queued
#: ones in the queue's order (:data:`_PARALLEL`): a process that takes one takes those
#: before it too (:meth:`_Child.claim`).
_RUN_FIRST = ("store-all", "greedy", "chen-sqrt", "chen-greedy", "dtr", "treewidth", "pathwidth", "chain-dp")
#: Replays that auto runs without their search for the smallest budget (auto only needs to
#: know they failed) and stops once they cost more than the third cheapest fitting plan so
#: far (only the three cheapest can win or be polished, :func:`_polish`).
_CAPPED = ("greedy", "dtr")


def _handed_back(key: str) -> bool:
    """Whether the second process hands back the fact it derived from the graph under
    ``key`` (:meth:`Graph.derived`), so that the next plans of the graph here (a search for
    the smallest budget, a sweep) and the second processes forked for them reuse it:
    min-memory's variants and the tree and path decompositions. Budget-independent data
    whose keys name no object of one process (the separator trees' keys hold an ``id``:
    not handed back)."""
    return key == "_min_memory_variants" or key.startswith("decompose: td ") or key == "decompose: pd"


#: Where the candidates' outcomes in a fit probe made ahead are kept on the graph
#: (:func:`_probe_ahead`): under ``_AHEAD`` + the budget and the candidate's name
#: (:func:`_ahead_key`), as the second process's messages carry them.
_AHEAD = "auto fit probe ahead: "


def _ahead_key(budget: int, name: str) -> str:
    return f"{_AHEAD}{budget} B: {name}"


#: On graphs of this many nodes or more each of those replays gets at most this many seconds
#: (a dtr replay of a 100k-node random DAG at 0.5x thrashes for minutes, so it took auto's
#: whole deadline; 10k-node replays take under 6 s).
SCALE_NODES = 20_000
SCALE_REPLAY_SECONDS = 15.0
#: Used only when no plan of the others fits: their plans are cheaper wherever they fit.
#: The second process starts it early (the last in its queue) while no fitting plan is
#: known, so that a budget nothing else meets is answered sooner: as soon as it has
#: nothing else to run, even while this process still runs a queued strategy (not in a
#: fit probe, which waits for those: any plan that fits answers it). Its plan is
#: considered only once every other strategy has failed, as when it runs here last (on
#: random1000 at 0.7x it sat idle while this process ran pathwidth, 0.4 s, then this
#: process ran min-memory alone). The other way round too (:meth:`_Child.idle_here`).
_LAST_RESORT = ("min-memory",)


def _run(graph: Graph, budget: int | None, options: NoOptions, context: RunContext, first_fit: bool = False) -> StrategyResult:
    """auto's plan (module doc). ``first_fit``: return the first candidate plan that fits,
    unpolished (:data:`FIT_PROBE`): whether auto fits a budget is whether any candidate
    does, and a search for the smallest budget needs no more than that."""
    from remat_cli.strategies import fast_strategies  # the registry imports this module
    from remat_cli.strategies.min_memory import variants_made

    best: tuple[float, int, int, str, StrategyResult] | None = None
    tried: dict[str, str | Fact | Phrase] = {}  # how each candidate fared, as facts
    floors: list[int] = []
    fitting: list[tuple[float, int, int, str, StrategyResult]] = []
    deadline = context.deadline
    progress = context.progress
    base = graph.base_cost
    candidates = [s for s in fast_strategies() if s.name != STRATEGY.name]
    child: _Child | None = None
    here: set[str] = set()  # queued strategies this process ran itself

    def add_floor(nbytes: int) -> None:
        """A budget some candidate meets; the second process hears the least so far (its
        probe ahead, :func:`_probe_ahead`, is of the search's probe below the least)."""
        floors.append(nbytes)
        if child is not None:
            child.publish_floor(min(floors))

    def consider(rank: int, strat: Strategy, outcome: StrategyResult | RematError) -> None:
        nonlocal best
        if isinstance(outcome, CostlierThan):
            tried[strat.name] = Phrase("stopped once costlier than {}", (Fact(outcome.max_cost / base - 1, "change"),))
            return
        if isinstance(outcome, NoPlanError):
            tried[strat.name] = "no fit"
            if outcome.min_budget is not None:
                add_floor(outcome.min_budget)
            return
        if isinstance(outcome, RematError):  # a strategy that cannot handle this graph
            tried[strat.name] = Phrase("failed: {}", (outcome.message,))
            return
        m = _replayed(graph, strat.name, outcome.schedule)
        if m is None:
            sim = simulate(graph, outcome.schedule)
            if sim.metrics is None:
                tried[strat.name] = Phrase("invalid ({})", (sim.error,))
                return
            m = sim.metrics
        if budget is not None and m.peak_bytes > budget:
            tried[strat.name] = Phrase("over budget ({})", (Fact(m.peak_bytes, "bytes"),))
            add_floor(m.peak_bytes)
            return
        tried[strat.name] = Fact(m.overhead, "change")
        key = (m.cost, m.peak_bytes, rank, strat.name, outcome)
        fitting.append(key)
        if best is None or key[:3] < best[:3]:
            best = key
            if child is not None:
                with child.taken.get_lock():
                    child.fits.value = 1  # the second process need not start a last resort
                    child.bar.value = best[0]  # and need not polish a plan costlier than this

    def collect(last_resort: bool = True, ready: bool = False) -> None:
        """The outcomes of the queued strategies the second process took (not yet of the
        last resorts, unless ``last_resort``: those it may not have taken; with ``ready``,
        only those already received)."""
        for twin in child.strategies if child is not None else ():
            if twin.name in here or twin.name in tried or (twin.name in _LAST_RESORT and not last_resort):
                continue  # run (or skipped) here, or not yet
            if ready and twin.name not in child.received:
                continue
            rank = candidates.index(twin)
            if _cannot_win(twin.name, best, base, graph.lb, budget):
                tried[twin.name] = "skipped (it cannot beat the store-all plan, which fits)"
                continue
            if twin.name in _LAST_RESORT and best is not None:
                tried[twin.name] = "skipped (a cheaper plan fits)"
                continue
            if progress is not None:
                progress(rank, len(candidates), Phrase("auto: {} (second process)", (twin.name,)))
            if best is not None and twin.name not in child.received:
                use_idle()  # (it would wait for the outcome)
            outcome = child.result(twin.name, None if best is None else deadline)
            if outcome is None:
                tried[twin.name] = "skipped (time limit)"
            else:
                consider(rank, twin, outcome)

    memo: dict[tuple[str, int], tuple] = {}  # the polishing passes' results, by input plan
    idle = [context.idle]

    def use_idle() -> None:
        """The caller's work (``RunContext.idle``), once, where this process would wait on
        the second one with a plan that fits: auto succeeds, so it is needed after. Made
        there already (handed back, :func:`_child_main`), it is only read."""
        work, idle[0] = idle[0], None
        if work is not None:
            if child is not None:
                child.drain()
            if work.key not in graph.derived_items(lambda k: k == work.key):
                work.make()

    def speculate() -> None:
        """While the second process still runs a queued strategy and this one has nothing
        left to run: polish and improve the plans known so far (``memo``). The final passes
        reuse a result wherever their input is the same plan, so the plan auto returns is
        the same; it comes sooner when the second process's plans do not change the
        winner (this process would only wait)."""
        if child is None or budget is None or not child.busy_elsewhere(here, tried):
            return
        collect(last_resort=False, ready=True)
        if best is None:
            return
        polished = _polish(graph, budget, fitting, best, memo)
        with child.taken.get_lock():
            child.done_rank.value = polished[2]  # the second process need not improve it again
        _improve(graph, budget, polished, deadline, memo)

    first = _FIT_RUN_FIRST if first_fit else _RUN_FIRST
    # a fit probe asks min-memory first where its variants are made already (a failed plan of
    # the graph made them): it answers from them at no cost, whatever the budget
    known = first_fit and any(s.name in _LAST_RESORT for s in candidates) and variants_made(graph)
    if known:
        first = ("store-all", *_LAST_RESORT, *first[1:])
    order = sorted(
        range(len(candidates)),
        key=lambda i: (first.index(candidates[i].name) if candidates[i].name in first else len(first), i),
    )
    # a fit probe's candidates whose outcomes at this budget a failed plan made ahead
    ahead = _made_ahead(graph, budget) if first_fit and budget is not None else {}
    try:
        for rank in order:  # cheap ones first (anytime); ``rank`` stays the registry's
            strat = candidates[rank]
            if strat.name in ahead:  # (the outcome its run would have: the same options)
                consider(rank, strat, ahead[strat.name])
                if best is not None:
                    break
                continue
            if _cannot_win(strat.name, best, base, graph.lb, budget):
                tried[strat.name] = "skipped (it cannot beat the store-all plan, which fits)"
                continue
            if strat.name in _LAST_RESORT:
                if not first_fit and best is None and child is not None and child.idle_here(strat.name, here, tried):
                    # nothing fits yet and this process has nothing else to run while the second
                    # one still runs a queued strategy: make the last resort's plans now, until a
                    # plan of another strategy fits; it is still chosen only if none does (below)
                    here.add(strat.name)
                    if progress is not None:
                        progress(rank, len(candidates), Phrase("auto: {}", (strat.name,)))
                    _prepare_last_resort(graph, strat.name, deadline, child, budget)
                speculate()
                collect(last_resort=False)  # whether a plan fits is known once all others are in
                if best is not None:
                    tried[strat.name] = "skipped (a cheaper plan fits)"
                    continue
            cheap = strat.name == "store-all" or (known and strat.name in _LAST_RESORT)
            if child is None and not cheap and graph.n >= PARALLEL_NODES and context.parallel:
                queue = _FIT_FIRST if first_fit else _PARALLEL
                twins = [s for name in queue for s in candidates if s.name == name and name not in tried and name not in ahead]
                if twins:
                    ranks = [candidates.index(s) for s in twins]
                    # (a queued replay runs with no plan known to fit: a probe stops at the first)
                    opts = {s.name: _replay_options(graph, s.name, fitting) for s in twins}
                    child = _Child.start(twins, graph, budget, context, ranks, polish=not first_fit and budget is not None, options=opts)
                    if child is not None and best is not None:
                        with child.taken.get_lock():
                            child.fits.value, child.bar.value = 1, best[0]  # (store-all's plan fits)
                    if child is not None and floors:
                        child.publish_floor(min(floors))
            if child is not None and child.queued(strat.name) and strat.name not in here:
                if not child.claim(strat.name):
                    continue  # the second process took it; collected below
                here.add(strat.name)
            if deadline is not None and time.perf_counter() > deadline and best is not None:
                tried[strat.name] = "skipped (time limit)"
            else:
                if progress is not None:
                    progress(rank, len(candidates), Phrase("auto: {}", (strat.name,)))
                try:
                    opts = _replay_options(graph, strat.name, fitting)
                    outcome: StrategyResult | RematError = strat.run(graph, budget, opts, context)
                except RematError as exc:
                    outcome = exc
                consider(rank, strat, outcome)
            if strat.name in here and child is not None:
                child.done(strat.name)
            if first_fit and best is None and child is not None:
                child.busy_elsewhere(here, tried)  # reads the outcomes already in the pipe
                collect(ready=True)  # and considers them (any plan that fits will do)
            if first_fit and best is not None:
                break  # the second process's work is not needed: it is stopped below
        if not (first_fit and best is not None):
            speculate()
            collect()
        if best is not None and not first_fit:
            if child is not None:  # the passes over offered plans, and the second process's over its own
                use_idle()  # (while they come: needed after the run in any case)
                child.adopt_offered_polish(fitting, memo, deadline)
                child.adopt_polish(fitting, memo, deadline)
            best = _polish(graph, budget, fitting, best, memo)
            if child is not None:
                child.adopt_offered_improve(best, memo, deadline)
                child.adopt_improve(fitting, best, memo, deadline)
            best = _improve(graph, budget, best, deadline, memo)  # the plan-improvement pass (algorithms/improve.py)
            best = _improve_runners_up(graph, budget, fitting, best, deadline, memo)
    finally:
        if child is not None:
            child.stop()
    if best is None:
        floor = min(floors) if floors else None
        raise NoPlanError(
            f"auto: no strategy fits budget {fmt_bytes_exact(budget) if budget is not None else 'none'}"
            + (f"; the smallest budget one of them meets is {fmt_bytes_exact(floor)}" if floor else ""),
            min_budget=floor,
        )
    name, result = best[3], best[4]
    order = {s.name: i for i, s in enumerate(candidates)}
    ranked = sorted(tried.items(), key=lambda kv: order[kv[0]])
    tried_facts = Phrase(", ".join("{} {}" for _ in ranked), tuple(x for kv in ranked for x in kv))
    info = {"winner": name, **{f"{k}": v for k, v in result.info.items()}, "tried": tried_facts}
    return StrategyResult(result.schedule, info, result.keep)


def _prepare_last_resort(graph: Graph, name: str, deadline: float | None, child: _Child, budget: int | None) -> None:
    """Make last resort ``name``'s budget-independent work ahead of need (min-memory's
    variants, kept on the graph: its run then only picks one), pausing as soon as the
    second process's shared flag (:class:`_Child`) says a plan of another strategy fits;
    a later run resumes it where it paused, so its plan is the same either way.

    At each look at that flag, the variant that would be min-memory's plan at ``budget`` so
    far (the cheapest that fits, then the lowest) is offered to the second process
    (:meth:`_Child.offer`): once its queue is done it makes the final passes over it
    (:func:`_serve`) while this process makes the other variants. On random1000 at 0.7x the
    store-all order's dag variant is the plan, known ~0.1 s before the lowering's variant
    is made, and its memory-limit pass took 0.19 s here after it. Before its first offer
    the second process makes pieces of the variants ahead (:func:`_serve`), read here at
    each look."""
    if name == "min-memory":
        from remat_cli.strategies.min_memory import chosen, min_memory_variants, variants_so_far

        def stop() -> bool:
            child.drain()  # (the pieces the second process made ahead land on the graph)
            if budget is not None and child.polish:
                pick = chosen(variants_so_far(graph), budget)  # min-memory's plan so far
                if pick is not None:
                    child.offer(pick[1], pick[2].cost)
            return bool(child.fits.value)

        min_memory_variants(graph, deadline, stop=stop)


def _replayed(graph: Graph, name: str, schedule: Schedule) -> Any:
    """The simulator's metrics of strategy ``name``'s plan where they are known already
    (min-memory's plans are its variants, each replayed when made); None: replay it."""
    if name != "min-memory":
        return None
    from remat_cli.strategies.min_memory import replayed

    return replayed(graph, schedule)


def _options(name: str, fitting: list[tuple]) -> dict[str, Any] | None:
    """Options for candidate ``name``: the replays of :data:`_CAPPED` skip their smallest-budget
    search and stop once costlier than the third cheapest fitting plan (a plan costlier than
    that can neither win nor be polished); None: the strategy's defaults."""
    if name not in _CAPPED:
        return None
    costs = sorted(k[0] for k in fitting)
    return {"search": False, "max_cost": costs[2] * (1 + 1e-9) if len(costs) >= 3 else None}


def _replay_options(graph: Graph, name: str, fitting: list[tuple]) -> dict[str, Any] | None:
    """:func:`_options`, and on graphs of :data:`SCALE_NODES` or more a time share for each
    replay (:data:`SCALE_REPLAY_SECONDS`)."""
    opts = _options(name, fitting)
    if opts is not None and graph.n >= SCALE_NODES:
        opts = {**opts, "max_seconds": SCALE_REPLAY_SECONDS}  # a share each
    return opts


def _polish(graph: Graph, budget: int | None, fitting: list, best: tuple, memo: dict | None = None) -> tuple:
    """Run twremat's memory-limit pass (:mod:`remat_cli.strategies.evict`) at the budget over
    the three cheapest fitting plans that recompute: it only drops computes and keeps
    what the budget allows, so a result that replays within the budget can only be
    cheaper. Returns the cheapest of ``best`` and the polished plans. ``memo`` keeps each
    pass's result by its input plan (an earlier call's work is reused)."""
    if budget is None:
        return best
    memo = {} if memo is None else memo
    for entry in sorted(fitting, key=lambda k: k[:3])[:3]:
        key = _polished(graph, budget, entry, memo)
        if key is not None and key[:3] < best[:3]:
            best = key
    return best


def _polished(graph: Graph, budget: int, entry: tuple, memo: dict) -> tuple | None:
    """The memory-limit pass over fitting plan ``entry`` as a candidate key, made once per
    input plan (kept in ``memo``); None where it does not fit or is no cheaper."""
    from remat_cli.strategies.evict import memlimit_pass

    cost, _, rank, name, result = entry
    hit = memo.get(("polish", id(result.schedule)))
    if hit is None or hit[0] is not result.schedule:
        schedule = memlimit_pass(graph, result.schedule, budget)
        hit = memo[("polish", id(result.schedule))] = (result.schedule, schedule, simulate(graph, schedule).metrics)
    schedule, m = hit[1], hit[2]
    if m is None or m.peak_bytes > budget or m.cost >= cost:
        return None
    info = {**result.info, "polished": Phrase("memory-limit pass: cost {} on {}'s plan", (Fact(m.cost / cost - 1, "change"), name))}
    return (m.cost, m.peak_bytes, rank, name, StrategyResult(schedule, info, None))


def _improve(graph: Graph, budget: int | None, best: tuple, deadline: float | None, memo: dict | None = None) -> tuple:
    """The winning plan after :func:`remat_cli.algorithms.improve.improve_plan` (keep moves
    and re-evictions of its order), when that replays within the budget and costs less.
    ``memo`` as :func:`_polish` keeps it (the pass is deterministic in its input)."""
    if budget is None:
        return best
    from remat_cli.algorithms.improve import improve_plan

    cost, _, rank, name, result = best
    memo = {} if memo is None else memo
    hit = memo.get(("improve", id(result.schedule)))
    if hit is None or hit[0] is not result.schedule:
        hit = memo[("improve", id(result.schedule))] = (
            result.schedule,
            improve_plan(graph, result.schedule, budget, deadline=deadline, replay=True),
        )
    imp = hit[1]
    m = imp.metrics
    if not imp.improved or m.peak_bytes > budget or m.cost >= cost:
        return best
    info = {**result.info, "improved": Phrase("improvement pass: cost {} on {}'s plan", (Fact(m.cost / cost - 1, "change"), name))}
    return (m.cost, m.peak_bytes, rank, name, StrategyResult(imp.schedule, info, None))


def _improve_runners_up(graph: Graph, budget: int | None, fitting: list, best: tuple, deadline: float | None, memo: dict) -> tuple:
    """``best`` (the improved winner), or a cheaper plan: the improvement pass over each of
    the other two of the three cheapest fitting plans too, each in its best form (its
    memory-limit pass where that fits and is cheaper, as :func:`_polish` found). The pass
    reorders and re-evicts, so a plan that loses before it can win after it: on BERT at
    0.7x the runner-up (chain-dp) improves to 3.4% less than the improved winner, on
    ViT-B/16 at 0.6x 2.2%, on grid1000 at 0.4x 0.7% (6 of 156 fitting cells of the quality
    benchmark's graphs and the 1k graphs at 0.3-0.9x gain, none loses: it only adds
    candidates). Skipped on graphs of :data:`SCALE_NODES` nodes or more (each pass takes
    seconds there), past ``deadline``, and where ``best`` costs the base cost (nothing is
    cheaper). Passes made already (by the second process, or over the winner) are read
    from ``memo``."""
    if budget is None or graph.n >= SCALE_NODES or best[0] <= graph.base_cost:
        return best
    for entry in sorted(fitting, key=lambda k: k[:3])[:3]:
        if deadline is not None and time.perf_counter() > deadline:
            break
        form = _polished(graph, budget, entry, memo) or entry
        improved = _improve(graph, budget, form, deadline, memo)
        if improved[:2] < best[:2]:  # cheaper, or as cheap at a lower peak (not a tie on both:
            best = improved  # the winner stays where a runner-up only reaches its plan)
    return best


#: Strategies that return the store-all plan itself whenever it fits the budget (with
#: budget None too, but for treewidth and pathwidth, whose bare recursion runs then).
_STORE_ALL_WHEN_IT_FITS = ("chain-dp", "greedy", "dtr")


def _cannot_win(name: str, best: tuple[float, int, int, str, StrategyResult] | None, base: float, lb: int, budget: int | None) -> bool:
    """True when strategy ``name`` cannot beat ``best`` on (cost, peak, registry order):
    best costs the base cost (nothing is cheaper) and peaks at the lower bound, or best
    is the fitting store-all plan and ``name`` would return that very plan."""
    if best is None or best[0] > base:
        return False
    if best[1] <= lb:
        return True
    same = _STORE_ALL_WHEN_IT_FITS + (("treewidth", "pathwidth") if budget is not None else ())
    return best[3] == "store-all" and name in same


#: How long past the deadline this process waits for the second one's speculative passes
#: before it makes them itself (they stop at the deadline too: improve_plan's deadline).
SPECULATION_GRACE = 0.25


class _Child:
    """A queue of strategies shared with a forked second process (both cores at work): each
    process takes the next strategy not yet taken (:meth:`claim`, a counter in shared
    memory under a lock), so the two finish close together whatever each one costs; the
    second process sends each result back through a pipe as soon as it is ready. Not used
    where fork is unavailable or inside a daemon worker (``remat batch``'s workers), where
    :meth:`start` returns None.

    With ``polish``, once nothing is left in the queue for it, the second process runs the
    final passes speculatively on the best plan it made (:func:`_speculate`) while this
    one still runs a strategy; :meth:`adopt_polish` and :meth:`adopt_improve` put their
    results in auto's ``memo`` under this process's own plan objects, waiting for a
    speculation in flight rather than redoing it, so the final passes reuse them exactly
    where their input is that plan: the same plan as without the speculation.

    Then, where it has no plan that fits, it serves this process (:func:`_serve`): a plan
    offered through a second pipe (:meth:`offer`, the last resort's plan as this process
    makes its variants) gets the same final passes, which :meth:`adopt_offered_polish` and
    :meth:`adopt_offered_improve` put in ``memo`` under the offered object, in the same way."""

    def __init__(
        self,
        strategies: list[Strategy],
        graph: Graph,
        proc: Any,
        conn: Any,
        shared: tuple[Any, ...],
        polish: bool,
        down: Any = None,
        budget: int | None = None,
        deadline: float | None = None,
    ) -> None:
        self.strategies, self.graph, self.proc, self.conn, self.down = strategies, graph, proc, conn, down
        self.budget, self.deadline = budget, deadline
        self.taken, self.fits, self.busy, self.bar, self.stage, self.done_rank, self.serving, self.floor = shared
        # fits: set once either process has a plan that fits (no last resort then); busy:
        # queued strategies (not last resorts) running in either process; bar: the cost of
        # the best plan here; stage: 1 once the second process's queue is done and it
        # speculates; done_rank: the registry rank of the strategy whose plan this process
        # improved while the second one was busy; floor: the least budget this process's
        # candidates meet so far, -1: none (all guarded by taken's lock)
        self.polish = polish
        self.received: dict[str, tuple] = {}
        self.spec: dict[str, tuple] = {}  # the speculation's messages, by kind
        # serving: 1 while the second process waits for a plan to polish (:func:`_serve`)
        self.offered: list[Schedule] = []  # the plans offered to it, by token (their index)
        self.offers: dict[int, dict[str, tuple]] = {}  # its messages on each, by kind
        # the other way round: the last resort's plans so far, as the second process makes
        # them (:func:`_offer_up`), and how many of them were seen; the final passes this
        # process makes over one while it waits are kept as an offer's (a token of ``offered``)
        self.ups: list[tuple] = []
        self.ups_seen = 0

    def queued(self, name: str) -> bool:
        return any(s.name == name for s in self.strategies)

    def busy_elsewhere(self, here: set[str], settled: dict[str, Any]) -> bool:
        """True while a queued strategy (not a last resort) that this process did not run
        has no result yet, after reading the results already in the pipe: the second
        process is still working on it."""
        waiting = [s.name for s in self.strategies if s.name not in here and s.name not in settled and s.name not in _LAST_RESORT]
        return self.drain() and any(name not in self.received for name in waiting)

    def idle_here(self, name: str, here: set[str], settled: dict[str, Any]) -> bool:
        """Take last resort ``name`` for this process when the second process still runs a
        queued strategy (:meth:`busy_elsewhere`), every other queued one is taken, and no
        plan is known to fit: this process would otherwise only wait for its results."""
        i = next(k for k, s in enumerate(self.strategies) if s.name == name)
        if not self.busy_elsewhere(here, settled):
            return False
        with self.taken.get_lock():
            if self.taken.value != i or self.fits.value:
                return False
            self.taken.value = i + 1
            return True

    def claim(self, name: str) -> bool:
        """Take queued strategy ``name`` for this process: True when it is the next one not
        taken (it and any skipped before it are then taken), False when the second
        process has taken it already."""
        i = next(k for k, s in enumerate(self.strategies) if s.name == name)
        with self.taken.get_lock():
            if self.taken.value > i:
                return False
            self.taken.value = i + 1
            if name not in _LAST_RESORT:
                self.busy.value += 1
            return True

    def publish_floor(self, nbytes: int) -> None:
        """Tell the second process the least budget this process's candidates meet so far."""
        if nbytes < _FLOOR_MAX:  # (a shared 64-bit integer)
            with self.taken.get_lock():
                if self.floor.value < 0 or nbytes < self.floor.value:
                    self.floor.value = nbytes

    def done(self, name: str) -> None:
        """This process finished queued strategy ``name``."""
        if name not in _LAST_RESORT:
            with self.taken.get_lock():
                self.busy.value -= 1

    @classmethod
    def start(
        cls,
        strategies: list[Strategy],
        graph: Graph,
        budget: int | None,
        context: RunContext,
        ranks: list[int],
        polish: bool = False,
        options: dict[str, Any] | None = None,
    ) -> _Child | None:
        """Fork the second process for ``strategies`` (``ranks``: their places in the
        registry, for ties; ``options``: the options each runs with, by name, where not its
        defaults); None where it does not pay or is not allowed."""
        import multiprocessing as mp
        import os

        if (os.cpu_count() or 1) < 2 or mp.current_process().daemon or "fork" not in mp.get_all_start_methods():
            return None
        ctx = mp.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        down_recv, down = ctx.Pipe(duplex=False)  # plans offered to it (:meth:`offer`)
        taken = ctx.Value("i", 0)  # how many of ``strategies`` either process has taken
        # the others are guarded by ``taken``'s lock
        shared = (
            taken,
            ctx.Value("b", 0, lock=False),
            ctx.Value("i", 0, lock=False),
            ctx.Value("d", math.inf, lock=False),
            ctx.Value("b", 0, lock=False),
            ctx.Value("i", -1, lock=False),
            ctx.Value("b", 0, lock=False),
            ctx.Value("q", -1, lock=False),
        )
        quiet = replace(context, progress=None, idle=None)  # (its idle work would be lost there)
        proc = ctx.Process(
            target=_child_main,
            args=(strategies, ranks, graph, budget, quiet, send, shared, polish, down_recv, context.idle, options or {}),
            daemon=True,
        )
        try:
            proc.start()
        except OSError:
            return None
        send.close()
        down_recv.close()
        return cls(strategies, graph, proc, recv, shared, polish, down, budget, context.deadline)

    def _receive(self) -> None:
        """One message from the second process: a strategy's outcome, facts it derived
        from the graph (:func:`_handed_back`), kept on this process's graph, or a step of
        its speculation (:func:`_speculate`)."""
        sender, kind, *payload = self.conn.recv()
        if kind == "derived":
            for key, value in payload[0].items():
                self.graph.derived(key, lambda v=value: v)
            return
        if kind in _SPECULATION:
            self.spec[kind] = tuple(payload)
            return
        if kind == "offer":
            token, stage, *rest = payload
            self.offers.setdefault(token, {})[stage] = tuple(rest)
            return
        if kind == "candidate":
            self.ups.append(tuple(payload))
            return
        self.received[sender] = (kind, *payload)

    def _await(self, kind: str, until: float | None) -> bool:
        """Read messages until the speculation's ``kind`` message is in (True); False when
        it will not come: no speculation, it failed, the process ended, ``until`` (a
        ``time.perf_counter()`` value) passed."""
        while kind not in self.spec:
            if "failed" in self.spec or self.spec.get("speculating", ("",))[0] is None:
                return False
            if not self._read(until):
                return False
        return True

    def _read(self, until: float | None) -> bool | None:
        """Read one message, waiting until ``until`` (a ``time.perf_counter()`` value;
        None: as long as it takes): True; False when none came by then; None when the
        second process ended."""
        timeout = None if until is None else max(0.0, until - time.perf_counter())
        try:
            if not self.conn.poll(timeout):
                return False
            self._receive()
        except (EOFError, OSError):
            return None
        return True

    def _speculated_on(self, fitting: list[tuple], deadline: float | None) -> tuple | None:
        """The entry of ``fitting`` (this process's objects) whose plan the second process
        polishes and improves; None if it does not (or is still running a strategy: this
        process does not wait for that)."""
        if not self.polish:
            return None
        with self.taken.get_lock():
            stage = self.stage.value
        if not stage and "speculating" not in self.spec:
            return None
        if not self._await("speculating", None if deadline is None else deadline + SPECULATION_GRACE):
            return None
        name = self.spec["speculating"][0]
        return next((k for k in fitting if k[3] == name), None)

    def adopt_polish(self, fitting: list[tuple], memo: dict, deadline: float | None) -> None:
        """Put the second process's memory-limit pass over its plan into ``memo`` (as
        :func:`_polish` keeps it), waiting for it if that plan is one :func:`_polish` will
        pass over (the three cheapest) and this process has not passed over it yet."""
        entry = self._speculated_on(fitting, deadline)
        if entry is None or not any(k is entry for k in sorted(fitting, key=lambda k: k[:3])[:3]):
            return
        plan = entry[4].schedule
        hit = memo.get(("polish", id(plan)))
        if (hit is None or hit[0] is not plan) and self._await("polished", None if deadline is None else deadline + SPECULATION_GRACE):
            ops, nodes, metrics = self.spec["polished"]
            memo[("polish", id(plan))] = (plan, Schedule(ops, nodes), metrics)

    def adopt_improve(self, fitting: list[tuple], best: tuple, memo: dict, deadline: float | None) -> None:
        """Put the second process's improvement pass into ``memo`` (as :func:`_improve`
        keeps it) when its input is ``best``'s plan: the second process's own plan, or its
        memory-limit pass where that was cheaper; waits for it if it is in flight."""
        entry = self._speculated_on(fitting, deadline)
        if entry is None:
            return
        plan, target = entry[4].schedule, best[4].schedule
        hit = memo.get(("improve", id(target)))
        if hit is not None and hit[0] is target:
            return  # made here already
        better = _improved_from(plan, target, memo)
        if better is None:
            return  # the final pass improves another plan
        if not self._await("improved", None if deadline is None else deadline + SPECULATION_GRACE):
            return
        _keep_improvement(memo, target, better, self.spec["improved"])

    def offer(self, plan: Schedule, cost: float) -> None:
        """Send ``plan`` (of cost ``cost``) to the second process for the final passes when it
        waits for one (:func:`_serve`); a plan offered before is not sent again, and none is
        sent while it works on another (it takes the next offer once done)."""
        if any(p is plan for p in self.offered):
            return
        with self.taken.get_lock():
            if not self.serving.value:
                return
            self.serving.value = 0
        try:
            self.down.send((len(self.offered), plan.ops, plan.nodes, cost))
        except (OSError, ValueError):
            return
        self.offered.append(plan)

    def _await_offer(self, token: int, kind: str, deadline: float | None) -> bool:
        """Read messages until the second process's ``kind`` message on offer ``token`` is in
        (True); False when it will not come (it failed, the process ended, or
        ``deadline`` + :data:`SPECULATION_GRACE` passed)."""
        until = None if deadline is None else deadline + SPECULATION_GRACE
        while kind not in self.offers.get(token, {}):
            if "failed" in self.offers.get(token, {}) or not self._read(until):
                return False
        return True

    def _token(self, plan: Schedule) -> int | None:
        return next((i for i, p in enumerate(self.offered) if p is plan), None)

    def adopt_offered_polish(self, fitting: list[tuple], memo: dict, deadline: float | None) -> None:
        """Put the second process's memory-limit pass over an offered plan into ``memo`` (as
        :func:`_polish` keeps it), waiting for it, where that plan is one :func:`_polish`
        passes over (the three cheapest) and was not passed over here."""
        for entry in sorted(fitting, key=lambda k: k[:3])[:3]:
            plan = entry[4].schedule
            token = self._token(plan)
            hit = memo.get(("polish", id(plan)))
            if token is None or (hit is not None and hit[0] is plan) or not self._await_offer(token, "polished", deadline):
                continue
            ops, nodes, metrics = self.offers[token]["polished"]
            memo[("polish", id(plan))] = (plan, Schedule(ops, nodes), metrics)

    def adopt_offered_improve(self, best: tuple, memo: dict, deadline: float | None) -> None:
        """Put the second process's improvement pass into ``memo`` (as :func:`_improve` keeps
        it) where its input is ``best``'s plan: an offered plan, or its memory-limit pass
        where that was cheaper (:func:`_final_passes` chose the same); waits for it."""
        target = best[4].schedule
        hit = memo.get(("improve", id(target)))
        if hit is not None and hit[0] is target:
            return  # made here already
        for token, plan in enumerate(self.offered):
            better = _improved_from(plan, target, memo)
            if better is None:
                continue
            if self._await_offer(token, "improved", deadline):
                _keep_improvement(memo, target, better, self.offers[token]["improved"])
            return

    def result(self, name: str, deadline: float | None) -> StrategyResult | RematError | None:
        """Strategy ``name``'s outcome; None if it is not done by ``deadline``. While it waits
        for a last resort, it makes the final passes over the second process's latest plan
        of it so far (:meth:`_pass_over_candidate`); the outcome's plan is then that object
        where it has the same steps (:meth:`adopt_offered_polish` finds the passes by it)."""
        while name not in self.received:
            if name in _LAST_RESORT:
                self._pass_over_candidate()
            read = self._read(deadline)
            if read is None:
                return RematError(f"{name} ended without an answer (its process died)")
            if not read:
                return None
        kind, *payload = self.received[name]
        if kind == "ok" and name in _LAST_RESORT:
            ops, nodes, info, keep = payload
            same = next((p for p in self.offered if _same_steps(p, ops, nodes)), None)
            if same is not None:
                return StrategyResult(same, info, keep)
        return _from_message(kind, *payload)

    def _pass_over_candidate(self) -> None:
        """The final passes (:func:`_final_passes`) over the latest plan the second process
        sent of the last resort it makes (:func:`_offer_up`), if one came since the last
        look: made here, while this process would only wait, and kept as an offer's."""
        if not self.polish or self.budget is None or len(self.ups) <= self.ups_seen:
            return
        self.ups_seen = len(self.ups)
        ops, nodes, cost = self.ups[-1]
        plan = Schedule(ops, nodes)
        got: dict[str, tuple] = {}
        self.offers[len(self.offered)] = got
        self.offered.append(plan)
        try:
            _final_passes(self.graph, self.budget, plan, cost, self.deadline, lambda kind, *payload: got.__setitem__(kind, payload))
        except Exception:  # noqa: BLE001 - an optional speed-up: the final passes make them again
            got["failed"] = ()

    def drain(self) -> bool:
        """Read the messages already sent (facts it made for this process, such as the idle
        work's, land on the graph; the others are kept for their readers); False where the
        pipe is closed (the process ended)."""
        try:
            while self.conn.poll(0):
                self._receive()
        except (EOFError, OSError):
            return False
        return True

    def stop(self) -> None:
        self.drain()
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(timeout=5)
        self.conn.close()
        self.down.close()


#: Floors from this on are not shared (the shared value is a signed 64-bit integer).
_FLOOR_MAX = 2**62


def _to_message(name: str, outcome: StrategyResult | RematError) -> tuple:
    """Candidate ``name``'s outcome as plain data for a pipe (:func:`_from_message`)."""
    if isinstance(outcome, NoPlanError):
        return (name, "noplan", outcome.message, outcome.min_budget)
    if isinstance(outcome, RematError):
        return (name, "error", outcome.message)
    return (name, "ok", outcome.schedule.ops, outcome.schedule.nodes, dict(outcome.info), outcome.keep)


def _from_message(kind: str, *payload: Any) -> StrategyResult | RematError:
    """The outcome :func:`_to_message` sent (its kind and payload)."""
    if kind == "ok":
        ops, nodes, info, keep = payload
        return StrategyResult(Schedule(ops, nodes), info, keep)
    if kind == "noplan":
        return NoPlanError(payload[0], min_budget=payload[1])
    return RematError(payload[0])


def _made_ahead(graph: Graph, budget: int) -> dict[str, StrategyResult | RematError]:
    """The fit probe's candidates whose outcomes at ``budget`` were made ahead
    (:func:`_probe_ahead`), by name."""
    prefix = _ahead_key(budget, "")
    return {k[len(prefix) :]: _from_message(*v) for k, v in graph.derived_items(lambda k: k.startswith(prefix)).items()}


def _improved_from(plan: Schedule, target: Schedule, memo: dict) -> bool | None:
    """Whether :func:`_improve`'s pass over ``target`` is the one the second process made
    over ``plan`` (:func:`_final_passes`): True where ``target`` is ``plan``'s memory-limit
    pass (kept in ``memo`` by :func:`_polish`), False where it is ``plan`` itself, None
    where it is neither (that pass improved another plan)."""
    if target is plan:
        return False
    polished = memo.get(("polish", id(plan)))
    if polished is not None and polished[0] is plan and target is polished[1]:
        return True
    return None


def _keep_improvement(memo: dict, target: Schedule, better: bool, improved: tuple) -> None:
    """Keep the second process's "improved" message ``improved`` in ``memo`` as
    :func:`_improve` keeps its own pass over ``target``, where it started from the same
    plan (``better``: from the memory-limit pass, :func:`_improved_from`)."""
    from remat_cli.algorithms.improve import Improvement

    was_better, arrays, metrics, score, restart, ranking, stopped = improved
    if was_better == better:
        schedule = target if arrays is None else Schedule(*arrays)
        memo[("improve", id(target))] = (target, Improvement(schedule, metrics, score, restart, ranking, stopped))


def _same_steps(plan: Schedule, ops: Any, nodes: Any) -> bool:
    """Whether ``plan`` has the steps ``ops``, ``nodes``."""
    return len(plan.nodes) == len(nodes) and bool(np.array_equal(plan.nodes, nodes)) and bool(np.array_equal(plan.ops, ops))


def _child_main(
    strategies: list[Strategy],
    ranks: list[int],
    graph: Graph,
    budget: int | None,
    context: RunContext,
    conn: Any,
    shared: tuple[Any, ...],
    polish: bool,
    down: Any = None,
    idle: IdleWork | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """Body of the second process: take the next strategy not yet taken until none is
    left (a last resort only once no plan is known to fit, and in a fit probe only once
    no other queued strategy is running: :data:`_LAST_RESORT`), run it (with its
    ``options``, by name, where given), send back plain data; then, with ``polish``, the
    final passes on its best plan (:func:`_speculate`), or where none fits, on the plans
    the parent offers through ``down`` (:func:`_serve`).
    Once it has nothing left and a plan fits, the caller's ``idle`` work (``RunContext.idle``),
    handed back. It ends itself if its parent dies (e.g. a `remat batch` worker killed at
    its --timeout)."""
    taken, fits, busy, bar, stage, done_rank, serving, floor = shared
    import queue
    import signal
    import threading

    # Ctrl-C reaches the whole process group: the parent stops this process (:meth:`_Child.stop`);
    # here it only printed a traceback ("Process ForkProcess-1: ... KeyboardInterrupt")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from remat_cli.executors import end_with_parent

    end_with_parent()
    # messages go out from a thread: a send blocks once the pipe is full until the parent
    # reads, and the parent reads only between its own strategies (a treewidth plan of
    # nn1000 sent while the parent ran chain-dp held this process up for 0.2 s, so the parent
    # then ran chain-dp too, and this process, done with treewidth, only waited)
    outbox: queue.SimpleQueue = queue.SimpleQueue()

    def pump() -> None:
        broken = False
        while (message := outbox.get()) is not None:
            if not broken:
                try:
                    conn.send(message)
                except (OSError, ValueError):  # the parent is gone or stopped reading
                    broken = True

    sender = threading.Thread(target=pump, daemon=True)
    sender.start()
    had = set(graph.derived_items(_handed_back))  # the parent has these already

    def hand_back() -> None:
        fresh = {k: v for k, v in graph.derived_items(_handed_back).items() if k not in had}
        if fresh:
            had.update(fresh)
            outbox.put(("", "derived", fresh))

    mine: list[tuple[float, int, int, str, Schedule]] = []  # its plans that fit
    floors: list[int] = []  # budgets its candidates meet (as the parent's ``consider`` takes them)
    lost = False  # it ran the last resort, which failed: auto most likely fails too
    pending = [idle]

    def idle_work() -> bool:
        """The caller's idle work, made and handed back once a plan fits (in either process:
        ``fits``), so the parent's report skips it; True once nothing is left of it."""
        work = pending[0]
        if work is None:
            return True
        if not fits.value:
            return False
        pending[0] = None
        try:
            outbox.put(("", "derived", {work.key: work.make()}))
        except Exception:  # noqa: BLE001 - an optional speed-up: the parent makes it itself
            pass
        return True

    try:
        while True:
            with taken.get_lock():
                i = taken.value
                last = i < len(strategies) and strategies[i].name in _LAST_RESORT
                if i >= len(strategies) or (last and fits.value):
                    stage.value = 1  # the queue is done (this process speculates next)
                    break
                if last and busy.value > 0 and not polish:  # a fit probe: a plan may yet fit, wait for it
                    wait = True
                else:
                    wait = False
                    taken.value = i + 1
                    busy.value += 0 if last else 1
            if wait:
                time.sleep(0.02)
                continue
            strategy = strategies[i]
            name = strategy.name
            message: tuple
            r: StrategyResult | None = None
            try:
                if last and polish and budget is not None:
                    _offer_up(graph, name, budget, context.deadline, outbox)
                r = strategy.run(graph, budget, (options or {}).get(name), context)
                with taken.get_lock():
                    fits.value = 1  # (a hint: the parent checks each plan itself)
                message = _to_message(name, r)
            except RematError as exc:
                message = _to_message(name, exc)
                if isinstance(exc, NoPlanError):
                    if exc.min_budget is not None:
                        floors.append(exc.min_budget)
                    lost = lost or last
            except Exception as exc:  # noqa: BLE001 - a bug: the parent reports it as a failure
                message = (name, "error", f"internal error: {type(exc).__name__}: {exc}")
            try:
                hand_back()  # before the outcome: the parent reads both before it stops us
            except Exception:  # noqa: BLE001 - an optional speed-up: never a failure
                pass
            with taken.get_lock():
                if not last:
                    busy.value -= 1
                j = taken.value  # whether the queue is done for this process (as at the top)
                if polish and (j >= len(strategies) or (strategies[j].name in _LAST_RESORT and fits.value)):
                    stage.value = 1  # before the parent can read this outcome
            outbox.put(message)
            if polish and r is not None:
                m = _replayed(graph, name, r.schedule) or simulate(graph, r.schedule).metrics
                if m is not None and budget is not None and m.peak_bytes <= budget:
                    mine.append((m.cost, m.peak_bytes, ranks[i], name, r.schedule))
                elif m is not None and budget is not None:
                    floors.append(m.peak_bytes)
        if polish:
            with taken.get_lock():
                to_beat, done = bar.value, done_rank.value
            _speculate(graph, budget, mine, (to_beat, done), context.deadline, outbox)
            idle_work()
            if not mine and down is not None:

                def least() -> int | None:
                    with taken.get_lock():
                        theirs = floor.value
                    return min([*floors, *([theirs] if theirs >= 0 else [])], default=None)

                ahead = _probe_ahead(graph, context, least, outbox) if lost else iter(())

                def work() -> bool:  # (not once a plan fits: auto succeeds, nothing is searched)
                    return not fits.value and next(ahead, None) is not None

                _serve(graph, budget, context.deadline, down, outbox, taken, serving, idle_work, lambda: not fits.value, work)
    finally:
        outbox.put(None)
        sender.join()
        conn.close()
        if down is not None:
            down.close()


#: The messages of the second process's speculation (:func:`_speculate`), in order.
_SPECULATION = ("speculating", "polished", "improved", "failed")


def _speculate(graph: Graph, budget: int | None, mine: list[tuple], parent: tuple[float, int], deadline: float | None, outbox: Any) -> None:
    """In the second process, once its queue is done: the final passes of :func:`_polish`
    and :func:`_improve` on the best plan it made (by cost, peak, registry order; a last
    resort's only if nothing else fits), as they would run were it auto's winner:
    twremat's memory-limit pass, then the improvement pass on the better of the two. Each
    result goes to the parent as soon as it is made ("speculating" names the plan, or None:
    no plan, or ``parent`` (the cost of its best plan, and the registry rank of the plan it
    improved itself) says the parent knows a cheaper plan or has improved this one)."""
    plain = [k for k in mine if k[3] not in _LAST_RESORT] or mine
    cost, _, rank, name, schedule = min(plain, key=lambda k: k[:3]) if plain else (math.inf, 0, -1, "", None)
    if budget is None or schedule is None or cost > parent[0] or rank == parent[1]:
        outbox.put(("", "speculating", None))
        return
    outbox.put(("", "speculating", name))
    try:
        _final_passes(graph, budget, schedule, cost, deadline, lambda kind, *payload: outbox.put(("", kind, *payload)))
    except Exception:  # noqa: BLE001 - an optional speed-up: the parent makes the passes itself
        outbox.put(("", "failed"))


def _offer_up(graph: Graph, name: str, budget: int, deadline: float | None, outbox: Any) -> None:
    """In the second process, as it makes last resort ``name``'s variants (min-memory's; its
    run then picks one): at each look at the stop request (which never stops it), send the
    variant that would be its plan at ``budget`` so far to the parent, which makes the
    final passes over it while it waits for this outcome (:meth:`_Child.result`). On
    random1000 at 0.7x where the parent ran pathwidth and this process chain-dp, the parent
    then sat idle from pathwidth's end (0.8 s) until min-memory's plan (1.37 s)."""
    if name != "min-memory":
        return
    from remat_cli.strategies.min_memory import chosen, min_memory_variants, variants_so_far

    sent: list[Schedule] = []

    def stop() -> bool:
        pick = chosen(variants_so_far(graph), budget)  # min-memory's plan so far
        if pick is not None:
            _, plan, m = pick
            if not any(p is plan for p in sent):
                sent.append(plan)
                outbox.put(("", "candidate", plan.ops, plan.nodes, m.cost))
        return False

    min_memory_variants(graph, deadline, stop=stop)


def _final_passes(graph: Graph, budget: int, schedule: Schedule, cost: float, deadline: float | None, send: Callable[..., None]) -> None:
    """:func:`_polish`'s memory-limit pass over ``schedule`` (of cost ``cost``), then
    :func:`_improve`'s pass over the better of the two, as they run were it auto's winner,
    each result sent as soon as it is made: ``send("polished", ops, nodes, metrics)``, then
    ``send("improved", whether the polished plan was the better, its arrays or None (the
    input itself), and the rest of the :class:`Improvement`)``."""
    from remat_cli.algorithms.improve import improve_plan
    from remat_cli.strategies.evict import memlimit_pass

    polished = memlimit_pass(graph, schedule, budget)
    pm = simulate(graph, polished).metrics
    send("polished", polished.ops, polished.nodes, pm)
    better = pm is not None and pm.peak_bytes <= budget and pm.cost < cost
    start = polished if better else schedule
    imp = improve_plan(graph, start, budget, deadline=deadline, replay=True)
    arrays = None if imp.schedule is start else (imp.schedule.ops, imp.schedule.nodes)
    send("improved", better, arrays, imp.metrics, imp.score, imp.restart, imp.ranking, imp.stopped)


def _probe_ahead(graph: Graph, context: RunContext, least: Callable[[], int | None], outbox: Any) -> Iterator[str]:
    """In the second process, once its queue is done and its last resort failed, so that
    auto most likely fails (the parent still runs its own candidates): the outcomes of the
    fit probe's queued candidates (:data:`_FIT_FIRST` but the last resort, which the probe
    asks first from the variants made) at the budget the search for the smallest budget
    probes after the failure (``context.probe_next`` of ``least()``, the least budget a
    candidate of either process meets so far), one candidate per step (each yields its
    name), each sent to the parent as a fact derived from the graph (:func:`_ahead_key`)
    as soon as it is made. The probe then takes those outcomes instead of running the
    candidates (:func:`_made_ahead`); they are the runs' own, with the probe's options and
    no deadline (a verdict, never one cut short). Where the least budget falls, the probe
    after the new one is made. On random1000 at 0.5x this process waited 0.2 s for the
    parent's dtr replay, then the parent's probe at 512 B took 0.2 s; here the bare runs of
    pathwidth's recursion it made for the failed plan are at hand."""
    from remat_cli.strategies import fast_strategies

    names = [n for n in _FIT_FIRST if n not in _LAST_RESORT]
    by_name = {s.name: s for s in fast_strategies() if s.name in names}
    quiet = replace(context, deadline=None, probe_next=None)
    made: set[str] = set()
    while context.probe_next is not None:
        floor = least()
        target = None if floor is None else context.probe_next(floor)
        if target is None:
            return
        name = next((n for n in names if n in by_name and _ahead_key(target, n) not in made), None)
        if name is None:
            return
        key = _ahead_key(target, name)
        made.add(key)
        try:
            outcome: StrategyResult | RematError = by_name[name].run(graph, target, _replay_options(graph, name, []), quiet)
        except RematError as exc:
            outcome = exc
        except Exception:  # noqa: BLE001 - a bug: the probe runs the candidate itself and raises it
            return
        outbox.put(("", "derived", {key: _to_message(name, outcome)[1:]}))
        yield name


def _make_ahead(graph: Graph, down: Any, outbox: Any, needed: Callable[[], bool]) -> None:
    """:func:`_serve`'s work before the first offer: min-memory's pieces made ahead, each
    sent to the parent as facts derived from the graph; stopped once an offer is in or
    ``needed()`` says False."""
    from remat_cli.strategies.min_memory import make_ahead

    try:
        for key, value in make_ahead(graph, stop=lambda: bool(down.poll(0)) or not needed()):
            outbox.put(("", "derived", {key: value}))
    except (EOFError, OSError):
        raise
    except Exception:  # noqa: BLE001 - an optional speed-up: the parent makes them itself
        pass


def _serve(
    graph: Graph,
    budget: int | None,
    deadline: float | None,
    down: Any,
    outbox: Any,
    lock: Any,
    serving: Any,
    idle: Callable[[], bool] = lambda: True,
    last_resort: Callable[[], bool] = lambda: True,
    work: Callable[[], bool] = lambda: False,
) -> None:
    """In the second process, once its queue is done with no plan of its own that fits: wait
    for plans the parent offers (:meth:`_Child.offer`: the last resort's plan while the
    parent makes its other variants) and make the final passes over each
    (:func:`_final_passes`), its messages tagged with the offer's token; until the parent
    closes the pipe or stops this process. ``serving`` (under ``lock``) says it waits;
    ``idle()`` is called while it does, until it says nothing is left of its work; before it,
    ``work()``, one step of other work at a time while it says it made one (the probe ahead,
    :func:`_probe_ahead`).

    Until the first offer comes it makes the pieces of min-memory's variants that the
    parent's making does not need first (:func:`~remat_cli.strategies.min_memory.make_ahead`),
    each sent as soon as made (the parent, which makes the store-all order's dag run
    meanwhile, then uses them: the same variants); an offer stops it, and so does
    ``last_resort()`` saying False (a plan fits: min-memory will not run), which also
    keeps it from starting. On random1000 at 0.7x
    this process waited 0.09 s between its queue's end and the first offer, and the parent
    spent 0.07 s on those pieces after it."""
    ahead = True
    while True:
        with lock:
            serving.value = 1
        try:
            if ahead:
                ahead = False
                if last_resort():
                    _make_ahead(graph, down, outbox, last_resort)
            while not down.poll(0):
                if work():
                    continue
                if idle():
                    break
                down.poll(0.01)
            token, ops, nodes, cost = down.recv()
        except (EOFError, OSError):
            return

        def send(kind: str, *payload: Any, token: int = token) -> None:
            outbox.put(("", "offer", token, kind, *payload))

        try:
            if budget is None:
                raise ValueError("no budget")
            _final_passes(graph, budget, Schedule(ops, nodes), cost, deadline, send)
        except Exception:  # noqa: BLE001 - an optional speed-up: the parent makes the passes itself
            send("failed")


STRATEGY = Strategy(
    name="auto",
    summary="Runs every fast strategy and returns the cheapest plan within the budget, naming the winner.",
    solve=_run,
    uses_budget=True,
    fast=False,
    reference="",
)


def _run_first_fit(graph: Graph, budget: int | None, options: NoOptions, context: RunContext) -> StrategyResult:
    return _run(graph, budget, options, context, first_fit=True)


#: auto as the search for the smallest budget after a failed plan probes it: each probe
#: asks only whether auto fits (whether any candidate does), so it returns the first plan
#: that fits, without running the others or polishing it (the plan's own figures are not
#: auto's; the planner reports only the budget). Where the failed plan made min-memory's
#: variants (they do not depend on the budget), it asks min-memory first: no other candidate
#: runs at a budget one of the variants meets.
FIT_PROBE = replace(STRATEGY, solve=_run_first_fit)
