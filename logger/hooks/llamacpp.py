"""llama.cpp through its Python binding (``llama-cpp-python``): the rounds of a user's own
``llama_cpp.Llama`` - plain, or with a ``draft_model`` (``LlamaPromptLookupDecoding`` or any
``LlamaDraftModel``) - while its own ``generate`` / ``create_completion`` runs unchanged
(see docs/hooks.md).

How (llama-cpp-python 0.3.36, ``llama_cpp/llama.py``, ``Llama.generate``): generate evaluates
the prompt (the prefill: no round), samples output token 0, asks the draft model for a chain,
then evaluates ``[root, d_1..d_L]`` in ONE ``Llama.eval`` call and samples row after row,
yielding each token, until a sampled token differs from the draft there (it cuts the cache and
starts the next round from that token) or the chain is used up (the last row's token is the
bonus). The hook patches three instance attributes for the duration of its ``with`` block:
``eval`` (the verify pass and its time), ``generate`` (which tokens were yielded: the round's
committed tokens) and ``draft_model`` (a proxy timing the drafter's call). The rows' logits are
read from the context (``llama_get_logits``; with a draft model llama-cpp-python asks for every
row, ``logits_all``) just before the next ``eval`` overwrites them, and reduced on the host to
the statistics the contract needs (root entropy, top-2 margin, p_max, the path's min margin,
the entropy of the row that chose the root), so no logits row is copied or kept.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
import time
from collections.abc import Iterable

import numpy as np
import torch

from glance_law.errors import GlanceError
from glance_law.replay.tree import chain_tree

from ..decode import PromptEvent, RoundEvent, Timer
from .common import Attachments

__all__ = ["llamacpp_hook", "LlamaCppRecorder", "RowStats", "logits_bytes", "memory_available",
           "check_llama", "engine_info", "drafter_of", "TESTED_VERSION"]

#: the llama-cpp-python release the hook is tested against (CI builds it from source)
TESTED_VERSION = "0.3.36"


class RowStats:
    """Exact statistics of one logits row on the host, in float32 with two reusable buffers:
    :meth:`full` gives (entropy in nats, top-1 minus top-2 margin, largest probability),
    :meth:`margin` the margin alone. The entropy is ``log s - (e . d) / s`` with ``d = x - max``,
    ``e = exp(d)``, ``s = sum(e)`` (the same quantity glance-log's logger computes as
    ``-sum p log p``); tokens at ``-inf`` count as probability zero."""

    def __init__(self, vocab: int):
        self.d = torch.empty(vocab, dtype=torch.float32)
        self.e = torch.empty(vocab, dtype=torch.float32)
        self._d, self._e = self.d.numpy(), self.e.numpy()       # the same buffers, as numpy arrays

    @staticmethod
    def _top2(x: np.ndarray) -> tuple[float, float]:
        # numpy's argmax/max: torch.argmax on one 262k-float row took 1.3 ms here, np.argmax 0.08 ms
        i = int(np.argmax(x))
        m = float(x[i])
        left = float(x[:i].max()) if i > 0 else -math.inf
        right = float(x[i + 1:].max()) if i + 1 < x.shape[0] else -math.inf
        return m, max(left, right)

    def margin(self, row: torch.Tensor) -> float:
        m, second = self._top2(row.numpy())
        return m - second

    def full(self, row: torch.Tensor) -> tuple[float, float, float]:
        x = row.numpy()
        m, second = self._top2(x)
        d, e = self._d, self._e
        np.subtract(x, np.float32(m), out=d)
        torch.exp(self.d, out=self.e)                # torch's exp: 0.7 ms against numpy's 1.0 on one row
        s = float(e.sum(dtype=np.float32))
        with np.errstate(invalid="ignore"):
            de = float(np.dot(e, d))
        if math.isnan(de):                       # -inf logits: e = 0 there, d = -inf; their term is 0
            np.nan_to_num(d, copy=False, neginf=0.0)
            de = float(np.dot(e, d))
        return max(math.log(s) - de / s, 0.0), m - second, 1.0 / s


def _llama_cpp():
    try:
        import llama_cpp
    except ImportError:
        raise GlanceError("the llama.cpp hook needs llama-cpp-python: pip install 'glance-law[llamacpp]' "
                          "(a source build, see docs/logger.md)") from None
    return llama_cpp


def logits_bytes(llm) -> int:
    """Bytes of ``Llama.scores`` when every row is kept (what ``draft_model`` forces):
    ``n_ctx x n_vocab x 4`` (float32)."""
    return int(llm.n_ctx()) * int(llm.n_vocab()) * 4


def memory_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_llama(llm) -> None:
    """Refuse, with one line, a Llama whose drafted decoding cannot run: a ``draft_model`` with
    ``Llama.scores`` shorter than ``n_ctx`` rows (llama-cpp-python 0.3.36 sizes ``scores`` by the
    ``logits_all`` argument, while ``draft_model`` makes ``eval`` write every row: past ``n_batch``
    positions ``eval`` fails), or every row's logits (``n_ctx x vocabulary x 4`` bytes) larger than
    the memory available."""
    if getattr(llm, "draft_model", None) is None:
        return
    rows, n_ctx, vocab = int(llm.scores.shape[0]), int(llm.n_ctx()), int(llm.n_vocab())
    need = logits_bytes(llm)
    if rows < n_ctx:
        raise GlanceError(f"this Llama has a draft_model but keeps logits for {rows} rows, not n_ctx = {n_ctx}: "
                          "llama-cpp-python fails once a prompt and its output pass that many tokens; create it "
                          f"with logits_all=True (every row: {n_ctx} x {vocab:,} x 4 bytes = {_gib(need)})")
    avail = memory_available()
    if avail is not None and need > avail:
        raise GlanceError(f"a draft_model makes llama.cpp keep every row's logits: n_ctx {n_ctx} x {vocab:,} x 4 "
                          f"bytes = {_gib(need)}, more than the {_gib(avail)} available; lower n_ctx")


def drafter_of(draft_model) -> tuple[str, dict, bool]:
    """(label, settings for the run metadata, model-free?) of a ``draft_model`` (None: ``ar``)."""
    if draft_model is None:
        return "ar", {"drafter": "ar"}, True
    name = type(draft_model).__name__
    settings = {"class": name}
    for attr in ("max_ngram_size", "num_pred_tokens"):
        v = getattr(draft_model, attr, None)
        if isinstance(v, int) and not isinstance(v, bool):
            settings[attr] = v
    try:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        pld = isinstance(draft_model, LlamaPromptLookupDecoding)
    except ImportError:
        pld = False
    label = "pld" if pld else name
    return label, {"drafter": label, **settings}, pld


def engine_info(llm) -> dict:
    """The run metadata's ``engine``: llama.cpp, the binding's version, the GGUF file and its
    SHA-256, the threads, the context and batch sizes and whether every row's logits are kept."""
    llama_cpp = _llama_cpp()
    from ..sources import file_sha256

    path = getattr(llm, "model_path", None)
    info = {"name": "llama.cpp", "binding": f"llama-cpp-python {getattr(llama_cpp, '__version__', 'unknown')}",
            "gguf": str(path) if path else None, "sha256": file_sha256(path) if path else None,
            "n_threads": getattr(llm, "n_threads", None), "n_threads_batch": getattr(llm, "n_threads_batch", None),
            "n_ctx": int(llm.n_ctx()), "n_batch": getattr(llm, "n_batch", None),
            "logits_rows": int(llm.scores.shape[0])}
    try:
        info["system_info"] = llama_cpp.llama_print_system_info().decode().strip()
    except (AttributeError, UnicodeDecodeError):
        pass
    return info


