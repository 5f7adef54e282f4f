"""Kaplan-Meier survival of accepted runs right-censored at their horizon (pure numpy).

A round that accepted its whole draft (``accepted == horizon``) only says the run is at least
that long; :func:`run_survival` estimates P(run >= k) from such runs. Used by the tail's observed
survival (:meth:`glance_law.tail.TailFit.survival_table`) and the depth-policy fits
(:mod:`glance_law.policy.runs`).
"""
from __future__ import annotations

import numpy as np

__all__ = ["run_survival"]


def run_survival(accepted: np.ndarray, censored: np.ndarray, k_max: int, weights=None) -> np.ndarray:
    """Kaplan-Meier P(run >= k), k = 1..k_max, from runs ``accepted`` of which ``censored`` ones
    only say run >= accepted (the whole draft was accepted). NaN where no run is at risk.

    The hazard at t is P(run = t | run >= t): events are the uncensored runs equal to t, the
    risk set the uncensored runs >= t plus the censored runs > t (a run censored at t says
    nothing about whether it stops at t)."""
    a = np.asarray(accepted, dtype=np.int64)
    c = np.asarray(censored, dtype=bool)
    w = np.ones(a.size) if weights is None else np.asarray(weights, dtype=np.float64)
    k_max = int(k_max)
    out = np.full(k_max, np.nan)
    if a.size == 0 or k_max <= 0:
        return out
    top = max(int(a.max()) + 2, k_max + 1)
    ev = np.bincount(a[~c], weights=w[~c], minlength=top)                       # uncensored runs == t
    unc_ge = np.cumsum(ev[::-1])[::-1]                                           # uncensored runs >= t
    cen = np.bincount(a[c], weights=w[c], minlength=top)
    cen_gt = np.r_[np.cumsum(cen[::-1])[::-1][1:], 0.0]                          # censored runs > t
    risk = unc_ge + cen_gt
    s = 1.0
    for t in range(k_max):                       # S(t + 1) = S(t) * (1 - h_t)
        if risk[t] <= 0:
            break
        s *= 1.0 - ev[t] / risk[t]
        out[t] = s
    return out
