"""Ctrl-C while auto's second process runs: exit 130, one line, no process left."""

from __future__ import annotations

import os
import time

import pytest
from graphgen import training_graph


_INTERRUPTED = """
import os, sys, time
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
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.decode().strip() == "remat: interrupted"
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no process of the group is left
