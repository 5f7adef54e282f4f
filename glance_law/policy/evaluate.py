"""Offline, held-out evaluation of draft policies by exact replay (docs/policy.md).

For one drafter's rounds, :func:`replay_curves` replays every shape up to the cap from the
logged marginals (:func:`glance_law.replay.replay_arrays`: tree budgets within the logged
horizon; depths of the chain, i.e. the drafter's top-1 path, within each round's proposal),
so any policy's tokens per round (accepted + 1) is read off the curves at the shape it picks.
A round-cost model (:mod:`glance_law.policy.cost`: measured from the logs' timed rounds, or
given terms) turns shapes into modelled ms per round, hence ms per token.

:func:`evaluate_policies` fits every family on training prompts and scores it on held-out
prompts (prompt-grouped K-fold, scikit-learn's ``GroupKFold``): the law, the rescue fit and
the shadow price/threshold are all fitted on the training folds only. Each row says how it
was evaluated (``evaluated_on``), *computed from the folds actually used*: ``held-out`` only
when no scored round's prompt was among the prompts its policy was fitted on. Gains are
relative to the fixed shape at equal mean shape (tokens per round) and at equal mean modelled
cost; held-out rows carry a jackknife of the whole held-out procedure (:func:`refit_interval`:
every fold refitted without one prompt, or one group of prompts, at a time), other rows
prompt-level bootstrap intervals (fits held at the fold estimates).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from ..data.arms import label_targets, plain_drafter
from ..data.schema import SUPPLIED_BY
from ..data.selection import require_order
from ..errors import GlanceError, MissingColumnError
from ..law import fit_law
from ..replay import chain_run, replay_arrays, round_arrays
from ..replay.width import fit_rescue, rescue_events
from ..results import Result
from ..stats.cluster import bootstrap_counts, cluster_codes, percentile_interval, t_crit
from .cost import CostModel, cost_model
from .policies import (
    FixedPolicy,
    GatedDepthPolicy,
    KeyedBudgetPolicy,
    KeyedDepthPolicy,
    Policy,
    RootStats,
    ThresholdPolicy,
    apply_policy,
    fit_threshold,
)

__all__ = ["PolicyData", "CostModel", "select_rounds", "fold_shapes", "refit_interval", "jackknife_groups", "jackknife_interval", "interp_up", "prepare", "cost_model", "prompt_folds", "fit_family", "evaluate_policies", "evaluated_on",
           "score_policy", "PolicyTable", "FAMILY_NAMES", "families_for"]

#: built-in families searched per shape ("keyed-paper": the paper's key; "keyed-rescue": corrected)
FAMILY_NAMES = {"budget": ("keyed-rescue", "keyed-paper"),
                "depth": ("keyed-depth", "gated-cumprob", "gated-entropy")}


# --------------------------------------------------------------------------- data

@dataclass(frozen=True, eq=False)
class PolicyData:
    """One drafter's replayed rounds: ``curve`` (R, n_max + 1) accepted length at every shape,
    ``stats`` the root statistics, ``cap`` (R,) the largest shape each round can take, prompt
    ``codes`` (R,) and ``keys`` (G,) the prompts' (task, prompt_id) labels; ``rank``/``horizon``
    for the law fits; ``passes`` the drafter passes a shape costs."""

    curve: np.ndarray
    stats: RootStats
    cap: np.ndarray
    codes: np.ndarray
    keys: tuple
    rank: np.ndarray
    horizon: np.ndarray
    shape: str
    drafter: str
    n_max: int
    point_mass: bool
    tasks: np.ndarray
    feature: str = "root_entropy"
    cut: np.ndarray | None = None      # (R,) the round ends the output: its logged proposal is cut there
    notes: tuple[str, ...] = ()

    @property
    def rounds(self) -> int:
        return int(self.curve.shape[0])

    def take(self, idx) -> PolicyData:
        idx = np.asarray(idx)
        used, codes = np.unique(self.codes[idx], return_inverse=True)      # prompts renumbered 0..G'-1
        return replace(self, curve=self.curve[idx], stats=self.stats.take(idx), cap=self.cap[idx],
                       codes=codes.astype(np.int64), keys=tuple(self.keys[i] for i in used), rank=self.rank[idx], horizon=self.horizon[idx], tasks=self.tasks[idx],
                       cut=None if self.cut is None else self.cut[idx])

    def accepted_at(self, shapes) -> np.ndarray:
        s = np.clip(np.asarray(shapes, dtype=np.int64), 0, self.cap)
        return self.curve[np.arange(self.rounds), s].astype(np.float64)


#: What the refusal of rows without a known round order suggests instead (docs/your-logs.md).
ORDER_INSTEAD = ("their tau and P(a = L) per task need no order: run python -m glance_law.fit on them (without "
                 "--tail for pooled counters); a replay needs per-step logs (vLLM --per-request-spec-decode-metrics "
                 "detailed, glance-log)")


def select_rounds(frame: pd.DataFrame, *, drafter: str | None = None, condition: str | None = "matched",
                  task: str | None = None, keep_undrafted: bool = False) -> tuple[pd.DataFrame, str, list[str]]:
    """One drafter's drafted rounds of one condition (and task): (frame, drafter, notes saying what
    was left out). ``drafter`` may be omitted when the logs hold one speculative drafter.
    ``keep_undrafted``: keep the drafter's rounds with horizon 0 (a sequential replay needs every
    round of a stream). Rounds of several target models are told apart by the arm label
    ``drafter @ target`` (:func:`glance_law.data.arms.label_targets`): name the arm as ``drafter``.
    Rounds whose order is not known (``round_order`` unknown or pooled: rebuilt from histograms or
    counters) are refused in one line: every replay steps through a prompt's rounds in order."""
    notes: list[str] = []
    frame = label_targets(frame, notes)
    if condition is not None and "condition" in frame.columns:
        keep = frame["condition"].astype(str) == condition
        if (~keep).any():
            notes.append(f"{int((~keep).sum())} round(s) of other conditions excluded (kept: {condition})")
        frame = frame.loc[keep]
    if task is not None:
        if "task" not in frame.columns or not (frame["task"].astype(str) == task).any():
            raise GlanceError(f"no round of task {task!r} in the logs")
        frame = frame.loc[frame["task"].astype(str) == task]
    if "drafter" in frame.columns:
        names = sorted(set(frame["drafter"].astype(str)))
        spec = [n for n in names if plain_drafter(pd.Series([n])).iloc[0] != "ar"]
        if drafter is None:
            if len(spec) != 1:
                raise GlanceError(f"the logs hold {len(spec)} speculative drafters ({', '.join(spec) or 'none'}); "
                                  "choose one with --drafter")
            drafter = spec[0]
        if drafter not in names:
            raise GlanceError(f"no round of drafter {drafter!r} in the logs (drafters: {', '.join(names)})")
        other = frame["drafter"].astype(str) != drafter
        if other.any():
            notes.append(f"{int(other.sum())} round(s) of other drafters excluded (kept: {drafter})")
        frame = frame.loc[~other]
    drafter = drafter or "unknown"
    if "horizon" in frame.columns and not keep_undrafted:
        ar = frame["horizon"].to_numpy() <= 0
        if ar.any():
            notes.append(f"{int(ar.sum())} round(s) without a draft (horizon 0) excluded: no policy shapes them")
            frame = frame.loc[~ar]
    if frame.empty:
        raise GlanceError(f"no drafted round of drafter {drafter!r} to evaluate")
    require_order(frame, f"the policy replay of {drafter} steps through each prompt's rounds in order", ORDER_INSTEAD)
    return frame, drafter, notes


