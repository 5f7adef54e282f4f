"""The round_order marker (docs/schema.md, docs/your-logs.md "Round order"): rounds rebuilt from
vLLM/SGLang counters or histograms are marked, the analyses that need the order (the policy
replay; the tail's prompt clustering on pooled counters) refuse them in one line, and what needs
no order (the per-group summary) and ordered logs are unaffected."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_importers import prom_scrape, write_jsonl

from glance_law.data.importers import import_logs
from glance_law.data.selection import require_order, unordered_rounds
from glance_law.errors import GlanceError
from glance_law.io import read_logs


@pytest.fixture()
def prom(tmp_path):
    """Five cumulative scrapes of vLLM's per-position counters (K = 3), 100 drafts per interval."""
    text = "\n".join(prom_scrape(100 * k, 300 * k, 170 * k, [80 * k, 50 * k, 40 * k]) for k in range(1, 6))
    f = tmp_path / "metrics.prom"
    f.write_text(text)
    return f


def _sglang_meta(i, hist):
    ct = sum(hist)
    acc = sum(k * n for k, n in enumerate(hist))
    return {"text": "", "meta_info": {"id": f"r{i}", "prompt_tokens": 20, "completion_tokens": acc + ct,
                                      "e2e_latency": 0.5, "spec_verify_ct": ct, "spec_accept_length": (acc + ct) / ct,
                                      "spec_accept_token_num": acc, "spec_draft_token_num": 3 * ct,
                                      "spec_accept_histogram": hist}}


@pytest.fixture()
def sglang(tmp_path):
    rng = np.random.default_rng(0)
    recs = [_sglang_meta(i, [int(x) for x in rng.integers(1, 8, size=4)]) for i in range(30)]
    return write_jsonl(tmp_path / "sg.jsonl", recs)


def _vllm_response(i, steps=None, hist=None):
    sd = {"num_spec_tokens": 3}
    if steps is not None:
        sd.update(per_step_accepted=steps, num_spec_steps=len(steps))
    if hist is not None:
        sd.update(acceptance_histogram=hist, num_spec_steps=sum(hist))
    return {"id": f"req-{i}", "usage": {"prompt_tokens": 10, "completion_tokens": 50},
            "metrics": {"speculative_decoding": sd}}


def _one_line(err: str, prog: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err
    return lines[0]


def test_importers_mark_the_round_order(prom, sglang, tmp_path):
    assert set(import_logs(prom).rounds["round_order"]) == {"pooled"}
    assert set(import_logs(sglang).rounds["round_order"]) == {"unknown"}
    by_len = _vllm_response(2)
    by_len["metrics"]["speculative_decoding"]["acceptance_histogram_by_draft_length"] = {"2": [1, 0, 1], "3": [0, 0, 0, 2]}
    f = write_jsonl(tmp_path / "resp.jsonl", [_vllm_response(0, steps=[3, 0, 1]), _vllm_response(1, hist=[2, 1, 0, 1]),
                                              by_len])
    r = import_logs(f).rounds
    by = r.groupby("prompt_id", observed=True)["round_order"].agg(lambda s: set(s.astype(str)))
    assert by.to_dict() == {"req-0": {"known"}, "req-1": {"unknown"}, "req-2": {"unknown"}}
    assert r.loc[r.prompt_id == "req-0", "accepted"].tolist() == [3, 0, 1]
    # ingest writes the column; a projected read keeps it (glance_law.data.io.ALWAYS_READ)
    from glance_law.ingest import main as ingest
    assert ingest(["vllm", str(prom), "--out", str(tmp_path / "out")]) == 0
    got = read_logs(tmp_path / "out", columns=["accepted"]).frame
    assert "round_order" in got.columns and set(got["round_order"].astype(str)) == {"pooled"}


def test_require_order_reads_absent_and_null_as_known():
    f = pd.DataFrame({"run_id": "a", "prompt_id": "p", "accepted": [1, 2], "horizon": 3})
    require_order(f, "x needs order", "run y")                  # no column: known
    require_order(f.assign(round_order=[None, "known"]), "x needs order", "run y")
    g = f.assign(round_order=["known", "unknown"], drafter="d")
    assert unordered_rounds(g).tolist() == [False, True] and not unordered_rounds(g, ("pooled",)).any()
    require_order(g, "x needs order", "run y", kinds=("pooled",))
    with pytest.raises(GlanceError, match=r"^x needs order, which 1 round\(s\) of run a, drafter d do not record "
                                          r"\(round_order unknown: .*\); run y$"):
        require_order(g, "x needs order", "run y")


def test_policy_refuses_counter_and_histogram_rounds(prom, sglang, capsys):
    from glance_law.policy.cli import main
    for f, kind in ((prom, "pooled"), (sglang, "unknown")):
        assert main([str(f), "--budget", "2", "--bootstrap", "0"]) == 2
        line = _one_line(capsys.readouterr().err, "python -m glance_law.policy")
        assert f"round_order {kind}" in line and "need no order: run python -m glance_law.fit" in line
        assert f"run {f.parent.name}/{f.stem}" in line          # names the run (the file it came from)


def test_policy_runs_on_ordered_per_step_responses(tmp_path, capsys):
    from glance_law.policy.cli import main
    rng = np.random.default_rng(1)
    recs = [_vllm_response(i, steps=[int(x) for x in rng.integers(0, 4, size=25)]) for i in range(12)]
    f = write_jsonl(tmp_path / "resp.jsonl", recs)
    assert main([str(f), "--budget", "2", "--bootstrap", "0", "--folds", "3"]) == 0
    cap = capsys.readouterr()
    assert "keyed-accept" in cap.out and "round_order" not in cap.err


def test_fit_tail_refuses_pooled_counters_and_keeps_the_summary(prom, sglang, capsys):
    from glance_law.fit import main
    assert main([str(prom), "--tail", "--tail-bootstrap", "0"]) == 2
    line = _one_line(capsys.readouterr().err, "python -m glance_law.fit")
    assert "the tail test needs real prompts" in line and "round_order pooled" in line
    assert "python -m glance_law.fit without --tail" in line
    assert main([str(prom), "--format", "json"]) == 0                 # the summary needs no order
    doc = json.loads(capsys.readouterr().out)
    rows = next(iter(doc["summary"].values()))["rows"]
    assert rows[0]["rounds"] == 500 and abs(rows[0]["mean_accepted"] - 1.7) < 1e-9
    # per-request histograms keep their prompts: the tail reads only each prompt's histogram
    assert main([str(sglang), "--tail", "--tail-bootstrap", "0", "--tail-folds", "2"]) == 0
    assert "grounded tail" in capsys.readouterr().out


def test_report_skips_what_needs_the_order(prom, tmp_path, capsys):
    from glance_law.cli.report import main
    out = tmp_path / "rep"
    assert main([str(prom), "--only", "summary,tail,policy", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    tail = next(ln for ln in err.splitlines() if "tail (" in ln)
    policy = next(ln for ln in err.splitlines() if "policy (" in ln)
    assert "skipped" in tail and "round_order pooled" in tail
    assert "skipped" in policy and "round_order pooled" in policy
    assert any("summary (" in ln and ": ok" in ln for ln in err.splitlines())
