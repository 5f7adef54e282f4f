"""The mismatched-image probe, and the same machinery for any signal column.

**Probe** (:func:`probe`). Logs hold the same prompts decoded with the correct image
(``condition="matched"``) and, on the shared teacher-forced trajectory, with a mismatched
one (``condition="mismatched"``). Rounds pair by (drafter, task, prompt_id, round); when
both arms log ``position`` the pair must sit at the same position (else it is not the
same trajectory and is excluded, counted). Per task, and pooled:

* the relative effect of the correct image on mean accepted length,
  ``mean(a | matched) / mean(a | mismatched) - 1``, with a percentile interval from the
  prompt-level bootstrap (a prompt's pairs move together; tasks are resampled
  separately in the pooled row);
* mean root entropy in each condition and their paired difference (CR1 intervals);
* the entropy-controlled residual effect: OLS of ``a`` on ``1 + H + matched`` (pooled:
  task intercepts and task-specific entropy slopes), and, because E[a|H] is not linear,
  the same contrast with the law's prediction as an offset, ``a - E_law[a|H] ~ 1 +
  matched`` (law fitted per task on both conditions, exact MLE). Both with statsmodels'
  cluster-robust covariance (CR1: G/(G-1) (N-1)/(N-K), clusters = (task, prompt_id),
  t with G-1 df). The offset regression treats the law fit as known.

**Signal** (:func:`signal_effect`), Table 13 style, for any binary or continuous column
``v`` (e.g. attention mass on image tokens): correlations r(a, H) and r(a, v), the partial
correlation of a and v given H (residualised on entropy-decile intercepts plus a linear
term, or on a linear term only), and within-entropy-decile gaps: the ratio and difference
of mean a between v = 1 and v = 0 (continuous v: above vs at-or-below the decile's
median), per decile and pooled over deciles (the coefficient on v with decile intercepts).
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import statsmodels.api as sm
from scipy import stats

from glance_law.data.schema import SUPPLIED_BY
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.law import model as _law
from glance_law.results.base import Result, TableResult
from glance_law.stats.cluster import (
    bootstrap_counts,
    cluster_codes,
    clustered_mean,
    percentile_interval,
    t_crit,
)

from . import common as E
from .offsets import decile_bins

__all__ = ["probe", "pair_conditions", "clustered_ols", "signal_effect", "ProbeResult", "SignalResult",
           "cli_section", "add_cli_arguments"]

#: Columns the section cannot do without (checked before it runs; a missing one skips it, named).
NEEDS = ("root_entropy",)

ANALYSIS = "the mismatched-image probe"
MATCHED, MISMATCHED = "matched", "mismatched"


# --------------------------------------------------------------------------
# numerics
# --------------------------------------------------------------------------

def clustered_ols(y, X, groups, level: float = 0.95):
    """OLS with statsmodels' cluster-robust covariance; returns the fitted results object.

    Covariance: CR1 ``G/(G-1) * (N-1)/(N-K) * (X'X)^-1 (sum_g X_g' e_g e_g' X_g) (X'X)^-1``;
    inference with Student-t, G-1 degrees of freedom.
    """
    y = np.asarray(y, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    return sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": np.asarray(groups)}, use_t=True)


def _coef(res, j: int, level: float):
    lo, hi = res.conf_int(alpha=1 - level)[j]
    return float(res.params[j]), float(lo), float(hi), float(res.pvalues[j])


def _ratio_linearised(y, g1, g0, codes, G):
    """m1/m0 of two subgroup means with a CR1 (delta-method) standard error."""
    y = np.asarray(y, dtype=np.float64)
    n1, n0 = g1.sum(), g0.sum()
    if n1 == 0 or n0 == 0:
        return np.nan, np.nan, np.nan, np.nan, np.nan
    m1, m0 = y[g1].mean(), y[g0].mean()
    psi1 = np.where(g1, y - m1, 0.0) / n1
    psi0 = np.where(g0, y - m0, 0.0) / n0
    used = g1 | g0
    gk = int(np.unique(codes[used]).size)
    if gk < 2:
        return m1, m0, (m1 / m0 if m0 else np.nan), np.nan, np.nan
    def se_of(psi):
        u = np.bincount(codes, weights=psi, minlength=G)
        return float(np.sqrt(gk / (gk - 1.0) * (u ** 2).sum()))
    ratio = m1 / m0 if m0 != 0 else np.nan
    se_r = se_of(psi1 / m0 - m1 * psi0 / m0 ** 2) if m0 != 0 else np.nan
    se_d = se_of(psi1 - psi0)
    return m1, m0, ratio, se_r, se_d


# --------------------------------------------------------------------------
# pairing
# --------------------------------------------------------------------------

def _pick_run(sub: pd.DataFrame, key: list[str], other_keys: set, notes: list[str], cond: str) -> pd.DataFrame:
    """If one condition repeats a pair key across runs, keep the run pairing the most rounds."""
    dup = sub.duplicated(key, keep=False)
    if not dup.any():
        return sub
    runs = sub["run_id"].astype(str)
    score = {r: sum(tuple(x) in other_keys for x in part[key].astype(str).itertuples(index=False))
             for r, part in sub.groupby(runs, observed=True)}
    order = sorted(score, key=lambda r: (-score[r], r))
    keep = sub.loc[runs == order[0]]
    notes.append(f"{cond}: rounds repeated across runs {', '.join(order)}; kept run {order[0]} "
                 f"(pairs the most rounds), excluded {len(sub) - len(keep)} round(s)")
    if keep.duplicated(key).any():
        raise GlanceError(f"{ANALYSIS}: the {cond} run {order[0]} repeats (task, prompt_id, round) keys; "
                          "remove the duplicated rounds")
    return keep


def pair_conditions(rounds, notes: list[str] | None = None, extra: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (drafter, task, prompt_id, round) present in both conditions.

    Columns: drafter, task, prompt_id, round, H_m, H_x, a_m, a_x, L_m, L_x (m = matched,
    x = mismatched) plus ``{col}_m``/``{col}_x`` for every column in ``extra``.
    """
    notes = [] if notes is None else notes
    frame = E.as_frame(rounds, notes)
    E.require(frame, ["root_entropy", "accepted", "horizon"], ANALYSIS)
    if "condition" not in frame.columns or not (frame["condition"].astype(str) == MISMATCHED).any():
        raise MissingColumnError("rounds in condition 'mismatched'", ANALYSIS, SUPPLIED_BY["condition=mismatched"])
    if not (frame["condition"].astype(str) == MATCHED).any():
        raise MissingColumnError("rounds in condition 'matched'", ANALYSIS,
                                 "glance-log (the ordinary run the probe replays)")
    frame = E.speculative_rounds(frame, notes, conditions=(MATCHED, MISMATCHED))
    if "drafter" not in frame.columns:
        frame = frame.assign(drafter="unknown")
    key = ["drafter", "task", "prompt_id", "round"]
    cols = key + ["root_entropy", "accepted", "horizon"] + [c for c in ("run_id", "position") if c in frame.columns]
    cols += [c for c in extra if c not in cols]
    cond = frame["condition"].astype(str)
    m = frame.loc[cond == MATCHED, cols].copy()
    x = frame.loc[cond == MISMATCHED, cols].copy()
    for part in (m, x):
        for c in key[:3]:
            part[c] = part[c].astype(str)
        if "run_id" not in part.columns:
            part["run_id"] = "run"
    mk = set(map(tuple, m[key].astype(str).itertuples(index=False)))
    xk = set(map(tuple, x[key].astype(str).itertuples(index=False)))
    m = _pick_run(m, key, xk, notes, MATCHED)
    x = _pick_run(x, key, mk, notes, MISMATCHED)
    both = m.merge(x, on=key, suffixes=("_m", "_x"), how="inner")
    n_unpaired = len(m) + len(x) - 2 * len(both)
    if n_unpaired:
        notes.append(f"{n_unpaired} round(s) without a partner in the other condition excluded "
                     f"({len(m) - len(both)} matched, {len(x) - len(both)} mismatched)")
    if "position_m" in both.columns:
        off = both["position_m"].to_numpy() != both["position_x"].to_numpy()
        if off.any():
            notes.append(f"{int(off.sum())} pair(s) at different positions (not one shared trajectory) excluded")
            both = both.loc[~off]
    if not len(both):
        raise GlanceError(f"{ANALYSIS}: no round pairs by (task, prompt_id, round) across the matched and "
                          "mismatched conditions; log the probe with glance-log --probe mismatched on the same prompts")
    out = both.rename(columns={"root_entropy_m": "H_m", "root_entropy_x": "H_x", "accepted_m": "a_m",
                               "accepted_x": "a_x", "horizon_m": "L_m", "horizon_x": "L_x"})
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ProbeResult(TableResult):
    """One row per task (and a pooled row per drafter)."""
    title: ClassVar[str] = "Mismatched-image probe: effect of the correct image, raw and entropy-controlled"


