"""The lossless audit with the tie-aware gate.

A greedy speculative decoder must commit exactly the target's greedy sequence
(Theorem 1); in finite precision it can only diverge where the target's top-1/top-2
logit margin is below the arithmetic's perturbation - a near-tie. Per prompt of a
speculative arm (drafter other than ``ar``, condition ``matched``) the audit takes

* the logger's own audit when present (prompt files: ``greedy_match``,
  ``first_divergence``, ``divergence_margin``, filled by ``glance-log --audit``), else
* a comparison of the committed tokens with the autoregressive arm's tokens for the
  same (task, prompt_id) (prompt ``tokens``, or, for a speculative prompt row without
  them, the rounds' ``committed`` lists in round order) when both arms are logged
  (``glance-log --baseline``).

When both are available they are cross-checked and disagreements are counted in the
notes. The margin of a divergence is the logged ``divergence_margin`` (the margin at the
divergent token itself) when present, else the ``min_path_margin`` of the speculative
round that committed that token. The latter is the smallest margin over the target rows
that produced the round's committed tokens, so it bounds the divergent token's margin
from below: a value above the threshold proves a wide-margin divergence, a value below it
flags the round (the paper's round-level tie-aware gate). A divergence is a **near-tie** when its margin is below
``threshold`` logits, **wide** otherwise, **unknown** without a margin. Verdict per task:
``lossless`` (no divergence), ``lossless up to ties`` (every divergence a near-tie),
``NOT lossless`` (a wide-margin divergence: a real bug), ``unverified`` (divergences
without margins).

Runs are never mixed. Every per-prompt object - a prompt row, its rounds, the stream
rebuilt from them, a round margin - is keyed by (run_id, drafter, task, prompt_id), so two
runs of one drafter in one input (two glance-log runs with different budgets or seeds) are
audited each on its own rounds. The autoregressive reference is still paired by
(task, prompt_id), across runs. When some drafter and task have several runs, the table has
one row per run and task (a ``run_id`` column, also in the divergence table) and the notes
name the runs; with one run per drafter and task the output is as before.

Which round committed a token. Output token i is index i of the prompt's ``tokens``.
In glance-log's logs (and ``dflash_hook``'s) the prefill produces token 0, which belongs
to no round, and round r commits tokens ``position + 1 .. position + len(committed)``: a
divergence at token 0 has no round margin, and the rounds' ``committed`` lists laid end to
end are the output from token 1 on, so they are compared with the ar arm's tokens from
token 1 on (token 0 unchecked; counted in the notes). The Hugging Face hook's round 0 is
verified together with the prefill and commits tokens ``0 .. len(committed) - 1`` (its
``position`` is 0); its later rounds follow the rule above. A log tells which by its
numbers: with two rounds or more, round 1's ``position`` minus round 0's is round 0's
commit count (glance-log) or one less (HF); otherwise the committed lists total the
prompt's token count minus one (glance-log) or the count itself (HF) (without
``committed``, an ``accepted + 1`` total of the count minus one still says glance-log).
When neither tells, a divergence gets a round margin only where both conventions name
the same round, and a stream rebuilt from rounds is not compared (counted in the notes).
Without ``position`` the rounds are laid end to end from round 0's first token. A round's
commit count is ``len(committed)`` (a round that ends the output commits no bonus token),
else ``accepted + 1``.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data.arms import arm_target, label_targets, plain_drafter
from glance_law.data.schema import SUPPLIED_BY
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.results.base import Result, TableResult

from . import common as E

__all__ = ["DEFAULT_TIE_THRESHOLD", "first_divergence", "audit", "AuditResult", "AuditDivergences",
           "cli_section", "add_cli_arguments"]

ANALYSIS = "the lossless audit"
#: Round columns the CLI section reads (``python -m glance_law.fit`` reads only these
#: besides the law's own and the contract's key columns).
CLI_COLUMNS = ("committed", "min_path_margin", "position", "accepted", "round")
#: Round columns the section cannot do without: none (it needs the prompt files of an audited run, checked inside).
NEEDS = ()
#: Default near-tie threshold (logits): bf16 rounding of logits of magnitude 10-30 is
#: 0.03-0.125, so margins under 0.1 can flip between packed and unpacked kernels.
DEFAULT_TIE_THRESHOLD = 0.1


def first_divergence(a, b) -> int:
    """Index of the first differing token of two sequences (-1 when equal; the shorter
    length when one is a strict prefix of the other)."""
    a = np.asarray(a if a is not None else [], dtype=np.int64)
    b = np.asarray(b if b is not None else [], dtype=np.int64)
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    if diff.size:
        return int(diff[0])
    return -1 if len(a) == len(b) else n


@dataclass(frozen=True, eq=False)
class AuditDivergences(TableResult):
    """One row per divergent prompt."""

    title: ClassVar[str] = "Lossless audit: divergences and their margins"


@dataclass(frozen=True, eq=False)
class AuditResult(Result):
    """Per (drafter, task; also run_id when a drafter has several runs on a task): audited prompts,
    greedy-equal prompts, divergences by margin class."""

    title: ClassVar[str] = "Lossless audit: speculative output vs greedy decoding (tie-aware)"
    frame: pd.DataFrame
    divergence_frame: pd.DataFrame
    threshold: float = DEFAULT_TIE_THRESHOLD
    extra_notes: tuple[str, ...] = field(default=())

    def to_frame(self) -> pd.DataFrame:
        return self.frame.copy()

    def divergences(self) -> AuditDivergences:
        return AuditDivergences(self.divergence_frame, extra_notes=
                                (f"near_tie: margin < {self.threshold:g} logits (the tie-aware gate)",))

    @property
    def notes(self) -> tuple[str, ...]:
        return self.extra_notes


def _missing(v) -> bool:
    """A missing cell (None, NaN, pd.NA); a list or an array is a value."""
    return v is None or v is pd.NA or (np.isscalar(v) and bool(pd.isna(v)))


def _commit_counts(sub: pd.DataFrame) -> np.ndarray:
    """Tokens each round committed: ``len(committed)`` where logged (a round that ends the
    output commits no bonus token), else ``accepted + 1``."""
    n = sub["accepted"].to_numpy(np.int64) + 1
    if "committed" in sub.columns:
        logged = np.array([not _missing(v) for v in sub["committed"]])
        n = np.where(logged, [len(v) if ok else 0 for v, ok in zip(sub["committed"], logged)], n)
    return n


#: What keys a prompt and its rounds: rounds of one prompt in two runs are two streams.
_KEY = ["drafter", "run_id", "task", "prompt_id"]


def _with_runs(P: pd.DataFrame, R: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The frames with ``run_id`` (a key column of both files in the contract). Frames built by
    hand without it are one run; only one of the two carrying it cannot be matched up."""
    if R is not None and ("run_id" in P.columns) != ("run_id" in R.columns):
        raise MissingColumnError("the 'run_id' column in both the prompt rows and the rounds (it tells which "
                                 "run's rounds belong to a prompt row)", ANALYSIS, "glance-log")
    if "run_id" not in P.columns:
        P = P.assign(run_id="")
        R = R.assign(run_id="") if R is not None else None
    return P, R


