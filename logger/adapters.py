"""Model adapters: what differs between model families, behind one seam.

The decoder (:mod:`glance_log.decode`) and :class:`glance_log.models.Target` never branch on the
model family. Everything that does differ is answered by the adapter chosen for the model:

* **attention per layer type**: each decoder layer attends either to every earlier key
  (``full_attention``) or to the keys within its sliding window (``sliding_attention``: a key at
  position ``p`` is visible from position ``q`` when ``q - p < window``, the rule of transformers'
  ``sliding_window_overlay``). A tree-verify pass gives every node the keys within the window of
  *its own* position ``past + depth``, not of the root's: :meth:`TextAdapter.masks` builds one 4D
  mask per layer type (a dict ``{layer_type: mask}`` for models that mix types, as Gemma 2/3,
  Qwen2/3 with ``use_sliding_window``, gpt-oss do; one tensor when every layer is alike, as Llama
  or Mistral with its window);
* **cache layout**: a full layer keeps every key; a sliding layer (transformers'
  ``DynamicSlidingWindowLayer``) keeps the last ``window - 1`` keys and counts every token it has
  seen (``cumulative_length``). The adapter's caches record the past on sliding layers (transformers'
  ``activate_past_recording``) so that a verify pass never drops committed keys that a later
  token still sees; :meth:`TextAdapter.commit` gathers the accepted path in each layer's stored
  tail, sets ``cumulative_length`` to the committed length and trims sliding layers back to their
  window. Either layout (only the window, or every key) is read from the layer itself;
* **positions**: ``past + depth`` for text models; Qwen-VL's M-RoPE adds the prompt's
  ``rope_delta`` on all three axes (:class:`QwenVLAdapter`).

:func:`adapter_for` picks the adapter from the model's config. transformers 5.24 is the reference
(``cache_utils.DynamicSlidingWindowLayer``, ``masking_utils.sliding_window_overlay``, and the
``causal_mask_mapping`` dicts of ``models/gemma3/modeling_gemma3.py`` and
``models/qwen3/modeling_qwen3.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from glance_law.errors import GlanceError

__all__ = ["LayerLayout", "TextAdapter", "QwenVLAdapter", "adapter_for", "layer_layout"]

FULL = "full_attention"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class LayerLayout:
    """The attention type of every decoder layer and the sliding window (None: no sliding layer)."""

    types: tuple[str, ...]
    window: int | None

    @property
    def mixed(self) -> bool:
        return len(set(self.types)) > 1

    @property
    def sliding(self) -> bool:
        return SLIDING in self.types


def layer_layout(text_config) -> LayerLayout:
    """Per-layer attention types from a text config (``layer_types``; else every layer slides when
    ``sliding_window`` is set and the model uses it, as Mistral does). Chunked and other attention
    types are refused with one line: the tree mask is not built for them."""
    n = int(getattr(text_config, "num_hidden_layers", 0) or 0)
    window = getattr(text_config, "sliding_window", None)
    types = getattr(text_config, "layer_types", None)
    if types is None:
        uses = getattr(text_config, "use_sliding_window", True)
        types = [SLIDING if (window is not None and uses) else FULL] * n
    types = tuple(str(t) for t in types)
    other = sorted(set(types) - {FULL, SLIDING})
    if other:
        raise GlanceError(f"layer types {', '.join(other)} are not supported by the tree verifier (it builds "
                          "full and sliding-window masks only)")
    if SLIDING in types and not window:
        raise GlanceError("the config has sliding-window layers but no sliding_window size")
    return LayerLayout(types, int(window) if SLIDING in types else None)


class TextAdapter:
    """A decoder-only text model (Llama, Qwen2/3, Mistral, Gemma 2/3, ...)."""

    name = "text"

    def __init__(self, model):
        self.config = model.config
        self.text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.layout = layer_layout(self.text_config)

    # -- caches -----------------------------------------------------------------
    def new_cache(self):
        """A DynamicCache whose sliding layers record the past (see the module docstring)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        for layer in cache.layers:
            if getattr(layer, "is_sliding", False) and hasattr(layer, "activate_past_recording"):
                layer.activate_past_recording()
        return cache

    def after_prefill(self, model, cache) -> None:
        """Trim sliding layers back to their window once the prompt is in."""
        trim_sliding(cache)

    def before_prefill(self, model) -> None:
        """Reset per-prompt model state (nothing for text models)."""

    # -- one verify pass --------------------------------------------------------
    def positions(self, past: int, depth: torch.Tensor) -> torch.Tensor:
        return (depth + past).unsqueeze(0)                               # (1, n)

    def masks(self, cache, past: int, depth: torch.Tensor, ancestors: torch.Tensor, dtype: torch.dtype):
        """The 4D additive masks of one verify pass: a tensor (every layer alike) or a dict keyed by
        layer type. Each mask's key axis is exactly what that layer's cache returns in the pass: its
        stored keys, then the ``n`` new ones."""
        stored = stored_lengths(cache, self.layout, past)
        masks = {}
        for kind in dict.fromkeys(self.layout.types):
            window = self.layout.window if kind == SLIDING else None
            masks[kind] = tree_mask(past, stored[kind], depth, ancestors, window, dtype)
        if not self.layout.mixed:
            return masks[self.layout.types[0]] if self.layout.types else masks.get(FULL)
        return masks

    def commit(self, cache, past: int, rows: list[int], rows_dev: torch.Tensor | None = None) -> None:
        commit_rows(cache, past, rows, rows_dev)


