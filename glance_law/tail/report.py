"""The tail analysis per regime and per task: fits, tests, results, CLI (held-out splits: :mod:`glance_law.tail.heldout`).

Re-exported by :mod:`glance_law.tail` (import it from there): :func:`tail_test`
(one regime from arrays), :func:`fit_tail` (round logs, the floor of each task),
the result objects and the ``--tail`` section of ``python -m glance_law.fit``.
"""
from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data.selection import POOLED, grouping
from glance_law.errors import GlanceError
from glance_law.law.model import law_supremum
from glance_law.results.base import Result
from glance_law.stats.cluster import CLUSTER_BY, clustered_mean, t_crit
from glance_law.stats.survival import run_survival

from . import mle as _mle
from .heldout import heldout_splits, law_cells
from .model import (
    N_IDENTIFIED,
    PARAMS,
    bootstrap_p,
    cell_order,
    check_rounds,
    chi2_sf,
    expected_cells,
    fit_W,
    geometric_cells,
    lrt_test,
    pi_needed,
    pi_star,
    pooled_chi_square,
)

TAIL_COLUMNS = ("task", "floor_rounds", "floor_prompts", "floor_mean", "cap", "sup", "ll_geometric",
                "ll_two_state", "lrt", "lrt_p_bootstrap", "lrt_p_nominal", "chi2_geometric", "chi2_two_state",
                "pi", "pi_star", "heldout_two_state_wins")
TAIL_EXTRA = ("floor_mean_lo", "floor_mean_hi", "lrt_deff", "lrt_p_bootstrap_rounds", "p_chi2_geometric", "p_chi2_two_state", "heldout_tests",
              "heldout_two_state_wins_ll", "heldout_chi2_geometric_mean", "heldout_chi2_two_state_mean")
MODEL_COLUMNS = ("task", "threshold", "horizon", "b0", "rho_geometric", "mean_geometric", "pi", "rho_d", "rho_u",
                 "t_dd", "t_uu", "lambda1", "lambda2", "s1", "mean_two_state", "cells", "df_geometric",
                 "df_two_state", "pi_needed", "n_boot")
HELDOUT_COLUMNS = ("task", "test", "train_prompts", "test_prompts", "test_rounds", "chi2_geometric",
                   "chi2_two_state", "cells", "p_chi2_geometric", "p_chi2_two_state", "ll_geometric",
                   "ll_two_state", "winner_chi2", "winner_ll", "mean_observed", "mean_observed_lo",
                   "mean_observed_hi", "mean_geometric", "mean_two_state", "geometric_inside",
                   "two_state_inside")


