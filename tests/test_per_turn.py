"""Issue 24, item 1: per-turn answer files (per-turn ``idxs``/``decoding_steps``, ``new_tokens``,
``wall_time``; no per-step ``accept_lengths``: the EAGLE/Medusa/Hydra repositories' own format).

Every number is re-derived here from the raw JSON records by brute force (plain Python loops over
the answers: tokens per step per turn, per prompt, per category, the prompt-clustered CR1 interval
of the ratio, the timing ledger's ratio of prompt means), on a hand-written fixture and on real
Spec-Bench files stripped to the per-turn format; and every command either gives those numbers
(fit, report) or refuses in one line that names the input and what to run on it (reduce, policy).
"""
from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from glance_law.cli import fit as fit_cli
from glance_law.data.io import read_logs
from glance_law.evidence.turns import ratio_tau, turn_tau

REAL = Path(__file__).resolve().parent.parent.parent / "shared" / "realdata" / "spec-bench"
MEDUSA_MT = REAL / "bnukh" / "mt_bench__vicuna-7b-v1.3-medusa-float16-temperature-0.0.jsonl.gz"   # two turns
VASE_MEDUSA = REAL / "vase" / "vicuna-7b-v1.3-medusa.jsonl.gz"           # 480 questions, 'ERROR' turns
VANILLA_SB = REAL / "bnukh" / "spec_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"
needs_real = pytest.mark.skipif(not MEDUSA_MT.exists(), reason="../shared/realdata not present")


# --------------------------------------------------------------------------
# brute force from the raw records
# --------------------------------------------------------------------------

def raw_records(path: Path) -> list[dict]:
    """Every parseable JSON line of a (gzipped) answer file."""
    data = path.read_bytes()
    text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    out = []
    for line in text.split(b"\n"):
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def raw_turns(recs: list[dict]) -> list[tuple[str, str, int, int]]:
    """(category, question_id, new tokens, steps) per turn, as the answers logged them: steps from
    decoding_steps or idx + 1, turns whose text is 'ERROR' left out (the benchmark logged the
    previous turn's numbers there), turns without a step left out."""
    out = []
    for r in recs:
        for c in r["choices"]:
            steps = c["decoding_steps"] if "decoding_steps" in c else [i + 1 for i in c["idxs"]]
            for text, tok, st in zip(c["turns"], c["new_tokens"], steps):
                if text.strip() != "ERROR" and st > 0:
                    out.append((r.get("category") or "unknown", str(r["question_id"]), tok, st))
    return out


def brute(turns, level: float = 0.95) -> dict:
    """tau (ratio of sums), its CR1 interval clustered by question, and the mean per-prompt tau."""
    T = sum(t for _, _, t, _ in turns)
    S = sum(s for _, _, _, s in turns)
    tau = T / S
    by_q: dict = defaultdict(lambda: [0, 0, 0.0])
    for cat, q, t, s in turns:
        g = by_q[(cat, q)]
        g[0] += t
        g[1] += s
        g[2] += t - tau * s                      # the ratio's linearised residual, summed per prompt
    G = len(by_q)
    se = math.sqrt(G / (G - 1) * sum(g[2] ** 2 for g in by_q.values()) / S ** 2)
    tc = stats.t.ppf(0.5 + level / 2, G - 1)
    own = [g[0] / g[1] for g in by_q.values()]
    pm = sum(own) / G
    pse = math.sqrt(sum((x - pm) ** 2 for x in own) / (G - 1) / G)
    return {"prompts": G, "turns": len(turns), "rounds": S, "new_tokens": T, "tau": tau, "tau_lo": tau - tc * se,
            "tau_hi": tau + tc * se, "prompt_tau": pm, "prompt_tau_lo": pm - tc * pse, "prompt_tau_hi": pm + tc * pse}


