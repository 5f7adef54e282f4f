"""Likelihood and global maximum likelihood of the two-state run-length model (pure numpy).

Used by :mod:`glance_law.tail`; see ``docs/theory-tail.md`` for the derivations.

The law. With ``v = (pi, 1-pi)``, ``D = diag(rho_D, rho_U)``, ``T = [[t_DD,
1-t_DD], [1-t_UU, t_UU]]`` and ``K = T D``, the survival ``S(l) = v D K^(l-1) 1``
satisfies ``S(0) = v T^-1 1 = 1`` as well, so by Cayley-Hamilton the whole
sequence obeys ``S(l+2) = tr K S(l+1) - det K S(l)`` from ``l = 0``: the law
depends on theta only through the **three** invariants ``(S1, tr K, det K)``,
equivalently the eigenvalues ``lambda1 >= lambda2`` of K and ``S1``:

    S(l) = lambda2^l + (S1 - lambda2) h_l,   h_l = sum_{j<l} lambda1^j lambda2^(l-1-j),

which is *affine in S1* for fixed eigenvalues. The set of laws the model can
produce is exactly

    F = { |lambda2| <= lambda1 <= 1,  s_lo(lambda1, lambda2) <= S1 <= 1 },
    s_lo = lambda2 (lambda2 >= 0),   lambda1 |lambda2| / (1 - lambda1 - lambda2) (lambda2 < 0),

(:func:`s1_lower`; :func:`theta_from_law` gives a theta for every point of F,
:func:`law_from_theta` the point of any theta).

Global MLE. Because the log-likelihood is concave in S1 for fixed eigenvalues,
the profile ``max_S1 ll`` is computed exactly (safeguarded Newton) on a fixed grid
over ``(lambda1, v = lambda2 / lambda1)``; every local maximum of the grid
profile (the best few) is refined by a compass search on the profile. This
finds the global maximum reliably, unlike multi-start local ascent in theta,
whose surface has ridges (a 2-dimensional set of theta per law) and several
local maxima on the faces of the parameter cube.

Data enter only through the count vector of a data set: cells
``P(a=0..Lmax-1)`` then ``S(1..Lmax)`` (a round with ``a < L`` counts in cell
``a``, a round with ``a = L`` in cell ``Lmax + L - 1``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

# ---------------------------------------------------------------------------
# theta-space evaluation (reference path, also used for pmf/survival)
# ---------------------------------------------------------------------------


def parts(th: np.ndarray):
    """v (n, 2), rho (n, 2), T (n, 2, 2) of parameter rows (n, 5) = (pi, rho_D, rho_U, t_DD, t_UU)."""
    pi, rd, ru, tdd, tuu = np.asarray(th, dtype=np.float64).T
    v = np.stack([pi, 1.0 - pi], axis=-1)
    rho = np.stack([rd, ru], axis=-1)
    T = np.empty((v.shape[0], 2, 2))
    T[:, 0, 0], T[:, 0, 1] = tdd, 1.0 - tdd
    T[:, 1, 0], T[:, 1, 1] = 1.0 - tuu, tuu
    return v, rho, T


def forward(th: np.ndarray, Lmax: int):
    """Point masses ``P(a=k)`` for k = 0..Lmax-1 (as if L > k) and survival ``S(l)``, l = 1..Lmax.

    ``P(a=k) = v D K^(k-1) T (1 - rho)`` (``v (1 - rho)`` for k = 0) is computed
    directly, not as ``S(k) - S(k+1)``, so it keeps full relative precision when
    rho_D is near 1. Both outputs are (n, Lmax).
    """
    v, rho, T = parts(th)
    q = 1.0 - rho
    n = v.shape[0]
    P = np.empty((n, Lmax))
    S = np.empty((n, Lmax))
    P[:, 0] = (v * q).sum(-1)
    f = v * rho
    for l in range(1, Lmax + 1):
        S[:, l - 1] = f.sum(-1)
        if l == Lmax:
            break
        g = np.einsum("ni,nij->nj", f, T)
        P[:, l] = (g * q).sum(-1)
        f = g * rho
    return P, S


def cells_from_theta(th: np.ndarray, Lmax: int) -> np.ndarray:
    """Cell probabilities (n, 2 Lmax): P(a=0..Lmax-1) then S(1..Lmax)."""
    P, S = forward(th, Lmax)
    return np.concatenate([P, S], axis=1)


def loglik_cells(prob: np.ndarray, W: np.ndarray) -> np.ndarray:
    """sum_c W_c log prob_c per row (cells with no count contribute 0; a counted 0 gives -inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(W > 0, W * np.log(np.maximum(prob, 0.0)), 0.0)
    return t.sum(-1)


def counts(accepted, horizon, Lmax: int | None = None) -> np.ndarray:
    """Count vector (2 Lmax,) of one data set: #{a = k < L} for k < Lmax, then #{a = L = l} for l = 1..Lmax."""
    a = np.asarray(accepted, dtype=np.int64)
    L = np.asarray(horizon, dtype=np.int64)
    Lmax = int(L.max(initial=1)) if Lmax is None else int(Lmax)
    full = a >= L
    exact = np.bincount(a[~full], minlength=Lmax)[:Lmax]
    cens = np.bincount(L[full] - 1, minlength=Lmax)[:Lmax]
    return np.concatenate([exact, cens]).astype(np.float64)


@dataclass(frozen=True, eq=False)
class CellCounts:
    """Count rows over a subset of the ``2 Lmax`` cells (:func:`counts`): ``W`` (n, c) holds the
    counts at the cell indices ``cells`` (c,), every other cell is 0. With a large horizon most
    cells are empty, so this keeps data sets at O(rounds) instead of O(L)."""

    cells: np.ndarray
    W: np.ndarray
    Lmax: int

    @classmethod
    def of(cls, W, Lmax: int | None = None) -> CellCounts:
        """``W`` as CellCounts (a dense (n, 2 Lmax) array: its non-empty columns)."""
        if isinstance(W, CellCounts):
            return W
        W = np.atleast_2d(np.asarray(W, dtype=np.float64))
        cols = np.flatnonzero(W.any(axis=0))
        return cls(cols, W[:, cols], W.shape[1] // 2 if Lmax is None else int(Lmax))

    def dense(self) -> np.ndarray:
        out = np.zeros((self.W.shape[0], 2 * self.Lmax))
        out[:, self.cells] = self.W
        return out

    def rows(self, i0: int, i1: int) -> CellCounts:
        """Rows ``i0:i1`` over their own non-empty cells."""
        W = self.W[i0:i1]
        keep = W.any(axis=0)
        return CellCounts(self.cells[keep], W[:, keep], self.Lmax)


def geometric_from_counts(W):
    """Closed-form MLE ``p = successes / (successes + failures)`` and its log-likelihood, per count row
    (``W`` dense (n, 2 Lmax) or :class:`CellCounts`)."""
    if isinstance(W, CellCounts):
        exact = W.cells < W.Lmax
        value = np.where(exact, W.cells, W.cells - W.Lmax + 1).astype(np.float64)
        succ = W.W @ value
        fail = W.W[:, exact].sum(-1)
        W = W.W
    else:
        W = np.atleast_2d(np.asarray(W, dtype=np.float64))
        Lmax = W.shape[1] // 2
        k = np.arange(Lmax, dtype=np.float64)
        succ = W[:, :Lmax] @ k + W[:, Lmax:] @ (k + 1.0)
        fail = W[:, :Lmax].sum(-1)
    tot = succ + fail
    p = np.divide(succ, tot, out=np.full_like(tot, np.nan), where=tot > 0)
    ll = special.xlogy(succ, p) + special.xlog1py(fail, -p)
    return p, ll


# ---------------------------------------------------------------------------
# the law's invariants
# ---------------------------------------------------------------------------

def s1_lower(l1, l2):
    """Smallest S1 the model allows for eigenvalues (lambda1, lambda2) of K."""
    l1 = np.asarray(l1, dtype=np.float64)
    l2 = np.asarray(l2, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        neg = -l1 * l2 / (1.0 - l1 - l2)
    neg = np.where(np.isfinite(neg), neg, 1.0)
    return np.where(l2 >= 0, l2, np.minimum(neg, 1.0))


def law_from_theta(th: np.ndarray):
    """``(lambda1, lambda2, S1)`` of parameter rows (n, 5): the three numbers the law depends on."""
    v, rho, T = parts(th)
    K = T * rho[:, None, :]
    tr = K[:, 0, 0] + K[:, 1, 1]
    det = K[:, 0, 0] * K[:, 1, 1] - K[:, 0, 1] * K[:, 1, 0]
    disc = np.sqrt(np.maximum(tr * tr - 4.0 * det, 0.0))
    return 0.5 * (tr + disc), 0.5 * (tr - disc), (v * rho).sum(-1)


def theta_from_law(l1, l2, s1) -> np.ndarray:
    """A parameter vector (n, 5) producing the law ``(lambda1, lambda2, S1)`` (canonical choice).

    When ``lambda2 >= 0`` and ``S1 <= lambda1`` the law is a no-switching mixture
    and the canonical theta is ``(C, lambda1, lambda2, 1, 1)`` with ``C = (S1 -
    lambda2) / (lambda1 - lambda2)``: a fraction C of runs in a state that
    matches with lambda1 for good, the rest with lambda2. Otherwise (a rising
    hazard, S1 > lambda1, or an oscillating one, lambda2 < 0) the canonical
    theta puts rho_D = 1 and reads the other parameters off the law.
    """
    l1 = np.atleast_1d(np.asarray(l1, dtype=np.float64))
    l2 = np.atleast_1d(np.asarray(l2, dtype=np.float64))
    s1 = np.atleast_1d(np.asarray(s1, dtype=np.float64))
    n = l1.shape[0]
    th = np.empty((n, 5))
    mix = (l2 >= 0) & (s1 <= l1) & (l1 > l2)
    with np.errstate(divide="ignore", invalid="ignore"):
        C = (s1 - l2) / (l1 - l2)
        th[mix] = np.column_stack([C, l1, l2, np.ones(n), np.ones(n)])[mix]
        x = np.ones(n)                                      # rho_D = 1
        yhi = np.where(l2 >= 0, l1, l1 + l2 - l1 * l2)      # largest rho_U compatible with rho_D = 1
        y = np.maximum(np.minimum(s1, yhi), 0.0)
        phx = (x - l1) * (x - l2)
        phy = (y - l1) * (y - l2)
        a = np.where(x > y, 1.0 - phx / (x * (x - y)), 1.0)
        b = np.where((y > 0) & (x > y), 1.0 - phy / (y * (y - x)), 1.0)
        pi = np.where(x > y, (s1 - y) / (x - y), 1.0)
    rest = np.column_stack([pi, x, y, a, b])
    th[~mix] = rest[~mix]
    return np.clip(th, 0.0, 1.0)


def law_coefficients(l1: np.ndarray, l2: np.ndarray, Lmax: int):
    """Cells as affine functions of S1: ``prob = A + B * S1``, each (m, 2 Lmax) (cells as in :func:`counts`)."""
    l1 = np.asarray(l1, dtype=np.float64)
    l2 = np.asarray(l2, dtype=np.float64)
    m = l1.shape[0]
    h = np.zeros((m, Lmax + 1))
    p2 = np.ones((m, Lmax + 1))
    for l in range(Lmax):
        h[:, l + 1] = l1 * h[:, l] + p2[:, l]
        p2[:, l + 1] = p2[:, l] * l2
    A = p2 - l2[:, None] * h          # S(l) = A_l + B_l S1, l = 0..Lmax
    B = h
    return (np.concatenate([A[:, :-1] - A[:, 1:], A[:, 1:]], axis=1),
            np.concatenate([B[:, :-1] - B[:, 1:], B[:, 1:]], axis=1))


def _advance(h, p2, l1, l2, d: int):
    """``d`` steps of the recurrence ``(h, p2) <- (l1 h + p2, l2 p2)`` at once: the state times
    ``M^d``, ``M = [[l1, 1], [0, l2]]``, by repeated squaring (O(log d) vector operations)."""
    a, b, c = np.ones_like(l1), np.zeros_like(l1), np.ones_like(l1)
    pa, pb, pc = l1, np.ones_like(l1), l2
    while d:
        if d & 1:
            a, b, c = a * pa, a * pb + b * pc, c * pc
        d >>= 1
        if d:
            pa, pb, pc = pa * pa, pb * (pa + pc), pc * pc
    return a * h + b * p2, c * p2


def coefficient_blocks(l1: np.ndarray, l2: np.ndarray, cells, Lmax: int, block: int = 256):
    """:func:`law_coefficients` at the cell indices ``cells`` only: yields ``(positions, A, B)``
    with A, B (m, len(positions)) for blocks of at most ``block`` cells (positions index
    ``cells``), in the order the cells complete.

    The recurrence visits only the survival indices the cells need (an exact cell k needs S(k)
    and S(k+1), a capped cell l needs S(l)); a gap between them is crossed by :func:`_advance`, so
    the cost is O(m * cells * log L) and memory O(m * block), never (m, Lmax). Consecutive
    indices take the step of :func:`law_coefficients` itself (the same arithmetic)."""
    l1 = np.asarray(l1, dtype=np.float64)
    l2 = np.asarray(l2, dtype=np.float64)
    cells = np.asarray(cells, dtype=np.int64)
    if cells.size == 0:
        return
    exact = cells < Lmax
    done_at = np.where(exact, cells + 1, cells - Lmax + 1)   # exact cell k: S(k) - S(k+1); capped l: S(l)
    order = np.argsort(done_at, kind="stable")
    events = np.unique(np.concatenate([done_at, done_at[exact] - 1]))
    m = l1.shape[0]
    h = np.zeros(m)
    p2 = np.ones(m)
    prev_a = prev_b = None
    pos: list[int] = []
    ca: list[np.ndarray] = []
    cb: list[np.ndarray] = []
    i, at = 0, 0
    for l in events.tolist():
        if l == at + 1:
            h, p2 = l1 * h + p2, p2 * l2
        elif l > at:
            h, p2 = _advance(h, p2, l1, l2, l - at)
        at = l
        a_l = p2 - l2 * h
        while i < order.size and done_at[order[i]] == l:
            c = int(order[i])
            if exact[c]:          # S(k) was the previous event (k = l - 1 is always one)
                ca.append(prev_a - a_l)
                cb.append(prev_b - h)
            else:
                ca.append(a_l)
                cb.append(h)
            pos.append(c)
            i += 1
            if len(pos) == block:
                yield np.array(pos), np.stack(ca, axis=1), np.stack(cb, axis=1)
                pos, ca, cb = [], [], []
        prev_a, prev_b = a_l, h
    if pos:
        yield np.array(pos), np.stack(ca, axis=1), np.stack(cb, axis=1)


def law_coefficients_at(l1: np.ndarray, l2: np.ndarray, cells, Lmax: int):
    """``(A, B)``, each (m, len(cells)): :func:`law_coefficients` restricted to ``cells``."""
    l1 = np.asarray(l1, dtype=np.float64)
    cells = np.asarray(cells, dtype=np.int64)
    A = np.empty((l1.shape[0], cells.size))
    B = np.empty_like(A)
    for pos, a, b in coefficient_blocks(l1, l2, cells, Lmax, block=max(1, cells.size)):
        A[:, pos] = a
        B[:, pos] = b
    return A, B


# ---------------------------------------------------------------------------
# the profile over S1 (concave, exact)
# ---------------------------------------------------------------------------

def _score(A, B, W, x):
    den = A + B * x[:, None]
    mask = W > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # the cells with counts only (no quotient formed and then masked): the same values, less work
        r = np.divide(W * B, den, out=np.zeros(den.shape), where=mask)
        hess = -np.divide(r * B, den, out=np.zeros(den.shape), where=mask).sum(-1)
        return r.sum(-1), hess


def _ll_at(A, B, W, x):
    return loglik_cells(A + B * x[:, None], W)


def profile_s1(A, B, W, lo, hi, x0=None, max_iter: int = 200, tol: float = 1e-13):
    """``argmax_S1`` and ``max`` of ``sum_c W_c log(A_c + B_c S1)`` over ``[lo, hi]`` for every row.

    Concave in S1, so the maximiser is an endpoint when the score there points
    outward, else the unique root of the score: Newton's method, safeguarded on a
    shrinking bracket by the Illinois false-position step (the score has poles
    just outside the bracket where a cell's probability vanishes).
    """
    W = np.broadcast_to(W, A.shape)
    g_hi, _ = _score(A, B, W, hi)
    g_lo, _ = _score(A, B, W, lo)
    x = np.where(g_hi >= 0, hi, np.where(g_lo <= 0, lo, np.nan))
    inner = np.flatnonzero(np.isnan(x) & np.isfinite(lo) & (hi > lo))
    if inner.size:
        idx = inner
        a_, b_, w_ = A[idx], B[idx], W[idx]
        blo, bhi = lo[idx].copy(), hi[idx].copy()
        glo, ghi = g_lo[idx].copy(), g_hi[idx].copy()
        last = np.zeros(idx.size)
        xi = 0.5 * (blo + bhi) if x0 is None else np.clip(np.asarray(x0, dtype=np.float64)[idx], blo, bhi)
        xi = np.where((xi <= blo) | (xi >= bhi), 0.5 * (blo + bhi), xi)
        for _ in range(max_iter):
            g, hs = _score(a_, b_, w_, xi)
            pos = g > 0
            # Illinois: when the same end moves twice running, halve the stale end's score
            side = np.where(pos, 1.0, -1.0)
            again = side == last
            glo = np.where(again & ~pos, 0.5 * glo, glo)
            ghi = np.where(again & pos, 0.5 * ghi, ghi)
            last = side
            blo, glo = np.where(pos, xi, blo), np.where(pos, g, glo)
            bhi, ghi = np.where(pos, bhi, xi), np.where(pos, ghi, g)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                xn = xi - g / hs
                xf = blo - glo * (bhi - blo) / (ghi - glo)
            xf = np.where(np.isfinite(xf) & (xf > blo) & (xf < bhi), xf, 0.5 * (blo + bhi))
            bad = ~np.isfinite(xn) | (xn <= blo) | (xn >= bhi)
            xn = np.where(g == 0, xi, np.where(bad, xf, xn))      # a zero score: xi is the maximiser
            conv = (np.abs(xn - xi) <= tol * (1.0 + np.abs(xn))) | \
                   (bhi - blo <= tol * (1.0 + np.abs(xn)))
            xi = xn
            if conv.all():
                break
            if conv.sum() * 2 >= conv.size:      # drop the converged rows
                x[idx[conv]] = xi[conv]
                keep = ~conv
                idx, a_, b_, w_, xi, blo, bhi, glo, ghi, last = (
                    t[keep] for t in (idx, a_, b_, w_, xi, blo, bhi, glo, ghi, last))
        x[idx] = xi
    x = np.where(np.isnan(x), lo, x)
    return x, _ll_at(A, B, W, x)


# ---------------------------------------------------------------------------
# grid + compass search over the eigenvalues
# ---------------------------------------------------------------------------

N_U, N_V = 64, 65
L1_MIN = 1e-6


def _l1_of_u(u):
    """lambda1 = 1 - (1 - u)^2: the search coordinate u in [0, 1] is dense near lambda1 = 1."""
    return np.maximum(1.0 - (1.0 - np.asarray(u, dtype=np.float64)) ** 2, L1_MIN)


N_S1 = 33        # S1 values per grid point in the tabulated first stage


@lru_cache(maxsize=4)
def _grid(Lmax: int, nu: int | None = None, nv: int | None = None, ns: int | None = None):
    """The first-stage table: log cell probabilities at ``nu * nv`` eigenvalue points times
    ``ns`` values of S1 spanning each point's feasible range, as a float32 matrix
    ``(nu * nv * ns, 2 Lmax)`` (-1e30 for impossible cells), plus the coordinates."""
    nu = N_U if nu is None else nu
    nv = N_V if nv is None else nv
    ns = N_S1 if ns is None else ns
    u = np.linspace(0.0, 1.0, nu + 1)[1:]
    v = np.linspace(-1.0, 1.0, nv)
    U, V = np.meshgrid(u, v, indexing="ij")
    U, V = U.ravel(), V.ravel()
    L1 = _l1_of_u(U)
    A, B = law_coefficients(L1, L1 * V, Lmax)
    lo = s1_lower(L1, L1 * V)
    t = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, ns)))       # denser at both ends of [lo, 1]
    X = lo[:, None] + (1.0 - lo[:, None]) * t[None, :]           # (m, ns)
    prob = A[:, None, :] + B[:, None, :] * X[:, :, None]         # (m, ns, cells)
    with np.errstate(divide="ignore"):
        logp = np.log(np.maximum(prob, 0.0))
    logp = np.maximum(logp, -1e30).astype(np.float32).reshape(-1, 2 * Lmax)
    for arr in (U, V, X, logp):
        arr.setflags(write=False)
    return U, V, X, logp, (nu, nv, ns)


