"""The one output path: every file a command writes goes through this module.

``fit --out`` and ``--width-plot``, ``reduce --out``, ``ingest --out``, ``policy --out``, the
report's tables, figures, ``index.md`` and ``manifest.json``, and glance-log's part files
(:func:`glance_law.data.io.write_table`) are written by :func:`replacing` / :func:`write_file`:

* **local or store**: a store URI (``s3://``, ``gs://``, ``abfs://``, ...) goes to the store
  layer (:func:`glance_law.data.uri.put_atomic`), or is refused in one line when the scheme's
  package is missing; a local path that looks like a URI with a slash lost (``s3:/bucket``,
  ``gs:bucket``) is refused, never created as a folder named ``s3:``;
* **atomic**: the data go to a temporary file in the target folder, created exclusively
  (``O_CREAT | O_EXCL | O_NOFOLLOW``: nothing planted there is opened) and named
  ``.<name>.<host>-<pid>-<random>.tmp``, fsync'ed, then ``os.replace``'d onto the final name
  (a link planted at the final name is replaced, never written through). A temporary file of
  a writer of this host whose process is dead is removed by the next writer in that folder
  (:func:`clean_stale`);
* **checked up front** (:func:`check_output`, before any work): ``--out`` may not be a symbolic
  link, may not be one of the command's own inputs (paths resolved and compared; a folder input
  counts every log file the reader would read in it; a pattern character left by a shell glob
  that matched nothing is refused), a file output may not be a folder and a folder output not a
  file;
* **one line** for a full disk (ENOSPC, EDQUOT), a read-only file system (EROFS) or a folder the
  user cannot write (EACCES, EPERM), and the previous output at that name is left as it was.

Folder outputs (``ingest``, ``report``) hold a marker file, :data:`INCOMPLETE`, from their first
write to their last (:func:`folder_session`, which also takes an exclusive lock so two writers
never interleave in one folder, or on a store prefix a lock object created only if absent,
:func:`store_lock`); the readers refuse a folder that holds it
(:func:`incomplete_marker`), and a rerun of the command completes the folder.

:func:`remove_file` removes a previous output only when its relative path passes
:func:`check_output_path` (relative, no ``..``, a name this tool writes) and no folder on the
way is a link; a link at the name itself is removed as a link.
"""
from __future__ import annotations

import contextlib
import errno
import glob as _glob
import hashlib
import os
import re
import socket
import stat
import time
import uuid
from pathlib import Path, PurePosixPath

from glance_law.errors import GlanceError
from glance_law.scrub import scrub

from . import uri as _uri

__all__ = ["OutputError", "OUTPUT_PATTERN", "INCOMPLETE", "safe_stem", "check_output_path", "check_output",
           "replacing", "write_file", "remove_file", "clean_stale", "temp_name", "folder_session", "store_lock",
           "incomplete_marker", "write_problem", "make_folder"]


class OutputError(GlanceError):
    """An output cannot be written or removed safely (one line: path, problem, what to do)."""


#: Relative paths the report writes: ``tables/<stem>.(md|tex|csv)``, ``figures/<stem>.(png|pdf)``.
OUTPUT_PATTERN = re.compile(r"(?:tables/[A-Za-z0-9][A-Za-z0-9._-]*\.(?:md|tex|csv)"
                            r"|figures/[A-Za-z0-9][A-Za-z0-9._-]*\.(?:png|pdf))")

#: The marker of a folder output being written (or left unfinished by a killed writer).
INCOMPLETE = "INCOMPLETE"

_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_TMP = re.compile(r"^\..+\.(?P<host>[0-9a-f]{6})-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
_LOOKALIKE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)")
_cleaned: set = set()


def safe_stem(name) -> str:
    """``name`` as one file-name component: letters, digits, ``. _ -`` kept, anything else ``_``,
    no leading dot (a log-supplied drafter or task name can never make a path). A name that had to
    be changed gets a short digest of the original (``x/y`` -> ``x_y-<6 hex>``), so two names that
    differ only in replaced characters (``x/y`` and ``x_y``) never share a file."""
    raw = str(name)
    s = re.sub(r"[^A-Za-z0-9._-]", "_", raw).lstrip(".")
    if s == raw and s:
        return s
    return f"{s or '_'}-{hashlib.sha256(raw.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"


