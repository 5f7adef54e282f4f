"""An independent audit of the spec-bench importer: the expected rounds of every file in
../shared/realdata computed here from scratch (json and gzip only, none of the project's
code), compared with ``import_logs``; and the format variants a held-out file may have,
each on a tiny synthetic file: it imports, or is refused in one line naming the file, never
with a traceback."""
from __future__ import annotations

import gzip
import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from glance_law.data.importers import import_logs
from glance_law.io import LogError

REAL = Path(__file__).parent.parent.parent / "shared" / "realdata"
EAGLE = "vicuna-7b-v1.3-eagle-float16-temperature-0.0"


# --------------------------------------------------------------------------
# the audit: expected rounds per file, from the raw lines
# --------------------------------------------------------------------------

def expected(path: Path) -> dict:
    """What an honest import of one model_answer file holds, from its raw lines alone."""
    raw = gzip.decompress(path.read_bytes())
    seen: Counter = Counter()
    out = {"rounds": 0, "accepted": 0, "prompts": 0, "per_turn": {}, "runs": Counter(), "corrupt": 0,
           "empty": 0, "values": Counter()}
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            out["corrupt"] += 1
            continue
        qid = str(rec["question_id"])
        seen[qid] += 1
        k = seen[qid]
        ch = rec["choices"][0]
        al, ds = ch["accept_lengths"], ch["decoding_steps"]
        if not al:
            out["empty"] += 1
            continue
        assert sum(ds) == len(al), path          # the README: true of every file here
        # a turn whose text is "ERROR" repeats the previous turn's numbers (eval.py's stale variables): not data
        starts = [sum(ds[:t]) for t in range(len(ds))]
        keep = [t for t in range(len(ds)) if ch["turns"][t].strip() != "ERROR"]
        out["error_turns"] = out.get("error_turns", 0) + len(ds) - len(keep)
        if not keep:
            continue
        out["prompts"] += 1
        out["runs"][k] += 1
        for t in keep:
            vals = al[starts[t]:starts[t] + ds[t]]
            out["rounds"] += len(vals)
            out["accepted"] += sum(v - 1 for v in vals)
            out["values"].update(vals)
            if ds[t]:
                out["per_turn"][(k, qid, t)] = ds[t]
    return out


def real_answer_files():
    if not REAL.is_dir():
        return []
    return [f for f in sorted((REAL / "spec-bench").rglob("*.jsonl.gz")) if "question" not in f.name]


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/realdata is not beside this checkout")
@pytest.mark.parametrize("path", real_answer_files(), ids=lambda p: p.name[:60])
def test_audit_every_real_file(path):
    want = expected(path)
    if want["prompts"] == 0:
        with pytest.raises(LogError) as e:
            import_logs(path, skip_bad=True)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
        assert f"{want['empty']} with empty accept_lengths" in str(e.value)
        return
    imp = import_logs(path, skip_bad=True)
    r, p = imp.rounds, imp.prompts
    assert len(r) == want["rounds"]
    assert int(r["accepted"].astype(int).sum()) == want["accepted"]
    assert Counter((r["accepted"].astype(int) + 1).tolist()) == want["values"]
    assert len(p) == want["prompts"]

    def run_k(run_id: str) -> int:
        return int(run_id.rsplit("#run", 1)[1]) if "#run" in run_id else 1
    assert Counter(run_k(x) for x in p["run_id"].astype(str)) == want["runs"]
    got = defaultdict(int)
    ends = defaultdict(int)
    for run_id, qid, turn, end in zip(r["run_id"].astype(str), r["prompt_id"].astype(str), r["turn"].astype(int),
                                      r["ends_output"].astype(bool)):
        key = (run_k(run_id), qid, turn)
        got[key] += 1
        ends[key] += end
    assert dict(got) == want["per_turn"]
    assert set(ends.values()) == {1}                       # exactly one output-ending round per turn
    # the last round of each turn is the output-ending one; horizon = accepted there
    last = r[r["ends_output"].astype(bool)]
    assert (last["horizon"] == last["accepted"]).all()
    assert sum("skipped corrupt line" in n for n in imp.notes) == want["corrupt"]
    assert any("whose text is 'ERROR'" in n for n in imp.notes) == bool(want.get("error_turns"))
    if len(want["runs"]) > 1:
        assert any(f"split by order of appearance into {len(want['runs'])} runs" in n for n in imp.notes)


