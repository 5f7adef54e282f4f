"""Paths and store URIs: one small layer every reader, engine, importer and writer calls.

A *location* is either a local path (``str`` or ``os.PathLike``, handled as before with
local file calls) or a URI with a scheme: ``s3://``, ``gs://`` (``gcs://``), ``abfs://``
(``abfss://``), ``hdfs://`` (``viewfs://``) and ``file://`` go through pyarrow's
filesystems; any other scheme fsspec knows (``memory://``, ``az://``, ...) goes through
fsspec wrapped as a pyarrow filesystem (``pip install fsspec`` and the scheme's package).

Credentials and endpoints come from the standard environment and configuration of each
store, never from glance-law's arguments: for S3 the AWS credential chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and
``~/.aws``, instance roles), ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` for an
S3-compatible store (``http://host:port`` uses plain HTTP) and ``AWS_REGION`` /
``AWS_DEFAULT_REGION``; for GCS the Google default credentials; for Azure the
``AZURE_STORAGE_*`` variables; for HDFS the Hadoop configuration (``HADOOP_HOME``,
``CLASSPATH``). Credentials given inside a URI (``s3://key:secret@bucket/``, ``s3://TOKEN@bucket``,
``abfs://container:KEY@account...``, ``?sig=``/``?X-Amz-Signature=``/``?token=``..., percent-encoded
too: :func:`glance_law.scrub.carries_credentials`) are refused, and every message names the
location with them masked. Nothing here prints or stores a credential.

Functions:

* :func:`is_uri` - does a string carry a scheme;
* :func:`filesystem` - ``(pyarrow FileSystem, path inside it)`` for a location;
* :func:`expand` - files, folders (every ``*.parquet`` below them, hidden files excluded)
  and globs (``*``, ``?``, ``[...]``; ``**`` recurses), local or in a store;
* :func:`open_input` - a random-access reader (what Parquet needs) for a location;
* :func:`size` - the size in bytes, or None when absent;
* :func:`list_prefix` - the files below a folder/prefix (for resume and listings);
* :func:`put_atomic` - write bytes so the file becomes visible only complete;
* :func:`join` - a child location of a folder/prefix.

Store errors come back as :class:`StoreError`, one line naming the location, what went
wrong (missing bucket, no credentials, access denied, unreachable endpoint) and what to do.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import threading
import uuid
from pathlib import Path

from glance_law.errors import GlanceError
from glance_law.scrub import carries_credentials, scrub

__all__ = ["StoreError", "is_uri", "scheme", "filesystem", "expand", "open_input", "size", "exists",
           "create_exclusive", "read_small", "delete",
           "list_prefix", "put_atomic", "join", "basename", "explain", "check_writable_prefix",
           "OBJECT_STORES", "fsync_dir", "reset_cache"]

#: Schemes whose objects become visible only when their upload completes (one object, one upload).
OBJECT_STORES = ("s3", "s3a", "gs", "gcs", "abfs", "abfss")
_ARROW = {"s3", "s3a", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs", "file"}
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://(.*)$")
_GLOB = set("*?[")


class StoreError(GlanceError):
    """A store refused or could not serve a location. ``str()`` is one line: where, what, what to do."""

    def __init__(self, location, problem: str, fix: str = ""):
        self.location = str(location)
        self.problem = problem
        self.fix = fix
        super().__init__(f"{self.location}: {problem}" + (f"; {fix}" if fix else ""))


def is_uri(location) -> bool:
    """True for a string with a scheme (``s3://...``); False for local paths (also ``C:\\...``)."""
    return isinstance(location, str) and _URI.match(location) is not None


def scheme(location) -> str:
    """The lower-case scheme of a URI, ``""`` for a local path."""
    m = _URI.match(location) if isinstance(location, str) else None
    return m.group(1).lower() if m else ""


def _split(uri: str) -> tuple[str, str, str]:
    """(scheme, authority, path without leading slash) of a URI; refuses credentials in it."""
    m = _URI.match(uri)
    sch, rest = m.group(1).lower(), m.group(2)
    authority, _, path = rest.partition("/")
    if carries_credentials(uri):   # user:secret@, TOKEN@, abfs container:KEY@, ?sig=, ... (percent-encoded too)
        raise StoreError(scrub(uri), "the URI carries credentials (user:secret@, a token or a signed query)",
                         "remove them from the URI and give them through the store's environment or "
                         "configuration (e.g. AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")
    return sch, authority, path


# --------------------------------------------------------------------------
# filesystems (one per scheme and authority, created once)
# --------------------------------------------------------------------------

_cache: dict[tuple, object] = {}
_lock = threading.Lock()


def _s3() -> object:
    import pyarrow.fs as pafs
    kw: dict = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        m = re.match(r"^(https?)://(.*?)/?$", endpoint)
        if m:
            kw["scheme"], kw["endpoint_override"] = m.group(1), m.group(2)
        else:
            kw["endpoint_override"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    elif endpoint:
        kw["region"] = "us-east-1"  # S3-compatible stores ignore it; avoids a region lookup
    return pafs.S3FileSystem(**kw)


#: Environment variables any one of which gives Azure credentials (``GLANCE_AZURE_DEFAULT_CREDENTIAL=1``
#: lets the Azure SDK's default chain, e.g. a managed identity, find them instead).
AZURE_CREDENTIAL_VARS = ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING",
                         "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE", "GLANCE_AZURE_DEFAULT_CREDENTIAL")


def _check_azure(uri: str) -> None:
    """Refuse an abfs:// location when the environment holds no Azure credentials: pyarrow's
    Azure filesystem otherwise fails deep inside the SDK (a traceback, or an abort on write)."""
    if not any(os.environ.get(v) for v in AZURE_CREDENTIAL_VARS):
        raise StoreError(uri, "no Azure credentials in the environment",
                         "set AZURE_STORAGE_ACCOUNT_KEY (with AZURE_STORAGE_ACCOUNT_NAME), AZURE_STORAGE_SAS_TOKEN, "
                         "AZURE_STORAGE_CONNECTION_STRING or a service principal (AZURE_CLIENT_ID, AZURE_TENANT_ID, "
                         "AZURE_CLIENT_SECRET); on an Azure machine with a managed identity set "
                         "GLANCE_AZURE_DEFAULT_CREDENTIAL=1")


def _make(sch: str, authority: str, uri: str):
    import pyarrow.fs as pafs
    if sch in ("abfs", "abfss"):
        _check_azure(uri)
    try:
        if sch in ("s3", "s3a"):
            return _s3()
        if sch == "file":
            return pafs.LocalFileSystem()
        if sch in _ARROW:
            fs, _ = pafs.FileSystem.from_uri(("gs" if sch == "gcs" else sch) + "://" + authority + "/")
            return fs
    except (OSError, ValueError, ImportError) as exc:
        raise StoreError(uri, f"cannot open the {sch}:// filesystem ({_first(exc)})",
                         f"check that pyarrow was built with {sch} support and the store's "
                         "configuration (see docs/scale.md, 'Logs in object storage')") from None
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem
        return PyFileSystem(FSSpecHandler(fsspec.filesystem(sch)))
    except ImportError:
        raise StoreError(uri, f"no filesystem for the {sch}:// scheme",
                         "use s3://, gs://, abfs://, hdfs:// or file://, or install fsspec and the "
                         f"package that provides {sch}://") from None
    except (ValueError, KeyError) as exc:
        raise StoreError(uri, f"no filesystem for the {sch}:// scheme ({_first(exc)})",
                         "use s3://, gs://, abfs://, hdfs:// or file://") from None


def _first(exc: BaseException) -> str:
    s = str(exc).strip().splitlines()
    return (s[0] if s else type(exc).__name__)[:200]


def filesystem(location) -> tuple[object, str]:
    """``(pyarrow.fs.FileSystem, path inside it)`` for a local path or a URI."""
    if not is_uri(location):
        import pyarrow.fs as pafs
        return pafs.LocalFileSystem(), os.path.abspath(os.fspath(location))
    sch, authority, path = _split(location)
    if sch == "file":
        from urllib.parse import unquote
        return _get(("file", ""), location), unquote("/" + path if authority in ("", "localhost")
                                                     else f"//{authority}/{path}")
    key = (sch, authority if sch not in ("s3", "s3a", "gs", "gcs") else "")
    fs = _get(key, location)
    if sch in _ARROW and sch not in ("hdfs", "viewfs"):
        inner = f"{authority}/{path}" if sch not in ("abfs", "abfss") else _abfs_path(authority, path)
    elif sch in ("hdfs", "viewfs"):
        inner = "/" + path
    else:
        inner = f"{authority}/{path}" if authority else path
    return fs, inner.rstrip("/") if inner not in ("/", "") else inner


def _abfs_path(authority: str, path: str) -> str:
    container = authority.split("@", 1)[0]
    return f"{container}/{path}"


def _get(key, uri):
    with _lock:
        fs = _cache.get(key)
        if fs is None:
            fs = _cache[key] = _make(key[0], key[1], uri)
        return fs


def reset_cache() -> None:
    """Forget the filesystems made so far (e.g. after the environment's credentials changed)."""
    with _lock:
        _cache.clear()


# --------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------

def explain(location, exc: BaseException) -> StoreError:
    """One-line :class:`StoreError` for a store failure: missing bucket, no credentials,
    access denied, unreachable endpoint, or the store's own first line."""
    msg = _first(exc)
    low = msg.lower()
    if "no response body" in low and "access_denied" in low and scheme(location) in ("s3", "s3a"):
        msg = _probe(location) or msg  # a HEAD's 403 carries no reason: a listing's answer does
        low = msg.lower()
    sch = scheme(location) or "file"
    bucket = _bucket(location)
    if "nosuchbucket" in low or "no_such_bucket" in low or ("bucket" in low and "not found" in low) \
            or "does not exist" in low and "bucket" in low:
        return StoreError(location, f"the bucket {bucket!r} does not exist",
                          "check the bucket name and the endpoint (AWS_ENDPOINT_URL) or region (AWS_REGION)")
    if any(k in low for k in ("invalidaccesskeyid", "invalid_access_key_id", "signaturedoesnotmatch",
                              "signature_does_not_match", "invalidtoken", "expiredtoken", "expired_token",
                              "the aws access key id you provided does not exist")):
        return StoreError(location, "the store rejected the credentials (unknown key, wrong secret or expired token)",
                          "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or AWS_PROFILE")
    if any(k in low for k in ("no credentials", "unable to locate credentials", "missing credentials",
                              "credentials provider", "no auth", "unable to find credentials")):
        return StoreError(location, "no credentials found for the store",
                          "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (or the store's "
                          "equivalent)")
    if "access_denied" in low or "accessdenied" in low or "access denied" in low or "forbidden" in low \
            or "403" in low or isinstance(exc, PermissionError):
        return StoreError(location, f"access denied to {repr(bucket) if bucket else 'the location'}",
                          "grant the credentials read (and, for --out, write and list) permission on it")
    if any(k in low for k in ("network_connection", "couldn't connect", "could not connect", "connection refused",
                              "curlcode", "resolve host", "timed out", "timeout")):
        return StoreError(location, f"cannot reach the {sch}:// endpoint",
                          "check the network and the endpoint (AWS_ENDPOINT_URL for S3-compatible stores)")
    return StoreError(location, f"the store failed ({msg})", "check the location and the store's configuration")


def _probe(location) -> str:
    """The store's first line for a listing of the location's bucket ('' when it succeeds)."""
    import pyarrow.fs as pafs
    try:
        fs, path = filesystem(location)
        fs.get_file_info(pafs.FileSelector(path.split("/", 1)[0], recursive=False, allow_not_found=True))
    except (OSError, ValueError) as exc:
        return _first(exc)
    return ""


def _bucket(location) -> str:
    if not is_uri(location):
        return ""
    try:
        return _split(location)[1].split("@", 1)[0]
    except StoreError:
        return ""


# --------------------------------------------------------------------------
# listing, globbing
# --------------------------------------------------------------------------

def _info(fs, path, location):
    try:
        return fs.get_file_info(path)
    except (OSError, ValueError) as exc:
        raise explain(location, exc) from None


def _missing(location, fs, path) -> StoreError:
    """The one line for a location that is not there: a missing bucket, or a missing key."""
    import pyarrow.fs as pafs
    if scheme(location) in ("s3", "s3a", "gs", "gcs", "abfs", "abfss"):
        bucket = path.split("/", 1)[0]
        if _info(fs, bucket, location).type == pafs.FileType.NotFound:
            return StoreError(location, f"the bucket {bucket!r} does not exist",
                              "check the bucket name and the endpoint (AWS_ENDPOINT_URL) or region (AWS_REGION)")
    return StoreError(location, "no such file, folder or prefix",
                      "check the path, or run glance-log first to write logs there")


def _uri_of(location: str, fs_path: str) -> str:
    """The URI of ``fs_path`` inside the filesystem of ``location``."""
    sch, authority, _ = _split(location)
    if sch == "file":
        return "file://" + fs_path
    if sch in ("hdfs", "viewfs"):
        return f"{sch}://{authority}{fs_path}"
    if sch in ("abfs", "abfss"):
        return f"{sch}://{authority}/{fs_path.split('/', 1)[1] if '/' in fs_path else ''}"
    if sch in _ARROW:
        return f"{sch}://{fs_path}"
    return f"{sch}://{fs_path}" if not fs_path.startswith("/") else f"{sch}://{fs_path}"


def _walk(fs, base: str, location) -> list:
    import pyarrow.fs as pafs
    try:
        return fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except (OSError, ValueError) as exc:
        raise explain(location, exc) from None


def _rel(path: str, base: str) -> str:
    """``path`` relative to ``base`` (filesystems differ on a leading '/')."""
    return path.lstrip("/")[len(base.strip("/")):].lstrip("/")


def _visible(rel: str) -> bool:
    return not any(part.startswith((".", "_")) for part in rel.split("/"))


def list_prefix(location, suffix: str = ".parquet", accept=None) -> list[str]:
    """The files below a folder/prefix whose names end with ``suffix`` (or, given ``accept``,
    for whose name ``accept(name)`` is true), sorted, hidden ones (a path component starting
    with ``.`` or ``_``) excluded; locations in the input's form (URIs for a URI, paths for a
    path). A prefix with nothing below lists as empty."""
    import pyarrow.fs as pafs
    fs, path = filesystem(location)
    ok = accept or (lambda name: name.endswith(suffix))
    out = []
    for fi in _walk(fs, path, location):
        rel = _rel(fi.path, path)
        if fi.type == pafs.FileType.File and ok(fi.base_name) and _visible(rel):
            out.append(_uri_of(location, fi.path) if is_uri(location) else fi.path)
    return sorted(out)


def _pattern(glob_path: str) -> re.Pattern:
    """Regex of a glob over '/'-separated paths: ``**/`` any depth, ``*``/``?``/``[..]`` in one part."""
    out, i, n = "", 0, len(glob_path)
    while i < n:
        if glob_path.startswith("**/", i):
            out += "(?:[^/]*/)*"
            i += 3
        elif glob_path.startswith("**", i):
            out += ".*"
            i += 2
        else:
            c = glob_path[i]
            if c == "*":
                out += "[^/]*"
            elif c == "?":
                out += "[^/]"
            elif c == "[":
                j = glob_path.find("]", i + 1)
                if j < 0:
                    out += re.escape(c)
                else:
                    out += fnmatch.translate(glob_path[i:j + 1])[4:-3]
                    i = j
            else:
                out += re.escape(c)
            i += 1
    return re.compile(out + r"\Z")


def _expand_uri(location: str, accept, what: str) -> list[str]:
    import pyarrow.fs as pafs
    fs, path = filesystem(location)
    if _GLOB & set(path):
        parts = path.split("/")
        k = next(i for i, p in enumerate(parts) if _GLOB & set(p))
        base = "/".join(parts[:k])
        rx = _pattern(path.lstrip("/"))
        if not base.strip("/"):
            raise StoreError(location, "a pattern in the bucket or top-level name is not supported",
                             "put the pattern after the bucket, e.g. s3://bucket/logs/*.parquet")
        hits = [fi for fi in _walk(fs, base, location)
                if rx.match(fi.path.lstrip("/")) and _visible(_rel(fi.path, base))]
        if not hits:
            if _info(fs, base, location).type == pafs.FileType.NotFound:
                raise _missing(location, fs, base)
            raise StoreError(location, "the pattern matches no files",
                             "check the pattern, or run glance-log first to write logs there")
        out = []
        for fi in sorted(hits, key=lambda f: f.path):
            u = _uri_of(location, fi.path)
            out.extend(list_prefix(u, accept=accept) if fi.type == pafs.FileType.Directory else [u])
        return out
    fi = _info(fs, path, location)
    if fi.type == pafs.FileType.File:
        return [_uri_of(location, path)]
    if fi.type == pafs.FileType.Directory:
        found = list_prefix(location, accept=accept)
        if not found:
            raise StoreError(location, f"the folder/prefix holds no {what}",
                             "point at the prefix glance-log wrote (its --out)")
        return found
    raise _missing(location, fs, path)


def expand(paths, accept=None, what: str = "*.parquet files") -> list:
    """Store URIs, their prefixes and globs -> the object URIs, in the order given, each group
    sorted, de-duplicated. Raises :class:`StoreError` (one line) for a missing prefix or
    bucket, a pattern matching nothing, or a store failure. ``accept(name)``: which objects of
    a prefix count (default: ``*.parquet``); ``what`` names them in the message for a prefix
    without any. Local paths are the reader's (:func:`glance_law.data.io.expand_paths`, with
    its link and permission handling) and are refused here."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list = []
    for p in paths:
        if not is_uri(p):
            raise ValueError(f"{p!r} is a local path; expand it with glance_law.data.io.expand_paths")
        out.extend(_expand_uri(p, accept, what))
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------
# reading and writing single files
# --------------------------------------------------------------------------

def open_input(location):
    """A random-access pyarrow file for a URI (close it after use); the path itself for a local path."""
    if not is_uri(location):
        return location
    fs, path = filesystem(location)
    try:
        return fs.open_input_file(path)
    except FileNotFoundError:
        raise _missing(location, fs, path) from None
    except (OSError, ValueError) as exc:
        raise explain(location, exc) from None


def size(location) -> int | None:
    """Size in bytes of a file, None when it does not exist (store errors raise StoreError)."""
    import pyarrow.fs as pafs
    if not is_uri(location):
        try:
            return os.stat(location).st_size
        except FileNotFoundError:
            return None
    fs, path = filesystem(location)
    fi = _info(fs, path, location)
    return fi.size if fi.type == pafs.FileType.File else None


def exists(location) -> bool:
    """True when a file or a non-empty folder/prefix is at ``location``."""
    import pyarrow.fs as pafs
    if not is_uri(location):
        return os.path.exists(location)
    fs, path = filesystem(location)
    return _info(fs, path, location).type != pafs.FileType.NotFound


def join(location, name: str):
    """``location/name``: a Path for a local path, a URI string for a URI."""
    if is_uri(location):
        return location.rstrip("/") + "/" + name
    return Path(location) / name


def basename(location) -> str:
    """The last component of a path or URI."""
    return str(location).rstrip("/").rsplit("/", 1)[-1] if is_uri(location) else Path(location).name


def _boto_s3(location):
    """A boto3 S3 client configured as the reads are (endpoint, region from the environment) for
    an s3:// or s3a:// location; None for other schemes or without boto3."""
    if not is_uri(location) or scheme(location) not in ("s3", "s3a"):
        return None
    try:
        import boto3
    except ImportError:
        return None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or ("us-east-1" if endpoint else None)
    return boto3.client("s3", endpoint_url=endpoint, region_name=region)


def create_exclusive(location, data: bytes) -> bool | None:
    """Create ``location`` holding ``data`` only if nothing is there, atomically (the store
    decides between two concurrent creators): True when created, False when something was there
    already, None when this filesystem offers no conditional create through this layer (then the
    caller can only check and write, which two writers can race).

    * local paths and file://: ``O_CREAT | O_EXCL`` (no link followed);
    * s3:// (and s3a://) with boto3 installed: ``PutObject`` with ``If-None-Match: *`` (AWS S3
      since 2024, MinIO, moto; the endpoint and credentials from the environment as for reads);
    * other schemes (gs://, abfs://, hdfs://, fsspec's): None."""
    if not is_uri(location) or scheme(location) == "file":
        path = filesystem(location)[1]
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            return False
        except OSError as exc:                    # a missing or unwritable folder: one line
            raise explain(location, exc) from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return True
    client = _boto_s3(location)
    if client is None:
        return None
    from botocore.exceptions import BotoCoreError, ClientError
    bucket, _, key = filesystem(location)[1].partition("/")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
            return False
        if code in ("NotImplemented", "InvalidArgument") or status == 501:
            return None                   # an S3-compatible store without conditional writes
        raise explain(location, exc) from None
    except BotoCoreError as exc:
        raise explain(location, exc) from None
    return True


def read_small(location, limit: int = 1 << 16) -> bytes | None:
    """The first ``limit`` bytes of a small file (a lock, a marker), None when it is not there."""
    if not is_uri(location):
        try:
            with open(location, "rb") as fh:
                return fh.read(limit)
        except FileNotFoundError:
            return None
    fs, path = filesystem(location)
    try:
        with fs.open_input_stream(path) as fh:
            return fh.read(limit)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise explain(location, exc) from None


def delete(location) -> None:
    """Remove one file (nothing when it is not there). On S3 through boto3 when installed: pyarrow
    would leave an empty folder marker object in a prefix it empties."""
    if not is_uri(location):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(location)
        return
    client = _boto_s3(location)
    if client is not None:
        from botocore.exceptions import BotoCoreError, ClientError
        bucket, _, key = filesystem(location)[1].partition("/")
        try:
            client.delete_object(Bucket=bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            raise explain(location, exc) from None
        return
    fs, path = filesystem(location)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise explain(location, exc) from None


def put_atomic(location, data: bytes) -> str:
    """Write ``data`` at ``location`` so that readers see either nothing or the whole file.

    * object stores (s3, gs, abfs): one object written in one upload from the finished
      bytes; the store makes an object visible only when its upload completes, so a
      process killed mid-upload leaves no object (an S3 multipart upload may be left
      pending and invisible: a bucket lifecycle rule that aborts incomplete uploads cleans
      it up);
    * local paths, file://, hdfs:// and other filesystems: a hidden temporary name in the
      same folder, then a rename (atomic on POSIX and HDFS); local files are fsync'ed.
    Returns the location written (a string)."""
    if not is_uri(location) or scheme(location) == "file":
        _, path = filesystem(location)
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.parent / f".{p.name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, p)
        finally:
            if tmp.exists():
                tmp.unlink()
        fsync_dir(p.parent)
        return str(location)
    fs, path = filesystem(location)
    try:
        if scheme(location) in OBJECT_STORES:
            # the bytes are complete before the stream opens, and go in one write: there is no
            # moment at which a partial object could be completed by an interrupted writer
            with fs.open_output_stream(path) as out:
                out.write(data)
        else:
            parent, _, name = path.rpartition("/")
            tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:8]}.tmp"
            fs.create_dir(parent, recursive=True)
            with fs.open_output_stream(tmp) as out:
                out.write(data)
            fs.move(tmp, path)
    except (OSError, ValueError) as exc:
        raise explain(location, exc) from None
    return location


def fsync_dir(path: Path) -> None:
    """fsync a local folder, so a rename in it survives a power loss (no-op where unsupported)."""
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


def check_writable_prefix(location) -> None:
    """Fail early, in one line, when the bucket of an output URI is missing or unreachable."""
    if not is_uri(location) or scheme(location) == "file":
        return
    import pyarrow.fs as pafs
    fs, path = filesystem(location)
    if scheme(location) in OBJECT_STORES:
        bucket = path.split("/", 1)[0]
        if _info(fs, bucket, location).type == pafs.FileType.NotFound:
            raise StoreError(location, f"the bucket {bucket!r} does not exist",
                             "create it first (glance-law never creates buckets) or check the endpoint")
    else:
        _info(fs, path, location)
