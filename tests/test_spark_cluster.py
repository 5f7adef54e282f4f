"""Issue 37: the spark engine on a real Spark standalone cluster, from the command line. A master
and two workers (one core each, small memory) on 127.0.0.1, started with pyspark's own
``bin/spark-class`` and stopped by process id (``tests/_spark_cluster.py``), run
``python -m glance_law.fit LOGS --engine spark --spark-master spark://127.0.0.1:PORT`` on simulated
logs, ``python -m glance_law.report --engine spark`` on them, and ``python -m glance_law.reduce`` on imported real
Spec-Bench files, and the fit once more through
``spark-submit --master spark://...`` (the session spark-submit prepares); the law tables and the
reduced cells equal the arrow engine's, cell for cell. Also: the master URL's precedence
(``--spark-master``, ``SPARK_MASTER``, local[*]) and its refusals, and the shuffle partitions."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _spark_cluster import spark_class, standalone

from glance_law.cli import fit as F
from glance_law.cli import ingest as IN
from glance_law.cli import reduce as RC
from glance_law.io import write_table
from glance_law.scale.engines import reduce_logs
from glance_law.scale.engines import spark as SP
from glance_law.scale.reduce import read_reduced
from glance_law.simulate import simulate_rounds

#: ../shared/realdata beside the checkout (or beside the folder of worktrees holding it)
REAL = next((p / "shared" / "realdata" / "spec-bench" for p in Path(__file__).resolve().parents[2:4]
             if (p / "shared" / "realdata" / "spec-bench").is_dir()), Path("../shared/realdata/spec-bench"))
SPEC = [REAL / "vase" / "vicuna-7b-v1.3-medusa.jsonl.gz",
        REAL / "bnukh" / "test_bench__vicuna-7b-v1.3-sps-68m-float16-temp-0.0.jsonl.gz"]
COLS = ["run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon", "condition", "drafter"]


def _cli(module: str, args, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _sorted_cells(path):
    c = read_reduced([str(path)]).cells
    return c.sort_values(list(c.columns[:6])).reset_index(drop=True)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Simulated logs (two drafters, three files) and imported real Spec-Bench files."""
    root = tmp_path_factory.mktemp("cluster-logs")
    for i, drafter in enumerate(["block", "pld", "block"]):
        f = simulate_rounds(n_prompts=40, seed=70 + i, drafter=drafter, run_id=f"r{i}", vectors=False)
        write_table(f[COLS], root / "sim" / f"rounds-{i}.parquet")
    for src in SPEC if REAL.exists() else []:
        assert IN.main(["auto", str(src), "--out", str(root / "real" / src.name.split(".")[0])]) == 0
    return root


