"""Simulated round logs from known parameters: the test bed for every statistic.

Generative model (``law`` mode, :func:`simulate_rounds`), per task:

* each prompt g draws an entropy multiplier ``m_g = exp(N(0, prompt_entropy_sd))``;
  each round's root entropy is ``H = m_g * X`` with ``X`` from the task's
  mixture: with probability ``floor_weight`` an exponential near zero
  (mean ``floor_scale``), otherwise a Gamma(``shape``, ``scale``);
* the match probability is ``p = sigmoid(b0 - b1 * H)`` (plus ``u_g`` in
  ``prompt_effect="logit"`` mode);
* the accepted length is the truncated geometric ``P(a >= l) = p^l`` (l <= L),
  drawn by inverse CDF from a *Gaussian copula* shared within the prompt
  (``prompt_effect="copula"``, latent correlation ``prompt_corr``): every
  round's marginal law is exactly the affine-logit law, yet rounds of a prompt
  are correlated - the setting in which round-level inference is wrong and
  prompt-clustered inference is right;
* with a :class:`TwoStateTail`, rounds below ``tail.below`` nats follow the
  two-state survival model instead (state D copies with ``rho_d``, state U
  matches with the law's ``p``), still through the copula;
* per-offset ``match`` vectors: ``a`` leading ones, a zero at ``a+1`` (if
  ``a < L``), then independent Bernoulli(p) draws (Bernoulli(rho_U) in tail
  rounds) - so under the geometric law every offset's marginal and conditional
  hazard is ``p`` (Assumption 2 holds exactly); ``target_rank`` is 0 on
  matches and a rank >= 1 otherwise (inside the top-k with probability
  ``rescue``); the target's root ``root_pmax``/``root_margin`` come from a
  top-1-plus-uniform-rest distribution with the round's entropy, so they
  satisfy Fano's inequality.

In ``prompt_effect="logit"`` mode the law holds conditionally on the prompt
only; the marginal (population-averaged) slope is attenuated, which is what a
marginal fit then estimates. The copula mode is the default because there the
true (b0, b1) are also the marginal ones.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special, stats

__all__ = ["TaskSpec", "TwoStateTail", "DEFAULT_TASKS", "simulate_arrays", "simulate_rounds", "simulate_tree_rounds", "simulate_turns", "turn_tau_truth",
           "truncated_geometric_survival", "two_state_survival_matrix"]


@dataclass(frozen=True)
class TwoStateTail:
    """The copy regime below ``below`` nats: entry weight ``pi`` on the determinate
    state D (match prob ``rho_d``, stay prob ``t_dd``); state U matches with the
    law's p and stays with prob ``t_uu``."""

    pi: float = 0.3
    rho_d: float = 0.98
    t_dd: float = 0.97
    t_uu: float = 0.9
    below: float = 0.1


@dataclass(frozen=True)
class TaskSpec:
    name: str
    b0: float
    b1: float
    shape: float = 2.0          # Gamma shape of the bulk of the entropy distribution
    scale: float = 0.5          # Gamma scale (nats)
    floor_weight: float = 0.1   # share of near-zero-entropy rounds
    floor_scale: float = 0.03   # their mean entropy (nats)
    prompt_entropy_sd: float = 0.3
    tail: TwoStateTail | None = None


#: Five tasks ordered from open to grounded, shaped like the paper's Table 12.
DEFAULT_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec("caption", b0=0.8, b1=0.46, shape=3.0, scale=0.55, floor_weight=0.03),
    TaskSpec("textvqa", b0=0.9, b1=0.58, shape=2.5, scale=0.5, floor_weight=0.08),
    TaskSpec("infovqa", b0=1.0, b1=0.80, shape=2.0, scale=0.45, floor_weight=0.15),
    TaskSpec("docvqa", b0=1.226, b1=0.95, shape=1.5, scale=0.4, floor_weight=0.25,
             tail=TwoStateTail(pi=0.3)),
    TaskSpec("chartqa", b0=1.5, b1=1.71, shape=1.5, scale=0.3, floor_weight=0.3,
             tail=TwoStateTail(pi=0.35)),
)


