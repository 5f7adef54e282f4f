"""The command-line layer: ``python -m glance_law.fit`` (:mod:`.fit`), ``.report``
(:mod:`.report`), ``.reduce`` (:mod:`.reduce`) and ``.ingest`` (:mod:`.ingest`); thin
``main(argv) -> int`` functions."""
