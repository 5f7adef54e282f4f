"""Fano's inequality: the bound, its exact inverse, the match envelope and the log check."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special

from glance_law import fano
from glance_law.errors import GlanceError, MissingColumnError
from glance_law.simulate import simulate_rounds


def top1_uniform_entropy(e, V):
    """Entropy of (1 - e, e/(V-1), ..., e/(V-1)): the distribution that attains Fano's bound."""
    return special.entr(1 - e) + (V - 1) * special.entr(e / (V - 1))


@pytest.mark.parametrize("V", [2, 3, 10, 1000, 151_936])
def test_inverse_is_exact_on_the_extremal_distribution(V):
    e = np.array([0.0, 1e-9, 1e-4, 0.01, 0.1, 0.3, 0.49, 0.6, 0.9, 1 - 1 / V - 1e-3])
    e = e[e <= 1 - 1 / V]
    H = top1_uniform_entropy(e, V)
    np.testing.assert_allclose(fano.fano_bound(e, V), H, atol=1e-13)
    np.testing.assert_allclose(fano.inverse_fano(H, V), e, atol=1e-10)
    # the maximum entropy ln V at e = 1 - 1/V, NaN beyond it
    assert fano.inverse_fano(np.log(V), V) == pytest.approx(1 - 1 / V, abs=1e-7)
    assert np.isnan(fano.inverse_fano(np.log(V) + 1e-6, V))
    assert fano.inverse_fano(0.0, V) == 0.0


def test_vectorised_and_monotone():
    H = np.linspace(0, np.log(50), 400)
    e = fano.inverse_fano(H, 50)
    assert e.shape == H.shape and np.all(np.diff(e) > 0)
    np.testing.assert_allclose(fano.fano_bound(e, 50), H, atol=1e-12)
    Vs = np.array([5, 50, 500])
    np.testing.assert_allclose(fano.inverse_fano(1.0, Vs), [fano.inverse_fano(1.0, v) for v in Vs])
    np.testing.assert_allclose(fano.match_envelope(H, 50), 1 - e)


def test_every_distribution_respects_the_bound():
    rng = np.random.default_rng(0)
    for V in (3, 8, 40):
        p = rng.dirichlet(np.full(V, 0.3), size=3000)
        H = special.entr(p).sum(axis=1)
        err = 1 - p.max(axis=1)
        assert np.all(err >= fano.inverse_fano(H, V) - 1e-12)
        assert np.all(H <= fano.fano_bound(err, V) + 1e-12)


def test_inverse_by_brute_force_over_the_simplex():
    """V = 3: the smallest error among distributions with entropy >= H, on a fine simplex grid."""
    g = np.linspace(0, 1, 601)
    P1, P2 = np.meshgrid(g, g, indexing="ij")
    P3 = 1 - P1 - P2
    ok = P3 >= -1e-12
    P = np.stack([P1[ok], P2[ok], np.clip(P3[ok], 0, 1)], axis=1)
    H = special.entr(P).sum(axis=1)
    err = 1 - P.max(axis=1)
    for h in (0.1, 0.5, 0.8, 1.0, 1.09):
        brute = err[H >= h].min()
        assert fano.inverse_fano(h, 3) == pytest.approx(brute, abs=2e-3)
        assert fano.inverse_fano(h, 3) <= brute + 1e-12


def test_rejects_impossible_input():
    with pytest.raises(GlanceError, match="must be >= 2"):
        fano.inverse_fano(0.5, 1)
    with pytest.raises(GlanceError, match="must be >= 2"):
        fano.fano_bound(0.2, 1.5)
    with pytest.raises(GlanceError, match=r"\[0, 1\]"):
        fano.fano_bound(1.2, 10)
    with pytest.raises(GlanceError, match="entropy"):
        fano.inverse_fano(-0.5, 10)
    assert fano.inverse_fano(-1e-9, 10) == 0.0      # float noise counts as zero


def test_log_check_passes_on_consistent_logs_and_finds_bugs():
    df = simulate_rounds(n_prompts=8, rounds_per_prompt=20, seed=1)
    # the simulator's root distribution is top-1 plus at most exp(H + 1) uniform tokens
    res = fano.fano_check(df, vocab_size=10 ** 6)
    assert res.ok and res.table["checked"].sum() == len(df)
    # logs from the extremal distribution are tight: float32 logging stays within the tolerance
    V = 1000
    e = np.random.default_rng(2).uniform(0, 1 - 1 / V, size=len(df))
    tight = df.copy()
    tight["root_pmax"] = (1 - e).astype(np.float32)
    tight["root_entropy"] = top1_uniform_entropy(e, V).astype(np.float32)
    assert fano.fano_check(tight, vocab_size=V).ok
    # entropy logged in bits instead of nats: every round with H > 0 violates
    bad = tight.copy()
    bad["root_entropy"] = bad["root_entropy"] / np.log(2)
    res = fano.fano_check(bad, vocab_size=V)
    assert res.table["violations"].sum() == len(res.violations) == len(df)
    assert {"task", "prompt_id", "round", "e_min"} <= set(res.violations.columns)
    # a pmax below 1/V is impossible
    bad = tight.copy()
    bad["root_pmax"] = bad["root_pmax"].astype(float)
    bad.loc[bad.index[0], "root_pmax"] = 1e-9
    res = fano.fano_check(bad, vocab_size=V)
    assert res.table["violations"].sum() == 1
    # null pmax: not checked, counted
    bad.loc[bad.index[1], "root_pmax"] = np.nan
    res = fano.fano_check(bad, vocab_size=V)
    assert res.table["checked"].sum() == len(df) - 1
    assert any("without root_pmax" in n for n in res.notes)


def test_log_check_errors():
    df = simulate_rounds(n_prompts=3, rounds_per_prompt=5, seed=1)
    with pytest.raises(GlanceError, match="vocab_size"):
        fano.fano_check(df)
    with pytest.raises(MissingColumnError):
        fano.fano_check(df.drop(columns=["root_pmax"]), vocab_size=100)
    with pytest.raises(GlanceError):
        fano.fano_check(pd.DataFrame({"root_entropy": [0.1], "root_pmax": [0.9]}), vocab_size=1)