class _RoundIndex:
    """Speculative rounds grouped once by (run_id, drafter, task, prompt_id), in round order, and where
    their committed tokens sit in the generated output (see "Which round committed a token"
    in the module docstring)."""

    def __init__(self, rounds: pd.DataFrame | None):
        self.groups = {}
        if rounds is None or "accepted" not in rounds.columns:
            return
        r = rounds.loc[rounds["condition"] == "matched"]
        cols = [c for c in ("round", "accepted", "position", "min_path_margin", "committed") if c in r.columns]
        for key, sub in r[_KEY + cols].groupby(_KEY, sort=False):
            self.groups[key] = sub.sort_values("round")

    def stream(self, key) -> np.ndarray | None:
        """The rounds' ``committed`` lists laid end to end (None when any is missing)."""
        sub = self.groups.get(key)
        if sub is None or "committed" not in sub.columns:
            return None
        vals = sub["committed"].tolist()
        if any(_missing(v) for v in vals):
            return None
        return np.concatenate([np.asarray(v, dtype=np.int64) for v in vals]) if vals else np.zeros(0, np.int64)

    def first_index(self, key, n_out, stream) -> int | None:
        """Output index of round 0's first committed token: 1 in glance-log's convention (the
        prefill produced token 0, which no round holds), 0 in the Hugging Face hook's (round 0
        is verified with the prefill and commits token 0); None when the log does not tell.
        ``n_out``: the prompt's generated-token count, or None; ``stream``: ``self.stream(key)``."""
        sub = self.groups.get(key)
        if sub is None or not len(sub):
            return None
        n = _commit_counts(sub)
        if len(sub) >= 2 and "position" in sub.columns and sub["position"].notna().all():
            step = int(sub["position"].iloc[1]) - int(sub["position"].iloc[0])
            found = {int(n[0]): 1, int(n[0]) - 1: 0}.get(step)
            if found is not None:
                return found
        if n_out is not None and stream is not None:
            return {int(n_out) - 1: 1, int(n_out): 0}.get(int(n.sum()))
        if n_out is not None and int(n.sum()) == int(n_out) - 1:
            return 1        # accepted + 1 per round: a last round that ended the output may count one more
        return None

    def _round_of(self, sub, pos, first) -> int | None:
        n = _commit_counts(sub)
        if "position" in sub.columns and sub["position"].notna().all():
            start = sub["position"].to_numpy(np.int64) + 1
            start[0] += first - 1
        else:
            start = first + np.r_[0, np.cumsum(n)[:-1]]
        hit = np.flatnonzero((start <= pos) & (pos < start + n))
        return int(hit[0]) if hit.size else None

    def margin(self, key, pos, first) -> float:
        """min_path_margin of the speculative round that committed output token ``pos``; NaN when
        no round did (glance-log's token 0 came from the prefill) or, with ``first`` None (the
        convention unknown), when the two conventions name different rounds."""
        sub = self.groups.get(key)
        if sub is None or not len(sub) or "min_path_margin" not in sub.columns:
            return np.nan
        hits = {self._round_of(sub, pos, f) for f in ((0, 1) if first is None else (first,))}
        if len(hits) != 1 or None in hits:
            return np.nan
        v = sub["min_path_margin"].to_numpy(float)[hits.pop()]
        return float(v) if np.isfinite(v) else np.nan


