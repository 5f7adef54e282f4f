"""The grounded tail: two-state survival model, its MLE, tests of fit, held-out falsification, CLI."""
from __future__ import annotations

import contextlib
import io
import itertools
import json

import numpy as np
import pytest
from scipy import special, stats

from glance_law import tail
from glance_law.errors import GlanceError
from glance_law.io import write_table
from glance_law.law import truncated_mean
from glance_law.simulate import TaskSpec, TwoStateTail, simulate_rounds, two_state_survival_matrix
from glance_law.tail import mle as tail_mle
from glance_law.tail import model as tail_model

THETAS = [(0.3, 0.98, 0.77, 0.97, 0.9), (0.5, 0.4, 0.9, 0.2, 0.6), (0.0, 1.0, 0.5, 1.0, 0.0),
          (1.0, 0.0, 1.0, 0.0, 1.0), (0.2, 0.7, 0.7, 0.5, 0.5), (0.9, 0.95, 0.3, 0.1, 0.05)]


def brute_pmf(theta, L):
    """P(a = k), k = 0..L, by enumerating every hidden state path and match pattern."""
    pi, rd, ru, tdd, tuu = theta
    rho = (rd, ru)
    T = ((tdd, 1 - tdd), (1 - tuu, tuu))
    out = np.zeros(L + 1)
    for states in itertools.product((0, 1), repeat=L):
        w = (pi, 1 - pi)[states[0]]
        for s, t in zip(states, states[1:]):
            w *= T[s][t]
        for matches in itertools.product((0, 1), repeat=L):
            pm = w
            for s, m in zip(states, matches):
                pm *= rho[s] if m else 1 - rho[s]
            a = next((j for j, m in enumerate(matches) if not m), L)
            out[a] += pm
    return out


# ---------------------------------------------------------------------------
# the model: golden cases
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("theta", THETAS)
@pytest.mark.parametrize("L", [1, 2, 4])
def test_pmf_survival_mean_match_brute_force(theta, L):
    want = brute_pmf(theta, L)
    got = tail.pmf(theta, L)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert got.sum() == pytest.approx(1.0, abs=1e-12)
    S = tail.survival(theta, L)
    np.testing.assert_allclose(S, want[::-1].cumsum()[::-1][1:], atol=1e-12)
    assert tail.mean(theta, L) == pytest.approx(want @ np.arange(L + 1), abs=1e-12)
    k = np.arange(L + 1)
    assert tail.variance(theta, L) == pytest.approx(want @ k ** 2 - (want @ k) ** 2, abs=1e-12)


def test_vectorised_rows_and_attribute_objects():
    th = np.array(THETAS)
    S = tail.survival(th, 5)
    assert S.shape == (len(THETAS), 5)
    for i, t in enumerate(THETAS):
        np.testing.assert_allclose(S[i], tail.survival(t, 5))
    np.testing.assert_allclose(tail.mean(th, 5), [tail.mean(t, 5) for t in THETAS])

    class P:
        pi, rho_d, rho_u, t_dd, t_uu = THETAS[0]
    np.testing.assert_allclose(tail.pmf(P(), 6), tail.pmf(THETAS[0], 6))


def test_geometric_special_case_and_constant_hazard():
    p, L = 0.73, 9
    th = (0.37, p, p, 0.2, 0.8)
    np.testing.assert_allclose(tail.survival(th, L), p ** np.arange(1, L + 1), atol=1e-14)
    np.testing.assert_allclose(tail.hazard(th, L), p, atol=1e-14)
    assert tail.mean(th, L) == pytest.approx(float(truncated_mean(p, L)), abs=1e-12)
    # two states: the hazard moves monotonically towards lambda1 and is not constant
    h = tail.hazard(THETAS[0], 30)
    d = np.diff(h)
    assert np.all(d >= -1e-12) or np.all(d <= 1e-12)
    assert np.ptp(h) > 0.05
    assert h[-1] == pytest.approx(tail.invariants(THETAS[0]).lambda1, abs=1e-3)


def test_matches_the_simulators_survival():
    pi, rd, ru, tdd, tuu = THETAS[0]
    want = two_state_survival_matrix(pi, rd, ru, tdd, tuu, 12)[0, 1:]
    np.testing.assert_allclose(tail.survival(THETAS[0], 12), want, atol=1e-14)


def test_three_invariants_determine_the_law():
    rng = np.random.default_rng(0)
    th = rng.uniform(size=(200, 5)) ** rng.choice([0.3, 1.0, 3.0], size=(200, 5))
    S = np.concatenate([np.ones((200, 1)), tail.survival(th, 10)], axis=1)
    inv = tail.invariants(th)
    tr = np.array([i.trace for i in inv])
    det = np.array([i.det for i in inv])
    # the recurrence holds from l = 0 (S(0) = 1): S2 is not a fourth free number
    np.testing.assert_allclose(S[:, 2:], tr[:, None] * S[:, 1:-1] - det[:, None] * S[:, :-2], atol=1e-13)
    # the canonical theta of the same law reproduces it exactly, and lies in the cube
    l1, l2, s1 = tail_mle.law_from_theta(th)
    canon = tail_mle.theta_from_law(l1, l2, s1)
    assert canon.min() >= 0 and canon.max() <= 1
    np.testing.assert_allclose(tail.survival(canon, 10), S[:, 1:], atol=1e-10)
    # the feasible set: |lambda2| <= lambda1 <= 1 and S1 >= s_lo
    assert np.all(np.abs(l2) <= l1 + 1e-12) and np.all(l1 <= 1 + 1e-12)
    assert np.all(s1 >= tail_mle.s1_lower(l1, l2) - 1e-9)


