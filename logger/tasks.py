"""Tasks: the item type every task source yields, the task registry and local loaders.

Sources (local data only; nothing is downloaded):

* a folder of JSONL files, one item a line:
  ``{"image": "relative/path.png", "prompt": "...", "reference": "optional OCR or answer"}``
  (optional keys: ``id``, ``question``, ``context``, ``answer``); image paths are relative
  to the JSONL file's folder;
* a Hugging Face ``datasets`` folder written by ``save_to_disk`` (Arrow files, a
  ``DatasetDict`` with split folders or a single ``Dataset``) or a folder of Parquet
  files (as the Hub stores datasets) - read with pyarrow, the ``datasets`` package is
  not needed;
* no ``--data``: the embedded synthetic suite, :func:`glance_log.suite.load_items`.

Every loader returns :class:`TaskItem` objects with stable ``prompt_id`` values (the
record's ``id`` or the file name and line/row number).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from glance_law.errors import GlanceError

from .items import TASKS, TaskItem  # noqa: F401 (public here too)


@dataclass(frozen=True)
class TaskSpec:
    name: str
    default_prompt: str | None      # used when a record has no prompt/question (captioning)
    description: str


REGISTRY = {
    "caption": TaskSpec("caption", "Describe the image in one sentence.", "open-ended image captioning"),
    "textvqa": TaskSpec("textvqa", None, "questions about scene text"),
    "infovqa": TaskSpec("infovqa", None, "questions about infographics"),
    "docvqa": TaskSpec("docvqa", None, "questions about document images (forms, invoices)"),
    "chartqa": TaskSpec("chartqa", None, "questions about charts"),
    "scienceqa": TaskSpec("scienceqa", None, "multiple-choice science questions (one-letter answers: "
                                             "the no-decode-loop control)"),
}

PROMPT_KEYS = ("prompt", "question", "query", "instruction")
REFERENCE_KEYS = ("reference", "ocr", "ocr_text", "ocr_tokens", "answers", "answer", "label", "caption",
                  "captions", "sentences", "text")
CONTEXT_KEYS = ("context", "hint", "ocr", "ocr_text")


def check_task(task: str) -> TaskSpec:
    try:
        return REGISTRY[task]
    except KeyError:
        raise GlanceError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}") from None


def _text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        parts = [_text(x) for x in v]
        parts = [p for p in parts if p]
        return " ".join(parts) if parts else None
    if isinstance(v, dict):
        for k in ("text", "raw", "caption", "answer"):
            if k in v:
                return _text(v[k])
        return None
    return str(v)


def _first(rec: dict, keys) -> str | None:
    for k in keys:
        if k in rec and rec[k] is not None:
            t = _text(rec[k])
            if t:
                return t
    return None


def _choices_prompt(question: str, choices) -> str:
    letters = "ABCDEFGHIJ"
    opts = " ".join(f"({letters[i]}) {_text(c)}" for i, c in enumerate(choices) if i < len(letters))
    return f"{question} {opts}".strip()


def item_from_record(rec: dict, task: str, prompt_id: str, base: Path | None, where: str) -> TaskItem:
    """Build a TaskItem from one record (a JSONL line or a dataset row)."""
    if not isinstance(rec, dict):
        raise GlanceError(f"{where}: expected a JSON object with at least 'prompt' (or 'question')")
    spec = check_task(task)
    question = _first(rec, PROMPT_KEYS)
    if question is None:
        question = spec.default_prompt
    if question is None:
        raise GlanceError(f"{where}: no 'prompt' (or question/query) field; every {task} item needs one")
    if rec.get("choices") is not None and isinstance(rec["choices"], (list, tuple)):
        question = _choices_prompt(question, rec["choices"])
    reference = _first(rec, REFERENCE_KEYS)
    context = _first(rec, CONTEXT_KEYS)
    image, image_bytes = None, None
    img = rec.get("image")
    if isinstance(img, dict):
        if img.get("bytes"):
            image_bytes = bytes(img["bytes"])
        elif img.get("path"):
            img = img["path"]
    if isinstance(img, str) and img:
        p = Path(img)
        if not p.is_absolute() and base is not None:
            p = base / p
        if not p.exists():
            raise GlanceError(f"{where}: image {img!r} not found (paths are relative to the data file's folder)")
        image = str(p)
    elif isinstance(img, (bytes, bytearray)):
        image_bytes = bytes(img)
    prompt = rec.get("prompt") if isinstance(rec.get("prompt"), str) else None
    if prompt is None:
        prompt = f"{context}\n{question}" if context and image is None and image_bytes is None else question
    answer = _first(rec, ("answer", "answers", "label"))
    return TaskItem(prompt_id=str(rec.get("id", prompt_id)), task=task, prompt=prompt, reference=reference,
                    image=image, question=question if rec.get("prompt") is None else rec.get("question", question),
                    context=context, answer=answer, image_bytes=image_bytes)


def load_jsonl(path: Path, task: str) -> list[TaskItem]:
    from glance_law.data.inputs import JSONLimitError, loads, read_text
    items = []
    text = read_text(path)         # bounded: gzip streamed, 64 MiB lines, FIFOs and devices refused
    for k, raw in enumerate(text.split(b"\n"), 1):
        if not raw.strip():
            continue
        lineno = text.lineno(k)
        where = f"{path}:{lineno}"
        try:
            rec = loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise GlanceError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise GlanceError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno}); each line must be "
                              '{"image": ..., "prompt": ..., "reference": ...}') from None
        except JSONLimitError as exc:
            raise GlanceError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(rec, dict):
            raise GlanceError(f"{where}: expected a JSON object (image, prompt, reference), got {type(rec).__name__}")
        items.append(item_from_record(rec, task, f"{path.stem}-{lineno:05d}", path.parent, where))
    return items


def _read_arrow(path: Path):
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as src:
            try:
                return pa.ipc.open_stream(src).read_all()
            except pa.ArrowInvalid:
                pass
        with pa.memory_map(str(path)) as src:
            return pa.ipc.open_file(src).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise GlanceError(f"{path}: not a readable Arrow file ({str(exc).splitlines()[0][:100]})") from None


def _read_parquet(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise GlanceError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0][:100]})") from None


def _dataset_files(folder: Path, split: str | None):
    """Arrow (save_to_disk) or Parquet files of one split of a datasets folder."""
    dd = folder / "dataset_dict.json"
    if dd.exists():
        splits = json.loads(dd.read_text()).get("splits", [])
        pick = split if split in splits else next((s for s in ("test", "validation", "val", "train") if s in splits),
                                                  splits[0] if splits else None)
        if pick is None:
            raise GlanceError(f"{dd}: lists no splits")
        return sorted((folder / pick).glob("*.arrow")), pick
    arrows = sorted(folder.glob("*.arrow"))
    if arrows:
        return arrows, None
    parquets = sorted(folder.rglob("*.parquet"))
    if parquets and split is not None:
        chosen = [p for p in parquets if split in p.name or split in p.parent.name]
        parquets = chosen or parquets
    elif parquets:
        for s in ("test", "validation", "val", "train"):
            chosen = [p for p in parquets if p.name.startswith(s) or p.parent.name == s or f"{s}-" in p.name]
            if chosen:
                parquets = chosen
                break
    return parquets, None


def load_dataset_folder(folder: Path, task: str, split: str | None = None) -> list[TaskItem]:
    files, _ = _dataset_files(folder, split)
    if not files:
        raise GlanceError(f"{folder}: no *.jsonl, *.arrow (save_to_disk) or *.parquet files found")
    items = []
    for f in files:
        table = _read_arrow(f) if f.suffix == ".arrow" else _read_parquet(f)
        for i, rec in enumerate(table.to_pylist()):
            where = f"{f} row {i}"
            items.append(item_from_record(rec, task, f"{f.stem}-{i:06d}", f.parent, where))
    return items


def load_items(task: str, data=None, n: int | None = 20, seed: int = 0, split: str | None = None) -> list[TaskItem]:
    """``n`` items of ``task``: from ``data`` (a JSONL folder/file, a datasets folder, or a Parquet
    folder) or, when ``data`` is None, from the embedded suite's held-out split.

    With local data, ``n`` items are drawn without replacement by ``seed`` (file order kept);
    ``n=None`` takes every item."""
    check_task(task)
    if data is None:
        try:
            from . import suite
        except ImportError as exc:
            raise GlanceError(f"the embedded task suite is not available ({exc}); pass --data DIR") from None
        return list(suite.load_items(task, split="heldout", n=n if n is not None else 20, seed=seed))
    path = Path(data)
    if not path.exists():
        raise GlanceError(f"--data {path}: no such file or folder")
    if not path.is_dir():
        from glance_law.data.inputs import check_regular
        check_regular(path, "--data file")      # a FIFO or device: one line, never a hang
    if path.is_file():
        if path.suffix == ".jsonl":
            items = load_jsonl(path, task)
        elif path.suffix == ".parquet":
            items = [item_from_record(r, task, f"{path.stem}-{i:06d}", path.parent, f"{path} row {i}")
                     for i, r in enumerate(_read_parquet(path).to_pylist())]
        else:
            raise GlanceError(f"--data {path}: expected a folder, a .jsonl or a .parquet file")
    else:
        jsonl = sorted(path.glob("*.jsonl"))
        if jsonl:
            items = [it for f in jsonl for it in load_jsonl(f, task)]
        else:
            items = load_dataset_folder(path, task, split)
    if not items:
        raise GlanceError(f"--data {path}: holds no items")
    ids = [it.prompt_id for it in items]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise GlanceError(f"--data {path}: prompt id {dup!r} occurs more than once; ids must be unique")
    if n is not None and n < len(items):
        keep = sorted(random.Random(seed).sample(range(len(items)), n))
        items = [items[i] for i in keep]
    return items


def derangement(n: int) -> list[int]:
    """The fixed derangement of the mismatched probe: item i borrows item (i + 1) mod n."""
    if n < 2:
        raise GlanceError("--probe mismatched needs at least two prompts (one borrows another's image)")
    return [(i + 1) % n for i in range(n)]
