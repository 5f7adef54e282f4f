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
  full cells: the CR3 cluster jackknife (default, as :func:`glance_law.law.fit_law`) or the
  CR1 sandwich of (b0, b1) from per-bucket score and information sums at the estimate,
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

from glance_law.data.arms import parse_label, target_values
from glance_law.data.selection import POOLED, grouping
from glance_law.errors import GlanceError
from glance_law.law.fit import fit_law
from glance_law.law.model import (
    cluster_score_information,
    refit,
)
from glance_law.law.result import CURVE_COLUMNS, LawChecks
from glance_law.stats import curve as _curve
from glance_law.stats.cluster import (
    bootstrap_counts,
    clustered_covariance,
    clustered_mean,
    percentile_interval,
    t_crit,
)

from .curve_reduced import ceiling_fraction, curve_and_ceiling
from .reduce import Reduced, normalize_condition

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


def _with_targets(cols: dict) -> dict:
    """Cells keyed by ``drafter @ target`` (several targets): the ``target`` column their labels
    were made from, so :func:`glance_law.data.arms.label_targets` takes them as labelled."""
    d = cols["drafter"]
    cats = d.cat.categories if isinstance(d.dtype, pd.CategoricalDtype) else pd.unique(d.astype(str))
    if any(parse_label(x)[1] is not None for x in cats):
        cols["target"] = target_values(d).to_numpy()
    return cols


