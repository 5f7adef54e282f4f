"""The default target's word-level tokenizer (Hugging Face ``tokenizers``).

Text is lower-cased, newlines become the line token ``|``, then the text is split on
whitespace, every punctuation character is its own token and every digit is its own
token, so a value such as ``$574.76`` reads ``$ 5 7 4 . 7 6``: values are copied one
digit at a time from a ten-token alphabet, which a small transformer can learn. The
vocabulary is closed: the suite's lexicon plus digits and punctuation; anything else
maps to ``<unk>``. ``<bos>`` is prepended by the post-processor, ``<eos>`` ends answers.
"""
from __future__ import annotations

import string
from pathlib import Path

SPECIAL = ("<pad>", "<unk>", "<bos>", "<eos>")
PAD, UNK, BOS, EOS = range(4)


def _pre_tokenizer():
    from tokenizers import pre_tokenizers as pt

    return pt.Sequence([pt.WhitespaceSplit(), pt.Punctuation(behavior="isolated"),
                        pt.Digits(individual_digits=True)])


def _normalizer():
    from tokenizers import normalizers as nz

    return nz.Sequence([nz.Lowercase(), nz.Replace("\n", " | ")])


def vocabulary(words) -> list[str]:
    """Special tokens, digits, punctuation, then the pre-tokenised pieces of ``words`` (sorted)."""
    pre, norm = _pre_tokenizer(), _normalizer()
    pieces = set(string.digits) | set(string.punctuation)
    for w in words:
        pieces.update(p for p, _ in pre.pre_tokenize_str(norm.normalize_str(w)))
    ordered = list(SPECIAL) + sorted(pieces)
    return list(dict.fromkeys(ordered))


def build_tokenizer(words):
    """A ``tokenizers.Tokenizer`` over :func:`vocabulary` (``words``)."""
    from tokenizers import Tokenizer, models, processors

    vocab = {tok: i for i, tok in enumerate(vocabulary(words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = _normalizer()
    tok.pre_tokenizer = _pre_tokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS)])
    return tok


def save_hf_tokenizer(tok, path) -> None:
    """Write tokenizer.json + tokenizer_config.json so ``AutoTokenizer.from_pretrained(path)`` loads it."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>", model_max_length=512,
                                   clean_up_tokenization_spaces=False)
    Path(path).mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))


def suite_tokenizer():
    """The tokenizer over the embedded suite's lexicon."""
    from .. import suite

    return build_tokenizer(suite.lexicon())
