"""The two brackets of the paper's Figure 4, and the rigorous forms of the upper one.

Lower bracket. AdaEDL's ``1 - sqrt(gamma H)`` (gamma = 0.2 by default) is a
*heuristic* lower bound on the acceptance probability computed from the
*drafter's* entropy (:func:`adaedl`). The rigorous statement is Pinsker's: the
acceptance probability of speculative sampling is ``1 - TV(p, q) >= 1 -
sqrt(KL(p || q) / 2)`` (:func:`pinsker_acceptance`).

Upper bracket. The paper draws a verification ceiling ``2 ln N / H`` at budget N
(:func:`verification_ceiling`). With Shannon entropy this is **not** a bound: one
token at 0.95 plus 0.05 spread evenly over 10^6 tokens has H = 0.889 nats, and the
best 64-node tree accepts 18.3 tokens in expectation against 2 ln 64 / 0.889 =
9.35. Rigorous forms (a tree's expected accepted length under independent
per-offset marginals is the sum over its nodes of the product of marginals along
the path; every node at depth d is worth at most ``e^(-h d)`` and the nodes of
one depth at most 1 together):

* min-entropy ``h = -ln max p`` (the smallest over offsets):
  ``E[a] <= ln(1 + N (1 - e^-h)) / h + 1`` (:func:`ceiling_min_entropy`);
* collision entropy ``H2 = -ln sum p^2`` (``h >= H2 / 2``):
  ``E[a] <= 2 ln(1 + N) / H2 + 1`` (:func:`ceiling_collision`).

:func:`best_tree_value` computes the exact value of the best N-node tree from
per-offset top-k marginals, for comparison with any ceiling.
"""
from __future__ import annotations

import heapq

import numpy as np
import pandas as pd
from scipy import special

from glance_law.errors import GlanceError
from glance_law.law.model import truncated_mean

__all__ = ["adaedl", "adaedl_mean", "pinsker_acceptance", "verification_ceiling", "ceiling_min_entropy",
           "ceiling_collision", "shannon_entropy", "min_entropy", "collision_entropy", "best_tree_value",
           "bracket_curves"]