def brute_by_category(turns) -> dict:
    cats = sorted({c for c, *_ in turns})
    out = {c: brute([t for t in turns if t[0] == c]) for c in cats}
    out["pooled"] = brute(turns)
    return out


def per_turn_file(recs: list[dict], path: Path, model_id: str | None = None, idxs: bool = True) -> Path:
    """The records as the EAGLE/Medusa repositories write them: no accept_lengths; per-turn idxs
    (idx = steps - 1) or decoding_steps; new_tokens, wall_time; category kept."""
    out = []
    for r in recs:
        chs = []
        for c in r["choices"]:
            ch = {"index": c.get("index", 0), "turns": c["turns"], "new_tokens": c["new_tokens"],
                  "wall_time": c["wall_time"]}
            if idxs:
                ch["idxs"] = [d - 1 for d in c["decoding_steps"]]
            else:
                ch["decoding_steps"] = c["decoding_steps"]
            chs.append(ch)
        out.append({"question_id": r["question_id"], "category": r.get("category"),
                    "model_id": model_id or r["model_id"], "choices": chs})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in out))
    return path


def check_rows(frame, want: dict) -> None:
    """The estimates and counts as the brute force gives them; the intervals (a bootstrap-t, stratified
    by task in the pooled row: ratio_tau's own test checks them by brute force) around their estimate."""
    rows = {str(r["task"]): r for r in frame.to_dict("records")}
    assert set(rows) == set(want)
    for task, w in want.items():
        for k, v in w.items():
            if k.endswith(("_lo", "_hi")):
                est = rows[task][k[:-3]]
                assert (rows[task][k] <= est) if k.endswith("_lo") else (rows[task][k] >= est), (task, k)
                continue
            assert rows[task][k] == pytest.approx(v, rel=1e-9, abs=1e-12), (task, k)


# --------------------------------------------------------------------------
# a hand-written fixture
# --------------------------------------------------------------------------

def fixture_records() -> list[dict]:
    """EAGLE's own format: three questions of two categories, two turns each; one 'ERROR' turn."""
    def ans(q, cat, idxs, nt, wt, turns=("a", "b")):
        return {"question_id": q, "category": cat, "model_id": "ess-vicuna-7b-fp16-temperature-0.0",
                "choices": [{"index": 0, "turns": list(turns), "idxs": idxs, "new_tokens": nt, "wall_time": wt}]}
    return [ans(1, "math", [9, 4], [31, 12], [1.0, 0.4]),
            ans(2, "math", [19, 2], [50, 11], [2.0, 0.3]),
            ans(3, "qa", [4, 7], [14, 30], [0.5, 0.9], turns=("a", "ERROR")),
            ans(4, "qa", [2, 2], [9, 6], [0.2, 0.2])]


def test_fixture_tau_per_turn_prompt_and_category(tmp_path):
    recs = fixture_records()
    f = tmp_path / "ea.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = turn_tau(read_logs(f, "prompts"))
    check_rows(res.to_frame().drop(columns="drafter"), brute_by_category(raw_turns(recs)))
    # per turn: each turn's own new_tokens / (idx + 1), the 'ERROR' turn left out
    got = {(r["prompt_id"], r["turn"]): r["tau"] for r in res.turns().to_dict("records")}
    assert got == pytest.approx({("1", 0): 31 / 10, ("1", 1): 12 / 5, ("2", 0): 50 / 20, ("2", 1): 11 / 3,
                                 ("3", 0): 14 / 5, ("4", 0): 9 / 3, ("4", 1): 6 / 3})
    # grouped by turn index: turn 1 of the three prompts that have one
    by_turn = turn_tau(read_logs(f, "prompts"), by="turn").to_frame().set_index("task")
    assert by_turn.loc["1", "tau"] == pytest.approx((12 + 11 + 6) / (5 + 3 + 3))
    assert by_turn.loc["1", "prompts"] == 3


