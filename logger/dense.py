"""Several drafters from one greedy pass (``python -m glance_log.dense``; docs/real-model-dense.md).

For greedy decoding the rounds of a chain or block drafter are a function of the greedy output:
the run a round accepts at root ``p`` is the longest prefix of the drafter's proposal there that
matches the greedy continuation. So the output is decoded ONCE, greedily, and every drafter's
proposal at every output position is computed afterwards:

1. **greedy outputs** (:func:`greedy_outputs`): several prompts decoded as one left-padded batch
   (attention mask, explicit positions, the model's own cache; rows that end leave the batch),
   each stopped at an end-of-sequence token, ``max_new_tokens`` or the stop rule;
2. **one teacher-forced pass per prompt** (:func:`forced_pass`) over prompt + output: the final
   hidden state and the output of every exit layer at every position at once. The final rows give
   the root statistics of every position (entropy, top-2 margin, max probability, the greedy
   token); every row's argmax must equal the greedy token there, else the output is decoded again
   one sequence at a time from the first disagreement (:func:`consistent_output`), so the output
   is the greedy decoding of the forced pass itself;
3. **proposals** (:func:`proposals`): prompt lookup from the context (model-free); the block head
   from the final hidden state that predicted each root and the root's embedding (one batched
   call); early exit at layer K from the K-th layer's output through the final norm and the LM
   head.

**The exactness rule.** A proposal that depends only on the committed prefix (prompt lookup, the
block head, every drafter's first offset) is exact at every position. A drafter that feeds its
own tokens back (early exit: offset ``j`` is conditioned on its own greedy tokens at offsets
``1..j-1``) is exact at offset ``j`` exactly when those tokens equal the greedy output: then its
input is the greedy prefix, whose rows the forced pass holds. The dense row of such a drafter
stops at the first offset whose own top-1 token misses (that row is exact: its inputs matched);
its ``horizon`` is that number of known offsets, the drafter's full horizon is in the run
metadata. A chain's accepted run ends at that miss, so every chain round is exact; a tree with
more than one candidate per offset also reads the rows after the miss, which are not computed.

Every drafter is written as its own dense run (``condition = "dense"``, one row per output
position ``0 .. N-2``, the columns ``glance-log --dense`` writes, the top-k rows at ``--k``, the
exact rank and log-probability of the greedy token at every known offset, and ``copy_run``: the
longest run of the output from the token after the root that occurs in the prompt's references),
so ``python -m glance_law.policy`` replays it and :mod:`glance_log.rounds` turns it into the
rounds a live decoder of any chain depth or tree shape would have logged.

**Stop rule** (``--stop TEXT``): an answer ends where its decoded text first contains ``TEXT``
(for a base model, ``"\\nQuestion:"``: its own next question block); the output keeps the tokens
whose text lies wholly before it, at least one. Greedy decoding is prefix-causal, so this
truncation equals decoding with the rule. The rule is in the run metadata (``stop``) and every
prompt row's ``stop_reason`` says ``stop_string`` where it cut.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from glance_law import schema as S
from glance_law.data.outputs import check_output, make_folder
from glance_law.errors import GlanceError
from glance_law.io import LogWriter, run_metadata
from glance_law.scrub import command_line

from . import questions as Q
from .drafters import PLDDrafter

__all__ = ["DenseConfig", "StopRule", "greedy_outputs", "forced_pass", "consistent_output", "proposals",
           "dense_rows", "run_dense", "main"]

DENSE_VERSION = "1"


@dataclass(frozen=True)
class StopRule:
    """Where an answer ends: at the first occurrence of ``text`` in its decoded output (None: no
    rule). :meth:`cut` gives the number of tokens kept (the tokens wholly before it, at least one)."""

    text: str | None = None

    def found(self, tokenizer, tokens: Sequence[int]) -> bool:
        return bool(self.text) and self.text in tokenizer.decode(list(tokens))

    def cut(self, tokenizer, tokens: Sequence[int]) -> int | None:
        """Tokens kept, or None when the text does not occur."""
        if not self.text:
            return None
        at = tokenizer.decode(list(tokens)).find(self.text)
        if at < 0:
            return None
        keep = 0
        for i in range(1, len(tokens) + 1):
            if len(tokenizer.decode(list(tokens[:i]))) > at:
                break
            keep = i
        return max(keep, 1)


def _cache_batch(cache, keep: torch.Tensor) -> None:
    """Keep the batch rows ``keep`` of every cache layer (rows that ended leave the batch)."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys.index_select(0, keep)
            layer.values = layer.values.index_select(0, keep)


