"""auto's second process, once its queue is done, polishes and improves its own best plan
speculatively (``auto._speculate``) while this process still runs a strategy; the final
passes here reuse those results where their input is that plan. These tests check that
the plan auto returns is exactly the plan made without a second process, whether the
speculation is used, unused, or fails. Every plan goes through the simulator (the planner
replays it)."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from graphgen import training_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_auto_runners_up import winner_pass_only

import remat_cli.strategies as registry
from remat_cli.algorithms import improve
from remat_cli.errors import NoPlanError
from remat_cli.planner import make_plan, store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import auto


def _hold_up_here(monkeypatch, seconds: float, until: Path | None = None) -> None:
    """greedy sleeps ``seconds`` first in this process (not in a one-process run), so
    that the second process takes every queued strategy, is done with its queue while
    this one still runs greedy, and speculates; with ``until`` (the log of improvement
    passes ended), it waits instead, ``seconds`` at most, until the second process has
    improved its plan (on a loaded machine its queue can take longer than any fixed sleep,
    and its results, sent by a thread, can reach this process after the pass has begun:
    this process then speculates too, seeing a queued strategy still running)."""
    parent = os.getpid()
    real = registry.fast_strategies
    slow = next(s for s in real() if s.name == "greedy")

    def begun() -> bool:
        return until is not None and until.exists() and any(p != str(parent) for p in until.read_text().split())

    def held(graph, budget, options, context):
        if os.getpid() == parent and context.parallel:
            end = time.perf_counter() + seconds
            while (until is None or not begun()) and time.perf_counter() < end:
                time.sleep(0.01 if until is not None else max(0.0, end - time.perf_counter()))
        return slow.solve(graph, budget, options, context)

    monkeypatch.setattr(registry, "fast_strategies", lambda: [replace(s, solve=held) if s is slow else s for s in real()])
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)


def _count_improvements(monkeypatch, log: Path) -> None:
    """Write the pid of each of auto's improvement passes (``replay=True``: treewidth's
    own pass does not replay) to ``log``, in whichever process it runs."""
    real = improve.improve_plan

    def counted(*args, **kwargs):
        if not kwargs.get("replay"):
            return real(*args, **kwargs)
        with log.open("a") as f:
            f.write(f"{os.getpid()}\n")
        try:
            return real(*args, **kwargs)
        finally:
            with log.with_suffix(".done").open("a") as f:  # (and when it ended)
                f.write(f"{os.getpid()}\n")

    monkeypatch.setattr(improve, "improve_plan", counted)


def _same_plan(two, one, g, budget: int) -> None:
    for plan in (two, one):
        m = simulate(g, plan.schedule).metrics
        assert m is not None and m.peak_bytes <= budget
        assert (m.cost, m.peak_bytes) == (plan.metrics.cost, plan.metrics.peak_bytes)
    assert two.schedule.ops.tolist() == one.schedule.ops.tolist()
    assert two.schedule.nodes.tolist() == one.schedule.nodes.tolist()
    for key in ("winner", "polished", "improved"):
        assert str(two.info.get(key)) == str(one.info.get(key)), key


# (kind, n, seed, ratio): the second process's plan wins; chain-dp's plan polished by the
# memory-limit pass, then improved / polished only / improved only (treewidth) / as made
CASES = [("skip", 12, 1, 0.6), ("skip", 12, 0, 0.4), ("skip", 12, 3, 0.7), ("chain", 12, 1, 0.5)]


@pytest.mark.parametrize("kind,n,seed,ratio", CASES)
def test_the_second_process_polishes_its_winning_plan_and_this_one_uses_it(monkeypatch, tmp_path, kind, n, seed, ratio):
    """Its passes run there (this process runs no improvement pass) and the plan is
    exactly the one-process plan, its polish and improvement facts included."""
    winner_pass_only(monkeypatch)  # (these tests count the winner's pass, which the second process may make ahead)
    g = training_graph(kind, n, seed, p=0.25)
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    one = make_plan(g, "auto", budget, {"parallel": False})
    assert one.info["winner"] in ("treewidth", "pathwidth", "chain-dp")  # queued: the second process's
    log = tmp_path / "improve.log"
    _hold_up_here(monkeypatch, 30.0, until=log.with_suffix(".done"))
    _count_improvements(monkeypatch, log)
    two = make_plan(g, "auto", budget, {"parallel": True})
    _same_plan(two, one, g, budget)
    pids = log.read_text().split()
    assert str(os.getpid()) not in pids and len(pids) == 1, pids  # made there, used here


def test_a_failed_speculation_is_made_here(monkeypatch, tmp_path):
    """Where the second process's passes fail, this process makes them itself: same plan."""
    winner_pass_only(monkeypatch)  # (these tests count the winner's pass, which the second process may make ahead)
    kind, n, seed, ratio = CASES[0]
    g = training_graph(kind, n, seed, p=0.25)
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    one = make_plan(g, "auto", budget, {"parallel": False})
    log = tmp_path / "improve.log"
    _hold_up_here(monkeypatch, 30.0, until=log.with_suffix(".done"))
    parent = os.getpid()
    real = improve.improve_plan

    def failing_there(*args, **kwargs):
        if os.getpid() != parent and kwargs.get("replay"):
            raise RuntimeError("the speculation fails")
        return real(*args, **kwargs)

    monkeypatch.setattr(improve, "improve_plan", failing_there)
    _count_improvements(monkeypatch, log)
    two = make_plan(g, "auto", budget, {"parallel": True})
    _same_plan(two, one, g, budget)
    assert log.read_text().split().count(str(parent)) == 1


