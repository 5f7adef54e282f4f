"""SGLang: per-request speculative-decoding fields in a ``/generate`` response's
``meta_info`` (SGLang 0.5.23; ``python/sglang/srt/managers/tokenizer_manager.py`` and the
scheduler's per-request counters; older servers' names are read too).

Read per response (one JSON object per line, or a JSON array of responses): ``spec_verify_ct``
(verification steps = rounds), ``spec_accept_length`` (``completion_tokens /
spec_verify_ct``, bonus included), ``completion_tokens``, ``prompt_tokens``, the accepted and
proposed draft-token counts (current ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts``;
older ``spec_accepted_drafts`` / ``spec_proposed_drafts``, ``spec_accept_token_num`` /
``spec_draft_token_num``), ``e2e_latency`` (seconds, with prefill and queueing), ``id``, the
per-request accept-length histogram (current ``spec_correct_drafts_histogram``, older
``spec_accept_histogram``; index k: steps that accepted k draft tokens) and DSpark's capped
verification: ``spec_cap_length`` (mean verification window, bonus slot included),
``spec_block_accept_length`` (mean uncapped block acceptance) and ``spec_cap_lens_histogram``
(index c: steps verified with a window of c).

Prompt rows always; rounds only from the histogram (their order unknown), at the tree depth L:
``--horizon``, else the server's own settings where the logged record carries them
(``speculative_num_steps`` = the depth; with ``speculative_eagle_topk`` = 1,
``speculative_num_draft_tokens`` - 1), else the proposed draft tokens per step *only* when a
step accepted that many (then the draft is a chain of that length: a tree of n draft tokens is
at most n deep). Otherwise the depth is unknown (a depth-3, top-4 tree proposes 7 tokens per
step) and the histogram is refused with a line naming ``--horizon``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from glance_law.data import inputs
from glance_law.data.importers.common import (
    FileResult,
    as_loc,
    file_run,
    horizon_for,
    run_base,
    split_prompts_per_task,
)
from glance_law.data.tables import LogError
from glance_law.data.tasks import NO_TASK

_ACC = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num", "spec_accepted_tokens")
_PROP = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
_HIST = ("spec_correct_drafts_histogram", "spec_accept_histogram")
_CAP_HIST = "spec_cap_lens_histogram"
#: where a logged record may carry the server's speculative settings (the record itself first)
_SETTINGS = (None, "meta_info", "server_info", "server_args", "speculative", "settings", "request")


def _first(meta, keys):
    return next((meta[k] for k in keys if meta.get(k) is not None), None)


def _first_count(meta, keys, path=None, lineno=None):
    """The first of ``keys`` present, as a count (int >= 0), else None; a bad value is refused."""
    k = next((k for k in keys if meta.get(k) is not None), None)
    return None if k is None else inputs.as_int(meta[k], path, lineno, k, 0, 1 << 62)


def _number(meta, key: str, path, lineno, scale: float = 1.0):
    v = meta.get(key)
    return None if v is None else inputs.as_float(v, path, lineno, key, lo=0.0) * scale


def _setting(rec: dict, key: str):
    for where in _SETTINGS:
        d = rec if where is None else rec.get(where)
        if isinstance(d, dict) and d.get(key) is not None:
            return inputs.as_int(d[key], None, None, key, 0, inputs.MAX_POSITION + 1)
    return None


def depth_from_settings(rec: dict) -> tuple[int | None, str]:
    """The draft depth L from a record's own ``speculative_*`` settings, and where it came from."""
    steps = _setting(rec, "speculative_num_steps")
    if steps is not None:
        return steps, "speculative_num_steps"
    topk, n = _setting(rec, "speculative_eagle_topk"), _setting(rec, "speculative_num_draft_tokens")
    if topk == 1 and n is not None:
        return n - 1, "speculative_num_draft_tokens - 1 (topk 1: a chain)"
    return None, ""


