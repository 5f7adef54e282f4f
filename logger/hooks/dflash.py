"""The ``dflash`` package's ``dflash_generate`` (z-lab/dflash): rounds from a forward hook on
the target and the draft's per-offset proposals (see docs/hooks.md).

Greedy decoding only (``temperature=0``). Tested with dflash 0.1.0 from PyPI; the hook also
follows the loop of z-lab/dflash main at 44947fb (April 2026), whose draft has no
``compute_logits`` and whose ``dflash_generate`` requires ``temperature``.
"""
from __future__ import annotations

import torch

from glance_law.errors import GlanceError
from glance_law.replay.tree import chain_tree

from ..decode import PromptEvent, RoundEvent, Timer
from ..drafters import topk_rows
from ..models import eos_token_ids
from .common import Attachments, record_vocab_size, stop_reason

__all__ = ["dflash_hook"]


class dflash_hook:
    """Log ``dflash.model.dflash_generate(draft, target, input_ids, ...)`` (greedy).

    A forward hook on ``target`` sees every call: the first is the prefill, every later one a
    verify block ``[root, d_1..d_L]`` with its position ids and logits. The draft's proposal for
    the block comes from, by what the draft model offers:

    * ``propose`` (a DFlash 2 draft, ``DFlash2DraftModel``): its candidate selector re-ranks the
      top candidates of the logits with a pairwise term it does not return, so the proposal is
      logged as a point mass (``topk_logq`` = 0 at k = 1, as for prompt lookup);
    * ``compute_logits`` (a DFlash draft in dflash 0.1.0): the block's logits as the draft
      computes them (output multiplier and soft-capping included);
    * neither (z-lab/dflash main, which calls ``target.lm_head`` on the draft's hidden states):
      a forward hook on the target's output head, outside the target's own forward.

    Usage::

        with dflash_hook(target, draft, logger, "p0") as h:
            out = dflash_generate(draft, target, ids, max_new_tokens=256, stop_token_ids=[eos],
                                  temperature=0.0)
        h.finish(out, num_input_tokens=ids.shape[1], stop_token_ids=[eos])

    Whatever raises - attaching, the decoding, the hook's own callbacks - nothing stays attached
    to ``target`` or ``draft_model`` once the ``with`` block is left (or ``__enter__`` failed).
    """

    def __init__(self, target, draft_model, logger, prompt_id: str, *, branch_k: int = 8, reference=None):
        self.target, self.draft, self.logger = target, draft_model, logger
        self.k = int(branch_k)
        self.prompt_id, self.reference = prompt_id, reference
        self.timer = Timer(next(target.parameters()).device)
        self.mode = None                        # "propose" | "compute_logits" | "lm_head"
        self._att = Attachments()
        self._in_target = False
        self._draft_out = None
        self._rounds: list = []
        self._t0 = None
        self._prefill_row = None                # (V,) the prefill's last row: it chose round 0's root
        self.logged = self.skipped = 0          # rounds written / blocks verified after the output was complete

    def __enter__(self):
        if getattr(self.target, "_glance_hooked", False):
            raise GlanceError("dflash_hook: this target is already hooked")
        att = self._att
        try:
            att.patch(self.target, "_glance_hooked", True)
            att.hook(self.target.register_forward_pre_hook(lambda *a: self._enter_target()))
            att.hook(self.target.register_forward_hook(lambda *a: self._on_target(*a), with_kwargs=True))
            if callable(getattr(self.draft, "propose", None)):
                self.mode = "propose"
                att.patch(self.draft, "propose", self._wrap(self.draft.propose, "tokens"))
            elif callable(getattr(self.draft, "compute_logits", None)):
                self.mode = "compute_logits"
                att.patch(self.draft, "compute_logits", self._wrap(self.draft.compute_logits, "logits"))
            else:
                head = getattr(self.target, "lm_head", None)
                head = head if isinstance(head, torch.nn.Module) else self.target.get_output_embeddings()
                if not isinstance(head, torch.nn.Module):
                    raise GlanceError("dflash_hook: the draft model has neither propose() nor compute_logits() and "
                                      "the target has no output head (lm_head); pass the DFlash draft model and "
                                      "its target")
                self.mode = "lm_head"
                att.hook(head.register_forward_hook(lambda *a: self._on_head(*a)))
            record_vocab_size(self.logger, self.target)
            self.logger.begin_prompt(self.prompt_id, self.reference)
        except BaseException:
            att.remove()
            raise
        return self

    def __exit__(self, *exc):
        self._att.remove()
        return False

    def _wrap(self, fn, kind):
        def wrapped(*a, **kw):
            out = fn(*a, **kw)
            self._draft_out = (kind, out[0] if kind == "tokens" else out)
            return out
        return wrapped

    def _enter_target(self):
        self._in_target = True

    def _on_head(self, module, args, output):
        if not self._in_target:                              # the draft's block through the target's head
            self._draft_out = ("logits", output)

    def _on_target(self, module, args, kwargs, output):
        self._in_target = False
        ids = kwargs.get("input_ids", args[0] if args else None)
        if self._t0 is None:                                 # the prefill call
            self._t0 = self.timer.mark()
            self._prompt_len = int(ids.shape[1])
            self._prefill_row = output.logits[0, -1].clone()
            return
        m = self.timer.mark()
        logits = output.logits[0]                            # (bs, V): row 0 = root
        block = ids[0]
        L = int(block.shape[0]) - 1
        pos = kwargs.get("position_ids")
        dl, self._draft_out = self._draft_out, None
        self._rounds.append((block, logits, None if pos is None else pos[0, 0], dl if L else None, L, m))


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
        stop = (eos_token_ids(self.target, getattr(self.logger, "tokenizer", None)) if stop_token_ids is None
                else stop_token_ids)
        reason = stop_reason(gen, stop)
        t1 = self.timer.mark()
        self.timer.resolve()
        events, prev, nxt, pred = [], self._t0, 0, self._prefill_row
        for r, (block, logits, pos, dl, L, m) in enumerate(self._rounds):
            position = int(pos) - num_input_tokens if pos is not None else nxt     # the root's output index
            post = torch.argmax(logits, dim=-1)
            draft = block[1:]
            run = int((draft == post[:-1]).long().cumprod(0).sum()) if L else 0   # dflash's acceptance
            nxt = position + run + 1
            root_row, pred = pred, logits[run]               # the row that chose the next block's root
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
            if dl is not None and dl[0] == "logits":         # (1, L, V): offsets 1..L
                logp, val, idx = topk_rows(dl[1][0][:H], self.k)
            else:                                            # the proposal as a point mass
                logp, val, idx = None, torch.zeros(H, 1, device=logits.device), draft[:H].view(H, 1)
            events.append(RoundEvent(round=len(events), position=position, root=int(block[0]), accepted=a,
                                     committed=committed, horizon=H, budget=L,
                                     tree=chain_tree(L) if L else None, logq=val, ids=idx,
                                     draft_passes=1 if L else 0, point_mass=logp is None and L > 0,
                                     verify_logits=logits, path_rows=torch.arange(a + 1, device=logits.device),
                                     row_tokens=post.clone(), full_logp=logp, marks=(prev, None, None, m),
                                     drafter="block", root_logits=root_row))
            prev = m
        for ev in events:
            self.logger.on_round(ev)
        self.logged, self.skipped = len(events), len(self._rounds) - len(events)
        self.logger.on_prompt_end(PromptEvent(prompt_tokens=num_input_tokens, tokens=gen, resolve_stream=gen,
                                              rounds=len(events), stop_reason=reason,
                                              prefill_marks=(None, None), decode_marks=(self._t0, t1),
                                              timer=self.timer))
        self._rounds = []
