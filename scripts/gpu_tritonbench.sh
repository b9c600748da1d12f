#!/usr/bin/env bash
# The evaluator on public TritonBench-G on a GPU box, and the runner's latency before/after.
#
#   bash scripts/gpu_tritonbench.sh OUT TASKS [PHASE...]
#
# TASKS: a folder of TritonBench-G task files (thunlp/TritonBench, data/TritonBench_G_v1);
# TASKS_mut next to it: mutants from `scripts/tritonbench_check.py mutate`.
# PHASE: plain (originals as plain scripts), mutants (label mutants by plain runs), bench (one
# `geak bench` run over all originals), benchmut (one run with the mutants as candidates),
# single (one process per task), latency (before: BASELINE=<checkout of the older runner>),
# gpu (pytest -m gpu). Writes OUT/*.json and prints the summary.
set -u
OUT=$1; TASKS=$2; shift 2
mkdir -p "$OUT"
TB=/tmp/geak-tb; rm -rf "$TB"; cp -r "$TASKS" "$TB"
[ -d "${TASKS}_mut" ] && { rm -rf "${TB}_mut"; cp -r "${TASKS}_mut" "${TB}_mut"; }
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
for phase in "$@"; do
  t0=$(date +%s)
  case $phase in
    plain) timeout 300 python3 scripts/tritonbench_check.py plain "$TB" "$OUT" --jobs 14 --gold /tmp/geak-gold ;;
    mutants) timeout 400 python3 scripts/tritonbench_check.py plain "$TB" "$OUT" --mutants "${TB}_mut" --jobs 14 --gold /tmp/geak-gold ;;
    bench) timeout ${BENCH_S:-420} python3 -m agent.cli bench "$TB" --format tritonbench --jobs ${JOBS:-6} \
             --workers ${JOBS:-6} --trials 2 --eval-timeout ${EVAL_S:-90} ${BUDGET_S:+--time-budget "$BUDGET_S"} ${TASKS_PATTERN:+--tasks "$TASKS_PATTERN"} --out /tmp/geak-bench1 \
             --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
           tail -3 "$OUT/bench.log"; tar czf "$OUT/bench_tasks.tgz" -C /tmp geak-bench1 ;;
    benchmut) timeout 420 python3 -m agent.cli bench "$TB" --format tritonbench --candidates "${TB}_mut" --jobs 6 \
             --workers 6 --trials 2 --out /tmp/geak-bench2 --json "$OUT/bench_mut.json" > "$OUT/bench_mut.log" 2>&1
           tail -3 "$OUT/bench_mut.log" ;;
    single) timeout 500 python3 scripts/tritonbench_check.py single "$TB" "$OUT" --jobs 8 ;;
    latency)
      PYTHONPATH=${BASELINE:?} timeout 200 python3 scripts/eval_latency.py --out "$OUT" --label before --workers 2 --n 16
      timeout 200 python3 scripts/eval_latency.py --out "$OUT" --label after --workers 2 --n 16 ;;
    gpu) timeout ${GPU_S:-300} python3 -m pytest -q tests/test_gpu.py -m gpu -o addopts="" -p no:cacheprovider > "$OUT/gpu.log" 2>&1
         tail -15 "$OUT/gpu.log" ;;
  esac
  echo "== $phase: $(( $(date +%s) - t0 )) s"
done
args=()
[ -f "$OUT/bench.json" ] && args+=(--bench "$OUT/bench.json")
[ -f "$OUT/bench_mut.json" ] && args+=(--bench-mutants "$OUT/bench_mut.json")
[ -f "$OUT/plain.json" ] && python3 scripts/tritonbench_check.py summary "$OUT" "${args[@]}" | tee "$OUT/summary.txt"
exit 0
