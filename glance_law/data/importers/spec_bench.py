"""Spec-Bench / FastChat ``model_answer`` JSONL (Spec-Bench, EAGLE, Medusa, Hydra and forks).

One JSON object per answered question: ``question_id``, ``category``, ``model_id`` and
``choices[0]`` with per-turn lists ``turns``, ``decoding_steps``, ``new_tokens``,
``wall_time`` (seconds, prefill included) and one flat ``accept_lengths`` over all turns
(tokens committed per verification step, bonus included: accepted = value - 1). The EAGLE
and Medusa repositories' own scripts write ``idxs`` (the loop index of each turn's last
step) instead of per-step lengths: those files give prompt rows only. Spec-Bench's earlier
scripts write ``idxs`` beside the lengths (turns split by idx + 1), or the key
``"accept_lengths:"``. A turn whose text is ``"ERROR"`` repeats the previous turn's numbers
(eval.py's stale variables) and is left out; every choice of an answer is imported (choice
i >= 1 as run ``<run>#choice<i>``).

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

Prompt rows: one per answer (turns summed), with the turns themselves as the lists
``turn_tokens`` (new_tokens), ``turn_rounds`` (steps) and ``turn_ms`` (1000 x wall_time), null
where a list does not align with the turns or holds a value the column cannot hold: what the
per-turn analyses read (:mod:`glance_law.evidence.turns`) when no per-step lengths are logged.
"""
from __future__ import annotations

import math
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate, chain, repeat
from operator import itemgetter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from glance_law.data.importers.common import (
    QUESTIONS,
    FileResult,
    as_loc,
    file_run,
    horizon_for,
    ids_list,
    read_json_lines,
    realkey,
    run_base,
)
from glance_law.data.tables import LogError
from glance_law.data.tasks import NO_TASK

#: method in ``model_id`` -> deepest draft offset L (``"hf-heuristic"``: Hugging Face's
#: assisted-generation schedule, reconstructed per round; None: no fixed depth known, pass a
#: horizon). Sources (file @ commit) in docs/your-logs.md; :data:`HINTS` says why each None is None.
METHODS: dict = {
    "vanilla": 0,            # autoregressive baseline
    "baseline": 0,           # the same arm in EAGLE's gen_baseline_answer_*.py (model_id default "...-baseline")
    "eagle": 5,              # EAGLE-1 static tree mc_sim_7b_63 (Spec-Bench model/eagle/choices.py): depth 5
    "eagle2": 6,             # EAGLE-2 dynamic tree, Spec-Bench default --depth 5: at most depth + 1 = 6 draft tokens
    "eagle3": 6,             # EAGLE-3, same drafting loop and default --depth 5: at most 6
    "medusa": 4,             # Medusa static tree mc_sim_7b_63 (model/medusa/medusa_choices.py): depth 4
    "hydra": 4,              # Hydra static tree mc_sim_7b_63 (model/hydra/hydra_choices.py): depth 4
    "recycling": 6,          # Token Recycling static tree template "2.2.2" (model/recycling/tree_template_.py): depth 6
    "ssd": 3,                # CTC drafter (delsiiin/VASE)
    "sps": "hf-heuristic",   # a small draft model, HF schedule: start 5, +2 after a full accept, else -1 (>= 1)
    "space": 5,              # SPACE (Spec-Bench inference_space.py space_forward: MASK_NUM=5, a chain of 5 candidates)
    "pld": None, "lookahead": None, "lade": None, "rest": None, "samd": None, "ctc": None,
    "clover": None, "kangaroo": None, "swift": None,
}
#: Why a method has no fixed horizon, and what to pass instead (in its refusal).
HINTS: dict = {
    "pld": "prompt lookup drafts up to 10 tokens per round (Spec-Bench inference_pld.py: "
           "draft_num_candidate_tokens=10), fewer when the matched continuation is shorter and one placeholder "
           "when nothing matches; the per-round length is not logged (--horizon pld=10 reads every round at that cap)",
    "lookahead": "lookahead decoding verifies n-grams of LEVEL - 1 tokens (LEVEL in the model_id, e.g. "
                 "lade-level-5); rounds with no candidate draft nothing, and the per-round length is not logged",
    "rest": "REST drafts a trie of retrieved continuations whose depth varies per round and is not logged",
    "swift": "SWIFT (self-speculative layer skipping) stops drafting early on low confidence: its draft length "
             "varies per round and is not logged",
    "samd": "SAM-Decoding switches between suffix-automaton and tree drafts of varying depth per round",
    "eagle2": "", "eagle3": "",
}
HINTS["lade"] = HINTS["lookahead"]
SPS_START = 5

#: The first part of the model id the EAGLE repository's answer scripts default to
#: (``--model-id ess-vicuna-70b-fp16`` in eagle/evaluation/gen_ea_answer_*.py and
#: gen_baseline_answer_*.py @ cb7e084; "ess" is EAGLE's working name): read as the eagle method
#: (or the baseline the id names after its dtype), the rest as the target.
EAGLE_PREFIX = "ess"
#: Method names that EAGLE's answer files carry after the dtype, as the repository's
#: eagle/evaluation/speed.py @ 2320d52 names the pair it compares:
#: ``llama-2-chat-70b-fp16-ea-in-temperature-0.0`` (EAGLE) and ``...-fp16-base-in-...`` (its baseline).
#: Read only after the dtype (a target may be named ``...-base`` before it).
AFTER_DTYPE = {"ea": "eagle", "base": "baseline"}
_LEVEL = re.compile(r"(?:^|-)level-(\d+)(?:-|$)")
_RUN_AFTER = re.compile(r"v\d+(\.\d+)*|\d+(\.\d+)?[bBmM]")  # a version (v1.3) or a size (13b, 68m)
_DTYPES = {"float16", "bfloat16", "float32", "float64", "fp16", "bf16", "fp32", "half", "int8", "int4", "fp8"}


