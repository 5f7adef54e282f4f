"""Per-offset analysis of the ``match`` vectors: marginal laws, conditional hazards,
a test of Assumption 2, and run-length survival by entropy decile.

``match[i, j-1]`` is 1 when the drafter's top-1 at offset j equals the target's token
there, 0 when not, -1 when unknown (past the end of generation). Let ``R_i`` be the
leading run of ones (the top-1 chain's run length).

* **Offset law** (:func:`offset_law`): for every offset j a logistic regression of
  ``match_j`` on the root entropy, ``logit p_m,j(H) = b0_j - b1_j H`` (exact MLE), with
  CR3 cluster-jackknife intervals (t with G-1 df, as the law table), and the marginal
  match rate. An offset whose known matches are all 1 (all 0), as offset 1 of a grounded
  task typically is, has no finite MLE: its limit is the constant rate ``p_j = 1`` (0)
  for every H (``b0 = +inf``/``-inf``, b1 not identified), which the Assumption 2 test uses.
* **Hazards** (:func:`offset_hazards`): per entropy bin and offset, the conditional hazard
  ``P(match_j = 1 | match_1..j-1 = 1)`` next to the marginal ``P(match_j = 1)``, both as
  ratio estimators with CR1 intervals.
* **Assumption 2** (:func:`assumption2_test`): the survival the marginal hazards imply,
  ``S_i(l) = prod_{j<=l} p_m,j(H_i)``, against the empirical ``1[R_i >= l]`` (a round
  whose run is cut by unknown offsets counts only at the l it determines). The
  difference ``D(l)`` and the mean-run difference ``sum_l D(l)`` get a CR1 interval from
  the stacked estimating equations: the per-round influence of ``D(l)`` includes the
  estimation error of every offset fit (delta method through ``dS/db_j``; a constant
  offset has none). An offset whose fit is otherwise not identified (separation, no
  entropy variation) leaves the implied survival NaN from that offset on, with a note,
  never a truncated sum; lengths beyond the last offset any round knows are not compared.
* **Survival** (:func:`run_survival`): empirical ``P(a >= l)`` of the accepted length
  by entropy decile, with CR1 intervals, against the law's truncated geometric (averaged
  over the decile's rounds) and, in the floor regime, the two-state model of
  :mod:`glance_law.tail` when it is available.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import special, stats

from glance_law.data import needs as _needs
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.law import model as _law
from glance_law.results.base import Result, TableResult
from glance_law.stats.cluster import clustered_mean, t_crit

from . import common as E

__all__ = ["match_matrix", "leading_runs", "decile_bins", "offset_law", "offset_hazards",
           "assumption2_test", "run_survival", "OffsetLaw", "OffsetHazards", "Assumption2Test",
           "RunSurvival", "cli_section", "add_cli_arguments"]

ANALYSIS = "the per-offset analysis"
#: Round columns the CLI section reads (``python -m glance_law.fit`` reads only these
#: besides the law's own and the contract's key columns).
CLI_COLUMNS = ("match", "budget")
#: Columns the section cannot do without (root_entropy and match are optional: without entropy one bin;
#: without match, a chain drafter's matches come from its accepted run, a tree's per-offset law is not made).
NEEDS = ("accepted", "horizon")
#: ``_offset_fits``'s ``why`` for an offset whose known matches are all 1 (or all 0).
CONSTANT = "constant"


# --------------------------------------------------------------------------
# pure numpy helpers
# --------------------------------------------------------------------------

def match_matrix(values) -> np.ndarray:
    """(n, Lmax) int8 matrix of per-offset matches, padded with -1 (unknown); None rows are all -1."""
    vals = list(values)
    n = len(vals)
    lens = np.fromiter((0 if v is None else len(v) for v in vals), dtype=np.int64, count=n)
    width = int(lens.max()) if n else 0
    out = np.full((n, width), -1, dtype=np.int8)
    if n == 0 or width == 0:
        return out
    flat = np.concatenate([np.asarray(v, dtype=np.int8).ravel() for v in vals if v is not None and len(v)])
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    out[rows, cols] = flat
    return out


def leading_runs(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Leading run of ones ``R`` per row and whether the run's end was observed (a 0 follows).

    A run followed by -1 (unknown) or by the end of the vector is right-censored at R.
    """
    M = np.asarray(M)
    n, L = M.shape
    not_one = M != 1
    has = not_one.any(axis=1)
    R = np.where(has, not_one.argmax(axis=1), L).astype(np.int64)
    ended = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(has)
    ended[idx] = M[idx, R[idx]] == 0
    return R, ended


