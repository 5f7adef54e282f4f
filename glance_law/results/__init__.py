"""The output layer: the frozen :class:`Result` base (:mod:`.base`), rendering (:mod:`.format`)
and the figures (:mod:`.plots`)."""
from .base import Result, TableResult

__all__ = ["Result", "TableResult"]
