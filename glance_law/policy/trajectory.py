"""Trajectory replay: the run a draft policy itself produces, position by position (docs/policy.md).

Scoring a policy on a logged run's roots answers the wrong question: a policy that drafts less
where drafting is hard takes more rounds there, so its own run visits other roots. A *dense*
log (``glance-log --dense``: condition ``dense``) records the drafter's proposal at every
output position, resolved against the target's greedy continuation, so every position is a
root whose accepted length at every shape is known exactly (:func:`glance_law.policy.evaluate.prepare`
replays each one). :func:`simulate` then walks a prompt's output as the live decoder does: at
root ``s`` the policy picks the shape from what the decoder knows there (the root statistics,
the previous round's accepted count and shape), the round accepts ``curve[s, shape]`` tokens
(at most up to the output's end) and the next root is ``s + accepted + 1``.

Exact for a greedy target and a drafter whose proposal at a position depends only on the
committed prefix: the block head (the root and the row that predicted it), prompt lookup (the
context), early exit and two-model drafters (their own greedy chain from the prefix; up to the
floating-point differences of catching their cache up by one token or by several). A position
where the drafter proposed nothing is a shape-0 round, as live.

:func:`evaluate_trajectories` is the held-out search on such logs: each family's law and
threshold are fitted on the training prompts (the threshold so the mean shape *of the
policy's own simulated run* meets the target), the held-out prompts are replayed along the
policy's trajectory, and the gain is over the fixed shape at the policy's mean shape (depth-0
rounds counted), both replayed along their own trajectories, with prompt-bootstrap intervals.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..data.schema import CONDITION_DENSE
from ..errors import GlanceError
from ..stats.cluster import bootstrap_counts, percentile_interval
from .evaluate import (
    CostModel,
    PolicyData,
    PolicyTable,
    cost_model,
    evaluated_on,
    families_for,
    fit_family,
    interp_up,
    jackknife_groups,
    jackknife_interval,
    prepare,
    prompt_folds,
)
from .policies import FixedPolicy, ThresholdPolicy, apply_policy

__all__ = ["DenseData", "Trajectory", "prepare_dense", "has_dense", "simulate", "fit_on_trajectory",
           "trajectory_sums", "trajectory_jackknife", "evaluate_trajectories", "DENSE_ASSUMPTIONS"]

#: what a trajectory replay assumes (recorded with every exported policy fitted on dense logs)
DENSE_ASSUMPTIONS = (
    "trajectory replay on a dense log: every output position is a root; a policy's run is walked position by "
    "position (next root = root + accepted + 1), fitted and scored on the policy's own simulated run",
    "exact for a greedy target and a drafter whose proposal depends only on the committed prefix (block head, "
    "prompt lookup; early exit and two-model drafters up to floating-point differences of their cache catch-up)",
    "a position where the drafter proposed nothing is a shape-0 round; tokens per round = accepted + 1, every "
    "round counted (shape-0 rounds included)",
)


def has_dense(rounds) -> bool:
    """Do the logs hold dense-mode rounds (condition ``dense``)?"""
    frame = getattr(rounds, "frame", rounds)
    return isinstance(frame, pd.DataFrame) and "condition" in frame.columns and \
        bool((frame["condition"].astype(str) == CONDITION_DENSE).any())


@dataclass(frozen=True, eq=False)
class DenseData:
    """One drafter's dense rounds: ``rows`` every position with a proposal, replayed at every shape
    (a :class:`PolicyData`), ``row_of`` (G, N) the row of prompt g's position s (-1: nothing
    proposed), ``n_out`` (G,) each prompt's output length, ``passes`` (R,) the drafter passes spent
    at each row's position (spent whatever shape the round takes)."""

    rows: PolicyData
    row_of: np.ndarray
    n_out: np.ndarray
    passes: np.ndarray
    notes: tuple = ()
    replay: str = "trajectory"

    @property
    def shape(self) -> str:
        return self.rows.shape

    @property
    def drafter(self) -> str:
        return self.rows.drafter

    @property
    def feature(self) -> str:
        return self.rows.feature

    @property
    def keys(self) -> tuple:
        return self.rows.keys

    @property
    def rounds(self) -> int:
        return self.rows.rounds

    @property
    def prompts(self) -> int:
        return int(self.n_out.size)

    def rows_of(self, prompts) -> np.ndarray:
        """Row indices of the given prompts' positions."""
        return np.flatnonzero(np.isin(self.rows.codes, np.asarray(prompts)))


