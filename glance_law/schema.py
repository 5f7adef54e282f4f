"""Moved to :mod:`glance_law.data.schema` (this path is kept for users and older code)."""
import sys

from glance_law.data import schema as _schema

sys.modules[__name__] = _schema
