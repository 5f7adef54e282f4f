"""The reference tree-verify decoder: one flat loop with callback hooks.

One round (Definition 1 of the paper):

1. the drafter proposes per-offset top-k marginals after the pending root;
2. :func:`glance_law.replay.tree.build_tree` forms the best-first prefix-closed tree of
   at most ``budget`` nodes (``branch_k = 1``: a width-1 chain);
3. ONE target pass verifies root + nodes under an ancestor-only 4D mask with
   explicit positions ``past + depth``;
4. the walk commits the longest path the target itself takes plus the bonus
   token (greedy: the argmax of each visited row; temperature > 0: a sample of
   each visited row, descending into the child whose token equals the sample -
   the committed token is always a draw from the target's verified row, so the
   output distribution is the target's);
5. the KV cache is gathered down to root + accepted nodes.

Callbacks (the logger) receive a :class:`RoundEvent` after every round and a
:class:`PromptEvent` at the end; the loop is never forked for logging. The
per-round event carries device tensors only where the logger needs them, so a
logger can work without any host-device synchronisation.

Teacher forcing (``forced=``): the mismatched-context probe replays a live run's
committed trajectory. Each round verifies the drafter's tree exactly as live and
walks it (``accepted`` is the target's own under the replayed context), but then
commits the *forced* tokens (root + the live round's accepted tokens): the ones
inside the verified tree are gathered from it, any others are run through one
extra causal pass. In the matched context the forced path is the walk's own
path, no extra pass happens, and every round reproduces the live run exactly.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from glance_law.policy.policies import RootStats, apply_policy
from glance_law.replay.tree import Tree, build_tree

from .drafters import Drafter, DraftState, Proposal
from .record import softmax_entropy

__all__ = ["decode", "DecodeResult", "RoundEvent", "PromptEvent", "Timer", "Forced", "greedy_reference", "policy_shape"]


class Timer:
    """Marks on the host clock (CPU) or CUDA events (GPU), resolved only at prompt end."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def resolve(self):
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, a, b) -> float:
        if a is None or b is None:
            return float("nan")
        if self.cuda:
            return float(a.elapsed_time(b))
        return (b - a) * 1e3


@dataclass
class RoundEvent:
    """One decoding round, as the decoder hands it to callbacks.

    Host values: ``round``, ``position`` (index of the root in the generated stream),
    ``root``, ``accepted``, ``committed`` (accepted tokens then the bonus), ``horizon``
    (tree depth offered), ``budget`` (tree nodes), ``tree``, ``logq``/``ids`` (the drafter's
    top-k rows truncated to the horizon, numpy), ``draft_passes``, ``marks`` (timer marks).
    Device values: ``verify_logits`` (n+1, V) rows of the target pass (row 0 = root),
    ``path_rows`` (a+1,) rows of root and accepted nodes, ``row_tokens`` (n+1,) the target's
    token at every row, ``full_logp`` (horizon, V) drafter log-probabilities or None.
    ``own_tokens``: the tokens the target itself took this round when they differ from the
    committed stream (teacher-forced replays); None in live decoding.
    """

    round: int
    position: int
    root: int
    accepted: int
    committed: list
    horizon: int
    budget: int
    tree: Tree | None
    logq: np.ndarray
    ids: np.ndarray
    draft_passes: int
    point_mass: bool
    verify_logits: torch.Tensor
    path_rows: torch.Tensor
    row_tokens: torch.Tensor
    full_logp: torch.Tensor | None
    marks: tuple
    drafter: str
    own_tokens: list | None = None
    position_offset: int = 0
    root_logits: torch.Tensor | None = None   # (V,) device row that predicted the root (None: unknown)   # hooks whose first root is a prompt token log position - 1
    #: host statistics a hook computed itself (glance_log.hooks.llamacpp): (root entropy, root margin,
    #: root p_max, min path margin, entropy of the row that chose the root or NaN); the logger then
    #: copies no rows (verify_logits, path_rows, row_tokens may be None)
    root_stats: tuple | None = None


@dataclass
class PromptEvent:
    prompt_tokens: int
    tokens: list            # emitted tokens (truncated at eos / max_new_tokens)
    resolve_stream: list    # every token the target committed (the final round may run past the stop)
    rounds: int
    stop_reason: str
    prefill_marks: tuple
    decode_marks: tuple
    timer: Timer
    forced: bool = False


