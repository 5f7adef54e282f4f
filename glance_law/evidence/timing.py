"""The timing ledger: what the acceptance buys in wall-clock (Appendix E).

**Paired speedup** (:func:`timing_ledger`). Two arms decode the same prompts: a
baseline (normally the autoregressive arm, drafter ``ar``; any arm works, e.g. another
speculative system) and a candidate speculative arm. From the prompt files'
``decode_ms`` and ``new_tokens``, each prompt's cost is ``ms/token = decode_ms /
new_tokens`` (repeated measurements of a prompt in one arm are pooled as total ms / total
tokens). Per task, over the prompts present in both arms:

* ``speedup = mean_prompts(ms/token baseline) / mean_prompts(ms/token candidate)`` - a
  ratio of means, the paper's definition - and ``margin = speedup - 1`` (positive: the
  candidate is faster);
* the paired bootstrap interval of the margin (default 8000 resamples; prompts resampled
  with replacement, both arms of a prompt together), studentized for few prompts: each
  resample's log speedup deviates from the estimate's by ``t(G-1)/z x sqrt(G/(G-1))`` times
  its own (:func:`glance_law.stats.cluster.studentize_factor`; the plain percentile interval
  covered 76-82% with 5 prompts a task, 87-92% with 10); a pooled row (``by="none"``)
  resamples prompts within their task and uses t(G-H), H tasks, as the geomean rows do;
* prompt wins (prompts where the candidate's ms/token is lower), and the mean of the
  per-prompt ratios minus 1 as a sensitivity check;
* geometric means of the speedup across tasks (``geomean`` rows), with intervals from the
  same replicates (tasks resampled independently).

Tasks: an arm whose answers logged no category (task ``unknown`` everywhere: the EAGLE and
Medusa repositories' own answers) takes its tasks from the other arm's prompts of the same
question id (:func:`borrow_tasks`, with a note), so it pairs with a categorised baseline.

Target models: where the prompt files name several targets (the ``target`` column), each
speculative arm (drafter, target) is paired with the baseline of its own target, by (target,
task, prompt_id), and the table leads with a ``target`` column; an arm whose target has no
baseline gets a note and no row (a baseline of another target is never used).

**Round cost** (:func:`round_cost`): OLS of ``round_ms`` on ``1 + draft_passes + budget``
over the speculative rounds, one regression per drafter (rounds of different decoders are
never pooled: across drafters ``draft_passes`` and ``budget`` would measure the decoder,
not the cost of a pass or a node; a ``drafter`` column leads the table when there are
several), CR1 prompt-clustered, t with G-1 df: ms per sequential draft pass, ms per tree
node, and the constant, also in target-forward units (divided by the baseline's mean ms
per target forward - one baseline shared by every drafter: its mean ``round_ms`` when
autoregressive rounds are logged, else its pooled ms/token), with a prompt-bootstrap
interval for that ratio. Terms that do not vary within a drafter's rounds are dropped
(noted per drafter; the constant then absorbs them).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data.arms import (
    UNKNOWN_TARGET,
    label_targets,
    parse_label,
    plain_drafter,
    target_names,
    targets,
)
from glance_law.data.schema import SUPPLIED_BY
from glance_law.data.tasks import NO_TASK
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.results.base import Result, TableResult
from glance_law.stats.cluster import (
    bootstrap_counts,
    cluster_codes,
    percentile_interval,
    studentized_percentile,
)

from . import common as E
from .probe import clustered_ols

__all__ = ["per_prompt_cost", "borrow_tasks", "timing_ledger", "round_cost", "TimingResult", "RoundCostResult",
           "cli_section", "add_cli_arguments"]

ANALYSIS = "the timing ledger"
#: Round columns the CLI section reads (``python -m glance_law.fit`` reads only these
#: besides the law's own and the contract's key columns).
CLI_COLUMNS = ("round_ms", "draft_passes", "budget")
#: Round columns the section cannot do without: none (the ledger reads the prompt files; round costs are optional).
NEEDS = ()


def per_prompt_cost(prompts: pd.DataFrame, notes: list[str], arm: str) -> pd.DataFrame:
    """(drafter, target, task, prompt_id) -> decode_ms, new_tokens, ms_per_token (matched condition);
    ``target`` is "" where the prompt files name no target model."""
    for c in ("decode_ms", "new_tokens"):
        if c not in prompts.columns or prompts[c].isna().all():
            raise MissingColumnError(f"'{c}' in the {arm} arm's prompt files", ANALYSIS,
                                     "glance-log (recorded by default)")
    P = E.with_arm_labels(prompts)
    if "target" in P.columns and P["target"].notna().any():
        P["target"] = target_names(P["target"])      # none -> unknown; a target named so is quoted (data.arms)
    else:
        P["target"] = ""
    n0 = len(P)
    P = P.loc[P["condition"] == "matched"]
    if len(P) < n0:
        notes.append(f"{arm}: {n0 - len(P)} prompt row(s) in other conditions excluded")
    bad = P["decode_ms"].isna() | P["new_tokens"].isna() | (P["new_tokens"] <= 0) | (P["decode_ms"] < 0)
    if bad.any():
        notes.append(f"{arm}: {int(bad.sum())} prompt row(s) without timing or with no new tokens excluded")
        P = P.loc[~bad]
    g = P.groupby(["drafter", "target", "task", "prompt_id"], sort=True, observed=True)
    out = g.agg(decode_ms=("decode_ms", "sum"), new_tokens=("new_tokens", "sum"),
                repeats=("decode_ms", "size")).reset_index()
    rep = int((out["repeats"] > 1).sum())
    if rep:
        notes.append(f"{arm}: {rep} prompt(s) measured more than once; pooled as total ms / total tokens")
    out["ms_per_token"] = out["decode_ms"].astype(float) / out["new_tokens"].astype(float)
    return out.drop(columns="repeats")


@dataclass(frozen=True, eq=False)
class TimingResult(Result):
    """Per (candidate arm, task) speedup rows plus geometric means."""

    title: ClassVar[str] = "Timing ledger: paired ms/token, speedup (ratio of means), bootstrap margin, wins"
    #: What a width-limited text table keeps: the speedup and its paired-bootstrap margin.
    display_keep: ClassVar[tuple[str, ...]] = ("speedup", "margin")
    frame: pd.DataFrame
    prompt_frame: pd.DataFrame
    level: float = 0.95
    extra_notes: tuple[str, ...] = field(default=())

    def to_frame(self) -> pd.DataFrame:
        return self.frame.copy()

    def prompts(self) -> pd.DataFrame:
        """Per paired prompt: both arms' ms/token and the ratio."""
        return self.prompt_frame.copy()

    @property
    def notes(self) -> tuple[str, ...]:
        return self.extra_notes


