"""Shared-budget allocation across rounds: concave envelopes and global best-first (numpy only).

A round's value as a function of its tree budget n - the replayed accepted
length ``A_r(n)`` (:mod:`glance_law.replay`), or a policy's prediction of it -
is made concave by its *upper concave envelope* ``E_r``: piecewise linear with
strictly decreasing slopes, each linear piece a *segment* (start ``x0``,
length, slope = value per node), built by Andrew's monotone chain in O(P) per
round for P points (:func:`hull_segments`), so every point of a curve counts. Global best-first hands a shared total budget
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


def hull_segments(X: np.ndarray, Y: np.ndarray, chunk: int | None = None) -> Segments:
    """Segments of the upper concave envelope of the points (0, 0) and (X[r, j], Y[r, j]) of
    each round (X increasing along a row; a point with X <= 0 or non-finite X or Y is no point,
    e.g. X = +inf), keeping positive slopes.

    Andrew's monotone chain, one pass over the columns with a stack per row (vectorised across
    rows, ``chunk`` rows at a time so memory stays bounded): a new point pops the top vertex
    while the top lies on or under the chord from the vertex beneath it, so collinear points
    merge and the farthest one is kept. O(P) per row (amortised) for P points."""
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    R, P = X.shape
    step = max(1, (1 << 21) // (P + 1)) if chunk is None else max(1, int(chunk))
    parts = [_upper_hull(X[a:a + step], Y[a:a + step]) for a in range(0, R, step)] or \
        [_upper_hull(X[:0], Y[:0])]
    if len(parts) == 1:
        return Segments(*parts[0])
    J = max(p[0].shape[1] for p in parts)
    pad = [(np.pad(x0, ((0, 0), (0, J - x0.shape[1]))), np.pad(ln, ((0, 0), (0, J - ln.shape[1]))),
            np.pad(sl, ((0, 0), (0, J - sl.shape[1])), constant_values=-np.inf)) for x0, ln, sl in parts]
    return Segments(*(np.concatenate(c, axis=0) for c in zip(*pad)))


def _upper_hull(X: np.ndarray, Y: np.ndarray):
    """(x0, length, slope) of the positive-slope hull segments of a chunk of rows (see hull_segments).

    The columns are walked in a transposed, contiguous copy. Each row's stack holds its vertices'
    coordinates, level by level (``SX``/``SY``, (P + 1, n): level 0 the origin, the top at level
    ``h - 1``); ``B`` (``bx``, ``by``) is the top and ``A`` (``ax``, ``ay``) the vertex beneath it.
    A push writes the new point into the free level above every row's top (kept only where the
    height grows), so the stack read back at the end is each row's vertex list, origin first."""
    n, P = X.shape
    W = P + 1
    XT = np.ascontiguousarray(X.T)
    YT = np.ascontiguousarray(Y.T)
    with np.errstate(invalid="ignore"):
        okT = np.isfinite(XT) & np.isfinite(YT) & (XT > 0)
    SX, SY = np.zeros((W, n)), np.zeros((W, n))
    sx, sy = SX.reshape(-1), SY.reshape(-1)
    h = np.ones(n, np.int64)
    slot = np.arange(n)
    bx, by = np.zeros(n), np.zeros(n)
    ax, ay = np.full(n, np.nan), np.full(n, np.nan)             # no A: every comparison is False
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(P):
            x, y, okj = XT[j], YT[j], okT[j]
            # C = (x, y) pops the top B while B lies on or under the chord A-C: slope(A, C) >= slope(A, B)
            idx = np.flatnonzero(okj & ((y - ay) / (x - ax) >= (by - ay) / (bx - ax)))
            cx, cy, tx, ty, hh = x[idx], y[idx], ax[idx], ay[idx], h[idx] - 1     # B popped: A is the top
            while idx.size:
                under = hh >= 2                                                  # a vertex under the top
                f = np.where(under, (hh - 2) * n + idx, 0)
                ux, uy = np.where(under, sx[f], np.nan), sy[f]
                more = (cy - uy) / (cx - ux) >= (ty - uy) / (tx - ux)
                i, done = idx[~more], ~more
                h[i], bx[i], by[i], ax[i], ay[i] = hh[done], tx[done], ty[done], ux[done], uy[done]
                idx, cx, cy, tx, ty, hh = idx[more], cx[more], cy[more], ux[more], uy[more], hh[more] - 1
            push = okj & (x > bx)                # a point under the top at the same X is never a vertex
            f = h * n + slot                     # the free level above each row's top
            sx[f], sy[f] = x, y
            h += push
            ax, ay = np.where(push, bx, ax), np.where(push, by, ay)
            bx, by = np.where(push, x, bx), np.where(push, y, by)
    D = int(h.max(initial=1))
    live = np.arange(D)[:, None] < h[None, :]                    # levels on each row's stack
    vx, vy = np.where(live, SX[:D], 0.0).T, np.where(live, SY[:D], 0.0).T
    live = live[1:].T
    dx = np.diff(vx, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sl = np.diff(vy, axis=1) / np.where(live, dx, 1.0)
    stop = ~(live & (sl > 0))                                    # slopes decrease: keep a prefix
    first = np.where(stop.any(axis=1), stop.argmax(axis=1), stop.shape[1]) if stop.size else np.zeros(n, np.int64)
    J = int(first.max(initial=0))
    keep = np.arange(J)[None, :] < first[:, None]
    x0 = np.where(keep, vx[:, :J], 0).astype(np.int64)
    ln = np.where(keep, dx[:, :J], 0).astype(np.int64)
    return x0, ln, np.where(keep, sl[:, :J], -np.inf)


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
    def build(cls, seg: Segments, lam: float = 0.0) -> SortedSegments:
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
    # the segments taken at budget B are the first t(B) in best-first order: counting them budget by
    # budget in increasing t adds each segment once, whatever the number of budgets
    ts = np.searchsorted(cost, budgets + 1e-9 * np.maximum(1.0, budgets), side="right")
    cnt, done = np.zeros(R, np.int64), 0
    for i in np.argsort(ts, kind="stable"):
        B, t = budgets[i], int(ts[i])
        if B <= 0:
            continue
        if t > done:
            cnt += np.bincount(r[done:t], minlength=R)
            done = t
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