def test_every_feasible_law_has_a_theta():
    rng = np.random.default_rng(1)
    l1 = rng.uniform(size=5000) ** 0.3
    l2 = l1 * rng.uniform(-1, 1, size=5000)
    lo = tail_mle.s1_lower(l1, l2)
    s1 = lo + (1 - lo) * rng.uniform(size=5000)
    th = tail_mle.theta_from_law(l1, l2, s1)
    assert th.min() >= 0 and th.max() <= 1
    A, B = tail_mle.law_coefficients(l1, l2, 8)
    np.testing.assert_allclose(tail_mle.cells_from_theta(th, 8), A + B * s1[:, None], atol=1e-10)


def test_law_supremum_cap_and_identity():
    for b0 in (-1.0, 0.3, 1.226, 3.0):
        for L in (1, 5, 15):
            p = special.expit(b0)
            M = sum(p ** l for l in range(1, L + 1))
            assert tail.law_supremum(b0, L) == pytest.approx(M, rel=1e-12)
            assert tail.law_supremum(b0, L) <= tail.cap(b0) + 1e-12
            assert tail.cap(b0) == pytest.approx(np.exp(b0))


def test_pi_star_and_the_issue_counterexample():
    b0, rho_u, L = 1.226, 0.6, 15
    M = float(truncated_mean(rho_u, L))
    assert tail.pi_star(b0, rho_u, L) == pytest.approx((np.exp(b0) - M) / (L - M), rel=1e-12)
    assert tail.pi_star(b0, rho_u, L) == pytest.approx(0.141, abs=5e-4)
    # in the paper's limit (rho_D = t_DD = t_UU = 1) pi* is exactly where the mean crosses e^b0
    ps = tail.pi_star(b0, rho_u, L)
    assert tail.mean((ps, 1.0, rho_u, 1.0, 1.0), L) == pytest.approx(np.exp(b0), rel=1e-12)
    # with t_UU = 0.9 a much smaller pi already exceeds the cap: pi* is not necessary
    pn = tail.pi_needed(b0, rho_u, 0.9, L)
    assert pn == pytest.approx(0.036, abs=5e-4)
    assert tail.mean((pn, 1.0, rho_u, 1.0, 0.9), L) == pytest.approx(np.exp(b0), rel=1e-10)
    assert tail.mean((0.04, 1.0, rho_u, 1.0, 0.9), L) > np.exp(b0)
    assert 0.04 < ps
    # ... and by simulation of the run process (Monte Carlo error)
    rng = np.random.default_rng(5)
    n = 200_000
    S = tail.survival((0.04, 1.0, rho_u, 1.0, 0.9), L)
    a = (S[None, :] > rng.random(n)[:, None]).sum(axis=1)
    assert abs(a.mean() - tail.mean((0.04, 1.0, rho_u, 1.0, 0.9), L)) < 4 * a.std() / np.sqrt(n)
    # horizons as an array: M and L averaged over the rounds
    assert tail.pi_star(b0, rho_u, [15, 15]) == pytest.approx(ps)


def test_capped_geometric_variance():
    for p in (0.2, 0.77, 0.95):
        for L in (1, 3, 15):
            k = np.arange(L + 1)
            pm = np.where(k < L, p ** k * (1 - p), p ** L)
            brute = pm @ k ** 2 - (pm @ k) ** 2
            assert tail.geometric_variance(p, L) == pytest.approx(brute, rel=1e-10)
    mu = float(truncated_mean(0.9, 15))
    assert abs(tail.geometric_variance(0.9, 15) - mu * (1 + mu)) > 1.0   # not mu (1 + mu) when capped


@pytest.mark.parametrize("bad", [(0.5, 1.2, 0.5, 0.5, 0.5), (-0.1, 0.5, 0.5, 0.5, 0.5),
                                 (0.5, np.nan, 0.5, 0.5, 0.5), (0.5, 0.5, 0.5)])
def test_rejects_impossible_theta(bad):
    with pytest.raises(GlanceError):
        tail.survival(bad, 5)


def test_rejects_impossible_inputs():
    for L in (0, -3, 2.5):
        with pytest.raises(GlanceError, match="horizon"):
            tail.pmf(THETAS[0], L)
    with pytest.raises(GlanceError, match="rho_u"):
        tail.pi_star(1.0, 1.3, 15)
    with pytest.raises(GlanceError, match="p is a probability"):
        tail.geometric_variance(-0.2, 5)
    with pytest.raises(GlanceError, match="empty"):
        tail.fit_geometric([], [])
    with pytest.raises(GlanceError, match="accepted"):
        tail.fit_two_state([3, 9], [5, 5])
    with pytest.raises(GlanceError, match="horizon"):
        tail.loglik(THETAS[0], [0, 1], [0, 3])


# ---------------------------------------------------------------------------
# likelihood and MLE
# ---------------------------------------------------------------------------

