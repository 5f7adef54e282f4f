"""Spec-Bench / FastChat ``model_answer`` JSONL (Spec-Bench, EAGLE, Medusa, Hydra and forks).

One JSON object per answered question: ``question_id``, ``category``, ``model_id`` and
``choices[0]`` with per-turn lists ``turns``, ``decoding_steps``, ``new_tokens``,
``wall_time`` (seconds, prefill included) and one flat ``accept_lengths`` over all turns
(tokens committed per verification step, bonus included: accepted = value - 1). The EAGLE
and Medusa repositories' own scripts write ``idxs`` (the loop index of each turn's last
step) instead of per-step lengths: those files give prompt rows only.

Rounds: one per ``accept_lengths`` entry, split into turns by ``decoding_steps``;
``prompt_id`` = ``question_id`` (both turns of a question are one cluster, ``turn`` an
extra column), ``round`` counts on across turns, ``position`` counts tokens committed by
the earlier rounds of the same turn. The horizon comes from :data:`METHODS` (the method in
``model_id``), or the ``horizon`` override. The last round of every turn is output-ending
(``ends_output``): it may have been cut by the token limit or a stop token, which the
format does not record, so it is stored as glance-log stores a round that ends the output,
``horizon = accepted`` (a run known to reach at least ``accepted``), with the drafter's
horizon kept in ``drafted_horizon``. ``vanilla`` files are the autoregressive arm
(``drafter = "ar"``, horizon 0) for the timing ledger, paired by question id.
"""
from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from glance_law.data.importers.common import (
    QUESTIONS,
    FileResult,
    file_run,
    horizon_for,
    ids_list,
    read_json_lines,
    run_base,
)
from glance_law.data.io import LogError

#: method in ``model_id`` -> deepest draft offset L (``"hf-heuristic"``: Hugging Face's
#: assisted-generation schedule, reconstructed per round; None: not known, pass a horizon).
METHODS: dict = {
    "vanilla": 0,            # autoregressive baseline
    "eagle": 5,              # EAGLE-1 static tree, depth 5
    "medusa": 4,             # Medusa, 4 heads
    "hydra": 4,              # Hydra heads
    "ssd": 3,                # CTC drafter
    "sps": "hf-heuristic",   # a small draft model, HF schedule: start 5, +2 after a full accept, else -1 (>= 1)
    "eagle2": None, "eagle3": None, "pld": None, "lookahead": None, "rest": None, "space": None,
    "recycling": None, "samd": None, "ctc": None, "clover": None, "kangaroo": None,
}
SPS_START = 5

_SUFFIX = re.compile(r"(?:-(?:float16|bfloat16|float32|fp16|bf16|fp32|half|int8|int4))?"
                     r"(?:-temp(?:erature)?-[0-9.]+)?$", re.I)


def parse_model_id(model_id: str) -> tuple[str, str | None, str]:
    """(target, method, drafter name) from a model_id like
    ``vicuna-7b-v1.3-sps-68m-float16-temp-0.0`` -> (``vicuna-7b-v1.3``, ``sps``, ``sps-68m``)."""
    core = _SUFFIX.sub("", str(model_id))
    toks = core.split("-")
    for i in range(len(toks) - 1, 0, -1):
        if toks[i].lower() in METHODS:
            return "-".join(toks[:i]), toks[i].lower(), "-".join(toks[i:]).lower()
    return core, None, toks[-1].lower() if toks else "unknown"


def sps_schedule(accepted: np.ndarray, start: int = SPS_START) -> tuple[np.ndarray, int]:
    """Hugging Face's heuristic draft lengths for one generate() call: the horizon of each
    round, and the index of the first round whose accepted count exceeds it (-1: none)."""
    h = start
    out = np.empty(accepted.size, dtype=np.int64)
    bad = -1
    for i, a in enumerate(accepted.tolist()):
        out[i] = h
        if a > h and bad < 0:
            bad = i
        h = h + 2 if a == h else max(1, h - 1)
    return out, bad


_QCACHE: dict = {}


def _questions(path: Path) -> dict:
    """question_id -> category from a question.jsonl beside the answers (Spec-Bench layout
    ``data/<bench>/question.jsonl`` above ``model_answer/``, or ``<bench>__question.jsonl``)."""
    cands = []
    stem = path.name.split("__")[0] if "__" in path.name else None
    for folder in (path.parent, path.parent.parent):
        for name in ("question.jsonl", "question.jsonl.gz"):
            cands.append(folder / name)
            if stem:
                cands.append(folder / f"{stem}__{name}")
    for c in cands:
        if c.is_file():
            key = (str(c.resolve()), c.stat().st_mtime_ns)
            if key in _QCACHE:
                return _QCACHE[key]
            try:
                lines = read_json_lines(c, skip_bad=True)
            except LogError:
                continue
            out = {str(r.get("question_id")): r.get("category") for _, r in lines.records
                   if isinstance(r, dict) and "question_id" in r}
            _QCACHE[key] = out
            return out
    return {}


