"""Causal draft policies: what a decoder knows at a round's root -> the round's draft shape.

A policy sees a :class:`RootStats` (one row per round: the target's root entropy, optionally
the root's top-2 margin, the drafter's top-k log-probabilities of the proposal, the round's
position in the stream, the proposal's horizon) and returns one integer per round: the tree
node budget (``shape = "budget"``, tree drafters) or the draft depth (``shape = "depth"``,
chain drafters). Nothing a policy reads is known only after verification, so a live decoder
can follow it round by round (:mod:`glance_log.decode`).

Built in (every policy is a frozen dataclass, JSON-serialisable with :func:`policy_to_dict`
/ :func:`policy_from_dict`):

* :class:`FixedPolicy` - the same shape every round;
* :class:`KeyedBudgetPolicy` - the paper's key (``key="paper"``, rescue r = p(H)) or the
  rescue-corrected key (``key="rescue"``, the fitted r(H)) with a *shadow price*: the round's
  predicted marginal gains (slopes of the concave envelope of its cumulated law-indexed node
  masses, :func:`glance_law.width.node_masses`) are compared with the price and the round
  takes every node whose predicted gain clears it. This is the round-by-round form of the
  global best-first allocation (docs/policy.md);
* :class:`KeyedDepthPolicy` - the same for a chain: offset j's predicted gain is the chain's
  survival p(H)^j, the round drafts every offset with p(H)^j >= price;
* :class:`GatedDepthPolicy` - AdaEDL-style early stop on the drafter's own confidence: draft
  while the cumulative top-1 probability stays above a threshold (``mode="cumprob"``) or while
  the drafter's (top-k lower-bound) entropy at every offset so far stays below it
  (``mode="entropy"``).

Every built-in policy is a *threshold policy*: it scores the units of a round (nodes in
best-first order, or offsets) with values that do not increase along the round
(:meth:`unit_values`) and takes the units whose value is at least ``threshold``. Fitting the
threshold so that the mean shape meets a target is then one order statistic
(:func:`fit_threshold`). A user's own policy is any callable ``f(stats) -> ints`` with the
same signature.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import ClassVar

import numpy as np
from scipy import special

from ..errors import GlanceError
from ..law import match_prob
from ..replay.allocate import Segments, hull_segments
from ..replay.tree import best_first, best_first_one
from ..replay.width import masses_from_terms, node_path_terms
from ..scrub import scrub_doc

__all__ = ["RootStats", "Policy", "FixedPolicy", "KeyedBudgetPolicy", "KeyedDepthPolicy", "GatedDepthPolicy",
           "AcceptKeyedDepthPolicy", "HeuristicDepthPolicy", "ACCEPT_CONTEXTS", "accept_context", "ThresholdPolicy", "fit_threshold", "policy_to_dict", "policy_from_dict", "load_policy", "save_policy",
           "apply_policy", "FAMILIES", "SHAPES"]

SHAPES = ("budget", "depth")


@dataclass(frozen=True, eq=False)
class RootStats:
    """What a decoder knows at the roots of R rounds (R = 1 live).

    ``entropy`` (R,) the target's root entropy (nats); ``topk_logq`` (R, L, k) the drafter's
    top-k log-probabilities per offset (rows sorted descending, -inf = not proposed) or None;
    ``horizon`` (R,) offsets the drafter proposed (None: L); ``margin`` (R,) the root's top-2
    logit margin or None; ``position`` (R,) the root's index in the generated stream or None;
    ``prev_accepted`` / ``prev_shape`` (R,) the stream's previous round's accepted count and
    shape (-1 at a stream's first round) or None. ``entropy`` may be all NaN for logs without
    it (Spec-Bench answers): policies keyed on the acceptance history do not read it."""

    entropy: np.ndarray
    topk_logq: np.ndarray | None = None
    horizon: np.ndarray | None = None
    margin: np.ndarray | None = None
    position: np.ndarray | None = None
    prev_accepted: np.ndarray | None = None
    prev_shape: np.ndarray | None = None
    # (n, depths, codes, n_top, log_rest): every round's first n best-first nodes of its capped top-k
    # and their path terms (:func:`glance_law.replay.width.node_path_terms`), computed once
    # (:meth:`with_best_first`) and gathered by :meth:`take`, so a refit on resampled rounds reuses them
    best_first_order: tuple | None = None

    @property
    def rounds(self) -> int:
        return int(np.shape(self.entropy)[0])

    def caps(self) -> np.ndarray | None:
        """Offsets proposed per round (R,), or None when unknown."""
        if self.horizon is not None:
            return np.asarray(self.horizon, dtype=np.int64)
        if self.topk_logq is not None:
            return np.full(self.rounds, np.shape(self.topk_logq)[1], np.int64)
        return None

    def take(self, idx) -> RootStats:
        sel = {f.name: (None if getattr(self, f.name) is None else np.asarray(getattr(self, f.name))[idx])
               for f in fields(self) if f.name != "best_first_order"}
        order = self.best_first_order
        if order is not None:
            order = (order[0], *(a[idx] for a in order[1:]))
        return RootStats(**sel, best_first_order=order)

    def capped_logq(self) -> np.ndarray:
        """``topk_logq`` with the offsets past each round's cap set to -inf."""
        logq = np.asarray(self.topk_logq, dtype=np.float64)
        cap = self.caps()
        if cap is not None and logq.shape[1]:
            j = np.arange(logq.shape[1])[None, :, None]
            logq = np.where(j < cap[:, None, None], logq, -np.inf)
        return logq

    def with_best_first(self, n: int) -> RootStats:
        """These rounds with their first ``n`` best-first nodes computed once (``best_first_order``):
        the keyed budget policies read them (and the nodes' path terms) instead of enumerating the
        trees again."""
        if self.topk_logq is None or self.rounds <= _FEW_ROUNDS:
            return self
        logq = self.capped_logq()
        _, dep, cod = best_first(logq, int(n))
        return replace(self, best_first_order=(int(n), dep, cod, *node_path_terms(logq, dep, cod)))


@dataclass(frozen=True, eq=False)
class Policy:
    """Base class: ``policy(stats) -> (R,) int64`` shapes."""

    family: ClassVar[str] = "policy"
    shape: str = "budget"

    def __call__(self, stats: RootStats) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        kv = {k: v for k, v in asdict(self).items() if k not in ("shape", "fit")}
        return ", ".join(f"{k}={_fmt(v)}" for k, v in kv.items())


def _fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True, eq=False)
class FixedPolicy(Policy):
    """The same shape every round (capped at the offsets proposed for a depth)."""

    family: ClassVar[str] = "fixed"
    size: int = 15

    def __call__(self, stats: RootStats) -> np.ndarray:
        n = np.full(stats.rounds, int(self.size), np.int64)
        cap = stats.caps()
        if self.shape == "depth" and cap is not None:
            n = np.minimum(n, cap)
        return n


