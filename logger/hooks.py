"""Round logging for decoders other than glance-log's own (see docs/hooks.md).

* :func:`hf_generate_hook` - Hugging Face ``generate`` with ``assistant_model=`` or
  ``prompt_lookup_num_tokens=``: wraps the candidate generator that
  ``_get_candidate_generator`` returns. ``get_candidates`` gives the draft chain (and the
  assistant's logits); ``update_candidate_strategy`` gives the verified scores (root
  entropy, margins) and the accepted count.
* :class:`GlanceOnRound` - GLANCE's ``generate(on_round=...)`` dictionaries (entropy,
  accepted length, tree size): records what they carry.
* :func:`dflash_hook` - the ``dflash`` package's ``dflash_generate``: a forward hook on the
  target (each verify block and its logits) plus a wrapper of the draft model's
  ``compute_logits`` (per-offset marginals). Greedy decoding only. The rounds commit exactly
  the returned output (token 0, the prefill's, in no round): the final block, which usually
  runs past ``max_new_tokens`` or a stop token, is logged as glance-log logs a round that
  ends the output (accepted run cut there, no bonus, horizon = accepted), and
  ``stop_reason`` is ``eos`` or ``max_new_tokens``.

All three feed the same :class:`glance_log.record.RoundLogger`, so the rows follow the
same contract and resolution rules as glance-log's own decoder.
"""
from __future__ import annotations

import contextlib

import torch

from glance_law import schema as S
from glance_law.errors import GlanceError
from glance_law.io import LogWriter, run_metadata
from glance_law.tree import chain_tree

from .decode import PromptEvent, RoundEvent, Timer
from .drafters import topk_rows
from .models import eos_token_ids

__all__ = ["hf_generate_hook", "GlanceOnRound", "dflash_hook", "HFRoundRecorder"]


class _CandidateProxy:
    """Delegates to the wrapped candidate generator and reports each round to the recorder."""

    def __init__(self, inner, recorder: HFRoundRecorder):
        self._inner = inner
        self._rec = recorder

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def get_candidates(self, input_ids, *args, **kwargs):
        self._rec._begin(input_ids)
        cand, logits = self._inner.get_candidates(input_ids, *args, **kwargs)
        self._rec._drafted(input_ids, cand, logits)
        return cand, logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        self._rec._verified(input_ids, scores, num_matches)
        return self._inner.update_candidate_strategy(input_ids, scores, num_matches)


class HFRoundRecorder:
    """Builds :class:`RoundEvent` objects from the assisted-generation loop of ``generate``."""

    def __init__(self, model, logger, drafter: str, branch_k: int = 8):
        self.model = model
        self.logger = logger
        self.drafter = drafter
        self.k = int(branch_k)
        self.timer = Timer(next(model.parameters()).device)
        self._rounds: list = []
        self._cur = None
        self.prompt_len = None

    def _begin(self, input_ids):
        if self.prompt_len is None:
            self.prompt_len = int(input_ids.shape[1])
            self._t0 = self.timer.mark()
        self._cur = {"m0": self.timer.mark(), "cur_len": int(input_ids.shape[1])}

    def _drafted(self, input_ids, cand, logits):
        c = self._cur
        c["m1"] = self.timer.mark()
        c["draft"] = cand[0, input_ids.shape[1]:]
        c["draft_logits"] = None if logits is None else logits[0]

    def _verified(self, input_ids, scores, num_matches):
        c = self._cur
        m2 = self.timer.mark()
        a = int(num_matches)
        L = int(c["draft"].shape[0])
        new = input_ids[0, c["cur_len"]:]                      # committed this round (device)
        sc = scores[0]                                          # (L+1, V) verified rows (float32)
        if L and c["draft_logits"] is not None:
            logp, val, idx = topk_rows(c["draft_logits"][:L], self.k)
            point = False
            full = logp
        elif L:
            val = torch.zeros(L, 1, device=sc.device)
            idx = c["draft"].view(L, 1)
            point, full = True, None
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
                        logq=val, ids=idx, draft_passes=0 if point or not L else L, point_mass=point,
                        verify_logits=sc, path_rows=path, row_tokens=row_tokens,
                        full_logp=full if L else None, marks=(c["m0"], c["m1"], m2, m2), drafter=self.drafter,
                        position_offset=1)
        self._rounds.append(ev)
        self.logger.on_round(ev)

    def finish(self, output_ids, stop_reason: str | None = None) -> None:
        t1 = self.timer.mark()
        seq = output_ids[0].tolist()
        gen = seq[self.prompt_len:]
        stream = [seq[self.prompt_len - 1]] + gen               # index 0: the first round's root
        if stop_reason is None:
            stop = eos_token_ids(self.model, getattr(self.logger, "tokenizer", None))
            stop_reason = "eos" if gen and gen[-1] in stop else "max_new_tokens"
        self.timer.resolve()
        self.logger.on_prompt_end(PromptEvent(prompt_tokens=self.prompt_len, tokens=gen, resolve_stream=stream,
                                              rounds=len(self._rounds), stop_reason=stop_reason,
                                              prefill_marks=(None, None), decode_marks=(self._t0, t1),
                                              timer=self.timer))


