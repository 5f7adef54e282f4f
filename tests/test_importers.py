"""Importers of foreign logs (glance_law.data.importers): real Spec-Bench slices, every file of
../shared/realdata, golden hand-counted cases, vLLM/SGLang fixtures built from their sources,
GLANCE rows without torch, the ingest CLI and the readers' in-memory import."""
from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glance_law.data.importers import clear_cache, detect_format, import_logs
from glance_law.data.importers.spec_bench import METHODS, parse_model_id, sps_schedule
from glance_law.io import LogError, read_logs

HERE = Path(__file__).parent
SLICES = HERE / "data" / "realdata"
REAL = HERE.parent.parent / "shared" / "realdata"
MODEL = "vicuna-7b-v1.3-eagle-float16-temperature-0.0"


def write_jsonl(path: Path, records, gz=False) -> Path:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def answer(qid, cat, steps, al, nt, wt, model=MODEL, turns=None):
    return {"question_id": qid, "category": cat, "answer_id": "x", "model_id": model,
            "choices": [{"index": 0, "turns": turns or ["t"] * len(steps), "decoding_steps": steps,
                         "new_tokens": nt, "wall_time": wt, "accept_lengths": al}], "tstamp": 0.0}


# --------------------------------------------------------------------------
# spec-bench: golden cases
# --------------------------------------------------------------------------

def test_spec_bench_two_questions_counted_by_hand(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", [answer(1, "writing", [3, 2], [3, 1, 2, 6, 1], [6, 7], [0.5, 0.25]),
                                           answer(2, "math", [2], [2, 4], [6], [0.1])])
    imp = import_logs(f)
    r = imp.rounds
    assert imp.format == "spec-bench" and len(r) == 7 and r["root_entropy"].isna().all()
    q1, q2 = r[r.prompt_id == "1"], r[r.prompt_id == "2"]
    assert q1["round"].tolist() == [0, 1, 2, 3, 4] and q2["round"].tolist() == [0, 1]
    assert q1["accepted"].tolist() == [2, 0, 1, 5, 0] and q2["accepted"].tolist() == [1, 3]
    # eagle: L = 5; the last round of each turn is output-ending: horizon = accepted
    assert q1["horizon"].tolist() == [5, 5, 1, 5, 0] and q2["horizon"].tolist() == [5, 3]
    assert q1["drafted_horizon"].tolist() == [5] * 5
    assert q1["ends_output"].tolist() == [False, False, True, False, True]
    assert q1["turn"].tolist() == [0, 0, 0, 1, 1] and q1["position"].tolist() == [0, 3, 4, 0, 6]
    assert set(r["task"]) == {"writing", "math"} and set(r["drafter"]) == {"eagle"}
    p = imp.prompts.set_index("prompt_id")
    assert p.loc["1", "new_tokens"] == 13 and p.loc["1", "rounds"] == 5 and p.loc["1", "turns"] == 2
    assert p.loc["1", "decode_ms"] == pytest.approx(750.0) and p.loc["2", "decode_ms"] == pytest.approx(100.0)
    assert detect_format(f) == "spec-bench"


def test_parse_model_id_and_method_table():
    assert parse_model_id("vicuna-7b-v1.3-sps-68m-float16-temp-0.0") == ("vicuna-7b-v1.3", "sps", "sps-68m")
    assert parse_model_id("llama2-7b-chat-ssd-float16-temperature-0.0") == ("llama2-7b-chat", "ssd", "ssd")
    assert parse_model_id("Qwen2.5-7B-Instruct-vanilla-float16-temp-0.0")[1] == "vanilla"
    assert parse_model_id("my-model-foo")[1] is None
    # the Medusa repository's repeat runs: the index after the version or size is not the target's
    for i in ("1", "2"):
        mid = f"medusa-vicuna-13b-v1.3-{i}-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3"
        assert parse_model_id(mid) == ("vicuna-13b-v1.3", "medusa", "medusa")
    assert parse_model_id("medusa-vicuna-13b-v1.3-temperature-0.0")[0] == "vicuna-13b-v1.3"
    assert parse_model_id("llama-2-eagle-float16")[0] == "llama-2"          # a number after a word is a name
    # the EAGLE repository scripts' default ids
    assert parse_model_id("ess-vicuna-70b-fp16-temperature-0.0") == ("vicuna-70b", "eagle", "eagle")
    assert parse_model_id("ess-vicuna-70b-fp16-baseline-temperature-0.0") == ("vicuna-70b", "baseline", "baseline")
    assert parse_model_id("essay-model-eagle-fp16") == ("essay-model", "eagle", "eagle")
    assert METHODS["eagle"] == 5 and METHODS["medusa"] == 4 and METHODS["hydra"] == 4 and METHODS["ssd"] == 3


