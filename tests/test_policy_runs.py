"""Depth policies from accepted runs (glance_law.replay.runs, glance_law.policy.runs): the
sequential replay against a brute-force token walk, Kaplan-Meier against hand-computed values,
the logged schedules reproduced exactly on real Spec-Bench files, recovery of a real gain from
an acceptance-keyed policy, and the held-out bookkeeping."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import glance_law.policy.runs as prun
from glance_law.data.importers.spec_bench import sps_schedule
from glance_law.errors import GlanceError
from glance_law.io import read_logs
from glance_law.policy import (
    AcceptKeyedDepthPolicy,
    FixedPolicy,
    HeuristicDepthPolicy,
    RootStats,
    accept_context,
    load_policy,
    policy_table,
    prepare_for,
    prepare_runs,
    replay_policy,
)
from glance_law.policy import cli as pcli
from glance_law.replay.runs import RunState, replay_depths, run_streams, run_survival

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "spec-bench"
SPS = REAL / "bnukh" / "test_bench__vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl.gz"
MEDUSA = REAL / "bnukh" / "test_bench__vicuna-7b-v1.3-medusa-float16-temperature-0.0.jsonl.gz"
SPS_BIG = REAL / "bnukh" / "spec_bench__vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl.gz"
need_real = pytest.mark.skipif(not SPS.exists(), reason="../shared/realdata not present")


# --------------------------------------------------------------------------- brute force

def brute_replay(stream, acc, hor, ends, choose_one, bound="lower"):
    """Token-by-token walk, one stream at a time, written without the vectorised layout. Upper
    bound: a round that accepted its whole draft continues through the bonus token into the
    next round's run (recursively)."""
    out = []
    for s in range(int(stream.max()) + 1):
        rows = list(np.flatnonzero(stream == s))
        runs, cens = [], []

        def whole(i):                      # run from round i's root under the bound
            c = acc[i] >= hor[i] and not ends[i]
            if bound == "upper" and c:
                return acc[i] + 1 + whole(i + 1)
            return acc[i]
        for i in rows:
            for j in range(acc[i] + 1):
                runs.append(whole(i) - j)
                cens.append(bool(acc[i] >= hor[i] and not ends[i]))
        T = len(runs)
        p, pa, pd_, k = 0, -1, -1, 0
        rounds = tokens = depth = nc = 0
        lower = [r if bound == "lower" else None for r in runs]
        if bound == "upper":                # the censored flag compares with the lower-bound run
            lower = []
            for i in rows:
                lower += [acc[i] - j for j in range(acc[i] + 1)]
        while p < T:
            d = choose_one(pa, pd_, k, p)
            a = min(d, runs[p])
            nc += int(cens[p] and d > lower[p])
            c = min(a + 1, T - p)
            p += c
            rounds, tokens, depth = rounds + 1, tokens + c, depth + d
            pa, pd_, k = a, d, k + 1
        out.append((rounds, tokens, depth, nc))
    return np.array(out)


def random_log(rng, S=7, L=5):
    stream, acc, hor = [], [], []
    for s in range(S):
        for _ in range(rng.integers(1, 12)):
            h = int(rng.integers(1, L + 1))
            stream.append(s)
            hor.append(h)
            acc.append(int(rng.integers(0, h + 1)))
    stream, acc, hor = map(np.array, (stream, acc, hor))
    ends = np.r_[stream[1:] != stream[:-1], True]
    return stream, acc, hor, ends


