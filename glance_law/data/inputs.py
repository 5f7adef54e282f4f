"""The one bounded reader of foreign and JSON inputs (importers, ``glance-log --data`` and
``--policy``, report manifests, reduction metadata).

Every such input goes through here, so that a small hostile file cannot take the machine:

* :func:`check_regular` refuses FIFOs, devices, sockets (and links to them, ``/dev/zero``)
  before anything opens them: reading one could block forever or never end;
* :func:`read_text` streams the file (gunzipping in chunks, whatever its name), drops blank
  lines as it goes (they cost no memory) and refuses a line longer than :data:`MAX_LINE_BYTES`,
  more text than :func:`input_limit` allows (:data:`MAX_INPUT_BYTES` in all, and for gzip
  :data:`MAX_EXPANSION` times the size on disk: a bomb of short lines or of newlines; every byte
  read counts, blank lines included, so the work is bounded by the cap whatever the file holds),
  corrupt deflate data and a truncated gzip in one line; line numbers stay those of the file;
* :func:`loads` parses JSON with a depth limit (:data:`MAX_JSON_DEPTH`, checked iteratively
  before parsing: never a ``RecursionError``) and refuses strings holding lone UTF-16
  surrogates (which no file can store);
* :func:`read_json_document` reads one small JSON document (a policy, a manifest, a
  metadata record), at most :data:`MAX_DOCUMENT_BYTES`;
* :func:`as_int` / :func:`as_float` / :func:`as_count` check one field of a record and
  refuse it in one line naming the file, the line and the field.

Errors are :class:`glance_law.io.LogError` (one line, exit 2 in every CLI). The bounds are
documented in ``docs/security.md``.
"""
from __future__ import annotations

import bisect
import contextlib
import gc
import json
import math
import os
import re
import stat
import zlib

import numpy as np

from glance_law.data.tables import LogError

#: The longest line (after decompression) any text input may hold.
MAX_LINE_BYTES = 64 << 20
#: The most text (every byte after decompression, blank lines included) one input may hold; the environment
#: variable ``GLANCE_MAX_INPUT_BYTES`` (bytes, or a number with K, M, G) raises or lowers it.
MAX_INPUT_BYTES = 1 << 30
#: A gzipped input may hold at most this many times its size on disk in text (blank lines included),
#: and at least :data:`EXPANSION_FLOOR` whatever its size: JSON-lines logs gzip 3-10x, a bomb
#: 1000x. ``GLANCE_MAX_EXPANSION`` raises or lowers it. Both caps are checked as the text is
#: read, so a bomb is refused after reading the cap, not after expanding.
MAX_EXPANSION = 32
#: The text any gzipped input may hold regardless of :data:`MAX_EXPANSION`.
EXPANSION_FLOOR = 16 << 20
#: The deepest nesting of arrays and objects in one JSON value.
MAX_JSON_DEPTH = 64
#: The largest single JSON document (policy, manifest, metadata) read whole.
MAX_DOCUMENT_BYTES = 16 << 20
#: The most rounds one file's counters or histograms may expand into (vLLM scrapes and
#: histograms, SGLang histograms): one row per counted draft, so a count is refused above it.
MAX_EXPANDED_ROUNDS = 2_000_000
#: The largest draft offset (position, histogram index, horizon) a counter or histogram may name.
MAX_POSITION = 4096

_CHUNK = 1 << 20
_BLANK = b" \t\r\n"
_NONBLANK = re.compile(rb"[^ \t\r\n]")
_BLANK_AFTER = re.compile(rb"\n[ \t\r\n]")        # a line that starts with a blank (it may be blank)
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


class JSONLimitError(ValueError):
    """A JSON value beyond the reader's bounds (too deep, lone surrogates): a corrupt line to
    the importers (skipped and listed under ``skip_bad``). The message has no colon."""


