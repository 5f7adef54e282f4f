"""Replay 10^5 rounds (L = 15, k = 8) for every budget N <= 255: time and peak memory.

    nice -n 15 .venv/bin/python benchmarks/bench_replay.py                     # 10^5 rounds, 3 workloads
    nice -n 15 .venv/bin/python benchmarks/bench_replay.py --rounds 2e4 --baseline-rounds 2000   # quick

Workloads (the same rounds for every implementation):

* ``sim``      : :func:`glance_law.simulate.simulate_tree_rounds` (five tasks, calibrated drafter,
                 target paths drawn from the marginals) - what logged rounds look like;
* ``diffuse``  : top-8 of Dirichlet(1) marginals over 40 tokens (flat rows: wide, shallow trees),
                 target ranks drawn from the marginals;
* ``peaked``   : Dirichlet(0.1) (confident rows: deep, narrow trees).

Each step runs in a fresh child process (``--repeat`` times; fastest time, largest peak):
``replay`` is :func:`glance_law.replay.replay_arrays` (one floored best-first pass, all budgets);
``best_first`` the unfloored first 255 nodes of every round (what the width policies use);
``replay [lead builder]`` the replay as first written - one best-first pass floored at the
deepest target prefix, on the lead's padded builder (``git show 32f54f1:glance_law/tree.py``) -
on the first ``--baseline-rounds`` rounds, side by side with ``replay`` on the same subset
(the ratio, in wall and CPU seconds), and checked equal. Times are wall seconds and the
child's CPU seconds (on a shared machine the CPU time is the fairer figure). Peak memory: the child's peak RSS
(VmHWM) and the tracemalloc peak of the call itself (numpy buffers).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, tracemalloc, importlib.util
import numpy as np
from glance_law import replay as RP
from glance_law.replay import tree as T
step, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = np.load(path)
lq, rk = d["logq"][:n], d["rank"][:n]
if step == "lead":
    spec = importlib.util.spec_from_file_location("lead_tree", sys.argv[4])
    lead = importlib.util.module_from_spec(spec); sys.modules["lead_tree"] = lead; spec.loader.exec_module(lead)

    def lead_replay(lq, rk, n_max):
        # the replay as first written on the lead's builder: one floored best-first pass
        # (floor = the deepest target prefix's score), then the prefixes looked up in it
        q = T.check_logq(lq)
        score, code, D, known = RP.target_prefixes(q, rk)
        R, L, k = q.shape
        pos = np.full((R, L), n_max, np.int32)
        rows = np.flatnonzero(D > 0)
        _, dep, cod = lead.best_first(q[rows], n_max, floor=score[rows, D[rows] - 1])
        dd = dep.astype(np.int64)
        want = np.take_along_axis(code[rows], np.maximum(dd - 1, 0), axis=1)
        i, col = np.nonzero((dd >= 1) & (dd <= D[rows][:, None]) & (cod == want))
        pos[rows[i], dd[i, col] - 1] = col
        return RP.ReplayArrays(pos=pos, placeable=D, known=known, censor_from=np.full(R, n_max + 1), n_max=n_max)
tracemalloc.start()
t0, c0 = time.perf_counter(), time.process_time()
if step == "best_first":
    s, dep, c = T.best_first(lq, 255)
    out = int((dep > 0).sum())
else:
    arr = (lead_replay if step == "lead" else RP.replay_arrays)(lq, rk, 255)
    out = arr.pos
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
tracemalloc.stop()
if step != "best_first":
    np.save(sys.argv[5] if step == "lead" else sys.argv[4], out)
    cur = arr.curve()
    extra = {"mean_A_63": float(cur[:, 63].mean()), "mean_A_255": float(cur[:, 255].mean())}
else:
    extra = {"nodes": out}
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"seconds": dt, "cpu_s": cpu, "peak_rss_mb": int(hwm) / 1024, "traced_mb": peak, **extra}))
"""


