"""The worker pools: hangs are killed, crashes are rows, Ctrl-C stops the workers.

The functions the workers run are defined here (module level, so workers can import
them): they really abort, really sleep, really return.
"""

from __future__ import annotations

import os
import time

import pytest

from remat_cli.executors import Event, LocalExecutor, Outcome, describe_exit, run_isolated


def square_or_misbehave(x: int) -> int:
    """-1 aborts the process (SIGABRT), -2 hangs, -3 raises; anything else is squared."""
    if x == -1:
        os.abort()
    if x == -2:
        time.sleep(600)
    if x == -3:
        raise ValueError("bad item")
    return x * x


def pid_of_worker(_: int) -> int:
    time.sleep(0.05)
    return os.getpid()


def may_fork_a_second_process(_: int) -> tuple[bool, bool]:
    """In the worker: (whether it is a daemon, whether treewidth may fork there)."""
    import multiprocessing

    from remat_cli.strategies.treewidth import _Forked

    return multiprocessing.current_process().daemon, _Forked.possible()


def _done(events: list[Event]) -> dict[int, Outcome]:
    out: dict[int, Outcome] = {}
    for e in events:
        if e.kind == "done":
            assert e.index not in out, "every item is answered once"
            assert e.outcome is not None
            out[e.index] = e.outcome
    return out


@pytest.mark.parametrize("jobs", [1, 2])
def test_crash_hang_and_exception_become_outcomes_and_the_rest_completes(jobs: int) -> None:
    items = [1, -1, 2, -2, 3, -3, 4, 5]
    # a generous limit: on a loaded machine a worker's start-up alone once took 1.5 s
    events = list(LocalExecutor(jobs, timeout=4.5).run(square_or_misbehave, items))
    done = _done(events)
    assert sorted(done) == list(range(len(items)))
    starts = [e.index for e in events if e.kind == "start"]
    assert sorted(starts) == list(range(len(items)))
    for i, x in enumerate(items):
        o = done[i]
        if x == -1:
            assert o.failure == "crash" and "SIGABRT" in o.message
        elif x == -2:
            assert o.failure == "timeout" and "4.5 s" in o.message
        elif x == -3:
            assert o.failure == "error" and "ValueError: bad item" in o.message
        else:
            assert o.failure is None and o.value == x * x


def test_workers_are_reused_and_bounded_by_jobs() -> None:
    pids = [o.value for o in _done(list(LocalExecutor(2).run(pid_of_worker, list(range(12))))).values()]
    assert len(set(pids)) <= 2
    assert os.getpid() not in pids


def test_should_stop_ends_the_run_and_kills_running_work() -> None:
    started = time.monotonic()
    seen: list[Event] = []
    gen = LocalExecutor(2, timeout=None).run(square_or_misbehave, [-2, -2, -2, 1], lambda: len(seen) >= 2)
    for e in gen:
        seen.append(e)
    assert time.monotonic() - started < 60  # the sleeping workers did not hold the run
    assert not any(e.kind == "done" for e in seen)


def test_closing_the_generator_kills_workers() -> None:
    gen = LocalExecutor(1).run(pid_of_worker, [0, 1, 2])
    first = next(gen)
    assert first.kind == "start"
    gen.close()  # like --fail-fast breaking out of the loop


def test_run_isolated_reports_value_crash_and_timeout() -> None:
    assert run_isolated(square_or_misbehave, 7, 30) == Outcome(value=49)
    crash = run_isolated(square_or_misbehave, -1, 30)
    assert crash.failure == "crash" and "SIGABRT" in crash.message
    hang = run_isolated(square_or_misbehave, -2, 1.0)
    assert hang.failure == "timeout"


def test_describe_exit() -> None:
    assert describe_exit(-11) == "signal SIGSEGV"
    assert describe_exit(3) == "exit status 3"
    assert describe_exit(None) == "an unknown cause"


def test_describe_is_a_fact_the_report_renders() -> None:
    """Core hands up typed facts (issue 12): the worker count stays a number until say()."""
    from remat_cli.executors import DaskExecutor
    from remat_cli.units import Fact, Phrase, say

    many = LocalExecutor(1234).describe()
    assert isinstance(many, Phrase) and many.args == (Fact(1234, "count"),)
    assert say(many) == "1,234 local workers"
    assert say(LocalExecutor(1).describe()) == "1 local worker"
    assert say(DaskExecutor("tcp://10.0.0.5:8786").describe()) == "dask cluster at tcp://10.0.0.5:8786"


def test_workers_with_a_spare_core_may_use_it() -> None:
    """Twice as many jobs as items: the workers are not daemons, so a plan in one may fork
    its second process (treewidth's gate allows it, and auto's, which asks the same);
    otherwise they are daemons and plan in one process."""
    for jobs, items, spare in ((2, 1, True), (4, 2, True), (2, 2, False), (3, 2, False), (1, 1, False)):
        outcomes = _done(list(LocalExecutor(jobs).run(may_fork_a_second_process, list(range(items))))).values()
        assert [o.value for o in outcomes] == [(not spare, spare)] * items, (jobs, items)