@dataclass(frozen=True, eq=False)
class TaskTail:
    """Everything the tail analysis found in one regime (one task's entropy floor)."""

    task: str
    accepted: np.ndarray
    horizon: np.ndarray
    clusters: np.ndarray
    threshold: float
    floor_mean: float
    floor_mean_lo: float
    floor_mean_hi: float
    b0: float
    p: float
    ll_geometric: float
    theta: tuple
    lambda1: float
    lambda2: float
    s1: float
    ll_two_state: float
    lrt: float
    lrt_p_bootstrap: float
    lrt_p_nominal: float
    n_boot: int
    observed: np.ndarray
    expected_geometric: np.ndarray
    expected_two_state: np.ndarray
    groups: np.ndarray
    chi2_geometric: float
    chi2_two_state: float
    cells: int
    heldout: tuple = ()
    drafter: str = ""
    lrt_null: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lrt_deff: float = 1.0
    lrt_null_deff: np.ndarray = field(default_factory=lambda: np.zeros(0))   # each null draw's design effect
    sup_horizon: int = 0

    # ---- derived -----------------------------------------------------------
    @property
    def n_rounds(self) -> int:
        return int(self.accepted.size)

    @property
    def n_prompts(self) -> int:
        return int(np.unique(self.clusters).size)

    @property
    def Lmax(self) -> int:
        return int(self.horizon.max())

    @property
    def cap(self) -> float:
        return float(np.exp(self.b0))

    @property
    def sup(self) -> float:
        """The law's supremum M(sigmoid(b0)) = e^b0 (1 - sigmoid(b0)^L) at the horizon ``sup_horizon``
        (the group's largest L; the regime's largest when not given)."""
        if not np.isfinite(self.b0):
            return float("nan")
        return law_supremum(self.b0, int(self.sup_horizon) if self.sup_horizon > 0 else self.Lmax)

    @property
    def df_geometric(self) -> int:
        return self.cells - 2

    @property
    def df_two_state(self) -> int:
        return self.cells - 1 - N_IDENTIFIED

    @property
    def p_chi2_geometric(self) -> float:
        return chi2_sf(self.chi2_geometric, self.df_geometric)

    @property
    def p_chi2_two_state(self) -> float:
        return chi2_sf(self.chi2_two_state, self.df_two_state)

    def _cells_two_state(self) -> np.ndarray:
        A, B = _mle.law_coefficients(np.array([self.lambda1]), np.array([self.lambda2]), self.Lmax)
        return np.clip(A[0] + B[0] * self.s1, 0.0, 1.0)

    def model_mean(self, which: str) -> float:
        """The model's mean accepted length averaged over the regime's horizons."""
        cells = self._cells_two_state() if which == "two_state" else geometric_cells(self.p, self.Lmax)
        cum = np.cumsum(cells[self.Lmax:])
        return float(cum[self.horizon - 1].mean())

    @property
    def lrt_p_bootstrap_rounds(self) -> float:
        """The plain parametric-bootstrap p-value (the observed lrt against the null draws, rounds
        treated as independent: no design-effect correction)."""
        return bootstrap_p(self.lrt, self.lrt_null) if self.n_boot > 0 else float("nan")

    @property
    def mixture(self) -> bool:
        """Whether the fitted law is a no-switching mixture (lambda2 >= 0, S1 <= lambda1): the
        only case in which the paper's pi and rho_U are identified (pi = C, rho_U = lambda2)."""
        return bool(self.lambda2 >= 0 and self.s1 <= self.lambda1 and self.lambda1 > self.lambda2)

    @property
    def pi(self) -> float:
        """The slow mode's weight C when the fitted law is a no-switching mixture, else NaN (the
        law then fixes no pi: a whole interval of entry weights gives it)."""
        return float(self.theta[0]) if self.mixture else float("nan")

    @property
    def pi_star(self) -> float:
        """The paper's threshold at rho_U = lambda2 (mixture case only, as ``pi``)."""
        if not np.isfinite(self.b0) or not self.mixture:
            return float("nan")
        return pi_star(self.b0, self.theta[2], self.horizon)

    @property
    def pi_needed(self) -> float:
        if not np.isfinite(self.b0):
            return float("nan")
        pi, rd, ru, tdd, tuu = self.theta
        return pi_needed(self.b0, ru, tuu, self.horizon, rho_d=rd, t_dd=tdd)

    @property
    def heldout_two_state_wins(self) -> int:
        return int(sum(t.two_state_wins for t in self.heldout if np.isfinite(t.chi2_two_state)))

    @property
    def heldout_tests(self) -> int:
        return int(sum(np.isfinite(t.chi2_two_state) and np.isfinite(t.chi2_geometric) for t in self.heldout))

    @property
    def heldout_two_state_wins_ll(self) -> int:
        return int(sum(t.ll_two_state > t.ll_geometric for t in self.heldout))

    def heldout_chi2_mean(self, which: str) -> float:
        """Mean held-out chi-square of one model over the tests where both are defined."""
        v = [(t.chi2_geometric, t.chi2_two_state) for t in self.heldout
             if np.isfinite(t.chi2_geometric) and np.isfinite(t.chi2_two_state)]
        if not v:
            return float("nan")
        return float(np.mean([x[0] if which == "geometric" else x[1] for x in v]))

    # ---- tables ------------------------------------------------------------
    def row(self) -> dict:
        return {"task": self.task, "floor_rounds": self.n_rounds, "floor_prompts": self.n_prompts,
                "floor_mean": self.floor_mean, "cap": self.cap, "sup": self.sup,
                "ll_geometric": self.ll_geometric, "ll_two_state": self.ll_two_state, "lrt": self.lrt,
                "lrt_p_bootstrap": self.lrt_p_bootstrap, "lrt_p_nominal": self.lrt_p_nominal,
                "chi2_geometric": self.chi2_geometric, "chi2_two_state": self.chi2_two_state,
                "pi": self.pi, "pi_star": self.pi_star, "heldout_two_state_wins": self.heldout_two_state_wins,
                "floor_mean_lo": self.floor_mean_lo, "floor_mean_hi": self.floor_mean_hi,
                "lrt_deff": self.lrt_deff, "lrt_p_bootstrap_rounds": self.lrt_p_bootstrap_rounds,
                "p_chi2_geometric": self.p_chi2_geometric, "p_chi2_two_state": self.p_chi2_two_state,
                "heldout_tests": self.heldout_tests, "heldout_two_state_wins_ll": self.heldout_two_state_wins_ll,
                "heldout_chi2_geometric_mean": self.heldout_chi2_mean("geometric"),
                "heldout_chi2_two_state_mean": self.heldout_chi2_mean("two_state")}

    def model_row(self) -> dict:
        out = {"task": self.task, "threshold": self.threshold, "horizon": self.Lmax, "b0": self.b0,
               "rho_geometric": self.p, "mean_geometric": self.model_mean("geometric")}
        out.update(dict(zip(PARAMS, self.theta)))
        out.update(lambda1=self.lambda1, lambda2=self.lambda2, s1=self.s1,
                   mean_two_state=self.model_mean("two_state"), cells=self.cells,
                   df_geometric=self.df_geometric, df_two_state=self.df_two_state, pi_needed=self.pi_needed,
                   n_boot=self.n_boot)
        return out

    def pmf_table(self) -> pd.DataFrame:
        """The run-length histogram: observed and expected counts per cell, and the pooled group."""
        Lmax = self.Lmax
        order = cell_order(Lmax)
        a = np.where(order < Lmax, order, order - Lmax + 1)
        capped = order >= Lmax
        keep = (self.observed[order] > 0) | (self.expected_geometric[order] > 0)
        return pd.DataFrame({"accepted": a, "capped": capped, "observed": self.observed[order],
                             "expected_geometric": self.expected_geometric[order],
                             "expected_two_state": self.expected_two_state[order],
                             "group": self.groups[order]})[keep].reset_index(drop=True)

    def survival_table(self) -> pd.DataFrame:
        """S(l), l = 1..Lmax: observed (Kaplan-Meier over horizons), geometric and two-state."""
        Lmax = self.Lmax
        a, L = self.accepted, self.horizon
        obs = run_survival(a, a >= L, Lmax)            # a run that took its whole horizon is censored there
        return pd.DataFrame({"l": np.arange(1, Lmax + 1), "observed": obs,
                             "geometric": geometric_cells(self.p, Lmax)[Lmax:],
                             "two_state": self._cells_two_state()[Lmax:]})


