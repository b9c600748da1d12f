#!/usr/bin/env bash
# The GEAK loop end to end on a GPU, with a scripted LLM whose candidates are real kernels.
#
#   PYTHONPATH=$PWD bash scripts/gpu_llm_check.sh OUT_DIR
#
# From the repository root on a CUDA or ROCm box with torch, triton, numpy and aiohttp. No
# network is needed: the scripted server (tests/llm_server.py) answers on loopback, the official
# openai / anthropic SDKs talk to it. If the SDKs are not installed, wheels in ./.whl are used,
# made on a machine with network, from the repository root:
#   ../shared/device-wheels.sh openai==3.57.0 anthropic==2.16.0
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl typing_extensions==4.16.0 sniffio
# (pydantic, which both SDKs use, needs typing_extensions >= 4.16, newer than a GPU image may have;
# openai imports sniffio, which the H200 image lacks).
#
# What runs, for examples/softmax.py::softmax on the GPU:
#   1. geak optimize --strategy llm --provider openai --model scripted --iterations 4, replaying
#      tests/transcripts/softmax_gpu.json: a candidate that does not compile, one that is wrong on
#      rows that are not a power of two, one correct but slow (three passes in small blocks), one
#      correct and fast (whole rows in registers, several short rows per program, more warps for
#      long rows);
#   2. the same through --provider anthropic, one iteration, the fast candidate only;
#   3. geak eval of the slow and the fast candidate against the original, on their own, as a
#      cross-check of the speedups the loop measured.
# Checks (exit 1 if one fails): the outcomes are did_not_run, wrong, correct, correct; the chosen
# candidate is the fastest verified one; it is verified faster (exit 0 of geak optimize).
#
# Writes to OUT_DIR: openai.json / anthropic.json (the optimize reports), *.stderr (the human
# output), runs/ (the run directories: every prompt, answer, candidate and EvalResult),
# eval_slow.json / eval_fast.json, best.py (the chosen module) and summary.md (the table for
# docs/benchmarks.md).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_llm_check.sh OUT_DIR}
mkdir -p "$OUT/runs"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH=${PYTHONPATH:-$PWD}
PY=${PYTHON:-python3}