def law_frame(reduced: Reduced, quadrature: bool = True, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Weighted rounds for :func:`glance_law.law.fit_law` (columns task, drafter, bucket, root_entropy,
    accepted, horizon, weight): each cell (of ``cells``, default the reduction's) as its two-point
    quadrature, or with ``quadrature=False`` as one atom at its mean entropy."""
    c = reduced.cells if cells is None else cells
    n = c["n"].to_numpy(dtype=np.float64)
    base = {k: c[k].to_numpy() if k not in ("task", "drafter") else c[k].reset_index(drop=True)
            for k in ("task", "drafter", "bucket", "accepted", "horizon")}
    base = _with_targets(base)
    if not quadrature:
        mean = np.where(c["hbin"].to_numpy() < 0, np.nan, c["sum_h"].to_numpy() / n)
        return pd.DataFrame({**base, "root_entropy": mean, "weight": n})
    hb = c["hbin"].to_numpy()
    lo, hi = reduced.grid.edges(np.maximum(hb, 0))
    h1, w1, h2, w2 = two_point(n, c["sum_h"].to_numpy(), c["sum_h2"].to_numpy(), lo, hi)
    if (hb < 0).any():   # hbin -1: rounds without a measured entropy (null root_entropy)
        h1, w1, w2 = np.where(hb < 0, np.nan, h1), np.where(hb < 0, n, w1), np.where(hb < 0, 0.0, w2)
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
    m = pd.DataFrame({"task": pd.Categorical.from_codes(t[first], tn),
                      "drafter": pd.Categorical.from_codes(d[first], dn),
                      "hbin": h[first], "horizon": c["horizon"].to_numpy()[first], "accepted": a[first]})
    for k in ("n", "sum_h", "sum_h2"):
        m[k] = np.bincount(inv, c[k].to_numpy(dtype=np.float64), u.size)
    return m, inv


class _Acc:
    """Cluster-level sums of one group, accumulated over its cells one (drafter, task) slice at a
    time (clusters are (task, bucket), so no cluster spans two slices): everything the clustered
    intervals, the clustered Spearman test and the bucket bootstrap need."""

    def __init__(self, G_all: int, B: int, boot: bool):
        self.W, self.Sa = np.zeros(G_all), np.zeros(G_all)
        self.u, self.info_g = np.zeros((G_all, 2)), np.zeros((G_all, 2, 2))
        self.sw, self.swy = np.zeros((B, G_all)), np.zeros((B, G_all))
        self.xy, self.xx = np.zeros(G_all), np.zeros(G_all)
        self.boot = [] if boot else None

    def add(self, g, n, a, H, L, sh, sh2, m, b, method, pieces, zx, zy, B):
        """Cells of one slice: cluster ``g``, rounds ``n``, marginal row ``m`` (local to the group),
        the group's estimate ``b``, the marginal cells' decile pieces and standardised ranks."""
        G_all = self.W.size
        self.W += np.bincount(g, n, G_all)
        self.Sa += np.bincount(g, n * a, G_all)
        if np.all(np.isfinite(b)):
            u, info_g = cluster_score_information(b, H, a, L, g, G_all, n, method=method)
            self.u += u
            self.info_g += info_g
        if pieces is not None:
            first, cnt, pk, pf = pieces
            k = cnt[m]
            cell = np.repeat(np.arange(m.size), k)
            piece = first[m][cell] + (np.arange(cell.size) - np.repeat(np.cumsum(k) - k, k))
            key = pk[piece] * G_all + g[cell]
            w = n[cell] * pf[piece]
            self.sw += np.bincount(key, w, B * G_all).reshape(B, G_all)
            self.swy += np.bincount(key, w * a[cell], B * G_all).reshape(B, G_all)
        self.xy += np.bincount(g, n * zx[m] * zy[m], G_all)
        self.xx += np.bincount(g, n * zx[m] * zx[m], G_all)
        if self.boot is not None:
            self.boot.append((m, g, n, sh, sh2))


def _ranks(H_atoms, w_atoms, atom_m, n_m, a_m):
    """Standardised weighted mid-ranks of entropy and accepted length per marginal cell (the entropy
    rank of a cell is the weighted mean of its atoms' ranks), as spearman_clustered standardises them."""
    order = np.argsort(H_atoms, kind="stable")
    rx_atom = _curve.midranks(H_atoms, order, w_atoms)
    K = n_m.size
    rx = np.bincount(atom_m, w_atoms * rx_atom, K) / n_m
    ry = _curve.integer_midranks(a_m, n_m)
    W = n_m.sum()
    zx, zy = rx - (n_m @ rx) / W, ry - (n_m @ ry) / W
    sx, sy = np.sqrt((n_m @ (zx * zx)) / W), np.sqrt((n_m @ (zy * zy)) / W)
    if sx == 0 or sy == 0:
        return None
    return zx / sx, zy / sy


def _spearman_p(acc, present) -> float:
    """The prompt-aware p-value of spearman_clustered from cluster sums of n zx zy and n zx^2."""
    from scipy import special as _sp
    xy, xx = acc.xy[present], acc.xx[present]
    g = int(present.sum())
    if g < 2 or xx.sum() <= 0:
        return float("nan")
    rho = xy.sum() / acc.W[present].sum()
    se = float(np.sqrt(g / (g - 1.0) * ((xy - rho * xx) ** 2).sum()) / xx.sum())
    if se == 0:
        return 0.0 if rho != 0 else 1.0
    return float(2 * _sp.stdtr(g - 1, -abs(rho / se)))


def _bootstrap(acc, present, b, method, lo, hi, a_m, L_m, B, n_boot, level, rng, deciles: bool):
    """Bucket bootstrap: percentile intervals of b, the decile means and the mean. Each replicate
    reweights whole buckets, rebuilds the marginal atoms from the reweighted sums and refits."""
    ids = np.flatnonzero(present)
    G = ids.size
    m, g, n, sh, sh2 = (np.concatenate(x) for x in zip(*acc.boot))
    K = a_m.size
    draws = np.full((n_boot, 2), np.nan)
    cdraws = np.full((n_boot, B), np.nan) if deciles else None
    mdraws = np.full(n_boot, np.nan)
    f_all = np.zeros(acc.W.size)
    k = 0
    for counts in bootstrap_counts(G, n_boot, rng):
        for cnt in counts:
            f_all[ids] = cnt
            f = f_all[g]
            n_m = np.bincount(m, n * f, K)
            live = n_m > 0
            h1, w1, h2, w2 = two_point(n_m[live], np.bincount(m, sh * f, K)[live], np.bincount(m, sh2 * f, K)[live],
                                       lo[live], hi[live])
            try:
                draws[k] = refit(method, np.r_[h1, h2], np.r_[a_m[live], a_m[live]], np.r_[L_m[live], L_m[live]],
                                  np.r_[w1, w2], b)
            except (ValueError, np.linalg.LinAlgError):
                pass
            if cdraws is not None:
                with np.errstate(invalid="ignore", divide="ignore"):
                    cdraws[k] = (acc.swy @ f_all) / (acc.sw @ f_all)
            mdraws[k] = (acc.Sa @ f_all) / (acc.W @ f_all)
            k += 1
    failed = int(np.isnan(draws[:, 0]).sum())
    out = {"failed": failed, "mean": percentile_interval(mdraws, level)}
    if failed <= n_boot // 2:
        out["b"] = percentile_interval(draws, level)
    if cdraws is not None:
        out["curve"] = percentile_interval(cdraws, level)
    return out


def _pieces(mparts, n_m, K):
    """The marginal cells' decile pieces as (first piece, count, bin, fraction) indexed by marginal row."""
    pm, pk, pw = mparts
    order = np.argsort(pm, kind="stable")
    pm, pk, pf = pm[order], pk[order], (pw / n_m[pm])[order]
    cnt = np.bincount(pm, minlength=K)
    return np.cumsum(cnt) - cnt, cnt, pk, pf


def fit_reduced(reduced: Reduced, *, by: str | None = "task", method: str = "mle", level: float = 0.95,
                n_boot: int = 0, seed: int = 0, condition=None, bins: int = 10, ceiling_bins: int = 50,
                alpha: float = 0.05, min_r2_curve: float = 0.5, min_r2_isotonic: float = 0.9,
                quadrature: bool = True, cov: str = "cr3"):
    """The law (a :class:`glance_law.law.LawFit`) from a reduction, with the columns of
    :func:`glance_law.law.fit_law` plus ``buckets`` (the clusters). ``prompts`` is the
    number of distinct prompts the reduction saw. Intervals: ``cov`` = "cr3" (cluster jackknife,
    the default as in fit_law) or "cr1" over prompt buckets with t(G-1), or with ``n_boot`` > 0
    the bucket bootstrap; see the module docstring.
    ``condition`` only checks that the reduction was made for it. ``quadrature=False``
    puts each marginal cell at its mean entropy instead (binning error O(width^2); for
    comparison).

    Parameters
    ----------
    reduced : Reduced
        A reduction (:func:`glance_law.reduce_logs`, :func:`glance_law.reduce_frame`).
    by, method, level, n_boot, seed, bins, ceiling_bins, alpha, min_r2_curve, min_r2_isotonic, cov
        As in :func:`glance_law.fit_law` (clusters are prompt buckets).
    condition : str or sequence, optional
        Only checks that the reduction was made for it.
    quadrature : bool, default True
        Two-point quadrature per cell (False: each cell at its mean entropy).

    Returns
    -------
    LawFit
        The columns of :func:`glance_law.fit_law` plus ``buckets``.

    Examples
    --------
    >>> import glance_law as gl
    >>> law = gl.fit_reduced(gl.reduce_frame(gl.simulate_rounds(seed=0)))
    >>> law.to_frame()["task"].iloc[-1]
    'pooled'
    """
    _check_request(reduced, by, n_boot, cov, condition)
    interval = "bootstrap" if n_boot > 0 else cov
    p = _Parts.of(reduced, quadrature)
    base = fit_law(p.atoms, by=by, method=method, level=level, n_boot=0, seed=seed, condition=None,
                   weight="weight", cluster=("_atom",), bins=bins, ceiling_bins=ceiling_bins, alpha=alpha,
                   min_r2_curve=min_r2_curve, min_r2_isotonic=min_r2_isotonic,
                   cov="cr1")  # its intervals are replaced below
    table = base.table.copy()
    table["buckets"] = 0
    curves, checks, notes = dict(base.curves), dict(base.checks), []
    opt = dict(method=method, level=level, n_boot=int(n_boot), seed=seed, bins=bins, ceiling_bins=ceiling_bins,
               alpha=alpha, min_r2_curve=min_r2_curve, min_r2_isotonic=min_r2_isotonic, interval=interval)
    for d_i, d in enumerate(p.dnames):
        rows = table.index[table["drafter"].astype(str) == d]
        if not len(rows):
            continue
        groups = {i: _group_state(table.loc[i], d_i, p, opt) for i in rows}
        _accumulate(groups, d_i, p, opt)
        for i, gr in groups.items():
            key = (d, gr["g"])
            row, curves[key], checks[key] = _group_result(reduced, table.loc[i], gr, d, curves[key],
                                                          checks[key].drafter, p, opt, notes)
            for col, v in row.items():
                table.at[i, col] = v
            groups[i] = None
    for col in ("prompts", "buckets", "floor_rounds", "ceiling_bins"):
        if table[col].notna().all():  # as fit_law: floor_rounds stays NaN (float) for a group without a curve
            table[col] = table[col].astype(np.int64)
    out = _fit_notes(base, reduced, interval, level, n_boot, seed) + notes + list(reduced.notes)
    return replace(base, table=table, curves=curves, checks=checks, n_boot=int(n_boot), interval=interval,
                   note_lines=tuple(out))


def _check_request(reduced: Reduced, by, n_boot, cov, condition) -> None:
    """One line (GlanceError) for a fit the reduction cannot give."""
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
    if cov not in ("cr3", "cr1"):
        raise GlanceError(f"unknown cov {cov!r}; choose 'cr3' (cluster jackknife) or 'cr1' (sandwich)")
    if reduced.rounds == 0:
        raise GlanceError("the reduction holds no rounds: nothing to fit")


class _Parts:
    """What :func:`fit_reduced` reads of a reduction: the marginal cells (summed over buckets) as
    arrays and as quadrature atoms (``atoms``, ``atom_m``: each atom's marginal cell), and the full
    cells as (task, drafter) slices with their (task, bucket) clusters (``cl_all``, ``G_all``,
    ``task_of``: each cluster's task, the strata of a group that spans several tasks)."""

    @classmethod
    def of(cls, reduced: Reduced, quadrature: bool) -> _Parts:
        p = cls()
        c = reduced.cells
        marg, p.inv = _marginal(c)
        p.lo, p.hi = reduced.grid.edges(marg["hbin"].to_numpy())
        h1, w1, h2, w2 = two_point(marg["n"], marg["sum_h"], marg["sum_h2"], p.lo, p.hi)
        if not quadrature:
            h1, w1, w2 = marg["sum_h"].to_numpy() / marg["n"].to_numpy(), marg["n"].to_numpy(dtype=np.float64), 0 * w2
        p.K = len(marg)
        two = np.flatnonzero(w2 > 0)
        mt, md = marg["task"].cat, marg["drafter"].cat
        p.atoms = pd.DataFrame(_with_targets({
            "task": pd.Categorical.from_codes(np.r_[mt.codes, mt.codes.to_numpy()[two]], mt.categories),
            "drafter": pd.Series(pd.Categorical.from_codes(np.r_[md.codes, md.codes.to_numpy()[two]],
                                                           md.categories)),
            "root_entropy": np.r_[h1, h2[two]],
            "accepted": np.r_[marg["accepted"], marg["accepted"][two]],
            "horizon": np.r_[marg["horizon"], marg["horizon"][two]], "weight": np.r_[w1, w2[two]]}))
        p.atoms["_atom"] = np.arange(len(p.atoms))
        p.atom_m = np.r_[np.arange(p.K), two]
        # cells: slices of one (task, drafter) (the cells are sorted by task, drafter, ...), clusters (task, bucket)
        tcode, p.tnames = _codes(c["task"])
        dcode, p.dnames = _codes(c["drafter"])
        bucket = c["bucket"].to_numpy().astype(np.int64)
        nb = int(bucket.max()) + 1
        keys, cl_all = np.unique(tcode * nb + bucket, return_inverse=True)
        p.cl_all, p.G_all = cl_all.ravel(), keys.size
        p.task_of = keys // nb
        sl = np.flatnonzero(np.r_[True, (tcode[1:] != tcode[:-1]) | (dcode[1:] != dcode[:-1]), True])
        p.slices = [(int(tcode[i]), int(dcode[i]), i, j) for i, j in zip(sl[:-1], sl[1:])]
        p.cols = {k: c[k].to_numpy() for k in ("n", "sum_h", "sum_h2", "accepted", "horizon")}
        p.m_task, p.m_dr = _code_of(marg["task"], p.tnames), _code_of(marg["drafter"], p.dnames)
        p.m_hbin, p.m_n, p.m_sh = marg["hbin"].to_numpy(), marg["n"].to_numpy(dtype=np.float64), marg["sum_h"].to_numpy()
        p.m_a = marg["accepted"].to_numpy().astype(np.float64)
        p.m_L = marg["horizon"].to_numpy().astype(np.float64)
        return p


def _group_state(r, d_i, p: _Parts, opt) -> dict:
    """One table row's group (``r``: its task or pooled, for drafter ``d_i``) before the pass over
    the cells: its marginal cells, estimate, reduced curve and ceiling, atom ranks, decile pieces
    and an empty accumulator."""
    g = str(r["task"])
    mmask = (p.m_dr == d_i) & ((p.m_task == p.tnames.index(g)) if g != POOLED else True)
    mi = np.flatnonzero(mmask)
    local = np.full(p.K, -1, dtype=np.int64)
    local[mi] = np.arange(mi.size)
    b = np.array([r["b0"], r["b1"]], dtype=np.float64)
    cv, crow, mparts = curve_and_ceiling(p.m_hbin[mi], p.lo[mi], p.hi[mi], p.m_n[mi], p.m_sh[mi], p.m_a[mi],
                                         p.m_L[mi], b, opt["bins"], opt["ceiling_bins"])
    amask = mmask[p.atom_m]
    z = _ranks(p.atoms["root_entropy"].to_numpy()[amask], p.atoms["weight"].to_numpy()[amask],
               local[p.atom_m[amask]], p.m_n[mi], p.m_a[mi])
    pieces = _pieces(mparts, p.m_n[mi], mi.size) if mparts is not None else None
    return dict(g=g, mi=mi, local=local, b=b, cv=cv, crow=crow, pieces=pieces,
                z=z if z is not None else (np.zeros(mi.size), np.zeros(mi.size)),
                acc=_Acc(p.G_all, opt["bins"], opt["n_boot"] > 0))


def _accumulate(groups: dict, d_i, p: _Parts, opt) -> None:
    """One pass over drafter ``d_i``'s cells, each slice added to the accumulators of the groups
    it belongs to (its task's and the pooled one)."""
    cols = p.cols
    for t_i, dd, s0, s1 in p.slices:
        if dd != d_i:
            continue
        n = cols["n"][s0:s1].astype(np.float64)
        sh, sh2 = cols["sum_h"][s0:s1], cols["sum_h2"][s0:s1]
        a = cols["accepted"][s0:s1].astype(np.float64)
        L = cols["horizon"][s0:s1].astype(np.float64)
        H, g, m = sh / n, p.cl_all[s0:s1], p.inv[s0:s1]
        for gr in groups.values():
            if gr["g"] != POOLED and gr["g"] != p.tnames[t_i]:
                continue
            gr["acc"].add(g, n, a, H, L, sh, sh2, gr["local"][m], gr["b"], opt["method"], gr["pieces"], *gr["z"],
                          opt["bins"])


def _group_result(reduced: Reduced, r, gr: dict, d: str, cur, drafter, p: _Parts, opt, notes):
    """One group's bucket-clustered statistics after the pass: the row's replaced columns, its
    curve (the reduced one, with clustered or bootstrap intervals) and its checks."""
    acc, g, bins, level = gr["acc"], gr["g"], opt["bins"], opt["level"]
    present = acc.W > 0
    G = int(present.sum())
    where = g if len(p.dnames) == 1 else f"{d}/{g}"
    row = {"buckets": G, "interval": opt["interval"]}
    k = reduced.prompts(d, None if g == POOLED else g)
    row["prompts"] = G if k is None else k
    row.update(gr["crow"])
    row["ceiling_fraction"] = ceiling_fraction(r["r2_round"], row["ceiling"])
    tc = t_crit(G, level) if G >= 2 else np.nan
    _, se_a, _ = clustered_mean(acc.Sa[present] / acc.W[present], np.arange(G), G, acc.W[present],
                                strata=p.task_of[present])
    row["mean_accepted_lo"] = r["mean_accepted"] - tc * se_a
    row["mean_accepted_hi"] = r["mean_accepted"] + tc * se_a
    cur = cur.copy()
    if gr["cv"] is None:
        notes.append(f"{where}: fewer rounds ({p.m_n[gr['mi']].sum():.0f}) than curve bins ({bins}); "
                     "no decile curve")
    else:
        cur = pd.DataFrame({col: gr["cv"].get(col, np.full(bins, np.nan)) for col in CURVE_COLUMNS})
        sw, swy = acc.sw[:, present], acc.swy[:, present]
        kb, kg = np.nonzero(sw > 0)
        bm = _curve.binned_means(swy[kb, kg] / sw[kb, kg], kb, bins, kg, G, sw[kb, kg], level)
        half = bm["hi"] - bm["mean"]
        cur["lo"], cur["hi"] = cur["mean_accepted"] - half, cur["mean_accepted"] + half
    row["rho_p"] = _spearman_p(acc, present)
    lo_b, hi_b = _law_interval(gr, present, G, tc, row, cur, d, p, opt, where, notes)
    row["b0_lo"], row["b1_lo"], row["b0_hi"], row["b1_hi"] = lo_b[0], lo_b[1], hi_b[0], hi_b[1]
    if len(cur):
        row["floor_mean_lo"], row["floor_mean_hi"] = cur["lo"].iloc[0], cur["hi"].iloc[0]
    chk = LawChecks(group=g, drafter=drafter, b1=r["b1"], b1_lo=row["b1_lo"], b1_hi=row["b1_hi"], rho=r["rho"],
                    rho_p=row["rho_p"], r2_curve=row.get("r2_curve", r["r2_curve"]),
                    r2_isotonic=row.get("r2_isotonic", r["r2_isotonic"]), alpha=opt["alpha"],
                    min_r2_curve=opt["min_r2_curve"], min_r2_isotonic=opt["min_r2_isotonic"])
    flags = chk.as_dict()
    row.update(holds=chk.passed, holds_slope=flags["slope"], holds_rank=flags["rank"],
               holds_curve=flags["curve"], holds_monotone=flags["monotone"], failed_checks=",".join(chk.failed()))
    return row, cur, chk


def _law_interval(gr, present, G, tc, row, cur, d, p: _Parts, opt, where, notes):
    """The (b0, b1) interval ``(lo, hi)`` over the ``G`` non-empty buckets: the bucket bootstrap
    (which also replaces the curve's and the mean's intervals in ``cur`` and ``row``), else the
    clustered covariance (stratified by task for a pooled row); NaN without a finite estimate."""
    acc, b, g = gr["acc"], gr["b"], gr["g"]
    n_boot = opt["n_boot"]
    nan = np.array([np.nan, np.nan])
    if not np.all(np.isfinite(b)):
        return nan, nan
    if n_boot > 0:
        rng = np.random.default_rng([int(opt["seed"]), zlib.crc32(f"{d}\0{g}".encode())])
        mi = gr["mi"]
        res = _bootstrap(acc, present, b, opt["method"], p.lo[mi], p.hi[mi], p.m_a[mi], p.m_L[mi], opt["bins"],
                         n_boot, opt["level"], rng, gr["cv"] is not None)
        if res["failed"]:
            notes.append(f"{where}: {res['failed']} of {n_boot} bootstrap replicates could not be refitted "
                         "(left out of the percentile interval)")
        if "curve" in res:
            cur["lo"], cur["hi"] = res["curve"]
        row["mean_accepted_lo"], row["mean_accepted_hi"] = (float(x) for x in res["mean"])
        return res.get("b", (nan, nan))
    if G >= 2:
        # buckets are nested in tasks and each task holds only a few: the pooled row's
        # covariance is stratified by task (stats.cluster.clustered_covariance)
        strata = p.task_of[present]
        cov = clustered_covariance(acc.u[present], acc.info_g[present], opt["interval"],
                                   strata=strata if np.unique(strata).size > 1 else None)
        half = tc * np.sqrt(np.maximum(np.diag(cov), 0.0))
        return b - half, b + half
    notes.append(f"{where}: a single prompt bucket; no clustered interval")
    return nan, nan


def _fit_notes(base, reduced: Reduced, interval, level, n_boot, seed) -> list[str]:
    """The fit's notes: how its intervals were made, fit_law's own notes on the atoms (less the ones
    that the reduced fit replaces) and how the reduction entered the likelihood."""
    lvl = f"{100 * level:g}%"
    how = {"cr3": f"{lvl} CR3 cluster jackknife over prompt buckets (cluster = task, bucket; one Newton step per "
                  "deleted bucket) with Student-t(G-1), G = non-empty buckets (column buckets)",
           "cr1": f"{lvl} CR1 cluster-robust sandwich over prompt buckets (cluster = task, bucket) with "
                  "Student-t(G-1), G = non-empty buckets (column buckets)",
           "bootstrap": f"{lvl} percentile, cluster bootstrap over prompt buckets (task, bucket), {n_boot} "
                        f"replicates (seed {seed})"}[interval]
    out = [f"intervals: {how}; a bucket holds whole prompts, so this is prompt-clustered inference; rho_p: "
           "clustered over buckets"]
    # fit_law counts atoms, not rounds, in its "no decile curve" note; the curve here is the reduced one (noted above)
    out += [s for s in base.note_lines if not s.startswith("intervals:") and "than curve bins" not in s]
    out.append("fitted from reduced sufficient statistics: each entropy bin's rounds (summed over buckets) enter the "
               "likelihood as two atoms matching their entropy mean and variance (b0, b1 exact to O(width^4)); "
               "equal-count bins cut inside a fine bin by each cell's modelled entropy density (docs/scale.md)")
    no_sq = int(np.isnan(reduced.cells["sum_h2"].to_numpy(dtype=np.float64)).sum())
    if no_sq:
        out.append(f"{no_sq} cell(s) without sum_h2 (from a reduction that did not record it) enter at their mean "
                   "entropy: binning error O(width^2) there")
    return out


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
                 min_expected: float = 5.0, heldout: bool = True, by: str | None = "task"):
    """The grounded tail (a :class:`glance_law.tail.TailFit`) from a reduction.

    The tail depends on the floor regime's rounds only through their accepted lengths,
    horizons and prompts, so each (drafter, task)'s floor cells are expanded to rounds
    (accepted, horizon, bucket) and handed to :func:`glance_law.tail.tail_test`: the
    held-out splits are bucket-disjoint, hence prompt-disjoint, and ``floor_prompts``
    counts buckets. The floor is each task's bottom ``quantile`` of rounds ordered by cell
    mean entropy (resolved to one fine bin), or the cells with mean entropy <= ``threshold``.

    Parameters
    ----------
    reduced : Reduced
        A reduction.
    law : LawFit, optional
        The law of the reduction (default: ``fit_reduced(reduced)``).
    quantile, threshold, n_boot, seed, folds, level, n_boot_mean, min_expected, heldout
        As in :func:`glance_law.fit_tail`.
    by : str, default "task"
        "task", or None/"none": one tail per drafter over every task (labelled 'pooled', clusters
        (task, bucket)).

    Returns
    -------
    TailFit
        As :func:`glance_law.fit_tail` returns (``floor_prompts`` counts buckets).

    Examples
    --------
    >>> import glance_law as gl
    >>> red = gl.reduce_frame(gl.simulate_rounds(seed=0))
    >>> type(gl.tail_reduced(red, n_boot=0, heldout=False)).__name__
    'TailFit'
    """
    from glance_law.tail.report import TailFit, tail_test
    if threshold is None and not 0.0 < float(quantile) <= 1.0:
        raise GlanceError(f"quantile must lie in (0, 1] (got {quantile})")
    if law is None:
        law = fit_reduced(reduced)
    c = reduced.cells
    multi = c["drafter"].nunique() > 1
    tasks, notes = [], []
    pooled = grouping(by) is None
    for key, sub in c.groupby(["drafter"] if pooled else ["drafter", "task"], observed=True, sort=True):
        d, t = (key[0], POOLED) if pooled else key
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
        # clusters: buckets, of each task apart when the tasks are pooled (a bucket holds one task's prompts)
        clu = f["bucket"].to_numpy().astype(np.int64)
        if pooled:
            clu = pd.factorize(f["task"].astype(str))[0].astype(np.int64) * int(reduced.buckets) + clu
        tt, tn = tail_test(np.repeat(f["accepted"].to_numpy(), n), np.repeat(f["horizon"].to_numpy(), n),
                           np.repeat(clu, n), b0=b0, task=str(t), n_boot=n_boot, seed=rng,
                           folds=folds, level=level, n_boot_mean=n_boot_mean, min_expected=min_expected,
                           threshold=thr, drafter=str(d) if multi else "", heldout=heldout)
        tasks.append(tt)
        notes += tn
    if not tasks:
        raise GlanceError("the floor regime is empty for every task; raise the threshold")
    rule = f"cell-mean H <= {threshold} nats" if threshold is not None else f"bottom {quantile:g} by cell-mean H"
    notes += [f"from a reduction: floor regime {'of every task pooled' if pooled else 'per task'} = {rule} (resolved to one fine entropy bin); "
              "floor_prompts, the held-out splits, the floor_mean interval and the LRT's design effect (lrt_deff) "
              "use prompt buckets as clusters",
              f"cap = e^b0 from the reduced law fit; lrt_p_bootstrap: parametric bootstrap under the fitted "
              f"geometric ({n_boot} replicates, seed {seed}); lrt_p_nominal: chi-square(4), conservative"]
    return TailFit(tasks=tuple(tasks), level=float(level), note_lines=tuple(notes))
