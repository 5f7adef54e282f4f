"""The keyed budget policy's faster paths (issue 26) give what the unit-by-unit definitions give:
the threshold fitted on envelope segments (value, units) equals the one fitted on every unit, a
policy counts the units of the segments worth its price exactly as it counts units, and the held-out
scores read from per-prompt sums and zero weights equal the per-round ones."""
from __future__ import annotations

import numpy as np
import pytest

from glance_law.policy import KeyedBudgetPolicy, fit_threshold, prepare
from glance_law.policy import evaluate as pev
from glance_law.policy.cost import CostModel
from glance_law.simulate import TaskSpec, simulate_tree_rounds


@pytest.fixture(scope="module")
def data():
    task = [TaskSpec("t", b0=1.0, b1=0.8, shape=2.0, scale=0.6, floor_weight=0.1)]
    sim = simulate_tree_rounds(task, n_prompts=25, rounds_per_prompt=(10, 20), rescue=(-2.0, -2.0), seed=5)
    return prepare(sim, n_max=63)


@pytest.mark.parametrize("seed", range(30))
def test_threshold_on_blocks_equals_the_threshold_on_units(seed):
    rng = np.random.default_rng(seed)
    R, J = int(rng.integers(1, 8)), int(rng.integers(1, 6))
    vals = -np.sort(-np.round(rng.random((R, J)), 1), axis=1)       # ties across rows and blocks
    cnt = rng.integers(0, 4, (R, J))
    vals[cnt == 0] = -np.inf
    vals = np.where(rng.random((R, J)) < 0.15, -np.inf, vals)
    units = np.full((R, int(cnt.sum(axis=1).max(initial=0))), -np.inf)
    for i in range(R):
        u = np.repeat(vals[i], cnt[i])
        units[i, :u.size] = u
    w = [None, rng.integers(0, 3, R).astype(float), rng.uniform(0.2, 2.0, R)][seed % 3]
    for target in (0.0, 0.7, float(rng.uniform(0, J * 3)), 99.0):
        assert fit_threshold(vals, target, w, counts=cnt) == fit_threshold(units, target, w)


def test_segments_count_as_units(data):
    pol = KeyedBudgetPolicy(key="rescue", b0=1.0, b1=0.8, c0=-2.0, c1=-2.0, max_size=63)
    v = pol.unit_values(data.stats)
    sl, ln = pol.unit_blocks(data.stats)
    assert (ln >= 0).all() and np.array_equal((ln * np.isfinite(sl)).sum(axis=1), np.isfinite(v).sum(axis=1))
    for t in (0.0, 0.01, float(np.nanmedian(np.where(np.isfinite(v), v, np.nan))), float(np.max(v)), np.inf,
              -np.inf, float(v[np.isfinite(v)][7])):
        pt = KeyedBudgetPolicy(key="rescue", b0=1.0, b1=0.8, c0=-2.0, c1=-2.0, max_size=63, threshold=t)
        assert np.array_equal(pt(data.stats), (v >= t).sum(axis=1)), t
    tf = fit_threshold(v, 15.0)
    assert fit_threshold(sl, 15.0, counts=ln) == tf
    withorder = data.stats.with_best_first(63)
    assert np.array_equal(pol.unit_values(withorder), v)
    assert np.array_equal(pol.unit_values(withorder.take(np.arange(0, data.rounds, 3))), v[::3])


def test_weighted_and_prompt_sum_scores_equal_the_per_round_ones(data):
    cost = CostModel()
    rng = np.random.default_rng(1)
    shapes = rng.integers(0, 40, data.rounds)
    keep = np.flatnonzero(data.codes % 4 != 1)
    sub = data.take(keep)
    want = pev.score_policy(sub, shapes[keep], cost, n_boot=0)
    w = np.zeros(data.rounds)
    w[keep] = 1.0
    got = pev.score_policy(data, shapes, cost, n_boot=0, weights=w, grid=pev._fixed_grid(data, cost))
    assert want.keys() == got.keys()
    assert all(np.isclose(got[k], want[k], rtol=1e-12, equal_nan=True) for k in want)
    # the bootstrap from per-prompt sums: each replicate equals the per-round weighted figures
    args = (data.accepted_at(shapes) + 1.0, shapes.astype(float), None, *pev._fixed_grid(data, cost)[:2],
            pev._fixed_grid(data, cost)[0])
    G = int(data.codes.max()) + 1
    size, sums = pev._prompt_sums(data.codes, G, args)
    for c in rng.multinomial(G, np.full(G, 1.0 / G), size=5).astype(float):
        a = pev._summaries(c[data.codes], *args)
        b = pev._summaries(c, *sums, size=size)
        assert all(np.isclose(a[k], b[k], rtol=1e-12) for k in a)
    with pytest.raises(ValueError):
        pev.score_policy(data, shapes, cost, n_boot=5, weights=w)