def _generable(n, h0=5):
    """Every accepted sequence of length n the HF heuristic schedule can produce (brute force)."""
    out = set()

    def go(prefix, h):
        if len(prefix) == n:
            out.add(tuple(prefix))
            return
        for a in range(h + 1):
            go(prefix + [a], h + 2 if a == h else max(1, h - 1))
    go([], h0)
    return out


def test_sps_schedule_brute_force():
    ok = _generable(4)
    for seq in itertools.product(range(10), repeat=4):
        _, bad = sps_schedule(np.array(seq))
        assert (bad < 0) == (seq in ok), seq
    hor, bad = sps_schedule(np.array([0, 4, 6, 2, 0]))
    assert bad == -1 and hor.tolist() == [5, 4, 6, 8, 7]


def test_sps_contradiction_refused_unless_horizon(tmp_path):
    sps = "vicuna-7b-v1.3-sps-68m-float16-temp-0.0"
    # accepted 7 in the first round: more than the schedule's 5
    f = write_jsonl(tmp_path / "s.jsonl", [answer(1, "qa", [2], [8, 1], [9], [0.1], model=sps)])
    with pytest.raises(LogError, match="schedule .* contradicted.*--horizon"):
        import_logs(f)
    imp = import_logs(f, horizon={"sps": 8})
    assert imp.rounds["drafted_horizon"].tolist() == [8, 8]
    ok = write_jsonl(tmp_path / "ok.jsonl", [answer(1, "qa", [3], [6, 8, 2], [16], [0.1], model=sps)])
    r = import_logs(ok).rounds
    assert r["drafted_horizon"].tolist() == [5, 7, 9] and r["horizon"].tolist() == [5, 7, 1]


def test_sps_schedule_over_a_file_is_the_per_turn_schedule(tmp_path):
    """The file-wide schedule (every turn starts afresh at 5) gives sps_schedule of each turn on its
    own; a contradiction is refused naming how many turns contradict it and the first one."""
    sps = "vicuna-7b-v1.3-sps-68m-float16-temp-0.0"
    rng = np.random.default_rng(2)
    recs, want = [], []
    for q in range(12):
        steps, al = [], []
        for _t in range(int(rng.integers(1, 4))):
            seq, h = [], 5
            for _ in range(int(rng.integers(1, 9))):
                a = int(h if rng.random() < 0.4 else rng.integers(0, h + 1))
                seq.append(a)
                h = h + 2 if a == h else max(1, h - 1)
            want += sps_schedule(np.array(seq))[0].tolist()
            steps.append(len(seq))
            al += [a + 1 for a in seq]
        recs.append(answer(q, "qa", steps, al, [sum(al)], [0.1], model=sps))
    f = write_jsonl(tmp_path / "s.jsonl", recs)
    assert import_logs(f).rounds["drafted_horizon"].tolist() == want
    # turn 1 of question 3 and turn 0 of question 7 accept more than the schedule drafts
    bad = [dict(r, choices=[dict(r["choices"][0])]) for r in recs]
    for q, t in ((7, 0), (3, 1)):
        c = bad[q]["choices"][0]
        if len(c["decoding_steps"]) <= t:
            c["decoding_steps"] = c["decoding_steps"] + [1]
            c["accept_lengths"] = c["accept_lengths"] + [1]
        start = sum(c["decoding_steps"][:t])
        c["accept_lengths"] = c["accept_lengths"][:start] + [9] + c["accept_lengths"][start + 1:]
    g = write_jsonl(tmp_path / "bad.jsonl", bad)
    with pytest.raises(LogError, match=r"contradicted in 2 turn\(s\) \(first: question_id 3 \(line 4\), turn 1, "
                                       r"step 0: accepted 8 > reconstructed draft length 5\)"):
        import_logs(g)


def test_unknown_method_refused_with_the_fix(tmp_path):
    f = write_jsonl(tmp_path / "m.jsonl", [answer(1, "qa", [1], [3], [3], [0.1], model="vicuna-7b-lookahead-fp16")])
    with pytest.raises(LogError, match="no fixed horizon in the method table.*--horizon lookahead=L"):
        import_logs(f)
    assert import_logs(f, horizon=4).rounds["drafted_horizon"].tolist() == [4]
    # no method at all in model_id: refused, naming the key to pass
    g = write_jsonl(tmp_path / "n.jsonl", [answer(1, "qa", [1], [3], [3], [0.1], model="my-model-fp16")])
    with pytest.raises(LogError, match="no known method in model_id 'my-model-fp16'.*--horizon my-model-fp16=L"):
        import_logs(g)
    # a --horizon the data contradict is still refused (the user said L; the data say more)
    with pytest.raises(LogError, match="more than the horizon 1 given with --horizon.*--horizon vicuna-7b-lookahead=2"):
        import_logs(f, horizon={"lookahead": 1})


