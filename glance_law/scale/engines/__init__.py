"""Engines that reduce round logs to the law's sufficient statistics (:mod:`glance_law.reduce`).

``reduce_logs(paths, engine="arrow")`` is the entry point. It sorts the inputs by
``glance.kind`` (rounds files are reduced, ``reduced`` files merged in, other kinds
ignored), checks every rounds file's metadata, required columns and column types
from its footer (as :func:`glance_law.io.read_logs` does), runs the engine, and
returns a :class:`glance_law.reduce.Reduced`:

* ``arrow`` (:mod:`.arrow`): streaming pyarrow, one record batch at a time, files
  in parallel threads; memory is bounded by the batch size and the number of cells.
  The embedded default.
* ``duckdb`` (:mod:`.duck`): the same reduction as DuckDB SQL over ``read_parquet``.
* ``spark`` (:mod:`.spark`): the same reduction as Spark SQL (PySpark, an optional
  dependency: ``pip install glance-law[spark]``).

Every engine applies the reader's value checks to the columns it reads (non-null
keys, finite non-negative entropy, 0 <= accepted <= horizon, round >= 0), the law's
exclusions (horizon == 0, other conditions; counted), and the reader's duplicate-key
rule: a (run_id, prompt_id, condition, round) may occur once among all files, the
later file in input order is blamed. Engines find candidate duplicates cheaply
(increasing runs of rounds per prompt whose ranges overlap, or per-file round
ranges that are not dense) and confirm them exactly. A bad file stops the
reduction with one line naming it (or, with ``skip_bad``, is left out and listed).
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from glance_law.data import schema as S
from glance_law.errors import GlanceError
from glance_law.scale.reduce import (
    DEFAULT_BUCKETS,
    Grid,
    Reduced,
    check_buckets,
    merge,
    normalize_cells,
    normalize_condition,
    read_reduced,
)

__all__ = ["ENGINES", "Source", "BadFiles", "scan", "reduce_logs", "READ_COLUMNS", "suspect_streams", "blame"]

ENGINES = ("arrow", "duckdb", "spark")
#: Round columns a reduction reads (condition and drafter when present).
READ_COLUMNS = ("run_id", "task", "prompt_id", "condition", "drafter", "round", "root_entropy", "accepted", "horizon")
KEY_FIX = ("each (run_id, prompt_id, condition, round) may occur once; remove the repeated part file, or give "
           "separate runs distinct run_id values")


@dataclass(frozen=True)
class Source:
    """One input file: its path, kind, rows, the columns it has and its glance.run document."""

    path: str
    kind: str
    rows: int
    columns: tuple[str, ...] = ()
    run: Mapping = field(default_factory=dict)


class BadFiles(GlanceError):
    """Files an engine refuses: ``files`` is a list of (path, one-line message)."""

    def __init__(self, files: Sequence[tuple[str, str]]):
        self.files = [(str(p), str(m)) for p, m in files]
        super().__init__(self.files[0][1] if self.files else "bad files")


def _check_rounds_file(path, md) -> tuple[str, ...]:
    from glance_law.data.io import LogError
    schema = md.schema.to_arrow_schema()
    names = tuple(schema.names)
    missing = [n for n in S.required_names(S.KIND_ROUNDS) if n not in names]
    if missing:
        raise LogError(path, "required column is missing",
                       f"the rounds contract requires {', '.join(S.required_names(S.KIND_ROUNDS))} "
                       "(see docs/schema.md); re-log with glance-log or add the column", column=missing[0])
    if md.num_rows == 0:
        raise LogError(path, "the file has no rows", "delete the empty file or rerun the logger")
    for name in READ_COLUMNS:
        if name in names:
            p = S.check_type(S.KIND_ROUNDS, name, schema.field(name).type)
            if p is not None:
                raise LogError(path, p.problem, p.fix, p.column)
    return names


def scan(paths, skip_bad: bool = False) -> tuple[list[Source], list[Source], list[Source], list[tuple[str, str]]]:
    """(rounds files, reduced files, files of other kinds, skipped (path, reason)) among ``paths``.

    Reads footers only. A bad rounds file raises :class:`glance_law.io.LogError`
    unless ``skip_bad``."""
    from glance_law.data.io import LogError, _file_meta, expand_paths
    rounds, reduced, other, skipped = [], [], [], []
    for path in expand_paths(paths):
        try:
            md, kind, run = _file_meta(path)
            names: tuple[str, ...] = tuple(md.schema.to_arrow_schema().names)
            if kind == S.KIND_ROUNDS:
                names = _check_rounds_file(path, md)
        except LogError as exc:
            exc = exc if exc.path is not None else exc.at(path)
            if not skip_bad:
                raise exc from None
            skipped.append((str(path), str(exc)))
            continue
        src = Source(str(path), kind, int(md.num_rows), names, run)
        (rounds if kind == S.KIND_ROUNDS else reduced if kind == S.KIND_REDUCED else other).append(src)
    if not rounds and not reduced:
        from glance_law.data.io import LogError as _LE
        kinds = sorted({s.kind for s in other})
        found = f" (found only {', '.join(kinds)} files)" if kinds else ""
        if skipped and not other:
            raise _LE(None, f"every file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                      "fix the files or point at other logs")
        raise _LE(", ".join(str(p) for p in list(expand_paths(paths))[:3]), f"no rounds or reduced files among the "
                  f"inputs{found}", "pass the rounds-*.parquet parts that glance-log writes")
    return rounds, reduced, other, skipped


def _engine(name: str):
    if name == "arrow":
        from . import arrow as mod
    elif name == "duckdb":
        from . import duck as mod
    elif name == "spark":
        from . import spark as mod
    else:
        raise GlanceError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    return mod


def reduce_logs(paths, engine: str = "arrow", *, buckets: int = DEFAULT_BUCKETS, grid: Grid | None = None,
                condition="matched", skip_bad: bool = False, check_keys: bool = True, **engine_options) -> Reduced:
    """Reduce the round logs among ``paths`` (files, folders, globs) with ``engine`` and merge any
    reduced files among them. ``condition``: the conditions kept (None pools all).
    ``engine_options`` go to the engine (arrow: ``batch_rows``, ``workers``; duckdb: ``threads``,
    ``memory_limit``, ``temp_directory``; spark: ``spark`` (a SparkSession), ``master``)."""
    from glance_law.data.io import LogError
    grid = grid if grid is not None else Grid()
    B = check_buckets(buckets)
    cond = normalize_condition(condition)
    mod = _engine(engine)
    rounds, reduced, _, skipped = scan(paths, skip_bad)
    parts: list[Reduced] = []
    if rounds:
        while True:
            try:
                cells, info = mod.reduce(rounds, grid=grid, buckets=B, condition=cond, check_keys=check_keys,
                                         skip_bad=skip_bad, **engine_options)
                break
            except BadFiles as exc:
                if not skip_bad:
                    path, msg = exc.files[0]
                    raise LogError(None, msg) from None
                bad = {p for p, _ in exc.files}
                skipped += exc.files
                rounds = [s for s in rounds if s.path not in bad]
                if not rounds:
                    raise LogError(None, f"every rounds file was bad ({len(skipped)} skipped); first: "
                                         f"{skipped[0][1]}", "fix the files or point at other logs") from None
        bad_here = [tuple(b) for b in info.pop("bad_files", [])]
        skipped += bad_here
        if info.get("rounds_read", 0) == 0 and not reduced:
            raise LogError(None, f"every rounds file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                           "fix the files or point at other logs")
        info = {"condition": cond, **info, "skipped": [list(s) for s in skipped],
                "sources": [{"engine": engine, "files": len(rounds) - len(bad_here),
                             "rounds_read": int(info.get("rounds_read", 0))}]}
        if info["rounds_read"]:
            parts.append(Reduced(normalize_cells(cells), grid, B, info))
    if reduced:
        red = read_reduced([s.path for s in reduced], skip_bad=skip_bad)
        if not rounds and red.condition != cond:
            have = "all conditions pooled" if red.condition is None else ", ".join(red.condition)
            want = "all" if cond is None else ",".join(cond)
            raise GlanceError(f"the reduced inputs hold {have}, not {want.replace(',', ', ')}; pass --condition "
                              f"{'all' if red.condition is None else ','.join(red.condition)} to use them, or "
                              f"reduce the logs again with --condition {want}")
        parts.append(red)
        if not rounds and skipped:
            parts[-1] = Reduced(red.cells, red.grid, red.buckets,
                                {**red.info, "skipped": list(red.info.get("skipped", [])) + [list(s) for s in skipped]})
    return merge(parts)


# --------------------------------------------------------------------------
# duplicate keys: cheap candidates, exact confirmation, blame
# --------------------------------------------------------------------------

def suspect_streams(stream: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Streams (values of ``stream``) some of whose round ranges [lo, hi] overlap.

    Each row is a run of strictly increasing rounds of one stream (run_id, prompt_id,
    condition), so two runs share a round only if their ranges overlap: no overlap
    means no duplicate, an overlap is a candidate to confirm exactly.
    """
    if stream.size < 2:
        return stream[:0]
    order = np.lexsort((hi, lo, stream))
    s, l, h = stream[order], lo[order].astype(np.int64), hi[order].astype(np.int64)
    new = np.r_[True, s[1:] != s[:-1]]
    g = np.cumsum(new) - 1
    h0 = int(h.min())
    span = int(h.max()) - h0 + 1
    run_max = np.maximum.accumulate(g * span + (h - h0)) - g * span + h0   # running max of hi within a stream
    overlap = np.zeros(s.size, dtype=bool)
    overlap[1:] = ~new[1:] & (l[1:] <= run_max[:-1])
    return np.unique(s[overlap])


