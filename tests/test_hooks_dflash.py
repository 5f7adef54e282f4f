"""dflash_hook against the real ``dflash`` package (PyPI ``dflash``, z-lab/dflash): a tiny Qwen3
target and tiny DFlash / DFlash 2 draft models built from configs, the package's own
``dflash_generate`` under the hook. Checks: the output is greedy decoding, the rounds commit
exactly the output, the per-round columns match a plain forward pass, and nothing stays
attached to the models after any exception."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
dmodel = pytest.importorskip("dflash.model", reason="the dflash extra: pip install --no-deps dflash==0.1.0")

from _logger_fixtures import PROMPTS, make_llama  # noqa: E402

from glance_law import io as gio  # noqa: E402
from glance_log.hooks import dflash_hook  # noqa: E402
from glance_log.record import RoundLogger  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")   # dflash's own spelling

BLOCK = 5          # block size: L = 4 drafted tokens per verify block


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_llama(tmp_path_factory.mktemp("dflash") / "t", family="qwen3", layers=4, init=1.0)
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _greedy(model, ids, n):
    seq = ids
    with torch.no_grad():
        for _ in range(n):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    return seq[0, ids.shape[1]:].tolist()


@pytest.fixture(scope="module")
def greedy(target):
    model, tok = target
    ids = tok(PROMPTS[0], return_tensors="pt").input_ids
    return ids, _greedy(model, ids, 48)


def _make_draft(model, greedy_tokens, kind="dflash", scale=0.02):
    """A DFlash draft from a config, its attention/MLP outputs scaled down so that it mostly
    proposes the target head's top token for the mask embedding; the mask token is chosen so
    that this token is the most frequent one of the target's greedy output (some blocks are then
    partly accepted, the others rejected at once)."""
    from transformers import Qwen3Config

    c = model.config
    with torch.no_grad():
        fav = np.bincount(greedy_tokens).argmax()
        top = model.lm_head(model.get_input_embeddings().weight).argmax(-1)
        mask = int(torch.nonzero(top == int(fav))[0, 0]) if (top == int(fav)).any() else 0
    extra = {}
    cls = dmodel.DFlashDraftModel
    if kind == "dflash2":
        cls = dmodel.DFlash2DraftModel
        extra = dict(selector_rank=8, selector_top_k=4, conv_kernel_size=3, conv_group_size=16)
    cfg = Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=c.head_dim,
                      num_target_layers=c.num_hidden_layers,
                      dflash_config={"mask_token_id": mask, "target_layer_ids": [1, 2], "block_size": BLOCK, **extra})
    torch.manual_seed(0)
    draft = cls(cfg).eval()
    with torch.no_grad():
        for layer in draft.layers:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)
            for conv in (layer.attention_conv, layer.mlp_conv):
                if conv is not None:                    # DFlash 2: near-identity convolutions
                    conv.base_kernel.zero_()
                    conv.base_kernel[:, 0] = 1.0
                    conv.kernel_projection.weight.mul_(scale)
        if kind == "dflash2":                           # a weak pairwise term in the selector
            draft.candidate_selector.hidden_projection.weight.mul_(scale)
    return draft


def _attached(target, draft):
    """Everything a hook could have left on the models."""
    head = target.lm_head
    return {"target_fwd": len(target._forward_hooks), "target_pre": len(target._forward_pre_hooks),
            "head_fwd": len(head._forward_hooks), "patched": sorted(set(vars(draft)) & {"compute_logits", "propose"}),
            "flag": getattr(target, "_glance_hooked", None)}


CLEAN = {"target_fwd": 0, "target_pre": 0, "head_fwd": 0, "patched": [], "flag": None}


def _run(target, draft, ids, tmp_path, tok, **kw):
    lg = RoundLogger(tmp_path, run_id="df", task="docvqa", tokenizer=tok)
    with dflash_hook(target, draft, lg, "p0", branch_k=4) as h:
        out = dmodel.dflash_generate(draft, target, ids, temperature=0.0, **kw)
    h.finish(out, num_input_tokens=ids.shape[1], stop_token_ids=kw.get("stop_token_ids"))
    lg.close()
    f = gio.read_logs(tmp_path).frame.sort_values("round") if h.logged else None
    return out[0, ids.shape[1]:].tolist(), f, gio.read_logs(tmp_path, kind="prompts").frame.iloc[0], h


@pytest.mark.parametrize("kind", ["dflash", "dflash2"])
@pytest.mark.parametrize("end", ["max_new_tokens", "stop_token"])
def test_dflash_hook_on_the_real_dflash_generate(target, greedy, tmp_path, kind, end):
    model, tok = target
    ids, G = greedy
    draft = _make_draft(model, G, kind)
    if end == "max_new_tokens":
        kw, n = dict(max_new_tokens=30, stop_token_ids=None), 30
    else:                                      # a token first seen mid-output stops it
        k = next(k for k in range(12, 40) if G[k] not in G[:k])
        kw, n = dict(max_new_tokens=40, stop_token_ids=[G[k]]), k + 1
    gen, f, prompt, h = _run(model, draft, ids, tmp_path, tok, **kw)
    assert _attached(model, draft) == CLEAN
    assert h.mode == ("propose" if kind == "dflash2" else "compute_logits")
    assert {x.run["vocab_size"] for x in gio.read_logs(tmp_path).files} == {model.config.vocab_size}
    assert gen == G[:n]                                            # greedy decoding, unchanged
    assert prompt["stop_reason"] == end.replace("stop_token", "eos") and prompt["new_tokens"] == n
    # the rounds commit exactly the output, token 0 (the prefill's) in none of them
    assert [t for c in f["committed"] for t in c] == gen[1:]
    pos = f["position"].to_numpy()
    assert pos[0] == 0 and (np.diff(pos) == f["committed"].map(len).to_numpy()[:-1]).all()
    assert (f["round"] == np.arange(len(f))).all() and prompt["rounds"] == len(f)
    assert (f["draft_passes"] == 1).all() and (f["drafter"] == "block").all()
    assert (f["budget"] <= BLOCK - 1).all() and (f["horizon"] <= f["budget"]).all()
    assert (f["accepted"] > 0).any() and (f["accepted"] < f["budget"]).any()
    # per-round columns against a plain forward pass over prompt + output
    with torch.no_grad():
        logits = model(torch.tensor([ids[0].tolist() + gen])).logits[0].float()
    n0 = ids.shape[1]
    for _, r in f.iterrows():
        p, a, L = int(r["position"]), int(r["accepted"]), int(r["horizon"])
        lp = torch.log_softmax(logits[n0 - 1 + p + 1], -1)       # the row that predicts output token p + 1
        assert r["root_entropy"] == pytest.approx(float(-(lp.exp() * lp).sum()), abs=1e-3)
        lq = torch.log_softmax(logits[n0 - 1 + p], -1)           # the row that chose the root (token p)
        assert r["pred_entropy"] == pytest.approx(float(-(lq.exp() * lq).sum()), abs=1e-3)
        top2 = torch.topk(logits[n0 + p], 2).values
        assert r["root_margin"] == pytest.approx(float(top2[0] - top2[1]), abs=1e-3)
        m = np.asarray(r["match"])
        assert len(m) == L and (m[:a] == 1).all()                 # the accepted run matches the target
        if a < L:
            assert m[a] in (0, -1)                                 # then the first rejection (or the end)
        if a < L and p + a + 1 < n:
            assert m[a] == 0 and r["target_rank"][a] >= 1
        assert all(r["target_rank"][j] == 0 for j in range(a))
        if kind == "dflash2":                                      # point mass on the proposal
            assert (np.asarray(r["topk_logq"]) == 0).all()
        else:                                                      # the draft's top-k rows, sorted
            q = np.asarray(r["topk_logq"]).reshape(L, 4)
            assert (np.diff(q, axis=1) <= 1e-6).all() and (q <= 0).all()


def test_dflash_hook_topk_is_the_drafts_compute_logits(target, greedy, tmp_path):
    """topk_logq of every round equals the top-k log-softmax of what the draft's compute_logits
    returned for that block (recorded here independently of the hook)."""
    model, tok = target
    ids, G = greedy
    draft = _make_draft(model, G)
    seen = []
    handle = draft.norm.register_forward_hook(lambda m, a, out: seen.append(out))   # the draft's last hidden
    try:
        gen, f, _, _ = _run(model, draft, ids, tmp_path, tok, max_new_tokens=24, stop_token_ids=None)
    finally:
        handle.remove()
    assert len(seen) == len(f)                                     # one draft pass per round
    for (_, r), hid in zip(f.iterrows(), seen):
        L = int(r["horizon"])
        with torch.no_grad():
            dl = draft.compute_logits(hid[:, 1 - (int(r["budget"]) + 1):, :], model.lm_head)[0]
        want = torch.topk(torch.log_softmax(dl.float(), -1), 4).values[:L].numpy()
        assert np.allclose(np.asarray(r["topk_logq"]).reshape(L, 4), want, atol=1e-4)


class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize("where", ["enter", "generate", "callback"])
def test_dflash_hook_leaves_nothing_attached_after_an_exception(target, greedy, tmp_path, where):
    """An exception in __enter__, inside dflash_generate, or inside the hook's own callback: the
    target and the draft carry no hook and no patch afterwards, and a new hooked run works."""
    model, tok = target
    ids, G = greedy
    draft = _make_draft(model, G)
    lg = RoundLogger(tmp_path / "a", run_id="df", task="docvqa", tokenizer=tok)
    if where == "enter":
        def refuse(*a, **k):
            raise _Boom("begin_prompt")
        lg.begin_prompt = refuse
        with pytest.raises(_Boom):
            with dflash_hook(model, draft, lg, "p0"):
                pass
    elif where == "generate":
        calls = []

        def fail_second(mod, args, kwargs):
            calls.append(1)
            if len(calls) == 2:
                raise _Boom("draft forward")
        handle = draft.register_forward_pre_hook(fail_second, with_kwargs=True)
        try:
            with pytest.raises(_Boom), dflash_hook(model, draft, lg, "p0"):
                dmodel.dflash_generate(draft, model, ids, max_new_tokens=20, stop_token_ids=None, temperature=0.0)
        finally:
            handle.remove()
        assert len(calls) == 2
    else:
        with pytest.raises(_Boom), dflash_hook(model, draft, lg, "p0") as h:
            class _Timer:
                n = 0

                def mark(self):
                    _Timer.n += 1
                    if _Timer.n == 2:                              # the first verify block
                        raise _Boom("callback")
                    return 0.0
            h.timer = _Timer()
            dmodel.dflash_generate(draft, model, ids, max_new_tokens=20, stop_token_ids=None, temperature=0.0)
    assert _attached(model, draft) == CLEAN
    gen, f, _, _ = _run(model, draft, ids, tmp_path / "b", tok, max_new_tokens=20, stop_token_ids=None)
    assert gen == G[:20] and [t for c in f["committed"] for t in c] == gen[1:]
    assert _attached(model, draft) == CLEAN


def test_dflash_hook_refuses_a_draft_it_cannot_read(target, greedy, tmp_path):
    """Neither propose() nor compute_logits() and a target without an output head: one clear
    error, nothing attached."""
    from glance_law.errors import GlanceError

    model, tok = target

    class _Headless(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def get_output_embeddings(self):
            return None

    t = _Headless()
    lg = RoundLogger(tmp_path, run_id="df", task="docvqa", tokenizer=tok)
    with pytest.raises(GlanceError, match="neither propose"):
        with dflash_hook(t, object(), lg, "p0"):
            pass
    assert not t._forward_hooks and not t._forward_pre_hooks and not hasattr(t, "_glance_hooked")
