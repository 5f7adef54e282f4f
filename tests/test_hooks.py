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
    from glance_law.evidence.audit import audit

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
    assert f["round"].tolist() == [0, 1, 2] and f["budget"].iloc[0] == 62     # tree_size counts the root
    assert f["root_entropy"].iloc[1] == pytest.approx(0.1)
    assert "pred_entropy" not in f.columns
    rec = GlanceOnRound(tmp_path / "v", task="chartqa", horizon=15, vocab_size=151_936)
    rec({"entropy": 0.5, "accept_len": 3, "pred_entropy": 0.25, "prompt_id": "q1"})
    rec.close()
    v = gio.read_logs(tmp_path / "v")
    assert v.frame["pred_entropy"].iloc[0] == pytest.approx(0.25) and v.files[0].run["vocab_size"] == 151_936
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


def _fake_dflash_generate(model, target, input_ids, max_new_tokens, stop_token_ids=None, legacy=False):
    """The loop of dflash_generate (greedy), with the target called as the package calls it: full
    blocks (the final one may run past max_new_tokens: its tokens past the limit are cut from the
    output), a stop at the first stop token committed (the rest of its block cut), the output cut at
    max_new_tokens. ``legacy``: the older loop (``while start < max_length``, stop tokens checked
    only after a block), which verifies one more block after the output is complete (its root is
    the output's last token) or when the prefill's token is a stop token. ``model.trace`` records
    (root index in the output, dflash's acceptance length) per verify block."""
    from transformers import DynamicCache

    L = model.L
    cache = DynamicCache(config=target.config) if hasattr(target, "config") else None
    n_in = input_ids.shape[1]
    max_length = n_in + max_new_tokens
    stop = set(stop_token_ids or ())
    out = target(input_ids, position_ids=torch.arange(n_in)[None], past_key_values=cache, use_cache=True,
                 logits_to_keep=1)
    seq = input_ids[0].tolist() + [int(out.logits[0, -1].argmax())]
    start = n_in
    stopped = not legacy and seq[start] in stop
    model.trace = []
    while (start < max_length if legacy else start + 1 < max_length) and not stopped:
        model.start = start - n_in
        if hasattr(model, "compute_logits"):
            dl = model.compute_logits(None, None)
        else:                                  # z-lab/dflash main: the target's head on the draft's hidden states
            dl = target.lm_head(model.hidden(start - n_in))
        block = torch.tensor([[seq[start]] + dl[0].argmax(-1).tolist()])
        out = target(block, position_ids=torch.arange(start, start + L + 1)[None], past_key_values=cache,
                     use_cache=True)
        post = out.logits[0].argmax(-1)
        a = int((block[0, 1:] == post[:-1]).long().cumprod(0).sum())
        model.trace.append((start - n_in, a))
        seq = seq[:start + 1] + block[0, 1:a + 1].tolist() + [int(post[a])]
        hit = next((i for i, t in enumerate(seq[n_in:]) if t in stop), None)
        if hit is not None:
            seq, stopped = seq[:n_in + hit + 1], True
        start += a + 1
        if cache is not None:
            cache.crop(-(cache.get_seq_length() - start))
    return torch.tensor([seq[:max_length]])


def _run_dflash(target, draft, ids, tmp_path, tok=None, branch_k=4, **kw):
    lg = RoundLogger(tmp_path, run_id="df", task="docvqa", tokenizer=tok)
    with torch.no_grad(), dflash_hook(target, draft, lg, "p0", branch_k=branch_k) as h:
        out = _fake_dflash_generate(draft, target, ids, **kw)
        h.finish(out, num_input_tokens=ids.shape[1], stop_token_ids=kw.get("stop_token_ids"))
    lg.close()
    f = gio.read_logs(tmp_path).frame.sort_values("round") if h.logged else None
    return out[0, ids.shape[1]:].tolist(), f, gio.read_logs(tmp_path, kind="prompts").frame.iloc[0], h


def _expected_rounds(trace, n_out, L):
    """Brute force of glance-log's rule for the rounds of an output of n_out tokens: a verify block
    whose root is the output's last token (or past it) adds nothing and is not a round; the others
    accept min(a, tokens left) and commit the bonus only when it is in the output, else end the
    output with horizon = accepted. Returns (position, accepted, horizon, n_committed) per round."""
    rows = []
    for p, a in trace:
        if p >= n_out - 1:
            continue
        left = n_out - 1 - p                               # output tokens after the root
        if a + 1 <= left:
            rows.append((p, a, L, a + 1))
        else:
            rows.append((p, left, left, left))
    return rows


