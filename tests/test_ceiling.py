"""The entropy-only noise ceiling: the paper's binned estimator, its bias correction,
the model-implied ceiling and the fraction the law realises."""
from __future__ import annotations

import numpy as np
import pytest

from glance_law import law
from glance_law.simulate import TaskSpec, simulate_arrays
from glance_law.stats.ceiling import (
    binned_ceiling,
    ceiling_fraction,
    corrected_ceiling,
    model_ceiling,
    noise_ceiling,
    null_expectation,
)
from glance_law.stats.curve import equal_count_bins


def geometric(p, L, rng):
    """Truncated-geometric draws: a = #{l <= L: U <= p^l} (P(a >= l) = p^l)."""
    u = rng.random(np.shape(p))
    return np.minimum(np.floor(np.log(u) / np.log(p)), L).astype(int)


def test_binned_and_corrected_match_a_hand_anova():
    rng = np.random.default_rng(0)
    H = rng.gamma(2, 0.5, 103)
    a = rng.integers(0, 6, 103).astype(float)
    B = 7
    bins = equal_count_bins(np.argsort(H, kind="stable"), B)
    assert np.bincount(bins).max() - np.bincount(bins).min() <= 1
    means = np.array([a[bins == k].mean() for k in range(B)])
    ssb = sum((bins == k).sum() * (means[k] - a.mean()) ** 2 for k in range(B))
    sst = ((a - a.mean()) ** 2).sum()
    msw = (sst - ssb) / (len(a) - B)
    nc = noise_ceiling(H, a, bins=B)
    assert nc.binned == pytest.approx(ssb / sst) and nc.bins == B and nc.n == 103
    assert nc.corrected == pytest.approx((ssb - (B - 1) * msw) / sst)
    assert binned_ceiling(H, a, B) == nc.binned and corrected_ceiling(H, a, B) == nc.corrected
    # bins are capped at n // 2 so that every bin holds two rounds; too few rounds give NaN
    assert noise_ceiling(H[:20], a[:20], bins=50).bins == 10
    assert np.isnan(noise_ceiling(H[:3], a[:3]).corrected)
    assert np.isnan(noise_ceiling(H, np.ones_like(a)).binned)  # a does not vary
    with pytest.raises(ValueError):
        noise_ceiling(H, a, bins=1)


def test_null_binned_is_biased_corrected_is_not():
    # no H-a relation, 200 independent rounds: the paper's estimator sits near (B-1)/(n-1) = 0.246,
    # the corrected one near 0 (on average, and not clipped)
    rng = np.random.default_rng(1)
    binned, corrected = [], []
    for _ in range(400):
        H = rng.gamma(2, 0.5, 200)
        a = geometric(np.full(200, 0.7), 15, rng)
        nc = noise_ceiling(H, a)
        binned.append(nc.binned)
        corrected.append(nc.corrected)
    assert np.mean(binned) == pytest.approx(null_expectation(200), abs=0.01)
    assert abs(np.mean(corrected)) < 0.01
    assert min(corrected) < 0  # unclipped


def test_corrected_ceiling_recovers_the_true_ceiling_with_signal():
    # the true ceiling Var(E[a|H]) / Var(a) under the law, by the law of total variance
    rng = np.random.default_rng(2)
    n = 200_000
    H = rng.gamma(2, 0.5, n)
    p = law.match_prob(H, 1.5, 1.2)
    a = geometric(p, 15, rng)
    mu, var = law.truncated_mean(p, 15), law.truncated_variance(p, 15)
    truth = mu.var() / (mu.var() + var.mean())
    assert model_ceiling(mu, var) == pytest.approx(truth)
    nc = noise_ceiling(H, a)
    # the binned estimators lose only the within-bin spread of E[a|H] (small with 50 bins)
    assert nc.corrected == pytest.approx(truth, abs=0.01)
    assert nc.binned > nc.corrected


def test_weights_equal_expanded_rounds():
    rng = np.random.default_rng(3)
    H = rng.gamma(2, 0.5, 300)
    a = geometric(law.match_prob(H, 1.0, 1.0), 15, rng).astype(float)
    w = rng.integers(1, 4, 300)
    nw = noise_ceiling(H, a, bins=10, weights=w)
    ne = noise_ceiling(np.repeat(H, w), np.repeat(a, w), bins=10)
    # the same SST; SSB differs only where an expanded row would straddle a bin edge
    assert nw.n == ne.n
    assert nw.corrected == pytest.approx(ne.corrected, abs=0.02)
    assert model_ceiling([1.0, 3.0], [1.0, 1.0], weights=[1, 3]) == \
        pytest.approx(model_ceiling([1.0, 3.0, 3.0, 3.0], [1.0] * 4))


def test_ceiling_fraction():
    assert ceiling_fraction(0.097, 0.110) == pytest.approx(0.097 / 0.110)
    assert np.isnan(ceiling_fraction(0.05, 0.0)) and np.isnan(ceiling_fraction(0.05, -0.01))
    assert np.isnan(ceiling_fraction(np.nan, 0.1))


def test_fit_law_reports_both_ceilings_and_the_fraction():
    from glance_law.law import fit_law
    from glance_law.simulate import simulate_rounds

    df = simulate_rounds([TaskSpec("t", 1.2, 1.0)], n_prompts=40, seed=0, vectors=False)
    r = fit_law(df).row("t")
    nc = noise_ceiling(df.root_entropy.to_numpy(float), df.accepted.to_numpy(float))
    assert r.ceiling == pytest.approx(nc.corrected) and r.ceiling_binned == pytest.approx(nc.binned)
    assert r.ceiling_bins == 50
    assert r.ceiling_fraction == pytest.approx(r.r2_round / r.ceiling)
    assert 0 < r.ceiling_model < 1


@pytest.mark.slow
def test_corrected_ceiling_averages_near_zero_under_a_clustered_null_at_200_rounds():
    # simulator null: no H-a relation, 5 prompts x 40 rounds, entropy and acceptance both
    # correlated within the prompt; corrected < 0.02 on average, binned ~ 0.25
    corrected, binned = [], []
    for r in range(1000):
        arr = simulate_arrays([TaskSpec("t", 1.0, 0.0)], n_prompts=5, rounds_per_prompt=40, prompt_corr=0.3,
                              seed=30_000 + r, vectors=False)
        nc = noise_ceiling(arr["root_entropy"], arr["accepted"])
        corrected.append(nc.corrected)
        binned.append(nc.binned)
    print(f"null at 200 rounds: corrected mean {np.mean(corrected):.4f}, binned mean {np.mean(binned):.4f}")
    assert np.mean(corrected) < 0.02
    assert np.mean(binned) > 0.2
