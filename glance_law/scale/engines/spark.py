"""The reduction on Apache Spark (``engine="spark"``): the queries of :mod:`.sql` as Spark SQL.

pyspark is optional (``pip install 'glance-law[spark]'``, Java 17+). Pass ``spark=`` an
existing SparkSession to run on a cluster (paths must then be readable by the executors);
otherwise the active session is used, or a local one is started with ``master``
(default ``local[*]``) and stopped afterwards. The per-stream statistics and the bucket
table are cached; the cells come back to the driver as a pandas frame (they are small).
"""
from __future__ import annotations

import os
import warnings

from glance_law.errors import GlanceError
from glance_law.scale.reduce import Grid

from .sources import Source
from .sql import SPARK, run


def session(master: str = "local[*]"):
    """A local SparkSession for glance-law (UI off, small shuffles), or the GlanceError to show."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise GlanceError("the spark engine needs pyspark: pip install 'glance-law[spark]' (and Java 17+)") from None
    try:
        return (SparkSession.builder.master(master).appName("glance-law reduce")
                .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "8")
                .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    except Exception as exc:  # noqa: BLE001 - Java/py4j failures come in many types
        raise GlanceError(f"could not start Spark ({str(exc).splitlines()[0][:200]}); is Java 17+ installed?") from None


def spark_path(path) -> str:
    """The name Spark reads: store URIs untouched (s3:// as s3a://, Hadoop's S3 connector),
    file:// URIs untouched, local paths made absolute (on the driver's filesystem)."""
    from glance_law.data import uri
    p = str(path)
    if uri.is_uri(p):
        return "s3a://" + p[len("s3://"):] if uri.scheme(p) == "s3" else p
    return os.path.abspath(p)


def reduce(sources: list[Source], *, grid: Grid, buckets: int, condition, check_keys: bool = True,
           skip_bad: bool = False, spark=None, master: str = "local[*]"):
    """Reduce rounds files with Spark; returns (cells DataFrame, info)."""
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
    except ImportError:
        raise GlanceError("the spark engine needs pyspark: pip install 'glance-law[spark]' (and Java 17+)") from None
    own = spark is None and SparkSession.getActiveSession() is None
    spark = spark or SparkSession.getActiveSession() or session(master)
    cached = []
    live = [spark_path(s.path) for s in sources]

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
        expose(live)
        return run(sources, grid=grid, buckets=buckets, condition=condition, check_keys=check_keys,
                   skip_bad=skip_bad, dialect=SPARK, execute=execute, materialize=materialize, drop=drop)
    except GlanceError:
        raise
    except Exception as exc:  # noqa: BLE001 - AnalysisException, Py4JJavaError, ...
        raise GlanceError(f"spark could not reduce the logs ({str(exc).splitlines()[0][:200]})") from None
    finally:
        for df in cached:
            df.unpersist()
        for name in ("glance_raw", "glance_src", "glance_st", "glance_sus", "glance_pb"):
            spark.catalog.dropTempView(name)
        if own:
            spark.stop()
