"""Every statistic of the law for one group of rounds (used by :func:`glance_law.law.fit_law`).

:func:`evaluate` takes the arrays of one (drafter, group) - entropies, accepted
lengths, horizons, optional weights, prompt-cluster ids and the entropy sort
order - and returns the group's table row, its decile curve and its four
checks: descriptive statistics with prompt-clustered intervals, the noise
ceilings, the decile curve and isotonic fit, the clustered rank test, the MLE
(or NLS) with CR1 or cluster-bootstrap intervals, the three R^2, the
model-implied ceiling and the floor against the cap and the law's supremum.
It is written to keep few round-sized arrays alive at once (10^7 rounds fit in
a few GB). The theory is in ``docs/theory-law.md``.
"""
from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from glance_law.data import selection as _sel
from glance_law.stats import ceiling as _ceiling
from glance_law.stats import curve as _curve
from glance_law.stats.cluster import (
    bootstrap_counts,
    clustered_mean,
    cr1_covariance,
    cr3_covariance,
    percentile_interval,
    t_crit,
)
from glance_law.stats.ranks import spearman_clustered

from . import model as _law
from .result import CURVE_COLUMNS, LAW_COLUMNS, LAW_EXTRA_COLUMNS, LawChecks

__all__ = ["evaluate"]


def _fit_b(method, H, a, L, w, b_init=None):
    if method == "nls":
        return _law.fit_conditional_mean(H, a, L, w, b_init=b_init)[0]
    return _law.fit_affine_logit(H, a, L, w, b_init=(0.0, 0.0) if b_init is None else b_init)[0]


def _cluster_cov(method, b, H, a, L, w, cl, G, p=None, kind="cr3"):
    """Prompt-clustered covariance of (b0, b1): ``kind="cr3"`` (default, the cluster
    jackknife: one Newton step per deleted prompt, :func:`glance_law.stats.cluster.cr3_covariance`)
    or ``"cr1"`` (the sandwich with the G/(G-1) factor). ``p``: fitted match probabilities."""
    if method == "nls":
        M, J = _law.mean_and_jacobian(b, H, L)
        r = a - M
        wj = J if w is None else J * w[:, None]
        u = np.stack([np.bincount(cl, wj[:, j] * r, G) for j in range(2)], axis=1)
        info_g = np.empty((G, 2, 2))
        for i in range(2):
            for j in range(i, 2):
                info_g[:, i, j] = info_g[:, j, i] = np.bincount(cl, wj[:, i] * J[:, j], G)
    else:
        # MLE: the score of a round is x (s - (s + f) p) with x = (1, -H); it is summed per
        # prompt directly, without an (n, 2) score matrix (this runs on 10^7 rounds)
        if p is None:
            p = _law.match_prob(H, b[0], b[1])
        t = (a < L).astype(np.float64)
        t += a                                   # s + f
        v = t * p
        np.subtract(a, v, out=t)                 # resid = s - (s + f) p
        if w is not None:
            t *= w
        u = np.empty((G, 2))
        u[:, 0] = np.bincount(cl, t, G)
        t *= H
        u[:, 1] = -np.bincount(cl, t, G)
        del t
        v -= v * p                               # (s + f) p (1 - p): the information weights
        if w is not None:
            v *= w
        info_g = np.empty((G, 2, 2))
        info_g[:, 0, 0] = np.bincount(cl, v, G)
        v *= H
        info_g[:, 0, 1] = info_g[:, 1, 0] = -np.bincount(cl, v, G)
        v *= H
        info_g[:, 1, 1] = np.bincount(cl, v, G)
    info = info_g.sum(axis=0)
    if kind == "cr1":
        # the per-prompt sums are the "observations" of the sandwich's meat
        return cr1_covariance(u, np.linalg.inv(info), np.arange(G), G)
    return cr3_covariance(u, info_g, info)


def _nan_row() -> dict:
    return {c: np.nan for c in LAW_COLUMNS + LAW_EXTRA_COLUMNS}


def _law_moments(p, L, w):
    """Weighted sums of M, M^2 and Var(a|H) under the law, in chunks (bounded temporaries)."""
    s1 = s2 = sv = 0.0
    for k in range(0, p.size, _law.CHUNK):
        sl = slice(k, k + _law.CHUNK)
        M = _law.truncated_mean(p[sl], L[sl])
        V = _law.truncated_variance(p[sl], L[sl])
        ws = None if w is None else w[sl]
        s1 += float(M.sum()) if ws is None else _law.dot(ws, M)
        s2 += _law.dot(M, M) if ws is None else _law.dot(ws, M * M)
        sv += float(V.sum()) if ws is None else _law.dot(ws, V)
    return s1, s2, sv


