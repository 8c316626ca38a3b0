"""The simulator's whole-array replay (long schedules) gives exactly what the step-by-step
replay gives: the same metrics, peak step and per-step memory for every valid schedule,
and no answer (the step-by-step replay then names the first broken rule) for every
invalid one."""

from __future__ import annotations

import importlib
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule
from tests.conftest import raw_dags, to_schedule
from tests.test_simulate import CORRUPTIONS, complete_store_all_steps, corrupt_steps, random_valid_steps

sim = importlib.import_module("remat_cli.simulate")  # the module (the package exports its function)


def _agree(g, schedule: Schedule) -> None:
    for per_step in (False, True):
        slow = sim._replay_steps(g, schedule, per_step)
        fast = sim._replay_arrays(g, schedule, per_step) if len(schedule) else None
        if fast is None:
            assert len(schedule) == 0 or (slow.error is not None and slow.error.step < len(schedule))
            continue
        got = sim._finish(g, schedule, *fast)
        assert got.metrics == slow.metrics
        assert got.error == slow.error
        if per_step:
            assert got.memory.tolist() == slow.memory.tolist()
        assert sim.simulate(g, schedule, per_step=per_step).metrics == slow.metrics


@settings(max_examples=150, deadline=None)
@given(raw_dags(), st.integers(0, 10**6), st.booleans())
def test_array_replay_equals_step_replay(raw, seed, corrupt):
    g = raw.build()
    steps = complete_store_all_steps(raw) + random_valid_steps(raw, seed)
    if corrupt and steps:
        rng = random.Random(seed)
        steps = corrupt_steps(steps, rng, rng.choice(CORRUPTIONS))
    _agree(g, to_schedule(g, steps))
    _agree(g, to_schedule(g, random_valid_steps(raw, seed + 1)))


def test_array_replay_is_used_for_long_schedules_and_names_nothing_itself():
    """A long valid schedule takes the array path; one with a bad step deep inside is
    named by the step-by-step replay (the same error as before)."""
    n = 300
    g = Graph.from_arrays(
        ids=[str(i) for i in range(n)],
        ops=["x"] * n,
        kinds=[""] * n,
        mem=np.arange(1, n + 1, dtype=np.int64),
        cost=np.ones(n),
        src=np.arange(n - 1),
        dst=np.arange(1, n),
        workspace=np.full(n, 7, dtype=np.int64),
    )
    steps = [(COMPUTE, 0)] + [s for v in range(1, n) for s in ((COMPUTE, v), (FREE, v - 1))]
    good = Schedule.from_steps(steps)
    assert len(good) >= sim.ARRAY_STEPS and sim._replay_arrays(g, good, False) is not None
    m = sim.simulate(g, good).metrics
    assert m.peak_bytes == (n - 1) + n + 7 and m.peak_step == len(steps) - 2
    _agree(g, good)
    bad = Schedule.from_steps(steps[:200] + [(FREE, 150)] + steps[200:])
    assert sim._replay_arrays(g, bad, False) is None
    r = sim.simulate(g, bad)
    assert r.error is not None and r.error.step == 200 and "not resident" in r.error.reason
