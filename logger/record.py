"""The round logger: a decoder callback that writes the round-log contract.

Per round (:meth:`RoundLogger.on_round`) it computes ON THE DEVICE, from the raw
fp32 logits of the verify pass: the root entropy (nats), the top-2 logit margin
and the largest probability at the root, and the smallest top-2 margin over the rows
that produced the committed tokens (root and accepted nodes, less the last accepted
node in a round that ends the output: it commits no bonus token); when the drafter
exposes its full log-probability rows it also ranks the target's token at offsets
``1..a+1`` against the whole vocabulary. These tensors stay on the device; the per-round
path performs no host-device synchronisation (no ``.item()``, ``.tolist()``,
``.cpu()``, ``synchronize``). At prompt end (:meth:`RoundLogger.on_prompt_end`)
everything is copied once, the per-offset ``match`` / ``target_rank`` /
``target_logq`` vectors are resolved against the final committed stream, timing
marks are resolved, ``copy_len`` is measured against the prompt's reference, and
rows go to :class:`glance_law.io.LogWriter` (a ``rounds`` and a ``prompts`` writer).

Resolution of the per-offset vectors (offsets ``j = 1..horizon``; the target's
token at offset ``j`` is ``stream[position + j]``):

* past the end of the committed stream: ``match = -1``, ``target_rank = -1``,
  ``target_logq = NaN`` (unknown);
* ``j <= a + 1`` with full drafter rows: the exact rank among all tokens (the
  position in the logged top-k when the token is there) and its log-probability;
* otherwise only the logged top-k can be consulted: a token inside it gets its
  position and logq; a token outside gets rank ``k`` and logq NaN;
* model-free drafters (``pld``) are point masses: a token other than the proposal
  has rank ``k`` (= 1) and logq ``-inf`` (probability zero, known exactly).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from glance_law import schema as S
from glance_law.io import LogWriter

__all__ = ["RoundLogger", "resolve_offsets", "copy_len", "device_root_stats", "softmax_entropy", "top2", "audit_fields",
           "encode_reference"]


def softmax_entropy(rows: torch.Tensor, rowmax: torch.Tensor | None = None):
    """(entropy in nats, largest probability) of the softmax of each row of ``rows`` (n, V), fp32,
    on the device, without synchronising; ``rowmax``: each row's largest logit when the caller
    has it (a top-k), else computed.

    With ``y = x - max`` and ``e = exp(y)``: ``z = sum(e)``, ``H = log z - sum(e * y) / z`` and the
    largest probability ``1 / z``; one exponential per token and no logarithm (the
    ``p * log p`` form takes a second transcendental pass), two (n, V) temporaries, no
    log-probability row and no float64. Tokens a model masks with ``-inf`` count as probability
    zero (``y`` is clamped to -1e30, so ``e * y`` is 0, not NaN). The normaliser is a cascade-summed
    ``sum``: fp32 ``softmax`` over 262,144 rows sums to 1 + 3e-5, which moved the entropy by as
    much (tests/test_logger.py)."""
    rows = rows.float()
    m = rows.amax(dim=-1, keepdim=True) if rowmax is None else rowmax.float().reshape(-1, 1)
    y = (rows - m).clamp_min_(-1e30)
    e = torch.exp(y)
    z = e.sum(dim=-1)
    ent = torch.log(z) - torch.linalg.vecdot(e, y) / z
    return ent.clamp_min(0.0), 1.0 / z


#: Bytes of buffered logit rows that start a batch of statistics, by device: on a GPU one batch of
#: many rounds saves kernel launches; on the CPU batches of tens of MB leave the caches (32 rows of
#: Gemma's 1 MB rows cost about 5.2 ms CPU a round against 3.4-4.1 ms at 2-16 rows in a quick timing).
REDUCE_BYTES = {"cpu": 16 << 20, "other": 64 << 20}


def top2(rows: torch.Tensor) -> torch.Tensor:
    """(S, 2) fp32: each row's two largest values, the largest twice where it is tied; the values of
    ``torch.topk(rows, 2).values``. On the CPU, numpy's argmax and then the max on either side of it:
    over a 262,144-token row on one thread that is about 0.08 ms against torch.topk's 0.55-0.75 ms
    (``python benchmarks/bench_logger.py --top2``), most of the logger's per-round cost on the real model. On other
    devices torch.topk (no synchronisation)."""
    rows = rows.float()
    if rows.device.type != "cpu" or rows.requires_grad or rows.shape[-1] < 2:
        return torch.topk(rows, 2, dim=-1).values
    a = rows.numpy()
    idx = a.argmax(axis=1)
    out = np.empty((a.shape[0], 2), np.float32)
    for k, i in enumerate(idx.tolist()):
        row = a[k]
        out[k, 0] = row[i]
        out[k, 1] = max(row[:i].max(initial=-np.inf), row[i + 1:].max(initial=-np.inf))
    return torch.from_numpy(out)


def device_root_stats(rows: torch.Tensor, starts: torch.Tensor, seg: torch.Tensor,
                      roots: torch.Tensor | None = None) -> torch.Tensor:
    """(n, 4) fp32 on the device, one row per round: root entropy (nats), root top-2 margin,
    root max probability, min top-2 margin over the round's rows.

    ``rows`` (S, V): the raw logits of n rounds' root + accepted rows stacked; ``starts``
    (n,): each round's root row; ``seg`` (S,): each row's round; ``roots``: ``rows[starts]``
    when the caller has them without a copy (every row a root: ``rows`` itself). Tokens a
    model masks with ``-inf`` count as probability zero (no NaN). One top-2 over the rows,
    then over the roots :func:`softmax_entropy` (their maxima from the top-2)."""
    rows = rows.float()
    top = top2(rows)
    gap = top[:, 0] - top[:, 1]
    roots = rows.index_select(0, starts) if roots is None else roots.float()
    ent, pmax = softmax_entropy(roots, top.index_select(0, starts)[:, 0])
    n = starts.shape[0]
    minm = torch.full((n,), float("inf"), device=rows.device).scatter_reduce(0, seg, gap, "amin")
    return torch.stack([ent, gap.index_select(0, starts), pmax, minm], dim=1)


def resolve_offsets(ids: np.ndarray, logq: np.ndarray, tokens: Sequence[int | None], *,
                    full_rank: np.ndarray | None = None, full_logq: np.ndarray | None = None,
                    point_mass: bool = False):
    """Per-offset ``match`` (int8), ``target_rank`` (int32: a rank
    reaches the vocabulary size), ``target_logq`` (float32).

    ``ids``/``logq`` (L, k): the drafter's logged top-k; ``tokens[j-1]``: the target's token
    at offset j or None when unknown; ``full_rank``/``full_logq`` (m,): exact values for the
    first m offsets (from the full drafter rows), or None.
    """
    L = ids.shape[0]
    k = ids.shape[1] if ids.ndim == 2 else 1
    match = np.full(L, -1, np.int8)
    rank = np.full(L, -1, np.int32)
    tlq = np.full(L, np.nan, np.float32)
    m = 0 if full_rank is None else len(full_rank)
    for j in range(L):
        tok = tokens[j] if j < len(tokens) else None
        if tok is None:
            continue
        row = ids[j]
        match[j] = 1 if int(row[0]) == tok else 0
        hit = np.flatnonzero(row == tok)
        if hit.size and logq[j, hit[0]] != -np.inf:      # in the logged top-k (its logq NaN when unknown)
            rank[j] = int(hit[0])
            tlq[j] = logq[j, hit[0]]
        elif j < m:
            rank[j] = max(int(full_rank[j]), k)
            tlq[j] = full_logq[j]
        elif point_mass:
            rank[j] = k
            tlq[j] = -np.inf
        else:
            rank[j] = k
    return match, rank, tlq


def _code(t: int) -> str:
    # one code point per token id (skipping the surrogate range)
    t = int(t) + 0x100
    if t >= 0xD800:
        t += 0x800
    return chr(t)


def copy_len(tokens: Sequence[int], reference: str) -> int:
    """Longest run of consecutive ``tokens`` that occurs verbatim (as token ids) in ``reference``,
    a string made by :func:`encode_reference`."""
    if not tokens or not reference:
        return 0
    s = "".join(_code(t) for t in tokens)
    best = 0
    n = len(s)
    for i in range(n):
        if n - i <= best:
            break
        lo, hi = best, n - i          # invariant: a run of length lo from i is known (or lo == best)
        if s[i:i + best + 1] not in reference:
            continue
        lo = best + 1
        while lo < hi:                # largest length from i that occurs
            mid = (lo + hi + 1) // 2
            if s[i:i + mid] in reference:
                lo = mid
            else:
                hi = mid - 1
        best = max(best, lo)
    return best


def copy_runs(tokens: Sequence[int], reference: str) -> np.ndarray:
    """For every index ``i``: the longest run ``tokens[i:i + n]`` that occurs verbatim in
    ``reference`` (a string made by :func:`encode_reference`). Every part of a run that occurs
    occurs too, so the :func:`copy_len` of ``tokens[s:e]`` is ``max(min(runs[i], e - i))`` over
    ``s <= i < e`` (:mod:`glance_log.dense` stores the runs so rounds of any shape get their
    ``copy_len`` without the reference)."""
    s = "".join(_code(t) for t in tokens)
    runs = np.zeros(len(s), np.int64)
    if not reference:
        return runs
    lo = 0
    for i in range(len(s)):         # runs[i + 1] >= runs[i] - 1: start the search there
        lo = max(lo - 1, 0)
        while i + lo < len(s) and s[i:i + lo + 1] in reference:
            lo += 1
        runs[i] = lo
    return runs


def encode_reference(tokenizer, texts) -> str:
    """Reference text(s) as one token-id string for :func:`copy_len` (empty when none);
    several texts are joined by a separator no run can cross."""
    if isinstance(texts, str):
        texts = [texts]
    if not texts or tokenizer is None:
        return ""
    parts = []
    for text in texts:
        if text:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            parts.append("".join(_code(t) for t in ids))
    return "\x00".join(parts)


def audit_fields(tokens: Sequence[int], reference: Sequence[int], margins: Sequence[float]) -> dict:
    """The prompt row's audit columns: does ``tokens`` equal the greedy ``reference``; if not,
    the first differing index and the reference's top-2 logit margin there."""
    tokens, reference = list(tokens), list(reference)
    first = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), None)
    if first is None and len(tokens) != len(reference):
        first = min(len(tokens), len(reference))
    if first is None:
        return {"greedy_match": True, "first_divergence": -1, "divergence_margin": None}
    return {"greedy_match": False, "first_divergence": int(first),
            "divergence_margin": float(margins[first]) if first < len(margins) else None}