def check_output_path(rel) -> str | None:
    """The problem with ``rel`` as an output path of the report, or None when it is one."""
    if not isinstance(rel, str):
        return f"{rel!r} is not a path"
    if rel.startswith(("/", "\\")) or PurePosixPath(rel).is_absolute() or re.match(r"^[A-Za-z]:", rel):
        return f"{rel!r} is an absolute path"
    if ".." in PurePosixPath(rel).parts or "\\" in rel:
        return f"{rel!r} leaves the folder"
    if not OUTPUT_PATTERN.fullmatch(rel):
        return f"{rel!r} is not a name this tool writes (tables/*.md|tex|csv, figures/*.png|pdf)"
    return None


# --------------------------------------------------------------------------
# checks before any work
# --------------------------------------------------------------------------

def _is_log_name(name: str) -> bool:
    """Whether the reader would read a file of this name found in a folder input."""
    from glance_law.data.importers.common import is_foreign
    return not name.startswith(".") and (name.endswith(".parquet") or is_foreign(name))


def _input_hit(out: Path, inputs, folder: bool) -> tuple[str, str] | None:
    """(how, the input as given) when ``out`` is an input, or would be read as one, or (``folder``)
    holds one; else None."""
    real = os.path.realpath(out)
    for raw in inputs:
        s = _local(raw) if raw is not None else None
        if s is None:
            continue
        hits = _glob.glob(s, recursive=True) if set("*?[") & set(s) and not os.path.lexists(s) else [s]
        for h in hits:
            r = os.path.realpath(h)
            if r == real:
                return "is the input", s
            inside = real.startswith(r.rstrip(os.sep) + os.sep)
            if not folder and inside and os.path.isdir(r) and os.path.lexists(out) and _is_log_name(out.name):
                return "lies in the input folder, so it is read as an input:", s
            if folder and r.startswith(real.rstrip(os.sep) + os.sep):
                return "holds the input", s
    return None


def check_output(location, inputs=(), *, what: str = "--out", folder: bool = False):
    """Check an output location before any work; returns it (a Path, or the URI string).

    Refused in one line: a path that looks like a store URI with a slash lost (``s3:/b``); a store
    URI whose scheme has no filesystem here (its package missing) or that carries credentials; a
    name with a pattern character (a shell glob that matched nothing); a symbolic link; a folder
    where a file is written (or a file where a folder is); one of ``inputs`` (files, folders and
    globs as the command got them: resolved and compared; for a file output, an existing log file
    inside a folder input counts too; for a folder output, a folder that holds an input). A ``file://``
    URI, as output or as input, is its local path for every one of these checks."""
    s = os.fspath(location)
    if _uri.is_uri(s) and _uri.scheme(s) == "file":
        _check_local(Path(_local(s)), s, inputs, what, folder)   # file:// is a local path: every local check
        return s
    if _uri.is_uri(s):
        _uri.filesystem(s)                  # StoreError (one line) when the scheme's package is missing
        if any(isinstance(i, str) and i.rstrip("/") == s.rstrip("/") for i in inputs):
            raise OutputError(f"{what}: the output is one of the inputs; writing there would replace it; "
                              "name another location")
        return s
    m = _LOOKALIKE.match(s)
    if m:
        sch = m.group(1)
        raise OutputError(f"{what}: the path starts with '{sch}:' but not '{sch}://' (a store URI that lost a "
                          f"slash?); refusing to create a local folder named '{sch}:'; write {sch}://bucket/path "
                          f"for the store, or ./{sch}:... for a local folder of that name")
    p = Path(s)
    _check_local(p, s, inputs, what, folder)
    return p


def _local(location) -> str | None:
    """The local path of a local path or a ``file://`` URI (percent-decoded); None for a store URI."""
    s = os.fspath(location)
    if not _uri.is_uri(s):
        return s
    return _uri.filesystem(s)[1] if _uri.scheme(s) == "file" else None


def _check_local(p: Path, s: str, inputs, what: str, folder: bool) -> None:
    """The checks of a local output ``p`` (named ``s`` on the command line): see :func:`check_output`."""
    if set("*?[") & set(p.name):
        raise OutputError(f"{what} {s}: the name holds a pattern character (*, ? or [): a shell glob that "
                          "matched nothing or more than meant? name one file or folder")
    if os.path.islink(p):
        raise OutputError(f"{what} {s}: is a symbolic link; refusing to write through it or replace it "
                          "(outputs stay where they are named); remove the link or name another path")
    if folder and p.exists() and not p.is_dir():
        raise OutputError(f"{what} {s}: exists and is not a folder; name a folder (new or holding earlier "
                          "outputs of this command)")
    if not folder and p.is_dir():
        raise OutputError(f"{what} {s}: is a folder; name a file, e.g. {p / 'out'}")
    _probe_writable(p, p if folder else p.parent)
    hit = _input_hit(p, inputs, folder)
    if hit is not None:
        raise OutputError(f"{what} {s}: {hit[0]} {hit[1]}; writing there would replace or mix with what the command "
                          "reads; name an output outside the inputs")


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------

