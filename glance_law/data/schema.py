"""The round-log contract, version 2 (version 1 files are read too).

One Parquet row per decoding round (file kind ``rounds``), one row per prompt
(file kind ``prompts``), and the reduced sufficient-statistics table (file kind
``reduced``, see :mod:`glance_law.reduce`). Every file carries three key-value
metadata entries:

``glance.kind``    ``rounds`` | ``prompts`` | ``reduced``
``glance.schema``  the contract version (``"2"``; ``"1"`` is read too)
``glance.run``     JSON: tool version, target, drafter config, dtype, device,
                   temperature, seed, command line, created_at, library versions

This module is the single source of truth for column names, Arrow types,
which columns are required, and the value checks the reader applies
(:func:`check_type`, :func:`check_values`: pure functions of an Arrow table
that return the first :class:`Problem`). It does no I/O (that is
:mod:`glance_law.io`, which adds the file name and raises). ``docs/schema.md`` documents the same
table for people; a test keeps the two in sync.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Version 2 made ``root_entropy`` nullable (null where the source did not measure it, e.g.
#: imported Spec-Bench logs; NaN stays refused). Version 1 files are read unchanged.
SCHEMA_VERSION = "2"
SUPPORTED_VERSIONS = ("1", "2")

META_KIND = b"glance.kind"
META_SCHEMA = b"glance.schema"
META_RUN = b"glance.run"

KIND_ROUNDS = "rounds"
KIND_PROMPTS = "prompts"
KIND_REDUCED = "reduced"
KINDS = (KIND_ROUNDS, KIND_PROMPTS, KIND_REDUCED)

CONDITIONS_DEFAULT = "matched"
#: the dense logging mode's condition (glance-log --dense): one row per output position, the drafter's
#: proposal there resolved against the target's greedy continuation; nothing but the root was verified
CONDITION_DENSE = "dense"

#: Entropies above this (nats) are logging bugs (ln of any vocabulary is < 30 nats): the
#: reader and every reduction engine refuse them.
MAX_ENTROPY = float(2 ** 20)

# Value families the reader accepts for a column (any width of the family is
# accepted and cast to the contract type when the values fit).
STRING, INT, FLOAT, BOOL, LIST_INT, LIST_FLOAT = (
    "string", "int", "float", "bool", "list<int>", "list<float>")


@dataclass(frozen=True)
class Column:
    """One column of the contract."""

    name: str
    type: pa.DataType
    family: str
    required: bool
    doc: str
    unit: str = ""
    nullable: bool = False  # only meaningful for optional columns
    #: Value bounds the reader enforces (inclusive; list columns: every element).
    #: Floats get a tolerance of FLOAT_TOL; NaN counts as "unknown" in nullable
    #: float columns and is an error elsewhere; +-inf is an error unless
    #: ``neg_inf`` (log-probabilities may be -inf).
    lo: float | None = None
    hi: float | None = None
    neg_inf: bool = False
    #: List-length rule against the same row's scalars: "L" (one entry per offset,
    #: length == horizon), "Lk" (row-major L x k, length a multiple of horizon,
    #: each row sorted descending), "a+1" (length <= accepted + 1).
    length: str = ""
    #: In a nullable float column, whether NaN also reads as "unknown" (True) or is refused
    #: while null is allowed (False: root_entropy).
    nan_ok: bool = True

    @property
    def type_name(self) -> str:
        return str(self.type)


def _c(name, typ, family, required, doc, unit="", nullable=False, **rules):
    return Column(name, typ, family, required, doc, unit, nullable, **rules)


ROUND_COLUMNS: tuple[Column, ...] = (
    # --- required -------------------------------------------------------
    _c("run_id", pa.string(), STRING, True,
       "Identifier of one logging run (one decoder configuration over a set of prompts)."),
    _c("task", pa.string(), STRING, True,
       "Task family, e.g. caption, textvqa, infovqa, docvqa, chartqa."),
    _c("prompt_id", pa.string(), STRING, True,
       "Stable prompt identifier: the same prompt has the same id in every run, "
       "so autoregressive and speculative arms (and matched/mismatched probes) pair up."),
    _c("round", pa.int32(), INT, True,
       "0-based index of the round within its prompt.", lo=0),
    _c("root_entropy", pa.float32(), FLOAT, True,
       "Shannon entropy of the target's next-token distribution at the round root, "
       "from the raw fp32 logits (temperature 1); null where the source did not measure it.",
       "nats", nullable=True, lo=0, hi=MAX_ENTROPY, nan_ok=False),
    _c("accepted", pa.int16(), INT, True,
       "Draft tokens accepted this round, bonus token excluded (tau = accepted + 1). "
       "0 <= accepted <= horizon.", "tokens", lo=0),
    _c("horizon", pa.int16(), INT, True,
       "L: the deepest offset the drafter proposed this round (the block length of a "
       "one-pass drafter, the drafted length of an autoregressive drafter or prompt lookup); "
       "the per-offset vectors cover offsets 1..L. The truncation point of the run-length "
       "law. 0 for autoregressive rounds (no draft).", "tokens", lo=0),
    # --- optional, standard ----------------------------------------------
    _c("condition", pa.string(), STRING, False,
       "Experimental condition; 'matched' when absent (or null). The mismatched-image "
       "probe logs 'mismatched'; the dense logging mode (glance-log --dense) logs 'dense': one "
       "autoregressive round per output position (accepted 0, budget 0) carrying the drafter's "
       "whole proposal there, resolved against the target's continuation (the trajectory replay's "
       "input; the law fits and summaries keep to 'matched')."),
    _c("drafter", pa.string(), STRING, False,
       "Drafter name: block, pld, two_model, ar, or a hook's name; 'unknown' when "
       "absent (or null)."),
    _c("target", pa.string(), STRING, False,
       "The target model that verified the round (e.g. vicuna-7b-v1.3; null if unknown). The "
       "analyses keep the rounds of different targets apart (glance_law.data.arms).", nullable=True),
    _c("round_order", pa.string(), STRING, False,
       "Whether the rounds of this prompt are in decoding order: 'known' (null or absent reads "
       "as known), 'unknown' (one prompt's rounds rebuilt from a per-request histogram) or 'pooled' "
       "(rounds rebuilt from server counters: pseudo-prompts, neither order nor prompt known). "
       "Analyses that need the order refuse the other two (glance_law.data.selection.require_order).",
       nullable=True),
    _c("position", pa.int32(), INT, False,
       "Number of tokens generated before this round's root (0 for the first round); the "
       "round commits output tokens position+1 .. position+len(committed) (the Hugging Face "
       "hook's round 0 also logs 0 and commits tokens 0 .. len(committed)-1).",
       "tokens", lo=0),
    _c("root_margin", pa.float32(), FLOAT, False,
       "Top-1 minus top-2 raw logit of the target at the round root.", "logits",
       nullable=True, lo=0),
    _c("root_pmax", pa.float32(), FLOAT, False,
       "Largest probability of the target's root distribution.", "probability",
       nullable=True, lo=0, hi=1),
    _c("min_path_margin", pa.float32(), FLOAT, False,
       "Smallest top-1 minus top-2 logit margin of the target over the rows that "
       "produced the tokens committed this round (root and accepted nodes; without the "
       "last accepted node in a round that ends the output): the tie-aware audit's gate.",
       "logits", nullable=True, lo=0),
    _c("pred_entropy", pa.float32(), FLOAT, False,
       "Entropy (nats) of the target row that predicted this round's root (the previous "
       "round's last committed row; the prefill's last row in round 0): what a decoder knows "
       "before drafting, unlike root_entropy (the verify pass's root row). Draft policies fit "
       "on it (glance_law.policy).", "nats", nullable=True, lo=0),
    _c("budget", pa.int16(), INT, False,
       "Candidate tree size N offered to the verifier, root excluded.", "nodes", lo=0),
    _c("depth", pa.int16(), INT, False,
       "Depth of the deepest node of the candidate tree (accepted <= depth <= horizon; "
       "equal to horizon for a full-length chain).", "tokens", lo=0),
    _c("draft_passes", pa.int16(), INT, False,
       "Sequential drafter forward passes this round (1 for a one-pass block drafter, "
       "L for an autoregressive drafter, 0 model-free).", "passes", lo=0),
    _c("committed", pa.list_(pa.int32()), LIST_INT, False,
       "Token ids committed this round (accepted tokens then the bonus token; shorter "
       "when generation stopped inside the round).", "token ids", nullable=True,
       lo=0, length="a+1"),
    _c("match", pa.list_(pa.int8()), LIST_INT, False,
       "Per offset 1..L: 1 if the drafter's top-1 equals the target's token there, "
       "0 if not, -1 unknown (past the end of generation).", "", nullable=True,
       lo=-1, hi=1, length="L"),
    _c("target_logq", pa.list_(pa.float32()), LIST_FLOAT, False,
       "Per offset 1..L: the drafter's log-probability of the target's token "
       "(NaN unknown: past the end of generation, or outside the logged top-k where "
       "only the top-k was kept).", "nats", nullable=True, hi=0, neg_inf=True, length="L"),
    _c("target_rank", pa.list_(pa.int32()), LIST_INT, False,
       "Per offset 1..L: 0-based rank of the target's token under the drafter. Values "
       "below k index the row of topk_logq; values >= k mean outside the logged top-k; "
       "-1 unknown. int32: a rank reaches the vocabulary size (262,144 for Gemma 3); files "
       "written with int16 lists are read too.", "", nullable=True, lo=-1, length="L"),
    _c("topk_logq", pa.list_(pa.float32()), LIST_FLOAT, False,
       "The drafter's top-k log-probabilities per offset, row-major L x k, each row "
       "sorted descending (k = len / horizon).", "nats", nullable=True, hi=0,
       neg_inf=True, length="Lk"),
    _c("copy_len", pa.int16(), INT, False,
       "Longest run of the tokens committed this round that occurs verbatim in the "
       "prompt's reference/context text (the copy regime; null without a reference).",
       "tokens", nullable=True, lo=0),
    _c("draft_ms", pa.float32(), FLOAT, False, "Drafting time this round.", "ms",
       nullable=True, lo=0),
    _c("verify_ms", pa.float32(), FLOAT, False, "Verification (target pass) time.", "ms",
       nullable=True, lo=0),
    _c("round_ms", pa.float32(), FLOAT, False, "Whole round wall time.", "ms",
       nullable=True, lo=0),
)

PROMPT_COLUMNS: tuple[Column, ...] = (
    _c("run_id", pa.string(), STRING, True, "Run identifier (as in the rounds file)."),
    _c("prompt_id", pa.string(), STRING, True, "Stable prompt identifier."),
    _c("task", pa.string(), STRING, True, "Task family."),
    _c("condition", pa.string(), STRING, False,
       "Condition; 'matched' when absent (or null)."),
    _c("drafter", pa.string(), STRING, False, "Drafter name; 'unknown' when absent (or null)."),
    _c("target", pa.string(), STRING, False, "Target model (as in the rounds file; null if unknown).",
       nullable=True),
    _c("prompt_tokens", pa.int32(), INT, False, "Prompt length.", "tokens", lo=0),
    _c("new_tokens", pa.int32(), INT, False, "Tokens generated.", "tokens", lo=0),
    _c("prefill_ms", pa.float32(), FLOAT, False, "Prefill time.", "ms", nullable=True, lo=0),
    _c("decode_ms", pa.float32(), FLOAT, False, "Decode-loop time (all rounds).", "ms",
       nullable=True, lo=0),
    _c("rounds", pa.int32(), INT, False, "Decoding rounds for this prompt.", "rounds", lo=0),
    _c("turn_tokens", pa.list_(pa.int32()), LIST_INT, False,
       "Per turn of a multi-turn conversation: tokens generated (they sum to new_tokens; null if not recorded).",
       "tokens", nullable=True, lo=0),
    _c("turn_rounds", pa.list_(pa.int32()), LIST_INT, False,
       "Per turn: verification steps (Spec-Bench's decoding_steps, EAGLE/Medusa's idx + 1; they sum to rounds; "
       "null if not recorded).", "rounds", nullable=True, lo=0),
    _c("turn_ms", pa.list_(pa.float32()), LIST_FLOAT, False,
       "Per turn: wall time (Spec-Bench's wall_time, prefill included; null if not recorded).", "ms",
       nullable=True, lo=0),
    _c("stop_reason", pa.string(), STRING, False,
       "eos | max_new_tokens | stop_string (null if unknown).", nullable=True),
    _c("greedy_match", pa.bool_(), BOOL, False,
       "Audit: the output equals fp32 greedy decoding token for token (null if not audited).",
       nullable=True),
    _c("first_divergence", pa.int32(), INT, False,
       "Audit: index of the first generated token that differs from greedy decoding "
       "(-1 when equal, null if not audited).", "tokens", nullable=True, lo=-1),
    _c("divergence_margin", pa.float32(), FLOAT, False,
       "Audit: the target's top-1 minus top-2 logit margin at the first divergence "
       "(null when equal or not audited).", "logits", nullable=True, lo=0),
    _c("tokens", pa.list_(pa.int32()), LIST_INT, False,
       "Generated token ids (the committed stream; null if not recorded).", "token ids",
       nullable=True, lo=0),
)

# The reduced table (sufficient statistics; see glance_law.reduce).
REDUCED_COLUMNS: tuple[Column, ...] = (
    _c("task", pa.string(), STRING, True, "Task family."),
    _c("drafter", pa.string(), STRING, True, "Drafter name."),
    _c("bucket", pa.int32(), INT, True,
       "Prompt bucket: the first 8 hex digits of md5(task + U+001F + prompt_id) modulo B; "
       "whole prompts stay together.", lo=0),
    _c("hbin", pa.int32(), INT, True,
       "Fine entropy bin index on the global grid recorded in the file's metadata."),
    _c("horizon", pa.int16(), INT, True, "L.", "tokens", lo=0),
    _c("accepted", pa.int16(), INT, True, "Accepted length (0 <= accepted <= horizon).",
       "tokens", lo=0),
    _c("n", pa.int64(), INT, True, "Number of rounds in the cell.", "rounds", lo=0),
    _c("sum_h", pa.float64(), FLOAT, True, "Sum of root_entropy over the cell.", "nats",
       lo=0),
    _c("sum_h2", pa.float64(), FLOAT, False,
       "Sum of root_entropy squared over the cell (without it the fit puts each cell at its mean).",
       "nats^2", lo=0),
)

COLUMNS_BY_KIND: Mapping[str, tuple[Column, ...]] = {
    KIND_ROUNDS: ROUND_COLUMNS,
    KIND_PROMPTS: PROMPT_COLUMNS,
    KIND_REDUCED: REDUCED_COLUMNS,
}

ROUND_KEY = ("run_id", "prompt_id", "condition", "round")
PROMPT_KEY = ("run_id", "prompt_id", "condition")

#: Columns whose absence makes a whole analysis impossible, with the logger
#: flag or hook that records them (used in "what to do" messages).
SUPPLIED_BY: Mapping[str, str] = {
    "topk_logq": "glance-log --drafter block|two_model (the default logger records topk_logq)",
    "target_rank": "glance-log (any drafter; the default logger records target_rank)",
    "match": "glance-log (any drafter; the default logger records match)",
    "min_path_margin": "glance-log (recorded by default)",
    "root_pmax": "glance-log (recorded by default)",
    "pred_entropy": "glance-log (recorded by default)",
    "round_ms": "glance-log (recorded by default)",
    "draft_passes": "glance-log (recorded by default)",
    "condition=mismatched": "glance-log --probe mismatched",
    "drafter=ar": "glance-log --baseline (runs the autoregressive arm)",
    "greedy_match": "glance-log --audit",
}


def columns(kind: str) -> tuple[Column, ...]:
    try:
        return COLUMNS_BY_KIND[kind]
    except KeyError:
        raise ValueError(f"unknown log kind {kind!r}; expected one of {', '.join(KINDS)}") from None


def column(kind: str, name: str) -> Column:
    for c in columns(kind):
        if c.name == name:
            return c
    raise KeyError(f"{name!r} is not a column of the {kind} contract")


def required_names(kind: str) -> tuple[str, ...]:
    return tuple(c.name for c in columns(kind) if c.required)


def arrow_schema(kind: str, names=None) -> pa.Schema:
    """The contract's Arrow schema for ``kind`` restricted to ``names`` (in contract order)."""
    cols = columns(kind)
    if names is not None:
        wanted = set(names)
        unknown = wanted - {c.name for c in cols}
        if unknown:
            raise KeyError(f"not columns of the {kind} contract: {', '.join(sorted(unknown))}")
        cols = tuple(c for c in cols if c.name in wanted)
    return pa.schema([pa.field(c.name, c.type, nullable=True) for c in cols])


