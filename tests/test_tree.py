"""The candidate-tree builder: exactness against brute-force enumeration.

The order is (-score, depth, code) with scores accumulated in float64 from
offset 1; every test compares :func:`best_first` / :func:`build_tree` with a
brute-force enumeration of all k + k^2 + ... + k^L nodes sorted by that key.
"""
from __future__ import annotations

import heapq
import itertools

import numpy as np
import pytest

from glance_law.replay import tree as T


def brute_order(logq: np.ndarray):
    """All finite-score nodes of one round as (score, depth, code) sorted by key."""
    logq = np.minimum(np.where(np.isnan(logq), -np.inf, np.asarray(logq, np.float64)), 0.0)
    L, k = logq.shape
    nodes = []
    for d in range(1, L + 1):
        for ch in itertools.product(range(k), repeat=d):
            s = 0.0
            for j, c in enumerate(ch):
                s = s + float(logq[j, c])           # float64, offset 1 first
            if s == -np.inf:
                continue
            code = 0
            for c in ch:
                code = code * k + c
            nodes.append((s, d, code))
    nodes.sort(key=lambda t: (-t[0], t[1], t[2]))
    return nodes


def heap_order(logq: np.ndarray, n: int):
    """Reference best-first by a priority queue (next sibling + first child successors)."""
    logq = np.minimum(np.where(np.isnan(logq), -np.inf, np.asarray(logq, np.float64)), 0.0)
    L, k = logq.shape
    out = []
    heap = [(-float(logq[0, 0]), 1, 0, (0,), 0.0)]
    while heap and len(out) < n:
        neg, d, code, ch, ps = heapq.heappop(heap)
        if neg == np.inf:
            break
        s = -neg
        out.append((s, d, code))
        if ch[-1] + 1 < k:                              # next sibling
            c = ch[-1] + 1
            heapq.heappush(heap, (-(ps + float(logq[d - 1, c])), d, code + 1, ch[:-1] + (c,), ps))
        if d < L:                                       # first child
            heapq.heappush(heap, (-(s + float(logq[d, 0])), d + 1, code * k, ch + (0,), s))
    return out


def random_logq(rng, L, k, *, ties=False, inf_frac=0.0, round_to=None, R=1):
    x = rng.dirichlet(np.ones(k + 3) * rng.choice([0.2, 1.0, 5.0]), size=(R, L))[..., :k]
    lq = np.log(x)
    if round_to is not None:
        lq = np.round(lq, round_to)
    if ties:
        # repeat values inside rows and across offsets
        lq[..., 1:] = np.where(rng.random(lq[..., 1:].shape) < 0.4, lq[..., :-1], lq[..., 1:])
        lq = np.where(rng.random(lq.shape) < 0.2, np.round(lq), lq)
    if inf_frac:
        lq = np.where(rng.random(lq.shape) < inf_frac, -np.inf, lq)
    lq = -np.sort(-lq, axis=-1)
    return lq.astype(np.float32)


def as_tuples(s, d, c):
    keep = d > 0
    return [(float(a), int(b), int(e)) for a, b, e in zip(s[keep], d[keep], c[keep])]


@pytest.mark.parametrize("seed", range(40))
def test_best_first_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(1, 5))
    k = int(rng.integers(1, 5))
    lq = random_logq(rng, L, k, ties=seed % 3 == 0, inf_frac=0.15 if seed % 4 == 1 else 0.0,
                     round_to=1 if seed % 5 == 2 else None, R=6)
    for n in sorted({1, 2, 3, 5, int(rng.integers(1, 40)), 60}):
        s, d, c = T.best_first(lq, n)
        assert s.shape == d.shape == c.shape == (6, n)
        for r in range(6):
            want = brute_order(lq[r])[:n]
            assert as_tuples(s[r], d[r], c[r]) == want
            # padding: missing nodes have depth 0, score -inf
            assert np.all(d[r, len(want):] == 0) and np.all(np.isneginf(s[r, len(want):]))