@dataclass
class DecodeResult:
    tokens: list
    rounds: int
    accepted: list
    horizons: list
    positions: list
    stop_reason: str
    prompt_tokens: int
    prefill_ms: float
    decode_ms: float
    resolve_stream: list = field(default_factory=list)

    @property
    def tau(self) -> float:
        return float(np.mean(np.asarray(self.accepted) + 1)) if self.accepted else float("nan")


@dataclass
class Forced:
    """A live run's trajectory to replay: every token it committed (``resolve_stream``), its
    round positions, and how many of those tokens it emitted (None: all)."""

    stream: Sequence[int]
    positions: Sequence[int]
    emitted: int | None = None


def _select(logits: torch.Tensor, temperature: float, generator) -> torch.Tensor:
    """The target's token for every row: argmax (greedy) or one draw per row."""
    if temperature <= 0:
        return torch.argmax(logits, dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).view(-1)


def _full_ancestors(tree: Tree | None, device) -> torch.Tensor:
    n = 0 if tree is None else tree.size
    anc = np.zeros((n + 1, n + 1), dtype=bool)
    anc[:, 0] = True
    if n:
        anc[1:, 1:] = tree.ancestor_mask()
    return _to_device(anc, device, torch.bool)


def _to_device(values, device, dtype=torch.long) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(values), dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t


def _emitted(stream: list, eos: Sequence[int], max_new: int) -> tuple[list, str]:
    """The emitted tokens (cut at the first end-of-sequence token or max_new) and why they stop."""
    stop, reason = _stop_index(stream, eos, max_new)
    return stream[:stop], reason


def _stop_index(stream: list, eos: Sequence[int], max_new: int):
    """Length of the emitted stream and why it stopped (None while it has not)."""
    eos = set(eos)
    for i, t in enumerate(stream[:max_new]):
        if t in eos:
            return i + 1, "eos"
    if len(stream) >= max_new:
        return max_new, "max_new_tokens"
    return None, None


def policy_shape(policy, lq: np.ndarray, root_stats: np.ndarray, position: int, prev: tuple[int, int] = (-1, -1)) -> int:
    """The shape a draft policy (:mod:`glance_law.policy`) picks for one round from what is known at
    its root: the target's root entropy and margin (``root_stats``), the drafter's top-k rows and
    the previous round's accepted count and shape (``prev``; -1 at the first round: host integers
    the previous round already synchronised)."""
    stats = RootStats(entropy=root_stats[:1].astype(np.float64), topk_logq=lq[None].astype(np.float64),
                      horizon=np.array([lq.shape[0]]), margin=root_stats[1:2].astype(np.float64),
                      position=np.array([position], dtype=np.float64),
                      prev_accepted=np.array([prev[0]], np.int64), prev_shape=np.array([prev[1]], np.int64))
    return int(apply_policy(policy, stats)[0])


def _policy_root_stats(row: torch.Tensor) -> torch.Tensor:
    """(2,) fp32 on the device: the entropy (nats) and top-2 margin of the row that predicted the
    root - what a live policy reads. The logger's formula (``softmax_entropy``, which the logged
    ``pred_entropy`` comes from), for one row without the batch bookkeeping of its
    ``device_root_stats`` (index_select, scatter_reduce, the maximum probability)."""
    top = torch.topk(row.float(), 2).values    # (not record.top2: its CPU path reads the row through numpy)
    ent, _ = softmax_entropy(row[None], top[:1])
    return torch.stack([ent[0], top[0] - top[1]])


def _prefill(target, drafter: Drafter, prompt, cache, forced: Forced | None, temperature: float, generator):
    """The prompt into ``cache`` and the drafter started: (last logits row, hidden state, the first
    root on the host and on the device)."""
    last_logits, hidden = target.prefill(prompt, cache)
    drafter.start(target, prompt)
    if drafter.wants_rows:
        drafter.observe(torch.arange(target.cache_len(cache), device=target.device), target.cache_len(cache))
    if forced is not None:
        root = int(forced.stream[0])
        return last_logits, hidden, root, torch.tensor(root, device=target.device)
    root_dev = _select(last_logits[None], temperature, generator)[0]
    return last_logits, hidden, int(root_dev), root_dev          # decoder sync (host walk needs it)


def _proposal_fields(prop: Proposal | None, horizon: int) -> dict:
    """A round event's fields read off the drafter's proposal."""
    return {"draft_passes": 0 if prop is None else int(prop.passes),
            "point_mass": bool(prop.point_mass) if prop is not None else False,
            "full_logp": None if (prop is None or prop.full_logp is None or horizon == 0) else prop.full_logp[:horizon]}