def _hmm_loglik(theta, a, L):
    from hmmlearn.hmm import CategoricalHMM  # test-only cross-check
    pi, rd, ru, tdd, tuu = theta
    m = CategoricalHMM(n_components=2, n_features=2, init_params="", params="")
    m.startprob_ = np.array([pi, 1 - pi])
    m.transmat_ = np.array([[tdd, 1 - tdd], [1 - tuu, tuu]])
    m.emissionprob_ = np.array([[1 - rd, rd], [1 - ru, ru]])
    seqs = [[1] * ai + ([0] if ai < Li else []) for ai, Li in zip(a, L)]
    X = np.concatenate(seqs)[:, None]
    return m.score(X, lengths=[len(s) for s in seqs])


@pytest.mark.parametrize("theta", [(0.3, 0.98, 0.77, 0.97, 0.9), (0.6, 0.5, 0.85, 0.3, 0.7),
                                   (0.05, 0.999, 0.6, 0.99, 0.95)])
def test_likelihood_agrees_with_hmmlearn(theta):
    rng = np.random.default_rng(2)
    L = rng.choice([4, 8, 15], size=300)
    S = np.array([tail.survival(theta, int(l))[-1] for l in L])
    a = np.array([(tail.survival(theta, int(l)) > rng.random()).sum() for l in L])
    assert (a == L).any() and (a < L).any()
    assert tail.loglik(theta, a, L) == pytest.approx(_hmm_loglik(theta, a, L), abs=1e-8)
    assert S.min() > 0


def test_geometric_mle_closed_form():
    a = np.array([0, 3, 5, 5, 1, 2])
    L = np.array([5, 5, 5, 5, 8, 8])
    g = tail.fit_geometric(a, L)
    s, f = a.sum(), (a < L).sum()
    assert g.p == pytest.approx(s / (s + f))
    assert g.loglik == pytest.approx(s * np.log(g.p) + f * np.log(1 - g.p))
    assert g.loglik == pytest.approx(tail.loglik((0.5, g.p, g.p, 0.3, 0.3), a, L))


def _brute_max(a, L):
    """The two-state maximum by a dense grid over the eigenvalues plus local refinement."""
    W = tail_mle.counts(a, L)
    Lmax = W.size // 2
    uu = np.linspace(0, 1, 241)
    vv = np.linspace(-1, 1, 241)
    U, V = (x.ravel() for x in np.meshgrid(uu, vv, indexing="ij"))
    Wr = np.broadcast_to(W, (U.size, W.size))
    x, f = tail_mle._profile_at(U, V, Wr, Lmax)
    top = np.argsort(-np.nan_to_num(f, nan=-np.inf))[:30]
    u, w = U[top], tail_mle._l1_of_u(U[top]) * V[top]
    s1, ll = tail_mle._profile_at(u, w, Wr[top], Lmax, x[top], ratio=False)
    u, w, s1, ll = tail_mle._search(u, w, s1, ll, np.ascontiguousarray(Wr[top]), Lmax, 1 / 480, 1 / 240,
                                    max_iter=300, prune_after=10 ** 9)
    return np.nanmax(ll)


@pytest.mark.parametrize("case", range(4))
def test_two_state_mle_is_global(case):
    rng = np.random.default_rng(10 + case)
    L = [5, 15, 8, 15][case]
    n = [150, 300, 60, 120][case]
    if case % 2:
        a = np.minimum(rng.geometric(1 - 0.77, size=n) - 1, L)          # the null: flat ridges
    else:
        S = tail.survival(tuple(rng.uniform(size=5)), L)
        a = (S[None, :] > rng.random(n)[:, None]).sum(axis=1)
    Lv = np.full(n, L)
    fit = tail.fit_two_state(a, Lv)
    assert fit.loglik >= tail.fit_geometric(a, Lv).loglik - 1e-9
    assert fit.loglik == pytest.approx(tail.loglik(fit.theta, a, Lv), abs=1e-8)
    assert fit.theta[1] >= fit.theta[2]                                  # D has the larger rho
    assert fit.loglik >= _brute_max(a, Lv) - 1e-4


def test_recovery_of_a_two_state_tail():
    truth = (0.3, 0.98, 0.77, 0.97, 0.9)
    rng = np.random.default_rng(3)
    n, L = 3000, 15
    S = tail.survival(truth, L)
    a = (S[None, :] > rng.random(n)[:, None]).sum(axis=1)
    fit = tail.fit_two_state(a, np.full(n, L))
    got, want = tail.pmf(fit.theta, L), tail.pmf(truth, L)
    se = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(got - want) <= 4 * se + 1e-3)
    # the identified law is recovered, not the raw parameters (which lie on a ridge)
    it = tail.invariants(truth)
    assert fit.lambda1 == pytest.approx(it.lambda1, abs=0.03)
    assert fit.s1 == pytest.approx(it.s1, abs=0.03)


# ---------------------------------------------------------------------------
# tests of fit
# ---------------------------------------------------------------------------

