"""The one candidate-tree builder (numpy only), shared by the live decoder and the replay.

Given a drafter's per-offset top-k log-probabilities ``logq`` (L x k, each row
sorted descending), a candidate is a string of choices ``c_1..c_d`` (``c_j``
indexes row j) with plug-in score ``sum_j logq[j, c_j]`` (Assumption 1). The
best-first tree of budget N is the first N candidates in the total order

    key(node) = (-score, depth, code)

where ``code = sum_j c_j * k^(d-j)`` is the choice string read as a base-k
number (lexicographic order of choices at equal depth). Because
``logq <= 0``, a child never outscores its parent and, at equal score, the
parent's smaller depth puts it first: the first N nodes are prefix-closed and
come *parents first*. Ties are therefore broken deterministically by depth,
then by the lexicographic order of the drafter's ranks. Candidates with score
``-inf`` (tokens the drafter did not propose, e.g. prompt lookup) are never
included, so a tree may hold fewer than N nodes.

Scores are accumulated in float64 along the path (offset 1 first) from the
float32 values the logger stores, so the replay over logged ``topk_logq`` and
the live decoder order nodes identically.

:func:`best_first` is vectorised over rounds and exact; :func:`build_tree`
wraps it for one round and adds parents, choices and the ancestor mask.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["best_first", "build_tree", "Tree", "chain_tree", "max_code_bits"]


def max_code_bits(L: int, k: int) -> float:
    return L * np.log2(max(k, 2))


def _check_logq(logq: np.ndarray) -> np.ndarray:
    logq = np.asarray(logq, dtype=np.float64)
    if logq.ndim != 3:
        raise ValueError("logq must have shape (rounds, L, k)")
    if logq.shape[1] < 1 or logq.shape[2] < 1:
        raise ValueError("logq needs at least one offset and one candidate per offset")
    if max_code_bits(logq.shape[1], logq.shape[2]) > 62:
        raise ValueError(f"L={logq.shape[1]}, k={logq.shape[2]} is too large for exact node codes "
                         "(L*log2(k) must be <= 62); lower --branch-k or the horizon")
    logq = np.where(np.isnan(logq), -np.inf, logq)
    return np.minimum(logq, 0.0)  # log-probabilities; clip float noise above 0


def _sort_by_key(score, depth, code):
    """Per-row permutation sorting by (-score, depth, code); arrays (R, m)."""
    o = np.argsort(code, axis=1, kind="stable")
    if depth is not None:
        d = np.take_along_axis(depth, o, axis=1)
        o = np.take_along_axis(o, np.argsort(d, axis=1, kind="stable"), axis=1)
    s = np.take_along_axis(score, o, axis=1)
    return np.take_along_axis(o, np.argsort(-s, axis=1, kind="stable"), axis=1)


def _child_pairs(m: int, k: int, n_max: int):
    """(parent, choice) pairs that can reach the first n_max of the next depth: the c-th
    child (0-based) of the i-th parent (0-based) is preceded there by the children
    c' <= c of the parents i' <= i, so it matters only when (i + 1) * (c + 1) <= n_max."""
    i = np.repeat(np.arange(m), k)
    c = np.tile(np.arange(k), m)
    keep = (i + 1) * (c + 1) <= n_max
    return i[keep], c[keep]


def best_first(logq, n_max: int, floor=None):
    """The first ``n_max`` nodes of every round's best-first order.

    ``logq``: (R, L, k) per-offset top-k log-probabilities (rows sorted
    descending; NaN = not proposed). Returns ``(score, depth, code)``, each
    (R, n_max), in best-first order; missing nodes have depth 0 and score -inf.

    ``floor`` (optional, (R,)): nodes scoring strictly below a round's floor are
    not wanted (the replay passes the score of the deepest target prefix it must
    place, since nodes below it cannot change any target prefix's position).
    The result then lists the first ``n_max`` nodes at or above the floor.

    Exactness: a node in the global first ``n_max`` has its parent there too and
    is among the first ``n_max`` of its own depth, so expanding only the first
    ``n_max`` nodes of each depth - and pruning candidates strictly below the
    running ``n_max``-th best score - loses nothing.
    """
    logq = _check_logq(logq)
    R, L, k = logq.shape
    n_max = int(n_max)
    if n_max < 1:
        raise ValueError("budget must be >= 1")
    # level state: scores/codes of the kept nodes of the previous depth
    S = np.zeros((R, 1))
    C = np.zeros((R, 1), dtype=np.int64)
    best = np.full((R, 0), -np.inf)          # running best scores over all depths (for the threshold)
    kept_s, kept_d, kept_c = [], [], []
    thr = np.full(R, -np.inf) if floor is None else np.asarray(floor, dtype=np.float64).reshape(R).copy()
    floor_thr = thr.copy()
    for d in range(L):
        pi, ci = _child_pairs(S.shape[1], k, n_max)
        cand = S[:, pi] + logq[:, d, :][:, ci]
        codes = C[:, pi] * k + ci[None, :]
        cand[cand < thr[:, None]] = -np.inf
        alive = np.isfinite(cand)
        width = int(min(n_max, alive.sum(axis=1).max(initial=0)))
        if width == 0:
            break
        if width < cand.shape[1]:
            # shrink to the columns that are alive in some row before sorting
            cols = np.flatnonzero(alive.any(axis=0))
            cand, codes = cand[:, cols], codes[:, cols]
        o = _sort_by_key(cand, None, codes)[:, :width]
        S = np.take_along_axis(cand, o, axis=1)
        C = np.take_along_axis(codes, o, axis=1)
        kept_s.append(S)
        kept_d.append(np.full(S.shape, d + 1, dtype=np.int16))
        kept_c.append(C)
        best = np.concatenate([best, S], axis=1)
        if best.shape[1] > n_max:
            best = -np.partition(-best, n_max - 1, axis=1)[:, :n_max]
        if best.shape[1] >= n_max:
            thr = np.maximum(best.min(axis=1), floor_thr)
    if not kept_s:
        return (np.full((R, n_max), -np.inf), np.zeros((R, n_max), np.int16),
                np.zeros((R, n_max), np.int64))
    s = np.concatenate(kept_s, axis=1)
    dd = np.concatenate(kept_d, axis=1)
    cc = np.concatenate(kept_c, axis=1)
    s[s < thr[:, None]] = -np.inf
    cols = np.flatnonzero(np.isfinite(s).any(axis=0))
    s, dd, cc = s[:, cols], dd[:, cols], cc[:, cols]
    o = _sort_by_key(s, dd, cc)[:, :n_max]
    s = np.take_along_axis(s, o, axis=1)
    dd = np.take_along_axis(dd, o, axis=1)
    cc = np.take_along_axis(cc, o, axis=1)
    dead = ~np.isfinite(s)
    dd = np.where(dead, 0, dd).astype(np.int16)
    cc = np.where(dead, 0, cc)
    if s.shape[1] < n_max:
        pad = n_max - s.shape[1]
        s = np.pad(s, ((0, 0), (0, pad)), constant_values=-np.inf)
        dd = np.pad(dd, ((0, 0), (0, pad)))
        cc = np.pad(cc, ((0, 0), (0, pad)))
    return s, dd, cc


@dataclass(frozen=True, eq=False)
class Tree:
    """A packed candidate tree: node i (0-based, parents first) at ``depth[i]`` (1-based
    offset) chooses row entry ``choice[i]`` of ``logq[depth[i]-1]``; ``parent[i]`` is -1
    for children of the root."""

    parent: np.ndarray
    depth: np.ndarray
    choice: np.ndarray
    score: np.ndarray
    k: int

    @property
    def size(self) -> int:
        return int(self.parent.shape[0])

    @property
    def max_depth(self) -> int:
        return int(self.depth.max(initial=0))

    def tokens(self, topk_ids: np.ndarray) -> np.ndarray:
        """Token ids of the nodes given the drafter's (L, k) top-k token ids."""
        topk_ids = np.asarray(topk_ids)
        return topk_ids[self.depth - 1, self.choice] if self.size else np.zeros(0, topk_ids.dtype)

    def ancestor_mask(self) -> np.ndarray:
        """(N, N) bool: [i, j] is True when node j is node i or one of its ancestors."""
        n = self.size
        m = np.eye(n, dtype=bool)
        for i in range(n):
            p = self.parent[i]
            if p >= 0:
                m[i] |= m[p]
        return m

    def path(self, i: int) -> list[int]:
        """Node indices from the root's child down to node i."""
        out = []
        while i >= 0:
            out.append(int(i))
            i = int(self.parent[i])
        return out[::-1]

    def children(self) -> list[list[int]]:
        ch: list[list[int]] = [[] for _ in range(self.size + 1)]  # index 0 = root
        for i, p in enumerate(self.parent):
            ch[p + 1].append(i)
        return ch


def build_tree(logq, budget: int) -> Tree:
    """The best-first prefix-closed tree of at most ``budget`` nodes for one round.

    ``logq``: (L, k) top-k log-probabilities per offset, rows sorted descending.
    """
    logq = np.asarray(logq, dtype=np.float64)
    if logq.ndim != 2:
        raise ValueError("logq must have shape (L, k) for one round")
    L, k = logq.shape
    s, d, c = best_first(logq[None], budget)
    s, d, c = s[0], d[0], c[0]
    keep = d > 0
    s, d, c = s[keep], d[keep].astype(np.int64), c[keep]
    index = {(int(dd), int(cc)): i for i, (dd, cc) in enumerate(zip(d, c))}
    parent = np.array([-1 if dd == 1 else index[(int(dd) - 1, int(cc) // k)] for dd, cc in zip(d, c)],
                      dtype=np.int64)
    choice = (c % k).astype(np.int64)
    return Tree(parent=parent, depth=d, choice=choice, score=s, k=k)


def chain_tree(length: int) -> Tree:
    """A width-1 chain of ``length`` nodes (top-1 at every offset)."""
    n = int(length)
    return Tree(parent=np.arange(n, dtype=np.int64) - 1, depth=np.arange(1, n + 1, dtype=np.int64),
                choice=np.zeros(n, dtype=np.int64), score=np.zeros(n), k=1)