def _draft_tree(prop: Proposal | None, budget: int, branch_k: int, policy, depth_policy: bool, root_row,
                position: int, prev: tuple[int, int]):
    """The round's tree from the drafter's proposal: (tree or None, logq rows, id rows) on the host.
    A policy picks the round's shape from the root's statistics, which ride in the same
    device-to-host copy as the top-k rows (no extra synchronisation)."""
    empty = (None, np.zeros((0, 1), np.float32), np.zeros((0, 1), np.int64))
    if prop is None or prop.horizon == 0 or (budget <= 0 and policy is None):
        return empty
    k = 1 if (prop.point_mass or depth_policy) else max(1, min(int(branch_k), prop.logq.shape[1]))
    n_round = budget
    if policy is None:
        lq = prop.logq[:, :k].float().cpu().numpy()            # decoder sync: the tree is built on the host
    else:
        rs = _policy_root_stats(root_row)
        both = torch.cat([prop.logq[:, :k].float().reshape(-1), rs]).cpu().numpy()
        lq = both[:-2].reshape(-1, k)
        n_round = policy_shape(policy, lq, both[-2:], position, prev)
    ii = prop.ids[:, :k].cpu().numpy()
    tree = build_tree(lq, n_round) if n_round > 0 else None
    if tree is None or tree.size == 0:
        return empty
    return tree, lq, ii


def _dense_rows(prop: Proposal | None, branch_k: int):
    """Dense logging: the drafter's whole proposal as top-k rows on the host (nothing of it is
    verified): (logq rows, id rows), empty when the drafter proposes nothing."""
    if prop is None or prop.horizon == 0:
        return np.zeros((0, 1), np.float32), np.zeros((0, 1), np.int64)
    k = 1 if prop.point_mass else max(1, min(int(branch_k), prop.logq.shape[1]))
    return prop.logq[:, :k].float().cpu().numpy(), prop.ids[:, :k].cpu().numpy()


def _verify_tree(target, cache, root: int, tree: Tree | None, node_tokens: np.ndarray):
    """ONE target pass over the root and the tree's nodes (ancestor-only mask, positions past +
    depth): (logits rows, hidden rows, the tokens verified on the host)."""
    dev = target.device
    tokens_h = np.concatenate([[root], node_tokens]).astype(np.int64)
    depth_h = np.concatenate([[0], tree.depth if tree is not None else []]).astype(np.int64)
    logits, hid = target.verify(cache, _to_device(tokens_h, dev), _to_device(depth_h, dev),
                                _full_ancestors(tree, dev))
    return logits, hid, tokens_h


def _walk(children, node_tokens: np.ndarray, row_tok_h: list, room: int, eos_set: set) -> tuple[list, bool]:
    """The longest path the target itself takes through the tree (row indices, 0 = the root), at
    most ``room`` nodes, stopping after an accepted end-of-sequence token; and whether it ended the
    output there. A live decode stops where its output does: the walk accepts nothing past an
    accepted end-of-sequence token or past max_new_tokens (a real decoder discards those tokens,
    so counting them would inflate the logged accepted length); the round then commits no bonus
    token."""
    path, cur = [0], -1                                         # -1 = root
    while len(path) - 1 < room:
        want_tok = row_tok_h[path[-1]]
        nxt = next((c for c in children[cur + 1] if int(node_tokens[c]) == want_tok), None)
        if nxt is None:
            return path, False
        path.append(nxt + 1)
        cur = nxt
        if int(node_tokens[nxt]) in eos_set:
            return path, True
    return path, False


def _commit_forced(target, cache, past: int, forced: Forced, rounds: int, position: int, children,
                   node_tokens: np.ndarray, hid) -> tuple[list, list, torch.Tensor]:
    """Teacher forcing: commit the live round's tokens (those inside the verified tree gathered from
    it, the rest run through one causal pass). Returns (committed tokens with the next root, the
    forced accepted tokens, the hidden state that predicts the next root)."""
    n_forced = len(forced.positions)
    seg_end = forced.positions[rounds + 1] if rounds + 1 < n_forced else len(forced.stream) - 1
    forced_acc = [int(t) for t in forced.stream[position + 1:seg_end]]
    frow, fcur = [0], -1                                        # the forced tokens through the tree
    for t in forced_acc:
        nxt = next((c for c in children[fcur + 1] if int(node_tokens[c]) == t), None)
        if nxt is None:
            break
        frow.append(nxt + 1)
        fcur = nxt
    target.commit(cache, past, frow, None)
    rest = forced_acc[len(frow) - 1:]
    if rest:
        _, hx = target.extend(cache, _to_device(rest, target.device))
        hidden_next = hx[-1]
    else:
        hidden_next = hid[frow[-1]]
    committed = forced_acc + ([int(forced.stream[seg_end])] if seg_end < len(forced.stream) else [])
    return committed, forced_acc, hidden_next


