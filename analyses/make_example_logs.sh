#!/usr/bin/env bash
# Regenerate the committed example round logs in data/logs/ from the embedded default
# (logger/default/target + logger/default/block) on the embedded suite's held-out items.
#
#   analyses/make_example_logs.sh            # N=40 prompts per task, into data/logs/
#   N=40 OUT=/tmp/logs analyses/make_example_logs.sh
#
# Per task (caption, textvqa, infovqa, docvqa, chartqa):
#   block drafter  + the autoregressive baseline arm (--baseline) + the fp32 greedy audit
#                    (--audit) + the mismatched-context probe (--probe mismatched)
#   pld drafter    + audit + probe (its ar arm would repeat the block run's, so none)
# and the scienceqa control (single-token answers) with the block drafter.
# Greedy decoding, fp32, CPU, seed 0: the logged rounds are deterministic; only the
# provenance (created_at) and the timing columns change from run to run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-data/logs}
N=${N:-40}
rm -rf "$OUT"
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for task in caption textvqa infovqa docvqa chartqa; do
  "$PY" -m glance_log.cli --task "$task" --drafter block --baseline --audit --probe mismatched \
      --n "$N" --seed 0 --out "$OUT" --quiet
  "$PY" -m glance_log.cli --task "$task" --drafter pld --audit --probe mismatched \
      --n "$N" --seed 0 --out "$OUT" --quiet
done
"$PY" -m glance_log.cli --task scienceqa --drafter block --audit --n "$N" --seed 0 --out "$OUT" --quiet
du -sh "$OUT"