@torch.inference_mode()
def _greedy_batch(target, prompts: list[list[int]], max_new: list[int], done_fn: Callable) -> list[list[int]]:
    """Greedy continuations of left-padded ``prompts`` decoded together. ``done_fn(r, tokens)``
    says whether row ``r`` has ended (after its end-of-sequence token, at its ``max_new``)."""
    from transformers import DynamicCache

    model = target.model
    pad = int(getattr(target.tokenizer, "pad_token_id", None) or 0)
    n = len(prompts)
    lens = torch.tensor([len(p) for p in prompts])
    T = int(lens.max())
    ids = torch.full((n, T), pad, dtype=torch.long)
    mask = torch.zeros((n, T), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, T - len(p):] = torch.tensor(p)
        mask[r, T - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    dev = target.device
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True,
                logits_to_keep=1, **{target.cache_kw: cache})
    gen = [[] for _ in prompts]
    live = list(range(n))                     # the batch row -> prompt index
    nextpos = lens.clone()
    while True:
        nxt = out.logits[:, -1].argmax(-1).cpu()
        keep = []
        for b, r in enumerate(live):
            gen[r].append(int(nxt[b]))
            if not done_fn(r, gen[r]) and len(gen[r]) < max_new[r]:
                keep.append(b)
        if not keep:
            return gen
        if len(keep) < len(live):
            kb = torch.tensor(keep)
            _cache_batch(cache, kb.to(dev))
            mask, nxt, nextpos = mask[kb], nxt[kb], nextpos[kb]
            live = [live[b] for b in keep]
        mask = torch.cat([mask, torch.ones((len(live), 1), dtype=torch.long)], 1)
        out = model(input_ids=nxt.view(-1, 1).to(dev), attention_mask=mask.to(dev),
                    position_ids=nextpos.view(-1, 1).to(dev), use_cache=True, logits_to_keep=1,
                    **{target.cache_kw: cache})
        nextpos = nextpos + 1


def greedy_outputs(target, prompts: list[list[int]], max_new_tokens: int, stop: StopRule,
                   batch: int = 8, prefixes: list[list[int]] | None = None) -> list[list[int]]:
    """Greedy outputs of ``prompts``, decoded ``batch`` at a time (similar lengths together), each
    ending after an end-of-sequence token, at ``max_new_tokens`` or once the stop text occurs
    (not yet cut: :meth:`StopRule.cut`). ``prefixes``: output tokens already fixed per prompt
    (decoding continues after them; they count towards ``max_new_tokens``)."""
    eos = set(target.eos_ids)
    tok = target.tokenizer
    prefixes = prefixes or [[] for _ in prompts]
    outs: list = [None] * len(prompts)
    todo = []
    for i, pre in enumerate(prefixes):
        if pre and (pre[-1] in eos or len(pre) >= max_new_tokens or stop.found(tok, pre)):
            outs[i] = list(pre)
        else:
            todo.append(i)
    todo.sort(key=lambda i: len(prompts[i]) + len(prefixes[i]))
    for s in range(0, len(todo), max(1, int(batch))):
        idx = todo[s:s + batch]

        def done(r, gen, idx=idx):
            return gen[-1] in eos or stop.found(tok, prefixes[idx[r]] + gen)

        gen = _greedy_batch(target, [list(prompts[i]) + list(prefixes[i]) for i in idx],
                            [max_new_tokens - len(prefixes[i]) for i in idx], done)
        for r, i in enumerate(idx):
            outs[i] = list(prefixes[i]) + gen[r]
    return outs


