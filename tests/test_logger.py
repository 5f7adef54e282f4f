"""The round logger: contract-valid logs, statistics checked against independent
recomputation, per-offset vectors consistent with the tree and `accepted`, the
zero-sync per-round hook, and the glance-log command (errors, resume, baseline,
audit, mismatched probe)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from _logger_fixtures import (  # noqa: E402
    PROMPTS,
    make_block_head,
    make_llama,
    make_perturbed,
    make_qwen2_vl,
    write_jsonl_task,
)

from glance_law import io as gio  # noqa: E402
from glance_law.replay.tree import build_tree  # noqa: E402
from glance_log.cli import main  # noqa: E402
from glance_log.decode import decode  # noqa: E402
from glance_log.drafters import make_drafter  # noqa: E402
from glance_log.models import load_target  # noqa: E402
from glance_log.record import (  # noqa: E402
    RoundLogger,
    audit_fields,
    copy_len,
    device_root_stats,
    encode_reference,
    resolve_offsets,
    softmax_entropy,
    top2,
)

torch.set_num_threads(1)
DEVICE = os.environ.get("GLANCE_TEST_DEVICE", "cpu")     # benchmarks/gpu_check.sh sets cuda
MAX_NEW = 20


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("logger")
    tgt = make_llama(root / "target", seed=0, init=1.0)
    draft = make_perturbed(root / "draft", tgt)
    head = make_block_head(root / "head", tgt, horizon=6)
    data = root / "data"
    data.mkdir()
    ctxs = ["invoice no 1187 total 42.00 tax 3.15", "revenue rising from 10 to 25 million",
            "a cat sits on a red mat", "annual report 2024 for acme corp"]
    with open(data / "items.jsonl", "w") as fh:
        for i, c in enumerate(ctxs):
            fh.write(json.dumps({"id": f"p{i}", "prompt": f"{c}\n{PROMPTS[i % 3]}", "context": c,
                                 "reference": c}) + "\n")
    return {"root": root, "target": tgt, "draft": draft, "head": head, "data": data,
            "t": load_target(tgt, device=DEVICE)}


def _log_one(env, tmp_path, drafter, dm=None, budget=15, k=4, prompt=PROMPTS[0], max_new=MAX_NEW):
    t = env["t"]
    dr = make_drafter(drafter, t, draft_model=dm, branch_k=k)
    lg = RoundLogger(tmp_path, run_id="r", task="docvqa", tokenizer=t.tokenizer, drafter=drafter,
                     reduce_rounds=3)                     # several device batches per prompt
    lg.begin_prompt("p0", [prompt])
    pr = t.encode(prompt)
    res = decode(t, dr, pr, budget=budget, branch_k=k, max_new_tokens=max_new, callbacks=[lg])
    lg.close()
    return pr, res, gio.read_logs(tmp_path).frame, gio.read_logs(tmp_path, kind="prompts").frame


def _replay_accepted(topk, rank, L, k, budget):
    """Brute-force walk of the best-first tree along the target's ranks."""
    tree = build_tree(np.asarray(topk, np.float64).reshape(L, k), budget)
    cur, a = -1, 0
    for j in range(L):
        r = int(rank[j])
        if r < 0 or r >= k:
            break
        nxt = [i for i in range(tree.size) if tree.parent[i] == cur and tree.choice[i] == r and tree.depth[i] == j + 1]
        if not nxt:
            break
        cur, a = nxt[0], a + 1
    return a


@pytest.mark.parametrize("drafter,dmkey,k", [("block", "head", 4), ("two_model", "draft", 4),
                                              ("two_model", "target", 3), ("pld", None, 1)])
