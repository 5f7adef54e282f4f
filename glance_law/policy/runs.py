"""Depth policies from accepted runs alone (Spec-Bench answers and any log without per-offset columns).

A log that records only each round's accepted count and horizon cannot replay entropy-keyed
trees, but it can replay *depth schedules* for a chain (docs/policy.md, "Logs with accepted
runs only"): :mod:`glance_law.replay.runs` steps every prompt's turns round by round, a policy
choosing each round's depth from what the decoder knows at its root (the previous round's
depth and accepted count), and reads the accepted run off the logged one. The families:

* ``fixed`` - the same depth every round (the baseline; every depth 1..K is replayed, K the
  deepest logged horizon, so a policy is compared with the fixed depth at its mean depth);
* ``keyed-accept`` - :class:`~glance_law.policy.policies.AcceptKeyedDepthPolicy`: offset j is
  worth P(run >= j | previous round's acceptance rate), Kaplan-Meier from the training prompts'
  logged runs, and the round drafts every offset worth the shadow price, the price fitted by
  replaying the training prompts so the mean depth meets the target;
* ``hf-heuristic`` - Hugging Face's heuristic schedule (start 5, +2 after a fully accepted
  draft, else -1), nothing fitted.

Held-out: prompt-grouped K-fold (:func:`glance_law.policy.evaluate.prompt_folds`), the fit on
the training prompts, the replay scored on the others; intervals from the prompt-level
bootstrap. The result is a :class:`~glance_law.policy.evaluate.PolicyTable`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..data.arms import label_targets
from ..data.keys import cluster_codes
from ..data.selection import with_drafted_horizons
from ..errors import GlanceError, MissingColumnError
from ..replay.runs import ReplayTotals, RunState, RunStreams, replay_depths, run_streams
from ..stats.cluster import bootstrap_counts, percentile_interval
from ..stats.survival import run_survival
from .cost import CostModel
from .evaluate import PolicyTable, evaluated_on, interp_up, prompt_folds, select_rounds
from .policies import (
    ACCEPT_CONTEXTS,
    AcceptKeyedDepthPolicy,
    FixedPolicy,
    HeuristicDepthPolicy,
    RootStats,
    accept_context,
    apply_policy,
)

__all__ = ["RunData", "prepare_runs", "fit_accept_policy", "replay_policy", "evaluate_run_policies", "run_cost_model",
           "RUN_FAMILIES", "MIN_CONTEXT_ROUNDS", "MIN_COST_PROMPTS"]

#: families searched on accepted-run logs
RUN_FAMILIES = ("keyed-accept", "hf-heuristic")
#: a context with fewer training rounds uses the pooled survival
MIN_CONTEXT_ROUNDS = 30
#: timed prompts needed for the round-cost regression (three terms)
MIN_COST_PROMPTS = 20


@dataclass(frozen=True, eq=False)
class RunData:
    """One drafter's logged rounds as streams (a prompt's turns) for the sequential replay.

    ``streams`` the per-position layout; ``stream_prompt`` (S,) each stream's prompt code 0..G-1;
    ``keys`` (G,) the prompts' (task, prompt_id); per logged round: ``stream`` (R,),
    ``accepted``, ``horizon``, ``censored`` (the whole draft accepted, or cut by the output's
    end: the run is only known to be at least ``accepted``) and ``context`` (the previous round's
    acceptance context, :data:`~glance_law.policy.policies.ACCEPT_CONTEXTS`); ``max_depth`` the
    deepest depth replayed; ``stream_run`` / ``runs`` the run (file) of each stream."""

    streams: RunStreams
    stream_prompt: np.ndarray
    keys: tuple
    stream: np.ndarray
    accepted: np.ndarray
    horizon: np.ndarray
    censored: np.ndarray
    context: np.ndarray
    max_depth: int
    drafter: str
    notes: tuple[str, ...] = ()
    shape: str = "depth"
    feature: str = "accepted history"
    stream_run: np.ndarray | None = None      # (S,) each stream's run code (index into ``runs``)
    runs: tuple = ()                          # run_id of each run code ('' without a run_id column)

    @property
    def rounds(self) -> int:
        return int(self.accepted.size)

    @property
    def prompts(self) -> int:
        return len(self.keys)

    @property
    def codes(self) -> np.ndarray:
        """Prompt code of every logged round."""
        return self.stream_prompt[self.stream]

    def streams_of(self, prompts) -> np.ndarray:
        """Indices of the streams of these prompt codes."""
        return np.flatnonzero(np.isin(self.stream_prompt, np.asarray(prompts)))

    def rounds_of(self, prompts) -> np.ndarray:
        return np.flatnonzero(np.isin(self.codes, np.asarray(prompts)))


def prepare_runs(rounds, *, drafter: str | None = None, condition: str | None = "matched", task: str | None = None,
                 max_depth: int | None = None) -> RunData:
    """One drafter's rounds as streams: a stream is one generation call (run, task, prompt, turn),
    its rounds in order. Needs ``prompt_id``, ``accepted`` and ``horizon``; uses ``run_id``,
    ``turn``, ``round`` and ``ends_output`` when present. ``max_depth``: the deepest depth
    replayed (default: the deepest logged horizon)."""
    frame = getattr(rounds, "frame", rounds)
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError("policy evaluation expects a rounds DataFrame or a LogSet from glance_law.read_logs")
    for c in ("prompt_id", "accepted", "horizon"):
        if c not in frame.columns:
            raise MissingColumnError(f"the column {c}", "the run-length policy replay")
    # an importer cuts an output-ending round's horizon to its accepted run; the decoder drafted more
    # (restored before the selection, which would read a horizon cut to 0 as a round without a draft)
    cut_col = "\0drafted_horizon_used"  # a name no log can carry, dropped after the selection
    frame, cut = with_drafted_horizons(frame)
    if cut.any():
        frame = frame.assign(**{cut_col: cut})
    frame, drafter, notes = select_rounds(frame, drafter=drafter, condition=condition, task=task, keep_undrafted=True)
    if cut_col in frame.columns:
        n_cut = int(frame[cut_col].sum())
        frame = frame.drop(columns=cut_col)
        if n_cut:
            notes.insert(0, f"{n_cut} output-ending round(s) replayed at their drafted horizon (drafted_horizon), "
                         "not the horizon cut to their accepted run")
    a = pd.to_numeric(frame["accepted"], errors="coerce").to_numpy(dtype=np.float64)
    h = pd.to_numeric(frame["horizon"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(a) | ~np.isfinite(h) | (a < 0) | (a > h) | (a != np.floor(a)) | (h != np.floor(h))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GlanceError(f"{int(bad.sum())} round(s) with accepted outside 0..horizon or not integers (first: "
                          f"accepted={a[i]}, horizon={h[i]}); fix the columns accepted/horizon or re-import the log")
    skey = [c for c in ("run_id", "task", "prompt_id", "turn") if c in frame.columns]
    codes, _ = cluster_codes(frame, skey)
    if "round" in frame.columns:
        rnd = pd.to_numeric(frame["round"], errors="coerce").to_numpy(np.float64)
        if not np.isfinite(rnd).all():
            raise GlanceError(f"{int((~np.isfinite(rnd)).sum())} round(s) without a round index; fix the column "
                              "round (the rounds' order within a prompt) or drop it to use the file order")
        key = pd.DataFrame({"s": codes, "r": rnd})
        if key.duplicated().any():
            raise GlanceError(f"{int(key.duplicated().sum())} round(s) repeat the round index of their prompt's turn "
                              f"({', '.join(skey)}): the order of the rounds is ambiguous; give each turn its own "
                              "turn value or each run its own run_id")
    else:
        rnd = np.arange(len(frame), dtype=np.float64)
        notes.append("no round column: rounds replayed in file order within each prompt's turn")
    order = np.lexsort((rnd, codes))
    frame = frame.iloc[order]
    stream = codes[order]
    a, h = a[order].astype(np.int64), h[order].astype(np.int64)
    _, stream = np.unique(stream, return_inverse=True)
    last = np.r_[stream[1:] != stream[:-1], True]
    ends = last
    if "ends_output" in frame.columns:
        eo = frame["ends_output"]
        na = eo.isna().to_numpy()
        if na.any():
            notes.append(f"{int(na.sum())} round(s) with ends_output missing read as not output-ending")
        ends = np.asarray(eo.where(~eo.isna(), False), dtype=bool) | last
    undrafted = h == 0
    if undrafted.any():
        notes.append(f"{int(undrafted.sum())} round(s) without a draft (horizon 0) kept in their streams (each "
                     "commits its one token); no run is read off them")
    streams = run_streams(stream, a, h, ends)
    pcodes, G = cluster_codes(frame)
    stream_prompt = np.zeros(streams.streams, np.int64)
    stream_prompt[stream] = pcodes
    if np.any(stream_prompt[stream] != pcodes):
        raise GlanceError("a stream spans several prompts (task, prompt_id): check the prompt_id column")
    kf = frame[[c for c in ("task", "prompt_id") if c in frame.columns]].astype(str)
    keys: list = [None] * G
    for c, row in zip(pcodes, kf.itertuples(index=False)):
        keys[c] = tuple(row)
    run_names: tuple = ("",)
    stream_run = np.zeros(streams.streams, np.int64)
    if "run_id" in frame.columns:
        rc, uniq = pd.factorize(frame["run_id"].astype(str), sort=True)
        run_names = tuple(str(u) for u in uniq)
        stream_run[stream] = rc
    first = np.r_[True, stream[1:] != stream[:-1]]
    prev_a = np.r_[-1, a[:-1]]
    prev_h = np.r_[-1, h[:-1]]
    context = np.where(first, 0, accept_context(prev_a, prev_h))
    cens = (a >= h) | ends                       # the whole draft accepted, or cut by the output's end
    deepest = int(h[~ends].max(initial=0)) if (~ends).any() else int(h.max())
    K = deepest if max_depth is None else int(min(max_depth, max(deepest, 1)))
    if K < 1:
        raise GlanceError(f"drafter {drafter!r}: no round drafted a token (every horizon is 0)")
    notes.append(f"{drafter}: {a.size} logged rounds in {streams.streams} streams (turns) of {G} prompts replayed "
                 f"at depths 1..{K}; a round rooted inside a logged round reads its run off that round (exact for a "
                 "drafter that continues its own chain, e.g. a greedy draft model; an approximation for tree and "
                 "multi-head drafters), and where the logged round accepted its whole draft the drafter's guess "
                 "of the target's bonus token is unknown: the main columns assume it misses, the *_ifmatch columns "
                 "that it matches; a round reaching it is counted as censored")
    return RunData(streams=streams, stream_prompt=stream_prompt, keys=tuple(keys), stream=stream, accepted=a,
                   horizon=h, censored=cens, context=context, max_depth=K, drafter=str(drafter), notes=tuple(notes),
                   stream_run=stream_run, runs=run_names)


def _choose(policy: Callable, cap: int):
    """Wrap a policy over RootStats into the replay's ``choose(state)`` (depths capped at ``cap``)."""
    def choose(state: RunState) -> np.ndarray:
        n = state.stream.size
        stats = RootStats(entropy=np.full(n, np.nan), horizon=np.full(n, cap, np.int64),
                          position=state.position.astype(np.float64), prev_accepted=state.prev_accepted,
                          prev_shape=state.prev_depth)
        return np.minimum(apply_policy(policy, stats), int(cap))
    return choose


