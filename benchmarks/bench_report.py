"""How long does the whole theory appendix take? (Issue 8: under a minute from the committed example logs.)

    nice -n 15 python benchmarks/bench_report.py [LOGS] [--repeat 1] [--report-args "..."]

Runs ``python -m glance_law.report LOGS --out TMP`` in a fresh process (imports included, as a user
runs it) and prints the wall time, the child's CPU time (user + sys, the steadier figure on a shared
machine), its peak RSS, and each section's wall time from the report's own progress lines. LOGS
defaults to data/logs (the embedded default's logs) when present, else data/example.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(logs: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "glance_law.report", logs, "--out", str(Path(tmp) / "app"), *extra],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"})
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            sys.exit(f"the report failed ({r.returncode}):\n{r.stderr[-2000:]}")
        sections = re.findall(r": ([\w-]+) \(([^)]*\)?)\): (\w+).*?\[([\d.]+) s\]", r.stderr)
        n_files = len(list((Path(tmp) / "app").rglob("*.*")))
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "rss_mb": after.ru_maxrss / 1024, "sections": sections, "files": n_files}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = "data/logs" if (ROOT / "data" / "logs").is_dir() else "data/example"
    ap.add_argument("logs", nargs="?", default=default)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--report-args", default="", help="extra options for the report, quoted")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"python -m glance_law.report {args.logs} --out TMP {args.report_args}  "
          f"(load average {load:.1f} on {os.cpu_count()} CPUs)")
    for i in range(args.repeat):
        res = run_once(args.logs, shlex.split(args.report_args))
        print(f"run {i + 1}: wall {res['wall']:.1f} s, CPU {res['cpu']:.1f} s, peak RSS {res['rss_mb']:.0f} MB, "
              f"{res['files']} files")
        for name, _paper, status, secs in res["sections"]:
            print(f"    {name:18s} {status:8s} {float(secs):6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
