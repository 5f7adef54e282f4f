"""Draft policies: from round logs to a rule a decoder follows round by round (docs/policy.md).

* :mod:`glance_law.policy.policies` - causal policies (fixed, entropy-keyed with a shadow
  price, gated depth) over :class:`RootStats`, JSON round trip;
* :mod:`glance_law.policy.evaluate` - exact replay of every shape, the round-cost model,
  prompt-grouped held-out evaluation (:func:`evaluate_policies`);
* ``python -m glance_law.policy LOGS --budget N --out policy.json`` - search and export.
"""
from .evaluate import (
    CostModel,
    PolicyData,
    PolicyTable,
    cost_model,
    evaluate_policies,
    evaluated_on,
    fit_family,
    prepare,
    prompt_folds,
    score_policy,
)
from .policies import (
    FAMILIES,
    FixedPolicy,
    GatedDepthPolicy,
    KeyedBudgetPolicy,
    KeyedDepthPolicy,
    Policy,
    RootStats,
    ThresholdPolicy,
    apply_policy,
    fit_threshold,
    load_policy,
    policy_from_dict,
    policy_to_dict,
    save_policy,
)

__all__ = ["RootStats", "Policy", "ThresholdPolicy", "FixedPolicy", "KeyedBudgetPolicy", "KeyedDepthPolicy",
           "GatedDepthPolicy", "FAMILIES", "apply_policy", "fit_threshold", "policy_to_dict", "policy_from_dict",
           "save_policy", "load_policy", "PolicyData", "CostModel", "PolicyTable", "prepare", "cost_model",
           "prompt_folds", "fit_family", "evaluate_policies", "evaluated_on", "score_policy"]
