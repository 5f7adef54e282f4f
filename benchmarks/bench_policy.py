"""Prediction vs reality for an exported draft policy, in one run (docs/policy.md section 5).

    flock /tmp/glance-bench.lock nice -n 5 env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_policy.py
    ... benchmarks/bench_policy.py --model gemma-3-270m --drafter pld --budget 3 --n 6 --max-new-tokens 96
    ... benchmarks/bench_policy.py --model gemma-3-270m --drafter early_exit --exit-layer 12 --draft-len 3 ...

1. **Logs.** Training prompts are logged dense (``decode(dense=True)``: the drafter's proposal at
   every output position, so every position is a root) and once at the fixed shape ``--budget``
   (with the dense rounds, which are shape-0 rounds, the round-cost regression identifies the
   cost of a node), one prompt at a time with the two arms' order rotating (the machine's load
   drifts between phases; interleaved arms share it).
2. **Search and export.** ``python -m glance_law.policy`` on the training logs: the trajectory
   replay's prompt-grouped held-out search (each family's threshold fitted on its own simulated
   run); the best family is exported (if the search exports the fixed shape, the best non-fixed
   family is still compared, and the script says so).
3. **The policy's host work.** ``--calib`` training prompts (default a fifth of ``--n``) decoded
   live and logged with the exported policy (its run metadata says so) and with the two fixed
   shapes below (no policy), the arms' order rotating per prompt, before any held-out prompt is
   decoded. The round-cost model is refitted on these interleaved runs alone (the training logs,
   written in phases minutes apart, carry the machine's load drift between phases): constant,
   node and tree costs where they vary (one term per shape where few shapes are logged), a turn's
   first round, and the policy's host work a round (``glance_law.policy.cost.cost_draws``: the fit
   and 400 prompt-bootstrap refits, studentized for few prompts).
4. **Prediction.** The search's held-out row (cross-validated on the training prompts), and on
   the held-out prompts' own dense logs (``--no-dense-test`` skips them) the trajectory replay of
   the policy and of the two fixed shapes whose runs' mean shapes bracket the policy's on the
   training prompts (``equal_shape`` false: the live arms did not bracket it after all); modelled
   tokens/s from the refitted cost model, the policy's rounds paying its host work, the interval
   over the held-out prompts and the cost model's refits together (the search's own cost model,
   with no policy run and so no host work, is kept beside it for reference).
5. **Reality.** The held-out prompts decoded live with the policy and with those two fixed shapes
   (a fixed shape without a policy: no root statistics, no policy call), the order rotating per
   prompt and repetition. The fixed shape at the policy's mean shape is the
   mix of the two fixed arms whose mean shape (every round counted, shape-0 rounds included)
   equals the policy's; tokens per round (accepted + 1) and tokens per second of the policy over
   it, with prompt-bootstrap intervals; the best fixed arm's tokens per second beside them.

The JSON (``--json``) holds every figure; the last lines printed give the predicted (held-out
prompts) and live ratios with their intervals and say whether the live ratio lies inside the
predicted interval.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Shapes:
    """A decoder callback keeping each round's shape (tree nodes; the depth of a chain)."""

    def __init__(self):
        self.shapes = []

    def on_round(self, ev):
        self.shapes.append(int(ev.budget))

    def on_prompt_end(self, ev):
        pass


def _items(args, target):
    """(prompt id, encoded prompt) pairs: the embedded suite's task, or first turns of a question file."""
    if args.data:
        from glance_log import questions as Q

        qs = Q.load_questions(args.data, "all", None, seed=0, turns=1)
        qs = sorted(qs, key=lambda q: (q.prompt_ids[0]))
        rng = np.random.default_rng(0)
        qs = [qs[i] for i in rng.permutation(len(qs))[:2 * args.n]]
        return [(q.prompt_ids[0], Q.encode_conversation(target, q.turns[:1], [])) for q in qs]
    from glance_log.tasks import load_items

    return [(it.prompt_id, target.encode(it.prompt)) for it in load_items(args.task, None, n=2 * args.n, seed=0)]