def test_fit_and_reduce_on_a_two_worker_standalone_cluster(logs, tmp_path):
    with standalone(tmp_path / "cluster", workers=2, cores=1, memory="1g") as cluster:
        env = cluster.client_env()
        got = _cli("glance_law.fit", [logs / "sim", "--engine", "spark", "--spark-master", cluster.url], env=env)
        assert got.returncode == 0, got.stderr[-3000:]
        script = tmp_path / "glance_fit.py"        # what docs/scale.md tells a spark-submit user to write
        script.write_text("import sys\nfrom glance_law.cli.fit import main\nsys.exit(main())\n")
        submit = subprocess.run([str(spark_class().parent / "spark-submit"), "--master", cluster.url, str(script),
                                 str(logs / "sim"), "--engine", "spark"], capture_output=True, text=True, env=env,
                                timeout=600)
        assert submit.returncode == 0, submit.stderr[-3000:]
        reals = sorted((logs / "real").iterdir()) if (logs / "real").exists() else []
        if reals:       # both files answer with vicuna-7b-v1.3: one reduction
            r = _cli("glance_law.reduce", [*reals, "--out", tmp_path / "real-spark.parquet", "--engine", "spark",
                                           "--spark-master", cluster.url], env=env)
            assert r.returncode == 0, r.stderr[-3000:]
        rep = _cli("glance_law.report", [logs / "sim", "--out", tmp_path / "report-spark", "--engine", "spark",
                                         "--spark-master", cluster.url, "--only", "law,tail", "--tail-bootstrap", "19",
                                         "--quiet"], env=env)
        assert rep.returncode == 0, rep.stderr[-3000:]
        apps = sorted((tmp_path / "cluster").glob("work-*/app-*"))
        assert apps, "no application ran on the cluster's workers"
        pids = cluster.pids()
    for pid in pids:              # every process the cluster started is gone
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    want = _cli("glance_law.fit", [logs / "sim", "--engine", "arrow"])
    assert want.returncode == 0, want.stderr
    assert got.stdout == want.stdout and "b1" in got.stdout
    assert want.stdout in submit.stdout         # spark-submit merges the Python driver's stderr into its stdout
    arrow = tmp_path / "report-arrow"           # the report's sections from the cluster's reduction: arrow's bytes
    assert _cli("glance_law.report", [logs / "sim", "--out", arrow, "--engine", "arrow", "--only", "law,tail",
                                      "--tail-bootstrap", "19", "--quiet"]).returncode == 0
    for table in ("table12_law.csv", "prop3_tail.csv", "prop3_heldout.csv"):
        assert (tmp_path / "report-spark" / "tables" / table).read_bytes() == (arrow / "tables" / table).read_bytes()
    if reals:
        mine = tmp_path / "real-arrow.parquet"
        assert RC.main([*map(str, reals), "--out", str(mine), "--engine", "arrow"]) == 0
        a, b = _sorted_cells(tmp_path / "real-spark.parquet"), _sorted_cells(mine)
        assert len(a) > 0 and a["drafter"].nunique() == 2
        assert a[["task", "drafter", "bucket", "hbin", "horizon", "accepted", "n"]].equals(
            b[["task", "drafter", "bucket", "hbin", "horizon", "accepted", "n"]])
        ra, rb = read_reduced([str(tmp_path / "real-spark.parquet")]), read_reduced([str(mine)])
        assert ra.info.get("ended_at_zero")
        for key in ("rounds_read", "excluded_horizon0", "ended_at_zero", "prompts", "targets"):
            assert ra.info.get(key) == rb.info.get(key), key


def test_master_precedence_and_refusals(logs, capsys, monkeypatch):
    p = RC.build_parser()
    args = p.parse_args([str(logs / "sim"), "--out", "x.parquet", "--engine", "spark", "--spark-master", "yarn"])
    assert RC.options(args)["master"] == "yarn"
    args = p.parse_args([str(logs / "sim"), "--out", "x.parquet", "--engine", "spark"])
    assert RC.options(args)["master"] is None           # resolved by the engine: spark-submit, SPARK_MASTER, ...
    for argv in ([str(logs / "sim"), "--spark-master", "local[2]"],
                 [str(logs / "sim"), "--engine", "arrow", "--spark-master", "local[2]"]):
        assert F.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--engine spark" in err
    assert F.main([str(logs / "sim"), "--engine", "spark", "--spark-master", "nonsense://x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not start Spark on nonsense://x" in err, err
    monkeypatch.setenv(SP.MASTER_ENV, "local[2]")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    spark = SP.session()
    try:
        assert spark.sparkContext.master == "local[2]"
        with pytest.raises(Exception, match="already active"):
            SP.resolve(None, "local[1]")
        red = reduce_logs(logs / "sim", engine="spark")        # the active session, left running
        assert SP.resolve(None, None) == (spark, False)          # still running: found, not started
        assert red.cells.shape == reduce_logs(logs / "sim", engine="arrow").cells.shape
        assert spark.conf.get("spark.sql.shuffle.partitions") == "200"     # restored after the reduction
    finally:
        spark.stop()
    assert SP.shuffle_partitions(10_000, 2) == 2
    assert SP.shuffle_partitions(10 ** 8, 4) == 50
    assert SP.spark_path("/a/b.parquet") == "file:///a/b.parquet"
