"""The early_exit drafter (the target's first k decoder layers + its final norm and LM head):
greedy equality of the tree decoder with it, chain and tree, on tiny Llama and Qwen3 configs
(Gemma 3 with a sliding window: expected to fail until the decoder supports sliding layers);
its offset-1 and offset-2 rows against a direct computation from ``output_hidden_states``;
``draft_passes`` against the partial passes actually run; the label and run id per exit layer;
the argument checks; and the Hugging Face hook's label and run metadata for
``assistant_early_exit`` (real assisted generation)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from _logger_fixtures import PROMPTS, make_image, make_llama, make_qwen2_vl, make_tokenizer  # noqa: E402

from glance_law import io as gio  # noqa: E402
from glance_law.errors import GlanceError  # noqa: E402
from glance_log.cli import main  # noqa: E402
from glance_log.decode import decode, greedy_reference  # noqa: E402
from glance_log.drafters import DraftState, make_drafter  # noqa: E402
from glance_log.models import load_target  # noqa: E402
from glance_log.record import RoundLogger  # noqa: E402

torch.set_num_threads(1)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
DEVICE = os.environ.get("GLANCE_TEST_DEVICE", "cpu")
MAX_NEW = 20
SHAPES = {"chain": dict(budget=63, branch_k=1), "tree": dict(budget=16, branch_k=4)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("ee")
    return {fam: make_llama(root / fam, family=fam, layers=4, init=1.0, seed=5) for fam in ("llama", "qwen3")}


def make_gemma3(path, layers: int = 4, window: int = 6, seed: int = 0):
    """A tiny Gemma 3 text model whose sliding window is shorter than prompt + output."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = make_tokenizer(path)
    torch.manual_seed(seed)
    types = ["sliding_attention", "sliding_attention", "full_attention"] * layers
    cfg = AutoConfig.for_model("gemma3_text", vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                               num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               sliding_window=window, layer_types=types[:layers], max_position_embeddings=1024,
                               initializer_range=1.0, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                               pad_token_id=0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    return path


def _lossless(path, exit_layers=(1, 3)):
    t = load_target(path, device=DEVICE)
    acc = 0
    for q in PROMPTS[:2]:
        pr = t.encode(q)
        ref, _ = greedy_reference(t, pr, MAX_NEW)
        for k in exit_layers:
            for shape, kw in SHAPES.items():
                dr = make_drafter("early_exit", t, exit_layer=k, branch_k=kw["branch_k"])
                r = decode(t, dr, pr, max_new_tokens=MAX_NEW, **kw)
                assert r.tokens == ref, (path.name, k, shape, q)
                assert max(r.horizons) == 5                      # the default horizon
                acc += sum(r.accepted)
    assert acc > 0                                               # drafts are accepted: not vacuous
    return t


@pytest.mark.parametrize("fam", ["llama", "qwen3"])
def test_lossless_chain_and_tree(models, fam):
    t = _lossless(models[fam])
    assert t.text_config.num_hidden_layers == 4                  # the config is restored


def test_lossless_against_generate(models):
    """The same outputs as transformers' own greedy generate (not only the reference loop)."""
    t = load_target(models["qwen3"], device=DEVICE)
    pr = t.encode(PROMPTS[0])
    ids = torch.tensor([pr.prompt_ids], device=t.device)
    gen = t.model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)[0, ids.shape[1]:].tolist()
    eos = set(t.eos_ids)
    gen = gen[:next((i + 1 for i, x in enumerate(gen) if x in eos), len(gen))]
    for kw in SHAPES.values():
        r = decode(t, make_drafter("early_exit", t, exit_layer=2, branch_k=kw["branch_k"]), pr,
                   max_new_tokens=MAX_NEW, **kw)
        assert r.tokens == gen


def test_lossless_vlm_with_image(tmp_path):
    """A Qwen2-VL target (2 text layers), whose language model loops over every layer (not
    ``layers[: num_hidden_layers]``): it exits after layer 1; the drafter's prefill runs the
    image through the vision tower again and the M-RoPE delta is unchanged."""
    t = load_target(make_qwen2_vl(tmp_path / "vl"), device=DEVICE)
    pr = t.encode(None, image=str(make_image(tmp_path / "0.png", seed=0, size=56)), question=PROMPTS[0])
    ref, _ = greedy_reference(t, pr, MAX_NEW)
    for kw in SHAPES.values():
        r = decode(t, make_drafter("early_exit", t, exit_layer=1, branch_k=kw["branch_k"]), pr,
                   max_new_tokens=MAX_NEW, **kw)
        assert r.tokens == ref
    assert t.text_config.num_hidden_layers == 2


def test_lossless_gemma3_sliding_window(tmp_path):
    path = make_gemma3(tmp_path / "gemma3")
    t = load_target(path, device=DEVICE)
    assert t.text_config.sliding_window < len(t.encode(PROMPTS[0]).prompt_ids) + MAX_NEW
    _lossless(path, exit_layers=(1, 2))


