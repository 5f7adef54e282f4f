"""Prompt-clustered inference primitives.

Rounds of one prompt are correlated (they share the document, the answer
template and the drafter's luck), so every interval and p-value in the
toolkit treats the *prompt* as the independent unit:

* :func:`cluster_codes` - integer prompt-cluster ids (cluster = (task, prompt_id)).
* :func:`design_sums` - per-cluster score and information sums of a model whose
  linear index is ``b0 - b1 h`` (the law's MLE and least squares, the evidence fits).
* :func:`clustered_covariance` - THE clustered covariance of the toolkit: CR1 (the
  cluster-robust sandwich with the G/(G-1) factor) or CR3 (the cluster jackknife) from
  per-cluster score and information sums, optionally stratified (clusters nested in
  strata, e.g. prompt buckets within tasks). Used with Student-t(G-1) critical values.
* :func:`cr1_covariance`, :func:`cr3_covariance` - the two estimators on their own.
* :func:`clustered_mean` - a mean with its CR1 standard error.
* :func:`studentize_factor`, :func:`studentized_percentile` - a prompt bootstrap scaled to the CR1 t
  interval's spread (few prompts).
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


def t_crits(n_clusters, level: float = 0.95) -> np.ndarray:
    """:func:`t_crit` for an array of cluster counts (one scipy call)."""
    df = np.maximum(np.asarray(n_clusters, dtype=np.int64) - 1, 1)
    return special.stdtrit(df, 0.5 + level / 2.0)


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


def design_sums(h: np.ndarray, resid: np.ndarray, curv: np.ndarray, codes: np.ndarray, n_clusters: int,
                weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster score sums ``u`` (G, 2) and information sums ``info_g`` (G, 2, 2) of a model
    whose linear index is ``b0 - b1 h`` (design ``x = (1, -h)``).

    A round contributes the score ``w resid x`` and the information ``w curv x x^T``: for a
    binomial logit ``resid = s - n p`` and ``curv = n p (1 - p)``; for least squares of a mean
    ``m(b0 - b1 h)`` with derivative ``dm``, ``resid = dm (y - m)`` and ``curv = dm^2``.
    ``resid`` and ``curv`` are OVERWRITTEN (the sums are taken in place, without an (n, 2)
    matrix: this runs on 10^7 rounds); pass arrays you own.
    """
    G = int(n_clusters)
    if weights is not None:
        resid *= weights
        curv *= weights
    u = np.empty((G, 2))
    u[:, 0] = np.bincount(codes, resid, G)
    resid *= h
    u[:, 1] = -np.bincount(codes, resid, G)
    info_g = np.empty((G, 2, 2))
    info_g[:, 0, 0] = np.bincount(codes, curv, G)
    curv *= h
    info_g[:, 0, 1] = info_g[:, 1, 0] = -np.bincount(codes, curv, G)
    curv *= h
    info_g[:, 1, 1] = np.bincount(codes, curv, G)
    return u, info_g


def _stratum_ids(strata, G: int) -> tuple[np.ndarray, int] | None:
    if strata is None:
        return None
    s = np.asarray(strata)
    if s.shape != (G,):
        raise ValueError("strata must give one stratum per cluster")
    ids, S = np.unique(s, return_inverse=True)
    return S.ravel(), ids.size


def _centred_cross(d: np.ndarray, factor, sid: tuple[np.ndarray, int] | None) -> np.ndarray:
    """sum_s f(G_s) sum_{g in s} (d_g - dbar_s)(d_g - dbar_s)^T (one stratum when ``sid`` is None)."""
    if sid is None:
        d = d - d.mean(axis=0)
        return factor(d.shape[0]) * d.T @ d
    s, S = sid
    out = np.zeros((d.shape[1], d.shape[1]))
    for k in range(S):
        dk = d[s == k]
        Gk = dk.shape[0]
        if Gk < 2:  # a stratum of one cluster carries no within-stratum variation
            continue
        dk = dk - dk.mean(axis=0)
        out += factor(Gk) * dk.T @ dk
    return out


