"""Task ordering by grounding: means, shares, slopes and adjacent gaps with prompt-level uncertainty.

For each task (per drafter when the logs hold several): mean accepted length and mean
root entropy with CR1 prompt-clustered intervals, tau = mean a + 1 over the drafted rounds and
tokens_per_round = the same over every round (rounds that drafted nothing, horizon 0, count one
token each; ``no_draft_rounds`` of them), the share of rounds
that accept their whole draft (``p_full`` = P(a = L), each round against its own horizon), and the law's fitted (b0, b1) (exact MLE; CR3 cluster-jackknife intervals,
the law table's default, so the numbers agree with ``python -m glance_law.fit``). For each adjacent
pair in the user's order (default caption, textvqa, infovqa, docvqa, chartqa: open to
grounded):

* the gap in mean accepted length with a percentile interval from the prompt-level
  bootstrap (prompts resampled with replacement within each task, independently);
* a prompt-aware Mann-Whitney test: the rank-sum test on *prompt means* of the accepted
  length (prompts are the independent units; a round-level test would count correlated
  rounds of one prompt as independent evidence), with the probability of superiority
  P(prompt mean of the later task > earlier) as its effect size;
* the slope gap b1_later - b1_earlier with a Wald interval (the tasks' prompts are
  disjoint, so the variances add; CR3 cluster-jackknife variances, as in the law table).

Whether the tasks are ordered as listed: mean a increasing, b1 increasing, mean H
decreasing along the order (point estimates), and the share of bootstrap replicates in
which the mean accepted lengths are strictly increasing.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import stats

from glance_law.data.selection import (
    DRAFTED_NOTE,
    TOKENS_PER_ROUND_NOTE,
    no_draft_rounds,
    tokens_per_round,
    with_drafted_horizons,
)
from glance_law.data.tasks import GROUNDING_ORDER
from glance_law.errors import GlanceError
from glance_law.results.base import Result, TableResult
from glance_law.stats.cluster import (
    bootstrap_counts,
    cluster_codes,
    clustered_mean,
    percentile_interval,
    t_crit,
)

from . import common as E

__all__ = ["DEFAULT_ORDER", "task_order", "OrderResult", "cli_section", "add_cli_arguments"]

DEFAULT_ORDER = GROUNDING_ORDER
ANALYSIS = "the task ordering"
#: Round columns the CLI section reads (``python -m glance_law.fit`` reads only these
#: besides the law's own and the contract's key columns).
CLI_COLUMNS = ()
#: Columns the section cannot do without (root entropy is optional: without it, ordering by tau only).
NEEDS = ("accepted", "horizon")


@dataclass(frozen=True, eq=False)
class OrderGaps(TableResult):
    """Adjacent gaps along the order."""

    title: ClassVar[str] = "Task ordering: adjacent gaps (later - earlier)"


#: Human formats print the verdict's columns under these short headers (JSON/CSV keep the full names).
VERDICT_HEADERS = {"means_ordered": "means", "slopes_ordered": "slopes", "entropy_reversed": "entropy",
                   "gaps_exclude_zero": "gaps>0", "boot_share_ordered": "boot_share",
                   "kendall_tau_means": "kendall_means", "kendall_tau_slopes": "kendall_slopes"}
#: The longest order a verdict cell prints whole; a longer one prints as ``first < ... < last (n tasks)``.
CHAIN_WIDTH = 32


def short_chain(chain: str, width: int = CHAIN_WIDTH) -> str:
    """``a < b < ... < z`` as printed in the verdict's task cell: whole when it fits ``width``
    characters, else its first and last tasks and the count, else the count alone."""
    if len(chain) <= width:
        return chain
    tasks = chain.split(" < ")
    short = f"{tasks[0]} < ... < {tasks[-1]} ({len(tasks)} tasks)"
    return short if len(short) <= width else f"{len(tasks)} tasks"


@dataclass(frozen=True, eq=False)
class OrderVerdict(OrderGaps):
    """Whether means, slopes and entropies follow the order."""

    title: ClassVar[str] = "Task ordering: are the tasks ordered as listed?"

    def display_frame(self) -> pd.DataFrame:
        """Short headers (:data:`VERDICT_HEADERS`) and a long order shortened (:func:`short_chain`;
        :attr:`notes` then gives it whole), so the verdict columns fit a 100-character view."""
        f = self.to_frame()
        if "task" in f.columns:
            f["task"] = [short_chain(str(x)) for x in f["task"]]
        return f.rename(columns=VERDICT_HEADERS)

    @property
    def notes(self) -> tuple[str, ...]:
        chains = [] if "task" not in self.frame.columns else \
            [str(x) for x in dict.fromkeys(self.frame["task"]) if short_chain(str(x)) != str(x)]
        heads = ", ".join(f"{v} = {k}" for k, v in VERDICT_HEADERS.items() if k in self.frame.columns)
        return (tuple(self.extra_notes) + ((f"columns (text, markdown, latex, html): {heads}",) if heads else ())
                + tuple(f"order in full: {c}" for c in chains))


@dataclass(frozen=True, eq=False)
class OrderResult(Result):
    """Per-task rows (``to_frame``), adjacent gaps (``gap_table``) and the checks (``verdict_table``)."""

    title: ClassVar[str] = "Task ordering: per-task accepted length, entropy and law"
    #: narrowed to a width, tau never shows without tokens_per_round (tau alone reads as speed)
    display_keep: ClassVar[tuple[str, ...]] = ("tau", "tokens_per_round")
    tasks: pd.DataFrame
    gaps: pd.DataFrame
    verdict: pd.DataFrame
    order: tuple[str, ...]
    level: float = 0.95
    extra_notes: tuple[str, ...] = field(default=())

    def to_frame(self) -> pd.DataFrame:
        return self.tasks.copy()

    def gap_table(self) -> OrderGaps:
        return OrderGaps(self.gaps, self.level, self.extra_notes[1:2] + self.extra_notes[:1])

    def verdict_table(self) -> OrderVerdict:
        return OrderVerdict(self.verdict, self.level, self.extra_notes[2:3])

    @property
    def notes(self) -> tuple[str, ...]:
        return self.extra_notes[:1] + self.extra_notes[3:]

    def ordered(self, drafter: str | None = None) -> dict:
        """The ordering checks as a dict (first drafter when not given)."""
        v = self.verdict
        if drafter is not None and "drafter" in v.columns:
            v = v.loc[v["drafter"] == drafter]
        return v.iloc[0].to_dict()


#: a column no log can carry: the horizon the slope's likelihood reads where with_drafted_horizons
#: restored a cut one (the cut horizon, = accepted)
_LAW_HORIZON = "\0law_horizon"


def _share_name(ge: int | None) -> str:
    return "p_full" if ge is None else f"p_ge{ge}"


def _task_row(sub: pd.DataFrame, level: float, ge: int | None, notes: list[str], label: str,
              entropy: bool = True, no_draft: float = 0.0) -> dict:
    codes, G = cluster_codes(sub)
    a = sub["accepted"].to_numpy(float)
    L = sub["horizon"].to_numpy(float)
    H = sub["root_entropy"].to_numpy(float, na_value=np.nan) if entropy else np.full(len(a), np.nan)
    t = t_crit(G, level)
    ma, sa, _ = clustered_mean(a, codes, G)
    mh, sh, _ = clustered_mean(H, codes, G) if entropy else (np.nan, np.nan, G)
    reach = a >= (L if ge is None else ge)        # p_full: the round accepted its whole draft (a = L)
    pg, sp, gp = clustered_mean(reach.astype(float), codes, G)
    pg_lo, pg_hi = E.proportion_ci(pg, sp, gp, level)
    name = _share_name(ge)
    row = {"rounds": len(a), "prompts": G,
           "mean_accepted": ma, "mean_accepted_lo": ma - t * sa, "mean_accepted_hi": ma + t * sa,
           "tau": ma + 1.0, "no_draft_rounds": int(round(no_draft)),
           "tokens_per_round": float(tokens_per_round(ma + 1.0, len(a), no_draft)),
           "mean_entropy": mh, "mean_entropy_lo": mh - t * sh, "mean_entropy_hi": mh + t * sh,
           name: pg, f"{name}_lo": pg_lo, f"{name}_hi": pg_hi}
    if not entropy:
        row.update(b0=np.nan, b0_lo=np.nan, b0_hi=np.nan, b1=np.nan, b1_lo=np.nan, b1_hi=np.nan, _b1_se=np.nan)
        return row
    if _LAW_HORIZON in sub.columns:
        L = sub[_LAW_HORIZON].to_numpy(float)
    try:
        b, cov, _, _ = E.law_fit(H, a, L, codes, G, cov="cr3")
        se = np.sqrt(np.diag(cov))
        row.update(b0=b[0], b0_lo=b[0] - t * se[0], b0_hi=b[0] + t * se[0],
                   b1=b[1], b1_lo=b[1] - t * se[1], b1_hi=b[1] + t * se[1], _b1_se=se[1])
    except ValueError as exc:
        notes.append(f"{label}: law not fitted ({exc})")
        row.update(b0=np.nan, b0_lo=np.nan, b0_hi=np.nan, b1=np.nan, b1_lo=np.nan, b1_hi=np.nan, _b1_se=np.nan)
    return row


def task_order(rounds, order: Sequence[str] | None = None, *, level: float = 0.95, n_boot: int = 2000,
               seed: int = 0, ge: int | None = None) -> OrderResult:
    """Per-task means and slopes, adjacent gaps and ordering checks (see the module docstring).

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (read_logs(...) or a frame with the contract's columns).
    order : sequence of str, optional
        The expected order of the tasks from open to grounded (default: the paper's).
    level : float, default 0.95
        Interval level (prompt-clustered).
    n_boot : int, default 2000
        Prompt-level bootstrap replicates (0: none).
    seed : int, default 0
        Bootstrap seed.
    ge : int, optional
        None (default): the share column is ``p_full`` = P(a = L), each round against its own
        horizon (a share of rounds accepting 8 or more is 0 whenever L < 8); an integer k gives
        ``p_ge<k>`` = P(a >= k) instead. Without root entropy (logs that do not measure it) the
        tasks are ordered by mean accepted length alone: entropy and slope columns are empty.

    Returns
    -------
    OrderResult
        Per-task means and slopes; ``gap_table()`` and ``verdict_table()``.

    Examples
    --------
    >>> import glance_law as gl
    >>> res = gl.task_order(gl.simulate_rounds(seed=0), ["caption", "docvqa"], n_boot=0)
    >>> type(res).__name__
    'OrderResult'
    """
    notes: list[str] = []
    frame = E.as_frame(rounds, notes)
    E.require(frame, ["accepted", "horizon"], ANALYSIS)
    entropy = "root_entropy" in frame.columns and bool(frame["root_entropy"].notna().any())
    frame, restored = with_drafted_horizons(frame)   # means and P(a = L) over every verification round
    if restored.any():
        notes.append(DRAFTED_NOTE.format(n=int(restored.sum())))
        if entropy:  # the slope's likelihood keeps the cut horizon (a run known to reach `accepted`)
            frame = frame.assign(**{_LAW_HORIZON: frame["horizon"].where(~restored, frame["accepted"])})
    if not entropy:
        notes.append("no root_entropy in the logs: tasks ordered by mean accepted length (tau) only; entropy and "
                     "slope columns empty (recorded by glance-log)")
    nd = no_draft_rounds(E.with_arm_labels(frame), "task", ("matched",))   # tau leaves them out
    frame = E.speculative_rounds(frame, notes)
    if order is None:
        present = E.distinct_strings(frame["task"])
        if len(present & set(DEFAULT_ORDER)) >= 2:
            order = DEFAULT_ORDER
        else:  # no expected order for these tasks: sort them by observed mean accepted length
            means = frame.groupby(frame["task"].astype(str), sort=True)["accepted"].mean()
            order = tuple(means.sort_values(kind="stable").index)
            notes.append("order: the tasks sorted by observed tau (no expected order given and fewer than two of "
                         f"{', '.join(DEFAULT_ORDER)} present), so means_ordered holds by construction for the "
                         "pooled drafters; read the gaps and their intervals")
    order = tuple(order)
    if len(set(order)) != len(order):
        raise GlanceError(f"{ANALYSIS}: the order lists a task twice ({', '.join(order)})")
    tasks_present = E.distinct_strings(frame["task"])
    missing = [t for t in order if t not in tasks_present]
    used = tuple(t for t in order if t in tasks_present)
    if missing:
        notes.append(f"task(s) in the order but not in the logs: {', '.join(missing)}")
    extra = sorted(tasks_present - set(order))
    if extra:
        n_x = int(E.string_mask(frame["task"], extra).sum())
        notes.append(f"task(s) not in the order excluded: {', '.join(extra)} ({n_x} rounds)")
    if len(used) < 2:
        raise GlanceError(f"{ANALYSIS} needs at least two of the ordered tasks in the logs "
                          f"(order: {', '.join(order)}; logs: {', '.join(sorted(tasks_present)) or 'none'})")
    frame = frame.loc[E.string_mask(frame["task"], used)]
    arm_cols = [c for c in E.arm_columns(frame, "task") if c != "task"]
    rng = np.random.default_rng(seed)
    trows, grows, vrows = [], [], []
    for arm_key, arm in E.group_items(frame, arm_cols):
        here = E.distinct_strings(arm["task"])
        tasks_here = [t for t in used if t in here]
        per = {}
        for task in tasks_here:
            sub = arm.loc[E.string_mask(arm["task"], [task])]
            dname = str(arm_key.get("drafter", sub["drafter"].iloc[0] if "drafter" in sub.columns else "unknown"))
            row = _task_row(sub, level, ge, notes, E.fmt_group({**arm_key, "task": task}), entropy,
                            nd.get((dname, task), 0.0))
            codes, G = cluster_codes(sub)
            a = sub["accepted"].to_numpy(float)
            sums = np.bincount(codes, weights=a, minlength=G)
            cnts = np.bincount(codes, minlength=G).astype(float)
            per[task] = dict(row=row, sums=sums, cnts=cnts, prompt_means=sums / cnts)
            trows.append({**arm_key, "task": task, **{k: v for k, v in row.items() if not k.startswith("_")}})
        if len(tasks_here) < 2:  # one task: its row stands, but there is no gap and no order to judge
            notes.append(f"{E.fmt_group(arm_key)}: only task {tasks_here[0]} of the order is "
                         "present; no gap and no order verdict for this arm")
            continue
        # prompt-level bootstrap of every task's mean (independent across tasks)
        boot = {}
        for task in tasks_here:
            d = per[task]
            G = len(d["sums"])
            draws = []
            for W in bootstrap_counts(G, n_boot, rng):
                draws.append((W @ d["sums"]) / (W @ d["cnts"]))
            boot[task] = np.concatenate(draws) if draws else np.full(0, np.nan)
        for t0, t1 in zip(tasks_here[:-1], tasks_here[1:]):
            r0, r1 = per[t0]["row"], per[t1]["row"]
            gap = r1["mean_accepted"] - r0["mean_accepted"]
            lo, hi = percentile_interval(boot[t1] - boot[t0], level) if n_boot > 0 else (np.nan, np.nan)
            x, y = per[t0]["prompt_means"], per[t1]["prompt_means"]
            mw = stats.mannwhitneyu(y, x, alternative="two-sided", method="auto")
            sgap = r1["b1"] - r0["b1"]
            sse = float(np.hypot(r0["_b1_se"], r1["_b1_se"]))
            # Welch-type df for the slope gap is not available for clustered SEs; use the
            # smaller task's G - 1 (conservative)
            tt = t_crit(min(r0["prompts"], r1["prompts"]), level)
            grows.append({**arm_key, "task": f"{t1} - {t0}", "gap": gap, "gap_lo": float(lo), "gap_hi": float(hi),
                          "mw_u": float(mw.statistic), "mw_p": float(mw.pvalue),
                          "superiority": float(mw.statistic) / (len(x) * len(y)),
                          "slope_gap": sgap, "slope_gap_lo": sgap - tt * sse, "slope_gap_hi": sgap + tt * sse,
                          "entropy_gap": r1["mean_entropy"] - r0["mean_entropy"]})
        means = np.array([per[t]["row"]["mean_accepted"] for t in tasks_here])
        slopes = np.array([per[t]["row"]["b1"] for t in tasks_here])
        ents = np.array([per[t]["row"]["mean_entropy"] for t in tasks_here])
        if n_boot > 0:
            B = np.stack([boot[t] for t in tasks_here], axis=1)
            p_ordered = float(np.mean(np.all(np.diff(B, axis=1) > 0, axis=1)))
        else:
            p_ordered = np.nan
        gaps_here = grows[-(len(tasks_here) - 1):]
        vrows.append({**arm_key, "task": " < ".join(tasks_here),
                      "means_ordered": bool(np.all(np.diff(means) > 0)),
                      "slopes_ordered": bool(np.all(np.diff(slopes) > 0)) if entropy else None,
                      "entropy_reversed": bool(np.all(np.diff(ents) < 0)) if entropy else None,
                      "gaps_exclude_zero": bool(all(g["gap_lo"] > 0 for g in gaps_here)),
                      "boot_share_ordered": p_ordered,
                      "kendall_tau_means": float(stats.kendalltau(np.arange(len(means)), means).statistic),
                      "kendall_tau_slopes": float(stats.kendalltau(np.arange(len(slopes)), slopes).statistic)
                      if np.isfinite(slopes).all() else np.nan})
    notes.append(TOKENS_PER_ROUND_NOTE)
    method: list[str] = []
    share = "p_full = P(a = L) (share of rounds accepting their whole draft)" if ge is None else \
        f"p_ge{ge} = P(a >= {ge})"
    method.append(f"intervals {int(level * 100)}%: means CR1 prompt-clustered (t, G-1 df), {share} the same "
                 "on the logit scale, b0/b1 CR3 cluster jackknife as in the law table; gap: "
                 f"percentile interval of {n_boot} prompt-bootstrap resamples (within task); slope_gap: Wald with the "
                 "two tasks' CR3 variances (t with the smaller task's G-1 df)")
    method.append("mw_u/mw_p: Mann-Whitney on prompt means (one value per prompt, the independent unit), "
                 "two-sided; superiority = U / (n_later n_earlier) = P(later task's prompt mean > earlier's)")
    method.append("ordered: means/slopes increasing and mean entropy decreasing along the order (point estimates); "
                 "boot_share_ordered: share of bootstrap replicates with strictly increasing means")
    return OrderResult(pd.DataFrame(trows), pd.DataFrame(grows), pd.DataFrame(vrows), used, level,
                       tuple(method) + tuple(dict.fromkeys(notes)))


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("task ordering (--order)")
    g.add_argument("--task-order", default=None, metavar="T1,T2,...",
                   help=f"the expected order from open to grounded (default: {','.join(DEFAULT_ORDER)} when two "
                        "of them are in the logs, otherwise the tasks sorted by observed tau)")
    g.add_argument("--order-bootstrap", type=int, default=2000, metavar="B",
                   help="prompt-bootstrap resamples for the adjacent gaps (default 2000)")


#: Why ``--by none`` does not apply (``python -m glance_law.fit`` lists the section as not run then).
BY_NONE = "compares the tasks with one another"


def cli_section(logs, args: argparse.Namespace) -> list[Result]:
    given = getattr(args, "task_order", None)
    order = None if given is None else [t.strip() for t in str(given).split(",") if t.strip()]
    if order is not None and len(order) < 2:
        raise GlanceError("--task-order needs at least two comma-separated tasks")
    level = float(getattr(args, "level", 0.95) or 0.95)
    seed = int(getattr(args, "seed", 0) or 0)
    res = task_order(logs, order, level=level, n_boot=int(getattr(args, "order_bootstrap", 2000)), seed=seed)
    return [res, res.gap_table(), res.verdict_table()]
