"""The task families of the paper, defined once: ordered from open to grounded, then the
no-decode-loop control. Logs may hold any task names; these only set the order of tables and
figures, the ordering analysis's default expectation and the logger's embedded suite."""
from __future__ import annotations

__all__ = ["TASKS", "GROUNDING_ORDER", "NO_TASK"]

#: every family of the paper: open to grounded, then the control (scienceqa)
TASKS = ("caption", "textvqa", "infovqa", "docvqa", "chartqa", "scienceqa")
#: the order the grounding corollary predicts (the control has no place in it)
GROUNDING_ORDER = TASKS[:5]

#: The task of rounds and prompts whose source logged no category (the importers' default).
NO_TASK = "unknown"