def _check_dflash_rows(f, prompt, gen, trace, L):
    exp = _expected_rounds(trace, len(gen), L)
    got = [] if f is None else list(zip(f["position"], f["accepted"], f["horizon"], f["committed"].map(len)))
    assert got == exp
    committed = [] if f is None else [t for c in f["committed"] for t in c]
    assert committed == gen[1:]                            # token 0 (the prefill's) is in no round
    assert prompt["new_tokens"] == len(gen) and prompt["rounds"] == len(exp)
    assert list(prompt["tokens"]) == gen
    if f is not None:
        assert (f["match"].map(len) == f["horizon"]).all() and (f["budget"] == L).all()
        assert (f["round"] == np.arange(len(f))).all()


class _ScriptedTarget(torch.nn.Module):
    """A target whose greedy output is ``G`` (the row at position q predicts ``G[q - n_in + 1]``),
    each row one-hot with logit ``margin(k) = 8 - k/4`` on the token it predicts (output index k),
    called as dflash_generate calls its target."""

    def __init__(self, G, n_in, vocab=50):
        super().__init__()
        self.G, self.n_in, self.V = G, n_in, vocab
        self.w = torch.nn.Parameter(torch.zeros(1))

    @staticmethod
    def margin(k):
        return 8.0 - 0.25 * k

    def forward(self, input_ids, position_ids=None, **kw):
        from types import SimpleNamespace

        lg = torch.zeros(1, input_ids.shape[1], self.V)
        for i, q in enumerate(position_ids[0].tolist()):
            k = q - self.n_in + 1
            lg[0, i, self.G[k] if 0 <= k < len(self.G) else 0] = self.margin(k)
        return SimpleNamespace(logits=lg)


class _ScriptedDraft:
    """A DFlash draft whose proposals are scripted block by block (one token per offset)."""

    def __init__(self, scripts, vocab=50):
        self.scripts, self.V, self.L = scripts, vocab, len(scripts[0])
        self.n = 0

    def compute_logits(self, hidden, head):
        lg = torch.zeros(1, self.L, self.V)
        for j, t in enumerate(self.scripts[min(self.n, len(self.scripts) - 1)]):
            lg[0, j, t] = 10.0
        self.n += 1
        return lg


# output 20, 21, ...; block 0 (root 20) proposes 21 22 49 24: accepts 2, bonus 23; block 1 (root 23)
# proposes 24..27: accepts all 4, bonus 28. (max_new_tokens, stop ids) -> (position, accepted,
# horizon, committed) per logged round and the stop reason, by hand.
_GOLDEN = {
    "limit_in_block": (7, None, [(0, 2, 4, [21, 22, 23]), (3, 3, 3, [24, 25, 26])], "max_new_tokens"),
    "stop_in_block": (12, [25], [(0, 2, 4, [21, 22, 23]), (3, 2, 2, [24, 25])], "eos"),
    "stop_is_bonus": (12, [23], [(0, 2, 4, [21, 22, 23])], "eos"),
    "limit_at_bonus": (4, None, [(0, 2, 4, [21, 22, 23])], "max_new_tokens"),
    "full_blocks": (9, None, [(0, 2, 4, [21, 22, 23]), (3, 4, 4, [24, 25, 26, 27, 28])], "max_new_tokens"),
    "stop_first_token": (12, [20], [], "eos"),
    "one_token": (1, None, [], "max_new_tokens"),
}


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("case", sorted(_GOLDEN))
def test_dflash_hook_golden_output_end(tmp_path, case, legacy):
    """The final block runs past max_new_tokens or holds the stop token: the rounds commit exactly
    the output (hand-computed rows), the last one without a bonus and with horizon = accepted, its
    min_path_margin over the rows that produced its committed tokens only, and stop_reason names
    what stopped it. (Before the fix: accepted 4, 5 tokens committed, stop_reason max_new_tokens.)"""
    max_new, stop, rows, reason = _GOLDEN[case]
    G = list(range(20, 40))
    ids = torch.tensor([[1, 2, 3]])
    draft = _ScriptedDraft([[21, 22, 49, 24], [24, 25, 26, 27], [29, 30, 31, 32]])
    target = _ScriptedTarget(G, n_in=3)
    gen, f, prompt, h = _run_dflash(target, draft, ids, tmp_path, max_new_tokens=max_new, stop_token_ids=stop,
                                    legacy=legacy)
    assert prompt["stop_reason"] == reason
    assert gen == G[:len(gen)] and len(gen) == (G.index(stop[0]) + 1 if stop else max_new)
    got = [] if f is None else [(p, a, L, list(c)) for p, a, L, c in
                                zip(f["position"], f["accepted"], f["horizon"], f["committed"])]
    assert got == rows
    assert h.logged == len(rows) and h.skipped == len(draft.trace) - len(rows)
    if legacy and case in ("limit_at_bonus", "stop_first_token", "one_token"):
        assert h.skipped == 1                              # the block verified after the output was complete
    _check_dflash_rows(f, prompt, gen, draft.trace, 4)
    for r in ([] if f is None else f.itertuples()):
        k = range(r.position + 1, r.position + len(r.committed) + 1)   # output indices it committed
        assert r.min_path_margin == pytest.approx(min(_ScriptedTarget.margin(i) for i in k))
        assert list(r.match) == [1] * r.accepted + ([0] if r.accepted < r.horizon else []) + \
            [-1 if r.position + j > len(gen) - 1 else int(draft.scripts[r.round][j - 1] == G[r.position + j])
             for j in range(r.accepted + 2, r.horizon + 1)]
        assert len(r.topk_logq) == 4 * r.horizon


