"""GLANCE round-log rows: the decoder's ``on_round`` dictionary plus ``task`` and ``prompt``,
one JSON object per line (GLANCE ``--round-log``).

Keys are read with aliases: entropy (``root_entropy``, ``entropy``, ``H``, ``ent``);
accepted (``accepted``, ``accept_len``, ``acceptance_length``, ``accepted_len``,
``n_accepted``, or ``tau`` = accepted + 1); tree size (``tree_size``, ``num_nodes``,
``n_nodes``: they count the root, so ``budget = tree_size - 1``; ``budget`` as is);
horizon (``horizon``, ``depth``, ``max_depth``, or ``block_size`` B giving L = B - 1; else
the ``horizon`` option); prompt (``prompt``, ``prompt_id``, ``sample_id``, ``id``; a long
prompt text becomes ``p-`` + the first 12 hex digits of its md5); round (``round``,
``round_idx``, ``step``; else counted per prompt in file order); ``task`` per row (else the
``task`` option, else ``unknown``); ``root_margin``, ``root_pmax``, ``round_ms`` when present.

Extended rounds: GLANCE extends a fully accepted block, so a round can accept more than
the block's L. Such a round is stored with ``horizon = accepted`` (a run known to reach at
least ``accepted``, read like an output-ending round) and ``extended = True``; the block L
stays in ``drafted_horizon``. These fix the four defects of the torch-bound converter
(``glance_log.hooks.GlanceOnRound.convert_jsonl``): the ``prompt`` key, the per-row task,
``tree_size`` counting the root, and extended rounds.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
import pandas as pd

from glance_law.data import inputs
from glance_law.data.importers.common import (
    FileResult,
    as_loc,
    file_run,
    horizon_for,
    prompts_per_task,
    run_base,
)
from glance_law.data.tables import LogError
from glance_law.data.tasks import NO_TASK

ALIASES = {
    "root_entropy": ("root_entropy", "entropy", "H", "ent"),
    "accepted": ("accepted", "accept_len", "acceptance_length", "accepted_len", "n_accepted"),
    "tree_size": ("tree_size", "num_nodes", "n_nodes"),
    "budget": ("budget",),
    "horizon": ("horizon", "depth", "max_depth"),
    "prompt_id": ("prompt", "prompt_id", "sample_id", "id"),
    "round": ("round", "round_idx", "step"),
    "root_margin": ("root_margin", "margin"),
    "root_pmax": ("root_pmax", "pmax", "max_prob"),
    "round_ms": ("round_ms", "time_ms"),
    "target": ("target", "target_model", "model", "model_id", "model_name"),
}


def _get(d: dict, name: str):
    for k in ALIASES[name]:
        v = d.get(k)
        if v is not None:
            return v
    return None


_I16 = 32767          # the contract's int16 columns (accepted, horizon, budget)


def _int(d: dict, name: str, path, lineno, lo: int = 0, hi: int = _I16):
    """The first alias of ``name`` present, checked as an int in lo..hi (None when absent)."""
    for k in ALIASES[name]:
        v = d.get(k)
        if v is not None:
            return inputs.as_int(v, path, lineno, k, lo, hi)
    return None


def _pid(v) -> str:
    s = str(v)
    return s if len(s) <= 64 else "p-" + hashlib.md5(s.encode("utf-8", "replace")).hexdigest()[:12]


def import_file(path, lines, *, horizon=None, task=None) -> FileResult:
    path = as_loc(path)
    base = run_base(path)
    notes = [f"{path}: skipped corrupt line {i} ({what})" for i, what in lines.bad]
    default_L = horizon_for(horizon, (path.name, base.split("/")[-1], base, "glance", "*"))
    cols = {k: [] for k in ("run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon",
                            "drafted_horizon", "extended", "budget", "root_margin", "root_pmax", "round_ms",
                            "target")}
    counters: dict = {}
    hashed = no_task = no_entropy = no_prompt = 0
    for lineno, d in lines.records:
        if not isinstance(d, dict):
            raise LogError(path, f"line {lineno}: not a JSON object", "each line is one on_round dictionary")
        h = _get(d, "root_entropy")
        a = _int(d, "accepted", path, lineno)
        if a is None and d.get("tau") is not None:
            a = inputs.as_int(d["tau"], path, lineno, "tau", 1, _I16 + 1) - 1
        L = _int(d, "horizon", path, lineno)
        if L is None and d.get("block_size") is not None:
            L = inputs.as_int(d["block_size"], path, lineno, "block_size", 1, _I16 + 1) - 1
        if L is None:
            L = default_L
        if a is None or L is None:
            miss = "accepted length" if a is None else "horizon"
            raise LogError(path, f"line {lineno}: the row has no {miss} (keys: {', '.join(sorted(d)[:12])})",
                           "pass --horizon L (horizon=L) when the rows carry no horizon or block_size"
                           if a is not None else "each row needs accepted, accept_len or tau")
        if h is None:
            no_entropy += 1
        elif isinstance(h, bool) or not (isinstance(h, (int, float)) and math.isfinite(float(h))
                                         and abs(h) <= inputs.FLOAT32_MAX):
            raise LogError(path, f"line {lineno}: root entropy {h!r:.40} is not a finite number",
                           "entropy is in nats from finite fp32 logits; fix the decoder's log", "root_entropy")
        raw_pid = _get(d, "prompt_id")
        if raw_pid is None:
            no_prompt += 1
            raw_pid = "0"
        pid = _pid(raw_pid)
        hashed += pid != str(raw_pid)
        t = d.get("task")
        if t is None:
            no_task += 1
            t = task or NO_TASK
        key = (str(t), pid)
        rnd = _int(d, "round", path, lineno, hi=(1 << 31) - 2)
        if rnd is None:
            rnd = counters.get(key, 0)
        counters[key] = int(rnd) + 1
        a, L = int(a), int(L)
        size = _int(d, "tree_size", path, lineno, lo=1, hi=_I16 + 1)
        budget = size - 1 if size is not None else _int(d, "budget", path, lineno)
        cols["run_id"].append(str(d.get("run_id") or base))
        cols["task"].append(str(t))
        cols["prompt_id"].append(pid)
        cols["round"].append(int(rnd))
        cols["root_entropy"].append(None if h is None else float(h))
        cols["accepted"].append(a)
        cols["horizon"].append(max(a, L))
        cols["drafted_horizon"].append(L)
        cols["extended"].append(a > L)
        cols["budget"].append(None if budget is None else int(budget))
        for k in ("root_margin", "root_pmax", "round_ms"):
            v = _get(d, k)
            cols[k].append(None if v is None else inputs.as_float(v, path, lineno, k, -inputs.FLOAT32_MAX,
                                                                  hi=inputs.FLOAT32_MAX))
        tg = _get(d, "target")
        cols["target"].append(None if tg is None else str(tg))
    n = len(cols["accepted"])
    if not n:
        raise LogError(path, "no round rows", "pass GLANCE's round-log JSONL")
    cols["prompt_id"], per_task = prompts_per_task(cols["task"], cols["prompt_id"], path)
    if per_task:
        notes.append(per_task)
    rounds = pd.DataFrame({k: v for k, v in cols.items()
                           if k not in ("budget", "root_margin", "root_pmax", "round_ms", "target")
                           or any(x is not None for x in v)})
    rounds["root_entropy"] = pd.array(cols["root_entropy"], dtype="Float32")
    if "budget" in rounds:
        rounds["budget"] = pd.array(rounds["budget"], dtype="Int16")
    rounds["drafter"] = "glance"
    ext = int(np.sum(cols["extended"]))
    if ext:
        notes.append(f"{path}: {ext} extended round(s) accepted past the block (accepted > L): stored with horizon = "
                     "accepted (a run of at least that length), extended = True, the block L in drafted_horizon")
    if hashed:
        notes.append(f"{path}: prompts given as text: prompt_id = 'p-' + md5 of the text ({hashed} rows)")
    if no_prompt:
        notes.append(f"{path}: {no_prompt} row(s) without a prompt key (prompt, prompt_id, sample_id, id) read as "
                     "prompt '0' (one cluster): add the prompt to each row to cluster by prompt")
    if no_task:
        notes.append(f"{path}: {no_task} row(s) without a task read as {task or 'unknown'!r}")
    if no_entropy:
        notes.append(f"{path}: {no_entropy} row(s) without an entropy: root_entropy left null")
    if "budget" in rounds and rounds["budget"].notna().any():
        notes.append(f"{path}: budget = tree_size - 1 (GLANCE's tree size counts the root)")
    g = rounds.groupby(["run_id", "task", "prompt_id"], sort=False)
    prompts = pd.DataFrame({"run_id": [k[0] for k in g.groups], "prompt_id": [k[2] for k in g.groups],
                            "task": [k[1] for k in g.groups], "drafter": "glance",
                            "new_tokens": (g["accepted"].sum() + g.size()).to_numpy(),
                            "rounds": g.size().to_numpy()})
    if "target" in rounds:     # the target model, where the rows name it (the prompt's first row's)
        prompts["target"] = g["target"].first().to_numpy()
    notes.append(f"{path}: glance, {n} rounds of {len(prompts)} prompts; prompt new_tokens counts the rounds' "
                 "committed tokens (accepted + 1 each)")
    run = file_run(run_id=base, drafter={"kind": "glance"},
                       source={"format": "glance", "file": str(path)})
    return FileResult(str(path), "glance", rounds, prompts, notes, run)
