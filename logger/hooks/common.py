"""What the hooks share: attaching to other libraries' objects so that everything attached
comes off again (also when attaching, decoding or the hook itself fails), the stop
reason of an output, and the target's vocabulary size for the run metadata."""
from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["Attachments", "stop_reason", "vocab_size", "record_vocab_size"]

_MISSING = object()


class Attachments:
    """Forward hooks and attribute patches a hook puts on a model, removed together.

    ``hook(handle)`` keeps a ``torch.utils.hooks.RemovableHandle``; ``patch(obj, name, value)``
    sets an instance attribute and remembers whether one was there before (a method patched on
    the instance is deleted again, so the class's method shows through). :meth:`remove` undoes
    everything in reverse order, even when one undo fails (the first error is raised after)."""

    def __init__(self):
        self._undo: list[Callable[[], None]] = []

    def hook(self, handle):
        self._undo.append(handle.remove)
        return handle

    def patch(self, obj, name: str, value) -> None:
        old = vars(obj).get(name, _MISSING)

        def undo():
            if old is _MISSING:
                vars(obj).pop(name, None)
            else:
                setattr(obj, name, old)

        setattr(obj, name, value)
        self._undo.append(undo)

    def remove(self) -> None:
        first = None
        while self._undo:
            try:
                self._undo.pop()()
            except Exception as exc:       # keep undoing; report the first failure
                first = first or exc
        if first is not None:
            raise first

    def __len__(self) -> int:
        return len(self._undo)


def stop_reason(tokens: list, stop_ids: Iterable[int]) -> str:
    """``eos`` when the output ends with one of ``stop_ids``, else ``max_new_tokens``
    (glance-log's names)."""
    stop = {int(t) for t in stop_ids}
    return "eos" if tokens and int(tokens[-1]) in stop else "max_new_tokens"


def vocab_size(model) -> int | None:
    """The target's vocabulary size: the rows of its output head (what its logits span, as
    glance-log records it), else its (text) config's ``vocab_size``; None when neither is there."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    weight = getattr(head, "weight", None)
    if weight is not None and getattr(weight, "ndim", 0) == 2:
        return int(weight.shape[0])
    cfg = getattr(model, "config", None)
    text = cfg.get_text_config() if callable(getattr(cfg, "get_text_config", None)) else cfg
    v = getattr(text, "vocab_size", None)
    return int(v) if isinstance(v, int) else None


def record_vocab_size(logger, model) -> None:
    """Put the target's vocabulary size in the run metadata of ``logger``'s files (the Fano section
    reads it) unless the run metadata already names one."""
    v = vocab_size(model)
    if v is not None and callable(getattr(logger, "run_defaults", None)):
        logger.run_defaults(vocab_size=v)