def test_offsets_consistent_with_accepted_and_tree(env, tmp_path, drafter, dmkey, k):
    _, res, rounds, prompts = _log_one(env, tmp_path, drafter, env[dmkey] if dmkey else None, k=k)
    assert len(rounds) == res.rounds and prompts["rounds"].iloc[0] == res.rounds
    if dmkey == "target":                     # self-drafting: deep acceptance, the check is not vacuous
        assert rounds["accepted"].max() >= 2
    if dmkey == "draft":                      # a weaker draft: partial acceptance and misses
        assert (rounds["accepted"] > 0).any() and rounds["target_rank"].map(lambda r: (r > 0).any()).any()
    stream = res.resolve_stream
    for _, row in rounds.iterrows():
        L, a = int(row["horizon"]), int(row["accepted"])
        assert len(row["match"]) == L and len(row["target_rank"]) == L and len(row["topk_logq"]) == L * (k if L else 1) \
            or (L == 0 and len(row["topk_logq"]) == 0)
        assert list(row["committed"]) == stream[row["position"] + 1:row["position"] + a + 2]
        if L == 0:
            assert a == 0
            continue
        kk = len(row["topk_logq"]) // L
        assert _replay_accepted(row["topk_logq"], row["target_rank"], L, kk, int(row["budget"])) == a
        rank, match, tlq = row["target_rank"], row["match"], row["target_logq"]
        for j in range(L):
            if match[j] == -1:
                assert rank[j] == -1 and np.isnan(tlq[j])
                assert row["position"] + j + 1 >= len(stream)
                continue
            assert (match[j] == 1) == (rank[j] == 0)
            if rank[j] < kk:
                assert tlq[j] == pytest.approx(row["topk_logq"][j * kk + rank[j]])
            elif np.isfinite(tlq[j]):
                assert tlq[j] <= row["topk_logq"][j * kk + kk - 1] + 1e-6
        # offsets up to a+1 are verified (a+1 holds the bonus token; a round that accepted the
        # end-of-sequence token or reached max_new_tokens commits no bonus and stops at a):
        # with full drafter rows they are always resolved exactly
        seen = a + 1 if len(row["committed"]) == a + 1 else a
        assert len(row["committed"]) in (a, a + 1)
        if len(row["committed"]) == a:
            assert row["committed"][-1] in set(env["t"].eos_ids) or row["position"] + 1 + a >= MAX_NEW
        if drafter != "pld":
            assert np.all(np.isfinite(tlq[:min(seen, L)]))
        else:
            assert all(v in (0.0, -np.inf) for v in tlq[:min(seen, L)])


@pytest.mark.parametrize("drafter,dmkey,k,budget", [("block", "head", 4, 15), ("two_model", "draft", 3, 63),
                                                     ("two_model", "draft", 1, 63), ("pld", None, 1, 15),
                                                     ("block", "head", 8, 1)])
def test_accepted_equals_the_counterfactual_replay(env, tmp_path, drafter, dmkey, k, budget):
    """glance_law.replay at the logged budget reproduces the logged accepted on every round."""
    replay = pytest.importorskip("glance_law.replay")
    _, _, rounds, _ = _log_one(env, tmp_path, drafter, env[dmkey] if dmkey else None, budget=budget, k=k,
                               prompt=PROMPTS[0] + " " + PROMPTS[0])       # repetition gives pld matches
    logq, rank, usable, _ = replay.round_arrays(rounds)
    arr = replay.replay_arrays(logq[usable], rank[usable], n_max=max(budget, 1))
    curve = arr.curve()
    logged_budget = rounds["budget"].to_numpy()[usable]
    got = curve[np.arange(curve.shape[0]), logged_budget]
    assert np.array_equal(got, rounds["accepted"].to_numpy()[usable])
    assert (rounds["accepted"].to_numpy()[~usable] == 0).all()       # rounds without a draft accept nothing


@pytest.mark.parametrize("dmkey,max_new", [("draft", MAX_NEW), ("target", 9), ("target", 14)])
def test_root_statistics_match_an_independent_forward(env, tmp_path, dmkey, max_new):
    """Root statistics and min_path_margin against a plain forward of prompt + output; the
    self-drafting runs accept deep, so their last round ends the output (no bonus token) and
    its min_path_margin covers only the rows that produced its committed tokens."""
    pr, res, rounds, _ = _log_one(env, tmp_path, "two_model", env[dmkey], max_new=max_new)
    t = env["t"]
    seq = pr.prompt_ids + res.resolve_stream
    with torch.no_grad():
        logits = t.model(torch.tensor([seq], device=t.device)).logits[0].float().cpu()
    n0 = len(pr.prompt_ids)
    if dmkey == "target":
        last = rounds.sort_values("round").iloc[-1]
        assert len(last["committed"]) == last["accepted"] >= 1           # the check is not vacuous
    for _, row in rounds.iterrows():
        lg = logits[n0 + row["position"]]                      # the row that predicts offset 1 after the root
        lp = torch.log_softmax(lg, -1)
        h = float(-(lp.exp() * lp).sum())
        top = torch.topk(lg, 2).values
        assert row["root_entropy"] == pytest.approx(h, abs=1e-4)
        assert row["root_margin"] == pytest.approx(float(top[0] - top[1]), abs=1e-4)
        assert row["root_pmax"] == pytest.approx(float(lp.exp().max()), abs=1e-5)
        # the rows whose argmax was committed: root + accepted nodes, less the last accepted
        # node when the round ends the output
        path = logits[n0 + row["position"]: n0 + row["position"] + len(row["committed"])]
        t2 = torch.topk(path, 2, dim=-1).values
        assert row["min_path_margin"] == pytest.approx(float((t2[:, 0] - t2[:, 1]).min()), abs=1e-4)
        assert row["draft_passes"] == 5 and row["round_ms"] >= row["verify_ms"] >= 0


