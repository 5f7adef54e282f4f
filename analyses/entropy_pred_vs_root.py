"""Which entropy can a decoder use? The law keyed on pred_entropy against root_entropy (issue 25, item 5).

    python analyses/entropy_pred_vs_root.py                 # data/real (Gemma 3 270M)
    python analyses/entropy_pred_vs_root.py LOGS ... [--format markdown]

``root_entropy`` is the entropy of the verify pass's row 0, the target's distribution *after*
the root: it exists only once the round's tree is verified, and it is what the paper keys on.
``pred_entropy`` is the entropy of the row that *predicted* the root (the previous verify pass's
last committed row, or the prefill's last row): what a decoder knows before drafting, so the
only entropy a causal allocation can read (docs/policy.md, "What the decoder knows").

For every speculative drafter in the logs, the law (``glance_law.fit_law``, pooled, prompt-
clustered CR3 intervals) is fitted twice on the same rounds, once keyed on each entropy (the
column read as ``root_entropy`` is swapped), with the law's rank check (clustered Spearman rho
of entropy against the accepted length) and the clustered Spearman rho between the two
entropies. Public API only; nothing here is fitted that the library does not fit.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def compare(frame: pd.DataFrame, drafter: str) -> list[dict]:
    """Two rows (root_entropy, pred_entropy) for one drafter's matched rounds."""
    import glance_law as gl
    from glance_law.stats.cluster import cluster_codes
    from glance_law.stats.ranks import spearman_clustered

    sub = frame.loc[(frame["drafter"].astype(str) == drafter)]
    if "condition" in sub.columns:
        sub = sub.loc[sub["condition"].astype(str) == "matched"]
    sub = sub.loc[sub[["root_entropy", "pred_entropy"]].notna().all(axis=1)]
    codes, G = cluster_codes(sub)
    rho_ee, p_ee, _ = spearman_clustered(sub["pred_entropy"].to_numpy(float), sub["root_entropy"].to_numpy(float),
                                         codes, G)
    rows = []
    for key in ("root_entropy", "pred_entropy"):
        fit = gl.fit_law(sub.assign(root_entropy=sub[key]), by=None, condition=None)
        t = fit.to_frame().iloc[0]
        rows.append({"drafter": drafter, "entropy": key, "rounds": int(t["rounds"]), "prompts": int(t["prompts"]),
                     "b0": t["b0"], "b0_lo": t["b0_lo"], "b0_hi": t["b0_hi"],
                     "b1": t["b1"], "b1_lo": t["b1_lo"], "b1_hi": t["b1_hi"],
                     "rho_accepted": t["rho"], "rho_accepted_p": t["rho_p"], "holds": t["holds"],
                     "rho_pred_root": rho_ee, "rho_pred_root_p": p_ee})
    return rows


def table(paths) -> pd.DataFrame:
    import glance_law as gl

    frame = gl.read_logs([str(p) for p in paths]).frame
    if "pred_entropy" not in frame.columns:
        raise SystemExit("these logs have no pred_entropy column (log them with a current glance-log)")
    drafters = sorted(d for d in frame["drafter"].astype(str).unique() if d != "ar")
    return pd.DataFrame([r for d in drafters for r in compare(frame, d)])


def markdown(t: pd.DataFrame) -> str:
    def ci(r, k, f="{:.2f}"):
        return f"{f.format(r[k])} [{f.format(r[k + '_lo'])}, {f.format(r[k + '_hi'])}]"
    lines = ["| drafter | entropy | rounds (prompts) | b1 per nat | b0 | rho(H, accepted) | holds | rho(pred, root) |",
             "|---|---|---:|---:|---:|---:|---|---:|"]
    for _, r in t.iterrows():
        lines.append(f"| {r['drafter']} | `{r['entropy']}` | {r['rounds']} ({r['prompts']}) | {ci(r, 'b1')} | "
                     f"{ci(r, 'b0')} | {r['rho_accepted']:+.3f} (p = {r['rho_accepted_p']:.2g}) | {r['holds']} | "
                     f"{r['rho_pred_root']:+.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", default=[str(ROOT / "data" / "real" / "*.parquet")])
    ap.add_argument("--format", choices=("markdown", "csv"), default="markdown")
    args = ap.parse_args(argv)
    t = table(args.paths)
    sys.stdout.write((markdown(t) if args.format == "markdown" else t.to_csv(index=False)) + "\n")
    return 0 if np.isfinite(t["b1"]).any() else 1


if __name__ == "__main__":
    raise SystemExit(main())
