"""The lossless audit: planted divergences at a near-tie and at a wide margin."""
from __future__ import annotations

import pandas as pd
import pytest

from glance_law import audit as A
from glance_law.errors import MissingColumnError


def _prompt(task, pid, drafter, **kw):
    return dict(run_id=drafter, task=task, prompt_id=pid, drafter=drafter, condition="matched", **kw)


def test_first_divergence_golden():
    assert A.first_divergence([1, 2, 3], [1, 2, 3]) == -1
    assert A.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert A.first_divergence([1, 2], [1, 2, 3]) == 2
    assert A.first_divergence([], []) == -1
    assert A.first_divergence([7], [8]) == 0


def test_logged_audit_labels_a_near_tie_and_a_wide_margin():
    P = pd.DataFrame([
        _prompt("docvqa", "d0", "block", greedy_match=True, first_divergence=-1, divergence_margin=None),
        _prompt("docvqa", "d1", "block", greedy_match=False, first_divergence=17, divergence_margin=0.004),
        _prompt("docvqa", "d2", "block", greedy_match=False, first_divergence=40, divergence_margin=3.2),
        _prompt("caption", "c0", "block", greedy_match=True, first_divergence=-1, divergence_margin=None),
        _prompt("caption", "c1", "block", greedy_match=False, first_divergence=5, divergence_margin=0.02),
    ])
    res = A.audit(P, threshold=0.1)
    t = res.to_frame().set_index("task")
    assert t.loc["docvqa", "equal"] == 1 and t.loc["docvqa", "divergences"] == 2
    assert t.loc["docvqa", "near_tie"] == 1 and t.loc["docvqa", "wide"] == 1
    assert t.loc["docvqa", "verdict"] == "NOT lossless"
    assert t.loc["caption", "verdict"] == "lossless up to ties"
    assert t.loc["docvqa", "first_divergence_min"] == 17
    d = res.divergences().to_frame().set_index("prompt_id")
    assert d.loc["d1", "label"] == "near-tie" and d.loc["d2", "label"] == "wide"
    assert d.loc["c1", "label"] == "near-tie"
    assert d.loc["d2", "margin_source"] == "divergence_margin"
    # a stricter gate turns the caption divergence into a wide one
    assert A.audit(P, threshold=0.01).to_frame().set_index("task").loc["caption", "verdict"] == "NOT lossless"


def test_token_comparison_with_round_margins_when_the_logger_did_not_audit():
    greedy = [5, 6, 7, 8, 9, 10, 11, 12]
    P = pd.DataFrame([
        _prompt("docvqa", "p0", "ar", tokens=greedy),
        _prompt("docvqa", "p1", "ar", tokens=greedy),
        _prompt("docvqa", "p2", "ar", tokens=greedy),
        _prompt("docvqa", "p0", "block", tokens=greedy),
        _prompt("docvqa", "p1", "block", tokens=[5, 6, 7, 99, 9, 10, 11, 12]),   # diverges at 3
        _prompt("docvqa", "p2", "block", tokens=[5, 6, 7, 8, 9, 10, 77, 12]),    # diverges at 6
    ])
    # rounds of the block arm: 3 rounds committing 3 + 3 + 2 tokens
    rows = []
    for pid, margins in (("p0", [2.0, 2.0, 2.0]), ("p1", [5.0, 0.01, 4.0]), ("p2", [0.01, 3.0, 6.0])):
        pos = 0
        for r, (acc, m) in enumerate(zip([2, 2, 1], margins)):
            rows.append(dict(run_id="block", task="docvqa", prompt_id=pid, round=r, root_entropy=0.1,
                             accepted=acc, horizon=4, drafter="block", condition="matched", position=pos,
                             min_path_margin=m))
            pos += acc + 1
    R = pd.DataFrame(rows)
    res = A.audit(P, R, threshold=0.1)
    d = res.divergences().to_frame().set_index("prompt_id")
    assert d.loc["p1", "first_divergence"] == 3 and d.loc["p1", "label"] == "near-tie"   # round 1 covers 3..5
    assert d.loc["p2", "first_divergence"] == 6 and d.loc["p2", "label"] == "wide"       # round 2 covers 6..7
    assert (d.margin_source == "round min_path_margin").all()
    row = res.to_frame().iloc[0]
    assert row.audited == 3 and row.equal == 1 and row.verdict == "NOT lossless"
    # without positions the rounds are laid end to end in round order: same answer
    res2 = A.audit(P, R.drop(columns="position"), threshold=0.1)
    assert res2.divergences().to_frame().set_index("prompt_id").label.to_dict() == d.label.to_dict()


