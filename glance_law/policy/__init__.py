"""Draft policies: from round logs to a rule a decoder follows round by round (docs/policy.md).

* :mod:`glance_law.policy.policies` - causal policies (fixed, entropy-keyed with a shadow
  price, gated depth) over :class:`RootStats`, JSON round trip;
* :mod:`glance_law.policy.cost` - the measured round-cost model (:func:`fit_cost`: draft passes,
  verified nodes, the policy's host work, prompt-clustered intervals);
* :mod:`glance_law.policy.evaluate` - exact replay of every shape, prompt-grouped held-out
  evaluation (:func:`evaluate_policies`);
* :mod:`glance_law.policy.runs` - depth policies replayed from accepted runs alone (Spec-Bench
  answers): acceptance-keyed depth with a shadow price, Hugging Face's heuristic schedule;
* :mod:`glance_law.policy.trajectory` - the trajectory replay on dense logs (``glance-log --dense``):
  a policy's own run walked position by position, its held-out search (:func:`evaluate_trajectories`);
* :mod:`glance_law.policy.search` - one entry over the replays (:func:`policy_table`);
* ``python -m glance_law.policy LOGS --budget N --out policy.json`` - search and export.
"""
from .cost import CostFit, CostModel, cost_model, fit_cost
from .evaluate import (
    PolicyData,
    PolicyTable,
    evaluate_policies,
    evaluated_on,
    fit_family,
    prepare,
    prompt_folds,
    score_policy,
)
from .policies import (
    ACCEPT_CONTEXTS,
    FAMILIES,
    AcceptKeyedDepthPolicy,
    FixedPolicy,
    GatedDepthPolicy,
    HeuristicDepthPolicy,
    KeyedBudgetPolicy,
    KeyedDepthPolicy,
    Policy,
    RootStats,
    ThresholdPolicy,
    accept_context,
    apply_policy,
    fit_threshold,
    load_policy,
    policy_from_dict,
    policy_to_dict,
    save_policy,
)
from .runs import RunData, evaluate_run_policies, fit_accept_policy, prepare_runs, replay_policy
from .search import policy_table, prepare_for
from .trajectory import DenseData, Trajectory, evaluate_trajectories, prepare_dense, simulate

__all__ = ["RootStats", "Policy", "ThresholdPolicy", "FixedPolicy", "KeyedBudgetPolicy", "KeyedDepthPolicy",
           "GatedDepthPolicy", "FAMILIES", "apply_policy", "fit_threshold", "policy_to_dict", "policy_from_dict",
           "save_policy", "load_policy", "PolicyData", "CostModel", "PolicyTable", "prepare", "cost_model",
           "prompt_folds", "fit_family", "evaluate_policies", "evaluated_on", "score_policy",
           "AcceptKeyedDepthPolicy", "HeuristicDepthPolicy", "ACCEPT_CONTEXTS", "accept_context", "RunData", "prepare_runs",
           "fit_accept_policy", "replay_policy", "evaluate_run_policies", "policy_table", "prepare_for",
           "DenseData", "Trajectory", "prepare_dense", "simulate", "evaluate_trajectories", "CostFit", "fit_cost"]
