"""Entropy-keyed width allocation, replayed from the logs (Appendix B.5; docs/theory-width.md).

At a shared verifier budget (mean nodes per round N, total R*N), which rounds
deserve wide trees? Every policy is evaluated on the same rounds by replaying
their logged marginals (:mod:`glance_law.replay`), so the comparison is exact
and needs no model run:

* ``fixed``: every round gets N nodes;
* ``oracle``: global best-first on each round's realised marginal gains (the
  concave envelope of its replayed curve A_r(n)); the better of that and the
  fixed width, since greedy on a non-concave curve can lose a segment;
* ``paper`` and ``rescue``: global best-first on *predicted* gains. A round's
  node masses (the probability that a node is on the target's path) are
  indexed by its entropy: per offset the target is the drafter's top-1 with
  probability p(H) (the fitted law) and otherwise inside the logged top-k with
  probability r, split over ranks 1..k-1 as the drafter's own probabilities.
  The paper's key ``V(H) = E[a|H] (1 - p) = p (1 - p^L)`` is the mass of the
  one-rescue nodes when ``r = p`` (its silent assumption): ``paper`` uses
  r = p(H); ``rescue`` uses the estimated ``r(H)`` (a logistic fit of how often
  the target's token at the chain's first miss is inside the top-k), whose key
  is ``r(H) (1 - p^L)``. Each round's predicted curve (the cumulated masses of
  its first n best-first nodes, every n <= n_max) is made concave and allocated
  like the oracle's.

The law is fitted on the chain's leading matches (``target_rank == 0``) with
:func:`glance_law.law.fit_law`; a group whose chain law rests on fewer than
``MIN_LAW_MISSES`` misses or has b1 <= 0 keeps its rows and is named in the notes
(its keyed rows are unreliable). Values are mean accepted tokens per round
(committed = accepted + 1); gains are relative to the fixed width at equal
budget, with prompt-level bootstrap intervals (allocations recomputed per
replicate, keys held at their estimates). Proposition 6 is checked per budget:
the oracle-vs-policy regret against the sum of |V* - Vhat| over the nodes the
two allocations disagree on. Rescue rates get the project's interval for
proportions (logit-scale CR1, exact at 0 or 1: ``_evidence.proportion_ci``).
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
from scipy import special

from glance_law.data.schema import SUPPLIED_BY
from glance_law.data.selection import grouping
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.evidence.common import proportion_ci
from glance_law.law.fit import fit_law
from glance_law.law.model import fit_affine_logit, match_prob, truncated_mean
from glance_law.results.base import Result
from glance_law.stats.cluster import (
    bootstrap_counts,
    cluster_codes,
    clustered_mean,
    percentile_interval,
)

from . import allocate as al
from .chains import ReplayArrays, chain_run, group_labels, replay_arrays, round_arrays
from .tree import best_first

__all__ = ["paper_key", "rescue_key", "rescue_events", "fit_rescue", "width_allocation", "WidthAllocation",
           "WidthRegret", "RescueFit", "plot_pareto", "POLICIES", "CLI_COLUMNS", "add_cli_arguments",
           "cli_section"]

POLICIES = ("fixed", "oracle", "paper", "rescue")
LABELS = {"fixed": "fixed width", "oracle": "oracle", "paper": "entropy-keyed (paper V)",
          "rescue": "entropy-keyed (rescue-corrected)"}
CLI_COLUMNS = ("topk_logq", "target_rank", "horizon", "budget", "accepted", "root_entropy", "task",
               "prompt_id", "condition", "drafter")
#: Columns the section cannot do without (checked before it runs; a missing one skips it, named).
NEEDS = ("root_entropy", "topk_logq", "target_rank")


# --------------------------------------------------------------------------- keys

def paper_key(H, L, b0: float, b1: float) -> np.ndarray:
    """The paper's V(H) = E[a|H] (1 - p(H)) = p (1 - p^L) (Equation 5)."""
    p = match_prob(H, b0, b1)
    return truncated_mean(p, L) * (1.0 - p)


