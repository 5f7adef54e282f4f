"""The measured round-cost model of a draft policy (docs/policy.md, "The cost model").

A round's wall time is modelled from its shape:

    round_ms = constant + tree_ms x [nodes > 0] + pass_ms x draft passes + node_ms x verified nodes
               (+ host_ms for a policy round) (+ first_ms for a turn's first round)

fitted by OLS over one drafter's live rounds (``round_ms``, ``draft_passes``, ``budget`` = the
tree's nodes), with prompt-clustered CR1 covariance (Student t, G - 1 degrees of freedom):
rounds of one prompt share its context length and cache state, so they are not independent.

Two things separate a policy's round from a fixed shape's (the live decoder, glance_log.decode):

* **the draft passes it pays**: the drafter proposes in full before the policy looks at its
  probabilities, so a policy round pays the logged proposal's passes (``policy_passes``)
  whatever shape it then picks - a round the policy shapes to 0 still paid them. A fixed
  shape s pays ``passes(s)`` (s passes for a chain drafted one pass per offset, else the
  logged constant, 0 at shape 0: no drafting at all);
* **the policy's host work** (``host_ms``): reading the root's statistics and choosing the
  shape. It is fitted as a term when the logs hold rounds of runs with and without a policy
  (their run metadata tells), else taken from the caller (``benchmarks/bench_policy_host.py``
  measures it) or assumed 0 (noted).

**One term per shape** where the logs allow it (``per_shape``; by default when 3 to
:data:`MAX_SHAPE_TERMS` shapes are logged, each in at least :data:`MIN_SHAPE_ROUNDS` rounds, and
the drafter's passes do not track the shape): the constant, node and tree terms are replaced by
the mean cost of a round at each logged shape (linear between them, the least-squares slope
beyond). A verify pass need not cost linearly in its rows: on Gemma 3 270M on one CPU thread
(262,144-row LM head) a root-only round and rounds verifying 1 or 2 drafted tokens cost about the
same and a third token about 100 ms more, and a line through them prices a depth policy's mix of
shapes wrongly - and the policy's host work, identified against the fixed shape's rounds, takes
up the misfit (84 ms where a direct A/B measures 6: docs/policy.md section 5).

A turn's first round (``round`` 0) gets its own term, ``first_ms``: a model drafter prefills its
own cache there (an early-exit drafter logs a fourth pass, a two-model drafter its prompt), and
that cost grows with the prompt, not with the passes. Without the term the pass cost is
identified by first rounds alone where every other round drafts the same passes, and prices the
prefill as passes (docs/policy.md section 5, early exit on Gemma 3 270M).

:func:`fit_cost` returns a frozen :class:`CostFit` (coefficients with intervals, predicted ms
per round at each shape and ms per token at the logged shapes, both with intervals) whose
``model`` is the point :class:`CostModel` the policy evaluation uses; :func:`cost_model` is the
evaluation's entry (terms overridable). ``CostModel.to_dict`` is what an exported policy
records.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import ClassVar

import numpy as np
import pandas as pd

from ..data.arms import label_targets
from ..errors import GlanceError, MissingColumnError
from ..results import Result
from ..stats.cluster import (
    bootstrap_counts,
    cluster_codes,
    cr1_covariance,
    percentile_interval,
    studentize_factor,
    t_crit,
)

__all__ = ["CostModel", "CostFit", "fit_cost", "cost_draws", "cost_model", "policy_runs", "COST_TERMS"]

#: regression terms: (name in the result, column of the round log), tried in this order (a term collinear
#: with those before it is dropped: the first round's term comes before the passes, which for a
#: drafter that drafts the same passes every round but the first vary with it alone)
COST_TERMS = (("constant_ms", None), ("first_round_ms", "round"), ("ms_per_draft_pass", "draft_passes"),
              ("ms_per_tree_node", "budget"), ("tree_round_ms", "drafted"), ("policy_host_ms", "policy"))


#: most shapes that get one term each (``per_shape`` auto); more (a tree policy's budgets): the line
MAX_SHAPE_TERMS = 12
#: fewest rounds at every logged shape for one term each (``per_shape`` auto)
MIN_SHAPE_ROUNDS = 3


@dataclass(frozen=True)
class CostModel:
    """Modelled ms of a round of shape s.

    Fixed shape: ``constant + tree_ms * [s > 0] + pass_ms * passes(s) + node_ms * s`` (``tree_ms``:
    what verifying a tree at all costs over a root-only round - the mask, the walk; ``first_ms``: what a turn's first
    round costs over the others, paid once a turn by every arm, not in :meth:`ms`) with ``passes(s) = s`` for a
    chain drafted one pass per offset (``passes_per_node``), else ``passes`` for s > 0 and 0 at
    s = 0 (no draft). Policy round (``ms(s, policy=True)``): the same plus the passes of the
    proposal drafted in full, ``pass_ms * policy_passes``, instead of ``passes(s)``, and ``host_ms`` - the proposal is drafted in full before the policy
    picks s (``policy_passes`` None: the fixed shape's passes). ``node_ms`` NaN: not identified.
    ``shape_ms``: ((shape, ms), ...) the fitted cost of a round at each logged shape (one term each:
    it replaces ``constant + tree_ms * [s > 0] + node_ms * s``; linear between logged shapes, with
    slope ``node_ms`` beyond them; the drafter's passes are in each shape's cost).
    ``intervals``: ((term, lo, hi), ...) of the fitted terms; ``assumptions``: what the model
    takes for granted (recorded with an exported policy)."""

    constant: float = np.nan
    pass_ms: float = 0.0
    node_ms: float = np.nan
    passes_per_node: bool = False
    passes: float = 1.0
    source: str = "none"
    policy_passes: float | None = None
    host_ms: float = 0.0
    tree_ms: float = 0.0
    first_ms: float = 0.0
    shape_ms: tuple = ()
    intervals: tuple = ()
    assumptions: tuple[str, ...] = ()

    @property
    def identified(self) -> bool:
        return bool(np.isfinite(self.constant) and np.isfinite(self.node_ms))

    def base_ms(self, s) -> np.ndarray:
        """ms of a fixed shape s before the passes and the host work: ``constant + tree_ms * [s > 0] +
        node_ms * s``, or the per-shape table (linear between logged shapes, slope ``node_ms`` beyond)."""
        s = np.asarray(s, dtype=np.float64)
        node = self.node_ms if np.isfinite(self.node_ms) else 0.0
        if not self.shape_ms:
            return self.constant + node * s + self.tree_ms * (s > 0)
        xs, ys = (np.array(v, dtype=np.float64) for v in zip(*self.shape_ms))
        return np.interp(s, xs, ys) + node * (np.maximum(s - xs[-1], 0.0) - np.maximum(xs[0] - s, 0.0))

    def round_ms(self, s, passes=None, policy: bool = False, first=None) -> np.ndarray:
        """ms of rounds of shapes s that paid ``passes`` draft passes (None: what :meth:`passes_at`
        says), a policy's rounds (host work) or not, ``first``: which are a turn's first round."""
        s = np.asarray(s, dtype=np.float64)
        p = self.passes_at(s, policy) if passes is None else np.asarray(passes, dtype=np.float64)
        out = self.base_ms(s) + self.pass_ms * p + (float(self.host_ms) if policy else 0.0)
        return out if first is None else out + self.first_ms * np.asarray(first, dtype=np.float64)

    def formula(self, passes: str = "passes", first: bool = True) -> str:
        """The modelled ms of a round as one line, every term the model holds (``first``: with the
        turn's-first-round term, else a remark that first rounds are priced like the others)."""
        if self.shape_ms:
            table = ", ".join(f"{int(k)}: {v:.3f}" for k, v in self.shape_ms)
            text = f"per-shape ms {{{table}}} (linear between, {self.node_ms:.4f} x nodes beyond)"
        else:
            text = f"{self.constant:.3f} + {self.node_ms:.4f} x nodes"
            if self.tree_ms:
                text += f" + {self.tree_ms:.3f} when any node is drafted"
        text += f" + {self.pass_ms:.3f} x {passes}"
        if self.host_ms:
            text += f" (+ {self.host_ms:.3f} host ms a policy round)"
        if self.first_ms:
            text += (f" (+ {self.first_ms:.3f} ms at a turn's first round)" if first else
                     f" (first rounds priced like the others; the fit's first-round term: {self.first_ms:.3f} ms)")
        return text

    def passes_at(self, s, policy: bool = False) -> np.ndarray:
        """Draft passes a round of shape s pays (fixed shape, or a policy round)."""
        s = np.asarray(s, dtype=np.float64)
        if policy and self.policy_passes is not None:
            return np.full(s.shape, float(self.policy_passes))
        return s if self.passes_per_node else np.where(s > 0, self.passes, 0.0)

    def ms(self, s, policy: bool = False) -> np.ndarray:
        return self.round_ms(s, policy=policy)

    def to_dict(self) -> dict:
        """JSON-ready record (NaN -> None)."""
        def num(x):
            return float(x) if x is not None and np.isfinite(float(x)) else None
        d = asdict(self)
        out = {"constant_ms": num(d["constant"]), "pass_ms": num(d["pass_ms"]), "node_ms": num(d["node_ms"]),
               "host_ms": num(d["host_ms"]), "tree_ms": num(d["tree_ms"]), "first_ms": num(d["first_ms"]),
               "shape_ms": {str(int(k)): num(v) for k, v in self.shape_ms},
               "passes_per_node": bool(d["passes_per_node"]),
               "passes": num(d["passes"]), "policy_passes": num(d["policy_passes"]), "source": d["source"],
               "formula": "fixed shape s: constant + tree_ms * [s > 0] + pass_ms * passes(s) + node_ms * s; policy "
                          "round: constant + tree_ms * [s > 0] + pass_ms * policy_passes + node_ms * s + host_ms; a turn's "
                          "first round: first_ms more; with shape_ms, its table (linear between its shapes, slope node_ms "
                          "beyond) replaces constant + tree_ms * [s > 0] + node_ms * s",
               "intervals": {str(t): [num(lo), num(hi)] for t, lo, hi in self.intervals},
               "assumptions": list(self.assumptions)}
        return out


@dataclass(frozen=True, eq=False)
class CostFit(Result):
    """One drafter's round-cost regression: ``terms`` (term, estimate, estimate_lo, estimate_hi,
    se), ``predictions`` (quantity ms_per_round / ms_per_token, arm fixed / policy, shape,
    tokens_per_round, estimate, estimate_lo, estimate_hi) and the point ``model``."""

    title: ClassVar[str] = "round cost: ms per round from the shape (prompt-clustered OLS)"
    drafter: str
    terms: pd.DataFrame
    predictions: pd.DataFrame
    model: CostModel
    rounds: int
    prompts: int
    level: float = 0.95
    note_lines: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        t = self.terms.assign(quantity="coefficient", arm="", shape=np.nan, tokens_per_round=np.nan)
        p = self.predictions.assign(term="")
        cols = ["drafter", "quantity", "term", "arm", "shape", "tokens_per_round", "estimate", "estimate_lo",
                "estimate_hi"]
        out = pd.concat([t, p], ignore_index=True).assign(drafter=self.drafter)
        return out[cols]

    @property
    def notes(self) -> tuple[str, ...]:
        return self.note_lines

    def coefficient(self, term: str) -> tuple[float, float, float]:
        """(estimate, lo, hi) of one term; NaNs when it was not fitted."""
        row = self.terms.loc[self.terms["term"] == term]
        if row.empty:
            return (np.nan, np.nan, np.nan)
        r = row.iloc[0]
        return float(r["estimate"]), float(r["estimate_lo"]), float(r["estimate_hi"])


def policy_runs(rounds) -> set[str]:
    """Run ids whose run metadata records a draft policy (a LogSet's files; empty for a frame)."""
    out = set()
    for f in getattr(rounds, "files", ()) or ():
        run = getattr(f, "run", {}) or {}
        if run.get("policy") and run.get("run_id") is not None:
            out.add(str(run["run_id"]))
    return out


def _timed_rounds(rounds, drafter: str | None, condition: str | None, notes: list) -> tuple[pd.DataFrame, str]:
    frame = getattr(rounds, "frame", rounds)
    if not isinstance(frame, pd.DataFrame):
        raise GlanceError("the round-cost fit expects a rounds DataFrame or a LogSet from glance_law.read_logs")
    for c in ("round_ms", "draft_passes", "budget"):
        if c not in frame.columns or frame[c].isna().all():
            raise MissingColumnError(f"the '{c}' column", "the round-cost fit", "glance-log")
    frame = label_targets(frame, notes)
    if condition is not None and "condition" in frame.columns:
        frame = frame.loc[frame["condition"].astype(str) == condition]
    if "drafter" in frame.columns:
        names = sorted(set(frame["drafter"].astype(str)) - {"ar"})
        if drafter is None:
            if len(names) != 1:
                raise GlanceError(f"the logs hold {len(names)} speculative drafters ({', '.join(names) or 'none'}); "
                                  "choose one (drafter=...)")
            drafter = names[0]
        frame = frame.loc[frame["drafter"].astype(str) == drafter]
    drafter = drafter or "unknown"
    bad = frame[["round_ms", "draft_passes", "budget"]].isna().any(axis=1).to_numpy()
    if bad.any():
        notes.append(f"{drafter}: {int(bad.sum())} round(s) without round_ms/draft_passes/budget left out")
        frame = frame.loc[~bad]
    if len(frame) < 3:
        raise GlanceError(f"the round-cost fit of {drafter} needs at least 3 timed rounds (got {len(frame)})")
    return frame, drafter


def _design(frame: pd.DataFrame, pol: np.ndarray, drafter: str, notes: list,
            skip: tuple = (), shapes=None) -> tuple[np.ndarray, list[str]]:
    """Columns that vary (the constant always, or one indicator per shape in ``shapes``), collinear
    ones dropped with a note; ``skip``: log columns whose term is given, not fitted."""
    cols, names = [np.ones(len(frame))], ["constant_ms"]
    if shapes is not None:
        bg = frame["budget"].to_numpy(np.float64)
        cols, names = [(bg == v).astype(np.float64) for v in shapes], [_shape_term(v) for v in shapes]
        skip = tuple(skip) + ("draft_passes", "budget", "drafted")
    for name, col in COST_TERMS[1:]:
        if col in skip:
            continue
        if col == "round" and col not in frame.columns:
            continue
        x = (pol if col == "policy" else (frame["budget"].to_numpy(np.float64) > 0).astype(np.float64)
             if col == "drafted" else (frame["round"].to_numpy() == 0).astype(np.float64) if col == "round"
             else frame[col].to_numpy(np.float64))
        if np.ptp(x) > 0:
            trial = np.column_stack(cols + [x])
            if np.linalg.matrix_rank(trial / np.maximum(np.linalg.norm(trial, axis=0), 1e-300), tol=1e-9) == trial.shape[1]:
                cols.append(x)
                names.append(name)
                continue
            notes.append(f"{drafter}: {col} is collinear with the other terms here; its term is dropped")
        elif col not in ("policy", "drafted", "round"):
            notes.append(f"{drafter}: {col} does not vary in these rounds (always {x[0]:g}); its term is not "
                         "identified and the constant absorbs it - log several shapes to separate them")
    return np.column_stack(cols), names


def _shape_term(v) -> str:
    return f"ms_at_shape_{int(v)}"


def _shape_terms(frame: pd.DataFrame, pol: np.ndarray, per_shape, node_ms, drafter: str, notes: list):
    """The logged shapes that get one term each, or None (the line): ``per_shape`` True / False, or
    None (auto: 3 to MAX_SHAPE_TERMS shapes, each in MIN_SHAPE_ROUNDS rounds or more, passes that
    do not track the shape, no node cost given)."""
    if per_shape is False or node_ms is not None:
        return None
    v, n = np.unique(frame["budget"].to_numpy(np.float64), return_counts=True)
    if per_shape is None:
        per_node = _passes_model(frame, pol)[0]
        if per_node or not (3 <= v.size <= MAX_SHAPE_TERMS) or n.min() < MIN_SHAPE_ROUNDS:
            return None
    if v.size < 2:
        return None
    notes.append(f"{drafter}: one cost term per logged shape ({', '.join(f'{x:g}' for x in v)}): the verify pass "
                 "need not cost linearly in its rows; linear between them, the least-squares slope beyond")
    return v


def _table_model(model: CostModel, shapes, values) -> CostModel:
    """``model`` with the per-shape table ``values`` at ``shapes``: ``constant`` its cost at the
    smallest shape, ``node_ms`` the least-squares slope through it (beyond the table), no tree or
    pass term (in each shape's cost)."""
    xs, ys = np.asarray(shapes, np.float64), np.asarray(values, np.float64)
    slope = float(np.polyfit(xs, ys, 1)[0]) if xs.size >= 2 else 0.0
    return replace(model, shape_ms=tuple(zip(xs.tolist(), ys.tolist())), constant=float(ys[0]), node_ms=slope,
                   tree_ms=0.0, pass_ms=0.0)


def _ols_cr1(y, X, codes, G):
    """(beta, CR1 covariance with the (N-1)/(N-K) small-sample factor)."""
    XtX_inv = np.linalg.pinv(X.T @ X)
    beta = XtX_inv @ X.T @ y
    e = y - X @ beta
    N, K = X.shape
    V = cr1_covariance(X * e[:, None], XtX_inv, codes, G) * ((N - 1) / max(N - K, 1))
    return beta, V


def _passes_model(frame: pd.DataFrame, pol: np.ndarray) -> tuple[bool, float, float]:
    """(passes_per_node, passes of a drafted fixed round, passes of a policy round) from the log:
    the fixed arm from the rounds no policy shaped, the policy arm from the policy's rounds (else
    the proposal's passes in the fixed rounds: the drafter proposes in full, then the policy looks)."""
    dp = frame["draft_passes"].to_numpy(np.float64)
    bg = frame["budget"].to_numpy(np.float64)
    fixed = pol == 0 if (pol == 0).any() else np.ones(dp.size, bool)
    dpf, bgf = dp[fixed], bg[fixed]
    drafted = bgf > 0
    per_node = bool(drafted.any() and np.mean(dpf[drafted] == bgf[drafted]) > 0.9 and np.ptp(dpf) > 0)
    passes = float(np.median(dpf[drafted])) if drafted.any() else 1.0
    src = dp[pol > 0] if (pol > 0).any() else dp
    full = float(np.median(src[src > 0])) if (src > 0).any() else 0.0
    return per_node, passes, full


def fit_cost(rounds, *, drafter: str | None = None, host_ms: float | None = None, node_ms: float | None = None,
             condition: str | None = "matched", level: float = 0.95, n_boot: int = 1000, seed: int = 0,
             shapes=None, per_shape: bool | None = None) -> CostFit:
    """Fit ``round_ms ~ 1 + draft_passes + budget + [budget > 0] (+ policy) + [round = 0]`` over one drafter's timed
    rounds (terms that do not vary, or are collinear with the others, are left out with a note), or with one
    term per logged shape in place of ``1 + draft_passes + budget + [budget > 0]`` (``per_shape``).

    Parameters
    ----------
    rounds : LogSet or DataFrame
        Round logs with ``round_ms``, ``draft_passes`` and ``budget`` (glance-log writes them). A
        LogSet also tells, from its run metadata, which rounds a policy shaped: the policy's host
        work is then a fitted term.
    drafter : str, optional
        The drafter (needed when the logs hold several).
    host_ms : float, optional
        The policy's per-round host work when the logs cannot identify it (measured by
        ``benchmarks/bench_policy_host.py``); default 0, noted.
    node_ms : float, optional
        A known verification cost per node (e.g. from another drafter's rounds on the same
        target): subtracted, not fitted. A chain drafted one pass per offset cannot separate the
        pass from the node it adds; this identifies the pass.
    level : float, default 0.95
        Interval level: coefficients and ms per round by CR1 (t, G - 1 df); ms per token by
        prompt bootstrap (the fit and the tokens per round resampled together), each replicate's
        deviation from the estimate scaled by :func:`studentize_factor` (as ``cost_draws``).
    n_boot : int, default 1000
        Prompt-bootstrap replicates for ms per token (0: no interval).
    shapes : sequence of int, optional
        Shapes to predict at (default: 0 and every logged shape).
    per_shape : bool, optional
        One cost term per logged shape instead of the line in the shape (None: where 3 to
        ``MAX_SHAPE_TERMS`` shapes are logged, each in ``MIN_SHAPE_ROUNDS`` rounds or more, and the
        drafter's passes do not track the shape; never with a given ``node_ms``).

    Returns
    -------
    CostFit

    Examples
    --------
    >>> import glance_law as gl
    >>> from glance_law.policy.cost import fit_cost
    >>> fit_cost(gl.simulate_rounds(seed=0), n_boot=0).model.identified
    True
    """
    notes: list[str] = []
    frame, drafter, pol, codes, G, y, X, names = _regression(rounds, drafter, node_ms, condition, notes, per_shape)
    beta, V = _ols_cr1(y, X, codes, G)
    tc = t_crit(G, level)
    se = np.sqrt(np.clip(np.diag(V), 0, None))
    terms = pd.DataFrame({"term": names, "estimate": beta, "estimate_lo": beta - tc * se,
                          "estimate_hi": beta + tc * se, "se": se})
    est = dict(zip(names, beta))
    per_node, passes, full = _passes_model(frame, pol)
    host = float(est["policy_host_ms"]) if "policy_host_ms" in est else float(host_ms or 0.0)
    assumptions = _assumptions(est, per_node, passes, full, host, host_ms, drafter, notes)
    model = CostModel(constant=float(est.get("constant_ms", np.nan)), pass_ms=float(est.get("ms_per_draft_pass", 0.0)),
                      node_ms=float(est.get("ms_per_tree_node", np.nan) if node_ms is None else node_ms),
                      passes_per_node=per_node, passes=passes,
                      source="measured round-cost fit (prompt-clustered OLS)", policy_passes=full, host_ms=host,
                      tree_ms=float(est.get("tree_round_ms", 0.0)), first_ms=float(est.get("first_round_ms", 0.0)),
                      intervals=tuple((str(r.term), float(r.estimate_lo), float(r.estimate_hi))
                                      for r in terms.itertuples()),
                      assumptions=tuple(assumptions))
    model = _with_terms(model, names, beta)
    preds = _predictions(frame, X, model, names, beta, V, tc, codes, G, shapes, n_boot, seed, level)
    notes.append(f"{drafter}: OLS over {len(frame)} timed rounds, {G} prompts; CR1 prompt-clustered intervals (t, "
                 f"{G - 1} df); ms per token: {n_boot}-replicate prompt bootstrap (fit and tokens together), "
                 "each replicate's deviation scaled by t(G-1)/z x sqrt(G/(G-1)) (studentized, as the CR1 interval)")
    return CostFit(drafter=drafter, terms=terms, predictions=preds, model=model, rounds=len(frame), prompts=G,
                   level=level, note_lines=tuple(dict.fromkeys(notes)))


def _assumptions(est: dict, per_node: bool, passes: float, full: float, host: float, host_ms, drafter: str,
                 notes: list) -> list[str]:
    """What a fitted cost model takes for granted (recorded with an exported policy)."""
    per_shape = any(n.startswith("ms_at_shape_") for n in est)
    assumptions = [
        "a policy round pays the proposal's full draft passes (the drafter proposes before the policy looks), "
        f"{full:g} here, whatever shape it picks",
        "a fixed shape s pays " + ("s draft passes (one per offset)" if per_node else
                                   f"{passes:g} draft pass(es) when s > 0, none at s = 0"),
        ("one cost per logged shape (the drafter's passes in it), linear between logged shapes and with the "
         "least-squares slope beyond them" if per_shape else "cost is linear in the shape within the logged range")
        + "; the rounds' context lengths are those of the logs",
    ]
    if "first_round_ms" in est:
        assumptions.append("a turn's first round costs first_ms more (a model drafter's prefill), paid once a turn by "
                           "every arm: the trajectory replay adds it at each prompt's first root, the logged-root replay "
                           "prices first rounds like the others")
    if "policy_host_ms" in est:
        assumptions.append("policy host work: fitted from rounds of runs with and without a policy")
    elif host_ms is not None:
        assumptions.append(f"policy host work: {host:g} ms a round, given (measured outside these logs)")
    else:
        assumptions.append("policy host work: not in these logs, assumed 0 ms a round")
        notes.append(f"{drafter}: no rounds of a policy run to fit the policy's host work; assumed 0 (pass host_ms, "
                     "measured by benchmarks/bench_policy_host.py)")
    return assumptions


def _regression(rounds, drafter, node_ms, condition, notes, per_shape=None):
    """The OLS inputs of :func:`fit_cost`: (frame, drafter, policy-run indicator, prompt codes,
    prompts, y, X, term names)."""
    frame, drafter = _timed_rounds(rounds, drafter, condition, notes)
    runs = policy_runs(rounds)
    pol = (frame["run_id"].astype(str).isin(runs).to_numpy(np.float64) if runs and "run_id" in frame.columns
           else np.zeros(len(frame)))
    codes, G = cluster_codes(frame)
    y = frame["round_ms"].to_numpy(np.float64)
    if node_ms is not None:
        y = y - float(node_ms) * frame["budget"].to_numpy(np.float64)
        notes.append(f"{drafter}: the cost of a node is given ({float(node_ms):g} ms), not fitted")
    shapes = _shape_terms(frame, pol, per_shape, node_ms, drafter, notes)
    X, names = _design(frame, pol, drafter, notes, skip=("budget",) if node_ms is not None else (), shapes=shapes)
    return frame, drafter, pol, codes, G, y, X, names


#: CostModel field of each fitted term
_FIELDS = {"constant_ms": "constant", "ms_per_draft_pass": "pass_ms", "ms_per_tree_node": "node_ms",
           "tree_round_ms": "tree_ms", "policy_host_ms": "host_ms", "first_round_ms": "first_ms"}


def cost_draws(rounds, *, drafter: str | None = None, host_ms: float | None = None, node_ms: float | None = None,
               condition: str | None = "matched", n_boot: int = 200, seed: int = 0,
               per_shape: bool | None = None, studentize: bool = True) -> tuple[CostFit, list]:
    """The round-cost fit and ``n_boot`` prompt-bootstrap refits of it: (:func:`fit_cost`'s result,
    [CostModel, ...]). Each replicate draws the prompts with replacement and refits the OLS (every
    fitted term: the constant, the pass, node and tree costs and the policy's host work), so a
    prediction computed under each replicate carries the cost model's uncertainty - the host
    term's among them. Replicates whose design loses rank are skipped (fewer models returned).

    ``studentize``: each replicate's deviation from the point fit is scaled by
    ``t(G - 1) / z x sqrt(G / (G - 1))`` (95 % quantiles). A percentile bootstrap over few prompts
    is narrower than the CR1 t interval and covers below nominal (a calibration of six prompts:
    ``tests/test_policy_cost.py``); the scaling gives its spread the CR1 t interval's, and is about
    1 from 30 prompts on.

    Examples
    --------
    >>> import glance_law as gl
    >>> fit, draws = cost_draws(gl.simulate_rounds(seed=0), n_boot=20)
    >>> len(draws) == 20 and all(m.identified for m in draws)
    True
    """
    fit = fit_cost(rounds, drafter=drafter, host_ms=host_ms, node_ms=node_ms, condition=condition, n_boot=0,
                   per_shape=per_shape)
    _, _, _, codes, G, y, X, names = _regression(rounds, fit.drafter, node_ms, condition, [], per_shape)
    K = X.shape[1]
    XtX = np.stack([np.bincount(codes, weights=X[:, i] * X[:, j], minlength=G) for i in range(K) for j in range(K)], 1)
    Xty = np.stack([np.bincount(codes, weights=X[:, i] * y, minlength=G) for i in range(K)], 1)
    W = bootstrap_counts(G, n_boot, np.random.default_rng(seed)) if n_boot > 0 and G >= 2 else []
    point = fit.terms["estimate"].to_numpy(np.float64)
    c = studentize_factor(G, 0.95) if studentize else 1.0
    out = []
    for w in W:
        A = (w @ XtX).reshape(-1, K, K)
        ok = np.linalg.matrix_rank(A) == K
        b = np.linalg.solve(A[ok], (w[ok] @ Xty)[..., None])[..., 0]
        out += [_with_terms(fit.model, names, point + c * (row - point)) for row in b]
    return fit, out


def _with_terms(model: CostModel, names: list[str], values) -> CostModel:
    """``model`` with the fitted terms ``names`` set to ``values`` (the per-shape terms as its table)."""
    vals = dict(zip(names, (float(v) for v in values)))
    model = replace(model, **{_FIELDS[n]: v for n, v in vals.items() if n in _FIELDS})
    table = [(float(n[len("ms_at_shape_"):]), v) for n, v in vals.items() if n.startswith("ms_at_shape_")]
    return _table_model(model, *zip(*table)) if table else model


def _row(model: CostModel, names: list[str], s: float, policy: bool) -> np.ndarray:
    """The design row of a round of shape s (fixed or policy) in the fitted terms."""
    vals = {"constant_ms": 1.0, "ms_per_draft_pass": float(model.passes_at(s, policy)), "ms_per_tree_node": float(s),
            "tree_round_ms": float(s > 0), "policy_host_ms": 1.0 if policy else 0.0, "first_round_ms": 0.0}
    xs = [float(v) for v, _ in model.shape_ms]
    for j, x in enumerate(xs):             # a per-shape table: interpolation weights (clamped at its ends)
        vals[_shape_term(x)] = float(np.interp(s, xs, np.eye(len(xs))[j]))
    return np.array([vals[n] for n in names])


def _predictions(frame, X, model, names, beta, V, tc, codes, G, shapes, n_boot, seed, level) -> pd.DataFrame:
    """ms per round at every shape (a round other than a turn's first; fixed and policy arms: CR1 t intervals) and ms per token at the
    logged shapes (prompt bootstrap refitting the OLS from per-prompt sufficient statistics)."""
    bg = frame["budget"].to_numpy(np.float64)
    tok = (frame["accepted"].to_numpy(np.float64) + 1.0) if "accepted" in frame.columns else None
    grid = sorted({0, *np.unique(bg).astype(int).tolist()} if shapes is None else {int(s) for s in shapes})
    host_given = "policy_host_ms" not in names and model.host_ms
    rows = []
    for arm in ("fixed", "policy"):
        for s in grid:
            x = _row(model, names, s, arm == "policy")
            m = float(x @ beta) + (model.host_ms if (arm == "policy" and host_given) else 0.0)
            h = tc * float(np.sqrt(max(x @ V @ x, 0.0)))
            rows.append({"quantity": "ms_per_round", "arm": arm, "shape": float(s), "tokens_per_round": np.nan,
                         "estimate": m, "estimate_lo": m - h, "estimate_hi": m + h})
    if tok is not None:
        rows += _per_token(frame, X, names, beta, codes, G, bg, tok, n_boot, seed, level)
    return pd.DataFrame(rows)


def _per_token(frame, X, names, beta, codes, G, bg, tok, n_boot, seed, level) -> list[dict]:
    """ms per token at each logged shape: the fitted ms of its rounds over their mean tokens per round."""
    y = frame["round_ms"].to_numpy(np.float64)
    K = X.shape[1]
    XtX = np.stack([np.bincount(codes, weights=X[:, i] * X[:, j], minlength=G) for i in range(K) for j in range(K)], 1)
    Xty = np.stack([np.bincount(codes, weights=X[:, i] * y, minlength=G) for i in range(K)], 1)
    out = []
    for s in np.unique(bg):
        at = bg == s
        n_s = np.bincount(codes[at], minlength=G).astype(np.float64)
        t_s = np.bincount(codes[at], weights=tok[at], minlength=G)
        x = X[at].mean(axis=0)                  # the fitted mean ms of the rounds logged at this shape
        T = t_s.sum() / n_s.sum()
        est = float(x @ beta) / T
        lo = hi = np.nan
        if n_boot > 0 and G >= 2:
            draws = []
            for W in bootstrap_counts(G, n_boot, np.random.default_rng(seed)):
                A = (W @ XtX).reshape(-1, K, K)
                ok = (np.linalg.matrix_rank(A) == K) & ((W @ n_s) > 0)
                b = np.linalg.solve(A[ok], (W[ok] @ Xty)[..., None])[..., 0]
                draws.append((b @ x) / ((W[ok] @ t_s) / (W[ok] @ n_s)))
            d = np.concatenate(draws)
            if d.size:      # studentized like cost_draws: the plain percentile covered 83-88% with 6 prompts
                lo, hi = percentile_interval(est + studentize_factor(G, level) * (d - est), level)
        out.append({"quantity": "ms_per_token", "arm": "logged", "shape": float(s), "tokens_per_round": float(T),
                    "estimate": est, "estimate_lo": float(lo), "estimate_hi": float(hi)})
    return out


def cost_model(rounds, drafter: str, *, node_ms: float | None = None, pass_ms: float | None = None,
               constant_ms: float | None = None, host_ms: float | None = None, notes: list | None = None) -> CostModel:
    """The measured round-cost model of ``drafter`` (:func:`fit_cost`, point estimates), with any term
    overridden by the caller. Terms the logs cannot identify stay NaN (node cost) or 0 (pass cost)
    and are noted; logs without timings give an unidentified model."""
    notes = notes if notes is not None else []
    frame = getattr(rounds, "frame", rounds)
    c = CostModel()
    timed = {"round_ms", "draft_passes", "budget"} <= set(getattr(frame, "columns", ()))
    if timed and frame["round_ms"].notna().sum() >= 3:
        try:
            fit = fit_cost(rounds, drafter=drafter, host_ms=host_ms, n_boot=0)
            c = fit.model
            notes.extend(n for n in fit.notes if "OLS over" not in n)
        except GlanceError as exc:
            notes.append(f"round-cost fit failed ({exc})")
    else:
        notes.append("no round_ms in the logs: no round-cost fit")
    given = []
    for name, v, attr in (("constant", constant_ms, "constant"), ("pass cost", pass_ms, "pass_ms"),
                          ("node cost", node_ms, "node_ms"), ("host work", host_ms, "host_ms")):
        if v is not None and (attr != "host_ms" or c.source == "none"):
            c = replace(c, **{attr: float(v)})
            given.append(name)
    if given:
        c = replace(c, source=c.source + " + given " + ", ".join(given))
    if not np.isfinite(c.node_ms):
        notes.append(f"{drafter}: the cost of a node is not identified (the logged budget does not vary); modelled "
                     "ms/token and speedups are not reported - log several budgets or pass --node-ms")
    return c

