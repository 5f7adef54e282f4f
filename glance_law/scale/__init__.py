"""Out-of-core: sufficient statistics per cell (:mod:`.reduce`), reduction engines over Parquet
files (:mod:`.engines`), and the law, curve, ceiling and tail fitted from a reduction
(:mod:`.law_reduced`, :mod:`.curve_reduced`)."""
