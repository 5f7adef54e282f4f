"""The glance-log command (placeholder until the logger lands)."""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    print("glance-log: not implemented yet (the round logger is being built; see README)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