class _RowRecorder:
    """A second callback: float64 copies of each round's root row and predicting row."""

    def __init__(self):
        self.root, self.pred = [], []

    def on_round(self, ev):
        self.root.append(ev.verify_logits[0].double().clone())
        self.pred.append(None if ev.root_logits is None else ev.root_logits.double().clone())

    def on_prompt_end(self, pev):
        pass


def _h64(row):
    lp = torch.log_softmax(row, -1)
    p = lp.exp()
    return float(-torch.where(p > 0, p * lp, 0.0).sum()), float(p.max())


@pytest.mark.parametrize("drafter,dmkey", [("ar", None), ("pld", None), ("two_model", "target")])
def test_logged_entropies_equal_float64_sums_of_the_rows(env, tmp_path, drafter, dmkey):
    """Every round's root_entropy, root_pmax and pred_entropy (the row that predicted the root:
    after a round that accepted nothing the previous root row, whose entropy is reused; a copied
    row otherwise; the prefill's last row in round 0) against float64 sums over the very rows the
    decoder handed the logger, to float tolerance: the one-exponential fp32 pass logs what the
    log-softmax formula gives in float64 (fp32 softmax's own normaliser was 3e-5 off on a
    262k-row vocabulary; tests below check that size)."""
    t = env["t"]
    dr = make_drafter(drafter, t, draft_model=env[dmkey] if dmkey else None, branch_k=4)
    lg = RoundLogger(tmp_path, run_id="r", task="docvqa", tokenizer=t.tokenizer, drafter=drafter, reduce_rounds=3)
    rec = _RowRecorder()
    lg.begin_prompt("p0", [PROMPTS[0]])
    decode(t, dr, t.encode(PROMPTS[0]), budget=15, branch_k=4, max_new_tokens=MAX_NEW, callbacks=[lg, rec])
    lg.close()
    rounds = gio.read_logs(tmp_path).frame.sort_values("round")
    acc = rounds["accepted"].to_numpy()
    assert len(rounds) == len(rec.root) > 3
    if drafter == "two_model":                            # self-drafting: the copied row after accepted runs
        assert (acc[:-1] > 0).any()
    else:                                                 # the reused previous-root row
        assert (acc[:-1] == 0).any()
    for r, (_, row) in enumerate(rounds.iterrows()):
        h, pmax = _h64(rec.root[r])
        assert row["root_entropy"] == pytest.approx(h, rel=2e-6, abs=1e-7)
        assert row["root_pmax"] == pytest.approx(pmax, rel=2e-6, abs=1e-8)
        assert row["pred_entropy"] == pytest.approx(_h64(rec.pred[r])[0], rel=2e-6, abs=1e-7)


