"""Importing every file of ../shared/realdata against the floor of merely parsing its lines.

    nice -n 15 .venv/bin/python benchmarks/bench_ingest.py [--repeat 5] [--data ../shared/realdata]

In one run, alternating, ``--repeat`` times each (fastest kept):

* ``floor``  : read each file, gunzip it and ``json.loads`` every line (what any importer must do)
* ``import`` : ``glance_law.data.importers.import_logs(files, skip_bad=True)`` - detection, the
               per-format checks, rounds and prompt frames, notes (the per-file cache cleared)
* ``read``   : ``glance_law.io.read_logs(files, skip_bad=True)`` - the import plus the contract
               checks and typing the readers apply (what ``python -m glance_law.fit`` pays)

and prints seconds, rounds per second and the ratio to the floor. Target: import within 2x of the floor.
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
    best = {"floor": float("inf"), "import": float("inf"), "read": float("inf")}
    rounds = lines = 0
    for _ in range(args.repeat):
        t = time.perf_counter()
        lines = floor(files)
        best["floor"] = min(best["floor"], time.perf_counter() - t)
        imp._CACHE.clear()
        t = time.perf_counter()
        res = imp.import_logs(files, skip_bad=True)
        best["import"] = min(best["import"], time.perf_counter() - t)
        rounds = len(res.rounds)
        imp._CACHE.clear()
        t = time.perf_counter()
        read_logs(files, skip_bad=True)
        best["read"] = min(best["read"], time.perf_counter() - t)
    print(f"{len(files)} files, {lines} JSON lines, {rounds} rounds imported ({len(res.skipped)} files refused)")
    print(f"{'step':8s} {'seconds':>8s} {'rounds/s':>12s} {'x floor':>8s}")
    for k, v in best.items():
        print(f"{k:8s} {v:8.3f} {rounds / v:12.0f} {v / best['floor']:8.2f}")


if __name__ == "__main__":
    main()
