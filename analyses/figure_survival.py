"""Theorem 2 (Appendix B.4): run-length survival P(a >= l) at each task's entropy floor - observed,
the geometric law and the two-state model.

    python analyses/figure_survival.py LOGS... --out DIR [--seed S]

The recipe (section "survival" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    fit = tail.fit_tail(logs, law=fit_law(logs))
    plots.survival_curves(fit)                           -> figures/figure_survival.{png,pdf}
    fit[task].survival_table()                           -> tables/figure_survival_table.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "survival", *sys.argv[1:]], prog="python analyses/figure_survival.py"))
