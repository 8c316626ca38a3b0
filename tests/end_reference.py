"""A frozen copy of r17's treewidth/pathwidth driver (main 8a1e4f4, before r18-end):
``plan_over_separator_tree`` and its helpers down to ``_bare_pass_arrays``, for
``tests/test_clean_sent_same.py``, which compares the plans, fit probes and failures (their
messages word for word) of the current driver with it. The recursion, the second process
(``_Forked``) and the constants are the current module's (``T``), so that only the driver's
flow is compared (r18-end: the second process sends its clean-up of the bare run back
where its pass does not fit, instead of this process making it again for the message)."""

# ruff: noqa
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.schedule import Schedule
from remat_cli.simulate import Metrics
from remat_cli.strategies import treewidth as T
from remat_cli.strategies.base import RunContext, StrategyResult
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan
from remat_cli.strategies.treewidth import (
    OVER_BUDGET,
    OVER_LIMIT,
    DecompositionOptions,
    RecursionBug,
    RecursionStopped,
    _Forked,
    _KEEPING,
    _job_code,
    _ladder,
    _measure,
    _result,
    _started,
    work_limit,
)
from remat_cli.algorithms.decompose import MORAL_DEGREE_CAP, SeparatorTree
from remat_cli.units import Fact, Phrase, fmt_bytes_exact


def recursive_schedule(*a: Any, **k: Any) -> Any:
    return T.recursive_schedule(*a, **k)


@dataclass(frozen=True)
class _Attempt:
    schedule: Schedule
    metrics: Metrics
    label: str | Phrase  # what the run was, reported as info["mode"]


def plan_over_separator_tree(
    graph: Graph,
    sep: SeparatorTree,
    budget: int | None,
    options: DecompositionOptions,
    context: RunContext,
    *,
    kind: str,
    decompose_seconds: float,
    fit_only: bool = False,
) -> StrategyResult:
    """The strategy body shared by ``treewidth`` and ``pathwidth`` (``kind`` names which).

    Every candidate schedule is measured by the simulator; a plan above ``budget`` is
    never returned. Anytime: a candidate that passes its work limit or the deadline
    (``context.deadline``, a ``time.perf_counter()`` value) is dropped and the cheapest
    finished one that fits wins; ``context.progress(done, total, label)`` hears of each
    candidate.

    ``fit_only`` (:data:`FIT_PROBE`, the search for the smallest budget): return the first
    candidate found to fit ``budget``, unpolished, as soon as one is: the plan fits exactly
    when one of its candidates does, so the verdict is the plan's, in less time. The kept
    bare run, and the memory-limit pass over it where the kept clean-up of it peaks within
    the budget, are looked at first; then the candidates come as in the plan, each
    replayed by the simulator. Where none fits: the plan's NoPlanError, word for word.
    Its ladder runs, here and in the second process, stop at their first compute over the
    budget (``stop_above``: they could not fit it); a run stopped so is noted for this
    probe only, never kept on the graph (it says nothing about other budgets).
    """
    try:
        return _plan_over_separator_tree(
            graph, sep, budget, options, context, kind=kind, decompose_seconds=decompose_seconds, fit_only=fit_only
        )
    except _Fitted as found:  # (a fit probe's answer)
        return StrategyResult(found.run.schedule, {"decomposition": kind, "mode": found.run.label}, None)


class _Fitted(Exception):
    """A fit probe found a candidate that fits (:func:`plan_over_separator_tree`)."""

    def __init__(self, run: _Attempt) -> None:
        super().__init__("fits")
        self.run = run