def test_table_horizon_exceeded_imports_at_the_observed_maximum(tmp_path):
    # eagle's table L is 5; this run accepted 7 in one round: imported with L = 7 and a loud note
    f = write_jsonl(tmp_path / "deep.jsonl", [answer(1, "qa", [3], [8, 2, 3], [13], [0.1]),
                                              answer(2, "qa", [1], [4], [4], [0.1])])
    imp = import_logs(f)
    r = imp.rounds
    assert r["drafted_horizon"].tolist() == [7, 7, 7, 7] and r["horizon"].tolist() == [7, 7, 2, 3]
    warn = [n for n in imp.notes if "WARNING" in n]
    assert len(warn) == 1 and str(f) in warn[0] and "table's horizon 5" in warn[0] and "accepted 7" in warn[0]
    assert "--horizon vicuna-7b-v1.3-eagle=L" in warn[0] and "lower bound" in warn[0]
    assert imp.parts[0][4]["drafter"]["horizon"] == 7
    # within the table: no warning
    ok = write_jsonl(tmp_path / "ok.jsonl", [answer(1, "qa", [1], [6], [6], [0.1])])
    assert not any("WARNING" in n for n in import_logs(ok).notes)


def test_idxs_variant_prompt_rows_only(tmp_path):
    rec = {"question_id": 7, "category": "math", "model_id": "ea-vicuna-7b-fp16",
           "choices": [{"index": 0, "turns": ["a", "b"], "idxs": [9, 4], "new_tokens": [30, 12],
                        "wall_time": [1.0, 0.5]}]}
    imp = import_logs(write_jsonl(tmp_path / "e.jsonl", [rec]))
    assert len(imp.rounds) == 0
    p = imp.prompts.iloc[0]
    assert p["rounds"] == 15 and p["new_tokens"] == 42 and p["decode_ms"] == pytest.approx(1500.0)
    assert any("prompt rows only" in n for n in imp.notes)


def test_steps_disagreeing_with_list_and_unknown_shape(tmp_path):
    # two turns: steps 3 + 1 against 3 values, new_tokens 5 + 2 against a sum of 6: no split is consistent
    f = write_jsonl(tmp_path / "d.jsonl", [answer(1, "qa", [3, 1], [2, 2, 2], [5, 2], [0.1, 0.1]),
                                           answer(2, "qa", [1], [2], [2], [0.1]),
                                           answer(3, "qa", [3], [2, 2], [4], [0.1])])
    imp = import_logs(f)
    assert set(imp.rounds["prompt_id"]) == {"2", "3"}
    assert any("do not sum to the length" in n and "question_id 1" in n for n in imp.notes)
    # one turn: the whole list is that turn, said in a note
    assert imp.rounds[imp.rounds.prompt_id == "3"]["accepted"].tolist() == [1, 1]
    assert any("1 answer(s) have one turn and decoding_steps that miss or disagree" in n for n in imp.notes)
    g = write_jsonl(tmp_path / "x.jsonl", [{"foo": 1, "bar": [2]}])
    with pytest.raises(LogError, match="supported formats: spec-bench .*glance .*vllm .*sglang"):
        import_logs(g)


# --------------------------------------------------------------------------
# spec-bench: committed real slices (tests/data/realdata, see PROVENANCE.md)
# --------------------------------------------------------------------------

def test_real_slice_corrupt_line(tmp_path):
    clear_cache()          # a lenient import of this slice by an earlier test in this process would be reused
    f = SLICES / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"
    with pytest.raises(LogError, match=r"line 4: not valid JSON \(NUL bytes\).*--skip-bad"):
        import_logs(f)
    imp = import_logs(f, skip_bad=True)
    assert any("skipped corrupt line 4" in n for n in imp.notes)
    assert imp.prompts["prompt_id"].tolist() == ["81", "82", "244"]
    assert imp.rounds.groupby("prompt_id")["turn"].max().to_dict() == {"244": 0, "81": 1, "82": 1}
    assert (imp.rounds["accepted"] <= 5).all() and imp.rounds["accepted"].max() == 5


def test_a_lenient_import_is_reused_within_a_process_until_the_cache_is_cleared():
    """A command's --skip-bad covers its every read of a file (its rounds, then its prompt rows); a fresh
    start (clear_cache, as a new process) reads strictly again. test_real_slice_corrupt_line clears the cache
    first, so it does not depend on which test imported the slice before it (pytest -n 2 orders differ)."""
    f = SLICES / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"
    lenient = import_logs(f, skip_bad=True)
    assert any("skipped corrupt line 4" in n for n in import_logs(f).notes)    # the lenient import, named
    assert import_logs(f).prompts.equals(lenient.prompts)
    clear_cache()
    with pytest.raises(LogError, match="line 4: not valid JSON"):
        import_logs(f)


