"""Importers: foreign decode logs converted to the round-log contract (one module per source)."""
