"""Task ordering: recovery of ordered means and slopes, prompt-aware tests, nulls."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from glance_law.errors import GlanceError
from glance_law.evidence import order as O
from glance_law.law import truncated_mean
from glance_law.simulate import TaskSpec, simulate_rounds

ORDERED = [TaskSpec("caption", 0.8, 0.46, shape=3.0, scale=0.55, floor_weight=0.03),
           TaskSpec("textvqa", 0.9, 0.58, shape=2.5, scale=0.5, floor_weight=0.08),
           TaskSpec("docvqa", 1.2, 0.95, shape=1.5, scale=0.35, floor_weight=0.25)]


def _twins(seed, n_prompts=30, rounds=20):
    spec = dict(b0=1.0, b1=0.8, shape=2.0, scale=0.45)
    return simulate_rounds([TaskSpec("caption", **spec), TaskSpec("textvqa", **spec)], n_prompts=n_prompts,
                           rounds_per_prompt=rounds, seed=seed, horizon=10, truth=True)


def test_recovers_ordered_tasks_with_intervals_covering_the_truth():
    f = simulate_rounds(ORDERED, n_prompts=50, rounds_per_prompt=30, seed=3, horizon=15, truth=True)
    res = O.task_order(f, ["caption", "textvqa", "docvqa"], n_boot=1000)
    t = res.to_frame().set_index("task")
    for spec in ORDERED:
        sub = f[f.task == spec.name]
        truth = truncated_mean(sub["_p"], sub["horizon"]).mean()   # E[a] given the drawn entropies
        assert t.loc[spec.name, "mean_accepted_lo"] <= truth <= t.loc[spec.name, "mean_accepted_hi"]
        assert t.loc[spec.name, "b1_lo"] <= spec.b1 <= t.loc[spec.name, "b1_hi"]
        assert t.loc[spec.name, "p_full"] == pytest.approx((sub["accepted"] == sub["horizon"]).mean())
    v = res.ordered()
    assert v["means_ordered"] and v["slopes_ordered"] and v["entropy_reversed"]
    assert v["boot_share_ordered"] > 0.9
    gaps = res.gap_table().to_frame()
    assert list(gaps.task) == ["textvqa - caption", "docvqa - textvqa"]
    assert (gaps.gap > 0).all()
    assert gaps.gap_lo.iloc[1] > 0 and gaps.mw_p.iloc[1] < 0.01


def test_mann_whitney_is_on_prompt_means():
    f = _twins(1)
    res = O.task_order(f, ["caption", "textvqa"], n_boot=200)
    g = res.gap_table().to_frame().iloc[0]
    pm = f.groupby(["task", "prompt_id"], observed=True)["accepted"].mean().reset_index()
    x = pm[pm.task == "caption"].accepted.to_numpy()
    y = pm[pm.task == "textvqa"].accepted.to_numpy()
    mw = stats.mannwhitneyu(y, x, alternative="two-sided")
    assert g.mw_u == pytest.approx(mw.statistic)
    assert g.mw_p == pytest.approx(mw.pvalue)
    assert g.superiority == pytest.approx(mw.statistic / (len(x) * len(y)))


def test_gap_bootstrap_resamples_prompts_golden():
    # two tasks of two prompts each: the gap's bootstrap distribution takes only the values
    # reachable by resampling whole prompts, which we enumerate
    rows = []
    for task, vals in (("caption", [[0, 1], [2, 2]]), ("textvqa", [[3, 3], [1, 5]])):
        for i, v in enumerate(vals):
            for r, a in enumerate(v):
                rows.append(dict(run_id="r", task=task, prompt_id=f"{task}{i}", round=r,
                                 root_entropy=0.1 + a * 0.05 + i * 0.01, accepted=a, horizon=8))
    f = pd.DataFrame(rows)
    res = O.task_order(f, ["caption", "textvqa"], n_boot=4000, seed=0)
    g = res.gap_table().to_frame().iloc[0]
    reach = set()
    for c in ([0, 0], [0, 1], [1, 1]):
        for t in ([0, 0], [0, 1], [1, 1]):
            mc = np.mean([np.mean([[0, 1], [2, 2]][k]) for k in c])
            mt = np.mean([np.mean([[3, 3], [1, 5]][k]) for k in t])
            reach.add(round(mt - mc, 9))
    assert round(g.gap_lo, 9) in reach and round(g.gap_hi, 9) in reach
    assert g.gap == pytest.approx(3.0 - 1.25)


def test_missing_and_extra_tasks_are_noted_and_one_task_is_an_error():
    f = _twins(2, n_prompts=8, rounds=5)
    res = O.task_order(f, ["caption", "infovqa", "textvqa"], n_boot=50)
    assert any("infovqa" in n for n in res.notes)
    res2 = O.task_order(f, ["textvqa", "caption"], n_boot=50)
    assert res2.order == ("textvqa", "caption")
    with pytest.raises(GlanceError, match="at least two"):
        O.task_order(f, ["caption", "docvqa"])


def test_renders_every_format():
    res = O.task_order(_twins(3, n_prompts=6, rounds=5), ["caption", "textvqa"], n_boot=50)
    for r in (res, res.gap_table(), res.verdict_table()):
        for fmt in ("text", "markdown", "latex", "html", "json", "csv"):
            assert r.summary(fmt)


@pytest.mark.slow
def test_null_two_identical_tasks():
    """Identical tasks: the gap interval should cover 0 and Mann-Whitney reject ~5%."""
    reps = 120
    cover, reject, cover_slope = [], [], []
    for i in range(reps):
        res = O.task_order(_twins(5000 + i, n_prompts=25, rounds=15), ["caption", "textvqa"], n_boot=1000, seed=i)
        g = res.gap_table().to_frame().iloc[0]
        cover.append(g.gap_lo <= 0 <= g.gap_hi)
        cover_slope.append(g.slope_gap_lo <= 0 <= g.slope_gap_hi)
        reject.append(g.mw_p < 0.05)
    c, r, s = float(np.mean(cover)), float(np.mean(reject)), float(np.mean(cover_slope))
    print(f"order null: gap coverage {c:.3f}, slope-gap coverage {s:.3f}, MW rejection {r:.3f} over {reps}")
    assert 0.88 <= c <= 0.995
    assert 0.88 <= s <= 0.995
    assert r <= 0.11


# ---------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    from _evidence_fixtures import example_logs

    folder = tmp_path_factory.mktemp("order_cli")
    example_logs(folder, n_prompts=8, rounds=12, probe=False)
    return folder


def test_cli_order_every_format(example, capsys):
    import json

    from _evidence_fixtures import check_cli_formats, run_cli

    check_cli_formats([example / "*.parquet", "--order", "--order-bootstrap", "200"], capsys, "order",
                      [O.OrderResult.title, O.OrderGaps.title, O.OrderVerdict.title])
    rc, out, _ = run_cli([example / "*.parquet", "--order", "--task-order", "docvqa,caption", "--format", "json"],
                         capsys)
    doc = json.loads(out)["order"]
    assert [r["task"] for r in doc[O.OrderResult.title]["rows"]] == ["docvqa", "caption"]
    assert doc[O.OrderGaps.title]["rows"][0]["task"] == "caption - docvqa"


def test_cli_order_fails_clearly(example, capsys):
    from _evidence_fixtures import check_cli_error

    check_cli_error([example / "*.parquet", "--order", "--task-order", "caption,chartqa"], capsys, "at least two")
    check_cli_error([example / "*.parquet", "--order", "--task-order", "caption"], capsys, "--task-order")


def test_order_slopes_match_the_law_table():
    from glance_law.law import fit_law

    f = simulate_rounds(ORDERED, n_prompts=20, rounds_per_prompt=15, seed=9)
    t = O.task_order(f, ["caption", "textvqa", "docvqa"], n_boot=0).to_frame().set_index("task")
    law = fit_law(f).to_frame().set_index("task")
    for task in ("caption", "textvqa", "docvqa"):
        for c in ("b1", "b1_lo", "b1_hi", "b0", "mean_accepted", "mean_accepted_lo"):
            assert t.loc[task, c] == pytest.approx(law.loc[task, c], rel=1e-6, abs=1e-9), (task, c)


EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed example log")
def test_cli_order_on_the_committed_example_log(capsys):
    import json

    from _evidence_fixtures import run_cli

    rc, out, err = run_cli([EXAMPLE, "--order", "--order-bootstrap", "500", "--format", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)["order"]
    assert [r["task"] for r in doc[O.OrderResult.title]["rows"]] == list(O.DEFAULT_ORDER)
    assert len(doc[O.OrderGaps.title]["rows"]) == 4


def test_an_arm_with_one_task_gets_no_verdict_and_does_not_borrow_gaps():
    """A drafter present in only one of the ordered tasks keeps its task row, but gets no gap
    and no verdict (not a vacuous 'ordered'), and the other drafter's verdict reads its own
    gaps only."""
    two = simulate_rounds(ORDERED[:2], n_prompts=20, rounds_per_prompt=15, seed=4, horizon=10)
    one = simulate_rounds(ORDERED[:1], n_prompts=20, rounds_per_prompt=15, seed=5, horizon=10)
    one["drafter"] = "solo"
    one["prompt_id"] = one["prompt_id"].astype(str) + "-solo"
    f = pd.concat([two, one], ignore_index=True)
    res = O.task_order(f, ["caption", "textvqa"], n_boot=200)
    rows = res.to_frame()
    assert set(rows.loc[rows.drafter == "solo", "task"]) == {"caption"}
    verdict = res.verdict_table().to_frame()
    assert list(verdict.drafter) == [d for d in verdict.drafter if d != "solo"] and len(verdict) == 1
    assert "solo" not in set(res.gap_table().to_frame().drafter)
    assert any("solo: only task caption" in n and "no order verdict" in n for n in res.notes)
    alone = O.task_order(two, ["caption", "textvqa"], n_boot=200).verdict_table().to_frame()
    cols = ["means_ordered", "gaps_exclude_zero", "kendall_tau_means"]
    assert verdict[cols].to_numpy().tolist() == alone[cols].to_numpy().tolist()