def rescue_key(H, L, b0: float, b1: float, c0: float, c1: float) -> np.ndarray:
    """The rescue-corrected gain r(H) (1 - p(H)^L) with r(H) = sigmoid(c0 - c1 H)."""
    p = match_prob(H, b0, b1)
    return special.expit(c0 - c1 * np.asarray(H, dtype=np.float64)) * -np.expm1(
        np.asarray(L, dtype=np.float64) * np.log(np.maximum(p, 1e-300)))


def rescue_events(logq: np.ndarray, rank: np.ndarray, horizon: np.ndarray):
    """Per round: whether the chain has a first miss with a known target there, and whether
    that target is inside the drafter's logged top-k (rescuable by width)."""
    a, known = chain_run(rank)
    R, L, k = logq.shape
    at = np.minimum(a, L - 1)
    rk = rank[np.arange(R), at]
    has = (a < np.minimum(known, horizon)) & (rk >= 1)
    lq = logq[np.arange(R), at, np.clip(rk, 0, k - 1)]
    resc = has & (rk < k) & np.isfinite(lq)
    return has, resc


def fit_rescue(H, rescued, weight=None) -> tuple[float, float, str]:
    """(c0, c1, how): logit r(H) = c0 - c1 H by maximum likelihood (a Bernoulli is the
    truncated geometric with L = 1); a constant when the slope is not identified."""
    H = np.asarray(H, dtype=np.float64)
    y = np.asarray(rescued, dtype=np.float64)
    w = np.ones_like(H) if weight is None else np.asarray(weight, dtype=np.float64)
    if H.size == 0 or w.sum() <= 0:
        return np.nan, np.nan, "no first misses"
    rate = float((w * y).sum() / w.sum())
    try:
        b, _, _ = fit_affine_logit(H, y, np.ones_like(H), weight=w)
        return float(b[0]), float(b[1]), "logistic"
    except ValueError:
        rate = min(max(rate, 1e-6), 1 - 1e-6)
        return float(special.logit(rate)), 0.0, "constant"


# --------------------------------------------------------------------------- results

@dataclass(frozen=True, eq=False)
class WidthRegret(Result):
    """Proposition 6 on the data: per budget and keyed policy, the regret against the oracle
    (tokens per round, in the envelope's currency and realised) and the bound."""

    title: ClassVar[str] = "Proposition 6: regret of the entropy-keyed policies vs the sum of |V* - Vhat| " \
                           "over the disagreement set"
    table: pd.DataFrame

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    @property
    def notes(self) -> tuple[str, ...]:
        return ("regret and bound per round, in accepted tokens; regret = E(oracle) - E(policy) on the "
                "rounds' concave envelopes (the currency of the bound); realized uses the replayed "
                "step curves", "holds: regret <= bound (an exchange argument makes it a theorem when both "
                "allocations spend the same nodes)")


@dataclass(frozen=True, eq=False)
class RescueFit(Result):
    """The keys' ingredients per task and entropy bin: observed rescue rate (prompt-clustered
    interval), fitted r(H), the law's p(H) and both keys at the bin's mean entropy."""

    title: ClassVar[str] = "rescue probability r(H) and the two keys (paper V = p(1-p^L), rescue G = r(1-p^L))"
    table: pd.DataFrame
    coef: pd.DataFrame
    note_lines: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    @property
    def notes(self) -> tuple[str, ...]:
        out = []
        for r in self.coef.itertuples(index=False):
            out.append(f"{r.task}: law b0 = {r.b0:.3f}, b1 = {r.b1:.3f} (chain, fit_law); rescue logit r = "
                       f"{r.c0:.3f} {'-' if r.c1 >= 0 else '+'} {abs(r.c1):.3f} H ({r.how}, {r.misses} first misses)")
        return tuple(out) + self.note_lines


@dataclass(frozen=True, eq=False)
class WidthAllocation(Result):
    """Accepted value per round of each policy at equal mean budget, per task, with the
    gain over the fixed width (prompt-level bootstrap intervals)."""

    title: ClassVar[str] = "width allocation at equal verifier budget (replayed): accepted tokens per round"
    table: pd.DataFrame
    pareto: pd.DataFrame
    regret: WidthRegret
    rescue: RescueFit
    exchange_rate: float = 0.0
    note_lines: tuple[str, ...] = field(default_factory=tuple)

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines

    def plot(self, path=None, **kw):
        """The Pareto figure (see :func:`plot_pareto`)."""
        return plot_pareto(self, path=path, **kw)


