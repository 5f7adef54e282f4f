"""The grouped fit of the draftability law: :func:`fit_law` (the numeric core is
:mod:`glance_law.law.model`, one group's statistics :mod:`glance_law.law.group`, the result
objects :mod:`glance_law.law.result`)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from glance_law.data import selection as _sel
from glance_law.errors import GlanceError
from glance_law.stats import ceiling as _ceiling
from glance_law.stats import curve as _curve
from glance_law.stats.cluster import CLUSTER_BY

from . import group as _group
from .result import LAW_COLUMNS, LAW_EXTRA_COLUMNS, POOLED, LawFit

__all__ = ["LAW_INPUT", "WEIGHTINGS", "fit_law"]

LAW_INPUT = _sel.LAW_INPUT



WEIGHTINGS = ("round", "prompt")


def _check_options(method, level, n_boot, bins, ceiling_bins, cov, weighting="round") -> None:
    """fit_law's arguments, one line each when wrong (before anything is read)."""
    if weighting not in WEIGHTINGS:
        raise GlanceError(f"unknown weighting {weighting!r}; choose 'round' (every round counts once) or "
                          "'prompt' (every prompt counts once)")
    if method not in ("mle", "nls"):
        raise GlanceError(f"unknown method {method!r}; choose 'mle' or 'nls'")
    if not 0.0 < float(level) < 1.0:
        raise GlanceError(f"level must lie strictly between 0 and 1 (got {level})")
    if int(n_boot) < 0:
        raise GlanceError(f"n_boot must be >= 0 (got {n_boot})")
    if int(bins) < 2 or int(ceiling_bins) < 2:
        raise GlanceError("bins and ceiling_bins must be >= 2")
    if cov not in ("cr3", "cr1"):
        raise GlanceError(f"unknown cov {cov!r}; choose 'cr3' (cluster jackknife) or 'cr1' (sandwich)")


