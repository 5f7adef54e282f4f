"""The two brackets: AdaEDL / Pinsker, the paper's verification ceiling, its rigorous forms,
and the exact best N-node tree from per-offset marginals."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import special

from glance_law import brackets
from glance_law.errors import GlanceError


def brute_best_tree(P, N):
    """Max over prefix-closed node sets of size <= N of the sum of path products (P: (L, k))."""
    L, k = P.shape
    nodes = [c for d in range(1, L + 1) for c in itertools.product(range(k), repeat=d)]
    val = {c: float(np.prod([P[j, cj] for j, cj in enumerate(c)])) for c in nodes}
    best = 0.0
    for size in range(1, min(N, len(nodes)) + 1):
        for subset in itertools.combinations(nodes, size):
            s = set(subset)
            if all(len(c) == 1 or c[:-1] in s for c in subset):
                best = max(best, sum(val[c] for c in subset))
    return best


def test_issue_counterexample_shannon_ceiling_is_not_a_bound():
    # one token at 0.95 plus 0.05 spread evenly over 10^6 tokens, at every offset
    H = special.entr(0.95) + 10 ** 6 * special.entr(0.05 / 10 ** 6)
    assert H == pytest.approx(0.889, abs=5e-4)
    row = np.r_[0.95, np.full(63, 0.05 / 10 ** 6)]        # the top-64 suffices for a 64-node tree
    P = np.tile(row, (64, 1))
    best = brackets.best_tree_value(P, 64)
    assert best == pytest.approx(sum(0.95 ** d for d in range(1, 65)), rel=1e-12)
    assert round(best, 1) == 18.3
    paper = brackets.verification_ceiling(64, H)
    assert paper == pytest.approx(9.35, abs=0.01)
    assert best > paper
    # the rigorous forms hold
    h = brackets.min_entropy(np.r_[0.95, np.full(10, 0.005)])
    assert h == pytest.approx(-np.log(0.95))
    assert brackets.ceiling_min_entropy(64, h) >= best
    H2 = -np.log(0.95 ** 2 + 10 ** 6 * (0.05 / 10 ** 6) ** 2)
    assert brackets.ceiling_collision(64, H2) >= best


@pytest.mark.parametrize("seed", range(6))
def test_best_tree_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    L, k = [(2, 3), (3, 2), (2, 2), (3, 2), (2, 3), (1, 4)][seed]
    P = rng.dirichlet(np.ones(k + 2), size=L)[:, :k]
    for N in (1, 2, 3, 5):
        assert brackets.best_tree_value(P, N) == pytest.approx(brute_best_tree(P, N), abs=1e-12)


def test_best_first_and_heap_paths_agree():
    rng = np.random.default_rng(7)
    P = rng.dirichlet(np.full(12, 0.4), size=(5, 8))[:, :, :6]     # (R, L, k)
    vals = brackets.best_tree_value(P, 25)
    heap = [brackets._heap_values(-np.sort(-np.log(P[r]), axis=1), 25) for r in range(5)]
    np.testing.assert_allclose(vals, heap, rtol=1e-12)
    np.testing.assert_allclose(brackets.best_tree_value(np.log(P), 25, log=True), vals, rtol=1e-12)


def test_rigorous_ceilings_hold_on_random_marginals():
    rng = np.random.default_rng(3)
    for _ in range(200):
        L, k, N = rng.integers(1, 8), rng.integers(1, 6), int(rng.integers(1, 64))
        full = rng.dirichlet(np.full(k + 3, rng.uniform(0.05, 2.0)), size=L)
        P = -np.sort(-full, axis=1)[:, :k]
        v = brackets.best_tree_value(P, N)
        h = brackets.min_entropy(full).min()
        H2 = brackets.collision_entropy(full).min()
        assert v <= brackets.ceiling_min_entropy(N, h) + 1e-12
        assert v <= brackets.ceiling_collision(N, H2) + 1e-12
        assert v <= min(N, L) + 1e-12


def test_ceiling_golden_values_and_limits():
    assert brackets.verification_ceiling(31, 0.5) == pytest.approx(2 * np.log(31) / 0.5)
    assert brackets.verification_ceiling(31, 0.0) == np.inf
    assert brackets.ceiling_min_entropy(10, 0.0) == 11.0
    assert brackets.ceiling_min_entropy(10, 1e-12) == pytest.approx(11.0, rel=1e-6)
    assert brackets.ceiling_min_entropy(10, 0.7) == pytest.approx(np.log(1 + 10 * (1 - np.exp(-0.7))) / 0.7 + 1)
    assert brackets.ceiling_collision(10, 0.7) == pytest.approx(2 * np.log(11) / 0.7 + 1)
    H = np.array([0.0, 0.1, 2.0])
    np.testing.assert_allclose(brackets.adaedl(H), np.clip(1 - np.sqrt(0.2 * H), 0, 1))
    assert brackets.adaedl(10.0) == 0.0
    assert brackets.adaedl_mean(0.1, 15) == pytest.approx(sum((1 - np.sqrt(0.02)) ** l for l in range(1, 16)))
    assert brackets.pinsker_acceptance(0.02) == pytest.approx(0.9)
    p = np.array([0.5, 0.25, 0.25])
    assert brackets.shannon_entropy(p) == pytest.approx(1.5 * np.log(2))
    assert brackets.min_entropy(p) <= brackets.collision_entropy(p) <= brackets.shannon_entropy(p)
    assert brackets.min_entropy(p) >= brackets.collision_entropy(p) / 2
    curves = brackets.bracket_curves(np.array([0.1, 1.0]), N=31, L=15)
    assert list(curves.columns) == ["entropy", "adaedl", "ceiling", "horizon"]


def test_pinsker_is_rigorous_for_speculative_sampling():
    rng = np.random.default_rng(1)
    for _ in range(500):
        p, q = rng.dirichlet(np.full(20, 0.5), size=2)
        accept = np.minimum(p, q).sum()                    # 1 - TV(p, q)
        kl = np.sum(special.rel_entr(p, q))
        assert accept >= brackets.pinsker_acceptance(kl) - 1e-12


def test_rejects_impossible_input():
    with pytest.raises(GlanceError):
        brackets.adaedl(-0.1)
    with pytest.raises(GlanceError):
        brackets.adaedl(0.1, gamma=0)
    with pytest.raises(GlanceError):
        brackets.verification_ceiling(0, 1.0)
    with pytest.raises(GlanceError):
        brackets.ceiling_min_entropy(10, -1)
    with pytest.raises(GlanceError, match=r"\[0, 1\]"):
        brackets.best_tree_value(np.array([[1.2, 0.1]]), 3)
    # top-k of one distribution: an offset's probabilities sum to at most 1 (both spaces)
    with pytest.raises(GlanceError, match="sum to 1.8"):
        brackets.best_tree_value(np.array([[0.9, 0.9]]), 2)
    with pytest.raises(GlanceError, match=r"row \(1, 0\)"):
        brackets.best_tree_value(np.log(np.array([[[0.5, 0.5]], [[0.7, 0.6]]])), 2, log=True)
    # float32 rounding of a full softmax stays accepted; NaN is padding (probability 0)
    assert brackets.best_tree_value(np.array([[0.5, 0.50001]]), 1) == pytest.approx(0.50001)
    assert brackets.best_tree_value(np.array([[0.6, np.nan]]), 2) == pytest.approx(0.6)
    with pytest.raises(GlanceError, match="budget"):
        brackets.best_tree_value(np.array([[0.5, 0.1]]), 0)
    with pytest.raises(GlanceError, match="sum to 1"):
        brackets.shannon_entropy([0.5, 0.2])
    with pytest.raises(GlanceError):
        brackets.adaedl_mean(0.1, 0)


def test_outside_counts_against_the_two_curves():
    H = np.array([0.05, 0.5, 1.0, 2.0])
    low = brackets.adaedl_mean(H, 15, 0.2)
    high = brackets.verification_ceiling(31, H)
    a = np.array([low[0] - 0.1, low[1] + 0.1, high[2] + 0.1, low[3]])   # below, inside, above, on the line
    assert brackets.outside_counts(H, a, N=31, L=15, gamma=0.2) == (1, 1)
