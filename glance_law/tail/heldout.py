"""Prompt-disjoint held-out falsification of the tail models (issue 5, Proposition 3).

Both models are fitted on the training prompts of a split, frozen, and scored on the
disjoint test prompts: two half splits (both directions) and ``folds`` prompt folds. Used
by :func:`glance_law.tail.tail_test`; the results are :class:`HeldoutTest` rows of the
``--tail`` section's held-out table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glance_law.stats.cluster import bootstrap_counts, percentile_interval

from . import mle as _mle
from .model import (
    cell_order,
    chi2_sf,
    expected_cells,
    fit_W,
    geometric_cells,
    pooled_chi_square,
)

__all__ = ["HeldoutTest"]


@dataclass(frozen=True)
class HeldoutTest:
    """One prompt-disjoint test: both models fitted on ``train``, frozen, scored on ``test``."""

    name: str
    train_prompts: int
    test_prompts: int
    test_rounds: int
    chi2_geometric: float
    chi2_two_state: float
    cells: int
    ll_geometric: float
    ll_two_state: float
    mean_observed: float
    mean_lo: float
    mean_hi: float
    mean_geometric: float
    mean_two_state: float

    @property
    def p_geometric(self) -> float:
        return chi2_sf(self.chi2_geometric, self.cells - 1)

    @property
    def p_two_state(self) -> float:
        return chi2_sf(self.chi2_two_state, self.cells - 1)

    @property
    def two_state_wins(self) -> bool:
        return bool(self.chi2_two_state < self.chi2_geometric)

    def row(self) -> dict:
        w = lambda x, y: "two-state" if x else ("geometric" if y else "tie")  # noqa: E731
        return {"test": self.name, "train_prompts": self.train_prompts, "test_prompts": self.test_prompts,
                "test_rounds": self.test_rounds, "chi2_geometric": self.chi2_geometric,
                "chi2_two_state": self.chi2_two_state, "cells": self.cells,
                "p_chi2_geometric": self.p_geometric, "p_chi2_two_state": self.p_two_state,
                "ll_geometric": self.ll_geometric, "ll_two_state": self.ll_two_state,
                "winner_chi2": w(self.chi2_two_state < self.chi2_geometric,
                                 self.chi2_geometric < self.chi2_two_state),
                "winner_ll": w(self.ll_two_state > self.ll_geometric, self.ll_geometric > self.ll_two_state),
                "mean_observed": self.mean_observed, "mean_observed_lo": self.mean_lo,
                "mean_observed_hi": self.mean_hi, "mean_geometric": self.mean_geometric,
                "mean_two_state": self.mean_two_state,
                "geometric_inside": bool(self.mean_lo <= self.mean_geometric <= self.mean_hi),
                "two_state_inside": bool(self.mean_lo <= self.mean_two_state <= self.mean_hi)}



def law_cells(l1, l2, s1, Lmax) -> np.ndarray:
    A, B = _mle.law_coefficients(np.asarray(l1), np.asarray(l2), Lmax)
    return np.clip(A + B * np.asarray(s1)[:, None], 0.0, 1.0)


def heldout_splits(a, L, cl, rng, folds: int, level: float, n_boot_mean: int, min_expected: float, n_local: int):
    prompts = np.unique(cl)
    G = prompts.size
    if G < 2:
        return (), ["fewer than 2 prompts in the regime: no held-out tests"]
    perm = prompts[rng.permutation(G)]
    half = perm[: (G + 1) // 2], perm[(G + 1) // 2:]
    splits = [("half 1->2", half[0], half[1]), ("half 2->1", half[1], half[0])]
    notes = []
    if G >= folds and folds >= 2:
        for f, test in enumerate(np.array_split(perm, folds)):
            splits.append((f"fold {f + 1}/{folds}", np.setdiff1d(perm, test), test))
    else:
        notes.append(f"{G} prompts < {folds} folds: only the two half splits")
    Lmax = int(L.max())
    masks = [(np.isin(cl, tr), np.isin(cl, te)) for _, tr, te in splits]
    Wtr = np.stack([_mle.counts(a[m], L[m], Lmax) for m, _ in masks])
    l1, l2, s1, _, p, _ = fit_W(Wtr, n_local)
    two = law_cells(l1, l2, s1, Lmax)
    out = []
    for i, ((name, tr, te), (_, mte)) in enumerate(zip(splits, masks)):
        at, Lt, ct = a[mte], L[mte], cl[mte]
        W = _mle.counts(at, Lt, Lmax)
        nL = np.bincount(Lt - 1, minlength=Lmax)[:Lmax]
        geo = geometric_cells(float(p[i]), Lmax)
        E = np.stack([expected_cells(geo, nL), expected_cells(two[i], nL)])
        order = cell_order(Lmax)
        chi2, n_groups, _ = pooled_chi_square(W[order], E[:, order], min_expected)
        llg, ll2 = _mle.loglik_cells(np.stack([geo, two[i]]), W[None])
        mg = float(np.cumsum(geo[Lmax:])[Lt - 1].mean())
        m2 = float(np.cumsum(two[i][Lmax:])[Lt - 1].mean())
        codes, Gt = np.unique(ct, return_inverse=True)[1], np.unique(ct).size
        sa = np.bincount(codes, at.astype(np.float64), Gt)
        sn = np.bincount(codes, minlength=Gt).astype(np.float64)
        lo = hi = np.nan
        if Gt >= 2 and n_boot_mean > 0:
            draws = np.concatenate([(c @ sa) / (c @ sn) for c in bootstrap_counts(Gt, n_boot_mean, rng)])
            lo, hi = (float(x) for x in percentile_interval(draws, level))
        out.append(HeldoutTest(name, int(tr.size), int(te.size), int(at.size), float(chi2[0]), float(chi2[1]),
                               int(n_groups), float(llg), float(ll2), float(at.mean()), lo, hi, mg, m2))
    return tuple(out), notes
