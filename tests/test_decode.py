"""The reference decoder: losslessness against the model's own greedy decoding, on tiny
models loaded from disk (causal LMs and Qwen2-VL / Qwen3-VL with an image), every drafter
at budgets 1, 15 and 63; cache gather; teacher-forced replay; sampling preserves the
target's distribution."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from _logger_fixtures import (  # noqa: E402
    PROMPTS,
    make_block_head,
    make_image,
    make_llama,
    make_perturbed,
    make_qwen2_vl,
)

from glance_log.decode import Forced, decode, greedy_reference  # noqa: E402
from glance_log.drafters import make_drafter  # noqa: E402
from glance_log.models import load_target  # noqa: E402

torch.set_num_threads(1)
DEVICE = os.environ.get("GLANCE_TEST_DEVICE", "cpu")     # benchmarks/gpu_check.sh sets cuda
BUDGETS = (1, 15, 63)
MAX_NEW = 20


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    tgt = make_llama(root / "target", seed=0, init=1.0)       # peaked: repeats, so pld and drafts hit
    other = make_perturbed(root / "draft", tgt)               # a noisy copy: partial agreement
    head = make_block_head(root / "head", tgt, horizon=6)
    return {"target": load_target(tgt, device=DEVICE), "target_path": tgt, "draft": other, "head": head}


def _drafters(m):
    return [("ar", None), ("pld", None), ("block", m["head"]),
            ("two_model", m["target_path"]),   # self-drafting: deep accepted paths, exercises the gather
            ("two_model", m["draft"])]         # a weaker draft: partial acceptance


def test_lossless_causal_lm_every_drafter_and_budget(llama):
    t = llama["target"]
    for q in PROMPTS[:2]:
        pr = t.encode(q)
        ref, _ = greedy_reference(t, pr, MAX_NEW)
        for name, dm in _drafters(llama):
            dr = make_drafter(name, t, draft_model=dm, branch_k=4)
            for b in BUDGETS:
                r = decode(t, dr, pr, budget=b, branch_k=4, max_new_tokens=MAX_NEW)
                assert r.tokens == ref, (name, dm, b, q)
                assert all(0 <= a <= h for a, h in zip(r.accepted, r.horizons))
                assert r.rounds == len(r.accepted)
                assert len(r.tokens) <= MAX_NEW


def test_deep_trees_actually_accept(llama):
    """Guard against a vacuous losslessness test: self-drafting accepts long paths."""
    t = llama["target"]
    dr = make_drafter("two_model", t, draft_model=llama["target_path"], branch_k=4, draft_len=5)
    r = decode(t, dr, t.encode(PROMPTS[0]), budget=15, branch_k=4, max_new_tokens=MAX_NEW)
    assert max(r.accepted) == 5 and r.tau > 3


def test_width_one_chain_and_qwen_families(tmp_path):
    for fam in ("qwen2", "qwen3"):
        p = make_llama(tmp_path / fam, family=fam, init=1.0, seed=3)
        t = load_target(p, device=DEVICE)
        pr = t.encode(PROMPTS[1])
        ref, _ = greedy_reference(t, pr, MAX_NEW)
        dr = make_drafter("two_model", t, draft_model=p, branch_k=1, draft_len=4)
        r = decode(t, dr, pr, budget=63, branch_k=1, max_new_tokens=MAX_NEW)
        assert r.tokens == ref
        assert max(r.horizons) == 4  # a chain: depth = draft length


def test_stops_at_eos(llama):
    t = llama["target"]
    pr = t.encode(PROMPTS[0])
    ref, _ = greedy_reference(t, pr, MAX_NEW)
    eos = ref[5]
    r = decode(t, make_drafter("pld", t), pr, budget=15, max_new_tokens=MAX_NEW, eos_ids=[eos])
    assert r.tokens == ref[:ref.index(eos) + 1] and r.stop_reason == "eos"


@pytest.mark.parametrize("stop", ["eos", "max_new_tokens"])
def test_accepted_stops_where_the_output_stops(llama, stop):
    """A self-drafting round that runs into the end-of-sequence token or the token budget
    accepts nothing past it (a real decoder discards those tokens) and commits no bonus: the
    rounds' committed tokens add up to the output exactly."""
    t = llama["target"]
    pr = t.encode(PROMPTS[0])
    ref, _ = greedy_reference(t, pr, MAX_NEW)
    dr = make_drafter("two_model", t, draft_model=llama["target_path"], branch_k=4, draft_len=5)
    if stop == "eos":
        eos, cap = [ref[7]], MAX_NEW
        want = ref[:ref.index(ref[7]) + 1]
    else:
        eos, cap = [-1], 9
        want = ref[:9]
    r = decode(t, dr, pr, budget=15, branch_k=4, max_new_tokens=cap, eos_ids=eos)
    assert r.tokens == want
    committed = [a + 1 for a in r.accepted]
    ends = len(r.tokens) - 1                              # tokens after the prefill's root
    assert sum(committed) - 1 == ends                     # the last round: no bonus past the end
    assert r.accepted[-1] >= 1                            # the end came inside an accepted run
    assert r.horizons[-1] == r.accepted[-1]               # ... which is the whole proposal that exists
    assert len(r.resolve_stream) == len(r.tokens)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_lossless_vlm_with_image(tmp_path, family):
    p = make_qwen2_vl(tmp_path / family, family=family)
    head = make_block_head(tmp_path / "head", p, horizon=5)
    size = 56 if family == "qwen2_vl" else 64
    t = load_target(p, device=DEVICE)
    for i in range(2 if family == "qwen2_vl" else 1):
        img = make_image(tmp_path / f"{i}.png", seed=i, size=size)
        pr = t.encode(None, image=str(img), question=PROMPTS[i])
        assert "pixel_values" in pr.inputs
        ref, _ = greedy_reference(t, pr, MAX_NEW)
        for name, dm in [("ar", None), ("pld", None), ("block", head), ("two_model", p)]:
            dr = make_drafter(name, t, draft_model=dm, branch_k=4)
            for b in BUDGETS:
                r = decode(t, dr, pr, budget=b, branch_k=4, max_new_tokens=MAX_NEW)
                assert r.tokens == ref, (family, name, b, i)