@dataclass(frozen=True, eq=False)
class SignalResult(TableResult):
    """Table 13 style: correlations, partial correlation given H, within-decile gaps."""
    title: ClassVar[str] = "Signal vs entropy: correlations, partial correlation given H, within-decile gaps"
    deciles_frame: pd.DataFrame = field(default_factory=pd.DataFrame)

    def deciles(self) -> pd.DataFrame:
        """Per (group, entropy decile): mean a with v high / low, their ratio and difference."""
        return self.deciles_frame.copy()


# --------------------------------------------------------------------------
# the probe
# --------------------------------------------------------------------------

def _relative_effect_boot(pairs: pd.DataFrame, codes, G, strata, n_boot, seed, level):
    """Prompt-bootstrap percentile interval of mean(a_m)/mean(a_x) - 1 (resampling within strata)."""
    am = np.bincount(codes, weights=pairs["a_m"].to_numpy(float), minlength=G)
    ax = np.bincount(codes, weights=pairs["a_x"].to_numpy(float), minlength=G)
    est = am.sum() / ax.sum() - 1.0 if ax.sum() > 0 else np.nan
    if n_boot <= 0 or G < 2:
        return est, np.nan, np.nan
    rng = np.random.default_rng(seed)
    W = np.zeros((n_boot, G))
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        for start, cnt in _chunks(bootstrap_counts(len(idx), n_boot, rng)):
            W[start:start + len(cnt)][:, idx] = cnt
    num, den = W @ am, W @ ax
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = np.where(den > 0, num / den - 1.0, np.nan)
    lo, hi = percentile_interval(draws, level)
    return est, float(lo), float(hi)


