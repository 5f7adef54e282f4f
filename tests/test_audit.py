"""The lossless audit: planted divergences at a near-tie and at a wide margin."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glance_law.errors import MissingColumnError
from glance_law.evidence import audit as A


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


def _rounds(pid, commits, margins, first, drafter="block", **cols):
    """Rounds of one prompt committing ``commits`` tokens each; ``first`` = 1: glance-log's
    convention (the prefill produced token 0, round r's root sits at ``position``), 0: the
    Hugging Face hook's (round 0 commits token 0; its position is 0, later ones root - 1)."""
    rows, done = [], first
    for r, (n, m) in enumerate(zip(commits, margins)):
        rows.append(dict(run_id=drafter, task="docvqa", prompt_id=pid, round=r, root_entropy=0.1, accepted=n - 1,
                         horizon=4, drafter=drafter, condition="matched", position=max(done - 1, 0),
                         min_path_margin=m, **{k: v[r] for k, v in cols.items()}))
        done += n
    return rows


def _owner(commits, first, pos):
    """Brute force: list every output index each round committed, find ``pos``."""
    owner, i = {}, first
    for r, n in enumerate(commits):
        for _ in range(n):
            owner[i] = r
            i += 1
    return owner.get(pos)


@pytest.mark.parametrize("first", [1, 0])
@pytest.mark.parametrize("drop", [(), ("position",), ("position", "committed")])
def test_round_margin_of_every_divergence_index_by_brute_force(first, drop):
    """Each output index, planted as the divergence, gets the margin of the round that committed
    it - in both conventions, with or without position / committed (new_tokens then tells)."""
    commits = [3, 1, 3, 2]
    margins = [10.0, 11.0, 12.0, 13.0]
    n_out = first + sum(commits)
    greedy = list(range(100, 100 + n_out))
    P, R = [], []
    for pos in range(n_out + 1):                        # n_out: the ar arm ran one token longer
        out = greedy[:pos] + [7] + greedy[pos + 1:] if pos < n_out else greedy
        pid = f"p{pos}"
        P += [_prompt("docvqa", pid, "ar", tokens=greedy + [8]), _prompt("docvqa", pid, "block", tokens=out)]
        cuts = np.cumsum([first] + commits)
        R += _rounds(pid, commits, margins, first, committed=[out[cuts[r]:cuts[r + 1]] for r in range(4)])
    R = pd.DataFrame(R).drop(columns=list(drop))
    d = A.audit(pd.DataFrame(P), R).divergence_frame.set_index("prompt_id")
    # without position and committed only glance-log's accepted + 1 total tells (n_out - 1);
    # the HF total is ambiguous: a margin only where both conventions name one round
    known = not (first == 0 and "committed" in drop)
    for pos in range(n_out + 1):
        r = _owner(commits, first, pos)
        if not known and _owner(commits, 1, pos) != r:
            r = None
        got = d.loc[f"p{pos}"]
        assert got.first_divergence == pos
        if r is None:                       # token 0 of a glance-log output, or past the end
            assert np.isnan(got.margin) and got.label == "unknown"
        else:
            assert got.margin == margins[r] and got.margin_source == "round min_path_margin"


def test_auditor_repro_a_a_divergence_at_a_round_root_gets_the_committing_rounds_margin():
    # glance-log output t = [10..14]: round 0 (root t[0]) accepted 2 and committed t[1..3], all at
    # wide margins (5.0); round 1 (root t[3]) committed t[4] at a near-tie (0.01). A divergence at
    # token 3 was committed by round 0: wide, NOT lossless (it was read as round 1's near-tie)
    R = pd.DataFrame(dict(run_id="s", task="docvqa", prompt_id="p", condition="matched", drafter="block",
                          round=[0, 1], position=[0, 3], accepted=[2, 0], horizon=[4, 4], root_entropy=[0.1, 0.1],
                          min_path_margin=[5.0, 0.01], committed=[[11, 12, 13], [14]]))
    P = pd.DataFrame(dict(run_id="s", task="docvqa", prompt_id=["p"], condition="matched", drafter="block",
                          greedy_match=[False], first_divergence=[3], divergence_margin=[np.nan],
                          tokens=[[10, 11, 12, 99, 14]]))
    res = A.audit(P, R)
    d = res.divergence_frame.iloc[0]
    assert d.margin == 5.0 and d.label == "wide"
    assert res.frame.iloc[0].verdict == "NOT lossless"
    # (b) the speculative prompt row has no tokens: the rounds hold t[1:], the ar arm all of t
    P2 = pd.DataFrame(dict(run_id=["s", "a"], task="docvqa", prompt_id="p", condition="matched",
                           drafter=["block", "ar"], tokens=[None, [10, 11, 12, 13, 14]]))
    res2 = A.audit(P2, R)
    row = res2.frame.iloc[0]
    assert row.audited == 1 and row.equal == 1 and row.verdict == "lossless"
    assert any("second token" in n for n in res2.notes)
    # a real divergence after token 0 is still found, at its output index
    P3 = P2.assign(tokens=[None, [10, 11, 12, 13, 15]])
    d3 = A.audit(P3, R).divergence_frame.iloc[0]
    assert d3.first_divergence == 4 and d3.margin == 0.01 and d3.label == "near-tie"


@pytest.mark.parametrize("first", [1, 0])
def test_committed_streams_from_rounds_when_prompts_lack_tokens(first):
    greedy = [1, 2, 3, 4, 5]
    commits = [2, 2] if first else [2, 3]
    spec = greedy[first:]
    spec = spec[:3] + [9] + spec[4:]                     # output index first + 3 differs
    committed = [spec[:2], spec[2:]]
    P = pd.DataFrame([_prompt("t", "p0", "ar", tokens=greedy), _prompt("t", "p0", "block", new_tokens=5)])
    R = pd.DataFrame([dict(r, task="t") for r in _rounds("p0", commits, [1.0, 0.05], first, committed=committed)])
    for rounds in (R, R.drop(columns="position")):       # the step of position, or the total, tells
        d = A.audit(P, rounds).divergences().to_frame().iloc[0]
        assert d.first_divergence == first + 3 and d.label == "near-tie" and d.source == "tokens vs ar arm"
    # one round and no token count: the log does not tell; counted, not audited
    R1 = R.iloc[:1].assign(committed=[greedy[first:first + 2]])
    res = A.audit(P.drop(columns="new_tokens"), R1)
    assert res.frame.iloc[0].audited == 0 and any("could not be aligned" in n for n in res.notes)


def test_unknown_convention_gives_a_round_margin_only_where_both_conventions_agree():
    # one round of 4 committed tokens, no position, no token count: indices 1..3 lie in round 0
    # under both conventions; 0 and 4 depend on the convention
    R = pd.DataFrame(_rounds("p0", [4], [2.0], 1)).drop(columns="position")
    P = pd.DataFrame([_prompt("docvqa", "p0", "block", greedy_match=False, first_divergence=fd)
                      for fd in (0, 2, 4)]).assign(prompt_id="p0")
    margins = [A.audit(P.iloc[[i]], R).divergence_frame.iloc[0].margin for i in range(3)]
    assert np.isnan(margins[0]) and margins[1] == 2.0 and np.isnan(margins[2])


def test_glance_log_data_logs_audit_from_tokens_and_from_rounds_alike():
    """The committed glance-log example logs (greedy_match True throughout): rebuilt from the
    rounds' committed lists they are still lossless, and a divergence planted at each round's
    root gets the margin of the round that committed it (the one before)."""
    logs = EXAMPLE.parent / "logs"
    if not logs.exists():
        pytest.skip("no committed data/logs")
    from glance_law.io import read_logs

    R = read_logs(str(logs), columns=["drafter", "position", "committed", "min_path_margin"]).frame
    P = read_logs(str(logs), kind="prompts").frame
    P = P.loc[P["condition"] == "matched"].drop(columns=["greedy_match", "first_divergence", "divergence_margin"])
    spec = P["drafter"] != "ar"
    res = A.audit(P.assign(tokens=[None if s else t for s, t in zip(spec, P["tokens"])]), R)
    t = res.frame.loc[res.frame["audited"] > 0]
    paired = P.loc[spec, "task"].isin(set(P.loc[~spec, "task"]))      # tasks with an ar arm
    assert (t["verdict"] == "lossless").all() and t["audited"].sum() == paired.sum() > 0
    assert (t["equal"] == t["audited"]).all()
    # plant: the ar arm's token at round 1's root (round 0's bonus) differs
    Rm = R.loc[(R["condition"] == "matched") & (R["drafter"] == "block")].sort_values("round")
    two = Rm.groupby(["task", "prompt_id"], observed=True).filter(lambda g: len(g) >= 2)
    (task, pid), sub = next(iter(two.groupby(["task", "prompt_id"], observed=True)))
    root1 = int(sub["position"].iloc[1])
    Pp = P.loc[(P["task"] == task) & (P["prompt_id"] == pid) & P["drafter"].isin(["ar", "block"])].copy()
    toks = list(Pp.loc[Pp["drafter"] == "ar", "tokens"].iloc[0])
    toks[root1] = -5 % 500
    Pp["tokens"] = [toks if d == "ar" else None for d in Pp["drafter"]]
    d = A.audit(Pp, R).divergence_frame.iloc[0]
    assert d.first_divergence == root1
    assert d.margin == pytest.approx(float(sub["min_path_margin"].iloc[0]))


def _two_runs(first=1):
    """Two runs of the block drafter on the same prompts (budgets 63 and 31: different rounds).
    Run "b63" is lossless with near-tie rounds (0.01); run "b31" has a divergence planted at
    output index pos of prompt p{pos}, its rounds wide (4.0 + r). Rows of the two runs interleave."""
    commits = {"b63": [4, 1, 3], "b31": [2, 2, 2, 2]}
    margins = {"b63": [0.01, 0.01, 0.01], "b31": [4.0, 5.0, 6.0, 7.0]}
    n_out = first + 8
    greedy = list(range(100, 100 + n_out))
    P, R = [], []
    for pos in range(first, n_out):
        pid = f"p{pos}"
        P.append(_prompt("docvqa", pid, "ar", tokens=greedy))
        for run, c in commits.items():
            out = greedy[:pos] + [7] + greedy[pos + 1:] if run == "b31" else greedy
            cuts = np.cumsum([first] + c)
            P.append(dict(_prompt("docvqa", pid, "block", new_tokens=n_out), run_id=run))
            R += [dict(r, run_id=run) for r in _rounds(pid, c, margins[run], first,
                                                        committed=[out[cuts[i]:cuts[i + 1]] for i in range(len(c))])]
    R = pd.DataFrame(R).sort_values(["prompt_id", "round"], kind="stable").reset_index(drop=True)
    return pd.DataFrame(P), R, commits, margins, n_out


@pytest.mark.parametrize("first", [1, 0])
@pytest.mark.parametrize("drop", [(), ("position",)])
def test_two_runs_of_one_drafter_are_audited_apart_by_brute_force(first, drop):
    """Rounds of one prompt in two runs are two streams: the lossless run stays lossless, and every
    divergence planted in the other run gets that run's committing round's margin (brute force)."""
    P, R, commits, margins, n_out = _two_runs(first)
    res = A.audit(P, R.drop(columns=list(drop)))
    t = res.frame.set_index("run_id")
    assert list(res.frame.columns[:2]) == ["run_id", "task"] and len(res.frame) == 2
    assert t.loc["b63", "verdict"] == "lossless" and t.loc["b63", "equal"] == t.loc["b63", "audited"] == n_out - first
    assert t.loc["b31", "verdict"] == "NOT lossless" and t.loc["b31", "divergences"] == n_out - first
    assert t.loc["b31", "wide"] == n_out - first and t.loc["b31", "near_tie"] == 0
    d = res.divergence_frame
    assert (d["run_id"] == "b31").all() and list(d.columns[:3]) == ["drafter", "run_id", "task"]
    for row in d.itertuples():
        pos = int(row.prompt_id[1:])
        assert row.first_divergence == pos
        assert row.margin == margins["b31"][_owner(commits["b31"], first, pos)]
    assert any("b31, b63" in n and "one row per run" in n for n in res.notes)


def test_two_runs_logged_audit_margins_and_single_run_output_unchanged():
    # the logger's audit without divergence_margin: the margin comes from the divergent run's rounds
    P, R, commits, margins, n_out = _two_runs()
    spec = P["drafter"] == "block"
    P.loc[spec, "tokens"] = None
    P["greedy_match"] = [None if not s else r == "b63" for s, r in zip(spec, P["run_id"])]
    P["first_divergence"] = [int(p[1:]) if r == "b31" else -1 for p, r in zip(P["prompt_id"], P["run_id"])]
    d = A.audit(P, R).divergence_frame
    assert (d["run_id"] == "b31").all() and len(d) == n_out - 1
    assert [m for m in d["margin"]] == [margins["b31"][_owner(commits["b31"], 1, int(p[1:]))] for p in d["prompt_id"]]
    # one run: no run_id column, no run note, the verdict as before
    one = A.audit(P.loc[P["run_id"] != "b63"], R.loc[R["run_id"] == "b31"])
    assert list(one.frame.columns[:2]) == ["task", "prompts"] and "run_id" not in one.divergence_frame.columns
    assert list(one.divergence_frame.columns[:3]) == ["drafter", "task", "prompt_id"]
    assert one.frame.iloc[0].verdict == "NOT lossless" and not any("several runs" in n for n in one.notes)
    # runs of different drafters (one per drafter and task) are not "several runs": no run column
    two = A.audit(P.assign(drafter=[d if r != "b63" else "pld" for d, r in zip(P["drafter"], P["run_id"])]), R.assign(
        drafter=["pld" if r == "b63" else "block" for r in R["run_id"]]))
    assert list(two.frame.columns[:2]) == ["drafter", "task"]
    assert dict(zip(two.frame["drafter"], two.frame["verdict"])) == {"block": "NOT lossless", "pld": "lossless"}


def test_run_id_on_one_side_only_is_a_clear_error_and_none_means_one_run():
    P, R, *_ = _two_runs()
    with pytest.raises(MissingColumnError, match="run_id"):
        A.audit(P, R.drop(columns="run_id"))
    one = A.audit(P.loc[P["run_id"] != "b63"].drop(columns="run_id"), R.loc[R["run_id"] == "b31"].drop(columns="run_id"))
    assert one.frame.iloc[0].verdict == "NOT lossless" and one.frame.iloc[0].audited == 8


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
    import json

    from _evidence_fixtures import check_cli_formats, run_cli

    folder, _ = example
    check_cli_formats([folder / "*.parquet", "--audit"], capsys, "audit",
                      [A.AuditResult.title, A.AuditDivergences.title])
    rc, out, _ = run_cli([folder / "*.parquet", "--audit", "--format", "json"], capsys)
    doc = json.loads(out)["audit"]
    labels = {r["prompt_id"]: r["label"] for r in doc[A.AuditDivergences.title]["rows"]}
    assert labels == {"caption-0000": "near-tie", "caption-0001": "wide"}
    verdict = {r["task"]: r["verdict"] for r in doc[A.AuditResult.title]["rows"]}
    assert verdict == {"caption": "NOT lossless", "docvqa": "lossless", "textvqa": "lossless"}


def test_cli_audit_token_comparison_with_the_baseline_folder(example, capsys, tmp_path):
    import json

    from _evidence_fixtures import run_cli, write_logs

    folder, ex = example
    P = ex["prompts"].drop(columns=["greedy_match", "first_divergence", "divergence_margin"])
    write_logs(tmp_path, ex["rounds"], P, stem="block")
    rc, out, err = run_cli([tmp_path, folder / "baseline", "--audit", "--format", "json"], capsys)
    assert rc == 0, err
    rows = json.loads(out)["audit"][A.AuditResult.title]["rows"]
    assert all(r["verdict"] == "lossless" and r["audited"] == 6 for r in rows)


def test_cli_audit_without_prompt_files_fails_clearly(example, capsys, tmp_path):
    from _evidence_fixtures import check_cli_skipped, write_logs

    folder, ex = example
    write_logs(tmp_path, ex["rounds"])
    check_cli_skipped([tmp_path, "--audit"], capsys, "prompt files")
    P = ex["prompts"].drop(columns=["greedy_match", "first_divergence", "divergence_margin"])
    write_logs(tmp_path, prompts=P)
    check_cli_skipped([tmp_path, "--audit"], capsys, "glance-log --audit")


EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "example"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="no committed example log")
def test_cli_audit_on_rounds_only_logs_fails_clearly(capsys):
    from _evidence_fixtures import check_cli_skipped

    check_cli_skipped([EXAMPLE, "--audit"], capsys, "prompt files")


