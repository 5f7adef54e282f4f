"""The fuzz suite's harness: run one command in a child process with its memory and time capped.

A case expects either exit 0 with its result checked, or exit 2 with one line on stderr. The caps
(``resource.setrlimit``: RLIMIT_AS for memory, RLIMIT_CPU for CPU seconds) make a memory blow-up or
unbounded work fail the case (the child dies with MemoryError or SIGXCPU), not the machine; the
timeout makes a hang fail it. ``CliResult.cpu_s`` is the child's CPU time (user + system).

    res = run_cli("glance_law.fit", [str(path)], mem_mb=1024)
    res.expect_refusal("column")          # exit 2, one line, naming the column
    res.expect_handled(check=lambda r: ...)   # exit 0 only with the result checked, or one line
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
#: CPU seconds a case may use (imports included): past it the child gets SIGXCPU and the case fails.
DEFAULT_CPU_S = 150


@dataclass(frozen=True)
class CliResult:
    args: tuple
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float = 0.0

    def _context(self) -> str:
        return (f"{' '.join(self.args)}\nrc={self.returncode} cpu={self.cpu_s:.1f}s\nstdout:\n{self.stdout[-2000:]}\n"
                f"stderr:\n{self.stderr[-2000:]}")

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

    def expect_handled(self, check=None, *words: str) -> CliResult:
        """Either exit 0 with the right result, or a one-line exit 2 (containing ``words``): never a
        traceback, a signal or a memory error. ``check(result)`` must look at the result of an exit 0
        (raise AssertionError when it is wrong); an exit 0 without a check fails: a wrong result that
        exits 0 is not handled."""
        if self.returncode == 0:
            assert check is not None, f"exit 0 but nothing checked the result\n{self._context()}"
            assert "Traceback" not in self.stderr, self._context()
            check(self)
            return self
        self.expect_refusal(*words)
        return self

    def expect_cpu_below(self, seconds: float) -> CliResult:
        assert self.cpu_s < seconds, f"{self.cpu_s:.1f} CPU s, bound {seconds} s\n{self._context()}"
        return self


def _limits(mem_mb: int, cpu_s: float):
    def apply():
        nbytes = int(mem_mb) << 20
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        cpu = max(1, int(cpu_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    return apply


def run_cli(module: str, args, *, mem_mb: int = DEFAULT_MEM_MB, timeout: float = 120, cwd=None,
            env: dict | None = None, stdin: str | None = None, cpu_s: float = DEFAULT_CPU_S) -> CliResult:
    """``python -m module *args`` with address space capped at ``mem_mb``, CPU time at ``cpu_s`` seconds
    (SIGXCPU past it) and a wall-clock timeout.

    A timeout is a failure of the case (pytest reports the hang), not a skip."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONWARNINGS": "ignore"}
    full_env.update(env or {})
    argv = [sys.executable, "-m", module, *map(str, args)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env,
                           input=stdin, preexec_fn=_limits(mem_mb, cpu_s))
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{' '.join(argv)} did not finish within {timeout} s (a hang)") from e
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return CliResult(tuple(argv[2:]), p.returncode, p.stdout, p.stderr, cpu)