def decile_bins(H: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """Equal-count entropy bins 0..K-1 (K <= n_bins) in which tied entropies share one bin.

    Without ties these are exactly the law's decile-curve bins (the round at sorted position
    k goes to bin floor(B (k + 1/2) / n), :func:`glance_law.stats.curve.equal_count_bins`). A run of
    tied entropies occupying sorted positions first..last goes whole to the bin of its middle
    position, floor(B (first + last + 1) / (2 n)), so the binning depends on the values alone,
    never on the row order; bins left empty by that are dropped and the rest renumbered
    0..K-1 in entropy order (all-equal entropies give one bin)."""
    H = np.asarray(H, dtype=np.float64)
    n = len(H)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    B = int(min(n_bins, n))
    order = np.argsort(H, kind="stable")
    hs = H[order]
    start = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])          # first sorted position of each tie run
    end = np.r_[start[1:], n] - 1                                    # last sorted position
    run_bin = ((start + end + 1) * B) // (2 * n)
    _, run_bin = np.unique(run_bin, return_inverse=True)            # renumber the bins that are used
    out = np.empty(n, dtype=np.int64)
    out[order] = np.repeat(run_bin, end - start + 1)
    return out


def _offset_fits(H, M, codes, G):
    """Logistic fit of match_j on H for every offset: b (L,2), cov (L,2,2), influence (n,L,2), why (L,).

    ``why[j]`` is None for a fitted offset. When every known match at offset j is 1 (or 0) the
    log-likelihood has no maximum, but its supremum is the constant rate: ``why[j] = CONSTANT``
    and ``b[j] = (+inf, 0)`` (``(-inf, 0)``), i.e. ``p_j(H) = 1`` (0) for every H, with zero
    influence (jackknifing a prompt cannot move it) and covariance NaN (b1 is not identified).
    Otherwise ``why[j]`` says why the fit is not identified and ``b[j]`` is NaN.
    """
    n, L = M.shape
    b = np.full((L, 2), np.nan)
    cov = np.full((L, 2, 2), np.nan)
    infl = np.zeros((n, L, 2))
    why: list[str | None] = [None] * L
    for j in range(L):
        known = M[:, j] >= 0
        y = M[known, j].astype(np.float64)
        Hk = H[known]
        if not known.any():
            why[j] = "no round knows the match there"
            continue
        if y.min() == y.max():
            b[j] = (np.inf if y[0] == 1 else -np.inf, 0.0)
            why[j] = CONSTANT
            continue
        try:  # raises for no entropy variation and for (quasi-)complete separation
            bj, _, converged = _law.fit_affine_logit(Hk, y, np.ones_like(y))
        except ValueError as exc:
            why[j] = str(exc)
            continue
        if not converged:
            why[j] = "Newton did not converge"
            continue
        sc, info = _law.score_and_information(bj, Hk, y, np.ones_like(y))
        A = np.linalg.inv(info)
        b[j] = bj
        cov[j] = E.cr3(bj, Hk, y, np.ones_like(y), codes[known], G, sc, info)
        infl[known, j, :] = sc @ A
    return b, cov, infl, why


def _last_known(M: np.ndarray) -> int:
    """The last offset (1-based) that any round knows; 0 when none does."""
    known = np.flatnonzero((np.asarray(M) >= 0).any(axis=0))
    return int(known[-1]) + 1 if known.size else 0


def _cluster_se(psi: np.ndarray, codes: np.ndarray, G: int) -> np.ndarray:
    """CR1 standard error of sum_i psi_i (psi (n,) or (n, m)) with clusters as units."""
    psi = np.asarray(psi, dtype=np.float64)
    flat = psi.reshape(len(psi), -1)
    u = np.stack([np.bincount(codes, weights=flat[:, k], minlength=G) for k in range(flat.shape[1])], axis=1)
    g = int(np.count_nonzero(np.bincount(codes, minlength=G)))
    if g < 2:
        return np.full(flat.shape[1], np.nan).reshape(psi.shape[1:])
    var = g / (g - 1.0) * (u ** 2).sum(axis=0)
    return np.sqrt(var).reshape(psi.shape[1:])


def _gap_parts(H, M, b) -> dict:
    """The per-round pieces of :func:`survival_gap` that do not depend on the scope.

    A constant offset (``b = (+-inf, 0)``) enters as ``p = 1`` (0) for every H; an unidentified
    one (``b`` NaN) makes ``S_i(l)`` NaN from that offset on. Lengths beyond the last offset any
    round knows are not compared (no round's run can reach them, no fit can be made there).
    """
    n, L = M.shape
    R, ended = leading_runs(M)
    ls = np.arange(1, L + 1)[None, :]
    obs = (R[:, None] >= ls) | (ended[:, None] & (R[:, None] < ls))
    obs &= ls <= _last_known(M)
    D = (R[:, None] >= ls).astype(np.float64)
    P = special.expit(b[None, :, 0] - b[None, :, 1] * H[:, None])
    S = np.cumprod(P, axis=1)
    Q = 1.0 - P
    return dict(obs=obs, D=D, S=S, Q=Q, HQ=-H[:, None] * Q)


