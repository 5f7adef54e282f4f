"""User-facing errors. Every message is one line that names the input and says what to do.

CLIs catch :class:`GlanceError` (and :class:`glance_law.io.LogError`, a subclass),
print ``str(exc)`` to stderr and exit with code 2, without a traceback. The message never
carries a secret: a credential in a location it names is masked (:func:`glance_law.scrub.scrub`).
"""
from __future__ import annotations

from glance_law.scrub import scrub


class GlanceError(ValueError):
    """Bad input or an impossible request, explained in one line (secrets masked)."""

    def __init__(self, *args):
        super().__init__(*(scrub(a) if isinstance(a, str) else a for a in args))


class MissingColumnError(GlanceError):
    """An analysis needs a column (or a condition/arm) the logs do not carry."""

    def __init__(self, what: str, analysis: str, supplied_by: str | None = None):
        self.what = what
        self.analysis = analysis
        self.supplied_by = supplied_by
        hint = f"; record it with {supplied_by}" if supplied_by else ""
        super().__init__(f"{analysis} needs {what}, which the logs do not carry{hint}")
