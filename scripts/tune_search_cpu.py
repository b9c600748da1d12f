"""The tuner's search on the CPU interpreter, as it searches on a GPU: which configs it runs and
which of them fail verification (nothing is timed, so the descent never moves; the sample,
what it learns from failures and the descent's spread over the knobs are what this shows).

    python scripts/tune_search_cpu.py CHECKOUT TASKS_DIR OUT.json [--tasks a,b] [--max-configs 16]
        [--exclude a,b] [--budget S]

``CHECKOUT``: the GEAK checkout whose tuner runs (this one, or an older revision's worktree).
``--budget S``: each task as ``--task-budget S`` runs it: the original's own check first, then the
search under a deadline S seconds after the task started. A task whose tuner raises is recorded
with its traceback (a tuner bug) and the others go on. OUT.json is written after every task.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout")
    ap.add_argument("tasks_dir")
    ap.add_argument("out")
    ap.add_argument("--tasks", default=None)
    ap.add_argument("--max-configs", type=int, default=16)
    ap.add_argument("--format", default="tritonbench")
    ap.add_argument("--exclude", default="")
    ap.add_argument("--budget", type=float, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.checkout).resolve()))
    from agent.bench.tasks import load_suite
    from agent.deadline import Deadline
    from agent.tune.tuner import tune
    from runner.config import project_options
    from runner.serve.local import LocalRunner
    from runner.source import find_project_root
    tasks, _ = load_suite(Path(args.tasks_dir), args.format, args.tasks)
    tasks = [t for t in tasks if t.name not in set(args.exclude.split(","))]
    opts = project_options(find_project_root(tasks[0].path))
    opts.device, opts.trials = "interpreter", 1
    runner = LocalRunner(workers=2, device="interpreter")
    out = {}
    try:
        for t in tasks:
            out[t.name] = one(t, runner, opts, args, tune, Deadline)
            Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    finally:
        runner.close()
    return 0


def one(t, runner, opts, args, tune, Deadline) -> dict:
    """One task's search, as a JSON-able record (what it ran, or why it could not)."""
    t0 = time.monotonic()
    if t.error:
        return {"error": f"not loaded: {t.error}"}
    try:
        req = t.request(opts)
        deadline = original = None
        if args.budget:
            deadline = Deadline.after(args.budget, "task budget")
            original = runner.evaluate(req)
            if not original.correct:
                print(f"{t.name}: the original fails its own check ({original.status})", flush=True)
                return {"s": round(time.monotonic() - t0, 1), "original": f"{original.status}: {original.message[:200]}"}
        rep = tune(runner, req, "sm_90", max_configs=args.max_configs, trials_per_case=1, timed=True,
                   deadline=deadline, original=original)
    except Exception:
        import traceback
        print(f"{t.name}: TUNER RAISED\n{traceback.format_exc()}", flush=True)
        return {"s": round(time.monotonic() - t0, 1), "error": traceback.format_exc()}
    trials = [{"config": x.config, "status": x.status} for x in rep.trials]
    row = {"s": round(time.monotonic() - t0, 1), "space": rep.space_size, "trials": trials,
           "notes": rep.notes, "message": rep.message, "stopped": rep.stopped,
           "screened": [{"config": x.config, "why": x.pruned} for x in rep.screened]}
    print(f"{t.name}: {len(trials)} configs run of {rep.space_size}, "
          f"{sum(x['status'] == 'ok' for x in trials)} verified, "
          f"{sum(x['status'] == 'mismatch' for x in trials)} mismatched, {row['s']} s", flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
