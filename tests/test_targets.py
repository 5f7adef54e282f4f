"""Several target models in one set of logs are never pooled (issue 14's known gap).

The analyses group by drafter; one method run on two targets (the VASE folder: the ``ssd``
drafter on vicuna-7b-v1.3 and on llama2-7b-chat, each with its own vanilla baseline) must give
separate rows naming the target, and each speedup must use the vanilla run of the same
target. The same method on the same target from two files (two runs, e.g. a rerun at another
commit) is kept apart as two arms. Checked against brute-force counts from the raw JSON.
"""
from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glance_law.cli.fit import json_rows as fit_json_rows
from glance_law.cli.fit import main as fit_main
from glance_law.data import arms
from glance_law.data.importers import import_logs
from glance_law.data.io import read_logs, write_table
from glance_law.errors import GlanceError
from glance_law.evidence.summary import group_summary
from glance_law.evidence.timing import timing_ledger
from glance_law.simulate import TaskSpec, simulate_rounds
from glance_law.tail import fit_tail

ROOT = Path(__file__).resolve().parent.parent
VASE = ROOT.parent / "shared" / "realdata" / "spec-bench" / "vase"
LL_SSD = "llama2-7b-chat-ssd-float16-temperature-0.0.jsonl.gz"
LL_VAN = "llama2-7b-chat-vanilla-float16-temp-0.0.jsonl.gz"
VI_SSD = "vicuna-7b-v1.3-ssd-float16-temperature-0.0.jsonl.gz"
VI_OLD = "vicuna-7b-v1.3-ssd-OLD-70d9e9b.jsonl.gz"
VI_VAN = "vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz"


def need_vase():
    if not (VASE / LL_SSD).exists():
        pytest.skip("../shared/realdata is not beside this checkout")


def raw(name):
    return [json.loads(line) for line in gzip.open(VASE / name, "rt")]


def drafted_rounds_by_task(name) -> Counter:
    """Brute force: the rounds the law, the tail and the reduced cells read, per category, from the
    raw answers. The last step of each turn is output-ending (horizon = accepted), so a last step of
    value 1 (accepted 0) is left out there, as a run censored at 0."""
    out: Counter = Counter()
    for r in raw(name):
        c = r["choices"][0]
        al = c["accept_lengths"]
        k = 0
        for d in c["decoding_steps"]:
            for s in range(d):
                if not (s == d - 1 and al[k] == 1):
                    out[r["category"]] += 1
                k += 1
    return out


def verification_steps_by_task(name) -> Counter:
    """Brute force: every verification step per category (the summary's rounds: a turn's last step
    that accepted 0 is read at its drafted depth, issue 24 item 5), i.e. every accept_lengths entry."""
    out: Counter = Counter()
    for r in raw(name):
        out[r["category"]] += len(r["choices"][0]["accept_lengths"])
    return out


def ms_per_token(name) -> dict:
    """Brute force: (category, question_id) -> total wall ms / total new tokens (repeats pooled)."""
    ms, tok = defaultdict(float), defaultdict(int)
    for r in raw(name):
        c = r["choices"][0]
        key = (r["category"], str(r["question_id"]))
        ms[key] += 1000.0 * sum(c["wall_time"])
        tok[key] += sum(c["new_tokens"])
    return {k: ms[k] / tok[k] for k in ms if tok[k] > 0}