def prepare(rounds, *, drafter: str | None = None, shape: str | None = None, n_max: int = 255,
            condition: str | None = "matched", task: str | None = None, feature: str = "auto") -> PolicyData:
    """Select one drafter's matched rounds and replay every shape up to the cap.

    ``shape``: ``"budget"`` (tree node budgets, default for drafters with k > 1) or ``"depth"``
    (chain depths: the drafter's top-1 path; default when k = 1). ``n_max``: the largest tree
    budget replayed (depths are capped by each round's proposal). ``feature``: the entropy the
    policies read - ``pred_entropy`` (the row that predicted the root: what a live decoder
    knows), ``root_entropy`` (the verify pass's root row: one position of foresight), or
    ``auto`` (pred_entropy when every round has it)."""
    frame = getattr(rounds, "frame", rounds)
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError("policy evaluation expects a rounds DataFrame or a LogSet from glance_law.read_logs")
    for c in ("topk_logq", "target_rank", "prompt_id"):
        if c not in frame.columns:
            raise MissingColumnError(f"the column {c}", "the policy replay", SUPPLIED_BY.get(c))
    frame, drafter, notes = select_rounds(frame, drafter=drafter, condition=condition, task=task)
    if feature == "auto":
        feature = ("pred_entropy" if "pred_entropy" in frame.columns and frame["pred_entropy"].notna().all()
                   else "root_entropy")
        if feature == "root_entropy":
            notes.append("policies read root_entropy (the verify pass's root row), which a live decoder cannot know "
                         "before drafting; the figures assume one position of foresight (log pred_entropy with "
                         "glance-log to fit on what the decoder knows)")
    if feature not in ("pred_entropy", "root_entropy"):
        raise GlanceError(f"feature must be pred_entropy, root_entropy or auto (got {feature!r})")
    if feature not in frame.columns or frame[feature].isna().any():
        raise MissingColumnError(f"the column {feature} in every round", "the policy replay",
                                 SUPPLIED_BY.get(feature))
    logq, rank, usable, rn = round_arrays(frame)
    notes += rn
    frame = frame.loc[usable]
    logq, rank = logq[usable].astype(np.float64), rank[usable]
    R, L, k = logq.shape
    point_mass = bool(np.all((logq[np.isfinite(logq)]) == 0.0))
    if shape is None:
        shape = "depth" if k == 1 else "budget"
    if shape not in ("budget", "depth"):
        raise GlanceError(f"shape must be 'budget' or 'depth' (got {shape!r})")
    horizon = (frame["horizon"].to_numpy(dtype=np.int64) if "horizon" in frame.columns
               else np.full(R, L, np.int64))
    if shape == "depth" and k > 1:
        notes.append(f"depth policies on a k = {k} tree drafter: the chain is its top-1 path (branch_k = 1)")
        logq, rank = logq[:, :, :1], np.where(rank >= 1, 1, rank)
    if shape == "depth":
        n_max = L
        cap = np.minimum(horizon, L)
    else:
        cap = np.full(R, int(n_max), np.int64)
    arr = replay_arrays(logq, rank, int(n_max))
    curve = arr.curve()
    cens = arr.censored(int(n_max))
    if cens.any():
        notes.append(f"{int(cens.sum())} round(s) reach the end of the stream inside the largest shape; their "
                     "replayed accepted length is a lower bound there")
    codes, G = cluster_codes(frame)
    kf = frame[[c for c in ("task", "prompt_id") if c in frame.columns]].astype(str)
    keys = [None] * G
    for c, row in zip(codes, kf.itertuples(index=False)):
        keys[c] = tuple(row)
    def col(name):
        return frame[name].to_numpy(dtype=np.float64) if name in frame.columns else None
    stats = RootStats(entropy=frame[feature].to_numpy(dtype=np.float64), topk_logq=logq, horizon=cap.copy(),
                      margin=col("root_margin"), position=col("position"))
    tasks = frame["task"].astype(str).to_numpy() if "task" in frame.columns else np.full(R, "all", object)
    # a prompt's last round that accepted its whole horizon may have ended the output, where the
    # logger cuts the proposal (horizon = accepted): the live decoder saw a longer proposal there
    cut = np.zeros(R, bool)
    if "round" in frame.columns and "accepted" in frame.columns:
        last = frame.groupby(codes)["round"].transform("max").to_numpy() == frame["round"].to_numpy()
        cut = last & (frame["accepted"].to_numpy() >= horizon) & (horizon < L)
        if cut.any():
            notes.append(f"{int(cut.sum())} round(s) end their prompt's output with a proposal cut there (horizon = "
                         "accepted < the longest proposal; the live decoder saw the whole proposal)")
    return PolicyData(curve=curve, stats=stats, cap=cap, codes=codes, keys=tuple(keys), rank=rank, horizon=horizon,
                      shape=shape, drafter=drafter, n_max=int(n_max), point_mass=point_mass, tasks=tasks,
                      feature=feature, cut=cut, notes=tuple(notes))


