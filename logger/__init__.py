"""glance_log: a round logger for speculative decoders (torch/transformers).

Modules: ``models`` (loading targets; the verify/commit operations), ``drafters``
(ar, pld, two_model, block), ``decode`` (the reference tree-verify decoder),
``record`` (the round logger), ``hooks`` (HF generate, GLANCE on_round, dflash),
``tasks`` (task items and local loaders), ``run``/``cli`` (``glance-log``).
The common entry points are importable from the package (lazily: importing
``glance_log`` alone does not import torch).
"""

_EXPORTS = {
    "load_target": "models", "Target": "models",
    "make_drafter": "drafters",
    "Forced": "decode", "greedy_reference": "decode",   # the loop itself: glance_log.decode.decode
    "RoundLogger": "record",
    "hf_generate_hook": "hooks", "GlanceOnRound": "hooks", "dflash_hook": "hooks",
    "TaskItem": "tasks", "load_items": "tasks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'glance_log' has no attribute {name!r}")