def _log(decode, t, dr, items, out, run_id, drafter, args, *, dense=False, budget=0, k=1, policy=None):
    from glance_law.policy import policy_to_dict
    from glance_log.record import RoundLogger

    run = {"run_id": run_id, "budget": budget}
    if policy is not None:
        run["policy"] = policy_to_dict(policy)          # the cost fit reads the policy's runs from this
    lg = RoundLogger(out, run_id=run_id, task=args.task, tokenizer=t.tokenizer, drafter=drafter,
                     condition="dense" if dense else "matched", run=run)
    for pid, pr in items:
        lg.begin_prompt(pid, None)
        decode(t, dr, pr, budget=budget, branch_k=k, max_new_tokens=args.max_new_tokens, callbacks=[lg], dense=dense,
               eos_ids=args.eos, policy=policy)
    lg.close()


def _log_training(decode, t, dr, items, out, label, args):
    """The training prompts logged dense and at the fixed shape ``--budget``, one prompt at a time, the
    two arms' order rotating: on a shared machine the load drifts over minutes, and arms logged in
    phases (every prompt dense, then every prompt fixed) price that drift as the difference between
    a dense round and a fixed one (docs/policy.md section 5)."""
    arms = [("train-dense", dict(dense=True, k=args.branch_k)),
            ("train-fixed", dict(budget=args.budget, k=args.branch_k if args.shape == "budget" else 1))]
    for i, item in enumerate(items):
        for run_id, kw in arms[i % 2:] + arms[:i % 2]:
            _log(decode, t, dr, [item], out / run_id / str(i), run_id, label, args, **kw)


def _calibrate(decode, t, dr, items, out, label, policy, lo, hi, args):
    """The policy's host work, measured before the held-out arms: training prompts decoded live and
    logged with the exported policy (its run metadata says so) and with the fixed shapes lo and hi
    (no policy), one prompt at a time, the arms' order rotating."""
    k = args.branch_k if args.shape == "budget" else 1
    arms = [("calib-policy", 0, policy), ("calib-fixed-hi", hi, None), ("calib-fixed-lo", lo, None)]
    arms = arms if hi != lo else arms[:2]
    for i, item in enumerate(items):
        for run_id, n, pol in arms[i % len(arms):] + arms[:i % len(arms)]:
            _log(decode, t, dr, [item], out / run_id / str(i), run_id, label, args, budget=n, k=k, policy=pol)


def _mix(A, B, shape):
    """Per-prompt sums of the mix of two fixed arms whose mean shape (shape sum over rounds) is
    ``shape``: rounds of A weighted w, of B 1 - w (w in [0, 1], closed form)."""
    SA, SB, RA, RB = A["shape"].sum(), B["shape"].sum(), A["rounds"].sum(), B["rounds"].sum()
    den = SA - SB - shape * (RA - RB)
    w = float(np.clip((shape * RB - SB) / den, 0.0, 1.0)) if den != 0 else 1.0
    return {k: w * A[k] + (1 - w) * B[k] for k in A}, w


