"""Simulated fixtures for the evidence analyses (probe, timing, audit) built on glance_law.simulate."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from glance_law.io import write_table
from glance_law.simulate import TaskSpec, simulate_rounds

CATS = ("run_id", "task", "prompt_id", "condition", "drafter")


def concat(*frames: pd.DataFrame) -> pd.DataFrame:
    out = pd.concat(frames, ignore_index=True)
    for c in CATS:
        if c in out.columns:
            out[c] = out[c].astype(str).astype("category")
    return out


def probe_frames(tasks, mismatched, n_prompts=30, rounds=20, seed=0, horizon=15, prompt_corr=0.3):
    """Matched and mismatched arms on one shared trajectory: the same seed (so the same
    prompt ids, rounds and random draws), the mismatched arm's TaskSpecs possibly with a
    shifted entropy distribution (scale) and/or a different law (b0, b1); the mismatched
    arm's positions are the matched arm's (teacher forcing)."""
    m = simulate_rounds(tasks, n_prompts=n_prompts, rounds_per_prompt=rounds, seed=seed, horizon=horizon,
                        run_id="live", drafter="block", prompt_corr=prompt_corr, truth=True)
    x = simulate_rounds(mismatched, n_prompts=n_prompts, rounds_per_prompt=rounds, seed=seed, horizon=horizon,
                        run_id="probe", drafter="block", condition="mismatched", prompt_corr=prompt_corr,
                        truth=True)
    x["position"] = m["position"].to_numpy()
    return m, x


def timing_prompts(speedups: dict, n_prompts=40, seed=0, base_ms=20.0, noise=0.05, prompt_sd=0.2):
    """Prompt rows of an ar arm and a block arm: the block arm's true ms/token is the
    ar arm's divided by the task's speedup; each measurement carries log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for task, sp in speedups.items():
        for i in range(n_prompts):
            nt = int(rng.integers(40, 200))
            ms = base_ms * np.exp(rng.normal(0, prompt_sd))
            common = dict(prompt_id=f"{task}-{i:04d}", task=task, new_tokens=nt, condition="matched")
            rows.append(dict(run_id="ar", drafter="ar", decode_ms=ms * nt * np.exp(rng.normal(0, noise)), **common))
            rows.append(dict(run_id="spec", drafter="block",
                             decode_ms=ms / sp * nt * np.exp(rng.normal(0, noise)), **common))
    return pd.DataFrame(rows)


def write_logs(folder: Path, rounds: pd.DataFrame | None = None, prompts: pd.DataFrame | None = None,
               stem: str = "sim") -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if rounds is not None:
        cols = [c for c in rounds.columns if not c.startswith("_")]
        write_table(rounds[cols], folder / f"rounds-{stem}.parquet", kind="rounds")
    if prompts is not None:
        write_table(prompts, folder / f"prompts-{stem}.parquet", kind="prompts")
    return folder


def spec(name, b0, b1, **kw) -> TaskSpec:
    return TaskSpec(name, b0=b0, b1=b1, **kw)


def mismatch_from(m: pd.DataFrame, b0: float, b1: float, seed: int = 0, shift: float = 0.0,
                  sd: float = 0.2) -> pd.DataFrame:
    """A mismatched arm on the matched arm's trajectory: same (task, prompt_id, round,
    position), entropy H_x = H_m * exp(shift + N(0, sd)), and accepted redrawn from the
    truncated geometric with p_x = sigmoid(b0 - b1 H_x) at the *same* uniform that produced
    the matched round (a randomised probability-integral transform of a_m under its true
    p_m), so the two arms of a pair are coupled as on a shared teacher-forced trajectory.
    Needs the matched arm's truth column ``_p``."""
    from scipy import special

    rng = np.random.default_rng(seed)
    x = m.drop(columns=[c for c in ("match", "target_rank", "target_logq", "committed") if c in m.columns]).copy()
    H = m["root_entropy"].to_numpy(float) * np.exp(shift + rng.normal(0, sd, len(m)))
    pm = m["_p"].to_numpy(float)
    am = m["accepted"].to_numpy(np.int64)
    L = m["horizon"].to_numpy(np.int64)
    hi = pm ** am
    lo = np.where(am < L, pm ** (am + 1), 0.0)
    w = lo + rng.random(len(m)) * (hi - lo)          # 1 - u, uniform given a_m
    p = special.expit(b0 - b1 * H)
    ls = np.arange(1, L.max() + 1)[None, :]
    a = ((p[:, None] ** ls > w[:, None]) & (ls <= L[:, None])).sum(axis=1)
    x["root_entropy"] = H.astype(np.float32)
    x["accepted"] = a.astype(np.int16)
    x["condition"] = "mismatched"
    x["run_id"] = "probe"
    x["_p"] = p
    return x


EXAMPLE_TASKS = (TaskSpec("caption", 0.8, 0.46, shape=3.0, scale=0.55, floor_weight=0.03),
                 TaskSpec("textvqa", 0.9, 0.58, shape=2.5, scale=0.5, floor_weight=0.08),
                 TaskSpec("docvqa", 1.2, 0.95, shape=1.5, scale=0.4, floor_weight=0.25))


