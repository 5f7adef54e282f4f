"""Law transfer: golden pieces, recovery of a planted shift, null calibration."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glance_law.errors import GlanceError
from glance_law.evidence import transfer as T
from glance_law.law import truncated_mean
from glance_law.simulate import TaskSpec, simulate_rounds


def _tasks(b1_test=0.8, seed=0, n_prompts=40, rounds=25):
    specs = [TaskSpec("caption", 1.0, 0.8, shape=2.5, scale=0.5), TaskSpec("textvqa", 1.0, 0.8, shape=2.0, scale=0.45),
             TaskSpec("docvqa", 1.0, b1_test, shape=1.5, scale=0.4)]
    return simulate_rounds(specs, n_prompts=n_prompts, rounds_per_prompt=rounds, seed=seed, horizon=12, truth=True)


def test_mean_derivative_matches_finite_differences():
    p = np.array([0.05, 0.3, 0.7, 0.95, 0.999])
    L = np.array([1, 5, 15, 15, 63])
    h = 1e-6
    fd = (truncated_mean(p + h, L) - truncated_mean(p - h, L)) / (2 * h)
    np.testing.assert_allclose(T.mean_derivative(p, L), fd, rtol=1e-5)


def test_curve_r2_golden():
    a = np.array([1, 3, 2, 4, 6, 8.0])
    pred = np.array([2, 2, 3, 3, 7, 7.0])
    bins = np.array([0, 0, 1, 1, 2, 2])
    obs = np.array([2, 3, 7.0])
    assert T.curve_r2(a, pred, bins) == pytest.approx(1.0)
    pred2 = pred + np.array([1, 1, 0, 0, 0, 0])
    ss = ((obs - obs.mean()) ** 2).sum()
    assert T.curve_r2(a, pred2, bins) == pytest.approx(1 - 1.0 / ss)


def test_parse_spec():
    assert T.parse_spec("caption,textvqa:docvqa") == (["caption", "textvqa"], ["docvqa"])
    assert T.parse_spec("caption:") == (["caption"], [])
    for bad in ("caption", ":docvqa", "a:a"):
        with pytest.raises(GlanceError):
            T.parse_spec(bad)


def test_same_law_transfers():
    f = _tasks(seed=1)
    res = T.transfer(f, ["caption", "textvqa"], ["docvqa"])
    r = res.to_frame().iloc[0]
    assert r.calibration_lo <= 0 <= r.calibration_hi
    assert r.b1_shift_lo <= 0 <= r.b1_shift_hi
    assert r.wald_p > 0.01
    assert r.efficiency > 0.8 and r.r2_curve > 0.8
    assert 0 <= r.ll_gap < 0.01
    assert r.calibration_slope_lo <= 1 <= r.calibration_slope_hi
    cal = res.calibration().to_frame()
    assert len(cal) == 10 and (cal.observed_lo <= cal.observed_hi).all()


def test_a_steeper_held_out_task_is_detected():
    f = _tasks(b1_test=1.8, seed=4)
    r = T.transfer(f, ["caption", "textvqa"], ["docvqa"]).to_frame().iloc[0]
    assert r.wald_p < 1e-4
    assert r.b1_shift_lo <= 1.0 <= r.b1_shift_hi       # true shift 1.8 - 0.8
    assert r.calibration_hi < 0                          # the frozen law over-predicts
    assert r.ll_gap > 0.01 and r.r2_curve < r.r2_curve_own


def test_empty_test_side_scores_every_other_group_and_errors_are_clear():
    f = _tasks(seed=3, n_prompts=10, rounds=10)
    t = T.transfer(f, ["caption"]).to_frame()
    assert list(t.task) == ["docvqa", "textvqa"]
    with pytest.raises(GlanceError, match="chartqa"):
        T.transfer(f, ["chartqa"], ["docvqa"])
    with pytest.raises(GlanceError, match="not in the logs"):
        T.transfer(f, ["caption"], ["chartqa"])


def test_transfer_across_drafters_sharing_prompts():
    a = simulate_rounds([TaskSpec("docvqa", 1.0, 0.8)], n_prompts=30, rounds_per_prompt=20, seed=4,
                        drafter="block", run_id="a")
    b = simulate_rounds([TaskSpec("docvqa", 1.0, 0.8)], n_prompts=30, rounds_per_prompt=20, seed=5,
                        drafter="pld", run_id="b")
    f = pd.concat([a, b], ignore_index=True)
    for c in ("run_id", "drafter", "task", "prompt_id", "condition"):
        f[c] = f[c].astype(str).astype("category")
    res = T.transfer(f, ["block"], ["pld"], by="drafter")
    r = res.to_frame().iloc[0]
    assert r.drafter == "pld" and r.prompts == 30
    assert r.b1_shift_lo <= 0 <= r.b1_shift_hi
    for fmt in ("text", "markdown", "latex", "html", "json", "csv"):
        assert res.summary(fmt) and res.calibration().summary(fmt)


@pytest.mark.slow
def test_null_coverage_of_transfer_intervals():
    """Training and held-out tasks share the law: calibration-in-the-large and the slope
    shift should cover 0 ~95% of the time and the Wald test reject ~5%."""
    reps = 120
    cc, cs, rej, sl = [], [], [], []
    for i in range(reps):
        f = _tasks(seed=6000 + i, n_prompts=25, rounds=15)
        r = T.transfer(f, ["caption", "textvqa"], ["docvqa"]).to_frame().iloc[0]
        cc.append(r.calibration_lo <= 0 <= r.calibration_hi)
        cs.append(r.b1_shift_lo <= 0 <= r.b1_shift_hi)
        rej.append(r.wald_p < 0.05)
        sl.append(r.calibration_slope_lo <= 1 <= r.calibration_slope_hi)
    c, s, w, q = float(np.mean(cc)), float(np.mean(cs)), float(np.mean(rej)), float(np.mean(sl))
    print(f"transfer null: calibration coverage {c:.3f}, b1-shift coverage {s:.3f}, calibration-slope "
          f"coverage of 1 {q:.3f}, Wald rejection {w:.3f} over {reps}")
    assert 0.88 <= q <= 0.995
    assert 0.88 <= c <= 0.995
    assert 0.88 <= s <= 0.995
    assert w <= 0.12


def test_own_fit_curve_r2_matches_the_law_table():
    from glance_law.law import fit_law

    f = _tasks(seed=8, n_prompts=15, rounds=12)
    r = T.transfer(f, ["caption"], ["docvqa"]).to_frame().iloc[0]
    law = fit_law(f).to_frame().set_index("task")
    assert r.r2_curve_own == pytest.approx(law.loc["docvqa", "r2_curve"], rel=1e-9)
    assert r.b1_own == pytest.approx(law.loc["docvqa", "b1"], rel=1e-6)


# ---------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    from _evidence_fixtures import example_logs

    folder = tmp_path_factory.mktemp("transfer_cli")
    example_logs(folder, n_prompts=8, rounds=12, probe=False)
    return folder


def test_cli_transfer_every_format(example, capsys):
    from _evidence_fixtures import check_cli_formats

    check_cli_formats([example / "*.parquet", "--transfer", "caption,textvqa:docvqa"], capsys, "transfer",
                      [T.TransferResult.title, T.TransferCalibration.title])
    check_cli_formats([example / "*.parquet", "--transfer", "caption:", "--transfer-bins", "4"], capsys,
                      "transfer", [T.TransferResult.title])


def test_cli_transfer_fails_clearly(example, capsys):
    from _evidence_fixtures import check_cli_error

    check_cli_error([example / "*.parquet", "--transfer", "caption"], capsys, "TRAIN:TEST")
    check_cli_error([example / "*.parquet", "--transfer", "chartqa:docvqa"], capsys, "chartqa", "present")
    check_cli_error([example / "*.parquet", "--transfer", "caption:docvqa", "--transfer-by", "target"], capsys,
                    "target")


EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed example log")
def test_cli_transfer_on_the_committed_example_log(capsys):
    import json

    from _evidence_fixtures import run_cli

    rc, out, err = run_cli([EXAMPLE, "--transfer", "caption,textvqa,infovqa:docvqa,chartqa", "--format", "json"],
                           capsys)
    assert rc == 0, err
    rows = json.loads(out)["transfer"][T.TransferResult.title]["rows"]
    assert [r["task"] for r in rows] == ["docvqa", "chartqa"]
    assert all(r["ll_gap"] >= 0 for r in rows)
