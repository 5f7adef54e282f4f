"""Provenance of a log: the ``glance.run`` JSON document every part file carries.

:func:`run_metadata` is the caller's fields (target, drafter configuration, dtype,
device, temperature, seed, ...) plus tool version, creation time, command line and
library versions; ``docs/schema.md`` lists the fields. Re-exported by
:mod:`glance_law.io`.
"""
from __future__ import annotations

import platform
import sys
from datetime import datetime, timezone

from glance_law._version import __version__
from glance_law.scrub import scrub, scrub_doc

__all__ = ["library_versions", "run_metadata"]


def library_versions() -> dict:
    """Versions of the libraries that shape results: the base dependencies (from package
    metadata when not imported, so nothing heavy is imported here) and torch/transformers
    when the process has imported them."""
    from importlib import metadata
    out = {"python": platform.python_version(), "glance-law": __version__}
    dists = {"numpy": "numpy", "scipy": "scipy", "pandas": "pandas", "pyarrow": "pyarrow",
             "statsmodels": "statsmodels", "sklearn": "scikit-learn", "torch": "torch",
             "transformers": "transformers"}
    for name, dist in dists.items():
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__version__", "?")
        elif name not in ("torch", "transformers"):
            try:
                out[name] = metadata.version(dist)
            except metadata.PackageNotFoundError:  # pragma: no cover - base deps are installed
                pass
    return out


def run_metadata(**fields) -> dict:
    """The ``glance.run`` JSON document: the caller's fields plus provenance defaults. The
    command line and every field are scrubbed: no credential of a location is stored."""
    meta = {
        "tool": "glance-law",
        "tool_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": scrub(" ".join(sys.argv)),
        "libraries": library_versions(),
    }
    meta.update({k: v for k, v in fields.items() if v is not None})
    return scrub_doc(meta)
