"""The draftability law: golden cases by enumeration, recovery from simulated
prompt-clustered logs, the fair decile curve, the checks, and fit_law's input handling."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special, stats
from sklearn.isotonic import IsotonicRegression

from glance_law import law
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.io import LogSet
from glance_law.law import LAW_COLUMNS, fit_law
from glance_law.simulate import TaskSpec, TwoStateTail, simulate_arrays, simulate_rounds
from glance_law.stats.cluster import clustered_mean, t_crit
from glance_law.stats.curve import equal_count_bins, integer_midranks, isotonic_decreasing, midranks
from glance_law.stats.ranks import spearman_clustered


def pmf(p, L):
    """P(a = k), k = 0..L, of the truncated geometric, by its definition."""
    out = np.array([p ** k * (1 - p) for k in range(L)] + [p ** L])
    assert abs(out.sum() - 1) < 1e-12
    return out


def frame(H, a, L, prompts, task="t", **extra):
    n = len(H)
    d = {"task": [task] * n, "prompt_id": list(prompts), "root_entropy": np.asarray(H, float),
         "accepted": np.asarray(a, int), "horizon": np.broadcast_to(np.asarray(L), (n,)).astype(int)}
    d.update(extra)
    return pd.DataFrame(d)


# --------------------------------------------------------------------------
# golden cases
# --------------------------------------------------------------------------

@pytest.mark.parametrize("L", [1, 2, 5, 15])
def test_truncated_mean_variance_derivative_match_enumeration(L):
    for p in [0.0, 0.05, 0.3, 0.5, 0.77, 0.95, 0.9999, 1.0]:
        k = np.arange(L + 1)
        f = pmf(p, L)
        mean = (k * f).sum()
        var = (k * k * f).sum() - mean ** 2
        deriv = sum(l * p ** (l - 1) for l in range(1, L + 1))
        assert law.truncated_mean(p, L) == pytest.approx(mean, abs=1e-12)
        assert law.truncated_variance(p, L) == pytest.approx(var, abs=1e-8)
        assert law.truncated_mean_derivative(p, L) == pytest.approx(deriv, rel=1e-8)
    # the capped variance is not the untruncated mu(1 + mu)
    mu = law.truncated_mean(0.9, 15)
    assert law.truncated_variance(0.9, 15) < mu * (1 + mu) - 1.0


def test_loglik_matches_brute_force_sum():
    rng = np.random.default_rng(0)
    H = rng.gamma(2, 0.5, 40)
    L = rng.integers(1, 8, 40)
    a = np.minimum(rng.integers(0, 9, 40), L)
    b = (1.3, 0.7)
    p = special.expit(b[0] - b[1] * H)
    brute = sum(math.log(pmf(pi, int(Li))[int(ai)]) for pi, Li, ai in zip(p, L, a))
    assert law.loglik(b, H, a, L) == pytest.approx(brute, rel=1e-12)
    w = rng.integers(1, 4, 40)
    brute_w = sum(wi * math.log(pmf(pi, int(Li))[int(ai)]) for wi, pi, Li, ai in zip(w, p, L, a))
    assert law.loglik(b, H, a, L, w) == pytest.approx(brute_w, rel=1e-12)
    assert law.loglik(b, H, a, L, per_round=True).shape == (40,)


def test_supremum_and_cap_identity():
    for b0 in (0.2, 1.226, 3.0):
        for L in (1, 4, 15):
            p = special.expit(b0)
            assert law.law_supremum(b0, L) == pytest.approx(law.truncated_mean(p, L), rel=1e-12)
            assert law.law_supremum(b0, L) < law.cap(b0) == pytest.approx(math.exp(b0))
    # the paper's figure: sup at b0 = 1.226, L = 15
    assert law.law_supremum(1.226, 15) == pytest.approx(3.34, abs=0.01)


def test_mle_matches_an_independent_optimiser_and_statsmodels():
    import statsmodels.api as sm

    arr = simulate_arrays([TaskSpec("t", 1.2, 0.8)], n_prompts=30, vectors=False, seed=4)
    H, a, L = arr["root_entropy"].astype(float), arr["accepted"], arr["horizon"]
    b, info, conv = law.fit_affine_logit(H, a, L)
    assert conv
    ref = optimize.minimize(lambda x: -law.loglik(x, H, a, L), x0=[0.0, 0.0], method="BFGS",
                            options={"gtol": 1e-9}).x
    assert b == pytest.approx(ref, abs=1e-5)
    s, f = a.astype(float), (a < L).astype(float)
    glm = sm.GLM(np.column_stack([s, f]), sm.add_constant(-H), family=sm.families.Binomial()).fit(tol=1e-12)
    assert b == pytest.approx(glm.params, abs=1e-8)
    # the returned information is the observed information (2x2), the score vanishes at the MLE
    scores, info2 = law.score_and_information(b, H, a, L)
    assert np.abs(scores.sum(0)).max() < 1e-6
    assert info == pytest.approx(info2, rel=1e-10)


def test_mle_large_data_warm_start_reaches_the_same_optimum():
    arr = simulate_arrays([TaskSpec("t", 1.0, 0.6)], n_prompts=6000, rounds_per_prompt=40, vectors=False, seed=9)
    H, a, L = arr["root_entropy"].astype(float), arr["accepted"], arr["horizon"]
    assert H.size > 200_000
    b_warm, _, c1 = law.fit_affine_logit(H, a, L)
    b_cold, _, c2 = law.fit_affine_logit(H, a, L, b_init=(0.01, 0.0))
    assert c1 and c2
    assert b_warm == pytest.approx(b_cold, abs=1e-9)


def test_mle_rejects_unidentified_data():
    H = np.linspace(0, 2, 20)
    with pytest.raises(ValueError, match="accepted 0"):
        law.fit_affine_logit(H, np.zeros(20), np.full(20, 5))
    with pytest.raises(ValueError, match="full horizon"):
        law.fit_affine_logit(H, np.full(20, 5), np.full(20, 5))
    with pytest.raises(ValueError, match="does not vary"):
        law.fit_affine_logit(np.ones(20), np.arange(20) % 4, np.full(20, 5))


def test_mle_rejects_separated_data_and_accepts_overlap():
    # L = 1: accepted at the ten lowest entropies, rejected at the ten highest -> complete separation
    H = np.linspace(0, 2, 20)
    a = (H < 1).astype(int)
    with pytest.raises(ValueError, match="separate"):
        law.fit_affine_logit(H, a, np.ones(20))
    with pytest.raises(ValueError, match="separate"):      # reversed: acceptances above
        law.fit_affine_logit(H, 1 - a, np.ones(20))
    # quasi-complete: one round at the boundary entropy both accepts a token and is rejected
    # (a = 1 of L = 3 at H = 1); the log-likelihood still climbs along b0 = b1 * 1, b1 -> inf
    Hq = np.r_[0.2, 0.5, 1.0, 1.5, 1.8]
    aq, Lq = np.r_[3, 3, 1, 0, 0], np.full(5, 3)
    with pytest.raises(ValueError, match="separate"):
        law.fit_affine_logit(Hq, aq, Lq)
    ridge = [law.loglik(np.array([t, t]), Hq, aq, Lq) for t in (1.0, 10.0, 100.0)]
    assert ridge[0] < ridge[1] < ridge[2] < 0
    # one acceptance on the other side of the boundary restores a finite maximum
    aq2 = np.r_[3, 3, 1, 1, 0]
    b, _, ok = law.fit_affine_logit(Hq, aq2, Lq)
    assert ok and np.all(np.isfinite(b))
    res = optimize.minimize(lambda x: -law.loglik(x, Hq, aq2, Lq), x0=[0.0, 0.0], method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20_000})
    assert b == pytest.approx(res.x, abs=1e-4)


def test_nls_solves_its_normal_equations():
    arr = simulate_arrays([TaskSpec("t", 1.0, 0.7)], n_prompts=30, vectors=False, seed=2)
    H, a, L = arr["root_entropy"].astype(float), arr["accepted"].astype(float), arr["horizon"]
    b, J, r, conv = law.fit_conditional_mean(H, a, L)
    assert conv
    assert np.abs(J.T @ r).max() < 1e-6 * len(a)
    ref = optimize.least_squares(lambda x: a - law.expected_accepted(H, x[0], x[1], L), x0=[0.5, 0.5],
                                 xtol=1e-12, ftol=1e-12).x
    assert b == pytest.approx(ref, abs=1e-5)


# --------------------------------------------------------------------------
# recovery on simulated prompt-clustered logs
# --------------------------------------------------------------------------

@pytest.mark.parametrize("b0,b1", [(0.8, 0.46), (1.5, 1.7)])
def test_recovery_truth_inside_clustered_intervals(b0, b1):
    df = simulate_rounds([TaskSpec("t", b0, b1)], n_prompts=80, seed=11, vectors=False)
    fit = fit_law(df)
    for g in ("t", "pooled"):
        r = fit.row(g)
        assert r.b0_lo < b0 < r.b0_hi and r.b1_lo < b1 < r.b1_hi
        assert fit.holds(g).passed
    assert fit.params("t") == pytest.approx(fit.params("pooled"))


@pytest.mark.parametrize("b0,b1", [(3.0, 1.0), (4.0, 1.5)])
def test_mle_unbiased_within_two_percent_at_high_acceptance(b0, b1):
    # the paper's reference fit (untruncated geometric, LS, clipped at 15) is biased here
    est = []
    for seed in range(8):
        arr = simulate_arrays([TaskSpec("t", b0, b1)], n_prompts=400, vectors=False, seed=100 + seed)
        est.append(law.fit_affine_logit(arr["root_entropy"], arr["accepted"], arr["horizon"])[0])
    m = np.mean(est, axis=0)
    assert abs(m[0] / b0 - 1) < 0.02 and abs(m[1] / b1 - 1) < 0.02


def test_nls_against_mle_consistent_but_less_efficient():
    df = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=80, seed=5, vectors=False)
    mle, nls = fit_law(df, by=None), fit_law(df, by=None, method="nls")
    rm, rn = mle.row(), nls.row()
    for r in (rm, rn):
        assert r.b0_lo < 1.0 < r.b0_hi and r.b1_lo < 0.8 < r.b1_hi
    assert rn.method == "nls" and rm.method == "mle"
    assert (rm.b1_hi - rm.b1_lo) < (rn.b1_hi - rn.b1_lo)
    assert rm.loglik >= rn.loglik  # the MLE maximises the likelihood


def test_cr3_matches_a_brute_force_cluster_jackknife():
    # CR3 is the delete-one-prompt jackknife with one Newton step per deletion; with the
    # exact refit per deleted prompt the covariance must be close (one step from the full
    # MLE is already near the refit on a concave likelihood), and CR1 must equal its formula
    from glance_law.law import fit_affine_logit
    df = simulate_rounds([TaskSpec("t", 0.9, 0.6)], n_prompts=12, rounds_per_prompt=(5, 30), seed=5, vectors=False)
    fit = fit_law(df, by=None)
    H, a, L = (df[c].to_numpy(float) for c in ("root_entropy", "accepted", "horizon"))
    g = df["prompt_id"].cat.codes.to_numpy()
    b_full = fit_affine_logit(H, a, L)[0]
    deltas = np.array([b_full - fit_affine_logit(H[g != k], a[g != k], L[g != k])[0] for k in range(12)])
    deltas -= deltas.mean(axis=0)
    V = 11 / 12 * deltas.T @ deltas
    half = t_crit(12) * np.sqrt(V[1, 1])
    r = fit.row()
    assert r.b1_hi - r.b1 == pytest.approx(half, rel=0.05)
    c1 = fit_law(df, by=None, cov="cr1").row()
    assert c1.interval == "cr1" and c1.b1 == r.b1 and (c1.b1_hi - c1.b1_lo) < (r.b1_hi - r.b1_lo)


def test_bootstrap_intervals_cover_and_are_reproducible():
    df = simulate_rounds([TaskSpec("t", 0.9, 0.6)], n_prompts=40, seed=21, vectors=False)
    f1 = fit_law(df, by=None, n_boot=150, seed=3)
    f2 = fit_law(df, by=None, n_boot=150, seed=3)
    f3 = fit_law(df, by=None, n_boot=150, seed=4)
    cr3 = fit_law(df, by=None)
    r, rc = f1.row(), cr3.row()
    assert r.interval == "bootstrap" and rc.interval == "cr3"
    assert r.b1_lo < 0.6 < r.b1_hi and r.b0_lo < 0.9 < r.b0_hi
    pd.testing.assert_frame_equal(f1.to_frame(), f2.to_frame())
    assert f1.row().b1_lo != f3.row().b1_lo
    # both are honest prompt-level intervals of similar width
    w_boot, w_cr3 = r.b1_hi - r.b1_lo, rc.b1_hi - rc.b1_lo
    assert 0.6 < w_boot / w_cr3 < 1.6
    assert r.b1 == rc.b1  # the point estimate does not depend on the interval method
    cur = f1.curve()
    assert (cur["lo"] <= cur["mean_accepted"]).all() and (cur["mean_accepted"] <= cur["hi"]).all()


def test_clustering_widens_intervals_over_naive_round_level():
    # with strongly correlated rounds per prompt, the prompt-clustered interval must be wider than
    # the naive (round-level) Wald interval
    df = simulate_rounds([TaskSpec("t", 1.0, 0.8, prompt_entropy_sd=0.5)], n_prompts=30,
                         rounds_per_prompt=80, prompt_corr=0.6, seed=8, vectors=False)
    r = fit_law(df, by=None).row()
    b, info, _ = law.fit_affine_logit(df.root_entropy, df.accepted, df.horizon)
    naive = 1.96 * np.sqrt(np.linalg.inv(info)[1, 1])
    assert (r.b1_hi - r.b1_lo) / 2 > 1.3 * naive


# --------------------------------------------------------------------------
# the decile curve, R^2, ranks, checks
# --------------------------------------------------------------------------

def test_decile_curve_is_evaluated_fairly():
    df = simulate_rounds([TaskSpec("t", 1.2, 1.1)], n_prompts=40, seed=7, vectors=False)
    fit = fit_law(df, by=None)
    cur = fit.curve()
    assert list(cur.columns) == list(law.CURVE_COLUMNS)
    assert len(cur) == 10 and cur["n"].sum() == len(df) and cur["n"].max() - cur["n"].min() <= 1
    H, a, L = df.root_entropy.to_numpy(float), df.accepted.to_numpy(float), df.horizon.to_numpy()
    order = np.argsort(H, kind="stable")
    bins = equal_count_bins(order, 10)
    b0, b1 = fit.params()
    pred = law.expected_accepted(H, b0, b1, L)
    codes = pd.factorize(df.prompt_id)[0]
    for k in range(10):
        m = bins == k
        assert cur["mean_entropy"][k] == pytest.approx(H[m].mean())
        assert cur["predicted"][k] == pytest.approx(pred[m].mean())  # averaged over the bin's rounds
        mu, se, g = clustered_mean(a[m], pd.factorize(codes[m])[0], len(set(codes[m])))
        assert cur["mean_accepted"][k] == pytest.approx(mu)
        assert cur["hi"][k] - mu == pytest.approx(t_crit(g) * se)
    # Jensen: in the widest bin the model at the mean entropy is not the mean of the model
    top = bins == 9
    assert abs(law.expected_accepted(H[top].mean(), b0, b1, 15) - pred[top].mean()) > 0.01
    obs, prd = cur["mean_accepted"], cur["predicted"]
    r2 = 1 - ((obs - prd) ** 2).sum() / ((obs - obs.mean()) ** 2).sum()
    assert fit.row().r2_curve == pytest.approx(r2)
    r2r = 1 - ((a - pred) ** 2).sum() / ((a - a.mean()) ** 2).sum()
    assert fit.row().r2_round == pytest.approx(r2r)


def test_isotonic_matches_scikit_learn_with_ties():
    rng = np.random.default_rng(3)
    x = np.round(rng.gamma(2, 0.5, 500), 1)  # many ties
    y = rng.poisson(3 * np.exp(-x))
    ref = IsotonicRegression(increasing=False).fit(x, y).predict(x)
    assert isotonic_decreasing(x, y) == pytest.approx(ref, abs=1e-12)
    w = rng.integers(1, 4, 500)
    ref_w = IsotonicRegression(increasing=False).fit(x, y, sample_weight=w).predict(x)
    assert isotonic_decreasing(x, y, weights=w) == pytest.approx(ref_w, abs=1e-12)


def test_ranks_match_scipy_and_weights_equal_expansion():
    rng = np.random.default_rng(1)
    x = np.round(rng.normal(size=300), 1)
    k = rng.integers(0, 6, 300)
    assert midranks(x) == pytest.approx(stats.rankdata(x))
    assert integer_midranks(k) == pytest.approx(stats.rankdata(k))
    w = rng.integers(1, 4, 300)
    xe, ke = np.repeat(x, w), np.repeat(k, w)
    codes = rng.integers(0, 20, 300)
    rho_w, p_w, se_w = spearman_clustered(x, k, codes, 20, weights=w,
                                          ranks=(midranks(x, weights=w), integer_midranks(k, w)))
    rho_e, p_e, se_e = spearman_clustered(xe, ke, np.repeat(codes, w), 20)
    assert rho_w == pytest.approx(rho_e) and se_w == pytest.approx(se_e) and p_w == pytest.approx(p_e)
    assert rho_e == pytest.approx(stats.spearmanr(xe, ke)[0])
    # precomputed ranks give the same answer as internal ranking
    assert spearman_clustered(x, k, codes, 20, ranks=(midranks(x), integer_midranks(k))) == \
        pytest.approx(spearman_clustered(x, k, codes, 20))


def test_weighted_rows_equal_expanded_rounds():
    df = simulate_rounds([TaskSpec("t", 1.0, 0.9)], n_prompts=30, seed=12, vectors=False)
    rng = np.random.default_rng(0)
    w = rng.integers(1, 4, len(df))
    dw = df.assign(n=w)
    de = df.loc[df.index.repeat(w)].reset_index(drop=True)
    fw, fe = fit_law(dw, by=None, weight="n").row(), fit_law(de, by=None).row()
    for c in ("rounds", "prompts", "mean_entropy", "mean_accepted", "mean_accepted_lo", "b0", "b0_lo", "b1",
              "b1_hi", "r2_round", "rho", "rho_p", "p_ge8", "ceiling_model", "loglik"):
        assert fw[c] == pytest.approx(fe[c], rel=1e-8), c


def test_holds_reports_each_check_separately():
    good = simulate_rounds([TaskSpec("t", 1.0, 1.0)], n_prompts=40, seed=1, vectors=False)
    chk = fit_law(good).holds("t")
    assert chk.as_dict() == {"slope": True, "rank": True, "curve": True, "monotone": True} and bool(chk)
    fr = chk.to_frame()
    assert list(fr["check"]) == ["slope", "rank", "curve", "monotone"] and fr["passed"].all()
    # no entropy signal: slope and rank fail (and the curve R^2 collapses)
    null = simulate_rounds([TaskSpec("t", 1.0, 0.0)], n_prompts=40, seed=1, vectors=False)
    cn = fit_law(null).holds("t")
    assert not cn.slope and not cn.rank and not cn.passed
    # acceptance rising with entropy: the decreasing isotonic curve and the slope fail
    inc = simulate_rounds([TaskSpec("t", 0.0, -0.8)], n_prompts=40, seed=1, vectors=False)
    ci = fit_law(inc).holds("t")
    assert not ci.monotone and not ci.slope and not ci.rank
    row = fit_law(inc).row("t")
    assert row.holds is False or row.holds == 0
    assert "monotone" in row.failed_checks
    # thresholds are parameters
    strict = fit_law(good, min_r2_curve=0.9999).holds("t")
    assert strict.slope and not strict.curve and strict.min_r2_curve == 0.9999


def test_floor_cap_and_supremum():
    df = simulate_rounds([TaskSpec("t", 1.226, 0.95)], n_prompts=40, seed=3, vectors=False)
    fit = fit_law(df, by=None)
    r = fit.row()
    assert r.cap == pytest.approx(math.exp(r.b0))
    assert r.sup == pytest.approx(law.law_supremum(r.b0, 15))
    cur = fit.curve()
    assert r.floor_mean == pytest.approx(cur["mean_accepted"][0])
    assert r.floor_mean_lo == pytest.approx(cur["lo"][0])
    assert r.p_ge8 == pytest.approx((df.accepted >= 8).mean())
    assert r.tau == pytest.approx(df.accepted.mean() + 1)


def test_a_note_flags_a_ceiling_from_fewer_than_5_rounds_per_bin():
    small = simulate_rounds([TaskSpec("t", 1.226, 0.95)], n_prompts=10, rounds_per_prompt=12, seed=3, vectors=False)
    big = simulate_rounds([TaskSpec("t", 1.226, 0.95)], n_prompts=20, rounds_per_prompt=15, seed=3, vectors=False)
    assert len(small) < 250 <= len(big)
    assert any("ceiling bins (fewer than 5 per bin)" in n for n in fit_law(small, by=None).notes)
    assert not any("fewer than 5 per bin" in n for n in fit_law(big, by=None).notes)


def test_supremum_is_taken_at_the_largest_horizon_not_at_cut_rounds():
    # rounds that end the output are cut to L = a; the supremum must not follow them down,
    # or a plain law (no tail) would show a floor above sup by construction
    df = simulate_rounds([TaskSpec("t", 1.226, 0.95)], n_prompts=40, seed=3, vectors=False)
    cut = df.copy()
    low = cut["root_entropy"] <= cut["root_entropy"].quantile(0.1)
    ends = low & (cut["accepted"] > 0) & (np.arange(len(cut)) % 2 == 0)  # half the floor ends its output
    cut.loc[ends, "horizon"] = cut.loc[ends, "accepted"]
    r = fit_law(cut, by=None).row()
    assert r.horizon == 15
    assert r.sup == pytest.approx(law.law_supremum(r.b0, 15))
    # the average over the floor rounds' own L (the definition this replaces) sits lower
    fl = cut.loc[low]
    averaged = math.exp(r.b0) * (1 - np.mean(special.expit(r.b0) ** fl["horizon"].to_numpy()))
    assert averaged < r.sup - 0.05
    from glance_law.tail import fit_tail
    t = fit_tail(cut, by=None, n_boot=0, heldout=False).tasks[0]
    assert t.sup == pytest.approx(r.sup)


def test_grounded_tail_floor_exceeds_the_laws_supremum():
    # a two-state copy tail at the entropy floor lifts the floor mean above the fitted law's
    # own supremum (the paper's Theorem 2); without the tail the floor stays near it
    spec = dict(name="d", b0=1.226, b1=0.95, floor_weight=0.15)
    tail = simulate_rounds([TaskSpec(**spec, tail=TwoStateTail(pi=0.7))], n_prompts=60, seed=2, vectors=False)
    plain = simulate_rounds([TaskSpec(**spec)], n_prompts=60, seed=2, vectors=False)
    rt, rp = fit_law(tail).row("d"), fit_law(plain).row("d")
    assert rt.floor_mean_lo > rt.sup and rt.floor_mean > rt.cap
    assert rp.floor_mean_lo < rp.sup < rp.floor_mean_hi


# --------------------------------------------------------------------------
# inputs, groups, drafters, output
# --------------------------------------------------------------------------

def test_to_frame_columns_and_formats():
    df = simulate_rounds(n_prompts=12, seed=0, vectors=False)
    fit = fit_law(df)
    t = fit.to_frame()
    assert tuple(t.columns[:len(LAW_COLUMNS)]) == LAW_COLUMNS
    assert list(t["task"]) == sorted(df.task.unique()) + ["pooled"]
    assert fit.groups == tuple(sorted(df.task.unique())) + ("pooled",)
    rows = json.loads(fit.summary("json"))
    assert isinstance(rows, list) and list(rows[0])[:len(LAW_COLUMNS)] == list(LAW_COLUMNS)
    assert rows[-1]["task"] == "pooled" and isinstance(rows[-1]["holds"], bool)
    for fmt in ("text", "markdown", "latex", "html", "csv"):
        out = fit.summary(fmt)
        assert "caption" in out and "pooled" in out
    assert "b1" in fit._repr_html_() and "\\toprule" in fit.to_latex()
    H = np.array([0.1, 0.5, 2.0])
    assert fit.predict(H, 15, "docvqa") == pytest.approx(law.expected_accepted(H, *fit.params("docvqa"), 15))
    with pytest.raises(GlanceError, match="no group"):
        fit.params("nonesuch")


def test_exclusions_are_counted_and_do_not_change_the_fit():
    df = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=20, seed=4, vectors=False)
    ar = df.iloc[:50].copy()
    ar["horizon"], ar["accepted"], ar["run_id"] = 0, 0, "ar"
    mis = df.iloc[:70].copy()
    mis["condition"], mis["accepted"] = "mismatched", 0
    both = pd.concat([df, ar, mis], ignore_index=True)
    for c in ("condition", "run_id"):
        both[c] = both[c].astype(str)
    fit = fit_law(both)
    assert fit.row("t").rounds == len(df)
    assert fit.params("t") == pytest.approx(fit_law(df).params("t"))
    notes = " ".join(fit.notes)
    assert "50 autoregressive" in notes and "70 round(s) of other conditions" in notes and "mismatched" in notes
    pooled = fit_law(both, condition=None)
    assert pooled.row("t").rounds == len(df) + 70 and "conditions pooled" in " ".join(pooled.notes)
    with pytest.raises(GlanceError, match="accepted 0 tokens"):  # the 70 mismatched rounds alone
        fit_law(both, condition="mismatched")


def test_several_drafters_are_fitted_separately():
    a = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=20, seed=1, drafter="block", vectors=False)
    b = simulate_rounds([TaskSpec("t", 2.0, 1.5)], n_prompts=20, seed=2, drafter="pld", run_id="r2",
                        vectors=False)
    both = pd.concat([a.astype({"drafter": str, "run_id": str}), b.astype({"drafter": str, "run_id": str})],
                     ignore_index=True)
    fit = fit_law(both)
    t = fit.to_frame()
    assert list(zip(t.drafter, t.task)) == [("block", "t"), ("block", "pooled"), ("pld", "t"), ("pld", "pooled")]
    assert fit.drafters == ("block", "pld")
    assert fit.params("t", drafter="block") == pytest.approx(fit_law(a).params("t"))
    assert fit.params(("pld", "pooled")) == pytest.approx(fit_law(b).params("pooled"))
    with pytest.raises(GlanceError, match="several drafters"):
        fit.params("t")
    assert "drafter" in fit.summary("text").splitlines()[2]
    assert any("2 drafters fitted separately" in n for n in fit.notes)


def test_logset_input_lists_skipped_files_in_notes():
    df = simulate_rounds(n_prompts=8, seed=0, vectors=False)
    logs = LogSet("rounds", df, (), skipped=(("bad.parquet", "bad.parquet: not a Parquet file"),))
    fit = fit_law(logs)
    assert any(n.startswith("skipped bad.parquet: not a Parquet") for n in fit.notes)
    assert "skipped bad.parquet" in fit.summary("text")


def test_bad_inputs_raise_clear_errors():
    df = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=10, seed=0, vectors=False)
    with pytest.raises(MissingColumnError, match="accepted"):
        fit_law(df.drop(columns="accepted"))
    with pytest.raises(MissingColumnError, match="prompt_id"):
        fit_law(df.drop(columns="prompt_id"))
    bad = df.copy()
    bad.loc[3, "root_entropy"] = np.nan
    with pytest.raises(GlanceError, match="root_entropy"):
        fit_law(bad)
    bad = df.copy()
    bad.loc[3, "accepted"] = 99
    with pytest.raises(GlanceError, match="accepted"):
        fit_law(bad)
    with pytest.raises(GlanceError, match="method"):
        fit_law(df, method="ols")
    with pytest.raises(GlanceError, match="level"):
        fit_law(df, level=95)
    with pytest.raises(GlanceError, match="DataFrame"):
        fit_law([1, 2, 3])
    renamed = df.astype({"task": str}).replace({"task": {"t": "pooled"}})
    with pytest.raises(GlanceError, match="reserved|labels the pooled row"):
        fit_law(renamed)


def test_a_group_that_cannot_be_fitted_keeps_its_row_and_a_note():
    ok = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=20, seed=0, vectors=False)
    dead = simulate_rounds([TaskSpec("z", 1.0, 0.8)], n_prompts=5, seed=1, vectors=False)
    dead["accepted"] = 0
    both = pd.concat([ok.astype({"task": str, "prompt_id": str}), dead.astype({"task": str, "prompt_id": str})],
                     ignore_index=True)
    fit = fit_law(both)
    r = fit.row("z")
    assert r.rounds == len(dead) and r.mean_accepted == 0 and np.isnan(r.b1) and not r.holds
    assert any("z: the law could not be fitted" in n for n in fit.notes)
    with pytest.raises(GlanceError, match="not fitted"):
        fit.predict([0.5], 15, "z")
    with pytest.raises(GlanceError, match="any group"):
        fit_law(dead)


def test_single_prompt_group_has_no_interval_but_a_note():
    df = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=1, rounds_per_prompt=200, seed=0, vectors=False)
    for n_boot in (0, 20):
        fit = fit_law(df, by=None, n_boot=n_boot)
        assert np.isnan(fit.row().b1_lo) and not fit.holds().slope
        assert any("single prompt" in n for n in fit.notes)


# --------------------------------------------------------------------------
# slow statistical checks (pytest -m slow)
# --------------------------------------------------------------------------

@pytest.mark.slow
def test_b1_intervals_cover_the_truth_over_clustered_datasets():
    # 400 datasets of 40 prompts (20-60 rounds each, Gaussian-copula correlation 0.3 within
    # a prompt, prompt-level entropy multipliers): CR3 (cluster jackknife) + t(G-1) 95% intervals
    R, hits0, hits1 = 400, 0, 0
    spec = TaskSpec("t", 0.8, 0.46)
    for r in range(R):
        df = simulate_rounds([spec], n_prompts=40, seed=50_000 + r, vectors=False)
        row = fit_law(df, by=None).row()
        hits0 += row.b0_lo <= spec.b0 <= row.b0_hi
        hits1 += row.b1_lo <= spec.b1 <= row.b1_hi
    print(f"coverage over {R} clustered datasets: b0 {hits0 / R:.3f}, b1 {hits1 / R:.3f}")
    assert 0.92 <= hits1 / R <= 0.98
    assert 0.92 <= hits0 / R <= 0.98


@pytest.mark.slow
def test_rank_check_false_positive_rate_under_a_clustered_null():
    # no H-a relation, but entropy and acceptance both correlated within the prompt: the
    # prompt-aware rank check (rho < 0 and p < 0.05) fires 1-5% of the time; the round-level
    # Spearman test (scipy, rounds as independent) fires far more often
    R, fires, fires2, naive, naive2 = 400, 0, 0, 0, 0
    spec = TaskSpec("t", 1.0, 0.0, prompt_entropy_sd=0.5)
    for r in range(R):
        df = simulate_rounds([spec], n_prompts=40, prompt_corr=0.5, seed=60_000 + r, vectors=False)
        fit = fit_law(df, by=None)
        fires += fit.holds().rank
        fires2 += fit.row().rho_p < 0.05
        rho, p = stats.spearmanr(df.root_entropy, df.accepted)
        naive += rho < 0 and p < 0.05
        naive2 += p < 0.05
    print(f"clustered null, {R} datasets: rank check fires {fires / R:.3f} (two-sided {fires2 / R:.3f}); "
          f"round-level test fires {naive / R:.3f} (two-sided {naive2 / R:.3f})")
    assert 0.01 <= fires / R <= 0.05
    assert naive / R > 3 * fires / R and naive2 / R > 3 * fires2 / R


def test_no_draft_rounds_are_counted_by_cause():
    df = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=20, seed=4, vectors=False, drafter="pld")
    ar = simulate_rounds([TaskSpec("t", 1.0, 0.8)], n_prompts=5, seed=5, vectors=False, drafter="ar",
                         run_id="ar").assign(horizon=0, accepted=0)
    df.loc[df.index[:7], ["horizon", "accepted"]] = 0        # pld rounds without a proposal
    note = [s for s in fit_law(pd.concat([df, ar], ignore_index=True)).notes if "horizon == 0" in s][0]
    assert f"excluded {7 + len(ar)} round(s)" in note
    assert f"{len(ar)} autoregressive round(s) (drafter ar)" in note
    assert "7 round(s) in which drafter pld proposed no draft" in note


def _cut_last_rounds(df, rng):
    """Cut every prompt's last round at the output's end the way the logger does (L = a)."""
    last = df.groupby("prompt_id")["round"].transform("max") == df["round"]
    cut = rng.integers(0, df["horizon"].to_numpy()).astype(np.int16)
    df.loc[last, "accepted"] = np.minimum(df.loc[last, "accepted"].to_numpy(), cut[last.to_numpy()])
    df.loc[last, "horizon"] = df.loc[last, "accepted"]
    return df, last.to_numpy() & (df["horizon"].to_numpy() > 0)


def test_output_ending_rounds_are_censored_in_the_likelihood_and_left_out_of_the_checks():
    """Short outputs whose last round sits at low entropy and is cut short: read raw, those
    rounds turn the rank test around (the block/infovqa defect); the checks leave them out,
    so rho, the curve and the ceiling equal those of the other rounds, while the MLE keeps them
    as completed runs (p^a: its estimate differs from dropping them)."""
    rng = np.random.default_rng(2)
    df = simulate_rounds([TaskSpec("t", 2.0, 1.5)], n_prompts=120, rounds_per_prompt=4, seed=6, vectors=False)
    df, ends = _cut_last_rounds(df, rng)
    df.loc[ends, "root_entropy"] = np.float32(0.001)           # the answer's end is near-certain
    df.loc[ends & (df["accepted"] == 0).to_numpy(), "horizon"] = 0   # nothing accepted: no draft kept
    ends &= df["horizon"].to_numpy() > 0
    fit = fit_law(df)
    rest = fit_law(df.loc[~ends].drop(columns="round"))       # no round column: nothing told apart
    r, q = fit.row("t"), rest.row("t")
    assert r["rho"] == pytest.approx(q["rho"], rel=1e-12) and r["rho"] < 0
    for c in ("r2_isotonic", "ceiling", "ceiling_binned", "floor_mean", "floor_rounds"):   # fit-free checks
        assert r[c] == pytest.approx(q[c], rel=1e-9), c
    cur, cq = fit.curves[("sim", "t")], rest.curves[("sim", "t")]
    assert cur["mean_accepted"].to_numpy() == pytest.approx(cq["mean_accepted"].to_numpy(), rel=1e-12)
    assert cur["n"].sum() == len(df.loc[~ends]) - int((df["horizon"] == 0).sum())
    assert r["rounds"] == len(df) - int((df["horizon"] == 0).sum())
    assert fit.params("t") != pytest.approx(rest.params("t"), rel=1e-6)
    assert any("output-ending round(s)" in s for s in fit.notes)
    raw = fit_law(df.drop(columns="round"))                     # the old reading: raw a everywhere
    assert raw.row("t")["rho"] > r["rho"]


def test_a_narrow_entropy_spread_is_flagged():
    df = simulate_rounds([TaskSpec("t", 2.0, 1.0)], n_prompts=40, seed=3, vectors=False)
    wide = fit_law(df)
    assert not any("narrow entropy spread" in s for s in wide.notes)
    narrow = fit_law(df.assign(root_entropy=(df["root_entropy"] * 0.01).astype(np.float32)))
    assert any(s.startswith("t: b1 = ") and "narrow entropy spread" in s for s in narrow.notes)
