"""Generic statistics over numpy arrays: prompt-clustered inference (:mod:`.cluster`), equal-count
curves and isotonic fits (:mod:`.curve`), the entropy-only noise ceiling (:mod:`.ceiling`), the
Kaplan-Meier survival of censored runs (:mod:`.survival`)."""
