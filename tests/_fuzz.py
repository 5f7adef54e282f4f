"""The fuzz suite's harness: run one command in a child process with its memory and time capped.

A case expects either exit 0 (and the caller checks the result) or exit 2 with one line on stderr.
The cap (``resource.setrlimit(RLIMIT_AS)``) makes a memory blow-up fail the case (the child dies
with MemoryError or a signal), not the machine; the timeout makes a hang fail it.

    res = run_cli("glance_law.fit", [str(path)], mem_mb=1024)
    res.expect_refusal("column")          # exit 2, one line, naming the column
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# torch alone maps ~1 GB of address space at import; commands that load it get a wider cap.
DEFAULT_MEM_MB = 1024


@dataclass(frozen=True)
class CliResult:
    args: tuple
    returncode: int
    stdout: str
    stderr: str

    def _context(self) -> str:
        return f"{' '.join(self.args)}\nrc={self.returncode}\nstdout:\n{self.stdout[-2000:]}\nstderr:\n{self.stderr[-2000:]}"

    def expect_ok(self) -> CliResult:
        assert self.returncode == 0, self._context()
        return self

    def expect_refusal(self, *words: str) -> str:
        """Exit 2, no traceback, one line on stderr that contains every word (case-insensitive)."""
        assert self.returncode == 2, self._context()
        assert "Traceback" not in self.stderr, self._context()
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, self._context()
        for w in words:
            assert w.lower() in lines[0].lower(), f"{w!r} not in the refusal\n{self._context()}"
        return lines[0]

    def expect_handled(self) -> CliResult:
        """Either exit 0 or a one-line exit 2: never a traceback, a signal or a memory error."""
        if self.returncode == 0:
            return self
        self.expect_refusal()
        return self


def _limits(mem_mb: int):
    def apply():
        nbytes = int(mem_mb) << 20
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run_cli(module: str, args, *, mem_mb: int = DEFAULT_MEM_MB, timeout: float = 120, cwd=None,
            env: dict | None = None, stdin: str | None = None) -> CliResult:
    """``python -m module *args`` with address space capped at ``mem_mb`` and a wall-clock timeout.

    A timeout is a failure of the case (pytest reports the hang), not a skip."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONWARNINGS": "ignore"}
    full_env.update(env or {})
    argv = [sys.executable, "-m", module, *map(str, args)]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env,
                           input=stdin, preexec_fn=_limits(mem_mb))
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{' '.join(argv)} did not finish within {timeout} s (a hang)") from e
    return CliResult(tuple(argv[2:]), p.returncode, p.stdout, p.stderr)