@pytest.mark.parametrize("spec_tokens", [True, False])
def test_cli_auditor_repro_two_glance_log_runs_in_one_input(capsys, tmp_path, spec_tokens):
    """The auditor's case: data/logs' docvqa block run (lossless; one of its rounds a near-tie,
    0.01) and a second run of the same drafter (budget 31) with a wide divergence planted in that
    round (4.0), both passed with the ar baseline to `python -m glance_law.fit --audit`. The run
    read first used to lend its near-tie margin (`lossless up to ties`) or, without the speculative
    tokens, interleave both runs' rounds (nothing audited)."""
    import json

    from _evidence_fixtures import run_cli

    from glance_law.io import read_logs, write_table

    logs = EXAMPLE.parent / "logs"
    if not logs.exists():
        pytest.skip("no committed data/logs")
    P = read_logs(sorted(map(str, logs.glob("prompts-docvqa-*-matched-*"))), kind="prompts").frame
    R = read_logs(sorted(map(str, logs.glob("rounds-docvqa-*-matched-*")))).frame
    P, R = (f.assign(**{c: f[c].astype(str) for c in ("run_id", "drafter", "prompt_id")}) for f in (P, R))
    drop = [] if spec_tokens else ["greedy_match", "first_divergence", "divergence_margin"]
    R1, P1 = R.loc[R["drafter"] == "block"].copy(), P.loc[P["drafter"] == "block"].drop(columns=drop)
    n = R1.groupby("prompt_id").size()
    pid = sorted(n[n >= 3].index)[0]
    R1.loc[(R1["prompt_id"] == pid) & (R1["round"] == 1), "min_path_margin"] = 0.01
    R2, P2 = R1.assign(run_id="docvqa-block-budget31", budget=31), P1.assign(run_id="docvqa-block-budget31")
    at = R2.index[(R2["prompt_id"] == pid) & (R2["round"] == 1)][0]
    R2.at[at, "min_path_margin"] = 4.0
    k = int(R2.at[at, "position"]) + 1                     # the first output token round 1 commits
    c = list(R2.at[at, "committed"])
    c[0] = 498 if c[0] == 499 else 499
    R2.at[at, "committed"] = c
    i = P2.index[P2["prompt_id"] == pid][0]
    t = list(P2.at[i, "tokens"])
    t[k] = c[0]
    P2.at[i, "tokens"] = t
    if spec_tokens:
        P2.at[i, "greedy_match"], P2.at[i, "first_divergence"], P2.at[i, "divergence_margin"] = False, k, np.nan
    else:
        P1, P2 = P1.assign(tokens=None), P2.assign(tokens=None)
    ar = P["drafter"] == "ar"
    write_table(P.loc[ar].drop(columns=drop), tmp_path / "prompts-ar.parquet", kind="prompts")
    for stem, rr, pp in (("s1", R1, P1), ("s2", R2, P2)):      # the lossless run is read first
        write_table(rr, tmp_path / f"rounds-{stem}.parquet", kind="rounds")
        write_table(pp, tmp_path / f"prompts-{stem}.parquet", kind="prompts")
    rc, out, err = run_cli([tmp_path, "--audit", "--format", "json"], capsys)
    assert rc == 0, err
    doc = json.loads(out)["audit"]
    rows = {r["run_id"]: r for r in doc[A.AuditResult.title]["rows"]}
    assert rows.keys() == {"docvqa-block-5d840b7a5f", "docvqa-block-budget31"}
    assert rows["docvqa-block-5d840b7a5f"]["verdict"] == "lossless"
    assert rows["docvqa-block-5d840b7a5f"]["audited"] == rows["docvqa-block-5d840b7a5f"]["equal"] == len(P1)
    assert rows["docvqa-block-budget31"]["verdict"] == "NOT lossless"
    assert rows["docvqa-block-budget31"]["audited"] == len(P2) and rows["docvqa-block-budget31"]["wide"] == 1
    (d,) = doc[A.AuditDivergences.title]["rows"]
    assert (d["run_id"], d["prompt_id"], d["first_divergence"]) == ("docvqa-block-budget31", pid, k)
    assert d["margin"] == 4.0 and d["label"] == "wide"
