"""What a user declares about logs that the method table cannot know: ``--horizon`` (the
deepest draft offset L of an imported method) and ``--chain`` (the drafter drafted one top-1
chain, e.g. EAGLE-2 run as a chain of 6, so the accepted run is the top-1 run and the per-offset
analysis applies). Every command that reads logs (``fit``, ``report``, ``reduce``, ``policy``;
``ingest`` for ``--horizon``) takes both options from :func:`add_declare_arguments`; the
declarations are applied when the logs are read (:func:`glance_law.data.io.read_logs`'s
``horizon`` and ``chain``) and recorded in the output's notes ("declared by --chain").
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from glance_law.errors import GlanceError

__all__ = ["CHAIN_HELP", "ALL", "DECLARED_PREFIX", "add_declare_arguments", "horizon_of", "chain_of", "declare_chain", "CHAIN_NOTE"]

#: ``--chain`` with no drafter name: every drafter of the logs.
ALL = "*"
CHAIN_HELP = ("declare that DRAFTER (an arm's drafter name, e.g. eagle2; every drafter when no name is given) "
              "drafted one top-1 chain, whatever its method table says (e.g. EAGLE-2 run as a top-1 chain of 6, "
              "with --horizon eagle2=6): its rounds are read with budget = horizon, so the per-offset analysis "
              "applies (repeatable)")
#: How every declaration's note starts (the outputs print them under the first table).
DECLARED_PREFIX = "declared by --"
#: The note of a declaration (``{n}`` rounds, ``{who}`` drafter names).
CHAIN_NOTE = ("declared by --chain: {who} drafted a top-1 chain ({n} round(s) read with budget = horizon; the logs "
              "do not record it, so the per-offset tables rest on this declaration)")


def add_declare_arguments(parser, chain: bool = True) -> None:
    """``--horizon L|KEY=L`` (repeatable) and, with ``chain``, ``--chain [DRAFTER]`` (repeatable)."""
    from glance_law.data.importers.common import HORIZON_HELP
    parser.add_argument("--horizon", action="append", metavar="L|KEY=L", help=HORIZON_HELP)
    if chain:
        parser.add_argument("--chain", action="append", nargs="?", const=ALL, metavar="DRAFTER", help=CHAIN_HELP)


def horizon_of(args):
    """The parsed ``--horizon`` values (None when not given)."""
    from glance_law.data.importers.common import parse_horizon_option
    return parse_horizon_option(getattr(args, "horizon", None))


def chain_of(args) -> tuple[str, ...] | None:
    """The ``--chain`` declarations: drafter names, ``("*",)`` for every drafter, None when not given."""
    got = getattr(args, "chain", None)
    if not got:
        return None
    names = tuple(dict.fromkeys(str(x).strip() for x in got if str(x).strip()))
    return (ALL,) if ALL in names or not names else names


def declare_chain(frame: pd.DataFrame, chain: Sequence[str] | None) -> tuple[pd.DataFrame, list[str]]:
    """The rounds with ``budget = horizon`` for the declared chain drafters, and the note saying so.

    A declared name that no drafter of the logs carries, or a drafter whose logged ``budget``
    differs from its horizon (it recorded a tree), is refused in one line."""
    if not chain or not len(frame):
        return frame, []
    from glance_law.data.arms import plain_drafter
    names = (plain_drafter(frame["drafter"].astype(str)) if "drafter" in frame.columns
             else pd.Series(["unknown"] * len(frame), index=frame.index)).astype(str)
    present = sorted(set(names))
    if ALL in chain:
        pick = np.ones(len(frame), dtype=bool)
        who = ", ".join(present)
    else:
        unknown = [c for c in chain if c not in present]
        if unknown:
            raise GlanceError(f"--chain {unknown[0]}: no drafter of that name in the logs (they hold "
                              f"{', '.join(present)}); pass one of those names")
        pick = names.isin(list(chain)).to_numpy()
        who = ", ".join(c for c in chain)
    L = frame["horizon"].to_numpy(dtype=np.float64)
    if "budget" in frame.columns:
        b = frame["budget"].to_numpy(dtype=np.float64, na_value=np.nan)
        tree = pick & np.isfinite(b) & (b != L) & (L > 0)
        if tree.any():
            d = names.to_numpy()[tree][0]
            raise GlanceError(f"--chain {d}: the logs record a tree for that drafter (budget {b[tree][0]:g} at "
                              f"horizon {L[tree][0]:g} in {int(tree.sum())} round(s)); --chain declares what the "
                              "logs do not record, so drop it for this drafter")
        budget = np.where(pick, L, b)
    else:
        budget = np.where(pick, L, np.nan)
    out = frame.assign(budget=pd.array(np.where(np.isfinite(budget), budget, np.nan)).astype("Float64")
                       .astype("Int64"))
    return out, [CHAIN_NOTE.format(who=who, n=int(pick.sum()))]
