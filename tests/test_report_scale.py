"""The report at scale: the prompt-clustered sample (glance_law.data.sample) and the large-log path
(scalar columns read once, list columns read per section) giving the same tables as a full read."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glance_law.cli import report
from glance_law.data.sample import sample_prompts

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "data" / "logs"


def _frame(seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for task, prompts in (("a", 300), ("b", 60), ("c", 5)):
        for g in range(prompts):
            for r in range(int(rng.integers(1, 40))):
                rows.append((task, f"{task}{g}", r))
    return pd.DataFrame(rows, columns=["task", "prompt_id", "round"]).sample(frac=1.0, random_state=seed)


def test_sample_keeps_whole_prompts_every_task_and_its_share():
    f = _frame()
    cap = len(f) // 5
    mask, kept = sample_prompts(f, cap, seed=3)
    sub = f.loc[mask]
    whole = f.groupby(["task", "prompt_id"]).size()
    got = sub.groupby(["task", "prompt_id"]).size()
    assert (whole.loc[got.index] == got).all(), "a kept prompt lost rounds"
    assert set(sub["task"]) == {"a", "b", "c"}
    assert len(kept) == len(got)
    for t in ("a", "b"):            # each task keeps about its share (whole prompts: up to one prompt over)
        share = (sub["task"] == t).sum() / (f["task"] == t).sum()
        assert 0.15 < share < 0.35
    assert 0.8 * cap <= len(sub) <= 1.3 * cap


def test_sample_is_seeded_order_free_and_nested():
    f = _frame()
    cap = len(f) // 4
    m1, _ = sample_prompts(f, cap, seed=1)
    m2, _ = sample_prompts(f.iloc[::-1], cap, seed=1)
    assert set(f.loc[m1, "prompt_id"]) == set(f.iloc[::-1].loc[m2, "prompt_id"])
    m3, _ = sample_prompts(f, cap, seed=2)
    assert set(f.loc[m1, "prompt_id"]) != set(f.loc[m3, "prompt_id"])
    big, _ = sample_prompts(f, 2 * cap, seed=1)
    assert set(f.loc[m1, "prompt_id"]) <= set(f.loc[big, "prompt_id"])
    assert sample_prompts(f, len(f), seed=1)[0] is None
    assert sample_prompts(f, 0, seed=1)[0] is None


SECTIONS = "offsets,width,policy,audit"


def _tables(out: Path) -> dict:
    return {p.name: p.read_text() for p in sorted((out / "tables").glob("*.csv"))}


@pytest.mark.skipif(not LOGS.is_dir(), reason="no committed logs")
def test_large_log_path_gives_the_full_reads_tables(tmp_path, monkeypatch):
    """Scalar columns read once, list columns per section (forced by FULL_READ_ROUNDS = 0): with
    no sampling (caps 0) the tables equal a full read's, byte for byte."""
    args = ["--only", SECTIONS, "--replay-rounds", "0", "--offset-rounds", "0", "--width-bootstrap", "20", "--quiet"]
    assert report.main([str(LOGS), "--out", str(tmp_path / "full"), *args]) == 0
    assert report.scalar_columns([str(LOGS)]) is None
    monkeypatch.setattr(report, "FULL_READ_ROUNDS", 0)
    cols = report.scalar_columns([str(LOGS)])
    assert cols is not None and "topk_logq" not in cols and "root_entropy" in cols
    assert report.main([str(LOGS), "--out", str(tmp_path / "lazy"), *args]) == 0
    full, lazy = _tables(tmp_path / "full"), _tables(tmp_path / "lazy")
    assert {"figure5_width.csv", "policy_heldout-block.csv", "policy_heldout-pld.csv", "assumption2_offset_law.csv",
            "table7_audit.csv"} <= set(full)
    assert full == lazy


@pytest.mark.skipif(not LOGS.is_dir(), reason="no committed logs")
def test_sampled_sections_say_so_and_match_the_in_memory_sample(tmp_path, monkeypatch):
    """A sample read batch by batch from the files (large-log path) gives the tables of the same
    sample taken from a full read; the tables name the sample."""
    args = ["--only", "offsets,width", "--replay-rounds", "1500", "--offset-rounds", "2000", "--width-bootstrap", "20",
            "--quiet"]
    assert report.main([str(LOGS), "--out", str(tmp_path / "mem"), *args]) == 0
    monkeypatch.setattr(report, "FULL_READ_ROUNDS", 0)
    assert report.main([str(LOGS), "--out", str(tmp_path / "s"), *args]) == 0
    assert _tables(tmp_path / "mem") == _tables(tmp_path / "s")
    width = (tmp_path / "s" / "tables" / "figure5_width.md").read_text()
    offsets = (tmp_path / "s" / "tables" / "assumption2_offset_law.md").read_text()
    assert "prompt-clustered sample" in width and "--replay-rounds 0 uses every round" in width
    assert "prompt-clustered sample" in offsets and "--offset-rounds 0" in offsets
    index = (tmp_path / "s" / "index.md").read_text()
    assert "read only by the sections that use them" in index