def prepare_dense(rounds, *, drafter: str | None = None, shape: str | None = None, n_max: int = 255,
                  feature: str = "auto") -> DenseData:
    """The dense rounds (condition ``dense``) of one drafter, every shape replayed at every position."""
    frame = getattr(rounds, "frame", rounds)
    if not has_dense(frame):
        raise GlanceError("no dense-mode rounds in the logs: log them with glance-log --dense")
    d = prepare(frame, drafter=drafter, shape=shape, n_max=n_max, condition=CONDITION_DENSE, feature=feature)
    if d.stats.position is None:
        raise GlanceError("dense rounds need the position column (glance-log writes it)")
    sub = frame.loc[(frame["condition"].astype(str) == CONDITION_DENSE)]
    if "drafter" in sub.columns:
        sub = sub.loc[sub["drafter"].astype(str) == d.drafter]
    key_of = {k: g for g, k in enumerate(d.keys)}
    kcols = [c for c in ("task", "prompt_id") if c in sub.columns]
    gk = sub[kcols].astype(str).apply(tuple, axis=1) if len(sub) else pd.Series([], dtype=object)
    g_all = gk.map(lambda k: key_of.get(k, -1)).to_numpy(np.int64)
    pos_all = sub["position"].to_numpy(np.int64)
    G = len(d.keys)
    n_out = np.zeros(G, np.int64)                      # a dense run has a round at every position 0 .. N-2
    ok = g_all >= 0
    if np.any(pos_all[ok] < 0):
        raise GlanceError("dense rounds: a negative position")
    np.maximum.at(n_out, g_all[ok], pos_all[ok] + 2)
    count = np.bincount(g_all[ok], minlength=G)
    bad = np.flatnonzero(count < n_out - 1)
    if bad.size:
        raise GlanceError(f"dense rounds: prompt {'/'.join(d.keys[bad[0]])} has {count[bad[0]]} round(s) but its last "
                          f"position is {n_out[bad[0]] - 2}; a dense run logs every position 0 .. N-2 (an incomplete "
                          "or edited log)")
    pos = d.stats.position.astype(np.int64)
    if np.any(pos >= n_out[d.codes]):
        raise GlanceError("dense rounds: a position past its prompt's last round")
    row_of = np.full((G, int(n_out.max(initial=1))), -1, np.int64)
    if len(np.unique(d.codes * row_of.shape[1] + pos)) != d.rounds:
        raise GlanceError("dense rounds: two rounds at one position of a prompt (two runs of the same prompts? "
                          "keep one dense run per drafter)")
    row_of[d.codes, pos] = np.arange(d.rounds)
    passes = np.zeros(d.rounds)
    if "draft_passes" in sub.columns:
        dp = pd.Series(sub["draft_passes"].to_numpy(np.float64), index=g_all * row_of.shape[1] + pos_all)
        passes = dp.groupby(level=0).first().reindex(d.codes * row_of.shape[1] + pos).fillna(0.0).to_numpy()
    notes = [n for n in d.notes if "cut proposal" not in n and "end their prompt's output" not in n]
    notes.append(f"trajectory replay: {d.rounds} dense positions with a proposal over {G} prompts "
                 f"({int(n_out.sum())} output tokens)")
    return DenseData(rows=d, row_of=row_of, n_out=n_out, passes=passes, notes=tuple(notes))