def parse_model_id(model_id: str) -> tuple[str, str | None, str]:
    """(target, method, drafter name) from a model_id like
    ``vicuna-7b-v1.3-sps-68m-float16-temp-0.0`` -> (``vicuna-7b-v1.3``, ``sps``, ``sps-68m``).
    Everything from the first dtype or ``temp``/``temperature`` token on is settings
    (Medusa's own ``...-temperature-0.0-posterior_threshold-0.09...`` too); a method may also
    lead (``medusa-vicuna-7b-v1.3``, the Medusa repository's naming)."""
    toks = str(model_id).split("-")
    cut = next((j for j, t in enumerate(toks) if j and (t.lower() in _DTYPES or t.lower() in ("temp", "temperature"))),
               len(toks))
    core = toks[:cut]
    # a repeat-run index after the target's version or size (the Medusa repository's
    # ``medusa-vicuna-13b-v1.3-1-temperature-...``) is not part of the target's name
    # (``llama-2`` keeps its 2: a number after a plain word is a name)
    if len(core) >= 3 and core[-1].isdigit() and _RUN_AFTER.fullmatch(core[-2]):
        core = core[:-1]
    for i in range(len(core) - 1, -1, -1):
        if core[i].lower() in METHODS:
            if i == 0:
                return "-".join(core[1:]) or core[0], core[0].lower(), core[0].lower()
            return "-".join(core[:i]), core[i].lower(), "-".join(core[i:]).lower()
    # no method before the settings: EAGLE's baseline ids put it after the dtype
    # (``ess-vicuna-70b-fp16-baseline-temperature-0.0``)
    later = next((AFTER_DTYPE.get(t.lower(), t.lower()) for t in toks[cut:]
                  if t.lower() in METHODS or t.lower() in AFTER_DTYPE), None)
    ess = len(core) > 1 and core[0].lower() == EAGLE_PREFIX   # the EAGLE scripts' default id: ess-<target>
    name = "-".join(core[1:] if ess else core)
    if later is not None:
        return name, later, later
    if ess:
        return name, "eagle", "eagle"
    return name, None, core[-1].lower() if core else "unknown"


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
    path = as_loc(path)
    cands = []
    stem = path.name.split("__")[0] if "__" in path.name else None
    for folder in (path.parent, path.parent.parent):
        for name in ("question.jsonl", "question.jsonl.gz"):
            cands.append(folder / name)
            if stem:
                cands.append(folder / f"{stem}__{name}")
    for c in cands:
        if c.is_file():
            key = realkey(c)
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
    """A question.jsonl: used for categories only (no rounds). Its question_id -> category map is
    kept in the result's ``run["categories"]``: the answers of the same call that carry no category
    take theirs from it (:func:`glance_law.data.importers.combine`)."""
    cats = {str(r.get("question_id")): str(r["category"]) for _, r in lines.records
            if isinstance(r, dict) and "question_id" in r and r.get("category") not in (None, "")}
    return FileResult(str(path), QUESTIONS, None, None,
                      [f"{path}: a Spec-Bench question file ({len(lines.records)} questions); read for "
                       "categories only"], {"categories": cats})


_INT = {int}


def _ints(x) -> list:
    """A list of integers from a scalar or a list (a scalar is one turn); integral floats pass.
    A list of plain ints comes back as itself (not copied: callers do not modify it)."""
    if x is None:
        return []
    if not isinstance(x, list):
        x = [x]
    if set(map(type, x)) <= _INT:         # every element a plain int (as JSON gives): nothing to check
        return x
    out = []
    for v in x:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v:
            raise ValueError(f"{v!r:.40} is not an integer")
        out.append(int(v))
    return out


def _counts(x) -> list:
    """:func:`_ints` of per-turn counts (new_tokens, decoding_steps) that fit an int64 column."""
    out = _ints(x)
    if out and not -(1 << 62) < min(out) <= max(out) < (1 << 62):
        raise ValueError(f"{max(out, key=abs)} is beyond any count")
    return out


def _nums(x) -> list:
    """Per-turn numbers (wall_time): a scalar is one turn; None elements stay None."""
    if x is None:
        return []
    return list(x) if isinstance(x, list) else [x]


def split_turns(al, ds: list, nt: list, n_turns: int, idxs: list | None = None):
    """The per-step values of one answer and their split into turns: (values, lengths per
    turn, how) or None when no split is consistent. ``al``: a flat list over all turns, or one
    list per turn; ``ds``: decoding_steps; ``nt``: new_tokens; ``n_turns``: the turns in the
    answer; ``idxs``: the per-turn loop index of the last step (Spec-Bench before April 2024
    wrote it instead of decoding_steps). ``how``: ``steps`` (decoding_steps, as Spec-Bench
    writes them), ``nested`` (one list per turn), ``idxs`` (idx + 1 steps per turn),
    ``single`` (one turn: the whole list), ``new_tokens`` (cut where the running sum meets
    each turn's new_tokens), ``steps+1`` (every turn one step more than decoding_steps says:
    Token Recycling's counter skips the final step)."""
    if al and isinstance(al[0], list) and all(isinstance(t, list) for t in al):
        vals = [v for t in al for v in _ints(t)]
        return vals, [len(t) for t in al], "nested"
    vals = _ints(al)
    if ds and sum(ds) == len(vals):
        return vals, ds, "steps"
    if not ds and idxs and all(i >= 0 for i in idxs) and sum(idxs) + len(idxs) == len(vals):
        return vals, [i + 1 for i in idxs], "idxs"
    if max(n_turns, len(ds), len(nt)) <= 1:
        return vals, [len(vals)], "single"
    if nt and len(nt) == max(n_turns, len(ds)) and sum(nt) == sum(vals):
        run, k, lens = 0, 0, []
        want = np.cumsum(nt).tolist()
        start = 0
        for i, v in enumerate(vals):
            run += v
            if k < len(want) and run == want[k]:
                lens.append(i + 1 - start)
                start = i + 1
                k += 1
                while k < len(want) and want[k] == run:     # a turn with no tokens
                    lens.append(0)
                    k += 1
        if k == len(want) and start == len(vals):
            return vals, lens, "new_tokens"
    if ds and sum(ds) + len(ds) == len(vals):
        return vals, [d + 1 for d in ds], "steps+1"
    return None


#: keys that hold the per-step accepted lengths: Spec-Bench's, and the typo its per-method
#: scripts of March 2024 wrote (inference_pld/sps/lookahead.py @ bc8a422: ``"accept_lengths:"``)
ACCEPT_KEYS = ("accept_lengths", "accept_lengths:")


def _plain_choice(c: dict, check_min: bool):
    """The common case of :func:`_read_choice`, read without its general checks: flat lists of
    plain ints in ``accept_lengths``, ``decoding_steps`` and ``new_tokens``, the steps summing
    to the values, no ``idxs``. The same result as :func:`_read_choice`, or None when the choice
    is not that case. ``check_min`` False: the values are neither checked to be plain ints >= 1
    nor converted (they come back as the list itself); the caller checks the file's values at once."""
    al, ds, nt = c.get("accept_lengths"), c.get("decoding_steps"), c.get("new_tokens")
    if type(al) is not list or not al or type(ds) is not list or type(nt) is not list or "idxs" in c:
        return None
    if not set(map(type, ds)) <= _INT or sum(ds) != len(al) or not set(map(type, nt)) <= _INT:
        return None
    if not check_min:
        v = al
    elif not set(map(type, al)) <= _INT:
        return None
    elif min(al) < 1:
        return "accept_lengths below 1"
    else:
        try:
            v = array("q", al)
        except OverflowError:
            return None
    wt, turns = c.get("wall_time"), c.get("turns")
    wt = list(wt) if isinstance(wt, list) else _nums(wt)
    turns = turns if isinstance(turns, list) else ([] if turns is None else [turns])
    return v, ds, "steps", nt, wt, turns, 0


