"""The field variants of the Spec-Bench / EAGLE / Medusa ``model_answer`` format that the
answer-writing code of those repositories (and their forks) can produce, each made here by
transforming real lines of ../shared/realdata the way that code writes them (no number is
invented), then imported; the expected rounds are re-derived from the raw JSON in this file.
Each variant imports with a note saying what was done, or is refused in one line (file,
field, fix). The sources of each variant (repository @ commit : file) are in
docs/your-logs.md.
"""
from __future__ import annotations

import copy
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from glance_law.data.importers import import_logs
from glance_law.io import LogError, read_logs

REAL = Path(__file__).parent.parent.parent / "shared" / "realdata" / "spec-bench"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason="../shared/realdata is not beside this checkout")

MEDUSA_MT = "bnukh/mt_bench__vicuna-7b-v1.3-medusa-float16-temperature-0.0.jsonl.gz"      # two turns
SPS_MT = "bnukh/mt_bench__vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl.gz"
EAGLE_SB = "bnukh/spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"
VANILLA_SB = "bnukh/spec_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"
SSD_RUNS = "vase/llama2-7b-chat-ssd-float16-temperature-0.0.jsonl.gz"                     # appended runs
VASE_MEDUSA = "vase/vicuna-7b-v1.3-medusa.jsonl.gz"                                         # two 'ERROR' turns


def real(name: str, n: int | None = None, two_turns: bool = False) -> list[dict]:
    """The first ``n`` parseable answer records of a real file (deep copies)."""
    out = []
    for line in gzip.decompress((REAL / name).read_bytes()).split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        c = rec["choices"][0]
        if not c.get("accept_lengths") or (two_turns and len(c["decoding_steps"]) != 2):
            continue
        out.append(rec)
        if n is not None and len(out) == n:
            break
    return copy.deepcopy(out)


def write(path: Path, recs, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in recs).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def per_turn(recs) -> dict:
    """(question_id, turn) -> the turn's accept_lengths, from the records as Spec-Bench wrote them."""
    out = {}
    for r in recs:
        c = r["choices"][0]
        al, s = c["accept_lengths"], 0
        for t, d in enumerate(c["decoding_steps"]):
            out[(str(r["question_id"]), t)] = al[s:s + d]
            s += d
    return out


def got_turns(imp) -> dict:
    r = imp.rounds
    out: dict = {}
    for q, t, a in zip(r["prompt_id"].astype(str), r["turn"].astype(int), r["accepted"].astype(int)):
        out.setdefault((q, t), []).append(a + 1)
    return out


def one_line_refusal(exc: LogError, path: Path, *words):
    msg = str(exc)
    assert "\n" not in msg and str(path) in msg, msg
    for w in words:
        assert w in msg, msg


# --------------------------------------------------------------------------
# Spec-Bench's own history
# --------------------------------------------------------------------------

def test_idxs_instead_of_decoding_steps_split_the_turns(tmp_path):
    """hemingkx/Spec-Bench @ eace32d evaluation/eval.py (March-April 2024): per-turn ``idxs``
    (the loop index of the turn's last step) beside the flat accept_lengths, no decoding_steps."""
    recs = real(MEDUSA_MT, 12, two_turns=True)
    want = per_turn(recs)
    for r in recs:
        c = r["choices"][0]
        c["idxs"] = [d - 1 for d in c.pop("decoding_steps")]
    imp = import_logs(write(tmp_path / "v.jsonl", recs))
    assert got_turns(imp) == want
    assert any("per-turn idxs" in n and "idx + 1 steps" in n for n in imp.notes)
    assert imp.prompts["rounds"].sum() == sum(len(v) for v in want.values())