@pytest.mark.parametrize("seed", range(6))
def test_sequential_replay_matches_a_brute_force_walk(seed):
    rng = np.random.default_rng(seed)
    stream, acc, hor, ends = random_log(rng)
    st = run_streams(stream, acc, hor, ends)

    def rule(pa, pd_, k, p):                       # any causal rule of the state
        return int((3 * max(pa, 0) + 2 * k + p + (pd_ < 0)) % 6)

    def choose(state: RunState):
        return np.array([rule(a, d, k, p) for a, d, k, p in zip(state.prev_accepted, state.prev_depth,
                                                                    state.round_index, state.position)])
    tot = replay_depths(st, choose)
    want = brute_replay(stream, acc, hor, ends, rule)
    got = np.stack([tot.rounds, tot.tokens, tot.depth, tot.censored], 1)
    np.testing.assert_array_equal(got, want)
    up = replay_depths(st, choose, bound="upper")
    np.testing.assert_array_equal(np.stack([up.rounds, up.tokens, up.depth, up.censored], 1),
                                  brute_replay(stream, acc, hor, ends, rule, bound="upper"))
    def three(state):
        return np.full(state.stream.size, 3)
    lo3, hi3 = replay_depths(st, three), replay_depths(st, three, bound="upper")
    assert np.all(hi3.rounds <= lo3.rounds)          # a fixed depth can only gain from longer runs
    # tokens are conserved whatever the policy; the logged depths reproduce the log exactly
    assert tot.tokens.sum() == (acc + 1).sum()
    it = {}

    def logged(state: RunState):
        out = []
        for s in state.stream:
            rows = np.flatnonzero(stream == s)
            out.append(hor[rows[it.get(s, 0)]])
            it[s] = it.get(s, 0) + 1
        return np.array(out)
    tot2 = replay_depths(st, logged)
    np.testing.assert_array_equal(tot2.rounds, np.bincount(stream))
    assert tot2.censored.sum() == 0 and tot2.depth.sum() == hor.sum()


def test_take_relays_out_the_streams():
    rng = np.random.default_rng(3)
    stream, acc, hor, ends = random_log(rng)
    st = run_streams(stream, acc, hor, ends)
    sub = st.take([4, 1])
    full = replay_depths(st, lambda s: np.full(s.stream.size, 2))
    part = replay_depths(sub, lambda s: np.full(s.stream.size, 2))
    np.testing.assert_array_equal(part.tokens, full.tokens[[4, 1]])
    np.testing.assert_array_equal(part.rounds, full.rounds[[4, 1]])


def test_run_streams_refuses_bad_rows():
    with pytest.raises(ValueError):
        run_streams(np.array([0, 0]), np.array([3, 1]), np.array([2, 2]))
    with pytest.raises(ValueError):
        run_streams(np.array([1, 0]), np.array([0, 1]), np.array([2, 2]))


# --------------------------------------------------------------------------- Kaplan-Meier

def test_run_survival_hand_computed():
    # runs 0, 1, 2 observed; 2 and 3 censored (run >= 2, run >= 3)
    S = run_survival(np.array([0, 1, 2, 2, 3]), np.array([0, 0, 0, 1, 1], bool), 4)
    np.testing.assert_allclose(S[:3], [4 / 5, 4 / 5 * 3 / 4, 4 / 5 * 3 / 4 * 1 / 2])
    assert np.isnan(S[3])                           # nobody at risk at t = 3
    # without censoring it is the empirical P(run >= k)
    a = np.random.default_rng(0).integers(0, 6, 500)
    S = run_survival(a, np.zeros(a.size, bool), 5)
    np.testing.assert_allclose(S, [(a >= k).mean() for k in range(1, 6)])


def test_run_survival_recovers_a_geometric_chain_under_censoring():
    rng = np.random.default_rng(1)
    p, n = 0.7, 40000
    run = rng.geometric(1 - p, n) - 1                # P(run >= k) = p^k
    h = rng.integers(1, 8, n)
    a, c = np.minimum(run, h), run >= h
    S = run_survival(a, c, 6)
    np.testing.assert_allclose(S, p ** np.arange(1, 7), atol=0.015)


# --------------------------------------------------------------------------- policies

def test_heuristic_policy_is_hugging_faces_schedule():
    rng = np.random.default_rng(2)
    acc_draws = rng.integers(0, 9, 60)
    sched, _ = sps_schedule(np.zeros(60, np.int64))            # only the first value is used below
    pol = HeuristicDepthPolicy()
    pa, pdp, got, acc = -1, -1, [], []
    for u in acc_draws:
        d = int(pol(RootStats(entropy=np.array([np.nan]), prev_accepted=np.array([pa]),
                              prev_shape=np.array([pdp])))[0])
        a = int(min(u, d))
        got.append(d)
        acc.append(a)
        pa, pdp = a, d
    want, bad = sps_schedule(np.array(acc))
    assert bad == -1 and sched[0] == 5
    np.testing.assert_array_equal(got, want)