def replay_policy(d: RunData, policy: Callable, streams: np.ndarray | None = None, *,
                  bound: str = "lower") -> ReplayTotals:
    """Replay ``policy`` (a built-in or ``f(RootStats) -> depths``, capped at ``d.max_depth``) on
    the streams ``streams`` (default all); ``bound``: a censored run ends at the drafter's unknown
    guess of the bonus token (``"lower"``) or continues (``"upper"``)."""
    st = d.streams if streams is None else d.streams.take(streams)
    return replay_depths(st, _choose(policy, d.max_depth), bound=bound)


def _survival_table(accepted, censored, context, K: int) -> np.ndarray:
    """Kaplan-Meier P(run >= k | context), k = 1..K, one row per context (the pooled runs where a
    context has fewer than MIN_CONTEXT_ROUNDS); -1 where not estimated."""
    a, c, ctx = np.asarray(accepted), np.asarray(censored, bool), np.asarray(context)
    pooled = run_survival(a, c, K)
    S = np.empty((len(ACCEPT_CONTEXTS), K))
    for i in range(len(ACCEPT_CONTEXTS)):
        m = ctx == i
        S[i] = run_survival(a[m], c[m], K) if m.sum() >= MIN_CONTEXT_ROUNDS else pooled
    return np.where(np.isfinite(S), S, -1.0)          # -1: not estimated (never drafted)


