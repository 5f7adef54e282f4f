"""``python -m glance_law.policy``: see :mod:`glance_law.policy.cli`."""
import sys

from glance_law.policy.cli import main

if __name__ == "__main__":
    sys.exit(main())
