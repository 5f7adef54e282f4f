"""Drafters: one interface, per-offset top-k marginals.

Every drafter answers :meth:`Drafter.propose` with a :class:`Proposal`: for
offsets ``1..L`` after the pending root, the top-k log-probabilities (L x k,
float32, each row sorted descending) and their token ids, optionally the full
log-probability rows (L x V, on the device) so the logger can rank the
target's token exactly, and the number of sequential drafter passes spent.
The candidate tree is always built from ``logq`` by :func:`glance_law.replay.tree.build_tree`
(in the decoder), never by a drafter.

* ``ar``        no draft (horizon 0): plain autoregressive decoding, one token a round.
* ``pld``       n-gram prompt lookup (model-free): a chain with logq 0 on the proposed
                tokens; ``k = 1`` and every other token has probability 0.
* ``two_model`` any smaller HF causal LM or VL model drafting autoregressively with its
                own cache; its top-k per offset is read along its own greedy chain.
* ``early_exit`` self-speculation (layer skip, Draft & Verify): the target's first k decoder
                layers through its final norm and LM head draft autoregressively with their own
                cache; labelled ``early_exit-<k>`` so two exit layers never pool.
* ``block``     the project's :class:`glance_log.heads.BlockHead` over the target's last
                hidden state and the root embedding (one pass), or a DFlash checkpoint
                through the optional ``dflash`` package.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from glance_law.errors import GlanceError

__all__ = ["Proposal", "DraftState", "Drafter", "ARDrafter", "PLDDrafter", "TwoModelDrafter",
           "EarlyExitDrafter", "BlockDrafter", "make_drafter", "exit_after", "DRAFTERS"]

DRAFTERS = ("block", "pld", "two_model", "early_exit", "ar")


@dataclass
class Proposal:
    logq: torch.Tensor                 # (L, k) float32, rows sorted descending (device)
    ids: torch.Tensor                  # (L, k) long (device)
    full_logp: torch.Tensor | None  # (L, V) float32 log-probabilities, or None
    passes: int                        # sequential drafter forward passes
    point_mass: bool = False           # model-free: tokens outside ids have probability 0

    @property
    def horizon(self) -> int:
        return int(self.logq.shape[0])


@dataclass
class DraftState:
    """What a drafter sees at the start of a round."""

    root: int                          # pending root token (host)
    root_dev: torch.Tensor             # the same, a 0-d long tensor on the device
    stream: list                       # generated tokens so far, root last (host)
    prompt_ids: list                   # prompt token ids (host)
    hidden: torch.Tensor               # target final hidden state that predicted the root (d,)
    round: int


class Drafter:
    name = "drafter"
    horizon = 0
    wants_rows = False          # True: observe() needs the committed rows of every target pass

    def start(self, target, prompt) -> None:
        """Called once per prompt after the target's prefill."""

    def propose(self, state: DraftState) -> Proposal | None:
        raise NotImplementedError

    def observe(self, rows: torch.Tensor, cache_len: int) -> None:
        """Called after the prefill (rows = every prompt row) and after each commit (rows = the
        committed rows of the verify pass) with the committed cache length. Default: nothing."""

    def config(self) -> dict:
        return {"drafter": self.name, "horizon": self.horizon}


def topk_rows(logits: torch.Tensor, k: int):
    """fp32 log-softmax rows and their top-k (values sorted descending, ids)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    k = min(int(k), logp.shape[-1])
    val, idx = torch.topk(logp, k, dim=-1, sorted=True)
    return logp, val, idx


class ARDrafter(Drafter):
    """No draft: every round commits exactly the target's next token."""

    name = "ar"
    horizon = 0

    def propose(self, state):
        return None