def _plan_over_separator_tree(
    graph: Graph,
    sep: SeparatorTree,
    budget: int | None,
    options: DecompositionOptions,
    context: RunContext,
    *,
    kind: str,
    decompose_seconds: float,
    fit_only: bool = False,
) -> StrategyResult:
    """:func:`plan_over_separator_tree`; in a fit probe it raises :class:`_Fitted`."""
    started = time.perf_counter()
    deadline = context.deadline
    progress = context.progress
    idle = [context.idle]
    info: dict[str, Any] = {
        "decomposition": kind,
        "width": sep.width,
        "separator depth": sep.depth,
        "bare bound (w+1)(depth+1)": (sep.width + 1) * (sep.depth + 1),
        "decompose seconds": round(decompose_seconds, 4),
    }
    wide = int(np.count_nonzero(np.diff(graph.pred_ptr)[graph.needed] > MORAL_DEGREE_CAP))
    if wide:
        info["nodes outside the bound"] = Phrase("{} (more than {} inputs: not moralized)", (wide, MORAL_DEGREE_CAP))
    stopped: list[Phrase] = []  # "label (why)" of each run stopped at a limit

    def done_if_fits(run: _Attempt | None) -> None:
        """In a fit probe, end the plan with ``run`` if it fits the budget."""
        if fit_only and run is not None and budget is not None and run.metrics.peak_bytes <= budget:
            raise _Fitted(run)

    def attempt(label: str | Phrase, limit: int | None, *, ran: tuple[Schedule | None, str] | None = None, **kw: Any) -> _Attempt | None:
        """One run of the recursion, measured; None when it stopped at a limit. ``ran``:
        its outcome already (:func:`run_only`), to measure and count here."""
        schedule, why = run_only(label, limit, **kw) if ran is None else ran
        if schedule is None:
            if why == "cannot win":
                pruned[0] += 1
            elif why in (OVER_LIMIT, OVER_BUDGET):
                unfit[0] += 1  # a candidate that does not fit, counted as tried
            else:
                stopped.append(Phrase("{} ({})", (label, why)))
            return None
        return _Attempt(schedule, _measure(graph, schedule), label)

    def run_only(label: str | Phrase, limit: int | None, **kw: Any) -> tuple[Schedule | None, str]:
        """One run of the recursion: its schedule, or None and why it stopped."""
        if progress is not None:
            progress(tried[0], 0, Phrase("{}: {}", ("treewidth" if kind.startswith("tree") else "pathwidth", label)))
        tried[0] += 1
        try:
            return recursive_schedule(graph, sep, limit, deadline=deadline, memo=memo, **kw)[0], ""
        except RecursionStopped as exc:
            return None, str(exc)

    tried = [0]
    pruned = [0]
    unfit = [0]  # cacheless runs stopped over the budget (they would not fit it)
    memo: dict[Any, Any] = {}
    # a ladder run depends on its point, not on the budget: kept on the graph for the next
    # plan of it (a search for the smallest budget); (tree id, point, eager, evict) ->
    # (tree, its run or None, the cost cap it was stopped under, why it stopped)
    ladder_runs = graph.derived("ladder runs", dict)
    # a fit probe stops a ladder run at its first compute over the budget (it cannot fit
    # it: ``stop_above``); that says nothing about other budgets, so such runs are noted
    # here, for this plan only, never in ladder_runs
    above = None if not fit_only or budget is None else budget - graph.fixed_mem
    over_budget: set[tuple[int, int, bool, str]] = set()

    def ladder_attempt(label: Phrase, point: int, eager: bool, evict: str, max_cost: float) -> _Attempt | None:
        key = (id(sep), point, eager, evict)
        if forked is not None:  # the second process is making this run: its outcome, not
            code = _job_code(point, eager, evict)  # the same run again here (it started
            while (
                key not in ladder_runs and key not in over_budget and forked.claimed() == code and not forked.ended and not _past(deadline)
            ):
                absorb(wait=True, ahead=True)  # under a cap no lower than this one: caps only fall)
        if key in over_budget and key not in ladder_runs:  # (the second process's run)
            tried[0] += 1
            unfit[0] += 1
            return None
        hit = ladder_runs.get(key)
        if hit is not None and hit[0] is sep:
            _, run, cap, why = hit
            if run is not None and run.metrics.cost <= max_cost:  # it finishes under this cap too
                tried[0] += 1
                return _Attempt(run.schedule, run.metrics, label)
            if run is not None or (why == "cannot win" and max_cost <= cap):  # stopped again
                tried[0] += 1
                pruned[0] += 1
                return None
            if why == "work limit":
                tried[0] += 1
                stopped.append(Phrase("{} ({})", (label, why)))
                return None
        was_pruned, was_stopped = pruned[0], len(stopped)
        run = attempt(label, point - graph.fixed_mem, cache=True, eager=eager, evict=evict, max_cost=max_cost, stop_above=above)
        if run is not None:
            keep_run(key, run, None, None)
        elif pruned[0] > was_pruned:
            keep_run(key, None, max_cost, "cannot win")
        elif len(stopped) > was_stopped and stopped[-1].args[1] == "work limit":
            keep_run(key, None, None, "work limit")
        return run

    def keep_run(key: tuple, run: _Attempt | None, cap: float | None, why: str | None) -> None:
        """Keep a ladder run's outcome (a finished run, or why it stopped and under which
        cap) for the next plan of the graph; bounded: a few searches' worth."""
        if len(ladder_runs) >= 64:
            ladder_runs.clear()
        ladder_runs[key] = (sep, run, cap, why)

    # the bare recursion does not depend on the budget: one run per tree, kept on the graph
    # (a search for the smallest budget plans the same graph ten times)
    runs = graph.derived("bare recursion runs", dict)
    hit = runs.get(id(sep))
    if hit is None or hit[0] is not sep:
        hit = [sep, None, None, None, None]  # tree, its run or None, why it stopped, cleaned-up run, its metrics

    def bare_attempt(ran: tuple[Schedule | None, str] | None = None) -> _Attempt | None:
        """The bare run, measured (``ran``: its recursion made already, by :func:`run_only`)."""
        if hit[1] is not None or hit[2] is not None:
            if hit[1] is None:
                stopped.append(Phrase("{} ({})", ("bare recursion", hit[2])))
            return hit[1]
        before = len(stopped)
        run = attempt("bare recursion", None, ran=ran)
        why = None if run is not None else (stopped[-1].args[1] if len(stopped) > before else "cannot win")
        if run is not None or why == "work limit":  # a time limit may pass next time
            hit[1], hit[2] = run, why
            if len(runs) >= 4:  # bounded: a few trees per graph
                runs.clear()
            runs[id(sep)] = hit
        return run

    def cleaned_bare(bare: Schedule) -> Schedule:
        """The bare run with frees moved to last use (evict.cleanup), made once."""
        from remat_cli.strategies.evict import cleanup

        if hit[3] is None or hit[1] is None or hit[1].schedule is not bare:
            hit[3], hit[4] = cleanup(graph, bare), None
        return hit[3]

    def cleaned_peak(bare: Schedule) -> int:
        """The peak of :func:`cleaned_bare`, measured once."""
        clean = cleaned_bare(bare)
        if hit[4] is None or hit[4][0] is not clean:
            hit[4] = (clean, _measure(graph, clean))
        return hit[4][1].peak_bytes

    if budget is None:
        bare_run = bare_attempt()
        if bare_run is None:
            store = store_all_plan(graph)
            info["mode"] = Phrase("store-all: the bare recursion stopped at its {}", (stopped[0].args[1],))
            info["work limit (units)"] = work_limit(graph)
            return _result(graph, store.schedule, store.metrics, info, started)
        info["mode"] = "bare recursion"
        return _result(graph, bare_run.schedule, bare_run.metrics, info, started)
    fits = store_all_if_fits(graph, budget)
    if fits is not None:
        info["mode"] = "store-all fits the budget"
        return _result(graph, fits.schedule, fits.metrics, info, started)
    sa = store_all_plan(graph).metrics
    candidates: list[_Attempt] = []
    needed = int(np.count_nonzero(graph.needed))
    bound = (sep.width + 1) * (sep.depth + 1)
    too_wide = needed >= T.LARGE_GRAPH_NODES and bound >= needed
    if too_wide:  # the budgeted runs would spend minutes for a bound store-all meets
        info["budgeted recursion"] = Phrase(
            "not run: its bound (w+1)(depth+1) = {} values is no fewer than the {} needed nodes"
            " (a graph of {} needed nodes or more); the bare recursion and the memory-limit pass only",
            (bound, needed, T.LARGE_GRAPH_NODES),
        )
    sent: list[Any] = []  # the memory-limit pass over the bare run (the second process's)
    if fit_only and hit[1] is not None:  # the kept bare run fits, or the pass over it may
        done_if_fits(hit[1])
        if options.memlimit and hit[3] is not None and cleaned_peak(hit[1].schedule) <= budget:
            sent.append(_bare_pass(graph, hit[3], budget, deadline))  # (it fits every budget
            done_if_fits(sent[0])  # from that peak up: evict.py)
    variants: tuple[tuple[bool, str], ...] = ((True, "recent"), (True, "cheap"), (False, "recent"))
    few = needed >= T.LARGE_GRAPH_NODES  # scale mode: one ladder point (see T.LARGE_LADDER_POINTS)

    def ladder_points(bare_peak: int | None) -> list[int]:
        """The budget ladder's points (none without ``options.cache`` or when too wide),
        given the bare run's peak (None: it stopped)."""
        if not options.cache or too_wide:
            return []
        floor = graph.lb if bare_peak is None else max(graph.lb, int(0.8 * bare_peak))
        return _ladder(budget, floor, sa.peak_bytes)

    def to_beat() -> float:
        return min((c.metrics.cost for c in candidates if c.metrics.peak_bytes <= budget), default=math.inf)

    def fork_from(bare_schedule: Schedule | None) -> _Forked | None:
        """The second process, from the bare run's steps: the memory-limit pass over them
        (unless made here already: ``sent``), then the ladder's lower points (None where it
        cannot start). ``bare_schedule`` None: it makes the bare run first and sends it
        back (:func:`receive_bare`), or ends where it stops (or meets a bug)."""

        import os

        me = os.getpid()  # (this process; the second one's parent)
        with_pass = not sent

        def second(send: Any, cap: Any, note: Any, claim: Any, mine: Any) -> None:
            steps = bare_schedule
            if steps is None:  # the same run as run_only("bare recursion", None) here
                try:
                    steps = recursive_schedule(graph, sep, None, deadline=deadline, memo=memo)[0]
                except RecursionStopped as exc:
                    send({"kind": "bare", "why": str(exc)})
                    return
                except RecursionBug:
                    return  # this process makes the run again and meets it
                send({"kind": "bare"}, steps.ops, steps.nodes, aside=True)  # (1.8 MB on grid1000)
            passed = None
            if with_pass:
                ops, nodes, metrics = _bare_pass_arrays(graph, cleaned_bare(steps), budget, deadline)
                send({"kind": "pass", "metrics": metrics}, ops, nodes)
                passed = (Schedule(ops, nodes), metrics)
            # the ladder runs start under the cost cap they started under before: that of
            # the budgeted and the bare run, which this process writes on the shared page,
            # then the bare peak (measured there by now: it takes less than this pass);
            # should this process die first (killed), the wait ends with it, not never
            while note() < 0:
                if os.getppid() != me:
                    return
                time.sleep(0.001)
            bare_peak = note()
            points = ladder_points(bare_peak)
            if few:
                points = points[: T.LARGE_LADDER_POINTS]
            # the ladder runs of the lower points, lowest first, while this process works
            # down from the top: each one's outcome lands in ladder_runs, as if it had run
            # here (the cache-only run too, where the point is not below the bare peak: it
            # runs here where no prefetch run fits the point)
            jobs = [(p, e, ev) for p in reversed(points[1:]) for e, ev in variants if e or p >= bare_peak]
            # (a run this process has started, it finishes: it goes down the same jobs in
            # the opposite order and writes on the shared page which one it is at)
            for point, eager, evict in jobs:
                code = _job_code(point, eager, evict)
                if (id(sep), point, eager, evict) in ladder_runs or _started(mine(), code):
                    continue
                claim(code)
                if _started(mine(), code):  # (it started there meanwhile: should it wait
                    claim(-1)  # on the claim, a message wakes it)
                    send({"kind": "unclaimed"})
                    continue
                max_cost = cap()
                try:
                    run, _ = recursive_schedule(
                        graph, sep, point - graph.fixed_mem, cache=True, eager=eager, evict=evict,
                        max_cost=max_cost, deadline=deadline, memo=memo, stop_above=above,
                    )  # fmt: skip
                    job = {"kind": "run", "point": point, "eager": eager, "evict": evict}
                    send({**job, "metrics": _measure(graph, run)}, run.ops, run.nodes)
                except RecursionStopped as exc:
                    why = str(exc)
                    if why != "time limit":
                        job = {"kind": "run", "point": point, "eager": eager, "evict": evict, "why": why}
                        send({**job, "cap": max_cost if why == "cannot win" else None})
                except RecursionBug:
                    continue  # this process meets it again and counts it
            # no ladder run left: the keep moves over the pass, which this process makes
            # last where the pass is the cheapest candidate (only then: it fits and costs no
            # more than the cap, the cheapest other candidate's cost); sent for it to use
            if passed is not None and above is None and passed[1].recomputations and passed[1].peak_bytes <= budget:
                if passed[1].cost <= cap():
                    from remat_cli.algorithms.improve import improve_plan

                    claim(_KEEPING)
                    imp = improve_plan(graph, passed[0], budget, deadline=deadline)
                    kept = {"kind": "kept", "improved": imp.improved, "metrics": imp.metrics}
                    send(kept, *((imp.schedule.ops, imp.schedule.nodes) if imp.improved else ()))

        return _Forked.start(second)

    def receive_bare() -> tuple[Schedule | None, str]:
        """The bare run the second process made (its first message), as :func:`run_only`
        returns it; made here where none came (the second process ended: it met a bug,
        which this run meets again, or it was killed). Its later messages are kept for
        :func:`absorb`."""
        assert forked is not None
        got = forked.messages(wait=True)
        if got and got[0][0]["kind"] == "bare":
            forked.held.extend(got[1:])
            msg, schedule = got[0]
            return schedule, "" if schedule is not None else msg["why"]
        try:
            return recursive_schedule(graph, sep, None, deadline=deadline, memo=memo)[0], ""
        except RecursionStopped as exc:
            return None, str(exc)

    def run_ahead() -> None:
        """While the second process makes the bare run: the ladder's top runs, its prefetch
        ones from the top down, each kept in ladder_runs, where the ladder finds it (and
        books it as it books a run it makes). Each is capped at the
        best fitting cost so far among the candidates and these runs, which is no lower
        than the cap the ladder asks for it then (caps only fall; the points are those of
        the floor LB: the bare peak only raises the floor), so the ladder reuses each
        exactly; a run that stops at its work limit is not kept (under a lower cap it
        might stop as one that cannot win)."""
        assert forked is not None
        best = to_beat()
        for point in ladder_points(None):
            for eager, evict in variants:
                if not eager:
                    continue  # (whether it runs depends on the bare peak)
                if best <= sa.base_cost or _past(deadline) or _bare_arrived(forked):
                    return
                key = (id(sep), point, eager, evict)
                kept = ladder_runs.get(key)
                if kept is None or kept[0] is not sep:  # (no set_mine: the point may be below
                    cap = best * (1 + 1e-9)  # the floor, and the ladder's other runs to come)
                    try:
                        run, _ = recursive_schedule(
                            graph, sep, point - graph.fixed_mem, cache=True, eager=eager, evict=evict,
                            max_cost=cap, deadline=deadline, memo=memo,
                        )  # fmt: skip
                        kept = (sep, _Attempt(run, _measure(graph, run), "run ahead"), None, None)
                    except RecursionStopped as exc:
                        if str(exc) != "cannot win":
                            return
                        kept = (sep, None, cap, "cannot win")
                    except RecursionBug:
                        return  # (the ladder meets it again)
                    keep_run(key, *kept[1:])
                run = kept[1]
                if run is not None and run.metrics.peak_bytes <= budget:
                    best = min(best, run.metrics.cost)

    # standalone, on T.PARALLEL_NEEDED nodes or more, a second process makes the bare run's
    # memory-limit pass and the ladder's lower points. Below T.LARGE_GRAPH_NODES it starts
    # before the bare recursion, makes it, sends its steps back and goes on to its clean-up
    # and pass (the longest path on grid1000), while this process makes the budgeted run,
    # then measures the bare one: the same runs, booked in the same order. On larger graphs
    # (nn10000: this process's work copy-on-write under a live child cost more than it
    # gained at load 2) it starts once both are made here, as before
    forkable = options.memlimit and context.parallel and needed >= T.PARALLEL_NEEDED and _Forked.possible()
    early = forkable and not few
    ahead: tuple[Schedule | None, str] | None = None
    forked: _Forked | None = None
    awaited = False  # the bare run comes from the second process (receive_bare)
    if early and hit[1] is None and hit[2] is None:
        forked = fork_from(None)
        if forked is None:
            ahead = run_only("bare recursion", None)
        else:
            awaited = True
            if progress is not None:
                progress(tried[0], 0, Phrase("{}: {}", ("treewidth" if kind.startswith("tree") else "pathwidth", "bare recursion")))
            tried[0] += 1  # (as run_only counts it)
    elif early and hit[1] is not None:
        forked = fork_from(hit[1].schedule)
    if fit_only and forked is not None and hit[1] is not None:
        # a fit probe's ladder runs go uncapped until a candidate fits (and then it ends):
        # with the bare peak known, the second process starts on them at once
        forked.set_note(hit[1].metrics.peak_bytes)
    first: _Attempt | None = None  # the cacheless budgeted run
    try:
        if not too_wide:
            first = attempt("budgeted recursion", budget - graph.fixed_mem, cache=False, stop_over=True)
            if first is not None:
                candidates.append(first)
                done_if_fits(first)
        if awaited:
            if forked is not None and first is not None and first.metrics.peak_bytes <= budget:
                run_ahead()  # (where the budgeted run fits, the ladder's top points likely do)
            ahead = receive_bare()
            if ahead[0] is None and forked is not None:  # stopped: no second process, as
                forked.stop()  # where this process made the run and it stopped
                forked = None
        bare_run = bare_attempt(ahead)
        done_if_fits(bare_run)
    except BaseException:
        if forked is not None:
            forked.stop()
        raise
    bare = None if bare_run is None else bare_run.metrics
    if bare_run is not None:
        info["bare peak (bytes)"] = bare_run.metrics.peak_bytes
        candidates.append(bare_run)
    points = ladder_points(None if bare is None else bare.peak_bytes)
    if len(points) > T.LARGE_LADDER_POINTS and few:
        info["budget ladder"] = Phrase(
            "{} of {} points, prefetch with recent-first eviction only: a graph of {} needed nodes or more",
            (T.LARGE_LADDER_POINTS, len(points), T.LARGE_GRAPH_NODES),
        )
        points = points[: T.LARGE_LADDER_POINTS]
        variants = ((True, "recent"), (False, "recent"))  # cheap-first eviction left out too
    if forkable and not early and bare_run is not None:
        forked = fork_from(bare_run.schedule)
    if forked is not None and bare is not None:  # (forked: the bare run finished, so it is measured)
        forked.set_cap(to_beat() * (1 + 1e-9))
        forked.set_note(bare.peak_bytes)

    def absorb(wait: bool = False, ahead: bool = False) -> None:
        """Keep what the second process has sent: ladder runs in ladder_runs (where this
        process has none for the key), the bare run's pass in ``sent`` (with ``wait``, at
        least one message, waiting until the deadline at most; with ``ahead`` too, the pass
        over the cheapest candidate so far is made first: :func:`polished_now`)."""
        if forked is None:
            return
        if wait and idle[0] is not None and to_beat() < math.inf:  # (a plan that fits is held)
            work, idle[0] = idle[0], None
            work.make()  # the caller's work (RunContext.idle), done where this process would wait
        if wait and ahead and options.memlimit and not fit_only:
            polished_now()
        for msg, schedule in forked.messages(wait, deadline):
            metrics = None if msg.get("metrics") is None else Metrics(**msg["metrics"])
            if msg["kind"] == "pass":
                sent.append(_Attempt(schedule, metrics, _BARE_PASS))
                done_if_fits(sent[-1])
                continue
            if msg["kind"] == "kept":  # the keep moves over the pass (improved, schedule, metrics)
                pass_kept[:] = [msg["improved"], schedule, metrics]
                continue
            if msg["kind"] != "run":  # (a claim given up)
                continue
            key = (id(sep), msg["point"], msg["eager"], msg["evict"])
            if key in ladder_runs:
                continue
            if msg.get("why") == OVER_BUDGET:  # this plan's budget only: not kept on the graph
                over_budget.add(key)
                continue
            if schedule is not None:
                keep_run(key, _Attempt(schedule, metrics, "second process"), None, None)
            else:
                keep_run(key, None, msg["cap"], msg["why"])

    improved: tuple[_Attempt, Any] | None = None  # keep moves made while the pass came: (over which, outcome)
    pass_kept: list[Any] = []  # the keep moves over the pass, made by the second process
    bare_pass: _Attempt | None = None  # (its pass, once in)
    ahead_polish: list[Any] = []  # the pass over the cheapest candidate, made ahead: (over which, its outcome)

    def polished_now() -> list[_Attempt]:
        """:func:`_polished_best` of the candidates now: the one made ahead where it is
        over the same cheapest candidate (the same input, so the same outcome), else made
        here and kept. Made ahead where this process waits on a ladder run the second one
        is making at the end of the ladder (grid1000 0.5x: 10-15 ms), it is then ready;
        that run, like every run below the top points there, stops as one that cannot win."""
        base = _cheapest(candidates, budget)
        if not ahead_polish or ahead_polish[0] is not base:
            ahead_polish[:] = [base, _polished_best(graph, candidates, budget, deadline)]
        return ahead_polish[1]

    try:
        discarded = 0

        def _fits_point(label: Phrase, point: int, eager: bool, evict: str) -> bool:
            """Whether a ladder run stopped under a cost cap fits its point: redone uncapped
            (a candidate then, as it would have been uncapped; costlier than the best)."""
            nonlocal discarded
            absorb()
            try:
                run = ladder_attempt(label, point, eager, evict, math.inf)
            except RecursionBug:
                discarded += 1
                return False
            if run is None:
                return False
            candidates.append(run)
            done_if_fits(run)
            return run.metrics.peak_bytes <= point

        if points:
            for point in points:
                if to_beat() <= sa.base_cost:
                    break  # nothing can be cheaper than computing each node once
                if deadline is not None and time.perf_counter() > deadline:
                    stopped.append(Phrase("{} ({})", ("the rest of the budget ladder", "time limit")))
                    break
                fitted = False
                # every run is capped at the best fitting cost so far (a costlier run cannot
                # win); a capped prefetch run that stops leaves unknown whether it fits its
                # point, which decides only whether the cache-only run is a candidate: that is
                # settled (the stopped runs redone uncapped) only if the cache-only run finishes
                # under its cap, so the candidates that can win are those of uncapped runs
                unknown: list[tuple[Phrase, bool, str]] = []
                for eager, evict in variants:
                    if not eager and (fitted or (bare is not None and point < bare.peak_bytes)):
                        break  # the cache-only run only where no prefetch run fits the point
                    label = Phrase(
                        "budgeted recursion with cache ({} evicted first){} at {}",
                        (evict, " and prefetch" if eager else "", Fact(point, "bytes")),
                    )
                    cap = to_beat() * (1 + 1e-9)
                    was_pruned = pruned[0]
                    if forked is not None:
                        forked.set_cap(cap)
                        forked.set_mine(_job_code(point, eager, evict))
                        absorb()
                    try:
                        run = ladder_attempt(label, point, eager, evict, cap)
                    except RecursionBug:  # an internal error in a refinement: never let it
                        discarded += 1  # cost a plan; the tests require this to stay 0
                        continue
                    if run is None:
                        if eager and pruned[0] > was_pruned:
                            unknown.append((label, eager, evict))
                        continue
                    if not eager and unknown:
                        fitted = any(_fits_point(lab, point, e, ev) for lab, e, ev in unknown)
                        if fitted:
                            break  # a prefetch run fits the point: no cache-only run here
                    candidates.append(run)
                    done_if_fits(run)
                    fitted = fitted or run.metrics.peak_bytes <= point
        if pruned[0]:
            info["runs stopped once costlier than the best"] = pruned[0]
        if stopped:
            shown = stopped[:3]
            more = "; …" if len(stopped) > 3 else ""
            info["stopped runs"] = Phrase("{}: " + "; ".join("{}" for _ in shown) + more, (len(stopped), *shown))
        if options.memlimit:  # off only to test the monotone part on its own
            polished: list[_Attempt] | None = None
            if forked is not None and not sent:
                # while the pass over the bare run comes: the pass over the cheapest candidate
                # (it does not depend on the other), and should it still not have come, the
                # keep moves over the cheapest so far (used where that one is still the best)
                polished = polished_now()
                absorb()
                if not sent and not forked.ended:
                    ahead_best = _cheapest(candidates + polished, budget)
                    if ahead_best is not None and ahead_best.metrics.recomputations:
                        from remat_cli.algorithms.improve import improve_plan

                        improved = (ahead_best, improve_plan(graph, ahead_best.schedule, budget, deadline=deadline))
            while forked is not None and not sent and not forked.ended and not _past(deadline):
                absorb(wait=True)
            if forked is not None:  # its other ladder runs are not needed any more: it takes
                forked.set_mine(0)  # none (all started here), and makes the keep moves over its pass
            bare_pass = sent[0] if sent else None  # (its clean-up stays there)
            # past the deadline the bare run's pass is not made here (its clean-up alone is
            # O(steps): 0.3 s on grid1000 at its lower bound)
            late = _past(deadline)
            clean = None if bare_run is None or bare_pass is not None or late else cleaned_bare(bare_run.schedule)
            if polished is None and ahead_polish:  # (made ahead: reused where it is still the one)
                polished = polished_now()
            for run in _memlimit_candidates(graph, candidates, clean, budget, bare_pass, deadline, polished):
                candidates.append(run)
                done_if_fits(run)
            if forked is not None and bare_pass is not None and _cheapest(candidates, budget) is bare_pass:
                absorb()  # the keep moves over the pass: the second process's, where it makes them
                while not pass_kept and forked.claimed() == _KEEPING and not forked.ended and not _past(deadline):
                    absorb(wait=True)
    finally:
        if forked is not None:
            forked.stop()
    best = _cheapest(candidates, budget)
    if best is None:
        if bare_run is None:
            least = sa.peak_bytes
            why = "its recursion stopped at its work or time limit; store-all"
        elif _past(deadline) and (hit[3] is None or hit[1] is None or hit[1].schedule is not bare_run.schedule):
            least = min(bare_run.metrics.peak_bytes, sa.peak_bytes)  # a candidate: it fits that
            why = "its smallest plan found by its time limit (the bare recursion)"
        else:
            # the memory-limit pass over the bare recursion fits every budget at or above the
            # peak of the bare recursion cleaned up (evict.py), which is at most the bare peak
            least = min(cleaned_peak(bare_run.schedule), sa.peak_bytes)
            why = "its smallest plan (the bare recursion, frees moved to last use)"
        raise NoPlanError(
            f"{kind} cannot fit budget {fmt_bytes_exact(budget)}: {why} peaks at {fmt_bytes_exact(least)}",
            min_budget=least,
        )
    if options.memlimit and best.metrics.recomputations:  # drop recomputations the budget allows
        from remat_cli.algorithms.improve import improve_plan

        if pass_kept and best is bare_pass:  # (made there from the same schedule: the same moves)
            better, schedule, metrics = pass_kept
        else:
            imp = (
                improved[1]
                if improved is not None and improved[0] is best
                else improve_plan(graph, best.schedule, budget, deadline=deadline)
            )
            better, schedule, metrics = imp.improved, imp.schedule, imp.metrics
        best = _Attempt(schedule, metrics, Phrase("{} + keep moves", (best.label,))) if better else best
    info["mode"] = best.label
    info["candidates tried"] = len(candidates) + unfit[0]
    if discarded:
        info["discarded candidates (internal error)"] = discarded
    return _result(graph, best.schedule, best.metrics, info, started)


