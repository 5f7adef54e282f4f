"""Reading and writing round logs (no torch).

The writer buffers rows and flushes them as atomic part files: each part is
written under a hidden temporary name, fsync'ed, then renamed into place, so a
``kill -9`` at any moment loses at most the unflushed buffer and never leaves
a half-written ``*.parquet`` behind (a killed flush leaves at most a hidden
``.*.tmp`` file, which no reader picks up).

The reader takes files, directories and globs, dispatches on the
``glance.kind`` metadata (files of other kinds are listed, not read), reads
only the columns asked for (plus the contract's required columns, which the
checks need), validates types and values against :mod:`glance_law.schema`,
rejects duplicate keys within and across files, and raises :class:`LogError`
with one line naming the file, the column and the fix - or, with
``skip_bad=True``, lists every bad file with its reason in ``LogSet.skipped``.
"""
from __future__ import annotations

import contextlib
import errno
import glob as _glob
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pyarrow.parquet as pq

from glance_law._version import __version__
from glance_law.errors import GlanceError
from glance_law.scrub import scrub_doc

from . import outputs as _outputs
from . import schema as S
from . import uri as _uri
from .inputs import check_regular
from .inputs import loads as json_loads
from .keys import composite_key, duplicate_files, duplicate_mask, has_duplicates  # noqa: F401 (duplicate_mask is public here)
from .provenance import library_versions, run_metadata  # noqa: F401 (public here)
from .tables import LogError, to_arrow  # noqa: F401 (public here)

# --------------------------------------------------------------------------
# metadata
# --------------------------------------------------------------------------

def _kv(kind: str, run: Mapping | None, version: str = S.SCHEMA_VERSION) -> dict:
    return {
        S.META_KIND: kind.encode(),
        S.META_SCHEMA: version.encode(),
        S.META_RUN: json.dumps(scrub_doc(dict(run or {})), sort_keys=True, default=str).encode(),
    }


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------

#: How every Parquet file is written: zstd, and a CRC32 checksum in every page header, which
#: the reader verifies (a flipped byte in a data page is refused, not read as another value).
PARQUET_OPTIONS = {"compression": "zstd", "write_page_checksum": True}


def write_table(table: pa.Table | pd.DataFrame | Sequence[Mapping] | Mapping, path,
                kind: str = S.KIND_ROUNDS, run: Mapping | None = None):
    """Write one complete log file atomically. Columns are typed by the contract
    (:func:`to_arrow`); ``run`` is the ``glance.run`` document (default :func:`run_metadata`).
    Refuses an empty table.

    A local path: through :func:`glance_law.data.outputs.replacing` (temporary hidden name, fsync,
    rename, fsync of the folder; one line on a full disk or a read-only folder, the previous file
    unchanged); returns the Path. Pages carry checksums (:data:`PARQUET_OPTIONS`).
    A store URI (``s3://``, ``gs://``, ...): the file is serialized in memory and written as
    one object in one upload, visible only once complete (:func:`glance_law.data.uri.put_atomic`);
    returns the URI."""
    remote = _uri.is_uri(path) and _uri.scheme(path) != "file"
    if not remote:     # a file:// URI is a local path: the same writer, the URI returned
        local = Path(_uri.filesystem(path)[1]) if _uri.is_uri(path) else Path(path)
        path = path if _uri.is_uri(path) else local
    table = to_arrow(table, kind)
    if table.num_rows == 0:
        raise LogError(path, "refusing to write a log file without rows",
                       "the reader rejects empty files; write when there are rows")
    # only null entropies (not measured) and their reduced cells (hbin -1) need version 2; any other
    # file is a valid version-1 file and says so, so that older readers keep reading it
    version = "1"
    if "root_entropy" in table.column_names and table.column("root_entropy").null_count:
        version = S.SCHEMA_VERSION
    if kind == S.KIND_REDUCED and "hbin" in table.column_names and table.num_rows and \
            pa.compute.min(table.column("hbin")).as_py() < 0:
        version = S.SCHEMA_VERSION
    table = table.replace_schema_metadata(_kv(kind, run if run is not None else run_metadata(), version))
    if remote:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **PARQUET_OPTIONS)
        try:
            return _uri.put_atomic(path, sink.getvalue().to_pybytes())
        except _uri.StoreError as exc:
            raise LogError(path, exc.problem, exc.fix) from None
    with _outputs.replacing(local) as fh:      # the one output path: temporary name, fsync, rename
        pq.write_table(table, fh, **PARQUET_OPTIONS)
    return path