@dataclass
class Forced:
    """One teacher-forced pass over prompt + output (``N`` output tokens). Row ``i`` (0..N-1)
    is the row that predicts output token ``i`` (row 0: the prompt's last row): ``argmax``,
    ``entropy``, ``margin``, ``pmax`` (N,) of the target's fp32 logits there; ``hidden`` (N, d) the
    final hidden state (the LM head's input); ``exits`` {K: (N, d)} the output of decoder layer
    K through the final norm (the early-exit drafter's LM-head input)."""

    argmax: np.ndarray
    entropy: np.ndarray
    margin: np.ndarray
    pmax: np.ndarray
    hidden: torch.Tensor
    exits: dict


def _logits(target, h: torch.Tensor) -> torch.Tensor:
    """The target's logits for final hidden states ``h`` (its LM head and final soft-capping)."""
    logits = target.model.get_output_embeddings()(h)
    cap = getattr(target.text_config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits.float()


def _row_stats(logits: torch.Tensor):
    """(argmax, entropy, top-2 margin, max probability) of fp32 logit rows (the logger's formulas)."""
    top = torch.topk(logits, 2, dim=-1)
    logp = torch.log_softmax(logits, dim=-1)
    p = torch.exp(logp)
    ent = -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)
    return top.indices[:, 0], ent.clamp_min(0.0), top.values[:, 0] - top.values[:, 1], torch.exp(logp.max(-1).values)


@torch.inference_mode()
def forced_pass(target, prompt_ids: Sequence[int], output: Sequence[int], exit_layers: Sequence[int] = (),
                chunk: int = 128) -> Forced:
    """One causal pass of the target over ``prompt_ids + output`` (its own masks; sliding layers see
    their window) keeping the final hidden states and the outputs of the ``exit_layers``."""
    dec = target.model.get_decoder()
    n, N = len(prompt_ids), len(output)
    grab, hooks = {}, []
    for k in exit_layers:
        def hook(module, args, out, k=k):
            grab[k] = (out[0] if isinstance(out, tuple) else out)[0, n - 1:n - 1 + N]
        hooks.append(dec.layers[int(k) - 1].register_forward_hook(hook))
    try:
        ids = torch.tensor([list(prompt_ids) + list(output)], dtype=torch.long, device=target.device)
        h = dec(input_ids=ids, use_cache=False).last_hidden_state[0, n - 1:n - 1 + N]
    finally:
        for x in hooks:
            x.remove()
    stats = [[], [], [], []]
    for s in range(0, N, chunk):
        for acc, v in zip(stats, _row_stats(_logits(target, h[s:s + chunk]))):
            acc.append(v)
    arg, ent, mar, pmax = (torch.cat(a).cpu().numpy() if a else np.zeros(0) for a in stats)
    exits = {int(k): dec.norm(grab[k]) for k in exit_layers} if N else {int(k): h[:0] for k in exit_layers}
    return Forced(arg.astype(np.int64), ent.astype(np.float64), mar.astype(np.float64), pmax.astype(np.float64),
                  h, exits)


def consistent_output(target, prompt_ids, output: list[int], max_new_tokens: int, stop: StopRule,
                      exit_layers=(), tries: int = 4) -> tuple[list[int], Forced, int]:
    """The output (cut by the stop rule) whose forced pass picks every one of its tokens: where the pass's argmax first
    disagrees (batched arithmetic near a tie), that token is replaced by the argmax and the rest
    decoded again one sequence at a time. Returns (output, its forced pass, redecodes)."""
    redo = 0
    while True:
        cut = stop.cut(target.tokenizer, output)
        output = list(output[:cut]) if cut is not None else list(output)
        fp = forced_pass(target, prompt_ids, output, exit_layers)
        bad = np.flatnonzero(fp.argmax != np.asarray(output, np.int64))
        if not bad.size:
            return output, fp, redo
        if redo >= tries:
            raise GlanceError(f"the greedy output disagrees with its own forced pass after {tries} redecodes "
                              f"(position {int(bad[0])}); decode with --batch 1")
        i = int(bad[0])
        pre = list(output[:i]) + [int(fp.argmax[i])]
        output = greedy_outputs(target, [list(prompt_ids)], max_new_tokens, stop, batch=1, prefixes=[pre])[0]
        redo += 1