def test_no_speculation_on_a_plan_this_process_improved_already(monkeypatch, tmp_path):
    """This process improves the best plan known while the second one is still busy
    (here: held up in treewidth until this process's improvement pass has ended); the
    second process then does not improve it again. On a loaded machine this process could
    reach treewidth before the second one had started and take it (the second one then
    ran the rest unheld and improved its own plan), and a fixed hold of 1 s could end
    before this process's pass: so greedy here waits until the second process is in
    treewidth, which waits for the pass (30 s at most each)."""
    winner_pass_only(monkeypatch)  # (these tests count the winner's pass, which the second process may make ahead)
    parent = os.getpid()
    real = registry.fast_strategies
    tw = next(s for s in real() if s.name == "treewidth")
    greedy = next(s for s in real() if s.name == "greedy")
    log, entered = tmp_path / "improve.log", tmp_path / "treewidth.entered"

    def wait_for(ready) -> None:
        end = time.perf_counter() + 30.0
        while not ready() and time.perf_counter() < end:
            time.sleep(0.01)

    def held(graph, budget, options, context):
        if os.getpid() != parent:
            entered.write_text("in treewidth")
            done = log.with_suffix(".done")
            wait_for(lambda: done.exists() and str(parent) in done.read_text().split())
        return tw.solve(graph, budget, options, context)

    def after_the_other_enters(graph, budget, options, context):
        if os.getpid() == parent and context.parallel:
            wait_for(entered.exists)
        return greedy.solve(graph, budget, options, context)

    swap = {tw.name: held, greedy.name: after_the_other_enters}
    monkeypatch.setattr(registry, "fast_strategies", lambda: [replace(s, solve=swap[s.name]) if s.name in swap else s for s in real()])
    monkeypatch.setattr(auto, "PARALLEL_NODES", 10)
    speculated: list[object] = []
    real_adopt = auto._Child.adopt_improve

    def adopt(self, fitting, best, memo, deadline):
        speculated.append(self.spec.get("speculating", ("unknown",))[0])
        return real_adopt(self, fitting, best, memo, deadline)

    monkeypatch.setattr(auto._Child, "adopt_improve", adopt)
    kind, n, seed, ratio = CASES[0]
    g = training_graph(kind, n, seed, p=0.25)
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    one = make_plan(g, "auto", budget, {"parallel": False})
    _count_improvements(monkeypatch, log)  # (after the one-process run: its pass is not waited for)
    two = make_plan(g, "auto", budget, {"parallel": True})
    _same_plan(two, one, g, budget)
    assert log.read_text().split() == [str(parent)]  # one pass, here, which the other process waited for
    assert speculated == [None]  # its best plan (treewidth's or chain-dp's) was improved here


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(["chain", "skip", "dag"]),
    n=st.integers(6, 16),
    seed=st.integers(0, 40),
    ratio=st.floats(0.3, 1.0),
    held=st.sampled_from([0.0, 0.3]),
)
def test_auto_plans_the_same_with_and_without_a_second_process(monkeypatch, kind, n, seed, ratio, held):
    """Whichever process runs what, and whether the speculation is used or not, auto's
    plan (or its failure) is the one-process one."""
    g = training_graph(kind, n, seed, p=0.25)
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    with monkeypatch.context() as m:
        _hold_up_here(m, held)
        plans = []
        for parallel in (False, True):
            try:
                plans.append(make_plan(g, "auto", budget, {"parallel": parallel}))
            except NoPlanError:
                plans.append(None)
    one, two = plans
    assert (one is None) == (two is None)
    if one is not None:
        _same_plan(two, one, g, budget)


