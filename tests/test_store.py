"""Logs in object storage (issue 18), against a real S3 protocol server: moto's server mode,
started here on 127.0.0.1 (loopback only) with IAM authentication switched on, so wrong
credentials and missing permissions are refused as a real store refuses them.

Every engine reads the same logs from the server and from disk with identical results;
globs; a missing bucket, wrong credentials and a denied access give one line; a writer killed
mid-upload leaves no visible part; glance-log and glance_law.reduce write into the store.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

from glance_law.cli.fit import main as fit_main  # noqa: E402
from glance_law.data import uri  # noqa: E402
from glance_law.data.io import LogError, LogWriter, read_logs, write_table  # noqa: E402
from glance_law.scale.engines import reduce_logs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "data" / "logs"
ENV_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
            "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_EC2_METADATA_DISABLED")


@pytest.fixture(scope="session")
def store(tmp_path_factory):
    """A moto S3 server on a free loopback port: bucket 'bucket' holding data/logs/ under logs/;
    credentials of a user allowed s3:* (``env``) and of one allowed nothing (``denied``)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    empty = tmp_path_factory.mktemp("aws")
    base = {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_SHARED_CREDENTIALS_FILE": str(empty / "credentials"), "AWS_CONFIG_FILE": str(empty / "config")}
    boot = dict(aws_access_key_id="boot", aws_secret_access_key="boot", endpoint_url=endpoint, region_name="us-east-1")
    iam = boto3.client("iam", **boot)
    keys = {}
    for user, policy in (("glance", {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}),
                         ("nobody", {"Effect": "Deny", "Action": "s3:*", "Resource": "*"})):
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName="p",
                            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [policy]}))
        k = iam.create_access_key(UserName=user)["AccessKey"]
        keys[user] = {"AWS_ACCESS_KEY_ID": k["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": k["SecretAccessKey"]}
    s3 = boto3.client("s3", **boot)
    s3.create_bucket(Bucket="bucket")
    for f in sorted(LOGS.iterdir()):
        s3.upload_file(str(f), "bucket", f"logs/{f.name}")
    # from here on every request must be signed by a known key with a policy allowing it
    import urllib.request
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                                  headers={"Content-Type": "text/plain"}))
    env = {**base, **keys["glance"]}
    for k in ENV_KEYS:
        os.environ.pop(k, None)
    os.environ.update(env)
    uri.reset_cache()
    yield {"endpoint": endpoint, "env": env, "denied": {**base, **keys["nobody"]},
           "s3": boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])}
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    uri.reset_cache()
    server.stop()


@pytest.fixture
def creds(store, monkeypatch):
    """Switch the environment's credentials for one test (the filesystems are made anew)."""
    def use(env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        uri.reset_cache()
    yield use
    uri.reset_cache()


def _keys(s3, prefix):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket="bucket", Prefix=prefix).get("Contents", []))


def test_read_logs_from_the_store_equals_disk(store):
    remote, local = read_logs("s3://bucket/logs/"), read_logs(LOGS)
    assert remote.frame.equals(local.frame) and len(remote.frame) > 1000
    assert [f.path for f in remote.files] == [f"s3://bucket/logs/{Path(f.path).name}" for f in local.files]
    assert read_logs("s3://bucket/logs/", "prompts").frame.equals(read_logs(LOGS, "prompts").frame)


def test_globs_on_the_store_match_local_globs(store):
    for pattern in ("*.parquet", "rounds-*-matched-*.parquet", "rounds-docvqa-*", "**/prompts-*.parquet",
                    "rounds-[ct]*.parquet"):
        got = [u.rsplit("/", 1)[1] for u in uri.expand(f"s3://bucket/logs/{pattern}")]
        want = sorted(p.name for p in LOGS.glob(pattern.replace("**/", "")))
        assert got == want and got, pattern
    with pytest.raises(uri.StoreError, match="matches no files"):
        uri.expand("s3://bucket/logs/nothing-*.parquet")


@pytest.mark.parametrize("engine", ["arrow", "duckdb"])
def test_engines_reduce_the_store_as_the_disk(store, engine):
    if engine == "duckdb":
        pytest.importorskip("duckdb")
    remote, local = reduce_logs("s3://bucket/logs/", engine), reduce_logs(LOGS, engine)
    assert remote.rounds == local.rounds > 1000
    assert remote.cells.equals(local.cells)
    glob = reduce_logs("s3://bucket/logs/rounds-*.parquet", engine)
    assert glob.cells.equals(local.cells)


