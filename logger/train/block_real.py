"""Self-distil a block head for a real Hugging Face target on question-file prompts.

    python -m glance_log.train.block_real --model gemma-3-270m \\
        --data ../shared/realdata/spec-bench/vase/question.jsonl.gz --out real-head

The embedded default's recipe (:mod:`glance_log.train.block`) for a real target, sized for
one CPU thread and a vocabulary of hundreds of thousands of tokens:

1. **Prompts.** First turns of the question file (``--data``), formed as the logger forms
   them (:func:`glance_log.questions.encode_conversation`: the chat template, or the plain
   ``Question: ...\\nAnswer:`` block of a base model). The evaluation questions --
   ``load_questions(data, "all", n=k, seed=0, turns=1)`` for every ``k <= --exclude-eval``
   -- are never used. The rest are shuffled (``--seed``); prompts longer than
   ``--max-prompt`` tokens are skipped (counted); the first ``--val`` questions are the
   validation split, the next ``--train`` the training split (disjoint by question).
2. **Targets.** The target's own greedy continuations (``--max-new`` tokens, stop tokens
   included), decoded in left-padded batches (:func:`greedy_hidden`); the final hidden state
   (the input of ``lm_head``, what the decoder hands the drafter) that predicted each
   generated token is captured on the way, so no second pass is needed. A row is a position
   whose root (the next token) is generated and not a stop token; its targets are the
   tokens at offsets ``1..horizon`` after the root (masked past the end).
3. **Training.** :class:`glance_log.heads.BlockHead` with the target's embeddings and
   ``lm_head`` shared and frozen. The softmax runs over a candidate vocabulary -- every
   token of the training prompts and outputs, plus ``--negatives`` random others drawn
   afresh each step -- since a full 262k-row ``lm_head`` per offset and row is out of reach
   on a CPU. AdamW, cosine decay over ``--steps`` or ``--minutes`` (whichever ends first), stopped there, the final step
   saved. Validation measures top-1 accuracy per offset and the width-1 chain acceptance
   over the **full** vocabulary; both go to ``training.json`` beside the head.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path

from .block import chain_accept
from .record import command_line, write_training_record


def split_questions(data, target, *, exclude_eval: int = 3, n_train: int = 240, n_val: int = 30,
                    max_prompt: int = 768, seed: int = 0):
    """(train, val, info): lists of ``(question, prompt ids)`` for disjoint questions, never one
    of the evaluation selections; ``info`` counts what was excluded and skipped."""
    from ..questions import encode_conversation, load_questions

    excluded = set()
    for k in range(1, exclude_eval + 1):
        excluded |= {q.question_id for q in load_questions(data, "all", n=k, seed=0, turns=1)}
    pool = [q for q in load_questions(data, "all", n=None, turns=1) if q.question_id not in excluded]
    random.Random(f"block-real/{seed}").shuffle(pool)
    picked, long_ = [], 0
    for q in pool:
        if len(picked) == n_train + n_val:
            break
        ids = encode_conversation(target, q.turns[:1], []).prompt_ids
        if len(ids) > max_prompt:
            long_ += 1
            continue
        picked.append((q, ids))
    val, train = picked[:n_val], picked[n_val:]
    info = {"excluded_eval_ids": sorted(excluded, key=_id_key), "skipped_long_prompts": long_,
            "train_ids": sorted((q.question_id for q, _ in train), key=_id_key),
            "val_ids": sorted((q.question_id for q, _ in val), key=_id_key),
            "train_per_category": dict(Counter(q.category for q, _ in train)),
            "val_per_category": dict(Counter(q.category for q, _ in val))}
    return train, val, info


def _id_key(qid: str):
    return (0, int(qid), "") if str(qid).isdigit() else (1, 0, str(qid))


def greedy_hidden(target, prompts: list[list[int]], max_new: int = 64, batch: int = 16):
    """Greedy continuations of ``prompts`` (lists of ids, a stop token included when reached)
    and, per prompt, the final hidden states ``(len(out), d)`` that predicted each output token.

    Left-padded batches with an attention mask, explicit positions and the model's own cache;
    only the last row's logits are computed. Rows follow their own greedy path up to batched
    arithmetic (near-ties may differ from one-at-a-time decoding)."""
    import torch

    model, pad = target.model, int(target.tokenizer.pad_token_id or 0)
    stops = set(target.eos_ids)
    grabbed = {}
    hook = model.get_output_embeddings().register_forward_pre_hook(lambda m, a: grabbed.__setitem__("h", a[0]))
    outs, hids = [None] * len(prompts), [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    try:
        with torch.inference_mode():
            for s in range(0, len(order), batch):
                idx = order[s:s + batch]
                gen, hs = _greedy_batch(model, [prompts[i] for i in idx], max_new, stops, pad, grabbed,
                                        target.cache_kw)
                for r, i in enumerate(idx):
                    outs[i], hids[i] = gen[r], torch.stack(hs[r]) if hs[r] else torch.zeros(0, 0)
    finally:
        hook.remove()
    return outs, hids


def _greedy_batch(model, prompts, max_new, stops, pad, grabbed, cache_kw):
    import torch

    lens = torch.tensor([len(p) for p in prompts])
    T = int(lens.max())
    ids = torch.full((len(prompts), T), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, T - len(p):] = torch.tensor(p)
        mask[r, T - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache, nextpos = out.past_key_values, lens.clone()
    done = [False] * len(prompts)
    gen, hs = [[] for _ in prompts], [[] for _ in prompts]
    for _ in range(max_new):
        nxt, h = out.logits[:, -1].argmax(-1), grabbed["h"][:, -1]
        for r in range(len(prompts)):
            if not done[r]:
                gen[r].append(int(nxt[r]))
                hs[r].append(h[r].float().clone())
                done[r] = int(nxt[r]) in stops
        if all(done):
            break
        mask = torch.cat([mask, torch.ones((len(prompts), 1), dtype=torch.long)], 1)
        out = model(input_ids=nxt.view(-1, 1), attention_mask=mask, position_ids=nextpos.view(-1, 1),
                    use_cache=True, logits_to_keep=1, **{cache_kw: cache})
        cache, nextpos = out.past_key_values, nextpos + 1
    return gen, hs


def make_rows(outs, hids, stops, horizon: int):
    """Training rows from greedy outputs: (hidden (N, d), root (N,), targets (N, horizon) with -100
    past the end, prompt index (N,)). Row ``t`` of an output reads the hidden state that
    predicted ``out[t]`` (its root) and targets ``out[t + 1 .. t + horizon]``."""
    import torch

    H, R, Y, P = [], [], [], []
    for p, (o, h) in enumerate(zip(outs, hids)):
        for t, root in enumerate(o[:-1]):
            if root in stops:
                break
            H.append(h[t])
            R.append(root)
            Y.append([o[t + j] if t + j < len(o) else -100 for j in range(1, horizon + 1)])
            P.append(p)
    if not H:
        return torch.zeros(0, 0), torch.zeros(0, dtype=torch.long), torch.zeros(0, horizon, dtype=torch.long), []
    return torch.stack(H), torch.tensor(R), torch.tensor(Y), P


def train_head(head, target, H, R, Y, cand, *, steps: int, batch: int, lr: float, negatives: int,
               seed: int = 0, minutes: float | None = None, log=print):
    """Per-offset cross-entropy over ``cand`` (plus ``negatives`` random tokens a step); returns
    (steps run, last loss)."""
    import torch

    W = target.model.get_output_embeddings().weight.detach()
    emb = target.model.get_input_embeddings()
    V = W.shape[0]
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    lookup = torch.full((V,), -1, dtype=torch.long)
    t0, step, loss = time.time(), 0, float("nan")
    with torch.no_grad():
        root_emb = emb(R).float()
    for step in range(1, steps + 1):
        done = (step - 1) / steps
        if minutes:                       # a time box decays the rate over the minutes, whichever ends first
            done = max(done, (time.time() - t0) / (60 * minutes))
        for grp in opt.param_groups:
            grp["lr"] = lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, done))))
        b = torch.randint(len(R), (batch,), generator=g)
        vocab = torch.unique(torch.cat([cand, torch.randint(V, (negatives,), generator=g)]))
        lookup[vocab] = torch.arange(len(vocab))
        y = Y[b]
        y = torch.where(y >= 0, lookup[y.clamp_min(0)], y)
        feats = head(H[b], root_emb[b])
        logits = feats @ W[vocab].float().T
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, len(vocab)), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        ce.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        lookup[vocab] = -1
        loss = float(ce.detach())
        if step % 50 == 0 or step == steps:
            log(f"step {step} loss {loss:.3f} ({time.time() - t0:.0f}s)")
        if minutes is not None and time.time() - t0 > 60 * minutes:
            log(f"stopped at step {step}: --minutes {minutes} reached")
            break
    return step, loss


def evaluate_head(head, target, H, R, Y, chunk: int = 64):
    """Full-vocabulary top-1 accuracy per offset and mean width-1 chain acceptance on rows."""
    import torch

    head.eval()
    with torch.no_grad():
        top = torch.cat([head.logits(H[i:i + chunk], R[i:i + chunk], target.model).argmax(-1)
                         for i in range(0, len(R), chunk)])
    valid = Y >= 0
    per_offset = ((top == Y) & valid).sum(0).float() / valid.sum(0).clamp_min(1).float()
    return [round(float(v), 4) for v in per_offset], float(chain_accept(top, Y).mean())


def collect(target, pairs, max_new: int, horizon: int, batch: int):
    """Rows (see :func:`make_rows`) and every token of the prompts and outputs of ``pairs``."""
    outs, hids = greedy_hidden(target, [ids for _, ids in pairs], max_new=max_new, batch=batch)
    H, R, Y, P = make_rows(outs, hids, set(target.eos_ids), horizon)
    tokens = {t for _, ids in pairs for t in ids} | {t for o in outs for t in o}
    return H, R, Y, tokens


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m glance_log.train.block_real", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the target: a folder, a .gguf file or a known name")
    ap.add_argument("--data", required=True, help="a question file (Spec-Bench / MT-bench question.jsonl[.gz])")
    ap.add_argument("--out", required=True, help="the head's folder")
    ap.add_argument("--exclude-eval", type=int, default=3,
                    help="never use load_questions(data, 'all', n=k, seed=0, turns=1) for k = 1..this")
    ap.add_argument("--train", type=int, default=240, help="training questions (first turns)")
    ap.add_argument("--val", type=int, default=30, help="validation questions (disjoint)")
    ap.add_argument("--max-prompt", type=int, default=768, help="skip prompts longer than this many tokens")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--decode-batch", type=int, default=16)
    ap.add_argument("--horizon", type=int, default=8)
    ap.add_argument("--n-blocks", type=int, default=1)
    ap.add_argument("--inner", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--minutes", type=float, default=None, help="stop training after this many minutes")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--negatives", type=int, default=2048, help="random extra tokens in each step's softmax")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from ..heads import BlockHead, BlockHeadConfig
    from ..models import load_target

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    wall0, cpu0 = time.time(), time.process_time()
    target = load_target(args.model)
    for p in target.model.parameters():
        p.requires_grad_(False)
    train, val, info = split_questions(args.data, target, exclude_eval=args.exclude_eval, n_train=args.train,
                                       n_val=args.val, max_prompt=args.max_prompt, seed=args.seed)
    print(f"{len(train)} train / {len(val)} val questions; {len(info['excluded_eval_ids'])} evaluation ids "
          f"excluded, {info['skipped_long_prompts']} long prompts skipped", flush=True)
    H, R, Y, tokens = collect(target, train, args.max_new, args.horizon, args.decode_batch)
    Hv, Rv, Yv, _ = collect(target, val, args.max_new, args.horizon, args.decode_batch)
    t_collect = time.time() - wall0
    print(f"collected {len(R)} train / {len(Rv)} val rows in {t_collect:.0f}s", flush=True)
    cand = torch.tensor(sorted(tokens), dtype=torch.long)
    head = BlockHead(BlockHeadConfig(hidden_size=target.text_config.hidden_size, horizon=args.horizon,
                                     n_blocks=args.n_blocks, inner_size=args.inner))
    n_head, n_target = head.num_parameters(), sum(p.numel() for p in target.model.parameters())
    if n_head > n_target:
        print(f"block head has {n_head} parameters, more than the target's {n_target}; shrink --inner",
              file=sys.stderr)
        return 2
    steps, loss = train_head(head, target, H, R, Y, cand, steps=args.steps, batch=args.batch, lr=args.lr,
                             negatives=args.negatives, seed=args.seed, minutes=args.minutes,
                             log=lambda s: print(s, flush=True))
    per_offset, chain = evaluate_head(head, target, Hv, Rv, Yv)
    report = {"rows": {"train": int(len(R)), "val": int(len(Rv))}, "candidate_vocab": int(len(cand)),
              "steps_run": steps, "final_loss": round(loss, 4), "val_top1_per_offset": per_offset,
              "val_chain_accept": round(chain, 4), "head_parameters": n_head, "target_parameters": n_target,
              "collect_s": round(t_collect), "wall_s": round(time.time() - wall0),
              "cpu_s": round(time.process_time() - cpu0), "data": str(args.data), **info,
              "recipe": vars(args),
              "command": command_line("python -m glance_log.train.block_real", argv)}
    print(json.dumps({k: report[k] for k in ("val_top1_per_offset", "val_chain_accept", "steps_run", "wall_s",
                                             "cpu_s")}), flush=True)
    out = Path(args.out)
    head.save_pretrained(out)
    write_training_record(out, report)
    print(f"saved {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