def _compare(P, A, B, rng, B_boot=2000, has_time=True, ms_draws=()) -> dict:
    """Policy vs the fixed mix at its mean shape: point and prompt-bootstrap 95% intervals of the
    tokens-per-round ratio (and tokens/s ratio when timed), the mean shapes, shape-0 shares.
    ``ms_draws``: per-prompt modelled ms of (P, A, B) under each refit of the cost model; bootstrap
    replicate b then reads draw b (cycling), so the interval carries the cost model's uncertainty
    (its prompts are the training prompts, resampled independently of these)."""
    S = P["shape"].sum() / P["rounds"].sum()
    M, w = _mix(A, B, S)
    def stats(idx, b=None):
        def r(X, a, b):
            return X[a][idx].sum() / X[b][idx].sum()
        out = {"tokens_ratio": r(P, "tokens", "rounds") / r(M, "tokens", "rounds")}
        if has_time:
            if b is None:
                out["speed_ratio"] = r(P, "emitted", "ms") / r(M, "emitted", "ms")
            else:
                pm, am, bm = ms_draws[b % len(ms_draws)]
                mm = w * am + (1 - w) * bm
                out["speed_ratio"] = (P["emitted"][idx].sum() / pm[idx].sum()) / (M["emitted"][idx].sum() / mm[idx].sum())
        return out
    n = P["rounds"].size
    point = stats(np.arange(n))
    draws = [stats(rng.integers(0, n, n), b if len(ms_draws) else None) for b in range(B_boot)]
    sa, sb = A["shape"].sum() / A["rounds"].sum(), B["shape"].sum() / B["rounds"].sum()
    res = {"policy_mean_shape": S, "policy_share_shape0": P["zero"].sum() / P["rounds"].sum(),
           "fixed_mean_shapes": [float(sb), float(sa)], "equal_shape": bool(min(sa, sb) <= S <= max(sa, sb)),
           "policy_tokens_per_round": P["tokens"].sum() / P["rounds"].sum(),
           "fixed_tokens_per_round_at_equal_shape": M["tokens"].sum() / M["rounds"].sum(), "mix_weight_upper": w}
    for k, v in point.items():
        d = np.array([x[k] for x in draws])
        res[k] = [float(v), float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))]
    if has_time:
        res["policy_tokens_per_s"] = 1e3 * P["emitted"].sum() / P["ms"].sum()
        best = max((A, B), key=lambda X: X["emitted"].sum() / X["ms"].sum())
        res["best_fixed_tokens_per_s"] = 1e3 * best["emitted"].sum() / best["ms"].sum()
    return res


def _sums(rounds_list):
    """Per-prompt sums from [(accepted list, shape list, emitted, ms), ...]."""
    keys = ("rounds", "tokens", "shape", "zero", "emitted", "ms")
    out = {k: np.zeros(len(rounds_list)) for k in keys}
    for i, (acc, sh, em, ms) in enumerate(rounds_list):
        acc, sh = np.asarray(acc), np.asarray(sh)
        out["rounds"][i], out["tokens"][i] = acc.size, (acc + 1).sum()
        out["shape"][i], out["zero"][i] = sh.sum(), (sh == 0).sum()
        out["emitted"][i], out["ms"][i] = em, ms
    return out


def _predicted_on_test(test_dir, drafter, policy, shape, lo, hi, cost, rng, draws=()):
    """The trajectory replay of the policy and the fixed shapes lo, hi on the held-out prompts' dense
    logs; modelled ms from ``cost`` (the policy's rounds with its host work), the interval over
    the cost model's refits ``draws`` too."""
    from glance_law import read_logs
    from glance_law.policy import FixedPolicy
    from glance_law.policy.trajectory import prepare_dense, simulate, trajectory_sums

    d = prepare_dense(read_logs(str(test_dir)), drafter=drafter, shape=shape)
    runs = {"P": (simulate(d, policy), True), "A": (simulate(d, FixedPolicy(shape=shape, size=hi)), False),
            "B": (simulate(d, FixedPolicy(shape=shape, size=lo)), False)}
    def sums(tr, pol):
        s = trajectory_sums(d, tr, cost, policy=pol)
        s["emitted"] = d.n_out.astype(float)
        s.setdefault("ms", np.full(d.prompts, np.nan))
        return s
    P, A, B = (sums(*runs[k]) for k in "PAB")
    ms_draws = [tuple(trajectory_sums(d, tr, c, policy=pol)["ms"] for tr, pol in runs.values()) for c in draws
                if c.identified]
    out = _compare(P, A, B, rng, has_time=bool(np.isfinite(P["ms"]).all()), ms_draws=ms_draws)
    if "policy_tokens_per_s" in out:
        out["modelled"] = True
        out["cost_model_draws"] = len(ms_draws)
    return out, [k[1] for k in d.keys]