def survival_gap(H, M, codes, G, b, infl, mask=None, parts: dict | None = None):
    """Empirical minus marginal-implied survival D(l), l = 1..L, and its CR1 linearisation.

    Returns dict with arrays ``empirical``, ``implied``, ``diff``, ``se``, ``n`` (per l)
    and scalars ``run_mean``, ``implied_mean``, ``diff_mean``, ``se_mean``. ``parts``:
    the scope-independent pieces from :func:`_gap_parts` (computed when not given). ``b``
    per offset: the fit, ``(+-inf, 0)`` for a constant rate 1 (0), NaN when unidentified;
    the implied survival (and so ``implied_mean``, ``diff_mean``, ``se_mean``) is NaN
    wherever a scope's observed round needs an unidentified offset.
    """
    n, L = M.shape
    parts = _gap_parts(H, M, b) if parts is None else parts
    idx = np.arange(n) if mask is None else np.flatnonzero(np.asarray(mask, dtype=bool))
    obs = parts["obs"][idx]                     # the scope's rounds only: the own term lives there
    D, S, Q, HQ = parts["D"][idx], parts["S"][idx], parts["Q"][idx], parts["HQ"][idx]
    n_l = obs.sum(axis=0).astype(np.float64)
    den = np.where(n_l > 0, n_l, 1.0)
    emp = np.where(obs, D, 0.0).sum(axis=0) / den
    imp = np.where(obs, S, 0.0).sum(axis=0) / den
    diff = emp - imp
    # influence: own term (scope rounds) + delta-method term through every offset fit j <= l
    # (every round of the group, since every round entered the offset fits)
    W = np.where(obs, S, 0.0) / den[None, :]
    tri = np.tril(np.ones((L, L)))  # [l, j] = 1 for j <= l
    G0 = np.where(tri > 0, W.T @ Q, 0.0)   # (where, not *: an unidentified offset's NaN stays
    G1 = np.where(tri > 0, W.T @ HQ, 0.0)  # out of the lengths before it)
    psi = -(infl[:, :, 0] @ G0.T + infl[:, :, 1] @ G1.T)
    psi[idx] += np.where(obs, D - S - diff[None, :], 0.0) / den[None, :]
    psi[:, n_l == 0] = 0.0
    se = _cluster_se(psi, codes, G)
    valid = n_l > 0
    se = np.where(valid, se, np.nan)
    se_mean = float(_cluster_se(psi[:, valid].sum(axis=1), codes, G)) if valid.any() else np.nan
    return dict(empirical=np.where(valid, emp, np.nan), implied=np.where(valid, imp, np.nan),
                diff=np.where(valid, diff, np.nan), se=se, n=n_l.astype(np.int64),
                run_mean=float(emp[valid].sum()), implied_mean=float(imp[valid].sum()),
                diff_mean=float(diff[valid].sum()), se_mean=se_mean, n_valid=int(valid.sum()))


# --------------------------------------------------------------------------
# data preparation
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Group:
    key: dict
    H: np.ndarray
    M: np.ndarray
    a: np.ndarray
    L: np.ndarray
    codes: np.ndarray
    G: int
    entropy: bool = True        # False: the logs carry no root entropy (H is all zeros, one bin)


def derived_matches(accepted, horizon) -> np.ndarray:
    """(n, Lmax) match matrix of a chain drafter derived from its accepted run: 1 at offsets
    1..a, 0 at offset a+1 when a < L, -1 (unknown) beyond. Valid only for a chain: there the
    accepted run is the top-1 run (a tree's accepted path is the best of its branches)."""
    a = np.asarray(accepted, dtype=np.int64)
    L = np.asarray(horizon, dtype=np.int64)
    width = int(L.max()) if L.size else 0
    j = np.arange(1, width + 1)[None, :]
    M = np.full((a.size, width), -1, dtype=np.int8)
    M[j <= a[:, None]] = 1
    M[(j == a[:, None] + 1) & (a[:, None] < L[:, None])] = 0
    return M