def _probe_writable(out: Path, folder: Path) -> None:
    """Fail early, in one line naming ``out``, when nothing can be created in ``folder`` (or in its
    nearest existing ancestor): a read-only file system, no permission, no space for a new file."""
    cur = folder.absolute()
    while not cur.exists() and cur.parent != cur:
        cur = cur.parent
    if not cur.is_dir():
        return                                  # a file in the way: the write names it
    probe = cur / temp_name("probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise write_problem(out, exc, "nothing was written", folder=cur) from None


def fsync_dir(path) -> None:
    """fsync a local folder, so a rename in it survives a power loss (no-op where unsupported)."""
    _uri.fsync_dir(Path(path))


def temp_name(name: str) -> str:
    """The temporary name a writer of this process uses beside ``name`` (host, pid, random)."""
    return f".{name[:160]}.{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


def clean_stale(folder) -> int:
    """Remove the temporary files of dead writers of this host in ``folder`` (their pid is in the
    name, :func:`temp_name`); once per folder and process. Returns how many were removed."""
    key = os.path.realpath(folder)
    if key in _cleaned:
        return 0
    _cleaned.add(key)
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    n = 0
    for name in names:
        m = _TMP.match(name)
        if m is None or m.group("host") != _HOST or _alive(int(m.group("pid"))):
            continue
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(folder, name)).st_mode):
                os.unlink(os.path.join(folder, name))
                n += 1
        except OSError:
            pass
    return n


def write_problem(path, exc: OSError, kept: str, folder=None) -> OutputError:
    """One line for an OS error while writing ``path`` (in ``folder``, by default its parent):
    full disk, read-only file system, permission, other."""
    path = Path(path)
    where = Path(folder) if folder is not None else path.parent
    e = exc.errno
    if e in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        what, fix = "no space left on the device (or the disk quota is used up)", "free space or write elsewhere"
    elif e == errno.EROFS:
        what, fix = f"{where} is on a read-only file system", "write the output elsewhere"
    elif e in (errno.EACCES, errno.EPERM):
        what, fix = f"permission denied in {where}", "write into a folder you can write to"
    elif e == errno.EFBIG:
        what, fix = "the file is larger than this system allows (file size limit)", "write elsewhere"
    elif e == errno.ENOTDIR:
        what, fix = "a component of the path is a file, not a folder", "check the path"
    else:
        what, fix = f"cannot be written ({exc.strerror or type(exc).__name__})", "check the path"
    return OutputError(f"{path}: {what}; {kept}; {fix}, then run again")


