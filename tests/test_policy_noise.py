"""Export only what the held-out evidence supports (issue 25, item 6): with a pure-noise key - the
drafter's probabilities shuffled across rounds, acceptance independent of entropy - the CLI must
export the fixed shape (a keyed policy in at most ~5% of replicates), and the held-out gain
interval must cover the family's true gain near its nominal level."""
from __future__ import annotations

import json

import numpy as np
import pytest

from glance_law.data.io import write_table
from glance_law.policy import (
    CostModel,
    apply_policy,
    evaluate_policies,
    fit_family,
    prepare,
    score_policy,
)
from glance_law.policy import cli as pcli
from glance_law.policy.evaluate import prompt_folds, refit_interval
from glance_law.simulate import TaskSpec, simulate_tree_rounds
from glance_law.stats.cluster import t_crit


def noise_rounds(seed: int, n_prompts: int = 40, b0: float = 4.0):
    """Rounds whose policy keys carry no information: the law's slope is 0 (entropy is noise), the
    rescue does not depend on entropy, and each round's drafter rows come from another round of
    the same horizon (so the drafter's confidence is noise too)."""
    task = [TaskSpec("t", b0=b0, b1=0.0, shape=2.0, scale=0.6, floor_weight=0.1)]
    f = simulate_tree_rounds(task, n_prompts=n_prompts, rounds_per_prompt=(10, 20), rescue=(-2.0, 0.0), seed=seed)
    rng = np.random.default_rng(seed)
    lens = f["topk_logq"].map(len).to_numpy()
    col = f["topk_logq"].to_numpy().copy()
    for L in np.unique(lens):
        i = np.flatnonzero(lens == L)
        col[i] = col[rng.permutation(i)]
    return f.assign(topk_logq=col)


def _export(tmp_path, seed: int, boot: int) -> tuple[str, dict, list]:
    """The CLI's export on one noise replicate: (family, held-out record, held-out point gains)."""
    logs = tmp_path / f"r{seed}.parquet"
    write_table(noise_rounds(seed), logs)
    out = tmp_path / f"p{seed}.json"
    argv = [str(logs), "--budget", "3", "--shape", "depth", "--bootstrap", str(boot), "--seed", str(seed),
            "--format", "csv", "--out", str(out)]
    assert pcli.main(argv) == 0
    d = json.loads(out.read_text())
    return d["family"], d["fit"]["heldout"], []


def test_noise_key_exports_the_fixed_shape(tmp_path, capsys):
    """Few replicates: at most one exports a keyed policy (a 95% interval excludes a zero gain by
    chance), while several show a positive held-out point gain - each of which the old rule
    (export on a positive point gain) would have exported."""
    exported = positive = 0
    for seed in range(8):
        fam, held, _ = _export(tmp_path, 3000 + seed, 60)
        rows = [r.split(",") for r in capsys.readouterr().out.splitlines()]
        g, ev = rows[0].index("gain"), rows[0].index("evaluated_on")
        positive += any(r[ev] == "held-out" and r[g] not in ("", "nan") and float(r[g]) > 0 for r in rows[1:])
        if fam == "fixed":
            assert "excluded zero" in held["note"]
        else:
            exported += 1
            assert held["gain_lo"] > 0            # exported only on an interval that excludes zero
    assert exported <= 1 and positive >= 3, (exported, positive)