class LogWriter:
    """Buffered, crash-safe writer of one log kind into a folder of part files.

    Part files are named ``{kind}-{stem}-{token}-{seq:05d}.parquet`` directly in
    ``out_dir`` so that ``out_dir/*.parquet`` picks up every part. :meth:`append`
    and :meth:`extend` buffer rows and flush automatically once the buffer holds
    ``flush_rows`` rows or ``flush_seconds`` have passed since the last flush
    (checked on each call); :meth:`flush` writes the buffer as one new part now;
    :meth:`close` (or leaving the ``with`` block, also on an exception) flushes the
    rest. A ``kill -9`` loses at most the rows appended since the last flush.
    """

    def __init__(self, out_dir, kind: str = S.KIND_ROUNDS, run: Mapping | None = None,
                 stem: str = "log", flush_rows: int = 4096, flush_seconds: float = 10.0):
        S.columns(kind)  # validates kind
        if int(flush_rows) < 1:
            raise GlanceError(f"flush_rows must be >= 1, got {flush_rows}")
        if _uri.is_uri(out_dir):
            self.out_dir = str(out_dir).rstrip("/")
            try:
                _uri.check_writable_prefix(self.out_dir)
            except _uri.StoreError as exc:
                raise LogError(exc.location, exc.problem, exc.fix) from None
        else:
            self.out_dir = _outputs.make_folder(out_dir)   # one line when it cannot be created
        self.kind = kind
        self.run = dict(run) if run is not None else run_metadata()
        self.stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(stem))[:80]
        self.token = uuid.uuid4().hex[:8]
        self.flush_rows = int(flush_rows)
        self.flush_seconds = float(flush_seconds)
        self._buffer: list[Mapping] = []
        self._seq = 0
        self._last_flush = time.monotonic()
        self.paths: list = []  # Paths, or URI strings for a store --out
        self.rows_written = 0

    def __len__(self) -> int:
        """Rows buffered and not yet flushed."""
        return len(self._buffer)

    def append(self, row: Mapping) -> Path | None:
        """Buffer one row; returns the part written if this call flushed."""
        self._buffer.append(row)
        return self.maybe_flush()

    def extend(self, rows: Iterable[Mapping]) -> Path | None:
        """Buffer rows; returns the last part written if this call flushed."""
        self._buffer.extend(rows)
        return self.maybe_flush()

    def maybe_flush(self) -> Path | None:
        if len(self._buffer) >= self.flush_rows or (
                self._buffer and time.monotonic() - self._last_flush >= self.flush_seconds):
            return self.flush()
        return None

    def flush(self) -> Path | None:
        """Write the buffer as one part file (atomically); None when the buffer is empty.
        On an error the buffer is kept, so nothing is lost."""
        if not self._buffer:
            return None
        table = to_arrow(self._buffer, self.kind)
        path = _uri.join(self.out_dir, f"{self.kind}-{self.stem}-{self.token}-{self._seq:05d}.parquet")
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
    it came from, the files of other kinds it saw, every file it skipped (path, reason),
    and notes on what the reader filled in (absent optional columns, defaults)."""

    kind: str
    frame: pd.DataFrame
    files: tuple[FileInfo, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    other: tuple[FileInfo, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def n_files(self) -> int:
        return len(self.files)


_GLOB_CHARS = set("*?[")


def expand_paths(paths: str | os.PathLike | Iterable, problems: list | None = None) -> list:
    """Files, directories (every ``*.parquet`` below them, hidden files excluded) and globs
    (``**`` recurses), in the order given, each group sorted, de-duplicated by real path.
    A folder contributes its ``*.parquet`` files and the foreign logs the importers read
    (.jsonl, .jsonl.gz, ...). Local inputs come back as :class:`~pathlib.Path`; store URIs
    (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``, see :mod:`glance_law.data.uri`)
    as URI strings.

    Links are treated the same whether a folder or a glob found them: a ``*.parquet``
    link whose target is missing or loops, and a sub-folder that cannot be listed
    (permissions), raise :class:`LogError` naming it - or, when ``problems`` is a list
    (``skip_bad``), are appended to it as ``(path, reason)`` and left out."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]

    def bad(err: LogError) -> None:
        if problems is None:
            raise err
        problems.append((str(err.path), str(err)))

    out: list = []
    for p in paths:
        if _uri.is_uri(p):
            from glance_law.data.importers.common import is_foreign
            try:
                out.extend(_uri.expand([p], accept=lambda name: name.endswith(".parquet") or is_foreign(name),
                                       what="*.parquet files (nor .jsonl/.jsonl.gz logs to import)"))
            except _uri.StoreError as exc:
                raise LogError(exc.location, exc.problem, exc.fix) from None
            continue
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
            link = _broken_link(c)
            if link is not None:
                bad(link)
            elif c.is_dir():
                found = _walk_logs(c, bad)
                if not found and not (problems and any(str(q).startswith(str(c)) for q, _ in problems)):
                    raise LogError(c, "the folder holds no *.parquet files (nor .jsonl/.jsonl.gz logs to import)",
                                   "point at the folder glance-log wrote (its --out)")
                out.extend(found)
            elif c.exists():
                try:
                    check_regular(c, "log")       # a FIFO, a device: refused (listed under skip_bad)
                except LogError as exc:
                    bad(exc)
                    continue
                out.append(c)
            else:
                raise LogError(c, "no such file or folder",
                               "check the path, or run glance-log first to write logs there")
    seen, uniq = set(), []
    for p in out:
        key = p if isinstance(p, str) else os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            uniq.append(p)
    _refuse_incomplete(uniq)
    return uniq


