"""vLLM: Prometheus scrapes of the spec-decode counters, and per-request acceptance in the
OpenAI-compatible server's responses (vLLM 0.33.0).

**(a) Prometheus text format** (``GET /metrics``; vLLM V1, ``vllm/v1/spec_decode/metrics.py``,
class ``SpecDecodingProm``): the counters ``vllm:spec_decode_num_drafts``,
``vllm:spec_decode_num_draft_tokens``, ``vllm:spec_decode_num_accepted_tokens`` and
``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}`` (exposed with the ``_total``
suffix of prometheus_client counters; labels ``model_name``, ``engine``). Counters are
cumulative, so consecutive scrapes give intervals (the first scrape: since the server
started). A file may hold several scrapes (a new one starts when a series repeats), and the
scrape files of one :func:`glance_law.data.importers.import_logs` call are read in the order
given as **one** run (a :class:`ScrapeChain` carries the counters from file to file); a counter
that goes backwards (a restart, or files out of order) is refused. Per interval and model,
with K = the number of positions (``num_speculative_tokens``), the drafts that accepted exactly
j tokens are ``pos[j-1] - pos[j]`` (``pos[-1]`` = drafts, ``pos[K]`` = 0): the run-length
distribution, exactly. The importer expands those counts into rounds (``horizon = K``,
``root_entropy`` null, ``aggregate = True``), one pseudo-prompt per scrape interval
(``prompt_id = interval-<i>``, numbered across the files). There are no prompts behind them:
no prompt clustering is possible (said in a note).

**(b) Responses** with ``metrics.speculative_decoding`` (``--per-request-spec-decode-metrics
summary|detailed``; ``docs/features/speculative_decoding/acceptance_metrics.md``):
``num_spec_tokens`` (K), ``num_spec_steps``, ``num_draft_tokens``,
``num_accepted_draft_tokens``, ``acceptance_histogram`` (index j: steps that accepted exactly
j draft tokens), ``acceptance_histogram_by_draft_length`` ({k: histogram of the steps that
drafted k tokens}) and, with ``detailed``, ``per_step_accepted`` and ``per_step_drafted`` (each
step's accepted and proposed counts, in order). Rounds from the per-step lists in order, each at
its own drafted horizon; else from the per-draft-length histograms (each at its k), else from
the histogram at K (order unknown, noted). The timing fields of ``metrics``
(``docs/features/per_request_metrics.md``): ``generation_time_ms`` (first to last output
token) is the prompt row's ``decode_ms``, ``time_to_first_token_ms`` its ``prefill_ms``. One
prompt per response (``prompt_id`` from ``prompt_id``/``question_id``/``custom_id``, else the
response ``id``); prompt rows from ``usage``. Streamed captures (``data: {...}`` lines): the
chunk that carries ``metrics`` (the final usage chunk) is the response.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from glance_law.data import inputs
from glance_law.data.importers.common import (
    FileResult,
    as_loc,
    file_run,
    horizon_for,
    is_prometheus,
    is_sse,
    open_bytes,
    read_json_lines,
    run_base,
    split_prompts_per_task,
)
from glance_law.data.tables import LogError
from glance_law.data.tasks import NO_TASK

# names with the "vllm:" prefix (vLLM's own exposition) or "vllm_" (exporters that turn ":" into "_"),
# with or without prometheus_client's "_total" suffix
_SAMPLE = re.compile(r'^vllm[:_](spec_decode_[a-z_]+?)(_total)?(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)(\s+-?\d+)?\s*$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_NAMES = {"spec_decode_num_drafts": "drafts", "spec_decode_num_draft_tokens": "draft_tokens",
          "spec_decode_num_accepted_tokens": "accepted", "spec_decode_num_accepted_tokens_per_pos": "pos"}


def parse_scrapes(text: str, path=None, number=None) -> list[dict]:
    """Scrapes of one text: each {model: {"drafts": x, "draft_tokens": x, "accepted": x, "pos": {i: x}}},
    summed over engines. A count that is not a finite number >= 0, or a position outside
    0..MAX_POSITION - 1, is refused (``path``, and the line: ``number(i)`` maps the i-th line of
    ``text`` to the file's)."""
    scrapes: list[dict] = []
    cur: dict = {}
    seen: set = set()
    for i, line in enumerate(text.split("\n"), 1):
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        name, labels = m.group(1), m.group(3) or ""
        what = _NAMES.get(name)
        if what is None:
            continue
        lineno = i if number is None else number(i)
        value = inputs.as_float(m.group(4), path, lineno, "vllm:" + name, lo=0.0,
                                fix="scrape GET /metrics of the server as it is (counters are finite, >= 0)")
        lab = dict(_LABEL.findall(labels))
        series = (name, tuple(sorted(lab.items())))
        if series in seen:
            scrapes.append(cur)
            cur, seen = {}, set()
        seen.add(series)
        model = lab.get("model_name", "")
        d = cur.setdefault(model, {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "pos": {}})
        if what == "pos":
            j = inputs.as_int(lab.get("position", "0"), path, lineno, "position", 0, inputs.MAX_POSITION - 1,
                              fix="scrape GET /metrics of the server as it is (positions are draft offsets)")
            d["pos"][j] = d["pos"].get(j, 0.0) + value
        else:
            d[what] += value
    if cur:
        scrapes.append(cur)
    return scrapes


@dataclass
class ScrapeChain:
    """The counters carried from one scrape file to the next within one import: the files of
    a call are one run, read in the order given (``base``: the run id, from the first file;
    ``prev``: per model the last counters; ``intervals``: intervals numbered so far)."""

    base: str | None = None
    prev: dict = field(default_factory=dict)
    intervals: int = 0
    files: list = field(default_factory=list)

    def key(self) -> tuple:
        """A hashable picture of the state (for the import cache)."""
        return (self.base, self.intervals, tuple(self.files),
                tuple(sorted((m, tuple(c.tolist()), cum) for m, (c, cum) in self.prev.items())))

    def copy(self) -> ScrapeChain:
        return ScrapeChain(self.base, dict(self.prev), self.intervals, list(self.files))

    def restore(self, other: ScrapeChain) -> None:
        self.base, self.prev, self.intervals, self.files = other.base, dict(other.prev), other.intervals, \
            list(other.files)


def _interval(path, where: str, model: str, d: dict, p, K: int):
    """The counts of one scrape interval: (drafts per accepted length 0..K, (draft tokens, accepted tokens))."""
    cur = np.array([d["drafts"]] + [d["pos"].get(j, 0.0) for j in range(K)] + [0.0])
    cum = (d["draft_tokens"], d["accepted"])
    if p is None:
        delta, dtok = cur, cum
    elif p[0].size != cur.size or (cur < p[0]).any() or cum[0] < p[1][0] or cum[1] < p[1][1]:
        raise LogError(path, f"{where} ({model or 'model'}): the counters go backwards from the scrape before "
                             "(a server restart, another server, or files passed out of order)",
                       "pass the scrapes of one server run, in the order they were taken (one command per run)")
    else:
        delta, dtok = cur - p[0], (cum[0] - p[1][0], cum[1] - p[1][1])
    inputs.check_expansion(delta[0], path, f"{where} ({model or 'model'})")
    n = delta[:-1] - delta[1:]
    if (n < -1e-9).any() or abs(delta[1:-1].sum() - dtok[1]) > 0.5:
        raise LogError(path, f"{where} ({model or 'model'}): the per-position counts are not consistent (a later "
                             "position counts more drafts than an earlier one, or they do not add up to the accepted "
                             "tokens)", "scrape the counters of one server, whole, in order")
    return np.rint(n).astype(np.int64), dtok, (cur, cum)


def _prometheus(path: Path, text: str, horizon, task, chain: ScrapeChain | None, number=None) -> FileResult:
    chain = ScrapeChain() if chain is None else chain
    first = chain.base is None
    base = chain.base = run_base(path) if first else chain.base
    scrapes = parse_scrapes(text, path, number)
    if not scrapes:
        raise LogError(path, "no vllm:spec_decode_* samples", "scrape GET /metrics of a vLLM server with a "
                       "speculative config")
    cont = "" if first else f", continuing the run of {', '.join(chain.files)} (files are read in the order given)"
    notes = [f"{path}: vllm Prometheus counters, {len(scrapes)} scrape(s){cont}: an aggregate with no prompts and "
             "no entropy; rounds are expanded from the per-position counts, one pseudo-prompt per scrape interval "
             "(prompt_id interval-<i>), so no prompt clustering is possible (each interval counts as one cluster)"]
    parts = []                   # (run, interval id, model, accepted lengths, K)
    total = 0
    for i, sc in enumerate(scrapes):
        where = f"scrape {i + 1}"
        chain.intervals += 1
        for model, d in sc.items():
            K = (max(d["pos"]) + 1) if d["pos"] else 0
            if K == 0:
                raise LogError(path, f"{where}: no vllm:spec_decode_num_accepted_tokens_per_pos series",
                               "the per-position counter is needed for the run-length distribution")
            over = horizon_for(horizon, (model, path.name, base, "vllm", "*"))
            if over is not None and over != K:
                notes.append(f"{path}: --horizon {over} ignored: the counters have {K} positions")
            n, dtok, chain.prev[model] = _interval(path, where, model, d, chain.prev.get(model), K)
            if n.sum() and dtok[0] < K * n.sum() - 0.5:
                notes.append(f"{path}: scrape interval {chain.intervals}: {int(K * n.sum() - dtok[0])} draft token(s) "
                             f"fewer than {K} per draft: some drafts were shorter, and the counters do not say which "
                             f"(their rounds are read at horizon {K}; per-request metrics with per_step_drafted do)")
            total += int(n.sum())
            inputs.check_expansion(total, path, f"{where} ({model or 'model'})")
            acc = np.repeat(np.arange(K + 1), n)
            if acc.size:
                parts.append((f"{base}:{model}" if model else base, f"interval-{chain.intervals}", model, acc, K))
    chain.files.append(path.name)
    if not parts:
        raise LogError(path, "the counters hold no drafts" + ("" if first else " since the file before"),
                       "scrape after the server has decoded")

    def rep(vals):
        return np.concatenate([np.repeat(np.array([v], dtype=object), p[3].size) for v, p in zip(vals, parts)])
    acc = np.concatenate([p[3] for p in parts])
    R = pd.DataFrame({"run_id": rep([p[0] for p in parts]), "task": task or "all",
                      "prompt_id": rep([p[1] for p in parts]),
                      "round": np.concatenate([np.arange(p[3].size) for p in parts]).astype(np.int32),
                      "accepted": acc.astype(np.int16),
                      "horizon": np.concatenate([np.full(p[3].size, p[4]) for p in parts]).astype(np.int16),
                      "drafter": "vllm", "aggregate": True, "round_order": "pooled"})
    if any(p[2] for p in parts):           # the model_name label: the served (target) model
        R["target"] = rep([p[2] or None for p in parts])
    R.insert(4, "root_entropy", pd.array([None] * len(R), dtype="Float32"))
    notes.append(f"{path}: {len(R)} rounds from the counters (round order within an interval is not known: sorted "
                 "by accepted length)")
    run = file_run(run_id=base, drafter={"kind": "vllm"}, source={"format": "vllm-prometheus",
                                                                  "file": str(path)})
    return FileResult(str(path), "vllm", R, pd.DataFrame(), notes, run)


def _steps(sd: dict, K, path, lineno):
    """(accepted, horizon, how) of one response's steps: how is "ordered", "by-length", "histogram" or None."""
    acc_l, dr_l = sd.get("per_step_accepted"), sd.get("per_step_drafted")
    if isinstance(acc_l, list):
        acc = inputs.as_int_list(acc_l, path, lineno, "per_step_accepted", 0, inputs.MAX_POSITION)
        if isinstance(dr_l, list):
            hor = inputs.as_int_list(dr_l, path, lineno, "per_step_drafted", 0, inputs.MAX_POSITION)
            if hor.size != acc.size:
                raise LogError(path, f"line {lineno}: per_step_drafted lists {hor.size} steps, per_step_accepted "
                                     f"{acc.size}", "log the response as the server sent it")
        else:
            hor = np.full(acc.size, -1 if K is None else K, dtype=np.int64)
        return acc, hor, "ordered"
    by_len = sd.get("acceptance_histogram_by_draft_length")
    if isinstance(by_len, dict) and by_len:
        field = "acceptance_histogram_by_draft_length"
        keyed = [(inputs.as_int(k, path, lineno, f"{field} key", 0, inputs.MAX_POSITION), h) for k, h in by_len.items()]
        hists = [(k, inputs.as_histogram(h, path, lineno, f"{field}[{k}]")) for k, h in sorted(keyed, key=lambda kv: kv[0])]
        inputs.check_expansion(sum(int(h.sum()) for _, h in hists), path, f"line {lineno}: {field}")
        acc = [np.repeat(np.arange(h.size), h) for _, h in hists]
        hor = [np.full(int(h.sum()), k) for k, h in hists]
        return np.concatenate(acc), np.concatenate(hor), "by-length"
    hist = sd.get("acceptance_histogram")
    if isinstance(hist, (list, dict)):
        h = inputs.as_histogram(hist, path, lineno, "acceptance_histogram")
        acc = np.repeat(np.arange(h.size), h)
        return acc, np.full(acc.size, -1 if K is None else K, dtype=np.int64), "histogram"
    return None, None, None


def _count(d: dict, key: str, path, lineno):
    """An optional count field (None when absent), an int >= 0 below 2**62, else refused in one line."""
    v = d.get(key)
    return None if v is None else inputs.as_int(v, path, lineno, key, 0, (1 << 62))


def _ms(metrics: dict, key: str, path, lineno):
    v = metrics.get(key)
    return None if v is None else inputs.as_float(v, path, lineno, key, lo=0.0)


def _responses(path: Path, lines, horizon, task) -> FileResult:
    base = run_base(path)
    notes = [f"{path}: skipped corrupt line {i} ({what})" for i, what in lines.bad]
    R = {k: [] for k in ("prompt_id", "task", "accepted", "horizon", "target", "round_order")}
    P = {k: [] for k in ("prompt_id", "task", "new_tokens", "rounds", "prompt_tokens", "prefill_ms", "decode_ms",
                         "target")}
    how_n = {"ordered": 0, "by-length": 0, "histogram": 0}
    short = skipped = expanded = 0
    for lineno, rec in lines.records:
        if isinstance(rec, dict) and isinstance(rec.get("data"), dict):
            rec = rec["data"]
        metrics = (rec or {}).get("metrics") if isinstance(rec, dict) else None
        sd = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if not isinstance(sd, dict):
            skipped += 1
            continue
        pid = next((str(rec[k]) for k in ("prompt_id", "question_id", "custom_id", "id") if rec.get(k) is not None),
                   f"line-{lineno}")
        t = str(rec.get("task") or task or NO_TASK)
        tgt = None if rec.get("model") in (None, "") else str(rec["model"])   # the OpenAI response's served model
        K = sd.get("num_spec_tokens")
        K = horizon_for(horizon, (path.name, base, "vllm", "*")) if K is None else \
            inputs.as_int(K, path, lineno, "num_spec_tokens", 0, inputs.MAX_POSITION)
        acc, hor, how = _steps(sd, K, path, lineno)
        expanded += 0 if acc is None else acc.size
        inputs.check_expansion(expanded, path, f"line {lineno}")
        if acc is not None and (hor < 0).any():
            raise LogError(path, f"line {lineno}: num_spec_tokens is missing", "pass --horizon L")
        if acc is not None and acc.size:
            if (acc < 0).any() or (acc > hor).any() or (K is not None and hor.max() > K):
                raise LogError(path, f"line {lineno}: accepted counts outside 0..the drafted length (at most "
                                     f"num_spec_tokens = {K})", "check the response; num_spec_tokens is the deepest "
                                                                "draft offset")
            how_n[how] += 1
            n_steps = _count(sd, "num_spec_steps", path, lineno)
            if n_steps is not None and n_steps != acc.size:
                notes.append(f"{path}: line {lineno}: num_spec_steps {n_steps} differs from the {acc.size} steps listed")
            if how == "histogram" and sd.get("num_draft_tokens") is not None and \
                    _count(sd, "num_draft_tokens", path, lineno) < K * acc.size:
                short += 1
            R["prompt_id"].append((pid, acc.size))
            R["task"].append((t, acc.size))
            R["target"].append((tgt, acc.size))
            R["round_order"].append(("known" if how == "ordered" else "unknown", acc.size))
            R["accepted"].append(acc)
            R["horizon"].append(hor)
        usage = rec.get("usage") if isinstance(rec.get("usage"), dict) else {}
        P["prompt_id"].append(pid)
        P["task"].append(t)
        P["target"].append(tgt)
        P["new_tokens"].append(_count(usage, "completion_tokens", path, lineno))
        P["prompt_tokens"].append(_count(usage, "prompt_tokens", path, lineno))
        steps = _count(sd, "num_spec_steps", path, lineno)
        P["rounds"].append(steps if steps is not None else None if acc is None else int(acc.size))
        P["prefill_ms"].append(_ms(metrics, "time_to_first_token_ms", path, lineno))
        P["decode_ms"].append(_ms(metrics, "generation_time_ms", path, lineno))
    if not P["prompt_id"]:
        raise LogError(path, "no response carries metrics.speculative_decoding",
                       "start vLLM with --per-request-spec-decode-metrics summary (or detailed); when streaming, "
                       "set stream_options.include_usage so that the final chunk carries the metrics")
    split_prompts_per_task(P, R, path, notes)      # ids that restart per task: (task, prompt)
    notes += _response_notes(path, skipped, how_n, short, P)
    return _response_frames(path, base, R, P, notes)


def _response_notes(path, skipped: int, how_n: dict, short: int, P: dict) -> list:
    notes = []
    if skipped:
        notes.append(f"{path}: {skipped} record(s) without metrics.speculative_decoding ignored (in a streamed "
                     "capture: the content chunks)")
    if how_n["by-length"]:
        notes.append(f"{path}: {how_n['by-length']} response(s) give acceptance_histogram_by_draft_length: each step "
                     "at the length it drafted, their order unknown (sorted by draft length, then accepted length); "
                     "vLLM's --per-request-spec-decode-metrics detailed keeps the order")
    if how_n["histogram"]:
        notes.append(f"{path}: {how_n['histogram']} response(s) give only the acceptance histogram: rounds expanded "
                     "from it at horizon num_spec_tokens, their order unknown (sorted by accepted length); "
                     "vLLM's --per-request-spec-decode-metrics detailed keeps the order and each step's drafted length")
    if short:
        notes.append(f"{path}: {short} of them drafted fewer than num_spec_tokens tokens on some steps "
                     "(num_draft_tokens < num_spec_tokens x num_spec_steps): the histogram does not say which, so "
                     "a short step that accepted all it drafted is read as a rejection at num_spec_tokens")
    if how_n["ordered"]:
        notes.append(f"{path}: {how_n['ordered']} response(s) with per_step_accepted: rounds in order, each at its "
                     "per_step_drafted length (num_spec_tokens where that list is absent)")
    timed = sum(x is not None for x in P["decode_ms"])
    notes.append(f"{path}: decode_ms is metrics.generation_time_ms (first to last output token) for {timed} of "
                 f"{len(P['decode_ms'])} request(s); prefill_ms is time_to_first_token_ms (from scheduling, queueing "
                 "excluded)" if timed else f"{path}: no metrics.generation_time_ms (start vLLM with "
                 "--enable-per-request-metrics for the timing ledger)")
    return notes


def _response_frames(path, base: str, R: dict, P: dict, notes: list) -> FileResult:
    def rep(parts):
        return np.concatenate([np.repeat(np.array([x], dtype=object), k) for x, k in parts]) if parts else []
    if R["accepted"]:
        acc = np.concatenate(R["accepted"])
        rounds = pd.DataFrame({"run_id": base, "task": rep(R["task"]), "prompt_id": rep(R["prompt_id"]),
                               "round": np.concatenate([np.arange(k) for _, k in R["prompt_id"]]).astype(np.int32),
                               "accepted": acc.astype(np.int16),
                               "horizon": np.concatenate(R["horizon"]).astype(np.int16), "drafter": "vllm"})
        rounds.insert(4, "root_entropy", pd.array([None] * len(rounds), dtype="Float32"))
        if any(x for x, _ in R["target"]):
            rounds["target"] = rep(R["target"])
        rounds["round_order"] = rep(R["round_order"])     # histograms: order unknown (docs/schema.md)
    else:
        rounds = pd.DataFrame()
    if not any(P["target"]):
        del P["target"]
    for c in ("prefill_ms", "decode_ms"):
        if all(x is None for x in P[c]):
            del P[c]
    prompts = pd.DataFrame({"run_id": base, **P, "drafter": "vllm"})
    for c in ("new_tokens", "rounds", "prompt_tokens"):
        prompts[c] = pd.array(prompts[c], dtype="Int64")
    for c in ("prefill_ms", "decode_ms"):
        if c in prompts:
            prompts[c] = pd.array(prompts[c], dtype="Float64")
    notes.append(f"{path}: vllm responses, {len(prompts)} requests, {len(rounds)} rounds; no root_entropy")
    run = file_run(run_id=base, drafter={"kind": "vllm"},
                   source={"format": "vllm-responses", "file": str(path)})
    return FileResult(str(path), "vllm", rounds, prompts, notes, run)


def import_file(path, *, horizon=None, skip_bad=False, task=None, raw: bytes | None = None,
                chain: ScrapeChain | None = None) -> FileResult:
    """One vLLM file: a Prometheus scrape (continuing ``chain``, the scrapes read before it in
    the same import) or a file of responses (JSON lines, an array, or a streamed capture)."""
    path = as_loc(path)
    raw = open_bytes(path) if raw is None else raw
    if is_prometheus(raw) or not (raw.lstrip()[:1] in (b"{", b"[") or is_sse(raw)):
        return _prometheus(path, raw.decode("utf-8", "replace"), horizon, task, chain,
                           raw.lineno if isinstance(raw, inputs.Text) else None)
    return _responses(path, read_json_lines(path, skip_bad, raw), horizon, task)
