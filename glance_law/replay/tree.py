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

from glance_law.errors import GlanceError

__all__ = ["best_first", "best_first_one", "target_positions", "build_tree", "Tree", "chain_tree", "max_code_bits"]

#: rounds x budget processed per chunk: bounds memory (a few hundred MB) whatever the input size
_CHUNK_NODES = 1 << 18
#: width of the per-depth lists behind the seed bound
_SEED_WIDTH = 48


class CodeWidthError(GlanceError, ValueError):
    """Horizon x log2(top-k width) exceeds the 62 bits of the exact node codes (a limit of the
    data, not a programming error: the CLIs print it as one line and exit 2)."""


def max_code_bits(L: int, k: int) -> float:
    return L * np.log2(max(k, 2))


def check_logq(logq: np.ndarray) -> np.ndarray:
    """A float64 copy of ``logq`` (R, L, k) with NaN -> -inf and values clipped to <= 0, after
    checking the shape, the code width and that rows are sorted descending."""
    shape = np.shape(logq)
    if len(shape) != 3:
        raise ValueError("logq must have shape (rounds, L, k)")
    if shape[1] < 1 or shape[2] < 1:
        raise ValueError("logq needs at least one offset and one candidate per offset")
    if max_code_bits(shape[1], shape[2]) > 62:
        L, k = shape[1], shape[2]
        raise CodeWidthError(f"horizon L={L} with top-k width k={k} is too large for the exact replay's node "
                             f"codes (L x log2(k) = {max_code_bits(L, k):.1f} > 62; at k={k} the replay handles "
                             f"horizons up to {int(62 // np.log2(max(k, 2)))}); log with a smaller glance-log --branch-k or "
                             "horizon, or select rounds with a shorter horizon")
    logq = np.array(logq, dtype=np.float64)       # a copy: cleaned in place below
    logq[np.isnan(logq)] = -np.inf
    np.minimum(logq, 0.0, out=logq)               # log-probabilities; clip float noise above 0
    if shape[2] > 1 and bool(np.any(logq[:, :, 1:] > logq[:, :, :-1])):
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


class _Levels:
    """The listed nodes of a chunk of R rounds, one (round, score, code) list per depth, each
    grouped by round in (round, code) order, with per-round offsets so that the nodes of a few
    rounds can be gathered without scanning the others."""

    def __init__(self, R: int):
        self.R = R
        self.lists: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.starts: list[np.ndarray] = []          # (R + 1,) offsets per depth
        self.count = np.zeros(R, np.int64)          # listed nodes per round

    def append(self, r, s, c) -> np.ndarray:
        n = np.bincount(r, minlength=self.R)
        self.lists.append((r, s, c))
        self.starts.append(np.r_[0, np.cumsum(n)])
        self.count += n
        return n

    def matrix(self, rows: np.ndarray | None = None, full: bool = True):
        """Padded (len(rows), width) score (and depth, code) matrices of the given rounds (all
        when None), each row in (depth, code) order; padding scores are -inf."""
        rows = np.arange(self.R) if rows is None else rows
        nb = rows.size
        width = max(int(self.count[rows].max(initial=0)), 1)
        S = np.full((nb, width), -np.inf)
        D = np.zeros((nb, width), np.int16) if full else None
        C = np.zeros((nb, width), np.int64) if full else None
        fill = np.zeros(nb, np.int64)
        for d, ((_, s, c), st) in enumerate(zip(self.lists, self.starts), start=1):
            a = st[rows]
            n = st[rows + 1] - a
            tot = int(n.sum())
            if tot == 0:
                continue
            first = np.cumsum(n) - n
            slot = np.repeat(np.arange(nb), n)
            within = np.arange(tot) - first[slot]
            src = a[slot] + within
            col = fill[slot] + within
            S[slot, col] = s[src]
            if full:
                D[slot, col] = d
                C[slot, col] = c[src]
            fill += n
        return S, D, C

    def prune(self, bound: np.ndarray) -> None:
        """Drop the listed nodes scoring below ``bound[round]``."""
        for i, (r, s, c) in enumerate(self.lists):
            keep = s >= bound[r]
            if not keep.all():
                r, s, c = r[keep], s[keep], c[keep]
                self.lists[i] = (r, s, c)
                self.starts[i] = np.r_[0, np.cumsum(np.bincount(r, minlength=self.R))]
        self.count = np.zeros(self.R, np.int64)
        for st in self.starts:
            self.count += np.diff(st)


def _expand(colf: np.ndarray, k: int, fr_r, fr_s, fr_c, thr):
    """The children of the frontier nodes (round ``fr_r``, score ``fr_s``, code ``fr_c``) scoring
    >= ``thr`` (one bound per frontier node), as (round, score, code) in (round, code) order.
    ``colf``: the next offset's rows, raveled. Rows are sorted, so child ranks are tried in order
    and a parent stops at its first child below the bound."""
    base = fr_r * k
    nchild = np.zeros(fr_r.size, np.int64)
    idx = np.arange(fr_r.size)
    passes = []
    for c in range(k):
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
    return lv_r, lv_s, lv_c


