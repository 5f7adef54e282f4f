"""Prediction vs reality for an exported draft policy, on the embedded default, in one run.

    nice -n 15 .venv/bin/python benchmarks/bench_policy.py                  # docvqa, budget 15, 2 x 100 prompts
    .venv/bin/python benchmarks/bench_policy.py --task chartqa --budget 31 --n 40

1. **Logs.** Training prompts are decoded with the block head at two fixed budgets (``--budget``
   and 63, so the round-cost regression identifies the cost of a node); held-out prompts at 63.
2. **Fit and export.** ``python -m glance_law.policy`` on the training logs (prompt-grouped
   held-out search) writes ``policy.json``.
3. **Prediction.** On the held-out prompts' logs: replayed tokens per round (accepted + 1) of
   the exported policy and of the fixed budget, and the modelled ms per token (the training
   logs' round-cost regression).
4. **Reality.** The held-out prompts are decoded live with ``decode(policy=...)`` and with the
   fixed budget, alternating the order per prompt and repetition; tokens per round, tokens per
   second, and the policy/fixed ratios with prompt-bootstrap intervals. The live policy run is
   also logged, so the script can say what the policy saw (the entropy of the row that
   predicted the root) against the logged root entropy it was fitted on (verify row 0), and how
   often the offline policy would have chosen another shape on the same live rounds.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def _log(decode, t, dr, items, out, run_id, task, budget, mnt, policy=None, seen=None):
    from glance_log.record import RoundLogger

    lg = RoundLogger(out, run_id=run_id, task=task, tokenizer=t.tokenizer, drafter="block",
                     run={"run_id": run_id, "budget": budget})
    for it, pr in items:
        lg.begin_prompt(it.prompt_id, [it.reference] if it.reference else None)
        decode(t, dr, pr, budget=budget, branch_k=8, max_new_tokens=mnt, callbacks=[lg], policy=policy)
    lg.close()


def _boot(num_a, den_a, num_b, den_b, rng, B=2000):
    """Ratio of (sum num_a / sum den_a) over (sum num_b / sum den_b) with a prompt bootstrap."""
    a = [np.asarray(x, float) for x in (num_a, den_a, num_b, den_b)]
    n = a[0].size
    idx = rng.integers(0, n, (B, n))
    r = (a[0][idx].sum(1) / a[1][idx].sum(1)) / (a[2][idx].sum(1) / a[3][idx].sum(1))
    est = (a[0].sum() / a[1].sum()) / (a[2].sum() / a[3].sum())
    return float(est), float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="docvqa")
    ap.add_argument("--budget", type=int, default=15, help="target mean tree budget (or depth with --shape depth)")
    ap.add_argument("--shape", choices=("budget", "depth"), default="budget",
                    help="depth: chain policies on the block head's top-1 path, against a fixed-depth chain")
    ap.add_argument("--feature", default="auto", help="entropy the fits read (auto: pred_entropy)")
    ap.add_argument("--n", type=int, default=100, help="prompts per half (training, held-out)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from glance_log.decode import decode
    from glance_log.drafters import make_drafter
    from glance_log.models import load_target
    from glance_log.run import default_block, default_model
    from glance_log.tasks import load_items

    from glance_law import read_logs
    from glance_law.policy import cli as pcli
    from glance_law.policy import cost_model, load_policy, prepare

    if not (default_model() / "config.json").exists():
        print("the embedded default models are missing (data/models)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-policy-"))
    t = load_target(default_model(), "fp32", args.device)
    dr = make_drafter("block", t, draft_model=default_block(), branch_k=8)
    items = load_items(args.task, None, n=2 * args.n, seed=0)
    enc = [(it, t.encode(it.prompt)) for it in items]
    train, test = enc[:args.n], enc[args.n:]
    print(f"embedded default on {t.device}; task {args.task}; {len(train)} training + {len(test)} held-out prompts; "
          f"target budget {args.budget}; max_new_tokens {args.max_new_tokens}; torch threads {torch.get_num_threads()}")
    decode(t, dr, train[0][1], budget=63, branch_k=8, max_new_tokens=8)            # warm-up
    w0 = time.perf_counter()
    _log(decode, t, dr, train, tmp / "train", "train-fixed", args.task, args.budget, args.max_new_tokens)
    _log(decode, t, dr, train, tmp / "train", "train-63", args.task, 63, args.max_new_tokens)
    _log(decode, t, dr, test, tmp / "test", "test-63", args.task, 63, args.max_new_tokens)
    print(f"logging: {time.perf_counter() - w0:.1f} s")

    pj = tmp / "policy.json"
    rc = pcli.main([str(tmp / "train"), "--budget", str(args.budget), "--drafter", "block", "--bootstrap", "200",
                    "--shape", args.shape, "--feature", args.feature, "--out", str(pj), "--format", "markdown"])
    if rc:
        return rc
    policy, fit = load_policy(pj)
    if policy.family == "fixed":
        print("the search exported the fixed shape (no family beat it held-out); comparing the rescue-keyed fit anyway")
        from glance_law.policy import fit_family
        dtr = prepare(read_logs(str(tmp / "train")), drafter="block", shape=args.shape, feature=args.feature)
        policy, why = fit_family("keyed-rescue" if args.shape == "budget" else "gated-cumprob", dtr.take(np.flatnonzero(~dtr.cut)), args.budget,
                                 max_size=min(255, max(63, 4 * args.budget)))
        if policy is None:
            print(f"no keyed policy can be fitted on these training logs ({why}); nothing to compare")
            return 0

    # prediction on the held-out prompts' logs
    tl = read_logs(str(tmp / "test"))
    d = prepare(tl, drafter="block", shape=args.shape, feature=args.feature)
    d = d.take(np.flatnonzero(~d.cut))     # as the evaluation does: cut proposals say nothing about a shape
    notes: list = []
    cm = cost_model(read_logs(str(tmp / "train")), "block", notes=notes)
    s_pol = np.minimum(policy(d.stats), d.cap)
    s_fix = np.minimum(np.full(d.rounds, args.budget), d.cap)
    pred = {}
    for name, s in (("policy", s_pol), ("fixed", s_fix)):
        tok = d.accepted_at(s) + 1.0
        ms = cm.ms(s) if cm.identified else np.full(d.rounds, np.nan)
        pred[name] = {"tokens_per_round": float(tok.mean()), "mean_shape": float(s.mean()),
                      "ms_per_token": float(ms.sum() / tok.sum())}

    # reality: both arms live on the held-out prompts, alternating
    from glance_log.record import RoundLogger

    seen = []

    def traced(stats, _p=policy):
        out = _p(stats)
        seen.append((float(stats.entropy[0]), int(out[0])))
        return out
    traced.shape = policy.shape
    live = {k: {"tokens": [], "rounds": [], "ms": [], "emitted": []} for k in ("policy", "fixed")}
    lg = RoundLogger(tmp / "live", run_id="live-policy", task=args.task, tokenizer=t.tokenizer, drafter="block")
    for rep in range(args.repeat):
        for i, (it, pr) in enumerate(test):
            order = ("policy", "fixed") if (i + rep) % 2 == 0 else ("fixed", "policy")
            for arm in order:
                cbs = []
                if arm == "policy" and rep == 0:
                    lg.begin_prompt(it.prompt_id, None)
                    cbs = [lg]
                r = decode(t, dr, pr, budget=args.budget, branch_k=8 if args.shape == "budget" else 1,
                           max_new_tokens=args.max_new_tokens,
                           policy=traced if arm == "policy" else None, callbacks=cbs)
                L = live[arm]
                L["tokens"].append(int(np.sum(r.accepted)) + r.rounds)
                L["rounds"].append(r.rounds)
                L["ms"].append(r.decode_ms)
                L["emitted"].append(len(r.tokens))
    lg.close()
    rng = np.random.default_rng(0)
    out = {"task": args.task, "budget": args.budget, "policy": {"family": policy.family, "params": policy.describe()},
           "heldout_search": fit.get("heldout"), "predicted": pred, "cost_model": notes, "live": {}}
    for arm, L in live.items():
        out["live"][arm] = {"tokens_per_round": float(np.sum(L["tokens"]) / np.sum(L["rounds"])),
                            "tokens_per_s": float(np.sum(L["emitted"]) / (np.sum(L["ms"]) / 1e3)),
                            "ms_per_token": float(np.sum(L["ms"]) / np.sum(L["emitted"]))}
    P, F = live["policy"], live["fixed"]
    out["live"]["ratio_tokens_per_round"] = _boot(P["tokens"], P["rounds"], F["tokens"], F["rounds"], rng)
    out["live"]["speedup_tokens_per_s"] = _boot(P["emitted"], P["ms"], F["emitted"], F["ms"], rng)
    out["predicted"]["ratio_tokens_per_round"] = pred["policy"]["tokens_per_round"] / pred["fixed"]["tokens_per_round"]
    out["predicted"]["speedup_modelled"] = pred["fixed"]["ms_per_token"] / pred["policy"]["ms_per_token"]

    # why the prediction misses: what the live policy saw vs what it was fitted on
    lv = read_logs(str(tmp / "live")).frame
    lv = lv[lv["horizon"] > 0]
    dl = prepare(lv, drafter="block", shape=args.shape, feature=args.feature)
    seen_h = np.array([h for h, _ in seen[:len(seen)]])
    off_shapes = np.minimum(policy(dl.stats), dl.cap)
    live_shapes = lv["budget"].to_numpy()
    n = min(len(off_shapes), len(live_shapes))
    out["why"] = {
        "live_rounds_logged": int(len(lv)),
        "mean_live_shape": float(live_shapes.mean()), "mean_offline_shape_same_rounds": float(off_shapes.mean()),
        "share_rounds_other_shape": float(np.mean(off_shapes[:n] != live_shapes[:n])),
        "share_other_shape_not_cut": float(np.mean((off_shapes[:n] != live_shapes[:n])[~dl.cut[:n]])),
        "rounds_cut_at_output_end": int(dl.cut.sum()),
        "feature_fitted_on": d.feature,
        "entropy_seen_mean": float(seen_h.mean()) if seen_h.size else None,
        "pred_entropy_logged_mean": float(lv["pred_entropy"].mean()),
        "root_entropy_logged_mean": float(lv["root_entropy"].mean()),
        "live_vs_replayed_tokens_same_rounds": [float((lv["accepted"].to_numpy() + 1).mean()),
                                                float((dl.accepted_at(live_shapes) + 1).mean())],
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