def fit_law(rounds, *, by: str | None = "task", method: str = "mle", level: float = 0.95, n_boot: int = 0,
            seed: int = 0, condition: str | Sequence[str] | None = "matched", weight: str | None = None,
            cluster: Sequence[str] = CLUSTER_BY, bins: int = 10, ceiling_bins: int = _ceiling.DEFAULT_BINS,
            alpha: float = 0.05, min_r2_curve: float = 0.5, min_r2_isotonic: float = 0.9,
            cov: str = "cr3", weighting: str = "round") -> LawFit:
    """Fit the draftability law per group and pooled, with prompt-clustered uncertainty.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (``read_logs(paths)`` or a frame with the contract's columns).
    by : column whose values form the groups (default ``"task"``); None fits the pooled row only.
        The group label is reported in the ``task`` column whatever ``by`` is.
    method : ``"mle"`` (default: exact maximum likelihood of the truncated geometric) or
        ``"nls"`` (least squares of a on the conditional mean M(sigmoid(b0 - b1 H), L)).
    level : interval level (0.95).
    n_boot : 0 (default) for a prompt-clustered covariance (``cov``) with Student-t(G-1)
        critical values; N > 0 for a prompt-level cluster bootstrap with N replicates
        (percentile intervals for b0, b1, the decile means and the mean accepted length).
    cov : ``"cr3"`` (default: the cluster jackknife, one Newton step per deleted prompt) or
        ``"cr1"`` (the cluster-robust sandwich with the G/(G-1) factor). CR1 is slightly
        liberal with a few dozen prompts of uneven size (about 93% coverage of nominal 95%
        at 40 prompts in our simulations); CR3 is closer to nominal (docs/theory-law.md).
    seed : bootstrap seed (each group's stream derives from it and the group's name).
    condition : conditions fitted (default ``"matched"``); None pools every condition.
    weight : optional column of row counts (reduced tables: each row stands for ``weight``
        identical rounds).
    weighting : ``"round"`` (default: every round counts once, the round-level law) or
        ``"prompt"`` (every prompt's rounds together count as one prompt, weight 1 / its rounds,
        scaled so the weights still sum to the rounds: the prompt-level law). They differ when
        the number of rounds a prompt takes depends on how well it drafts beyond what its
        entropies say, as with fixed-length answers (docs/theory-law.md, 'Round or prompt
        weights'); every statistic of the row (law, curve, rank test, ceiling) uses the weights.
    cluster : the columns whose combination is one independent unit (default (task, prompt_id)).
    bins, ceiling_bins : equal-count entropy bins of the decile curve (10) and of the ceiling (50).
    alpha, min_r2_curve, min_r2_isotonic : thresholds of :meth:`LawFit.holds` (see
        :class:`LawChecks` and docs/theory-law.md).

    Rounds with ``horizon == 0`` (autoregressive, or a drafter that proposed nothing) and of other
    conditions are excluded and counted in the notes (``tau`` is the drafted rounds' mean accepted
    + 1; ``tokens_per_round`` counts the rounds without a draft too, ``no_draft_rounds`` of them); when the logs hold several drafters each is fitted separately
    (rows keyed by drafter and group, one pooled row per drafter). A group whose law cannot
    be fitted (e.g. it never accepts a token) keeps its descriptive statistics, has NaN
    coefficients and a note.

    Returns
    -------
    LawFit
        One row per group (and drafter) plus the pooled row: ``to_frame()``, ``curve(group)``,
        ``holds()``, ``predict(H)``, ``summary()``.

    Examples
    --------
    >>> import glance_law as gl
    >>> law = gl.fit_law(gl.simulate_rounds(seed=0), by="task")
    >>> law.to_frame()["task"].iloc[-1]
    'pooled'
    """
    _check_options(method, level, n_boot, bins, ceiling_bins, cov, weighting)
    arm_notes: list[str] = []           # several targets, or drafter names altered to label arms
    frame, skipped = _sel.as_frame(rounds, arm_notes)
    notes: list[str] = [f"skipped {reason}" if str(path) in reason else f"skipped {path}: {reason}"
                        for path, reason in skipped] + arm_notes
    data = _sel.prepare(frame, by, condition, weight, cluster, notes, native=True)
    # once: the pooled group's prompts then need no relabelling (nor counting, with one drafter)
    data["cl"], G_all, counts_all = _sel.compact_counts(data["cl"])
    interval = "bootstrap" if n_boot > 0 else cov
    opt = dict(method=method, level=float(level), n_boot=int(n_boot), seed=int(seed), bins=int(bins),
               ceiling_bins=int(ceiling_bins), alpha=float(alpha), min_r2_curve=float(min_r2_curve),
               min_r2_isotonic=float(min_r2_isotonic), interval=interval, cov=cov, weighting=weighting)
    group_notes: list[str] = []
    rows, curves, checks = [], {}, {}
    dnames = data["dnames"]
    present_d = [0] if len(dnames) == 1 else \
        sorted(np.flatnonzero(np.bincount(data["d"], minlength=len(dnames))), key=lambda i: dnames[i])
    names = ("cl", "g", "ends", "w", "H", "a", "L")  # the big unsorted ones first: each is freed when gathered
    # one horizon throughout (the usual log): L is that constant, broadcast (never gathered or copied)
    L0 = data["L"][0] if data["L"].min() == data["L"].max() else None
    d_codes = data.pop("d")
    for di in present_d:
        dname = dnames[di]
        dmask = d_codes == di if len(present_d) > 1 else None
        d_codes = d_codes if len(present_d) > 1 else None
        # one stable sort of the entropies per drafter; every array is put in that order once, so
        # each group's rounds (a subsequence) come sorted and all statistics read them sequentially
        if dmask is None or dmask.all():
            take = _curve.stable_order(data["H"])
        else:
            rows_d = np.flatnonzero(dmask)
            take = rows_d[_curve.stable_order(data["H"][rows_d])]
            del rows_d
        del dmask
        put = {}
        for k in names:  # one array at a time; with one drafter the unsorted copy is dropped at once
            if data[k] is None:
                x = None
            elif k == "L" and L0 is not None:
                x = np.broadcast_to(L0, take.shape)
            elif k in ("H", "a") and data[k].dtype != np.float64:  # float32 entropies, int16 counts: exact
                x = np.empty(take.size)                             # in float64, converted as gathered
                for i in range(0, take.size, 1 << 16):
                    x[i:i + (1 << 16)] = data[k][take[i:i + (1 << 16)]]
            else:
                x = data[k][take]
            put[k] = x
            if len(present_d) == 1:
                data[k] = None
            del x
        del take
        H, a, L, w, cl, g, ends = (put.pop(k) for k in ("H", "a", "L", "w", "cl", "g", "ends"))
        tag = dname if len(present_d) > 1 else None
        # the rounds of each group, in their entropy order: a few groups, one mask each (no
        # round-sized index kept); many, one stable (radix) sort of the group codes
        few = len(data["gnames"]) <= 16
        count_g = np.bincount(g, minlength=len(data["gnames"])) if by and not few else None
        present_g = range(len(data["gnames"]) if by else 0) if few else np.flatnonzero(count_g)
        by_g = None if few or not len(present_g) else \
            np.argsort(g.astype(np.int16) if len(data["gnames"]) < 2 ** 15 else g, kind="stable")
        start_g = None if few else np.concatenate([[0], np.cumsum(count_g)])
        for gi in sorted(present_g, key=lambda i: data["gnames"][i]):
            m = np.flatnonzero(g == gi) if few else by_g[start_g[gi]:start_g[gi + 1]]
            if m.size == 0:  # (a few groups: one absent for this drafter)
                continue
            Lm = np.broadcast_to(L0, m.shape) if L0 is not None else L[m]
            row, cur, chk = _group.evaluate(H[m], a[m], Lm, None if w is None else w[m], cl[m],
                                            data["gnames"][gi], tag, opt, group_notes,
                                            None if ends is None else ends[m])
            del m, Lm
            rows.append({**row, "drafter": dname})
            curves[(dname, data["gnames"][gi])] = cur
            checks[(dname, data["gnames"][gi])] = chk
        del g, by_g
        row, cur, chk = _group.evaluate(H, a, L, w, cl, POOLED, tag, opt, group_notes, ends,
                                        compacted=(G_all, counts_all) if len(present_d) == 1 else None)
        del H, a, L, w, cl, ends
        rows.append({**row, "drafter": dname})
        curves[(dname, POOLED)] = cur
        checks[(dname, POOLED)] = chk
    table = pd.DataFrame(rows, columns=list(LAW_COLUMNS + LAW_EXTRA_COLUMNS))
    nd = data["no_draft"]
    n0 = np.array([nd.get((str(d), str(g)), 0.0) for d, g in zip(table["drafter"], table["task"])], dtype=np.float64)
    table["no_draft_rounds"] = np.round(n0).astype(np.int64)
    table["tokens_per_round"] = _sel.tokens_per_round(table["tau"].to_numpy(dtype=float),
                                                      table["rounds"].to_numpy(dtype=float), n0)
    for c in ("rounds", "prompts", "horizon"):
        table[c] = table[c].astype(np.int64)
    if np.all(~np.isfinite(table["b1"].to_numpy(dtype=float))):
        raise GlanceError("the law could not be fitted on any group: " + "; ".join(group_notes))
    notes += _method_notes(opt, cluster, alpha, [dnames[i] for i in present_d], by)
    return LawFit(table=table, curves=curves, checks=checks, method=method, level=float(level), by=by,
                  interval=interval, n_boot=int(n_boot), note_lines=tuple(notes + group_notes))


