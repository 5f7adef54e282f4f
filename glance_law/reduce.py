"""`python -m glance_law.reduce`: see :mod:`glance_law.cli.reduce`."""
import sys

from glance_law.cli.reduce import main

if __name__ == "__main__":
    sys.exit(main())
