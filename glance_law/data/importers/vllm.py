"""vLLM: Prometheus scrapes of the spec-decode counters, and per-request acceptance in the
OpenAI-compatible server's responses.

**(a) Prometheus text format** (``GET /metrics``; vLLM V1, ``vllm/v1/spec_decode/metrics.py``,
class ``SpecDecodingProm``): the counters ``vllm:spec_decode_num_drafts``,
``vllm:spec_decode_num_draft_tokens``, ``vllm:spec_decode_num_accepted_tokens`` and
``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}`` (exposed with the ``_total``
suffix of prometheus_client counters; labels ``model_name``, ``engine``). Counters are
cumulative, so consecutive scrapes give intervals (the first scrape: since the server
started). A file may hold several scrapes (a new one starts when a series repeats); files
are taken in the order given. Per interval and model, with K = the number of positions
(``num_speculative_tokens``), the drafts that accepted exactly j tokens are
``pos[j-1] - pos[j]`` (``pos[-1]`` = drafts, ``pos[K]`` = 0): the run-length distribution,
exactly. The importer expands those counts into rounds (``horizon = K``, ``root_entropy``
null, ``aggregate = True``), one pseudo-prompt per scrape interval (``prompt_id =
interval-<i>``). There are no prompts behind them: no prompt clustering is possible, and an
analysis that clusters by prompt treats each interval as one cluster (said in a note).

**(b) Responses** with ``metrics.speculative_decoding`` (vLLM's
``--per-request-spec-decode-metrics summary|detailed``, vLLM PR #48915): ``num_spec_tokens``
(K), ``num_spec_steps``, ``num_draft_tokens``, ``num_accepted_draft_tokens``,
``acceptance_histogram`` (index j: steps that accepted exactly j draft tokens) and, with
``detailed``, ``per_step_accepted`` (the accepted count of each step, in order). One
prompt per response (``prompt_id`` from ``prompt_id``/``question_id``/``custom_id``, else
the response ``id``); rounds from ``per_step_accepted`` in order, else expanded from the
histogram (order unknown, noted); prompt rows from ``usage.completion_tokens``.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from glance_law.data.importers.common import (
    FileResult,
    as_loc,
    file_run,
    horizon_for,
    open_bytes,
    read_json_lines,
    run_base,
)
from glance_law.data.tables import LogError

# names with the "vllm:" prefix (vLLM's own exposition) or "vllm_" (exporters that turn ":" into "_"),
# with or without prometheus_client's "_total" suffix
_SAMPLE = re.compile(r'^vllm[:_](spec_decode_[a-z_]+?)(_total)?(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)(\s+-?\d+)?\s*$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_NAMES = {"spec_decode_num_drafts": "drafts", "spec_decode_num_draft_tokens": "draft_tokens",
          "spec_decode_num_accepted_tokens": "accepted", "spec_decode_num_accepted_tokens_per_pos": "pos"}


def parse_scrapes(text: str) -> list[dict]:
    """Scrapes of one text: each {model: {"drafts": x, "draft_tokens": x, "accepted": x, "pos": {i: x}}},
    summed over engines."""
    scrapes: list[dict] = []
    cur: dict = {}
    seen: set = set()
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        name, labels, value = m.group(1), m.group(3) or "", float(m.group(4))
        what = _NAMES.get(name)
        if what is None:
            continue
        lab = dict(_LABEL.findall(labels))
        series = (name, tuple(sorted(lab.items())))
        if series in seen:
            scrapes.append(cur)
            cur, seen = {}, set()
        seen.add(series)
        model = lab.get("model_name", "")
        d = cur.setdefault(model, {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "pos": {}})
        if what == "pos":
            i = int(lab.get("position", "0"))
            d["pos"][i] = d["pos"].get(i, 0.0) + value
        else:
            d[what] += value
    if cur:
        scrapes.append(cur)
    return scrapes


def _prometheus(path: Path, text: str, horizon, task) -> FileResult:
    base = run_base(path)
    scrapes = parse_scrapes(text)
    if not scrapes:
        raise LogError(path, "no vllm:spec_decode_* samples", "scrape GET /metrics of a vLLM server with a "
                       "speculative config")
    notes = [f"{path}: vllm Prometheus counters, {len(scrapes)} scrape(s): an aggregate with no prompts and no "
             "entropy; rounds are expanded from the per-position counts, one pseudo-prompt per scrape interval "
             "(prompt_id interval-<i>), so no prompt clustering is possible (each interval counts as one cluster)"]
    rows = {k: [] for k in ("run_id", "prompt_id", "accepted", "horizon", "round", "target")}
    prev: dict = {}
    for i, sc in enumerate(scrapes):
        for model, d in sc.items():
            p = prev.get(model)
            K = (max(d["pos"]) + 1) if d["pos"] else 0
            if K == 0:
                raise LogError(path, f"scrape {i + 1}: no vllm:spec_decode_num_accepted_tokens_per_pos series",
                               "the per-position counter is needed for the run-length distribution")
            over = horizon_for(horizon, (model, path.name, base, "vllm", "*"))
            if over is not None and over != K:
                notes.append(f"{path}: --horizon {over} ignored: the counters have {K} positions")
            cur = np.array([d["drafts"]] + [d["pos"].get(j, 0.0) for j in range(K)] + [0.0])
            cum = (d["draft_tokens"], d["accepted"])
            if p is not None and p[0].size == cur.size and (cur >= p[0]).all():
                delta, dtok = cur - p[0], (cum[0] - p[1][0], cum[1] - p[1][1])
            else:
                if p is not None:
                    notes.append(f"{path}: scrape {i + 1} ({model or 'model'}): counters went down (a server "
                                 "restart): the interval starts from zero")
                delta, dtok = cur, cum
            prev[model] = (cur, cum)
            n = delta[:-1] - delta[1:]
            if (n < -1e-9).any() or abs(delta[1:-1].sum() - dtok[1]) > 0.5:
                raise LogError(path, f"scrape {i + 1} ({model or 'model'}): the per-position counts are not "
                                     "consistent (a later position counts more drafts than an earlier one, or they "
                                     "do not add up to the accepted tokens)",
                               "scrape the counters of one server, whole, in order")
            n = np.rint(n).astype(np.int64)
            if dtok[0] < K * delta[0] - 0.5:
                notes.append(f"{path}: scrape interval {i + 1}: {int(K * delta[0] - dtok[0])} draft token(s) fewer "
                             f"than {K} per draft: some drafts were shorter (their rounds are read at horizon {K})")
            acc = np.repeat(np.arange(K + 1), n)
            if acc.size == 0:
                continue
            run = f"{base}:{model}" if model else base
            rows["run_id"].append((run, acc.size))
            rows["prompt_id"].append((f"interval-{i + 1}", acc.size))
            rows["target"].append((model or None, acc.size))
            rows["accepted"].append(acc)
            rows["horizon"].append(np.full(acc.size, K))
            rows["round"].append(np.arange(acc.size))
    if not rows["accepted"]:
        raise LogError(path, "the counters hold no drafts", "scrape after the server has decoded")

    def rep(parts):
        return np.concatenate([np.repeat(np.array([x], dtype=object), k) for x, k in parts])
    acc = np.concatenate(rows["accepted"])
    R = pd.DataFrame({"run_id": rep(rows["run_id"]), "task": task or "all", "prompt_id": rep(rows["prompt_id"]),
                      "round": np.concatenate(rows["round"]).astype(np.int32),
                      "accepted": acc.astype(np.int16), "horizon": np.concatenate(rows["horizon"]).astype(np.int16),
                      "drafter": "vllm", "aggregate": True})
    if any(t for t, _ in rows["target"]):           # the model_name label: the served (target) model
        R["target"] = rep(rows["target"])
    R.insert(4, "root_entropy", pd.array([None] * len(R), dtype="Float32"))
    notes.append(f"{path}: {len(R)} rounds from the counters (round order within an interval is not known: sorted "
                 "by accepted length)")
    run = file_run(run_id=base, drafter={"kind": "vllm"}, source={"format": "vllm-prometheus",
                                                                                     "file": str(path)})
    return FileResult(str(path), "vllm", R, pd.DataFrame(), notes, run)


def _responses(path: Path, lines, horizon, task) -> FileResult:
    base = run_base(path)
    notes = [f"{path}: skipped corrupt line {i} ({what})" for i, what in lines.bad]
    R = {k: [] for k in ("prompt_id", "task", "accepted", "horizon", "round", "target")}
    P = {k: [] for k in ("prompt_id", "task", "new_tokens", "rounds", "prompt_tokens", "target")}
    unordered = skipped = 0
    for lineno, rec in lines.records:
        if isinstance(rec, dict) and isinstance(rec.get("data"), dict):
            rec = rec["data"]
        sd = ((rec or {}).get("metrics") or {}).get("speculative_decoding") if isinstance(rec, dict) else None
        if not isinstance(sd, dict):
            skipped += 1
            continue
        pid = next((str(rec[k]) for k in ("prompt_id", "question_id", "custom_id", "id") if rec.get(k) is not None),
                   f"line-{lineno}")
        t = str(rec.get("task") or task or "unknown")
        tgt = None if rec.get("model") in (None, "") else str(rec["model"])   # the OpenAI response's served model
        K = sd.get("num_spec_tokens")
        K = horizon_for(horizon, (path.name, base, "vllm", "*")) if K is None else int(K)
        steps = sd.get("per_step_accepted")
        hist = sd.get("acceptance_histogram")
        if isinstance(steps, list):
            acc = np.asarray(steps, dtype=np.int64)
        elif isinstance(hist, list):
            acc = np.repeat(np.arange(len(hist)), np.asarray(hist, dtype=np.int64))
            unordered += 1
        else:
            acc = None
        if acc is not None and K is None:
            raise LogError(path, f"line {lineno}: num_spec_tokens is missing", "pass --horizon L")
        if acc is not None and acc.size:
            if (acc < 0).any() or acc.max() > K:
                raise LogError(path, f"line {lineno}: accepted counts outside 0..num_spec_tokens ({K})",
                               "check the response; num_spec_tokens is the deepest draft offset")
            n_steps = sd.get("num_spec_steps")
            if n_steps is not None and int(n_steps) != acc.size:
                notes.append(f"{path}: line {lineno}: num_spec_steps {n_steps} differs from the {acc.size} steps listed")
            R["prompt_id"].append((pid, acc.size))
            R["task"].append((t, acc.size))
            R["target"].append((tgt, acc.size))
            R["accepted"].append(acc)
            R["horizon"].append(np.full(acc.size, K))
            R["round"].append(np.arange(acc.size))
        usage = rec.get("usage") or {}
        P["prompt_id"].append(pid)
        P["task"].append(t)
        P["target"].append(tgt)
        P["new_tokens"].append(usage.get("completion_tokens"))
        P["prompt_tokens"].append(usage.get("prompt_tokens"))
        P["rounds"].append(sd.get("num_spec_steps", None if acc is None else int(acc.size)))
    if not P["prompt_id"]:
        raise LogError(path, "no response carries metrics.speculative_decoding",
                       "start vLLM with --per-request-spec-decode-metrics summary (or detailed)")
    if skipped:
        notes.append(f"{path}: {skipped} record(s) without metrics.speculative_decoding ignored")
    if unordered:
        notes.append(f"{path}: {unordered} response(s) give only the acceptance histogram: rounds expanded from it, "
                     "their order unknown (sorted by accepted length); --per-request-spec-decode-metrics detailed "
                     "keeps the order")

    def rep(parts):
        return np.concatenate([np.repeat(np.array([x], dtype=object), k) for x, k in parts]) if parts else []
    if R["accepted"]:
        acc = np.concatenate(R["accepted"])
        rounds = pd.DataFrame({"run_id": base, "task": rep(R["task"]), "prompt_id": rep(R["prompt_id"]),
                               "round": np.concatenate(R["round"]).astype(np.int32),
                               "accepted": acc.astype(np.int16),
                               "horizon": np.concatenate(R["horizon"]).astype(np.int16), "drafter": "vllm"})
        rounds.insert(4, "root_entropy", pd.array([None] * len(rounds), dtype="Float32"))
        if any(x for x, _ in R["target"]):
            rounds["target"] = rep(R["target"])
    else:
        rounds = pd.DataFrame()
    if not any(P["target"]):
        del P["target"]
    prompts = pd.DataFrame({"run_id": base, **P, "drafter": "vllm"})
    for c in ("new_tokens", "rounds", "prompt_tokens"):
        prompts[c] = pd.array(prompts[c], dtype="Int64")
    notes.append(f"{path}: vllm responses, {len(prompts)} requests, {len(rounds)} rounds; no root_entropy")
    run = file_run(run_id=base, drafter={"kind": "vllm"},
                       source={"format": "vllm-responses", "file": str(path)})
    return FileResult(str(path), "vllm", rounds, prompts, notes, run)


def import_file(path, *, horizon=None, skip_bad=False, task=None, raw: bytes | None = None) -> FileResult:
    path = as_loc(path)
    raw = open_bytes(path) if raw is None else raw
    head = raw.lstrip()[:1]
    if head not in (b"{", b"["):
        return _prometheus(path, raw.decode("utf-8", "replace"), horizon, task)
    return _responses(path, read_json_lines(path, skip_bad, raw), horizon, task)