class PLDDrafter(Drafter):
    """Prompt lookup: find the most recent earlier occurrence of the last n tokens
    (n from ``max_ngram`` down to ``min_ngram``) in prompt + generated text and propose
    the tokens that followed it (up to ``horizon``)."""

    name = "pld"

    def __init__(self, horizon: int = 10, max_ngram: int = 3, min_ngram: int = 1):
        if horizon < 1 or min_ngram < 1 or max_ngram < min_ngram:
            raise GlanceError("pld: need horizon >= 1 and 1 <= min_ngram <= max_ngram")
        self.horizon = int(horizon)
        self.max_ngram = int(max_ngram)
        self.min_ngram = int(min_ngram)
        self._device = torch.device("cpu")

    def start(self, target, prompt):
        self._device = target.device

    def lookup(self, seq: list) -> list:
        n_seq = len(seq)
        for n in range(min(self.max_ngram, n_seq - 1), self.min_ngram - 1, -1):
            pattern = seq[n_seq - n:]
            # most recent earlier occurrence whose continuation is non-empty
            for start in range(n_seq - n - 1, -1, -1):
                if seq[start:start + n] == pattern:
                    cont = seq[start + n:start + n + self.horizon]
                    if cont:
                        return cont
        return []

    def propose(self, state):
        cont = self.lookup(list(state.prompt_ids) + list(state.stream))
        if not cont:
            return None
        ids = torch.tensor(cont, dtype=torch.long).view(-1, 1)
        logq = torch.zeros(len(cont), 1, dtype=torch.float32, device=self._device)
        if self._device.type != "cpu":
            ids = ids.pin_memory().to(self._device, non_blocking=True)
        return Proposal(logq=logq, ids=ids, full_logp=None, passes=0, point_mass=True)

    def config(self):
        return {"drafter": self.name, "horizon": self.horizon, "max_ngram": self.max_ngram,
                "min_ngram": self.min_ngram}


class BlockDrafter(Drafter):
    """The project's one-pass block head (:mod:`glance_log.heads`)."""

    name = "block"

    def __init__(self, head, branch_k: int = 8, path: str | None = None):
        self.head = head
        self.horizon = int(head.horizon)
        self.k = int(branch_k)
        self.path = path
        self._target = None

    @classmethod
    def from_pretrained(cls, path, target, branch_k: int = 8, *, trust_remote_code: bool = False):
        from .heads import BlockHead, is_block_head

        path = Path(path)
        if not path.exists():
            raise GlanceError(f"block head {path} does not exist; pass --draft-model PATH or build the "
                              "embedded default (see docs/logger.md)")
        if is_block_head(path):
            head = BlockHead.from_pretrained(path, device=target.device, dtype=target.dtype)
            if head.config.hidden_size != target.text_config.hidden_size:
                raise GlanceError(f"block head {path} has hidden_size {head.config.hidden_size} but the target "
                                  f"has {target.text_config.hidden_size}; it was trained for another target")
            return cls(head, branch_k, str(path))
        return DFlashDrafter.from_pretrained(path, target, branch_k, trust_remote_code=trust_remote_code)

    def start(self, target, prompt):
        self._target = target

    @torch.inference_mode()
    def propose(self, state):
        logits = self.head.logits(state.hidden.view(1, -1), state.root_dev.view(1), self._target.model)[0]
        logp, val, idx = topk_rows(logits, self.k)
        return Proposal(logq=val, ids=idx, full_logp=logp, passes=1)

    def config(self):
        return {"drafter": self.name, "horizon": self.horizon, "branch_k": self.k, "head": self.path,
                "head_parameters": self.head.num_parameters()}