@dataclass
class Rows:
    """One drafter's proposal at every root ``p = 0 .. N-2``: ``horizon`` (P,) known offsets,
    ``topk`` (P, L, k) log-probabilities (NaN past the horizon), ``rank`` / ``logq`` (P, L) of the
    greedy token at each offset (-1 / NaN unknown), ``passes`` (P,), ``point_mass``."""

    horizon: np.ndarray
    topk: np.ndarray
    rank: np.ndarray
    logq: np.ndarray
    passes: np.ndarray
    point_mass: bool = False


def _topk_rows(logits: torch.Tensor, targets: torch.Tensor, k: int):
    """log-softmax top-k (values) and the exact rank and log-probability of ``targets`` per row."""
    logp = torch.log_softmax(logits, dim=-1)
    val = torch.topk(logp, k, dim=-1).values
    tl = logp.gather(1, targets.clamp_min(0)[:, None])[:, 0]
    rank = torch.count_nonzero(logp > tl[:, None], dim=-1)   # a bool .sum() converts to int64 first
    return val.cpu().numpy(), rank.cpu().numpy(), tl.cpu().numpy()


def _pld_rows(prompt_ids, output, horizon: int) -> Rows:
    N = len(output)
    P = max(N - 1, 0)
    dr = PLDDrafter(horizon=horizon)
    hz = np.zeros(P, np.int64)
    topk = np.full((P, horizon, 1), np.nan, np.float32)
    rank = np.full((P, horizon), -1, np.int64)
    logq = np.full((P, horizon), np.nan, np.float32)
    seq = list(prompt_ids)
    for p in range(P):
        seq.append(int(output[p]))
        cont = dr.lookup(seq)
        hz[p] = len(cont)
        topk[p, :len(cont), 0] = 0.0
        for j, t in enumerate(cont):
            if p + 1 + j < N:
                hit = int(output[p + 1 + j]) == int(t)
                rank[p, j] = 0 if hit else 1
                logq[p, j] = 0.0 if hit else -np.inf
    return Rows(hz, topk, rank, logq, np.zeros(P, np.int64), point_mass=True)


@torch.inference_mode()
def _block_rows(target, head, fp: Forced, output, k: int, chunk: int = 16) -> Rows:
    N = len(output)
    P = max(N - 1, 0)
    L = int(head.horizon)
    out_t = torch.tensor(list(output) + [-1] * (L + 1), dtype=torch.long, device=target.device)
    topk = np.full((P, L, k), np.nan, np.float32)
    rank = np.full((P, L), -1, np.int64)
    logq = np.full((P, L), np.nan, np.float32)
    for s in range(0, P, chunk):
        ps = torch.arange(s, min(P, s + chunk), device=target.device)
        logits = head.logits(fp.hidden[ps], out_t[ps], target.model).float()    # (B, L, V), as BlockDrafter
        tg = out_t[ps[:, None] + torch.arange(1, L + 1, device=target.device)[None]]   # (B, L)
        v, r, tl = _topk_rows(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1), k)
        b = len(ps)
        topk[s:s + b] = v.reshape(b, L, k)
        known = (tg >= 0).cpu().numpy()
        rank[s:s + b] = np.where(known, r.reshape(b, L), -1)
        logq[s:s + b] = np.where(known, tl.reshape(b, L), np.nan)
    return Rows(np.full(P, L, np.int64), topk, rank, logq, np.ones(P, np.int64))


