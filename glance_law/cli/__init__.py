"""The command-line layer: ``python -m glance_law.fit`` (:mod:`.fit`), ``.report``
(:mod:`.report`) and ``.reduce`` (:mod:`.reduce`); thin ``main(argv) -> int`` functions."""
