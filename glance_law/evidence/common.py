"""Shared plumbing of the evidence analyses (offsets, probe, order, transfer, audit, timing).

Private helpers only: input checks that raise :class:`MissingColumnError` naming the
logger flag, the round filters every analysis applies (and counts, so nothing is dropped
silently), the law fit with its prompt-clustered (CR1) covariance, per-cluster sums for
the fast prompt-level bootstrap, and the reading of the prompt files that sit next to the
round logs. No statistics beyond those live here.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from glance_law.data.arms import label_targets
from glance_law.data.schema import SUPPLIED_BY
from glance_law.data.selection import POOLED, grouping, no_draft_causes
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.law import model as _law
from glance_law.stats.cluster import cluster_codes, cluster_sums, clustered_covariance, t_crit

GROUP_ALL = POOLED      # the label of a pooled group (glance_law.data.selection.POOLED)


def as_frame(rounds, notes: list | None = None) -> pd.DataFrame:
    """A rounds DataFrame from a DataFrame or a :class:`glance_law.io.LogSet`; rounds of several
    target models get the arm label ``drafter @ target`` (:func:`glance_law.data.arms.label_targets`),
    so every analysis that keeps drafters apart keeps targets apart too (its notes go to ``notes``)."""
    frame = getattr(rounds, "frame", rounds)
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError("expected a rounds DataFrame or a LogSet from glance_law.read_logs")
    return label_targets(frame, notes)


#: The key columns :func:`with_arm_labels` makes strings (or string categoricals).
KEY_COLUMNS = ("task", "prompt_id", "drafter", "condition", "run_id")


def with_arm_labels(frame: pd.DataFrame, categorical: bool = False) -> pd.DataFrame:
    """A copy with the key columns as strings and the arm labels a log may omit filled in
    (``condition`` = matched, ``drafter`` = unknown), as the round/prompt tables join on them.
    ``categorical``: a categorical key column stays categorical, its categories made strings in
    sorted order (the same values, groups and sort order as strings, without writing one string
    per row; for the analyses that only group and count)."""
    out = frame.copy()
    for c in KEY_COLUMNS:
        if c in out.columns:
            out[c] = _string_categories(out[c]) if categorical else out[c].astype(str)
    if "condition" not in out.columns:
        out["condition"] = "matched"
    if "drafter" not in out.columns:
        out["drafter"] = "unknown"
    return out


def _string_categories(s: pd.Series) -> pd.Series:
    if not isinstance(s.dtype, pd.CategoricalDtype) or s.isna().any():
        return s.astype(str)
    names = [str(x) for x in s.cat.categories]
    if len(set(names)) != len(names):            # two categories read the same as strings: merge them
        return s.astype(str)
    return s.cat.rename_categories(names).cat.reorder_categories(sorted(names))


def require(frame: pd.DataFrame, columns: Iterable[str], analysis: str) -> None:
    """Raise MissingColumnError for the first column the frame lacks (or holds only nulls)."""
    for c in columns:
        if c not in frame.columns or (len(frame) and frame[c].isna().all()):
            raise MissingColumnError(f"the '{c}' column", analysis, SUPPLIED_BY.get(c))


def string_codes(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)`` with ``labels[codes]`` equal to ``s.astype(str)`` row by row; a
    categorical is read from its codes (no string is written per row)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        labels = np.array([str(c) for c in s.cat.categories] + ["nan"], dtype=object)
        codes = s.cat.codes.to_numpy()                  # narrow (int8/int16/...): 1-2 bytes a row
        if codes.size and int(codes.min()) < 0:
            codes = np.where(codes < 0, len(labels) - 1, codes).astype(np.int64)
        elif len(labels) > np.iinfo(codes.dtype).max:   # the "nan" label's code must fit too
            codes = codes.astype(np.int64)
        return codes, labels
    codes, uniq = pd.factorize(s.astype(str).to_numpy(), sort=False, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniq, dtype=object)


def distinct_strings(s: pd.Series) -> set[str]:
    """``set(s.astype(str))`` without writing (or iterating) one string per row."""
    codes, labels = string_codes(s)
    return set(labels[np.unique(codes)].tolist())


def string_mask(s: pd.Series, values: Iterable[str]) -> np.ndarray:
    """``s.astype(str).isin(values)`` as a boolean array, read from the codes of :func:`string_codes`."""
    codes, labels = string_codes(s)
    return np.isin(labels, list(values))[codes]


def speculative_rounds(frame: pd.DataFrame, notes: list[str], conditions: Sequence[str] | None = ("matched",),
                       drafters: Sequence[str] | None = None) -> pd.DataFrame:
    """Rounds that carry a draft (horizon > 0) in the given conditions; every exclusion is noted."""
    n0 = len(frame)
    keep = np.ones(n0, dtype=bool)
    if "horizon" in frame.columns:
        ar = frame["horizon"].to_numpy() <= 0
        if ar.any():
            notes.append(f"{int(ar.sum())} round(s) with horizon 0 (nothing drafted) excluded: "
                         f"{no_draft_causes(frame, ar)}")
        keep &= ~ar
    if conditions is not None and "condition" in frame.columns:
        codes, labels = string_codes(frame["condition"])
        other = keep & ~np.isin(labels, list(conditions))[codes]
        if other.any():
            names = ", ".join(sorted(set(labels[np.unique(codes[other])])))
            notes.append(f"{int(other.sum())} round(s) in condition(s) {names} excluded "
                         f"(this analysis uses {', '.join(conditions)})")
        keep &= ~other
    if drafters is not None and "drafter" in frame.columns:
        codes, labels = string_codes(frame["drafter"])
        other = keep & ~np.isin(labels, list(drafters))[codes]
        if other.any():
            notes.append(f"{int(other.sum())} round(s) of other drafters excluded")
        keep &= ~other
    out = frame.loc[keep]
    return out.reset_index(drop=True) if not keep.all() else out


def arm_columns(frame: pd.DataFrame, by: Sequence[str] | str | None) -> list[str]:
    """Grouping columns: ``by`` (default task), preceded by ``drafter`` when the rows mix
    several drafters - rounds of different decoders are never pooled into one fit. Runs
    (run_id) are not split: shards of one configuration logged separately pool, and a
    probe's matched and mismatched runs pair across run ids."""
    by = by_columns(by)
    lead = []
    if "drafter" in frame.columns and "drafter" not in by and len(distinct_strings(frame["drafter"])) > 1:
        lead.append("drafter")
    for c in by:
        if c not in frame.columns:
            raise GlanceError(f"cannot group by '{c}': the logs have no such column")
    return lead + by


