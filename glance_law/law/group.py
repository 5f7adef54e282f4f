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
from scipy import special

from glance_law.data import selection as _sel
from glance_law.stats import ceiling as _ceiling
from glance_law.stats import curve as _curve
from glance_law.stats.cluster import (
    bootstrap_counts,
    clustered_covariance,
    clustered_mean,
    percentile_interval,
    t_crit,
)
from glance_law.stats.ranks import spearman_clustered

from . import model as _law
from .result import CURVE_COLUMNS, LAW_COLUMNS, LAW_EXTRA_COLUMNS, LawChecks

__all__ = ["evaluate", "prompt_weights", "informative_size_test"]


def _nan_row() -> dict:
    return {c: np.nan for c in LAW_COLUMNS + LAW_EXTRA_COLUMNS}


NARROW_SPREAD = 0.1  # nats: the 10-90% entropy range under which a slope is flagged (docs/theory-law.md)


def _spread(H, w):
    """The 10th and 90th (weighted) percentiles of H (sorted ascending)."""
    n = H.size
    if w is None:
        return float(H[int(0.1 * (n - 1))]), float(H[int(0.9 * (n - 1))])
    c = np.cumsum(w)
    k = np.minimum(np.searchsorted(c, [0.1 * c[-1], 0.9 * c[-1]]), n - 1)
    return float(H[k[0]]), float(H[k[1]])


def prompt_weights(cl, G: int, w, counts) -> np.ndarray:
    """Round weights under which each prompt's rounds together weigh the same, ``W / G`` (``W``
    the group's rounds, kept as the weights' total): ``w / (the prompt's rounds)`` up to that
    scale. The fit then estimates the prompt-level law: each prompt counts once, however many
    rounds it took (with fixed-length answers, prompts that accept more take fewer rounds, so
    the round-weighted law leans towards the prompts that accept less; docs/theory-law.md)."""
    tot = np.asarray(counts, dtype=np.float64) if w is None else np.bincount(cl, w, G)
    live = tot > 0
    per = np.zeros(G)
    per[live] = tot.sum() / np.count_nonzero(live) / tot[live]
    return per[cl] if w is None else w * per[cl]


def _per_bin(total, n):
    """Per-bin means; NaN for a bin no round fell in (a reduced table's cell is never split, so
    with fewer cells than bins some equal-count bins stay empty)."""
    total = np.asarray(total, dtype=np.float64)
    return np.divide(total, n, out=np.full(total.shape, np.nan), where=np.asarray(n) > 0)