def _depth(rec, meta, override, acc: np.ndarray, path, lineno) -> tuple[int, str]:
    if override is not None:
        return override, "--horizon"
    L, how = depth_from_settings(rec)
    if L is not None:
        return L, how
    ct, prop = meta.get("spec_verify_ct"), _first_count(meta, _PROP, path, lineno)
    if prop is not None and ct and int(prop) % int(ct) == 0 and acc.size and int(acc.max()) == int(prop) // int(ct):
        return int(prop) // int(ct), "proposed per step, reached by a step (a chain)"
    per = f" ({int(prop) / int(ct):g} proposed per step)" if prop is not None and ct else ""
    raise LogError(path, f"line {lineno}: the draft depth is unknown{per}: the record carries no speculative_num_steps "
                         "and no step accepted every proposed token, so the draft may be a tree (a depth-3, top-4, "
                         "8-token tree proposes 7 per step)",
                   "pass --horizon L (speculative_num_steps of the server), or log the server's speculative settings "
                   "(GET /server_info) beside the responses")


def _hist(meta, path, lineno):
    ct = inputs.as_int(meta["spec_verify_ct"], path, lineno, "spec_verify_ct", 0, 1 << 62)
    k = next((k for k in _HIST if meta.get(k) is not None), None)
    h = None if k is None else inputs.as_histogram(meta[k], path, lineno, k).tolist()
    cap = meta.get(_CAP_HIST)
    cap = inputs.as_histogram(cap, path, lineno, _CAP_HIST).tolist() if cap else []
    return ct, h, cap


def import_file(path, lines, *, horizon=None, task=None) -> FileResult:
    path = as_loc(path)
    base = run_base(path)
    notes = [f"{path}: skipped corrupt line {i} ({what})" for i, what in lines.bad]
    override = horizon_for(horizon, (path.name, base.split("/")[-1], base, "sglang", "*"))
    P = {k: [] for k in ("prompt_id", "task", "new_tokens", "rounds", "prompt_tokens", "decode_ms",
                         "spec_accept_length", "spec_cap_length", "spec_block_accept_length", "accepted_tokens",
                         "draft_tokens", "target")}
    R = {k: [] for k in ("prompt_id", "task", "accepted", "horizon", "target")}
    recs = []
    for lineno, rec in lines.records:
        recs.extend((lineno, r) for r in (rec if isinstance(rec, list) else [rec]))
    how: dict = {}
    ignored = capped = expanded = 0
    for lineno, rec in recs:
        meta = rec.get("meta_info") if isinstance(rec, dict) else None
        if not isinstance(meta, dict) or meta.get("spec_verify_ct") is None:
            ignored += 1
            continue
        ct, hist, cap = _hist(meta, path, lineno)
        pid = str(next((rec[k] for k in ("prompt_id", "question_id", "custom_id") if rec.get(k) is not None),
                       meta.get("id", f"line-{lineno}")))
        t = str(rec.get("task") or task or NO_TASK)
        tgt = next((str(rec[k]) for k in ("model", "model_path", "target") if rec.get(k) not in (None, "")), None)
        for k, v in (("prompt_id", pid), ("task", t), ("target", tgt),
                     ("new_tokens", _first_count(meta, ("completion_tokens",), path, lineno)),
                     ("rounds", ct), ("prompt_tokens", _first_count(meta, ("prompt_tokens",), path, lineno)),
                     ("decode_ms", _number(meta, "e2e_latency", path, lineno, 1000.0)),
                     ("spec_accept_length", _number(meta, "spec_accept_length", path, lineno)),
                     ("spec_cap_length", _number(meta, "spec_cap_length", path, lineno)),
                     ("spec_block_accept_length", _number(meta, "spec_block_accept_length", path, lineno)),
                     ("accepted_tokens", _first_count(meta, _ACC, path, lineno)),
                     ("draft_tokens", _first_count(meta, _PROP, path, lineno))):
            P[k].append(v)
        if not hist:
            continue
        expanded += sum(hist)
        inputs.check_expansion(expanded, path, f"line {lineno}")
        acc = np.repeat(np.arange(len(hist)), np.asarray(hist, dtype=np.int64))
        used = [c for c, n in enumerate(cap) if n]
        if len(used) > 1 or (used and sum(cap) != acc.size):
            capped += 1                 # windows of several lengths: which step had which is not logged
            continue
        L, why = _depth(rec, meta, override, acc, path, lineno)
        if used and used[0] - 1 < L:    # one window c (bonus slot included) on every step: c - 1 drafts verified
            L, why = used[0] - 1, why + ", capped to spec_cap_lens_histogram's one window"
        how[why] = how.get(why, 0) + 1
        if acc.size and acc.max() > L:
            raise LogError(path, f"line {lineno}: the histogram reaches {int(acc.max())} accepted tokens, more than "
                                 f"the depth {L} ({why})", "pass --horizon L with this server's depth")
        if acc.size != ct:
            notes.append(f"{path}: line {lineno}: the histogram counts {acc.size} steps, spec_verify_ct {ct}")
        for k, v in (("prompt_id", pid), ("task", t), ("target", tgt)):
            R[k].append((v, acc.size))
        R["accepted"].append(acc)
        R["horizon"].append(np.full(acc.size, L))
    if not P["prompt_id"]:
        raise LogError(path, "no response carries meta_info.spec_verify_ct",
                       "log the /generate responses of an SGLang server started with --speculative-algorithm")
    if ignored:
        notes.append(f"{path}: {ignored} record(s) without meta_info.spec_verify_ct ignored")
    if capped:
        notes.append(f"{path}: {capped} request(s) verified with windows of several lengths (spec_cap_lens_histogram, "
                     "DSpark): which step had which window is not logged, so their rounds are not expanded (tau per "
                     "request only)")
    split_prompts_per_task(P, R, path, notes)      # ids that restart per task: (task, prompt)
    return _frames(path, base, P, R, notes, how)


