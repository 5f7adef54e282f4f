"""The timing ledger: golden speedups, paired bootstrap recovery and null, round-cost regression."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _evidence_fixtures import timing_prompts

from glance_law.errors import MissingColumnError
from glance_law.evidence import timing as T
from glance_law.simulate import TaskSpec, simulate_rounds


def _arms(P):
    return P[P.drafter == "ar"], P[P.drafter != "ar"]


def test_golden_ratio_of_means_wins_and_geomean():
    P = pd.DataFrame([
        dict(task="caption", prompt_id="c0", drafter="ar", decode_ms=100.0, new_tokens=10),
        dict(task="caption", prompt_id="c1", drafter="ar", decode_ms=300.0, new_tokens=10),
        dict(task="caption", prompt_id="c0", drafter="block", decode_ms=50.0, new_tokens=10),
        dict(task="caption", prompt_id="c1", drafter="block", decode_ms=350.0, new_tokens=10),
        dict(task="docvqa", prompt_id="d0", drafter="ar", decode_ms=200.0, new_tokens=20),
        dict(task="docvqa", prompt_id="d0", drafter="block", decode_ms=40.0, new_tokens=8),
    ])
    res = T.timing_ledger(*_arms(P), n_boot=200)
    t = res.to_frame().set_index("task")
    # caption: ms/token ar 10, 30 (mean 20); block 5, 35 (mean 20): speedup 1, one win
    assert t.loc["caption", "speedup"] == pytest.approx(1.0)
    assert t.loc["caption", "wins"] == 1
    assert t.loc["caption", "mean_prompt_ratio"] == pytest.approx((2.0 + 30 / 35) / 2 - 1)
    # docvqa: 10 vs 5 ms/token
    assert t.loc["docvqa", "speedup"] == pytest.approx(2.0)
    assert t.loc["geomean", "speedup"] == pytest.approx(np.sqrt(2.0))
    assert t.loc["geomean", "margin"] == pytest.approx(np.sqrt(2.0) - 1)
    pp = res.prompts()
    assert len(pp) == 3


def test_paired_bootstrap_recovers_a_planted_speedup():
    P = timing_prompts({"caption": 0.85, "docvqa": 1.3}, n_prompts=60, seed=1, noise=0.05)
    t = T.timing_ledger(*_arms(P), n_boot=8000, seed=2).to_frame().set_index("task")
    # block ms/token = ar ms/token / s * exp(eps_b - eps_a): E[ratio of means] = s
    for task, s in (("caption", 0.85), ("docvqa", 1.3)):
        assert t.loc[task, "margin_lo"] <= s - 1 <= t.loc[task, "margin_hi"]
    assert t.loc["docvqa", "wins"] >= 55 and t.loc["caption", "wins"] <= 5
    g = np.sqrt(0.85 * 1.3) - 1
    assert t.loc["geomean", "margin_lo"] <= g <= t.loc["geomean", "margin_hi"]


def test_unpaired_prompts_and_bad_rows_are_noted():
    P = timing_prompts({"docvqa": 1.2}, n_prompts=10, seed=3)
    P = P.drop(index=P.index[(P.drafter == "ar")][:2])
    P.loc[P.index[P.drafter == "block"][5], "new_tokens"] = 0
    res = T.timing_ledger(*_arms(P), n_boot=100)
    assert res.to_frame().iloc[0].prompts == 7
    assert any("without a partner" in n for n in res.notes)
    assert any("no new tokens" in n for n in res.notes)


def test_missing_timing_columns():
    P = timing_prompts({"docvqa": 1.2}, n_prompts=3).drop(columns="decode_ms")
    with pytest.raises(MissingColumnError, match="decode_ms"):
        T.timing_ledger(*_arms(P))
    Q = timing_prompts({"docvqa": 1.2}, n_prompts=3)
    with pytest.raises(MissingColumnError, match="candidate arm"):
        T.timing_ledger(Q[Q.drafter == "ar"], Q[Q.drafter == "ar"])


def _rounds_with_costs(seed=0, per_pass=1.8, per_node=0.04, const=25.0):
    f = simulate_rounds([TaskSpec("caption", 1.0, 0.6)], n_prompts=30, rounds_per_prompt=20, seed=seed)
    rng = np.random.default_rng(seed)
    cfg = rng.integers(0, 5, f["prompt_id"].cat.categories.size)[f["prompt_id"].cat.codes]
    passes = np.array([1, 2, 4, 8, 1])[cfg]
    budget = np.array([15, 15, 31, 63, 63])[cfg]
    f["draft_passes"] = passes.astype(np.int16)
    f["budget"] = budget.astype(np.int16)
    pe = rng.normal(0, 1.0, f["prompt_id"].cat.categories.size)[f["prompt_id"].cat.codes]
    f["round_ms"] = (const + per_pass * passes + per_node * budget + pe + rng.normal(0, 1.5, len(f))).astype(np.float32)
    return f


def test_round_cost_regression_recovers_the_planted_costs():
    f = _rounds_with_costs(seed=4)
    base = f.copy()
    base["horizon"] = 0
    base["drafter"] = "ar"
    base["round_ms"] = np.float32(20.0) + np.random.default_rng(0).normal(0, 0.5, len(base)).astype(np.float32)
    res = T.round_cost(f, baseline_rounds=base, n_boot=500)
    t = res.to_frame().set_index("term")
    assert t.loc["ms_per_draft_pass", "estimate_lo"] <= 1.8 <= t.loc["ms_per_draft_pass", "estimate_hi"]
    assert t.loc["ms_per_tree_node", "estimate_lo"] <= 0.04 <= t.loc["ms_per_tree_node", "estimate_hi"]
    assert t.loc["constant_ms", "estimate_lo"] <= 25.0 <= t.loc["constant_ms", "estimate_hi"]
    c = t.loc["constant_target_forwards"]
    assert c.estimate == pytest.approx(t.loc["constant_ms", "estimate"] / t.loc["target_forward_ms", "estimate"])
    assert c.estimate_lo <= 1.25 <= c.estimate_hi


def test_round_cost_bootstrap_drops_singular_resamples_not_the_interval():
    # the tree budget varies inside one prompt only: every resample without that prompt has a
    # singular design; those replicates are dropped (and counted), the interval survives
    f = _rounds_with_costs(seed=6)
    f["draft_passes"] = np.int16(1)
    f["budget"] = np.int16(63)
    first = f["prompt_id"] == f["prompt_id"].cat.categories[0]
    f.loc[first, "budget"] = np.where(np.arange(int(first.sum())) % 2 == 0, 15, 63).astype(np.int16)
    base = f.copy()
    base["horizon"] = 0
    base["drafter"] = "ar"
    base["round_ms"] = np.float32(20.0)
    res = T.round_cost(f, baseline_rounds=base, n_boot=400)
    c = res.to_frame().set_index("term").loc["constant_target_forwards"]
    assert np.isfinite(c.estimate_lo) and c.estimate_lo <= c.estimate <= c.estimate_hi
    dropped = [n for n in res.notes if "singular design" in n]
    assert len(dropped) == 1
    k = int(dropped[0].split(" of ")[0].split()[-1])
    # P(a resample misses the one prompt) = (1 - 1/G)^G ~ 0.36 with G = 30 prompts (the baseline shares them)
    assert 0.2 * 400 < k < 0.5 * 400


def test_round_cost_drops_terms_that_do_not_vary():
    f = _rounds_with_costs(seed=5)
    f["budget"] = np.int16(63)
    res = T.round_cost(f, n_boot=0)
    assert "ms_per_tree_node" not in set(res.to_frame().term)
    assert any("budget does not vary" in n for n in res.notes)
    assert any("not converted" in n for n in res.notes)
    with pytest.raises(MissingColumnError, match="round_ms"):
        T.round_cost(f.drop(columns="round_ms"))


def test_round_cost_golden_one_regression_per_drafter():
    """Hand-computed: block (1 pass, budget 63 throughout) is a constant-only fit, i.e. the mean
    with the CR1 interval of a mean; pld (0 passes) is exactly 2 + 0.1 * budget. Pooled, the
    drafter would have masqueraded as a draft_passes slope."""
    from scipy import stats

    blk = pd.DataFrame(dict(task="caption", prompt_id=["p0", "p0", "p1", "p2", "p2"], drafter="block",
                            draft_passes=1, budget=63, round_ms=[6.0, 8.0, 7.0, 9.0, 10.0]))
    bud = np.array([1, 4, 2, 8, 5, 10])
    pld = pd.DataFrame(dict(task="caption", prompt_id=["p0", "p0", "p1", "p1", "p2", "p2"], drafter="pld",
                            draft_passes=0, budget=bud, round_ms=2.0 + 0.1 * bud))
    base = pd.DataFrame(dict(task="caption", prompt_id=["p0", "p1", "p2", "p3"], drafter="ar", horizon=0,
                             round_ms=[1.5, 2.5, 2.0, 2.0]))
    res = T.round_cost(pd.concat([blk, pld], ignore_index=True), baseline_rounds=base, n_boot=200)
    t = res.to_frame()
    assert list(t.columns[:2]) == ["drafter", "term"]
    assert "ms_per_draft_pass" not in set(t.term)
    b = t[t.drafter == "block"].set_index("term")
    q = t[t.drafter == "pld"].set_index("term")
    assert list(b.index) == ["constant_ms", "constant_target_forwards", "target_forward_ms"]
    assert list(q.index) == ["constant_ms", "ms_per_tree_node", "constant_target_forwards", "target_forward_ms"]
    # block: mean 8; cluster residual sums -2, -1, 3; CR1 var = G/(G-1) * 14 / N^2 (K = 1)
    se = np.sqrt(3 / 2 * 14 / 25)
    half = stats.t.ppf(0.975, 2) * se
    assert b.loc["constant_ms", "estimate"] == pytest.approx(8.0)
    assert b.loc["constant_ms", "estimate_lo"] == pytest.approx(8.0 - half)
    assert b.loc["constant_ms", "estimate_hi"] == pytest.approx(8.0 + half)
    assert q.loc["constant_ms", "estimate"] == pytest.approx(2.0)
    assert q.loc["ms_per_tree_node", "estimate"] == pytest.approx(0.1)
    assert b.loc["target_forward_ms", "estimate"] == q.loc["target_forward_ms", "estimate"] == pytest.approx(2.0)
    assert b.loc["constant_target_forwards", "estimate"] == pytest.approx(4.0)
    assert q.loc["constant_target_forwards", "estimate"] == pytest.approx(1.0)
    notes = "\n".join(res.notes)
    assert "block: draft_passes does not vary" in notes and "block: budget does not vary" in notes
    assert "pld: draft_passes does not vary" in notes and "pld: budget does not vary" not in notes
    assert "block: OLS over 5 speculative rounds, 3 prompts" in notes
    assert "pld: OLS over 6 speculative rounds, 3 prompts" in notes
    # each drafter's rows (bootstrap included) are what it gives alone
    alone = T.round_cost(pld, baseline_rounds=base, n_boot=200).to_frame()
    assert "drafter" not in alone.columns
    pd.testing.assert_frame_equal(alone, q.reset_index().drop(columns="drafter"))


def test_round_cost_recovers_each_drafters_planted_costs():
    """Two decoders with different costs: each drafter's intervals cover its own truth."""
    blk = _rounds_with_costs(seed=6, per_pass=1.8, per_node=0.04, const=25.0).assign(drafter="block")
    pld = _rounds_with_costs(seed=7, per_pass=0.0, per_node=0.3, const=5.0)
    pld["draft_passes"] = np.int16(0)
    pld["round_ms"] = (5.0 + 0.3 * pld["budget"].to_numpy(float)
                       + np.random.default_rng(8).normal(0, 1.0, len(pld))).astype(np.float32)
    pld = pld.assign(drafter="pld")
    both = pd.concat([blk, pld], ignore_index=True)
    t = T.round_cost(both, n_boot=0).to_frame().set_index(["drafter", "term"])
    for key, truth in ((("block", "ms_per_draft_pass"), 1.8), (("block", "ms_per_tree_node"), 0.04),
                       (("block", "constant_ms"), 25.0), (("pld", "ms_per_tree_node"), 0.3),
                       (("pld", "constant_ms"), 5.0)):
        assert t.loc[key, "estimate_lo"] <= truth <= t.loc[key, "estimate_hi"], key
    assert ("pld", "ms_per_draft_pass") not in t.index


