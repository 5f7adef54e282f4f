"""The whole theory appendix: every analyses/ script at once (= python -m glance_law.report).

    python analyses/make_appendix.py LOGS... --out DIR [--seed S] [--only S1,S2] [--skip S3]

See ``python -m glance_law.report --help`` and ``--list`` for the sections.
"""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main(prog="python analyses/make_appendix.py"))
