"""The round-log contract, version 1.

One Parquet row per decoding round (file kind ``rounds``), one row per prompt
(file kind ``prompts``), and the reduced sufficient-statistics table (file kind
``reduced``, see :mod:`glance_law.reduce`). Every file carries three key-value
metadata entries:

``glance.kind``    ``rounds`` | ``prompts`` | ``reduced``
``glance.schema``  the contract version (``"1"``)
``glance.run``     JSON: tool version, target, drafter config, dtype, device,
                   temperature, seed, command line, created_at, library versions

This module is the single source of truth for column names, Arrow types,
which columns are required, and the value checks the reader applies. It does
no I/O (that is :mod:`glance_law.io`). ``docs/schema.md`` documents the same
table for people; a test keeps the two in sync.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa

SCHEMA_VERSION = "1"
SUPPORTED_VERSIONS = ("1",)

META_KIND = b"glance.kind"
META_SCHEMA = b"glance.schema"
META_RUN = b"glance.run"

KIND_ROUNDS = "rounds"
KIND_PROMPTS = "prompts"
KIND_REDUCED = "reduced"
KINDS = (KIND_ROUNDS, KIND_PROMPTS, KIND_REDUCED)

CONDITIONS_DEFAULT = "matched"

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

    @property
    def type_name(self) -> str:
        return str(self.type)


def _c(name, typ, family, required, doc, unit="", nullable=False):
    return Column(name, typ, family, required, doc, unit, nullable)


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
       "0-based index of the round within its prompt."),
    _c("root_entropy", pa.float32(), FLOAT, True,
       "Shannon entropy of the target's next-token distribution at the round root, "
       "from the raw fp32 logits (temperature 1).", "nats"),
    _c("accepted", pa.int16(), INT, True,
       "Draft tokens accepted this round, bonus token excluded (tau = accepted + 1). "
       "0 <= accepted <= horizon."),
    _c("horizon", pa.int16(), INT, True,
       "L: the deepest offset the verifier was offered this round (the depth of the "
       "candidate tree; the drafter's block length for a chain). The truncation point "
       "of the run-length law. 0 for autoregressive rounds."),
    # --- optional, standard ----------------------------------------------
    _c("condition", pa.string(), STRING, False,
       "Experimental condition; 'matched' when absent. The mismatched-image probe "
       "logs 'mismatched'."),
    _c("drafter", pa.string(), STRING, False,
       "Drafter name: block, pld, two_model, ar, or a hook's name."),
    _c("position", pa.int32(), INT, False,
       "Number of tokens generated before this round's root (0 for the first round).",
       "tokens"),
    _c("root_margin", pa.float32(), FLOAT, False,
       "Top-1 minus top-2 raw logit of the target at the round root.", "logits",
       nullable=True),
    _c("root_pmax", pa.float32(), FLOAT, False,
       "Largest probability of the target's root distribution.", "", nullable=True),
    _c("min_path_margin", pa.float32(), FLOAT, False,
       "Smallest top-1 minus top-2 logit margin of the target along the tokens "
       "committed this round (root and accepted nodes): the tie-aware audit's gate.",
       "logits", nullable=True),
    _c("budget", pa.int16(), INT, False,
       "Candidate tree size N offered to the verifier, root excluded.", "nodes"),
    _c("draft_passes", pa.int16(), INT, False,
       "Sequential drafter forward passes this round (1 for a one-pass block drafter, "
       "L for an autoregressive drafter, 0 model-free).", "passes"),
    _c("committed", pa.list_(pa.int32()), LIST_INT, False,
       "Token ids committed this round (accepted tokens then the bonus token)."),
    _c("match", pa.list_(pa.int8()), LIST_INT, False,
       "Per offset 1..L: 1 if the drafter's top-1 equals the target's token there, "
       "0 if not, -1 unknown (past the end of generation)."),
    _c("target_logq", pa.list_(pa.float32()), LIST_FLOAT, False,
       "Per offset 1..L: the drafter's log-probability of the target's token "
       "(NaN unknown).", "nats"),
    _c("target_rank", pa.list_(pa.int16()), LIST_INT, False,
       "Per offset 1..L: 0-based rank of the target's token under the drafter. Values "
       "below k index the row of topk_logq; values >= k mean outside the logged top-k; "
       "-1 unknown."),
    _c("topk_logq", pa.list_(pa.float32()), LIST_FLOAT, False,
       "The drafter's top-k log-probabilities per offset, row-major L x k, each row "
       "sorted descending (k = len / horizon).", "nats"),
    _c("copy_len", pa.int16(), INT, False,
       "Longest run of the tokens committed this round that occurs verbatim in the "
       "prompt's reference/context text (the copy regime).", "tokens", nullable=True),
    _c("draft_ms", pa.float32(), FLOAT, False, "Drafting time this round.", "ms",
       nullable=True),
    _c("verify_ms", pa.float32(), FLOAT, False, "Verification (target pass) time.", "ms",
       nullable=True),
    _c("round_ms", pa.float32(), FLOAT, False, "Whole round wall time.", "ms",
       nullable=True),
)

PROMPT_COLUMNS: tuple[Column, ...] = (
    _c("run_id", pa.string(), STRING, True, "Run identifier (as in the rounds file)."),
    _c("prompt_id", pa.string(), STRING, True, "Stable prompt identifier."),
    _c("task", pa.string(), STRING, True, "Task family."),
    _c("condition", pa.string(), STRING, False, "Condition; 'matched' when absent."),
    _c("drafter", pa.string(), STRING, False, "Drafter name."),
    _c("prompt_tokens", pa.int32(), INT, False, "Prompt length.", "tokens"),
    _c("new_tokens", pa.int32(), INT, False, "Tokens generated.", "tokens"),
    _c("prefill_ms", pa.float32(), FLOAT, False, "Prefill time.", "ms", nullable=True),
    _c("decode_ms", pa.float32(), FLOAT, False, "Decode-loop time (all rounds).", "ms",
       nullable=True),
    _c("rounds", pa.int32(), INT, False, "Decoding rounds for this prompt."),
    _c("stop_reason", pa.string(), STRING, False, "eos | max_new_tokens | stop_string."),
    _c("greedy_match", pa.bool_(), BOOL, False,
       "Audit: the output equals fp32 greedy decoding token for token (null if not audited).",
       nullable=True),
    _c("first_divergence", pa.int32(), INT, False,
       "Audit: index of the first generated token that differs from greedy decoding "
       "(-1 when equal, null if not audited).", "tokens", nullable=True),
    _c("divergence_margin", pa.float32(), FLOAT, False,
       "Audit: the target's top-1 minus top-2 logit margin at the first divergence "
       "(null when equal or not audited).", "logits", nullable=True),
    _c("tokens", pa.list_(pa.int32()), LIST_INT, False,
       "Generated token ids (the committed stream)."),
)

# The reduced table (sufficient statistics; see glance_law.reduce).
REDUCED_COLUMNS: tuple[Column, ...] = (
    _c("task", pa.string(), STRING, True, "Task family."),
    _c("drafter", pa.string(), STRING, True, "Drafter name."),
    _c("bucket", pa.int32(), INT, True,
       "Prompt bucket: hash of (task, prompt_id) modulo B; whole prompts stay together."),
    _c("hbin", pa.int32(), INT, True, "Fine entropy bin index."),
    _c("horizon", pa.int16(), INT, True, "L."),
    _c("accepted", pa.int16(), INT, True, "Accepted length."),
    _c("n", pa.int64(), INT, True, "Number of rounds in the cell."),
    _c("sum_h", pa.float64(), FLOAT, True, "Sum of root_entropy over the cell.", "nats"),
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
    fam = family_of(t)
    if fam == col.family:
        return True
    # an integer list where floats are expected (or vice versa) is not accepted;
    # an int column stored as float is not accepted either (silent truncation).
    return False