def test_misspelt_accept_lengths_key_with_idxs(tmp_path):
    """Spec-Bench @ bc8a422 inference_pld/sps/lookahead.py wrote ``"accept_lengths:"`` (a colon
    in the key) beside ``idxs``: the per-step lengths are read, not just prompt rows."""
    recs = real(SPS_MT, 10, two_turns=True)
    want = per_turn(recs)
    for r in recs:
        c = r["choices"][0]
        c["idxs"] = [d - 1 for d in c.pop("decoding_steps")]
        c["accept_lengths:"] = c.pop("accept_lengths")
    imp = import_logs(write(tmp_path / "sps.jsonl", recs))
    assert got_turns(imp) == want
    assert any("'accept_lengths:'" in n and "read as accept_lengths" in n for n in imp.notes)
    assert set(imp.rounds["drafter"].astype(str)) == {"sps-68m"}


def test_recycling_step_counter_one_short(tmp_path):
    """Spec-Bench inference_recycling.py counts one step fewer than it logs lengths per turn."""
    recs = real(MEDUSA_MT, 10, two_turns=True)
    want = per_turn(recs)
    for r in recs:
        c = r["choices"][0]
        c["decoding_steps"] = [d - 1 for d in c["decoding_steps"]]
        r["model_id"] = "vicuna-7b-v1.3-recycling"
    imp = import_logs(write(tmp_path / "rec.jsonl", recs))
    assert got_turns(imp) == want
    # split where the running sum meets new_tokens, or (where those disagree) by decoding_steps + 1
    assert any("decoding_steps + 1" in n or "meets each turn's new_tokens" in n for n in imp.notes)
    for r in recs:
        c = r["choices"][0]
        c["new_tokens"] = [x + 1 for x in c["new_tokens"]]
    imp = import_logs(write(tmp_path / "rec2.jsonl", recs))
    assert got_turns(imp) == want
    assert any("decoding_steps + 1" in n for n in imp.notes)
    assert int(imp.rounds["drafted_horizon"].max()) == 6


def test_error_turns_repeat_the_previous_turn_and_are_left_out(tmp_path):
    """eval.py catches a RuntimeError, writes turn text "ERROR" and appends the stale step,
    token, time and accept_length variables of the previous turn (seen in the real VASE Medusa
    file, question ids 288 and 317): such turns are left out and noted."""
    recs = real(VASE_MEDUSA)
    bad = [r for r in recs if r["choices"][0]["turns"] == ["ERROR"]]
    assert [str(r["question_id"]) for r in bad] == ["288", "317"]
    imp = import_logs(REAL / VASE_MEDUSA)
    assert not {"288", "317"} & set(imp.prompts["prompt_id"].astype(str))
    good = [r for r in recs if r not in bad]
    assert len(imp.rounds) == sum(len(r["choices"][0]["accept_lengths"]) for r in good)
    assert any("whose text is 'ERROR'" in n and "288, 317" in n for n in imp.notes)
    # a two-turn answer whose second turn failed: eval.py repeats turn 0's numbers there
    recs = real(MEDUSA_MT, 4, two_turns=True)
    c = recs[1]["choices"][0]
    first = c["accept_lengths"][:c["decoding_steps"][0]]
    c["turns"][1] = "ERROR"
    c["accept_lengths"] = first + first
    for k in ("decoding_steps", "new_tokens", "wall_time"):
        c[k] = [c[k][0], c[k][0]]
    imp = import_logs(write(tmp_path / "err.jsonl", recs))
    q = str(recs[1]["question_id"])
    row = imp.prompts[imp.prompts["prompt_id"].astype(str) == q].iloc[0]
    assert row["turns"] == 1 and row["new_tokens"] == c["new_tokens"][0] and row["rounds"] == len(first)
    assert got_turns(imp)[(q, 0)] == first and (q, 1) not in got_turns(imp)


def test_several_choices_are_repeated_decodes(tmp_path):
    """eval.py writes one choice per --num-choices sample; here the two real decodes of each
    question in VASE's appended llama2 SSD runs become two choices of one answer."""
    recs = real(SSD_RUNS)
    first: dict = {}
    merged = []
    for r in recs:
        q = r["question_id"]
        if q in first and len(merged) < 8:
            m = copy.deepcopy(first[q])
            m["choices"].append(dict(r["choices"][0], index=1))
            merged.append(m)
        first.setdefault(q, r)
    imp = import_logs(write(tmp_path / "choices.jsonl", merged), horizon={"llama2-7b-chat-ssd": 4})
    assert len(imp.rounds) == sum(len(c["accept_lengths"]) for m in merged for c in m["choices"])
    runs = Counter(x.rsplit("#", 1)[-1] if "#" in x else "" for x in imp.prompts["run_id"].astype(str))
    assert runs == {"": len(merged), "choice1": len(merged)}
    assert imp.prompts["prompt_id"].nunique() == len(merged)
    assert any("several choices" in n for n in imp.notes)
    assert any(n.startswith("runs: ") and "2 runs of several choices per answer are pooled" in n for n in imp.notes)


