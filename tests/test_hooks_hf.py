"""hf_generate_hook on every candidate generator transformers (the pinned 5.24) ships, each on
tiny models built from configs: assistant model, prompt lookup, early exit, an assistant with
its own tokenizer (greedy, and the universal sampler), MTP, DFlash and the Gemma 4 assistant.
Each checks the drafter label, the draft passes and horizon, that no round is the prefill
alone, that the output is greedy decoding's (sampling: not comparable), and the rounds against
a plain forward pass of the target over prompt + output."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from _logger_fixtures import CORPUS, PROMPTS, make_llama, make_perturbed  # noqa: E402
from glance_log.hooks import GENERATORS, hf_generate_hook  # noqa: E402
from glance_log.record import RoundLogger  # noqa: E402

from glance_law import io as gio  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
NEW = 24


def _tokenizer(path, vocab, extra=()):
    """A byte-level BPE tokenizer trained on the fixtures' corpus (and ``extra`` texts) with
    ``vocab`` entries."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([*CORPUS, *extra], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(path)
    return fast


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("hf")
    t = make_llama(root / "t", family="qwen3", layers=4, init=1.0)
    d = make_perturbed(root / "d", t, noise=0.3)
    return (AutoModelForCausalLM.from_pretrained(t).eval(), AutoModelForCausalLM.from_pretrained(d).eval(),
            AutoTokenizer.from_pretrained(t), root)


def _ids(tok):
    return tok(PROMPTS[0] + " " + PROMPTS[0], return_tensors="pt").input_ids


def _run(model, tok, tmp_path, ids, **kw):
    lg = RoundLogger(tmp_path, run_id="hf", task="docvqa", tokenizer=tok)
    with hf_generate_hook(model, lg, "p0") as rec:
        out = model.generate(ids, max_new_tokens=NEW, **kw)
        rec.finish(out)
    lg.close()
    assert not hasattr(model, "_glance_hooked") and "_get_candidate_generator" not in vars(model)
    rounds = gio.read_logs(tmp_path).frame.sort_values("round").reset_index(drop=True)
    return out, rounds, gio.read_logs(tmp_path, kind="prompts").frame.iloc[0]


def _check(model, ids, out, rounds, prompt, *, label, passes, fused, greedy=True, kw=None, min_accept=True):
    """``fused``: the first round is verified together with the prefill (it commits output token 0);
    otherwise the prefill is no round and token 0 is in none. ``passes``: "L" (one per drafted
    token), "one", "none", ">=1" (an assistant with its own tokenizer)."""
    n0 = ids.shape[1]
    gen = out[0, n0:].tolist()
    if greedy:                                                         # unchanged by drafting
        extra = {k: v for k, v in (kw or {}).items() if k != "do_sample"}
        assert torch.equal(out, model.generate(ids, max_new_tokens=NEW, do_sample=False, **extra))
    assert set(rounds["drafter"]) == {label} and prompt["drafter"] == label
    committed = [t for c in rounds["committed"] for t in c]
    assert committed == (gen if fused else gen[1:])                    # every output token once
    assert prompt["new_tokens"] == len(gen) and prompt["rounds"] == len(rounds)
    assert rounds["horizon"].iloc[0] > 0                               # no round of the prefill alone
    assert (np.isnan(prompt["prefill_ms"])) == fused
    L = rounds["horizon"].to_numpy()
    P = rounds["draft_passes"].to_numpy()
    want = {"L": L, "one": (L > 0).astype(int), "none": np.zeros_like(L)}.get(passes)
    if want is not None:
        assert (P == want).all(), (P, L)
    else:
        assert ((P >= 1) == (L > 0)).all()
    assert (rounds["budget"] == rounds["horizon"]).all() and (rounds["accepted"] <= L).all()
    if min_accept:
        assert (rounds["accepted"] > 0).any()
    pos = rounds["position"].to_numpy()
    with torch.no_grad():
        logits = model(out).logits[0].float()
    done = 0 if fused else 1                                           # output tokens before the round
    for i, r in rounds.iterrows():
        assert pos[i] == max(done - 1, 0)                              # the root: output token done - 1
        lp = torch.log_softmax(logits[n0 - 1 + done], -1)               # the row after the root
        assert r["root_entropy"] == pytest.approx(float(-(lp.exp() * lp).sum()), abs=1e-3)
        top2 = torch.topk(logits[n0 - 1 + done], 2).values
        assert r["root_margin"] == pytest.approx(float(top2[0] - top2[1]), abs=1e-3)
        a, h = int(r["accepted"]), int(r["horizon"])
        m = np.asarray(r["match"])
        assert len(m) == h
        if greedy:                                                     # sampled drafts need not be top-1
            assert (m[:a] == 1).all()
        if greedy and a < h and done + a + 1 < len(gen):              # the first rejection, inside the output
            assert m[a] == 0 and r["target_rank"][a] >= 1
        assert all((m[j] == 1) == (r["target_rank"][j] == 0) for j in range(h) if m[j] >= 0)
        done += len(r["committed"])
    return gen


