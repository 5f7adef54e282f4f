"""Loading targets and the target-side operations of one decoding round.

:class:`Target` wraps a Hugging Face causal LM (Llama, Qwen2, Qwen3, ...) or a
Qwen2-VL / Qwen2.5-VL / Qwen3-VL model and exposes the three operations the
decoder needs:

* :meth:`Target.prefill` - the prompt (and image) into a fresh cache; returns
  the last row's logits and final hidden state;
* :meth:`Target.verify` - the pending root plus N tree nodes in ONE pass, with
  an explicit 4D additive attention mask (full attention to the cache, ancestor
  only among the new tokens) and explicit positions ``past + depth`` (for the
  VL models, ``past + depth + rope_delta`` on all three M-RoPE axes);
* :meth:`Target.commit` - gathers the cache down to the committed path.

What differs between model families (the mask per layer type for sliding-window models, the
cache layout, M-RoPE positions) lives in the model's adapter (:mod:`glance_log.adapters`).

The final hidden state is read by a forward pre-hook on the output embedding
(``lm_head``), so it is the exact input of the logits on every architecture.
"""
from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from glance_law.errors import GlanceError

from . import adapters

__all__ = ["Target", "PromptInputs", "load_target", "resolve_device", "resolve_dtype", "cache_kwarg",
           "eos_token_ids", "needs_remote_code", "check_remote_code"]

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def needs_remote_code(path) -> bool:
    """Does the model folder ask to run its own Python code (an ``auto_map`` in its
    config.json or tokenizer_config.json, i.e. custom classes shipped with the weights)?"""
    from glance_law.data.inputs import read_json_document
    remote = False
    for name in ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json"):
        f = Path(path) / name
        if not os.path.lexists(f):
            continue
        d = read_json_document(f, "model config")      # bounded: a FIFO, /dev/zero, a 1 GB file, deep JSON refused
        if not isinstance(d, dict):
            raise GlanceError(f"{f}: a model config is a JSON object, not a {type(d).__name__}")
        if "auto_map" in d and not isinstance(d["auto_map"], dict):
            # transformers' loaders fail on anything else (TypeError on null); say so here, in one line
            raise GlanceError(f"{f}: auto_map is {json.dumps(d['auto_map'])[:40]}, not an object; delete the key "
                              "(no custom code) or give the {\"AutoConfig\": ...} map")
        remote = remote or bool(d.get("auto_map"))
    return remote


def check_remote_code(path, trust_remote_code: bool, what: str = "model") -> None:
    """Refuse a folder that needs remote code unless the user opted in (``--trust-remote-code``)."""
    if needs_remote_code(path) and not trust_remote_code:      # configs checked either way
        raise GlanceError(f"{what} {path} ships its own Python code (auto_map in its config), which would run "
                          "on this machine; pass --trust-remote-code (the trust_remote_code keyword) only if you "
                          "trust that folder")


def resolve_device(name: str = "auto") -> torch.device:
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(name).startswith("cuda") and not torch.cuda.is_available():
        raise GlanceError("--device cuda: no CUDA device is visible to torch; use --device cpu or auto")
    return torch.device(name)


def resolve_dtype(name) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[str(name).lower()]
    except KeyError:
        raise GlanceError(f"--dtype {name!r}: expected fp32 or bf16") from None