@torch.inference_mode()
def decode(target, drafter: Drafter, prompt, *, budget: int = 63, branch_k: int = 8,
           max_new_tokens: int = 256, temperature: float = 0.0, generator=None,
           callbacks: Sequence = (), forced: Forced | None = None,
           eos_ids: Sequence[int] | None = None, policy=None, dense: bool = False) -> DecodeResult:
    """Decode one prompt; returns the emitted tokens and per-round summaries.

    ``policy``: a draft policy (``glance_law.policy``, or any callable ``f(RootStats) -> ints``)
    that picks each round's tree budget (``shape = "budget"``) or chain depth (``"depth"``)
    from the root's statistics; ``budget`` is then ignored. The entropy and margin a live policy
    sees are those of the target row that *predicted the root* (the previous verify pass's last
    path row, or the prefill's last row): the logged ``root_entropy`` is the verify pass's row 0,
    which exists only after this round's drafting, so a decoder cannot know it in time
    (docs/policy.md, "What the decoder knows"). They are computed on the device and travel to the
    host in the same copy as the drafter's top-k rows, so the policy adds no host-device
    synchronisation.

    ``dense``: the dense logging mode (``glance-log --dense``). Every round verifies its root
    only (autoregressive decoding, one token a round, the same greedy output), but the drafter
    still proposes at every position and the round event carries the whole proposal (``horizon``
    its length, ``budget`` 0, ``accepted`` 0), so the logger resolves the proposal against the
    target's continuation at every output position: each position is a root a trajectory
    replay (:mod:`glance_law.policy.trajectory`) can start a round from. One host copy of the
    proposal's top-k rows a round (a logging mode, not a speed mode)."""
    if dense and (policy is not None or forced is not None):
        raise ValueError("dense logging decodes autoregressively; it takes neither a policy nor a forced trajectory")
    if policy is not None and forced is not None:
        raise ValueError("teacher-forced replay takes the live run's shapes; it does not run a draft policy")
    depth_policy = policy is not None and getattr(policy, "shape", "budget") == "depth"
    dev = target.device
    eos = tuple(target.eos_ids if eos_ids is None else eos_ids)
    timer = Timer(dev)
    want = bool(callbacks)
    mark = timer.mark
    eos_set = set(eos)
    cache = target.new_cache()

    p0 = mark()
    last_logits, hidden, root, root_dev = _prefill(target, drafter, prompt, cache, forced, temperature, generator)
    p1 = mark()
    stream = [root]
    root_row = last_logits if forced is None else None         # the row that predicted the root
    rounds = 0
    prev = (-1, -1)                                            # previous round's (accepted, shape) for policies
    logs = ([], [], [])                                        # accepted, horizon, position per round
    n_forced = len(forced.positions) if forced is not None else None
    d0 = mark()
    done = forced is None and (root in eos_set or len(stream) >= max_new_tokens)
    while not done:
        if forced is not None and rounds >= n_forced:
            break
        position = len(stream) - 1
        m0 = mark()
        # 1. draft
        state = DraftState(root=root, root_dev=root_dev, stream=stream, prompt_ids=prompt.prompt_ids,
                           hidden=hidden, round=rounds)
        prop: Proposal | None = drafter.propose(state)
        # 2. tree (host, numpy)
        if dense:
            tree, (logq_h, ids_h) = None, _dense_rows(prop, branch_k)
        else:
            tree, logq_h, ids_h = _draft_tree(prop, budget, branch_k, policy, depth_policy, root_row,
                                              len(stream) - 1, prev)
        # horizon: the deepest offset the drafter proposed (the schema's L), not the tree's
        # depth - the per-offset vectors and top-k rows cover every proposed offset, so the
        # replay can place the target path at any budget
        horizon = int(logq_h.shape[0]) if (dense or tree is not None) else 0
        n = 0 if tree is None else tree.size
        node_tokens = tree.tokens(ids_h) if tree is not None else np.zeros(0, np.int64)
        m1 = mark()                                             # drafting + tree building end here
        # 3. one target pass
        past = target.cache_len(cache)
        logits, hid, tokens_h = _verify_tree(target, cache, root, tree, node_tokens)
        m2 = mark()
        # 4. the walk
        row_tok = _select(logits, temperature, generator)
        row_tok_h = row_tok.tolist()                            # decoder sync: the walk is on the host
        children = tree.children() if tree is not None else [[]]
        room = max_new_tokens - len(stream) if forced is None else 1 << 30      # see _walk
        path, ended = _walk(children, node_tokens, row_tok_h, room, eos_set)
        accepted = len(path) - 1
        prev = (accepted, 0 if tree is None else int(tree.size))
        ended = ended or accepted >= room
        if ended and tree is not None:          # cut at the output's end: horizon = accepted (a = L)
            horizon = accepted
            logq_h, ids_h = logq_h[:accepted], ids_h[:accepted]
        own = [int(tokens_h[r]) for r in path[1:]] + ([] if ended else [int(row_tok_h[path[-1]])])
        contiguous = path == list(range(len(path)))
        path_dev = _to_device(path, dev) if (want or not contiguous or drafter.wants_rows) else None
        if forced is None:
            committed = own
            hidden_next = hid[path[-1]]
            target.commit(cache, past, path, path_dev)
            obs_rows = path_dev if drafter.wants_rows else None
        else:
            if drafter.wants_rows:
                raise NotImplementedError("teacher-forced replay does not support drafters that read "
                                          "target layer states of committed rows (DFlash)")
            committed, forced_acc, hidden_next = _commit_forced(target, cache, past, forced, rounds, position,
                                                                children, node_tokens, hid)
            obs_rows = None
        m3 = mark()
        if obs_rows is not None:
            drafter.observe(obs_rows, target.cache_len(cache))
        if want:
            ev = RoundEvent(round=rounds, position=position, root=root, accepted=accepted,
                            committed=own, horizon=horizon, budget=n, tree=tree, logq=logq_h, ids=ids_h,
                            verify_logits=logits, path_rows=path_dev, row_tokens=row_tok,
                            marks=(m0, m1, m2, m3), drafter=drafter.name,
                            own_tokens=None if forced is None else own, root_logits=root_row,
                            **_proposal_fields(prop, horizon))
            for cb in callbacks:
                cb.on_round(ev)
        for log, v in zip(logs, (accepted, horizon, position)):
            log.append(v)
        rounds += 1
        stream.extend(committed)
        if forced is None:
            done = len(stream) >= max_new_tokens or any(t in eos_set for t in committed)
        elif len(committed) == len(forced_acc):
            break                                              # the forced stream ended inside this round
        hidden, root = hidden_next, stream[-1]
        root_row = logits[path[-1]] if forced is None else None
        root_dev = row_tok[path[-1]] if (forced is None) else torch.tensor(root, device=dev)
    d1 = mark()
    tokens, reason = (_emitted(stream, eos, max_new_tokens) if forced is None
                      else (list(stream[:forced.emitted]), "forced"))
    timer.resolve()
    pev = PromptEvent(prompt_tokens=prompt.n_tokens, tokens=tokens, resolve_stream=list(stream), rounds=rounds,
                      stop_reason=reason, prefill_marks=(p0, p1), decode_marks=(d0, d1), timer=timer,
                      forced=forced is not None)
    for cb in callbacks:
        cb.on_prompt_end(pev)
    return DecodeResult(tokens=tokens, rounds=rounds, accepted=logs[0], horizons=logs[1], positions=logs[2],
                        stop_reason=reason, prompt_tokens=prompt.n_tokens, prefill_ms=timer.ms(p0, p1),
                        decode_ms=timer.ms(d0, d1), resolve_stream=list(stream))


@torch.inference_mode()
def greedy_reference(target, prompt, max_new_tokens: int, eos_ids: Sequence[int] | None = None):
    """Plain greedy decoding through the model's own forward (one token per pass, the
    library's default masks and positions): the audit's reference. Returns
    (tokens, margins) with the top-1 minus top-2 logit margin of every step."""
    from transformers import DynamicCache

    eos = set(target.eos_ids if eos_ids is None else eos_ids)
    cache = DynamicCache(config=target.config)      # the library's own cache (sliding layers keep their window)
    target.adapter.before_prefill(target.model)
    out = target._call(cache, **prompt.inputs, logits_to_keep=1)
    logits = out.logits[0, -1]
    tokens, margins = [], []
    while True:
        top = torch.topk(logits.float(), 2)
        tok = int(torch.argmax(logits))
        tokens.append(tok)
        margins.append(float(top.values[0] - top.values[1]))
        if tok in eos or len(tokens) >= max_new_tokens:
            break
        out = target._call(cache, input_ids=torch.tensor([[tok]], device=target.device))
        logits = out.logits[0, -1]
    return tokens, margins
