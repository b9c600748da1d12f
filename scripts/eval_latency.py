"""Evaluations per minute and latency of the local runner, as a GEAK loop or the tuner sees it:
many distinct candidates against one reference.

    PYTHONPATH=<checkout> python scripts/eval_latency.py --out OUT [--device auto|interpreter] [--workers 2] [--n 32]
                                   [--label NAME]

Two phases, each on a warm runner (workers started before the clock, as in a running server):
every candidate's kernel is its own (``--kernels distinct``, the default: a GEAK loop's candidates
are new code, a tuner's configs new specialisations, so each evaluation compiles), or the 24
launch configs repeat over the same kernel source (``--kernels repeat``: later candidates hit
Triton's compile cache where the runner lets them).
``sequence`` evaluates the candidates one after another (the latency a person waits for one
evaluation: p50, p95); ``batch`` evaluates them all at once through ``evaluate_many`` (the
throughput with ``--workers`` at a time). Every candidate is a distinct file (its own kernel to
compile). Uses only the runner's public API, so the same script measures other revisions
(``PYTHONPATH=<checkout>``). Writes OUT/latency-<label>.json and prints a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

TEMPLATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), 0.0) + {salt}.0 * 0.0,
             mask=m)


def add_relu(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_relu_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block}, num_warps={warps})
    return out


def get_inputs():
    return [torch.randn({n}, device="cuda"), torch.randn({n}, device="cuda")]
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--label", default="run")
    ap.add_argument("--kernels", choices=("distinct", "repeat"), default="distinct")
    args = ap.parse_args()
    from runner.serve.local import LocalRunner
    from runner.schema import EvalOptions
    from runner.source import build_request

    size = 1 << 12 if args.device == "interpreter" else 1 << 20
    tmp = Path(tempfile.mkdtemp(prefix="geak-latency-"))
    (tmp / "pyproject.toml").write_text("")
    (tmp / "ref.py").write_text(TEMPLATE.format(block=256, warps=4, n=size, salt=0))
    salts = iter(range(1, 1 << 20))

    def requests(tag: str) -> list:
        reqs = []
        for i in range(args.n):
            block = [64, 128, 256, 512, 1024, 2048][i % 6]
            warps = [1, 2, 4, 8][(i // 6) % 4]
            name = f"cand_{tag}_{i}.py"
            (tmp / name).write_text(f"# candidate {tag} {i}\n" + TEMPLATE.format(
                block=block, warps=warps, n=size, salt=next(salts) if args.kernels == "distinct" else 0))
            req, _, _ = build_request("ref.py::add_relu", f"{name}::add_relu", EvalOptions(trials=2),
                                      root=tmp, cwd=tmp)
            reqs.append(req)
        return reqs

    ops: dict = {}  # seconds per worker op (and the wait for a worker), where the runner has them
    try:
        from runner.judge import pool as _pool

        def timed(fn, key):
            def wrapper(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    name = key(*a, **k)
                    ops.setdefault(name, []).append(time.perf_counter() - t0)
            return wrapper
        _pool.WorkerProcess.call = timed(_pool.WorkerProcess.call, lambda self, msg, *a, **k: f"{msg.get('op')}")
        _pool.WorkerProcess.close = timed(_pool.WorkerProcess.close, lambda *a, **k: "close")
        for name in ("_take_reference", "_take_spare", "_spawn", "_return_reference"):
            if hasattr(_pool.WorkerPool, name):
                setattr(_pool.WorkerPool, name, timed(getattr(_pool.WorkerPool, name), lambda *a, _n=name, **k: _n))
    except (ImportError, AttributeError):
        pass
    report = {"label": args.label, "device": args.device, "kernels": args.kernels, "workers": args.workers, "n": args.n, "elements": size}
    with LocalRunner(workers=args.workers, device=args.device) as runner:
        runner.warm(args.workers)
        report["device_name"] = runner.device_info().name
        runner.evaluate(requests("warm")[0])  # one evaluation before the clock (reference compiled)
        lat, statuses, phases, how, spreads = [], [], {}, {}, []
        ops.clear()
        for req in requests("seq"):
            t0 = time.perf_counter()
            r = runner.evaluate(req)
            lat.append(time.perf_counter() - t0)
            statuses.append(r.status)
            for k, v in (getattr(r, "phases", None) or {}).items():
                phases.setdefault(k, []).append(v)
            for c in getattr(r, "cases", None) or []:  # how each case was timed: method and repetitions
                if c.timing is not None:
                    key = f"{c.timing.method} x{c.timing.reps}"
                    how[key] = how.get(key, 0) + 1
                    spreads.append(max(c.timing.ref_spread_pct, c.timing.cand_spread_pct))
        seq_ops = {k: [round(sum(v) / len(lat), 3), len(v)] for k, v in ops.items()}
        reqs = requests("batch")
        t0 = time.perf_counter()
        results = runner.evaluate_many(reqs)
        wall = time.perf_counter() - t0
        lock = getattr(runner, "device_time", dict)()  # seconds timing held the GPU alone, readers held it, a timing waited
    lat_sorted = sorted(lat)
    report.update(
        p50_s=statistics.median(lat), p95_s=lat_sorted[int(0.95 * (len(lat) - 1))],
        sequence_per_minute=60 * len(lat) / sum(lat), sequence_ok=statuses.count("ok"),
        batch_per_minute=60 * len(reqs) / wall, batch_ok=sum(r.status == "ok" for r in results),
        statuses=sorted(set(statuses) | {r.status for r in results}),
        phases_p50_s={k: round(statistics.median(v), 3) for k, v in phases.items()},
        ops_s_per_evaluation=seq_ops, timed_as=how, device_lock_s=lock,
        spread_pct_p50=round(statistics.median(spreads), 2) if spreads else None)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"latency-{args.label}.json").write_text(json.dumps(report, indent=1))
    print(f"{args.label}: p50 {report['p50_s']:.3f} s, p95 {report['p95_s']:.3f} s, sequence "
          f"{report['sequence_per_minute']:.0f}/min ({report['sequence_ok']}/{args.n} ok), batch "
          f"{report['batch_per_minute']:.0f}/min with {args.workers} workers ({report['batch_ok']}/{args.n} ok)"
          + (f"; timed as {how}, spread p50 {report['spread_pct_p50']}%" if how else "")
          + f"; device lock {lock}"
          + (f"; phases p50 {report['phases_p50_s']}" if phases else "")
          + (f"; seconds per evaluation in [op: s, calls] {seq_ops}" if seq_ops else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
