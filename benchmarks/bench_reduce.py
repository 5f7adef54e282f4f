"""Benchmark of the out-of-core path (issue 9): reduction + fit against the exact path, at 10^6
and 10^8 rounds, and the binning error of the reduced fit.

    nice -n 15 python benchmarks/bench_reduce.py --small 1e6            # side by side at 10^6 rounds
    nice -n 15 python benchmarks/bench_reduce.py --big 1e8              # 10^8 rounds, arrow and duckdb
    nice -n 15 python benchmarks/bench_reduce.py --binning               # binning error of the reduced fit
    nice -n 15 python benchmarks/bench_reduce.py --cluster 1e8          # arrow beside spark on a 2-worker cluster
    nice -n 15 python benchmarks/bench_reduce.py --big 1e8 --generate-only --keep   # just write the logs
    nice -n 15 python benchmarks/bench_reduce.py --big 1e8 --exact-files 2 --keep  # + exact vs reduced at 10^7

Measured (nothing is asserted; the figures go in docs/scale.md and the report):

* ``--small N`` (in-process, best of ``--repeat``, wall and CPU seconds, all in one run):
  ``read2`` (pyarrow reads root_entropy and accepted: merely scanning the two columns),
  ``floor`` (a lower bound on any reduction: read the six columns a cell key needs, bin the
  entropies and group the rows into cells, with no checks, no md5 and no fit; see :func:`floor_reduce`),
  ``exact`` (``read_logs`` then ``fit_law``: the exact path of benchmarks/bench_fit.py),
  ``reduce`` / ``fit`` / ``reduce+fit`` with the arrow and duckdb engines.
* ``--big N``: N simulated rounds written in chunks (``simulate_arrays(..., vectors=False)`` +
  ``write_table``) to ``--dir``; then, each in a fresh process, ``reduce_logs`` + ``fit_reduced``
  per engine and the two-column scan: wall, CPU and peak RSS of the process; ``duckdb-nocheck``
  is duckdb without the page-checksum pass (``page_check=False``), ``verify`` that pass alone, and
  the ratio with / without is printed. The logs are
  deleted afterwards unless ``--keep``.
* ``--cluster N``: N simulated rounds (as ``--big``) reduced and fitted by arrow and by spark on a
  standalone cluster of ``--workers`` one-core workers started on 127.0.0.1 with pyspark's
  ``spark-class`` (``tests/_spark_cluster.py``), each in a fresh driver process: wall, CPU of the
  driver's process tree and of the executors, peak memory of each (sampled from /proc every 0.25 s).
* ``--binning``: the reduced fit against the exact fit on simulated logs for several grids,
  with and without the two-point quadrature: |delta b0|, |delta b1| and the other statistics.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

COLUMNS = ["run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon", "condition", "drafter",
           "position", "root_pmax", "round_ms"]


def generate(folder: Path, n_rounds: int, chunk: int = 5_000_000) -> list[Path]:
    """About ``n_rounds`` simulated rounds of the five default tasks, in Parquet files of ``chunk`` rounds."""
    from glance_law.io import write_table
    from glance_law.simulate import simulate_arrays
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "DONE"
    if done.exists() and json.loads(done.read_text()).get("n") == n_rounds:
        return sorted(folder.glob("rounds-*.parquet"))
    for p in folder.glob("rounds-*.parquet"):
        p.unlink()
    paths, total, i, t0 = [], 0, 0, time.time()
    while total < n_rounds:
        rows = min(chunk, n_rounds - total)
        n_prompts = max(1, rows // (40 * 5))        # (20, 60) rounds per prompt, five tasks
        arr = simulate_arrays(n_prompts=n_prompts, vectors=False, seed=10_000 + i, run_id=f"bench{i}")
        arr["prompt_id"] = np.char.add(arr["prompt_id"].astype(str), f"-c{i}").astype(object)
        path = write_table({c: arr[c] for c in COLUMNS}, folder / f"rounds-{i:04d}.parquet", run={"bench": True})
        paths.append(path)
        total += len(arr["accepted"])
        i += 1
        print(f"  wrote {path.name}: {total:,} rounds so far ({time.time() - t0:.0f} s)", flush=True)
    done.write_text(json.dumps({"n": n_rounds, "rounds": total}))
    return paths


def floor_reduce(paths, buckets: int = 256):
    """The least work any reduction to (task, drafter, bucket, entropy bin, L, a) cells does: read the six
    columns of the cell key (strings as dictionaries), bin the entropies, and group the rows into cells
    with counts and entropy sums. It skips everything a real reduction must also do (value and key checks,
    the md5 prompt buckets - the prompt's dictionary index stands in -, exclusions, prompt counts) and
    does not fit, so its time is a floor under ``reduce + fit``. Returns the number of cells."""
    import pandas as pd
    import pyarrow.parquet as pq

    from glance_law.scale.reduce import Grid
    grid = Grid()
    cells = 0
    for path in paths:
        t = pq.read_table(path, columns=["task", "drafter", "prompt_id", "root_entropy", "accepted", "horizon"],
                          read_dictionary=["task", "drafter", "prompt_id"])
        codes = [t.column(c).combine_chunks().indices.to_numpy().astype(np.int64) for c in ("task", "drafter")]
        bucket = t.column("prompt_id").combine_chunks().indices.to_numpy().astype(np.int64) % buckets
        H = t.column("root_entropy").to_numpy().astype(np.float64)
        key = np.zeros(len(H), dtype=np.int64)
        for k in codes + [bucket, grid.index(np.maximum(H, 0.0)), t.column("horizon").to_numpy(),
                          t.column("accepted").to_numpy()]:
            k = k.astype(np.int64)
            key = key * (int(k.max()) + 1) + k
        inv, uniq = pd.factorize(key)  # a hash table: faster than sorting here
        n = np.bincount(inv, minlength=len(uniq))
        np.bincount(inv, H, minlength=len(uniq)), np.bincount(inv, H * H, minlength=len(uniq))
        cells += int((n > 0).sum())
    return cells


def clock(fn, repeat: int = 1):
    """(best wall s, best CPU s, result) of ``repeat`` calls."""
    best_w = best_c = float("inf")
    out = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        best_w, best_c = min(best_w, time.perf_counter() - w), min(best_c, time.process_time() - c)
    return best_w, best_c, out


CHILD = r"""
import glob, json, resource, sys, time
w, c = time.perf_counter(), time.process_time()
what, folder, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(glob.glob(folder + "/rounds-*.parquet"))[:k]
if what == "scan2":
    import pyarrow.parquet as pq
    n = 0
    for p in files:
        pf = pq.ParquetFile(p)
        for b in pf.iter_batches(batch_size=1 << 20, columns=["root_entropy", "accepted"]):
            n += len(b.column(0).to_numpy()) + 0 * int(b.column(1).to_numpy().sum())
    res = {"rounds": n}
elif what == "exact":
    from glance_law.io import read_logs
    from glance_law.law import fit_law
    logs = read_logs(files, columns=["root_entropy", "accepted", "horizon", "task", "prompt_id", "condition",
                                     "drafter"])
    t_red = time.perf_counter() - w
    r = fit_law(logs).row()
    res = {"rounds": int(len(logs.frame)), "cells": 0, "reduce_s": t_red, "b0": r["b0"], "b1": r["b1"],
           "b1_lo": r["b1_lo"], "b1_hi": r["b1_hi"]}
elif what == "verify":
    from glance_law.scale.engines import scan, verify_pages
    rounds = scan(files)[0]
    bad = verify_pages(rounds)
    res = {"rounds": sum(s.rows for s in rounds), "bad": len(bad)}
else:
    import os
    from glance_law.scale.engines import reduce_logs
    from glance_law.scale.law_reduced import fit_reduced
    engine = what.removesuffix("-nocheck")
    extra = {"master": os.environ["GLANCE_BENCH_MASTER"]} if engine == "spark" and "GLANCE_BENCH_MASTER" in os.environ else {}
    red = reduce_logs(files, engine=engine, page_check=not what.endswith("-nocheck"), **extra)
    t_red = time.perf_counter() - w
    fit = fit_reduced(red)
    r = fit.row()
    res = {"rounds": red.rounds, "cells": len(red.cells), "reduce_s": t_red, "b0": r["b0"], "b1": r["b1"],
           "b1_lo": r["b1_lo"], "b1_hi": r["b1_hi"]}
res.update(wall=time.perf_counter() - w, cpu=time.process_time() - c,
           rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(res))
"""


def child(what: str, folder: Path, files: int = 10 ** 9) -> dict:
    w = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, what, str(folder), str(files)], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_wall"] = time.perf_counter() - w
    return out


def _proc_table() -> dict:
    """pid -> (parent pid, RSS bytes, CPU seconds) of every process readable in /proc."""
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(d)] = (int(f[1]), int(f[21]) * page, (int(f[11]) + int(f[12])) / tick)
    return out


def _tree(table: dict, roots) -> set:
    """``roots`` and all their descendants in ``table``."""
    kids: dict = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    seen, todo = set(), [r for r in roots if r in table]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += kids.get(p, [])
    return seen


def tracked_child(what: str, folder: Path, env: dict, workers=(), interval: float = 0.25) -> dict:
    """:func:`child` with its process tree (the driver: Python and, for spark, its JVM) and the executors
    (every descendant of the ``workers`` daemons) sampled from /proc every ``interval`` s: peak RSS of each
    group (summed over its processes at one moment) and CPU seconds (the last reading of every process)."""
    w = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, what, str(folder), str(10 ** 9)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    peak = {"driver": 0, "executors": 0}
    cpu: dict = {"driver": {}, "executors": {}}
    import threading
    done = threading.Event()

    def sample():
        while not done.is_set():
            t = _proc_table()
            groups = {"driver": _tree(t, [proc.pid]),
                      "executors": _tree(t, list(workers)) - set(workers)}
            for g, pids in groups.items():
                peak[g] = max(peak[g], sum(t[p][1] for p in pids))
                for p in pids:
                    cpu[g][p] = t[p][2]
            done.wait(interval)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out_s, err_s = proc.communicate()
    done.set()
    th.join()
    if proc.returncode != 0:
        return {"error": err_s.strip().splitlines()[-1] if err_s.strip() else f"exit {proc.returncode}"}
    out = json.loads(out_s.strip().splitlines()[-1])
    out["process_wall"] = time.perf_counter() - w
    out.update(driver_peak_mb=peak["driver"] / 2 ** 20, executor_peak_mb=peak["executors"] / 2 ** 20,
               driver_cpu=sum(cpu["driver"].values()), executor_cpu=sum(cpu["executors"].values()))
    return out


def bench_cluster(n: int, folder: Path, keep: bool, workers: int, worker_memory: str, executor_memory: str,
                  driver_memory: str = "1g") -> None:
    """N rounds reduced and fitted by the arrow engine and by the spark engine on a standalone cluster of
    ``workers`` one-core workers on 127.0.0.1 (tests/_spark_cluster.py), one after the other, each in a fresh
    driver process: wall, CPU (driver tree, executors) and peak memory (driver tree, executors)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _spark_cluster import standalone
    t0 = time.time()
    print(f"\n== {n:,} rounds in {folder} (generating if needed), arrow and spark on a {workers}-worker cluster")
    paths = generate(folder, n)
    size = sum(p.stat().st_size for p in paths) / 1e9
    print(f"  {len(paths)} files, {size:.2f} GB, ready after {time.time() - t0:.0f} s", flush=True)
    try:
        with standalone(folder.parent / "spark-cluster", workers=workers, cores=1, memory=worker_memory,
                        executor_memory=executor_memory, driver_memory=driver_memory) as cluster:
            env = cluster.client_env(GLANCE_BENCH_MASTER=cluster.url)
            print(f"  cluster {cluster.url}: {workers} workers x 1 core, worker memory {worker_memory}, executor "
                  f"memory {executor_memory}, driver memory {driver_memory}", flush=True)
            for what in ("arrow", "spark"):
                print(f"  [{load_note()}]")
                r = tracked_child(what, folder, env, workers=cluster.pids()[1:])
                if "error" in r:
                    print(f"  {what:6s} failed: {r['error']}", flush=True)
                    continue
                print(f"  {what:6s} wall {r['wall']:7.1f} s (process {r['process_wall']:.1f} s, reduce "
                      f"{r['reduce_s']:.1f} s), CPU driver {r['driver_cpu']:.1f} s + executors "
                      f"{r['executor_cpu']:.1f} s, peak memory driver {r['driver_peak_mb']:.0f} MB, executors "
                      f"{r['executor_peak_mb']:.0f} MB; {r['rounds']:,} rounds, {r['cells']:,} cells, b0 "
                      f"{r['b0']:.6f}, b1 {r['b1']:.6f} [{r['b1_lo']:.6f}, {r['b1_hi']:.6f}]", flush=True)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
            print(f"  deleted {folder}")


def load_note() -> str:
    return f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"


def bench_small(n: int, repeat: int, folder: Path) -> None:
    import pyarrow.parquet as pq

    from glance_law.io import read_logs
    from glance_law.law import fit_law
    from glance_law.scale.engines import reduce_logs
    from glance_law.scale.law_reduced import fit_reduced
    paths = generate(folder, n, chunk=n)
    size = sum(p.stat().st_size for p in paths) / 1e6
    print(f"\n== {n:,} rounds, {len(paths)} file(s), {size:.0f} MB; {load_note()}")
    cols = ["root_entropy", "accepted", "horizon", "task", "prompt_id", "condition", "drafter"]
    rows = {}
    rows["read2"] = clock(lambda: [pq.read_table(p, columns=["root_entropy", "accepted"]) for p in paths], repeat)
    rows["floor"] = clock(lambda: floor_reduce(paths), repeat)
    rows["exact read+fit"] = clock(lambda: fit_law(read_logs(paths, columns=cols)), repeat)
    exact = rows["exact read+fit"][2]
    for engine in ("arrow", "duckdb"):
        rows[f"{engine} reduce"] = clock(lambda: reduce_logs(paths, engine=engine), repeat)
        red = rows[f"{engine} reduce"][2]
        rows[f"{engine} fit"] = clock(lambda: fit_reduced(red), repeat)
        rows[f"{engine} reduce+fit"] = clock(lambda: fit_reduced(reduce_logs(paths, engine=engine)), repeat)
    base_w, base_c = rows["exact read+fit"][:2]
    r2w, r2c = rows["read2"][:2]
    print(f"in-process, best of {repeat}: wall s / CPU s   (exact / this, wall and CPU;  this / read2, CPU)")
    for k, (w, c, _) in rows.items():
        print(f"  {k:18s} {w:7.3f} / {c:7.3f}   x{base_w / w:5.1f} / x{base_c / c:5.1f}   {c / r2c:6.1f} x read2")
    red = rows["arrow reduce"][2]
    fit = rows["arrow reduce+fit"][2]
    print(f"  floor: {rows['floor'][2]:,} cells; 20x the exact path would be {base_w / 20:.3f} s wall, "
          f"the floor alone takes {rows['floor'][0]:.3f} s (x{base_w / rows['floor'][0]:.1f})")
    print(f"  cells: {len(red.cells):,} for {red.rounds:,} rounds; pooled b0, b1: exact {exact.row()['b0']:.6f}, "
          f"{exact.row()['b1']:.6f}; reduced {fit.row()['b0']:.6f}, {fit.row()['b1']:.6f}")


def bench_exact(folder: Path, n_files: int) -> None:
    """The exact path against the reduction on the first ``n_files`` files of the big logs."""
    print(f"\n== exact path vs reduction on the first {n_files} file(s) of {folder}, fresh processes")
    for what in ("scan2", "exact", "arrow", "duckdb"):
        print(f"  [{load_note()}]")
        r = child(what, folder, n_files)
        if "error" in r:
            print(f"  {what:8s} failed: {r['error']}")
            continue
        extra = "" if what == "scan2" else f"  pooled b0 {r['b0']:.6f}, b1 {r['b1']:.6f}"
        print(f"  {what:8s} wall {r['wall']:7.1f} s, CPU {r['cpu']:7.1f} s, peak RSS {r['rss_mb']:6.0f} MB, "
              f"{r['rounds']:,} rounds{extra}", flush=True)


def bench_big(n: int, folder: Path, keep: bool, generate_only: bool, engines) -> None:
    t0 = time.time()
    print(f"\n== {n:,} rounds in {folder} (generating if needed)")
    paths = generate(folder, n)
    size = sum(p.stat().st_size for p in paths) / 1e9
    print(f"  {len(paths)} files, {size:.2f} GB, ready after {time.time() - t0:.0f} s")
    if generate_only:
        return
    seen: dict = {}
    try:
        for what in ["scan2"] + list(engines):
            print(f"  [{load_note()}]")
            r = child(what, folder)
            if "error" in r:
                print(f"  {what:8s} failed: {r['error']}")
                continue
            extra = (f"  reduce {r['reduce_s']:.1f} s, {r['cells']:,} cells, b0 {r['b0']:.5f}, b1 {r['b1']:.5f} "
                     f"[{r['b1_lo']:.5f}, {r['b1_hi']:.5f}]") if "reduce_s" in r else ""
            seen[what] = r
            print(f"  {what:8s} wall {r['wall']:7.1f} s (process {r['process_wall']:.1f} s), CPU {r['cpu']:7.1f} s, "
                  f"peak RSS {r['rss_mb']:6.0f} MB, {r['rounds']:,} rounds{extra}", flush=True)
        for e in {e.removesuffix("-nocheck") for e in seen if e.endswith("-nocheck")} & set(seen):
            a, b = seen[e], seen[e + "-nocheck"]
            print(f"  page checksums verified / not ({e}): wall x{a['wall'] / b['wall']:.2f}, "
                  f"CPU x{a['cpu'] / b['cpu']:.2f}")
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
            print(f"  deleted {folder}")


def bench_binning(n_prompts: int) -> None:
    import pandas as pd

    from glance_law.law import fit_law
    from glance_law.scale.law_reduced import fit_reduced
    from glance_law.scale.reduce import Grid, reduce_frame
    from glance_law.simulate import TaskSpec, simulate_rounds
    cases = {
        "five tasks": simulate_rounds(n_prompts=n_prompts, vectors=False, seed=3),
        "steep b1=3, H in [1, 4]": simulate_rounds([TaskSpec("steep", b0=4.0, b1=3.0, shape=6.0, scale=0.4,
                                                              floor_weight=0.0)],
                                                    n_prompts=5 * n_prompts, vectors=False, seed=4),
    }
    stats = ["b0", "b1", "floor_mean", "r2_curve", "r2_isotonic", "r2_round", "ceiling", "rho", "sup"]
    print(f"\n== binning error of the reduced fit (max over groups of |reduced - exact|); {load_note()}")
    for name, frame in cases.items():
        ex = fit_law(frame)
        print(f"  {name}: {len(frame):,} rounds")
        print(f"    {'grid':28s} {'cells':>8s} {'quad':>5s} " + " ".join(f"{s:>10s}" for s in stats)
              + f" {'curve':>10s}")
        for S in (4, 8, 16, 32, 64):
            red = reduce_frame(frame, grid=Grid(per_octave=S))
            for quad in (False, True):
                fit = fit_reduced(red, quadrature=quad)
                d = (fit.table[stats] - ex.table[stats]).abs().max()
                curve = max(float(np.nanmax(np.abs(fit.curve(g)["mean_accepted"].to_numpy()
                                                   - ex.curve(g)["mean_accepted"].to_numpy()))) for g in ex.groups)
                label = f"{S}/octave" + (" (default)" if S == Grid().per_octave else "")
                print(f"    {label:28s} {len(red.cells):8,d} {'yes' if quad else 'no':>5s} "
                      + " ".join(f"{d[s]:10.1e}" for s in stats) + f" {curve:10.1e}")
    pd.set_option("display.width", 200)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", type=float, default=None, metavar="N", help="side by side at N rounds (e.g. 1e6)")
    p.add_argument("--big", type=float, default=None, metavar="N", help="N rounds in fresh processes (e.g. 1e8)")
    p.add_argument("--binning", action="store_true", help="the binning error table")
    p.add_argument("--binning-prompts", type=int, default=2000, help="prompts per task of the binning logs")
    p.add_argument("--dir", default="/tmp/glance-bench-reduce", help="where the simulated logs go")
    p.add_argument("--engines", default="arrow,duckdb,duckdb-nocheck,verify",
                   help="engines for --big (comma separated; ENGINE-nocheck: without the page-checksum pass of "
                        "reduce_logs(page_check=False); verify: that pass alone)")
    p.add_argument("--cluster", type=float, default=None, metavar="N",
                   help="N rounds: arrow beside spark on a standalone cluster started on 127.0.0.1 (e.g. 1e8)")
    p.add_argument("--workers", type=int, default=2, help="workers of --cluster (one core each)")
    p.add_argument("--worker-memory", default="3g", help="memory of each --cluster worker")
    p.add_argument("--executor-memory", default="2g", help="memory of each --cluster executor")
    p.add_argument("--driver-memory", default="1g", help="memory of the --cluster driver's JVM (the reduction's cells "
                   "are collected there: 4g for 1e8 rounds)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--keep", action="store_true", help="keep the generated logs")
    p.add_argument("--generate-only", action="store_true")
    p.add_argument("--exact-files", type=int, default=0, metavar="K",
                   help="with --big: also run the exact path and the reductions on the first K files (K x 5e6 rounds)")
    args = p.parse_args(argv)
    if args.small is None and args.big is None and not args.binning and args.cluster is None:
        args.small, args.binning = 1e6, True
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {load_note()}")
    if args.small:
        folder = Path(args.dir) / f"small-{int(args.small)}"
        try:
            bench_small(int(args.small), args.repeat, folder)
        finally:
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    if args.big:
        folder = Path(args.dir) / f"big-{int(args.big)}"
        if args.exact_files:
            generate(folder, int(args.big))
            bench_exact(folder, args.exact_files)
        bench_big(int(args.big), folder, args.keep, args.generate_only, [e for e in args.engines.split(",") if e])
    if args.cluster:
        bench_cluster(int(args.cluster), Path(args.dir) / f"big-{int(args.cluster)}", args.keep, args.workers,
                      args.worker_memory, args.executor_memory, args.driver_memory)
    if args.binning:
        bench_binning(args.binning_prompts)
    print(f"\nthis process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
