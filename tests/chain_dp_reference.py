"""Frozen copy of remat_cli/strategies/chain_dp.py as of d23b961 (its table, ``solve_chain``,
and the strategy's ``_run`` / ``_best_plan``): the reference the faster chain-dp must equal
(tests/test_chain_dp_same.py: the same tables, plans, errors). Not used by the tool."""

# ruff: noqa
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
from remat_cli.strategies.base import RunContext, StrategyResult
from remat_cli.algorithms.segments import Segmentation, schedule_from_sequence, segment
from remat_cli.strategies.store_all import store_all_if_fits, store_all_plan

__all__ = ["ChainTable", "TableStopped", "run", "solve_chain"]

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
    """
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

    sizes = [v for v in (*mem, *ws) if v > 0]
    g = math.gcd(*sizes) if sizes else 1
    total = int(graph.mem[graph.needed].sum() + graph.workspace.max(initial=0)) or 1
    q = g * max(1, math.ceil(total / (g * max_slots)))
    S = max(1, math.ceil(total / q))
    if max_bytes is not None:
        S = max(1, min(S, max_bytes // q))

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
    late = [False] + [any(seg_of_b.get(w, -1) >= k for w in succs[a[k - 1]]) for k in range(1, L)]
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
        later = {u for u, j in read_by.items() if j < k}
        bwdp.append(slots(_local(mem, ws, preds, bwd[k], start, later)))
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
    rows = np.lib.stride_tricks.sliding_window_view(Ctab, W, axis=4)  # [..., start, level]
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

    def _store(key: tuple[int, int, int, int], best: np.ndarray, ch: np.ndarray) -> None:
        row = Ctab[key]
        row[:W] = _INF
        row[W : 2 * W] = best
        row[2 * W :] = best[S]
        C[key] = row[W : 2 * W]
        CH[key] = ch

    C: dict[tuple[int, int, int, int], np.ndarray] = {}
    CH: dict[tuple[int, int, int, int], np.ndarray] = {}
    SH: dict[tuple[int, ...], int] = {}
    # Part (sp, sq, t, f, f2): the backward of segments sq..t only, from a borrowed
    # checkpoint a_{sp-1} (resident on entry, counted above the baseline a_{sp-1}, D_{t+1},
    # a_t if f) that is freed at its last read; on exit D_{sq} and (f2) a_{sq-1} are
    # resident. The caller's left part rebuilds segments sp..sq-1 from an earlier one.
    P: dict[tuple[int, int, int, int, int], np.ndarray] = {}
    PCH: dict[tuple[int, int, int, int, int], np.ndarray] = {}
    reads_late = [[k > 0 and any(seg_of_b.get(w, -1) >= j for w in succs[a[k - 1]]) for j in range(L + 1)] for k in range(L)]
    pdrop = [slots(_local(mem, ws, preds, nodes[k], {a[k - 1]: 0}, {a[k]})) if k else 0 for k in range(L)]

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
        if length == 0:
            for s in range(L):
                for f in (0, 1):
                    for h in (0, 1):
                        drop = (1 - h) * xf[s]  # a_{s-1} freed once segment s has read it
                        if f:
                            level = max(fallk[s][h], bwdp[s] - drop - x[s])
                            c0 = cf[s] - cost[a[s]] + cb[s]
                        else:
                            level = max(fall[s][h], bwdp[s] - drop)
                            c0 = cf[s] + cb[s]
                        _store((s, s, f, h), above(c0, level), np.where(levels >= level, 0, -1).astype(np.int32))
            continue
        # every state (s, s + length, f, h) at once, over all memory levels. Candidates per
        # s: code 1 (F_all on s), then codes 2 + j for j = 2·(sp - s - 1) + f2 (advance to
        # sp keeping a_{sp-1}); ties go to the lowest code, the order they were offered in
        ss = np.arange(L - length)
        ts = ss + length
        j = np.arange(2 * length)
        sps = ss[:, None] + 1 + j[None, :] // 2  # (s, j)
        f2s = np.broadcast_to(j % 2, sps.shape)
        xsp = x_arr[sps - 1]
        right_at = start_of(xsp)
        # what advancing s..sp-1 costs, or infinite where its peak does not fit (``above``)
        addend = np.where(levels < adv_peak_at[ss[:, None], sps][..., None], _INF, adv_cost_at[ss[:, None], sps][..., None])
        ra_s = ra_arr[ss]
        for f in (0, 1):
            # the right part Solve(sp, t, f, f2) does not depend on h
            right = rows[sps, ts[:, None], f, f2s, right_at] + addend
            left_at = start_of(d_arr[sps] + f2s * xsp - (d_arr[ts + 1] + f * x_arr[ts])[:, None])
            for h in (0, 1):
                drop = (1 - h) * xf_arr[ss]  # a_{s-1} freed once segment s has read it
                shift1 = kbar_arr[ss] + (1 - ra_s) * x_arr[ss] - drop
                level1 = np.maximum(fall_arr[ss, h], bwdp_arr[ss] - drop + d_arr[ss + 1] - d_arr[ts + 1] - f * x_arr[ts])
                allv = np.empty((len(ss), 1 + 2 * length, S + 1))
                np.add(
                    rows[ss + 1, ts, f, ra_s, start_of(shift1)],
                    np.where(levels < level1[:, None], _INF, cfb_arr[ss][:, None]),
                    out=allv[:, 0],
                )
                np.add(right, rows[ss[:, None], sps - 1, f2s, h, left_at], out=allv[:, 1:])
                best = allv.min(axis=1)
                # the choices (argmin) are kept only where borrowed checkpoints are offered
                # below; otherwise ``choose`` finds them for the states a plan visits
                ch = np.where(best < _INF, allv.argmin(axis=1) + 1, -1).astype(np.int32) if borrow else None
                for s in ss.tolist():
                    t = s + length
                    key = (s, t, f, h)
                    SH[key + (1,)] = int(shift1[s])
                    SH[key + (-1,)] = ra[s]
                    if borrow and t > s + 1:
                        _offer_borrowed(s, t, f, h, best[s], ch[s])
                Ctab[ss, ts, f, h, :W] = _INF
                Ctab[ss, ts, f, h, W : 2 * W] = best
                Ctab[ss, ts, f, h, 2 * W :] = best[:, S:]
                for s in ss.tolist():
                    key = (s, s + length, f, h)
                    C[key] = Ctab[key][W : 2 * W]
                    if ch is not None:
                        CH[key] = ch[s]

    def choose(s: int, t: int, f: int, h: int, m: int) -> int:
        """The code ``argmin`` would pick for state (s, t, f, h) at level m: every candidate
        valued with the same float operations, in the same order, first minimum wins."""

        def at(key: tuple[int, int, int, int], c: int) -> float:
            k = m - c  # shifted(C[key], c)[m]
            return _INF if k < 0 else Ctab[key][W + min(k, S)]

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
    # levels above the budget's are never read by a plan within it (solve_chain); the full
    # table only where none fits, for the smallest plan's peak
    try:
        table = solve_chain(graph, seg, int(options.max_slots), borrow, max_bytes=budget - graph.fixed_mem, deadline=deadline)
        m_min = table.min_slots()
        if m_min is None:
            table = solve_chain(graph, seg, int(options.max_slots), borrow, deadline=deadline)
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


run = _run