def _enumerate(logq: np.ndarray, n_max: int, lo: np.ndarray):
    """Every node scoring >= ``lo`` that can be among the first n_max, depth by depth.

    Returns the listed nodes (:class:`_Levels`) and the strict bound ``strict`` from
    tightening: the answer is the first n_max, by key, of the listed nodes scoring
    >= max(lo, strict)."""
    R, L, k = logq.shape
    big_neg = -np.finfo(np.float64).max          # a finite stand-in for "no bound": -inf never passes
    lo = np.maximum(lo, big_neg)
    strict = np.full(R, -np.inf)
    cap = 2 * n_max
    live = np.zeros(R, np.int64)                 # listed nodes at or above the current bounds
    fr_r = np.arange(R)
    fr_s = np.zeros(R)
    fr_c = np.zeros(R, np.int64)
    lv = _Levels(R)
    for d in range(L):
        if fr_r.size == 0:
            break
        thr = np.maximum(lo, np.nextafter(strict, np.inf))[fr_r]
        r, sc, c = _expand(logq[:, d, :].ravel(), k, fr_r, fr_s, fr_c, thr)
        live += lv.append(r, sc, c)
        big = np.flatnonzero(live >= cap)
        if big.size:
            # tighten: the n_max-th best listed score; deeper nodes must beat it strictly
            S, _, _ = lv.matrix(big, full=False)
            th = np.partition(S, S.shape[1] - n_max, axis=1)[:, S.shape[1] - n_max]
            strict[big] = np.maximum(strict[big], th)
            live[big] = (S >= strict[big][:, None]).sum(axis=1)
        keep = sc > strict[r]
        fr_r, fr_s, fr_c = r[keep], sc[keep], c[keep]
    return lv, strict


def _target_chunk(logq: np.ndarray, n_max: int, tscore: np.ndarray, tcode: np.ndarray, D: np.ndarray):
    """Positions of the target prefixes (see :func:`target_positions`) for one chunk of rounds."""
    R, L, k = logq.shape
    pos = np.full((R, L), n_max, np.int64)
    d_r = D.astype(np.int64).copy()
    rows = np.arange(R)
    floor = np.where(d_r > 0, tscore[rows, np.maximum(d_r - 1, 0)], np.inf)
    live = np.flatnonzero(d_r > 0)
    fr_r, fr_s, fr_c = live, np.zeros(live.size), np.zeros(live.size, np.int64)
    lv = _Levels(R)
    above = np.zeros(R, np.int64)                # listed nodes scoring > floor: they all precede it
    for d in range(L):
        if fr_r.size == 0:
            break
        r, sc, c = _expand(logq[:, d, :].ravel(), k, fr_r, fr_s, fr_c, floor[fr_r])
        lv.append(r, sc, c)
        if r.size:
            above += np.bincount(r, weights=sc > floor[r], minlength=R).astype(np.int64)
        over = np.flatnonzero(above >= n_max)
        if over.size:
            # the deepest candidate prefix sits at position >= n_max: move the floor up to the
            # deepest prefix that fewer than n_max listed nodes outscore (nodes left below the new
            # floor sort after every remaining prefix, so they stay listed until the end)
            S, _, _ = lv.matrix(over, full=False)
            J = int(d_r[over].max())
            cg = np.zeros((over.size, L), np.int64)
            for j in range(J):                  # listed nodes outscoring prefix j+1, per round
                cg[:, j] = (S > tscore[over, j][:, None]).sum(axis=1)
            ok = (cg < n_max) & (np.arange(L)[None, :] < d_r[over][:, None])
            newd = np.cumprod(ok, axis=1).sum(axis=1)
            d_r[over] = newd
            floor[over] = np.where(newd > 0, tscore[over, np.maximum(newd - 1, 0)], np.inf)
            above[over] = np.where(newd > 0, cg[np.arange(over.size), np.maximum(newd - 1, 0)], 0)
        keep = sc >= floor[r]
        fr_r, fr_s, fr_c = r[keep], sc[keep], c[keep]
    lv.prune(floor)
    if not lv.count.any():
        return pos
    S, Dp, C = lv.matrix()
    # rows are in (depth, code) order, so a stable sort by score gives the full key order; a
    # target prefix's position is its rank there
    o = np.argsort(-S, axis=1, kind="stable")
    rank = np.empty_like(o)
    np.put_along_axis(rank, o, np.broadcast_to(np.arange(S.shape[1]), S.shape), axis=1)
    dd = Dp.astype(np.int64)
    want = np.take_along_axis(tcode, np.maximum(dd - 1, 0), axis=1)
    i, col = np.nonzero((dd >= 1) & (dd <= d_r[:, None]) & (C == want))
    pos[i, dd[i, col] - 1] = np.minimum(rank[i, col], n_max)
    return pos


