"""Table 16: the mismatched-image probe - the effect of the correct image on accepted length, raw
and entropy-controlled (needs glance-log --probe mismatched).

    python analyses/table16_probe.py LOGS... --out DIR [--seed S]

The recipe (section "probe" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = probe.probe(logs, "task", level, n_boot, seed)
                                                         -> tables/table16_probe.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "probe", *sys.argv[1:]], prog="python analyses/table16_probe.py"))