def _search(train_dir, args, drafter, pj):
    from glance_law.policy import cli as pcli
    from glance_law.policy import policy_to_dict

    argv = [str(train_dir), "--budget", str(args.budget), "--drafter", drafter, "--shape", args.shape,
            "--bootstrap", str(args.bootstrap), "--out", str(pj)]
    ns = pcli.build_parser().parse_args(argv)
    res, pol, fit = pcli.search([str(train_dir)], ns)
    print(res.summary("markdown"))
    pj.write_text(json.dumps(policy_to_dict(pol, fit), indent=2, sort_keys=True, default=float) + "\n")
    h = res.heldout()
    note = None
    if pol.family == "fixed":
        fam = h.loc[h["family"] != "fixed"].sort_values("gain", ascending=False)
        if fam.empty:
            return None, res, None, "no family could be fitted"
        name = str(fam.iloc[0]["family"])
        pol = res.policies[name]
        note = f"the search exported the fixed shape (no family beat it held-out); comparing {name} anyway"
    row = h.loc[h["family"] == (pol.family if pol.family == "fixed" else _row_name(h, res, pol))].iloc[0].to_dict()
    return pol, res, row, note


def _row_name(h, res, pol):
    return next(n for n, p in res.policies.items() if p is pol)


def _bracket(d, policy, shape):
    """The fixed shapes whose runs' mean shapes (shape-0 rounds counted) bracket the policy's on the
    training prompts' dense logs: a fixed depth n of prompt lookup drafts less than n on average
    (rounds without a match draft nothing, proposals can be shorter), so the integers around the
    policy's mean shape need not bracket it."""
    from glance_law.policy import FixedPolicy
    from glance_law.policy.trajectory import simulate

    S = simulate(d, policy).shape.mean()
    top = int(d.rows.cap.max(initial=0)) if shape == "depth" else 4 * int(np.ceil(S)) + 4
    m = np.array([simulate(d, FixedPolicy(shape=shape, size=n)).shape.mean() for n in range(top + 1)])
    lo = int(np.flatnonzero(m <= S).max(initial=0))
    hi = int(np.flatnonzero(m >= S).min(initial=top))
    return lo, hi


def _live(decode, t, dr, test, policy, lo, hi, args):
    """Both fixed arms (a fixed shape, no policy: no root statistics, no policy call) and the policy
    arm on every held-out prompt, order rotating."""
    arms = {"policy": (policy, 0), "hi": (None, hi), "lo": (None, lo)}     # fixed arms: no policy at all
    names = list(arms) if hi != lo else ["policy", "hi"]
    rec = {a: [[] for _ in test] for a in names}
    k = args.branch_k if args.shape == "budget" else 1
    for rep in range(args.repeat):
        for i, (_, pr) in enumerate(test):
            rot = (i + rep) % len(names)
            for a in names[rot:] + names[:rot]:
                cb = _Shapes()
                r = decode(t, dr, pr, budget=arms[a][1], branch_k=k, max_new_tokens=args.max_new_tokens,
                           policy=arms[a][0], callbacks=[cb], eos_ids=args.eos)
                rec[a][i].append((r.accepted, cb.shapes, len(r.tokens), r.decode_ms))
    out = {}
    for a in names:
        per = [(sum((x[0] for x in reps), []), sum((x[1] for x in reps), []), sum(x[2] for x in reps),
                sum(x[3] for x in reps)) for reps in rec[a]]
        out[a] = _sums(per)
    out.setdefault("lo", out["hi"])
    return out


