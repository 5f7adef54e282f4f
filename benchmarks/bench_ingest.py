"""Importing every file of ../shared/realdata against the floor of merely parsing its lines.

    nice -n 15 .venv/bin/python benchmarks/bench_ingest.py [--repeat 5] [--data ../shared/realdata]

In one run, alternating, ``--repeat`` times each (fastest kept, in wall and in CPU seconds apart):

* ``floor``  : read each file, gunzip it and ``json.loads`` every line (what any importer must do)
* ``import`` : ``glance_law.data.importers.import_logs(files, skip_bad=True)`` - detection, the
               per-format checks, rounds and prompt frames, notes (the per-file cache cleared)
* ``read``   : ``glance_law.io.read_logs(files, skip_bad=True)`` - the import plus the contract
               checks and typing the readers apply (what ``python -m glance_law.fit`` pays)

and prints wall and CPU seconds (``time.process_time``: what the shared machine's load does not inflate),
rounds per second and the ratios to the floor. Target: import within 2x of the floor's CPU seconds.
"""
from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path


def floor(files) -> int:
    n = 0
    for f in files:
        raw = f.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        for line in raw.split(b"\n"):
            if line.strip():
                try:
                    json.loads(line)
                    n += 1
                except ValueError:
                    pass
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "realdata"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import glance_law.data.importers as imp
    from glance_law.io import read_logs
    files = sorted(p for p in Path(args.data).rglob("*") if p.is_file() and imp.is_foreign(p))
    if not files:
        raise SystemExit(f"no importable files under {args.data}")
    steps = {"floor": lambda: floor(files), "import": lambda: imp.import_logs(files, skip_bad=True),
             "read": lambda: read_logs(files, skip_bad=True)}
    wall = dict.fromkeys(steps, float("inf"))
    cpu = dict.fromkeys(steps, float("inf"))
    got = {}
    for _ in range(args.repeat):
        for k, fn in steps.items():
            imp._CACHE.clear()
            t, c = time.perf_counter(), time.process_time()
            got[k] = fn()
            cpu[k] = min(cpu[k], time.process_time() - c)
            wall[k] = min(wall[k], time.perf_counter() - t)
    res, lines = got["import"], got["floor"]
    rounds = res.rounds_table.num_rows
    print(f"{len(files)} files, {lines} JSON lines, {rounds} rounds imported ({len(res.skipped)} files refused)")
    print(f"{'step':8s} {'wall s':>8s} {'CPU s':>8s} {'rounds/s':>12s} {'x floor wall':>13s} {'x floor CPU':>12s}")
    for k in steps:
        print(f"{k:8s} {wall[k]:8.3f} {cpu[k]:8.3f} {rounds / cpu[k]:12.0f} {wall[k] / wall['floor']:13.2f} "
              f"{cpu[k] / cpu['floor']:12.2f}")


if __name__ == "__main__":
    main()
