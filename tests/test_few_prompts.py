"""Intervals that hold with few prompts (issue 35): recovery of known truth by the per-turn tokens per
step, the timing ledger's speedup and the cost model's ms per token, with 5-30 prompts a task.

The fast tests run a few dozen replicates (coarse bands that a percentile bootstrap or an
unstratified pooled row fails); the slow ones are the calibrations quoted in docs/theory-evidence.md
and docs/policy.md (``pytest -m slow tests/test_few_prompts.py -s`` prints the tables)."""
from __future__ import annotations

import numpy as np
import pytest
from _evidence_fixtures import timing_prompts

from glance_law.evidence import timing as T
from glance_law.evidence.turns import turn_tau
from glance_law.simulate import simulate_turns, turn_tau_truth

TASKS = {"writing": 0.0, "math": 1.0, "coding": 1.5}
SPEEDUPS = {"writing": 1.3, "math": 1.8, "coding": 2.2}


def _mc(k: int, n: int) -> str:
    p = k / n
    return f"{100 * p:.1f}% (MC se {100 * np.sqrt(max(p * (1 - p), 0.0025) / n):.1f})"


def turn_coverage(prompts: int, R: int, seed: int = 0) -> dict:
    """Coverage of the 95% intervals of turn_tau over R simulated per-turn answer sets (3 tasks of
    ``prompts`` prompts, 2 turns each): per task (tau, prompt_tau; counted over the tasks) and the
    pooled row (stratified by task)."""
    truth = {t: turn_tau_truth(mu) for t, mu in TASKS.items()}
    pooled_tau = sum(v["tokens"] for v in truth.values()) / sum(v["steps"] for v in truth.values())
    pooled_ptau = float(np.mean([v["prompt_tau"] for v in truth.values()]))
    hits = {"tau": 0, "prompt_tau": 0, "pooled_tau": 0, "pooled_prompt_tau": 0}
    for r in range(R):
        f = turn_tau(simulate_turns(TASKS, n_prompts=prompts, seed=seed + r)).to_frame().set_index("task")
        for t, v in truth.items():
            hits["tau"] += bool(f.loc[t, "tau_lo"] <= v["tau"] <= f.loc[t, "tau_hi"])
            hits["prompt_tau"] += bool(f.loc[t, "prompt_tau_lo"] <= v["prompt_tau"] <= f.loc[t, "prompt_tau_hi"])
        all_ = f.loc["all"] if "all" in f.index else f.iloc[-1]
        hits["pooled_tau"] += bool(all_["tau_lo"] <= pooled_tau <= all_["tau_hi"])
        hits["pooled_prompt_tau"] += bool(all_["prompt_tau_lo"] <= pooled_ptau <= all_["prompt_tau_hi"])
    n = {"tau": 3 * R, "prompt_tau": 3 * R, "pooled_tau": R, "pooled_prompt_tau": R}
    return {k: (hits[k], n[k]) for k in hits}


def timing_coverage(prompts: int, R: int, seed: int = 0, n_boot: int = 2000) -> dict:
    """Coverage of the 95% margin intervals of the timing ledger (3 tasks of ``prompts`` paired
    prompts with known speedups): per task (counted over the tasks), the geomean row, and the pooled
    row of ``by="none"`` (stratified by task)."""
    gm = float(np.exp(np.mean(np.log(list(SPEEDUPS.values())))))
    pooled = len(SPEEDUPS) / sum(1.0 / s for s in SPEEDUPS.values())   # ratio of the pooled means (same base ms)
    hits = {"task": 0, "geomean": 0, "pooled": 0}
    for r in range(R):
        P = timing_prompts(SPEEDUPS, n_prompts=prompts, seed=seed + r, noise=0.1)
        base, cand = P[P.drafter == "ar"], P[P.drafter != "ar"]
        f = T.timing_ledger(base, cand, n_boot=n_boot, seed=r).to_frame().set_index("task")
        for t, s in SPEEDUPS.items():
            hits["task"] += bool(f.loc[t, "margin_lo"] <= s - 1 <= f.loc[t, "margin_hi"])
        hits["geomean"] += bool(f.loc["geomean", "margin_lo"] <= gm - 1 <= f.loc["geomean", "margin_hi"])
        p = T.timing_ledger(base, cand, n_boot=n_boot, seed=r, by="none").to_frame().iloc[0]
        hits["pooled"] += bool(p["margin_lo"] <= pooled - 1 <= p["margin_hi"])
    n = {"task": 3 * R, "geomean": R, "pooled": R}
    return {k: (hits[k], n[k]) for k in hits}