if ! $PY -c "import openai, anthropic" 2>/dev/null; then
  [ -d .whl ] || { echo "the openai/anthropic SDKs are missing and there is no ./.whl" >&2; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/geak-site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/geak-site:$PYTHONPATH
  $PY -c "import openai, anthropic; print('openai', openai.__version__, 'anthropic', anthropic.__version__)" \
    || { echo "the SDKs from ./.whl do not import: a dependency is missing from .whl (see this script's header)" >&2; exit 2; }
fi
$PY -c "import aiohttp" || { echo "aiohttp is needed for the scripted server" >&2; exit 2; }
unset OPENAI_API_KEY ANTHROPIC_API_KEY

SERVER_PIDS=()
cleanup() { for p in "${SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

serve() {  # serve TRANSCRIPT NAME -> sets PORT
  rm -f "$OUT/$2.port"
  $PY tests/llm_server.py "$1" --port-file "$OUT/$2.port" --log "$OUT/$2.requests.jsonl" \
    > "$OUT/$2.server.log" 2>&1 &
  SERVER_PIDS+=($!)
  for _ in $(seq 100); do [ -s "$OUT/$2.port" ] && break; sleep 0.1; done
  PORT=$(cat "$OUT/$2.port") || { echo "scripted server did not start" >&2; exit 1; }
}

TARGET=examples/softmax.py::softmax
DEVICE=${GEAK_DEVICE:-cuda}  # GEAK_DEVICE=interpreter tries the plumbing on a CPU machine
COMMON=(--strategy llm --model scripted --retries 0 --timeout 60 --device "$DEVICE" --run-dir "$OUT/runs" --json)

serve tests/transcripts/softmax_gpu.json openai
OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 $PY -m agent.cli optimize $TARGET "${COMMON[@]}" \
  --provider openai --iterations 4 --out "$OUT/best.py" > "$OUT/openai.json" 2> "$OUT/openai.stderr"
echo "openai run: exit $?" | tee "$OUT/exit_codes.txt"

serve tests/transcripts/softmax_gpu_anthropic.json anthropic
ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT $PY -m agent.cli optimize $TARGET "${COMMON[@]}" \
  --provider anthropic --iterations 1 > "$OUT/anthropic.json" 2> "$OUT/anthropic.stderr"
echo "anthropic run: exit $?" | tee -a "$OUT/exit_codes.txt"

for c in slow fast; do
  f=$(ls tests/transcripts/softmax_gpu/*_correct_$c.py)
  $PY -m agent.cli eval $TARGET --candidate "$f::softmax" --device "$DEVICE" --json > "$OUT/eval_$c.json" 2> "$OUT/eval_$c.stderr"
  echo "eval $c: exit $?" | tee -a "$OUT/exit_codes.txt"
done

$PY - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
fails, lines = [], []

def load(name):
    try:
        return json.loads((out / name).read_text())
    except Exception as e:  # noqa: BLE001 - report, do not crash
        fails.append(f"{name}: no report ({e}); see {name.replace('.json', '.stderr')}")
        return None

def sp(x):
    return "-" if x is None else f"{x:.3f}x"

oa, an = load("openai.json"), load("anthropic.json")
if oa:
    cands = oa["candidates"]
    outcomes = [c["outcome"] for c in cands]
    if outcomes != ["did_not_run", "wrong", "correct", "correct"]:
        fails.append(f"openai outcomes {outcomes}, expected did_not_run, wrong, correct, correct")
    ok = [c for c in cands if c["correct"] and c["speedup"] is not None]
    fastest = max(ok, key=lambda c: c["speedup"])["id"] if ok else None
    if not oa["improved"]:
        fails.append(f"openai run: no verified improvement: {oa['message']}")
    elif oa["best"] != fastest:
        fails.append(f"openai run chose {oa['best']}, but the fastest verified is {fastest}")
    lines += [f"device: {oa['device']}", "",
              "| candidate | what it is | outcome | speedup | spread | evaluator |",
              "| --- | --- | --- | --- | --- | --- |"]
    what = ["tl.arange on a runtime length", "padding read as 0.0", "three passes, blocks of 256",
            "rows in registers, short rows batched, warps scaled"]
    for c, w in zip(cands, what + [""] * len(cands)):
        lines.append(f"| {c['id']} | {w} | {c['outcome']} | {sp(c['speedup'])} | "
                     f"{'-' if c['spread_pct'] is None else '±%.1f%%' % c['spread_pct']} | {c['message'][:90]} |")
    lines += ["", f"chosen: {oa['best']} at {sp(oa['best_speedup'])} ({oa['message']})",
              f"tokens: {oa['usage']}", f"run directory: {oa['run_dir']}"]
    if oa.get("result") and oa["result"].get("cases"):
        lines += ["", "| case | ref ms | cand ms | speedup | % of peak BW |", "| --- | --- | --- | --- | --- |"]
        for c in oa["result"]["cases"]:
            t = c.get("timing")
            if t:
                bw = "-" if t.get("cand_bw_pct_peak") is None else f"{t['cand_bw_pct_peak']:.0f}%"
                lines.append(f"| {c['label']} | {t['ref_ms']:.4f} | {t['cand_ms']:.4f} | {t['speedup']:.3f}x | {bw} |")
if an:
    if not an["improved"]:
        fails.append(f"anthropic run: no verified improvement: {an['message']}")
    lines += ["", f"anthropic provider: {an['best']} at {sp(an['best_speedup'])}, tokens {an['usage']}"]
for c in ("slow", "fast"):
    e = load(f"eval_{c}.json")
    if e:
        t = e.get("timing")
        lines.append(f"geak eval {c} candidate alone: {e['status']}, "
                     f"{sp(t['speedup']) if t else 'not timed'}" + (f" ±{t['spread_pct']:.1f}%" if t else ""))
lines += ["", "checks: " + ("all passed" if not fails else "FAILED"), *[f"  - {f}" for f in fails]]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if fails else 0)
EOF