def _refuse_incomplete(files: list) -> None:
    """A file in a folder that an ingest or a report is writing, or left unfinished when it was
    killed (its :data:`glance_law.data.outputs.INCOMPLETE` marker), is refused: the folder may
    hold some of its runs and not others, or a rounds file without its prompts file."""
    parents = dict.fromkeys(p.rsplit("/", 1)[0] if isinstance(p, str) else str(Path(p).parent) for p in files)
    for folder in parents:
        try:
            marker = _outputs.incomplete_marker(folder)
        except _uri.StoreError as exc:
            raise LogError(exc.location, exc.problem, exc.fix) from None
        if marker is not None:
            raise LogError(folder, f"holds an unfinished write (its {_outputs.INCOMPLETE} marker: an ingest or report "
                                   "into it was killed, or is still running), so it may lack some files",
                           "rerun the command that writes it to complete the folder (or, if you know its files "
                           f"are whole, remove {marker})")


def _broken_link(path: Path) -> LogError | None:
    """The error for a symbolic link whose target is missing or loops, else None."""
    if not os.path.islink(path):
        return None
    try:
        os.stat(path)
    except OSError as exc:
        what = "a symbolic link loop" if exc.errno == errno.ELOOP else \
            f"a symbolic link to a missing file ({os.readlink(path)})"
        return LogError(path, f"is {what}", "remove the link or restore its target (with --skip-bad it is "
                                            "left out and listed)")
    return None


def _walk_logs(folder: Path, bad) -> list[Path]:
    """Every non-hidden ``*.parquet`` file (and foreign log the importers read) below ``folder`` (links to files followed, links to
    folders not), sorted; broken links and folders that cannot be listed go to ``bad``."""
    from glance_law.data.importers.common import is_foreign
    found = []

    def unreadable(exc: OSError) -> None:
        where = exc.filename or folder
        reason = "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))
        bad(LogError(where, f"the folder cannot be listed ({reason}), so its logs would be missed",
                     "give your user read and execute permission on it (chmod u+rx), or point at "
                     "the folders you can read (with --skip-bad it is left out and listed)"))

    for top, dirs, files in os.walk(folder, onerror=unreadable):
        dirs.sort()
        for name in sorted(files):
            if name.startswith(".") or not (name.endswith(".parquet") or is_foreign(name)):
                continue
            q = Path(top) / name
            link = _broken_link(q)
            if link is not None:
                bad(link)
            elif q.is_file():
                found.append(q)
            elif q.exists():                      # a FIFO, socket or device among the logs: said, not skipped silently
                try:
                    check_regular(q, "log")
                except LogError as exc:
                    bad(exc)
    return sorted(found)


def file_meta(path: Path):
    """(Parquet metadata, kind, glance.run) of a file, or LogError."""
    try:
        if _uri.is_uri(path):
            size = _uri.size(path)
        else:
            check_regular(path, "log")        # a FIFO or device would block the open below
            size = os.stat(path).st_size
            os.close(os.open(path, os.O_RDONLY))
    except _uri.StoreError as exc:
        raise LogError(path, exc.problem, exc.fix) from None
    except FileNotFoundError:
        raise LogError(path, "no such file", "check the path; was it deleted while reading?") from None
    except PermissionError:
        raise LogError(path, "cannot be read: permission denied",
                       "give your user read permission (chmod u+r), run as the user that wrote the logs, "
                       "or leave the file out (--skip-bad lists it and goes on)") from None
    except OSError as exc:
        raise LogError(path, f"cannot be opened ({exc.strerror})", "check the path and its permissions") from None
    if size is None:
        raise LogError(path, "no such file", "check the path; was it deleted while reading?")
    if size == 0:
        raise LogError(path, "the file is empty (0 bytes), so it is not a Parquet file",
                       "delete it; an interrupted copy or an old writer left it")
    try:
        md = _read_metadata(path)
    except _uri.StoreError as exc:
        raise LogError(path, exc.problem, exc.fix) from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types here
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LogError(path, f"not a Parquet file ({msg[:120]})",
                       "remove it from the inputs; glance logs are the *.parquet parts glance-log writes") from None
    names = md.schema.to_arrow_schema().names
    twice = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) < len(names) else []
    if twice:        # every reader and engine would pick one of them (or fail): refused here, for all
        raise LogError(path, "the file holds two columns of the same name (a column cannot be told apart)",
                       "rewrite the file with one column per name", column=twice if len(twice) > 1 else twice[0])
    kv = md.metadata or {}
    if S.META_KIND not in kv:
        raise LogError(path, "has no glance.kind metadata, so it is not a glance log",
                       "write logs with glance-log or glance_law.io.write_table(frame, path, kind='rounds')")
    kind = kv[S.META_KIND].decode(errors="replace")
    if kind not in S.KINDS:
        raise LogError(path, f"unknown log kind {kind!r} (glance.kind)",
                       f"expected one of {', '.join(S.KINDS)}; was it written by another tool?")
    if S.META_SCHEMA not in kv:
        raise LogError(path, "has no glance.schema metadata (the contract version)",
                       "write logs with glance-log or glance_law.io.write_table")
    version = kv[S.META_SCHEMA].decode(errors="replace")
    if version not in S.SUPPORTED_VERSIONS:
        raise LogError(path, f"schema version {version!r} is not supported by glance-law {__version__} "
                             f"(supports {', '.join(S.SUPPORTED_VERSIONS)})",
                       "upgrade glance-law, or re-log with this version")
    raw = kv.get(S.META_RUN, b"{}").decode(errors="replace") or "{}"
    try:
        run = json_loads(raw)            # bounded: nesting, lone surrogates (glance_law.data.inputs)
        if not isinstance(run, dict):
            raise ValueError
    except (ValueError, RecursionError):   # bad JSON, or nesting too deep to parse
        run = {"unparsed": raw[:500]}  # provenance is kept, never a reason to refuse data
    return md, kind, run