def questions_file(path, lines) -> FileResult:
    """A question.jsonl: used for categories only (no rounds)."""
    return FileResult(str(path), QUESTIONS, None, None,
                      [f"{path}: a Spec-Bench question file ({len(lines.records)} questions); read for "
                       "categories only"])


def import_file(path, lines, *, horizon=None, task=None) -> FileResult:
    path = Path(path)
    notes: list[str] = [f"{path}: skipped corrupt line {i} ({what})" for i, what in lines.bad]
    recs = [(i, r) for i, r in lines.records if isinstance(r, dict) and isinstance(r.get("choices"), list)]
    other = len(lines.records) - len(recs)
    if other:
        notes.append(f"{path}: {other} record(s) without 'choices' ignored")
    if not recs:
        raise LogError(path, "no answer records (objects with 'choices')",
                       "pass the model_answer/*.jsonl files Spec-Bench writes")
    model_ids = Counter(str(r.get("model_id", "")) for _, r in recs)
    qcat = _questions(path)
    if qcat:
        asked = {str(r.get("question_id")) for _, r in recs}
        if len(asked & set(qcat)) < len(qcat):
            notes.append(f"{path}: answers cover {len(asked & set(qcat))} of the {len(qcat)} questions in the "
                         "question file beside it")
    if len(model_ids) > 1:
        raise LogError(path, f"mixes {len(model_ids)} model_id values ({ids_list(model_ids)})",
                       "split the file by model_id (one run per file)")
    model_id = next(iter(model_ids))
    target, method, drafter = parse_model_id(model_id)
    base = run_base(path)
    override = horizon_for(horizon, (path.name, base.split("/")[-1], base, model_id, f"{target}-{method}",
                                     method, "*"))
    spec = METHODS.get(method) if method else None
    if override is not None:
        spec = int(override)

    # --- per answer: turns and their values --------------------------------------
    seen: Counter = Counter()
    empty, mismatch, badval, multi, idx_only, nan_wall, tok_mismatch = [], [], [], 0, 0, 0, 0

    answers = []     # (run k, qid, task, [(values, new_tokens, wall)], ...)
    for lineno, r in recs:
        qid = str(r.get("question_id"))
        seen[qid] += 1
        k = seen[qid]
        ch = r["choices"]
        if len(ch) > 1:
            multi += 1
        c = ch[0] if ch and isinstance(ch[0], dict) else {}
        cat = r.get("category")
        if cat is None:
            cat = qcat.get(qid)
        tsk = str(cat) if cat is not None else (task or "unknown")
        nt = list(c.get("new_tokens") or [])
        wt = list(c.get("wall_time") or [])
        if "accept_lengths" not in c:
            idxs = c.get("idxs")
            if isinstance(idxs, list):
                idx_only += 1
                answers.append((k, qid, tsk, None, [int(x) + 1 for x in idxs], nt, wt, lineno))
                continue
            badval.append(qid)
            continue
        al = c.get("accept_lengths") or []
        ds = [int(x) for x in (c.get("decoding_steps") or [])]
        if not al:
            empty.append(qid)
            continue
        if sum(ds) != len(al):
            mismatch.append(qid)
            continue
        try:
            v = array("q", al)           # C conversion; refuses floats and strings
        except (TypeError, ValueError, OverflowError):
            badval.append(qid)
            continue
        if min(v) < 1:
            badval.append(qid)
            continue
        answers.append((k, qid, tsk, v, ds, nt, wt, lineno))

    if empty:
        notes.append(f"{path}: {len(empty)} answer(s) with empty accept_lengths (no decoding steps; the run "
                     f"failed on them) left out: question_id {ids_list(empty)}")
    if mismatch:
        notes.append(f"{path}: {len(mismatch)} answer(s) whose decoding_steps do not sum to the length of "
                     f"accept_lengths left out (turns cannot be split): question_id {ids_list(mismatch)}")
    if badval:
        notes.append(f"{path}: {len(badval)} answer(s) with unreadable or impossible accept_lengths (values "
                     f"must be integers >= 1) left out: question_id {ids_list(badval)}")
    if multi:
        notes.append(f"{path}: {multi} answer(s) hold several choices; only choices[0] is read")
    if not answers:
        raise LogError(path, f"no usable answers ({len(empty)} with empty accept_lengths, {len(mismatch)} with "
                             f"step counts that disagree, {len(badval)} unreadable)",
                       "nothing to import from this file; rerun the benchmark for it or leave it out")
    runs = max(seen.values())
    if runs > 1:
        sizes = Counter(a[0] for a in answers)
        notes.append(f"{path}: question ids repeat ({len(recs)} answers for {len(seen)} questions): split by "
                     f"order of appearance into {runs} runs ("
                     + ", ".join(f"{base}{'' if k == 1 else f'#run{k}'}: {sizes[k]}" for k in sorted(sizes))
                     + " answers)")

    # --- horizon ---------------------------------------------------------------------
    rounds_level = [a for a in answers if a[3] is not None]
    vmax = max((max(a[3]) for a in rounds_level), default=0)
    if rounds_level and spec is None:
        why = (f"the method '{method}' has no horizon in the method table" if method
               else f"no known method in model_id '{model_id}'")
        raise LogError(path, f"{why} (known: " + ", ".join(f"{m} {h}" for m, h in METHODS.items()
                                                             if h is not None) + ")",
                       f"pass the run's deepest draft offset: --horizon L (or horizon={{'{method or base}': L}})")
    if rounds_level and isinstance(spec, int) and vmax - 1 > spec:
        src = "--horizon" if override is not None else f"the method table ({method} {spec})"
        raise LogError(path, f"accept_lengths reach {vmax} (accepted {vmax - 1}), more than the horizon {spec} "
                             f"from {src}", "the data contradict the horizon: pass this run's deepest draft "
                       f"offset, e.g. --horizon {target}-{method}={vmax - 1} (or larger)")
    if spec == 0 and vmax > 1:
        raise LogError(path, f"an autoregressive (vanilla) run with accept_lengths up to {vmax}",
                       "the data contradict the method; check model_id, or pass --horizon L for this file")

    # --- rows (vectorised over the file) ---------------------------------------------------
    P = {k: [] for k in ("run_id", "prompt_id", "task", "new_tokens", "decode_ms", "rounds", "turns")}
    flat, lens, tturn, ans_of_turn, tok_want = array("q"), [], [], [], []
    for j, (k, qid, tsk, v, ds, nt, wt, _lineno) in enumerate(answers):
        run_id = base if k == 1 else f"{base}#run{k}"
        try:
            wsum = math.fsum(wt)
        except TypeError:                     # a null wall_time
            wsum = math.nan
        wall_ok = bool(wt) and wsum == wsum
        if wt and not wall_ok:
            nan_wall += 1
        P["run_id"].append(run_id)
        P["prompt_id"].append(qid)
        P["task"].append(tsk)
        P["new_tokens"].append(int(sum(nt)) if nt else None)
        P["decode_ms"].append(wsum * 1000.0 if wall_ok else None)
        P["rounds"].append(int(sum(ds)))
        P["turns"].append(len(ds))
        if v is None:
            continue
        flat.extend(v)
        for t, d in enumerate(ds):
            if d:
                lens.append(d)
                tturn.append(t)
                ans_of_turn.append(j)
                tok_want.append(int(nt[t]) if t < len(nt) else -1)
    n_total = int(sum(lens))
    sched_bad = []
    if n_total:
        v = np.frombuffer(flat, dtype=np.int64) if flat.itemsize == 8 else np.asarray(flat, dtype=np.int64)
        lens_a = np.asarray(lens, dtype=np.int64)
        tstart = np.concatenate([[0], np.cumsum(lens_a)[:-1]])
        turn_of = np.repeat(np.arange(lens_a.size), lens_a)
        acc = v - 1
        csum = np.cumsum(v)
        before = csum - v
        pos = before - before[tstart][turn_of]
        end = np.zeros(n_total, dtype=bool)
        end[tstart + lens_a - 1] = True
        sums = np.add.reduceat(v, tstart)
        want = np.asarray(tok_want)
        tok_mismatch = int(((want >= 0) & (sums != want)).sum())
        ans_a = np.asarray(ans_of_turn, dtype=np.int64)
        a_rounds = np.bincount(ans_a, weights=lens_a, minlength=len(answers)).astype(np.int64)
        a_start = np.concatenate([[0], np.cumsum(a_rounds)[:-1]])
        ans_of_round = ans_a[turn_of]
        rnd = np.arange(n_total) - a_start[ans_of_round]
        if spec == "hf-heuristic":
            hl = [0] * n_total
            al = acc.tolist()
            for i, (s0, d) in enumerate(zip(tstart.tolist(), lens)):
                h, bad = SPS_START, -1
                for x in range(s0, s0 + d):       # sps_schedule, inlined over the whole file
                    hl[x] = h
                    a = al[x]
                    if a > h and bad < 0:
                        bad = x - s0
                    h = h + 2 if a == h else (h - 1 if h > 1 else 1)
                if bad >= 0:
                    ans = answers[ans_of_turn[i]]
                    sched_bad.append((ans[1], tturn[i], bad, al[s0 + bad], hl[s0 + bad], ans[7]))
            hor = np.asarray(hl, dtype=np.int64)
        else:
            hor = np.full(n_total, int(spec), dtype=np.int64)
    if sched_bad:
        qid, t, i, a, h, lineno = sched_bad[0]
        raise LogError(path, f"the Hugging Face heuristic draft schedule (start {SPS_START}, +2 after a fully "
                             f"accepted draft, else -1, at least 1) is contradicted in {len(sched_bad)} turn(s) "
                             f"(first: question_id {qid} (line {lineno}), turn {t}, step {i}: accepted {a} > "
                             f"reconstructed draft length {h})",
                       "this run did not use that schedule; pass its draft length with --horizon L (or "
                       f"horizon={{'{base.split('/')[-1]}': L}})")
    if idx_only:
        notes.append(f"{path}: {idx_only} answer(s) carry per-turn idxs and no per-step accept_lengths (the "
                     "EAGLE/Medusa repositories' own format): prompt rows only (rounds = idx + 1 per turn)")
    if nan_wall:
        notes.append(f"{path}: {nan_wall} answer(s) with a NaN wall_time: decode_ms left null")
    if tok_mismatch:
        notes.append(f"{path}: {tok_mismatch} turn(s) whose new_tokens differ from the sum of their accept_lengths "
                     "(rounds kept as logged)")

    def cat(values, idx):
        """A dictionary-encoded string column of values[idx] (values: per answer)."""
        index: dict = {}
        codes = np.fromiter((index.setdefault(x, len(index)) for x in values), dtype=np.int32, count=len(values))
        return pa.DictionaryArray.from_arrays(pa.array(codes[idx]), pa.array(list(index), pa.string()))

    def const(value, n):
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value], pa.string()))

    drafter_name = "ar" if spec == 0 else drafter
    if n_total:
        rounds = pa.table({
            "run_id": cat(P["run_id"], ans_of_round), "task": cat(P["task"], ans_of_round),
            "prompt_id": cat(P["prompt_id"], ans_of_round), "round": rnd.astype(np.int32),
            "root_entropy": pa.nulls(n_total, pa.float32()),            # not measured by this format
            "accepted": acc.astype(np.int16), "horizon": np.where(end, acc, hor).astype(np.int16),
            "drafter": const(drafter_name, n_total),
            "position": pos.astype(np.int32), "turn": np.asarray(tturn, dtype=np.int16)[turn_of],
            "ends_output": end, "drafted_horizon": hor.astype(np.int16),
        })
    else:
        rounds = None
    nall = np.arange(len(P["run_id"]))
    prompts = pa.table({
        "run_id": cat(P["run_id"], nall), "prompt_id": cat(P["prompt_id"], nall), "task": cat(P["task"], nall),
        "drafter": const(drafter_name, nall.size), "new_tokens": pa.array(P["new_tokens"], pa.int32()),
        "decode_ms": pa.array(P["decode_ms"], pa.float32()), "rounds": pa.array(P["rounds"], pa.int32()),
        "turns": pa.array(P["turns"], pa.int16())})
    if spec == "hf-heuristic" and n_total:
        notes.append(f"{path}: draft lengths reconstructed from Hugging Face's heuristic schedule (start "
                     f"{SPS_START} per turn, +2 after a fully accepted draft, else -1, at least 1); the data agree")
    how = ("autoregressive baseline (horizon 0)" if spec == 0 else
           "HF heuristic schedule" if spec == "hf-heuristic" else
           f"horizon {spec} from " + ("--horizon" if override is not None else f"the method table ({method})"))
    if n_total:
        notes.append(f"{path}: spec-bench, {len(prompts)} answers, {n_total} rounds, drafter '{drafter_name}', "
                     f"{how}; no root_entropy in this format; the last round of each turn is marked "
                     "output-ending (horizon = accepted)")
    run = file_run(run_id=base, target=target,
                       drafter={"kind": method or "unknown", "name": drafter_name,
                                "horizon": spec if not isinstance(spec, str) else spec},
                       source={"format": "spec-bench", "file": str(path), "model_id": model_id})
    return FileResult(str(path), "spec-bench", rounds, prompts, notes, run)