def clustered_covariance(u: np.ndarray, info_g: np.ndarray | None = None, kind: str = "cr3", *,
                         info: np.ndarray | None = None, strata=None) -> np.ndarray:
    """The prompt-clustered covariance of an M-estimate from per-cluster sums.

    ``u``: (G, p) per-cluster score sums at the estimate; ``info_g``: (G, p, p) per-cluster
    information (negative Hessian) sums (needed for CR3); ``info``: their total (default
    ``info_g.sum(0)``). ``kind="cr1"``: the sandwich ``G/(G-1) I^-1 (sum_g u_g u_g^T) I^-1``;
    ``kind="cr3"``: the cluster jackknife of :func:`cr3_covariance`.

    ``strata`` (one label per cluster, optional): clusters are nested in fixed strata (e.g.
    prompt buckets within tasks: every task is always present and only its prompts are
    sampled). The estimators are then the stratified ones of survey sampling:
    ``sum_s G_s/(G_s-1) sum_{g in s} (u_g - ubar_s)(u_g - ubar_s)^T`` in the CR1 meat and
    ``sum_s (G_s-1)/G_s sum_{g in s} (delta_g - dbar_s)(...)^T`` for CR3. With one stratum
    CR3 is unchanged and CR1 differs only by ``G ubar ubar^T``, zero at the estimate. It
    matters when the model is fitted across strata with few clusters each: a stratum's
    total score is then not zero and, unstratified, counts as sampling noise of its few
    clusters (the interval stops shrinking with more data).
    """
    u = np.asarray(u, dtype=np.float64)
    G = u.shape[0]
    if kind not in ("cr1", "cr3"):
        raise ValueError(f"unknown clustered covariance {kind!r}; choose 'cr1' or 'cr3'")
    if info is None:
        if info_g is None:
            raise ValueError("clustered_covariance needs info_g or info")
        info = info_g.sum(axis=0)
    sid = _stratum_ids(strata, G)
    if kind == "cr1":
        if sid is None:
            return cr1_covariance(u, np.linalg.inv(info), np.arange(G), G)
        if G < 2:
            return np.full_like(info, np.nan, dtype=np.float64)
        bread = np.linalg.inv(info)
        return bread @ _centred_cross(u, lambda g: g / (g - 1.0), sid) @ bread
    if info_g is None:
        raise ValueError("the CR3 covariance needs the per-cluster information info_g")
    if sid is None:
        return cr3_covariance(u, info_g, info)
    if G < 2:
        return np.full_like(info, np.nan, dtype=np.float64)
    return _centred_cross(_jackknife_steps(u, info_g, info), lambda g: (g - 1.0) / g, sid)


def _jackknife_steps(u: np.ndarray, info_g: np.ndarray, info: np.ndarray) -> np.ndarray:
    """delta_g = (info - info_g)^-1 u_g (CR1 term info^-1 u_g where the rest is singular)."""
    rest = info[None, :, :] - info_g
    delta = np.empty_like(u)
    if u.shape[1] == 2:  # two parameters (every law fit): Cramer's rule, vectorised over the clusters
        r00, r01, r10, r11 = rest[:, 0, 0], rest[:, 0, 1], rest[:, 1, 0], rest[:, 1, 1]
        det = r00 * r11 - r01 * r10
        ok = np.abs(det) > 1e-12 * max(abs(np.linalg.det(info)), 1e-300)
        with np.errstate(divide="ignore", invalid="ignore"):
            delta[:, 0] = (r11 * u[:, 0] - r01 * u[:, 1]) / det
            delta[:, 1] = (r00 * u[:, 1] - r10 * u[:, 0]) / det
        if (~ok).any():
            delta[~ok] = u[~ok] @ np.linalg.inv(info).T
        return delta
    det = np.linalg.det(rest)
    ok = np.abs(det) > 1e-12 * max(abs(np.linalg.det(info)), 1e-300)
    if ok.any():
        delta[ok] = np.linalg.solve(rest[ok], u[ok][:, :, None])[:, :, 0]
    if (~ok).any():
        delta[~ok] = u[~ok] @ np.linalg.inv(info).T
    return delta


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
    delta = _jackknife_steps(u, info_g, info)
    delta -= delta.mean(axis=0)
    return (G - 1.0) / G * delta.T @ delta