def test_real_slice_empty_and_repeated():
    imp = import_logs(SLICES / "multiclass_product_classification__vicuna-13b-v1.3-vanilla-float16-temp-0.0.jsonl.gz")
    assert any("empty accept_lengths" in n and "question_id 4" in n for n in imp.notes)
    assert set(imp.rounds["drafter"]) == {"ar"} and (imp.rounds["horizon"] == 0).all()
    with pytest.raises(LogError, match="no usable answers"):
        import_logs(SLICES / "test_bench__vicuna-7b-v1.3-eagle3-float16-temperature-0.0.jsonl.gz")
    q = import_logs(SLICES / "sentiment_analysis__Qwen2.5-7B-Instruct-sps-68m-float16-temp-0.0.jsonl.gz")
    assert any("question ids repeat (11 answers for 10 questions)" in n for n in q.notes)
    assert q.prompts["run_id"].str.endswith("#run2").sum() == 1
    ll = import_logs(SLICES / "llama2-7b-chat-ssd-float16-temperature-0.0.jsonl.gz")
    assert any("WARNING: accept_lengths reach 5 (accepted 4), more than the method table's horizon 3 for 'ssd'" in n
               and "--horizon llama2-7b-chat-ssd=L" in n for n in ll.notes)
    assert ll.rounds["drafted_horizon"].max() == 4
    ll = import_logs(SLICES / "llama2-7b-chat-ssd-float16-temperature-0.0.jsonl.gz", horizon={"llama2-7b-chat-ssd": 4})
    assert ll.prompts.groupby("prompt_id")["run_id"].nunique().to_dict() == {"81": 3, "91": 3}


def test_real_slices_through_the_reader_and_timing_pairs(tmp_path):
    logs = read_logs([SLICES / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz",
                      SLICES / "spec_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz",
                      SLICES / "spec_bench__question.jsonl.gz"], skip_bad=True)
    assert logs.notes[0].startswith("imported 3 file(s) as spec-bench")
    assert set(logs.frame["drafter"].astype(str)) == {"eagle", "ar"}
    assert logs.frame["root_entropy"].isna().all()
    prompts = read_logs([f.path for f in logs.other if f.kind == "prompts"], "prompts").frame
    from glance_law.evidence.timing import timing_ledger
    base = prompts[prompts.drafter == "ar"]
    cand = prompts[prompts.drafter == "eagle"]
    res = timing_ledger(base, cand, n_boot=200)
    assert set(res.prompts()["prompt_id"].astype(str)) == {"81", "82", "244"}


# --------------------------------------------------------------------------
# every file of ../shared/realdata, as its README predicts
# --------------------------------------------------------------------------

EXPECTED_REFUSED = {"test_bench__vicuna-7b-v1.3-eagle3-float16-temperature-0.0.jsonl.gz": "empty accept_lengths"}
EXPECTED_NOTE = {"spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz":
                 ["skipped corrupt line 165", "cover 164 of the 480 questions"],
                 "llama2-7b-chat-ssd-float16-temperature-0.0.jsonl.gz": ["1390 answers for 480 questions",
                                                                         "WARNING: accept_lengths reach 5"],
                 "multiclass_product_classification__vicuna-13b-v1.3-vanilla-float16-temp-0.0.jsonl.gz":
                 ["8 answer(s) with empty accept_lengths"]}


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/realdata is not beside this checkout")
def test_every_real_file_imports_or_is_refused_as_predicted():
    files = sorted((REAL / "spec-bench").rglob("*.jsonl.gz"))
    assert len(files) >= 36
    for f in files:
        if "question" in f.name:
            assert detect_format(f) == "spec-bench-questions"
            continue
        assert detect_format(f) == "spec-bench", f
        if f.name in EXPECTED_REFUSED:
            with pytest.raises(LogError) as e:
                import_logs(f, skip_bad=True)
            assert str(f) in str(e.value) and len(str(e.value).splitlines()) == 1
            if "empty" in EXPECTED_REFUSED[f.name]:
                assert "4 with empty accept_lengths" in str(e.value)
            else:
                assert EXPECTED_REFUSED[f.name] in str(e.value)
            continue
        imp = import_logs(f, skip_bad=True)
        r = imp.rounds
        assert len(r) and (r["accepted"] <= r["drafted_horizon"]).all() and (r["horizon"] <= r["drafted_horizon"]).all()
        for want in EXPECTED_NOTE.get(f.name, []):
            assert any(want.replace("cover", "answers cover") in n or want in n for n in imp.notes), (f.name, want)
        method = parse_model_id(str(imp.parts[0][4]["source"]["model_id"]))[1]
        if method == "vanilla":
            assert (r["horizon"] == 0).all() and set(r["drafter"]) == {"ar"}
        elif METHODS.get(method) not in (None, "hf-heuristic"):
            want = 4 if f.name.startswith("llama2-7b-chat-ssd") else METHODS[method]
            assert r["drafted_horizon"].max() == want
            assert any("WARNING" in n for n in imp.notes) == (want != METHODS[method])
    ll = REAL / "spec-bench" / "vase" / "llama2-7b-chat-ssd-float16-temperature-0.0.jsonl.gz"
    imp = import_logs(ll, horizon={"llama2-7b-chat-ssd": 4})
    assert any("1390 answers for 480 questions" in n and "3 runs" in n for n in imp.notes)


