"""Row keys and duplicate detection over log frames (pure numpy/pandas, no I/O).

A log's rows are identified by a key - (run_id, prompt_id, condition, round) for
rounds, (run_id, prompt_id, condition) for prompts (:data:`glance_law.schema.ROUND_KEY`).
:func:`composite_key` packs a key into one int64 per row; :func:`has_duplicates`
answers "is any key repeated?" in O(n) (a bitmap) when the key space allows;
:func:`duplicate_files` decides which files to blame when keys repeat. :func:`cluster_codes`
numbers the prompt clusters (one per (task, prompt_id)) that every interval resamples by.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["composite_key", "has_duplicates", "duplicate_mask", "duplicate_files", "CLUSTER_BY", "cluster_codes"]

CLUSTER_BY = ("task", "prompt_id")


def cluster_codes(frame: pd.DataFrame, by: Sequence[str] = CLUSTER_BY) -> tuple[np.ndarray, int]:
    """Integer cluster ids 0..G-1 for the rows of ``frame`` (default: one cluster per (task, prompt_id))."""
    by = [b for b in by if b in frame.columns]
    if not by:
        raise ValueError("cannot form prompt clusters: the frame has no prompt_id column")
    if len(by) == 1:
        codes, uniq = pd.factorize(frame[by[0]], sort=True)
        return codes.astype(np.int64), len(uniq)
    # integer codes per column (sorted), combined mixed-radix and relabelled densely in key order:
    # the clusters and their numbering of a sorted MultiIndex factorisation, without building one
    key = np.zeros(len(frame), dtype=np.int64)
    space = 1
    for b in by:
        c, n = _sorted_codes(frame[b])
        if (c.size and int(c.min()) < 0) or space * max(n, 1) >= 2 ** 62:   # missing keys or a vast space
            return _cluster_codes_multiindex(frame, by)
        key *= n
        key += c
        space *= max(n, 1)
    if space <= max(8 * key.size, 1 << 20):      # a bitmap over the key space: O(n)
        present = np.zeros(space, dtype=bool)
        present[key] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        return rank[key], int(rank[-1] + 1) if space else 0
    uniq, codes = np.unique(key, return_inverse=True)
    return codes.astype(np.int64).reshape(-1), len(uniq)


def _sorted_codes(s: pd.Series) -> tuple[np.ndarray, int]:
    """Codes of ``s`` in the order of its sorted values (-1: missing) and their range; a
    categorical's codes are re-ranked by value, not by the order of its categories."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        cats = s.cat.categories
        rank = np.empty(len(cats) + 1, dtype=np.int64)
        rank[:-1][np.asarray(cats.argsort())] = np.arange(len(cats))
        rank[-1] = -1                                   # code -1 (missing) stays -1
        return rank[s.cat.codes.to_numpy()], len(cats)
    c, uniq = pd.factorize(s, sort=True)
    return c, len(uniq)


def _cluster_codes_multiindex(frame: pd.DataFrame, by: Sequence[str]) -> tuple[np.ndarray, int]:
    codes, uniq = pd.MultiIndex.from_arrays([frame[b] for b in by]).factorize(sort=True)
    return np.asarray(codes, dtype=np.int64), len(uniq)


def _codes(s: pd.Series) -> tuple[np.ndarray, int, int]:
    """(codes, offset, range): ``codes + offset`` are dense non-negative integers below
    ``range``, equal iff the values are equal (missing values get a code of their own).
    Codes stay in their narrow dtype; nothing is copied for categoricals and integers."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        c = s.cat.codes.to_numpy()
        has_na = c.size and int(c.min()) < 0
        return c, (1 if has_na else 0), len(s.cat.categories) + (1 if has_na else 0)
    v = s.to_numpy()
    if v.dtype.kind in "iu" and v.size:
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < 2 ** 40:
            return (v.astype(np.int64) if v.dtype == np.uint64 else v), -lo, hi - lo + 1
    c, u = pd.factorize(s, sort=False, use_na_sentinel=False)
    return c, 0, max(len(u), 1)


def composite_key(frame: pd.DataFrame, key: Sequence[str]) -> np.ndarray:
    """One int64 per row, equal iff the rows agree on every column of ``key``
    (mixed radix over the columns' codes; compacted when the space would overflow)."""
    out = np.zeros(len(frame), dtype=np.int64)
    space = 1
    for k in key:
        c, off, n = _codes(frame[k])
        if n <= 1:
            continue  # a constant column does not split keys
        if space * n >= 2 ** 62:  # compact what we have so far, then continue
            _, out = np.unique(out, return_inverse=True)
            out = out.astype(np.int64).reshape(-1)
            space = int(out.max()) + 1 if out.size else 1
        out *= n
        out += c
        if off:
            out += off
        space *= n
    return out


def has_duplicates(k: np.ndarray) -> bool:
    """Whether any value repeats: a bitmap when the key space is small (O(n)), else a sort."""
    n = k.size
    if n < 2:
        return False
    top = int(k.max()) + 1
    if top <= max(8 * n, 1 << 20):
        seen = np.zeros(top, dtype=bool)
        seen[k] = True
        return int(np.count_nonzero(seen)) != n
    s = np.sort(k)
    return bool((s[1:] == s[:-1]).any())


def duplicate_mask(frame: pd.DataFrame, key: Sequence[str]) -> np.ndarray:
    """True for every row whose key occurs more than once."""
    k = composite_key(frame, key)
    order = np.argsort(k, kind="stable")
    ks = k[order]
    same = ks[1:] == ks[:-1]
    dup_sorted = np.zeros(len(k), dtype=bool)
    dup_sorted[1:] |= same
    dup_sorted[:-1] |= same
    out = np.empty(len(k), dtype=bool)
    out[order] = dup_sorted
    return out


def duplicate_files(k: np.ndarray, file_idx: np.ndarray) -> dict[int, tuple[int, int, int]]:
    """Bad files and why: ``{file: (n_rows, example_row, other_file or -1 for within-file)}``.

    A file that repeats one of its own keys is bad. Among the rest, files are taken
    in input order and a file that repeats a key of an earlier kept file is bad.
    """
    order = np.lexsort((file_idx, k))
    ks, fs = k[order], file_idx[order]
    same = np.zeros(order.size, dtype=bool)
    same[1:] = ks[1:] == ks[:-1]
    bad: dict[int, tuple[int, int, int]] = {}
    within = same.copy()
    within[1:] &= fs[1:] == fs[:-1]
    for f in np.unique(fs[within]):
        rows = within & (fs == f)
        bad[int(f)] = (int(rows.sum()), int(order[np.flatnonzero(rows)[0]]), -1)
    alive = ~np.isin(fs, list(bad)) if bad else np.ones(order.size, dtype=bool)
    while True:
        o, ksa, fsa = order[alive], ks[alive], fs[alive]
        if o.size < 2:
            break
        rep = np.zeros(o.size, dtype=bool)
        rep[1:] = ksa[1:] == ksa[:-1]
        if not rep.any():
            break
        # owner of each row's key: the first (lowest-index) file holding it
        start = np.maximum.accumulate(np.where(~rep, np.arange(o.size), 0))
        owner = fsa[start]
        offenders = set(np.unique(fsa[rep]).tolist())
        clean_owner = rep & ~np.isin(owner, list(offenders))
        now = np.unique(fsa[clean_owner])
        for f in now:
            rows = clean_owner & (fsa == f)
            i = np.flatnonzero(rows)[0]
            bad[int(f)] = (int(rows.sum()), int(o[i]), int(owner[i]))
        alive &= ~np.isin(fs, now)
    return bad