def _read_metadata(path):
    with _uri_input(path) as source:
        return pq.read_metadata(source)


@contextlib.contextmanager
def _uri_input(path):
    """The source pyarrow reads: the local path itself, or an open store file (closed after)."""
    source = _uri.open_input(path)
    try:
        yield source
    finally:
        if source is not path:
            source.close()


#: Optional columns read whenever a file has them, whatever ``columns`` asks for: they say which
#: arm a row belongs to (several target models are kept apart: glance_law.data.arms) and at which
#: depth a round cut at the end of an output was drafted (glance_law.data.selection.with_drafted_horizons:
#: without it a projected read would count a last round that accepted 0 as a round that drafted nothing)
#: and whether the rounds are in decoding order (round_order: analyses that need the order refuse the rest).
ALWAYS_READ = ("target", "drafted_horizon", "round_order")

#: Rows per batch when ``read_logs(keep=...)`` samples a file.
KEEP_BATCH_ROWS = 8192


#: What prompt-level logs without rounds are, in the one-line refusal of a per-step analysis.
PROMPTS_ONLY = ("the inputs hold per-turn counts without per-step lengths (per question and turn: new_tokens, "
                "verification steps, wall time; e.g. the EAGLE/Medusa/Hydra repositories' own answers, which log "
                "per-turn idxs and no accept_lengths, or glance-log's prompts-*.parquet alone): prompt-level rows "
                "only, no per-round rows")
#: What can be run on them instead (the refusal's fix).
PROMPTS_ONLY_FIX = ("on them, python -m glance_law.fit PATHS gives tokens per step (new_tokens / rounds) per turn and "
                    "prompt and the timing ledger against a baseline among the inputs (or --timing BASELINE_GLOB), "
                    "and python -m glance_law.report its summary and timing sections; the per-round analyses "
                    "(law, tail, order, reduce, policy replay) need per-step accept_lengths: rerun with Spec-Bench's "
                    "evaluation scripts or glance-log")


class PromptsOnlyError(LogError):
    """The inputs of a round-level read hold prompt rows only (:data:`PROMPTS_ONLY`): the commands
    that can use prompt rows (fit, report) catch it and analyse the per-turn counts instead."""


def per_turn_only(logs: LogSet) -> bool:
    """Whether a rounds LogSet holds no drafted round (horizon > 0) while its inputs carry prompt
    rows: a speculative arm logged per turn only, beside a baseline logged per step."""
    f = logs.frame
    if not any(fi.kind == S.KIND_PROMPTS for fi in logs.other) or "horizon" not in f.columns:
        return False
    return not bool((f["horizon"].to_numpy() > 0).any())


#: What logs whose every round is autoregressive are, in the one-line refusal of a per-step analysis.
BASELINE_ONLY = ("every round is autoregressive (horizon 0, nothing drafted: an autoregressive baseline such as "
                 "Spec-Bench's vanilla answers, drafter 'ar')")
#: What can be run on them instead.
BASELINE_ONLY_FIX = ("there is no drafted round to reduce, fit the law on or replay; they are the timing ledger's "
                     "baseline: python -m glance_law.fit SPECULATIVE_PATHS --timing THESE_PATHS (or both among the "
                     "inputs), and python -m glance_law.fit THESE_PATHS gives their tokens per step per task")