def test_softmax_entropy_on_a_gemma_sized_row():
    """A 262,144-token row (Gemma 3's vocabulary), with masked tokens: entropy and the largest
    probability within 1e-6 of float64 (fp32 softmax's normaliser is about 3e-5 off here)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 262_144, generator=g) * 3
    x[1, :1000] = float("-inf")
    x[2] *= 6                                              # a peaked row
    ent, pmax = softmax_entropy(x)
    for i in range(3):
        h, pm = _h64(x[i].double())
        assert float(ent[i]) == pytest.approx(h, rel=1e-6)
        assert float(pmax[i]) == pytest.approx(pm, rel=1e-6)


def test_min_path_margin_golden_for_a_round_that_ends_the_output(tmp_path):
    """A chain of 3 accepted nodes whose last row has the smallest margin (0.2). With a bonus
    token (4 committed) every row produced a committed token; when the round ends the output
    (3 committed) the last accepted node's row produced none and does not count (1.5)."""
    from glance_law.replay.tree import chain_tree
    from glance_log.decode import PromptEvent, RoundEvent, Timer

    gaps = [3.0, 2.0, 1.5, 0.2]
    logits = torch.zeros(4, 8)
    for i, g in enumerate(gaps):                     # row i: argmax token i + 1, runner-up g below
        logits[i, i + 1], logits[i, i + 2] = 5.0, 5.0 - g
    lg = RoundLogger(tmp_path, run_id="g", task="docvqa")
    for pid, n_commit, stop in (("bonus", 4, "eos"), ("ends", 3, "max_new_tokens")):
        committed = [1, 2, 3, 4][:n_commit]
        lg.begin_prompt(pid)
        lg.on_round(RoundEvent(round=0, position=0, root=0, accepted=3, committed=committed, horizon=3, budget=3,
                               tree=chain_tree(3), logq=np.zeros((3, 1), np.float32), ids=np.array([[1], [2], [3]]),
                               draft_passes=0, point_mass=True, verify_logits=logits, path_rows=torch.arange(4),
                               row_tokens=torch.argmax(logits, -1), full_logp=None, marks=(0.0, 0.0, 0.0, 0.0),
                               drafter="pld"))
        lg.on_prompt_end(PromptEvent(prompt_tokens=5, tokens=[0] + committed, resolve_stream=[0] + committed,
                                     rounds=1, stop_reason=stop, prefill_marks=(None, None),
                                     decode_marks=(0.0, 0.0), timer=Timer(torch.device("cpu"))))
    lg.close()
    f = gio.read_logs(tmp_path).frame.set_index("prompt_id")
    assert f.loc["bonus", "min_path_margin"] == pytest.approx(min(gaps))
    assert f.loc["ends", "min_path_margin"] == pytest.approx(min(gaps[:3]))
    assert f.loc["ends", "root_margin"] == pytest.approx(gaps[0])


@pytest.mark.parametrize("V", [262_144, 2 ** 20])
def test_ranks_beyond_int16_end_to_end(tmp_path, V):
    """Gemma 3's 262,144-token vocabulary (and a 2^20 one): exact drafter ranks and token ids past 2^15
    go from the logger through Parquet to the reader unchanged (int16 overflowed: issue 23)."""
    from glance_law.replay.tree import chain_tree
    from glance_log.decode import PromptEvent, RoundEvent, Timer
    from glance_log.drafters import topk_rows

    shift = [V - 7, 3, 11]                    # offset j's drafter row: token shift[j] first, then in id order
    ar = torch.arange(V)
    logits = torch.stack([-((ar - s) % V).float() * 1e-4 for s in shift])
    t1, t2, t3 = V - 7, V - 9, 40_000         # the target's tokens at offsets 1..3
    rank2 = (t2 - shift[1]) % V               # t2's exact rank under offset 2's row
    logp, val, idx = topk_rows(logits, 8)
    verify = torch.randn(4, V)
    lg = RoundLogger(tmp_path, run_id="big", task="docvqa")
    lg.begin_prompt("p")
    lg.on_round(RoundEvent(round=0, position=0, root=0, accepted=1, committed=torch.tensor([t1, t2]), horizon=3,
                           budget=3, tree=chain_tree(3), logq=val, ids=idx, draft_passes=1, point_mass=False,
                           verify_logits=verify, path_rows=torch.arange(2), row_tokens=torch.tensor([t1, t2, 0, 0]),
                           full_logp=logp, marks=(0.0, 0.0, 0.0, 0.0), drafter="two_model"))
    lg.on_prompt_end(PromptEvent(prompt_tokens=5, tokens=[9, t1, t2, t3], resolve_stream=[9, t1, t2, t3],
                                 rounds=1, stop_reason="max_new_tokens", prefill_marks=(None, None),
                                 decode_marks=(0.0, 0.0), timer=Timer(torch.device("cpu"))))
    lg.close()
    row = gio.read_logs(tmp_path).frame.iloc[0]
    assert rank2 > 2 ** 15 and list(row["target_rank"]) == [0, rank2, 8]
    assert np.asarray(row["target_rank"]).dtype == np.int32
    assert list(row["match"]) == [1, 0, 0] and list(row["committed"]) == [t1, t2]
    assert row["target_logq"][1] == pytest.approx(float(logp[1, t2]), abs=1e-5)
    assert list(gio.read_prompts(tmp_path).iloc[0]["tokens"]) == [9, t1, t2, t3]


