"""The entropy-only noise ceiling (paper, Appendix B.3, Proposition 2).

No function of the root entropy H can explain more of the round-level variance
of the accepted length ``a`` than

    R2_bar = Var(E[a | H]) / Var(a) = 1 - E[Var(a | H)] / Var(a),

so the law's round-level R^2 is read against R2_bar (the *ceiling fraction*).

Estimators (all pure functions over arrays of rounds; ``weights`` are counts of
identical rounds):

* :func:`binned_ceiling` - the paper's nonparametric estimate: cut H into B = 50
  equal-count bins and take the between-bin share of the total sum of squares,
  SSB / SST. It is biased upward: with no H-a relation at all its expectation
  is about (B - 1) / (n - 1), 0.25 at n = 200 rounds. Reported for
  comparability with the paper only.
* :func:`corrected_ceiling` - the ANOVA epsilon-squared correction
  (SSB - (B - 1) MSW) / SST with MSW = SSW / (n - B): the noise part of SSB
  has expectation (B - 1) sigma^2, and MSW estimates sigma^2 without bias (exactly
  for equal-count bins, approximately under the heteroscedasticity of the
  geometric law), so the estimate averages ~0 under the null. It is **not
  clipped** at 0: clipping would bias it upward again; a negative value means
  "no detectable entropy signal".
* :func:`model_ceiling` - the ceiling implied by a fitted model: Var(mu) / (Var(mu) +
  E[v]) for per-round conditional means mu and variances v.
* :func:`ceiling_fraction` - round R^2 / ceiling (NaN when the ceiling is not positive).

Both binned estimators use ``min(bins, n // 2)`` bins so that every bin holds at
least two rounds; the number used is returned with the estimate.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .curve import bin_starts, equal_count_bins, sorted_bins

__all__ = ["NoiseCeiling", "noise_ceiling", "binned_ceiling", "corrected_ceiling", "model_ceiling",
           "ceiling_fraction", "null_expectation"]

DEFAULT_BINS = 50


class NoiseCeiling(NamedTuple):
    """Both binned estimates of the entropy-only ceiling and the bins they used."""

    binned: float       # the paper's SSB / SST (biased upward)
    corrected: float    # epsilon^2 = (SSB - (B - 1) MSW) / SST (unbiased under the null; not clipped)
    bins: int           # number of equal-count bins used
    n: float            # rounds (total weight)


def _anova(H, a, bins: int, weights=None, order=None, position=None, sorted_=False):
    H = np.asarray(H, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    if H.shape != a.shape:
        raise ValueError("H and a must have the same length")
    if bins < 2:
        raise ValueError("the noise ceiling needs at least 2 bins")
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    n_rows = H.size
    n = float(n_rows if w is None else w.sum())
    B = int(min(int(bins), int(n_rows // 2)))
    if B < 2 or n <= B:
        return np.nan, np.nan, np.nan, max(B, 0), n
    if order is None and position is None and sorted_ and w is None:
        # unweighted sorted rounds: the bins are consecutive runs, their sums by reduceat
        starts = bin_starts(n_rows, B)
        abar = float(a.sum()) / n
        sst = 0.0
        for k in range(0, n_rows, 1 << 16):  # about the mean, without a round-sized temporary
            d = a[k:k + (1 << 16)] - abar
            sst += float(np.einsum("i,i->", d, d))
        Wb = np.diff(starts).astype(np.float64)
        present = Wb > 0
        Sb = np.add.reduceat(a, starts[:-1])[present]
        ssb = max(float((Sb ** 2 / Wb[present]).sum() - n * abar ** 2), 0.0)
        return sst, ssb, max(sst - ssb, 0.0), int(present.sum()), n
    if order is None and position is None and sorted_:
        b = sorted_bins(n_rows, B, w)
    else:
        if order is None:
            order = np.argsort(H, kind="stable")
        b = equal_count_bins(order, B, w, position=position if w is None else None)
    wa = a if w is None else w * a
    abar = float(wa.sum()) / n
    d = a - abar
    sst = float(np.einsum("i,i->", d, d if w is None else w * d))
    Wb = np.bincount(b, weights=w, minlength=B).astype(np.float64)
    Sb = np.bincount(b, weights=wa, minlength=B)
    present = Wb > 0
    ssb = float((Sb[present] ** 2 / Wb[present]).sum() - n * abar ** 2)
    ssb = max(ssb, 0.0)  # guard round-off; SSB is a sum of squares
    B_eff = int(present.sum())
    return sst, ssb, max(sst - ssb, 0.0), B_eff, n


def noise_ceiling(H, a, bins: int = DEFAULT_BINS, weights=None, order=None, position=None, *,
                  is_sorted: bool = False) -> NoiseCeiling:
    """The paper's binned ceiling and its bias-corrected version in one pass.

    ``order`` (argsort of H) and ``position`` (each round's place in it, see
    :func:`glance_law.stats.curve.sort_key`) may be passed to reuse a sort; ``is_sorted=True``
    says H is already in ascending order. NaN when there
    are fewer than 4 rounds or ``a`` does not vary.
    """
    sst, ssb, ssw, B, n = _anova(H, a, bins, weights, order, position, is_sorted)
    if not np.isfinite(sst) or sst <= 0:
        return NoiseCeiling(np.nan, np.nan, int(B), n)
    msw = ssw / (n - B)
    return NoiseCeiling(float(ssb / sst), float((ssb - (B - 1) * msw) / sst), int(B), n)


def binned_ceiling(H, a, bins: int = DEFAULT_BINS, weights=None) -> float:
    """The paper's 50-bin between/total estimate SSB / SST (biased upward; see the module doc)."""
    return noise_ceiling(H, a, bins, weights).binned


def corrected_ceiling(H, a, bins: int = DEFAULT_BINS, weights=None) -> float:
    """The bias-corrected (epsilon-squared) ceiling (SSB - (B-1) MSW) / SST, not clipped."""
    return noise_ceiling(H, a, bins, weights).corrected


def null_expectation(n: int, bins: int = DEFAULT_BINS) -> float:
    """Approximate expectation of the binned SSB/SST with no signal: (B - 1) / (n - 1)."""
    B = min(int(bins), int(n) // 2)
    return (B - 1) / (n - 1) if n > 1 and B >= 2 else float("nan")


def model_ceiling(mean, var, weights=None) -> float:
    """Ceiling implied by a model: Var(mean) / (Var(mean) + E[var]) over the rounds.

    ``mean``/``var``: each round's model conditional mean and variance of a
    (for the law: M(p) and the capped geometric variance).
    """
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    w = np.ones_like(mean) if weights is None else np.asarray(weights, dtype=np.float64)
    W = w.sum()
    if W <= 0:
        return float("nan")
    mbar = (w * mean).sum() / W
    between = (w * (mean - mbar) ** 2).sum() / W
    within = (w * var).sum() / W
    tot = between + within
    return float(between / tot) if tot > 0 else float("nan")


def ceiling_fraction(r2_round: float, ceiling: float) -> float:
    """The share of the entropy-only ceiling a predictor realises: R^2 / ceiling.

    NaN when the ceiling is not positive (no detectable signal: the fraction is
    then undefined, not large).
    """
    if not np.isfinite(ceiling) or not np.isfinite(r2_round) or ceiling <= 0:
        return float("nan")
    return float(r2_round / ceiling)
