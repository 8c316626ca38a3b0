"""chain-dp: optimal checkpointing of a heterogeneous chain by dynamic programming.

Griewank's revolve (2000) generalised to chains whose stages differ in cost and size, as
in Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, *Optimal checkpointing for
heterogeneous chains* (rotor, 2019). The chain is the forward part cut at articulation
points (:mod:`.segments`); segment k has forward nodes N_k (boundary a_k, the value the
next segment reads) and backward nodes B_k.

``Solve(s, t, f)`` runs the backward of segments s..t given a_{s-1} and the gradients of
segment t+1 (and, when ``f``, a_t itself) resident. Its options:

* one segment: recompute N_s keeping its values ("F_all"), run B_s;
* F_all on s, ``Solve(s+1, t, f)``, then B_s;
* advance through s..s'-1 keeping only a_{s'-1} ("F_ck"), ``Solve(s', t, f)``, then
  ``Solve(s, s'-1, f2)`` where ``f2`` says whether a_{s'-1} is kept after B_{s'} instead of
  being recomputed.

``h`` says whether a_{s-1} must outlive ``Solve(s, t)`` or may be freed after its last
read (to be rebuilt later from an earlier checkpoint). A gradient node reads the
activations of two neighbouring segments (Checkmate's convention: bwd(u) reads u and u's
consumers), so it can be attached to either; the DP is solved with every gradient on its
later segment, on its earlier one, and (for at most ``switch_segments`` segments) with a
switch point between the two, and the cheapest plan wins.

Memory is counted exactly as the simulator counts it (workspace, frees after last use)
per segment, in slots of ``q`` bytes (``q`` = 1 byte, or the sizes' gcd, whenever the
table stays small). Time O(L³·M) for L segments and M slots, in numpy: all states of
one length (t - s) and all memory levels at once, so the Python work is O(L²); memory
O(L²·M) floats (one padded table, 75 MB at the default 40 segments and 500 slots, while it
is filled). Where a_{s-1} is not freed early (and F_all on s holds as much either way) the
states with h = 1 equal those with h = 0 and are copied, not solved. Only the levels up to
the budget's are solved; a table is kept on the graph (one per attachment rule, without its
padding: 26 MB at most) and serves every later budget whose levels it holds (a search for
the smallest budget). More than ``max_segments`` segments are merged into groups. Every plan is
replayed by the simulator; if the model misjudged a general (non-chain) graph the next
smaller memory level is tried. Anytime: past ``RunContext.deadline`` (a
``time.perf_counter()`` value) no further attachment rule is solved, a table being filled
stops between two spans of segments (its rule then has no plan: a table is O(L³·M) work,
1 s on nn1000's 500 segments) and, after the plan at the budget, the replays jump to the
smallest plan of the table; the cheapest fitting plan so far wins.

**Borrowed checkpoints (ours, beyond rotor).** Like revolve, rotor assumes that a
checkpoint handed to ``Solve(s, t)`` serves the *whole* of it: a_{s-1} is read by the right
part's advance and again by the left part ``Solve(s, s'-1)``. Exhaustive search
(``tests/brute_force.py``) finds cheaper schedules that use a checkpoint as a temporary:
on the 4-layer training chain with sizes (1, 3, 3, 4) and costs (6, 5, 1, 6) at its lower
bound (14) the optimum (77, rotor's recursion 83) is

    forward keeping a_0; B_3; [a_1 from a_0, free a_0], a_2, B_2; a_0 again from the
    input, a_1, B_1, B_0

a_0 is kept while memory is plentiful, freed at the one read that needs the room, and
rebuilt by the *caller's* left part, which therefore covers segments 0..1, not 0..0. So
``Solve(s, t)`` has one more option: advance s..sp-1 keeping a_{sp-1}, run
``Part(sp, sq, t)`` (the backward of sq..t only, advancing from a_{sp-1} as often as it
likes and freeing it at its last read: either advance sp..sq-1 dropping a_{sp-1} and
``Solve(sq, t)``, or advance sp..sr-1 keeping it, ``Solve(sr, t)``, ``Part(sp, sq, sr-1)``),
then ``Solve(s, sq-1)`` from a_{s-1}. That is O(L⁴·M); it is used up to
``borrow_segments`` (8) segments, i.e. training chains of up to 7 layers. With it the DP
equals brute force on every budget of the random 4-, 5- and 6-layer training chains tested
(before: 19 of 2489 and 12 of 1054 pairs on 4 and 5 layers were 1–8 % above the optimum,
all near the lower bound).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat_cli.errors import NoPlanError
from remat_cli.graph import Graph
from remat_cli.units import fmt_bytes_exact
from remat_cli.simulate import simulate
from remat_cli.strategies.base import RunContext, Strategy, StrategyResult
from remat_cli.algorithms.segments import Segmentation, schedule_from_sequence, segment
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan

__all__ = ["STRATEGY", "ChainOptions", "ChainTable", "solve_chain"]

_INF = math.inf


@dataclass(frozen=True, eq=False)
class ChainTable:
    """The solved DP: cost per state (s, t, f, h) over memory slots, and how to rebuild plans."""

    seg: Segmentation
    q: int  # bytes per slot
    slots: int
    cost: dict[tuple[int, int, int, int], np.ndarray]
    choice: dict[tuple[int, int, int, int], np.ndarray]
    shifts: dict[tuple[int, ...], int]  # (s, t, f, h, code) -> slots handed down
    pchoice: dict[tuple[int, int, int, int, int], np.ndarray]  # borrowed-checkpoint parts
    x: tuple[int, ...] = ()  # slots of each boundary a_k
    d: tuple[int, ...] = ()  # slots of D_k (values of segment k read by earlier backward segments)
    # choice of a state not in ``choice``, at one level: (s, t, f, h, m) -> code. Only the
    # few states a plan visits need one, so long tables leave them to be found on demand
    choose: Callable[[int, int, int, int, int], int] | None = None

    def min_slots(self) -> int | None:
        """Fewest slots at which some plan exists."""
        ok = np.flatnonzero(np.isfinite(self.top))
        return int(ok[0]) if ok.size else None

    @property
    def top(self) -> np.ndarray:
        return self.cost[(0, self.seg.count - 1, 0, 0)]

    def sequence(self, m: int) -> list[int]:
        """Compute sequence of the optimal plan with ``m`` slots available (must be feasible)."""
        out: list[int] = []
        self._emit(0, self.seg.count - 1, 0, 0, m, out)
        return out

    def _emit(self, s: int, t: int, f: int, h: int, m: int, out: list[int]) -> None:
        m = min(m, self.slots)
        known = self.choice.get((s, t, f, h))
        ch = int(known[m]) if known is not None or self.choose is None else self.choose(s, t, f, h, m)
        nodes, bwd = self.seg.nodes, self.seg.bwd
        if ch == 0:
            out.extend(nodes[s][:-1] if f else nodes[s])
            out.extend(bwd[s])
        elif ch == 1:
            out.extend(nodes[s])
            sub_h = self.shifts[(s, t, f, h, -1)]
            self._emit(s + 1, t, f, sub_h, m - self.shifts[(s, t, f, h, 1)], out)
            out.extend(bwd[s])
        elif ch >= _BORROW:
            sp, sq, f2 = _unborrow(ch)
            for k in range(s, sp):
                out.extend(nodes[k])
            self._emit_part(sp, sq, t, f, f2, m - self.shifts[(s, t, f, h, ch, 0)], out)
            self._emit(s, sq - 1, f2, h, m - self.shifts[(s, t, f, h, ch, 1)], out)
        else:
            assert ch >= 2, "chain-dp: rebuilding an infeasible state"
            sp, f2 = s + 1 + (ch - 2) // 2, (ch - 2) % 2
            for k in range(s, sp):
                out.extend(nodes[k])
            x, d = self.x, self.d
            self._emit(sp, t, f, f2, m - x[sp - 1], out)
            self._emit(s, sp - 1, f2, h, m - (d[sp] + f2 * x[sp - 1] - d[t + 1] - f * x[t]), out)

    def _emit_part(self, sp: int, sq: int, t: int, f: int, f2: int, m: int, out: list[int]) -> None:
        """Backward of segments sq..t from the borrowed checkpoint a_{sp-1} (see ``Part``)."""
        m = min(m, self.slots)
        ch = int(self.pchoice[(sp, sq, t, f, f2)][m])
        assert ch >= 0, "chain-dp: rebuilding an infeasible part"
        nodes = self.seg.nodes
        key = ("part", sp, sq, t, f, f2, ch)
        if ch == 0:  # last use of a_{sp-1}: advance to a_{sq-1} and solve sq..t
            for k in range(sp, sq):
                out.extend(nodes[k])
            self._emit(sq, t, f, f2, m - self.shifts[key + (0,)], out)
        else:
            sr, f3 = (ch - 1) // 2, (ch - 1) % 2
            for k in range(sp, sr):
                out.extend(nodes[k])
            self._emit(sr, t, f, f3, m - self.shifts[key + (0,)], out)
            self._emit_part(sp, sq, sr - 1, f3, f2, m - self.shifts[key + (1,)], out)


_F2 = np.array([0, 1])
_BORROW = 1 << 20  # choice codes at and above: a borrowed checkpoint


def _borrow(sp: int, sq: int, f2: int) -> int:
    return _BORROW + (sp * 1024 + sq) * 2 + f2


def _unborrow(code: int) -> tuple[int, int, int]:
    c = code - _BORROW
    return (c // 2) // 1024, (c // 2) % 1024, c % 2


class TableStopped(Exception):
    """Filling the table passed its deadline (it looks between spans of segments)."""


def solve_chain(
    graph: Graph,
    seg: Segmentation,
    max_slots: int = 500,
    borrow: bool = True,
    max_bytes: int | None = None,
    deadline: float | None = None,
    kept: dict[Any, ChainTable] | None = None,
    key: Any = None,
) -> ChainTable:
    """Fill the DP table for every memory level up to the sum of all values, or up to the
    level of ``max_bytes`` (activation bytes) when given.

    State (s, t, f, h): backward of segments s..t to run; resident on entry are a_{s-1},
    the values D_{t+1} that segments ≤ t read from segment t+1, and a_t when ``f``; ``h``
    says whether a_{s-1} must still be resident on exit (else it is freed after its last
    read). Excess memory is counted above that entry baseline.

    ``max_bytes``: a sub-state's level is its parent's less what the parent holds above
    the sub-state's baseline, and the top state's baseline is empty, so a plan at a level
    ≤ L reads no state above L (test_chain_dp: equal tables). Capping the table there
    solves only those levels (a budget of 0.5x needs about a quarter of them); the slot
    size ``q`` is the same as without a cap, so the plans are too.

    ``kept``: tables of this ``seg`` solved before (under ``key``, the one with the most
    levels): one that holds every level asked for is returned as it is, the same table
    at those levels; a new one with more levels replaces it. Past the deadline this
    raises ``TableStopped`` before anything else, as it did without.
    """
    if deadline is not None and time.perf_counter() > deadline:
        raise TableStopped
    q, S = slot_size(graph, max_slots)
    if max_bytes is not None:
        S = max(1, min(S, max_bytes // q))
    have = None if kept is None else kept.get(key)
    if have is not None and have.slots >= S:
        return have
    table = _solve(graph, seg, q, S, borrow, deadline)
    if kept is not None and (have is None or table.slots > have.slots):
        kept[key] = table
    return table


def _solve(graph: Graph, seg: Segmentation, q: int, S: int, borrow: bool, deadline: float | None) -> ChainTable:
    """``solve_chain``'s table with ``S`` slots of ``q`` bytes."""
    mem = graph.mem.tolist()
    ws = graph.workspace.tolist()
    cost = graph.cost.tolist()
    preds = graph.pred_lists
    L = seg.count
    nodes, bwd = seg.nodes, seg.bwd

    seg_of_b: dict[int, int] = {b: k for k in range(L) for b in bwd[k]}
    read_by: dict[int, int] = {}  # value -> earliest backward segment reading it
    for b, k in seg_of_b.items():
        for u in preds[b]:
            read_by[u] = min(read_by.get(u, L), k)

    def slots(b: float) -> int:
        return math.ceil(b / q)

    a = [seg.boundary(k) for k in range(L)]
    x = [slots(mem[v]) for v in a]
    # D_k: values of segment k (forward or backward) read by backward segments < k
    D = [{v for v in (*nodes[k], *bwd[k]) if read_by.get(v, L) < k} for k in range(L)] + [set()]
    d = [slots(sum(mem[v] for v in D[k])) for k in range(L + 1)]
    K = [{v for v in nodes[k] if read_by.get(v, L) <= k} for k in range(L)]  # kept by F_all
    ra = [int(a[k] in K[k]) for k in range(L)]
    kbar = [slots(sum(mem[v] for v in K[k])) for k in range(L)]
    # a_{k-1} can go once segment k's forward has read it, unless backward k.. reads it too
    succs = graph.succ_lists
    # the latest backward segment reading a_{k-1} (-1: none)
    last_read = [max((seg_of_b.get(w, -1) for w in succs[a[k - 1]]), default=-1) if k else -1 for k in range(L)]
    late = [False] + [last_read[k] >= k for k in range(1, L)]
    by_reader: list[list[int]] = [[] for _ in range(L)]  # values by their earliest reader
    for u, j in read_by.items():
        by_reader[j].append(u)
    later: set[int] = set()  # values read by backward segments before k
    xf = [0] + [x[k - 1] if not late[k] and a[k - 1] in {u for v in nodes[k] for u in preds[v]} else 0 for k in range(1, L)]
    fall = [[0, 0] for _ in range(L)]
    fallk = [[0, 0] for _ in range(L)]
    adv_first, adv_in, bwdp = [], [], []
    for k in range(L):
        prev = {a[k - 1]: 0} if k else {}
        for h in (0, 1):
            hold = set(prev) if h or late[k] else set()
            fall[k][h] = slots(_local(mem, ws, preds, nodes[k], prev, hold | K[k] | {a[k]}))
            fallk[k][h] = slots(_local(mem, ws, preds, nodes[k][:-1], {**prev, a[k]: 0}, hold | K[k] | {a[k]}))
        adv_first.append(slots(_local(mem, ws, preds, nodes[k], prev, set(prev) | {a[k]})))
        counted = {a[k - 1]: mem[a[k - 1]]} if k else {}
        adv_in.append(slots(_local(mem, ws, preds, nodes[k], counted, {a[k]})))
        start = {v: mem[v] for v in K[k]}
        start.update({v: 0 for v in D[k + 1]})
        later.update(by_reader[k - 1] if k else ())
        bwdp.append(slots(_local(mem, ws, preds, bwd[k], start, later)))
    # a_{s-1} is not freed early and F_all on s holds as much either way: every state
    # (s, t, f, 0) then equals (s, t, f, 1) (by induction on t: h enters a state only by
    # these and by its left part (s, sp - 1, f2, h)), the choices too
    same_h_arr = np.array([xf[k] == 0 and fall[k][0] == fall[k][1] and fallk[k][0] == fallk[k][1] for k in range(L)], dtype=bool)
    cf = [sum(cost[v] for v in nodes[k]) for k in range(L)]
    cb = [sum(cost[v] for v in bwd[k]) for k in range(L)]

    def shifted(arr: np.ndarray, c: int) -> np.ndarray:
        """out[m] = arr[m - c]: infinite below 0, the last level above S (more memory)."""
        out = np.empty(S + 1)
        if c >= 0:
            c = min(c, S + 1)
            out[:c] = _INF
            out[c:] = arr[: S + 1 - c]
        else:
            c = min(-c, S + 1)
            out[: S + 1 - c] = arr[c:]
            out[S + 1 - c :] = arr[S]
        return out

    def above(val: np.ndarray | float, level: int) -> np.ndarray:
        """``val`` where at least ``level`` slots are available, infinite below."""
        out = val.copy() if isinstance(val, np.ndarray) else np.full(S + 1, val, dtype=float)
        out[: max(0, min(level, S + 1))] = _INF
        return out

    levels = np.arange(S + 1)
    # the whole table in one array (the dicts below hold views of it), each row padded
    # so that a shifted row is a plain slice: S + 1 infinite levels below (not enough
    # memory), then the S + 1 levels, then S + 1 copies of the last level (more memory)
    W = S + 1
    Ctab = np.empty((L, L, 2, 2, 3 * W))  # a row is written (all of it) before it is read
    # every window of W levels of the flat table: a row (s, t, f, h) shifted by c starts at
    # row_at(s, t, f, h, start_of(c)); one index array, not five, per gather
    windows = np.lib.stride_tricks.sliding_window_view(Ctab.reshape(-1), W)

    def row_at(s: Any, t: Any, f: Any, h: Any, start: Any) -> np.ndarray:
        """The windows of rows (s, t, f, h) from ``start`` (broadcast index arrays): a copy."""
        return windows[(((s * L + t) * 2 + f) * 2 + h) * (3 * W) + start]

    x_arr = np.array(x, dtype=np.int64)
    d_arr = np.array(d, dtype=np.int64)
    ra_arr = np.array(ra, dtype=np.int64)
    xf_arr = np.array(xf, dtype=np.int64)
    kbar_arr = np.array(kbar, dtype=np.int64)
    fall_arr = np.array(fall, dtype=np.int64)
    bwdp_arr = np.array(bwdp, dtype=np.int64)
    cfb_arr = np.array([cf[k] + cb[k] for k in range(L)])

    def start_of(shifts: np.ndarray) -> np.ndarray:
        """Window start of ``shifted(row, c)`` in a padded row, for each shift c."""
        return W - np.minimum(np.maximum(shifts, -W), W)

    # advancing s..sp-1 keeping only a_{sp-1}: its peak and cost, per (s, sp)
    adv_peak_at = np.zeros((L, L + 1), dtype=np.int64)
    adv_cost_at = np.zeros((L, L + 1))
    for s0 in range(L):
        peak, acc = adv_first[s0], 0.0
        for sp in range(s0 + 1, L):
            if sp - 1 > s0:
                peak = max(peak, adv_in[sp - 1])
            acc += cf[sp - 1]
            adv_peak_at[s0, sp], adv_cost_at[s0, sp] = peak, acc
    # what advancing s..sp-1 costs, or infinite where its peak does not fit (``above``)
    adv_rows = np.where(levels < adv_peak_at[..., None], _INF, adv_cost_at[..., None])

    C: dict[tuple[int, int, int, int], np.ndarray] = {}
    CH: dict[tuple[int, int, int, int], np.ndarray] = {}
    SH: dict[tuple[int, ...], int] = {}
    # Part (sp, sq, t, f, f2): the backward of segments sq..t only, from a borrowed
    # checkpoint a_{sp-1} (resident on entry, counted above the baseline a_{sp-1}, D_{t+1},
    # a_t if f) that is freed at its last read; on exit D_{sq} and (f2) a_{sq-1} are
    # resident. The caller's left part rebuilds segments sp..sq-1 from an earlier one.
    P: dict[tuple[int, int, int, int, int], np.ndarray] = {}
    PCH: dict[tuple[int, int, int, int, int], np.ndarray] = {}
    reads_late = [[k > 0 and last_read[k] >= j for j in range(L + 1)] for k in range(L)]
    pdrop = [slots(_local(mem, ws, preds, nodes[k], {a[k - 1]: 0}, {a[k]})) if k else 0 for k in range(L)] if borrow else []

    def _offer_borrowed(s: int, t: int, f: int, h: int, best: np.ndarray, ch: np.ndarray) -> None:
        """Offer state (s, t, f, h) the borrowed checkpoints a_{sp-1}: the left part restarts
        from a_{s-1}. Updates ``best`` and ``ch`` in place where strictly cheaper."""
        key = (s, t, f, h)
        adv_peak_b = adv_first[s]
        adv_cost_b = 0.0
        for sp in range(s + 1, t):
            if sp - 1 > s:
                adv_peak_b = max(adv_peak_b, adv_in[sp - 1])
            adv_cost_b += cf[sp - 1]
            for sq in range(sp + 1, t + 1):
                for f2 in (0, 1):
                    code = _borrow(sp, sq, f2)
                    mid = above(shifted(P[(sp, sq, t, f, f2)], x[sp - 1]) + adv_cost_b, adv_peak_b)
                    shift = d[sq] + f2 * x[sq - 1] - d[t + 1] - f * x[t]
                    SH[key + (code, 0)] = x[sp - 1]
                    SH[key + (code, 1)] = shift
                    val = mid + shifted(C[(s, sq - 1, f2, h)], shift)
                    better = val < best
                    best[better] = val[better]
                    ch[better] = code

    for length in range(L):
        if deadline is not None and time.perf_counter() > deadline:
            raise TableStopped  # anytime: a table is O(L³·M) (nn1000's: 1 s past a 0.2 s limit)
        for s in range(L - length):
            t = s + length
            for sp in [s] if s > 0 and borrow else []:
                for sq in range(sp + 1, t + 1):
                    for f in (0, 1):
                        for f2 in (0, 1):
                            pkey = (sp, sq, t, f, f2)
                            best = np.full(S + 1, _INF)
                            ch = np.full(S + 1, -1, dtype=np.int32)
                            if not reads_late[sp][sq]:
                                peak = pdrop[sp]
                                for k in range(sp + 1, sq):
                                    peak = max(peak, adv_in[k] - x[sp - 1])
                                shift = x[sq - 1] - x[sp - 1]
                                SH[("part", *pkey, 0, 0)] = shift
                                val = above(shifted(C[(sq, t, f, f2)], shift) + sum(cf[sp:sq]), peak)
                                better = val < best
                                best[better], ch[better] = val[better], 0
                            adv_peak = adv_first[sp]
                            for sr in range(sp + 1, t + 1):
                                if sr - 1 > sp:
                                    adv_peak = max(adv_peak, adv_in[sr - 1])
                                if sr <= sq:
                                    continue
                                for f3 in (0, 1):
                                    code = 1 + 2 * sr + f3
                                    right = above(shifted(C[(sr, t, f, f3)], x[sr - 1]) + sum(cf[sp:sr]), adv_peak)
                                    shift = d[sr] + f3 * x[sr - 1] - d[t + 1] - f * x[t]
                                    SH[("part", *pkey, code, 0)] = x[sr - 1]
                                    SH[("part", *pkey, code, 1)] = shift
                                    val = right + shifted(P[(sp, sq, sr - 1, f3, f2)], shift)
                                    better = val < best
                                    best[better], ch[better] = val[better], code
                            P[pkey] = best
                            PCH[pkey] = ch
        if length == 0:  # one segment: F_all and its backward, from the level it needs
            lv = np.empty((L, 2, 2), dtype=np.int64)
            c0 = np.empty((L, 2, 2))
            for s in range(L):
                for h in (0, 1):
                    drop = (1 - h) * xf[s]  # a_{s-1} freed once segment s has read it
                    lv[s, 0, h], c0[s, 0, h] = max(fall[s][h], bwdp[s] - drop), cf[s] + cb[s]
                    lv[s, 1, h], c0[s, 1, h] = max(fallk[s][h], bwdp[s] - drop - x[s]), cf[s] - cost[a[s]] + cb[s]
            short = levels < lv[..., None]  # ``above(c0, level)``
            one = np.where(short, _INF, c0[..., None])
            ones = np.arange(L)
            Ctab[ones, ones, :, :, :W] = _INF
            Ctab[ones, ones, :, :, W : 2 * W] = one
            Ctab[ones, ones, :, :, 2 * W :] = one[..., S:]
            codes = np.where(short, -1, 0).astype(np.int32)
            for s in range(L):
                for f in (0, 1):
                    for h in (0, 1):
                        C[(s, s, f, h)] = Ctab[s, s, f, h, W : 2 * W]
                        CH[(s, s, f, h)] = codes[s, f, h]
            continue
        # every state (s, s + length, f, h) at once, over all memory levels. Candidates per
        # s: code 1 (F_all on s), then codes 2 + j for j = 2·(sp - s - 1) + f2 (advance to
        # sp keeping a_{sp-1}); ties go to the lowest code, the order they were offered in
        n = L - length
        ss = np.arange(n)
        ts = ss + length
        j = np.arange(2 * length)
        sps = ss[:, None] + 1 + j[None, :] // 2  # (s, j)
        f2s = j % 2  # broadcast over s
        xsp = x_arr[sps - 1]
        right_at = start_of(xsp)
        addend = adv_rows[ss[:, None], sps]
        ra_s = ra_arr[ss]
        t_list = ts.tolist()
        # rows h = 1 that equal rows h = 0 (``same_h``) are copied, not solved again
        redo = ss if borrow else np.flatnonzero(~same_h_arr[:n])
        for f in (0, 1):
            # the right part Solve(sp, t, f, f2) does not depend on h
            right = row_at(sps, ts[:, None], f, f2s, right_at)
            np.add(right, addend, out=right)
            left_at = start_of(d_arr[sps] + f2s * xsp - (d_arr[ts + 1] + f * x_arr[ts])[:, None])
            best0 = None
            for h in (0, 1):
                drop = (1 - h) * xf_arr[ss]  # a_{s-1} freed once segment s has read it
                shift1 = kbar_arr[ss] + (1 - ra_s) * x_arr[ss] - drop
                level1 = np.maximum(fall_arr[ss, h], bwdp_arr[ss] - drop + d_arr[ss + 1] - d_arr[ts + 1] - f * x_arr[ts])
                part = ss if h == 0 else redo  # the states (by s) solved here
                whole = part.size == n
                best = best0.copy() if not whole else None
                if part.size:
                    sub, tsub = (ss, ts) if whole else (part, ts[part])
                    allv = np.empty((part.size, 1 + 2 * length, S + 1))
                    np.add(
                        row_at(sub + 1, tsub, f, ra_s[part], start_of(shift1[part])),
                        np.where(levels < level1[part, None], _INF, cfb_arr[sub][:, None]),
                        out=allv[:, 0],
                    )
                    left = row_at(sub[:, None], sps[part] - 1, f2s, h, left_at[part])
                    np.add(right if whole else right[part], left, out=allv[:, 1:])
                    got = allv.min(axis=1)
                    if whole:
                        best = got
                    else:
                        best[part] = got
                if h == 0:
                    best0 = best
                # the choices (argmin) are kept only where borrowed checkpoints are offered
                # below; otherwise ``choose`` finds them for the states a plan visits
                ch = np.where(best < _INF, allv.argmin(axis=1) + 1, -1).astype(np.int32) if borrow else None
                for s, t, sh in zip(range(n), t_list, shift1.tolist()):
                    SH[(s, t, f, h, 1)] = sh
                    SH[(s, t, f, h, -1)] = ra[s]
                    if borrow and t > s + 1:
                        _offer_borrowed(s, t, f, h, best[s], ch[s])
                Ctab[ss, ts, f, h, :W] = _INF
                Ctab[ss, ts, f, h, W : 2 * W] = best
                Ctab[ss, ts, f, h, 2 * W :] = best[:, S:]
                for s, t in zip(range(n), t_list):
                    C[(s, t, f, h)] = Ctab[s, t, f, h, W : 2 * W]
                    if ch is not None:
                        CH[(s, t, f, h)] = ch[s]

    # the levels alone, without the padding (a third of it), for the plans to be rebuilt
    # from: a table kept for later budgets (``_best_plan``) holds L² · 4 · (S + 1) floats
    compact = np.empty((L, L, 2, 2, W))  # rows s > t are never written nor read
    for s in range(L):
        compact[s, s:] = Ctab[s, s:, :, :, W : 2 * W]
    C = {key: compact[key] for key in C}

    def choose(s: int, t: int, f: int, h: int, m: int) -> int:
        """The code ``argmin`` would pick for state (s, t, f, h) at level m: every candidate
        valued with the same float operations, in the same order, first minimum wins."""

        def at(key: tuple[int, int, int, int], c: int) -> float:
            k = m - c  # shifted(C[key], c)[m]
            return _INF if k < 0 else C[key][min(k, S)]

        drop = (1 - h) * xf[s]
        level = max(fall[s][h], bwdp[s] - drop + d[s + 1] - d[t + 1] - f * x[t])
        first = at((s + 1, t, f, ra[s]), kbar[s] + (1 - ra[s]) * x[s] - drop)
        best, code = first + (_INF if m < level else cfb_arr[s]), 1
        for sp in range(s + 1, t + 1):
            right_ok = m >= adv_peak_at[s, sp]
            for f2 in (0, 1):
                right = at((sp, t, f, f2), x[sp - 1]) + (adv_cost_at[s, sp] if right_ok else _INF)
                val = right + at((s, sp - 1, f2, h), d[sp] + f2 * x[sp - 1] - d[t + 1] - f * x[t])
                if val < best:
                    best, code = val, 2 + 2 * (sp - s - 1) + f2
        return code if best < _INF else -1

    return ChainTable(seg, q, S, C, CH, SH, PCH, tuple(x), tuple(d), choose)


