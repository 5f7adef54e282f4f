"""Question files (Spec-Bench / MT-bench ``question.jsonl[.gz]``) in glance-log: the reader on the
real files (counts checked against the raw lines), per-category selection, multi-turn prompts
with and without a chat template, the context-overflow skip, resume of a later turn, bad input,
and an end-to-end ``glance-log --data <question file> --task all --n 1`` on a tiny model."""
from __future__ import annotations

import gzip
import json
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402
from _logger_fixtures import CHAT_TEMPLATE, make_llama  # noqa: E402

from glance_law import io as gio  # noqa: E402
from glance_law.errors import GlanceError  # noqa: E402
from glance_log import questions as Q  # noqa: E402
from glance_log import run as R  # noqa: E402
from glance_log.cli import main  # noqa: E402
from glance_log.models import load_target  # noqa: E402

torch.set_num_threads(1)
HERE = Path(__file__).parent
SLICE = HERE / "data" / "realdata" / "spec_bench__question.jsonl.gz"
REAL = HERE.parent.parent / "shared" / "realdata" / "spec-bench"
SPEC_BENCH = REAL / "vase" / "question.jsonl.gz"
MT_BENCH = REAL / "bnukh" / "mt_bench__question.jsonl.gz"
#: the categories Spec-Bench's README (and ../shared/realdata/README.md) names
SPEC_BENCH_CATEGORIES = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
                         "translation", "summarization", "qa", "math_reasoning", "rag"}