# --------------------------------------------------------------------------
# GLANCE rows (torch-free)
# --------------------------------------------------------------------------

GLANCE_ROWS = [
    {"task": "docvqa", "prompt": "doc-1", "entropy": 0.5, "accept_len": 3, "tree_size": 64, "block_size": 16},
    {"task": "docvqa", "prompt": "doc-1", "entropy": 0.1, "accept_len": 22, "tree_size": 64, "block_size": 16},
    {"task": "caption", "prompt": "img-9", "entropy": 2.0, "tau": 1, "tree_size": 32, "block_size": 16},
]


def test_glance_rows_four_defects_fixed(tmp_path):
    f = write_jsonl(tmp_path / "round_log.jsonl", GLANCE_ROWS)
    assert detect_format(f) == "glance"
    r = import_logs(f).rounds
    assert r["prompt_id"].tolist() == ["doc-1", "doc-1", "img-9"]           # the 'prompt' key
    assert r["task"].tolist() == ["docvqa", "docvqa", "caption"]            # per-row task
    assert r["budget"].tolist() == [63, 63, 31]                             # tree_size counts the root
    assert r["accepted"].tolist() == [3, 22, 0] and r["horizon"].tolist() == [15, 22, 15]   # extended round
    assert r["extended"].tolist() == [False, True, False] and r["round"].tolist() == [0, 1, 0]
    assert r["root_entropy"].tolist() == pytest.approx([0.5, 0.1, 2.0])


def test_glance_hook_converter_is_the_importer(tmp_path):
    # glance_log.hooks.GlanceOnRound.convert_jsonl: a thin call into the importer (the same rows, written)
    from glance_log.hooks.glance import GlanceOnRound
    f = write_jsonl(tmp_path / "round_log.jsonl", GLANCE_ROWS)
    assert GlanceOnRound.convert_jsonl(f, tmp_path / "out", task="fallback", horizon=7) == 3
    got = read_logs(tmp_path / "out").frame
    want = import_logs(f, horizon=7).rounds
    for c in ("prompt_id", "task", "accepted", "horizon", "budget", "extended", "round"):
        assert got[c].astype(str).tolist() == want[c].astype(str).tolist(), c
    assert got["budget"].tolist() == [63, 63, 31] and got["extended"].tolist() == [False, True, False]
    assert GlanceOnRound.convert_jsonl([f], tmp_path / "o2", run_id="r1", drafter="blk") == 3
    g = read_logs(tmp_path / "o2").frame
    assert set(g["run_id"].astype(str)) == {"r1"} and set(g["drafter"].astype(str)) == {"blk"}
    bad = write_jsonl(tmp_path / "bad.jsonl", ['{"entropy": 0.1, "accept_len": 1}'])
    with pytest.raises(LogError, match="line 1: the row has no horizon.*--horizon"):
        GlanceOnRound.convert_jsonl(bad, tmp_path / "o3")
    # the on_round callable reads the same keys the same way
    rec = GlanceOnRound(tmp_path / "cb", task="docvqa")
    for row in GLANCE_ROWS[:2]:
        rec(row)
    rec.close()
    cb = read_logs(tmp_path / "cb").frame
    assert cb["prompt_id"].tolist() == ["doc-1", "doc-1"] and cb["budget"].tolist() == [63, 63]
    assert cb["horizon"].tolist() == [15, 22] and cb["extended"].tolist() == [False, True]


def test_glance_rows_import_without_torch(tmp_path):
    f = write_jsonl(tmp_path / "round_log.jsonl", GLANCE_ROWS)
    code = ("import sys; sys.modules['torch'] = None; "
            "from glance_law.data.importers import import_logs; "
            f"imp = import_logs({str(f)!r}); "
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]; "
            "print(len(imp.rounds), sorted(set(imp.rounds.prompt_id)), [int(x) for x in imp.rounds.budget])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3 ['doc-1', 'img-9'] [63, 63, 31]"


# --------------------------------------------------------------------------
# vLLM and SGLang fixtures, built from their sources
# --------------------------------------------------------------------------

def prom_scrape(drafts, draft_tokens, accepted, per_pos, model="m"):
    """Text exposition of vLLM V1's SpecDecodingProm counters (vllm/v1/spec_decode/metrics.py):
    prometheus_client adds _total to counter names and a _created gauge."""
    lab = f'engine="0",model_name="{model}"'
    out = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
           "# TYPE vllm:spec_decode_num_drafts_total counter",
           f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(drafts)}",
           f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7e9",
           f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(draft_tokens)}",
           f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(accepted)}"]
    out += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {float(v)}'
            for i, v in enumerate(per_pos)]
    return "\n".join(out)