def slot_size(graph: Graph, max_slots: int) -> tuple[int, int]:
    """Bytes per slot ``q`` and the slots of the whole table (no ``max_bytes``): ``q`` is the
    sizes' gcd, or a multiple of it, so that the sum of all values fills ``max_slots``."""
    sizes = [v for v in (*graph.mem.tolist(), *graph.workspace.tolist()) if v > 0]
    g = math.gcd(*sizes) if sizes else 1
    total = int(graph.mem[graph.needed].sum() + graph.workspace.max(initial=0)) or 1
    q = g * max(1, math.ceil(total / (g * max_slots)))
    return q, max(1, math.ceil(total / q))


def _local(mem, ws, preds, seq: Sequence[int], start: Mapping[int, int], keep: set[int]) -> float:
    """Peak memory of computing ``seq`` from ``start`` (node -> bytes counted),
    freeing each value after its last reader in ``seq`` unless it is in ``keep``.
    Values in ``start`` counted as 0 belong to the caller's baseline; freeing one lowers
    the count below it."""
    last: dict[int, int] = {}
    for p, v in enumerate(seq):
        for u in preds[v]:
            last[u] = p
    cur = float(sum(start.values()))
    peak = -_INF
    resident = set(start)
    for p, v in enumerate(seq):
        peak = max(peak, cur + mem[v] + ws[v])
        cur += mem[v]
        resident.add(v)
        for u in (*preds[v], v):
            if last.get(u, p) == p and u not in keep and u in resident:
                resident.discard(u)
                cur -= mem[u]
    return peak if peak > -_INF else 0.0


