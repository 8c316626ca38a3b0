"""The simulator agrees with an independent replay and rejects broken schedules at the right step."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from remat_cli.errors import InvalidScheduleError
from remat_cli.graph import Graph, NodeSpec
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.simulate import simulate, require_valid
from tests.conftest import named_steps, raw_dags, reference_simulate, to_schedule


def random_valid_steps(raw, seed: int) -> list[tuple[str, str]]:
    """A random valid schedule with recomputation: compute ready nodes, free at random, repeat."""
    rng = random.Random(seed)
    g = raw.build()
    by_id = {nd.id: nd for nd in raw.nodes}
    resident: set[str] = set()
    steps: list[tuple[str, str]] = []
    order = [g.ids[v] for v in g.topo]
    for _ in range(rng.randint(1, 3)):  # several passes: later passes recompute
        for v in order:
            if v in resident:
                if rng.random() < 0.3:
                    steps.append(("free", v))
                    resident.discard(v)
                else:
                    continue
            missing = [u for u in by_id[v].inputs if u not in resident]
            if missing:
                continue
            steps.append(("compute", v))
            resident.add(v)
            for u in list(resident):
                if u != v and rng.random() < 0.25:
                    steps.append(("free", u))
                    resident.discard(u)
    # finish: compute everything in order once more so every target is surely computed
    for v in order:
        if v in resident:
            continue
        if all(u in resident for u in by_id[v].inputs):
            steps.append(("compute", v))
            resident.add(v)
    return steps


def complete_store_all_steps(raw) -> list[tuple[str, str]]:
    g = raw.build()
    return [("compute", g.ids[v]) for v in g.topo]


@given(raw_dags(), st.integers(0, 10**6))
def test_peak_and_cost_match_reference(raw, seed):
    g = raw.build()
    steps = complete_store_all_steps(raw) + random_valid_steps(raw, seed)
    # computing everything once then random extra steps: the tail may be invalid
    # (recomputing something resident); the reference decides either way
    peak, cost, bad = reference_simulate(raw, steps)
    result = simulate(g, to_schedule(g, steps), per_step=True)
    if bad is None:
        assert result.valid
        m = result.metrics
        assert m.peak_bytes == peak
        assert m.cost == pytest.approx(cost)
        assert m.computes == sum(1 for op, _ in steps if op == "compute")
        distinct = len({v for op, v in steps if op == "compute"})
        assert m.recomputations == m.computes - distinct
        assert m.steps == len(steps)
        assert result.memory.max(initial=raw.fixed) == m.peak_bytes
        assert m.overhead == pytest.approx(cost / g.base_cost - 1) if g.base_cost else True
    else:
        assert not result.valid
        assert result.error.step == bad


@given(raw_dags(), st.integers(0, 10**6))
def test_random_valid_schedules_agree(raw, seed):
    g = raw.build()
    steps = random_valid_steps(raw, seed)
    peak, cost, bad = reference_simulate(raw, steps)
    result = simulate(g, to_schedule(g, steps))
    assert result.valid == (bad is None)
    if bad is None:
        assert result.metrics.peak_bytes == peak
        assert result.metrics.cost == pytest.approx(cost)
    else:
        assert result.error.step == bad


CORRUPTIONS = ("drop", "dup", "flip", "swap")


def corrupt_steps(steps: list[tuple[str, str]], rng: random.Random, how: str) -> list[tuple[str, str]]:
    """``steps`` with one random step dropped, doubled, flipped (compute <-> free) or swapped
    with another (``how``); a copy."""
    steps = list(steps)
    k = rng.randrange(len(steps))
    if how == "drop":
        del steps[k]
    elif how == "dup":
        steps.insert(k, steps[k])
    elif how == "flip":
        op, v = steps[k]
        steps[k] = ("free" if op == "compute" else "compute", v)
    else:
        j = rng.randrange(len(steps))
        steps[k], steps[j] = steps[j], steps[k]
    return steps


@given(raw_dags(max_nodes=10), st.integers(0, 10**6), st.sampled_from(CORRUPTIONS))
def test_corrupted_schedules_rejected_at_first_bad_step(raw, seed, how):
    g = raw.build()
    from remat_cli.strategies.store_all import store_all_schedule

    schedule, _ = store_all_schedule(g)
    steps = named_steps(g, schedule)
    assert reference_simulate(raw, steps)[2] is None
    steps = corrupt_steps(steps, random.Random(seed), how)
    _, _, bad = reference_simulate(raw, steps)
    result = simulate(g, to_schedule(g, steps))
    if bad is None:
        assert result.valid
    else:
        assert not result.valid and result.error.step == bad
        with pytest.raises(InvalidScheduleError, match=f"step {bad}"):
            require_valid(g, to_schedule(g, steps))


def _tiny() -> Graph:
    return Graph.from_nodes(
        [NodeSpec("a", mem=10, cost=1), NodeSpec("b", ["a"], mem=20, cost=2, workspace=5), NodeSpec("c", ["a", "b"], mem=1, cost=3)],
        fixed_mem=100,
    )


def test_reasons_name_the_rule_broken():
    g = _tiny()
    a, b, c = 0, 1, 2
    cases = {
        "input 'a' is not resident": [(COMPUTE, b)],
        "'a': it is already resident": [(COMPUTE, a), (COMPUTE, a)],
        "free 'b': it is not resident": [(COMPUTE, a), (FREE, b)],
        "target 'c' is never computed": [(COMPUTE, a), (COMPUTE, b)],
        "node index 9 is not in the graph": [(COMPUTE, 9)],
    }
    for reason, steps in cases.items():
        result = simulate(g, Schedule.from_steps(steps))
        assert reason in result.error.reason, (reason, result.error)
    ok = simulate(g, Schedule.from_steps([(COMPUTE, a), (COMPUTE, b), (COMPUTE, c), (FREE, a)]), per_step=True)
    assert ok.valid
    # fixed 100; a: 110; b: 100+10+20+5 = 135; c: 100+10+20+1 = 131; free a: 121
    assert ok.memory.tolist() == [110, 135, 131, 121]
    assert ok.metrics.peak_bytes == 135 and ok.metrics.peak_step == 1
    assert ok.metrics.cost == 6 and ok.metrics.overhead == 0


def test_overhead_counts_recomputation():
    g = _tiny()
    steps = [(COMPUTE, 0), (COMPUTE, 1), (FREE, 0), (COMPUTE, 0), (COMPUTE, 2)]
    m = require_valid(g, Schedule.from_steps(steps))
    assert m.recomputations == 1 and m.cost == 7 and m.overhead == pytest.approx(1 / 6)


def test_million_steps_replay():
    """Linear-time replay: a 10^6-step schedule runs (time is printed by the benchmark)."""
    n = 1000
    g = Graph.from_arrays(
        ids=[str(i) for i in range(n)],
        ops=["x"] * n,
        kinds=[""] * n,
        mem=np.ones(n, np.int64),
        cost=np.ones(n),
        src=np.arange(n - 1),
        dst=np.arange(1, n),
    )
    ops = np.tile(np.array([COMPUTE, FREE], np.int8), 500_000)
    nodes = np.repeat(np.arange(n, dtype=np.int32)[:1], 1_000_000)
    # compute/free node 0 500k times, then the chain once
    chain_ops = np.zeros(n, np.int8)
    sched = Schedule(np.concatenate([ops, chain_ops]), np.concatenate([nodes, np.arange(n, dtype=np.int32)]))
    m = require_valid(g, sched)
    assert m.steps == 1_000_000 + n and m.recomputations == 500_000 and m.peak_bytes == n