def family_of(t: pa.DataType) -> str | None:
    """The value family of an Arrow type, or None when the contract has no such family."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return STRING
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_integer(t):
        return INT
    if pa.types.is_floating(t):
        return FLOAT
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = family_of(t.value_type)
        if inner == INT:
            return LIST_INT
        if inner == FLOAT:
            return LIST_FLOAT
    return None


def compatible(col: Column, t: pa.DataType) -> bool:
    """Whether a file's Arrow type can be read as the contract column."""
    # an integer list where floats are expected (or vice versa) is not accepted;
    # an int column stored as float is not accepted either (silent truncation).
    return family_of(t) == col.family


# --------------------------------------------------------------------------
# value checks (pure: Arrow table in, the first problem out; the reader in
# glance_law.io adds the file name and raises)
# --------------------------------------------------------------------------

#: Absolute tolerance of the float bounds (fp32 round-off: an entropy of -3e-7
#: or a log-probability of +1e-6 is accepted, -0.01 is not).
FLOAT_TOL = 1e-4

#: String columns whose nulls the reader fills with a default instead of failing.
FILLED_WHEN_NULL: Mapping[str, str] = {"condition": CONDITIONS_DEFAULT, "drafter": "unknown"}

_FIXES: Mapping[str, str] = {
    "root_entropy": "entropy is in nats from finite fp32 logits; fix the logger, or drop those rounds",
    "accepted": "accepted counts draft tokens only (bonus excluded) and lies in 0..horizon",
    "horizon": "horizon is the deepest offset offered to the verifier (>= 0)",
    "round": "round is the 0-based index of the round within its prompt",
    "match": "match holds 1 (hit), 0 (miss) or -1 (unknown) per offset",
    "target_rank": "target_rank is a 0-based rank, or -1 when unknown",
    "target_logq": "log-probabilities are <= 0 (NaN when unknown)",
    "topk_logq": "log-probabilities are <= 0, each row of k sorted descending",
}


