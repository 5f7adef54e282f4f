"""Corollary (Appendix B.2): task ordering by grounding - mean a, mean H and slopes per task,
adjacent gaps with prompt-bootstrap intervals and a prompt-level Mann-Whitney test.

    python analyses/corollary_order.py LOGS... --out DIR [--seed S]

The recipe (section "ordering" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = order.task_order(logs, order, level, n_boot, seed)
    res, res.gap_table(), res.verdict_table()            -> tables/corollary_order*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "ordering", *sys.argv[1:]], prog="python analyses/corollary_order.py"))
