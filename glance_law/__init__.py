"""glance-law: how long a draft will the target accept, and why.

An offline library (no torch) over round logs written by ``glance-log``:
the affine-logit draftability law, the noise ceiling, the grounded tail,
Fano bounds, width allocation and the evidence analyses.
"""
from glance_law._version import __version__
from glance_law.data.io import (
    LogError,
    LogSet,
    LogWriter,
    read_logs,
    read_prompts,
    read_rounds,
    write_table,
)

__all__ = [
    "__version__",
    "LogError", "LogSet", "LogWriter", "read_logs", "read_prompts", "read_rounds", "write_table",
]