def truncated_geometric_survival(p: np.ndarray, L: int) -> np.ndarray:
    """S(l) = P(a >= l) = p^l for l = 0..L, shape (n, L+1)."""
    p = np.asarray(p, dtype=np.float64)[:, None]
    return p ** np.arange(L + 1)[None, :]


def two_state_survival_matrix(pi, rho_d, rho_u, t_dd, t_uu, L: int) -> np.ndarray:
    """S(l) for l = 0..L under the two-state model, vectorised over rounds (rho_u may vary).

    S(l) = v D K^(l-1) 1 with v = (pi, 1-pi), D = diag(rho_d, rho_u), K = T D.
    """
    rho_u = np.atleast_1d(np.asarray(rho_u, dtype=np.float64))
    n = rho_u.shape[0]
    out = np.empty((n, L + 1))
    out[:, 0] = 1.0
    # forward mass in states (D, U) after a match at offset l
    fd = np.full(n, pi * rho_d)
    fu = (1.0 - pi) * rho_u
    for l in range(1, L + 1):
        out[:, l] = fd + fu
        nd = (fd * t_dd + fu * (1.0 - t_uu)) * rho_d
        nu = (fd * (1.0 - t_dd) + fu * t_uu) * rho_u
        fd, fu = nd, nu
    return out


def _draw_from_survival(surv: np.ndarray, u: np.ndarray) -> np.ndarray:
    """a = #{l >= 1 : S(l) > 1 - u}: inverse-CDF draw from survival rows (n, L+1)."""
    return (surv[:, 1:] > (1.0 - u)[:, None]).sum(axis=1).astype(np.int64)


