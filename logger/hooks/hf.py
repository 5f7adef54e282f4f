"""Hugging Face ``generate`` with a candidate generator (assisted generation, prompt lookup,
early exit, MTP, DFlash, the Gemma 4 assistant, cross-tokenizer assistants): rounds from the
candidate generator that ``_get_candidate_generator`` returns (see docs/hooks.md).

``get_candidates`` gives the draft chain (and the drafter's logits when the generator returns
them); ``update_candidate_strategy`` gives the verified scores (root entropy, margins) and the
accepted count. Plain ``generate`` (no candidate generator) is logged as the autoregressive arm
``ar`` from forward hooks on the model: every generated token after the first is a round of
horizon 0. ``audit=True`` compares the output with plain greedy decoding of the same model.
Tested with transformers 5.24 (the pinned range).
"""
from __future__ import annotations

import contextlib

import torch

from glance_law.errors import GlanceError
from glance_law.replay.tree import chain_tree

from ..decode import PromptEvent, RoundEvent, Timer
from ..drafters import topk_rows
from ..models import eos_token_ids
from .common import Attachments, record_vocab_size
from .common import stop_reason as _stop_reason

__all__ = ["hf_generate_hook", "HFRoundRecorder", "GENERATORS", "generator_kind", "generator_settings"]

# transformers' candidate generator classes (5.24) -> (drafter label, draft passes per round):
# "count" = the drafting model's forward calls during get_candidates (an autoregressive
# assistant: one per drafted token of its own vocabulary), "chain" = one per drafted token
# (MTP: one MTP layer per token), "one" = a single pass (DFlash drafts the block at once),
# "none" = model-free.
GENERATORS = {
    "PromptLookupCandidateGenerator": ("pld", "none"),
    "AssistedCandidateGenerator": ("two_model", "count"),
    "AssistedCandidateGeneratorDifferentTokenizers": ("two_model_xtok", "count"),
    "UniversalSpeculativeDecodingGenerator": ("two_model_usd", "count"),
    "EarlyExitCandidateGenerator": ("early_exit", "count"),
    "MTPCandidateGenerator": ("mtp", "chain"),
    "DFlashTokenCandidateGenerator": ("block", "one"),
    "SinglePositionMultiTokenCandidateGenerator": ("gemma4_assistant", "count"),
}


def generator_kind(gen) -> tuple[str, str]:
    """(drafter label, pass rule) of a candidate generator: its class or the nearest known base
    class; ``("hf", "count")`` for a generator this table does not know. Early exit carries its
    layer (``early_exit-<k>``, as glance-log labels it), so two exit layers never pool."""
    for cls in type(gen).__mro__:
        if cls.__name__ in GENERATORS:
            label, rule = GENERATORS[cls.__name__]
            k = getattr(gen, "assistant_early_exit", None)
            if label == "early_exit" and k is not None:
                label = f"{label}-{int(k)}"
            return label, rule
    return "hf", "count"


# generator attribute -> the run metadata's name for it (fixed settings that change what is drafted)
_SETTINGS = (("assistant_early_exit", "exit_layer"), ("num_output_tokens", "prompt_lookup_num_tokens"),
             ("max_matching_ngram_size", "max_matching_ngram_size"))


def generator_settings(gen) -> dict:
    """The candidate generator's class and the fixed settings it drafts with, as plain JSON
    values: early exit's ``exit_layer`` (with the model's ``num_hidden_layers`` and
    ``layer_fraction``), prompt lookup's ``prompt_lookup_num_tokens`` and
    ``max_matching_ngram_size``, an assistant's ``num_assistant_tokens_schedule`` and, under the
    ``constant`` schedule, its ``num_assistant_tokens``. Settings transformers adapts while it
    generates (the heuristic draft length, the confidence threshold) are not run settings: the
    rounds' ``horizon`` shows what each round drafted."""
    out = {"generator": type(gen).__name__}
    for attr, key in _SETTINGS:
        v = getattr(gen, attr, None)
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            out[key] = v
    gc = getattr(gen, "assistant_generation_config", None)
    sched = getattr(gc, "num_assistant_tokens_schedule", None)
    if isinstance(sched, str):
        out["num_assistant_tokens_schedule"] = sched
        n = getattr(gen, "num_assistant_tokens", None)
        if sched == "constant" and isinstance(n, (int, float)):
            out["num_assistant_tokens"] = n
    model = getattr(gen, "assistant_model", None)
    cfg = getattr(model, "config", None)
    if "exit_layer" in out and cfg is not None:
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        n = getattr(text, "num_hidden_layers", None)
        if isinstance(n, int) and n > 0:
            out.update(num_hidden_layers=n, layer_fraction=out["exit_layer"] / n)
    return out


