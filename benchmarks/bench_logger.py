"""The round logger's cost and the speculative speedup, measured side by side in one run.

    nice -n 15 .venv/bin/python benchmarks/bench_logger.py                   # embedded default
    nice -n 15 .venv/bin/python benchmarks/bench_logger.py --quick           # 2 tasks, fewer prompts
    .venv/bin/python benchmarks/bench_logger.py --device cuda --threads 0    # on a GPU

1. **Logger on vs off.** The same prompts are decoded with the same drafter, alternating
   logger-on and logger-off per prompt and repetition (so drift of a shared machine hits
   both arms alike). Reported: the ratio of decode-loop wall time (sum over prompts,
   on / off; target <= 1.03) and the ratio including the logger's prompt-end work
   (the one device->host copy, resolution, Parquet rows), with a bootstrap interval over
   prompts.
2. **Speculative vs autoregressive**, per task: mean decode time per emitted token of the
   ``ar`` arm over that of the speculative arm (each against its own baseline, one device).

Models: the embedded default (``logger/default/target`` + ``logger/default/block``, tasks from the
embedded suite) when present; otherwise a small random Llama built on the fly with JSONL
prompts (``--random``), so the script runs anywhere - its speedups then mean little, the
logger ratio still does.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _timed_decode(decode, t, dr, pr, logger, args, pid):
    cbs = []
    if logger is not None:
        logger.begin_prompt(pid, None)
        cbs = [logger]
    if t.device.type == "cuda":
        torch.cuda.synchronize()
    w0 = time.perf_counter()
    res = decode(t, dr, pr, budget=args.budget, branch_k=args.branch_k, max_new_tokens=args.max_new_tokens,
                 callbacks=cbs)
    if t.device.type == "cuda":
        torch.cuda.synchronize()
    wall = (time.perf_counter() - w0) * 1e3
    return res, res.decode_ms, wall


def _boot_ratio(on, off, rng, B=2000):
    on, off = np.asarray(on), np.asarray(off)
    n = len(on)
    idx = rng.integers(0, n, (B, n))
    r = on[idx].sum(1) / off[idx].sum(1)
    return float(on.sum() / off.sum()), float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def _setup(args):
    from glance_log.models import load_target
    from glance_log.run import default_block, default_model

    tmp = Path(tempfile.mkdtemp(prefix="bench-logger-"))
    if not args.random and (default_model() / "config.json").exists():
        t = load_target(default_model(), args.dtype, args.device)
        head = default_block() if (default_block() / "config.json").exists() else None
        from glance_log.tasks import load_items
        tasks = args.tasks or ["caption", "textvqa", "infovqa", "docvqa", "chartqa"]
        items = {task: load_items(task, None, n=args.n, seed=0) for task in tasks}
        return t, head, items, tmp, f"default models in {default_model().parent} (embedded suite items)"
    from _logger_fixtures import CORPUS, make_block_head, make_llama

    mp = make_llama(tmp / "target", hidden=args.hidden, layers=args.layers, init=1.0)
    head = make_block_head(tmp / "head", mp, horizon=8)
    t = load_target(mp, args.dtype, args.device)
    from glance_log.tasks import TaskItem
    items = {"random": [TaskItem(prompt_id=f"r{i}", task="docvqa", prompt=CORPUS[i % len(CORPUS)],
                                 reference=CORPUS[i % len(CORPUS)]) for i in range(args.n)]}
    return t, head, items, tmp, f"random llama (hidden {args.hidden}, {args.layers} layers)"


def top2_figures(vocab: int = 262_144, rows: int = 3, repeat: int = 300) -> dict:
    """ms per call of glance_log.record.top2 against torch.topk(rows, 2) on (rows, vocab) fp32 logits,
    side by side in one process (one thread), and that they agree."""
    import time

    from glance_log.record import top2
    x = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3
    res = {}
    for name, fn in (("torch.topk", lambda: torch.topk(x, 2, dim=-1).values), ("record.top2", lambda: top2(x))):
        fn()
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        res[name] = (time.perf_counter() - t0) / repeat * 1e3
    assert torch.equal(top2(x), torch.topk(x, 2, dim=-1).values)
    print(f"top-2 of {rows} rows x {vocab:,}: torch.topk {res['torch.topk']:.3f} ms, record.top2 "
          f"{res['record.top2']:.3f} ms ({res['torch.topk'] / res['record.top2']:.1f}x)")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top2", action="store_true", help="only the top-2 micro-benchmark (record.top2 vs torch.topk)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--drafter", default=None, help="default: block when a head exists, else pld")
    ap.add_argument("--budget", type=int, default=63)
    ap.add_argument("--branch-k", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--n", type=int, default=8, help="prompts per task")
    ap.add_argument("--repeat", type=int, default=3, help="on/off repetitions per prompt")
    ap.add_argument("--tasks", nargs="*", default=None)
    ap.add_argument("--random", action="store_true", help="use a random Llama even if the default exists")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's default)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeat, args.max_new_tokens = 3, 2, 64
        args.tasks = args.tasks or ["caption", "docvqa"]
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.top2:
        top2_figures()
        return 0

    from glance_log.decode import decode
    from glance_log.drafters import make_drafter
    from glance_log.record import RoundLogger

    t, head, items, tmp, what = _setup(args)
    name = args.drafter or ("block" if head is not None else "pld")
    dr = make_drafter(name, t, draft_model=head, branch_k=args.branch_k)
    ar = make_drafter("ar", t)
    rng = np.random.default_rng(0)
    print(f"models: {what}; device {t.device}, {args.dtype}, drafter {name}, budget {args.budget}, "
          f"k {args.branch_k}, max_new_tokens {args.max_new_tokens}, torch threads {torch.get_num_threads()}")
    # warm-up
    first = next(iter(items.values()))[0]
    decode(t, dr, t.encode(first.prompt), budget=args.budget, branch_k=args.branch_k, max_new_tokens=8)

    # 1. logger on vs off (all tasks' prompts pooled), alternating order
    logger = RoundLogger(tmp / "logs", run_id="bench", task="bench", tokenizer=t.tokenizer, drafter=name,
                         flush_rows=10**6, flush_seconds=1e9)
    on_loop, off_loop, on_wall, off_wall = [], [], [], []
    prompts = [(task, it, t.encode(it.prompt)) for task, its in items.items() for it in its]
    for rep in range(args.repeat):
        for i, (task, it, pr) in enumerate(prompts):
            order = (True, False) if (i + rep) % 2 == 0 else (False, True)
            for on in order:
                _, loop_ms, wall = _timed_decode(decode, t, dr, pr, logger if on else None, args,
                                                 f"{it.prompt_id}-{rep}")
                (on_loop if on else off_loop).append(loop_ms)
                (on_wall if on else off_wall).append(wall)
    logger.flush()
    # direct measure: time spent inside the per-round hook, as a share of the logged loops
    inside = [0.0]
    orig = logger.on_round

    def timed(ev):
        if t.device.type == "cuda":
            torch.cuda.synchronize()
        h0 = time.perf_counter()
        orig(ev)
        if t.device.type == "cuda":
            torch.cuda.synchronize()
        inside[0] += time.perf_counter() - h0

    logger.on_round = timed
    loop_total = 0.0
    for task, it, pr in prompts:
        _, loop_ms, _ = _timed_decode(decode, t, dr, pr, logger, args, f"{it.prompt_id}-hook")
        loop_total += loop_ms
    logger.on_round = orig
    hook_share = inside[0] * 1e3 / loop_total
    r_loop = _boot_ratio(on_loop, off_loop, rng)
    r_wall = _boot_ratio(on_wall, off_wall, rng)
    print(f"\nlogger on/off, {len(on_loop)} paired decodes:")
    print(f"  decode loop   ratio {r_loop[0]:.4f}  95% bootstrap [{r_loop[1]:.4f}, {r_loop[2]:.4f}]  (target <= 1.03)")
    print(f"  incl. prompt-end resolution + rows  ratio {r_wall[0]:.4f}  [{r_wall[1]:.4f}, {r_wall[2]:.4f}]")
    print(f"  direct: time inside the per-round hook = {100 * hook_share:.2f}% of the decode loop "
          f"(synchronised around the hook on CUDA, so an upper bound there)")

    # 2. speculative vs ar per task
    print("\nspeculative vs ar (decode ms per emitted token; speedup = ar / spec):")
    print(f"  {'task':<10} {'prompts':>7} {'tau':>6} {'ar ms/tok':>10} {'spec ms/tok':>11} {'speedup':>8}")
    per_task = {}
    for task, its in items.items():
        a_ms, s_ms, a_tok, s_tok, acc, rounds = 0.0, 0.0, 0, 0, 0, 0
        for it in its:
            pr = t.encode(it.prompt)
            for rep in range(args.repeat):
                for arm in ((dr, ar) if rep % 2 == 0 else (ar, dr)):
                    res = decode(t, arm, pr, budget=args.budget, branch_k=args.branch_k,
                                 max_new_tokens=args.max_new_tokens)
                    if arm is ar:
                        a_ms += res.decode_ms
                        a_tok += max(len(res.tokens) - 1, 1)
                    else:
                        s_ms += res.decode_ms
                        s_tok += max(len(res.tokens) - 1, 1)
                        acc += int(np.sum(res.accepted)) + res.rounds
                        rounds += res.rounds
        tau = acc / rounds if rounds else float("nan")
        per_task[task] = {"tau": tau, "ar_ms_per_token": a_ms / a_tok, "spec_ms_per_token": s_ms / s_tok,
                          "speedup": (a_ms / a_tok) / (s_ms / s_tok)}
        d = per_task[task]
        print(f"  {task:<10} {len(its):>7} {tau:>6.2f} {d['ar_ms_per_token']:>10.3f} {d['spec_ms_per_token']:>11.3f} "
              f"{d['speedup']:>8.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"models": what, "device": str(t.device), "drafter": name,
                                               "logger_ratio_loop": r_loop, "logger_ratio_wall": r_wall,
                                               "hook_share_of_loop": hook_share,
                                               "per_task": per_task}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