def raw_records(path: Path) -> list[dict]:
    """The file's records read with gzip + json only (none of the project's code)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("questions")
    plain = make_llama(root / "plain", seed=0, init=1.0)          # no chat template: a base model
    chat = root / "chat"
    shutil.copytree(plain, chat)
    cfg = json.loads((chat / "tokenizer_config.json").read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    (chat / "tokenizer_config.json").write_text(json.dumps(cfg))
    small = root / "small"                                           # 96 positions: prompts overflow
    shutil.copytree(plain, small)
    mc = json.loads((small / "config.json").read_text())
    mc["max_position_embeddings"] = 96
    (small / "config.json").write_text(json.dumps(mc))
    return {"root": root, "plain": plain, "chat": chat, "small": small,
            "t_plain": load_target(plain, device="cpu"), "t_chat": load_target(chat, device="cpu")}


# -- the reader ---------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [SLICE, SPEC_BENCH, MT_BENCH], ids=["slice", "spec_bench", "mt_bench"])
def test_reader_counts_match_the_raw_file(path):
    if not path.exists():
        pytest.skip(f"{path} is not beside this checkout")
    raw = raw_records(path)
    qs = Q.read_questions(path)
    assert len(qs) == len(raw)
    assert Counter(q.category for q in qs) == Counter(r["category"] for r in raw)
    assert [q.question_id for q in qs] == [str(r["question_id"]) for r in raw]
    assert [list(q.turns) for q in qs] == [r["turns"] for r in raw]
    for q, r in zip(qs, raw):
        ref = r.get("reference") or []
        ref = [ref] if isinstance(ref, str) else ref
        assert len(q.references) == len(q.turns)
        assert [list(x) for x in q.references[:len(ref)]] == [[x] if isinstance(x, str) else x or [] for x in ref]
        assert not any(q.references[len(ref):])
    assert Q.categories(qs) == list(dict.fromkeys(r["category"] for r in raw))
    assert [p for q in qs for p in q.prompt_ids] == [f"q{r['question_id']}-t{i + 1}" for r in raw
                                                      for i in range(len(r["turns"]))]


@pytest.mark.skipif(not SPEC_BENCH.exists(), reason="../shared/realdata is not beside this checkout")
def test_spec_bench_is_480_questions_in_its_13_categories():
    raw = raw_records(SPEC_BENCH)
    qs = Q.read_questions(SPEC_BENCH)
    assert set(Q.categories(qs)) == SPEC_BENCH_CATEGORIES == {r["category"] for r in raw}
    assert len(qs) == len(raw) == len({r["question_id"] for r in raw})
    sel = Q.load_questions(SPEC_BENCH, "all", n=1, seed=0)
    assert sorted(q.category for q in sel) == sorted(SPEC_BENCH_CATEGORIES)


def test_a_folder_and_plain_jsonl_are_question_files(tmp_path):
    raw = raw_records(SLICE)
    (tmp_path / "question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
    assert Q.question_file(tmp_path) == tmp_path / "question.jsonl"
    assert Q.question_file(tmp_path / "question.jsonl") == tmp_path / "question.jsonl"
    assert Q.question_file(SLICE) == SLICE
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "p0", "prompt": "hi"}) + "\n")
    assert Q.question_file(items) is None           # a task-item JSONL stays with the item loader
    assert Q.question_file(None) is None
    assert [q.turns for q in Q.read_questions(tmp_path / "question.jsonl")] == [q.turns for q in
                                                                                 Q.read_questions(SLICE)]


def test_selection_is_n_per_category_by_a_seeded_sample():
    qs = [Q.Question(str(i), "ab"[i % 2] if i < 10 else "c", (f"turn {i}",), ((),)) for i in range(14)]
    for seed in (0, 1, 7):
        sel = Q.select_questions(qs, "all", n=2, seed=seed)
        assert Counter(q.category for q in sel) == {"a": 2, "b": 2, "c": 2}
        assert sel == Q.select_questions(qs, "all", n=2, seed=seed)            # deterministic
        for cat in "abc":                                                      # the documented draw
            group = [q for q in qs if q.category == cat]
            want = [group[j] for j in sorted(random.Random(seed).sample(range(len(group)), 2))]
            assert [q for q in sel if q.category == cat] == want
        pos = [qs.index(q) for q in sel]
        assert pos == sorted(pos)                                              # file order kept
    assert len({tuple(q.question_id for q in Q.select_questions(qs, "all", n=2, seed=s)) for s in range(6)}) > 1
    assert Q.select_questions(qs, "c", n=None) == [q for q in qs if q.category == "c"]
    assert Q.select_questions(qs, "a", n=50) == [q for q in qs if q.category == "a"]
    with pytest.raises(GlanceError, match=r"--task 'nope'.*categories: a, b, c \(or all\)"):
        Q.select_questions(qs, "nope", n=1)


def test_task_all_n1_on_the_real_slice():
    raw = raw_records(SLICE)
    sel = Q.load_questions(SLICE, "all", n=1, seed=0)
    cats = list(dict.fromkeys(r["category"] for r in raw))
    assert [q.category for q in sel] == cats
    assert Q.load_questions(SLICE, "all", n=1, seed=0) == sel


def test_turns_keeps_the_first_turns_only():
    raw = raw_records(SLICE)
    every = Q.load_questions(SLICE, "all", n=2, seed=0)
    first = Q.load_questions(SLICE, "all", n=2, seed=0, turns=1)
    assert [q.question_id for q in first] == [q.question_id for q in every]
    assert all(len(q.turns) == 1 and len(q.references) == 1 for q in first)
    by_id = {str(r["question_id"]): r for r in raw}
    assert [q.turns[0] for q in first] == [by_id[q.question_id]["turns"][0] for q in first]
    assert any(len(q.turns) > 1 for q in every)          # not vacuous: the slice has multi-turn questions
    assert [p for q in first for p in q.prompt_ids] == [q.prompt_id(0) for q in every]


@pytest.mark.parametrize("line, field", [
    ("{not json", "malformed JSON"),
    ('{"question_id": 1, "category": "x"}', "field 'turns'"),
    ('{"question_id": 1, "category": "x", "turns": []}', "field 'turns'"),
    ('{"question_id": 1, "category": "x", "turns": ["a", 3]}', r"field 'turns'\[1\]"),
    ('{"question_id": 1, "category": "x", "turns": "a"}', "field 'turns'"),
    ('{"question_id": 1, "turns": ["a"]}', "field 'category'"),
    ('{"question_id": null, "category": "x", "turns": ["a"]}', "field 'question_id'"),
    ('{"question_id": 1, "category": "x", "turns": ["a"], "reference": [1]}', "field 'reference'"),
    ('{"question_id": 1, "category": "x", "turns": ["a"], "reference": [[["deep"]]]}', "field 'reference'"),
    ('[1, 2]', "expected a JSON object"),
    ('{"turns": ' + "[" * 100000 + "]" * 100000 + "}", "nested deeper than 64"),
])
def test_bad_lines_get_one_line_naming_file_line_and_field(tmp_path, line, field):
    f = tmp_path / "question.jsonl.gz"
    good = json.dumps({"question_id": 0, "category": "x", "turns": ["fine"]})
    with gzip.open(f, "wt") as fh:
        fh.write(good + "\n\n" + line + "\n")
    with pytest.raises(GlanceError, match=field) as exc:
        Q.read_questions(f)
    msg = str(exc.value)
    assert msg.startswith(f"{f}:3: ") and "\n" not in msg


def test_bad_files_get_one_line(tmp_path):
    dup = tmp_path / "dup.jsonl"
    rec = {"question_id": 5, "category": "x", "turns": ["a"]}
    dup.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(GlanceError, match=r"dup.jsonl:2: question_id 5 already at line 1"):
        Q.read_questions(dup)
    bad_gz = tmp_path / "question.jsonl.gz"
    bad_gz.write_bytes(b"not gzip at all")
    with pytest.raises(GlanceError, match="not a readable gzip file"):
        Q.read_questions(bad_gz)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(json.dumps(rec).encode() + b"\n" + b'{"turns": ["caf\xe9"]}\n')
    with pytest.raises(GlanceError, match="not UTF-8"):
        Q.read_questions(latin)


# -- prompts ------------------------------------------------------------------------------------
TURNS = ("what is the total amount due on this invoice", "the chart shows revenue rising")


def test_multi_turn_prompt_through_the_chat_template(env):
    t = env["t_chat"]
    tok = t.tokenizer
    answer = "the invoice total is 42 dollars"
    p2 = Q.encode_conversation(t, TURNS, [answer])
    msgs = [{"role": "user", "content": TURNS[0]}, {"role": "assistant", "content": answer},
            {"role": "user", "content": TURNS[1]}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert p2.prompt_ids == tok(text, add_special_tokens=False)["input_ids"]
    decoded = tok.decode(p2.prompt_ids)
    i1, ia, i2 = decoded.index(TURNS[0]), decoded.index(answer), decoded.index(TURNS[1])
    assert i1 < ia < i2 and decoded.endswith("<|im_start|>assistant\n")
    assert decoded.count("<|im_start|>user") == 2 and decoded.count("<|im_start|>assistant") == 2
    # turn 1 is exactly what the target's own one-message encoding gives
    assert Q.encode_conversation(t, TURNS[:1], []).prompt_ids == t.encode(TURNS[0]).prompt_ids
    assert torch.equal(p2.inputs["input_ids"][0], torch.tensor(p2.prompt_ids))
    assert Q.prompt_format(t).startswith("chat template")


def test_multi_turn_prompt_without_a_chat_template(env):
    t = env["t_plain"]
    tok = t.tokenizer
    assert not getattr(tok, "chat_template", None)
    answer = "the invoice total is 42 dollars"
    p2 = Q.encode_conversation(t, TURNS, [answer])
    want = f"Question: {TURNS[0]}\nAnswer: {answer}\n\nQuestion: {TURNS[1]}\nAnswer:"
    assert Q.plain_conversation(TURNS, [answer]) == want
    assert p2.prompt_ids == tok(want, add_special_tokens=True)["input_ids"]
    assert tok.decode(p2.prompt_ids, skip_special_tokens=True) == want
    assert Q.encode_conversation(t, TURNS[:1], []).prompt_ids == tok(f"Question: {TURNS[0]}\nAnswer:")["input_ids"]
    assert Q.prompt_format(t).startswith("plain text")
    with pytest.raises(ValueError):
        Q.plain_conversation(TURNS, [])


def test_answer_text_drops_the_stop_token(env):
    tok = env["t_plain"].tokenizer
    ids = tok(" the total is 42")["input_ids"] + [tok.eos_token_id]
    assert Q.answer_text(tok, ids) == "the total is 42"


# -- runs ---------------------------------------------------------------------------------------
def _rows(out: Path, kind: str):
    return gio.read_prompts(str(out)) if kind == "prompts" else gio.read_rounds(str(out))


def _cfg(model, out, items=None, **kw):
    base = dict(task="all", model=str(model), drafter="pld", max_new_tokens=12, out=str(out), progress=False,
                items=items)
    base.update(kw)
    return R.RunConfig(**base)


def test_turn_two_holds_this_arms_answer_to_turn_one(env, tmp_path):
    q = Q.Question("7", "writing", TURNS, ((), ()))
    s = R.run(_cfg(env["plain"], tmp_path / "o", items=[q], baseline=True, audit=True))
    P = _rows(tmp_path / "o", "prompts")
    for name in ("pld", "ar"):
        rows = P[P["drafter"] == name].set_index("prompt_id")
        assert list(rows.index) == ["q7-t1", "q7-t2"] and set(rows["task"]) == {"writing"}
        answer = Q.answer_text(env["t_plain"].tokenizer, rows.loc["q7-t1", "tokens"])
        want = Q.encode_conversation(env["t_plain"], TURNS, [answer])
        assert rows.loc["q7-t2", "prompt_tokens"] == want.n_tokens
        assert rows["greedy_match"].all()
    assert [a["prompts"] for a in s["arms"]] == [2, 2] and all(a["context_skipped"] == 0 for a in s["arms"])


def test_context_overflow_is_skipped_and_counted(env, tmp_path):
    """96 positions: a prompt that leaves no room for --max-new-tokens is skipped (never
    truncated), and so are its question's later turns; the rest is logged."""
    tok = env["t_plain"].tokenizer
    long_turn = " ".join(["the invoice total is 42 dollars"] * 12)
    qs = [Q.Question("1", "a", ("what is the total",), ((),)),
          Q.Question("2", "b", (long_turn, "and then?"), ((), ())),
          Q.Question("3", "a", ("the chart shows revenue rising", long_turn), ((), ()))]
    max_new = 12
    assert len(tok(Q.plain_conversation([long_turn], []))["input_ids"]) + max_new > 96
    s = R.run(_cfg(env["small"], tmp_path / "o", items=qs, max_new_tokens=max_new))
    arm = s["arms"][0]
    assert arm["context_limit"] == 96
    P = _rows(tmp_path / "o", "prompts")
    logged = set(P["prompt_id"])
    assert {"q1-t1", "q3-t1"} <= logged
    assert arm["context_skipped_ids"] == ["q2-t1", "q2-t2", "q3-t2"] and arm["context_skipped"] == 3
    assert logged == {"q1-t1", "q3-t1"}
    assert ((P["prompt_tokens"] + max_new) <= 96).all()