def _record_settings(logger, label: str, settings: dict) -> None:
    """Write the drafter's label and settings into the run metadata (``drafter``) of the
    logger's part files; a logger whose run already records other settings is refused (one
    run, one drafter configuration: rounds of two settings would pool silently)."""
    for writer in (getattr(logger, "rounds", None), getattr(logger, "prompts", None)):
        run = getattr(writer, "run", None)
        if not isinstance(run, dict):
            continue
        have = run.get("drafter")
        want = {"drafter": label, **settings}
        if isinstance(have, dict):
            clash = {k: (have[k], v) for k, v in want.items() if k in have and have[k] != v}
            if clash:
                raise GlanceError(f"hf_generate_hook: this RoundLogger's run already records drafter settings "
                                  f"{ {k: a for k, (a, _) in clash.items()} } but this generate call drafts with "
                                  f"{ {k: b for k, (_, b) in clash.items()} }; log it into another RoundLogger "
                                  "(its own run_id)")
            run["drafter"] = {**want, **have}
        elif have is None:
            run["drafter"] = want
        else:
            run.setdefault("drafter_settings", settings)


class _CandidateProxy:
    """Delegates to the wrapped candidate generator and reports each round to the recorder."""

    def __init__(self, inner, recorder: HFRoundRecorder):
        self._inner = inner
        self._rec = recorder

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def get_candidates(self, input_ids, *args, **kwargs):
        self._rec._begin(input_ids)
        counted = getattr(self._inner, "assistant_model", None) if self._rec.rule == "count" else None
        calls = [0]
        handle = None
        if isinstance(counted, torch.nn.Module):
            handle = counted.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
        try:
            cand, logits = self._inner.get_candidates(input_ids, *args, **kwargs)
        finally:
            if handle is not None:
                handle.remove()
        self._rec._drafted(input_ids, cand, logits, calls[0] if handle is not None else None)
        return cand, logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        self._rec._verified(input_ids, scores, num_matches)
        return self._inner.update_candidate_strategy(input_ids, scores, num_matches)