@pytest.mark.parametrize("seed", range(24))
def test_one_round_heap_equals_the_vectorised_enumeration(seed):
    """best_first_one (the live decoder's one-round path) lists the same nodes, in the same order,
    with bit-equal scores, as best_first; ties, unproposed tokens and -inf rows included."""
    rng = np.random.default_rng(300 + seed)
    L, k = int(rng.integers(1, 9)), int(rng.choice([1, 2, 4, 8]))
    lq = random_logq(rng, L, k, ties=seed % 3 == 0, inf_frac=0.2 if seed % 4 == 1 else 0.0,
                     round_to=1 if seed % 5 == 2 else None, R=4)
    for n in (1, 7, 63, 200):
        s, d, c = T.best_first(lq, n)
        for r in range(4):
            s1, d1, c1 = T.best_first_one(lq[r], n)
            assert np.array_equal(s[r], s1) and np.array_equal(d[r], d1) and np.array_equal(c[r], c1)
    if L >= 2 and k >= 2:
        assert T.best_first_one(lq[0], 3)[1].dtype == np.int16


@pytest.mark.parametrize("seed", range(12))
def test_floor_keeps_the_first_nodes_at_or_above_it(seed):
    rng = np.random.default_rng(100 + seed)
    L, k = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    lq = random_logq(rng, L, k, ties=seed % 2 == 0, round_to=1 if seed % 3 == 0 else None, R=5)
    n = int(rng.integers(2, 30))
    full = [brute_order(lq[r]) for r in range(5)]
    floor = np.array([f[min(len(f) - 1, int(rng.integers(0, len(f))))][0] for f in full])
    floor[0] = np.nan                                    # NaN = no floor
    s, d, c = T.best_first(lq, n, floor=floor)
    for r in range(5):
        fl = -np.inf if np.isnan(floor[r]) else floor[r]
        want = [t for t in full[r] if t[0] >= fl][:n]
        assert as_tuples(s[r], d[r], c[r]) == want


def test_all_equal_scores_and_zero_rows():
    # every node ties at score 0 (or log(1/2)): order is depth, then code
    for val in (0.0, np.log(0.5)):
        lq = np.full((1, 3, 3), val, np.float32)
        s, d, c = T.best_first(lq, 20)
        assert as_tuples(s[0], d[0], c[0]) == brute_order(lq[0])[:20]


@pytest.mark.parametrize("seed", range(6))
def test_larger_rounds_match_a_priority_queue(seed):
    """L = 15, k = 8, n_max = 255 (the benchmark shape): too big to enumerate, so compare
    with an independent heap-based best-first; marginals from peaked to diffuse."""
    rng = np.random.default_rng(7 + seed)
    R, L, k = 12, 15, 8
    conc = [0.05, 0.3, 1.0, 3.0, 10.0, 0.1][seed]
    x = rng.dirichlet(np.ones(40) * conc, size=(R, L))
    lq = -np.sort(-np.log(np.maximum(x, 1e-30)), axis=-1)[..., :k].astype(np.float32)
    if seed == 5:
        lq = np.round(lq, 1)                          # heavy ties
    s, d, c = T.best_first(lq, 255)
    for r in range(R):
        assert as_tuples(s[r], d[r], c[r]) == heap_order(lq[r], 255)


def test_tree_is_prefix_closed_and_parents_first():
    rng = np.random.default_rng(3)
    lq = random_logq(rng, 6, 4, round_to=1)[0]
    t = T.build_tree(lq, 40)
    assert t.size == 40
    assert np.all(t.parent < np.arange(t.size))       # parents first
    for i in range(t.size):
        p = t.parent[i]
        if p >= 0:
            assert t.depth[p] == t.depth[i] - 1
            assert np.isclose(t.score[i], t.score[p] + lq[t.depth[i] - 1, t.choice[i]])
        else:
            assert t.depth[i] == 1
    m = t.ancestor_mask()
    for i in range(t.size):
        assert set(np.flatnonzero(m[i])) == set(t.path(i))


def test_build_tree_skips_unproposed_tokens():
    lq = np.array([[0.0, -np.inf], [np.log(0.5), np.log(0.5)]])
    t = T.build_tree(lq, 10)
    assert t.size == 3                               # one depth-1 node, two children
    assert list(t.depth) == [1, 2, 2] and list(t.choice) == [0, 0, 1]


def test_input_checks():
    with pytest.raises(ValueError, match="sorted descending"):
        T.best_first(np.log([[[0.2, 0.5]]]), 3)
    with pytest.raises(ValueError, match="budget"):
        T.best_first(np.zeros((1, 2, 2)), 0)
    with pytest.raises(ValueError, match="too large"):
        T.best_first(np.zeros((1, 40, 8)), 3)
    with pytest.raises(ValueError, match="shape"):
        T.best_first(np.zeros((2, 2)), 3)
