"""What every reduction engine shares: the inputs scanned and checked from their footers
(:func:`scan`), :class:`Source`, :class:`BadFiles`, and the duplicate-key candidates and blame
(:func:`suspect_streams`, :func:`blame`). The dispatcher is :func:`glance_law.scale.engines.reduce_logs`.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from glance_law.data import schema as S
from glance_law.errors import GlanceError

__all__ = ["Source", "BadFiles", "scan", "READ_COLUMNS", "KEY_FIX", "suspect_streams", "blame", "default_workers",
           "verify_pages", "VERIFIED_COLUMNS",
           "page_failure"]

#: Round columns a reduction reads (condition and drafter when present).
READ_COLUMNS = ("run_id", "task", "prompt_id", "condition", "drafter", "round", "root_entropy", "accepted", "horizon")
#: Columns whose pages :func:`verify_pages` checks: those any engine reads.
VERIFIED_COLUMNS = READ_COLUMNS + ("drafted_horizon",)
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
    #: :func:`footer_fingerprint` of the file (its content, not its name); "" where it was not read
    fingerprint: str = ""


#: Marks the content part of a ``from_files`` identity (identities written before it named the file).
CONTENT_MARK = "content-"


def footer_fingerprint(md) -> str:
    """A digest of a Parquet file's content as its footer describes it: rows, and per row group and
    column chunk the values, sizes, offsets and min/max/null statistics. A byte-for-byte copy (a
    renamed or moved file) has the same fingerprint; two different parts of one run differ in their
    statistics or sizes. Footer only: no data page is read, whatever the file's size."""
    import hashlib
    import json
    parts: list = [int(md.num_rows)]
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        parts.append(int(rg.num_rows))
        for j in range(rg.num_columns):
            c = rg.column(j)
            st = c.statistics if c.is_stats_set else None
            stats = None
            if st is not None:
                stats = [st.null_count, *(_min_max(st) if st.has_min_max else ())]
            parts.append([c.path_in_schema, c.num_values, c.total_compressed_size, c.total_uncompressed_size,
                          c.data_page_offset, stats])
    return hashlib.sha256(json.dumps(parts, default=repr).encode()).hexdigest()[:24]


def _min_max(st) -> tuple:
    """A column chunk's min and max statistics; a string column whose bytes are not UTF-8 gives them
    as its raw values (pyarrow's ``min`` decodes them and raises)."""
    try:
        return st.min, st.max
    except UnicodeDecodeError:
        return st.min_raw, st.max_raw


def _name(path) -> str:
    return str(path).replace(chr(92), '/').rsplit('/', 1)[-1]


def source_id(src: Source) -> str:
    """What a reduction records of each rounds file it reduced (``from_files``):
    ``NAME:ROWS:RUN:content-FOOTER``, the file's name (for messages only), rows, a digest of its
    ``glance.run`` document and its :func:`footer_fingerprint`. Files are recognised by everything
    after the name (:func:`identity`), so a copy under another name or in another folder is the
    same file."""
    import hashlib
    import json
    run = json.dumps(dict(src.run), sort_keys=True, default=str).encode()
    return f"{_name(src.path)}:{int(src.rows)}:{hashlib.sha256(run).hexdigest()[:12]}:{CONTENT_MARK}{src.fingerprint}"


def identity(sid: str) -> tuple[str, str]:
    """(the file's identity, its name when recorded) of a ``from_files`` entry. Entries written
    before the content part was recorded (``NAME:ROWS:RUN``) are identified by all three, the name
    included, as they were then."""
    head, _, last = sid.rpartition(":")
    if last.startswith(CONTENT_MARK) and head.count(":") >= 2:
        name, rows, run = head.rsplit(":", 2)
        return f"{rows}:{run}:{last}", name
    return sid, sid.rsplit(":", 2)[0]


