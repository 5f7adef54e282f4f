"""``python -m glance_law.policy LOGS --budget N [--drafter D] --out policy.json``.

Searches the built-in policy families (the shadow price or the threshold of each is fitted so
its mean shape meets ``--budget`` on training prompts), prints the held-out table (prompt-grouped
K-fold), and writes the best family (highest held-out gain; the fixed shape when nothing beats
it) refitted on every prompt as JSON: family, parameters, the fit it came from, its held-out
gain with interval and the logs it was fitted on. ``glance-log --policy policy.json`` runs it.
Errors: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import numpy as np

from .._version import __version__
from ..data.declare import add_declare_arguments, chain_of, horizon_of
from ..data.outputs import check_output, write_file
from ..errors import GlanceError
from ..results import format as _fmt
from ..scrub import scrubbed_output
from .evaluate import FAMILY_NAMES, PolicyTable
from .policies import FixedPolicy, Policy, policy_to_dict
from .runs import RUN_FAMILIES, RunData
from .search import policy_table, prepare_for

PROG = "python -m glance_law.policy"

__all__ = ["main", "build_parser", "search", "export_record"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line: main() prints it and exits 2
        raise GlanceError(f"{message} (see {PROG} --help)")

    def parse_args(self, args=None, namespace=None):   # paths and options in any order (LOGS --horizon L MORE)
        try:
            return self.parse_intermixed_args(args, namespace)
        except TypeError:
            return super().parse_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Fit draft policies on round logs, evaluate them on held-out prompts "
                                       "and export the best as JSON for glance-log --policy.")
    p.add_argument("paths", nargs="+", metavar="LOGS", help="round-log files, folders or globs")
    p.add_argument("--budget", type=float, required=True, metavar="N",
                   help="target mean shape: tree nodes per round (tree drafters) or draft depth (chains)")
    p.add_argument("--drafter", default=None, help="the drafter whose rounds are used (needed when the logs hold several)")
    p.add_argument("--shape", choices=("budget", "depth"), default=None,
                   help="what the policy chooses (default: budget for k > 1 drafters, depth for chains)")
    p.add_argument("--families", default=None, metavar="F[,F...]",
                   help=f"families to search (default: {', '.join(FAMILY_NAMES['budget'])} for budgets, "
                        f"{', '.join(FAMILY_NAMES['depth'])} for depths; on logs with accepted runs only "
                        f"(Spec-Bench): {', '.join(RUN_FAMILIES)})")
    p.add_argument("--feature", choices=("auto", "pred_entropy", "root_entropy"), default="auto",
                   help="the entropy policies read: pred_entropy (the row that predicted the root, what the live "
                        "decoder knows), root_entropy (the verify row: one position of foresight), auto (default: "
                        "pred_entropy when logged)")
    p.add_argument("--folds", type=int, default=5, help="prompt-grouped folds (default 5)")
    p.add_argument("--n-max", type=int, default=255,
                   help="largest tree budget (or, on accepted-run logs, draft depth) replayed (default 255)")
    p.add_argument("--bootstrap", type=int, default=200, metavar="B",
                   help="prompt-bootstrap replicates (default 200); on held-out rows, at most B jackknife groups "
                        "of prompts (one prompt each when there are at most B)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--level", type=float, default=0.95)
    p.add_argument("--node-ms", type=float, default=None, help="ms per tree node (overrides the round-cost regression)")
    p.add_argument("--pass-ms", type=float, default=None, help="ms per drafter pass (overrides the regression)")
    p.add_argument("--constant-ms", type=float, default=None, help="ms per round constant (overrides the regression)")
    p.add_argument("--host-ms", type=float, default=None,
                   help="the policy's host work per round in ms, when the logs hold no policy run to fit it from "
                        "(benchmarks/bench_policy_host.py measures it; default: fitted, else 0)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the best policy as JSON to FILE")
    p.add_argument("--format", choices=_fmt.FORMATS, default="text", help="table format (default text)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip corrupt lines and unreadable log files (each listed in a note) instead of stopping")
    add_declare_arguments(p)        # --horizon, --chain: what the method table cannot know
    return p


def _best(table) -> tuple[str, dict]:
    """The held-out row with the highest gain (tokens at equal mean shape, or the modelled speedup
    when the cost model is identified; on accepted-run replays the smaller of the gains if the
    unknown bonus-token guesses miss or match) among the rows whose held-out interval excludes no
    gain under every scenario they record: lower bound above 0 (above 1 for a speedup), for the
    ``*_ifmatch`` scenario too. 'fixed' when no row qualifies: a positive point gain whose interval
    covers zero is not evidence, and the fixed shape is exported."""
    h = table.loc[table["evaluated_on"] == "held-out"]
    if h.empty:
        return "fixed", {}
    col = "speedup" if "speedup" in h.columns and h["speedup"].notna().all() else "gain"
    ref = 1.0 if col == "speedup" else 0.0
    score = h[col]
    if col == "gain" and "gain_ifmatch" in h.columns:
        # accepted-run replays: a family must gain whichever way the unknown bonus-token guesses go
        score = np.minimum(h["gain"], h["gain_ifmatch"])
    ok = np.ones(len(h), bool)
    for c in (col, f"{col}_ifmatch"):                   # the criterion under every recorded scenario
        if f"{c}_lo" in h.columns:
            lo = h[f"{c}_lo"].to_numpy(np.float64)
            ok &= np.isfinite(lo) & (lo > ref)
    if not ok.any():                 # nothing beats the fixed shape beyond doubt: export it, claim no gain
        return "fixed", {}
    score = score.where(ok, -np.inf)
    row = h.loc[score.idxmax()]
    if not score.max() > ref:
        return "fixed", {}
    return str(row["family"]), row.to_dict()


def _num(x):
    x = float(x)
    return x if np.isfinite(x) else None


def export_record(res: PolicyTable, family: str, row: dict, target: float, paths: Sequence[str], data,
                  folds: int, seed: int) -> tuple[Policy, dict]:
    """The policy to export (fitted on every prompt) and its fit record."""
    if family == "fixed":
        pol: Policy = FixedPolicy(shape=data.shape, size=int(round(target)))
    else:
        pol = res.policies[family]
    if row and row.get("evaluated_on") != "held-out":        # never report an in-sample gain as held-out
        raise GlanceError("internal: refusing to export a gain not evaluated on held-out prompts")
    keep = ("gain", "gain_lo", "gain_hi", "tokens", "tokens_lo", "tokens_hi", "fixed_tokens", "mean_shape",
            "speedup", "speedup_lo", "speedup_hi", "speedup_best_fixed", "ms_per_token", "censored",
            "gain_ifmatch", "gain_ifmatch_lo", "gain_ifmatch_hi", "speedup_best_fixed_ifmatch")
    held = {k: _num(row[k]) for k in keep if k in row}
    folds = int(min(folds, len(data.keys)))          # the folds actually used (never more than prompts)
    fit = {"glance_law": __version__, "drafter": data.drafter, "shape": data.shape, "feature": data.feature,
           "target": float(target),
           "fitted_on": {"logs": [str(p) for p in paths], "rounds": data.rounds, "prompts": [list(k) for k in data.keys]},
           "heldout": dict(held, evaluated_on="held-out", folds=int(folds), seed=int(seed),
                           compared_with=f"fixed {data.shape} at equal mean shape") if row else
           {"evaluated_on": "held-out", "note": "no family's held-out interval excluded zero gain over the fixed "
                                                 "shape (under every scenario it records)"},
           "selected_from": sorted(set(res.table["family"]) - {"fixed"}),
           "replay": getattr(data, "replay", "logged roots"),
           "assumptions": list(_replay_assumptions(data)),
           "cost_model": res.cost.to_dict(),
           "scored_under": _assumptions(res, data)}
    return pol, fit


def _replay_assumptions(data) -> tuple:
    """What the figures of the fit record assume (the replay they come from)."""
    from .trajectory import DENSE_ASSUMPTIONS, DenseData

    if isinstance(data, DenseData):
        return DENSE_ASSUMPTIONS
    if isinstance(data, RunData):
        return ("accepted-run replay (Spec-Bench style): depth schedules replayed token by token from the logged "
                "accepted runs",)
    return ("logged-root replay: each logged round scored at the policy's shape on the logged run's roots (not the "
            "policy's own trajectory); rounds ending the output with a cut proposal left out; log with "
            "glance-log --dense for the trajectory replay",)


def _assumptions(res: PolicyTable, data) -> list[str]:
    """What the held-out figures take for granted (recorded with the exported policy): the replay, the
    comparison, the cost model."""
    out = list(_replay_assumptions(data))
    out += [f"the policy reads {getattr(data, 'feature', 'the acceptance history')} at each round's root",
            "gains compare with the fixed shape at the policy's mean shape on the same rounds (tokens per round; "
            "with an identified cost model also modelled ms per token at equal mean modelled cost)",
            "rounds are exchangeable between the fitting prompts and deployment (no distribution shift)"]
    out += [f"cost model: {a}" for a in res.cost.assumptions]
    if not res.cost.identified:
        out.append("cost model: not identified from these logs; the policy was chosen on tokens per round alone")
    return out


def search(paths: Sequence[str], args, notes: list | None = None) -> tuple[PolicyTable, Policy, dict]:
    """The policy table, the policy to export and its fit record; ``notes`` (a list) receives
    what the reader and importers did with each oddity of the logs, one line each."""
    from ..data.io import read_logs, require_steps

    skip_bad = bool(getattr(args, "skip_bad", False))
    logs = require_steps(read_logs(list(paths), skip_bad=skip_bad, horizon=horizon_of(args), chain=chain_of(args)))
    if notes is not None:                   # what the reader / importers did with each oddity
        notes.extend(' '.join(str(n).split()) for n in logs.notes)
        notes.extend(f"skipped {p}: {' '.join(str(why).split())}" for p, why in logs.skipped
                     if not any(str(p) in str(n) for n in logs.notes))
    fams = None if args.families is None else [f.strip() for f in args.families.split(",") if f.strip()]
    data = prepare_for(logs, drafter=args.drafter, shape=args.shape, n_max=args.n_max, feature=args.feature)
    prompts = None
    if isinstance(data, RunData):          # accepted runs only: the turns' timings give the round cost
        try:
            prompts = read_logs(list(paths), kind="prompts", skip_bad=skip_bad, horizon=horizon_of(args)).frame
        except GlanceError:
            prompts = None
    res = policy_table(logs, args.budget, families=fams, folds=args.folds, n_boot=args.bootstrap,
                       level=args.level, seed=args.seed, node_ms=args.node_ms, pass_ms=args.pass_ms,
                       constant_ms=args.constant_ms, host_ms=getattr(args, "host_ms", None), data=data, prompts=prompts)
    fam, row = _best(res.table)
    pol, fit = export_record(res, fam, row, args.budget, paths, data, args.folds, args.seed)
    return res, pol, fit


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    with scrubbed_output(argv):        # no secret of a location reaches the output
        return _main(argv)


def _main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.folds < 2:
            raise GlanceError("--folds must be >= 2 (held-out evaluation)")
        if args.bootstrap < 0 or not 0 < args.level < 1:
            raise GlanceError("--bootstrap must be >= 0 and --level strictly between 0 and 1")
        if args.out:                           # checked before the search: never a link, a folder or an input
            check_output(args.out, args.paths)
        notes: list[str] = []
        res, pol, fit = search(args.paths, args, notes)
        for note in notes:                     # printed once the search succeeded (a refusal stays one line)
            print(f"{PROG}: note: {note}", file=sys.stderr)
        sys.stdout.write(res.summary(args.format))
        if not res.summary(args.format).endswith("\n"):
            sys.stdout.write("\n")
        if args.out:
            out = args.out
            d = policy_to_dict(pol, fit)
            write_file(out, json.dumps(d, indent=2, sort_keys=True, allow_nan=False) + "\n")
            h = fit["heldout"]
            gain = h.get("note", "")
            if h.get("gain") is not None:
                ci = (f" [{h['gain_lo']:+.2f}, {h['gain_hi']:+.2f}]" if h.get("gain_lo") is not None
                      and h.get("gain_hi") is not None else "")
                gain = f"held-out gain {h['gain']:+.2f}%{ci}"
            print(f"{PROG}: wrote {out}: {pol.family} ({pol.describe()}); {gain}", file=sys.stderr)
    except GlanceError as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, BrokenPipeError):  # pragma: no cover
        return 130
    return 0
