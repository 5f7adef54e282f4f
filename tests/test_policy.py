"""Draft policies offline: the shadow price reproduces the global allocation, exact replay,
held-out evaluation that cannot be mislabelled, JSON round trip, the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from glance_law import read_logs
from glance_law.errors import GlanceError
from glance_law.policy import (
    FixedPolicy,
    GatedDepthPolicy,
    KeyedBudgetPolicy,
    KeyedDepthPolicy,
    RootStats,
    evaluate_policies,
    evaluated_on,
    fit_family,
    fit_threshold,
    load_policy,
    policy_from_dict,
    policy_to_dict,
    prepare,
    save_policy,
)
from glance_law.policy import cli as pcli
from glance_law.policy import evaluate as pev
from glance_law.replay import allocate as al
from glance_law.simulate import TaskSpec, simulate_tree_rounds

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "data" / "logs"


@pytest.fixture(scope="module")
def sim():
    task = [TaskSpec("t", b0=1.0, b1=0.8, shape=2.0, scale=0.6, floor_weight=0.1)]
    return simulate_tree_rounds(task, n_prompts=30, rounds_per_prompt=(10, 20), rescue=(-2.0, -2.0), seed=3)


def test_fit_threshold_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        R, U = rng.integers(1, 6), rng.integers(1, 7)
        v = -np.sort(-np.round(rng.random((R, U)), 1), axis=1)        # ties on purpose
        v[rng.random((R, U)) < 0.2] = -np.inf
        v = -np.sort(-v, axis=1)
        target = rng.uniform(0, U)
        t = fit_threshold(v, target)
        mean = (v >= t).sum(axis=1).mean()
        assert mean <= target + 1e-9
        # maximal: every smaller candidate threshold exceeds the target
        cands = np.unique(v[np.isfinite(v)])
        assert all((v >= c).sum(axis=1).mean() > target + 1e-12 for c in cands if c < t)


def test_shadow_price_is_the_global_best_first_allocation(sim):
    """A round taking every envelope segment whose slope clears the fitted price gets exactly
    what global best-first gives it at the same total budget (segments wholly taken)."""
    d = prepare(sim, n_max=63)
    pol, why = fit_family("keyed-rescue", d, 15.0, max_size=63)
    assert not why
    v = pol.unit_values(d.stats)
    n_pol = pol(d.stats)
    assert n_pol.mean() <= 15.0 and n_pol.mean() > 13.0
    # the same envelopes as segments, allocated globally at the policy's total budget
    seg_rows = []
    for r in range(v.shape[0]):
        row = v[r][np.isfinite(v[r])]
        cuts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        seg_rows.append([(int(c), int((np.r_[cuts, row.size])[i + 1] - c), float(row[c])) for i, c in
                         enumerate(cuts)])
    J = max(len(s) for s in seg_rows)
    x0 = np.zeros((len(seg_rows), J), np.int64)
    ln = np.zeros_like(x0)
    sl = np.full(x0.shape, -np.inf)
    for r, s in enumerate(seg_rows):
        for j, (a, b, c) in enumerate(s):
            x0[r, j], ln[r, j], sl[r, j] = a, b, c
    ss = al.SortedSegments.build(al.Segments(x0, ln, sl))
    n_glob = al.allocate(ss, [int(n_pol.sum())])[0]
    assert np.array_equal(n_glob, n_pol)


def test_fixed_replay_matches_the_logged_accepted():
    logs = read_logs(str(LOGS))
    d = prepare(logs, drafter="block", n_max=63)
    f = logs.frame
    f = f[(f["drafter"] == "block") & (f["condition"] == "matched") & (f["horizon"] > 0)]
    assert np.array_equal(d.accepted_at(FixedPolicy(size=63)(d.stats)), f["accepted"].to_numpy(float))
    r = pev.score_policy(d, FixedPolicy(size=63)(d.stats), pev.CostModel(), n_boot=0)
    assert r["tokens"] == pytest.approx(f["accepted"].mean() + 1)


def test_evaluated_on_is_computed_from_the_folds():
    codes = np.repeat(np.arange(6), 3)
    good = pev.prompt_folds(codes, 3)
    assert evaluated_on(good, codes) == "held-out"
    leak = [(np.arange(codes.size), te) for _, te in good]
    assert evaluated_on(leak, codes) == "in-sample"
    assert evaluated_on([(good[0][0], good[0][1])], codes) == "in-sample"       # rounds never scored


def test_a_leaky_split_is_never_reported_as_held_out(sim, monkeypatch, tmp_path):
    """Fit and score on the same prompts (a splitter that leaks): no row, and no export, may call
    the gain held-out."""
    honest = evaluate_policies(sim, 15, n_max=63, n_boot=0, folds=3)
    assert set(honest.table["evaluated_on"]) == {"no fit", "held-out", "in-sample"}

    def leaky(codes, k, seed=0):
        return [(np.arange(codes.size), te) for _, te in _orig_folds(codes, k, seed)]

    monkeypatch.setattr(pev, "prompt_folds", leaky)
    res = evaluate_policies(sim, 15, n_max=63, n_boot=0, folds=3)
    assert "held-out" not in set(res.table["evaluated_on"])
    fam, row = pcli._best(res.table)
    assert fam == "fixed" and row == {}
    # exporting an in-sample row as held-out is refused
    ins = res.table.loc[res.table["evaluated_on"] == "in-sample"].iloc[0].to_dict()
    d = prepare(sim, n_max=63)
    with pytest.raises(GlanceError):
        pcli.export_record(res, ins["family"], ins, 15, ["sim"], d, 3, 0)


_orig_folds = pev.prompt_folds


def test_json_round_trip_and_errors(tmp_path):
    pols = [FixedPolicy(size=7), FixedPolicy(shape="depth", size=3),
            KeyedBudgetPolicy(key="paper", b0=1.0, b1=0.5, threshold=0.1, max_size=31),
            KeyedDepthPolicy(b0=1.0, b1=0.5, threshold=0.2), GatedDepthPolicy(mode="entropy", threshold=-1.5)]
    rng = np.random.default_rng(0)
    lq = np.log(rng.dirichlet(np.ones(10), size=(4, 6)))
    lq = -np.sort(-lq, axis=2)[:, :, :4]
    st = RootStats(entropy=rng.random(4) * 3, topk_logq=lq)
    for p in pols:
        q = policy_from_dict(json.loads(json.dumps(policy_to_dict(p, {"x": 1}))))
        assert type(q) is type(p) and np.array_equal(q(st), p(st))
        save_policy(p, tmp_path / "p.json", {"a": 1})
        q2, fit = load_policy(tmp_path / "p.json")
        assert fit == {"a": 1} and np.array_equal(q2(st), p(st))
    (tmp_path / "bad.json").write_text('{"family": "keyed", "params": {"nope": 1}}')
    with pytest.raises(GlanceError, match="no parameter"):
        load_policy(tmp_path / "bad.json")
    with pytest.raises(GlanceError, match="no such policy"):
        load_policy(tmp_path / "missing.json")


def test_keyed_depth_is_the_chain_survival_rule():
    """Depth = #{j <= horizon : p(H)^j >= price}, brute force."""
    H = np.linspace(0, 4, 9)
    pol = KeyedDepthPolicy(b0=2.0, b1=1.0, threshold=0.3, max_size=10)
    st = RootStats(entropy=H, horizon=np.full(9, 8))
    p = 1 / (1 + np.exp(-(2.0 - H)))
    want = [sum(1 for j in range(1, 9) if pi ** j >= 0.3) for pi in p]
    assert pol(st).tolist() == want


