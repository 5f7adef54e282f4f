"""Shared plumbing of the importers: reading JSON lines (plain or gzip), format detection,
the per-file result, run identifiers and the horizon override.

No torch, no analysis: records in, contract frames and one-line notes out. Every oddity of
the input is reported in a note or refused with a :class:`glance_law.io.LogError` naming
the file (and line) and what to do.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from glance_law.data import inputs
from glance_law.data.tables import LogError

#: Formats an importer reads (``format=`` / the ingest CLI's FORMAT), with what they are.
FORMATS: Mapping[str, str] = {
    "spec-bench": "FastChat model_answer JSONL of Spec-Bench, EAGLE, Medusa, Hydra and forks",
    "glance": "GLANCE round-log rows (the decoder's on_round dict plus task and prompt)",
    "vllm": "vLLM Prometheus scrapes of the spec-decode counters, or OpenAI-server responses with "
            "metrics.speculative_decoding",
    "sglang": "SGLang /generate responses with meta_info.spec_verify_ct / spec_accept_length",
}
#: Auxiliary inputs recognised beside logs (used, not imported as rounds).
QUESTIONS = "spec-bench-questions"

#: File names an importer reads when a folder is given (``*.parquet`` are contract logs).
FOREIGN_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".prom", ".prom.gz")


def supported_line() -> str:
    return "supported formats: " + "; ".join(f"{k} ({v})" for k, v in FORMATS.items())


def is_foreign(path) -> bool:
    """Whether ``path`` names a file the importers read (by suffix; the format itself is
    detected from the records)."""
    name = str(path).lower()
    return name.endswith(FOREIGN_SUFFIXES)


#: How the records of an importable log can begin (after blank space): JSON, an SSE stream, gzip,
#: Prometheus text exposition.
_RECORD_STARTS = (b"{", b"[", b"data:", b"event:", b"id:", b"# HELP", b"# TYPE", b"\x1f\x8b")


def reads_as_foreign(path) -> bool:
    """Whether ``path`` is a log the importers read: by its suffix (:func:`is_foreign`), or, whatever
    its name, by its first bytes: a file that is not Parquet (no ``PAR1`` magic) whose first bytes
    begin JSON records, an SSE stream (``data:``), gzip or Prometheus text (an SSE capture saved as
    ``.txt``, JSON lines saved as ``.parquet``). A file that cannot be read here, a FIFO or a device
    is left to the Parquet reader, which names the problem; store objects named ``*.parquet`` are not
    opened (one request each)."""
    import stat as _stat

    from glance_law.data import uri
    if is_foreign(path):
        return True
    s = str(path)
    if uri.is_uri(s):
        if s.endswith(".parquet"):
            return False
        try:
            head = uri.read_small(s, 64) or b""
        except (uri.StoreError, OSError):
            return False
    else:
        try:
            if not _stat.S_ISREG(os.stat(s).st_mode):
                return False
            with open(s, "rb") as fh:
                head = fh.read(64)
        except OSError:
            return False
    if head[:4] == b"PAR1" or not head:
        return False
    return head.lstrip(b" \t\r\n\xef\xbb\xbf").startswith(_RECORD_STARTS)


def open_bytes(path) -> bytes:
    """The file's non-blank lines (:class:`glance_law.data.inputs.Text`: bytes that map their
    lines back to the file's line numbers), gunzipped in a stream when it starts with the gzip
    magic (whatever its name), through the bounded reader (:mod:`glance_law.data.inputs`:
    FIFOs and devices refused, lines of at most 64 MiB, corrupt or truncated gzip refused)."""
    from glance_law.data import uri
    p = str(path) if uri.is_uri(str(path)) else Path(path)
    try:
        return inputs.read_text(p)
    except uri.StoreError as exc:
        raise LogError(p, exc.problem, exc.fix) from None
    except OSError as exc:
        raise LogError(p, f"cannot be opened ({exc.strerror})", "check the path and permissions") from None


def _lineno(raw, i: int) -> int:
    return raw.lineno(i) if isinstance(raw, inputs.Text) else i


@dataclass
class Lines:
    """The parsed records of one JSON-lines file, with the corrupt lines found."""

    path: str
    records: list            # (line number, object)
    bad: list                # (line number, message)
    text: bytes | None = field(default=None, repr=False)   # the text the records were parsed from

    def without_true(self) -> bool:
        """Whether no record can hold a JSON ``true``: no ``true`` in :attr:`text` follows ``[``, ``,`` or
        ``:`` (blanks between skipped), as every value inside an object or array does. False when the
        text is not kept. A ``true`` inside a string may make it False, never a real one True."""
        raw = self.text
        if raw is None:
            return False
        for i in inputs.byte_runs(raw, (b"t", b"r", b"u", b"e"), anchor=2):      # at the rarest letter
            j = i - 1
            while j >= 0 and raw[j] in b" \t\r\n":
                j -= 1
            if j < 0 or raw[j] in b"[,:":
                return False
        return True


_SSE_FIELDS = (b"event:", b"id:", b"retry:", b":")


def sse_payload(line: bytes) -> bytes | None:
    """The JSON of one line of a server-sent-events capture (``data: {...}``), None for the
    lines that carry none (``data: [DONE]``, ``event:``/``id:``/``retry:`` fields, ``:``
    comments); any other line is returned as it is."""
    s = line.strip()
    if s.startswith(b"data:"):
        s = s[5:].strip()
        return None if s in (b"[DONE]", b"") else s
    if s.startswith(_SSE_FIELDS):
        return None
    return line


def is_sse(raw: bytes) -> bool:
    """Whether ``raw`` is a streamed (server-sent events) capture: a ``data:`` line among its first."""
    head = raw[:1 << 16].lstrip()
    return head.startswith(b"data:") or b"\ndata:" in head


def read_json_lines(path, skip_bad: bool, raw: bytes | None = None) -> Lines:
    """Every non-blank line parsed as JSON (within :mod:`glance_law.data.inputs`' bounds:
    nesting, lone surrogates). A corrupt line raises (file and line number, the fix) unless
    ``skip_bad``, which skips it and lists it. A file holding one JSON array (or one object) is
    read as its elements; a streamed capture (``data: {...}`` lines) as the JSON of its
    ``data:`` lines (``data: [DONE]``, events and comments skipped)."""
    raw = open_bytes(path) if raw is None else raw
    path = str(path)
    if is_sse(raw):
        return _read_lines(path, raw, skip_bad, sse_payload)
    edges = raw[:1].isspace() or raw[-1:].isspace()       # else no copy of the text is stripped
    if (raw.lstrip()[:1] if edges else raw[:1]) == b"[":
        try:
            data = inputs.loads(raw)
            return Lines(path, [(_lineno(raw, 1), d) for d in data], [], raw)
        except inputs.JSONLimitError as exc:
            raise LogError(path, f"line {_lineno(raw, 1)}: not valid JSON ({exc})",
                           "repair the file; glance-law reads JSON nested at most "
                           f"{inputs.MAX_JSON_DEPTH} levels deep") from None
        except ValueError:
            pass  # not one array: fall through to lines
    body = raw.strip() if edges else raw
    if body[:1] == b"{":
        # fast path: every line one object, no blank or corrupt line -> one JSON array parse
        # (any problem, a bound included, falls through to the line-by-line parse, which finds
        # and numbers it)
        try:
            data = inputs.loads_lines(body)
            at = raw.linenos(len(data)) if isinstance(raw, inputs.Text) else range(1, len(data) + 1)
            return Lines(path, list(zip(at, data)), [], raw)
        except ValueError:
            pass
    return _read_lines(path, raw, skip_bad, None)


def _read_lines(path: str, raw: bytes, skip_bad: bool, payload) -> Lines:
    recs, bad = [], []
    loads = inputs.loads
    for k, line in enumerate(raw.split(b"\n"), 1):
        i = _lineno(raw, k)
        if payload is not None:
            line = payload(line)
            if line is None:
                continue
        if not line.strip():
            continue
        try:
            recs.append((i, loads(line)))
        except ValueError as exc:
            what = "NUL bytes" if b"\x00" in line else str(exc).split(":")[0]
            if not skip_bad:
                raise LogError(path, f"line {i}: not valid JSON ({what})",
                               "repair or delete that line, or pass --skip-bad (skip_bad=True) to skip "
                               "corrupt lines and list them") from None
            bad.append((i, what))
    return Lines(path, recs, bad, raw)


# --------------------------------------------------------------------------
# detection
# --------------------------------------------------------------------------

_ENTROPY_KEYS = ("root_entropy", "entropy", "H", "ent")
_ACCEPT_KEYS = ("accepted", "accept_len", "acceptance_length", "accepted_len", "n_accepted", "tau")
_PROM = re.compile(rb"^\s*(#\s*(HELP|TYPE)\s+)?vllm[:_]spec_decode", re.M)


def is_prometheus(raw: bytes) -> bool:
    """Whether ``raw`` is a Prometheus text exposition holding vLLM's spec-decode series."""
    head = raw[:1 << 16]
    return b"spec_decode" in head and _PROM.search(head) is not None


def classify(rec) -> str | None:
    """The format of one parsed record, or None when no importer knows its shape."""
    if not isinstance(rec, dict):
        return None
    if isinstance(rec.get("data"), dict) and ("metrics" in rec["data"] or "choices" in rec["data"]):
        rec = rec["data"]
    ch = rec.get("choices")
    if (isinstance(ch, list) and ch and isinstance(ch[0], dict)
            and any(k in ch[0] for k in ("accept_lengths", "accept_lengths:", "idxs", "decoding_steps"))):
        return "spec-bench"
    if "question_id" in rec and "turns" in rec and "choices" not in rec:
        return QUESTIONS
    meta = rec.get("meta_info")
    if isinstance(meta, dict) and any(k.startswith("spec_") for k in meta):
        return "sglang"
    m = rec.get("metrics")
    if isinstance(m, dict) and isinstance(m.get("speculative_decoding"), dict):
        return "vllm"
    if any(k in rec for k in _ENTROPY_KEYS) and any(k in rec for k in _ACCEPT_KEYS):
        return "glance"
    return None


def _shape(rec) -> str:
    if isinstance(rec, dict):
        keys = sorted(rec)
        return "keys " + ", ".join(keys[:12]) + (" ..." if len(keys) > 12 else "")
    return type(rec).__name__


def _head_lines(raw: bytes, limit: int = 200):
    """The first lines of ``raw``, without splitting the whole buffer."""
    pos = 0
    for _ in range(limit):
        if pos >= len(raw):
            return
        nl = raw.find(b"\n", pos)
        nl = len(raw) if nl < 0 else nl
        yield raw[pos:nl]
        pos = nl + 1


def detect_format(path, raw: bytes | None = None) -> str:
    """The format of a file, from its records (not its name): one of :data:`FORMATS`, or
    ``spec-bench-questions`` for a Spec-Bench ``question.jsonl``. An unknown shape raises
    :class:`LogError` with one line listing the supported formats. ``raw``: the file's
    (gunzipped) bytes when already read."""
    raw = open_bytes(path) if raw is None else raw
    if is_prometheus(raw):
        return "vllm"
    first = None
    seen = 0
    limit = None                         # the first line beyond the reader's bounds (too deep, lone surrogates)
    for k, line in enumerate(_head_lines(raw), 1):
        line = sse_payload(line)         # a streamed capture's "data: {...}" line: its JSON
        if line is None or not line.strip():
            continue
        try:
            rec = inputs.loads(line)
        except inputs.JSONLimitError as exc:
            limit = limit or (_lineno(raw, k), exc)
            continue
        except ValueError:
            if raw.lstrip()[:1] == b"[":
                try:
                    arr = inputs.loads(raw)
                except ValueError:
                    arr = None
                if isinstance(arr, list) and arr:
                    fmt = classify(arr[0])
                    if fmt:
                        return fmt
                    first = arr[0]
                break
            continue                     # a corrupt line: judge by the others
        if isinstance(rec, list) and rec:    # a JSON array on one line (json.dump of a list): its elements
            rec = next((x for x in rec if isinstance(x, dict)), rec[0])
        if first is None:
            first = rec
        fmt = classify(rec)
        if fmt is not None:
            return fmt
        seen += 1
        if seen >= 5:
            break
    if first is None and limit is not None:
        raise LogError(path, f"line {limit[0]}: not valid JSON ({limit[1]})",
                       f"repair or delete that line; glance-law reads JSON nested at most {inputs.MAX_JSON_DEPTH} "
                       "levels deep, with text strings only")
    what = "no JSON records" if first is None else f"records with {_shape(first)}"
    raise LogError(path, f"not a log format glance-law can import ({what})",
                   supported_line() + " (or contract *.parquet files)")


# --------------------------------------------------------------------------
# per-file results
# --------------------------------------------------------------------------

@dataclass
class FileResult:
    """What one importer made of one file: contract-typed Arrow tables (None: no rows of that
    kind; a pandas frame given here is typed by the contract on construction)."""

    path: str
    format: str
    rounds: object
    prompts: object
    notes: list = field(default_factory=list)
    run: dict = field(default_factory=dict)

    def __post_init__(self):
        from glance_law.data.tables import to_arrow
        for kind, name in (("rounds", "rounds"), ("prompts", "prompts")):
            v = getattr(self, name)
            if isinstance(v, pd.DataFrame):
                setattr(self, name, to_arrow(v, kind) if len(v) else None)
            elif v is not None and v.num_rows == 0:
                setattr(self, name, None)

    @property
    def n_rounds(self) -> int:
        return 0 if self.rounds is None else self.rounds.num_rows

    @property
    def n_prompts(self) -> int:
        return 0 if self.prompts is None else self.prompts.num_rows


class StoreLoc:
    """A store URI (``s3://bucket/answers/x.jsonl``, anything :mod:`glance_law.data.uri`
    reads) with the few :class:`pathlib.Path` operations the importers use; ``str()`` is the
    URI itself (credentials never appear in it: they come from the environment)."""

    __slots__ = ("uri",)

    def __init__(self, location):
        self.uri = str(location)

    def __str__(self) -> str:
        return self.uri

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, StoreLoc) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def _top(self) -> int:
        """Index in ``uri`` where the bucket/authority part ends (the root of the store)."""
        start = self.uri.find("://") + 3
        end = self.uri.find("/", start)
        return len(self.uri) if end < 0 else end

    @property
    def name(self) -> str:
        from glance_law.data import uri
        return "" if len(self.uri.rstrip("/")) <= self._top() else uri.basename(self.uri)

    @property
    def parent(self) -> StoreLoc:
        cut = self.uri.rstrip("/").rfind("/")
        return StoreLoc(self.uri[:cut]) if cut >= self._top() else self

    @property
    def parents(self) -> list:
        out, q = [], self.parent
        while q.name:
            out.append(q)
            q = q.parent
        return out

    def __truediv__(self, name: str) -> StoreLoc:
        from glance_law.data import uri
        return StoreLoc(uri.join(self.uri, name))

    def resolve(self) -> StoreLoc:
        return self

    def is_file(self) -> bool:
        from glance_law.data import uri
        try:
            return uri.size(self.uri) is not None
        except uri.StoreError:
            return False


