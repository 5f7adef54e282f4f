"""hf_generate_hook on every candidate generator transformers (the pinned 5.24) ships, each on
tiny models built from configs: assistant model, prompt lookup, early exit, an assistant with
its own tokenizer (greedy, and the universal sampler), MTP, DFlash and the Gemma 4 assistant.
Each checks the drafter label, the draft passes and horizon, that no round is the prefill
alone, that the output is greedy decoding's (sampling: not comparable), and the rounds against
a plain forward pass of the target over prompt + output."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("transformers")

from _logger_fixtures import CORPUS, PROMPTS, make_llama, make_perturbed  # noqa: E402

from glance_law import io as gio  # noqa: E402
from glance_log.hooks import GENERATORS, hf_generate_hook  # noqa: E402
from glance_log.record import RoundLogger  # noqa: E402

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
    assert not model._forward_hooks and not model._forward_pre_hooks
    logs = gio.read_logs(tmp_path)
    assert {f.run["vocab_size"] for f in logs.files} == {model.get_output_embeddings().weight.shape[0]}
    rounds = logs.frame.sort_values("round").reset_index(drop=True)
    return out, rounds, gio.read_logs(tmp_path, kind="prompts").frame.iloc[0]


def _entropy(row) -> float:
    lp = torch.log_softmax(row, -1)
    return float(-(lp.exp() * lp).sum())


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
        if done == 0:                        # the root is the prompt's last token: HF shows no row that chose it
            assert pd.isna(r["pred_entropy"])
        else:                                # the row that chose the root (output token done - 1)
            assert r["pred_entropy"] == pytest.approx(_entropy(logits[n0 - 2 + done]), abs=1e-3)
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


@pytest.mark.parametrize("end", ["max_new_tokens", "eos"])
def test_plain_generate_is_the_ar_arm(qwen, tmp_path, end):
    """generate without an assistant: every output token after the first is a round of horizon 0
    (drafter ar), its statistics those of a plain forward pass; the prefill is the prompt's."""
    model, _, tok, _ = qwen
    ids = _ids(tok)
    n0 = ids.shape[1]
    G = model.generate(ids, max_new_tokens=NEW, do_sample=False)[0, n0:].tolist()
    kw = {"do_sample": False}
    if end == "eos":                                   # a token first seen mid-output stops it
        k = next(k for k in range(4, NEW) if G[k] not in G[:k])
        kw["eos_token_id"] = G[k]
    out, rounds, prompt = _run(model, tok, tmp_path, ids, **kw)
    gen = out[0, n0:].tolist()
    assert gen == (G if end == "max_new_tokens" else G[:k + 1])
    assert set(rounds["drafter"]) == {"ar"} and prompt["drafter"] == "ar"
    assert len(rounds) == len(gen) - 1 == prompt["rounds"] and prompt["new_tokens"] == len(gen)
    assert [t for c in rounds["committed"] for t in c] == gen[1:]
    assert (rounds["position"] == np.arange(len(rounds))).all()
    for c in ("horizon", "accepted", "budget", "draft_passes"):
        assert (rounds[c] == 0).all()
    assert prompt["prefill_ms"] > 0 and prompt["decode_ms"] > 0
    assert (rounds["verify_ms"] > 0).all() and (rounds["round_ms"] >= rounds["verify_ms"]).all()
    with torch.no_grad():
        logits = model(out).logits[0].float()
    for r, row in rounds.iterrows():                 # root: output token r; it was chosen by the row before
        assert row["root_entropy"] == pytest.approx(_entropy(logits[n0 + r]), abs=1e-3)
        assert row["pred_entropy"] == pytest.approx(_entropy(logits[n0 + r - 1]), abs=1e-3)
        top2 = torch.topk(logits[n0 + r], 2).values
        assert row["root_margin"] == pytest.approx(float(top2[0] - top2[1]), abs=1e-3)


def test_the_ar_arm_is_the_timing_baseline(qwen, tmp_path):
    """Plain generate and prompt lookup through the hook on the same prompts: the timing ledger
    pairs them (the report's timing section needs the ar arm)."""
    from glance_law.evidence.timing import timing_ledger

    model, _, tok, _ = qwen
    for run_id, kw in (("ar", {}), ("pld", {"prompt_lookup_num_tokens": 4})):
        lg = RoundLogger(tmp_path, run_id=run_id, task="docvqa", tokenizer=tok)
        for i, p in enumerate(PROMPTS[:3]):
            ids = tok(p + " " + p, return_tensors="pt").input_ids
            with hf_generate_hook(model, lg, f"p{i}") as rec:
                rec.finish(model.generate(ids, max_new_tokens=NEW, do_sample=False, **kw))
        lg.close()
    P = gio.read_logs(tmp_path, kind="prompts").frame
    assert sorted(P["drafter"].astype(str).unique()) == ["ar", "pld"]
    res = timing_ledger(P.loc[P["drafter"] == "ar"], P.loc[P["drafter"] == "pld"], n_boot=200).frame
    row = res.loc[res["task"] == "docvqa"].iloc[0]
    assert row["prompts"] == 3 and np.isfinite(row["speedup"]) and row["speedup"] > 0


