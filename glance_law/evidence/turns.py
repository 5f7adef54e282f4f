"""Tokens per verification step from per-turn counts: what answers without per-step lengths allow.

The EAGLE, Medusa and Hydra repositories' own answer files (and Spec-Bench answers whose
``accept_lengths`` are missing) log per turn only ``idxs`` (the loop index of the turn's last
verification step: idx + 1 steps), ``new_tokens`` and ``wall_time``. The importer keeps them
as the prompt table's per-turn lists ``turn_tokens`` and ``turn_rounds`` (docs/schema.md);
a prompt row without them (glance-log's ``prompts-*.parquet``) is one turn of ``new_tokens``
over ``rounds``. Per group (per drafter, then a pooled row per drafter), over the speculative
arms' turns of the matched condition (over the autoregressive arm's own turns when the inputs
hold nothing else: a baseline alone, tabulated with a note):

* ``tau`` = sum of new tokens / sum of verification steps: Spec-Bench's "mean accepted tokens"
  (hemingkx/Spec-Bench ``evaluation/speed.py`` @ 3594e92 averages ``accept_lengths`` over every
  step of the file, which is this ratio when the lengths sum to ``new_tokens``), a ratio
  estimator with a prompt-clustered bootstrap-t interval (prompts = (task, prompt_id)
  resampled; each replicate studentized by its own CR1 standard error of the residuals
  ``tokens - tau * steps`` summed per prompt; CR1 with t(G-1) covered 87-93% with 5 prompts a
  task; docs/theory-evidence.md);
* ``prompt_tau``: the mean over prompts of each prompt's own tokens / steps (each prompt
  weighs the same, however long its answer), with its bootstrap-t interval;
* the pooled row of each drafter is stratified by the group when the groups are sets of
  prompts (tasks): prompts resampled and centred within their group (unstratified, the
  differences between tasks counted as noise: 98-100% coverage);
* ``turns``, ``rounds`` (verification steps) and ``new_tokens``; turns without a step are left
  out and counted in the notes.

:func:`turn_rows` is the reader's side (prompt rows -> one row per turn), :func:`ratio_tau` the
statistic (pure numpy), :func:`turn_tau` the front door that returns a :class:`TurnTau`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data.arms import label_targets, plain_drafter
from glance_law.errors import GlanceError
from glance_law.results.base import TableResult
from glance_law.stats.cluster import bootstrap_counts, cluster_codes, t_crit

from . import common as E

__all__ = ["turn_tau", "turn_rows", "ratio_tau", "TurnTau", "TURN_COLUMNS", "SPEC_BENCH_TAU"]

ANALYSIS = "tokens per step from per-turn counts"
#: Where Spec-Bench defines its mean accepted tokens (the number ``tau`` reproduces).
SPEC_BENCH_TAU = "hemingkx/Spec-Bench evaluation/speed.py @ 3594e92"
#: The note of a table whose inputs hold the autoregressive arm only (its turns are tabulated).
BASELINE_NOTE = "the inputs hold the autoregressive arm only (drafter ar: the timing ledger's baseline)"
TURN_COLUMNS = ("drafter", "task", "prompts", "turns", "rounds", "new_tokens", "tau", "tau_lo", "tau_hi",
                "prompt_tau", "prompt_tau_lo", "prompt_tau_hi")


@dataclass(frozen=True, eq=False)
class TurnTau(TableResult):
    """Per group: prompts, turns, verification steps, new tokens, tau (ratio of sums) and the mean
    per-prompt tau, with prompt-clustered intervals. ``turn_frame``: one row per turn."""

    TURNS_TITLE: ClassVar[str] = "tokens per verification step per group, from per-turn counts (no per-step lengths)"
    STEPS_TITLE: ClassVar[str] = ("tokens per verification step per group, from per-step lengths (an autoregressive "
                                  "baseline: nothing drafted, one token a step)")
    display_keep: ClassVar[tuple[str, ...]] = ("drafter", "task", "prompts", "tau", "prompt_tau")
    #: Read by the CLIs: this summary comes from per-turn counts (its sentences and closing line differ).
    per_turn: ClassVar[bool] = True
    by: str | None = "task"
    turn_frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the rows come from per-step lengths of the autoregressive arm alone (e.g. Spec-Bench's vanilla
    #: answers), not from per-turn counts: the title says so
    from_steps: bool = False

    @property
    def title(self) -> str:
        return self.STEPS_TITLE if self.from_steps else self.TURNS_TITLE

    def turns(self) -> pd.DataFrame:
        """One row per turn: drafter, task, prompt_id, run_id, turn, new_tokens, rounds, tau."""
        return self.turn_frame.copy()

    def display_frame(self) -> pd.DataFrame:
        f = self.frame
        return f if f["drafter"].nunique() > 1 else f.drop(columns="drafter")


def _lists(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(per-row list lengths, -1 for a null list; the flat values) of a column of lists."""
    vals = [None if v is None or isinstance(v, float) else v for v in col.tolist()]
    lens = np.fromiter((-1 if v is None else len(v) for v in vals), dtype=np.int64, count=len(vals))
    parts = [np.asarray(v, dtype=np.float64) for v in vals if v is not None]
    return lens, np.concatenate(parts) if parts else np.zeros(0)


