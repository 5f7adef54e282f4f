"""Proposition 3 (Appendix B.4): the entropy floor of each task - geometric vs two-state survival,
the likelihood-ratio test, Pearson chi-square, and the prompt-disjoint held-out tests.

    python analyses/prop3_tail.py LOGS... --out DIR [--seed S]

The recipe (section "tail" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    fit = tail.fit_tail(logs, law=fit_law(logs), n_boot=199, seed=S)
    fit, fit.models(), fit.heldout_table()               -> tables/prop3_*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "tail", *sys.argv[1:]], prog="python analyses/prop3_tail.py"))
