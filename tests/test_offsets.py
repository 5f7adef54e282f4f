"""Per-offset analysis: golden cases, recovery of per-offset laws, the Assumption 2 test."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glance_law.errors import MissingColumnError
from glance_law.evidence import offsets as O
from glance_law.simulate import TaskSpec, TwoStateTail, simulate_rounds
from glance_law.stats.cluster import cluster_codes

PLAIN = TaskSpec("docvqa", b0=1.2, b1=0.9, shape=1.5, scale=0.5, floor_weight=0.1)
TAIL = TaskSpec("chartqa", b0=1.2, b1=0.9, shape=1.5, scale=0.5, floor_weight=0.3,
                tail=TwoStateTail(pi=0.5, rho_d=0.98, t_dd=0.97, t_uu=0.9, below=0.2))


def test_match_matrix_pads_and_leading_runs_censor():
    M = O.match_matrix([np.array([1, 1, 0], np.int8), [1, 0], None, [1, -1, -1]])
    assert M.shape == (4, 3)
    assert M.tolist() == [[1, 1, 0], [1, 0, -1], [-1, -1, -1], [1, -1, -1]]
    R, ended = O.leading_runs(np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1], [1, -1, -1]]))
    assert R.tolist() == [2, 3, 0, 1]
    assert ended.tolist() == [True, False, True, False]


def test_decile_bins_equal_counts():
    H = np.r_[np.zeros(7), np.arange(13.0)]
    b = O.decile_bins(H, 4)
    # the eight tied zeros (positions 0..7) stay in one bin; the rest split at the law's cuts
    assert np.bincount(b).tolist() == [8, 2, 5, 5]
    assert np.all(np.diff(b[np.argsort(H, kind="stable")]) >= 0)
    assert np.bincount(O.decile_bins(np.arange(20.0), 4)).tolist() == [5, 5, 5, 5]


def test_survival_gap_golden_by_hand():
    # p = 0.5 at every offset (b = 0): implied S(l) = 0.5^l
    M = np.array([[1, 1, 0], [1, 0, -1], [0, 1, 1], [1, -1, -1]], np.int8)
    H = np.array([0.1, 0.2, 0.3, 0.4])
    b = np.zeros((3, 2))
    codes = np.arange(4)
    res = O.survival_gap(H, M, codes, 4, b, np.zeros((4, 3, 2)))
    # l=1: all four rounds determine R>=1 (3 yes); l=2: row 3 is cut by -1 (1 of 3);
    # l=3: rows 0-2 determine it (none)
    np.testing.assert_allclose(res["empirical"], [3 / 4, 1 / 3, 0.0])
    np.testing.assert_allclose(res["implied"], [0.5, 0.25, 0.125])
    assert res["n"].tolist() == [4, 3, 3]
    np.testing.assert_allclose(res["diff_mean"], 3 / 4 + 1 / 3 - 0.875)


def _jackknife_diff(H, M, codes, G):
    vals = []
    for g in range(G):
        keep = codes != g
        c2 = np.unique(codes[keep], return_inverse=True)[1]
        b, _, infl, _ = O._offset_fits(H[keep], M[keep], c2, G - 1)
        vals.append(O.survival_gap(H[keep], M[keep], c2, G - 1, b, infl)["diff_mean"])
    vals = np.array(vals)
    vals = vals[np.isfinite(vals)]  # a replicate whose deletion leaves an offset separated has no value
    g = len(vals)
    return np.sqrt((g - 1) / g * ((vals - vals.mean()) ** 2).sum())


def test_assumption2_linearised_se_matches_cluster_jackknife():
    f = simulate_rounds([PLAIN], n_prompts=30, rounds_per_prompt=25, horizon=6, seed=11)
    codes, G = cluster_codes(f)
    H = f["root_entropy"].to_numpy(float)
    M = O.match_matrix(f["match"])
    b, _, infl, _ = O._offset_fits(H, M, codes, G)
    se = O.survival_gap(H, M, codes, G, b, infl)["se_mean"]
    jk = _jackknife_diff(H, M, codes, G)
    assert 0.8 < se / jk < 1.25, (se, jk)
    # without the fits' estimation error the SE would be visibly different
    se_naive = O.survival_gap(H, M, codes, G, b, np.zeros_like(infl))["se_mean"]
    assert abs(se_naive - se) / se > 0.05


# ------------------------------------------- constant and unidentified offsets (audit)


def test_offset_fits_constant_offsets_take_the_mle_limit_and_others_say_why():
    H = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    M = np.array([[1, 0, 0, 1, 1, -1],
                  [1, 0, 0, 1, 0, -1],
                  [1, 0, 1, 0, 1, -1],
                  [1, -1, 1, 0, 0, -1],
                  [1, -1, 1, 1, 1, -1],
                  [1, -1, 1, 0, 0, -1]], np.int8)
    codes = np.arange(6)
    b, cov, infl, why = O._offset_fits(H, M, codes, 6)
    # offset 1 all matched, offset 2 all missed: p = 1 / 0 for every H, no estimation error
    assert why[0] == why[1] == O.CONSTANT
    assert b[0].tolist() == [np.inf, 0.0] and b[1].tolist() == [-np.inf, 0.0]
    assert not infl[:, :2].any() and np.isnan(cov[:2]).all()
    # offset 3: misses at H <= 0.2, matches at H >= 0.3 -> separated, no MLE
    assert "separate" in why[2] and np.isnan(b[2]).all() and not infl[:, 2].any()
    # offsets 4, 5: overlapping classes -> an ordinary fit; offset 6 unknown everywhere
    assert why[3] is None and why[4] is None and np.isfinite(b[3:5]).all()
    assert why[5] == "no round knows the match there"
    assert O._last_known(M) == 5


def test_survival_gap_golden_with_a_constant_first_offset():
    # offset 1 always matched (p = 1), offsets 2-3 at p = 0.5: S(l) = 1, 0.5, 0.25
    M = np.array([[1, 1, 0], [1, 0, -1], [1, 1, 1], [1, -1, -1]], np.int8)
    H = np.array([0.1, 0.2, 0.3, 0.4])
    b = np.array([[np.inf, 0.0], [0.0, 0.0], [0.0, 0.0]])
    res = O.survival_gap(H, M, np.arange(4), 4, b, np.zeros((4, 3, 2)))
    # l=1: 4 of 4 runs reach it; l=2: row 3 is cut by -1, rows 0 and 2 of 3 reach it;
    # l=3: rows 0 and 1 ended before, row 2 reaches it
    np.testing.assert_allclose(res["empirical"], [1, 2 / 3, 1 / 3])
    np.testing.assert_allclose(res["implied"], [1, 0.5, 0.25])
    assert res["run_mean"] == pytest.approx(2.0)
    assert res["implied_mean"] == pytest.approx(1.75)
    assert res["diff_mean"] == pytest.approx(0.25)
    # an unidentified offset 2 (b NaN): the implied sum is NaN, never cut short; the run is kept
    b[1] = np.nan
    res = O.survival_gap(H, M, np.arange(4), 4, b, np.zeros((4, 3, 2)))
    assert res["run_mean"] == pytest.approx(2.0)
    assert np.isnan(res["implied_mean"]) and np.isnan(res["diff_mean"]) and np.isnan(res["se_mean"])
    assert res["implied"][0] == 1.0 and np.isnan(res["implied"][1:]).all()


def _frame_with(match_rows, H, prompts):
    """A matched block log carrying the given match vectors, entropies and prompts."""
    n = len(match_rows)
    f = simulate_rounds([PLAIN], n_prompts=n, rounds_per_prompt=1, horizon=4, seed=0).iloc[:n].copy()
    f["match"] = [np.asarray(m, np.int8) for m in match_rows]
    f["root_entropy"] = np.asarray(H, np.float32)
    f["prompt_id"] = pd.Categorical([f"p{k}" for k in prompts])
    f["horizon"] = [len(m) for m in match_rows]
    return f


def _separated(h, y) -> bool:
    """Brute force: does some threshold put every match on one side and every miss on the other?"""
    cuts = np.r_[-np.inf, np.unique(h), np.inf]
    for c in cuts:
        for hi_is_match in (True, False):
            pred_match_hi = (h >= c) if hi_is_match else (h <= c)
            if np.all(pred_match_hi[y == 1]) and not np.any((h > c)[y == 0] if hi_is_match else (h < c)[y == 0]):
                return True
    return False


def _reference_gap(H, M):
    """Independent computation of (run_mean, implied_mean) by explicit loops: per-offset
    logistic MLE from statsmodels, a constant offset at its rate, NaN when separated."""
    import statsmodels.api as sm

    n, L = M.shape
    last = max(j + 1 for j in range(L) if (M[:, j] >= 0).any())
    p = np.full((n, last), np.nan)
    for j in range(last):
        k = M[:, j] >= 0
        y = M[k, j].astype(float)
        if y.min() == y.max():
            p[:, j] = y[0]
        elif not _separated(H[k].astype(float), y):
            X = np.column_stack([np.ones(k.sum()), -H[k]])
            beta = sm.Logit(y, X).fit(method="newton", tol=1e-12, maxiter=200, disp=0).params
            p[:, j] = 1 / (1 + np.exp(-(beta[0] + beta[1] * -H)))
    run = imp = 0.0
    for l in range(1, last + 1):
        d, s = [], []
        for i in range(n):
            r = 0
            while r < L and M[i, r] == 1:
                r += 1
            ended = r < L and M[i, r] == 0
            if r >= l or ended:
                d.append(float(r >= l))
                s.append(np.prod(p[i, :l]))
        if d:
            run += np.mean(d)
            imp += np.mean(s)
    return run, imp


def test_assumption2_golden_by_brute_force_with_a_grounded_first_offset():
    # 8 rounds of 4 prompts: offset 1 always matches, offsets 2-3 vary (not separated),
    # offset 4 always misses, and the vectors are padded with an offset no round knows
    rows = [[1, 1, 0, -1, -1], [1, 0, 1, -1, -1], [1, 1, 1, 0, -1], [1, 0, -1, -1, -1],
            [1, 1, 1, -1, -1], [1, 1, 0, -1, -1], [1, 0, 0, -1, -1], [1, 1, 1, 0, -1]]
    H = [0.10, 0.30, 0.20, 0.55, 0.05, 0.45, 0.25, 0.35]
    f = _frame_with(rows, H, [0, 0, 1, 1, 2, 2, 3, 3])
    res = O.assumption2_test(f, n_bins=2)
    row = res.to_frame().query("bin == 'all'").iloc[0]
    run, imp = _reference_gap(np.asarray(H, np.float32).astype(float), O.match_matrix(f["match"]))
    assert row.run_mean == pytest.approx(run, abs=1e-9) and run > 1.5
    assert row.implied_mean == pytest.approx(imp, abs=1e-6)
    assert row["diff"] == pytest.approx(run - imp, abs=1e-6)
    assert any("1 (p = 1)" in n and "4 (p = 0)" in n for n in res.notes)
    assert any("l <= 4" in n for n in res.notes)


def test_assumption2_separated_offset_is_nan_with_a_note_not_a_truncated_sum():
    # offset 2: the only miss has the lowest entropy -> separated
    rows = [[1, 0, -1], [1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]]
    H = [0.05, 0.3, 0.5, 0.2, 0.4, 0.6]
    f = _frame_with(rows, H, [0, 0, 1, 1, 2, 2])
    res = O.assumption2_test(f, n_bins=1)
    row = res.to_frame().query("bin == 'all'").iloc[0]
    assert np.isnan(row.implied_mean) and np.isnan(row["diff"]) and np.isnan(row.diff_lo) and np.isnan(row.p)
    assert row.run_mean == pytest.approx(1 + 5 / 6 + 2 / 6)  # R = 1, 2, 3+, 2, 3+, 2
    assert any("offset 2" in n and "not identified" in n for n in res.notes)
    law = O.offset_law(f)
    assert np.isnan(law.to_frame().set_index("offset").loc[2, "b0"])
    assert any("offset 2" in n and "separate" in n for n in law.notes)
    assert any("offset 1" in n and "+inf" in n for n in law.notes)


def test_assumption2_always_matched_first_offset_shifts_runs_by_exactly_one():
    """The auditor's situation in the simulator: a grounded first token the drafter always
    copies. Prepending a 1 to every match vector (and an unknown last offset) adds exactly 1
    to both mean runs and leaves the difference and its interval unchanged (p_1 = 1 has no
    estimation error); before the fix every number read 0."""
    f = simulate_rounds([PLAIN], n_prompts=40, rounds_per_prompt=20, horizon=6, seed=8)
    g = f.copy()
    g["match"] = [np.r_[1, m, -1].astype(np.int8) for m in f["match"]]
    g["horizon"] = f["horizon"] + 2
    a = O.assumption2_test(f, n_bins=4).to_frame().set_index("bin")
    b = O.assumption2_test(g, n_bins=4).to_frame().set_index("bin")
    np.testing.assert_allclose(b.run_mean, a.run_mean + 1, atol=1e-9)
    np.testing.assert_allclose(b.implied_mean, a.implied_mean + 1, atol=1e-9)
    for c in ("diff", "diff_lo", "diff_hi", "p"):
        np.testing.assert_allclose(b[c], a[c], atol=1e-9)
    # Assumption 2 holds in the simulator: the interval covers 0
    assert b.loc["all", "diff_lo"] <= 0 <= b.loc["all", "diff_hi"]


def test_run_survival_uses_the_constant_limit_when_every_round_accepts_its_horizon():
    f = simulate_rounds([PLAIN], n_prompts=10, rounds_per_prompt=10, horizon=4, seed=2)
    f["accepted"] = f["horizon"]
    r = O.run_survival(f, n_bins=2, two_state=False)
    t = r.to_frame()
    assert (t.geometric == 1.0).all() and (t.empirical == 1.0).all()
    assert any("p = 1" in n for n in r.notes)


DATA_LOGS = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "logs"


@pytest.mark.skipif(not DATA_LOGS.exists(), reason="no committed logs")
def test_assumption2_on_the_committed_logs_matches_a_brute_force_reference():
    """The auditor's case: block rounds of data/logs, where offset 1 always matches on the
    grounded tasks. Every task's bin-'all' row equals the explicit-loop reference (or is NaN,
    with a note naming the offset, exactly when the reference meets a separated offset), and
    the CR1 interval agrees with the delete-one-prompt jackknife where the test is defined."""
    from glance_law.io import read_logs

    fr = read_logs(DATA_LOGS).frame
    f = fr[(fr.drafter.astype(str) == "block") & (fr.condition.astype(str) == "matched") & (fr.horizon > 0)]
    res = O.assumption2_test(f)
    rows = res.to_frame().query("bin == 'all'").set_index("task")
    grounded = 0
    for task, s in f.groupby("task", observed=True):
        H = s.root_entropy.to_numpy(float)
        M = O.match_matrix(s["match"])
        run, imp = _reference_gap(H, M)
        row = rows.loc[task]
        assert row.run_mean == pytest.approx(run, abs=1e-9), task
        if np.isnan(imp):
            assert np.isnan(row.implied_mean) and np.isnan(row["diff"])
            assert any(n.startswith(f"{task} offset") and "not identified" in n for n in res.notes)
            continue
        assert row.implied_mean == pytest.approx(imp, abs=1e-5), task
        if (M[:, 0] == 1).all():
            grounded += 1
            assert row.run_mean >= 1 and row.implied_mean >= 1  # no longer the silent 0
            if np.isfinite(row.diff_lo) and row.diff_hi > row.diff_lo:
                codes, G = cluster_codes(s)
                b, _, infl, _ = O._offset_fits(H, M, codes, G)
                se = O.survival_gap(H, M, codes, G, b, infl)["se_mean"]
                jk = _jackknife_diff(H, M, codes, G)
                assert 0.7 < se / jk < 1.4, (task, se, jk)
    assert grounded >= 2


def test_offset_law_recovers_the_law_at_every_offset():
    # in the simulator every offset's marginal match probability is sigmoid(b0 - b1 H)
    f = simulate_rounds([PLAIN], n_prompts=60, rounds_per_prompt=40, horizon=8, seed=3)
    t = O.offset_law(f).to_frame()
    assert len(t) == 8
    cover0 = ((t.b0_lo <= 1.2) & (1.2 <= t.b0_hi)).mean()
    cover1 = ((t.b1_lo <= 0.9) & (0.9 <= t.b1_hi)).mean()
    assert cover0 >= 0.75 and cover1 >= 0.75
    assert abs(t.b1.mean() - 0.9) < 0.15
    assert (t.prompts == 60).all()


def test_hazards_equal_marginals_without_tail_and_exceed_them_in_the_copy_regime():
    plain = simulate_rounds([PLAIN], n_prompts=60, rounds_per_prompt=40, horizon=6, seed=4)
    h = O.offset_hazards(plain, n_bins=5).to_frame()
    h = h[h.offset >= 2]
    # the interval of the conditional hazard covers the marginal rate in most cells
    inside = ((h.hazard_lo <= h.marginal) & (h.marginal <= h.hazard_hi)).mean()
    assert inside > 0.8
    tail = simulate_rounds([TAIL], n_prompts=60, rounds_per_prompt=40, horizon=6, seed=4)
    ht = O.offset_hazards(tail, n_bins=5).to_frame()
    floor = ht[(ht.bin == 1) & (ht.offset >= 3)]
    assert (floor.hazard > floor.marginal).all()
    assert (floor.hazard - floor.marginal).mean() > 0.03


def test_assumption2_holds_in_the_geometric_simulator():
    f = simulate_rounds([PLAIN], n_prompts=50, rounds_per_prompt=30, horizon=10, seed=5)
    res = O.assumption2_test(f, n_bins=5)
    row = res.to_frame().query("bin == 'all'").iloc[0]
    assert row.diff_lo <= 0 <= row.diff_hi
    assert abs(row["diff"]) < 0.3
    c = res.curve()
    assert set(c.columns) >= {"l", "empirical", "implied", "diff", "diff_lo", "diff_hi"}


def test_assumption2_detects_the_copy_regime():
    f = simulate_rounds([TAIL], n_prompts=50, rounds_per_prompt=30, horizon=10, seed=5)
    t = O.assumption2_test(f, n_bins=5).to_frame()
    floor = t.query("bin == '1'").iloc[0]
    assert floor.diff_lo > 0 and floor.p < 1e-3
    assert floor.run_mean > floor.implied_mean + 1.0


def test_run_survival_geometric_matches_the_empirical_curve():
    f = simulate_rounds([PLAIN], n_prompts=60, rounds_per_prompt=40, horizon=8, seed=6)
    s = O.run_survival(f, n_bins=5, two_state=False).to_frame()
    assert set(s.decile) == {1, 2, 3, 4, 5}
    inside = ((s.empirical_lo <= s.geometric) & (s.geometric <= s.empirical_hi)).mean()
    assert inside > 0.85
    # survival curves are non-increasing in l within a decile
    for _, d in s.groupby("decile"):
        assert np.all(np.diff(d.sort_values("l").empirical.to_numpy()) <= 1e-12)


def test_groups_by_drafter_and_excludes_ar_rounds_with_a_note():
    a = simulate_rounds([PLAIN], n_prompts=10, rounds_per_prompt=10, horizon=5, seed=1, drafter="block")
    b = simulate_rounds([PLAIN], n_prompts=10, rounds_per_prompt=10, horizon=5, seed=2, drafter="pld", run_id="p")
    ar = a.copy()
    ar["drafter"] = "ar"
    ar["run_id"] = "ar"
    ar["horizon"] = 0
    ar["accepted"] = 0
    f = pd.concat([a, b, ar], ignore_index=True)
    for c in ("run_id", "drafter", "task", "prompt_id", "condition"):
        f[c] = f[c].astype(str).astype("category")
    r = O.offset_law(f)
    t = r.to_frame()
    assert set(t.drafter) == {"block", "pld"}
    assert any("horizon 0" in n for n in r.notes)


def test_missing_match_column_is_a_clear_error():
    f = simulate_rounds([PLAIN], n_prompts=5, rounds_per_prompt=5, seed=1, vectors=False)
    f["budget"] = f["horizon"] + 4          # a tree: its accepted path is not its top-1 run
    with pytest.raises(MissingColumnError, match="match"):
        O.offset_law(f)
    f["budget"] = f["horizon"]              # a chain: the matches are derived from the accepted run
    assert any("derived" in n for n in O.offset_law(f).notes)


def test_renders_in_every_format():
    f = simulate_rounds([PLAIN], n_prompts=8, rounds_per_prompt=10, horizon=4, seed=1)
    for res in (O.offset_law(f), O.offset_hazards(f, n_bins=2), O.assumption2_test(f, n_bins=2),
                O.run_survival(f, n_bins=2)):
        for fmt in ("text", "markdown", "latex", "html", "json", "csv"):
            assert res.summary(fmt)


@pytest.mark.slow
def test_null_coverage_of_the_assumption2_interval_and_offset_slopes():
    """Under the geometric simulator Assumption 2 holds: the 95% interval of the mean-run
    difference should cover 0, and each offset's b1 interval the true slope, ~95% of the time."""
    reps = 120
    cover_diff, cover_b1 = [], []
    for seed in range(reps):
        f = simulate_rounds([PLAIN], n_prompts=30, rounds_per_prompt=20, horizon=6, seed=1000 + seed)
        row = O.assumption2_test(f, n_bins=1).to_frame().query("bin == 'all'").iloc[0]
        cover_diff.append(row.diff_lo <= 0 <= row.diff_hi)
        t = O.offset_law(f).to_frame()
        cover_b1.append(((t.b1_lo <= 0.9) & (0.9 <= t.b1_hi)).mean())
    cd, cb = float(np.mean(cover_diff)), float(np.mean(cover_b1))
    print(f"assumption2 diff coverage {cd:.3f}, offset b1 coverage {cb:.3f} over {reps} replicates")
    assert 0.88 <= cd <= 0.995
    assert 0.90 <= cb <= 0.99