def baseline_only(logs: LogSet) -> bool:
    """Whether a rounds LogSet holds rounds, none drafted (horizon 0 and no drafted depth), and no
    prompt rows of another run: an autoregressive baseline alone."""
    f = logs.frame
    if not len(f) or "horizon" not in f.columns or (f["horizon"].to_numpy() > 0).any():
        return False
    if "drafted_horizon" in f.columns and (pd.to_numeric(f["drafted_horizon"], errors="coerce").fillna(0) > 0).any():
        return False
    runs = set(f["run_id"].astype(str)) if "run_id" in f.columns else set()
    return all(str(dict(fi.run).get("run_id")) in runs for fi in logs.other if fi.kind == S.KIND_PROMPTS)


def require_steps(logs: LogSet) -> LogSet:
    """``logs`` itself, or :class:`PromptsOnlyError` when its speculative arms are per-turn counts only
    (:func:`per_turn_only`), or :class:`LogError` when every round is autoregressive
    (:func:`baseline_only`): what a per-step analysis (reduce, the policy replay) calls first."""
    if baseline_only(logs):
        where = list(dict.fromkeys(fi.path for fi in logs.files))
        raise LogError(", ".join(where[:3]) + (" ..." if len(where) > 3 else ""), BASELINE_ONLY, BASELINE_ONLY_FIX)
    if per_turn_only(logs):
        where = [fi.path for fi in logs.other if fi.kind == S.KIND_PROMPTS]
        raise PromptsOnlyError(", ".join(where[:3]) + (" ..." if len(where) > 3 else ""), PROMPTS_ONLY,
                               PROMPTS_ONLY_FIX)
    return logs


def _read_one(path: Path, kind: str, md, columns: Sequence[str] | None, keep=None) -> pa.Table:
    """Read, type-check and value-check one file of ``kind``; returns contract-typed Arrow.
    ``keep``: see :func:`read_logs` (the values of the rows it keeps are checked, the others dropped first)."""
    schema = md.schema.to_arrow_schema()
    present = list(schema.names)
    contract = {c.name: c for c in S.columns(kind)}
    missing = [n for n in S.required_names(kind) if n not in present]
    if missing:
        raise LogError(path, "required column is missing",
                       f"the {kind} contract requires {', '.join(S.required_names(kind))} "
                       "(see docs/schema.md); re-log with glance-log or add the column", column=missing[0])
    if columns is None:
        to_read = present
    else:
        key = S.ROUND_KEY if kind == S.KIND_ROUNDS else (S.PROMPT_KEY if kind == S.KIND_PROMPTS else ())
        wanted = dict.fromkeys(list(S.required_names(kind)) + list(key) + list(columns) + list(ALWAYS_READ))
        to_read = [n for n in wanted if n in present]
    if md.num_rows == 0:
        raise LogError(path, "the file has no rows", "delete the empty file or rerun the logger")
    for name in to_read:
        if name in contract:
            p = S.check_type(kind, name, schema.field(name).type)
            if p is not None:
                raise LogError(path, p.problem, p.fix, p.column)
    strings = [n for n in to_read if n in contract and contract[n].family == S.STRING]
    try:
        with _uri_input(path) as source:
            pf = pq.ParquetFile(source, read_dictionary=strings, metadata=md, page_checksum_verification=True)
            try:
                if keep is None:
                    table = pf.read(columns=to_read, use_threads=md.num_row_groups > 1)
                else:           # batch by batch: a sample of a large file never holds its list columns whole
                    table = pa.concat_tables([
                        t.filter(keep(t)) for t in (pa.Table.from_batches([b]) for b in pf.iter_batches(
                            batch_size=KEEP_BATCH_ROWS, columns=to_read, use_threads=False))])
            finally:
                pf.close()
    except _uri.StoreError as exc:
        raise LogError(path, exc.problem, exc.fix) from None
    except Exception as exc:  # noqa: BLE001
        raise LogError(path, f"could not be read ({str(exc).splitlines()[0][:120]})",
                       "the file may be truncated or corrupt; delete it and rerun the logger "
                       "for its prompts") from None
    p = S.check_values(kind, table)
    if p is not None:
        raise LogError(path, p.problem, p.fix, p.column)
    return _cast_to_contract(path, kind, table)


def _cast_to_contract(path, kind: str, table: pa.Table) -> pa.Table:
    known = {c.name: c for c in S.columns(kind)}
    dict_type = pa.dictionary(pa.int32(), pa.string())
    cols, fields = [], []
    for name in table.column_names:
        arr = table.column(name)
        col = known.get(name)
        if col is not None:
            try:
                if col.family == S.STRING:
                    if not pa.types.is_dictionary(arr.type):
                        arr = arr.cast(pa.string()).dictionary_encode()
                    if arr.type != dict_type:
                        arr = arr.cast(dict_type)
                elif arr.type != col.type:
                    arr = arr.cast(col.type)  # safe cast: raises on overflow
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise LogError(path, f"values do not fit {col.type} ({str(exc).splitlines()[0][:100]})",
                               "write the column with the contract type (see docs/schema.md)",
                               column=name) from None
        cols.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


