"""The Spec-Bench study on Gemma 3 270M through the dense path (issue 33): every question, every
drafter, from one greedy pass.

    python analyses/real_dense.py [--out data/real/spec-bench] [--tables docs/real-model-study-tables.md]
                                  [--head HEAD] [--skip-decode] [--threads 2]

1. ``python -m glance_log.dense`` decodes all 480 Spec-Bench questions (both MT-bench turns)
   greedily once, answers cut by the stop rule ``--stop '\\nQuestion:'``, and keeps at every output
   position the root statistics and the proposals of prompt lookup, early exit at layers 6 and 12,
   and the trained block head (``--head``: its folder; the checksum is in the run metadata and in
   docs/real-model-dense.md). Resumable: a rerun decodes only what is missing from ``OUT/dense``.
2. ``python -m glance_log.rounds`` turns the dense logs into the rounds a live ``glance-log`` run
   of each arm (:data:`ARMS`) would have written, into ``OUT/<arm>``.
3. Reports with the toolkit: ``python -m glance_law.fit`` per arm (the law per category and pooled,
   tau, the ceiling, the tail, per-offset acceptance, the weighting check), and with the library
   the tables the CLI has no flag for (identification per category, open vs grounded with tests
   that cluster by prompt, root entropy at every position, the paper's Tables 13-15 where the
   model allows them). Writes every table, with the command that made it, to ``--tables``.
"""
from __future__ import annotations

import argparse
import math
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import glance_law as gl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUESTIONS = ROOT.parent / "shared" / "realdata" / "spec-bench" / "vase" / "question.jsonl.gz"
#: categories whose answer is drawn from text in the prompt (analyses/real_model.py's grouping)
GROUNDED = ("summarization", "rag", "extraction")
STOP = "\\nQuestion:"
DENSE = ["--model", "gemma-3-270m", "--task", "all", "--max-new-tokens", "64", "--stop", STOP, "--pld-len", "10",
         "--exit-layers", "6,12", "--exit-len", "5", "--k", "4", "--batch", "8"]
#: (arm folder, glance_log.rounds options): the live decoder's shape for each drafter
ARMS = (
    ("pld", ["--drafter", "pld", "--draft-len", "10", "--budget", "10", "--branch-k", "1"]),
    ("early_exit-6", ["--drafter", "early_exit-6", "--draft-len", "5", "--budget", "5", "--branch-k", "1"]),
    ("early_exit-12", ["--drafter", "early_exit-12", "--draft-len", "5", "--budget", "5", "--branch-k", "1"]),
    ("block-tree16", ["--drafter", "block", "--budget", "16", "--branch-k", "4", "--label", "block-tree16"]),
    ("block-chain", ["--drafter", "block", "--budget", "8", "--branch-k", "1", "--label", "block-chain"]),
)


def _rel(path) -> str:
    """``path`` relative to the checkout (``../shared/...`` for the question file beside it)."""
    import os

    return os.path.relpath(Path(path).resolve(), ROOT)


def _run(cmd: list) -> str:
    return subprocess.run([sys.executable, *cmd], check=True, capture_output=True, text=True, cwd=ROOT).stdout


def decode(args) -> list[str]:
    """The dense pass (skipped with --skip-decode) and the rounds of every arm; the commands run."""
    dense = ["-m", "glance_log.dense", "--data", _rel(args.questions), *DENSE, "--block-head", str(args.head),
             "--threads", str(args.threads), "--out", _rel(args.out / "dense")]
    cmds = ["python " + shlex.join(dense).replace(str(args.head), "HEAD")]
    if not args.skip_decode:
        subprocess.run([sys.executable, *dense], check=True, cwd=ROOT)
    for arm, opts in ARMS:
        cmd = ["-m", "glance_log.rounds", _rel(args.out / "dense"), *opts, "--out", _rel(args.out / arm)]
        cmds.append("python " + shlex.join(cmd))
        if not args.skip_rounds:
            _run(cmd)
    return cmds


def fit_cli(args, arm: str, *extra) -> tuple[str, str]:
    cmd = ["-m", "glance_law.fit", f"{_rel(args.out / arm)}/*.parquet", "--format", "markdown", *extra]
    return "python " + shlex.join(cmd), _run(cmd)


def grouped(frame):
    f = frame.copy()
    f["task"] = ["grounded" if str(t) in GROUNDED else "open" for t in f["task"].astype(str)]
    return f