# ---------------------------------------------------------------------------
# one regime
# ---------------------------------------------------------------------------

def tail_test(accepted, horizon, clusters=None, *, b0: float = float("nan"), task: str = "regime",
              n_boot: int = 199, seed=0, folds: int = 5, level: float = 0.95, n_boot_mean: int = 2000,
              min_expected: float = 5.0, n_local: int = 4, threshold: float = float("nan"),
              drafter: str = "", heldout: bool = True, sup_horizon: int = 0) -> tuple[TaskTail, list[str]]:
    """Fit and test both models on one regime's rounds (arrays); returns ``(TaskTail, notes)``.

    ``clusters``: the prompt of each round (held-out splits and intervals are by
    prompt); None treats every round as its own prompt (and says so).
    ``b0``: the law's intercept for the cap e^b0, the supremum and pi* (NaN: not reported).
    ``sup_horizon``: the L of the supremum (the group's largest horizon; 0: the regime's largest).
    ``seed``: an int (or a sequence of ints); the bootstrap and the held-out splits use
    independent streams derived from it, so changing ``n_boot`` leaves the splits alone.
    """
    a, L = check_rounds(accepted, horizon)
    notes: list[str] = []
    if clusters is None:
        cl = np.arange(a.size)
        notes.append(f"{task}: no prompt ids given: every round is treated as its own prompt")
    else:
        cl = np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
        if cl.size != a.size:
            raise GlanceError(f"clusters ({cl.size}) must have one entry per round ({a.size})")
    if int(n_boot) < 0 or int(folds) < 0 or int(n_boot_mean) < 0:
        raise GlanceError("n_boot, folds and n_boot_mean must be >= 0")
    if not 0.0 < float(level) < 1.0:
        raise GlanceError(f"level must lie strictly between 0 and 1 (got {level})")
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2 ** 63))
    rng_boot, rng_ho = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    G = int(cl.max()) + 1
    fm, se, g = clustered_mean(a.astype(np.float64), cl, G)
    half = t_crit(g, level) * se if g >= 2 else np.nan
    Lmax = int(L.max())
    W = _mle.counts(a, L, Lmax)
    l1, l2, s1, ll2, p, ll1 = (float(x[0]) for x in fit_W(W[None], n_local))
    test = lrt_test(a, L, n_boot=int(n_boot), seed=rng_boot, n_local=n_local,
                    clusters=None if clusters is None else cl)
    theta = tuple(float(x) for x in _mle.theta_from_law(l1, l2, s1)[0])
    nL = np.bincount(L - 1, minlength=Lmax)[:Lmax]
    Eg = expected_cells(geometric_cells(p, Lmax), nL)
    E2 = expected_cells(law_cells([l1], [l2], [s1], Lmax)[0], nL)
    order = cell_order(Lmax)
    chi2, n_groups, grp = pooled_chi_square(W[order], np.stack([Eg, E2])[:, order], min_expected)
    groups = np.full(W.size, -1)
    groups[order] = grp
    ho: tuple = ()
    if heldout:
        ho, hn = heldout_splits(a, L, cl, rng_ho, int(folds), float(level), int(n_boot_mean), float(min_expected), n_local)
        notes += [f"{task}: {n}" for n in hn]
    if np.unique(L).size > 1:
        notes.append(f"{task}: horizons vary in the regime (L = {L.min()}..{L.max()}); likelihoods, expected "
                     "counts, means and pi* use each round's own L, sup the task's largest")
    tt = TaskTail(task=task, accepted=a, horizon=L, clusters=cl, threshold=float(threshold), floor_mean=fm,
                  floor_mean_lo=fm - half, floor_mean_hi=fm + half, b0=float(b0), p=p, ll_geometric=ll1,
                  theta=theta, lambda1=l1, lambda2=l2, s1=s1, ll_two_state=ll2, lrt=test.lrt,
                  lrt_p_bootstrap=test.p_bootstrap, lrt_p_nominal=test.p_nominal, n_boot=int(n_boot),
                  observed=W, expected_geometric=Eg, expected_two_state=E2, groups=groups,
                  chi2_geometric=float(chi2[0]), chi2_two_state=float(chi2[1]), cells=int(n_groups),
                  heldout=ho, drafter=drafter, lrt_null=test.null_draws, lrt_deff=test.deff,
                  lrt_null_deff=np.ones(0) if test.null_deff is None else test.null_deff,
                  sup_horizon=int(sup_horizon))
    return tt, notes