def test_a_large_outcome_does_not_hold_up_the_second_process(monkeypatch):
    """The second process sends from a thread: an outcome larger than the pipe holds (a
    1k-node plan) no longer blocks it until this process reads, which it does only
    between its own strategies. Before, while this process was held up in greedy, the
    second process sat on treewidth's outcome, and this process then ran pathwidth and
    chain-dp itself; now the second process runs the three queued strategies. Same plan
    as one process."""
    from remat_cli.strategies.base import StrategyResult

    _hold_up_here(monkeypatch, 2.0)
    held = registry.fast_strategies

    def large(strategy):
        def solve(graph, budget, options, context):
            r = strategy.solve(graph, budget, options, context)
            return StrategyResult(r.schedule, {**r.info, "padding": "x" * 1_000_000}, r.keep)

        return replace(strategy, solve=solve)

    queued = ("treewidth", "pathwidth", "chain-dp")
    monkeypatch.setattr(registry, "fast_strategies", lambda: [large(s) if s.name in queued else s for s in held()])
    kind, n, seed, ratio = CASES[2]  # treewidth's plan fits (and wins)
    g = training_graph(kind, n, seed, p=0.25)
    budget = max(g.lb, int(ratio * store_all_peak(g)))
    labels: list[str] = []

    def heard(done, total, label):
        from remat_cli.units import say

        labels.append(say(label))

    two = make_plan(g, "auto", budget, {"parallel": True, "progress": heard})
    one = make_plan(g, "auto", budget, {"parallel": False})
    for name in queued:
        assert f"auto: {name} (second process)" in labels, labels
    _same_plan(two, one, g, budget)


_INTERRUPTED = """
import os, signal, sys, time
# as from a terminal, whatever the test runner's process ignored or blocked
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
from dataclasses import replace
from pathlib import Path
import remat_cli.strategies as registry
from remat_cli.strategies import auto
auto.PARALLEL_NODES = 10
real, flag, parent = registry.fast_strategies, Path(sys.argv[1]), os.getpid()
def slow(s):
    def solve(graph, budget, options, context):
        if os.getpid() != parent:
            flag.write_text("the second process runs " + s.name)
        time.sleep(60)
    return replace(s, solve=solve)
queued = ("treewidth", "pathwidth", "chain-dp")
registry.fast_strategies = lambda: [slow(s) if s.name in queued else s for s in real()]
stop = auto._Child.stop
def late_stop(self):  # the second process's own reaction to Ctrl-C shows first
    time.sleep(0.5)
    stop(self)
auto._Child.stop = late_stop
from remat_cli.cli import main
sys.argv = ["remat", "plan", sys.argv[2], "-s", "auto", "-b", "0.6x"]
main()
"""


def test_ctrl_c_stops_both_processes_with_one_line(tmp_path):
    """Ctrl-C (SIGINT to the whole process group) while the second process runs a queued
    strategy: exit 130, "remat: interrupted" and nothing else on stderr, no process left.
    Before, the second process printed "Process ForkProcess-1:" and a traceback."""
    import signal
    import subprocess
    import sys

    from remat_cli.loaders import remat_json

    graph = tmp_path / "g.json"
    graph.write_text(remat_json.dumps(training_graph("skip", 12, 1, p=0.25)))
    flag = tmp_path / "started"
    proc = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED, str(flag), str(graph)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not flag.exists() and proc.poll() is None:
        time.sleep(0.02)
    assert flag.exists(), proc.communicate(timeout=60)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say what each process of the group was doing
        ps = subprocess.run(["ps", "-g", str(proc.pid), "-o", "pid,ppid,stat,wchan:24,cmd:40"], capture_output=True, text=True)
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"not stopped 60 s after Ctrl-C; the flag said {flag.read_text()!r}:\n{ps.stdout}")
    assert proc.returncode == 130, stderr
    assert stderr.decode().strip() == "remat: interrupted"
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no process of the group is left