def test_resolve_offsets_golden():
    ids = np.array([[5, 6], [7, 8], [9, 10]])
    logq = np.array([[-0.1, -2.0], [-0.5, -1.0], [-0.2, -3.0]], np.float32)
    m, r, q = resolve_offsets(ids, logq, [5, 8, 11])
    assert m.tolist() == [1, 0, 0] and r.tolist() == [0, 1, 2]
    assert q[0] == pytest.approx(-0.1) and q[1] == pytest.approx(-1.0) and np.isnan(q[2])
    m, r, q = resolve_offsets(ids, logq, [6, 11, None], full_rank=np.array([1, 7]), full_logq=np.array([-2.0, -9.0]))
    assert m.tolist() == [0, 0, -1] and r.tolist() == [1, 7, -1]
    assert q[1] == pytest.approx(-9.0) and np.isnan(q[2])
    m, r, q = resolve_offsets(np.array([[3], [4]]), np.zeros((2, 1), np.float32), [3, 9], point_mass=True)
    assert r.tolist() == [0, 1] and q[0] == 0.0 and q[1] == -np.inf


def test_copy_len_matches_brute_force():
    rng = np.random.default_rng(0)

    class Tok:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [int(x) for x in text.split()]}

    for _ in range(300):
        ref = rng.integers(0, 6, rng.integers(0, 12)).tolist()
        toks = rng.integers(0, 6, rng.integers(0, 8)).tolist()
        refs = encode_reference(Tok(), " ".join(map(str, ref)))
        brute = 0
        for i in range(len(toks)):
            for j in range(i + 1, len(toks) + 1):
                w = toks[i:j]
                if any(ref[s:s + len(w)] == w for s in range(len(ref) - len(w) + 1)):
                    brute = max(brute, j - i)
        assert copy_len(toks, refs) == brute
    # several texts: a run cannot straddle two of them
    two = encode_reference(Tok(), ["1 2", "3 4"])
    assert copy_len([2, 3], two) == 1 and copy_len([3, 4], two) == 2


def test_audit_fields():
    assert audit_fields([1, 2, 3], [1, 2, 3], [1, 1, 1]) == {"greedy_match": True, "first_divergence": -1,
                                                              "divergence_margin": None}
    f = audit_fields([1, 9, 3], [1, 2, 3], [0.5, 0.01, 2.0])
    assert f["greedy_match"] is False and f["first_divergence"] == 1 and f["divergence_margin"] == 0.01
    assert audit_fields([1, 2], [1, 2, 3], [1, 1, 1])["first_divergence"] == 2


def test_per_round_hook_adds_no_host_device_sync(env, tmp_path, monkeypatch):
    """Count .item/.tolist/.cpu/.numpy/__bool__/__int__/__float__ and cuda.synchronize inside on_round."""
    calls = {"n": 0, "inside": False}

    def counting(orig):
        def f(*a, **kw):
            if calls["inside"]:
                calls["n"] += 1
            return orig(*a, **kw)
        return f

    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, counting(getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch.cuda, "synchronize", counting(torch.cuda.synchronize))
    orig_on_round = RoundLogger.on_round

    def wrapped(self, ev):
        calls["inside"] = True
        try:
            return orig_on_round(self, ev)
        finally:
            calls["inside"] = False

    monkeypatch.setattr(RoundLogger, "on_round", wrapped)
    import glance_log.record as R
    orig_top2 = R.top2

    def top2_uncounted(rows):
        """record.top2 reads CPU rows through numpy (no device to wait for); on an accelerator it is
        torch.topk and every call inside it still counts."""
        if rows.device.type != "cpu":
            return orig_top2(rows)
        was, calls["inside"] = calls["inside"], False
        try:
            return orig_top2(rows)
        finally:
            calls["inside"] = was

    monkeypatch.setattr(R, "top2", top2_uncounted)
    # the counter can fail: a sync inside the flag is seen
    calls["inside"] = True
    torch.ones(1, device=env["t"].device).item()
    calls["inside"] = False
    assert calls["n"] == 1
    calls["n"] = 0
    for drafter, dm in (("block", env["head"]), ("two_model", env["draft"]), ("pld", None), ("ar", None)):
        _, res, rounds, _ = _log_one(env, tmp_path / drafter, drafter, dm)
        assert res.rounds > 0 and len(rounds) == res.rounds
    assert calls["n"] == 0