def workloads(R: int, seed: int = 0) -> dict:
    from glance_law.simulate import simulate_tree_rounds

    out = {}
    per = max(1, int(np.ceil(R / (5 * 40))))
    f = simulate_tree_rounds(n_prompts=per, rounds_per_prompt=(20, 60), seed=seed)
    f = f.iloc[:R]
    out["sim"] = (np.stack(f["topk_logq"].to_numpy()).reshape(len(f), 15, 8).astype(np.float32),
                  np.stack(f["target_rank"].to_numpy()).astype(np.int32))
    rng = np.random.default_rng(seed)
    for name, conc in (("diffuse", 1.0), ("peaked", 0.1)):
        x = rng.dirichlet(np.ones(40) * conc, size=(R, 15))
        order = np.argsort(-x, axis=-1)
        xs = np.take_along_axis(x, order, axis=-1)
        lq = np.log(np.maximum(xs[..., :8], 1e-30)).astype(np.float32)
        # the target's token drawn from the marginals: its rank under the drafter
        u = rng.random((R, 15, 1))
        rank = (np.cumsum(xs, axis=-1) < u).sum(axis=-1)
        out[name] = (lq, rank.astype(np.int32))               # >= 8: outside the logged top-k
    return out


def run_child(args, *extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", CHILD, *map(str, args), *map(str, extra)], capture_output=True,
                       text=True, env=env)
    if p.returncode:
        raise SystemExit(f"child failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def best_of(results):
    return {"seconds": min(r["seconds"] for r in results), "cpu_s": min(r["cpu_s"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            "traced_mb": max(r["traced_mb"] for r in results), **{k: v for k, v in results[0].items()
                                                                   if k not in ("seconds", "cpu_s", "peak_rss_mb",
                                                                                "traced_mb")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=float, default=1e5)
    ap.add_argument("--baseline-rounds", type=float, default=1e4,
                    help="rounds replayed with the lead's padded builder too (0: skip)")
    ap.add_argument("--workloads", default="sim,diffuse,peaked")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-best-first", action="store_true", help="skip the unfloored best_first step")
    a = ap.parse_args(argv)
    R, Rb = int(a.rounds), int(a.baseline_rounds)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        lead = Path(tmp) / "lead_tree.py"
        src = subprocess.run(["git", "-C", str(ROOT), "show", "32f54f1:glance_law/tree.py"], capture_output=True,
                             text=True)
        if src.returncode:
            Rb = 0
        else:
            lead.write_text(src.stdout)
        data = workloads(R)
        for name in a.workloads.split(","):
            lq, rk = data[name]
            path = Path(tmp) / f"{name}.npz"
            np.savez(path, logq=lq, rank=rk)
            pos_new = Path(tmp) / f"{name}_new.npy"
            r = best_of([run_child(["replay", path, R], pos_new) for _ in range(a.repeat)])
            rows.append({"workload": name, "step": "replay", "rounds": R, **r})
            if not a.no_best_first:
                r = best_of([run_child(["best_first", path, R]) for _ in range(a.repeat)])
                rows.append({"workload": name, "step": "best_first (no floor)", "rounds": R, **r})
            if Rb:
                pos_sub = Path(tmp) / f"{name}_sub.npy"
                pos_old = Path(tmp) / f"{name}_old.npy"
                rn = best_of([run_child(["replay", path, Rb], pos_sub) for _ in range(a.repeat)])
                ro = best_of([run_child(["lead", path, Rb], lead, pos_old) for _ in range(a.repeat)])
                same = bool(np.array_equal(np.load(pos_sub), np.load(pos_old)))
                rows.append({"workload": name, "step": "replay (subset)", "rounds": Rb, **rn})
                rows.append({"workload": name, "step": "replay [lead builder]", "rounds": Rb, **ro,
                             "ratio": ro["seconds"] / rn["seconds"], "cpu_ratio": ro["cpu_s"] / rn["cpu_s"],
                             "equal": same})
    import pandas as pd

    df = pd.DataFrame(rows)
    df["s_per_1e5"] = df["seconds"] * 1e5 / df["rounds"]
    df["cpu_per_1e5"] = df["cpu_s"] * 1e5 / df["rounds"]
    cols = [c for c in ("workload", "step", "rounds", "seconds", "s_per_1e5", "cpu_per_1e5", "peak_rss_mb",
                        "traced_mb", "ratio", "cpu_ratio", "equal", "mean_A_63", "mean_A_255") if c in df.columns]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"\nload average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
