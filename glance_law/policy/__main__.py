"""``python -m glance_law.policy``: see :mod:`glance_law.policy.cli`."""
import sys

from .cli import main

sys.exit(main())
