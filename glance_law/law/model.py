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

The numeric core (pure numpy) comes first; :func:`fit_law` builds on it the
grouped fit with prompt-clustered intervals, the fairly evaluated decile
curve, the isotonic and round-level R^2, the rank test, the noise ceiling, the
floor against the cap, and the paper's four checks, returned as a frozen
:class:`LawFit`. The theory and every choice are documented in
``docs/theory-law.md``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import special

from glance_law.data import selection as _sel
from glance_law.errors import GlanceError
from glance_law.stats import ceiling as _ceiling
from glance_law.stats.cluster import CLUSTER_BY

from . import group as _group  # one group's statistics (imports this module back)
from .result import CURVE_COLUMNS, LAW_COLUMNS, LAW_EXTRA_COLUMNS, POOLED, LawChecks, LawFit  # noqa: F401

__all__ = ["match_prob", "truncated_mean", "truncated_mean_derivative", "truncated_variance",
           "expected_accepted", "loglik", "score_and_information", "fit_affine_logit",
           "fit_conditional_mean", "law_supremum", "cap", "fit_law", "LawFit", "LawChecks",
           "LAW_COLUMNS", "CURVE_COLUMNS"]

_CHUNK = 1 << 18  # rows per chunk where a total is accumulated chunk by chunk


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


def _dot(x, y) -> float:
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
    if not per_round and H.size > _CHUNK:  # the total in chunks: bounded temporaries on 10^7 rounds
        a, L = np.broadcast_to(np.asarray(a), H.shape), np.broadcast_to(np.asarray(L), H.shape)
        return float(sum(loglik(b, H[k:k + _CHUNK], a[k:k + _CHUNK], L[k:k + _CHUNK],
                                None if weight is None else np.asarray(weight)[k:k + _CHUNK])
                         for k in range(0, H.size, _CHUNK)))
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


