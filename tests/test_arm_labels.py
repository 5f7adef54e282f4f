"""Arm labels ``drafter @ target`` stay unambiguous for any names (glance_law.data.arms).

Real model ids come from logs: paths, names with spaces, ``@`` or even ``" @ "``, and a target
may be called ``unknown``. Each (drafter, target) pair must stay its own arm, every table must
split the label back the same way, a name altered to stay unambiguous must be said in a note,
and labelling twice must equal labelling once. Checked by brute force: the rounds each arm's
table row counts are recounted from the raw frame, per (drafter, target).
"""
from __future__ import annotations

import functools
import io
import itertools
import json

import numpy as np
import pandas as pd
import pytest

import glance_law as gl
from glance_law.cli.fit import json_rows as fit_json_rows
from glance_law.cli.fit import main as fit_main
from glance_law.data import arms
from glance_law.data.io import write_table
from glance_law.evidence.summary import group_summary
from glance_law.evidence.timing import timing_ledger
from glance_law.simulate import TaskSpec, simulate_rounds

# drafter and target names as logs give them
NAMES = ["ssd", "ssd @ v2", "x @", "@ y", "a@@b", "user@host", "lmsys/vicuna-7b-v1.3", "/models/llama 2 @ 70b/",
         "unknown", "'unknown'", "", "a @ b @ c"]


@functools.cache
def _rounds(seed, run):
    return simulate_rounds([TaskSpec("caption", 1.0, 1.2), TaskSpec("docvqa", 2.0, 1.2)], n_prompts=10, seed=seed,
                           run_id=run)


def sim(drafter, target, seed, run):
    f = _rounds(seed, run).copy()
    f["drafter"] = drafter
    f["target"] = pd.Series([target] * len(f), dtype=object)
    return f


def arms_frame(pairs):
    return pd.concat([sim(d, t, i, f"r{i}") for i, (d, t) in enumerate(pairs)], ignore_index=True)


def shown(frame):
    """(target, drafter) per row as the tables show them."""
    s = arms.split_labels(frame[["drafter"]].astype({"drafter": str}))
    t = s["target"] if "target" in s.columns else pd.Series([None] * len(s))
    return list(zip(t, s["drafter"]))


def check_arms(raw, lab):
    """Every (drafter, target) pair of ``raw`` is exactly one arm of ``lab``, and back."""
    key = list(zip(raw["drafter"].astype(str), raw["target"].map(lambda t: None if t is None or t == "" else t)))
    got = lab["drafter"].astype(str).tolist()
    pairs = {}
    for k, g in zip(key, got):
        pairs.setdefault(k, set()).add(g)
    assert all(len(v) == 1 for v in pairs.values())                      # one label per pair
    assert len({next(iter(v)) for v in pairs.values()}) == len(pairs)    # no two pairs share one
    # every parser splits a label the same way: the tables, plain_drafter/arm_target, parse_label
    d, t = arms.plain_drafter(lab["drafter"]).tolist(), arms.arm_target(lab["drafter"]).tolist()
    assert shown(lab) == [(b or None, a) for a, b in zip(d, t)]
    assert [arms.parse_label(g) for g in got] == [(a, b or None) for a, b in zip(d, t)]


def test_a_drafter_holding_the_separator_is_not_taken_as_labelled():
    raw = arms_frame([("ssd @ v2", "vicuna"), ("ssd @ v2", "llama"), ("ssd", "vicuna")])
    notes: list = []
    lab = arms.label_targets(raw, notes)
    check_arms(raw, lab)
    assert set(lab["drafter"].astype(str)) == {"ssd @@ v2 @ vicuna", "ssd @@ v2 @ llama", "ssd @ vicuna"}
    assert any("'ssd @ v2' shown as 'ssd @@ v2'" in n for n in notes)          # altered visibly, and said
    # pooled across targets before: each target's rounds are its own arm's
    s = group_summary(raw).to_frame()
    for (d, t), sub in raw.groupby(["drafter", "target"]):
        row = s.loc[(s["drafter"] == arms.arm_label(arms.drafter_names(raw["drafter"])[d], t)) & (s["task"] == "pooled")]
        assert int(row["rounds"].iloc[0]) == int((sub["horizon"] > 0).sum())