class HFRoundRecorder:
    """Builds :class:`RoundEvent` objects from the assisted-generation loop of ``generate``.

    A first iteration that drafts nothing (the generators that need the target's outputs to
    draft - MTP, DFlash, the Gemma 4 assistant - and prompt lookup without a match) is the
    prefill: no round, its time is the prompt's ``prefill_ms`` and output token 0 is in no
    round (glance-log's convention). A first iteration that drafts is verified together with
    the prefill and is round 0 (it commits output token 0; see docs/hooks.md).

    Plain ``generate`` (no candidate generator is requested) is logged from the model's forward
    calls (:class:`_ARSteps`) as drafter ``ar``: the first call is the prefill, every later one a
    round of horizon 0 committing one token. Each round's ``pred_entropy`` is that of the row that
    chose its root: the previous round's row of its last committed token, or the prefill's row."""

    def __init__(self, model, logger, drafter: str | None, branch_k: int = 8, audit=False):
        self.model = model
        self.logger = logger
        self.drafter = drafter
        self.rule = "count"
        self.k = int(branch_k)
        self.audit = audit
        self.timer = Timer(next(model.parameters()).device)
        self._rounds: list = []
        self._cur = None
        self.prompt_len = None
        self._prefill = None            # (start, end) marks of a separate prefill iteration
        self._started = False           # a first iteration was seen
        self._finished = False
        self._pred = None               # (V,) device row that chose the next round's root, or None
        self.bound = False              # a candidate generator was requested (assisted generation)
        self.auditing = False           # the audit's reference is decoding: nothing is recorded
        self.steps = _ARSteps(self)

    def _assisted(self) -> None:
        """``generate`` asks for a candidate generator: assisted generation, not the ``ar`` arm."""
        if self.auditing:
            raise GlanceError("hf_generate_hook: the audit's greedy reference requested a candidate generator; "
                              "leave assistant_model / prompt_lookup_num_tokens / assistant_early_exit out of the "
                              "model's generation_config and pass them to generate() instead")
        self.bound = True
        self.steps.detach()

    def _bind(self, gen) -> None:
        label, self.rule = generator_kind(gen)
        if self.drafter is None:
            self.drafter = label
        _record_settings(self.logger, self.drafter, generator_settings(gen))

    def _begin(self, input_ids):
        if self.prompt_len is None:
            self.prompt_len = int(input_ids.shape[1])
            self._t0 = self.timer.mark()
        self._cur = {"m0": self.timer.mark(), "cur_len": int(input_ids.shape[1])}

    def _drafted(self, input_ids, cand, logits, calls):
        c = self._cur
        c["m1"] = self.timer.mark()
        c["draft"] = cand[0, input_ids.shape[1]:]
        c["draft_logits"] = None if logits is None else logits[0]
        c["calls"] = calls

    def _passes(self, L: int, calls) -> int:
        if not L or self.rule == "none":
            return 0
        if self.rule == "one":
            return 1
        if self.rule == "count" and calls:
            return int(calls)
        return L

    def _verified(self, input_ids, scores, num_matches):
        c = self._cur
        m2 = self.timer.mark()
        a = int(num_matches)
        L = int(c["draft"].shape[0])
        first, self._started = not self._started, True
        if first and L == 0:                                    # the prefill alone: no round
            self._prefill = (c["m0"], m2)
            self._pred = scores[0, 0].clone()                   # it chose output token 0, round 0's root
            return
        new = input_ids[0, c["cur_len"]:]                      # committed this round (device)
        sc = scores[0]                                          # (L+1, V) verified rows (float32)
        model_free = self.rule == "none"
        if L and c["draft_logits"] is not None:
            logp, val, idx = topk_rows(c["draft_logits"][:L], self.k)
            point, full = False, logp
        elif L:                                                 # the proposal only
            fill = 0.0 if model_free else float("nan")          # model-free: probability 1; else unknown
            val = torch.full((L, 1), fill, device=sc.device)
            idx = c["draft"].view(L, 1)
            point, full = model_free, None
        else:
            val = torch.zeros(0, 1, device=sc.device)
            idx = torch.zeros(0, 1, dtype=torch.long, device=sc.device)
            point, full = False, None
        row_tokens = torch.argmax(sc, dim=-1)
        n_new = int(new.shape[0])
        row_tokens[:n_new] = new                                # the tokens actually committed
        path = torch.arange(min(a, L) + 1, device=sc.device)
        ev = RoundEvent(round=len(self._rounds), position=c["cur_len"] - self.prompt_len, root=-1, accepted=min(a, L),
                        committed=new, horizon=L, budget=L, tree=chain_tree(L) if L else None,
                        logq=val, ids=idx, draft_passes=self._passes(L, c["calls"]), point_mass=point,
                        verify_logits=sc, path_rows=path, row_tokens=row_tokens,
                        full_logp=full if L else None, marks=(c["m0"], c["m1"], m2, m2), drafter=self.drafter,
                        position_offset=1, root_logits=self._pred)
        self._pred = sc[n_new - 1].clone() if n_new else None   # chose the last committed token: the next root
        self._rounds.append(ev)
        self.logger.on_round(ev)

    def finish(self, output_ids, stop_reason: str | None = None) -> None:
        """Write the prompt: ``output_ids`` as ``generate`` returned them (a tensor, or the output
        object holding ``sequences``). With ``audit``, the output is compared with the greedy
        reference first (decoded here, after the output's timing marks)."""
        if self._finished:
            return
        self._finished = True
        reason = stop_reason
        output_ids = getattr(output_ids, "sequences", output_ids)
        t1 = self.timer.mark()
        if self.prompt_len is None:
            raise GlanceError("hf_generate_hook: finish() was called before generate() ran inside the hook")
        seq = output_ids[0].tolist()
        gen = seq[self.prompt_len:]
        stream = [seq[self.prompt_len - 1]] + gen               # index 0: the prompt's last token
        if not self.bound:
            self.steps.close(gen, t1)                           # plain generate: its last round
        if reason is None:
            reason = _stop_reason(gen, eos_token_ids(self.model, getattr(self.logger, "tokenizer", None)))
        if self.audit is not None and self.audit is not False:
            self.logger.audit_against(*self._reference(output_ids[:, :self.prompt_len], len(gen)))
        self.timer.resolve()
        start = self._prefill[1] if self._prefill else self._t0
        self.logger.on_prompt_end(PromptEvent(prompt_tokens=self.prompt_len, tokens=gen, resolve_stream=stream,
                                              rounds=len(self._rounds), stop_reason=reason,
                                              prefill_marks=self._prefill or (None, None),
                                              decode_marks=(start, t1), timer=self.timer))

    def _reference(self, prompt, n: int) -> tuple[list, list]:
        """The audit's reference: ``audit`` itself (tokens, or (tokens, margins)) or, for
        ``audit=True``, plain greedy decoding of ``n`` tokens by the same model (no assistant),
        with its top-1 minus top-2 logit margin at every step."""
        if self.audit is not True:
            ref = self.audit
            if isinstance(ref, tuple) and len(ref) == 2 and not isinstance(ref[0], int):
                return list(ref[0]), list(ref[1])
            return [int(t) for t in ref], []
        if n == 0:
            return [], []
        self.auditing = True
        try:
            with torch.no_grad():
                out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                          max_new_tokens=n, return_dict_in_generate=True, output_logits=True)
        finally:
            self.auditing = False
        tokens = out.sequences[0, prompt.shape[1]:].tolist()
        top = torch.topk(torch.cat([x[:1].float() for x in out.logits]), 2, dim=-1).values
        return tokens, (top[:, 0] - top[:, 1]).tolist()