def fit_accept_policy(d: RunData, prompts: np.ndarray, target: float, *, refits: int = 2) -> AcceptKeyedDepthPolicy:
    """Fit the keyed-accept policy on the prompts ``prompts``.

    The survival table starts from their logged runs in the logged contexts; then, ``refits``
    times, the policy is replayed on their streams and the table re-estimated from the runs at
    the policy's own roots in the contexts the policy itself produces (a context means something
    else at another depth: "whole draft accepted" after one token is weaker evidence than after
    five), so the rule is consistent with the trajectories it creates. Each time the price is
    found by bisection over the prices that change a depth, taking the largest mean depth not
    above ``target`` (assuming the mean depth falls as the price rises, which holds for the
    table's depths but not strictly for the replay's trajectories). Even the highest price drafts
    ``explore`` tokens after a round without a draft, so a target below that is not met
    (:func:`evaluate_run_policies` notes it)."""
    rounds = d.rounds_of(prompts)
    st = d.streams.take(d.streams_of(prompts))
    S = _survival_table(d.accepted[rounds], d.censored[rounds], d.context[rounds], d.max_depth)
    pol = _fit_price(_table_policy(S, d.max_depth), st, d.max_depth, target)
    for _ in range(int(refits)):
        _, rec = replay_depths(st, _choose(pol, d.max_depth), record=True)
        ctx = accept_context(rec["prev_accepted"], rec["prev_depth"])
        S = _survival_table(rec["run"], rec["run_censored"], ctx, d.max_depth)
        pol = _fit_price(_table_policy(S, d.max_depth), st, d.max_depth, target)
    return pol