def fit_affine_logit(H, a, L, weight=None, b_init=(0.0, 0.0), tol: float = 1e-10, max_iter: int = 100):
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
    """
    H = np.asarray(H, dtype=np.float64)
    if H.size == 0:
        raise ValueError("no rounds to fit")
    a_arr, L_arr = np.broadcast_to(np.asarray(a), H.shape), np.broadcast_to(np.asarray(L), H.shape)
    s, f = _successes_failures(a, L)
    w = None
    if weight is not None:
        w = np.asarray(weight, dtype=np.float64)
        s, f = s * w, f * w
    n_tr = s + f
    S, N = float(s.sum()), float(n_tr.sum())
    if S == 0:
        raise ValueError("every round accepted 0 tokens: p -> 0 and the law has no finite fit")
    if S == N:
        raise ValueError("every round accepted its full horizon: p -> 1 and the law has no finite fit")
    live = n_tr > 0
    if np.ptp(H[live]) == 0:
        raise ValueError("root_entropy does not vary, so the slope b1 is not identified")
    # (Quasi-)complete separation: some entropy c has every accepted token at H <= c and every
    # rejection at H >= c (or the reverse); the likelihood then rises without bound along
    # b0 = b1 c, b1 -> +-inf, and Newton would stop on a flat ridge at an arbitrary point.
    hs, hf = H[s > 0], H[f > 0]
    if hs.max() <= hf.min() or hf.max() <= hs.min():
        low = "accepted tokens" if hs.max() <= hf.min() else "rejections"
        raise ValueError(f"the entropies separate acceptances from rejections (every one of the {low} "
                         "lies at or below every other one), so the slope is infinite and the law has no "
                         "finite fit")
    SH = _dot(s, H)
    e, p, npv = np.empty_like(H), np.empty_like(H), np.empty_like(H)

    def ll(b):  # uses e as scratch (free between grad_info calls)
        np.multiply(H, -b[1], out=e)
        np.add(e, b[0], out=e)
        np.logaddexp(0.0, e, out=e)
        return b[0] * S - b[1] * SH - _dot(n_tr, e)

    def grad_info(b):
        # In place, with p = 1/(1 + e^-eta) and 1 - p = e^-eta p (both without cancellation):
        # this loop dominates the fit's time on 10^6+ rounds.
        np.multiply(H, b[1], out=e)
        np.subtract(e, b[0], out=e)
        np.minimum(e, 700.0, out=e)
        np.exp(e, out=e)                             # e^-eta
        np.add(e, 1.0, out=p)
        np.reciprocal(p, out=p)                      # p
        np.multiply(n_tr, p, out=npv)                # (s + f) p
        g = np.array([S - npv.sum(), -(SH - _dot(npv, H))])
        np.multiply(e, p, out=e)                     # 1 - p
        np.multiply(e, npv, out=e)                   # (s + f) p (1 - p)
        v0, vh = float(e.sum()), _dot(e, H)
        np.multiply(e, H, out=p)
        return g, np.array([[v0, -vh], [-vh, _dot(p, H)]])

    b = np.asarray(b_init, dtype=np.float64).copy()
    if not np.any(b):
        b = np.array([special.logit(S / N), 0.0])  # the intercept-only MLE
        if H.size > 100_000:
            # Warm start from a strided subsample: Newton converges quadratically, so two or three
            # full-data iterations then reach the exact MLE (the result does not depend on the start).
            k = H.size // 25_000
            try:
                b = fit_affine_logit(H[::k], a_arr[::k], L_arr[::k], None if w is None else w[::k],
                                     tol=1e-6)[0]
            except ValueError:
                pass
    g, info = grad_info(b)
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
        t, ll_new = 1.0, None
        # in Newton's quadratic regime a step this small cannot lower the likelihood
        small = np.max(np.abs(step)) < 1e-4 * (1.0 + np.max(np.abs(b)))
        while True:
            # Damped Newton. Along the step the log-likelihood is concave, so a non-negative
            # directional derivative at the new point proves it did not decrease; only
            # otherwise are log-likelihoods compared (and the step halved if it fell).
            b_new = b + t * step
            g_new, info_new = grad_info(b_new)
            if g_new @ step >= 0 or t < 1e-8 or small:
                ll_new = None
                break
            if ll_cur is None:
                ll_cur = ll(b)
            ll_new = ll(b_new)
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


def _mean_and_jacobian(b, H, L):
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
    M, J = _mean_and_jacobian(b, H, L)
    r = a - M
    sse = _dot(w, r * r)
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
            M_new, J_new = _mean_and_jacobian(b_new, H, L)
            r_new = a - M_new
            sse_new = _dot(w, r_new * r_new)
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



# ==========================================================================
# the grouped fit
# ==========================================================================

LAW_INPUT = _sel.LAW_INPUT


def fit_law(rounds, by: str | None = "task", method: str = "mle", level: float = 0.95, n_boot: int = 0,
            seed: int = 0, *, condition: str | Sequence[str] | None = "matched", weight: str | None = None,
            cluster: Sequence[str] = CLUSTER_BY, bins: int = 10, ceiling_bins: int = _ceiling.DEFAULT_BINS,
            alpha: float = 0.05, min_r2_curve: float = 0.5, min_r2_isotonic: float = 0.9,
            cov: str = "cr3") -> LawFit:
    """Fit the draftability law per group and pooled, with prompt-clustered uncertainty.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (``read_logs(paths)`` or a frame with the contract's columns).
    by : column whose values form the groups (default ``"task"``); None fits the pooled row only.
        The group label is reported in the ``task`` column whatever ``by`` is.
    method : ``"mle"`` (default: exact maximum likelihood of the truncated geometric) or
        ``"nls"`` (least squares of a on the conditional mean M(sigmoid(b0 - b1 H), L)).
    level : interval level (0.95).
    n_boot : 0 (default) for a prompt-clustered covariance (``cov``) with Student-t(G-1)
        critical values; N > 0 for a prompt-level cluster bootstrap with N replicates
        (percentile intervals for b0, b1, the decile means and the mean accepted length).
    cov : ``"cr3"`` (default: the cluster jackknife, one Newton step per deleted prompt) or
        ``"cr1"`` (the cluster-robust sandwich with the G/(G-1) factor). CR1 is slightly
        liberal with a few dozen prompts of uneven size (about 93% coverage of nominal 95%
        at 40 prompts in our simulations); CR3 is closer to nominal (docs/theory-law.md).
    seed : bootstrap seed (each group's stream derives from it and the group's name).
    condition : conditions fitted (default ``"matched"``); None pools every condition.
    weight : optional column of row counts (reduced tables: each row stands for ``weight``
        identical rounds).
    cluster : the columns whose combination is one independent unit (default (task, prompt_id)).
    bins, ceiling_bins : equal-count entropy bins of the decile curve (10) and of the ceiling (50).
    alpha, min_r2_curve, min_r2_isotonic : thresholds of :meth:`LawFit.holds` (see
        :class:`LawChecks` and docs/theory-law.md).

    Rounds with ``horizon == 0`` (autoregressive) and of other conditions are excluded and
    counted in the notes; when the logs hold several drafters each is fitted separately
    (rows keyed by drafter and group, one pooled row per drafter). A group whose law cannot
    be fitted (e.g. it never accepts a token) keeps its descriptive statistics, has NaN
    coefficients and a note.
    """
    if method not in ("mle", "nls"):
        raise GlanceError(f"unknown method {method!r}; choose 'mle' or 'nls'")
    if not 0.0 < float(level) < 1.0:
        raise GlanceError(f"level must lie strictly between 0 and 1 (got {level})")
    if int(n_boot) < 0:
        raise GlanceError(f"n_boot must be >= 0 (got {n_boot})")
    if int(bins) < 2 or int(ceiling_bins) < 2:
        raise GlanceError("bins and ceiling_bins must be >= 2")
    frame, skipped = _sel.as_frame(rounds)
    notes: list[str] = [f"skipped {reason}" if str(path) in reason else f"skipped {path}: {reason}"
                        for path, reason in skipped]
    data = _sel.prepare(frame, by, condition, weight, cluster, notes)
    if cov not in ("cr3", "cr1"):
        raise GlanceError(f"unknown cov {cov!r}; choose 'cr3' (cluster jackknife) or 'cr1' (sandwich)")
    interval = "bootstrap" if n_boot > 0 else cov
    opt = dict(method=method, level=float(level), n_boot=int(n_boot), seed=int(seed), bins=int(bins),
               ceiling_bins=int(ceiling_bins), alpha=float(alpha), min_r2_curve=float(min_r2_curve),
               min_r2_isotonic=float(min_r2_isotonic), interval=interval, cov=cov)
    group_notes: list[str] = []
    rows, curves, checks = [], {}, {}
    dnames = data["dnames"]
    present_d = sorted(np.flatnonzero(np.bincount(data["d"], minlength=len(dnames))), key=lambda i: dnames[i])
    for di in present_d:
        dname = dnames[di]
        dmask = data["d"] == di
        if dmask.all():
            H, a, L, w, cl, g = (data[k] for k in ("H", "a", "L", "w", "cl", "g"))
        else:
            H, a, L, cl, g = (data[k][dmask] for k in ("H", "a", "L", "cl", "g"))
            w = None if data["w"] is None else data["w"][dmask]
        order = np.argsort(H, kind="stable")
        tag = dname if len(present_d) > 1 else None
        present_g = np.flatnonzero(np.bincount(g, minlength=len(data["gnames"]))) if by else []
        for gi in sorted(present_g, key=lambda i: data["gnames"][i]):
            m = g == gi
            # the group's own sort order: the global order restricted to the group, as positions
            # within the group's rows (O(n); a binary search here costs seconds at 10^7 rounds)
            og = (np.cumsum(m, dtype=np.int32 if m.size < 2 ** 31 else np.int64) - 1)[order[m[order]]]
            row, cur, chk = _group.evaluate(H[m], a[m], L[m], None if w is None else w[m], cl[m], og,
                                      data["gnames"][gi], tag, opt, group_notes)
            rows.append({**row, "drafter": dname})
            curves[(dname, data["gnames"][gi])] = cur
            checks[(dname, data["gnames"][gi])] = chk
        row, cur, chk = _group.evaluate(H, a, L, w, cl, order, POOLED, tag, opt, group_notes)
        rows.append({**row, "drafter": dname})
        curves[(dname, POOLED)] = cur
        checks[(dname, POOLED)] = chk
    table = pd.DataFrame(rows, columns=list(LAW_COLUMNS + LAW_EXTRA_COLUMNS))
    for c in ("rounds", "prompts", "horizon"):
        table[c] = table[c].astype(np.int64)
    if np.all(~np.isfinite(table["b1"].to_numpy(dtype=float))):
        raise GlanceError("the law could not be fitted on any group: " + "; ".join(group_notes))
    lvl = f"{100 * level:g}%"
    if interval == "cr1":
        notes.append(f"intervals: {lvl}, prompt-clustered (cluster = {', '.join(cluster)}): CR1 cluster-robust "
                     "sandwich with Student-t(G-1) critical values, G = prompts in the group")
    elif interval == "cr3":
        notes.append(f"intervals: {lvl}, prompt-clustered (cluster = {', '.join(cluster)}): CR3 cluster jackknife "
                     "(one Newton step per deleted prompt) with Student-t(G-1) critical values, G = prompts "
                     "in the group")
    else:
        notes.append(f"intervals: {lvl} percentile, prompt-level cluster bootstrap with {n_boot} replicates "
                     f"(seed {seed})")
    if method == "nls":
        notes.append("method nls: least squares of a on M(sigmoid(b0 - b1 H), L) (the MLE is the efficient "
                     "default; nls is for comparison with the paper)")
    if len(present_d) > 1:
        notes.append(f"{len(present_d)} drafters fitted separately: {', '.join(dnames[i] for i in present_d)}")
    if by and by != "task":
        notes.append(f"groups are the values of column '{by}' (shown in the task column)")
    notes.append(f"ceiling: bias-corrected {ceiling_bins}-bin between/total (epsilon^2, unclipped, ~0 without "
                 "signal); ceiling_binned is the paper's SSB/SST (biased up by ~(B-1)/(n-1)); "
                 "ceiling_fraction = r2_round / ceiling")
    notes.append("floor_mean: bottom entropy decile; cap = e^b0; sup = M(sigmoid(b0)) = e^b0(1 - sigmoid(b0)^L) "
                 "at the group's largest L")
    notes.append(f"holds: slope (b1_lo > 0), rank (rho < 0, prompt-aware p < {alpha:g}), curve (decile "
                 f"R^2 >= {min_r2_curve:g}), monotone (isotonic decile R^2 >= {min_r2_isotonic:g})")
    return LawFit(table=table, curves=curves, checks=checks, method=method, level=float(level), by=by,
                  interval=interval, n_boot=int(n_boot), note_lines=tuple(notes + group_notes))