def test_pooled_chi_square_golden():
    O = np.array([10, 3, 2, 1, 0, 20], dtype=float)
    E1 = np.array([8, 4, 2, 1, 0.5, 20.5])
    E2 = np.array([9, 2, 3, 2, 0.0, 20.0])
    chi2, k, groups = tail.pooled_chi_square(O, np.stack([E1, E2]))
    # cell 0 closes alone (8, 9 >= 5); cells 1-2 pool (6, 5); cells 3-5 pool (22, 22)
    np.testing.assert_array_equal(groups, [0, 1, 1, 2, 2, 2])
    assert k == 3
    Og, E1g, E2g = np.array([10, 5, 21]), np.array([8, 6, 22]), np.array([9, 5, 22])
    np.testing.assert_allclose(chi2, [((Og - E1g) ** 2 / E1g).sum(), ((Og - E2g) ** 2 / E2g).sum()])
    # a short remainder joins the previous group; cells impossible under both models are dropped
    chi2, k, groups = tail.pooled_chi_square([6, 0, 1], np.stack([[5.5, 0, 1.5], [6, 0, 1]]))
    np.testing.assert_array_equal(groups, [0, -1, 0])
    assert k == 1 and np.all(np.isnan(chi2))


def test_pi_and_pi_star_only_where_the_law_identifies_them():
    # a law with S1 > lambda1 (runs start fast, then fall into a slow absorbing state) is no
    # no-switching mixture: a whole interval of entry weights produces it, so the tail table
    # leaves pi and pi_star empty; the canonical theta stays in the models table
    rng = np.random.default_rng(0)
    n, L = 3000, 15
    cl = np.repeat(np.arange(300), 10)
    S = tail.survival((1.0, 0.99, 0.5, 0.3, 1.0), L)
    a = (S[None, :] > rng.random(n)[:, None]).sum(axis=1)
    tt, _ = tail.tail_test(a, np.full(n, L), cl, b0=1.226, n_boot=0, heldout=False)
    assert tt.s1 > tt.lambda1 and not tt.mixture
    assert np.isnan(tt.pi) and np.isnan(tt.pi_star)
    assert np.isnan(tt.row()["pi"]) and np.isnan(tt.row()["pi_star"])
    assert np.isfinite(tt.model_row()["pi"])            # the canonical theta, labelled as such
    # the same theta family as a mixture (t_DD = t_UU = 1): pi = C is identified and recovered
    S = tail.survival((0.3, 0.97, 0.5, 1.0, 1.0), L)
    a = (S[None, :] > rng.random(n)[:, None]).sum(axis=1)
    tt, _ = tail.tail_test(a, np.full(n, L), cl, b0=1.226, n_boot=0, heldout=False)
    assert tt.mixture and abs(tt.pi - 0.3) < 0.06
    assert tt.pi_star == pytest.approx(tail.pi_star(1.226, tt.lambda2, L))


def test_tail_test_statistics_are_consistent():
    rng = np.random.default_rng(4)
    n, L = 400, 15
    S = tail.survival((0.3, 0.98, 0.77, 0.97, 0.9), L)
    a = (S[None, :] > rng.random(n)[:, None]).sum(axis=1)
    cl = np.repeat(np.arange(40), 10)
    tt, _ = tail.tail_test(a, np.full(n, L), cl, b0=1.226, n_boot=19, seed=1)
    assert tt.lrt == pytest.approx(2 * (tt.ll_two_state - tt.ll_geometric))
    assert tt.lrt_p_nominal == pytest.approx(stats.chi2.sf(tt.lrt, 4))
    stat = tt.lrt / tt.lrt_deff
    assert tt.lrt_null_deff.shape == tt.lrt_null.shape and np.all(tt.lrt_null_deff > 0)
    assert tt.lrt_p_bootstrap == pytest.approx(
        (1 + np.sum(tt.lrt_null / tt.lrt_null_deff >= stat - 1e-9 * (1 + stat))) / 20)
    assert tt.lrt_p_bootstrap_rounds == pytest.approx((1 + np.sum(tt.lrt_null >= tt.lrt - 1e-9 * (1 + tt.lrt))) / 20)
    assert tt.row()["lrt_p_bootstrap_rounds"] == tt.lrt_p_bootstrap_rounds
    assert tt.lrt_deff != 1.0
    t = tt.pmf_table()
    assert t["observed"].sum() == n
    assert t["expected_geometric"].sum() == pytest.approx(n)
    assert t["expected_two_state"].sum() == pytest.approx(n)
    for col in ("expected_geometric", "expected_two_state"):
        assert t.groupby("group")[col].sum().min() >= 5
    assert tt.df_two_state == tt.cells - 4 and tt.df_geometric == tt.cells - 2
    assert tt.floor_mean == pytest.approx(a.mean())
    assert tt.cap == pytest.approx(np.exp(1.226))
    assert tt.sup == pytest.approx(tail.law_supremum(1.226, L))
    assert tt.pi_star == pytest.approx(tail.pi_star(1.226, tt.theta[2], L))
    sv = tt.survival_table()
    np.testing.assert_allclose(sv["observed"], [(a >= l).mean() for l in range(1, L + 1)])
    # the held-out tests: 2 half splits + 5 folds, prompt-disjoint and exhaustive
    assert len(tt.heldout) == 7
    for h in tt.heldout:
        assert h.train_prompts + h.test_prompts == 40
    assert sum(h.test_rounds for h in tt.heldout[2:]) == n
    assert tt.heldout[0].test_rounds + tt.heldout[1].test_rounds == n
    row = tt.row()
    ok = [h for h in tt.heldout if np.isfinite(h.chi2_geometric) and np.isfinite(h.chi2_two_state)]
    assert row["heldout_tests"] == len(ok)
    assert row["heldout_chi2_geometric_mean"] == pytest.approx(np.mean([h.chi2_geometric for h in ok]))
    assert row["heldout_two_state_wins"] == sum(h.chi2_two_state < h.chi2_geometric for h in ok)
    assert row["heldout_two_state_wins_ll"] == sum(h.ll_two_state > h.ll_geometric for h in tt.heldout)
    for h in tt.heldout:
        assert h.p_geometric == pytest.approx(stats.chi2.sf(h.chi2_geometric, h.cells - 1))


