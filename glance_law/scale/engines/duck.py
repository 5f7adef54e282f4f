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

from glance_law.data import uri
from glance_law.errors import GlanceError
from glance_law.scale.reduce import Grid

from .sources import BadFiles, Source
from .sql import DUCKDB, lit, run


def duck_path(path) -> str:
    """The name DuckDB reads: a local path made absolute (file:// URIs too), s3a:// as s3://."""
    p = str(path)
    if not uri.is_uri(p) or uri.scheme(p) == "file":
        return uri.filesystem(p)[1] if uri.is_uri(p) else os.path.abspath(p)
    return "s3://" + p[len("s3a://"):] if uri.scheme(p) == "s3a" else p


def load_httpfs(con) -> bool:
    """Load DuckDB's httpfs extension without any download: an installed copy (``INSTALL
    httpfs`` done beforehand), else the copy shipped by the ``duckdb-extension-httpfs``
    package for this DuckDB version. False when neither is there."""
    import duckdb
    con.execute("SET autoinstall_known_extensions = false")
    try:
        con.execute("LOAD httpfs")
        return True
    except duckdb.Error:
        pass
    try:
        from importlib.resources import files
        shipped = files("duckdb_extension_httpfs") / "extensions" / f"v{duckdb.__version__}" / "httpfs.duckdb_extension"
    except ImportError:
        return False
    if not shipped.is_file():
        return False
    try:
        con.execute(f"LOAD {lit(str(shipped))}")
        return True
    except duckdb.Error:
        return False


def s3_secret(con) -> bool:
    """A temporary DuckDB S3 secret from the standard AWS environment (keys, session token,
    AWS_ENDPOINT_URL[_S3], AWS_REGION); False when no keys are in the environment (botocore,
    when installed, resolves AWS_PROFILE and ~/.aws too). The values go into DuckDB only."""
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    token = os.environ.get("AWS_SESSION_TOKEN")
    if not (key and secret):
        try:
            import botocore.session
            creds = botocore.session.Session().get_credentials()
            if creds is None:
                return False
            frozen = creds.get_frozen_credentials()
            key, secret, token = frozen.access_key, frozen.secret_key, frozen.token
        except Exception:  # noqa: BLE001 - no botocore, or a profile it cannot resolve
            return False
    opts = [f"KEY_ID {lit(key)}", f"SECRET {lit(secret)}"]
    if token:
        opts.append(f"SESSION_TOKEN {lit(token)}")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        ssl = not endpoint.startswith("http://")
        host = endpoint.split("://", 1)[-1].rstrip("/")
        opts += [f"ENDPOINT {lit(host)}", "URL_STYLE 'path'", f"USE_SSL {'true' if ssl else 'false'}"]
        region = region or "us-east-1"
    if region:
        opts.append(f"REGION {lit(region)}")
    con.execute(f"CREATE OR REPLACE TEMPORARY SECRET glance_s3 (TYPE s3, {', '.join(opts)})")
    return True


def access(con, paths) -> str:
    """How DuckDB reaches the files: ``"local"`` (read_parquet on local files), ``"httpfs"``
    (read_parquet on s3:// through the httpfs extension), or ``"arrow"`` (DuckDB scans pyarrow
    datasets over the store: other schemes, no httpfs extension for this DuckDB, or credentials
    only the AWS SDK chain resolves)."""
    schemes = {uri.scheme(p) for p in paths} - {"", "file"}
    if not schemes:
        return "local"
    if schemes <= {"s3", "s3a"} and load_httpfs(con) and s3_secret(con):
        return "httpfs"
    return "arrow"


def expose_arrow(con, paths) -> None:
    """glance_raw as the union (by column name) of one pyarrow dataset per file, each with its
    ``glance_file``: DuckDB streams the batches pyarrow reads from the store."""
    import pyarrow.dataset as ds
    parts = []
    for i, p in enumerate(paths):
        fs, inner = uri.filesystem(p)
        con.register(f"glance_ds{i}", ds.dataset(inner, filesystem=fs, format="parquet"))
        parts.append(f"SELECT *, {lit(str(p))} AS glance_file FROM glance_ds{i}")
    con.execute("CREATE OR REPLACE TEMP VIEW glance_raw AS " + " UNION ALL BY NAME ".join(parts))


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
        how = access(con, live)

        def expose(paths):
            if how == "arrow":
                expose_arrow(con, paths)
                return
            files = ", ".join(lit(duck_path(p)) for p in paths)
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
            if live and uri.is_uri(live[0]) and how == "httpfs":
                raise uri.explain(live[0], exc) from None
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            named = [p for p in live if not uri.is_uri(p) and f'"{os.path.abspath(p)}"' in msg]
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
