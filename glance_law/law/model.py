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

This module is the numeric core (pure numpy); :func:`glance_law.law.fit_law`
(:mod:`glance_law.law.fit`) builds on it the grouped fit with prompt-clustered intervals, the fairly evaluated decile
curve, the isotonic and round-level R^2, the rank test, the noise ceiling, the
floor against the cap, and the paper's four checks, returned as a frozen
:class:`LawFit`. The theory and every choice are documented in
``docs/theory-law.md``.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from glance_law.stats.cluster import design_sums

__all__ = ["match_prob", "truncated_mean", "truncated_mean_derivative", "truncated_variance",
           "expected_accepted", "loglik", "score_and_information", "cluster_score_information",
           "fit_affine_logit", "fit_conditional_mean", "refit", "mean_and_jacobian", "law_supremum", "cap",
           "fitted_moments", "law_pass", "fit_law_pass"]

CHUNK = 1 << 18  # rows per chunk where a total is accumulated chunk by chunk
_NEWTON_CHUNK = 1 << 15  # rows per chunk of a Newton pass (three float64 buffers stay in cache)
_START_BINS = 4096  # bins of the moment-expansion start of Newton on sorted entropies (_binned_start)
_BINNED_ABOVE = 100_000  # rounds above which Newton starts from a binned or subsampled fit
_EXP_CAP = 709.0  # largest x with e^x finite in float64 (e^709.78 overflows)


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