def test_turn_truth_is_the_simulators_limit():
    """The exact truth (renewal recursion) against 3000 simulated prompts a task."""
    P = simulate_turns({"x": 1.0}, n_prompts=3000, seed=3)
    tok = np.concatenate(P["turn_tokens"].to_numpy())
    st = np.concatenate(P["turn_rounds"].to_numpy())
    v = turn_tau_truth(1.0)
    assert tok.sum() / st.sum() == pytest.approx(v["tau"], rel=0.01)
    assert tok.mean() == pytest.approx(v["tokens"], rel=0.01) and st.mean() == pytest.approx(v["steps"], rel=0.02)
    assert v["prompt_tau"] > v["tau"] + 0.1          # long answers (many steps) accept less: informative sizes


def test_pooled_turn_tau_is_stratified_by_task():
    """The pooled row's intervals treat the tasks as fixed strata: narrower than the unstratified
    interval when tasks differ, and no wider than needed (they cover at 5 prompts a task)."""
    res = turn_tau(simulate_turns(TASKS, n_prompts=5, seed=1))
    f = res.to_frame().set_index("task")
    pooled = f.iloc[-1]
    assert pooled["prompts"] == 15 and any("stratified by task" in n for n in res.notes)
    # an unstratified interval: the tasks' tau differ by 1.5 tokens a step, so it is far wider
    from glance_law.evidence.turns import ratio_tau

    T = res.turns()
    codes = np.unique(T["prompt_id"], return_inverse=True)[1]
    un = ratio_tau(T["new_tokens"].to_numpy(), T["rounds"].to_numpy(), codes, 15)
    assert un["tau"] == pytest.approx(pooled["tau"]) and un["prompt_tau"] == pytest.approx(pooled["prompt_tau"])
    assert (pooled["prompt_tau_hi"] - pooled["prompt_tau_lo"]) < 0.8 * (un["prompt_tau_hi"] - un["prompt_tau_lo"])
    assert (pooled["tau_hi"] - pooled["tau_lo"]) < (un["tau_hi"] - un["tau_lo"])


def test_turn_tau_covers_with_five_prompts_quick():
    c = turn_coverage(5, 40, seed=100)
    assert c["tau"][0] / c["tau"][1] >= 0.88, c
    assert c["pooled_tau"][0] / c["pooled_tau"][1] <= 1.0 and c["pooled_prompt_tau"][0] >= 34, c


def test_timing_margin_covers_with_five_prompts_quick():
    """With 5 prompts a task the plain percentile bootstrap covered 76-82%; studentized it holds."""
    c = timing_coverage(5, 30, seed=200, n_boot=1000)
    assert c["task"][0] / c["task"][1] >= 0.87, c


@pytest.mark.slow
@pytest.mark.parametrize("prompts", [5, 10, 30])
def test_turn_tau_coverage(prompts):
    c = turn_coverage(prompts, 400, seed=10_000 * prompts)
    print(f"\nper-turn tau, {prompts} prompts a task, 400 replicates: "
          + ", ".join(f"{k} {_mc(*v)}" for k, v in c.items()))
    for k, (h, n) in c.items():
        assert 0.925 <= h / n <= 0.975 if n > 400 else 0.92 <= h / n <= 0.98, (k, h / n)


@pytest.mark.slow
@pytest.mark.parametrize("prompts", [5, 10, 30])
def test_timing_margin_coverage(prompts):
    c = timing_coverage(prompts, 300, seed=20_000 * prompts, n_boot=1000)
    print(f"\ntiming margin, {prompts} prompts a task, 300 replicates: "
          + ", ".join(f"{k} {_mc(*v)}" for k, v in c.items()))
    for k, (h, n) in c.items():
        assert 0.925 <= h / n <= 0.975 if n > 400 else 0.92 <= h / n <= 0.98, (k, h / n)


# --------------------------------------------------------------------------- informative prompt sizes (the law)

