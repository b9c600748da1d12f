#!/usr/bin/env bash
# The runner daemon on a GPU box: load through `geak-runner serve` vs the local runner.
#
#   PYTHONPATH=$PWD bash scripts/gpu_daemon_check.sh OUTDIR      (from the repository root)
#
# Needs python3 with torch (CUDA or ROCm), triton, numpy, aiohttp and httpx; nothing else
# (spool mode, which needs watchdog, is not exercised here). No network access needed.
# About 3-5 minutes (at most 9: the load is cut at 6, the tests at 3).
#
# Writes to OUTDIR:
#   env.txt            versions, GPUs
#   daemon_load.json   4 concurrent clients x 8 evaluations of examples/softmax.py::softmax vs
#                      examples/softmax_fast.py::softmax (timed on the GPU), 2 alternating rounds
#                      of local and daemon: evaluations per minute through the daemon and on a
#                      LocalRunner with the same workers, the daemon's CPU per evaluation,
#                      lost (must be 0), latency p50/p95, daemon overhead; then the same load
#                      with the daemon killed (SIGKILL) halfway and restarted: lost must be 0
#   daemon_load.log    the script's output; daemon.log the daemon's
#   daemon_tests.txt   the daemon and client test files (CPU interpreter) run on this box
#   summary.json       the headline numbers
set -uo pipefail
OUT="${1:?usage: scripts/gpu_daemon_check.sh OUTDIR}"
mkdir -p "$OUT"
export PYTHONPATH="${PYTHONPATH:-$PWD}"
PY="${PYTHON:-python3}"

{
  date -u
  "$PY" -c "import sys, torch, triton, aiohttp, httpx, numpy; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'aiohttp', aiohttp.__version__, 'httpx', httpx.__version__, 'numpy', numpy.__version__); print('gpus', torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])"
  nvidia-smi -L 2>/dev/null || rocm-smi --showproductname 2>/dev/null || true
  nproc
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

rc=0
# CLIENTS / EVALS / LOAD_ARGS override the load (e.g. LOAD_ARGS="--cases 0 --trials 1" for a dry run on a CPU).
timeout 360 "$PY" scripts/daemon_load.py --out "$OUT" --device auto --clients "${CLIENTS:-4}" \
  --evals "${EVALS:-8}" --workers 2 --kill-restart ${LOAD_ARGS:-} 2>&1 | tee "$OUT/daemon_load.log"
load_rc=${PIPESTATUS[0]}
[ "$load_rc" -eq 0 ] || rc=1

# The CPU tests of the daemon and its client, on this box's Python (pytest-timeout and
# pytest-xdist may be absent: no addopts; these files have no gpu tests to deselect).
timeout 180 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" tests/test_daemon.py tests/test_remote.py \
  > "$OUT/daemon_tests.txt" 2>&1
tests_rc=$?
tail -3 "$OUT/daemon_tests.txt"

"$PY" - "$OUT" "$load_rc" "$tests_rc" <<'PYEOF'
import json, sys
out, load_rc, tests_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    s = json.load(open(f"{out}/daemon_load.json"))
except Exception as e:
    s = {"error": f"no daemon_load.json: {e}"}
keys = ["what", "device_info", "single_result", "latency_overhead_p50_s", "wall_overhead_per_eval_s",
        "throughput_ratio_daemon_over_local", "lost_total", "daemon_exit_code_on_sigterm"]
summ = {k: s.get(k) for k in keys}
for side in ("local", "daemon", "daemon_kill9_restart", "local_sequential", "daemon_sequential"):
    if side in s:
        summ[side] = {k: s[side][k] for k in ("evaluations", "completed", "lost", "evals_per_min",
                                               "evals_per_min_by_round", "latency_p50_s", "latency_p95_s",
                                               "statuses", "daemon_cpu_s_per_eval") if k in s[side]}
summ["load_script_rc"] = load_rc
summ["daemon_tests_rc"] = tests_rc
json.dump(summ, open(f"{out}/summary.json", "w"), indent=2)
print(json.dumps(summ, indent=2))
PYEOF
[ "$tests_rc" -eq 0 ] || rc=1
exit $rc