@dataclass(frozen=True, eq=False)
class Trajectory:
    """The rounds of a simulated run, in order within each prompt: ``prompt``, root ``position``,
    ``shape``, ``accepted``, dense ``row`` (-1: the drafter proposed nothing there)."""

    prompt: np.ndarray
    position: np.ndarray
    shape: np.ndarray
    accepted: np.ndarray
    row: np.ndarray

    @property
    def rounds(self) -> int:
        return int(self.prompt.size)


def simulate(d: DenseData, policy: Callable | None = None, *, shapes: np.ndarray | None = None,
             prompts=None) -> Trajectory:
    """Walk each prompt's output as the live decoder does, with ``policy`` (called on the roots'
    statistics, the previous round's accepted count and shape filled in) or per-row ``shapes``."""
    if (policy is None) == (shapes is None):
        raise GlanceError("simulate: give a policy or per-row shapes (one of them)")
    rd = d.rows
    sel = np.arange(d.prompts) if prompts is None else np.asarray(prompts, np.int64)
    N = d.n_out[sel]
    s = np.zeros(sel.size, np.int64)
    pa = np.full(sel.size, -1, np.int64)
    ps = np.full(sel.size, -1, np.int64)
    out = []
    alive = np.flatnonzero(s < N - 1)
    while alive.size:
        g, pos = sel[alive], s[alive]
        r = d.row_of[g, pos]
        has = r >= 0
        sh = np.zeros(alive.size, np.int64)
        if has.any():
            rr = r[has]
            if shapes is not None:
                pick = np.asarray(shapes, np.int64)[rr]
            else:
                st = replace(rd.stats.take(rr), prev_accepted=pa[alive][has], prev_shape=ps[alive][has])
                pick = apply_policy(policy, st)
            sh[has] = np.clip(pick, 0, rd.cap[rr])
        a = np.zeros(alive.size, np.int64)
        a[has] = rd.curve[r[has], sh[has]]
        a = np.minimum(a, N[alive] - 1 - pos)             # the output ends there: the walk stops
        out.append((g, pos, sh, a, r))
        s[alive] = pos + a + 1
        pa[alive], ps[alive] = a, sh
        alive = alive[s[alive] < N[alive] - 1]
    if not out:
        z = np.zeros(0, np.int64)
        return Trajectory(z, z, z, z, z)
    cols = [np.concatenate(c) for c in zip(*out)]
    o = np.lexsort((cols[1], cols[0]))
    return Trajectory(*(c[o] for c in cols))


def trajectory_sums(d: DenseData, tr: Trajectory, cost: CostModel | None = None, policy: bool = False) -> dict:
    """Per prompt (G,): rounds, tokens (accepted + 1), shape, shape-0 rounds, modelled ms
    (constant + pass_ms x the drafter passes spent at the root + node_ms x shape + tree_ms x
    [shape > 0], or the model's per-shape table, plus the policy's host work ``host_ms`` a round when ``policy``: a run a policy
    shapes, plus ``first_ms`` at the prompt's first root; absent without an identified cost)."""
    G = d.prompts
    def bc(w):
        return np.bincount(tr.prompt, weights=w, minlength=G).astype(np.float64)
    out = {"rounds": bc(None), "tokens": bc(tr.accepted + 1.0), "shape": bc(tr.shape.astype(np.float64)),
           "zero": bc((tr.shape == 0).astype(np.float64))}
    if cost is not None and cost.identified:
        passes = np.where(tr.row >= 0, d.passes[np.maximum(tr.row, 0)], 0.0)
        out["ms"] = bc(cost.round_ms(tr.shape, passes, policy=policy, first=tr.position == 0))
    return out


