"""Frozen result objects (statsmodels/lifelines style).

Every statistic returns a frozen dataclass deriving from :class:`Result`. A
subclass supplies ``to_frame()`` (one flat row per group, intervals as
``x, x_lo, x_hi``) and a ``title``; the base class gives ``summary()`` in every
format, ``to_latex()``, ``to_markdown()``, ``to_json()``, ``_repr_html_`` for
notebooks and a readable ``repr``. Formatting itself lives in
:mod:`glance_law.results.format`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd

from . import format as _fmt


@dataclass(frozen=True)
class Result:
    """Base class: subclasses implement :meth:`to_frame` and set ``title``."""

    title: ClassVar[str] = "result"

    def to_frame(self) -> pd.DataFrame:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def notes(self) -> tuple[str, ...]:
        """Caveats printed under the table (skipped inputs, exclusions, method notes)."""
        return ()

    #: Columns a width-limited text table always keeps (besides the first).
    display_keep: ClassVar[tuple[str, ...]] = ()

    def display_frame(self) -> pd.DataFrame:
        """The table human formats print (default: :meth:`to_frame`; JSON/CSV always print to_frame)."""
        return self.to_frame()

    def summary(self, fmt: str = "text", digits: int = 3, width: int | None = None) -> str:
        """The table in ``fmt``; ``width`` (text): fit that many characters, naming the columns left out."""
        frame = self.display_frame() if fmt in _fmt.HUMAN else self.to_frame()
        return _fmt.render(frame, fmt, self.title, self.notes, digits, width=width, keep=self.display_keep)

    def to_latex(self, digits: int = 3) -> str:
        return self.summary("latex", digits)

    def to_markdown(self, digits: int = 3) -> str:
        return self.summary("markdown", digits)

    def to_json(self) -> str:
        return self.summary("json")

    def _repr_html_(self) -> str:
        return self.summary("html")

    def __str__(self) -> str:
        return self.summary("text")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>\n{self.summary('text')}"


@dataclass(frozen=True, eq=False)
class TableResult(Result):
    """A result that is one table plus its notes (subclasses set ``title`` and may add fields
    after these three)."""

    frame: pd.DataFrame
    level: float = 0.95
    extra_notes: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        return self.frame.copy()

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self.extra_notes)
