"""Tasks: the item type every task source yields.

Loaders for local data (JSONL folders, Hugging Face ``datasets`` folders) and
the embedded synthetic suite (:mod:`glance_log.suite`) all produce
:class:`TaskItem` objects.
"""
from __future__ import annotations

from dataclasses import dataclass

#: Task families ordered from open to grounded, then the no-decode-loop control.
TASKS = ("caption", "textvqa", "infovqa", "docvqa", "chartqa", "scienceqa")
GROUNDING_ORDER = ("caption", "textvqa", "infovqa", "docvqa", "chartqa")


@dataclass(frozen=True)
class TaskItem:
    """One prompt of a task.

    ``prompt``: the full text a text-only target reads (the context block standing
    in for the image, then the question). ``question``: the question alone, for a
    vision-language target that sees ``image`` instead of the context text.
    ``reference``: the reference answer or OCR/context text (``copy_len`` is measured
    against it). ``image``: path of the image (or of the context rendered as PNG).
    """

    prompt_id: str
    task: str
    prompt: str
    reference: str | None = None
    image: str | None = None
    question: str | None = None
    context: str | None = None
    answer: str | None = None
