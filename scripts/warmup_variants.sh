#!/usr/bin/env bash
# A fresh GPU worker's warm-up, three ways, timed beside each other on one machine:
#
#   bash scripts/warmup_variants.sh OUT_DIR [ROUNDS] [-- EVAL_LATENCY_ARGS...]
#
#   parts  this checkout: the pool asks for the warm-up one part per 'warm' op (10 parts), each
#          holding the device lock for reading (runner/worker/warmup.py: gpu_part)
#   light  the same, with only the first two parts (PyTorch's CUDA operations, a Triton launch)
#          as one op
#   none   no warm-up beyond the CUDA context the worker makes before its hello
#
# Each variant is a copy of this checkout's agent/, runner/ and scripts/ (git archive HEAD, so
# commit first) under OUT_DIR/variants/, with gpu_part changed and nothing else. Each round runs
# scripts/eval_latency.py (default: --n 20 --workers 2) once per variant, in turn; the summaries
# are printed and OUT_DIR/latency-<variant><round>.json written. On the CPU the three are the
# same (a CPU worker has no warm-up): there the script only shows that it runs.
set -euo pipefail
OUT=${1:?OUT_DIR}; shift
ROUNDS=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then ROUNDS=$1; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--n 20 --workers 2)
here=$(pwd)
mkdir -p "$OUT/variants"
for v in parts light none; do
  rm -rf "$OUT/variants/$v" && mkdir -p "$OUT/variants/$v"
  git -C "$here" archive HEAD agent runner scripts | tar -x -C "$OUT/variants/$v"
done
python3 - "$OUT/variants" <<'EOF'
import sys
from pathlib import Path
head = 'def gpu_part(index: int, device: str = "cuda") -> bool:\n'
bodies = {
    "light": '    """(light) The CUDA operations and a launch, as one op."""\n'
             '    _gpu_part(0, device)\n    _gpu_part(1, device)\n'
             '    if device == "cuda":\n        import torch\n        torch.cuda.empty_cache()\n    return False\n',
    "none": '    """(none) No warm-up."""\n    return False\n',
}
for name, body in bodies.items():
    f = Path(sys.argv[1]) / name / "runner" / "worker" / "warmup.py"
    text = f.read_text()
    if head not in text:
        sys.exit(f"{f}: no '{head.strip()}' to change")
    f.write_text(text.replace(head, head + body + "\n\n" + head.replace("gpu_part", "_gpu_part"), 1))
EOF
for r in $(seq "$ROUNDS"); do
  for v in parts light none; do
    ck="$OUT/variants/$v"
    PYTHONPATH="$ck${PYTHONPATH:+:$PYTHONPATH}" timeout 170 python3 "$ck/scripts/eval_latency.py" \
      --out "$OUT" --label "$v$r" "${args[@]}" 2>&1 | tail -1 | cut -c1-400
  done
done
