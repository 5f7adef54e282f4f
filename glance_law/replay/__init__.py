"""Replay from the logs: the candidate tree (:mod:`.tree`), counterfactual replay of every tree
budget (:mod:`.chains`), shared-budget allocation (:mod:`.allocate`) and entropy-keyed width
allocation (:mod:`.width`).

The package itself is callable: ``glance_law.replay(rounds, n_max=..., budgets=...)`` is
:func:`glance_law.replay.chains.replay` (``gl.replay`` names both this package and the function).
"""
import sys
import types

from .chains import (
    Replay,
    ReplayArrays,
    chain_run,
    group_labels,
    replay,
    replay_arrays,
    round_arrays,
    target_prefixes,
)

__all__ = ["replay_arrays", "target_prefixes", "group_labels", "ReplayArrays", "round_arrays", "replay", "Replay",
           "chain_run"]


class _ReplayPackage(types.ModuleType):
    def __call__(self, rounds, **kwargs) -> Replay:
        """:func:`glance_law.replay.chains.replay`."""
        return replay(rounds, **kwargs)


sys.modules[__name__].__class__ = _ReplayPackage