def _prepare(rounds, by, need_match: bool = True, need_entropy: bool = True) -> tuple[list[_Group], list[str]]:
    """The groups of drafted matched rounds. Without a logged ``match``, a chain drafter's
    matches are derived from its accepted run (:func:`derived_matches`); a tree's are not.
    Without ``root_entropy`` (and ``need_entropy=False``) every round gets H = 0 and the
    analyses use one bin."""
    notes: list[str] = []
    frame = E.as_frame(rounds, notes)
    E.require(frame, ["accepted", "horizon"], ANALYSIS)
    if need_entropy:
        E.require(frame, ["root_entropy"], ANALYSIS)
    frame = E.speculative_rounds(frame, notes)
    if not len(frame):
        raise GlanceError(f"{ANALYSIS} found no drafted rounds (horizon > 0) in the matched condition")
    logged = need_match and _needs.present(frame, "match")
    if need_match and not logged:
        chain = _needs.chain_rounds(frame)
        if not chain.all():
            raise MissingColumnError(
                "the 'match' column (per-offset top-1 matches): the drafter is not known to be a chain (no budget "
                "equal to its horizon is logged), so its accepted run may not be its top-1 run (a drafter that did "
                "draft one top-1 chain: declare it with --chain DRAFTER)", ANALYSIS, _needs.recorded_by("match"))
        notes.append("match derived from the accepted run (a chain drafter: 1 at offsets 1..a, 0 at a+1, unknown "
                     "beyond); marginal match rates past the first miss are therefore the conditional ones")
    with_h = _needs.present(frame, "root_entropy")
    cols = E.arm_columns(frame, by)
    groups = []
    n_null = n_null_h = 0
    for key, sub in E.group_items(frame, cols):
        key = E.pooled_key(key, by)
        if with_h:
            hn = sub["root_entropy"].isna().to_numpy()
            if hn.any():
                n_null_h += int(hn.sum())
                sub = sub.loc[~hn]
        if logged:
            nulls = sub["match"].isna().to_numpy()
            n_null += int(nulls.sum())
            sub = sub.loc[~nulls]
        if not len(sub):
            continue
        if logged:
            M = match_matrix(sub["match"].to_numpy())
        elif need_match:
            M = derived_matches(sub["accepted"].to_numpy(np.int64), sub["horizon"].to_numpy(np.int64))
        else:
            M = np.zeros((len(sub), 0), dtype=np.int8)
        codes, G = E.clusters(sub)
        H = sub["root_entropy"].to_numpy(np.float64, na_value=np.nan) if with_h else np.zeros(len(sub))
        groups.append(_Group(key, H, M, sub["accepted"].to_numpy(np.int64), sub["horizon"].to_numpy(np.int64),
                             codes, G, with_h))
    if n_null:
        notes.append(f"{n_null} round(s) without a match vector excluded")
    if n_null_h:
        notes.append(f"{n_null_h} round(s) without a root entropy excluded")
    if not with_h:
        notes.append("no root_entropy in the logs: one bin of all rounds (entropy bins and per-offset slopes need "
                     "it; recorded by glance-log)")
    if not groups:
        raise GlanceError(f"{ANALYSIS}: no round carries a match vector")
    return groups, notes


def _ci(est, se, G, level):
    t = t_crit(G, level)
    return est - t * se, est + t * se


def _pvalue(est, se, G):
    if not np.isfinite(se) or se <= 0:
        return np.nan
    return float(2 * stats.t.sf(abs(est / se), max(G - 1, 1)))


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class OffsetLaw(TableResult):
    """Per offset j: match rate and the affine-logit law of the marginal match probability."""
    title: ClassVar[str] = "Per-offset law: logit P(match_j | H) = b0_j - b1_j H"


@dataclass(frozen=True, eq=False)
class OffsetHazards(TableResult):
    """Per entropy bin and offset: conditional hazard vs marginal match rate."""
    title: ClassVar[str] = "Conditional hazard P(match_j | matches before j) vs marginal P(match_j), by entropy bin"


@dataclass(frozen=True, eq=False)
class Assumption2Test(TableResult):
    """Empirical run survival vs the survival implied by the marginal hazards."""
    title: ClassVar[str] = "Assumption 2: empirical top-1 run vs the run implied by marginal hazards"
    curve_frame: pd.DataFrame = field(default_factory=pd.DataFrame)

    def curve(self) -> pd.DataFrame:
        """Per (group, bin, l): empirical and implied P(R >= l), their difference and interval."""
        return self.curve_frame.copy()


@dataclass(frozen=True, eq=False)
class RunSurvival(TableResult):
    """Empirical survival of the accepted length by entropy decile vs geometric and two-state."""
    title: ClassVar[str] = "Run-length survival P(a >= l) by entropy decile: empirical vs law vs two-state"