def check_regular(path, what: str = "input") -> None:
    """Refuse ``path`` unless it is a regular file (links followed): a FIFO, a device
    (``/dev/zero``), a socket could block or never end. URIs are not checked here."""
    from glance_law.data import uri
    if uri.is_uri(str(path)):
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise LogError(path, "no such file", "check the path") from None
    except OSError as exc:
        raise LogError(path, f"cannot be opened ({exc.strerror})", "check the path and its permissions") from None
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
    raise LogError(path, f"is {kind}{link}, not a regular file",
                   f"pass the {what} as a regular file (a pipe or device could block or never end)")


class Text(bytes):
    """The non-blank lines of a text input joined by newlines; :meth:`lineno` maps the i-th of
    them (1-based) to its line number in the file."""

    _at: tuple = ((), ())

    def lineno(self, i: int) -> int:
        idx, shift = self._at
        k = bisect.bisect_right(idx, i) - 1
        return i + (shift[k] if k >= 0 else 0)

    def linenos(self, n: int) -> list:
        """:meth:`lineno` of the first ``n`` lines (1..n) at once."""
        idx, shift = self._at
        if not idx:
            return list(range(1, n + 1))
        i = np.arange(1, n + 1)
        k = np.searchsorted(np.asarray(idx, dtype=np.int64), i, side="right") - 1
        return (i + np.where(k >= 0, np.asarray(shift, dtype=np.int64)[np.maximum(k, 0)], 0)).tolist()


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _env_number(name: str, default: int, sizes: bool) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?" if sizes else r"(\d+(?:\.\d+)?)()", raw, re.IGNORECASE)
    if m is None or float(m.group(1)) <= 0:
        from glance_law.errors import GlanceError
        what = "a size in bytes (or with K, M, G: 2G)" if sizes else "a positive number"
        raise GlanceError(f"{name}={raw!r} is not {what}; fix or unset it")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def input_limit(gzip_size: int | None = None) -> tuple[int, str]:
    """(the most text one input may hold, the variable that sets that cap): the total cap
    (:data:`MAX_INPUT_BYTES`), and for a gzipped input of ``gzip_size`` bytes on disk also the
    expansion cap (:data:`MAX_EXPANSION` times it, at least :data:`EXPANSION_FLOOR`)."""
    total = _env_number("GLANCE_MAX_INPUT_BYTES", MAX_INPUT_BYTES, True)
    if gzip_size is None:
        return total, "GLANCE_MAX_INPUT_BYTES"
    ratio = _env_number("GLANCE_MAX_EXPANSION", MAX_EXPANSION, False)
    expand = max(EXPANSION_FLOOR, ratio * int(gzip_size))
    return (expand, "GLANCE_MAX_EXPANSION") if expand < total else (total, "GLANCE_MAX_INPUT_BYTES")


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} GiB"     # pragma: no cover


def _too_much(path, lineno: int, limit: int, var: str, gzip_size) -> LogError:
    where = f"{_size(limit)} of text, blank lines included" + (f" ({limit / max(gzip_size, 1):.0f}x its {_size(gzip_size)} gzipped)"
                                         if gzip_size is not None else "")
    return LogError(path, f"line {lineno}: holds more than {where}, the cap on one input",
                    f"split it into smaller files, or raise the cap with the environment variable {var} "
                    "(docs/your-logs.md, bounded reader)")


def _chunks(path, gzip_only: bool = False, info: dict | None = None):
    """The file's bytes in chunks of at most about 1 MiB, gunzipped (all members) when it starts
    with the gzip magic (``gzip_only``: refused when it does not). ``info`` gets ``gzip_size``
    (the size on disk) when the file is gzipped."""
    from glance_law.data import uri
    if uri.is_uri(str(path)):
        fh = uri.open_input(str(path))
    else:
        check_regular(path)
        fh = open(path, "rb")       # noqa: SIM115 - closed below
    try:
        first = fh.read(_CHUNK)
        if gzip_only and first[:2] != b"\x1f\x8b":
            raise LogError(path, "not a readable gzip file (it does not start with the gzip magic)",
                           "gzip it, or drop the .gz from its name")
        if first[:2] != b"\x1f\x8b":
            while first:
                yield first
                first = fh.read(_CHUNK)
            return
        if info is not None:
            info["gzip_size"] = fh.size() if hasattr(fh, "size") else os.fstat(fh.fileno()).st_size
        yield from _gunzip(path, first, fh)
    finally:
        fh.close()