def test_ratio_tau_is_the_clustered_ratio_estimator():
    """The pure function against the brute force on random clusters of unequal size."""
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 40, 300)
    steps = rng.integers(1, 60, 300)
    tokens = np.round(steps * rng.uniform(1.5, 4.0, 40)[codes]).astype(np.int64)
    got = ratio_tau(tokens, steps, codes, 40, n_boot=0)          # no bootstrap: CR1 with t(G-1)
    turns = [("t", str(c), t, s) for c, t, s in zip(codes.tolist(), tokens.tolist(), steps.tolist())]
    want = brute(turns)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-9), k
    # the bootstrap-t (the default): each resample studentized by its own CR1 se, by brute force
    boot = ratio_tau(tokens, steps, codes, 40, n_boot=199, seed=5)
    for k in ("tau", "prompt_tau", "prompts", "rounds"):
        assert boot[k] == pytest.approx(want[k], rel=1e-12)
    from glance_law.stats.cluster import bootstrap_counts
    ct, cs = np.bincount(codes, tokens, 40), np.bincount(codes, steps, 40)
    own = ct / cs
    zt, zp = [], []
    for w in np.concatenate(list(bootstrap_counts(40, 199, np.random.default_rng(5)))):
        idx = np.repeat(np.arange(40), w)                          # the resample, prompt by prompt
        t_, s_ = ct[idx], cs[idx]
        tau_b = t_.sum() / s_.sum()
        zt.append((tau_b - want["tau"]) / (np.sqrt(40 / 39 * np.sum((t_ - tau_b * s_) ** 2)) / s_.sum()))
        zp.append((own[idx].mean() - want["prompt_tau"]) / (own[idx].std(ddof=1) / np.sqrt(40)))
    se = np.sqrt(40 / 39 * np.sum((ct - want["tau"] * cs) ** 2)) / cs.sum()
    pse = own.std(ddof=1) / np.sqrt(40)
    q = np.quantile(zt, [0.025, 0.975])
    assert boot["tau_lo"] == pytest.approx(want["tau"] - q[1] * se, rel=1e-9)
    assert boot["tau_hi"] == pytest.approx(want["tau"] - q[0] * se, rel=1e-9)
    q = np.quantile(zp, [0.025, 0.975])
    assert boot["prompt_tau_lo"] == pytest.approx(want["prompt_tau"] - q[1] * pse, rel=1e-9)
    assert boot["prompt_tau_hi"] == pytest.approx(want["prompt_tau"] - q[0] * pse, rel=1e-9)


def test_prompt_rows_without_turn_lists_are_one_turn_each():
    """glance-log's prompts-*.parquet: new_tokens over rounds per prompt."""
    import pandas as pd
    p = pd.DataFrame({"run_id": "r", "prompt_id": ["1", "2", "3"], "task": "qa", "drafter": "block",
                      "new_tokens": [30, 20, 9], "rounds": [10, 10, 3]})
    f = turn_tau(p, by=None).to_frame().iloc[0]
    assert f["tau"] == pytest.approx(59 / 23) and f["turns"] == 3
    assert f["prompt_tau"] == pytest.approx((3 + 2 + 3) / 3)


# --------------------------------------------------------------------------
# real files stripped to the per-turn format
# --------------------------------------------------------------------------