# --------------------------------------------------------------------------
# analyses
# --------------------------------------------------------------------------

def offset_law(rounds, *, by="task", level: float = 0.95) -> OffsetLaw:
    """The law fitted per offset: b0_j, b1_j (CR1 prompt-clustered intervals) and match rates.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (task, prompt_id, root_entropy, accepted, horizon, match).
    by : str, default "task"
        Grouping column.
    level : float, default 0.95
        Interval level (prompt-clustered).

    Returns
    -------
    OffsetLaw
        One row per group and offset.

    Examples
    --------
    >>> import glance_law as gl
    >>> type(gl.offset_law(gl.simulate_rounds(seed=0))).__name__
    'OffsetLaw'
    """
    groups, notes = _prepare(rounds, by, need_entropy=False)
    rows, few = [], []
    for g in groups:
        if g.entropy:
            b, cov, _, why = _offset_fits(g.H, g.M, g.codes, g.G)
        else:                       # no entropy: match rates only, no slopes (noted by _prepare)
            L = g.M.shape[1]
            b, cov, why = np.full((L, 2), np.nan), np.full((L, 2, 2), np.nan), [None] * L
        const = {1: [], 0: []}
        for j in range(g.M.shape[1]):
            known = g.M[:, j] >= 0
            if not known.any():
                continue
            y = g.M[known, j].astype(np.float64)
            rate, rse, gk = clustered_mean(y, g.codes[known], g.G)
            r_lo, r_hi = E.proportion_ci(rate, rse, gk, level)
            se = np.sqrt(np.diag(cov[j])) if np.isfinite(cov[j]).all() else np.array([np.nan, np.nan])
            bj = b[j] if np.isfinite(b[j]).all() else np.array([np.nan, np.nan])
            b0_lo, b0_hi = _ci(bj[0], se[0], gk, level)
            b1_lo, b1_hi = _ci(bj[1], se[1], gk, level)
            rows.append({**g.key, "offset": j + 1, "rounds": int(known.sum()), "prompts": gk,
                         "match_rate": rate, "match_rate_lo": r_lo, "match_rate_hi": r_hi,
                         "b0": bj[0], "b0_lo": b0_lo, "b0_hi": b0_hi,
                         "b1": bj[1], "b1_lo": b1_lo, "b1_hi": b1_hi})
            if why[j] == CONSTANT:
                const[int(y[0])].append(str(j + 1))
            elif why[j] is not None:
                notes.append(f"{E.fmt_group(g.key)} offset {j + 1}: the logistic fit is not identified "
                             f"({why[j]}); b0/b1 left empty")
            elif g.entropy and min(y.sum(), len(y) - y.sum()) < 10:
                few.append(f"{E.fmt_group(g.key)}:{j + 1}")
        for v, offs in const.items():
            if offs:
                notes.append(f"{E.fmt_group(g.key)} offset{'s' if len(offs) > 1 else ''} {', '.join(offs)}: "
                             f"every known round {'matched' if v else 'missed'} (rate constant {v}), so the "
                             f"logistic MLE diverges (b0 = {'+' if v else '-'}inf, b1 not identified); b0/b1 "
                             f"left empty, the Assumption 2 test uses p = {v} there")
    if few:
        notes.append(f"fewer than 10 matches or 10 misses at {len(few)} offset(s) ({', '.join(few[:6])}"
                     f"{', ...' if len(few) > 6 else ''}): b0/b1 and their intervals are unreliable there")
    notes.append(f"{int(level * 100)}% intervals, prompt-clustered (cluster = task, prompt_id), t with G-1 df: "
                 "b0/b1 CR3 cluster jackknife (as the law table), match rates CR1 on the logit scale; offsets "
                 "with match = -1 (unknown) excluded per offset")
    return OffsetLaw(pd.DataFrame(rows), level, tuple(notes))