def test_user_callable_is_scored_as_given(sim):
    res = evaluate_policies(sim, 15, n_max=63, n_boot=0, folds=3, families=["keyed-rescue"],
                            policies={"mine": lambda s: np.where(s.entropy > 1.0, 31, 7)})
    row = res.table.set_index("family").loc["mine"]
    assert row["evaluated_on"] == "as given" and row["params"] == "user callable"


def test_rescue_key_beats_paper_key_held_out_when_rescue_rises_with_entropy(sim):
    """Recovery: with r rising with H the paper's key gives width to the wrong rounds (docs/theory-width.md)."""
    res = evaluate_policies(sim, 15, n_max=63, n_boot=0, folds=3, in_sample=False)
    t = res.table.set_index("family")
    assert t.loc["keyed-rescue", "tokens"] > t.loc["keyed-paper", "tokens"]


def test_cli(tmp_path, capsys):
    out = tmp_path / "policy.json"
    assert pcli.main([str(LOGS), "--budget", "15", "--drafter", "block", "--bootstrap", "20", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    pol, fit = load_policy(out)
    assert fit["heldout"]["evaluated_on"] == "held-out" and fit["fitted_on"]["rounds"] > 0
    assert d["family"] in ("keyed", "fixed")
    cm = fit["cost_model"]                       # the cost model and the assumptions it was scored under
    assert {"constant_ms", "node_ms", "host_ms", "policy_passes", "intervals", "assumptions"} <= set(cm)
    assert any("host work" in a for a in cm["assumptions"])
    assert any(a.startswith("cost model:") for a in fit["scored_under"])
    text = capsys.readouterr().out
    assert "held-out" in text and "in-sample" in text
    for argv, msg in (([str(LOGS), "--budget", "15"], "choose one with --drafter"),
                      ([str(tmp_path / "nope"), "--budget", "15"], "no such file"),
                      ([str(LOGS), "--budget", "15", "--drafter", "block", "--folds", "1"], "--folds"),
                      ([str(LOGS), "--budget", "999", "--drafter", "block"], "exceeds")):
        assert pcli.main(argv) == 2
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1


def test_single_round_envelope_equals_the_vectorised_hull(sim):
    """The live (one round at a time) path of the keyed policy gives the same unit values as the
    many-round path built on allocate.hull_segments."""
    d = prepare(sim, n_max=63)
    pol = KeyedBudgetPolicy(key="rescue", b0=1.0, b1=0.8, c0=-2.0, c1=-2.0, threshold=0.02, max_size=63)
    many = pol.unit_values(d.stats.take(np.arange(40)))
    one = np.concatenate([pol.unit_values(d.stats.take([i])) for i in range(40)])
    fin = np.isfinite(many)
    assert np.array_equal(fin, np.isfinite(one))
    assert np.allclose(many[fin], one[fin], rtol=1e-9, atol=1e-12)
