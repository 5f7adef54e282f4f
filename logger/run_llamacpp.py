"""``glance-log --engine llamacpp``: the prompts of a task or question file decoded by llama.cpp
(llama-cpp-python) instead of the reference tree decoder, logged through
:func:`glance_log.hooks.llamacpp.llamacpp_hook` into the same files (see docs/logger.md).

Prompts are formed as for the tree decoder (the GGUF file's Hugging Face tokenizer: its chat
template, else the plain ``Question: ...`` blocks of :mod:`glance_log.questions`), decoded with
``Llama.create_completion(prompt_ids, max_tokens=--max-new-tokens, temperature=0)``: ``pld`` is
``LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=--draft-len)`` (every row's logits
kept, as llama-cpp-python requires for a draft model), ``ar`` the same Llama without a draft
model. The context is reset before every prompt, so a prompt's rounds do not depend on the one
before it (a rerun resumes; the hook on a fresh ``Llama`` gives the same rounds).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from glance_law.data import uri
from glance_law.data.outputs import check_output, make_folder
from glance_law.errors import GlanceError
from glance_law.io import run_metadata

from . import questions as Q
from . import runstate as R
from . import tasks as T
from .hooks.llamacpp import TESTED_VERSION, llamacpp_hook, logits_bytes, memory_available
from .models import PromptInputs
from .record import RoundLogger
from .sources import gguf_file, gguf_tokenizer_folder, model_key, model_source

__all__ = ["run_llamacpp", "make_llama", "ENGINE_DRAFTERS", "DEFAULT_N_CTX"]

ENGINE_DRAFTERS = ("pld", "ar")
DEFAULT_N_CTX = 2048
PLD_NGRAM = 2           # LlamaPromptLookupDecoding's default max_ngram_size
PLD_LEN = 10            # num_pred_tokens: llama-cpp-python's default and glance-log's pld default


@dataclass
class _Prompter:
    """What :mod:`glance_log.questions` needs of a target to form prompts: the tokenizer."""

    tokenizer: object
    n_ctx: int
    is_vlm: bool = False
    device: object = field(default_factory=lambda: __import__("torch").device("cpu"))

    def encode(self, prompt: str) -> PromptInputs:
        """One user message, as :meth:`glance_log.models.Target.encode` forms it for a causal LM."""
        if getattr(self.tokenizer, "chat_template", None):
            return Q.encode_conversation(self, [prompt], [])
        ids = [int(x) for x in self.tokenizer(prompt, add_special_tokens=True)["input_ids"]]
        if not ids:
            raise GlanceError("the prompt encodes to zero tokens")
        return PromptInputs({}, ids)


def _validate(cfg) -> None:
    """What the tree decoder takes and llama.cpp does not: one line each."""
    if cfg.model is None:
        raise GlanceError("--engine llamacpp needs --model: a .gguf file or gemma-3-270m")
    if cfg.drafter not in ENGINE_DRAFTERS:
        raise GlanceError(f"--engine llamacpp: --drafter {cfg.drafter} is not one of llama-cpp-python's; use pld "
                          "(LlamaPromptLookupDecoding) or ar (no draft model)")
    off = [(cfg.probe, "--probe"), (cfg.dense, "--dense"), (cfg.policy, "--policy"), (cfg.draft_model, "--draft-model"),
           (cfg.exit_layer is not None, "--exit-layer"), (cfg.trust_remote_code, "--trust-remote-code"),
           (cfg.temperature > 0, "--temperature > 0"), (cfg.dtype != "fp32", "--dtype"),
           (cfg.device not in ("auto", "cpu"), "--device"), (cfg.budget != 63, "--budget"),
           (cfg.branch_k != 8, "--branch-k")]
    bad = [name for on, name in off if on]
    if bad:
        raise GlanceError(f"{bad[0]} does not apply to --engine llamacpp (a greedy chain on the CPU: llama-cpp-python "
                          "drafts with prompt lookup and verifies the whole chain in one eval)")
    if cfg.n is not None and cfg.n < 1:
        raise GlanceError(f"--n {cfg.n}: the number of prompts must be >= 1")
    if cfg.max_new_tokens < 1:
        raise GlanceError(f"--max-new-tokens {cfg.max_new_tokens}: must be >= 1")
    if cfg.draft_len is not None and cfg.draft_len < 1:
        raise GlanceError(f"--draft-len {cfg.draft_len}: must be >= 1")
    if cfg.n_ctx is not None and cfg.n_ctx < 16:
        raise GlanceError(f"--n-ctx {cfg.n_ctx}: must be >= 16")
    if uri.is_uri(cfg.out):
        raise GlanceError("--engine llamacpp writes into a local folder; pass a local --out and copy the folder to "
                          "the store after")


def make_llama(path, drafter: str, *, n_ctx: int = DEFAULT_N_CTX, threads: int | None = None,
               draft_len: int | None = None, seed: int = 0):
    """The Llama glance-log decodes with: ``pld`` with a prompt-lookup draft model (every row's logits
    kept; refused in one line when ``n_ctx x vocabulary x 4`` bytes do not fit the memory available),
    ``ar`` without one."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(max_ngram_size=PLD_NGRAM, num_pred_tokens=draft_len or PLD_LEN) \
        if drafter == "pld" else None
    # Llama.scores (n_ctx x vocabulary float32 with logits_all) is allocated lazily: nothing is touched yet
    llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads or None, n_threads_batch=threads or None,
                logits_all=draft is not None, draft_model=draft, seed=seed, verbose=False)
    if draft is not None:
        need, avail = logits_bytes(llm), memory_available()
        if avail is not None and need > avail:
            llm.close()
            raise GlanceError(f"--drafter pld makes llama.cpp keep every row's logits: --n-ctx {n_ctx} x "
                              f"{llm.n_vocab():,} x 4 bytes = {need / 2**30:.1f} GiB, more than the "
                              f"{avail / 2**30:.1f} GiB available; lower --n-ctx")
    return llm