def cache_kwarg(model) -> str:
    """``cache`` (transformers >= 5.x) or ``past_key_values`` (older), read from forward's signature."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def eos_token_ids(model, tokenizer=None) -> tuple[int, ...]:
    """The model's stop tokens, sorted: the ``eos_token_id`` of its ``generation_config``, its
    text config and its config (any that have one, merged), else the tokenizer's; empty when
    none names one. glance-log's decoder and the hooks' default stop reason both use it."""
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    ids = set()
    for src in (getattr(model, "generation_config", None), text_config, config):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        if e is None:
            continue
        ids.update([int(x) for x in (e if isinstance(e, (list, tuple)) else [e])])
    if not ids and getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    return tuple(sorted(ids))


@dataclass
class PromptInputs:
    """One encoded prompt: model keyword inputs plus the host-side token ids."""

    inputs: dict
    prompt_ids: list[int]
    image: Any = None
    meta: dict = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return len(self.prompt_ids)


def _is_vlm_config(config) -> bool:
    return getattr(config, "vision_config", None) is not None


def load_target(path, dtype="fp32", device="auto", attn_implementation: str | None = None, *,
                trust_remote_code: bool = False) -> Target:
    """Load a target (model + tokenizer/processor) from a local folder with the real HF loaders.

    A folder whose config asks for its own code (``auto_map``) is refused unless
    ``trust_remote_code`` set (the CLI's ``--trust-remote-code``)."""
    from transformers import AutoConfig, AutoTokenizer

    from .sources import resolve_model
    path = Path(resolve_model(path))     # a .gguf file or a known name -> its converted folder (cached)
    if not path.exists():
        raise GlanceError(f"model path {path} does not exist; pass --model PATH (a Hugging Face model folder) "
                          "or build the embedded default (see docs/logger.md)")
    if not (path / "config.json").exists():
        raise GlanceError(f"{path}: no config.json, so this is not a Hugging Face model folder")
    check_remote_code(path, trust_remote_code)
    trc = bool(trust_remote_code)
    dev = resolve_device(device) if not isinstance(device, torch.device) else device
    dt = resolve_dtype(dtype)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trc)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GlanceError(f"{path}: cannot read the model config ({str(exc).splitlines()[0][:160]})") from None
    kw = {"dtype": dt, "trust_remote_code": trc}
    if attn_implementation:
        kw["attn_implementation"] = attn_implementation
    processor = None
    if _is_vlm_config(config):
        from transformers import AutoModelForImageTextToText, AutoProcessor
        model = AutoModelForImageTextToText.from_pretrained(path, **kw)
        image_processor = None
        try:
            processor = AutoProcessor.from_pretrained(path, trust_remote_code=trc)
            tokenizer = processor.tokenizer
        except Exception:  # noqa: BLE001 - e.g. the video processor needs torchvision
            # fall back to the image processor + tokenizer (the processor's job done by hand)
            from transformers import AutoImageProcessor
            try:
                image_processor = AutoImageProcessor.from_pretrained(path, trust_remote_code=trc)
                tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trc)
            except (OSError, ValueError, TypeError) as exc:
                raise GlanceError(f"{path}: a vision-language model needs its processor files "
                                  f"({str(exc).splitlines()[0][:120]})") from None
            if not getattr(tokenizer, "chat_template", None):
                for name in ("chat_template.jinja", "chat_template.json"):
                    f = path / name
                    if f.exists():
                        txt = f.read_text()
                        tokenizer.chat_template = json.loads(txt)["chat_template"] if name.endswith("json") else txt
                        break
        model = model.to(dev).eval()
        target = Target(model, tokenizer, processor, name=str(path))
        target.image_processor = image_processor
        return target
    else:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(path, **kw)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trc)
    model = model.to(dev).eval()
    return Target(model, tokenizer, processor, name=str(path))