class DFlashDrafter(BlockDrafter):
    """A DFlash block-diffusion checkpoint through the optional ``dflash`` package.

    One draft pass a round: the masked block ``[root, mask, ...]`` attends to the target's
    hidden states at the kept layers (``target_layer_ids``) of every committed position
    (the draft cache holds the earlier ones), as ``dflash.model.dflash_generate`` does.
    """

    name = "block"
    wants_rows = True

    def __init__(self, model, target, branch_k: int = 8, path: str | None = None):
        self.model = model
        self.horizon = int(model.block_size) - 1
        self.k = int(branch_k)
        self.path = path
        self._target = target
        self._cache = None
        self._ctx = None
        self._layers = list(model.target_layer_ids)
        self._pending = None

    @classmethod
    def from_pretrained(cls, path, target, branch_k: int = 8, *, trust_remote_code: bool = False):
        from .models import check_remote_code

        check_remote_code(path, trust_remote_code, "draft model")
        try:
            import dflash  # noqa: F401
            from transformers import AutoModel
        except ImportError:
            raise GlanceError(f"{path} is not a glance block head (no config.json with format "
                              "'glance-block-head'), and the optional 'dflash' package that reads DFlash "
                              "checkpoints is not installed") from None
        model = AutoModel.from_pretrained(path, trust_remote_code=bool(trust_remote_code), dtype=target.dtype).to(target.device).eval()
        if not hasattr(model, "block_size") or not hasattr(model, "target_layer_ids"):
            raise GlanceError(f"{path}: not a DFlash draft model (no block_size/target_layer_ids)")
        return cls(model, target, branch_k, str(path))

    def start(self, target, prompt):
        from transformers import DynamicCache

        self._target = target
        self._cache = DynamicCache(config=self.model.config)
        self._ctx = None
        self._hooks = getattr(self, "_hooks", None) or self._install_hooks(target)

    def _install_hooks(self, target):
        store = {}

        def grab(idx):
            def hook(module, args, output):
                store[idx] = output[0] if isinstance(output, tuple) else output
            return hook

        layers = target.model.get_decoder().layers
        handles = [layers[i].register_forward_hook(grab(i)) for i in self._layers]
        self._store = store
        return handles

    def context_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """Concatenated kept-layer states of the given rows of the last target pass."""
        return torch.cat([self._store[i][0, rows] for i in self._layers], dim=-1)[None]

    @torch.inference_mode()
    def propose(self, state):
        import torch.nn.functional as F

        ctx = self._pending
        if ctx is None:
            raise GlanceError("dflash drafter: no target context captured (prefill hook missing)")
        L = self.horizon
        mask_id = int(self.model.mask_token_id)
        block = torch.full((1, L + 1), mask_id, dtype=torch.long, device=state.root_dev.device)
        block[0, 0] = state.root_dev
        cfg = self.model.config
        scale = float(getattr(cfg, "dflash_config", {}).get("input_embedding_scale",
                                                              getattr(cfg, "input_embedding_scale", 1.0)))
        emb = F.embedding(block, self._target.model.get_input_embeddings().weight) * scale
        start = self._start
        pos = torch.arange(start - ctx.shape[1], start + L + 1, device=block.device)[None]
        hid = self.model(target_hidden=ctx, noise_embedding=emb, position_ids=pos,
                         past_key_values=self._cache, use_cache=True)[:, 1 - (L + 1):, :]
        drop = int(self._cache.get_seq_length()) - start
        if drop > 0:
            self._cache.crop(-drop)
        logits = self.model.compute_logits(hid, self._target.model.get_output_embeddings())[0]
        logp, val, idx = topk_rows(logits, self.k)
        return Proposal(logq=val, ids=idx, full_logp=logp, passes=1)

    def observe(self, rows: torch.Tensor, cache_len: int) -> None:
        """The decoder reports which rows of the last target pass were committed (their
        kept-layer states become the draft's new context) and the committed cache length."""
        self._pending = self.context_rows(rows)
        self._start = int(cache_len)

    def config(self):
        return {"drafter": self.name, "horizon": self.horizon, "branch_k": self.k, "dflash": self.path}