def evaluate(H, a, L, w, cl, label, drafter, opt, notes, ends=None, compacted=None):
    """Every statistic of one group; returns (row, curve frame, checks).

    The rounds come sorted by entropy (stable: ties in row order), so the one order the
    decile bins, the ceiling's bins, the isotonic fit and the ranks share is the identity:
    every pass below is sequential.

    ``compacted``: ``(G, counts)`` when ``cl`` is already compact (0..G-1, counts per prompt).
    ``ends``: optional mask of output-ending rounds (``selection.output_ending``): they enter
    the likelihood as completed runs and are left out of the checks that read ``a`` raw
    (decile curve, isotonic fit, rank test, ceilings, r2_round).
    Written to keep few round-sized arrays alive at once (10^7 rounds must fit):
    unit weights are never materialised and intermediates are released early.
    """
    where = f"{label}" if drafter is None else f"{drafter}/{label}"
    # compacted: (G, rounds per prompt) when cl is already 0..G-1 (the caller compacted it)
    G, counts = compacted if compacted is not None else (None, None)
    if compacted is None:
        cl, G, counts = _sel.compact_counts(cl)
    if opt.get("weighting") == "prompt":
        w = prompt_weights(cl, G, w, counts)
    W = float(a.size) if w is None else float(w.sum())
    keep, Hc, ac, clc, wc = _check_rounds(H, a, cl, w, ends, where, notes)
    row = _describe(H, a, L, w, cl, G, counts, W, label, opt, where, notes)
    # unweighted, every statistic below reads the sorted runs directly: no tie ids, no per-round bins
    fast = wc is None
    key = None if fast else _curve.sort_key(Hc, is_sorted=True)
    ceil = _ceiling.noise_ceiling(Hc, ac, opt["ceiling_bins"], wc, is_sorted=True)
    row["ceiling"], row["ceiling_binned"], row["ceiling_bins"] = ceil.corrected, ceil.binned, ceil.bins
    if ceil.bins >= 2 and ceil.n < 5 * ceil.bins:
        notes.append(f"{where}: {ceil.n:.0f} rounds in {ceil.bins} ceiling bins (fewer than 5 per bin): the "
                     "ceiling estimate is noisy here and ceiling_fraction can exceed 1; read them from ~250 rounds up")
    curve, bins, bm, starts, floor = _decile_curve(row, Hc, ac, clc, G, wc, key, opt, where, notes)
    ranks = (_curve.sorted_midranks(Hc) if fast else _curve.midranks(Hc, weights=wc, key=key),
             _curve.integer_midranks(ac, wc))
    del key
    rho, rho_p, _ = spearman_clustered(Hc, ac, clc, G, ranks=ranks, weights=wc, overwrite_ranks=True,
                                       counts=counts if keep is None and w is None else None)
    del ranks
    row["rho"], row["rho_p"] = rho, rho_p
    b, moments = _fit_with_interval(row, curve, H, a, L, w, cl, G, bins, label, drafter, opt, notes, where, keep)
    if b is not None and opt.get("weighting", "round") == "round":
        _informative_sizes(row, H, a, L, w, cl, G, counts, opt, notes, where)
    if b is not None:
        _fitted_statistics(row, curve, b, moments, H, a, L, w, W, keep, ac, wc, bins, bm, starts, floor,
                           opt["bins"], where, notes)
    del moments
    checks = LawChecks(group=label, drafter=str(drafter if drafter is not None else "unknown"),
                       b1=row["b1"], b1_lo=row["b1_lo"], b1_hi=row["b1_hi"], rho=rho, rho_p=rho_p,
                       r2_curve=row["r2_curve"], r2_isotonic=row["r2_isotonic"], alpha=opt["alpha"],
                       min_r2_curve=opt["min_r2_curve"], min_r2_isotonic=opt["min_r2_isotonic"])
    flags = checks.as_dict()
    row.update(holds=checks.passed, holds_slope=flags["slope"], holds_rank=flags["rank"],
               holds_curve=flags["curve"], holds_monotone=flags["monotone"],
               failed_checks=",".join(checks.failed()))
    curve = pd.DataFrame(curve) if curve is not None else \
        pd.DataFrame({c: pd.Series(dtype=float) for c in CURVE_COLUMNS})
    return row, curve, checks


def _check_rounds(H, a, cl, w, ends, where, notes):
    """The rounds the descriptive checks read (all but the output-ending ones): ``(keep, H, a, cl, w)``
    with ``keep`` the mask (None: every round, the arrays themselves)."""
    if ends is None or not ends.any():
        return None, H, a, cl, w
    keep = ~ends
    n_end = int(ends.sum()) if w is None else _law.dot(w, ends.astype(np.float64))
    notes.append(f"{where}: {n_end:.0f} output-ending round(s) (a prompt's last round, cut at the output's "
                 "end to L = a) enter the likelihood as completed runs (p^a) and are left out of the decile "
                 "curve, the isotonic fit, the rank test, the ceilings and r2_round, whose raw a they would "
                 "pull down")
    return keep, H[keep], a[keep], cl[keep], None if w is None else w[keep]


def _describe(H, a, L, w, cl, G, counts, W, label, opt, where, notes) -> dict:
    """The group's row with its descriptive statistics: rounds, prompts, mean entropy, the mean
    accepted length with its prompt-clustered interval, P(a >= 8); a note when horizons vary."""
    level = opt["level"]
    row = _nan_row()
    row.update(task=label, rounds=int(round(W)), prompts=G, method=opt["method"], interval=opt["interval"],
               level=level, horizon=int(L.max()), converged=False)
    row["mean_entropy"] = (float(H.sum()) if w is None else _law.dot(w, H)) / W
    mean_a, se_a, _ = clustered_mean(a, cl, G, w, counts=counts if w is None else None)
    row["mean_accepted"], row["tau"] = mean_a, mean_a + 1.0
    half = t_crit(G, level) * se_a if G >= 2 else np.nan
    row["mean_accepted_lo"], row["mean_accepted_hi"] = mean_a - half, mean_a + half
    row["p_ge8"] = (np.count_nonzero(a >= 8) if w is None else _law.dot(w, (a >= 8).astype(np.float64))) / W
    if L.min() != L.max():
        notes.append(f"{where}: horizons vary (L = {int(L.min())}..{int(L.max())}); the likelihood and the law's "
                     "mean use each round's own L; sup and the horizon column use the largest")
    return row