def _table_policy(S: np.ndarray, max_depth: int) -> AcceptKeyedDepthPolicy:
    return AcceptKeyedDepthPolicy(survival=tuple(tuple(float(x) for x in row) for row in S), max_size=max_depth)


def _fit_price(pol: AcceptKeyedDepthPolicy, st: RunStreams, max_depth: int, target: float) -> AcceptKeyedDepthPolicy:
    S = np.asarray(pol.survival)
    cands = np.unique(S[S >= 0])[::-1]                 # descending prices: depth grows along the list
    cands = np.r_[np.nextafter(cands[0], np.inf) if cands.size else 1.0, cands]

    def mean_depth(t):
        tot = replay_depths(st, _choose(_with_price(pol, t), max_depth))
        return tot.depth.sum() / max(tot.rounds.sum(), 1)

    lo, hi = 0, cands.size - 1                          # lo: the highest price (the least drafting)
    if mean_depth(cands[hi]) <= target:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mean_depth(cands[mid]) <= target:
            lo = mid
        else:
            hi = mid
    return _with_price(pol, float(cands[lo]))


def _with_price(pol: AcceptKeyedDepthPolicy, t: float) -> AcceptKeyedDepthPolicy:
    return replace(pol, threshold=float(t))


def _prompt_sums(d: RunData, tot: ReplayTotals, streams: np.ndarray) -> np.ndarray:
    """(G, 4) per prompt: rounds, tokens, depth, censored rounds of the replayed ``streams``."""
    p = d.stream_prompt[streams]
    G = d.prompts
    return np.stack([np.bincount(p, weights=getattr(tot, k), minlength=G)
                     for k in ("rounds", "tokens", "depth", "censored")], axis=1)


