"""The simulator's faster whole-array replay (one radix sort of the events by node, graphs
of at most 2^16 nodes) judges every schedule as the code it replaced did
(tests/simulate_reference.py, as of 9f4c28d): the same metrics, peak step, per-step
memory and first invalid step, for valid schedules with frees, recomputations and
evictions under budgets (the treewidth recursion's runs, store-all, random passes), long
enough for the array path, and for the same schedules broken in every way the replay
checks (a step dropped, doubled, flipped or moved, a node id out of range, an unknown
step kind, a target never computed)."""

from __future__ import annotations

import importlib
import random

import numpy as np
import simulate_reference as reference
from graphgen import tied_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli import generators as G
from remat_cli.algorithms import decompose as D
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE, FREE, Schedule
from remat_cli.strategies import treewidth
from remat_cli.strategies.store_all import store_all_schedule

sim = importlib.import_module("remat_cli.simulate")  # the module (the package exports its function)

SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BREAKS = ("none", "drop", "dup", "flip", "swap", "range", "kind", "target")


def _same(g: Graph, schedule: Schedule) -> bool:
    """Assert the simulator and the reference agree on ``schedule``; whether it is valid."""
    for per_step in (False, True):
        new = sim.simulate(g, schedule, per_step=per_step)
        old = reference.simulate(g, schedule, per_step=per_step)
        assert new.metrics == old.metrics
        assert new.error == old.error
        assert (new.memory is None) == (old.memory is None)
        if old.memory is not None:
            assert new.memory.tolist() == old.memory.tolist()
        if len(schedule):
            fast, slow = sim._replay_arrays(g, schedule, per_step), reference._replay_arrays(g, schedule, per_step)
            assert (fast is None) == (slow is None)
            if slow is not None:
                assert fast[:2] == slow[:2]
                assert (fast[2] is None and slow[2] is None) or fast[2].tolist() == slow[2].tolist()
    return sim.simulate(g, schedule).valid


def _random_passes(g: Graph, rng: random.Random) -> list[tuple[int, int]]:
    """A valid schedule with recomputations: passes over a topological order, computing
    what is ready and freeing at random."""
    preds = g.pred_lists
    resident = [False] * g.n
    steps: list[tuple[int, int]] = []
    for _ in range(rng.randint(1, 4)):
        for v in g.topo.tolist():
            if resident[v]:
                if rng.random() >= 0.3:
                    continue
                steps.append((FREE, v))
                resident[v] = False
            if all(resident[u] for u in preds[v]):
                steps.append((COMPUTE, v))
                resident[v] = True
                for u in [u for u in range(g.n) if resident[u] and u != v and rng.random() < 0.2]:
                    steps.append((FREE, u))
                    resident[u] = False
    return steps


def _long(schedule: Schedule) -> list[tuple[int, int]]:
    """``schedule``, everything it leaves resident freed, then ``schedule`` again, and so on
    to at least 2 × ``ARRAY_STEPS`` steps (the array path): valid if ``schedule`` is."""
    steps = list(zip(schedule.ops.tolist(), schedule.nodes.tolist()))
    resident: set[int] = set()
    for op, v in steps:
        (resident.add if op == COMPUTE else resident.discard)(v)
    block = steps + [(FREE, v) for v in sorted(resident)]
    out = list(steps)
    while block and len(out) < 2 * sim.ARRAY_STEPS:
        out = block + out
    return out


