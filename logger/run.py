"""Running a task end to end: items -> decoder + logger -> Parquet, with resume,
the autoregressive baseline arm, the fp32 greedy audit and the mismatched probe.

``glance-log`` (:mod:`glance_log.cli`) is a thin parser over :func:`run`.
"""
from __future__ import annotations

import hashlib
import math
import re
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch

from glance_law import schema as S
from glance_law.data import uri
from glance_law.data.outputs import check_output, make_folder
from glance_law.errors import GlanceError
from glance_law.io import run_metadata
from glance_law.replay.tree import max_code_bits

from . import questions as Q
from . import tasks as T
from .decode import Forced, decode, greedy_reference
from .default import block_path, target_path
from .drafters import make_drafter
from .models import load_target, model_info
from .record import RoundLogger
from .runstate import (
    audit_state,
    logged_outputs,
    logged_prompts,
    remove_orphan_rounds,
    run_id_of,
    run_lock,
)
from .sources import model_key, model_source, resolve_model

__all__ = ["RunConfig", "run", "default_model", "default_block", "run_id_of", "logged_prompts", "logged_outputs",
           "remove_orphan_rounds", "run_lock", "audit_state"]

LOGGER_VERSION = "1"


def default_model() -> Path:
    """The embedded target (package data; ``$GLANCE_MODELS/target`` when that is set)."""
    return target_path()


def default_block() -> Path:
    """The embedded block head (package data; ``$GLANCE_MODELS/block`` when that is set)."""
    return block_path()


@dataclass
class RunConfig:
    task: str = "docvqa"
    model: str | None = None
    drafter: str = "block"
    draft_model: str | None = None
    budget: int = 63
    branch_k: int = 8
    max_new_tokens: int = 256
    n: int | None = 20
    data: str | None = None
    out: str = "logs"
    dtype: str = "fp32"
    device: str = "auto"
    temperature: float = 0.0
    baseline: bool = False
    audit: bool = False
    probe: str | None = None
    seed: int = 0
    draft_len: int | None = None
    label: str | None = None        # the drafter arm's label in the logs (default: the drafter's name)
    turns: int | None = None        # question files: the first N turns of each question (None: all)
    exit_layer: int | None = None   # --drafter early_exit: the decoder layers that draft (1 <= k < N)
    policy: str | None = None      # a policy JSON file (python -m glance_law.policy --out): shapes every round
    policy_dict: dict | None = field(default=None, repr=False)   # the loaded policy (set by run)
    dense: bool = False             # dense logging: autoregressive, the drafter's proposal at every position
    command: str | None = None
    progress: bool = True
    trust_remote_code: bool = False     # run code shipped in a model folder (auto_map); only on request
    engine: str = "tree"            # tree (the reference decoder) or llamacpp (glance_log.run_llamacpp)
    n_ctx: int | None = None        # --engine llamacpp: the context size (default run_llamacpp.DEFAULT_N_CTX)
    threads: int | None = None      # --engine llamacpp: n_threads (None: llama.cpp's choice)
    items: list | None = field(default=None, repr=False)   # pre-loaded items (tests, notebooks)


def _config_key(cfg: RunConfig, drafter: str, drafter_cfg: dict, device: str) -> dict:
    return {
        "task": cfg.task, "model": model_key(cfg.model), "drafter": drafter,
        "drafter_config": drafter_cfg, "budget": cfg.budget if drafter != "ar" else 0,
        "branch_k": cfg.branch_k if drafter != "ar" else 0, "max_new_tokens": cfg.max_new_tokens,
        "dtype": cfg.dtype, "device": device, "temperature": cfg.temperature,
        "seed": cfg.seed if cfg.temperature > 0 else None, "data": str(Path(cfg.data).resolve()) if cfg.data else None,
        "logger_version": LOGGER_VERSION,
        **({"policy": cfg.policy_dict} if getattr(cfg, "policy_dict", None) and drafter != "ar" else {}),
        **({"dense": True} if cfg.dense and drafter != "ar" else {}),
    }


