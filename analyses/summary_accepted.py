"""Section 6: the table every log allows - per task, rounds, prompts, horizon, mean accepted
length and tau with prompt-clustered intervals, and P(a = L) (no root entropy needed).

    python analyses/summary_accepted.py LOGS... --out DIR [--seed S]

The recipe (section "summary" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = summary.group_summary(logs, "task")            # glance_law.evidence.summary
                                                         -> tables/summary_accepted.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, and DIR/index.md + DIR/manifest.json (other
sections already in DIR are kept when they were made from the same logs). Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "summary", *sys.argv[1:]], prog="python analyses/summary_accepted.py"))