def test_dflash_hook_refuses_an_output_it_did_not_verify(tmp_path):
    """An output the verified blocks did not produce (a sampled run, another call's output): one
    error naming the round, no rows written."""
    G = list(range(20, 40))
    ids = torch.tensor([[1, 2, 3]])
    draft = _ScriptedDraft([[21, 22, 49, 24], [24, 25, 26, 27]])
    lg = RoundLogger(tmp_path, run_id="df", task="docvqa")
    with torch.no_grad(), dflash_hook(_ScriptedTarget(G, n_in=3), draft, lg, "p0") as h:
        out = _fake_dflash_generate(draft, h.target, ids, max_new_tokens=8)
        out[0, -2] = 49
        with pytest.raises(GlanceError, match="verify block 1 .* does not match the output"):
            h.finish(out, num_input_tokens=3)
    lg.close()
    assert lg.n_rounds == 0 and lg.n_prompts == 0


@pytest.fixture(scope="module")
def dflash_greedy(models):
    model, _, tok = models
    ids = tok(PROMPTS[1], return_tensors="pt").input_ids
    seq = ids
    with torch.no_grad():                                  # plain greedy, no stop
        for _ in range(48):
            seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    return ids, seq[0, ids.shape[1]:].tolist()


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")   # dflash's own spelling
def test_dflash_hook_on_the_dflash_calling_convention(models, dflash_greedy, tmp_path):
    model, _, tok = models
    ids, greedy = dflash_greedy
    fake = _FakeDFlash(greedy, model.config.vocab_size, L=5)
    gen, f, prompt, _ = _run_dflash(model, fake, ids, tmp_path, tok=tok, max_new_tokens=30)
    assert gen == greedy[:30]
    assert (f["horizon"] <= 5).all() and (f["accepted"] > 0).any() and (f["draft_passes"] == 1).all()
    _check_dflash_rows(f, prompt, gen, fake.trace, 5)
    assert prompt["stop_reason"] == "max_new_tokens"
    for _, r in f.iterrows():
        m = np.append(r["match"] == 1, False)
        lead = int(np.argmin(m))
        assert lead == r["accepted"] or (r["match"][lead] == -1)
    with torch.no_grad():
        logits = model(torch.tensor([ids[0].tolist() + gen])).logits[0].float()
    for _, r in f.iterrows():                              # the root row: output token `position` + 1
        lp = torch.log_softmax(logits[ids.shape[1] + r["position"]], -1)
        assert r["root_entropy"] == pytest.approx(float(-(lp.exp() * lp).sum()), abs=1e-3)


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")
@pytest.mark.parametrize("end", ["max_new_tokens", "stop_token"])
def test_dflash_hook_final_block_cut_by_the_output(models, dflash_greedy, tmp_path, end):
    """The auditor's cases on the tiny Llama: (i) max_new_tokens falls inside a block's accepted
    run (the block overshoots the limit), (ii) a stop token is accepted mid-block. The last round
    accepts up to the output's end, commits no bonus, has horizon = accepted; the rounds commit the
    output from token 1 on; stop_reason says which stopped it."""
    model, _, tok = models
    ids, greedy = dflash_greedy
    probe = _FakeDFlash(greedy, model.config.vocab_size, L=5)
    _fake_dflash_generate(probe, model, ids, max_new_tokens=40)                # the blocks, unstopped
    if end == "max_new_tokens":                        # a block whose accepted run crosses the limit
        p, a = next((p, a) for p, a in probe.trace if a >= 2 and p > 0)
        kw, cut = dict(max_new_tokens=p + a), p + a - 1                        # one accepted token too many
    else:                                              # a stop token accepted mid-block, first seen there
        p, a, k = next((p, a, k) for p, a in probe.trace if a >= 2 and p > 0
                       for k in range(p + 1, p + a) if greedy[k] not in greedy[:k])
        kw, cut = dict(max_new_tokens=40, stop_token_ids=[greedy[k]]), k
    fake = _FakeDFlash(greedy, model.config.vocab_size, L=5)
    gen, f, prompt, h = _run_dflash(model, fake, ids, tmp_path, tok=tok, **kw)
    assert gen == greedy[:cut + 1]
    assert fake.trace[-1] == (p, a) and p + a + 1 > cut     # the final block runs past the output
    last = f.iloc[-1]
    assert (last["position"], last["accepted"], last["horizon"]) == (p, cut - p, cut - p)
    assert list(last["committed"]) == greedy[p + 1:cut + 1] and list(last["match"]) == [1] * (cut - p)
    assert prompt["stop_reason"] == end.replace("stop_token", "eos")
    _check_dflash_rows(f, prompt, gen, fake.trace, 5)


