"""A frozen copy of r13's orchestration of treewidth's and pathwidth's plan (main before
r14-tw): ``plan_over_separator_tree`` with its second process (``_Forked``), for
``tests/test_fork_overlap_same.py``, which compares the plans, fit probes and failures of
the current code with it. The recursion itself (``recursive_schedule``) and the
constants are the current module's (``T``), so that only the flow is compared."""

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
from remat_cli.simulate import Metrics, simulate
from remat_cli.strategies import treewidth as T
from remat_cli.strategies.base import RunContext, StrategyResult
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan
from remat_cli.strategies.treewidth import (
    OVER_LIMIT,
    DecompositionOptions,
    RecursionBug,
    RecursionStopped,
    unit_peak_values,
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
            elif why == OVER_LIMIT:
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

    def ladder_attempt(label: Phrase, point: int, eager: bool, evict: str, max_cost: float) -> _Attempt | None:
        key = (id(sep), point, eager, evict)
        if forked is not None:  # the second process is making this run: its outcome, not
            code = _job_code(point, eager, evict)  # the same run again here (it started
            while key not in ladder_runs and forked.claimed() == code and not forked.ended and not _past(deadline):
                absorb(wait=True)  # under a cap no lower than this one: caps only fall)
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
        run = attempt(label, point - graph.fixed_mem, cache=True, eager=eager, evict=evict, max_cost=max_cost)
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

        def second(send: Any, cap: Any, note: Any, claim: Any) -> None:
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
            if with_pass:
                ops, nodes, metrics = _bare_pass_arrays(graph, cleaned_bare(steps), budget, deadline)
                send({"kind": "pass", "metrics": metrics}, ops, nodes)
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
            for point, eager, evict in jobs:
                if (id(sep), point, eager, evict) in ladder_runs:
                    continue
                claim(_job_code(point, eager, evict))
                max_cost = cap()
                try:
                    run, _ = recursive_schedule(
                        graph, sep, point - graph.fixed_mem, cache=True, eager=eager, evict=evict,
                        max_cost=max_cost, deadline=deadline, memo=memo,
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
    try:
        if not too_wide:
            first = attempt("budgeted recursion", budget - graph.fixed_mem, cache=False, stop_over=True)
            if first is not None:
                candidates.append(first)
                done_if_fits(first)
        if awaited:
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

    def absorb(wait: bool = False) -> None:
        """Keep what the second process has sent: ladder runs in ladder_runs (where this
        process has none for the key), the bare run's pass in ``sent`` (with ``wait``, at
        least one message, waiting until the deadline at most)."""
        if forked is None:
            return
        for msg, schedule in forked.messages(wait, deadline):
            metrics = None if msg.get("metrics") is None else Metrics(**msg["metrics"])
            if msg["kind"] == "pass":
                sent.append(_Attempt(schedule, metrics, _BARE_PASS))
                done_if_fits(sent[-1])
                continue
            key = (id(sep), msg["point"], msg["eager"], msg["evict"])
            if key in ladder_runs:
                continue
            if schedule is not None:
                keep_run(key, _Attempt(schedule, metrics, "second process"), None, None)
            else:
                keep_run(key, None, msg["cap"], msg["why"])

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
            while forked is not None and not sent and not forked.ended and not _past(deadline):
                absorb(wait=True)
            if forked is not None:
                forked.stop()  # its other ladder runs are not needed any more
            bare_pass: _Attempt | None = sent[0] if sent else None  # (its clean-up stays there)
            # past the deadline the bare run's pass is not made here (its clean-up alone is
            # O(steps): 0.3 s on grid1000 at its lower bound)
            late = _past(deadline)
            clean = None if bare_run is None or bare_pass is not None or late else cleaned_bare(bare_run.schedule)
            for run in _memlimit_candidates(graph, candidates, clean, budget, bare_pass, deadline):
                candidates.append(run)
                done_if_fits(run)
    finally:
        if forked is not None:
            forked.stop()
    fitting = [c for c in candidates if c.metrics.peak_bytes <= budget]
    if not fitting:
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
    best = min(fitting, key=lambda c: (c.metrics.cost, c.metrics.peak_bytes))
    if options.memlimit and best.metrics.recomputations:  # drop recomputations the budget allows
        from remat_cli.algorithms.improve import improve_plan

        imp = improve_plan(graph, best.schedule, budget, deadline=deadline)
        best = _Attempt(imp.schedule, imp.metrics, Phrase("{} + keep moves", (best.label,))) if imp.improved else best
    info["mode"] = best.label
    info["candidates tried"] = len(candidates) + unfit[0]
    if discarded:
        info["discarded candidates (internal error)"] = discarded
    return _result(graph, best.schedule, best.metrics, info, started)


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
) -> list[_Attempt]:
    """twremat's memory-limit pass (:mod:`remat_cli.strategies.evict`) at ``budget`` over the
    bare recursion (what the paper's reference code returns, already cleaned up; None when
    it stopped at a limit; ``bare_pass``: that pass made already, by :func:`_bare_pass`)
    and over the cheapest candidate that fits (the pass never raises a fitting schedule's
    cost or peak). Past ``deadline`` each pass keeps the rounds it has done."""
    from remat_cli.strategies.evict import memlimit_pass

    out = []
    if bare_pass is not None:
        out.append(bare_pass)
    elif bare is not None:
        out.append(_bare_pass(graph, bare, budget, deadline))
    fitting = [c for c in candidates if c.metrics.peak_bytes <= budget]
    if fitting:
        best = min(fitting, key=lambda c: (c.metrics.cost, c.metrics.peak_bytes))
        if best.metrics.recomputations:
            polished = memlimit_pass(graph, best.schedule, budget, deadline=deadline)
            out.append(_Attempt(polished, _measure(graph, polished), Phrase("{} + memory-limit pass", (best.label,))))
    return out


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


class _Forked:
    """A forked second process (``os.fork``) that sends messages back through a pipe (each
    a JSON header, then a schedule's two arrays as raw bytes), and reads a shared number (the cost cap this process
    runs its ladder under) from an anonymous shared page. :meth:`start` returns None where
    that does not pay or is not allowed: one core, no fork, a daemon worker (``remat
    batch``), or a process that already runs another one (``auto``'s)."""

    def __init__(self, pid: int, fd: int, shared: Any) -> None:
        self.pid, self.fd, self.shared = pid, fd, shared
        self.buf = b""
        self.ended = False  # the pipe reached its end
        self.held: list[tuple[dict[str, Any], Schedule | None]] = []  # read, not yet handed out

    @staticmethod
    def possible() -> bool:
        """Whether :meth:`start` may start one here (fork, two cores, no daemon worker, no
        other process of ours running)."""
        import os
        import sys

        mp = sys.modules.get("multiprocessing")  # imported wherever a worker or auto forked
        if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
            return False
        return mp is None or not (mp.current_process().daemon or mp.active_children())

    @classmethod
    def start(cls, fn: Any) -> _Forked | None:
        """Run ``fn(send, cap, note, claim)`` in a second process: ``send(header, ops, nodes)``
        sends a message back (``header`` a dict of plain values and dataclasses; ``ops``
        and ``nodes`` a schedule's arrays, or none; with ``aside=True`` a thread writes it
        while ``fn`` goes on, for a schedule larger than the pipe holds that this
        process reads only once its own run is made), ``cap()`` reads the number
        :meth:`set_cap` last wrote, ``note()`` the integer :meth:`set_note` last wrote
        (−1 before), ``claim(k)`` says what it works on (:meth:`claimed` reads it)."""
        import mmap
        import os
        import struct

        if not cls.possible():
            return None
        shared = mmap.mmap(-1, 24)
        shared[:24] = struct.pack("dqq", math.inf, -1, -1)
        read, write = os.pipe()
        try:  # room for a ladder run's schedule in the pipe (Linux; best effort)
            import fcntl

            fcntl.fcntl(write, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except (ImportError, OSError):
            pass
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return None
        if pid == 0:  # the second process: compute, send, end without any clean-up
            code = 1
            try:
                import dataclasses
                import json

                os.close(read)

                def plain(value: Any) -> Any:
                    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value.item()

                writing: list[Any] = []  # the thread still writing a message sent aside

                def write_all(view: memoryview) -> None:
                    while view:
                        view = view[os.write(write, view) :]

                def send(header: dict[str, Any], ops: Any = None, nodes: Any = None, aside: bool = False) -> None:
                    steps = -1 if ops is None else len(ops)
                    head = json.dumps({**header, "steps": steps}, default=plain).encode()
                    body = (
                        b""
                        if ops is None
                        else np.ascontiguousarray(ops, np.int8).tobytes() + np.ascontiguousarray(nodes, np.int32).tobytes()
                    )
                    view = memoryview(struct.pack("QQ", len(head), len(body)) + head + body)
                    while writing:  # messages arrive in the order they were sent
                        writing.pop().join()
                    if aside:  # more than the pipe holds may wait for this process's reader
                        import threading

                        writing.append(threading.Thread(target=write_all, args=(view,), daemon=True))
                        writing[-1].start()
                    else:
                        write_all(view)

                def claim(value: int) -> None:
                    shared[16:24] = struct.pack("q", value)

                fn(send, lambda: struct.unpack("d", shared[:8])[0], lambda: struct.unpack("q", shared[8:16])[0], claim)
                while writing:
                    writing.pop().join()
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        return cls(pid, read, shared)

    def set_cap(self, value: float) -> None:
        import struct

        self.shared[:8] = struct.pack("d", value)

    def claimed(self) -> int:
        """What the second process last said it works on (``claim``; −1: nothing)."""
        import struct

        return struct.unpack("q", self.shared[16:24])[0]

    def set_note(self, value: int) -> None:
        import struct

        self.shared[8:16] = struct.pack("q", value)

    def messages(self, wait: bool = False, until: float | None = None) -> list[tuple[dict[str, Any], Schedule | None]]:
        """The messages that have arrived, as (header, schedule or None) (with ``wait``, at
        least one unless the second process has ended or ``until``, a ``time.perf_counter()``
        value, has passed); a message cut short is dropped."""
        import json
        import os
        import select
        import struct

        out, self.held = self.held, []
        while not self.ended:
            timeout = (None if until is None else max(0.0, until - time.perf_counter())) if wait and not out else 0
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                break
            try:
                chunk = os.read(self.fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                self.ended = True
            self.buf += chunk
            while len(self.buf) >= 16:
                head, body = struct.unpack("QQ", self.buf[:16])
                if len(self.buf) < 16 + head + body:
                    break
                header = json.loads(self.buf[16 : 16 + head])
                steps = header.pop("steps")
                schedule = None
                if steps >= 0:
                    raw = self.buf[16 + head : 16 + head + body]
                    ops = np.frombuffer(raw, np.int8, steps).copy()
                    nodes = np.frombuffer(raw, np.int32, steps, offset=steps).copy()
                    schedule = Schedule(ops, nodes)
                out.append((header, schedule))
                self.buf = self.buf[16 + head + body :]
            if out and not wait:
                continue
            if out:
                break
        return out

    def stop(self) -> None:
        """End the second process (if still running) and reap it; idempotent."""
        import os
        import signal

        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0
            os.close(self.fd)
            self.shared.close()


def _job_code(point: int, eager: bool, evict: str) -> int:
    """A ladder run as one integer, for the second process's claim (:class:`_Forked`)."""
    return 4 * point + (0 if not eager else 1 if evict == "recent" else 2)


def _ladder(budget: int, floor: int, store_all: int) -> list[int]:
    """The fixed budget ladder at or below ``budget`` at which the cached variant runs,
    highest first.

    Points: store_all × 0.95, 0.90, …, 0.20, then halving again and again down to
    ``floor`` (the caller passes max(LB, 0.8 × the bare recursion's peak): runs far
    below the bare peak do not fit). The points depend on the graph only, not on B, so
    a larger budget sees every point a smaller one saw and the cheapest plan can only
    get cheaper (monotone cost); the cacheless recursion at B itself is monotone by
    construction (docs/algorithms.md).
    """
    points = [int(store_all * (20 - k) / 20) for k in range(1, 17)]  # 0.95 … 0.20
    low = store_all / 5 / 2
    while low >= floor:
        points.append(int(low))
        low /= 2
    return [p for p in points if floor <= p <= budget]


def _measure(graph: Graph, schedule: Schedule) -> Metrics:
    result = simulate(graph, schedule)
    if result.metrics is None:
        raise RecursionBug(f"internal error: the recursion produced an invalid schedule: {result.error}")
    return result.metrics


def _result(graph: Graph, schedule: Schedule, metrics: Metrics, info: dict[str, Any], started: float) -> StrategyResult:
    info["peak (values)"] = unit_peak_values(graph, schedule)
    info["schedule seconds"] = round(time.perf_counter() - started, 4)
    return StrategyResult(schedule, info, None)
