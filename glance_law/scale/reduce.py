"""Logs at serving scale: the law's sufficient statistics, reduced out of core.

Everything :func:`glance_law.law.fit_law` and the tail's floor regime use depends on
a round only through ``(task, drafter, prompt, H, L, a)``. A **reduction** counts the
rounds by *cell*

    (task, drafter, prompt bucket, fine entropy bin, horizon L, accepted a)

and keeps per cell ``n``, ``sum_h`` = sum H and ``sum_h2`` = sum H^2 (the file kind
``reduced`` of :mod:`glance_law.schema`). A cell is a few dozen bytes however many
rounds it holds, so 10^8 rounds reduce to a few million cells, and reductions made
on many machines merge by adding counts (:func:`merge`; :func:`read_reduced` refuses two
inputs with identical cells, a copy of one reduction that would count every round twice).

* **Prompt buckets** (:func:`bucket_of`): the first 8 hex digits of
  ``md5(task + "\\x1f" + prompt_id)`` (UTF-8) as an unsigned integer, modulo B
  (default 256). Every engine computes it identically (pyarrow hashes each
  dictionary entry once in Python; DuckDB and Spark have ``md5``). A bucket holds
  whole prompts, so clustering or resampling by (task, bucket) is prompt-clustered
  inference with coarser clusters: the bucket-level CR1 sandwich and the bucket
  bootstrap estimate the same variance as the prompt-level ones.
* **Entropy bins** (:class:`Grid`): global and data-independent, so bins from any
  machine line up. Below ``2^lo_exp`` nats and in each octave ``[2^k, 2^(k+1))`` up to
  ``2^hi_exp`` the grid has ``per_octave`` equal bins (relative width <= 1/S: fine at
  the entropy floor), above ``2^hi_exp`` a constant width ``2^hi_exp / S``. Every edge
  is a power of two times an integer, so ``bin = (k - lo) S + floor(H * S 2^-k)`` is
  exact floating-point arithmetic in numpy, SQL and Spark alike. Entropies are
  rounded to float32 (the contract's type) and clamped at 0 first, as the exact path does.
* **Fitting** (:func:`glance_law.scale.law_reduced.fit_reduced`): each cell enters the law's likelihood through a
  two-point quadrature that matches its mean and variance (from ``sum_h`` and
  ``sum_h2``), so the reduced MLE differs from the exact one only at fourth order in
  the bin width (|delta b| ~ 1e-7 at the default grid, see ``docs/scale.md``); the
  decile curve, the ceiling, Spearman and the isotonic check run on the same
  weighted atoms; intervals cluster by (task, bucket). :func:`~glance_law.scale.law_reduced.tail_reduced` fits the
  tail from the floor regime's run-length histogram per bucket.

The engines that make reductions live in :mod:`glance_law.scale.engines` (streaming
pyarrow, DuckDB SQL, Spark). ``python -m glance_law.reduce LOGS --out stats.parquet``
writes one; ``python -m glance_law.fit stats.parquet`` fits it, and
``python -m glance_law.fit LOGS --engine arrow|duckdb|spark`` does both without
loading the rounds.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data import schema as S
from glance_law.errors import GlanceError
from glance_law.results.base import Result

__all__ = ["Grid", "Reduced", "DEFAULT_BUCKETS", "ENDED_AT_ZERO", "BUCKET_HASH", "KEY", "bucket_of", "buckets_of", "merge", "plain_drafters",
           "reduce_frame",
           "read_reduced", "write_reduced", "check_buckets", "normalize_condition", "normalize_cells", "cells_digest"]

DEFAULT_BUCKETS = 256
FORMAT = 1
#: ``info`` key: drafter -> task -> rounds whose horizon an importer cut to 0 at the end of an output
#: (accepted 0, ``drafted_horizon`` > 0). They are verification rounds (counted in ``to_frame``'s
#: rounds and mean accepted, as the in-memory summary counts them at their drafted depth) but carry
#: no information for the law's likelihood (a run known to reach at least 0), so no cell holds them.
ENDED_AT_ZERO = "ended_at_zero"
#: ``info`` key: what the user declared about the logs (``--chain``), one note each (glance_law.data.declare).
DECLARED = "declared"
BUCKET_HASH = "md5(utf8(task + U+001F + prompt_id)): the first 8 hex digits as an unsigned integer, modulo B"
KEY = ("task", "drafter", "bucket", "hbin", "horizon", "accepted")
SUMS = ("n", "sum_h", "sum_h2")
MAX_ENTROPY = S.MAX_ENTROPY  # entropies above 2^20 nats are refused (a logging bug), as by the reader
INT32_MAX = 2 ** 31 - 1


# --------------------------------------------------------------------------
# the entropy grid and the prompt buckets
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Grid:
    """Global entropy bins: ``per_octave`` bins in [0, 2^lo_exp) and in every octave up to
    2^hi_exp, then a constant width 2^hi_exp / per_octave (see the module docstring)."""

    per_octave: int = 32
    lo_exp: int = -10
    hi_exp: int = -1

    def __post_init__(self):
        s = int(self.per_octave)
        if s < 1 or s & (s - 1) or s > 2 ** 12:
            raise GlanceError(f"per_octave must be a power of two between 1 and 4096 (got {self.per_octave})")
        if not -40 <= int(self.lo_exp) < int(self.hi_exp) <= 20:
            raise GlanceError(f"the grid needs -40 <= lo_exp < hi_exp <= 20 (got {self.lo_exp}, {self.hi_exp})")
        # hbin is a 32-bit integer in every engine: the bin of the largest allowed entropy must fit
        per_s = int(self.hi_exp) - int(self.lo_exp) + 2 ** (int(MAX_ENTROPY).bit_length() - 1 - int(self.hi_exp))
        if s * per_s > INT32_MAX:
            top = 1 << ((INT32_MAX // per_s).bit_length() - 1)
            raise GlanceError(f"per_octave {s} with hi_exp {self.hi_exp}: the bin index of a 2^20-nat entropy "
                              "(the largest allowed) would overflow the 32-bit hbin; per_octave must be a power of "
                              f"two between 1 and {top} here (or raise hi_exp)")

    @property
    def shift(self) -> int:
        return int(self.per_octave).bit_length() - 1

    @property
    def width(self) -> float:
        """Bin width above 2^hi_exp nats."""
        return 2.0 ** self.hi_exp / self.per_octave

    def index(self, H) -> np.ndarray:
        """Bin index of every entropy (float64, already clamped at 0): exact arithmetic."""
        H = np.asarray(H, dtype=np.float64)
        _, e = np.frexp(H)
        k = np.clip(e - 1, self.lo_exp, self.hi_exp)
        k = np.where(H < 2.0 ** self.lo_exp, self.lo_exp, k)
        mult = np.ldexp(1.0, self.shift - np.arange(self.lo_exp, self.hi_exp + 1))
        return ((k - self.lo_exp) * self.per_octave + np.floor(H * mult[k - self.lo_exp])).astype(np.int64)

    def edges(self, idx) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper edge (nats) of bins ``idx``."""
        idx = np.asarray(idx, dtype=np.int64)
        s, lo = self.per_octave, self.lo_exp
        k = np.where(idx < 2 * s, lo, np.minimum(lo + idx // s - 1, self.hi_exp))
        step = np.ldexp(1.0, k - self.shift)
        lower = (idx - (k - lo) * s) * step
        return lower, lower + step

    def sql(self, h: str) -> str:
        """The bin of the DOUBLE expression ``h`` as portable SQL (integer literals only)."""
        def lt(j):
            return f"{h} * {2 ** -j} < 1" if j < 0 else f"{h} < {2 ** j}"

        def f(k):
            m = self.shift - k
            scaled = f"{h} * {2 ** m}" if m >= 0 else f"{h} / {2 ** -m}"
            return f"({(k - self.lo_exp) * self.per_octave} + floor({scaled}))"
        whens = " ".join(f"WHEN {lt(k + 1)} THEN {f(k)}" for k in range(self.lo_exp, self.hi_exp))
        return f"CAST(CASE {whens} ELSE {f(self.hi_exp)} END AS INTEGER)"

    def as_dict(self) -> dict:
        return {"per_octave": int(self.per_octave), "lo_exp": int(self.lo_exp), "hi_exp": int(self.hi_exp)}

    def describe(self) -> str:
        return (f"{self.per_octave} bins per octave from 2^{self.lo_exp} to 2^{self.hi_exp} nats (and {self.per_octave}"
                f" below), width {self.width:g} nats above {2.0 ** self.hi_exp:g}")


def bucket_of(task: str, prompt_id: str, buckets: int = DEFAULT_BUCKETS) -> int:
    """The prompt bucket of one prompt (see :data:`BUCKET_HASH`)."""
    d = hashlib.md5(f"{task}\x1f{prompt_id}".encode()).digest()
    return int.from_bytes(d[:4], "big") % int(buckets)


def buckets_of(tasks: Sequence[str], prompts: Sequence[str], buckets: int = DEFAULT_BUCKETS) -> np.ndarray:
    """:func:`bucket_of` over paired sequences (int64 array)."""
    md5 = hashlib.md5
    b = int(buckets)
    return np.fromiter((int.from_bytes(md5(f"{t}\x1f{p}".encode()).digest()[:4], "big") % b
                        for t, p in zip(tasks, prompts)), dtype=np.int64, count=len(prompts))


def check_buckets(buckets) -> int:
    b = int(buckets)
    if not 1 <= b <= 2 ** 31 - 1 or b != buckets:
        raise GlanceError(f"buckets must be an integer between 1 and 2^31 - 1 (got {buckets})")
    return b


def normalize_condition(condition) -> list[str] | None:
    """None (pool every condition) or the sorted list of conditions kept."""
    if condition is None:
        return None
    if isinstance(condition, str):
        condition = [c.strip() for c in condition.split(",") if c.strip()]
    out = sorted({str(c) for c in condition})
    if not out:
        raise GlanceError("condition: name at least one condition, or pass None to pool them")
    return out


# --------------------------------------------------------------------------
# the reduced table
# --------------------------------------------------------------------------

def _factor(values) -> tuple[np.ndarray, np.ndarray]:
    """(int64 codes, sorted string categories) of a string column."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        cats = values.cat.categories.astype(str)
        order = np.argsort(np.asarray(cats, dtype=object), kind="stable")
        rank = np.empty(len(cats), dtype=np.int64)
        rank[order] = np.arange(len(cats))
        codes = values.cat.codes.to_numpy().astype(np.int64)
        return rank[codes], np.asarray(cats, dtype=object)[order]
    codes, uniq = pd.factorize(pd.Series(values).astype(str), sort=True)
    return codes.astype(np.int64), np.asarray(uniq, dtype=object)


def normalize_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Contract types, one row per cell (repeated cells summed), sorted by :data:`KEY`.

    Works on narrow integer columns and one int64 sort key, and skips the sort when the
    cells are already in order, so millions of cells stay cheap in memory."""
    missing = [c for c in KEY + SUMS[:2] if c not in cells.columns]
    if missing:
        raise GlanceError(f"reduced cells lack column(s) {', '.join(missing)}")
    n = cells["n"].to_numpy()
    live = n > 0
    every = bool(live.all())
    t, tn = _factor(cells["task"])
    d, dn = _factor(cells["drafter"])
    types = (np.int32, np.int32, np.int32, np.int32, np.int16, np.int16)
    cols = [t, d] + [cells[c].to_numpy() for c in KEY[2:]]
    cols = [(c if every else c[live]).astype(typ, copy=False) for c, typ in zip(cols, types)]
    sums = [(cells[c].to_numpy() if c in cells.columns else np.full(n.size, np.nan)) for c in SUMS]
    sums = [(v if every else v[live]).astype(np.int64 if c == "n" else np.float64, copy=False)
            for c, v in zip(SUMS, sums)]
    del t, d
    m = cols[0].size
    sizes = [int(c.max()) + 1 if m else 1 for c in cols]
    if m and min(int(c.min()) for c in cols) >= 0 and float(np.prod([float(x) for x in sizes])) < 2.0 ** 62:
        key = np.zeros(m, dtype=np.int64)
        for c, k in zip(cols, sizes):
            key *= k
            key += c
        if bool(np.all(key[1:] > key[:-1])):
            order, start = None, None
        else:
            order = np.argsort(key, kind="stable")
            key = key[order]
            start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        del key
    else:
        order = np.lexsort(cols[::-1])
        same = np.ones(order.size, dtype=bool)
        for c in cols:
            cs = c[order]
            same[1:] &= cs[1:] == cs[:-1]
        same[:1] = False
        start = np.flatnonzero(~same)
    if order is None:
        pick = [c for c in cols]
        out_sums = sums
    else:
        first = order[start]
        pick = [c[first] for c in cols]
        out_sums = [np.add.reduceat(v[order], start) if start.size else v[:0] for v in sums]
    out = {"task": pd.Categorical.from_codes(pick[0], tn), "drafter": pd.Categorical.from_codes(pick[1], dn)}
    for name, c in zip(KEY[2:], pick[2:]):
        out[name] = c
    for name, v in zip(SUMS, out_sums):
        out[name] = v
    return pd.DataFrame(out)


def _add_counts(a: Mapping, b: Mapping) -> dict:
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in a.items()}
    for k, v in b.items():
        if isinstance(v, Mapping):
            out[k] = _add_counts(out.get(k, {}), v)
        else:
            out[k] = out.get(k, 0) + v
    return out


@dataclass(frozen=True, eq=False)
class Reduced(Result):
    """Sufficient statistics of round logs: ``cells`` (the ``reduced`` contract columns),
    the ``grid`` and bucket count they were made with, and ``info`` (what was read,
    excluded and filled in; the prompts per drafter and task; the sources merged).

    ``to_frame()`` summarises it per (drafter, task), or with ``pooled`` (:meth:`pooled_rows`,
    ``--by none``) per drafter over every task, labelled 'pooled'; ``cells`` is the table itself.
    """

    title: ClassVar[str] = "reduced round logs (sufficient statistics)"
    cells: pd.DataFrame
    grid: Grid = Grid()
    buckets: int = DEFAULT_BUCKETS
    info: Mapping = field(default_factory=dict)
    pooled: bool = False

    def pooled_rows(self) -> Reduced:
        """The same reduction summarised per drafter over every task (one row labelled 'pooled')."""
        return replace(self, pooled=True)

    @property
    def rounds(self) -> int:
        return int(self.cells["n"].sum())

    @property
    def condition(self) -> list[str] | None:
        return self.info.get("condition", ["matched"])

    def prompts(self, drafter: str, task: str | None = None) -> int | None:
        """Distinct prompts of a drafter (and task) among the reduced rounds, if recorded."""
        p = self.info.get("prompts", {}).get(str(drafter))
        if p is None:
            return None
        return int(sum(p.values())) if task is None else (int(p[str(task)]) if str(task) in p else None)

    def ended_at_zero(self, drafter: str, task: str) -> int:
        """Output-ending rounds of a drafter and task that accepted 0 (see :data:`ENDED_AT_ZERO`)."""
        return int(self.info.get(ENDED_AT_ZERO, {}).get(str(drafter), {}).get(str(task), 0))

    def to_frame(self) -> pd.DataFrame:
        """Per (drafter, task): rounds (every verification round, the output-ending rounds that
        accepted 0 too), prompts, buckets, cells, mean entropy (of the measured rounds; NaN without
        any), mean accepted and tau = mean accepted + 1 over those rounds."""
        from glance_law.data.selection import POOLED
        c = self.cells
        rows = []
        for key, g in c.groupby(["drafter"] if self.pooled else ["drafter", "task"], observed=True, sort=True):
            d, t = (key[0], POOLED) if self.pooled else key
            n = g["n"].to_numpy()
            zero = self.info.get(ENDED_AT_ZERO, {}).get(str(d), {})
            rounds = int(n.sum()) + (sum(int(v) for v in zero.values()) if self.pooled else self.ended_at_zero(d, t))
            hn = n[g["hbin"].to_numpy() >= 0].sum()
            mean_a = float((g["accepted"].to_numpy() * n).sum() / rounds)
            rows.append({"drafter": str(d), "task": str(t), "rounds": rounds,
                         "prompts": self.prompts(d, None if self.pooled else t),
                         "buckets": len(g[["task", "bucket"]].drop_duplicates()), "cells": len(g),
                         "mean_entropy": float(g["sum_h"].sum() / hn) if hn else float("nan"),
                         "mean_accepted": mean_a, "tau": mean_a + 1.0})
        cols = ["drafter", "task", "rounds", "prompts", "buckets", "cells", "mean_entropy", "mean_accepted", "tau"]
        return pd.DataFrame(rows, columns=cols)

    @property
    def has_entropy(self) -> bool:
        """Whether any cell holds rounds with a measured root entropy (hbin >= 0)."""
        return bool(len(self.cells)) and bool((self.cells["hbin"].to_numpy() >= 0).any())

    @property
    def notes(self) -> tuple[str, ...]:
        info = self.info
        cond = self.condition
        out = [f"{self.rounds} rounds in {len(self.cells)} cells; entropy grid: {self.grid.describe()}; "
               f"prompt buckets: B = {self.buckets}, {BUCKET_HASH}"]
        out.append("condition: " + ("all conditions pooled" if cond is None else ", ".join(cond)))
        h0 = int(info.get("excluded_horizon0", 0))
        if h0:
            out.append(f"excluded {h0} autoregressive round(s) (horizon == 0): the law describes drafted rounds")
        z = sum(int(k) for per in info.get(ENDED_AT_ZERO, {}).values() for k in per.values())
        if z:
            out.append(f"{z} output-ending round(s) that accepted 0 (horizon cut to 0, drafted depth in "
                       "drafted_horizon) count in rounds, mean_accepted and tau (every verification round, as the "
                       "per-group summary reads them); the law's likelihood leaves them out (a run known to reach "
                       "at least 0 carries no information)")
        oc = info.get("excluded_conditions", {})
        if oc:
            what = ", ".join(f"{n} '{c}'" for c, n in sorted(oc.items()))
            out.append(f"excluded {sum(oc.values())} round(s) of other conditions ({what})")
        for col, default in S.FILLED_WHEN_NULL.items():
            k = int(info.get("filled", {}).get(col, 0))
            if k:
                out.append(f"{k} round(s) without a {col} read as {default!r}")
        for path, reason in info.get("skipped", []):
            out.append(f"skipped {reason}" if str(path) in reason else f"skipped {path}: {reason}")
        out.extend(info.get("imported", []))      # the importer's notes on what it read (answers left out, ...)
        tg = info.get("targets", [])
        if len(tg) > 1:
            out.append(f"the reduced rounds hold {len(tg)} target models ({', '.join(tg)}): cells are keyed by "
                       "drafter @ target, never pooling one method's rounds across targets")
        out.extend(info.get("arm_notes", []))     # drafter or target names altered to label arms
        out.extend(info.get(DECLARED, []))        # what the user declared (--chain)
        src = info.get("sources", [])
        if len(src) > 1:
            out.append(f"merged from {len(src)} reductions; prompts are summed over them (a prompt seen by "
                       "several reductions counts once per reduction)")
        return tuple(out)

    def metadata(self) -> dict:
        """The ``reduction`` entry of the file's ``glance.run`` document."""
        return {"format": FORMAT, "bucket_hash": BUCKET_HASH, "buckets": int(self.buckets),
                "grid": self.grid.as_dict(), **{k: v for k, v in self.info.items()}}

    @classmethod
    def from_metadata(cls, cells: pd.DataFrame, meta: Mapping, where: str = "") -> Reduced:
        if not isinstance(meta, Mapping) or meta.get("format") != FORMAT or "grid" not in meta:
            raise GlanceError(f"{where}: the reduced file has no glance_law.reduce metadata (format {FORMAT}); "
                              "write reductions with python -m glance_law.reduce")
        check_metadata(meta, where)
        try:
            grid = Grid(**meta["grid"])
        except GlanceError as exc:
            raise GlanceError(f"{where}: the reduction metadata's grid: {exc}") from None
        info = {k: v for k, v in meta.items() if k not in ("format", "bucket_hash", "buckets", "grid")}
        return cls(normalize_cells(cells), grid, check_buckets(meta["buckets"]), info)


def _count(v) -> bool:
    """A count the reduction can hold: an int in 0..2**62 (an int64 cell never overflows on merging)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v < (1 << 62)


def _counts(v, depth: int = 1) -> bool:
    if not isinstance(v, Mapping) or not all(isinstance(k, str) for k in v):
        return False
    return all(_count(x) if depth == 1 else _counts(x, depth - 1) for x in v.values())


#: The ``reduction`` entry of a reduced file's ``glance.run``: key -> (check, what it must be).
METADATA_RULES: dict = {
    "grid": (lambda v: isinstance(v, Mapping) and set(v) == {"per_octave", "lo_exp", "hi_exp"}
             and all(isinstance(x, int) and not isinstance(x, bool) and abs(x) <= 4096 for x in v.values()),
             "an object with integer per_octave, lo_exp, hi_exp (each of the three, |value| <= 4096)"),
    "buckets": (lambda v: _count(v) and v >= 1, "a positive integer"),
    "condition": (lambda v: v is None or isinstance(v, list) and all(isinstance(c, str) for c in v),
                  "null or a list of condition names"),
    "rounds_read": (_count, "a count (an integer >= 0)"),
    "excluded_horizon0": (_count, "a count (an integer >= 0)"),
    ENDED_AT_ZERO: (lambda v: _counts(v, 2), "an object drafter -> task -> count"),
    "excluded_conditions": (_counts, "an object of counts by condition"),
    "filled": (_counts, "an object of counts by column"),
    "prompts": (lambda v: _counts(v, 2), "an object drafter -> task -> count"),
    "skipped": (lambda v: isinstance(v, list) and all(isinstance(x, (list, tuple)) and len(x) == 2
                                                      and all(isinstance(y, str) for y in x) for x in v),
                "a list of [path, reason] pairs"),
    "sources": (lambda v: isinstance(v, list) and all(isinstance(x, Mapping) for x in v), "a list of objects"),
    "targets": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of target names"),
    "arm_notes": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of notes"),
    "imported": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of notes"),
    "from_files": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                   "a list of the reduced rounds files' identities"),
    DECLARED: (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of notes"),
}


def check_metadata(meta: Mapping, where: str = "") -> None:
    """Check every known field of a ``reduction`` entry (required: grid, buckets) before it is used;
    one line naming the file, the field and what it must be."""
    for key, (ok, what) in METADATA_RULES.items():
        if key not in meta:
            if key in ("grid", "buckets"):
                raise GlanceError(f"{where}: the reduction metadata lacks '{key}' ({what}); the file was not "
                                  "written by python -m glance_law.reduce or was altered: reduce the logs again")
            continue
        if not ok(meta[key]):
            raise GlanceError(f"{where}: the reduction metadata's '{key}' must be {what}, got "
                              f"{json.dumps(meta[key], default=str)[:80]}; the file was altered or written by "
                              "another tool: reduce the logs again with python -m glance_law.reduce")


def merge(items: Sequence[Reduced]) -> Reduced:
    """Merge reductions by adding counts. They must share the grid, the buckets and the condition."""
    items = list(items)
    if not items:
        raise GlanceError("nothing to merge")
    first = items[0]
    for r in items[1:]:
        if r.grid != first.grid or r.buckets != first.buckets:
            raise GlanceError(f"cannot merge reductions made with different bins or buckets ({first.grid}, "
                              f"B={first.buckets} vs {r.grid}, B={r.buckets}); reduce the logs again with one setting")
        if r.condition != first.condition:
            raise GlanceError(f"cannot merge reductions of different conditions ({first.condition} vs "
                              f"{r.condition}); reduce the logs again with one --condition")
    if len(items) == 1:
        return first
    items, names, arm_notes = _keep_targets_apart(items)
    info: dict = {"condition": first.condition}
    for key in ("rounds_read", "excluded_horizon0", "excluded_conditions", "filled", "prompts", ENDED_AT_ZERO):
        if key == ENDED_AT_ZERO and not any(key in r.info for r in items):
            continue
        acc: dict | int = {} if key == ENDED_AT_ZERO or isinstance(first.info.get(key), Mapping) else 0
        for r in items:
            v = r.info.get(key, type(acc)())
            acc = _add_counts(acc, v) if isinstance(acc, Mapping) else acc + int(v)
        info[key] = acc
    info["skipped"] = [s for r in items for s in r.info.get("skipped", [])]
    info["sources"] = [s for r in items for s in r.info.get("sources", [{}])]
    if any("from_files" in r.info for r in items):
        info["from_files"] = sorted({f for r in items for f in r.info.get("from_files", [])})
    if names:
        info["targets"] = names
    arm_notes = list(dict.fromkeys([a for r in items for a in r.info.get("arm_notes", [])] + arm_notes))
    if arm_notes:
        info["arm_notes"] = arm_notes
    declared = list(dict.fromkeys(a for r in items for a in r.info.get(DECLARED, [])))
    if declared:
        info[DECLARED] = declared
    imported = list(dict.fromkeys(a for r in items for a in r.info.get("imported", [])))
    if imported:
        info["imported"] = imported
    cells = normalize_cells(pd.concat([r.cells for r in items], ignore_index=True))
    return Reduced(cells, first.grid, first.buckets, info)


def plain_drafters(red: Reduced) -> Reduced:
    """A reduction of one target whose cells are keyed by plain drafter names (the out-of-core
    engines'), with any name that would not split back as an arm label altered as
    :func:`glance_law.data.arms.drafter_names` does, and a note; otherwise ``red`` itself."""
    from glance_law.data.arms import drafter_names, renaming_notes
    names = set(red.cells["drafter"].astype(str)) | {str(d) for d in red.info.get("prompts", {})}
    rename = drafter_names(sorted(names))
    moved = {d: n for d, n in rename.items() if d != n}
    if not moved or len(red.info.get("targets", [])) > 1:
        return red
    cells = red.cells.copy()
    cells["drafter"] = cells["drafter"].astype(str).map(rename)
    info = {**red.info, "prompts": {rename[str(d)]: v for d, v in red.info.get("prompts", {}).items()},
            **({ENDED_AT_ZERO: {rename[str(d)]: v for d, v in red.info[ENDED_AT_ZERO].items()}}
               if ENDED_AT_ZERO in red.info else {}),
            "arm_notes": list(red.info.get("arm_notes", [])) + renaming_notes(moved)}
    return Reduced(normalize_cells(cells), red.grid, red.buckets, info)


def _keep_targets_apart(items: list) -> tuple[list, list, list]:
    """Reductions of different target models: each one's plain drafter labels become
    ``drafter @ target`` (its recorded target, as :func:`glance_law.data.arms.targets` names it;
    ``unknown`` where it records none, e.g. a file written before targets were recorded), so the
    merged cells keep the targets apart as the in-memory path does (glance_law.data.arms; drafter
    names that would not split back are altered as there, and said in the merged notes). Returns
    the items, the merged target list ([] when none records a target: those merge exactly as
    before) and the notes on the names altered."""
    from glance_law.data.arms import (
        UNKNOWN_TARGET,
        arm_label,
        drafter_names,
        parse_label,
        renaming_notes,
    )
    recorded = [[str(t) for t in r.info.get("targets", [])] for r in items]
    if not any(recorded):
        return items, [], []
    names = sorted({t for ts in recorded for t in ts} | ({UNKNOWN_TARGET} if not all(recorded) else set()))
    if len(names) < 2:
        return items, names, []
    tgts = [None if len(ts) > 1 else ts[0] if ts else UNKNOWN_TARGET for ts in recorded]
    plain = [None if t is None or all(parse_label(d)[1] == t for d in r.cells["drafter"].astype(str).unique())
             else set(r.cells["drafter"].astype(str)) | {str(d) for d in r.info.get("prompts", {})}
             for r, t in zip(items, tgts)]
    rename = drafter_names(d for ds in plain if ds for d in sorted(ds))   # one renaming over every plain item
    moved = {d: n for d, n in rename.items() if d != n}
    out = []
    for r, tgt, ds in zip(items, tgts, plain):
        if ds is None:      # already keyed by drafter @ target (several targets, a merge, a relabelled frame)
            out.append(r)
            continue

        def lab(d, tgt=tgt):
            return arm_label(rename[str(d)], tgt)

        cells = r.cells.copy()
        cells["drafter"] = cells["drafter"].astype(str).map(lab)
        prompts = {lab(d): v for d, v in r.info.get("prompts", {}).items()}
        zero = {ENDED_AT_ZERO: {lab(d): v for d, v in r.info[ENDED_AT_ZERO].items()}} if ENDED_AT_ZERO in r.info else {}
        out.append(Reduced(normalize_cells(cells), r.grid, r.buckets, {**r.info, "prompts": prompts, **zero}))
    return out, names, renaming_notes(moved)


def reduce_frame(rounds, *, buckets: int = DEFAULT_BUCKETS, grid: Grid | None = None,
                 condition="matched") -> Reduced:
    """The reduction of an in-memory rounds frame (or LogSet), in pandas: the reference
    the engines are tested against, and a way to reduce logs already in memory.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs in memory.
    buckets : int, default 256
        Prompt buckets per task.
    grid : Grid, optional
        The entropy grid (default ``Grid()``).
    condition : str or sequence, default "matched"
        Conditions kept (None pools all).

    Returns
    -------
    Reduced
        The cells and their metadata.

    Examples
    --------
    >>> import glance_law as gl
    >>> red = gl.reduce_frame(gl.simulate_rounds(seed=0))
    >>> red.info["rounds_read"] > 0
    True
    """
    from glance_law.data.io import LogSet
    grid = grid if grid is not None else Grid()
    B = check_buckets(buckets)
    cond = normalize_condition(condition)
    from glance_law.data.arms import RENAMED_NOTE, label_targets, targets
    frame = rounds.frame if isinstance(rounds, LogSet) else rounds
    names = targets(frame)            # recorded in info: merges keep reductions of other targets apart
    arm_notes: list[str] = []
    frame = label_targets(frame, arm_notes)      # several target models: cells keyed by drafter @ target
    arm_notes = [a for a in arm_notes if a.startswith(RENAMED_NOTE)]    # names altered to label arms
    need = ("task", "prompt_id", "root_entropy", "accepted", "horizon")
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise GlanceError(f"a reduction needs the column(s) {', '.join(missing)}")
    n = len(frame)
    col = {}
    for c, d in (("condition", S.CONDITIONS_DEFAULT), ("drafter", S.FILLED_WHEN_NULL["drafter"])):
        v = frame[c].astype(object) if c in frame.columns else pd.Series(np.full(n, d, dtype=object))
        col[c] = v.where(v.notna(), d).astype(str).to_numpy()
    L = frame["horizon"].to_numpy().astype(np.int64)
    drafted = L > 0
    in_cond = np.ones(n, bool) if cond is None else np.isin(col["condition"], cond)
    keep = drafted & in_cond
    zero = np.zeros(n, bool)
    if "drafted_horizon" in frame.columns:     # cut to 0 at the end of an output: not autoregressive
        dh = pd.to_numeric(frame["drafted_horizon"], errors="coerce").fillna(0).to_numpy()
        zero = (L == 0) & (dh > 0)
    other = pd.Series(col["condition"][(drafted | zero) & ~in_cond]).value_counts().sort_index()
    Hall = pd.to_numeric(frame["root_entropy"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    hnull = np.isnan(Hall)[keep]          # null: not measured (the reader refused NaN) -> hbin -1, sum_h 0
    H = np.maximum(np.nan_to_num(Hall.astype(np.float32).astype(np.float64), nan=0.0), 0.0)[keep]
    if H.size and H.max() > MAX_ENTROPY:
        raise GlanceError(f"column 'root_entropy': a value of {H.max():.6g} nats is impossible")
    task = frame["task"].astype(str).to_numpy()[keep]
    prompt = frame["prompt_id"].astype(str).to_numpy()[keep]
    pairs = pd.DataFrame({"t": task, "p": prompt})
    codes, uniq = pd.MultiIndex.from_frame(pairs).factorize()
    bucket = buckets_of(uniq.get_level_values(0), uniq.get_level_values(1), B)[codes]
    cells = pd.DataFrame({"task": task, "drafter": col["drafter"][keep], "bucket": bucket, "hbin": np.where(hnull, -1, grid.index(H)),
                          "horizon": L[keep], "accepted": frame["accepted"].to_numpy()[keep].astype(np.int64),
                          "n": 1, "sum_h": H, "sum_h2": H * H})
    prompts: dict = {}
    if len(pairs):
        per = pd.DataFrame({"d": cells["drafter"], "t": task, "p": prompt}).drop_duplicates()
        for (d, t), k in per.groupby(["d", "t"]).size().items():
            prompts.setdefault(str(d), {})[str(t)] = int(k)
    ended: dict = {}
    if (zero & in_cond).any():
        z = pd.DataFrame({"d": col["drafter"][zero & in_cond], "t": frame["task"].astype(str).to_numpy()[zero & in_cond]})
        for (d, t), k in z.groupby(["d", "t"]).size().items():
            ended.setdefault(str(d), {})[str(t)] = int(k)
    info = {"condition": cond, "rounds_read": int(n), "excluded_horizon0": int((~drafted & ~zero).sum()),
            "excluded_conditions": {str(k): int(v) for k, v in other.items()}, "filled": {}, "prompts": prompts,
            "skipped": [], "sources": [{"engine": "pandas", "files": 0, "rounds_read": int(n)}]}
    if ended:
        info[ENDED_AT_ZERO] = ended
    if names:
        info["targets"] = names
    if arm_notes:
        info["arm_notes"] = arm_notes
    return Reduced(normalize_cells(cells), grid, B, info)


# --------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------

def write_reduced(reduced: Reduced, path) -> str:
    """Write a reduction as one Parquet file of kind ``reduced`` (atomically, via glance_law.io)."""
    from glance_law.data.io import run_metadata, write_table
    if len(reduced.cells) == 0:
        raise GlanceError("the reduction holds no rounds; nothing to write")
    return str(write_table(reduced.cells, path, kind=S.KIND_REDUCED, run=run_metadata(reduction=reduced.metadata())))


def cells_digest(cells: pd.DataFrame) -> str:
    """SHA-256 of a cells table's content (the key and sum columns present; row order ignored)."""
    cols = [c for c in KEY + SUMS if c in cells.columns]
    rows = pd.util.hash_pandas_object(cells[cols], index=False).to_numpy()
    return hashlib.sha256(np.sort(rows).tobytes()).hexdigest()


def read_reduced(paths, skip_bad: bool = False) -> Reduced:
    """Read and merge reduced files (files, folders, globs)."""
    from glance_law.data.io import read_logs
    logs = read_logs(paths, S.KIND_REDUCED, skip_bad=skip_bad)
    frame = logs.frame
    parts, start, seen = [], 0, {}
    for fi in logs.files:
        cells = frame.iloc[start:start + fi.rows]
        start += fi.rows
        if len(cells):  # a copy under another name would double every count when merged
            digest = cells_digest(cells)
            if digest in seen:
                raise GlanceError(f"{fi.path} holds the same cells as {seen[digest]} (a copy of one reduction? "
                                  "merging would count its rounds twice): pass one of them")
            seen[digest] = fi.path
        parts.append(Reduced.from_metadata(cells, fi.run.get("reduction"), fi.path))
    out = merge(parts)
    if logs.skipped:
        skipped = list(out.info.get("skipped", [])) + [list(s) for s in logs.skipped]
        out = replace(out, info={**out.info, "skipped": skipped})
    return out