def _n_out(row: dict, tok) -> int | None:
    """The prompt's generated-token count: its logged ``tokens``, else ``new_tokens``."""
    if tok is not None:
        return len(tok)
    nt = row.get("new_tokens")
    return None if nt is None or pd.isna(nt) else int(nt)


def audit(prompts: pd.DataFrame, rounds: pd.DataFrame | None = None, *,
          threshold: float = DEFAULT_TIE_THRESHOLD, by: str | None = "task") -> AuditResult:
    """Per-task lossless audit with near-tie labelling (see the module docstring).

    Parameters
    ----------
    prompts : DataFrame
        The prompt files (``read_logs(paths, "prompts").frame``) with the greedy match columns.
    rounds : DataFrame, optional
        The rounds of the same runs (for the near-tie margins).
    threshold : float, default 0.1
        The top-2 log-probability margin below which a divergence counts as a near-tie.
    by : str, default "task"
        "task": one row per task (and drafter); "none": one pooled row per drafter (task "pooled").

    Returns
    -------
    AuditResult
        Per task: outputs equal to greedy decoding, divergences, near-ties; ``divergences()``.

    Examples
    --------
    >>> import glance_law as gl  # doctest: +SKIP
    >>> res = gl.audit(gl.read_logs("logs/", "prompts").frame)  # doctest: +SKIP
    """
    if threshold < 0:
        raise GlanceError("the near-tie threshold must be >= 0 logits")
    if prompts is None or not len(prompts):
        raise MissingColumnError("prompt files (kind=prompts)", ANALYSIS, "glance-log --audit")
    notes: list[str] = []
    spec, ar_tokens, R = _audit_inputs(prompts, rounds, notes)
    pp = _audit_prompts(spec, ar_tokens, _RoundIndex(R), threshold, notes)
    runs = pp.groupby(["drafter", "task"])["run_id"].unique()
    several = runs.loc[runs.map(len) > 1]
    if len(several):
        shown = "; ".join(f"{d}/{t}: {', '.join(sorted(r))}" for (d, t), r in several.items())
        notes.append(f"several runs of one drafter on one task ({shown}): each run is audited on its own rounds "
                     "and prompt rows, one row per run (run_id); every run is compared with the same "
                     "autoregressive reference (the ar arm's tokens for the task and prompt_id)")
    else:
        pp = pp.drop(columns="run_id")
    lead = (["drafter"] if pp["drafter"].nunique() > 1 else []) + (["run_id"] if len(several) else [])
    rows = _audit_rows(pp, lead, not E.by_columns(by))
    n_not = int((pp["audited"] == False).sum())  # noqa: E712
    if n_not:
        notes.append(f"{n_not} prompt(s) neither audited by the logger nor pairable with an ar arm's tokens "
                     "(counted in prompts, not in audited)")
    notes.append(f"near_tie: divergence margin < {threshold:g} logits (top-1 minus top-2 of the target); "
                 "wide-margin divergences break Theorem 1 and indicate a decoder bug")
    divs = pp.loc[(pp["audited"] == True) & (pp["equal"] == False)] if "equal" in pp.columns else pp.iloc[0:0]  # noqa: E712
    divs = divs.drop(columns=[c for c in ("audited", "equal") if c in divs.columns]).reset_index(drop=True)
    return AuditResult(pd.DataFrame(rows), divs, float(threshold), tuple(notes))