def _gunzip(path, first: bytes, fh):
    d = zlib.decompressobj(31)
    pending = first
    try:
        while True:
            if not pending:
                pending = fh.read(_CHUNK)
                if not pending:
                    break
            out = d.decompress(pending, _CHUNK)
            pending = d.unconsumed_tail
            if out:
                yield out
            if d.eof:
                pending = d.unused_data + pending
                if not pending.strip(b"\x00"):
                    pending = fh.read(_CHUNK)
                    if not pending.strip(b"\x00"):
                        return
                d = zlib.decompressobj(31)       # the next member of a multi-member gzip
        tail = d.flush()
        if tail:
            yield tail
    except zlib.error as exc:
        raise LogError(path, f"the gzip stream is corrupt ({exc})",
                       "re-copy the file (gzip -t tells whether it is whole)") from None
    if not d.eof:
        raise LogError(path, "the gzip stream is truncated (it ends before its end-of-stream marker)",
                       "re-copy the file (gzip -t tells whether it is whole)")


def _too_long(path, lineno: int) -> LogError:
    return LogError(path, f"line {lineno}: longer than {MAX_LINE_BYTES >> 20} MiB",
                    "split the records one per line (JSON lines); glance-law reads lines of at most "
                    f"{MAX_LINE_BYTES >> 20} MiB")


def _all_blank(buf) -> bool:
    """Whether ``buf`` holds only blanks: an edge tells at once for text, byte counts (C speed, 10x a
    regex scan) for a run of blanks (a bomb of newlines is read 1 MiB at a time through here)."""
    if not buf:
        return True
    if buf[0] not in _BLANK or buf[-1] not in _BLANK:
        return False
    n = buf.count(b"\n")
    return n == len(buf) or n + buf.count(b" ") + buf.count(b"\t") + buf.count(b"\r") == len(buf)


def read_text(path, gzip_only: bool = False) -> Text:
    """The non-blank lines of a (possibly gzipped) text file, streamed: a line longer than
    :data:`MAX_LINE_BYTES` is refused (file and line), and so is more text in all than
    :func:`input_limit` allows (a decompression bomb of many short lines), corrupt or
    truncated gzip data, FIFOs and devices (and, with ``gzip_only``, a file that is not gzip).
    A UTF-8 byte-order mark is dropped."""
    out = bytearray()
    at = _LineMap(out)
    buf = bytearray()
    first = True
    info: dict = {}
    limit = None
    seen = 0              # every byte read (decompressed), blank lines included: what the caps count
    for chunk in _chunks(path, gzip_only, info):
        seen += len(chunk)
        if first:
            chunk = chunk[3:] if chunk[:3] == b"\xef\xbb\xbf" else chunk
            first = False
            limit, var = input_limit(info.get("gzip_size"))
        if seen > limit:      # a bomb of blank lines costs the cap's reading at most, like one of records
            raise _too_much(path, at.lineno(), limit, var, info.get("gzip_size"))
        buf += chunk
        pos = 0
        if _all_blank(buf):                         # blanks only: count the lines, keep nothing
            at.skip += buf.count(b"\n")
            del buf[:buf.rfind(b"\n") + 1]
            continue
        while True:
            cut = buf.rfind(b"\n", pos) + 1
            if pos < cut <= pos + MAX_LINE_BYTES and buf[pos] not in _BLANK and not _BLANK_AFTER.search(buf, pos, cut):
                # whole lines, none blank (none starts with a blank), none too long: kept at once
                # (not counted: the line numbers shift only where blank lines are dropped)
                at.keep()
                with memoryview(buf) as view:
                    out += view[pos:cut]
                pos = cut
            m = _NONBLANK.search(buf, pos)
            if m is None:
                at.skip += buf.count(b"\n", pos)
                cut = buf.rfind(b"\n", pos) + 1
                del buf[:max(cut, pos)]
                break
            s = m.start()
            at.skip += buf.count(b"\n", pos, s)
            nl = buf.rfind(b"\n", pos, s)
            start = pos if nl < 0 else nl + 1
            end = buf.find(b"\n", s)
            if end < 0:
                del buf[:start]
                if len(buf) > MAX_LINE_BYTES:
                    raise _too_long(path, at.lineno())
                break
            if end - start > MAX_LINE_BYTES:
                raise _too_long(path, at.lineno())
            at.keep()
            with memoryview(buf) as view:
                out += view[start:end]
            out += b"\n"
            pos = end + 1
    if buf.translate(None, _BLANK):
        at.keep()
        out += buf.strip(_BLANK)
    if out.endswith(b"\n"):
        del out[-1:]
    text = Text(out)
    del out
    text._at = (tuple(at.idx), tuple(at.shift))
    return text


