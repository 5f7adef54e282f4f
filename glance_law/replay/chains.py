"""Counterfactual replay: the accepted length every candidate-tree budget would have had.

A round log with the drafter's per-offset top-k log-probabilities
(``topk_logq``, row-major L x k) and the target's path (``target_rank``: the
0-based rank of the target's greedy token under the drafter at each offset)
determines, without rerunning any model, the accepted length ``A(S_N)`` of the
best-first tree ``S_N`` of *every* budget N (Definition 1):

* the target's prefix ``Y_{1:d}`` is the node whose choices are the ranks
  ``target_rank[0..d-1]``; it exists while every rank is inside the logged
  top-k (``0 <= rank < k`` with a finite log-probability);
* the best-first order is a total order on nodes (:mod:`glance_law.replay.tree`), so
  each target prefix has a position ``pos_d`` in it, and the tree of budget N
  is the first N nodes; positions increase along the path (parents first), so

      A(S_N) = #{d : pos_d < N}.

One best-first pass per round gives every ``pos_d < N_max`` and hence the whole
curve ``N -> A(S_N)`` for ``N <= N_max``. The pass uses the builder the live
decoder uses (:func:`glance_law.replay.tree.best_first`) with the score of the deepest
target prefix as its floor: nodes below it cannot move any target prefix.

Unknown offsets (``target_rank == -1``, past the end of the committed stream):
the path cannot be followed beyond the first unknown offset, so the replay
caps the accepted length there. A round is *censored* at budget N when its
replayed tree holds every known prefix and the path stops at an unknown offset
(so the true A(S_N) may be larger); censored rounds are counted, never hidden.
Offsets deeper than a round's horizon do not exist for the replay: the horizon
is the deepest offset the drafter proposed (glance-log logs the marginals of
every proposed offset, not only those its tree reached), so every budget is
replayed exactly within it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from glance_law.data.schema import SUPPLIED_BY
from glance_law.data.selection import POOLED, grouping
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.results.base import Result
from glance_law.stats.cluster import cluster_codes, clustered_mean, t_crit

from . import tree as _tree

__all__ = ["replay_arrays", "target_prefixes", "group_labels", "ReplayArrays", "round_arrays", "replay", "Replay",
           "chain_run"]

#: the round columns the replay reads
#: rounds converted to float64 at a time
_CHUNK_ROUNDS = 1 << 16


@dataclass(frozen=True, eq=False)
class ReplayArrays:
    """Positions of the target's prefixes in each round's best-first order.

    ``pos`` (R, L) int32: 0-based position of prefix ``d+1`` (``n_max`` when it is not among
    the first ``n_max`` nodes or cannot be placed); ``placeable`` (R,): leading offsets whose
    target token is inside the logged top-k; ``known`` (R,): leading offsets whose target
    token is known; ``censor_from`` (R,): the smallest budget at which the replayed accepted
    length may be capped by an unknown offset (``n_max + 1``: never).
    """

    pos: np.ndarray
    placeable: np.ndarray
    known: np.ndarray
    censor_from: np.ndarray
    n_max: int

    @property
    def rounds(self) -> int:
        return int(self.pos.shape[0])

    def accepted(self, budgets) -> np.ndarray:
        """A(S_N) for each budget (an int or a sequence): (R,) or (R, len(budgets)) int16."""
        b = np.asarray(budgets)
        if np.any(b < 0) or np.any(b > self.n_max):
            raise GlanceError(f"budgets must lie in 0..{self.n_max} (the replay's N_max)")
        if b.ndim == 0:
            return (self.pos < int(b)).sum(axis=1).astype(np.int16)
        return (self.pos[:, None, :] < b[None, :, None]).sum(axis=2).astype(np.int16)

    def curve(self) -> np.ndarray:
        """(R, n_max + 1) int16: A(S_N) for N = 0..n_max."""
        R = self.rounds
        inc = np.zeros((R, self.n_max + 2), np.int16)
        r, d = np.nonzero(self.pos < self.n_max)
        np.add.at(inc, (r, self.pos[r, d] + 1), 1)
        return np.cumsum(inc, axis=1, dtype=np.int16)[:, :self.n_max + 1]

    def censored(self, budgets) -> np.ndarray:
        """(R,) or (R, len(budgets)) bool: the accepted length at N may be capped by an unknown offset."""
        b = np.asarray(budgets)
        if b.ndim == 0:
            return self.censor_from <= int(b)
        return self.censor_from[:, None] <= b[None, :]


def chain_run(target_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chain's accepted length (leading offsets where the target's token is the drafter's
    top-1) and the number of leading known offsets, from (R, L) ranks (-1 = unknown)."""
    rank = np.asarray(target_rank)
    top1 = np.cumprod(rank == 0, axis=1).sum(axis=1)
    known = np.cumprod(rank >= 0, axis=1).sum(axis=1)
    return top1.astype(np.int64), known.astype(np.int64)