@contextlib.contextmanager
def hf_generate_hook(model, logger, prompt_id: str, *, drafter: str | None = None, branch_k: int = 8,
                     reference=None):
    """Log the rounds of one ``model.generate(..., assistant_model=... | prompt_lookup_num_tokens=...)``
    call (batch size 1). Usage::

        with hf_generate_hook(model, logger, "p0") as rec:
            out = model.generate(ids, assistant_model=draft, max_new_tokens=64)
            rec.finish(out)

    ``logger``: a :class:`glance_log.record.RoundLogger`. ``rec.finish(output_ids)`` writes the
    prompt (it is called on exit if you do not)."""
    if hasattr(model, "_glance_hooked"):
        raise GlanceError("hf_generate_hook: this model is already hooked")
    logger.begin_prompt(prompt_id, reference)
    rec = HFRoundRecorder(model, logger, drafter or "hf", branch_k)
    original = model._get_candidate_generator

    def patched(*args, **kwargs):
        gen = original(*args, **kwargs)
        if rec.drafter == "hf":
            rec.drafter = "pld" if type(gen).__name__.startswith("PromptLookup") else "two_model"
        return _CandidateProxy(gen, rec)

    model._get_candidate_generator = patched
    model._glance_hooked = True
    try:
        yield rec
    finally:
        del model._get_candidate_generator
        del model._glance_hooked


