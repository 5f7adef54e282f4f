"""SGLang: per-request speculative-decoding fields in a ``/generate`` response's
``meta_info`` (``python/sglang/srt/managers/tokenizer_manager.py``,
``_calculate_spec_decoding_metrics``; SGLang PR #11144 and later).

Read per response (one JSON object per line, or a JSON array of responses): ``spec_verify_ct``
(verification steps = rounds), ``spec_accept_length`` (``completion_tokens /
spec_verify_ct``, bonus included), ``completion_tokens``, ``prompt_tokens``, the accepted
and proposed draft-token counts (``spec_accept_token_num`` / ``spec_accepted_tokens`` /
``spec_accepted_drafts``, ``spec_draft_token_num`` / ``spec_proposed_drafts``),
``e2e_latency`` (seconds, with prefill and queueing), ``id``, and the per-request
accept-length list where the server reports it: ``spec_accept_histogram`` (index k: steps
that accepted k draft tokens). Prompt rows always; rounds only from the histogram (their
order unknown), with horizon L from ``--horizon`` or, failing that, the proposed draft
tokens per step (``spec_draft_token_num / spec_verify_ct`` = speculative_num_draft_tokens -
1, the depth of a chain; a tree's depth is smaller: pass --horizon for trees).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from glance_law.data.importers.common import FileResult, as_loc, file_run, horizon_for, run_base
from glance_law.data.tables import LogError

_ACC = ("spec_accept_token_num", "spec_accepted_tokens", "spec_accepted_drafts", "spec_num_correct_drafts")
_PROP = ("spec_draft_token_num", "spec_proposed_drafts", "spec_num_proposed_drafts")
_HIST = ("spec_accept_histogram", "spec_correct_drafts_histogram")


def _first(meta, keys):
    return next((meta[k] for k in keys if meta.get(k) is not None), None)


def import_file(path, lines, *, horizon=None, task=None) -> FileResult:
    path = as_loc(path)
    base = run_base(path)
    notes = [f"{path}: skipped corrupt line {i} ({what})" for i, what in lines.bad]
    override = horizon_for(horizon, (path.name, base.split("/")[-1], base, "sglang", "*"))
    P = {k: [] for k in ("prompt_id", "task", "new_tokens", "rounds", "prompt_tokens", "decode_ms",
                         "spec_accept_length", "accepted_tokens", "draft_tokens", "target")}
    R = {k: [] for k in ("prompt_id", "task", "accepted", "horizon", "target")}
    recs = []
    for lineno, rec in lines.records:
        recs.extend((lineno, r) for r in (rec if isinstance(rec, list) else [rec]))
    derived = ignored = 0
    for lineno, rec in recs:
        meta = rec.get("meta_info") if isinstance(rec, dict) else None
        if not isinstance(meta, dict) or meta.get("spec_verify_ct") is None:
            ignored += 1
            continue
        try:
            ct = int(meta["spec_verify_ct"])
            hist_raw = _first(meta, _HIST)
            if hist_raw is not None:
                [int(x) for x in hist_raw]
        except (TypeError, ValueError):
            raise LogError(path, f"line {lineno}: spec_verify_ct or the acceptance histogram is not a number",
                           "log the response as the server sent it") from None
        pid = str(next((rec[k] for k in ("prompt_id", "question_id", "custom_id") if rec.get(k) is not None),
                       meta.get("id", f"line-{lineno}")))
        t = str(rec.get("task") or task or "unknown")
        tgt = next((str(rec[k]) for k in ("model", "model_path", "target") if rec.get(k) not in (None, "")), None)
        acc_tok, prop = _first(meta, _ACC), _first(meta, _PROP)
        e2e = meta.get("e2e_latency")
        P["prompt_id"].append(pid)
        P["task"].append(t)
        P["target"].append(tgt)
        P["new_tokens"].append(meta.get("completion_tokens"))
        P["rounds"].append(ct)
        P["prompt_tokens"].append(meta.get("prompt_tokens"))
        P["decode_ms"].append(None if e2e is None else float(e2e) * 1000.0)
        P["spec_accept_length"].append(meta.get("spec_accept_length"))
        P["accepted_tokens"].append(acc_tok)
        P["draft_tokens"].append(prop)
        hist = _first(meta, _HIST)
        if isinstance(hist, list) and hist:
            L = override
            if L is None and prop is not None and ct > 0 and int(prop) % ct == 0:
                L = int(prop) // ct
                derived += 1
            if L is None:
                raise LogError(path, f"line {lineno}: an acceptance histogram without a horizon (no proposed draft "
                                     "count to derive it from)", "pass --horizon L (the deepest draft offset)")
            acc = np.repeat(np.arange(len(hist)), np.asarray(hist, dtype=np.int64))
            if acc.size and acc.max() > L:
                raise LogError(path, f"line {lineno}: the histogram reaches {int(acc.max())} accepted tokens, more than "
                                     f"the horizon {L}", "pass --horizon L with this server's depth")
            if acc.size != ct:
                notes.append(f"{path}: line {lineno}: the histogram counts {acc.size} steps, spec_verify_ct {ct}")
            R["prompt_id"].append((pid, acc.size))
            R["task"].append((t, acc.size))
            R["target"].append((tgt, acc.size))
            R["accepted"].append(acc)
            R["horizon"].append(np.full(acc.size, L))
    if not P["prompt_id"]:
        raise LogError(path, "no response carries meta_info.spec_verify_ct",
                       "log the /generate responses of a server started with --speculative-algorithm")
    if ignored:
        notes.append(f"{path}: {ignored} record(s) without meta_info.spec_verify_ct ignored")
    if not any(P["target"]):        # the served model, where the logged record names it
        del P["target"]
    prompts = pd.DataFrame({"run_id": base, **P, "drafter": "sglang"})
    for c in ("new_tokens", "rounds", "prompt_tokens", "accepted_tokens", "draft_tokens"):
        prompts[c] = pd.array(prompts[c], dtype="Int64")
    for c in ("decode_ms", "spec_accept_length"):
        prompts[c] = pd.array(prompts[c], dtype="Float64")
    if R["accepted"]:
        def rep(parts):
            return np.concatenate([np.repeat(np.array([x], dtype=object), k) for x, k in parts])
        acc = np.concatenate(R["accepted"])
        rounds = pd.DataFrame({"run_id": base, "task": rep(R["task"]), "prompt_id": rep(R["prompt_id"]),
                               "round": np.concatenate([np.arange(n) for _, n in R["prompt_id"]]).astype(np.int32),
                               "accepted": acc.astype(np.int16),
                               "horizon": np.concatenate(R["horizon"]).astype(np.int16), "drafter": "sglang"})
        rounds.insert(4, "root_entropy", pd.array([None] * len(rounds), dtype="Float32"))
        if any(x for x, _ in R["target"]):
            rounds["target"] = rep(R["target"])
        notes.append(f"{path}: rounds expanded from spec_accept_histogram ({len(rounds)}): their order is unknown "
                     "(sorted by accepted length)" + (f"; horizon = proposed draft tokens per step for {derived} "
                                                      "request(s) (a chain's depth; pass --horizon for trees)"
                                                      if derived else ""))
    else:
        rounds = pd.DataFrame()
        notes.append(f"{path}: prompt-level rows only (no spec_accept_histogram): tau per request = "
                     "completion_tokens / spec_verify_ct")
    notes.append(f"{path}: sglang, {len(prompts)} requests; decode_ms is e2e_latency (prefill and queueing "
                 "included); no root_entropy")
    run = file_run(run_id=base, drafter={"kind": "sglang"},
                       source={"format": "sglang", "file": str(path)})
    return FileResult(str(path), "sglang", rounds, prompts, notes, run)
