"""Sequential replay of draft depths from logged accepted runs (no per-offset columns needed).

Logs such as Spec-Bench answers record, per verification round, only how many drafted tokens
the target accepted (``accepted``) out of the deepest offset proposed (``horizon``). They still
pin down what a *different* depth schedule would have done, for a drafter that continues its
own chain (a greedy autoregressive draft model: conditioned on a prefix that is its own accepted
draft, it proposes the same next tokens again):

* a logged round i rooted at stream position ``s_i`` that accepted ``a_i`` tokens covers the
  positions ``s_i .. s_i + a_i`` (the accepted tokens and the target's bonus token);
* a round rooted at any of those positions, ``p = s_i + j`` (0 <= j <= a_i), would see the
  drafter match exactly ``a_i - j`` more tokens when the logged round stopped at a mismatch
  (``a_i < horizon_i``), and *at least* that many when it accepted its whole draft
  (``a_i = horizon_i``: what the drafter proposes past its logged horizon is unknown, and the
  round is counted as *censored*). Only one token is unknown there: the drafter's guess at the
  target's bonus token ``s_i + a_i``. ``bound="lower"`` (the default) assumes every such guess
  misses, which ends the run; ``bound="upper"`` assumes every one matches, which continues the
  run into the next logged round, whose draft a chain drafter conditioned on the same true
  prefix proposes again. For a fixed depth the two bound its tokens per round (a round's end,
  ``p + min(d, run(p)) + 1``, never falls as ``p`` or the run grows). A schedule that reads the
  previous round can land outside them when the guesses are mixed; it is bounded only when none
  of its rounds is censored;
* a depth-d round at ``p`` commits ``min(d, run(p)) + 1`` tokens (the bonus token included),
  never past the end of the stream.

:func:`run_streams` lays the logged rounds out per position; :func:`replay_depths` steps every
stream at once, asking a ``choose`` callback for each round's depth from what a decoder knows
at the round's root (its previous round's depth and accepted count, the round index and the
position). Replaying the logged depths reproduces the logged rounds exactly.

For tree or parallel-head drafters (Medusa, Hydra, EAGLE) a root in the middle of a logged
round gets a new tree, so ``run(p) = a_i - j`` is an approximation there (it assumes the new
tree still contains the continuation of the accepted path); the per-round figure at the
logged roots, ``min(a_i, d)``, is exact for every drafter.

:func:`run_survival` (from :mod:`glance_law.stats.survival`) is the Kaplan-Meier estimate of
P(run >= k) from runs right-censored at their horizon. Everything here is pure numpy.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..stats.survival import run_survival

__all__ = ["RunStreams", "RunState", "ReplayTotals", "run_streams", "replay_depths", "run_survival"]


@dataclass(frozen=True, eq=False)
class RunStreams:
    """Logged streams laid out per position.

    ``start`` (S,) offset of each stream's first position in the per-position arrays;
    ``length`` (S,) tokens each stream committed (sum of accepted + 1 over its rounds);
    ``run`` (N,) the drafter's matched run from each position (a lower bound where
    ``censored``); ``run_hi`` (N,) the run if the drafter also matches every bonus token it
    never proposed (the upper bound); ``censored`` (N,) the logged round accepted its whole
    draft, so the run from here may be longer than ``run``; ``logged_rounds`` (S,) rounds each
    stream took."""

    start: np.ndarray
    length: np.ndarray
    run: np.ndarray
    censored: np.ndarray
    logged_rounds: np.ndarray
    run_hi: np.ndarray | None = None

    @property
    def streams(self) -> int:
        return int(self.length.size)

    def take(self, idx) -> RunStreams:
        """The streams ``idx`` (re-laid out contiguously)."""
        idx = np.asarray(idx, dtype=np.int64)
        n = self.length[idx]
        start = np.zeros(idx.size, np.int64)
        if idx.size:
            start[1:] = np.cumsum(n)[:-1]
        pos = np.repeat(self.start[idx] - start, n) + np.arange(int(n.sum()))
        return RunStreams(start=start, length=n.copy(), run=self.run[pos], censored=self.censored[pos],
                          logged_rounds=self.logged_rounds[idx].copy(),
                          run_hi=None if self.run_hi is None else self.run_hi[pos])


def run_streams(stream: np.ndarray, accepted: np.ndarray, horizon: np.ndarray,
                ends: np.ndarray | None = None) -> RunStreams:
    """Lay out logged rounds per position.

    ``stream`` (R,) stream codes 0..S-1, the rounds of each stream in decoding order (a stream is
    one generation call: a prompt's turn); ``accepted`` (R,) drafted tokens the target accepted;
    ``horizon`` (R,) the deepest offset drafted; ``ends`` (R,) the round ends its stream's output
    (its run is cut by the end, not by the drafter: not censored; default: each stream's last
    round)."""
    stream = np.asarray(stream, dtype=np.int64)
    a = np.asarray(accepted, dtype=np.int64)
    h = np.asarray(horizon, dtype=np.int64)
    if not (stream.shape == a.shape == h.shape):
        raise ValueError("stream, accepted and horizon must have one entry per round")
    if a.size and (a.min() < 0 or np.any(a > np.maximum(h, 0))):
        raise ValueError("accepted must lie in 0..horizon")
    if a.size and np.any(np.diff(stream) < 0):
        raise ValueError("rounds must be grouped by stream (stream codes non-decreasing)")
    S = int(stream.max()) + 1 if stream.size else 0
    if ends is None:
        ends = np.r_[stream[1:] != stream[:-1], True] if stream.size else np.zeros(0, bool)
    ends = np.asarray(ends, dtype=bool)
    per = a + 1                                           # positions (tokens) each round covers
    length = np.bincount(stream, weights=per, minlength=S).astype(np.int64)
    rounds = np.bincount(stream, minlength=S).astype(np.int64)
    start = np.zeros(S, np.int64)
    if S:
        start[1:] = np.cumsum(length)[:-1]
    N = int(per.sum())
    first = np.zeros(per.size, np.int64)                  # each round's first position
    if per.size:
        first[1:] = np.cumsum(per)[:-1]
    j = np.arange(N) - np.repeat(first, per)              # offset of a position inside its round
    run = (np.repeat(a, per) - j).astype(np.int32)
    c_round = (a >= h) & ~ends
    cens = np.repeat(c_round, per)
    # upper bound: a censored round's run continues through the bonus token into the next round's,
    # up to the first uncensored round m: R_i = sum_{k=i..m} (a_k + 1) - 1 (a stream's last round
    # is never censored, so m stays inside the stream)
    idx = np.arange(a.size)
    m = np.minimum.accumulate(np.where(c_round, a.size, idx)[::-1])[::-1] if a.size else idx
    csum = np.r_[0, np.cumsum(per)]
    R = csum[np.minimum(m, a.size - 1) + 1] - csum[idx] - 1
    run_hi = (np.repeat(R, per) - j).astype(np.int32)
    return RunStreams(start=start, length=length, run=run, censored=cens, logged_rounds=rounds, run_hi=run_hi)


@dataclass(frozen=True, eq=False)
class RunState:
    """What a decoder knows at the roots of the active streams' next rounds: ``stream`` (n,)
    stream indices; ``prev_accepted`` / ``prev_depth`` (n,) the previous round's accepted count
    and depth (-1 at a stream's first round); ``round_index`` (n,) rounds taken so far in the
    stream; ``position`` (n,) tokens committed so far."""

    stream: np.ndarray
    prev_accepted: np.ndarray
    prev_depth: np.ndarray
    round_index: np.ndarray
    position: np.ndarray


@dataclass(frozen=True, eq=False)
class ReplayTotals:
    """Per stream: ``rounds``, ``tokens`` committed, ``depth`` (sum of the depths drafted) and
    ``censored`` rounds (their accepted count is a lower bound)."""

    rounds: np.ndarray
    tokens: np.ndarray
    depth: np.ndarray
    censored: np.ndarray


def replay_depths(streams: RunStreams, choose: Callable[[RunState], np.ndarray], *, bound: str = "lower",
                  record: bool = False) -> ReplayTotals | tuple[ReplayTotals, dict]:
    """Replay every stream with the depths ``choose(state)`` picks round by round.

    ``choose`` gets a :class:`RunState` for the streams still decoding and returns one depth
    >= 0 per stream. ``bound``: ``"lower"`` (a censored run ends at the unknown token) or
    ``"upper"`` (it continues). With ``record=True`` also returns the rounds themselves, in step
    order: ``stream``, ``position``, ``depth``, ``accepted``, ``censored``, the state the round
    saw (``prev_accepted``, ``prev_depth``) and the run at its root whatever the depth (``run``,
    with ``run_censored``: it is only known to be at least that)."""
    if bound not in ("lower", "upper"):
        raise ValueError(f"bound must be 'lower' or 'upper' (got {bound!r})")
    runs = streams.run if bound == "lower" else streams.run_hi
    if runs is None:
        raise ValueError("these streams carry no upper-bound runs (build them with run_streams)")
    S = streams.streams
    length = streams.length
    pos = np.zeros(S, np.int64)
    prev_a = np.full(S, -1, np.int64)
    prev_d = np.full(S, -1, np.int64)
    k = np.zeros(S, np.int64)
    tot = ReplayTotals(rounds=np.zeros(S, np.int64), tokens=np.zeros(S, np.int64), depth=np.zeros(S, np.int64),
                       censored=np.zeros(S, np.int64))
    rec: dict[str, list] = {k: [] for k in ("stream", "position", "depth", "accepted", "censored", "prev_accepted",
                                            "prev_depth", "run", "run_censored")}
    idx = np.flatnonzero(pos < length)
    while idx.size:
        d = np.asarray(choose(RunState(stream=idx, prev_accepted=prev_a[idx], prev_depth=prev_d[idx],
                                       round_index=k[idx], position=pos[idx])))
        if d.shape != idx.shape:
            raise ValueError(f"choose must return one depth per active stream (got shape {d.shape} for {idx.size})")
        d = d.astype(np.int64)
        if np.any(d < 0):
            raise ValueError("depths must be >= 0")
        g = streams.start[idx] + pos[idx]
        r = runs[g].astype(np.int64)
        acc = np.minimum(d, r)
        cens = streams.censored[g] & (d > streams.run[g])
        commit = np.minimum(acc + 1, length[idx] - pos[idx])
        pos[idx] += commit
        tot.rounds[idx] += 1
        tot.tokens[idx] += commit
        tot.depth[idx] += d
        tot.censored[idx] += cens
        if record:
            for key, v in (("stream", idx), ("position", g - streams.start[idx]), ("depth", d), ("accepted", acc),
                           ("censored", cens), ("prev_accepted", prev_a[idx]), ("prev_depth", prev_d[idx]),
                           ("run", r), ("run_censored", streams.censored[g])):
                rec[key].append(v.copy())
        prev_a[idx], prev_d[idx] = acc, d
        k[idx] += 1
        idx = idx[pos[idx] < length[idx]]
    if record:
        return tot, {key: (np.concatenate(v) if v else np.zeros(0, np.int64)) for key, v in rec.items()}
    return tot