# --------------------------------------------------------------------------
# the EAGLE, Medusa and Hydra repositories' own scripts
# --------------------------------------------------------------------------

def test_eagle_medusa_repo_idxs_only(tmp_path):
    """SafeAILab/EAGLE gen_ea_answer_*.py / gen_baseline_answer_*.py, FasterDecoding/Medusa and
    zankner/Hydra llm_judge/gen_model_answer_*.py: ``idxs``, ``new_tokens``, ``wall_time``; no
    category, no per-step lengths; model_id ``medusa-<target>-temperature-...`` or EAGLE's
    ``ess-<target>-fp16[-baseline]-temperature-0.0``."""
    med = real(MEDUSA_MT, 10, two_turns=True)
    van = real(VANILLA_SB, 10)
    steps = {str(r["question_id"]): sum(r["choices"][0]["decoding_steps"]) for r in med}

    def strip(recs, model_id):
        out = []
        for r in recs:
            c = r["choices"][0]
            out.append({"question_id": r["question_id"], "answer_id": r["answer_id"], "model_id": model_id,
                        "choices": [{"index": 0, "turns": c["turns"], "idxs": [d - 1 for d in c["decoding_steps"]],
                                     "new_tokens": c["new_tokens"], "wall_time": c["wall_time"]}],
                        "tstamp": r["tstamp"]})
        return out
    d = tmp_path / "mt_bench" / "model_answer"
    f1 = write(d / "medusa.jsonl", strip(med, "medusa-vicuna-7b-v1.3-temperature-0.0-posterior_threshold-0.09"
                                               "-posterior_alpha-0.3"))
    imp = import_logs(f1)
    assert len(imp.rounds) == 0
    assert dict(zip(imp.prompts["prompt_id"].astype(str), imp.prompts["rounds"])) == steps
    assert set(imp.prompts["drafter"].astype(str)) == {"medusa"} and imp.parts[0][4]["target"] == "vicuna-7b-v1.3"
    assert any("without a category" in n for n in imp.notes)
    f2 = write(d / "base.jsonl", strip(van, "ess-vicuna-7b-fp16-baseline-temperature-0.0"))
    f3 = write(d / "ea.jsonl", strip(med, "ess-vicuna-7b-fp16-temperature-0.0"))
    imp = import_logs([f2, f3])
    arms = set(zip(imp.prompts["target"].astype(str), imp.prompts["drafter"].astype(str)))
    assert ("vicuna-7b", "ar") in arms                                       # the baseline is the AR arm
    assert ("vicuna-7b", "eagle") in arms                                    # ess-<target>: EAGLE's scripts
    assert any("'ess-vicuna-7b-fp16-temperature-0.0' is the EAGLE repository scripts' default id" in n
               and "the eagle method" in n for n in imp.notes)
    assert any("'ess-vicuna-7b-fp16-baseline-temperature-0.0' is the EAGLE" in n and "baseline" in n
               for n in imp.notes)


def test_idxs_that_count_tokens_are_refused(tmp_path):
    """Spec-Bench's March 2024 PLD and baseline scripts wrote idx = new_token - 1: for a
    speculative method those are not step counts."""
    recs = real(EAGLE_SB, 6)
    for r in recs:
        c = r["choices"][0]
        c["idxs"] = [n - 1 for n in c["new_tokens"]]
        del c["decoding_steps"], c["accept_lengths"]
        r["model_id"] = "vicuna-7b-v1.3-pld-float16"
    f = write(tmp_path / "pld.jsonl", recs)
    with pytest.raises(LogError) as e:
        import_logs(f)
    one_line_refusal(e.value, f, "idxs", "count tokens")