def clustered_mean(y: np.ndarray, codes: np.ndarray, n_clusters: int, weights: np.ndarray | None = None, *,
                   strata=None, counts: np.ndarray | None = None):
    """Mean of ``y`` and its CR1 standard error treating clusters as the units.

    Returns (mean, se, G_effective) where G_effective counts clusters with rows.
    ``strata``: one label per cluster (0..G-1) when clusters are nested in fixed strata;
    the cluster totals are then centred within their stratum (as in
    :func:`clustered_covariance`). ``counts`` (unweighted only): the rounds per cluster, if
    already counted (the centred totals are then the totals less mu times the counts: one pass,
    no round-sized temporary).
    """
    y = np.asarray(y, dtype=np.float64)
    if weights is None:  # unit weights, not materialised (this runs on 10^7 rounds)
        n = float(y.size)
        if n <= 0:
            return np.nan, np.nan, 0
        mu = float(y.sum() / n)
        if counts is None:
            e = np.bincount(codes, y - mu, n_clusters)
            present = np.bincount(codes, minlength=n_clusters) > 0
        else:
            e = np.bincount(codes, y, n_clusters)
            e -= mu * counts
            present = np.asarray(counts) > 0
    else:
        w = np.asarray(weights, dtype=np.float64)
        n = w.sum()
        if n <= 0:
            return np.nan, np.nan, 0
        mu = float((w * y).sum() / n)
        e = cluster_sums(w * (y - mu), codes, n_clusters)
        present = cluster_sums(w, codes, n_clusters) > 0
    g = int(present.sum())
    if g < 2:
        return mu, np.nan, g
    if strata is not None and np.unique(np.asarray(strata)[present]).size > 1:
        ep = e[present][:, None]
        var = float(_centred_cross(ep, lambda k: k / (k - 1.0), _stratum_ids(np.asarray(strata)[present], g))[0, 0])
        return mu, float(np.sqrt(var)) / n, g
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


def studentize_factor(n_clusters: int, level: float = 0.95, strata: int = 1) -> float:
    """``t(G - H) / z x sqrt(G / (G - H))`` at ``level`` (G clusters in H strata): the scale that gives
    a prompt bootstrap's deviations from the point estimate the spread of the CR1 t interval. A
    percentile bootstrap over few prompts is too narrow twice over (its variance is the plug-in
    one, (G - H) / G of CR1's, and its quantiles are the normal's, not t(G - H)'s): with 5 prompts
    it covered 76-82% at 95%. About 1 from 30 prompts on."""
    G, H = int(n_clusters), max(int(strata), 1)
    z = float(special.ndtri(0.5 + level / 2.0))
    return t_crit(G - H + 1, level) / z * float(np.sqrt(G / max(G - H, 1)))


def studentized_percentile(draws: np.ndarray, estimate: float, n_clusters: int, level: float = 0.95,
                           strata: int = 1, log: bool = False):
    """Percentile interval of prompt-bootstrap ``draws`` whose deviations from ``estimate`` are scaled
    by :func:`studentize_factor` (on the log scale with ``log``: a positive ratio stays positive)."""
    c = studentize_factor(n_clusters, level, strata)
    d = np.asarray(draws, dtype=np.float64)
    if log:
        with np.errstate(invalid="ignore", divide="ignore"):
            lo, hi = percentile_interval(np.log(estimate) + c * (np.log(d) - np.log(estimate)), level)
        return float(np.exp(lo)), float(np.exp(hi))
    lo, hi = percentile_interval(estimate + c * (d - estimate), level)
    return float(lo), float(hi)