def run_cost_model(prompts: pd.DataFrame, d: RunData, notes: list | None = None) -> CostModel:
    """Round cost from whole-turn timings: per prompt, ``decode_ms = c_turn * turns + c_round *
    rounds + c_token * drafted tokens`` (OLS over prompts, HC1 errors). A depth-d round then
    costs ``c_round + c_token * d`` ms (the turn term, prefill included, does not depend on the
    policy). Identified when both slopes are positive and the drafted-token slope is at least
    twice its standard error - which needs depths that vary between rounds (a schedule such as
    Hugging Face's); a fixed-shape drafter's drafted tokens are rounds times the shape, and
    its cost is left unidentified (noted)."""
    notes = notes if notes is not None else []
    need = {"task", "prompt_id", "decode_ms"}
    if prompts is None or not need <= set(prompts.columns):
        notes.append("no per-prompt decode_ms: no round cost, no modelled ms per token")
        return CostModel()
    P = label_targets(prompts)                  # the rounds' arm labels (drafter @ target) where targets differ
    if "drafter" in P.columns:
        P = P.loc[P["drafter"].astype(str) == d.drafter]
    if "condition" in P.columns:
        P = P.loc[P["condition"].astype(str) == "matched"]
    # one unit per (run, prompt): the rounds of that run's streams against that run's timing
    runs = d.stream_run if d.stream_run is not None else np.zeros(d.streams.streams, np.int64)
    nrun = max(len(d.runs), 1)
    unit_of_stream = runs * d.prompts + d.stream_prompt
    U = nrun * d.prompts
    run_index = {r: i for i, r in enumerate(d.runs)}
    index = {k: i for i, k in enumerate(d.keys)}
    if "run_id" in P.columns and d.runs != ("",):
        ri = np.array([run_index.get(r, -1) for r in P["run_id"].astype(str)], np.int64)
    elif len(d.runs) <= 1:                      # one run: every prompt row is its timing
        ri = np.zeros(len(P), np.int64)
    else:
        notes.append("round cost not identified: the prompt table has no run_id to match the runs' rounds")
        return CostModel()
    pi = np.array([index.get((str(t), str(q)), -1) for t, q in zip(P["task"], P["prompt_id"])], np.int64)
    ms = pd.to_numeric(P["decode_ms"], errors="coerce").to_numpy(np.float64)
    known = (ri >= 0) & (pi >= 0)
    unit = np.where(known, ri * d.prompts + pi, -1)
    untimed = np.bincount(unit[known & ~np.isfinite(ms)], minlength=U) > 0
    y = np.bincount(unit[known & np.isfinite(ms)], weights=ms[known & np.isfinite(ms)], minlength=U)
    has = np.bincount(unit[known], minlength=U) > 0
    timed = has & ~untimed
    if (has & untimed).any() or (~known).any():
        notes.append(f"round cost: {int((has & untimed).sum())} run-prompt pair(s) with a missing decode_ms and "
                     f"{int((~known).sum())} prompt row(s) without rounds left out")
    turns = np.bincount(unit_of_stream, minlength=U).astype(np.float64)      # streams are turns
    su = unit_of_stream[d.stream]
    rounds = np.bincount(su, minlength=U).astype(np.float64)
    drafted = np.bincount(su, weights=d.horizon, minlength=U)
    X = np.stack([turns, rounds, drafted], 1)[timed]
    y = y[timed]
    n = int(timed.sum())
    if n < MIN_COST_PROMPTS:
        notes.append(f"round cost not identified: {n} timed prompt(s); at least {MIN_COST_PROMPTS} are needed for "
                     "three terms")
        return CostModel()
    scale = np.maximum(np.linalg.norm(X, axis=0), 1e-300)
    if np.linalg.matrix_rank(X / scale, tol=1e-8) < 3:
        notes.append("round cost not identified: every round drafts the same depth, so drafted tokens are "
                     "rounds times that depth (a schedule that varies the depth identifies the per-token cost); "
                     "modelled ms per token not reported")
        return CostModel()
    XtX_inv = np.linalg.pinv(X.T @ X)
    beta = XtX_inv @ X.T @ y
    e = y - X @ beta
    cov = XtX_inv @ (X.T * e ** 2) @ X @ XtX_inv * n / max(n - 3, 1)
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    c_turn, c_round, c_tok = (float(b) for b in beta)
    what = (f"decode_ms per prompt = {c_turn:.1f} x turns + {c_round:.2f} x rounds + {c_tok:.3f} x drafted tokens "
            f"(OLS over {n} prompts; HC1 se {se[0]:.1f}, {se[1]:.2f}, {se[2]:.3f})")
    if not (c_round > 0 and c_tok > 0 and c_tok > 2 * se[2]):
        notes.append(f"round cost not identified: {what}; modelled ms per token not reported")
        return CostModel()
    notes.append(f"round cost: {what}")
    z = 1.959963984540054           # HC1 normal intervals over the timed prompts
    return CostModel(constant=c_round, pass_ms=c_tok, node_ms=0.0, passes_per_node=True,
                     source="per-prompt regression of decode_ms on turns, rounds and drafted tokens",
                     intervals=(("constant_ms", c_round - z * se[1], c_round + z * se[1]),
                                ("ms_per_draft_pass", c_tok - z * se[2], c_tok + z * se[2])),
                     assumptions=("a depth-d round costs c_round + c_token x d (the turn term, prefill included, does "
                                  "not depend on the policy)", "the schedule's host work is negligible (not in the "
                                  "per-prompt timings' model)"))


