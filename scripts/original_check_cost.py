"""What the original's own check costs against the original's plain run, per task file.

    PYTHONPATH=<checkout> python scripts/original_check_cost.py --out DIR FILE.py [FILE.py ...]
        [--format tritonbench] [--device auto] [--workers 2]

For each task file: its *plain run*, the file executed as a program in a fresh process with an
empty Triton cache (``python FILE``: its wall time, and the time of the file's own code once
torch is imported and the device is initialised, which is what the check is compared with), and
*the check*: the original evaluated against itself on a warm ``LocalRunner`` (workers started
before the clock, as in a running bench or server), its ``duration_s`` and ``phases``. The goal
is the check ≤ 2 × the file's own code + 1 s. Writes DIR/original_check.json and prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = r'''
import os, runpy, sys, time
t0 = time.perf_counter()
import torch
if torch.cuda.is_available():
    torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
if torch.cuda.is_available():
    torch.cuda.synchronize()
t2 = time.perf_counter()
print("GEAK_PLAIN", t1 - t0, t2 - t1, flush=True)
'''


def plain(path: Path, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="geak-plain-") as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, "-c", PLAIN, str(path)], cwd=path.parent, env=env,
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:g} s"}
        wall = time.perf_counter() - t0
    line = next((x for x in p.stdout.splitlines() if x.startswith("GEAK_PLAIN")), None)
    if p.returncode != 0 or line is None:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1][:200]}
    _, setup, own = line.split()
    return {"wall_s": round(wall, 3), "setup_s": round(float(setup), 3), "own_s": round(float(own), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--format", default="tritonbench")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    from agent.bench.tasks import load_suite
    from runner.config import project_options
    from runner.serve.local import LocalRunner
    from runner.source import find_project_root

    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with LocalRunner(workers=args.workers, device=args.device) as runner:
        runner.warm(args.workers)
        for f in args.files:
            f = f.resolve()
            row: dict = {"file": f.name, "plain": plain(f, args.timeout)}
            tasks, _ = load_suite(f.parent, args.format, f.stem)
            task = next((t for t in tasks if t.path.resolve() == f), None)
            if task is None or task.error:
                row["check"] = {"error": f"not loaded: {task.error if task else 'no task'}"}
            else:
                opts = project_options(find_project_root(task.path))
                opts.device = args.device
                r = runner.evaluate(task.request(opts))
                row["check"] = {"status": r.status, "duration_s": r.duration_s, "phases": r.phases,
                                "message": (r.message or "")[:200]}
            own = row["plain"].get("own_s")
            took = row["check"].get("duration_s")
            if own is not None and took is not None:
                row["limit_s"] = round(2 * own + 1, 3)
                row["within"] = took <= row["limit_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            (args.out / "original_check.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n| file | plain run: wall / its own code | the check | limit (2x + 1 s) | within | check's phases |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        p, c = r["plain"], r["check"]
        pl = p.get("error") or f"{p['wall_s']:.2f} s / {p['own_s']:.2f} s"
        ck = c.get("error") or f"{c['duration_s']:.2f} s ({c['status']})"
        print(f"| {r['file']} | {pl} | {ck} | {r.get('limit_s', '-')} | {r.get('within', '-')} | "
              f"{c.get('phases', '')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