def _chunks(gen):
    start = 0
    for c in gen:
        yield start, c
        start += len(c)


def _law_offset(pairs: pd.DataFrame, codes, G, notes, label):
    """Law prediction at each arm's entropy (law fitted on both conditions' rounds of the group)."""
    H = np.r_[pairs["H_m"].to_numpy(float), pairs["H_x"].to_numpy(float)]
    a = np.r_[pairs["a_m"].to_numpy(float), pairs["a_x"].to_numpy(float)]
    L = np.r_[pairs["L_m"].to_numpy(float), pairs["L_x"].to_numpy(float)]
    try:
        b, _, _, _ = E.law_fit(H, a, L, np.r_[codes, codes], G)
    except ValueError as exc:
        notes.append(f"{label}: law not fitted ({exc}); law-offset effect left empty")
        return None
    return _law.expected_accepted(H, b[0], b[1], L)


def _probe_row(pairs, key, codes, G, strata, level, n_boot, seed, notes, pred=None, pooled_tasks=None):
    n = len(pairs)
    Hm, Hx = pairs["H_m"].to_numpy(float), pairs["H_x"].to_numpy(float)
    am, ax = pairs["a_m"].to_numpy(float), pairs["a_x"].to_numpy(float)
    gk = int(np.unique(codes).size)
    t = t_crit(gk, level)
    row = {**key, "pairs": n, "prompts": gk}
    rel, rlo, rhi = _relative_effect_boot(pairs, codes, G, strata, n_boot, seed, level)
    mam, sam, _ = clustered_mean(am, codes, G)
    max_, sax, _ = clustered_mean(ax, codes, G)
    row.update(accepted_matched=mam, accepted_mismatched=max_,
               relative_effect=rel, relative_effect_lo=rlo, relative_effect_hi=rhi)
    for name, v in (("entropy_matched", Hm), ("entropy_mismatched", Hx)):
        mu, se, _ = clustered_mean(v, codes, G)
        row.update({name: mu, f"{name}_lo": mu - t * se, f"{name}_hi": mu + t * se})
    d, dse, _ = clustered_mean(Hm - Hx, codes, G)
    row.update(entropy_diff=d, entropy_diff_lo=d - t * dse, entropy_diff_hi=d + t * dse)
    # residual effect: long format, both arms of a pair in the prompt's cluster
    y = np.r_[am, ax]
    H = np.r_[Hm, Hx]
    z = np.r_[np.ones(n), np.zeros(n)]
    cl = np.r_[codes, codes]
    if pooled_tasks is None:
        X = np.column_stack([np.ones(2 * n), H, z])
    else:
        tk = np.r_[pooled_tasks, pooled_tasks]
        levels = np.unique(tk)
        D = (tk[:, None] == levels[None, :]).astype(float)
        X = np.column_stack([D, D * H[:, None], z])
    label = E.fmt_group(key)
    if gk >= 2 and np.linalg.matrix_rank(X) == X.shape[1]:
        res = clustered_ols(y, X, cl, level)
        c, lo, hi, p = _coef(res, X.shape[1] - 1, level)
        row.update(residual_effect=c, residual_effect_lo=lo, residual_effect_hi=hi, residual_p=p)
    else:
        row.update(residual_effect=np.nan, residual_effect_lo=np.nan, residual_effect_hi=np.nan, residual_p=np.nan)
        notes.append(f"{label}: entropy-controlled regression not identified (too few prompts or no variation)")
    if pred is not None and gk >= 2:
        if pooled_tasks is None:
            Xo = np.column_stack([np.ones(2 * n), z])
        else:
            Xo = np.column_stack([D, z])
        res = clustered_ols(y - pred, Xo, cl, level)
        c, lo, hi, p = _coef(res, Xo.shape[1] - 1, level)
        row.update(law_residual_effect=c, law_residual_effect_lo=lo, law_residual_effect_hi=hi, law_residual_p=p)
    else:
        row.update(law_residual_effect=np.nan, law_residual_effect_lo=np.nan, law_residual_effect_hi=np.nan,
                   law_residual_p=np.nan)
    return row


