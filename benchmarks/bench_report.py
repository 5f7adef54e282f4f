"""How long does the whole theory appendix take? (Issue 8: under a minute from the committed example logs;
issue 26: within a few minutes and 2 GB on 10^6 glance-log rounds with the per-offset vector columns.)

    nice -n 15 python benchmarks/bench_report.py [LOGS] [--repeat 1] [--report-args "..."]
    nice -n 15 python benchmarks/bench_report.py --rounds 1e6 [--keep DIR]     # generated glance-log rounds
    nice -n 15 python benchmarks/bench_report.py DIR --per-section [--sections width,policy --skip-full]

Runs ``python -m glance_law.report LOGS --out TMP`` in a fresh process (imports included, as a user
runs it) and prints the wall time, the child's CPU time (user + sys, the steadier figure on a shared
machine), its peak RSS, and each section's wall time from the report's own progress lines. LOGS
defaults to data/logs (the embedded default's logs) when present, else data/example.

``--rounds N`` generates about N rounds in glance-log's format instead (:func:`glance_law.simulate.
simulate_tree_rounds`, five tasks, L = 15, k = 8, budget 63: every per-offset vector column - ``match``,
``target_logq``, ``target_rank``, ``topk_logq`` (120 floats a round), ``committed`` - plus
``pred_entropy``, ``depth`` and one prompts file per part), written once as parts of about 10^5 rounds
into ``--keep DIR`` (reused when it already holds them) or a temporary folder. Peak RSS is the
largest of the report's processes (``RUSAGE_CHILDREN``: the main process or its tail worker); tree peak
is the largest sum of the RSS of the report and all its descendants at once (``/proc``, sampled every
0.2 s on Linux: the main process and its tail worker together).
``--per-section`` also runs every section alone (``--only NAME``, a fresh process each: reading the
logs included) for its wall time, CPU seconds and peak RSS; ``--sections A,B`` only those, and
``--skip-full`` without the whole report first.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


PART_ROUNDS = 100_000


def generate(folder: Path, rounds: int, seed: int = 0) -> list[Path]:
    """About ``rounds`` simulated tree-mode rounds in glance-log's file layout (parts of ~10^5 rounds,
    each with its prompts file); prompt ids are unique across parts. Returns the round files."""
    import numpy as np
    import pandas as pd

    from glance_law.data.io import write_table
    from glance_law.simulate import simulate_tree_rounds
    folder.mkdir(parents=True, exist_ok=True)
    done = sorted(folder.glob("rounds-*.parquet"))
    n_parts = max(1, round(rounds / PART_ROUNDS))
    if len(done) == n_parts:
        return done
    per_part = rounds / n_parts
    out = []
    for i in range(n_parts):
        f = simulate_tree_rounds(n_prompts=max(1, int(per_part / (5 * 40))), seed=seed + i, run_id=f"bench-{i:03d}")
        f["prompt_id"] = (f"p{i:03d}-" + f["prompt_id"].astype(str)).astype("category")
        rng = np.random.default_rng(seed + 10_000 + i)
        f["pred_entropy"] = np.maximum(0.0, f["root_entropy"].to_numpy() + rng.normal(0, 0.2, len(f))).astype("f4")
        f["depth"] = f["horizon"]
        f["committed"] = [rng.integers(0, 262_144, a + 1).astype(np.int32) for a in f["accepted"].to_numpy()]
        run = {"tool": "glance-log", "drafter": "block", "branch_k": 8, "budget": 63, "vocab_size": 262_144}
        out.append(write_table(f, folder / f"rounds-bench-{i:03d}-00000.parquet", run=run))
        g = f.groupby(["run_id", "task", "prompt_id", "condition", "drafter"], observed=True)
        P = g.agg(rounds=("round", "size"), new_tokens=("accepted", "sum")).reset_index()
        P["new_tokens"] = (P["new_tokens"] + P["rounds"]).astype(np.int32)
        P["rounds"] = P["rounds"].astype(np.int32)
        P["prompt_tokens"] = np.int32(64)
        P["decode_ms"] = g["round_ms"].sum().to_numpy().astype(np.float32)
        P["prefill_ms"] = np.float32(20.0)
        write_table(pd.DataFrame(P), folder / f"prompts-bench-{i:03d}-00000.parquet", kind="prompts", run=run)
        print(f"  generated part {i + 1}/{n_parts}: {len(f)} rounds", file=sys.stderr)
    return out


def _tree_rss_kb(root: int) -> int:
    """The summed RSS (kB) of ``root`` and its descendants now (Linux ``/proc``: each thread's
    ``children`` file, then each process's ``statm``; 0 elsewhere)."""
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    todo, total, seen = [root], 0, set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page_kb
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def _sample_tree(root: int, done: threading.Event, peak: list) -> None:
    while not done.is_set():
        peak[0] = max(peak[0], _tree_rss_kb(root))
        done.wait(0.2)


def run_once(logs: str, extra: list[str]) -> dict:
    """One report in a fresh process; wall, CPU (user + sys) and peak RSS of that process and its
    workers (``wait4``'s rusage: the largest RSS of the process and its reaped descendants)."""
    with tempfile.TemporaryDirectory() as tmp:
        err = Path(tmp) / "stderr"
        t0 = time.perf_counter()
        with open(err, "w") as fh:
            p = subprocess.Popen([sys.executable, "-m", "glance_law.report", logs, "--out", str(Path(tmp) / "app"),
                                  *extra], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=fh,
                                 env={**os.environ, "MPLBACKEND": "Agg"})
            done, peak = threading.Event(), [0]
            sampler = threading.Thread(target=_sample_tree, args=(p.pid, done, peak), daemon=True)
            sampler.start()
            _, status, ru = os.wait4(p.pid, 0)
            done.set()
            sampler.join()
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        text = err.read_text()
        if p.returncode != 0:
            sys.exit(f"the report failed ({p.returncode}):\n{text[-2000:]}")
        sections = re.findall(r": ([\w-]+) \(([^)]*\)?)\): (\w+).*?\[([\d.]+) s\]", text)
        n_files = len(list((Path(tmp) / "app").rglob("*.*")))
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
            "tree_mb": peak[0] / 1024, "sections": sections,
            "files": n_files}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = "data/logs" if (ROOT / "data" / "logs").is_dir() else "data/example"
    ap.add_argument("logs", nargs="?", default=default)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--report-args", default="", help="extra options for the report, quoted")
    ap.add_argument("--rounds", type=float, default=None, metavar="N",
                    help="generate about N glance-log rounds (vector columns included) and report on them")
    ap.add_argument("--keep", default=None, metavar="DIR", help="where --rounds writes (and reuses) its logs")
    ap.add_argument("--per-section", action="store_true", help="also run each section alone (its own process)")
    ap.add_argument("--sections", default=None, metavar="A,B",
                    help="with --per-section: only these sections alone (default: every one); with --skip-full, "
                         "without the whole report first")
    ap.add_argument("--skip-full", action="store_true", help="with --per-section --sections: skip the whole report")
    args = ap.parse_args(argv)
    if args.rounds:
        keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-report-"))
        t0 = time.process_time()
        generate(keep, int(args.rounds))
        args.logs = str(keep)
        print(f"logs: {keep} ({time.process_time() - t0:.0f} s CPU to generate)")
    load = os.getloadavg()[0]
    print(f"python -m glance_law.report {args.logs} --out TMP {args.report_args}  "
          f"(load average {load:.1f} on {os.cpu_count()} CPUs)")
    if args.skip_full and not (args.per_section and args.sections):
        ap.error("--skip-full needs --per-section --sections")
    res = {"sections": [(n, "", "-", "0") for n in (args.sections or "").split(",") if n]}
    for i in range(0 if args.skip_full else args.repeat):
        res = run_once(args.logs, shlex.split(args.report_args))
        print(f"run {i + 1}: wall {res['wall']:.1f} s, CPU {res['cpu']:.1f} s, peak RSS {res['rss_mb']:.0f} MB "
              f"(tree {res['tree_mb']:.0f} MB), "
              f"{res['files']} files")
        for name, _paper, status, secs in res["sections"]:
            print(f"    {name:18s} {status:8s} {float(secs):6.1f} s")
    if args.per_section:
        print("each section alone (--only NAME; reading the logs included):")
        wanted = set(args.sections.split(",")) if args.sections else None
        for name, _paper, status, _secs in res["sections"]:
            if wanted is not None and name not in wanted:
                continue
            one = run_once(args.logs, shlex.split(args.report_args) + ["--only", name])
            print(f"    {name:18s} {status:8s} wall {one['wall']:6.1f} s, CPU {one['cpu']:6.1f} s, "
                  f"peak RSS {one['rss_mb']:5.0f} MB (tree {one['tree_mb']:5.0f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
