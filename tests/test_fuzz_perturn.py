"""Fuzz cases of per-turn answer files (EAGLE/Medusa ``idxs``, no per-step lengths) through the
commands: each gives its table (exit 0) or one line (exit 2), never a traceback."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _fuzz import run_cli

ID = "ess-vicuna-7b-fp16-temperature-0.0"


def answers(path: Path, choices: list[dict], model_id: str = ID) -> Path:
    recs = [{"question_id": i + 1, "category": "qa", "model_id": model_id, "choices": [c]}
            for i, c in enumerate(choices)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def turn(idxs, nt, wt=(0.5, 0.5), turns=("a", "b")):
    return {"index": 0, "turns": list(turns), "idxs": list(idxs), "new_tokens": list(nt), "wall_time": list(wt)}


CASES = {
    "zero_steps_everywhere": [turn([-1, -1], [0, 0]), turn([-1, -1], [0, 0])],      # idx -1: no step
    "negative_idxs": [turn([-5, 3], [4, 9]), turn([2, 2], [7, 6])],
    "idxs_strings": [turn(["3", "x"], [4, 9]), turn([2, 2], [7, 6])],
    "wall_time_null": [turn([3, 2], [9, 6], wt=(None, 0.1)), turn([2, 2], [7, 6])],
    "turns_misaligned": [turn([3, 2, 4], [9, 6]), turn([2], [7, 6, 1])],
    "huge_counts": [turn([2 ** 40, 3], [2 ** 41, 9]), turn([2, 2], [7, 6])],
}


def no_answer_lost(n_answers: int):
    """The check of an exit 0 (issue 36.14): every answer is either counted in the pooled row or named
    as left out in a note (rows lost: 0), and the pooled tau is the ratio of the counts shown."""
    def check(res):
        doc = json.loads(res.stdout)
        pooled = [r for t in doc["summary"].values() for r in t["rows"] if r["task"] == "pooled"]
        notes = " ".join(n for t in doc["summary"].values() for n in t["notes"])
        left = sum(int(m) for m in re.findall(r"(\d+) answer\(s\) [^;]*?left out", notes))
        assert sum(r["prompts"] for r in pooled) + left == n_answers, (pooled, notes)
        for r in pooled:
            assert r["tau"] == pytest.approx(r["new_tokens"] / r["rounds"])
    return check


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_on_odd_per_turn_files_is_handled(case, tmp_path):
    f = answers(tmp_path / "ea.jsonl", CASES[case])
    res = run_cli("glance_law.fit", [f, "--skip-bad", "--format", "json"], cpu_s=30)
    res.expect_handled(no_answer_lost(len(CASES[case]))).expect_cpu_below(30)


def test_reduce_refuses_per_turn_files_in_one_line(tmp_path):
    f = answers(tmp_path / "ea.jsonl", [turn([3, 2], [9, 6]), turn([2, 2], [7, 6])])
    run_cli("glance_law.reduce", [f, "--out", tmp_path / "r.parquet"]).expect_refusal(
        "per-turn counts without per-step lengths", "python -m glance_law.fit")


def test_only_the_baseline_arm_is_its_own_table_and_a_next_that_pairs_it(tmp_path):
    """Per-turn counts of the autoregressive arm alone: fit tabulates the baseline itself (tokens per
    step 13 / 13 = 1) and says the law needs drafted rounds; reduce refuses in one line."""
    f = answers(tmp_path / "base.jsonl", [turn([3, 2], [4, 3]), turn([2, 2], [3, 3])],
                model_id="ess-vicuna-7b-fp16-baseline-temperature-0.0")
    res = run_cli("glance_law.fit", [f, "--format", "json"]).expect_ok()
    doc = json.loads(res.stdout)
    rows = {r["task"]: r for t in doc["summary"].values() for r in t["rows"]}
    assert rows["pooled"]["drafter"] == "ar" and rows["pooled"]["tau"] == 1.0 and rows["pooled"]["rounds"] == 13
    assert "needs drafted rounds" in res.stderr
    text = run_cli("glance_law.fit", [f]).expect_ok().stdout
    assert "Next: these logs are an autoregressive baseline" in text and "--timing" in text
    run_cli("glance_law.reduce", [f, "--out", tmp_path / "r.parquet"]).expect_refusal("per-turn counts")