def probe(rounds, *, by="task", level: float = 0.95, n_boot: int = 2000, seed: int = 0) -> ProbeResult:
    """The mismatched-image probe per task and pooled (see the module docstring).

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs of the matched and mismatched conditions (read_logs(...) or a frame with the contract's columns).
    by : str, default "task"
        Grouping column.
    level : float, default 0.95
        Interval level (prompt-clustered).
    n_boot : int, default 2000
        Prompt-level bootstrap replicates.
    seed : int, default 0
        Bootstrap seed.

    Returns
    -------
    ProbeResult
        The effect of the correct image per task and pooled, raw and entropy-controlled.

    Examples
    --------
    >>> import glance_law as gl  # doctest: +SKIP
    >>> res = gl.probe(gl.read_logs("logs/"))  # doctest: +SKIP
    """
    notes: list[str] = []
    pairs = pair_conditions(rounds, notes)
    pooled_only = not E.by_columns(by)          # by 'none': the pooled row of each arm only
    by = ["task"] if pooled_only else E.by_columns(by)
    if "drafter" not in by and pairs["drafter"].nunique() > 1:
        by = ["drafter"] + by
    rows = []
    arm_cols = [c for c in by if c == "drafter"]
    for arm_key, arm in E.group_items(pairs, arm_cols):
        parts = []
        for key, sub in E.group_items(arm, by):
            codes, G = cluster_codes(sub)
            pred = _law_offset(sub, codes, G, notes, E.fmt_group(key))
            if not pooled_only:
                rows.append(_probe_row(sub, key, codes, G, np.zeros(G, int), level, n_boot, seed, notes, pred))
            parts.append((sub, pred))
        if len(parts) > 1 or (pooled_only and parts):
            pooled = pd.concat([p for p, _ in parts], ignore_index=True)
            pred = None
            if all(pr is not None for _, pr in parts):
                sizes = [len(p) for p, _ in parts]
                pred = np.r_[np.concatenate([pr[:n] for (_, pr), n in zip(parts, sizes)]),
                             np.concatenate([pr[n:] for (_, pr), n in zip(parts, sizes)])]
            codes, G = cluster_codes(pooled)
            tasks = pooled["task"].astype(str).to_numpy()
            strata = pd.Series(tasks).groupby(codes).first().to_numpy()
            key = {**arm_key, **{c: E.GROUP_ALL for c in by if c not in arm_key}}
            rows.append(_probe_row(pooled, key, codes, G, strata, level, n_boot, seed, notes, pred,
                                   pooled_tasks=tasks))
    notes.append("relative_effect = mean a (matched) / mean a (mismatched) - 1 over paired rounds, "
                 f"{n_boot}-resample prompt bootstrap percentile interval (pooled: prompts resampled within task)")
    notes.append("residual_effect: coefficient of matched in OLS a ~ 1 + H + matched (pooled: task intercepts "
                 "and task slopes); law_residual_effect: a - E_law[a|H] ~ 1 + matched (pooled: task intercepts); "
                 "CR1 cluster-robust (cluster = task, prompt_id), t with G-1 df")
    return ProbeResult(pd.DataFrame(rows), level, tuple(dict.fromkeys(notes)))


