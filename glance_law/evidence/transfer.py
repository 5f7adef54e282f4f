"""Transfer: fit the law on some groups (tasks, drafters, runs) and score it on held-out ones.

The law (b0, b1) is fitted once on the pooled training rounds (exact MLE) and frozen. On
each held-out group it is scored by

* the held-out curve R^2: observed vs predicted mean accepted length over the group's
  equal-count entropy bins (deciles by default), ``1 - sum_k (abar_k - ahat_k)^2 /
  sum_k (abar_k - mean_k abar_k)^2``, next to the same score of the group's own fit;
* the round-level R^2 of the transferred prediction;
* calibration of E[a|H]: the binned table (``calibration()``), calibration-in-the-large
  ``mean(a - E_train[a|H])`` and the calibration slope (OLS of a on the prediction);
* log-likelihood per round of the truncated geometric under the transferred law, under
  the held-out group's own fit, and under an entropy-free (intercept-only) fit;
  ``ll_gap = own - transfer`` (>= 0) and ``efficiency = (transfer - null) / (own - null)``,
  the share of the entropy's likelihood gain the frozen law keeps;
* the parameter shift b_test - b_train with a Wald chi-square(2) test.

Uncertainty is prompt-clustered throughout and includes the training fit's estimation
error: the influence functions of both fits (I^-1 x score) are summed within prompt
clusters, so groups that share prompts (e.g. two drafters on the same prompts) are handled
as correlated, and disjoint groups as independent (CR1, t with G-1 df over the clusters
involved). The calibration slope's influence includes the training fit through the
differentiated normal equations, ``d beta / d b_k = (X'X)^-1 ([0, D_k'e] - beta_1 X'D_k)``
with ``D_k = d E_train[a|H] / d b_k``.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import special, stats

from glance_law.errors import GlanceError
from glance_law.law import model as _law
from glance_law.results.base import Result, TableResult
from glance_law.stats import curve as _curve
from glance_law.stats.cluster import cluster_codes, clustered_mean, t_crit

from . import common as E
from .offsets import decile_bins

__all__ = ["transfer", "parse_spec", "curve_r2", "TransferResult", "TransferCalibration",
           "cli_section", "add_cli_arguments"]

#: Columns the section cannot do without (checked before it runs; a missing one skips it, named).
NEEDS = ("root_entropy",)

ANALYSIS = "the transfer analysis"


def curve_r2(a, pred, bins) -> float:
    """R^2 of the binned curve (the law table's ``r2_curve``): observed bin means against
    predicted bin means, unweighted over bins (:func:`glance_law.stats.curve.r_squared`)."""
    a = np.asarray(a, float)
    pred = np.asarray(pred, float)
    ks = np.unique(bins)
    obs = np.array([a[bins == k].mean() for k in ks])
    hat = np.array([pred[bins == k].mean() for k in ks])
    return _curve.r_squared(obs, hat)


def mean_derivative(p, L) -> np.ndarray:
    """dM/dp of M(p) = sum_{l=1}^{L} p^l, i.e. sum_{l=1}^{L} l p^(l-1) (vectorised, exact)."""
    p = np.asarray(p, float)
    L = np.asarray(L, np.int64)
    Lmax = int(L.max()) if L.size else 0
    ls = np.arange(1, Lmax + 1)[None, :]
    terms = ls * p[:, None] ** (ls - 1)
    return np.where(ls <= L[:, None], terms, 0.0).sum(axis=1)


def parse_spec(spec: str) -> tuple[list[str], list[str]]:
    """'A,B:C,D' -> (["A","B"], ["C","D"]); an empty TEST side means every other group."""
    if ":" not in str(spec):
        raise GlanceError(f"--transfer expects TRAIN:TEST (e.g. caption,textvqa:docvqa), got {spec!r}")
    tr, te = str(spec).split(":", 1)
    train = [t.strip() for t in tr.split(",") if t.strip()]
    test = [t.strip() for t in te.split(",") if t.strip()]
    if not train:
        raise GlanceError(f"--transfer {spec!r}: name at least one training group before the colon")
    overlap = set(train) & set(test)
    if overlap:
        raise GlanceError(f"--transfer {spec!r}: {', '.join(sorted(overlap))} is both a training and a test group")
    return train, test


@dataclass(frozen=True, eq=False)
class TransferResult(Result):
    """One row per held-out group."""

    title: ClassVar[str] = "Law transfer: frozen training fit scored on held-out groups"
    frame: pd.DataFrame
    calibration_frame: pd.DataFrame
    train: tuple[str, ...]
    b_train: tuple[float, float]
    level: float = 0.95
    extra_notes: tuple[str, ...] = field(default=())

    def to_frame(self) -> pd.DataFrame:
        return self.frame.copy()

    def calibration(self) -> TransferCalibration:
        return TransferCalibration(self.calibration_frame, self.level, self.extra_notes[-1:])

    @property
    def notes(self) -> tuple[str, ...]:
        return self.extra_notes[:-1]


@dataclass(frozen=True, eq=False)
class TransferCalibration(TableResult):
    """Binned calibration of the transferred E[a|H] on each held-out group."""

    title: ClassVar[str] = "Law transfer: calibration of E[a|H] by entropy bin (held-out groups)"


def _arrays(sub):
    return (sub["root_entropy"].to_numpy(float), sub["accepted"].to_numpy(float),
            sub["horizon"].to_numpy(float))


def _cr1(psi: np.ndarray, codes: np.ndarray, G: int):
    """CR1 covariance of sum_i psi_i (psi (n, k)), clusters with rows only."""
    psi = psi.reshape(len(psi), -1)
    u = np.stack([np.bincount(codes, weights=psi[:, j], minlength=G) for j in range(psi.shape[1])], axis=1)
    g = int(np.count_nonzero(np.bincount(codes, minlength=G)))
    if g < 2:
        return np.full((psi.shape[1], psi.shape[1]), np.nan), g
    return g / (g - 1.0) * (u.T @ u), g


def transfer(rounds, train: Sequence[str], test: Sequence[str] | None = None, *, by: str = "task",
             n_bins: int = 10, level: float = 0.95, pool_test: bool = False) -> TransferResult:
    """Fit the law on the ``train`` values of column ``by``, score it on each ``test`` value.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (read_logs(...) or a frame with the contract's columns).
    train : sequence of str
        The values of ``by`` the law is fitted on.
    test : sequence of str, optional
        The values it is scored on (default: every other value).
    by : str, default "task"
        The column whose values are split ("task" or "drafter").
    n_bins : int, default 10
        Equal-count entropy bins.
    level : float, default 0.95
        Interval level (prompt-clustered).
    pool_test : bool, default False
        Score the law on every ``test`` value pooled, one row per arm labelled "pooled"
        (``python -m glance_law.fit --by none``), instead of one row per test value.

    Returns
    -------
    TransferResult
        One row per test value; ``calibration()`` the binned calibration.

    Examples
    --------
    >>> import glance_law as gl
    >>> res = gl.transfer(gl.simulate_rounds(seed=0), ["caption"], ["docvqa"])
    >>> list(res.to_frame()["task"])
    ['docvqa']
    """
    notes: list[str] = []
    frame = E.as_frame(rounds, notes)
    E.require(frame, ["root_entropy", "accepted", "horizon", by], ANALYSIS)
    frame = E.speculative_rounds(frame, notes)
    test = _held_out(E.distinct_strings(frame[by]), by, train, test)
    lead = [c for c in E.arm_columns(frame, by) if c != by]
    rows, cal = [], []
    b_first = (np.nan, np.nan)
    for arm_key, arm in E.group_items(frame, lead):
        av = arm[by].astype(str)
        in_train = av.isin(train).to_numpy()
        if not in_train.any():
            notes.append(f"{E.fmt_group(arm_key)}: no training rounds; skipped")
            continue
        # one cluster numbering over the arm, so shared prompts line up between fits
        codes_arm, G = cluster_codes(arm)
        Htr, atr, Ltr = _arrays(arm.loc[in_train])
        try:
            b_tr, _, sc_tr, info_tr = E.law_fit(Htr, atr, Ltr, codes_arm[in_train], G)
        except ValueError as exc:
            raise GlanceError(f"{ANALYSIS}: the law cannot be fitted on {', '.join(train)} ({exc})") from None
        train_fit = _TrainFit(b_tr, sc_tr @ np.linalg.inv(info_tr), in_train, codes_arm, G)
        if not np.isfinite(b_first[0]):
            b_first = (float(b_tr[0]), float(b_tr[1]))
        for t, values in ([(E.GROUP_ALL, test)] if pool_test else [(t, [t]) for t in test]):
            mask = av.isin(values).to_numpy()
            if not mask.any():
                notes.append(f"{E.fmt_group({**arm_key, by: t})}: no rounds; skipped")
                continue
            row, cal_rows = _score(arm.loc[mask], mask, train_fit, {**arm_key, by: t}, n_bins, level, notes)
            rows.append(row)
            cal += cal_rows
    if not rows:
        raise GlanceError(f"{ANALYSIS}: nothing to score")
    notes = [f"law fitted on {by} = {', '.join(train)} (pooled, exact MLE) and frozen; scored on each held-out {by}",
             "r2_curve: R^2 of observed vs predicted means over equal-count entropy bins (r2_curve_own: the "
             "held-out group's own fit); ll_*: truncated-geometric log-likelihood per round; efficiency = "
             "(ll_transfer - ll_null) / (ll_own - ll_null)",
             "calibration = mean(a - E_train[a|H]) and b1_shift = b1_own - b1_train (Wald: both parameters, "
             "chi-square 2 df) and calibration_slope (OLS of a on the prediction; 1 = calibrated): CR1 "
             "prompt-clustered over the influence of both fits (training error included)"] + notes
    notes.append(f"calibration(): observed mean accepted per entropy bin with CR1 prompt-clustered {int(level * 100)}% "
                 "intervals vs the transferred (predicted) and the group's own-fit (predicted_own) means")
    return TransferResult(pd.DataFrame(rows), pd.DataFrame(cal), tuple(train), b_first, level,
                          tuple(dict.fromkeys(notes)))


def _held_out(values: set[str], by: str, train, test) -> list[str]:
    """The test values (default: every value not trained on) among the ``values`` in the logs; one
    line for a value not in the logs or nothing left to score."""
    present = sorted(values)
    unknown = [t for t in train if t not in present]
    if unknown:
        raise GlanceError(f"{ANALYSIS}: training {by} {', '.join(unknown)} not in the logs "
                          f"(present: {', '.join(present)})")
    test = [t for t in present if t not in train] if not test else list(test)
    unknown = [t for t in test if t not in present]
    if unknown:
        raise GlanceError(f"{ANALYSIS}: test {by} {', '.join(unknown)} not in the logs (present: {', '.join(present)})")
    if not test:
        raise GlanceError(f"{ANALYSIS}: no held-out {by} left to score (present: {', '.join(present)})")
    return test


@dataclass(frozen=True)
class _TrainFit:
    """One arm's training fit: the estimate, its per-round influence (rows of the training rounds),
    which of the arm's rounds it was fitted on, and the arm's cluster codes (``G`` clusters)."""

    b: np.ndarray
    influence: np.ndarray
    rows: np.ndarray
    codes: np.ndarray
    G: int

    def clustered(self, psi_test, mask, psi_train):
        """The CR1 covariance (and clusters) of an influence that is ``psi_test`` on the arm's rounds
        in ``mask`` plus ``psi_train`` on its training rounds (summed within shared clusters)."""
        psi = np.zeros((len(self.codes),) + np.shape(psi_test)[1:])
        psi[mask] = psi_test
        psi[self.rows] += psi_train
        return _cr1(psi, self.codes, self.G)


def _score(te, mask, fit: _TrainFit, key: dict, n_bins: int, level: float, notes: list[str]):
    """The frozen training fit scored on one held-out group (the arm's rounds ``te``, at ``mask``):
    its table row and its calibration rows."""
    cte, G, b_tr = fit.codes[mask], fit.G, fit.b
    H, a, L = _arrays(te)
    n = len(a)
    label = E.fmt_group(key)
    p_tr = special.expit(b_tr[0] - b_tr[1] * H)
    pred = _law.truncated_mean(p_tr, L)
    try:
        b_te, _, sc_te, info_te = E.law_fit(H, a, L, cte, G)
        if_te = sc_te @ np.linalg.inv(info_te)
        pred_own = _law.expected_accepted(H, b_te[0], b_te[1], L)
    except ValueError as exc:
        notes.append(f"{label}: own fit not identified ({exc}); own-fit columns empty")
        b_te, if_te, pred_own = np.array([np.nan, np.nan]), None, np.full(n, np.nan)
    bins = decile_bins(H, n_bins)
    # calibration in the large, with the training fit's error
    cal_l = float(np.mean(a - pred))
    dpred = mean_derivative(p_tr, L) * p_tr * (1 - p_tr)
    g = np.array([dpred.mean(), -(dpred * H).mean()])
    V, gk = fit.clustered((a - pred - cal_l) / n, mask, -(fit.influence @ g))
    se_cal = float(np.sqrt(V[0, 0]))
    tt = t_crit(gk, level)
    d, se_d, wald, wald_p = _shift(fit, mask, b_te, if_te)
    ll_tr, ll_own, ll_null, eff = _likelihoods(b_tr, b_te, H, a, L)
    slope, s_lo, s_hi = _calibration_slope(fit, mask, H, a, pred, dpred, level)
    ss = ((a - a.mean()) ** 2).sum()
    row = {**key, "rounds": n, "prompts": int(np.unique(cte).size),
           "r2_curve": curve_r2(a, pred, bins), "r2_curve_own": curve_r2(a, pred_own, bins),
           "r2_round": float(1 - ((a - pred) ** 2).sum() / ss) if ss > 0 else np.nan,
           "mean_accepted": float(a.mean()), "mean_predicted": float(pred.mean()),
           "calibration": cal_l, "calibration_lo": cal_l - tt * se_cal,
           "calibration_hi": cal_l + tt * se_cal,
           "calibration_slope": slope, "calibration_slope_lo": s_lo, "calibration_slope_hi": s_hi,
           "ll_transfer": ll_tr, "ll_own": ll_own, "ll_null": ll_null,
           "ll_gap": ll_own - ll_tr, "efficiency": eff,
           "b0_train": float(b_tr[0]), "b1_train": float(b_tr[1]),
           "b0_own": float(b_te[0]), "b1_own": float(b_te[1]),
           "b1_shift": float(d[1]), "b1_shift_lo": float(d[1] - tt * se_d[1]),
           "b1_shift_hi": float(d[1] + tt * se_d[1]), "wald": wald, "wald_p": wald_p}
    cal = []
    for k in np.unique(bins):
        inb = bins == k
        mu, se, gb = clustered_mean(a[inb], cte[inb], G)
        tb = t_crit(gb, level)
        cal.append({**key, "bin": int(k) + 1, "rounds": int(inb.sum()), "mean_entropy": float(H[inb].mean()),
                    "observed": mu, "observed_lo": mu - tb * se, "observed_hi": mu + tb * se,
                    "predicted": float(pred[inb].mean()), "predicted_own": float(pred_own[inb].mean())})
    return row, cal


def _shift(fit: _TrainFit, mask, b_te, if_te):
    """The parameter shift ``b_te - b_tr`` (Wald), its influence summed within shared clusters:
    ``(d, se_d, wald, wald_p)``; NaN without an own fit."""
    if if_te is None:
        return np.array([np.nan, np.nan]), np.array([np.nan, np.nan]), np.nan, np.nan
    Vd, _ = fit.clustered(if_te, mask, -fit.influence)
    d = b_te - fit.b
    try:
        wald = float(d @ np.linalg.solve(Vd, d))
        wald_p = float(stats.chi2.sf(wald, 2))
    except np.linalg.LinAlgError:
        wald, wald_p = np.nan, np.nan
    return d, np.sqrt(np.diag(Vd)), wald, wald_p


def _likelihoods(b_tr, b_te, H, a, L):
    """Per-round log-likelihoods of the transferred, the own and the null (constant p) fits and the
    transfer's efficiency: ``(ll_tr, ll_own, ll_null, efficiency)``."""
    n = len(a)
    ll_tr = _law.loglik(b_tr, H, a, L) / n
    ll_own = _law.loglik(b_te, H, a, L) / n if np.isfinite(b_te).all() else np.nan
    s, f = a, (a < L).astype(float)
    pbar = s.sum() / (s + f).sum() if (s + f).sum() > 0 else np.nan
    ll_null = float((special.xlogy(s, pbar) + special.xlog1py(f, -pbar)).sum() / n)
    eff = (ll_tr - ll_null) / (ll_own - ll_null) if np.isfinite(ll_own) and ll_own > ll_null else np.nan
    return ll_tr, ll_own, ll_null, eff


def _calibration_slope(fit: _TrainFit, mask, H, a, pred, dpred, level: float):
    """The calibration slope: OLS of a on (1, pred), its influence including the training fit's;
    ``(slope, lo, hi)``, NaN when the prediction does not vary."""
    if not np.ptp(pred) > 0:
        return np.nan, np.nan, np.nan
    n = len(a)
    X = np.column_stack([np.ones(n), pred])
    A = np.linalg.inv(X.T @ X)
    beta = A @ X.T @ a
    e = a - X @ beta
    D = np.column_stack([dpred, -dpred * H])          # d pred / d (b0, b1)
    # d beta / d b_k = A ([0, D_k . e] - beta_1 X' D_k)  (differentiated normal equations)
    dbeta = A @ (np.vstack([np.zeros(2), e @ D]) - beta[1] * (X.T @ D))
    V3, g3 = fit.clustered((X @ A[1]) * e, mask, fit.influence @ dbeta[1])
    slope = float(beta[1])
    t3 = t_crit(g3, level)
    return slope, slope - t3 * float(np.sqrt(V3[0, 0])), slope + t3 * float(np.sqrt(V3[0, 0]))


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("law transfer (--transfer TRAIN:TEST)")
    g.add_argument("--transfer-by", default="task", metavar="COLUMN",
                   help="the column TRAIN and TEST name values of: task (default), drafter, run_id, ...")
    g.add_argument("--transfer-bins", type=int, default=10, metavar="K",
                   help="equal-count entropy bins for the curve R^2 and the calibration table (default 10)")


def cli_section(logs, args: argparse.Namespace) -> list[Result]:
    train, test = parse_spec(args.transfer)
    if int(getattr(args, "transfer_bins", 10)) < 2:
        raise GlanceError("--transfer-bins must be >= 2")
    level = float(getattr(args, "level", 0.95) or 0.95)
    res = transfer(logs, train, test, by=getattr(args, "transfer_by", "task") or "task",
                   n_bins=int(getattr(args, "transfer_bins", 10)), level=level,
                   pool_test=not E.cli_by(args))      # --by none: the held-out groups scored pooled, one row
    return [res, res.calibration()]
