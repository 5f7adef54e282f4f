"""Writing and removing output files without leaving the folder the user named.

Every output of the command-line tools (``fit --out FILE``, the report's tables,
figures, ``index.md`` and ``manifest.json``) goes through :func:`write_file`:

* the data go to a temporary file created in the target folder with
  :func:`tempfile.mkstemp` (a random name, ``O_CREAT | O_EXCL``: a file or link
  planted there beforehand is never opened), then ``os.replace`` moves it onto the
  final name. ``rename`` replaces a symbolic link planted at the final name; it never
  writes through it;
* with ``root``, every folder between ``root`` and the file is created or checked
  with ``lstat``: a symbolic link (or a non-folder) in the way is refused with one
  line, so nothing is written outside ``root``.

:func:`remove_file` removes a previous output only when its relative path passes
:func:`check_output_path` (relative, no ``..``, a name this tool writes) and no
folder on the way is a link; a link at the name itself is removed as a link.
"""
from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path, PurePosixPath

from glance_law.errors import GlanceError


class OutputError(GlanceError):
    """An output cannot be written or removed safely (one line: path, problem, what to do)."""


#: Relative paths the report writes: ``tables/<stem>.(md|tex|csv)``, ``figures/<stem>.(png|pdf)``.
OUTPUT_PATTERN = re.compile(r"(?:tables/[A-Za-z0-9][A-Za-z0-9._-]*\.(?:md|tex|csv)"
                            r"|figures/[A-Za-z0-9][A-Za-z0-9._-]*\.(?:png|pdf))")


def safe_stem(name) -> str:
    """``name`` as one file-name component: letters, digits, ``. _ -`` kept, anything else ``_``,
    no leading dot (a log-supplied drafter or task name can never make a path)."""
    s = re.sub(r"[^A-Za-z0-9._-]", "_", str(name)).lstrip(".")
    return s or "_"


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


def _folder_chain(root: Path, parent: Path) -> None:
    """Create or check every folder from ``root`` down to ``parent`` (inclusive), refusing links."""
    try:
        rel = parent.relative_to(root)
    except ValueError:
        raise OutputError(f"{parent}: outside {root}; refusing to write there") from None
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
            st = os.lstat(cur)
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(f"{cur}: is a symbolic link; refusing to write through it (outputs stay inside "
                              f"{root}); remove the link and run again")
        if not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{cur}: exists and is not a folder; remove it and run again")


def write_file(path, data: bytes | str, root=None) -> Path:
    """Write ``data`` to ``path`` atomically: a fresh temporary file in the same folder (random
    name, exclusive create), flushed, then renamed onto ``path``. With ``root``, the folders from
    ``root`` to ``path`` are created as needed and none may be a symbolic link."""
    path = Path(path)
    if root is not None:
        _folder_chain(Path(root), path.parent)
    blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the output ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fh.fileno(), 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OutputError(f"{path}: cannot write the output ({exc.strerror or exc})") from None
    return path


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
    os.unlink(target)
    return True
