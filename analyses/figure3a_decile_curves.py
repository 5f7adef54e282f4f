"""Figure 3(a): mean accepted length against measured root entropy per entropy decile, every task
on one axis.

    python analyses/figure3a_decile_curves.py LOGS... --out DIR [--seed S]

The recipe (section "decile-curves" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    law = fit_law(logs, by="task")
    plots.decile_curves(law, drafter)                   -> figures/figure3a_decile_curves.{png,pdf}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "decile-curves", *sys.argv[1:]], prog="python analyses/figure3a_decile_curves.py"))
