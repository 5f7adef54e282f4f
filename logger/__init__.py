"""glance_log: a round logger for speculative decoders (torch/transformers)."""
