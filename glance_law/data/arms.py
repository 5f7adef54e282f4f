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
target (or without a ``target`` column) keep their drafter names.

Labels are unambiguous for any names, and parsed here only (:func:`parse_label`):

* A label splits at its **first** ``" @ "``: the drafter part never holds one. Where a
  drafter name would break that (it holds ``" @ "`` or ends in ``" @"``), that name and any
  drafter name of the frame already holding ``"@@"`` have each ``@`` doubled (``"ssd @ v2"`` ->
  ``"ssd @@ v2"``, ``"a@@b"`` -> ``"a@@@@b"``: no two names meet), in every table, with a note; a
  target name may hold ``" @ "`` as it is (it is the rest of the label).
* Rows that name no target, among rows of several targets, are the arm ``"<drafter> @
  unknown"`` (:data:`UNKNOWN_TARGET`). A real target of that name is shown quoted
  (``'unknown'``; one of ``'unknown'``, ``''unknown''``, ... gets one more pair of quotes), with a
  note, so it never merges with them (:func:`target_name`).
* Labelling is idempotent: a frame whose every drafter already reads ``"<d> @ <its row's
  target>"`` is taken as labelled and returned as it is, so is a frame of one target whose
  drafter names need no change.

Pure pandas; no I/O.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

__all__ = ["SEP", "TARGET", "UNKNOWN_TARGET", "targets", "target_name", "target_names", "drafter_names",
           "label_targets", "renaming_notes", "RENAMED_NOTE", "parse_label", "split_labels", "arm_label", "target_values", "target_of", "run_targets",
           "plain_drafter", "arm_target"]

#: Separator of the composite arm label ``drafter @ target``.
SEP = " @ "
TARGET = "target"
#: The target of rows that name none, among rows of several targets (a real target of this
#: name is shown quoted: :func:`target_name`).
UNKNOWN_TARGET = "unknown"
_RESERVED = re.compile(r"'*" + re.escape(UNKNOWN_TARGET) + r"'*")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA or v is pd.NaT or v == ""


def target_name(target) -> str:
    """The target as arm labels and tables name it: :data:`UNKNOWN_TARGET` for none (None, NaN
    or ""); a real name in quotes where it would read as that placeholder (``unknown`` ->
    ``'unknown'``, ``'unknown'`` -> ``''unknown''``); any other name as it is."""
    if _missing(target):
        return UNKNOWN_TARGET
    t = str(target)
    return f"'{t}'" if _RESERVED.fullmatch(t) else t


