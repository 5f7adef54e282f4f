"""Issue 36.13: the tail's first stage and S1 profile made cheaper without changing a number.

``_best_s1`` reads the grid scores in the matrix product's own layout (the argmax along the strided
S1 axis was most of the first stage); ``_score`` divides only at the cells with counts. Both are
compared here with the formulas they replaced, value for value."""
from __future__ import annotations

import numpy as np

from glance_law.tail import mle


def test_best_s1_equals_the_argmax_along_s1():
    rng = np.random.default_rng(3)
    logp = rng.normal(size=(40 * 7, 12)).astype(np.float32)
    logp[::5] = logp[1::5]                                   # ties: the first maximum wins either way
    W = rng.integers(0, 9, size=(5, 12)).astype(np.float32)
    ll = (logp @ W.T).T.reshape(5, 40, 7)
    j, prof = mle._best_s1(ll)
    j0 = np.argmax(ll, axis=2)
    assert np.array_equal(j, j0)
    assert np.array_equal(prof, np.take_along_axis(ll, j0[:, :, None], axis=2)[:, :, 0].astype(np.float64))
    c = np.ascontiguousarray(ll)                             # any other layout: the plain path
    assert np.array_equal(mle._best_s1(c)[0], j0)


def test_score_equals_the_masked_quotients():
    rng = np.random.default_rng(4)
    A = rng.uniform(-0.2, 1.0, size=(30, 10))
    B = rng.normal(size=(30, 10))
    W = rng.integers(0, 4, size=(30, 10)).astype(float)
    x = rng.uniform(0, 1, 30)
    A[0, 0], B[0, 0], x[0] = 0.0, 0.0, 0.5                   # a zero probability at a cell without counts
    W[0, 0] = 0.0
    den = A + B * x[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(W > 0, W * B / den, 0.0)
        hess = -np.where(W > 0, r * B / den, 0.0).sum(-1)
    g, h = mle._score(A, B, W, x)
    assert np.array_equal(g, r.sum(-1), equal_nan=True) and np.array_equal(h, hess, equal_nan=True)


#: fit_counts of the rows below computed with the replaced code (HEAD 2bcf1af): lambda1, lambda2, S1, ll
BEFORE = (
    [0.9999999999999459, 0.6273153362510466, 0.6526521694790255, 0.7836703858902198, 0.6962334292317862,
     0.6623097221636117],
    [0.7645373915985086, 0.6273153362510466, 0.6526521694790255, 0.6003339647647739, 0.6962334292317862,
     0.6623097221636117],
    [0.8372704387566036, 0.9393390799820089, 0.9338870717695719, 0.9790047186028957, 0.9723360687226738,
     0.8920751399426718],
    [-371.1887939873746, -492.6092315488323, -423.14490031821276, -248.2635173798119, -482.05888587944185,
     -467.2049320414502])


def test_fit_counts_is_unchanged_on_count_rows():
    """The same starts, the same optima as the replaced code (to the optimiser's convergence across
    machines; bit for bit on the machine that computed them)."""
    rng = np.random.default_rng(0)
    W = rng.integers(0, 50, (6, 12)).astype(float)
    for got, want in zip(mle.fit_counts(W), BEFORE):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
