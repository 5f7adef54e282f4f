"""Draft policies (the causal form of Appendix B.5): every built-in policy family fitted on
training prompts and scored on held-out prompts, per drafter, replayed from the logged top-k.

    python analyses/policy_heldout.py LOGS... --out DIR [--seed S]

The recipe (section "policy" of glance_law.appendix, public API only; docs/policy.md):

    logs = read_logs(LOGS)                               # glance_law.io
    res = policy.evaluate_policies(logs, N, drafter=D, n_boot=200, seed=S)
    res                                                  -> tables/policy_heldout*.{md,tex,csv}

N is the first of --budgets (tree drafters) or half the median proposal (chains). Writes
DIR/tables/*.md, .tex and .csv, DIR/index.md + DIR/manifest.json. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "policy", *sys.argv[1:]], prog="python analyses/policy_heldout.py"))