def _audit_inputs(prompts: pd.DataFrame, rounds: pd.DataFrame | None, notes: list[str]):
    """The speculative prompts to audit, the autoregressive arm's tokens by (target, task,
    prompt_id) and the rounds (arms labelled ``drafter @ target`` with several targets); one line
    when there is nothing to audit against."""
    # several target models: arms "drafter @ target" on both sides, and each speculative prompt is
    # compared with the autoregressive output of its own target (glance_law.data.arms)
    P = label_targets(E.with_arm_labels(prompts), notes)
    R = label_targets(E.with_arm_labels(rounds)) if rounds is not None else None
    P, R = _with_runs(P, R)
    plain, tgt = plain_drafter(P["drafter"]), arm_target(P["drafter"])
    P = P.assign(audit_target=tgt)
    spec = P.loc[(plain != "ar") & (P["condition"] == "matched")]
    if not len(spec):
        raise MissingColumnError("prompts of a speculative arm (drafter other than ar)", ANALYSIS, "glance-log")
    ar = P.loc[(plain == "ar") & (P["condition"] == "matched")]
    has_logged = "greedy_match" in spec.columns and spec["greedy_match"].notna().any()
    ar_tokens = {}
    if "tokens" in ar.columns:
        dup = ar.duplicated(["audit_target", "task", "prompt_id"])
        if dup.any():
            notes.append(f"{int(dup.sum())} repeated autoregressive prompt(s): the first is the reference")
        for row in ar.loc[~dup].itertuples(index=False):
            if row.tokens is not None:
                ar_tokens[(row.audit_target, row.task, row.prompt_id)] = np.asarray(row.tokens, dtype=np.int64)
    if not has_logged and not ar_tokens:
        raise MissingColumnError("either greedy_match (the logger's audit) or the autoregressive arm's tokens",
                                 ANALYSIS, f"{SUPPLIED_BY['greedy_match']} or {SUPPLIED_BY['drafter=ar']}")
    return spec, ar_tokens, R


def _audit_prompts(spec: pd.DataFrame, ar_tokens: dict, index: _RoundIndex, threshold: float,
                   notes: list[str]) -> pd.DataFrame:
    """One row per speculative prompt: audited or not, equal, first divergence, its margin and
    label (near-tie, wide, unknown) and where the verdict came from; notes on how they were found."""
    per_prompt = []
    tally = {"disagree": 0, "second": 0, "unaligned": 0}
    for row in spec.to_dict("records"):
        per_prompt.append(_audit_prompt(row, ar_tokens, index, threshold, tally))
    pp = pd.DataFrame(per_prompt, columns=_KEY + ["audited", "equal", "first_divergence", "margin", "margin_source",
                                                  "label", "source"])
    if tally["disagree"]:
        notes.append(f"{tally['disagree']} prompt(s) where the logged audit and the token comparison disagree "
                     "(the logged audit is reported)")
    if tally["second"]:
        notes.append(f"{tally['second']} prompt(s) compared from the rounds' committed tokens from the second "
                     "token on (glance-log's rounds do not hold the first token: the prefill produced it)")
    if tally["unaligned"]:
        notes.append(f"{tally['unaligned']} prompt(s) without tokens whose rounds could not be aligned with the "
                     "output (neither two rounds with position nor the prompt's new_tokens tell whether round 0 "
                     "holds the first token): not audited")
    return pp