class _LineMap:
    """:func:`read_text`'s account of the file's line numbers: ``skip`` blank lines dropped so
    far; the lines kept are those ``out`` holds (each ends with a newline), counted only when a
    line number is needed (a shift to note, an error), each byte at most once."""

    def __init__(self, out: bytearray):
        self.out, self.skip, self.kept, self.counted = out, 0, 0, 0
        self.idx: list = []
        self.shift: list = []

    def _kept(self) -> int:
        self.kept += self.out.count(b"\n", self.counted)
        self.counted = len(self.out)
        return self.kept

    def lineno(self) -> int:
        """The file's line number of the next line not yet kept or dropped."""
        return self._kept() + 1 + self.skip

    def keep(self) -> None:
        """The next line (and the lines after it up to the next dropped one) is kept: notes the
        shift from its place among the kept lines to its line number when that changed."""
        if self.skip != (self.shift[-1] if self.shift else 0):
            self.idx.append(self._kept() + 1)
            self.shift.append(self.skip)


# --------------------------------------------------------------------------- JSON

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW = re.compile(rb"\\u[dD][c-fC-F]")
_RAW_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
_OPEN, _CLOSE, _QUOTE, _BACKSLASH = 91, 93, 34, 92
_BLOCK = 1 << 24


def byte_runs(data: bytes, run: tuple, anchor: int = 0) -> list:
    """Where in ``data`` a run of ``len(run)`` bytes starts whose k-th byte is one of ``run[k]``
    (``(b"t", b"r", b"u", b"e")``: where ``b"true"`` starts), in order. Found with numpy at the
    ``anchor``-th byte (a single byte, best the rarest), 16 MiB at a time: no per-byte Python, and
    faster than a regex or a multi-byte ``find`` where that byte is rare. Overlapping runs are all
    listed (none can overlap where no byte of a later set may equal the first byte)."""
    b = np.frombuffer(data, np.uint8)
    (key,) = run[anchor]
    width = len(run)
    out: list = []
    for lo in range(anchor, len(b) - width + anchor + 1, _BLOCK):
        at = np.flatnonzero(b[lo:min(lo + _BLOCK, len(b) - width + anchor + 1)] == key) + (lo - anchor)
        for k, allowed in enumerate(run):
            if k != anchor and at.size:
                at = at[_byte_table(allowed)[b[at + k]]]
        out.extend(at.tolist())
    return out


_TABLES: dict = {}


