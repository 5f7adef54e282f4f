"""Round logging for decoders other than glance-log's own (see docs/hooks.md), one module per
engine, all feeding the same :class:`glance_log.record.RoundLogger` (or, for GLANCE, the same
contract) so the rows follow glance-log's contract and resolution rules:

* :mod:`.hf` - :func:`hf_generate_hook`: Hugging Face ``generate`` with any candidate generator
  transformers ships (assistant model, prompt lookup, early exit, MTP, DFlash, Gemma 4
  assistant, cross-tokenizer assistants);
* :mod:`.glance` - :class:`GlanceOnRound`: GLANCE's ``generate(on_round=...)`` dictionaries;
* :mod:`.dflash` - :class:`dflash_hook`: the ``dflash`` package's ``dflash_generate``;
* :mod:`.common` - what they share (attachments removed on every exit, stop reasons).
"""
from .dflash import dflash_hook
from .glance import GlanceOnRound
from .hf import GENERATORS, HFRoundRecorder, generator_kind, hf_generate_hook

__all__ = ["hf_generate_hook", "GlanceOnRound", "dflash_hook", "HFRoundRecorder", "GENERATORS", "generator_kind"]
