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
    x = m.drop(columns=[c for c in ("match", "target_rank", "target_logq") if c in m.columns]).copy()
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