def _byte_table(allowed: bytes) -> np.ndarray:
    """A 256-entry mask of the bytes in ``allowed``."""
    if allowed not in _TABLES:
        t = np.zeros(256, dtype=bool)
        t[np.frombuffer(allowed, np.uint8)] = True
        _TABLES[allowed] = t
    return _TABLES[allowed]


def json_depth(data: bytes) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON text, counted without recursion (strings
    blanked first, as :data:`_STRING` finds them)."""
    fast = _quick_depth(data)
    return fast if fast is not None else _blanked_depth(data)


def _quick_depth(data: bytes) -> int | None:
    """:func:`json_depth` over the bytes at once (numpy; the brackets outside the strings that
    the unescaped quotes delimit), or None where that could differ from blanking the strings:
    an unterminated string, or an escaped quote outside every string (neither is valid JSON)."""
    b = np.frombuffer(data, np.uint8)
    q = np.flatnonzero(b == _QUOTE)
    esc = q[(q > 0) & (b[np.maximum(q - 1, 0)] == _BACKSLASH)]
    if esc.size:
        longer = esc[(esc > 1) & (b[np.maximum(esc - 2, 0)] == _BACKSLASH)]     # runs of 2 or more: counted
        if longer.size:
            even = np.fromiter((not _odd_run(data, int(p)) for p in longer), dtype=bool, count=longer.size)
            esc = np.setdiff1d(esc, longer[even], assume_unique=True)
        q = np.setdiff1d(q, esc, assume_unique=True)
    if q.size % 2 or (esc.size and (np.searchsorted(q, esc) % 2 == 0).any()):
        return None
    folded = b | 0x20                       # folds [ ] onto { }
    br = np.flatnonzero((folded == 123) | (folded == 125))
    opens = folded[br] == 123
    outside = np.searchsorted(q, br) % 2 == 0
    if not outside.any():
        return 0
    return max(0, int(np.cumsum(np.where(opens[outside], 1, -1), dtype=np.int64).max()))


def _odd_run(data: bytes, p: int) -> bool:
    """Whether an odd run of backslashes ends just before ``data[p]`` (the quote there is escaped)."""
    k = p - 1
    while k >= 0 and data[k] == _BACKSLASH:
        k -= 1
    return (p - 1 - k) % 2 == 1


def _blanked_depth(data: bytes) -> int:
    """:func:`json_depth` with the strings blanked by :data:`_STRING` (4 MiB at a time)."""
    text = _STRING.sub(b'""', data)
    depth = best = 0
    step = 1 << 22
    for at in range(0, len(text), step):
        b = np.frombuffer(text, np.uint8, count=min(step, len(text) - at), offset=at)
        sel = b[(b == 91) | (b == 123) | (b == 93) | (b == 125)]
        if not sel.size:
            continue
        run = np.cumsum(np.where((sel == 91) | (sel == 123), 1, -1), dtype=np.int64) + depth
        best = max(best, int(run.max()))
        depth = int(run[-1])
    return best


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused (where it runs) while a bulk of acyclic values is
    built and dropped: parsed JSON, the records an importer reads. Its passes would otherwise walk
    every object of a growing parse again and again; reference counting still frees them all, and
    a cycle made meanwhile is collected once it resumes."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def loads(data):
    """``json.loads`` within the bounds: :class:`JSONLimitError` (a ``ValueError``, like a
    syntax error) for nesting deeper than :data:`MAX_JSON_DEPTH` or a lone surrogate."""
    return _loads(data, True)


_NOT_OPEN_OR_NL = bytes(b for b in range(256) if b not in b"[{\n")


def loads_lines(body: bytes):
    """:func:`loads` of JSON lines (one value a line, no blank line) read as one array: ``[``,
    the lines joined by ``,``, ``]``. A line with fewer than :data:`MAX_JSON_DEPTH` opening
    brackets (those in strings counted too) cannot nest its value, inside the array, deeper than
    the bound, so the nesting is counted in full only when some line has that many."""
    opens = body.translate(None, _NOT_OPEN_OR_NL)
    count = max(map(len, opens.split(b"\n"))) >= MAX_JSON_DEPTH
    return _loads(b"".join((b"[", body.replace(b"\n", b","), b"]")), count)


def _loads(data, count: bool):
    """:func:`loads`; without ``count``, the caller has bounded the nesting already."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    deep = count and (len(raw) > 1 << 16 or raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH)
    if deep and json_depth(raw) > MAX_JSON_DEPTH:
        raise JSONLimitError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        with collector_paused():            # a parse makes no reference cycles
            obj = json.loads(data)
    except RecursionError:
        raise JSONLimitError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    if _maybe_lone(raw):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JSONLimitError("a string holds a lone UTF-16 surrogate, which is not text") from None
    return obj


