"""Rank correlation with prompt-clustered inference.

* :func:`spearman_clustered` - Spearman's rho with a prompt-aware p-value.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from .cluster import cluster_sums
from .curve import midranks

__all__ = ["spearman_clustered"]


def spearman_clustered(x: np.ndarray, y: np.ndarray, codes: np.ndarray, n_clusters: int, *,
                       ranks: tuple[np.ndarray, np.ndarray] | None = None,
                       weights: np.ndarray | None = None, overwrite_ranks: bool = False,
                       counts: np.ndarray | None = None):
    """Spearman's rho with a prompt-aware two-sided p-value.

    rho is Pearson's correlation of the ranks. Its test regresses the
    standardised rank of y on the standardised rank of x (the slope equals rho)
    and uses the CR1 cluster-robust standard error of the slope with a
    Student-t(G-1) reference, so rounds of one prompt count as one unit of
    evidence. Returns (rho, p_two_sided, se).

    ``ranks``: optional precomputed mid-ranks ``(rank_x, rank_y)`` (e.g. from a
    sort shared with other statistics). ``weights``: optional counts of
    identical rows (reduced tables); the ranks are then weighted mid-ranks
    (:func:`glance_law.stats.curve.midranks` with the same weights).
    ``overwrite_ranks=True``: the given ranks are standardised in place (no round-sized copies;
    this runs on 10^7 rounds). ``counts``: the (weighted) rounds per cluster, if already counted.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = len(x)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    if (n if w is None else w.sum()) < 3:
        return np.nan, np.nan, np.nan
    if ranks is not None:
        rx, ry = (np.asarray(r, dtype=np.float64) for r in ranks)
    elif weights is None:
        from scipy.stats import rankdata  # lazy: scipy.stats costs ~45 MB to import
        rx = rankdata(x)
        ry = rankdata(y)
    else:
        rx, ry = midranks(x, weights=w), midranks(y, weights=w)

    def wsum(v):  # weighted sum without materialising unit weights
        return float(v.sum()) if w is None else float(np.einsum("i,i->", w, v))

    W = float(n) if w is None else float(w.sum())

    def wdot(u, v):  # weighted sum of u * v without a product array
        return float(np.einsum("i,i->", u, v)) if w is None else float(np.einsum("i,i,i->", w, u, v))

    if overwrite_ranks and ranks is not None:
        zx, zy = rx, ry
        zx -= wsum(rx) / W
        zy -= wsum(ry) / W
    else:
        zx = rx - wsum(rx) / W
        zy = ry - wsum(ry) / W
    sx, sy = np.sqrt(wdot(zx, zx) / W), np.sqrt(wdot(zy, zy) / W)
    if sx == 0 or sy == 0:
        return np.nan, np.nan, np.nan
    zx /= sx
    zy /= sy
    rho = wdot(zx, zy) / W
    for k in range(0, n, 1 << 16):      # residual of the rank regression times zx (no round-sized temporary)
        zk = zy[k:k + (1 << 16)]
        zk -= rho * zx[k:k + (1 << 16)]
        zk *= zx[k:k + (1 << 16)]
    if w is not None:
        zy *= w
    u = cluster_sums(zy, codes, n_clusters)
    g = int(np.count_nonzero(np.bincount(codes, weights=w, minlength=n_clusters) if counts is None else counts))
    if g < 2:
        return rho, np.nan, np.nan
    se = float(np.sqrt(g / (g - 1.0) * (u ** 2).sum()) / wdot(zx, zx))
    if se == 0:
        return rho, 0.0 if rho != 0 else 1.0, se
    t = rho / se
    p = float(2 * special.stdtr(g - 1, -abs(t)))
    return rho, p, se
