"""Table 13: correlations of a with H and with a signal column v, the partial correlation given H
and the within-entropy-decile gaps (--signal COLUMN; default: the logs' extra numeric columns,
else position).

    python analyses/table13_correlations.py LOGS... --out DIR [--seed S]

The recipe (section "correlations" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = probe.signal_effect(logs, column)              # glance_law.evidence.probe
    res, res.deciles()                                   -> tables/table13_*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "correlations", *sys.argv[1:]], prog="python analyses/table13_correlations.py"))
