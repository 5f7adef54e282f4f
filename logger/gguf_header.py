"""A GGUF file's header read and checked before transformers converts it (:mod:`glance_log.sources`).

transformers builds the model from the header's architecture and hyper-parameters first and fills
its weights after: a tiny file naming an architecture and holding no tensors (56 bytes: ``llama``,
no tensors) built the default 7B Llama with random weights until memory ran out. Here the header
is parsed with bounds from the file's size alone (every count is checked against the bytes left
before a loop runs), and refused in one line unless

* the architecture is named (``general.architecture``) and, for the families whose layout is
  known (:data:`BLOCK_TENSORS`), ``{arch}.block_count`` is a positive count and every block holds
  its attention and feed-forward tensors, with the token embedding and the final norm;
* any other architecture holds at least one tensor;
* every tensor's type is known and its data lies inside the file (offset plus size, from the type's
  block size), so no tensor larger than the file is ever allocated for it.

The format (GGUF versions 2 and 3): magic ``GGUF``, version (uint32), tensor count and key/value
count (uint64), the key/values (string key, uint32 type, value; arrays: uint32 element type, uint64
count), the tensor infos (name, uint32 dims, uint64 sizes, uint32 type, uint64 offset), then the
data, aligned to ``general.alignment`` (default 32). Read with ``struct`` from the file's bytes:
the gguf package's reader parses every array (a 262,144-token vocabulary) into numpy objects
and took a minute on a 2-core machine.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field

from glance_law.errors import GlanceError

__all__ = ["Header", "read_header", "check_tensors", "BLOCK_TENSORS"]

#: Per-block tensors (``blk.N.<name>``) of the decoder families whose layout is known; each entry
#: is a set of alternatives (one of them suffices: a fused ``attn_qkv`` for separate q, k, v).
_ATTN = (("attn_q.weight", "attn_k.weight", "attn_v.weight"), ("attn_qkv.weight",))
_DENSE = ((("attn_output.weight",),), _ATTN, (("ffn_down.weight",), ("ffn_down_exps.weight",)),
          (("attn_norm.weight",),))
BLOCK_TENSORS = {arch: _DENSE for arch in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
                                            "qwen2moe", "qwen3moe", "granite", "olmo2")}
#: Tensors outside the blocks that every family of :data:`BLOCK_TENSORS` needs.
GLOBAL_TENSORS = ("token_embd.weight", "output_norm.weight")

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 8


@dataclass
class Header:
    """What the check needs of a GGUF header: scalar and string fields (arrays by their length),
    and each tensor's (name, dims, type, offset); ``data_start`` is where the tensor data begins."""

    version: int
    fields: dict = field(default_factory=dict)
    tensors: list = field(default_factory=list)
    data_start: int = 0
    size: int = 0


class _Bad(Exception):
    pass


class _Cursor:
    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, fmt: str):
        n = struct.calcsize("<" + fmt)
        if self.pos + n > self.size:
            raise _Bad(f"the header ends early (at byte {self.pos} of {self.size})")
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += n
        return v[0] if len(v) == 1 else v

    def count(self, n: int, each: int, what: str) -> int:
        """``n`` items of at least ``each`` bytes: refused when the bytes left cannot hold them."""
        if n * each > self.size - self.pos:
            raise _Bad(f"{what} claims {n:,} entries, more than the {self.size - self.pos:,} bytes left can hold")
        return n

    def string(self) -> str:
        n = self.count(self.take("Q"), 1, "a string")
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return raw.decode("utf-8", "replace")

    def value(self, t: int):
        if t in _SCALARS:
            return self.take(_SCALARS[t])
        if t == _STRING:
            return self.string()
        if t == _ARRAY:
            et = self.take("I")
            n = self.take("Q")
            if et in _SCALARS:
                width = struct.calcsize("<" + _SCALARS[et])
                self.pos += width * self.count(n, width, "an array")
            elif et == _STRING:
                for _ in range(self.count(n, 8, "an array of strings")):
                    k = self.count(self.take("Q"), 1, "a string")      # taken before pos is read
                    self.pos += k
            else:
                raise _Bad(f"an array of unknown type {et}")
            return ("array", n)
        raise _Bad(f"a value of unknown type {t}")