def _starts(prof: np.ndarray, shape, k: int) -> np.ndarray:
    """Grid indices to refine: the best ``k`` local maxima of the grid profile (8-neighbourhood),
    then the best point of each edge where optima often sit (lambda2 = -lambda1, lambda2 =
    lambda1, lambda1 = 1) and the best point with lambda2 < 0; ``k + 4`` indices."""
    n1, nv = shape
    g = prof.reshape(n1, nv)
    pad = np.pad(g, 1, constant_values=-np.inf)
    nb = np.max(np.stack([pad[1 + i:1 + i + n1, 1 + j:1 + j + nv]
                          for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0)]), axis=0)
    loc = np.flatnonzero((g >= nb).ravel() & np.isfinite(g.ravel()))
    if loc.size == 0:
        loc = np.array([int(np.argmax(prof))])
    loc = loc[np.argsort(-prof[loc], kind="stable")][:k]
    loc = np.concatenate([loc, np.repeat(loc[:1], k - loc.size)])
    idx = np.arange(n1 * nv).reshape(n1, nv)
    edges = [idx[:, 0], idx[:, -1], idx[-1, :], idx[:, : nv // 2].ravel()]
    extra = [e[int(np.argmax(prof[e]))] for e in edges]
    return np.concatenate([loc, np.array(extra, dtype=np.int64)])


def _profile_at(u, v, W, Lmax, x0=None, ratio: bool = True, max_iter: int = 200, cells=None):
    """The profile at (u, v): lambda2 = lambda1 * v (``ratio``) or lambda2 = clip(v, -lambda1, lambda1).

    ``W`` holds counts at every cell, or (``cells``) at those cells only.
    With a small ``max_iter`` the value is a lower bound of the profile (a feasible S1).
    """
    l1 = _l1_of_u(u)
    l2 = l1 * v if ratio else np.clip(v, -l1, l1)
    A, B = law_coefficients(l1, l2, Lmax) if cells is None else law_coefficients_at(l1, l2, cells, Lmax)
    lo = s1_lower(l1, l2)
    return profile_s1(A, B, W, lo, np.ones_like(lo), x0, max_iter=max_iter)


_MOVES = np.array([(i, j) for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0)], dtype=np.float64)
_STENCIL = _MOVES
_X9 = np.concatenate([[0.0], _MOVES[:, 0]])
_Y9 = np.concatenate([[0.0], _MOVES[:, 1]])
_STENCIL_PINV = np.linalg.pinv(np.stack([np.ones(9), _X9, _Y9, _X9 * _X9, _X9 * _Y9, _Y9 * _Y9], axis=1))


def _quad_step(u, v, pu, pv, f0, fs, su, sv):
    """Newton step of the least-squares quadratic through the centre and its 8 neighbours
    (coordinates scaled by the step sizes ``su``, ``sv``; NaN where the fit is not concave)."""
    zero = np.zeros((u.shape[0], 1))
    X = np.concatenate([zero, (pu - u[:, None]) / su[:, None]], axis=1)
    Y = np.concatenate([zero, (pv - v[:, None]) / sv[:, None]], axis=1)
    F = np.concatenate([f0[:, None], fs], axis=1)
    ok = np.all(np.isfinite(F), axis=1)
    with np.errstate(invalid="ignore"):
        F = np.where(np.isfinite(F), F - f0[:, None], 0.0)
    D = np.stack([np.ones_like(X), X, Y, X * X, X * Y, Y * Y], axis=2)       # (k, 9, 6)
    c = np.einsum("ij,kj->ki", _STENCIL_PINV, F)
    clipped = np.flatnonzero(np.any(np.abs(D[:, 1:, 1:3] - _STENCIL[None, :, :]) > 1e-9, axis=(1, 2)))
    if clipped.size:   # stencil points clipped at the domain's edge: solve those rows individually
        c[clipped] = np.einsum("kij,kj->ki", np.linalg.pinv(D[clipped], rcond=1e-10), F[clipped])
    h11, h12, h22 = 2 * c[:, 3], c[:, 4], 2 * c[:, 5]
    with np.errstate(invalid="ignore", over="ignore"):
        det = h11 * h22 - h12 ** 2
    negdef = (h11 < 0) & (det > 0) & ok
    with np.errstate(divide="ignore", invalid="ignore"):
        du = -(h22 * c[:, 1] - h12 * c[:, 2]) / det
        dv = -(h11 * c[:, 2] - h12 * c[:, 1]) / det
    return np.where(negdef, du * su, np.nan), np.where(negdef, dv * sv, np.nan)


def _search(u, v, s1, ll, W, Lmax, du, dv, group=None, max_iter: int = 60, tol: float = 1e-7,
            prune_after: int = 4, cells=None):
    """Maximise the profile over (u, lambda2) in [0, 1] x [-1, 1] from each start (vectorised).

    The coordinates (u, lambda2) make the profile's long near-flat ridges (a small
    weight on a second mode: lambda1 or lambda2 nearly fixed) axis-aligned.

    Each iteration evaluates the 8 stencil neighbours at the current step and the
    Newton point of the quadratic fitted to the stencil, moves to the best of them
    if it improves, grows the step after a stencil move, shrinks it otherwise; a
    start stops when its step is below ``tol`` or four iterations gained < 1e-10.
    After ``prune_after`` iterations a start more than ``1 + 0.005 n`` log-likelihood
    units (n: the data set's rounds) below the best start of its data set
    (``group``) is dropped: its basin cannot climb that far within a grid cell.
    """
    group = np.zeros(u.shape[0], dtype=np.int64) if group is None else np.asarray(group)
    margin = 1.0 + 0.005 * W.sum(axis=1)
    du = np.full(u.shape, du, dtype=np.float64)
    dv = np.full(u.shape, dv, dtype=np.float64)
    act = np.arange(u.shape[0])
    stall = np.zeros(u.shape[0], dtype=np.int64)
    for it in range(max_iter):
        if act.size == 0:
            break
        k = act.size
        pu = np.clip(u[act, None] + _MOVES[None, :, 0] * du[act, None], 0.0, 1.0)
        pv = np.clip(v[act, None] + _MOVES[None, :, 1] * dv[act, None], -1.0, 1.0)
        xs, fs = _profile_at(pu.ravel(), pv.ravel(), np.repeat(W[act], 8, axis=0), Lmax, np.repeat(s1[act], 8),
                             ratio=False, max_iter=12, cells=cells)
        xs, fs = xs.reshape(k, 8), fs.reshape(k, 8)
        qu, qv = _quad_step(u[act], v[act], pu, pv, ll[act], fs, du[act], dv[act])
        lim_u, lim_v = 4.0 * du[act], 4.0 * dv[act]
        nu = np.clip(u[act] + np.clip(np.nan_to_num(qu), -lim_u, lim_u), 0.0, 1.0)
        nv = np.clip(v[act] + np.clip(np.nan_to_num(qv), -lim_v, lim_v), -1.0, 1.0)
        xq, fq = _profile_at(nu, nv, W[act], Lmax, s1[act], ratio=False, max_iter=12, cells=cells)
        fq = np.where(np.isnan(qu), -np.inf, fq)
        cand_f = np.concatenate([fs, fq[:, None]], axis=1)
        best = np.argmax(np.where(np.isfinite(cand_f), cand_f, -np.inf), axis=1)
        fb = cand_f[np.arange(k), best]
        up = fb > ll[act]
        isq = best == 8
        r = np.arange(k)
        bu = np.where(isq, nu, pu[r, np.minimum(best, 7)])
        bv = np.where(isq, nv, pv[r, np.minimum(best, 7)])
        bx = np.where(isq, xq, xs[r, np.minimum(best, 7)])
        with np.errstate(invalid="ignore"):          # -inf - -inf where a start has no feasible law yet
            gain = np.where(up, fb - ll[act], 0.0)
        sel = act[up]
        u[sel], v[sel], s1[sel], ll[sel] = bu[up], bv[up], bx[up], fb[up]
        grow = up & ~isq
        du[act[grow]] *= 1.5
        dv[act[grow]] *= 1.5
        du[act[~up]] *= 0.25
        dv[act[~up]] *= 0.25
        stall[act] = np.where(gain < 1e-10, stall[act] + 1, 0)
        keep = ((du[act] > tol) | (dv[act] > tol)) & (stall[act] < 4)
        if it >= prune_after:
            best_g = np.full(int(group.max()) + 1, -np.inf)
            np.maximum.at(best_g, group, np.where(np.isfinite(ll), ll, -np.inf))
            keep &= ll[act] >= best_g[group[act]] - margin[act]
        act = act[keep]
    return u, v, s1, ll


#: Up to this many cells (2 Lmax, i.e. horizons up to 16, the logs of the paper) data sets are scored
#: densely against the cached grid table (the original path, results unchanged); above it only each
#: chunk's non-empty cells are, so memory does not grow with L (same maxima to ~1e-9, see tests).
DENSE_CELLS = 32
#: Budget of the sparse path: grid cells per streamed block, and search rows x cells per chunk.
GRID_BLOCK = 32
SEARCH_ELEMENTS = 2_000_000


def fit_counts(W, n_local: int = 6, chunk: int = 64):
    """Global two-state MLE for every count row of ``W`` (n, 2 Lmax), dense or :class:`CellCounts`.

    Stage 1 scores every data set against the tabulated grid (one matrix
    product), stage 2 refines the best ``n_local`` local maxima of the grid
    profile by :func:`_search` with the exact concave profile over S1.
    Returns ``(lambda1, lambda2, S1, ll)``, each (n,).

    Memory: with ``2 Lmax <= DENSE_CELLS`` the whole grid table is built once and cached
    (the reference path); above that every chunk of data sets is scored only at its non-empty
    cells (:class:`CellCounts`), the grid streamed in blocks of ``GRID_BLOCK`` cells and the
    recurrence crossing gaps by squaring, so memory is O(rounds + L) whatever the horizon (a
    horizon of 30000: about 130 MB, as at 300).
    """
    if isinstance(W, CellCounts) and 2 * W.Lmax <= DENSE_CELLS:
        W = W.dense()
    if isinstance(W, CellCounts) or np.shape(W)[-1] > DENSE_CELLS:
        return _fit_sparse(CellCounts.of(W), n_local, chunk)
    W = np.atleast_2d(np.asarray(W, dtype=np.float64))
    n, c = W.shape
    Lmax = c // 2
    Ug, Vg, Xg, logp, (nu, nv, ns) = _grid(Lmax)
    rows, s_u, s_v, s_x = [], [], [], []
    for i0 in range(0, n, chunk):
        Wc = W[i0:i0 + chunk]
        ll = (logp @ Wc.T.astype(np.float32)).T.reshape(Wc.shape[0], nu * nv, ns)   # (chunk, points, ns)
        _collect_starts(ll, i0, n_local, (nu, nv), Ug, Vg, Xg, rows, s_u, s_v, s_x)
    return _refine(rows, s_u, s_v, s_x, W, Lmax, n, n_local, nu, nv, None)


def _best_s1(ll):
    """(the S1 index of the best grid value, that value) per (data set, grid point) of ``ll`` (rows,
    points, ns). ``ll`` is the transposed product ``(logp @ W.T).T``: its S1 axis is strided, and an
    argmax along it was most of the tail's first stage; on the product's own (points, ns, rows)
    layout it reads memory in order (the same indices: the first maximum either way)."""
    base = ll.transpose(1, 2, 0)
    if base.flags.c_contiguous:
        j = np.argmax(base, axis=1)                                       # (points, rows)
        prof = np.take_along_axis(base, j[:, None, :], axis=1)[:, 0, :]
        return j.T, prof.T.astype(np.float64)
    j = np.argmax(ll, axis=2)
    return j, np.take_along_axis(ll, j[:, :, None], axis=2)[:, :, 0].astype(np.float64)


def _collect_starts(ll, i0, n_local, shape, Ug, Vg, Xg, rows, s_u, s_v, s_x) -> None:
    j, prof = _best_s1(ll)
    for r in range(ll.shape[0]):
        loc = _starts(prof[r], shape, n_local)
        s_u.append(Ug[loc])
        s_v.append(Vg[loc])
        s_x.append(Xg[loc, j[r, loc]])
        rows.append(np.full(loc.size, i0 + r))


def _refine(rows, s_u, s_v, s_x, W, Lmax, n, n_local, nu, nv, cells):
    rows = np.concatenate(rows)
    u, v, s1 = (np.concatenate(a) for a in (s_u, s_v, s_x))
    w = _l1_of_u(u) * v
    s1, ll = _profile_at(u, w, W[rows], Lmax, s1, ratio=False, cells=cells)
    u, w, s1, ll = _search(u, w, s1, ll, W[rows], Lmax, 0.5 / nu, 1.0 / (nv - 1), group=rows, cells=cells)
    s1, ll = _profile_at(u, w, W[rows], Lmax, s1, ratio=False, cells=cells)     # exact profile at every end point
    k = n_local + 4
    ll_m = np.where(np.isfinite(ll), ll, -np.inf).reshape(n, k)
    best = np.argmax(ll_m, axis=1) + np.arange(n) * k
    l1 = _l1_of_u(u[best])
    return l1, np.clip(w[best], -l1, l1), s1[best], ll[best]


@lru_cache(maxsize=2)
def _grid_points(nu: int = N_U, nv: int = N_V, ns: int = N_S1):
    """The grid's coordinates without its table: U, V, lambda1, lambda2 (nu * nv,) and X (nu * nv, ns)."""
    u = np.linspace(0.0, 1.0, nu + 1)[1:]
    v = np.linspace(-1.0, 1.0, nv)
    U, V = np.meshgrid(u, v, indexing="ij")
    U, V = U.ravel(), V.ravel()
    L1 = _l1_of_u(U)
    lo = s1_lower(L1, L1 * V)
    t = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, ns)))
    X = lo[:, None] + (1.0 - lo[:, None]) * t[None, :]
    return U, V, L1, L1 * V, X


