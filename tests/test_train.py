"""Smoke tests of the default's training scripts: a few steps on tiny models, never a full run."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from glance_log import suite  # noqa: E402
from glance_log.train import block as B  # noqa: E402
from glance_log.train import data as D  # noqa: E402
from glance_log.train import evaluate as E  # noqa: E402
from glance_log.train import target as T  # noqa: E402
from glance_log.train.tokenizer import EOS, suite_tokenizer  # noqa: E402

TINY = ["--hidden", "32", "--layers", "1", "--heads", "2", "--inter", "64"]


@pytest.fixture(scope="module")
def tok():
    return suite_tokenizer()


@pytest.fixture(scope="module")
def tiny(tok):
    torch.set_num_threads(1)
    return T.make_model(tok.get_vocab_size(), hidden=32, layers=1, heads=2, inter=64, seed=0).eval()


def test_first_turn_matches_the_inference_prompt(tok):
    for task in suite.GENERATORS:
        for ex in suite.load_examples(task, "train", 10):
            enc = D.encode_example(tok, ex)
            p = tok.encode(suite.format_prompt(ex.context, ex.qas[0].question)).ids
            a = tok.encode(" " + ex.qas[0].answer, add_special_tokens=False).ids + [EOS]
            assert enc.ids[:len(p) + len(a)] == p + a
            assert enc.weights[len(p):len(p) + len(a)] == [1.0] * len(a)
            assert len(enc.ids) == len(enc.weights)


def test_stream_is_deterministic_and_never_yields_heldout(tok):
    a, b = D.Stream(tok, seed=3), D.Stream(tok, seed=3)
    xa = a.batch(16, 1.0)
    xb = b.batch(16, 1.0)
    assert all(np.array_equal(u, v) for u, v in zip(xa, xb))
    s = D.Stream(tok, seed=4)
    held = {t: {x.prompt for x in suite.load_items(t, n=50, render=False)} for t in suite.GENERATORS}
    drills = lists = absent = 0
    for _ in range(300):
        ex = s.example(1.0)
        if ex.task == "copy":  # the copy drill is not a suite task: its prompt is no suite prompt
            drills += 1
            assert ex.qas[0].answer in ex.context
            continue
        if ex.task == "list":  # listing drill: a train-partition caption context, every object once
            lists += 1
            assert ex.context not in {p.split("\nquestion:")[0] for p in held["caption"]}
            for _, n in ex.fields:
                assert ex.qas[0].answer.count(f" {n}") == 1
            continue
        if ex.task == "absent":  # absent-key drill: the asked key is not in the shown context
            absent += 1
            asked = ex.qas[0].question
            assert all(f" {k}?" not in asked and f" {k} on" not in asked for k, _ in ex.fields)
            continue
        assert suite.split_of(ex) == "train"
        assert suite.format_prompt(ex.context, ex.qas[0].question) not in held[ex.task]
    assert s.rejected > 0  # about one draw in five is held out and rejected
    assert 15 < drills < 60  # a tenth at full difficulty
    assert 10 < lists < 45   # LIST_SHARE
    assert 4 < absent < 35   # ABSENT_SHARE


def test_curriculum_grows_the_number_of_fields():
    import random

    easy = [len(suite.gen_docvqa(random.Random(i), difficulty=0.0).fields) for i in range(200)]
    hard = [len(suite.gen_docvqa(random.Random(i), difficulty=1.0).fields) for i in range(200)]
    assert max(easy) <= 4 and min(hard) >= 5 and np.mean(hard) > np.mean(easy) + 2


def test_weighted_loss_decreases_on_a_fixed_batch(tok):
    torch.manual_seed(0)
    model = T.make_model(tok.get_vocab_size(), hidden=32, layers=1, heads=2, inter=64)
    x, y, w = D.Stream(tok, seed=0).batch(8, 0.5)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = float(T.weighted_loss(model, x, y, w).detach())
    for _ in range(40):
        loss = T.weighted_loss(model, x, y, w)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(T.weighted_loss(model, x, y, w).detach()) < 0.7 * first


def test_multi_token_heads_train_and_leave_the_saved_model_plain(tok, tmp_path):
    torch.manual_seed(0)
    model = T.make_model(tok.get_vocab_size(), hidden=32, layers=1, heads=2, inter=64)
    mtp = T.MultiTokenHeads(32, 4)
    assert mtp.offsets == [2, 3, 4]
    x, y, w = D.Stream(tok, seed=1).batch(8, 0.5)
    main0, aux0 = mtp.loss(model, x, y, w)
    # the main term is exactly the plain weighted next-token loss
    assert float(main0.detach()) == pytest.approx(float(T.weighted_loss(model, x, y, w).detach()), rel=1e-5)
    params = list(model.parameters()) + list(mtp.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3)
    for _ in range(30):
        m, a = mtp.loss(model, x, y, w)
        opt.zero_grad()
        (m + 0.5 * a).backward()
        opt.step()
    assert float(mtp.loss(model, x, y, w)[1].detach()) < 0.8 * float(aux0.detach())
    assert any(float(ad["lin"].weight.detach().abs().sum()) > 0 for ad in mtp.adapters)
    T.save_model(model, tok, tmp_path / "m", {})
    from safetensors.torch import load_file

    keys = load_file(str(tmp_path / "m" / "model.safetensors")).keys()
    assert not any("mtp" in k or "adapter" in k for k in keys)


def test_batched_greedy_equals_one_prompt_at_a_time(tok, tiny):
    items = suite.load_items("docvqa", n=3, render=False) + suite.load_items("caption", n=3, render=False)
    prompts = [tok.encode(it.prompt).ids for it in items]
    outs, ents = E.batched_greedy(tiny, prompts, max_new=6, batch=4)
    for p, o, h in zip(prompts, outs, ents):
        seq = list(p)
        with torch.no_grad():
            for _ in range(6):
                nxt = int(tiny(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
                seq.append(nxt)
                if nxt == EOS:
                    break
        assert o == seq[len(p):]
        assert len(h) == len(o) and all(0 <= v <= np.log(tok.get_vocab_size()) + 1e-4 for v in h)


def test_teacher_forced_exact_match_agrees_with_greedy(tok, tiny):
    # an answer is "exact" iff the argmax reproduces every one of its tokens: the greedy
    # continuation itself passes, the same continuation with its last token changed fails
    it = suite.load_items("chartqa", n=2, render=False)
    p0, p1 = (tok.encode(x.prompt).ids for x in it)
    (g0, g1), _ = E.batched_greedy(tiny, [p0, p1], max_new=5)
    bad0 = g0[:-1] + [(g0[-1] + 1) % tok.get_vocab_size()]
    bad1 = g1[:-1] + [(g1[-1] + 1) % tok.get_vocab_size()]
    rows = [("chartqa", 0, True, p0 + bad0, len(p0)), ("chartqa", 0, False, p0 + g0, len(p0)),
            ("chartqa", 1, True, p1 + bad1, len(p1))]
    for task in T.VAL_TASKS:  # the evaluator reports every validation task
        if task != "chartqa":
            rows.append((task, 0, True, p0 + bad0, len(p0)))
    res = T.evaluate_teacher_forced(tiny, rows, batch=2)
    assert res["chartqa"]["exact"] == 0.5          # item 0 via its second answer; item 1 not
    assert res["docvqa"]["exact"] == 0.0


def test_target_training_smoke(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "target"
    rc = T.main(["--out", str(out), "--steps", "3", "--eval-every", "3", "--batch", "4", *TINY])
    assert rc == 0
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tk = AutoTokenizer.from_pretrained(str(out))
    assert type(model).__name__ == "LlamaForCausalLM" and tk.eos_token_id == EOS
    assert model.generation_config.eos_token_id == EOS
    meta = json.loads((out / "training.json").read_text())
    assert meta["recipe"]["steps"] == 3 and set(meta["final_validation"]) >= {"docvqa", "chartqa"}
    log = [json.loads(l) for l in (tmp_path / "target.train.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == 3
    # resume continues from the checkpoint and stops at the new step count
    rc = T.main(["--out", str(out), "--steps", "4", "--eval-every", "1", "--batch", "4", "--resume", *TINY])
    assert rc == 0
    log = [json.loads(l) for l in (tmp_path / "target.train.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [3, 4]


def test_block_collect_aligns_offsets(tok, tiny, monkeypatch):
    monkeypatch.setattr(B, "TASK_PROMPTS", {"docvqa": 1.0, "textvqa": 1.0})
    H, R, Y, TK, PR, cut = B.collect(tiny, _HFTok(tok), n_per_task=2, horizon=5, max_new=8)
    assert H.shape == (len(R), 32) and Y.shape == (len(R), 5)
    for r in range(len(R) - 1):
        if PR[r] == PR[r + 1]:
            assert int(R[r + 1]) == int(Y[r, 0])                   # next round's root = offset 1
            assert torch.equal(Y[r + 1, :-1], Y[r, 1:])             # offsets shift by one
    assert set(TK) == {"docvqa", "textvqa"} and cut >= 0
    assert (R != EOS).all()


def test_block_training_smoke(tmp_path, tiny, tok, monkeypatch):
    from glance_log.heads import BlockHead

    target_dir = tmp_path / "target"
    T.save_model(tiny, tok, target_dir, {"test": True})
    monkeypatch.setattr(B, "TASK_PROMPTS", {"chartqa": 1.0, "caption": 1.0})
    monkeypatch.setattr(E, "batched_greedy", _short_greedy(E.batched_greedy))
    monkeypatch.setattr(B, "batched_greedy", _short_greedy(E.batched_greedy))
    out = tmp_path / "block"
    rc = B.main(["--target", str(target_dir), "--out", str(out), "--prompts", "6", "--steps", "4",
                 "--batch", "16", "--inner", "32", "--horizon", "4"])
    assert rc == 0
    head = BlockHead.from_pretrained(out)
    meta = json.loads((out / "training.json").read_text())
    assert head.horizon == 4 and head.num_parameters() == meta["head_parameters"] < meta["target_parameters"]
    assert len(meta["val_top1_per_offset"]) == 4
    logits = head.logits(torch.zeros(2, 32), torch.tensor([5, 6]), tiny)
    assert logits.shape == (2, 4, tok.get_vocab_size())


def test_block_head_must_stay_smaller_than_the_target(tmp_path, tiny, tok, monkeypatch):
    target_dir = tmp_path / "target"
    T.save_model(tiny, tok, target_dir, {"test": True})
    monkeypatch.setattr(B, "TASK_PROMPTS", {"chartqa": 1.0})
    monkeypatch.setattr(B, "batched_greedy", _short_greedy(E.batched_greedy))
    rc = B.main(["--target", str(target_dir), "--out", str(tmp_path / "b"), "--prompts", "2", "--steps", "1",
                 "--inner", "4096"])
    assert rc == 2 and not (tmp_path / "b").exists()


def test_wilson_interval():
    lo, hi = E.wilson(8, 10)
    assert 0.49 < lo < 0.5 and 0.94 < hi < 0.95   # textbook values 0.490, 0.943
    assert E.wilson(0, 5)[0] == 0.0


class _HFTok:
    """The minimal slice of a transformers tokenizer that :func:`block.collect` uses."""

    def __init__(self, tok):
        self.tok = tok
        self.eos_token_id = EOS

    def __call__(self, text):
        return {"input_ids": self.tok.encode(text).ids}


def _short_greedy(fn):
    def wrapped(model, prompts, max_new=48, **kw):
        return fn(model, prompts, max_new=min(max_new, 6), **kw)
    return wrapped