def identification(rounds) -> str:
    """Per category: the slope's interval, whether it excludes 0, and the prompts a t interval
    would need to exclude 0 at the point estimate (the half-width shrinks as 1/sqrt(prompts))."""
    law = gl.fit_law(rounds, by="task").to_frame()
    rows = ["| category | prompts | rounds | b1 [95%] | identified | prompts to exclude 0 at this b1 |",
            "|---|---:|---:|---|---|---:|"]
    for _, r in law.iterrows():
        t = str(r["task"])
        G = int(r["prompts"])          # the prompts with drafted rounds (the fit's clusters)
        b1, lo, hi = float(r["b1"]), float(r["b1_lo"]), float(r["b1_hi"])
        ok = np.isfinite(lo) and lo > 0
        half = (hi - lo) / 2
        need = "-" if ok else ("never (b1 <= 0)" if not b1 > 0 else
                               f"~{math.ceil(G * (half / b1) ** 2)}" if np.isfinite(half) else "?")
        rows.append(f"| {t} | {G} | {int(r['rounds'])} | {b1:.2f} [{lo:.2f}, {hi:.2f}] | "
                    f"{'yes' if ok else 'no'} | {need} |")
    return "\n".join(rows)


def entropy_every_position(dense) -> str:
    """Root entropy at every output position (the dense logs: no drafter chooses the roots), per
    group, the prompt means compared with Welch's t across prompts (clustered by prompt)."""
    from scipy import stats

    d = grouped(dense.loc[dense["drafter"].astype(str) == "pld"])
    rows = ["| group | positions | prompts | mean over positions (nats) | mean over prompts [95%] |",
            "|---|---:|---:|---:|---:|"]
    means = {}
    for name, sub in d.groupby("task", sort=True):
        pm = sub.groupby(sub["prompt_id"].astype(str))["root_entropy"].mean()
        means[name] = pm
        n = len(pm)
        h = stats.t.ppf(0.975, n - 1) * pm.std(ddof=1) / n ** 0.5
        rows.append(f"| {name} | {len(sub)} | {n} | {sub['root_entropy'].mean():.3f} | "
                    f"{pm.mean():.3f} [{pm.mean() - h:.3f}, {pm.mean() + h:.3f}] |")
    if {"open", "grounded"} <= set(means):
        t = stats.ttest_ind(means["grounded"], means["open"], equal_var=False)
        rows.append("")
        rows.append(f"grounded minus open (prompt means, Welch): {means['grounded'].mean() - means['open'].mean():+.3f} "
                    f"nats, t = {t.statistic:.2f}, p = {t.pvalue:.2g}")
    return "\n".join(rows)


#: live --audit runs beside the study (one thread, first turns, 32 new tokens, no stop rule): (arm, options, --n)
LIVE = (
    ("pld", ["--drafter", "pld", "--draft-len", "10", "--budget", "10", "--branch-k", "1"], 5),
    ("block-tree16", ["--drafter", "block", "--draft-model", "HEAD", "--budget", "16", "--branch-k", "4",
                      "--label", "block-tree16"], 5),
)


def live_commands(args) -> list[str]:
    base = ["glance-log", "--model", "gemma-3-270m", "--data", _rel(args.questions), "--task", "all", "--turns", "1",
            "--max-new-tokens", "32", "--audit", "--threads", "1", "--out", _rel(args.live)]
    return [shlex.join([*base, "--n", str(n), *opts]) for _, opts, n in LIVE]


