"""Table 14: the law fitted on one drafter (--reference-drafter, default block), frozen, scored on
every other drafter (needs two speculative drafters).

    python analyses/table14_transfer_drafters.py LOGS... --out DIR [--seed S]

The recipe (section "transfer-drafters" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = transfer.transfer(logs, [reference], others, by="drafter")
    res, res.calibration()                               -> tables/table14_*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "transfer-drafters", *sys.argv[1:]], prog="python analyses/table14_transfer_drafters.py"))