# ---------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------

def _frame(rows: list[dict], columns, multi_drafter: bool) -> pd.DataFrame:
    cols = list(columns) + (["drafter"] if multi_drafter else [])
    return pd.DataFrame(rows, columns=cols)


@dataclass(frozen=True, eq=False)
class TailModels(Result):
    """The fitted models per task: geometric p, the canonical two-state theta, the identified
    invariants, the models' floor means and degrees of freedom."""

    title: ClassVar[str] = "grounded tail: fitted models per task"
    tasks: tuple = ()
    note_lines: tuple = ()

    def to_frame(self) -> pd.DataFrame:
        multi = len({t.drafter for t in self.tasks}) > 1
        return _frame([{**t.model_row(), "drafter": t.drafter} for t in self.tasks], MODEL_COLUMNS, multi)

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines


@dataclass(frozen=True, eq=False)
class TailHeldout(Result):
    """Prompt-disjoint held-out falsification: one row per (task, test)."""

    title: ClassVar[str] = "grounded tail: prompt-disjoint held-out tests (frozen models)"
    tasks: tuple = ()
    level: float = 0.95

    def to_frame(self) -> pd.DataFrame:
        multi = len({t.drafter for t in self.tasks}) > 1
        rows = [{"task": t.task, **h.row(), "drafter": t.drafter} for t in self.tasks for h in t.heldout]
        return _frame(rows, HELDOUT_COLUMNS, multi)

    @property
    def notes(self) -> tuple[str, ...]:
        return ("each test fits both models on the training prompts and scores them, frozen, on disjoint "
                "prompts: 2 half splits (both directions) and 5 prompt folds; cells pooled as in the main "
                "table, p-values chi-square(cells - 1) (nothing is fitted to the held-out prompts)",
                f"mean_observed: held-out mean accepted length with a {100 * self.level:g}% percentile "
                "interval from a prompt-level cluster bootstrap; *_inside: the frozen model's predicted "
                "mean lies inside it")


