"""The mismatched-image probe and the signal analysis: sandwich check, pairing, recovery, nulls."""
from __future__ import annotations

import numpy as np
import pytest
from _evidence_fixtures import concat, mismatch_from
from scipy import stats

from glance_law.errors import MissingColumnError
from glance_law.evidence import probe as P
from glance_law.law import truncated_mean
from glance_law.simulate import TaskSpec, simulate_rounds
from glance_law.stats.cluster import cluster_codes

DOC = TaskSpec("docvqa", b0=1.2, b1=0.9, shape=1.5, scale=0.5, floor_weight=0.1)
CAP = TaskSpec("caption", b0=0.8, b1=0.5, shape=3.0, scale=0.55, floor_weight=0.03)


def _matched(tasks=(DOC,), n_prompts=30, rounds=20, seed=0, horizon=10):
    return simulate_rounds(list(tasks), n_prompts=n_prompts, rounds_per_prompt=rounds, seed=seed,
                           horizon=horizon, drafter="block", run_id="live", truth=True)


def _probe_frame(b0x=None, b1x=None, shift=0.5, seed=0, **kw):
    m = _matched(seed=seed, **kw)
    parts = []
    for spec in ({t.name: t for t in kw.get("tasks", (DOC,))}).values():
        mt = m.loc[m["task"].astype(str) == spec.name]
        parts.append(mismatch_from(mt, spec.b0 if b0x is None else b0x, spec.b1 if b1x is None else b1x,
                                   seed=seed + 7, shift=shift))
    return concat(m, *parts)


def _hand_sandwich(y, X, groups):
    """CR1 as statsmodels defines it: G/(G-1) (N-1)/(N-K) B M B."""
    N, K = X.shape
    B = np.linalg.inv(X.T @ X)
    beta = B @ X.T @ y
    e = y - X @ beta
    gs = np.unique(groups)
    meat = np.zeros((K, K))
    for g in gs:
        s = X[groups == g].T @ e[groups == g]
        meat += np.outer(s, s)
    G = len(gs)
    V = G / (G - 1) * (N - 1) / (N - K) * B @ meat @ B
    return beta, V, G


def test_clustered_ols_matches_a_hand_computed_sandwich():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(7), [3, 4, 2, 5, 3, 4, 3])
    X = np.column_stack([np.ones(24), rng.normal(size=24), rng.integers(0, 2, 24)])
    y = X @ [0.5, 1.0, -0.3] + rng.normal(size=7)[groups] + rng.normal(size=24)
    res = P.clustered_ols(y, X, groups)
    beta, V, G = _hand_sandwich(y, X, groups)
    np.testing.assert_allclose(res.params, beta, rtol=1e-10)
    np.testing.assert_allclose(res.bse, np.sqrt(np.diag(V)), rtol=1e-10)
    t = stats.t.ppf(0.975, G - 1)
    np.testing.assert_allclose(res.conf_int()[2], beta[2] + np.array([-1, 1]) * t * np.sqrt(V[2, 2]), rtol=1e-10)


def test_probe_residual_effect_interval_is_the_hand_sandwich_on_a_small_case():
    f = _probe_frame(n_prompts=6, rounds=4, seed=3)
    res = P.probe(f, n_boot=0).to_frame().iloc[0]
    pairs = P.pair_conditions(f)
    codes, G = cluster_codes(pairs)
    n = len(pairs)
    y = np.r_[pairs.a_m, pairs.a_x].astype(float)
    X = np.column_stack([np.ones(2 * n), np.r_[pairs.H_m, pairs.H_x], np.r_[np.ones(n), np.zeros(n)]])
    beta, V, G = _hand_sandwich(y, X, np.r_[codes, codes])
    t = stats.t.ppf(0.975, G - 1)
    assert res.residual_effect == pytest.approx(beta[2], rel=1e-9)
    assert res.residual_effect_lo == pytest.approx(beta[2] - t * np.sqrt(V[2, 2]), rel=1e-9)
    assert res.residual_effect_hi == pytest.approx(beta[2] + t * np.sqrt(V[2, 2]), rel=1e-9)
    assert res.pairs == 24 and res.prompts == 6


