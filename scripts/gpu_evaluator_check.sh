#!/usr/bin/env bash
# The evaluator's own GPU checks, in one command of under 10 minutes:
#
#   PYTHONPATH=$PWD bash scripts/gpu_evaluator_check.sh OUT_DIR TBG_DIR [BASE_CHECKOUT]
#
# 1. latency of single-use evaluations (scripts/eval_latency.py, 20 distinct candidates, 2
#    workers): this checkout, then BASE_CHECKOUT (a copy of an earlier revision, to compare on the
#    same machine) if given, then this checkout again;
# 2. the original's check against its plain run (scripts/original_check_cost.py) on the
#    TritonBench-G files whose check took 15-31 s of a 30 s budget before (those of them in
#    TBG_DIR): the goal is the check <= 2 x the file's own code + 1 s;
# 3. the attack corpus (tests/test_attacks.py) on the GPU;
# 4. how fast tensors leave the device in a plain process and in a sandboxed worker
#    (scripts/device_copy_probe.py), and the GPU tests (tests/test_gpu.py).
# Each step's output is in OUT_DIR; the summary lines are printed.
set -uo pipefail
OUT=${1:?OUT_DIR}; TBG=${2:?TBG_DIR}; BASE=${3:-}
mkdir -p "$OUT"
here=$(pwd)
for label in new base new2; do
  ck=$here; [ "$label" = base ] && { [ -n "$BASE" ] || continue; ck=$BASE; }
  PYTHONPATH=$ck${PYTHONPATH:+:$PYTHONPATH} timeout 170 python3 "$ck/scripts/eval_latency.py" \
    --out "$OUT" --n 20 --workers 2 --label "$label" 2>&1 | tail -1
done
files=()
for f in destindex_copy destindex_copy_kv1 masked_select matrix_vector_multip context_attn_llama int4_matmul softmax_triton1; do
  [ -f "$TBG/$f.py" ] && files+=("$TBG/$f.py")
done
[ ${#files[@]} -gt 0 ] && timeout 240 python3 scripts/original_check_cost.py --out "$OUT" "${files[@]}" 2>&1 | tail -12
timeout 150 python3 -m pytest -q -o addopts="" -p no:cacheprovider tests/test_attacks.py 2>&1 | tail -5
timeout 60 python3 scripts/device_copy_probe.py 2>&1 | grep -E "^D2H|^ok|rror" | tail -6
timeout 200 python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/test_gpu.py 2>&1 | tail -5