# --------------------------------------------------------------------------- fitting

def prompt_folds(codes: np.ndarray, k: int, seed: int = 0):
    """Prompt-grouped K-fold: [(train round indices, test round indices)] with every prompt's rounds
    in one test fold (scikit-learn's GroupKFold on shuffled prompt labels)."""
    from sklearn.model_selection import GroupKFold

    G = int(codes.max(initial=-1)) + 1
    if G < 2:
        raise GlanceError(f"held-out evaluation needs at least 2 prompts (got {G})")
    if int(k) < 2:
        raise GlanceError(f"held-out evaluation needs at least 2 folds (got {k})")
    k = int(min(k, G))
    perm = np.random.default_rng(seed).permutation(G)
    return [(tr, te) for tr, te in GroupKFold(n_splits=k).split(np.zeros(codes.size), groups=perm[codes])]


def _chain_law(d: PolicyData) -> tuple[float, float, str]:
    a, known = chain_run(d.rank)
    h = np.minimum(d.horizon, d.rank.shape[1])
    cens = (a == known) & (known < h)
    law_in = pd.DataFrame({"task": d.tasks, "prompt_id": [str(c) for c in d.codes],
                           "root_entropy": d.stats.entropy, "accepted": np.minimum(a, h),
                           "horizon": np.where(cens, a, h)})
    live = law_in["horizon"].to_numpy() > 0
    try:
        lf = fit_law(law_in.loc[live], by=None, condition=None, cov="cr1")
        b0, b1 = lf.params()
    except (GlanceError, KeyError, ValueError) as exc:
        return np.nan, np.nan, f"no chain law ({exc})"
    return float(b0), float(b1), ""