# --------------------------------------------------------------------------
# signal columns (Table 13)
# --------------------------------------------------------------------------

def _corr_clustered(x, y, codes, G, level):
    """Pearson r with the CR1 t interval/p-value of the standardised slope (prompt-aware)."""
    x = np.asarray(x, float) - np.mean(x)
    y = np.asarray(y, float) - np.mean(y)
    sx, sy = np.sqrt((x ** 2).mean()), np.sqrt((y ** 2).mean())
    if sx == 0 or sy == 0:
        return np.nan, np.nan, np.nan, np.nan
    zx, zy = x / sx, y / sy
    r = float((zx * zy).mean())
    u = np.bincount(codes, weights=zx * (zy - r * zx), minlength=G)
    g = int(np.count_nonzero(np.bincount(codes, minlength=G)))
    if g < 2:
        return r, np.nan, np.nan, np.nan
    se = float(np.sqrt(g / (g - 1.0) * (u ** 2).sum()) / (zx ** 2).sum())
    t = t_crit(g, level)
    p = float(2 * stats.t.sf(abs(r / se), g - 1)) if se > 0 else np.nan
    return r, max(-1.0, r - t * se), min(1.0, r + t * se), p


def _control_basis(H, bins, control):
    if control == "linear":
        return np.column_stack([np.ones_like(H), H])
    levels = np.unique(bins)
    return np.column_stack([(bins[:, None] == levels[None, :]).astype(float), H])


