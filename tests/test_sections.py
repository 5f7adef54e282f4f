"""Sections run on the columns the logs carry (issue 14 item 2) and the first run explains itself
(issue 15 item 7): the per-group summary, the law no longer gating, skipped sections named with
the column and the tool, logs without entropy (a hand conversion of real Spec-Bench answers),
tie-aware deciles, p_full relative to L, signal columns only where asked, sentences and widths."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glance_law.cli import fit as cli
from glance_law.data.io import LogSet, read_logs
from glance_law.evidence import offsets as off
from glance_law.evidence.order import task_order
from glance_law.evidence.summary import group_summary
from glance_law.simulate import TaskSpec, simulate_rounds
from glance_law.stats.cluster import cluster_codes, clustered_mean
from glance_law.stats.curve import equal_count_bins
from glance_law.tail import fit_tail

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared" / "realdata" / "spec-bench"
DOCVQA = sorted((ROOT / "data" / "logs").glob("rounds-docvqa-block-*-matched-*.parquet"))


# --------------------------------------------------------------------------
# inputs without entropy: simulated logs with root_entropy nulled, and real Spec-Bench answers
# --------------------------------------------------------------------------

def no_entropy(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.drop(columns=[c for c in ("match", "target_logq", "target_rank", "topk_logq", "root_margin",
                                          "root_pmax", "min_path_margin") if c in frame.columns])
    out["root_entropy"] = pd.array([None] * len(out), dtype="Float32")
    return out


def spec_bench(path: Path, horizon: int, limit: int = 40) -> pd.DataFrame:
    """A hand conversion of a Spec-Bench model_answer file (the first ``limit`` answers): one round
    per accept_lengths entry, accepted = value - 1, horizon from the method; the last round of a
    turn may be cut, so it is stored as an output-ending round (horizon = accepted), as
    glance-log stores one. No entropy, no matches."""
    rows = []
    with gzip.open(path, "rt") as fh:
        for i, line in enumerate(fh):
            if i >= limit:
                break
            rec = json.loads(line)
            ch = rec["choices"][0]
            acc = list(ch["accept_lengths"])
            k = 0
            for turn, steps in enumerate(ch["decoding_steps"]):
                for s in range(steps):
                    a = int(acc[k]) - 1
                    last = s == steps - 1
                    rows.append({"run_id": path.name, "task": rec["category"], "prompt_id": str(rec["question_id"]),
                                 "round": k, "accepted": a, "horizon": a if last else horizon,
                                 "drafter": rec["model_id"].split("-")[3] if "vicuna" in rec["model_id"] else "x",
                                 "condition": "matched", "turn": turn})
                    k += 1
    f = pd.DataFrame(rows)
    f["root_entropy"] = pd.array([None] * len(f), dtype="Float32")
    return f


def logset(frame: pd.DataFrame) -> LogSet:
    return LogSet("rounds", frame, ())


def sim(seed=0, n_prompts=30, specs=None, horizon=7) -> pd.DataFrame:
    specs = specs or [TaskSpec("caption", 1.0, 1.2), TaskSpec("docvqa", 2.0, 1.2)]
    return simulate_rounds(specs, n_prompts=n_prompts, seed=seed, vectors=True, horizon=horizon,
                           run_id=f"run{seed}")


@pytest.fixture(scope="module")
def medusa():
    p = REAL / "vase" / "vicuna-7b-v1.3-medusa.jsonl.gz"
    if not p.exists():
        pytest.skip("../shared/realdata is not beside this checkout")
    return spec_bench(p, 4, limit=60)


# --------------------------------------------------------------------------
# the per-group summary
# --------------------------------------------------------------------------

def test_summary_matches_brute_force_and_needs_no_entropy():
    f = no_entropy(sim())
    s = group_summary(f).to_frame().set_index("task")
    for task, sub in f.groupby("task"):
        r = s.loc[task]
        a, L = sub["accepted"].to_numpy(float), sub["horizon"].to_numpy(float)
        assert r["rounds"] == len(sub) and r["prompts"] == sub["prompt_id"].nunique()
        assert r["mean_accepted"] == pytest.approx(a.mean()) and r["tau"] == pytest.approx(a.mean() + 1)
        assert r["p_full"] == pytest.approx(np.mean(a == L))
        assert r["horizon"] == L.max()
        codes, G = cluster_codes(sub)
        _, se, _ = clustered_mean(a, codes, G)
        assert r["mean_accepted_lo"] < r["mean_accepted"] < r["mean_accepted_hi"]
        assert r["mean_accepted_hi"] - r["mean_accepted"] == pytest.approx(se * __import__("scipy").stats.t.ppf(
            0.975, G - 1))
        assert np.isnan(r["mean_entropy"]) and np.isnan(r["low_entropy_share"])
    assert s.loc["pooled", "rounds"] == len(f)


def _with_no_draft_rounds():
    """Drafted rounds of drafter pld (two tasks) plus, per task, pld rounds that drafted nothing
    (horizon 0), an autoregressive run (drafter ar) and no-draft rounds of another condition: only
    pld's own matched no-draft rounds may enter pld's tokens_per_round."""
    f = simulate_rounds(n_prompts=8, seed=3, drafter="pld").loc[lambda x: x["task"].isin(["caption", "docvqa"])]
    extra = []
    for task, n0 in (("caption", 5), ("docvqa", 11)):
        base = f.loc[f["task"] == task].iloc[:n0]
        extra.append(base.assign(accepted=0, horizon=0, round=base["round"] + 1000))
        extra.append(base.assign(accepted=0, horizon=0, drafter="ar", run_id="ar"))
        extra.append(base.assign(accepted=0, horizon=0, condition="mismatched", round=base["round"] + 2000))
    keep = [c for c in ("run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon", "condition",
                        "drafter") if c in f.columns]
    return pd.concat([f[keep]] + [e[keep] for e in extra], ignore_index=True), f, {"caption": 5, "docvqa": 11}


def test_tau_and_tokens_per_round_by_hand_in_every_table():
    """tau = mean accepted + 1 over the drafted rounds; tokens_per_round the same over every round
    of the drafter, its no-draft rounds (one token each) included, in the law table, the summary
    and the task order (issue 23: a pooled tau of 3.10 read as speed while the run committed 2.30)."""
    from glance_law.law import fit_law

    frame, drafted, n0 = _with_no_draft_rounds()
    want = {}
    for task, sub in list(drafted.groupby("task")) + [("pooled", drafted)]:
        a = sub["accepted"].to_numpy(float)
        k = sum(n0.values()) if task == "pooled" else n0[task]
        want[task] = (a.mean() + 1, ((a + 1).sum() + k) / (a.size + k), k)
    law = fit_law(frame).to_frame().set_index("task")
    summ = group_summary(frame).to_frame()
    summ = summ.loc[summ["drafter"] == "pld"].set_index("task")
    order = task_order(frame, ["caption", "docvqa"], n_boot=0).to_frame().set_index("task")
    assert set(law["drafter"]) == {"pld"}
    for task, (tau, tpr, k) in want.items():
        tables = (law, summ) + ((order,) if task != "pooled" else ())
        for t in tables:
            assert t.loc[task, "tau"] == pytest.approx(tau)
            assert t.loc[task, "tokens_per_round"] == pytest.approx(tpr)
            assert t.loc[task, "no_draft_rounds"] == k
        assert tpr < tau
    text = group_summary(frame).summary()
    assert "tokens_per_round" in text and "over every round" in text
    for res in (fit_law(frame), group_summary(frame), task_order(frame, ["caption", "docvqa"], n_boot=0)):
        head = res.summary(width=90).splitlines()        # narrowed: tau never without tokens_per_round
        assert any("tau" in x and "tokens_per_round" in x for x in head)


def test_tokens_per_round_golden():
    """Four drafted rounds accepting 2, 0, 4, 1 and two rounds that drafted nothing: tau 2.75,
    tokens per round (3 + 1 + 5 + 2 + 1 + 1) / 6 = 13 / 6."""
    rows = [dict(run_id="r", task="docvqa", prompt_id=f"p{i % 2}", round=i, accepted=a, horizon=h, drafter="pld")
            for i, (a, h) in enumerate([(2, 4), (0, 4), (4, 4), (1, 4), (0, 0), (0, 0)])]
    s = group_summary(pd.DataFrame(rows)).to_frame().set_index("task").loc["docvqa"]
    assert s["tau"] == pytest.approx(2.75) and s["tokens_per_round"] == pytest.approx(13 / 6)
    assert s["rounds"] == 4 and s["no_draft_rounds"] == 2


@pytest.mark.skipif(not REAL.exists(), reason="../shared/realdata not present")
@pytest.mark.parametrize("name, L", [("bnukh/spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz", 5),
                                     ("vase/vicuna-7b-v1.3-ssd-float16-temperature-0.0.jsonl.gz", 3)])
def test_summary_of_real_answers_is_spec_benchs_own_figure(name, L):
    """tau is the mean over every verification step (Spec-Bench's mean accepted tokens: the last
    step of a turn too, also when it accepted nothing) and p_full the share of steps that
    committed L + 1 tokens, re-derived from the raw JSON; task_order agrees."""
    steps = []
    with gzip.open(REAL / name, "rt") as fh:
        for line in fh:
            try:
                d = json.loads(line)
            except ValueError:
                continue                               # the corrupt line the importer skips
            steps += d["choices"][0]["accept_lengths"]
    steps = np.array(steps, dtype=float)
    logs = read_logs([str(REAL / name)], skip_bad=True)
    s = group_summary(logs).to_frame().set_index("task").loc["pooled"]
    assert s["rounds"] == steps.size
    assert s["tau"] == pytest.approx(steps.mean(), rel=1e-12)
    assert s["p_full"] == pytest.approx(np.mean(steps == L + 1), rel=1e-12)
    assert s["horizon"] == L
    order = task_order(logs, n_boot=0).to_frame()
    assert order["rounds"].sum() == steps.size
    assert (order["rounds"] * order["tau"]).sum() == pytest.approx(steps.sum(), rel=1e-12)


def test_summary_low_entropy_share():
    f = sim()
    s = group_summary(f).to_frame().set_index("task")
    sub = f.loc[f["task"] == "docvqa"]
    assert s.loc["docvqa", "low_entropy_share"] == pytest.approx(np.mean(sub["root_entropy"] < 0.05))


# --------------------------------------------------------------------------
# the four analysis defects
# --------------------------------------------------------------------------

def brute_bins(H, B):
    """Tie runs whole, each to the bin of its middle sorted position; used bins renumbered."""
    n = len(H)
    srt = sorted(H)
    mid = {}
    for v in set(H):
        pos = [i for i, x in enumerate(srt) if x == v]
        mid[v] = ((pos[0] + pos[-1] + 1) * min(B, n)) // (2 * n)
    used = sorted(set(mid.values()))
    return np.array([used.index(mid[v]) for v in H])


@pytest.mark.parametrize("seed", range(12))
def test_decile_bins_put_ties_in_one_bin_whatever_the_row_order(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    H = np.round(rng.exponential(0.3, n), int(rng.integers(0, 3)))      # many ties
    if seed % 4 == 0:
        H[: n // 2] = 0.0                                                 # a big atom at zero
    b = off.decile_bins(H, 10)
    assert np.array_equal(b, brute_bins(H.tolist(), 10))
    for v in np.unique(H):
        assert np.unique(b[H == v]).size == 1
    assert np.all(np.diff(b[np.argsort(H, kind="stable")]) >= 0)          # bins follow entropy
    perm = rng.permutation(n)
    assert np.array_equal(off.decile_bins(H[perm], 10), b[perm])
    if np.unique(H).size == n:                                             # no ties: the law's bins
        assert np.array_equal(b, equal_count_bins(np.argsort(H, kind="stable"), min(10, n)))


def test_run_survival_does_not_depend_on_row_order():
    f = sim(seed=3)
    f["root_entropy"] = np.round(f["root_entropy"], 1).astype(np.float32)   # ties across decile cuts
    a = off.run_survival(f, by="task", n_bins=10, two_state=False).to_frame()
    g = off.run_survival(f.sample(frac=1.0, random_state=1).reset_index(drop=True), by="task", n_bins=10,
                         two_state=False).to_frame()
    pd.testing.assert_frame_equal(a, g)


def test_task_order_share_is_relative_to_the_horizon():
    f = sim(horizon=5)
    res = task_order(f, ("caption", "docvqa"), n_boot=0).to_frame().set_index("task")
    for task, sub in f.loc[f["horizon"] > 0].groupby("task"):
        assert res.loc[task, "p_full"] == pytest.approx(np.mean(sub["accepted"] == sub["horizon"]))
    assert (res["p_full"] > 0).all() and "p_ge8" not in res.columns
    legacy = task_order(f, ("caption", "docvqa"), n_boot=0, ge=8).to_frame()
    assert (legacy["p_ge8"] == 0).all()                                   # why the fixed 8 was wrong at L = 5


def test_correlations_use_signal_columns_only_where_asked():
    from glance_law import appendix as A
    f = sim()
    f["turn"] = 1
    f["question_index"] = np.arange(len(f))
    inp = A.Inputs(rounds=logset(f), prompts=None)
    assert A._signals(inp) == ["position"]
    inp = A.Inputs(rounds=logset(f), prompts=None, options=A.Options(signals=("turn",)))
    assert A._signals(inp) == ["turn"]


# --------------------------------------------------------------------------
# analyses without entropy
# --------------------------------------------------------------------------

def test_tail_runs_on_the_whole_log_without_entropy():
    f = no_entropy(sim())
    fit = fit_tail(f, n_boot=0, heldout=False)
    t = fit.to_frame().set_index("task")
    for task, sub in f.groupby("task"):
        assert t.loc[task, "floor_rounds"] == (sub["horizon"] > 0).sum()
    assert any("whole log" in n for n in fit.notes)
    assert t["cap"].isna().all()


def test_offsets_derive_matches_for_chains_and_refuse_trees():
    f = no_entropy(sim())
    f["budget"] = f["horizon"]                                             # a chain: budget == horizon
    law = off.offset_law(f).to_frame()
    haz = off.offset_hazards(f).to_frame()
    for task, sub in f.loc[f["horizon"] > 0].groupby("task"):
        a, L = sub["accepted"].to_numpy(), sub["horizon"].to_numpy()
        for j in (1, 2, 3):
            risk = (a >= j - 1) & (L >= j)
            h = haz.loc[(haz["task"] == task) & (haz["offset"] == j)].iloc[0]
            assert h["hazard"] == pytest.approx(np.mean(a[risk] >= j))
            r = law.loc[(law["task"] == task) & (law["offset"] == j)].iloc[0]
            assert r["match_rate"] == pytest.approx(np.mean(a[risk] >= j)) and np.isnan(r["b1"])
    f["budget"] = f["horizon"] + 3                                         # a tree
    with pytest.raises(Exception, match="not known to be a chain"):
        off.offset_law(f)


def test_real_medusa_answers_without_entropy(medusa):
    s = group_summary(medusa).to_frame()
    assert (s["horizon"] <= 4).all() and (s["mean_accepted"] > 0).all()
    surv = off.run_survival(medusa.assign(task="all"), by="task", n_bins=10, two_state=False).to_frame()
    assert set(surv["decile"]) == {1}                                     # one bin without entropy
    emp = surv.set_index("l")["empirical"]
    cond = [emp[1]] + [emp[j] / emp[j - 1] for j in range(2, 5)]
    assert all(x > y for x, y in zip(cond, cond[1:]))                     # Medusa's acceptance falls by offset
    tail = fit_tail(medusa, by="task", n_boot=0, heldout=False).to_frame()
    assert len(tail) == medusa["task"].nunique()
    order = task_order(medusa, n_boot=50).to_frame()
    assert list(order["mean_accepted"]) == sorted(order["mean_accepted"])
    with pytest.raises(Exception, match="match"):
        off.offset_law(medusa)                                            # a tree: matches not derivable


# --------------------------------------------------------------------------
# the CLI: sections skipped by name, sentences, widths
# --------------------------------------------------------------------------

def run(argv, capsys, frame=None, monkeypatch=None):
    if frame is not None:
        monkeypatch.setattr(cli, "load", lambda args, modules=(): logset(frame))
        monkeypatch.setattr(cli._reduce, "inputs_reduced", lambda paths: False)
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("flag, column", [("--width", "root_entropy"), ("--probe", "root_entropy"),
                                          ("--transfer=caption:docvqa", "root_entropy")])
def test_each_skipped_section_names_the_column_and_the_tool(flag, column, capsys, monkeypatch):
    rc, out, err = run(["x.parquet", flag], capsys, no_entropy(sim()), monkeypatch)
    assert rc == 0
    name = flag.split("=")[0]
    line = next(x for x in out.splitlines() if x.startswith(f"not run: {name} needs"))
    assert f"column '{column}' (glance-log records" in line
    assert f"not run: {name} needs" in err


def test_offsets_on_a_tree_without_match_is_skipped_with_the_column(capsys, monkeypatch):
    f = no_entropy(sim())
    f["budget"] = f["horizon"] + 2
    rc, out, err = run(["x.parquet", "--offsets"], capsys, f, monkeypatch)
    assert rc == 0
    assert "offset_law not made" in out and "'match' column" in out   # the survival table still runs
    assert "Run-length survival" in out


def test_no_entropy_logs_run_every_section_they_allow(capsys, monkeypatch):
    f = no_entropy(sim())
    f["budget"] = f["horizon"]
    rc, out, err = run(["x.parquet", "--tail", "--tail-bootstrap", "0", "--offsets", "--order", "--width"],
                       capsys, f, monkeypatch)
    assert rc == 0, err
    first = out.splitlines()[0]
    assert first.startswith("caption:") and "the law is not fitted (the logs carry no root_entropy" in first
    assert "grounded tail" in out and "Per-offset law" in out and "Task ordering" in out
    assert "not run: law needs column 'root_entropy'" in out and "not run: --width needs" in out
    assert "draftability law: logit" not in out


def test_the_law_failing_does_not_stop_the_sections(capsys, monkeypatch):
    f = sim()
    f["root_entropy"] = np.float32(0.5)                                   # constant: no slope
    rc, out, err = run(["x.parquet", "--order"], capsys, f, monkeypatch)
    assert rc == 0 and "not run: law could not be fitted" in out and "Task ordering" in out


@pytest.mark.skipif(not DOCVQA, reason="data/logs not in this checkout")
def test_the_readme_job_explains_itself(capsys):
    rc, out, err = run(DOCVQA, capsys)
    assert rc == 0
    lines = out.rstrip("\n").splitlines()
    assert lines[0].startswith("docvqa: ") and "slope is not identified" in lines[0]
    assert re.search(r"\d+% of rounds sit below 0\.05 nats", lines[0]) and "glance-log --task caption" in lines[0]
    assert lines[-1].startswith("Next: ") and lines[-1].endswith(".")
    table_lines = [x for x in lines if not x.startswith(("note:", "docvqa: ", "Next:"))]
    assert max(len(x) for x in table_lines) <= 100
    notes = [x for x in lines if x.startswith("note:")]
    assert len(notes) == len(set(notes))
    rc, wide, _ = run(list(DOCVQA) + ["--wide"], capsys)
    assert "p_ge8" in wide and "ceiling_fraction" in wide and "not shown to fit" not in wide
    rc, js, _ = run(list(DOCVQA) + ["--format", "json"], capsys)
    doc = json.loads(js)                                                # one versioned document, every input
    assert doc["version"] == cli.JSON_VERSION and cli.json_rows(doc)[-1]["task"] == "pooled"


def test_sentences_for_a_law_that_holds_and_one_too_narrow(capsys, tmp_path):
    from glance_law.io import write_table
    f = sim(n_prompts=60, specs=[TaskSpec("caption", 1.0, 1.5), TaskSpec("docvqa", 2.0, 1.5)])
    narrow = f["task"] == "docvqa"
    rng = np.random.default_rng(0)
    h = np.where(rng.random(int(narrow.sum())) < 0.9, 0.0, rng.uniform(0, 0.04, int(narrow.sum())))
    f.loc[narrow, "root_entropy"] = h.astype(np.float32)      # nearly all at zero: no contrast to fit
    write_table(f, tmp_path / "r.parquet", "rounds")
    rc, out, err = run([tmp_path / "r.parquet"], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("caption: ") and "the law holds" in lines[0]
    assert lines[1].startswith("docvqa: ") and "caption shows the contrast" in lines[1]


def test_prompt_rows_of_real_files_read_alongside(medusa, capsys, monkeypatch):
    rc, out, err = run(["x.parquet", "--tail", "--tail-bootstrap", "0", "--order"], capsys, medusa, monkeypatch)
    assert rc == 0, err
    assert "not run: law needs column 'root_entropy'" in out and "whole log" in out
    assert read_logs  # the reader stays the only I/O path for contract files


def test_the_curve_bin_check_counts_rounds_not_cells():
    """A weighted (reduced) table with thousands of rounds in 7 cells per task gets its decile curve;
    the check counts rounds (the sum of the weights), not rows."""
    from glance_law.law import fit_law
    rows = [{"task": t, "prompt_id": f"{t}{k}", "root_entropy": 0.1 * k, "accepted": (5 - k) % 6, "horizon": 6,
             "w": 400.0} for t in ("a", "b") for k in range(7)]
    law = fit_law(pd.DataFrame(rows), weight="w", cluster=("task", "prompt_id"))
    assert not any("than curve bins" in n for n in law.notes)
    cur = law.curve("a")
    assert len(cur) == 10 and cur["n"].sum() == 2800
    filled = cur.dropna(subset=["mean_accepted"])
    assert len(filled) == 7 and (filled["n"] == 400).all()               # each cell whole in one bin
    assert np.isfinite(law.row("a")["r2_curve"])
    few = fit_law(pd.DataFrame(rows[:7]).assign(w=1.0), weight="w", cluster=("task", "prompt_id"))
    assert any("fewer rounds (7) than curve bins (10)" in n for n in few.notes)


def test_report_sections_run_on_what_the_logs_carry(tmp_path):
    from glance_law import appendix as A
    from glance_law.cli import report
    f = no_entropy(sim(n_prompts=12))
    f["budget"] = f["horizon"]
    inp = A.Inputs(rounds=logset(f), prompts=None, options=A.Options(tail_boot=0, order_boot=20, probe_boot=20))
    status = {}
    for s in A.SECTIONS:
        e = report.run_section(s, inp, tmp_path, "cmd", {})
        status[s.name] = (e["status"], e["reason"])
    assert status["summary"][0] == "ok" and status["tail"][0] == "ok" and status["ordering"][0] == "ok"
    assert status["offsets"][0] == "ok"
    for name in ("law", "width", "probe", "correlations", "fano", "transfer-tasks"):
        st, why = status[name]
        assert st == "skipped" and "column 'root_entropy'" in why and "glance-log records" in why, (name, why)
    assert "topk_logq" in status["width"][1]
    assert not [n for n, (st, _) in status.items() if st == "failed"], status


SLICES = ROOT / "tests" / "data" / "realdata"


@pytest.mark.skipif(not (SLICES / "vicuna-7b-v1.3-medusa.jsonl.gz").exists(), reason="no committed real slices")
def test_the_fit_on_imported_real_answers_runs_what_their_columns_allow(capsys):
    """The committed slice of real Medusa answers (see its PROVENANCE.md), read through the importer:
    no entropy and a tree drafter, so the law and --width are not run (named), while the summary,
    the tail on the whole log, the ordering by tau and the survival table run."""
    files = [SLICES / "vicuna-7b-v1.3-medusa.jsonl.gz", SLICES / "spec_bench__question.jsonl.gz"]
    rc, out, err = run(files + ["--tail", "--tail-bootstrap", "0", "--order", "--offsets", "--width"], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert "the law is not fitted (the logs carry no root_entropy" in lines[0]
    assert "not run: law needs column 'root_entropy'" in out and "not run: --width needs column 'root_entropy'" in out
    assert "whole log" in out and "Task ordering" in out and "Run-length survival" in out
    assert "offset_law not made" in out and "'match' column" in out      # a tree: matches not derivable
    assert lines[-1].startswith("Next: ")
    assert max(len(x) for x in lines if not x.startswith(("note:", "not run:")) and ": " not in x[:40]) <= 100