def blame(rows: pd.DataFrame, sources: Sequence[Source]) -> list[tuple[str, str]]:
    """(path, message) of each bad file, given every occurrence of the duplicated keys.

    ``rows``: columns file (index into ``sources``), run_id, prompt_id, condition, round.
    As the reader: a file repeating its own key is bad; then, in input order, a file
    repeating a key of an earlier good file is bad.
    """
    from glance_law.data.io import LogError
    from glance_law.data.keys import composite_key, duplicate_files
    if rows.empty:
        return []
    rows = rows.sort_values(["file", "run_id", "prompt_id", "condition", "round"], kind="stable").reset_index(drop=True)
    k = composite_key(rows, S.ROUND_KEY)
    bad = duplicate_files(k, rows["file"].to_numpy())
    out = []
    for f in sorted(bad):
        n, row, other = bad[f]
        r = rows.iloc[row]
        eg = ", ".join(f"{c}={r[c]}" for c in S.ROUND_KEY)
        where = "rows share a key within this file" if other < 0 else f"keys already present in {sources[other].path}"
        out.append((sources[f].path, str(LogError(sources[f].path, f"{n} duplicate rounds: {where} (e.g. {eg})",
                                                  KEY_FIX, column=S.ROUND_KEY))))
    return out


def default_workers(n_files: int) -> int:
    return max(1, min(os.cpu_count() or 1, 4, n_files))