def _bin_sums(bins, x, B, starts, wc):
    """Per-bin (weighted) sums over the checks' rounds; unweighted, the sorted rounds' bins are
    ``B`` consecutive runs from ``starts``: sums by ``np.add.reduceat``."""
    if starts is not None:
        return np.add.reduceat(x, starts[:-1])
    return np.bincount(bins, x if wc is None else wc * x, B)


def _decile_curve(row, Hc, ac, clc, G, wc, key, opt, where, notes):
    """The decile curve's columns (numpy; None under ``B`` rounds) with its isotonic fit, the floor
    bin's statistics and ``r2_isotonic`` into ``row``. Returns ``(curve, bins, bin means, starts,
    floor)``: the bins and starts the later per-bin sums reuse, ``floor`` whether the lowest bin holds rounds."""
    B, n = opt["bins"], ac.size
    Wc = float(n) if wc is None else float(wc.sum())
    fast = wc is None
    if Wc < B:  # rounds, not rows: a reduced table's row stands for `weight` rounds
        notes.append(f"{where}: fewer rounds ({Wc:.0f}) than curve bins ({B}); no decile curve")
        return None, None, None, None, False
    starts = None
    if fast:  # n >= B: every bin holds at least one round
        starts = _curve.bin_starts(n, B)
        bins = _curve.sorted_bins(n, B) if opt["n_boot"] > 0 else None  # the bootstrap's bin means
    else:
        bins = _curve.sorted_bins(n, B, wc)
    bm = _curve.binned_means(ac, bins, B, clc, G, wc, opt["level"], starts=starts)
    Wb = bm["n"]
    curve = {"bin": np.arange(1, B + 1), "n": Wb.astype(np.int64) if wc is None else Wb,
             "mean_entropy": _per_bin(_bin_sums(bins, Hc, B, starts, wc), Wb), "mean_accepted": bm["mean"],
             "lo": bm["lo"], "hi": bm["hi"], "predicted": np.full(B, np.nan), "isotonic": np.full(B, np.nan)}
    floor = bool(Wb[0] > 0) if fast else bool(np.any(bins == 0))
    row["floor_rounds"] = int(round(Wb[0]))
    row["floor_mean"], row["floor_mean_lo"], row["floor_mean_hi"] = bm["mean"][0], bm["lo"][0], bm["hi"][0]
    if fast:
        curve["isotonic"] = _per_bin(_curve.sorted_isotonic_bin_sums(Hc, ac, starts), Wb)
    else:
        iso = _curve.isotonic_decreasing(Hc, ac, weights=wc, key=key)
        curve["isotonic"] = _per_bin(_bin_sums(bins, iso, B, starts, wc), Wb)
        del iso
    row["r2_isotonic"] = _curve.r_squared(curve["mean_accepted"], curve["isotonic"])
    return curve, bins, bm, starts, floor


def informative_size_test(a, cl, G: int, w=None, counts=None) -> tuple[float, float, int]:
    """Whether a prompt's number of rounds depends on how well it drafts: Spearman's rank
    correlation, over the prompts, of their rounds against their mean accepted length, with its
    p-value (Student-t on G-2 df; one observation per prompt). (rho, p, prompts); NaN with fewer than
    4 prompts or when every prompt has the same rounds."""
    n = np.asarray(counts, dtype=np.float64) if w is None and counts is not None else \
        np.bincount(cl, None if w is None else w, G)
    live = n > 0
    if np.count_nonzero(live) < 4 or np.ptp(n[live]) == 0:
        return np.nan, np.nan, int(np.count_nonzero(live))
    m = np.bincount(cl, a if w is None else w * a, G)[live] / n[live]
    g = int(np.count_nonzero(live))
    x, y = _curve.midranks(n[live]), _curve.midranks(m)
    x, y = x - x.mean(), y - y.mean()
    den = float(np.sqrt((x @ x) * (y @ y)))
    if den == 0:
        return np.nan, np.nan, g
    rho = float(np.clip((x @ y) / den, -1.0, 1.0))
    t = rho * np.sqrt((g - 2) / max(1.0 - rho * rho, 1e-300))
    return rho, float(2.0 * special.stdtr(g - 2, -abs(t))), g