def _merge_starts(seg: Segmentation, groups: int) -> list[int]:
    """Start segments of ``groups`` groups holding about equal numbers of nodes."""
    sizes = [len(a) + len(b) for a, b in zip(seg.nodes, seg.bwd)]
    total = sum(sizes)
    starts = [0]
    done = 0
    for i, size in enumerate(sizes[:-1]):
        done += size
        if done >= total * len(starts) / groups and len(starts) < groups:
            starts.append(i + 1)
    return starts


@dataclass(frozen=True)
class ChainOptions:
    """``chain-dp``'s options: gradients attached with a switch point for chains of up to
    ``switch_segments`` segments; more than ``max_segments`` segments merged into groups;
    borrowed checkpoints (O(L⁴·M)) up to ``borrow_segments``; at most ``max_slots``
    memory slots in the table."""

    switch_segments: int = 12
    max_segments: int = 40
    borrow_segments: int = 8
    max_slots: int = 500


def _run(graph: Graph, budget: int | None, options: ChainOptions, context: RunContext) -> StrategyResult:
    fits = store_all_if_fits(graph, budget)
    if fits is not None:
        return StrategyResult(fits.schedule, {"segments": segment(graph).count, "plan": "store-all fits"})
    assert budget is not None
    store_metrics = store_all_plan(graph).metrics
    best: tuple[float, int, StrategyResult] | None = None
    smallest = store_metrics.peak_bytes
    rules: list[str | int] = ["max", "min"]
    count = segment(graph).count
    if count <= int(options.switch_segments):
        rules += list(range(1, count))
    deadline = context.deadline
    stopped = False
    for k, rule in enumerate(rules):
        if k and deadline is not None and time.perf_counter() > deadline:
            stopped = True  # anytime: the best plan of the attachment rules tried so far
            break
        found, floor = _best_plan(graph, budget, rule, options, context.deadline)
        if floor is not None:
            smallest = min(smallest, floor)
        if found is not None and (best is None or found[:2] < best[:2]):
            best = found
    stopped = stopped or (deadline is not None and time.perf_counter() > deadline)
    if best is None:
        raise NoPlanError(
            f"chain-dp cannot fit budget {fmt_bytes_exact(budget)}; its smallest plan "
            f"{'found before its time limit ' if stopped else ''}peaks at {fmt_bytes_exact(smallest)}",
            min_budget=smallest,
        )
    return best[2]