@dataclass(frozen=True, eq=False)
class TailFit(Result):
    """The grounded-tail analysis per task (build with :func:`fit_tail`).

    ``to_frame()`` has the columns ``TAIL_COLUMNS`` then ``TAIL_EXTRA``;
    ``models()`` and ``heldout_table()`` give the other two tables, ``tasks`` the
    per-task :class:`TaskTail` objects (``fit["docvqa"]`` picks one).
    """

    title: ClassVar[str] = "grounded tail: floor regime, geometric vs two-state survival"
    #: What a width-limited text table keeps: the regime's mean and the geometric-vs-two-state verdict.
    display_keep: ClassVar[tuple[str, ...]] = ("floor_mean", "lrt", "lrt_p_bootstrap", "heldout_two_state_wins")
    tasks: tuple = ()
    level: float = 0.95
    note_lines: tuple = ()

    def __getitem__(self, task: str) -> TaskTail:
        hits = [t for t in self.tasks if t.task == task or f"{t.drafter}/{t.task}" == task]
        if len(hits) != 1:
            known = ", ".join(t.task if not t.drafter else f"{t.drafter}/{t.task}" for t in self.tasks)
            raise GlanceError(f"no single tail fit for {task!r}; fitted: {known}")
        return hits[0]

    def to_frame(self) -> pd.DataFrame:
        multi = len({t.drafter for t in self.tasks}) > 1
        df = _frame([{**t.row(), "drafter": t.drafter} for t in self.tasks], TAIL_COLUMNS + TAIL_EXTRA, multi)
        for c in ("floor_rounds", "floor_prompts", "heldout_two_state_wins", "heldout_tests",
                  "heldout_two_state_wins_ll"):
            df[c] = df[c].astype(np.int64)
        return df

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines

    def models(self) -> TailModels:
        return TailModels(tasks=self.tasks, note_lines=(
            "pi, rho_d, rho_u, t_dd, t_uu: a canonical theta for the fitted law (the law identifies only "
            "lambda1 >= lambda2, the eigenvalues of K, and s1 = S(1)); when the law is a no-switching "
            "mixture theta = (C, lambda1, lambda2, 1, 1), else rho_d = 1",
            "df_two_state = cells - 1 - 3 (3 identified parameters; the paper counts 5); pi_needed: the pi at "
            "which the two-state mean equals e^b0 with the other parameters as fitted"))

    def heldout_table(self) -> TailHeldout:
        return TailHeldout(tasks=self.tasks, level=self.level)


