"""Per-turn inputs in the commands: answers that log per-turn counts and no per-step lengths.

The EAGLE/Medusa/Hydra repositories' own answer files (per-turn ``idxs``, ``new_tokens``,
``wall_time``) import as prompt rows only (:data:`glance_law.data.io.PROMPTS_ONLY`). On them
``python -m glance_law.fit`` prints the per-turn tau table (:func:`glance_law.evidence.turns.turn_tau`)
as its summary and the timing ledger against a baseline among the inputs (the autoregressive
arm) or given with ``--timing``; ``python -m glance_law.report`` writes the same two sections.
Every other analysis needs per-step rows and says so in one line (:func:`needs_steps`).
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from glance_law.data.io import LogSet, per_turn_only, read_logs
from glance_law.errors import GlanceError

__all__ = ["WHAT", "REPORT_SECTIONS", "CLOSING", "BASELINE_CLOSING", "baseline_alone", "prompts_baseline_alone", "baseline_section_reason", "law_reason", "closing", "needs_steps", "read_prompts", "per_turn_only", "baseline_split",
           "timing", "fit_tables"]

#: What the inputs are, in the lines of the analyses that cannot run on them.
WHAT = "the inputs hold per-turn counts without per-step lengths (new_tokens and verification steps per turn)"
#: The sections of ``python -m glance_law.report`` that run on per-turn counts.
REPORT_SECTIONS = ("summary", "timing")
#: The closing line of ``python -m glance_law.fit`` on per-turn counts.
CLOSING = ("Next: per-turn counts allow this table and the timing ledger (a baseline file among the inputs, or "
           "--timing BASELINE_GLOB); the law, --tail, --order and the other sections, reduce and policy need "
           "per-step accept_lengths (Spec-Bench's evaluation scripts and glance-log record them).")


#: The closing line of ``python -m glance_law.fit`` on an autoregressive baseline alone.
BASELINE_CLOSING = ("Next: these logs are an autoregressive baseline (one token per step, nothing drafted): the law, "
                    "the sections, reduce and policy need a speculative arm's rounds; compare one with this baseline: "
                    "python -m glance_law.fit SPECULATIVE_PATHS --timing THESE_PATHS (or give both as inputs).")


def baseline_alone(summary) -> bool:
    """Whether a per-turn summary tabulates the autoregressive arm only (its inputs hold nothing else)."""
    from glance_law.data.arms import plain_drafter
    d = summary.to_frame()["drafter"]
    return bool(len(d)) and bool((plain_drafter(d.astype(str)) == "ar").all())


def prompts_baseline_alone(prompts: pd.DataFrame | None) -> bool:
    """Whether prompt rows hold the autoregressive arm only (a baseline given alone)."""
    from glance_law.data.arms import plain_drafter
    if prompts is None or not len(prompts) or "drafter" not in prompts.columns:
        return False
    return bool((plain_drafter(prompts["drafter"].astype(str)) == "ar").all())


def baseline_section_reason(name: str) -> str:
    """Why a report section other than the summary is not run on a baseline alone."""
    return (f"{name} needs a speculative arm; the inputs hold the autoregressive baseline only (one token per step, "
            "nothing drafted): give a speculative run's logs beside them (the timing section then pairs the two)")


def law_reason(summary) -> str:
    """Why the law is not run on the per-turn inputs of ``summary``."""
    if baseline_alone(summary):
        return ("the law needs drafted rounds (horizon > 0); the inputs hold the autoregressive baseline only "
                "(one token per step)")
    return needs_steps("the law")


def closing(summary) -> str:
    """The closing line of ``python -m glance_law.fit`` on the per-turn inputs of ``summary``."""
    return BASELINE_CLOSING if baseline_alone(summary) else CLOSING


def needs_steps(name: str) -> str:
    """The one-line reason a per-step analysis ``name`` is not run on per-turn counts."""
    return (f"{name} needs per-step rows (the accepted length of every verification step); {WHAT}, which allow "
            "the summary (tokens per step per turn and prompt) and the timing ledger only")


def read_prompts(paths, skip_bad: bool = False, horizon=None) -> LogSet:
    """The prompt rows among ``paths`` (imported answers included), as the per-turn analyses read them."""
    return read_logs(list(paths), "prompts", skip_bad=skip_bad, horizon=horizon)


def baseline_split(prompts: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """(the autoregressive arm's rows or None, the other arms' rows) of a prompt frame."""
    from glance_law.data.arms import plain_drafter
    if "drafter" not in prompts.columns:
        return None, prompts
    ar = (plain_drafter(prompts["drafter"]) == "ar").to_numpy()
    return (prompts.loc[ar] if ar.any() else None), prompts.loc[~ar]


def timing(prompts: pd.DataFrame, baseline: pd.DataFrame | None, *, n_boot: int, seed: int, level: float):
    """The timing ledger of the speculative arms over ``baseline`` (default: the inputs' own
    autoregressive arm), or None when there is no baseline."""
    from glance_law.evidence.timing import timing_ledger
    own, cand = baseline_split(prompts)
    base = baseline if baseline is not None else own
    if base is None:
        return None
    res = timing_ledger(base, cand if baseline is None else prompts, n_boot=n_boot, seed=seed, level=level)
    note = "per-turn counts: no round-cost regression (it needs per-round times)"
    return replace(res, extra_notes=res.extra_notes + (note,))


def fit_tables(paths, args, mods, from_steps: bool = False):
    """``python -m glance_law.fit`` on per-turn counts: (summary, sections, skipped, notes).
    ``from_steps``: the inputs carried per-step rows, none drafted (an autoregressive arm's)."""
    from glance_law.cli.common import horizon_of
    from glance_law.evidence.common import with_run_target
    from glance_law.evidence.turns import turn_tau
    logs = read_prompts(paths, args.skip_bad, horizon_of(args))
    prompts = with_run_target(logs)
    summary = turn_tau(prompts, by=args.by, level=args.level, from_steps=from_steps)
    summary = replace(summary, extra_notes=tuple(dict.fromkeys(tuple(logs.notes) + summary.extra_notes)))
    alone = baseline_alone(summary)
    skipped = [("law", law_reason(summary))]
    sections = []
    given = getattr(args, "timing", None)
    if alone and not given:          # the baseline itself: no candidate arm to time
        skipped += [(flag, f"{flag} needs a speculative arm's rounds; {law_reason(summary).split('; ', 1)[1]}")
                    for flag, _mod in mods]
        return summary, sections, skipped, logs
    base = with_run_target(read_logs(given, kind="prompts", horizon=horizon_of(args))) if given else None
    boot = int(getattr(args, "timing_bootstrap", 8000))
    try:
        res = timing(prompts, base, n_boot=boot, seed=args.seed, level=args.level)
    except GlanceError as exc:
        if given:
            raise
        res = None
        skipped.append(("--timing", f"the timing ledger could not be computed: {' '.join(str(exc).split())}"))
    if res is not None:
        sections.append(("timing", [res]))
    for flag, _mod in mods:
        if flag != "--timing":
            skipped.append((flag, needs_steps(flag)))
    return summary, sections, skipped, logs