# --------------------------------------------------------------------------- node masses

def node_masses(logq: np.ndarray, depth: np.ndarray, code: np.ndarray, p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Law-indexed masses of the listed nodes (from :func:`glance_law.replay.tree.best_first`).

    A node's mass is the probability that it lies on the target's path under the entropy-indexed
    model: per offset, the target is the drafter's top-1 with probability ``p`` (the law), else
    it is inside the logged top-k with probability ``r`` (rescue), at rank c >= 1 in proportion
    to the drafter's own probabilities of ranks 1..k-1; offsets are independent (Assumption 2).
    ``p``, ``r``: (R,). Missing nodes (depth 0) get 0. Returns (R, n).
    (:func:`node_path_terms` then :func:`masses_from_terms`: the part that does not depend on
    ``p`` and ``r`` can be computed once for many values of them.)"""
    return masses_from_terms(depth, *node_path_terms(logq, depth, code), p, r)


def node_path_terms(logq: np.ndarray, depth: np.ndarray, code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What a node's law-indexed mass takes from its path alone: ``(n_top, log_rest)``, each (R, n):
    the offsets where the path follows the drafter's top-1 (int16), and the sum over the other
    offsets of log(q_c / sum_{c' >= 1} q_c') (the rank's share of the logged ranks 1..k-1).
    A node of depth d then has log-mass n_top log p + (d - n_top) log((1 - p) r) + log_rest
    (:func:`masses_from_terms`)."""
    logq = np.asarray(logq, dtype=np.float64)
    R, L, k = logq.shape
    share = np.full((R, L, k), -np.inf)
    if k > 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            rest = logq[:, :, 1:]
            mx = np.max(rest, axis=2, keepdims=True)
            fin = np.isfinite(mx)
            lse = np.where(fin, mx + np.log(np.sum(np.exp(rest - np.where(fin, mx, 0.0)), axis=2,
                                                   keepdims=True)), -np.inf)
            share[:, :, 1:] = np.where(fin, rest - lse, -np.inf)
    sf = share.reshape(-1)
    dep = depth.astype(np.int64).reshape(-1)
    n = depth.shape[1]
    n_top = np.zeros(dep.size, np.int16)
    log_rest = np.zeros(dep.size)
    idx = np.flatnonzero(dep > 0)
    cod = code.reshape(-1)[idx].astype(np.int64)
    rr = idx // n
    i = 0
    while idx.size:                                    # digits from the last offset up
        j = dep[idx] - 1 - i
        c = cod % k
        top = c == 0
        n_top[idx[top]] += 1
        log_rest[idx[~top]] += sf[((rr * L + j) * k + c)[~top]]
        cod //= k
        keep = j > 0
        idx, cod, rr = idx[keep], cod[keep], rr[keep]
        i += 1
    return n_top.reshape(depth.shape), log_rest.reshape(depth.shape)


def masses_from_terms(depth: np.ndarray, n_top: np.ndarray, log_rest: np.ndarray, p: np.ndarray,
                      r: np.ndarray) -> np.ndarray:
    """The law-indexed node masses (R, n) from :func:`node_path_terms` at per-round ``p``, ``r`` (R,)."""
    p = np.asarray(p, dtype=np.float64)[:, None]
    r = np.asarray(r, dtype=np.float64)[:, None]
    dep = np.asarray(depth, dtype=np.int64)
    top = np.asarray(n_top, dtype=np.int64)
    other = dep - top
    with np.errstate(divide="ignore", invalid="ignore"):
        lm = (np.where(top > 0, top * np.log(p), 0.0) + np.where(other > 0, other * (np.log1p(-p) + np.log(r)), 0.0)
              + log_rest)
        return np.where(dep > 0, np.exp(lm), 0.0)


# --------------------------------------------------------------------------- one task

def _grid(budgets, n_max):
    g = set(int(x) for x in np.unique(np.round(np.geomspace(1, max(budgets), 14)))) | set(budgets)
    return sorted(x for x in g if 1 <= x <= n_max)


class _Task:
    """One group's rounds with everything the policies need, fixed once."""

    def __init__(self, arr: ReplayArrays, logq, H, horizon, b, c, lam: float):
        self.arr, self.pos, self.R, self.lam = arr, arr.pos, arr.rounds, lam
        self.n_max = arr.n_max
        self.curve = arr.curve()
        self.seg = {"oracle": al.envelope_segments(self.pos, self.n_max)}
        self.keys = {}
        if np.all(np.isfinite(b)):
            p = match_prob(H, *b)
            _, dep, cod = best_first(logq, self.n_max)
            terms = node_path_terms(logq, dep, cod)
            n = np.arange(1, self.n_max + 1, dtype=np.float64)
            rhat = special.expit(c[0] - c[1] * H) if np.isfinite(c[0]) else None
            for name, r in (("paper", p), ("rescue", rhat)):
                if r is None:
                    continue
                # the envelope of the whole predicted curve: every n = 1..n_max is a candidate vertex
                cum = np.cumsum(masses_from_terms(dep, *terms, p, r), axis=1)
                self.seg[name] = al.hull_segments(np.broadcast_to(n, cum.shape), cum)
            self.keys = {"paper": paper_key(H, horizon, *b)}
            if rhat is not None:
                self.keys["rescue"] = rescue_key(H, horizon, *b, *c)
        self.sorted = {k: al.SortedSegments.build(v, lam) for k, v in self.seg.items()}

    def run(self, budgets, weights=None):
        """{policy: (accepted per round (nb,), nodes per round (nb,), allocations (nb, R) or None)}."""
        w = np.ones(self.R) if weights is None else weights
        sw = float(w.sum())
        budgets = np.asarray(budgets, dtype=np.int64)
        rows = np.arange(self.R)
        out = {"fixed": (self.curve[:, budgets].T.astype(float) @ w / sw, budgets.astype(float), None)}
        for name in ("oracle", "paper", "rescue"):
            if name not in self.sorted:
                out[name] = (np.full(budgets.size, np.nan), np.full(budgets.size, np.nan), None)
                continue
            n = al.allocate(self.sorted[name], budgets * sw, None if weights is None else w)
            acc = self.curve[rows[None, :], np.minimum(n, self.n_max)].astype(float) @ w / sw
            out[name] = (acc, n @ w / sw, n)
        if self.lam == 0:   # the oracle can always choose the uniform allocation
            o, f = out["oracle"], out["fixed"]
            worse = o[0] < f[0]
            if worse.any():
                out["oracle"] = (np.where(worse, f[0], o[0]), np.where(worse, f[1], o[1]), o[2])
        return out


def _task_rows(task, t: _Task, budgets, codes, G, n_boot, level, rng):
    rows, preg = [], []
    pt = t.run(budgets)
    draws = {p: [] for p in POLICIES}
    for cnt in bootstrap_counts(G, n_boot, rng):
        for c in cnt:
            w = c[codes].astype(np.float64)
            if w.sum() <= 0:
                continue
            v = t.run(budgets, w)
            for p in POLICIES:
                draws[p].append(v[p][0])
    D = {p: np.asarray(draws[p]).reshape(-1, len(budgets)) for p in POLICIES}
    for i, N in enumerate(budgets):
        row = {"task": task, "budget": int(N), "rounds": t.R, "prompts": G}
        for p in POLICIES:
            row[p] = float(pt[p][0][i])
        fixed = D["fixed"][:, i]
        for p, col in (("oracle", "headroom"), ("paper", "gain_paper"), ("rescue", "gain_rescue")):
            f0 = row["fixed"]
            row[col] = 100.0 * (row[p] / f0 - 1.0) if f0 > 0 else np.nan
            d = D[p][:, i]
            if d.size and np.isfinite(d).all():
                with np.errstate(divide="ignore", invalid="ignore"):
                    lo, hi = percentile_interval(100.0 * (d / np.where(fixed > 0, fixed, np.nan) - 1.0), level)
            else:
                lo = hi = np.nan
            row[col + "_lo"], row[col + "_hi"] = float(lo), float(hi)
        if t.lam > 0:
            for p in POLICIES:
                row[f"nodes_{p}"] = float(pt[p][1][i])
        rows.append(row)
        n_star = pt["oracle"][2]
        for p in ("paper", "rescue"):
            if pt[p][2] is None or n_star is None:
                continue
            n_hat = pt[p][2][i]
            reg, bound = al.prop6(t.seg["oracle"], t.seg[p], n_star[i], n_hat, t.n_max)
            real = float((al.realized(t.pos, n_star[i]) - al.realized(t.pos, n_hat)).sum())
            same = int(n_star[i].sum()) == int(n_hat.sum())
            tol = 1e-9 * max(1.0, bound)
            preg.append({"task": task, "budget": int(N), "policy": p, "regret": reg / t.R, "bound": bound / t.R,
                         "holds": bool(reg <= bound + tol), "regret_realized": real / t.R,
                         "holds_realized": bool(real <= bound + tol), "equal_nodes": same})
    return rows, preg


def _pareto_rows(task, t: _Task, grid):
    out = []
    v = t.run(grid)
    for p in POLICIES:
        for i, N in enumerate(grid):
            out.append({"task": task, "policy": p, "budget": int(N), "mean_budget": float(v[p][1][i]),
                        "accepted": float(v[p][0][i])})
    return out


def _rescue_rows(task, H, has, resc, codes, G, L, b, c, level, bins=5):
    out = []
    if not has.any():
        return out
    Hm = H[has]
    edges = np.unique(np.quantile(Hm, np.linspace(0, 1, bins + 1)))
    idx = np.clip(np.searchsorted(edges, H, side="right") - 1, 0, max(len(edges) - 2, 0))
    for j in range(max(len(edges) - 1, 1)):
        m = has & (idx == j)
        if not m.any():
            continue
        mu, se, g = clustered_mean(resc[m].astype(float), codes[m], G)
        lo, hi = proportion_ci(mu, se, g, level)
        h = float(H[m].mean())
        Lm = float(np.mean(L[m]))
        p = float(match_prob(h, *b)) if np.all(np.isfinite(b)) else np.nan
        out.append({"task": task, "h_lo": float(edges[j]), "h_hi": float(edges[j + 1]) if j + 1 < len(edges)
                    else float(edges[j]), "h_mean": h, "misses": int(m.sum()),
                    "rescue_rate": mu, "rescue_rate_lo": lo, "rescue_rate_hi": hi,
                    "r_fit": float(special.expit(c[0] - c[1] * h)) if np.isfinite(c[0]) else np.nan,
                    "p_law": p, "key_paper": float(paper_key(h, Lm, *b)) if np.isfinite(p) else np.nan,
                    "key_rescue": float(rescue_key(h, Lm, *b, *c)) if np.isfinite(p) and np.isfinite(c[0])
                    else np.nan})
    return out


# --------------------------------------------------------------------------- the analysis

MIN_LAW_MISSES = 10     # fewer chain misses than this: the law keying a group's policies is barely identified


def _weak_law(misses: int, b1: float) -> str:
    """Why a group's chain law is too weak to key its policies ('' when it is not)."""
    why = []
    if misses < MIN_LAW_MISSES:
        why.append(f"rests on only {misses} chain miss(es) (fewer than {MIN_LAW_MISSES})")
    if not b1 > 0:
        why.append("has a non-positive slope (the match probability does not fall with entropy)")
    return " and ".join(why)


def width_allocation(rounds, *, budgets: Sequence[int] = (15, 31, 47, 63), n_max: int | None = None,
                     by: str = "task", exchange_rate: float = 0.0, n_boot: int = 200, level: float = 0.95,
                     seed: int = 0, condition: str | Sequence[str] | None = "matched") -> WidthAllocation:
    """Replay the logs and compare the width policies at equal mean budget, per group.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs with the replay columns (``topk_logq``, ``target_rank``).
    budgets : sequence of int, default (15, 31, 47, 63)
        Mean verifier budgets (nodes per round, root excluded).
    n_max : int, optional
        The largest tree any single round may get (default max(255, max budget)).
    by : str, default "task"
        Grouping column.
    exchange_rate : float, default 0.0
        Tokens a node must be expected to add to be bought (the stopping rule; 0 spends the
        whole budget).
    n_boot : int, default 200
        Prompt-level bootstrap replicates for the gain intervals (0: none).
    level : float, default 0.95
        Interval level.
    seed : int, default 0
        Bootstrap seed.
    condition : str or sequence, default "matched"
        Conditions replayed (None pools every condition).

    Returns
    -------
    WidthAllocation
        One row per group, budget and policy (oracle, fixed, entropy-keyed).

    Examples
    --------
    >>> import glance_law as gl
    >>> frame = gl.simulate_tree_rounds(n_prompts=6, rounds_per_prompt=10, seed=0)
    >>> res = gl.width_allocation(frame, budgets=(7, 15), n_boot=0)
    >>> type(res).__name__
    'WidthAllocation'
    """
    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] < 1:
        raise GlanceError("budgets must be positive integers (nodes per round), e.g. 15,31,47,63")
    n_max = int(max(255, budgets[-1]) if n_max is None else n_max)
    if n_max < budgets[-1]:
        raise GlanceError(f"n_max ({n_max}) must be at least the largest budget ({budgets[-1]})")
    if exchange_rate < 0:
        raise GlanceError("the exchange rate must be >= 0 (tokens per node)")
    frame = getattr(rounds, "frame", rounds)
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError("width_allocation expects a rounds DataFrame or a LogSet")
    for c in ("topk_logq", "target_rank"):
        if c not in frame.columns:
            raise MissingColumnError(f"the column {c}", "--width (the replayed width allocation)", SUPPLIED_BY[c])
    notes = []
    if condition is not None and "condition" in frame.columns:
        want = [condition] if isinstance(condition, str) else list(condition)
        keep = frame["condition"].astype(str).isin(want).to_numpy()
        if (~keep).any():
            notes.append(f"{int((~keep).sum())} round(s) of other conditions excluded (kept: {', '.join(want)})")
        frame = frame.loc[keep]
    if frame.empty:
        raise GlanceError("no rounds left to replay (check --condition)")
    logq, rank, usable, rn = round_arrays(frame)
    notes += rn
    frame = frame.loc[usable]
    logq, rank = logq[usable], rank[usable]
    arr_all = replay_arrays(logq, rank, n_max)
    H = frame["root_entropy"].to_numpy(dtype=np.float64)
    horizon = (frame["horizon"].to_numpy(dtype=np.int64) if "horizon" in frame.columns
               else np.full(len(frame), logq.shape[1]))
    groups = group_labels(frame, by, notes)
    a, known = chain_run(rank)
    cens = (a == known) & (known < horizon)
    # the law per group, fitted under neutral names (a group may be labelled 'pooled', which fit_law keeps
    # for its own pooled row) with prompts keyed by their task (the clusters of every other table)
    gcode, gname = pd.factorize(pd.Series(groups), sort=True)
    tasks = frame["task"].astype(str).to_numpy() if "task" in frame.columns else np.full(len(frame), "", object)
    law_in = pd.DataFrame({"task": np.char.add("g", gcode.astype(str)),
                           "prompt_id": pd.Series(tasks).str.cat(frame["prompt_id"].astype(str).to_numpy(), sep="\x1f")
                           .to_numpy(),
                           "root_entropy": H, "accepted": np.minimum(a, horizon),
                           "horizon": np.where(cens, a, horizon)})
    live = law_in["horizon"].to_numpy() > 0
    try:
        lf = fit_law(law_in.loc[live], by="task", condition=None)
    except GlanceError as exc:
        lf = None
        notes.append(f"the law could not be fitted on the chain ({exc}); keyed policies unavailable")
    has, resc = rescue_events(logq, rank, horizon)  # has: a < min(known, horizon), the law's uncensored misses
    rng = np.random.default_rng(seed)
    rows, preg, par, rrows, coef = [], [], [], [], []
    for task in sorted(set(groups.tolist())):
        m = groups == task
        sub = frame.loc[m]
        codes, G = cluster_codes(sub)
        arr = ReplayArrays(pos=arr_all.pos[m], placeable=arr_all.placeable[m], known=arr_all.known[m],
                           censor_from=arr_all.censor_from[m], n_max=n_max)
        b = (np.nan, np.nan)
        if lf is not None:
            try:
                b = lf.params(f"g{list(gname).index(task)}")
            except (GlanceError, KeyError):
                b = (np.nan, np.nan)
        misses = int(has[m].sum())
        c0, c1, how = fit_rescue(H[m][has[m]], resc[m][has[m]])
        coef.append({"task": task, "b0": b[0], "b1": b[1], "c0": c0, "c1": c1, "how": how,
                     "misses": misses})
        if not np.all(np.isfinite(b)):
            notes.append(f"{task}: no law fit, keyed policies not evaluated")
        else:
            weak = _weak_law(misses, float(b[1]))
            if weak:
                notes.append(f"{task}: keyed rows (paper, rescue, their gains and Proposition 6 rows) are unreliable: "
                             f"the chain law keying them (b0 = {b[0]:.3f}, b1 = {b[1]:.3f}) {weak}")
        t = _Task(arr, logq[m], H[m], horizon[m], b, (c0, c1), float(exchange_rate))
        r1, r2 = _task_rows(task, t, budgets, codes, G, int(n_boot), level, rng)
        rows += r1
        preg += r2
        par += _pareto_rows(task, t, _grid(budgets, n_max))
        rrows += _rescue_rows(task, H[m], has[m], resc[m], codes, G, horizon[m], b, (c0, c1), level)
        nc = int(arr.censored(budgets[-1]).sum())
        if nc:
            notes.append(f"{task}: {nc} round(s) reach an unknown offset (end of stream) within budget "
                         f"{budgets[-1]}; their replayed accepted length is a lower bound")
    table = pd.DataFrame(rows)
    notes += [
        "values: mean accepted tokens per round at equal mean budget (committed = accepted + 1); headroom and "
        "gains: % over the fixed width at the same budget",
        f"intervals: {100 * level:g}% percentile, prompt-level bootstrap with {n_boot} replicates (seed {seed}); "
        "allocations are recomputed per replicate, the law and rescue fits are held at their estimates"
        if n_boot > 0 else "no bootstrap (n_boot = 0): no intervals",
        f"per-round trees capped at n_max = {n_max} nodes; keyed policies: global best-first on law-indexed "
        "node masses (paper: rescue r = p(H); rescue: the fitted r(H)), see docs/theory-width.md",
    ]
    if exchange_rate > 0:
        notes.append(f"exchange rate {exchange_rate:g} tokens/node: policies stop buying nodes worth less "
                     "(nodes_* columns: mean nodes used); the fixed width has no stopping rule")
    regret = WidthRegret(table=pd.DataFrame(preg, columns=["task", "budget", "policy", "regret", "bound", "holds",
                                                           "regret_realized", "holds_realized", "equal_nodes"]))
    resc_res = RescueFit(table=pd.DataFrame(rrows), coef=pd.DataFrame(coef), note_lines=(
        f"rescue_rate: share of first misses (offset a+1 of the chain) whose target token is inside the logged "
        f"top-k, {100 * level:g}% prompt-clustered (CR1) interval on the logit scale (Student-t, G-1 df; at a rate "
        "of 0 or 1 the exact bound with each of the bin's G prompts as one trial; none with fewer than 2 prompts); "
        "r_fit, p_law and keys at the bin's mean H",))
    return WidthAllocation(table=table, pareto=pd.DataFrame(par), regret=regret, rescue=resc_res,
                           exchange_rate=float(exchange_rate), note_lines=tuple(notes))