def test_vlm_positions_matter(tmp_path):
    """The rope delta of the image is what keeps tree tokens exact: dropping it diverges."""
    p = make_qwen2_vl(tmp_path / "vl")
    t = load_target(p, device=DEVICE)
    pr = t.encode(None, image=str(make_image(tmp_path / "i.png")), question=PROMPTS[0])
    ref, _ = greedy_reference(t, pr, MAX_NEW)
    t.prefill(pr, t.new_cache())
    ad = t.adapter
    assert ad.rope_delta is not None and int(ad.rope_delta[0]) != 0
    orig = t.positions
    t.positions = lambda past, depth: (setattr(ad, "rope_delta", None), orig(past, depth))[1]
    r = decode(t, make_drafter("ar", t), pr, budget=1, max_new_tokens=MAX_NEW)
    assert r.tokens != ref


def test_commit_gathers_cache_to_the_path(llama):
    """After a round the cache equals the cache of plain decoding of the committed tokens."""
    t = llama["target"]
    pr = t.encode(PROMPTS[2])
    dr = make_drafter("two_model", t, draft_model=llama["draft"], branch_k=4)
    res = decode(t, dr, pr, budget=15, branch_k=4, max_new_tokens=12)
    # rebuild the cache by one causal pass over prompt + committed tokens except the pending root
    cache_a = t.new_cache()
    t.prefill(pr, cache_a)
    seq = res.resolve_stream[:-1]
    t.extend(cache_a, torch.tensor(seq, device=t.device))
    # and the decoder's own cache after the same rounds, via teacher forcing of the live run
    cache_b = t.new_cache()
    t.prefill(pr, cache_b)
    d = t.device
    logits, _ = t.verify(cache_b, torch.tensor(seq, device=d), torch.arange(len(seq), device=d),
                         torch.ones(len(seq), len(seq), dtype=torch.bool, device=d).tril())
    for la, lb in zip(cache_a.layers, cache_b.layers):
        assert torch.allclose(la.keys, lb.keys, atol=1e-5)
    # gather: keep rows 0, 2, 3 of a 4-token block
    c = t.new_cache()
    t.prefill(pr, c)
    past = t.cache_len(c)
    toks = torch.tensor(seq[:4], device=d)
    t.verify(c, toks, torch.tensor([0, 1, 1, 2], device=d), torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool, device=d))
    k_before = [l.keys.clone() for l in c.layers]
    t.commit(c, past, [0, 2, 3])
    assert t.cache_len(c) == past + 3
    for l, kb in zip(c.layers, k_before):
        assert torch.equal(l.keys[..., past:past + 3, :], kb[..., [past, past + 2, past + 3], :])


