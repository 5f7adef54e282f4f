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

How :func:`best_first` stays exact and fast
-------------------------------------------
Let ``t*`` be a round's ``n_max``-th best score. The first ``n_max`` nodes are
the ``n_max`` smallest keys among the nodes scoring ``>= t*``, and that set is
prefix-closed, so it can be *enumerated* depth by depth (children of kept
nodes only) once a lower bound ``lo <= t*`` is known: every node scoring
``>= lo`` is generated, nothing below it is. Any ``n_max`` distinct nodes give
such a bound (their worst score), and three sources keep it tight:

1. a *seed*: the per-depth top-m lists (the top m nodes of depth d have their
   parents among the top m of depth d-1, and the ``(i+1)(c+1) <= m`` rule keeps
   only the children that can reach them) - their union holds ``15 m``
   distinct nodes whose ``n_max``-th best score is exact whenever no depth
   contributes more than m nodes to the first ``n_max``;
2. the caller's ``floor`` (the replay's deepest target prefix);
3. *tightening*: when a round has enumerated ``2 n_max`` nodes, its
   ``n_max``-th best score so far becomes a strict bound for deeper nodes
   (a deeper node at that score sorts after all of them).

Rows are sorted, so children are generated rank by rank and a parent stops at
its first child below the bound. Nodes are kept per round in (depth, code)
order, so one stable sort by score finishes the order. Rounds are processed in
memory-bounded chunks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["best_first", "build_tree", "Tree", "chain_tree", "max_code_bits"]

#: rounds x budget processed per chunk: bounds memory (a few hundred MB) whatever the input size
_CHUNK_NODES = 1 << 18
#: width of the per-depth lists behind the seed bound
_SEED_WIDTH = 48


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
    logq = np.minimum(logq, 0.0)  # log-probabilities; clip float noise above 0
    with np.errstate(invalid="ignore"):
        unsorted = logq.shape[2] > 1 and bool(np.any(np.diff(logq, axis=2) > 0))
    if unsorted:
        raise ValueError("each row of logq must be sorted descending (the drafter's top-k in rank order)")
    return logq


def _child_pairs(m: int, k: int, n_max: int):
    """(parent, choice) pairs that can reach the first n_max of the next depth: the c-th
    child (0-based) of the i-th parent (0-based) is preceded there by the children
    c' <= c of the parents i' <= i, so it matters only when (i + 1) * (c + 1) <= n_max."""
    i = np.repeat(np.arange(m), k)
    c = np.tile(np.arange(k), m)
    keep = (i + 1) * (c + 1) <= n_max
    return i[keep], c[keep]


def _seed_bound(logq: np.ndarray, n_max: int, width: int = _SEED_WIDTH) -> np.ndarray:
    """A lower bound on each round's n_max-th best score: the n_max-th best of the union of
    the per-depth top-``width`` node scores (distinct nodes, exact scores). -inf when the
    union holds fewer than n_max finite scores."""
    R, L, k = logq.shape
    m = max(1, min(int(width), n_max))
    top = np.zeros((R, 1))
    lists = []
    for d in range(L):
        pi, ci = _child_pairs(top.shape[1], k, m)
        v = top[:, pi] + logq[:, d, ci]
        if v.shape[1] > m:
            v = np.partition(v, v.shape[1] - m, axis=1)[:, -m:]
        top = -np.sort(-v, axis=1)
        lists.append(top)
    allv = np.concatenate(lists, axis=1)
    if allv.shape[1] < n_max:
        return np.full(R, -np.inf)
    return np.partition(allv, allv.shape[1] - n_max, axis=1)[:, allv.shape[1] - n_max]


def _rows_matrix(levels, slot: np.ndarray, n_rows: int, width: int):
    """Scatter the per-depth node lists of the rounds with ``slot >= 0`` into padded
    (n_rows, width) score/depth/code matrices, each row in (depth, code) order."""
    S = np.full((n_rows, width), -np.inf)
    D = np.zeros((n_rows, width), np.int16)
    C = np.zeros((n_rows, width), np.int64)
    fill = np.zeros(n_rows, np.int64)
    for d, (r, s, c) in enumerate(levels, start=1):
        row = slot[r]
        sel = row >= 0
        if not sel.all():
            row, s, c = row[sel], s[sel], c[sel]
        if row.size == 0:
            continue
        n = np.bincount(row, minlength=n_rows)
        pos = fill[row] + np.arange(row.size) - (np.cumsum(n) - n)[row]   # rows are grouped in order
        S[row, pos] = s
        D[row, pos] = d
        C[row, pos] = c
        fill += n
    return S, D, C