class _Round:
    """One verify pass: where it started, what it evaluated, its marks, the tokens yielded from it."""

    __slots__ = ("n_past", "tokens", "m0", "m1", "m2", "samples")

    def __init__(self, n_past, tokens, m0, m1, m2):
        self.n_past, self.tokens, self.m0, self.m1, self.m2 = n_past, tokens, m0, m1, m2
        self.samples: list[int] = []


class _Prompt:
    """One ``generate`` call: its prompt, the prefill, the rounds so far, the yielded tokens."""

    def __init__(self, prompt_id, tokens, args, kwargs):
        self.prompt_id = prompt_id
        self.tokens = tokens
        self.args = args
        self.kwargs = kwargs
        self.prefill = None             # (start, end) marks
        self.prompt_len = None
        self.outputs: list[int] = []
        self.cur: _Round | None = None
        self.rounds = 0
        self.next_m0 = None             # the next round's start: its draft call
        self.pred_row = -1              # output row of the last decode that chose the next root
        self.pred_h = float("nan")      # its entropy (known when it was a root row)
        self.pred_known = False
        self.done = False


class _DraftProxy:
    """The user's draft model, timed: each call marks the next round's start."""

    def __init__(self, inner, rec: LlamaCppRecorder):
        self._inner = inner
        self._rec = rec

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __call__(self, input_ids, /, **kwargs):
        p = self._rec.current
        t0 = time.perf_counter()
        out = self._inner(input_ids, **kwargs)
        if p is not None and not self._rec.auditing:
            p.next_m0 = t0
        return out


