"""The law on a real model (issue 23): Gemma 3 270M, greedy, first-turn Spec-Bench questions.

    python analyses/real_model.py [--n 3] [--max-new-tokens 64] [--out data/real] [--tables docs/real-model-tables.md]
                                  [--questions ../shared/realdata/spec-bench/vase/question.jsonl.gz] [--skip-decode]

Decodes the same ``--n`` first-turn questions of each of Spec-Bench's 13 categories with every arm
(``glance-log`` itself, one command per arm, resumable: a rerun logs only what is missing):

* ``ar``: plain greedy decoding (``--baseline`` of the pld command): the timing baseline;
* ``pld``: prompt lookup, a 10-token chain;
* ``early_exit-6-chain``: the target's first 6 of 18 layers draft a 5-token chain;
* ``early_exit-6-tree16``: the same drafter's top-4 rows per offset, a 16-node tree.

Then reports with the toolkit: ``python -m glance_law.fit`` (the law per category and pooled with
its tau and tokens per round, the grounded tail, per-offset acceptance, the task order and the
timing ledger against ``ar``), the law and the order with the categories grouped as open and
grounded (:data:`GROUNDED`), and the round cost (``round_ms`` on draft passes and verified nodes:
the CPU's cost per verified token). Writes every table, with the command that made it, to
``--tables`` (Markdown). Needs the ``[gemma]`` extra (the model) and the ``[log]`` extra.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import glance_law as gl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUESTIONS = HERE.parent.parent / "shared" / "realdata" / "spec-bench" / "vase" / "question.jsonl.gz"
MODEL = "gemma-3-270m"
#: categories whose answer is drawn from text in the prompt (a summary, retrieved passages, the
#: record to extract from); every other Spec-Bench category is open-ended
GROUNDED = ("summarization", "rag", "extraction")
#: (label, glance-log options, questions per category, max new tokens; None = --n / --max-new-tokens).
#: The early-exit arms decode the first of the --n questions of each category only (a seeded sample of
#: one is the first of a sample of three), 32 tokens each: at exit layer 6 a round costs five partial
#: passes through the 262k-row LM head and accepts almost nothing, so they are the slowest arms on
#: this CPU
ARMS = (
    ("pld", ["--drafter", "pld", "--baseline"], None, None),
    ("early_exit-6-chain", ["--drafter", "early_exit", "--exit-layer", "6", "--branch-k", "1", "--budget", "5",
                            "--label", "early_exit-6-chain"], 1, 32),
    ("early_exit-6-tree16", ["--drafter", "early_exit", "--exit-layer", "6", "--branch-k", "4", "--budget", "16",
                             "--label", "early_exit-6-tree16"], 1, 32),
)


def decode_arms(args) -> list[str]:
    """Run glance-log once per arm; returns the commands (for the tables' provenance)."""
    cmds = []
    for label, extra, n, max_new in ARMS:
        cmd = ["glance-log", "--model", MODEL, "--data", os.path.relpath(args.questions, ROOT), "--task", "all", "--n", str(n or args.n),
               "--turns", "1", "--max-new-tokens", str(max_new or args.max_new_tokens), "--threads", str(args.threads),
               "--out", _rel(args.out), "--quiet", *extra]
        cmds.append(shlex.join(cmd))
        if args.skip_decode:
            continue
        t0, c0 = time.time(), _children_cpu()
        subprocess.run([sys.executable, "-m", "glance_log.cli", *cmd[1:]], check=True, cwd=ROOT)   # glance-log
        print(f"{label}: {time.time() - t0:.0f} s wall, {_children_cpu() - c0:.0f} CPU s", file=sys.stderr)
    return cmds


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def fit_cli(args, *extra) -> tuple[str, str]:
    """One ``python -m glance_law.fit`` call in Markdown; returns (command, output)."""
    cmd = [sys.executable, "-m", "glance_law.fit", f"{_rel(args.out)}/*.parquet", "--format", "markdown", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    shown = shlex.join(["python", "-m", "glance_law.fit", *cmd[3:]])
    return shown, out


def _rel(path: Path) -> str:
    """A path as the tables show it: relative to the checkout when inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def grouped(frame):
    """The rounds with each category replaced by its group (open / grounded)."""
    f = frame.copy()
    f["task"] = ["grounded" if str(t) in GROUNDED else "open" for t in f["task"].astype(str)]
    return f


def _entropy_table(frame) -> str:
    """Mean root entropy per group: over rounds, and over prompts (each prompt's mean, equal weight,
    with a t interval across prompts - rounds of one prompt are not independent)."""
    from scipy import stats

    rows = ["| group | rounds | prompts | mean over rounds (nats) | mean over prompts [95%] |", "|---|---:|---:|---:|---:|"]
    for name, sub in frame.groupby("task", sort=True):
        per_prompt = sub.groupby(sub["prompt_id"].astype(str))["root_entropy"].mean()
        m, se, n = per_prompt.mean(), per_prompt.std(ddof=1) / len(per_prompt) ** 0.5, len(per_prompt)
        h = stats.t.ppf(0.975, n - 1) * se
        rows.append(f"| {name} | {len(sub)} | {n} | {sub['root_entropy'].mean():.3f} | {m:.3f} [{m - h:.3f}, {m + h:.3f}] |")
    return "\n".join(rows)


def _md(result) -> str:
    """A result's tables in Markdown (results with several tables render each)."""
    tables = [getattr(result, name)() for name in ("gap_table", "verdict_table") if hasattr(result, name)]
    return "\n\n".join(t.summary("markdown") for t in [result, *tables])


def library_tables(args) -> list[tuple[str, str]]:
    """Tables the CLI has no flag for: open vs grounded, the round cost."""
    rounds = gl.read_rounds([str(args.out / "*.parquet")])      # the study (analyses/real_dense.py) is in subfolders
    prompts = gl.read_prompts([str(args.out / "*.parquet")])
    drafted = rounds.loc[rounds["drafter"].astype(str) != "ar"]
    g = grouped(drafted)
    out = []
    for dr in sorted(set(g["drafter"].astype(str))):
        sub = g.loc[g["drafter"].astype(str) == dr]
        out.append((f"open vs grounded ({', '.join(GROUNDED)}): the law, {dr}",
                    gl.fit_law(sub, by="task").summary("markdown")))
        out.append((f"open vs grounded: the order (grounded -> lower entropy -> longer runs?), {dr}",
                    _md(gl.task_order(sub, ["open", "grounded"], seed=0))))
    if "pred_entropy" in drafted:        # the entropy a decoder knows before drafting, as the law's key
        keyed = drafted.assign(root_entropy=drafted["pred_entropy"])
        out.append(("the law keyed on pred_entropy (the row that predicted the root, known before drafting) "
                    "instead of root_entropy", gl.fit_law(keyed, by=None).summary("markdown")))
        out.append(("the law keyed on root_entropy, pooled (for the comparison above)",
                    gl.fit_law(drafted, by=None).summary("markdown")))
    base = rounds.loc[rounds["drafter"].astype(str) == "ar"]
    out.append(("root entropy at every position (the ar arm: one round per token, no drafter's selection of "
                "roots), open vs grounded", _entropy_table(grouped(base))))
    base_prompts = prompts.loc[prompts["drafter"].astype(str) == "ar"] if "drafter" in prompts else None
    out.append(("round cost on this CPU: round_ms ~ 1 + draft_passes + budget (the budget coefficient is the "
                "cost per verified token)",
                _md(gl.round_cost(drafted, baseline_rounds=base, baseline_prompts=base_prompts, seed=0))))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3, help="first-turn questions per category (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--questions", type=Path, default=QUESTIONS)
    p.add_argument("--out", type=Path, default=HERE.parent / "data" / "real")
    p.add_argument("--tables", type=Path, default=HERE.parent / "docs" / "real-model-tables.md")
    p.add_argument("--skip-decode", action="store_true", help="report on the logs already in --out")
    args = p.parse_args(argv)
    cmds = decode_arms(args)
    parts = ["# Gemma 3 270M on Spec-Bench: the tables", "",
             "Generated by `python analyses/real_model.py` (do not edit by hand). The logs came from:", "",
             *[f"    {c}" for c in cmds], ""]
    baseline = f"{_rel(args.out)}/*-ar-*.parquet"
    # per-offset tables pooled over the categories (per category they run to thousands of rows)
    for flags in (["--order", "--tail"], ["--offsets", "--by", "none"], ["--timing", baseline]):
        cmd, text = fit_cli(args, *flags)
        parts += [f"## `{cmd}`", "", text.strip(), ""]
    for title, text in library_tables(args):
        parts += [f"## {title}", "", text.strip(), ""]
    args.tables.write_text("\n".join(parts) + "\n")
    print(f"wrote {args.tables}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