# --------------------------------------------------------------------------- figure

_STYLE = {"fixed": dict(color="0.0", ls="-", marker="o"), "oracle": dict(color="0.0", ls="--", marker="^"),
          "paper": dict(color="0.35", ls=":", marker="s", mfc="white"),
          "rescue": dict(color="0.55", ls="-.", marker="D")}


def plot_pareto(result: WidthAllocation, path=None, tasks: Sequence[str] | None = None, ncols: int = 3):
    """Figure 5 style: accepted value (tokens per round) against mean verifier budget (nodes per
    round), one panel per task, policies told apart by line style and marker (print-safe).
    Saves to ``path`` when given; returns the matplotlib Figure."""
    import matplotlib
    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    df = result.pareto
    names = list(tasks) if tasks is not None else sorted(df["task"].unique())
    if not names:
        raise GlanceError("nothing to plot: the result holds no task")
    nc = min(ncols, len(names))
    nr = int(np.ceil(len(names) / nc))
    fig, axes = plt.subplots(nr, nc, figsize=(4.0 * nc, 3.2 * nr), squeeze=False)
    for ax, task in zip(axes.ravel(), names):
        d = df[df["task"] == task]
        for p in POLICIES:
            q = d[d["policy"] == p].sort_values("mean_budget")
            if q["accepted"].notna().any():
                ax.plot(q["mean_budget"], q["accepted"], label=LABELS[p], ms=4, lw=1.2, **_STYLE[p])
        ax.set_xscale("log", base=2)
        ax.set_title(task)
        ax.set_xlabel("mean verifier budget N (nodes per round)")
        ax.set_ylabel("accepted value (tokens per round)")
        ax.grid(alpha=0.3, lw=0.5)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7, frameon=False)
    fig.tight_layout()
    if path is not None:
        save_plot(fig, path, close=False)
    return fig