def truncated_mean_derivative(p, L) -> np.ndarray:
    """M'(p) = sum_{l=1}^{L} l p^(l-1) = (1 - (L+1) p^L + L p^(L+1)) / (1 - p)^2.

    Evaluated as ((1 - p^L) - L q p^L) / q^2 with q = 1 - p and 1 - p^L from
    ``expm1``, which keeps ~1e-12 relative accuracy down to q L = 1e-4; below that
    the expansion L(L+1)/2 - q (L-1)L(L+1)/3 + q^2 (L+1)L(L-1)(L-2)/8 is used
    (M'(1) = L(L+1)/2).
    """
    p = np.asarray(p, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    q = 1.0 - p
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        one_minus_pL = -np.expm1(L * np.log(p))
        closed = (one_minus_pL - L * q * (1.0 - one_minus_pL)) / (q * q)
    series = L * (L + 1.0) / 2.0 - q * (L - 1.0) * L * (L + 1.0) / 3.0 \
        + q * q * (L + 1.0) * L * (L - 1.0) * (L - 2.0) / 8.0
    return np.where(q * np.maximum(L, 1.0) < 1e-4, series, np.where(p <= 0, 1.0, closed))


def truncated_variance(p, L) -> np.ndarray:
    """Var(a) under the truncated geometric: sum_l (2l - 1) p^l - M(p)^2 = 2 p M'(p) - M - M^2.

    (Not M (1 + M), which is the untruncated geometric's variance.)
    """
    p = np.asarray(p, dtype=np.float64)
    M = truncated_mean(p, L)
    return np.maximum(2.0 * p * truncated_mean_derivative(p, L) - M - M * M, 0.0)


def _moments_chunk(pk, logp, Lk, t, wk, q=None):
    """One chunk of :func:`fitted_moments`: the law's mean ``M`` at ``p`` (``logp`` = log p, ``Lk``
    the horizons or one scalar horizon) and the chunk's (weighted) sums of the log-likelihood terms
    ``t``, of ``M``, ``M^2`` and ``Var(a|H) = 2 p M' - M - M^2`` (clipped at 0). ``q``: 1 - p
    computed without cancellation (``e^-eta p``) when ``logp`` is the accurate log p; None takes
    ``1 - pk``, consistent with a ``logp`` taken of the same rounded ``pk``."""
    if q is None:
        q = 1.0 - pk
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        om = -np.expm1(Lk * logp)                                    # 1 - p^L
        M = pk * om / q
        Md = (om - Lk * q * (1.0 - om)) / (q * q)
    if pk.min() <= 0 or pk.max() >= 1.0:
        M = np.where(pk <= 0, 0.0, M)
        M = np.where(pk >= 1.0, Lk, M)
        Md = np.where(pk <= 0, 1.0, Md)
    small = q * np.maximum(Lk, 1.0) < 1e-4 if q.min() < 1e-4 else None
    if small is not None and small.any():
        qs, Ls = q[small], (Lk[small] if np.ndim(Lk) else Lk)
        Md[small] = Ls * (Ls + 1.0) / 2.0 - qs * (Ls - 1.0) * Ls * (Ls + 1.0) / 3.0 \
            + qs * qs * (Ls + 1.0) * Ls * (Ls - 1.0) * (Ls - 2.0) / 8.0
    V = 2.0 * pk * Md - M - M * M
    np.maximum(V, 0.0, out=V)
    if wk is None:
        return M, (float(t.sum()), float(M.sum()), dot(M, M), float(V.sum()))
    return M, (dot(wk, t), dot(wk, M), dot(wk, M * M), dot(wk, V))


def fitted_moments(b, H, a, L, p, weight=None, chunk: int = 1 << 15):
    """One chunked pass at the estimate ``b``: the law's mean ``M(p, L)`` per round (returned as
    an array) and the totals the fit reports - the log-likelihood and the (weighted) sums of
    ``M``, ``M^2`` and ``Var(a|H) = 2 p M' - M - M^2`` (clipped at 0).

    ``p`` = :func:`match_prob` ``(H, b0, b1)``. Same formulas as :func:`truncated_mean`,
    :func:`truncated_mean_derivative` and :func:`loglik` (``1 - p^L`` shared between M and M');
    temporaries are cache-sized. Returns ``(M, loglik, sum M, sum M^2, sum Var)``.
    """
    b0, b1 = float(b[0]), float(b[1])
    n = p.size
    out = np.empty(n)
    ll = s1 = s2 = sv = 0.0
    for k in range(0, n, chunk):
        sl = slice(k, k + chunk)
        pk = p[sl]
        Lk = np.asarray(L[sl], dtype=np.float64)
        ak = np.asarray(a[sl], dtype=np.float64)
        wk = None if weight is None else np.asarray(weight[sl], dtype=np.float64)
        with np.errstate(divide="ignore"):
            logp = np.log(np.where(pk > 0, pk, 1.0))
        eta = b0 - b1 * np.asarray(H[sl], dtype=np.float64)
        t = ak * eta - (ak + (ak < Lk)) * np.logaddexp(0.0, eta)
        out[sl], sums = _moments_chunk(pk, logp, Lk, t, wk)
        ll, s1, s2, sv = ll + sums[0], s1 + sums[1], s2 + sums[2], sv + sums[3]
    return out, ll, s1, s2, sv


def law_pass(b, H, a, L, codes, n_clusters: int, weight=None, chunk: int | None = None):
    """The MLE's clustered sums and the fitted moments at the estimate ``b`` in one chunked pass.

    Returns ``(u, info_g, M, loglik, sum M, sum M^2, sum Var)``: what
    :func:`cluster_score_information` (``method="mle"``) and :func:`fitted_moments` return, with
    the same formulas, from one evaluation of ``p = sigmoid(b0 - b1 H)`` per round; nothing
    round-sized is allocated but ``M``: cache-sized chunks, whose cluster sums are added in place
    (``np.add.at``).
    """
    b0, b1 = float(b[0]), float(b[1])
    n = H.size
    G = int(n_clusters)
    C = (1 << 15) if chunk is None else int(chunk)
    u0, u1, s00, s01, s11 = (np.zeros(G) for _ in range(5))
    out = np.empty(n)
    ll = s1 = s2 = sv = 0.0
    L = np.asarray(L)
    # one horizon broadcast over the rounds (fit_law's usual case): a scalar in the arithmetic
    Lc = float(L.flat[0]) if L.ndim == 1 and L.size and L.strides[0] == 0 else None
    for k in range(0, n, C):
        sl = slice(k, k + C)
        h = np.asarray(H[sl], dtype=np.float64)
        ak = np.asarray(a[sl], dtype=np.float64)
        Lk = Lc if Lc is not None else np.asarray(L[sl], dtype=np.float64)
        ck = codes[sl]
        wk = None if weight is None else np.asarray(weight[sl], dtype=np.float64)
        eta = b0 - b1 * h
        eta_min = eta.min()
        # e^-eta: p = 1 / (1 + e), log p = -log1p(e). Capped at e^709 (below float64's overflow),
        # where p ~ 1e-308 and 1 - p = e p = 1: no inf, no inf * 0 (eta < -709 gave NaN and a warning)
        e = np.exp(np.minimum(-eta, _EXP_CAP) if eta_min < -_EXP_CAP else -eta)
        pk = 1.0 / (1.0 + e)
        qk = e * pk                              # 1 - p without cancellation (p near 1: eta > ~15)
        logp = np.log1p(e)
        del e
        np.negative(logp, out=logp)
        # the truncated geometric's score and information weights (cluster_score_information)
        ntr = ak + (ak < Lk)                     # s + f
        v = ntr * pk                             # (s + f) p
        r = ak - v                               # s - (s + f) p
        v *= qk                                  # (s + f) p (1 - p)
        if wk is not None:
            r *= wk
            v *= wk
        np.add.at(u0, ck, r)
        r *= h
        np.add.at(u1, ck, r)
        np.add.at(s00, ck, v)
        v *= h
        np.add.at(s01, ck, v)
        v *= h
        np.add.at(s11, ck, v)
        del r, v
        # the law's mean, its variance and the log-likelihood (fitted_moments); log(1 + e^eta) = eta - log p
        sp = eta - logp if eta_min > -700.0 else np.logaddexp(0.0, eta)
        t = ak * eta - ntr * sp                  # s log p + f log(1 - p) = s eta - (s + f) log(1 + e^eta)
        out[sl], sums = _moments_chunk(pk, logp, Lk, t, wk, qk)
        ll, s1, s2, sv = ll + sums[0], s1 + sums[1], s2 + sums[2], sv + sums[3]
    u = np.stack([u0, -u1], axis=1)
    info_g = np.empty((G, 2, 2))
    info_g[:, 0, 0] = s00
    info_g[:, 0, 1] = info_g[:, 1, 0] = -s01
    info_g[:, 1, 1] = s11
    return u, info_g, out, ll, s1, s2, sv


def fit_law_pass(H, a, L, codes, n_clusters: int, weight=None, *, sorted_h: bool = False):
    """The MLE (:func:`fit_affine_logit`) and :func:`law_pass` at it, sharing the last pass: Newton
    stops unconfirmed in its quadratic regime (or, on over 10^5 sorted rounds, at its binned start,
    before any pass over the rounds), and the per-cluster sums of the pass at that ``b`` give the
    exact score and information (their totals). A Newton step from them under 1e-12 (1 + |b|) is
    taken and the sums kept; under 1e-7 it is taken and the pass redone at the new ``b`` (the error
    is then ~1e-14); a larger one resumes Newton from there.
    Returns ``(b, u, info_g, M, loglik, sum M, sum M^2, sum Var)``; raises like the MLE."""
    b, _, conv = fit_affine_logit(H, a, L, weight, sorted_h=sorted_h, confirm=False)
    for _ in range(100):
        res = law_pass(b, H, a, L, codes, n_clusters, weight)
        if conv:
            return (b,) + res
        step = np.linalg.solve(res[1].sum(axis=0), res[0].sum(axis=0))
        if not np.all(np.isfinite(step)):
            raise ValueError("the information matrix is singular; the data cannot identify (b0, b1)")
        if np.max(np.abs(step)) < 1e-12 * (1.0 + np.max(np.abs(b))):
            return (b + step,) + res
        if np.max(np.abs(step)) < 1e-7 * (1.0 + np.max(np.abs(b))):
            # Newton's quadratic regime (a binned start that was not quite close enough, or a
            # step above 1e-12): after this exact step the error is ~1e-14; the pass is redone there
            b, conv = b + step, True
            continue
        b, _, conv = fit_affine_logit(H, a, L, weight, b_init=b, sorted_h=sorted_h, confirm=False)
    raise ValueError("the MLE did not converge")


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


def dot(x, y) -> float:
    """sum(x * y) for long vectors without BLAS (whose threads can cost 10x on a busy machine)."""
    return float(np.einsum("i,i->", x, y))


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
    H = np.asarray(H, dtype=np.float64)
    if not per_round and H.size > CHUNK:  # the total in chunks: bounded temporaries on 10^7 rounds
        a, L = np.broadcast_to(np.asarray(a), H.shape), np.broadcast_to(np.asarray(L), H.shape)
        return float(sum(loglik(b, H[k:k + CHUNK], a[k:k + CHUNK], L[k:k + CHUNK],
                                None if weight is None else np.asarray(weight)[k:k + CHUNK])
                         for k in range(0, H.size, CHUNK)))
    eta = b0 - b1 * H
    s, f = _successes_failures(a, L)
    # s log p + f log(1-p) = s eta - (s + f) softplus(eta)
    ll = s * eta - (s + f) * np.logaddexp(0.0, eta)
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
    b = np.asarray(b, dtype=np.float64)
    p = special.expit(b[0] + b[1] * X[:, 1])  # X = (1, -H)
    n_trials = s + f
    resid = s - n_trials * p
    scores = X * (w * resid)[:, None]
    info = np.einsum("ij,i,ik->jk", X, w * n_trials * p * (1.0 - p), X)
    return scores, info


def cluster_score_information(b, H, a, L, codes, n_clusters: int, weight=None, *, method: str = "mle",
                              p=None) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster score sums (G, 2) and information sums (G, 2, 2) of the law at ``b``.

    ``method="mle"``: the truncated geometric's score ``x (s - (s + f) p)`` and information
    ``(s + f) p (1 - p) x x^T``, ``x = (1, -H)``; ``"nls"``: least squares of ``a`` on
    ``M(p, L)``, score ``J (a - M)`` and information ``J J^T``, ``J = dM/db``. ``p``: the
    fitted match probabilities, if already computed. The input for
    :func:`glance_law.stats.cluster.clustered_covariance` (CR1/CR3); two round-sized
    temporaries, no (n, 2) matrix.
    """
    H = np.asarray(H, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    w = None if weight is None else np.asarray(weight, dtype=np.float64)
    if p is None:
        p = match_prob(H, b[0], b[1])
    if method == "nls":
        dm = truncated_mean_derivative(p, L) * p * match_prob(H, -b[0], -b[1])  # 1 - p without cancellation
        resid = a - truncated_mean(p, L)
        resid *= dm
        dm *= dm
        return design_sums(H, resid, dm, codes, n_clusters, w)
    t = (a < L).astype(np.float64)
    t += a                                   # s + f
    v = t * p                                # (s + f) p
    np.subtract(a, v, out=t)                 # resid = s - (s + f) p
    v -= v * p                               # (s + f) p (1 - p): the information weights
    return design_sums(H, t, v, codes, n_clusters, w)


def refit(method: str, H, a, L, weight=None, b_init=None, *, sorted_h: bool = False):
    """(b0, b1) by ``method`` ("mle": :func:`fit_affine_logit`, "nls": :func:`fit_conditional_mean`),
    started at ``b_init`` when given (bootstrap replicates start at the full-sample estimate).
    ``sorted_h``: H is in ascending order (saves the MLE's masked passes)."""
    if method == "nls":
        return fit_conditional_mean(H, a, L, weight, b_init=b_init)[0]
    return fit_affine_logit(H, a, L, weight, b_init=(0.0, 0.0) if b_init is None else b_init,
                            sorted_h=sorted_h)[0]


def _masked_range(H, mask, sorted_h: bool) -> tuple[float, float]:
    """(max, min) of H where ``mask`` (-inf, inf when nowhere); O(1) past the mask when H is sorted."""
    if not sorted_h:
        return np.max(H, where=mask, initial=-np.inf), np.min(H, where=mask, initial=np.inf)
    first = int(np.argmax(mask))
    if not mask[first]:
        return -np.inf, np.inf
    return H[mask.size - 1 - int(np.argmax(mask[::-1]))], H[first]


def _binned_start(H, n_tr, S: float, SH: float, bins: int = _START_BINS, max_iter: int = 50):
    """A start for Newton on sorted ``H`` from per-bin moments, or None if it does not converge.

    The rounds are cut into contiguous bins: every ``n / bins`` rounds and wherever H crosses an
    equal-width grid of ``bins`` steps, so no bin is wider than range / bins. With the trials
    ``n_tr`` (times weights), each bin k keeps N_k, its trial-weighted mean entropy c_k and
    spread V_k = sum n (h - c_k)^2. Expanding softplus(b0 - b1 h) to second order about c_k,

        sum_i n_i softplus(eta_i) ~ sum_k N_k softplus(eta_k) + b1^2 V_k p'(eta_k) / 2,

    with eta_k = b0 - b1 c_k (the first-order terms vanish at the mean). The approximate
    log-likelihood b0 S - b1 SH - (that sum) is maximised by damped Newton on the bins, with
    the expansion's exact gradient and Hessian. The neglected terms are of third order in
    b1 times the bin width: on simulated and real logs the start lies within ~1e-12 (relative)
    of the MLE. It only has to be good, not exact: the caller confirms it by a pass over the
    rounds.
    """
    n = H.size
    grid = np.linspace(H[0], H[-1], bins + 1)[1:-1]
    cuts = np.union1d(np.arange(0, n, max(1, n // bins)), np.searchsorted(H, grid))
    N = np.add.reduceat(n_tr, cuts)
    x = n_tr * H
    A1 = np.add.reduceat(x, cuts)
    x *= H
    A2 = np.add.reduceat(x, cuts)
    del x
    live = N > 0
    N, A1, A2 = N[live], A1[live], A2[live]
    c = A1 / N
    V = np.maximum(A2 - A1 * c, 0.0)  # the cancellation errs by ~1e-16 h^2 N, small beside the term
    cN, ccN, Vc, Vcc = c * N, c * c * N, V * c, V * c * c

    def parts(b):
        eta = b[0] - b[1] * c
        p = special.expit(eta)
        f2 = p * special.expit(-eta)             # first derivative of p in eta: p (1 - p)
        f3 = f2 * (1.0 - 2.0 * p)                # second
        f4 = f2 * (1.0 - 6.0 * p * (1.0 - p))    # third
        q = 0.5 * b[1] * b[1]
        ll = b[0] * S - b[1] * SH - (np.logaddexp(0.0, eta) @ N + q * (V @ f2))
        grad = np.array([S - (N @ p + q * (V @ f3)),
                         -SH + (cN @ p) - b[1] * (V @ f2) + q * (Vc @ f3)])
        h01 = -(cN @ f2) + b[1] * (V @ f3) - q * (Vc @ f4)
        hess = np.array([[N @ f2 + q * (V @ f4), h01],
                         [h01, ccN @ f2 + V @ f2 - 2.0 * b[1] * (Vc @ f3) + q * (Vcc @ f4)]])
        return ll, grad, hess

    b = np.array([special.logit(S / N.sum()), 0.0])
    ll, g, hess = parts(b)
    for _ in range(max_iter):
        try:
            step = np.linalg.solve(hess, g)
        except np.linalg.LinAlgError:
            return None
        t = 1.0
        while True:
            b_new = b + t * step
            ll_new, g_new, hess_new = parts(b_new)
            if ll_new >= ll - 1e-12 * abs(ll) or t < 1e-6:
                break
            t *= 0.5
        if not (np.isfinite(ll_new) and np.all(np.isfinite(b_new))):
            return None
        b, ll, g, hess = b_new, ll_new, g_new, hess_new
        if np.max(np.abs(t * step)) < 1e-13 * (1.0 + np.max(np.abs(b))):
            return b
    return None


def fit_affine_logit(H, a, L, weight=None, b_init=(0.0, 0.0), tol: float = 1e-10, max_iter: int = 100, *,
                     sorted_h: bool = False, confirm: bool = True):
    """Exact maximum likelihood of (b0, b1) (Newton on the concave log-likelihood).

    Returns ``(b, info, converged)``: the estimate, the observed information at
    it (for sandwich covariances) and whether Newton converged. Raises
    ``ValueError`` when the MLE does not exist (no variation in H, every
    round accepted nothing / everything, or the entropies separate the accepted
    tokens from the rejections, so the likelihood has no maximum).

    Each iteration makes a few vectorised passes over the rounds (the score and
    the 2x2 information are accumulated as dot products, never as an (n, 2)
    matrix), with step halving whenever a full step would lower the
    log-likelihood; 10^6 rounds take ~0.1 s.

    ``confirm=False``: once a full Newton step is below ``1e-7 (1 + |b|)`` (quadratic regime: the
    next one is ~1e-14) it is taken and ``(b, info, None)`` returned without the pass that would
    confirm convergence; the caller confirms it from its own pass at ``b`` (:func:`law_pass`).
    """
    H = np.asarray(H, dtype=np.float64)
    if H.size == 0:
        raise ValueError("no rounds to fit")
    a_arr, L_arr = np.broadcast_to(np.asarray(a), H.shape), np.broadcast_to(np.asarray(L), H.shape)
    # successes s = a and trials s + f = a + [a < L] (times the weights): one round-sized array
    # besides the inputs (s is a itself when unweighted); the passes below run in cache-sized chunks
    s = np.asarray(a_arr, dtype=np.float64)
    n_tr = s + (s < (L_arr if L_arr.dtype.kind in "iuf" else np.asarray(L_arr, dtype=np.float64)))
    w = None
    if weight is not None:
        w = np.asarray(weight, dtype=np.float64)
        s = s * w
        n_tr *= w
    S, N = float(s.sum()), float(n_tr.sum())
    _check_identified(H, s, n_tr, S, N, sorted_h)
    passes = _LogitPasses(H, n_tr, S, dot(s, H))
    del s
    b = np.asarray(b_init, dtype=np.float64).copy()
    binned = None
    if not np.any(b) and sorted_h and H.size > _BINNED_ABOVE:
        binned = _binned_start(H, n_tr, S, passes.SH)
        if binned is not None and not confirm:
            return binned, None, None          # the caller's pass at it confirms it (fit_law_pass)
    if binned is not None:
        b = binned
    elif not np.any(b):
        b = np.array([special.logit(S / N), 0.0])  # the intercept-only MLE
        if H.size > _BINNED_ABOVE:
            # Warm start from a strided subsample: Newton converges quadratically, so two or three
            # full-data iterations then reach the exact MLE (the result does not depend on the start).
            k = H.size // 25_000
            try:
                sub = (np.ascontiguousarray(x[::k]) for x in (H, a_arr, L_arr))  # strided: ~4x slower
                b = fit_affine_logit(*sub, None if w is None else np.ascontiguousarray(w[::k]),
                                     tol=1e-6, sorted_h=sorted_h)[0]
            except ValueError:
                pass
    return _newton(passes, b, tol, max_iter, confirm)


def _check_identified(H, s, n_tr, S, N, sorted_h: bool) -> None:
    """``ValueError`` when the MLE does not exist: no acceptance or no rejection at all, no
    variation in H among the rounds with trials, or (quasi-)complete separation."""
    if S == 0:
        raise ValueError("every round accepted 0 tokens: p -> 0 and the law has no finite fit")
    if S == N:
        raise ValueError("every round accepted its full horizon: p -> 1 and the law has no finite fit")
    live = n_tr > 0
    h_max, h_min = _masked_range(H, live, sorted_h)
    if h_max == h_min:
        raise ValueError("root_entropy does not vary, so the slope b1 is not identified")
    # (Quasi-)complete separation: some entropy c has every accepted token at H <= c and every
    # rejection at H >= c (or the reverse); the likelihood then rises without bound along
    # b0 = b1 c, b1 -> +-inf, and Newton would stop on a flat ridge at an arbitrary point.
    np.greater(s, 0, out=live)
    hs_max, hs_min = _masked_range(H, live, sorted_h)
    np.greater(n_tr, s, out=live)                    # a failure (rejection) in the round
    hf_max, hf_min = _masked_range(H, live, sorted_h)
    del live
    if hs_max <= hf_min or hf_max <= hs_min:
        low = "accepted tokens" if hs_max <= hf_min else "rejections"
        raise ValueError(f"the entropies separate acceptances from rejections (every one of the {low} "
                         "lies at or below every other one), so the slope is infinite and the law has no "
                         "finite fit")


class _LogitPasses:
    """The chunked passes of :func:`fit_affine_logit`'s Newton over the rounds (entropies ``H``,
    trials ``n_tr``; ``S``, ``SH`` the weighted successes and their entropy sum): the
    log-likelihood and the score with the 2x2 information, in three cache-sized buffers."""

    def __init__(self, H, n_tr, S: float, SH: float):
        self.H, self.n_tr, self.S, self.SH = H, n_tr, S, SH
        self.n = H.size
        self.C = min(self.n, _NEWTON_CHUNK)
        self.e_buf, self.p_buf, self.n_buf = np.empty(self.C), np.empty(self.C), np.empty(self.C)

    def ll(self, b) -> float:
        H, n_tr, C = self.H, self.n_tr, self.C
        tot = 0.0
        for k in range(0, self.n, C):
            h = H[k:k + C]
            e = self.e_buf[:h.size]
            np.multiply(h, -b[1], out=e)
            np.add(e, b[0], out=e)
            np.logaddexp(0.0, e, out=e)
            tot += dot(n_tr[k:k + C], e)
        return b[0] * self.S - b[1] * self.SH - tot

    def grad_info(self, b):
        # In place, with p = 1/(1 + e^-eta) and 1 - p = e^-eta p (both without cancellation):
        # this loop dominates the fit's time on 10^6+ rounds.
        H, n_tr, C = self.H, self.n_tr, self.C
        g0 = g1 = v0 = vh = vhh = 0.0
        for k in range(0, self.n, C):
            h = H[k:k + C]
            m = h.size
            e, p, npv = self.e_buf[:m], self.p_buf[:m], self.n_buf[:m]
            np.multiply(h, b[1], out=e)
            np.subtract(e, b[0], out=e)
            np.minimum(e, 700.0, out=e)
            np.exp(e, out=e)                         # e^-eta
            np.add(e, 1.0, out=p)
            np.reciprocal(p, out=p)                  # p
            np.multiply(n_tr[k:k + C], p, out=npv)   # (s + f) p
            g0 += float(npv.sum())
            g1 += dot(npv, h)
            np.multiply(e, p, out=e)                 # 1 - p
            np.multiply(e, npv, out=e)               # (s + f) p (1 - p)
            v0 += float(e.sum())
            vh += dot(e, h)
            vhh += float(np.einsum("i,i,i->", e, h, h))
        return np.array([self.S - g0, -(self.SH - g1)]), np.array([[v0, -vh], [-vh, vhh]])


def _newton(passes: _LogitPasses, b, tol: float, max_iter: int, confirm: bool):
    """Damped Newton from ``b``: ``(b, info, converged)`` (``converged`` None when ``confirm`` is
    off and the quadratic regime was reached; see :func:`fit_affine_logit`)."""
    g, info = passes.grad_info(b)
    converged, ll_cur = False, None
    for _ in range(max_iter):
        try:
            step = np.linalg.solve(info, g)
        except np.linalg.LinAlgError:
            raise ValueError("the information matrix is singular; the data cannot identify (b0, b1)") from None
        if not np.all(np.isfinite(step)):
            raise ValueError("the information matrix is singular; the data cannot identify (b0, b1)")
        if np.max(np.abs(step)) < tol * (1.0 + np.max(np.abs(b))):
            b = b + step  # converged: the information is unchanged at this precision
            converged = True
            break
        if not confirm and np.max(np.abs(step)) < 1e-7 * (1.0 + np.max(np.abs(b))):
            b = b + step
            if not np.all(np.isfinite(b)) or np.max(np.abs(b)) > 1e6:     # the same check as below
                raise ValueError("the MLE diverged (perfect separation); the data do not pin (b0, b1)")
            return b, info, None
        t, ll_new = 1.0, None
        # in Newton's quadratic regime a step this small cannot lower the likelihood
        small = np.max(np.abs(step)) < 1e-4 * (1.0 + np.max(np.abs(b)))
        while True:
            # Damped Newton. Along the step the log-likelihood is concave, so a non-negative
            # directional derivative at the new point proves it did not decrease; only
            # otherwise are log-likelihoods compared (and the step halved if it fell).
            b_new = b + t * step
            g_new, info_new = passes.grad_info(b_new)
            if g_new @ step >= 0 or t < 1e-8 or small:
                ll_new = None
                break
            if ll_cur is None:
                ll_cur = passes.ll(b)
            ll_new = passes.ll(b_new)
            if ll_new >= ll_cur - 1e-12 * max(1.0, abs(ll_cur)):
                break
            t *= 0.5
        b, g, info, ll_cur = b_new, g_new, info_new, ll_new
        if np.max(np.abs(t * step)) < tol * (1.0 + np.max(np.abs(b))):
            converged = True
            break
    if not np.all(np.isfinite(b)) or np.max(np.abs(b)) > 1e6:
        raise ValueError("the MLE diverged (perfect separation); the data do not pin (b0, b1)")
    return b, info, converged


def mean_and_jacobian(b, H, L):
    """M(sigmoid(b0 - b1 H)) and its (n, 2) Jacobian in (b0, b1)."""
    eta = b[0] - b[1] * H
    p = special.expit(eta)
    M = truncated_mean(p, L)
    dm = truncated_mean_derivative(p, L) * p * special.expit(-eta)
    return M, np.column_stack([dm, -H * dm])


def fit_conditional_mean(H, a, L, weight=None, b_init=None, tol: float = 1e-9, max_iter: int = 200):
    """Least squares of ``a`` on the law's conditional mean M(sigmoid(b0 - b1 H), L).

    The paper's conditional-mean form, fitted by Gauss-Newton with step halving
    (started at the MLE unless ``b_init`` is given). Unlike the MLE it ignores
    the geometric variance structure, so it is less efficient; it is provided for
    comparison. Returns ``(b, jac, resid, converged)`` with the (n, 2) Jacobian
    and residuals ``a - M`` at the estimate (for sandwich covariances).
    """
    H = np.asarray(H, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    w = np.ones_like(a) if weight is None else np.asarray(weight, dtype=np.float64)
    if b_init is None:
        b_init, _, _ = fit_affine_logit(H, a, L, w)
    b = np.asarray(b_init, dtype=np.float64).copy()
    M, J = mean_and_jacobian(b, H, L)
    r = a - M
    sse = dot(w, r * r)
    converged = False
    for _ in range(max_iter):
        JW = J * w[:, None]
        try:
            step = np.linalg.solve(np.einsum("ij,ik->jk", JW, J), np.einsum("ij,i->j", JW, r))
        except np.linalg.LinAlgError:
            raise ValueError("the least-squares Jacobian is singular; the data cannot identify (b0, b1)") from None
        t = 1.0
        while True:
            b_new = b + t * step
            M_new, J_new = mean_and_jacobian(b_new, H, L)
            r_new = a - M_new
            sse_new = dot(w, r_new * r_new)
            if sse_new <= sse * (1.0 + 1e-14) or t < 1e-8:
                break
            t *= 0.5
        done = np.max(np.abs(t * step)) < tol * (1.0 + np.max(np.abs(b)))
        b, J, r, sse = b_new, J_new, r_new, sse_new
        if done:
            converged = True
            break
    if not np.all(np.isfinite(b)) or np.max(np.abs(b)) > 1e6:
        raise ValueError("the least-squares fit diverged; the data do not pin (b0, b1)")
    return b, J, r, converged