def speedup(base: dict, cand: dict, task: str) -> float:
    keys = sorted(k for k in cand if k[0] == task and k in base)
    return np.mean([base[k] for k in keys]) / np.mean([cand[k] for k in keys])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The VASE files of the two ssd targets, their vanilla runs and the question file (no Medusa,
    to keep the test short)."""
    need_vase()
    d = tmp_path_factory.mktemp("vase")
    for name in (LL_SSD, LL_VAN, VI_SSD, VI_OLD, VI_VAN, "question.jsonl.gz"):
        shutil.copy(VASE / name, d / name)
    return d


@pytest.fixture(scope="module")
def fit_json(folder):
    out = folder.parent / "fit.json"
    assert fit_main([str(folder), "--timing", str(folder / "*vanilla*"), "--timing-bootstrap", "50",
                     "--format", "json", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_importers_record_the_target_and_keep_two_runs_apart(folder):
    imp = import_logs(folder)
    r, p = imp.rounds, imp.prompts
    assert set(r["target"].astype(str)) == {"llama2-7b-chat", "vicuna-7b-v1.3"}
    assert set(p["target"].astype(str)) == {"llama2-7b-chat", "vicuna-7b-v1.3"}
    arm = r.groupby([r["target"].astype(str), r["drafter"].astype(str)], observed=True).size()
    # vicuna ssd comes from two files (two runs, two commits): two arms, each with its file's rounds
    for name, label in ((VI_SSD, "ssd [float16-temperature-0.0]"), (VI_OLD, "ssd [OLD-70d9e9b]")):
        want = sum(len(x["choices"][0]["accept_lengths"]) for x in raw(name))
        assert arm[("vicuna-7b-v1.3", label)] == want
    want = sum(len(x["choices"][0]["accept_lengths"]) for x in raw(LL_SSD))
    assert arm[("llama2-7b-chat", "ssd")] == want          # one file, its three appended runs pooled
    assert "ssd" not in set(r.loc[r["target"].astype(str) == "vicuna-7b-v1.3", "drafter"].astype(str))
    assert any(n.startswith("runs: 2 files hold drafter 'ssd' on target vicuna-7b-v1.3") and "kept apart" in n
               for n in imp.notes)
    assert any(n.startswith("runs: ") and "3 runs appended" in n for n in imp.notes)
    # a file alone keeps its plain drafter name
    assert set(import_logs(folder / VI_OLD).rounds["drafter"].astype(str)) == {"ssd"}


def test_summary_rows_per_target_with_brute_force_counts(fit_json):
    s = pd.DataFrame(fit_json_rows(fit_json, "summary"))
    assert list(s.columns[:3]) == ["target", "drafter", "task"]
    for target, drafter, name in (("llama2-7b-chat", "ssd", LL_SSD),
                                  ("vicuna-7b-v1.3", "ssd [float16-temperature-0.0]", VI_SSD),
                                  ("vicuna-7b-v1.3", "ssd [OLD-70d9e9b]", VI_OLD)):
        rows = s.loc[(s["target"] == target) & (s["drafter"] == drafter)].set_index("task")
        want = verification_steps_by_task(name)
        assert {t: int(rows.loc[t, "rounds"]) for t in want} == dict(want)
        assert rows.loc["pooled", "rounds"] == sum(want.values())
        # the horizon is the file's own: 3 for vicuna ssd (method table), 4 for llama2 (its data reach 4)
        assert rows.loc["pooled", "horizon"] == (4 if target == "llama2-7b-chat" else 3)
    assert not ((s["drafter"] == "ssd") & (s["target"] == "vicuna-7b-v1.3")).any()
    assert set(s["target"]) == {"llama2-7b-chat", "vicuna-7b-v1.3"}


def test_speedup_pairs_each_target_with_its_own_vanilla(fit_json):
    t = pd.DataFrame(fit_json_rows(fit_json, "timing"))
    assert {"target", "drafter", "task", "speedup"} <= set(t.columns)
    ll = t.loc[(t["target"] == "llama2-7b-chat") & (t["drafter"] == "ssd")].set_index("task")
    base_ll, base_vi, cand = ms_per_token(LL_VAN), ms_per_token(VI_VAN), ms_per_token(LL_SSD)
    for task in ("coding", "qa", "summarization"):
        want = speedup(base_ll, cand, task)
        assert ll.loc[task, "speedup"] == pytest.approx(want, rel=1e-5)
        assert ll.loc[task, "prompts"] == sum(1 for k in cand if k[0] == task and k in base_ll)
        # not the vicuna baseline, nor the two baselines pooled
        assert abs(speedup(base_vi, cand, task) - want) > 1e-3
    sps = [speedup(base_ll, cand, task) for task in sorted({k[0] for k in cand})]
    assert ll.loc["geomean", "speedup"] == pytest.approx(np.exp(np.mean(np.log(sps))), rel=1e-5)
    vi = t.loc[(t["target"] == "vicuna-7b-v1.3") & (t["drafter"] == "ssd [OLD-70d9e9b]")].set_index("task")
    assert vi.loc["coding", "speedup"] == pytest.approx(speedup(base_vi, ms_per_token(VI_OLD), "coding"), rel=1e-5)


def test_tail_keeps_targets_apart(folder):
    frame = read_logs(folder, "rounds").frame
    tail = fit_tail(frame, by="task", n_boot=0, heldout=False).to_frame()
    arms_seen = set(tail["drafter"])
    assert {"ssd @ llama2-7b-chat", "ssd [OLD-70d9e9b] @ vicuna-7b-v1.3",
            "ssd [float16-temperature-0.0] @ vicuna-7b-v1.3"} == arms_seen
    coding = tail.loc[(tail["drafter"] == "ssd @ llama2-7b-chat") & (tail["task"] == "coding")]
    assert int(coding["floor_rounds"].iloc[0]) == drafted_rounds_by_task(LL_SSD)["coding"]


# --------------------------------------------------------------------------
# the mechanism, on small frames
# --------------------------------------------------------------------------

def sim(target=None, seed=0, run="r"):
    f = simulate_rounds([TaskSpec("caption", 1.0, 1.2), TaskSpec("docvqa", 2.0, 1.2)], n_prompts=12, seed=seed,
                        run_id=run)
    if target is not None:
        f["target"] = target
    return f


def test_one_target_is_left_exactly_as_it_was():
    f = sim("vicuna")
    assert arms.label_targets(f) is f
    a = group_summary(f).to_frame()
    b = group_summary(f.drop(columns="target")).to_frame()
    pd.testing.assert_frame_equal(a, b)
    assert arms.split_labels(a) is a


def test_two_targets_two_arms_and_a_target_column():
    f = pd.concat([sim("vicuna", 0, "a"), sim("llama", 1, "b")], ignore_index=True)
    notes: list = []
    g = arms.label_targets(f, notes)
    assert set(g["drafter"].astype(str)) == {"sim @ vicuna", "sim @ llama"} and len(notes) == 1
    assert set(arms.label_targets(g)["drafter"].astype(str)) == set(g["drafter"].astype(str))   # idempotent
    s = group_summary(f).to_frame()
    for tgt, sub in f.groupby("target"):
        rows = s.loc[s["drafter"] == f"sim @ {tgt}"].set_index("task")
        assert rows.loc["pooled", "rounds"] == (sub["horizon"] > 0).sum()
    shown = arms.split_labels(s)
    assert list(shown.columns[:2]) == ["target", "drafter"] and set(shown["drafter"]) == {"sim"}
    text = group_summary(f).summary("text")
    assert "target" in text.splitlines()[2] and "llama" in text and "sim @" not in text
    # a row without a target among named ones is its own arm, 'unknown'
    h = f.copy()
    h["target"] = h["target"].astype(object)
    h.loc[h["run_id"] == "b", "target"] = None
    assert set(arms.label_targets(h)["drafter"].astype(str)) == {"sim @ vicuna", "sim @ unknown"}


def prompts(target, drafter, ms, seed=0, n=8, run="r"):
    rng = np.random.default_rng(seed)
    f = pd.DataFrame({"run_id": run, "task": np.where(np.arange(n) < n // 2, "a", "b"),
                      "prompt_id": [f"p{i}" for i in range(n)], "drafter": drafter,
                      "new_tokens": 100, "decode_ms": ms * 100 * rng.uniform(0.9, 1.1, n)})
    if target is not None:
        f["target"] = target
    return f


def test_timing_pairs_by_target_and_never_borrows_another_targets_baseline():
    base = pd.concat([prompts("small", "ar", 10.0, 1, run="b1"), prompts("big", "ar", 40.0, 2, run="b2")])
    cand = pd.concat([prompts("small", "ssd", 5.0, 3, run="c1"), prompts("big", "ssd", 10.0, 4, run="c2"),
                      prompts("huge", "ssd", 50.0, 5, run="c3")])
    res = timing_ledger(base, cand, n_boot=0)
    f = res.to_frame()
    assert set(f["target"]) == {"small", "big"}
    for tgt, b, c in (("small", 1, 3), ("big", 2, 4)):
        xb = prompts(tgt, "ar", 10.0 if tgt == "small" else 40.0, b)
        xc = prompts(tgt, "ssd", 5.0 if tgt == "small" else 10.0, c)
        for task in ("a", "b"):
            m = xb["task"] == task
            want = (xb.loc[m, "decode_ms"] / 100).mean() / (xc.loc[m, "decode_ms"] / 100).mean()
            got = f.loc[(f["target"] == tgt) & (f["task"] == task), "speedup"].iloc[0]
            assert got == pytest.approx(want)
    assert any("huge" in n and "no baseline run of target huge" in n for n in res.notes)
    # one target on both sides: the same numbers as without the column
    one = timing_ledger(prompts("small", "ar", 10.0, 1), prompts("small", "ssd", 5.0, 3), n_boot=0).to_frame()
    none = timing_ledger(prompts(None, "ar", 10.0, 1), prompts(None, "ssd", 5.0, 3), n_boot=0).to_frame()
    pd.testing.assert_frame_equal(one, none)
    # a baseline of several targets and candidates that name none: which baseline is unknown
    with pytest.raises(GlanceError, match="baseline files hold 2 target models"):
        timing_ledger(base, prompts(None, "ssd", 5.0, 3), n_boot=0)


def test_glance_log_files_of_two_targets_take_their_run_target(tmp_path):
    for tgt, seed in (("/models/vicuna-7b", 0), ("/models/llama-70b", 1)):
        write_table(sim(None, seed, run=f"r{seed}"), tmp_path / f"rounds-{seed}.parquet",
                    run={"run_id": f"r{seed}", "target": {"path": tgt, "model_type": "llama"}})
    logs = read_logs(tmp_path, "rounds", columns=["accepted", "drafter"])   # target: read unasked
    assert set(logs.frame["target"].astype(str)) == {"vicuna-7b", "llama-70b"}
    assert any("glance.run" in n for n in logs.notes)
    s = group_summary(logs).to_frame()
    assert {"sim @ vicuna-7b", "sim @ llama-70b"} == set(s["drafter"])
    # files of one target: no column added, nothing changes
    one = tmp_path / "one"
    one.mkdir()
    write_table(sim(None, 0, run="r0"), one / "rounds-0.parquet", run={"run_id": "r0", "target": {"path": "/m/v"}})
    assert "target" not in read_logs(one, "rounds").frame.columns


def test_audit_compares_each_target_with_its_own_autoregressive_output():
    from glance_law.evidence.audit import audit
    rows = []
    for tgt, toks in (("small", [1, 2, 3, 4]), ("big", [9, 8, 7, 6])):
        for drafter in ("ar", "ssd"):
            for q in ("q1", "q2"):
                rows.append({"run_id": f"{tgt}-{drafter}", "task": "t", "prompt_id": q, "drafter": drafter,
                             "condition": "matched", "target": tgt, "tokens": toks, "new_tokens": 4})
    res = audit(pd.DataFrame(rows)).to_frame()
    assert (res["equal"] == res["audited"]).all() and res["audited"].sum() == 4   # no cross-target divergence
    assert set(res["drafter"]) == {"ssd @ small", "ssd @ big"}


def test_reductions_never_pool_targets(tmp_path):
    from glance_law.scale.engines import reduce_logs
    from glance_law.scale.reduce import reduce_frame
    for tgt, seed in (("/models/vicuna-7b", 0), ("/models/llama-70b", 1)):
        write_table(sim(None, seed, run=f"r{seed}"), tmp_path / f"rounds-{seed}.parquet",
                    run={"run_id": f"r{seed}", "target": {"path": tgt}})
    with pytest.raises(GlanceError, match="2 target models .*reduce each target's files separately"):
        reduce_logs(tmp_path, engine="arrow")
    assert len(reduce_logs(tmp_path / "rounds-0.parquet", engine="arrow").cells)     # one target: as before
    f = pd.concat([sim("vicuna", 0, "a"), sim("llama", 1, "b")], ignore_index=True)
    cells = reduce_frame(f).cells
    assert set(cells["drafter"].astype(str)) == {"sim @ vicuna", "sim @ llama"}
    for tgt, sub in f.groupby("target"):
        assert cells.loc[cells["drafter"].astype(str) == f"sim @ {tgt}", "n"].sum() == (sub["horizon"] > 0).sum()


@pytest.mark.skipif(not (VASE.parent / "bnukh").exists(), reason="../shared/realdata not present")
def test_files_of_one_arm_split_only_where_they_share_questions():
    """bnukh's five EAGLE files on vicuna-7b: three benchmarks whose questions no other file holds
    pool as one run 'eagle'; spec_bench and test_bench share 4 questions (test_bench is a subset)
    and stay apart as two runs. Round counts re-derived from the raw answers."""
    import gzip
    import json

    from glance_law.io import read_logs

    files = sorted((VASE.parent / "bnukh").glob("*__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz"))
    assert len(files) == 5
    got = read_logs([str(f) for f in files], skip_bad=True).frame["drafter"].astype(str).value_counts().to_dict()

    def raw_rounds(f):
        n = 0
        with gzip.open(f, "rt", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue                              # the corrupt line --skip-bad skips
                n += sum(len(c.get("accept_lengths") or []) for c in rec["choices"])
        return n
    shared = {f for f in files if f.name.startswith(("spec_bench__", "test_bench__"))}
    assert got["eagle"] == sum(raw_rounds(f) for f in files if f not in shared)
    for f in shared:
        assert got[f"eagle [{f.name.removesuffix('.jsonl.gz')}]"] == raw_rounds(f)


def _reduced_file(tmp_path, name, frame_or_paths, drop_targets=False):
    from glance_law.scale.engines import reduce_logs
    from glance_law.scale.reduce import Reduced, reduce_frame, write_reduced
    red = reduce_frame(frame_or_paths) if isinstance(frame_or_paths, pd.DataFrame) else reduce_logs(frame_or_paths)
    if drop_targets:      # as written before the reduction recorded its targets
        red = Reduced(red.cells, red.grid, red.buckets, {k: v for k, v in red.info.items() if k != "targets"})
    return write_reduced(red, tmp_path / name)


def test_reduced_files_of_two_targets_stay_apart(tmp_path):
    from glance_law.scale.engines import reduce_logs
    from glance_law.scale.reduce import read_reduced
    for tgt, seed in (("/models/vicuna-7b", 0), ("/models/llama-70b", 1)):
        (tmp_path / tgt[8:]).mkdir()
        write_table(sim(None, seed, run=f"r{seed}"), tmp_path / tgt[8:] / "rounds.parquet",
                    run={"run_id": f"r{seed}", "target": {"path": tgt}})
    a = _reduced_file(tmp_path, "red-v.parquet", tmp_path / "vicuna-7b")
    b = _reduced_file(tmp_path, "red-l.parquet", tmp_path / "llama-70b")
    assert reduce_logs(tmp_path / "vicuna-7b").info["targets"] == ["vicuna-7b"]
    m = read_reduced([a, b])
    assert m.info["targets"] == ["llama-70b", "vicuna-7b"] and any("2 target models" in n for n in m.notes)
    for tgt, seed in (("vicuna-7b", 0), ("llama-70b", 1)):
        f = sim(None, seed)
        got = m.cells.loc[m.cells["drafter"].astype(str) == f"sim @ {tgt}", "n"].sum()
        assert got == (f["horizon"] > 0).sum()
        assert m.prompts(f"sim @ {tgt}", "caption") == f.loc[f["task"] == "caption", "prompt_id"].nunique()
    # the rounds of one target and the reduction of another, in one call: apart too
    mixed = reduce_logs([tmp_path / "vicuna-7b", b])
    assert set(mixed.cells["drafter"].astype(str)) == {"sim @ vicuna-7b", "sim @ llama-70b"}
    # the fit CLI on the two reduced files: one row per target
    out = tmp_path / "fit.json"
    assert fit_main([a, b, "--format", "json", "--out", str(out)]) == 0
    law = pd.DataFrame(fit_json_rows(json.loads(out.read_text())))
    assert set(zip(law["target"], law["drafter"])) == {("vicuna-7b", "sim"), ("llama-70b", "sim")}
    assert len(law) == 6
    # one target (and files written before targets were recorded): merged exactly as before
    a2 = _reduced_file(tmp_path, "red-v2.parquet", sim(None, 2, run="r2").assign(target="vicuna-7b"))
    same = read_reduced([a, a2])
    assert same.info["targets"] == ["vicuna-7b"] and set(same.cells["drafter"].astype(str)) == {"sim"}
    o1 = _reduced_file(tmp_path, "old-1.parquet", tmp_path / "vicuna-7b", drop_targets=True)
    o2 = _reduced_file(tmp_path, "old-2.parquet", sim(None, 2, run="r2"), drop_targets=True)
    old = read_reduced([o1, o2])
    assert "targets" not in old.info and set(old.cells["drafter"].astype(str)) == {"sim"}
    # an old file (no target recorded) beside one that names its target: not assumed the same model
    assert set(read_reduced([o2, b]).cells["drafter"].astype(str)) == {"sim @ unknown", "sim @ llama-70b"}


def test_reduced_vase_targets_stay_apart(folder, tmp_path):
    from glance_law.scale.reduce import read_reduced
    a = _reduced_file(tmp_path, "red-vicuna.parquet", [folder / VI_SSD])
    b = _reduced_file(tmp_path, "red-llama.parquet", [folder / LL_SSD])
    m = read_reduced([a, b])
    assert m.info["targets"] == ["llama2-7b-chat", "vicuna-7b-v1.3"]
    c = m.cells.assign(drafter=m.cells["drafter"].astype(str), task=m.cells["task"].astype(str))
    for tgt, name in (("llama2-7b-chat", LL_SSD), ("vicuna-7b-v1.3", VI_SSD)):
        got = c.loc[c["drafter"].str.endswith(f" @ {tgt}")].groupby("task")["n"].sum().to_dict()
        assert got == dict(drafted_rounds_by_task(name))


# --------------------------------------------------------------------------
# library entry points that bypass the CLI: replay, width allocation, round cost, Fano
# --------------------------------------------------------------------------

def _trees(target, seed):
    from glance_law.simulate import simulate_tree_rounds
    f = simulate_tree_rounds(n_prompts=4, rounds_per_prompt=5, seed=seed, run_id=f"r{seed}")
    return f if target is None else f.assign(target=target)


def test_replay_and_width_keep_targets_apart():
    import glance_law as gl
    f = pd.concat([_trees("vicuna", 0), _trees("llama", 1)], ignore_index=True)
    rep = gl.replay(f, n_max=15).to_frame()
    for tgt, seed in (("vicuna", 0), ("llama", 1)):
        alone = gl.replay(_trees(None, seed), n_max=15).to_frame()
        mine = rep.loc[rep["task"].str.startswith(f"block @ {tgt}/")]
        assert len(mine) == len(alone) and mine["rounds"].tolist() == alone["rounds"].tolist()
        np.testing.assert_allclose(mine["accepted"].to_numpy(), alone["accepted"].to_numpy())
    w = gl.width_allocation(f, budgets=(15,), n_boot=0)
    assert {"block @ vicuna", "block @ llama"} <= {str(t).split("/")[0] for t in w.to_frame()["task"]}
    # one target: exactly as without the column
    pd.testing.assert_frame_equal(gl.replay(_trees("vicuna", 0), n_max=15).to_frame(),
                                  gl.replay(_trees(None, 0), n_max=15).to_frame())


def _cost_rounds(target, fwd_ms, const, seed):
    """Speculative rounds of cost const + 2 per pass, and autoregressive rounds ("ar") of fwd_ms."""
    rng = np.random.default_rng(seed)
    n = 60
    spec = pd.DataFrame({"task": "t", "prompt_id": [f"p{i % 12}" for i in range(n)], "drafter": "ssd",
                         "horizon": 3, "draft_passes": rng.integers(1, 5, n), "budget": 15, "target": target})
    spec["round_ms"] = const + 2.0 * spec["draft_passes"] + rng.normal(0, 0.1, n)
    ar = pd.DataFrame({"task": "t", "prompt_id": [f"p{i % 12}" for i in range(n)], "drafter": "ar",
                       "horizon": 0, "draft_passes": 0, "budget": 0, "target": target,
                       "round_ms": fwd_ms + rng.normal(0, 0.05, n)})
    return spec, ar


def test_round_cost_uses_each_targets_own_forward_cost():
    from glance_law.evidence.timing import round_cost
    s1, a1 = _cost_rounds("small", 10.0, 30.0, 0)
    s2, a2 = _cost_rounds("big", 40.0, 80.0, 1)
    spec = pd.concat([s1, s2], ignore_index=True)
    res = round_cost(spec, baseline_rounds=pd.concat([a1, a2], ignore_index=True), n_boot=0)
    t = res.to_frame()
    for tgt, a in (("small", a1), ("big", a2)):
        rows = t.loc[t["drafter"] == f"ssd @ {tgt}"].set_index("term")
        assert rows.loc["target_forward_ms", "estimate"] == pytest.approx(a["round_ms"].mean())
        assert rows.loc["constant_target_forwards", "estimate"] == pytest.approx(
            rows.loc["constant_ms", "estimate"] / a["round_ms"].mean())
    # the arm labels of an already labelled frame ("ar @ big" rows are baseline rounds too)
    lab = arms.label_targets(pd.concat([spec, a1, a2], ignore_index=True))
    is_ar = arms.plain_drafter(lab["drafter"]) == "ar"
    again = round_cost(lab.loc[~is_ar], baseline_rounds=lab.loc[is_ar], n_boot=0).to_frame()
    pd.testing.assert_frame_equal(again, t)
    # a target without a baseline gets no conversion (never another target's)
    alone = round_cost(spec, baseline_rounds=a1, n_boot=0)
    big = alone.to_frame().loc[lambda x: x["drafter"] == "ssd @ big"]
    assert "target_forward_ms" not in set(big["term"]) and any("no baseline timing of target big" in n
                                                                for n in alone.notes)
    # one target: the same numbers as without the column
    one = round_cost(s1, baseline_rounds=a1, n_boot=50).to_frame()
    none = round_cost(s1.drop(columns="target"), baseline_rounds=a1.drop(columns="target"), n_boot=50).to_frame()
    pd.testing.assert_frame_equal(one, none)


def test_round_cost_on_the_vase_targets(folder):
    """The VASE logs carry no round timings: a planted per-target cost on their real rounds
    (the autoregressive rounds of each target at its own forward cost) must come back per target."""
    from glance_law.evidence.timing import round_cost
    f = arms.label_targets(import_logs([folder / n for n in (LL_SSD, LL_VAN, VI_SSD, VI_VAN)]).rounds)
    fwd = {"llama2-7b-chat": 25.0, "vicuna-7b-v1.3": 20.0}
    tgt = f["target"].astype(str)
    f["draft_passes"] = f["horizon"].astype(int)
    f["budget"] = 1
    f["round_ms"] = tgt.map(fwd).to_numpy() * (1 + 0.2 * f["draft_passes"])
    is_ar = arms.plain_drafter(f["drafter"]) == "ar"
    assert is_ar.sum() == (f["drafter"].astype(str).str.startswith("ar @ ")).sum() > 0
    t = round_cost(f.loc[~is_ar], baseline_rounds=f.loc[is_ar], n_boot=0).to_frame()
    assert set(t["drafter"]) == {"ssd @ llama2-7b-chat", "ssd @ vicuna-7b-v1.3"}
    for name, ms in fwd.items():
        rows = t.loc[t["drafter"] == f"ssd @ {name}"].set_index("term")
        assert rows.loc["target_forward_ms", "estimate"] == pytest.approx(ms)
        assert rows.loc["constant_target_forwards", "estimate"] == pytest.approx(1.0, abs=1e-9)


def test_fano_refuses_one_vocabulary_for_targets_of_two(tmp_path):
    import glance_law as gl
    from glance_law.fano import run_vocab_size
    for tgt, seed, v in (("vicuna", 0, 32000), ("llama3", 1, 128256)):
        write_table(sim(None, seed, run=f"r{seed}"), tmp_path / f"rounds-{seed}.parquet",
                    run={"run_id": f"r{seed}", "target": {"path": tgt}, "vocab_size": v})
    logs = read_logs(tmp_path, "rounds")
    with pytest.raises(GlanceError, match="rounds-1.parquet: the run metadata's vocabulary size is 128256 .*"
                                          "rounds-0.parquet records 32000.*each target's files separately"):
        gl.fano_check(logs)
    assert run_vocab_size(read_logs(tmp_path / "rounds-0.parquet", "rounds")) == 32000
    assert gl.fano_check(logs, vocab_size=32000).vocab_size == 32000     # the user's |V|: as asked
