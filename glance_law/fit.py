"""`python -m glance_law.fit`: see :mod:`glance_law.cli.fit`."""
import sys

from glance_law.cli.fit import main

if __name__ == "__main__":
    sys.exit(main())
