"""The real-target block-head recipe (glance_log.train.block_real) end to end on a tiny
Gemma 3 built from a config (its sliding window shorter than prompt + output): question file
-> disjoint splits that never hold an evaluation question -> greedy rows -> a trained head
that the decoder loads and drafts with, losslessly."""
from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402
from _logger_fixtures import CORPUS, make_llama  # noqa: E402

from glance_law import io as gio  # noqa: E402
from glance_log import questions as Q  # noqa: E402
from glance_log import run as R  # noqa: E402
from glance_log.heads import BlockHead  # noqa: E402
from glance_log.models import load_target  # noqa: E402
from glance_log.train import block_real as BR  # noqa: E402


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("block_real")
    model = make_llama(root / "gemma", seed=0, init=1.0, family="gemma3_text", sliding_window=8,
                       layer_types=["sliding_attention", "full_attention"])
    recs = [{"question_id": 100 + i, "category": ("writing", "math", "rag")[i % 3],
             "turns": [CORPUS[i % 7] + f" {i}", "and then?"]} for i in range(18)]
    qfile = root / "question.jsonl.gz"
    with gzip.open(qfile, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in recs)
    return {"root": root, "model": model, "qfile": qfile}


def test_greedy_hidden_matches_one_prompt_at_a_time(env):
    target = load_target(env["model"], device="cpu")
    prompts = [Q.encode_conversation(target, [t], []).prompt_ids for t in ("what is the total", CORPUS[2], CORPUS[5])]
    outs, hids = BR.greedy_hidden(target, prompts, max_new=10, batch=3)
    for p, o, h in zip(prompts, outs, hids):
        ref = target.model.generate(torch.tensor([p]), max_new_tokens=10, do_sample=False)[0, len(p):].tolist()
        assert o == ref[:len(o)] and h.shape == (len(o), target.text_config.hidden_size)
        full = target.model.model(input_ids=torch.tensor([p + o])).last_hidden_state[0]
        assert torch.allclose(h, full[len(p) - 1:len(p) - 1 + len(o)], atol=1e-4)


def test_make_rows_targets_and_stops():
    h = torch.arange(5.0).view(5, 1)
    H, R_, Y, P = BR.make_rows([[10, 11, 12, 2, 13]], [h], {2}, horizon=3)
    assert R_.tolist() == [10, 11, 12] and P == [0, 0, 0]
    assert Y.tolist() == [[11, 12, 2], [12, 2, 13], [2, 13, -100]] and H[:, 0].tolist() == [0.0, 1.0, 2.0]


def test_train_on_questions_then_draft_losslessly(env, tmp_path):
    out = tmp_path / "head"
    rc = BR.main(["--model", str(env["model"]), "--data", str(env["qfile"]), "--out", str(out),
                  "--exclude-eval", "2", "--train", "9", "--val", "3", "--max-new", "12", "--horizon", "4",
                  "--inner", "32", "--steps", "30", "--batch", "16", "--negatives", "8", "--decode-batch", "4"])
    assert rc == 0
    rep = json.loads((out / "training.json").read_text())
    evals = {q.question_id for k in (1, 2) for q in Q.load_questions(env["qfile"], "all", n=k, seed=0, turns=1)}
    assert set(rep["excluded_eval_ids"]) == evals and len(evals) == 6
    tr, va = set(rep["train_ids"]), set(rep["val_ids"])
    assert len(tr) == 9 and len(va) == 3 and not (tr & va) and not ((tr | va) & evals)
    assert len(rep["val_top1_per_offset"]) == 4 and rep["rows"]["train"] > 0 and rep["steps_run"] == 30
    assert rep["final_loss"] < 10 and all(0 <= a <= 1 for a in rep["val_top1_per_offset"])
    assert BlockHead.from_pretrained(out).horizon == 4
    items = Q.load_questions(env["qfile"], "all", n=1, seed=0, turns=1)
    cfg = R.RunConfig(task="all", model=str(env["model"]), drafter="block", draft_model=str(out), branch_k=2,
                      max_new_tokens=12, out=str(tmp_path / "log"), progress=False, items=items, audit=True)
    R.run(cfg)
    P = gio.read_prompts(str(tmp_path / "log"))
    assert len(P) == 3 and P["greedy_match"].all()
