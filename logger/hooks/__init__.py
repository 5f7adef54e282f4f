"""Round logging for decoders other than glance-log's own (see docs/hooks.md), one module per
engine, all feeding the same :class:`glance_log.record.RoundLogger` (or, for GLANCE, the same
contract) so the rows follow glance-log's contract and resolution rules:

* :mod:`.hf` - :func:`hf_generate_hook`: Hugging Face ``generate`` with any candidate generator
  transformers ships (assistant model, prompt lookup, early exit, MTP, DFlash, Gemma 4
  assistant, cross-tokenizer assistants);
* :mod:`.glance` - :class:`GlanceOnRound`: GLANCE's ``generate(on_round=...)`` dictionaries
  (torch-free);
* :mod:`.dflash` - :class:`dflash_hook`: the ``dflash`` package's ``dflash_generate``;
* :mod:`.llamacpp` - :func:`llamacpp_hook`: a ``llama_cpp.Llama``'s ``generate`` /
  ``create_completion``, plain or with a ``draft_model`` (llama-cpp-python);
* :mod:`.common` - what they share (attachments removed on every exit, stop reasons).

The names are imported lazily: ``from glance_log.hooks import GlanceOnRound`` does not import
torch.
"""

_EXPORTS = {
    "hf_generate_hook": "hf", "HFRoundRecorder": "hf", "GENERATORS": "hf", "generator_kind": "hf",
    "generator_settings": "hf",
    "GlanceOnRound": "glance",
    "dflash_hook": "dflash",
    "llamacpp_hook": "llamacpp",
}

__all__ = ["hf_generate_hook", "GlanceOnRound", "dflash_hook", "llamacpp_hook", "HFRoundRecorder", "GENERATORS",
           "generator_kind", "generator_settings"]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'glance_log.hooks' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