def read_header(path, shown: str | None = None) -> Header:
    """The header of the GGUF file ``path`` (its data is never read); a GlanceError (one line, naming
    the file as ``shown``) for a file that is not GGUF, a version other than 2 or 3, or a header that
    does not fit the file."""
    shown = str(path) if shown is None else shown
    size = os.stat(path).st_size
    if size < 24:
        raise GlanceError(f"{shown} is not a GGUF file ({size} bytes, shorter than a GGUF header); pass a .gguf "
                          "model file or a Hugging Face model folder")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if bytes(buf[:4]) != b"GGUF":
            raise GlanceError(f"{shown} is not a GGUF file (it does not start with the GGUF magic); pass a .gguf "
                              "model file or a Hugging Face model folder")
        c = _Cursor(buf, size)
        c.pos = 4
        try:
            version = c.take("I")
            if version not in (2, 3):
                raise _Bad(f"GGUF version {version}; versions 2 and 3 are read")
            n_tensors, n_kv = c.take("Q"), c.take("Q")
            h = Header(version, size=size)
            for _ in range(c.count(n_kv, 12, "the key/value count")):
                key = c.string()
                h.fields[key] = c.value(c.take("I"))
            for _ in range(c.count(n_tensors, 24, "the tensor count")):
                name = c.string()
                nd = c.take("I")
                if nd > _MAX_DIMS:
                    raise _Bad(f"tensor {name!r} has {nd} dimensions")
                dims = [c.take("Q") for _ in range(nd)]
                h.tensors.append((name, dims, c.take("I"), c.take("Q")))
        except _Bad as exc:
            raise GlanceError(f"{shown}: cannot read this GGUF file, it is corrupt or truncated ({exc}); download "
                              "it again or pass a Hugging Face model folder") from None
    align = h.fields.get("general.alignment", 32)
    align = align if isinstance(align, int) and not isinstance(align, bool) and 0 < align <= 1 << 20 else 32
    h.data_start = -(-c.pos // align) * align
    return h


def _nbytes(dims, ggml_type: int) -> int | None:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None
    n = 1
    for d in dims:
        n *= int(d)
    return -(-n // block) * size


def check_tensors(h: Header, shown: str) -> None:
    """Refuse (one line) a header whose architecture lacks tensors it needs, or whose tensors do
    not fit the file (see the module notes)."""
    arch = h.fields.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GlanceError(f"{shown}: the GGUF file names no architecture (general.architecture); it is no model "
                          "file transformers can load: pass a .gguf model file or a Hugging Face model folder")
    names = {t[0] for t in h.tensors}
    fix = "download the model again or pass a Hugging Face model folder"
    if not names:
        raise GlanceError(f"{shown}: the GGUF file ({arch}) holds no tensors, so there are no weights to load; {fix}")
    if arch in BLOCK_TENSORS:
        blocks = h.fields.get(f"{arch}.block_count")
        if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks <= 0:
            raise GlanceError(f"{shown}: the GGUF file ({arch}) gives no positive {arch}.block_count; {fix}")
        missing = [n for n in GLOBAL_TENSORS if n not in names]
        for i in range(min(blocks, len(names) + 1)):
            for need in BLOCK_TENSORS[arch]:
                if not any(all(f"blk.{i}.{n}" in names for n in alt) for alt in need):
                    missing.append(f"blk.{i}.{need[0][0]}")
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise GlanceError(f"{shown}: the GGUF file ({arch}, {blocks} blocks) lacks tensor(s) its architecture "
                              f"needs: {', '.join(missing[:3])}{more}; {fix}")
    room = h.size - h.data_start
    for name, dims, ggml_type, offset in h.tensors:
        nbytes = _nbytes(dims, ggml_type)
        if nbytes is None:
            raise GlanceError(f"{shown}: tensor {name!r} has an unknown GGUF type {ggml_type}; {fix}")
        if offset + nbytes > room:
            raise GlanceError(f"{shown}: cannot read this GGUF file, it is corrupt or truncated (tensor {name!r}, "
                              f"{'x'.join(map(str, dims))}, ends at byte {h.data_start + offset + nbytes:,} of a "
                              f"{h.size:,}-byte file); {fix}")
