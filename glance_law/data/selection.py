"""Selecting and validating the rounds a law fit uses (pure pandas/numpy, no I/O).

:func:`prepare` turns a rounds frame into the arrays :func:`glance_law.law.fit_law`
fits: it checks the law's columns (finite non-negative entropy, integer
``0 <= accepted <= horizon``), excludes autoregressive rounds (``horizon == 0``)
and rounds of other conditions - counting every exclusion in the notes - and
codes drafters, groups and prompt clusters as integers. Drafters are always kept
apart (the caller fits each separately).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from glance_law.errors import GlanceError, MissingColumnError

from .keys import cluster_codes

__all__ = ["LAW_INPUT", "POOLED", "NO_GROUPING", "grouping", "as_frame", "codes_of", "compact", "compact_counts", "cluster_ids", "prepare", "no_draft_causes",
           "output_ending", "with_drafted_horizons", "DRAFTED_NOTE", "no_draft_rounds", "tokens_per_round",
           "TOKENS_PER_ROUND_NOTE", "ROUND_ORDER", "unordered_rounds", "require_order"]

POOLED = "pooled"
#: ``--by`` values that mean "no grouping": every section prints its pooled row(s) only, labelled POOLED.
NO_GROUPING = ("none", POOLED, "")


def grouping(by):
    """The grouping a ``--by`` value (or a ``by=`` argument) names: None for no grouping (None,
    'none', 'pooled' or '': the pooled row only, labelled :data:`POOLED`), else ``by`` itself."""
    if by is None or (isinstance(by, str) and by.strip().lower() in NO_GROUPING):
        return None
    return by


LAW_INPUT = ("root_entropy", "accepted", "horizon")


def as_frame(rounds, notes: list | None = None):
    """(frame, skipped) of a rounds DataFrame or LogSet, with the arm labels of
    :func:`glance_law.data.arms.label_targets` (its notes go to ``notes``)."""
    from .arms import label_targets
    from .io import LogSet  # type only; no I/O happens here
    if isinstance(rounds, LogSet):
        if rounds.kind != "rounds":
            raise GlanceError(f"the law needs round logs, got a LogSet of kind {rounds.kind!r}")
        return label_targets(rounds.frame, notes), tuple(rounds.skipped)
    if isinstance(rounds, pd.DataFrame):
        return label_targets(rounds, notes), ()   # several target models: arm = drafter @ target (data.arms)
    raise GlanceError("the law expects a rounds DataFrame or a LogSet from glance_law.read_logs")


def codes_of(series: pd.Series, names: bool = True) -> tuple[np.ndarray, list[str] | int]:
    """Integer codes of a column and its distinct values as strings (or, with ``names=False``,
    just how many there are: cheaper for the many prompt ids)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy().astype(np.int64)
        uniq = series.cat.categories
    else:
        codes, uniq = pd.factorize(series, sort=True)
        codes = codes.astype(np.int64)
    if codes.size and codes.min() < 0:
        raise GlanceError(f"column '{series.name}': {int((codes < 0).sum())} missing value(s); every round needs one")
    return codes, ([str(u) for u in uniq] if names else len(uniq))


def _cat_codes(series: pd.Series) -> tuple[np.ndarray, pd.Index] | None:
    """The codes of a categorical column in their own small integer type (no int64 copy), or None."""
    if not isinstance(series.dtype, pd.CategoricalDtype):
        return None
    codes = series.cat.codes.to_numpy()
    if codes.size and codes.min() < 0:
        raise GlanceError(f"column '{series.name}': {int((codes < 0).sum())} missing value(s); every round needs one")
    return codes, series.cat.categories


def compact(codes: np.ndarray) -> tuple[np.ndarray, int]:
    """Relabel integer ids to 0..G-1 (G = distinct ids present)."""
    out, G, _ = compact_counts(codes)
    return out, G