# --------------------------------------------------------------------------
# duplicates (the key arithmetic lives in glance_law.data.keys)
# --------------------------------------------------------------------------

def _check_duplicates(frame: pd.DataFrame, file_idx: np.ndarray, infos: list, kind: str,
                      skip_bad: bool):
    """Raise on (or, with skip_bad, drop whole files with) duplicate keys."""
    key = S.ROUND_KEY if kind == S.KIND_ROUNDS else S.PROMPT_KEY
    k = composite_key(frame, key)
    if not has_duplicates(k):
        return frame, infos, []
    bad = duplicate_files(k, file_idx)
    what = "rounds" if kind == S.KIND_ROUNDS else "prompts"
    fix = (f"each ({', '.join(key)}) may occur once; remove the repeated part file, or give separate runs distinct "
           "run_id values")
    if "task" in frame.columns and not has_duplicates(composite_key(frame, (*key, "task"))):
        fix = (f"each ({', '.join(key)}) may occur once, and these differ only in task: prompt ids that restart in "
               "each task are not one prompt; make prompt_id unique across tasks (task/id, as python -m "
               "glance_law.ingest does for GLANCE round logs)")
    errors = []
    for f in sorted(bad):
        n, row, other = bad[f]
        r = frame.iloc[row]
        eg = ", ".join(f"{c}={r[c]}" for c in key)
        if other < 0:
            problem = f"{n} duplicate {what}: rows share a key within this file (e.g. {eg})"
        else:
            problem = f"{n} duplicate {what}: keys already present in {infos[other].path} (e.g. {eg})"
        errors.append((f, LogError(infos[f].path, problem, fix, column=key)))
    if not skip_bad:
        raise errors[0][1]
    drop = np.isin(file_idx, [f for f, _ in errors])
    frame = frame.loc[~drop].reset_index(drop=True)
    for name in frame.columns:
        if isinstance(frame[name].dtype, pd.CategoricalDtype):
            frame[name] = frame[name].cat.remove_unused_categories()
    gone = {f for f, _ in errors}
    return frame, [fi for i, fi in enumerate(infos) if i not in gone], [(infos[f].path, str(e)) for f, e in errors]


# --------------------------------------------------------------------------
# read_logs
# --------------------------------------------------------------------------