def test_duckdb_reads_s3_through_httpfs_and_arrow_datasets_alike(store):
    duckdb = pytest.importorskip("duckdb")
    from glance_law.scale.engines import duck, scan
    rounds, _, _, _ = scan("s3://bucket/logs/")
    con = duckdb.connect()
    try:
        how = duck.access(con, [s.path for s in rounds])
    finally:
        con.close()
    try:
        import duckdb_extension_httpfs  # noqa: F401
        shipped = True
    except ImportError:
        shipped = False
    if shipped and duckdb.__version__ == "1.5.5":
        assert how == "httpfs"  # the pinned pair: the extension from PyPI loads, no download
    else:
        assert how in ("httpfs", "arrow")
    con = duckdb.connect()
    try:   # the fallback every other scheme takes: DuckDB scanning pyarrow datasets over the store
        duck.expose_arrow(con, [s.path for s in rounds])
        n, files = con.execute("SELECT count(*), count(DISTINCT glance_file) FROM glance_raw").fetchone()
    finally:
        con.close()
    assert n == sum(s.rows for s in rounds) and files == len(rounds)


def test_spark_reads_file_uris_untouched(tmp_path):
    """Spark on s3a:// needs the hadoop-aws jars (Maven, not PyPI): tested on file:// URIs."""
    from glance_law.scale.engines.spark import spark_path
    assert spark_path("s3://b/k.parquet") == "s3a://b/k.parquet"
    assert spark_path("gs://b/k.parquet") == "gs://b/k.parquet"
    remote = reduce_logs(f"file://{LOGS}/", "spark")
    assert remote.cells.equals(reduce_logs(LOGS, "arrow").cells)


def test_fit_prints_the_same_table_from_the_store(store, capsys):
    outs = {}
    for name, args in {"local": [str(LOGS)], "arrow": ["s3://bucket/logs/", "--engine", "arrow"],
                       "local-arrow": [str(LOGS), "--engine", "arrow"],
                       "duckdb": ["s3://bucket/logs/", "--engine", "duckdb"],
                       "glob": ["s3://bucket/logs/*.parquet"]}.items():
        assert fit_main(args) == 0, name
        outs[name] = capsys.readouterr().out
    assert outs["arrow"] == outs["duckdb"] == outs["local-arrow"]
    assert outs["glob"] == outs["local"]
    assert "slope" in outs["local"].lower() or len(outs["local"].splitlines()) > 3