def _pmax_from_entropy(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-1 probability and top-2 logit margin of a 'top-1 plus M uniform' distribution
    with entropy h (M chosen so ln(M+1) exceeds h)."""
    h = np.asarray(h, dtype=np.float64)
    M = np.maximum(50.0, np.ceil(np.exp(h + 1.0)))
    lo = 1.0 / (M + 1.0)
    hi = np.ones_like(h)

    def ent(p):
        q = np.clip(1.0 - p, 1e-300, None)
        return -special.xlogy(p, p) - special.xlogy(q, q / M)

    for _ in range(60):
        mid = 0.5 * (lo + hi)
        too_high = ent(mid) > h  # entropy decreases in p on [1/(M+1), 1]
        lo = np.where(too_high, mid, lo)
        hi = np.where(too_high, hi, mid)
    p = 0.5 * (lo + hi)
    margin = np.log(p) - np.log(np.clip((1.0 - p) / M, 1e-300, None))
    return p, margin


def _draw_entropies(rng, spec, n_prompts: int, rounds_per_prompt):
    """Rounds per prompt and root entropies of one task: prompt index ``g`` per round and
    ``H`` (a prompt-level lognormal multiplier times a floor/gamma mixture, float32-rounded
    like a logged column)."""
    if isinstance(rounds_per_prompt, (tuple, list)):
        n_r = rng.integers(rounds_per_prompt[0], rounds_per_prompt[1] + 1, size=n_prompts)
    else:
        n_r = np.full(n_prompts, int(rounds_per_prompt))
    g = np.repeat(np.arange(n_prompts), n_r)
    n = g.size
    m = np.exp(rng.normal(0.0, spec.prompt_entropy_sd, size=n_prompts))[g]
    is_floor = rng.random(n) < spec.floor_weight
    x = np.where(is_floor, rng.exponential(spec.floor_scale, size=n), rng.gamma(spec.shape, spec.scale, size=n))
    return g, (m * x).astype(np.float32).astype(np.float64)


def simulate_arrays(tasks: Sequence[TaskSpec] | None = None, n_prompts: int = 40,
                    rounds_per_prompt: int | tuple[int, int] = (20, 60), horizon: int = 15,
                    prompt_effect: str = "copula", prompt_corr: float = 0.3, logit_sd: float = 0.5,
                    k: int = 8, rescue: float = 0.6, vectors: bool = True, seed: int = 0,
                    run_id: str = "sim", drafter: str = "sim", condition: str = "matched") -> dict:
    """The simulator's core: a dict of numpy arrays (vector columns as (n, L) 2-D arrays).

    Use :func:`simulate_rounds` for a DataFrame in the log contract.
    """
    if prompt_effect not in ("copula", "logit", "none"):
        raise ValueError("prompt_effect must be 'copula', 'logit' or 'none'")
    if horizon < 1:
        raise ValueError("horizon (L) must be >= 1")
    if not 0.0 <= prompt_corr < 1.0:
        raise ValueError("prompt_corr must lie in [0, 1)")
    tasks = tuple(DEFAULT_TASKS if tasks is None else tasks)
    rng = np.random.default_rng(seed)
    L = int(horizon)
    parts = []
    for _t_i, spec in enumerate(tasks):
        g, H = _draw_entropies(rng, spec, n_prompts, rounds_per_prompt)
        n = g.size
        eta = spec.b0 - spec.b1 * H
        if prompt_effect == "logit":
            eta = eta + rng.normal(0.0, logit_sd, size=n_prompts)[g]
        p = special.expit(eta)
        if prompt_effect == "copula" and prompt_corr > 0:
            z = np.sqrt(prompt_corr) * rng.standard_normal(n_prompts)[g] + \
                np.sqrt(1.0 - prompt_corr) * rng.standard_normal(n)
            u = stats.norm.cdf(z)
        else:
            u = rng.random(n)
        surv = truncated_geometric_survival(p, L)
        in_tail = np.zeros(n, dtype=bool)
        if spec.tail is not None:
            in_tail = H < spec.tail.below
            if in_tail.any():
                tl = spec.tail
                surv[in_tail] = two_state_survival_matrix(tl.pi, tl.rho_d, p[in_tail], tl.t_dd, tl.t_uu, L)
        a = _draw_from_survival(surv, u)
        rnd = np.arange(n) - np.searchsorted(g, g)               # 0-based round within its prompt
        part = {
            "task": np.full(n, spec.name, dtype=object),
            "prompt_id": np.array([f"{spec.name}-{i:04d}" for i in range(n_prompts)], dtype=object)[g],
            "round": rnd.astype(np.int32),
            "root_entropy": H.astype(np.float32),
            "accepted": a.astype(np.int16),
            "horizon": np.full(n, L, dtype=np.int16),
            "_p": p, "_tail": in_tail, "_g": g,
        }
        if vectors:
            offs = np.arange(1, L + 1)[None, :]
            # after the first miss: Bernoulli(p) (the U state's rho in tail rounds)
            after = (rng.random((n, L)) < p[:, None]).astype(np.int8)
            match = np.where(offs <= a[:, None], 1, np.where(offs == a[:, None] + 1, 0, after)).astype(np.int8)
            miss_rank = np.where(rng.random((n, L)) < rescue, rng.integers(1, max(k, 2), size=(n, L)),
                                 k + rng.geometric(0.05, size=(n, L)) - 1)
            rank = np.where(match == 1, 0, miss_rank).astype(np.int32)
            q1 = special.expit(eta + 0.5)[:, None] * np.ones((1, L))
            logq = np.where(rank == 0, np.log(q1),
                            np.log(np.clip((1.0 - q1) / (1.0 + rank), 1e-12, None))).astype(np.float32)
            part.update(match=match, target_rank=rank, target_logq=logq)
        parts.append(part)
    out = {key: np.concatenate([pt[key] for pt in parts]) for key in parts[0]}
    n = out["accepted"].shape[0]
    pmax, margin = _pmax_from_entropy(out["root_entropy"].astype(np.float64))
    a = out["accepted"].astype(np.int64)
    # position: tokens generated before the round's root within the prompt
    starts = np.r_[True, (out["round"][1:] == 0)] if n else np.zeros(0, bool)
    committed = a + 1
    csum = np.cumsum(committed)
    first_idx = np.maximum.accumulate(np.where(starts, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    before = csum - committed - (csum[first_idx] - committed[first_idx])
    out.update(
        run_id=np.full(n, run_id, dtype=object),
        condition=np.full(n, condition, dtype=object),
        drafter=np.full(n, drafter, dtype=object),
        position=before.astype(np.int32),
        root_pmax=pmax.astype(np.float32),
        root_margin=margin.astype(np.float32),
        min_path_margin=(margin * rng.uniform(0.3, 1.0, size=n)).astype(np.float32),
        budget=np.full(n, L, dtype=np.int16),
        draft_passes=np.ones(n, dtype=np.int16),
        draft_ms=rng.gamma(20.0, 0.1, size=n).astype(np.float32),
        verify_ms=rng.gamma(50.0, 0.2, size=n).astype(np.float32),
    )
    out["round_ms"] = (out["draft_ms"] + out["verify_ms"] + rng.gamma(4.0, 0.25, size=n)).astype(np.float32)
    return out


_ORDER = ["run_id", "task", "prompt_id", "round", "root_entropy", "accepted", "horizon", "condition",
          "drafter", "position", "root_margin", "root_pmax", "min_path_margin", "budget", "draft_passes",
          "match", "target_logq", "target_rank", "draft_ms", "verify_ms", "round_ms"]


def simulate_rounds(tasks: Sequence[TaskSpec] | Mapping[str, Mapping] | None = None, *,
                    truth: bool = False, **kwargs) -> pd.DataFrame:
    """Simulated round log as a DataFrame in the log contract (see the module docstring).

    ``tasks`` may be :class:`TaskSpec` objects or a mapping ``name -> dict`` of
    TaskSpec fields. ``truth=True`` adds the hidden columns ``_p`` (true match
    probability), ``_tail`` (round drawn from the two-state tail) and ``_g``.
    Other keyword arguments go to :func:`simulate_arrays`.

    Parameters
    ----------
    tasks : sequence of TaskSpec or mapping, optional
        :class:`TaskSpec` objects or a mapping ``name -> dict`` of TaskSpec fields (default: five
        tasks from open to grounded).
    truth : bool, default False
        Add the hidden columns ``_p`` (true match probability), ``_tail`` (round drawn from the
        two-state tail) and ``_g``.
    **kwargs
        Passed to :func:`simulate_arrays` (``n_prompts``, ``rounds_per_prompt``, ``horizon``,
        ``seed``, ...).

    Returns
    -------
    DataFrame
        Rounds in the log contract.

    Examples
    --------
    >>> import glance_law as gl
    >>> frame = gl.simulate_rounds(seed=0, n_prompts=5)
    >>> frame["prompt_id"].nunique() > 0
    True
    """
    if isinstance(tasks, Mapping):
        tasks = [TaskSpec(name, **dict(v)) for name, v in tasks.items()]
    arr = simulate_arrays(tasks, **kwargs)
    data = {}
    for c in _ORDER:
        if c not in arr:
            continue
        v = arr[c]
        data[c] = list(v) if v.ndim == 2 else v
    frame = pd.DataFrame(data)
    for c in ("run_id", "task", "prompt_id", "condition", "drafter"):
        frame[c] = frame[c].astype("category")
    if truth:
        for c in ("_p", "_tail", "_g"):
            frame[c] = arr[c]
    return frame


def simulate_tree_rounds(tasks: Sequence[TaskSpec] | Mapping[str, Mapping] | None = None, *,
                         n_prompts: int = 40, rounds_per_prompt: int | tuple[int, int] = (20, 60),
                         horizon: int = 15, k: int = 8, budget: int = 63,
                         rescue: tuple[float, float] = (0.5, 0.0), prompt_sd: float = 0.3,
                         profile: tuple[float, float] = (0.3, 0.95), end_unknown: bool = True,
                         truth: bool = False, seed: int = 0, run_id: str = "sim-tree",
                         drafter: str = "block", condition: str = "matched") -> pd.DataFrame:
    """Simulated *tree-mode* round log: drafter marginals, the target's path, and the accepted
    length of the best-first tree of ``budget`` nodes built by :mod:`glance_law.replay.tree`.

    Per task (a :class:`TaskSpec`; its two-state ``tail`` is not used here), prompt g and
    round: the root entropy H is drawn as in :func:`simulate_arrays`; the drafter's top-1
    probability at every offset is ``p = sigmoid(b0 - b1 H + u_g)`` with a prompt effect
    ``u_g ~ N(0, prompt_sd)`` (rounds of a prompt are correlated); the *rescue* probability
    (the target's token is inside the drafter's top-k when it is not the top-1) is
    ``r = min(sigmoid(c0 - c1 H), (k-1) p / (1-p))`` with ``rescue = (c0, c1)`` (the cap lets
    the other top-k entries stay below p). Each offset's row of ``topk_logq`` is
    ``log(p, (1-p) r w_1, ..., (1-p) r w_{k-1})`` with a decreasing profile ``w`` (geometric
    ratio drawn from ``profile``, mixed with uniform when needed to keep the row sorted);
    the target's rank there is 0 with probability p, rank ``rho`` in 1..k-1 with probability
    ``(1-p) r w_rho`` (a calibrated drafter), else outside the top-k (rank >= k). Offsets are
    independent given the round, so the chain's accepted length (leading rank-0 offsets) is
    the truncated geometric of the law with match probability p, and the marginal value of
    width is ``r (1 - p^L)``-shaped, not ``p (1 - p^L)``.

    ``accepted`` is the length of the target's path inside the best-first tree of
    ``budget`` nodes (:func:`glance_law.replay.tree.best_first`, membership of each prefix),
    ``horizon = L``. With ``end_unknown`` the last round of each prompt ends the stream: its
    offsets past ``accepted + 1`` are unknown (``target_rank = -1``, ``match = -1``), as in
    logger logs. ``truth=True`` adds ``_p``, ``_r`` and ``_g``.
    """
    from glance_law.replay.tree import best_first

    if isinstance(tasks, Mapping):
        tasks = [TaskSpec(name, **dict(v)) for name, v in tasks.items()]
    tasks = tuple(DEFAULT_TASKS if tasks is None else tasks)
    L, k, budget = int(horizon), int(k), int(budget)
    if L < 1 or k < 1 or budget < 1:
        raise ValueError("horizon, k and budget must be >= 1")
    rng = np.random.default_rng(seed)
    c0, c1 = float(rescue[0]), float(rescue[1])
    frames = []
    for spec in tasks:
        g, H = _draw_entropies(rng, spec, n_prompts, rounds_per_prompt)
        n = g.size
        u = rng.normal(0.0, prompt_sd, size=n_prompts)[g] if prompt_sd > 0 else np.zeros(n)
        p = special.expit(spec.b0 - spec.b1 * H + u)
        miss = 1.0 - p
        if k > 1:
            r = np.minimum(special.expit(c0 - c1 * H), (k - 1) * p / np.maximum(miss, 1e-300) * (1 - 1e-9))
            gam = rng.uniform(profile[0], profile[1], size=(n, L, 1))
            geo = gam ** np.arange(k - 1)[None, None, :]
            geo /= geo.sum(axis=2, keepdims=True)
            cap_w = (p / np.maximum(miss * r, 1e-300))[:, None, None]
            uni = 1.0 / (k - 1)
            lam = np.clip((geo[:, :, :1] - cap_w) / np.maximum(geo[:, :, :1] - uni, 1e-300), 0.0, 1.0)
            w = (1.0 - lam) * geo + lam * uni
            rest = (miss * r)[:, None, None] * w                      # (n, L, k-1)
            probs = np.concatenate([np.broadcast_to(p[:, None, None], (n, L, 1)), rest], axis=2)
        else:
            r = np.zeros(n)
            probs = np.broadcast_to(p[:, None, None], (n, L, 1)).copy()
        logq = np.log(np.maximum(probs, 1e-300)).astype(np.float32)
        logq = np.minimum.accumulate(logq, axis=2)                      # float32 rounding keeps rows sorted
        # the target's rank at each offset: inverse CDF over (top-1, ranks 1..k-1, outside)
        cdf = np.cumsum(probs, axis=2)
        v = rng.random((n, L))
        inside_rank = (cdf < v[:, :, None]).sum(axis=2)               # k when v falls in the outside mass
        outside = k + rng.geometric(0.3, size=(n, L)) - 1
        rank = np.where(inside_rank < k, inside_rank, outside).astype(np.int64)
        # the tree of `budget` nodes and the target's path through it (membership of each prefix)
        s_, d_, c_ = best_first(logq, budget)
        inside = rank < k
        code = np.zeros(n, np.int64)
        ok = np.ones(n, bool)
        acc = np.zeros(n, np.int64)
        for j in range(L):
            ok &= inside[:, j]
            code = code * k + np.where(ok, rank[:, j], 0)
            member = ((d_ == j + 1) & (c_ == code[:, None])).any(axis=1)
            ok &= member
            acc += ok
        match = (rank == 0).astype(np.int8)
        tl = np.take_along_axis(logq, np.minimum(rank, k - 1)[:, :, None], axis=2)[:, :, 0]
        tlogq = np.where(inside, tl, np.nan).astype(np.float32)
        rnd = np.arange(n) - np.searchsorted(g, g)               # 0-based round within its prompt
        if end_unknown and n:
            last = np.r_[rnd[1:] == 0, True]
            past = last[:, None] & (np.arange(1, L + 1)[None, :] > acc[:, None] + 1)
            rank = np.where(past, -1, rank)
            match = np.where(past, -1, match).astype(np.int8)
            tlogq = np.where(past, np.nan, tlogq).astype(np.float32)
        committed = acc + 1
        starts = np.r_[True, rnd[1:] == 0] if n else np.zeros(0, bool)
        csum = np.cumsum(committed)
        first_idx = np.maximum.accumulate(np.where(starts, np.arange(n), 0)) if n else np.zeros(0, np.int64)
        position = csum - committed - (csum[first_idx] - committed[first_idx])
        pmax, margin = _pmax_from_entropy(H)
        draft_ms = rng.gamma(20.0, 0.1, size=n)
        verify_ms = rng.gamma(50.0, 0.2, size=n) * (1.0 + budget / 256.0)
        part = pd.DataFrame({
            "run_id": run_id, "task": spec.name,
            "prompt_id": np.array([f"{spec.name}-{i:04d}" for i in range(n_prompts)], dtype=object)[g],
            "round": rnd.astype(np.int32), "root_entropy": H.astype(np.float32),
            "accepted": acc.astype(np.int16), "horizon": np.full(n, L, np.int16), "condition": condition,
            "drafter": drafter, "position": position.astype(np.int32),
            "root_margin": margin.astype(np.float32), "root_pmax": pmax.astype(np.float32),
            "min_path_margin": (margin * rng.uniform(0.3, 1.0, size=n)).astype(np.float32),
            "budget": np.full(n, budget, np.int16), "draft_passes": np.ones(n, np.int16),
            "match": list(match), "target_logq": list(tlogq), "target_rank": list(rank.astype(np.int32)),
            "topk_logq": list(logq.reshape(n, L * k)),
            "draft_ms": draft_ms.astype(np.float32), "verify_ms": verify_ms.astype(np.float32),
            "round_ms": (draft_ms + verify_ms + rng.gamma(4.0, 0.25, size=n)).astype(np.float32),
        })
        if truth:
            part["_p"] = p
            part["_r"] = r
            part["_g"] = g
        frames.append(part)
    frame = pd.concat(frames, ignore_index=True)
    for c in ("run_id", "task", "prompt_id", "condition", "drafter"):
        frame[c] = frame[c].astype("category")
    return frame


# --------------------------------------------------------------------------- per-turn answers (tokens per step)

def _step_tokens_pmf(p: np.ndarray, L: int) -> np.ndarray:
    """P(a round emits j tokens), j = 0..L+1, of ``1 + min(geometric, L)`` with match probability p
    (one row per p)."""
    p = np.asarray(p, dtype=np.float64)[:, None]
    k = np.arange(L + 1)[None, :]
    pa = np.where(k < L, p ** k * (1.0 - p), p ** L)               # P(a = k), k = 0..L
    return np.concatenate([np.zeros((p.shape[0], 1)), pa], axis=1)


def _answer_moments(p: np.ndarray, L: int, n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """(E steps, E tokens) to reach an answer of n = 0..n_max tokens (the last step may overshoot),
    rounds of ``1 + min(geometric, L)`` tokens with match probability p: (len(p), n_max + 1) each."""
    f = _step_tokens_pmf(p, L)
    steps = np.zeros((f.shape[0], n_max + 1))
    tok = np.zeros((f.shape[0], n_max + 1))
    for n in range(1, n_max + 1):
        j = np.arange(1, L + 2)
        rest = np.clip(n - j, 0, None)
        steps[:, n] = 1.0 + (f[:, 1:] * steps[:, rest]).sum(axis=1)
        tok[:, n] = (f[:, 1:] * (j[None, :] + tok[:, rest])).sum(axis=1)
    return steps, tok


def simulate_turns(tasks: Mapping[str, float] | None = None, *, n_prompts: int = 10, turns: int = 2,
                   horizon: int = 5, prompt_sd: float = 0.8, length: tuple[int, int] = (60, 300),
                   seed: int = 0, drafter: str = "eagle") -> pd.DataFrame:
    """Prompt rows of per-turn answers (Spec-Bench/MT-bench style: ``turn_tokens`` and ``turn_rounds``
    per prompt, no per-round lengths) with a known tokens-per-step (:func:`turn_tau_truth`).

    ``tasks``: task -> mean logit of the match probability (default three tasks). Each prompt draws
    ``p_g = sigmoid(mu_task + N(0, prompt_sd))``; each of its ``turns`` answers draws a length n
    uniform in ``length`` and decodes rounds of ``1 + min(geometric(p_g), horizon)`` tokens until it
    has n (the last round may overshoot): a prompt that accepts more takes fewer steps (the steps are
    informative about tau, as in real answers that stop at a length).

    Examples
    --------
    >>> from glance_law.simulate import simulate_turns
    >>> p = simulate_turns(n_prompts=2, seed=0)
    >>> len(p), len(p["turn_tokens"].iloc[0])
    (6, 2)
    """
    tasks = dict(tasks or {"writing": 0.0, "math": 1.0, "coding": 1.5})
    rng = np.random.default_rng(seed)
    L = int(horizon)
    rows = []
    for task, mu in tasks.items():
        p = special.expit(mu + rng.normal(0.0, prompt_sd, n_prompts))
        n = rng.integers(length[0], length[1] + 1, size=(n_prompts, turns))
        k = int(n.max())                                            # at most n rounds (a round emits >= 1)
        a = np.minimum(rng.geometric(1.0 - p[:, None, None], size=(n_prompts, turns, k)) - 1, L)
        cum = np.cumsum(a + 1, axis=2)
        steps = (cum < n[:, :, None]).sum(axis=2) + 1
        tok = np.take_along_axis(cum, (steps - 1)[:, :, None], axis=2)[:, :, 0]
        for g in range(n_prompts):
            rows.append({"run_id": f"{drafter}-run", "drafter": drafter, "task": task, "prompt_id": f"{task}-{g:04d}",
                         "condition": "matched", "turn_tokens": tok[g].tolist(), "turn_rounds": steps[g].tolist(),
                         "new_tokens": int(tok[g].sum()), "rounds": int(steps[g].sum())})
    return pd.DataFrame(rows)


def turn_tau_truth(mu: float, *, horizon: int = 5, prompt_sd: float = 0.8, length: tuple[int, int] = (60, 300),
                   nodes: int = 60) -> dict:
    """The population values of a task of :func:`simulate_turns` with mean logit ``mu``: ``tokens`` and
    ``steps`` (expected per turn), ``tau`` = their ratio (the ratio of sums' limit) and ``prompt_tau``
    = the mean over prompts of E tokens / E steps at the prompt's p (its own ratio in the limit of many
    turns), exact up to the Gauss-Hermite quadrature over the prompt's logit (a renewal recursion over
    the answer's length)."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    p = special.expit(mu + prompt_sd * x)
    steps, tok = _answer_moments(p, int(horizon), int(length[1]))
    n = np.arange(length[0], length[1] + 1)
    es, et = steps[:, n].mean(axis=1), tok[:, n].mean(axis=1)       # per node, over the uniform length
    return {"tokens": float(w @ et), "steps": float(w @ es), "tau": float((w @ et) / (w @ es)),
            "prompt_tau": float(w @ (et / es))}