def _maybe_lone(raw: bytes) -> bool:
    """Whether a string in the JSON text may hold a lone UTF-16 surrogate: a raw UTF-8 surrogate,
    a high escape not followed by a low one, or a low escape not preceded by a high one whose
    backslash is not itself escaped. Escaped pairs (emoji) pass; a True is confirmed on the value."""
    if b"\xed" in raw and _RAW_SURROGATE.search(raw):
        return True
    for m in _SURROGATE_ESCAPE.finditer(raw):        # one pass in C (the backslash found by memchr)
        i = m.start()
        if raw[i + 3] in b"89abAB":
            if not _LOW.match(raw, i + 6):
                return True
        elif i < 7 or raw[i - 7] == 92 or not _HIGH.match(raw, i - 6):
            return True
    return False


def read_json_document(path, what: str = "JSON file"):
    """One JSON document (a policy, a manifest, a metadata record) read whole within the
    bounds: a regular file of at most :data:`MAX_DOCUMENT_BYTES`, UTF-8, nesting at most
    :data:`MAX_JSON_DEPTH`. Any problem raises :class:`LogError` naming the file."""
    check_regular(path, what)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise LogError(path, f"cannot be read ({exc.strerror})", "check the path and its permissions") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise LogError(path, f"larger than {MAX_DOCUMENT_BYTES >> 20} MiB, too large for a {what}",
                       f"pass the {what} glance-law wrote")
    try:
        return loads(raw)
    except ValueError as exc:      # syntax, bad UTF-8, depth, surrogates
        msg = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise LogError(path, f"not a valid {what} ({msg})", f"pass the {what} glance-law wrote") from None


# --------------------------------------------------------------------------- fields

def _refuse(path, lineno, field: str, value, want: str, fix: str) -> LogError:
    where = f"line {lineno}: " if lineno is not None else ""
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return LogError(path, f"{where}field '{field}' is {shown}, not {want}", fix)


_FIX = "log the record as the server or decoder wrote it"


def as_int(value, path, lineno, field: str, lo: int | None = 0, hi: int | None = None, fix: str = _FIX) -> int:
    """``value`` as an int in lo..hi (an integral float or a decimal string is accepted; a
    bool, NaN, an infinity, a fraction are not), else :class:`LogError` naming file:line and field."""
    shown_hi = hi if hi is not None and hi < (1 << 62) else None       # a mere int64 guard goes unsaid
    want = "an integer" + (f" in {lo}..{shown_hi}" if lo is not None and shown_hi is not None else
                           f" >= {lo}" if lo is not None else f" <= {shown_hi}" if shown_hi is not None else "")
    v = value
    if isinstance(v, str):
        try:
            v = int(v.strip(), 10)
        except ValueError:
            raise _refuse(path, lineno, field, value, want, fix) from None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise _refuse(path, lineno, field, value, want, fix)
    if isinstance(v, (float, np.floating)) and (not math.isfinite(v) or v != math.floor(v)):
        raise _refuse(path, lineno, field, value, want, fix)
    v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _refuse(path, lineno, field, value, want, fix)
    return v


