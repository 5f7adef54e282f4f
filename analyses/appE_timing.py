"""Appendix E: the timing ledger - paired ms/token of each speculative arm against the
autoregressive arm, and the round-cost regression (needs glance-log --baseline and the prompt
files).

    python analyses/appE_timing.py LOGS... --out DIR [--seed S]

The recipe (section "timing" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = timing.timing_ledger(ar_prompts, spec_prompts, n_boot=8000, seed=S)
    timing.round_cost(spec_rounds, ar_rounds, ar_prompts)  -> tables/appE_*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "timing", *sys.argv[1:]], prog="python analyses/appE_timing.py"))