def answers_to_a_length(seed: int, n_prompts: int = 30, tokens: int = 150, logit_sd: float = 1.0):
    """Rounds of prompts that each decode an answer of ``tokens`` tokens (a prompt stops once it has
    them), acceptance varying by prompt (a logit random effect): prompts that accept more take fewer
    rounds - informative prompt sizes."""
    import glance_law as gl
    from glance_law.simulate import TaskSpec

    df = gl.simulate_rounds([TaskSpec("qa", b0=1.5, b1=0.8)], n_prompts=n_prompts, rounds_per_prompt=tokens,
                            prompt_effect="logit", logit_sd=logit_sd, seed=seed, vectors=False)
    done = df.groupby("prompt_id", observed=True)["accepted"].transform(lambda s: (s + 1).cumsum() - s - 1)
    return df.loc[done < tokens].reset_index(drop=True)


def test_informative_prompt_sizes_are_detected_and_the_prompt_weighted_fit_shown():
    import glance_law as gl

    f = answers_to_a_length(1)
    law = gl.fit_law(f, by="task")
    line = [n for n in law.notes if n.startswith("qa: informative prompt sizes")]
    assert len(line) == 1 and "fall with" in line[0] and "differ beyond their intervals" in line[0], law.notes
    prompt = gl.fit_law(f, by="task", weighting="prompt").to_frame().set_index("task").loc["qa"]
    assert f"b0 = {prompt['b0']:.3f}" in line[0] and f"b1 = {prompt['b1']:.3f}" in line[0]
    row = law.to_frame().set_index("task").loc["qa"]
    assert f"b0 = {row['b0']:.3f} [{row['b0_lo']:.3f}, {row['b0_hi']:.3f}]" in line[0]
    # the prompt-weighted fit says nothing about itself; equal rounds per prompt: nothing to detect
    assert not any("informative" in n for n in gl.fit_law(f, by="task", weighting="prompt").notes)
    even = gl.simulate_rounds(seed=2, n_prompts=20, rounds_per_prompt=30)
    assert not any("informative" in n for n in gl.fit_law(even, by="task").notes)


def test_informative_size_test_is_spearman_over_prompts():
    from scipy import stats

    from glance_law.law.group import informative_size_test

    rng = np.random.default_rng(0)
    n = rng.integers(5, 60, 15)
    cl = np.repeat(np.arange(15), n)
    a = rng.integers(0, 6, cl.size).astype(float)
    rho, p, g = informative_size_test(a, cl, 15)
    ref = stats.spearmanr(n, np.bincount(cl, a) / n)
    assert g == 15 and rho == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)
    assert np.isnan(informative_size_test(a, np.repeat(np.arange(15), 1)[:15], 15)[0])   # equal sizes


def ics_rates(R: int, seed: int = 0, n_prompts: int = 30) -> dict:
    """Detection rate of the informative-size check (prompt-level Spearman at 0.05) on answers that stop
    at a length (informative), and its false-alarm rate when the rounds a prompt takes are drawn
    independently of its acceptance (same prompt effect, 20-60 rounds)."""
    import glance_law as gl
    from glance_law.law.group import informative_size_test
    from glance_law.simulate import TaskSpec

    hit = alarm = 0
    for r in range(R):
        f = answers_to_a_length(seed + r, n_prompts=n_prompts)
        cl = f["prompt_id"].cat.codes.to_numpy()
        hit += informative_size_test(f["accepted"].to_numpy(float), cl, int(cl.max()) + 1)[1] < 0.05
        g = gl.simulate_rounds([TaskSpec("qa", b0=1.5, b1=0.8)], n_prompts=n_prompts, rounds_per_prompt=(20, 60),
                               prompt_effect="logit", logit_sd=1.0, seed=seed + R + r, vectors=False)
        cl = g["prompt_id"].cat.codes.to_numpy()
        alarm += informative_size_test(g["accepted"].to_numpy(float), cl, int(cl.max()) + 1)[1] < 0.05
    return {"detected": (hit, R), "false_alarm": (alarm, R)}


@pytest.mark.slow
def test_informative_size_check_power_and_false_alarms():
    c = ics_rates(1000, seed=40_000)
    print("\ninformative sizes, 30 prompts, 1000 replicates: "
          + ", ".join(f"{k} {_mc(*v)}" for k, v in c.items()))
    assert c["detected"][0] / c["detected"][1] >= 0.99
    assert 0.03 <= c["false_alarm"][0] / c["false_alarm"][1] <= 0.07


# --------------------------------------------------------------------------- the cost model's ms per token