def test_heldout_interval_is_the_jackknife_of_the_fold_procedure():
    """With at most ``groups`` prompts the interval is the delete-one-prompt jackknife of the whole
    held-out procedure, computed here by brute force (drop a prompt, refit every fold on what is
    left of its training prompts, score what is left of its held-out prompts); with fewer groups
    than prompts it leaves out groups and is a different, still finite, interval."""
    d = prepare(noise_rounds(11, n_prompts=12, b0=1.0), shape="depth")
    d = d.take(np.flatnonzero(~d.cut))
    G = int(d.codes.max()) + 1
    spl = prompt_folds(d.codes, 3, 0)
    fold = np.zeros(d.rounds, np.int64)
    for k, (_, te) in enumerate(spl):
        fold[te] = k
    gains = []
    for g in range(G):
        shapes = np.zeros(d.rounds, np.int64)
        for k in range(3):
            pol, why = fit_family("gated-cumprob", d.take(np.flatnonzero((d.codes != g) & (fold != k))), 3)
            assert pol is not None, why
            te = np.flatnonzero((d.codes != g) & (fold == k))
            shapes[te] = apply_policy(pol, d.stats.take(te))
        keep = np.flatnonzero(d.codes != g)
        gains.append(score_policy(d.take(keep), shapes[keep], CostModel(), n_boot=0)["gain"])
    gains = np.asarray(gains)
    sd = np.sqrt((G - 1) / G * np.sum((gains - gains.mean()) ** 2))
    point = {"gain": 0.5}
    r = refit_interval(d, "gated-cumprob", 3, d.n_max, spl, CostModel(), point, groups=200)
    assert sd > 0
    assert np.isclose(r["gain_lo"], 0.5 - t_crit(G, 0.95) * sd) and np.isclose(r["gain_hi"], 0.5 + t_crit(G, 0.95) * sd)
    r4 = refit_interval(d, "gated-cumprob", 3, d.n_max, spl, CostModel(), point, groups=4)
    assert np.isfinite(r4["gain_lo"]) and not np.isclose(r4["gain_lo"], r["gain_lo"])


def _truth(family: str, b0: float = 1.0) -> float:
    """The family's gain on noise logs like the replicates' (same ``b0``): fitted on 1,500 prompts and
    scored on three other samples of 1,500 (their mean: Monte Carlo sd ~0.07 points, against
    replicate intervals ~2.7 points wide)."""
    a = prepare(noise_rounds(1, 1500, b0=b0), shape="depth")
    a = a.take(np.flatnonzero(~a.cut))
    pol, why = fit_family(family, a, 3, max_size=a.n_max)
    assert pol is not None, why
    gains = []
    for seed in (2, 3, 4):
        b = prepare(noise_rounds(seed, 1500, b0=b0), shape="depth")
        b = b.take(np.flatnonzero(~b.cut))
        gains.append(score_policy(b, apply_policy(pol, b.stats), CostModel(), n_boot=0)["gain"])
    return float(np.mean(gains))


@pytest.mark.slow
def test_noise_key_export_rate(tmp_path, capsys):
    n = 100
    exported = sum(_export(tmp_path, 5000 + s, 100)[0] != "fixed" for s in range(n))
    capsys.readouterr()
    assert exported <= 0.05 * n + 2, exported


@pytest.mark.slow
def test_noise_key_interval_coverage():
    """The held-out 95% interval (the jackknife of the whole fold procedure; here 40 prompts, so
    delete-one-prompt) covers the family's true gain at its nominal level. With n replicates the
    coverage's standard error at 0.95 is sqrt(0.95 x 0.05 / n) (0.0126 at n = 300), so a method at
    nominal coverage lands above 0.95 - 2 SE = 0.925 with probability ~0.98, while the fits held
    at their estimates (0.87) pass with probability ~0.002; and it is not wider than needed: at
    most 0.95 + 3 SE (an interval too wide over-covers). Measured: 0.943 (docs/policy.md, section 9)."""
    n = 300
    truth = _truth("gated-cumprob", b0=1.0)
    hits = 0
    for s in range(n):
        res = evaluate_policies(noise_rounds(7000 + s, b0=1.0), 3, shape="depth", families=["gated-cumprob"],
                                folds=5, n_boot=100, in_sample=False, seed=s)
        h = res.heldout().iloc[0]
        hits += h["gain_lo"] <= truth <= h["gain_hi"]
    se = np.sqrt(0.95 * 0.05 / n)
    assert 0.95 - 2 * se <= hits / n <= 0.95 + 3 * se, (hits / n, truth)      # measured: docs/policy.md section 9