def _nonneg(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if np.any(np.isnan(a)) or np.any(a < 0):
        raise GlanceError(f"{name} must be >= 0")
    return a


def _budget(N) -> np.ndarray:
    Na = np.asarray(N, dtype=np.float64)
    if not np.all(np.isfinite(Na)) or np.any(Na < 1):
        raise GlanceError(f"the budget N must be >= 1 node (got {N!r})")
    return Na


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


# ---------------------------------------------------------------------------
# lower bracket
# ---------------------------------------------------------------------------

def adaedl(H, gamma: float = 0.2):
    """AdaEDL's acceptance-probability estimate max(0, 1 - sqrt(gamma H)) from the *draft* entropy H.

    A heuristic, not a rigorous bound (the rigorous form is :func:`pinsker_acceptance`).
    """
    H = _nonneg(H, "entropy H")
    if not gamma > 0:
        raise GlanceError(f"gamma must be > 0 (got {gamma})")
    return _out(np.clip(1.0 - np.sqrt(gamma * H), 0.0, 1.0))


def adaedl_mean(H, L: int, gamma: float = 0.2):
    """The lower bracket in accepted-length units: M(adaedl(H), L) = sum_{l<=L} adaedl(H)^l."""
    if int(L) != L or L < 1:
        raise GlanceError(f"L (the horizon) must be an integer >= 1 (got {L!r})")
    return _out(truncated_mean(adaedl(H, gamma), int(L)))


def pinsker_acceptance(kl):
    """Rigorous lower bound on speculative sampling's acceptance probability: 1 - TV >= 1 - sqrt(KL / 2)."""
    kl = _nonneg(kl, "KL divergence")
    return _out(np.clip(1.0 - np.sqrt(kl / 2.0), 0.0, 1.0))


# ---------------------------------------------------------------------------
# upper bracket
# ---------------------------------------------------------------------------

def verification_ceiling(N, H):
    """The paper's verification ceiling 2 ln N / H (Shannon entropy H in nats; inf at H = 0).

    Not a bound: with Shannon entropy a tree can beat it (one token at 0.95 plus
    0.05 spread over 10^6 tokens: H = 0.889, the best 64-node tree accepts 18.3 >
    9.35). Use :func:`ceiling_min_entropy` or :func:`ceiling_collision` for a bound.
    """
    N, H = _budget(N), _nonneg(H, "entropy H")
    with np.errstate(divide="ignore"):
        return _out(np.where(H > 0, 2.0 * np.log(N) / np.where(H > 0, H, 1.0), np.inf))


def ceiling_min_entropy(N, h):
    """Rigorous: E[a] <= ln(1 + N (1 - e^-h)) / h + 1 for every N-node tree when every per-offset
    marginal has min-entropy >= h (largest probability <= e^-h); the h -> 0 limit is N + 1."""
    N, h = _budget(N), _nonneg(h, "min-entropy h")
    with np.errstate(divide="ignore", invalid="ignore"):
        val = np.log1p(N * -np.expm1(-h)) / h + 1.0
    return _out(np.where(h > 0, val, N + 1.0))


def ceiling_collision(N, H2):
    """Rigorous: E[a] <= 2 ln(1 + N) / H2 + 1 with collision entropy H2 = -ln sum p^2 (h >= H2 / 2)."""
    N, H2 = _budget(N), _nonneg(H2, "collision entropy H2")
    with np.errstate(divide="ignore"):
        return _out(np.where(H2 > 0, 2.0 * np.log1p(N) / np.where(H2 > 0, H2, 1.0) + 1.0, np.inf))


def _probs(p) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.size == 0 or np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise GlanceError("probabilities must lie in [0, 1]")
    s = p.sum(axis=-1)
    if np.any(np.abs(s - 1.0) > 1e-6):
        raise GlanceError("a distribution's probabilities must sum to 1")
    return p


def shannon_entropy(p):
    """-sum p ln p (nats) of distributions along the last axis."""
    return _out(special.entr(_probs(p)).sum(axis=-1))


def min_entropy(p):
    """-ln max p (nats)."""
    return _out(-np.log(_probs(p).max(axis=-1)))


def collision_entropy(p):
    """-ln sum p^2 (nats); min-entropy <= collision <= Shannon, and min-entropy >= collision / 2."""
    return _out(-np.log((_probs(p) ** 2).sum(axis=-1)))


# ---------------------------------------------------------------------------
# the exact best tree
# ---------------------------------------------------------------------------

def _heap_values(lq: np.ndarray, n: int) -> float:
    """Sum of the n best path probabilities by a best-first walk (first child / next sibling)."""
    L, k = lq.shape
    heap = [(-lq[0, 0], 1, 0, 0.0)] if np.isfinite(lq[0, 0]) else []   # (-score, depth, choice, parent score)
    total, taken = 0.0, 0
    while heap and taken < n:
        neg, d, c, ps = heapq.heappop(heap)
        total += np.exp(-neg)
        taken += 1
        if c + 1 < k and np.isfinite(lq[d - 1, c + 1]):
            heapq.heappush(heap, (-(ps + lq[d - 1, c + 1]), d, c + 1, ps))
        if d < L and np.isfinite(lq[d, 0]):
            heapq.heappush(heap, (neg - lq[d, 0], d + 1, 0, -neg))
    return total


def best_tree_value(marginals, budget: int, log: bool = False):
    """Exact expected accepted length of the best ``budget``-node tree from per-offset marginals.

    ``marginals``: (L, k) or (R, L, k) per-offset top-k probabilities (or
    log-probabilities with ``log=True``, e.g. the logged ``topk_logq``); rows need
    not be sorted. Under independent offsets a tree's value is the sum over its
    nodes of the product of the marginals along the node's path; path products
    never grow with depth, so the best tree is the best-first one of
    :func:`glance_law.replay.tree.best_first` and its value the sum of its nodes'
    path probabilities. Exact for the logged top-k (the full distribution's best
    tree when k >= budget). NaN entries are padding (an absent token: probability 0).
    Each row holds probabilities of distinct tokens, so it may sum to at most 1 (up to
    1e-4 of rounding); a larger sum is refused. Returns a float or an (R,) array.
    """
    from glance_law.replay.tree import best_first, max_code_bits
    x = np.asarray(marginals, dtype=np.float64)
    if x.ndim not in (2, 3) or x.size == 0:
        raise GlanceError("marginals must have shape (L, k) or (rounds, L, k)")
    N = int(budget)
    if N != budget or N < 1:
        raise GlanceError(f"the budget must be an integer >= 1 node (got {budget!r})")
    if log:
        if np.any(x > 1e-6):
            raise GlanceError("log-probabilities must be <= 0")
        lq = np.where(np.isnan(x), -np.inf, np.minimum(x, 0.0))
    else:
        x = np.where(np.isnan(x), 0.0, x)
        if np.any((x < 0) | (x > 1)):
            raise GlanceError("probabilities must lie in [0, 1]")
        with np.errstate(divide="ignore"):
            lq = np.log(x)
    total = np.exp(lq).sum(axis=-1)
    if np.any(total > 1.0 + 1e-4):
        where = tuple(int(i) for i in np.unravel_index(int(np.argmax(total)), total.shape))
        raise GlanceError(f"the marginals of one offset sum to {float(total[where]):.6g} > 1 (row {where}): they "
                          "must be probabilities of distinct tokens (top-k of one distribution)")
    single = lq.ndim == 2
    lq = -np.sort(-(lq[None] if single else lq), axis=2)
    lq = lq[:, :N, :N]                      # an N-node tree is at most N deep and uses ranks < N
    R, L, k = lq.shape
    if max_code_bits(L, k) <= 62:
        s, _, _ = best_first(lq, N)
        vals = np.where(np.isfinite(s), np.exp(s), 0.0).sum(axis=1)
    else:
        vals = np.array([_heap_values(lq[r], N) for r in range(R)])
    return float(vals[0]) if single else vals


def outside_counts(H, accepted, N: int = 31, L: int = 15, gamma: float = 0.2) -> tuple[int, int]:
    """How many (entropy, mean accepted) points lie below the AdaEDL bracket and above the
    paper's 2 ln N / H ceiling (Figure 4's caption)."""
    br = bracket_curves(H, N=N, L=L, gamma=gamma)
    a = np.atleast_1d(np.asarray(accepted, dtype=np.float64))
    return int((a < br["adaedl"].to_numpy()).sum()), int((a > br["ceiling"].to_numpy()).sum())


def bracket_curves(H, N: int = 31, L: int = 15, gamma: float = 0.2) -> pd.DataFrame:
    """Figure 4's brackets on an entropy grid, in accepted-length units: the AdaEDL lower
    bracket M(1 - sqrt(gamma H), L) and the paper's ceiling 2 ln N / H (not a bound; see
    :func:`verification_ceiling`), with the law's horizon cap L."""
    H = _nonneg(H, "entropy H")
    return pd.DataFrame({"entropy": np.atleast_1d(H), "adaedl": np.atleast_1d(adaedl_mean(H, L, gamma)),
                         "ceiling": np.atleast_1d(verification_ceiling(N, H)), "horizon": float(L)})
