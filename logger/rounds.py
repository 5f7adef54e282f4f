"""Rounds from dense logs: the rounds a live decoder of a given shape would have logged.

    python -m glance_log.rounds DENSE --drafter pld --draft-len 10 --budget 63 --out D

``DENSE`` is a folder written by :mod:`glance_log.dense` (one dense run per drafter: every output
position a root, the drafter's proposal there resolved against the greedy output). For greedy
decoding a live round at root ``p`` accepts the longest run of the tree's path that the greedy
output takes, and the next root is ``p + accepted + 1``; the tree is the best-first tree of the
top-``k`` rows at the round's budget (:func:`glance_law.replay.tree.build_tree`, the live
decoder's builder) and the greedy token's node at offset ``j`` is the one of rank
``target_rank[j]``. So the rounds of any chain depth (``--branch-k 1``, ``--draft-len``) or tree
(``--budget``, ``--branch-k``) are walked from the dense rows without a model: this module imports
no torch. Every column is the one ``glance-log`` writes for that round (accepted, horizon, budget,
depth, committed, the root entropy, margin, max probability and the entropy of the row that
predicted the root, the minimum margin on the path, the per-offset match / rank / log-probability
with the live logger's resolution rule, copy_len, draft_passes), except the timings (null: nothing
was timed) and, for a drafter that feeds its own tokens back (early exit), the per-offset entries
after its first own miss (unknown: ``match`` -1, ``target_rank`` -1, NaN), which no accepted run
reaches. Trees of such a drafter read those rows and are refused.

The output folder holds one ``rounds`` and one ``prompts`` file per call (condition
``matched``), so ``python -m glance_law.fit``, ``report``, ``--tail``, ``--offsets`` and ``--order``
read them as any live run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from glance_law import schema as S
from glance_law.data.outputs import check_output, make_folder
from glance_law.errors import GlanceError
from glance_law.io import LogWriter
from glance_law.replay.tree import build_tree
from glance_law.scrub import command_line, scrub

__all__ = ["DenseRun", "read_dense", "live_rounds", "convert", "main"]


class DenseRun:
    """One drafter's dense run: its run metadata, rounds (a DataFrame sorted by prompt and
    position) and prompt rows."""

    def __init__(self, run_id: str, meta: dict, rounds, prompts):
        self.run_id, self.meta, self.rounds, self.prompts = run_id, meta, rounds, prompts

    @property
    def drafter(self) -> str:
        return str(self.meta.get("drafter", {}).get("drafter", "unknown"))

    @property
    def kind(self) -> str:
        d = self.drafter
        return "early_exit" if d.startswith("early_exit") else d


def _read(files, drafter):
    import pandas as pd

    frames, metas = [], {}
    for f in files:
        pf = pq.ParquetFile(f)
        md = pf.schema_arrow.metadata or {}
        tab = pf.read().to_pandas()
        if "condition" not in tab.columns or "drafter" not in tab.columns:
            continue
        tab = tab.loc[(tab["condition"].astype(str) == S.CONDITION_DENSE) & (tab["drafter"].astype(str) == drafter)]
        if len(tab):
            frames.append(tab)
            for rid in tab["run_id"].astype(str).unique():
                metas[rid] = json.loads(md.get(S.META_RUN, b"{}").decode() or "{}")
    return (pd.concat(frames, ignore_index=True) if frames else None), metas


def read_dense(folder, drafter: str) -> DenseRun:
    """The dense run of ``drafter`` in ``folder`` (one line when there is none, or several)."""
    folder = Path(folder)
    rounds, metas = _read(sorted(folder.glob("rounds-*.parquet")), drafter)
    prompts, _ = _read(sorted(folder.glob("prompts-*.parquet")), drafter)
    if rounds is None or prompts is None:
        raise GlanceError(f"{folder}: no dense rounds of drafter {drafter!r} (write them with python -m "
                          "glance_log.dense; --drafter is a label such as pld, early_exit-6, block)")
    if len(metas) != 1:
        raise GlanceError(f"{folder}: {len(metas)} dense runs of drafter {drafter!r} ({', '.join(sorted(metas))}); "
                          "keep one per folder")
    (rid, meta), = metas.items()
    if "copy_run" not in rounds.columns:
        raise GlanceError(f"{folder}: the dense rounds of {drafter!r} have no copy_run column: they were not "
                          "written by python -m glance_log.dense")
    rounds = rounds.sort_values(["prompt_id", "position"], kind="stable").reset_index(drop=True)
    prompts = prompts.drop_duplicates("prompt_id").set_index("prompt_id")
    return DenseRun(rid, meta, rounds, prompts)


def _copy_len(runs, p: int, c: int):
    """copy_len of output tokens p+1 .. p+c from the dense rows' copy_run (runs[i] at row i starts
    at output token i + 1)."""
    if c == 0 or runs is None:
        return None if runs is None else 0
    ends = p + c + 1 - np.arange(p + 1, p + c + 1)          # room from output token i to the end
    return int(np.max(np.minimum(runs[p:p + c], ends)))


def _resolve(rank_row, logq_row, topk, known: int, L: int, k: int, m: int, point_mass: bool):
    """The live logger's per-offset match / target_rank / target_logq for offsets 1..L; ``known``
    offsets have a target token and a row; ``m`` offsets had the drafter's full rows."""
    match = np.full(L, -1, np.int8)
    rank = np.full(L, -1, np.int32)
    tlq = np.full(L, np.nan, np.float32)
    for j in range(min(L, known)):
        r = int(rank_row[j])
        if r < 0:
            continue
        match[j] = 1 if r == 0 else 0
        if r < k and topk[j, r] != -np.inf:
            rank[j], tlq[j] = r, topk[j, r]
        elif j < m:
            rank[j], tlq[j] = max(r, k), logq_row[j]
        elif point_mass:
            rank[j], tlq[j] = k, -np.inf
        else:
            rank[j] = k
    return match, rank, tlq