def test_pairing_counts_unpaired_rounds_and_position_mismatches():
    f = _probe_frame(n_prompts=8, rounds=10, seed=1)
    x = f["condition"].astype(str) == "mismatched"
    drop = f.index[x][:5]
    g = f.drop(index=drop).copy()
    xi = g.index[g["condition"].astype(str) == "mismatched"][:3]
    g.loc[xi, "position"] = g.loc[xi, "position"] + 1
    notes: list[str] = []
    pairs = P.pair_conditions(g, notes)
    assert len(pairs) == 80 - 5 - 3
    assert any("5 round(s) without a partner" in n for n in notes)
    assert any("3 pair(s) at different positions" in n for n in notes)


def test_probe_needs_mismatched_rounds():
    with pytest.raises(MissingColumnError, match="--probe mismatched"):
        P.probe(_matched(n_prompts=4, rounds=4))


def test_relative_effect_recovers_the_entropy_channel_and_residual_is_null():
    # same law in both arms; the wrong image only raises entropy
    f = _probe_frame(shift=0.6, n_prompts=40, rounds=25, seed=5)
    r = P.probe(f, n_boot=2000, seed=1).to_frame().iloc[0]
    m = f[f.condition == "matched"]
    x = f[f.condition == "mismatched"]
    truth = truncated_mean(m["_p"], m["horizon"]).mean() / truncated_mean(x["_p"], x["horizon"]).mean() - 1
    assert r.relative_effect_lo <= truth <= r.relative_effect_hi
    assert r.relative_effect_lo > 0
    assert r.entropy_diff_hi < 0
    assert r.law_residual_effect_lo <= 0 <= r.law_residual_effect_hi


def test_a_direct_image_effect_survives_entropy_control():
    # the mismatched arm has the same entropy distribution but a lower intercept
    f = _probe_frame(b0x=0.6, shift=0.0, n_prompts=40, rounds=25, seed=6)
    r = P.probe(f, n_boot=1000).to_frame().iloc[0]
    assert r.law_residual_effect_lo > 0 and r.law_residual_p < 1e-3
    assert r.residual_effect_lo > 0
    assert r.relative_effect_lo > 0


def test_pooled_row_and_per_task_rows():
    f = _probe_frame(shift=0.5, n_prompts=15, rounds=10, seed=2, tasks=(DOC, CAP))
    t = P.probe(f, n_boot=200).to_frame()
    assert list(t.task) == ["caption", "docvqa", "pooled"]
    assert t.set_index("task").loc["pooled", "pairs"] == t.pairs.iloc[:2].sum()
    for fmt in ("text", "markdown", "latex", "html", "json", "csv"):
        assert P.probe(f, n_boot=50).summary(fmt)


def test_signal_partial_correlation_null_and_planted():
    f = _matched(n_prompts=40, rounds=30, seed=8)
    rng = np.random.default_rng(0)
    H = f["root_entropy"].to_numpy(float)
    # a signal that tracks entropy (nonlinearly) but carries nothing else about a
    f["saliency"] = np.exp(-2 * H) + 0.3 * rng.standard_normal(len(f))
    r = P.signal_effect(f, "saliency").to_frame().iloc[0]
    assert abs(r.r_a_v) > 0.2
    assert r.partial_r_lo <= 0 <= r.partial_r_hi
    # a binary signal that lengthens acceptance beyond entropy
    boost = rng.random(len(f)) < 0.5
    g = f.copy()
    g["attn_flag"] = boost.astype(float)
    g["accepted"] = np.minimum(g["accepted"] + boost * rng.integers(0, 3, len(g)), g["horizon"]).astype(np.int16)
    s = P.signal_effect(g, "attn_flag")
    row = s.to_frame().iloc[0]
    assert row.kind == "binary"
    assert row.partial_r_lo > 0 and row.decile_gap_lo > 0.5 and row.decile_ratio > 1.2
    assert len(s.deciles()) == 10


def test_signal_missing_column():
    with pytest.raises(MissingColumnError, match="saliency"):
        P.signal_effect(_matched(n_prompts=3, rounds=3), "saliency")