def target_prefixes(logq: np.ndarray, rank: np.ndarray):
    """The target's prefixes as tree nodes: ``(score, code, placeable, known)``.

    ``logq`` (R, L, k) already checked (:func:`glance_law.replay.tree.check_logq`); ``rank`` (R, L).
    ``score``/``code`` (R, L) are those of the prefix of depth d+1 (scores accumulated in
    float64 from offset 1, exactly as the builder does); ``placeable`` (R,) counts the leading
    offsets whose target token is inside the logged top-k with a finite log-probability,
    ``known`` the leading offsets whose target token is known."""
    R, L, k = logq.shape
    rank = np.asarray(rank).astype(np.int64)
    known_m = rank >= 0
    rk = np.clip(rank, 0, k - 1)
    tl = np.take_along_axis(logq, rk[:, :, None], axis=2)[:, :, 0]
    inside = known_m & (rank < k) & np.isfinite(tl)
    lead = np.cumprod(inside, axis=1).astype(bool)
    placeable = lead.sum(axis=1)
    known = np.cumprod(known_m, axis=1).sum(axis=1)
    score = np.cumsum(np.where(lead, tl, 0.0), axis=1)
    code = np.zeros((R, L), np.int64)
    acc = np.zeros(R, np.int64)
    for j in range(L):
        acc = acc * k + np.where(lead[:, j], rk[:, j], 0)
        code[:, j] = acc
    return score, code, placeable.astype(np.int64), known.astype(np.int64)


def replay_arrays(logq, target_rank, n_max: int) -> ReplayArrays:
    """Replay every budget up to ``n_max`` for rounds given as arrays.

    ``logq``: (R, L, k) top-k log-probabilities per offset (rows sorted descending, NaN or
    -inf = not proposed); ``target_rank``: (R, L) ints (>= k: outside the logged top-k;
    -1: unknown). Vectorised over rounds; rounds whose offset-1 target is outside the top-k
    skip the pass (A = 0 at every budget), the others enumerate only the nodes that can
    precede a target prefix (:func:`glance_law.replay.tree.target_positions`).
    """
    shape = np.shape(logq)
    if len(shape) != 3:
        raise GlanceError(f"logq has shape {shape}, expected (rounds, L, k)")
    R, L, k = shape
    n_max = int(n_max)
    if n_max < 1:
        raise GlanceError("the replay's N_max must be >= 1")
    rank = np.asarray(target_rank)
    if rank.shape != (R, L):
        raise GlanceError(f"target_rank has shape {rank.shape}, expected {(R, L)} (one rank per offset)")
    pos = np.full((R, L), n_max, np.int32)
    placeable = np.zeros(R, np.int64)
    known = np.zeros(R, np.int64)
    for a in range(0, R, _CHUNK_ROUNDS):          # memory stays bounded whatever R is
        b = min(R, a + _CHUNK_ROUNDS)
        q = _tree.check_logq(logq[a:b])
        score, code, placeable[a:b], known[a:b] = target_prefixes(q, rank[a:b])
        pos[a:b] = _tree.target_positions_prepared(q, score, code, placeable[a:b], n_max)
    # censoring: the path stops at an unknown offset (not at a miss outside the top-k)
    stops_unknown = (placeable == known) & (known < L)
    last = np.where(placeable > 0, pos[np.arange(R), np.maximum(placeable - 1, 0)], -1)
    censor_from = np.where(stops_unknown, np.where(placeable > 0, last + 1, 1), n_max + 1)
    censor_from = np.where(censor_from > n_max, n_max + 1, censor_from)
    return ReplayArrays(pos=pos, placeable=placeable, known=known, censor_from=censor_from.astype(np.int64),
                        n_max=n_max)


def _lists(col: pd.Series, what: str):
    """Flatten a list column: (flat values, per-row lengths, row is null)."""
    vals = col.to_numpy(dtype=object)
    null = np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in vals], dtype=bool)
    lens = np.array([0 if n else len(v) for v, n in zip(vals, null)], dtype=np.int64)
    parts = [np.asarray(v) for v, n in zip(vals, null) if not n and len(v)]
    flat = np.concatenate(parts) if parts else np.zeros(0)
    return flat, lens, null


