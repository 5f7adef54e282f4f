"""Self-distil the block head on the target's own greedy outputs.

    python -m glance_log.train.block --target logger/default/target --out logger/default/block

1. Greedy-decode (fp32) ``--prompts`` train-partition prompts of every suite task
   (held-out prompts are never used) with :func:`glance_log.train.evaluate.batched_greedy`.
2. One teacher-forced pass over prompt + output gives the final hidden state (the input
   of ``lm_head``, what the decoder hands the drafter) at every position. A training row
   is a position ``t`` whose next token (the round's root ``b = x[t+1]``) is generated and
   is not ``<eos>``; its targets are ``x[t+1+j]`` for offsets ``j = 1..15`` (offsets past
   the end of the output are masked). Outputs whose teacher-forced argmax disagrees with
   the decoded token (batched-arithmetic near-ties) are cut at the first disagreement, so
   every target is the target's own greedy token; the count is reported.
3. Train :class:`glance_log.heads.BlockHead` (the target's embeddings and ``lm_head``
   shared and frozen) with the per-offset cross-entropy to the greedy token, AdamW,
   cosine decay; prompts are split 90/10 by prompt for validation (top-1 accuracy per
   offset and width-1 chain acceptance per task are reported and stored in
   ``training.json``; the final step is saved, no selection).

The head stays smaller than the target (asserted): ``kind="medusa"``, one residual
block per offset with an inner width of 192 by default.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from .evaluate import batched_greedy
from .record import command_line, write_training_record

TASK_PROMPTS = {"caption": 1.0, "textvqa": 1.0, "infovqa": 1.0, "docvqa": 1.0, "chartqa": 1.0, "scienceqa": 0.25}


def collect(model, tok, n_per_task: int, seed: int = 0, horizon: int = 15, max_new: int = 48):
    """Rows (hidden (N, d), root (N,), targets (N, L) with -100 masked, task (N,), prompt (N,))."""
    import torch

    from .. import suite

    H, R, Y, TK, PR = [], [], [], [], []
    cut = 0
    pid = 0
    eos = tok.eos_token_id
    for task, share in TASK_PROMPTS.items():
        exs = suite.load_examples(task, "train", max(1, int(n_per_task * share)), seed + 2000)
        prompts = [tok(suite.format_prompt(e.context, e.qas[0].question))["input_ids"] for e in exs]
        outs, _ = batched_greedy(model, prompts, max_new=max_new, eos=eos)
        with torch.no_grad():
            for p, o in zip(prompts, outs):
                seq = p + o
                x = torch.tensor([seq])
                h = model.model(input_ids=x).last_hidden_state[0]
                am = model.lm_head(h).argmax(-1)
                P, n = len(p), len(seq)
                # keep the longest prefix of the output that teacher-forced argmax reproduces
                good = n
                for i in range(P, n):
                    if int(am[i - 1]) != seq[i]:
                        good = i
                        cut += 1
                        break
                for t in range(P - 1, good - 2):
                    root = seq[t + 1]
                    if root == eos:
                        break
                    tgt = [seq[t + 1 + j] if t + 1 + j < good else -100 for j in range(1, horizon + 1)]
                    H.append(h[t].clone())
                    R.append(root)
                    Y.append(tgt)
                    TK.append(task)
                    PR.append(pid)
                pid += 1
    return (torch.stack(H), torch.tensor(R), torch.tensor(Y), np.array(TK), np.array(PR), cut)


def chain_accept(top, y):
    """Width-1 chain acceptance: leading offsets whose top-1 equals the target (masked = stop)."""
    ok = (top == y) & (y >= 0)
    return ok.long().cumprod(-1).sum(-1).float()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glance_log.train.block", description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="logger/default/target")
    ap.add_argument("--out", default="logger/default/block")
    ap.add_argument("--prompts", type=int, default=3000, help="train prompts per task (scienceqa a quarter)")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--n-blocks", type=int, default=1)
    ap.add_argument("--inner", type=int, default=192)
    ap.add_argument("--share-blocks", action="store_true")
    ap.add_argument("--horizon", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared machine two threads spin and run ~6x slower)")
    ap.add_argument("--cache", default=None, help="save/load the collected rows here (a .pt file)")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..heads import BlockHead, BlockHeadConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.target)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    t0 = time.time()
    if args.cache and Path(args.cache).exists():
        d = torch.load(args.cache, weights_only=False)
        Hs, R, Y, TK, PR, cut = d["H"], d["R"], d["Y"], d["TK"], d["PR"], d["cut"]
    else:
        Hs, R, Y, TK, PR, cut = collect(model, tok, args.prompts, args.seed, args.horizon)
        if args.cache:
            torch.save({"H": Hs, "R": R, "Y": Y, "TK": TK, "PR": PR, "cut": cut}, args.cache)
    print(f"collected {len(R)} rows from {PR.max() + 1} prompts in {time.time() - t0:.0f}s "
          f"({cut} outputs cut at a batched near-tie)", flush=True)
    rng = np.random.default_rng(args.seed)
    prompts = np.unique(PR)
    val_prompts = set(rng.choice(prompts, size=max(1, len(prompts) // 10), replace=False).tolist())
    is_val = np.array([p in val_prompts for p in PR])
    tr, va = np.flatnonzero(~is_val), np.flatnonzero(is_val)

    cfg = BlockHeadConfig(hidden_size=model.config.hidden_size, horizon=args.horizon, n_blocks=args.n_blocks,
                          inner_size=args.inner, share_blocks=args.share_blocks)
    head = BlockHead(cfg)
    n_head, n_target = head.num_parameters(), sum(p.numel() for p in model.parameters())
    if n_head > n_target:
        print(f"block head has {n_head} parameters, more than the target's {n_target}; shrink --inner", file=sys.stderr)
        return 2
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    g = torch.Generator().manual_seed(args.seed)
    tr_t = torch.from_numpy(tr)
    for step in range(args.steps):
        lr = args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for grp in opt.param_groups:
            grp["lr"] = lr
        b = tr_t[torch.randint(len(tr_t), (args.batch,), generator=g)]
        logits = head.logits(Hs[b], R[b], model)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), Y[b].reshape(-1),
                                                 ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if (step + 1) % 500 == 0 or step + 1 == args.steps:
            print(f"step {step + 1} loss {float(loss.detach()):.3f}", flush=True)
    head.eval()
    with torch.no_grad():
        top = torch.cat([head.logits(Hs[va[i:i + 1024]], R[va[i:i + 1024]], model).argmax(-1)
                         for i in range(0, len(va), 1024)])
    yv = Y[va]
    valid = yv >= 0
    per_offset = ((top == yv) & valid).sum(0).float() / valid.sum(0).clamp_min(1).float()
    acc = chain_accept(top, yv).numpy()
    per_task = {t: float(acc[TK[va] == t].mean()) for t in TASK_PROMPTS if (TK[va] == t).any()}
    report = {"rows": int(len(R)), "train_rows": int(len(tr)), "val_rows": int(len(va)), "cut_outputs": int(cut),
              "head_parameters": n_head, "target_parameters": n_target,
              "val_top1_per_offset": [round(float(v), 4) for v in per_offset],
              "val_chain_accept_per_task": per_task,
              "recipe": {k: v for k, v in vars(args).items() if k != "cache"},
              "command": command_line("python -m glance_log.train.block", argv)}
    print(json.dumps({k: report[k] for k in ("val_top1_per_offset", "val_chain_accept_per_task",
                                             "head_parameters", "target_parameters")}), flush=True)
    out = Path(args.out)
    head.save_pretrained(out)
    write_training_record(out, report)
    print(f"saved {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