def fit_family(name: str, d: PolicyData, target: float, max_size: int | None = None) -> tuple[Policy | None, str]:
    """Fit one built-in family on these (training) rounds so its mean shape meets ``target``:
    (policy, '') or (None, why not)."""
    ms = int(d.n_max if max_size is None else max_size)
    if name == "fixed":
        return FixedPolicy(shape=d.shape, size=int(round(target))), ""
    if name.startswith("keyed"):
        b0, b1, why = _chain_law(d)
        if why:
            return None, why
        if not b1 > 0:
            return None, f"the chain law's slope b1 = {b1:.3f} is not positive (the match does not fall with entropy)"
        if name == "keyed-depth":
            pol: ThresholdPolicy = KeyedDepthPolicy(b0=b0, b1=b1, max_size=ms)
        else:
            key = name.split("-", 1)[1]
            c0 = c1 = 0.0
            if key == "rescue":
                has, resc = rescue_events(d.stats.topk_logq, d.rank, d.horizon)
                c0, c1, how = fit_rescue(d.stats.entropy[has], resc[has])
                if not np.isfinite(c0):
                    return None, "no first miss to fit the rescue probability r(H)"
            pol = KeyedBudgetPolicy(key=key, b0=b0, b1=b1, c0=float(c0), c1=float(c1), max_size=ms)
    elif name.startswith("gated-"):
        if d.point_mass:
            return None, "a point-mass drafter (pld) has no confidence to gate on"
        pol = GatedDepthPolicy(mode=name.split("-", 1)[1], max_size=ms)
    else:
        raise GlanceError(f"unknown policy family {name!r}")
    v, c = pol.unit_blocks(d.stats)
    if d.cut is not None and (~d.cut).any():
        v, c = v[~d.cut], None if c is None else c[~d.cut]
    t = fit_threshold(v, target, counts=c)
    return replace(pol, threshold=t), ""


# --------------------------------------------------------------------------- results

@dataclass(frozen=True, eq=False)
class PolicyTable(Result):
    """Per policy family and evaluation mode: mean shape, tokens per round (accepted + 1), the
    fixed shape at equal mean shape and at equal modelled cost, gains/speedups with prompt-level
    bootstrap intervals, and ``evaluated_on`` (held-out or in-sample, computed from the folds)."""

    title: ClassVar[str] = "draft policies replayed from the logs: tokens per round and modelled speed"
    table: pd.DataFrame
    policies: dict = field(default_factory=dict)        # (family, evaluated_on) -> fitted policy (all rounds)
    cost: CostModel = field(default_factory=CostModel)
    note_lines: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines

    def heldout(self) -> pd.DataFrame:
        """The rows evaluated on held-out prompts only."""
        return self.table.loc[self.table["evaluated_on"] == "held-out"].copy()


def _fixed_grid(d: PolicyData, cost: CostModel):
    """Per round and fixed shape n = 0..n_max: realised shape, tokens, modelled ms: (R, n+1) each."""
    n = np.arange(d.n_max + 1)[None, :]
    s = np.minimum(n, d.cap[:, None])
    tok = np.take_along_axis(d.curve, s, axis=1).astype(np.float64) + 1.0
    return s.astype(np.float64), tok, cost.ms(s)


def interp_up(x, xp, fp):
    """Interpolate fp at x along non-decreasing xp (ties: the largest fp; beyond: the end)."""
    xp = np.asarray(xp, dtype=np.float64)
    fp = np.asarray(fp, dtype=np.float64)
    keep = np.r_[xp[1:] > xp[:-1], True]
    return float(np.interp(x, xp[keep], fp[keep]))


