"""Trajectory replay (glance_law.policy.trajectory) on a small simulated dense log where the truth is
known: the replay equals a brute-force walk of the policy over the logged matches (the decoder's own
tree builder, walked node by node); the held-out search on dense logs; the CLI export records it."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from glance_law.errors import GlanceError
from glance_law.policy import (
    FixedPolicy,
    GatedDepthPolicy,
    KeyedBudgetPolicy,
    RootStats,
    apply_policy,
)
from glance_law.policy import cli as pcli
from glance_law.policy.search import policy_table, prepare_for
from glance_law.policy.trajectory import DenseData, evaluate_trajectories, prepare_dense, simulate
from glance_law.replay.tree import build_tree

L, K = 6, 3


def dense_frame(n_prompts=12, seed=0, n_range=(8, 30), skip=0.1):
    """Dense rounds: prompt g has an output of N tokens, a round at every position 0..N-2; at each the
    drafter proposes L offsets with K candidates (rows sorted), the target's token at offset j sits at
    rank target_rank[j] (K: outside the top-k, -1: past the output's end). Some positions propose nothing."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_prompts):
        N = int(rng.integers(*n_range))
        for s in range(N - 1):
            h = rng.uniform(0.1, 3.0)
            hor = 0 if rng.random() < skip else L
            lq = -np.sort(-np.log(rng.dirichlet(np.ones(K + 1), size=hor))[:, :K], axis=1)
            p = 1 / (1 + np.exp(-(2.0 - 1.2 * h)))
            rank = np.where(rng.random(hor) < p, 0, rng.integers(1, K + 1, hor))
            rank[np.arange(1, hor + 1) > N - 1 - s] = -1          # past the end of the output
            rows.append({"run_id": "dense", "task": "t", "prompt_id": f"p{g}", "round": s, "position": s,
                         "condition": "dense", "drafter": "block", "accepted": 0, "horizon": hor, "budget": 0,
                         "draft_passes": 1, "root_entropy": h, "pred_entropy": h,
                         "topk_logq": lq.reshape(-1).astype(np.float32).tolist(),
                         "target_rank": rank.astype(np.int32).tolist()})
    return pd.DataFrame(rows)


def brute_force(frame, policy, shape):
    """Walk each prompt's output as a decoder: at root s ask the policy (one round's RootStats), build the
    tree (build_tree; a chain for depth), then follow the target's tokens through it node by node.
    Returns {prompt_id: [(position, shape, accepted), ...]}."""
    out = {}
    for pid, f in frame.groupby("prompt_id", sort=False):
        f = f.set_index("position")
        N = int(f.index.max()) + 2
        s, prev, runs = 0, (-1, -1), []
        while s < N - 1:
            r = f.loc[s]
            hor = int(r["horizon"])
            if hor == 0:
                runs.append((s, 0, 0))
                prev = (0, 0)
                s += 1
                continue
            lq = np.asarray(r["topk_logq"], np.float64).reshape(hor, K)
            rank = np.asarray(r["target_rank"])
            if shape == "depth":
                lq = lq[:, :1]
            stats = RootStats(entropy=np.array([r["pred_entropy"]]), topk_logq=lq[None], horizon=np.array([hor]),
                              position=np.array([float(s)]), prev_accepted=np.array([prev[0]]),
                              prev_shape=np.array([prev[1]]))
            n = int(apply_policy(policy, stats)[0])
            tree = build_tree(lq, n) if n > 0 else None
            a = 0
            if tree is not None:
                ids = np.tile(np.arange(lq.shape[1]), (hor, 1))          # token = its rank in the row
                toks = tree.tokens(ids)
                kids = tree.children()
                cur = -1
                while a < hor:
                    want = rank[a]
                    nxt = next((c for c in kids[cur + 1] if want >= 0 and int(toks[c]) == want), None)
                    if nxt is None:
                        break
                    a, cur = a + 1, nxt
                n = tree.size
            a = min(a, N - 1 - s)
            runs.append((s, n, a))
            prev = (a, n)
            s += a + 1
        out[pid] = runs
    return out


def as_dict(d: DenseData, tr):
    out = {}
    for g, key in enumerate(d.keys):
        m = tr.prompt == g
        out[key[1]] = list(zip(tr.position[m].tolist(), tr.shape[m].tolist(), tr.accepted[m].tolist()))
    return out


POLS = [("depth", FixedPolicy(shape="depth", size=3)), ("depth", FixedPolicy(shape="depth", size=0)),
        ("depth", GatedDepthPolicy(mode="cumprob", threshold=0.3, max_size=L)),
        ("depth", GatedDepthPolicy(mode="entropy", threshold=-0.9, max_size=L)),
        ("budget", FixedPolicy(size=7)),
        ("budget", KeyedBudgetPolicy(key="paper", b0=2.0, b1=1.2, threshold=0.08, max_size=18))]


@pytest.mark.parametrize("shape,pol", POLS, ids=lambda x: getattr(x, "family", x))
def test_trajectory_equals_brute_force_walk(shape, pol):
    frame = dense_frame()
    d = prepare_dense(frame, shape=shape)
    tr = simulate(d, pol)
    assert as_dict(d, tr) == brute_force(frame, pol, shape)
    assert tr.rounds > 2 * d.prompts                      # many rounds per prompt
    # shapes given per row are the same walk as the policy
    sh = apply_policy(pol, d.rows.stats)
    assert as_dict(d, simulate(d, shapes=sh)) == as_dict(d, tr)


def test_policy_reading_the_history_follows_its_own_trajectory():
    from glance_law.policy import HeuristicDepthPolicy

    frame = dense_frame(seed=4)
    pol = HeuristicDepthPolicy(start=2, up=2, down=1, floor=1, max_size=L)
    d = prepare_dense(frame, shape="depth")
    assert as_dict(d, simulate(d, pol)) == brute_force(frame, pol, "depth")


def test_heldout_search_on_dense_logs_meets_the_target_on_its_own_run():
    frame = dense_frame(n_prompts=40, seed=1, n_range=(20, 50))
    d = prepare_for(frame, shape="depth")
    assert isinstance(d, DenseData)
    res = policy_table(frame, 2.0, data=d, n_boot=50, families=["gated-cumprob", "keyed-depth"])
    t = res.table.set_index(["family", "evaluated_on"])
    assert set(t["replay"]) == {"trajectory"}
    ins = t.loc[("gated-cumprob", "in-sample")]
    assert ins["mean_shape"] <= 2.0 + 1e-9 and ins["mean_shape"] > 1.5     # the run's own mean shape
    # the in-sample mean shape is that of the fitted policy's own simulated run
    tr = simulate(d, res.policies["gated-cumprob"])
    assert np.isclose(tr.shape.mean(), ins["mean_shape"])
    ho = t.loc[("gated-cumprob", "held-out")]
    assert ho["gain_lo"] <= ho["gain"] <= ho["gain_hi"]
    assert 0 <= ho["share_shape0"] <= 1
    # the fixed shape at the policy's mean shape, replayed along its own run: interpolated between the
    # integer shapes' runs
    runs = [simulate(d, FixedPolicy(shape="depth", size=n)) for n in (1, 2, 3)]
    means = [r.shape.mean() for r in runs]
    toks = [(r.accepted + 1).mean() for r in runs]
    assert np.isclose(ins["fixed_tokens"], np.interp(ins["mean_shape"], means, toks))


def test_cli_exports_a_dense_fit_with_its_assumptions(tmp_path, capsys):
    from glance_law.data.io import LogWriter

    frame = dense_frame(n_prompts=30, seed=2, n_range=(15, 40))
    w = LogWriter(tmp_path / "logs", "rounds", run={"run_id": "dense"}, stem="dense")
    w.extend(frame.to_dict("records"))
    w.flush()
    out = tmp_path / "p.json"
    rc = pcli.main([str(tmp_path / "logs"), "--budget", "2", "--shape", "depth", "--bootstrap", "20",
                    "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    fit = json.loads(out.read_text())["fit"]
    assert fit["replay"] == "trajectory"
    assert any("every output position is a root" in a for a in fit["assumptions"])


def test_dense_refusals():
    frame = dense_frame(n_prompts=3)
    with pytest.raises(GlanceError, match="glance-log --dense"):
        prepare_dense(frame.assign(condition="matched"))
    two = pd.concat([frame, frame.assign(run_id="again")])
    with pytest.raises(GlanceError, match="two rounds at one position"):
        prepare_dense(two)
    d = prepare_dense(frame, shape="depth")
    with pytest.raises(GlanceError, match="one of them"):
        simulate(d)
    with pytest.raises(GlanceError, match="must be positive"):
        evaluate_trajectories(frame, 0, data=d)


def test_round_cost_reads_dense_rounds_as_shape_zero_rounds():
    """Dense rounds are measured shape-0 rounds: with matched rounds at one budget they identify the
    cost of a node, and the table then carries modelled speeds along the runs."""
    rng = np.random.default_rng(5)
    dense = dense_frame(n_prompts=20, seed=5, skip=0.0)
    dense["round_ms"] = 5.0 + rng.normal(0, 0.05, len(dense))
    matched = dense.assign(condition="matched", run_id="fixed", budget=4, accepted=0,
                           round_ms=5.0 + 0.5 * 4 + rng.normal(0, 0.05, len(dense)))
    frame = pd.concat([dense, matched], ignore_index=True)
    res = evaluate_trajectories(frame, 2.0, shape="depth", families=["gated-cumprob"], n_boot=0)
    assert res.cost.node_ms == pytest.approx(0.5, abs=0.05)
    row = res.table.set_index(["family", "evaluated_on"]).loc[("fixed", "no fit")]
    assert row["speedup"] == pytest.approx(1.0)
    assert res.cost.first_ms == pytest.approx(0.0, abs=0.1)        # no first-round cost simulated
    # the fixed shape's modelled ms per token: (constant + node x shape) per round, a prompt's first
    # round first_ms more, over its tokens per round
    tr = simulate(prepare_dense(frame, shape="depth"), FixedPolicy(shape="depth", size=2))
    want = (res.cost.constant + 2 * res.cost.node_ms + res.cost.first_ms * (tr.position == 0).mean()) / (
        tr.accepted + 1).mean()
    assert row["ms_per_token"] == pytest.approx(want, rel=1e-6)


def test_modelled_run_cost_counts_tree_and_host_terms():
    """A run's modelled ms: every round pays the constant and its root's drafter passes, a drafted
    round the tree cost and its nodes, a policy's round the host work (fixed runs do not)."""
    from glance_law.policy.cost import CostModel
    from glance_law.policy.trajectory import trajectory_sums

    d = prepare_dense(dense_frame(seed=2), shape="depth")
    pol = GatedDepthPolicy(mode="cumprob", threshold=0.3, max_size=L)
    tr = simulate(d, pol)
    assert (tr.shape == 0).any() and (tr.shape > 0).any()
    c = CostModel(constant=2.0, pass_ms=0.5, node_ms=0.25, tree_ms=1.5, host_ms=0.75)
    fixed, with_host = trajectory_sums(d, tr, c), trajectory_sums(d, tr, c, policy=True)
    passes = np.where(tr.row >= 0, d.passes[np.maximum(tr.row, 0)], 0.0)
    want = np.bincount(tr.prompt, 2.0 + 0.5 * passes + 0.25 * tr.shape + 1.5 * (tr.shape > 0), minlength=d.prompts)
    assert np.allclose(fixed["ms"], want)
    assert np.allclose(with_host["ms"] - fixed["ms"], 0.75 * fixed["rounds"])
    # a turn's first round (the prompt's first root) pays first_ms once, in every arm
    first = trajectory_sums(d, tr, replace(c, first_ms=4.0))
    assert np.allclose(first["ms"] - fixed["ms"], 4.0)


def test_heldout_interval_is_the_jackknife_along_the_policy_run():
    """Held-out rows on dense logs carry the delete-one-prompt jackknife of the whole procedure,
    computed here by brute force on tokens per round: drop a prompt, refit every fold on what is
    left of its training prompts (law and threshold on its own run), walk what is left of its
    held-out prompts, and take the remaining prompts' tokens / rounds."""
    from glance_law.policy.evaluate import prompt_folds
    from glance_law.policy.trajectory import fit_on_trajectory, trajectory_jackknife
    from glance_law.stats.cluster import t_crit

    frame = dense_frame(n_prompts=10, seed=3, n_range=(15, 30))
    d = prepare_for(frame, shape="depth")
    G = d.prompts
    spl = prompt_folds(np.arange(G), 3, 0)
    vals = []
    for g in range(G):
        tok = rnd = 0.0
        for tr, te in spl:
            pol, why = fit_on_trajectory("gated-cumprob", d, tr[tr != g], 2.0, d.rows.n_max)
            assert pol is not None, why
            t = simulate(d, pol, prompts=te[te != g])
            tok, rnd = tok + (t.accepted + 1).sum(), rnd + t.rounds
        vals.append(tok / rnd)
    vals = np.asarray(vals)
    sd = np.sqrt((G - 1) / G * np.sum((vals - vals.mean()) ** 2))
    assert sd > 0
    from glance_law.policy.evaluate import CostModel
    from glance_law.policy.trajectory import _fixed_sums
    F = _fixed_sums(d, CostModel(), 6)
    r = trajectory_jackknife("gated-cumprob", d, spl, 2.0, d.rows.n_max, CostModel(), F, {"tokens": 2.5}, groups=200)
    assert np.isclose(r["tokens_lo"], 2.5 - t_crit(G, 0.95) * sd) and np.isclose(r["tokens_hi"], 2.5 + t_crit(G, 0.95) * sd)
    # the table's held-out rows use it (same groups and folds), the in-sample rows keep the bootstrap
    res = evaluate_trajectories(frame, 2.0, data=d, n_boot=50, families=["gated-cumprob"], folds=3)
    ho = res.table.set_index(["family", "evaluated_on"]).loc[("gated-cumprob", "held-out")]
    assert ho["tokens_lo"] < ho["tokens"] < ho["tokens_hi"]
    assert any("jackknife" in n for n in res.note_lines)