def test_seeds_are_reproducible_and_streams_independent():
    rng = np.random.default_rng(6)
    a = np.minimum(rng.geometric(0.3, size=200) - 1, 15)
    cl = np.repeat(np.arange(20), 10)
    t1, _ = tail.tail_test(a, 15, cl, n_boot=9, seed=3)
    t2, _ = tail.tail_test(a, 15, cl, n_boot=9, seed=3)
    t3, _ = tail.tail_test(a, 15, cl, n_boot=29, seed=3)
    assert t1.lrt_p_bootstrap == t2.lrt_p_bootstrap
    assert [h.row() for h in t1.heldout] == [h.row() for h in t2.heldout]
    # the held-out splits do not depend on the number of bootstrap replicates
    assert [h.test_rounds for h in t1.heldout] == [h.test_rounds for h in t3.heldout]


def test_fit_tail_recovers_a_two_state_floor_and_rejects_the_geometric():
    spec = TaskSpec("docvqa", b0=1.226, b1=0.95, shape=1.5, scale=0.4, floor_weight=0.5,
                    tail=TwoStateTail(pi=0.3, rho_d=0.98, t_dd=0.97, t_uu=0.9, below=0.1))
    df = simulate_rounds([spec], n_prompts=60, rounds_per_prompt=(40, 60), prompt_corr=0.0, seed=11,
                         truth=True)
    fit = tail.fit_tail(df, n_boot=39, seed=2)
    tt = fit["docvqa"]
    floor = df[df["root_entropy"] <= tt.threshold]
    assert len(floor) == tt.n_rounds and floor["_tail"].all()
    L = 15
    true_pmf = tail.pmf(np.column_stack([np.full(len(floor), 0.3), np.full(len(floor), 0.98), floor["_p"],
                                         np.full(len(floor), 0.97), np.full(len(floor), 0.9)]), L).mean(axis=0)
    got = tail.pmf(tt.theta, L)
    se = np.sqrt(true_pmf * (1 - true_pmf) / tt.n_rounds)
    assert np.all(np.abs(got - true_pmf) <= 4 * se + 2e-3)
    assert tt.lrt_p_bootstrap <= 0.05
    assert tt.floor_mean > tt.sup
    assert tt.heldout_two_state_wins >= 5


def test_fit_tail_selection_threshold_and_errors():
    df = simulate_rounds(n_prompts=12, rounds_per_prompt=(10, 20), seed=2)
    fit = tail.fit_tail(df, threshold=0.05, n_boot=0, heldout=False, b0={"docvqa": 1.0})
    for t in fit.tasks:
        sub = df[(df["task"] == t.task) & (df["root_entropy"] <= 0.05)]
        assert t.n_rounds == len(sub)
    assert fit["docvqa"].b0 == 1.0 and np.isnan(fit["caption"].b0)
    assert np.isnan(fit.to_frame().set_index("task").loc["caption", "cap"])
    with pytest.raises(GlanceError, match="empty"):
        tail.fit_tail(df, threshold=0.0, n_boot=0)
    with pytest.raises(GlanceError, match="quantile"):
        tail.fit_tail(df, quantile=1.5)
    with pytest.raises(GlanceError, match="threshold"):
        tail.fit_tail(df, threshold=-1.0)
    # the default floor is the law's bottom decile bin
    fit = tail.fit_tail(df, n_boot=0, heldout=False)
    from glance_law.law import fit_law
    law = fit_law(df)
    for t in fit.tasks:
        r = law.row(t.task)
        assert t.n_rounds == r["floor_rounds"]
        assert t.floor_mean == pytest.approx(r["floor_mean"])
        assert t.cap == pytest.approx(r["cap"]) and t.sup == pytest.approx(r["sup"])


def test_exclusions_are_counted():
    df = simulate_rounds(n_prompts=10, rounds_per_prompt=12, seed=4)
    df["condition"] = df["condition"].astype(str)
    df.loc[df.index[:5], "condition"] = "mismatched"
    df.loc[df.index[5:8], "horizon"] = 0
    df.loc[df.index[5:8], "accepted"] = 0
    fit = tail.fit_tail(df, n_boot=0, heldout=False)
    text = " ".join(fit.notes)
    # three rounds of a drafting run with horizon 0: counted by their cause (no proposal), not as autoregressive
    assert "excluded 3 round(s) with horizon == 0" in text and "3 round(s) in which drafter" in text
    assert "proposed no draft" in text and "excluded 5 round(s) of other conditions" in text


