"""treewidth's and pathwidth's strategy body with its second process started right after the
bare recursion (before the bare run is measured and the cacheless budgeted run is made;
below ``LARGE_GRAPH_NODES``) gives the plans of the body it replaced (tests/treewidth_plan_reference.py): the same
schedule, metrics and info (timings aside), or the same failure and message, at budgets
from below the lower bound to above the store-all peak, on a graph planned the first time
and again (the bare run kept on the graph), with the second process on (``PARALLEL_NEEDED``
lowered so small graphs take that path) and off. Every plan goes through the simulator."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import treewidth_plan_reference as reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.planner import store_all_peak
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth
from remat_cli.strategies.base import RunContext
from remat_cli.training import checkmate_training_graph
from remat_cli.units import say

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _graph(kind: str, n: int, seed: int) -> Graph:
    """A graph with random sizes (zeros included: ties) and costs; odd seeds give the
    training graph. A new object per call: the two bodies keep their runs on the graph."""
    if kind == "grid":
        g = G.grid(3, max(2, n // 3))
    elif kind == "pkt":
        g = G.partial_ktree(n, 2 + seed % 2, seed=seed)
    elif kind == "diamonds":
        g = G.diamonds(max(1, n // 4), width=2 + seed % 2)
    else:
        g = G.random_dag(n, p=0.2, seed=seed)
    rng = np.random.default_rng(seed)
    g = g.with_arrays(mem=rng.integers(0, 6, g.n), cost=rng.choice([0.0, 1.0, 2.0, 3.5], g.n))
    return checkmate_training_graph(g) if seed % 2 else g


def _sep(g: Graph, tree: str):
    if tree == "tree":
        return D.separator_tree(g, D.tree_decomposition(g))
    return D.path_separator_tree(g, D.path_decomposition(g, td=D.tree_decomposition(g, methods=("min-degree",))))


def _outcome(module, g: Graph, sep, budget: int | None, parallel: bool):
    """The plan's steps, metrics and info (timings left out), or the failure."""
    try:
        result = module.plan_over_separator_tree(
            g, sep, budget, module.DecompositionOptions(), RunContext(parallel=parallel), kind="tree (test)", decompose_seconds=0.0
        )
    except NoPlanError as e:
        return ("no plan", str(e), e.min_budget)
    sim = simulate(g, result.schedule)
    assert sim.valid, sim.error
    assert budget is None or sim.metrics.peak_bytes <= budget
    info = {k: say(v) for k, v in result.info.items() if "second" not in k}
    return (result.schedule.ops.tolist(), result.schedule.nodes.tolist(), sim.metrics.cost, sim.metrics.peak_bytes, info)


@SETTINGS
@given(
    st.sampled_from(["grid", "pkt", "diamonds", "dag"]),
    st.integers(8, 36),
    st.integers(0, 10_000),
    st.sampled_from(["tree", "path"]),
    st.booleans(),
    st.booleans(),
)
def test_plan_is_the_reference(kind: str, n: int, seed: int, tree: str, parallel: bool, scale: bool) -> None:
    """``scale``: scale mode (one ladder point; the second process starts once the bare
    and the budgeted run are made, as before)."""
    mp = pytest.MonkeyPatch()
    for module in (treewidth, reference):
        mp.setattr(module, "PARALLEL_NEEDED", 1)
        if scale:
            mp.setattr(module, "LARGE_GRAPH_NODES", 1)
    try:
        g_new, g_old = _graph(kind, n, seed), _graph(kind, n, seed)
        sep_new, sep_old = _sep(g_new, tree), _sep(g_old, tree)
        peak = store_all_peak(g_new)
        budgets = [max(0, int(g_new.lb) - 1), int(0.3 * peak), int(0.5 * peak), int(0.7 * peak), peak + 1, None]
        for budget in budgets:  # the first plans the graph afresh, the next ones reuse its runs
            got = _outcome(treewidth, g_new, sep_new, budget, parallel)
            assert got == _outcome(reference, g_old, sep_old, budget, parallel), budget
    finally:
        mp.undo()


_DIES_MID_PLAN = """
import os, sys, time
from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.planner import store_all_peak
from remat_cli.strategies import treewidth
from remat_cli.strategies.base import RunContext
from remat_cli.training import checkmate_training_graph

treewidth.PARALLEL_NEEDED = 1
real = treewidth.recursive_schedule


def budgeted_run_dies(graph, sep, limit=None, **kw):
    if kw.get("stop_over"):  # the budgeted run: the second process has started by now
        print("forked", flush=True)
        time.sleep(1.0)  # it makes its pass and sends it, then waits for the bare peak
        os._exit(0)  # this process dies (as if killed) before it writes that peak
    return real(graph, sep, limit, **kw)


treewidth.recursive_schedule = budgeted_run_dies
g = checkmate_training_graph(G.grid(3, 8))
sep = D.separator_tree(g, D.tree_decomposition(g))
budget = store_all_peak(g) // 2
treewidth.plan_over_separator_tree(
    g, sep, budget, treewidth.DecompositionOptions(), RunContext(), kind="tree (test)", decompose_seconds=0.0
)
"""


@pytest.mark.skipif(not os.path.isdir("/proc") or not hasattr(os, "fork"), reason="fork and /proc (Linux)")
def test_the_second_process_ends_when_this_one_dies_before_it_is_told_the_bare_peak() -> None:
    """The second process, started from the bare run's steps, waits for this process to
    write the bare run's peak; killed before that, this process must not leave it waiting
    (spinning) for ever: it ends within seconds."""
    proc = subprocess.Popen([sys.executable, "-c", _DIES_MID_PLAN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "forked"
        children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == proc.pid]
        assert children, "no second process was started"
        assert proc.wait(timeout=60) == 0
        end = time.monotonic() + 20
        while time.monotonic() < end and any(_alive(c) for c in children):
            time.sleep(0.05)
        left = [c for c in children if _alive(c)]
        for c in left:
            os.kill(c, signal.SIGKILL)
        assert not left, "the second process outlived its parent"
    finally:
        proc.kill()
        proc.wait()


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