@torch.inference_mode()
def _exit_rows(target, fp: Forced, layer: int, output, horizon: int, k: int, chunk: int = 128) -> Rows:
    """Early exit at ``layer``: row ``i`` of the layer's output predicts output token ``i``; the
    drafter's offset ``j`` at root ``p`` is row ``p + j`` while its own top-1 tokens at offsets
    ``1..j-1`` equal the output (the exactness rule)."""
    N = len(output)
    P = max(N - 1, 0)
    out_t = torch.tensor(list(output), dtype=torch.long, device=target.device)
    h = fp.exits[layer]
    val, rk, tl = [], [], []
    for s in range(0, N, chunk):
        v, r, t = _topk_rows(_logits(target, h[s:s + chunk]), out_t[s:s + chunk], k)
        val.append(v)
        rk.append(r)
        tl.append(t)
    val = np.concatenate(val) if val else np.zeros((0, k), np.float32)
    rk = np.concatenate(rk) if rk else np.zeros(0, np.int64)
    tl = np.concatenate(tl) if tl else np.zeros(0, np.float32)
    hz = np.zeros(P, np.int64)
    topk = np.full((P, horizon, k), np.nan, np.float32)
    rank = np.full((P, horizon), -1, np.int64)
    logq = np.full((P, horizon), np.nan, np.float32)
    for p in range(P):
        for j in range(1, horizon + 1):
            i = p + j
            if i > N - 1:
                break
            topk[p, j - 1] = val[i]
            rank[p, j - 1] = rk[i]
            logq[p, j - 1] = tl[i]
            hz[p] = j
            if rk[i] != 0:                       # the drafter's own token misses: later rows unknown
                break
    passes = np.full(P, horizon, np.int64)
    if P:
        passes[0] += 1                           # the prompt's prefill through the first K layers
    return Rows(hz, topk, rank, logq, passes)


def proposals(target, spec: DenseConfig, prompt_ids, output, fp: Forced, head=None) -> dict:
    """Every drafter's :class:`Rows` for one output, keyed by its label."""
    out = {}
    if spec.pld_len:
        out["pld"] = _pld_rows(prompt_ids, output, spec.pld_len)
    for K in spec.exit_layers:
        out[f"early_exit-{K}"] = _exit_rows(target, fp, K, output, spec.exit_len, spec.k)
    if head is not None:
        out["block"] = _block_rows(target, head, fp, output, min(spec.k, target.vocab_size))
    return out


def dense_rows(rows: Rows, fp: Forced, output, *, run_id: str, task: str, prompt_id: str, drafter: str,
               runs: np.ndarray | None) -> list[dict]:
    """The dense rounds rows of one drafter on one output (the columns ``glance-log --dense`` writes;
    ``target_rank`` / ``target_logq`` exact at every known offset; ``copy_run``)."""
    N = len(output)
    res = []
    for p in range(max(N - 1, 0)):
        L = int(rows.horizon[p])
        k = rows.topk.shape[2]
        rk = rows.rank[p, :L]
        res.append({
            "run_id": run_id, "task": task, "prompt_id": prompt_id, "round": p,
            "root_entropy": float(fp.entropy[p + 1]), "accepted": 0, "horizon": L, "condition": S.CONDITION_DENSE,
            "drafter": drafter, "position": p, "root_margin": float(fp.margin[p + 1]),
            "root_pmax": float(fp.pmax[p + 1]), "min_path_margin": float(fp.margin[p + 1]),
            "pred_entropy": float(fp.entropy[p]), "budget": 0, "depth": 0, "draft_passes": int(rows.passes[p]),
            "committed": [int(output[p + 1])],
            "match": np.where(rk < 0, -1, (rk == 0).astype(np.int64)).astype(np.int8),
            "target_logq": rows.logq[p, :L].astype(np.float32),
            "target_rank": np.where(rk < 0, -1, rk if not rows.point_mass else np.minimum(rk, k)).astype(np.int32),
            "topk_logq": rows.topk[p, :L].reshape(-1).astype(np.float32),
            "copy_len": None if runs is None else int(min(runs[p + 1], 1)),
            "copy_run": None if runs is None else int(runs[p + 1]),
            "draft_ms": None, "verify_ms": None, "round_ms": None,
        })
    return res


@dataclass
class DenseConfig:
    """A dense study: the question file and selection, the drafters, the output."""

    model: str = "gemma-3-270m"
    data: str | None = None
    task: str = "all"
    n: int | None = None
    seed: int = 0
    turns: int | None = None
    max_new_tokens: int = 128
    stop: str | None = None
    pld_len: int | None = 10
    exit_layers: tuple = ()
    exit_len: int = 5
    block_head: str | None = None
    k: int = 8
    batch: int = 8
    out: str = "dense"
    dtype: str = "fp32"
    progress: bool = True
    command: str | None = None
    items: list | None = field(default=None, repr=False)


