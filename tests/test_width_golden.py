"""The envelope and the node masses after their speed-up (issue 26) against the code they replaced:
the column-link monotone chain and the digit-by-digit mass product, kept here as references.
Exact equality for the hull (same predicate, same vertices, same slopes), on random inputs with
ties, repeated X, collinear runs, missing points, degenerate rows and every chunking."""
from __future__ import annotations

import numpy as np
import pytest
from test_tree import random_logq
from test_width import random_points, random_pos

from glance_law.replay import allocate as al
from glance_law.replay import width as W
from glance_law.replay.tree import best_first


def link_chain_hull(X, Y):
    """The monotone chain as it was before issue 26 (a stack kept as links between columns)."""
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    n, P = X.shape
    W_ = P + 1
    Xp, Yp = np.zeros((n, W_)), np.zeros((n, W_))
    Xp[:, 1:], Yp[:, 1:] = X, Y
    xf, yf = Xp.reshape(-1), Yp.reshape(-1)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(X) & np.isfinite(Y) & (X > 0)
    link = np.zeros((n, W_), np.int64)
    lf = link.reshape(-1)
    base = np.arange(n) * W_
    tc, bc = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    bx, by = np.zeros(n), np.zeros(n)
    ax, ay = np.full(n, np.nan), np.full(n, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(P):
            x, y, okj = X[:, j], Y[:, j], ok[:, j]
            idx = np.flatnonzero(okj & ((y - ay) / (x - ax) >= (by - ay) / (bx - ax)))
            cx, cy, t, tx, ty = x[idx], y[idx], bc[idx], ax[idx], ay[idx]
            while idx.size:
                f = base[idx]
                u = np.where(t > 0, lf[f + t], -1)
                ux = np.where(u >= 0, xf[f + np.maximum(u, 0)], np.nan)
                uy = yf[f + np.maximum(u, 0)]
                more = (cy - uy) / (cx - ux) >= (ty - uy) / (tx - ux)
                i, done = idx[~more], ~more
                tc[i], bx[i], by[i], bc[i], ax[i], ay[i] = t[done], tx[done], ty[done], u[done], ux[done], uy[done]
                idx, cx, cy, t, tx, ty = (v[more] for v in (idx, cx, cy, u, ux, uy))
            push = okj & (x > bx)
            link[:, j + 1] = tc
            bc, ax, ay = np.where(push, tc, bc), np.where(push, bx, ax), np.where(push, by, ay)
            tc, bx, by = np.where(push, j + 1, tc), np.where(push, x, bx), np.where(push, y, by)
    down, cur = [], tc
    while (cur > 0).any():
        down.append(cur)
        cur = np.where(cur > 0, lf[base + cur], 0)
    depth = sum((c > 0).astype(np.int64) for c in down) if down else np.zeros(n, np.int64)
    D = len(down)
    V = np.zeros((n, D + 1), np.int64)
    if D:
        C = np.stack(down, axis=1)
        k = np.arange(1, D + 1)[None, :]
        V[:, 1:] = np.where(k <= depth[:, None], np.take_along_axis(C, np.clip(depth[:, None] - k, 0, D - 1), 1), 0)
    vx, vy = np.take_along_axis(Xp, V, 1), np.take_along_axis(Yp, V, 1)
    live = np.arange(D)[None, :] < depth[:, None]
    dx = np.diff(vx, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sl = np.diff(vy, axis=1) / np.where(live, dx, 1.0)
    keep = np.cumprod(live & (sl > 0), axis=1).astype(bool)
    J = int(keep.sum(axis=1).max()) if n else 0
    keep = keep[:, :J]
    return (np.where(keep, vx[:, :J], 0).astype(np.int64), np.where(keep, dx[:, :J], 0).astype(np.int64),
            np.where(keep, sl[:, :J], -np.inf))


def product_masses(logq, depth, code, p, r):
    """Node masses as they were computed before issue 26: per-offset log terms summed digit by digit."""
    R, L, k = logq.shape
    T = np.empty((R, L, k))
    with np.errstate(divide="ignore", invalid="ignore"):
        T[:, :, 0] = np.log(p)[:, None]
        if k > 1:
            rest = logq[:, :, 1:]
            mx = np.max(rest, axis=2, keepdims=True)
            fin = np.isfinite(mx)
            lse = np.where(fin, mx + np.log(np.sum(np.exp(rest - np.where(fin, mx, 0.0)), axis=2, keepdims=True)),
                           -np.inf)
            T[:, :, 1:] = (np.log1p(-p) + np.log(r))[:, None, None] + np.where(fin, rest - lse, -np.inf)
    Tf, dep, n = T.reshape(-1), depth.astype(np.int64).reshape(-1), depth.shape[1]
    lm = np.zeros(dep.size)
    idx = np.flatnonzero(dep > 0)
    cod, rr, i = code.reshape(-1)[idx].astype(np.int64), idx // n, 0
    while idx.size:
        j = dep[idx] - 1 - i
        lm[idx] += Tf[(rr * L + j) * k + cod % k]
        cod //= k
        keep = j > 0
        idx, cod, rr = idx[keep], cod[keep], rr[keep]
        i += 1
    with np.errstate(invalid="ignore"):
        return np.where(dep > 0, np.exp(lm), 0.0).reshape(depth.shape)


def degenerate_points(rng, R, P, kind):
    """Rows that stress the chain: one Y for all points, a whole column missing, a row with no
    point, Y steps that make long collinear runs, equal masses cumulated (near-collinear floats)."""
    X = np.broadcast_to(np.arange(1.0, P + 1), (R, P)).copy()
    if kind == "flat":
        Y = np.full((R, P), float(rng.integers(-1, 3)))
    elif kind == "steps":
        Y = np.cumsum(rng.choice([0.0, 1.0, 2.0], (R, 1)) * np.ones((R, P)) + (rng.random((R, P)) < 0.2), axis=1)
    else:                                            # equal masses, cumulated in floating point
        Y = np.cumsum(np.repeat(rng.random((R, 1)) / 7, P, axis=1) * (1 + (rng.random((R, P)) < 0.3)), axis=1)
    if P:
        X[:, rng.integers(0, P)] = np.inf
    if R:
        X[rng.integers(0, R)] = np.inf
    return X, Y


@pytest.mark.parametrize("seed", range(60))
def test_hull_equals_the_link_chain_it_replaced(seed):
    rng = np.random.default_rng(2600 + seed)
    kind = ["int", "x ties", "float", "collinear", "flat", "steps", "equal"][seed % 7]
    R, P = int(rng.integers(0, 40)), int(rng.integers(0, 30))
    X, Y = (random_points(rng, R, P, kind) if kind in ("int", "x ties", "float", "collinear")
            else degenerate_points(rng, R, P, kind))
    want = link_chain_hull(X, Y)
    for chunk in (None, 1, int(rng.integers(1, max(R, 1) + 1))):
        got = al.hull_segments(X, Y, chunk=chunk)
        for f, w in zip(("x0", "length", "slope"), want):
            assert np.array_equal(getattr(got, f), w), (kind, f, chunk)


def test_hull_on_predicted_curves_equals_the_link_chain():
    """The policy's input: cumulated law-indexed masses of 63 best-first nodes, thousands of rows."""
    rng = np.random.default_rng(26)
    lq = random_logq(rng, 6, 4, inf_frac=0.1, R=3000).astype(np.float64)
    _, dep, cod = best_first(lq, 63)
    p, r = rng.uniform(0.2, 0.95, 3000), rng.uniform(0.05, 0.9, 3000)
    cum = np.cumsum(W.node_masses(lq, dep, cod, p, r), axis=1)
    X = np.where(dep > 0, np.arange(1.0, 64.0)[None, :], np.inf)
    got, want = al.hull_segments(X, cum), link_chain_hull(X, cum)
    for f, w in zip(("x0", "length", "slope"), want):
        assert np.array_equal(getattr(got, f), w)


@pytest.mark.parametrize("seed", range(10))
def test_masses_from_path_terms_equal_the_digit_products(seed):
    rng = np.random.default_rng(2700 + seed)
    L, k, R = int(rng.integers(1, 5)), int(rng.integers(1, 5)), 30
    lq = random_logq(rng, L, k, inf_frac=0.15 if seed % 2 else 0.0, R=R).astype(np.float64)
    p, r = rng.uniform(0.05, 0.95, R), rng.uniform(0.05, 0.95, R)
    p[:3], r[3:6] = [0.0, 1.0, 1.0], [0.0, 1.0, 0.5]           # the ends: log(0), log1p(-1)
    _, dep, cod = best_first(lq, int(rng.integers(1, 40)))
    want = product_masses(lq, dep, cod, p, r)
    got = W.node_masses(lq, dep, cod, p, r)
    assert np.array_equal(got == 0, want == 0)
    assert np.allclose(got, want, rtol=1e-12, atol=0)
    n_top, log_rest = W.node_path_terms(lq, dep, cod)
    assert ((n_top >= 0) & (n_top <= dep)).all() and np.array_equal(
        W.masses_from_terms(dep, n_top, log_rest, p, r), got)


def budget_by_budget_allocate(ss, budgets, weights=None):
    """Global best-first allocation as it was before issue 26 (the taken segments counted again per budget)."""
    budgets = np.atleast_1d(np.asarray(budgets, dtype=np.float64))
    R = ss.rounds
    out = np.zeros((budgets.size, R), np.int64)
    r, ln = ss.r, ss.length
    if r.size == 0:
        return out
    cost = np.cumsum(ln if weights is None else ln * np.asarray(weights, dtype=np.float64)[r])
    rows = np.arange(R)
    for i, B in enumerate(budgets):
        if B <= 0:
            continue
        t = int(np.searchsorted(cost, B + 1e-9 * max(1.0, B), side="right"))
        cnt = np.bincount(r[:t], minlength=R)
        n = np.where(cnt > 0, ss.ends[rows, np.maximum(cnt - 1, 0)], 0)
        if t < r.size:
            left = B - (cost[t - 1] if t else 0.0)
            rr = r[t]
            wr = 1.0 if weights is None else float(weights[rr])
            extra = int(np.floor(left / wr + 1e-9))
            if extra > 0:
                n[rr] += min(extra, int(ln[t]))
        out[i] = n
    return out


@pytest.mark.parametrize("seed", range(40))
def test_allocation_equals_the_budget_by_budget_count(seed):
    rng = np.random.default_rng(2800 + seed)
    R, L, n_max = int(rng.integers(1, 40)), int(rng.integers(1, 8)), int(rng.integers(2, 60))
    seg = al.envelope_segments(random_pos(rng, R, L, n_max), n_max)
    ss = al.SortedSegments.build(seg, [0.0, 0.2][seed % 2])
    budgets = rng.choice([0.0, -1.0, 1.0, 3.0, 7.5, 20.0, 100.0, 1e6, 5.0], size=int(rng.integers(1, 9)))
    w = None if seed % 3 == 0 else rng.integers(0, 3, R).astype(float)
    assert np.array_equal(al.allocate(ss, budgets, w), budget_by_budget_allocate(ss, budgets, w))