def evaluate(H, a, L, w, cl, order, label, drafter, opt, notes):
    """Every statistic of one group; returns (row, curve frame, checks).

    Written to keep few round-sized arrays alive at once (10^7 rounds must fit):
    unit weights are never materialised and intermediates are released early.
    """
    where = f"{label}" if drafter is None else f"{drafter}/{label}"
    cl, G = _sel.compact(cl)
    n = a.size
    W = float(n) if w is None else float(w.sum())

    def wsum(x):
        return float(x.sum()) if w is None else _law.dot(w, x)

    def wbin(bins, x, B):  # per-bin weighted sums
        return np.bincount(bins, x if w is None else w * x, B)

    level = opt["level"]
    row = _nan_row()
    row.update(task=label, rounds=int(round(W)), prompts=G, method=opt["method"], interval=opt["interval"],
               level=level, horizon=int(L.max()), converged=False)
    row["mean_entropy"] = wsum(H) / W
    mean_a, se_a, _ = clustered_mean(a, cl, G, w)
    row["mean_accepted"], row["tau"] = mean_a, mean_a + 1.0
    half = t_crit(G, level) * se_a if G >= 2 else np.nan
    row["mean_accepted_lo"], row["mean_accepted_hi"] = mean_a - half, mean_a + half
    row["p_ge8"] = (np.count_nonzero(a >= 8) if w is None else _law.dot(w, (a >= 8).astype(np.float64))) / W
    if L.min() != L.max():
        notes.append(f"{where}: horizons vary (L = {int(L.min())}..{int(L.max())}); the likelihood and the law's "
                     "mean use each round's own L; sup and the horizon column use the largest")
    key = _curve.sort_key(H, order)
    ceil = _ceiling.noise_ceiling(H, a, opt["ceiling_bins"], w, order, key.position)
    row["ceiling"], row["ceiling_binned"], row["ceiling_bins"] = ceil.corrected, ceil.binned, ceil.bins
    if ceil.bins >= 2 and ceil.n < 5 * ceil.bins:
        notes.append(f"{where}: {ceil.n:.0f} rounds in {ceil.bins} ceiling bins (fewer than 5 per bin): the "
                     "ceiling estimate is noisy here and ceiling_fraction can exceed 1; read them from ~250 rounds up")
    B = opt["bins"]
    curve = pd.DataFrame({c: pd.Series(dtype=float) for c in CURVE_COLUMNS})
    bins = bm = floor = None
    if n >= B:
        bins = _curve.equal_count_bins(order, B, w, key.position)
        bm = _curve.binned_means(a, bins, B, cl, G, w, level)
        Wb = bm["n"]
        curve = pd.DataFrame({"bin": np.arange(1, B + 1), "n": Wb, "mean_entropy": wbin(bins, H, B) / Wb,
                              "mean_accepted": bm["mean"], "lo": bm["lo"], "hi": bm["hi"],
                              "predicted": np.nan, "isotonic": np.nan})
        if w is None:
            curve["n"] = curve["n"].astype(np.int64)
        floor = np.flatnonzero(bins == 0)
        row["floor_rounds"] = int(round(Wb[0]))
        row["floor_mean"], row["floor_mean_lo"], row["floor_mean_hi"] = bm["mean"][0], bm["lo"][0], bm["hi"][0]
        iso = _curve.isotonic_decreasing(H, a, weights=w, key=key)
        curve["isotonic"] = wbin(bins, iso, B) / Wb
        del iso
        row["r2_isotonic"] = _curve.r_squared(curve["mean_accepted"], curve["isotonic"])
    else:
        notes.append(f"{where}: fewer rounds ({n}) than curve bins ({B}); no decile curve")
    ranks = (_curve.midranks(H, weights=w, key=key), _curve.integer_midranks(a, w))
    del key
    rho, rho_p, _ = spearman_clustered(H, a, cl, G, ranks=ranks, weights=w)
    del ranks
    row["rho"], row["rho_p"] = rho, rho_p
    try:
        b = _fit_b(opt["method"], H, a, L, w)
        row["converged"] = True
    except ValueError as exc:
        notes.append(f"{where}: the law could not be fitted ({exc})")
        b = None
    if b is not None:
        b0, b1 = float(b[0]), float(b[1])
        row["b0"], row["b1"] = b0, b1
        p = _law.match_prob(H, b0, b1)
        if G < 2:
            lo = hi = np.array([np.nan, np.nan])
            notes.append(f"{where}: a single prompt; no prompt-clustered interval")
        elif opt["n_boot"] > 0:
            lo, hi, cdraw = _bootstrap(b, H, a, L, w, cl, G, bins, B, label, drafter, opt, notes, where)
            if bm is not None and cdraw is not None:
                curve["lo"], curve["hi"] = cdraw[0], cdraw[1]
                row["floor_mean_lo"], row["floor_mean_hi"] = cdraw[0][0], cdraw[1][0]
                row["mean_accepted_lo"], row["mean_accepted_hi"] = cdraw[2], cdraw[3]
        else:
            cov = _cluster_cov(opt["method"], b, H, a, L, w, cl, G, p, opt.get("cov", "cr3"))
            half = t_crit(G, level) * np.sqrt(np.maximum(np.diag(cov), 0.0))
            lo, hi = b - half, b + half
        row["b0_lo"], row["b1_lo"] = float(lo[0]), float(lo[1])
        row["b0_hi"], row["b1_hi"] = float(hi[0]), float(hi[1])
        row["loglik"] = _law.loglik(b, H, a, L, w)
        row["cap"] = _law.cap(b0)
        # the model-implied ceiling Var(M) / (Var(M) + E Var(a|H)) (ceiling.model_ceiling, in chunks)
        s1, s2, sv = _law_moments(p, L, w)
        between = max(s2 / W - (s1 / W) ** 2, 0.0)
        row["ceiling_model"] = between / (between + sv / W) if between + sv > 0 else np.nan
        pred = _law.truncated_mean(p, L)
        del p
        if bm is not None:
            curve["predicted"] = wbin(bins, pred, B) / bm["n"]
            row["r2_curve"] = _curve.r_squared(curve["mean_accepted"], curve["predicted"])
        pred -= a                                          # residuals, in place
        sse = wsum(pred * pred)
        d = a - mean_a
        sst = wsum(d * d)
        del pred, d
        row["r2_round"] = 1.0 - sse / sst if sst > 0 else np.nan
        row["ceiling_fraction"] = _ceiling.ceiling_fraction(row["r2_round"], row["ceiling"])
        if floor is not None and floor.size:
            # the law's own supremum M(sigmoid(b0)) = e^b0 (1 - sigmoid(b0)^L) at the group's largest L
            # (M grows with L: no round of the group can be predicted more; rounds cut short by the
            # end of the output carry L = a, so an average over the floor rounds' own L would not be)
            row["sup"] = float(_law.law_supremum(b0, int(L.max())))
    checks = LawChecks(group=label, drafter=str(drafter if drafter is not None else "unknown"),
                       b1=row["b1"], b1_lo=row["b1_lo"], b1_hi=row["b1_hi"], rho=rho, rho_p=rho_p,
                       r2_curve=row["r2_curve"], r2_isotonic=row["r2_isotonic"], alpha=opt["alpha"],
                       min_r2_curve=opt["min_r2_curve"], min_r2_isotonic=opt["min_r2_isotonic"])
    flags = checks.as_dict()
    row.update(holds=checks.passed, holds_slope=flags["slope"], holds_rank=flags["rank"],
               holds_curve=flags["curve"], holds_monotone=flags["monotone"],
               failed_checks=",".join(checks.failed()))
    return row, curve, checks