# --------------------------------------------------------------------------
# model ids, files and values
# --------------------------------------------------------------------------

@pytest.mark.parametrize("model_id,target,drafter,horizon", [
    ("vicuna-13b-v1.3-eagle2-float16-temperature-0.0", "vicuna-13b-v1.3", "eagle2", 6),
    ("llama-2-70b-chat-eagle3-float16-temperature-0.0", "llama-2-70b-chat", "eagle3", 6),
    ("vicuna-33b-v1.3-space-float16-temp-0.0", "vicuna-33b-v1.3", "space", 5),
    ("Meta-Llama-3-8B-Instruct-eagle-bfloat16", "Meta-Llama-3-8B-Instruct", "eagle", 5),
    ("eagle-llama-2-13b-chat", "llama-2-13b-chat", "eagle", 5),
])
def test_other_targets_and_methods(tmp_path, model_id, target, drafter, horizon):
    recs = real(EAGLE_SB, 8)
    want = per_turn(recs)
    for r in recs:
        r["model_id"] = model_id
    imp = import_logs(write(tmp_path / f"{model_id}.jsonl", recs))
    assert got_turns(imp) == want
    assert set(imp.rounds["target"].astype(str)) == {target} and set(imp.rounds["drafter"].astype(str)) == {drafter}
    assert int(imp.rounds["drafted_horizon"].max()) == horizon


@pytest.mark.parametrize("method,hint", [
    ("pld", "draft_num_candidate_tokens=10"), ("lade-level-5-win-7-guess-7", "LEVEL - 1"), ("rest", "trie"),
    ("samd", "suffix-automaton"), ("swift", "layer skipping"), ("kangaroo", None), ("token_recycle", None),
])
def test_methods_without_a_fixed_depth_refused_then_imported_with_horizon(tmp_path, method, hint):
    recs = real(EAGLE_SB, 5)
    want = per_turn(recs)
    for r in recs:
        r["model_id"] = f"vicuna-7b-v1.3-{method}-float16"
    f = write(tmp_path / "m.jsonl", recs)
    with pytest.raises(LogError) as e:
        import_logs(f)
    one_line_refusal(e.value, f, "--horizon", *([hint] if hint else []))
    imp = import_logs(f, horizon=6)
    assert got_turns(imp) == want


def test_swift_style_answers_without_question_id_and_a_summary_line(tmp_path):
    """SWIFT-style writers (hemingkx/SWIFT evaluation): no question_id, ``turns`` one string,
    and a closing summary object (``Mean accepted tokens`` ...) without choices."""
    recs = real(EAGLE_SB, 5)
    want = [len(r["choices"][0]["accept_lengths"]) for r in recs]
    out = []
    for r in recs:
        c = r["choices"][0]
        out.append({"model_id": "llama-2-13b-swift", "choices": [{"turns": c["turns"][0],
                    "decoding_steps": c["decoding_steps"], "new_tokens": c["new_tokens"], "wall_time": c["wall_time"],
                    "accept_lengths": c["accept_lengths"]}], "tstamp": r["tstamp"]})
    al = [v for r in recs for v in r["choices"][0]["accept_lengths"]]
    out.append({"Mean accepted tokens": sum(al) / len(al), "Best Skip Ratio": 0.45})
    f = write(tmp_path / "swift.jsonl", out)
    imp = import_logs(f, horizon={"swift": 6})
    assert imp.prompts["prompt_id"].astype(str).tolist() == [f"line-{i}" for i in range(1, 6)]
    assert imp.rounds.groupby("prompt_id", observed=True).size().tolist() == want
    assert any("1 record(s) without a 'choices' list ignored" in n for n in imp.notes)
    assert any("without a question_id" in n for n in imp.notes)