def as_loc(path):
    """A :class:`StoreLoc` for a URI, a :class:`pathlib.Path` for a local path."""
    from glance_law.data import uri
    if isinstance(path, StoreLoc):
        return path
    return StoreLoc(path) if uri.is_uri(path) else Path(path)


def run_base(path) -> str:
    """A run identifier that depends on the file alone: its stem, prefixed by the nearest
    folder that is not ``model_answer`` (Spec-Bench's layout), e.g. ``vase/vicuna-7b-v1.3-medusa``.
    For a URI the folders are those of its key (the bucket counts as the top folder)."""
    p = as_loc(path)
    name = p.name
    for suf in (".gz", ".jsonl", ".json", ".prom"):
        if name.lower().endswith(suf):
            name = name[: -len(suf)]
    parent = next((q.name for q in p.resolve().parents if q.name and q.name != "model_answer"), "")
    return f"{parent}/{name}" if parent else name


def horizon_for(horizon, keys) -> int | None:
    """The override for a file: an int applies everywhere; a mapping is looked up by each of
    ``keys`` in order (file name, stem, run, model_id, method)."""
    if horizon is None:
        return None
    if isinstance(horizon, Mapping):
        for k in keys:
            if k is not None and str(k) in horizon:
                return int(horizon[str(k)])
        return None
    return int(horizon)


