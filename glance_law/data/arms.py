"""Arms: which rounds belong to one decoder on one target model.

The analyses group rounds by ``drafter`` (and then by task): rounds of different decoders are
never pooled. Logs of one method on several *target* models (vicuna-7b and llama2-7b, or a
7B and a 70B) must not be pooled either. The contract's optional ``target`` column names the
target of each round and prompt (the importers fill it from the source, e.g. Spec-Bench's
``model_id``; :func:`glance_law.io.read_logs` fills it from each file's ``glance.run`` target
when the files name different targets). Where the rows hold more than one target,
:func:`label_targets` makes the arm label ``"<drafter> @ <target>"``: every analysis that
keeps drafters apart then keeps targets apart too, and every table names the target (the
renderer shows it as its own ``target`` column, :func:`split_labels`). Rows of a single
target (or without a ``target`` column) are left exactly as they are.

Pure pandas; no I/O.
"""
from __future__ import annotations

import pandas as pd

__all__ = ["SEP", "TARGET", "UNKNOWN_TARGET", "targets", "label_targets", "split_labels", "arm_label",
           "target_of", "run_targets", "plain_drafter", "arm_target"]

#: Separator of the composite arm label ``drafter @ target``.
SEP = " @ "
TARGET = "target"
#: The target of rows that name none, among rows of several targets.
UNKNOWN_TARGET = "unknown"


def targets(frame: pd.DataFrame) -> list[str]:
    """The distinct targets named by the rows (sorted; rows without one count as
    :data:`UNKNOWN_TARGET` when others name one); [] without a ``target`` column."""
    if TARGET not in frame.columns or not len(frame):
        return []
    t = frame[TARGET]
    named = sorted({str(x) for x in t.dropna().unique()})
    if named and t.isna().any():
        named = sorted(set(named) | {UNKNOWN_TARGET})
    return named


def arm_label(drafter: str, target: str) -> str:
    return f"{drafter}{SEP}{target}"


def label_targets(frame: pd.DataFrame, notes: list | None = None) -> pd.DataFrame:
    """``frame`` with ``drafter`` relabelled ``"<drafter> @ <target>"`` when its rows name more
    than one target (a note in ``notes`` says so); otherwise ``frame`` itself, untouched.
    Idempotent: labels that already carry a target are kept."""
    names = targets(frame)
    if len(names) < 2:
        return frame
    d = frame["drafter"].astype(str) if "drafter" in frame.columns else pd.Series("unknown", index=frame.index)
    t = frame[TARGET].astype(object).where(frame[TARGET].notna(), UNKNOWN_TARGET).astype(str)
    done = d.str.contains(SEP, regex=False)
    label = d.where(done, d + SEP + t)
    out = frame.copy()
    out["drafter"] = pd.Categorical(label)
    if notes is not None:
        notes.append(f"the logs hold {len(names)} target models ({', '.join(names)}): every table keeps them apart "
                     f"(arm = drafter and target; the target column names it), never pooling one method's rounds "
                     "across targets")
    return out


def split_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """For display: a ``drafter`` column holding ``"<drafter> @ <target>"`` labels becomes a
    ``target`` column (inserted before it) and the plain drafter name; other frames unchanged."""
    if "drafter" not in frame.columns or TARGET in frame.columns or not len(frame):
        return frame
    d = frame["drafter"]
    s = d.astype(object)
    has = s.map(lambda v: isinstance(v, str) and SEP in v)
    if not has.any():
        return frame
    parts = s.where(~has, s.map(lambda v: v.rsplit(SEP, 1) if isinstance(v, str) and SEP in v else v))
    out = frame.copy()
    out["drafter"] = [p[0] if isinstance(p, list) else v for p, v in zip(parts, s)]
    tgt = [p[1] if isinstance(p, list) else None for p in parts]
    out.insert(list(out.columns).index("drafter"), TARGET, tgt)
    return out


def target_of(run) -> str | None:
    """The target model a ``glance.run`` document names: a string as is; an object's ``name``,
    ``model_id`` or ``path`` (glance-log records ``{"path": ..., "model_type": ...}``); None if
    it names none."""
    t = run.get(TARGET) if isinstance(run, dict) else None
    if isinstance(t, dict):
        t = next((t[k] for k in ("name", "model_id", "id", "path") if t.get(k) not in (None, "")), None)
    if t is None or t == "":
        return None
    return str(t)


def run_targets(runs) -> list[str | None]:
    """Per ``glance.run`` document, the target as a short label: the last part of a path, or the
    whole path where two different paths share their last part."""
    full = [target_of(r) for r in runs]
    short = {f: f.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1] or f for f in set(full) if f is not None}
    if len(set(short.values())) < len(short):
        short = {f: f for f in short}
    return [None if f is None else short[f] for f in full]


def plain_drafter(labels: pd.Series) -> pd.Series:
    """The drafter names of arm labels (``"ssd @ llama2-7b-chat"`` -> ``"ssd"``; plain names as is)."""
    return labels.astype(str).str.split(SEP, n=1, regex=False).str[0]


def arm_target(labels: pd.Series) -> pd.Series:
    """The targets of arm labels (``""`` for a plain drafter name)."""
    parts = labels.astype(str).str.split(SEP, n=1, regex=False)
    return parts.map(lambda p: p[1] if len(p) > 1 else "")