class TwoModelDrafter(Drafter):
    """A smaller HF model drafting autoregressively (greedy chain) with its own cache.

    Each round it first catches its cache up with the committed stream (one pass over
    the tokens it has not seen, ending with the root), then drafts ``horizon - 1`` more
    tokens one pass at a time: ``horizon`` sequential passes a round, recorded in
    ``draft_passes``. Its per-offset top-k are its conditionals along its own greedy
    chain (the plug-in interface of Assumption 1)."""

    name = "two_model"

    def __init__(self, draft_target, horizon: int = 5, branch_k: int = 8, path: str | None = None):
        self.draft = draft_target
        self.horizon = int(horizon)
        self.k = int(branch_k)
        self.path = path
        self._seen: list = []
        self._cache = None

    @classmethod
    def from_pretrained(cls, path, target, horizon: int = 5, branch_k: int = 8, *, trust_remote_code: bool = False):
        from .models import check_remote_code, load_target

        if path is None:
            raise GlanceError("--drafter two_model needs --draft-model PATH (a smaller HF model sharing the "
                              "target's tokenizer)")
        check_remote_code(path, trust_remote_code, "draft model")
        draft = load_target(path, dtype=target.dtype, device=target.device, trust_remote_code=trust_remote_code)
        if draft.vocab_size < target.vocab_size and draft.tokenizer is not None and \
                len(draft.tokenizer) > draft.vocab_size:
            raise GlanceError(f"draft model {path}: its vocabulary does not cover the target's")
        if target.tokenizer is not None and draft.tokenizer is not None and \
                target.tokenizer.get_vocab() != draft.tokenizer.get_vocab():
            raise GlanceError(f"draft model {path} uses a different tokenizer than the target; "
                              "two-model drafting here needs a shared vocabulary")
        return cls(draft, horizon, branch_k, str(path))

    def start(self, target, prompt):
        if self.draft.is_vlm != target.is_vlm:
            raise GlanceError("two_model: the draft and the target must both be text models or both "
                              "vision-language models (the draft reads the target's encoded prompt)")
        self._cache = self.draft.new_cache()
        self._seen = []
        self._prompt = prompt
        self._base = None

    def _catch_up(self, stream):
        """Crop the draft cache to the longest prefix of ``stream`` it holds; return the rest."""
        n, m = 0, min(len(self._seen), len(stream))
        while n < m and self._seen[n] == stream[n]:
            n += 1
        if n < len(self._seen):
            self.draft.crop_to(self._cache, self._base + n)
            self._seen = self._seen[:n]
        return stream[n:]

    @torch.inference_mode()
    def propose(self, state):
        d = self.draft
        dev = d.device
        if self._base is None:
            d.prefill(self._prompt, self._cache)
            self._base = d.cache_len(self._cache)
        todo = self._catch_up(list(state.stream))
        n = len(todo)
        toks = torch.tensor(todo, dtype=torch.long).to(dev, non_blocking=True)
        logits, _ = d.verify(self._cache, toks, torch.arange(n, device=dev),
                             torch.ones(n, n, dtype=torch.bool, device=dev).tril())
        self._seen.extend(todo)
        last = logits[-1]
        rows_lp, rows_v, rows_i = [], [], []
        for j in range(self.horizon):
            lp, v, i = topk_rows(last, self.k)
            rows_lp.append(lp)
            rows_v.append(v)
            rows_i.append(i)
            if j + 1 < self.horizon:
                logits, _ = d.verify(self._cache, i[:1], torch.zeros(1, dtype=torch.long, device=dev),
                                     torch.ones(1, 1, dtype=torch.bool, device=dev))
                last = logits[-1]
        # drop the drafted chain from the draft cache; whatever the target commits is fed next round
        d.crop_to(self._cache, self._base + len(self._seen))
        return Proposal(logq=torch.stack(rows_v), ids=torch.stack(rows_i), full_logp=torch.stack(rows_lp),
                        passes=self.horizon)

    def config(self):
        return {"drafter": self.name, "horizon": self.horizon, "branch_k": self.k, "draft_model": self.path}


def _decoder(target):
    """The target's decoder stack (its config and ``layers``); for a VL model the language model."""
    dec = target.model.get_decoder() if hasattr(target.model, "get_decoder") else None
    if dec is None or not hasattr(dec, "layers") or not hasattr(getattr(dec, "config", None), "num_hidden_layers"):
        raise GlanceError(f"{target.name}: early exit needs a decoder with a 'layers' stack and "
                          "config.num_hidden_layers (Llama, Qwen2/3, Mistral, Gemma 3 style)")
    return dec


def num_layers(target) -> int:
    """The number of decoder layers of ``target`` (its text config's ``num_hidden_layers``)."""
    return len(_decoder(target).layers)


@contextmanager
def exit_after(target, k: int):
    """Run ``target`` with only its first ``k`` decoder layers (then its final norm and LM head)
    inside the block. As Hugging Face's ``EarlyExitCandidateGenerator`` does, the decoder's config
    says ``num_hidden_layers = k`` (Llama, Qwen2/3, Mistral, Gemma 3 run
    ``self.layers[: config.num_hidden_layers]``); the decoder's ``layers`` is also the list of its
    first ``k`` layers, for the forwards that loop over every layer (Qwen2-VL, Qwen2.5-VL and
    Qwen3-VL, where HF's early exit silently runs the full model). Both are restored in
    ``finally``. A forward pre-hook on layer ``k`` proves it: a forward that still reaches that
    layer raises a GlanceError instead of drafting with the full model. A cache created inside
    the block (:meth:`Target.new_cache`) has ``k`` layers."""
    dec = _decoder(target)
    n = int(dec.config.num_hidden_layers)
    if not 1 <= int(k) < n:
        raise GlanceError(f"--exit-layer {k}: must be between 1 and {n - 1} ({target.name} has {n} decoder layers)")

    def refuse(module, args):
        raise GlanceError(f"{target.name}: its forward ran decoder layer {k} with num_hidden_layers = {k}; "
                          "this architecture does not support early exit")

    layers = dec.layers
    handle = layers[int(k)].register_forward_pre_hook(refuse)
    dec.config.num_hidden_layers = int(k)
    dec.layers = torch.nn.ModuleList(list(layers)[:int(k)])
    try:
        yield dec
    finally:
        dec.layers = layers
        dec.config.num_hidden_layers = n
        handle.remove()