def cost_coverage(prompts: int, R: int, seed: int = 5000, n_boot: int = 1000) -> list:
    """Coverage of fit_cost's 95% ms-per-token intervals at shapes 0-3 over R simulated calibrations
    (tests/test_policy_cost.py's ``_calibration``: a depth policy and the fixed depth 2 on every
    prompt). The truth at a shape: the noiseless cost of its rounds over the known tokens per round
    1 + s/2 (accepted is uniform on 0..s)."""
    from test_policy_cost import FIRST, HOST, SHAPE_MS, _calibration

    from glance_law.policy.cost import fit_cost

    hits = np.zeros(4, dtype=np.int64)
    for r in range(R):
        logs = _calibration(seed + r, prompts=prompts, per=20)
        f = logs.frame
        p = fit_cost(logs, n_boot=n_boot, seed=r).predictions
        p = p[p["quantity"] == "ms_per_token"].set_index("shape")
        for s in range(4):
            at = f[f["budget"] == s]
            true = float((at["budget"].map(SHAPE_MS) + HOST * (at["run_id"] == "pol") + FIRST * (at["round"] == 0)).mean()
                         / (1 + s / 2))
            hits[s] += bool(p.loc[float(s), "estimate_lo"] <= true <= p.loc[float(s), "estimate_hi"])
    return [(int(h), R) for h in hits]


def test_cost_ms_per_token_covers_with_six_prompts_quick():
    """The plain percentile bootstrap covered 82-89% with six prompts; studentized, 94-98%."""
    c = cost_coverage(6, 40, seed=9000, n_boot=400)
    assert sum(h for h, _ in c) / sum(n for _, n in c) >= 0.89, c


@pytest.mark.slow
@pytest.mark.parametrize("prompts", [6, 8])
def test_cost_ms_per_token_coverage(prompts):
    c = cost_coverage(prompts, 300)
    print(f"\nms per token, {prompts} prompts, 300 replicates, shapes 0-3: " + ", ".join(_mc(*v) for v in c))
    for h, n in c:
        assert 0.92 <= h / n <= (0.99 if prompts == 6 else 0.98), c


# --------------------------------------------------------------------------- the policy search under an exact null

def zero_gain_rounds(seed: int, n_prompts: int = 10, horizon: int = 15):
    """Rounds on which EVERY policy's true gain is exactly zero: each round accepts its whole draft
    (probability c, drawn per prompt from U(0.2, 0.8)) or nothing, so the expected tokens of a round
    at depth s are 1 + c s, linear in s; and every key a policy reads (root statistics, the drafter's
    rows) is shuffled across all rounds, so it is independent of the prompt and of acceptance. Any
    depth rule at a mean depth m then gains exactly 0 over the fixed depth at m (interpolated)."""
    from test_policy_noise import noise_rounds

    f = noise_rounds(seed, n_prompts=n_prompts, b0=1.0)
    rng = np.random.default_rng(seed + 10**6)
    for c in ("root_entropy", "root_margin", "root_pmax", "min_path_margin"):
        f[c] = f[c].to_numpy()[rng.permutation(len(f))]
    codes = f["prompt_id"].astype("category").cat.codes.to_numpy()
    full = rng.random(len(f)) < rng.uniform(0.2, 0.8, codes.max() + 1)[codes]
    H = horizon
    miss = np.r_[0, np.ones(H - 1)].astype(np.int8)
    return f.assign(horizon=H, accepted=np.where(full, H, 0),
                    match=[np.ones(H, np.int8) if x else miss for x in full],
                    target_rank=[np.zeros(H, np.int32) if x else np.r_[3, np.zeros(H - 1)].astype(np.int32) for x in full],
                    target_logq=[np.full(H, -0.1, np.float32) if x else np.r_[-5.0, np.full(H - 1, -0.1)].astype(np.float32)
                                 for x in full],
                    topk_logq=[np.resize(np.asarray(t, np.float32), H * 8) for t in f["topk_logq"]])