def test_vllm_prometheus_survival_exact(tmp_path):
    # interval 1: 10 drafts of K = 3: accepted 0 x2, 1 x3, 2 x1, 3 x4 -> per pos (8, 5, 4), 17 accepted
    # interval 2: +4 drafts, all fully accepted
    text = prom_scrape(10, 30, 17, [8, 5, 4]) + "\n" + prom_scrape(14, 42, 29, [12, 9, 8])
    f = tmp_path / "metrics.prom"
    f.write_text(text)
    assert detect_format(f) == "vllm"
    imp = import_logs(f)
    r = imp.rounds
    one = r[r.prompt_id == "interval-1"]["accepted"].value_counts().sort_index().to_dict()
    assert one == {0: 2, 1: 3, 2: 1, 3: 4}
    assert r[r.prompt_id == "interval-2"]["accepted"].tolist() == [3, 3, 3, 3]
    assert (r["horizon"] == 3).all() and r["aggregate"].all() and r["root_entropy"].isna().all()
    assert any("no prompt clustering is possible" in n for n in imp.notes)
    bad = tmp_path / "bad.prom"
    bad.write_text(prom_scrape(10, 30, 17, [5, 8, 4]))
    with pytest.raises(LogError, match="not consistent"):
        import_logs(bad)


def test_vllm_responses_per_request(tmp_path):
    # vLLM PR #48915: metrics.speculative_decoding in the OpenAI-compatible response
    resp = {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 54, "total_tokens": 65},
            "metrics": {"speculative_decoding": {"mean_acceptance_length": 1.2325581395348837,
                                                 "draft_acceptance_rate": 0.0775, "acceptance_histogram": [39, 1, 0, 3],
                                                 "num_spec_steps": 43, "num_accepted_draft_tokens": 10,
                                                 "num_draft_tokens": 129, "num_spec_tokens": 3}}}
    detailed = json.loads(json.dumps(resp))
    detailed["id"] = "chatcmpl-2"
    detailed["metrics"]["speculative_decoding"]["per_step_accepted"] = [3, 0, 1]
    detailed["metrics"]["speculative_decoding"]["num_spec_steps"] = 3
    f = write_jsonl(tmp_path / "responses.jsonl", [resp, {"data": detailed}])
    assert detect_format(f) == "vllm"
    imp = import_logs(f, task="chat")
    r = imp.rounds
    one = r[r.prompt_id == "chatcmpl-1"]
    assert len(one) == 43 and one["accepted"].sum() == 10 and (one["horizon"] == 3).all()
    assert r[r.prompt_id == "chatcmpl-2"]["accepted"].tolist() == [3, 0, 1]
    assert imp.prompts.set_index("prompt_id").loc["chatcmpl-1", "new_tokens"] == 54


def test_sglang_meta_info(tmp_path):
    # python/sglang/srt/managers/tokenizer_manager.py _calculate_spec_decoding_metrics
    def resp(rid, ct, completion, hist=None):
        meta = {"id": rid, "prompt_tokens": 20, "completion_tokens": completion, "e2e_latency": 0.5,
                "finish_reason": {"type": "stop"}, "spec_verify_ct": ct, "spec_accept_length": completion / ct,
                "spec_accept_rate": 0.5, "spec_accept_token_num": completion - ct, "spec_draft_token_num": 3 * ct}
        if hist is not None:
            meta["spec_accept_histogram"] = hist
        return {"text": "...", "meta_info": meta}
    f = write_jsonl(tmp_path / "sg.jsonl", [resp("a", 4, 10), resp("b", 5, 12, hist=[1, 2, 1, 1])])
    assert detect_format(f) == "sglang"
    imp = import_logs(f)
    p = imp.prompts.set_index("prompt_id")
    assert p.loc["a", "rounds"] == 4 and p.loc["a", "new_tokens"] == 10 and p.loc["a", "decode_ms"] == 500.0
    r = imp.rounds
    assert r["prompt_id"].tolist() == ["b"] * 5 and r["accepted"].tolist() == [0, 1, 1, 2, 3]
    assert (r["horizon"] == 3).all()


# --------------------------------------------------------------------------
# the ingest CLI, and fit/reduce on .jsonl directly
# --------------------------------------------------------------------------

def test_ingest_cli_writes_contract_parquet(tmp_path, capsys):
    from glance_law.ingest import main
    out = tmp_path / "out"
    rc = main(["spec-bench", str(SLICES), "--out", str(out), "--skip-bad", "--horizon", "llama2-7b-chat-ssd=4"])
    err = capsys.readouterr().err
    assert rc == 0 and "skipped corrupt line 4" in err and "no usable answers" in err
    logs = read_logs(out)
    assert logs.frame["root_entropy"].isna().all() and "turn" in logs.frame.columns
    prompts = read_logs(out, "prompts").frame
    assert len(prompts) == 3 + 3 + 2 + 2 + 11 + 6 + 3
    assert all(p.parent == out for p in out.iterdir())
    assert main(["spec-bench", str(SLICES / "test_bench__vicuna-7b-v1.3-eagle3-float16-temperature-0.0.jsonl.gz"),
                 "--out", str(tmp_path / "x")]) == 2
    assert "no usable answers" in capsys.readouterr().err


