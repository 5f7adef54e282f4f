"""A Spark standalone cluster on 127.0.0.1 for tests and benchmarks: a master and workers started
with pyspark's own ``bin/spark-class`` (the Master and Worker daemons in the foreground, each in its
own process group), and stopped by those process ids (the group holds the executors a worker
launched), always.

    with standalone(workers=2, cores=1, memory="1g") as cluster:
        env = cluster.client_env()     # SPARK_CONF_DIR, PYSPARK_PYTHON, SPARK_LOCAL_IP for a driver
        subprocess.run([..., "--spark-master", cluster.url], env=env)
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_class() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@dataclass
class Cluster:
    url: str
    folder: Path
    procs: list = field(default_factory=list)
    conf_dir: Path | None = None

    def client_env(self, **extra) -> dict:
        """The environment of a driver on this cluster: its spark-defaults.conf (small executors),
        the executors' Python (this interpreter), addresses on 127.0.0.1."""
        env = dict(os.environ, SPARK_CONF_DIR=str(self.conf_dir), PYSPARK_PYTHON=sys.executable,
                   SPARK_LOCAL_IP="127.0.0.1")
        env.pop("SPARK_MASTER", None)
        env.update(extra)
        return env

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def _wait_for(path: Path, text: str, proc, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[1:3]} exited ({proc.returncode}): {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"no '{text}' in {path} after {timeout:.0f} s: {path.read_text(errors='replace')[-2000:]}")


def _stop(proc, grace: float = 20.0) -> None:
    """SIGTERM the process group this process leads (the daemon and what it launched), then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):   # executors of a worker that did not take them down
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


@contextlib.contextmanager
def standalone(folder: Path, workers: int = 2, cores: int = 1, memory: str = "1g", executor_memory: str = "512m",
               driver_memory: str = "512m", timeout: float = 180.0):
    """A master and ``workers`` workers (``cores`` cores and ``memory`` each) on 127.0.0.1; yields a
    :class:`Cluster`. Daemon logs go to ``folder``; every process started is stopped on exit."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "spark-defaults.conf").write_text(
        f"spark.executor.memory {executor_memory}\nspark.driver.memory {driver_memory}\n"
        f"spark.executor.cores {cores}\nspark.driver.host 127.0.0.1\nspark.driver.bindAddress 127.0.0.1\n"
        "spark.ui.enabled false\nspark.ui.showConsoleProgress false\n")
    (conf / "log4j2.properties").write_text(
        "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %d %p %c{1}: %m%n\n"
        "logger.deploy.name = org.apache.spark.deploy\nlogger.deploy.level = info\n")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_CONF_DIR=str(conf), SPARK_DAEMON_MEMORY="256m",
               SPARK_WORKER_DIR=str(folder / "work"), SPARK_LOG_DIR=str(folder), SPARK_NO_DAEMONIZE="1",
               PYSPARK_PYTHON=sys.executable)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    cluster = Cluster(url, folder, conf_dir=conf)
    try:
        log = folder / "master.log"
        with open(log, "wb") as fh:
            cluster.procs.append(subprocess.Popen(
                [str(spark_class()), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                 str(port), "--webui-port", str(free_port())], stdout=fh, stderr=subprocess.STDOUT, env=env,
                start_new_session=True))
        _wait_for(log, "I have been elected leader", cluster.procs[0], timeout)
        for i in range(workers):
            wlog = folder / f"worker-{i}.log"
            with open(wlog, "wb") as fh:
                cluster.procs.append(subprocess.Popen(
                    [str(spark_class()), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                     "--work-dir", str(folder / f"work-{i}"), url], stdout=fh, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True))
        for i in range(workers):
            _wait_for(folder / f"worker-{i}.log", "Successfully registered with master", cluster.procs[1 + i], timeout)
        yield cluster
    finally:
        for proc in reversed(cluster.procs):
            _stop(proc)
