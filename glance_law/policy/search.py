"""One entry point over the replays: dense logs (:mod:`.trajectory`), per-offset logs (:mod:`.evaluate`) and
accepted runs only (:mod:`.runs`).

:func:`prepare_for` picks the replay the logs allow: the trajectory replay of a policy's own run
when they hold dense rounds (``glance-log --dense``), else the exact per-offset replay of every
tree budget or chain depth when the logs carry ``topk_logq`` and ``target_rank`` (glance-log,
converted GLANCE logs), else the sequential replay of draft depths from ``accepted`` and
``horizon`` (Spec-Bench answers, engine logs). :func:`policy_table` runs the matching held-out
evaluation; both return a :class:`~glance_law.policy.evaluate.PolicyTable`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..data.schema import SUPPLIED_BY
from ..errors import GlanceError, MissingColumnError
from .evaluate import PolicyData, PolicyTable, evaluate_policies, prepare
from .runs import RunData, evaluate_run_policies, prepare_runs
from .trajectory import DenseData, evaluate_trajectories, has_dense, prepare_dense

__all__ = ["prepare_for", "policy_table", "default_target"]

PER_OFFSET = ("topk_logq", "target_rank")


def prepare_for(rounds, *, drafter: str | None = None, shape: str | None = None, n_max: int = 255,
                feature: str = "auto") -> PolicyData | RunData | DenseData:
    """The replay data of one drafter: :class:`DenseData` (dense logs, ``glance-log --dense``: the
    trajectory replay), :class:`PolicyData` (per-offset columns: the logged roots) or
    :class:`RunData` (accepted runs only; depth policies)."""
    frame = getattr(rounds, "frame", rounds)
    cols = set(getattr(frame, "columns", ()))
    if set(PER_OFFSET) <= cols and has_dense(frame):
        return prepare_dense(rounds, drafter=drafter, shape=shape, n_max=n_max, feature=feature)
    if set(PER_OFFSET) <= cols:
        return prepare(rounds, drafter=drafter, shape=shape, n_max=n_max, feature=feature)
    missing = next(c for c in PER_OFFSET if c not in cols)
    if shape == "budget":
        raise MissingColumnError(f"the column {missing}", "tree-budget policies (--shape budget)",
                                 SUPPLIED_BY.get(missing))
    if {"accepted", "horizon", "prompt_id"} <= cols:
        return prepare_runs(rounds, drafter=drafter, max_depth=n_max)
    raise MissingColumnError(f"the column {missing} (or accepted, horizon and prompt_id for depth policies from "
                             "accepted runs)", "the policy replay", SUPPLIED_BY.get(missing))


def default_target(data: PolicyData | RunData | DenseData, budgets: Sequence[int] = (15,)) -> float:
    """The report's target: the first budget for tree budgets, half the median proposal for depths."""
    if isinstance(data, DenseData):
        data = data.rows
    if isinstance(data, RunData):
        return float(max(1, int(np.median(data.horizon)) // 2))
    return float(budgets[0] if data.shape == "budget" else max(1, int(np.median(data.cap)) // 2))


def policy_table(rounds, target: float, *, data: PolicyData | RunData | DenseData | None = None, drafter: str | None = None,
             families: Sequence[str] | None = None, folds: int = 5, n_boot: int = 200, level: float = 0.95,
             seed: int = 0, node_ms: float | None = None, pass_ms: float | None = None,
             constant_ms: float | None = None, policies: dict[str, Callable] | None = None,
             prompts=None, host_ms: float | None = None, groups: int | None = None, **prepare_kw) -> PolicyTable:
    """Held-out policy table from whichever replay the logs allow (:func:`prepare_for`).
    ``groups``: the prompt groups of the held-out jackknife on glance-log logs, logged roots or dense
    (default ``n_boot``).
    ``prompts``: the per-prompt table; on accepted-run logs its ``decode_ms`` gives the round
    cost (:func:`glance_law.policy.runs.run_cost_model`)."""
    d = data if data is not None else prepare_for(rounds, drafter=drafter, **prepare_kw)
    if isinstance(d, DenseData):
        return evaluate_trajectories(rounds, target, data=d, families=families, folds=folds, n_boot=n_boot,
                                     level=level, seed=seed, node_ms=node_ms, pass_ms=pass_ms,
                                     constant_ms=constant_ms, policies=policies, groups=groups)
    if isinstance(d, RunData):
        given = [k for k, v in (("--node-ms", node_ms), ("--pass-ms", pass_ms), ("--constant-ms", constant_ms),
                                ("--host-ms", host_ms)) if v is not None]
        if given:
            raise GlanceError(f"{', '.join(given)}: these logs carry accepted runs only, whose depth policies are "
                              "compared in tokens per round at equal mean depth; drop the cost option(s)")
        return evaluate_run_policies(rounds, target, families=families, folds=folds, n_boot=n_boot, level=level,
                                     seed=seed, policies=policies, data=d, prompts=prompts)
    return evaluate_policies(rounds, target, families=families, folds=folds, n_boot=n_boot, level=level, seed=seed,
                             node_ms=node_ms, pass_ms=pass_ms, constant_ms=constant_ms, policies=policies, data=d,
                             host_ms=host_ms, groups=groups)