def example_logs(folder: Path, n_prompts: int = 12, rounds: int = 15, seed: int = 0,
                 probe: bool = True, baseline: bool = True, audit: bool = True) -> dict:
    """A folder shaped like glance-log's output for three tasks: the block arm's rounds and
    prompts (audited), a mismatched-image probe run, and an autoregressive baseline arm
    (rounds with horizon 0 and prompts, written to a ``baseline/`` subfolder)."""
    folder = Path(folder)
    rng = np.random.default_rng(seed)
    m = simulate_rounds(list(EXAMPLE_TASKS), n_prompts=n_prompts, rounds_per_prompt=rounds, seed=seed,
                        horizon=10, run_id="block", drafter="block", truth=True)
    cfg = rng.integers(1, 4, len(m))
    budget = rng.choice([15, 31, 63], len(m))
    m["draft_passes"] = cfg.astype(np.int16)
    m["budget"] = budget.astype(np.int16)
    m["round_ms"] = (20 + 2.0 * cfg + 0.05 * budget + rng.normal(0, 1, len(m))).astype(np.float32)
    m["min_path_margin"] = np.abs(m["min_path_margin"]).astype(np.float32) + np.float32(0.5)
    committed, tokens = [], {}
    for (task, pid), sub in m.groupby(["task", "prompt_id"], observed=True, sort=False):
        stream = rng.integers(10, 500, int((sub["accepted"] + 1).sum()))
        tokens[(task, pid)] = stream
        pos = 0
        for a in sub["accepted"].to_numpy():
            committed.append(stream[pos:pos + a + 1])
            pos += a + 1
    m["committed"] = committed
    out = {"rounds": m}
    write_logs(folder, m, stem="block")
    prom = []
    for (task, pid), sub in m.groupby(["task", "prompt_id"], observed=True, sort=False):
        nt = int((sub["accepted"] + 1).sum())
        row = dict(run_id="block", prompt_id=pid, task=task, drafter="block", condition="matched", new_tokens=nt,
                   decode_ms=float(sub["round_ms"].sum()), rounds=len(sub), tokens=tokens[(task, pid)])
        if audit:
            row.update(greedy_match=True, first_divergence=-1, divergence_margin=None)
        prom.append(row)
    prompts = pd.DataFrame(prom)
    if audit:   # plant one near-tie divergence and one wide-margin divergence
        prompts.loc[0, ["greedy_match", "first_divergence", "divergence_margin"]] = [False, 7, 0.01]
        prompts.loc[1, ["greedy_match", "first_divergence", "divergence_margin"]] = [False, 3, 4.0]
    write_table(prompts, folder / "prompts-block.parquet", kind="prompts")
    out["prompts"] = prompts
    if probe:
        mis = [TaskSpec(t.name, t.b0, t.b1, shape=t.shape, scale=t.scale * 1.8, floor_weight=t.floor_weight / 2)
               for t in EXAMPLE_TASKS]
        parts = [mismatch_from(m.loc[m["task"] == t.name], t.b0, t.b1, seed=seed + 1, shift=0.5) for t in mis]
        x = concat(*parts)
        write_logs(folder, x, stem="probe")
        out["probe"] = x
    if baseline:
        bfold = folder / "baseline"
        brows, bprom = [], []
        for (task, pid), stream in tokens.items():
            per_tok = 20.0 * np.exp(rng.normal(0, 0.1))
            ms = per_tok * np.exp(rng.normal(0, 0.05, len(stream)))
            for r, (_tok, t_ms) in enumerate(zip(stream, ms)):
                brows.append(dict(run_id="ar", task=task, prompt_id=pid, round=r, root_entropy=0.5, accepted=0,
                                  horizon=0, drafter="ar", round_ms=t_ms, draft_passes=0, budget=0))
            bprom.append(dict(run_id="ar", prompt_id=pid, task=task, drafter="ar", condition="matched",
                              new_tokens=len(stream), decode_ms=float(ms.sum()), tokens=stream))
        write_table(pd.DataFrame(brows), bfold / "rounds-ar.parquet", kind="rounds")
        write_table(pd.DataFrame(bprom), bfold / "prompts-ar.parquet", kind="prompts")
        out["baseline"] = bfold
    return out


FORMATS = ("text", "markdown", "latex", "html", "json", "csv")


def run_cli(argv, capsys):
    """Run python -m glance_law.fit in-process; returns (exit code, stdout, stderr)."""
    from glance_law.cli.fit import main

    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def check_cli_formats(argv, capsys, section: str, titles):
    """Every output format renders the section; JSON carries it under its name."""
    import json

    for fmt in FORMATS:
        rc, out, err = run_cli(list(argv) + ["--format", fmt], capsys)
        assert rc == 0, err
        if fmt == "json":
            doc = json.loads(out)
            assert section in doc and doc[section], doc.keys()
            for t in titles:
                assert t in doc[section]
        elif fmt == "csv":
            assert f"# {section}: " in out
        else:
            assert titles[0].split(":")[0] in out


def check_cli_error(argv, capsys, *needles):
    rc, out, err = run_cli(argv, capsys)
    assert rc == 2, (rc, out, err)
    assert out == ""
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    return err


def check_cli_skipped(argv, capsys, *needles):
    """A section whose inputs the logs lack is not run: exit 0, the rest of the output made, and one
    ``not run:`` line (stdout and stderr) naming what is missing and what records it."""
    rc, out, err = run_cli(argv, capsys)
    assert rc == 0, (rc, out, err)
    lines = [l for l in err.splitlines() if "not run:" in l]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].split("not run: ", 1)[1] in out
    for n in needles:
        assert n in lines[0], err