def _calibrated_cost(tmp, label):
    """The round-cost fit over the calibration runs alone (the policy's and the fixed shapes' rounds,
    interleaved per prompt), the policy's host work a fitted term; its prompt-bootstrap refits; and a
    record. The training logs stay out: they are written in phases minutes apart (every prompt dense,
    then every prompt fixed), and on a shared machine the load drifts between phases (docs/policy.md
    section 5: a fit mixing them put the host work at 0.04 ms where the interleaved runs show 2.3)."""
    from glance_law import read_logs
    from glance_law.policy.cost import cost_draws

    logs = read_logs([str(tmp / "calib")])
    fit, draws = cost_draws(logs, drafter=label, condition=None, n_boot=400)
    terms = {r.term: [float(r.estimate), float(r.estimate_lo), float(r.estimate_hi)] for r in fit.terms.itertuples()}
    print(fit.summary("markdown"))
    return fit.model, draws, {"terms": terms, "rounds": fit.rounds, "prompts_clusters": fit.prompts,
                              "notes": list(fit.notes), "draws": len(draws)}


def _fmt(v) -> str:
    return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"


def _summary(out) -> list:
    """Readable lines: predicted (search; held-out prompts) and live ratios with their intervals,
    and whether each live ratio lies inside the held-out prompts' predicted interval."""
    live, pred, s = out["live"], out.get("predicted_test_prompts"), out["predicted_heldout_search"]
    lines = [f"search (held-out folds, training prompts): gain {s['gain']:+.2f} % [{s['gain_lo']:+.2f}, "
             f"{s['gain_hi']:+.2f}], tokens/round {s['tokens']:.3f} vs fixed {s['fixed_tokens']:.3f}"]
    for key, what in (("tokens_ratio", "tokens/round"), ("speed_ratio", "tokens/s")):
        p = pred.get(key) if pred else None
        inside = "" if p is None else ("; live inside the predicted interval" if p[1] <= live[key][0] <= p[2]
                                       else "; live OUTSIDE the predicted interval")
        kind = "modelled " if key == "speed_ratio" else ""
        lines.append(f"{what} ratio, policy / fixed at equal shape: predicted ({kind}held-out prompts) "
                     f"{_fmt(p) if p else 'not logged dense (--no-dense-test)'}; live {_fmt(live[key])}{inside}")
    cal = out.get("cost_model_calibrated")
    if cal:
        h = cal["terms"].get("policy_host_ms")
        lines.append(f"cost model refitted with {cal['prompts']} training prompts decoded live with and without the "
                     "policy: host work " + (_fmt(h) + " ms a policy round" if h else "not identified"))
    lines.append(f"mean shape: predicted {pred['policy_mean_shape']:.3f} / live {live['policy_mean_shape']:.3f}; "
                 f"shape-0 rounds live {100 * live['policy_share_shape0']:.1f} %" if pred else
                 f"mean shape live {live['policy_mean_shape']:.3f}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="target (default: the embedded default; e.g. gemma-3-270m)")
    ap.add_argument("--drafter", default=None, help="block (embedded default), pld or early_exit")
    ap.add_argument("--exit-layer", type=int, default=None)
    ap.add_argument("--draft-len", type=int, default=None)
    ap.add_argument("--task", default="docvqa", help="embedded-suite task (the embedded default)")
    ap.add_argument("--data", default=None, help="a question file (default for --model: Spec-Bench's questions)")
    ap.add_argument("--budget", type=int, default=4, help="target mean shape (depth, or tree nodes)")
    ap.add_argument("--shape", choices=("budget", "depth"), default="depth")
    ap.add_argument("--branch-k", type=int, default=8)
    ap.add_argument("--n", type=int, default=60, help="prompts per half (training, held-out)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--ignore-eos", action="store_true",
                    help="decode past end-of-sequence to max_new_tokens (the embedded default's answers are a few "
                         "tokens; past them it writes further question/answer pairs: many rounds per prompt)")
    ap.add_argument("--no-dense-test", action="store_true", help="skip the held-out prompts' dense logs")
    ap.add_argument("--calib", type=int, default=None,
                    help="training prompts decoded live with the policy and the fixed arms before the held-out arms, "
                         "to fit the policy's host work (default: a fifth of --n, at least 2; 0: none, host work "
                         "assumed 0)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.eos = () if args.ignore_eos else None
    w_start, c_start = time.perf_counter(), _cpu()

    from glance_law import read_logs
    from glance_law.policy.trajectory import prepare_dense
    from glance_log.decode import decode
    from glance_log.drafters import make_drafter
    from glance_log.models import load_target
    from glance_log.run import default_block, default_model

    name = args.drafter or ("block" if args.model is None else "pld")
    if args.model is not None and args.data is None:
        args.data = str(Path(__file__).resolve().parents[2] / "shared/realdata/spec-bench/vase/question.jsonl.gz")
    t = load_target(args.model or default_model(), "fp32", "cpu")
    dr = make_drafter(name, t, draft_model=default_block() if name == "block" else None, branch_k=args.branch_k,
                      draft_len=args.draft_len, exit_layer=args.exit_layer)
    label = dr.name
    items = _items(args, t)
    train, test = items[:args.n], items[args.n:]
    tmp = Path(tempfile.mkdtemp(prefix="bench-policy-"))
    print(f"{args.model or 'embedded default'}; drafter {label}; {len(train)} training + {len(test)} held-out prompts; "
          f"{args.shape} target {args.budget}; max_new_tokens {args.max_new_tokens}; torch threads "
          f"{torch.get_num_threads()}; logs in {tmp}")
    decode(t, dr, train[0][1], budget=args.budget, branch_k=1, max_new_tokens=8)            # warm-up
    w0 = time.perf_counter()
    _log_training(decode, t, dr, train, tmp / "train", label, args)
    if not args.no_dense_test:
        _log(decode, t, dr, test, tmp / "test", "test-dense", label, args, dense=True, k=args.branch_k)
    log_s = time.perf_counter() - w0
    policy, res, row, note = _search(tmp / "train", args, label, tmp / "policy.json")
    if policy is None:
        print(f"nothing to compare: {note}")
        return 0
    if note:
        print(note)
    d = prepare_dense(read_logs(str(tmp / "train")), drafter=label, shape=args.shape)
    lo, hi = _bracket(d, policy, args.shape)
    out = {"model": args.model or "embedded default", "drafter": label, "shape": args.shape, "target": args.budget,
           "prompts_per_half": args.n, "max_new_tokens": args.max_new_tokens, "repeat": args.repeat,
           "policy": {"family": policy.family, "params": policy.describe(), "note": note},
           "fixed_shapes_live": [lo, hi], "predicted_heldout_search": {k: row[k] for k in row if k not in ("params",)},
           "cost_model": {"constant_ms": res.cost.constant, "pass_ms": res.cost.pass_ms, "node_ms": res.cost.node_ms}}
    rng = np.random.default_rng(0)
    n_cal = max(2, args.n // 5) if args.calib is None else args.calib
    cost, draws, wc = res.cost, (), time.perf_counter()
    if n_cal > 0:
        _calibrate(decode, t, dr, train[:n_cal], tmp / "calib", label, policy, lo, hi, args)
        cost, draws, out["cost_model_calibrated"] = _calibrated_cost(tmp, label)
        out["cost_model_calibrated"].update(prompts=n_cal, wall_s=time.perf_counter() - wc)
    if not args.no_dense_test:
        out["predicted_test_prompts"], _ = _predicted_on_test(tmp / "test", label, policy, args.shape, lo, hi,
                                                              cost, rng, draws)
        if n_cal > 0:                       # the search's cost model (no policy run, host work 0), for reference
            out["predicted_test_prompts_search_cost"], _ = _predicted_on_test(tmp / "test", label, policy, args.shape,
                                                                              lo, hi, res.cost, rng)
    w1 = time.perf_counter()
    live = _live(decode, t, dr, test, policy, lo, hi, args)
    out["live"] = _compare(live["policy"], live["hi"], live["lo"], rng)
    out["train_positions"] = d.rounds
    out["seconds"] = {"logging_wall": log_s, "live_wall": time.perf_counter() - w1,
                      "total_wall": time.perf_counter() - w_start, "total_cpu": _cpu() - c_start}
    print(json.dumps(out, indent=2, default=float))
    print("\n".join(_summary(out)))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