@needs_real
@pytest.mark.parametrize("src", [MEDUSA_MT, VASE_MEDUSA], ids=lambda p: p.name[:40])
def test_fit_cli_on_a_real_per_turn_file_rederived_from_the_raw_json(src, tmp_path, capsys):
    recs = raw_records(src)
    f = per_turn_file(recs, tmp_path / "model_answer" / "medusa.jsonl")
    assert fit_cli.main([str(f), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    import pandas as pd
    rows = pd.DataFrame(fit_cli.json_rows(doc, "summary"))
    want = brute_by_category(raw_turns(recs))
    check_rows(rows.drop(columns="drafter"), want)
    # Spec-Bench's own mean accepted tokens of the original file (the lengths sum to new_tokens there)
    al = [v for r in recs for c in r["choices"] for v in _kept_lengths(c)]
    assert want["pooled"]["tau"] == pytest.approx(sum(al) / len(al), rel=1e-12)
    assert doc["law"] == {} and any(r["section"] == "law" and "per-step rows" in r["reason"]
                                    for r in doc["skipped"]["sections not run"]["rows"])
    assert "per-step rows" in err


def _kept_lengths(c: dict) -> list[int]:
    """accept_lengths of a choice without its 'ERROR' turns."""
    al, out, k = c["accept_lengths"], [], 0
    for text, d in zip(c["turns"], c["decoding_steps"]):
        if text.strip() != "ERROR":
            out += al[k:k + d]
        k += d
    return out


@needs_real
def test_real_file_with_lengths_gives_the_same_turn_table():
    """A real file that does carry accept_lengths keeps its per-turn lists too (same numbers)."""
    recs = raw_records(VASE_MEDUSA)
    res = turn_tau(read_logs(VASE_MEDUSA, "prompts"))
    check_rows(res.to_frame().drop(columns="drafter"), brute_by_category(raw_turns(recs)))


def _baseline_pair(tmp_path):
    """A real Medusa run and the vanilla run of the same questions, both in the per-turn format
    (the baseline with EAGLE's ``-baseline`` id and its new_tokens zeroed: read as idx + 1)."""
    med = raw_records(MEDUSA_MT)
    ids = {r["question_id"] for r in med}
    van = [r for r in raw_records(VANILLA_SB) if r["question_id"] in ids]
    d = tmp_path / "model_answer"
    f1 = per_turn_file(med, d / "vicuna-7b-v1.3-medusa.jsonl", "vicuna-7b-v1.3-medusa-float16-temperature-0.0")
    zero = [{**r, "choices": [{**c, "new_tokens": [0] * len(c["new_tokens"])} for c in r["choices"]]} for r in van]
    f2 = per_turn_file(zero, d / "base.jsonl", "ess-vicuna-7b-v1.3-fp16-baseline-temperature-0.0")
    return med, van, f1, f2


def brute_speedup(med, van) -> dict:
    """Per category: mean over paired questions of the baseline's ms/token over the candidate's
    (the baseline's tokens = its steps: one token per step)."""
    def cost(recs, tokens_of):
        out = {}
        for r in recs:
            c = r["choices"][0]
            out[(r["category"], str(r["question_id"]))] = sum(c["wall_time"]) * 1000 / tokens_of(c)
        return out
    cand = cost(med, lambda c: sum(c["new_tokens"]))
    base = cost(van, lambda c: sum(c["decoding_steps"]))
    out: dict = defaultdict(lambda: ([], []))
    for k in cand.keys() & base.keys():
        out[k[0]][0].append(base[k])
        out[k[0]][1].append(cand[k])
    return {cat: (sum(b) / len(b)) / (sum(c) / len(c)) for cat, (b, c) in out.items()}


@needs_real
def test_timing_ledger_against_a_baseline_among_the_inputs(tmp_path, capsys):
    med, van, f1, f2 = _baseline_pair(tmp_path)
    assert fit_cli.main([str(f1), str(f2), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["task"]: r for r in fit_cli.json_rows(doc, "timing")}
    want = brute_speedup(med, van)
    assert set(want) <= set(rows) and "geomean" in rows
    for cat, sp in want.items():
        assert rows[cat]["speedup"] == pytest.approx(sp, rel=1e-6), cat
        assert rows[cat]["margin_lo"] <= rows[cat]["margin"] <= rows[cat]["margin_hi"]
    gm = math.exp(sum(math.log(v) for v in want.values()) / len(want))
    assert rows["geomean"]["speedup"] == pytest.approx(gm, rel=1e-6)
    # the summary leaves the baseline out (one token per step) and says so
    summary = fit_cli.json_rows(doc, "summary")
    assert {r["drafter"] for r in summary} == {"medusa"}


# --------------------------------------------------------------------------
# every command: numbers or one line
# --------------------------------------------------------------------------

@needs_real
@pytest.mark.parametrize("cli", ["fit", "report", "reduce", "policy"])
def test_each_command_gives_numbers_or_one_line(cli, tmp_path, capsys):
    """fit and report compute what the per-turn counts allow; reduce and policy (per-step analyses)
    refuse in one line naming what the input is and what to run on it instead."""
    import importlib
    med, van, f1, f2 = _baseline_pair(tmp_path)
    extra = {"report": ["--out", str(tmp_path / "rep"), "--jobs", "1", "--timing-bootstrap", "50"],
             "policy": ["--budget", "3"], "reduce": ["--out", str(tmp_path / "r.parquet")]}.get(cli, [])
    mod = importlib.import_module("glance_law.policy.cli" if cli == "policy" else f"glance_law.{cli}")
    for inputs in ([f1], [f1, f2]):
        rc = mod.main([*map(str, inputs), *extra])
        out, err = capsys.readouterr()
        if cli in ("fit", "report"):
            assert rc == 0, err
            assert "Traceback" not in err
        else:
            lines = [x for x in err.splitlines() if x.strip()]
            assert rc == 2 and len(lines) == 1, lines
            assert "per-turn counts without per-step lengths" in lines[0]
            assert "python -m glance_law.fit" in lines[0] and "accept_lengths" in lines[0]
    if cli == "fit":
        want = brute_by_category(raw_turns(med))
        assert f"{want['pooled']['tau']:.3f}" in out
    if cli == "report":
        index = (tmp_path / "rep" / "index.md").read_text()
        assert "| [summary](#summary) | Section 6 | ok |" in index and "| [timing](#timing) | Appendix E | ok |" in index
        assert "*skipped*: law (Table 12) needs per-step rows" in index
        csv = (tmp_path / "rep" / "tables" / "summary_turns.csv").read_text()
        want = brute_by_category(raw_turns(med))
        assert f"{want['pooled']['tau']:.6g}"[:6] in csv


def test_turn_lists_that_cannot_hold_their_values_are_null(tmp_path):
    """A per-turn value the column cannot hold (a negative count beside a valid total; a wall time
    of Infinity and -Infinity, which made the import fail before) leaves that list null, not the file."""
    recs = [{"question_id": 1, "category": "qa", "model_id": "ess-vicuna-7b-fp16-temperature-0.0",
             "choices": [{"index": 0, "turns": ["a", "b"], "idxs": [4, 4], "new_tokens": [-3, 20],
                          "wall_time": [0.5, 0.5]}]},
            {"question_id": 2, "category": "qa", "model_id": "ess-vicuna-7b-fp16-temperature-0.0",
             "choices": [{"index": 0, "turns": ["a", "b"], "idxs": [4, 4], "new_tokens": [10, 12],
                          "wall_time": [float("inf"), float("-inf")]}]}]
    f = tmp_path / "ea.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))        # json writes Infinity / -Infinity
    p = read_logs(f, "prompts").frame.set_index(read_logs(f, "prompts").frame["prompt_id"].astype(str))
    assert p.loc["1", "turn_tokens"] is None and list(p.loc["1", "turn_rounds"]) == [5, 5]
    assert p.loc["2", "turn_ms"] is None and np.isnan(p.loc["2", "decode_ms"])
    res = turn_tau(p)          # question 1 read as one turn of its totals (17 tokens over 10 steps)
    row = res.to_frame().set_index("task").loc["pooled"]
    assert row["new_tokens"] == 17 + 22 and row["rounds"] == 20 and row["turns"] == 3


# --------------------------------------------------------------------------
# EAGLE's own answers (idxs, no category) against a categorised Spec-Bench baseline
# --------------------------------------------------------------------------

EAGLE_SB = REAL / "bnukh" / "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"   # 164 questions


def _uncategorised(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "category"} for r in recs]


def brute_speedup_by_qid(cand: list[dict], base: list[dict]) -> dict:
    """Per category of the baseline's records: the mean over question ids decoded by both of the
    baseline's ms/token over the candidate's (each answer's total wall time / total new tokens)."""
    def cost(r):
        c = r["choices"][0]
        return sum(c["wall_time"]) * 1000 / sum(c["new_tokens"])
    c_cost = {str(r["question_id"]): cost(r) for r in cand}
    out: dict = defaultdict(lambda: ([], []))
    for r in base:
        q = str(r["question_id"])
        if q in c_cost:
            out[r["category"]][0].append(cost(r))
            out[r["category"]][1].append(c_cost[q])
    return {cat: (sum(b) / len(b)) / (sum(c) / len(c)) for cat, (b, c) in out.items()}


@needs_real
def test_timing_pairs_uncategorised_answers_with_a_categorised_baseline_by_question_id(tmp_path, capsys):
    """EAGLE's own answers carry no category (task 'unknown'); the vanilla Spec-Bench answers of the
    same questions do: the ledger pairs them by question id, each category's speedup as the raw JSON
    gives it (issue 24: 'no prompt was decoded by both arms' before)."""
    eagle = raw_records(EAGLE_SB)
    ids = {r["question_id"] for r in eagle}
    van = [r for r in raw_records(VANILLA_SB) if r["question_id"] in ids]
    f1 = per_turn_file(_uncategorised(eagle), tmp_path / "model_answer" / "ess-vicuna-7b-v1.3-fp16-ea-in.jsonl",
                       "ess-vicuna-7b-v1.3-fp16-ea-in-temperature-0.0")
    assert all("category" not in json.loads(x) or json.loads(x)["category"] is None for x in f1.read_text().splitlines())
    assert fit_cli.main([str(f1), str(VANILLA_SB), "--format", "json", "--seed", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["task"]: r for r in fit_cli.json_rows(doc, "timing")}
    want = brute_speedup_by_qid(eagle, van)
    assert len(want) >= 5 and set(want) <= set(rows)
    for cat, sp in want.items():
        assert rows[cat]["speedup"] == pytest.approx(sp, rel=1e-6), cat
        assert rows[cat]["prompts"] == sum(1 for r in van if r["category"] == cat)
    notes = " ".join(n for t in doc["timing"].values() for n in t["notes"])
    assert "take the task of the other arm's prompt with the same question id" in notes


@needs_real
def test_a_question_file_given_in_the_call_labels_answers_without_a_category(tmp_path, capsys):
    """EAGLE's own answers (no category, no question.jsonl beside them) and Spec-Bench's question file
    passed on the command line: each answer takes its question's category; tau per category is the
    raw JSON's (new tokens / steps over that category's turns)."""
    eagle = raw_records(EAGLE_SB)
    f = per_turn_file(_uncategorised(eagle), tmp_path / "ea" / "answers.jsonl",
                      "ess-vicuna-7b-v1.3-fp16-ea-in-temperature-0.0")
    qfile = REAL / "bnukh" / "spec_bench__question.jsonl.gz"
    assert fit_cli.main([str(f), str(qfile), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    rows = {r["task"]: r for r in fit_cli.json_rows(doc, "summary")}
    want = brute_by_category(raw_turns(eagle))           # the categories of the original records
    assert set(rows) == set(want) and "unknown" not in rows
    for cat, w in want.items():
        assert rows[cat]["tau"] == pytest.approx(w["tau"], rel=1e-9) and rows[cat]["prompts"] == w["prompts"], cat
    assert f"{len(eagle)} answer(s) without a category take it from the question file" in " ".join(
        n for t in doc["summary"].values() for n in t["notes"]) + err