# --------------------------------------------------------------------------- CLI section

def save_plot(fig, path, close: bool = True) -> None:
    """Write the Pareto figure to ``path`` (its suffix: png, pdf or svg) through the one output
    path (:func:`glance_law.data.outputs.write_file`: temporary name, rename, never through a
    link), and close it unless ``close=False``."""
    import io

    import matplotlib.pyplot as plt

    from glance_law.data.outputs import write_file
    try:
        fmt = str(path).rsplit(".", 1)[-1].lower() if "." in str(path).rsplit("/", 1)[-1] else "png"
        if fmt not in ("png", "pdf", "svg"):
            raise GlanceError(f"--width-plot {path}: name a .png, .pdf or .svg file")
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=150)
        write_file(path, buf.getvalue())
    finally:
        if close:
            plt.close(fig)


def parse_budgets(text: str) -> list[int]:
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise GlanceError(f"--budgets takes comma-separated integers, e.g. 15,31,47,63 (got {text!r})") from None
    if not out or min(out) < 1:
        raise GlanceError(f"--budgets must list positive integers (got {text!r})")
    return out


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("--width options")
    g.add_argument("--budgets", default="15,31,47,63", metavar="N[,N...]",
                   help="mean verifier budgets to compare, nodes per round (default 15,31,47,63)")
    g.add_argument("--exchange-rate", type=float, default=0.0, metavar="TOKENS",
                   help="stopping rule: buy a node only when it is worth at least this many tokens (default 0)")
    g.add_argument("--width-bootstrap", type=int, default=200, metavar="N",
                   help="prompt-level bootstrap replicates for the gain intervals (default 200)")
    g.add_argument("--width-boot", dest="width_bootstrap", type=int, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)  # the old spelling, kept working
    g.add_argument("--width-plot", metavar="FILE", default=None, help="save the Pareto figure (png/pdf/svg)")


def cli_section(logs, args) -> list[Result]:
    cond = getattr(args, "condition", "matched")
    if cond is not None and str(cond).lower() == "all":
        cond = None
    elif cond is not None:
        parts = [x.strip() for x in str(cond).split(",") if x.strip()]
        cond = parts[0] if len(parts) == 1 else parts
    by = grouping(getattr(args, "by", "task"))     # None: one pooled group per drafter
    if int(getattr(args, "width_bootstrap", 200)) < 0:
        raise GlanceError("--width-bootstrap must be >= 0")
    res = width_allocation(logs, budgets=parse_budgets(getattr(args, "budgets", "15,31,47,63")), by=by,
                           exchange_rate=float(getattr(args, "exchange_rate", 0.0)),
                           n_boot=int(getattr(args, "width_bootstrap", 200)), level=getattr(args, "level", 0.95),
                           seed=getattr(args, "seed", 0), condition=cond)
    if getattr(args, "width_plot", None):
        save_plot(res.plot(), args.width_plot)
    return [res, res.rescue, res.regret]