def test_several_drafters_are_analysed_separately():
    import pandas as pd
    a = simulate_rounds(n_prompts=10, rounds_per_prompt=15, seed=7, drafter="block")
    b = simulate_rounds(n_prompts=10, rounds_per_prompt=15, seed=8, drafter="pld")
    df = pd.concat([a, b], ignore_index=True)
    fit = tail.fit_tail(df, n_boot=0, heldout=False)
    frame = fit.to_frame()
    assert "drafter" in frame.columns and len(frame) == 10
    t = fit["pld/docvqa"]
    alone = tail.fit_tail(b, n_boot=0, heldout=False)["docvqa"]
    assert t.n_rounds == alone.n_rounds and t.ll_two_state == pytest.approx(alone.ll_two_state)
    with pytest.raises(GlanceError, match="no single tail fit"):
        fit["docvqa"]


# ---------------------------------------------------------------------------
# the CLI section
# ---------------------------------------------------------------------------

def _run(argv):
    from glance_law.cli import fit
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = fit.main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_cli_tail_section(tmp_path):
    spec = TaskSpec("docvqa", b0=1.226, b1=0.95, shape=1.5, scale=0.4, floor_weight=0.3,
                    tail=TwoStateTail(pi=0.3))
    df = simulate_rounds([spec, TaskSpec("caption", b0=0.8, b1=0.46)], n_prompts=20, seed=5)
    write_table(df, tmp_path / "rounds.parquet")
    rc, out, err = _run([str(tmp_path), "--tail", "--tail-bootstrap", "9", "--format", "json"])
    assert rc == 0, err
    doc = json.loads(out)
    tables = list(doc["tail"].values())
    rows = tables[0]["rows"]
    assert [r["task"] for r in rows] == ["caption", "docvqa"]
    assert list(rows[0])[:16] == list(tail.TailFit.__module__ and
                                      ("task", "floor_rounds", "floor_prompts", "floor_mean", "cap", "sup",
                                       "ll_geometric", "ll_two_state", "lrt", "lrt_p_bootstrap",
                                       "lrt_p_nominal", "chi2_geometric", "chi2_two_state", "pi", "pi_star",
                                       "heldout_two_state_wins"))
    assert all(0 <= r["heldout_two_state_wins"] <= 7 for r in rows)
    assert len(tables[2]["rows"]) == 14     # 7 held-out tests per task
    rc, out, err = _run([str(tmp_path), "--tail", "--tail-bootstrap", "0", "--tail-threshold", "0.05"])
    assert rc == 0 and "grounded tail" in out
    rc, out, err = _run([str(tmp_path), "--tail", "--tail-bootstrap", "-3"])
    assert rc == 2 and err.count("\n") == 1 and "--tail-bootstrap" in err
    rc, out, err = _run([str(tmp_path), "--tail", "--tail-threshold", "-1"])
    assert rc == 2 and "threshold" in err and "Traceback" not in err


# ---------------------------------------------------------------------------
# slow: calibration of the bootstrap LRT under the geometric null
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_bootstrap_lrt_size_on_pure_geometric_logs():
    """Size of the bootstrap LRT at alpha = 0.05 on the floors of simulated pure-geometric logs
    (b1 = 0, independent rounds), by warp-speed Monte Carlo (Giacomini, Politis & White 2013: one
    bootstrap draw per replicate, R = 1500), and the paper's chi-square(4) on the same replicates."""
    from glance_law.tail.report import _floor_mask
    R = 1500
    spec = TaskSpec("null", b0=1.226, b1=0.0)
    rng = np.random.default_rng(99)
    Wo, Wb = [], []
    for r in range(R):
        df = simulate_rounds([spec], n_prompts=40, rounds_per_prompt=30, prompt_corr=0.0, seed=1000 + r)
        fl = _floor_mask(df["root_entropy"].to_numpy(dtype=np.float64), 0.1, None)
        a, L = df["accepted"].to_numpy()[fl], df["horizon"].to_numpy().astype(np.int64)[fl]
        Wo.append(tail_mle.counts(a, L, 15))
        p = tail_mle.geometric_from_counts(Wo[-1])[0][0]
        Wb.append(tail_model._simulate_geometric(float(p), L, 1, rng)[0])
    fo, fb = tail_model.fit_W(np.stack(Wo)), tail_model.fit_W(np.stack(Wb))
    lrt, lrt_star = 2 * (fo[3] - fo[5]), 2 * (fb[3] - fb[5])
    size = np.mean(lrt > np.quantile(lrt_star, 0.95))
    assert 0.03 <= size <= 0.07
    assert np.mean(stats.chi2.sf(lrt, 4) <= 0.05) < 0.03          # chi-square(4) is conservative
    assert 5.0 < np.quantile(lrt, 0.95) < 7.5                      # near chi-square(2)'s 5.99


# ---------------------------------------------------------------------------
# prompt-aware LRT: the Rao-Scott design effect of the run-length histogram
# ---------------------------------------------------------------------------

def test_histogram_design_effect_golden_cases():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 6, size=200)
    # one round per prompt: CR1's G/(G-1) factor is the only difference from the multinomial
    assert tail.histogram_design_effect(a, np.arange(200)) == pytest.approx(200 / 199, rel=1e-12)
    # every prompt repeats one run length r times: the histogram carries G, not G*r, rounds of evidence
    r = 5
    a_rep = np.repeat(a[:40], r)
    d = tail.histogram_design_effect(a_rep, np.repeat(np.arange(40), r))
    assert d == pytest.approx(r * 40 / 39, rel=1e-12)


