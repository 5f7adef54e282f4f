"""Figure 5 (Appendix B.5): accepted value against verifier budget for the oracle, entropy-keyed
and fixed-width policies, replayed from the logged top-k (needs topk_logq and target_rank).

    python analyses/figure5_width.py LOGS... --out DIR [--seed S]

The recipe (section "width" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    res = width.width_allocation(logs, budgets, n_boot=200, seed=S)
    plots.width_pareto(res)                              -> figures/figure5_width_pareto.{png,pdf}
    res, res.rescue, res.regret                          -> tables/figure5_*.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "width", *sys.argv[1:]], prog="python analyses/figure5_width.py"))
