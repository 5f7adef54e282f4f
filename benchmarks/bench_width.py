"""The ``--width`` section at 10^5 rounds: this version against an earlier one, side by side.

    nice -n 15 .venv/bin/python benchmarks/bench_width.py                    # 10^5 rounds, 200 replicates
    nice -n 15 .venv/bin/python benchmarks/bench_width.py --rounds 2e4 --boot 20 --hull-rounds 2000   # quick

The workload: :func:`glance_law.simulate.simulate_tree_rounds` (five tasks, L = 15, k = 8, about
``--rounds`` rounds). Each step runs in a fresh child process, once with the working tree's
``glance_law`` (``after``) and once with the package as it was at ``--before`` (``git archive``;
default: the commit before the keyed policies' envelopes moved from a 41-point grid with the
O(P^2) hull to every n <= n_max with the monotone-chain hull):

* ``width``: :func:`glance_law.replay.width.width_allocation` at budgets 15,31,47,63 with ``--boot``
  prompt-bootstrap replicates, end to end (replay, best-first trees, node masses, envelopes,
  allocations); ``hull_s`` is the part spent in ``allocate.hull_segments`` (oracle and keyed
  envelopes), ``segments`` the keyed policies' segments (what each replicate's allocation
  sorts through);
* ``hull (full curve)``: ``allocate.hull_segments`` alone on the full predicted curves (n = 1..255,
  the rescue policy's masses) of the first ``--hull-rounds`` rounds: the earlier O(P^2) hull
  against the monotone chain on the same input, results checked equal.

Times are wall seconds and the child's CPU seconds (on a shared machine the CPU time is the
fairer figure), measured without tracemalloc (it doubles the hull's time); memory is the
child's peak RSS (VmHWM), and with ``--traced`` the tracemalloc peak of the call (a second run).
The two ``width`` rows also report the largest difference of their allocation tables (the
oracle and fixed columns must agree exactly; the keyed ones move by the grid's error).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "69fbfc2"     # cd42024^: the keyed envelopes on the 41-point grid (glance_law/width.py _curve_grid)

CHILD = r"""
import json, sys, time, tracemalloc
import numpy as np, pandas as pd
import glance_law
from glance_law.replay import allocate as al
from glance_law.replay import width as W
step, data, root, out, traced = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
assert glance_law.__file__.startswith(root), (glance_law.__file__, root)
frame = pd.read_pickle(data)
spent = {"hull_s": 0.0, "hull_cpu": 0.0}
hull = al.hull_segments

def timed(*a, **k):
    t0, c0 = time.perf_counter(), time.process_time()
    res = hull(*a, **k)
    spent["hull_s"] += time.perf_counter() - t0
    spent["hull_cpu"] += time.process_time() - c0
    return res

if traced:                                        # it slows numpy-heavy loops about 2x: timing runs go without
    tracemalloc.start()
if step == "width":
    al.hull_segments = timed                      # width and allocate look it up at call time
    nseg = []
    build = al.SortedSegments.build.__func__

    def counted(cls, seg, lam=0.0):
        nseg.append(int((seg.length > 0).sum()))
        return build(cls, seg, lam)

    al.SortedSegments.build = classmethod(counted)
    boot = int(sys.argv[6])
    t0, c0 = time.perf_counter(), time.process_time()
    res = W.width_allocation(frame, budgets=(15, 31, 47, 63), n_boot=boot, seed=0)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    res.to_frame().to_pickle(out)
    # per task: oracle, paper, rescue (in that order; fixed has no segments)
    extra = {"segments": int(sum(n for i, n in enumerate(nseg) if i % 3)), **spent}
else:
    from glance_law.replay.tree import best_first
    from glance_law.law import match_prob
    from scipy import special
    n = int(sys.argv[6])
    f = frame.iloc[:n]
    lq = np.stack(f["topk_logq"].to_numpy()).reshape(len(f), 15, 8).astype(np.float64)
    H = f["root_entropy"].to_numpy()
    _, dep, cod = best_first(lq, 255)
    p, r = match_prob(H, 1.0, 0.8), special.expit(0.5 - 0.0 * H)
    cum = np.cumsum(W.node_masses(lq, dep, cod, p, r), axis=1)
    X = np.broadcast_to(np.arange(1, 256, dtype=np.float64), cum.shape)
    if traced:
        tracemalloc.stop(); tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    seg = al.hull_segments(X, cum)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.savez(out, x0=seg.x0, length=seg.length, slope=seg.slope)
    extra = {"segments": int((seg.length > 0).sum())}
