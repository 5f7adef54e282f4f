"""A seeded, prompt-clustered sample of a round log (pure numpy/pandas, no I/O).

Sections whose statistics are means over prompts (the replayed width and draft policies, the
per-offset tables) keep their estimands on a random subset of whole prompts, with intervals that
widen accordingly; the report runs them on such a subset when a log is too large to replay in full.

The rule (:func:`sample_prompts`): the unit is a prompt cluster, ``(task, prompt_id)``
(:data:`glance_law.data.keys.CLUSTER_BY`), so every round of a kept prompt is kept, in every
condition, drafter and run (matched/mismatched pairs and arm pairs stay together). Each cluster
gets a pseudo-random rank: the first 8 bytes of ``blake2b(seed, task, prompt_id)``; within each
task, clusters are kept in rank order until the task's kept rounds reach ``max_rounds / rounds``
of its rounds (at least one prompt per task), so tasks keep their share of the rounds. The
same seed, task and prompt ids give the same sample whatever the file order, and a larger
``max_rounds`` keeps a superset.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from .keys import CLUSTER_BY

__all__ = ["cluster_ranks", "sample_prompts", "sample_note"]


def cluster_ranks(tasks, prompt_ids, seed: int = 0) -> np.ndarray:
    """uint64 pseudo-random rank of each (task, prompt_id) pair: blake2b of the seed and the pair."""
    out = np.empty(len(tasks), dtype=np.uint64)
    head = f"{int(seed)}\x1f".encode()
    for i, (t, p) in enumerate(zip(tasks, prompt_ids)):
        h = hashlib.blake2b(head + f"{t}\x1f{p}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
        out[i] = int.from_bytes(h, "little")
    return out


def sample_prompts(frame: pd.DataFrame, max_rounds: int, seed: int = 0) -> tuple[np.ndarray | None, pd.DataFrame]:
    """Boolean row mask of the sample (None: the frame has at most ``max_rounds`` rounds, keep all)
    and the kept prompt clusters (``task``, ``prompt_id``) - see the module docstring for the rule.
    ``max_rounds`` <= 0 keeps everything."""
    n = len(frame)
    if max_rounds <= 0 or n <= max_rounds:
        return None, frame[[c for c in CLUSTER_BY if c in frame.columns]].iloc[:0]
    task = frame["task"].astype(str) if "task" in frame.columns else pd.Series("", index=frame.index)
    pid = frame["prompt_id"].astype(str)
    counts = pd.DataFrame({"task": task.to_numpy(), "prompt_id": pid.to_numpy()}).value_counts(sort=False)
    clusters = counts.reset_index(name="rounds")
    clusters["rank"] = cluster_ranks(clusters["task"], clusters["prompt_id"], seed)
    clusters = clusters.sort_values(["task", "rank", "prompt_id"], kind="mergesort")
    frac = max_rounds / n
    before = clusters.groupby("task", sort=False)["rounds"].cumsum() - clusters["rounds"]
    total = clusters.groupby("task", sort=False)["rounds"].transform("sum")
    first = before == 0
    keep = first | (before < frac * total)            # add prompts until the task's share is reached
    kept = clusters.loc[keep, ["task", "prompt_id"]].reset_index(drop=True)
    mask = pd.MultiIndex.from_arrays([task.to_numpy(), pid.to_numpy()]).isin(
        pd.MultiIndex.from_frame(kept))
    return np.asarray(mask, dtype=bool), kept


def sample_note(kept_rounds: int, rounds: int, kept_prompts: int, prompts: int, seed: int, option: str) -> str:
    """The sentence a sampled section prints under its tables."""
    return (f"computed on a prompt-clustered sample: {kept_rounds} of {rounds} rounds, {kept_prompts} of {prompts} "
            f"prompts (whole prompts per task in blake2b order seeded by --seed {seed}, each task keeping its share "
            f"of the rounds; glance_law.data.sample); intervals are the sample's; {option} 0 uses every round")