def target_positions(logq, tscore, tcode, placeable, n_max: int) -> np.ndarray:
    """Position of each target prefix in its round's best-first order, capped at ``n_max``.

    ``tscore``/``tcode`` (R, L): score (accumulated as the builder does) and code of the
    target's prefix of depth d+1; ``placeable`` (R,): how many leading prefixes exist (the
    target's token is inside the logged top-k). Returns (R, L) int32 positions, ``n_max``
    meaning "not among the first n_max" (or not placeable).

    This is the replay's pass: it enumerates only nodes scoring at least the deepest prefix
    it still has to place, and whenever n_max listed nodes outscore that prefix (so its
    position is >= n_max) it moves the floor up to the next prefix; the listed nodes are then
    ordered exactly as :func:`best_first` orders them.
    """
    return target_positions_prepared(check_logq(logq), tscore, tcode, placeable, n_max)


def target_positions_prepared(logq: np.ndarray, tscore, tcode, placeable, n_max: int) -> np.ndarray:
    """:func:`target_positions` on an array already passed through :func:`check_logq`."""
    R, L, k = logq.shape
    n_max = int(n_max)
    if n_max < 1:
        raise ValueError("budget must be >= 1")
    tscore = np.asarray(tscore, dtype=np.float64).reshape(R, L)
    tcode = np.asarray(tcode, dtype=np.int64).reshape(R, L)
    D = np.asarray(placeable, dtype=np.int64).reshape(R)
    out = np.full((R, L), n_max, np.int32)
    rows = max(64, _CHUNK_NODES // n_max)
    for a in range(0, R, rows):
        b = min(R, a + rows)
        out[a:b] = _target_chunk(logq[a:b], n_max, tscore[a:b], tcode[a:b], D[a:b])
    return out


def _best_first_chunk(logq: np.ndarray, n_max: int, floor):
    R = logq.shape[0]
    lo = np.full(R, -np.inf) if floor is None else floor.copy()
    lo = np.maximum(lo, _seed_bound(logq, n_max))
    lv, strict = _enumerate(logq, n_max, lo)
    lv.prune(np.maximum(lo, strict))                  # drop nodes below a tightened bound
    out_s = np.full((R, n_max), -np.inf)
    out_d = np.zeros((R, n_max), np.int16)
    out_c = np.zeros((R, n_max), np.int64)
    if not lv.count.any():
        return out_s, out_d, out_c
    S, D, C = lv.matrix()
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
    return _best_first_prepared(check_logq(logq), n_max, floor)


def _best_first_prepared(logq: np.ndarray, n_max: int, floor=None):
    """:func:`best_first` on an array already passed through :func:`check_logq`."""
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


def best_first_one(logq, n_max: int):
    """:func:`best_first` for ONE round, by a heap: ``(score, depth, code)``, each (n_max,), equal to
    ``best_first(logq[None], n_max)[i][0]`` element for element (same keys, same float64 scores).

    The live decoder builds one tree a round; the vectorised enumeration is built for many rounds
    and costs about a millisecond for one. Here every node has one predecessor - its parent for a
    first child (choice 0), else its previous sibling - whose key (-score, depth, code) is smaller
    (rows are sorted, so neither a child nor a later sibling outscores it), so popping the heap
    lists the nodes in exactly the total order, pushing at most two successors per pop.
    ``logq``: (L, k), rows sorted descending (NaN = not proposed)."""
    import heapq

    lq = check_logq(np.asarray(logq)[None])[0]
    L, k = lq.shape
    n_max = int(n_max)
    if n_max < 1:
        raise ValueError("budget must be >= 1")
    out_s = np.full(n_max, -np.inf)
    out_d = np.zeros(n_max, np.int16)
    out_c = np.zeros(n_max, np.int64)
    rows = lq.tolist()
    # heap entries: (-score, depth, code, parent score, choice)
    heap = [(-(0.0 + rows[0][0]), 1, 0, 0.0, 0)] if rows[0][0] > -np.inf else []
    i = 0
    while heap and i < n_max:
        neg, d, code, ps, c = heapq.heappop(heap)
        out_s[i], out_d[i], out_c[i] = -neg, d, code
        i += 1
        if c + 1 < k and rows[d - 1][c + 1] > -np.inf:          # the next sibling
            sc = ps + rows[d - 1][c + 1]
            heapq.heappush(heap, (-sc, d, code + 1, ps, c + 1))
        if d < L and rows[d][0] > -np.inf:                       # the first child
            heapq.heappush(heap, (-(-neg + rows[d][0]), d + 1, code * k, -neg, 0))
    return out_s, out_d, out_c


def build_tree(logq, budget: int) -> Tree:
    """The best-first prefix-closed tree of at most ``budget`` nodes for one round.

    ``logq``: (L, k) top-k log-probabilities per offset, rows sorted descending.
    """
    logq = np.asarray(logq, dtype=np.float64)
    if logq.ndim != 2:
        raise ValueError("logq must have shape (L, k) for one round")
    L, k = logq.shape
    s, d, c = best_first_one(logq, budget)
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
