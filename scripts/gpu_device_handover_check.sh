#!/usr/bin/env bash
# Large CUDA storages between the evaluator's workers as device memory (runner/worker/devmem.py),
# checked and timed against the host path on one GPU:
#
#   PYTHONPATH=$PWD bash scripts/gpu_device_handover_check.sh OUT_DIR [TASK_DIR]
#
# 1. the GPU tests of the hand-over (a record, a kept draw exported afresh per reader, a wrong
#    element in a 256 MB output that crossed as device memory) and of timing large tensors;
# 2. the hand-over alone (scripts/exchange_bench.py --mechanism), 100 MB and 16 MB, host path
#    (GEAK_DEVICE_HANDOVER=0) and device memory (=1);
# 3. a whole evaluation of a copy of 100 MB (exchange_bench.py), both ways;
# 4. the original's check of TASK_DIR's destindex_copy*.py files (TritonBench-G; scripts/
#    original_check_cost.py), both ways; 5. single-use latency (eval_latency.py), both ways.
# If 1 passes and 2-5 are no slower with it, runner/worker/devmem.py's ON_BY_DEFAULT can be True (it is since
# this check ran on an H100: docs/benchmarks.md).
set -uo pipefail
OUT=${1:?OUT_DIR}; TASKS=${2:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
GEAK_DEVICE_HANDOVER=1 timeout 240 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/test_gpu.py \
  -k "device_memory or afresh or crossed or timing_of_the_target or record_leaves" 2>&1 | tail -15
for h in 0 1; do
  for mb in 100 16; do
    GEAK_DEVICE_HANDOVER=$h timeout 60 python3 scripts/exchange_bench.py --mechanism --device cuda --mb $mb --n 5 2>&1 | tail -1
  done
  GEAK_DEVICE_HANDOVER=$h timeout 120 python3 scripts/exchange_bench.py --device cuda --mb 100 --n 3 2>&1 | tail -1
done
if [ -n "$TASKS" ]; then
  for h in 1 0; do
    GEAK_DEVICE_HANDOVER=$h timeout 150 python3 scripts/original_check_cost.py --out "$OUT/original-check-$h" \
      "$TASKS"/destindex_copy*.py --format tritonbench 2>&1 | tail -4
  done
fi
for h in 1 0; do
  GEAK_DEVICE_HANDOVER=$h timeout 120 python3 scripts/eval_latency.py --out "$OUT" --n 20 --workers 2 --label "handover$h" 2>&1 | tail -1
done
