"""Figure 8: the law fitted per task, with the decile means, their intervals and the isotonic curve
(and the decile table behind Figures 3(a), 4 and 8).

    python analyses/figure8_law_fits.py LOGS... --out DIR [--seed S]

The recipe (section "law-fits" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    law = fit_law(logs, by="task")
    plots.law_fits(law, drafter)                        -> figures/figure8_law_fits.{png,pdf}
    law.curve(task, drafter) for every group             -> tables/figure8_decile_table.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "law-fits", *sys.argv[1:]], prog="python analyses/figure8_law_fits.py"))