def test_reduce_accepts_jsonl(tmp_path):
    from glance_law.reduce import main
    f = SLICES / "vicuna-7b-v1.3-medusa.jsonl.gz"
    assert main([str(f), "--out", str(tmp_path / "r.parquet")]) == 0
    cells = pd.read_parquet(tmp_path / "r.parquet")
    r = import_logs(f).rounds          # output-ending rounds that accepted 0 have horizon 0: not drafted
    assert (cells["hbin"] == -1).all() and cells["n"].sum() == int((r["horizon"] > 0).sum()) < len(r)


def test_vllm_names_across_versions_and_exporters(tmp_path):
    # the same counters with the "vllm_" prefix of exporters that rewrite ":", without "_total", extra labels
    text = prom_scrape(10, 30, 17, [8, 5, 4])
    variant = (text.replace("vllm:", "vllm_").replace("_total{", "{")
               .replace('engine="0"', 'engine="0",instance="h:8000",job="vllm"'))
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(text)
    b.write_text(variant)
    assert detect_format(b) == "vllm"
    ra, rb = import_logs(a).rounds, import_logs(b).rounds
    assert sorted(ra["accepted"].tolist()) == sorted(rb["accepted"].tolist()) == [0, 0, 1, 1, 1, 2, 3, 3, 3, 3]


def test_sglang_newer_field_names(tmp_path):
    # newer SGLang: spec_num_correct_drafts / spec_num_proposed_drafts / spec_correct_drafts_histogram
    meta = {"id": "r", "completion_tokens": 9, "spec_verify_ct": 4, "spec_accept_length": 2.25,
            "spec_num_correct_drafts": 5, "spec_num_proposed_drafts": 12, "spec_correct_drafts_histogram": [1, 1, 1, 1]}
    f = write_jsonl(tmp_path / "sg.jsonl", [{"text": "", "meta_info": meta}])
    imp = import_logs(f)
    assert imp.rounds["accepted"].tolist() == [0, 1, 2, 3] and (imp.rounds["horizon"] == 3).all()
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"meta_info": dict(meta, spec_verify_ct="many")}])
    with pytest.raises(LogError, match="line 1: field 'spec_verify_ct' is 'many', not an integer >= 0"):
        import_logs(bad)


def test_run_separation_helpers_match_a_row_by_row_reading():
    """_distinct (the arms and prompt keys of a file, from dictionary codes) and _relabel (its
    one-entry dictionary shortcut) against reading every row as Python values: several chunks
    with different dictionaries, nulls, plain strings, a null-typed and an absent column."""
    import numpy as np
    import pyarrow as pa

    from glance_law.data import importers as imp

    rng = np.random.default_rng(3)

    def strings(n, pool, nulls):
        return [None if nulls and rng.random() < 0.2 else str(rng.choice(pool)) for _ in range(n)]

    def chunk(n, dict_enc, nulls):
        cols = {"drafter": strings(n, ["eagle", "medusa", "ar"], nulls), "task": strings(n, ["math", "qa"], nulls),
                "prompt_id": strings(n, [str(i) for i in range(40)], nulls), "target": [None] * n}
        t = pa.table({k: pa.array(v, pa.string()) for k, v in cols.items()})
        if dict_enc:
            t = pa.table({k: t.column(k).dictionary_encode() for k in t.column_names})
        return t

    tables = [chunk(50, True, False), pa.concat_tables([chunk(30, True, True), chunk(20, True, False)]),
              chunk(40, False, True), pa.table({"drafter": pa.array(["x"] * 5).dictionary_encode(),
                                                "target": pa.nulls(5)})]
    for t in tables:
        for names in (("target", "drafter"), ("task", "prompt_id", "drafter", "target"), ("drafter", "absent")):
            rows = [tuple(t.column(n).to_pylist() if n in t.column_names else [None] * t.num_rows) for n in names]
            assert imp._distinct(t, names) == set(zip(*rows))
        for old in ("eagle", "x", "none such"):
            got = imp._relabel(t, old, "new [run]").column("drafter")
            assert pa.types.is_dictionary(got.type)
            assert got.to_pylist() == ["new [run]" if d == old else d for d in t.column("drafter").to_pylist()]
    const = pa.table({"drafter": pa.DictionaryArray.from_arrays(pa.array(np.zeros(7, np.int32)), pa.array(["eagle"]))})
    fast = imp._relabel(const, "eagle", "eagle [b]").column("drafter")
    slow = const.column("drafter").cast(pa.string()).dictionary_encode()      # what re-encoding the rows gives
    assert fast.type == slow.type and fast.to_pylist() == ["eagle [b]"] * 7 and imp._distinct(const, ("drafter",)) == {("eagle",)}


