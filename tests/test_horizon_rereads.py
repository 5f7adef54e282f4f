"""Issue 36.10: ``report`` and ``fit --timing`` honour ``--horizon`` when they reread prompt rows.

An SGLang capture of an EAGLE tree (7 drafts proposed per step, no server settings) needs
``--horizon L``; the rounds were read with it, but the report's prompt rows and the timing ledger's
baseline and candidate prompt rows were reread without it, so ``report captures/sglang-tree.jsonl
--horizon 3`` still said "pass --horizon L"."""
from __future__ import annotations

import contextlib
import io
import json

import pandas as pd
import pytest
from test_importers_engines import sg

from glance_law.io import write_table

N = 6


def _main(module: str, args) -> tuple[int, str, str]:
    import importlib
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def tree(tmp_path):
    """Six SGLang requests of a depth-3 tree (histogram of accepted lengths 0..3), each ``e2e_latency``
    s, and a baseline's prompt rows (drafter ar) over the same prompts."""
    cap = tmp_path / "sglang-tree.jsonl"
    with cap.open("w") as fh:
        for i in range(N):
            rec = sg(f"q{i}", [4 + i, 3, 2, 1], 7)
            rec["meta_info"]["e2e_latency"] = 0.3 + 0.01 * i
            fh.write(json.dumps(rec) + "\n")
    base = pd.DataFrame({"run_id": "base", "prompt_id": [f"q{i}" for i in range(N)], "task": "unknown",
                         "drafter": "ar", "new_tokens": [20 + i for i in range(N)],
                         "decode_ms": [600.0 + 10 * i for i in range(N)], "prompt_tokens": 9,
                         "rounds": [20 + i for i in range(N)]})
    write_table(base, tmp_path / "base" / "prompts-base.parquet", kind="prompts")
    return cap, tmp_path / "base"


def test_without_horizon_the_capture_is_refused(tree):
    cap, _ = tree
    rc, _, err = _main("glance_law.cli.fit", [cap])
    assert rc == 2 and "--horizon" in err and len(err.strip().splitlines()) == 1


def test_fit_timing_rereads_with_the_horizon(tree):
    cap, base = tree
    rc, out, err = _main("glance_law.cli.fit", [cap, "--horizon", "3", "--timing", base])
    assert rc == 0, err
    assert "pass --horizon" not in out + err
    row = next(ln for ln in out.splitlines() if ln.startswith("unknown") and "27.881" in ln)
    # re-derived: baseline ms/token = mean over prompts of (600 + 10 i) / (20 + i); candidate = e2e / new tokens
    b = sum((600 + 10 * i) / (20 + i) for i in range(N)) / N
    new = [(4 + i) + 3 + 2 + 1 + (3 + 2 * 2 + 3 * 1) for i in range(N)]     # one per round + accepted
    c = sum(1000 * (0.3 + 0.01 * i) / new[i] for i in range(N)) / N
    assert f"{b:.3f}" in row and f"{c:.3f}" in row, (row, b, c)


def test_report_rereads_its_prompt_rows_with_the_horizon(tree, tmp_path):
    cap, _ = tree
    out = tmp_path / "app"
    rc, _, err = _main("glance_law.cli.report", [cap, "--horizon", "3", "--only", "summary", "--out", out, "--quiet"])
    assert rc == 0, err
    index = (out / "index.md").read_text()
    assert "pass --horizon" not in index + err and "depth from --horizon for 6 request(s)" in index