# --------------------------------------------------------------------------
# format variants, each on a tiny synthetic file
# --------------------------------------------------------------------------

def rec(qid=1, cat="qa", steps=(2,), al=(3, 2), nt=(5,), wt=(0.5,), model=EAGLE, **extra):
    c = {"index": 0, "turns": ["t"] * len(steps), "decoding_steps": list(steps), "new_tokens": list(nt),
         "wall_time": list(wt), "accept_lengths": list(al)}
    r = {"question_id": qid, "category": cat, "answer_id": "a", "model_id": model, "choices": [c], "tstamp": 1.0}
    r.update(extra)
    return r


def write(path: Path, recs, *, sep="\n", trailing=True, bom=False, gz=False) -> Path:
    text = sep.join(x if isinstance(x, str) else json.dumps(x) for x in recs) + (sep if trailing else "")
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def frames(imp):
    r = imp.rounds
    return r[["prompt_id", "turn", "round", "accepted", "horizon", "ends_output"]].astype(str).values.tolist()


def test_line_framing_variants_read_alike(tmp_path):
    recs = [rec(1), rec(2, steps=(1, 2), al=(2, 4, 1), nt=(2, 5), wt=(0.1, 0.2))]
    clean = frames(import_logs(write(tmp_path / "clean.jsonl", recs)))
    variants = {"crlf.jsonl": dict(sep="\r\n"), "notrail.jsonl": dict(trailing=False), "bom.jsonl": dict(bom=True),
                "gz.jsonl.gz": dict(gz=True), "bomgz.jsonl.gz": dict(bom=True, gz=True, sep="\r\n")}
    for name, kw in variants.items():
        assert frames(import_logs(write(tmp_path / name, recs, **kw))) == clean, name
    blank = write(tmp_path / "blank.jsonl", ["", json.dumps(recs[0]), "   ", "", json.dumps(recs[1])])
    assert frames(import_logs(blank)) == clean
    extra = [dict(r, foo={"bar": [1]}, choices=[dict(r["choices"][0], logprobs=None)]) for r in recs]
    assert frames(import_logs(write(tmp_path / "extra.jsonl", extra))) == clean


def test_question_id_as_string_pairs_with_int(tmp_path):
    imp = import_logs([write(tmp_path / "a.jsonl", [rec("81")]),
                       write(tmp_path / "b.jsonl", [rec(81, model="vicuna-7b-v1.3-vanilla-float16-temp-0.0",
                                                        steps=(5,), al=(1,) * 5)])])
    assert set(imp.prompts["prompt_id"].astype(str)) == {"81"}


def test_several_choices_each_a_repeated_decode(tmp_path):
    r = rec(1)
    r["choices"].append(dict(r["choices"][0], index=1, accept_lengths=[6, 6], decoding_steps=[2]))
    imp = import_logs(write(tmp_path / "c.jsonl", [r]))
    assert imp.rounds["accepted"].tolist() == [2, 1, 5, 5]
    assert [x.rsplit("/", 1)[-1] for x in imp.rounds["run_id"].astype(str)] == ["c", "c", "c#choice1", "c#choice1"]
    assert set(imp.rounds["prompt_id"].astype(str)) == {"1"}          # one cluster
    assert any("several choices" in n and "every choice imported" in n for n in imp.notes)


