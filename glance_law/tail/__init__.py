"""The grounded tail (Proposition 3): the two-state survival model (:mod:`.model`), its
maximum-likelihood fit (:mod:`.mle`), prompt-disjoint held-out tests (:mod:`.heldout`) and the
per-task analysis with its results and ``--tail`` section (:mod:`.report`)."""
from .heldout import HeldoutTest
from .model import (
    LRT,
    N_IDENTIFIED,
    NOMINAL_LRT_DF,
    PARAMS,
    GeometricFit,
    Invariants,
    TwoStateFit,
    bootstrap_p,
    cap,
    expected_cells,
    fit_geometric,
    fit_two_state,
    geometric_variance,
    hazard,
    histogram_design_effect,
    invariants,
    law_supremum,
    loglik,
    lrt_test,
    mean,
    pi_needed,
    pi_star,
    pmf,
    pooled_chi_square,
    survival,
    variance,
)
from .report import (
    CLI_COLUMNS,
    HELDOUT_COLUMNS,
    MODEL_COLUMNS,
    TAIL_COLUMNS,
    TAIL_EXTRA,
    TailFit,
    TailHeldout,
    TailModels,
    TaskTail,
    add_cli_arguments,
    cli_section,
    fit_tail,
    tail_test,
)

__all__ = ["TwoStateFit", "GeometricFit", "Invariants", "TaskTail", "TailFit", "TailModels", "TailHeldout",
           "HeldoutTest", "survival", "pmf", "mean", "variance", "hazard", "invariants", "law_supremum",
           "cap", "pi_star", "pi_needed", "geometric_variance", "fit_geometric", "fit_two_state", "loglik",
           "pooled_chi_square", "expected_cells", "histogram_design_effect", "bootstrap_p", "lrt_test", "LRT",
           "tail_test", "fit_tail", "cli_section", "add_cli_arguments", "PARAMS", "N_IDENTIFIED",
           "NOMINAL_LRT_DF", "TAIL_COLUMNS", "TAIL_EXTRA", "MODEL_COLUMNS", "HELDOUT_COLUMNS", "CLI_COLUMNS"]