#: The help of every command's ``--horizon`` option (ingest, fit, report, reduce, policy).
HORIZON_HELP = ("for imported logs (Spec-Bench answers, ...): the deepest draft offset L, overriding the method table, "
                "for every file or for the files whose method, model_id or name is KEY (repeatable); e.g. "
                "--horizon pld=10, or --horizon eagle2=6 for an EAGLE-2 run drafted as a chain of 6")


def parse_horizon_option(values) -> int | dict | None:
    """``--horizon`` values: ``L`` (every file) or ``KEY=L`` (a method, model_id, file name or stem)."""
    if not values:
        return None
    out: dict = {}
    plain = None
    for v in values:
        s = str(v)
        key, sep, num = s.rpartition("=")
        try:
            L = int(num)
        except ValueError:
            raise LogError(None, f"--horizon {s!r}: expected L or KEY=L with an integer L",
                           "e.g. --horizon 4, or --horizon ssd=4") from None
        if L < 0:
            raise LogError(None, f"--horizon {s!r}: L must be >= 0", "L is the deepest draft offset")
        if sep:
            out[key] = L
        else:
            plain = L
    if plain is not None and not out:
        return plain
    if plain is not None:
        out.setdefault("*", plain)
    return out


def ids_list(ids, limit: int = 8) -> str:
    ids = [str(x) for x in ids]
    return ", ".join(ids[:limit]) + (f", ... ({len(ids)} in all)" if len(ids) > limit else "")


