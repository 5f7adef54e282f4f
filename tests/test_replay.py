"""Counterfactual replay: A(S_N) for every budget from the logged marginals and the target path.

Golden cases by brute-force enumeration of tiny trees, the simulator's tree-mode logs (whose
`accepted` is computed by building the tree and checking membership), a decoder-style walk of
`build_tree` trees, censoring at unknown offsets, ragged logs, and logs written by glance-log
on a tiny model.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_tree import brute_order, random_logq

from glance_law import replay as RP
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.io import read_logs, write_table
from glance_law.replay.tree import build_tree
from glance_law.simulate import simulate_tree_rounds


def brute_accepted(logq, rank, N):
    """A(S_N) by brute force: the first N nodes of the full sorted enumeration, then the longest
    run of target prefixes inside them (ranks < 0: unknown, stop; >= k or -inf: outside)."""
    L, k = logq.shape
    tree = {(d, c) for _, d, c in brute_order(logq)[:N]}
    code, a = 0, 0
    for j in range(L):
        r = int(rank[j])
        if r < 0 or r >= k or not np.isfinite(logq[j, r]):
            break
        code = code * k + r
        if (j + 1, code) not in tree:
            break
        a += 1
    return a


@pytest.mark.parametrize("seed", range(30))
def test_replay_matches_brute_force_for_every_budget(seed):
    rng = np.random.default_rng(seed)
    L, k, R = int(rng.integers(1, 5)), int(rng.integers(1, 5)), 8
    lq = random_logq(rng, L, k, ties=seed % 3 == 0, inf_frac=0.2 if seed % 4 == 1 else 0.0,
                     round_to=1 if seed % 5 == 2 else None, R=R)
    # target ranks: mostly inside, some outside (>= k), some unknown (-1) tails
    rank = np.where(rng.random((R, L)) < 0.75, rng.integers(0, k, (R, L)), k + rng.integers(0, 3, (R, L)))
    cut = rng.integers(0, L + 2, R)
    rank = np.where(np.arange(L)[None, :] >= cut[:, None], -1, rank)
    n_max = int(rng.integers(1, 50))
    arr = RP.replay_arrays(lq, rank, n_max)
    curve = arr.curve()
    assert curve.shape == (R, n_max + 1)
    for r in range(R):
        for N in range(0, n_max + 1):
            assert curve[r, N] == brute_accepted(lq[r], rank[r], N), (r, N)
    budgets = sorted({1, n_max, int(rng.integers(1, n_max + 1))})
    assert np.array_equal(arr.accepted(budgets), curve[:, budgets])
    assert np.all(np.diff(curve, axis=1) >= 0)                   # nested trees


def test_censoring_flags_rounds_whose_path_reaches_an_unknown_offset():
    lq = np.log(np.array([[[0.6, 0.3], [0.7, 0.2], [0.9, 0.05]]] * 3))
    rank = np.array([[0, 0, -1],          # path known to depth 2, then unknown: censored once placed
                     [0, 1, 5],           # leaves the top-k at offset 3: exact, never censored
                     [-1, -1, -1]])       # nothing known: censored from budget 1
    arr = RP.replay_arrays(lq, rank, 10)
    cur = arr.curve()
    assert list(cur[1]) == [brute_accepted(lq[1], rank[1], N) for N in range(11)]
    pos2 = arr.pos[0, 1]                                       # position of prefix (0, 0)
    assert arr.censor_from[0] == pos2 + 1
    assert not arr.censored(pos2)[0] and arr.censored(pos2 + 1)[0]
    assert arr.censor_from[1] == arr.n_max + 1 and not arr.censored(10)[1]
    assert arr.censor_from[2] == 1 and (cur[2] == 0).all()


def _walk(logq, rank, budget):
    """The live decoder's walk: from the root, follow the child whose choice is the target's rank."""
    tree = build_tree(logq, budget)
    children = tree.children()
    cur, a = -1, 0
    for j in range(logq.shape[0]):
        nxt = [c for c in children[cur + 1] if tree.choice[c] == rank[j]] if rank[j] >= 0 else []
        if not nxt:
            break
        cur, a = nxt[0], a + 1
    return a


@pytest.mark.parametrize("budget,k", [(1, 8), (7, 4), (63, 8), (200, 3)])
def test_simulated_tree_logs_replay_exactly(budget, k):
    f = simulate_tree_rounds(n_prompts=6, rounds_per_prompt=(10, 30), budget=budget, k=k, seed=budget)
    res = RP.replay(f, n_max=max(budget, 255) if budget < 255 else budget)
    assert res.mismatches().size == 0
    assert res.arrays.rounds == len(f)
    assert (f["accepted"] > 0).mean() > 0.3                    # not vacuous
    # the decoder-style walk over build_tree agrees on a sample of rounds
    lq = np.stack(f["topk_logq"].to_numpy()).reshape(len(f), 15, k)
    rk = np.stack(f["target_rank"].to_numpy())
    for i in range(0, len(f), 7):
        assert _walk(lq[i].astype(np.float64), rk[i], budget) == f["accepted"].iloc[i]
    # the shown table: A grows with N and the logged budget is listed
    t = res.to_frame()
    assert budget in set(t["budget"])
    for _, g in t.groupby("task"):
        assert np.all(np.diff(g.sort_values("budget")["accepted"].to_numpy()) >= -1e-12)


def test_end_of_stream_rounds_are_censored_not_dropped():
    f = simulate_tree_rounds(n_prompts=8, rounds_per_prompt=5, budget=15, seed=4)
    res = RP.replay(f, n_max=255)
    last = (f["round"] == 4).to_numpy()
    assert (res.arrays.known[last] <= f["accepted"].to_numpy()[last] + 1).all()
    assert res.arrays.censored(255)[last].any()
    assert not res.arrays.censored(255)[~last].any()
    assert "censored" in " ".join(res.notes)


def test_ragged_logs_padded_and_bad_rounds_counted(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i, (L, k) in enumerate([(3, 2), (5, 4), (2, 1), (4, 4), (0, 4), (3, 2)]):
        lq = random_logq(rng, max(L, 1), k)[0][:L]
        rank = rng.integers(0, k + 1, L)
        rows.append({"run_id": "x", "task": "t", "prompt_id": f"p{i % 2}", "round": i, "root_entropy": 0.5,
                     "accepted": 0, "horizon": L, "budget": 7, "topk_logq": list(lq.reshape(-1)),
                     "target_rank": list(rank)})
    rows[5]["topk_logq"] = rows[5]["topk_logq"][:-1]           # not horizon x k: excluded
    frame = pd.DataFrame(rows)
    for r in rows[:4]:
        L = r["horizon"]
        k = len(r["topk_logq"]) // L
        r["accepted"] = brute_accepted(np.asarray(r["topk_logq"], np.float64).reshape(L, k),
                                       np.asarray(r["target_rank"]), 7)
    frame["accepted"] = [r["accepted"] for r in rows]
    res = RP.replay(frame, n_max=20)                            # the reader would reject row 5
    assert res.arrays.rounds == 4 and res.mismatches().size == 0
    text = " ".join(res.notes)
    assert "1 round(s) with horizon 0" in text and "1 round(s) whose topk_logq length" in text
    assert "different k" in text
    write_table(frame.iloc[:5], tmp_path / "a.parquet")        # the valid rows survive a round trip
    res2 = RP.replay(read_logs(tmp_path), n_max=20)
    assert np.array_equal(res2.arrays.pos, res.arrays.pos) and res2.mismatches().size == 0


def test_missing_columns_name_the_logger_flag():
    f = simulate_tree_rounds(n_prompts=2, rounds_per_prompt=3).drop(columns=["topk_logq"])
    with pytest.raises(MissingColumnError, match="glance-log --drafter"):
        RP.replay(f)
    with pytest.raises(GlanceError, match="N_max"):
        RP.replay_arrays(np.zeros((1, 2, 2)), np.zeros((1, 2), int), 0)
    with pytest.raises(GlanceError, match="budgets"):
        RP.replay_arrays(np.zeros((1, 2, 2)), np.zeros((1, 2), int), 3).accepted([4])


def test_chain_run():
    a, known = RP.chain_run(np.array([[0, 0, 2, 0], [0, 0, 0, -1], [1, 0, 0, 0], [-1, -1, 0, 0]]))
    assert list(a) == [2, 3, 0, 0] and list(known) == [4, 3, 4, 0]


def test_glance_log_output_replays_exactly(tmp_path):
    """glance-log on a tiny model (two-model drafters: a noisy draft and the target itself): the replay at the logged budget
    reproduces the logged accepted length on every round, and smaller budgets never accept more."""
    pytest.importorskip("transformers")
    import json

    from _logger_fixtures import PROMPTS, make_llama, make_perturbed

    from glance_log.cli import main

    tgt = make_llama(tmp_path / "target", seed=0, init=1.0)
    draft = make_perturbed(tmp_path / "draft", tgt)
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "items.jsonl", "w") as fh:
        for i, c in enumerate(["invoice no 1187 total 42.00 tax 3.15", "a cat sits on a red mat"]):
            fh.write(json.dumps({"id": f"p{i}", "prompt": f"{c}\n{PROMPTS[i]}", "context": c}) + "\n")
    runs = [("two_model", draft, "31", "3"), ("two_model", tgt, "7", "8")]
    for i, (drafter, dm, budget, k) in enumerate(runs):
        rc = main(["--task", "docvqa", "--model", str(tgt), "--data", str(data), "--out", str(tmp_path / f"logs{i}"),
                   "--drafter", drafter, "--draft-model", str(dm), "--budget", budget, "--branch-k", k,
                   "--max-new-tokens", "20", "--n", "2", "--quiet"])
        assert rc == 0
        res = RP.replay(read_logs(tmp_path / f"logs{i}"), n_max=64)
        frame = read_logs(tmp_path / f"logs{i}").frame
        assert res.arrays.rounds == len(frame) > 3
        assert res.mismatches().size == 0
        cur = res.arrays.curve()
        assert (cur[:, 1] <= cur[np.arange(len(cur)), frame["budget"].to_numpy()]).all()
        if dm is tgt:                                   # self-drafting: deep acceptance, not vacuous
            assert frame["accepted"].max() >= 2
