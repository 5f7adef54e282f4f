"""The dense path's cost on the real model (Gemma 3 270M), side by side in one run.

    /work/notes/cpu-slot .venv/bin/python benchmarks/bench_dense.py --prompts 8 --max-new-tokens 48 \
        --block-head HEAD --json figures.json

1. **Greedy decoding, batch 1 against batched.** The same first-turn Spec-Bench prompts (one per
   category, the first ``--prompts``) decoded greedily by :func:`glance_log.dense.greedy_outputs`
   one at a time and ``--batch`` at a time, the two in alternating order over ``--repeats`` rounds;
   tokens/s (wall) and CPU seconds of each, and whether the outputs agree.
2. **Rounds logged per CPU second, dense against live**, for three drafters: prompt lookup (10-token
   chain), early exit at layer 6 (5-token chain) and the block head (16-node tree, k = 4; a random
   head of the target's width unless ``--block-head``). Live: ``glance_log.run.run`` per drafter
   (``glance-log`` with the logger on). Dense: one batched greedy pass, one forced pass with every
   drafter's proposals (``glance_log.dense``), then ``glance_log.rounds`` for each shape: the same
   rounds (tests/test_dense_real.py checks them equal). Reported: rounds, CPU seconds (this
   process's user + system time), rounds per CPU second and the ratio dense/live (goal >= 10).

Run it under the CPU slot (one thread) so that wall time is not another job's.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

QFILE = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "spec-bench" / "vase" / "question.jsonl.gz"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn):
    w0, c0 = time.perf_counter(), cpu()
    out = fn()
    return out, time.perf_counter() - w0, cpu() - c0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(QFILE))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--block-head", default=None)
    ap.add_argument("--skip-live", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    from glance_log import dense as DN
    from glance_log import rounds as RD
    from glance_log.heads import BlockHead, BlockHeadConfig
    from glance_log.models import load_target
    from glance_log.questions import encode_conversation, load_questions
    from glance_log.run import RunConfig, run

    torch.set_num_threads(1)
    qs = [q for q in load_questions(args.data, "all", n=1, seed=0, turns=1)][:args.prompts]
    target = load_target("gemma-3-270m", device="cpu")
    prompts = [encode_conversation(target, q.turns[:1], []).prompt_ids for q in qs]
    stop = DN.StopRule(None)
    fig = {"prompts": [q.prompt_id(0) for q in qs], "max_new_tokens": args.max_new_tokens, "batch": args.batch}
    # 1. batch 1 against batched, alternating
    res = {"batch1": [], "batched": []}
    outs = {}
    for rep in range(args.repeats):
        order = [("batch1", 1), ("batched", args.batch)]
        for name, b in (order if rep % 2 == 0 else order[::-1]):
            o, w, c = timed(lambda b=b: DN.greedy_outputs(target, prompts, args.max_new_tokens, stop, batch=b))
            res[name].append({"wall_s": w, "cpu_s": c, "tokens": sum(map(len, o))})
            outs[name] = o
    for name, rows in res.items():
        tok = sum(r["tokens"] for r in rows)
        fig[name] = {"tokens": tok, "wall_s": sum(r["wall_s"] for r in rows), "cpu_s": sum(r["cpu_s"] for r in rows),
                     "tokens_per_s": tok / sum(r["wall_s"] for r in rows)}
    fig["batched_speedup"] = fig["batched"]["tokens_per_s"] / fig["batch1"]["tokens_per_s"]
    fig["outputs_agree"] = sum(a == b for a, b in zip(outs["batch1"], outs["batched"]))
    print(json.dumps(fig, indent=1), flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="bench-dense-"))
    head = args.block_head
    if head is None:
        torch.manual_seed(0)
        BlockHead(BlockHeadConfig(hidden_size=target.text_config.hidden_size, horizon=8, n_blocks=1,
                                  inner_size=256)).save_pretrained(tmp / "head")
        head = str(tmp / "head")
    target.close()
    items = list(qs)
    shapes = {"pld": ("pld", dict(drafter="pld", budget=63, branch_k=1), dict(budget=63, branch_k=1)),
              "early_exit-6": ("early_exit-6", dict(drafter="early_exit", exit_layer=6, draft_len=5, budget=5,
                                                    branch_k=1), dict(budget=5, branch_k=1)),
              "block": ("block", dict(drafter="block", draft_model=head, budget=16, branch_k=4),
                        dict(budget=16, branch_k=4))}
    # 2. dense: one pass, then the rounds of each shape
    cfg = DN.DenseConfig(model="gemma-3-270m", max_new_tokens=args.max_new_tokens, pld_len=10, exit_layers=(6,),
                         exit_len=5, block_head=head, k=4, batch=args.batch, out=str(tmp / "dense"),
                         progress=False, items=items)
    st, w_d, c_d = timed(lambda: DN.run_dense(cfg))
    dense = {"wall_s": w_d, "cpu_s": c_d, "tokens": st["tokens"], "redecodes": st["redecodes"], "drafters": {}}
    for name, (label, _, conv) in shapes.items():
        r, w, c = timed(lambda label=label, conv=conv, name=name: RD.convert(tmp / "dense", label, tmp / f"conv-{name}",
                                                                             **conv))
        dense["drafters"][name] = {"rounds": r["rounds"], "convert_cpu_s": c, "tau": r["tau"]}
    total_rounds = sum(d["rounds"] for d in dense["drafters"].values())
    total_cpu = c_d + sum(d["convert_cpu_s"] for d in dense["drafters"].values())
    dense["rounds"] = total_rounds
    dense["rounds_per_cpu_s"] = total_rounds / total_cpu
    fig["dense"] = dense
    print(json.dumps(dense, indent=1), flush=True)
    if not args.skip_live:
        live = {}
        for name, (label, kw, _) in shapes.items():
            s, w, c = timed(lambda kw=kw, name=name: run(RunConfig(task="all", model="gemma-3-270m",
                                                                   max_new_tokens=args.max_new_tokens,
                                                                   out=str(tmp / f"live-{name}"), progress=False,
                                                                   items=items, **kw)))
            arm = s["arms"][0]
            live[name] = {"rounds": arm["rounds"], "wall_s": w, "cpu_s": c, "tau": arm["tau"],
                          "rounds_per_cpu_s": arm["rounds"] / c}
        lr = sum(v["rounds"] for v in live.values())
        lc = sum(v["cpu_s"] for v in live.values())
        fig["live"] = {"drafters": live, "rounds": lr, "cpu_s": lc, "rounds_per_cpu_s": lr / lc}
        fig["dense_over_live_rounds_per_cpu_s"] = dense["rounds_per_cpu_s"] / (lr / lc)
        print(json.dumps(fig["live"], indent=1), flush=True)
        print(f"rounds per CPU second: dense {dense['rounds_per_cpu_s']:.2f}, live {lr / lc:.2f}, "
              f"ratio {fig['dense_over_live_rounds_per_cpu_s']:.1f}x", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