def make_folder(folder) -> Path:
    """Create ``folder`` (and its parents) or check it is one; one line on any failure."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{folder}: exists and is not a folder; name a folder") from None
    except OSError as exc:
        raise write_problem(folder, exc, "nothing was written") from None
    return folder


def _folder_chain(root: Path, parent: Path) -> None:
    """Create or check every folder from ``root`` down to ``parent`` (inclusive), refusing links."""
    try:
        rel = parent.relative_to(root)
    except ValueError:
        raise OutputError(f"{parent}: outside {root}; refusing to write there") from None
    make_folder(root)
    cur = root
    for part in rel.parts:
        if part in ("", ".", ".."):
            raise OutputError(f"{parent}: leaves {root}; refusing to write there")
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            try:
                os.mkdir(cur)
            except FileExistsError:
                pass
            except OSError as exc:
                raise write_problem(cur, exc, "nothing was written") from None
            st = os.lstat(cur)
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(f"{cur}: is a symbolic link; refusing to write through it (outputs stay inside "
                              f"{root}); remove the link and run again")
        if not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{cur}: exists and is not a folder; remove it and run again")


@contextlib.contextmanager
def replacing(path, *, root=None, sync: bool = True):
    """A fresh temporary file beside ``path``, open for binary writing; when the block ends without
    error it is flushed, fsync'ed and renamed onto ``path`` (and the folder fsync'ed); on any error
    it is removed and ``path`` keeps its previous content. OS errors become one-line OutputErrors.
    With ``root``, the folders from ``root`` to ``path`` are created as needed and none may be a link."""
    path = Path(path)
    if root is not None:
        _folder_chain(Path(root), path.parent)
    else:
        make_folder(path.parent)
    clean_stale(path.parent)
    kept = "the previous file there is unchanged" if os.path.lexists(path) else "nothing was written"
    tmp = path.parent / temp_name(path.name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o666)
    except OSError as exc:
        raise write_problem(path, exc, kept) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise write_problem(path, exc, kept) from None
        raise
    if sync:
        fsync_dir(path.parent)


def write_file(path, data: bytes | str, root=None):
    """Write ``data`` at ``path`` atomically (:func:`replacing`); a store URI goes to
    :func:`glance_law.data.uri.put_atomic` (one upload, visible only complete). Returns the location."""
    blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if _uri.is_uri(path) and _uri.scheme(path) != "file":
        if root is not None:
            raise OutputError(f"{path}: a folder output with links checked must be a local folder")
        return _uri.put_atomic(path, blob)
    local = Path(_uri.filesystem(path)[1]) if _uri.is_uri(path) else Path(path)   # file:// is local
    with replacing(local, root=root) as fh:
        fh.write(blob)
    return path if _uri.is_uri(path) else local


def remove_file(root, rel: str) -> bool:
    """Remove the previous output ``root/rel`` (``rel`` checked by :func:`check_output_path`);
    True when something was removed. A link at ``rel`` is removed as a link (its target is never
    touched); behind a folder on the way that is a link nothing is removed."""
    problem = check_output_path(rel)
    if problem is not None:
        raise OutputError(f"{root}: refusing to remove {problem}")
    root = Path(root)
    cur = root
    for part in PurePosixPath(rel).parts[:-1]:
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(st.st_mode):    # a link or a file in the way: nothing of ours lies behind it
            return False
    target = cur / PurePosixPath(rel).name
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return False
    try:
        os.unlink(target)
    except OSError as exc:
        raise write_problem(target, exc, "the file is still there") from None
    return True


# --------------------------------------------------------------------------
# folder outputs: one writer at a time, recognisably incomplete until done
# --------------------------------------------------------------------------

def incomplete_marker(folder) -> str | None:
    """The marker's location when ``folder`` (a local folder or a store prefix) holds an
    unfinished folder output, else None."""
    if _uri.is_uri(folder):
        m = _uri.join(folder, INCOMPLETE)
        return m if _uri.size(m) is not None else None
    m = os.path.join(folder, INCOMPLETE)
    return m if os.path.lexists(m) else None


class FolderSession:
    """What :func:`folder_session` yields: ``found`` (an unfinished earlier write left its marker)
    and :meth:`mark` (place the marker; called before the first file is written)."""

    def __init__(self, out, command: str):
        self.out, self.command = out, command
        self.marker = _uri.join(out, INCOMPLETE)
        self.found = incomplete_marker(out) is not None
        self.marked = self.found

    def mark(self) -> None:
        if self.marked:
            return
        text = (f"{self.command} started writing this folder at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} "
                f"(pid {os.getpid()}) and has not finished: its files may be partial. Readers refuse the folder "
                "while this file is here; rerun the same command to complete it.\n")
        write_file(self.marker, text)
        self.marked = True

    def done(self) -> None:
        if not self.marked:
            return
        if _uri.is_uri(self.out):
            fs, inner = _uri.filesystem(self.marker)
            try:
                fs.delete_file(inner)
            except (OSError, ValueError) as exc:
                raise _uri.explain(self.marker, exc) from None
        else:
            try:
                os.unlink(self.marker)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise write_problem(self.marker, exc, "the folder stays marked incomplete") from None
            fsync_dir(self.out)
        self.marked = False


LOCK = ".glance-write.lock"


@contextlib.contextmanager
def folder_session(out, command: str):
    """Write the folder output ``out`` as its only writer: an exclusive lock and the
    :data:`INCOMPLETE` marker from :meth:`FolderSession.mark` until the block ends without error.
    A failure before anything was marked leaves the folder as it was.

    A local folder's lock is ``fcntl.flock`` on ``out/.glance-write.lock`` (a second writer is
    refused in one line; the OS drops it when the process dies). A store prefix's lock is the
    object ``.glance-write.lock`` under it (:func:`store_lock`)."""
    if _uri.is_uri(out) and _uri.scheme(out) == "file":
        out = Path(_uri.filesystem(out)[1])       # file:// is a local folder: the local lock and marker
    if _uri.is_uri(out):
        out = str(out).rstrip("/")
        with store_lock(out, command) as confirm:
            sess = FolderSession(out, command)
            yield sess
            confirm()                             # still this prefix's only writer: then complete
            sess.done()
        return
    made = not os.path.lexists(out)
    out = make_folder(out)

    def busy(holder):
        return OutputError(f"{out}: another command (pid {holder}) is writing into this folder; wait for it to "
                           "finish, or write into another folder")
    try:
        with pid_lock(out / LOCK, busy):
            sess = FolderSession(out, command)
            yield sess
            sess.done()
    except BaseException:
        if made:                                  # a refusal leaves no empty folder it created behind
            with contextlib.suppress(OSError):
                os.rmdir(out)
        raise


def _holder(raw: bytes | None) -> dict:
    import json
    try:
        doc = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


@contextlib.contextmanager
def store_lock(prefix: str, command: str, name: str = LOCK):
    """Hold the writer lock of the store prefix ``prefix`` (yields ``confirm()``, which raises unless
    the lock is still this writer's): the object ``prefix/<name>`` (default ``.glance-write.lock``)
    (host, pid, a random token), created only if absent (:func:`glance_law.data.uri.create_exclusive`:
    ``If-None-Match: *`` on S3) and removed when the block ends. A lock held by another writer is
    refused in one line; one left by a dead process of this host is taken over; one left by a
    writer on another host must be removed by hand (the refusal names it). Where the store offers
    no conditional create (gs://, abfs://, hdfs://, fsspec schemes) the lock is written after a
    check and read back, which two writers starting within the same instant can both pass: then
    the lock is checked again before the folder is marked complete, and the writer whose token is
    gone refuses to finish (the INCOMPLETE marker stays: rerun one writer)."""
    import json
    lock = _uri.join(prefix, name)
    me = {"host": socket.gethostname(), "pid": os.getpid(), "token": os.urandom(8).hex(), "command": scrub(command),
          "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    blob = json.dumps(me).encode()
    for _ in range(2):
        made = _uri.create_exclusive(lock, blob)
        if made is None:                          # no conditional create: check, write, read back
            made = _uri.read_small(lock) is None and bool(_uri.put_atomic(lock, blob))
        if made:
            break
        other = _holder(_uri.read_small(lock))
        if other.get("host") == me["host"] and isinstance(other.get("pid"), int) and not _alive(other["pid"]):
            _uri.delete(lock)                     # a dead writer of this host: take its lock over
            continue
        raise _busy(prefix, lock, other)
    else:
        raise _busy(prefix, lock, _holder(_uri.read_small(lock)))

    def mine() -> bool:
        return _holder(_uri.read_small(lock)).get("token") == me["token"]

    def confirm() -> None:
        if not mine():
            raise OutputError(f"{prefix}: another writer took this prefix's lock while this command wrote into it, "
                              "so its files may mix both; it stays marked INCOMPLETE: rerun one writer")
    if not mine():
        raise _busy(prefix, lock, _holder(_uri.read_small(lock)))
    try:
        yield confirm
    finally:
        if mine():
            _uri.delete(lock)


def _busy(prefix, lock, other: dict) -> OutputError:
    who = f"pid {other.get('pid', '?')} on {other.get('host', '?')}, since {other.get('started', '?')}"
    return OutputError(f"{prefix}: another command ({who}) is writing into this prefix; wait for it to finish, "
                       f"write into another prefix, or, if that writer is gone, delete {lock} and rerun")


@contextlib.contextmanager
def pid_lock(path, busy):
    """Hold an exclusive, non-blocking OS lock (``fcntl.flock``) on the file ``path`` (created
    without following a link) for the block, with this process's pid written in it; another holder
    raises ``busy(its pid)`` (an exception: the one-line refusal). The OS drops the lock when the
    process dies, so a crashed writer never blocks a rerun; the file is removed when the block ends
    (a refusal, a full disk or success: no lock file is left behind). Not POSIX: no lock."""
    try:
        import fcntl  # noqa: F401
    except ImportError:                           # pragma: no cover - not POSIX: no lock
        yield
        return
    path = Path(path)
    fd = _lock_file(path, busy)
    try:
        with contextlib.suppress(OSError):        # the pid is for the refusal's message only (a full disk)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):        # removed while still held: nothing left behind (a writer
            os.unlink(path)                       # that opened it meanwhile sees the name gone and retries)
        os.close(fd)                              # closing releases the lock


def _lock_file(path: Path, busy) -> int:
    """An open descriptor of the lock file ``path`` holding its ``flock``, the file still at ``path``
    (a holder removes the file before it lets go, so a lock taken on a removed file is retried)."""
    import fcntl
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:                    # a read-only or full folder: one line
            raise write_problem(path, exc, "nothing was written") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise busy(holder) from None
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        mine = os.fstat(fd)
        if st is not None and (st.st_ino, st.st_dev) == (mine.st_ino, mine.st_dev):
            return fd
        os.close(fd)                              # the previous holder removed it: take the new one
    raise busy("?")
