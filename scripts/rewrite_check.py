"""One program rewrite of the tuner, forced into every task that has its pattern, evaluated
against the original by the same evaluator: correctness everywhere, speed on a GPU.

    python scripts/rewrite_check.py TASKS_DIR [--tasks 'a,b*'] [--rewrite rows_per_program]
        [--value '4 per program'] [--device auto|cuda|interpreter] [--workers 8] [--out r.json]

For each task the first launch the tuner would tune (``find_launch_sites``); tasks whose kernel
lacks the pattern are listed as such. Prints one line per task and writes the results as JSON.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.bench.tasks import load_suite  # noqa: E402
from agent.tune.knobs import find_launch_sites, render_config  # noqa: E402
from agent.tune.rewrites import kernel_rewrites, rows_rewrite  # noqa: E402
from runner.config import project_options  # noqa: E402
from runner.serve.local import LocalRunner  # noqa: E402
from runner.source import find_project_root  # noqa: E402


def rewrite_of(text: str, symbol: str, name: str):
    sites = find_launch_sites(text, symbol)
    if not sites:
        return None, None
    site = sites[0]
    kdef = next((n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == site.kernel), None)
    if kdef is None:
        return None, None
    rws = kernel_rewrites(kdef, "cuda", "sm_90") + [r for r in [rows_rewrite(text, kdef, site)] if r is not None]
    rw = next((r for r in rws if r.name == name), None)
    if rw is not None:
        site.rewrites = [rw]
    return site, rw


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks_dir")
    ap.add_argument("--tasks", default=None)
    ap.add_argument("--format", default="auto")
    ap.add_argument("--rewrite", default="rows_per_program")
    ap.add_argument("--value", default="4 per program")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "interpreter"])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tasks, _ = load_suite(Path(args.tasks_dir), args.format, args.tasks)
    tasks = [t for t in tasks if not t.error]
    if not tasks:
        print("no task loaded", file=sys.stderr)
        return 2
    opts = project_options(find_project_root(tasks[0].path))
    opts.device, opts.trials = args.device, 1
    runner = LocalRunner(workers=args.workers, device=args.device)

    def one(task) -> dict:
        req = task.request(opts)
        text = req.files[req.target.path]
        site, rw = rewrite_of(text, task.symbol, args.rewrite)
        if rw is None:
            return {"task": task.name, "applies": False}
        if args.value not in rw.values:
            return {"task": task.name, "applies": True, "error": f"no value {args.value!r}: {rw.values}"}
        new = render_config(text, site, {args.rewrite: args.value})
        r = runner.evaluate(req.with_candidate(new, trials=1))
        return {"task": task.name, "applies": True, "status": r.status, "correct": r.correct,
                "speedup": r.timing.speedup if r.timing else None, "message": r.message[:300]}

    rows = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, args.workers // 2)) as ex:
            for row in ex.map(one, tasks):
                rows.append(row)
                if row["applies"]:
                    sp = f", {row['speedup']:.3f}x" if row.get("speedup") else ""
                    print(f"{row['task']}: {row.get('status', '-')}{sp}: {row.get('message', row.get('error', ''))[:160]}",
                          flush=True)
    finally:
        runner.close()
    applies = [r for r in rows if r["applies"]]
    ok = [r for r in applies if r.get("correct")]
    print(f"{args.rewrite}={args.value!r}: applies to {len(applies)} of {len(rows)} task(s); "
          f"{len(ok)} verified correct")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
