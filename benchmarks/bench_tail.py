"""Calibration, power, accuracy and speed of the grounded-tail tests (not part of the test suite).

    nice -n 15 .venv/bin/python benchmarks/bench_tail.py              # everything (tens of minutes)
    nice -n 15 .venv/bin/python benchmarks/bench_tail.py --quick      # a smaller run

Sections (each prints one Markdown table):

1. ``null``: the LRT's null distribution on geometric data of the paper's floor size
   (n = 122 rounds, L = 15, p = sigmoid(1.226)): its 95th percentile against the
   chi-square(2) and chi-square(4) quantiles, and the size of the paper's
   chi-square(4) test at alpha = 0.05.
2. ``size``: the rejection rate at alpha = 0.05 of the *full* procedure (the
   bootstrap LRT with B replicates) on the floor of simulated pure-geometric logs
   (a task with b1 = 0), with independent rounds and with the simulator's default
   prompt correlation (copula, 0.3), each over R replicates (Wilson 95% interval);
   ``warp``: the same size by warp-speed Monte Carlo over many more replicates;
   ``requests``: the same on per-request histograms (the whole log, 8 to 100 requests of 20-200
   rounds, geometric null) with the design effect dividing the observed LRT and every draw.
3. ``power``: the same on logs with a two-state floor.
4. ``accuracy``: the MLE's log-likelihood against an exhaustive search (dense grid
   over the eigenvalues, every local maximum refined) on null and two-state data.
5. ``speed``: milliseconds per two-state fit (batched) and seconds per fit_tail task.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import special, stats

from glance_law import tail
from glance_law.simulate import TaskSpec, TwoStateTail, simulate_rounds
from glance_law.tail import mle as tail_mle
from glance_law.tail import model as tail_model


def wilson(k: int, n: int, z: float = 1.96):
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, c - h, c + h


def null_section(R: int, seed: int):
    rng = np.random.default_rng(seed)
    n, L, p = 122, 15, special.expit(1.226)
    W = np.stack([tail_mle.counts(np.minimum(rng.geometric(1 - p, size=n) - 1, L), np.full(n, L), L)
                  for _ in range(R)])
    l1, l2, s1, ll2, _, ll1 = tail_model.fit_W(W)
    lrt = np.maximum(0.0, 2 * (ll2 - ll1))
    q95 = np.quantile(lrt, 0.95)
    k4 = int(np.sum(stats.chi2.sf(lrt, 4) <= 0.05))
    k2 = int(np.sum(stats.chi2.sf(lrt, 2) <= 0.05))
    ks = stats.kstest(lrt, stats.chi2(2).cdf)
    print(f"\n## 1. LRT null distribution (n = {n}, L = {L}, p = {p:.3f}, R = {R})\n")
    print("| statistic | value |\n|---|---:|")
    print(f"| 95th percentile of the LRT | {q95:.2f} |")
    print(f"| chi-square(2) / chi-square(4) 95% quantile | {stats.chi2.ppf(.95, 2):.2f} / {stats.chi2.ppf(.95, 4):.2f} |")
    s4, a4, b4 = wilson(k4, R)
    s2, a2, b2 = wilson(k2, R)
    print(f"| size of the paper's chi-square(4) test at 0.05 | {100 * s4:.1f}% [{100 * a4:.1f}, {100 * b4:.1f}] |")
    print(f"| size of a chi-square(2) reference at 0.05 | {100 * s2:.1f}% [{100 * a2:.1f}, {100 * b2:.1f}] |")
    print(f"| KS distance to chi-square(2) (p) | {ks.statistic:.3f} ({ks.pvalue:.2g}) |")
    print(f"| mean LRT (chi-square(2): 2) | {lrt.mean():.2f} |")


def _floor(df):
    """The bottom entropy decile, exactly as fit_tail selects it."""
    from glance_law.tail.report import _floor_mask
    fl = _floor_mask(df["root_entropy"].to_numpy(dtype=np.float64), 0.1, None)
    return df["accepted"].to_numpy()[fl], df["horizon"].to_numpy()[fl]


def size_section(R: int, B: int, seed: int, spec: TaskSpec, title: str, corrs=(0.0, 0.3)):
    print(f"\n## {title} (R = {R} logs, B = {B} bootstrap replicates, 60 prompts x 40 rounds, floor = "
          "bottom decile)\n")
    print("| prompt correlation | floor rounds | rejections at 0.05 | rate [Wilson 95%] | chi-square(4) rate | "
          "seconds |\n|---:|---:|---:|---|---:|---:|")
    for corr in corrs:
        t0 = time.time()
        rej = rej4 = 0
        nfl = []
        for r in range(R):
            df = simulate_rounds([spec], n_prompts=60, rounds_per_prompt=40, prompt_corr=corr, seed=seed + r)
            a, L = _floor(df)
            nfl.append(a.size)
            t = tail.lrt_test(a, L, n_boot=B, seed=seed + 10_000 + r)
            rej += t.p_bootstrap <= 0.05
            rej4 += t.p_nominal <= 0.05
        p, lo, hi = wilson(rej, R)
        print(f"| {corr} | {np.mean(nfl):.0f} | {rej}/{R} | {100 * p:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] | "
              f"{100 * rej4 / R:.1f}% | {time.time() - t0:.0f} |", flush=True)


def warp_section(R: int, seed: int, spec: TaskSpec, corrs=(0.0, 0.3)):
    """Warp-speed Monte Carlo (Giacomini, Politis & White 2013): one bootstrap draw per replicate;
    the bootstrap test's size (B -> infinity) is the share of replicates whose LRT exceeds the 95th
    percentile of the pooled bootstrap draws."""
    print(f"\n## 2b. Size of the bootstrap LRT, warp-speed Monte Carlo (R = {R} logs per row)\n")
    print("| prompt correlation | floor rounds | size at 0.05 [Wilson 95%] | at 0.01 | seconds |\n"
          "|---:|---:|---|---:|---:|")
    for corr in corrs:
        t0 = time.time()
        rng = np.random.default_rng(seed + 7)
        Wo, Wb, nfl = [], [], []
        for r in range(R):
            df = simulate_rounds([spec], n_prompts=60, rounds_per_prompt=40, prompt_corr=corr, seed=seed + r)
            a, L = _floor(df)
            nfl.append(a.size)
            Wo.append(tail_mle.counts(a, L, 15))
            p = tail_mle.geometric_from_counts(Wo[-1])[0][0]
            Wb.append(tail_model._simulate_geometric(float(p), L.astype(np.int64), 1, rng)[0])
        fo, fb = tail_model.fit_W(np.stack(Wo)), tail_model.fit_W(np.stack(Wb))
        lo_ = np.maximum(0, 2 * (fo[3] - fo[5]))
        lb_ = np.maximum(0, 2 * (fb[3] - fb[5]))
        k = int(np.sum(lo_ > np.quantile(lb_, 0.95)))
        k1 = int(np.sum(lo_ > np.quantile(lb_, 0.99)))
        p, lo, hi = wilson(k, R)
        print(f"| {corr} | {np.mean(nfl):.0f} | {100 * p:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] | "
              f"{100 * k1 / R:.1f}% | {time.time() - t0:.0f} |", flush=True)


def request_logs(n_requests: int, rng, p: float = 0.6, L: int = 5, sizes=(20, 200)):
    """Per-request run lengths under a geometric null (vLLM/SGLang-style per-request histograms: the
    whole log is the regime): each request decodes a uniform number of rounds in ``sizes``, every round
    an independent truncated geometric with acceptance ``p`` at every offset and horizon ``L``.
    (run lengths, horizons, request of each round)."""
    n = rng.integers(sizes[0], sizes[1] + 1, size=n_requests)
    cl = np.repeat(np.arange(n_requests), n)
    a = np.minimum(rng.geometric(1.0 - p, size=cl.size) - 1, L)
    return a, np.full(cl.size, L, dtype=np.int64), cl


def requests_section(R: int, seed: int, requests=(8, 15, 30, 100)):
    """Size of the prompt-aware LRT on per-request histograms with few requests, warp-speed Monte
    Carlo: the observed LRT over its design effect against the 95th percentile of the pooled draws'
    LRT over *their own* design effects (the requests' sizes kept: the rule of ``lrt_test``), beside
    the former rule (the draws undivided) and the plain bootstrap (no design effect)."""
    print(f"\n## 2c. Size on per-request histograms, warp-speed Monte Carlo (R = {R} logs per row, geometric "
          "null, p = 0.6, L = 5, 20-200 rounds a request)\n")
    print("| requests | mean design effect (sd) | size: both divided [Wilson 95%] | observed divided only | "
          "no design effect | seconds |\n|---:|---|---|---:|---:|---:|")
    out = {}
    for G in requests:
        t0 = time.time()
        rng = np.random.default_rng(seed + G)
        Wo, Wb, do, db = [], [], [], []
        for _ in range(R):
            a, L, cl = request_logs(G, rng)
            Wo.append(tail_mle.counts(a, L, 5))
            do.append(tail.histogram_design_effect(a, cl))
            p = tail_mle.geometric_from_counts(Wo[-1])[0][0]
            w, d = tail_model._simulate_geometric(float(p), L, 1, rng, clusters=cl)
            Wb.append(w[0])
            db.append(d[0])
        fo, fb = tail_model.fit_W(np.stack(Wo)), tail_model.fit_W(np.stack(Wb))
        lo_ = np.maximum(0, 2 * (fo[3] - fo[5]))
        lb_ = np.maximum(0, 2 * (fb[3] - fb[5]))
        do, db = np.array(do), np.array(db)
        k = int(np.sum(lo_ / do > np.quantile(lb_ / db, 0.95)))
        k_old = int(np.sum(lo_ / do > np.quantile(lb_, 0.95)))
        k_plain = int(np.sum(lo_ > np.quantile(lb_, 0.95)))
        s, lo, hi = wilson(k, R)
        out[G] = (k, R)
        print(f"| {G} | {do.mean():.2f} ({do.std():.2f}) | {100 * s:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] | "
              f"{100 * k_old / R:.1f}% | {100 * k_plain / R:.1f}% | {time.time() - t0:.0f} |", flush=True)
    return out


def accuracy_section(R: int, seed: int):
    rng = np.random.default_rng(seed)
    print(f"\n## 4. MLE accuracy against an exhaustive search (R = {R} data sets each)\n")
    print("| data | n | max shortfall | median shortfall | share within 1e-6 |\n|---|---:|---:|---:|---:|")
    for name, n in (("geometric", 122), ("geometric", 1000), ("two-state", 122), ("two-state", 1000)):
        W = []
        for _ in range(R):
            if name == "geometric":
                a = np.minimum(rng.geometric(1 - special.expit(1.226), size=n) - 1, 15)
            else:
                S = tail.survival((0.3, 0.98, special.expit(1.226), 0.97, 0.9), 15)
                a = (S[None, :] > rng.random(n)[:, None]).sum(axis=1)
            W.append(tail_mle.counts(a, np.full(n, 15), 15))
        W = np.stack(W)
        fast = tail_model.fit_W(W)[3]
        orig_grid = (tail_mle.N_U, tail_mle.N_V)
        tail_mle.N_U, tail_mle.N_V = 160, 161
        tail_mle._grid.cache_clear()
        slow = tail_mle.fit_counts(W, n_local=16)[3]
        tail_mle.N_U, tail_mle.N_V = orig_grid
        tail_mle._grid.cache_clear()
        d = np.maximum(slow - fast, 0)
        print(f"| {name} | {n} | {d.max():.2e} | {np.median(d):.1e} | {np.mean(d < 1e-6):.3f} |", flush=True)


def speed_section(seed: int):
    rng = np.random.default_rng(seed)
    W = np.stack([tail_mle.counts(np.minimum(rng.geometric(0.23, size=150) - 1, 15), np.full(150, 15), 15)
                  for _ in range(400)])
    tail_model.fit_W(W[:2])
    t0 = time.time()
    tail_model.fit_W(W)
    per = (time.time() - t0) / 400 * 1e3
    df = simulate_rounds(n_prompts=40, seed=seed)
    t0 = time.time()
    fit = tail.fit_tail(df, n_boot=199)
    dt = (time.time() - t0) / len(fit.tasks)
    print("\n## 5. Speed (this machine, shared)\n")
    print("| what | value |\n|---|---:|")
    print(f"| two-state MLE, batched (n = 150, L = 15) | {per:.1f} ms per data set |")
    print(f"| fit_tail per task (B = 199, 7 held-out tests, ~150 floor rounds) | {dt:.1f} s |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer replicates")
    ap.add_argument("--only", choices=("null", "size", "warp", "requests", "power", "accuracy", "speed"), action="append")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--R", type=int, default=None, help="replicates of the size/power sections")
    ap.add_argument("--B", type=int, default=None, help="bootstrap replicates per test")
    args = ap.parse_args(argv)
    want = set(args.only or ("null", "size", "warp", "requests", "power", "accuracy", "speed"))
    R = args.R or (40 if args.quick else 200)
    B = args.B or (49 if args.quick else 99)
    null_spec = TaskSpec("null", b0=1.226, b1=0.0)
    alt_spec = TaskSpec("docvqa", b0=1.226, b1=0.95, shape=1.5, scale=0.4, floor_weight=0.3,
                        tail=TwoStateTail(pi=0.3, rho_d=0.98, t_dd=0.97, t_uu=0.9, below=0.1))
    if "null" in want:
        null_section(500 if args.quick else 4000, args.seed)
    if "size" in want:
        size_section(R, B, args.seed, null_spec, "2. Size of the bootstrap LRT on pure-geometric logs")
    if "warp" in want:
        warp_section(500 if args.quick else 3000, args.seed + 50_000, null_spec)
    if "requests" in want:
        requests_section(args.R or (500 if args.quick else 4000), args.seed + 60_000)
    if "power" in want:
        size_section(max(20, R // 4), B, args.seed, alt_spec, "3. Power on logs with a two-state floor",
                     corrs=(0.0,))
    if "accuracy" in want:
        accuracy_section(20 if args.quick else 100, args.seed)
    if "speed" in want:
        speed_section(args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