def read_logs(paths, kind: str = S.KIND_ROUNDS, columns: Sequence[str] | str | None = None,
              skip_bad: bool = False, horizon=None, chain=None, keep=None) -> LogSet:
    """Read every file of ``kind`` among ``paths`` (files, folders, globs) into one frame.

    ``columns``: the columns to read; the contract's required and key columns are
    always read too (the checks need them), and ``target`` where a file has it; None reads
    every column of every file. Where the files' ``glance.run`` documents name different
    target models, rows without a ``target`` take their file's (see ``notes``).
    Files of other kinds are listed in ``LogSet.other``, not read. String columns
    come back as pandas categoricals. ``condition`` absent or null reads as
    ``"matched"`` and ``drafter`` as ``"unknown"`` (rounds and prompts). An
    optional column absent from some files reads as null there (see ``notes``).
    ``horizon``: for foreign logs imported in memory, the deepest draft offset L overriding the
    method table (an int, or a mapping KEY -> L: :func:`glance_law.data.importers.import_logs`).
    ``chain``: drafter names (``"*"``: every drafter) declared to have drafted one top-1 chain
    (``--chain``): their rounds read with budget = horizon, with a note
    (:func:`glance_law.data.declare.declare_chain`).
    ``keep``: a function of one file's Arrow table returning a boolean mask of the rows to keep (a
    sample of a large log: only the kept rows are checked and converted to pandas; Parquet files only).

    A bad file (not Parquet, empty, wrong or missing metadata, missing or mistyped
    column, out-of-range value, duplicate key within or across files) raises
    :class:`LogError` naming the file, the column and the fix - unless ``skip_bad``,
    in which case the file is left out and listed in ``LogSet.skipped`` with its
    reason. A duplicate key across files is blamed on the later file.
    """
    S.columns(kind)
    if isinstance(columns, str):
        columns = [columns]
    found: list = []
    files = expand_paths(paths, found if skip_bad else None)
    tables, infos, skipped, other = [], [], list(found), []
    files, foreign = split_foreign(files)
    notes_in: list[str] = []
    if foreign:
        _read_foreign(foreign, kind, columns, skip_bad, tables, infos, skipped, other, notes_in, horizon)
    for path, got in zip(files, _load_all(files, kind, columns, skip_bad, keep)):
        if isinstance(got, LogError):
            if not skip_bad:
                raise got from None
            skipped.append((str(path), str(got)))
        elif isinstance(got, FileInfo):
            other.append(got)
        else:
            table, run = got
            tables.append(table)
            infos.append(FileInfo(str(path), kind, table.num_rows, run))
    if not tables:
        if skipped:
            raise LogError(None, f"every {kind} file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                           "fix the files or point at other logs")
        kinds = sorted({f.kind for f in other})
        found = f" (found only {', '.join(kinds)} files)" if kinds else ""
        where = [str(p) for p in list(files) + list(foreign)]
        where_s = ", ".join(where[:3]) + (" ..." if len(where) > 3 else "")
        if kind == S.KIND_ROUNDS and kinds == [S.KIND_PROMPTS]:
            raise PromptsOnlyError(where_s, PROMPTS_ONLY, PROMPTS_ONLY_FIX)
        raise LogError(where_s, f"no {kind} files among the inputs{found}",
                       f"pass the {kind}-*.parquet parts that glance-log writes")
    notes = notes_in + _absence_notes(tables)
    if columns is not None:
        everywhere = set().union(*(t.column_names for t in tables))
        contract = {c.name for c in S.columns(kind)}
        unknown = [c for c in columns if c not in everywhere and c not in contract]
        if unknown:
            raise LogError(None, f"no file has the column(s) {', '.join(unknown)}, and they are not "
                                 f"columns of the {kind} contract",
                           "check the spelling (see docs/schema.md for the column names)")
    frame, file_idx = _concat(tables)
    if kind in (S.KIND_ROUNDS, S.KIND_PROMPTS):
        _fill_targets(frame, file_idx, infos, notes)
    if kind in (S.KIND_ROUNDS, S.KIND_PROMPTS):
        for name, default in S.FILLED_WHEN_NULL.items():
            if name not in frame.columns:
                frame[name] = pd.Categorical.from_codes(np.zeros(len(frame), np.int8), categories=[default])
            elif frame[name].isna().any():
                n_null = int(frame[name].isna().sum())
                s = frame[name]
                if default not in s.cat.categories:
                    s = s.cat.add_categories([default])
                frame[name] = s.fillna(default)
                notes.append(f"{n_null} row(s) without a {name} read as {default!r}")
        frame, infos, dskip = _check_duplicates(frame, file_idx, infos, kind, skip_bad)
        skipped.extend(dskip)
        if not infos:
            raise LogError(None, f"every {kind} file was bad ({len(skipped)} skipped); first: {skipped[0][1]}",
                           "fix the files or point at other logs")
    if chain and kind == S.KIND_ROUNDS:
        from glance_law.data.declare import declare_chain
        frame, declared = declare_chain(frame, chain)
        notes += declared
    return LogSet(kind, frame, tuple(infos), tuple(skipped), tuple(other), tuple(notes))


def _fill_targets(frame: pd.DataFrame, file_idx: np.ndarray, infos: list, notes: list) -> None:
    """Where the files' ``glance.run`` documents name different target models, rows without a
    ``target`` take their file's (so the analyses keep the targets apart; glance_law.data.arms).
    Logs of one target (or naming none) are left as they are."""
    from glance_law.data.arms import run_targets
    per_file = run_targets([fi.run for fi in infos])
    known = {t for t in per_file if t is not None}
    have = set(frame["target"].dropna().astype(str)) if "target" in frame.columns else set()
    if len(known | have) < 2 or not known:
        return
    from_meta = pd.Series(np.asarray(per_file, dtype=object)[file_idx], index=frame.index)
    if "target" in frame.columns:
        miss = frame["target"].isna().to_numpy() & from_meta.notna().to_numpy()
        if not miss.any():
            return
        filled = frame["target"].astype(object).where(~miss, from_meta)
    else:
        miss = from_meta.notna().to_numpy()
        filled = from_meta
    frame["target"] = pd.Categorical(filled)
    notes.append(f"target: {int(miss.sum())} row(s) take the target model their file's glance.run names "
                 f"({', '.join(sorted(known))})")


def split_foreign(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """(contract Parquet files, foreign logs to import: .jsonl / .jsonl.gz / .prom ..., and files of
    any other name whose records say they are one: an SSE capture saved as .txt,
    :func:`glance_law.data.importers.common.reads_as_foreign`); URIs among them are imported in
    place (glance_law.data.importers reads them through glance_law.data.uri)."""
    from glance_law.data.importers.common import reads_as_foreign
    foreign = [p for p in files if reads_as_foreign(p)]      # by suffix, or by the records whatever the name
    return ([p for p in files if p not in foreign], foreign) if foreign else (files, [])


def _read_foreign(foreign, kind, columns, skip_bad, tables, infos, skipped, other, notes, horizon=None) -> None:
    """Import foreign logs in memory (glance_law.data.importers) and add their tables, one per
    source file, as if read from contract files; the import and its oddities become notes."""
    from glance_law.data.importers import import_logs
    imp = import_logs(foreign, skip_bad=skip_bad, horizon=horizon)
    notes.append(f"imported {len(imp.sources)} file(s) as {imp.format} in memory (glance_law.data.importers; "
                 "python -m glance_law.ingest writes them as contract Parquet)")
    notes.extend(imp.notes)
    skipped.extend(imp.skipped)
    whole = imp.rounds_table if kind == S.KIND_ROUNDS else imp.prompts_table if kind == S.KIND_PROMPTS else None
    start = 0
    required = set(S.required_names(kind))
    for path, _fmt, n_r, n_p, run in imp.parts:
        n = n_r if kind == S.KIND_ROUNDS else n_p
        other_n = n_p if kind == S.KIND_ROUNDS else n_r
        other_kind = S.KIND_PROMPTS if kind == S.KIND_ROUNDS else S.KIND_ROUNDS
        if other_n:
            other.append(FileInfo(path, other_kind, other_n, run))
        if n == 0 or whole is None:
            continue
        part = whole.slice(start, n)
        start += n
        keep = [c for c in part.column_names if c in required or part.column(c).null_count < n]
        if columns is not None:
            key = S.ROUND_KEY if kind == S.KIND_ROUNDS else S.PROMPT_KEY
            wanted = set(S.required_names(kind)) | set(key) | set(columns) | set(ALWAYS_READ)
            keep = [c for c in keep if c in wanted]
        part = part.select(keep)
        try:
            p = S.check_values(kind, part)
            if p is not None:
                raise LogError(path, p.problem, p.fix, p.column)
            part = _cast_to_contract(path, kind, part)
        except LogError as exc:
            exc = exc if exc.path is not None else exc.at(path)
            if not skip_bad:
                raise exc from None
            skipped.append((path, str(exc)))
            continue
        tables.append(part)
        infos.append(FileInfo(path, kind, part.num_rows, run))


def _load_one(path: Path, kind: str, columns, keep=None):
    """(table, run) for a file of ``kind``, a FileInfo for another kind, or the LogError."""
    try:
        md, fkind, run = file_meta(path)
        if fkind != kind:
            return FileInfo(str(path), fkind, md.num_rows, run)
        return _read_one(path, kind, md, columns, keep), run
    except LogError as exc:
        return exc if exc.path is not None else exc.at(path)


def _load_all(files: list[Path], kind: str, columns, skip_bad: bool, keep=None) -> list:
    """:func:`_load_one` over the files, in input order, several at a time in threads
    (Arrow releases the GIL). Without skip_bad, reading stops at the first bad file."""
    from concurrent.futures import ThreadPoolExecutor
    out: list = []
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1, len(files)))) as pool:
        futures = [pool.submit(_load_one, p, kind, columns, keep) for p in files]
        for f in futures:
            out.append(f.result())
            if isinstance(out[-1], LogError) and not skip_bad:
                for g in futures:
                    g.cancel()
                break
    return out