def test_accept_context_and_keyed_depths():
    c = accept_context(np.array([-1, 0, 1, 2, 4, 0]), np.array([-1, 4, 4, 4, 4, 0]))
    np.testing.assert_array_equal(c, [0, 1, 2, 3, 4, 0])
    S = ((0.9, 0.5, 0.2), (0.3, 0.1, 0.0), (0.6, 0.3, 0.1), (0.8, 0.6, 0.3), (0.95, 0.9, 0.8))
    pol = AcceptKeyedDepthPolicy(survival=S, threshold=0.5, max_size=3)
    np.testing.assert_array_equal(pol.depths(), [2, 0, 1, 2, 3])
    st = RootStats(entropy=np.full(5, np.nan), prev_accepted=np.array([-1, 0, 1, 2, 4]),
                   prev_shape=np.array([-1, 4, 4, 4, 4]), horizon=np.array([3, 3, 3, 3, 2]))
    np.testing.assert_array_equal(pol(st), [2, 0, 1, 2, 2])       # capped by the horizon
    with pytest.raises(GlanceError):
        pol(RootStats(entropy=np.zeros(1)))


# --------------------------------------------------------------------------- recovery

def sticky_log(seed, prompts=60, rounds=60, L=6, p=(0.92, 0.15), stay=0.92):
    """Logged runs whose acceptance regime persists across rounds: the previous round's acceptance
    tells the decoder which regime it is in, so keying the depth on it must beat a fixed depth."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(prompts):
        z = int(rng.integers(0, 2))
        for r in range(rounds):
            if rng.random() > stay:
                z = 1 - z
            run = rng.geometric(1 - p[z]) - 1
            rows.append({"task": "t", "prompt_id": f"p{g}", "round": r, "accepted": min(run, L), "horizon": L,
                         "drafter": "chain", "condition": "matched"})
    return pd.DataFrame(rows)


def test_acceptance_keyed_policy_recovers_a_held_out_gain():
    frame = sticky_log(0)
    res = policy_table(frame, 2.0, n_boot=200, folds=5)
    t = res.to_frame().set_index(["family", "evaluated_on"])
    row = t.loc[("keyed-accept", "held-out")]
    assert row["gain_lo"] > 2.0, row                # a clear held-out gain over the fixed depth
    assert abs(row["mean_shape"] - 2.0) < 0.5
    fixed = t.loc[("fixed", "no fit")]
    assert abs(fixed["gain"]) < 1e-9 and fixed["mean_shape"] == 2.0


def test_no_gain_is_found_where_acceptance_carries_no_information():
    rng = np.random.default_rng(5)
    frame = sticky_log(1, stay=0.5, p=(0.6, 0.6))
    frame["accepted"] = np.minimum(rng.geometric(0.4, len(frame)) - 1, 6)
    res = policy_table(frame, 2.0, n_boot=200, folds=5)
    row = res.to_frame().set_index(["family", "evaluated_on"]).loc[("keyed-accept", "held-out")]
    assert row["gain_lo"] < 0.5 < row["gain_hi"] + 1.0 and abs(row["gain"]) < 3.0


def test_a_leaky_split_is_never_reported_as_held_out(monkeypatch):
    frame = sticky_log(2, prompts=20, rounds=30)
    honest = policy_table(frame, 2.0, n_boot=0, folds=4)
    assert "held-out" in set(honest.table["evaluated_on"])
    orig = prun.prompt_folds

    def leaky(codes, k, seed=0):
        return [(np.arange(codes.size), te) for _, te in orig(codes, k, seed)]
    monkeypatch.setattr(prun, "prompt_folds", leaky)
    res = policy_table(frame, 2.0, n_boot=0, folds=4)
    assert "held-out" not in set(res.table["evaluated_on"])
    assert pcli._best(res.table) == ("fixed", {})


# --------------------------------------------------------------------------- real logs

@need_real
def test_replaying_the_logged_schedule_reproduces_real_sps_rounds():
    """SpS's horizons follow HF's heuristic schedule: replaying that policy visits exactly the
    logged roots (same rounds, tokens and drafted depths, nothing censored)."""
    logs = read_logs([str(SPS)])
    d = prepare_runs(logs)
    tot = replay_policy(d, HeuristicDepthPolicy(max_size=d.max_depth))
    f = logs.frame
    assert tot.rounds.sum() == len(f) == d.rounds
    assert tot.tokens.sum() == int((f["accepted"].astype(int) + 1).sum())
    assert tot.depth.sum() == int(f["drafted_horizon"].astype(int).sum())
    assert tot.censored.sum() == 0


@need_real
def test_fixed_depth_at_the_tree_depth_reproduces_real_medusa_rounds():
    logs = read_logs([str(MEDUSA)])
    d = prepare_runs(logs)
    assert d.max_depth == 4
    tot = replay_policy(d, FixedPolicy(shape="depth", size=4))
    f = logs.frame
    assert tot.rounds.sum() == len(f)
    assert tot.tokens.sum() == int((f["accepted"].astype(int) + 1).sum())
    # a shallower depth commits fewer tokens per round, and its censored rounds are counted
    t3 = replay_policy(d, FixedPolicy(shape="depth", size=3))
    assert t3.tokens.sum() == tot.tokens.sum() and t3.rounds.sum() > tot.rounds.sum()


@need_real
def test_policy_cli_on_real_spec_bench_logs(tmp_path, capsys):
    out = tmp_path / "policy.json"
    rc = pcli.main([str(SPS), "--budget", "3", "--bootstrap", "20", "--folds", "3", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "keyed-accept" in cap.out and "held-out" in cap.out and "hf-heuristic" in cap.out
    pol, fit = load_policy(out)
    assert pol.shape == "depth" and fit["drafter"] == "sps-68m" and fit["feature"] == "accepted history"
    json.loads(out.read_text())
    # tree budgets need per-offset columns; cost overrides do not apply: one line, exit 2
    for extra in (["--shape", "budget"], ["--node-ms", "0.1"], ["--families", "gated-cumprob"]):
        rc = pcli.main([str(SPS), "--budget", "3", "--bootstrap", "0", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and "error:" in err, (extra, err)


@need_real
def test_prepare_for_picks_the_replay_the_columns_allow():
    d = prepare_for(read_logs([str(MEDUSA)]))
    assert isinstance(d, prun.RunData) and d.drafter == "medusa"


@need_real
def test_round_cost_from_turn_timings_is_recovered_and_refused_when_not_identified():
    """decode_ms simulated from known per-turn, per-round and per-drafted-token costs on a real SpS
    schedule (480 prompts; depths vary) is recovered; Medusa's fixed depth leaves the token cost
    unidentified (no ms columns, a note)."""
    d = prepare_runs(read_logs([str(SPS_BIG)]))
    rng = np.random.default_rng(0)
    G = d.prompts
    turns = np.bincount(d.stream_prompt, minlength=G)
    rounds = np.bincount(d.codes, minlength=G)
    drafted = np.bincount(d.codes, weights=d.horizon, minlength=G)
    P = pd.DataFrame({"task": [k[0] for k in d.keys], "prompt_id": [k[1] for k in d.keys], "drafter": d.drafter,
                      "condition": "matched",
                      "decode_ms": 40.0 * turns + 25.0 * rounds + 1.5 * drafted + rng.normal(0, 50, G)})
    notes: list = []
    cost = prun.run_cost_model(P, d, notes)
    assert cost.identified, notes
    np.testing.assert_allclose([cost.constant, cost.pass_ms], [25.0, 1.5], rtol=0.05)
    big = REAL / "vase" / "vicuna-7b-v1.3-medusa.jsonl.gz"          # 480 prompts, depth always 4
    med = prepare_runs(read_logs([str(big)]))
    Pm = read_logs([str(big)], kind="prompts").frame
    notes = []
    assert not prun.run_cost_model(Pm, med, notes).identified
    assert any("not identified: every round drafts the same depth" in n for n in notes), notes
    res = policy_table(read_logs([str(MEDUSA)]), 3.0, prompts=read_logs([str(MEDUSA)], kind="prompts").frame,
                       n_boot=0, folds=3)
    assert "ms_per_token" not in res.to_frame().columns


@need_real
def test_real_sps_table_reports_modelled_speed():
    logs = read_logs([str(SPS_BIG)])
    P = read_logs([str(SPS_BIG)], kind="prompts").frame
    res = policy_table(logs, 4.0, prompts=P, n_boot=0, folds=3, families=["hf-heuristic"])
    assert res.cost.identified and 5 < res.cost.constant < 200 and 0 < res.cost.pass_ms < res.cost.constant
    t = res.to_frame().set_index("family")
    assert {"ms_per_token", "speedup_best_fixed", "speedup_best_fixed_ifmatch"} <= set(t.columns)
    assert t.loc["fixed", "speedup_best_fixed"] <= 1.0 + 1e-12      # no fixed depth beats the best one
    # the logged schedule's tokens per round are the logged ones (it visits the logged roots)
    f = logs.frame
    assert t.loc["hf-heuristic", "tokens"] == pytest.approx((f["accepted"].astype(int) + 1).sum() / len(f))


# --------------------------------------------------------------------------- edge cases (review findings)

def _frame(rows, **extra):
    f = pd.DataFrame(rows, columns=["prompt_id", "round", "accepted", "horizon"])
    f["task"] = "t"
    f["drafter"] = "chain"
    for k, v in extra.items():
        f[k] = v
    return f


def test_undrafted_rounds_stay_in_their_stream():
    f = _frame([("p", 0, 2, 3), ("p", 1, 0, 0), ("p", 2, 3, 3), ("p", 3, 1, 3)])
    d = prepare_runs(f)
    assert d.streams.length.tolist() == [10] and d.rounds == 4
    assert any("horizon 0" in n for n in d.notes)
    tot = replay_policy(d, FixedPolicy(shape="depth", size=3))
    assert tot.tokens.sum() == 10


def test_round_order_is_checked_and_ends_output_gaps_are_noted():
    with pytest.raises(GlanceError, match="repeat the round index"):
        prepare_runs(_frame([("p", 0, 1, 3), ("p", 0, 2, 3)]))
    f = _frame([("p", 0, 1, 3), ("p", 1, 3, 3), ("p", 2, 0, 3)])
    f["ends_output"] = pd.array([False, None, True], dtype="boolean")
    d = prepare_runs(f)
    assert any("ends_output missing" in n for n in d.notes)
    assert d.streams.censored.any()                   # the middle round was read as not output-ending
    g = _frame([("p", 0, 1, 3), ("p", 1, 2, 3)]).drop(columns="round")
    assert any("file order" in n for n in prepare_runs(g).notes)


def test_user_callables_are_capped_at_the_deepest_depth():
    frame = sticky_log(3, prompts=12, rounds=20)
    res = policy_table(frame, 2.0, n_boot=0, folds=3, families=[], policies={"deep": lambda st: np.full(st.rounds, 50)})
    row = res.to_frame().set_index("family").loc["deep"]
    assert row["mean_shape"] == 6.0


def test_a_target_below_one_token_is_noted_and_compared_from_depth_zero():
    frame = sticky_log(4, prompts=20, rounds=30)
    res = policy_table(frame, 0.3, n_boot=0, folds=4, families=["keyed-accept"])
    t = res.to_frame().set_index(["family", "evaluated_on"])
    row = t.loc[("keyed-accept", "held-out")]
    assert any("exceeds the target" in n for n in res.notes)
    assert 1.0 < row["fixed_tokens"] < t.loc[("fixed", "no fit"), "tokens"]   # between depth 0 and depth 1


def test_round_cost_joins_each_run_with_its_own_timing():
    rng = np.random.default_rng(7)
    rows, prompts = [], []
    for run in ("A", "B"):
        for g in range(60):
            n = int(rng.integers(10, 40))
            h = rng.integers(1, 7, n)
            a = np.minimum(rng.geometric(0.35, n) - 1, h)
            rows += [{"run_id": run, "task": "t", "prompt_id": f"q{g}", "round": r, "accepted": int(a[r]),
                      "horizon": int(h[r]), "drafter": "chain"} for r in range(n)]
            ms = 30.0 + 20.0 * n + 2.0 * h.sum() + rng.normal(0, 0.5)
            untimed = run == "B" and g % 2 == 0
            prompts.append({"run_id": run, "task": "t", "prompt_id": f"q{g}", "drafter": "chain",
                            "decode_ms": np.nan if untimed else ms})
    d = prepare_runs(pd.DataFrame(rows))
    notes: list = []
    cost = prun.run_cost_model(pd.DataFrame(prompts), d, notes)
    assert cost.identified, notes
    np.testing.assert_allclose([cost.constant, cost.pass_ms], [20.0, 2.0], rtol=0.02)
    assert any("missing decode_ms" in n for n in notes)


@need_real
def test_export_record_carries_both_scenarios_and_the_folds_used(tmp_path):
    out = tmp_path / "p.json"
    rc = pcli.main([str(SPS), "--budget", "3", "--bootstrap", "0", "--folds", "9", "--out", str(out)])
    assert rc == 0
    _, fit = load_policy(out)
    h = fit["heldout"]
    assert h.get("folds", 4) == 4                     # 4 prompts: 4 folds ran, not 9
    if "gain" in h:
        assert "gain_ifmatch" in h and "censored" in h and min(h["gain"], h["gain_ifmatch"]) > 0


@need_real
def test_report_policy_section_keeps_targets_apart(tmp_path):
    """Two SpS runs of one draft model on two targets (Vicuna-7B, Qwen2.5-7B): one table per arm,
    named by a safe file stem, each replaying only its own target's rounds."""
    from glance_law.cli.report import main as report_main
    qwen = REAL / "bnukh" / "test_bench__Qwen2.5-7B-Instruct-sps-68m-float16-temp-0.0.jsonl.gz"
    out = tmp_path / "rep"
    rc = report_main([str(SPS), str(qwen), "--only", "policy", "--out", str(out)])
    assert rc == 0
    names = sorted(p.name for p in (out / "tables").glob("policy_heldout-*.csv"))
    assert len(names) == 2 and all(" " not in n and "@" not in n for n in names), names
    rounds = {n: int(pd.read_csv(out / "tables" / n)["rounds"].iloc[0]) for n in names}
    want = {len(read_logs([str(p)]).frame) for p in (SPS, qwen)}
    assert set(rounds.values()) == want