def _read_choice(c: dict, check_min: bool = True):
    """One choice: (values | None, steps per turn, how, new_tokens, wall_time, turn texts,
    1 if the misspelt key was read else 0), or a string saying why it is left out
    (``empty``, ``mismatch``, or the reason). ``check_min`` False: values below 1 are not
    looked for in the common case (:func:`_plain_choice`)."""
    got = _plain_choice(c, check_min)
    if got is not None:
        return got
    try:
        nt = _counts(c.get("new_tokens"))
        ds = _counts(c.get("decoding_steps"))
    except ValueError as exc:
        return f"new_tokens/decoding_steps: {exc}"
    wt = _nums(c.get("wall_time"))
    turns = c.get("turns")
    turns = turns if isinstance(turns, list) else ([] if turns is None else [turns])
    try:
        idxs = _ints(c.get("idxs")) if "idxs" in c else None
    except ValueError as exc:
        return f"idxs: {exc}"
    key = next((k for k in ACCEPT_KEYS if k in c), None)
    if key is None:
        if ds:                                  # step counts without the per-step lengths
            return None, ds, "steps-only", nt, wt, turns, 0
        if idxs is not None:
            if any(i < 0 for i in idxs):
                return "idxs: negative"
            return None, [i + 1 for i in idxs], "idxs-only", nt, wt, turns, 0
        return "neither accept_lengths nor idxs"
    al = c.get(key)
    if not al:
        return "empty"
    try:
        got = split_turns(al if isinstance(al, list) else [al], ds, nt, len(turns), idxs)
    except ValueError as exc:
        return f"accept_lengths: {exc}"
    if got is None:
        return "mismatch"
    vals, lens, how = got
    if min(vals) < 1:                   # on the list of ints (faster than on the array)
        return "accept_lengths below 1"
    try:
        v = array("q", vals)
    except OverflowError:                   # beyond 64 bits: no decoder commits that many tokens in a step
        return "accept_lengths: a value beyond any step's length"
    return v, lens, how, nt, wt, turns, int(key != "accept_lengths")


@dataclass
class _File:
    """One answer file as :func:`import_file` reads it: where it is, whose run it is, the horizon
    it takes (``spec``: an int, ``"hf-heuristic"`` or None), and the notes so far."""

    path: Path
    notes: list
    base: str
    model_id: str
    target: str
    method: str | None
    drafter: str
    override: object
    spec: object
    qcat: dict
    recs: list
    no_true: bool = False        # no JSON true in the file's text (Lines.without_true)


@dataclass
class _Tally:
    """What the answers held that becomes a note (or, when nothing is usable, the refusal)."""

    seen: Counter = field(default_factory=Counter)      # question id -> answers so far (repeated runs)
    empty: list = field(default_factory=list)
    mismatch: list = field(default_factory=list)
    badval: list = field(default_factory=list)
    why_bad: Counter = field(default_factory=Counter)
    hows: Counter = field(default_factory=Counter)
    error_turns: list = field(default_factory=list)
    error_only: list = field(default_factory=list)
    multi: int = 0
    idx_only: int = 0
    steps_only: int = 0
    no_qid: int = 0
    no_cat: int = 0
    colon_key: int = 0
    error_kept: int = 0
    zero_tokens: int = 0


@dataclass
class _Answers:
    """The usable choices of a file, column by column (one entry per choice, in file order): the run
    (1, 2, ... for a question id's repeats), the choice index, question id, task, values (ints; None:
    per-turn counts only), steps per turn, turn ids, new_tokens, wall_time and line number."""

    run: list
    choice: list
    qid: list
    task: list
    values: list
    lens: list
    tids: list
    nt: list
    wt: list
    lineno: list

    @classmethod
    def from_rows(cls, rows: list) -> _Answers:
        """From one tuple per choice, in the order of the columns."""
        return cls(*([list(c) for c in zip(*rows)] if rows else [[] for _ in range(10)]))

    @property
    def n(self) -> int:
        return len(self.qid)


def import_file(path, lines, *, horizon=None, task=None) -> FileResult:
    """One Spec-Bench answer file: its rounds (one per ``accept_lengths`` entry), its prompt rows
    (one per answer, with the per-turn counts) and the notes (see the module docstring)."""
    f = _open_file(path, lines, horizon)
    answers, tally, flat_a = _read_answers(f, task)
    _answer_notes(f, tally, answers, task)
    _check_token_idxs(f, answers)
    if flat_a is None:                  # every answer's values, in order
        flat_a = np.array(list(chain.from_iterable(v for v in answers.values if v is not None)), dtype=np.int64)
    _check_horizon(f, flat_a, any(v is not None for v in answers.values))
    P, turns, nan_wall = _prompt_rows(f.base, answers)
    cols = _round_columns(f, answers, flat_a, turns) if len(turns[0]) else None
    _file_notes(f, tally, nan_wall, cols)
    rounds, prompts = _tables(f, P, turns, cols)
    return FileResult(str(f.path), "spec-bench", rounds, prompts, f.notes, _run(f))


def _open_file(path, lines, horizon) -> _File:
    """The answer records of a file, its model id (one per file), target, method and horizon."""
    path = as_loc(path)
    notes: list[str] = [f"{path}: skipped corrupt line {i} ({what})" for i, what in lines.bad]
    recs = [(i, r) for i, r in lines.records if isinstance(r, dict) and isinstance(r.get("choices"), list)]
    other = len(lines.records) - len(recs)
    if other:
        notes.append(f"{path}: {other} record(s) without a 'choices' list ignored")
    if not recs:
        raise LogError(path, "no answer records (objects with a 'choices' list)",
                       "pass the model_answer/*.jsonl files Spec-Bench writes")
    base = run_base(path)
    rs = list(map(itemgetter(1), recs))
    given = [m for m in map(dict.get, rs, repeat("model_id")) if m is not None and m != ""]
    model_ids = Counter(map(str, given))
    no_model = len(recs) - len(given)
    qcat = _questions(path)
    if qcat:
        asked = set(map(str, map(dict.get, rs, repeat("question_id"))))
        if len(asked & set(qcat)) < len(qcat):
            notes.append(f"{path}: answers cover {len(asked & set(qcat))} of the {len(qcat)} questions in the "
                         "question file beside it")
    if len(model_ids) > 1:
        raise LogError(path, f"mixes {len(model_ids)} model_id values ({ids_list(model_ids)})",
                       "split the file by model_id (one run per file)")
    if model_ids:
        model_id = next(iter(model_ids))
        if no_model:
            notes.append(f"{path}: {no_model} answer(s) without a model_id read as '{model_id}' (the file's other "
                         "answers)")
    else:
        model_id = base.split("/")[-1]
        notes.append(f"{path}: no model_id in the answers: target and method read from the file name "
                     f"'{model_id}'")
    target, method, drafter = parse_model_id(model_id)
    override = horizon_for(horizon, (path.name, base.split("/")[-1], base, model_id, f"{target}-{method}",
                                     method, "*"))
    table = METHODS.get(method) if method else None
    spec = int(override) if override is not None else table
    return _File(path, notes, base, model_id, target, method, drafter, override, spec, qcat, recs,
                 lines.without_true())


