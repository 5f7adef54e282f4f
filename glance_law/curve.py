"""Binned conditional means: equal-count entropy bins, prompt-clustered bin means,
the decreasing isotonic fit and tie-aware ranks.

These are the building blocks of the law's decile curve (:mod:`glance_law.law`)
and of the noise ceiling (:mod:`glance_law.ceiling`). Everything is a pure
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

import numpy as np
from sklearn.isotonic import isotonic_regression

from .cluster import t_crit

__all__ = ["equal_count_bins", "binned_means", "isotonic_decreasing", "midranks",
           "integer_midranks", "r_squared"]


def _weights(n: int, weights) -> np.ndarray:
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError("weights must have one entry per round")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite and non-negative")
    return w


def equal_count_bins(order: np.ndarray, n_bins: int, weights=None) -> np.ndarray:
    """Bin index (0..n_bins-1) of every round, equal counts along ``order`` (argsort of x)."""
    order = np.asarray(order)
    n = order.size
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    w = _weights(n, weights)[order]
    total = w.sum()
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    if total <= 0:
        raise ValueError("the weights sum to zero")
    mid = np.cumsum(w) - 0.5 * w
    out[order] = np.minimum((n_bins * mid / total).astype(np.int64), n_bins - 1)
    return out


def binned_means(y, bins: np.ndarray, n_bins: int, codes: np.ndarray, n_clusters: int,
                 weights=None, level: float = 0.95) -> dict:
    """Per-bin mean of ``y`` with a prompt-clustered CR1 interval (t with g_b - 1 df).

    ``codes`` are cluster ids 0..G-1 (prompts). Within bin b the prompts with
    rounds in it are the units: ``se_b^2 = g/(g-1) sum_g (sum_i in g,b w_i (y_i -
    ybar_b))^2 / W_b^2``. Returns a dict of arrays ``n`` (weight), ``mean``,
    ``se``, ``lo``, ``hi``, ``clusters`` (g_b), and the (B, G) matrices of cluster
    sums ``sum_wy`` and ``sum_w`` (used by the cluster bootstrap).
    """
    y = np.asarray(y, dtype=np.float64)
    w = _weights(y.size, weights)
    G = int(n_clusters)
    W = np.bincount(bins, weights=w, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(bins, weights=w * y, minlength=n_bins) / W
    key = bins * G + np.asarray(codes, dtype=np.int64)
    if n_bins * G <= 20_000_000:
        sw = np.bincount(key, weights=w, minlength=n_bins * G).reshape(n_bins, G)
        swy = np.bincount(key, weights=w * y, minlength=n_bins * G).reshape(n_bins, G)
        e = swy - mean[:, None] * sw
        g = (sw > 0).sum(axis=1)
        sse = np.nansum(e ** 2, axis=1)
    else:  # many prompts: compact the (bin, prompt) pairs first
        uniq, inv = np.unique(key, return_inverse=True)
        sw_c = np.bincount(inv, weights=w)
        swy_c = np.bincount(inv, weights=w * y)
        b_of = uniq // G
        e = swy_c - mean[b_of] * sw_c
        g = np.bincount(b_of, weights=(sw_c > 0).astype(float), minlength=n_bins).astype(np.int64)
        sse = np.bincount(b_of, weights=np.nan_to_num(e) ** 2, minlength=n_bins)
        sw = swy = None
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.where(g >= 2, np.sqrt(g / np.maximum(g - 1.0, 1.0) * sse) / W, np.nan)
    half = np.array([t_crit(gi, level) if gi >= 2 else np.nan for gi in g]) * se
    return {"n": W, "mean": mean, "se": se, "lo": mean - half, "hi": mean + half,
            "clusters": g, "sum_w": sw, "sum_wy": swy}


def isotonic_decreasing(x, y, order: np.ndarray | None = None, weights=None) -> np.ndarray:
    """The least-squares non-increasing function of ``x`` fitted to ``y`` (scikit-learn's
    pool-adjacent-violators), evaluated at every round.

    Tied x values are pooled first (their weighted mean), exactly as
    ``sklearn.isotonic.IsotonicRegression(increasing=False)`` does, so the fit is a
    function of x; ``order`` (argsort of x) may be passed to avoid a second sort.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.size
    if n == 0:
        return np.zeros(0)
    if order is None:
        order = np.argsort(x, kind="stable")
    w = _weights(n, weights)
    xs = x[order]
    start = np.r_[True, xs[1:] != xs[:-1]]
    gid = np.cumsum(start) - 1
    wg = np.bincount(gid, weights=w[order])
    with np.errstate(invalid="ignore", divide="ignore"):
        yg = np.bincount(gid, weights=(w * y)[order]) / wg
    keep = wg > 0
    fit_g = np.full(wg.size, np.nan)
    if keep.any():
        fit_g[keep] = isotonic_regression(yg[keep], sample_weight=wg[keep], increasing=False)
    if not keep.all():  # zero-weight x values: carry the neighbouring fitted value
        idx = np.flatnonzero(keep)
        pos = np.clip(np.searchsorted(idx, np.arange(wg.size)), 0, idx.size - 1)
        fit_g[~keep] = fit_g[idx[pos[~keep]]]
    out = np.empty(n)
    out[order] = fit_g[gid]
    return out


def midranks(x, order: np.ndarray | None = None, weights=None) -> np.ndarray:
    """Average (mid) ranks of ``x`` (1-based, ties share their mean rank), as
    ``scipy.stats.rankdata``; with ``weights`` a row counts ``w`` times."""
    x = np.asarray(x)
    n = x.size
    if n == 0:
        return np.zeros(0)
    if order is None:
        order = np.argsort(x, kind="stable")
    w = _weights(n, weights)
    xs = x[order]
    start = np.r_[True, xs[1:] != xs[:-1]]
    gid = np.cumsum(start) - 1
    wg = np.bincount(gid, weights=w[order])
    before = np.r_[0.0, np.cumsum(wg)[:-1]]
    rank_g = before + (wg + 1.0) / 2.0
    out = np.empty(n)
    out[order] = rank_g[gid]
    return out


def integer_midranks(k, weights=None) -> np.ndarray:
    """Mid-ranks of small non-negative integers (e.g. accepted lengths) in O(n)."""
    k = np.asarray(k).astype(np.int64)
    if k.size == 0:
        return np.zeros(0)
    if k.min() < 0:
        return midranks(k, weights=weights)
    w = _weights(k.size, weights)
    cnt = np.bincount(k, weights=w)
    before = np.r_[0.0, np.cumsum(cnt)[:-1]]
    return (before + (cnt + 1.0) / 2.0)[k]


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

