"""The reduction as DuckDB SQL (``engine="duckdb"``): see :mod:`.sql` for the queries.

DuckDB reads the Parquet files itself (``read_parquet`` with ``union_by_name``, so files
that lack an optional column read it as null), runs in ``threads`` threads (default: all
cores) and spills to a private temporary folder beyond ``memory_limit`` (default 1 GB).
"""
from __future__ import annotations

import os
import shutil
import tempfile

import pyarrow as pa

from glance_law.errors import GlanceError
from glance_law.scale.reduce import Grid

from .sources import BadFiles, Source
from .sql import DUCKDB, lit, run


def reduce(sources: list[Source], *, grid: Grid, buckets: int, condition, check_keys: bool = True,
           skip_bad: bool = False, threads: int | None = None, memory_limit: str | None = "1GB",
           temp_directory: str | None = None):
    """Reduce rounds files with DuckDB; returns (cells DataFrame, info)."""
    try:
        import duckdb
    except ImportError:  # pragma: no cover - duckdb is a dev dependency
        raise GlanceError("the duckdb engine needs the duckdb package: pip install duckdb") from None
    tmp = temp_directory or tempfile.mkdtemp(prefix="glance-duckdb-")
    con = duckdb.connect()
    try:
        con.execute(f"SET threads = {int(threads or os.cpu_count() or 1)}")
        con.execute("SET preserve_insertion_order = false")
        # Parquet min/max statistics leave NaN out, and DuckDB's statistics propagation then folds the
        # NaN checks to "no NaN" (seen with DuckDB 2.0): turn it off so bad entropies are found.
        con.execute("SET disabled_optimizers = 'statistics_propagation'")
        con.execute(f"SET temp_directory = {lit(tmp)}")
        if memory_limit:
            con.execute(f"SET memory_limit = {lit(memory_limit)}")
        live = [s.path for s in sources]

        def expose(paths):
            files = ", ".join(lit(os.path.abspath(p)) for p in paths)
            con.execute(f"CREATE OR REPLACE TEMP VIEW glance_raw AS SELECT * FROM read_parquet([{files}], "
                        "union_by_name = true, filename = 'glance_file')")

        def drop(paths):
            gone = set(paths)
            live[:] = [p for p in live if p not in gone]
            expose(live)

        def execute(sql):
            # through Arrow, strings dictionary-encoded: millions of cells stay compact (pandas categoricals)
            t = con.sql(sql).to_arrow_table()
            cols = [c.dictionary_encode() if pa.types.is_string(c.type) or pa.types.is_large_string(c.type) else c
                    for c in t.columns]
            return pa.table(cols, names=t.column_names).to_pandas()

        def materialize(name, sql, view):
            con.execute(f"CREATE OR REPLACE TEMP {'VIEW' if view else 'TABLE'} {name} AS {sql}")

        expose(live)
        try:
            return run(sources, grid=grid, buckets=buckets, condition=condition, check_keys=check_keys,
                       skip_bad=skip_bad, dialect=DUCKDB, execute=execute, materialize=materialize, drop=drop)
        except duckdb.Error as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            named = [p for p in live if f'"{os.path.abspath(p)}"' in msg]
            if named:   # one file's fault (e.g. text that is not UTF-8): skippable like any bad file
                from glance_law.data.io import LogError
                what = "holds bytes that are not UTF-8 text" if "UTF8" in msg or "UTF-8" in msg \
                    else "could not be read by duckdb"
                err = LogError(named[0], f"{what} (duckdb: {msg[:160]})",
                               "fix or re-log the file, or pass --skip-bad to leave it out")
                raise BadFiles([(named[0], str(err))]) from None
            raise GlanceError(f"duckdb could not reduce the logs ({msg[:200]})") from None
    finally:
        con.close()
        if temp_directory is None:
            shutil.rmtree(tmp, ignore_errors=True)