def _key(cfg, name: str, drafter: str, n_ctx: int, llm) -> dict:
    import llama_cpp

    return {"task": cfg.task, "engine": "llamacpp", "binding": llama_cpp.__version__, "model": model_key(cfg.model),
            "drafter": name, "drafter_config": {"drafter": drafter, **({"max_ngram_size": PLD_NGRAM,
                                                                        "num_pred_tokens": cfg.draft_len or PLD_LEN}
                                                                       if drafter == "pld" else {})},
            "max_new_tokens": cfg.max_new_tokens, "n_ctx": n_ctx, "n_threads": llm.n_threads,
            "temperature": 0.0, "data": str(Path(cfg.data).resolve()) if cfg.data else None, "logger_version": "1"}


@dataclass
class _Arm:
    cfg: object
    llm: object
    logger: RoundLogger
    prompter: _Prompter
    rid: str
    name: str
    done: set
    outputs: dict
    stats: dict
    verdicts: list = field(default_factory=list)


def _decode(arm: _Arm, pid: str, task: str, ids: list, refs) -> list:
    """One prompt through the hook; returns its output tokens."""
    cfg = arm.cfg
    t0 = time.perf_counter()
    arm.llm.reset()
    with llamacpp_hook(arm.llm, arm.logger, pid, task=task, reference=refs, audit=cfg.audit) as rec:
        arm.llm.create_completion(list(ids), max_tokens=cfg.max_new_tokens, temperature=0.0, top_k=40,
                                  repeat_penalty=1.0)
    tokens = rec.outputs[-1]
    st, row = arm.stats, arm.logger.last_prompt
    st["prompts"] += 1
    st["rounds"] += row["rounds"]
    st["tokens"] += len(tokens)
    st["accepted"] += int(sum(r["accepted"] for r in arm.logger.last_rows))
    arm.verdicts.extend(rec.verdicts)
    if cfg.progress:
        dt = time.perf_counter() - t0
        print(f"{cfg.task}/{arm.name}: {pid} ({task}): {len(tokens)} tokens, {row['rounds']} rounds, "
              f"{len(tokens) / dt:.1f} tok/s" + ("" if row.get("greedy_match") is None else
                                                 f", greedy match {row['greedy_match']}"), file=sys.stderr)
    return tokens


def _fits(arm: _Arm, pid: str, n: int) -> bool:
    if Q.fits_context(n, arm.cfg.max_new_tokens, arm.prompter.n_ctx):
        return True
    arm.stats["context_skipped"] += 1
    arm.stats["context_skipped_ids"].append(pid)
    return False


def _log_question(arm: _Arm, q) -> None:
    """Every turn of a question in one conversation (turn k's prompt holds this arm's answers)."""
    answers: list = []
    ids = q.prompt_ids
    tok = arm.prompter.tokenizer
    for t in range(len(q.turns)):
        if all(p in arm.done for p in ids[t:]):
            return
        turns, pid = q.turns[:t + 1], ids[t]
        prompt = Q.encode_conversation(arm.prompter, turns, answers)
        if not _fits(arm, pid, prompt.n_tokens):
            arm.stats["context_skipped"] += len(ids[t + 1:])
            arm.stats["context_skipped_ids"].extend(ids[t + 1:])
            return
        tokens = arm.outputs.get(pid) if pid in arm.done else None
        if tokens is None:
            refs = [r for r in (*q.references[t], *turns, *answers) if r]
            tokens = _decode(arm, pid, q.category, prompt.prompt_ids, refs)
        answers.append(Q.answer_text(tok, tokens))


def _log_item(arm: _Arm, item) -> None:
    if item.prompt_id in arm.done:
        return
    prompt = arm.prompter.encode(item.prompt)
    if _fits(arm, item.prompt_id, prompt.n_tokens):
        _decode(arm, item.prompt_id, arm.cfg.task, prompt.prompt_ids,
                [p for p in (item.reference, item.context) if p])


def _items(cfg, conversations: bool):
    if cfg.items is not None:
        return cfg.items
    if conversations:
        return Q.load_questions(cfg.data, cfg.task, cfg.n, cfg.seed, cfg.turns)
    T.check_task(cfg.task)
    return T.load_items(cfg.task, cfg.data, cfg.n, cfg.seed)