def test_with_categories_matches_a_row_by_row_reading():
    """with_categories (decided on the columns' dictionaries) against reading every row: a row takes
    its question's category only where its task is 'unknown' and the question file holds its
    prompt_id; dictionary and plain text columns, several chunks, nulls; no hit: the same result."""
    import pyarrow as pa

    from glance_law.data import importers as imp
    from glance_law.data.importers.common import FileResult

    rng = np.random.default_rng(5)
    cats = {str(i): f"cat{i % 3}" for i in range(0, 30, 2)}

    def part(n, dict_enc):
        task = [None if rng.random() < 0.1 else str(rng.choice(["unknown", "math", "qa"])) for _ in range(n)]
        pid = [None if rng.random() < 0.1 else str(rng.integers(0, 40)) for _ in range(n)]
        t = pa.table({"task": pa.array(task, pa.string()), "prompt_id": pa.array(pid, pa.string())})
        return pa.table({k: t.column(k).dictionary_encode() for k in t.column_names}) if dict_enc else t

    for t in (part(60, True), pa.concat_tables([part(30, True), part(25, True)]), part(50, False)):
        rows = list(zip(t.column("task").to_pylist(), t.column("prompt_id").to_pylist()))
        want = [cats.get(p, x) if x == "unknown" and p is not None else x for x, p in rows]
        taken = {p for x, p in rows if x == "unknown" and p in cats}
        notes: list = []
        res = imp.with_categories(FileResult("f", "spec-bench", t, None), cats, notes)
        assert res.rounds.column("task").to_pylist() == want
        assert res.rounds.schema.field("task").type == t.schema.field("task").type
        assert bool(notes) == bool(taken)
        none = imp.with_categories(FileResult("f", "spec-bench", t, None), {"99": "x"}, [])
        assert none.rounds is t


def test_plain_values_checked_without_a_type_per_value_when_the_text_holds_no_true(tmp_path):
    """Lines.without_true and _plain_ints: with no JSON true in the text, the sum and the conversion
    refuse what the per-value type check refuses; a true among the values is still refused (and its
    answer left out with a note, like a string or a fraction)."""
    from glance_law.data.importers.common import Lines
    from glance_law.data.importers.spec_bench import _plain_ints

    cases = [[[1, 2], [3]], [[1, 2.0]], [[1, "2"]], [[1, None]], [[1, False]], [[1, 2 ** 64]], [[1, [2]]],
             [[1, {"a": 1}]], [[1.5]], [[]], [[1], []], [["x"]], [[float("nan")]], [[0, 2]]]
    for lists in cases:
        fast, slow = _plain_ints(lists, True), _plain_ints(lists, False)
        assert (fast is None) == (slow is None), lists
        assert fast is None or fast.tolist() == slow.tolist()
    assert _plain_ints([[1, True]], False) is None
    holds = [b'{"a": [1, true]}', b'{"a":true}', b'true', b'{"a": [1,\n  true]}', b'{"t": "x, true"}']
    free = [b'{"t": "it is true"}', b'{"a": [1, 2], "t": "true"}', b'{"untrue": 1}', b'']
    assert not any(Lines("f", [], [], t).without_true() for t in holds)
    assert all(Lines("f", [], [], t).without_true() for t in free) and not Lines("f", [], []).without_true()
    recs = [answer(1, "qa", [2], [2, 1], [3], [0.1]), answer(2, "qa", [2], [1, 1], [2], [0.1])]
    recs[1]["choices"][0]["accept_lengths"] = [1, True]
    imp = import_logs(write_jsonl(tmp_path / "t.jsonl", recs))
    assert imp.prompts["prompt_id"].astype(str).tolist() == ["1"]
    assert any("True is not an integer" in n and "question_id 2" in n for n in imp.notes)


def test_an_accept_length_beyond_64_bits_is_left_out_with_a_note(tmp_path):
    """A corrupt accept_lengths value of 2^64 makes its answer unreadable (left out and named in
    a note, like any impossible value), not a bare OverflowError; the file's other answers import."""
    f = write_jsonl(tmp_path / "a.jsonl", [answer(1, "writing", [2], [3, 2], [5], [0.5]),
                                           answer(2, "math", [2], [2, 2 ** 64], [6], [0.1])])
    imp = import_logs(f)
    assert imp.rounds["prompt_id"].astype(str).tolist() == ["1", "1"]
    assert imp.rounds["accepted"].tolist() == [2, 1]
    assert any("1 answer(s) with unreadable or impossible values left out" in n and "beyond any step" in n
               for n in imp.notes), imp.notes
