"""`python -m glance_law.ingest`: see :mod:`glance_law.cli.ingest`."""
import sys

from glance_law.cli.ingest import main

if __name__ == "__main__":
    sys.exit(main())
