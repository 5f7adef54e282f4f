"""Moved to :mod:`glance_law.replay.tree` (kept while glance_log.hooks imports this path)."""
import sys

from glance_law.replay import tree as _tree

sys.modules[__name__] = _tree
