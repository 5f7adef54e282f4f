"""The grounded tail: the two-state survival model, its fit and tests at the entropy floor.

Model (Assumption 3 of the paper). A run of matches starts in state D with
probability ``pi`` (else U), matches with ``rho_s`` in state s, moves by ``T`` after
each match and ends at the first miss, capped at the horizon L:

    theta = (pi, rho_D, rho_U, t_DD, t_UU),  v = (pi, 1-pi),  D = diag(rho_D, rho_U),
    T = [[t_DD, 1-t_DD], [1-t_UU, t_UU]],  K = T D,
    S(l) = P(a >= l) = v D K^(l-1) 1,   P(a = k) = S(k) - S(k+1),   E[a] = sum_l S(l).

The single-hazard (truncated geometric) law is the case rho_D = rho_U.

What the data identify. ``S(0) = 1`` satisfies the same recurrence ``S(l+2) = tr K
S(l+1) - det K S(l)``, so the run-length law depends on theta only through the
three invariants (S1, tr K, det K), i.e. the eigenvalues lambda1 >= lambda2 of K
and S1 (:func:`invariants`). Two of the five parameters are not identified, so
:func:`fit_tail` reports a canonical theta (the no-switching mixture ``(C,
lambda1, lambda2, 1, 1)`` whenever the law is one) and compares models only by
log-likelihood and fitted pmf. See ``docs/theory-tail.md``.

Public API: :func:`survival`, :func:`pmf`, :func:`mean`, :func:`variance`,
:func:`hazard`, :func:`invariants`, :func:`law_supremum`, :func:`cap`,
:func:`pi_star`, :func:`pi_needed`, :func:`geometric_variance`,
:func:`fit_geometric`, :func:`fit_two_state`, :func:`loglik`,
:func:`pooled_chi_square`, :func:`lrt_test`, :func:`tail_test` (one regime, arrays)
and :func:`fit_tail` (round logs, per task), plus the ``--tail`` CLI section.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import stats

from glance_law.errors import GlanceError
from glance_law.law.model import cap, law_supremum, truncated_mean

from . import mle as _mle

__all__ = ["TwoStateFit", "GeometricFit", "Invariants",
           "survival", "pmf", "mean", "variance", "hazard", "invariants", "law_supremum",
           "cap", "pi_star", "pi_needed", "geometric_variance", "fit_geometric", "fit_two_state", "loglik",
           "pooled_chi_square", "bootstrap_p", "lrt_test", "expected_cells", "histogram_design_effect", "design_effects", "LRT"]

PARAMS = ("pi", "rho_d", "rho_u", "t_dd", "t_uu")
#: identifiable parameters of the two-state run-length law (S1, tr K, det K)
N_IDENTIFIED = 3
#: the paper's degrees of freedom for the likelihood-ratio test (5 parameters against 1)
NOMINAL_LRT_DF = 4


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------

def _theta(theta) -> np.ndarray:
    """theta as an (n, 5) float array, validated; accepts a 5-sequence, an (n, 5) array or an
    object with attributes pi, rho_d, rho_u, t_dd, t_uu."""
    if all(hasattr(theta, k) for k in PARAMS):
        theta = [getattr(theta, k) for k in PARAMS]
    try:
        th = np.asarray(theta, dtype=np.float64)
    except (TypeError, ValueError):
        raise GlanceError("theta must be 5 numbers (pi, rho_d, rho_u, t_dd, t_uu)") from None
    if th.shape[-1:] != (5,) or th.ndim > 2:
        raise GlanceError(f"theta must have 5 entries (pi, rho_d, rho_u, t_dd, t_uu), got shape {th.shape}")
    th = th.reshape(-1, 5)
    if not np.all(np.isfinite(th)) or np.any((th < 0) | (th > 1)):
        bad = [PARAMS[j] for j in range(5) if np.any(~np.isfinite(th[:, j]) | (th[:, j] < 0) | (th[:, j] > 1))]
        raise GlanceError(f"theta entries {', '.join(bad)} are probabilities and must lie in [0, 1]")
    return th


def _horizon(L, name: str = "L") -> int:
    try:
        Li = int(L)
    except (TypeError, ValueError):
        raise GlanceError(f"{name} (the horizon) must be an integer >= 1, got {L!r}") from None
    if Li != L or Li < 1:
        raise GlanceError(f"{name} (the horizon) must be an integer >= 1, got {L!r}")
    return Li


def _horizons(L) -> np.ndarray:
    La = np.atleast_1d(np.asarray(L, dtype=np.float64))
    if La.size == 0 or not np.all(np.isfinite(La)) or np.any(La < 1) or np.any(La != np.round(La)):
        raise GlanceError("L (the horizon) must be an integer >= 1 (or an array of them)")
    return La.astype(np.int64)


def _prob(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise GlanceError(f"{name} is a probability and must lie in [0, 1]")
    return a


def check_rounds(accepted, horizon):
    a = np.asarray(accepted, dtype=np.float64).ravel()
    L = np.asarray(horizon, dtype=np.float64).ravel()
    if L.size == 1 and a.size > 1:
        L = np.full(a.shape, L[0])
    if a.size == 0:
        raise GlanceError("the regime is empty: no rounds to fit (lower the entropy threshold's strictness "
                          "or check the task and condition)")
    if a.shape != L.shape:
        raise GlanceError(f"accepted ({a.size}) and horizon ({L.size}) must have the same length")
    if np.any(~np.isfinite(L) | (L < 1) | (L != np.round(L))):
        raise GlanceError("horizon must be integers >= 1 (autoregressive rounds, horizon 0, have no run length)")
    if np.any(~np.isfinite(a) | (a < 0) | (a > L) | (a != np.round(a))):
        raise GlanceError("accepted must be integers in 0..horizon")
    return a.astype(np.int64), L.astype(np.int64)


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------

def _single(theta) -> bool:
    """Whether ``theta`` is one parameter vector (else rows of them)."""
    return all(hasattr(theta, k) for k in PARAMS) or np.ndim(theta) <= 1


def survival(theta, L: int) -> np.ndarray:
    """S(l) = P(a >= l) for l = 1..L (shape (L,), or (n, L) for n parameter rows)."""
    th, L = _theta(theta), _horizon(L)
    S = _mle.forward(th, L)[1]
    return S[0] if _single(theta) else S


def pmf(theta, L: int) -> np.ndarray:
    """P(a = k) for k = 0..L (shape (L+1,) or (n, L+1)); P(a = L) = S(L) (the capped runs)."""
    th, L = _theta(theta), _horizon(L)
    P, S = _mle.forward(th, L)
    out = np.concatenate([P, S[:, -1:]], axis=1)
    return out[0] if _single(theta) else out


def mean(theta, L: int):
    """E[a] = sum_{l=1}^{L} S(l) (a float, or an array for rows of theta)."""
    m = np.atleast_2d(survival(theta, L)).sum(axis=1)
    return float(m[0]) if _single(theta) else m


def variance(theta, L: int):
    """Var(a) = sum_{l=1}^{L} (2l - 1) S(l) - E[a]^2 (since E[a^2] = sum_l (2l-1) P(a >= l))."""
    S = np.atleast_2d(survival(theta, L))
    w = 2.0 * np.arange(1, S.shape[1] + 1) - 1.0
    v = S @ w - S.sum(axis=1) ** 2
    return float(v[0]) if _single(theta) else v


def hazard(theta, L: int) -> np.ndarray:
    """h_l = P(a >= l | a >= l-1) = S(l) / S(l-1), l = 1..L (NaN once S(l-1) = 0).

    Constant (= rho) under the geometric law; under the two-state model it moves
    monotonically toward lambda1 (the larger eigenvalue of K) - non-constant unless
    rho_D = rho_U.
    """
    S = np.atleast_2d(survival(theta, L))
    prev = np.concatenate([np.ones((S.shape[0], 1)), S[:, :-1]], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(prev > 0, S / prev, np.nan)
    return h[0] if _single(theta) else h


class Invariants(NamedTuple):
    """The numbers the run-length law depends on: ``S(l) = C lambda1^l + (1 - C) lambda2^l``."""

    s1: float
    trace: float
    det: float
    lambda1: float
    lambda2: float
    c: float


def invariants(theta) -> Invariants | list[Invariants]:
    """(S1, tr K, det K), the eigenvalues of K and the slow-mode weight C = (S1 - lambda2) / (lambda1 - lambda2)."""
    th = _theta(theta)
    l1, l2, s1 = _mle.law_from_theta(th)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(l1 > l2, (s1 - l2) / (l1 - l2), np.nan)
    out = [Invariants(float(a), float(b), float(d), float(e), float(f), float(g))
           for a, b, d, e, f, g in zip(s1, l1 + l2, l1 * l2, l1, l2, c)]
    return out[0] if _single(theta) else out


def geometric_variance(p, L: int):
    """Variance of the truncated geometric, sum_{l=1}^{L} (2l-1) p^l - M(p)^2 (not mu (1 + mu))."""
    p = _prob(p, "p")
    L = _horizon(L)
    l = np.arange(1, L + 1)
    pw = np.asarray(p, dtype=np.float64)[..., None] ** l
    out = pw @ (2.0 * l - 1.0) - pw.sum(-1) ** 2
    return float(out) if np.ndim(out) == 0 else out


def pi_star(b0: float, rho_u: float, L) -> float:
    """The paper's threshold pi* = (e^b0 - M(rho_U)) / (L - M(rho_U)).

    The limit ``E[a] -> pi L + (1 - pi) M(rho_U)`` (rho_D, t_DD -> 1 *and* t_UU -> 1)
    exceeds the cap e^b0 exactly when pi > pi*. With t_UU < 1 runs that start in
    U can switch into D, so pi > pi* is sufficient but not necessary: see
    :func:`pi_needed`. ``L`` may be an array of the regime's horizons (then M and
    L are averaged over the rounds). A value <= 0 means U alone already beats the
    cap; >= 1 means no pi can (e^b0 >= L).
    """
    rho_u = float(_prob(rho_u, "rho_u"))
    if not np.isfinite(b0):
        raise GlanceError(f"b0 must be a finite number (got {b0})")
    La = _horizons(L)
    mu = float(np.mean(truncated_mean(rho_u, La)))
    Lm = float(La.mean())
    if Lm - mu <= 0:
        return 0.0 if np.exp(b0) < Lm else float("nan")
    return float((np.exp(b0) - mu) / (Lm - mu))


def pi_needed(b0: float, rho_u: float, t_uu: float, L, rho_d: float = 1.0, t_dd: float = 1.0) -> float:
    """The exact entry weight pi at which the two-state mean equals the cap e^b0.

    E[a] is linear in pi: ``pi m_D + (1 - pi) m_U`` with m_s the mean of a run that
    starts in s, so ``pi = (e^b0 - m_U) / (m_D - m_U)``. The defaults rho_D = t_DD = 1
    give the paper's limit with a finite t_UU (runs that start in U can switch into
    the copy state): e.g. b0 = 1.226, rho_U = 0.6, t_UU = 0.9, L = 15 gives 0.036,
    against pi* = 0.141. ``L`` may be an array of horizons (means averaged).
    """
    if not np.isfinite(b0):
        raise GlanceError(f"b0 must be a finite number (got {b0})")
    La = _horizons(L)
    th = _theta([[1.0, rho_d, rho_u, t_dd, t_uu], [0.0, rho_d, rho_u, t_dd, t_uu]])
    S = _mle.forward(th, int(La.max()))[1]
    cum = np.cumsum(S, axis=1)
    mD, mU = float(cum[0, La - 1].mean()), float(cum[1, La - 1].mean())
    if mD == mU:
        return float("nan")
    return float((np.exp(b0) - mU) / (mD - mU))


# ---------------------------------------------------------------------------
# likelihoods and fits (one regime, arrays)
# ---------------------------------------------------------------------------

def geometric_cells(p: float, Lmax: int) -> np.ndarray:
    k = np.arange(Lmax)
    return np.concatenate([p ** k * (1.0 - p), p ** (k + 1.0)])


def loglik(theta, accepted, horizon) -> float:
    """Log-likelihood of the two-state model at ``theta`` on rounds (accepted, horizon).

    A round contributes log P(a = k) if a < L and log S(L) if a = L (the capped run).
    """
    a, L = check_rounds(accepted, horizon)
    th = _theta(theta)
    W = _mle.counts(a, L)
    return float(_mle.loglik_cells(_mle.cells_from_theta(th[:1], W.size // 2), W[None])[0])


@dataclass(frozen=True)
class GeometricFit:
    p: float
    loglik: float
    n: int


@dataclass(frozen=True)
class TwoStateFit:
    """Maximum likelihood of the two-state model: the identified law (lambda1, lambda2, s1)
    and a canonical theta producing it (see :func:`glance_law.tail.mle.theta_from_law`)."""

    theta: tuple
    lambda1: float
    lambda2: float
    s1: float
    loglik: float
    n: int

    def as_dict(self) -> dict:
        return dict(zip(PARAMS, self.theta))


def fit_geometric(accepted, horizon) -> GeometricFit:
    """Closed-form MLE of the truncated geometric: p = sum a / (sum a + #{a < L})."""
    a, L = check_rounds(accepted, horizon)
    p, ll = _mle.geometric_from_counts(_mle.counts(a, L))
    return GeometricFit(float(p[0]), float(ll[0]), int(a.size))


def fit_W(W: np.ndarray, n_local: int = 4):
    """Two-state MLE for count rows; never below the nested geometric's log-likelihood."""
    l1, l2, s1, ll = _mle.fit_counts(W, n_local=n_local)
    p, llg = _mle.geometric_from_counts(W)
    worse = ~(ll >= llg)
    if worse.any():   # the geometric is the case C = 1, lambda1 = p
        l1, l2, s1, ll = (np.where(worse, x, y) for x, y in ((p, l1), (0.0, l2), (p, s1), (llg, ll)))
    return l1, l2, s1, ll, p, llg


def fit_two_state(accepted, horizon, n_local: int = 4) -> TwoStateFit:
    """Global maximum likelihood of the two-state model (see :mod:`glance_law.tail.mle`)."""
    a, L = check_rounds(accepted, horizon)
    l1, l2, s1, ll, _, _ = fit_W(_mle.counts(a, L)[None], n_local)
    th = _mle.theta_from_law(l1, l2, s1)[0]
    return TwoStateFit(tuple(float(x) for x in th), float(l1[0]), float(l2[0]), float(s1[0]), float(ll[0]),
                       int(a.size))


# ---------------------------------------------------------------------------
# tests of fit
# ---------------------------------------------------------------------------

def cell_order(Lmax: int) -> np.ndarray:
    """Cells in outcome order: a = 0, 1, 1 (capped at L = 1), 2, 2 (capped), ..."""
    order = [0]
    for a in range(1, Lmax + 1):
        if a < Lmax:
            order.append(a)
        order.append(Lmax + a - 1)
    return np.array(order)


def expected_cells(cells: np.ndarray, horizon_counts: np.ndarray) -> np.ndarray:
    """Expected counts per cell: P(a=k) times #{rounds with L > k}, S(l) times #{rounds with L = l}."""
    nL = np.asarray(horizon_counts, dtype=np.float64)
    Lmax = nL.size
    longer = nL[::-1].cumsum()[::-1]                   # #{L >= l}, l = 1..Lmax
    n_exact = np.concatenate([longer, [0.0]])[:Lmax]   # #{L > k} = #{L >= k+1}, k = 0..Lmax-1
    return np.asarray(cells) * np.concatenate([n_exact, nL])


def pooled_chi_square(observed, expected, min_expected: float = 5.0):
    """Pearson chi-square of several models on one histogram, with adjacent-cell pooling.

    ``observed`` (c,) and ``expected`` (m, c) are in outcome order. Cells that
    cannot occur (expected 0 under every model and nothing observed) are dropped;
    the rest are pooled left to right: a group closes as soon as its expected
    count is >= ``min_expected`` under *every* model, and a short remainder joins
    the last group. The same groups serve all models. Returns ``(chi2 (m,),
    n_groups, groups)`` with ``groups`` the group of each input cell (-1 dropped);
    chi2 is NaN when fewer than 2 groups remain.
    """
    O = np.asarray(observed, dtype=np.float64)
    E = np.atleast_2d(np.asarray(expected, dtype=np.float64))
    live = (E.max(axis=0) > 0) | (O > 0)
    groups = np.full(O.size, -1)
    g, acc = 0, np.zeros(E.shape[0])
    idx = np.flatnonzero(live)
    last_open = []
    for i in idx:
        groups[i] = g
        acc += E[:, i]
        last_open.append(i)
        if np.all(acc >= min_expected):
            g, acc, last_open = g + 1, np.zeros(E.shape[0]), []
    if last_open and g > 0:            # a short remainder joins the previous group
        groups[last_open] = g - 1
    elif last_open:
        g = 1
    n_groups = int(groups.max() + 1) if idx.size else 0
    if n_groups < 2:
        return np.full(E.shape[0], np.nan), n_groups, groups
    sel = groups >= 0
    Og = np.bincount(groups[sel], O[sel], n_groups)
    Eg = np.stack([np.bincount(groups[sel], e[sel], n_groups) for e in E])
    with np.errstate(divide="ignore", invalid="ignore"):
        chi2 = np.where(Eg > 0, (Og - Eg) ** 2 / Eg, np.where(Og > 0, np.inf, 0.0)).sum(axis=1)
    return chi2, n_groups, groups


def chi2_sf(x, df):
    return float(stats.chi2.sf(x, df)) if df >= 1 and np.isfinite(x) else float("nan")


def _geometric_draws(p: float, L: np.ndarray, n_boot: int, rng):
    """Chunks of run lengths, (b, rounds) each, drawn from the truncated geometric with the rounds' horizons."""
    chunk = max(1, 4_000_000 // max(L.size, 1))
    for b0 in range(0, n_boot, chunk):
        nb = min(chunk, n_boot - b0)
        if p <= 0 or p >= 1:
            yield np.repeat((np.zeros_like(L) if p <= 0 else L)[None], nb, axis=0)
        else:
            yield np.minimum(rng.geometric(1.0 - p, size=(nb, L.size)) - 1, L[None, :])


def _simulate_geometric(p: float, L: np.ndarray, n_boot: int, rng, clusters=None):
    """Count rows of ``n_boot`` data sets drawn from the truncated geometric with the rounds' horizons:
    dense (n_boot, 2 Lmax) for short horizons, else :class:`glance_law.tail.mle.CellCounts` over the
    cells the draws hit (memory O(n_boot * rounds), not O(n_boot * L)). With ``clusters`` (the prompt
    code of each round), also the design effect of each data set (:func:`design_effects`): (counts,
    deffs)."""
    Lmax = int(L.max())
    L = L.astype(np.int64)
    deffs, parts = [], []
    for a in _geometric_draws(p, L, int(n_boot), rng):
        if clusters is not None:
            deffs.append(design_effects(a, clusters))
        parts.append(_cell_counts(a, L, Lmax) if 2 * Lmax <= _mle.DENSE_CELLS else
                     np.where(a >= L[None, :], Lmax + L[None, :] - 1, a))   # the cell of every round
    if 2 * Lmax <= _mle.DENSE_CELLS:
        out = np.concatenate(parts, axis=0) if parts else np.zeros((0, 2 * Lmax))
    else:
        cell = np.concatenate(parts, axis=0) if parts else np.zeros((0, L.size), dtype=np.int64)
        cells, inv = np.unique(cell, return_inverse=True)
        inv = inv.reshape(cell.shape)
        rows = np.arange(cell.shape[0])[:, None] * cells.size
        W = np.bincount((rows + inv).ravel(), minlength=cell.shape[0] * cells.size)
        out = _mle.CellCounts(cells, W.reshape(cell.shape[0], cells.size).astype(np.float64), Lmax)
    if clusters is None:
        return out
    return out, (np.concatenate(deffs) if deffs else np.zeros(0))


def _cell_counts(a: np.ndarray, L: np.ndarray, Lmax: int) -> np.ndarray:
    """Dense count rows (b, 2 Lmax) of run lengths ``a`` (b, rounds) with horizons ``L``."""
    nb = a.shape[0]
    full = a >= L[None, :]
    ex = np.where(full, 2 * Lmax, a)                              # a < L -> exact cell a
    ce = np.where(full, Lmax + L[None, :] - 1, 2 * Lmax)         # a = L -> capped cell
    rows = np.arange(nb)[:, None] * (2 * Lmax + 1)
    flat = np.bincount((rows + ex).ravel(), minlength=nb * (2 * Lmax + 1)) + \
        np.bincount((rows + ce).ravel(), minlength=nb * (2 * Lmax + 1))
    return flat.reshape(nb, 2 * Lmax + 1)[:, :2 * Lmax].astype(np.float64)


class LRT(NamedTuple):
    lrt: float
    p_bootstrap: float
    p_nominal: float
    n_boot: int
    null_draws: np.ndarray
    deff: float = 1.0
    null_deff: np.ndarray | None = None     # the design effect of each null draw (1 without clusters)


def histogram_design_effect(accepted, clusters) -> float:
    """Rao-Scott first-order design effect of the run-length histogram under prompt clustering.

    ``sum_k Var_clustered(pi_k) / sum_k pi_k (1 - pi_k) / n`` over the observed
    run-length cells k, with the CR1 prompt-clustered variance of each cell's
    proportion: 1 when rounds are independent, above 1 when rounds of a prompt share
    their luck (which inflates any statistic built on the histogram, the LRT included).
    """
    codes = np.unique(np.asarray(accepted), return_inverse=True)[1].ravel()
    return float(design_effects(codes[None], clusters)[0])


def design_effects(accepted: np.ndarray, clusters) -> np.ndarray:
    """:func:`histogram_design_effect` of each row of ``accepted`` (b, rounds), the rounds' prompts
    ``clusters`` shared by every row (a parametric bootstrap's data sets: the requests' sizes kept).

    With ``n_ck`` the rounds of prompt c in cell k, ``n_c`` its rounds and ``pi_k`` the cell's share,
    ``deff = G / (G - 1) x sum_ck (n_ck - pi_k n_c)^2 / (n (1 - sum_k pi_k^2))`` (the same number)."""
    a = np.atleast_2d(np.asarray(accepted, dtype=np.int64))
    b, n = a.shape
    cl = np.unique(np.asarray(clusters), return_inverse=True)[1].ravel().astype(np.int64)
    G = int(cl.max()) + 1 if n else 0
    if n < 2 or G < 2:
        return np.ones(b)
    K = int(a.max()) + 1
    pi = np.bincount((np.arange(b)[:, None] * K + a).ravel(), minlength=b * K).reshape(b, K) / n
    s_pi2 = (pi ** 2).sum(axis=1)
    n_c = np.bincount(cl, minlength=G).astype(np.float64)
    cross = (np.take_along_axis(pi, a, axis=1) * n_c[cl][None, :]).sum(axis=1)       # sum_c n_c sum_k pi_k n_ck
    key = (np.arange(b)[:, None] * G + cl[None, :]) * K + a                           # (draw, prompt, cell)
    uk, cnt = np.unique(key.ravel(), return_counts=True)
    sq = np.bincount(uk // (G * K), weights=cnt.astype(np.float64) ** 2, minlength=b)   # sum_ck n_ck^2
    num = sq - 2.0 * cross + s_pi2 * float((n_c ** 2).sum())
    den = n * (1.0 - s_pi2)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = G / (G - 1.0) * num / den
    # a draw whose prompts hold identical histograms has no between-prompt variance (num = 0): floored, so
    # that LRT / deff stays defined (an infinite draw, or 0/0 for an observed LRT of 0, is not a p-value)
    return np.where(den > 1e-12, np.maximum(d, 1e-6), 1.0)


def bootstrap_p(stat: float, draws: np.ndarray) -> float:
    """``(1 + #{draws >= stat}) / (B + 1)`` (ties within rounding count); NaN without draws."""
    if draws.size == 0:
        return float("nan")
    return float((1 + np.sum(draws >= stat - 1e-9 * (1 + stat))) / (draws.size + 1))


def lrt_test(accepted, horizon, n_boot: int = 199, seed=0, n_local: int = 4, clusters=None) -> LRT:
    """Likelihood-ratio test of the geometric against the two-state model.

    ``lrt = 2 (ll_two_state - ll_geometric)``. Its p-value is a parametric
    bootstrap under the fitted geometric (``n_boot`` data sets with the same
    horizons, both models refitted each time; ``p = (1 + #{LRT* >= LRT}) /
    (n_boot + 1)``). ``p_nominal`` is the paper's chi-square(4) reference,
    reported for comparison only: Wilks does not apply here (the law has 3
    identified parameters, one of which is unidentified under the null) and
    chi-square(4) is badly conservative.

    ``clusters`` (the prompt of each round) makes the bootstrap p-value prompt-aware:
    the parametric bootstrap draws rounds independently, while rounds of one prompt
    are correlated and inflate the LRT, so the observed statistic is first divided by
    the Rao-Scott first-order design effect of the run-length histogram
    (:func:`histogram_design_effect`, reported as ``deff``), and every bootstrap draw
    by its own design effect, computed with the same prompts (each prompt keeps its
    rounds and horizons; ``null_deff``): the statistic compared is ``LRT / deff`` on
    both sides. With few prompts the estimated design effect is noisy (sd 0.3 with 8
    requests), and dividing the observed LRT alone rejected 7% of true nulls at 0.05;
    dividing both keeps the size at 4-6% from 8 to 100 requests
    (``benchmarks/bench_tail.py --section requests``, docs/theory-tail.md section 3).
    """
    a, L = check_rounds(accepted, horizon)
    W = _mle.counts(a, L)[None]
    _, _, _, ll2, p, ll1 = fit_W(W, n_local)
    lrt = max(0.0, 2.0 * float(ll2[0] - ll1[0]))
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    draws, deffs = np.zeros(0), np.ones(0)
    if n_boot > 0:
        if clusters is None:
            Wb = _simulate_geometric(float(p[0]), L, int(n_boot), rng)
            deffs = np.ones(int(n_boot))
        else:
            Wb, deffs = _simulate_geometric(float(p[0]), L, int(n_boot), rng, clusters=clusters)
        _, _, _, llb2, _, llb1 = fit_W(Wb, n_local)
        draws = np.maximum(0.0, 2.0 * (llb2 - llb1))
    deff = 1.0 if clusters is None else histogram_design_effect(a, clusters)
    p_boot = bootstrap_p(lrt / deff, draws / deffs)
    return LRT(lrt, p_boot, float(stats.chi2.sf(lrt, NOMINAL_LRT_DF)), int(n_boot), draws, deff, deffs)