def test_question_file_in_the_benchmark_folder_and_string_ids(tmp_path):
    """Spec-Bench's layout data/<bench>/model_answer/<model_id>.jsonl with data/<bench>/question.jsonl;
    FastChat forks with string question ids (``"mt_bench_81"``)."""
    recs = real(MEDUSA_MT, 6, two_turns=True)
    cats = {str(r["question_id"]): r["category"] for r in recs}
    qs = [{"question_id": f"mt_bench_{r['question_id']}", "category": r["category"], "turns": ["..."] * 2}
          for r in recs]
    for r in recs:
        r["question_id"] = f"mt_bench_{r['question_id']}"
        del r["category"]
    bench = tmp_path / "data" / "mt_bench"
    write(bench / "question.jsonl", qs)
    f = write(bench / "model_answer" / "vicuna-7b-v1.3-medusa-float16.jsonl.gz", recs, gz=True)
    imp = import_logs(f)
    got = dict(zip(imp.prompts["prompt_id"].astype(str), imp.prompts["task"].astype(str)))
    assert got == {f"mt_bench_{q}": c for q, c in cats.items()}
    assert imp.parts[0][4]["run_id"] == "mt_bench/vicuna-7b-v1.3-medusa-float16"


def test_json_array_file_and_non_finite_wall_time(tmp_path):
    recs = real(EAGLE_SB, 4)
    want = per_turn(recs)
    recs[0]["choices"][0]["wall_time"] = [float("inf")]
    f = tmp_path / "answers.json"
    f.write_text(json.dumps(recs))                   # json.dumps writes Infinity, as Python's writers do
    imp = import_logs(f)
    assert got_turns(imp) == want
    assert imp.prompts["decode_ms"].isna().sum() == 1
    assert any("infinite" in n for n in imp.notes)


# --------------------------------------------------------------------------
# the command lines over a folder of variants
# --------------------------------------------------------------------------

def variant_folder(root: Path) -> tuple[Path, int]:
    """A benchmark folder of variants (each from real lines) and its expected round count."""
    d = root / "data" / "mt_bench" / "model_answer"
    med = real(MEDUSA_MT, 16, two_turns=True)
    n = sum(len(r["choices"][0]["accept_lengths"]) for r in med)
    old = copy.deepcopy(med)
    for r in old:
        c = r["choices"][0]
        c["idxs"] = [x - 1 for x in c.pop("decoding_steps")]
    write(d / "vicuna-7b-v1.3-medusa-float16-temperature-0.0.jsonl", old)
    van = real(VANILLA_SB)
    ids = {r["question_id"] for r in med}
    van = [r for r in van if r["question_id"] in ids]
    write(d / "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz", van, gz=True)
    n += sum(len(r["choices"][0]["accept_lengths"]) for r in van)
    sps = real(SPS_MT, 16, two_turns=True)
    for r in sps:
        c = r["choices"][0]
        c["accept_lengths:"] = c.pop("accept_lengths")
    write(d / "vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl", sps)
    n += sum(len(r["choices"][0]["accept_lengths:"]) for r in sps)
    return d, n


