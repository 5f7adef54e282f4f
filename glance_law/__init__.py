"""glance-law: how long a draft will the target accept, and why.

An offline library (no torch) over round logs written by ``glance-log``: the affine-logit
draftability law, the noise ceiling, the grounded tail, Fano bounds, width allocation and the
evidence analyses. ``import glance_law as gl`` is the front door::

    import glance_law as gl
    rounds = gl.read_rounds("logs/")
    law = gl.fit_law(rounds, by="task")
    print(law.summary())

Every name below is imported on first use (``import glance_law`` alone loads neither pyarrow
nor scipy, statsmodels or pandas). Functions that take rounds and return a result take
``(rounds, *, by=..., level=..., seed=..., ...)``; results are frozen
:class:`~glance_law.results.Result` objects (``summary()``, ``to_frame()``, ``to_latex()``).

The package is layered (lower layers never import higher ones): ``data`` (the contract, file
I/O, importers) < ``stats`` (clustered inference, curves, ceiling) and ``results`` (the Result
base, rendering) < the statistic families ``law``, ``tail``, ``replay``, ``evidence``, ``fano``,
``brackets``, ``simulate`` < ``scale`` (out of core) < ``appendix`` < ``cli``.
"""
from __future__ import annotations

import importlib

from ._version import __version__

#: public name -> the module that defines it
_EXPORTS = {
    # data: reading and writing logs
    "read_logs": "glance_law.data.io", "read_rounds": "glance_law.data.io",
    "read_prompts": "glance_law.data.io", "write_table": "glance_law.data.io",
    "LogWriter": "glance_law.data.io", "LogSet": "glance_law.data.io", "LogError": "glance_law.data.io",
    "GlanceError": "glance_law.errors", "MissingColumnError": "glance_law.errors",
    "Result": "glance_law.results.base", "TableResult": "glance_law.results.base",
    # the law and the ceiling
    "fit_law": "glance_law.law.fit", "LawFit": "glance_law.law.result",
    "noise_ceiling": "glance_law.stats.ceiling",
    # the tail
    "fit_tail": "glance_law.tail.report", "tail_test": "glance_law.tail.report", "TailFit": "glance_law.tail.report",
    # Fano, brackets
    "fano_check": "glance_law.fano", "bracket_curves": "glance_law.brackets",
    # replay and width
    "replay": "glance_law.replay", "build_tree": "glance_law.replay.tree",
    "width_allocation": "glance_law.replay.width",
    # the evidence analyses
    "offset_law": "glance_law.evidence.offsets", "offset_hazards": "glance_law.evidence.offsets",
    "assumption2_test": "glance_law.evidence.offsets", "run_survival": "glance_law.evidence.offsets",
    "probe": "glance_law.evidence.probe", "signal_effect": "glance_law.evidence.probe",
    "task_order": "glance_law.evidence.order", "transfer": "glance_law.evidence.transfer",
    "audit": "glance_law.evidence.audit",
    "timing_ledger": "glance_law.evidence.timing", "round_cost": "glance_law.evidence.timing",
    "turn_tau": "glance_law.evidence.turns", "TurnTau": "glance_law.evidence.turns",
    # serving scale
    "reduce_logs": "glance_law.scale.engines", "reduce_frame": "glance_law.scale.reduce",
    "read_reduced": "glance_law.scale.reduce", "write_reduced": "glance_law.scale.reduce",
    "fit_reduced": "glance_law.scale.law_reduced", "tail_reduced": "glance_law.scale.law_reduced",
    # simulation
    "simulate_rounds": "glance_law.simulate", "simulate_tree_rounds": "glance_law.simulate",
    "TaskSpec": "glance_law.simulate",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'glance_law' has no attribute {name!r}")
    mod = importlib.import_module(module)
    value = mod if module == f"glance_law.{name}" else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