def test_missing_category_with_and_without_question_file(tmp_path):
    a = tmp_path / "alone"
    a.mkdir()
    r = rec(7)
    del r["category"]
    imp = import_logs(write(a / "x.jsonl", [r]))
    assert set(imp.rounds["task"]) == {"unknown"}
    assert any("without a category" in n and "no question.jsonl beside it" in n and "--task" in n for n in imp.notes)
    assert set(import_logs(a / "x.jsonl", task="chat").rounds["task"]) == {"chat"}
    b = tmp_path / "bench"
    (b / "model_answer").mkdir(parents=True)
    write(b / "question.jsonl", [{"question_id": 7, "category": "math", "turns": ["q"]}])
    imp = import_logs(write(b / "model_answer" / "x.jsonl", [r]))
    assert set(imp.rounds["task"]) == {"math"} and not any("without a category" in n for n in imp.notes)


def test_scalars_per_turn_and_lists_per_turn(tmp_path):
    r = rec(1)
    c = r["choices"][0]
    c.update(decoding_steps=2, new_tokens=5, wall_time=0.5)
    imp = import_logs(write(tmp_path / "s.jsonl", [r]))
    assert imp.rounds["accepted"].tolist() == [2, 1]
    assert imp.prompts.iloc[0]["new_tokens"] == 5 and imp.prompts.iloc[0]["decode_ms"] == pytest.approx(500.0)
    # accept_lengths as one list per turn, no decoding_steps
    r2 = rec(2, steps=(1, 2), al=(2, 4, 1), nt=(2, 5), wt=(0.1, 0.2))
    r2["choices"][0]["accept_lengths"] = [[2], [4, 1]]
    del r2["choices"][0]["decoding_steps"]
    imp = import_logs(write(tmp_path / "n.jsonl", [r2]))
    assert imp.rounds["turn"].tolist() == [0, 1, 1] and imp.rounds["ends_output"].tolist() == [True, False, True]
    assert any("one list per turn" in n for n in imp.notes)


def test_steps_that_disagree_split_by_new_tokens_or_steps_plus_one(tmp_path):
    # two turns, decoding_steps missing a step each (Token Recycling): steps + 1 splits them
    r = rec(1, steps=(1, 1), al=(2, 3, 4, 1), nt=(5, 5), wt=(0.1, 0.1), model="vicuna-7b-v1.3-recycling")
    imp = import_logs(write(tmp_path / "rec.jsonl", [r]))
    assert imp.rounds["turn"].tolist() == [0, 0, 1, 1] and imp.rounds["drafted_horizon"].max() == 6
    assert any("Recycling" in n or "new_tokens" in n for n in imp.notes)
    # decoding_steps wrong, new_tokens right: the running sum cuts the turns
    r = rec(2, steps=(4, 4), al=(2, 3, 4, 1, 1), nt=(5, 6), wt=(0.1, 0.1))
    imp = import_logs(write(tmp_path / "nt.jsonl", [r]))
    assert imp.rounds["turn"].tolist() == [0, 0, 1, 1, 1]
    assert any("running sum of accept_lengths meets each turn's new_tokens" in n for n in imp.notes)


def test_missing_model_id_uses_the_file_name(tmp_path):
    r = rec(1)
    del r["model_id"]
    imp = import_logs(write(tmp_path / "vicuna-7b-v1.3-medusa-float16.jsonl", [r]))
    assert set(imp.rounds["drafter"]) == {"medusa"} and imp.rounds["drafted_horizon"].max() == 4
    assert any("no model_id in the answers" in n for n in imp.notes)
    with pytest.raises(LogError, match=r"answers\.jsonl: no known method in model_id 'answers'"):
        import_logs(write(tmp_path / "answers.jsonl", [r]))


def test_missing_question_id_each_its_own_prompt(tmp_path):
    r = rec(1)
    del r["question_id"]
    imp = import_logs(write(tmp_path / "q.jsonl", [r, r]))
    assert imp.prompts["prompt_id"].astype(str).tolist() == ["line-1", "line-2"]
    assert any("without a question_id" in n for n in imp.notes)


def test_idxs_variant_and_medusa_repo_model_id(tmp_path):
    r = {"question_id": 81, "answer_id": "x",
         "model_id": "medusa-vicuna-7b-v1.3-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3",
         "choices": [{"index": 0, "turns": ["a", "b"], "idxs": [99, 40], "new_tokens": [250, 110],
                      "wall_time": [3.0, 1.5]}], "tstamp": 0.0}
    imp = import_logs(write(tmp_path / "m.jsonl", [r]))
    assert len(imp.rounds) == 0 and imp.prompts.iloc[0]["rounds"] == 141
    assert set(imp.prompts["drafter"]) == {"medusa"}
    assert imp.parts[0][4]["target"] == "vicuna-7b-v1.3"


