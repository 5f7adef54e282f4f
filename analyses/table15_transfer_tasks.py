"""Table 15: leave one task out - the law fitted on the other tasks, frozen, scored on the held-out
task.

    python analyses/table15_transfer_tasks.py LOGS... --out DIR [--seed S]

The recipe (section "transfer-tasks" of glance_law.appendix, public API only):

    logs = read_logs(LOGS)                               # glance_law.io
    for task: transfer.transfer(logs, other_tasks, [task], by="task")
                                                         -> tables/table15_transfer_tasks.{md,tex,csv}

Writes DIR/tables/*.md, .tex (booktabs) and .csv, DIR/figures/*.png and .pdf, and
DIR/index.md + DIR/manifest.json (other sections already in DIR are kept when they
were made from the same logs). A section whose inputs the logs lack is reported as
skipped with the glance-log flag that records them. Every option of
``python -m glance_law.report`` applies (``--help``).
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(["--only", "transfer-tasks", *sys.argv[1:]], prog="python analyses/table15_transfer_tasks.py"))
