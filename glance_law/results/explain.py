"""Plain sentences that say what a fit shows and why: the first lines of ``python -m glance_law.fit``.

Formatting only: every sentence is built from fields of the result objects (the per-group
summary's frame, the law's table and checks, the list of skipped sections); nothing is
computed here beyond choosing words. One sentence per group (per drafter and task): how much
the drafter gets accepted, then what the law says and why:

* the law holds: acceptance falls with root entropy and the decile curve follows;
* the slope is not identified because the entropies are too narrow: at least
  :data:`NARROW_SHARE` of the group's rounds sit below the summary's ``LOW_ENTROPY`` (0.05
  nats), and the slope's interval includes 0; the sentence names the tasks of the same
  drafter that do show the contrast (slope check passed), or suggests logging an open task too
  and fitting both (the contrast shows between tasks, in the pooled row);
* the slope is identified but another check fails (named, with its statistic; a failed rank
  check states the correlation's sign and whether it is significant, :func:`rank_phrase`);
* no slope although entropies vary; acceptance rising with entropy;
* no law at all: the logs carry no root entropy (the tool that records it is named), or the
  fit failed (its reason).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["NARROW_SHARE", "NEXT_SECTIONS", "group_sentences", "turn_sentences", "rank_phrase", "closing_sentence",
           "skipped_lines"]

#: A group whose share of rounds below 0.05 nats is at least this is "too narrow" for a slope.
NARROW_SHARE = 0.75
POOLED = "pooled"
#: (flag, what it adds): the sections the closing sentence suggests, each only when not already given.
NEXT_SECTIONS = (("--tail", "the tail test"), ("--order", "the task ordering"), ("--offsets", "the per-offset acceptance"))


def _finite(x) -> float | None:
    """``x`` as a finite float, or None (missing, not a number, infinite)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _num(x, d: int = 2) -> str:
    x = _finite(x)
    return "-" if x is None else f"{x:.{d}f}"   # one rule: an estimate and its bounds at the same decimals


def _pct(x) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "-"
    return "-" if not math.isfinite(x) else f"{100 * x:.0f}%"


def _interval(row, name: str, d: int = 2) -> str:
    lo, hi = row.get(f"{name}_lo"), row.get(f"{name}_hi")
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return _num(row.get(name), d)
    return f"{_num(row.get(name), d)} [{_num(lo, d)}, {_num(hi, d)}]"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _label(task: str, drafter: str, several: bool) -> str:
    name = "all tasks pooled" if task == POOLED else _one_line(task)
    return f"{name} ({_one_line(drafter)})" if several else name


def _acceptance(srow) -> str:
    L, Lmin = int(srow["horizon"]), int(srow.get("horizon_min", srow["horizon"]))
    horizon = f"L = {L}" if L == Lmin else f"L = {Lmin}..{L}"
    n0 = int(srow.get("no_draft_rounds", 0) or 0)
    every = (f"; with the {n0} round(s) that drafted nothing, {_num(srow['tokens_per_round'])} tokens per round "
             "over every round" if n0 else "")
    return (f"{int(srow['rounds'])} drafted rounds from {int(srow['prompts'])} prompts accept "
            f"{_interval(srow, 'mean_accepted')} draft tokens per round (tau {_num(srow['tau'])} tokens committed "
            f"per drafted round, drafts of {horizon}{every}), and {_pct(srow['p_full'])} of rounds accept the "
            "whole draft")


def _contrast(law_table, drafter: str, task: str, checks) -> str:
    """Tasks of the same drafter whose slope check passed (they show the entropy contrast)."""
    shown = []
    for (d, g), chk in sorted(checks.items()):
        if d == drafter and g not in (task, POOLED) and chk.slope:
            shown.append(_one_line(g))
    if shown:
        return f"; {', '.join(shown)} {'shows' if len(shown) == 1 else 'show'} the contrast"
    return ("; to see the contrast, log a more open task too (for example glance-log --task caption) and fit "
            "both together: on the committed example logs caption sits at higher root entropy and accepts fewer "
            "draft tokens than the grounded tasks, which the pooled row's slope shows, while inside caption alone the "
            "block drafter's slope is not identified")


def _signed(x, d: int = 2) -> str:
    x = _finite(x)
    return "-" if x is None else f"{x:+.{d}f}"


def _p(x) -> str:
    x = _finite(x)
    return "-" if x is None else (f"{x:.1e}" if 0 < x < 1e-3 else f"{x:.3f}")


def rank_phrase(rho, p, alpha: float = 0.05) -> str:
    """Why the rank check failed, stating both the direction of the prompt-aware Spearman
    correlation and whether it is significant at ``alpha`` (the check asks for rho < 0 with
    p < alpha): a significant positive rho is evidence against the law, not a null result."""
    stat = f"rho = {_signed(rho)}, p = {_p(p)}"
    try:
        rho, p = float(rho), float(p)
    except (TypeError, ValueError):
        rho = p = float("nan")
    if not (math.isfinite(rho) and math.isfinite(p)):
        return f"the rank correlation of entropy and acceptance could not be computed ({stat})"
    if p < alpha:
        if rho >= 0:
            return (f"entropy and acceptance rank-correlate positively, significantly ({stat}), against the law's "
                    "prediction")
        return f"entropy and acceptance rank-correlate negatively ({stat})"   # not reached when the check fails
    direction = "negative" if rho < 0 else "positive" if rho > 0 else "zero"
    return f"the {direction} rank correlation of entropy and acceptance is not significant ({stat})"