class QwenVLAdapter(TextAdapter):
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL: M-RoPE positions ``past + depth + rope_delta`` on t, h, w."""

    name = "qwen_vl"

    def __init__(self, model):
        super().__init__(model)
        self.rope_delta = None

    @staticmethod
    def _inner(model):
        return getattr(model, "model", None)

    def before_prefill(self, model) -> None:
        inner = self._inner(model)
        if inner is not None and hasattr(inner, "rope_deltas"):
            inner.rope_deltas = None                 # stale deltas from the previous prompt must not leak
        self.rope_delta = None

    def after_prefill(self, model, cache) -> None:
        super().after_prefill(model, cache)
        rd = getattr(self._inner(model), "rope_deltas", None)
        if rd is not None:
            self.rope_delta = rd.reshape(-1)[:1]

    def positions(self, past: int, depth: torch.Tensor) -> torch.Tensor:
        pos = super().positions(past, depth)
        if self.rope_delta is not None:
            pos = pos + self.rope_delta.to(pos.device, pos.dtype)       # the same delta on t, h, w
        return pos.unsqueeze(0).expand(3, 1, -1)                        # (3, 1, n)


def adapter_for(model) -> TextAdapter:
    """The adapter of a loaded model: Qwen-VL's M-RoPE for vision-language models that have it,
    the text adapter otherwise."""
    if getattr(model.config, "vision_config", None) is not None:
        return QwenVLAdapter(model)
    return TextAdapter(model)


# -- masks and caches: pure tensor functions ---------------------------------------------------
def tree_mask(past: int, stored: int, depth: torch.Tensor, ancestors: torch.Tensor, window: int | None,
              dtype: torch.dtype) -> torch.Tensor:
    """4D additive mask (1, 1, n, stored + n) of one verify pass.

    The cache holds the ``stored`` keys at positions ``past - stored .. past - 1``; node ``i`` sits
    at ``past + depth[i]`` and sees the cached keys and its ancestors (itself included), and, with a
    ``window``, only those less than ``window`` positions behind it."""
    dev = ancestors.device
    n = ancestors.shape[0]
    allowed = torch.cat([torch.ones(n, stored, dtype=torch.bool, device=dev), ancestors], dim=1)
    if window is not None:
        q = (past + depth.to(dev)).view(n, 1)
        k = torch.cat([torch.arange(past - stored, past, device=dev), past + depth.to(dev)]).view(1, -1)
        allowed &= (q - k) < window
    mask = torch.zeros(allowed.shape, dtype=dtype, device=dev)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def stored_lengths(cache, layout: LayerLayout, past: int) -> dict:
    """How many keys each layer type's pass attends to besides the new ones: ``past`` for full
    layers; for sliding layers their stored tail, at most ``window - 1`` (0 while none has run).
    Sliding layers must agree (they always do in transformers' caches: one window per model)."""
    out = {FULL: past}
    if layout.sliding:
        lens = {int(layer.keys.shape[-2]) for kind, layer in zip(layout.types, cache.layers)
                if kind == SLIDING and getattr(layer, "is_initialized", False) and layer.keys is not None}
        if len(lens) > 1:
            raise GlanceError(f"sliding cache layers hold different numbers of keys ({sorted(lens)})")
        # a pass returns at most the last ``window - 1`` stored keys (DynamicSlidingWindowLayer.update):
        # older ones are out of every new token's window anyway
        out[SLIDING] = min(lens.pop() if lens else 0, layout.window - 1)
    return out


def commit_rows(cache, past: int, rows: list[int], rows_dev: torch.Tensor | None = None) -> None:
    """Keep the verified block's rows ``rows`` (ascending, rows[0] == 0 the root) in every layer: the
    committed path moves to positions ``past .. past + len(rows) - 1``, the rest of the block is
    dropped. Each layer is gathered in its own stored tail (a sliding layer may hold only its
    window), a sliding layer's ``cumulative_length`` becomes the committed length and its stored
    keys are trimmed back to ``window - 1``."""
    keep = len(rows)
    if int(cache.get_seq_length()) < past + rows[-1] + 1:
        raise RuntimeError("commit: the cache is shorter than the verified block")
    contiguous = rows == list(range(keep))
    src = None
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", True) or layer.keys is None or layer.keys.numel() == 0:
            continue
        sliding = getattr(layer, "is_sliding", False)
        total = int(layer.cumulative_length) if sliding else int(layer.keys.shape[-2])
        start = int(layer.keys.shape[-2]) - (total - past)        # where position ``past`` sits in storage
        if start < 0:
            raise RuntimeError("commit: a sliding layer dropped keys of the verified block")
        if not contiguous:
            if src is None or src.device != layer.keys.device:
                src = (rows_dev if rows_dev is not None else torch.tensor(rows)).to(layer.keys.device)
            idx = src + start
            layer.keys[..., start:start + keep, :] = layer.keys.index_select(-2, idx)
            layer.values[..., start:start + keep, :] = layer.values.index_select(-2, idx)
        layer.keys = layer.keys[..., :start + keep, :]
        layer.values = layer.values[..., :start + keep, :]
        if sliding:
            layer.cumulative_length = past + keep
    trim_sliding(cache)


def trim_sliding(cache) -> None:
    """Restrict sliding layers to the last ``window - 1`` keys (what transformers keeps)."""
    for layer in cache.layers:
        if not getattr(layer, "is_sliding", False) or layer.keys is None or not getattr(layer, "is_initialized", False):
            continue
        w = int(layer.sliding_window) - 1
        if layer.keys.shape[-2] > w:
            layer.keys = layer.keys[..., -w:, :]
            layer.values = layer.values[..., -w:, :]


def crop(cache, length: int) -> None:
    """Drop every key past ``length`` (a draft cache's speculative tail). A sliding layer that keeps
    only its window must still hold the keys to drop (past recording: see the module docstring)."""
    drop = int(cache.get_seq_length()) - int(length)
    if drop <= 0:
        return
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", True) or layer.keys is None or layer.keys.numel() == 0:
            continue
        stored = int(layer.keys.shape[-2])
        if stored < drop and getattr(layer, "is_sliding", False):
            raise RuntimeError("crop: a sliding layer no longer holds the keys to drop")
        layer.keys = layer.keys[..., :stored - drop, :]
        layer.values = layer.values[..., :stored - drop, :]
        if getattr(layer, "is_sliding", False):
            layer.cumulative_length = int(layer.cumulative_length) - drop
