"""Hooks for other decoders: Hugging Face assisted generation / prompt lookup, GLANCE's
on_round dictionaries, and the dflash_generate calling convention."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("transformers")

from _logger_fixtures import PROMPTS, make_llama, make_perturbed  # noqa: E402

from glance_law import io as gio  # noqa: E402
from glance_law.errors import GlanceError  # noqa: E402
from glance_log.hooks import GlanceOnRound, dflash_hook, hf_generate_hook  # noqa: E402
from glance_log.record import RoundLogger  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("hooks")
    tgt = make_llama(root / "t", init=1.0)
    dft = make_perturbed(root / "d", tgt, noise=0.3)
    return (AutoModelForCausalLM.from_pretrained(tgt).eval(), AutoModelForCausalLM.from_pretrained(dft).eval(),
            AutoTokenizer.from_pretrained(tgt))


@pytest.mark.parametrize("mode", ["assistant", "prompt_lookup"])
def test_hf_generate_hook(models, tmp_path, mode):
    model, draft, tok = models
    ids = tok(PROMPTS[0] + " " + PROMPTS[0], return_tensors="pt").input_ids
    kw = {"assistant_model": draft} if mode == "assistant" else {"prompt_lookup_num_tokens": 4}
    lg = RoundLogger(tmp_path, run_id="hf", task="docvqa", tokenizer=tok)
    with hf_generate_hook(model, lg, "p0", reference=[PROMPTS[0]]) as rec:
        out = model.generate(ids, max_new_tokens=24, do_sample=False, **kw)
        rec.finish(out)
    lg.close()
    assert not hasattr(model, "_glance_hooked")                   # the patch is removed
    plain = model.generate(ids, max_new_tokens=24, do_sample=False)
    assert torch.equal(out, plain)
    rounds = gio.read_logs(tmp_path).frame.sort_values("round")
    gen = out[0, ids.shape[1]:].tolist()
    committed = [t for c in rounds["committed"] for t in c]
    assert committed == gen                                         # every generated token, once
    assert set(rounds["drafter"]) == {"two_model" if mode == "assistant" else "pld"}
    assert (rounds["accepted"] > 0).any()
    with torch.no_grad():
        logits = model(out).logits[0].float()
    n0 = ids.shape[1]
    done = 0
    for _, r in rounds.iterrows():
        lp = torch.log_softmax(logits[n0 - 1 + done], -1)            # the root row of this round
        assert r["root_entropy"] == pytest.approx(float(-(lp.exp() * lp).sum()), abs=1e-3)
        L, a = int(r["horizon"]), int(r["accepted"])
        m = r["match"]
        lead = int(np.argmin(np.append(m == 1, False)))             # leading run of matches
        if done + a + 1 < len(gen):                                 # rounds not cut by max_new_tokens
            assert lead == a or (lead > a and a == L)
        assert all((m[j] == 1) == (r["target_rank"][j] == 0) for j in range(L) if m[j] >= 0)
        done += a + 1
    prompts = gio.read_logs(tmp_path, kind="prompts").frame
    assert prompts["new_tokens"].iloc[0] == len(gen) and prompts["rounds"].iloc[0] == len(rounds)


def test_audit_places_hf_rounds_by_the_hooks_convention(models, tmp_path):
    """HF's round 0 is verified with the prefill and commits output token 0 (glance-log's rounds
    never hold it): the audit tells the convention from the log and (a) rebuilds the whole output
    from the rounds, (b) gives a divergence planted at every output index the min_path_margin of
    the round that committed it, found here by walking the committed lists."""
    from glance_law.audit import audit

    model, draft, tok = models
    ids = tok(PROMPTS[0] + " " + PROMPTS[0], return_tensors="pt").input_ids
    lg = RoundLogger(tmp_path, run_id="hf", task="docvqa", tokenizer=tok)
    with hf_generate_hook(model, lg, "p0") as rec:
        out = model.generate(ids, max_new_tokens=24, do_sample=False, assistant_model=draft)
        rec.finish(out)
    lg.close()
    rounds = gio.read_logs(tmp_path).frame.sort_values("round")
    prompt = gio.read_logs(tmp_path, kind="prompts").frame.iloc[0]
    gen = out[0, ids.shape[1]:].tolist()
    assert len(rounds) >= 2 and rounds["position"].iloc[1] == len(rounds["committed"].iloc[0]) - 1
    owner = [r for r, c in enumerate(rounds["committed"]) for _ in c]          # output index -> round
    assert len(owner) == len(gen)
    spec = dict(run_id="hf", task="docvqa", condition="matched", drafter=str(prompt["drafter"]),
                new_tokens=len(gen), tokens=None)
    ar = dict(run_id="ar", task="docvqa", condition="matched", drafter="ar")
    res = audit(pd.DataFrame([dict(spec, prompt_id="p0"), dict(ar, prompt_id="p0", tokens=gen)]), rounds)
    assert res.frame.iloc[0].audited == 1 and res.frame.iloc[0].verdict == "lossless"
    P, R = [], []
    for i in range(len(gen)):
        planted = gen[:i] + [(gen[i] + 1) % model.config.vocab_size] + gen[i + 1:]
        P += [dict(spec, prompt_id=f"p{i}"), dict(ar, prompt_id=f"p{i}", tokens=planted)]
        R.append(rounds.assign(prompt_id=f"p{i}"))
    d = audit(pd.DataFrame(P), pd.concat(R)).divergence_frame.set_index("prompt_id")
    margins = rounds["min_path_margin"].to_numpy()
    for i in range(len(gen)):
        assert d.loc[f"p{i}", "first_divergence"] == i
        assert d.loc[f"p{i}", "margin"] == pytest.approx(margins[owner[i]])


def test_glance_on_round_dicts(tmp_path):
    rec = GlanceOnRound(tmp_path / "a", task="chartqa", horizon=15)
    rec({"entropy": 0.5, "accept_len": 3, "tree_size": 63, "prompt_id": "q1"})
    rec({"entropy": torch.tensor(0.1), "tau": 6, "tree_size": 63, "prompt_id": "q1"})
    rec({"H": 1.2, "accepted": 0, "block_size": 16, "prompt_id": "q2"})
    rec.close()
    f = gio.read_logs(tmp_path / "a").frame
    assert f["accepted"].tolist() == [3, 5, 0] and f["horizon"].tolist() == [15, 15, 15]
    assert f["round"].tolist() == [0, 1, 2] and f["budget"].iloc[0] == 63
    assert f["root_entropy"].iloc[1] == pytest.approx(0.1)
    with pytest.raises(GlanceError, match="lacks entropy"):
        GlanceOnRound(tmp_path / "b", task="chartqa")({"entropy": 0.3, "accepted": 1})
    src = tmp_path / "g.jsonl"
    src.write_text("\n".join(json.dumps({"entropy": 0.2 * i, "accepted": i % 4, "tree_size": 63,
                                         "round": i, "prompt_id": "x"}) for i in range(5)))
    assert GlanceOnRound.convert_jsonl([src], tmp_path / "c", task="docvqa", horizon=15) == 5
    assert len(gio.read_logs(tmp_path / "c").frame) == 5


class _FakeDFlash:
    """The calling convention of a DFlash draft model: ``compute_logits(hidden, lm_head)`` returns
    (1, L, V) logits for the block after the root. Here the 'draft' knows the target's greedy
    continuation and proposes it at each offset with probability 0.7 (else a wrong token)."""

    def __init__(self, greedy, vocab, L, seed=0):
        self.greedy, self.V, self.L = greedy, vocab, L
        self.rng = np.random.default_rng(seed)
        self.start = 0

    def compute_logits(self, hidden, head):
        lg = torch.randn(1, self.L, self.V, generator=torch.Generator().manual_seed(int(self.rng.integers(1e9))))
        for j in range(self.L):
            i = self.start + j + 1
            tok = self.greedy[i] if i < len(self.greedy) and self.rng.random() < 0.7 else int(self.rng.integers(self.V))
            lg[0, j, tok] += 20.0
        return lg


def _fake_dflash_generate(model, target, input_ids, max_new_tokens):
    """The loop of dflash_generate (greedy), with the target called as the package calls it."""
    from transformers import DynamicCache

    L = model.L
    cache = DynamicCache(config=target.config)
    n_in = input_ids.shape[1]
    out = target(input_ids, position_ids=torch.arange(n_in)[None], past_key_values=cache, use_cache=True,
                 logits_to_keep=1)
    seq = input_ids[0].tolist() + [int(out.logits[0, -1].argmax())]
    start = n_in
    while start + 1 < n_in + max_new_tokens:
        model.start = start - n_in
        dl = model.compute_logits(None, None)
        block = torch.tensor([[seq[start]] + dl[0].argmax(-1).tolist()])
        out = target(block, position_ids=torch.arange(start, start + L + 1)[None], past_key_values=cache,
                     use_cache=True)
        post = out.logits[0].argmax(-1)
        a = int((block[0, 1:] == post[:-1]).long().cumprod(0).sum())
        seq = seq[:start + 1] + block[0, 1:a + 1].tolist() + [int(post[a])]
        start += a + 1
        cache.crop(-(cache.get_seq_length() - start))
    return torch.tensor([seq[:n_in + max_new_tokens]])


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")   # dflash's own spelling
def test_dflash_hook_on_the_dflash_calling_convention(models, tmp_path):
    model, _, tok = models
    ids = tok(PROMPTS[1], return_tensors="pt").input_ids
    seq = ids
    with torch.no_grad():                                  # plain greedy, no eos stop (dflash's loop has none here)
        for _ in range(40):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    greedy = seq[0, ids.shape[1]:].tolist()
    fake = _FakeDFlash(greedy, model.config.vocab_size, L=5)
    lg = RoundLogger(tmp_path, run_id="df", task="docvqa", tokenizer=tok)
    with torch.no_grad(), dflash_hook(model, fake, lg, "p0", branch_k=4) as h:
        out = _fake_dflash_generate(fake, model, ids, max_new_tokens=30)
        h.finish(out, num_input_tokens=ids.shape[1])
    lg.close()
    assert out[0, ids.shape[1]:].tolist() == greedy[:30]
    f = gio.read_logs(tmp_path).frame
    assert (f["horizon"] == 5).all() and (f["accepted"] > 0).any() and (f["draft_passes"] == 1).all()
    for _, r in f.iterrows():
        m = np.append(r["match"] == 1, False)
        lead = int(np.argmin(m))
        assert lead == r["accepted"] or (r["match"][lead] == -1)
        assert r["position"] + r["accepted"] + 1 <= 30 + 5
