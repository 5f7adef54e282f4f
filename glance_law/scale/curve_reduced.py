"""Equal-count entropy bins over reduced cells: the law's decile curve and the noise ceiling
of a reduction (used by :mod:`glance_law.scale.law_reduced`).

The exact path cuts the rounds, sorted by entropy, into bins of equal count
(:func:`glance_law.stats.curve.equal_count_bins`). A reduction knows each cell's fine entropy
bin, count and mean entropy, so a cut that falls inside a fine bin is placed by modelling
the rounds of every cell in that bin with the linear density on the bin whose mean is the
cell's mean entropy (``f(u) = 1 + k (u - 1/2)`` on the bin rescaled to [0, 1], ``k = 12
(mean - 1/2)`` clipped to [-2, 2]): the cut is where the modelled counts below it add up
to the bin's share, and each cell is split between the two sides by its own modelled
fraction. A cell with a lower mean entropy therefore goes more to the lower side, as its
rounds do, and the bin counts are exact. Cells in bins without a cut go whole to their
side.

:func:`equal_count_parts` returns the pieces (cell, bin, weight, mean entropy of the
piece); :func:`curve_and_ceiling` computes from them what :func:`glance_law.law.fit_law`
reports about the curve and the ceiling. Pure numpy.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from glance_law.law.model import law_supremum, truncated_mean
from glance_law.stats import ceiling as _ceiling
from glance_law.stats import curve as _curve

__all__ = ["equal_count_parts", "curve_and_ceiling"]


def _slope(mu):
    return np.clip(12.0 * (np.clip(mu, 0.0, 1.0) - 0.5), -2.0, 2.0)


def _cdf(u, k):
    """CDF of the density 1 + k (u - 1/2) on [0, 1]."""
    return u + k * (u * u - u) / 2.0


def _first_moment(u, k):
    """Integral of x (1 + k (x - 1/2)) from 0 to u."""
    return u * u / 2.0 + k * (u ** 3 / 3.0 - u * u / 2.0) / 2.0


def equal_count_parts(hbin, n, mu, n_bins: int):
    """Split cells into ``n_bins`` equal-count bins along the entropy.

    ``hbin``: each cell's fine bin (any integers ordered like the entropy); ``n``: its
    rounds (weights); ``mu``: its mean entropy's position in its fine bin (0..1).
    Returns ``(cell, bin, weight, u)``: the pieces, with each piece's mean position in
    the fine bin under the cell's linear density.
    """
    n = np.asarray(n, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    hu, hcode = np.unique(np.asarray(hbin), return_inverse=True)
    hcode = hcode.ravel()
    Wh = np.bincount(hcode, n, hu.size)
    cum = np.r_[0.0, np.cumsum(Wh)]
    cuts = np.arange(1, n_bins) * cum[-1] / n_bins
    start = np.searchsorted(cuts, cum[:-1], side="right")   # cuts at or before the fine bin's start
    end = np.searchsorted(cuts, cum[1:], side="left")       # cuts before its end
    k = _slope(mu)
    whole = start[hcode] == end[hcode]
    cells, bins, wts, us = [np.flatnonzero(whole)], [start[hcode][whole]], [n[whole]], [mu[whole]]
    for j in np.flatnonzero(start < end):
        idx = np.flatnonzero(hcode == j)
        kc, nc = k[idx], n[idx]
        need = cuts[start[j]:end[j]] - cum[j]
        # the modelled count below u is sum n_c F_c(u) = A u + C (u^2 - u): solve the quadratic
        # (stable root form; increasing on [0, 1] since |k| <= 2)
        A, C = nc.sum(), (nc @ kc) / 2.0
        u = np.clip(2.0 * need / ((A - C) + np.sqrt(np.maximum((A - C) ** 2 + 4.0 * C * need, 0.0))), 0.0, 1.0)
        u = np.r_[0.0, u, 1.0]
        F = np.diff(_cdf(u[None, :], kc[:, None]), axis=1)
        M = np.diff(_first_moment(u[None, :], kc[:, None]), axis=1)
        for p in range(F.shape[1]):
            keep = F[:, p] > 0
            cells.append(idx[keep])
            bins.append(np.full(int(keep.sum()), start[j] + p))
            wts.append(nc[keep] * F[keep, p])
            us.append(M[keep, p] / F[keep, p])
    return (np.concatenate(cells), np.concatenate(bins).astype(np.int64), np.concatenate(wts),
            np.concatenate(us))


def curve_and_ceiling(hbin, lo, hi, n, sum_h, a, L, b, n_bins: int = 10, ceiling_bins: int = 50):
    """The decile curve and the ceiling of one group's marginal cells (summed over buckets).

    ``lo``, ``hi``: the cells' fine-bin edges; ``b``: the fitted (b0, b1) (NaN: not fitted).
    Returns ``(curve, row, parts)``: the curve columns (arrays over bins), the row entries
    (floor_rounds, floor_mean, sup, r2_curve, r2_isotonic, ceiling, ceiling_binned,
    ceiling_bins) and the decile pieces ``(cell, bin, weight)`` for clustered intervals.
    """
    n = np.asarray(n, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    mean = np.asarray(sum_h, dtype=np.float64) / n
    width = hi - lo
    mu = np.where(width > 0, (mean - lo) / np.where(width > 0, width, 1.0), 0.5)
    W = n.sum()
    row: dict = {}
    curve = None
    parts = None
    fitted = bool(np.all(np.isfinite(b)))
    if W >= n_bins:
        c, k, w, u = equal_count_parts(hbin, n, mu, n_bins)
        Hp = lo[c] + u * width[c]
        Wb = np.bincount(k, w, n_bins)
        ma = np.bincount(k, w * a[c], n_bins) / Wb
        iso = _curve.isotonic_decreasing(mean, a, weights=n)
        curve = {"bin": np.arange(1, n_bins + 1), "n": Wb, "mean_entropy": np.bincount(k, w * Hp, n_bins) / Wb,
                 "mean_accepted": ma, "isotonic": np.bincount(k, w * iso[c], n_bins) / Wb,
                 "predicted": np.full(n_bins, np.nan)}
        row["floor_rounds"] = int(round(Wb[0]))
        row["floor_mean"] = float(ma[0])
        row["r2_isotonic"] = _curve.r_squared(ma, curve["isotonic"])
        if fitted:
            pred = truncated_mean(special.expit(b[0] - b[1] * Hp), L[c])
            curve["predicted"] = np.bincount(k, w * pred, n_bins) / Wb
            row["r2_curve"] = _curve.r_squared(ma, curve["predicted"])
            row["sup"] = float(law_supremum(b[0], int(L[n > 0].max())))
        parts = (c, k, w)
    B = int(min(int(ceiling_bins), int(W // 2)))
    row["ceiling_bins"] = B
    abar = (n @ a) / W
    sst = float(n @ (a - abar) ** 2)
    if B >= 2 and W > B and sst > 0:
        c, k, w, _ = equal_count_parts(hbin, n, mu, B)
        Wb = np.bincount(k, w, B)
        Sb = np.bincount(k, w * a[c], B)
        present = Wb > 0
        ssb = max(float((Sb[present] ** 2 / Wb[present]).sum() - W * abar ** 2), 0.0)
        B_eff = int(present.sum())
        msw = max(sst - ssb, 0.0) / (W - B_eff)
        row["ceiling_binned"] = ssb / sst
        row["ceiling"] = (ssb - (B_eff - 1) * msw) / sst
        row["ceiling_bins"] = B_eff
    else:
        row["ceiling_binned"] = row["ceiling"] = np.nan
    return curve, row, parts


def ceiling_fraction(r2_round, ceiling) -> float:
    return _ceiling.ceiling_fraction(r2_round, ceiling)