def by_columns(by: Sequence[str] | str | None) -> list[str]:
    """The grouping columns a ``by`` argument names: None -> ["task"] (the default), a string
    -> [it], 'none'/'pooled'/'' -> [] (no grouping: one pooled group per arm)."""
    if by is None:
        return ["task"]
    if isinstance(by, str):
        return [] if grouping(by) is None else [by]
    return list(by)


def pooled_key(key: dict, by: Sequence[str] | str | None) -> dict:
    """A group's key, with ``task`` = :data:`GROUP_ALL` ('pooled', the label of the law's pooled row)
    when ``by`` groups nothing: every pooled row is labelled alike."""
    return {**key, "task": GROUP_ALL} if not by_columns(by) and "task" not in key else key


def group_items(frame: pd.DataFrame, cols: Sequence[str]):
    """Iterate (key_dict, sub_frame) over the groups in sorted order (observed groups only)."""
    if not cols:
        yield {}, frame
        return
    keys = [frame[c].astype(str) for c in cols]
    for key, sub in frame.groupby(keys, sort=True, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        yield dict(zip(cols, key)), sub


def clusters(frame: pd.DataFrame) -> tuple[np.ndarray, int]:
    return cluster_codes(frame)


def law_fit(H, a, L, codes: np.ndarray, G: int, weight=None, cov: str = "cr1"):
    """MLE (b0, b1) of the affine-logit law and its prompt-clustered covariance.

    The point estimate is the exact truncated-geometric MLE of
    :func:`glance_law.law.fit_affine_logit` (the same estimator as ``fit_law(method="mle")``).
    ``cov="cr1"``: the sandwich ``G/(G-1) I^-1 (sum_g u_g u_g^T) I^-1``; ``cov="cr3"``: the
    cluster jackknife of :func:`glance_law.stats.cluster.cr3_covariance` (one Newton step per
    deleted prompt), the law table's default. Returns (b, cov, per-round scores, information).
    """
    b, info, _ = _law.fit_affine_logit(H, a, L, weight=weight)
    scores, info = _law.score_and_information(b, H, a, L, weight)
    if cov == "cr1":
        # G as given (clusters without rows add nothing to the meat but count in G/(G-1))
        V = clustered_covariance(cluster_sums(scores, codes, G), kind="cr1", info=info)
    elif cov == "cr3":
        V = cr3(b, H, a, L, codes, G, scores, info, weight)
    else:
        raise GlanceError(f"unknown covariance {cov!r}; choose cr1 or cr3")
    return b, V, scores, info


def cr3(b, H, a, L, codes, G, scores, info, weight=None) -> np.ndarray:
    """CR3 (cluster-jackknife) covariance of the law's (b0, b1) over the clusters present
    (:func:`glance_law.stats.cluster.clustered_covariance` from the law's per-cluster sums;
    ``scores`` are not needed and kept for the callers' signature)."""
    present = np.unique(codes)
    cl = np.searchsorted(present, codes)
    u, info_g = _law.cluster_score_information(b, H, a, L, cl, present.size, weight)
    return clustered_covariance(u, info_g, "cr3", info=info)


def prompt_table(logs, analysis: str, columns: Sequence[str] | None = None, horizon=None) -> pd.DataFrame:
    """The prompt files among the inputs of a LogSet (they are listed in ``LogSet.other``), with
    a ``target`` column from the files' ``glance.run`` when they all name one target model and
    the rows carry none (:func:`with_run_target`). ``horizon``: the ``--horizon`` the rounds were
    read with (an imported file that needs it is reread with it)."""
    from glance_law.data.io import read_logs  # I/O stays in glance_law.io

    paths = [f.path for f in getattr(logs, "other", ()) if f.kind == "prompts"]
    if not paths:
        raise MissingColumnError("prompt files (kind=prompts)", analysis,
                                 "glance-log, which writes prompts-*.parquet next to the round files; "
                                 "pass them too")
    return with_run_target(read_logs(paths, kind="prompts", columns=columns, horizon=horizon))


def with_run_target(logset) -> pd.DataFrame:
    """The frame of a LogSet; without a ``target`` column, every file's ``glance.run`` naming
    the same one target model gives it (several targets are filled by the reader itself)."""
    from glance_law.data.arms import run_targets
    frame = logset.frame
    if "target" in frame.columns or not len(frame):
        return frame
    names = run_targets([f.run for f in logset.files])
    if len(set(names)) == 1 and names[0] is not None:
        frame = frame.assign(target=pd.Categorical([names[0]] * len(frame)))
    return frame


def proportion_ci(p: float, se: float, n_clusters: int, level: float = 0.95) -> tuple[float, float]:
    """Interval for a proportion estimated with a prompt-clustered (CR1) standard error.

    Inside (0, 1): the Wald interval on the logit scale, ``expit(logit p +- t se / (p(1-p)))``
    with t on G-1 df, which stays inside [0, 1]. At 0 or 1 (no variation, se = 0) the exact
    binomial bound treating each of the G prompts as one trial: ``[0, 1 - (alpha/2)^(1/G)]``
    or ``[(alpha/2)^(1/G), 1]``. NaN with fewer than two prompts.
    """
    from scipy import special as _sp

    G = int(n_clusters)
    if G < 2 or not np.isfinite(p):
        return np.nan, np.nan
    alpha = 1.0 - level
    if p <= 0.0:
        return 0.0, float(1.0 - (alpha / 2) ** (1.0 / G))
    if p >= 1.0:
        return float((alpha / 2) ** (1.0 / G)), 1.0
    if not np.isfinite(se):
        return np.nan, np.nan
    t = t_crit(G, level)
    lg = float(_sp.logit(p))
    half = t * se / (p * (1.0 - p))
    return float(_sp.expit(lg - half)), float(_sp.expit(lg + half))


def cli_by(args) -> list[str]:
    """The grouping of ``python -m glance_law.fit --by``: ``none``/``pooled`` means no grouping."""
    by = grouping(getattr(args, "by", "task"))
    return [] if by is None else [str(by)]


def cli_level(args) -> float:
    return float(getattr(args, "level", 0.95) or 0.95)


def fmt_group(key: dict) -> str:
    return "/".join(str(v) for v in key.values()) or GROUP_ALL
