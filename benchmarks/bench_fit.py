"""Benchmark of the law fit (issue 2): speed and memory at 10^6 and 10^7 rounds, side by side
with merely reading the two columns (root_entropy, accepted) from Parquet, and the paper's
reference method against the MLE.

    nice -n 15 python benchmarks/bench_fit.py               # 10^6 and 10^7 rounds
    nice -n 15 python benchmarks/bench_fit.py --sizes 1e6   # 10^6 only
    python benchmarks/bench_fit.py --against 96046f3,e8c5d52 --sizes 1e6,1e7  # issue 13 item 6: floor, old, new
    python benchmarks/bench_fit.py --reference-only          # the bias of the paper's method

Measured (all in one run, so ratios compare like with like):

* ``read2``    pyarrow reads the two columns of the Parquet log into numpy (in-process);
* ``fit``      ``fit_law`` on the frame: MLE per task and pooled, CR1 prompt-clustered
               intervals, decile curve with clustered intervals, isotonic curve, three R^2,
               clustered Spearman, both ceilings, floor/cap/sup, the four checks (in-process);
* ``read+fit`` ``read_logs`` (validated, only the law's columns) then ``fit_law`` (in-process);
* ``cli``      ``python -m glance_law.fit LOG --format json`` as a fresh process: wall time and
               peak RSS (includes interpreter start and imports);
* ``cli-read2`` a fresh process that only imports pyarrow and reads the two columns.

With ``--against`` the command itself is then timed too (issue 24, item 7): ``python -m glance_law.fit
LOGS`` of this checkout and of each REF in fresh processes (interpreter start included) against the
command floor, a fresh process that reads root_entropy and accepted and argsorts the entropies; the
tables each command computed (summary, law, sections) are compared frame by frame (identical or
not); and ``import glance_law.fit`` against importing numpy, pandas and pyarrow.parquet.

With ``--against REF[,REF...]`` (issue 13, item 6) each size is instead timed in fresh processes, side by
side in one run: the *floor* (pyarrow reads root_entropy and accepted, then one argsort of the
entropies), ``fit_law`` of this checkout and ``fit_law`` of each commit REF (extracted with
``git archive`` into a temporary folder), each on the frame already in memory; "added" is the
fit's peak RSS above the RSS before it (the peak is reset through /proc/self/clear_refs). Each
figure is the best of ``--repeat`` runs inside its process (imports and the first read excluded).
Each fit's table and curves are compared with this checkout's: the largest relative difference
of any statistic is printed (the speed-ups must leave the statistics identical to ~1e-10).

In-process timings are the best of ``--repeat`` runs (the machine is shared); process
figures are single runs. Nothing here is asserted: the figures go in the report.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy import optimize, special

from glance_law.io import read_logs, write_table
from glance_law.law import fit_affine_logit, fit_law
from glance_law.simulate import DEFAULT_TASKS, TaskSpec, simulate_arrays, simulate_rounds

LAW_COLUMNS = ["root_entropy", "accepted", "horizon", "task", "prompt_id", "condition", "drafter"]


def write_log(folder: Path, n_rounds: int, part_rows: int = 1_000_000) -> list[Path]:
    """Simulated five-task logs of about ``n_rounds`` rounds, in parts of ``part_rows``."""
    paths = []
    per_prompt = 40  # (20, 60) rounds per prompt on average
    for i, start in enumerate(range(0, n_rounds, part_rows)):
        rows = min(part_rows, n_rounds - start)
        n_prompts = max(1, rows // (per_prompt * len(DEFAULT_TASKS)))
        frame = simulate_rounds(DEFAULT_TASKS, n_prompts=n_prompts, vectors=False, seed=1000 + i,
                                run_id=f"bench{i}")
        frame["prompt_id"] = frame["prompt_id"].astype(str) + f"-p{i}"
        paths.append(write_table(frame, folder / f"rounds-bench-{i:03d}.parquet", run={"bench": True}))
    return paths


def best_of(fn, repeat: int) -> tuple[float, float, object]:
    """Best wall and best CPU seconds of ``repeat`` calls (CPU time is what the process itself
    spent; on a shared machine it is the steadier figure)."""
    best, best_cpu, out = np.inf, np.inf, None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        best_cpu = min(best_cpu, time.process_time() - c)
        best = min(best, time.perf_counter() - t)
    return best, best_cpu, out


# A child's ru_maxrss counts the parent's memory at fork time, so each child reports the
# high-water mark of its own address space (VmHWM) when it exits.
_HWM = ("import atexit, runpy, sys\n"
        "def _hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM'):\n"
        "            sys.stderr.write('VMHWM_KB ' + line.split()[1] + '\\n')\n"
        "atexit.register(_hwm)\n")


def process(args: list[str], module: str | None = None, code: str | None = None) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds, peak RSS (MB) and exit code of one fresh Python process running
    ``python -m module args`` or ``python -c code args``."""
    body = _HWM + (f"sys.argv = [{module!r}] + sys.argv[1:]\nrunpy.run_module({module!r}, run_name='__main__')\n"
                   if module else code)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", body] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc
    hwm = [float(line.split()[1]) / 1024.0 for line in err.splitlines() if line.startswith("VMHWM_KB")]
    if rc != 0:
        print(f"  ! {module or 'code'} exited {rc}: {err.strip()[-300:]}")
    return wall, usage.ru_utime + usage.ru_stime, (hwm[-1] if hwm else float("nan")), rc


