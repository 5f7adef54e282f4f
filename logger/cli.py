"""``glance-log``: run a task through the reference tree-verify decoder and write round logs.

    glance-log --task docvqa                      # embedded default target + block head
    glance-log --task docvqa --drafter pld --baseline --audit
    python -m glance_law.fit logs/*.parquet

User errors print one line on stderr and exit with code 2; every prompt completed
before the error stays in ``--out``.
"""
from __future__ import annotations

import argparse
import shlex
import sys

from glance_law.errors import GlanceError
from glance_law.scrub import scrub, scrubbed_output

from .drafters import DRAFTERS
from .tasks import TASKS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="glance-log",
        description="Decode a task with a speculative tree-verify decoder and log every round "
                    "(Parquet, the glance round-log contract).")
    p.add_argument("--task", required=True,
                   help=f"task family: {', '.join(TASKS)}; with a question file as --data, one of its categories "
                        "or 'all'")
    p.add_argument("--engine", default="tree", choices=("tree", "llamacpp"),
                   help="tree: the reference tree-verify decoder (default); llamacpp: llama.cpp through "
                        "llama-cpp-python (the [llamacpp] extra) with --model FILE.gguf or gemma-3-270m, --drafter "
                        "pld|ar, --draft-len (docs/logger.md)")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="--engine llamacpp: the context size (default 2048; pld keeps every row's logits: n_ctx x "
                        "vocabulary x 4 bytes)")
    p.add_argument("--model", default=None,
                   help="target model: a Hugging Face model folder, a .gguf file (converted once into the user's "
                        "cache) or gemma-3-270m (the [gemma] extra); default: the embedded target shipped in the "
                        "package ($GLANCE_MODELS/target when that is set)")
    p.add_argument("--drafter", default="block", choices=DRAFTERS, help="drafter (default: block)")
    p.add_argument("--draft-model", default=None,
                   help="block head folder for --drafter block (default: the embedded block head) or the "
                        "smaller HF model for --drafter two_model")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow a --model/--draft-model folder to run its own Python code (auto_map, e.g. a DFlash "
                        "checkpoint); off by default: such a folder is refused")
    p.add_argument("--budget", type=int, default=63, help="candidate tree size N, root excluded (default 63)")
    p.add_argument("--branch-k", type=int, default=8,
                   help="top-k per offset offered to the tree builder; 1 = a width-1 chain (default 8)")
    p.add_argument("--draft-len", type=int, default=None,
                   help="draft horizon for pld (default 10), two_model and early_exit (default 5); a block "
                        "head uses its own")
    p.add_argument("--exit-layer", type=int, default=None, metavar="K",
                   help="--drafter early_exit: the target's first K decoder layers (1 <= K < its "
                        "num_hidden_layers), then its final norm and LM head, draft; the label is early_exit-K")
    p.add_argument("--policy", default=None, metavar="FILE",
                   help="a draft policy JSON (python -m glance_law.policy --out) choosing each round's budget or "
                        "depth from the live root statistics (overrides --budget)")
    p.add_argument("--dense", action="store_true",
                   help="dense logging for trajectory replays: decode autoregressively (the same greedy output) and "
                        "log the drafter's whole proposal at every output position (condition 'dense'), so a "
                        "policy's own run can be replayed position by position (python -m glance_law.policy)")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--n", type=int, default=20,
                   help="number of prompts (default 20); with a question file, questions per category, each "
                        "turn one prompt")
    p.add_argument("--label", default=None, metavar="NAME",
                   help="the drafter arm's label in the logs' drafter column (default: the drafter's name, e.g. "
                        "pld or early_exit-6): name arms that differ in shape, e.g. a chain and a tree of one "
                        "drafter, so the analyses keep them apart")
    p.add_argument("--turns", type=int, default=None, metavar="N",
                   help="question files: decode the first N turns of each question (default: every turn; 1 = "
                        "first turns only, as Spec-Bench's single-turn comparisons)")
    p.add_argument("--data", default=None,
                   help="local data: a JSONL folder, a datasets save_to_disk folder, Parquet files, or a "
                        "Spec-Bench/MT-bench question file (question.jsonl or .jsonl.gz: multi-turn questions, "
                        "their category the task) (default: the embedded synthetic suite)")
    p.add_argument("--out", default="logs", help="output folder for the part files (default logs/)")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:i]")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy; > 0 samples the committed token from the target's verified row")
    p.add_argument("--baseline", action="store_true", help="also run the autoregressive (ar) arm")
    p.add_argument("--audit", action="store_true",
                   help="compare every output with fp32 greedy decoding (greedy_match, first_divergence)")
    p.add_argument("--probe", default=None, choices=("mismatched",),
                   help="mismatched: replay each trajectory with another prompt's image/context")
    p.add_argument("--seed", type=int, default=0, help="item selection and sampling seed")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads; 0 = torch's choice (default: 1 for the embedded default, measured "
                        "fastest on a shared 2-core machine by benchmarks/bench_threads.py; torch's choice "
                        "for any other --model)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with scrubbed_output(argv):        # no secret of a location reaches the output
        return _main(argv)


