"""Benchmark (issue 18): reducing 10^7 rounds read from a local S3 protocol server against the
same files on local disk, same engine, side by side in one run.

    nice -n 15 python benchmarks/bench_s3.py                       # 10^7 rounds, arrow engine
    nice -n 15 python benchmarks/bench_s3.py --rounds 1e6 --engines arrow,duckdb --repeat 2

The logs are simulated as in benchmarks/bench_reduce.py (``generate``: five tasks, files of
5 million rounds), written to ``--dir`` and uploaded to moto's S3 server (``pip install
'moto[server]'``), which runs in a separate process on 127.0.0.1 (loopback: no network, so
the ratio measures the S3 protocol and the server, not a WAN; a real store adds latency per
request and bandwidth limits). Each timing is ``reduce_logs(...)`` in this process, in the
order disk, store, store, disk (ABBA) per repeat; the table gives wall seconds of each and
the store/disk ratio of the summed times. Nothing is asserted; the figures go in
docs/scale.md ("Logs in object storage").
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SERVER = """
import logging, sys, time
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.server import ThreadedMotoServer
s = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
s.start()
print("up", flush=True)
while True:
    time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def same_cells(a, b) -> str:
    """Counts identical and float sums equal to 1e-12 (relative): files are reduced in parallel
    threads, so float sums differ by summation order from run to run, on disk as in a store."""
    import numpy as np
    floats = [c for c in a.columns if a[c].dtype.kind == "f"]
    keys = [c for c in a.columns if c not in floats]
    a = a.sort_values(keys, kind="stable").reset_index(drop=True)
    b = b.sort_values(keys, kind="stable").reset_index(drop=True)
    if len(a) != len(b) or not a[keys].astype(str).equals(b[keys].astype(str)):
        return "no (the counts differ)"
    ok = all(np.allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=1e-12, atol=0, equal_nan=True) for c in floats)
    return "yes (counts identical, sums to 1e-12)" if ok else "no (sums differ beyond 1e-12)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=float, default=1e7)
    ap.add_argument("--engines", default="arrow")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dir", default="/tmp/glance-bench-s3")
    args = ap.parse_args(argv)
    from bench_reduce import generate
    n = int(args.rounds)
    folder = Path(args.dir) / f"r{n}"
    t0 = time.perf_counter()
    paths = generate(folder, n)
    print(f"logs: {len(paths)} files, {sum(p.stat().st_size for p in paths) / 1e6:.0f} MB "
          f"({time.perf_counter() - t0:.0f} s to generate or find)")

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "up"
        endpoint = f"http://127.0.0.1:{port}"
        os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
        import boto3
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        t0 = time.perf_counter()
        for p in paths:
            s3.upload_file(str(p), "bench", f"logs/{p.name}")
        print(f"upload to the local S3 server: {time.perf_counter() - t0:.1f} s")

        from glance_law.scale.engines import reduce_logs
        load = os.getloadavg()[0]
        print(f"load average before timing: {load:.2f} (2 shared cores: rerun when quiet)")
        print("| engine | source | wall s (each) | sum |")
        print("|---|---|---|---|")
        for engine in args.engines.split(","):
            times = {"disk": [], "s3": []}
            cells = {}
            for _ in range(args.repeat):
                for src in ("disk", "s3", "s3", "disk"):
                    where = str(folder) if src == "disk" else "s3://bench/logs/"
                    t = time.perf_counter()
                    red = reduce_logs(where, engine)
                    times[src].append(time.perf_counter() - t)
                    cells[src] = red.cells
            same = same_cells(cells["disk"], cells["s3"])
            for src in ("disk", "s3"):
                print(f"| {engine} | {src} | {', '.join(f'{x:.2f}' for x in times[src])} | {sum(times[src]):.2f} |")
            print(f"{engine}: store/disk = {sum(times['s3']) / sum(times['disk']):.2f}x "
                  f"({red.rounds:,} rounds, {len(red.cells):,} cells; same cells: {same})", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        server.kill()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