@dataclass(frozen=True)
class Problem:
    """One contract violation: the column, what is wrong, and what to do (no file name)."""

    column: str
    problem: str
    fix: str


def _fix(name: str, default: str) -> str:
    return _FIXES.get(name, default) + " (see docs/schema.md)"


def check_type(kind: str, name: str, t: pa.DataType) -> Problem | None:
    """The problem with storing contract column ``name`` as Arrow type ``t``, if any."""
    col = column(kind, name)
    if compatible(col, t):
        return None
    hint = ""
    if col.family == INT and family_of(t) == FLOAT:
        hint = "; integer columns may not be stored as floats (values could be fractional)"
    return Problem(name, f"has type {t}, expected {col.type}{hint}",
                   "write it with the contract type, e.g. through glance_law.io.LogWriter "
                   "(see docs/schema.md)")


def _np(arr) -> np.ndarray:
    """A numpy view of a primitive (Chunked)Array; nulls become NaN (ints become float)."""
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 1:
            arr = arr.chunk(0)
        elif arr.num_chunks == 0:
            return np.zeros(0)
    return arr.to_numpy(zero_copy_only=False)


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _fmt(x) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.6g}"


def _check_numbers(col: Column, v: np.ndarray, row_of=None, what="value", nulls=None) -> Problem | None:
    """Bounds, NaN and inf of numbers ``v`` (scalars, or list elements mapped to rows by row_of);
    ``nulls``: a mask of null entries (read as NaN in ``v``), which are not NaN values."""
    row = (lambda i: i) if row_of is None else row_of
    if v.dtype.kind == "f":
        nan = np.isnan(v)
        if nulls is not None and col.nullable and not col.nan_ok:
            nan = nan & ~nulls
        if nan.any() and not ((col.nullable and col.nan_ok) or col.family == LIST_FLOAT):
            i = _first(nan)
            return Problem(col.name, f"{int(nan.sum())} {what}(s) are NaN (first at row {row(i)})",
                           _fix(col.name, "every row needs a finite value; fix the logger"))
        inf = np.isinf(v) & ~((v < 0) if col.neg_inf else np.zeros(v.shape, bool))
        if inf.any():
            i = _first(inf)
            return Problem(col.name, f"{int(inf.sum())} {what}(s) are inf (first at row {row(i)}: {v[i]})",
                           _fix(col.name, "values must be finite; fix the logger"))
        tol = FLOAT_TOL
    else:
        tol = 0
    with np.errstate(invalid="ignore"):
        if col.lo is not None:
            bad = v < col.lo - tol
            if bad.any():
                i = _first(bad)
                return Problem(col.name, f"{int(bad.sum())} {what}(s) below {_fmt(col.lo)} "
                                         f"(first at row {row(i)}: {_fmt(v[i])})",
                               _fix(col.name, f"the contract requires {col.name} >= {_fmt(col.lo)}; "
                                              "fix the logger"))
        if col.hi is not None:
            bad = v > col.hi + tol
            if bad.any():
                i = _first(bad)
                return Problem(col.name, f"{int(bad.sum())} {what}(s) above {_fmt(col.hi)} "
                                         f"(first at row {row(i)}: {_fmt(v[i])})",
                               _fix(col.name, f"the contract requires {col.name} <= {_fmt(col.hi)}; "
                                              "fix the logger"))
    return None