def round_arrays(frame: pd.DataFrame):
    """(logq (R, L, k), target_rank (R, L) int, usable (R,) bool, notes) from a rounds frame.

    Rounds are padded to the largest horizon and k with -inf (not proposed) and rank -1
    (unknown). Unusable rounds (no drafted offsets, missing vectors, inconsistent lengths)
    are flagged, counted in the notes and get A = 0 from an all -inf row.
    """
    for c in ("topk_logq", "target_rank"):
        if c not in frame.columns:
            raise MissingColumnError(f"the column {c}", "the width replay", SUPPLIED_BY.get(c))
    n = len(frame)
    H = frame["horizon"].to_numpy(dtype=np.int64) if "horizon" in frame.columns else None
    lq, nq, nullq = _lists(frame["topk_logq"], "topk_logq")
    rk, nr, nullr = _lists(frame["target_rank"], "target_rank")
    if H is None:
        H = nr.copy()
    notes = []
    usable = np.ones(n, bool)
    ar = H <= 0
    if ar.any():
        notes.append(f"{int(ar.sum())} round(s) with horizon 0 (no draft) excluded")
    usable &= ~ar
    miss = (nullq | nullr) & ~ar
    if miss.any():
        notes.append(f"{int(miss.sum())} round(s) without topk_logq/target_rank excluded")
    usable &= ~miss
    with np.errstate(divide="ignore", invalid="ignore"):
        k_r = np.where(H > 0, nq // np.maximum(H, 1), 0)
    bad = usable & ((nq != H * k_r) | (k_r < 1) | (nr != H))
    if bad.any():
        notes.append(f"{int(bad.sum())} round(s) whose topk_logq length is not horizon x k or whose "
                     "target_rank length is not the horizon excluded")
    usable &= ~bad
    if not usable.any():
        raise GlanceError("no round has replayable marginals (topk_logq and target_rank of the logged horizon); "
                          f"record them with {SUPPLIED_BY['topk_logq']}")
    L = int(H[usable].max())
    k = int(k_r[usable].max())
    # keep the logged float32 (the replay widens it chunk by chunk); anything else stays float64
    logq = np.full((n, L, k), -np.inf, np.float32 if lq.dtype == np.float32 else np.float64)
    rank = np.full((n, L), -1, np.int64)
    # scatter the flat values of the usable rounds
    startq = np.cumsum(nq) - nq
    startr = np.cumsum(nr) - nr
    u = np.flatnonzero(usable)
    rq = np.repeat(u, nq[u])
    iq = np.arange(rq.size) - np.repeat(np.cumsum(nq[u]) - nq[u], nq[u])   # index inside the round's list
    src_q = startq[rq] + iq
    kk = k_r[rq]
    logq[rq, iq // kk, iq % kk] = lq[src_q]
    rr = np.repeat(u, nr[u])
    ir = np.arange(rr.size) - np.repeat(np.cumsum(nr[u]) - nr[u], nr[u])
    vals = rk[np.repeat(startr[u], nr[u]) + ir].astype(np.int64)
    # ranks at or beyond a round's own k are outside its logged top-k
    vals = np.where(vals >= k_r[rr], k, vals)
    rank[rr, ir] = vals
    if len(np.unique(k_r[usable])) > 1:
        notes.append(f"rounds logged with different k ({', '.join(map(str, np.unique(k_r[usable])))}); "
                     f"padded to k = {k} with unproposed entries")
    return logq, rank, usable, notes


@dataclass(frozen=True, eq=False)
class Replay(Result):
    """The replayed accepted length per group and budget (mean over rounds with a prompt-clustered
    interval), with the check against the logged ``accepted`` at the logged budget."""

    title: ClassVar[str] = "counterfactual replay: accepted length A(S_N) of the best-first tree of budget N"
    arrays: ReplayArrays
    groups: np.ndarray              # (R,) group label per replayed round
    clusters: np.ndarray            # (R,) prompt-cluster codes
    budgets: tuple[int, ...]
    logged_budget: np.ndarray | None = None
    logged_accepted: np.ndarray | None = None
    level: float = 0.95
    note_lines: tuple[str, ...] = field(default_factory=tuple)

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines

    def mismatches(self) -> np.ndarray:
        """Indices of rounds whose replay at the logged budget differs from the logged accepted
        (rounds without a logged budget in 1..N_max are not checked)."""
        if self.logged_budget is None or self.logged_accepted is None:
            return np.zeros(0, np.int64)
        b = self.logged_budget
        ok = (b >= 1) & (b <= self.arrays.n_max)
        rep = np.zeros_like(self.logged_accepted)
        idx = np.flatnonzero(ok)
        rep[idx] = (self.arrays.pos[idx] < b[idx, None]).sum(axis=1)
        return np.flatnonzero(ok & (rep != self.logged_accepted))

    def to_frame(self) -> pd.DataFrame:
        A = self.arrays.accepted(list(self.budgets))
        cens = self.arrays.censored(list(self.budgets))
        rows = []
        G = int(self.clusters.max(initial=-1)) + 1
        for g in sorted(set(self.groups.tolist())):
            m = self.groups == g
            for j, N in enumerate(self.budgets):
                mu, se, gg = clustered_mean(A[m, j].astype(float), self.clusters[m], G)
                tc = t_crit(gg, self.level) if gg >= 2 else np.nan
                rows.append({"task": g, "budget": int(N), "rounds": int(m.sum()), "prompts": int(gg),
                             "accepted": mu, "accepted_lo": mu - tc * se, "accepted_hi": mu + tc * se,
                             "censored": int(cens[m, j].sum())})
        return pd.DataFrame(rows)


def group_labels(frame: pd.DataFrame, by: str, notes: list) -> np.ndarray:
    """Group label per round: the ``by`` column, prefixed by the drafter when the logs hold
    several (their trees differ, so they are never pooled); rounds of several target models
    get the arm label ``drafter @ target`` first (:func:`glance_law.data.arms.label_targets`)."""
    from glance_law.data.arms import label_targets
    frame = label_targets(frame)
    by = grouping(by)    # None ('none'), or a column the logs lack: one pooled group per drafter, 'pooled'
    g = frame[by].astype(str).to_numpy() if by in frame.columns else np.full(len(frame), POOLED, object)
    if "drafter" in frame.columns:
        dr = frame["drafter"].astype(str).to_numpy()
        names = sorted(set(dr.tolist()))
        if len(names) > 1:
            notes.append(f"{len(names)} drafters analysed separately (groups drafter/{by or POOLED}): "
                         f"{', '.join(names)}")
            g = np.array([f"{a}/{b}" for a, b in zip(dr, g)], dtype=object)
    return g


def replay(rounds, *, n_max: int = 255, budgets: Sequence[int] | None = None, by: str = "task",
           level: float = 0.95) -> Replay:
    """Replay every budget up to ``n_max`` for the rounds of a frame or :class:`LogSet`.

    Rounds without replayable vectors (``topk_logq``, ``target_rank``) are excluded and counted.

    Parameters
    ----------
    rounds : DataFrame or LogSet
        Round logs with the replay columns.
    n_max : int, default 255
        The largest tree budget replayed.
    budgets : sequence of int, optional
        The budgets ``to_frame()`` shows (default 1, 2, 4, ... up to n_max and the logged budgets).
    by : str, default "task"
        Grouping column.
    level : float, default 0.95
        Interval level (prompt-clustered).

    Returns
    -------
    Replay
        Mean accepted length per group and budget.

    Examples
    --------
    >>> import glance_law as gl
    >>> res = gl.replay(gl.simulate_tree_rounds(n_prompts=4, rounds_per_prompt=5, seed=0), n_max=15)
    >>> type(res).__name__
    'Replay'
    """
    frame = getattr(rounds, "frame", rounds)
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError("replay expects a rounds DataFrame or a LogSet from glance_law.read_logs")
    logq, rank, usable, notes = round_arrays(frame)
    sub = frame.loc[usable]
    arr = replay_arrays(logq[usable], rank[usable], n_max)
    groups = group_labels(sub, by, notes)
    codes, _ = cluster_codes(sub)
    lb = sub["budget"].to_numpy(dtype=np.int64) if "budget" in sub.columns else None
    la = sub["accepted"].to_numpy(dtype=np.int64) if "accepted" in sub.columns else None
    if budgets is None:
        b = {int(2 ** i) - 1 for i in range(1, 10) if 2 ** i - 1 <= n_max} | {n_max}
        if lb is not None:
            b |= {int(x) for x in np.unique(lb) if 1 <= x <= n_max}
        budgets = sorted(b)
    budgets = tuple(int(x) for x in budgets)
    cens = arr.censored(list(budgets)).any(axis=0)
    if cens.any():
        notes.append("censored: rounds whose path reaches an unknown offset (end of the stream) inside the "
                     "replayed tree; their accepted length is capped there (column censored)")
    if lb is not None:
        above = [N for N in budgets if (lb < N).any()]
        if above:
            notes.append(f"budgets above a round's logged budget are replayed within its horizon (the "
                         f"drafter proposed no deeper offsets): {', '.join(map(str, above))}")
    res = Replay(arrays=arr, groups=groups, clusters=codes, budgets=budgets, logged_budget=lb,
                 logged_accepted=la, level=level, note_lines=())
    mm = res.mismatches()
    if lb is not None and la is not None:
        checked = int(((lb >= 1) & (lb <= n_max)).sum())
        notes.append(f"replay at the logged budget reproduces the logged accepted length on "
                     f"{checked - mm.size} of {checked} rounds")
    notes.append(f"intervals: {100 * level:g}% prompt-clustered (CR1, Student-t(G-1))")
    return Replay(arrays=arr, groups=groups, clusters=codes, budgets=budgets, logged_budget=lb,
                  logged_accepted=la, level=level, note_lines=tuple(notes))