def verdict(verdicts: list, audited: int) -> str | None:
    """The audit's one line: how many outputs llama.cpp's batched verification changed."""
    changed = [v for v in verdicts if v["first_divergence"] >= 0]
    if not changed:
        return None
    v = changed[0]
    m = "unknown" if v["divergence_margin"] is None else f"{v['divergence_margin']:.3f}"
    return (f"llama.cpp's batched verification changed the output of {len(changed)} of {audited} audited prompts "
            f"(drafted output != the engine's own plain greedy decode; e.g. {v['prompt_id']} at output token "
            f"{v['first_divergence']}: {v['divergence_token']} instead of {v['greedy_token']}, root margin {m})")


def run_llamacpp(cfg) -> dict:
    """Run ``cfg`` (a :class:`glance_log.run.RunConfig` with ``engine="llamacpp"``) through
    llama.cpp; returns the summary :func:`glance_log.run.run` returns."""
    _validate(cfg)
    conversations = ((cfg.items is not None and bool(cfg.items) and all(isinstance(i, Q.Question) for i in cfg.items))
                     or (cfg.items is None and Q.question_file(cfg.data) is not None))
    check_output(cfg.out, [cfg.data], folder=True)
    items = _items(cfg, conversations)
    path = gguf_file(cfg.model)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(gguf_tokenizer_folder(cfg.model))
    n_ctx = cfg.n_ctx or DEFAULT_N_CTX
    prompter = _Prompter(tok, n_ctx)
    out = make_folder(check_output(cfg.out, [cfg.data], folder=True))
    arms = [cfg.drafter] + (["ar"] if cfg.baseline and cfg.drafter != "ar" else [])
    summary = {"out": str(out), "arms": []}
    for drafter in arms:
        name = (cfg.label or drafter) if drafter == cfg.drafter else "ar"
        llm = make_llama(path, drafter, n_ctx=n_ctx, threads=cfg.threads, draft_len=cfg.draft_len, seed=cfg.seed)
        try:
            summary["arms"].append(_log_arm(cfg, llm, drafter, name, prompter, items, out, conversations))
        finally:
            llm.close()
    return summary


def _log_arm(cfg, llm, drafter, name, prompter, items, out, conversations) -> dict:
    key = _key(cfg, name, drafter, prompter.n_ctx, llm)
    rid = R.run_id_of(key)
    meta = run_metadata(run_id=rid, target=model_source(cfg.model), drafter=key["drafter_config"],
                        dtype="gguf", device="cpu", temperature=0.0, seed=cfg.seed, max_new_tokens=cfg.max_new_tokens,
                        task=cfg.task, data=cfg.data or "embedded-suite", command=cfg.command,
                        prompt_format=Q.prompt_format(prompter) if conversations else None,
                        tested_with=f"llama-cpp-python {TESTED_VERSION}")
    stats = {"run_id": rid, "drafter": name, "skipped": 0, "prompts": 0, "rounds": 0, "accepted": 0, "tokens": 0,
             "decode_ms": 0.0, "greedy_mismatches": 0, "context_limit": prompter.n_ctx, "context_skipped": 0,
             "context_skipped_ids": []}
    with R.run_lock(out, rid):
        if cfg.audit:
            _, _, unaudited = R.audit_state(out, rid)
            if unaudited:
                raise GlanceError(f"--audit: {unaudited} prompt(s) of run {rid} are already in {out} without the "
                                  "audit, and a rerun skips logged prompts; audit into a new folder (--out OTHER_DIR)")
        done = R.logged_prompts(out, rid, "matched")
        removed = R.remove_orphan_rounds(out, rid, "matched", done)
        if removed:
            print(f"glance-log: removed {removed} round rows of prompts without a prompt row (an interrupted write); "
                  "those prompts are logged again", file=sys.stderr)
        ids = [p for it in items for p in (it.prompt_ids if isinstance(it, Q.Question) else [it.prompt_id])]
        stats["skipped"] = sum(p in done for p in ids)
        logger = RoundLogger(out, run_id=rid, task=cfg.task, run=meta, tokenizer=prompter.tokenizer, drafter=name,
                             flush_rows=1)
        todo = [p for it in items if isinstance(it, Q.Question) for p in it.prompt_ids[:-1] if p in done]
        arm = _Arm(cfg, llm, logger, prompter, rid, name, done,
                   R.logged_outputs(out, rid, "matched", todo) if conversations else {}, stats)
        try:
            for it in items:
                if isinstance(it, Q.Question):
                    _log_question(arm, it)
                else:
                    _log_item(arm, it)
        finally:
            logger.close()
        if cfg.audit:
            stats["audited"], stats["greedy_mismatches"], _ = R.audit_state(out, rid)
            stats["verdict"] = verdict(arm.verdicts, len(arm.verdicts))
    stats["tau"] = (stats["accepted"] + stats["rounds"]) / stats["rounds"] if stats["rounds"] else float("nan")
    stats["divergences"] = arm.verdicts
    return stats