def _cli(env, tmp_path, *extra):
    return main(["--task", "docvqa", "--model", str(env["target"]), "--data", str(env["data"]),
                 "--out", str(tmp_path / "logs"), "--max-new-tokens", str(MAX_NEW), "--quiet", "--device", DEVICE,
                 *extra])


def test_cli_baseline_audit_probe_and_resume(env, tmp_path, capsys):
    rc = _cli(env, tmp_path, "--drafter", "block", "--draft-model", str(env["head"]), "--budget", "15",
              "--branch-k", "4", "--baseline", "--audit", "--probe", "mismatched", "--n", "3")
    assert rc == 0
    logs = gio.read_logs(tmp_path / "logs")
    rounds = logs.frame
    prompts = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    from transformers import AutoModelForCausalLM

    from glance_law.fano import fano_check, run_vocab_size
    vocab = AutoModelForCausalLM.from_pretrained(env["target"]).get_output_embeddings().weight.shape[0]
    assert run_vocab_size(logs) == vocab                     # the run metadata names the softmax support
    assert fano_check(logs).ok                               # and the logged H/pmax obey Fano for it
    assert set(rounds["drafter"]) == {"block", "ar"}
    assert set(rounds["condition"]) == {"matched", "mismatched"}
    assert prompts.loc[prompts["condition"] == "matched", "greedy_match"].astype(bool).all()
    assert (prompts.loc[prompts["condition"] == "matched", "first_divergence"] == -1).all()
    blk = rounds[rounds["drafter"] == "block"]
    key = ["prompt_id", "round"]
    m = blk[blk["condition"] == "matched"].set_index(key)
    mm = blk[blk["condition"] == "mismatched"].set_index(key)
    assert set(m.index) == set(mm.index)                     # rounds pair up by (prompt_id, round)
    assert (m["position"] == mm.loc[m.index, "position"]).all()
    ar = rounds[rounds["drafter"] == "ar"]
    assert (ar["accepted"] == 0).all() and (ar["horizon"] == 0).all()
    replay = pytest.importorskip("glance_law.replay")          # both conditions replay to their accepted
    logq, rank, usable, _ = replay.round_arrays(blk)
    curve = replay.replay_arrays(logq[usable], rank[usable], n_max=15).curve()
    got = curve[np.arange(curve.shape[0]), blk["budget"].to_numpy()[usable]]
    assert np.array_equal(got, blk["accepted"].to_numpy()[usable])
    n_files = len(list((tmp_path / "logs").glob("*.parquet")))
    # resume: nothing new to do, no new files, no duplicates
    assert _cli(env, tmp_path, "--drafter", "block", "--draft-model", str(env["head"]), "--budget", "15",
                "--branch-k", "4", "--baseline", "--audit", "--probe", "mismatched", "--n", "3") == 0
    assert len(list((tmp_path / "logs").glob("*.parquet"))) == n_files
    # a larger n adds only the new prompt
    assert _cli(env, tmp_path, "--drafter", "block", "--draft-model", str(env["head"]), "--budget", "15",
                "--branch-k", "4", "--n", "4") == 0
    p2 = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    assert (p2[(p2["drafter"] == "block") & (p2["condition"] == "matched")]["prompt_id"].nunique()) == 4
    capsys.readouterr()