def _host(x, dtype) -> np.ndarray:
    """Host copy of a device tensor (hooks hand device values; glance-log's decoder hands numpy)."""
    if torch.is_tensor(x):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


class _Round(NamedTuple):
    """What the logger keeps of a round until prompt end (host values, small tensors)."""

    round: int
    position: int
    position_offset: int
    accepted: int
    horizon: int
    budget: int
    depth: int
    logq: object
    ids: object
    committed: object
    draft_passes: int
    point_mass: bool
    marks: tuple
    drafter: str
    own_tokens: list | None
    full: bool


def _is_row0(row, logits) -> bool:
    """Is ``row`` (a view) row 0 of ``logits`` (the same storage and offset)? Host metadata only."""
    return (torch.is_tensor(row) and torch.is_tensor(logits) and row.dim() == 1 and logits.dim() == 2
            and row.shape[0] == logits.shape[1] and row.dtype == logits.dtype and row.device == logits.device
            and row.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()
            and row.storage_offset() == logits.storage_offset() and row.stride(0) == logits.stride(1))


#: a round whose predicting row is the previous round's root row (its ``pred_entropy`` is that
#: round's ``root_entropy``, not computed twice)
_PREV_ROOT = "prev-root"


def _device_index(values, device) -> torch.Tensor:
    """A long index tensor on ``device`` without a synchronising copy (pinned, non-blocking)."""
    t = torch.as_tensor(np.asarray(values, dtype=np.int64))
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t