def offset_hazards(rounds, *, by="task", n_bins: int = 10, level: float = 0.95) -> OffsetHazards:
    """Conditional hazard vs marginal match rate per entropy bin and offset (one bin without entropy).

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (task, prompt_id, root_entropy, accepted, horizon, match).
    by : str, default "task"
        Grouping column.
    n_bins : int, default 10
        Equal-count entropy bins.
    level : float, default 0.95
        Interval level (prompt-clustered).

    Returns
    -------
    OffsetHazards
        One row per group, entropy bin and offset.

    Examples
    --------
    >>> import glance_law as gl
    >>> type(gl.offset_hazards(gl.simulate_rounds(seed=0))).__name__
    'OffsetHazards'
    """
    groups, notes = _prepare(rounds, by, need_entropy=False)
    rows = []
    for g in groups:
        bins = decile_bins(g.H, n_bins)
        R, _ = leading_runs(g.M)
        for k in range(int(bins.max()) + 1 if len(bins) else 0):
            inb = bins == k
            h_lo, h_hi, h_mean = float(g.H[inb].min()), float(g.H[inb].max()), float(g.H[inb].mean())
            for j in range(g.M.shape[1]):
                col = g.M[:, j]
                known = inb & (col >= 0)
                at_risk = known & (R >= j)  # matches at offsets 1..j-1 (0-based j)
                if not known.any():
                    continue
                m, mse, gm = clustered_mean((col[known] == 1).astype(float), g.codes[known], g.G)
                m_lo, m_hi = E.proportion_ci(m, mse, gm, level)
                if at_risk.any():
                    h, hse, gh = clustered_mean((col[at_risk] == 1).astype(float), g.codes[at_risk], g.G)
                    hl, hh = E.proportion_ci(h, hse, gh, level)
                else:
                    h = hl = hh = np.nan
                rows.append({**g.key, "bin": k + 1, "entropy_lo": h_lo, "entropy_hi": h_hi,
                             "mean_entropy": h_mean, "offset": j + 1, "at_risk": int(at_risk.sum()),
                             "hazard": h, "hazard_lo": hl, "hazard_hi": hh, "known": int(known.sum()),
                             "marginal": m, "marginal_lo": m_lo, "marginal_hi": m_hi})
    notes.append(f"bins: {n_bins} equal-count entropy bins per group; hazard at offset j = share matching "
                 "among rounds whose offsets 1..j-1 all matched; CR1 prompt-clustered intervals on the logit scale "
                 "(exact binomial over prompts at 0 or 1)")
    return OffsetHazards(pd.DataFrame(rows), level, tuple(notes))


def assumption2_test(rounds, *, by="task", n_bins: int = 10, level: float = 0.95) -> Assumption2Test:
    """Test of Assumption 2: does prod_j p_m,j(H) reproduce the empirical run survival?

    One row per group (bin "all") and per entropy bin: the empirical mean top-1 run
    ``sum_l P(R >= l)``, the mean run the marginal hazards imply, their difference with a
    CR1 interval that includes the per-offset fits' estimation error, and the t p-value.
    ``curve()`` holds the per-l differences.

    An offset whose known matches are all 1 (or all 0) enters as ``p = 1`` (0) for every H,
    the limit of its logistic MLE, with no estimation error. Where an offset's fit is not
    identified otherwise (separation, no entropy variation), ``implied_mean``, ``diff`` and
    its interval are NaN in every row whose implied survival reaches that offset (a note
    names the group and offset); ``run_mean`` is model-free and always reported. Lengths
    beyond the last offset any round of the group knows are not compared (noted).

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (read_logs(...) or a frame with the contract's columns).
    by : str, default "task"
        Grouping column.
    n_bins : int, default 10
        Equal-count entropy bins.
    level : float, default 0.95
        Interval level (prompt-clustered).

    Returns
    -------
    Assumption2Test
        One row per group (bin "all") and per entropy bin; ``curve()`` the per-l differences.

    Examples
    --------
    >>> import glance_law as gl
    >>> type(gl.assumption2_test(gl.simulate_rounds(seed=0))).__name__
    'Assumption2Test'
    """
    groups, notes = _prepare(rounds, by)
    rows, curves = [], []
    n_cens = 0
    const, cut = [], []
    for g in groups:
        b, _, infl, why = _offset_fits(g.H, g.M, g.codes, g.G)
        last = _last_known(g.M)
        label = E.fmt_group(g.key)
        if last < g.M.shape[1]:
            cut.append(f"{label}: l <= {last}")
        for v in (1, 0):
            offs = [str(j + 1) for j in range(last) if why[j] == CONSTANT and (b[j, 0] > 0) == bool(v)]
            if offs:
                const.append(f"{label} {', '.join(offs)} (p = {v})")
        for j in range(last):
            if why[j] not in (None, CONSTANT):
                notes.append(f"{label} offset {j + 1}: the logistic fit is not identified ({why[j]}); "
                             f"implied_mean and diff left empty wherever the implied survival reaches offset {j + 1}")
        R, ended = leading_runs(g.M)
        censored = ~ended & (R < g.L)
        n_cens += int(censored.sum())
        bins = decile_bins(g.H, n_bins)
        scopes = [("all", np.ones(len(g.H), dtype=bool))] + \
            [(str(k + 1), bins == k) for k in range(int(bins.max()) + 1)]
        parts = _gap_parts(g.H, g.M, b)
        for name, mask in scopes:
            res = survival_gap(g.H, g.M, g.codes, g.G, b, infl, mask, parts)
            gk = int(np.unique(g.codes[mask]).size)
            lo, hi = _ci(res["diff_mean"], res["se_mean"], gk, level)
            rows.append({**g.key, "bin": name, "rounds": int(mask.sum()), "prompts": gk,
                         "mean_entropy": float(g.H[mask].mean()),
                         "censored": int((censored & mask).sum()),
                         "run_mean": res["run_mean"], "implied_mean": res["implied_mean"],
                         "diff": res["diff_mean"], "diff_lo": lo, "diff_hi": hi,
                         "p": _pvalue(res["diff_mean"], res["se_mean"], gk)})
            for l in range(len(res["diff"])):
                dl, dh = _ci(res["diff"][l], res["se"][l], gk, level)
                curves.append({**g.key, "bin": name, "l": l + 1, "rounds": int(res["n"][l]),
                               "empirical": res["empirical"][l], "implied": res["implied"][l],
                               "diff": res["diff"][l], "diff_lo": dl, "diff_hi": dh})
    notes.append("run = leading run of top-1 matches in the match vector; implied survival = prod_{j<=l} "
                 "p_m,j(H) from the per-offset logistic fits; diff = empirical - implied mean run "
                 "(> 0: conditional hazards exceed marginals, as in a copy regime)")
    notes.append("intervals: CR1 prompt-clustered linearisation of the stacked estimating equations "
                 "(includes the per-offset fits' estimation error), t with G-1 df")
    if const:
        notes.append("offsets whose known matches are all 1 (all 0) enter as p = 1 (p = 0) for every H, the limit "
                     f"of their logistic MLE, with no estimation error: {'; '.join(const)}")
    if cut:
        notes.append("runs compared up to the last offset any round knows (beyond it every match is -1, "
                     f"no run reaches it and no hazard can be fitted): {'; '.join(cut)}")
    if n_cens:
        notes.append(f"{n_cens} run(s) cut by unknown offsets (-1) count only at the lengths they determine")
    return Assumption2Test(pd.DataFrame(rows), level, tuple(notes), pd.DataFrame(curves))