def compact_counts(codes: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """:func:`compact` and the number of rows of each id (0..G-1)."""
    if codes.size == 0:
        return codes, 0, np.zeros(0, dtype=np.int64)
    lo, m = int(codes.min()), int(codes.max()) + 1
    if m - lo <= 4 * codes.size + 1024:
        shifted = codes - lo if lo else codes
        counts = np.bincount(shifted, minlength=m - lo)
        present = counts > 0
        if present.all():  # already lo..lo+G-1 with every id present: no relabelling
            return shifted, m - lo, counts
        return (np.cumsum(present) - 1)[shifted], int(present.sum()), counts[present]
    uniq, inv, counts = np.unique(codes, return_inverse=True, return_counts=True)
    return inv.astype(np.int64), int(uniq.size), counts


def cluster_ids(frame: pd.DataFrame, cluster: Sequence[str]) -> np.ndarray:
    cols = [c for c in cluster if c in frame.columns]
    if "prompt_id" in cluster and "prompt_id" not in cols:
        raise MissingColumnError("column 'prompt_id'", "the draftability law (prompt-clustered intervals)")
    if not cols:
        raise MissingColumnError(f"cluster column(s) {', '.join(cluster)}", "the draftability law")
    out, size = None, 1
    for c in cols:  # mixed radix in place: categorical codes stay in their small type until added
        cat = _cat_codes(frame[c])
        k, m = (cat[0], len(cat[1])) if cat is not None else codes_of(frame[c], names=False)
        size *= max(m, 1)
        if size >= 2 ** 62:
            return cluster_codes(frame, cols)[0]
        if out is None:
            out = k.astype(np.int64)
        else:
            out *= max(m, 1)
            out += k
    return out


def no_draft_causes(frame: pd.DataFrame, mask: np.ndarray) -> str:
    """Rounds with ``horizon == 0`` (``mask``) counted by cause: those of a run (run_id and
    drafter) whose every round has horizon 0 are autoregressive decoding (e.g. drafter ``ar``);
    the others are rounds in which a drafting run proposed nothing (e.g. prompt lookup finding
    no match); a round whose ``drafted_horizon`` is above 0 was drafted: an output-ending round that
    accepted 0, its horizon cut to its accepted run. Returns e.g. ``"1939 autoregressive round(s)
    (drafter ar), 929 round(s) in which drafter pld proposed no draft, 12 output-ending round(s) of
    drafter eagle that accepted 0 (drafted, horizon cut to 0)"``."""
    n = int(mask.sum())
    keys = [c for c in ("run_id", "drafter") if c in frame.columns]
    if not keys:
        return f"{n} autoregressive round(s)"
    run = frame[keys[0]].astype(str).to_numpy()
    if len(keys) == 2:
        run = run + "\0" + frame["drafter"].astype(str).to_numpy()
    drafting = np.isin(run, np.unique(run[~mask]))
    d = frame["drafter"].astype(str).to_numpy() if "drafter" in frame.columns else np.full(len(frame), "unknown")
    ended = np.zeros(len(frame), dtype=bool)
    if "drafted_horizon" in frame.columns:          # drafted, then cut to the 0 tokens it accepted
        ended = mask & (pd.to_numeric(frame["drafted_horizon"], errors="coerce").fillna(0).to_numpy() > 0)
        mask = mask & ~ended
        drafting |= np.isin(run, np.unique(run[ended]))
    parts = []
    for name in np.unique(d[mask & ~drafting]):
        parts.append(f"{int(np.count_nonzero(mask & ~drafting & (d == name)))} autoregressive round(s) "
                     f"(drafter {name})")
    for name in np.unique(d[mask & drafting]):
        parts.append(f"{int(np.count_nonzero(mask & drafting & (d == name)))} round(s) in which drafter {name} "
                     "proposed no draft")
    for name in np.unique(d[ended]):
        parts.append(f"{int(np.count_nonzero(ended & (d == name)))} output-ending round(s) of drafter {name} that "
                     "accepted 0 (drafted, horizon cut to 0)")
    return ", ".join(parts)


#: How the tables that show ``tau`` name it and ``tokens_per_round`` (for an analysis's notes).
TOKENS_PER_ROUND_NOTE = ("tau = mean accepted + 1 over the drafted rounds (horizon > 0), the rounds the statistics "
                         "read; tokens_per_round = mean accepted + 1 over every round, the rounds in which nothing "
                         "was drafted (horizon 0: one token each) included - the tokens a verify pass commits, what "
                         "speed depends on (no_draft_rounds counts those rounds)")


#: The column that says whether a prompt's rounds are in decoding order (docs/schema.md): null or
#: absent reads as ``known``; ``unknown``: one prompt's rounds rebuilt from a histogram; ``pooled``:
#: rounds rebuilt from server counters (pseudo-prompts: neither the order nor the prompt is known).
ROUND_ORDER = "round_order"
_UNORDERED = {"unknown": "rebuilt from per-request acceptance histograms",
              "pooled": "rebuilt from server counters, pseudo-prompts with no real prompt behind them"}


def unordered_rounds(frame: pd.DataFrame, kinds=("unknown", "pooled")) -> np.ndarray:
    """Mask of the rounds whose ``round_order`` is one of ``kinds`` (all False without the column)."""
    if ROUND_ORDER not in getattr(frame, "columns", ()) or not len(frame):
        return np.zeros(len(frame), dtype=bool)
    return frame[ROUND_ORDER].astype(object).isin(list(kinds)).to_numpy()


def require_order(frame: pd.DataFrame, needs: str, instead: str, kinds=("unknown", "pooled")) -> None:
    """Raise :class:`GlanceError` (one line) when any round of ``frame`` has a ``round_order`` in
    ``kinds``. ``needs``: what the analysis needs that those rows do not record ("the policy
    replay needs the order of rounds within each prompt"). The line names the runs (the files
    they were imported from) and drafters, and ends with ``instead``: what can be run on them."""
    bad = unordered_rounds(frame, kinds)
    if not bad.any():
        return
    sub = frame.loc[bad]
    runs = sorted({str(x) for x in sub["run_id"]}) if "run_id" in sub.columns else []
    drafters = sorted({str(x) for x in sub["drafter"]}) if "drafter" in sub.columns else []
    why = "; ".join(f"{k}: {_UNORDERED[k]}" for k in _UNORDERED if (sub[ROUND_ORDER].astype(object) == k).any())
    arm = (f"run {', '.join(runs[:4])}" + (f" (+{len(runs) - 4} more)" if len(runs) > 4 else "")
           + (f", drafter {', '.join(drafters)}" if drafters else ""))
    raise GlanceError(f"{needs}, which {int(bad.sum())} round(s) of {arm} do not record (round_order {why}); "
                      f"{instead}")


def no_draft_rounds(frame: pd.DataFrame, by: str | None, conditions=("matched",),
                    weight: str | None = None) -> dict:
    """Rounds in which nothing was drafted (``horizon == 0``) per (drafter, group) and per
    (drafter, :data:`POOLED`), in ``conditions`` (None: every condition), weighted by ``weight``
    where given: what the drafted-round statistics (tau) leave out and :func:`tokens_per_round`
    adds back. Groups are the values of ``by`` as strings; {} when there are none."""
    if "horizon" not in frame.columns or not len(frame):
        return {}
    mask = pd.to_numeric(frame["horizon"], errors="coerce").to_numpy() == 0
    if conditions is not None and "condition" in frame.columns and mask.any():
        mask &= frame["condition"].astype(str).isin([str(c) for c in conditions]).to_numpy()
    if not mask.any():
        return {}
    sub = frame.loc[mask]
    w = pd.Series(sub[weight].to_numpy(dtype=np.float64) if weight else np.ones(len(sub)))
    d = sub["drafter"].astype(str).to_numpy() if "drafter" in sub.columns else np.full(len(sub), "unknown")
    out = {(name, POOLED): float(v) for name, v in w.groupby(d).sum().items()}
    if by and by in sub.columns:
        g = sub[by].astype(str).to_numpy()
        out.update({(dn, gn): float(v) for (dn, gn), v in w.groupby([d, g]).sum().items()})
    return out


def tokens_per_round(tau, rounds, no_draft):
    """Mean tokens committed per round over every round: ``rounds`` drafted rounds commit ``tau``
    on average (accepted + 1), each of the ``no_draft`` rounds without a draft one token."""
    rounds = np.asarray(rounds, dtype=np.float64)
    no_draft = np.asarray(no_draft, dtype=np.float64)
    total = rounds + no_draft
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (np.asarray(tau, dtype=np.float64) * rounds + no_draft) / total, np.nan)


