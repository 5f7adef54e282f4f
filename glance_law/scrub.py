"""Secrets never leave: the one scrubber for every message, note, manifest, metadata field and
stored command line.

glance-law takes store credentials from the environment only (see :mod:`glance_law.data.uri`),
and refuses a URI that carries them. A refusal, a note or a stored command line still has to
name the location without the secret, and so does every other message: this module is the one
place that knows what a secret in a location looks like.

* the userinfo of a URI: ``s3://KEY:SECRET@bucket``, ``https://user:pw@host``, a token alone
  (``s3://TOKEN@bucket``) and Azure's ``abfs://container:KEY@account`` (the container name
  stays, it is no secret); also after a path normalised ``//`` to ``/`` (``s3:/KEY:SECRET@...``)
  and with a password holding ``/``;
* query parameters whose name says secret (``?secret_key=``, ``sig=``, ``X-Amz-Signature=``,
  ``X-Amz-Credential=``, ``token=``, ``access_key``, ``sas``, ``password``, ...);
* each of these percent-encoded (``%3A``, ``%40``, ``%2F``, also twice), and the userinfo of a
  URI quoted without its scheme (``container:KEY@account.dfs.core.windows.net``);
* any secret seen in the command line (:func:`remember`), wherever it turns up again, so a
  library that echoes a credential in its own words does not leak it either.

:func:`scrub` replaces each secret with ``REDACTED``; it never raises and leaves text without a
secret unchanged. :func:`scrub_doc` scrubs every string of a JSON-like document, :func:`scrub_argv`
a command line (:func:`command_line`: the one stored in a record), :func:`carries_credentials` says whether a location holds one, and
:func:`scrubbed_output` routes ``sys.stdout``/``sys.stderr`` (prints, warnings, notes) through
:func:`scrub` while a command runs.
"""
from __future__ import annotations

import contextlib
import re
import sys
from urllib.parse import unquote

__all__ = ["MASK", "scrub", "scrub_doc", "scrub_argv", "command_line", "carries_credentials", "remember",
           "scrubbed_output"]

MASK = "REDACTED"

#: Query parameter names that hold a secret (matched case-insensitively anywhere in the name).
SECRET_NAMES = re.compile(r"secret|passw|pwd|token|sig|credential|key|auth|sas|session|private|cookie",
                          re.IGNORECASE)
#: Schemes whose userinfo is a container name (kept) with an optional account key after ``:``.
_AZURE = ("abfs", "abfss", "wasb", "wasbs")

_STOP = r"\s'\"<>`"
# a URI-like token: a scheme of two or more characters (C:/ is a drive), then :// or :/ (a Path
# normalised the double slash) or their percent-encoding, then everything up to a blank or quote
_TOKEN = re.compile(rf"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]+)(://?|%3A%2F%2F|%3A%2F)([^{_STOP}]*)",
                    re.IGNORECASE)
_QUERY = re.compile(rf"([?&;])([^=&#;{_STOP}]*)=([^&#;{_STOP}]*)")
# userinfo quoted without a scheme: name:secret@host.domain
_BARE = re.compile(rf"(?<![^{_STOP}(\[,=])([A-Za-z0-9._~%+-]+):([^@/{_STOP}]+)@(?=[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")
_MIN_REMEMBERED = 6     # shorter strings are not masked everywhere (a user name, a word)
_known: set[str] = set()


def _decode(s: str) -> str:
    for _ in range(3):
        d = unquote(s)
        if d == s:
            break
        s = d
    return s


def _userinfo(rest: str) -> tuple[str, str] | None:
    """``(userinfo, after)`` when ``rest`` (what follows ``scheme://``) starts with a userinfo."""
    head = re.split(r"[?#]", rest, maxsplit=1)[0]
    at = head.rfind("@")
    if at <= 0:
        return None
    info = head[:at]
    if "/" in info and ":" not in info.split("/", 1)[0]:
        return None          # an @ inside the path (bucket/model@v2), not a userinfo
    return info, rest[at:]


def _parts(scheme: str, rest: str) -> tuple[str, list[str]]:
    """``rest`` with its secrets masked, and the secrets found."""
    found: list[str] = []
    ui = _userinfo(rest)
    if ui is not None:
        info, after = ui
        if scheme.lower() in _AZURE:
            name, colon, key = info.partition(":")
            if colon:
                found.append(key)
                rest = f"{name}:{MASK}{after}"
        else:
            found.append(info.partition(":")[2] or info)
            rest = MASK + after

    return _QUERY.sub(lambda m: _param(m, found, ";?&"), rest), found