class _HeadlessDraft:
    """A draft in the shape of z-lab/dflash main (44947fb): no compute_logits, no propose; the loop
    calls ``target.lm_head`` on its hidden states (here random, seeded per block)."""

    def __init__(self, hidden, L, seed=0):
        self.H, self.L, self.seed = hidden, L, seed
        self.blocks = []

    def hidden(self, start):
        h = torch.randn(1, self.L, self.H, generator=torch.Generator().manual_seed(self.seed + start))
        self.blocks.append(h)
        return h


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated")
def test_dflash_hook_reads_the_target_head_when_the_draft_has_no_compute_logits(models, dflash_greedy, tmp_path):
    """The lm_head path: the draft logits are what the target's head returned outside the target's
    own forward (the verify calls go through the same head and must not count)."""
    model, _, tok = models
    ids, greedy = dflash_greedy
    draft = _HeadlessDraft(model.config.hidden_size, L=4)
    lg = RoundLogger(tmp_path, run_id="df", task="docvqa", tokenizer=tok)
    with torch.no_grad(), dflash_hook(model, draft, lg, "p0", branch_k=4) as h:
        out = _fake_dflash_generate(draft, model, ids, max_new_tokens=20)
        assert h.mode == "lm_head" and len(model.lm_head._forward_hooks) == 1
    h.finish(out, num_input_tokens=ids.shape[1])
    lg.close()
    assert not model.lm_head._forward_hooks and not model._forward_hooks and not model._forward_pre_hooks
    f = gio.read_logs(tmp_path).frame.sort_values("round")
    gen = out[0, ids.shape[1]:].tolist()
    assert gen == greedy[:20]
    _check_dflash_rows(f, gio.read_logs(tmp_path, kind="prompts").frame.iloc[0], gen, draft.trace, 4)
    with torch.no_grad():
        for (_, r), hid in zip(f.iterrows(), draft.blocks):
            L = int(r["horizon"])
            want = torch.topk(torch.log_softmax(model.lm_head(hid)[0].float(), -1), 4).values[:L].numpy()
            assert np.allclose(np.asarray(r["topk_logq"]).reshape(L, 4), want, atol=1e-5)


def test_glance_on_round_imports_no_torch():
    """GLANCE's dictionaries need no torch: the hooks package imports its engines lazily."""
    import subprocess
    import sys

    code = ("import sys; from glance_log.hooks import GlanceOnRound; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-500:]