def live_vs_dense(args) -> str:
    """The live runs against the rounds made from the dense logs. Greedy decoding is prefix-causal,
    so a live output of 32 tokens without the stop rule and the study's output (cut by it) agree on
    their common prefix, and so do their rounds wherever neither end reaches into a round: every
    round at position p whose deepest drafted token lies inside both outputs (p + 1 + L < both
    lengths, L the larger of the two horizons) is compared field by field."""
    live_p = gl.read_prompts([str(args.live)])
    live_r = gl.read_rounds([str(args.live)])
    rows = ["| arm | live prompts | audited: equal to model.generate | in the study | prefix equal to the study's "
            "output | rounds compared | accepted, horizon, committed equal | match vector equal | max abs root entropy "
            "diff | max abs margin diff |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, _, _ in LIVE:
        lp = live_p.loc[live_p["drafter"].astype(str) == arm]
        if lp.empty or not (args.out / arm).exists():
            continue
        dp = gl.read_prompts([str(args.out / arm)]).set_index("prompt_id")
        dr = gl.read_rounds([str(args.out / arm)])
        lr = live_r.loc[live_r["drafter"].astype(str) == arm]
        dr = dr.set_index(["prompt_id", "round"])
        pref = n = same = msame = inside = 0
        dh = dm = 0.0
        for _, pr in lp.iterrows():
            pid = pr["prompt_id"]
            if pid not in dp.index:
                continue
            inside += 1
            lt, dt = list(pr["tokens"]), list(dp.loc[pid, "tokens"])
            m = min(len(lt), len(dt))
            pref += lt[:m] == dt[:m]
            for _, r in lr.loc[lr["prompt_id"] == pid].iterrows():
                key = (pid, int(r["round"]))
                if key not in dr.index:
                    continue
                d = dr.loc[key]
                L = max(int(r["horizon"]), int(d["horizon"]), int(r["budget"] or 0) if arm != "block-tree16" else 0)
                if not int(r["position"]) + 1 + L < m:
                    continue
                n += 1
                same += (int(r["accepted"]) == int(d["accepted"]) and int(r["horizon"]) == int(d["horizon"])
                         and list(r["committed"]) == list(d["committed"]) and int(r["position"]) == int(d["position"]))
                msame += list(r["match"]) == list(d["match"])
                dh = max(dh, abs(float(r["root_entropy"]) - float(d["root_entropy"])))
                dm = max(dm, abs(float(r["root_margin"]) - float(d["root_margin"])))
        gm = lp["greedy_match"]
        rows.append(f"| {arm} | {len(lp)} | {int((gm == True).sum())} of {int(gm.notna().sum())} | {inside} | {pref} | {n} | "  # noqa: E712
                    f"{same} | {msame} | {dh:.1e} | {dm:.1e} |")
    return "\n".join(rows)


def _ci(v, lo, hi, fmt=".2f") -> str:
    return f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if np.isfinite(v) else "-"


def claims_table(args, arms: dict, dense) -> str:
    """One row per category (and pooled): what the model shows for each claim of Section 6, with the
    prompts behind it. Law and tail on the pld rounds (round-weighted; the prompt-weighted slope
    beside it), tau of every arm, root entropy at every output position."""
    pld = arms["pld"]
    law = gl.fit_law(pld, by="task").to_frame().set_index("task")
    lawp = gl.fit_law(pld, by="task", weighting="prompt").to_frame().set_index("task")
    tail = gl.fit_tail(pld, law=gl.fit_law(pld, by="task"), n_boot=199, seed=0).to_frame().set_index("task")
    taus = {a: gl.fit_law(r, by="task").to_frame().set_index("task")["tau"] for a, r in arms.items() if a != "pld"}
    ent = dense.loc[dense["drafter"].astype(str) == "pld"]
    ent_t = ent.groupby(ent["task"].astype(str))["root_entropy"].mean()
    turns = ent.groupby(ent["task"].astype(str))["prompt_id"].nunique()
    head = ("| category | group | prompts | pld rounds | b1 (rounds) [95%] | b1 (prompts) | law's checks | "
            "ceiling fraction | tau pld | " + " | ".join(f"tau {a}" for a in taus) + " | entropy, every position | "
            "floor rounds (prompts) | two-state vs geometric: LRT p |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for t in list(law.index):
        r, rp = law.loc[t], lawp.loc[t] if t in lawp.index else None
        tl = tail.loc[t] if t in tail.index else None
        grp = "-" if t == "pooled" else ("grounded" if t in GROUNDED else "open")
        checks = "hold" if bool(r["holds"]) else f"fail: {r['failed_checks']}"
        row = [t, grp, str(int(r["prompts"])), str(int(r["rounds"])), _ci(r["b1"], r["b1_lo"], r["b1_hi"]),
               f"{rp['b1']:.2f}" if rp is not None else "-", checks, f"{r['ceiling_fraction']:.2f}", f"{r['tau']:.2f}"]
        row += [f"{taus[a].get(t, np.nan):.2f}" for a in taus]
        row.append(f"{ent_t.get(t, ent['root_entropy'].mean() if t == 'pooled' else np.nan):.2f}")
        if tl is not None:
            row += [f"{int(tl['floor_rounds'])} ({int(tl['floor_prompts'])})", f"{tl['lrt_p_bootstrap']:.2g}"]
        else:
            row += ["-", "-"]
        rows.append("| " + " | ".join(row) + " |")
    rows.append("")
    rows.append("Prompts per category (every turn, dense logs): " + ", ".join(f"{k} {v}" for k, v in turns.items()))
    return "\n".join(rows)


def _frame_md(frame) -> str:
    """A plain Markdown table of a frame (numbers to 3 decimals)."""
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "-" if not np.isfinite(v) else f"{v:.3f}"
        return str(v).replace("|", "\\|")
    cols = list(frame.columns)
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows += ["| " + " | ".join(cell(v) for v in r) + " |" for r in frame.itertuples(index=False)]
    return "\n".join(rows)


def _md(result) -> str:
    tables = [getattr(result, name)() for name in ("gap_table", "verdict_table") if hasattr(result, name)]
    return "\n\n".join(t.summary("markdown") for t in [result, *tables])


def library_tables(args) -> list[tuple[str, str]]:
    out = []
    arms = {arm: gl.read_rounds([str(args.out / arm)]) for arm, _ in ARMS}
    dense = gl.read_rounds([str(args.out / "dense")])
    out.append(("per category: what the model shows for each claim (pld unless named; round-weighted, the "
                "prompt-weighted slope beside it)", claims_table(args, arms, dense)))
    for arm, r in arms.items():
        out.append((f"{arm}: where the slope is identified per category", identification(r)))
    for arm, r in arms.items():
        g = grouped(r)
        out.append((f"{arm}: open vs grounded ({', '.join(GROUNDED)}), the law", gl.fit_law(g, by="task").summary("markdown")))
        out.append((f"{arm}: open vs grounded, the order (grounded -> lower entropy -> longer runs?), bootstrap over prompts",
                    _md(gl.task_order(g, ["open", "grounded"], seed=0))))
    out.append(("root entropy at every output position (the greedy output; no drafter chooses the roots), open vs "
                "grounded", entropy_every_position(dense)))
    pld = arms["pld"]
    if "copy_len" in pld:
        out.append(("Table 13 analogue: does copy_len (the round's run found verbatim in the prompt) carry "
                    "information about accepted length beyond entropy? (pld)",
                    _md(gl.signal_effect(pld.dropna(subset=["copy_len"]), "copy_len"))))
    both = arms["block-chain"].assign(drafter="block-chain")
    for arm in ("pld", "early_exit-12"):
        both = pd.concat([both, arms[arm].assign(drafter=arm)], ignore_index=True)
    out.append(("Table 14 analogue: the law fitted on block-chain, frozen, scored on the other drafters",
                _md(gl.transfer(both, ["block-chain"], ["pld", "early_exit-12"], by="drafter"))))
    tasks = sorted(set(pld["task"].astype(str)))
    parts = []
    for t in tasks:
        res = gl.transfer(pld, [x for x in tasks if x != t], [t], by="task")
        parts.append(res.to_frame())
    frame = pd.concat(parts, ignore_index=True)
    frame = frame[[c for c in ("task", "prompts", "rounds", "mean_accepted", "mean_predicted", "calibration",
                               "calibration_lo", "calibration_hi", "b1_train", "b1_own", "b1_shift", "b1_shift_lo",
                               "b1_shift_hi", "wald_p", "r2_curve", "r2_curve_own") if c in frame.columns]]
    out.append(("Table 15 analogue: leave one category out (pld): the law fitted on the other 12, frozen, scored "
                "on the held-out one", _frame_md(frame)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=Path, default=QUESTIONS)
    p.add_argument("--out", type=Path, default=ROOT / "data" / "real" / "spec-bench")
    p.add_argument("--tables", type=Path, default=ROOT / "docs" / "real-model-study-tables.md")
    p.add_argument("--live", type=Path, default=ROOT / "data" / "real" / "spec-bench-live",
                   help="the live --audit runs (LIVE) to compare with")
    p.add_argument("--head", type=Path, default=None, help="the block head folder (docs/real-model-dense.md)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-decode", action="store_true", help="report on the dense logs already in OUT/dense")
    p.add_argument("--skip-rounds", action="store_true", help="and on the rounds already in OUT/<arm>")
    args = p.parse_args(argv)
    if not args.skip_decode and args.head is None:
        p.error("--head HEAD (the trained block head) is needed to decode; --skip-decode reports on OUT")
    cmds = decode(args)
    parts = ["# Gemma 3 270M on every Spec-Bench question: the tables", "",
             "Generated by `python analyses/real_dense.py` (do not edit by hand). The logs came from:", "",
             *[f"    {c}" for c in cmds], "",
             f"Every answer stops before the model's next `Question:` block (`--stop {STOP}`; the rule is in "
             "every run's metadata). Figures are round-weighted unless a table says `--weight prompt`.", ""]
    for arm, _ in ARMS:
        flags = [[]]
        if arm == "pld":
            flags = [["--tail", "--order"], ["--weight", "prompt"], ["--offsets", "--by", "none"]]
        elif arm == "block-chain":
            flags = [["--tail"], ["--offsets", "--by", "none"]]
        for f in flags:
            cmd, text = fit_cli(args, arm, *f)
            parts += [f"## `{cmd}`", "", text.strip(), ""]
    if args.live.exists():
        parts += ["## live beside dense: the live --audit runs against the rounds made from the dense logs", "",
                  "The live runs (first turns, 32 new tokens, no stop rule, one thread):", "",
                  *[f"    {c}" for c in live_commands(args)], "", live_vs_dense(args), ""]
    for title, text in library_tables(args):
        parts += [f"## {title}", "", text.strip(), ""]
    args.tables.write_text("\n".join(parts) + "\n")
    print(f"wrote {args.tables}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
