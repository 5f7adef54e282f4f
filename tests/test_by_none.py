"""Issue 24, item 6: ``--by none`` is honoured by every section of ``python -m glance_law.fit``
and ``python -m glance_law.report``: each table holds the pooled rows only (one per drafter for
the sections' main tables), all labelled ``pooled`` like the law's pooled row; a section whose
rows compare tasks is listed as not run, saying why and what to drop."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from glance_law.cli import fit as fit_cli
from glance_law.data.selection import POOLED

LOGS = Path(__file__).resolve().parent.parent / "data" / "logs"
DRAFTERS = 2            # block and pld: a pooled row each, never one pooled over both decoders

#: (section arguments, the section's key in the JSON document, whether its first table has one row per drafter)
CASES = [
    (["--tail", "--tail-bootstrap", "0"], "tail", True),
    (["--width", "--width-bootstrap", "0", "--budgets", "15"], "width", True),
    (["--offsets", "--offset-bins", "3"], "offsets", False),
    (["--probe", "--probe-bootstrap", "20", "--condition", "all"], "probe", True),
    (["--transfer", "caption:docvqa,chartqa"], "transfer", True),
    (["--audit"], "audit", True),
    (["--timing", str(LOGS / "*-ar-*"), "--timing-bootstrap", "20"], "timing", True),
]


def fit_json(argv, capsys) -> dict:
    assert fit_cli.main([str(LOGS), *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def is_pooled(label) -> bool:
    return str(label) == POOLED or str(label).endswith("/" + POOLED)     # width labels groups drafter/task


@pytest.mark.parametrize("argv,key,per_drafter", CASES, ids=[c[1] for c in CASES])
def test_by_none_gives_each_section_its_pooled_rows_only(argv, key, per_drafter, capsys):
    doc = fit_json(["--by", "none", *argv], capsys)
    for part in ("summary", "law"):
        rows = fit_cli.json_rows(doc, part)
        assert len(rows) == DRAFTERS and all(r["task"] == POOLED for r in rows)
    tables = doc[key]
    assert tables, f"--{key} printed nothing"
    for title, table in tables.items():
        labelled = [r for r in table["rows"] if "task" in r]
        assert all(is_pooled(r["task"]) for r in labelled), (title, {r["task"] for r in labelled})
    first = next(iter(tables.values()))["rows"]
    assert first and all("task" in r for r in first)
    if per_drafter:
        assert len(first) == DRAFTERS, (key, [r["task"] for r in first])
    # the same section grouped by task holds more than the pooled rows (the test can fail)
    grouped = next(iter(fit_json(argv, capsys)[key].values()))["rows"]
    assert any(not is_pooled(r["task"]) for r in grouped)


def test_by_none_pooled_rows_pool_every_task(capsys):
    """The pooled tail row holds every task's floor rounds (not one task's); the pooled timing row
    every paired prompt."""
    pooled = fit_json(["--by", "none", "--tail", "--tail-bootstrap", "0", "--tail-threshold", "0.5"], capsys)
    per_task = fit_json(["--tail", "--tail-bootstrap", "0", "--tail-threshold", "0.5"], capsys)
    p = pd.DataFrame(fit_cli.json_rows(pooled, "tail")).set_index("drafter")
    t = pd.DataFrame(fit_cli.json_rows(per_task, "tail")).groupby("drafter")["floor_rounds"].sum()
    assert (p["floor_rounds"] == t).all()
    argv = ["--timing", str(LOGS / "*-ar-*"), "--timing-bootstrap", "0"]
    p = pd.DataFrame(fit_cli.json_rows(fit_json(["--by", "none", *argv], capsys), "timing")).set_index("drafter")
    t = pd.DataFrame(fit_cli.json_rows(fit_json(argv, capsys), "timing"))
    t = t[t["task"] != "geomean"].groupby("drafter")["prompts"].sum()
    assert (p["prompts"] == t).all()


def test_a_section_that_compares_tasks_is_listed_as_not_run(capsys):
    assert fit_cli.main([str(LOGS), "--by", "none", "--order", "--order-bootstrap", "20", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    skipped = fit_cli.json_rows(doc, "skipped")
    assert [r["section"] for r in skipped] == ["--order"] and "order" not in doc
    assert "compares the tasks" in skipped[0]["reason"] and "drop --by none" in skipped[0]["reason"]
    assert "--order" in err


def test_by_none_on_the_reduced_path(capsys):
    doc = fit_json(["--engine", "arrow", "--by", "none", "--tail", "--tail-bootstrap", "0"], capsys)
    for part in ("law", "tail"):
        rows = fit_cli.json_rows(doc, part)
        assert len(rows) == DRAFTERS and all(r["task"] == POOLED for r in rows), part


def test_report_by_none(tmp_path):
    from glance_law.cli import report
    out = tmp_path / "rep"
    assert report.main([str(LOGS), "--out", str(out), "--by", "none", "--quiet", "--jobs", "1",
                        "--only", "summary,law,tail,ordering,probe", "--tail-bootstrap", "0",
                        "--probe-bootstrap", "20"]) == 0
    for stem in ("summary_accepted", "table12_law", "prop3_tail", "table16_probe"):
        t = pd.read_csv(out / "tables" / f"{stem}.csv")
        assert len(t) == DRAFTERS and set(t["task"]) == {POOLED}, stem
    man = json.loads((out / "manifest.json").read_text())
    status = {s["name"]: s for s in man["sections"]}
    assert status["ordering"]["status"] == "skipped" and "--by none" in status["ordering"]["reason"]
    assert status["law"]["status"] == "ok"