def _read_answers(f: _File, task) -> tuple[_Answers, _Tally, np.ndarray | None]:
    """The usable choices (:class:`_Answers`); choices left out are counted in the tally. A file of
    plain answers is read column by column (:func:`_read_plain`); any other answer by answer, the
    values checked to be plain ints >= 1 once for the whole file; where one is not, the file is read
    again checking every choice on its own (which leaves that choice out or reads it the general
    way). Third: the answers' values concatenated, when that check already made them (else None)."""
    got = _read_plain(f, task)
    if got is None:
        got = _read_all(f, task, False)
    if got is None:
        got = _read_all(f, task, True) + (None,)
    return got


def _turn_list(turns) -> list:
    return turns if isinstance(turns, list) else ([] if turns is None else [turns])


def _is_error(x) -> bool:
    """Whether a turn's text is ``"ERROR"`` (blanks around it allowed); tested on its first
    characters before any copy is made."""
    return isinstance(x, str) and (x.startswith("ERROR") or x[:1].isspace()) and x.strip() == "ERROR"


def _any_error(texts: list) -> bool:
    """Whether :func:`_is_error` holds for one of ``texts``: tested text by text only where some
    text is not a string, or its first character after the blanks is ``E`` or not among its first
    16 (the first characters gathered in C: a turn strips to ``ERROR`` only if it starts so)."""
    if set(map(type, texts)) <= {str}:
        firsts = {h[:1] for h in set(map(str.lstrip, map(itemgetter(slice(0, 16)), texts)))}
        if "E" not in firsts and "" not in firsts:
            return False
    return any(map(_is_error, texts))


def _read_plain(f: _File, task):
    """:func:`_read_answers` column by column (no Python call per answer) for the file Spec-Bench
    writes: one choice per answer, each with a question id, flat lists of plain ints in
    ``accept_lengths`` (not empty), ``decoding_steps`` (summing to its length) and ``new_tokens``,
    no ``idxs``, no 'ERROR' turn, every value >= 1. None when any answer is not that case: the
    answer-by-answer reading then gives the same result for those answers and the notes for the rest."""
    rs = list(map(itemgetter(1), f.recs))
    chs = list(map(itemgetter("choices"), rs))
    if not set(map(len, chs)) <= {1}:
        return None
    cs = list(map(itemgetter(0), chs))
    if not set(map(type, cs)) <= {dict} or any(map(dict.__contains__, cs, repeat("idxs"))):
        return None
    al, ds, nt = (list(map(dict.get, cs, repeat(k))) for k in ("accept_lengths", "decoding_steps", "new_tokens"))
    if not (set(map(type, al)) <= {list} and all(al)) or not set(map(type, chain(ds, nt))) <= {list}:
        return None
    if not set(map(type, chain.from_iterable(ds))) <= _INT or not set(map(type, chain.from_iterable(nt))) <= _INT:
        return None
    if list(map(sum, ds)) != list(map(len, al)):
        return None
    qs = list(map(dict.get, rs, repeat("question_id")))
    turns = list(map(dict.get, cs, repeat("turns")))
    if not set(map(type, turns)) <= {list}:
        turns = list(map(_turn_list, turns))
    if None in qs or _any_error(list(chain.from_iterable(turns))):
        return None
    flat = _plain_ints(al, f.no_true)
    if flat is None:
        return None
    qids = list(map(str, qs))
    t = _Tally(seen=Counter(qids))
    t.hows["steps"] = len(qids)
    runs = [1] * len(qids)
    if len(t.seen) < len(qids):                # repeated question ids: the k-th answer of a question is run k
        so_far: Counter = Counter()
        for j, q in enumerate(qids):
            so_far[q] += 1
            runs[j] = so_far[q]
    cats = list(map(dict.get, rs, repeat("category")))
    if None in cats:
        cats = [c if c is not None else f.qcat.get(q) for c, q in zip(cats, qids)]
        t.no_cat = sum(c is None for c in cats)
        tasks = [str(c) if c is not None else (task or NO_TASK) for c in cats]
    else:
        tasks = list(map(str, cats))
    wts = list(map(dict.get, cs, repeat("wall_time")))
    if not set(map(type, wts)) <= {list}:
        wts = [w if isinstance(w, list) else _nums(w) for w in wts]
    tids = list(map(range, map(len, ds)))          # turn ids (no turn left out)
    answers = _Answers(runs, [0] * len(qids), qids, tasks, al, ds, tids, nt, wts, list(map(itemgetter(0), f.recs)))
    return answers, t, flat


def _read_all(f: _File, task, check_min: bool):
    """:func:`_read_answers`; without ``check_min``, None when a value that is not a plain int >= 1
    was read."""
    t = _Tally()
    answers = []
    raw = []
    for lineno, r in f.recs:
        q = r.get("question_id")
        if q is None:
            t.no_qid += 1
            q = f"line-{lineno}"
        qid = str(q)
        t.seen[qid] += 1
        k = t.seen[qid]
        ch = r["choices"]
        if len(ch) > 1:
            t.multi += 1
        cat = r.get("category")
        if cat is None:
            cat = f.qcat.get(qid)
        if cat is None:
            t.no_cat += 1
        tsk = str(cat) if cat is not None else (task or NO_TASK)
        for ci, c in enumerate(ch or [{}]):
            got = _read_choice(c if isinstance(c, dict) else {}, check_min)
            if isinstance(got, str):          # why the choice is left out
                if got == "empty":
                    t.empty.append(qid)
                elif got == "mismatch":
                    t.mismatch.append(qid)
                else:
                    t.badval.append(qid)
                    t.why_bad[got] += 1
                continue
            if got[0] is not None and not check_min:
                raw.append(got[0])
            kept = _choice_turns(f.spec, got, qid, t)
            if kept is not None:
                answers.append((k, ci, qid, tsk, *kept, lineno))
    answers = _Answers.from_rows(answers)
    if check_min:
        return answers, t
    flat = _plain_ints(raw, f.no_true)
    if flat is None:
        return None
    # the answers hold every list read, unchanged, unless an 'ERROR' turn was left out
    return answers, t, (None if t.error_turns else flat)