def _drafter_config(cfg: DenseConfig, label: str, target, head) -> dict:
    if label == "pld":
        return {"drafter": "pld", "horizon": cfg.pld_len, "max_ngram": 3, "min_ngram": 1}
    if label == "block":
        from pathlib import Path

        weights = Path(cfg.block_head) / "model.safetensors"
        return {"drafter": "block", "horizon": int(head.horizon), "branch_k": cfg.k, "head": cfg.block_head,
                "head_parameters": head.num_parameters(),
                "head_sha256": hashlib.sha256(weights.read_bytes()).hexdigest() if weights.exists() else None}
    K = int(label.rsplit("-", 1)[1])
    n = len(target.model.get_decoder().layers)
    return {"drafter": label, "horizon": cfg.exit_len, "branch_k": cfg.k, "exit_layer": K,
            "num_hidden_layers": n, "layer_fraction": K / n}


def _run_key(cfg: DenseConfig, label: str, dcfg: dict) -> dict:
    from .sources import model_key

    return {"mode": "dense-multi", "dense_version": DENSE_VERSION, "task": cfg.task, "model": model_key(cfg.model),
            "drafter": label, "drafter_config": dcfg, "k": cfg.k, "max_new_tokens": cfg.max_new_tokens,
            "stop": cfg.stop, "dtype": cfg.dtype, "data": cfg.data, "turns": cfg.turns}


class _Arm:
    def __init__(self, cfg, label, target, head, out, meta_common):
        self.label = label
        self.dcfg = _drafter_config(cfg, label, target, head)
        key = _run_key(cfg, label, self.dcfg)
        h = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]
        self.rid = f"{cfg.task}-{label}-dense-{h}"
        meta = run_metadata(run_id=self.rid, drafter=self.dcfg, budget=0, branch_k=cfg.k, condition=S.CONDITION_DENSE,
                            **meta_common)
        stem = f"{self.rid}-{S.CONDITION_DENSE}"
        self.rounds = LogWriter(out, S.KIND_ROUNDS, run=meta, stem=stem, flush_rows=10**9, flush_seconds=float("inf"))
        self.prompts = LogWriter(out, S.KIND_PROMPTS, run=meta, stem=stem, flush_rows=10**9,
                                 flush_seconds=float("inf"))


def _done_outputs(out, arms) -> dict:
    """Prompt id -> tokens of the prompts every arm has logged (a resumed run skips them)."""
    from .runstate import logged_outputs, logged_prompts

    done = None
    for a in arms:
        got = logged_prompts(out, a.rid, S.CONDITION_DENSE)
        done = got if done is None else done & got
    if not done:
        return {}
    return logged_outputs(out, arms[0].rid, S.CONDITION_DENSE, done)


def _say(cfg, msg):
    if cfg.progress:
        print(msg, file=sys.stderr, flush=True)


def _round_robin(todo: list) -> list:
    """Categories interleaved (a study stopped part-way covers every category); items are tuples whose
    first element is the question."""
    by: dict = {}
    for item in todo:
        by.setdefault(item[0].category, []).append(item)
    out, lists = [], list(by.values())
    for i in range(max((len(x) for x in lists), default=0)):
        out.extend(x[i] for x in lists if i < len(x))
    return out