class _ARSteps:
    """Plain ``generate``'s forward calls as rounds of horizon 0 (the ``ar`` arm).

    Call j >= 1 reads output token j - 1 (its root) and chooses output token j; its round is
    written when call j + 1 starts (whose input is that token) or, for the last call, at
    ``finish`` from the output (a call whose token is not in the output - one decoded past a
    deferred stop check - is no round). Round r's ``position`` is r; ``verify_ms`` is the forward
    call, ``round_ms`` runs to the next call's start (HF's per-token work included)."""

    def __init__(self, rec: HFRoundRecorder):
        self.rec = rec
        self.handles: list = []
        self.calls = 0
        self.pending = None             # (row (1, V), m0, m2) of the last call, its token not yet known
        self.m0 = None
        self._zero = self._none = self._no_ids = None

    def attach(self, att: Attachments, model) -> None:
        self.handles = [att.hook(model.register_forward_pre_hook(self._pre, with_kwargs=True)),
                        att.hook(model.register_forward_hook(self._post, with_kwargs=True))]

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def _pre(self, module, args, kwargs):
        rec = self.rec
        if rec.bound or rec.auditing:
            return None
        m0 = rec.timer.mark()
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise GlanceError("hf_generate_hook: plain generate is logged from input_ids; this call passed "
                              "inputs_embeds only")
        if self.calls == 0:
            rec.prompt_len, rec._t0 = int(ids.shape[1]), m0
        elif self.pending is not None:
            self._emit(ids[0, -1:], m0)                          # its token is this call's input
        self.m0 = m0
        return None

    def _post(self, module, args, kwargs, output):
        rec = self.rec
        if rec.bound or rec.auditing:
            return None
        m2 = rec.timer.mark()
        logits = output.logits if hasattr(output, "logits") else output[0]
        row = logits[0, -1:].clone()                             # (a compiled forward reuses its output buffer)
        if self.calls == 0:                                      # the prefill: no round
            rec._prefill = (self.m0, m2)
            rec._pred = row[0]
            dev = row.device
            self._zero = torch.zeros(1, dtype=torch.long, device=dev)
            self._none = torch.zeros(0, 1, device=dev)
            self._no_ids = torch.zeros(0, 1, dtype=torch.long, device=dev)
        else:
            self.pending = (row, self.m0, m2)
        self.calls += 1
        return None

    def _emit(self, token, m3) -> None:
        rec = self.rec
        row, m0, m2 = self.pending
        self.pending = None
        r = len(rec._rounds)
        ev = RoundEvent(round=r, position=r, root=-1, accepted=0, committed=token, horizon=0, budget=0, tree=None,
                        logq=self._none, ids=self._no_ids, draft_passes=0, point_mass=False, verify_logits=row,
                        path_rows=self._zero, row_tokens=token, full_logp=None, marks=(m0, m0, m2, m3),
                        drafter=rec.drafter or "ar", root_logits=rec._pred)
        rec._pred = row[0]
        rec._rounds.append(ev)
        rec.logger.on_round(ev)

    def close(self, gen: list, t1) -> None:
        """The last call's round, from the output (none past the output's end)."""
        self.detach()
        if self.pending is None:
            return
        nxt = len(self.rec._rounds) + 1                          # the output token it chose
        if nxt < len(gen):
            self._emit(torch.tensor([gen[nxt]], device=self.pending[0].device), t1)
        self.pending = None