def policy_null(prompts: int, R: int, seed: int = 20000, n_boot: int = 100) -> dict:
    """Over R exact-null replicates: each depth family's held-out 95% interval covering 0 (hits,
    evaluated), and the search's export of a keyed family (the CLI's rule, ``cli._best``) by the
    number of families evaluated (keyed-depth is only evaluated when the chain law's slope is
    positive, so a replicate has two or three)."""
    from glance_law.policy import cli as pcli
    from glance_law.policy import evaluate_policies

    cover: dict = {}
    export: dict = {}
    for r in range(R):
        res = evaluate_policies(zero_gain_rounds(seed + r, prompts), 3, shape="depth", folds=5, n_boot=n_boot,
                                in_sample=False, seed=r)
        h = res.heldout()
        for _, row in h.iterrows():
            c = cover.setdefault(str(row["family"]), [0, 0])
            c[0] += bool(row["gain_lo"] <= 0.0 <= row["gain_hi"])
            c[1] += 1
        e = export.setdefault(len(h), [0, 0])
        e[0] += pcli._best(res.table)[0] != "fixed"
        e[1] += 1
    return {"cover": cover, "export": export}


def test_zero_gain_is_exact_in_the_design():
    """The design's premise, checked on a large sample: the tokens per round at depth s are linear
    in s (1 + c s), so the fixed depth at any mean equals every rule with that mean."""
    from glance_law.policy import prepare

    d = prepare(zero_gain_rounds(1, 400), shape="depth")
    tok = d.curve[:, :9].mean(0)
    slope = np.diff(tok)
    assert np.allclose(slope, slope.mean(), atol=0.03), tok


def test_policy_search_under_an_exact_null_quick():
    """A few dozen null replicates with 10 prompts: the keyed families' held-out intervals cover 0
    and the search exports a keyed family rarely (the rule 'export a positive point gain' would
    export about half the time)."""
    c = policy_null(10, 30, seed=30000, n_boot=60)
    hits = sum(v[0] for v in c["cover"].values())
    n = sum(v[1] for v in c["cover"].values())
    exported = sum(v[0] for v in c["export"].values())
    assert hits / n >= 0.88, c
    assert exported <= 3, c


@pytest.mark.slow
@pytest.mark.parametrize("prompts", [10])
def test_policy_search_under_an_exact_null(prompts):
    R = 400
    c = policy_null(prompts, R)
    print(f"\npolicy search, exact null, {prompts} prompts, {R} replicates: coverage of 0 "
          + ", ".join(f"{k} {_mc(*v)}" for k, v in sorted(c["cover"].items()))
          + "; export of a keyed family " + ", ".join(f"with {k} families {_mc(*v)}" for k, v in sorted(c["export"].items())))
    for h, n in c["cover"].values():
        if n >= 100:
            assert 0.93 <= h / n <= 0.98, c
    exported = sum(v[0] for v in c["export"].values())
    assert exported / R <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / R), c


def noise_exported_coverage(prompts: int, R: int, seed: int = 7000) -> tuple[int, int, int, int]:
    """tests/test_policy_noise.py's noise key with ``prompts`` prompts, the truth being the gain of
    the policy the search would export (gated-cumprob fitted on all the replicate's prompts) on
    1,500 other prompts: (covered, truth below the interval, truth above, R)."""
    from test_policy_noise import noise_rounds

    from glance_law.policy import (
        CostModel,
        apply_policy,
        evaluate_policies,
        fit_family,
        prepare,
        score_policy,
    )

    big = prepare(noise_rounds(1, 1500, b0=1.0), shape="depth")
    big = big.take(np.flatnonzero(~big.cut))
    hit = below = above = 0
    for s in range(R):
        f = noise_rounds(seed + s, prompts, b0=1.0)
        h = evaluate_policies(f, 3, shape="depth", families=["gated-cumprob"], folds=5, n_boot=100,
                              in_sample=False, seed=s).heldout().iloc[0]
        d = prepare(f, shape="depth")
        d = d.take(np.flatnonzero(~d.cut))
        pol, why = fit_family("gated-cumprob", d, 3, max_size=d.n_max)
        assert pol is not None, why
        truth = score_policy(big, apply_policy(pol, big.stats), CostModel(), n_boot=0)["gain"]
        hit += bool(h["gain_lo"] <= truth <= h["gain_hi"])
        below += bool(truth < h["gain_lo"])
        above += bool(truth > h["gain_hi"])
    return hit, below, above, R


@pytest.mark.slow
def test_noise_key_covers_the_exported_policys_gain_with_ten_prompts():
    hit, below, above, R = noise_exported_coverage(10, 200)
    print(f"\nnoise key, 10 prompts, {R} replicates: covers the exported policy's gain {_mc(hit, R)} "
          f"(truth below {below}, above {above})")
    assert 0.92 <= hit / R <= 0.98