def run_dense(cfg: DenseConfig) -> dict:
    """Decode the selection greedily once and write every drafter's dense run into ``cfg.out``."""
    from .heads import BlockHead
    from .models import load_target
    from .record import copy_runs, encode_reference

    if not (cfg.pld_len or cfg.exit_layers or cfg.block_head):
        raise GlanceError("no drafter: give --pld-len, --exit-layers or --block-head")
    for name, v in (("--max-new-tokens", cfg.max_new_tokens), ("--k", cfg.k), ("--batch", cfg.batch),
                    ("--exit-len", cfg.exit_len)):
        if v < 1:
            raise GlanceError(f"{name} {v}: must be >= 1")
    if cfg.stop is not None and not cfg.stop:
        raise GlanceError("--stop: the stop text must not be empty")
    items = cfg.items if cfg.items is not None else Q.load_questions(cfg.data, cfg.task, cfg.n, cfg.seed, cfg.turns)
    out = make_folder(check_output(cfg.out, [cfg.data, cfg.block_head], folder=True))
    wall0, cpu0 = time.perf_counter(), time.process_time()
    target = load_target(cfg.model, cfg.dtype, "cpu")
    n_layers = len(target.model.get_decoder().layers)
    for K in cfg.exit_layers:
        if not 1 <= int(K) < n_layers:
            raise GlanceError(f"--exit-layers {K}: must be between 1 and {n_layers - 1}")
    head = None
    if cfg.block_head:
        head = BlockHead.from_pretrained(cfg.block_head, device=target.device, dtype=target.dtype)
        if head.config.hidden_size != target.text_config.hidden_size:
            raise GlanceError(f"--block-head {cfg.block_head}: hidden size {head.config.hidden_size}, the target's "
                              f"is {target.text_config.hidden_size}")
    from .run import target_info
    stop = StopRule(cfg.stop)
    common = dict(target=target_info(cfg.model), vocab_size=target.vocab_size, dtype=cfg.dtype, device="cpu",
                  temperature=0.0, seed=cfg.seed, max_new_tokens=cfg.max_new_tokens, task=cfg.task,
                  data=cfg.data or "items", command=cfg.command, prompt_format=Q.prompt_format(target),
                  stop={"text": cfg.stop, "rule": "cut before the first occurrence of the text in the decoded "
                        "output (at least one token kept)"} if cfg.stop else None,
                  dense={"mode": "one greedy pass, teacher-forced proposals", "version": DENSE_VERSION,
                         "k": cfg.k, "batch": cfg.batch})
    labels = (["pld"] if cfg.pld_len else []) + [f"early_exit-{int(K)}" for K in cfg.exit_layers] + \
        (["block"] if head is not None else [])
    arms = [_Arm(cfg, lb, target, head, out, common) for lb in labels]
    done = _done_outputs(out, arms)
    limit = Q.context_limit(target)
    stats = {"out": str(out), "runs": {a.label: a.rid for a in arms}, "prompts": 0, "tokens": 0, "rounds": 0,
             "redecodes": 0, "skipped_context": [], "resumed": 0, "decode_s": 0.0, "forced_s": 0.0}
    answers = {q.question_id: [] for q in items}
    alive = {q.question_id: True for q in items}
    # a question's next turn is queued first as soon as its turn is answered (its prompt holds the answer),
    # so a study stopped part-way holds whole conversations of every category
    queue = deque(_round_robin([(q, 0) for q in items]))
    step = cfg.batch * 4
    while queue:
        todo = []
        while queue and len(todo) < step:
            q, t = queue.popleft()
            if len(q.turns) <= t or not alive[q.question_id]:
                continue
            pid = q.prompt_id(t)
            prompt = Q.encode_conversation(target, q.turns[:t + 1], answers[q.question_id])
            if not Q.fits_context(prompt.n_tokens, cfg.max_new_tokens, limit):
                stats["skipped_context"].extend(q.prompt_ids[t:])
                alive[q.question_id] = False
                continue
            if pid in done:
                answers[q.question_id].append(Q.answer_text(target.tokenizer, done[pid]))
                stats["resumed"] += 1
                queue.appendleft((q, t + 1))
                continue
            todo.append((q, prompt, t))
        if not todo:
            continue
        _do_batch(cfg, target, head, arms, stop, todo, answers, stats, copy_runs, encode_reference)
        queue.extendleft((q, t + 1) for q, _, t in reversed(todo) if len(q.turns) > t + 1)
        _say(cfg, f"dense: {stats['prompts']} prompts ({stats['resumed']} resumed, {len(queue)} queued)  "
                  f"{stats['tokens']} tokens  decode {stats['decode_s']:.0f}s  forced {stats['forced_s']:.0f}s")
    stats["wall_s"] = time.perf_counter() - wall0
    stats["cpu_s"] = time.process_time() - cpu0
    target.close()
    return stats


