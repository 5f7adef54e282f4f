"""Write the committed example round log, data/example/rounds-example.parquet.

A deterministic simulation (glance_law.simulate, public API only) of five tasks
shaped like the paper's Table 12 (caption, textvqa, infovqa, docvqa, chartqa;
the two grounded ones with a two-state copy tail at the entropy floor), 20
prompts per task and 20-60 rounds per prompt, horizon L = 15, rounds of a
prompt correlated through a Gaussian copula. It carries the per-offset
vectors (match, target_rank, target_logq) so the evidence sections can run on
it too. Rerunning this script reproduces the file byte for byte (same library
versions).

    python analyses/make_example_log.py [--out data/example/rounds-example.parquet]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from glance_law.io import write_table
from glance_law.simulate import DEFAULT_TASKS, simulate_rounds

SEED = 20240
OUT = Path(__file__).resolve().parent.parent / "data" / "example" / "rounds-example.parquet"


def make(out: Path = OUT) -> Path:
    frame = simulate_rounds(DEFAULT_TASKS, n_prompts=20, rounds_per_prompt=(20, 60), horizon=15,
                            prompt_effect="copula", prompt_corr=0.3, seed=SEED, run_id="example",
                            drafter="block")
    # fixed provenance (no timestamps) so the file is reproducible
    run = {"tool": "glance-law", "generator": "analyses/make_example_log.py", "simulator": "glance_law.simulate",
           "seed": SEED, "tasks": [t.name for t in DEFAULT_TASKS], "horizon": 15, "target": "simulated",
           "drafter": "block (simulated)", "temperature": 0.0}
    return write_table(frame, out, kind="rounds", run=run)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    path = make(ap.parse_args().out)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