def _param(m: re.Match, found: list[str], leads: str) -> str:
    """One ``name=value`` query parameter, its value masked when the name says secret (a trailing
    ``:``, ``,``, ``.`` or bracket, the message's punctuation, stays)."""
    value = m.group(3)
    secret = value.rstrip(":,.;)]")
    if m.group(1) not in leads or not secret or not SECRET_NAMES.search(m.group(2)):
        return m.group(0)
    found.append(secret)
    return f"{m.group(1)}{m.group(2)}={MASK}{value[len(secret):]}"


def _token(m: re.Match, found: list[str]) -> str:
    raw = m.group(0)
    for text in (raw, _decode(raw)):
        t = _TOKEN.match(text)
        if t is None:
            continue
        rest, secrets = _parts(t.group(1), t.group(3))
        if secrets:
            found.extend(secrets)
            return t.group(1) + t.group(2) + rest
    return raw


def _scan(text: str) -> tuple[str, list[str]]:
    found: list[str] = []
    out = _TOKEN.sub(lambda m: _token(m, found), text)

    def bare(m):
        found.append(m.group(2))
        return f"{m.group(1)}:{MASK}@"
    out = _BARE.sub(bare, out)
    return _QUERY.sub(lambda m: _param(m, found, "?&"), out), found


def scrub(text) -> str:
    """``text`` with every secret replaced by ``REDACTED`` (see the module's list); ``str(text)`` of a
    non-string. Text without a secret comes back unchanged."""
    s = text if isinstance(text, str) else str(text)
    if not s:
        return s
    out, _ = _scan(s)
    for secret in sorted(_known, key=len, reverse=True):
        if secret in out:
            out = out.replace(secret, MASK)
    return out


def carries_credentials(location) -> bool:
    """True when a location (a URI, a path, an argument) holds a secret :func:`scrub` would mask."""
    return bool(isinstance(location, str) and _scan(location)[1])


def remember(argv) -> None:
    """Remember the secrets in a command line (each, decoded too, at least 6 characters), so that
    :func:`scrub` masks them wherever they turn up again in this process."""
    for arg in argv or ():
        for secret in _scan(str(arg))[1]:
            for s in {secret, _decode(secret), *_decode(secret).split("/")}:
                if len(s) >= _MIN_REMEMBERED:
                    _known.add(s)


def scrub_argv(argv) -> list[str]:
    """A command line (list of arguments) with each argument scrubbed."""
    return [scrub(a) for a in argv]


def command_line(prog: str, argv=None) -> str:
    """The command line to store in a record (metadata, a manifest, a training report): ``prog``
    and ``argv`` (default ``sys.argv[1:]``) shell-quoted, every secret scrubbed."""
    import shlex
    args = sys.argv[1:] if argv is None else list(argv)
    return scrub(" ".join([prog, shlex.join(scrub_argv(args))]).rstrip())


def scrub_doc(doc):
    """A JSON-like document (dicts, lists, tuples, strings, numbers) with every string scrubbed,
    keys included; other values are returned as they are."""
    if isinstance(doc, str):
        return scrub(doc)
    if isinstance(doc, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub_doc(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return type(doc)(scrub_doc(v) for v in doc)
    return doc


class _Scrubbed:
    """A text stream whose writes go through :func:`scrub` (everything else is the stream's)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, s):
        return self._stream.write(scrub(s) if isinstance(s, str) else s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _excepthook(kind, value, tb) -> None:
    """The interpreter's report of an uncaught exception (a bug keeps its traceback), scrubbed."""
    import traceback
    sys.stderr.write(scrub("".join(traceback.format_exception(kind, value, tb))))


@contextlib.contextmanager
def scrubbed_output(argv=()):
    """While the block runs, every write to ``sys.stdout`` and ``sys.stderr`` (prints, warnings,
    notes, the error line) is scrubbed, with the secrets of ``argv`` remembered first; the
    traceback of an exception that ends the process is scrubbed too (``sys.excepthook``)."""
    remember(argv)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _excepthook
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Scrubbed(out), _Scrubbed(err)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _Scrubbed):
            sys.stdout = out
        if isinstance(sys.stderr, _Scrubbed):
            sys.stderr = err
