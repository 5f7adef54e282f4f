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
from glance_law.simulate import TaskSpec, simulate_tree_rounds


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


def _truth(family: str) -> float:
    """The family's gain fitted on a large noise sample and scored on another."""
    a = prepare(noise_rounds(1, 1500), shape="depth")
    b = prepare(noise_rounds(2, 1500), shape="depth")
    a, b = a.take(np.flatnonzero(~a.cut)), b.take(np.flatnonzero(~b.cut))
    pol, why = fit_family(family, a, 3, max_size=a.n_max)
    assert pol is not None, why
    return score_policy(b, apply_policy(pol, b.stats), CostModel(), n_boot=0)["gain"]


@pytest.mark.slow
def test_noise_key_export_rate_and_interval_coverage(tmp_path, capsys):
    n = 100
    exported = sum(_export(tmp_path, 5000 + s, 100)[0] != "fixed" for s in range(n))
    capsys.readouterr()
    assert exported <= 0.05 * n + 2, exported
    truth = _truth("gated-cumprob")
    hits = 0
    for s in range(n):
        res = evaluate_policies(noise_rounds(7000 + s, b0=1.0), 3, shape="depth", families=["gated-cumprob"],
                                folds=5, n_boot=100, in_sample=False, seed=s)
        h = res.heldout().iloc[0]
        hits += h["gain_lo"] <= truth <= h["gain_hi"]
    assert hits / n >= 0.89, hits / n            # nominal 0.95 (measured 0.93 at 120 replicates, docs/policy.md)
