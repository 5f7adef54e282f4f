#!/usr/bin/env bash
# The logger's device checks, prepared for a session that is lent a GPU (CI stays CPU-only):
#   1. losslessness in fp32 on CUDA (every drafter, budgets 1/15/63, causal LM and Qwen2-VL/Qwen3-VL),
#   2. the zero-sync per-round hook test on CUDA,
#   3. the logger on/off decode-time ratio and the speculative speedup on the GPU.
# Usage (from the repository root):  bash benchmarks/gpu_check.sh [OUT_DIR]
set -u
OUT="${1:-${OUT:-/tmp/glance-gpu-check}}"
mkdir -p "$OUT"
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))" \
  | tee "$OUT/device.txt" || exit 2
export GLANCE_TEST_DEVICE=cuda
"$PY" -m pytest tests/test_decode.py tests/test_logger.py -q -p no:cacheprovider \
  -k "lossless or sync or replay or positions or gathers" 2>&1 | tee "$OUT/pytest.txt"
"$PY" benchmarks/bench_logger.py --device cuda --threads 0 --json "$OUT/bench_logger.json" 2>&1 \
  | tee "$OUT/bench_logger.txt"