#: The largest magnitude a float32 column holds (a larger value would be stored as an infinity).
FLOAT32_MAX = 3.4028234663852886e38


def as_float(value, path, lineno, field: str, lo: float | None = None, fix: str = _FIX,
             hi: float | None = None) -> float:
    """``value`` as a finite float in lo..hi (when given), else :class:`LogError`."""
    want = "a finite number" + (f" in {lo:g}..{hi:g}" if lo is not None and hi is not None else
                                f" >= {lo:g}" if lo is not None else f" <= {hi:g}" if hi is not None else "")
    v = value
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise _refuse(path, lineno, field, value, want, fix) from None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise _refuse(path, lineno, field, value, want, fix)
    try:
        v = float(v)
    except OverflowError:
        raise _refuse(path, lineno, field, value, want, fix) from None
    if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _refuse(path, lineno, field, value, want, fix)
    return v


def check_expansion(total, path, where: str) -> None:
    """Refuse a counter or histogram that would expand into more than
    :data:`MAX_EXPANDED_ROUNDS` rounds (one row per counted draft)."""
    if total > MAX_EXPANDED_ROUNDS:
        raise LogError(path, f"{where}: the counts add up to {float(total):.4g} rounds, more than the "
                             f"{MAX_EXPANDED_ROUNDS:,} one file may expand into (one row per draft)",
                       "import shorter intervals (scrape more often, or split the responses over files), or "
                       "read the per-request tau from the prompt rows")


def as_int_list(values, path, lineno, field: str, lo: int = 0, hi: int | None = None, fix: str = _FIX) -> np.ndarray:
    """A JSON list of ints in lo..hi as an int64 array (vectorised; the first bad element is
    refused as :func:`as_int` would)."""
    if not isinstance(values, (list, tuple)):
        raise _refuse(path, lineno, field, values, "a list of integers", fix)
    try:
        arr = np.asarray(values)
    except (ValueError, OverflowError):
        arr = None
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in "iuf" and arr.size:
        ok = np.isfinite(arr) & (arr == np.floor(arr)) & (arr >= lo) if arr.dtype.kind == "f" else arr >= lo
        if hi is not None:
            ok &= arr <= hi
        if ok.all():
            return arr.astype(np.int64)
    elif arr is not None and arr.size == 0:
        return np.zeros(0, np.int64)
    for j, v in enumerate(values):
        as_int(v, path, lineno, f"{field}[{j}]", lo, hi, fix)
    return np.asarray([int(v) for v in values], np.int64)      # pragma: no cover - every element passed


def as_histogram(h, path, lineno, field: str, fix: str = _FIX) -> np.ndarray:
    """A dense count histogram (index j: how many steps accepted j) from a list or a sparse
    ``{"j": n}`` map: indices in 0..MAX_POSITION, counts >= 0, their sum at most
    :data:`MAX_EXPANDED_ROUNDS` (a histogram becomes one round per count)."""
    if isinstance(h, dict):
        dense = np.zeros(0, np.int64)
        if h:
            keys = [as_int(k, path, lineno, f"{field} index", 0, MAX_POSITION, fix) for k in h]
            dense = np.zeros(max(keys) + 1, np.int64)
            for k, (key, v) in zip(keys, h.items()):
                dense[k] = as_int(v, path, lineno, f"{field}[{key}]", 0, MAX_EXPANDED_ROUNDS, fix)
    else:
        if isinstance(h, (list, tuple)) and len(h) > MAX_POSITION + 1:
            raise _refuse(path, lineno, field, f"<a list of {len(h)}>",
                          f"a histogram of at most {MAX_POSITION + 1} entries", fix)
        dense = as_int_list(h, path, lineno, field, 0, MAX_EXPANDED_ROUNDS, fix)
    check_expansion(int(dense.sum()), path, f"line {lineno}: {field}")
    return dense