def _threshold_on_trajectory(d: DenseData, pol: ThresholdPolicy, prompts, target: float) -> float:
    """The threshold whose simulated run over ``prompts`` has the largest mean shape (depth-0 rounds
    counted) not above ``target`` (bisection over the unit values; the run's mean shape grows
    with the units taken, up to the trajectory's changes)."""
    rows = d.rows_of(prompts)
    V = np.full((d.rounds, 0), -np.inf)
    if rows.size:
        V = pol.unit_values(d.rows.stats.take(rows))
    cand = np.unique(V[np.isfinite(V)])[::-1]
    if cand.size == 0:
        return float("inf")

    def mean_shape(i):
        shapes = np.zeros(d.rounds, np.int64)
        shapes[rows] = (V >= cand[i]).sum(axis=1)
        tr = simulate(d, shapes=shapes, prompts=prompts)
        return tr.shape.mean() if tr.rounds else 0.0

    if mean_shape(0) > target:
        return float(np.nextafter(cand[0], np.inf))
    lo, hi = 0, cand.size - 1                          # invariant: mean_shape(lo) <= target
    if mean_shape(hi) <= target:
        return float(cand[hi])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mean_shape(mid) <= target:
            lo = mid
        else:
            hi = mid
    return float(cand[lo])


def fit_on_trajectory(name: str, d: DenseData, prompts, target: float, max_size: int):
    """Fit a family on ``prompts``: its law on every position of theirs, its threshold on its own
    simulated run (mean shape = ``target``). (policy, '') or (None, why not)."""
    pol, why = fit_family(name, d.rows.take(d.rows_of(prompts)), target, max_size=max_size)
    if pol is None or not isinstance(pol, ThresholdPolicy):
        return pol, why
    return replace(pol, threshold=_threshold_on_trajectory(d, pol, prompts, target)), ""


def _summary(w, P, F) -> dict:
    """Ratios of weighted per-prompt sums: the policy's tokens per round, mean shape, share of
    shape-0 rounds, the fixed shape at equal mean shape, the gain, and with ``ms`` the modelled
    ms per token and speedups (at equal mean modelled round cost; over the best fixed shape)."""
    R = w @ P["rounds"]
    T, S = w @ P["tokens"] / R, w @ P["shape"] / R
    fr = w @ F["rounds"]
    fs, ft = w @ F["shape"] / fr, w @ F["tokens"] / fr
    Feq = interp_up(S, fs, ft)
    out = {"tokens": T, "mean_shape": S, "share_shape0": w @ P["zero"] / R, "fixed_tokens": Feq,
           "gain": 100.0 * (T / Feq - 1.0)}
    if "ms" in P:
        C, fm = w @ P["ms"] / R, w @ F["ms"] / fr
        Fc = interp_up(C, fm, ft)
        out.update(ms_per_token=C / T, fixed_ms_per_token=C / Fc, speedup=T / Fc,
                   speedup_best_fixed=float(np.nanmin(fm / ft)) / (C / T))
    return out


def _score(P: dict, F: dict, n_boot: int, level: float, seed: int) -> dict:
    G = P["rounds"].size
    point = _summary(np.ones(G), P, F)
    out = dict(point)
    draws = {k: [] for k in point}
    if n_boot > 0 and G >= 2:
        for cnt in bootstrap_counts(G, n_boot, np.random.default_rng(seed)):
            for c in cnt:
                w = c.astype(np.float64)
                if w @ P["rounds"] <= 0:
                    continue
                for k, v in _summary(w, P, F).items():
                    draws[k].append(v)
    for k in point:
        lo, hi = (percentile_interval(np.asarray(draws[k]), level) if draws[k] else (np.nan, np.nan))
        out[k + "_lo"], out[k + "_hi"] = float(lo), float(hi)
    return out


