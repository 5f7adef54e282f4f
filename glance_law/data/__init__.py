"""The data layer: the Parquet contract (:mod:`.schema`), reading and writing logs (:mod:`.io`),
provenance, row keys, the selection of rounds to fit, and importers of foreign logs
(:mod:`.importers`). Nothing here imports a statistic."""