def _bootstrap(b, H, a, L, w, cl, G, bins, B, label, drafter, opt, notes, where):
    """Prompt-level cluster bootstrap: percentile intervals of (b0, b1), the bin means and the mean.

    Each replicate draws G prompts with replacement (multinomial multiplicities),
    refits from the full-sample estimate, and recomputes the bin means with the
    same bin edges.
    """
    n_boot, level = opt["n_boot"], opt["level"]
    tag = zlib.crc32(f"{drafter}\0{label}".encode())
    rng = np.random.default_rng([int(opt["seed"]), tag])
    draws = np.full((n_boot, 2), np.nan)
    cdraws = np.full((n_boot, B), np.nan) if bins is not None else None
    mdraws = np.full(n_boot, np.nan)
    base = np.ones_like(a) if w is None else w
    k = failed = 0
    for counts in bootstrap_counts(G, n_boot, rng):
        for c in counts:
            wr = base * c[cl]
            try:
                draws[k] = _fit_b(opt["method"], H, a, L, wr, b_init=b)
            except (ValueError, np.linalg.LinAlgError):
                failed += 1
            if cdraws is not None:
                with np.errstate(invalid="ignore", divide="ignore"):
                    cdraws[k] = np.bincount(bins, wr * a, B) / np.bincount(bins, wr, B)
            mdraws[k] = _law.dot(wr, a) / wr.sum()
            k += 1
    if failed:
        notes.append(f"{where}: {failed} of {n_boot} bootstrap replicates could not be refitted "
                     "(left out of the percentile interval)")
    if failed > n_boot // 2:
        return np.array([np.nan, np.nan]), np.array([np.nan, np.nan]), None
    lo, hi = percentile_interval(draws, level)
    cur = None
    if cdraws is not None:
        clo, chi = percentile_interval(cdraws, level)
        mlo, mhi = percentile_interval(mdraws, level)
        cur = (clo, chi, float(mlo), float(mhi))
    return lo, hi, cur
