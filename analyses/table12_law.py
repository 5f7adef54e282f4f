"""Table 12: the law per task (b0, b1 with prompt-clustered intervals, curve and round R^2, the
noise ceiling and its fraction, mean a, the floor against the cap and the law's supremum, the
four checks).

    python analyses/table12_law.py LOGS... --out DIR [--seed S]

The recipe (section "law" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    law = fit_law(logs, by="task")                      # glance_law.law
    law.to_frame()[appendix.LAW_TABLE_COLUMNS]           -> tables/table12_law.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "law", *sys.argv[1:]], prog="python analyses/table12_law.py"))
