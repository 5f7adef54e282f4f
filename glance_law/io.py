"""Reading and writing round logs (no torch).

The writer buffers rows and flushes them as atomic part files: each part is
written under a hidden temporary name, fsync'ed, then renamed into place, so a
``kill -9`` at any moment loses at most the unflushed buffer and never leaves
a half-written ``*.parquet`` behind.

The reader takes files, directories and globs, dispatches on the
``glance.kind`` metadata, reads only the columns asked for, validates types
and values against :mod:`glance_law.schema`, and raises :class:`LogError` with
one line naming the file, the column and the fix.
"""
from __future__ import annotations

import glob as _glob
import json
import os
import platform
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import schema as S
from .errors import GlanceError
from ._version import __version__


class LogError(GlanceError):
    """A log file violates the contract. ``str()`` is one line: file, column, problem, fix."""

    def __init__(self, path, problem: str, fix: str = "", column: str | None = None):
        self.path = str(path) if path is not None else None
        self.column = column
        self.problem = problem
        self.fix = fix
        where = f"{self.path}: " if self.path else ""
        col = f"column '{column}': " if column else ""
        tail = f"; {fix}" if fix else ""
        super().__init__(f"{where}{col}{problem}{tail}")


# --------------------------------------------------------------------------
# metadata
# --------------------------------------------------------------------------

def library_versions() -> dict:
    """Versions of the libraries that shape results (torch/transformers when importable without cost)."""
    out = {"python": platform.python_version(), "glance-law": __version__}
    for name in ("numpy", "scipy", "pandas", "pyarrow", "statsmodels", "sklearn", "torch", "transformers"):
        mod = sys.modules.get(name)
        if mod is None and name not in ("torch", "transformers"):
            try:
                mod = __import__(name)
            except ImportError:  # pragma: no cover - base deps are installed
                mod = None
        if mod is not None:
            out[name] = getattr(mod, "__version__", "?")
    return out


def run_metadata(**fields) -> dict:
    """The ``glance.run`` JSON document: the caller's fields plus provenance defaults."""
    meta = {
        "tool": "glance-law",
        "tool_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "libraries": library_versions(),
    }
    meta.update({k: v for k, v in fields.items() if v is not None})
    return meta


def _kv(kind: str, run: Mapping | None) -> dict:
    return {
        S.META_KIND: kind.encode(),
        S.META_SCHEMA: S.SCHEMA_VERSION.encode(),
        S.META_RUN: json.dumps(dict(run or {}), sort_keys=True, default=str).encode(),
    }


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------

def to_arrow(rows, kind: str) -> pa.Table:
    """Convert rows (a DataFrame, a list of dicts, or a dict of columns) to an Arrow table
    typed by the contract. Columns outside the contract are kept with inferred types."""
    if isinstance(rows, pa.Table):
        data = {n: rows.column(n) for n in rows.column_names}
    elif isinstance(rows, pd.DataFrame):
        data = {n: rows[n] for n in rows.columns}
    elif isinstance(rows, Mapping):
        data = dict(rows)
    else:
        rows = list(rows)
        names: list[str] = []
        for r in rows:
            for k in r:
                if k not in names:
                    names.append(k)
        data = {n: [r.get(n) for r in rows] for n in names}
    known = {c.name: c for c in S.columns(kind)}
    missing = [n for n in S.required_names(kind) if n not in data]
    if missing:
        raise LogError(None, f"rows lack required column(s) {', '.join(missing)}",
                       f"every {kind} row needs {', '.join(S.required_names(kind))}")
    arrays, fields = [], []
    for name in [c.name for c in S.columns(kind) if c.name in data] + [n for n in data if n not in known]:
        values = data[name]
        if name in known:
            typ = known[name].type
            if isinstance(values, (pa.Array, pa.ChunkedArray)):
                arr = values.cast(typ)
            else:
                if isinstance(values, pd.Series):
                    values = values.to_numpy(dtype=object) if known[name].family in (S.LIST_INT, S.LIST_FLOAT, S.STRING) else values.to_numpy()
                if known[name].family in (S.LIST_INT, S.LIST_FLOAT):
                    values = [None if v is None else list(np.asarray(v).tolist()) for v in values]
                try:
                    arr = pa.array(values, type=typ, from_pandas=True)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    raise LogError(None, f"cannot store values as {typ}: {exc}",
                                   "check the values the logger produces for this column",
                                   column=name) from None
        else:
            arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(
                values.to_numpy() if isinstance(values, pd.Series) and not isinstance(values.dtype, pd.CategoricalDtype) else list(values)
                if not isinstance(values, np.ndarray) else values, from_pandas=True)
            typ = arr.type
        arrays.append(arr)
        fields.append(pa.field(name, typ))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_table(table: pa.Table | pd.DataFrame | Sequence[Mapping], path, kind: str = S.KIND_ROUNDS,
                run: Mapping | None = None) -> Path:
    """Write one complete log file atomically (temporary name, fsync, rename)."""
    path = Path(path)
    if not isinstance(table, pa.Table) or table.schema.metadata is None:
        table = to_arrow(table, kind) if not isinstance(table, pa.Table) else table
    table = table.replace_schema_metadata(_kv(kind, run if run is not None else run_metadata()))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh, compression="zstd")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)
    return path