#: What :func:`with_drafted_horizons` did, for an analysis's notes (``{n}``: the rounds restored).
DRAFTED_NOTE = ("{n} output-ending round(s) read at their drafted horizon (drafted_horizon), not the horizon cut to "
                "their accepted run: every verification round counts (a last round that accepted 0 too), and one "
                "counts as a full draft only if it reached the drafted depth")


def with_drafted_horizons(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """``frame`` with each round's ``horizon`` set back to the depth the drafter drafted, where an
    importer cut it to the accepted run at the end of an output and kept the drafted depth in
    ``drafted_horizon`` (docs/your-logs.md); and the mask of the rounds so restored.

    For statistics of the verification rounds as they happened (tau, P(a = L), replays of the
    drafted depths), not for the run-length likelihoods, which read a cut round as a run known to
    reach at least ``accepted``. Without a ``drafted_horizon`` column (or nothing to restore) the
    frame is returned as it is."""
    none = np.zeros(len(frame), dtype=bool)
    if "drafted_horizon" not in frame.columns or not len(frame):
        return frame, none
    dh = pd.to_numeric(frame["drafted_horizon"], errors="coerce")
    # only a horizon cut below the drafted depth; a GLANCE round extended past its block keeps its
    # horizon = accepted > drafted_horizon (a run of at least that length)
    cut = (dh.notna() & (dh > pd.to_numeric(frame["horizon"], errors="coerce"))).to_numpy()
    if not cut.any():
        return frame, none
    return frame.assign(horizon=frame["horizon"].where(~cut, dh)), cut


def output_ending(frame: pd.DataFrame) -> np.ndarray | None:
    """Rounds whose accepted run ends the output: the last round of its prompt (per run,
    drafter, condition, task, prompt_id) with ``accepted == horizon > 0`` and the horizon
    shorter than the prompt's deepest one - the logger records such a round with the horizon
    cut to the accepted length (docs/theory-law.md, section 1).
    None when the frame has no ``round`` or ``prompt_id`` column (they cannot be told apart)."""
    if "round" not in frame.columns or "prompt_id" not in frame.columns or len(frame) == 0:
        return None
    a, L = frame["accepted"].to_numpy(), frame["horizon"].to_numpy()
    # cut: shorter than the prompt's deepest horizon (a full run of the nominal horizon reads the same
    # whether or not the output ended there, so it is left in); so never at the log's deepest horizon.
    # The candidates are tested against their prompt's last round and deepest horizon one by one
    # (no round-sized gathers: this runs on 10^7 rounds)
    out = (a == L) & (L > 0)
    out &= L < L.max()
    idx = np.flatnonzero(out)
    if idx.size == 0:
        return out
    keys = [c for c in ("run_id", "drafter", "condition", "task", "prompt_id") if c in frame.columns]
    k, K = compact(cluster_ids(frame, keys))
    rnd = frame["round"].to_numpy()
    if rnd.dtype.kind not in "iu":
        rnd = rnd.astype(np.int64)
    last = np.full(K, np.iinfo(rnd.dtype).min, dtype=rnd.dtype)
    np.maximum.at(last, k, rnd)
    deepest = np.zeros(K, dtype=L.dtype)
    np.maximum.at(deepest, k, L)
    kc = k[idx]
    del k
    out[idx] = (last[kc] == rnd[idx]) & (L[idx] < deepest[kc])
    return out


def prepare(frame: pd.DataFrame, by, condition, weight, cluster, notes: list, *, native: bool = False) -> dict:
    """The arrays a law fit reads (see the module doc). ``H``, ``a``, ``L`` are float64 unless
    ``native=True``: then they keep the log's own types where those are exact (float32 entropies,
    small integer counts), for a caller that converts them once, after its own gathers."""
    need = list(LAW_INPUT) + ([by] if by else []) + ([weight] if weight else [])
    for c in need:
        if c not in frame.columns:
            raise MissingColumnError(f"column '{c}'", "the draftability law",
                                     "glance-log (a required column of the round-log contract)")
    if len(frame) == 0:
        raise GlanceError("no rounds to fit: the input is empty")
    H, a, L = (_numbers(frame[c]) for c in LAW_INPUT)
    if H.dtype not in (np.float32, np.float64):
        H = H.astype(np.float64)
    if not np.all(np.isfinite(H)):
        raise GlanceError(f"column 'root_entropy': {int((~np.isfinite(H)).sum())} NaN or inf value(s); "
                          "entropy must come from finite fp32 logits (drop or fix those rounds)")
    h_min = float(H.min())
    if h_min < -1e-4:
        raise GlanceError("column 'root_entropy': negative values; entropy is in nats and cannot be negative")
    if L.dtype.kind in "iu":  # integers: finite and whole by type
        if L.min() < 0:
            raise GlanceError("column 'horizon': values must be non-negative integers")
    else:
        L = L.astype(np.float64)
        if not (np.all(np.isfinite(L)) and np.all(L >= 0) and np.all(L == np.round(L))):
            raise GlanceError("column 'horizon': values must be non-negative integers")
    if a.dtype.kind in "iu":
        bad = (a < 0) | (a > L)
    else:
        a = a.astype(np.float64)
        bad = ~np.isfinite(a) | (a < 0) | (a > L) | (a != np.round(a))
    if bad.any():
        raise GlanceError(f"column 'accepted': {int(bad.sum())} value(s) are not integers in 0..horizon "
                          "(accepted counts draft tokens, bonus excluded)")
    del bad
    if h_min < 0:  # float32 round-off can leave -1e-7 for a zero entropy (copy: never touch the input)
        H = np.maximum(H, H.dtype.type(0.0))
    w = None
    if weight:
        w = frame[weight].to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise GlanceError(f"column '{weight}': weights must be finite and non-negative")
    keep = np.ones(len(frame), dtype=bool)
    ar = L == 0
    no_draft = {}
    if ar.any():
        conds = None if condition is None else ([condition] if isinstance(condition, str) else list(condition))
        no_draft = no_draft_rounds(frame, by, conds, weight)
        keep &= ~ar
        causes = no_draft_causes(frame, ar)
        if "accepted 0 (drafted" in causes:
            notes.append(f"excluded {int(ar.sum())} round(s) with horizon == 0 (the law describes drafted rounds; an "
                         "output-ending round cut to the 0 tokens it accepted is a run known to reach at least 0, "
                         f"which carries no information): {causes}")
        elif "proposed no draft" in causes:
            notes.append(f"excluded {int(ar.sum())} round(s) with horizon == 0 (nothing drafted; the law describes "
                         f"drafted rounds): {causes}")
        else:
            notes.append(f"excluded {causes.replace(' (drafter', ' (horizon == 0, drafter')}: "
                         "the law describes drafted rounds")
    del ar
    if "condition" in frame.columns:
        cond = frame["condition"]
        cat = isinstance(cond.dtype, pd.CategoricalDtype)
        ccodes = cond.cat.codes.to_numpy() if cat else None
        if cat and len(cond.cat.categories) == 1 and ccodes.min() >= 0:  # one condition, no missing value
            present = [str(cond.cat.categories[0])]
        else:
            present = sorted({str(c) for c in pd.unique(cond)})
        if condition is not None:
            allowed = {condition} if isinstance(condition, str) else {str(c) for c in condition}
            if not cat:
                ok = cond.astype(str).isin(allowed).to_numpy()
            else:
                take = np.array([str(c) in allowed for c in cond.cat.categories] + [False])  # code -1: missing
                ok = None if take[:-1].all() and ccodes.min() >= 0 else take[ccodes]
            drop = keep & ~ok if ok is not None else np.zeros(1, dtype=bool)
            if drop.any():
                counts = pd.Series(np.asarray(cond)[drop]).astype(str).value_counts().sort_index()
                what = ", ".join(f"{n} '{c}'" for c, n in counts.items())
                notes.append(f"excluded {int(drop.sum())} round(s) of other conditions ({what}); the law is "
                             f"fitted on condition {', '.join(sorted(allowed))} (condition=None pools them)")
            if ok is not None:
                keep &= ok
        elif len(present) > 1:
            notes.append(f"conditions pooled in one fit: {', '.join(present)}")
    if not keep.any():
        raise GlanceError("no rounds left to fit after the exclusions above: " + "; ".join(notes))
    every = bool(keep.all())
    sub = frame if every else frame.loc[keep]
    if "drafter" in frame.columns:
        dcodes, dnames = _small_codes(sub["drafter"])
    else:
        dcodes, dnames = np.zeros(len(sub), dtype=np.int32), ["unknown"]
    if by:
        gcodes, gnames = _small_codes(sub[by])
        if POOLED in gnames:
            raise GlanceError(f"column '{by}': a group is named '{POOLED}', which labels the pooled row; rename it")
    else:
        gcodes, gnames = np.zeros(len(sub), dtype=np.int32), []
    ends = output_ending(frame)
    if ends is not None and not every:
        ends = ends[keep]
    if ends is not None and not ends.any():
        ends = None
    if not every:
        H, a, L, w = H[keep], a[keep], L[keep], None if w is None else w[keep]
    if not native:
        H, a, L = (np.asarray(x, dtype=np.float64) for x in (H, a, L))
    return {"H": H, "a": a, "L": L, "w": w, "cl": cluster_ids(sub, cluster), "d": dcodes,
            "dnames": dnames, "g": gcodes, "gnames": gnames, "ends": ends, "no_draft": no_draft}


def _numbers(series: pd.Series) -> np.ndarray:
    """A numeric column as numpy in its own type (float64 for anything but numpy ints and floats)."""
    x = series.to_numpy()
    return x if x.dtype.kind in "iuf" else series.to_numpy(dtype=np.float64)


def _small_codes(series: pd.Series) -> tuple[np.ndarray, list[str]]:
    """:func:`codes_of` as int32 (without its int64 copy for a categorical column)."""
    cat = _cat_codes(series)
    if cat is None:
        codes, names = codes_of(series)
        return codes.astype(np.int32), names
    codes, uniq = cat
    return codes.astype(np.int32), [str(u) for u in uniq]
