"""Training and evaluation of the embedded default (target, tokenizer, block head).

Run as modules, never in CI:

``python -m glance_log.train.target``    build the tokenizer and train the target Llama
``python -m glance_log.train.block``     self-distil the block head on the target's greedy outputs
``python -m glance_log.train.evaluate``  held-out exact match and per-task entropy

See docs/default.md for the recipe and the measured quality.
"""