def _plain_ints(lists: list, no_true: bool = False) -> np.ndarray | None:
    """The lists concatenated as int64 when they hold plain ints only, each in 1..2**63 - 1 (one
    check over them all), else None. ``no_true``: the file's text holds no JSON ``true``
    (:meth:`Lines.without_true`), so no element needs a type check of its own: the conversion to one
    byte per value (values 0..255, the common case) refuses strings, containers, floats and ``None``;
    beyond a byte, the exact sum refuses them and the conversion ints beyond 64 bits; a ``false`` is 0."""
    if not no_true and not set(map(type, chain.from_iterable(lists))) <= _INT:
        return None
    if all(type(x) is list for x in lists):
        # the common case, values 1..255: one byte each, converted in C (a float, a string, None or a
        # container raises TypeError, a value beyond a byte ValueError: then the general way below)
        try:
            small = b"".join(map(bytes, lists))
        except (TypeError, ValueError):
            small = None
        if small is not None:
            return None if b"\x00" in small else np.frombuffer(small, np.uint8).astype(np.int64)
    if no_true:
        try:
            total = sum(map(sum, lists))
        except TypeError:
            return None
        if type(total) is not int:
            return None
    try:
        arr = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=sum(map(len, lists)))
    except (OverflowError, TypeError, ValueError):
        return None
    return None if arr.size and int(arr.min()) < 1 else arr


def _choice_turns(spec, got, qid: str, t: _Tally):
    """(values, steps per turn, turn ids, new_tokens, wall_time) of one read choice, its 'ERROR'
    turns left out (None when no other turn is left); counts what it saw in ``t``."""
    v, lens, how, nt, wt, turns, colon = got
    t.colon_key += colon
    if spec == 0 and v is None and how == "idxs-only" and nt and not any(nt) and any(lens):
        nt = list(lens)     # an AR step commits one token: idx + 1 tokens per turn
        t.zero_tokens += 1
    if v is None:
        if how == "idxs-only":
            t.idx_only += 1
        else:
            t.steps_only += 1
    else:
        t.hows[how] += 1
    # a turn whose text is "ERROR": the benchmark caught an exception there and logged stale numbers
    tids = list(range(len(lens)))
    err = [i for i, x in enumerate(turns) if _is_error(x)]
    if err:
        if len(turns) != len(lens):
            t.error_kept += 1
        else:
            keep = [i for i in tids if i not in err]
            t.error_turns.append(qid)
            if not keep:
                t.error_only.append(qid)
                return None
            if v is not None:
                starts = np.concatenate([[0], np.cumsum(lens)]).tolist()
                v = array("q", [x for i in keep for x in v[starts[i]:starts[i + 1]]])
            nt = [nt[i] for i in keep] if len(nt) == len(lens) else nt
            wt = [wt[i] for i in keep] if len(wt) == len(lens) else wt
            lens = [lens[i] for i in keep]
            tids = keep
    return v, lens, tids, nt, wt


#: The note per way of splitting the values into turns (:func:`split_turns`' ``how``).
_HOW_NOTES = (("nested", "give accept_lengths as one list per turn: turns taken from those lists"),
              ("single", "have one turn and decoding_steps that miss or disagree with accept_lengths: "
                         "the whole list read as that turn"),
              ("new_tokens", "have decoding_steps that disagree with accept_lengths: turns split where "
                             "the running sum of accept_lengths meets each turn's new_tokens"),
              ("idxs", "give per-turn idxs (the loop index of each turn's last step; Spec-Bench before "
                       "April 2024) instead of decoding_steps: turns of idx + 1 steps"),
              ("steps+1", "count one decoding step fewer per turn than accept_lengths holds (Token "
                          "Recycling's step counter skips the last step): turns of decoding_steps + 1"))


def _answer_notes(f: _File, t: _Tally, answers: _Answers, task) -> None:
    """The notes on what was left out or read otherwise; the refusal when no answer is usable."""
    path, notes, base = f.path, f.notes, f.base
    if t.empty:
        notes.append(f"{path}: {len(t.empty)} answer(s) with empty accept_lengths (no decoding steps; the run "
                     f"failed on them) left out: question_id {ids_list(t.empty)}")
    if t.mismatch:
        notes.append(f"{path}: {len(t.mismatch)} answer(s) whose decoding_steps do not sum to the length of "
                     "accept_lengths, with several turns that new_tokens cannot split either, left out: "
                     f"question_id {ids_list(t.mismatch)}")
    if t.badval:
        notes.append(f"{path}: {len(t.badval)} answer(s) with unreadable or impossible values left out ("
                     + "; ".join(f"{w}: {n}" for w, n in t.why_bad.most_common(3))
                     + f"): question_id {ids_list(t.badval)}")
    for how, what in _HOW_NOTES:
        n = t.hows.get(how, 0)
        if n:
            notes.append(f"{path}: {n} answer(s) {what}")
    if t.colon_key:
        notes.append(f"{path}: {t.colon_key} answer(s) name the per-step lengths 'accept_lengths:' (the misspelt key "
                     "of Spec-Bench's March 2024 PLD/SpS/lookahead scripts): read as accept_lengths")
    if t.error_turns:
        notes.append(f"{path}: {len(t.error_turns)} answer(s) hold turns whose text is 'ERROR' (the benchmark caught "
                     "an exception there, and Spec-Bench's eval.py then logs the previous turn's steps, tokens, time "
                     "and accept_lengths again): those turns left out"
                     + (f" ({len(t.error_only)} answer(s) had no other turn)" if t.error_only else "")
                     + f": question_id {ids_list(t.error_turns)}")
    if t.error_kept:
        notes.append(f"{path}: {t.error_kept} answer(s) hold an 'ERROR' turn but turns that do not align with their "
                     "step counts: kept as logged (their numbers may repeat the previous turn's)")
    if t.multi:
        notes.append(f"{path}: {t.multi} answer(s) hold several choices (independent decodes of the question, "
                     "Spec-Bench's --num-choices): every choice imported as a repeated decode of its question "
                     f"(run_id {base}#choice<i> for choices[i], i >= 1; one cluster per question)")
    if t.no_qid:
        notes.append(f"{path}: {t.no_qid} answer(s) without a question_id: prompt_id 'line-<line number>' (each its "
                     "own cluster, unpaired in the timing ledger)")
    if t.no_cat:
        notes.append(f"{path}: {t.no_cat} answer(s) without a category (none in the record"
                     + (", nor in the question file beside it" if f.qcat else ", and no question.jsonl beside it")
                     + f"): task '{task or 'unknown'}'" + ("" if task else " (import with python -m glance_law.ingest --task NAME)"))
    if not answers.n:
        raise LogError(path, f"no usable answers ({len(t.empty)} with empty accept_lengths, {len(t.mismatch)} with "
                             f"step counts that disagree, {len(t.badval)} unreadable"
                             + (f", {len(t.error_only)} with only 'ERROR' turns" if t.error_only else "") + ")",
                       "nothing to import from this file; rerun the benchmark for it or leave it out")
    runs = max(t.seen.values())
    if runs > 1:
        sizes = Counter(answers.run)
        notes.append(f"{path}: question ids repeat ({len(f.recs)} answers for {len(t.seen)} questions): split by "
                     f"order of appearance into {runs} runs ("
                     + ", ".join(f"{base}{'' if k == 1 else f'#run{k}'}: {sizes[k]}" for k in sorted(sizes))
                     + " answers)")