def test_committed_streams_from_rounds_when_prompts_lack_tokens():
    P = pd.DataFrame([_prompt("t", "p0", "ar", tokens=[1, 2, 3, 4]), _prompt("t", "p0", "block")])
    R = pd.DataFrame([dict(run_id="b", task="t", prompt_id="p0", round=r, root_entropy=0.1, accepted=1, horizon=2,
                           drafter="block", condition="matched", committed=c, min_path_margin=m)
                      for r, (c, m) in enumerate((([1, 2], 1.0), ([3, 9], 0.05)))])
    d = A.audit(P, R).divergences().to_frame().iloc[0]
    assert d.first_divergence == 3 and d.label == "near-tie" and d.source == "tokens vs ar arm"


def test_clean_audit_is_lossless_and_unaudited_prompts_are_counted():
    P = pd.DataFrame([_prompt("docvqa", f"p{i}", "block", greedy_match=True, first_divergence=-1)
                      for i in range(4)] + [_prompt("docvqa", "p9", "block", greedy_match=None)])
    res = A.audit(P)
    row = res.to_frame().iloc[0]
    assert row.verdict == "lossless" and row.audited == 4 and row.prompts == 5 and row.equal_share == 1.0
    assert any("neither audited" in n for n in res.notes)
    for fmt in ("text", "markdown", "latex", "html", "json", "csv"):
        assert res.summary(fmt) and res.divergences().summary(fmt)


def test_nothing_to_audit_is_a_clear_error():
    P = pd.DataFrame([_prompt("docvqa", "p0", "block", new_tokens=5)])
    with pytest.raises(MissingColumnError, match="--audit"):
        A.audit(P)


# ---------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    from _evidence_fixtures import example_logs

    folder = tmp_path_factory.mktemp("audit_cli")
    ex = example_logs(folder, n_prompts=6, rounds=8, probe=False)
    return folder, ex


def test_cli_audit_every_format_and_labels_the_planted_divergences(example, capsys):
    from _evidence_fixtures import check_cli_formats, run_cli
    import json

    folder, _ = example
    check_cli_formats([folder / "*.parquet", "--audit"], capsys, "audit",
                      [A.AuditResult.title, A.AuditDivergences.title])
    rc, out, _ = run_cli([folder / "*.parquet", "--audit", "--format", "json"], capsys)
    doc = json.loads(out)["audit"]
    labels = {r["prompt_id"]: r["label"] for r in doc[A.AuditDivergences.title]}
    assert labels == {"caption-0000": "near-tie", "caption-0001": "wide"}
    verdict = {r["task"]: r["verdict"] for r in doc[A.AuditResult.title]}
    assert verdict == {"caption": "NOT lossless", "docvqa": "lossless", "textvqa": "lossless"}


def test_cli_audit_token_comparison_with_the_baseline_folder(example, capsys, tmp_path):
    from _evidence_fixtures import run_cli, write_logs
    import json

    folder, ex = example
    P = ex["prompts"].drop(columns=["greedy_match", "first_divergence", "divergence_margin"])
    write_logs(tmp_path, ex["rounds"], P, stem="block")
    rc, out, err = run_cli([tmp_path, folder / "baseline", "--audit", "--format", "json"], capsys)
    assert rc == 0, err
    rows = json.loads(out)["audit"][A.AuditResult.title]
    assert all(r["verdict"] == "lossless" and r["audited"] == 6 for r in rows)


def test_cli_audit_without_prompt_files_fails_clearly(example, capsys, tmp_path):
    from _evidence_fixtures import check_cli_error, write_logs

    folder, ex = example
    write_logs(tmp_path, ex["rounds"])
    check_cli_error([tmp_path, "--audit"], capsys, "prompt files")
    P = ex["prompts"].drop(columns=["greedy_match", "first_divergence", "divergence_margin"])
    write_logs(tmp_path, prompts=P)
    check_cli_error([tmp_path, "--audit"], capsys, "glance-log --audit")


EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed example log")
def test_cli_audit_on_rounds_only_logs_fails_clearly(capsys):
    from _evidence_fixtures import check_cli_error

    check_cli_error([EXAMPLE, "--audit"], capsys, "prompt files")
