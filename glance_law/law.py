"""The affine-logit draftability law.

    logit p(H) = b0 - b1 * H,      E[a | H] = M(p) = p (1 - p^L) / (1 - p)

``a`` is the accepted draft length (bonus excluded) and ``L`` the round's
horizon. The run-length model behind it is the truncated geometric

    P(a = k) = p^k (1 - p)   for k < L,      P(a = L) = p^L,

whose likelihood ``p^a (1-p)^[a<L]`` is that of ``a`` successes and
``[a<L]`` failures of a Bernoulli(p) trial. Maximum likelihood of (b0, b1) is
therefore a logistic regression with those counts: the log-likelihood is
concave in (b0, b1) and Newton's method solves it exactly
(:func:`fit_affine_logit`).

This module holds the numeric core (pure numpy); the grouped fit with
intervals, curves and checks builds on it.
"""
from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["match_prob", "truncated_mean", "expected_accepted", "loglik", "fit_affine_logit",
           "law_supremum", "cap"]


def match_prob(H, b0: float, b1: float) -> np.ndarray:
    """p(H) = sigmoid(b0 - b1 H)."""
    return special.expit(b0 - b1 * np.asarray(H, dtype=np.float64))


def truncated_mean(p, L) -> np.ndarray:
    """M(p) = sum_{l=1}^{L} p^l = p (1 - p^L) / (1 - p), with M(1) = L (vectorised)."""
    p = np.asarray(p, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = p * -np.expm1(L * np.log(np.where(p > 0, p, 1.0))) / (1.0 - p)
    out = np.where(p <= 0, 0.0, out)
    return np.where(p >= 1.0, L, out)


def expected_accepted(H, b0: float, b1: float, L) -> np.ndarray:
    """The law's conditional mean E[a | H] = M(sigmoid(b0 - b1 H))."""
    return truncated_mean(match_prob(H, b0, b1), L)


def cap(b0: float) -> float:
    """The fit-free cap e^b0 on the law's conditional mean (Theorem 2A)."""
    return float(np.exp(b0))


def law_supremum(b0: float, L: int) -> float:
    """sup_H E[a|H] = M(sigmoid(b0)) = e^b0 (1 - sigmoid(b0)^L) <= e^b0."""
    if L < 1:
        raise ValueError("L must be >= 1")
    p = special.expit(b0)
    return float(np.exp(b0) * -np.expm1(L * np.log(p)))


def _successes_failures(a, L):
    a = np.asarray(a, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    return a, (a < L).astype(np.float64)


def loglik(b, H, a, L, weight=None, per_round: bool = False):
    """Log-likelihood of the truncated geometric under the affine logit.

    ``b = (b0, b1)``; ``H``, ``a``, ``L`` arrays of rounds; ``weight`` optional
    counts (for reduced tables). ``per_round=True`` returns the per-round terms.
    """
    b0, b1 = float(b[0]), float(b[1])
    eta = b0 - b1 * np.asarray(H, dtype=np.float64)
    s, f = _successes_failures(a, L)
    # log p = -softplus(-eta), log(1-p) = -softplus(eta)
    ll = -s * np.logaddexp(0.0, -eta) - f * np.logaddexp(0.0, eta)
    if weight is not None:
        ll = ll * np.asarray(weight, dtype=np.float64)
    return ll if per_round else float(ll.sum())


def _design(H):
    H = np.asarray(H, dtype=np.float64)
    return np.column_stack([np.ones_like(H), -H])


def score_and_information(b, H, a, L, weight=None):
    """Per-round score contributions (n, 2) and the observed information (2, 2).

    With ``x = (1, -H)``, ``eta = x.b``, ``p = sigmoid(eta)``: the per-round score is
    ``x (s - (s + f) p)`` and the information ``sum (s + f) p (1 - p) x x^T``.
    """
    X = _design(H)
    s, f = _successes_failures(a, L)
    w = np.ones_like(s) if weight is None else np.asarray(weight, dtype=np.float64)
    p = special.expit(X @ np.asarray(b, dtype=np.float64))
    n_trials = s + f
    resid = s - n_trials * p
    scores = X * (w * resid)[:, None]
    info = (X * (w * n_trials * p * (1.0 - p))[:, None]).T @ X
    return scores, info


def fit_affine_logit(H, a, L, weight=None, b_init=(0.0, 0.0), tol: float = 1e-10, max_iter: int = 100):
    """Exact maximum likelihood of (b0, b1) (Newton on the concave log-likelihood).

    Returns ``(b, info, converged)``: the estimate, the observed information at
    it (for sandwich covariances) and whether Newton converged. Raises
    ``ValueError`` when the MLE does not exist (no variation in H, or every
    round accepted nothing / everything, so the likelihood has no maximum).
    """
    H = np.asarray(H, dtype=np.float64)
    if H.size == 0:
        raise ValueError("no rounds to fit")
    s, f = _successes_failures(a, L)
    w = np.ones_like(s) if weight is None else np.asarray(weight, dtype=np.float64)
    if (w * s).sum() == 0:
        raise ValueError("every round accepted 0 tokens: p -> 0 and the law has no finite fit")
    if (w * f).sum() == 0:
        raise ValueError("every round accepted its full horizon: p -> 1 and the law has no finite fit")
    live = w * (s + f) > 0
    if np.ptp(H[live]) == 0:
        raise ValueError("root_entropy does not vary, so the slope b1 is not identified")
    X = _design(H)
    b = np.asarray(b_init, dtype=np.float64).copy()
    if not np.any(b):
        # start at the intercept-only MLE
        pbar = (w * s).sum() / (w * (s + f)).sum()
        b = np.array([special.logit(pbar), 0.0])
    ll_old = loglik(b, H, a, L, w)
    converged = False
    for _ in range(max_iter):
        scores, info = score_and_information(b, H, a, L, w)
        g = scores.sum(axis=0)
        try:
            step = np.linalg.solve(info, g)
        except np.linalg.LinAlgError:
            raise ValueError("the information matrix is singular; the data cannot identify (b0, b1)") from None
        t = 1.0
        while True:  # damped Newton: the log-likelihood is concave, halve until it increases
            b_new = b + t * step
            ll_new = loglik(b_new, H, a, L, w)
            if ll_new >= ll_old - 1e-12 * max(1.0, abs(ll_old)) or t < 1e-8:
                break
            t *= 0.5
        b, ll_old = b_new, ll_new
        if np.max(np.abs(t * step)) < tol * (1.0 + np.max(np.abs(b))):
            converged = True
            break
    if not np.all(np.isfinite(b)) or np.max(np.abs(b)) > 1e6:
        raise ValueError("the MLE diverged (perfect separation); the data do not pin (b0, b1)")
    _, info = score_and_information(b, H, a, L, w)
    return b, info, converged