def test_proportion_interval_stays_in_the_unit_interval():
    from glance_law.evidence.common import proportion_ci

    lo, hi = proportion_ci(1.0, 0.0, 10)
    assert lo == pytest.approx(0.025 ** 0.1) and hi == 1.0
    lo, hi = proportion_ci(0.0, 0.0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1)
    lo, hi = proportion_ci(0.05, 0.2, 4)
    assert 0 < lo < 0.05 < hi < 1
    assert np.isnan(proportion_ci(0.5, 0.1, 1)[0])


# ---------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    from _evidence_fixtures import example_logs

    folder = tmp_path_factory.mktemp("offsets_cli")
    example_logs(folder, n_prompts=8, rounds=12)
    return folder


def test_cli_offsets_every_format(example, capsys):
    from _evidence_fixtures import check_cli_formats

    check_cli_formats([example / "*.parquet", "--offsets", "--offset-bins", "3"], capsys, "offsets",
                      [O.OffsetLaw.title, O.OffsetHazards.title, O.Assumption2Test.title, O.RunSurvival.title])


def test_cli_offsets_without_match_vectors_fails_clearly(tmp_path, capsys):
    from _evidence_fixtures import check_cli_error, write_logs

    f = simulate_rounds([PLAIN], n_prompts=5, rounds_per_prompt=5, seed=1, vectors=False)
    f["budget"] = f["horizon"] + 4          # a tree without match vectors: the section is skipped, named
    write_logs(tmp_path, f)
    from glance_law.cli import fit as cli
    assert cli.main([str(tmp_path), "--offsets"]) == 0
    out, err = capsys.readouterr()
    assert "offset_law not made" in out and "'match' column" in out and "glance-log" in out
    check_cli_error([tmp_path, "--offsets", "--offset-bins", "0"], capsys, "--offset-bins")


