"""glance-log's torch thread count for the embedded default, 1 vs 2 (or --counts), side by side.

    flock /tmp/glance-cpu.lock .venv/bin/python benchmarks/bench_threads.py            # docvqa, 20 prompts
    flock /tmp/glance-cpu.lock .venv/bin/python benchmarks/bench_threads.py --load 1   # one core kept busy
    .venv/bin/python benchmarks/bench_threads.py --counts 1 2 4 --reps 5

What ``glance-log --task docvqa`` does (the embedded target + block head, the embedded suite,
greedy, fp32, CPU), timed as the whole run (model loading, prompt encoding, decoding, logging,
Parquet). Thread counts alternate within each repetition and their order
flips every repetition (ABBA...), so drift of a shared machine hits every count alike.
Reported per count: median and min wall seconds over repetitions, tokens/s, and the ratio of
medians to the first count with a bootstrap interval over repetition pairs. The default of
``glance-log --threads`` for the embedded default is the count this measures fastest
(docs/logger.md quotes the figures).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="docvqa")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--drafter", default="block")
    ap.add_argument("--load", type=int, default=0,
                    help="busy processes spinning alongside (a shared machine's other jobs), e.g. 1")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        return _measure(args)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def _measure(args) -> int:
    from glance_log.run import RunConfig, run
    from glance_log.tasks import load_items

    items = load_items(args.task, None, n=args.n, seed=0)
    tmp = Path(tempfile.mkdtemp(prefix="bench-threads-"))
    times = {c: [] for c in args.counts}
    tokens = {}
    try:
        # warm-up: load the models once per count (file cache, lazy init), not timed
        for c in args.counts:
            torch.set_num_threads(c)
            run(RunConfig(task=args.task, drafter=args.drafter, items=items[:2], out=str(tmp / "warm"),
                          device="cpu", progress=False))
        for r in range(args.reps):
            order = args.counts if r % 2 == 0 else list(reversed(args.counts))
            for c in order:
                torch.set_num_threads(c)
                out = tmp / f"r{r}-t{c}"
                t0 = time.perf_counter()
                s = run(RunConfig(task=args.task, drafter=args.drafter, items=items, out=str(out), device="cpu",
                                  progress=False))
                times[c].append(time.perf_counter() - t0)
                tokens[c] = sum(a["tokens"] for a in s["arms"])
                shutil.rmtree(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = args.counts[0]
    rng = np.random.default_rng(0)
    print(f"glance-log --task {args.task} --n {args.n} --drafter {args.drafter} (embedded default, CPU), "
          f"{args.reps} repetitions, {args.load} busy processes alongside, wall seconds per run incl. model load")
    res = {}
    for c in args.counts:
        t = np.array(times[c])
        ratio = np.array(times[c]) / np.array(times[base])
        boot = [np.median(ratio[rng.integers(0, len(ratio), len(ratio))]) for _ in range(2000)]
        lo, hi = np.percentile(boot, [2.5, 97.5])
        res[c] = {"median_s": float(np.median(t)), "min_s": float(t.min()), "tokens": tokens[c],
                  "ratio_to_first": float(np.median(ratio)), "ratio_lo": float(lo), "ratio_hi": float(hi)}
        print(f"  threads {c}: median {np.median(t):6.2f} s  min {t.min():6.2f} s  "
              f"{tokens[c] / np.median(t):7.1f} tok/s  time ratio to {base} thread(s) "
              f"{np.median(ratio):.2f} [{lo:.2f}, {hi:.2f}]")
    best = min(args.counts, key=lambda c: res[c]["median_s"])
    print(f"fastest: {best} thread(s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": res, "fastest": best, "times": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
