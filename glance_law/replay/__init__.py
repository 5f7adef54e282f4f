"""Replay from the logs: the candidate tree (:mod:`.tree`), counterfactual replay of every tree
budget (:mod:`.chains`), shared-budget allocation (:mod:`.allocate`) and entropy-keyed width
allocation (:mod:`.width`)."""
from .chains import (
    REPLAY_COLUMNS,
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
           "chain_run", "REPLAY_COLUMNS"]