class Target:
    """A frozen target model plus the per-round operations of tree verification."""

    def __init__(self, model, tokenizer=None, processor=None, name: str | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.processor = processor
        self.name = name or type(model).__name__
        self.config = model.config
        self.text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.is_vlm = _is_vlm_config(model.config)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cache_kw = cache_kwarg(model)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        impl = getattr(self.text_config, "_attn_implementation", None) or getattr(self.config, "_attn_implementation", None)
        if impl and "flash" in str(impl):
            raise GlanceError(f"{self.name}: attention implementation {impl!r} cannot take the 4D tree mask; "
                              "load the model with attn_implementation='sdpa' or 'eager'")
        self.image_processor = None
        self.adapter = adapters.adapter_for(model)
        self._hidden: torch.Tensor | None = None
        self._hook = model.get_output_embeddings().register_forward_pre_hook(self._capture)
        self._eos = eos_token_ids(model, tokenizer)

    # -- plumbing ---------------------------------------------------------------
    def _capture(self, module, args):
        self._hidden = args[0]

    def close(self) -> None:
        self._hook.remove()

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self._eos

    def new_cache(self):
        return self.adapter.new_cache()

    @staticmethod
    def cache_len(cache) -> int:
        return int(cache.get_seq_length())

    def _call(self, cache, **kw):
        kw[self.cache_kw] = cache
        return self.model(use_cache=True, **kw)

    # -- prompts ----------------------------------------------------------------
    def encode(self, prompt: str | None, image=None, question: str | None = None) -> PromptInputs:
        """Encode a prompt: text for a causal LM (chat template when the tokenizer has one),
        image + question through the processor's chat template for a VL model."""
        if self.is_vlm:
            return self._encode_vlm(question if question is not None else prompt, image)
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ids = [int(x) for x in (ids[0] if ids and isinstance(ids[0], list) else ids)]
        else:
            ids = [int(x) for x in tok(prompt, add_special_tokens=True)["input_ids"]]
        if not ids:
            raise GlanceError("the prompt encodes to zero tokens")
        t = torch.tensor([ids], dtype=torch.long, device=self.device)
        return PromptInputs({"input_ids": t}, ids)

    def _encode_vlm(self, text: str, image) -> PromptInputs:
        from PIL import Image

        proc = self.processor
        content = []
        img = None
        if image is not None:
            img = image if isinstance(image, Image.Image) else Image.open(image)
            img = img.convert("RGB")
            content.append({"type": "image"})
        content.append({"type": "text", "text": text})
        messages = [{"role": "user", "content": content}]
        if proc is None:
            return self._encode_vlm_by_hand(messages, img)
        if getattr(proc, "chat_template", None):
            prompt = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            raise GlanceError(f"{self.name}: the processor has no chat template to place the image")
        kw = {"text": [prompt], "return_tensors": "pt"}
        if img is not None:
            kw["images"] = [img]
        enc = proc(**kw)
        inputs = {k: (v.to(self.device) if torch.is_tensor(v) else v) for k, v in enc.items()}
        if "pixel_values" in inputs and inputs["pixel_values"].is_floating_point():
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        ids = [int(x) for x in enc["input_ids"][0].tolist()]
        return PromptInputs(inputs, ids, image=img)

    def _encode_vlm_by_hand(self, messages, img) -> PromptInputs:
        """What the Qwen-VL processors do: chat template, one image pad token per merged
        patch, ``mm_token_type_ids`` (1 on image tokens), pixel values and the grid."""
        tok, ip = self.tokenizer, self.image_processor
        if not getattr(tok, "chat_template", None):
            raise GlanceError(f"{self.name}: no chat template (tokenizer or chat_template.jinja) to place the image")
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        image_id = int(getattr(self.config, "image_token_id", None) or self.text_config.image_token_id)
        pad = tok.convert_ids_to_tokens(image_id)
        inputs = {}
        if img is not None:
            enc = ip(images=[img], return_tensors="pt")
            grid = enc["image_grid_thw"]
            n_pad = int(grid[0].prod()) // int(getattr(ip, "merge_size", 2)) ** 2
            if pad not in text:
                raise GlanceError(f"{self.name}: the chat template did not place the image token {pad!r}")
            text = text.replace(pad, pad * n_pad, 1)
            inputs["pixel_values"] = enc["pixel_values"].to(self.device, self.dtype)
            inputs["image_grid_thw"] = grid.to(self.device)
        ids = [int(x) for x in tok(text, add_special_tokens=False)["input_ids"]]
        t = torch.tensor([ids], dtype=torch.long, device=self.device)
        inputs["input_ids"] = t
        inputs["attention_mask"] = torch.ones_like(t)
        inputs["mm_token_type_ids"] = (t == image_id).to(torch.int32)
        return PromptInputs(inputs, ids, image=img)

    # -- the three round operations ---------------------------------------------
    @torch.inference_mode()
    def prefill(self, prompt: PromptInputs, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the prompt into ``cache``; returns (logits (V,), hidden (d,)) of the last row."""
        self.adapter.before_prefill(self.model)
        out = self._call(cache, **prompt.inputs, logits_to_keep=1)
        self.adapter.after_prefill(self.model, cache)
        return out.logits[0, -1], self._hidden[0, -1]

    def positions(self, past: int, depth: torch.Tensor) -> torch.Tensor:
        """Explicit positions of new tokens at ``depth`` (0 = the pending root) after ``past`` cached ones."""
        return self.adapter.positions(past, depth)

    @torch.inference_mode()
    def verify(self, cache, tokens: torch.Tensor, depth: torch.Tensor, ancestors: torch.Tensor):
        """One target pass over ``tokens`` (n,) = root then tree nodes (parents first).

        ``depth`` (n,) long: 0 for the root; ``ancestors`` (n, n) bool: [i, j] when j is i or
        an ancestor of i. Every node attends to the cached keys its layer type lets it see from
        its own position (``past + depth``) and to its ancestors. Returns (logits (n, V),
        hidden (n, d)); the cache grows by n.
        """
        past = self.cache_len(cache)
        mask = self.adapter.masks(cache, past, depth, ancestors, self.dtype)
        out = self._call(cache, input_ids=tokens[None], attention_mask=mask,
                         position_ids=self.positions(past, depth))
        return out.logits[0], self._hidden[0]

    @torch.inference_mode()
    def extend(self, cache, tokens: torch.Tensor):
        """A plain causal pass over a chain of tokens (used to teacher-force tokens outside the tree)."""
        n = tokens.shape[0]
        depth = torch.arange(n, device=tokens.device)
        anc = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()
        return self.verify(cache, tokens, depth, anc)

    @torch.inference_mode()
    def commit(self, cache, past: int, rows: list[int], rows_dev: torch.Tensor | None = None) -> None:
        """Keep cache rows ``past + rows`` (rows ascending, rows[0] == 0 the root) and drop the rest
        of the block: the committed path moves to ``past .. past + len(rows) - 1``."""
        self.adapter.commit(cache, past, rows, rows_dev)

    @staticmethod
    def crop_to(cache, length: int) -> None:
        """Drop every cached key past ``length`` (a draft cache's speculative tail)."""
        adapters.crop(cache, length)


def model_info(path) -> dict:
    """Small provenance dict for the run metadata."""
    p = Path(path)
    info = {"path": str(p)}
    cfg = p / "config.json"
    if cfg.exists():
        try:
            d = json.loads(cfg.read_text())
            info.update(model_type=d.get("model_type"), architectures=d.get("architectures"))
        except (OSError, json.JSONDecodeError):
            pass
    return info