def _check_token_idxs(f: _File, answers: _Answers) -> None:
    """Refuse idxs that count tokens, not steps (idx + 1 = new_tokens in every turn of a speculative run)."""
    pairs = [(d, n) for v, ds, nt in zip(answers.values, answers.lens, answers.nt)
             if v is None and len(nt) == len(ds) for d, n in zip(ds, nt)]
    if f.spec != 0 and f.method is not None and len(pairs) >= 3 and all(d == n for d, n in pairs):
        raise LogError(f.path, f"every turn's idx + 1 equals its new_tokens ({len(pairs)} turns), a tau of exactly 1 "
                               f"for the speculative method '{f.method}': these idxs count tokens, not decoding "
                               "steps (Spec-Bench's early PLD and baseline scripts wrote idx = new_token - 1)",
                       "the file holds no step counts; import a run that logged accept_lengths or decoding_steps")


def _check_horizon(f: _File, flat_a: np.ndarray, rounds_level: bool) -> None:
    """The horizon against the values: refused when unknown or contradicted, raised (with a
    warning) to the deepest accepted run when the method table's is too shallow."""
    path, spec, method, model_id = f.path, f.spec, f.method, f.model_id
    vmax = int(flat_a.max()) if flat_a.size else 0
    key = f"{f.target}-{method}" if method else model_id
    if rounds_level and spec is None:
        why = (f"the method '{method}' has no fixed horizon in the method table" if method
               else f"no known method in model_id '{model_id}'")
        hint = HINTS.get(method) if method else None
        level = _LEVEL.search(model_id.lower()) if method in ("lookahead", "lade") else None
        if level and int(level.group(1)) > 1:
            hint = (hint or "") + (f"; this model_id gives LEVEL {level.group(1)}: --horizon {method}="
                                   f"{int(level.group(1)) - 1} reads every round at the n-gram length")
        raise LogError(path, f"{why}" + (f": {hint}" if hint else "") + " (known: "
                       + ", ".join(f"{m} {h}" for m, h in METHODS.items() if h is not None) + ")",
                       f"pass the run's deepest draft offset: --horizon {method or key}=L (or horizon={{'"
                       f"{method or key}': L}}); its accept_lengths reach {vmax} (L >= {max(vmax - 1, 0)})")
    if rounds_level and isinstance(spec, int) and spec > 0 and vmax - 1 > spec:
        if f.override is not None:
            raise LogError(path, f"accept_lengths reach {vmax} (accepted {vmax - 1}), more than the horizon {spec} "
                                 "given with --horizon", "the data contradict that horizon: pass this run's deepest "
                           f"draft offset, e.g. --horizon {key}={vmax - 1} (or larger)")
        f.notes.append(f"{path}: WARNING: accept_lengths reach {vmax} (accepted {vmax - 1}), more than the method "
                       f"table's horizon {spec} for '{method}': this run drafted deeper than the table's default. "
                       f"Imported with horizon {vmax - 1}, the largest accepted run observed (a lower bound on the "
                       f"configured depth: rounds that reached it count as fully accepted); if you know the run's "
                       f"depth, pass it: --horizon {key}=L")
        f.spec = vmax - 1
    if f.spec == 0 and vmax > 1:
        raise LogError(path, f"an autoregressive (vanilla) run with accept_lengths up to {vmax}",
                       "the data contradict the method; check model_id, or pass --horizon L for this file")


def _wall_sum(wt) -> float:
    """The answer's wall time (seconds, summed exactly over its turns); NaN for a null, an overflow, inf + -inf."""
    try:
        return math.fsum(wt)
    except (TypeError, OverflowError, ValueError):
        return math.nan


def _prompt_rows(base: str, A: _Answers):
    """The prompt rows (column -> one value per answer), the turns that hold rounds (steps, turn
    id, answer index, new_tokens or -1, per turn) and the answers with an unusable wall time;
    column by column over the answers."""
    isfinite = math.isfinite
    try:
        wsum = list(map(math.fsum, A.wt))            # every answer's wall times summable (else each on its own)
    except (TypeError, OverflowError, ValueError):
        wsum = list(map(_wall_sum, A.wt))
    ok = [bool(wt) and isfinite(w) for wt, w in zip(A.wt, wsum)]
    nan_wall = sum(1 for wt, o in zip(A.wt, ok) if wt and not o)
    one_run = set(A.run) <= {1} and set(A.choice) <= {0}     # one run of one choice: every run id the base
    P = {"run_id": [base] * len(A.run) if one_run else
         [base + ("" if k == 1 else f"#run{k}") + ("" if ci == 0 else f"#choice{ci}") for k, ci in zip(A.run, A.choice)],
         "prompt_id": A.qid, "task": A.task,
         "new_tokens": [int(sum(nt)) if nt else None for nt in A.nt],
         "decode_ms": [w * 1000.0 if o else None for w, o in zip(wsum, ok)],
         "rounds": list(map(int, map(sum, A.lens))), "turns": list(map(len, A.lens)),
         "turn_tokens": [nt if len(nt) == len(ds) else None for nt, ds in zip(A.nt, A.lens)],
         "turn_rounds": A.lens,                                       # seconds, negatives: see _list_column
         "turn_ms": [wt if o and len(wt) == len(ds) else None for wt, o, ds in zip(A.wt, ok, A.lens)]}
    return P, _round_turns(A), nan_wall