@contextlib.contextmanager
def hf_generate_hook(model, logger, prompt_id: str, *, drafter: str | None = None, branch_k: int = 8,
                     reference=None, audit=False):
    """Log the rounds of one ``model.generate(...)`` call (batch size 1): with
    ``assistant_model=``, ``prompt_lookup_num_tokens=``, ``assistant_early_exit=``,
    ``use_mtp=True``, ``speculation_type="dflash"``, a Gemma 4 assistant, or an assistant with
    its own tokenizer; or plain ``generate`` without any of them, logged as the autoregressive
    arm ``ar`` (every generated token after the first a round of horizon 0). Usage::

        with hf_generate_hook(model, logger, "p0", audit=True) as rec:
            out = model.generate(ids, assistant_model=draft, max_new_tokens=64)
            rec.finish(out)

    ``logger``: a :class:`glance_log.record.RoundLogger`; the target's ``vocab_size`` goes into its
    run metadata. ``drafter``: the label to log (default: the generator's, :data:`GENERATORS`, or
    ``ar``). ``audit``: True compares the output with plain greedy decoding of the same model
    (``generate(do_sample=False)`` without an assistant, run at ``finish``) and fills the prompt
    row's ``greedy_match``, ``first_divergence``, ``divergence_margin``; a reference's tokens (or
    ``(tokens, margins)``) compare with those instead. Nothing stays attached to ``model`` after
    the block, whatever raised inside it; the prompt is written only by ``rec.finish(output)``."""
    if getattr(model, "_glance_hooked", False):
        raise GlanceError("hf_generate_hook: this model is already hooked")
    rec = HFRoundRecorder(model, logger, drafter, branch_k, audit)
    original = model._get_candidate_generator

    def patched(*args, **kwargs):
        rec._assisted()                 # refuses while the audit's reference decodes
        gen = original(*args, **kwargs)
        rec._bind(gen)
        return _CandidateProxy(gen, rec)

    att = Attachments()
    try:
        att.patch(model, "_glance_hooked", True)
        att.patch(model, "_get_candidate_generator", patched)
        rec.steps.attach(att, model)
        record_vocab_size(logger, model)
        logger.begin_prompt(prompt_id, reference)
        yield rec
    finally:
        att.remove()
