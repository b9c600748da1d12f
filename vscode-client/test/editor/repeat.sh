#!/usr/bin/env bash
# Run the real-editor test N times in a row (default 20); each run's log goes to
# $GEAK_EDITOR_OUT/repeat/run-<i>.log (default test/editor/out/repeat/), failed runs' screenshots
# and notes to run-<i>-FAILED/. Prints one line per run and the count that passed.
#   test/editor/repeat.sh [N]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
N=${1:-20}
OUT=${GEAK_EDITOR_OUT:-$HERE/out}
LOGS=$OUT/repeat
mkdir -p "$LOGS"
passed=0
for i in $(seq 1 "$N"); do
  t0=$(date +%s)
  if "$HERE/run.sh" test > "$LOGS/run-$i.log" 2>&1; then
    passed=$((passed + 1)); verdict=passed
  else
    verdict=FAILED
    mkdir -p "$LOGS/run-$i-FAILED"
    cp "$OUT"/FAILED-* "$OUT"/shots/FAILED-* "$LOGS/run-$i-FAILED/" 2>/dev/null || true
  fi
  echo "run $i/$N: $verdict ($(( $(date +%s) - t0 )) s); $passed passed so far"
done
echo "passed $passed of $N"
[ "$passed" = "$N" ]