@pytest.mark.parametrize("kw", [{"prompt_lookup_num_tokens": 4}, {"assistant": True}, {}],
                         ids=["pld", "assistant", "ar"])
def test_audit_against_plain_greedy(qwen, tmp_path, kw):
    """audit=True: the output equals plain greedy decoding (greedy_match, first_divergence -1); a
    reference that differs at index 3 is named there, with its margin when the margins are given."""
    model, draft, tok, _ = qwen
    ids = _ids(tok)
    kw = {"assistant_model": draft} if kw.get("assistant") else kw
    for i, audit in enumerate((True, None, None)):
        lg = RoundLogger(tmp_path / str(i), run_id="hf", task="docvqa", tokenizer=tok)
        with hf_generate_hook(model, lg, "p0", audit=audit if audit else False) as rec:
            out = model.generate(ids, max_new_tokens=NEW, do_sample=False, **kw)
            gen = out[0, ids.shape[1]:].tolist()
            wrong = gen[:3] + [(gen[3] + 1) % model.config.vocab_size] + gen[4:]
            rec.audit = audit if audit else (wrong if i == 1 else (wrong, [0.5] * len(gen)))
            rec.finish(out)
        lg.close()
        assert not model._forward_hooks and "_get_candidate_generator" not in vars(model)
        row = gio.read_logs(tmp_path / str(i), kind="prompts").frame.iloc[0]
        rounds = gio.read_logs(tmp_path / str(i)).frame
        if i == 0:
            assert bool(row["greedy_match"]) and row["first_divergence"] == -1
            assert [t for c in rounds.sort_values("round")["committed"] for t in c][-3:] == gen[-3:]
        else:
            assert not bool(row["greedy_match"]) and row["first_divergence"] == 3
            assert pd.isna(row["divergence_margin"]) if i == 1 else row["divergence_margin"] == pytest.approx(0.5)


def test_audit_names_a_sampled_divergence(qwen, tmp_path):
    """A sampled output audited against greedy decoding: the first index where it differs from an
    independent greedy run, with that run's top-2 margin there."""
    model, _, tok, _ = qwen
    ids = _ids(tok)
    n0 = ids.shape[1]
    greedy = model.generate(ids, max_new_tokens=NEW, do_sample=False)[0, n0:].tolist()
    lg = RoundLogger(tmp_path, run_id="hf", task="docvqa", tokenizer=tok)
    torch.manual_seed(1)
    with hf_generate_hook(model, lg, "p0", audit=True) as rec:
        out = model.generate(ids, max_new_tokens=NEW, do_sample=True, top_k=0, top_p=1.0, temperature=1.5)
        rec.finish(out)
    lg.close()
    gen = out[0, n0:].tolist()
    first = next(i for i, (a, b) in enumerate(zip(gen, greedy)) if a != b)
    row = gio.read_logs(tmp_path, kind="prompts").frame.iloc[0]
    assert not bool(row["greedy_match"]) and row["first_divergence"] == first
    with torch.no_grad():
        top2 = torch.topk(model(torch.tensor([ids[0].tolist() + greedy])).logits[0, n0 - 1 + first], 2).values
    assert row["divergence_margin"] == pytest.approx(float(top2[0] - top2[1]), abs=1e-3)


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


def _upstream_runs_or_xfail(model, ids, kw):
    """transformers 5.25's assisted generation with an assistant tokenizer fails on its own (no
    hook installed): a round whose re-tokenised assistant input adds no token calls the assistant
    with an empty input (RuntimeError "cannot reshape tensor of 0 elements" in the attention).
    The hook is tested wherever the package itself decodes this case (5.24 does)."""
    import transformers

    try:
        model.generate(ids, max_new_tokens=NEW, **kw)
    except RuntimeError as e:
        pytest.xfail(f"transformers {transformers.__version__} fails here without the hook: {e}")


def test_assistant_with_its_own_tokenizer(qwen, xtok_draft, tmp_path):
    model, _, tok, _ = qwen
    draft, atok = xtok_draft
    ids = _ids(tok)
    assert tok.get_vocab() != atok.get_vocab()
    kw = dict(assistant_model=draft, tokenizer=tok, assistant_tokenizer=atok, do_sample=False)
    _upstream_runs_or_xfail(model, ids, kw)
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