def signal_effect(rounds, column: str, *, by="task", n_bins: int = 10, control: str = "deciles",
                  level: float = 0.95, condition: str = MATCHED) -> SignalResult:
    """Does a signal column carry information about accepted length beyond entropy?

    ``control``: "deciles" (entropy-decile intercepts plus a linear term, default) or
    "linear" (the classic partial correlation given H).

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (read_logs(...) or a frame with the contract's columns).
    column : str
        The signal column (e.g. an image saliency, or ``position``).
    by : str, default "task"
        Grouping column.
    n_bins : int, default 10
        Equal-count entropy bins.
    control : str, default "deciles"
        "deciles" (entropy-decile intercepts plus a linear term) or "linear" (the classic
        partial correlation given H).
    level : float, default 0.95
        Interval level (prompt-clustered).
    condition : str, default "matched"
        The condition analysed.

    Returns
    -------
    SignalResult
        Correlations of a with H and with the signal, partial r given H, within-decile gaps.

    Examples
    --------
    >>> import glance_law as gl
    >>> type(gl.signal_effect(gl.simulate_rounds(seed=0), "position")).__name__
    'SignalResult'
    """
    if control not in ("deciles", "linear"):
        raise GlanceError("control must be 'deciles' or 'linear'")
    notes: list[str] = []
    frame = E.as_frame(rounds, notes)
    analysis = f"the signal analysis of '{column}'"
    E.require(frame, ["root_entropy", "accepted", "horizon"], analysis)
    if column not in frame.columns:
        raise MissingColumnError(f"the '{column}' column", analysis,
                                 "the logger hook that records it (any extra column of the round files is read)")
    frame = E.speculative_rounds(frame, notes, conditions=(condition,))
    v_all = pd.to_numeric(frame[column], errors="coerce")
    bad = v_all.isna().to_numpy()
    if bad.any():
        notes.append(f"{int(bad.sum())} round(s) with a missing or non-numeric '{column}' excluded")
        frame = frame.loc[~bad]
    if not len(frame):
        raise GlanceError(f"{analysis}: no rounds with a value of '{column}'")
    cols = E.arm_columns(frame, by)
    rows, drows = [], []
    for key, sub in E.group_items(frame, cols):
        key = E.pooled_key(key, by)
        codes, G = cluster_codes(sub)
        H = sub["root_entropy"].to_numpy(float)
        a = sub["accepted"].to_numpy(float)
        v = pd.to_numeric(sub[column]).to_numpy(float)
        binary = bool(np.isin(v, (0.0, 1.0)).all())
        bins = decile_bins(H, n_bins)
        r_ah = _corr_clustered(a, H, codes, G, level)
        r_av = _corr_clustered(a, v, codes, G, level)
        Z = _control_basis(H, bins, control)
        ea = a - Z @ np.linalg.lstsq(Z, a, rcond=None)[0]
        ev = v - Z @ np.linalg.lstsq(Z, v, rcond=None)[0]
        pr = _corr_clustered(ea, ev, codes, G, level)
        # within-decile split
        high = np.zeros(len(v), dtype=bool)
        for k in np.unique(bins):
            inb = bins == k
            high[inb] = v[inb] > 0.5 if binary else v[inb] > np.median(v[inb])
        for k in np.unique(bins):
            inb = bins == k
            m1, m0, ratio, se_r, se_d = _ratio_linearised(a, inb & high, inb & ~high, codes, G)
            gk = int(np.unique(codes[inb]).size)
            t = t_crit(gk, level)
            drows.append({**key, "decile": int(k) + 1, "mean_entropy": float(H[inb].mean()),
                          "rounds_high": int((inb & high).sum()), "rounds_low": int((inb & ~high).sum()),
                          "accepted_high": m1, "accepted_low": m0,
                          "ratio": ratio, "ratio_lo": ratio - t * se_r, "ratio_hi": ratio + t * se_r,
                          "gap": m1 - m0, "gap_lo": m1 - m0 - t * se_d, "gap_hi": m1 - m0 + t * se_d})
        # pooled within-decile gap: coefficient of `high` with decile intercepts
        levels = np.unique(bins)
        Xg = np.column_stack([(bins[:, None] == levels[None, :]).astype(float), high.astype(float)])
        if G >= 2 and np.linalg.matrix_rank(Xg) == Xg.shape[1]:
            gap, glo, ghi, gp = _coef(clustered_ols(a, Xg, codes, level), Xg.shape[1] - 1, level)
        else:
            gap = glo = ghi = gp = np.nan
        w = np.array([((bins == k) & high).sum() + ((bins == k) & ~high).sum() for k in levels], float)
        dd = pd.DataFrame(drows[-len(levels):])
        ok = np.isfinite(dd["ratio"].to_numpy())
        mean_ratio = float(np.average(dd["ratio"].to_numpy()[ok], weights=w[ok])) if ok.any() else np.nan
        rows.append({**key, "rounds": len(a), "prompts": int(np.unique(codes).size),
                     "signal": column, "kind": "binary" if binary else "continuous",
                     "r_a_H": r_ah[0], "r_a_H_lo": r_ah[1], "r_a_H_hi": r_ah[2],
                     "r_a_v": r_av[0], "r_a_v_lo": r_av[1], "r_a_v_hi": r_av[2],
                     "partial_r": pr[0], "partial_r_lo": pr[1], "partial_r_hi": pr[2], "partial_p": pr[3],
                     "decile_ratio": mean_ratio, "decile_gap": gap, "decile_gap_lo": glo,
                     "decile_gap_hi": ghi, "decile_gap_p": gp})
    notes.append(f"partial_r: Pearson r of a and {column} after residualising both on "
                 + ("entropy-decile intercepts plus a linear entropy term" if control == "deciles"
                    else "a linear entropy term") + "; its interval/p are those of the coefficient on "
                 f"{column} in the same regression (CR1 prompt-clustered, t with G-1 df)")
    notes.append("decile gaps: mean a with the signal high (binary: 1; continuous: above the decile median) "
                 "vs low; decile_gap = coefficient of high with decile intercepts; decile_ratio = "
                 "size-weighted mean of the per-decile ratios (deciles(): per-decile rows)")
    return SignalResult(pd.DataFrame(rows), level, tuple(notes), pd.DataFrame(drows))


# --------------------------------------------------------------------------
# CLI section
# --------------------------------------------------------------------------

def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("mismatched-image probe (--probe)")
    g.add_argument("--signal", action="append", default=[], metavar="COLUMN",
                   help="also test a signal column of the round files (e.g. attention mass on image tokens) "
                        "against entropy, Table 13 style (repeatable)")
    g.add_argument("--probe-signal", dest="signal", action="append", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)  # the old spelling, kept working
    g.add_argument("--probe-bootstrap", type=int, default=2000, metavar="B",
                   help="prompt-bootstrap resamples for the relative effect (default 2000)")


def cli_section(logs, args: argparse.Namespace) -> list[Result]:
    level = E.cli_level(args)
    seed = int(getattr(args, "seed", 0) or 0)
    by = E.cli_by(args)                 # []: --by none, the pooled row of each arm only
    n_boot = int(getattr(args, "probe_bootstrap", 2000))
    out: list[Result] = [probe(logs, by=by, level=level, n_boot=n_boot, seed=seed)]
    for col in getattr(args, "signal", None) or []:
        res = signal_effect(logs, col, by=by, level=level)
        out.append(res)
    return out