def test_generator_table_covers_what_transformers_ships():
    """Every CandidateGenerator subclass in transformers.generation.candidate_generator has a label."""
    import inspect

    from transformers.generation import candidate_generator as cg

    shipped = {n for n, c in inspect.getmembers(cg, inspect.isclass)
               if issubclass(c, cg.CandidateGenerator) and c is not cg.CandidateGenerator}
    assert shipped == set(GENERATORS)


def test_assistant_model(qwen, tmp_path):
    model, draft, tok, _ = qwen
    ids = _ids(tok)
    kw = dict(assistant_model=draft, do_sample=False)
    out, rounds, prompt = _run(model, tok, tmp_path, ids, **kw)
    _check(model, ids, out, rounds, prompt, label="two_model", passes="L", fused=True)


def test_prompt_lookup(qwen, tmp_path):
    model, _, tok, _ = qwen
    ids = _ids(tok)
    out, rounds, prompt = _run(model, tok, tmp_path, ids, prompt_lookup_num_tokens=4, do_sample=False)
    _check(model, ids, out, rounds, prompt, label="pld", passes="none", fused=rounds["position"].iloc[0] == 0
           and len(rounds["committed"].iloc[0]) and rounds["horizon"].iloc[0] > 0 and np.isnan(prompt["prefill_ms"]),
           min_accept=False)
    assert (np.asarray([q for q in rounds["topk_logq"] for q in q]) == 0).all()       # point masses


def test_prompt_lookup_without_a_match_in_the_prompt(qwen, tmp_path):
    """No n-gram of the prompt recurs: the first iteration drafts nothing - it is the prefill,
    not a horizon-0 round (before: round 0 with horizon 0)."""
    model, _, tok, _ = qwen
    ids = tok("a cat sits", return_tensors="pt").input_ids
    assert len(set(ids[0].tolist())) == ids.shape[1]
    out, rounds, prompt = _run(model, tok, tmp_path, ids, prompt_lookup_num_tokens=4, do_sample=False)
    assert not np.isnan(prompt["prefill_ms"]) and rounds["position"].iloc[0] == 0
    gen = out[0, ids.shape[1]:].tolist()
    assert [t for c in rounds["committed"] for t in c] == gen[1:]


def test_early_exit(qwen, tmp_path):
    model, _, tok, _ = qwen
    ids = _ids(tok)
    kw = dict(assistant_early_exit=3, do_sample=False)
    out, rounds, prompt = _run(model, tok, tmp_path, ids, **kw)
    _check(model, ids, out, rounds, prompt, label="early_exit-3", passes="L", fused=True, min_accept=False)


@pytest.fixture(scope="module")
def xtok_draft(qwen):
    """An assistant with its own tokenizer (a BPE trained on more text: other merges, other ids,
    and tokens the target's vocabulary lacks - with a vocabulary that is a subset of the target's,
    transformers 5.24's universal generator fails: AssistantToTargetTranslator never sets
    assistant_overlap_token_ids)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    _, _, _, root = qwen
    atok = _tokenizer(root / "a", 320, ["zebra quokka xylophone jazz fjord", "vexing wizards jump quickly"])
    torch.manual_seed(3)
    cfg = AutoConfig.for_model("llama", vocab_size=len(atok), hidden_size=64, intermediate_size=128,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               initializer_range=1.0, bos_token_id=atok.bos_token_id, eos_token_id=atok.eos_token_id)
    return AutoModelForCausalLM.from_config(cfg).eval(), atok


def test_assistant_with_its_own_tokenizer(qwen, xtok_draft, tmp_path):
    model, _, tok, _ = qwen
    draft, atok = xtok_draft
    ids = _ids(tok)
    assert tok.get_vocab() != atok.get_vocab()
    kw = dict(assistant_model=draft, tokenizer=tok, assistant_tokenizer=atok, do_sample=False)
    out, rounds, prompt = _run(model, tok, tmp_path, ids, **kw)
    _check(model, ids, out, rounds, prompt, label="two_model_xtok", passes=">=1", fused=True, kw=kw,
           min_accept=False)
    assert np.isnan(np.asarray([q for q in rounds["topk_logq"] for q in q])).all()  # no drafter marginals


def test_universal_assisted_generation(qwen, xtok_draft, tmp_path):
    """The universal (cross-vocabulary) generator runs only when sampling: no greedy comparison,
    the rounds still commit the output and their root rows are the target's raw logits."""
    model, _, tok, _ = qwen
    draft, atok = xtok_draft
    ids = _ids(tok)
    torch.manual_seed(0)
    kw = dict(assistant_model=draft, tokenizer=tok, assistant_tokenizer=atok, do_sample=True, top_k=0, top_p=1.0,
              temperature=1.0)
    out, rounds, prompt = _run(model, tok, tmp_path, ids, **kw)
    _check(model, ids, out, rounds, prompt, label="two_model_usd", passes=">=1", fused=True, greedy=False,
           min_accept=False)


