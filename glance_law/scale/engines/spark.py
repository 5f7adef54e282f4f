"""The reduction on Apache Spark (``engine="spark"``): the queries of :mod:`.sql` as Spark SQL.

pyspark is optional (``pip install 'glance-law[spark]'``, Java 17+). The session, in this order:

1. ``spark=`` an existing SparkSession (Python API);
2. ``master=`` (``--spark-master URL``): ``local[*]``, ``spark://host:7077`` (standalone),
   ``yarn``, ``k8s://https://host:443`` or any URL Spark accepts, passed through untouched;
3. the active session, or the one ``spark-submit`` prepared (its ``--master`` and ``--conf``);
4. the ``SPARK_MASTER`` environment variable, else ``local[*]`` (``spark.master`` in
   ``spark-defaults.conf`` is not consulted; every other setting there applies).

A session this module starts is stopped afterwards; one it was given or found is left running
(with its ``spark.sql.shuffle.partitions`` restored). The executors read the inputs: local paths
go to Spark as absolute ``file://`` URIs (every executor must see them at that path), store
URIs through Spark's own Hadoop connectors (``s3://`` as ``s3a://``). The shuffle partitions
are sized to the data (:func:`shuffle_partitions`) unless the configuration sets them. The
page checksums are verified on the executors (:func:`bad_pages`): the driver reads footers only.
The per-stream statistics and the bucket table are cached; the cells come back to the driver as a
pandas frame (they are small).
"""
from __future__ import annotations

import math
import os
import sys
import warnings

from glance_law.errors import GlanceError
from glance_law.scale.reduce import Grid

from .sources import VERIFIED_COLUMNS, BadFiles, Source, page_failure
from .sql import SPARK, file_index, run

#: The master used when nothing names one (see the module docstring).
DEFAULT_MASTER = "local[*]"
#: The environment variable naming the master when ``--spark-master`` does not.
MASTER_ENV = "SPARK_MASTER"
#: Input rounds per shuffle partition (:func:`shuffle_partitions`).
ROWS_PER_PARTITION = 2_000_000
#: Page-check outcomes: the check ran on the executors (every file passed, or the bad ones were named).
OWN_PAGE_CHECK = True


def _pyspark():
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise GlanceError("the spark engine needs pyspark: pip install 'glance-law[spark]' (and Java 17+)") from None


def under_submit() -> bool:
    """Whether this Python was started by ``spark-submit`` (which hands it a JVM gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local(master: str | None) -> bool:
    return master is not None and (master == "local" or master.startswith("local["))


def master_of(master: str | None = None) -> str | None:
    """The master URL a new session gets: ``master``, else None under ``spark-submit`` (its own
    ``--master``), else ``$SPARK_MASTER``, else :data:`DEFAULT_MASTER`."""
    if master:
        return master
    if under_submit():
        return None
    return os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def session(master: str | None = None):
    """A SparkSession for glance-law on :func:`master_of` ``(master)``, or the GlanceError to show.
    Local sessions run without the web UI, and their Python workers run this interpreter unless
    ``PYSPARK_PYTHON`` names another; everything else comes from Spark's configuration
    (``spark-submit --conf``, ``spark-defaults.conf`` in ``SPARK_CONF_DIR``)."""
    _pyspark()
    from pyspark.sql import SparkSession
    chosen = master_of(master)
    # pyspark's driver reads the workers' Python from PYSPARK_PYTHON once, when the context starts
    # (default: the first python3 on PATH, which need not have pyarrow): a local session gets this one
    pin = is_local(chosen) and "PYSPARK_PYTHON" not in os.environ
    try:
        b = SparkSession.builder.appName("glance-law reduce").config("spark.ui.showConsoleProgress", "false")
        if chosen is not None:
            b = b.master(chosen)
        if is_local(chosen):
            b = b.config("spark.ui.enabled", "false")
        if pin:
            os.environ["PYSPARK_PYTHON"] = sys.executable
        return b.config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate()
    except Exception as exc:  # noqa: BLE001 - Java/py4j failures come in many types
        what = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise GlanceError(f"could not start Spark on {chosen or 'the master spark-submit names'} ({what}); is "
                          "Java 17+ installed and the master reachable?") from None
    finally:
        if pin:
            os.environ.pop("PYSPARK_PYTHON", None)


def resolve(spark=None, master: str | None = None):
    """(session, whether this call started it): ``spark``, else the active session (refused when
    ``master`` names another), else :func:`session`."""
    if spark is not None:
        return spark, False
    _pyspark()
    from pyspark.sql import SparkSession
    active = SparkSession.getActiveSession()
    if active is not None:
        have = active.sparkContext.master
        if master and master != have:
            raise GlanceError(f"a Spark session on {have} is already active in this process; pass spark=that "
                              f"session, or stop it before reducing on {master}")
        return active, False
    return session(master), True


def shuffle_partitions(rows: int, parallelism: int) -> int:
    """Shuffle partitions for ``rows`` input rounds on a cluster of ``parallelism`` cores: one per
    :data:`ROWS_PER_PARTITION` rounds, at least one per core (the grouped tables are far smaller
    than the input: streams, prompts and cells)."""
    return max(1, int(parallelism), math.ceil(int(rows) / ROWS_PER_PARTITION))


def spark_path(path) -> str:
    """The name Spark reads: store URIs untouched (s3:// as s3a://, Hadoop's S3 connector),
    file:// URIs untouched, local paths as absolute file:// URIs (the path every executor must see)."""
    from glance_law.data import uri
    p = str(path)
    if uri.is_uri(p):
        return "s3a://" + p[len("s3://"):] if uri.scheme(p) == "s3" else p
    return "file://" + os.path.abspath(p)


def bad_pages(spark, sources: list[Source], columns=VERIFIED_COLUMNS) -> list[tuple[str, str]]:
    """(path, one-line message) of each file among ``sources`` whose Parquet pages of ``columns``
    fail their CRC32 checksum (or do not decode), in input order, checked on the executors: each
    file is read whole through Spark's ``binaryFile`` source (Spark's connectors, one file per
    Arrow batch) and decoded there with pyarrow's checksum verification. The check function
    travels by value (it needs pyarrow on the executors, as pyspark's Arrow support does, not
    glance-law). Files written without checksums pass unchecked, as in every reader."""
    wanted = list(columns)

    def check(batches):
        import pyarrow as pa
        import pyarrow.parquet as pq
        for b in batches:
            paths, errors = b.column("path").to_pylist(), []
            for i in range(b.num_rows):
                try:
                    with pq.ParquetFile(pa.BufferReader(b.column("content")[i].as_buffer()),
                                        page_checksum_verification=True) as pf:
                        cols = [c for c in wanted if c in pf.schema_arrow.names]
                        for _ in pf.iter_batches(batch_size=1 << 16, columns=cols, use_threads=False):
                            pass
                    errors.append(None)
                except Exception as exc:  # noqa: BLE001 - OSError, ArrowInvalid, ...
                    errors.append(str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__)
            yield pa.RecordBatch.from_pydict({"path": paths, "error": errors},
                                             schema=pa.schema([("path", pa.string()), ("error", pa.string())]))

    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "1")        # one file per batch: memory of the largest file, not of a partition
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # pyspark's FutureWarning on pandas 3
            rows = (spark.read.format("binaryFile").load([spark_path(s.path) for s in sources])
                    .select("path", "content").mapInArrow(check, "path string, error string")
                    .where("error IS NOT NULL").collect())
    finally:
        spark.conf.set(key, before)
    index = file_index(sources, [r["path"] for r in rows])
    found = sorted((index[r["path"]][0], index[r["path"]][1], r["error"]) for r in rows)
    return [(path, page_failure(path, what)) for _, path, what in found]