def test_teacher_forced_replay_matched_reproduces_live(llama):
    t = llama["target"]
    for name, dm in [("block", llama["head"]), ("two_model", llama["draft"]), ("pld", None)]:
        dr = make_drafter(name, t, draft_model=dm, branch_k=4)
        pr = t.encode(PROMPTS[0])
        live = decode(t, dr, pr, budget=15, branch_k=4, max_new_tokens=MAX_NEW)
        rep = decode(t, dr, pr, budget=15, branch_k=4, max_new_tokens=MAX_NEW,
                     forced=Forced(live.resolve_stream, live.positions))
        assert rep.accepted == live.accepted and rep.positions == live.positions
        assert rep.resolve_stream == live.resolve_stream
        # another prompt's context: same rounds and positions, the target's own acceptances
        other = decode(t, dr, t.encode(PROMPTS[1]), budget=15, branch_k=4, max_new_tokens=MAX_NEW,
                       forced=Forced(live.resolve_stream, live.positions))
        assert other.positions == live.positions and other.resolve_stream == live.resolve_stream
        assert all(0 <= a <= h for a, h in zip(other.accepted, other.horizons))


def test_sampling_preserves_the_target_distribution(llama):
    """Temperature 1: the second generated token (committed through the tree walk) follows the
    target's exact two-step marginal; chi-square over the likely tokens."""
    from scipy import stats

    t = llama["target"]
    pr = t.encode(PROMPTS[1])
    cache = t.new_cache()
    logits, _ = t.prefill(pr, cache)
    p1 = torch.softmax(logits.float(), -1)
    p2 = torch.zeros_like(p1)
    for tok in torch.nonzero(p1 > 1e-4).view(-1).tolist():
        c = t.new_cache()
        t.prefill(pr, c)
        lg, _ = t.extend(c, torch.tensor([tok], device=t.device))
        p2 += p1[tok] * torch.softmax(lg[-1].float(), -1)
    dr = make_drafter("two_model", t, draft_model=llama["target_path"], branch_k=4, draft_len=2)
    g = torch.Generator(device=t.device).manual_seed(0)
    n = 200
    second = [decode(t, dr, pr, budget=15, branch_k=4, max_new_tokens=3, temperature=1.0, generator=g).tokens[1]
              for _ in range(n)]
    expected = p2.double().cpu().numpy() * n
    top = np.argsort(-expected)[:6]
    top = top[expected[top] >= 5]
    obs = np.array([sum(s == k for s in second) for k in top] + [sum(s not in top for s in second)])
    exp = np.append(expected[top], n - expected[top].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3


# -- sliding-window models: the window bites (prompt + output longer than the window) ----------
WINDOW = 6
SLIDING_FAMILIES = {
    # Gemma 3: 2 of every 3 layers slide (a mixed layout: one mask per layer type)
    "gemma3_text": dict(layers=3, sliding_window=WINDOW,
                        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                        query_pre_attn_scalar=16),
    # Mistral: every layer slides (one mask for all)
    "mistral": dict(layers=2, sliding_window=WINDOW),
    # Qwen3 with its window on the upper layers (max_window_layers)
    "qwen3": dict(layers=3, sliding_window=WINDOW, use_sliding_window=True, max_window_layers=1),
}


@pytest.fixture(scope="module", params=sorted(SLIDING_FAMILIES))
def sliding(request, tmp_path_factory):
    fam = request.param
    root = tmp_path_factory.mktemp(f"sliding-{fam}")
    kw = dict(SLIDING_FAMILIES[fam])
    layers = kw.pop("layers")
    tgt = make_llama(root / "target", seed=2, init=1.0, family=fam, layers=layers, **kw)
    other = make_perturbed(root / "draft", tgt, noise=0.3)
    head = make_block_head(root / "head", tgt, horizon=5)
    return {"family": fam, "target": load_target(tgt, device=DEVICE), "target_path": tgt, "draft": other,
            "head": head}


def test_sliding_window_layouts(sliding):
    t = sliding["target"]
    lay = t.adapter.layout
    assert lay.sliding and lay.window == WINDOW
    assert lay.mixed == (sliding["family"] != "mistral")


def test_lossless_sliding_window_every_drafter(sliding):
    """Exact greedy equality with the model's own decoding (its own cache keeps only the window)
    when prompt + output are several windows long, every drafter, chains and trees."""
    t = sliding["target"]
    for q in PROMPTS[:2]:
        pr = t.encode(q)
        assert pr.n_tokens > WINDOW
        ref, _ = greedy_reference(t, pr, 3 * MAX_NEW)
        for name, dm in [("ar", None), ("pld", None), ("block", sliding["head"]),
                         ("two_model", sliding["target_path"]), ("two_model", sliding["draft"])]:
            for b, k in ((1, 4), (15, 4), (63, 4), (8, 1)):
                dr = make_drafter(name, t, draft_model=dm, branch_k=k)
                r = decode(t, dr, pr, budget=b, branch_k=k, max_new_tokens=3 * MAX_NEW)
                assert r.tokens == ref, (sliding["family"], name, dm, b, k, q)
        # the sliding layers end the prompt holding at most their window
        c = t.new_cache()
        t.prefill(pr, c)
        for kind, layer in zip(t.adapter.layout.types, c.layers):
            if kind == "sliding_attention":
                assert layer.keys.shape[-2] == WINDOW - 1 and layer.cumulative_length == pr.n_tokens


def test_sliding_window_self_draft_accepts_deep(sliding):
    """Not vacuous: self-drafting accepts whole drafts across the window boundary."""
    t = sliding["target"]
    dr = make_drafter("two_model", t, draft_model=sliding["target_path"], branch_k=4, draft_len=5)
    r = decode(t, dr, t.encode(PROMPTS[0]), budget=15, branch_k=4, max_new_tokens=3 * MAX_NEW)
    assert max(r.accepted) == 5 and r.tau > 3


def test_sliding_window_mask_follows_each_node(sliding):
    """A node at depth d sees the cached keys less than ``window`` positions behind its OWN position:
    dropping the per-node window (every node sees the root's window) changes the verify logits."""
    from glance_log import adapters

    t = sliding["target"]
    pr = t.encode(PROMPTS[0])
    seq = greedy_reference(t, pr, 8)[0]
    c = t.new_cache()
    t.prefill(pr, c)
    d = t.device
    toks = torch.tensor(seq[:5], device=d)
    depth = torch.arange(5, device=d)
    anc = torch.ones(5, 5, dtype=torch.bool, device=d).tril()
    good, _ = t.verify(c, toks, depth, anc)
    # the same block through plain causal decoding of the library: rows must agree
    ref_c = t.new_cache()
    t.prefill(pr, ref_c)
    for i, tok in enumerate(seq[:5]):
        lg, _ = t.verify(ref_c, torch.tensor([tok], device=d), torch.zeros(1, dtype=torch.long, device=d),
                         torch.ones(1, 1, dtype=torch.bool, device=d))
        t.commit(ref_c, t.cache_len(ref_c) - 1, [0])
        assert torch.allclose(lg[0], good[i], atol=1e-4)
    bad_c = t.new_cache()
    t.prefill(pr, bad_c)
    orig = adapters.tree_mask
    try:
        adapters.tree_mask = lambda past, stored, dep, an, window, dtype: orig(past, stored, torch.zeros_like(dep),
                                                                            an, window, dtype)
        bad, _ = t.verify(bad_c, toks, depth, anc)
    finally:
        adapters.tree_mask = orig
    assert not torch.allclose(bad[1:], good[1:], atol=1e-4)