DATA_LOGS = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "logs"


@pytest.mark.skipif(not DATA_LOGS.exists(), reason="no committed logs")
def test_round_cost_on_the_committed_logs_never_pools_drafters(capsys):
    """The auditor's case: block and pld rounds of data/logs. Each drafter's terms are an OLS
    over its own matched speculative rounds (checked against numpy lstsq), never a pooled
    fit whose draft_passes slope is the block-vs-pld difference."""
    import json

    from _evidence_fixtures import run_cli

    rc, out, _ = run_cli([DATA_LOGS, "--timing", str(DATA_LOGS / "*-ar-*"), "--timing-bootstrap", "200",
                          "--format", "json"], capsys)
    assert rc == 0
    rows = json.loads(out)["timing"][T.RoundCostResult.title]["rows"]
    from glance_law.io import read_logs
    f = read_logs(DATA_LOGS, kind="rounds").frame
    f = f[(f.horizon > 0) & (f.condition.astype(str) == "matched") & (f.drafter.astype(str) != "ar")]
    drafters = sorted(set(f.drafter.astype(str)))
    assert len(drafters) >= 2 and {r["drafter"] for r in rows} == set(drafters)
    for d in drafters:
        s = f[f.drafter.astype(str) == d]
        cols = [c for c in ("draft_passes", "budget") if s[c].nunique() > 1]
        X = np.column_stack([np.ones(len(s))] + [s[c].to_numpy(float) for c in cols])
        beta = np.linalg.lstsq(X, s.round_ms.to_numpy(float), rcond=None)[0]
        got = {r["term"]: r["estimate"] for r in rows if r["drafter"] == d}
        names = ["constant_ms"] + [{"draft_passes": "ms_per_draft_pass", "budget": "ms_per_tree_node"}[c]
                                   for c in cols]
        assert set(got) == set(names) | {"constant_target_forwards", "target_forward_ms"}
        for name, b in zip(names, beta):
            assert got[name] == pytest.approx(b, rel=1e-6)
        assert all(got[n] > 0 for n in names)


