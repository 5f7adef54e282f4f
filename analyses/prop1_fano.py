"""Proposition 1 (i): Fano consistency of the logged root_pmax and root_entropy (needs --vocab-size
V or vocab_size in the run metadata).

    python analyses/prop1_fano.py LOGS... --out DIR [--seed S]

The recipe (section "fano" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    fano.fano_check(logs, vocab_size=V)                  -> tables/prop1_fano.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "fano", *sys.argv[1:]], prog="python analyses/prop1_fano.py"))
