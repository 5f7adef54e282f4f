"""The law and the tail fitted from a reduction (:class:`glance_law.reduce.Reduced`).

Two levels, so the cost is one pass over the cells plus a fit of a few thousand atoms:

* **Point estimates** come from :func:`glance_law.law.fit_law` on the *marginal* cells
  (the cells summed over prompt buckets: drafter, task, entropy bin, L, a), each entering
  as a two-point quadrature (:func:`two_point`) that matches its entropy mean and
  variance. Every smooth functional of H (the likelihood and the MLE, the law's decile
  and round predictions, the model ceiling) is then exact to second order in the bin
  width, its error O(width^4); the equal-count statistics (decile means, ceiling bins,
  isotonic curve, ranks) split the rounds at atom granularity.
* **Uncertainty** is prompt-clustered with prompt buckets as clusters, computed on the
  full cells: the CR1 sandwich of (b0, b1) from per-bucket score sums at the estimate,
  the clustered CR1 intervals of the mean and of each decile mean, the clustered
  Spearman p-value (ranks from the marginal atoms), or with ``n_boot`` > 0 the bucket
  bootstrap (each replicate reweights whole buckets, rebuilds the marginal atoms and
  refits). A bucket is a union of whole prompts, so the bucket-level estimators target
  the same variances as the prompt-level ones, with G = non-empty buckets (at most B
  per task) in the Student-t(G-1) critical values.
"""
from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pandas as pd

from . import curve as _curve
from .cluster import bootstrap_counts, clustered_mean, cr1_covariance, percentile_interval, spearman_clustered, t_crit
from .errors import GlanceError
from .curve_reduced import ceiling_fraction, curve_and_ceiling
from .law import (CURVE_COLUMNS, LawChecks, fit_affine_logit, fit_conditional_mean, fit_law, match_prob,
                  score_and_information, truncated_mean, truncated_mean_derivative)
from .reduce import Reduced, normalize_condition
from .selection import POOLED

__all__ = ["two_point", "law_frame", "fit_reduced", "tail_reduced"]


def two_point(n, sh, sh2, lo, hi):
    """Two atoms per cell matching n rounds with entropy sum ``sh`` and square sum ``sh2``
    inside the bin [lo, hi]: returns (h1, w1, h2, w2) with w1 + w2 = n, the weighted mean
    and variance equal to the cell's. Equal weights at mean -/+ sd when both fit in the
    bin, else an asymmetric pair with one atom on the nearer edge (possible because a
    distribution on [lo, hi] has variance <= (hi - mean)(mean - lo)); cells with one round
    or no spread get one atom (w2 = 0)."""
    n = np.asarray(n, dtype=np.float64)
    sh = np.asarray(sh, dtype=np.float64)
    m = np.clip(sh / n, lo, hi)
    var = np.maximum((np.asarray(sh2, dtype=np.float64) - sh * m) / n, 0.0)
    sd = np.sqrt(var)
    left, right = m - sd < lo, m + sd > hi
    with np.errstate(divide="ignore", invalid="ignore"):
        d1 = np.where(left, m - lo, sd)
        d2 = np.where(left, var / d1, sd)
        d2 = np.where(right & ~left, hi - m, d2)
        d1 = np.where(right & ~left, var / d2, d1)
        ok = (n >= 2) & (sd > 1e-7 * (hi - lo)) & (d1 > 0) & (d2 > 0) & np.isfinite(d1) & np.isfinite(d2)
        q1 = np.where(ok, d2 / (d1 + d2), 1.0)
    h1 = np.maximum(np.where(ok, m - d1, m), 0.0)
    h2 = np.where(ok, np.minimum(m + d2, hi), m)
    return h1, n * q1, h2, n * (1.0 - q1)


