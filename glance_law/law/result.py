"""The result objects of the draftability law: :class:`LawFit` and :class:`LawChecks`.

:func:`glance_law.law.fit_law` builds them; they are re-exported from
:mod:`glance_law.law`. The column lists here are the contract other tools read
(``python -m glance_law.fit --format json``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data.selection import POOLED
from glance_law.errors import GlanceError
from glance_law.results import format as _fmt
from glance_law.results.base import Result

from .model import expected_accepted

__all__ = ["LawFit", "LawChecks", "LAW_COLUMNS", "LAW_EXTRA_COLUMNS", "DISPLAY_COLUMNS", "CURVE_COLUMNS",
           "POOLED"]


#: The columns of :meth:`LawFit.to_frame` and of ``python -m glance_law.fit --format json``,
#: in order (other tools read them); extra columns follow them (:data:`LAW_EXTRA_COLUMNS`).
#: ``tau`` = mean accepted + 1 over the fitted (drafted) rounds; ``tokens_per_round`` (an extra
#: column) = the same over every round of the group, those without a draft (``no_draft_rounds``,
#: horizon 0, one token each) included: the figure speed depends on.
LAW_COLUMNS = ("task", "rounds", "prompts", "mean_entropy", "mean_accepted", "tau", "b0", "b0_lo", "b0_hi",
               "b1", "b1_lo", "b1_hi", "r2_curve", "r2_isotonic", "r2_round", "ceiling", "ceiling_binned",
               "ceiling_fraction", "floor_mean", "cap", "sup", "p_ge8", "holds")
LAW_EXTRA_COLUMNS = ("drafter", "failed_checks", "holds_slope", "holds_rank", "holds_curve", "holds_monotone",
                     "rho", "rho_p", "mean_accepted_lo", "mean_accepted_hi", "floor_mean_lo", "floor_mean_hi",
                     "floor_rounds", "ceiling_model", "ceiling_bins", "horizon", "loglik", "method", "interval",
                     "level", "converged", "no_draft_rounds", "tokens_per_round")
#: What human formats (text, Markdown, LaTeX, HTML) print; JSON and CSV carry every column.
DISPLAY_COLUMNS = ("drafter", "task", "rounds", "prompts", "mean_entropy", "mean_accepted", "mean_accepted_lo",
                   "mean_accepted_hi", "tau", "tokens_per_round", "b0", "b0_lo", "b0_hi", "b1", "b1_lo", "b1_hi", "r2_curve",
                   "r2_isotonic", "r2_round", "ceiling", "ceiling_fraction", "floor_mean", "cap", "sup", "p_ge8",
                   "holds", "failed_checks")
CURVE_COLUMNS = ("bin", "n", "mean_entropy", "mean_accepted", "lo", "hi", "predicted", "isotonic")


@dataclass(frozen=True, eq=False)
class LawChecks(Result):
    """The paper's four checks of the law for one group, each reported separately.

    * ``slope``: a positive slope whose prompt-clustered interval excludes 0 (b1_lo > 0);
    * ``rank``: entropy and acceptance rank-correlate negatively with a prompt-aware
      two-sided p < ``alpha`` (so a one-sided test at alpha/2);
    * ``curve``: the law's decile curve R^2 >= ``min_r2_curve`` (a good conditional-mean fit);
    * ``monotone``: the decreasing isotonic decile curve R^2 >= ``min_r2_isotonic``.

    A check whose statistic could not be computed (NaN) does not pass.
    ``bool(checks)`` is True when all four pass.
    """

    title: ClassVar[str] = "the law's four checks"
    group: str
    drafter: str
    b1: float
    b1_lo: float
    b1_hi: float
    rho: float
    rho_p: float
    r2_curve: float
    r2_isotonic: float
    alpha: float = 0.05
    min_r2_curve: float = 0.5
    min_r2_isotonic: float = 0.9

    @property
    def slope(self) -> bool:
        return bool(self.b1 > 0 and self.b1_lo > 0)

    @property
    def rank(self) -> bool:
        return bool(self.rho < 0 and self.rho_p < self.alpha)

    @property
    def curve(self) -> bool:
        return bool(self.r2_curve >= self.min_r2_curve)

    @property
    def monotone(self) -> bool:
        return bool(self.r2_isotonic >= self.min_r2_isotonic)

    @property
    def passed(self) -> bool:
        return self.slope and self.rank and self.curve and self.monotone

    def __bool__(self) -> bool:
        return self.passed

    def as_dict(self) -> dict:
        return {"slope": self.slope, "rank": self.rank, "curve": self.curve, "monotone": self.monotone}

    def failed(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.as_dict().items() if not v)

    def to_frame(self) -> pd.DataFrame:
        rows = [
            ("slope", "b1 (clustered interval excludes 0)", self.b1, self.b1_lo, self.b1_hi, "b1_lo > 0", self.slope),
            ("rank", "Spearman rho (prompt-aware p)", self.rho, np.nan, np.nan,
             f"rho < 0, p < {self.alpha:g} (p = {_fmt.fmt_number(self.rho_p, 'p')})", self.rank),
            ("curve", "decile-curve R^2 of the law", self.r2_curve, np.nan, np.nan,
             f">= {self.min_r2_curve:g}", self.curve),
            ("monotone", "isotonic (decreasing) decile-curve R^2", self.r2_isotonic, np.nan, np.nan,
             f">= {self.min_r2_isotonic:g}", self.monotone),
        ]
        return pd.DataFrame(rows, columns=["check", "statistic", "value", "value_lo", "value_hi", "criterion",
                                           "passed"])

    @property
    def notes(self) -> tuple[str, ...]:
        return (f"group {self.group!r}, drafter {self.drafter!r}: "
                + ("all four checks pass" if self.passed else "fails: " + ", ".join(self.failed())),)


@dataclass(frozen=True, eq=False)
class LawFit(Result):
    """The fitted draftability law, one row per (drafter, group) plus a pooled row per drafter.

    Build with :func:`fit_law`. ``to_frame()`` has the columns :data:`LAW_COLUMNS`
    then :data:`LAW_EXTRA_COLUMNS`; ``params``, ``predict``, ``curve`` and
    ``holds`` address one group (``drafter`` may be omitted when the logs hold one).
    """

    title: ClassVar[str] = "draftability law: logit p = b0 - b1 H, E[a|H] = p(1-p^L)/(1-p)"
    table: pd.DataFrame
    curves: Mapping[tuple[str, str], pd.DataFrame]
    checks: Mapping[tuple[str, str], LawChecks]
    method: str = "mle"
    level: float = 0.95
    by: str | None = "task"
    interval: str = "cr3"
    n_boot: int = 0
    note_lines: tuple[str, ...] = ()

    # ---- access -----------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines

    @property
    def drafters(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.table["drafter"].tolist()))

    @property
    def groups(self) -> tuple[str, ...]:
        """Group labels (tasks, then ``"pooled"``), in table order."""
        return tuple(dict.fromkeys(self.table["task"].tolist()))

    def _key(self, group, drafter) -> tuple[str, str]:
        if isinstance(group, tuple):
            drafter, group = group
        drafters = self.drafters
        if drafter is None:
            if len(drafters) > 1:
                raise GlanceError(f"the fit holds several drafters ({', '.join(drafters)}); "
                                  "pass drafter=... to choose one")
            drafter = drafters[0]
        key = (str(drafter), str(group))
        if key not in self.curves:
            known = sorted({g for d, g in self.curves if d == key[0]}) if key[0] in drafters else []
            if not known:
                raise GlanceError(f"no drafter {key[0]!r} in this fit; drafters: {', '.join(drafters)}")
            raise GlanceError(f"no group {key[1]!r} for drafter {key[0]!r}; groups: {', '.join(known)}")
        return key

    def row(self, group: str = POOLED, drafter: str | None = None) -> pd.Series:
        """The to_frame() row of one group."""
        d, g = self._key(group, drafter)
        t = self.table
        return t[(t["drafter"] == d) & (t["task"] == g)].iloc[0]

    def params(self, group: str = POOLED, drafter: str | None = None) -> tuple[float, float]:
        """(b0, b1) of one group."""
        r = self.row(group, drafter)
        return float(r["b0"]), float(r["b1"])

    def predict(self, H, L=None, group: str = POOLED, drafter: str | None = None) -> np.ndarray:
        """The law's E[a | H] = M(sigmoid(b0 - b1 H), L) for one group (L defaults to its horizon)."""
        r = self.row(group, drafter)
        b0, b1 = float(r["b0"]), float(r["b1"])
        if not (np.isfinite(b0) and np.isfinite(b1)):
            raise GlanceError(f"the law was not fitted for group {r['task']!r}; see the fit's notes")
        return expected_accepted(H, b0, b1, r["horizon"] if L is None else L)

    def curve(self, group: str = POOLED, drafter: str | None = None) -> pd.DataFrame:
        """The decile curve of one group: bin, n, mean_entropy, mean_accepted, lo, hi, predicted, isotonic."""
        return self.curves[self._key(group, drafter)].copy()

    def holds(self, group: str = POOLED, drafter: str | None = None) -> LawChecks:
        """The paper's four checks for one group, reported separately (see :class:`LawChecks`)."""
        return self.checks[self._key(group, drafter)]

    # ---- reporting ---------------------------------------------------------
    def display_frame(self) -> pd.DataFrame:
        """The compact table human formats print (JSON/CSV print :meth:`to_frame`)."""
        cols = [c for c in DISPLAY_COLUMNS if c in self.table.columns]
        if len(self.drafters) <= 1:
            cols.remove("drafter")
        if "no_draft_rounds" in self.table.columns and not self.table["no_draft_rounds"].any():
            cols.remove("tokens_per_round")          # every round drafted: tokens_per_round = tau
        return self.table[cols]

    #: narrowed to a width, tau never shows without tokens_per_round (tau alone reads as speed)
    display_keep: ClassVar[tuple[str, ...]] = ("drafter", "task", "tau", "tokens_per_round", "b1",
                                               "holds", "failed_checks")

    def summary(self, fmt: str = "text", digits: int = 3, width: int | None = None) -> str:
        frame = self.display_frame() if fmt in _fmt.HUMAN else self.to_frame()
        return _fmt.render(frame, fmt, self.title, self.notes, digits, width=width, keep=self.display_keep)