class RoundLogger:
    """Decoder callback writing ``rounds`` and ``prompts`` part files into ``out_dir``.

    Call :meth:`begin_prompt` before decoding each prompt (its id, the reference text,
    and any prompt-level fields such as the audit's), then pass the logger in the
    decoder's ``callbacks``.
    """

    def __init__(self, out_dir, *, run_id: str, task: str, run: dict | None = None, tokenizer=None,
                 condition: str = S.CONDITIONS_DEFAULT, drafter: str | None = None, stem: str | None = None,
                 flush_rows: int = 4096, flush_seconds: float = 10.0, reduce_rounds: int = 32,
                 reduce_bytes: int | None = None):
        self.run_id = run_id
        self.task = task
        self.condition = condition
        self.drafter = drafter
        self.tokenizer = tokenizer
        stem = stem or f"{run_id}-{condition}"
        self.rounds = LogWriter(out_dir, S.KIND_ROUNDS, run=run, stem=stem, flush_rows=10**9,
                                flush_seconds=float("inf"))
        self.prompts = LogWriter(out_dir, S.KIND_PROMPTS, run=run, stem=stem, flush_rows=10**9,
                                 flush_seconds=float("inf"))
        self.flush_rows = int(flush_rows)
        self.flush_seconds = float(flush_seconds)
        self._last_flush = time.monotonic()
        self._pending: list = []
        self._rows: list = []
        self._lp: list = []
        self._toks: list = []
        self._stats: list = []
        self._pred: list = []           # per buffered round: a copy of the row that predicted its root, _PREV_ROOT or None
        self._pred_h: list = []
        self._pred_prev: list = []      # per round of the prompt: its predicting row is the previous root row
        self._prev_logits = None        # the previous round's verify logits (held until the next round)
        self._tl: list = []
        self._rk: list = []
        self._rows_bytes = 0
        self.reduce_rounds = int(reduce_rounds)
        #: rows buffered before a batch of statistics: None is :data:`REDUCE_BYTES` by the logits' device
        self.reduce_bytes = None if reduce_bytes is None else int(reduce_bytes)
        self._prompt_id: str | None = None
        self._task = task
        self._reference = ""
        self._audit = None
        self._extra: dict = {}
        self.n_prompts = 0
        self.n_rounds = 0
        self.last_rows: list = []
        self.last_prompt: dict = {}

    def run_defaults(self, **fields) -> None:
        """Run-metadata fields for the files not written yet, where the run metadata does not set
        them already (a hook adds the target's ``vocab_size``)."""
        for w in (self.rounds, self.prompts):
            for k, v in fields.items():
                w.run.setdefault(k, v)

    # -- per prompt -----------------------------------------------------------
    def begin_prompt(self, prompt_id: str, reference=None, audit=None, task: str | None = None) -> None:
        """Start a prompt. ``reference``: text (or texts) for ``copy_len``; ``audit``: the fp32
        greedy reference ``(tokens, margins)`` to compare the output with, or None; ``task``: this
        prompt's task when it is not the logger's (a question file's category)."""
        self._prompt_id = str(prompt_id)
        self._task = self.task if task is None else str(task)
        self._reference = encode_reference(self.tokenizer, reference)
        self._audit = audit
        self._extra = {}
        # what a prompt that never ended (its decoder raised) left behind is not this prompt's
        self._pending, self._rows, self._pred, self._lp, self._toks = [], [], [], [], []
        self._stats, self._pred_h, self._tl, self._rk = [], [], [], []
        self._rows_bytes = 0
        self._prev_logits = None

    def audit_against(self, tokens, margins=()) -> None:
        """The greedy reference the current prompt's output is compared with (the prompt row's
        ``greedy_match``, ``first_divergence``, ``divergence_margin``): its tokens and, where known,
        its top-1 minus top-2 logit margin at every step. Call between :meth:`begin_prompt` and
        :meth:`on_prompt_end` (a hook that runs the reference after decoding)."""
        self._audit = (list(tokens), list(margins))

    def prompt_fields(self, **fields) -> None:
        """Columns outside the contract for the current prompt's row (e.g. the llama.cpp hook's
        ``divergence_token`` / ``greedy_token``); call between :meth:`begin_prompt` and
        :meth:`on_prompt_end`."""
        self._extra.update(fields)

    # -- the per-round hook: device work only -------------------------------------
    def on_round(self, ev) -> None:
        """Device work only: copy the rows the statistics need; the statistics themselves are
        computed in batches of rounds (:meth:`_reduce`), still on the device."""
        # the rows that produced the committed tokens: root + accepted nodes, less the last
        # accepted node when the round ends the output (no bonus); the root row always (entropy)
        n_commit = len(ev.committed)
        host = getattr(ev, "root_stats", None)
        if host is not None:            # a hook computed the statistics on the host: no rows to keep
            self._reduce()              # the rounds buffered before keep their order
            self._stats.append(torch.tensor([host[:4]], dtype=torch.float32))
            self._pred_h.append(torch.tensor([host[4]], dtype=torch.float32))
            self._pending.append(_Round(ev.round, ev.position, ev.position_offset, ev.accepted, ev.horizon,
                                        ev.budget, 0 if ev.tree is None else min(int(ev.tree.max_depth), ev.horizon),
                                        ev.logq, ev.ids, ev.committed, ev.draft_passes, ev.point_mass, ev.marks,
                                        ev.drafter, ev.own_tokens, False))
            return
        n_rows = max(min(n_commit, ev.accepted + 1), 1)
        self._rows.append(ev.verify_logits.index_select(0, ev.path_rows[:n_rows]))
        # the row that predicted the root: in live decoding the previous round's last path row; when
        # that is its root row (it accepted nothing: every ar round), the entropy is already that
        # round's root entropy. Any other row is copied (a view would keep the whole verify pass)
        pred = getattr(ev, "root_logits", None)
        prev, self._prev_logits = self._prev_logits, ev.verify_logits
        if pred is not None and _is_row0(pred, prev):
            pred = _PREV_ROOT
        elif pred is not None:
            pred = pred.detach().clone()
            self._rows_bytes += pred.shape[-1] * 4
        self._pred.append(pred)
        self._rows_bytes += n_rows * ev.verify_logits.shape[-1] * 4
        full = False
        if ev.full_logp is not None and ev.horizon > 0:
            m = min(ev.accepted + 1, ev.horizon)
            self._lp.append(ev.full_logp[:m].clone())                            # drafter rows, offsets 1..m
            self._toks.append(ev.row_tokens.index_select(0, ev.path_rows[:m]))  # the target's tokens there
            self._rows_bytes += m * ev.full_logp.shape[-1] * 4
            full = True
        # keep only host values and small tensors: never the round's logits
        self._pending.append(_Round(ev.round, ev.position, ev.position_offset, ev.accepted, ev.horizon,
                                    ev.budget, 0 if ev.tree is None else min(int(ev.tree.max_depth), ev.horizon), ev.logq, ev.ids, ev.committed, ev.draft_passes, ev.point_mass,
                                    ev.marks, ev.drafter, ev.own_tokens, full))
        cap = self.reduce_bytes
        if cap is None:
            cap = REDUCE_BYTES["cpu" if ev.verify_logits.device.type == "cpu" else "other"]
        if len(self._rows) >= self.reduce_rounds or self._rows_bytes >= cap:
            self._reduce()

    def _reduce(self) -> None:
        """Statistics of the buffered rounds in one batch of device ops (no synchronisation):
        root entropy, root top-2 margin, root max probability, min top-2 margin on the path;
        exact drafter ranks/log-probabilities of the target's tokens."""
        if self._rows:
            counts = [r.shape[0] for r in self._rows]
            rows = torch.cat(self._rows)                                        # (S, V)
            dev = rows.device
            starts = _device_index(np.cumsum([0] + counts[:-1]), dev)
            seg = _device_index(np.repeat(np.arange(len(counts)), counts), dev)
            every_row_a_root = len(counts) == rows.shape[0]
            self._stats.append(device_root_stats(rows, starts, seg, roots=rows if every_row_a_root else None))
            self._rows = []
            # the entropy of each round's predicting row (NaN where the decoder did not pass it; a
            # previous root row's is filled in at prompt end)
            have = [i for i, r in enumerate(self._pred) if torch.is_tensor(r)]
            ph = torch.full((len(self._pred),), float("nan"), device=dev)
            if have:
                ent, _ = softmax_entropy(torch.stack([self._pred[i] for i in have]))
                ph = ph.index_copy(0, _device_index(np.asarray(have), dev), ent)
            self._pred_h.append(ph)
            self._pred_prev.extend(r is _PREV_ROOT for r in self._pred)
            self._pred = []
        if self._lp:
            lp = torch.cat(self._lp).float()
            toks = torch.cat(self._toks)
            tl = lp.gather(1, toks[:, None])
            self._tl.append(tl[:, 0])
            self._rk.append((lp > tl).sum(dim=1))
            self._lp, self._toks = [], []
        self._rows_bytes = 0

    # -- prompt end: one copy, resolution, rows -----------------------------------
    def on_prompt_end(self, pev) -> None:
        if self._prompt_id is None:
            raise RuntimeError("RoundLogger: begin_prompt() was not called before decoding")
        self._reduce()
        pending, self._pending = self._pending, []
        if pending:
            stats = torch.cat([torch.cat(self._stats), torch.cat(self._pred_h)[:, None]], dim=1)
            stats = stats.cpu().numpy().astype(np.float64)                    # the one copy per prompt
            if self._tl:
                tl_all = torch.cat(self._tl).cpu().numpy()
                rk_all = torch.cat(self._rk).cpu().numpy()
            for i in np.flatnonzero(self._pred_prev):         # the previous round's root row
                stats[i, 4] = stats[i - 1, 0]
        self._stats, self._tl, self._rk, self._pred_h, self._pred_prev = [], [], [], [], []
        self._prev_logits = None
        timer = pev.timer
        stream = pev.resolve_stream
        rows = []
        off = 0
        for i, ev in enumerate(pending):
            full = ev.full
            L = ev.horizon
            ids, logq, committed = (_host(ev.ids, np.int64), _host(ev.logq, np.float32),
                                    [int(t) for t in _host(ev.committed, np.int64)])
            fr = fl = None
            if full:
                m = min(ev.accepted + 1, L)
                fl, fr = tl_all[off:off + m], rk_all[off:off + m]
                off += m
            if ev.own_tokens is not None:
                toks = [int(t) for t in ev.own_tokens[:L]] + [None] * max(0, L - len(ev.own_tokens))
            else:
                toks = [int(stream[ev.position + j]) if ev.position + j < len(stream) else None
                        for j in range(1, L + 1)]
            match, rank, tlq = resolve_offsets(ids, logq, toks, full_rank=fr, full_logq=fl,
                                               point_mass=ev.point_mass)
            h, margin, pmax, minm, pred_h = stats[i]
            minm = minm if committed else np.nan            # a round that committed nothing
            m0, m1, m2, m3 = ev.marks
            rows.append({
                "run_id": self.run_id, "task": self._task, "prompt_id": self._prompt_id, "round": ev.round,
                "root_entropy": h, "accepted": ev.accepted, "horizon": L, "condition": self.condition,
                "drafter": self.drafter or ev.drafter, "position": max(ev.position - ev.position_offset, 0), "root_margin": margin, "root_pmax": pmax,
                "min_path_margin": minm, "pred_entropy": None if np.isnan(pred_h) else pred_h, "budget": ev.budget, "depth": ev.depth, "draft_passes": ev.draft_passes,
                "committed": committed, "match": match, "target_logq": tlq, "target_rank": rank,
                "topk_logq": logq.reshape(-1),
                "copy_len": copy_len(committed, self._reference) if self._reference else None,
                "draft_ms": timer.ms(m0, m1), "verify_ms": timer.ms(m1, m2), "round_ms": timer.ms(m0, m3),
            })
        extra = audit_fields(pev.tokens, *self._audit) if self._audit is not None else {}
        prefill_ms = timer.ms(*pev.prefill_marks)
        decode_ms = timer.ms(*pev.decode_marks)
        prow = {
            "run_id": self.run_id, "prompt_id": self._prompt_id, "task": self._task, "condition": self.condition,
            "drafter": self.drafter or (pending[0].drafter if pending else "unknown"),
            "prompt_tokens": pev.prompt_tokens, "new_tokens": len(pev.tokens), "prefill_ms": prefill_ms,
            "decode_ms": decode_ms, "rounds": pev.rounds, "stop_reason": pev.stop_reason,
            "greedy_match": extra.get("greedy_match"),
            "first_divergence": extra.get("first_divergence"),
            "divergence_margin": extra.get("divergence_margin"),
            "tokens": list(pev.tokens),
            **self._extra,
        }
        self.rounds.extend(rows)
        self.prompts.append(prow)
        self.n_prompts += 1
        self.n_rounds += len(rows)
        self.last_rows, self.last_prompt = rows, prow
        self._prompt_id = None
        if len(self.rounds) >= self.flush_rows or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Write buffered rows: rounds first, then the prompt rows that mark them complete."""
        self.rounds.flush()
        self.prompts.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