def test_a_target_holding_the_separator_splits_one_way_everywhere():
    raw = arms_frame([("ssd", "org @ model-7b"), ("ssd", "llama"), ("eagle", "a @ b @ c")])
    lab = arms.label_targets(raw)
    check_arms(raw, lab)
    assert shown(lab.drop_duplicates("drafter")) == [("org @ model-7b", "ssd"), ("llama", "ssd"), ("a @ b @ c", "eagle")]
    assert arms.targets(raw) == ["a @ b @ c", "llama", "org @ model-7b"]


def test_a_target_named_unknown_never_merges_with_rows_that_name_none():
    raw = arms_frame([("sim", "vicuna"), ("sim", None), ("sim", "unknown"), ("sim", "'unknown'")])
    notes: list = []
    lab = arms.label_targets(raw, notes)
    check_arms(raw, lab)
    assert set(lab["drafter"].astype(str)) == {"sim @ vicuna", "sim @ unknown", "sim @ 'unknown'", "sim @ ''unknown''"}
    assert arms.targets(raw) == ["''unknown''", "'unknown'", "unknown", "vicuna"]
    assert any("""'unknown' shown as "'unknown'\"""" in n for n in notes)
    # the timing ledger: the unnamed arm has no baseline; it never borrows the real 'unknown' target's
    def prompts(target, drafter, ms, run):
        return pd.DataFrame({"run_id": run, "task": "a", "prompt_id": [f"p{i}" for i in range(6)], "drafter": drafter,
                             "new_tokens": 100, "decode_ms": ms * 100.0, "target": target})
    base = pd.concat([prompts("unknown", "ar", 40.0, "b1"), prompts("vicuna", "ar", 10.0, "b2")])
    cand = pd.concat([prompts("unknown", "ssd", 10.0, "c1"), prompts(None, "ssd", 5.0, "c2"),
                      prompts("vicuna", "ssd", 5.0, "c3")])
    res = timing_ledger(base, cand, n_boot=0)
    f = res.to_frame()
    assert dict(zip(f["target"], f["speedup"])) == pytest.approx({"'unknown'": 4.0, "vicuna": 2.0})
    assert any("no baseline run of target unknown" in n for n in res.notes)


def test_labelling_twice_is_labelling_once_for_any_names():
    # one target: drafter names that would split are altered (and said); the rest is left as it was
    for a, b in itertools.combinations(NAMES, 2):
        raw = arms_frame([(a, "vicuna"), (b, "vicuna")])
        lab = arms.label_targets(raw)
        assert arms.label_targets(lab) is lab
        assert len(set(lab["drafter"].astype(str))) == 2 and shown(lab) == [(None, d) for d in lab["drafter"].astype(str)]
        if arms.SEP not in a + b and not a.endswith(" @") and not b.endswith(" @"):
            assert lab is raw
    rng = np.random.default_rng(0)
    targets = NAMES + [None]
    for _trial in range(40):
        k = int(rng.integers(1, 5))
        pairs = [(NAMES[i], targets[j]) for i, j in zip(rng.integers(0, len(NAMES), k),
                                                         rng.integers(0, len(targets), k))]
        raw = arms_frame(pairs)
        notes: list = []
        once = arms.label_targets(raw, notes)
        check_arms(raw, once)
        twice = arms.label_targets(once, [])
        assert twice is once
        assert arms.label_targets(once.astype({"drafter": str}))["drafter"].astype(str).tolist() == \
            once["drafter"].astype(str).tolist()
        shown_names = set(arms.plain_drafter(once["drafter"]))
        moved = {d for d in set(raw["drafter"]) if d not in shown_names}
        assert all(any(f"'{d}' shown as" in n for n in notes) for d in moved)     # never silently


FORMATS = ("text", "csv", "json", "latex", "html")