def _round_turns(A: _Answers) -> tuple:
    """The turns that hold rounds, as arrays (steps, turn id, answer index, new_tokens or -1), one
    per turn of the answers with values, turns of no steps left out; flattened over the answers at
    once (per turn where a count is beyond 64 bits)."""
    sel = [j for j, v in enumerate(A.values) if v is not None]
    lens = [A.lens[j] for j in sel]
    nts = [A.nt[j] for j in sel]
    per = np.fromiter(map(len, lens), dtype=np.int64, count=len(lens))
    n = int(per.sum())
    try:
        d = np.fromiter(chain.from_iterable(lens), dtype=np.int64, count=n)
        want = (np.fromiter(chain.from_iterable(nts), dtype=np.int64, count=n)
                if all(len(x) == k for x, k in zip(nts, per.tolist())) else None)
    except OverflowError:
        d = None
    if d is None or want is None:
        rows = [(d, t, j, int(A.nt[j][i]) if i < len(A.nt[j]) else -1)
                for j in sel for i, (t, d) in enumerate(zip(A.tids[j], A.lens[j])) if d]
        return tuple(np.asarray(c) for c in zip(*rows)) if rows else tuple(np.zeros(0, np.int64) for _ in range(4))
    keep = d != 0
    tids = np.fromiter(chain.from_iterable(A.tids[j] for j in sel), dtype=np.int64, count=n)
    return d[keep], tids[keep], np.repeat(np.asarray(sel, dtype=np.int64), per)[keep], want[keep]


def _round_columns(f: _File, answers: _Answers, v: np.ndarray, turns) -> dict:
    """The round columns, vectorised over the file (rounds are in turn order, turns in answer
    order): accepted, position, round, the output-ending flag and the drafted horizon; plus the
    rounds per answer and the turns whose new_tokens differ from their values' sum."""
    lens, tturn, ans_of_turn, tok_want = turns
    n_total = int(np.sum(lens))
    lens_a = np.asarray(lens, dtype=np.int64)
    tstart = np.concatenate([[0], np.cumsum(lens_a)[:-1]])
    acc = v - 1
    # positions as the int32 column holds them: sums and differences wrap modulo 2**32 alike in
    # int32 and in int64 cast down, so computing them in int32 gives the same column
    v32 = v.astype(np.int32)
    before = np.cumsum(v32, dtype=np.int32) - v32
    pos = before - np.repeat(before[tstart], lens_a)      # per-turn values repeat
    last = tstart + lens_a - 1
    end = np.zeros(n_total, dtype=bool)
    end[last] = True
    want = np.asarray(tok_want)
    tok_mismatch = int(((want >= 0) & (np.add.reduceat(v, tstart) != want)).sum())
    ans_a = np.asarray(ans_of_turn, dtype=np.int64)
    a_rounds = np.bincount(ans_a, weights=lens_a, minlength=answers.n).astype(np.int64)
    a_start = np.concatenate([[0], np.cumsum(a_rounds)[:-1]])
    # per-answer values repeat, made in the int32 of the column where every index fits it
    small = np.int32 if n_total < 1 << 31 else np.int64
    rnd = (np.arange(n_total, dtype=small) - np.repeat(a_start.astype(small), a_rounds)).astype(np.int32, copy=False)
    if f.spec == "hf-heuristic":
        hor = _sps_horizons(f, answers, acc, tstart, turns)
    else:
        hor = np.full(n_total, int(f.spec), dtype=np.int64)
    return {"n": n_total, "acc": acc, "pos": pos, "end": end, "last": last, "rnd": rnd, "hor": hor, "a_rounds": a_rounds,
            "turn": np.repeat(np.asarray(np.asarray(tturn).tolist(), dtype=np.int16), lens_a),
            "tok_mismatch": tok_mismatch}


def _sps_next(h: int, a: int) -> int:
    """The heuristic schedule's draft length after a round that drafted ``h`` and accepted ``a``; a
    negative ``a`` marks a turn's last round: the next round starts a turn at :data:`SPS_START`."""
    return SPS_START if a < 0 else (h + 2 if a == h else (h - 1 if h > 1 else 1))


def _sps_horizons(f: _File, answers: _Answers, acc: np.ndarray, tstart: np.ndarray, turns) -> np.ndarray:
    """Hugging Face's heuristic draft length of every round (:func:`sps_schedule` over the whole file
    at once, each turn starting afresh); refused when a round accepted more than the schedule drafted."""
    lens, tturn, ans_of_turn, _ = turns
    marked = acc.copy()
    marked[tstart + np.asarray(lens, dtype=np.int64) - 1] = -1
    hl = np.fromiter(accumulate(marked.tolist(), _sps_next, initial=SPS_START), dtype=np.int64,
                     count=acc.size + 1)[:-1]
    over = np.flatnonzero(acc > hl)
    if over.size:
        bad_turns, first = np.unique(np.searchsorted(tstart, over, side="right") - 1, return_index=True)
        i, r = int(bad_turns[0]), int(over[first[0]])
        j = ans_of_turn[i]
        raise LogError(f.path, f"the Hugging Face heuristic draft schedule (start {SPS_START}, +2 after a fully "
                               f"accepted draft, else -1, at least 1) is contradicted in {bad_turns.size} turn(s) "
                               f"(first: question_id {answers.qid[j]} (line {answers.lineno[j]}), turn {tturn[i]}, "
                               f"step {r - int(tstart[i])}: accepted {int(acc[r])} > reconstructed draft length "
                               f"{int(hl[r])})",
                       "this run did not use that schedule; pass its draft length with --horizon L (or "
                       f"horizon={{'{f.base.split('/')[-1]}': L}})")
    return hl


def _file_notes(f: _File, t: _Tally, nan_wall: int, cols: dict | None) -> None:
    """The notes on what the file's answers carry (per-turn counts only, EAGLE's ids, timing)."""
    path, notes, method = f.path, f.notes, f.method
    if t.idx_only:
        notes.append(f"{path}: {t.idx_only} answer(s) carry per-turn idxs and no per-step accept_lengths (the "
                     "EAGLE/Medusa repositories' own format): prompt rows only (rounds = idx + 1 per turn)")
    if t.steps_only:
        notes.append(f"{path}: {t.steps_only} answer(s) carry decoding_steps and no per-step accept_lengths: prompt "
                     "rows only (rounds = decoding_steps)")
    if f.model_id.lower().startswith(EAGLE_PREFIX + "-") and method in ("eagle", "baseline"):
        notes.append(f"{path}: model_id '{f.model_id}' is the EAGLE repository scripts' default id (ess-<target>): "
                     f"read as {'the eagle method' if method == 'eagle' else 'its autoregressive baseline'} on target "
                     f"'{f.target}'; those scripts keep this id whatever model they ran, so check the target")
    if (t.idx_only or t.steps_only) and method is None:
        notes.append(f"{path}: no known method in model_id '{f.model_id}' (EAGLE's own scripts name none): its prompt "
                     f"rows are labelled drafter '{f.drafter}' on target '{f.target}'")
    if t.zero_tokens:
        notes.append(f"{path}: {t.zero_tokens} answer(s) of the autoregressive arm log new_tokens = 0 in every turn "
                     "(EAGLE's gen_baseline_answer_*.py never counts them; its speed.py re-tokenises the text "
                     "instead): new_tokens read as idx + 1 per turn (one token per decoding step)")
    if nan_wall:
        notes.append(f"{path}: {nan_wall} answer(s) with a NaN, infinite or null wall_time: decode_ms left null")
    if cols is not None and cols["tok_mismatch"]:
        notes.append(f"{path}: {cols['tok_mismatch']} turn(s) whose new_tokens differ from the sum of their "
                     "accept_lengths (rounds kept as logged)")


