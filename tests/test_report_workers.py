"""The report's worker process (the tail fit, --jobs 2) ends with the report: killed (SIGKILL, which
no handler sees), terminated (SIGTERM) or interrupted (SIGINT). Linux only (reads /proc)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "data" / "logs"

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists() or not LOGS.is_dir(),
                                reason="needs Linux /proc and the committed logs")


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _default_sigint():
    """In the child: SIGINT back to its default. A test run started in the background of a non-interactive
    shell (`cmd &`) ignores SIGINT, an ignored signal survives exec, and Python then never installs its
    KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp_path):
    """The report with a long tail bootstrap in its worker; returns (process, worker pids)."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "glance_law.report", str(LOGS), "--out", str(tmp_path / "app"),
                          "--jobs", "2", "--only", "tail", "--tail-bootstrap", "1000000", "--quiet"],
                         cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=_default_sigint)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        kids = [k for k in _children(p.pid) if "spawn_main" in _cmdline(k)]
        if kids:
            time.sleep(1.0)             # past the worker's initializer
            return p, kids
        if p.poll() is not None:
            pytest.fail(f"the report ended before its worker started: {p.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    p.kill()
    pytest.fail("no worker process within 120 s")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _gone_within(pids, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [k for k in pids if _alive(k)]
        if not left:
            return []
        time.sleep(0.1)
    return [k for k in pids if _alive(k)]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_worker_ends_with_the_report(tmp_path, sig):
    p, kids = _start(tmp_path)
    try:
        assert all(_alive(k) for k in kids)
        p.send_signal(sig)
        p.wait(timeout=30)
        left = _gone_within(kids, 5.0)
        assert not left, f"worker(s) {left} still running 5 s after the report got signal {sig!r}"
    finally:
        for k in kids:
            if _alive(k):
                os.kill(k, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
        p.stderr.close()


def test_an_interrupt_while_the_worker_starts_still_ends_it(tmp_path):
    """Ctrl-C that lands while the tail job is being handed to the worker (just after the submit,
    before the sections run) ends the report and its worker at once; it used to leave the pool to
    the interpreter's exit, which waits for the pending job (here a million bootstrap draws)."""
    code = (
        "import sys\n"
        "import glance_law.appendix as A\n"
        "from glance_law.cli import report\n"
        "orig = A.Inputs.start_tail\n"
        "def start_tail(self, executor):\n"
        "    orig(self, executor)\n"
        "    raise KeyboardInterrupt\n"
        "A.Inputs.start_tail = start_tail\n"
        f"sys.exit(report.main([{str(LOGS)!r}, '--out', {str(tmp_path / 'app')!r}, '--jobs', '2', '--only', 'tail',"
        " '--tail-bootstrap', '1000000', '--quiet']))\n")
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130, err.decode()[-2000:]
        assert b"interrupted" in err
    finally:
        if p.poll() is None:
            for k in _children(p.pid):
                os.kill(k, signal.SIGKILL)
            p.kill()
            p.communicate()