def test_fit_law_and_the_fit_cli_keep_such_arms_apart_and_print_them(tmp_path, capsys):
    pairs = [("ssd @ v2", "lmsys/vicuna-7b-v1.3"), ("ssd @ v2", "org @ llama 70b"), ("ssd", "unknown"),
             ("ssd", None), ("user@host", "org @ llama 70b")]
    raw = arms_frame(pairs)
    want = {("lmsys/vicuna-7b-v1.3", "ssd @@ v2"), ("org @ llama 70b", "ssd @@ v2"), ("'unknown'", "ssd"),
            ("unknown", "ssd"), ("org @ llama 70b", "user@host")}
    law = gl.fit_law(raw, by="task")
    t = arms.split_labels(law.to_frame())
    assert set(zip(t["target"], t["drafter"])) == want
    for (d, tg), sub in raw.groupby(["drafter", raw["target"].fillna("(none)")]):
        tname = "unknown" if tg == "(none)" else arms.target_name(tg)
        dname = "ssd @@ v2" if d == "ssd @ v2" else d
        row = t.loc[(t["target"] == tname) & (t["drafter"] == dname) & (t["task"] == "pooled")]
        assert int(row["rounds"].iloc[0]) == int((sub["horizon"] > 0).sum())
    assert any("'ssd @ v2' shown as 'ssd @@ v2'" in n for n in law.notes)
    assert any("""'unknown' shown as "'unknown'\"""" in n for n in law.notes)
    # the CLI on files (one per arm): the same arms in every format
    for i, (d, tg) in enumerate(pairs):
        f = sim(d, tg, i, f"r{i}")
        write_table(f if tg is not None else f.drop(columns="target"), tmp_path / f"rounds-{i}.parquet",
                    run={"run_id": f"r{i}"})
    out = {}
    for fmt in FORMATS:
        assert fit_main([str(tmp_path), "--format", fmt, "--wide"]) == 0
        out[fmt] = capsys.readouterr().out
    rows = [r for r in fit_json_rows(json.loads(out["json"])) if "target" in r]
    assert {(r["target"], r["drafter"]) for r in rows} >= want
    csv = pd.read_csv(io.StringIO(out["csv"].split("\n\n")[0]), keep_default_na=False)
    assert set(zip(csv["target"], csv["drafter"])) == want
    text = out["text"]
    assert "ssd @@ v2" in text and "org @ llama 70b" in text and "'unknown'" in text and "ssd @ v2 @" not in text
    assert "'ssd @ v2' shown as 'ssd @@ v2'" in text
    assert "&#x27;unknown&#x27;" in out["html"] or "&#39;unknown&#39;" in out["html"]
    assert "ssd @@ v2" in out["latex"] and "org @ llama 70b" in out["latex"]


def test_reductions_of_a_target_named_unknown_and_of_none_stay_apart(tmp_path):
    from glance_law.scale.reduce import merge, reduce_frame
    a = reduce_frame(sim("ssd @ v2", "unknown", 0, "a"))
    b = reduce_frame(sim("ssd @ v2", None, 1, "b").drop(columns="target"))
    assert set(a.cells["drafter"].astype(str)) == {"ssd @@ v2"} and any("shown as 'ssd @@ v2'" in n for n in a.notes)
    m = merge([a, b])
    assert set(m.cells["drafter"].astype(str)) == {"ssd @@ v2 @ 'unknown'", "ssd @@ v2 @ unknown"}
    assert m.info["targets"] == ["'unknown'", "unknown"]
    law = arms.split_labels(gl.fit_reduced(m, by=None).to_frame())
    assert set(zip(law["target"], law["drafter"])) == {("'unknown'", "ssd @@ v2"), ("unknown", "ssd @@ v2")}
    # the out-of-core engine (cells keyed by plain drafter names): the same renaming, said
    from glance_law.scale.engines import reduce_logs
    write_table(sim("ssd @ v2", None, 2, "c").drop(columns="target"), tmp_path / "rounds.parquet", run={"run_id": "c"})
    red = reduce_logs(tmp_path / "rounds.parquet", engine="arrow")
    assert set(red.cells["drafter"].astype(str)) == {"ssd @@ v2"} and any("shown as 'ssd @@ v2'" in n for n in red.notes)
    assert red.rounds == int((sim("ssd @ v2", None, 2, "c")["horizon"] > 0).sum())
