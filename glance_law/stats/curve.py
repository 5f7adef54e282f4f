"""Binned conditional means: equal-count entropy bins, prompt-clustered bin means,
the decreasing isotonic fit and tie-aware ranks.

These are the building blocks of the law's decile curve (:mod:`glance_law.law`)
and of the noise ceiling (:mod:`glance_law.stats.ceiling`). Everything is a pure
numpy function over arrays of rounds; optional ``weights`` are counts of
identical rounds (reduced tables), so a weighted call equals the unweighted
call on the expanded rounds wherever ranks or bins do not split a weighted row.

Bins are formed on the sorted order of the entropy (``order = argsort(x,
kind="stable")``): a round goes to bin ``floor(B * (c - w/2) / W)`` where ``c``
is the cumulative weight up to and including it, so bins hold equal counts
(differing by at most one round when unweighted). Rounds with tied entropy may
fall on either side of a bin edge; the stable sort makes that split
deterministic (row order).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import isotonic_regression

from .cluster import t_crits

__all__ = ["SortKey", "sort_key", "stable_order", "equal_count_bins", "sorted_bins", "bin_starts", "binned_means",
           "isotonic_decreasing", "sorted_isotonic_bin_sums", "midranks", "sorted_midranks", "integer_midranks",
           "r_squared"]


def _weights(n: int, weights) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError("weights must have one entry per round")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite and non-negative")
    return w


class SortKey(NamedTuple):
    """One sort of x shared by the bins, the ranks and the isotonic fit.

    ``order``: stable argsort of x; ``position``: each round's place in that order (both None
    when x is already sorted: the identity);
    ``tie``: each round's tie-group id (0..n_ties-1, ascending in x).
    """

    order: np.ndarray
    position: np.ndarray
    tie: np.ndarray
    n_ties: int


def stable_order(x) -> np.ndarray:
    """``np.argsort(x, kind="stable")`` for non-negative finite entropies, fast: when every value
    is a float32 (entropies are logged as float32), the float32 bit pattern (monotone in the value
    for x >= 0) and the row index form one unique uint64 key, and an unstable SIMD sort of those
    keys gives exactly the stable order (ties in row order). Otherwise the stable argsort."""
    x = np.asarray(x)
    n = x.size
    if n < 2 ** 32 and n > 1:
        x32 = x if x.dtype == np.float32 else x.astype(np.float32)
        if (x.dtype == np.float32 or np.array_equal(x32, x)) and np.all(x32 >= 0):
            key = x32.view(np.uint32).astype(np.uint64)
            del x32
            key[key == np.uint64(0x80000000)] = 0        # -0.0 -> +0.0 (its bits sort first)
            key <<= np.uint64(32)
            for k in range(0, n, 1 << 20):               # the row index in the low bits (no arange(n))
                key[k:k + (1 << 20)] |= np.arange(k, min(n, k + (1 << 20)), dtype=np.uint64)
            key.sort()
            key &= np.uint64(0xFFFFFFFF)
            return key.view(np.int64)
    return np.argsort(x, kind="stable")


def sort_key(x, order: np.ndarray | None = None, *, is_sorted: bool = False) -> SortKey:
    """The :class:`SortKey` of ``x``. ``is_sorted=True``: ``x`` is already in ascending order,
    so the order and the positions are both ``arange(n)`` (one array, no scatter) and the tie ids
    are computed in place - the sequential layout every statistic then reads fastest."""
    x = np.asarray(x)
    n = x.size
    if is_sorted:  # order = position = identity: not materialised (None); bins from sorted_bins
        start = np.empty(n, dtype=bool)
        if n:
            start[0] = True
            np.not_equal(x[1:], x[:-1], out=start[1:])
        tie = np.cumsum(start, dtype=np.int32 if n < 2 ** 31 else np.int64)
        del start
        tie -= 1
        return SortKey(None, None, tie, int(tie[-1]) + 1 if n else 0)
    if order is None:
        order = np.argsort(x, kind="stable")
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    xs = x[order]
    start = np.empty(n, dtype=bool)
    if n:
        start[0] = True
        np.not_equal(xs[1:], xs[:-1], out=start[1:])
    del xs
    tie_sorted = np.cumsum(start, dtype=np.int32 if n < 2 ** 31 else np.int64) - 1
    tie = np.empty_like(tie_sorted)
    tie[order] = tie_sorted
    return SortKey(order, position, tie, int(tie_sorted[-1]) + 1 if n else 0)


def equal_count_bins(order: np.ndarray, n_bins: int, weights=None, position: np.ndarray | None = None) -> np.ndarray:
    """Bin index (0..n_bins-1) of every round, equal counts along ``order`` (argsort of x).

    Unweighted, the round at sorted position k goes to bin floor(B (k + 1/2) / n) (exact
    integer arithmetic; ``position`` from :func:`sort_key` saves a scatter).
    """
    order = np.asarray(order)
    n = order.size
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    if n == 0:
        return np.empty(0, dtype=np.int64)
    if weights is None:
        if position is None:
            position = np.empty(n, dtype=np.int64)
            position[order] = np.arange(n)
        return ((2 * position + 1) * n_bins) // (2 * n)
    w = _weights(n, weights)[order]
    total = w.sum()
    if total <= 0:
        raise ValueError("the weights sum to zero")
    mid = np.cumsum(w) - 0.5 * w
    out = np.empty(n, dtype=np.int64)
    out[order] = np.minimum((n_bins * mid / total).astype(np.int64), n_bins - 1)
    return out


def sorted_bins(n: int, n_bins: int, weights=None) -> np.ndarray:
    """:func:`equal_count_bins` for rounds already in sorted order, as the smallest integer type:
    unweighted, bin j holds the positions k with floor(B (2k + 1) / (2n)) = j, i.e. from
    ceil((2nj - B) / (2B)) on (exact integers, no round-sized temporaries)."""
    dtype = np.int8 if n_bins <= 127 else (np.int16 if n_bins <= 32767 else np.int64)
    if n == 0:
        return np.empty(0, dtype=dtype)
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    if weights is None:
        # Python ints: 2 n j cannot overflow
        return np.repeat(np.arange(n_bins, dtype=dtype), np.diff(bin_starts(n, n_bins)))
    w = _weights(n, weights)
    total = w.sum()
    if total <= 0:
        raise ValueError("the weights sum to zero")
    mid = np.cumsum(w)
    mid -= 0.5 * w
    mid *= n_bins
    mid /= total
    out = mid.astype(dtype if n_bins <= 127 else np.int64)
    np.minimum(out, n_bins - 1, out=out)
    return out


def bin_starts(n: int, n_bins: int) -> np.ndarray:
    """The first sorted position of each of :func:`sorted_bins`' unweighted bins (``n_bins + 1``
    entries, the last ``n``): bin j holds positions ``starts[j]:starts[j + 1]``."""
    first = [max(0, min(n, -((n_bins - 2 * n * j) // (2 * n_bins)))) for j in range(1, n_bins)]
    return np.array([0] + first + [n], dtype=np.int64)


def binned_means(y, bins: np.ndarray, n_bins: int, codes: np.ndarray, n_clusters: int,
                 weights=None, level: float = 0.95, *, starts: np.ndarray | None = None) -> dict:
    """Per-bin mean of ``y`` with a prompt-clustered CR1 interval (t with g_b - 1 df).

    ``codes`` are cluster ids 0..G-1 (prompts). Within bin b the prompts with
    rounds in it are the units: ``se_b^2 = g/(g-1) sum_g (sum_i in g,b w_i (y_i -
    ybar_b))^2 / W_b^2``. Returns a dict of arrays ``n`` (weight), ``mean``,
    ``se``, ``lo``, ``hi``, ``clusters`` (g_b), and the (B, G) matrices of cluster
    sums ``sum_wy`` and ``sum_w`` (None when they were not formed).

    ``starts`` (unweighted rounds in bin order only, :func:`bin_starts`): bin j is the run
    ``starts[j]:starts[j + 1]``; the sums are then taken bin by bin, without a (bin, prompt) key.
    """
    y = np.asarray(y, dtype=np.float64)
    w = None if weights is None else _weights(y.size, weights)  # None: unit weights, not materialised
    G = int(n_clusters)
    if starts is not None and w is None:
        return _binned_runs(y, np.asarray(starts), n_bins, codes, G, level)
    wy = y if w is None else w * y
    W = np.bincount(bins, weights=w, minlength=n_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(bins, weights=wy, minlength=n_bins) / W
    key = np.asarray(bins, dtype=np.int64) * G
    key += np.asarray(codes, dtype=np.int64)
    if n_bins * G <= 20_000_000:
        sw = np.bincount(key, weights=w, minlength=n_bins * G).astype(np.float64).reshape(n_bins, G)
        swy = np.bincount(key, weights=wy, minlength=n_bins * G).reshape(n_bins, G)
        e = swy - mean[:, None] * sw
        g = (sw > 0).sum(axis=1)
        sse = np.nansum(e ** 2, axis=1)
    else:  # many prompts: compact the (bin, prompt) pairs first
        uniq, inv = np.unique(key, return_inverse=True)
        sw_c = np.bincount(inv, weights=w).astype(np.float64)
        swy_c = np.bincount(inv, weights=wy)
        b_of = uniq // G
        e = swy_c - mean[b_of] * sw_c
        g = np.bincount(b_of, weights=(sw_c > 0).astype(float), minlength=n_bins).astype(np.int64)
        sse = np.bincount(b_of, weights=np.nan_to_num(e) ** 2, minlength=n_bins)
        sw = swy = None
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.where(g >= 2, np.sqrt(g / np.maximum(g - 1.0, 1.0) * sse) / W, np.nan)
    half = np.where(g >= 2, t_crits(g, level), np.nan) * se
    return {"n": W, "mean": mean, "se": se, "lo": mean - half, "hi": mean + half,
            "clusters": g, "sum_w": sw, "sum_wy": swy}


def _binned_runs(y, starts, n_bins: int, codes, G: int, level: float) -> dict:
    """:func:`binned_means` for unweighted rounds whose bins are consecutive runs."""
    W = np.diff(starts).astype(np.float64)
    mean = np.full(n_bins, np.nan)
    g = np.zeros(n_bins, dtype=np.int64)
    sse = np.zeros(n_bins)
    for b in range(n_bins):
        lo, hi = int(starts[b]), int(starts[b + 1])
        if hi <= lo:
            continue
        cb, yb = codes[lo:hi], y[lo:hi]
        sw = np.bincount(cb, minlength=G)
        swy = np.bincount(cb, yb, G)
        mean[b] = swy.sum() / W[b]
        swy -= mean[b] * sw
        g[b] = np.count_nonzero(sw)
        sse[b] = float(np.dot(swy, swy))
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.where(g >= 2, np.sqrt(g / np.maximum(g - 1.0, 1.0) * sse) / W, np.nan)
    half = np.where(g >= 2, t_crits(g, level), np.nan) * se
    return {"n": W, "mean": mean, "se": se, "lo": mean - half, "hi": mean + half,
            "clusters": g, "sum_w": None, "sum_wy": None}


#: blocks above which :func:`sorted_isotonic_bin_sums` pools its blocks again before pava
REPOOL_ABOVE = 1_000_000


def _sorted_ties(x):
    """The tied rounds of sorted ``x``: their positions ``m`` (ascending), each one's tie group
    ``gid`` (0, 1, ...), and each group's first position and size; None when x has no ties.
    Round-sized work is two comparisons; the rest is as large as the ties."""
    x = np.asarray(x)
    eq = x[1:] == x[:-1]
    if not eq.any():
        return None
    tied = np.zeros(x.size, dtype=bool)
    tied[1:] = eq
    tied[:-1] |= eq
    m = np.flatnonzero(tied)
    del tied
    first = np.ones(m.size, dtype=bool)
    first[1:] = ~eq[m[1:] - 1]
    gid = np.cumsum(first, dtype=np.intp) - 1
    return m, gid, m[first], np.bincount(gid)


def sorted_isotonic_bin_sums(x, y, starts) -> np.ndarray:
    """Per-bin sums of :func:`isotonic_decreasing` ``(x, y)`` for ``x`` sorted ascending and unit
    weights, the bins being the runs ``starts[j]:starts[j + 1]`` - without a per-round fit.

    Tied x are pooled (as there: each takes its group's mean); then every run of rounds whose
    values do not decrease is pooled too: for a non-increasing least-squares fit, neighbours
    with y_i <= y_i+1 take the same fitted value (moving the two fitted values towards each
    other would lower the squared error), so this pooling is exact; it only shortens the
    pool-adjacent-violators input (to about 40% of the rounds on logged entropies).
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    starts = np.asarray(starts, dtype=np.int64)
    if n == 0:
        return np.zeros(starts.size - 1)
    cut = y[:-1] > y[1:]                       # a block ends where the value decreases
    ties = _sorted_ties(x)
    if ties is not None:  # a tie group's rounds all carry its mean: recompare at its two ends
        m, gid, first, size = ties
        gm = np.bincount(gid, y[m]) / size
        del gid
        cut[m[m < n - 1]] = False               # inside a group: equal values
        del m
        last = first + size - 1
        after = y[np.minimum(last + 1, n - 1)]  # the value after each group (the next group's mean if adjacent)
        joined = first[1:] == last[:-1] + 1
        after[:-1][joined] = gm[1:][joined]
        ok = last < n - 1
        cut[last[ok]] = (gm > after)[ok]
        before = y[np.maximum(first - 1, 0)]   # the value before each group
        before[1:][joined] = gm[:-1][joined]
        ok = first > 0
        cut[first[ok] - 1] = (before > gm)[ok]
        del gm, first, size, last, after, before, joined, ok
    R = np.flatnonzero(cut)                    # each block's first round
    del cut
    R += 1
    R = np.concatenate([[0], R])
    S = np.add.reduceat(y, R)                  # block sums and sizes
    W = np.diff(R, append=n).astype(np.float64)
    # pooled blocks are points of the same problem (weighted by their sizes): pool again where the
    # means do not decrease, while that still shortens the input noticeably
    while S.size > REPOOL_ABOVE:  # (a memory bound: pava copies its input three times)
        mean = S / W
        cut = mean[:-1] > mean[1:]
        del mean
        if np.count_nonzero(cut) > 0.8 * S.size:
            break
        idx = np.concatenate([[0], np.flatnonzero(cut) + 1])
        del cut
        if idx.size == S.size:                   # nothing pools any more (tiny inputs)
            break
        S, W, R = np.add.reduceat(S, idx), np.add.reduceat(W, idx), R[idx]
        del idx
    # bin b: the blocks from the one holding its first round to the one holding the next bin's first
    # round (summed whole), less the part of the first before the bin, plus the part of the next
    # inside it (a bin inside one block: just its rounds)
    B = starts.size - 1
    j = np.searchsorted(R, starts[:-1], side="right") - 1
    Rj = R[j]
    del R
    S /= W
    fit = isotonic_regression(S, weights=W, increasing=False).x
    del S
    fw = fit * W
    del W
    out = np.add.reduceat(fw, j)
    same = np.zeros(B, dtype=bool)
    same[:-1] = j[1:] == j[:-1]
    out[same] = 0.0
    out -= (starts[:-1] - Rj) * fit[j]
    out[:-1] += (starts[1:-1] - Rj[1:]) * fit[j[1:]]
    return out


def sorted_midranks(x) -> np.ndarray:
    """:func:`midranks` of ``x`` sorted ascending (unit weights): position + 1, and for a tie
    group starting at position f with k rounds, f + (k + 1) / 2."""
    out = np.arange(1, np.asarray(x).size + 1, dtype=np.float64)
    ties = _sorted_ties(x)
    if ties is not None:
        m, gid, first, size = ties
        out[m] = (first + (size + 1.0) / 2.0)[gid]
    return out


def isotonic_decreasing(x, y, order: np.ndarray | None = None, weights=None, key: SortKey | None = None) -> np.ndarray:
    """The least-squares non-increasing function of ``x`` fitted to ``y``, evaluated at every
    round: ``sklearn.isotonic.IsotonicRegression(increasing=False).fit(x, y).predict(x)``.

    Tied x values are pooled first (their weighted mean), exactly as scikit-learn does,
    so the fit is a function of x; the pool-adjacent-violators step is the one
    scikit-learn itself calls (``scipy.optimize.isotonic_regression``), imported
    directly because importing scikit-learn (and the scipy.stats it pulls in) costs
    ~50 MB and ~0.7 s in the CLI. Tests check equality with scikit-learn.
    ``order`` (argsort of x) or ``key`` (:func:`sort_key`) may be passed to reuse a sort.
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n == 0:
        return np.zeros(0)
    if key is None:
        key = sort_key(np.asarray(x, dtype=np.float64), order)
    wg = np.bincount(key.tie, weights=weights, minlength=key.n_ties).astype(np.float64, copy=False)
    yg = np.bincount(key.tie, weights=y if weights is None else _weights(n, weights) * y, minlength=key.n_ties)
    keep = wg > 0
    if keep.all():  # the usual case: every tie group has weight
        del keep
        yg /= wg
        fit_g = isotonic_regression(yg, weights=wg, increasing=False).x
        del yg, wg
        return fit_g[key.tie]
    yg[keep] /= wg[keep]
    fit_g = np.full(wg.size, np.nan)
    fit_g[keep] = isotonic_regression(yg[keep], weights=wg[keep], increasing=False).x
    # zero-weight x values: carry the neighbouring fitted value
    idx = np.flatnonzero(keep)
    pos = np.clip(np.searchsorted(idx, np.arange(wg.size)), 0, idx.size - 1)
    fit_g[~keep] = fit_g[idx[pos[~keep]]]
    return fit_g[key.tie]


def midranks(x, order: np.ndarray | None = None, weights=None, key: SortKey | None = None) -> np.ndarray:
    """Average (mid) ranks of ``x`` (1-based, ties share their mean rank), as
    ``scipy.stats.rankdata``; with ``weights`` a row counts ``w`` times."""
    x = np.asarray(x)
    if x.size == 0:
        return np.zeros(0)
    if key is None:
        key = sort_key(x, order)
    rank_g = np.bincount(key.tie, weights=weights, minlength=key.n_ties).astype(np.float64, copy=False)
    # mid-rank of a tie group = (weight before it) + (its weight + 1) / 2 = cumsum - (weight - 1) / 2
    half = (rank_g - 1.0) / 2.0
    np.cumsum(rank_g, out=rank_g)
    rank_g -= half
    del half
    return rank_g[key.tie]


def integer_midranks(k, weights=None) -> np.ndarray:
    """Mid-ranks of small non-negative integers (e.g. accepted lengths) in O(n)."""
    k = np.asarray(k)
    if k.size == 0:
        return np.zeros(0)
    if k.min() < 0:
        return midranks(k.astype(np.int64), weights=weights)
    w = None if weights is None else _weights(k.size, weights)
    C = 1 << 16  # integer codes (and counts) chunk by chunk: no round-sized int64 copy of k
    top = int(np.trunc(k.max())) + 1
    cnt = np.zeros(top)
    for i in range(0, k.size, C):
        cnt += np.bincount(k[i:i + C].astype(np.intp), None if w is None else w[i:i + C], top)
    before = np.r_[0.0, np.cumsum(cnt)[:-1]]
    table = before + (cnt + 1.0) / 2.0
    out = np.empty(k.size)
    for i in range(0, k.size, C):
        out[i:i + C] = table[k[i:i + C].astype(np.intp)]
    return out


def r_squared(y, yhat, weights=None) -> float:
    """1 - SS_res / SS_tot (weighted); NaN when y does not vary."""
    y = np.asarray(y, dtype=np.float64)
    yhat = np.asarray(yhat, dtype=np.float64)
    ok = np.isfinite(y) & np.isfinite(yhat)
    if ok.sum() < 2:
        return float("nan")
    w = _weights(y.size, weights)[ok]
    y, yhat = y[ok], yhat[ok]
    ybar = (w * y).sum() / w.sum()
    sst = (w * (y - ybar) ** 2).sum()
    if sst <= 0:
        return float("nan")
    return float(1.0 - (w * (y - yhat) ** 2).sum() / sst)