def _broken(g: Graph, steps: list[tuple[int, int]], rng: random.Random, how: str) -> list[tuple[int, int]]:
    steps = list(steps)
    if how == "none" or not steps:
        return steps
    k = rng.randrange(len(steps))
    if how == "drop":
        del steps[k]
    elif how == "dup":
        steps.insert(k, steps[k])
    elif how == "flip":
        steps[k] = (FREE if steps[k][0] == COMPUTE else COMPUTE, steps[k][1])
    elif how == "swap":
        j = rng.randrange(len(steps))
        steps[k], steps[j] = steps[j], steps[k]
    elif how == "range":
        steps[k] = (steps[k][0], rng.choice([-1, g.n, g.n + 5]))
    elif how == "kind":
        steps[k] = (rng.choice([2, 7]), steps[k][1])
    else:  # every compute of one target left out (and its frees)
        t = int(g.targets[rng.randrange(g.targets.size)]) if g.targets.size else steps[k][1]
        steps = [s for s in steps if s[1] != t]
    return steps


def _schedule(steps: list[tuple[int, int]]) -> Schedule:
    ops = np.asarray([op for op, _ in steps], dtype=np.int8)
    nodes = np.asarray([v for _, v in steps], dtype=np.int32)
    return Schedule(ops, nodes)


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(4, 40),
    st.integers(0, 10_000),
    st.sampled_from(["bare", "budgeted", "cached", "store-all", "passes"]),
    st.sampled_from(BREAKS),
)
def test_simulator_is_the_reference(kind: str, n: int, seed: int, source: str, how: str) -> None:
    """Schedules of the recursion (bare; cacheless and cached at a budget between the lower
    bound and the store-all peak: evictions and recomputations), store-all and random
    passes, repeated to reach the array path, intact or broken: the same verdict and figures."""
    g = tied_graph(kind, n, seed)
    rng = random.Random(seed)
    if source == "store-all":
        base = store_all_schedule(g)[0]
    elif source == "passes":
        base = _schedule(_random_passes(g, rng))
    else:
        sep = D.separator_tree(g, D.tree_decomposition(g))
        sa = sim.simulate(g, store_all_schedule(g)[0]).metrics.peak_bytes
        limit = None if source == "bare" else rng.randint(max(g.lb - g.fixed_mem, 0), max(sa - g.fixed_mem, 0))
        base = treewidth.recursive_schedule(g, sep, limit, cache=source == "cached", eager=rng.random() < 0.5)[0]
    assert _same(g, base) or source == "passes"  # (random passes may miss a target)
    for steps in (_long(base), list(zip(base.ops.tolist(), base.nodes.tolist()))):
        schedule = _schedule(_broken(g, steps, rng, how))
        valid = _same(g, schedule)
        assert valid or how != "none" or source == "passes"


def test_grid_schedules_take_the_radix_path_and_agree() -> None:
    """A long bare recursion on a grid training graph (the array path) and the same
    schedule broken deep inside: the same outcome."""
    g = tied_graph("grid", 120, 1)
    sep = D.separator_tree(g, D.tree_decomposition(g))
    bare = treewidth.recursive_schedule(g, sep, None)[0]
    assert len(bare) >= 10 * sim.ARRAY_STEPS and _same(g, bare)
    steps = list(zip(bare.ops.tolist(), bare.nodes.tolist()))
    rng = random.Random(3)
    verdicts = {how: [_same(g, _schedule(_broken(g, steps, rng, how))) for _ in range(5)] for how in BREAKS[1:]}
    assert not any(verdicts["range"] + verdicts["kind"] + verdicts["target"])
    assert sum(map(sum, verdicts.values())) < 10  # most breaks are caught (a dropped free is not one)


def test_graphs_over_16_bit_ids_keep_the_searched_path() -> None:
    """Above 2^16 nodes the ids do not fit the radix keys: the step sort and search, the
    same outcome, valid or not."""
    n = (1 << 16) + 10
    g = G.chain(n)
    steps = [(COMPUTE, 0)] + [s for v in range(1, n) for s in ((COMPUTE, v), (FREE, v - 1))]
    assert _same(g, _schedule(steps))
    rng = random.Random(5)
    for how in ("drop", "dup", "flip", "range", "kind"):
        _same(g, _schedule(_broken(g, steps, rng, how)))
    assert not _same(g, _schedule(steps[:100] + [(FREE, 40)] + steps[100:]))