def run_survival(rounds, *, by="task", n_bins: int = 10, level: float = 0.95, two_state: bool = True) -> RunSurvival:
    """Empirical P(a >= l) by entropy decile vs the law's geometric and the two-state model.

    The law (b0, b1) is fitted on the group's rounds (exact MLE); its survival in a decile is
    the average of ``sigmoid(b0 - b1 H_i)^l`` over the decile's rounds (not the survival at
    the mean entropy). When every round accepted its full horizon (nothing) the MLE's limit
    ``p = 1`` (0) is used, with a note. The two-state survival comes from ``glance_law.tail``
    fitted in regime on the group's bottom entropy bin (the floor) and is shown for that bin.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (read_logs(...) or a frame with the contract's columns).
    by : str, default "task"
        Grouping column.
    n_bins : int, default 10
        Equal-count entropy bins.
    level : float, default 0.95
        Interval level (prompt-clustered).
    two_state : bool, default True
        Add the two-state model's survival in the floor bin.

    Returns
    -------
    RunSurvival
        One row per group, entropy decile and length l.

    Examples
    --------
    >>> import glance_law as gl
    >>> type(gl.run_survival(gl.simulate_rounds(seed=0), two_state=False)).__name__
    'RunSurvival'
    """
    groups, notes = _prepare(rounds, by, need_match=False, need_entropy=False)
    tail_fits = _tail_fits(rounds, groups, by, n_bins, notes) if two_state else {}
    rows = []
    for g in groups:
        try:
            if not g.entropy:       # no entropy: the law reduces to one p, the truncated geometric's MLE
                p0 = g.a.sum() / (g.a.sum() + np.count_nonzero(g.a < g.L))
                if not 0.0 < p0 < 1.0:
                    raise ValueError("every round accepted nothing or its full horizon")
                p = np.full(len(g.H), float(p0))
            else:
                b, _, _, _ = E.law_fit(g.H, g.a, g.L, g.codes, g.G)
                p = special.expit(b[0] - b[1] * g.H)
        except ValueError as exc:
            if (g.a >= g.L).all() or (g.a == 0).all():  # the MLE's limit is the constant rate
                v = int((g.a >= g.L).all())
                notes.append(f"{E.fmt_group(g.key)}: every round accepted {'its full horizon' if v else 'nothing'}, "
                             f"so the law's MLE diverges to p = {v} for every H (b0 = {'+' if v else '-'}inf); "
                             f"geometric = {v}")
                p = np.full(len(g.H), float(v))
            else:
                notes.append(f"{E.fmt_group(g.key)}: law not fitted ({exc}); geometric column empty")
                p = np.full(len(g.H), np.nan)
        bins = decile_bins(g.H, n_bins)
        ts = tail_fits.get(E.fmt_group(g.key))
        for k in range(int(bins.max()) + 1 if len(bins) else 0):
            inb = bins == k
            if not inb.any():
                continue
            for l in range(1, int(g.L[inb].max()) + 1):
                rows_l = inb & (g.L >= l)
                if not rows_l.any():
                    continue
                y = (g.a[rows_l] >= l).astype(float)
                s, se, gk = clustered_mean(y, g.codes[rows_l], g.G)
                lo, hi = E.proportion_ci(s, se, gk, level)
                two = float(ts[l - 1]) if ts is not None and k == 0 and l - 1 < len(ts) else np.nan
                rows.append({**g.key, "decile": k + 1, "mean_entropy": float(g.H[inb].mean()),
                             "l": l, "rounds": int(rows_l.sum()), "empirical": s, "empirical_lo": lo,
                             "empirical_hi": hi, "geometric": float(np.mean(p[rows_l] ** l)),
                             "two_state": two})
    notes.append("empirical: share of rounds with accepted >= l (rounds with horizon >= l), CR1 prompt-clustered "
                 "intervals; geometric: the group's law fit averaged over the decile's rounds"
                 + ("" if all(g.entropy for g in groups) else
                    " (without root entropy: the one-p truncated geometric fitted by maximum likelihood)"))
    notes.append("deciles: equal-count entropy bins in which tied entropies share one bin (the bin of the tie's "
                 "middle position), so the binning never depends on row order; fewer bins when ties are large")
    return RunSurvival(pd.DataFrame(rows), level, tuple(notes))


