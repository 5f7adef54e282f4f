"""Tiny models for the logger tests: random-init configs, a tiny BPE tokenizer built with
``tokenizers``, everything saved to a folder and loaded back through the real
``from_pretrained`` code paths."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

CORPUS = [
    "the invoice total is 42 dollars and the date is march 3",
    "what is the total amount due on this invoice",
    "the chart shows revenue rising from 10 to 25 million",
    "a cat sits on a red mat next to a blue door",
    "question: what is written on the sign? answer: stop",
    "the document title reads annual report 2024 for acme corp",
    "ocr: total 42.00 tax 3.15 date 03/03/2024 invoice no 1187",
] * 4

PROMPTS = [
    "what is the total amount due on this invoice",
    "the chart shows revenue rising",
    "question: what is written on the sign? answer:",
]


def make_tokenizer(path: Path, extra_special=()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<s>", "</s>", *extra_special]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=list(extra_special) or None)
    fast.save_pretrained(path)
    return fast


def make_llama(path: Path, seed: int = 0, layers: int = 2, hidden: int = 64, init: float = 0.3,
               family: str = "llama", **extra):
    """A tiny random causal LM (llama / qwen2 / qwen3 / mistral / gemma3_text ...) with its tokenizer,
    saved to ``path``; ``extra`` config keys (e.g. ``sliding_window``, ``layer_types``) are passed on."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = Path(path)
    tok = make_tokenizer(path)
    torch.manual_seed(seed)
    kw = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
              initializer_range=init, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
              tie_word_embeddings=False)
    if family in ("qwen3", "gemma3_text"):
        kw["head_dim"] = hidden // 4
    kw.update(extra)
    cfg = AutoConfig.for_model(family, **kw)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(path)
    return path


def make_block_head(path: Path, target_path: Path, horizon: int = 6, seed: int = 0):
    from transformers import AutoConfig

    from glance_log.heads import BlockHead, BlockHeadConfig

    cfg = AutoConfig.from_pretrained(target_path)
    torch.manual_seed(seed)
    head = BlockHead(BlockHeadConfig(hidden_size=cfg.get_text_config().hidden_size, horizon=horizon, n_blocks=1))
    with torch.no_grad():  # give the residual blocks non-zero output so offsets differ
        for p in head.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    head.save_pretrained(path)
    return path


VL_SPECIAL = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_qwen2_vl(path: Path, seed: int = 0, family: str = "qwen2_vl", init: float = 0.3):
    """A tiny Qwen2-VL (or Qwen3-VL) with a processor (image processor + tokenizer + chat template)."""
    from transformers import AutoModelForImageTextToText

    path = Path(path)
    tok = make_tokenizer(path, extra_special=VL_SPECIAL)
    ids = {t: tok.convert_tokens_to_ids(t) for t in VL_SPECIAL}
    torch.manual_seed(seed)
    if family == "qwen2_vl":
        from transformers import Qwen2VLConfig, Qwen2VLImageProcessor, Qwen2VLProcessor
        text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                    rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, initializer_range=init,
                    eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                    vision_start_token_id=ids["<|vision_start|>"], image_token_id=ids["<|image_pad|>"])
        vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
        cfg = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                            vision_start_token_id=ids["<|vision_start|>"],
                            vision_end_token_id=ids["<|vision_end|>"], video_token_id=ids["<|image_pad|>"],
                            tie_word_embeddings=False)
        improc = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=56 * 56, patch_size=14, merge_size=2,
                                       temporal_patch_size=2)
        Proc = Qwen2VLProcessor
    elif family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor, Qwen2VLImageProcessor
        text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                    rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}, initializer_range=init,
                    eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, in_channels=3, out_hidden_size=64,
                      window_size=56, fullatt_block_indexes=[1])
        cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                               vision_start_token_id=ids["<|vision_start|>"],
                               vision_end_token_id=ids["<|vision_end|>"], video_token_id=ids["<|image_pad|>"],
                               tie_word_embeddings=False)
        improc = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=56 * 56, patch_size=14, merge_size=2,
                                       temporal_patch_size=2)
        Proc = Qwen2_5_VLProcessor
    else:
        from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLProcessor
        text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                    rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                    initializer_range=init, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                      spatial_merge_size=2, temporal_patch_size=2, in_channels=3, out_hidden_size=64,
                      num_position_embeddings=16, deepstack_visual_indexes=[0])
        cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                            vision_start_token_id=ids["<|vision_start|>"],
                            vision_end_token_id=ids["<|vision_end|>"], video_token_id=ids["<|image_pad|>"],
                            tie_word_embeddings=False)
        improc = Qwen2VLImageProcessor(min_pixels=64 * 64, max_pixels=64 * 64, patch_size=16, merge_size=2,
                                       temporal_patch_size=2)
        Proc = Qwen3VLProcessor
    model = AutoModelForImageTextToText.from_config(cfg)
    model.save_pretrained(path)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    improc.save_pretrained(path)
    try:  # the full processor needs a video processor (torchvision); the loader falls back without it
        Proc(image_processor=improc, tokenizer=tok, chat_template=CHAT_TEMPLATE).save_pretrained(path)
    except Exception:  # noqa: BLE001
        pass
    return path


def make_image(path: Path, seed: int = 0, size: int = 56):
    from PIL import Image

    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path)
    return path


def write_jsonl_task(folder: Path, n: int = 3, with_images: bool = True, size: int = 56):
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        rec = {"prompt": PROMPTS[i % len(PROMPTS)], "reference": CORPUS[i % len(CORPUS)]}
        if with_images:
            (folder / "img").mkdir(exist_ok=True)
            make_image(folder / "img" / f"{i}.png", seed=i, size=size)
            rec["image"] = f"img/{i}.png"
        lines.append(json.dumps(rec))
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def make_perturbed(path: Path, src: Path, noise: float = 0.5, seed: int = 1):
    """A weaker draft: the model at ``src`` with Gaussian noise (relative scale ``noise``) added to
    every weight matrix, so it agrees with the target often but not always."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(src)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.add_(torch.randn(p.shape, generator=g) * p.std() * noise)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(src).save_pretrained(path)
    return Path(path)