def _method_notes(opt: dict, cluster, alpha: float, drafters: list, by) -> list[str]:
    """The notes that say how the table was computed (intervals, weights, method, groups, columns)."""
    notes: list[str] = []
    level, interval, method, weighting = opt["level"], opt["interval"], opt["method"], opt["weighting"]
    n_boot, seed, ceiling_bins = opt["n_boot"], opt["seed"], opt["ceiling_bins"]
    min_r2_curve, min_r2_isotonic = opt["min_r2_curve"], opt["min_r2_isotonic"]
    lvl = f"{100 * level:g}%"
    if interval == "cr1":
        notes.append(f"intervals: {lvl}, prompt-clustered (cluster = {', '.join(cluster)}): CR1 cluster-robust "
                     "sandwich with Student-t(G-1) critical values, G = prompts in the group")
    elif interval == "cr3":
        notes.append(f"intervals: {lvl}, prompt-clustered (cluster = {', '.join(cluster)}): CR3 cluster jackknife "
                     "(one Newton step per deleted prompt) with Student-t(G-1) critical values, G = prompts "
                     "in the group")
    else:
        notes.append(f"intervals: {lvl} percentile, prompt-level cluster bootstrap with {n_boot} replicates "
                     f"(seed {seed})")
    if weighting == "prompt":
        notes.append("weighting prompt: each prompt's rounds together weigh as one prompt (weight 1 / its rounds, "
                     "scaled to the rounds): the prompt-level law, which the round-weighted default leans away "
                     "from when prompts that accept more take fewer rounds (fixed-length answers)")
    if method == "nls":
        notes.append("method nls: least squares of a on M(sigmoid(b0 - b1 H), L) (the MLE is the efficient "
                     "default; nls is for comparison with the paper)")
    if len(drafters) > 1:
        notes.append(f"{len(drafters)} drafters fitted separately: {', '.join(drafters)}")
    if by and by != "task":
        notes.append(f"groups are the values of column '{by}' (shown in the task column)")
    notes.append(f"ceiling: bias-corrected {ceiling_bins}-bin between/total (epsilon^2, unclipped, ~0 without "
                 "signal); ceiling_binned is the paper's SSB/SST (biased up by ~(B-1)/(n-1)); "
                 "ceiling_fraction = r2_round / ceiling")
    notes.append(_sel.TOKENS_PER_ROUND_NOTE)
    notes.append("floor_mean: bottom entropy decile; cap = e^b0; sup = M(sigmoid(b0)) = e^b0(1 - sigmoid(b0)^L) "
                 "at the group's largest L")
    notes.append(f"holds: slope (b1_lo > 0), rank (rho < 0, prompt-aware p < {alpha:g}), curve (decile "
                 f"R^2 >= {min_r2_curve:g}), monotone (isotonic decile R^2 >= {min_r2_isotonic:g})")
    return notes