def read_two(paths):
    cols = [pq.read_table(p, columns=["root_entropy", "accepted"]) for p in paths]
    return [(t.column(0).to_numpy(), t.column(1).to_numpy()) for t in cols]


def fit_only(paths, repeat: int):
    frame = read_logs(paths, "rounds", columns=LAW_COLUMNS).frame
    return best_of(lambda: fit_law(frame), repeat)


def bench_size(n: int, repeat: int, tmp: Path, ref_dirs: list[str] | None = None) -> None:
    folder = tmp / f"n{n}"
    folder.mkdir()
    t = time.perf_counter()
    paths = write_log(folder, n)
    n_real = sum(pq.ParquetFile(p).metadata.num_rows for p in paths)
    size = sum(p.stat().st_size for p in paths) / 1e6
    print(f"\n== {n_real:,} rounds in {len(paths)} Parquet part(s), {size:.0f} MB "
          f"(simulated in {time.perf_counter() - t:.0f} s)")
    if ref_dirs:
        against(paths, ref_dirs, repeat)
        here = str(Path(__file__).resolve().parents[1])
        commands(paths, [("this checkout", here)] + [(Path(d).name, d) for d in ref_dirs])
        for p in paths:
            p.unlink()
        return
    t_read2, c_read2, _ = best_of(lambda: read_two(paths), repeat)
    t_fit, c_fit, fit = fit_only(paths, repeat)
    t_all, c_all, _ = best_of(lambda: fit_law(read_logs(paths, "rounds", columns=LAW_COLUMNS)), repeat)
    pooled = fit.row("pooled")
    print(f"in-process, best of {repeat} (wall / CPU seconds):")
    print(f"  read2    {t_read2:6.2f} / {c_read2:6.2f}")
    print(f"  fit      {t_fit:6.2f} / {c_fit:6.2f}   (CPU x{c_fit / c_read2:.1f} read2)")
    print(f"  read+fit {t_all:6.2f} / {c_all:6.2f}   (CPU x{c_all / c_read2:.1f} read2)")
    print(f"  pooled b0 = {pooled.b0:.4f} [{pooled.b0_lo:.4f}, {pooled.b0_hi:.4f}], "
          f"b1 = {pooled.b1:.4f} [{pooled.b1_lo:.4f}, {pooled.b1_hi:.4f}], prompts {pooled.prompts}")
    glob = str(folder / "*.parquet")
    cli = process([glob, "--format", "json"], module="glance_law.fit")
    code = ("[pq.read_table(p, columns=['root_entropy','accepted']).to_pandas() for p in sys.argv[1:]]\n")
    r2 = process([str(p) for p in paths], code="import pyarrow.parquet as pq\n" + code)
    imp = process([], code="import glance_law.fit\n")
    print("fresh processes (wall s / CPU s / peak RSS MB):")
    print(f"  cli       {cli[0]:6.2f} / {cli[1]:6.2f} / {cli[2]:6.0f}   (exit {cli[3]})")
    print(f"  read2     {r2[0]:6.2f} / {r2[1]:6.2f} / {r2[2]:6.0f}")
    print(f"  imports   {imp[0]:6.2f} / {imp[1]:6.2f} / {imp[2]:6.0f}   (python -c 'import glance_law.fit')")
    print(f"  cli / read2: wall x{cli[0] / r2[0]:.1f}, CPU x{cli[1] / r2[1]:.1f}, RSS x{cli[2] / r2[2]:.1f}")
    for p in paths:
        p.unlink()


