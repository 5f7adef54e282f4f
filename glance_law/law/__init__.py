"""The draftability law: the affine-logit model (:mod:`.model`), one group's statistics
(:mod:`.group`), the result objects (:mod:`.result`) and the grouped fit :func:`fit_law`."""
from .fit import LAW_INPUT, fit_law
from .model import (
    cap,
    expected_accepted,
    fit_affine_logit,
    fit_conditional_mean,
    law_supremum,
    loglik,
    match_prob,
    score_and_information,
    truncated_mean,
    truncated_mean_derivative,
    truncated_variance,
)
from .result import (
    CURVE_COLUMNS,
    DISPLAY_COLUMNS,
    LAW_COLUMNS,
    LAW_EXTRA_COLUMNS,
    POOLED,
    LawChecks,
    LawFit,
)

__all__ = ["match_prob", "truncated_mean", "truncated_mean_derivative", "truncated_variance",
           "expected_accepted", "loglik", "score_and_information", "fit_affine_logit",
           "fit_conditional_mean", "law_supremum", "cap", "fit_law", "LawFit", "LawChecks",
           "LAW_COLUMNS", "LAW_EXTRA_COLUMNS", "DISPLAY_COLUMNS", "CURVE_COLUMNS", "POOLED", "LAW_INPUT"]
