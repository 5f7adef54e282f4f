"""Write and read 10^6 and 10^7 simulated rounds: time and peak memory of the log I/O.

    nice -n 15 .venv/bin/python benchmarks/bench_io.py                 # 10^6 and 10^7
    nice -n 15 .venv/bin/python benchmarks/bench_io.py --sizes 1e6     # quick

For each size the script simulates rounds (``simulate_arrays(..., vectors=False)``),
writes them with :func:`glance_law.io.write_table` as one file and, like the
logger does, as part files of ``--part-rows`` rows, then measures - each step in
a fresh child process, so every peak RSS belongs to that step alone:

* ``imports``    : a child's baseline (python + numpy/pandas/pyarrow/glance_law)
* ``arrow 2col`` : ``pyarrow.parquet.read_table(columns=[root_entropy, accepted])``
                   - the floor: merely reading the two columns the law needs
* ``arrow fit``  : ``pyarrow.parquet.read_table`` of the columns ``read fit`` reads (the
                   fit's, plus the required and key columns), no validation, no pandas
* ``read 2col``  : ``read_logs(columns=[root_entropy, accepted])`` (the reader always
                   adds the required and key columns, validates them and checks keys)
* ``read fit``   : ``read_logs`` of the fit's columns (task, prompt_id, root_entropy,
                   accepted, horizon), validated, as a pandas frame
* ``read all``   : ``read_logs`` of every column the simulator wrote

and prints one table (seconds, peak RSS MB of the whole child process, the size of
the returned pandas frame, and time relative to ``arrow 2col``). Each step runs ``--repeat`` times in fresh processes
(fastest time, largest peak); ratios are measured side by side in one run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIT_COLUMNS = ["task", "prompt_id", "root_entropy", "accepted", "horizon"]
# what read_logs(columns=FIT_COLUMNS) actually reads: + the required and key columns
READ_FOR_FIT = ["run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon",
                "condition", "drafter"]

CHILD = r"""
import json, sys, time
import numpy as np, pandas as pd, pyarrow as pa, pyarrow.parquet as pq
import glance_law.io as gio
step, path, cols = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t0 = time.perf_counter()
if step == "imports":
    n = 0
elif step == "arrow":
    t = pq.read_table(path, columns=cols)
    n = t.num_rows
else:
    ls = gio.read_logs(path, columns=cols)
    n = len(ls.frame)
    assert not ls.skipped
dt = time.perf_counter() - t0
frame_mb = ls.frame.memory_usage(deep=True).sum() / 2 ** 20 if step == "read" else 0.0
# VmHWM: this process's peak resident set (ru_maxrss would include the parent's
# pre-exec memory on Linux)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"seconds": dt, "rows": n, "peak_mb": int(hwm) / 1024, "frame_mb": frame_mb}))
"""


def child(step: str, path: str, cols, repeat: int = 1) -> dict:
    """Run one step ``repeat`` times, each in a fresh process: the fastest time, the largest peak."""
    best = None
    for _ in range(max(1, repeat)):
        out = subprocess.run([sys.executable, "-c", CHILD, step, path, json.dumps(cols)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"child step {step} failed:\n{out.stderr}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None:
            best = r
        else:
            best = {"seconds": min(best["seconds"], r["seconds"]), "rows": r["rows"],
                    "peak_mb": max(best["peak_mb"], r["peak_mb"]), "frame_mb": r["frame_mb"]}
    return best


def simulate(n_rounds: int, seed: int = 0) -> dict:
    from glance_law.simulate import simulate_arrays
    # five default tasks x n_prompts x ~40 rounds per prompt
    n_prompts = max(1, int(round(n_rounds / (5 * 40))))
    arr = simulate_arrays(n_prompts=n_prompts, rounds_per_prompt=(20, 60), vectors=False, seed=seed)
    return {k: v for k, v in arr.items() if not k.startswith("_")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    ap.add_argument("--part-rows", type=int, default=4096,
                    help="rows per part file for the multi-file variant (LogWriter's default flush size)")
    ap.add_argument("--no-parts", action="store_true", help="skip the multi-file variant")
    ap.add_argument("--repeat", type=int, default=3,
                    help="fresh-process repetitions per step (the fastest time is reported)")
    ap.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    import glance_law.io as gio

    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for size in args.sizes:
            t0 = time.perf_counter()
            data = simulate(int(size))
            n = int(data["accepted"].shape[0])
            t_sim = time.perf_counter() - t0
            single = Path(tmp) / f"n{n}" / "rounds-single.parquet"
            t0 = time.perf_counter()
            gio.write_table(data, single, run={"bench": "bench_io"})
            t_write = time.perf_counter() - t0
            variants = [("1 file", str(single))]
            t_parts = None
            if not args.no_parts:
                pdir = Path(tmp) / f"n{n}-parts"
                t0 = time.perf_counter()
                # the layout LogWriter produces: one atomic part per flush of part_rows rows
                for lo in range(0, n, args.part_rows):
                    part = {k: v[lo:lo + args.part_rows] for k, v in data.items()}
                    gio.write_table(part, pdir / f"rounds-bench-{lo // args.part_rows:06d}.parquet",
                                    run={"bench": "bench_io"})
                t_parts = time.perf_counter() - t0
                variants.append((f"{-(-n // args.part_rows)} parts", str(pdir)))
            del data
            size_mb = single.stat().st_size / 2 ** 20
            print(f"# n={n:,}: simulate {t_sim:.1f} s, write_table {t_write:.2f} s ({size_mb:.0f} MB)"
                  + (f", {variants[-1][0]} written in {t_parts:.1f} s" if t_parts else ""), flush=True)
            base = child("imports", str(single), [])
            rows.append((n, "-", "imports", base))
            for label, path in variants:
                floor = child("arrow", path, ["root_entropy", "accepted"], args.repeat)
                rows.append((n, label, "arrow 2col", floor))
                same = child("arrow", path, READ_FOR_FIT, args.repeat)
                same["ratio"] = same["seconds"] / floor["seconds"]
                rows.append((n, label, "arrow fit", same))
                for step, cols in (("read 2col", ["root_entropy", "accepted"]),
                                   ("read fit", FIT_COLUMNS), ("read all", None)):
                    r = child("read", path, cols, args.repeat)
                    r["ratio"] = r["seconds"] / floor["seconds"]
                    rows.append((n, label, step, r))
                    print(f"  {label:>11} {step:<10} {r['seconds']:7.3f} s  peak {r['peak_mb']:6.0f} MB"
                          f"  frame {r['frame_mb']:6.0f} MB  ({r['ratio']:.1f}x arrow 2col)", flush=True)
    print()
    print(f"{'rounds':>11} {'files':>11} {'step':<10} {'seconds':>8} {'peak MB':>8} {'frame MB':>8} {'x floor':>8}")
    for n, label, step, r in rows:
        ratio = f"{r['ratio']:.1f}" if "ratio" in r else "1.0" if step == "arrow 2col" else ""
        frame = f"{r['frame_mb']:.0f}" if r.get("frame_mb") else ""
        print(f"{n:>11,} {label:>11} {step:<10} {r['seconds']:8.3f} {r['peak_mb']:8.0f} {frame:>8} {ratio:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