_FIT_CHILD = """
import os, sys, time, gc
sys.path.insert(0, sys.argv[1])
import numpy as np
def rss(key):
    for line in open('/proc/self/status'):
        if line.startswith(key):
            return float(line.split()[1]) / 1024.0
paths = sys.argv[3:]
if sys.argv[2].startswith('floor'):
    import pyarrow.parquet as pq
    best = (np.inf, np.inf)
    for _ in range(int(sys.argv[2][5:])):
        t, c = time.perf_counter(), time.process_time()
        cols = [pq.read_table(p, columns=['root_entropy', 'accepted']) for p in paths]
        H = np.concatenate([t_.column(0).to_numpy() for t_ in cols])
        a = np.concatenate([t_.column(1).to_numpy() for t_ in cols])
        o = np.argsort(H)
        best = min(best, (time.perf_counter() - t, time.process_time() - c))
        del cols, H, a, o
    print(best[0], best[1], 0.0)
else:
    from glance_law.io import read_logs
    from glance_law.law import fit_law
    cols = ['root_entropy', 'accepted', 'horizon', 'task', 'prompt_id', 'condition', 'drafter', 'run_id', 'round']
    frame = read_logs(paths, 'rounds', columns=cols).frame
    best = (np.inf, np.inf)
    for _ in range(int(sys.argv[2])):
        gc.collect()
        before = rss('VmRSS')
        open('/proc/self/clear_refs', 'w').write('5')
        t, c = time.perf_counter(), time.process_time()
        fit = fit_law(frame)
        best = min(best, (time.perf_counter() - t, time.process_time() - c))
        added = rss('VmHWM') - before
        if os.environ.get('BENCH_FIT_DUMP'):  # the statistics, for the comparison across commits
            import pickle
            with open(os.environ['BENCH_FIT_DUMP'], 'wb') as fh:
                pickle.dump((fit.to_frame(), dict(fit.curves)), fh)
        del fit
    print(best[0], best[1], added)
"""


