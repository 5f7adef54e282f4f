"""Assumption 2 (Appendix B.2): the per-offset match law, conditional vs marginal hazards, the test
of the marginal-hazard survival and the survival by entropy decile.

    python analyses/assumption2_offsets.py LOGS... --out DIR [--seed S]

The recipe (section "offsets" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    offsets.offset_law, offsets.assumption2_test, offsets.offset_hazards, offsets.run_survival
                                                         -> tables/assumption2_*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "offsets", *sys.argv[1:]], prog="python analyses/assumption2_offsets.py"))