def test_lrt_with_clusters_divides_by_the_design_effect():
    rng = np.random.default_rng(4)
    a = np.repeat(rng.geometric(0.4, size=60) - 1, 4).clip(0, 15)
    L = np.full(a.size, 15)
    cl = np.repeat(np.arange(60), 4)
    plain = tail.lrt_test(a, L, n_boot=99, seed=1)
    aware = tail.lrt_test(a, L, n_boot=99, seed=1, clusters=cl)
    assert plain.deff == 1.0 and aware.deff > 3.0
    assert aware.lrt == plain.lrt  # the statistic is reported as is; only its p-value changes
    np.testing.assert_array_equal(aware.null_draws, plain.null_draws)   # the same draws, the prompts kept
    stat, null = aware.lrt / aware.deff, aware.null_draws / aware.null_deff
    assert aware.p_bootstrap == (1 + np.sum(null >= stat - 1e-9 * (1 + stat))) / 100
    # the draws are independent rounds: their design effects scatter around 1, not around the observed 5
    assert 0.7 < np.median(aware.null_deff) < 1.3 and np.all(plain.null_deff == 1.0)


def test_design_effect_of_every_draw_is_the_histogram_design_effect():
    rng = np.random.default_rng(7)
    n = rng.integers(5, 60, size=9)
    cl = np.repeat(np.arange(9), n)
    a = rng.integers(0, 6, size=(5, cl.size))
    a[1] = np.repeat(rng.integers(0, 6, size=9), n)           # every request repeats one run length
    got = tail.design_effects(a, cl)
    want = [tail.histogram_design_effect(x, cl) for x in a]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[1] > 5                                           # clustered: far above 1
    # the bootstrap's draws keep the requests' rounds: the same prompts, the same horizons, one deff each
    L = np.full(cl.size, 5, dtype=np.int64)
    W, d = tail_model._simulate_geometric(0.6, L, 50, np.random.default_rng(1), clusters=cl)
    assert W.shape == (50, 10) and d.shape == (50,) and np.all(W.sum(axis=1) == cl.size)
    np.testing.assert_array_equal(W, tail_model._simulate_geometric(0.6, L, 50, np.random.default_rng(1)))


def _request_size(n_requests: int, R: int, seed: int) -> tuple[float, float]:
    """Warp-speed size at 0.05 of the prompt-aware LRT on per-request geometric histograms (p = 0.6,
    L = 5, 20-200 rounds a request): (the current rule, both sides divided; the observed divided only)."""
    rng = np.random.default_rng(seed)
    Wo, Wb, do, db = [], [], [], []
    for _ in range(R):
        n = rng.integers(20, 201, size=n_requests)
        cl = np.repeat(np.arange(n_requests), n)
        a = np.minimum(rng.geometric(0.4, size=cl.size) - 1, 5)
        L = np.full(cl.size, 5, dtype=np.int64)
        Wo.append(tail_mle.counts(a, L, 5))
        do.append(tail.histogram_design_effect(a, cl))
        p = tail_mle.geometric_from_counts(Wo[-1])[0][0]
        w, d = tail_model._simulate_geometric(float(p), L, 1, rng, clusters=cl)
        Wb.append(w[0])
        db.append(d[0])
    fo, fb = tail_model.fit_W(np.stack(Wo)), tail_model.fit_W(np.stack(Wb))
    lo, lb = np.maximum(0, 2 * (fo[3] - fo[5])) / np.array(do), np.maximum(0, 2 * (fb[3] - fb[5]))
    return float(np.mean(lo > np.quantile(lb / np.array(db), 0.95))), float(np.mean(lo > np.quantile(lb, 0.95)))


def test_lrt_size_with_eight_requests_quick():
    """Eight requests (the design effect's sd is 0.3): the observed LRT and each draw divided by
    their own design effects hold the size near 0.05 (400 warp-speed replicates; the full
    calibration is the slow test below and benchmarks/bench_tail.py --only requests)."""
    size, _ = _request_size(8, 400, 11)
    assert 0.02 <= size <= 0.085, size


@pytest.mark.slow
@pytest.mark.parametrize("n_requests", [8, 30, 100])
def test_lrt_size_on_per_request_histograms(n_requests):
    """Size at 0.05 within 4-6% (3000 warp-speed replicates, Monte Carlo sd 0.4 points; band widened
    by that error to 3.5-6.5%) from 8 to 100 requests."""
    size, old = _request_size(n_requests, 3000, 100 + n_requests)
    print(f"{n_requests} requests: size {size:.4f} (observed divided only: {old:.4f})")
    assert 0.035 <= size <= 0.065, size


