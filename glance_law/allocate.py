"""Shared-budget allocation across rounds: concave envelopes and global best-first (numpy only).

A round's value as a function of its tree budget n - the replayed accepted
length ``A_r(n)`` (:mod:`glance_law.replay`), or a policy's prediction of it -
is made concave by its *upper concave envelope* ``E_r``: piecewise linear with
strictly decreasing slopes, each linear piece a *segment* (start ``x0``,
length, slope = value per node). Global best-first hands a shared total budget
``B`` (nodes) to the segments of all rounds in decreasing slope order (ties:
round, then position) until the next one does not fit; that one gets the
remaining whole nodes. Segments worth less than the exchange rate ``lam``
(tokens per node) are never bought. Because slopes decrease along a round, the
taken segments of a round are always its first ones, so the allocation is a
budget per round.

Multiplicity ``weights`` (the prompt-level bootstrap) scale a round's cost and
value; the sort order does not depend on them, so it is computed once
(:class:`SortedSegments`) and each replicate costs one cumulative sum.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Segments", "hull_segments", "envelope_segments", "SortedSegments", "allocate", "realized",
           "envelope_value", "unit_values", "prop6"]


@dataclass(frozen=True, eq=False)
class Segments:
    """Padded per-round segments, (R, J): ``x0``, ``length`` (int64; 0 = padding) and ``slope``
    (float; -inf on padding). Slopes strictly decrease and segments are contiguous along a row."""

    x0: np.ndarray
    length: np.ndarray
    slope: np.ndarray

    @property
    def rounds(self) -> int:
        return int(self.x0.shape[0])


def hull_segments(X: np.ndarray, Y: np.ndarray) -> Segments:
    """Segments of the upper concave envelope of the points (0, 0) and (X[r, j], Y[r, j]) of
    each round (X increasing along a row, +inf = no point), keeping positive slopes.

    From each vertex the next is the point of largest slope (the farthest one on ties)."""
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    R, P = X.shape
    cx = np.zeros(R)
    cy = np.zeros(R)
    rows = np.arange(R)
    x0s, lens, slopes = [], [], []
    for _ in range(P):
        with np.errstate(divide="ignore", invalid="ignore"):
            sl = (Y - cy[:, None]) / (X - cx[:, None])
        sl = np.where((X > cx[:, None]) & np.isfinite(X), sl, -np.inf)
        j = P - 1 - np.argmax(sl[:, ::-1], axis=1)
        s = sl[rows, j]
        ok = s > 0
        if not ok.any():
            break
        nx = np.where(ok, X[rows, j], cx)
        x0s.append(np.where(ok, cx, 0))
        lens.append(np.where(ok, nx - cx, 0))
        slopes.append(np.where(ok, s, -np.inf))
        cy = np.where(ok, Y[rows, j], cy)
        cx = nx
    if not x0s:
        z = np.zeros((R, 0), np.int64)
        return Segments(z, z.copy(), np.zeros((R, 0)))
    return Segments(np.stack(x0s, 1).astype(np.int64), np.stack(lens, 1).astype(np.int64), np.stack(slopes, 1))


def envelope_segments(pos: np.ndarray, n_max: int) -> Segments:
    """The envelope of each round's replayed curve A(n) = #{d : pos_d < n}, n = 0..n_max: its
    vertices are among (pos_d + 1, d + 1) (``pos >= n_max``: not placed)."""
    pos = np.asarray(pos)
    X = np.where(pos < n_max, pos + 1.0, np.inf)
    Y = np.broadcast_to(np.arange(1, pos.shape[1] + 1, dtype=np.float64), pos.shape)
    return hull_segments(X, Y)


@dataclass(frozen=True, eq=False)
class SortedSegments:
    """All rounds' segments worth buying (slope >= the exchange rate ``lam``, > 0) in global
    best-first order, ready for repeated allocations."""

    r: np.ndarray        # round of each segment, in best-first order
    length: np.ndarray
    slope: np.ndarray
    ends: np.ndarray     # (R, J) per-round cumulative ends: the budget after its first j+1 segments
    rounds: int
    lam: float = 0.0

    @classmethod
    def build(cls, seg: Segments, lam: float = 0.0) -> "SortedSegments":
        # slopes decrease along a round, so the segments worth buying are each round's first ones
        r, j = np.nonzero((seg.length > 0) & (seg.slope >= lam) & (seg.slope > 0))
        sl = seg.slope[r, j]
        o = np.lexsort((j, r, -sl))
        r, j = r[o], j[o]
        return cls(r=r, length=seg.length[r, j], slope=seg.slope[r, j], ends=seg.x0 + seg.length,
                   rounds=seg.rounds, lam=float(lam))


def allocate(ss: SortedSegments, budgets, weights=None) -> np.ndarray:
    """Global best-first allocations at each total budget: (len(budgets), R) int64.

    ``budgets`` are totals in (weighted) nodes; ``weights`` per-round multiplicities (a round of
    weight 0 costs and counts nothing). Segments below the exchange rate were dropped by
    :meth:`SortedSegments.build`, so the budget may be left unspent."""
    budgets = np.atleast_1d(np.asarray(budgets, dtype=np.float64))
    R = ss.rounds
    out = np.zeros((budgets.size, R), np.int64)
    r, ln = ss.r, ss.length
    if r.size == 0:
        return out
    cost = np.cumsum(ln if weights is None else ln * np.asarray(weights, dtype=np.float64)[r])
    rows = np.arange(R)
    for i, B in enumerate(budgets):
        if B <= 0:
            continue
        t = int(np.searchsorted(cost, B + 1e-9 * max(1.0, B), side="right"))
        cnt = np.bincount(r[:t], minlength=R)
        n = np.where(cnt > 0, ss.ends[rows, np.maximum(cnt - 1, 0)], 0)
        if t < r.size:                          # the first segment that does not fit: partly
            left = B - (cost[t - 1] if t else 0.0)
            rr = r[t]
            wr = 1.0 if weights is None else float(weights[rr])
            extra = int(np.floor(left / wr + 1e-9))
            if extra > 0:
                n[rr] += min(extra, int(ln[t]))
        out[i] = n
    return out


def realized(pos: np.ndarray, n: np.ndarray) -> np.ndarray:
    """A_r(n_r): the replayed accepted length at each round's allocation (R,)."""
    return (np.asarray(pos) < np.asarray(n)[:, None]).sum(axis=1)