def turn_rows(prompts: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """One row per turn (drafter, task, prompt_id, run_id, condition, turn, new_tokens, rounds) from
    prompt rows: their ``turn_tokens``/``turn_rounds`` lists where both are present and agree in
    length, else the whole prompt as one turn (``new_tokens`` over ``rounds``). Rows that carry
    neither are left out and counted in ``notes``."""
    P = E.with_arm_labels(prompts.reset_index(drop=True))
    n = len(P)
    zero = np.zeros(n, dtype=np.int64)
    tl, tv = _lists(P["turn_tokens"]) if "turn_tokens" in P.columns else (zero - 1, np.zeros(0))
    rl, rv = _lists(P["turn_rounds"]) if "turn_rounds" in P.columns else (zero - 1, np.zeros(0))
    both = (tl >= 0) & (rl >= 0) & (tl == rl)
    # flat values of the rows whose lists are used
    t_keep = np.repeat(both[tl >= 0], np.maximum(tl[tl >= 0], 0))
    r_keep = np.repeat(both[rl >= 0], np.maximum(rl[rl >= 0], 0))
    tok, steps = tv[t_keep], rv[r_keep]
    per_row = np.where(both, tl, 1)
    whole = ~both
    nt = P["new_tokens"].to_numpy(np.float64, na_value=np.nan) if "new_tokens" in P.columns else np.full(n, np.nan)
    rd = P["rounds"].to_numpy(np.float64, na_value=np.nan) if "rounds" in P.columns else np.full(n, np.nan)
    row = np.repeat(np.arange(n), per_row)
    turn = np.arange(row.size) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    tokens = np.empty(row.size)
    rounds = np.empty(row.size)
    listed = np.repeat(both, per_row)
    tokens[listed], rounds[listed] = tok, steps
    tokens[~listed], rounds[~listed] = nt[whole], rd[whole]
    if whole.any() and both.any():
        notes.append(f"{int(whole.sum())} prompt row(s) without per-turn counts read as one turn each (new_tokens "
                     "over rounds)")
    keys = [c for c in ("drafter", "target", "task", "prompt_id", "run_id", "condition") if c in P.columns]
    out = P[keys].iloc[row].reset_index(drop=True)
    out["turn"] = turn.astype(np.int64)
    out["new_tokens"] = tokens
    out["rounds"] = rounds
    bad = ~np.isfinite(tokens) | ~np.isfinite(rounds)
    if bad.any():
        notes.append(f"{int(bad.sum())} turn(s) without a token or step count left out")
        out = out.loc[~bad].reset_index(drop=True)
    return out


def _centred_ss(W: np.ndarray, v: np.ndarray, sid: np.ndarray) -> np.ndarray:
    """``sum_h G_h/(G_h-1) sum_{g in h} W_g (v_g - vbar_h)^2`` per row of the multiplicities ``W``
    (b, G) and values ``v`` (b, G) or (G,), ``vbar_h = sum_{g in h} W_g v_g / G_h``, strata ``sid``
    (0..H-1, one per cluster); a stratum of one cluster adds nothing."""
    v = np.broadcast_to(v, W.shape)
    out = np.zeros(W.shape[0])
    for h in np.unique(sid):
        m = sid == h
        Gh = int(m.sum())
        if Gh < 2:
            continue
        vbar = (W[:, m] * v[:, m]).sum(axis=1) / Gh
        out += Gh / (Gh - 1.0) * (W[:, m] * (v[:, m] - vbar[:, None]) ** 2).sum(axis=1)
    return out


def _boot_t(est: float, se: float, est_b: np.ndarray, se_b: np.ndarray, level: float) -> tuple[float, float]:
    """The bootstrap-t interval ``est - q_hi se, est - q_lo se`` from the replicates' studentized
    deviations ``(est_b - est) / se_b`` (replicates without spread left out)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (est_b - est) / se_b
    z = z[np.isfinite(z) & (se_b > 0)]
    if z.size < 2 or not np.isfinite(se):
        return np.nan, np.nan
    a = (1.0 - level) / 2.0
    q_lo, q_hi = np.quantile(z, [a, 1.0 - a])
    return float(est - q_hi * se), float(est - q_lo * se)


def ratio_tau(tokens: np.ndarray, steps: np.ndarray, codes: np.ndarray, n_clusters: int,
              level: float = 0.95, strata=None, n_boot: int = 999, seed: int = 0) -> dict:
    """Tokens per verification step of the units (turns) ``tokens``/``steps`` in clusters ``codes``
    (0..n_clusters-1): ``tau`` = sum(tokens) / sum(steps) (the ratio estimator) and ``prompt_tau`` =
    the mean over clusters of each cluster's own ratio, each with a prompt-level bootstrap-t interval:
    ``n_boot`` resamples of the clusters, each replicate's deviation from the estimate over its own
    CR1 standard error (the ratio's linearised residuals ``tokens - tau * steps`` summed per cluster;
    the prompt ratios' spread), the quantiles of that t scaled by the sample's CR1 standard error.
    With few prompts and uneven acceptance a t(G-1) interval covered 89-93% with 5 prompts a task;
    the bootstrap-t follows the skew (docs/theory-evidence.md). ``n_boot`` 0: CR1 with t(G-1).

    ``strata`` (one label per cluster: the task of a pooled row) makes both stratified (clusters
    resampled and centred within their stratum; t(G-H) without the bootstrap): the tasks of a pooled
    row are fixed by design and their differences are not sampling noise. Pure numpy."""
    tokens = np.asarray(tokens, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.float64)
    c_tok = np.bincount(codes, weights=tokens, minlength=n_clusters)
    c_steps = np.bincount(codes, weights=steps, minlength=n_clusters)
    present = c_steps > 0
    g = int(present.sum())
    ct, cs = c_tok[present], c_steps[present]
    tau = float(ct.sum() / cs.sum()) if g else np.nan
    ptau = ct / cs
    pm = float(ptau.mean()) if g else np.nan
    sid = np.zeros(g, np.int64) if strata is None else np.unique(np.asarray(strata)[present], return_inverse=True)[1]
    H = int(sid.max()) + 1 if g else 1
    one = np.ones((1, g))
    se = float(np.sqrt(_centred_ss(one, ct - tau * cs, sid)[0])) / cs.sum() if g - H >= 1 else np.nan
    pse = float(np.sqrt(_centred_ss(one, ptau, sid)[0])) / g if g - H >= 1 else np.nan
    t = t_crit(g - H + 1, level) if g - H >= 1 else np.nan
    lo, hi, plo, phi = tau - t * se, tau + t * se, pm - t * pse, pm + t * pse
    if n_boot > 0 and g - H >= 1:
        rng = np.random.default_rng(seed)
        order = np.argsort(sid, kind="stable")
        sizes = np.bincount(sid, minlength=H)
        W = np.empty((n_boot, g))
        W[:, order] = np.concatenate([np.concatenate(list(bootstrap_counts(int(n), n_boot, rng)), axis=0)
                                      for n in sizes], axis=1)
        tb = (W @ ct) / (W @ cs)
        seb = np.sqrt(_centred_ss(W, ct[None, :] - tb[:, None] * cs[None, :], sid)) / (W @ cs)
        lo, hi = _boot_t(tau, se, tb, seb, level)
        mb = (W @ ptau) / g
        plo, phi = _boot_t(pm, pse, mb, np.sqrt(_centred_ss(W, ptau, sid)) / g, level)
    return {"prompts": g, "turns": int(tokens.size), "rounds": int(steps.sum()), "new_tokens": int(tokens.sum()),
            "tau": tau, "tau_lo": lo, "tau_hi": hi, "prompt_tau": pm, "prompt_tau_lo": plo, "prompt_tau_hi": phi}


def _speculative_turns(T: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """The turns of speculative arms in the matched condition that took a step (exclusions noted);
    the autoregressive arm's own turns when the inputs hold nothing else."""
    ar = (plain_drafter(T["drafter"]) == "ar").to_numpy()
    if ar.all() and len(T):
        notes.append(f"{BASELINE_NOTE}: its own tokens per step (one token per step by construction, more where a "
                     "turn's count of new tokens exceeds its steps)")
        ar = np.zeros(len(T), dtype=bool)
    elif ar.any():
        notes.append(f"{int(ar.sum())} turn(s) of the autoregressive arm (drafter ar: one token per step) left out "
                     "(it is the timing ledger's baseline)")
    other = (T["condition"].astype(str) != "matched").to_numpy()
    if (other & ~ar).any():
        notes.append(f"{int((other & ~ar).sum())} turn(s) in other conditions left out (this table uses matched)")
    none = (T["rounds"].to_numpy() <= 0) & ~ar & ~other
    if none.any():
        notes.append(f"{int(none.sum())} turn(s) with no verification step (a failed or empty turn) left out")
    return T.loc[~(ar | other | none)].reset_index(drop=True)


def turn_tau(prompts, by: str | None = "task", level: float = 0.95, from_steps: bool = False, n_boot: int = 999,
             seed: int = 0) -> TurnTau:
    """Tokens per verification step per group and pooled, from per-turn (or per-prompt) counts.

    Parameters
    ----------
    prompts : DataFrame or LogSet
        Prompt rows (``glance_law.read_logs(PATHS, "prompts")``), with ``turn_tokens`` and
        ``turn_rounds`` where the source logged turns, else ``new_tokens`` and ``rounds``.
    by : str or None, default "task"
        Group column (a prompt column, or ``turn``: the turn's index); None: pooled rows only.
    level : float, default 0.95
        Interval level (prompt-clustered).
    from_steps : bool, default False
        The inputs carried per-step rows too (all autoregressive): when every row is of the
        autoregressive arm, the title and notes say the counts come from its per-step lengths.
    n_boot, seed : int, default 999, 0
        Prompt-bootstrap replicates of the bootstrap-t intervals (:func:`ratio_tau`; 0: CR1 with
        t(G-1)) and their seed.

    Returns
    -------
    TurnTau
        One row per (drafter, group) and a pooled row per drafter.

    Examples
    --------
    >>> import pandas as pd, glance_law as gl
    >>> p = pd.DataFrame({"run_id": "r", "prompt_id": ["1", "2"], "task": "qa", "drafter": "eagle",
    ...                   "new_tokens": [30, 20], "rounds": [10, 10]})
    >>> float(gl.turn_tau(p).to_frame()["tau"].iloc[-1])
    2.5
    """
    notes: list[str] = []
    frame = getattr(prompts, "frame", prompts)
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError(f"{ANALYSIS}: expected prompt rows (a DataFrame or a LogSet of kind prompts)")
    E.require(frame, ("task", "prompt_id"), ANALYSIS)
    if not {"turn_rounds", "rounds"} & set(frame.columns):
        raise GlanceError(f"{ANALYSIS}: no per-round rows, and the prompts carry neither turn_rounds nor rounds; "
                          "pass the rounds-*.parquet files beside them")
    T = _speculative_turns(turn_rows(label_targets(frame, notes), notes), notes)
    if by is not None and by not in T.columns:
        raise GlanceError(f"cannot group by '{by}': the prompt rows have no such column")
    if not len(T):
        raise GlanceError(f"{ANALYSIS}: no turn of a speculative arm with a verification step in the matched "
                          "condition")
    codes, G = cluster_codes(T)
    tok, steps = T["new_tokens"].to_numpy(), T["rounds"].to_numpy()
    stratum = _prompt_strata(T, by, codes, G, notes)
    rows = []
    for d in sorted(set(T["drafter"].astype(str))):
        dm = (T["drafter"].astype(str) == d).to_numpy()
        labels = [] if by is None else sorted(set(T.loc[dm, by].astype(str)), key=_natural)
        for g in labels + [E.GROUP_ALL]:
            m = dm if g == E.GROUP_ALL else dm & (T[by].astype(str) == g).to_numpy()
            c, k = np.unique(codes[m], return_inverse=True)
            # the pooled row over groups that are fixed strata of prompts (tasks): stratified by group
            strata = (stratum[c] if g == E.GROUP_ALL and by is not None and np.unique(stratum[c]).size > 1
                      else None)
            rows.append({"drafter": d, "task": g, **ratio_tau(tok[m], steps[m], k, c.size, level, strata=strata,
                                                                     n_boot=n_boot, seed=seed)})
    from_steps = bool(from_steps) and bool((plain_drafter(T["drafter"].astype(str)) == "ar").all())
    why = ("the autoregressive arm drafts nothing (one token a step), so P(a = L), the law, the tail and the order "
           "tables do not apply" if from_steps else
           "per-turn counts carry no per-step lengths, so P(a = L), the law, the tail and the order tables cannot be "
           "computed")
    notes.append(f"tau = sum of new tokens / sum of verification steps (Spec-Bench's mean accepted tokens, "
                 f"{SPEC_BENCH_TAU}); prompt_tau = mean over prompts of their own ratio; intervals "
                 f"{100 * level:g}%, prompt-clustered (cluster = task, prompt_id): bootstrap-t, {n_boot} prompt "
                 f"resamples, each studentized by its own CR1 standard error; {why}")
    out = pd.DataFrame(rows, columns=list(TURN_COLUMNS))
    T = T.assign(tau=np.divide(tok, steps))
    return TurnTau(out, float(level), tuple(dict.fromkeys(notes)), by=by, turn_frame=T, from_steps=from_steps)


def _prompt_strata(T: pd.DataFrame, by: str | None, codes: np.ndarray, G: int, notes: list[str]) -> np.ndarray:
    """The group of each prompt cluster (the pooled row's strata): -1 for every prompt when the
    groups are not prompt-level (``by`` None, or a group such as ``turn`` that varies within a prompt)."""
    none = np.full(G, -1, dtype=np.int64)
    if by is None:
        return none
    lab = pd.factorize(T[by].astype(str))[0]
    first = np.full(G, -1, dtype=np.int64)
    first[codes] = lab
    if np.any(first[codes] != lab):         # a group that varies within a prompt: no strata
        return none
    notes.append(f"pooled rows: prompts stratified by {by} (each {by}'s prompts are fixed by design: their "
                 "differences are not sampling noise)")
    return first


def _natural(x: str):
    """Sort key: numbers (turn indices) by value, then names."""
    return (0, int(x), "") if x.lstrip("-").isdigit() else (1, 0, x)
