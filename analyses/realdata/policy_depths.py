"""Held-out depth policies on real Spec-Bench logs (issue 17): for every answer file (one run of
one drafter on one target), the acceptance-keyed depth policy fitted on training prompts and
scored on held-out prompts, Hugging Face's heuristic schedule, and the fixed depth, replayed
from the accepted runs alone (glance_law.policy.runs; docs/policy.md).

    python analyses/realdata/policy_depths.py ../shared/realdata/spec-bench --out DIR [--bootstrap B] [--seed S] [--skip-bad]

The target mean depth of each file is its deepest logged horizon minus one (the question: can a
decoder that drafts one token less per round on average lose less than a fixed shallower draft
by choosing *when* to draft deep?), at most 4 for schedules (SpS). Writes DIR/policy_realdata.md
and .csv (one row per file and family; gains in % over the fixed depth at the row's mean depth,
95% prompt-bootstrap intervals; "censored": rounds reaching past a logged round's whole accepted
draft, where the drafter's guess of the bonus token is unknown - the gain assumes a miss there,
the next column a match, both for the policy and the fixed depths; where the turns' timings
identify a round cost - depths that vary, as in SpS - the modelled speedup over the fixed depth
with the lowest modelled ms per token).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from glance_law.errors import GlanceError
from glance_law.io import read_logs
from glance_law.policy import policy_table, prepare_runs


def one_file(path: Path, n_boot: int, seed: int, skip_bad: bool = False) -> list[dict]:
    logs = read_logs([str(path)], skip_bad=skip_bad)
    prompts = read_logs([str(path)], kind="prompts", skip_bad=skip_bad).frame
    frame = logs.frame
    drafters = sorted(set(frame["drafter"].astype(str)) - {"ar"})
    rows = []
    for dr in drafters:
        data = prepare_runs(logs, drafter=dr)
        target = float(min(max(1, data.max_depth - 1), 4))
        res = policy_table(logs, target, data=data, n_boot=n_boot, seed=seed, prompts=prompts)
        t = res.to_frame()
        t = t.loc[t["evaluated_on"] != "in-sample"]
        logged = (data.accepted + 1).sum() / data.rounds
        for _, r in t.iterrows():
            rows.append({"file": path.name.replace(".jsonl.gz", ""), "drafter": dr, "rounds": data.rounds,
                         "prompts": data.prompts, "logged_tokens": logged, "max_depth": data.max_depth,
                         "target": target, "family": r["family"], "evaluated_on": r["evaluated_on"],
                         "mean_depth": r["mean_shape"], "tokens": r["tokens"], "tokens_lo": r["tokens_lo"],
                         "tokens_hi": r["tokens_hi"], "fixed_tokens": r["fixed_tokens"], "gain": r["gain"],
                         "gain_lo": r["gain_lo"], "gain_hi": r["gain_hi"], "censored": r["censored"],
                         "gain_ifmatch": r["gain_ifmatch"], "gain_ifmatch_lo": r["gain_ifmatch_lo"],
                         "gain_ifmatch_hi": r["gain_ifmatch_hi"],
                         **{k: r.get(k, float("nan")) for k in (
                             "ms_per_token", "speedup_best_fixed", "speedup_best_fixed_lo", "speedup_best_fixed_hi",
                             "speedup_best_fixed_ifmatch", "speedup_best_fixed_ifmatch_lo",
                             "speedup_best_fixed_ifmatch_hi")},
                         "round_cost": (f"{res.cost.constant:.2f} + {res.cost.pass_ms:.3f} x depth ms"
                                        if res.cost.identified else "not identified"),
                         "params": r["params"]})
    return rows


def _speed(r: dict) -> str:
    if math.isnan(r["speedup_best_fixed"]):                # no round cost identified
        return "-"
    return (f"{r['speedup_best_fixed']:.3f} [{r['speedup_best_fixed_lo']:.3f}, {r['speedup_best_fixed_hi']:.3f}]; "
            f"{r['speedup_best_fixed_ifmatch']:.3f} ({r['round_cost']})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python analyses/realdata/policy_depths.py", description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="folder searched recursively for Spec-Bench answer files (*.jsonl.gz)")
    p.add_argument("--out", required=True, help="folder for policy_realdata.md/.csv (created)")
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-bad", action="store_true", help="skip corrupt lines (listed in the notes) instead of the file")
    a = p.parse_args(argv)
    files = sorted(f for f in Path(a.root).rglob("*.jsonl*") if "question" not in f.name and "vanilla" not in f.name)
    rows, skipped = [], []
    for f in files:
        try:
            rows += one_file(f, a.bootstrap, a.seed, a.skip_bad)
        except GlanceError as exc:
            skipped.append(f"{f.name}: {' '.join(str(exc).split())}")
    if not rows:
        print("no file could be evaluated: " + "; ".join(skipped), file=sys.stderr)
        return 2
    df = pd.DataFrame(rows)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "policy_realdata.csv", index=False)
    lines = ["| file | drafter | rounds | prompts | logged tok/round (depth) | target | family | mean depth | "
             "tok/round [95%] | fixed at that depth | gain % [95%] | censored | gain % if censored runs go on | "
             "modelled speedup over the best fixed depth (miss; match) |",
             "|" + "---|" * 14]
    for r in rows:
        lines.append(f"| {r['file']} | {r['drafter']} | {r['rounds']} | {r['prompts']} | {r['logged_tokens']:.3f} "
                     f"(<= {r['max_depth']}) | {r['target']:g} | {r['family']} ({r['evaluated_on']}) | "
                     f"{r['mean_depth']:.2f} | {r['tokens']:.3f} [{r['tokens_lo']:.3f}, {r['tokens_hi']:.3f}] | "
                     f"{r['fixed_tokens']:.3f} | {r['gain']:+.2f} [{r['gain_lo']:+.2f}, {r['gain_hi']:+.2f}] | "
                     f"{100 * r['censored']:.1f}% | {r['gain_ifmatch']:+.2f} [{r['gain_ifmatch_lo']:+.2f}, "
                     f"{r['gain_ifmatch_hi']:+.2f}] | {_speed(r)} |")
    if skipped:
        lines += ["", "Skipped:", *[f"- {s}" for s in skipped]]
    (out / "policy_realdata.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