def test_run_survival_two_state_column_in_the_floor():
    tail = pytest.importorskip("glance_law.tail")
    if not hasattr(tail, "fit_tail"):
        pytest.skip("glance_law.tail.fit_tail not available")
    f = simulate_rounds([TAIL], n_prompts=50, rounds_per_prompt=30, horizon=10, seed=5)
    s = O.run_survival(f, n_bins=5).to_frame()
    floor = s[s.decile == 1]
    assert floor.two_state.notna().all() and s[s.decile > 1].two_state.isna().all()
    # in the copy regime the two-state survival tracks the empirical curve, the geometric does not
    err_two = (floor.two_state - floor.empirical).abs().mean()
    err_geo = (floor.geometric - floor.empirical).abs().mean()
    assert err_two < err_geo / 2
    assert ((floor.empirical_lo <= floor.two_state) & (floor.two_state <= floor.empirical_hi)).all()


EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed example log")
def test_cli_offsets_on_the_committed_example_log(capsys):
    import json

    from _evidence_fixtures import run_cli

    rc, out, err = run_cli([EXAMPLE, "--offsets", "--format", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)["offsets"]
    law = doc[O.OffsetLaw.title]["rows"]
    assert {r["task"] for r in law} == {"caption", "textvqa", "infovqa", "docvqa", "chartqa"}
    a2 = [r for r in doc[O.Assumption2Test.title]["rows"] if r["bin"] == "all"]
    assert len(a2) == 5 and all(r["diff_lo"] <= r["diff"] <= r["diff_hi"] for r in a2)