def _tail_fits(rounds, groups, by, n_bins: int, notes: list[str]) -> dict:
    """Two-state survival per group from :func:`glance_law.tail.fit_tail`, fitted in regime on the
    group's bottom entropy bin (``quantile = 1/n_bins``: the same rounds as this table's first
    bin); empty, with a note, when the tail module is not available."""
    try:
        from glance_law.tail.model import survival
        from glance_law.tail.report import fit_tail
    except (ImportError, AttributeError):
        notes.append("two-state column empty: glance_law.tail (fit_tail, survival) is not available")
        return {}
    by = [by] if isinstance(by, str) else list(by or [])
    try:
        tf = fit_tail(E.as_frame(rounds), by=by[0] if by else None, quantile=1.0 / n_bins, n_boot=0,
                      heldout=False, b0=0.0)
    except GlanceError as exc:
        notes.append(f"two-state column empty: the tail fit failed ({exc})")
        return {}
    out = {}
    for g in groups:
        label = E.fmt_group(g.key)
        try:
            tt = tf[label] if g.key else tf.tasks[0]
        except (GlanceError, IndexError):
            continue
        out[label] = np.asarray(survival(tt.theta, int(g.L.max())), dtype=float)
    if out:
        notes.append("two_state: glance_law.tail.fit_tail's two-state survival, fitted by maximum likelihood on "
                     "each group's bottom entropy bin only (in regime, Assumption 3), shown for that bin")
    return out


# --------------------------------------------------------------------------
# CLI section
# --------------------------------------------------------------------------

def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("per-offset analysis (--offsets)")
    g.add_argument("--offset-bins", type=int, default=10, metavar="K",
                   help="equal-count entropy bins for the hazards, the Assumption 2 test and the survival (default 10)")


def cli_section(logs, args: argparse.Namespace) -> list[Result]:
    """The offsets tables the logs allow; a table that needs what they lack is named in a note
    (all four missing: the section is skipped with the first reason)."""
    bins = int(getattr(args, "offset_bins", 10))
    if bins < 1:
        raise GlanceError("--offset-bins must be >= 1")
    by = E.cli_by(args)
    level = E.cli_level(args)
    out: list[Result] = []
    why: list[str] = []
    errs: list[MissingColumnError] = []
    for fn, extra in ((offset_law, {}), (offset_hazards, {"n_bins": bins}), (assumption2_test, {"n_bins": bins}),
                      (run_survival, {"n_bins": bins})):
        try:
            out.append(fn(logs, by=by, level=level, **extra))
        except MissingColumnError as exc:
            why.append(f"{fn.__name__} not made: {exc}")
            errs.append(exc)
    if not out:
        raise errs[0]
    if why:
        from dataclasses import replace
        out[0] = replace(out[0], extra_notes=tuple(out[0].extra_notes) + tuple(why))
    return out