@pytest.mark.parametrize("case", [
    "al_strings", "al_zero", "steps_strings", "nt_none_items", "wall_strings", "choices_empty", "choice_not_dict",
    "not_object_line", "al_float_integral", "al_scalar", "nested_bad",
])
def test_odd_values_import_or_refuse_in_one_line(tmp_path, case):
    good = rec(9)
    r = rec(1)
    c = r["choices"][0]
    if case == "al_strings":
        c["accept_lengths"] = ["3", "2"]
    elif case == "al_zero":
        c["accept_lengths"] = [0, 5]
    elif case == "steps_strings":
        c["decoding_steps"] = ["2"]
    elif case == "nt_none_items":
        c["new_tokens"] = [None]
    elif case == "wall_strings":
        c["wall_time"] = ["fast"]
    elif case == "choices_empty":
        r["choices"] = []
    elif case == "choice_not_dict":
        r["choices"] = ["text"]
    elif case == "not_object_line":
        r = 42
    elif case == "al_float_integral":
        c["accept_lengths"] = [3.0, 2.0]
    elif case == "al_scalar":
        c["accept_lengths"] = 3
        c["decoding_steps"] = [1]
    elif case == "nested_bad":
        c["accept_lengths"] = [[3], "x"]
    f = write(tmp_path / f"{case}.jsonl", [r, good])
    imp = import_logs(f)                      # the good answer always comes through
    assert "9" in set(imp.prompts["prompt_id"].astype(str))
    ok = "1" in set(imp.prompts["prompt_id"].astype(str))
    if not ok:
        assert any(str(f) in n and ("left out" in n or "ignored" in n) for n in imp.notes), imp.notes
    lone = write(tmp_path / f"{case}-alone.jsonl", [r])
    try:
        import_logs(lone)
    except LogError as exc:
        assert str(lone) in str(exc) and "\n" not in str(exc)


def test_random_mutations_never_raise_anything_but_one_line(tmp_path):
    rng = random.Random(20261201)
    base = [rec(1), rec(2, steps=(1, 2), al=(2, 4, 1), nt=(2, 5), wt=(0.1, 0.2)), rec(3)]
    junk = [None, "x", -1, 0, 1.5, [], {}, [None], [[1], 2], True, "7"]
    for i in range(300):
        recs = json.loads(json.dumps(base))
        for _ in range(rng.randint(1, 4)):
            r = rng.choice(recs)
            ch = r.get("choices")
            inner = ch[0] if isinstance(ch, list) and ch and isinstance(ch[0], dict) else None
            tgt = inner if inner is not None and rng.random() >= 0.4 else r
            if not tgt:
                continue
            key = rng.choice(sorted(tgt))
            if rng.random() < 0.3:
                del tgt[key]
            else:
                tgt[key] = rng.choice(junk)
        f = write(tmp_path / f"m{i}.jsonl", recs)
        try:
            imp = import_logs(f)
        except LogError as exc:
            assert str(f) in str(exc) and "\n" not in str(exc), exc
            continue
        r = imp.rounds
        if len(r):
            assert (r["accepted"] >= 0).all() and (r["horizon"] >= r["accepted"]).all()


def test_ingest_cli_refusal_is_one_line(tmp_path, capsys):
    from glance_law.ingest import main
    f = write(tmp_path / "bad.jsonl", [rec(1, model="vicuna-7b-pld-fp16")])
    assert main(["spec-bench", str(f), "--out", str(tmp_path / "o")]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and str(f) in err[0] and "--horizon pld=L" in err[0] and "draft_num_candidate_tokens=10" in err[0]
    assert main(["spec-bench", str(f), "--out", str(tmp_path / "o"), "--horizon", "pld=10"]) == 0