def _bare_arrived(forked: _Forked) -> bool:
    """Whether the second process's bare run has come (or it has ended):
    what :func:`receive_bare` waits for (the messages read are kept for it)."""
    forked.held = forked.messages()  # (those held first, then those read now)
    return forked.ended or any(msg["kind"] == "bare" for msg, _ in forked.held)


def _past(deadline: float | None) -> bool:
    """Whether ``deadline`` (a ``time.perf_counter()`` value, or None: none) has passed."""
    return deadline is not None and time.perf_counter() > deadline


def _memlimit_candidates(
    graph: Graph,
    candidates: list[_Attempt],
    bare: Schedule | None,
    budget: int,
    bare_pass: _Attempt | None = None,
    deadline: float | None = None,
    polished: list[_Attempt] | None = None,
) -> list[_Attempt]:
    """twremat's memory-limit pass (:mod:`remat_cli.strategies.evict`) at ``budget`` over the
    bare recursion (what the paper's reference code returns, already cleaned up; None when
    it stopped at a limit; ``bare_pass``: that pass made already, by :func:`_bare_pass`)
    and over the cheapest candidate that fits (the pass never raises a fitting schedule's
    cost or peak; ``polished``: that one made already, by :func:`_polished_best`). Past
    ``deadline`` each pass keeps the rounds it has done."""
    out = []
    if bare_pass is not None:
        out.append(bare_pass)
    elif bare is not None:
        out.append(_bare_pass(graph, bare, budget, deadline))
    return out + (_polished_best(graph, candidates, budget, deadline) if polished is None else polished)


