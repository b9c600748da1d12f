#!/usr/bin/env bash
# The project's benchmark suite on a GPU: the tuner over every task of benchmarks/, and the
# suite's own baselines (each first version against torch eager and torch.compile).
#
#   PYTHONPATH=$PWD bash scripts/gpu_bench.sh OUT_DIR [more geak bench options]
#
# From the repository root on a CUDA or ROCm box with torch, triton and numpy (matplotlib for the
# PNG; without it the report is written without the plot, and
# `python -m agent.bench.report OUT_DIR/bench.json OUT_DIR/report.md` draws it later elsewhere).
#
# What runs:
#   1. geak bench benchmarks/ --strategy none --baselines eager,compile: each task checked and
#      timed against itself, and its first version timed against its <task>_reference in
#      PyTorch eager and under torch.compile (Inductor), interleaved in the same process. The
#      timed baselines go into OUT_DIR/baselines.json, keyed by GPU name and task digest.
#   2. geak bench benchmarks/ --strategy tune --baselines eager,compile: the no-LLM tuner per task
#      (at most MAX_CONFIGS configs each, default 12; TUNE_JOBS tasks at once, default 1); the
#      baselines come from the cache of step 1. WORKERS (default 4) worker processes serve both.
# Both steps are resumable: each stops starting new tasks after TIME_BUDGET seconds (default
# 480, to fit a 10-minute command) and exits with "INCOMPLETE"; running the same command again
# with the same OUT_DIR goes on where it stopped (state in OUT_DIR/none/ and OUT_DIR/tune/).
# Keep OUT_DIR outside a folder that is emptied between commands (e.g. .geak/gpu-bench), and
# copy it out at the end.
#
# Writes to OUT_DIR: gpu.txt (the device), none.json / none.md (step 1), bench.json / report.md /
# report.png (step 2: the table, the summary metrics and the speedup plot for docs/benchmarks.md),
# baselines.json, *.log (the human output), none/ and tune/ (run state and every EvalResult).
# Exit status: 0 when both steps finished (some tasks may still be unverified: see the reports),
# 3 when a step is incomplete (run again), 2 on bad input or a missing GPU.
# GEAK_BENCH_ALLOW_CPU=1 lets the script run on the CPU interpreter (a dry run of the script itself:
# correctness only, nothing timed).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_bench.sh OUT_DIR [geak bench options]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH=${PYTHONPATH:-$PWD}
PY=${PYTHON:-python3}
MAX_CONFIGS=${MAX_CONFIGS:-12}
TIME_BUDGET=${TIME_BUDGET:-480}
WORKERS=${WORKERS:-4}
TUNE_JOBS=${TUNE_JOBS:-1}  # tasks tuned at once (they share the workers; timing stays exclusive)

$PY - > "$OUT/gpu.txt" <<'EOF' || { cat "$OUT/gpu.txt" >&2; exit 2; }
import torch, triton
import os
if not torch.cuda.is_available() and os.environ.get("GEAK_BENCH_ALLOW_CPU") != "1":
    raise SystemExit("no GPU visible to torch: this script measures on a GPU")
if not torch.cuda.is_available():  # GEAK_BENCH_ALLOW_CPU=1: a dry run of this script on the interpreter
    print(f"no GPU: CPU interpreter, torch {torch.__version__}, triton {triton.__version__}")
else:
    p = torch.cuda.get_device_properties(0)
    print(f"{torch.cuda.get_device_name(0)}, {p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, "
          f"triton {triton.__version__}, "
          f"{'rocm ' + torch.version.hip if torch.version.hip else 'cuda ' + str(torch.version.cuda)}")
EOF
cat "$OUT/gpu.txt"
if ! $PY -c "import matplotlib" 2>/dev/null; then
  echo "note: matplotlib is not installed: report.png is drawn later with python -m agent.bench.report" >&2
fi

incomplete=0
step() {  # step NAME JSON REPORT ARGS...
  local name=$1 json=$2 report=$3
  shift 3
  echo "== geak bench benchmarks/ $* (time budget ${TIME_BUDGET}s)" | tee -a "$OUT/$name.log" >&2
  $PY -m agent.cli bench benchmarks/ --out "$OUT/$name" --resume --time-budget "$TIME_BUDGET" \
      --workers "$WORKERS" --baseline-cache "$OUT/baselines.json" \
      --json "$OUT/$json" --report "$OUT/$report" "$@" 2> >(tee -a "$OUT/$name.log" >&2)
  local rc=$?
  if [ $rc -eq 2 ]; then
    echo "geak bench failed on bad input (see $OUT/$name.log)" >&2
    exit 2
  fi
  if $PY -c "import json,sys; sys.exit(0 if json.load(open('$OUT/$json')).get('incomplete') else 1)"; then
    incomplete=1
  fi
}

step none none.json none.md --strategy none --baselines eager,compile --jobs "$WORKERS" "$@"
if [ $incomplete -eq 0 ]; then
  step tune bench.json report.md --strategy tune --baselines eager,compile --max-configs "$MAX_CONFIGS" \
    --jobs "$TUNE_JOBS" "$@"
fi
if [ $incomplete -ne 0 ]; then
  echo "INCOMPLETE: run the same command again with the same OUT_DIR to go on" >&2
  exit 3
fi
echo "DONE: $OUT/report.md, $OUT/bench.json$([ -f "$OUT/report.png" ] && echo ", $OUT/report.png")" >&2
exit 0
