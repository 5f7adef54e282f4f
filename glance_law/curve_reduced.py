"""Equal-count entropy bins over reduced cells: the law's decile curve and the noise ceiling
of a reduction (used by :mod:`glance_law.law_reduced`).

The exact path cuts the rounds, sorted by entropy, into bins of equal count
(:func:`glance_law.curve.equal_count_bins`: the c-th round goes to bin
``floor(B (c - 1/2) / W)``); the cuts here hold the same integer counts. The cells are the
bucket-level ones (summed over buckets, rounds of distinct entropies would merge). A cell of
one round or of no entropy spread (:func:`point_cells`) is a point mass at its mean entropy,
and a cell of two rounds is split into its two rounds (mean -/+ sd): all exactly where the
exact path sees them. A cut that falls inside a fine bin is placed by modelling the rounds of
every other cell in that bin with the linear density on the bin whose mean is the cell's mean
entropy (``f(u) = 1 + k (u - 1/2)`` on the bin rescaled to [0, 1], ``k = 12 (mean - 1/2)``
clipped to [-2, 2]): the cut is where the point masses and modelled counts below it add up
to the bin's share, and each spread cell is split between the two sides by its own modelled
fraction (point masses tied at the cut, in proportion: the exact path splits tied rounds by
row order, which a reduction does not keep). Cells in bins without a cut go whole to their
side.

:func:`equal_count_parts` returns the pieces (cell, bin, weight, mean entropy of the
piece); :func:`curve_and_ceiling` computes from them what :func:`glance_law.law.fit_law`
reports about the curve and the ceiling. Pure numpy.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from . import ceiling as _ceiling
from . import curve as _curve
from .law import law_supremum, truncated_mean

__all__ = ["point_cells", "equal_count_parts", "curve_and_ceiling"]


def _slope(mu):
    return np.clip(12.0 * (np.clip(mu, 0.0, 1.0) - 0.5), -2.0, 2.0)


def _cdf(u, k):
    """CDF of the density 1 + k (u - 1/2) on [0, 1]."""
    return u + k * (u * u - u) / 2.0


def _first_moment(u, k):
    """Integral of x (1 + k (x - 1/2)) from 0 to u."""
    return u * u / 2.0 + k * (u ** 3 / 3.0 - u * u / 2.0) / 2.0


def point_cells(n, sum_h, sum_h2, lo, hi):
    """Cells whose rounds all sit at their mean entropy: one round, or no spread (entropy sd at
    most 1e-7 of the fine bin's width, the rounding threshold of :func:`two_point`)."""
    n = np.asarray(n, dtype=np.float64)
    sh = np.asarray(sum_h, dtype=np.float64)
    var = np.maximum((np.asarray(sum_h2, dtype=np.float64) - sh * sh / n) / n, 0.0)
    return (n <= 1) | (np.sqrt(var) <= 1e-7 * (np.asarray(hi) - np.asarray(lo)))


def _place_cuts(need, x, nc, kc, point):
    """Cuts inside one fine bin: for each count ``need`` (rounds of the bin below the cut), the
    position ``u`` and the fraction ``t`` of the point masses sitting exactly at ``u`` that lie
    below it. Point cells count at their position ``x``, the others by their linear densities."""
    A, C = nc[~point].sum(), (nc[~point] @ kc[~point]) / 2.0

    def Q(u):  # modelled rounds of the spread cells below u
        u = np.clip(u, 0.0, 1.0)
        return A * u + C * (u * u - u)

    pos, pinv = np.unique(x[point], return_inverse=True)
    wpos = np.bincount(pinv.ravel(), nc[point], pos.size)
    Pb = np.r_[0.0, np.cumsum(wpos)]          # point rounds strictly below pos[i]: Pb[i]
    low, up = Pb[:-1] + Q(pos), Pb[1:] + Q(pos)
    us, ts = np.empty(need.size), np.empty(need.size)
    for q, v in enumerate(need):
        i = int(np.searchsorted(up, v, side="left"))
        if i < pos.size and low[i] <= v:      # the cut falls on the point masses at pos[i]
            us[q], ts[q] = pos[i], (v - low[i]) / wpos[i]
            continue
        left = pos[i - 1] if i > 0 else 0.0
        right = pos[i] if i < pos.size else 1.0
        r = v - Pb[i]                         # spread rounds below the cut: solve Q(u) = r (stable root;
        disc = np.sqrt(max((A - C) ** 2 + 4.0 * C * r, 0.0))   # Q is increasing on [0, 1] as |k| <= 2)
        u = 2.0 * r / ((A - C) + disc) if A > 0 else left
        us[q] = min(max(u, left), right)
        ts[q] = 1.0 if i > 0 and us[q] <= left else 0.0
    return us, ts


def equal_count_parts(hbin, n, mu, n_bins: int, point=None):
    """Split cells into ``n_bins`` equal-count bins along the entropy, with the exact path's counts.

    ``hbin``: each cell's fine bin (any integers ordered like the entropy); ``n``: its
    rounds (integer counts); ``mu``: its mean entropy's position in its fine bin (0..1);
    ``point``: cells whose rounds all sit at their mean entropy (default: none). Bin ``j``
    holds the rounds ranked ``c`` (1-based, by entropy) with ``floor(B (c - 1/2) / W) = j``,
    as :func:`glance_law.curve.equal_count_bins`. Returns ``(cell, bin, weight, u)``: the
    pieces, with each piece's mean position in the fine bin (a point cell's is its ``mu``).
    """
    n = np.asarray(n, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    point = np.zeros(n.size, dtype=bool) if point is None else np.asarray(point, dtype=bool)
    hbin = np.asarray(hbin, dtype=np.int64)
    hcode = hbin - hbin.min()   # fine bins are small integers: count them, no sort (empty ones hold no cut)
    Wh = np.bincount(hcode, n)
    cum = np.r_[0.0, np.cumsum(Wh)]
    W = int(round(cum[-1]))
    j = np.arange(1, n_bins, dtype=np.int64)
    cuts = ((2 * W * j + n_bins - 1) // (2 * n_bins)).astype(np.float64)  # rounds in bins < j
    start = np.searchsorted(cuts, cum[:-1], side="right")   # cuts at or before the fine bin's start
    end = np.searchsorted(cuts, cum[1:], side="left")       # cuts before its end
    k = _slope(mu)
    whole = start[hcode] == end[hcode]
    cells, bins, wts, us = [np.flatnonzero(whole)], [start[hcode][whole]], [n[whole]], [mu[whole]]
    cut_bins = np.flatnonzero(start < end)
    sel = np.flatnonzero((start < end)[hcode])              # the cells of fine bins holding a cut,
    sel = sel[np.argsort(hcode[sel], kind="stable")]        # grouped by fine bin
    sel_end = np.cumsum(np.bincount(hcode[sel], minlength=Wh.size)[cut_bins])
    for j, idx in zip(cut_bins, np.split(sel, sel_end[:-1])):
        kc, nc, xc, pc = k[idx], n[idx], mu[idx], point[idx]
        u, t = _place_cuts(cuts[start[j]:end[j]] - cum[j], xc, nc, kc, pc)
        # each cell's fraction below every cut: a spread cell by its linear density's CDF, a point
        # cell wholly below (above) a cut past (before) it and the fraction t at a cut on it
        uc = np.clip(u, 0.0, 1.0)[None, :]
        below = np.where(pc[:, None], (xc[:, None] < u[None, :]) + t[None, :] * (xc[:, None] == u[None, :]),
                         _cdf(uc, kc[:, None]))
        F = np.diff(np.c_[np.zeros(idx.size), below, np.ones(idx.size)], axis=1)
        M = np.diff(np.c_[np.zeros(idx.size), _first_moment(uc, kc[:, None]), _first_moment(1.0, kc)[:, None]],
                    axis=1)
        for p in range(F.shape[1]):
            keep = F[:, p] > 0
            cells.append(idx[keep])
            bins.append(np.full(int(keep.sum()), start[j] + p))
            wts.append(nc[keep] * F[keep, p])
            with np.errstate(invalid="ignore", divide="ignore"):
                us.append(np.where(pc[keep], xc[keep], M[keep, p] / F[keep, p]))
    return (np.concatenate(cells), np.concatenate(bins).astype(np.int64), np.concatenate(wts),
            np.concatenate(us))


def curve_and_ceiling(hbin, lo, hi, n, sum_h, a, L, b, n_bins: int = 10, ceiling_bins: int = 50, sum_h2=None):
    """The decile curve and the ceiling of one group's cells. Pass the bucket-level cells (not
    summed over buckets, which would merge single rounds of distinct entropies) and their
    ``sum_h2``, so that cells of one round or of no spread are placed at their exact entropy.

    ``lo``, ``hi``: the cells' fine-bin edges; ``b``: the fitted (b0, b1) (NaN: not fitted).
    Returns ``(curve, row, parts)``: the curve columns (arrays over bins), the row entries
    (floor_rounds, floor_mean, sup, r2_curve, r2_isotonic, ceiling, ceiling_binned,
    ceiling_bins) and the decile pieces ``(cell, bin, weight)`` for clustered intervals.
    """
    n = np.asarray(n, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    mean = np.asarray(sum_h, dtype=np.float64) / n
    point = n <= 1 if sum_h2 is None else point_cells(n, sum_h, sum_h2, lo, hi)
    unit = np.arange(n.size)  # the units binned: the cells, a two-round cell split into its two rounds
    if sum_h2 is not None:    # whose entropies are exactly mean -/+ sd
        two = np.flatnonzero(~point & (n == 2))
        sd = np.sqrt(np.maximum(np.asarray(sum_h2, dtype=np.float64)[two] / 2.0 - mean[two] ** 2, 0.0))
        unit = np.r_[unit, two]
        n = np.r_[np.where(~point & (n == 2), 1.0, n), np.ones(two.size)]
        mean = np.r_[mean, mean[two] + sd]
        mean[two] -= sd
        point = np.r_[point | (n[:point.size] == 1), np.ones(two.size, dtype=bool)]
        hbin, lo, hi, a, L = (np.asarray(x)[unit] for x in (hbin, lo, hi, a, L))
    width = hi - lo
    mu = np.where(width > 0, (mean - lo) / np.where(width > 0, width, 1.0), 0.5)
    W = n.sum()
    row: dict = {}
    curve = None
    parts = None
    fitted = bool(np.all(np.isfinite(b)))
    if W >= n_bins:
        c, k, w, u = equal_count_parts(hbin, n, mu, n_bins, point)
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
        parts = (unit[c], k, w)
    B = int(min(int(ceiling_bins), int(W // 2)))
    row["ceiling_bins"] = B
    abar = (n @ a) / W
    sst = float(n @ (a - abar) ** 2)
    if B >= 2 and W > B and sst > 0:
        c, k, w, _ = equal_count_parts(hbin, n, mu, B, point)
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