def _polished_best(graph: Graph, candidates: list[_Attempt], budget: int, deadline: float | None = None) -> list[_Attempt]:
    """twremat's memory-limit pass at ``budget`` over the cheapest candidate that fits, where
    it recomputes anything (:func:`_memlimit_candidates`), measured; none where none fits."""
    from remat_cli.strategies.evict import memlimit_pass

    best = _cheapest(candidates, budget)
    if best is not None and best.metrics.recomputations:
        polished = memlimit_pass(graph, best.schedule, budget, deadline=deadline)
        return [_Attempt(polished, _measure(graph, polished), Phrase("{} + memory-limit pass", (best.label,)))]
    return []


def _cheapest(candidates: list[_Attempt], budget: int) -> _Attempt | None:
    """The cheapest of ``candidates`` that fits ``budget`` (ties: the lower peak, then the
    earlier), None where none fits: the plan's choice, and what its passes start from."""
    return min(
        (c for c in candidates if c.metrics.peak_bytes <= budget),
        key=lambda c: (c.metrics.cost, c.metrics.peak_bytes),
        default=None,
    )


def _bare_pass(graph: Graph, clean: Schedule, budget: int, deadline: float | None = None) -> _Attempt:
    """twremat's memory-limit pass at ``budget`` over the bare recursion cleaned up
    (``clean``), measured: what :func:`_memlimit_candidates` adds for the bare run."""
    from remat_cli.strategies.evict import memlimit_pass

    s = memlimit_pass(graph, clean, budget, cleaned=True, deadline=deadline)
    return _Attempt(s, _measure(graph, s), _BARE_PASS)


_BARE_PASS = "bare recursion + memory-limit pass (twremat)"


def _bare_pass_arrays(graph: Graph, clean: Schedule, budget: int, deadline: float | None = None) -> tuple[Any, ...]:
    """:func:`_bare_pass` as its schedule's arrays and metrics, as the second process sends
    it back."""
    run = _bare_pass(graph, clean, budget, deadline)
    return run.schedule.ops, run.schedule.nodes, run.metrics


def unit_peak_values(graph: Graph, schedule: Schedule) -> int:
    """r17's: peak of ``schedule`` in values: the simulator's peak on a unit-size copy of ``graph``."""
    unit = graph.with_arrays(mem=np.ones(graph.n, dtype=np.int64), workspace=np.zeros(graph.n, dtype=np.int64), fixed_mem=0)
    return _measure(unit, schedule).peak_bytes
