"""Figure 4: every task's law between the AdaEDL lower bracket and the paper's 2 ln N / H ceiling
(log scale).

    python analyses/figure4_brackets.py LOGS... --out DIR [--seed S]

The recipe (section "brackets" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    law = fit_law(logs, by="task")
    plots.law_brackets(law, drafter, budget=N)           -> figures/figure4_brackets.{png,pdf}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "brackets", *sys.argv[1:]], prog="python analyses/figure4_brackets.py"))