def test_mtp(tmp_path, monkeypatch):
    """MTP on a tiny Mellum (one MTP layer, the only count Mellum allows). The MTP weights come from
    the checkpoint in real use; here the MTP layers are built from the config (the loader
    MtpModel.from_pretrained is replaced by the constructor; the generator and MtpModel's forward
    are transformers' own)."""
    import transformers.modeling_layers as ML
    from _logger_fixtures import make_tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = make_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    cfg = AutoConfig.for_model("mellum", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                               moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_mtp_layers=1,
                               mtp_layer_types=["full_attention"], initializer_range=1.0,
                               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, max_position_embeddings=512)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    monkeypatch.setattr(ML.MtpModel, "from_pretrained", classmethod(
        lambda cls, main, device_map=None, **k: cls(main, main.config.get_text_config().num_mtp_layers).eval()))
    ids = _ids(tok)
    out, rounds, prompt = _run(model, tok, tmp_path / "log", ids, use_mtp=True, do_sample=False)
    _check(model, ids, out, rounds, prompt, label="mtp", passes="L", fused=False, min_accept=False)
    assert set(rounds["horizon"]) <= {0, 1}


def test_dflash(qwen, tmp_path):
    """transformers' own DFlash generator (speculation_type="dflash") with a tiny DFlash assistant
    (MuseGlimmerAssistantModel) from a config: one pass per block."""
    from transformers.models.muse_glimmer_assistant.configuration_muse_glimmer_assistant import (
        MuseGlimmerAssistantConfig,
    )
    from transformers.models.muse_glimmer_assistant.modeling_muse_glimmer_assistant import (
        MuseGlimmerAssistantModel,
    )

    model, _, tok, _ = qwen
    c = model.config
    ids = _ids(tok)
    # the assistant's attention/MLP outputs scaled down: it then mostly proposes the target head's top
    # token for the mask embedding, and the mask token is picked so that this is the most frequent
    # token of the greedy output (some blocks partly accepted, others rejected at once)
    greedy = model.generate(ids, max_new_tokens=NEW, do_sample=False)[0, ids.shape[1]:]
    with torch.no_grad():
        top = model.lm_head(model.get_input_embeddings().weight).argmax(-1)
    fav = int(torch.bincount(greedy).argmax())
    mask = int(torch.nonzero(top == fav)[0, 0]) if (top == fav).any() else 0
    torch.manual_seed(0)
    acfg = MuseGlimmerAssistantConfig(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=c.head_dim, vocab_size=c.vocab_size, block_size=5, mask_token_id=mask,
                                      target_layer_ids=[1, 2], bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                      sliding_window=64)
    am = MuseGlimmerAssistantModel(acfg).eval()
    with torch.no_grad():
        for name, p in am.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(0.02)
    kw = dict(assistant_model=am, speculation_type="dflash", do_sample=False)
    out, rounds, prompt = _run(model, tok, tmp_path, ids, **kw)
    _check(model, ids, out, rounds, prompt, label="block", passes="one", fused=False)
    assert set(rounds["horizon"].iloc[:-1]) == {4}           # block_size - 1 after the anchor, in one pass


def test_gemma4_assistant(tmp_path):
    """The Gemma 4 assistant (SinglePositionMultiTokenCandidateGenerator) on a tiny Gemma 4 text
    target, both from configs."""
    from _logger_fixtures import make_tokenizer
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4ForCausalLM
    from transformers.models.gemma4_assistant.configuration_gemma4_assistant import (
        Gemma4AssistantConfig,
    )
    from transformers.models.gemma4_assistant.modeling_gemma4_assistant import (
        Gemma4AssistantForCausalLM,
    )

    tok = make_tokenizer(tmp_path / "tok")
    kw = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              head_dim=16, vocab_size_per_layer_input=0, hidden_size_per_layer_input=0, initializer_range=0.3,
              sliding_window=64, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=0,
              max_position_embeddings=512, num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])
    torch.manual_seed(0)
    model = Gemma4ForCausalLM(Gemma4TextConfig(**kw)).eval()
    assistant = Gemma4AssistantForCausalLM(Gemma4AssistantConfig(
        text_config=dict(model_type="gemma4_text", **kw), backbone_hidden_size=64, num_centroids=16,
        centroid_intermediate_top_k=4)).eval()
    assistant.generation_config.num_assistant_tokens = 4
    ids = _ids(tok)
    kw = dict(assistant_model=assistant, do_sample=False)
    out, rounds, prompt = _run(model, tok, tmp_path / "log", ids, **kw)
    _check(model, ids, out, rounds, prompt, label="gemma4_assistant", passes="L", fused=False, kw=kw,
           min_accept=False)


def test_hook_removed_when_generate_raises(qwen, tmp_path):
    model, draft, tok, _ = qwen

    def boom(*a):
        raise RuntimeError("assistant")
    h = draft.register_forward_pre_hook(boom)
    lg = RoundLogger(tmp_path, run_id="hf", task="docvqa", tokenizer=tok)
    try:
        with pytest.raises(RuntimeError, match="assistant"), hf_generate_hook(model, lg, "p0"):
            model.generate(_ids(tok), assistant_model=draft, max_new_tokens=8, do_sample=False)
    finally:
        h.remove()
    assert not hasattr(model, "_glance_hooked") and "_get_candidate_generator" not in vars(model)