def trajectory_jackknife(name: str, d: DenseData, splits, target: float, cap: int, cost: CostModel, F: dict,
                         point: dict, *, groups: int = 200, level: float = 0.95, seed: int = 0,
                         notes: list | None = None) -> dict:
    """Held-out intervals along the policy's own run that account for the fitting: the jackknife of
    the whole held-out procedure (as :func:`glance_law.policy.evaluate.refit_interval` on logged
    roots). Each replicate leaves one of ``min(G, groups)`` prompt groups out, refits the family
    on every fold's remaining training prompts (law and threshold on its own simulated run) and
    walks the fold's remaining held-out prompts: ``{key_lo, key_hi}`` around ``point``."""
    group, m = jackknife_groups(d.prompts, groups, seed)
    draws: dict = {}
    failed = 0
    for j in range(m):
        out = group == j
        P, why = None, ""
        for tr, te in splits:
            pol, why = fit_on_trajectory(name, d, tr[~out[tr]], target, cap)
            if pol is None:
                break
            p = trajectory_sums(d, simulate(d, pol, prompts=te[~out[te]]), cost, policy=True)
            P = p if P is None else {k: P[k] + p[k] for k in P}
        w = (~out).astype(np.float64)
        if why or P is None or not w @ P["rounds"] > 0:
            failed += 1
            continue
        for k, v in _summary(w, P, F).items():
            draws.setdefault(k, []).append(v)
    if failed and notes is not None:
        notes.append(f"{name}: {failed} of {m} jackknife replicates could not fit the family on some fold and are "
                     "left out of its held-out intervals")
    return jackknife_interval(point, draws, level)


def _fixed_sums(d: DenseData, cost: CostModel, top: int) -> dict:
    """Per prompt and fixed shape n = 0..top, each along its own simulated run: (G, top + 1) sums."""
    per = [trajectory_sums(d, simulate(d, shapes=np.minimum(n, d.rows.cap)), cost) for n in range(top + 1)]
    return {k: np.stack([p[k] for p in per], axis=1) for k in per[0]}


def _timed_rounds(rounds) -> pd.DataFrame:
    """The rounds the round-cost regression reads: the matched ones and the dense ones (each a
    measured round of shape 0 that paid the drafter's passes: what a shape-0 round costs live)."""
    frame = getattr(rounds, "frame", rounds)
    if "condition" not in frame.columns:
        return frame
    cond = frame["condition"].astype(str)
    return frame.assign(condition=np.where(cond == CONDITION_DENSE, "matched", cond))