def _enumerate(logq: np.ndarray, n_max: int, lo: np.ndarray):
    """Every node scoring >= ``lo`` that can be among the first n_max, depth by depth.

    Returns the per-depth lists ``[(round, score, code), ...]`` (each in (round, code)
    order) and the strict bound ``strict`` from tightening: the answer is the first
    n_max, by key, of the listed nodes scoring >= max(lo, strict)."""
    R, L, k = logq.shape
    big_neg = -np.finfo(np.float64).max          # a finite stand-in for "no bound": -inf never passes
    lo = np.maximum(lo, big_neg)
    strict = np.full(R, -np.inf)
    cap = 2 * n_max
    cnt = np.zeros(R, np.int64)
    fr_r = np.arange(R)
    fr_s = np.zeros(R)
    fr_c = np.zeros(R, np.int64)
    levels = []
    for d in range(L):
        if fr_r.size == 0:
            break
        colf = logq[:, d, :].ravel()
        thr = np.maximum(lo, np.nextafter(strict, np.inf))[fr_r]
        base = fr_r * k
        nchild = np.zeros(fr_r.size, np.int64)
        idx = np.arange(fr_r.size)
        passes = []
        for c in range(k):                        # child ranks in order: a parent stops at its first miss
            sc = fr_s[idx] + colf[base[idx] + c]
            ok = sc >= thr[idx]
            if not ok.all():
                idx, sc = idx[ok], sc[ok]
            if idx.size == 0:
                break
            nchild[idx] += 1
            passes.append((idx, sc))
        off = np.cumsum(nchild) - nchild
        total = int(nchild.sum())
        lv_r = np.empty(total, np.int64)
        lv_s = np.empty(total)
        lv_c = np.empty(total, np.int64)
        for c, (idx, sc) in enumerate(passes):
            pos = off[idx] + c
            lv_r[pos] = fr_r[idx]
            lv_s[pos] = sc
            lv_c[pos] = fr_c[idx] * k + c
        levels.append((lv_r, lv_s, lv_c))
        if total:
            cnt += np.bincount(lv_r, minlength=R)
        big = np.flatnonzero(cnt >= cap)
        if big.size:
            slot = np.full(R, -1)
            slot[big] = np.arange(big.size)
            S, _, _ = _rows_matrix(levels, slot, big.size, int(cnt[big].max()))
            th = np.partition(S, S.shape[1] - n_max, axis=1)[:, S.shape[1] - n_max]
            strict[big] = np.maximum(strict[big], th)
            for i, (r, s, c) in enumerate(levels):
                keep = s >= strict[r]
                if not keep.all():
                    levels[i] = (r[keep], s[keep], c[keep])
            cnt = np.zeros(R, np.int64)
            for r, _, _ in levels:
                cnt += np.bincount(r, minlength=R)
            lv_r, lv_s, lv_c = levels[-1]
        keep = lv_s > strict[lv_r]
        fr_r, fr_s, fr_c = lv_r[keep], lv_s[keep], lv_c[keep]
    return levels, strict


def _best_first_chunk(logq: np.ndarray, n_max: int, floor):
    R = logq.shape[0]
    lo = np.full(R, -np.inf) if floor is None else floor.copy()
    lo = np.maximum(lo, _seed_bound(logq, n_max))
    levels, strict = _enumerate(logq, n_max, lo)
    for i, (r, s, c) in enumerate(levels):            # drop nodes below a tightened bound
        keep = s >= strict[r]
        if not keep.all():
            levels[i] = (r[keep], s[keep], c[keep])
    cnt = np.zeros(R, np.int64)
    for r, _, _ in levels:
        cnt += np.bincount(r, minlength=R)
    width = int(cnt.max(initial=0))
    out_s = np.full((R, n_max), -np.inf)
    out_d = np.zeros((R, n_max), np.int16)
    out_c = np.zeros((R, n_max), np.int64)
    if width == 0:
        return out_s, out_d, out_c
    S, D, C = _rows_matrix(levels, np.arange(R), R, width)
    # rows are in (depth, code) order, so a stable sort by score gives the full key order
    o = np.argsort(-S, axis=1, kind="stable")[:, :n_max]
    m = o.shape[1]
    out_s[:, :m] = np.take_along_axis(S, o, axis=1)
    out_d[:, :m] = np.take_along_axis(D, o, axis=1)
    out_c[:, :m] = np.take_along_axis(C, o, axis=1)
    dead = ~np.isfinite(out_s)
    out_d[dead] = 0
    out_c[dead] = 0
    return out_s, out_d, out_c


def best_first(logq, n_max: int, floor=None):
    """The first ``n_max`` nodes of every round's best-first order.

    ``logq``: (R, L, k) per-offset top-k log-probabilities (rows sorted
    descending; NaN = not proposed). Returns ``(score, depth, code)``, each
    (R, n_max), in best-first order; missing nodes have depth 0 and score -inf.

    ``floor`` (optional, (R,)): nodes scoring strictly below a round's floor are
    not wanted (the replay passes the score of the deepest target prefix it must
    place, since nodes below it cannot change any target prefix's position).
    The result then lists the first ``n_max`` nodes at or above the floor
    (NaN or -inf: no floor).

    Exact for any input (ties included); see the module docstring for how the
    enumeration avoids sorting more than one short row per round.
    """
    return _best_first_prepared(_check_logq(logq), n_max, floor)


def _best_first_prepared(logq: np.ndarray, n_max: int, floor=None):
    """:func:`best_first` on an array already passed through :func:`_check_logq`."""
    R, L, k = logq.shape
    n_max = int(n_max)
    if n_max < 1:
        raise ValueError("budget must be >= 1")
    fl = None
    if floor is not None:
        fl = np.asarray(floor, dtype=np.float64).reshape(R)
        fl = np.where(np.isnan(fl), -np.inf, fl)
    out_s = np.full((R, n_max), -np.inf)
    out_d = np.zeros((R, n_max), np.int16)
    out_c = np.zeros((R, n_max), np.int64)
    rows = max(64, _CHUNK_NODES // n_max)
    for a in range(0, R, rows):
        b = min(R, a + rows)
        out_s[a:b], out_d[a:b], out_c[a:b] = _best_first_chunk(
            logq[a:b], n_max, None if fl is None else fl[a:b])
    return out_s, out_d, out_c


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
