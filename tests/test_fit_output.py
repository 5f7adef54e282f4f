"""The fit command's output (issue 24, item 8): the rank sentence, "Next:", number formats, the
order verdict's width and the one shape of ``--format json``."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glance_law.cli import fit as cli
from glance_law.evidence.order import VERDICT_HEADERS, OrderVerdict, short_chain
from glance_law.io import write_table
from glance_law.results import explain
from glance_law.results import format as F
from glance_law.simulate import TaskSpec, simulate_rounds

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "data" / "example" / "rounds-example.parquet"
LOGS = sorted(str(p) for p in (ROOT / "data" / "logs").glob("*.parquet"))


def run(argv, capsys):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# ----------------------------------------------------------------- the rank sentence

def test_rank_phrase_states_direction_and_significance():
    pos = explain.rank_phrase(0.20, 0.011)            # significant, against the law
    assert "positively" in pos and "significantly" in pos and "against the law" in pos
    assert "not significant" not in pos and "rho = +0.20, p = 0.011" in pos
    neg = explain.rank_phrase(-0.12, 0.077)           # the law's direction, not significant
    assert neg.startswith("the negative rank correlation") and "not significant" in neg and "-0.12" in neg
    weak = explain.rank_phrase(0.05, 0.6)             # the wrong direction, not significant
    assert weak.startswith("the positive rank correlation") and "not significant" in weak
    tiny = explain.rank_phrase(0.4, 2e-9)
    assert "p = 2.0e-09" in tiny and "significantly" in tiny
    assert "could not be computed" in explain.rank_phrase(float("nan"), float("nan"))


def test_sentences_on_the_committed_logs_never_call_a_small_p_not_significant(capsys):
    rc, out, err = run(LOGS, capsys)
    assert rc == 0, err
    head = out.split("\n\n")[0]
    for _rho, p in re.findall(r"not significant \(rho = ([-+0-9.]+), p = ([0-9.e-]+)\)", head):
        assert float(p) >= 0.05
    for rho, p in re.findall(r"significantly \(rho = ([-+0-9.]+), p = ([0-9.e-]+)\)", head):
        assert float(p) < 0.05 and float(rho) > 0
    assert "positively, significantly" in head      # the committed logs hold such a group (pld/infovqa)


# ----------------------------------------------------------------- Next:

@pytest.mark.parametrize("given", [(), ("order",), ("--tail", "--order"), ("tail", "order", "offsets")])
def test_next_never_suggests_a_flag_already_given(given):
    line = explain.closing_sentence(False, given)
    assert line.startswith("Next: ") and line.endswith(".")
    suggested = line.split("add ", 1)[1] if "add " in line else ""
    for flag, _ in explain.NEXT_SECTIONS:
        assert (flag in suggested) == (flag.lstrip("-") not in {g.lstrip("-") for g in given})
    assert "--wide" in explain.closing_sentence(True, given)


def test_next_on_the_command_line(capsys):
    rc, out, _ = run([EXAMPLE, "--order"], capsys)
    last = out.rstrip().splitlines()[-1]
    assert rc == 0 and last.startswith("Next: ") and "--order" not in last and "--tail" in last


# ----------------------------------------------------------------- number formats

def test_one_number_format_per_column():
    frame = pd.DataFrame({"task": ["a", "b", "c"],
                          "est": [382.0, 99.765, 0.5], "est_lo": [300.25, 90.0, 0.1], "est_hi": [400.0, 101.5, 1.0],
                          "count": [3.0, 40.0, np.nan], "u": [1484.0, 1003.5, 12.0],
                          "mw_p": [2.2e-11, 0.05, 0.5], "big": [2.5e6, 12.0, 1.0], "n": [1, 2, 3]})
    d = F.display_frame(frame)
    assert list(d["est"]) == ["382.000 [300.250, 400.000]", "99.765 [90.000, 101.500]", "0.500 [0.100, 1.000]"]
    assert list(d["count"]) == ["3", "40", "-"]                 # counts stored as floats print as integers
    assert list(d["u"]) == ["1484.0", "1003.5", "12.0"]        # one decimal for the whole column
    assert list(d["mw_p"]) == ["2.2e-11", "0.050", "0.500"]    # p-values: their own rule
    assert list(d["big"]) == ["2.500e+06", "1.200e+01", "1.000e+00"]
    assert list(d["n"]) == ["1", "2", "3"]
    for c in ("est", "u", "big"):   # every cell of a column has the same number of decimals
        decimals = {len(x.split(".")[1].split("e")[0]) for cell in d[c] for x in re.findall(r"[-0-9.e+]+", cell)}
        assert len(decimals) == 1, (c, decimals)


# ----------------------------------------------------------------- the order verdict

def test_a_long_order_leaves_the_verdict_columns_in_view():
    tasks = [f"spec_bench_category_{i:02d}" for i in range(6)]
    chain = " < ".join(tasks)
    assert len(chain) > 130
    frame = pd.DataFrame([{"drafter": "eagle", "task": chain, "means_ordered": True, "slopes_ordered": False,
                           "entropy_reversed": True, "gaps_exclude_zero": False, "boot_share_ordered": 0.125,
                           "kendall_tau_means": 0.6, "kendall_tau_slopes": np.nan}])
    res = OrderVerdict(frame)
    text = res.summary("text", width=100)
    assert "not shown to fit" not in text
    header = text.splitlines()[2]
    for short in VERDICT_HEADERS.values():
        assert short in header.split()
    assert max(len(x) for x in text.splitlines() if not x.startswith("note:")) <= 100
    assert f"order in full: {chain}" in text
    assert short_chain(chain) == "6 tasks" and short_chain("a < b < c") == "a < b < c"
    five = " < ".join(["caption", "textvqa", "infovqa", "docvqa", "chartqa"])
    assert short_chain(five, 40) == "caption < ... < chartqa (5 tasks)" and short_chain(five, 50) == five
    assert json.loads(res.summary("json"))[0]["task"] == chain        # machine formats keep the whole order


# ----------------------------------------------------------------- the JSON document

def _assert_shape(doc):
    assert doc["version"] == cli.JSON_VERSION
    assert list(doc)[:3] == ["version", "summary", "law"] and list(doc)[-1] == "skipped"
    for name, block in doc.items():
        if name == "version":
            continue
        assert isinstance(block, dict), name
        for title, table in block.items():
            assert isinstance(title, str) and set(table) == {"rows", "notes"}, (name, title)
            assert isinstance(table["rows"], list) and all(isinstance(r, dict) for r in table["rows"])
            assert all(isinstance(n, str) for n in table["notes"])
    (skipped,) = doc["skipped"].values()
    return [r["section"] for r in skipped["rows"]]


def test_json_has_one_shape_for_every_input(tmp_path, capsys):
    plain = simulate_rounds([TaskSpec("caption", 1.0, 1.0), TaskSpec("docvqa", 3.0, 1.0)], n_prompts=12, seed=3,
                            vectors=False)
    write_table(plain, tmp_path / "full" / "rounds-a.parquet")
    no_entropy = plain.assign(root_entropy=pd.array([None] * len(plain), dtype="Float32"))  # as importers write it
    write_table(no_entropy, tmp_path / "noent" / "rounds-a.parquet")
    cases = {"plain": [tmp_path / "full"],
             "section": [tmp_path / "full", "--order", "--order-bootstrap", "20"],
             "no entropy": [tmp_path / "noent", "--order", "--order-bootstrap", "20"],
             "pooled": [tmp_path / "full", "--by", "none"],
             "reduced": [tmp_path / "full", "--engine", "arrow"]}
    docs = {}
    for name, argv in cases.items():
        rc, out, err = run(argv + ["--format", "json"], capsys)
        assert rc == 0, (name, err)
        docs[name] = json.loads(out)
        skipped = _assert_shape(docs[name])
        assert ("law" in skipped) == (name == "no entropy"), name
    assert docs["no entropy"]["law"] == {} and cli.json_rows(docs["no entropy"]) == []
    law = cli.json_rows(docs["plain"])
    assert [r["task"] for r in law] == ["caption", "docvqa", "pooled"]
    assert cli.json_rows(docs["section"]) == law                    # a section changes nothing else
    (notes,) = [t["notes"] for t in docs["plain"]["law"].values()]
    assert any(n.startswith("intervals:") for n in notes)             # the notes come along
    assert "order" in docs["section"] and len(docs["section"]["order"]) == 3
    assert [r["task"] for r in cli.json_rows(docs["pooled"])] == ["pooled"]
    assert docs["reduced"]["summary"] == {} and cli.json_rows(docs["reduced"])[-1]["task"] == "pooled"


# ----------------------------------------------------------------- the README and the hint say what the logs show

def test_readme_and_hint_match_the_committed_logs():
    import glance_law as gl
    law = gl.fit_law(gl.read_rounds(LOGS)).to_frame()
    tasks = sorted(set(law["task"]) - {"pooled"})
    readme = (ROOT / "README.md").read_text()
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}
    assert f"all {words[len(tasks)]} tasks ({', '.join(tasks)})" in readme
    pooled = law[law["task"] == "pooled"]
    assert (pooled["b1_lo"] > 0).all()                                      # the contrast across tasks
    row = law[(law["task"] == "caption") & (law["drafter"] == "block")].iloc[0]
    assert row["b1_lo"] < 0 < row["b1_hi"]                                  # no slope inside caption
    block = law[law["drafter"] == "block"].set_index("task")
    assert block.loc["caption", "mean_entropy"] > block.loc["docvqa", "mean_entropy"]
    assert block.loc["caption", "mean_accepted"] < block.loc["docvqa", "mean_accepted"]
    hint = explain._contrast(law, "block", "docvqa", {})
    assert "pooled row's slope" in hint and "not identified" in hint
