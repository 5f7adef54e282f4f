"""Table 7: the lossless audit - every speculative output against greedy decoding, near-ties
explained (needs the prompt files, glance-log --audit or --baseline).

    python analyses/table7_audit.py LOGS... --out DIR [--seed S]

The recipe (section "audit" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = audit.audit(prompts, rounds, threshold=0.1)
    res, res.divergences()                              -> tables/table7_*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "audit", *sys.argv[1:]], prog="python analyses/table7_audit.py"))
