"""vLLM 0.33.0 and SGLang 0.5.23 captures (issue 24, point 4): per-step drafted lengths, the
timing fields, scrapes across files as one run, streamed captures, SGLang tree depths and the
DSpark fields. Fixtures follow the field names of the sources cited in docs/your-logs.md; every
expected row is re-derived here from the raw fixture records."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_importers import prom_scrape

from glance_law.data.importers import detect_format, import_logs
from glance_law.io import LogError


def write(path: Path, lines) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def response(rid, K, acc, drafted=None, *, gen_ms=None, ttft_ms=None, detailed=True, by_length=False):
    """An OpenAI-server response with metrics.speculative_decoding (acceptance_metrics.md) and, where
    given, the timing fields of per_request_metrics.md."""
    drafted = [K] * len(acc) if drafted is None else drafted
    hist = np.bincount(acc, minlength=K + 1).tolist()
    sd = {"mean_acceptance_length": 1 + sum(acc) / len(acc), "draft_acceptance_rate": sum(acc) / sum(drafted),
          "acceptance_histogram": hist, "num_spec_steps": len(acc), "num_accepted_draft_tokens": sum(acc),
          "num_draft_tokens": sum(drafted), "num_spec_tokens": K}
    if by_length:
        sd["acceptance_histogram_by_draft_length"] = {
            str(k): np.bincount([a for a, d in zip(acc, drafted) if d == k], minlength=k + 1).tolist()
            for k in sorted(set(drafted))}
    if detailed:
        sd["per_step_accepted"], sd["per_step_drafted"] = list(acc), list(drafted)
    metrics = {"speculative_decoding": sd}
    if gen_ms is not None:
        metrics.update(time_to_first_token_ms=ttft_ms, generation_time_ms=gen_ms, queue_time_ms=1.5,
                       mean_itl_ms=gen_ms / (len(acc) + sum(acc)), tokens_per_second=100.0)
    return {"id": rid, "object": "chat.completion", "model": "m", "choices": [{"index": 0}],
            "usage": {"prompt_tokens": 7, "completion_tokens": len(acc) + sum(acc) + 1,
                      "total_tokens": 8 + len(acc) + sum(acc)}, "metrics": metrics}


RNG = np.random.default_rng(24)
K = 4
DRAFTED = RNG.integers(1, K + 1, 200).tolist()                       # variable-length drafting
ACC = [int(min(d, RNG.geometric(0.35) - 1)) for d in DRAFTED]


def test_vllm_per_step_drafted_each_step_at_its_length(tmp_path):
    f = write(tmp_path / "detailed.jsonl", [response("r1", K, ACC, DRAFTED)])
    r = import_logs(f).rounds
    assert r["accepted"].tolist() == ACC and r["horizon"].tolist() == DRAFTED
    full = np.mean(np.array(ACC) == np.array(DRAFTED))                  # P(a = L), re-derived from the raw lists
    at_k = np.mean(np.array(ACC) == K)                                  # what reading every step at K gives
    assert np.mean(r["accepted"] == r["horizon"]) == pytest.approx(full) and full > at_k + 0.1


def test_vllm_histogram_by_draft_length_and_plain_histogram(tmp_path):
    f = write(tmp_path / "summary.jsonl", [response("a", K, ACC, DRAFTED, detailed=False, by_length=True),
                                           response("b", K, ACC, DRAFTED, detailed=False)])
    imp = import_logs(f)
    r = imp.rounds
    a = r[r.prompt_id == "a"]
    want = sorted(zip(DRAFTED, ACC))                                  # (length, accepted) pairs, order unknown
    assert sorted(zip(a["horizon"], a["accepted"])) == want
    b = r[r.prompt_id == "b"]
    assert (b["horizon"] == K).all() and sorted(b["accepted"]) == sorted(ACC)
    assert any("drafted fewer than num_spec_tokens" in n for n in imp.notes)
    assert any("acceptance_histogram_by_draft_length" in n for n in imp.notes)


def test_vllm_generation_time_is_the_decode_time(tmp_path):
    f = write(tmp_path / "timed.jsonl", [response("t1", 3, [1, 3, 0], gen_ms=41.25, ttft_ms=12.5),
                                         response("t2", 3, [2, 2], detailed=False)])
    imp = import_logs(f)
    p = imp.prompts.set_index("prompt_id")
    assert p.loc["t1", "decode_ms"] == pytest.approx(41.25) and p.loc["t1", "prefill_ms"] == pytest.approx(12.5)
    assert np.isnan(p.loc["t2", "decode_ms"])
    assert any("generation_time_ms" in n for n in imp.notes)


def test_vllm_streamed_capture(tmp_path):
    final = response("chatcmpl-s1", 3, [3, 0, 2, 3], gen_ms=20.0, ttft_ms=5.0)
    chunk = {"id": "chatcmpl-s1", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
    last = {**final, "object": "chat.completion.chunk", "choices": []}   # the final usage chunk carries metrics
    lines = [f"data: {json.dumps(chunk)}", "", f"data: {json.dumps(chunk)}", "", f"data: {json.dumps(last)}", "",
             "data: [DONE]", ""]
    f = write(tmp_path / "stream.txt.jsonl", lines)
    assert detect_format(f) == "vllm"
    imp = import_logs(f)
    assert imp.rounds["accepted"].tolist() == [3, 0, 2, 3] and (imp.rounds["horizon"] == 3).all()
    assert imp.prompts["decode_ms"].tolist() == [20.0] and len(imp.prompts) == 1


def prom(drafts, draft_tokens, accepted, per_pos, model="m"):
    """vLLM V1 SpecDecodingProm counters as prometheus_client exposes them (tests/test_importers.py's
    prom_scrape), ending with a newline as a scrape does."""
    return prom_scrape(drafts, draft_tokens, accepted, per_pos, model) + "\n"


def counters(acc, k):
    """Cumulative counters of drafts that accepted ``acc`` (each of k tokens)."""
    acc = np.asarray(acc)
    return len(acc), k * len(acc), int(acc.sum()), [int((acc > i).sum()) for i in range(k)]


def test_vllm_scrapes_across_files_are_one_run(tmp_path):
    first, later = RNG.integers(0, 4, 1500).tolist(), RNG.integers(0, 4, 1000).tolist()
    a, b = tmp_path / "scrape-1.prom", tmp_path / "scrape-2.prom"
    a.write_text(prom(*counters(first, 3)))
    b.write_text(prom(*counters(first + later, 3)))            # cumulative: the second holds the first
    imp = import_logs([a, b])
    r = imp.rounds
    assert len(r) == len(first) + len(later) == 2500               # not 1500 + 2500
    assert r["run_id"].nunique() == 1 and set(r["prompt_id"]) == {"interval-1", "interval-2"}
    two = r[r.prompt_id == "interval-2"]["accepted"]
    assert two.value_counts().sort_index().tolist() == np.bincount(later, minlength=4).tolist()
    assert any("continuing the run of scrape-1.prom" in n for n in imp.notes)
    with pytest.raises(LogError, match="counters go backwards .*pass the scrapes of one server run, in the order"):
        import_logs([b, a])
    # and again, each import its own run (the cache keeps no state between calls)
    assert len(import_logs([a, b]).rounds) == 2500 and len(import_logs([b]).rounds) == 2500


def sg(rid, hist, proposed_per_step, **extra):
    ct = int(sum(hist))
    acc = int(np.dot(np.arange(len(hist)), hist))
    meta = {"id": rid, "prompt_tokens": 9, "completion_tokens": ct + acc, "e2e_latency": 0.25,
            "spec_verify_ct": ct, "spec_accept_rate": acc / (ct * proposed_per_step),
            "spec_accept_length": (ct + acc) / ct, "spec_num_correct_drafts": acc,
            "spec_num_proposed_drafts": ct * proposed_per_step, "spec_correct_drafts_histogram": hist,
            "spec_cap_length": 0.0, "spec_block_accept_length": 0.0, "spec_cap_lens_histogram": []}
    meta.update(extra)
    return {"text": "", "meta_info": meta}


def test_sglang_tree_depth_from_the_settings_not_proposed_per_step(tmp_path):
    # EAGLE tree: speculative_num_steps 3, topk 4, 8 draft tokens: 7 proposed per step, depth 3
    hist = [4, 3, 2, 1]
    bare = write(tmp_path / "tree.jsonl", [sg("q", hist, 7)])
    with pytest.raises(LogError, match="draft depth is unknown .*7 proposed per step.*--horizon"):
        import_logs(bare)
    settings = {"speculative_num_steps": 3, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
    rec = dict(sg("q", hist, 7), server_info=settings)
    imp = import_logs(write(tmp_path / "tree2.jsonl", [rec]))
    r = imp.rounds
    assert (r["horizon"] == 3).all() and r["accepted"].tolist() == np.repeat(np.arange(4), hist).tolist()
    assert any("speculative_num_steps" in n for n in imp.notes)
    assert (import_logs(bare, horizon=3).rounds["horizon"] == 3).all()
    # a chain whose steps reached the proposed length: the depth is that length
    chain = import_logs(write(tmp_path / "chain.jsonl", [sg("c", [1, 0, 2, 5], 3)])).rounds
    assert (chain["horizon"] == 3).all()


def test_sglang_dspark_fields(tmp_path):
    hist = [2, 1, 3, 0, 0]
    one_cap = sg("one", hist, 4, spec_cap_length=4.0, spec_block_accept_length=2.5,
                 spec_cap_lens_histogram=[0, 0, 0, 0, 6], speculative_num_steps=4)
    one_cap["meta_info"]["spec_cap_lens_histogram"] = [0, 0, 0, 6]          # window 3 on all 6 steps: 2 drafts
    mixed = sg("mixed", hist, 4, spec_cap_length=3.5, spec_block_accept_length=2.75,
               spec_cap_lens_histogram=[0, 0, 0, 3, 3], speculative_num_steps=4)
    imp = import_logs(write(tmp_path / "dspark.jsonl", [one_cap, mixed]))
    p = imp.prompts.set_index("prompt_id")
    assert p.loc["mixed", "spec_cap_length"] == 3.5 and p.loc["one", "spec_block_accept_length"] == 2.5
    r = imp.rounds
    assert set(r["prompt_id"]) == {"one"} and (r["horizon"] == 2).all()
    assert sorted(r["accepted"]) == np.repeat(np.arange(5), hist).tolist()
    assert any("windows of several lengths" in n for n in imp.notes)