def _summaries(w, tok, s, ms, Fs, Ft, Fm, size=None):
    """Per weight vector: (tokens, mean shape, fixed tokens at equal shape, gain %, ms/token, speedup
    at equal cost, speedup over the best fixed shape). ``size``: the rounds each row of the arrays
    sums (rows that are per-prompt sums, :func:`_prompt_sums`); None: one round each."""
    sw = w.sum() if size is None else w @ size
    T, S = w @ tok / sw, w @ s / sw
    fs, ft, fm = w @ Fs / sw, w @ Ft / sw, w @ Fm / sw
    F_eq = interp_up(S, fs, ft)
    out = {"tokens": T, "mean_shape": S, "fixed_tokens": F_eq, "gain": 100.0 * (T / F_eq - 1.0)}
    if ms is not None:
        C = w @ ms / sw
        Fc = interp_up(C, fm, ft)
        best = np.nanmin(fm / ft)
        out.update(ms_per_token=C / T, fixed_ms_per_token=C / Fc, speedup=T / Fc, speedup_best_fixed=best / (C / T))
    return out


def score_policy(d: PolicyData, shapes: np.ndarray, cost: CostModel, *, n_boot: int = 200, level: float = 0.95,
                 seed: int = 0, grid=None, policy: bool = True, weights=None) -> dict:
    """Tokens per round and modelled speed of per-round ``shapes`` against the fixed shapes on
    the same rounds, with prompt-level bootstrap percentile intervals (each replicate sums the
    resampled prompts' per-prompt totals). ``grid``: :func:`_fixed_grid` of these rounds, when
    already computed; ``weights`` (with ``n_boot=0``): per-round multiplicities of the figures (0
    leaves a round out: a jackknife replicate scored on the rounds of ``d`` without a new grid)."""
    shapes = np.clip(np.asarray(shapes, dtype=np.int64), 0, d.cap)
    tok = d.accepted_at(shapes) + 1.0
    s = shapes.astype(np.float64)
    ms = cost.ms(s, policy=policy) if cost.identified else None
    Fs, Ft, Fm = grid if grid is not None else _fixed_grid(d, cost)
    if not cost.identified:
        Fm = None
    args = (tok, s, ms, Fs, Ft, Fm if Fm is not None else Fs)
    if weights is not None and n_boot > 0:
        raise ValueError("score_policy: weights are for point figures (n_boot=0)")
    point = _summaries(np.ones(d.rounds) if weights is None else np.asarray(weights, dtype=np.float64), *args)
    if ms is None:
        point = {k: v for k, v in point.items() if k in ("tokens", "mean_shape", "fixed_tokens", "gain")}
    G = int(d.codes.max(initial=-1)) + 1
    out = dict(point)
    if n_boot > 0 and G >= 2:
        rng = np.random.default_rng(seed)
        draws = {k: [] for k in point}
        size, sums = _prompt_sums(d.codes, G, args)
        for cnt in bootstrap_counts(G, n_boot, rng):
            for c in cnt:
                w = c.astype(np.float64)
                if w @ size <= 0:
                    continue
                r = _summaries(w, *sums, size=size)
                for k2 in point:
                    draws[k2].append(r[k2])
        for k2 in point:
            lo, hi = percentile_interval(np.asarray(draws[k2]), level)
            out[k2 + "_lo"], out[k2 + "_hi"] = float(lo), float(hi)
    else:
        for k2 in point:
            out[k2 + "_lo"] = out[k2 + "_hi"] = np.nan
    return out


def _prompt_sums(codes: np.ndarray, G: int, arrays) -> tuple[np.ndarray, list]:
    """(rounds per prompt (G,), each array's rows summed per prompt (G, ...); None stays None): a
    prompt-level bootstrap replicate's weighted sums are then its counts times these."""
    order = np.argsort(codes, kind="stable")
    size = np.bincount(codes, minlength=G).astype(np.float64)
    starts = np.r_[0, np.cumsum(size)[:-1]].astype(np.int64)
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        a = np.asarray(a, dtype=np.float64)[order]
        g = np.zeros((G,) + a.shape[1:])
        nz = size > 0
        g[nz] = np.add.reduceat(a, starts[nz], axis=0)
        out.append(g)
    return size, out


