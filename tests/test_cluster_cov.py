"""The one clustered covariance (stats.cluster.clustered_covariance) against brute force.

CR1 is checked against statsmodels' cluster-robust covariance of a logit fitted on the
same Bernoulli trials; CR3 against the delete-one-cluster Newton steps computed with
statsmodels' own score and Hessian; the stratified versions against explicit loops; the
law's per-cluster sums against per-round scores.
"""
from __future__ import annotations

import numpy as np
import pytest

from glance_law.law import model as law
from glance_law.simulate import TaskSpec, simulate_arrays
from glance_law.stats.cluster import cluster_sums, clustered_covariance, clustered_mean, design_sums


def _small_logit(seed=3, n_prompts=12):
    arr = simulate_arrays([TaskSpec("t", 1.0, 0.7)], n_prompts=n_prompts, rounds_per_prompt=6,
                          vectors=False, seed=seed)
    H, a, L = arr["root_entropy"].astype(float), arr["accepted"].astype(float), arr["horizon"].astype(float)
    codes = np.unique(arr["prompt_id"], return_inverse=True)[1].ravel()
    return H, a, L, codes, int(codes.max()) + 1


def _bernoulli_rows(H, a, L, codes):
    """The truncated geometric's likelihood as Bernoulli trials: a successes, [a < L] failure per round."""
    s, f = a.astype(int), (a < L).astype(int)
    y = np.r_[np.ones(s.sum()), np.zeros(f.sum())]
    h = np.r_[np.repeat(H, s), np.repeat(H, f)]
    g = np.r_[np.repeat(codes, s), np.repeat(codes, f)]
    return y, np.column_stack([np.ones_like(h), -h]), g


def test_cr1_equals_statsmodels_cluster_robust_logit():
    sm = pytest.importorskip("statsmodels.api")
    H, a, L, codes, G = _small_logit()
    y, X, g = _bernoulli_rows(H, a, L, codes)
    res = sm.Logit(y, X).fit(disp=0, tol=1e-12, method="newton")
    b, _, _ = law.fit_affine_logit(H, a, L)
    assert b == pytest.approx(res.params, abs=1e-8)
    from statsmodels.stats.sandwich_covariance import cov_cluster
    ref = cov_cluster(res, g, use_correction=False) * G / (G - 1.0)   # CR1: the G/(G-1) factor only
    u, info_g = law.cluster_score_information(b, H, a, L, codes, G)
    ours = clustered_covariance(u, info_g, "cr1")
    assert ours == pytest.approx(ref, rel=1e-7)


def test_cr3_equals_brute_force_delete_one_prompt_newton_steps():
    sm = pytest.importorskip("statsmodels.api")
    H, a, L, codes, G = _small_logit(seed=8)
    y, X, g = _bernoulli_rows(H, a, L, codes)
    b, _, _ = law.fit_affine_logit(H, a, L)
    steps = []
    for k in range(G):
        keep = g != k
        m = sm.Logit(y[keep], X[keep])
        # one Newton step from the full-sample estimate on the data without prompt k
        steps.append(b - np.linalg.solve(m.hessian(b), m.score(b)))
    d = np.array(steps) - np.mean(steps, axis=0)
    ref = (G - 1.0) / G * d.T @ d
    u, info_g = law.cluster_score_information(b, H, a, L, codes, G)
    assert clustered_covariance(u, info_g, "cr3") == pytest.approx(ref, rel=1e-7)
    # and the one-step jackknife is close to the full delete-one refits
    full = np.array([sm.Logit(y[g != k], X[g != k]).fit(disp=0, tol=1e-12, method="newton").params
                     for k in range(G)])
    full -= full.mean(axis=0)
    assert np.sqrt(np.diag(ref)) == pytest.approx(np.sqrt(np.diag((G - 1.0) / G * full.T @ full)), rel=0.15)


def test_stratified_covariances_equal_explicit_loops():
    rng = np.random.default_rng(0)
    G = 30
    u = rng.normal(size=(G, 2)) + np.repeat([[2.0, -1.0], [-3.0, 0.5], [1.0, 1.0]], 10, axis=0)
    A = rng.normal(size=(G, 2, 2))
    info_g = np.einsum("gij,gkj->gik", A, A) + 3 * np.eye(2)
    info = info_g.sum(0)
    strata = np.repeat(["x", "y", "z"], 10)
    bread = np.linalg.inv(info)
    meat = np.zeros((2, 2))
    jk = np.zeros((2, 2))
    for s in "xyz":
        m = strata == s
        us = u[m] - u[m].mean(0)
        meat += m.sum() / (m.sum() - 1) * us.T @ us
        d = np.array([np.linalg.solve(info - info_g[i], u[i]) for i in np.flatnonzero(m)])
        d -= d.mean(0)
        jk += (m.sum() - 1) / m.sum() * d.T @ d
    assert clustered_covariance(u, info_g, "cr1", strata=strata) == pytest.approx(bread @ meat @ bread, rel=1e-12)
    assert clustered_covariance(u, info_g, "cr3", strata=strata) == pytest.approx(jk, rel=1e-12)
    # one stratum: CR3 is the unstratified estimator; CR1 differs only by the (here non-zero) mean score
    one = np.zeros(G)
    assert clustered_covariance(u, info_g, "cr3", strata=one) == pytest.approx(clustered_covariance(u, info_g, "cr3"))
    uc = u - u.mean(0)
    assert clustered_covariance(uc, info_g, "cr1", strata=one) == pytest.approx(
        clustered_covariance(uc, info_g, "cr1"), rel=1e-12)
    # the stratified mean's standard error
    y = rng.normal(size=90) + np.repeat([0.0, 5.0, -2.0], 30)
    codes = np.repeat(np.arange(G), 3)
    mu, se, _ = clustered_mean(y, codes, G, strata=np.repeat([0, 1, 2], 10))
    e = cluster_sums(y - mu, codes, G)
    var = sum(10 / 9 * ((e[k * 10:(k + 1) * 10] - e[k * 10:(k + 1) * 10].mean()) ** 2).sum() for k in range(3))
    assert se == pytest.approx(np.sqrt(var) / 90, rel=1e-12)