@dataclass(frozen=True, eq=False)
class ThresholdPolicy(Policy):
    """A round takes every unit whose value (:meth:`unit_values`, non-increasing along the
    round) is at least ``threshold``; at most ``max_size`` units."""

    threshold: float = 0.0
    max_size: int = 255

    def unit_values(self, stats: RootStats) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def unit_blocks(self, stats: RootStats) -> tuple[np.ndarray, np.ndarray | None]:
        """``(values, counts)``: the unit values as blocks, entry (r, j) standing for ``counts[r, j]``
        units of round r worth ``values[r, j]`` (None: one unit each, ``values`` = :meth:`unit_values`);
        :func:`fit_threshold` takes either form."""
        return self.unit_values(stats), None

    def __call__(self, stats: RootStats) -> np.ndarray:
        v = self.unit_values(stats)
        with np.errstate(invalid="ignore"):
            return (v >= self.threshold).sum(axis=1).astype(np.int64)


def _need_topk(stats: RootStats, who: str) -> np.ndarray:
    if stats.topk_logq is None:
        raise GlanceError(f"the {who} policy needs the drafter's top-k log-probabilities (topk_logq); "
                          "record them with glance-log (logged by default)")
    return np.asarray(stats.topk_logq, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class KeyedBudgetPolicy(ThresholdPolicy):
    """The paper's (``key="paper"``) or the rescue-corrected (``key="rescue"``) entropy key with a
    shadow price ``threshold`` (tokens per node): the round's predicted curve is the cumulated
    law-indexed mass of its first n best-first nodes, n <= ``max_size``, made concave; the
    round takes every envelope segment whose slope clears the price. ``b0, b1``: the chain law
    logit p = b0 - b1 H; ``c0, c1``: logit r = c0 - c1 H (``paper`` ignores them: r = p)."""

    family: ClassVar[str] = "keyed"
    key: str = "rescue"
    b0: float = 0.0
    b1: float = 0.0
    c0: float = 0.0
    c1: float = 0.0

    def unit_values(self, stats: RootStats) -> np.ndarray:
        n = int(self.max_size)
        if stats.rounds <= _FEW_ROUNDS:              # live decoding: one round, vertex by vertex
            cum, dep = self._curves(stats)
            return np.stack([_envelope_units(c, int((d > 0).sum()), n) for c, d in zip(cum, dep)])
        seg = self.segments(stats)
        return _unit_slopes(seg.x0, seg.length, seg.slope, n)

    def unit_blocks(self, stats: RootStats) -> tuple[np.ndarray, np.ndarray | None]:
        """The envelope's segments: (slope, length) per round (the units of a segment share its slope)."""
        if stats.rounds <= _FEW_ROUNDS:
            return self.unit_values(stats), None
        seg = self.segments(stats)
        return seg.slope, seg.length

    def __call__(self, stats: RootStats) -> np.ndarray:
        if stats.rounds <= _FEW_ROUNDS or not self.threshold > -np.inf:
            return super().__call__(stats)
        seg = self.segments(stats)                   # the units of the segments worth the price
        with np.errstate(invalid="ignore"):
            return np.where(seg.slope >= self.threshold, seg.length, 0).sum(axis=1).astype(np.int64)

    def segments(self, stats: RootStats) -> Segments:
        """Each round's envelope segments (:func:`glance_law.replay.allocate.hull_segments`) of its
        predicted curve: the slopes are the unit values."""
        cum, dep = self._curves(stats)
        X = np.where(dep > 0, np.arange(1, int(self.max_size) + 1, dtype=np.float64)[None, :], np.inf)
        return hull_segments(X, cum)

    def _curves(self, stats: RootStats) -> tuple[np.ndarray, np.ndarray]:
        """The predicted curves (cumulated node masses of the first ``max_size`` best-first nodes)
        and the nodes' depths (0: no node), (R, max_size) each."""
        if self.key not in ("paper", "rescue"):
            raise GlanceError(f"keyed policy: key must be 'paper' or 'rescue' (got {self.key!r})")
        _need_topk(stats, "keyed")
        H = np.asarray(stats.entropy, dtype=np.float64)
        p = match_prob(H, self.b0, self.b1)
        r = p if self.key == "paper" else special.expit(self.c0 - self.c1 * H)
        n = int(self.max_size)
        order = stats.best_first_order
        if order is not None and order[0] == n and stats.rounds > _FEW_ROUNDS:   # computed once (with_best_first)
            dep, terms = order[1], order[3:]
        else:
            logq = stats.capped_logq()
            if stats.rounds <= _FEW_ROUNDS:             # live decoding: one round (a heap, equal by test)
                one = [best_first_one(lq, n) for lq in logq]
                dep, cod = np.stack([o[1] for o in one]), np.stack([o[2] for o in one])
            else:
                _, dep, cod = best_first(logq, n)
            terms = node_path_terms(logq, dep, cod)
        return np.cumsum(masses_from_terms(dep, *terms, p, r), axis=1), dep


_FEW_ROUNDS = 4


def _envelope_units(cum: np.ndarray, m: int, n: int) -> np.ndarray:
    """One round's envelope slopes per unit (n,), -inf beyond the last positive segment: from each
    vertex, the next is the point of largest slope (the farthest on ties), as
    :func:`glance_law.allocate.hull_segments` builds it for many rounds at once (equal by test)."""
    out = np.full(n, -np.inf)
    x0, y0 = 0, 0.0
    xs = np.arange(1, m + 1, dtype=np.float64)
    while x0 < m:
        sl = (cum[x0:m] - y0) / (xs[x0:] - x0)
        best = sl.max()
        if not best > 0:
            break
        j = x0 + int(np.flatnonzero(sl >= best * (1 - 1e-12))[-1]) + 1
        out[x0:j] = best
        x0, y0 = j, float(cum[j - 1])
    return out


def _unit_slopes(x0, length, slope, n):
    """(R, n): the slope of the envelope segment holding each unit, -inf beyond the last (the
    segments of a row are contiguous: each unit is written once, by index)."""
    R = x0.shape[0]
    out = np.full((R, n), -np.inf)
    x0 = np.asarray(x0, dtype=np.int64)
    ln = np.clip(np.minimum(x0 + np.asarray(length, dtype=np.int64), n) - np.maximum(x0, 0), 0, None).ravel()
    if not ln.any():
        return out
    first = np.cumsum(ln) - ln
    units = np.repeat(np.maximum(x0, 0).ravel() - first, ln) + np.arange(int(ln.sum()))
    rows = np.repeat(np.repeat(np.arange(R), x0.shape[1]), ln)
    out[rows, units] = np.repeat(np.asarray(slope, dtype=np.float64).ravel(), ln)
    return out


@dataclass(frozen=True, eq=False)
class KeyedDepthPolicy(ThresholdPolicy):
    """Chain form of the keyed policy: offset j is worth the chain's predicted survival
    p(H)^j (p from the law logit b0 - b1 H); the round drafts every offset worth at least
    the price ``threshold``, up to the offsets proposed and ``max_size``."""

    family: ClassVar[str] = "keyed-depth"
    shape: str = "depth"
    b0: float = 0.0
    b1: float = 0.0

    def unit_values(self, stats: RootStats) -> np.ndarray:
        H = np.asarray(stats.entropy, dtype=np.float64)
        n = int(self.max_size)
        cap = stats.caps()
        if cap is not None:
            n = min(n, int(cap.max(initial=0)))
        lp = np.log(np.maximum(match_prob(H, self.b0, self.b1), 1e-300))
        j = np.arange(1, n + 1, dtype=np.float64)[None, :]
        v = np.exp(lp[:, None] * j)
        if cap is not None:
            v = np.where(j <= cap[:, None], v, -np.inf)
        return v


@dataclass(frozen=True, eq=False)
class GatedDepthPolicy(ThresholdPolicy):
    """AdaEDL-style early stop on the drafter's confidence. ``mode="cumprob"``: offset j's value
    is the drafter's cumulative top-1 probability prod_{i<=j} q_i(top-1); ``mode="entropy"``:
    minus the largest drafter entropy over offsets 1..j (the entropy of the logged top-k with
    the remaining mass as one outcome: a lower bound of the full entropy). The round drafts
    while the value is at least ``threshold`` (for entropy: while every entropy so far is at most
    ``-threshold``)."""

    family: ClassVar[str] = "gated"
    shape: str = "depth"
    mode: str = "cumprob"

    def unit_values(self, stats: RootStats) -> np.ndarray:
        logq = _need_topk(stats, "gated")
        R, L, _ = logq.shape
        n = min(int(self.max_size), L)
        lq = logq[:, :n, :]
        cap = stats.caps()
        if self.mode == "cumprob":
            top = np.where(np.isfinite(lq[:, :, 0]), lq[:, :, 0], -np.inf)
            v = np.exp(np.cumsum(top, axis=1))
        elif self.mode == "entropy":
            with np.errstate(divide="ignore", invalid="ignore"):
                q = np.where(np.isfinite(lq), np.exp(lq), 0.0)
                h = -np.where(q > 0, q * np.where(np.isfinite(lq), lq, 0.0), 0.0).sum(axis=2)
                rest = np.clip(1.0 - q.sum(axis=2), 0.0, 1.0)
                h = h - np.where(rest > 0, rest * np.log(np.where(rest > 0, rest, 1.0)), 0.0)
            h = np.where(np.isfinite(lq[:, :, 0]), h, np.inf)
            v = -np.maximum.accumulate(h, axis=1)
        else:
            raise GlanceError(f"gated policy: mode must be 'cumprob' or 'entropy' (got {self.mode!r})")
        if cap is not None:
            v = np.where(np.arange(1, n + 1)[None, :] <= cap[:, None], v, -np.inf)
        return v


#: acceptance-history contexts of :class:`AcceptKeyedDepthPolicy` (index = context)
ACCEPT_CONTEXTS = ("first round", "none accepted", "under half accepted", "half or more accepted",
                   "whole draft accepted")


def accept_context(prev_accepted, prev_shape) -> np.ndarray:
    """Context 0..4 of :data:`ACCEPT_CONTEXTS` from the previous round's accepted count and
    shape (-1 or 0 shape: no previous draft, context 0)."""
    a = np.asarray(prev_accepted, dtype=np.float64)
    d = np.asarray(prev_shape, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(d > 0, a / np.where(d > 0, d, 1.0), np.nan)
    c = np.select([~(d > 0), rate <= 0, rate < 0.5, rate < 1], [0, 1, 2, 3], default=4)
    return c.astype(np.int64)


def _need_history(stats: RootStats, who: str) -> tuple[np.ndarray, np.ndarray]:
    if stats.prev_accepted is None or stats.prev_shape is None:
        raise GlanceError(f"the {who} policy needs the previous round's accepted count and shape "
                          "(RootStats.prev_accepted / prev_shape)")
    return np.asarray(stats.prev_accepted), np.asarray(stats.prev_shape)


@dataclass(frozen=True, eq=False)
class AcceptKeyedDepthPolicy(ThresholdPolicy):
    """Depth keyed on the acceptance history (the dynamic-K rules engines ask for): the
    previous round's acceptance rate picks a context (:data:`ACCEPT_CONTEXTS`), offset j is worth
    the fitted P(run >= j | context) (``survival``: one row per context, Kaplan-Meier from the
    logged runs), and the round drafts every offset worth at least the price ``threshold``: the
    shadow-price form of a chain's shared draft budget, needing only accepted counts. A round
    with no previous draft to learn from (context 0) drafts at least ``explore`` offsets: with 0
    there, a stream that once stops drafting would never draft again."""

    family: ClassVar[str] = "keyed-accept"
    shape: str = "depth"
    survival: tuple = ()
    explore: int = 1

    def unit_values(self, stats: RootStats) -> np.ndarray:
        a, d = _need_history(stats, "keyed-accept")
        S = np.asarray(self.survival, dtype=np.float64)
        if S.ndim != 2 or S.shape[0] != len(ACCEPT_CONTEXTS):
            raise GlanceError(f"keyed-accept policy: survival must have {len(ACCEPT_CONTEXTS)} rows (one per context)")
        n = min(int(self.max_size), S.shape[1])
        ctx = accept_context(a, d)
        v = S[ctx, :n].copy()
        e = min(int(self.explore), n)
        if e > 0:
            v[:, :e] = np.where((ctx == 0)[:, None], np.inf, v[:, :e])       # always above the price
        cap = stats.caps()
        if cap is not None:
            v = np.where(np.arange(1, n + 1)[None, :] <= cap[:, None], v, -np.inf)
        return np.where(np.isnan(v), -np.inf, v)

    def depths(self) -> np.ndarray:
        """The depth drafted in each context (uncapped by the proposal)."""
        S = np.asarray(self.survival, dtype=np.float64)[:, :int(self.max_size)]
        with np.errstate(invalid="ignore"):
            out = (S >= self.threshold).sum(axis=1).astype(np.int64)
        out[0] = max(out[0], min(int(self.explore), S.shape[1]))
        return out

    def describe(self) -> str:
        ctx = ("first", "none", "<half", ">=half", "all")
        by = ", ".join(f"{c} {d}" for c, d in zip(ctx, self.depths().tolist()))
        return f"price={_fmt(float(self.threshold))}; depth after {by}"


@dataclass(frozen=True, eq=False)
class HeuristicDepthPolicy(Policy):
    """Hugging Face assisted generation's schedule (``num_assistant_tokens_schedule="heuristic"``):
    ``start`` at a stream's first round, then the previous depth + ``up`` after a round that
    accepted its whole draft, else the previous depth - ``down`` (at least ``floor``), at most
    ``max_size``. (HF keeps growing its counter past a cap; here the capped depth is the state.)"""

    family: ClassVar[str] = "hf-heuristic"
    shape: str = "depth"
    start: int = 5
    up: int = 2
    down: int = 1
    floor: int = 1
    max_size: int = 255

    def __call__(self, stats: RootStats) -> np.ndarray:
        a, d = _need_history(stats, "hf-heuristic")
        a, d = a.astype(np.int64), d.astype(np.int64)
        nxt = np.where(a >= d, d + int(self.up), np.maximum(int(self.floor), d - int(self.down)))
        out = np.where(d < 0, int(self.start), nxt)
        return np.clip(out, 0, int(self.max_size)).astype(np.int64)


FAMILIES: dict[str, type[Policy]] = {c.family: c for c in (FixedPolicy, KeyedBudgetPolicy, KeyedDepthPolicy,
                                                            GatedDepthPolicy, AcceptKeyedDepthPolicy,
                                                            HeuristicDepthPolicy)}


def fit_threshold(values: np.ndarray, target: float, weights=None, counts=None) -> float:
    """The threshold at which a threshold policy's mean shape over these rounds is closest to
    ``target`` without exceeding it: the largest t with mean #{u : v_u >= t} <= target.

    ``values`` (R, U) from :meth:`ThresholdPolicy.unit_values`; ``weights`` per-round
    multiplicities; ``counts`` (R, U): the units each value stands for (the blocks of
    :meth:`ThresholdPolicy.unit_blocks`; None: one, as from ``unit_values``). This is the
    shadow price of the shared budget R * target: the global
    best-first allocation takes the R * target best units, i.e. every unit worth at least the
    value of the last one taken (ties at the price are all taken or all left)."""
    v = np.asarray(values, dtype=np.float64)
    R = v.shape[0]
    w = np.ones(R) if weights is None else np.asarray(weights, dtype=np.float64)
    flat = v.reshape(-1)
    ww = np.repeat(w, v.shape[1])
    if counts is not None:
        ww = ww * np.asarray(counts, dtype=np.float64).reshape(-1)
    ok = np.isfinite(flat)
    flat, ww = flat[ok], ww[ok]
    if flat.size == 0:
        return float("inf")
    # the order inside a block of equal values only changes how its weights are summed, which is
    # exact for whole multiplicities: the faster unstable sort then gives the same threshold
    whole = bool(np.all(ww == np.round(ww)))
    o = np.argsort(-flat, kind="quicksort" if whole else "stable")
    fv, cw = flat[o], np.cumsum(ww[o])
    B = float(target) * w.sum()
    # units are taken in blocks of equal value: the last block whose cumulative weight fits B
    last = np.r_[fv[1:] != fv[:-1], True]
    fits = last & (cw <= B * (1 + 1e-12) + 1e-9)
    if not fits.any():
        return float(np.nextafter(fv[0], np.inf))       # even the best unit does not fit: take none
    i = int(np.flatnonzero(fits).max())
    return float(fv[i])


def apply_policy(policy: Callable, stats: RootStats) -> np.ndarray:
    """Run a built-in or user policy; checks the answer (one non-negative int per round)."""
    out = np.asarray(policy(stats))
    if out.shape != (stats.rounds,):
        raise GlanceError(f"a policy must return one shape per round: got shape {out.shape} for {stats.rounds} "
                          "round(s)")
    if out.size and (not np.all(np.isfinite(out)) or np.any(out < 0)):
        raise GlanceError("a policy returned a negative or non-finite shape; shapes are node budgets or depths >= 0")
    return np.floor(out).astype(np.int64)


# --------------------------------------------------------------------------- JSON

def policy_to_dict(policy: Policy, fit: dict | None = None) -> dict:
    """``{"family", "params", "fit"}``: the policy and (optionally) where it came from."""
    if not isinstance(policy, Policy):
        raise GlanceError("only built-in policies serialise to JSON; a callable policy stays in Python")
    # the fit names the logs it came from: no secret of a location is stored
    return {"format": "glance-policy/1", "family": policy.family, "params": asdict(policy),
            "fit": scrub_doc(dict(fit or {}))}


#: The largest node budget or draft depth a policy may ask for (``size``, ``max_size``, ``start``, ...),
#: checked when the policy is read, before anything loads.
MAX_POLICY_SIZE = 4096
#: Allowed values of a policy's string parameters.
_CHOICES = {"shape": SHAPES, "key": ("paper", "rescue"), "mode": ("cumprob", "entropy")}


def _check_param(fam: str, name: str, v, default):
    """One parameter of a policy read from JSON: the type of its default and a bounded value."""
    where = f"policy JSON: {fam} parameter {name!r}"
    shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
    if name in _CHOICES:
        if v not in _CHOICES[name]:
            raise GlanceError(f"{where} must be one of {', '.join(_CHOICES[name])} (got {shown})")
        return v
    if isinstance(default, bool) or isinstance(v, bool):
        raise GlanceError(f"{where}: unexpected {shown}")
    if isinstance(default, int):
        v = int(v) if isinstance(v, float) and v.is_integer() else v
        if not isinstance(v, int) or not 0 <= v <= MAX_POLICY_SIZE:
            raise GlanceError(f"{where} must be an integer in 0..{MAX_POLICY_SIZE} (got {shown})")
        return v
    if isinstance(default, float):
        ok = isinstance(v, (int, float)) and not np.isnan(v) and (name == "threshold" or np.isfinite(v))
        if not ok:
            raise GlanceError(f"{where} must be a finite number (got {shown})")
        return float(v)
    if name == "survival":
        return _check_survival(where, v)
    raise GlanceError(f"{where}: unexpected {shown}")     # pragma: no cover - every field is listed above


def _check_survival(where: str, v) -> tuple:
    rows = v if isinstance(v, list) else None
    if rows is None or len(rows) != len(ACCEPT_CONTEXTS) or not all(isinstance(r, list) for r in rows) \
            or len({len(r) for r in rows}) != 1 or len(rows[0]) > MAX_POLICY_SIZE:
        raise GlanceError(f"{where} must be {len(ACCEPT_CONTEXTS)} equal rows (one per context) of at most "
                          f"{MAX_POLICY_SIZE} probabilities")
    for r in rows:
        for x in r:
            if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not (x != x or 0 <= x <= 1)):
                raise GlanceError(f"{where} holds {x!r}: survival probabilities lie in 0..1 (null: unknown)")
    return tuple(tuple(np.nan if x is None else float(x) for x in r) for r in rows)


def policy_from_dict(d: dict) -> Policy:
    """The policy a :func:`policy_to_dict` document describes; every parameter is checked (type,
    range, sizes at most :data:`MAX_POLICY_SIZE`) here, before any model or log loads."""
    fam = d.get("family") if isinstance(d, dict) else None
    if not isinstance(fam, str) or fam not in FAMILIES:
        raise GlanceError(f"policy JSON: unknown family {fam!r}; expected one of {', '.join(FAMILIES)}")
    cls = FAMILIES[fam]
    params = d.get("params") or {}
    if not isinstance(params, dict):
        raise GlanceError(f"policy JSON: params must be an object (got {type(params).__name__})")
    defaults = {f.name: f.default for f in fields(cls)}
    bad = sorted(set(params) - set(defaults))
    if bad:
        raise GlanceError(f"policy JSON: family {fam!r} has no parameter(s) {', '.join(map(str, bad))}")
    pol = cls(**{k: _check_param(fam, k, v, defaults[k]) for k, v in params.items()})
    return replace(pol)


def save_policy(policy: Policy, path, fit: dict | None = None) -> None:
    from pathlib import Path
    Path(path).write_text(json.dumps(policy_to_dict(policy, fit), indent=2, sort_keys=True, default=_json_default)
                          + "\n")


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o).__name__)


def load_policy(path) -> tuple[Policy, dict]:
    """(policy, its fit record) from a JSON file written by :func:`save_policy`."""
    from pathlib import Path

    from ..data.inputs import read_json_document
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise GlanceError(f"{p}: no such policy file")
    d = read_json_document(p, "policy JSON file")       # regular file, size, depth bounded
    try:
        return policy_from_dict(d), dict(d.get("fit") or {})
    except GlanceError as exc:
        raise GlanceError(f"{p}: {exc}") from None
    except TypeError as exc:
        raise GlanceError(f"{p}: bad policy parameters ({exc})") from None