def prompts_per_task(tasks, pids, path) -> tuple[list, str | None]:
    """Prompt ids made unique across tasks where a file's ids restart per task (``task`` plus a
    dataset index, the natural layout): when one id occurs under several tasks, every prompt is
    (task, prompt) and its ``prompt_id`` becomes ``task/id`` (``LEN:task/id``, LEN the task's length,
    if a task holding '/' made two of those equal), so that rounds of two tasks' prompt 0 are not one
    prompt (the round key has no task). Returns (the ids, one note or None when the ids are unique)."""
    where: dict = {}
    for t, p in zip(tasks, pids):
        where.setdefault(p, set()).add(t)
    shared = [p for p, ts in where.items() if len(ts) > 1]
    if not shared:
        return list(pids), None
    pairs = {(t, p) for p, ts in where.items() for t in ts}
    form = "{t}/{p}" if len({f"{t}/{p}" for t, p in pairs}) == len(pairs) else "{n}:{t}/{p}"
    ids = [form.format(n=len(t), t=t, p=p) for t, p in zip(tasks, pids)]
    eg = shared[0]
    ts = sorted(where[eg])
    note = (f"{path}: prompt ids restart per task ({len(shared)} id(s) occur under several tasks, e.g. {eg!r} under "
            f"{ts[0]!r} and {ts[1]!r}): each prompt is (task, prompt), prompt_id = "
            f"{'task/id' if form == '{t}/{p}' else 'LEN:task/id (LEN: the length of the task name)'} "
            f"({len(pairs)} prompts)")
    return ids, note