def _frames(path, base: str, P: dict, R: dict, notes: list, how: dict) -> FileResult:
    if not any(P["target"]):        # the served model, where the logged record names it
        del P["target"]
    for c in ("spec_cap_length", "spec_block_accept_length"):
        if all(x is None for x in P[c]):
            del P[c]
    prompts = pd.DataFrame({"run_id": base, **P, "drafter": "sglang"})
    for c in ("new_tokens", "rounds", "prompt_tokens", "accepted_tokens", "draft_tokens"):
        prompts[c] = pd.array(prompts[c], dtype="Int64")
    for c in ("decode_ms", "spec_accept_length", "spec_cap_length", "spec_block_accept_length"):
        if c in prompts:
            prompts[c] = pd.array(prompts[c], dtype="Float64")
    if R["accepted"]:
        def rep(parts):
            return np.concatenate([np.repeat(np.array([x], dtype=object), k) for x, k in parts])
        acc = np.concatenate(R["accepted"])
        rounds = pd.DataFrame({"run_id": base, "task": rep(R["task"]), "prompt_id": rep(R["prompt_id"]),
                               "round": np.concatenate([np.arange(n) for _, n in R["prompt_id"]]).astype(np.int32),
                               "accepted": acc.astype(np.int16),
                               "horizon": np.concatenate(R["horizon"]).astype(np.int16), "drafter": "sglang",
                               "round_order": "unknown"})       # expanded from a histogram (docs/schema.md)
        rounds.insert(4, "root_entropy", pd.array([None] * len(rounds), dtype="Float32"))
        if any(x for x, _ in R["target"]):
            rounds["target"] = rep(R["target"])
        notes.append(f"{path}: rounds expanded from spec_correct_drafts_histogram ({len(rounds)}): their order is "
                     "unknown (sorted by accepted length); depth from " + "; ".join(f"{k} for {n} request(s)"
                                                                                  for k, n in how.items()))
    else:
        rounds = pd.DataFrame()
        notes.append(f"{path}: prompt-level rows only (no spec_correct_drafts_histogram to expand): tau per request "
                     "= completion_tokens / spec_verify_ct")
    notes.append(f"{path}: sglang, {len(prompts)} requests; decode_ms is e2e_latency (prefill and queueing "
                 "included); no root_entropy")
    run = file_run(run_id=base, drafter={"kind": "sglang"}, source={"format": "sglang", "file": str(path)})
    return FileResult(str(path), "sglang", rounds, prompts, notes, run)
