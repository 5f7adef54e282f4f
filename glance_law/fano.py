"""Fano's inequality for the target's root distribution (Proposition 1 (i) of the paper).

For a distribution over ``V`` tokens with top-1 error ``e = 1 - max_w p(w)``,

    H <= F(e) = h_b(e) + e ln(V - 1),      h_b(e) = -e ln e - (1 - e) ln(1 - e),

(nats). ``F`` increases on ``[0, 1 - 1/V]`` from 0 to ``ln V`` and the bound is
tight (the distribution ``(1 - e, e/(V-1), ..., e/(V-1))`` attains it), so the
smallest top-1 error consistent with entropy ``H`` is the inverse

    e*_min(H, V) = F^-1(H) on [0, 1 - 1/V]     (undefined for H > ln V),

and ``1 - e*_min(H, V)`` is the largest top-1 probability, hence the largest
probability with which *any* guess (a drafter's token) can equal a token drawn
from that distribution: an upper envelope on the match probability under
sampling (:func:`match_envelope`). Under greedy verification the match is
against the argmax, which entropy alone does not bound.

:func:`fano_check` applies the inequality to logs: every round's logged
``root_pmax`` must satisfy ``1 - root_pmax >= e*_min(root_entropy, V)``; a
violation means the two columns were not computed from the same distribution
(a logging bug: e.g. entropy in bits, a temperature applied to one of them, or
a truncated distribution).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import special

from glance_law.data.selection import POOLED, grouping
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.results.base import Result

__all__ = ["fano_bound", "inverse_fano", "match_envelope", "fano_check", "FanoCheck", "run_vocab_size"]


def _vocab(V) -> np.ndarray:
    Va = np.asarray(V, dtype=np.float64)
    if not np.all(np.isfinite(Va)) or np.any(Va < 2):
        raise GlanceError(f"the vocabulary size |V| must be >= 2 (got {V!r})")
    return Va


def fano_bound(e, V):
    """F(e) = h_b(e) + e ln(|V| - 1) in nats (vectorised): the largest entropy a distribution over
    |V| tokens with top-1 error e can have (increasing on [0, 1 - 1/|V|])."""
    ea = np.asarray(e, dtype=np.float64)
    if not np.all(np.isfinite(ea)) or np.any((ea < 0) | (ea > 1)):
        raise GlanceError("the top-1 error e is a probability and must lie in [0, 1]")
    Va = _vocab(V)
    out = special.entr(ea) + special.entr(1.0 - ea) + ea * np.log(Va - 1.0)
    return float(out) if np.ndim(out) == 0 else out


def inverse_fano(H, V, iterations: int = 80):
    """e*_min(H, |V|): the smallest top-1 error consistent with entropy ``H`` nats (vectorised).

    The unique root of F(e) = H on [0, 1 - 1/|V|], found by bisection (``iterations``
    halvings of the bracket: exact to 1e-16 in e where F is not flat; within
    ~1e-8 of ln|V|, where F'(e) -> 0, e is only as exact as H allows). NaN where
    H > ln|V| (no distribution over |V| tokens has that entropy). ``H`` in
    [-1e-6, 0) (float noise) counts as 0; more negative values are rejected.
    """
    Ha = np.asarray(H, dtype=np.float64)
    if not np.all(np.isfinite(Ha)) or np.any(Ha < -1e-6):
        raise GlanceError("entropy H must be finite and >= 0 nats")
    Va = _vocab(V)
    Ha, Va = np.broadcast_arrays(np.maximum(Ha, 0.0), Va)
    lo = np.zeros(Ha.shape)
    hi = 1.0 - 1.0 / Va
    logv1 = np.log(Va - 1.0)
    for _ in range(int(iterations)):
        mid = 0.5 * (lo + hi)
        f = special.entr(mid) + special.entr(1.0 - mid) + mid * logv1
        below = f < Ha
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    e = np.where(Ha <= 0, 0.0, hi)
    e = np.where(Ha > np.log(Va) * (1 + 1e-15), np.nan, e)
    return float(e) if e.ndim == 0 else e


def match_envelope(H, V):
    """1 - e*_min(H, |V|): the largest top-1 probability of any distribution with entropy H over
    |V| tokens, so the largest probability that any proposal equals a token *drawn* from it."""
    e = inverse_fano(H, V)
    return 1.0 - e


# ---------------------------------------------------------------------------
# the log consistency check
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class FanoCheck(Result):
    """Per task: rounds checked, violations of ``1 - root_pmax >= e*_min(root_entropy, |V|)``."""

    title: ClassVar[str] = "Fano consistency of the logged root_pmax and root_entropy"
    table: pd.DataFrame
    violations: pd.DataFrame
    vocab_size: float
    tol: float
    note_lines: tuple = ()

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    @property
    def ok(self) -> bool:
        return bool(self.table["violations"].sum() == 0)

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines


def run_vocab_size(logs) -> float | None:
    """The target's vocabulary size from a LogSet's run metadata (``vocab_size``, as
    ``glance-log`` records it, or ``target_vocab_size`` / ``target.vocab_size``), else None."""
    found: list = []     # (vocabulary size, file) of every file that records one
    for f in getattr(logs, "files", ()):
        run = dict(getattr(f, "run", {}) or {})
        v = next((_run_vocab(run[key], f, key) for key in ("vocab_size", "target_vocab_size") if key in run), None)
        tgt = run.get("target")
        if v is None and isinstance(tgt, dict) and "vocab_size" in tgt:
            v = _run_vocab(tgt["vocab_size"], f, "target.vocab_size")
        if v is not None:
            found.append((v, getattr(f, "path", "?")))
    if not found:
        return None
    other = next(((v, p) for v, p in found if v != found[0][0]), None)
    if other is not None:    # target models of different vocabularies: one |V| would be wrong for some rounds
        raise GlanceError(f"{other[1]}: the run metadata's vocabulary size is {other[0]:g} but {found[0][1]} records "
                          f"{found[0][0]:g} (logs of different target models); run the Fano check on each target's "
                          "files separately, or pass --vocab-size V")
    return found[0][0]


def _run_vocab(value, f, key: str) -> float:
    """A vocabulary size from run metadata, or one line naming the file, the field and the fix."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float, str)) and \
            math.isfinite(float(value)) and float(value) >= 2
    except (TypeError, ValueError):
        ok = False
    if not ok:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise GlanceError(f"{getattr(f, 'path', '?')}: the run metadata's {key} is {shown}, not a vocabulary "
                          "size (a number >= 2); pass --vocab-size V, or fix the logger's run metadata")
    return float(value)


def fano_check(rounds, *, vocab_size=None, tol: float = 1e-4, by: str = "task") -> FanoCheck:
    """Check every round's ``root_pmax`` against Fano's inequality at its ``root_entropy``.

    A round violates the inequality when ``H > F(1 - pmax) + tol`` (equivalently ``1 -
    pmax < e*_min(H, |V|)`` beyond the tolerance), or when ``pmax`` lies outside
    ``[1/|V|, 1]`` (impossible for a top-1 probability). Rounds without a ``root_pmax``
    (null) are not checked and are counted in the notes.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs with ``root_entropy`` and ``root_pmax``.
    vocab_size : int, optional
        The target's vocabulary size |V|; defaults to the logs' run metadata (``vocab_size``)
        when a LogSet carries it.
    tol : float, default 1e-4
        Nats; absorbs the float32 rounding of both logged columns.
    by : str, default "task"
        Grouping column of the per-group rows.

    Returns
    -------
    FanoCheck
        Violations per group; ``ok`` is True when there are none.

    Examples
    --------
    >>> import glance_law as gl
    >>> type(gl.fano_check(gl.simulate_rounds(seed=0), vocab_size=32000)).__name__
    'FanoCheck'
    """
    from glance_law.data.io import LogSet
    frame = rounds.frame if isinstance(rounds, LogSet) else rounds
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError("fano_check expects a rounds DataFrame or a LogSet from glance_law.read_logs")
    V = vocab_size if vocab_size is not None else run_vocab_size(rounds)
    if V is None:
        raise GlanceError("fano_check needs the target's vocabulary size: pass vocab_size=... "
                          "(the logs' run metadata does not record it)")
    V = float(_vocab(V))
    if float(tol) < 0:
        raise GlanceError(f"tol must be >= 0 nats (got {tol})")
    for c in ("root_entropy", "root_pmax"):
        if c not in frame.columns:
            raise MissingColumnError(f"column '{c}'", "the Fano check", "glance-log (recorded by default)")
    H = frame["root_entropy"].to_numpy(dtype=np.float64)
    pm = frame["root_pmax"].to_numpy(dtype=np.float64)
    present = np.isfinite(pm)
    notes = []
    if (~present).any():
        notes.append(f"{int((~present).sum())} round(s) without root_pmax (null) were not checked")
    Hc = np.maximum(np.where(np.isfinite(H), H, np.nan), 0.0)
    out_range = present & ((pm > 1.0 + 1e-6) | (pm < 1.0 / V - 1e-6))
    e = np.clip(1.0 - pm, 0.0, 1.0)
    ok_e = present & ~out_range
    F = np.full(H.shape, np.nan)
    F[ok_e] = fano_bound(e[ok_e], V)
    excess = Hc - F
    bad = out_range | (ok_e & (excess > tol)) | (present & ~np.isfinite(Hc))
    e_min = np.full(H.shape, np.nan)
    e_min[ok_e] = inverse_fano(np.minimum(Hc[ok_e], np.log(V)), V)
    by = grouping(by)          # None ('none'), or a column the logs lack: one row labelled 'pooled'
    groups = frame[by].astype(str).to_numpy() if by and by in frame.columns else np.full(len(frame), POOLED)
    rows = []
    for g in sorted(set(groups)):
        m = groups == g
        rows.append({"task": g, "rounds": int(m.sum()), "checked": int((m & present).sum()),
                     "violations": int((m & bad).sum()),
                     "max_excess": float(np.nanmax(np.where(m & ok_e, excess, np.nan)))
                     if (m & ok_e).any() else np.nan})
    cols = [c for c in ("task", "prompt_id", "round") if c in frame.columns]
    viol = frame.loc[bad, cols].copy()
    viol["root_entropy"], viol["root_pmax"] = H[bad], pm[bad]
    viol["fano_bound"], viol["e_min"] = F[bad], e_min[bad]
    notes += [f"|V| = {V:g}; a violation is H > h_b(1 - pmax) + (1 - pmax) ln(|V| - 1) + {tol:g} nats, or pmax "
              f"outside [1/|V|, 1]; any violation means root_pmax and root_entropy were not computed from the "
              "same distribution (a logging bug)"]
    return FanoCheck(table=pd.DataFrame(rows, columns=["task", "rounds", "checked", "violations", "max_excess"]),
                     violations=viol.reset_index(drop=True), vocab_size=V, tol=float(tol),
                     note_lines=tuple(notes))