def _direct_rows(t, ids, k):
    """log-softmax of the final norm + LM head applied to the input of layer k at the last position."""
    with torch.no_grad():
        out = t.model(input_ids=torch.tensor([ids], device=t.device), output_hidden_states=True)
        h = out.hidden_states[k][0, -1]
        return torch.log_softmax(t.model.lm_head(t.model.get_decoder().norm(h)).float(), -1)


@pytest.mark.parametrize("fam", ["llama", "qwen3"])
def test_rows_are_the_first_k_layers(models, fam):
    t = load_target(models[fam], device=DEVICE)
    pr = t.encode(PROMPTS[1])
    cache = t.new_cache()
    logits, hidden = t.prefill(pr, cache)
    root = int(torch.argmax(logits))
    for k in (1, 2, 3):
        dr = make_drafter("early_exit", t, exit_layer=k, branch_k=4, draft_len=3)
        dr.start(t, pr)
        prop = dr.propose(DraftState(root=root, root_dev=torch.tensor(root), stream=[root],
                                     prompt_ids=pr.prompt_ids, hidden=hidden, round=0))
        chain = pr.prompt_ids + [root]
        for j in range(2):                                       # offsets 1 and 2, along its own greedy chain
            want = _direct_rows(t, chain, k)
            top = torch.topk(want, 4)
            assert prop.ids[j].tolist() == top.indices.tolist(), (k, j)
            assert torch.allclose(prop.logq[j], top.values, atol=1e-4)
            assert torch.allclose(prop.full_logp[j], want, atol=1e-4)
            chain = chain + [int(prop.ids[j, 0])]
        full = _direct_rows(t, pr.prompt_ids + [root], 4)        # the full model's row differs from layer k's
        assert not torch.allclose(prop.full_logp[0], full, atol=1e-3)
        assert prop.passes == 3 + 1                              # horizon + the prompt's prefill
    assert t.text_config.num_hidden_layers == 4


def test_draft_passes_are_the_partial_passes_run(models, tmp_path):
    t = load_target(models["llama"], device=DEVICE)
    layers = t.model.get_decoder().layers
    calls = {"first": 0, "last": 0}
    hooks = [layers[0].register_forward_pre_hook(lambda *_: calls.__setitem__("first", calls["first"] + 1)),
             layers[-1].register_forward_pre_hook(lambda *_: calls.__setitem__("last", calls["last"] + 1))]
    try:
        lg = RoundLogger(tmp_path, run_id="r", task="docvqa", tokenizer=t.tokenizer, drafter="early_exit-2")
        lg.begin_prompt("p0", [PROMPTS[0]])
        dr = make_drafter("early_exit", t, exit_layer=2, branch_k=4, draft_len=4)
        r = decode(t, dr, t.encode(PROMPTS[0]), budget=16, branch_k=4, max_new_tokens=MAX_NEW, callbacks=[lg])
        lg.close()
    finally:
        for h in hooks:
            h.remove()
    rounds = gio.read_logs(tmp_path).frame.sort_values("round")
    passes = rounds["draft_passes"].to_numpy()
    assert passes[0] == 4 + 1 and (passes[1:] == 4).all()
    assert calls["last"] == r.rounds + 1                         # the target: prefill + one pass a round
    assert calls["first"] - calls["last"] == passes.sum()        # every other pass is a partial one


def test_label_run_id_and_metadata_differ_by_exit_layer(models, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "items.jsonl").write_text("".join(json.dumps({"id": f"p{i}", "prompt": q}) + "\n"
                                              for i, q in enumerate(PROMPTS[:2])))
    out = tmp_path / "logs"
    base = ["--task", "docvqa", "--model", str(models["qwen3"]), "--data", str(data), "--n", "2",
            "--drafter", "early_exit", "--max-new-tokens", "8", "--budget", "8", "--branch-k", "2",
            "--out", str(out), "--quiet"]
    for k in (1, 3):
        assert main(base + ["--exit-layer", str(k)]) == 0
    ls = gio.read_logs(out)
    f = ls.frame
    assert set(f["drafter"]) == {"early_exit-1", "early_exit-3"}
    ids = {d: set(f.loc[f["drafter"] == d, "run_id"]) for d in ("early_exit-1", "early_exit-3")}
    assert len(ids["early_exit-1"]) == 1 and ids["early_exit-1"] != ids["early_exit-3"]
    assert all(next(iter(v)).startswith(f"docvqa-{d}-") for d, v in ids.items())
    by_layer = {fi.run["drafter"]["exit_layer"]: fi.run["drafter"] for fi in ls.files}
    assert set(by_layer) == {1, 3}
    assert by_layer[3]["drafter"] == "early_exit-3" and by_layer[3]["num_hidden_layers"] == 4
    assert by_layer[3]["layer_fraction"] == pytest.approx(0.75) and by_layer[1]["layer_fraction"] == 0.25
    assert all(fi.path.split("/")[-1].startswith(f"rounds-{fi.run['run_id']}") for fi in ls.files)
    from glance_law.data.arms import plain_drafter
    assert set(plain_drafter(f["drafter"])) == {"early_exit-1", "early_exit-3"}
    # a second run of the same layer resumes (same run id), it does not pool into the other
    assert main(base + ["--exit-layer", "3"]) == 0
    assert len(gio.read_logs(out).frame) == len(f)


