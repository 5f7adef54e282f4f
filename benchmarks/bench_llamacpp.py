"""llama.cpp (llama-cpp-python) on the real Gemma 3 270M Q4_K_M GGUF, side by side in one run:
tokens/s of plain decoding (``ar``) and prompt lookup (``pld``), the verify cost per row, the
llama.cpp hook's overhead (on/off), and the share of prompts whose drafted output differs from
the engine's own plain greedy decode, per category.

    /work/notes/cpu-slot .venv/bin/python benchmarks/bench_llamacpp.py            # 13 questions, 128 tokens
    .venv/bin/python benchmarks/bench_llamacpp.py --quick                         # 3 questions, 32 tokens

Needs the [llamacpp] and [gemma] extras. Questions: the first turn of ``--per-category`` questions
of every category of the Spec-Bench question file (13 categories), prompts formed as glance-log
forms them. Each prompt is decoded, in this order, ``ar`` off, ``ar`` on, ``pld`` off, ``pld`` on,
then the order reverses for the next prompt, so drift of a shared machine hits both sides alike;
"on" is the hook with a ``RoundLogger`` (its prompt-end work included in the timed call), the
audit runs in a separate untimed pass. Reported (JSON and a table): tokens/s per arm (hook off),
the on/off ratio of total wall time per arm with a 95% bootstrap interval over prompts, the
verify time per batch size (rows = horizon + 1) from the logged rounds over the one-row verify,
and the audited share of drafted outputs that differ from plain greedy per category.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

QUESTIONS = Path("/work/shared/realdata/spec-bench/vase/question.jsonl.gz")


def _boot_ratio(on, off, rng, B=2000):
    on, off = np.asarray(on), np.asarray(off)
    idx = rng.integers(0, len(on), (B, len(on)))
    r = on[idx].sum(1) / off[idx].sum(1)
    return float(on.sum() / off.sum()), float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


class _HFArms:
    """glance-log's tree decoder over transformers on the same prompts (ar: one token a round; pld: a
    10-token chain), no logger: wall and CPU seconds and tokens per arm."""

    def __init__(self, threads: int):
        import torch

        from glance_log.drafters import make_drafter
        from glance_log.models import load_target

        torch.set_num_threads(threads)
        self.t = load_target("gemma-3-270m", device="cpu")
        self.drafters = {"ar": (make_drafter("ar", self.t), 0), "pld": (make_drafter("pld", self.t), 10)}
        self.stats = {d: {"wall": 0.0, "cpu": 0.0, "tokens": 0} for d in self.drafters}

    def decode(self, ids, new: int) -> None:
        from glance_log.decode import decode

        prompt = _prompt(ids)
        for d, (dr, budget) in self.drafters.items():
            w0, c0 = time.perf_counter(), time.process_time()
            r = decode(self.t, dr, prompt, budget=budget, branch_k=1, max_new_tokens=new)
            st = self.stats[d]
            st["wall"] += time.perf_counter() - w0
            st["cpu"] += time.process_time() - c0
            st["tokens"] += len(r.tokens)

    def figures(self) -> dict:
        return {d: {"tokens": s["tokens"], "wall_s": s["wall"], "cpu_s": s["cpu"],
                    "tokens_per_s": s["tokens"] / s["wall"]} for d, s in self.stats.items()}


def _prompt(ids):
    import torch

    from glance_log.models import PromptInputs

    return PromptInputs({"input_ids": torch.tensor([list(ids)], dtype=torch.long)}, [int(x) for x in ids])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", default=str(QUESTIONS))
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="3 questions, 32 tokens")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--transformers", action="store_true",
                    help="also decode every prompt with glance-log's tree decoder over transformers (fp32, the same "
                         "model de-quantised; ar and pld, no logger), interleaved with the llama.cpp arms: the "
                         "row beside the transformers path")
    a = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from glance_law import io as gio
    from glance_log import questions as Q
    from glance_log.hooks import llamacpp_hook
    from glance_log.record import RoundLogger
    from glance_log.run_llamacpp import make_llama
    from glance_log.sources import gguf_file, gguf_tokenizer_folder

    path = gguf_file("gemma-3-270m")
    tok = AutoTokenizer.from_pretrained(gguf_tokenizer_folder("gemma-3-270m"))
    qs = Q.load_questions(a.questions, "all", a.per_category, 0, turns=1)
    new = a.max_new_tokens
    if a.quick:
        qs, new = qs[:3], 32
    prompts = [(q.prompt_ids[0], q.category, [int(t) for t in tok(Q.plain_conversation(list(q.turns), []),
                                                                   add_special_tokens=True)["input_ids"]])
               for q in qs]
    llms = {d: make_llama(path, d, n_ctx=2048, threads=a.threads) for d in ("ar", "pld")}
    tmp = Path(tempfile.mkdtemp(prefix="bench-llamacpp-"))
    loggers = {d: RoundLogger(tmp / d, run_id=d, task="bench", tokenizer=tok, drafter=d) for d in llms}
    wall = {(d, h): [] for d in llms for h in ("off", "on")}
    toks = {d: [] for d in llms}
    hf = _HFArms(a.threads) if a.transformers else None

    def decode(d, ids, pid, hooked):
        llm = llms[d]
        llm.reset()
        t0 = time.perf_counter()
        if hooked:
            with llamacpp_hook(llm, loggers[d], pid):
                r = llm.create_completion(ids, max_tokens=new, temperature=0.0)
        else:
            r = llm.create_completion(ids, max_tokens=new, temperature=0.0)
        dt = time.perf_counter() - t0
        return dt, r["usage"]["completion_tokens"]

    for i, (pid, cat, ids) in enumerate(prompts):
        order = [(d, h) for d in ("ar", "pld") for h in (False, True)]
        for d, h in (order if i % 2 == 0 else order[::-1]):
            dt, n = decode(d, ids, pid, h)
            wall[(d, "on" if h else "off")].append(dt)
            if not h:
                toks[d].append(n)
        if hf is not None:
            hf.decode(ids, new)
        print(f"{i + 1}/{len(prompts)} {pid} ({cat}): " + ", ".join(f"{d} {h} {wall[(d, h)][-1]:.2f}s"
                                                                   for d in llms for h in ("off", "on")),
              file=sys.stderr, flush=True)
    for lg in loggers.values():
        lg.close()
    # the audit, untimed: drafted output against the engine's own plain greedy decode
    audit_lg = RoundLogger(tmp / "audit", run_id="audit", task="bench", tokenizer=tok, drafter="pld")
    for pid, cat, ids in prompts:
        llms["pld"].reset()
        with llamacpp_hook(llms["pld"], audit_lg, pid, task=cat, audit=True):
            llms["pld"].create_completion(ids, max_tokens=new, temperature=0.0)
    audit_lg.close()
    rng = np.random.default_rng(0)
    res = {"prompts": len(prompts), "max_new_tokens": new, "threads": a.threads, "arms": {}}
    for d in llms:
        ratio = _boot_ratio(wall[(d, "on")], wall[(d, "off")], rng)
        res["arms"][d] = {"tokens_per_s": float(np.sum(toks[d]) / np.sum(wall[(d, "off")])),
                          "tokens": int(np.sum(toks[d])), "wall_off_s": float(np.sum(wall[(d, "off")])),
                          "hook_on_off": ratio}
    res["pld_vs_ar_tokens_per_s"] = res["arms"]["pld"]["tokens_per_s"] / res["arms"]["ar"]["tokens_per_s"]
    if hf is not None:
        res["transformers"] = hf.figures()
        for d in ("ar", "pld"):
            res["transformers"][d]["llamacpp_x"] = res["arms"][d]["tokens_per_s"] / res["transformers"][d]["tokens_per_s"]
    rounds = gio.read_logs(tmp / "pld").frame
    one = gio.read_logs(tmp / "ar").frame["verify_ms"].median()
    by = rounds.assign(rows=rounds["horizon"] + 1).groupby("rows")["verify_ms"].agg(["median", "size"])
    res["verify_ms_one_row_ar"] = float(one)
    res["verify_cost_by_rows"] = {int(k): {"median_ms": float(v["median"]), "x_one_row": float(v["median"] / one),
                                           "rounds": int(v["size"])} for k, v in by.iterrows()}
    pr = gio.read_logs(tmp / "audit", kind="prompts").frame
    res["differs_from_greedy"] = {t: {"prompts": int(len(g)), "differ": int((~g["greedy_match"].astype(bool)).sum())}
                                  for t, g in pr.groupby("task")}
    res["differs_total"] = [int((~pr["greedy_match"].astype(bool)).sum()), int(len(pr))]
    res["divergence_margins"] = [float(x) for x in pr["divergence_margin"].dropna()]
    text = json.dumps(res, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
