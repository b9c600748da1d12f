"""Evaluations per minute through the Ray runner with 1, 2, ... actors, against the local runner
with as many workers, on the same work.

    PYTHONPATH=$PWD .venv/bin/python scripts/ray_throughput.py --out OUT [--address ray://HOST:PORT | ray:auto]
        [--actors 1,2] [--workers 1] [--evals 24] [--rounds 2] [--device interpreter] [--cases 0] [--trials 1]

Without ``--address`` the script starts a Ray cluster of its own in this process (``ray.init`` on
127.0.0.1, as many ``geak_interpreter`` slots as the most actors asked for, token authentication
with a token made for the run), so it needs nothing but ``pip install -r requirements/ray.txt``.
With ``--address`` it uses that cluster (``--device auto`` there takes its GPUs, one actor each).

Each phase is one runner (Ray with N actors of ``--workers`` each, or a local runner with N x
``--workers`` workers), warm before the clock (actors ready, one evaluation per slot done), then
``--evals`` evaluations of ``examples/softmax.py::softmax`` against ``examples/softmax_fast.py``
in one ``evaluate_many`` batch; phases alternate over ``--rounds``. Writes
OUT/ray-throughput.json and prints a table: evaluations per minute per phase and round, and how
many each actor served.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--address", default=None, help="ray://HOST:PORT or ray:auto (default: a cluster of its own)")
    ap.add_argument("--actors", default="1,2")
    ap.add_argument("--workers", type=int, default=1, help="workers per actor (default 1)")
    ap.add_argument("--evals", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="interpreter")
    ap.add_argument("--cases", default="0", help="comma-separated case indices ('' for all)")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--no-local", action="store_true", help="leave out the local runner's phases")
    args = ap.parse_args()
    counts = [int(a) for a in args.actors.split(",")]

    import ray

    from runner.serve.local import LocalRunner
    from runner.serve.ray import RESOURCE, RayRunner
    from runner.schema import EvalOptions
    from runner.source import build_request

    cases = [int(c) for c in args.cases.split(",")] if args.cases else None

    def requests(n: int) -> list:
        out = []
        for _ in range(n):
            req, _, _ = build_request("examples/softmax.py::softmax", "examples/softmax_fast.py::softmax",
                                      EvalOptions(trials=args.trials, cases=cases, device=args.device),
                                      root=ROOT, cwd=ROOT)
            out.append(req)
        return out

    if args.address is None:  # a cluster of our own, on loopback
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))  # not written to ~/.ray
        os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
        ray.init(num_cpus=os.cpu_count(), resources={RESOURCE: max(counts)}, include_dashboard=False,
                 _node_ip_address="127.0.0.1", log_to_driver=False, logging_level="ERROR")

    def ray_runner(n: int):
        kw = dict(device=args.device, workers=args.workers, actors=n)
        if args.address is None:
            return RayRunner(None, ship_code=False, **kw)
        return RayRunner.from_spec(args.address, **kw)

    phases = [(f"ray, {n} actor{'s' if n > 1 else ''} x {args.workers} worker", n, "ray") for n in counts]
    if not args.no_local:
        phases += [(f"local, {n * args.workers} worker{'s' if n * args.workers > 1 else ''}", n, "local")
                   for n in counts]
    rows: dict[str, list[dict]] = {name: [] for name, _, _ in phases}
    device = None
    for rnd in range(args.rounds):
        for name, n, kind in phases:
            t0 = time.perf_counter()
            if kind == "ray":
                runner = ray_runner(n)
                runner.settle(300)
                slots = runner.slots
            else:
                runner = LocalRunner(workers=n * args.workers, device=args.device)
                runner.warm(n * args.workers)
                slots = n * args.workers
            try:
                device = str(runner.device_info())
                warm = runner.evaluate_many(requests(slots))  # before the clock: references loaded, kernels compiled
                ready_s = time.perf_counter() - t0
                before = [a["served"] for a in runner.actors()] if kind == "ray" else []
                batch = requests(args.evals)
                t1 = time.perf_counter()
                results = runner.evaluate_many(batch)
                wall = time.perf_counter() - t1
                served = [a["served"] - b for a, b in zip(runner.actors(), before)] if kind == "ray" else []
            finally:
                runner.close()
            row = {"round": rnd, "per_minute": 60 * len(batch) / wall, "wall_s": wall, "ready_s": ready_s,
                   "ok": sum(r.status == "ok" and r.correct for r in results), "n": len(batch),
                   "warm_ok": sum(r.status == "ok" for r in warm), "served": served,
                   "statuses": sorted({r.status for r in results})}
            rows[name].append(row)
            print(f"round {rnd}: {name}: {row['per_minute']:.1f}/min ({row['ok']}/{row['n']} verified, "
                  f"ready in {ready_s:.1f} s" + (f", served {served}" if served else "") + ")", flush=True)
    if ray.is_initialized():
        ray.shutdown()
    report = {"device": device, "workers_per_actor": args.workers, "evals": args.evals, "rounds": args.rounds,
              "cases": args.cases, "trials": args.trials, "address": args.address or "own cluster (ray.init)",
              "cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__,
              "load_average": os.getloadavg(), "phases": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ray-throughput.json").write_text(json.dumps(report, indent=1))
    print(f"\n{device}; {args.evals} evaluations per phase and round; {os.cpu_count()} CPUs; load average now "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| phase | per minute (median of rounds) | rounds | verified |")
    print("| --- | --- | --- | --- |")
    for name, rs in rows.items():
        med = statistics.median(r["per_minute"] for r in rs)
        each = " / ".join(f"{r['per_minute']:.1f}" for r in rs)
        print(f"| {name} | {med:.1f} | {each} | {sum(r['ok'] for r in rs)}/{sum(r['n'] for r in rs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