# ---------------------------------------------------------------------------
# round logs -> per-task regimes
# ---------------------------------------------------------------------------

def _floor_mask(H: np.ndarray, quantile: float, threshold: float | None) -> np.ndarray:
    if threshold is not None:
        return H <= threshold
    from glance_law.stats.curve import equal_count_bins
    order = np.argsort(H, kind="stable")
    inv = 1.0 / quantile
    if abs(inv - round(inv)) < 1e-9:        # the law's decile bins exactly (bottom of round(1/q) bins)
        return equal_count_bins(order, int(round(inv))) == 0
    mid = np.empty(H.size)
    mid[order] = (np.arange(H.size) + 0.5) / H.size
    return mid < quantile


def _b0_source(frame, by, condition, method, b0, law, notes):
    if b0 is not None:
        if isinstance(b0, Mapping):
            return lambda d, g: float(b0.get(g, b0.get(f"{d}/{g}", np.nan)))
        return lambda d, g: float(b0)
    if law is None:
        from glance_law.law.fit import fit_law
        try:
            law = fit_law(frame, by=by, method=method, condition=condition)
        except GlanceError as exc:
            notes.append(f"the law could not be fitted, so cap, sup and pi* are not reported ({exc})")
            return lambda d, g: float("nan")

    def get(d, g):
        try:
            return law.params(g if by else "pooled", d)[0]
        except GlanceError:
            return float("nan")
    return get


