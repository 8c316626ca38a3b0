"""prune_unread's look ahead on long compute sequences (one stable sort by node says whether
any compute is unread; when none is, the sequence is the answer) returns what the backward
pass alone returned (the frozen copy in tests/memlimit_reference.py), on sequences of at
least ``BY_NODE_COMPUTES`` computes: the treewidth recursion's (nothing unread), the same
with unread computes added, repeated store-all passes (sinks unread before their last
compute), shuffled and cut sequences (reads before any compute); and each answer replays
validly where the sequence was valid. ``prune_and_lay_out`` (the memory-limit pass's
clean-up, one sort by node for the look ahead and the layout) lays out the same steps as
``schedule_from_sequence`` of that answer, the reference's where the sequence is valid."""

from __future__ import annotations

import random

import memlimit_reference as reference
from graphgen import tied_graph
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat_cli.algorithms import decompose as D
from remat_cli.algorithms import segments
from remat_cli.algorithms.segments import BY_NODE_COMPUTES, prune_unread, schedule_from_sequence
from remat_cli.simulate import simulate
from remat_cli.strategies import treewidth

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _long(seq: list[int], rng: random.Random) -> list[int]:
    """``seq`` repeated to more than ``BY_NODE_COMPUTES`` computes (each copy valid after the
    last: it recomputes what it reads)."""
    out = list(seq)
    while seq and len(out) < BY_NODE_COMPUTES + 100:
        out += seq
    return out


@SETTINGS
@given(
    st.sampled_from(["grid", "skip", "pkt", "diamonds", "dag"]),
    st.integers(6, 60),
    st.integers(0, 10_000),
    st.sampled_from(["bare", "passes", "extra", "shuffled", "cut"]),
    st.booleans(),
)
def test_prune_unread_is_the_reference_on_long_sequences(kind: str, n: int, seed: int, how: str, short: bool) -> None:
    """``short``: the look ahead from 16 computes on (so that it also sees sequences that
    are not repeated, where nothing is unread), else long sequences at the tool's threshold."""
    g = tied_graph(kind, n, seed)
    rng = random.Random(seed)
    grow = (lambda seq, rng: seq) if short else _long
    if how == "passes":
        seq = grow(g.topo[g.needed[g.topo]].tolist(), rng)
    else:
        sep = D.separator_tree(g, D.tree_decomposition(g))
        seq = grow(treewidth.recursive_schedule(g, sep, None)[0].compute_nodes.tolist(), rng)
    valid = True
    if how == "extra":  # computes nobody reads, here and there
        for _ in range(rng.randint(1, 20)):
            k = rng.randrange(len(seq) + 1)
            seq.insert(k, seq[k - 1] if k and rng.random() < 0.5 else rng.choice(g.needed_nodes.tolist()))
        valid = False  # (an inserted compute may read what is not there)
    elif how == "shuffled":
        k = rng.randrange(len(seq))
        part = seq[k : k + 50]
        rng.shuffle(part)
        seq[k : k + 50] = part
        valid = False
    elif how == "cut":
        del seq[: rng.randint(1, 30)]
        valid = False
    if short:
        mp = pytest.MonkeyPatch()
        mp.setattr(segments, "BY_NODE_COMPUTES", 16)
    else:
        assert len(seq) >= BY_NODE_COMPUTES
    try:
        out = prune_unread(g, seq)
        laid = segments.prune_and_lay_out(g, seq)  # (the clean-up: one sort for both)
        apart = schedule_from_sequence(g, out)
    finally:
        if short:
            mp.undo()
    assert out == reference.prune_unread(g, seq)
    assert _steps(laid) == _steps(apart)
    if valid:
        assert _steps(laid) == _steps(reference.schedule_from_sequence(g, out))
        assert simulate(g, laid).metrics is not None


def _steps(s) -> tuple[list[int], list[int]]:
    return s.ops.tolist(), s.nodes.tolist()


def test_the_look_ahead_decides_both_ways() -> None:
    """The look ahead answers alone where nothing is unread (the bare recursion), and leaves
    the pass to decide where a compute is unread (a sink computed twice)."""
    g = tied_graph("grid", 150, 1)
    sep = D.separator_tree(g, D.tree_decomposition(g))
    seq = treewidth.recursive_schedule(g, sep, None)[0].compute_nodes.tolist()
    assert len(seq) >= BY_NODE_COMPUTES
    assert segments._all_read(g, np.asarray(seq, dtype=np.int64))
    assert prune_unread(g, seq) == seq == reference.prune_unread(g, seq)
    sink = next(v for v in g.targets.tolist() if not g.succ_lists[v])
    twice = seq + [sink]  # the sink's earlier compute is now unread
    assert not segments._all_read(g, np.asarray(twice, dtype=np.int64))
    assert prune_unread(g, twice) == reference.prune_unread(g, twice) != twice