class EarlyExitDrafter(TwoModelDrafter):
    """Self-speculative drafting from the target's first ``exit_layer`` decoder layers, its
    final norm and its LM head (the layer-skip / Draft & Verify family; Hugging Face's
    ``assistant_early_exit`` is the reference).

    The partial model keeps its own cache (``exit_layer`` layers) and works as
    :class:`TwoModelDrafter` does: each round one pass catches it up with the committed stream
    (ending with the root), then ``horizon - 1`` passes draft its own greedy chain, whose
    conditionals are the per-offset top-k rows (so it feeds trees as well as chains). The first
    round also prefills the prompt into its cache: ``draft_passes`` is ``horizon`` a round,
    ``horizon + 1`` in a prompt's first round. Its name, the ``drafter`` column and the run id
    carry the layer (``early_exit-<k>``)."""

    def __init__(self, target, exit_layer: int, horizon: int = 5, branch_k: int = 8):
        n = num_layers(target)
        if exit_layer is None:
            raise GlanceError(f"--drafter early_exit needs --exit-layer K, the number of decoder layers that "
                              f"draft (1 <= K < {n}; {target.name} has {n})")
        if not 1 <= int(exit_layer) < n:
            raise GlanceError(f"--exit-layer {exit_layer}: must be between 1 and {n - 1} "
                              f"({target.name} has {n} decoder layers)")
        super().__init__(target, horizon, branch_k, path=None)
        self.exit_layer = int(exit_layer)
        self.n_layers = n
        self.name = f"early_exit-{self.exit_layer}"

    def start(self, target, prompt):
        self.draft = target
        with exit_after(target, self.exit_layer):
            super().start(target, prompt)

    def propose(self, state):
        fresh = self._base is None
        with exit_after(self.draft, self.exit_layer):
            prop = super().propose(state)
        prop.passes += int(fresh)                  # the prompt's prefill through the first k layers
        return prop

    def config(self):
        return {"drafter": self.name, "horizon": self.horizon, "branch_k": self.k, "exit_layer": self.exit_layer,
                "num_hidden_layers": self.n_layers, "layer_fraction": self.exit_layer / self.n_layers}


def make_drafter(name: str, target, *, draft_model=None, branch_k: int = 8, draft_len: int | None = None,
                 trust_remote_code: bool = False, exit_layer: int | None = None):
    """Build a drafter by name for ``target``. A ``draft_model`` folder that ships its own code
    (a DFlash checkpoint, custom HF classes) is refused unless ``trust_remote_code`` is set.
    ``exit_layer``: the decoder layers that draft for ``early_exit`` (required there, refused
    elsewhere)."""
    if exit_layer is not None and name != "early_exit":
        raise GlanceError(f"--exit-layer is for --drafter early_exit, not {name}")
    if name == "early_exit":
        return EarlyExitDrafter(target, exit_layer, horizon=draft_len or 5, branch_k=branch_k)
    if name == "ar":
        return ARDrafter()
    if name == "pld":
        return PLDDrafter(horizon=draft_len or 10)
    if name == "block":
        if draft_model is None:
            raise GlanceError("--drafter block needs a block head (--draft-model PATH)")
        return BlockDrafter.from_pretrained(draft_model, target, branch_k, trust_remote_code=trust_remote_code)
    if name == "two_model":
        return TwoModelDrafter.from_pretrained(draft_model, target, horizon=draft_len or 5, branch_k=branch_k,
                                               trust_remote_code=trust_remote_code)
    raise GlanceError(f"unknown drafter {name!r}; expected one of {', '.join(DRAFTERS)}")
