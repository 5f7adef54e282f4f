"""The hooks' own cost: the same decodes with and without the hook, side by side in one run.

    nice -n 15 .venv/bin/python benchmarks/bench_hooks.py            # tiny models built on the fly
    .venv/bin/python benchmarks/bench_hooks.py --quick               # fewer prompts and repetitions

For each engine - Hugging Face ``generate`` with an assistant model, with prompt lookup, plain
(no assistant: the ``ar`` arm, one round per token), with transformers' DFlash generator, and the
``dflash`` package's ``dflash_generate`` (when installed)
- every prompt is decoded with the hook (a ``RoundLogger``, the prompt written at the end) and
without it, alternating which goes first per prompt and repetition so that drift of a shared
machine hits both arms alike. Reported: the ratio of total wall time (on / off, the prompt-end
work included) with a bootstrap interval over the paired decodes. The models are tiny random
ones (a 4-layer, 64-wide Qwen3 target), so the decode itself is cheap and the ratio is an upper
bound of what the hook adds to a real model's decode.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _boot_ratio(on, off, rng, B=2000):
    on, off = np.asarray(on), np.asarray(off)
    idx = rng.integers(0, len(on), (B, len(on)))
    r = on[idx].sum(1) / off[idx].sum(1)
    return float(on.sum() / off.sum()), float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def _models(tmp):
    from _logger_fixtures import make_llama, make_perturbed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t = make_llama(tmp / "t", family="qwen3", layers=4, init=1.0)
    d = make_perturbed(tmp / "d", t, noise=0.3)
    return (AutoModelForCausalLM.from_pretrained(t).eval(), AutoModelForCausalLM.from_pretrained(d).eval(),
            AutoTokenizer.from_pretrained(t))


def _hf_dflash_assistant(model):
    from transformers.models.muse_glimmer_assistant.configuration_muse_glimmer_assistant import (
        MuseGlimmerAssistantConfig,
    )
    from transformers.models.muse_glimmer_assistant.modeling_muse_glimmer_assistant import (
        MuseGlimmerAssistantModel,
    )

    c = model.config
    torch.manual_seed(0)
    cfg = MuseGlimmerAssistantConfig(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                                     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                     head_dim=c.head_dim, vocab_size=c.vocab_size, block_size=5, mask_token_id=0,
                                     target_layer_ids=[1, 2], bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                     sliding_window=64)
    return MuseGlimmerAssistantModel(cfg).eval()


def _dflash_draft(model):
    import dflash.model as dm
    from transformers import Qwen3Config

    c = model.config
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=c.head_dim,
                      num_target_layers=c.num_hidden_layers,
                      dflash_config={"mask_token_id": 0, "target_layer_ids": [1, 2], "block_size": 5})
    return dm.DFlashDraftModel(cfg).eval()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8, help="prompts")
    ap.add_argument("--repeat", type=int, default=3, help="on/off repetitions per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.repeat, args.max_new_tokens = 4, 2, 32
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import transformers
    from _logger_fixtures import CORPUS

    from glance_log.hooks import dflash_hook, hf_generate_hook
    from glance_log.record import RoundLogger
    transformers.logging.set_verbosity_error()

    tmp = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    model, draft, tok = _models(tmp)
    prompts = [tok(CORPUS[i % len(CORPUS)] + " " + CORPUS[i % len(CORPUS)], return_tensors="pt").input_ids
               for i in range(args.n)]
    N = args.max_new_tokens
    arms = {
        "hf assistant": lambda ids: model.generate(ids, assistant_model=draft, max_new_tokens=N, do_sample=False),
        "hf prompt lookup": lambda ids: model.generate(ids, prompt_lookup_num_tokens=4, max_new_tokens=N,
                                                       do_sample=False),
    }
    arms["hf plain (ar)"] = lambda ids: model.generate(ids, max_new_tokens=N, do_sample=False)
    hf_df = _hf_dflash_assistant(model)
    arms["hf dflash"] = lambda ids: model.generate(ids, assistant_model=hf_df, speculation_type="dflash",
                                                   max_new_tokens=N, do_sample=False)
    try:
        import dflash.model as dm
        dfd = _dflash_draft(model)
        arms["dflash package"] = lambda ids: dm.dflash_generate(dfd, model, ids, max_new_tokens=N,
                                                                stop_token_ids=None, temperature=0.0)
    except ImportError:
        print("dflash not installed: its arm is skipped (pip install --no-deps dflash==0.1.0)")
    rng = np.random.default_rng(0)
    print(f"tiny Qwen3 target (4 layers, hidden 64), {args.n} prompts x {args.repeat}, max_new_tokens {N}, "
          f"torch threads {torch.get_num_threads()}, torch {torch.__version__}, transformers {transformers.__version__}")
    results = {}
    for name, run in arms.items():
        logger = RoundLogger(tmp / name.replace(" ", "_"), run_id="bench", task="bench", tokenizer=tok,
                             flush_rows=10**6, flush_seconds=1e9)
        run(prompts[0])                                            # warm-up

        def once(ids, on, pid, name=name, run=run, logger=logger):
            t0 = time.perf_counter()
            if not on:
                run(ids)
            elif name == "dflash package":
                with dflash_hook(model, dfd, logger, pid) as h:
                    out = run(ids)
                h.finish(out, num_input_tokens=ids.shape[1], stop_token_ids=None)
            else:
                with hf_generate_hook(model, logger, pid) as rec:
                    out = run(ids)
                    rec.finish(out)
            return (time.perf_counter() - t0) * 1e3

        on_ms, off_ms = [], []
        for rep in range(args.repeat):
            for i, ids in enumerate(prompts):
                for on in ((True, False) if (i + rep) % 2 == 0 else (False, True)):
                    (on_ms if on else off_ms).append(once(ids, on, f"p{i}-{rep}"))
        logger.close()
        r = _boot_ratio(on_ms, off_ms, rng)
        results[name] = {"ratio": r, "off_ms_per_decode": float(np.mean(off_ms)), "rounds": logger.n_rounds}
        print(f"  {name:<16} on/off {r[0]:.3f}  95% bootstrap [{r[1]:.3f}, {r[2]:.3f}]   "
              f"off {np.mean(off_ms):7.1f} ms/decode, {logger.n_rounds} rounds logged")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