def _main(argv: list) -> int:
    args = build_parser().parse_args(argv)
    try:
        import torch
    except ImportError:
        print("glance-log: torch is not installed; install the logger extra: pip install -e '.[log]'",
              file=sys.stderr)
        return 2
    from .run import RunConfig, run

    threads = args.threads if args.threads is not None else (1 if args.model is None else 0)
    if threads < 0:
        print("glance-log: --threads must be >= 0", file=sys.stderr)
        return 2
    if threads:
        torch.set_num_threads(threads)

    cfg = RunConfig(task=args.task, model=args.model, drafter=args.drafter, draft_model=args.draft_model,
                    budget=args.budget, branch_k=args.branch_k, max_new_tokens=args.max_new_tokens, n=args.n,
                    data=args.data, out=args.out, dtype=args.dtype, device=args.device,
                    temperature=args.temperature, baseline=args.baseline, audit=args.audit, probe=args.probe,
                    seed=args.seed, draft_len=args.draft_len, exit_layer=args.exit_layer, turns=args.turns, label=args.label, policy=args.policy,
                    dense=args.dense, engine=args.engine, n_ctx=args.n_ctx, threads=args.threads,
                    command=scrub("glance-log " + shlex.join(argv)),
                    progress=not args.quiet, trust_remote_code=args.trust_remote_code)
    try:
        summary = run(cfg)
    except GlanceError as exc:
        print(f"glance-log: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("glance-log: out of memory; completed prompts are saved (rerun to resume with a smaller "
              "--budget or --max-new-tokens)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("glance-log: interrupted; completed prompts are saved (rerun to resume)", file=sys.stderr)
        return 130
    for arm in summary["arms"]:
        audit = (f", {arm['greedy_mismatches']} audit mismatches in {arm['audited']} audited prompts"
                 if args.audit else "")
        tau = f", tau {arm['tau']:.3f}" if arm["rounds"] else ""
        probe = (f"; mismatched probe: {arm['probed']} prompts, {arm['probe_rounds']} rounds, "
                 f"tau {arm['probe_tau']:.3f}" if arm.get("probe_rounds") else "")
        ctx = (f"; {arm['context_skipped']} prompts skipped (prompt + --max-new-tokens beyond the model's "
               f"{arm['context_limit']} positions, e.g. {arm['context_skipped_ids'][0]})" if arm.get("context_skipped") else "")
        print(f"{arm['run_id']}: {arm['prompts']} prompts logged ({arm['skipped']} already there), "
              f"{arm['rounds']} rounds{tau}{audit}{probe}{ctx}", file=sys.stderr)
    for arm in summary["arms"]:
        if arm.get("verdict"):
            print(f"glance-log: {arm['verdict']}", file=sys.stderr)
    print(f"logs in {summary['out']}/ - next: python -m glance_law.fit {summary['out']}/*.parquet", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