def _best_plan(
    graph: Graph, budget: int, rule: str | int, options: ChainOptions, deadline: float | None = None
) -> tuple[tuple[float, int, StrategyResult] | None, int | None]:
    """Cheapest plan within ``budget`` for one way of attaching gradients to segments, and
    the peak of the smallest plan this DP has (a budget at which it always succeeds; None
    when the table has no feasible level, e.g. one workspace larger than all its slots)."""
    seg = segment(graph, rule=rule)
    info: dict[str, Any] = {"segments": seg.count, "attach": rule}
    max_segments = int(options.max_segments)
    if seg.count > max_segments:
        seg = seg.merged(_merge_starts(seg, max_segments))
        info["groups"] = seg.count
    borrow = seg.count <= int(options.borrow_segments)  # O(L⁴·M) instead of O(L³·M)
    # levels above the budget's are never read by a plan within it (solve_chain); where none
    # fits, more levels for the smallest plan's peak: a capped table equals the full one at
    # every level it holds, so the smallest level with a plan and that plan are the full
    # table's once it has one. First the store-all peak's level (the smallest plan is below
    # it on every sample), then the full table (only that one, before)
    # A table is kept on the graph for the next budgets (a search for the smallest budget
    # plans ten or more): one per attachment rule, the one with the most levels; it serves
    # every budget whose level it holds (at most 13 tables: 2 of at most 40 segments,
    # 11 of at most 12; 40² · 4 · 501 floats = 26 MB each at most).
    max_slots = int(options.max_slots)
    kept = graph.derived("chain-dp tables", dict)
    memo_key = (rule, max_segments, int(options.borrow_segments), max_slots)
    q, whole = slot_size(graph, max_slots)

    def table_to(cap: int | None) -> ChainTable:
        """A table holding every level up to ``cap`` bytes (None: all of them)."""
        return solve_chain(graph, seg, max_slots, borrow, max_bytes=cap, deadline=deadline, kept=kept, key=memo_key)

    try:
        table = table_to(budget - graph.fixed_mem)
        m_min = table.min_slots()
        reach = -(-(store_all_plan(graph).metrics.peak_bytes - graph.fixed_mem) // q)
        # (at 3 segments or fewer a table's time is its set-up, the same at every level: the
        # whole table at once, as before)
        for cap in (reach, None) if seg.count > 3 else (None,):
            if m_min is not None or table.slots >= (whole if cap is None else min(reach, whole - 1)):
                continue
            table = table_to(None if cap is None else cap * q)
            m_min = table.min_slots()
    except TableStopped:
        return None, None  # past the deadline: no plan of this rule
    final_cost = table.top
    info["slot_bytes"] = table.q

    def plan_at(m: int) -> tuple[float, int, StrategyResult]:
        schedule = schedule_from_sequence(graph, table.sequence(m))
        metrics = simulate(graph, schedule).metrics
        assert metrics is not None, "chain-dp: rebuilt sequence is invalid"
        return metrics.cost, metrics.peak_bytes, StrategyResult(schedule, info)

    if m_min is None:  # no level of the table holds some step: this rule has no plan
        return None, None
    m = min(table.slots, (budget - graph.fixed_mem) // table.q)
    for tries in range(24):
        if m < m_min or (tries and deadline is not None and time.perf_counter() > deadline):
            break  # (past the deadline: the smallest plan, below)
        found = plan_at(m)
        if found[1] <= budget:
            return found, found[1]
        nxt = np.flatnonzero(final_cost[:m] > final_cost[m])  # next level with a different plan
        m = int(nxt[-1]) if nxt.size else m_min - 1
    found = plan_at(m_min)
    return (found if found[1] <= budget else None), found[1]


STRATEGY = Strategy(
    name="chain-dp",
    summary="Dynamic program for heterogeneous chains (revolve / rotor, plus borrowed "
    "checkpoints) over the chain of articulation-point segments; equals the brute-force "
    "optimum on training chains of 1-6 layers at every budget (tested); not proven beyond.",
    solve=_run,
    uses_budget=True,
    options=ChainOptions,
    incumbent=1,
    reference="Griewank & Walther 2000 (revolve); Beaumont et al. 2019, arXiv:1911.13214 (rotor)",
)