def _summary(w, P, F, cost: CostModel | None = None):
    """tokens/round, mean depth, fixed tokens at that depth, gain %, censored share for prompt
    weights w; with an identified cost, modelled ms per token and the speedup over the fixed
    depth with the lowest modelled ms per token."""
    r, t, dep, cen = w @ P
    T, D = t / r, dep / r
    fr, ft, fd = w @ F[0], w @ F[1], w @ F[2]
    fixed = interp_up(D, fd / fr, ft / fr)
    out = {"tokens": T, "mean_shape": D, "fixed_tokens": fixed, "gain": 100.0 * (T / fixed - 1.0),
           "censored": cen / r}
    if cost is not None and cost.identified:
        M = (cost.constant * r + cost.pass_ms * dep) / t
        best = np.min((cost.constant * fr + cost.pass_ms * fd) / ft)
        out.update(ms_per_token=M, speedup_best_fixed=best / M)
    return out


def _score(P, F, n_boot, level, seed, cost: CostModel | None = None) -> dict:
    """Point values and prompt-bootstrap intervals (the same resamples for every row: ``seed``;
    the cost held at its estimate)."""
    G = P.shape[0]
    out = _summary(np.ones(G), P, F, cost)
    if n_boot > 0 and G >= 2:
        draws: dict[str, list] = {k: [] for k in out}
        for cnt in bootstrap_counts(G, n_boot, np.random.default_rng(seed)):
            for w in cnt:
                r = _summary(w.astype(np.float64), P, F, cost)
                for k, v in r.items():
                    draws[k].append(v)
        for k in list(out):
            lo, hi = percentile_interval(np.asarray(draws[k]), level)
            out[k + "_lo"], out[k + "_hi"] = float(lo), float(hi)
    else:
        for k in list(out):
            out[k + "_lo"] = out[k + "_hi"] = np.nan
    return out


BOUNDS = ("lower", "upper")


def _score_both(P: dict, F: dict, n_boot, level, seed, cost: CostModel | None = None) -> dict:
    """The row's figures with censored runs ending (the lower bound, the main columns) and, as
    ``*_ifmatch``, with them continuing (the upper bound)."""
    out = _score(P["lower"], F["lower"], n_boot, level, seed, cost)
    up = _score(P["upper"], F["upper"], n_boot, level, seed, cost)
    for k in ("tokens", "gain", "speedup_best_fixed"):
        if k in up:
            for suf in ("", "_lo", "_hi"):
                out[f"{k}_ifmatch{suf}"] = up[k + suf]
    return out


