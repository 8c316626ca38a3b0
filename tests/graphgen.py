"""Small generated graphs the property tests draw from (one generator, several test files)."""

from __future__ import annotations

import numpy as np

from remat_cli import generators as G
from remat_cli.graph import Graph
from remat_cli.training import checkmate_training_graph


def forward_graph(kind: str, n: int, seed: int, *, grid_rows: int = 3, p: float = 0.3) -> Graph:
    """A forward graph of about ``n`` nodes: a chain or skip chain with random sizes and
    costs (1–8), a ``grid_rows``-row grid, or a random DAG with edge probability ``p``."""
    rng = np.random.default_rng(seed)
    mem, cost = rng.integers(1, 9, n), rng.integers(1, 9, n).astype(float)
    return {
        "chain": lambda: G.chain(n, mem=mem, cost=cost),
        "skip": lambda: G.skip_chain(n, skip=3, mem=mem, cost=cost),
        "grid": lambda: G.grid(grid_rows, max(2, n // grid_rows)),
        "dag": lambda: G.random_dag(n, p, seed=seed),
    }[kind]()


def shape(kind: str, n: int, seed: int, *, p: float = 0.3) -> Graph:
    """A bare forward shape of about ``n`` nodes (the caller gives sizes and costs): a
    chain, a skip chain (skips of 2–4 by ``seed``), n // 4 diamonds, or a random DAG with
    edge probability ``p``."""
    if kind == "chain":
        return G.chain(n)
    if kind == "skip":
        return G.skip_chain(n, skip=2 + seed % 3)
    if kind == "diamonds":
        return G.diamonds(max(1, n // 4))
    return G.random_dag(n, p=p, seed=seed)


def training_graph(kind: str, n: int, seed: int, *, grid_rows: int = 3, p: float = 0.3) -> Graph:
    """The training graph of :func:`forward_graph`."""
    return checkmate_training_graph(forward_graph(kind, n, seed, grid_rows=grid_rows, p=p))


def tiny_training_graph(n: int, seed: int) -> Graph:
    """A training graph of at most 10 nodes (brute force's limit): a chain or a random DAG
    of (n - 1) // 2 forward nodes with random sizes and costs (1–5)."""
    rng = np.random.default_rng(seed)
    k = max(1, (n - 1) // 2)
    fwd = G.random_dag(k, 0.6, seed=seed) if seed % 2 else G.chain(k)
    fwd = G.from_edges(k, np.stack(fwd.edges(), axis=1), mem=rng.integers(1, 6, k), cost=rng.integers(1, 6, k).astype(float))
    return checkmate_training_graph(fwd)


def tied_graph(kind: str, n: int, seed: int) -> Graph:
    """A small graph with random sizes (zeros included: ties) and costs; odd seeds give the
    training graph: a 3-row grid, a skip chain, a partial k-tree, diamonds or a random DAG
    (``kind``), for the tests that compare a faster strategy with its frozen copy."""
    if kind == "grid":
        g = G.grid(3, max(2, n // 3))
    elif kind == "skip":
        g = G.skip_chain(n, skip=2 + seed % 3)
    elif kind == "pkt":
        g = G.partial_ktree(n, 2 + seed % 2, seed=seed)
    elif kind == "diamonds":
        g = G.diamonds(max(1, n // 4), width=2 + seed % 2)
    else:
        g = G.random_dag(n, p=0.25, seed=seed)
    rng = np.random.default_rng(seed)
    g = g.with_arrays(mem=rng.integers(0, 6, g.n), cost=rng.choice([0.0, 1.0, 2.0, 3.5], g.n))
    return checkmate_training_graph(g) if seed % 2 else g
