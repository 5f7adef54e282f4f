"""The evidence analyses: per-offset law and Assumption 2 (:mod:`.offsets`), the mismatched-image
probe (:mod:`.probe`), task ordering (:mod:`.order`), law transfer (:mod:`.transfer`), the
lossless audit (:mod:`.audit`), the timing ledger (:mod:`.timing`); shared helpers in
:mod:`.common`."""