def _list_parts(arr) -> tuple[np.ndarray, np.ndarray, int]:
    """(lengths with -1 for null lists, flat element values, element null count)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks == 1 else (
            pa.concat_arrays(arr.chunks) if arr.num_chunks else pa.array([], arr.type))
    lengths = pc.list_value_length(arr).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = arr.flatten()
    return lengths, flat.to_numpy(zero_copy_only=False), flat.null_count


def _check_list(col: Column, arr, scalars) -> Problem | None:
    lengths, flat, elem_nulls = _list_parts(arr)
    if elem_nulls and col.family == LIST_INT:
        return Problem(col.name, f"{elem_nulls} null element(s) inside lists",
                       _fix(col.name, "mark unknown entries with -1, not null"))
    n_el = np.maximum(lengths, 0)
    ends = np.cumsum(n_el)

    def row_of(i):
        return int(np.searchsorted(ends, i, side="right"))

    p = _check_numbers(col, flat, row_of, "element")
    if p is not None:
        return p
    has = lengths >= 0
    if col.length in ("L", "Lk") and "horizon" in scalars:
        L = scalars["horizon"]
        if col.length == "L":
            bad = has & (lengths != L)
            rule = "one entry per offset 1..horizon; pad unknown offsets with -1 (NaN for log-probs)"
            what = "length differs from horizon"
        else:
            bad = has & np.where(L > 0, lengths % np.maximum(L, 1) != 0, lengths != 0)
            rule = "row-major horizon x k: the length must be a multiple of horizon"
            what = "length is not a multiple of horizon"
        if bad.any():
            i = _first(bad)
            return Problem(col.name, f"{int(bad.sum())} row(s) whose list {what} "
                                     f"(first at row {i}: length {lengths[i]}, horizon {_fmt(L[i])})",
                           _fix(col.name, rule))
        if col.length == "Lk" and flat.size:
            # each row of k values sorted descending (NaN entries are not compared)
            k = np.where(has & (L > 0), lengths // np.maximum(L, 1), 1).astype(np.int64)
            rows = np.repeat(np.arange(lengths.size), n_el)
            starts = ends - n_el
            j = (np.arange(flat.size) - starts[rows]) % k[rows]
            with np.errstate(invalid="ignore"):
                up = np.zeros(flat.size, bool)
                up[1:] = (j[1:] > 0) & (flat[1:] > flat[:-1] + FLOAT_TOL)
            if up.any():
                i = _first(up)
                return Problem(col.name, f"{int(up.sum())} value(s) out of descending order within "
                                         f"a top-k row (first at row {rows[i]})",
                               _fix(col.name, "sort each offset's k log-probabilities descending"))
    if col.length == "a+1" and "accepted" in scalars:
        bad = has & (lengths > scalars["accepted"] + 1)
        if bad.any():
            i = _first(bad)
            return Problem(col.name, f"{int(bad.sum())} row(s) with more than accepted + 1 entries "
                                     f"(first at row {i}: length {lengths[i]}, accepted "
                                     f"{_fmt(scalars['accepted'][i])})",
                           _fix(col.name, "committed holds the accepted tokens then the bonus token"))
    return None


def _utf8_problem(table: pa.Table) -> Problem | None:
    """A text column (any column, in or outside the contract) holding bytes that are not UTF-8."""
    for name in table.column_names:
        col = table.column(name)
        for chunk in col.chunks:
            arr = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
            if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
                break
            try:
                arr.validate(full=True)
            except (pa.ArrowInvalid, pa.ArrowException) as exc:
                return Problem(name, f"holds bytes that are not UTF-8 text ({str(exc).splitlines()[0][:80]})",
                               "text columns must be UTF-8: decode the source strings with their real encoding "
                               "(e.g. latin-1) before logging, or drop the file")
    return None


def check_values(kind: str, table: pa.Table) -> Problem | None:
    """The first contract violation among the contract columns present in ``table``.

    Checked: text columns are valid UTF-8 (every column), nulls (required columns never; optional ones unless nullable, except
    condition/drafter which the reader fills), numeric bounds, NaN/inf, list
    element bounds and list lengths against horizon/accepted, top-k row order,
    and accepted <= horizon. Columns outside the contract are not checked.
    """
    p = _utf8_problem(table)
    if p is not None:
        return p
    present = set(table.column_names)
    cols = [c for c in columns(kind) if c.name in present]
    for c in cols:
        nulls = table.column(c.name).null_count
        if nulls and not c.nullable and c.name not in FILLED_WHEN_NULL:
            i = _first(np.asarray(table.column(c.name).is_null()))
            fix = ("every row needs a value here; fix the logger or drop those rows" if c.required
                   else "record it for every row, or leave the column out")
            return Problem(c.name, f"{nulls} null value(s) (first at row {i})", fix)
    scalars: dict[str, np.ndarray] = {}
    for c in cols:
        if c.family in (INT, FLOAT):
            arr = table.column(c.name)
            v = _np(arr)
            scalars[c.name] = v
            nulls = np.asarray(arr.is_null()) if (arr.null_count and not c.nan_ok) else None
            p = _check_numbers(c, v, nulls=nulls)
            if p is not None:
                return p
    if "accepted" in scalars and "horizon" in scalars:
        a, L = scalars["accepted"], scalars["horizon"]
        bad = a > L
        if bad.any():
            i = _first(bad)
            return Problem("accepted", f"{int(bad.sum())} row(s) with accepted > horizon "
                                       f"(first at row {i}: accepted={_fmt(a[i])}, horizon={_fmt(L[i])})",
                           _fix("accepted", ""))
    if "depth" in scalars and "accepted" in scalars:
        a, d = scalars["accepted"], scalars["depth"]
        bad = a > d
        if "horizon" in scalars:
            bad = bad | (d > scalars["horizon"])
        if bad.any():
            i = _first(bad)
            return Problem("depth", f"{int(bad.sum())} row(s) with depth < accepted or depth > horizon "
                                    f"(first at row {i}: accepted={_fmt(a[i])}, depth={_fmt(d[i])})",
                           "depth is the deepest tree node: accepted <= depth <= horizon")
    for c in cols:
        if c.family in (LIST_INT, LIST_FLOAT):
            p = _check_list(c, table.column(c.name), scalars)
            if p is not None:
                return p
    return None