def target_info(spec) -> dict:
    """The run metadata's ``target``: the loaded folder's model type and architectures, and for a
    .gguf file or a known name its source (path or name, SHA-256; see glance_log.sources)."""
    src = model_source(spec)
    if src["source"] == "folder":
        return model_info(spec)
    info = model_info(resolve_model(spec))
    info["folder"] = info.pop("path")       # the converted folder in the cache; "path" is the .gguf file
    return {**info, **src}


_target_info = target_info


class Progress:
    def __init__(self, total: int, label: str, enabled: bool = True):
        self.total, self.label, self.enabled = total, label, enabled
        self.done = 0
        self.rounds = 0
        self.tokens = 0
        self.acc_sum = 0
        self.seconds = 0.0
        self.tty = enabled and sys.stderr.isatty()

    def update(self, res, seconds: float) -> None:
        self.done += 1
        self.rounds += res.rounds
        self.acc_sum += int(np.sum(res.accepted)) + res.rounds
        self.tokens += len(res.tokens)
        self.seconds += seconds
        if not self.enabled:
            return
        tau = self.acc_sum / self.rounds if self.rounds else float("nan")
        tps = self.tokens / self.seconds if self.seconds > 0 else float("nan")
        msg = f"{self.label}: prompts {self.done}/{self.total}  tau {tau:.2f}  {tps:.1f} tok/s"
        print(("\r" + msg) if self.tty else msg, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty and self.done:
            print(file=sys.stderr)


def _validate(cfg: RunConfig) -> None:
    """Argument checks, one line each (the CLI prints it and exits 2)."""
    if cfg.n is not None and cfg.n < 1:
        raise GlanceError(f"--n {cfg.n}: the number of prompts must be >= 1")
    if cfg.label is not None and (cfg.label == "ar" or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}", cfg.label)):
        raise GlanceError(f"--label {cfg.label!r}: letters, digits and . _ + - (at most 64, a letter or digit first; "
                          "it names the arm's files), and not 'ar' (the baseline's label)")
    if cfg.turns is not None and cfg.turns < 1:
        raise GlanceError(f"--turns {cfg.turns}: must be >= 1 (the first N turns of each question)")
    if cfg.drafter != "ar" and cfg.budget < 1:
        raise GlanceError(f"--budget {cfg.budget}: the tree needs at least one node (>= 1) for --drafter "
                          f"{cfg.drafter}; for plain autoregressive decoding use --drafter ar")
    if cfg.budget < 0:
        raise GlanceError(f"--budget {cfg.budget}: must be >= 0")
    check_output(cfg.out, [cfg.data, cfg.policy], folder=True)   # before the model loads: one line
    if cfg.branch_k < 1:
        raise GlanceError(f"--branch-k {cfg.branch_k}: must be >= 1")
    if cfg.max_new_tokens < 1:
        raise GlanceError(f"--max-new-tokens {cfg.max_new_tokens}: must be >= 1")
    if cfg.draft_len is not None and cfg.draft_len < 1:
        raise GlanceError(f"--draft-len {cfg.draft_len}: must be >= 1")
    if cfg.exit_layer is not None and cfg.drafter != "early_exit":
        raise GlanceError(f"--exit-layer is for --drafter early_exit, not {cfg.drafter}")
    if cfg.drafter == "early_exit" and cfg.exit_layer is None:
        raise GlanceError("--drafter early_exit needs --exit-layer K, the number of the target's decoder layers "
                          "that draft (1 <= K < the target's num_hidden_layers)")
    if cfg.dense and (cfg.drafter == "ar" or cfg.policy is not None or cfg.probe or cfg.temperature > 0):
        raise GlanceError("--dense logs a drafter's proposal at every position of a greedy autoregressive decode; "
                          "it takes a speculative --drafter and neither --policy, --probe nor --temperature > 0")
    if not (isinstance(cfg.temperature, (int, float)) and math.isfinite(cfg.temperature) and cfg.temperature >= 0):
        raise GlanceError(f"--temperature {cfg.temperature}: must be a finite number >= 0 (0 = greedy)")


def _generator(cfg: RunConfig, device, prompt_id: str):
    if cfg.temperature <= 0:
        return None
    g = torch.Generator(device=device)
    seed = int(hashlib.sha1(f"{cfg.seed}:{prompt_id}".encode()).hexdigest()[:12], 16)
    g.manual_seed(seed)
    return g


def _encode(target, item, other=None):
    """Encode an item; ``other`` (the mismatched probe) lends its image or context."""
    import io as _io

    src = other if other is not None else item
    image = src.image
    if src.image_bytes is not None:
        from PIL import Image
        image = Image.open(_io.BytesIO(src.image_bytes))
    if target.is_vlm:
        return target.encode(item.prompt, image=image, question=item.question or item.prompt)
    if other is None:
        return target.encode(item.prompt)
    if item.context and other.context and item.context in item.prompt:
        return target.encode(item.prompt.replace(item.context, other.context, 1))
    raise GlanceError(f"--probe mismatched: item {item.prompt_id} has no context block in its prompt to swap "
                      "for a text-only target (use a vision-language target or items with 'context')")


def run(cfg: RunConfig) -> dict:
    """Run the configuration; returns a summary dict. Raises GlanceError on user errors,
    after flushing every completed prompt."""
    if cfg.engine == "llamacpp":
        from .run_llamacpp import run_llamacpp
        return run_llamacpp(cfg)
    if cfg.engine != "tree":
        raise GlanceError(f"--engine {cfg.engine!r}: tree or llamacpp")
    conversations = _is_question_run(cfg)
    if not conversations:
        if cfg.task not in T.REGISTRY:      # a question file's category or 'all': say why --data is none
            why = Q.not_a_question_file(cfg.data, cfg.task)
            if why is not None:
                raise GlanceError(why)
        T.check_task(cfg.task)      # a question file brings its own task names (its categories)
    elif cfg.probe:
        raise GlanceError("--probe mismatched swaps a prompt's image or context block; the questions of a "
                          "question file have neither")
    if cfg.probe not in (None, "mismatched"):
        raise GlanceError(f"--probe {cfg.probe!r}: the only probe is 'mismatched'")
    if cfg.audit and cfg.temperature > 0:
        raise GlanceError("--audit compares with greedy decoding; use it with --temperature 0")
    _validate(cfg)
    if cfg.policy is not None:
        if cfg.probe:
            raise GlanceError("--policy with --probe: the mismatched replay follows the live shapes; run them apart")
        if cfg.drafter == "ar":
            raise GlanceError("--policy shapes drafts; --drafter ar drafts nothing")
        from glance_law.policy import load_policy, policy_to_dict
        cfg.policy_dict = policy_to_dict(load_policy(cfg.policy)[0])
    cfg.model = str(cfg.model or default_model())
    if cfg.drafter == "block" and cfg.draft_model is None:
        cfg.draft_model = str(default_block())
    if cfg.items is not None:
        items = cfg.items
    elif conversations:
        items = Q.load_questions(cfg.data, cfg.task, cfg.n, cfg.seed, cfg.turns)
    else:
        items = T.load_items(cfg.task, cfg.data, cfg.n, cfg.seed)
    if cfg.probe and len(items) < 2:
        T.derangement(len(items))
    quiet = _hf_progress_off() if not cfg.progress else None      # --quiet: no model-loading bar either
    try:
        return _run_loaded(cfg, items)
    finally:
        if quiet is not None:
            quiet()


def _is_question_run(cfg: RunConfig) -> bool:
    """Conversations of a question file (``--data question.jsonl[.gz]``, or pre-loaded
    :class:`~glance_log.questions.Question` items) rather than task items?"""
    if cfg.items is not None:
        return bool(cfg.items) and all(isinstance(it, Q.Question) for it in cfg.items)
    return Q.question_file(cfg.data) is not None


def _hf_progress_off():
    """Turn transformers' progress bars off; returns the function that turns them back on."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    if not hf_logging.is_progress_bar_enabled():
        return None
    hf_logging.disable_progress_bar()
    return hf_logging.enable_progress_bar


def _run_loaded(cfg: RunConfig, items) -> dict:
    target = load_target(cfg.model, cfg.dtype, cfg.device, trust_remote_code=cfg.trust_remote_code)
    if cfg.probe and not target.is_vlm:
        bad = [it.prompt_id for it in items if not (it.context and it.context in it.prompt)]
        if bad:
            raise GlanceError(f"--probe mismatched with a text-only target swaps each prompt's context block, "
                              f"but {len(bad)} item(s) (e.g. {bad[0]}) have no 'context' inside their prompt")
    device = str(target.device)
    drafter = make_drafter(cfg.drafter, target, draft_model=cfg.draft_model, branch_k=cfg.branch_k,
                           draft_len=cfg.draft_len, trust_remote_code=cfg.trust_remote_code,
                           exit_layer=cfg.exit_layer)
    if cfg.drafter in ("block", "two_model", "early_exit") and max_code_bits(drafter.horizon, cfg.branch_k) > 62:
        raise GlanceError(f"--branch-k {cfg.branch_k} with a {drafter.horizon}-offset draft is too wide for exact "
                          "tree codes (horizon x log2(k) must be <= 62); lower --branch-k or --draft-len")
    arms = [(drafter, cfg.label or drafter.name)]     # the arm label: early_exit carries its layer (early_exit-6)
    if cfg.baseline and cfg.drafter != "ar":
        arms.append((make_drafter("ar", target), "ar"))
    ref_target = None
    if cfg.audit:
        ref_target = target if target.dtype == torch.float32 else load_target(
            cfg.model, "fp32", target.device, trust_remote_code=cfg.trust_remote_code)
    if uri.is_uri(cfg.out):             # a store prefix: parts are single-upload objects (glance_law.data.uri)
        out = str(cfg.out).rstrip("/")
        uri.check_writable_prefix(out)
    else:                               # the one output path: never a link, a file, or a folder holding an input
        out = make_folder(check_output(cfg.out, [cfg.data, cfg.policy], folder=True))
    summary = {"out": str(out), "arms": []}
    perm = T.derangement(len(items)) if cfg.probe else None
    rids = [run_id_of(_config_key(cfg, name, dr.config(), target.device.type)) for dr, name in arms]
    with ExitStack() as locks:
        for rid in sorted(set(rids)):        # one writer per run in --out (see run_lock)
            locks.enter_context(run_lock(out, rid))
        if cfg.audit:
            for rid in rids:
                _, _, unaudited = audit_state(out, rid)
                if unaudited:
                    raise GlanceError(
                        f"--audit: {unaudited} prompt(s) of run {rid} are already in {out} without the audit, "
                        "and a rerun skips logged prompts, so they would stay unaudited; audit into a new "
                        "folder (--out OTHER_DIR), or delete that run's part files in this one first")
        _log_arms(cfg, arms, target, items, ref_target, out, device, perm, summary)
    target.close()
    return summary


@dataclass
class _Arm:
    """One arm's logging state: its run, loggers, what ``--out`` already holds, its counts."""

    cfg: RunConfig
    target: object
    ref_target: object
    dr: object
    name: str
    rid: str
    policy: object
    loggers: dict
    done: dict
    prog: Progress
    stats: dict
    limit: int | None = None
    outputs: dict = field(default_factory=dict)     # logged prompt id -> emitted tokens (earlier turns)
    main: str = S.CONDITIONS_DEFAULT                 # the arm's condition: matched, or dense (--dense)


def _unit_ids(unit) -> list:
    """The prompt ids one unit logs: a task item's one, or every turn of a question."""
    return unit.prompt_ids if isinstance(unit, Q.Question) else [unit.prompt_id]


def _open_arm(cfg, dr, name, target, ref_target, out, device, policy, items) -> tuple:
    """Set up one arm: its run id and metadata, the prompts ``out`` already holds (round rows of
    interrupted prompts removed), its loggers and counters. Returns (arm, indices of the items to do)."""
    key = _config_key(cfg, name, dr.config(), target.device.type)
    rid = run_id_of(key)
    conversations = bool(items) and isinstance(items[0], Q.Question)
    meta = run_metadata(run_id=rid, target=_target_info(cfg.model), vocab_size=target.vocab_size,
                        drafter=dr.config(), dtype=cfg.dtype,
                        device=device, temperature=cfg.temperature, seed=cfg.seed, budget=key["budget"],
                        branch_k=key["branch_k"], max_new_tokens=cfg.max_new_tokens, task=cfg.task,
                        data=cfg.data or "embedded-suite", command=cfg.command, policy=key.get("policy"),
                        prompt_format=Q.prompt_format(target) if conversations else None)
    probed = cfg.probe and (name != "ar" or cfg.drafter == "ar")     # the drafter's arm, not the baseline
    main = S.CONDITION_DENSE if (cfg.dense and name != "ar") else S.CONDITIONS_DEFAULT
    conditions = [main] + (["mismatched"] if probed else [])
    done = {c: logged_prompts(out, rid, c) for c in conditions}
    removed = sum(remove_orphan_rounds(out, rid, c, done[c]) for c in conditions)
    if removed:
        print(f"glance-log: removed {removed} round rows of prompts without a prompt row (an interrupted "
              f"write); those prompts are logged again", file=sys.stderr)
    loggers = {c: RoundLogger(out, run_id=rid, task=cfg.task, run=dict(meta, condition=c), condition=c,
                              tokenizer=target.tokenizer, drafter=name) for c in conditions}
    todo = [i for i, it in enumerate(items) if any(p not in done[c] for p in _unit_ids(it) for c in conditions)]
    ids = [p for it in items for p in _unit_ids(it)]
    stats = {"run_id": rid, "drafter": name, "skipped": sum(p in done[main] for p in ids),
             "prompts": 0, "rounds": 0, "accepted": 0, "tokens": 0, "decode_ms": 0.0, "greedy_mismatches": 0,
             "context_limit": Q.context_limit(target), "context_skipped": 0, "context_skipped_ids": []}
    prog = Progress(sum(p not in done[main] for i in todo for p in _unit_ids(items[i])),
                    f"{cfg.task}/{name}", cfg.progress)
    arm = _Arm(cfg, target, ref_target, dr, name, rid, policy, loggers, done, prog, stats, stats["context_limit"],
               main=main)
    if conversations:       # earlier turns already logged: their answers open the next turn's prompt
        arm.outputs = logged_outputs(out, rid, main,
                                     [p for i in todo for p in _unit_ids(items[i])[:-1]])
    return arm, todo


def _fits(arm: _Arm, prompt_id: str, prompt) -> bool:
    """Does the prompt leave room for --max-new-tokens in the model's positions? A prompt that
    does not is skipped and counted (never truncated)."""
    if Q.fits_context(prompt.n_tokens, arm.cfg.max_new_tokens, arm.limit):
        return True
    _skip_context(arm, [prompt_id])
    return False


def _skip_context(arm: _Arm, prompt_ids) -> None:
    arm.stats["context_skipped"] += len(prompt_ids)
    arm.stats["context_skipped_ids"].extend(prompt_ids)


def _decode_prompt(arm: _Arm, prompt_id: str, task: str, prompt, encode, refs, log: bool):
    """Decode one prompt with the arm's drafter; when ``log``, audit it (``encode(target)`` gives
    the prompt for the reference target) and write its rounds under ``task``."""
    cfg, target = arm.cfg, arm.target
    lg = arm.loggers[arm.main]
    t0 = time.perf_counter()
    if log:
        audit = None
        if arm.ref_target is not None:
            rp = prompt if arm.ref_target is target else encode(arm.ref_target)
            audit = greedy_reference(arm.ref_target, rp, cfg.max_new_tokens)
        lg.begin_prompt(prompt_id, refs, audit=audit, task=task)
    live = decode(target, arm.dr, prompt, budget=cfg.budget, branch_k=cfg.branch_k,
                  max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                  generator=_generator(cfg, target.device, prompt_id),
                  callbacks=[lg] if log else [], policy=arm.policy if arm.name != "ar" else None,
                  dense=arm.main == S.CONDITION_DENSE)
    if log:
        st = arm.stats
        st["prompts"] += 1
        st["rounds"] += live.rounds
        st["accepted"] += int(np.sum(live.accepted))
        st["tokens"] += len(live.tokens)
        st["decode_ms"] += live.decode_ms
        if lg.last_prompt.get("greedy_match") is False:
            st["greedy_mismatches"] += 1
        arm.prog.update(live, time.perf_counter() - t0)
    return live


def _log_item(arm: _Arm, items, i: int, perm) -> None:
    """One task item: the matched prompt (unless logged) and its mismatched probe."""
    cfg, item = arm.cfg, items[i]
    prompt = _encode(arm.target, item)
    if not _fits(arm, item.prompt_id, prompt):
        return
    live = _decode_prompt(arm, item.prompt_id, cfg.task, prompt, lambda t: _encode(t, item), _ref_texts(item),
                          log=item.prompt_id not in arm.done[arm.main])
    if "mismatched" in arm.loggers and item.prompt_id not in arm.done["mismatched"]:
        mprompt = _encode(arm.target, item, items[perm[i]])
        lm = arm.loggers["mismatched"]
        lm.begin_prompt(item.prompt_id, _ref_texts(item))
        mres = decode(arm.target, arm.dr, mprompt, budget=cfg.budget, branch_k=cfg.branch_k,
                      max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                      generator=_generator(cfg, arm.target.device, item.prompt_id + ":mismatched"),
                      callbacks=[lm], forced=Forced(live.resolve_stream, live.positions, len(live.tokens)))
        st = arm.stats
        st["probed"] = st.get("probed", 0) + 1
        st["probe_rounds"] = st.get("probe_rounds", 0) + mres.rounds
        st["probe_accepted"] = st.get("probe_accepted", 0) + int(np.sum(mres.accepted))


def _log_conversation(arm: _Arm, q) -> None:
    """Every turn of one question in one conversation: turn k's prompt holds the earlier turns
    and this arm's answers to them. A turn already logged is not decoded again: its answer is
    the ``tokens`` of its prompt row (decoded again, unlogged, only if that row has none).
    A turn that does not fit the context is skipped and counted, and so are the turns after it."""
    done = arm.done[arm.main]
    answers: list = []
    ids = q.prompt_ids
    for t in range(len(q.turns)):
        if all(p in done for p in ids[t:]):
            return
        turns, pid = q.turns[:t + 1], ids[t]
        prompt = Q.encode_conversation(arm.target, turns, answers)
        if not _fits(arm, pid, prompt):
            _skip_context(arm, ids[t + 1:])     # each later turn's prompt holds this one
            return
        tokens = arm.outputs.get(pid) if pid in done else None
        if tokens is None:
            refs = [r for r in (*q.references[t], *turns, *answers) if r]
            encode = partial(Q.encode_conversation, turns=turns, answers=list(answers))
            tokens = _decode_prompt(arm, pid, q.category, prompt, encode, refs, log=pid not in done).tokens
        answers.append(Q.answer_text(arm.target.tokenizer, tokens))


def _close_arm(arm: _Arm) -> None:
    for lg in arm.loggers.values():
        lg.close()
    arm.prog.close()


def _arm_summary(arm: _Arm, out) -> dict:
    """The arm's counts, finished: tau, probe tau, the audit over ``out``."""
    st = arm.stats
    st["tau"] = (st["accepted"] + st["rounds"]) / st["rounds"] if st["rounds"] else float("nan")
    if st.get("probe_rounds"):
        st["probe_tau"] = (st["probe_accepted"] + st["probe_rounds"]) / st["probe_rounds"]
    if arm.cfg.audit:       # over every audited prompt of the run in --out, this call's and earlier ones
        st["audited"], st["greedy_mismatches"], _ = audit_state(out, st["run_id"])
    return st


def _log_arms(cfg, arms, target, items, ref_target, out, device, perm, summary) -> None:
    """Log every arm's prompts into ``out`` (the caller holds the runs' locks)."""
    policy = None
    if cfg.policy_dict:
        from glance_law.policy import policy_from_dict
        policy = policy_from_dict(cfg.policy_dict)
    for dr, name in arms:
        arm, todo = _open_arm(cfg, dr, name, target, ref_target, out, device, policy, items)
        i = None
        try:
            for i in todo:
                if isinstance(items[i], Q.Question):
                    _log_conversation(arm, items[i])
                else:
                    _log_item(arm, items, i, perm)
        except torch.cuda.OutOfMemoryError:
            raise GlanceError(f"out of GPU memory on prompt {_unit_ids(items[i])[0]}; every completed prompt is "
                              f"saved in {out} (rerun to resume; lower --budget or --max-new-tokens)") from None
        finally:
            _close_arm(arm)
        summary["arms"].append(_arm_summary(arm, out))


def _ref_texts(item) -> list:
    """Texts a round's tokens may copy from: the reference and the context."""
    return [p for p in (item.reference, item.context) if p]