@pytest.mark.parametrize("method", ["mle", "nls"])
def test_law_cluster_sums_equal_per_round_scores(method):
    H, a, L, codes, G = _small_logit(seed=5)
    w = np.random.default_rng(1).integers(1, 4, H.size).astype(float)
    b = law.refit(method, H, a, L, w)
    u, info_g = law.cluster_score_information(b, H, a, L, codes, G, w, method=method)
    if method == "mle":
        scores, info = law.score_and_information(b, H, a, L, w)
    else:
        p = law.match_prob(H, b[0], b[1])
        dm = law.truncated_mean_derivative(p, L) * p * (1.0 - p)
        M, J = law.truncated_mean(p, L), np.column_stack([dm, -H * dm])
        scores = J * (w * (a - M))[:, None]
        info = np.einsum("ij,i,ik->jk", J, w, J)
    assert u == pytest.approx(cluster_sums(scores, codes, G), abs=1e-9)
    assert info_g.sum(0) == pytest.approx(info, rel=1e-10)
    assert np.abs(u.sum(0)).max() < 1e-6          # the estimating equations hold at the estimate
    # design_sums is the generic form: score w resid (1, -h), information w curv (1, -h)(1, -h)^T
    r, c = np.arange(H.size, dtype=float), np.ones(H.size)
    u2, i2 = design_sums(H, r.copy(), c.copy(), codes, G)
    assert u2[:, 1] == pytest.approx(-np.bincount(codes, r * H, G))
    assert i2[:, 1, 1] == pytest.approx(np.bincount(codes, H * H, G))


# ---------------------------------------------------------------- the one shared order (issue 13 item 6)

def test_stable_order_and_sorted_bins_equal_the_slow_paths():
    from glance_law.stats.curve import equal_count_bins, sorted_bins, stable_order
    rng = np.random.default_rng(4)
    for dt in (np.float32, np.float64):
        x = rng.choice(np.r_[0.0, rng.random(40) * 3], size=5000).astype(dt)
        x[::13] = -0.0
        assert np.array_equal(stable_order(x), np.argsort(x, kind="stable"))
    y = rng.random(3000)                       # float64 values that are not float32: the plain path
    assert np.array_equal(stable_order(y), np.argsort(y, kind="stable"))
    for n in (1, 7, 10, 11, 999, 1000, 1001, 12345):
        for B in (2, 10, 50, 200):
            order = np.arange(n)
            assert np.array_equal(sorted_bins(n, B), equal_count_bins(order, B)), (n, B)
            w = rng.integers(0, 4, n).astype(float)
            if w.sum() > 0:
                assert np.array_equal(sorted_bins(n, B, w), equal_count_bins(order, B, w)), (n, B)


def test_fit_law_statistics_against_independent_slow_paths():
    """Every check of the pooled row recomputed the slow way (pandas/scipy/scikit-learn on the rounds in
    their original order, no shared sort) and under a shuffle of the rows."""
    import pandas as pd
    from scipy import stats
    from sklearn.isotonic import IsotonicRegression

    from glance_law.law import fit_law
    from glance_law.simulate import simulate_rounds
    df = simulate_rounds([TaskSpec("a", 1.5, 0.9), TaskSpec("b", 2.5, 1.4)], n_prompts=60, seed=12, vectors=False)
    df.loc[df.index[::9], "root_entropy"] = np.float32(0.0)          # ties, also across bin edges
    fit = fit_law(df)
    shuffled = fit_law(df.sample(frac=1.0, random_state=3).reset_index(drop=True))
    row = fit.row("pooled")
    H, a = df["root_entropy"].to_numpy(np.float64), df["accepted"].to_numpy(np.float64)
    assert row["rho"] == pytest.approx(stats.spearmanr(H, a)[0], rel=1e-10)
    rank = pd.Series(H).rank(method="first").to_numpy() - 1          # stable positions (ties in row order)
    bins = ((2 * rank + 1) * 10 // (2 * len(H))).astype(int)
    means = pd.Series(a).groupby(bins).mean().to_numpy()
    cur = fit.curves[("sim", "pooled")]
    assert cur["mean_accepted"].to_numpy() == pytest.approx(means, rel=1e-12)
    iso = IsotonicRegression(increasing=False).fit(H, a).predict(H)
    assert cur["isotonic"].to_numpy() == pytest.approx(pd.Series(iso).groupby(bins).mean().to_numpy(), rel=1e-10)
    # statistics that do not depend on where tied entropies fall at a bin edge (row order) are row-order free
    for c in ("b0", "b1", "b1_lo", "b1_hi", "rho", "rho_p", "r2_round", "ceiling_model", "loglik",
              "mean_accepted_lo"):
        for g in ("a", "b", "pooled"):
            assert fit.row(g)[c] == pytest.approx(shuffled.row(g)[c], rel=1e-9, abs=1e-12), (g, c)