def evaluate_trajectories(rounds, target: float, *, data: DenseData | None = None, drafter: str | None = None,
                          shape: str | None = None, families: Sequence[str] | None = None, folds: int = 5,
                          in_sample: bool = True, n_max: int = 255, n_boot: int = 200, level: float = 0.95,
                          seed: int = 0, node_ms: float | None = None, pass_ms: float | None = None,
                          constant_ms: float | None = None, policies: dict[str, Callable] | None = None,
                          feature: str = "auto", groups: int | None = None) -> PolicyTable:
    """The held-out policy search on dense logs, every figure along the policy's own run.

    Same table as :func:`glance_law.policy.evaluate.evaluate_policies` (``tokens``, ``mean_shape``,
    ``fixed_tokens`` at the policy's mean shape, ``gain``, modelled speed when the matched rounds
    identify a round cost), plus ``share_shape0`` (rounds drafting nothing) and ``rounds`` (the
    simulated rounds). Folds are prompt-grouped; every fit uses the training prompts only. Held-out
    rows' intervals: :func:`trajectory_jackknife` over ``groups`` prompt groups (default ``n_boot``;
    none when ``n_boot`` is 0); the other rows': a percentile prompt bootstrap, the fits held."""
    if target <= 0:
        raise GlanceError("the target mean shape (--budget) must be positive")
    d = data if data is not None else prepare_dense(rounds, drafter=drafter, shape=shape, n_max=n_max,
                                                    feature=feature)
    rd = d.rows
    if target > rd.n_max:
        raise GlanceError(f"the target shape {target:g} exceeds the largest replayed shape ({rd.n_max})")
    notes = list(d.notes)
    cost = cost_model(_timed_rounds(rounds), d.drafter, node_ms=node_ms, pass_ms=pass_ms, constant_ms=constant_ms,
                      notes=notes)
    names = families_for(rd, families)
    jk = int(n_boot if groups is None else groups)
    G = d.prompts
    pcodes = np.arange(G)
    splits = prompt_folds(pcodes, folds, seed)
    ev = evaluated_on(splits, pcodes)
    cap = rd.n_max if d.shape == "depth" else int(min(rd.n_max, max(63, 4 * int(np.ceil(target)))))
    top = int(rd.cap.max(initial=0)) if d.shape == "depth" else int(min(rd.n_max, 2 * np.ceil(target) + 2))
    F = _fixed_sums(d, cost, top)
    base = {"drafter": d.drafter, "shape": d.shape, "feature": d.feature, "replay": "trajectory",
            "target_shape": float(target), "prompts": G}
    fixed = FixedPolicy(shape=d.shape, size=int(round(target)))

    def row(family, on, params, P):
        return {**base, "family": family, "evaluated_on": on, "params": params, "rounds": int(P["rounds"].sum()),
                **_score(P, F, n_boot, level, seed)}

    rows = [row("fixed", "no fit", fixed.describe(), trajectory_sums(d, simulate(d, fixed), cost))]
    fitted = {}
    for name in names:
        modes = [("held-out" if ev == "held-out" else "in-sample", splits)]
        if in_sample:
            modes.append(("in-sample", [(pcodes, pcodes)]))
        why = ""
        for label, spl in modes:
            P, used = None, []
            for tr, te in spl:
                pol, why = fit_on_trajectory(name, d, tr, target, cap)
                if pol is None:
                    break
                used.append(pol)
                p = trajectory_sums(d, simulate(d, pol, prompts=te), cost, policy=True)
                P = p if P is None else {k: P[k] + p[k] for k in P}
            if why:
                notes.append(f"{name}: not evaluated ({why})")
                break
            desc = used[0].describe() if len(used) == 1 else f"{len(used)} fold fits, e.g. {used[0].describe()}"
            r = row(name, evaluated_on(spl, pcodes), desc, P)
            if r["evaluated_on"] == "held-out" and n_boot > 0:
                r.update(trajectory_jackknife(name, d, spl, target, cap, cost, F, r, groups=jk, level=level,
                                              seed=seed, notes=notes))
            rows.append(r)
            if label == "in-sample":
                fitted[name] = used[0]
    for name, f in (policies or {}).items():
        rows.append(row(name, "as given", "user callable", trajectory_sums(d, simulate(d, f), cost, policy=True)))
    table = pd.DataFrame(rows)
    notes += [
        f"held-out: fitted on the training prompts of a {len(splits)}-fold prompt-grouped split (seed {seed}): the "
        "law on every training position, the threshold on the policy's own simulated run; scored along the "
        "policy's run on the other prompts",
        "tokens: tokens per round (accepted + 1) along the run; mean_shape and share_shape0 count every round "
        "(shape-0 rounds included); fixed_tokens: the fixed shape at the policy's mean shape, each fixed shape "
        "along its own run (interpolated between integer shapes); gain: % over it",
        f"intervals: {100 * level:g}%; held-out rows: estimate +- t(m-1) x the delete-a-group jackknife sd of the "
        f"whole held-out procedure (m = min(prompts, {jk}) random prompt groups, each left out in turn, the family "
        "refitted on every fold's remaining training prompts and walked on its remaining held-out prompts); other "
        f"rows: percentile, prompt-level bootstrap ({n_boot} replicates), the fits held at their estimates",
        *DENSE_ASSUMPTIONS,
    ]
    if cost.identified:
        notes.append(f"modelled ms/round = {cost.formula('the drafter passes spent at the root (whatever the shape)')}"
                     f" ({cost.source})")
    return PolicyTable(table=table, policies=fitted, cost=cost, note_lines=tuple(dict.fromkeys(notes)))