class LlamaCppRecorder:
    """Builds :class:`RoundEvent` objects from ``Llama.generate`` (see the module notes) and hands
    them, with host statistics (``root_stats``), to a :class:`glance_log.record.RoundLogger`.

    ``prompt_ids``: the id of each ``generate`` call in order (one id, or an iterable); ``task``:
    the prompts' task when it is not the logger's; ``reference``: text(s) for ``copy_len``;
    ``audit``: True compares each output with the engine's own plain greedy decode of the same
    prompt (the draft model set aside, the context reset) and fills the prompt row's
    ``greedy_match``, ``first_divergence``, ``divergence_margin`` and, outside the contract,
    ``divergence_token`` / ``greedy_token`` (the two tokens there; -1 when equal)."""

    def __init__(self, llm, logger, prompt_ids, *, task=None, reference=None, audit=False, drafter=None):
        self.llama_cpp = _llama_cpp()
        self.llm = llm
        self.logger = logger
        self.task = task
        self.reference = reference
        self.audit = bool(audit)
        self._ids = iter([prompt_ids] if isinstance(prompt_ids, str) else prompt_ids)
        self.single = isinstance(prompt_ids, str)
        self.vocab = int(llm.n_vocab())
        self.stats = RowStats(self.vocab)
        label, self.settings, self.model_free = drafter_of(getattr(llm, "draft_model", None))
        self.drafter = drafter or label
        self.settings["drafter"] = self.drafter
        self.current: _Prompt | None = None
        self.auditing = False
        self.error: BaseException | None = None
        self.outputs: list[list[int]] = []      # every finished prompt's output tokens, in order
        self.verdicts: list[dict] = []          # with audit: each prompt's audit fields
        self.timer = Timer(torch.device("cpu"))
        self._eog = set()
        self._orig_eval = llm.eval
        self._orig_generate = llm.generate

    # -- logits of the last decode ----------------------------------------------------------------
    def _row(self, i: int) -> torch.Tensor:
        """Row ``i`` of the last decode's outputs (``-1``: the last) as a float32 view."""
        ptr = self.llama_cpp.llama_get_logits_ith(self.llm.ctx, int(i))
        if not ptr:
            raise GlanceError(f"llama.cpp returned no logits for row {i} of the last decode; the hook needs every "
                              "verified row (a Llama with a draft_model keeps them: logits_all)")
        return torch.from_numpy(np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                                      shape=(self.vocab,)))

    def _is_eog(self, token: int) -> bool:
        llama_cpp = self.llama_cpp
        vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        return bool(llama_cpp.llama_vocab_is_eog(vocab, int(token)))

    # -- the patched methods ----------------------------------------------------------------------
    def eval(self, tokens):
        p = self.current
        if p is None or self.auditing or p.done:
            return self._orig_eval(tokens)
        t = time.perf_counter()
        if p.prompt_len is None:                          # the prefill: no round
            self._orig_eval(tokens)
            p.prefill = (t, time.perf_counter())
            p.prompt_len = int(self.llm.n_tokens)
            return None
        if p.cur is not None:
            self._finish_round(p, p.next_m0 if p.next_m0 is not None else t)
        if not p.pred_known:                              # the row that chose this round's root
            p.pred_h = self.stats.full(self._row(p.pred_row))[0]
            p.pred_known = True
        n_past = int(self.llm.n_tokens)
        toks = [int(x) for x in tokens]
        m1 = time.perf_counter()
        self._orig_eval(tokens)
        m2 = time.perf_counter()
        p.cur = _Round(n_past, toks, p.next_m0 if p.next_m0 is not None else m1, m1, m2)
        p.next_m0 = None
        return None

    def generate(self, tokens, *args, **kwargs):
        if self.auditing:
            yield from self._orig_generate(tokens, *args, **kwargs)
            return
        p = self._begin(tokens, args, kwargs)
        inner = self._orig_generate(tokens, *args, **kwargs)
        finished = False
        try:
            try:
                tok = next(inner)
                while True:
                    tok = int(tok)
                    p.outputs.append(tok)
                    if p.cur is not None:
                        p.cur.samples.append(tok)
                    sent = yield tok
                    tok = inner.send(sent)
            except StopIteration:
                finished = True
            except GeneratorExit:       # the caller stopped (create_completion: a stop token or max_tokens)
                finished = True
                raise
        finally:
            inner.close()
            if finished:
                self._end(p)
            else:
                self.current = None

    # -- rounds and prompts -------------------------------------------------------------------------
    def _begin(self, tokens, args, kwargs) -> _Prompt:
        if self.current is not None and not self.current.done:
            self._end(self.current)
        try:
            pid = next(self._ids)
        except StopIteration:
            raise GlanceError("llamacpp_hook: more generate calls than prompt ids; pass one prompt id per "
                              "generate/create_completion call (a list)" if self.single else
                              "llamacpp_hook: the prompt ids ran out; pass one per generate call") from None
        temp = kwargs.get("temp", args[3] if len(args) > 3 else 0.8)     # generate(tokens, top_k, top_p, min_p, typical_p, temp)
        if self.audit and float(temp) != 0.0:
            raise GlanceError("llamacpp_hook: audit=True compares with greedy decoding; call with temperature=0")
        p = _Prompt(str(pid), [int(t) for t in tokens], tuple(args), dict(kwargs))
        self.logger.begin_prompt(p.prompt_id, self.reference, task=self.task)
        self.current = p
        return p

    def _finish_round(self, p: _Prompt, m3, last: bool = False) -> None:
        c, p.cur = p.cur, None
        samples = c.samples
        if not samples:                                   # verified after the output was complete
            return
        drafts = c.tokens[1:]
        L = len(drafts)
        a = 0
        while a < len(samples) and a < L and samples[a] == drafts[a]:
            a += 1
        ended = last and len(samples) == a                # no bonus: the output ended inside the round
        horizon = a if ended else L
        n_rows = len(samples)                             # row j chose samples[j]
        h, margin, pmax = self.stats.full(self._row(0 if L else -1))
        minm = margin
        for j in range(1, n_rows):
            minm = min(minm, self.stats.margin(self._row(j)))
        pred = p.pred_h                                   # the entropy of the row that chose this root
        if n_rows == 1:
            p.pred_h, p.pred_known = h, True              # it chose the next root: no second pass
        else:
            p.pred_row, p.pred_known = (n_rows - 1) if L else -1, False
        ids = np.asarray(drafts[:horizon], dtype=np.int64).reshape(horizon, 1)
        logq = np.full((horizon, 1), 0.0 if self.model_free else np.nan, dtype=np.float32)
        ev = RoundEvent(round=p.rounds, position=c.n_past - p.prompt_len, root=c.tokens[0], accepted=a,
                        committed=np.asarray(samples, dtype=np.int64), horizon=horizon, budget=L,
                        tree=chain_tree(horizon) if horizon else None, logq=logq, ids=ids,
                        draft_passes=0 if self.model_free else horizon, point_mass=self.model_free,
                        verify_logits=None, path_rows=None, row_tokens=None, full_logp=None,
                        marks=(c.m0, c.m1, c.m2, m3), drafter=self.drafter,
                        root_stats=(h, margin, pmax, minm, pred))
        p.rounds += 1
        self.logger.on_round(ev)

    def _end(self, p: _Prompt) -> None:
        """The prompt's last round, the audit, the prompt row; an error is kept for the block's exit
        (a generator closed by the garbage collector cannot raise)."""
        if p.done:
            return
        p.done = True
        self.current = None
        try:
            t_end = time.perf_counter()
            if p.prompt_len is None:
                raise GlanceError(f"llamacpp_hook: prompt {p.prompt_id}: generate yielded nothing")
            if p.cur is not None:
                self._finish_round(p, t_end, last=True)
            out = list(p.outputs)
            reason = "eos" if out and self._is_eog(out[-1]) else "max_new_tokens"
            if self.audit:
                self._audit(p, out)
            self.logger.on_prompt_end(PromptEvent(prompt_tokens=p.prompt_len, tokens=out, resolve_stream=out,
                                                  rounds=p.rounds, stop_reason=reason, prefill_marks=p.prefill,
                                                  decode_marks=(p.prefill[1], t_end), timer=self.timer))
            self.outputs.append(out)
        except BaseException as exc:  # noqa: BLE001 - raised again when the hook's block ends
            self.error = self.error or exc

    def _audit(self, p: _Prompt, out: list) -> None:
        ref, margins = self.greedy_reference(p.tokens, len(out), p.kwargs, p.args)
        first = next((i for i, (x, y) in enumerate(zip(out, ref)) if x != y), None)
        if first is None and len(out) != len(ref):
            first = min(len(out), len(ref))
        fields = {"divergence_token": -1, "greedy_token": -1}
        if first is not None:
            fields = {"divergence_token": out[first] if first < len(out) else -1,
                      "greedy_token": ref[first] if first < len(ref) else -1}
        self.logger.audit_against(ref, margins)
        self.logger.prompt_fields(**fields)
        self.verdicts.append({"prompt_id": p.prompt_id, "first_divergence": -1 if first is None else first,
                              "divergence_margin": margins[first] if first is not None and first < len(margins)
                              else None, **fields})

    def greedy_reference(self, tokens, n: int, kwargs=None, args=()) -> tuple[list, list]:
        """The engine's own plain greedy decode of ``tokens``: ``n`` tokens (fewer when it samples a
        stop token first) with the top-1 minus top-2 margin of the row that chose each. The draft
        model is set aside and the context reset first, so the prompt is evaluated as in a fresh
        run; afterwards the Llama's cache holds this decode."""
        llm = self.llm
        kw = dict(kwargs or {})
        names = ("top_k", "top_p", "min_p", "typical_p", "temp")       # generate's first positional parameters
        kw.update({k: v for k, v in zip(names, args) if k not in kw})
        kw["temp"] = 0.0
        held = llm.__dict__.get("draft_model")
        self.auditing = True
        out, margins = [], []
        try:
            llm.draft_model = None
            llm.reset()
            gen = self._orig_generate(list(tokens), **kw)
            try:
                for tok in gen:
                    out.append(int(tok))
                    margins.append(self.stats.margin(self._row(-1)))
                    if len(out) >= n or self._is_eog(tok):
                        break
            finally:
                gen.close()
        finally:
            llm.draft_model = held
            self.auditing = False
        return out, margins

    def close(self) -> None:
        """Finish a prompt whose generator is still open (its tokens so far are its output)."""
        if self.current is not None and not self.current.done:
            self._end(self.current)