def _informative_sizes(row, H, a, L, w, cl, G, counts, opt, notes, where):
    """The informative-cluster-size check of a round-weighted fit: where rounds per prompt and the
    prompt's acceptance correlate (Spearman, prompt-level p < alpha), one note that says so and what it
    changes - the prompt-weighted fit beside the default when either's estimate falls outside the
    other's interval."""
    rho, p, g = informative_size_test(a, cl, G, w, counts)
    if not (np.isfinite(p) and p < opt["alpha"]):
        return
    wp = prompt_weights(cl, G, w, counts)
    try:
        bp = _law.refit(opt["method"], H, a, L, wp, b_init=(row["b0"], row["b1"]), sorted_h=True)
        u, info_g = _law.cluster_score_information(bp, H, a, L, cl, G, wp, method=opt["method"])
        half = t_crit(G, opt["level"]) * np.sqrt(np.maximum(np.diag(clustered_covariance(u, info_g, "cr3")), 0.0))
    except ValueError:
        return
    lo, hi = bp - half, bp + half
    d_lo, d_hi = np.array([row["b0_lo"], row["b1_lo"]]), np.array([row["b0_hi"], row["b1_hi"]])
    d_b = np.array([row["b0"], row["b1"]])
    beyond = bool(np.any((bp < d_lo) | (bp > d_hi) | (d_b < lo) | (d_b > hi)))
    way = "fall" if rho < 0 else "rise"
    head = (f"{where}: informative prompt sizes - rounds per prompt {way} with the prompt's mean accepted length "
            f"(Spearman {rho:+.2f} over {g} prompts, p = {p:.2g}): the round-weighted law (the default) weighs the "
            f"prompts that take more rounds more")
    if beyond:
        notes.append(head + f"; prompt-weighted (--weight prompt) b0 = {bp[0]:.3f} [{lo[0]:.3f}, {hi[0]:.3f}], "
                     f"b1 = {bp[1]:.3f} [{lo[1]:.3f}, {hi[1]:.3f}] against the default's b0 = {d_b[0]:.3f} "
                     f"[{d_lo[0]:.3f}, {d_hi[0]:.3f}], b1 = {d_b[1]:.3f} [{d_lo[1]:.3f}, {d_hi[1]:.3f}]: they differ "
                     "beyond their intervals (the prompt-level law is the prompt-weighted one; docs/theory-law.md "
                     "section 2)")
    else:
        notes.append(head + f"; the prompt-weighted fit (--weight prompt: b0 = {bp[0]:.3f}, b1 = {bp[1]:.3f}) "
                     "agrees with it within their intervals")


def _fit_with_interval(row, curve, H, a, L, w, cl, G, bins, label, drafter, opt, notes, where, keep):
    """The law's estimate (MLE or NLS) and its interval (CR1/CR3 from the clustered sums, or the
    prompt-level bootstrap, which also redraws the curve's and the mean's intervals) into ``row``.
    Returns ``(b, moments)``: ``b`` None when the law could not be fitted; ``moments`` the fitted
    moments from the MLE's own pass (None otherwise)."""
    # the MLE: Newton and the pass at the estimate (clustered sums, fitted moments) share a pass;
    # the same estimate whatever the interval method
    fused = None
    try:
        if opt["method"] == "mle":
            b, *fused = _law.fit_law_pass(H, a, L, cl, G, w, sorted_h=True)
        else:
            b = _law.refit(opt["method"], H, a, L, w, sorted_h=True)
        row["converged"] = True
    except ValueError as exc:
        notes.append(f"{where}: the law could not be fitted ({exc})")
        return None, None
    row["b0"], row["b1"] = float(b[0]), float(b[1])
    moments, sums = (None, None) if fused is None else (fused[2:], fused[:2])
    fused = None
    if G < 2:
        lo = hi = np.array([np.nan, np.nan])
        notes.append(f"{where}: a single prompt; no prompt-clustered interval")
    elif opt["n_boot"] > 0:
        lo, hi, cdraw = _bootstrap(b, H, a, L, w, cl, G, bins, opt["bins"], label, drafter, opt, notes, where, keep)
        if curve is not None and cdraw is not None:
            curve["lo"], curve["hi"] = cdraw[0], cdraw[1]
            row["floor_mean_lo"], row["floor_mean_hi"] = cdraw[0][0], cdraw[1][0]
            row["mean_accepted_lo"], row["mean_accepted_hi"] = cdraw[2], cdraw[3]
    else:
        if sums is not None:  # the clustered sums, from the same pass
            u, info_g = sums
        else:
            u, info_g = _law.cluster_score_information(b, H, a, L, cl, G, w, method=opt["method"])
        cov = clustered_covariance(u, info_g, opt.get("cov", "cr3"))
        del u, info_g, sums
        half = t_crit(G, opt["level"]) * np.sqrt(np.maximum(np.diag(cov), 0.0))
        lo, hi = b - half, b + half
    row["b0_lo"], row["b1_lo"] = float(lo[0]), float(lo[1])
    row["b0_hi"], row["b1_hi"] = float(hi[0]), float(hi[1])
    row["cap"] = _law.cap(row["b0"])
    return b, moments