def _grid_scores(cc: CellCounts) -> np.ndarray:
    """Stage 1 of the sparse path: the grid log-likelihood (rows, points, ns) of the data sets
    ``cc``, the grid's log cell probabilities computed block by block at ``cc.cells`` only."""
    U, V, L1, L2, X = _grid_points()
    m, ns = X.shape
    acc = np.zeros((m * ns, cc.W.shape[0]), dtype=np.float32)
    Wt = cc.W.T.astype(np.float32)
    for pos, A, B in coefficient_blocks(L1, L2, cc.cells, cc.Lmax, GRID_BLOCK):
        prob = A[:, None, :] + B[:, None, :] * X[:, :, None]
        with np.errstate(divide="ignore"):
            logp = np.log(np.maximum(prob, 0.0))
        logp = np.maximum(logp, -1e30).astype(np.float32).reshape(-1, pos.size)
        acc += logp @ Wt[pos]
    return acc.T.reshape(cc.W.shape[0], m, ns)


def _fit_sparse(cc: CellCounts, n_local: int, chunk: int):
    """:func:`fit_counts` for data sets over a large horizon, chunk by chunk of data sets, each
    over its own non-empty cells (rows x starts x cells bounded by ``SEARCH_ELEMENTS``)."""
    n = cc.W.shape[0]
    U, V, _, _, X = _grid_points()
    nu, nv = N_U, N_V
    k = n_local + 4
    nnz = (cc.W > 0).sum(axis=1)
    out = [np.empty(n) for _ in range(4)]
    i0 = 0
    while i0 < n:
        i1, cells = i0 + 1, int(nnz[i0])
        while i1 < n and i1 - i0 < chunk and \
                (i1 + 1 - i0) * k * 8 * min(cells + int(nnz[i1]), cc.cells.size) <= SEARCH_ELEMENTS:
            cells += int(nnz[i1])
            i1 += 1
        part = cc.rows(i0, i1)
        rows, s_u, s_v, s_x = [], [], [], []
        _collect_starts(_grid_scores(part), 0, n_local, (nu, nv), U, V, X, rows, s_u, s_v, s_x)
        res = _refine(rows, s_u, s_v, s_x, part.W, part.Lmax, i1 - i0, n_local, nu, nv, part.cells)
        for o, r in zip(out, res):
            o[i0:i1] = r
        i0 = i1
    return tuple(out)