peak = tracemalloc.get_traced_memory()[1] / 2 ** 20 if traced else float("nan")
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"seconds": dt, "cpu_s": cpu, "peak_rss_mb": int(hwm) / 1024, "traced_mb": peak, **extra}))
"""


def run_child(root: Path, step, data, out, traced: bool, *args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", CHILD, step, str(data), str(root), str(out), str(int(traced)),
                        *map(str, args)],
                       capture_output=True, text=True, env=env, cwd=root)     # '' on sys.path is the cwd
    if p.returncode:
        raise SystemExit(f"child failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=float, default=1e5)
    ap.add_argument("--boot", type=int, default=200, help="prompt-bootstrap replicates (the CLI's default)")
    ap.add_argument("--hull-rounds", type=float, default=1e4, help="rounds for the hull-only step (0: skip)")
    ap.add_argument("--before", default=BEFORE, help="git revision of the earlier version")
    ap.add_argument("--traced", action="store_true",
                    help="also run each step under tracemalloc (its peak; timed runs go without it)")
    a = ap.parse_args(argv)
    import pandas as pd

    from glance_law.simulate import simulate_tree_rounds

    R, Rh = int(a.rounds), int(a.hull_rounds)
    per = max(1, int(np.ceil(R / (5 * 40))))
    frame = simulate_tree_rounds(n_prompts=per, rounds_per_prompt=(20, 60), seed=0).iloc[:R]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = tmp / "rounds.pkl"
        frame.to_pickle(data)
        src = subprocess.run(["git", "-C", str(ROOT), "archive", a.before, "glance_law"], capture_output=True)
        if src.returncode:
            raise SystemExit(f"git archive {a.before} failed: {src.stderr.decode()[-500:]}")
        (tmp / "before").mkdir()
        with tarfile.open(fileobj=io.BytesIO(src.stdout)) as tar:
            tar.extractall(tmp / "before", filter="data")
        roots = {"before": tmp / "before", "after": ROOT}
        tabs = {}
        for ver, root in roots.items():
            out = tmp / f"width_{ver}.pkl"
            r = run_child(root, "width", data, out, False, a.boot)
            if a.traced:
                r["traced_mb"] = run_child(root, "width", data, out, True, a.boot)["traced_mb"]
            tabs[ver] = pd.read_pickle(out)
            rows.append({"step": "width", "version": ver, "rounds": len(frame), **r})
        diff = {c: float(np.nanmax(np.abs(tabs["after"][c].to_numpy() - tabs["before"][c].to_numpy())))
                for c in ("fixed", "oracle", "paper", "rescue")}
        for row in rows:
            if row["version"] == "after":
                row.update({f"max|d {c}|": v for c, v in diff.items()})
        if Rh:
            segs = {}
            for ver, root in roots.items():
                out = tmp / f"hull_{ver}.npz"
                r = run_child(root, "hull", data, out, False, Rh)
                if a.traced:
                    r["traced_mb"] = run_child(root, "hull", data, out, True, Rh)["traced_mb"]
                segs[ver] = np.load(out)
                rows.append({"step": "hull (full curve)", "version": ver, "rounds": min(Rh, len(frame)), **r})
            rows[-1]["equal"] = all(np.array_equal(segs["before"][k], segs["after"][k])
                                    for k in ("x0", "length", "slope"))
    df = pd.DataFrame(rows)
    for step in df["step"].unique():
        m = df["step"] == step
        b = df[m & (df["version"] == "before")].iloc[0]
        df.loc[m & (df["version"] == "after"), "ratio"] = df.loc[m, "seconds"].iloc[-1] / b["seconds"]
        df.loc[m & (df["version"] == "after"), "cpu_ratio"] = df.loc[m, "cpu_s"].iloc[-1] / b["cpu_s"]
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("\nratio, cpu_ratio: after / before (below 1: faster)")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