def fit_tail(rounds, *, by: str = "task", quantile: float = 0.1, threshold: float | None = None,
             condition="matched", n_boot: int = 199, seed: int = 0, folds: int = 5, level: float = 0.95,
             n_boot_mean: int = 2000, min_expected: float = 5.0, law=None, b0=None, method: str = "mle",
             heldout: bool = True) -> TailFit:
    """The grounded-tail analysis of each task's entropy floor.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs (task, prompt_id, root_entropy, accepted, horizon).
    by : str, default "task"
        Grouping column; each group's floor is analysed separately (and each drafter
        separately when the logs hold several).
    quantile : float, default 0.1
        The floor is the bottom ``quantile`` of the group's rounds by entropy (the bottom
        decile: the same equal-count bin as the law's decile curve), among the matched rounds
        with horizon > 0.
    threshold : float, optional
        Nats; instead of ``quantile``, every round with H <= threshold.
    condition : str or sequence, default "matched"
        Conditions analysed (None pools every condition).
    n_boot : int, default 199
        Parametric-bootstrap replicates of the LRT p-value (0 skips it).
    seed : int, default 0
        Seed of the bootstrap and of the held-out splits.
    folds : int, default 5
        Prompt folds of the held-out falsification (besides the two half splits).
    level : float, default 0.95
        Interval level.
    n_boot_mean, min_expected : int, float
        Bootstrap replicates of the held-out mean's interval; the smallest expected count of a
        chi-square cell (cells are pooled until they reach it).
    law, b0 : LawFit, float or mapping, optional
        The law whose intercept gives cap = e^b0, sup and pi* (default: ``fit_law(rounds, by=by)``);
        ``b0`` a number or a mapping group -> b0 overrides it.
    method : str, default "mle"
        The law's method when it is fitted here.
    heldout : bool, default True
        Run the prompt-disjoint held-out tests.

    Returns
    -------
    TailFit
        One row per task (``to_frame()``), with ``models()`` and ``heldout_table()``.

    Examples
    --------
    >>> import glance_law as gl
    >>> tail = gl.fit_tail(gl.simulate_rounds(seed=0), n_boot=0, heldout=False)
    >>> sorted(tail.to_frame()["task"])[:2]
    ['caption', 'chartqa']
    """
    from glance_law.data.selection import as_frame, prepare, require_order
    if threshold is None and not 0.0 < float(quantile) <= 1.0:
        raise GlanceError(f"quantile must lie in (0, 1] (got {quantile})")
    if threshold is not None and not (np.isfinite(float(threshold)) and float(threshold) >= 0):
        raise GlanceError(f"threshold must be a finite entropy >= 0 nats (got {threshold})")
    arm_notes: list[str] = []           # several targets, or drafter names altered to label arms
    frame, skipped = as_frame(rounds, arm_notes)
    notes: list[str] = [f"skipped {p}: {r}" if str(p) not in r else f"skipped {r}" for p, r in skipped] + arm_notes
    # its intervals, bootstrap design effect and held-out splits are prompt-clustered: counters pooled over
    # requests have pseudo-prompts only (a per-request histogram keeps its prompt and is read as a histogram)
    require_order(frame, "the tail test needs real prompts (its intervals, design effect and held-out splits cluster "
                         "rounds by prompt)",
                  "their pooled run-length histogram needs no prompts: python -m glance_law.fit without --tail "
                  "gives tau and P(a = L); per-request logs (vLLM --per-request-spec-decode-metrics, SGLang "
                  "responses) allow the tail", kinds=("pooled",))
    whole = "root_entropy" not in frame.columns or not frame["root_entropy"].notna().any()
    if whole:  # no entropy measured: the regime is the whole log (every drafted round), no law, no cap
        frame = frame.assign(root_entropy=np.zeros(len(frame), dtype=np.float32))
        quantile, threshold = 1.0, None
        if b0 is None:
            b0 = float("nan")
        notes.append("no root_entropy in the logs: the regime is the whole log (every matched drafted round of "
                     "the group), not an entropy floor; cap, sup and pi_star need the law's b0 and are empty")
    data = prepare(frame, by, condition, None, CLUSTER_BY, notes)
    get_b0 = _b0_source(frame, by, condition, method, b0, law, notes)
    tasks, empty = [], []
    dn, gn = data["dnames"], data["gnames"] if by else [POOLED]
    gcodes = data["g"] if by else np.zeros(data["H"].size, dtype=np.int64)
    for di in np.unique(data["d"]):
        for gi in sorted(np.unique(gcodes[data["d"] == di]), key=lambda i: gn[i]):
            m = (data["d"] == di) & (gcodes == gi)
            H, a, L, cl = data["H"][m], data["a"][m], data["L"][m], data["cl"][m]
            fl = _floor_mask(H, float(quantile), threshold)
            dname = dn[di] if np.unique(data["d"]).size > 1 else ""
            label = gn[gi]
            if not fl.any():
                empty.append(label)
                continue
            thr = float(threshold) if threshold is not None else float(H[fl].max())
            task_seed = [int(seed), zlib.crc32(f"{dn[di]}/{label}".encode())]
            tt, tn = tail_test(a[fl], L[fl], cl[fl], b0=get_b0(dn[di], label), task=label, n_boot=n_boot,
                               seed=task_seed, folds=folds, level=level, n_boot_mean=n_boot_mean,
                               min_expected=min_expected, threshold=thr, drafter=dname, heldout=heldout,
                               sup_horizon=int(L.max()))
            tasks.append(tt)
            notes += tn
    if not tasks:
        what = f"no round has H <= {threshold} nats" if threshold is not None else "no rounds"
        raise GlanceError(f"the floor regime is empty for every group ({what}); raise the threshold "
                          "or check the task and condition")
    if empty:
        notes.append(f"empty floor regime (no round with H <= {threshold} nats), not analysed: {', '.join(empty)}")
    rule = ("the whole log (no root entropy)" if whole else f"H <= {threshold} nats" if threshold is not None else
            "bottom entropy decile (the law's lowest decile bin)" if abs(quantile - 0.1) < 1e-12 else
            f"bottom {quantile:g} of rounds by entropy")
    notes += [
        f"floor regime per task: {rule}, among matched rounds with horizon > 0; other rounds are not used",
        "cap = e^b0 with b0 from the task's law fit; sup = M(sigmoid(b0)) = e^b0 (1 - sigmoid(b0)^L) at the "
        "task's largest horizon L; floor_mean interval: prompt-clustered CR1, t(G-1)",
        f"lrt = 2 (ll_two_state - ll_geometric); lrt_p_bootstrap: parametric bootstrap under the fitted "
        f"geometric ({n_boot} replicates, seed {seed}, same horizons, both models refitted; rounds drawn "
        "independently, each prompt keeping its rounds), made prompt-aware by dividing the observed lrt by lrt_deff, "
        "the Rao-Scott design effect of the run-length histogram under prompt clustering, and each draw by its own "
        "(lrt_p_bootstrap_rounds: the same bootstrap without "
        "that correction, rounds treated as independent); lrt_p_nominal: the paper's chi-square(4) reference, conservative because Wilks "
        "does not apply (3 identified parameters, one unidentified under the null)",
        "chi2: Pearson on the run-length histogram, adjacent cells pooled left to right until the expected "
        "count is >= 5 under both models; p_chi2_geometric on cells-2 df, p_chi2_two_state on cells-4 df",
        "pi: the fitted weight of the slow mode when the fitted law is a no-switching mixture (0 <= lambda2 < "
        "lambda1 and s1 <= lambda1: pi = C, rho_U = lambda2); otherwise pi and pi_star are empty, because a rising or "
        "oscillating hazard is produced by a whole interval of entry weights (compare such fits by "
        "log-likelihood and pmf; the models table shows one canonical theta); pi_star = "
        "(e^b0 - M(rho_U)) / (L - M(rho_U)) is sufficient, not necessary, for a floor above the cap when "
        "t_UU < 1 (see the models table's pi_needed)",
        "heldout_two_state_wins: prompt-disjoint tests (of heldout_tests) where the frozen two-state model "
        "has the smaller held-out chi-square (_ll: the larger held-out log-likelihood); heldout_chi2_*_mean: "
        "each model's mean held-out chi-square over those tests",
    ]
    return TailFit(tasks=tuple(tasks), level=float(level), note_lines=tuple(notes))


