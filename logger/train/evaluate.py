"""Measure the embedded default on held-out suite items.

    python -m glance_log.train.evaluate --model logger/default/target --tasks docvqa chartqa --n 100

For each task: greedy-decode ``--n`` held-out items (fp32, no drafter), and report

* ``exact``: the share of items whose greedy answer equals one of the item's valid
  answers token for token (its ``<eos>`` included), with a Wilson 95 % interval;
* ``value``: the share whose answer contains the looked-up value verbatim (grounded
  tasks only; the retrieval part of ``exact``);
* ``entropy``: the mean next-token entropy (nats) over the generated tokens, with a
  prompt-clustered 95 % interval (items are the clusters);
* with ``--block PATH``: the block head's width-1 chain acceptance on the same greedy
  outputs (the number of leading offsets whose top-1 equals the target's token,
  averaged over the generated positions), a quick proxy for what the decoder logs.

The greedy loop is batched (left padding, attention mask, explicit positions, KV cache).
"""
from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from ..items import TASKS

GROUNDED = ("infovqa", "docvqa", "chartqa")


def _cache_kw() -> str:
    """``cache`` (transformers >= 5.x) or ``past_key_values`` (older)."""
    import inspect

    from transformers import LlamaForCausalLM

    return "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"


_CACHE_KW = "cache"


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def batched_greedy(model, prompts: list[list[int]], max_new: int = 48, eos: int = 3, batch: int = 32,
                   pad: int = 0):
    """Greedy continuations (lists of ids, ``eos`` included when reached) and per-token entropies.

    Batches of left-padded prompts with an attention mask, explicit positions and a KV
    cache; padded slots are masked out of every softmax, so each row follows its own
    greedy path (callers that need bit-exactness re-check with a teacher-forced pass)."""
    import torch
    from transformers import DynamicCache

    global _CACHE_KW
    _CACHE_KW = _cache_kw()
    outs, ents = [None] * len(prompts), [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    with torch.no_grad():
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            lens = torch.tensor([len(prompts[i]) for i in idx])
            T = int(lens.max())
            ids = torch.full((len(idx), T), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), T), dtype=torch.long)
            for r, i in enumerate(idx):
                ids[r, T - lens[r]:] = torch.tensor(prompts[i])
                mask[r, T - lens[r]:] = 1
            pos = (mask.cumsum(-1) - 1).clamp_min(0)
            cache = DynamicCache()
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **{_CACHE_KW: cache})
            last = out.logits[:, -1].float()
            nextpos = lens.clone()
            done = torch.zeros(len(idx), dtype=torch.bool)
            gen = [[] for _ in idx]
            hs = [[] for _ in idx]
            for _ in range(max_new):
                logp = torch.log_softmax(last, -1)
                H = -(logp.exp() * logp).sum(-1)
                nxt = last.argmax(-1)
                for r in range(len(idx)):
                    if not done[r]:
                        gen[r].append(int(nxt[r]))
                        hs[r].append(float(H[r]))
                        if int(nxt[r]) == eos:
                            done[r] = True
                if bool(done.all()):
                    break
                mask = torch.cat([mask, torch.ones((len(idx), 1), dtype=torch.long)], 1)
                out = model(input_ids=nxt.view(-1, 1), attention_mask=mask, position_ids=nextpos.view(-1, 1),
                            use_cache=True, **{_CACHE_KW: cache})
                last = out.logits[:, -1].float()
                nextpos = nextpos + 1
            for r, i in enumerate(idx):
                outs[i], ents[i] = gen[r], hs[r]
    return outs, ents


def chain_acceptance(model, head, seqs: list[list[int]], starts: list[int], eos: int = 3):
    """Per sequence: mean over its draft rounds-to-be (positions whose root is a generated
    non-final token) of the number of leading offsets whose top-1 equals the sequence."""
    import torch

    res = []
    with torch.no_grad():
        for seq, p in zip(seqs, starts):
            x = torch.tensor([seq])
            h = model.model(input_ids=x).last_hidden_state[0]
            ts = list(range(p - 1, len(seq) - 2))
            if not ts:
                res.append(float("nan"))
                continue
            roots = torch.tensor([seq[t + 1] for t in ts])
            top = head.logits(h[ts], roots, model).argmax(-1)  # (n, L)
            acc = []
            for r, t in enumerate(ts):
                a = 0
                for j in range(head.horizon):
                    pos = t + 2 + j
                    if pos >= len(seq) or int(top[r, j]) != seq[pos]:
                        break
                    a += 1
                acc.append(a)
            res.append(float(np.mean(acc)))
    return res


def evaluate(model_path, tasks, n=100, seed=0, block=None, max_new=48, threads=2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .. import suite

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    head = None
    if block:
        from ..heads import BlockHead

        head = BlockHead.from_pretrained(block)
    rows = {}
    for task in tasks:
        exs = suite.load_examples(task, "heldout", n, seed)
        prompts = [tok(suite.format_prompt(e.context, e.qas[0].question))["input_ids"] for e in exs]
        outs, ents = batched_greedy(model, prompts, max_new=max_new, eos=tok.eos_token_id)
        exact, value = [], []
        for e, o in zip(exs, outs):
            valid = [tok(" " + a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                     for a in e.qas[0].alternatives]
            exact.append(o in valid)
            if task in GROUNDED:
                vals = sorted((v for _, v in e.fields if v in e.qas[0].answer), key=len)
                v_ids = tok(" " + vals[-1], add_special_tokens=False)["input_ids"] if vals else []
                s = " ".join(map(str, o)) + " "
                value.append(bool(v_ids) and (" ".join(map(str, v_ids)) + " ") in s)
        k = int(np.sum(exact))
        lo, hi = wilson(k, len(exact))
        per_item = np.array([np.mean(h) for h in ents])
        m, se = per_item.mean(), per_item.std(ddof=1) / math.sqrt(len(per_item)) if len(per_item) > 1 else 0.0
        from scipy import stats

        tq = stats.t.ppf(0.975, max(1, len(per_item) - 1))
        row = {"n": len(exact), "exact": k / len(exact), "exact_lo": lo, "exact_hi": hi,
               "entropy": float(m), "entropy_lo": float(m - tq * se), "entropy_hi": float(m + tq * se),
               "answer_tokens": float(np.mean([len(o) for o in outs]))}
        if value:
            row["value"] = float(np.mean(value))
        if head is not None:
            acc = chain_acceptance(model, head, [p + o for p, o in zip(prompts, outs)], [len(p) for p in prompts])
            row["chain_accept"] = float(np.nanmean(acc))
        rows[task] = row
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glance_log.train.evaluate",
                                 description="Held-out exact match, value retrieval and entropy of the default target.")
    ap.add_argument("--model", default="logger/default/target")
    ap.add_argument("--block", default=None, help="also measure this block head's chain acceptance")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared machine two threads spin and run ~6x slower)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    try:
        rows = evaluate(args.model, args.tasks, args.n, args.seed, args.block, threads=args.threads)
    except (OSError, ValueError) as e:
        print(f"evaluate: {e}".splitlines()[0], file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    import pandas as pd

    df = pd.DataFrame(rows).T.reset_index().rename(columns={"index": "task"})
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