def refuse_mixing(rounds: list[Source], reduced: list[Source]) -> None:
    """Refuse inputs that hold a reduction together with rounds files it was made from (under any
    name), or two reductions of one rounds file: merged, those rounds would be counted twice
    (reductions recognised by their ``from_files`` metadata, files by their content: :func:`identity`)."""
    import hashlib
    import json
    mine: dict = {}
    for s in rounds:
        mine[identity(source_id(s))[0]] = s.path
        run = json.dumps(dict(s.run), sort_keys=True, default=str).encode()     # as reductions recorded it before
        mine.setdefault(f"{_name(s.path)}:{int(s.rows)}:{hashlib.sha256(run).hexdigest()[:12]}", s.path)
    seen: dict = {}
    for r in reduced:
        meta = r.run.get("reduction") if isinstance(r.run, Mapping) else None
        ids = meta.get("from_files") if isinstance(meta, Mapping) else None
        if not isinstance(ids, list):
            continue
        for sid in ids:
            i, name = identity(str(sid))
            if i in mine:
                also = "" if _name(mine[i]) == name else f" (a copy of {name}, the file it reduced)"
                raise GlanceError(f"{r.path} is a reduction of {mine[i]}{also}, which is also among the inputs; "
                                  "merged, its rounds would be counted twice: pass the rounds files or their "
                                  "reduction, not both (e.g. write reductions outside the logs' folder)")
            if i in seen and seen[i][0] != r.path:
                raise GlanceError(f"{r.path} and {seen[i][0]} both reduce the rounds file {name}"
                                  f"{'' if name == seen[i][1] else f' (or its copy {seen[i][1]})'}; "
                                  "merged, its rounds would be counted twice: pass one of them")
            seen[i] = (r.path, name)


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
    from glance_law.data.io import LogError, expand_paths, file_meta
    rounds, reduced, other, skipped = [], [], [], []
    for path in expand_paths(paths, skipped if skip_bad else None):
        try:
            md, kind, run = file_meta(path)
            names: tuple[str, ...] = tuple(md.schema.to_arrow_schema().names)
            if kind == S.KIND_ROUNDS:
                names = _check_rounds_file(path, md)
        except LogError as exc:
            exc = exc if exc.path is not None else exc.at(path)
            if not skip_bad:
                raise exc from None
            skipped.append((str(path), str(exc)))
            continue
        src = Source(str(path), kind, int(md.num_rows), names, run,
                     footer_fingerprint(md) if kind == S.KIND_ROUNDS else "")
        (rounds if kind == S.KIND_ROUNDS else reduced if kind == S.KIND_REDUCED else other).append(src)
    if not rounds and not reduced:
        from glance_law.data.io import LogError as _LE
        kinds = sorted({s.kind for s in other})
        found = f" (found only {', '.join(kinds)} files)" if kinds else ""
        if skipped and not other:
            raise _LE(None, f"every file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                      "fix the files or point at other logs")
        raise _LE(", ".join(str(p) for p in list(expand_paths(paths, []))[:3]), f"no rounds or reduced files among the "
                  f"inputs{found}", "pass the rounds-*.parquet parts that glance-log writes")
    return rounds, reduced, other, skipped


# --------------------------------------------------------------------------
# page checksums (for the engines whose reader does not verify them)
# --------------------------------------------------------------------------

CHECKSUM_FIX = ("the file is corrupt (a byte changed on disk or in transfer); restore it from a copy or re-log it, "
                "or pass --skip-bad to leave it out")


def page_failure(path, what: str) -> str:
    """The one-line refusal of a file whose pages did not verify; ``what``: the reader's error."""
    from glance_law.data.io import LogError
    problem = ("a page fails its checksum" if "crc" in what.lower() or "checksum" in what.lower()
               else "could not be read")
    return str(LogError(path, f"{problem} ({what})", CHECKSUM_FIX))


def _verify_file(src: Source, columns, batch_rows: int) -> tuple[str, str] | None:
    """(path, one-line message) when a page of ``columns`` in ``src`` fails its CRC32 (or does not
    decode), None when every page is sound. Streams one record batch at a time."""
    import pyarrow.parquet as pq

    from glance_law.data import uri
    from glance_law.data.io import LogError
    cols = [c for c in columns if c in src.columns]
    source = None
    try:
        source = uri.open_input(src.path)
        with pq.ParquetFile(source, page_checksum_verification=True) as pf:
            for _ in pf.iter_batches(batch_size=batch_rows, columns=cols, use_threads=False):
                pass
    except uri.StoreError as exc:
        return src.path, str(LogError(src.path, exc.problem, exc.fix))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises OSError, ArrowInvalid, ...
        return src.path, page_failure(src.path, str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__)
    finally:
        if source is not None and source is not src.path:
            source.close()
    return None


def verify_pages(sources: Sequence[Source], columns=VERIFIED_COLUMNS, *, batch_rows: int = 1 << 16,
                 workers: int | None = None) -> list[tuple[str, str]]:
    """(path, message) of each file among ``sources`` a page of whose ``columns`` fails its CRC32
    checksum, in input order. For engines whose own reader does not verify Parquet checksums
    (DuckDB, Spark): a pyarrow pass over the columns they read, one batch at a time per file
    (memory: a batch per worker), files in ``workers`` threads. Files written without
    checksums pass unchecked, as in every reader."""
    from concurrent.futures import ThreadPoolExecutor
    n = workers or default_workers(len(sources))
    if n <= 1 or len(sources) <= 1:
        found = [_verify_file(s, columns, batch_rows) for s in sources]
    else:
        with ThreadPoolExecutor(n) as pool:
            found = list(pool.map(lambda s: _verify_file(s, columns, batch_rows), sources))
    return [f for f in found if f is not None]


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