def evaluate_run_policies(rounds, target: float, *, drafter: str | None = None,
                          families: Sequence[str] | None = None, folds: int = 5, in_sample: bool = True,
                          max_depth: int | None = None, n_boot: int = 200, level: float = 0.95, seed: int = 0,
                          policies: dict[str, Callable] | None = None, data: RunData | None = None,
                          prompts: pd.DataFrame | None = None) -> PolicyTable:
    """Held-out table of depth policies replayed from accepted runs (module docstring).

    ``target``: the mean draft depth the fitted families must meet on their training prompts.
    Every row's gain is against the fixed depth at the row's own mean depth (the replayed fixed
    depths 1..K interpolated) on the same prompts. ``policies``: extra callables scored as given.
    ``prompts``: the per-prompt table (``read_logs(..., kind="prompts")``) whose ``decode_ms``
    identifies a round cost (:func:`run_cost_model`) for modelled ms per token and the speedup
    over the best fixed depth."""
    if not target > 0:
        raise GlanceError("the target mean depth (--budget) must be positive")
    d = data if data is not None else prepare_runs(rounds, drafter=drafter, max_depth=max_depth)
    if target > d.max_depth:
        raise GlanceError(f"the target depth {target:g} exceeds the deepest replayed depth ({d.max_depth})")
    names = list(RUN_FAMILIES if families is None else families)
    for n in names:
        if n not in RUN_FAMILIES:
            raise GlanceError(f"family {n!r} needs per-offset columns (topk_logq, target_rank); on logs with accepted "
                              f"runs only choose from {', '.join(RUN_FAMILIES)}")
    notes = list(d.notes)
    cost = run_cost_model(prompts, d, notes) if prompts is not None else CostModel()
    all_streams = np.arange(d.streams.streams)

    def sums(pol, sidx=all_streams):
        return {b: _prompt_sums(d, replay_policy(d, pol, sidx, bound=b), sidx) for b in BOUNDS}
    Fs = [sums(FixedPolicy(shape="depth", size=k)) for k in range(0, d.max_depth + 1)]    # depth 0: no draft
    F = {b: tuple(np.stack([f[b][:, i] for f in Fs], 1) for i in range(3)) for b in BOUNDS}
    codes = d.codes
    splits = prompt_folds(codes, folds, seed)
    base = {"drafter": d.drafter, "shape": "depth", "feature": d.feature, "target_shape": float(target),
            "rounds": d.rounds, "prompts": d.prompts}
    rows = []
    k0 = int(min(max(round(target), 1), d.max_depth))
    missed: list[str] = []
    rows.append({**base, "family": "fixed", "evaluated_on": "no fit", "params": f"size={k0}",
                 **_score_both(Fs[k0], F, n_boot, level, seed, cost)})
    fitted: dict = {}
    for name in names:
        if name == "hf-heuristic":
            pol = HeuristicDepthPolicy(max_size=d.max_depth)
            rows.append({**base, "family": name, "evaluated_on": "no fit", "params": pol.describe(),
                         **_score_both(sums(pol), F, n_boot, level, seed, cost)})
            fitted[name] = pol
            continue
        modes = [("held-out", splits)]
        if in_sample:
            modes.append(("in-sample", [(np.arange(codes.size), np.arange(codes.size))]))
        for _label, spl in modes:
            P = {b: np.zeros((d.prompts, 4)) for b in BOUNDS}
            used = []
            for tr, te in spl:
                pol = fit_accept_policy(d, np.unique(codes[tr]), target)
                used.append(pol)
                part = sums(pol, d.streams_of(np.unique(codes[te])))
                for b in BOUNDS:
                    P[b] += part[b]
            mode = evaluated_on(spl, codes)
            got = P["lower"][:, 2].sum() / max(P["lower"][:, 0].sum(), 1)
            if got > target * 1.05 + 1e-9:
                missed.append(f"{name} ({mode}): mean depth {got:.2f} exceeds the target {target:g} (the policy drafts "
                              "at least one token after a round without a draft)")
            desc = used[0].describe() if len(used) == 1 else f"{len(used)} fold fits, e.g. {used[0].describe()}"
            rows.append({**base, "family": name, "evaluated_on": mode, "params": desc,
                         **_score_both(P, F, n_boot, level, seed, cost)})
            if mode == "in-sample":
                fitted[name] = used[0]
    for name, f in (policies or {}).items():
        rows.append({**base, "family": name, "evaluated_on": "as given", "params": "user callable",
                     **_score_both(sums(f), F, n_boot, level, seed, cost)})
    notes += missed
    table = pd.DataFrame(rows)
    lead = ["drafter", "shape", "feature", "family", "evaluated_on", "target_shape", "mean_shape", "mean_shape_lo",
            "mean_shape_hi", "tokens", "tokens_lo", "tokens_hi", "fixed_tokens", "fixed_tokens_lo", "fixed_tokens_hi",
            "gain", "gain_lo", "gain_hi", "censored", "censored_lo", "censored_hi", "tokens_ifmatch",
            "tokens_ifmatch_lo", "tokens_ifmatch_hi", "gain_ifmatch", "gain_ifmatch_lo", "gain_ifmatch_hi",
            "rounds", "prompts", "params"]
    ms_cols = [c for c in ("ms_per_token", "ms_per_token_lo", "ms_per_token_hi", "speedup_best_fixed",
                           "speedup_best_fixed_lo", "speedup_best_fixed_hi", "speedup_best_fixed_ifmatch",
                           "speedup_best_fixed_ifmatch_lo", "speedup_best_fixed_ifmatch_hi") if c in table.columns]
    table = table[lead[:-3] + ms_cols + lead[-3:]]
    logged_tok = (d.accepted + 1).sum() / d.rounds
    notes += [
        f"held-out: fitted on the training prompts of a {len(splits)}-fold prompt-grouped split (GroupKFold, seed "
        f"{seed}) and scored on the other prompts; in-sample rows are fitted and scored on every prompt (optimistic, "
        "never a held-out gain); 'no fit' rows have nothing fitted",
        "tokens: committed tokens per round (accepted + 1) in the sequential replay; mean_shape: mean draft depth; "
        "fixed_tokens: the fixed depth at the row's mean depth (replayed depths 0..K interpolated); gain: % over it; "
        "censored: share of the row's rounds that reach past a logged round's whole accepted draft, where the "
        "drafter's guess of the bonus token is unknown: the main columns assume every such guess misses, the "
        "*_ifmatch columns that every one matches (fixed depths replayed the same way). For a fixed depth the two "
        "bound its tokens per round; a policy that reads the previous round is bounded only when its censored share "
        "is 0, and a gain is never bracketed by the two scenarios - read them as a sensitivity check",
        f"as logged: {logged_tok:.3f} tokens per round at mean horizon {d.horizon.mean():.2f} over {d.rounds} rounds",
        f"intervals: {100 * level:g}% percentile, prompt-level bootstrap ({n_boot} replicates); the fits are held at "
        "their fold estimates",
    ]
    if cost.identified:
        notes.append(f"modelled ms/round = {cost.constant:.2f} + {cost.pass_ms:.3f} x depth (turn timings of every "
                     "prompt, held at its estimate: the speed intervals leave out the cost's own uncertainty); equal "
                     "mean cost is equal mean depth, so the gain is also the speedup at equal cost; "
                     "speedup_best_fixed: vs the fixed depth with the lowest modelled ms per token (chosen on every "
                     "prompt: favours the baseline)")
    else:
        notes.append("gains are tokens per round at equal mean draft depth (no round cost identified, so no "
                     "modelled ms per token)")
    return PolicyTable(table=table, policies=fitted, cost=cost, note_lines=tuple(dict.fromkeys(notes)))