class LogWriter:
    """Buffered, crash-safe writer of one log kind into a folder of part files.

    Part files are named ``{kind}-{stem}-{token}-{seq:05d}.parquet`` directly in
    ``out_dir`` so that ``out_dir/*.parquet`` picks up every part. ``flush()``
    writes the buffer as one new part; :meth:`maybe_flush` flushes when the
    buffer holds ``flush_rows`` rows or ``flush_seconds`` have passed.
    """

    def __init__(self, out_dir, kind: str = S.KIND_ROUNDS, run: Mapping | None = None,
                 stem: str = "log", flush_rows: int = 4096, flush_seconds: float = 10.0):
        S.columns(kind)  # validates kind
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.kind = kind
        self.run = dict(run) if run is not None else run_metadata()
        self.stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(stem))[:80]
        self.token = uuid.uuid4().hex[:8]
        self.flush_rows = int(flush_rows)
        self.flush_seconds = float(flush_seconds)
        self._buffer: list[Mapping] = []
        self._seq = 0
        self._last_flush = time.monotonic()
        self.paths: list[Path] = []
        self.rows_written = 0

    def __len__(self) -> int:
        return len(self._buffer)

    def append(self, row: Mapping) -> None:
        self._buffer.append(row)

    def extend(self, rows: Iterable[Mapping]) -> None:
        self._buffer.extend(rows)

    def maybe_flush(self) -> Path | None:
        if len(self._buffer) >= self.flush_rows or (
                self._buffer and time.monotonic() - self._last_flush >= self.flush_seconds):
            return self.flush()
        return None

    def flush(self) -> Path | None:
        if not self._buffer:
            return None
        table = to_arrow(self._buffer, self.kind)
        path = self.out_dir / f"{self.kind}-{self.stem}-{self.token}-{self._seq:05d}.parquet"
        write_table(table, path, self.kind, self.run)
        self._seq += 1
        self.rows_written += table.num_rows
        self._buffer = []
        self._last_flush = time.monotonic()
        self.paths.append(path)
        return path

    def close(self) -> None:
        self.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class FileInfo:
    path: str
    kind: str
    rows: int
    run: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class LogSet:
    """What :func:`read_logs` found: the validated frame of the requested kind, the files
    it came from, the files of other kinds it saw, and every file it skipped (with why)."""

    kind: str
    frame: pd.DataFrame
    files: tuple[FileInfo, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    other: tuple[FileInfo, ...] = ()

    @property
    def n_files(self) -> int:
        return len(self.files)


_GLOB_CHARS = set("*?[")


def expand_paths(paths: str | os.PathLike | Iterable) -> list[Path]:
    """Files, directories (all ``*.parquet`` below them) and globs, sorted and de-duplicated."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    for p in paths:
        s = str(p)
        if _GLOB_CHARS & set(s) and not Path(s).exists():
            hits = sorted(_glob.glob(s, recursive=True))
            if not hits:
                raise LogError(s, "the pattern matches no files",
                               "check the path, or run glance-log first to write logs there")
            cand = [Path(h) for h in hits]
        else:
            cand = [Path(s)]
        for c in cand:
            if c.is_dir():
                found = sorted(q for q in c.rglob("*.parquet") if not q.name.startswith("."))
                if not found:
                    raise LogError(c, "the folder holds no *.parquet files",
                                   "point at the folder glance-log wrote (its --out)")
                out.extend(found)
            elif c.exists():
                out.append(c)
            else:
                raise LogError(c, "no such file or folder",
                               "check the path, or run glance-log first to write logs there")
    seen, uniq = set(), []
    for p in out:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            uniq.append(p)
    return uniq


def _file_meta(path: Path):
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types here
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LogError(path, f"not a Parquet file ({msg[:120]})",
                       "remove it from the inputs; glance logs are the *.parquet parts glance-log writes") from None
    md = pf.schema_arrow.metadata or {}
    if S.META_KIND not in md:
        raise LogError(path, "has no glance.kind metadata, so it is not a glance round log",
                       "write logs with glance-log or glance_law.io.write_table(frame, path, kind='rounds')")
    kind = md[S.META_KIND].decode(errors="replace")
    if kind not in S.KINDS:
        raise LogError(path, f"unknown log kind {kind!r} (glance.kind)",
                       f"expected one of {', '.join(S.KINDS)}; was it written by another tool?")
    version = md.get(S.META_SCHEMA, b"").decode(errors="replace")
    if version not in S.SUPPORTED_VERSIONS:
        raise LogError(path, f"schema version {version!r} is not supported by glance-law {__version__} "
                             f"(supports {', '.join(S.SUPPORTED_VERSIONS)})",
                       "upgrade glance-law, or re-log with this version")
    try:
        run = json.loads(md.get(S.META_RUN, b"{}").decode() or "{}")
    except json.JSONDecodeError:
        run = {}
    return pf, kind, run


def _validate_table(path: Path, kind: str, table: pa.Table, wanted: Sequence[str]) -> pa.Table:
    names = set(table.column_names)
    for name in wanted:
        col = S.column(kind, name) if name in {c.name for c in S.columns(kind)} else None
        if name not in names:
            if col is not None and col.required:
                raise LogError(path, f"required column is missing", f"the {kind} contract requires it "
                               f"(see docs/schema.md); re-log with glance-log or add the column", column=name)
            continue
        if col is not None and not S.compatible(col, table.schema.field(name).type):
            raise LogError(path, f"has type {table.schema.field(name).type}, expected {col.type}",
                           "write it with the contract type (see docs/schema.md)", column=name)
    if table.num_rows == 0:
        raise LogError(path, "the file has no rows", "delete the empty file or rerun the logger")
    for name in S.required_names(kind):
        if name in names and table.column(name).null_count:
            raise LogError(path, f"{table.column(name).null_count} null value(s) in a required column",
                           "every row needs a value here; fix the logger or drop those rows", column=name)
    if kind == S.KIND_ROUNDS:
        _check_round_values(path, table)
    return table


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_round_values(path: Path, table: pa.Table) -> None:
    names = set(table.column_names)
    if "root_entropy" in names:
        h = table.column("root_entropy").to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        bad = ~np.isfinite(h)
        if bad.any():
            raise LogError(path, f"{int(bad.sum())} value(s) are NaN or inf (first at row {_first_bad(bad)})",
                           "entropy must come from finite fp32 logits; fix the logger, or drop those rounds",
                           column="root_entropy")
        neg = h < -1e-4
        if neg.any():
            raise LogError(path, f"{int(neg.sum())} negative value(s) (first at row {_first_bad(neg)})",
                           "entropy is in nats and cannot be negative; check the logger", column="root_entropy")
    if "accepted" in names and "horizon" in names:
        a = table.column("accepted").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        L = table.column("horizon").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        if (L < 0).any():
            bad = L < 0
            raise LogError(path, f"{int(bad.sum())} negative value(s) (first at row {_first_bad(bad)})",
                           "horizon is the deepest offset offered to the verifier (>= 0)", column="horizon")
        bad = (a < 0) | (a > L)
        if bad.any():
            i = _first_bad(bad)
            raise LogError(path, f"{int(bad.sum())} row(s) with accepted < 0 or accepted > horizon "
                                 f"(first at row {i}: accepted={a[i]}, horizon={L[i]})",
                           "accepted counts draft tokens only (bonus excluded) and cannot exceed horizon",
                           column="accepted")
    if "round" in names:
        r = table.column("round").to_numpy(zero_copy_only=False)
        if (r < 0).any():
            bad = r < 0
            raise LogError(path, f"{int(bad.sum())} negative value(s) (first at row {_first_bad(bad)})",
                           "round is 0-based within a prompt", column="round")


def _read_one(path: Path, kind: str, pf: pq.ParquetFile, columns: Sequence[str] | None) -> pa.Table:
    present = set(pf.schema_arrow.names)
    contract = [c.name for c in S.columns(kind)]
    if columns is None:
        wanted = list(pf.schema_arrow.names)
    else:
        key = S.ROUND_KEY if kind == S.KIND_ROUNDS else (S.PROMPT_KEY if kind == S.KIND_PROMPTS else ())
        base = list(S.required_names(kind)) + [k for k in key if k not in S.required_names(kind)]
        wanted = list(dict.fromkeys(base + list(columns)))
    missing_req = [n for n in S.required_names(kind) if n not in present]
    if missing_req:
        raise LogError(path, "required column is missing",
                       f"the {kind} contract requires it (see docs/schema.md); re-log with glance-log or add the column",
                       column=missing_req[0])
    to_read = [n for n in wanted if n in present]
    strings = [n for n in to_read if n in contract and S.column(kind, n).family == S.STRING]
    try:
        table = pq.read_table(path, columns=to_read, read_dictionary=strings)
    except Exception as exc:  # noqa: BLE001
        raise LogError(path, f"could not be read ({str(exc).splitlines()[0][:120]})",
                       "the file may be truncated or corrupt; delete it and rerun the logger for its prompts") from None
    return _validate_table(path, kind, table, wanted)


def _cast_to_contract(kind: str, table: pa.Table) -> pa.Table:
    known = {c.name: c for c in S.columns(kind)}
    cols, fields = [], []
    for name in table.column_names:
        arr = table.column(name)
        if name in known:
            col = known[name]
            if col.family == S.STRING:
                target = pa.dictionary(pa.int32(), pa.string())
                if pa.types.is_dictionary(arr.type):
                    arr = arr.cast(pa.dictionary(pa.int32(), pa.string()))
                else:
                    arr = arr.cast(pa.string()).dictionary_encode()
                    arr = arr.cast(target)
            elif arr.type != col.type:
                try:
                    arr = arr.cast(col.type)  # safe cast: raises on overflow
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise LogError(None, f"values do not fit {col.type} ({str(exc).splitlines()[0][:100]})",
                                   "check the values", column=name) from None
        cols.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _composite_key(frame: pd.DataFrame, key: Sequence[str]) -> np.ndarray:
    codes = []
    for k in key:
        s = frame[k]
        if isinstance(s.dtype, pd.CategoricalDtype):
            codes.append((s.cat.codes.to_numpy().astype(np.int64), len(s.cat.categories) + 1))
        else:
            v, u = pd.factorize(s, sort=False)
            codes.append((v.astype(np.int64), len(u) + 1))
    total = 1.0
    for _, n in codes:
        total *= n
    if total < 2 ** 62:
        out = np.zeros(len(frame), dtype=np.int64)
        for c, n in codes:
            out = out * n + c
        return out
    return pd.MultiIndex.from_arrays([c for c, _ in codes]).factorize()[0].astype(np.int64)


def duplicate_mask(frame: pd.DataFrame, key: Sequence[str]) -> np.ndarray:
    """True for every row whose key occurs more than once."""
    k = _composite_key(frame, key)
    order = np.argsort(k, kind="stable")
    ks = k[order]
    same = ks[1:] == ks[:-1]
    dup_sorted = np.zeros(len(k), dtype=bool)
    dup_sorted[1:] |= same
    dup_sorted[:-1] |= same
    out = np.empty(len(k), dtype=bool)
    out[order] = dup_sorted
    return out


def read_logs(paths, kind: str = S.KIND_ROUNDS, columns: Sequence[str] | None = None,
              skip_bad: bool = False) -> LogSet:
    """Read every file of ``kind`` among ``paths`` (files, folders, globs) into one frame.

    ``columns``: the columns to read (the contract's required and key columns are
    always read); None reads everything. String columns come back as pandas
    categoricals. A missing ``condition`` is filled with ``"matched"`` and a
    missing ``drafter`` with ``"unknown"`` (rounds and prompts).

    A bad file raises :class:`LogError` unless ``skip_bad``, in which case it is
    listed in ``LogSet.skipped`` with its reason and the rest are read.
    """
    S.columns(kind)
    files = expand_paths(paths)
    tables, infos, skipped, other = [], [], [], []
    for path in files:
        try:
            pf, fkind, run = _file_meta(path)
            if fkind != kind:
                other.append(FileInfo(str(path), fkind, pf.metadata.num_rows, run))
                continue
            table = _cast_to_contract(kind, _read_one(path, kind, pf, columns))
        except LogError as exc:
            if exc.path is None:
                exc = LogError(path, exc.problem, exc.fix, exc.column)
            if not skip_bad:
                raise exc from None
            skipped.append((str(path), str(exc)))
            continue
        tables.append(table)
        infos.append(FileInfo(str(path), kind, table.num_rows, run))
    if not tables:
        if skipped:
            raise LogError(None, f"every {kind} file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                           "fix the files or point at other logs")
        kinds = sorted({f.kind for f in other})
        found = f" (found only {', '.join(kinds)} files)" if kinds else ""
        raise LogError(", ".join(str(p) for p in files[:3]) + (" ..." if len(files) > 3 else ""),
                       f"no {kind} files among the inputs{found}",
                       f"pass the {kind}-*.parquet parts that glance-log writes")
    frame = _concat(tables)
    if kind in (S.KIND_ROUNDS, S.KIND_PROMPTS):
        for name, default in (("condition", S.CONDITIONS_DEFAULT), ("drafter", "unknown")):
            if name not in frame.columns:
                frame[name] = pd.Categorical([default] * len(frame))
            elif frame[name].isna().any():
                frame[name] = frame[name].cat.add_categories([default]).fillna(default) \
                    if default not in frame[name].cat.categories else frame[name].fillna(default)
        key = S.ROUND_KEY if kind == S.KIND_ROUNDS else S.PROMPT_KEY
        frame, infos, dskip = _drop_duplicate_files(frame, infos, key, skip_bad)
        skipped.extend(dskip)
    return LogSet(kind, frame, tuple(infos), tuple(skipped), tuple(other))


def _concat(tables: list[pa.Table]) -> pd.DataFrame:
    if len(tables) == 1:
        table = tables[0]
    else:
        table = pa.concat_tables(tables, promote_options="permissive")
    table = table.unify_dictionaries().combine_chunks()
    frame = table.to_pandas(split_blocks=True, self_destruct=True)
    frame["_file"] = np.repeat(np.arange(len(tables), dtype=np.int32), [t.num_rows for t in tables])
    return frame


def _drop_duplicate_files(frame, infos, key, skip_bad):
    dup = duplicate_mask(frame, key)
    if not dup.any():
        return frame.drop(columns="_file"), infos, []
    file_idx = frame["_file"].to_numpy()
    skipped = []
    # Files are considered in order; a file that repeats keys already seen (or repeats
    # its own keys) is the bad one.
    bad_files: list[int] = []
    first = int(np.flatnonzero(dup)[0])
    row = frame.iloc[first]
    desc = ", ".join(f"{k}={row[k]}" for k in key)
    files_with_dup = sorted(set(file_idx[dup].tolist()))
    if len(files_with_dup) == 1:
        bad_files = files_with_dup
        msg = f"duplicate rounds ({int(dup.sum())} rows share a key, e.g. {desc})"
    else:
        bad_files = files_with_dup[1:]
        msg = (f"duplicate rounds: {int(dup.sum())} rows repeat keys found in "
               f"{infos[files_with_dup[0]].path} (e.g. {desc})")
    if not skip_bad:
        raise LogError(infos[bad_files[0]].path, msg,
                       "the same (run_id, prompt_id, condition, round) was logged twice; "
                       "remove the repeated part file or give the runs distinct run_id values",
                       column="round" if key[-1] == "round" else key[-1])
    for b in bad_files:
        skipped.append((infos[b].path, str(LogError(infos[b].path, msg, "skipped (--skip-bad)"))))
    keep = ~np.isin(file_idx, bad_files)
    frame = frame.loc[keep].drop(columns="_file").reset_index(drop=True)
    infos = [f for i, f in enumerate(infos) if i not in set(bad_files)]
    for name in frame.columns:
        if isinstance(frame[name].dtype, pd.CategoricalDtype):
            frame[name] = frame[name].cat.remove_unused_categories()
    if duplicate_mask(frame, key).any():
        raise LogError(None, "duplicate rounds remain within the kept files",
                       "remove the repeated rows; see docs/schema.md on keys")
    return frame, infos, skipped


def read_rounds(paths, columns: Sequence[str] | None = None, skip_bad: bool = False) -> pd.DataFrame:
    """Convenience: the rounds frame of :func:`read_logs`."""
    return read_logs(paths, S.KIND_ROUNDS, columns, skip_bad).frame


def read_prompts(paths, columns: Sequence[str] | None = None, skip_bad: bool = False) -> pd.DataFrame:
    """Convenience: the prompts frame of :func:`read_logs`."""
    return read_logs(paths, S.KIND_PROMPTS, columns, skip_bad).frame
