"""Train the embedded default target: a small Llama that reads the suite and retrieves.

    python -m glance_log.train.target --out logger/default/target --steps 4000

Recipe (all fixed by the flags' defaults; the run is deterministic for a given
``--seed`` and thread count):

* tokenizer: :mod:`glance_log.train.tokenizer` (word level, digits and punctuation
  split, closed vocabulary);
* model: ``LlamaForCausalLM``, 4 layers, hidden 128, 4 heads, MLP 384, tied
  embeddings (~0.9 M parameters);
* data: :class:`glance_log.train.data.Stream`, an endless seeded stream of train
  partition examples (held-out prompts rejected), several question turns per
  context, loss weights answer 1 / question 0.5 / context 0.1;
* retrieval curriculum: forms, tables and paragraphs start with 1-3 fields and grow
  to the full 5-7 over the first ``--ramp`` fraction of steps, while the share of copy
  drills falls from a half to a tenth (:mod:`glance_log.train.data`);
* auxiliary multi-token prediction of offsets 2..6 (:class:`MultiTokenHeads`, weight
  0.5, training-only adapters discarded at save): without it the final hidden state of
  a 4-layer next-token model does not carry a copied value past its next token, and the
  one-vector block head drafted grounded answers *worse* than formulaic captions;
* AdamW (betas 0.9/0.95, weight decay 0.01 on matrices), peak lr ``--lr`` after
  ``--warmup`` steps, cosine decay to 10 %, gradient clipping 1.0, batch ``--batch``
  (length-bucketed).

Every ``--eval-every`` steps it measures, on train-partition validation prompts
(never the held-out ones), the exact-match rate per task by the teacher-forced
argmax test (a greedy answer equals a valid answer iff the argmax reproduces it at
every position, its ``<eos>`` included) and the mean next-token entropy over answer
tokens; progress goes to ``--log`` (JSON lines) and stdout. The final step's
weights are saved (no selection on any evaluation). A checkpoint is written at
every evaluation and ``--resume`` continues from it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

from ..items import TASKS
from .record import command_line, write_training_record

VAL_TASKS = TASKS


def make_model(vocab_size: int, hidden=128, layers=4, heads=4, inter=384, seed=0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from .tokenizer import BOS, EOS, PAD

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, attention_dropout=0.0)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


def weighted_loss(model, x, y, w):
    import torch

    x, y, w = (torch.from_numpy(a) for a in (x, y, w))
    logits = model(input_ids=x).logits  # right padding + causal mask: pads never feed real tokens
    lp = torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), y, reduction="none")
    return (lp * w).sum() / w.sum().clamp_min(1e-6)


class MultiTokenHeads:
    """Auxiliary multi-token prediction (Gloeckle et al. 2024; DeepSeek-V3's MTP).

    For offsets ``j = 2..J`` an adapter ``z_j = RMSNorm(h_t + W_j h_t)`` (``W_j`` starts
    at zero) feeds the model's own tied ``lm_head`` to predict ``x[t+j]`` from the final
    hidden state ``h_t``. The adapters are training-only and discarded: the saved target is
    a plain ``LlamaForCausalLM`` whose next-token head is untouched. Their effect is that
    ``h_t`` carries the next few tokens where the context determines them (a value being
    copied), as a large model's state does and a 4-layer next-token-only model's does not.
    """

    def __init__(self, hidden: int, n_future: int):
        import torch
        from torch import nn

        self.offsets = list(range(2, n_future + 1))
        self.adapters = nn.ModuleList()
        for _ in self.offsets:
            lin = nn.Linear(hidden, hidden, bias=False)
            nn.init.zeros_(lin.weight)
            self.adapters.append(nn.ModuleDict({"lin": lin, "norm": nn.RMSNorm(hidden, eps=1e-5)}))
        self.torch = torch

    def parameters(self):
        return self.adapters.parameters()

    def loss(self, model, x, y, w):
        """Next-token loss plus the mean auxiliary loss over offsets (same token weights)."""
        torch = self.torch
        x, y, w = (torch.from_numpy(a) for a in (x, y, w))
        h = model.model(input_ids=x).last_hidden_state
        head = model.get_output_embeddings()
        lp = torch.nn.functional.cross_entropy(head(h).transpose(1, 2).float(), y, reduction="none")
        main = (lp * w).sum() / w.sum().clamp_min(1e-6)
        aux = []
        for j, ad in zip(self.offsets, self.adapters):
            hj, yj, wj = h[:, :-(j - 1)], y[:, j - 1:], w[:, j - 1:]
            keep = wj >= 0.5  # answer and question tokens only
            if not bool(keep.any()):
                continue
            z = ad["norm"](hj[keep] + ad["lin"](hj[keep]))
            lj = torch.nn.functional.cross_entropy(head(z).float(), yj[keep], reduction="none")
            aux.append((lj * wj[keep]).sum() / wj[keep].sum())
        return main, (torch.stack(aux).mean() if aux else torch.zeros(()))


def validation_set(tok, n_per_task=40, seed=0):
    """Teacher-forcing rows for every valid answer of ``n_per_task`` train-partition prompts."""
    from .. import suite
    from .tokenizer import EOS

    rows = []  # (task, item index, is the canonical answer, ids, answer start)
    for task in VAL_TASKS:
        for i, ex in enumerate(suite.load_examples(task, "train", n_per_task, seed + 1000)):
            qa = ex.qas[0]
            p = tok.encode(suite.format_prompt(ex.context, qa.question)).ids
            for alt in qa.alternatives:
                a = tok.encode(" " + alt, add_special_tokens=False).ids + [EOS]
                rows.append((task, i, alt == qa.answer, p + a, len(p)))
    return rows


def evaluate_teacher_forced(model, rows, batch=64):
    """Per task: exact-match rate (any valid answer reproduced by argmax) and mean answer entropy."""
    import torch

    from .tokenizer import PAD

    ok: dict[tuple, bool] = {}
    ent: dict[str, list] = {}
    model.eval()
    with torch.no_grad():
        for s in range(0, len(rows), batch):
            chunk = rows[s:s + batch]
            T = max(len(r[3]) for r in chunk)
            x = torch.full((len(chunk), T), PAD, dtype=torch.long)
            for j, r in enumerate(chunk):
                x[j, :len(r[3])] = torch.tensor(r[3])
            logits = model(input_ids=x).logits.float()
            logp = torch.log_softmax(logits, -1)
            H = -(logp.exp() * logp).sum(-1)
            am = logits.argmax(-1)
            for j, (task, i, canonical, ids, a0) in enumerate(chunk):
                n = len(ids)
                hit = bool((am[j, a0 - 1:n - 1] == x[j, a0:n]).all())
                ok[(task, i)] = ok.get((task, i), False) or hit
                if canonical:
                    ent.setdefault(task, []).append(float(H[j, a0 - 1:n - 1].mean()))
    model.train()
    out = {}
    for task in VAL_TASKS:
        hits = [v for (t, _), v in ok.items() if t == task]
        out[task] = {"exact": float(np.mean(hits)), "answer_entropy": float(np.mean(ent[task]))}
    return out


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def save_model(model, tok, out: Path, meta: dict):
    from transformers import GenerationConfig

    from .tokenizer import BOS, EOS, PAD, save_hf_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
                                               do_sample=False, max_new_tokens=64)
    model.save_pretrained(str(out))
    save_hf_tokenizer(tok, out)
    write_training_record(out, meta)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glance_log.train.target", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="logger/default/target")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--ramp", type=float, default=0.4, help="fraction of steps over which the curriculum grows")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--inter", type=int, default=384)
    ap.add_argument("--mtp", type=int, default=6,
                    help="multi-token prediction: auxiliary heads for offsets 2..MTP (1 = off)")
    ap.add_argument("--mtp-weight", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared machine two threads spin and run ~6x slower)")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--log", default=None, help="JSON-lines progress file (default OUT.train.jsonl)")
    ap.add_argument("--ckpt", default=None, help="checkpoint file (default OUT.ckpt)")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args(argv)

    import torch

    from .data import Stream
    from .tokenizer import suite_tokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    log_path = Path(args.log or str(out) + ".train.jsonl")
    ckpt_path = Path(args.ckpt or str(out) + ".ckpt")
    tok = suite_tokenizer()
    model = make_model(tok.get_vocab_size(), args.hidden, args.layers, args.heads, args.inter, args.seed)
    mtp = MultiTokenHeads(args.hidden, args.mtp) if args.mtp > 1 else None
    named = list(model.named_parameters()) + (
        [(f"mtp.{n}", p) for n, p in mtp.adapters.named_parameters()] if mtp else [])
    decay = [p for n, p in named if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    stream = Stream(tok, seed=args.seed)
    step = 0
    if args.resume and ckpt_path.exists():
        with open(ckpt_path, "rb") as f:
            ck = pickle.load(f)
        model.load_state_dict(ck["model"])
        if mtp is not None:
            mtp.adapters.load_state_dict(ck["mtp"])
        opt.load_state_dict(ck["opt"])
        stream.rng.setstate(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        step = ck["step"]
        print(f"resumed at step {step}", flush=True)
    val = validation_set(tok)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"target: {n_params} parameters, vocab {tok.get_vocab_size()}, {len(val)} validation rows", flush=True)
    model.train()
    pending: list = []
    t0, losses = time.time(), []
    history = []
    while step < args.steps:
        difficulty = min(1.0, step / max(1, args.ramp * args.steps))
        if not pending:  # length bucketing: draw 4 batches, sort by length, split
            encs = [stream.example(difficulty) for _ in range(4 * args.batch)]
            from .data import collate, encode_example

            encs = sorted((encode_example(tok, e) for e in encs), key=lambda e: len(e.ids))
            pending = [collate(encs[i * args.batch:(i + 1) * args.batch]) for i in range(4)]
            order = stream.rng.sample(range(4), 4)
            pending = [pending[i] for i in order]
        x, y, w = pending.pop()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        if mtp is None:
            loss = weighted_loss(model, x, y, w)
        else:
            main_loss, aux_loss = mtp.loss(model, x, y, w)
            loss = main_loss + args.mtp_weight * aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        step += 1
        if step % args.eval_every == 0 or step == args.steps:
            ev = evaluate_teacher_forced(model, val)
            rec = {"step": step, "loss": float(np.mean(losses)), "lr": lr_at(step - 1, args.steps, args.lr, args.warmup),
                   "difficulty": difficulty, "elapsed_s": round(time.time() - t0, 1), "val": ev}
            losses = []
            history.append(rec)
            with open(log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"step {step} loss {rec['loss']:.3f} " + " ".join(
                f"{t}:{v['exact']:.2f}/{v['answer_entropy']:.2f}" for t, v in ev.items()), flush=True)
            tmp = ckpt_path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                pickle.dump({"model": model.state_dict(), "mtp": mtp.adapters.state_dict() if mtp else None,
                             "opt": opt.state_dict(), "rng": stream.rng.getstate(),
                             "torch_rng": torch.get_rng_state(), "step": step}, f)
            os.replace(tmp, ckpt_path)
    meta = {"recipe": {k: v for k, v in vars(args).items() if k not in ("log", "ckpt", "resume")},
            "parameters": n_params, "vocab_size": tok.get_vocab_size(), "rejected_heldout_examples": stream.rejected,
            "final_validation": history[-1]["val"] if history else None,
            "torch": torch.__version__, "command": command_line("python -m glance_log.train.target", argv)}
    save_model(model, tok, out, meta)
    print(f"saved {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