def test_cli_prints_the_context_skip(env, tmp_path, capsys):
    long_turn = " ".join(["the invoice total is 42 dollars"] * 12)
    f = tmp_path / "question.jsonl"
    f.write_text(json.dumps({"question_id": 1, "category": "a", "turns": ["what is the total"]}) + "\n" +
                 json.dumps({"question_id": 2, "category": "b", "turns": [long_turn]}) + "\n")
    rc = main(["--model", str(env["small"]), "--data", str(f), "--task", "all", "--n", "1", "--drafter", "pld",
               "--max-new-tokens", "12", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "1 prompts logged" in err and "1 prompts skipped" in err and "96 positions, e.g. q2-t1" in err


def test_resume_logs_turn_two_from_turn_ones_logged_answer(env, tmp_path, monkeypatch):
    """Turn 1 already in --out: the rerun decodes only turn 2, whose prompt holds turn 1's
    logged answer (the prompt row's tokens); its rows equal those of an uninterrupted run."""
    full = Q.Question("9", "writing", TURNS, ((), ()))
    first = Q.Question("9", "writing", TURNS[:1], ((),))
    R.run(_cfg(env["chat"], tmp_path / "whole", items=[full]))
    R.run(_cfg(env["chat"], tmp_path / "o", items=[first]))                  # interrupted after turn 1
    calls = []
    real = R.decode

    def counting(*a, **kw):
        calls.append(kw.get("callbacks"))
        return real(*a, **kw)
    monkeypatch.setattr(R, "decode", counting)
    s = R.run(_cfg(env["chat"], tmp_path / "o", items=[full]))
    assert len(calls) == 1 and s["arms"][0]["prompts"] == 1 and s["arms"][0]["skipped"] == 1
    whole = _rows(tmp_path / "whole", "prompts").set_index("prompt_id")
    P = _rows(tmp_path / "o", "prompts")
    assert sorted(P["prompt_id"]) == ["q9-t1", "q9-t2"]                       # no duplicate turn 1
    got = P.set_index("prompt_id")
    for col in ("prompt_tokens", "new_tokens", "rounds"):
        assert got.loc["q9-t2", col] == whole.loc["q9-t2", col]
    assert list(got.loc["q9-t2", "tokens"]) == list(whole.loc["q9-t2", "tokens"])
    # a prompt row without tokens: turn 1 is decoded again, unlogged, and turn 2 is the same
    R.run(_cfg(env["chat"], tmp_path / "o2", items=[first]))
    monkeypatch.setattr(R, "logged_outputs", lambda *a, **k: {})
    calls.clear()
    R.run(_cfg(env["chat"], tmp_path / "o2", items=[full]))
    assert [len(c) for c in calls] == [0, 1]                                  # turn 1 unlogged, turn 2 logged
    P2 = _rows(tmp_path / "o2", "prompts").set_index("prompt_id")
    assert sorted(P2.index) == ["q9-t1", "q9-t2"]
    assert list(P2.loc["q9-t2", "tokens"]) == list(whole.loc["q9-t2", "tokens"])


def test_cli_end_to_end_task_all_n1_rows_carry_the_categories(env, tmp_path, capsys):
    out, max_new = tmp_path / "o", 8
    rc = main(["--model", str(env["plain"]), "--data", str(SLICE), "--task", "all", "--n", "1",
               "--drafter", "pld", "--max-new-tokens", str(max_new), "--audit", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, err
    raw = raw_records(SLICE)
    cats = list(dict.fromkeys(r["category"] for r in raw))
    chosen = []                           # the documented draw: one per category, seed 0
    for c in cats:
        group = [r for r in raw if r["category"] == c]
        chosen += [group[j] for j in random.Random(0).sample(range(len(group)), 1)]
    P, Rr = _rows(out, "prompts"), _rows(out, "rounds")
    tok, limit = env["t_plain"].tokenizer, json.loads((env["plain"] / "config.json").read_text())[
        "max_position_embeddings"]
    n_skipped = 0
    for r in chosen:
        ids = [f"q{r['question_id']}-t{i + 1}" for i in range(len(r["turns"]))]
        first = tok(f"Question: {r['turns'][0]}\nAnswer:")["input_ids"]
        if len(first) + max_new <= limit:
            assert ids[0] in set(P["prompt_id"])
        else:
            assert not set(ids) & set(P["prompt_id"])
        n_skipped += sum(i not in set(P["prompt_id"]) for i in ids)
        assert (P.loc[P["prompt_id"].isin(ids), "task"] == r["category"]).all()   # the task is the category
    assert set(P["prompt_id"]) <= {f"q{r['question_id']}-t{i + 1}" for r in chosen for i in range(len(r["turns"]))}
    assert n_skipped > 0 and f"{n_skipped} prompts skipped" in err                 # the slice's summarization
    assert set(P["task"]) | {r["category"] for r in chosen if f"q{r['question_id']}-t1" not in set(P["prompt_id"])} \
        == set(cats)
    assert Rr.groupby("prompt_id")["task"].first().to_dict() == P.set_index("prompt_id")["task"].to_dict()
    assert P["greedy_match"].all()
    run_meta = gio.file_meta(next(out.glob("prompts-*.parquet")))[2]
    assert run_meta["task"] == "all" and run_meta["prompt_format"].startswith("plain text")


def test_cli_unknown_category_is_one_line(env, tmp_path, capsys):
    rc = main(["--model", str(env["plain"]), "--data", str(SLICE), "--task", "docvqa", "--n", "1",
               "--drafter", "pld", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "--task 'docvqa'" in err and "writing, roleplay, translation, summarization" in err
    rc = main(["--data", str(SLICE), "--task", "all", "--probe", "mismatched", "--out", str(tmp_path / "o")])
    assert rc == 2 and "question file" in capsys.readouterr().err


@pytest.mark.parametrize("name,text,want", [
    ("q.jsonl", '{"question_id": 1, "category": "writing", "prompt": ["a"]}\n'
                '{"question_id": 2, "category": "writing", "turns": ["b"]}\n',
     ":1: the first record has no field 'turns' (its fields: 'question_id', 'category', 'prompt')"),
    ("q.jsonl", "", ": holds no records; a question file for --task 'all'"),
    ("q.jsonl", "\n\n  \n", ": holds no records; a question file for --task 'all'"),
    ("q.jsonl", "{not json\n", ":1: malformed JSON"),
])
def test_question_file_without_turns_or_records_names_file_line_and_field(tmp_path, capsys, name, text, want):
    """Issue 36.8: a question file whose first record lacks 'turns', and an empty one, said "unknown
    task 'all'; expected one of caption, textvqa, ..." (no file, line or field)."""
    f = tmp_path / name
    f.write_text(text)
    rc = main(["--data", str(f), "--task", "all", "--n", "1", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{f}{want}" in err and "unknown task" not in err, err
    assert not (tmp_path / "o").exists()
    # a category name as --task says the same; a folder without question.jsonl is named too
    assert main(["--data", str(f), "--task", "writing", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert f"{f}{want}".replace("'all'", "'writing'") in capsys.readouterr().err
    assert main(["--data", str(tmp_path), "--task", "all", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "holds no question file (question.jsonl or question.jsonl.gz) for --task 'all'" in capsys.readouterr().err


def test_synthetic_task_names_still_checked_for_other_data(tmp_path):
    with pytest.raises(GlanceError, match="unknown task 'writing'"):
        R.run(R.RunConfig(task="writing", out=str(tmp_path / "o"), progress=False))


def test_a_vision_language_target_reads_questions_as_text(tmp_path):
    """A Qwen2-VL target with a question file: text-only conversations through its chat
    template (no image tokens), decoded losslessly (the audit)."""
    from _logger_fixtures import make_qwen2_vl

    vl = make_qwen2_vl(tmp_path / "vl")
    q = Q.Question("4", "qa", TURNS, ((), ()))
    s = R.run(_cfg(vl, tmp_path / "o", items=[q], max_new_tokens=6, audit=True))
    P = _rows(tmp_path / "o", "prompts")
    assert sorted(P["prompt_id"]) == ["q4-t1", "q4-t2"] and P["greedy_match"].all()
    assert s["arms"][0]["prompts"] == 2 and set(P["task"]) == {"qa"}


def test_label_names_the_drafter_arm(env, tmp_path, capsys):
    """--label keeps two shapes of one drafter apart (their own drafter column and run ids); a label
    that could not name files, or 'ar', is one line."""
    out = tmp_path / "logs"
    base = ["--model", str(env["plain"]), "--data", str(SLICE), "--task", "all", "--n", "1", "--turns", "1",
            "--max-new-tokens", "6", "--out", str(out), "--quiet", "--drafter", "pld"]
    assert main(base + ["--label", "pld-chain", "--branch-k", "1"]) == 0
    assert main(base + ["--label", "pld-tree"]) == 0
    rounds = gio.read_rounds([str(out)])
    assert set(rounds["drafter"].astype(str)) == {"pld-chain", "pld-tree"}
    assert rounds.groupby("drafter", observed=True)["run_id"].nunique().eq(1).all()
    for bad in ("ar", "a/b", "", "x y", "@x"):
        capsys.readouterr()
        assert main(base + ["--label", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--label" in err[0]