# ---------------------------------------------------------------------------
# CLI section
# ---------------------------------------------------------------------------

CLI_COLUMNS = ("root_entropy", "accepted", "horizon", "task", "prompt_id", "condition", "drafter")
#: Columns the section cannot do without (root_entropy is optional: without it the regime is the whole log).
NEEDS = ("accepted", "horizon")


def add_cli_arguments(parser) -> None:
    g = parser.add_argument_group("--tail options")
    g.add_argument("--tail-threshold", type=float, default=None, metavar="NATS",
                   help="floor regime: rounds with root entropy <= NATS (default: each task's bottom decile)")
    g.add_argument("--tail-quantile", type=float, default=0.1, metavar="Q",
                   help="floor regime: the bottom Q of each task's rounds by entropy (default 0.1)")
    g.add_argument("--tail-bootstrap", type=int, default=199, metavar="N",
                   help="parametric-bootstrap replicates of the LRT p-value (default 199; 0 skips)")
    g.add_argument("--tail-folds", type=int, default=5, metavar="K",
                   help="prompt folds of the held-out tests (default 5, plus the two half splits)")


def cli_section(logs, args) -> list:
    """The ``--tail`` section: the tail table, the fitted models and the held-out tests."""
    cond = str(getattr(args, "condition", "matched"))
    condition = None if cond.lower() == "all" else [c.strip() for c in cond.split(",") if c.strip()]
    if condition is not None and len(condition) == 1:
        condition = condition[0]
    by = grouping(getattr(args, "by", "task"))
    if getattr(args, "tail_bootstrap", 199) < 0:
        raise GlanceError("--tail-bootstrap must be >= 0")
    if getattr(args, "tail_folds", 5) < 2:
        raise GlanceError("--tail-folds must be >= 2")
    fit = fit_tail(logs, by=by, quantile=getattr(args, "tail_quantile", 0.1),
                   threshold=getattr(args, "tail_threshold", None), condition=condition,
                   n_boot=getattr(args, "tail_bootstrap", 199), seed=getattr(args, "seed", 0),
                   folds=getattr(args, "tail_folds", 5), level=getattr(args, "level", 0.95),
                   method=getattr(args, "method", "mle"))
    return [fit, fit.models(), fit.heldout_table()]
