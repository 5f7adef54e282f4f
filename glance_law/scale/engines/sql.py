"""The reduction as SQL, shared by the DuckDB and Spark engines (:mod:`.duck`, :mod:`.spark`).

The engine exposes the rounds files as a table ``glance_raw`` with a column ``glance_file``
(the file each row came from); :func:`run` then executes, through the engine's
``execute(sql) -> pandas.DataFrame`` and ``materialize(name, sql, view)`` callbacks (a view
is re-evaluated when read, a table is computed once):

1. ``glance_src``: the columns a reduction reads, with the reader's defaults (condition
   'matched', drafter 'unknown') and the entropy rounded to float32 as the contract stores it;
2. ``glance_st``: one row per (run_id, prompt_id, condition, task, drafter): round count,
   min, max, sum and sum of squares, autoregressive rounds, filled defaults and counts of
   the contract's value violations (the entropy by one range test, which NaN fails in both
   engines since they order NaN above every number) - one pass that feeds the checks, the
   exclusions, the prompt counts and the duplicate-key candidates; only when a violation
   exists is a second pass grouped by file, to name the file;
3. candidates for duplicate keys: streams whose rounds over all files are not one dense
   range lo..hi (count, sum or sum of squares differ), confirmed exactly by grouping just
   those streams' rounds;
4. ``glance_pb``: the bucket of every distinct (task, prompt_id) (md5, once per prompt);
5. the cells: rounds joined to their bucket, grouped by (task, drafter, bucket, hbin,
   horizon, accepted) with count, sum H and sum H^2.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from glance_law.data import schema as S
from glance_law.scale.reduce import ENDED_AT_ZERO, MAX_ENTROPY, Grid

from .sources import BadFiles, Source, blame


@dataclass(frozen=True)
class Dialect:
    name: str
    big: str                      # an exact integer type for sums of squares
    semi: str                     # the semi-join keyword
    q: str                        # identifier quote

    def bucket(self, buckets: int) -> str:
        hexed = "substr(md5(concat(task, chr(31), prompt_id)), 1, 8)"
        if self.name == "duckdb":
            return f"CAST(CAST(('0x' || {hexed}) AS UBIGINT) % {int(buckets)} AS INTEGER)"
        return f"CAST(pmod(CAST(conv({hexed}, 16, 10) AS BIGINT), {int(buckets)}) AS INTEGER)"


DUCKDB = Dialect("duckdb", "HUGEINT", "SEMI JOIN", '"')
SPARK = Dialect("spark", "DECIMAL(38,0)", "LEFT SEMI JOIN", "`")


def lit(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def _in(col: str, values) -> str:
    return "TRUE" if values is None else f"{col} IN ({', '.join(lit(v) for v in values)})"


def source_sql(dialect: Dialect, columns: set[str]) -> str:
    """SELECT over glance_raw giving the reduction's columns with the reader's defaults."""
    q = dialect.q
    cond = "COALESCE(condition, 'matched')" if "condition" in columns else "'matched'"
    cnull = "condition IS NULL" if "condition" in columns else "FALSE"
    drafter = "COALESCE(drafter, 'unknown')" if "drafter" in columns else "'unknown'"
    dnull = "drafter IS NULL" if "drafter" in columns else "FALSE"
    # a round an importer cut to horizon 0 at the end of an output (accepted 0) while the drafter drafted
    # drafted_horizon > 0: a verification round, not an autoregressive one (scale.reduce.ENDED_AT_ZERO)
    ended = ("(horizon = 0 AND COALESCE(drafted_horizon, 0) > 0)" if "drafted_horizon" in columns else "FALSE")
    return (f"SELECT glance_file AS f, run_id, task, prompt_id, {cond} AS cond, {cnull} AS cond_null, "
            f"{drafter} AS drafter, {dnull} AS drafter_null, {q}round{q} AS rnd, "
            f"CAST(CAST(root_entropy AS FLOAT) AS DOUBLE) AS h_raw, accepted, horizon, {ended} AS ended FROM glance_raw")


BAD = {
    "bad_h": f"h_raw IS NOT NULL AND NOT (h_raw >= {-S.FLOAT_TOL!r} AND h_raw <= {MAX_ENTROPY!r})",
    "bad_a": "accepted IS NULL OR horizon IS NULL OR accepted < 0 OR horizon < 0 OR accepted > horizon",
    "bad_null": "run_id IS NULL OR task IS NULL OR prompt_id IS NULL OR rnd IS NULL",
    "bad_round": "rnd < 0",
}


def stats_sql(dialect: Dialect) -> str:
    """One row per stream (run_id, prompt_id, condition) and task, drafter: the round moments, the
    autoregressive rounds, the defaults filled in and the contract violations."""
    big = dialect.big
    r = f"CAST(rnd AS {big})"
    bad = ", ".join(f"count_if({cond}) AS {name}" for name, cond in BAD.items())
    return (f"SELECT run_id, prompt_id, cond, task, drafter, count(*) AS n, min(rnd) AS lo, max(rnd) AS hi, "
            f"sum({r}) AS s1, sum({r} * {r}) AS s2, count_if(horizon = 0 AND NOT ended) AS n_h0, "
            f"count_if(ended) AS n_z, "
            f"count_if(cond_null) AS n_cnull, count_if(drafter_null) AS n_dnull, {bad} "
            f"FROM glance_src GROUP BY run_id, prompt_id, cond, task, drafter")


def violations_sql() -> str:
    """Per file, the rows breaking each rule (run only when some stream has a violation)."""
    bad = ", ".join(f"count_if({cond}) AS {name}" for name, cond in BAD.items())
    return f"SELECT f, {bad} FROM glance_src GROUP BY f"


def suspects_sql(dialect: Dialect) -> str:
    """Streams whose rounds, over all files, are not one dense range lo..hi (count, sum or sum of
    squares differ): the only streams that can hold a duplicate key."""
    big = dialect.big

    def f6(x):
        x = f"CAST({x} AS {big})"
        return f"({x} * ({x} + 1) * (2 * {x} + 1))"
    return (f"SELECT run_id, prompt_id, cond FROM (SELECT run_id, prompt_id, cond, sum(n) AS n, min(lo) AS lo, "
            f"max(hi) AS hi, sum(s1) AS s1, sum(s2) AS s2 FROM glance_st WHERE run_id IS NOT NULL AND prompt_id "
            f"IS NOT NULL AND lo IS NOT NULL GROUP BY run_id, prompt_id, cond) t "
            f"WHERE n <> hi - lo + 1 OR 2 * s1 <> CAST(lo + hi AS {big}) * n OR 6 * s2 <> {f6('hi')} - {f6('lo - 1')}")


def duplicates_sql(dialect: Dialect) -> str:
    semi = dialect.semi
    return (f"WITH x AS (SELECT s.f, s.run_id, s.prompt_id, s.cond, s.rnd FROM glance_src s {semi} glance_sus u "
            f"ON s.run_id = u.run_id AND s.prompt_id = u.prompt_id AND s.cond = u.cond), "
            f"d AS (SELECT run_id, prompt_id, cond, rnd FROM x GROUP BY run_id, prompt_id, cond, rnd "
            f"HAVING count(*) > 1) "
            f"SELECT x.f, x.run_id, x.prompt_id, x.cond, x.rnd FROM x {semi} d ON x.run_id = d.run_id AND "
            f"x.prompt_id = d.prompt_id AND x.cond = d.cond AND x.rnd = d.rnd")


def included(condition) -> str:
    return f"n > n_h0 + n_z AND {_in('cond', condition)}"


def buckets_sql(dialect: Dialect, buckets: int, condition) -> str:
    return (f"SELECT task, prompt_id, {dialect.bucket(buckets)} AS bucket FROM "
            f"(SELECT DISTINCT task, prompt_id FROM glance_st WHERE {included(condition)}) t")


def cells_sql(dialect: Dialect, grid: Grid, condition) -> str:
    h = "h"
    return (f"SELECT s.task, s.drafter, b.bucket, s.hbin, s.horizon, s.accepted, count(*) AS n, sum(s.h) AS sum_h, "
            f"sum(s.h * s.h) AS sum_h2 FROM (SELECT task, prompt_id, drafter, horizon, accepted, COALESCE(h, 0.0) AS h, "
            f"CASE WHEN h IS NULL THEN -1 ELSE {grid.sql(h)} END "
            f"AS hbin FROM (SELECT task, prompt_id, drafter, horizon, accepted, CASE WHEN h_raw IS NULL THEN NULL "
            f"ELSE greatest(h_raw, CAST(0 AS DOUBLE)) END "
            f"AS h FROM glance_src WHERE horizon > 0 AND {_in('cond', condition)}) r) s "
            f"JOIN glance_pb b ON s.task = b.task AND s.prompt_id = b.prompt_id "
            f"GROUP BY s.task, s.drafter, b.bucket, s.hbin, s.horizon, s.accepted")


def ended_at_zero(execute: Callable[[str], pd.DataFrame], condition) -> dict:
    """``{ENDED_AT_ZERO: drafter -> task -> rounds}`` of the kept conditions (empty when there are none),
    as :func:`glance_law.scale.reduce.reduce_frame` counts them."""
    z = execute(f"SELECT drafter, task, sum(n_z) AS k FROM glance_st WHERE n_z > 0 AND {_in('cond', condition)} "
                "GROUP BY drafter, task")
    out: dict = {}
    for _, r in z.iterrows():
        out.setdefault(str(r["drafter"]), {})[str(r["task"])] = int(r["k"])
    return {ENDED_AT_ZERO: out} if out else {}


def _violations(st_files: pd.DataFrame, index: dict) -> list[tuple[str, str]]:
    """(path, message) per file with contract violations, in input order."""
    from glance_law.data.io import LogError
    out = []
    for _, r in st_files.iterrows():
        path = index[r["f"]][1]
        if r["bad_null"] > 0:
            msg = LogError(path, f"{int(r['bad_null'])} row(s) with a null run_id, task, prompt_id or round",
                           "every row needs a value here; fix the logger or drop those rows")
        elif r["bad_h"] > 0:
            msg = LogError(path, f"{int(r['bad_h'])} value(s) are NaN, infinite, negative or above "
                                 f"{MAX_ENTROPY:g} nats",
                           "entropy is in nats from finite fp32 logits; fix the logger, or drop those rounds",
                           "root_entropy")
        elif r["bad_a"] > 0:
            msg = LogError(path, f"{int(r['bad_a'])} row(s) with accepted or horizon null, negative, or "
                                 "accepted > horizon",
                           "accepted counts draft tokens only (bonus excluded) and lies in 0..horizon", "accepted")
        elif r["bad_round"] > 0:
            msg = LogError(path, f"{int(r['bad_round'])} value(s) below 0",
                           "round is the 0-based index of the round within its prompt", "round")
        else:
            continue
        out.append((index[r["f"]][0], path, str(msg)))
    out.sort()
    return [(p, m) for _, p, m in out]


def file_key(path) -> str:
    """A comparable name of a file: the real local path for paths and file: URIs, the URI
    (s3a:// read as s3://, percent-escapes undone) for store URIs."""
    from urllib.parse import unquote, urlparse
    p = str(path)
    if p.startswith("file:"):
        return os.path.realpath(unquote(urlparse(p).path))
    if "://" in p:
        p = unquote(p)
        return "s3://" + p[len("s3a://"):] if p.startswith("s3a://") else p
    return os.path.realpath(p)


def file_index(sources: Sequence[Source], names: Sequence[str]) -> dict:
    """Map the engine's file names (paths, file: URIs or store URIs) to (input index, path)."""
    real = {file_key(s.path): (i, s.path) for i, s in enumerate(sources)}
    return {name: real.get(file_key(name), (len(sources), str(name))) for name in names}


def run(sources: list[Source], *, grid: Grid, buckets: int, condition, check_keys: bool, skip_bad: bool,
        dialect: Dialect, execute: Callable[[str], pd.DataFrame], materialize: Callable[[str, str, bool], None],
        drop: Callable[[Sequence[str]], None] = lambda files: None):
    """The SQL reduction of the files exposed as ``glance_raw``; returns (cells, info) like every engine.
    ``drop(paths)`` re-exposes glance_raw without those files (used with ``skip_bad``)."""
    columns = set().union(*(s.columns for s in sources))
    materialize("glance_src", source_sql(dialect, columns), True)
    materialize("glance_st", stats_sql(dialect), False)
    any_bad = execute("SELECT " + " + ".join(f"sum({k})" for k in BAD) + " AS k FROM glance_st")["k"].iloc[0]
    bad = []
    if any_bad is not None and int(any_bad) > 0:
        per_file = execute(violations_sql())
        bad = _violations(per_file, file_index(sources, per_file["f"].tolist()))
    if bad and not skip_bad:
        raise BadFiles(bad[:1])
    if bad:
        gone = {p for p, _ in bad}
        drop(sorted(gone))
        # the optional columns of the surviving files only (a dropped file may have been the one with them)
        columns = set().union(*(s.columns for s in sources if s.path not in gone))
        materialize("glance_src", source_sql(dialect, columns), True)
        materialize("glance_st", stats_sql(dialect), False)
    if check_keys:
        materialize("glance_sus", suspects_sql(dialect), False)
        n_sus = int(execute("SELECT count(*) AS k FROM glance_sus")["k"].iloc[0])
        if n_sus:
            rows = execute(duplicates_sql(dialect))
            if len(rows):
                idx = file_index(sources, rows["f"].unique().tolist())
                frame = pd.DataFrame({"file": [idx[f][0] for f in rows["f"]], "run_id": rows["run_id"].astype(str),
                                      "prompt_id": rows["prompt_id"].astype(str),
                                      "condition": rows["cond"].astype(str),
                                      "round": rows["rnd"].to_numpy().astype(np.int64)})
                found = blame(frame, sources)
                if found:
                    raise BadFiles(found if skip_bad else found[:1])
    tot = execute("SELECT cond, sum(n) AS n, sum(n_h0) AS h0, sum(n_cnull) AS cn, sum(n_dnull) AS dn "
                  "FROM glance_st GROUP BY cond")
    info = {"rounds_read": int(tot["n"].sum()), "excluded_horizon0": int(tot["h0"].sum()),
            "excluded_conditions": {}, "filled": {"condition": int(tot["cn"].sum()), "drafter": int(tot["dn"].sum())},
            "bad_files": bad}
    for _, r in tot.iterrows():
        if condition is not None and r["cond"] not in condition and r["n"] > r["h0"]:
            info["excluded_conditions"][str(r["cond"])] = int(r["n"] - r["h0"])
    info.update(ended_at_zero(execute, condition))
    pr = execute(f"SELECT drafter, task, count(DISTINCT prompt_id) AS k FROM glance_st WHERE {included(condition)} "
                 "GROUP BY drafter, task")
    info["prompts"] = {}
    for _, r in pr.iterrows():
        info["prompts"].setdefault(str(r["drafter"]), {})[str(r["task"])] = int(r["k"])
    materialize("glance_pb", buckets_sql(dialect, buckets, condition), False)
    cells = execute(cells_sql(dialect, grid, condition))
    return cells, info
