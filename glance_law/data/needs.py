"""Which columns an analysis needs, whether the logs carry them, and what records them.

Every analysis section declares the round columns it cannot do without (``NEEDS`` in its
module, or ``needs`` on a report section). :func:`missing` says which of them a frame lacks
(absent, or null in every row: a source that did not measure a column leaves it null), and
:func:`skip_reason` turns that into the one line the CLIs print for a skipped section,
naming the missing column and the tool that records it (:data:`RECORDED_BY`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from .schema import SUPPLIED_BY

__all__ = ["RECORDED_BY", "present", "missing", "recorded_by", "skip_reason", "CHAIN_DRAFTERS", "chain_rounds"]

#: Column (or arm) -> the tool or flag that records it. Extends the contract's SUPPLIED_BY with the
#: columns foreign logs (Spec-Bench/EAGLE/Medusa answers, vLLM, SGLang) typically lack.
RECORDED_BY: Mapping[str, str] = {
    **SUPPLIED_BY,
    "root_entropy": "glance-log records by default (as does GLANCE's --round-log); Spec-Bench/EAGLE/Medusa "
                    "answers, vLLM and SGLang do not log it",
    "match": "glance-log (any drafter; the default logger records match); for a chain drafter it is derived from "
             "the accepted run when budget equals horizon",
    "topk_logq": SUPPLIED_BY["topk_logq"],
    "target_rank": SUPPLIED_BY["target_rank"],
    "root_margin": "glance-log (recorded by default)",
    "budget": "glance-log (recorded by default)",
    "position": "glance-log (recorded by default)",
    "committed": "glance-log (recorded by default)",
    "prompts": "glance-log, which writes prompts-*.parquet next to the round files (pass them too), or an "
               "importer of answer files",
}

#: Drafter names (prefixes) that draft one chain per round, so the accepted run is the top-1 run
#: (besides any round whose ``budget`` equals its ``horizon``).
CHAIN_DRAFTERS = ("pld", "two_model", "sps")


def present(frame: pd.DataFrame, column: str) -> bool:
    """The column exists and holds at least one non-null value (an empty frame counts as present)."""
    return column in frame.columns and (len(frame) == 0 or bool(frame[column].notna().any()))


def missing(frame: pd.DataFrame, needs: Iterable[str]) -> list[str]:
    """The columns of ``needs`` the frame lacks (absent or null in every row), in order."""
    return [c for c in needs if not present(frame, c)]


def recorded_by(column: str) -> str | None:
    return RECORDED_BY.get(column)


def skip_reason(what: str, columns: Iterable[str]) -> str:
    """``"<what> needs column 'x' (recorded by ...)"`` for the missing columns."""
    parts = []
    for c in columns:
        tool = recorded_by(c)
        if tool and not tool.startswith("glance-log records"):
            tool = f"recorded by {tool}"
        parts.append(f"column '{c}'" + (f" ({tool})" if tool else ""))
    return f"{what} needs {' and '.join(parts)}, which the logs do not carry"


def chain_rounds(frame: pd.DataFrame):
    """Boolean array: rounds drafted as one chain (budget == horizon, or a chain drafter's name)."""
    import numpy as np

    out = np.zeros(len(frame), dtype=bool)
    if "budget" in frame.columns:
        b = frame["budget"].to_numpy(dtype=np.float64, na_value=np.nan)
        out |= b == frame["horizon"].to_numpy(dtype=np.float64)
    if "drafter" in frame.columns:
        d = frame["drafter"].astype(str).str.lower()
        out |= d.str.startswith(CHAIN_DRAFTERS).to_numpy()
    return out