@pytest.mark.slow
def test_null_coverage_of_probe_intervals():
    """No image effect at all (same law, same entropy law): the relative-effect and both
    residual-effect intervals should cover 0 ~95% of the time. With shifted entropy but no
    direct effect, the law-offset residual should still cover 0."""
    reps = 100
    cov = {"relative": [], "residual": [], "law": [], "law_shift": [], "linear_shift": []}
    for i in range(reps):
        f = _probe_frame(shift=0.0, n_prompts=25, rounds=12, seed=2000 + i)
        r = P.probe(f, n_boot=500, seed=i).to_frame().iloc[0]
        cov["relative"].append(r.relative_effect_lo <= 0 <= r.relative_effect_hi)
        cov["residual"].append(r.residual_effect_lo <= 0 <= r.residual_effect_hi)
        cov["law"].append(r.law_residual_effect_lo <= 0 <= r.law_residual_effect_hi)
        g = _probe_frame(shift=0.6, n_prompts=25, rounds=12, seed=3000 + i)
        s = P.probe(g, n_boot=0).to_frame().iloc[0]
        cov["law_shift"].append(s.law_residual_effect_lo <= 0 <= s.law_residual_effect_hi)
        cov["linear_shift"].append(s.residual_effect_lo <= 0 <= s.residual_effect_hi)
    rates = {k: float(np.mean(v)) for k, v in cov.items()}
    print("probe null coverage over", reps, "replicates:", rates)
    for k in ("relative", "residual", "law", "law_shift"):
        assert 0.88 <= rates[k] <= 0.995, (k, rates[k])


@pytest.mark.slow
def test_null_coverage_of_the_partial_correlation():
    reps = 100
    cover = []
    for i in range(reps):
        f = _matched(n_prompts=25, rounds=15, seed=4000 + i)
        rng = np.random.default_rng(i)
        f["saliency"] = np.exp(-2 * f["root_entropy"].to_numpy(float)) + 0.3 * rng.standard_normal(len(f))
        r = P.signal_effect(f, "saliency").to_frame().iloc[0]
        cover.append(r.partial_r_lo <= 0 <= r.partial_r_hi)
    rate = float(np.mean(cover))
    print(f"partial correlation null coverage {rate:.3f} over {reps} replicates")
    assert 0.88 <= rate <= 0.995


# ---------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    from _evidence_fixtures import example_logs

    folder = tmp_path_factory.mktemp("probe_cli")
    ex = example_logs(folder, n_prompts=8, rounds=12)
    return folder, ex


def test_cli_probe_every_format(example, capsys):
    import json

    from _evidence_fixtures import check_cli_formats, run_cli

    folder, _ = example
    check_cli_formats([folder / "*.parquet", "--probe", "--probe-bootstrap", "200"], capsys, "probe",
                      [P.ProbeResult.title])
    rc, out, err = run_cli([folder / "*.parquet", "--probe", "--probe-bootstrap", "200", "--format", "json"], capsys)
    rows = json.loads(out)["probe"][P.ProbeResult.title]["rows"]
    assert [r["task"] for r in rows] == ["caption", "docvqa", "textvqa", "pooled"]
    assert all(r["relative_effect"] > 0 for r in rows)


def test_cli_probe_signal(example, capsys, tmp_path):
    from _evidence_fixtures import check_cli_formats, check_cli_skipped, write_logs

    folder, ex = example
    r = ex["rounds"].copy()
    r["attn_image"] = np.random.default_rng(0).random(len(r))
    write_logs(tmp_path, r.drop(columns=["committed"]), stem="sig")
    write_logs(tmp_path, ex["probe"], stem="probe")
    check_cli_formats([tmp_path, "--probe", "--probe-signal", "attn_image", "--probe-bootstrap", "100"], capsys,
                      "probe", [P.ProbeResult.title, P.SignalResult.title])
    check_cli_skipped([tmp_path, "--probe", "--probe-signal", "nope"], capsys, "nope")


def test_cli_probe_without_mismatched_rounds_fails_clearly(tmp_path, capsys):
    from _evidence_fixtures import check_cli_skipped, write_logs

    write_logs(tmp_path, _matched(n_prompts=4, rounds=4))
    check_cli_skipped([tmp_path, "--probe"], capsys, "mismatched", "glance-log --probe mismatched")


EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed example log")
def test_cli_probe_on_a_log_without_a_probe_run_fails_clearly(capsys):
    from _evidence_fixtures import check_cli_skipped

    check_cli_skipped([EXAMPLE, "--probe"], capsys, "glance-log --probe mismatched")