def _audit_prompt(row: dict, ar_tokens: dict, index: _RoundIndex, threshold: float, tally: dict) -> dict:
    """One speculative prompt's audit row: the logger's own audit when logged, else its tokens (or
    its rounds' committed tokens) against the autoregressive arm's; ``tally`` counts the notes' cases."""
    key = (row["audit_target"], row["task"], row["prompt_id"])
    rkey = tuple(row[k] for k in _KEY)
    logged = row.get("greedy_match")
    logged = None if _missing(logged) else bool(logged)
    tok = row.get("tokens")
    tok = None if _missing(tok) else tok
    stream = index.stream(rkey)              # the rounds' committed tokens, built once per prompt
    first = index.first_index(rkey, _n_out(row, tok), stream)
    tok_div = None
    if key in ar_tokens and tok is not None:
        tok_div = first_divergence(tok, ar_tokens[key])
    elif key in ar_tokens and stream is not None:
        # the rounds hold the output from index `first` on: compare like with like
        if first is None:
            tally["unaligned"] += logged is None
        else:
            fd = first_divergence(stream, ar_tokens[key][first:])
            tok_div = -1 if fd == -1 else fd + first
            tally["second"] += first
    if logged is not None:
        equal = logged
        fd = row.get("first_divergence")
        div = None if equal else (int(fd) if fd is not None and not pd.isna(fd) else tok_div)
        source = "logged audit"
        if tok_div is not None and (tok_div == -1) != equal:
            tally["disagree"] += 1
    elif tok_div is not None:
        equal = tok_div == -1
        div = None if equal else tok_div
        source = "tokens vs ar arm"
    else:
        return {**{k: row[k] for k in _KEY}, "audited": False}
    margin, msource = np.nan, ""
    if not equal:
        dm = row.get("divergence_margin")
        if dm is not None and not pd.isna(dm):
            margin, msource = float(dm), "divergence_margin"
        elif div is not None:
            margin = index.margin(rkey, div, first)
            msource = "round min_path_margin" if np.isfinite(margin) else ""
    label = "" if equal else ("unknown" if not np.isfinite(margin) else
                              ("near-tie" if margin < threshold else "wide"))
    return {**{k: row[k] for k in _KEY}, "audited": True, "equal": equal, "first_divergence": div,
            "margin": margin, "margin_source": msource, "label": label, "source": source}


def _audit_rows(pp: pd.DataFrame, lead: list[str], pooled: bool) -> list[dict]:
    """The audit table's rows: one per ``lead`` group and task (``pooled``: task "pooled") with its
    counts, first-divergence positions and verdict."""
    rows = []
    groups = pp.groupby(lead, sort=True) if pooled and lead else \
        ([((), pp)] if pooled else pp.groupby(lead + ["task"], sort=True))
    for key, sub in groups:
        key = key if isinstance(key, tuple) else (key,)
        key = key + ((E.GROUP_ALL,) if pooled else ())
        aud = sub.loc[sub["audited"] == True]  # noqa: E712
        div = aud.loc[aud["equal"] == False]  # noqa: E712
        n_tie = int((div["label"] == "near-tie").sum())
        n_wide = int((div["label"] == "wide").sum())
        n_unk = int((div["label"] == "unknown").sum())
        pos = pd.to_numeric(div["first_divergence"], errors="coerce").dropna()
        if not len(aud):
            verdict = "not audited"
        elif not len(div):
            verdict = "lossless"
        elif n_wide:
            verdict = "NOT lossless"
        elif n_unk:
            verdict = "unverified"
        else:
            verdict = "lossless up to ties"
        rows.append({**dict(zip(lead + ["task"], key)), "prompts": len(sub), "audited": len(aud),
                     "equal": int((aud["equal"] == True).sum()),  # noqa: E712
                     "equal_share": float((aud["equal"] == True).mean()) if len(aud) else np.nan,  # noqa: E712
                     "divergences": len(div), "near_tie": n_tie, "wide": n_wide, "unknown_margin": n_unk,
                     "first_divergence_min": int(pos.min()) if len(pos) else None,
                     "first_divergence_median": float(pos.median()) if len(pos) else np.nan,
                     "verdict": verdict})
    return rows


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("lossless audit (--audit)")
    g.add_argument("--tie-threshold", type=float, default=DEFAULT_TIE_THRESHOLD, metavar="LOGITS",
                   help="a divergence whose target top-1/top-2 margin is below this is a near-tie "
                        f"(default {DEFAULT_TIE_THRESHOLD:g})")


def cli_section(logs, args: argparse.Namespace) -> list[Result]:
    from glance_law.data.declare import horizon_of
    prompts = E.prompt_table(logs, ANALYSIS, horizon=horizon_of(args))
    res = audit(prompts, E.as_frame(logs), threshold=float(getattr(args, "tie_threshold", DEFAULT_TIE_THRESHOLD)),
                by="task" if E.cli_by(args) else "none")     # --by none: one pooled row per drafter
    return [res, res.divergences()]