class GlanceOnRound:
    """A callable for GLANCE's ``generate(on_round=...)``: each dictionary becomes a round row.

    GLANCE reports the root entropy, the accepted length and the tree size; keys are read
    with common aliases (``entropy``/``root_entropy``/``H``; ``accepted``/``accept_len``/
    ``acceptance_length``, or ``tau`` = accepted + 1; ``tree_size``/``budget``/``num_nodes``;
    ``horizon``/``depth``/``block_size`` - a block size B gives horizon B - 1). Rows carry
    only what the dictionaries carry: no per-offset vectors, no margins unless present.
    Call :meth:`next_prompt` between prompts (or pass ``prompt_id`` in the dictionary)."""

    ALIASES = {
        "root_entropy": ("root_entropy", "entropy", "H", "ent"),
        "accepted": ("accepted", "accept_len", "acceptance_length", "accepted_len", "n_accepted"),
        "budget": ("budget", "tree_size", "num_nodes", "n_nodes"),
        "horizon": ("horizon", "depth", "max_depth"),
        "prompt_id": ("prompt_id", "sample_id", "id"),
        "round": ("round", "round_idx", "step"),
        "root_margin": ("root_margin", "margin"),
        "root_pmax": ("root_pmax", "pmax", "max_prob"),
        "round_ms": ("round_ms", "time_ms"),
    }

    def __init__(self, out_dir, *, task: str, run_id: str = "glance", horizon: int | None = None,
                 drafter: str = "block", run: dict | None = None, flush_rows: int = 4096):
        self.task, self.run_id, self.horizon, self.drafter = task, run_id, horizon, drafter
        self.writer = LogWriter(out_dir, S.KIND_ROUNDS, run=run or run_metadata(run_id=run_id, source="glance"),
                                stem=f"{run_id}-glance", flush_rows=flush_rows)
        self._prompt = 0
        self._round = 0
        self.skipped = 0

    def next_prompt(self, prompt_id=None) -> None:
        self._prompt = prompt_id if prompt_id is not None else (self._prompt + 1 if isinstance(self._prompt, int)
                                                                 else 0)
        self._round = 0

    def _get(self, d, name):
        for k in self.ALIASES[name]:
            if k in d and d[k] is not None:
                v = d[k]
                return v.item() if hasattr(v, "item") else v
        return None

    def __call__(self, d: dict) -> None:
        h = self._get(d, "root_entropy")
        a = self._get(d, "accepted")
        if a is None and d.get("tau") is not None:
            a = int(d["tau"]) - 1
        L = self._get(d, "horizon")
        if L is None and d.get("block_size") is not None:
            L = int(d["block_size"]) - 1
        L = L if L is not None else self.horizon
        if h is None or a is None or L is None:
            raise GlanceError("GLANCE on_round dictionary lacks entropy, accepted length or horizon "
                              f"(keys: {', '.join(sorted(d))}); pass horizon= to GlanceOnRound if the dict has none")
        pid = self._get(d, "prompt_id")
        rnd = self._get(d, "round")
        row = {"run_id": self.run_id, "task": self.task, "prompt_id": str(pid if pid is not None else self._prompt),
               "round": int(rnd if rnd is not None else self._round), "root_entropy": float(h),
               "accepted": int(a), "horizon": int(L), "drafter": self.drafter}
        for name in ("budget", "root_margin", "root_pmax", "round_ms"):
            v = self._get(d, name)
            if v is not None:
                row[name] = v
        if self.writer._buffer and set(self.writer._buffer[-1]) != set(row):
            self.writer.flush()        # one part file per column set: optional columns are never half-null
        self.writer.append(row)
        self._round += 1
        self.writer.maybe_flush()

    @classmethod
    def convert_jsonl(cls, paths, out_dir, **kw) -> int:
        """Convert GLANCE JSONL files of on_round dictionaries into a rounds log; returns rows."""
        import json

        rec = cls(out_dir, **kw)
        n = 0
        for p in ([paths] if isinstance(paths, (str, bytes)) or hasattr(paths, "open") else paths):
            with open(p, encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        d = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise GlanceError(f"{p}:{lineno}: malformed JSON ({exc.msg})") from None
                    rec(d)
                    n += 1
        rec.close()
        return n

    def close(self) -> None:
        self.writer.close()


class dflash_hook:
    """Log ``dflash.model.dflash_generate(model, target, input_ids, ...)`` (greedy).

    A forward hook on ``target`` sees every verify block (its input ids, positions and
    logits); a wrapper of ``model.compute_logits`` sees the block's per-offset draft logits.
    Usage::

        with dflash_hook(target, draft, logger, "p0") as h:
            out = dflash_generate(draft, target, ids, max_new_tokens=256, stop_token_ids=[eos])
            h.finish(out, num_input_tokens=ids.shape[1], stop_token_ids=[eos])
    """

    def __init__(self, target, draft_model, logger, prompt_id: str, *, branch_k: int = 8, reference=None):
        self.target, self.draft, self.logger = target, draft_model, logger
        self.k = int(branch_k)
        self.prompt_id, self.reference = prompt_id, reference
        self.timer = Timer(next(target.parameters()).device)
        self._draft_logits = None
        self._rounds: list = []
        self._t0 = None
        self.logged = self.skipped = 0          # rounds written / blocks verified after the output was complete

    def __enter__(self):
        self.logger.begin_prompt(self.prompt_id, self.reference)
        self._handle = self.target.register_forward_hook(self._on_target, with_kwargs=True)
        self._orig = self.draft.compute_logits

        def wrapped(*a, **kw):
            out = self._orig(*a, **kw)
            self._draft_logits = out
            return out

        self.draft.compute_logits = wrapped
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        self.draft.compute_logits = self._orig
        return False

    def _on_target(self, module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self._t0 is None:                                 # the prefill call
            self._t0 = self.timer.mark()
            self._prompt_len = int(ids.shape[1])
            return
        m = self.timer.mark()
        logits = output.logits[0]                            # (bs, V): row 0 = root
        block = ids[0]
        L = int(block.shape[0]) - 1
        pos = kwargs.get("position_ids")
        dl = self._draft_logits
        self._draft_logits = None
        self._rounds.append((block, logits, None if pos is None else pos[0, 0], dl, L, m))

    def finish(self, output_ids, num_input_tokens: int, stop_token_ids=None) -> None:
        """Log the verified blocks as rounds of the returned output.

        ``output_ids``: what ``dflash_generate`` returned (the prompt and the output, or the
        namespace whose ``output_ids`` they are); ``stop_token_ids``: the ones passed to it
        (default: the target's stop tokens as glance-log reads them,
        :func:`glance_log.models.eos_token_ids`), which name the stop reason.
        A round commits exactly the tokens it added to the output, by glance-log's rule for the
        round that ends the output: its run stops at the output's end (a stop token, or
        ``max_new_tokens`` inside the block), it commits no bonus and its horizon is that run.
        A block verified after the output was complete (older dflash loops verify one whose
        root is the output's last token) added nothing and is not a round (``skipped``)."""
        output_ids = getattr(output_ids, "output_ids", output_ids)
        gen = output_ids[0].tolist()[num_input_tokens:]
        n = len(gen)
        stop = (set(eos_token_ids(self.target, getattr(self.logger, "tokenizer", None))) if stop_token_ids is None
                else {int(t) for t in stop_token_ids})
        stop_reason = "eos" if gen and gen[-1] in stop else "max_new_tokens"
        t1 = self.timer.mark()
        self.timer.resolve()
        events, prev, nxt = [], self._t0, 0
        for r, (block, logits, pos, dl, L, m) in enumerate(self._rounds):
            position = int(pos) - num_input_tokens if pos is not None else nxt     # the root's output index
            post = torch.argmax(logits, dim=-1)
            draft = block[1:]
            run = int((draft == post[:-1]).long().cumprod(0).sum()) if L else 0   # dflash's acceptance
            nxt = position + run + 1
            if position >= n - 1:
                continue                                     # the output was complete: adds nothing
            a = min(run, n - 1 - position)                   # the accepted run inside the output
            ended = run + 1 > n - 1 - position               # its bonus is not in the output
            committed = [int(t) for t in draft[:a].tolist()] + ([] if ended else [int(post[a])])
            if int(block[0]) != gen[position] or committed != gen[position + 1:position + 1 + len(committed)]:
                raise GlanceError(f"dflash_hook: verify block {r} (root at output token {position}) does not match "
                                  "the output; pass the output of this dflash_generate call, run greedily "
                                  "(temperature=0), and its prompt length")
            H = a if ended else L                            # no offset past the output's end
            if L and dl is not None:
                logp, val, idx = topk_rows(dl[0][:H], self.k)
            else:
                logp, val, idx = None, torch.zeros(H, 1), draft[:H].view(H, 1)
            events.append(RoundEvent(round=len(events), position=position, root=int(block[0]), accepted=a,
                                     committed=committed, horizon=H, budget=L,
                                     tree=chain_tree(L) if L else None, logq=val, ids=idx,
                                     draft_passes=1 if L else 0, point_mass=dl is None and L > 0,
                                     verify_logits=logits, path_rows=torch.arange(a + 1, device=logits.device),
                                     row_tokens=post.clone(), full_logp=logp, marks=(prev, None, None, m),
                                     drafter="block"))
            prev = m
        for ev in events:
            self.logger.on_round(ev)
        self.logged, self.skipped = len(events), len(self._rounds) - len(events)
        self.logger.on_prompt_end(PromptEvent(prompt_tokens=num_input_tokens, tokens=gen, resolve_stream=gen,
                                              rounds=len(events), stop_reason=stop_reason,
                                              prefill_marks=(None, None), decode_marks=(self._t0, t1),
                                              timer=self.timer))
        self._rounds = []
