"""Frozen copies of replaced code of the improvement pass, the references the faster code
must equal (tests/test_improve_same.py): remat_cli/algorithms/improve.py's ``_reevict`` and
segments.py's ``prune_unread`` as of 3da6409 (the same compute sequence, the same ``close``
set and the same work spent), ``_cover``'s greedy loop as of 79a3eaf (the same splits), and
``_cover`` as of 3dc89c0 (the same splits offered, in the same order: the same new sequence).
Not used by the tool."""

from __future__ import annotations

import math
from collections.abc import Sequence

from remat_cli.algorithms.improve import _copies, _Limits
from remat_cli.algorithms.segments import prune_unread as _prune_unread
from remat_cli.algorithms.segments import schedule_from_sequence
from remat_cli.graph import Graph
from remat_cli.schedule import COMPUTE
from remat_cli.simulate import simulate

__all__ = ["_reevict", "cover", "greedy_cover", "prune_unread"]

#: As in improve.py at that commit.
_MAX_FACTOR = 20
_R_NODES = 16
_REGROW_NODES = 16


def _reevict(
    graph: Graph,
    order: list[int],
    limit: int,
    score: str,
    limits: _Limits,
    weight: list[float] | None = None,
    linger: bool = False,
    close: set[int] | None = None,
) -> list[int] | None:
    """The compute sequence of replaying ``order`` (each node's inputs before it) within
    ``limit`` bytes, evicting by ``score`` with knowledge of every future use; None when
    it cannot fit (a compute finds nothing evictable), thrashes, or runs out of ``limits``."""
    n = graph.n
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    cost = graph.cost.tolist()
    preds = graph.pred_lists
    succs = graph.succ_lists
    uses_at: list[list[int]] = [[] for _ in range(n)]  # positions in order that read v
    for p, v in enumerate(order):
        for u in preds[v]:
            uses_at[u].append(p)
    ptr = [0] * n
    resident = [False] * n
    pins = [0] * n
    live: list[int] = []  # resident values of nonzero size (eviction candidates)
    where = [-1] * n
    out: list[int] = []
    cur = graph.fixed_mem
    pos = 0
    max_computes = _MAX_FACTOR * max(len(order), 1)
    use_r = score.startswith("r")
    power = 0 if score == "r/size" else 2 if score == "r/size/d2" else 1

    def next_use(u: int) -> int:
        lst = uses_at[u]
        i = ptr[u]
        while i < len(lst) and lst[i] < pos:
            i += 1
        ptr[u] = i
        return lst[i] if i < len(lst) else -1

    def wanted(u: int) -> int:
        """The next position that reads ``u``, or (``linger``) that reads a successor of
        ``u`` that is not resident and so would be recomputed from it; -1: none."""
        nu = next_use(u)
        if linger:
            for s in succs[u]:
                if not resident[s]:
                    ns = next_use(s)
                    if ns >= 0 and (nu < 0 or ns < nu):
                        nu = ns
        return nu

    def dead(u: int) -> bool:
        """True when nothing reads ``u`` again, nor (``linger``) any successor of it."""
        return next_use(u) < 0 and not (linger and any(next_use(s) >= 0 for s in succs[u]))

    def recompute_cost(u: int) -> float:
        total = cost[u]
        if all(resident[w] for w in preds[u]):
            return total  # the common case: its inputs are all there
        seen = {u}
        stack = [u]
        while stack and len(seen) < _R_NODES:
            for w in preds[stack.pop()]:
                if not resident[w] and w not in seen:
                    seen.add(w)
                    total += cost[w]
                    stack.append(w)
        return total

    def free(u: int) -> None:
        nonlocal cur
        resident[u] = False
        k = where[u]
        if k >= 0:
            last = live.pop()
            if last != u:
                live[k] = last
                where[last] = k
            where[u] = -1
        cur -= mem[u]

    def room(need: int) -> bool:
        while cur + need > limit:
            victim, key, runner_up, key2 = -1, math.inf, -1, math.inf
            units = len(live)
            for u in live:
                if pins[u]:
                    continue
                if linger:
                    units += len(succs[u])
                nu = wanted(u)
                if nu < 0:
                    victim, runner_up = u, -1
                    break  # never read again: free it first
                d = nu - pos + 1
                k = (recompute_cost(u) if use_r else cost[u]) / (mem[u] * d**power)
                if weight is not None:
                    k *= weight[u]
                if k < key:
                    victim, key, runner_up, key2 = u, k, victim, key
                elif k < key2:
                    runner_up, key2 = u, k
            if victim < 0 or limits.spend(units):
                return False
            if close is not None and runner_up >= 0:
                close.update((victim, runner_up))  # a choice a small change of weights flips
            free(victim)
        return True

    def compute(v: int) -> bool:
        nonlocal cur
        if len(out) >= max_computes or not room(mem[v] + ws[v]):
            return False
        out.append(v)
        resident[v] = True
        cur += mem[v]
        if mem[v] > 0:
            where[v] = len(live)
            live.append(v)
        return True

    def release(u: int) -> None:
        pins[u] -= 1
        if pins[u] == 0 and resident[u] and dead(u):
            free(u)

    def ensure(target: int) -> bool:
        """Make ``target`` resident and pin it, recomputing freed ancestors (iteratively)."""
        stack = [(target, False)]
        while stack:
            v, ready = stack.pop()
            if not ready:
                if resident[v]:
                    pins[v] += 1
                    continue
                stack.append((v, True))
                stack.extend((u, False) for u in reversed(preds[v]))
                continue
            if not compute(v):  # its inputs are resident and pinned
                return False
            for u in preds[v]:
                release(u)
            pins[v] += 1
        return True

    for p, v in enumerate(order):
        pos = p
        if resident[v]:
            continue  # already there (a target computed early): nothing to do
        for u in preds[v]:
            if not ensure(u):
                return None
        if not compute(v):
            return None
        pos = p + 1
        for u in preds[v]:
            release(u)
        if pins[v] == 0 and dead(v):
            free(v)
    return out