@pytest.mark.parametrize("extra,msg", [([], "needs --exit-layer"), (["--exit-layer", "0"], "between 1 and 3"),
                                       (["--exit-layer", "4"], "between 1 and 3")])
def test_exit_layer_checks(models, tmp_path, capsys, extra, msg):
    rc = main(["--task", "docvqa", "--model", str(models["llama"]), "--drafter", "early_exit", "--n", "1",
               "--out", str(tmp_path / "o"), "--quiet", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_exit_layer_only_for_early_exit(models, tmp_path, capsys):
    rc = main(["--task", "docvqa", "--model", str(models["llama"]), "--drafter", "pld", "--exit-layer", "2",
               "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 2 and "--exit-layer is for --drafter early_exit" in capsys.readouterr().err
    t = load_target(models["llama"], device=DEVICE)
    with pytest.raises(GlanceError, match="is for --drafter early_exit"):
        make_drafter("pld", t, exit_layer=2)


def test_an_architecture_that_ignores_num_hidden_layers_is_refused(models):
    """If a forward ran layer k while num_hidden_layers = k, the drafter would be the full
    model under the early_exit label: the layer-k guard refuses it."""
    from glance_log.drafters import exit_after

    t = load_target(models["llama"], device=DEVICE)
    dec = t.model.get_decoder()
    layers = dec.layers
    with pytest.raises(GlanceError, match="does not support early exit"), exit_after(t, 2):
        assert len(dec.layers) == 2 and dec.config.num_hidden_layers == 2
        layers[2](torch.zeros(1, 1, 64))                        # the pre-hook refuses before the layer runs
    assert dec.config.num_hidden_layers == 4 and dec.layers is layers and not layers[2]._forward_pre_hooks


def _hf_run(model, tok, out, ids, k, **kw):
    from glance_log.hooks import hf_generate_hook

    lg = RoundLogger(out, run_id="hf", task="docvqa", tokenizer=tok)
    with hf_generate_hook(model, lg, "p0") as rec:
        res = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False, **kw)
        rec.finish(res)
    lg.close()
    return res, gio.read_logs(out)


def test_hf_hook_labels_early_exit_by_layer(models, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(models["qwen3"]).eval()
    tok = AutoTokenizer.from_pretrained(models["qwen3"])
    ids = tok(PROMPTS[0] + " " + PROMPTS[0], return_tensors="pt").input_ids
    plain = model.generate(ids, max_new_tokens=MAX_NEW, do_sample=False)
    for k in (1, 3):
        res, ls = _hf_run(model, tok, tmp_path / f"ee{k}", ids, k, assistant_early_exit=k)
        assert torch.equal(res, plain)
        assert set(ls.frame["drafter"]) == {f"early_exit-{k}"}
        meta = {json.dumps(fi.run["drafter"], sort_keys=True) for fi in ls.files}
        assert len(meta) == 1
        d = json.loads(meta.pop())
        assert d["drafter"] == f"early_exit-{k}" and d["exit_layer"] == k and d["num_hidden_layers"] == 4
        assert d["layer_fraction"] == k / 4 and d["generator"] == "EarlyExitCandidateGenerator"
        assert gio.read_logs(tmp_path / f"ee{k}", kind="prompts").frame["drafter"].iloc[0] == f"early_exit-{k}"
    assert model.config.num_hidden_layers == 4
    res, ls = _hf_run(model, tok, tmp_path / "pld", ids, 0, prompt_lookup_num_tokens=3, max_matching_ngram_size=2)
    d = ls.files[0].run["drafter"]
    assert set(ls.frame["drafter"]) == {"pld"}
    assert d["prompt_lookup_num_tokens"] == 3 and d["max_matching_ngram_size"] == 2


def test_hf_hook_refuses_a_second_setting_in_one_run(models, tmp_path):
    """One RoundLogger (one run) holds one drafter configuration: a second exit layer is refused."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from glance_log.hooks import hf_generate_hook

    model = AutoModelForCausalLM.from_pretrained(models["qwen3"]).eval()
    tok = AutoTokenizer.from_pretrained(models["qwen3"])
    ids = tok(PROMPTS[0], return_tensors="pt").input_ids
    lg = RoundLogger(tmp_path, run_id="hf", task="docvqa", tokenizer=tok)
    for i, k in enumerate((1, 1, 2)):
        ctx = pytest.raises(GlanceError, match="already records drafter settings") if k == 2 else None
        with ctx or np.errstate():
            with hf_generate_hook(model, lg, f"p{i}") as rec:
                res = model.generate(ids, max_new_tokens=6, do_sample=False, assistant_early_exit=k)
                rec.finish(res)
    lg.close()
    assert set(gio.read_logs(tmp_path).frame["drafter"]) == {"early_exit-1"}