def _record_run(logger, rec: LlamaCppRecorder, llm) -> None:
    """The engine, the vocabulary size and the drafter's settings into the run metadata of the
    logger's files; a logger whose run records other drafter settings is refused (one run, one
    drafter configuration)."""
    if callable(getattr(logger, "run_defaults", None)):
        logger.run_defaults(vocab_size=rec.vocab, engine=engine_info(llm))
    for writer in (getattr(logger, "rounds", None), getattr(logger, "prompts", None)):
        run = getattr(writer, "run", None)
        if not isinstance(run, dict):
            continue
        have = run.get("drafter")
        if isinstance(have, dict):
            clash = {k: (have[k], v) for k, v in rec.settings.items() if k in have and have[k] != v}
            if clash:
                raise GlanceError(f"llamacpp_hook: this RoundLogger's run records drafter settings "
                                  f"{ {k: a for k, (a, _) in clash.items()} } but this Llama drafts with "
                                  f"{ {k: b for k, (_, b) in clash.items()} }; log it into another RoundLogger "
                                  "(its own run_id)")
            run["drafter"] = {**rec.settings, **have}
        elif have is None:
            run["drafter"] = dict(rec.settings)


@contextlib.contextmanager
def llamacpp_hook(llm, logger, prompt_id: str | Iterable[str], *, task: str | None = None, reference=None,
                  audit: bool = False, drafter: str | None = None):
    """Log the rounds of a ``llama_cpp.Llama``'s ``generate`` / ``create_completion`` calls inside
    the block, one prompt per call (``prompt_id``: one id, or one per call)::

        with llamacpp_hook(llm, logger, "q1", audit=True):
            llm.create_completion(prompt_tokens, max_tokens=256, temperature=0)

    ``logger``: a :class:`glance_log.record.RoundLogger` (the engine, the GGUF file's SHA-256, the
    threads and the drafter's settings go into its run metadata). ``drafter``: the label to log
    (default ``pld`` for ``LlamaPromptLookupDecoding``, ``ar`` without a draft model, else the draft
    model's class name). A Llama whose settings cannot run (see :func:`check_llama`) is refused
    with one line. Nothing stays attached after the block, whatever raised inside it; an error of
    the hook itself (while a generator was being closed) is raised when the block ends."""
    if getattr(llm, "_glance_hooked", False):
        raise GlanceError("llamacpp_hook: this Llama is already hooked")
    check_llama(llm)
    rec = LlamaCppRecorder(llm, logger, prompt_id, task=task, reference=reference, audit=audit, drafter=drafter)
    _record_run(logger, rec, llm)
    att = Attachments()
    try:
        att.patch(llm, "_glance_hooked", True)
        att.patch(llm, "eval", rec.eval)
        att.patch(llm, "generate", rec.generate)
        if getattr(llm, "draft_model", None) is not None:
            att.patch(llm, "draft_model", _DraftProxy(llm.draft_model, rec))
        yield rec
        rec.close()
    finally:
        att.remove()
    if rec.error is not None:
        raise rec.error