@need_real
def test_drafted_horizon_note_counts_the_selected_drafters_rounds_only():
    """With two drafters in the logs, the note on output-ending rounds replayed at their drafted
    horizon counts the replayed drafter's rounds, re-derived from the raw frame."""
    logs = read_logs([str(SPS), str(MEDUSA)])
    f = logs.frame
    cut = f["drafted_horizon"].notna() & (f["drafted_horizon"] != f["horizon"])
    for name in ("sps-68m", "medusa"):
        d = prepare_runs(logs, drafter=name)
        want = int((cut & (f["drafter"].astype(str) == name)).sum())
        assert 0 < want < int(cut.sum())
        assert any(n.startswith(f"{want} output-ending round(s) replayed at their drafted horizon")
                   for n in d.notes), d.notes


def test_glance_extended_rounds_keep_their_horizon_in_the_replay(tmp_path):
    """A GLANCE round extended past its block (accepted > drafted_horizon) keeps horizon =
    accepted: only horizons cut below the drafted depth are restored (with_drafted_horizons)."""
    from glance_law.data.importers import import_logs
    from glance_law.data.selection import with_drafted_horizons
    rows = [{"task": "docvqa", "prompt": f"doc-{i // 4}", "entropy": 0.3, "accept_len": a, "block_size": 5}
            for i, a in enumerate([4, 2, 7, 1, 0, 4, 3, 9])]
    f = tmp_path / "round_log.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = import_logs(f).rounds
    assert r["extended"].tolist() == [False, False, True, False, False, False, False, True]
    out, restored = with_drafted_horizons(r)
    assert not restored.any() and out["horizon"].tolist() == r["horizon"].tolist()
    d = prepare_runs(r)
    assert d.rounds == len(rows)
    # a cut horizon (below the drafted depth) is restored
    cut = r.assign(horizon=r["horizon"].where(r.index != 1, 2))
    cut.loc[1, "drafted_horizon"] = 4
    out, restored = with_drafted_horizons(cut)
    assert restored.tolist() == [False, True] + [False] * 6 and out["horizon"].tolist()[1] == 4