def _walk(tree, rank_row, known: int, room: int) -> int:
    """Accepted length: the longest tree path whose node at offset j has the greedy token's rank."""
    if tree is None:
        return 0
    children = tree.children()
    cur, a = -1, 0
    while a < room and a < known:
        r = int(rank_row[a])
        nxt = next((c for c in children[cur + 1] if int(tree.choice[c]) == r), None) if r >= 0 else None
        if nxt is None:
            break
        cur, a = nxt, a + 1
    return a


def _prompt_rounds(d: DenseRun, g, sub, shape: dict, run_id: str, label: str):
    """The live rounds of one prompt walked from its dense rows ``sub`` (positions 0 .. N-2)."""
    N = len(g)
    kind, D, budget, k = d.kind, shape["draft_len"], shape["budget"], shape["k"]
    hz = sub["horizon"].to_numpy(np.int64)
    runs = None if sub["copy_run"].isna().any() else sub["copy_run"].to_numpy(np.int64)
    margin = sub["root_margin"].to_numpy(np.float64)
    point_mass = kind == "pld"
    rows, p, r = [], 0, 0
    while p < N - 1:
        row = sub.iloc[p]
        kd = (len(row["topk_logq"]) // hz[p]) if hz[p] else 1
        topk_all = np.asarray(row["topk_logq"], np.float64).reshape(hz[p], kd) if hz[p] else np.zeros((0, kd))
        rank_all = np.asarray(row["target_rank"], np.int64)
        lq_all = np.asarray(row["target_logq"], np.float64)
        if kind == "pld":
            L = int(min(hz[p], D))           # the continuation found, cut at the draft length
            known = L
        elif kind == "early_exit":
            L = D                            # it always drafts D tokens; rows after its first own miss unknown
            known = int(min(hz[p], D))
        else:
            L = known = int(hz[p])
        room = N - 1 - p
        tree = None
        if L > 0:
            kk = 1 if point_mass else min(k, kd)
            lq = np.full((L, kk), np.nan)
            lq[:known] = topk_all[:known, :kk]
            if kk == 1:
                lq[np.isnan(lq)] = 0.0       # a chain's shape does not depend on its values
            tree = build_tree(lq, budget)
            if tree.size == 0:
                tree = None
        else:
            kk = 1
            lq = np.zeros((0, 1))
        a = _walk(tree, rank_all, min(known, room), room)
        ended = a == room
        horizon = (a if ended else L) if tree is not None else 0
        committed = [int(t) for t in g[p + 1:p + 1 + a + (0 if ended else 1)]]
        m = min(a + 1, horizon) if kind != "pld" else 0
        kn = min(known, horizon, N - 1 - p)
        match, rank, tlq = _resolve(rank_all, lq_all, topk_all[:, :kk] if L else topk_all, kn, horizon, kk, m,
                                    point_mass)
        n_rows = max(min(len(committed), a + 1), 1)
        passes = {"pld": 0, "block": 1}.get(kind, D + (1 if r == 0 else 0))
        rows.append({
            "run_id": run_id, "task": row["task"], "prompt_id": row["prompt_id"], "round": r,
            "root_entropy": float(row["root_entropy"]), "accepted": a, "horizon": horizon,
            "condition": S.CONDITIONS_DEFAULT, "drafter": label, "position": p,
            "root_margin": float(row["root_margin"]), "root_pmax": float(row["root_pmax"]),
            "min_path_margin": float(margin[p:p + n_rows].min()) if committed else None,
            "pred_entropy": None if row["pred_entropy"] is None or np.isnan(row["pred_entropy"])
            else float(row["pred_entropy"]),
            "budget": 0 if tree is None else tree.size,
            "depth": 0 if tree is None else min(tree.max_depth, horizon),
            "draft_passes": passes, "committed": committed, "match": match, "target_logq": tlq,
            "target_rank": rank, "topk_logq": lq[:horizon].reshape(-1).astype(np.float32),
            "copy_len": _copy_len(runs, p, len(committed)),
            "draft_ms": None, "verify_ms": None, "round_ms": None,
        })
        p += len(committed)
        r += 1
    return rows


def live_rounds(d: DenseRun, shape: dict, run_id: str, label: str):
    """(rounds rows, prompt rows) of every prompt of the dense run, walked at ``shape``."""
    out_r, out_p = [], []
    for pid, sub in d.rounds.groupby("prompt_id", sort=True):
        if pid not in d.prompts.index:
            raise GlanceError(f"dense run {d.run_id}: prompt {pid} has rounds but no prompt row (an interrupted "
                              "write: rerun python -m glance_log.dense into the folder to complete it)")
        pr = d.prompts.loc[pid]
        g = [int(t) for t in pr["tokens"]]
        if len(sub) != max(len(g) - 1, 0) or not np.array_equal(sub["position"].to_numpy(), np.arange(len(sub))):
            raise GlanceError(f"dense run {d.run_id}: prompt {pid} has {len(sub)} rows for {len(g)} output tokens "
                              "(a dense run logs every position 0 .. N-2)")
        rows = _prompt_rounds(d, g, sub.reset_index(drop=True), shape, run_id, label)
        out_r.extend(rows)
        out_p.append({"run_id": run_id, "prompt_id": pid, "task": pr["task"], "condition": S.CONDITIONS_DEFAULT,
                      "drafter": label, "prompt_tokens": int(pr["prompt_tokens"]), "new_tokens": len(g),
                      "prefill_ms": None, "decode_ms": None, "rounds": len(rows),
                      "stop_reason": pr["stop_reason"], "tokens": g})
    return out_r, out_p


def _shape(d: DenseRun, draft_len, budget: int, branch_k: int) -> dict:
    cfg = d.meta.get("drafter", {})
    H = int(cfg.get("horizon", 0))
    kind = d.kind
    if kind == "block":
        if draft_len not in (None, H):
            raise GlanceError(f"--draft-len {draft_len}: a block head drafts its own {H} offsets")
        draft_len = H
    draft_len = H if draft_len is None else int(draft_len)
    if not 1 <= draft_len <= H:
        raise GlanceError(f"--draft-len {draft_len}: the dense run of {d.drafter} holds offsets 1..{H}")
    if budget < 1 or branch_k < 1:
        raise GlanceError("--budget and --branch-k must be >= 1")
    k = 1 if kind == "pld" else int(branch_k)
    if kind == "early_exit" and k > 1:
        raise GlanceError(f"--branch-k {branch_k}: {d.drafter} feeds its own tokens back, and the dense pass holds "
                          "its rows only while they match the greedy output; trees read the rows after its first "
                          "miss: use --branch-k 1 (a chain)")
    kd = int(d.meta.get("branch_k", k) or k)
    if k > kd:
        raise GlanceError(f"--branch-k {branch_k}: the dense run kept the top {kd} per offset")
    return {"draft_len": draft_len, "budget": int(budget), "k": k}


def convert(dense, drafter: str, out, *, draft_len=None, budget: int = 63, branch_k: int = 8,
            label: str | None = None, command: str | None = None) -> dict:
    """Write the live rounds of ``drafter`` at the given shape from the dense folder into ``out``."""
    d = read_dense(dense, drafter)
    shape = _shape(d, draft_len, budget, branch_k)
    label = label or d.drafter
    key = {"dense_run": d.run_id, **shape, "label": label}
    rid = f"{d.meta.get('task', 'all')}-{label}-" + hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    rows, prompts = live_rounds(d, shape, rid, label)
    if not rows:
        raise GlanceError(f"dense run {d.run_id}: no rounds (every output has one token)")
    dcfg = dict(d.meta.get("drafter", {}))
    dcfg["horizon"] = shape["draft_len"]
    if "branch_k" in dcfg:
        dcfg["branch_k"] = shape["k"]
    meta = {k: v for k, v in d.meta.items() if k not in ("dense",)}
    meta.update(run_id=rid, condition=S.CONDITIONS_DEFAULT, drafter=dcfg, budget=shape["budget"],
                branch_k=shape["k"], command=scrub(command or ""),
                from_dense={"dense_run": d.run_id, "tool": "python -m glance_log.rounds",
                            "rule": "greedy rounds walked from the dense proposals; timings not measured"})
    out = make_folder(check_output(out, [dense], folder=True))
    stem = f"{rid}-{S.CONDITIONS_DEFAULT}"
    for kind, data in ((S.KIND_ROUNDS, rows), (S.KIND_PROMPTS, prompts)):
        w = LogWriter(out, kind, run=meta, stem=stem, flush_rows=10**9, flush_seconds=float("inf"))
        w.extend(data)
        w.close()
    return {"run_id": rid, "prompts": len(prompts), "rounds": len(rows), "out": str(out),
            "tau": float(np.mean([r["accepted"] + 1 for r in rows]))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glance_log.rounds", description=__doc__.split("\n")[0])
    ap.add_argument("dense", help="a folder written by python -m glance_log.dense")
    ap.add_argument("--drafter", required=True, help="the dense run's drafter label: pld, early_exit-K, block")
    ap.add_argument("--draft-len", type=int, default=None, help="chain depth / draft length (default: the dense one)")
    ap.add_argument("--budget", type=int, default=63, help="tree nodes offered to the verifier (as glance-log)")
    ap.add_argument("--branch-k", type=int, default=8, help="top-k per offset (1: a chain; as glance-log)")
    ap.add_argument("--label", default=None, help="the arm's label (default: the drafter's)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        res = convert(args.dense, args.drafter, args.out, draft_len=args.draft_len, budget=args.budget,
                      branch_k=args.branch_k, label=args.label,
                      command=command_line("python -m glance_log.rounds", argv))
    except GlanceError as exc:
        print(f"glance_log.rounds: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