def test_cli_ingest_fit_policy_on_variants(tmp_path, capsys):
    import pyarrow.parquet as pq

    from glance_law.cli.fit import main as fit
    from glance_law.cli.ingest import main as ingest
    from glance_law.policy.cli import main as policy
    d, n = variant_folder(tmp_path)
    out = tmp_path / "out"
    assert ingest(["auto", str(d), "--out", str(out)]) == 0
    got = sum(pq.read_metadata(f).num_rows for f in out.glob("rounds-*.parquet"))
    assert got == n
    assert len(read_logs(str(d), "rounds").frame) == n
    capsys.readouterr()
    assert fit([str(d), "--timing", str(d / "*vanilla*")]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert policy([str(d), "--budget", "3", "--drafter", "sps-68m", "--bootstrap", "20", "--folds", "3"]) == 0
    err = capsys.readouterr().err                # the importers' notes are shown by policy too
    assert "note:" in err and "read as accept_lengths" in err and "idx + 1 steps" in err
    # a refusal is one line on stderr, exit 2
    recs = real(EAGLE_SB, 3)
    for r in recs:
        r["model_id"] = "vicuna-7b-v1.3-pld-float16"
    bad = write(tmp_path / "bad" / "vicuna-7b-v1.3-pld-float16.jsonl", recs)
    capsys.readouterr()
    for cli, argv in ((ingest, ["auto", str(bad), "--out", str(tmp_path / "o2")]), (fit, [str(bad)]),
                      (policy, [str(bad), "--budget", "3"])):
        assert cli(argv) == 2
        lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert len(lines) == 1 and str(bad) in lines[0] and "--horizon" in lines[0], lines
    assert policy([str(d), str(bad), "--budget", "3", "--drafter", "sps-68m", "--bootstrap", "0", "--folds", "3",
                   "--skip-bad"]) == 0
    assert f"skipped {bad}" in capsys.readouterr().err


def test_cli_report_on_variants(tmp_path, capsys):
    from glance_law.cli.report import main as report
    d, _ = variant_folder(tmp_path)
    out = tmp_path / "rep"
    assert report([str(d), "--out", str(out), "--skip-bad", "--jobs", "1", "--tail-bootstrap", "20",
                   "--order-bootstrap", "20", "--timing-bootstrap", "20", "--skip", "policy"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and (out / "index.md").is_file()


def test_eagle_speed_py_model_ids_and_a_baseline_without_token_counts(tmp_path):
    """SafeAILab/EAGLE eagle/evaluation/speed.py @ 2320d52 compares
    ``llama-2-chat-70b-fp16-ea-in-temperature-0.0`` (EAGLE) with ``...-fp16-base-in-...`` (its
    baseline, whose new_tokens are 0: speed.py re-tokenises the text): the method is read after
    the dtype, and the baseline's tokens come from idxs (one token per step), with a note."""
    med = real(MEDUSA_MT, 6, two_turns=True)

    def strip(recs, model_id, zero):
        return [{"question_id": r["question_id"], "model_id": model_id,
                 "choices": [{"index": 0, "turns": r["choices"][0]["turns"],
                              "idxs": [d - 1 for d in r["choices"][0]["decoding_steps"]],
                              "new_tokens": [0] * len(r["choices"][0]["new_tokens"]) if zero
                              else r["choices"][0]["new_tokens"], "wall_time": r["choices"][0]["wall_time"]}]}
                for r in recs]
    ea = write(tmp_path / "ea.jsonl", strip(med, "llama-2-chat-70b-fp16-ea-in-temperature-0.0", False))
    base = write(tmp_path / "base.jsonl", strip(med, "llama-2-chat-70b-fp16-base-in-temperature-0.0", True))
    imp = import_logs([ea, base])
    p = imp.prompts.assign(drafter=imp.prompts["drafter"].astype(str), target=imp.prompts["target"].astype(str))
    assert set(zip(p["target"], p["drafter"])) == {("llama-2-chat-70b", "eagle"), ("llama-2-chat-70b", "ar")}
    ar = p[p["drafter"] == "ar"].set_index(p.loc[p["drafter"] == "ar", "prompt_id"].astype(str))
    for r in med:
        assert ar.loc[str(r["question_id"]), "new_tokens"] == sum(r["choices"][0]["decoding_steps"])
    assert any("new_tokens = 0" in n and "idx + 1" in n for n in imp.notes)
    eagle = p[p["drafter"] == "eagle"]
    assert eagle["new_tokens"].sum() == sum(sum(r["choices"][0]["new_tokens"]) for r in med)   # kept as logged


def test_lookahead_refusal_names_the_level_from_the_model_id(tmp_path):
    """Spec-Bench's lookahead ids carry LEVEL (``...-lade-level-5-win-7-guess-7-...``): the refusal
    names --horizon lade=LEVEL - 1."""
    recs = real(EAGLE_SB, 3)
    for r in recs:
        r["model_id"] = "vicuna-7b-v1.3-lade-level-5-win-7-guess-7-float16"
    f = write(tmp_path / "lade.jsonl", recs)
    with pytest.raises(LogError) as e:
        import_logs(f)
    one_line_refusal(e.value, f, "--horizon lade=4")