def families_for(d: PolicyData, families: Sequence[str] | None = None) -> list[str]:
    names = list(FAMILY_NAMES[d.shape] if families is None else families)
    for n in names:
        if n not in FAMILY_NAMES["budget"] + FAMILY_NAMES["depth"] + ("fixed",):
            raise GlanceError(f"unknown policy family {n!r}; choose from "
                              f"{', '.join(FAMILY_NAMES['budget'] + FAMILY_NAMES['depth'])}")
        if n in FAMILY_NAMES["budget"] and d.shape != "budget":
            raise GlanceError(f"family {n!r} shapes tree budgets; these rounds are evaluated as depths")
    return names


def fold_shapes(name: str, d: PolicyData, splits, target: float, cap: int) -> tuple[np.ndarray, list, str]:
    """Each round's shape from the family fitted on its split's training rounds: (shapes, the fold
    fits, '' or why the family could not be fitted)."""
    shapes = np.zeros(d.rounds, np.int64)
    used: list = []
    for tr, te in splits:
        pol, why = fit_family(name, d.take(tr), target, max_size=cap)
        if pol is None:
            return shapes, used, why
        used.append(pol)
        shapes[te] = apply_policy(pol, d.stats.take(te))
    return shapes, used, ""


def refit_interval(d: PolicyData, name: str, target: float, cap: int, splits, cost: CostModel, point: dict, *,
                   groups: int = 200, level: float = 0.95, seed: int = 0, notes: list | None = None,
                   grid=None) -> dict:
    """Held-out intervals that account for the fitting: a jackknife of the whole held-out procedure.
    The prompts are dealt at random into ``m = min(G, groups)`` groups (one prompt each when
    ``G <= groups``: the delete-one-prompt jackknife); each replicate leaves one group out, refits
    the family on every fold's remaining training prompts (each prompt keeps its fold of
    ``splits``) and scores it on the fold's remaining held-out prompts. The interval is
    ``point +- t(m-1) * sqrt((m-1)/m * sum_j (theta_j - mean theta)^2)`` (``point``: the figures on
    the data). A refit bootstrap covered a known gain less often (docs/policy.md, "Exporting only
    what the evidence supports"): ``{key_lo, key_hi}``. Replicates in which the family cannot be
    fitted on some fold are left out (noted)."""
    G = int(d.codes.max(initial=-1)) + 1
    group, m = jackknife_groups(G, groups, seed)
    fold = np.zeros(d.rounds, np.int64)
    for k, (_, te) in enumerate(splits):
        fold[te] = k
    grid = _fixed_grid(d, cost) if grid is None else grid
    draws: dict = {}
    failed = 0
    for j in range(m):
        keep = np.flatnonzero(group[d.codes] != j)
        dj, fk = d.take(keep), fold[keep]
        spl = [(np.flatnonzero(fk != k), np.flatnonzero(fk == k)) for k in range(len(splits))]
        shapes, _, why = fold_shapes(name, dj, [(tr, te) for tr, te in spl if te.size], target, cap)
        if why:
            failed += 1
            continue
        full = np.zeros(d.rounds, np.int64)            # scored on d's rounds, the left-out ones weighing 0
        full[keep] = shapes
        w = np.zeros(d.rounds)
        w[keep] = 1.0
        for k, v in score_policy(d, full, cost, n_boot=0, grid=grid, weights=w).items():
            if not k.endswith(("_lo", "_hi")):
                draws.setdefault(k, []).append(v)
    if failed and notes is not None:
        notes.append(f"{name}: {failed} of {m} jackknife replicates could not fit the family on some fold and are "
                     "left out of its held-out intervals")
    return jackknife_interval(point, draws, level)


def jackknife_groups(G: int, groups: int, seed: int) -> tuple[np.ndarray, int]:
    """(prompt -> group, m): the G prompts dealt at random into ``m = min(G, groups)`` groups whose
    sizes differ by at most one (one prompt each when ``G <= groups``)."""
    m = int(min(G, max(int(groups), 2)))
    return np.random.default_rng(seed + 7919).permutation(G) % max(m, 1), m


def jackknife_interval(point: dict, draws: dict, level: float) -> dict:
    """``{key_lo, key_hi}``: ``point[key] +- t(m-1) * sqrt((m-1)/m * sum_j (theta_j - mean theta)^2)``
    over each key's m finite leave-a-group-out replicates ``draws[key]`` (keys with fewer than two
    are left out)."""
    out = {}
    for k, v in draws.items():
        v = np.asarray(v, dtype=np.float64)
        v = v[np.isfinite(v)]
        if k not in point or v.size < 2:
            continue
        sd = float(np.sqrt((v.size - 1) / v.size * np.sum((v - v.mean()) ** 2)))
        half = t_crit(v.size, level) * sd
        out[k + "_lo"], out[k + "_hi"] = float(point[k] - half), float(point[k] + half)
    return out


