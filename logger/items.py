"""The item every task source yields (:class:`TaskItem`) and the task names (:data:`TASKS`).

Shared by :mod:`glance_log.tasks` (local loaders) and :mod:`glance_log.suite` (the embedded
synthetic suite); it imports neither.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TASKS", "TaskItem"]

from glance_law.data.tasks import TASKS  # open to grounded, then the no-decode-loop control


@dataclass(frozen=True)
class TaskItem:
    """One prompt of a task.

    ``prompt``: the full text a text-only target reads (the context block standing
    in for the image, then the question). ``question``: the question alone, for a
    vision-language target that sees ``image`` instead of the context text.
    ``reference``: the reference answer or OCR/context text (``copy_len`` is measured
    against it). ``image``: path of the image (or of the context rendered as PNG).
    ``image_bytes``: the encoded image when a dataset stores it inline (no path).
    """

    prompt_id: str
    task: str
    prompt: str
    reference: str | None = None
    image: str | None = None
    question: str | None = None
    context: str | None = None
    answer: str | None = None
    image_bytes: bytes | None = None
