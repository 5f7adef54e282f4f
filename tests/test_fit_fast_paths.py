"""The exact fit's fast paths (issue 13 item 6) against the general routines they replace.

fit_law reads every group's rounds sorted by entropy and unweighted through shortcuts: decile,
ceiling and isotonic sums over runs, mid-ranks from positions, one chunked pass for the MLE's
clustered sums and the fitted moments, Newton confirmed by that pass. Each must give what the
general routine gives (to round-off) on data with ties, output-ending horizons and weights."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from glance_law.data import selection
from glance_law.law import model
from glance_law.law.fit import fit_law
from glance_law.simulate import simulate_rounds
from glance_law.stats import ceiling, cluster, curve


def _sorted_sample(rng, n, levels):
    x = np.sort(rng.integers(0, levels, n) / 7.0)
    y = (rng.integers(0, 6, n) + (x > x.mean()) * rng.integers(-3, 1, n)).astype(float)
    return x, np.maximum(y, 0.0)


@pytest.mark.parametrize("repool", [False, True])
def test_sorted_isotonic_bin_sums_equal_the_per_round_fit(monkeypatch, repool):
    if repool:  # the re-pooling rounds that bound pava's memory at 10^7 rounds
        monkeypatch.setattr(curve, "REPOOL_ABOVE", 5)
    rng = np.random.default_rng(0)
    for n, levels in [(2, 1), (3, 2), (50, 3), (400, 40), (3000, 10_000), (3000, 5)]:
        x, y = _sorted_sample(rng, n, levels)
        for B in sorted({1, 2, min(n, 10)}):
            starts = curve.bin_starts(n, B)
            ref = np.add.reduceat(curve.isotonic_decreasing(x, y), starts[:-1])
            assert curve.sorted_isotonic_bin_sums(x, y, starts) == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_sorted_midranks_equal_rankdata():
    rng = np.random.default_rng(1)
    for n, levels in [(1, 1), (2, 1), (7, 3), (1000, 50), (1000, 10 ** 6)]:
        x, _ = _sorted_sample(rng, n, levels)
        assert np.array_equal(curve.sorted_midranks(x), stats.rankdata(x))
        assert np.array_equal(curve.sorted_midranks(x), curve.midranks(x))


def test_run_sums_equal_bin_sums():
    rng = np.random.default_rng(2)
    x, y = _sorted_sample(rng, 997, 30)
    codes = rng.integers(0, 37, x.size)
    starts = curve.bin_starts(x.size, 10)
    bins = curve.sorted_bins(x.size, 10)
    assert np.array_equal(np.repeat(np.arange(10), np.diff(starts)), bins)
    fast = curve.binned_means(y, None, 10, codes, 37, starts=starts)
    slow = curve.binned_means(y, bins, 10, codes, 37)
    for k in ("n", "mean", "se", "lo", "hi", "clusters"):
        assert fast[k] == pytest.approx(slow[k], rel=1e-12), k
    got = ceiling.noise_ceiling(x, y, 50, is_sorted=True)
    ref = ceiling.noise_ceiling(x, y, 50, order=np.argsort(x, kind="stable"))
    assert got.binned == pytest.approx(ref.binned, rel=1e-12)
    assert got.corrected == pytest.approx(ref.corrected, rel=1e-12)
    assert got.bins == ref.bins
    assert np.array_equal(curve.integer_midranks(y), stats.rankdata(y))
    assert curve.integer_midranks(y.astype(np.int16)) == pytest.approx(stats.rankdata(y))


def test_stable_order_matches_a_stable_argsort_with_ties_and_signed_zero():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, 5000).astype(np.float32) / 8
    x[rng.integers(0, 5000, 40)] = -0.0
    assert np.array_equal(curve.stable_order(x), np.argsort(x, kind="stable"))
    assert np.array_equal(curve.stable_order(x.astype(np.float64)), np.argsort(x, kind="stable"))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("horizon", ["varying", "constant"])
def test_law_pass_equals_the_separate_passes(weighted, horizon):
    rng = np.random.default_rng(4)
    n, G = 20_000, 97
    H = np.sort(rng.gamma(2.0, 0.6, n))
    L = rng.integers(1, 9, n) if horizon == "varying" else np.broadcast_to(np.int16(8), n)
    p = model.match_prob(H, 1.5, 0.9)
    a = np.minimum(rng.geometric(1.0 - p) - 1, L).astype(float)
    codes = rng.integers(0, G, n)
    w = rng.integers(1, 4, n).astype(float) if weighted else None
    b = model.fit_affine_logit(H, a, L, w)[0]
    u, info_g, M, ll, s1, s2, sv = model.law_pass(b, H, a, L, codes, G, w, chunk=4096)
    u_ref, info_ref = model.cluster_score_information(b, H, a, L, codes, G, w)
    M_ref, ll_ref, s1_ref, s2_ref, sv_ref = model.fitted_moments(b, H, a, L, model.match_prob(H, *b), w)
    assert u == pytest.approx(u_ref, rel=1e-9, abs=1e-9)
    assert info_g == pytest.approx(info_ref, rel=1e-12)
    assert M == pytest.approx(M_ref, rel=1e-13)
    assert (ll, s1, s2, sv) == pytest.approx((ll_ref, s1_ref, s2_ref, sv_ref), rel=1e-12)
    # Newton confirmed by the pass: the same estimate, the same sums
    fb, *rest = model.fit_law_pass(H, a, L, codes, G, w, sorted_h=True)
    assert fb == pytest.approx(b, rel=1e-12)
    assert rest[1] == pytest.approx(info_ref, rel=1e-10)


def test_cr3_two_parameters_by_cramer_equals_the_general_solve():
    rng = np.random.default_rng(5)
    u = rng.normal(size=(30, 2))
    A = rng.normal(size=(30, 2, 2))
    info_g = A @ A.transpose(0, 2, 1) + np.eye(2)
    info = info_g.sum(0)
    got = cluster.cr3_covariance(u, info_g, info)
    rest = info[None] - info_g
    d = np.linalg.solve(rest, u[:, :, None])[:, :, 0]
    d -= d.mean(0)
    assert got == pytest.approx(29 / 30 * d.T @ d, rel=1e-12)


def test_compact_counts_and_native_prepare():
    rng = np.random.default_rng(6)
    for codes in (rng.integers(5, 40, 300), rng.integers(0, 10 ** 9, 50), np.arange(7)):
        out, G, counts = selection.compact_counts(codes)
        uniq, inv, cnt = np.unique(codes, return_inverse=True, return_counts=True)
        assert G == uniq.size and np.array_equal(out, inv) and np.array_equal(counts, cnt)
    frame = simulate_rounds(seed=2, n_prompts=6)
    native = selection.prepare(frame, "task", "matched", None, ("task", "prompt_id"), [], native=True)
    plain = selection.prepare(frame, "task", "matched", None, ("task", "prompt_id"), [])
    assert native["H"].dtype == np.float32 and plain["H"].dtype == np.float64
    for k in ("H", "a", "L"):
        assert np.array_equal(native[k].astype(np.float64), plain[k])


def test_fit_law_same_statistics_with_or_without_the_log_dtypes():
    """float32/int16 columns (the log's types, fast path) and float64 ones give one fit."""
    frame = simulate_rounds(seed=7, n_prompts=30)
    wide = frame.assign(root_entropy=frame["root_entropy"].astype(np.float64),
                        accepted=frame["accepted"].astype(np.float64), horizon=frame["horizon"].astype(np.int64))
    f1, f2 = fit_law(frame).to_frame(), fit_law(wide).to_frame()
    num = [c for c in f1.columns if f1[c].dtype.kind == "f"]
    assert f1[num].to_numpy() == pytest.approx(f2[num].to_numpy(), rel=1e-12, nan_ok=True)


def test_law_pass_mean_is_accurate_where_p_is_near_one():
    """The one-pass moments take 1 - p as e^-eta p (no cancellation): M stays within L and
    matches the closed form computed in 50-digit decimal arithmetic up to eta = 36.5."""
    from decimal import Decimal, getcontext

    from glance_law.law.model import law_pass

    getcontext().prec = 50
    for eta in (5.0, 20.0, 30.0, 36.5, -30.0):
        out = law_pass(np.array([eta, 1.0]), np.array([0.0]), np.array([8.0]), np.array([8.0]), np.array([0]), 1)
        M = out[2][0]
        P = 1 / (1 + (-Decimal(eta)).exp())
        true = float(P * (1 - P ** 8) / (1 - P))
        assert M <= 8.0 and abs(M - true) <= 1e-14 * true, (eta, M, true)


def _large_sorted_sample(seed, n=150_000, b=(1.2, 0.8), scale=0.9, levels=None, weighted=False):
    """Sorted entropies (ties when ``levels``), truncated-geometric runs under the law at ``b``,
    horizons 1..8, optional integer weights."""
    rng = np.random.default_rng(seed)
    H = np.sort(rng.gamma(1.6, scale, n))
    if levels is not None:
        H = np.round(H * levels) / levels
    L = rng.integers(1, 9, n).astype(float)
    a = np.minimum(rng.geometric(1.0 - model.match_prob(H, *b)) - 1, L).astype(float)
    w = rng.integers(1, 5, n).astype(float) if weighted else None
    return H, a, L, w


@pytest.mark.parametrize("case", [dict(), dict(weighted=True), dict(levels=8), dict(b=(3.0, 2.5), scale=2.5),
                                  dict(b=(-0.5, 0.2), scale=0.3)])
def test_binned_start_lies_next_to_the_mle(case):
    """The moment-expansion start of Newton on sorted entropies is within 1e-10 of the MLE
    (ties, weights, a steep slope over 0-20 nats, a flat one), so the pass that confirms it is
    the only pass over the rounds."""
    H, a, L, w = _large_sorted_sample(11, **case)
    exact = model.fit_affine_logit(H, a, L, w)[0]      # unsorted path: subsample start, confirmed
    n_tr = (a + (a < L)) * (1.0 if w is None else w)
    s = a if w is None else a * w
    start = model._binned_start(H, n_tr, float(s.sum()), model.dot(s, H))
    assert start is not None
    assert np.max(np.abs(start - exact)) < 1e-10 * (1.0 + np.max(np.abs(exact)))
    got, info, conv = model.fit_affine_logit(H, a, L, w, sorted_h=True, confirm=False)
    assert info is None and conv is None and np.array_equal(got, start)   # returned unconfirmed
    assert model.fit_affine_logit(H, a, L, w, sorted_h=True)[0] == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("offset", [None, 3e-10, 1e-3, 0.5])
def test_fit_law_pass_confirms_any_start(monkeypatch, offset):
    """Whatever the start (none, in Newton's quadratic regime, or far), fit_law_pass ends at the
    MLE with the clustered sums at it."""
    H, a, L, w = _large_sorted_sample(12, weighted=True)
    rng = np.random.default_rng(13)
    G = 300
    codes = rng.integers(0, G, H.size)
    exact = model.fit_affine_logit(H, a, L, w)[0]
    real = model._binned_start
    monkeypatch.setattr(model, "_binned_start",
                        lambda *args: None if offset is None else real(*args) + offset)
    b, u, info_g, *_ = model.fit_law_pass(H, a, L, codes, G, w, sorted_h=True)
    assert b == pytest.approx(exact, rel=1e-11)
    u_ref, info_ref = model.cluster_score_information(exact, H, a, L, codes, G, w)
    assert info_g == pytest.approx(info_ref, rel=1e-9)
    assert np.abs(u - u_ref).max() < 1e-6 * np.abs(u_ref).max()


@pytest.mark.parametrize("by", ["task", "condition", None])
def test_summary_no_draft_count_equals_the_count_over_every_round(by):
    """The summary counts the rounds that drafted nothing from those rows alone (issue 24 item 7:
    no string per round of the whole frame); it must equal no_draft_rounds over every round."""
    from glance_law.evidence import common
    from glance_law.evidence.summary import group_summary
    from glance_law.simulate import DEFAULT_TASKS
    frame = simulate_rounds(DEFAULT_TASKS[:3], n_prompts=8, vectors=False, seed=1)
    rng = np.random.default_rng(2)
    frame["horizon"] = np.where(rng.random(len(frame)) < 0.2, 0, frame["horizon"]).astype(np.int16)
    frame["accepted"] = np.minimum(frame["accepted"], frame["horizon"]).astype(np.int16)
    frame["drafter"] = frame["drafter"].cat.add_categories(["other"])
    frame.loc[frame.index[::3], "drafter"] = "other"
    frame["condition"] = frame["condition"].cat.add_categories(["mismatched"])
    frame.loc[frame.index[1::4], "condition"] = "mismatched"
    expected = selection.no_draft_rounds(common.with_arm_labels(frame), by, ("matched",))
    assert sum(expected.values()) > 0
    rows = group_summary(frame, by=by).to_frame()
    for _, r in rows.iterrows():
        group = selection.POOLED if r["task"] == common.GROUP_ALL else r["task"]
        assert r["no_draft_rounds"] == round(expected.get((r["drafter"], group), 0.0))
    assert rows["no_draft_rounds"].sum() > 0