def _absence_notes(tables: list[pa.Table]) -> list[str]:
    """Notes for optional columns that some files have and others lack (read as null)."""
    notes = []
    if len(tables) < 2:
        return notes
    names = list(dict.fromkeys(n for t in tables for n in t.column_names))
    for name in names:
        if name in S.FILLED_WHEN_NULL:
            continue
        lacking = [t for t in tables if name not in t.column_names]
        if lacking:
            rows = sum(t.num_rows for t in lacking)
            notes.append(f"column {name!r} is absent from {len(lacking)} of {len(tables)} files: "
                         f"{rows} row(s) read as null")
    return notes


def _concat(tables: list[pa.Table]) -> tuple[pd.DataFrame, np.ndarray]:
    """One pandas frame from the per-file tables (dictionaries unified; the tables'
    memory is released column by column) and each row's file index."""
    sizes = [t.num_rows for t in tables]
    try:
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise LogError(None, f"files disagree on a column's type ({str(exc).splitlines()[0][:160]})",
                       "a column outside the contract must have one type in every file") from None
    tables.clear()  # drop the per-file references so self_destruct can free memory
    pool = pa.default_memory_pool()
    pool.release_unused()   # the checks' freed buffers go back to the system before the conversion, and
    frame = table.to_pandas(split_blocks=True, self_destruct=True)
    del table
    pool.release_unused()   # the table's after it, not once the analyses have stacked their arrays on top
    file_idx = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    return frame, file_idx


def read_rounds(paths, columns: Sequence[str] | None = None, skip_bad: bool = False) -> pd.DataFrame:
    """Convenience: the rounds frame of :func:`read_logs`."""
    return read_logs(paths, S.KIND_ROUNDS, columns, skip_bad).frame


def read_prompts(paths, columns: Sequence[str] | None = None, skip_bad: bool = False) -> pd.DataFrame:
    """Convenience: the prompts frame of :func:`read_logs`."""
    return read_logs(paths, S.KIND_PROMPTS, columns, skip_bad).frame
