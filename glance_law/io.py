"""Moved to :mod:`glance_law.data.io` (this path is kept for users and older code)."""
import sys

from glance_law.data import io as _io

sys.modules[__name__] = _io