def prune_unread(graph: Graph, seq: Sequence[int]) -> list[int]:
    """The compute sequence ``seq`` without the computes whose value nobody reads before
    its next compute (the last compute of each target stays)."""
    preds = graph.pred_lists
    target = [False] * graph.n
    for t in graph.targets.tolist():
        target[t] = True
    read = [False] * graph.n  # a kept compute after this point reads v before v's next one
    last_seen = [False] * graph.n
    keep = [False] * len(seq)
    for i in range(len(seq) - 1, -1, -1):
        v = seq[i]
        if read[v] or (target[v] and not last_seen[v]):
            keep[i] = True
            read[v] = False
            for u in preds[v]:
                read[u] = True
        last_seen[v] = True
    return [v for i, v in enumerate(seq) if keep[i]]


def greedy_cover(
    splits: list[tuple[int, dict[int, int], list[int]]], need: dict[int, int], cost: list[float], allowance: float
) -> dict[int, list[int]] | None:
    """The greedy loop of improve.py's ``_cover`` as of 79a3eaf (a scan of every split per
    pick), which ``_greedy_cover`` replaced: the splits it takes, or None. Uses ``splits``
    and ``need`` up."""
    spent = 0.0
    chosen: dict[int, list[int]] = {}  # insert before index -> computes
    while any(x > 0 for x in need.values()):
        pick, ratio = -1, math.inf
        for k, (_, relief, chain) in enumerate(splits):
            gain = sum(min(need[j], x) for j, x in relief.items() if need[j] > 0)
            price = sum(cost[x] for x in chain)
            if gain > 0 and spent + price < allowance and price / gain < ratio:
                pick, ratio = k, price / gain
        if pick < 0:
            return None
        b, relief, chain = splits.pop(pick)
        spent += sum(cost[x] for x in chain)
        chosen.setdefault(b, []).extend(chain)
        for j, x in relief.items():
            need[j] -= x
    return chosen


def cover(graph: Graph, seq: list[int], limit: int, allowance: float, extend: bool = False) -> list[int] | None:
    """``seq`` itself when its replay fits ``limit``; otherwise ``seq`` with *splits* that
    cover each step's excess (by the replay's memory profile): a copy of w not read
    between two of its reads is freed after the first and computed again (with those of
    its inputs whose copies are gone by then) just before the second. Splits are chosen
    greedily by cost per byte of excess covered, costing less than ``allowance`` in all:
    the new sequence (unread computes deleted; not yet replayed), or None when no such
    cover exists. With ``extend``, each split also comes as a *stretch*: w alone is
    computed again, reading the latest copies of its inputs, which then stay until it
    (their extra memory is what the next replay checks)."""
    schedule = schedule_from_sequence(graph, seq)
    sim = simulate(graph, schedule, per_step=True)
    if sim.memory is None:
        return None
    at = sim.memory[schedule.ops == COMPUTE].tolist()  # memory at each compute
    need = {j: x - limit for j, x in enumerate(at) if x > limit}
    if not need:
        return seq
    cost = graph.cost.tolist()
    mem = graph.mem.tolist()
    src, reads = _copies(graph, seq)
    last = {c: r[-1] for c, r in reads.items()}

    def regrow(c: int, b: int) -> list[int] | None:
        """The computes that rebuild copy ``c`` right before index ``b``: its inputs whose
        copies are no longer read at ``b`` first (depth first), then it; None if too many."""
        out: list[int] = []
        seen: set[int] = set()
        stack = [(c, False)]
        while stack:
            x, ready = stack.pop()
            if ready:
                out.append(seq[x])
                if len(out) > _REGROW_NODES:
                    return None
                continue
            stack.append((x, True))
            for u in src[x]:
                if u >= 0 and last.get(u, u) < b and u not in seen:
                    seen.add(u)
                    stack.append((u, False))
        return out

    lo, hi = min(need), max(need)
    splits = []  # (insert before, {excess step: bytes it relieves}, computes)
    stretches = 0
    for c, rs in reads.items():
        w = mem[seq[c]]
        if w == 0:
            continue
        points = [c, *rs]
        for a, b in zip(points, points[1:]):
            if b <= lo or a >= hi:
                continue
            covered = [j for j in range(max(a + 1, lo), min(b, hi + 1)) if j in need]
            chain = regrow(c, b) if covered else None
            if chain is not None:
                splits.append((b, dict.fromkeys(covered, w), chain))
            if extend and covered and (chain is None or len(chain) > 1):
                # the stretch: inputs whose copies would be gone stay until b instead
                gone = [(u, last.get(u, u)) for u in src[c] if u >= 0 and last.get(u, u) < b]
                relief = {j: w - sum(mem[seq[u]] for u, e in gone if e < j) for j in covered}
                relief = {j: x for j, x in relief.items() if x > 0}
                if relief:
                    splits.append((b, relief, [seq[c]]))
                    stretches += 1
    if extend and not stretches:
        return None  # nothing the plain cover has not tried
    chosen = greedy_cover(list(splits), dict(need), cost, allowance)
    if chosen is None:
        return None
    out: list[int] = []
    for j, x in enumerate(seq):
        out.extend(chosen.get(j, ()))
        out.append(x)
    return _prune_unread(graph, out)