def reduce(sources: list[Source], *, grid: Grid, buckets: int, condition, check_keys: bool = True,
           skip_bad: bool = False, spark=None, master: str | None = None, page_check: bool = True):
    """Reduce rounds files with Spark; returns (cells DataFrame, info). ``page_check``: verify the
    Parquet page checksums on the executors first (:func:`bad_pages`)."""
    spark, own = resolve(spark, master)
    from pyspark.sql import functions as F
    cached = []
    part_key = "spark.sql.shuffle.partitions"
    part_before = spark.conf.get(part_key)
    if not spark.sparkContext.getConf().contains(part_key):      # set by the user's configuration: kept
        parallelism = spark.sparkContext.defaultParallelism
        spark.conf.set(part_key, str(shuffle_partitions(sum(s.rows for s in sources), parallelism)))

    def expose(paths):
        df = spark.read.option("mergeSchema", "true").parquet(*paths)
        df.withColumn("glance_file", F.input_file_name()).createOrReplaceTempView("glance_raw")

    def drop(paths):
        gone = {spark_path(p) for p in paths}
        live[:] = [p for p in live if p not in gone]
        expose(live)

    def execute(sql):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return spark.sql(sql).toPandas()

    def materialize(name, sql, view):
        df = spark.sql(sql)
        if not view:
            df = df.cache()
            cached.append(df)
        df.createOrReplaceTempView(name)

    try:
        unread = []
        if page_check:
            unread = bad_pages(spark, sources)
            if unread and (not skip_bad or len(unread) == len(sources)):
                raise BadFiles(unread if skip_bad else unread[:1])
            gone = {p for p, _ in unread}
            sources = [s for s in sources if s.path not in gone]
        live = [spark_path(s.path) for s in sources]
        expose(live)
        cells, info = run(sources, grid=grid, buckets=buckets, condition=condition, check_keys=check_keys,
                          skip_bad=skip_bad, dialect=SPARK, execute=execute, materialize=materialize, drop=drop)
        gone = {p for p, _ in info.get("bad_files", [])}
        if "target" in set().union(*(s.columns for s in sources if s.path not in gone)):   # on the executors
            t = execute("SELECT DISTINCT target FROM glance_raw WHERE target IS NOT NULL")
            info["column_targets"] = sorted(str(x) for x in t["target"])
        info["bad_files"] = list(unread) + list(info.get("bad_files", []))
        return cells, info
    except GlanceError:
        raise
    except Exception as exc:  # noqa: BLE001 - AnalysisException, Py4JJavaError, ...
        msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise GlanceError(f"spark could not reduce the logs ({msg})") from None
    finally:
        for df in cached:
            df.unpersist()
        for name in ("glance_raw", "glance_src", "glance_st", "glance_sus", "glance_pb"):
            spark.catalog.dropTempView(name)
        if own:
            spark.stop()
        else:
            spark.conf.set(part_key, part_before)