def test_cli_errors_are_one_line_exit_2(env, tmp_path, capsys):
    assert main(["--task", "docvqa", "--model", str(tmp_path / "nope"), "--data", str(env["data"]),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "does not exist" in err
    assert main(["--task", "nosuchtask", "--model", str(env["target"]), "--out", str(tmp_path / "o")]) == 2
    assert "unknown task" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "d.jsonl").write_text('{"prompt": "ok"}\n{"prompt": oops}\n')
    assert main(["--task", "docvqa", "--model", str(env["target"]), "--data", str(bad), "--drafter", "pld",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "d.jsonl:2" in err


def test_failure_keeps_completed_prompts(env, tmp_path, monkeypatch, capsys):
    import glance_log.run as R

    real = R.decode
    count = {"n": 0}

    def flaky(*a, **kw):
        count["n"] += 1
        if count["n"] == 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real(*a, **kw)

    monkeypatch.setattr(R, "decode", flaky)
    rc = _cli(env, tmp_path, "--drafter", "pld", "--n", "4")
    assert rc == 2 and "out of GPU memory" in capsys.readouterr().err
    prompts = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    assert len(prompts) == 2
    monkeypatch.setattr(R, "decode", real)
    assert _cli(env, tmp_path, "--drafter", "pld", "--n", "4") == 0     # resume completes the rest
    prompts = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    assert sorted(prompts["prompt_id"]) == ["p0", "p1", "p2", "p3"]
    gio.read_logs(tmp_path / "logs")                                    # no duplicate round keys


def test_cli_bf16_audit_and_sampling(env, tmp_path, capsys):
    assert _cli(env, tmp_path, "--drafter", "two_model", "--draft-model", str(env["draft"]), "--dtype", "bf16",
                "--audit", "--n", "2", "--budget", "15", "--branch-k", "4") == 0
    p = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    assert p["greedy_match"].notna().all() and (p["first_divergence"] >= -1).all()
    diverged = p[p["greedy_match"] == False]  # noqa: E712 - bf16 may diverge from fp32 greedy at near-ties
    assert diverged["divergence_margin"].notna().all() or diverged.empty
    assert _cli(env, tmp_path, "--drafter", "pld", "--temperature", "0.8", "--n", "2", "--seed", "5") == 0
    r = gio.read_logs(tmp_path / "logs").frame
    assert (r[r["drafter"] == "pld"]["accepted"] >= 0).all()
    assert _cli(env, tmp_path, "--drafter", "pld", "--temperature", "0.8", "--audit") == 2
    assert "--audit compares with greedy" in capsys.readouterr().err


def test_resume_repairs_rounds_without_a_prompt_row(env, tmp_path, capsys):
    """A crash between the rounds part and the prompts part leaves rounds without a prompt row:
    the rerun removes them (saying so) and logs the prompt again, with no duplicate keys."""
    assert _cli(env, tmp_path, "--drafter", "pld", "--n", "2") == 0
    before = gio.read_logs(tmp_path / "logs").frame
    for f in (tmp_path / "logs").glob("prompts-*.parquet"):
        f.unlink()
    capsys.readouterr()
    assert _cli(env, tmp_path, "--drafter", "pld", "--n", "2") == 0
    assert "removed" in capsys.readouterr().err
    after = gio.read_logs(tmp_path / "logs").frame
    assert len(after) == len(before)
    prompts = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    assert len(prompts) == 2 and set(prompts["prompt_id"]) == set(before["prompt_id"])


def test_defaults_resolve_through_glance_data_and_the_embedded_suite(tmp_path, monkeypatch, capsys):
    """`glance-log --task docvqa` with no --model/--data: the target and block head come from
    $GLANCE_MODELS, the prompts from the embedded suite."""
    pytest.importorskip("glance_log.suite")
    tk = pytest.importorskip("glance_log.train.tokenizer")
    tg = pytest.importorskip("glance_log.train.target")
    tok = tk.suite_tokenizer()
    root = tmp_path / "models"
    tg.save_model(tg.make_model(tok.get_vocab_size(), hidden=32, layers=1, heads=2, inter=64), tok, root / "target", {})
    make_block_head(root / "block", root / "target", horizon=4)
    monkeypatch.setenv("GLANCE_MODELS", str(root))
    monkeypatch.setenv("GLANCE_CACHE", str(tmp_path / "cache"))
    assert main(["--task", "docvqa", "--n", "2", "--max-new-tokens", "6", "--out", str(tmp_path / "logs"),
                 "--quiet", "--device", DEVICE]) == 0
    r = gio.read_logs(tmp_path / "logs").frame
    assert set(r["drafter"]) == {"block"} and r["prompt_id"].nunique() == 2
    assert (r["horizon"] <= 4).all()


def test_cli_vlm_probe_swaps_images(tmp_path, capsys):
    """A vision-language target: the mismatched probe borrows another prompt's image and its
    rounds pair up with the matched run's."""
    vl = make_qwen2_vl(tmp_path / "vl")
    data = write_jsonl_task(tmp_path / "data", n=2, with_images=True)
    assert main(["--task", "textvqa", "--model", str(vl), "--drafter", "two_model", "--draft-model", str(vl),
                 "--data", str(data), "--out", str(tmp_path / "logs"), "--max-new-tokens", "10", "--budget", "15",
                 "--branch-k", "4", "--probe", "mismatched", "--audit", "--quiet", "--device", DEVICE]) == 0
    r = gio.read_logs(tmp_path / "logs").frame
    m = r[r["condition"] == "matched"].set_index(["prompt_id", "round"])
    mm = r[r["condition"] == "mismatched"].set_index(["prompt_id", "round"])
    assert set(m.index) == set(mm.index) and len(m) > 0
    capped = m["position"] + 1 + m["accepted"] >= 10            # the round that reached --max-new-tokens stops there
    assert (m["accepted"] <= m["depth"]).all() and not capped.all()
    assert (m.loc[~capped, "accepted"] == m.loc[~capped, "depth"]).all()  # self-drafting accepts the deepest path
    assert (m["depth"] <= m["horizon"]).all()
    assert not np.allclose(m["root_entropy"], mm.loc[m.index, "root_entropy"])   # the image did change
    p = gio.read_logs(tmp_path / "logs", kind="prompts").frame
    assert p.loc[p["condition"] == "matched", "greedy_match"].astype(bool).all()
    assert (p.loc[p["condition"] == "mismatched", "stop_reason"] == "forced").all()


def test_top2_equals_torch_topk():
    """record.top2 (numpy on the CPU) gives torch.topk's two values exactly: ties (the largest twice),
    masked tokens, the largest first or last in its row, a non-contiguous view, bf16 rows."""
    g = torch.Generator().manual_seed(1)
    rows = torch.randn(6, 257, generator=g) * 4
    rows[1, 7] = rows[1, 200] = rows[1].max() + 1          # a tie at the top: margin 0
    rows[2, 0] = rows[2].max() + 1                          # the largest first ...
    rows[3, -1] = rows[3].max() + 1                         # ... and last
    rows[4, ::2] = float("-inf")
    rows[5, 1:] = float("-inf")                             # one finite token: the second is -inf
    for x in (rows, rows[:, ::3], rows.to(torch.bfloat16)):
        want = torch.topk(x.float(), 2, dim=-1).values
        assert torch.equal(top2(x), want)
    assert (top2(rows)[1, 0] == top2(rows)[1, 1]).item()


def test_device_root_stats_by_brute_force_with_masked_tokens():
    """The batched per-round statistics against direct sums, with tokens a model masks with -inf
    (probability zero, not NaN) and two rounds of 2 and 1 rows."""
    g = torch.Generator().manual_seed(0)
    rows = torch.randn(3, 11, generator=g) * 3
    rows[0, [2, 5]] = float("-inf")
    rows[2, 0] = float("-inf")
    out = device_root_stats(rows, torch.tensor([0, 2]), torch.tensor([0, 0, 1])).numpy()
    for r, (root, path) in enumerate([(0, [0, 1]), (2, [2])]):
        x = rows[root].double().numpy()
        fin = x[np.isfinite(x)]
        p = np.exp(fin - fin.max()) / np.exp(fin - fin.max()).sum()
        srt = np.sort(fin)[::-1]
        gaps = [np.sort(rows[i].double().numpy())[::-1][:2] for i in path]
        assert out[r, 0] == pytest.approx(-(p * np.log(p)).sum(), rel=1e-5)
        assert out[r, 1] == pytest.approx(srt[0] - srt[1], rel=1e-5)
        assert out[r, 2] == pytest.approx(p.max(), rel=1e-5)
        assert out[r, 3] == pytest.approx(min(a - b for a, b in gaps), rel=1e-5)
    # every row a root: the rows themselves as the roots (no copy) give the same statistics
    one = device_root_stats(rows, torch.arange(3), torch.arange(3))
    assert torch.equal(device_root_stats(rows, torch.arange(3), torch.arange(3), roots=rows), one)
    assert torch.isfinite(one).all() and (one[:, 0] >= 0).all()