def test_store_errors_are_one_line(store, creds, capsys):
    with pytest.raises(LogError, match=r"^s3://missing-bucket/logs/: the bucket 'missing-bucket' does not exist"):
        read_logs("s3://missing-bucket/logs/")
    assert fit_main(["s3://missing-bucket/logs/"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not exist" in err and "Traceback" not in err
    with pytest.raises(LogError, match="no such file, folder or prefix"):
        read_logs("s3://bucket/nothing-here/")
    with pytest.raises(uri.StoreError, match="carries credentials"):
        uri.filesystem("s3://AKIA:secret@bucket/logs/")
    creds({"AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    assert fit_main(["s3://bucket/logs/", "--engine", "arrow"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rejected the credentials" in err, err
    assert "not-the-secret" not in err and store["env"]["AWS_ACCESS_KEY_ID"] not in err
    creds(store["denied"])
    with pytest.raises(LogError) as info:
        read_logs("s3://bucket/logs/")
    assert "access denied" in str(info.value) and "\n" not in str(info.value)


def test_writer_parts_land_in_the_store_and_read_back(store, tmp_path):
    frame = read_logs(LOGS).frame
    records = frame.to_dict("records")
    with LogWriter("s3://bucket/written/", "rounds", stem="t", flush_rows=2000) as w:
        for i in range(0, len(records), 1000):
            w.extend(records[i:i + 1000])
    assert all(isinstance(p, str) and p.startswith("s3://bucket/written/rounds-t-") for p in w.paths)
    assert len(w.paths) == 3
    assert _keys(store["s3"], "written/") == sorted(p[len("s3://bucket/"):] for p in w.paths)  # no temporaries
    back = read_logs("s3://bucket/written/").frame
    assert len(back) == len(frame)
    assert back["root_entropy"].sum() == pytest.approx(frame["root_entropy"].sum())


def test_reduce_out_into_the_store(store, tmp_path, capsys):
    from glance_law.cli.reduce import main as reduce_main
    assert reduce_main(["s3://bucket/logs/", "--out", "s3://bucket/reduced/stats.parquet"]) == 0
    assert reduce_main([str(LOGS), "--out", str(tmp_path / "stats.parquet")]) == 0
    capsys.readouterr()
    assert _keys(store["s3"], "reduced/") == ["reduced/stats.parquet"]
    assert fit_main(["s3://bucket/reduced/stats.parquet"]) == 0
    remote = capsys.readouterr().out
    assert fit_main([str(tmp_path / "stats.parquet")]) == 0
    assert remote == capsys.readouterr().out
    assert reduce_main([str(LOGS), "--out", "s3://missing-bucket/stats.parquet"]) == 2
    assert "does not exist" in capsys.readouterr().err


KILLED_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from glance_law.data.io import write_table
    n = int(sys.argv[2])
    rng = np.random.default_rng(0)
    rows = {"run_id": np.repeat("r", n), "task": np.repeat("t", n), "prompt_id": np.arange(n).astype(str),
            "round": np.zeros(n, np.int64), "root_entropy": rng.random(n), "accepted": np.zeros(n, np.int64),
            "horizon": np.ones(n, np.int64), "noise": rng.random(n)}
    print("writing", flush=True)
    write_table(rows, sys.argv[1])
    print("done", flush=True)
""")


def test_a_writer_killed_mid_upload_leaves_no_visible_part(store, tmp_path):
    """A part is one object written in one upload: kill -9 during the (multipart) upload of a
    ~60 MB part, and the store shows no object under the prefix (the pending upload is invisible)."""
    s3 = store["s3"]
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    env = {**os.environ, **store["env"], "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script), "s3://bucket/killed/rounds-big.parquet", "2000000"],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + 120
        while not s3.list_multipart_uploads(Bucket="bucket", Prefix="killed/").get("Uploads"):
            assert proc.poll() is None, "the writer finished before its upload could be interrupted"
            assert time.monotonic() < deadline, "no upload started"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert _keys(s3, "killed/") == []                   # nothing visible: no part, no partial object
    with pytest.raises(LogError, match="no such file, folder or prefix"):
        read_logs("s3://bucket/killed/")
    # the same write, not interrupted, produces exactly one complete part
    write_table({"run_id": ["r"], "task": ["t"], "prompt_id": ["p"], "round": [0], "root_entropy": [0.5],
                 "accepted": [1], "horizon": [2]}, "s3://bucket/killed/rounds-small.parquet")
    assert _keys(s3, "killed/") == ["killed/rounds-small.parquet"]
    assert len(read_logs("s3://bucket/killed/").frame) == 1


def test_put_atomic_on_file_uris_and_the_listing(tmp_path):
    target = f"file://{tmp_path}/sub/x.parquet"
    uri.put_atomic(target, b"abc")
    assert (tmp_path / "sub" / "x.parquet").read_bytes() == b"abc"
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["x.parquet"]     # no temporary left
    assert uri.list_prefix(f"file://{tmp_path}/") == [f"file://{tmp_path}/sub/x.parquet"]
    frame = read_logs(f"file://{LOGS}/").frame
    assert frame.equals(read_logs(LOGS).frame)


def test_glance_log_writes_into_the_store_and_resumes(store, capsys):
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from glance_log.cli import main as log_main
    torch.set_num_threads(1)
    args = ["--task", "docvqa", "--n", "2", "--max-new-tokens", "8", "--out", "s3://bucket/run/", "--quiet"]
    assert log_main(args) == 0
    first = _keys(store["s3"], "run/")
    assert first and all(k.endswith(".parquet") and "/." not in k for k in first)
    assert log_main(args) == 0                             # the rerun lists the prefix: nothing new to log
    assert _keys(store["s3"], "run/") == first
    rounds = read_logs("s3://bucket/run/")
    assert rounds.frame["prompt_id"].nunique() == 2 and all(f.path.startswith("s3://bucket/run/rounds-")
                                                            for f in rounds.files)
    assert read_logs("s3://bucket/run/", "prompts").frame["prompt_id"].nunique() == 2
    assert reduce_logs("s3://bucket/run/", "arrow").cells.equals(reduce_logs("s3://bucket/run/", "duckdb").cells)


def test_report_reads_its_inputs_from_the_store(store, tmp_path):
    from glance_law.cli import report
    assert report.main(["s3://bucket/logs/", "--out", str(tmp_path / "remote"), "--quiet", "--only", "law"]) == 0
    assert report.main([str(LOGS), "--out", str(tmp_path / "local"), "--quiet", "--only", "law"]) == 0
    remote = json.loads((tmp_path / "remote" / "manifest.json").read_text())["inputs"]
    local = json.loads((tmp_path / "local" / "manifest.json").read_text())["inputs"]
    assert [f["path"] for f in remote] == [f"s3://bucket/logs/{Path(f['path']).name}" for f in local]
    assert [f["sha256"] for f in remote] == [f["sha256"] for f in local]   # hashed as stored, read in place
    tables = sorted(p.name for p in (tmp_path / "local").rglob("*.csv"))
    assert tables and tables == sorted(p.name for p in (tmp_path / "remote").rglob("*.csv"))
    for name in tables:
        a = next((tmp_path / "local").rglob(name)).read_bytes()
        assert a == next((tmp_path / "remote").rglob(name)).read_bytes(), name


def test_a_scheme_pyarrow_lacks_goes_through_fsspec():
    """memory:// (fsspec's in-memory filesystem) stands for any fsspec scheme: write, list, glob, read."""
    pytest.importorskip("fsspec")
    frame = read_logs(LOGS).frame
    for i, (_task, part) in enumerate(frame.groupby("task", observed=True)):
        write_table(part.reset_index(drop=True), f"memory://glance-test/logs/rounds-{i}.parquet")
    got = read_logs("memory://glance-test/logs/")
    assert len(got.files) == frame["task"].nunique()
    assert len(got.frame) == len(frame)
    assert got.frame["root_entropy"].sum() == pytest.approx(frame["root_entropy"].sum())
    assert len(uri.expand("memory://glance-test/logs/rounds-[01].parquet")) == 2
    assert reduce_logs("memory://glance-test/logs/", "arrow").rounds == reduce_logs(LOGS, "arrow").rounds


SLICES = ROOT / "tests" / "data" / "realdata"
#: committed real Spec-Bench slices (tests/data/realdata/PROVENANCE.md), with their question file
ANSWERS = ("spec_bench__question.jsonl.gz", "spec_bench__vicuna-7b-v1.3-eagle-float16-temperature-0.0.jsonl.gz",
           "spec_bench__vicuna-7b-v1.3-vanilla-float16-temp-0.0.jsonl.gz", "vicuna-7b-v1.3-medusa.jsonl.gz")


@pytest.fixture(scope="session")
def answers(store, tmp_path_factory):
    """The same answer files in a local folder 'answers' and under s3://bucket/answers/."""
    local = tmp_path_factory.mktemp("local") / "answers"
    local.mkdir()
    for name in ANSWERS:
        shutil.copy(SLICES / name, local / name)
        store["s3"].upload_file(str(SLICES / name), "bucket", f"answers/{name}")
    return local


def _same_import(remote, local, where):
    assert remote.sources == tuple(s.replace(str(where), "s3://bucket/answers") for s in local.sources)
    pd.testing.assert_frame_equal(remote.rounds, local.rounds)
    pd.testing.assert_frame_equal(remote.prompts, local.prompts)
    assert remote.format == local.format
    assert remote.notes == tuple(n.replace(str(where), "s3://bucket/answers") for n in local.notes)


def test_foreign_logs_are_imported_from_the_store_in_place(store, answers):
    from glance_law.data.importers import import_logs
    # skip_bad: the EAGLE slice holds a real corrupt line (NUL bytes), skipped and noted alike
    local = import_logs(str(answers), skip_bad=True)
    remote = import_logs("s3://bucket/answers/", skip_bad=True)
    assert any("skipped corrupt line" in n for n in remote.notes)
    assert local.rounds_table.num_rows > 1000 and local.format == "spec-bench"
    # the question file beside the answers was found in the store too (categories, not 'unknown')
    assert any("question file" in n for n in remote.notes)
    assert set(remote.prompts["task"].astype(str)) - {"unknown"}
    _same_import(remote, local, answers)
    glob = import_logs("s3://bucket/answers/*.jsonl.gz", skip_bad=True)
    _same_import(glob, import_logs(str(answers / "*.jsonl.gz"), skip_bad=True), answers)
    # read_logs imports them in memory, as it does local foreign logs
    got, want = read_logs("s3://bucket/answers/", skip_bad=True), read_logs(answers, skip_bad=True)
    pd.testing.assert_frame_equal(got.frame, want.frame)


def test_fit_and_ingest_read_foreign_logs_from_the_store(store, answers, tmp_path, capsys):
    from glance_law.cli.ingest import main as ingest_main
    assert fit_main([str(answers), "--skip-bad"]) == 0
    local = capsys.readouterr()
    assert fit_main(["s3://bucket/answers/", "--skip-bad"]) == 0
    remote = capsys.readouterr()
    # the importer's notes (printed under the summary since issue 36.9) name each file where it is
    assert remote.out == local.out.replace(str(answers), "s3://bucket/answers") and len(local.out.splitlines()) > 3
    assert remote.err == local.err.replace(str(answers), "s3://bucket/answers")
    for k in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
        assert store["env"][k] not in remote.err + remote.out
    assert ingest_main(["spec-bench", "s3://bucket/answers/*.jsonl.gz", "--skip-bad",
                        "--out", str(tmp_path / "s3")]) == 0
    assert ingest_main(["spec-bench", str(answers / "*.jsonl.gz"), "--skip-bad", "--out", str(tmp_path / "disk")]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "disk").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "s3").iterdir()) and names
    for kind in ("rounds", "prompts"):
        pd.testing.assert_frame_equal(read_logs(tmp_path / "s3", kind=kind).frame,
                                      read_logs(tmp_path / "disk", kind=kind).frame)


def test_foreign_log_errors_in_a_store_name_the_uri(store, answers):
    store["s3"].put_object(Bucket="bucket", Key="foreign/answers.jsonl", Body=b'{"question_id": 1}\n')
    with pytest.raises(LogError) as info:
        read_logs("s3://bucket/foreign/")
    assert str(info.value).startswith("s3://bucket/foreign/answers.jsonl: not a log format glance-law can import")
    assert "\n" not in str(info.value)
    from glance_law.data.importers import import_logs
    with pytest.raises(LogError, match=r"^s3://bucket/answers/\*\.prom: the pattern matches no files"):
        import_logs("s3://bucket/answers/*.prom")
    with pytest.raises(LogError, match=r"^s3://bucket/nothing/: no such file, folder or prefix"):
        import_logs("s3://bucket/nothing/")


def test_a_store_prefix_has_one_writer(store, answers, capsys):
    """ingest into a prefix takes its lock object (created with If-None-Match: *): a lock of a
    live writer is refused in one line naming it; one of a dead process of this host is taken
    over; a finished write leaves neither the lock nor the INCOMPLETE marker."""
    import socket

    from glance_law.cli.ingest import main as ingest_main
    s3, lock = store["s3"], "s3://bucket/one-writer/.glance-write.lock"
    assert uri.create_exclusive(lock, b"{}") is True          # the store decides between two creators
    assert uri.create_exclusive(lock, b"{}") is False
    s3.put_object(Bucket="bucket", Key="one-writer/.glance-write.lock",
                  Body=json.dumps({"host": "elsewhere", "pid": 7, "started": "2026-01-01T00:00:00Z"}).encode())
    argv = ["spec-bench", str(answers / "*.jsonl.gz"), "--skip-bad", "--out", "s3://bucket/one-writer/"]
    capsys.readouterr()
    assert ingest_main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "pid 7 on elsewhere" in err[0] and lock in err[0], err
    assert _keys(s3, "one-writer/") == ["one-writer/.glance-write.lock"]      # nothing written
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    s3.put_object(Bucket="bucket", Key="one-writer/.glance-write.lock",
                  Body=json.dumps({"host": socket.gethostname(), "pid": dead.pid}).encode())
    assert ingest_main(argv) == 0
    keys = [k for k in _keys(s3, "one-writer/") if not k.endswith("/")]
    assert keys and all(k.endswith(".parquet") for k in keys), keys


def test_a_writer_whose_store_lock_was_taken_does_not_finish(store):
    """A second writer on a held prefix is refused (and the first, failing with it, releases its
    lock); a writer whose lock another took over (removed by hand, or a store without conditional
    create) refuses to mark the prefix complete, and leaves the other's lock alone."""
    from glance_law.data import outputs as O
    with pytest.raises(O.OutputError, match="another command .* is writing into this prefix"):
        with O.folder_session("s3://bucket/race/", "first"):
            with O.folder_session("s3://bucket/race/", "second"):
                pass
    assert [k for k in _keys(store["s3"], "race/") if not k.endswith("/")] == []   # pyarrow keeps a folder marker
    with pytest.raises(O.OutputError, match="took this prefix's lock.*INCOMPLETE"):
        with O.folder_session("s3://bucket/race/", "first") as sess:
            sess.mark()
            store["s3"].put_object(Bucket="bucket", Key="race/.glance-write.lock", Body=b'{"token": "theirs"}')
    assert [k for k in _keys(store["s3"], "race/") if not k.endswith("/")] == ["race/.glance-write.lock",
                                                                               "race/INCOMPLETE"]
