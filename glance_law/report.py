"""`python -m glance_law.report`: see :mod:`glance_law.cli.report`."""
import sys

from glance_law.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