def envelope_value(seg: Segments, n: np.ndarray) -> np.ndarray:
    """E_r(n_r): the envelope's value at each round's allocation (R,)."""
    take = np.clip(np.asarray(n)[:, None] - seg.x0, 0, seg.length)
    return (take * np.where(seg.length > 0, seg.slope, 0.0)).sum(axis=1)


def unit_values(seg: Segments, n_max: int, rows=None) -> np.ndarray:
    """Value of each round's n-th node, n = 1..n_max: the slope of the envelope segment holding
    it (0 beyond the last), (R, n_max)."""
    x0, ln, sl = seg.x0, seg.length, seg.slope
    if rows is not None:
        x0, ln, sl = x0[rows], ln[rows], sl[rows]
    R = x0.shape[0]
    out = np.zeros((R, n_max))
    r, j = np.nonzero(ln > 0)
    if r.size == 0:
        return out
    L = np.minimum(ln[r, j], np.maximum(n_max - x0[r, j], 0))
    start = np.repeat(np.cumsum(L) - L, L)
    unit = np.repeat(x0[r, j], L) + np.arange(int(L.sum())) - start      # 0-based node index
    out.reshape(-1)[np.repeat(r, L) * n_max + unit] = np.repeat(sl[r, j], L)
    return out


def prop6(true_seg: Segments, pred_seg: Segments, n_star: np.ndarray, n_hat: np.ndarray, n_max: int,
          chunk: int = 2048) -> tuple[float, float]:
    """Proposition 6 on the data, in node units: ``(regret, bound)`` summed over rounds.

    ``V*_{r,n}``: the oracle's node values (slopes of the realised envelopes, ``true_seg``);
    ``Vhat_{r,n}``: the policy's (``pred_seg``). regret = sum_r E_r(n*_r) - E_r(nhat_r) (the
    envelope value); bound = the sum of |V* - Vhat| over the disagreement set (nodes one
    allocation holds and the other does not). When both allocations are global best-first on
    their own values over the same number of nodes, regret <= bound."""
    regret = float((envelope_value(true_seg, n_star) - envelope_value(true_seg, n_hat)).sum())
    units = np.arange(1, n_max + 1)[None, :]
    bound = 0.0
    R = true_seg.rounds
    for a in range(0, R, chunk):
        rows = np.arange(a, min(R, a + chunk))
        lo = np.minimum(n_star[rows], n_hat[rows])[:, None]
        hi = np.maximum(n_star[rows], n_hat[rows])[:, None]
        dis = (units > lo) & (units <= hi)
        if not dis.any():
            continue
        diff = np.abs(unit_values(true_seg, n_max, rows) - unit_values(pred_seg, n_max, rows))
        bound += float((diff * dis).sum())
    return regret, bound
