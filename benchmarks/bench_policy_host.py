"""The draft policy's per-round host work in the live decoder, against the cost of a round.

    nice -n 5 env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_policy_host.py [--json host.json]

What a policy adds to a live round (glance_log.decode): the root's statistics ride to the host
in the copy of the drafter's top-k rows (no extra synchronisation), then
``glance_log.decode.policy_shape`` picks the round's shape on the host. This script times that
call for every built-in family on the drafters' real row shapes (the embedded block head: 15
offsets x top-8; Gemma 3 270M early exit as a 16-node tree: 5 x top-4; prompt lookup's chain:
10 x 1), and the tree build every round pays (``build_tree``: the one-round heap
``best_first_one`` against the vectorised ``best_first`` it replaced). Each figure is the median
over repeats of the mean of many calls (wall and process CPU time), on one thread.

The shares divide by the measured round cost (glance_law.policy.cost.fit_cost, constant term:
a round that verifies the root alone) of the committed real-model logs (data/real: Gemma 3 270M,
prompt lookup and early exit) and of the embedded default (data/logs).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: (label, offsets L, top-k) of the rows a policy reads
SHAPES = (("embedded block head, tree", 15, 8), ("Gemma early exit, tree16", 5, 4), ("prompt lookup / chain", 10, 1))


def _rows(rng, L, k):
    x = np.sort(rng.normal(0.0, 2.0, (L, k)), axis=1)[:, ::-1]
    return (x - np.log(np.exp(x).sum(1, keepdims=True) * 1.25)).astype(np.float32)


def _time(fn, calls: int, repeats: int) -> tuple[float, float]:
    """(wall us, CPU us) per call: medians over repeats of the mean over ``calls``."""
    for _ in range(10):
        fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        wall.append((time.perf_counter() - w) / calls * 1e6)
        cpu.append((time.process_time() - c) / calls * 1e6)
    return float(np.median(wall)), float(np.median(cpu))


def _policies():
    from glance_law.policy import FixedPolicy, GatedDepthPolicy, KeyedBudgetPolicy, KeyedDepthPolicy

    return {"fixed": FixedPolicy(size=15),
            "keyed-rescue (63 nodes)": KeyedBudgetPolicy(key="rescue", b0=1.5, b1=0.8, c0=-1.0, c1=-1.0,
                                                         threshold=0.02, max_size=63),
            "keyed-paper (63 nodes)": KeyedBudgetPolicy(key="paper", b0=1.5, b1=0.8, threshold=0.02, max_size=63),
            "keyed-depth": KeyedDepthPolicy(b0=1.5, b1=0.8, threshold=0.3, max_size=16),
            "gated-cumprob": GatedDepthPolicy(mode="cumprob", threshold=0.5, max_size=16),
            "gated-entropy": GatedDepthPolicy(mode="entropy", threshold=-1.0, max_size=16)}


def _round_ms() -> dict:
    """The constant term (ms) of each drafter's measured round cost in the committed logs."""
    from glance_law import read_logs
    from glance_law.policy.cost import fit_cost

    out = {}
    for label, path, drafter in (("Gemma 3 270M, prompt lookup", "data/real/*.parquet", "pld"),
                                 ("Gemma 3 270M, early exit chain", "data/real/*.parquet", "early_exit-6-chain"),
                                 ("embedded default, block head", "data/logs", "block")):
        try:
            fit = fit_cost(read_logs(str(ROOT / path)), drafter=drafter, n_boot=0)
            frame = read_logs(str(ROOT / path)).frame
            sub = frame.loc[frame["drafter"].astype(str) == drafter, "round_ms"]
            out[label] = {"constant_ms": fit.coefficient("constant_ms")[0], "median_round_ms": float(sub.median())}
        except Exception as exc:                                   # a missing log set: report, go on
            out[label] = {"error": str(exc)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from glance_law.replay.tree import best_first, best_first_one, build_tree
    from glance_log.decode import policy_shape

    rng = np.random.default_rng(0)
    rs = np.array([1.2, 0.5], np.float32)
    res = {"policy_shape_us": {}, "tree_build_us": {}}
    for label, L, k in SHAPES:
        lq = _rows(rng, L, k)
        for name, pol in _policies().items():
            depth = getattr(pol, "shape", "budget") == "depth"
            if depth != (k == 1) and name != "fixed":
                continue
            w, c = _time(lambda: policy_shape(pol, lq[:, :1] if depth else lq, rs, 10), args.calls, args.repeats)
            res["policy_shape_us"][f"{name} | {label}"] = {"wall": w, "cpu": c}
        n = 63 if k > 1 else L
        x = lq.astype(np.float64)
        for tag, fn in (("build_tree (heap)", lambda: build_tree(x, n)),
                        ("best_first_one", lambda: best_first_one(x, n)),
                        ("best_first vectorised, R = 1", lambda: best_first(x[None], n))):
            w, c = _time(fn, args.calls, args.repeats)
            res["tree_build_us"][f"{tag} | {label} | {n} nodes"] = {"wall": w, "cpu": c}
    res["round_ms"] = _round_ms()
    worst = max(v["wall"] for v in res["policy_shape_us"].values())
    print(f"{'policy_shape (host work a round)':60s} {'wall us':>9s} {'CPU us':>9s}")
    for k2, v in res["policy_shape_us"].items():
        print(f"{k2:60s} {v['wall']:9.1f} {v['cpu']:9.1f}")
    print(f"\n{'tree build (every round, fixed or policy)':60s} {'wall us':>9s} {'CPU us':>9s}")
    for k2, v in res["tree_build_us"].items():
        print(f"{k2:60s} {v['wall']:9.1f} {v['cpu']:9.1f}")
    print("\nthe slowest policy's host work as a share of a round that verifies the root alone:")
    for k2, v in res["round_ms"].items():
        if "constant_ms" in v:
            print(f"  {k2}: {v['constant_ms']:.1f} ms a round (median logged round {v['median_round_ms']:.1f} ms): "
                  f"{100 * worst / 1e3 / v['constant_ms']:.3f} %")
        else:
            print(f"  {k2}: {v['error']}")
    res["slowest_policy_us"] = worst
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