@pytest.mark.slow
def test_null_coverage_of_the_paired_margin():
    """Both arms cost the same per token: the paired 95% interval should cover 0 ~95%."""
    reps = 100
    cover, gcover = [], []
    for i in range(reps):
        P = timing_prompts({"caption": 1.0, "docvqa": 1.0}, n_prompts=30, seed=7000 + i, noise=0.1)
        t = T.timing_ledger(*_arms(P), n_boot=2000, seed=i).to_frame().set_index("task")
        cover.append(t.loc["caption", "margin_lo"] <= 0 <= t.loc["caption", "margin_hi"])
        gcover.append(t.loc["geomean", "margin_lo"] <= 0 <= t.loc["geomean", "margin_hi"])
    c, g = float(np.mean(cover)), float(np.mean(gcover))
    print(f"timing null: margin coverage {c:.3f}, geomean coverage {g:.3f} over {reps} replicates")
    assert 0.88 <= c <= 0.995 and 0.88 <= g <= 0.995


# ---------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    from _evidence_fixtures import example_logs

    folder = tmp_path_factory.mktemp("timing_cli")
    ex = example_logs(folder, n_prompts=8, rounds=12, probe=False)
    return folder, ex


def test_cli_timing_every_format(example, capsys):
    import json

    from _evidence_fixtures import check_cli_formats, run_cli

    folder, ex = example
    argv = [folder / "*.parquet", "--timing", str(ex["baseline"] / "*.parquet"), "--timing-bootstrap", "500"]
    check_cli_formats(argv, capsys, "timing", [T.TimingResult.title, T.RoundCostResult.title])
    rc, out, _ = run_cli(argv + ["--format", "json"], capsys)
    doc = json.loads(out)["timing"]
    rows = {r["task"]: r for r in doc[T.TimingResult.title]["rows"]}
    assert set(rows) == {"caption", "docvqa", "textvqa", "geomean"}
    terms = {r["term"]: r for r in doc[T.RoundCostResult.title]["rows"]}
    assert terms["ms_per_draft_pass"]["estimate_lo"] <= 2.0 <= terms["ms_per_draft_pass"]["estimate_hi"]
    assert terms["ms_per_tree_node"]["estimate_lo"] <= 0.05 <= terms["ms_per_tree_node"]["estimate_hi"]


def test_cli_timing_fails_clearly(example, capsys, tmp_path):
    from _evidence_fixtures import check_cli_error, check_cli_skipped, write_logs

    folder, ex = example
    check_cli_error([folder / "*.parquet", "--timing", tmp_path / "nothing-*.parquet"], capsys, "matches no files")
    check_cli_skipped([folder / "*.parquet", "--timing", folder / "*.parquet"], capsys, "candidate arm")
    P = ex["prompts"].drop(columns=["decode_ms"])
    write_logs(tmp_path, ex["rounds"], P)
    check_cli_skipped([tmp_path / "*.parquet", "--timing", str(ex["baseline"])], capsys, "decode_ms")


EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed example log")
def test_cli_timing_on_rounds_only_logs_fails_clearly(capsys):
    from _evidence_fixtures import check_cli_error

    check_cli_error([EXAMPLE, "--timing", EXAMPLE], capsys, "prompts")