def _do_batch(cfg, target, head, arms, stop, batch, answers, stats, copy_runs, encode_reference):
    """Decode ``batch`` ((question, prompt, turn) triples) greedily and write every drafter's dense rows."""
    t0 = time.perf_counter()
    raw = greedy_outputs(target, [p.prompt_ids for _, p, _ in batch], cfg.max_new_tokens, stop, cfg.batch)
    stats["decode_s"] += time.perf_counter() - t0
    t1 = time.perf_counter()
    eos = set(target.eos_ids)
    for (q, prompt, t), output in zip(batch, raw):
        output, fp, redo = consistent_output(target, prompt.prompt_ids, output, cfg.max_new_tokens, stop,
                                             cfg.exit_layers)
        stats["redecodes"] += redo
        reason = "eos" if output[-1] in eos else ("max_new_tokens" if len(output) >= cfg.max_new_tokens
                                                  else "stop_string")
        turns, ans = q.turns[:t + 1], answers[q.question_id]
        refs = [r for r in (*q.references[t], *turns, *ans) if r]
        ref = encode_reference(target.tokenizer, refs)
        runs = copy_runs(output, ref) if ref else None
        props = proposals(target, cfg, prompt.prompt_ids, output, fp, head)
        pid = q.prompt_id(t)
        for a in arms:
            a.rounds.extend(dense_rows(props[a.label], fp, output, run_id=a.rid, task=q.category, prompt_id=pid,
                                       drafter=a.label, runs=runs))
        prow = {"prompt_id": pid, "task": q.category, "condition": S.CONDITION_DENSE,
                "prompt_tokens": prompt.n_tokens, "new_tokens": len(output), "prefill_ms": None, "decode_ms": None,
                "rounds": max(len(output) - 1, 0), "stop_reason": reason, "tokens": [int(x) for x in output]}
        for a in arms:
            a.prompts.append({"run_id": a.rid, "drafter": a.label, **prow})
        ans.append(Q.answer_text(target.tokenizer, output))
        stats["prompts"] += 1
        stats["tokens"] += len(output)
        stats["rounds"] += max(len(output) - 1, 0)
    for a in arms:                   # rounds first, then the prompt rows that mark them complete
        a.rounds.flush()
    for a in arms:
        a.prompts.flush()
    stats["forced_s"] += time.perf_counter() - t1


def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m glance_log.dense", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--data", required=True, help="a question file (Spec-Bench / MT-bench question.jsonl[.gz])")
    ap.add_argument("--task", default="all", help="a category of the file, or all")
    ap.add_argument("--n", type=int, default=None, help="questions per category (default: every question)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--turns", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--stop", default=None, help="answers end before this text (e.g. '\\nQuestion:'; "
                    "backslash escapes are read)")
    ap.add_argument("--pld-len", type=int, default=10, help="prompt lookup's draft length (0: no prompt lookup)")
    ap.add_argument("--exit-layers", default="", help="early-exit layers, comma-separated (e.g. 6,12)")
    ap.add_argument("--exit-len", type=int, default=5, help="early exit's draft length")
    ap.add_argument("--block-head", default=None, help="a block head folder (glance_log.train.block_real)")
    ap.add_argument("--k", type=int, default=8, help="top-k kept per offset for model drafters (trees up to k)")
    ap.add_argument("--batch", type=int, default=8, help="prompts decoded together")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    torch.set_num_threads(max(1, args.threads))
    try:
        layers = tuple(int(x) for x in args.exit_layers.split(",") if x.strip())
    except ValueError:
        print(f"glance_log.dense: --exit-layers {args.exit_layers!r}: comma-separated integers", file=sys.stderr)
        return 2
    stop = args.stop.encode().decode("unicode_escape") if args.stop else None
    cfg = DenseConfig(model=args.model, data=args.data, task=args.task, n=args.n, seed=args.seed, turns=args.turns,
                      max_new_tokens=args.max_new_tokens, stop=stop, pld_len=args.pld_len or None,
                      exit_layers=layers, exit_len=args.exit_len, block_head=args.block_head, k=args.k,
                      batch=args.batch, out=args.out, progress=not args.quiet,
                      command=command_line("python -m glance_log.dense", argv))
    try:
        st = run_dense(cfg)
    except GlanceError as exc:
        print(f"glance_log.dense: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: (round(v, 1) if isinstance(v, float) and math.isfinite(v) else v)
                      for k, v in st.items() if k != "skipped_context"} | {"skipped_context": len(st["skipped_context"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
