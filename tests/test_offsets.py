"""Per-offset analysis: golden cases, recovery of per-offset laws, the Assumption 2 test."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glance_law import offsets as O
from glance_law.cluster import cluster_codes
from glance_law.errors import MissingColumnError
from glance_law.simulate import TaskSpec, TwoStateTail, simulate_rounds

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
    assert np.bincount(b).tolist() == [5, 5, 5, 5]
    assert np.all(np.diff(b[np.argsort(H, kind="stable")]) >= 0)


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
        b, _, infl = O._offset_fits(H[keep], M[keep], c2, G - 1)
        vals.append(O.survival_gap(H[keep], M[keep], c2, G - 1, b, infl)["diff_mean"])
    vals = np.array(vals)
    return np.sqrt((G - 1) / G * ((vals - vals.mean()) ** 2).sum())


def test_assumption2_linearised_se_matches_cluster_jackknife():
    f = simulate_rounds([PLAIN], n_prompts=30, rounds_per_prompt=25, horizon=6, seed=11)
    codes, G = cluster_codes(f)
    H = f["root_entropy"].to_numpy(float)
    M = O.match_matrix(f["match"])
    b, _, infl = O._offset_fits(H, M, codes, G)
    se = O.survival_gap(H, M, codes, G, b, infl)["se_mean"]
    jk = _jackknife_diff(H, M, codes, G)
    assert 0.8 < se / jk < 1.25, (se, jk)
    # without the fits' estimation error the SE would be visibly different
    se_naive = O.survival_gap(H, M, codes, G, b, np.zeros_like(infl))["se_mean"]
    assert abs(se_naive - se) / se > 0.05


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
    with pytest.raises(MissingColumnError, match="match"):
        O.offset_law(f)


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
    from glance_law._evidence import proportion_ci

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
    write_logs(tmp_path, f)
    check_cli_error([tmp_path, "--offsets"], capsys, "match", "glance-log")
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
    from _evidence_fixtures import run_cli
    import json

    rc, out, err = run_cli([EXAMPLE, "--offsets", "--format", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)["offsets"]
    law = doc[O.OffsetLaw.title]
    assert {r["task"] for r in law} == {"caption", "textvqa", "infovqa", "docvqa", "chartqa"}
    a2 = [r for r in doc[O.Assumption2Test.title] if r["bin"] == "all"]
    assert len(a2) == 5 and all(r["diff_lo"] <= r["diff"] <= r["diff_hi"] for r in a2)
