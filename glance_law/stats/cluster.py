"""Prompt-clustered inference primitives.

Rounds of one prompt are correlated (they share the document, the answer
template and the drafter's luck), so every interval and p-value in the
toolkit treats the *prompt* as the independent unit:

* :func:`cluster_codes` - integer prompt-cluster ids (cluster = (task, prompt_id)).
* :func:`cr1_covariance` - the cluster-robust sandwich with the CR1 small-sample
  factor G/(G-1), used with Student-t(G-1) critical values.
* :func:`clustered_mean` - a mean with its CR1 standard error.
* :func:`bootstrap_counts` - multinomial cluster multiplicities for the cluster
  (prompt-level) bootstrap, generated in memory-bounded chunks.

All functions are pure numpy over arrays.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy import special  # Student t via special.stdtr/stdtrit: scipy.stats costs ~45 MB to import

from glance_law.data.keys import CLUSTER_BY, cluster_codes  # noqa: F401 (public here: the prompt clusters)


def t_crit(n_clusters: int, level: float = 0.95) -> float:
    """Two-sided Student-t critical value with G-1 degrees of freedom (normal when G is large)."""
    df = max(int(n_clusters) - 1, 1)
    return float(special.stdtrit(df, 0.5 + level / 2.0))


def cluster_sums(values: np.ndarray, codes: np.ndarray, n_clusters: int) -> np.ndarray:
    """Sum ``values`` (n,) or (n, p) within clusters -> (G,) or (G, p)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        return np.bincount(codes, weights=values, minlength=n_clusters)
    return np.stack([np.bincount(codes, weights=values[:, j], minlength=n_clusters)
                     for j in range(values.shape[1])], axis=1)


def cr1_covariance(scores: np.ndarray, bread_inv: np.ndarray, codes: np.ndarray, n_clusters: int) -> np.ndarray:
    """Cluster-robust covariance ``c * B^-1 (sum_g u_g u_g^T) B^-1`` with ``c = G/(G-1)``.

    ``scores``: per-observation score contributions (n, p) at the estimate;
    ``bread_inv``: the inverse of the (negative) Hessian / design cross-product (p, p).
    """
    G = int(n_clusters)
    if G < 2:
        return np.full_like(bread_inv, np.nan)
    u = cluster_sums(scores, codes, G)
    meat = u.T @ u
    return (G / (G - 1.0)) * bread_inv @ meat @ bread_inv


def cr3_covariance(u: np.ndarray, info_g: np.ndarray, info: np.ndarray) -> np.ndarray:
    """Cluster-jackknife (CR3 / CV3) covariance from per-cluster scores and information.

    ``u``: (G, p) per-cluster score sums at the estimate; ``info_g``: (G, p, p)
    per-cluster information (negative Hessian) contributions; ``info``: their sum.
    Deleting cluster g moves the estimate by one Newton step
    ``delta_g = (info - info_g)^-1 u_g``; the covariance is
    ``(G-1)/G * sum_g (delta_g - mean delta)(delta_g - mean delta)^T``.
    Unlike CR1 it inflates the contribution of influential prompts (high leverage),
    which keeps t(G-1) intervals close to nominal with a few dozen uneven prompts
    (MacKinnon, Nielsen and Webb 2023). Clusters whose deletion leaves a singular
    information fall back to the CR1 term ``info^-1 u_g``.
    """
    u = np.asarray(u, dtype=np.float64)
    G = u.shape[0]
    if G < 2:
        return np.full_like(info, np.nan, dtype=np.float64)
    rest = info[None, :, :] - info_g
    delta = np.empty_like(u)
    det = np.linalg.det(rest)
    ok = np.abs(det) > 1e-12 * max(abs(np.linalg.det(info)), 1e-300)
    if ok.any():
        delta[ok] = np.linalg.solve(rest[ok], u[ok][:, :, None])[:, :, 0]
    if (~ok).any():
        delta[~ok] = u[~ok] @ np.linalg.inv(info).T
    delta -= delta.mean(axis=0)
    return (G - 1.0) / G * delta.T @ delta


def clustered_mean(y: np.ndarray, codes: np.ndarray, n_clusters: int, weights: np.ndarray | None = None):
    """Mean of ``y`` and its CR1 standard error treating clusters as the units.

    Returns (mean, se, G_effective) where G_effective counts clusters with rows.
    """
    y = np.asarray(y, dtype=np.float64)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)
    n = w.sum()
    if n <= 0:
        return np.nan, np.nan, 0
    mu = float((w * y).sum() / n)
    e = cluster_sums(w * (y - mu), codes, n_clusters)
    present = cluster_sums(w, codes, n_clusters) > 0
    g = int(present.sum())
    if g < 2:
        return mu, np.nan, g
    var = g / (g - 1.0) * float((e[present] ** 2).sum()) / n ** 2
    return mu, float(np.sqrt(var)), g


def bootstrap_counts(n_clusters: int, n_boot: int, rng: np.random.Generator,
                     chunk: int | None = None) -> Iterator[np.ndarray]:
    """Yield (b, G) arrays of cluster multiplicities for the prompt-level bootstrap.

    Each replicate draws G clusters with replacement (a multinomial count per
    cluster); chunks keep memory under ~64 MB whatever G and ``n_boot`` are.
    """
    G = int(n_clusters)
    if chunk is None:
        chunk = max(1, min(n_boot, (8 * 1024 * 1024) // max(G, 1)))
    p = np.full(G, 1.0 / G)
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        yield rng.multinomial(G, p, size=b)
        done += b


def percentile_interval(draws: np.ndarray, level: float = 0.95, axis: int = 0):
    """Percentile bootstrap interval of ``draws`` along ``axis`` (NaN draws ignored)."""
    a = (1.0 - level) / 2.0
    lo = np.nanquantile(draws, a, axis=axis)
    hi = np.nanquantile(draws, 1.0 - a, axis=axis)
    return lo, hi