def _law_clause(lrow, chk, srow, law_table, checks, drafter: str, task: str) -> str:
    b1 = _interval(lrow, "b1")
    if not math.isfinite(float(lrow["b1"])):
        return "; the law could not be fitted for this group (the notes say why)"
    share = float(srow.get("low_entropy_share", float("nan")))
    if chk.slope:
        failed = [k for k in ("rank", "curve", "monotone") if not getattr(chk, k)]
        if not failed:
            return (f"; the law holds: acceptance falls as root entropy rises (b1 = {b1} per nat) and the decile "
                    "curve follows the law")
        why = {"rank": rank_phrase(chk.rho, chk.rho_p, chk.alpha),
               "curve": f"the law's curve misses the measured decile means (R^2 = {_num(chk.r2_curve)} < "
                        f"{chk.min_r2_curve:g})",
               "monotone": f"the measured decile means do not fall steadily (isotonic R^2 = "
                           f"{_num(chk.r2_isotonic)} < {chk.min_r2_isotonic:g})"}
        return (f"; acceptance falls as root entropy rises (b1 = {b1} per nat), but "
                + "; ".join(why[k] for k in failed))
    if float(lrow["b1_hi"]) < 0:
        return (f"; acceptance rises with root entropy here (b1 = {b1} per nat), the opposite of what the law "
                "predicts")
    if math.isfinite(share) and share >= NARROW_SHARE:
        return (f"; the entropy slope is not identified: {_pct(share)} of rounds sit below 0.05 nats of root "
                f"entropy, so there is almost no entropy contrast to fit (b1 = {b1} per nat includes 0)"
                + _contrast(law_table, drafter, task, checks))
    return (f"; acceptance does not fall measurably with root entropy here (b1 = {b1} per nat includes 0, over "
            f"entropies averaging {_num(lrow.get('mean_entropy'))} nats)")


def group_sentences(summary, law=None, law_skipped: str | None = None) -> list[str]:
    """One sentence per group from the per-group summary (``summary.frame``) and, when fitted,
    the law (``law.table`` and ``law.checks``); ``law_skipped``: why the law was not fitted."""
    f = summary.frame
    several = f["drafter"].nunique() > 1
    rows = f.to_dict("records")
    tasks = [r for r in rows if r["task"] != POOLED]
    if not tasks:
        tasks = rows
    out = []
    ltab = law.table if law is not None else None
    for srow in tasks:
        d, g = str(srow["drafter"]), str(srow["task"])
        text = f"{_label(g, d, several)}: " + _acceptance(srow)
        if law is None:
            if law_skipped:
                text += f"; the law is not fitted ({_one_line(law_skipped)})"
        else:
            m = ltab[(ltab["drafter"].astype(str) == d) & (ltab["task"].astype(str) == g)]
            if len(m) and (d, g) in law.checks:
                text += _law_clause(m.iloc[0].to_dict(), law.checks[(d, g)], srow, ltab, law.checks, d, g)
            else:
                text += "; this group is not in the law table (see its notes)"
        out.append(text + ".")
    return out


def turn_sentences(summary) -> list[str]:
    """One sentence per group of a per-turn summary (``summary.frame``: prompts, turns, rounds,
    new_tokens, tau and prompt_tau with intervals; :mod:`glance_law.evidence.turns`)."""
    f = summary.frame
    several = f["drafter"].nunique() > 1
    rows = f.to_dict("records")
    tasks = [r for r in rows if r["task"] != POOLED] or rows
    return [f"{_label(str(r['task']), str(r['drafter']), several)}: {int(r['turns'])} turns of {int(r['prompts'])} "
            f"prompts commit {_interval(r, 'tau')} tokens per verification step ({int(r['new_tokens'])} tokens in "
            f"{int(r['rounds'])} steps; the mean prompt's own ratio is {_num(r['prompt_tau'])}); "
            + ("an autoregressive baseline drafts nothing, so the law is not fitted." if str(r["drafter"]) == "ar"
               else "per-turn counts carry no per-step lengths, so the law is not fitted.") for r in tasks]


def skipped_lines(skipped: Sequence[tuple[str, str]]) -> list[str]:
    """``"not run: <name>: <reason>"`` per skipped section."""
    return [f"not run: {_one_line(reason) if reason.startswith((name + ' ', 'the ' + name + ' ')) else f'{name}: {_one_line(reason)}'}"
            for name, reason in skipped]


def _either(items: Sequence[str], word: str) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def closing_sentence(hidden: bool, given: Sequence[str] = (), unavailable: Sequence[str] = (),
                     lead: Sequence[str] = ()) -> str:
    """The last line of the text output: where to go next. ``given``: the section flags the
    command already had (with or without the leading ``--``); they are not suggested again, nor
    are the ``unavailable`` ones (flags that the same input would refuse or not run). ``lead``:
    suggestions this input calls for first (e.g. ``--timing`` on the baseline among the inputs)."""
    given = {"--" + str(g).lstrip("-") for g in list(given) + list(unavailable)}
    todo = [(flag, what) for flag, what in NEXT_SECTIONS if flag not in given]
    parts = list(lead) + (["see docs/cli.md for the sections' columns"] if given else [])
    if todo:
        parts.append(f"add {_either([f for f, _ in todo], 'or')} for {_either([w for _, w in todo], 'and')}")
    if hidden:
        parts.append("--wide prints every column")
    if not parts:
        parts.append("see docs/cli.md for the sections' columns")
    return "Next: " + "; ".join(parts) + "."
