"""SIGKILL a process that is writing round logs with LogWriter, at several moments.

Afterwards: no half-written ``*.parquet`` exists, every file reads back (and validates),
earlier parts are intact, and every row the child reported flushed is present - the
child prints ``FLUSHED <rows_written>`` after each flush returns. Moments:

* between flushes (after three parts),
* during a flush, half-way through writing the part's bytes,
* during a flush, after the bytes are written and fsync'ed but before the rename,
* during a flush, after the rename but before the folder is fsync'ed,
* at arbitrary times while the child writes as fast as it can (several delays).

The children run concurrently, so the whole test takes a few seconds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from glance_law import io as gio

FLUSH_ROWS = 25
PAUSE_AT_FLUSH = 3  # the deterministic mid-flush scenarios pause inside the 4th flush

CHILD = r"""
import io as _io, os, sys, time
import glance_law.io as gio

out, mode = sys.argv[1], sys.argv[2]
FLUSH_ROWS, PAUSE_AT = int(sys.argv[3]), int(sys.argv[4])
calls = {"n": 0}

def pause():
    print("PAUSE", flush=True)
    time.sleep(60)

if mode == "half":
    real = gio.pq.write_table
    def write_table(table, where, **kw):
        if calls["n"] == PAUSE_AT:
            buf = _io.BytesIO()
            real(table, buf, **kw)
            data = buf.getvalue()
            where.write(data[: len(data) // 2])
            where.flush()
            os.fsync(where.fileno())
            pause()
        calls["n"] += 1
        return real(table, where, **kw)
    gio.pq.write_table = write_table
elif mode == "before_rename":
    real_replace = gio.os.replace
    def replace(a, b):
        if calls["n"] == PAUSE_AT:
            pause()
        calls["n"] += 1
        return real_replace(a, b)
    gio.os.replace = replace
elif mode == "before_dirsync":
    import glance_law.data.outputs as gout       # the one output path (write_table writes through it)
    real_dirsync = gout.fsync_dir
    def fsync_dir(path):
        if calls["n"] == PAUSE_AT:
            pause()
        calls["n"] += 1
        return real_dirsync(path)
    gout.fsync_dir = fsync_dir

def row(i):
    L = 3
    return {"run_id": "crash", "task": "t", "prompt_id": f"p{i // 40}", "round": i % 40,
            "root_entropy": i / 1000.0, "accepted": i % (L + 1), "horizon": L,
            "match": [1 if j < i % (L + 1) else 0 for j in range(L)],
            "target_logq": [-0.5 * j for j in range(L)], "round_ms": float(i)}

w = gio.LogWriter(out, run={"test": "crash"}, stem="crash", flush_rows=FLUSH_ROWS, flush_seconds=1e9)
print("READY", flush=True)
i = 0
while True:
    if w.append(row(i)) is not None:
        print(f"FLUSHED {w.rows_written}", flush=True)
    i += 1
    if mode == "between" and len(w.paths) == 3 and len(w) == 10:
        print("PARKED", flush=True)  # between flushes, with 10 rows buffered
        time.sleep(60)
"""

SCENARIOS = ["between", "half", "before_rename", "before_dirsync", "free:0.05", "free:0.3"]


def _expected_row(i: int) -> dict:
    L = 3
    return {"prompt_id": f"p{i // 40}", "round": i % 40, "root_entropy": np.float32(i / 1000.0),
            "accepted": i % (L + 1), "round_ms": float(i)}


class Child:
    def __init__(self, out: Path, scenario: str):
        self.out, self.scenario = out, scenario
        mode = scenario.split(":")[0]
        self.delay = float(scenario.split(":")[1]) if ":" in scenario else None
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", CHILD, str(out), mode, str(FLUSH_ROWS), str(PAUSE_AT_FLUSH)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._event = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            self._event.set()

    def wait_for(self, pred, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not pred(self.lines):
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"{self.scenario}: child exited early: {self.proc.stderr.read()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.scenario}: timed out; lines: {self.lines[-5:]}")
            self._event.wait(0.05)
            self._event.clear()

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)  # drain: every line printed before the kill
        assert self.proc.returncode == -signal.SIGKILL

    @property
    def reported(self) -> int:
        flushed = [int(x.split()[1]) for x in self.lines if x.startswith("FLUSHED")]
        return max(flushed, default=0)


def _drive(child: Child) -> None:
    if child.scenario == "between":
        child.wait_for(lambda ls: "PARKED" in ls)
    elif child.delay is None:
        child.wait_for(lambda ls: "PAUSE" in ls)
    else:
        child.wait_for(lambda ls: any(x.startswith("FLUSHED") for x in ls))
        time.sleep(child.delay)
    child.kill()


def _check(child: Child) -> None:
    out = child.out
    visible = sorted(out.glob("*.parquet"))
    hidden = sorted(p for p in out.iterdir() if p.name.startswith("."))
    assert all(p.name.startswith("rounds-crash-") for p in visible), visible
    assert all(p.name.endswith(".tmp") for p in hidden), hidden
    if child.scenario in ("half", "before_rename"):
        # killed inside a flush: the unfinished part exists only as a hidden temporary
        assert len(hidden) == 1 and hidden[0].stat().st_size > 0
        assert len(visible) == PAUSE_AT_FLUSH
    if child.scenario == "before_dirsync":
        assert len(visible) == PAUSE_AT_FLUSH + 1 and not hidden  # renamed, not yet reported
    # every visible part is complete and intact, on its own
    for p in visible:
        t = pq.read_table(p)
        assert t.num_rows == FLUSH_ROWS, p
        assert t.schema.metadata[b"glance.kind"] == b"rounds"
    ls = gio.read_logs(out)  # validates every file; raises on any problem
    assert not ls.skipped and ls.n_files == len(visible)
    f = ls.frame
    n = len(f)
    assert n == FLUSH_ROWS * len(visible)
    # every reported row is present; nothing beyond what was appended; rows exact
    assert n >= child.reported > 0
    assert n <= child.reported + FLUSH_ROWS  # at most the flush in progress is unreported
    idx = (f["prompt_id"].astype(str).str[1:].astype(int) * 40 + f["round"]).to_numpy()
    assert sorted(idx.tolist()) == list(range(n))  # a prefix of the appended rows, no gaps
    order = np.argsort(idx)
    want = [_expected_row(i) for i in range(n)]
    np.testing.assert_array_equal(f["root_entropy"].to_numpy()[order], [w["root_entropy"] for w in want])
    np.testing.assert_array_equal(f["accepted"].to_numpy()[order], [w["accepted"] for w in want])
    np.testing.assert_array_equal(f["round_ms"].to_numpy()[order], [w["round_ms"] for w in want])
    # a new writer (a resumed run) can add parts beside the debris
    with gio.LogWriter(out, run={"test": "resume"}, stem="crash", flush_rows=FLUSH_ROWS) as w:
        w.append({"run_id": "resume", "task": "t", "prompt_id": "p0", "round": 0, "root_entropy": 0.5,
                  "accepted": 1, "horizon": 3})
    assert len(gio.read_logs(out).frame) == n + 1


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_sigkill_at_any_moment_keeps_every_flushed_row(tmp_path):
    children = [Child(tmp_path / s.replace(":", "_"), s) for s in SCENARIOS]
    try:
        errors: list = []

        def run(c):
            try:
                _drive(c)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(c,)) for c in children]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        if errors:
            raise errors[0]
        for c in children:
            _check(c)
        # the deterministic scenarios really stopped where intended
        by = {c.scenario: c for c in children}
        assert by["between"].reported == 3 * FLUSH_ROWS
        assert by["half"].reported == PAUSE_AT_FLUSH * FLUSH_ROWS
        assert by["before_rename"].reported == PAUSE_AT_FLUSH * FLUSH_ROWS
        assert by["before_dirsync"].reported == PAUSE_AT_FLUSH * FLUSH_ROWS
    finally:
        for c in children:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