def split_prompts_per_task(P: dict, R: dict, path, notes: list) -> None:
    """:func:`prompts_per_task` over an importer's per-request columns ``P`` (lists ``task``,
    ``prompt_id``) and per-round parts ``R`` (``(value, rounds)`` pairs), in place, with its note."""
    ids, note = prompts_per_task(P["task"], P["prompt_id"], path)
    if note is None:
        return
    new = dict(zip(zip(P["task"], P["prompt_id"]), ids))
    R["prompt_id"] = [(new[(t, p)], k) for (p, k), (t, _) in zip(R["prompt_id"], R["task"])]
    P["prompt_id"] = ids
    notes.append(note)


def concat(tables: list):
    """Row-wise concatenation of Arrow tables (columns missing from some read as null), or None.
    A text column that one importer dictionary-encodes and another does not (``run_id`` of
    Spec-Bench beside glance/vLLM/SGLang files) is dictionary-encoded in all of them first."""
    import pyarrow as pa
    tables = [t for t in tables if t is not None and t.num_rows]
    if not tables:
        return None
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(_unify_text(tables), promote_options="permissive")


def _unify_text(tables: list) -> list:
    import pyarrow as pa
    import pyarrow.compute as pc
    types: dict = {}
    for t in tables:
        for f in t.schema:
            types.setdefault(f.name, set()).add(f.type)
    text = (pa.types.is_string, pa.types.is_large_string, pa.types.is_null)
    mixed = {n for n, ts in types.items() if len(ts) > 1 and any(pa.types.is_dictionary(x) for x in ts)
             and all(pa.types.is_dictionary(x) or any(f(x) for f in text) for x in ts)}
    if not mixed:
        return tables
    enc = pa.dictionary(pa.int32(), pa.string())
    out = []
    for t in tables:
        for n in mixed & set(t.column_names):
            col = t.column(n)
            if not pa.types.is_dictionary(col.type):
                col = pc.dictionary_encode(col.cast(pa.string()))
            t = t.set_column(t.column_names.index(n), pa.field(n, enc), col.cast(enc))
        out.append(t)
    return out


def frame(cols: Mapping, n: int) -> pd.DataFrame:
    """A DataFrame from equal-length columns (scalars broadcast)."""
    data = {}
    for k, v in cols.items():
        if isinstance(v, (list, np.ndarray, pd.Series)):
            data[k] = v
        else:
            data[k] = [v] * n
    return pd.DataFrame(data)


_BASE_RUN: dict = {}


def file_run(**fields) -> dict:
    """The glance.run document of an imported file (provenance computed once per process)."""
    if not _BASE_RUN:
        from glance_law.data.provenance import run_metadata
        _BASE_RUN.update(run_metadata())
    from datetime import datetime, timezone
    return {**_BASE_RUN, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "imported": True, **{k: v for k, v in fields.items() if v is not None}}


def realkey(path) -> tuple:
    """A cache key of a file: (real path, mtime, size); for a URI (the URI, None, size)."""
    from glance_law.data import uri
    if isinstance(path, StoreLoc) or uri.is_uri(path):
        try:
            return (str(path), None, uri.size(str(path)))
        except uri.StoreError as exc:
            raise LogError(str(path), exc.problem, exc.fix) from None
    st = os.stat(path)
    return (os.path.realpath(path), st.st_mtime_ns, st.st_size)