@pytest.mark.slow
def test_bootstrap_lrt_size_with_correlated_rounds_is_prompt_aware():
    """With rounds of a prompt correlated (Gaussian copula 0.3), the independent-rounds bootstrap
    over-rejects (about 7-8% at 0.05); dividing the observed LRT and each draw by their own
    histogram design effects restores 3-7% (warp-speed Monte Carlo as above)."""
    from glance_law.tail.report import _floor_mask
    R = 1000
    spec = TaskSpec("null", b0=1.226, b1=0.0)
    rng = np.random.default_rng(98)
    Wo, Wb, deff, deff_b = [], [], [], []
    for r in range(R):
        df = simulate_rounds([spec], n_prompts=60, rounds_per_prompt=40, prompt_corr=0.3, seed=5000 + r,
                             vectors=False)
        fl = _floor_mask(df["root_entropy"].to_numpy(dtype=np.float64), 0.1, None)
        a, L = df["accepted"].to_numpy()[fl], df["horizon"].to_numpy().astype(np.int64)[fl]
        cl = df["prompt_id"].cat.codes.to_numpy()[fl]
        Wo.append(tail_mle.counts(a, L, 15))
        p = tail_mle.geometric_from_counts(Wo[-1])[0][0]
        w, d = tail_model._simulate_geometric(float(p), L, 1, rng, clusters=cl)
        Wb.append(w[0])
        deff_b.append(d[0])
        deff.append(tail.histogram_design_effect(a, cl))
    fo, fb = tail_model.fit_W(np.stack(Wo)), tail_model.fit_W(np.stack(Wb))
    lrt, lrt_star = 2 * (fo[3] - fo[5]), 2 * (fb[3] - fb[5])
    q = np.quantile(lrt_star, 0.95)
    size_aware = np.mean(lrt / np.array(deff) > np.quantile(lrt_star / np.array(deff_b), 0.95))
    size_naive = np.mean(lrt > q)
    print(f"correlated rounds: size at 0.05 naive {size_naive:.3f}, prompt-aware {size_aware:.3f} (design effect "
          f"{np.mean(deff):.2f}, draws {np.mean(deff_b):.2f})")
    assert 0.03 <= size_aware <= 0.07
    assert size_naive > size_aware


# --------------------------------------------------------------------------- memory independent of L (issue 15)

def test_coefficients_at_cells_match_the_full_recurrence():
    rng = np.random.default_rng(4)
    l1 = rng.uniform(0, 1, 40)
    l2 = l1 * rng.uniform(-1, 1, 40)
    Lmax = 300
    A, B = tail_mle.law_coefficients(l1, l2, Lmax)
    a, b = tail_mle.law_coefficients_at(l1, l2, np.arange(2 * Lmax), Lmax)
    assert np.array_equal(a, A) and np.array_equal(b, B)          # consecutive cells: the same arithmetic
    cells = np.sort(rng.choice(2 * Lmax, 25, replace=False))      # gaps crossed by squaring
    a, b = tail_mle.law_coefficients_at(l1, l2, cells, Lmax)
    np.testing.assert_allclose(a, A[:, cells], rtol=0, atol=1e-12)
    np.testing.assert_allclose(b, B[:, cells], rtol=0, atol=1e-12)


def test_sparse_cells_give_the_dense_maximum(monkeypatch):
    rng = np.random.default_rng(5)
    a = np.minimum(rng.geometric(0.25, 150) - 1, 40)
    L = np.full(a.size, 40)
    a[:30] = np.minimum(rng.geometric(0.04, 30) - 1, 40)          # a second, longer-running state
    W = tail_mle.counts(a, L)[None]
    monkeypatch.setattr(tail_mle, "DENSE_CELLS", 10 ** 6)
    dense = tail_mle.fit_counts(W)
    monkeypatch.setattr(tail_mle, "DENSE_CELLS", 0)
    sparse = tail_mle.fit_counts(W)
    np.testing.assert_allclose(np.ravel(sparse[3]), np.ravel(dense[3]), rtol=0, atol=1e-7)   # the maximum
    np.testing.assert_allclose(np.ravel(sparse[:3]), np.ravel(dense[:3]), atol=1e-4)


def test_simulated_counts_sparse_equal_dense(monkeypatch):
    from glance_law.tail import model as tail_model
    L = np.array([5, 40, 40, 12])
    monkeypatch.setattr(tail_mle, "DENSE_CELLS", 10 ** 6)
    dense = tail_model._simulate_geometric(0.7, L, 30, np.random.default_rng(2))
    monkeypatch.setattr(tail_mle, "DENSE_CELLS", 0)
    sparse = tail_model._simulate_geometric(0.7, L, 30, np.random.default_rng(2))
    assert np.array_equal(sparse.dense(), dense)


def test_tail_memory_does_not_grow_with_the_horizon():
    """A horizon of 30000 (the contract allows up to 32767) used to need a (4160, 33, 60000) grid:
    a MemoryError even for a handful of rounds. Peak traced memory now stays below 400 MB."""
    import tracemalloc

    from glance_law.tail.report import tail_test
    L = 30_000
    a = np.array([2, L, 5, 0, L // 2, 1, 3, 0])
    cl = np.repeat(np.arange(4), 2)
    tracemalloc.start()
    try:
        tt, _ = tail_test(a, np.full(a.size, L), cl, n_boot=9, seed=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 400 * 2 ** 20, f"peak {peak / 2 ** 20:.0f} MB"
    assert np.isfinite(tt.ll_two_state) and tt.ll_two_state >= tt.ll_geometric - 1e-9
    assert tt.observed.size == 2 * L and tt.observed.sum() == a.size