def _factor(values: pd.Series) -> tuple[np.ndarray, list]:
    """Integer codes (-1 where missing) and the distinct values, cheaply (categories as they are)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        return values.cat.codes.to_numpy().astype(np.int64), list(values.cat.categories)
    codes, uniq = pd.factorize(values, sort=False)
    return codes.astype(np.int64), list(uniq)


def target_names(values: pd.Series) -> pd.Series:
    """:func:`target_name` of every row (an object Series on the same index)."""
    codes, uniq = _factor(values)
    names = np.array([target_name(u) for u in uniq] + [UNKNOWN_TARGET], dtype=object)
    return pd.Series(names[codes], index=values.index, name=values.name, dtype=object)


def targets(frame: pd.DataFrame) -> list[str]:
    """The distinct targets the rows name, as :func:`target_name` shows them (sorted; rows
    without one count as :data:`UNKNOWN_TARGET` when others name one); [] without a
    ``target`` column."""
    if TARGET not in frame.columns or not len(frame):
        return []
    codes, uniq = _factor(frame[TARGET])
    named, unnamed = set(), False
    for c in np.unique(codes):
        if c < 0 or _missing(uniq[c]):
            unnamed = True
        else:
            named.add(target_name(uniq[c]))
    if named and unnamed:
        named.add(UNKNOWN_TARGET)
    return sorted(named)


def parse_label(label) -> tuple[str, str | None]:
    """(drafter, target) of an arm label, split at its first :data:`SEP`; (label, None) for a
    plain drafter name. The one place labels are parsed."""
    s = str(label)
    i = s.find(SEP)
    return (s, None) if i < 0 else (s[:i], s[i + len(SEP):])


def _clean(name: str) -> bool:
    """Whether a drafter name can lead an arm label as it is."""
    return SEP not in name and not name.endswith(SEP.rstrip())


def drafter_names(names: Iterable[str]) -> dict[str, str]:
    """Each drafter name as arm labels carry it: unchanged where every name can lead a label
    (none holds ``" @ "`` or ends in ``" @"``); otherwise each name that does, and each holding
    ``"@@"``, has every ``@`` doubled (distinct names stay distinct, and none then holds ``" @ "``)."""
    names = [str(n) for n in dict.fromkeys(names)]
    if all(_clean(n) for n in names):
        return {n: n for n in names}
    return {n: n.replace("@", "@@") if not _clean(n) or "@@" in n else n for n in names}


def arm_label(drafter: str, target: str) -> str:
    """The label ``"<drafter> @ <target>"`` of a drafter name as :func:`drafter_names` gives it
    and a target as :func:`target_name` gives it (a ValueError for a drafter name that would
    not split back)."""
    if not _clean(str(drafter)):
        raise ValueError(f"drafter name {drafter!r} cannot lead an arm label; pass it through drafter_names")
    return f"{drafter}{SEP}{target}"


def label_targets(frame: pd.DataFrame, notes: list | None = None) -> pd.DataFrame:
    """``frame`` with ``drafter`` relabelled ``"<drafter> @ <target>"`` when its rows name more
    than one target (a note in ``notes`` says so), drafter and target names altered where a
    label would not split back (each alteration noted; see the module docstring); otherwise
    ``frame`` itself, untouched. Idempotent: a frame already labelled is returned as it is."""
    if not len(frame):
        return frame
    n = len(frame)
    if "drafter" in frame.columns:
        dc, duniq = _factor(frame["drafter"])
        dnames = [str(u) for u in duniq] + ["nan"]      # a missing drafter reads "nan", as astype(str) does
    else:
        dc, dnames = np.zeros(n, dtype=np.int64), ["unknown"]
    has_t = TARGET in frame.columns
    if not has_t and n:    # no target named: only a drafter name that cannot lead a label would change
        missing = bool((dc < 0).any())
        used = np.flatnonzero(np.bincount(dc[dc >= 0] if missing else dc))
        if all(_clean(dnames[d]) for d in used) and (not missing or _clean(dnames[-1])):
            return frame          # nothing to relabel: no pair keys built (80 MB each per 10^7 rounds)
    if has_t:
        tc, tuniq = _factor(frame[TARGET])
        tnames = [target_name(u) for u in tuniq] + [UNKNOWN_TARGET]
    else:
        tc, tuniq, tnames = np.full(n, -1, dtype=np.int64), [], [UNKNOWN_TARGET]
    pair, firsts = pd.factorize(dc * (len(tnames) + 1) + (tc + 1), sort=False)
    pd_, pt = np.asarray(firsts) // (len(tnames) + 1), np.asarray(firsts) % (len(tnames) + 1) - 1
    named = {tnames[t] for t in pt if t >= 0 and not _missing(tuniq[t])}
    names = sorted(named | ({UNKNOWN_TARGET} if named and any(t < 0 or _missing(tuniq[t]) for t in pt) else set()))
    if has_t and all(parse_label(dnames[d])[1] == tnames[t] for d, t in zip(pd_, pt)):
        return frame                                    # already labelled: every drafter reads d @ its own target
    several = len(names) > 1
    rename = drafter_names(dnames[d] for d in pd_)
    if not several and all(rename[dnames[d]] == dnames[d] for d in pd_):
        return frame
    labels = [arm_label(rename[dnames[d]], tnames[t]) if several else rename[dnames[d]] for d, t in zip(pd_, pt)]
    cats = sorted(set(labels))
    where = {c: i for i, c in enumerate(cats)}
    codes = np.array([where[lab] for lab in labels], dtype=np.int64)[pair]
    out = frame.copy()
    out["drafter"] = pd.Categorical.from_codes(codes, categories=cats)
    if notes is not None:
        if several:
            notes.append(f"the logs hold {len(names)} target models ({', '.join(names)}): every table keeps them "
                         "apart (arm = drafter and target; the target column names it), never pooling one method's "
                         "rounds across targets")
        notes.extend(renaming_notes({d: r for d, r in rename.items() if d != r},
                                    [str(tuniq[t]) for t in pt if several and t >= 0 and not _missing(tuniq[t])]))
    return out


#: How the notes on altered names begin (:func:`renaming_notes`), for callers that keep them.
RENAMED_NOTE = "renamed so that every arm label splits one way"


def renaming_notes(drafters: dict[str, str], target_values: Iterable[str] = ()) -> list[str]:
    """The notes on drafter names altered by :func:`drafter_names` (``{name: shown}``) and on
    the targets among ``target_values`` that :func:`target_name` quotes."""
    out = []
    if drafters:
        out.append(f"{RENAMED_NOTE}: drafter name(s) with each '@' doubled (' @ ' parts drafter and target): "
                   + ", ".join(f"'{d}' shown as '{r}'" for d, r in sorted(drafters.items())))
    quoted = sorted({str(t) for t in target_values if target_name(t) != str(t) and not _missing(t)})
    if quoted:
        out.append(f"{RENAMED_NOTE}: target(s) " + ", ".join(f"'{q}' shown as \"{target_name(q)}\"" for q in quoted)
                   + f" ('{UNKNOWN_TARGET}' names the rows that name no target)")
    return out


def _per_label(labels: pd.Series, f, missing, name=None) -> pd.Series:
    """``f`` of each distinct arm label (as a string), spread over the rows (``missing`` where null)."""
    codes, uniq = _factor(labels)
    out = np.empty(len(uniq) + 1, dtype=object)
    out[:-1] = [f(str(u)) for u in uniq]
    out[-1] = missing
    return pd.Series(out[codes], index=labels.index, name=labels.name if name is None else name, dtype=object)


def split_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """For display: a ``drafter`` column holding ``"<drafter> @ <target>"`` labels becomes a
    ``target`` column (inserted before it) and the plain drafter name (:func:`parse_label`);
    other frames unchanged."""
    if "drafter" not in frame.columns or TARGET in frame.columns or not len(frame):
        return frame
    s = frame["drafter"].astype(object)
    t = _per_label(s, lambda u: parse_label(u)[1], None).tolist()
    if all(x is None for x in t):
        return frame
    out = frame.copy()
    out["drafter"] = [v if tt is None else parse_label(v)[0] for tt, v in zip(t, s)]
    out.insert(list(out.columns).index("drafter"), TARGET, t)
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
    """The drafter names of arm labels (``"ssd @ llama2-7b-chat"`` -> ``"ssd"``; plain names as
    is; :func:`parse_label`)."""
    return _per_label(labels, lambda u: parse_label(u)[0], "nan")


def target_values(labels: pd.Series) -> pd.Series:
    """The ``target`` column that arm labels were made from (None for a plain drafter name or
    :data:`UNKNOWN_TARGET`; a quoted name unquoted): the inverse of :func:`target_name`, so a
    frame of labels given this column is taken as labelled by :func:`label_targets`."""
    def value(u):
        t = parse_label(u)[1]
        if t is None or t == UNKNOWN_TARGET:
            return None
        return t[1:-1] if len(t) > 1 and t[0] == t[-1] == "'" and _RESERVED.fullmatch(t[1:-1]) else t
    return _per_label(labels, value, None, TARGET)


def arm_target(labels: pd.Series) -> pd.Series:
    """The targets of arm labels (``""`` for a plain drafter name; :func:`parse_label`)."""
    return _per_label(labels, lambda u: parse_label(u)[1] or "", "")