def law_frame(reduced: Reduced, quadrature: bool = True, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Weighted rounds for :func:`glance_law.law.fit_law` (columns task, drafter, bucket, root_entropy,
    accepted, horizon, weight): each cell (of ``cells``, default the reduction's) as its two-point
    quadrature, or with ``quadrature=False`` as one atom at its mean entropy."""
    c = reduced.cells if cells is None else cells
    n = c["n"].to_numpy(dtype=np.float64)
    base = {k: c[k].to_numpy() if k not in ("task", "drafter") else c[k].reset_index(drop=True)
            for k in ("task", "drafter", "bucket", "accepted", "horizon")}
    if not quadrature:
        return pd.DataFrame({**base, "root_entropy": c["sum_h"].to_numpy() / n, "weight": n})
    lo, hi = reduced.grid.edges(c["hbin"].to_numpy())
    h1, w1, h2, w2 = two_point(n, c["sum_h"].to_numpy(), c["sum_h2"].to_numpy(), lo, hi)
    two = np.flatnonzero(w2 > 0)
    first = pd.DataFrame({**base, "root_entropy": h1, "weight": w1})
    second = pd.DataFrame({k: (v.iloc[two].reset_index(drop=True) if isinstance(v, pd.Series) else v[two])
                           for k, v in base.items()})
    second["root_entropy"], second["weight"] = h2[two], w2[two]
    return pd.concat([first, second], ignore_index=True)


# --------------------------------------------------------------------------
# the two levels
# --------------------------------------------------------------------------

def _codes(s: pd.Series) -> tuple[np.ndarray, list[str]]:
    s = s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")
    return s.cat.codes.to_numpy().astype(np.int64), [str(x) for x in s.cat.categories]


def _code_of(s: pd.Series, names: list[str]) -> np.ndarray:
    """Codes of ``s`` in the category list ``names`` (-1 when absent)."""
    codes, own = _codes(s)
    lut = np.array([names.index(x) if x in names else -1 for x in own], dtype=np.int64)
    return lut[codes] if codes.size else codes


def _marginal(c: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Cells summed over buckets (drafter, task, hbin, horizon, accepted) and each cell's marginal row."""
    d, dn = _codes(c["drafter"])
    t, tn = _codes(c["task"])
    h = c["hbin"].to_numpy().astype(np.int64)
    Lv, Li = np.unique(c["horizon"].to_numpy(), return_inverse=True)
    a = c["accepted"].to_numpy().astype(np.int64)
    A = int(a.max()) + 1
    key = (((d * len(tn) + t) * (int(h.max()) + 1) + h) * len(Lv) + Li.ravel()) * A + a
    u, inv = np.unique(key, return_inverse=True)
    inv = inv.ravel()
    first = np.full(u.size, -1, dtype=np.int64)
    first[inv[::-1]] = np.arange(inv.size)[::-1]
    m = pd.DataFrame({"task": pd.Categorical.from_codes(t[first], tn), "drafter": pd.Categorical.from_codes(d[first], dn),
                      "hbin": h[first], "horizon": c["horizon"].to_numpy()[first], "accepted": a[first]})
    for k in ("n", "sum_h", "sum_h2"):
        m[k] = np.bincount(inv, c[k].to_numpy(dtype=np.float64), u.size)
    return m, inv


def _nls_scores(b, H, a, L, w):
    """Per-row score contributions and bread of the conditional-mean least squares."""
    p = match_prob(H, b[0], b[1])
    dm = truncated_mean_derivative(p, L) * p * (1.0 - p)
    J = np.column_stack([dm, -H * dm])
    r = (a - truncated_mean(p, L)) * w
    return J * r[:, None], (J * w[:, None]).T @ J


def _refit(method, H, a, L, w, b):
    if method == "nls":
        return fit_conditional_mean(H, a, L, w, b_init=b)[0]
    return fit_affine_logit(H, a, L, w, b_init=b)[0]


class _Group:
    """One (drafter, group): its cells with their prompt-bucket clusters and marginal cells,
    and the parts (a cell's rounds on one atom of its marginal cell) with the atoms' ranks
    as fit_law computed them (for the clustered Spearman test)."""

    def __init__(self, cmask, amask, arrays, cl, inv, parts):
        idx = np.flatnonzero(cmask)
        present = np.zeros(int(cl.max()) + 1, dtype=bool)
        present[cl[idx]] = True
        lut = np.cumsum(present) - 1
        self.G, self.cell_idx, self.cl = int(present.sum()), idx, lut[cl[idx]]
        n, sh, sh2, a, L = arrays["cells"]
        self.n, self.a, self.L, self.sh, self.sh2 = n[idx], a[idx], L[idx], sh[idx], sh2[idx]
        self.H = self.sh / self.n
        self.marg, self.m = np.unique(inv[idx], return_inverse=True)   # marginal rows, each cell's position
        self.m = self.m.ravel()
        aidx = np.flatnonzero(amask)
        Ha, wa, aa = (x[aidx] for x in arrays["atoms"])
        order = np.argsort(Ha, kind="stable")
        rx, ry = _curve.midranks(Ha, order, wa), _curve.integer_midranks(aa, wa)
        p_atom, p_cell, p_w = parts
        keep = cmask[p_cell]
        apos = np.cumsum(amask) - 1
        cpos = np.cumsum(cmask) - 1
        pc, pa = cpos[p_cell[keep]], apos[p_atom[keep]]
        self.s_w, self.s_cl, self.s_a = p_w[keep], self.cl[pc], self.a[pc]
        self.s_rx, self.s_ry = rx[pa], ry[pa]

    def decile_parts(self, parts, n_marg):
        """The cells' pieces on the curve's bins, from the marginal cells' pieces ``(cell, bin, weight)``:
        each cell of a marginal cell gets its pieces in proportion. Returns (cell, bin, weight)."""
        pm, pk, pw = parts
        order = np.argsort(pm, kind="stable")
        pm, pk, frac = pm[order], pk[order], (pw / n_marg[pm])[order]
        cnt = np.bincount(pm, minlength=self.marg.size)
        first = np.cumsum(cnt) - cnt
        k = cnt[self.m]
        cell = np.repeat(np.arange(self.m.size), k)
        within = np.arange(cell.size) - np.repeat(np.cumsum(k) - k, k)
        piece = first[self.m][cell] + within
        return cell, pk[piece], self.n[cell] * frac[piece]


def _parts(c, inv, atoms, n_marg):
    """Each cell as parts on its marginal cell's atoms: (atom row, cell row, weight)."""
    w1 = atoms["weight"].to_numpy()[:n_marg]
    second = np.full(n_marg, -1, dtype=np.int64)
    two = np.arange(n_marg, len(atoms))
    second[atoms["_m"].to_numpy()[n_marg:]] = two
    tot = np.bincount(atoms["_m"].to_numpy(), atoms["weight"].to_numpy(), n_marg)
    q1 = w1 / tot
    n = c["n"].to_numpy(dtype=np.float64)
    cells = np.arange(len(c))
    has2 = second[inv] >= 0
    part_atom = np.r_[inv, second[inv][has2]]
    part_cell = np.r_[cells, cells[has2]]
    part_w = np.r_[n * q1[inv], (n * (1.0 - q1[inv]))[has2]]
    return part_atom, part_cell, part_w


def _bootstrap(grp, b, method, lo, hi, deciles, B, n_boot, level, rng):
    """Bucket bootstrap: percentile intervals of b, the decile means and the mean. Each replicate
    reweights whole buckets, rebuilds the marginal atoms from the reweighted sums and refits."""
    draws = np.full((n_boot, 2), np.nan)
    cdraws = np.full((n_boot, B), np.nan) if deciles is not None else None
    mdraws = np.full(n_boot, np.nan)
    K = grp.marg.size
    cnt = np.maximum(np.bincount(grp.m, minlength=K), 1)
    a_m, L_m = np.bincount(grp.m, grp.a, K) / cnt, np.bincount(grp.m, grp.L, K) / cnt
    k = 0
    for counts in bootstrap_counts(grp.G, n_boot, rng):
        for c in counts:
            f = c[grp.cl].astype(np.float64)
            n_m = np.bincount(grp.m, grp.n * f, K)
            live = n_m > 0
            h1, w1, h2, w2 = two_point(n_m[live], np.bincount(grp.m, grp.sh * f, K)[live],
                                       np.bincount(grp.m, grp.sh2 * f, K)[live], lo[live], hi[live])
            try:
                draws[k] = _refit(method, np.r_[h1, h2], np.r_[a_m[live], a_m[live]], np.r_[L_m[live], L_m[live]],
                                  np.r_[w1, w2], b)
            except (ValueError, np.linalg.LinAlgError):
                pass
            if cdraws is not None:
                cell, bin_, w = deciles
                pw = w * f[cell]
                with np.errstate(invalid="ignore", divide="ignore"):
                    cdraws[k] = np.bincount(bin_, pw * grp.a[cell], B) / np.bincount(bin_, pw, B)
            wc = grp.n * f
            mdraws[k] = (wc @ grp.a) / wc.sum()
            k += 1
    failed = int(np.isnan(draws[:, 0]).sum())
    out = {"failed": failed, "mean": percentile_interval(mdraws, level)}
    if failed <= n_boot // 2:
        out["b"] = percentile_interval(draws, level)
    if cdraws is not None:
        out["curve"] = percentile_interval(cdraws, level)
    return out


def fit_reduced(reduced: Reduced, by: str | None = "task", method: str = "mle", level: float = 0.95,
                n_boot: int = 0, seed: int = 0, *, condition=None, bins: int = 10, ceiling_bins: int = 50,
                alpha: float = 0.05, min_r2_curve: float = 0.5, min_r2_isotonic: float = 0.9,
                quadrature: bool = True):
    """The law (a :class:`glance_law.law.LawFit`) from a reduction, with the columns of
    :func:`glance_law.law.fit_law` plus ``buckets`` (the clusters). ``prompts`` is the
    number of distinct prompts the reduction saw. Intervals: CR1 over prompt buckets with
    t(G-1) (``n_boot`` = 0) or the bucket bootstrap; see the module docstring.
    ``condition`` only checks that the reduction was made for it. ``quadrature=False``
    puts each marginal cell at its mean entropy instead (binning error O(width^2); for
    comparison)."""
    if condition is not None:
        want = normalize_condition(condition)
        if reduced.condition is not None and want != reduced.condition:
            raise GlanceError(f"these reductions hold condition {', '.join(reduced.condition)}, not "
                              f"{', '.join(want)}; reduce the logs again with --condition {','.join(want)}")
    if by not in (None, "task"):
        raise GlanceError(f"a reduction keeps task and drafter only, so it cannot group by {by!r}; use --by task "
                          "or --by none (or fit the round logs without --engine)")
    if int(n_boot) < 0:
        raise GlanceError(f"n_boot must be >= 0 (got {n_boot})")
    c = reduced.cells
    if reduced.rounds == 0:
        raise GlanceError("the reduction holds no rounds: nothing to fit")
    marg, inv = _marginal(c)
    lo, hi = reduced.grid.edges(marg["hbin"].to_numpy())
    h1, w1, h2, w2 = two_point(marg["n"], marg["sum_h"], marg["sum_h2"], lo, hi)
    if not quadrature:
        h1, w1, w2 = marg["sum_h"].to_numpy() / marg["n"].to_numpy(), marg["n"].to_numpy(dtype=np.float64), 0 * w2
    K = len(marg)
    two = np.flatnonzero(w2 > 0)
    mt, md = marg["task"].cat, marg["drafter"].cat
    atoms = pd.DataFrame({"task": pd.Categorical.from_codes(np.r_[mt.codes, mt.codes.to_numpy()[two]], mt.categories),
                          "drafter": pd.Categorical.from_codes(np.r_[md.codes, md.codes.to_numpy()[two]],
                                                               md.categories),
                          "root_entropy": np.r_[h1, h2[two]], "accepted": np.r_[marg["accepted"], marg["accepted"][two]],
                          "horizon": np.r_[marg["horizon"], marg["horizon"][two]], "weight": np.r_[w1, w2[two]],
                          "_m": np.r_[np.arange(K), two]})
    atoms["_atom"] = np.arange(len(atoms))
    base = fit_law(atoms, by=by, method=method, level=level, n_boot=0, seed=seed, condition=None, weight="weight",
                   cluster=("_atom",), bins=bins, ceiling_bins=ceiling_bins, alpha=alpha, min_r2_curve=min_r2_curve,
                   min_r2_isotonic=min_r2_isotonic)
    parts = _parts(c, inv, atoms, K)
    tcodes, _ = _codes(c["task"])
    cl = tcodes * (int(c["bucket"].max()) + 1) + c["bucket"].to_numpy().astype(np.int64)
    table = base.table.copy()
    table["buckets"] = 0
    curves, checks, notes = dict(base.curves), dict(base.checks), []
    cd, dnames = _codes(c["drafter"])
    atn = [str(x) for x in atoms["task"].cat.categories]
    ct = _code_of(c["task"], atn)
    at, ad = atoms["task"].cat.codes.to_numpy(), _code_of(atoms["drafter"], dnames)
    arrays = {"cells": (c["n"].to_numpy(dtype=np.float64), c["sum_h"].to_numpy(dtype=np.float64),
                        c["sum_h2"].to_numpy(dtype=np.float64), c["accepted"].to_numpy().astype(np.float64),
                        c["horizon"].to_numpy().astype(np.float64)),
              "atoms": tuple(atoms[k].to_numpy(dtype=np.float64) for k in ("root_entropy", "weight", "accepted"))}
    m_hbin, m_n, m_sh = marg["hbin"].to_numpy(), marg["n"].to_numpy(dtype=np.float64), marg["sum_h"].to_numpy()
    m_a, m_L = marg["accepted"].to_numpy().astype(np.float64), marg["horizon"].to_numpy().astype(np.float64)
    for i, r in table.iterrows():
        d, g = str(r["drafter"]), str(r["task"])
        cm, am = cd == dnames.index(d), ad == dnames.index(d)
        if g != POOLED:
            cm, am = cm & (ct == atn.index(g)), am & (at == atn.index(g))
        grp = _Group(cm, am, arrays, cl, inv, parts)
        mi = grp.marg
        where = g if table["drafter"].nunique() == 1 else f"{d}/{g}"
        row = {"buckets": grp.G, "interval": "bootstrap" if n_boot > 0 else "cr1"}
        k = reduced.prompts(d, None if g == POOLED else g)
        row["prompts"] = grp.G if k is None else k
        b = np.array([r["b0"], r["b1"]], dtype=np.float64)
        have_b = bool(np.all(np.isfinite(b)))
        # the curve and the ceiling from the marginal cells (exact equal-count bins, see curve_reduced)
        cv, crow, mparts = curve_and_ceiling(m_hbin[mi], lo[mi], hi[mi], m_n[mi], m_sh[mi], m_a[mi], m_L[mi], b,
                                             bins, ceiling_bins)
        row.update(crow)
        row["ceiling_fraction"] = ceiling_fraction(r["r2_round"], row["ceiling"])
        cur = curves[(d, g)].copy()
        deciles = None
        if cv is not None:
            cur = pd.DataFrame({col: cv.get(col, np.full(bins, np.nan)) for col in CURVE_COLUMNS})
            deciles = grp.decile_parts(mparts, m_n[mi])
            bm = _curve.binned_means(grp.a[deciles[0]], deciles[1], bins, grp.cl[deciles[0]], grp.G, deciles[2],
                                     level)
            half = bm["hi"] - bm["mean"]
            cur["lo"], cur["hi"] = cur["mean_accepted"] - half, cur["mean_accepted"] + half
        tc = t_crit(grp.G, level) if grp.G >= 2 else np.nan
        _, se_a, _ = clustered_mean(grp.a, grp.cl, grp.G, grp.n)
        row["mean_accepted_lo"], row["mean_accepted_hi"] = r["mean_accepted"] - tc * se_a, r["mean_accepted"] + tc * se_a
        rho, rho_p, _ = spearman_clustered(grp.s_rx, grp.s_a, grp.s_cl, grp.G, ranks=(grp.s_rx, grp.s_ry),
                                           weights=grp.s_w)
        row["rho_p"] = rho_p
        lo_b = hi_b = np.array([np.nan, np.nan])
        if have_b and n_boot > 0:
            rng = np.random.default_rng([int(seed), zlib.crc32(f"{d}\0{g}".encode())])
            res = _bootstrap(grp, b, method, lo[mi], hi[mi], deciles, bins, int(n_boot), level, rng)
            if res["failed"]:
                notes.append(f"{where}: {res['failed']} of {n_boot} bootstrap replicates could not be refitted "
                             "(left out of the percentile interval)")
            if "b" in res:
                lo_b, hi_b = res["b"]
            if "curve" in res:
                cur["lo"], cur["hi"] = res["curve"]
            row["mean_accepted_lo"], row["mean_accepted_hi"] = (float(x) for x in res["mean"])
        elif have_b and grp.G >= 2:
            if method == "nls":
                scores, bread = _nls_scores(b, grp.H, grp.a, grp.L, grp.n)
            else:
                scores, bread = score_and_information(b, grp.H, grp.a, grp.L, grp.n)
            cov = cr1_covariance(scores, np.linalg.inv(bread), grp.cl, grp.G)
            half = tc * np.sqrt(np.maximum(np.diag(cov), 0.0))
            lo_b, hi_b = b - half, b + half
        elif have_b:
            notes.append(f"{where}: a single prompt bucket; no clustered interval")
        row["b0_lo"], row["b1_lo"], row["b0_hi"], row["b1_hi"] = lo_b[0], lo_b[1], hi_b[0], hi_b[1]
        if len(cur):
            row["floor_mean_lo"], row["floor_mean_hi"] = cur["lo"].iloc[0], cur["hi"].iloc[0]
        chk = LawChecks(group=g, drafter=checks[(d, g)].drafter, b1=r["b1"], b1_lo=row["b1_lo"], b1_hi=row["b1_hi"],
                        rho=r["rho"], rho_p=rho_p, r2_curve=row.get("r2_curve", r["r2_curve"]),
                        r2_isotonic=row.get("r2_isotonic", r["r2_isotonic"]), alpha=alpha, min_r2_curve=min_r2_curve,
                        min_r2_isotonic=min_r2_isotonic)
        flags = chk.as_dict()
        row.update(holds=chk.passed, holds_slope=flags["slope"], holds_rank=flags["rank"], holds_curve=flags["curve"],
                   holds_monotone=flags["monotone"], failed_checks=",".join(chk.failed()))
        for key, v in row.items():
            table.at[i, key] = v
        curves[(d, g)], checks[(d, g)] = cur, chk
    for col in ("prompts", "buckets", "floor_rounds", "ceiling_bins"):
        table[col] = table[col].astype(np.int64)
    lvl = f"{100 * level:g}%"
    how = (f"{lvl} CR1 cluster-robust sandwich over prompt buckets (cluster = task, bucket) with Student-t(G-1), "
           "G = non-empty buckets (column buckets)" if n_boot <= 0 else
           f"{lvl} percentile, cluster bootstrap over prompt buckets (task, bucket), {n_boot} replicates (seed {seed})")
    out = [f"intervals: {how}; a bucket holds whole prompts, so this is prompt-clustered inference; rho_p: "
           "clustered over buckets"]
    out += [s for s in base.note_lines if not s.startswith("intervals:")]
    out.append("fitted from reduced sufficient statistics: each entropy bin's rounds (summed over buckets) enter the "
               "likelihood as two atoms matching their entropy mean and variance (b0, b1 exact to O(width^4)); "
               "equal-count bins cut inside a fine bin by each cell's modelled entropy density (docs/scale.md)")
    no_sq = int(np.isnan(c["sum_h2"].to_numpy(dtype=np.float64)).sum())
    if no_sq:
        out.append(f"{no_sq} cell(s) without sum_h2 (from a reduction that did not record it) enter at their mean "
                   "entropy: binning error O(width^2) there")
    out += notes + list(reduced.notes)
    return replace(base, table=table, curves=curves, checks=checks, n_boot=int(n_boot),
                   interval="bootstrap" if n_boot > 0 else "cr1", note_lines=tuple(out))


# --------------------------------------------------------------------------
# the tail
# --------------------------------------------------------------------------

def _floor_cells(sub: pd.DataFrame, quantile: float, threshold: float | None) -> np.ndarray:
    """Mask of the floor regime's cells (by cell-mean entropy)."""
    n = sub["n"].to_numpy(dtype=np.float64)
    m = sub["sum_h"].to_numpy() / n
    if threshold is not None:
        return m <= threshold
    order = np.argsort(m, kind="stable")
    inv = 1.0 / quantile
    if abs(inv - round(inv)) < 1e-9:
        return _curve.equal_count_bins(order, int(round(inv)), n) == 0
    mid = np.empty(n.size)
    mid[order] = (np.cumsum(n[order]) - 0.5 * n[order]) / n.sum()
    return mid < quantile


def tail_reduced(reduced: Reduced, law=None, *, quantile: float = 0.1, threshold: float | None = None,
                 n_boot: int = 199, seed: int = 0, folds: int = 5, level: float = 0.95, n_boot_mean: int = 2000,
                 min_expected: float = 5.0, heldout: bool = True):
    """The grounded tail (a :class:`glance_law.tail.TailFit`) from a reduction.

    The tail depends on the floor regime's rounds only through their accepted lengths,
    horizons and prompts, so each (drafter, task)'s floor cells are expanded to rounds
    (accepted, horizon, bucket) and handed to :func:`glance_law.tail.tail_test`: the
    held-out splits are bucket-disjoint, hence prompt-disjoint, and ``floor_prompts``
    counts buckets. The floor is each task's bottom ``quantile`` of rounds ordered by cell
    mean entropy (resolved to one fine bin), or the cells with mean entropy <= ``threshold``.
    """
    from .tail import TailFit, tail_test
    if threshold is None and not 0.0 < float(quantile) <= 1.0:
        raise GlanceError(f"quantile must lie in (0, 1] (got {quantile})")
    if law is None:
        law = fit_reduced(reduced)
    c = reduced.cells
    multi = c["drafter"].nunique() > 1
    tasks, notes = [], []
    for (d, t), sub in c.groupby(["drafter", "task"], observed=True, sort=True):
        fl = _floor_cells(sub, float(quantile), threshold)
        if not fl.any():
            notes.append(f"{d}/{t}: empty floor regime, not analysed")
            continue
        f = sub[fl]
        n = f["n"].to_numpy()
        try:
            b0 = law.params(str(t), str(d))[0]
        except GlanceError:
            b0 = float("nan")
        rng = np.random.default_rng([int(seed), zlib.crc32(f"{d}/{t}".encode())])
        thr = float(threshold) if threshold is not None else float((f["sum_h"] / f["n"]).max())
        tt, tn = tail_test(np.repeat(f["accepted"].to_numpy(), n), np.repeat(f["horizon"].to_numpy(), n),
                           np.repeat(f["bucket"].to_numpy(), n), b0=b0, task=str(t), n_boot=n_boot, seed=rng,
                           folds=folds, level=level, n_boot_mean=n_boot_mean, min_expected=min_expected,
                           threshold=thr, drafter=str(d) if multi else "", heldout=heldout)
        tasks.append(tt)
        notes += tn
    if not tasks:
        raise GlanceError("the floor regime is empty for every task; raise the threshold")
    rule = f"cell-mean H <= {threshold} nats" if threshold is not None else f"bottom {quantile:g} by cell-mean H"
    notes += [f"from a reduction: floor regime per task = {rule} (resolved to one fine entropy bin); "
              "floor_prompts, the held-out splits and the floor_mean interval use prompt buckets as clusters",
              f"cap = e^b0 from the reduced law fit; lrt_p_bootstrap: parametric bootstrap under the fitted "
              f"geometric ({n_boot} replicates, seed {seed}); lrt_p_nominal: chi-square(4), conservative"]
    return TailFit(tasks=tuple(tasks), level=float(level), note_lines=tuple(notes))