def _fitted_statistics(row, curve, b, moments, H, a, L, w, W, keep, ac, wc, bins, bm, starts, floor, B,
                       where, notes):
    """What the fitted law implies, into ``row`` (and the curve's ``predicted`` column): the
    log-likelihood, the model-implied ceiling, r2_curve, r2_round, the ceiling fraction and the
    law's supremum at the floor; a note when the entropy spread is too narrow for the slope."""
    b0, b1 = row["b0"], row["b1"]
    # the law's mean M(p, L), the log-likelihood and the model-implied ceiling
    # Var(M) / (Var(M) + E Var(a|H)) (ceiling.model_ceiling) in one chunked pass
    if moments is None:
        moments = _law.fitted_moments(b, H, a, L, _law.match_prob(H, b0, b1), w)
    pred, row["loglik"], s1, s2, sv = moments
    del moments
    between = max(s2 / W - (s1 / W) ** 2, 0.0)
    row["ceiling_model"] = between / (between + sv / W) if between + sv > 0 else np.nan
    if keep is not None:
        pred = pred[keep]
    if curve is not None:
        curve["predicted"] = _per_bin(_bin_sums(bins, pred, B, starts, wc), bm["n"])
        row["r2_curve"] = _curve.r_squared(curve["mean_accepted"], curve["predicted"])
    pred -= ac                                         # residuals, in place
    sse = _law.dot(pred, pred) if wc is None else _law.dot(wc, pred * pred)
    del pred
    n = ac.size
    Wc = float(n) if wc is None else float(wc.sum())
    mean_c = row["mean_accepted"] if keep is None else (float(ac.sum()) if wc is None else _law.dot(wc, ac)) / Wc
    sst = 0.0
    for k in range(0, n, 1 << 16):  # sum of squares about the mean, without a round-sized temporary
        d = ac[k:k + (1 << 16)] - mean_c
        sst += _law.dot(d, d) if wc is None else _law.dot(wc[k:k + (1 << 16)], d * d)
    row["r2_round"] = 1.0 - sse / sst if sst > 0 else np.nan
    lo_h, hi_h = _spread(H, w)
    if hi_h - lo_h < NARROW_SPREAD:
        notes.append(f"{where}: b1 = {b1:.3g} is fitted on a narrow entropy spread (10-90% of rounds within "
                     f"[{lo_h:.3g}, {hi_h:.3g}] nats, under {NARROW_SPREAD:g}): the slope says how acceptance "
                     "moves inside that range only, not at higher entropy (docs/theory-law.md, 'Entropy "
                     "spread')")
    row["ceiling_fraction"] = _ceiling.ceiling_fraction(row["r2_round"], row["ceiling"])
    if floor:
        # the law's own supremum M(sigmoid(b0)) = e^b0 (1 - sigmoid(b0)^L) at the group's largest L
        # (M grows with L: no round of the group can be predicted more; rounds cut short by the
        # end of the output carry L = a, so an average over the floor rounds' own L would not be)
        row["sup"] = float(_law.law_supremum(b0, int(L.max())))


def _bootstrap(b, H, a, L, w, cl, G, bins, B, label, drafter, opt, notes, where, keep=None):
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
                draws[k] = _law.refit(opt["method"], H, a, L, wr, b_init=b)
            except (ValueError, np.linalg.LinAlgError):
                failed += 1
            if cdraws is not None:
                with np.errstate(invalid="ignore", divide="ignore"):
                    wk, ak = (wr, a) if keep is None else (wr[keep], a[keep])
                    cdraws[k] = np.bincount(bins, wk * ak, B) / np.bincount(bins, wk, B)
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