@dataclass(frozen=True, eq=False)
class RoundCostResult(TableResult):
    """The round-cost regression, one row per (drafter, term)."""

    title: ClassVar[str] = "Round cost: round_ms ~ 1 + draft_passes + budget (Appendix E)"


def _boot_weights(strata_sizes, n_boot, rng):
    """Independent prompt-level multiplicities per stratum: list of (n_boot, G_s) arrays."""
    out = []
    for G in strata_sizes:
        out.append(np.concatenate(list(bootstrap_counts(G, n_boot, rng)), axis=0).astype(float))
    return out


def timing_ledger(baseline: pd.DataFrame, candidate: pd.DataFrame, *, n_boot: int = 8000, seed: int = 0,
                  level: float = 0.95, by: str | None = "task") -> TimingResult:
    """Paired per-task speedups of ``candidate`` over ``baseline`` prompt files (see the module docstring).

    Parameters
    ----------
    baseline, candidate : DataFrame
        Prompt files of the autoregressive baseline and of the speculative run.
    n_boot : int, default 8000
        Prompt-level bootstrap replicates of the speedup intervals.
    seed : int, default 0
        Bootstrap seed.
    level : float, default 0.95
        Interval level (prompt-clustered).
    by : str, default "task"
        "task": one row per task (and their geometric mean); "none": one row per arm over every
        paired prompt, labelled "pooled".

    Returns
    -------
    TimingResult
        Paired ms/token and speedup per task.

    Examples
    --------
    >>> import glance_law as gl  # doctest: +SKIP
    >>> res = gl.timing_ledger(base_prompts, spec_prompts)  # doctest: +SKIP
    """
    if n_boot < 0:
        raise GlanceError("the number of bootstrap resamples must be >= 0")
    notes: list[str] = []
    base = per_prompt_cost(baseline, notes, "baseline")
    cand = per_prompt_cost(candidate, notes, "candidate")
    base_drafters = sorted(set(base["drafter"]))
    if len(base_drafters) > 1:
        is_ar = plain_drafter(base["drafter"]) == "ar"      # "ar @ <target>" labels too
        if is_ar.any():
            notes.append(f"baseline files hold drafters {', '.join(base_drafters)}; the ar arm is the baseline")
            base = base.loc[is_ar]
        else:
            raise GlanceError(f"{ANALYSIS}: the baseline files hold several arms ({', '.join(base_drafters)}); "
                              "pass one arm's files as BASELINE_GLOB")
    cand = cand.loc[~cand["drafter"].isin(set(base["drafter"]))]
    if not len(cand):
        raise MissingColumnError("prompt files of a candidate arm other than the baseline's drafter", ANALYSIS,
                                 "glance-log (the speculative run whose prompts the baseline also decoded)")
    base, cand = borrow_tasks(base, cand, notes)
    base, cand, key, by_target = _target_pairing(base, cand, notes)
    rng = np.random.default_rng(seed)
    rows, prow = [], []
    arms = cand.groupby(["target", "drafter"], sort=True) if by_target else cand.groupby("drafter", sort=True)
    for arm_key, carm in arms:
        target, drafter = arm_key if by_target else (None, arm_key[0] if isinstance(arm_key, tuple) else arm_key)
        who = f"{drafter} on {target}" if by_target else drafter
        arm_base = base.loc[base["target"] == target] if "target" in key else base
        if not len(arm_base):
            notes.append(f"{who}: no baseline run of target {target} among the baseline files (they hold "
                         f"{', '.join(sorted(set(base['target'])))}): no speedup (a baseline of another target is "
                         "never used)")
            continue
        pairs = carm.merge(arm_base[key + ["ms_per_token", "decode_ms", "new_tokens"]],
                           on=key, suffixes=("", "_base"))
        unp = len(carm) - len(pairs)
        n_base_task = arm_base.loc[arm_base["task"].isin(set(carm["task"]))]
        unp_b = len(n_base_task) - len(pairs)
        if unp or unp_b:
            notes.append(f"{who}: {unp} candidate and {unp_b} baseline prompt(s) without a partner excluded")
        if not len(pairs):
            notes.append(f"{who}: no prompt decoded by both arms")
            continue
        tag = {"target": target} if by_target else {}
        pooled = not E.by_columns(by)
        tasks = [E.GROUP_ALL] if pooled else sorted(set(pairs["task"]))
        boots = []
        for task in tasks:
            sub = pairs if pooled else pairs.loc[pairs["task"] == task]
            xb = sub["ms_per_token_base"].to_numpy(float)
            xc = sub["ms_per_token"].to_numpy(float)
            G = len(sub)
            sp = xb.mean() / xc.mean()
            ratio = xb / xc
            # prompts resampled within their task (a pooled row is stratified by task: the tasks' prompts are
            # fixed by design, their differences are not noise)
            sizes = sub.groupby("task", sort=True).size().to_numpy() if pooled else np.array([G])
            H = int(sizes.size)
            if n_boot > 0 and G - H >= 1:
                order = np.argsort(sub["task"].to_numpy(), kind="stable") if pooled else np.arange(G)
                W = np.concatenate(_boot_weights(sizes, n_boot, rng), axis=1)
                draws = (W @ xb[order]) / (W @ xc[order])
                lo, hi = studentized_percentile(draws, sp, G, level, strata=H, log=True)
                lo, hi = lo - 1.0, hi - 1.0
            else:
                draws = np.full(max(n_boot, 1), np.nan)
                lo = hi = np.nan
            boots.append(draws)
            rows.append({**tag, "drafter": drafter, "task": task, "prompts": G,
                         "ms_per_token_baseline": float(xb.mean()), "ms_per_token_candidate": float(xc.mean()),
                         "speedup": float(sp), "margin": float(sp - 1.0), "margin_lo": float(lo),
                         "margin_hi": float(hi), "wins": int((xc < xb).sum()),
                         "win_share": float((xc < xb).mean()), "mean_prompt_ratio": float(ratio.mean() - 1.0)})
            prow.append(sub.assign(ratio=ratio)[list(tag) + ["drafter", "task", "prompt_id", "ms_per_token_base",
                                                 "ms_per_token", "ratio"]]
                        .rename(columns={"ms_per_token_base": "ms_per_token_baseline",
                                         "ms_per_token": "ms_per_token_candidate"}))
        if len(tasks) > 1:
            sps = np.array([r["speedup"] for r in rows[-len(tasks):]])
            gm = float(np.exp(np.mean(np.log(sps))))
            B = np.stack(boots, axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                gd = np.exp(np.mean(np.log(B), axis=1))
            n_p = sum(r["prompts"] for r in rows[-len(tasks):])
            # the tasks' draws are independent strata of the geomean: studentized as a whole (t with n_p - tasks
            # df), not task by task (each task's own small-sample factor would compound: 99% coverage at 5 prompts)
            lo, hi = (studentized_percentile(gd, gm, n_p, level, strata=len(tasks), log=True)
                      if np.isfinite(gd).any() and n_p > len(tasks) else (np.nan, np.nan))
            lo, hi = lo - 1.0, hi - 1.0
            wins = sum(r["wins"] for r in rows[-len(tasks):])
            rows.append({**tag, "drafter": drafter, "task": "geomean", "prompts": n_p,
                         "ms_per_token_baseline": np.nan, "ms_per_token_candidate": np.nan,
                         "speedup": gm, "margin": gm - 1.0, "margin_lo": float(lo), "margin_hi": float(hi),
                         "wins": wins, "win_share": wins / n_p, "mean_prompt_ratio": np.nan})
    if not rows:
        raise GlanceError(f"{ANALYSIS}: no prompt was decoded by both arms (pairs by task and prompt_id)")
    frame = pd.DataFrame(rows)
    if frame["drafter"].nunique() == 1 and not by_target:
        frame = frame.drop(columns="drafter")
    notes.append(f"ms/token = decode_ms / new_tokens per prompt; speedup = ratio of the prompt means "
                 f"(baseline / candidate); margin = speedup - 1 with a paired {n_boot}-resample prompt-bootstrap "
                 f"percentile interval ({int(level * 100)}%), studentized: each resample's log speedup deviates "
                 "from the estimate by t(G-1)/z x sqrt(G/(G-1)) times its own (a pooled row: prompts resampled "
                 "within their task, t(G-H) with H tasks; the geomean: the tasks' replicates together, t(G-H)); wins = prompts where the candidate is faster; "
                 "mean_prompt_ratio = mean of per-prompt ratios - 1 (sensitivity)")
    return TimingResult(frame, pd.concat(prow, ignore_index=True) if prow else pd.DataFrame(), level,
                        tuple(dict.fromkeys(notes)))


def borrow_tasks(base: pd.DataFrame, cand: pd.DataFrame, notes: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(base, cand) with the tasks of an arm that logged none taken from the other arm, by prompt_id.

    Answers without a ``category`` (the EAGLE and Medusa repositories' own per-turn files) import
    with task ``unknown``; paired by (task, prompt_id) with a categorised baseline they would pair
    with nothing. Where every row of one arm has task ``unknown`` and the other arm names tasks,
    the unlabelled arm's rows take the task of the other arm's row with the same prompt_id (the
    question id), when that prompt_id has exactly one task there; a note says how many did."""
    def labelled(f):
        return bool(len(f)) and not (f["task"].astype(str) == NO_TASK).all()

    if labelled(base) == labelled(cand) or not (len(base) and len(cand)):
        return base, cand
    src, dst, who = (base, cand, "candidate") if labelled(base) else (cand, base, "baseline")
    known = src.loc[src["task"].astype(str) != NO_TASK, ["prompt_id", "task"]].astype(str).drop_duplicates()
    many = known["prompt_id"].duplicated(keep=False)
    lookup = dict(zip(known.loc[~many, "prompt_id"], known.loc[~many, "task"]))
    ids = dst["prompt_id"].astype(str)
    task = ids.map(lookup)
    got = int(task.notna().sum())
    if not got:
        return base, cand
    dst = dst.assign(task=task.fillna(NO_TASK).to_numpy())
    notes.append(f"the {who} arm's answers carry no category (task '{NO_TASK}'): {got} of its {len(ids)} prompt(s) "
                 f"take the task of the other arm's prompt with the same question id (prompt_id)"
                 + (f"; {int(many.sum())} question id(s) with several tasks there left unlabelled" if many.any() else ""))
    return (base, dst) if who == "candidate" else (dst, cand)


def _target_pairing(base: pd.DataFrame, cand: pd.DataFrame, notes: list[str]):
    """(base, cand, pairing key, whether candidate arms are split by target).

    Where both arms name their target models and either holds several (or they differ), each
    candidate arm is paired with the baseline run of its own target, by (target, task,
    prompt_id); a target without a baseline gets a note and no row. Otherwise the pairing is
    by (task, prompt_id) as before (one target, or none named); candidate arms of several
    targets still stay apart. A baseline of several targets with candidates that name none is
    refused (which baseline is theirs is unknown)."""
    tb = sorted(set(base["target"]) - {""})
    tc = sorted(set(cand["target"]) - {""})
    if tb and tc and (len(tb) > 1 or len(tc) > 1 or tb != tc):
        if (base["target"] == "").any() or (cand["target"] == "").any():
            notes.append(f"prompt rows without a target read as target '{UNKNOWN_TARGET}'")
            base = base.assign(target=base["target"].replace("", UNKNOWN_TARGET))
            cand = cand.assign(target=cand["target"].replace("", UNKNOWN_TARGET))
        notes.append(f"target models: candidate {', '.join(tc)}; baseline {', '.join(tb)}: each speculative arm is "
                     "paired with the baseline run of its own target, by (target, task, prompt_id)")
        return base, cand, ["target", "task", "prompt_id"], True
    if len(tb) > 1:
        raise GlanceError(f"{ANALYSIS}: the baseline files hold {len(tb)} target models ({', '.join(tb)}) but the "
                          "candidate's prompt files name none, so the baseline of the candidate's target is unknown; "
                          "pass one target's baseline as BASELINE_GLOB")
    if len(tc) > 1:
        notes.append(f"the baseline files name no target model; the candidate's targets ({', '.join(tc)}) are each "
                     "paired with that one baseline: check that it decoded on the right target")
        return base, cand, ["task", "prompt_id"], True
    return base, cand, ["task", "prompt_id"], False


def round_cost(rounds: pd.DataFrame, *, baseline_rounds: pd.DataFrame | None = None,
               baseline_prompts: pd.DataFrame | None = None, n_boot: int = 2000, seed: int = 0,
               level: float = 0.95) -> RoundCostResult:
    """round_ms ~ 1 + draft_passes + budget over speculative rounds, one regression per drafter (see the module docstring).

    Parameters
    ----------
    rounds : DataFrame
        Speculative rounds with ``round_ms``, ``draft_passes`` and ``budget``.
    baseline_rounds, baseline_prompts : DataFrame, optional
        The autoregressive arm's rounds and prompt files (its cost per token).
    n_boot : int, default 2000
        Prompt-level bootstrap replicates.
    seed : int, default 0
        Bootstrap seed.
    level : float, default 0.95
        Interval level (prompt-clustered).

    Returns
    -------
    RoundCostResult
        One regression per drafter.

    Examples
    --------
    >>> import glance_law as gl
    >>> type(gl.round_cost(gl.simulate_rounds(seed=0))).__name__
    'RoundCostResult'
    """
    notes: list[str] = []
    for c in ("round_ms", "draft_passes", "budget"):
        if c not in rounds.columns or rounds[c].isna().all():
            raise MissingColumnError(f"the '{c}' column", "the round-cost regression", SUPPLIED_BY.get(c, "glance-log"))
    named = targets(rounds)
    rounds = label_targets(rounds, notes)      # several target models: one regression per drafter @ target
    R = E.speculative_rounds(rounds, notes)
    base_named = sorted(set(_frame_targets(baseline_rounds)) | set(_frame_targets(baseline_prompts)))
    per_target = len(named) > 1 or len(base_named) > 1 or bool(named and base_named and named != base_named)
    fwd = _forward_cost(baseline_rounds, baseline_prompts, notes) if not per_target or not base_named else None
    if per_target and not base_named and fwd[0] is not None:
        notes.append(f"the baseline names no target model; the rounds' targets ({', '.join(named)}) each use that "
                     "one baseline's forward cost: check that it decoded on the right target")
    if per_target and base_named and not named and len(base_named) > 1:
        raise GlanceError(f"the round-cost regression: the baseline holds {len(base_named)} target models "
                          f"({', '.join(base_named)}) but the rounds name none, so their target's forward cost is "
                          "unknown; pass one target's baseline")
    cols = E.arm_columns(R, [])
    frames, used = [], {}
    for key, sub in E.group_items(R, cols):
        drafter = key.get("drafter")
        tag = f"{drafter}: " if drafter is not None else ""
        arm_fwd = fwd
        if fwd is None:         # the forward cost of this arm's own target, never another target's
            tgt = parse_label(drafter)[1] if drafter is not None else None
            tgt = tgt if tgt is not None else (named[0] if len(named) == 1 else UNKNOWN_TARGET)
            arm_fwd = _forward_cost(_of_target(baseline_rounds, tgt, base_named),
                                    _of_target(baseline_prompts, tgt, base_named), notes)
            if arm_fwd[0] is None:
                notes.append(f"{tag}no baseline timing of target {tgt} (the baseline holds {', '.join(base_named)}): "
                             "its constant is not converted to target forwards (another target's is never used)")
            else:
                used[tgt] = arm_fwd
        fr = _round_cost_one(sub, arm_fwd, n_boot, seed, level, notes, tag)
        if fr is not None:
            frames.append(fr.assign(drafter=drafter) if drafter is not None else fr)
    if not frames:
        raise GlanceError("the round-cost regression needs at least 3 timed speculative rounds"
                          + (" of one drafter" if cols else ""))
    frame = pd.concat(frames, ignore_index=True)
    if cols:
        frame = frame[["drafter"] + [c for c in frame.columns if c != "drafter"]]
        notes.append("one regression per drafter: rounds of different decoders are never pooled")
    if fwd is None and used:
        notes.append("target forward per target model (" + "; ".join(f"{t}: {f[1]}" for t, f in sorted(used.items()))
                     + f"); constant_target_forwards = constant_ms / target_forward_ms of the arm's own target with a "
                     f"{n_boot}-resample prompt-bootstrap interval (both terms resampled together)")
    elif fwd is None:
        notes.append("no baseline (autoregressive) timings of the rounds' targets: the constant is not converted to "
                     "target forwards")
    elif fwd[0] is not None:
        notes.append(f"target forward = {fwd[1]} (one baseline for every drafter); constant_target_forwards = "
                     f"constant_ms / target_forward_ms with a {n_boot}-resample prompt-bootstrap interval "
                     "(both terms resampled together)")
    else:
        notes.append("no baseline (autoregressive) timings: the constant is not converted to target forwards")
    return RoundCostResult(frame, level, tuple(dict.fromkeys(notes)))


def _round_cost_one(R, fwd_cost, n_boot, seed, level, notes, tag):
    """The regression over one drafter's rounds: rows (term, estimate, estimate_lo, estimate_hi, p),
    or None (noted) when fewer than 3 rounds are timed."""
    bad = R[["round_ms", "draft_passes", "budget"]].isna().any(axis=1).to_numpy()
    if bad.any():
        notes.append(f"{tag}{int(bad.sum())} round(s) without round_ms/draft_passes/budget excluded")
        R = R.loc[~bad]
    if len(R) < 3:
        notes.append(f"{tag}only {len(R)} timed speculative round(s); no regression (it needs at least 3)")
        return None
    codes, G = cluster_codes(R)
    y = R["round_ms"].to_numpy(float)
    terms = [("constant_ms", np.ones(len(R)))]
    for name, col in (("ms_per_draft_pass", "draft_passes"), ("ms_per_tree_node", "budget")):
        x = R[col].to_numpy(float)
        if np.ptp(x) > 0:
            terms.append((name, x))
        else:
            notes.append(f"{tag}{col} does not vary in these rounds (always {x[0]:g}); its term is dropped and the "
                         "constant absorbs it - log several configurations to separate them")
    X = np.column_stack([t for _, t in terms])
    if np.linalg.matrix_rank(X) < X.shape[1]:
        notes.append(f"{tag}draft_passes and budget are collinear here; only draft_passes is kept")
        terms = terms[:2]
        X = X[:, :2]
    res = clustered_ols(y, X, codes, level)
    ci = res.conf_int(alpha=1 - level)
    rows = [{"term": name, "estimate": float(res.params[j]), "estimate_lo": float(ci[j][0]),
             "estimate_hi": float(ci[j][1]), "p": float(res.pvalues[j])} for j, (name, _) in enumerate(terms)]
    # the constant in target-forward units
    fwd, _, fcodes, fvals, fw = fwd_cost
    if fwd is not None:
        est = float(res.params[0]) / fwd
        lo = hi = np.nan
        if n_boot > 0:
            keys = pd.concat([R[["task", "prompt_id"]].astype(str), fcodes], ignore_index=True)
            allc, Ga = cluster_codes(keys)
            rc, bc = allc[:len(R)], allc[len(R):]
            # per-cluster sufficient statistics of the OLS and of the forward cost
            XtX = np.stack([np.bincount(rc, weights=X[:, i] * X[:, j], minlength=Ga)
                            for i in range(X.shape[1]) for j in range(X.shape[1])], axis=1)
            Xty = np.stack([np.bincount(rc, weights=X[:, i] * y, minlength=Ga) for i in range(X.shape[1])], axis=1)
            fs = np.bincount(bc, weights=fvals, minlength=Ga)
            fn = np.bincount(bc, weights=fw, minlength=Ga)
            rng = np.random.default_rng(seed)
            draws = []
            k = X.shape[1]
            singular = 0
            for W in bootstrap_counts(Ga, n_boot, rng):
                A = (W @ XtX).reshape(-1, k, k)
                bvec = W @ Xty
                # a resample can leave a term without variation: drop that replicate, not the batch
                ok = np.linalg.matrix_rank(A) == k
                singular += int((~ok).sum())
                beta = np.linalg.solve(A[ok], bvec[ok][..., None])[..., 0]
                draws.append(beta[:, 0] / ((W[ok] @ fs) / (W[ok] @ fn)))
            draws = np.concatenate(draws) if draws else np.zeros(0)
            if singular:
                notes.append(f"{tag}{singular} of {n_boot} bootstrap resamples left a singular design (a term without "
                             "variation) and were dropped from the constant_target_forwards interval")
            if draws.size:
                lo, hi = percentile_interval(draws, level)
        rows.append({"term": "constant_target_forwards", "estimate": est, "estimate_lo": float(lo),
                     "estimate_hi": float(hi), "p": np.nan})
        rows.append({"term": "target_forward_ms", "estimate": fwd, "estimate_lo": np.nan,
                     "estimate_hi": np.nan, "p": np.nan})
    notes.append(f"{tag}OLS over {len(R)} speculative rounds, {G} prompts; CR1 prompt-clustered intervals, "
                 "t with G-1 df")
    return pd.DataFrame(rows)


def _frame_targets(frame) -> list[str]:
    """The targets a baseline frame names (its ``target`` column; [] without one)."""
    return targets(frame) if isinstance(frame, pd.DataFrame) else []


def _of_target(frame, target: str, base_named: list[str]):
    """The rows of ``frame`` of ``target``: by its ``target`` column; a frame without one is
    the baseline's only target's (None where the baseline holds several)."""
    if not isinstance(frame, pd.DataFrame):
        return None
    if "target" not in frame.columns:
        return frame if base_named == [target] else None
    return frame.loc[(target_names(frame["target"]) == target).to_numpy()]


def _forward_cost(baseline_rounds, baseline_prompts, notes):
    """Mean ms per target forward from the baseline arm, with per-row values for the bootstrap."""
    if baseline_rounds is not None and "round_ms" in baseline_rounds.columns:
        br = baseline_rounds
        if "horizon" in br.columns:
            br = br.loc[br["horizon"] <= 0]
        br = br.loc[br["round_ms"].notna()]
        if len(br):
            v = br["round_ms"].to_numpy(float)
            return (float(v.mean()), "mean round_ms of the baseline's autoregressive rounds",
                    br[["task", "prompt_id"]].astype(str).reset_index(drop=True), v, np.ones(len(v)))
    if baseline_prompts is not None and {"decode_ms", "new_tokens"} <= set(baseline_prompts.columns):
        bp = E.with_arm_labels(baseline_prompts)
        if "drafter" in bp.columns and (plain_drafter(bp["drafter"]) == "ar").any():
            bp = bp.loc[plain_drafter(bp["drafter"]) == "ar"]
        bp = bp.loc[bp["decode_ms"].notna() & (bp["new_tokens"] > 0)]
        if len(bp):
            ms = bp["decode_ms"].to_numpy(float)
            nt = bp["new_tokens"].to_numpy(float)
            return (float(ms.sum() / nt.sum()), "the baseline's pooled decode ms per token",
                    bp[["task", "prompt_id"]].reset_index(drop=True), ms, nt)
    return None, "", None, None, None


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "timing ledger (--timing BASELINE_GLOB)",
        "BASELINE_GLOB: the baseline arm's files or folder (quote a glob so the shell does not expand it); "
        "the candidate is the speculative arm among the main PATHS")
    g.add_argument("--timing-bootstrap", type=int, default=8000, metavar="B",
                   help="paired prompt-bootstrap resamples for the margin (default 8000)")


def cli_section(logs, args: argparse.Namespace) -> list[Result]:
    from glance_law.data.declare import horizon_of
    from glance_law.data.io import LogError, read_logs

    pattern = args.timing
    hz = horizon_of(args)                       # --horizon: the rereads of imported files take it too
    base_p = E.with_run_target(read_logs(pattern, kind="prompts", horizon=hz))
    try:
        base_r = read_logs(pattern, kind="rounds", horizon=hz).frame
    except LogError:
        base_r = None
    cand_p = E.prompt_table(logs, ANALYSIS, horizon=hz)
    level = float(getattr(args, "level", 0.95) or 0.95)
    seed = int(getattr(args, "seed", 0) or 0)
    res = timing_ledger(base_p, cand_p, n_boot=int(getattr(args, "timing_bootstrap", 8000)), seed=seed, level=level,
                        by="task" if E.cli_by(args) else "none")        # --by none: one pooled row per arm
    out: list[Result] = [res]
    rounds = E.as_frame(logs)
    base_drafters = set(plain_drafter(E.with_arm_labels(base_p)["drafter"]))
    if "drafter" in rounds.columns:    # "ar @ <target>" rounds are the baseline's drafter too
        rounds = rounds.loc[~plain_drafter(rounds["drafter"]).isin(base_drafters - {"unknown"})]
    need = ("round_ms", "draft_passes", "budget")
    missing = [c for c in need if c not in rounds.columns or rounds[c].isna().all()]
    if missing or not len(rounds):
        note = (f"round-cost regression skipped: the candidate's round files lack {', '.join(missing)}"
                if missing else "round-cost regression skipped: no candidate rounds among the inputs")
        return [replace(res, extra_notes=res.extra_notes + (note,))]
    out.append(round_cost(rounds, baseline_rounds=base_r, baseline_prompts=base_p, seed=seed, level=level))
    return out
