"""The reduced path's pooled b1 interval against the exact path's (issue 15), in one run.

    python benchmarks/bench_pooled_interval.py                      # 10^6 and 10^7 rounds, 5 tasks
    python benchmarks/bench_pooled_interval.py --sizes 1e5,1e6 --replicates 40 --replicate-size 1e5

For each size: simulated five-task logs (the default tasks, ~40 rounds per prompt) are fitted
exactly (``fit_law``, CR3 over prompts) and from their reduction (``reduce_frame`` +
``fit_reduced``, CR3 over prompt buckets, stratified by task in the pooled row); the widths of
the pooled b1 intervals and their ratio are printed. The replicate check draws independent logs
of one size and reports the spread (sd) of the pooled b1 estimates, the mean half-widths / t
of both paths (their estimates of that sd) and how often each 95% interval covers the mean of
the estimates (the pooled estimand of the simulated tasks). Nothing is asserted.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from glance_law.law import fit_law
from glance_law.scale.law_reduced import fit_reduced
from glance_law.scale.reduce import reduce_frame
from glance_law.simulate import DEFAULT_TASKS, simulate_rounds
from glance_law.stats.cluster import t_crit


def pooled(n: int, seed: int):
    frame = simulate_rounds(DEFAULT_TASKS, n_prompts=max(2, n // (40 * len(DEFAULT_TASKS))), vectors=False,
                            seed=seed)
    ex = fit_law(frame).row("pooled")
    red = fit_reduced(reduce_frame(frame)).row("pooled")
    return len(frame), ex, red


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7")
    ap.add_argument("--replicates", type=int, default=0)
    ap.add_argument("--replicate-size", default="1e5")
    args = ap.parse_args(argv)
    print("rounds        exact b1 [interval]            reduced b1 [interval]          width reduced/exact")
    for s in args.sizes.split(","):
        n, ex, red = pooled(int(float(s)), seed=11)
        we, wr = ex["b1_hi"] - ex["b1_lo"], red["b1_hi"] - red["b1_lo"]
        print(f"{n:>11,}  {ex['b1']:.4f} [{ex['b1_lo']:.4f}, {ex['b1_hi']:.4f}]   "
              f"{red['b1']:.4f} [{red['b1_lo']:.4f}, {red['b1_hi']:.4f}]   {wr / we:.3f} (widths {we:.4f}, {wr:.4f})")
    if args.replicates:
        m = int(float(args.replicate_size))
        rows = [pooled(m, seed=100 + k) for k in range(args.replicates)]
        b = np.array([r[1]["b1"] for r in rows])
        truth = b.mean()
        print(f"\n{args.replicates} replicates of ~{rows[0][0]:,} rounds: sd of pooled b1 = {b.std(ddof=1):.5f}")
        for name, i in (("exact", 1), ("reduced", 2)):
            half = np.array([(r[i]["b1_hi"] - r[i]["b1_lo"]) / 2 for r in rows])
            G = np.array([r[i]["prompts"] if name == "exact" else r[i]["buckets"] for r in rows])
            se = half / np.array([t_crit(int(g)) for g in G])
            cover = np.mean([(r[i]["b1_lo"] <= truth <= r[i]["b1_hi"]) for r in rows])
            print(f"  {name:8s} mean se {se.mean():.5f} (sd ratio {se.mean() / b.std(ddof=1):.2f}), "
                  f"coverage of the replicate mean {cover:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