def evaluated_on(splits, codes: np.ndarray) -> str:
    """'held-out' when, in every split, no scored round's prompt is among the training prompts
    and every round is scored once; else 'in-sample'. Computed from the splits actually used."""
    scored = np.zeros(codes.size, np.int64)
    for tr, te in splits:
        if np.intersect1d(np.unique(codes[tr]), np.unique(codes[te])).size:
            return "in-sample"
        scored[te] += 1
    return "held-out" if np.all(scored == 1) else "in-sample"


def evaluate_policies(rounds, target: float, *, drafter: str | None = None, shape: str | None = None,
                      families: Sequence[str] | None = None, folds: int = 5, in_sample: bool = True,
                      n_max: int = 255, n_boot: int = 200, level: float = 0.95, seed: int = 0,
                      node_ms: float | None = None, pass_ms: float | None = None,
                      constant_ms: float | None = None, policies: dict[str, Callable] | None = None,
                      data: PolicyData | None = None, feature: str = "auto", host_ms: float | None = None,
                      refit: bool = True, groups: int | None = None) -> PolicyTable:
    """Fit each family on training prompts (prompt-grouped ``folds``-fold), score it on the held-out
    prompts, and compare with the fixed shape ``target`` on the same rounds.

    ``target``: the mean shape (tree nodes per round, or draft depth) every fitted policy must
    meet on its training prompts. ``in_sample``: also add rows fitted and scored on every
    prompt (labelled ``in-sample``: never a held-out figure). ``policies``: extra user callables
    (name -> ``f(RootStats) -> ints``), scored as given (``evaluated_on`` = ``as given``).
    ``refit``: held-out intervals by :func:`refit_interval` (a jackknife that leaves out a prompt, or
    one of ``n_boot`` groups of prompts, at a time and refits the family on every fold: the interval
    covers the fitting too; ``groups`` caps its groups, default ``n_boot``); False holds the fits at their
    fold estimates (percentile bootstrap: faster, narrower, below nominal coverage).
    ``node_ms``/``pass_ms``/``constant_ms`` override the round-cost fit's terms; ``host_ms``: the
    policy's per-round host work when the logs hold no policy run to fit it from
    (:func:`glance_law.policy.cost.fit_cost`)."""
    if target <= 0:
        raise GlanceError("the target mean shape (--budget) must be positive")
    jk = int(n_boot if groups is None else groups)      # jackknife_groups takes at least 2
    d = data if data is not None else prepare(rounds, drafter=drafter, shape=shape, n_max=n_max, feature=feature)
    if target > d.n_max:
        raise GlanceError(f"the target shape {target:g} exceeds the largest replayed shape ({d.n_max})")
    notes = list(d.notes)
    if d.cut is not None and d.cut.any() and (~d.cut).sum() >= 2:
        # the live decoder sees the whole proposal where the log keeps a cut one: no shape a policy
        # would pick there can be read off the log, so those rounds are neither fitted nor scored
        notes.append(f"{int(d.cut.sum())} round(s) ending their prompt's output with a cut proposal are left out "
                     f"of the fits and the scores ({int((~d.cut).sum())} rounds remain)")
        d = d.take(np.flatnonzero(~d.cut))
    cost = cost_model(rounds, d.drafter, node_ms=node_ms, pass_ms=pass_ms, constant_ms=constant_ms, host_ms=host_ms,
                      notes=notes)
    names = families_for(d, families)
    grid = _fixed_grid(d, cost)
    splits = prompt_folds(d.codes, folds, seed)
    ev = evaluated_on(splits, d.codes)
    rows, fitted = [], {}
    base = {"drafter": d.drafter, "shape": d.shape, "feature": d.feature, "target_shape": float(target), "rounds": d.rounds,
            "prompts": int(d.codes.max() + 1)}
    fixed = FixedPolicy(shape=d.shape, size=int(round(target)))
    r = score_policy(d, apply_policy(fixed, d.stats), cost, n_boot=n_boot, level=level, seed=seed, grid=grid,
                     policy=False)
    rows.append({**base, "family": "fixed", "evaluated_on": "no fit", "params": fixed.describe(), **r})
    # a tree policy's per-round cap: 4x the target (at least 63, at most n_max) keeps the live
    # decoder's per-round work small (best-first listing and envelope of at most that many nodes)
    cap = d.n_max if d.shape == "depth" else int(min(d.n_max, max(63, 4 * int(np.ceil(target)))))
    if any(n.startswith("keyed-") and n != "keyed-depth" for n in names):
        # every fold fit, held-out score and refit replicate of a keyed budget family reads the same
        # per-round best-first orders (rows of these ones): enumerate the trees once
        d = replace(d, stats=d.stats.with_best_first(cap))
    for name in names:
        modes = [("held-out" if ev == "held-out" else "in-sample", splits)]
        if in_sample:
            modes.append(("in-sample", [(np.arange(d.rounds), np.arange(d.rounds))]))
        for label, spl in modes:
            shapes, used, why = fold_shapes(name, d, spl, target, cap)
            if why:
                notes.append(f"{name}: not evaluated ({why})")
                break
            mode = evaluated_on(spl, d.codes)
            r = score_policy(d, shapes, cost, n_boot=n_boot, level=level, seed=seed, grid=grid)
            if mode == "held-out" and refit and n_boot > 0:
                r.update(refit_interval(d, name, target, cap, spl, cost, r, groups=jk, level=level, seed=seed,
                                        notes=notes, grid=grid))
            desc = used[0].describe() if len(used) == 1 else f"{len(used)} fold fits, e.g. {used[0].describe()}"
            rows.append({**base, "family": name, "evaluated_on": mode, "params": desc, **r})
            if mode == "in-sample" and label == "in-sample":
                fitted[name] = used[0]
    for name, f in (policies or {}).items():
        r = score_policy(d, apply_policy(f, d.stats), cost, n_boot=n_boot, level=level, seed=seed, grid=grid)
        rows.append({**base, "family": name, "evaluated_on": "as given", "params": "user callable", **r})
    table = pd.DataFrame(rows)
    lead = ["drafter", "shape", "feature", "family", "evaluated_on", "target_shape", "mean_shape", "mean_shape_lo", "mean_shape_hi",
            "tokens", "tokens_lo", "tokens_hi", "fixed_tokens", "fixed_tokens_lo", "fixed_tokens_hi",
            "gain", "gain_lo", "gain_hi"]
    tail = [c for c in ("ms_per_token", "ms_per_token_lo", "ms_per_token_hi", "fixed_ms_per_token",
                        "fixed_ms_per_token_lo", "fixed_ms_per_token_hi", "speedup", "speedup_lo", "speedup_hi",
                        "speedup_best_fixed", "speedup_best_fixed_lo", "speedup_best_fixed_hi") if c in table.columns]
    table = table[[c for c in lead if c in table.columns] + tail + ["rounds", "prompts", "params"]]
    notes += [
        f"held-out: fitted on the training prompts of a {len(splits)}-fold prompt-grouped split (GroupKFold, seed "
        f"{seed}) and scored on the other prompts; in-sample rows are fitted and scored on every prompt (optimistic, "
        "never a held-out gain)",
        "tokens: committed tokens per round (accepted + 1) replayed at each round's shape; fixed_tokens: the fixed "
        "shape at the policy's mean shape (interpolated between integer shapes); gain: % over it",
        (f"intervals: {100 * level:g}%; held-out rows: estimate +- t(m-1) x the delete-a-group jackknife sd of the "
         f"whole held-out procedure (m = min(prompts, {jk}) random prompt groups, each left out in turn "
         "and the family refitted on every fold's remaining training prompts); other rows: percentile, prompt-level "
         f"bootstrap ({n_boot} replicates), the fits held at their estimates" if refit else
         f"intervals: {100 * level:g}% percentile, prompt-level bootstrap ({n_boot} replicates); the fits are held at "
         "their fold estimates (refit=False: they ignore the fitting's own variability)"),
    ]
    if cost.identified:
        notes.append(f"modelled ms/round = {cost.formula(first=False)} ({cost.source}); a policy round pays "
                     f"{float(cost.passes_at(0, True)):g} draft pass(es) "
                     f"whatever shape it picks and {cost.host_ms:.3f} ms of host work; speedup: vs the fixed shape at equal mean modelled cost; "
                     "speedup_best_fixed: vs the fixed shape with the lowest modelled ms/token (chosen on every "
                     "round: favours the baseline)")
    return PolicyTable(table=table, policies=fitted, cost=cost, note_lines=tuple(dict.fromkeys(notes)))
