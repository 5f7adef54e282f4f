"""The table every log allows: per group, how many rounds and prompts, how much is accepted.

:func:`group_summary` needs only the contract's required counting columns (``task``,
``prompt_id``, ``accepted``, ``horizon``): it runs on logs that carry no root entropy, no
match vectors and no timing (Spec-Bench/EAGLE/Medusa answers, vLLM/SGLang exports). Per
group (per drafter when the logs hold several, then a pooled row per drafter):

* ``rounds``, ``prompts``;
* ``horizon`` (the largest L) and ``horizon_min`` (they differ for adaptive drafts);
* ``mean_accepted`` and ``tau`` = mean accepted + 1 over the drafted rounds (tokens committed
  per drafted round, bonus included), with prompt-clustered CR1 intervals (t with G-1 df);
* ``no_draft_rounds`` (rounds of the drafter with horizon 0: nothing drafted, e.g. prompt
  lookup without a match) and ``tokens_per_round`` = mean accepted + 1 over every round, those
  included (one token each): the tokens a verify pass commits, what speed depends on, which
  tau overstates when many rounds draft nothing;
* ``p_full`` = P(a = L): the share of rounds that accepted their whole draft (each round
  against its own horizon), with the CR1 interval on the logit scale;
* when the logs carry ``root_entropy``: ``mean_entropy`` and ``low_entropy_share``, the
  share of rounds whose root entropy is below :data:`LOW_ENTROPY` nats (the spread the
  law's slope is fitted on: see :mod:`glance_law.results.explain`); empty otherwise.

Only drafted rounds (horizon > 0) of the matched condition enter; exclusions are noted. A round
whose horizon an importer cut to its accepted run at the end of an output (Spec-Bench's last
step of a turn) is read at the depth it drafted (``drafted_horizon``), so tau is the mean over
every verification round, as Spec-Bench reports it, and P(a = L) counts a round as full only
if it reached the drafted depth (:func:`glance_law.data.selection.with_drafted_horizons`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data.arms import label_targets
from glance_law.data.selection import (
    DRAFTED_NOTE,
    POOLED,
    TOKENS_PER_ROUND_NOTE,
    no_draft_rounds,
    tokens_per_round,
    with_drafted_horizons,
)
from glance_law.errors import GlanceError
from glance_law.results.base import TableResult
from glance_law.stats.cluster import clustered_mean, t_crit

from . import common as E

__all__ = ["group_summary", "GroupSummary", "LOW_ENTROPY", "NEEDS", "SUMMARY_COLUMNS"]

ANALYSIS = "the per-group summary"
#: Columns this analysis needs (beyond none: they are the contract's required counting columns).
NEEDS = ("accepted", "horizon")
#: Root entropy (nats) below which a round counts as "near zero" in ``low_entropy_share``.
LOW_ENTROPY = 0.05
SUMMARY_COLUMNS = ("drafter", "task", "rounds", "prompts", "horizon", "horizon_min", "mean_accepted",
                   "mean_accepted_lo", "mean_accepted_hi", "tau", "tau_lo", "tau_hi", "no_draft_rounds",
                   "tokens_per_round", "p_full", "p_full_lo",
                   "p_full_hi", "mean_entropy", "low_entropy_share")


@dataclass(frozen=True, eq=False)
class GroupSummary(TableResult):
    """Per group: rounds, prompts, horizon, mean accepted length, tau and P(a = L)."""

    title: ClassVar[str] = "accepted length per group (every log allows this table)"
    has_entropy: bool = False
    by: str | None = "task"

    def rows(self, drafter: str | None = None) -> pd.DataFrame:
        f = self.frame
        return f if drafter is None else f.loc[f["drafter"] == drafter]

    display_keep: ClassVar[tuple[str, ...]] = ("drafter", "task", "mean_accepted", "tau", "tokens_per_round",
                                               "p_full")

    def display_frame(self) -> pd.DataFrame:
        """Human formats: tau as a point (its interval is mean_accepted's shifted by 1), no constant
        columns (a single drafter, equal horizons, entropy columns without entropy)."""
        f = self.frame
        drop = ["tau_lo", "tau_hi"] + ([] if f["drafter"].nunique() > 1 else ["drafter"])
        if not f["no_draft_rounds"].any():           # every round drafted: tokens_per_round = tau
            drop += ["no_draft_rounds", "tokens_per_round"]
        if not self.has_entropy:
            drop += ["mean_entropy", "low_entropy_share"]
        if (f["horizon"] == f["horizon_min"]).all():
            drop.append("horizon_min")
        return f.drop(columns=drop)


def _row(a, L, H, codes, G, level) -> dict:
    t = t_crit(G, level) if G >= 2 else np.nan
    ma, sa, _ = clustered_mean(a, codes, G)
    full = (a >= L).astype(np.float64)
    pf, sp, gp = clustered_mean(full, codes, G)
    pf_lo, pf_hi = E.proportion_ci(pf, sp, gp, level)
    row = {"rounds": int(a.size), "prompts": int(G), "horizon": int(L.max()), "horizon_min": int(L.min()),
           "mean_accepted": ma, "mean_accepted_lo": ma - t * sa, "mean_accepted_hi": ma + t * sa,
           "tau": ma + 1.0, "tau_lo": ma + 1.0 - t * sa, "tau_hi": ma + 1.0 + t * sa,
           "p_full": pf, "p_full_lo": pf_lo, "p_full_hi": pf_hi,
           "mean_entropy": np.nan, "low_entropy_share": np.nan}
    if H is not None:
        row["mean_entropy"] = float(H.mean())
        row["low_entropy_share"] = float(np.mean(H < LOW_ENTROPY))
    return row


def _numbers(s: pd.Series) -> np.ndarray:
    v = s.to_numpy()
    return v if v.dtype.kind in "iuf" else s.to_numpy(np.float64)


def _dense(codes: np.ndarray, G: int) -> tuple[np.ndarray, int]:
    """Cluster codes of a subset renumbered 0..g-1 in their order (as :func:`cluster_codes` numbers
    the subset's own clusters: sorted by task, prompt_id)."""
    present = np.zeros(G, dtype=bool)
    present[codes] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return rank[codes], int(rank[-1] + 1) if G else 0


def _groups(drafters: pd.Series, groups: pd.Series | None, a_all, L_all, H_all, codes, G: int):
    """(drafter, group label, (a, L, H, cluster codes, G)) per group of ``groups`` (sorted by
    label; none when None) and then the drafter's pooled row, from integer codes: no per-group
    frame is built, and a group's arrays exist only while its row is computed (the peak memory of
    the summary at 10^7 rounds)."""
    dc, dlab = E.string_codes(drafters)
    for d in sorted(np.flatnonzero(np.bincount(dc, minlength=len(dlab))), key=lambda i: dlab[i]):
        didx = None if len(dlab) == 1 or bool((dc == d).all()) else np.flatnonzero(dc == d)
        if groups is not None:
            gc, glab = E.string_codes(groups if didx is None else groups.iloc[didx])
            for g in sorted(np.flatnonzero(np.bincount(gc, minlength=len(glab))), key=lambda i: glab[i]):
                idx = np.flatnonzero(gc == g)
                yield str(dlab[d]), str(glab[g]), _arrays(a_all, L_all, H_all, codes, G,
                                                          idx if didx is None else didx[idx])
            del gc
        yield str(dlab[d]), E.GROUP_ALL, _arrays(a_all, L_all, H_all, codes, G, didx)


def _arrays(a, L, H, codes, G, rows):
    """(a, L, H, cluster codes, G) of the rounds ``rows`` (None: all of them, not copied)."""
    if rows is not None:
        a, L, H = a[rows], L[rows], None if H is None else H[rows]
        codes, G = _dense(codes[rows], G)
    if H is not None:
        finite = np.isfinite(H)
        H = H if finite.all() else H[finite]
        H = H if H.size else None
    return a, L, H, codes, G


def _no_draft(frame: pd.DataFrame, keep: list[str], by: str | None) -> dict:
    """:func:`no_draft_rounds` (matched condition) from the rounds that drafted nothing alone: only
    they are labelled (strings per row), not every round (0.9 s and ~1 GB at 10^7 rounds otherwise)."""
    if "horizon" not in frame.columns:
        return {}
    zero = pd.to_numeric(frame["horizon"], errors="coerce").to_numpy() == 0
    if not zero.any():
        return {}
    return no_draft_rounds(E.with_arm_labels(frame.loc[zero, keep]), by, ("matched",))


def has_entropy(frame: pd.DataFrame) -> bool:
    """Whether the rounds carry a measured root entropy (the column present and not all null)."""
    return "root_entropy" in frame.columns and bool(frame["root_entropy"].notna().any())


def group_summary(rounds, by: str | None = "task", level: float = 0.95) -> GroupSummary:
    """Rounds, prompts, horizon, mean accepted length and tau (prompt-clustered CR1 intervals) and
    P(a = L) per group and pooled (per drafter); see the module docstring."""
    notes: list[str] = []
    frame = getattr(rounds, "frame", rounds)
    if isinstance(frame, pd.DataFrame):
        frame = label_targets(frame, notes)       # several target models: arm = drafter @ target
    frame = E.as_frame(frame)
    E.require(frame, ("task", "prompt_id") + NEEDS, ANALYSIS)
    frame, restored = with_drafted_horizons(frame)   # every verification round, at the depth it drafted
    if restored.any():
        notes.append(DRAFTED_NOTE.format(n=int(restored.sum())))
    if by is not None and by not in frame.columns:
        frame = E.with_arm_labels(frame)              # a missing drafter/condition is filled in first
        if by not in frame.columns:
            raise GlanceError(f"cannot group by '{by}': the logs have no such column")
    keep = [c for c in dict.fromkeys(["drafter", "task", "prompt_id", "condition", by, "accepted", "horizon",
                                      "root_entropy"]) if c is not None and c in frame.columns]
    nd = _no_draft(frame, keep, by)                                              # what tau leaves out
    frame = E.with_arm_labels(E.speculative_rounds(frame[keep], notes), categorical=True)
    if not len(frame):
        raise GlanceError(f"{ANALYSIS}: no drafted rounds (horizon > 0) in the matched condition: the logs hold an "
                          "autoregressive arm (ar, vanilla, baseline) only, or another condition (--condition all); "
                          "an autoregressive run is the baseline of python -m glance_law.fit SPECULATIVE_LOGS "
                          "--timing 'BASELINE_GLOB'")
    ent = has_entropy(frame)
    if ent and frame["root_entropy"].isna().any():
        n = int(frame["root_entropy"].isna().sum())
        notes.append(f"{n} round(s) without a root entropy: mean_entropy and low_entropy_share use the others")
    codes, G = E.clusters(frame)
    # a and L in their logged integer types (clustered_mean reads them as float64; a >= L, min and max
    # are the same on either): 160 MB less per 10^7 rounds than float64 copies
    columns = (_numbers(frame["accepted"]), _numbers(frame["horizon"]),
               frame["root_entropy"].to_numpy(np.float64) if ent else None, codes, G)
    drafters, groups = frame["drafter"], (None if by is None else frame[by])
    del frame, codes                               # the rows' other columns are not needed any more
    rows = []
    for d, g, arrays in _groups(drafters, groups, *columns):
        row = _row(*arrays, level)
        n0 = nd.get((d, POOLED if g == E.GROUP_ALL else g), 0.0)
        row.update(no_draft_rounds=int(round(n0)), tokens_per_round=float(tokens_per_round(row["tau"], row["rounds"], n0)))
        rows.append({"drafter": d, "task": g, **row})
    notes.append(f"intervals: {100 * level:g}%, prompt-clustered CR1 (cluster = task, prompt_id), t with G-1 df; "
                 "p_full = P(a = L), the share of rounds that accepted their whole draft (each against its own "
                 "horizon), interval on the logit scale")
    notes.append(TOKENS_PER_ROUND_NOTE)
    if ent:
        notes.append(f"low_entropy_share: share of rounds with root entropy below {LOW_ENTROPY:g} nats")
    frame_out = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    return GroupSummary(frame_out, float(level), tuple(dict.fromkeys(notes)), has_entropy=ent, by=by)