def against(paths, ref_dirs: list[str], repeat: int) -> None:
    """Floor, this checkout's fit_law and each REF's fit_law in fresh processes (wall, CPU, added MB)."""
    here = str(Path(__file__).resolve().parents[1])
    out = {}
    runs = [("floor", here, f"floor{max(repeat, 3)}"), ("fit (this checkout)", here, str(repeat))]
    runs += [("fit (" + Path(d).name + ")", d, str(repeat)) for d in ref_dirs]
    dumps = {}
    for label, root, mode in runs:
        env = dict(os.environ)
        if label != "floor":
            dumps[label] = str(Path(paths[0]).parent / f"stats-{len(dumps)}.pkl")
            env["BENCH_FIT_DUMP"] = dumps[label]
        r = subprocess.run([sys.executable, "-c", _FIT_CHILD, root, mode] + [str(p) for p in paths],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            print(f"  ! {label}: {r.stderr.strip()[-400:]}")
            continue
        out[label] = [float(x) for x in r.stdout.split()]
    floor = out.get("floor", [np.nan] * 3)
    for label, (wall, cpu, added) in out.items():
        extra = "" if label == "floor" else (f"   x{wall / floor[0]:.1f} floor wall, x{cpu / floor[1]:.1f} CPU, "
                                             f"+{added:.0f} MB peak RSS")
        print(f"  {label:22s} {wall:6.2f} s wall / {cpu:6.2f} s CPU{extra}")
    mine = "fit (this checkout)"
    for label in dumps:
        if label != mine and label in out and mine in out:
            print(f"  statistics of this checkout vs {label[5:-1]}: max relative difference "
                  f"{max_relative_difference(dumps[mine], dumps[label]):.1e} (table and curves)")
    for f in dumps.values():
        Path(f).unlink(missing_ok=True)


# The command as users run it, at a checkout (sys.argv[1]); the tables it computed are pickled to
# $BENCH_FIT_DUMP (summary, law and sections' frames) for the comparison across commits.
_CMD_CHILD = """
import os, pickle, runpy, sys
root = sys.argv[1]
sys.path.insert(0, root)
sys.argv = ['glance_law.fit'] + sys.argv[2:]
import glance_law.cli.fit as _m
_orig = _m.run_analyses
def _dump(*a, **k):
    out = _orig(*a, **k)
    summary, law, _, sections, _ = out
    frames = {'summary': summary.to_frame(), 'law': None if law is None else law.to_frame()}
    for name, results in sections:
        for i, r in enumerate(results):
            frames[name + ':' + str(i)] = r.to_frame()
    with open(os.environ['BENCH_FIT_DUMP'], 'wb') as fh:
        pickle.dump(frames, fh)
    return out
_m.run_analyses = _dump
runpy.run_module('glance_law.fit', run_name='__main__')
"""
_CMD_FLOOR = ("import sys\nimport numpy as np\nimport pyarrow.parquet as pq\n"
              "cols = [pq.read_table(p, columns=['root_entropy', 'accepted']) for p in sys.argv[1:]]\n"
              "H = np.concatenate([t.column(0).to_numpy() for t in cols])\n"
              "a = np.concatenate([t.column(1).to_numpy() for t in cols])\n"
              "o = np.argsort(H)\n")


def commands(paths, roots: list[tuple[str, str]]) -> None:
    """``python -m glance_law.fit LOGS`` (text, as users run it) of each checkout in a fresh process
    against the command floor (a fresh process that reads the two columns and sorts the entropies);
    then ``import glance_law.fit`` against importing numpy, pandas and pyarrow.parquet. Wall s, CPU s,
    peak RSS MB; the tables of each checkout are compared with the first's (identical or not)."""
    import pickle
    floor = process([str(p) for p in paths], code=_CMD_FLOOR)
    print(f"  command floor (read 2 columns + argsort)  {floor[0]:6.2f} s wall / {floor[1]:6.2f} s CPU / "
          f"{floor[2]:6.0f} MB peak")
    tables = {}
    for label, root in roots:
        dump = Path(paths[0]).parent / f"cmd-{len(tables)}.pkl"
        os.environ["BENCH_FIT_DUMP"] = str(dump)
        try:
            r = process([root] + [str(p) for p in paths], code=_CMD_CHILD)
        finally:
            os.environ.pop("BENCH_FIT_DUMP", None)
        print(f"  command ({label:18s})  {r[0]:6.2f} s wall / {r[1]:6.2f} s CPU / {r[2]:6.0f} MB peak   "
              f"x{r[0] / floor[0]:.1f} floor wall, x{r[1] / floor[1]:.1f} CPU")
        if dump.exists():
            tables[label] = pickle.loads(dump.read_bytes())
            dump.unlink()
    first = next(iter(tables), None)
    for label in list(tables)[1:]:
        print(f"  tables of {first} vs {label}: {frames_identical(tables[first], tables[label])}")
    imp_floor = process([], code="import numpy, pandas, pyarrow.parquet\n")
    print(f"  import floor (numpy, pandas, pyarrow.parquet)  {imp_floor[0]:6.2f} s wall / {imp_floor[1]:6.2f} s CPU")
    for label, root in roots:
        imp = process([], code=f"import sys\nsys.path.insert(0, {root!r})\nimport glance_law.fit\n")
        print(f"  import glance_law.fit ({label:18s})  {imp[0]:6.2f} s wall / {imp[1]:6.2f} s CPU   "
              f"x{imp[0] / imp_floor[0]:.1f} floor wall, x{imp[1] / imp_floor[1]:.1f} CPU")


def frames_identical(a: dict, b: dict) -> str:
    """"identical" when both runs computed the same tables with the same values (NaN = NaN), else which differ."""
    import pandas as pd
    if a.keys() != b.keys():
        return f"different tables: {sorted(a)} vs {sorted(b)}"
    bad = []
    for k in a:
        x, y = a[k], b[k]
        if (x is None) != (y is None) or (x is not None and not (x.shape == y.shape and list(x.columns) ==
                                                                  list(y.columns) and x.equals(y))):
            try:
                pd.testing.assert_frame_equal(x, y, check_exact=False, rtol=1e-12, check_dtype=False)
                bad.append(f"{k} (equal to 1e-12, not bit for bit)")
            except (AssertionError, TypeError, AttributeError):
                bad.append(k)
    return "identical" if not bad else "differ: " + ", ".join(bad)


def max_relative_difference(mine: str, ref: str) -> float:
    """The largest |x - y| / |y| over the numeric cells of two dumped fits' tables and curves (NaN
    against NaN counts as equal; any other mismatch, including a differing label, is inf)."""
    import pickle

    import pandas as pd
    (ta, ca), (tb, cb) = (pickle.loads(Path(p).read_bytes()) for p in (mine, ref))
    if list(ta.columns) != list(tb.columns) or len(ta) != len(tb) or ca.keys() != cb.keys():
        return float("inf")
    worst = 0.0
    for fa, fb in [(ta, tb)] + [(ca[k], cb[k]) for k in ca]:
        for c in fa.columns:
            x, y = fa[c].to_numpy(), fb[c].to_numpy()
            if not (pd.api.types.is_numeric_dtype(fa[c]) and not pd.api.types.is_bool_dtype(fa[c])):
                if not (x.astype(str) == y.astype(str)).all():
                    return float("inf")
                continue
            x, y = x.astype(float), y.astype(float)
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            with np.errstate(divide="ignore", invalid="ignore"):
                d = np.where(same, 0.0, np.abs(x - y) / np.abs(y))
            worst = max(worst, float(np.nan_to_num(d, nan=np.inf).max(initial=0.0)))
    return worst


def paper_reference(n_prompts: int = 400, seed: int = 0) -> None:
    """The paper's reference fit - unweighted least squares of the untruncated geometric mean
    p/(1-p), clipped at 15 - against the MLE, on logs simulated at b0 = 3, b1 = 1 (L = 15)."""
    print("\n== the paper's reference method vs the MLE (truth b0 = 3, b1 = 1, L = 15)")
    for label, spec in (("default entropy mix", TaskSpec("t", 3.0, 1.0)),
                        ("no floor component", TaskSpec("t", 3.0, 1.0, floor_weight=0.0))):
        arr = simulate_arrays([spec], n_prompts=n_prompts, vectors=False, seed=seed)
        H = arr["root_entropy"].astype(float)
        a = arr["accepted"].astype(float)
        L = arr["horizon"].astype(float)

        def clipped(x):
            p = special.expit(x[0] - x[1] * H)
            return a - np.minimum(p / (1.0 - p), 15.0)

        ref = optimize.least_squares(clipped, x0=[1.0, 0.5]).x
        mle = fit_affine_logit(H, a, L)[0]
        print(f"  {label:20s} ({H.size:,} rounds): reference LS b0 = {ref[0]:.3f}, b1 = {ref[1]:.3f} | "
              f"MLE b0 = {mle[0]:.3f}, b1 = {mle[1]:.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7", help="comma-separated round counts (default 1e6,1e7)")
    ap.add_argument("--repeat", type=int, default=3, help="in-process repeats, best taken (default 3)")
    ap.add_argument("--reference-only", action="store_true", help="only the paper-reference comparison")
    ap.add_argument("--against", metavar="REF[,REF...]", help="git commits: time their fit_law against this "
                    "checkout's and the floor (fresh processes, one run)")
    args = ap.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.against is None:
        paper_reference()
    if args.reference_only:
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_fit_") as tmp:
        ref_dirs = []
        for ref in (args.against.split(",") if args.against else []):
            ref_dirs.append(str(Path(tmp) / f"ref-{ref}"))
            os.makedirs(ref_dirs[-1])
            here = Path(__file__).resolve().parents[1]
            archive = subprocess.run(["git", "-C", str(here), "archive", ref], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", ref_dirs[-1]], input=archive.stdout, check=True)
        for s in args.sizes.split(","):
            n = int(float(s))
            bench_size(n, args.repeat if n <= 2_000_000 else 1, Path(tmp), ref_dirs)
    print(f"\nthis process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