def _list_column(lists: list, typ: pa.DataType, scale: float = 1.0) -> pa.Array:
    """A list column from per-answer lists (None: null), times ``scale``; a list holding a value the
    column cannot hold (negative, beyond int32, not finite) is null (the per-turn counts are then
    unknown; the prompt's totals are checked by the reader)."""
    if scale != 1.0:
        lists = [None if x is None else [v * scale for v in x] for x in lists]
    try:
        arr = pa.array(lists, typ)
        lo, hi = pc.min_max(arr.flatten()).values()
        if lo.as_py() is None or (lo.as_py() >= 0 and math.isfinite(hi.as_py())):
            return arr
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        pass
    return _masked_list_column(lists, typ)


def _masked_list_column(lists: list, typ: pa.DataType) -> pa.Array:
    """:func:`_list_column` where some list holds a value the column cannot hold: that list null."""
    sizes = np.fromiter((0 if x is None else len(x) for x in lists), dtype=np.int64, count=len(lists))
    flat = np.fromiter(chain.from_iterable(x for x in lists if x is not None), dtype=np.float64, count=int(sizes.sum()))
    offsets = np.zeros(len(lists) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    valid = np.fromiter((x is not None for x in lists), dtype=bool, count=len(lists))
    bad = ~(flat >= 0) | (flat > np.iinfo(np.int32).max if pa.types.is_integer(typ.value_type) else ~np.isfinite(flat))
    rows = np.repeat(np.arange(len(lists)), sizes)
    valid[rows[bad]] = False
    flat[bad] = 0.0
    values = pa.array(flat).cast(typ.value_type)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~valid)).cast(typ)


def _tables(f: _File, P: dict, turns, cols: dict | None):
    """The rounds table (None without per-step values) and the prompt table, strings
    dictionary-encoded once per column (for the rounds and the prompts alike)."""
    enc: dict = {}
    zeros: dict = {}
    names: dict = {}

    def zero(n):
        """n codes 0 (one buffer for every column of one value)."""
        if n not in zeros:
            zeros[n] = pa.array(np.zeros(n, np.int32))
        return zeros[n]

    def cat(name, idx=None):
        """P[name] per answer (``idx`` None), or each repeated ``idx`` times, as a dictionary array."""
        if name not in enc:                # codes in order of first appearance, as Arrow encodes
            enc[name] = pa.array(P[name], pa.string()).dictionary_encode()
        d = enc[name]
        if idx is None:
            return d
        codes = zero(int(idx.sum())) if len(d.dictionary) == 1 else pa.array(np.repeat(d.indices.to_numpy(), idx))
        return pa.DictionaryArray.from_arrays(codes, d.dictionary)

    def const(value, n):
        if value not in names:
            names[value] = pa.array([value], pa.string())
        return pa.DictionaryArray.from_arrays(zero(n), names[value])

    drafter_name = "ar" if f.spec == 0 else f.drafter
    rounds = None
    if cols is not None:
        n, a_rounds, end, last = cols["n"], cols["a_rounds"], cols["end"], cols["last"]
        acc, hor = cols["acc"].astype(np.int16), cols["hor"].astype(np.int16)
        ends = hor.copy()
        ends[last] = acc[last]            # an output-ending round: horizon = accepted
        rounds = pa.table({
            "run_id": cat("run_id", a_rounds), "task": cat("task", a_rounds),
            "prompt_id": cat("prompt_id", a_rounds), "round": cols["rnd"],
            "root_entropy": pa.nulls(n, pa.float32()),            # not measured by this format
            "accepted": acc, "horizon": ends,
            "drafter": const(drafter_name, n), "target": const(f.target, n),
            "position": cols["pos"], "turn": cols["turn"],
            "ends_output": end, "drafted_horizon": hor,
        })
    n_answers = len(P["run_id"])
    try:
        prompts = _prompt_table(P, cat, const(drafter_name, n_answers), const(f.target, n_answers))
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise LogError(f.path, f"a per-answer count does not fit the contract's 32-bit columns "
                               f"({str(exc).splitlines()[0][:80]})",
                       "check new_tokens, decoding_steps and idxs in this file (no decoder commits that many)") from None
    spec = f.spec
    if spec == "hf-heuristic" and cols is not None:
        f.notes.append(f"{f.path}: draft lengths reconstructed from Hugging Face's heuristic schedule (start "
                       f"{SPS_START} per turn, +2 after a fully accepted draft, else -1, at least 1); the data agree")
    how = ("autoregressive baseline (horizon 0)" if spec == 0 else
           "HF heuristic schedule" if spec == "hf-heuristic" else
           f"horizon {spec} from " + ("--horizon" if f.override is not None else f"the method table ({f.method})"))
    if cols is not None:
        f.notes.append(f"{f.path}: spec-bench, {len(prompts)} answers, {cols['n']} rounds, drafter '{drafter_name}', "
                       f"{how}; no root_entropy in this format; the last round of each turn is marked "
                       "output-ending (horizon = accepted)")
    return rounds, prompts


def _prompt_table(P: dict, cat, drafter, target) -> pa.Table:
    """The prompt rows as a contract table (``cat``: the dictionary encoder of :func:`_tables`)."""
    return pa.table({
        "run_id": cat("run_id"), "prompt_id": cat("prompt_id"), "task": cat("task"),
        "drafter": drafter, "target": target,
        "new_tokens": pa.array(P["new_tokens"], pa.int32()), "decode_ms": pa.array(P["decode_ms"], pa.float32()),
        "rounds": pa.array(P["rounds"], pa.int32()), "turns": pa.array(P["turns"], pa.int16()),
        "turn_tokens": _list_column(P["turn_tokens"], pa.list_(pa.int32())),
        "turn_rounds": _list_column(P["turn_rounds"], pa.list_(pa.int32())),
        "turn_ms": _list_column(P["turn_ms"], pa.list_(pa.float32()), 1000.0)})


def _run(f: _File) -> dict:
    """The file's glance.run document."""
    drafter_name = "ar" if f.spec == 0 else f.drafter
    return file_run(run_id=f.base, target=f.target,
                    drafter={"kind": f.method or "unknown", "name": drafter_name, "horizon": f.spec},
                    source={"format": "spec-bench", "file": str(f.path), "model_id": f.model_id})
