"""The runner's own GPU measurements: repeatability, cost per evaluation, throughput.

    python scripts/gpu_runner_checks.py --out DIR [--quick]

Writes DIR/runner_checks.json and prints a Markdown summary (copied into docs/benchmarks.md).
Needs a CUDA or ROCm GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.serve.local import LocalRunner  # noqa: E402
from runner.schema import EvalOptions, to_dict  # noqa: E402
from runner.source import build_request  # noqa: E402

# (target, candidate): the same kernel twice for repeatability; a real pair for the cost check.
SELF_PAIRS = ["examples/add_relu.py::add_relu", "examples/softmax.py::softmax",
              "examples/rmsnorm.py::rmsnorm", "examples/layernorm.py::layernorm",
              "examples/matmul.py::matmul"]
COST_PAIR = ("examples/softmax.py::softmax", "examples/softmax_fast.py::softmax")

ADD_RELU_TEMPLATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), 0.0), mask=m)


def add_relu(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_relu_kernel[(triton.cdiv(n, {block}),)](x, y, out, n, BLOCK={block}, num_warps={warps})
    return out


def get_inputs():
    return [torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")]
'''


def repeatability(runner: LocalRunner, runs: int) -> list[dict]:
    rows = []
    for spec in SELF_PAIRS:
        if not (ROOT / spec.split("::")[0]).exists():
            continue
        speedups, per_case = [], {}
        for _ in range(runs):
            req, _, _ = build_request(spec, spec, EvalOptions(trials=1), root=ROOT, cwd=ROOT)
            r = runner.evaluate(req)
            if r.status != "ok" or not r.timing:
                rows.append({"kernel": spec, "error": r.message})
                break
            long_cases = [c for c in r.cases if c.timing and c.timing.ref_ms >= 0.020]
            if not long_cases:
                rows.append({"kernel": spec, "error": "no case of 20 µs or more"})
                break
            ref = sum(c.timing.ref_ms for c in long_cases)
            cand = sum(c.timing.cand_ms for c in long_cases)
            speedups.append(ref / cand)
            for c in long_cases:
                per_case.setdefault(c.label, []).append(c.timing.speedup)
        else:
            rows.append({"kernel": spec, "runs": runs, "median": statistics.median(speedups),
                         "min": min(speedups), "max": max(speedups),
                         "cases": {k: {"median": statistics.median(v), "min": min(v), "max": max(v),
                                       "ref_ms": None} for k, v in per_case.items()},
                         "ok": 0.98 <= statistics.median(speedups) <= 1.02 and
                               all(0.95 <= s <= 1.05 for s in speedups)})
    return rows


def bare_do_bench(target: str, candidate: str) -> tuple[float, list[float]]:
    """Wall time of triton.testing.do_bench on both kernels over the same cases, in-process."""
    import torch
    import triton.testing

    def load(spec):
        path, sym = spec.split("::")
        s = importlib.util.spec_from_file_location(Path(path).stem + "_bare", ROOT / path)
        m = importlib.util.module_from_spec(s)
        s.loader.exec_module(m)
        return m, getattr(m, sym)

    ref_mod, ref = load(target)
    _, cand = load(candidate)
    cases = getattr(ref_mod, "INPUT_CASES", [{}])
    inputs = [ref_mod.get_inputs(**c) for c in cases]
    for args in inputs:  # compile outside the measured wall time, as the workers are warm too
        ref(*args), cand(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ms = []
    for args in inputs:
        ms.append(triton.testing.do_bench(lambda: ref(*args)))
        ms.append(triton.testing.do_bench(lambda: cand(*args)))
    return time.perf_counter() - t0, ms


def cost(runner: LocalRunner, reps: int) -> dict:
    target, candidate = COST_PAIR
    req, _, _ = build_request(target, candidate, EvalOptions(), root=ROOT, cwd=ROOT)
    runner.evaluate(req)  # warm: worker started, kernels compiled once
    walls = []
    for _ in range(reps):
        req, _, _ = build_request(target, candidate, EvalOptions(), root=ROOT, cwd=ROOT)
        t0 = time.perf_counter()
        r = runner.evaluate(req)
        walls.append(time.perf_counter() - t0)
    bare, ms = bare_do_bench(target, candidate)
    return {"pair": f"{target} vs {candidate}", "status": r.status, "eval_wall_s": statistics.median(walls),
            "eval_walls_s": walls, "bare_do_bench_wall_s": bare, "ratio": statistics.median(walls) / bare,
            "speedup": r.timing.speedup if r.timing else None, "cases": len(r.cases),
            "eval_duration_s_in_worker": r.duration_s, "do_bench_ms": ms}


def throughput(workers: int, n: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="geak-thru-"))
    (tmp / "pyproject.toml").write_text("")
    (tmp / "ref.py").write_text(ADD_RELU_TEMPLATE.format(block=256, warps=4))
    reqs = []
    for i in range(n):
        block = [64, 128, 256, 512, 1024, 2048][i % 6]
        warps = [1, 2, 4, 8][(i // 6) % 4]
        name = f"cand_{i}.py"
        # A comment makes each file distinct, so every candidate compiles its own kernel.
        (tmp / name).write_text(f"# candidate {i}\n" + ADD_RELU_TEMPLATE.format(block=block, warps=warps))
        req, _, _ = build_request("ref.py::add_relu", f"{name}::add_relu", EvalOptions(trials=2),
                                  root=tmp, cwd=tmp)
        reqs.append(req)
    with LocalRunner(workers=workers, device="cuda") as runner:
        runner.warm(workers)
        t0 = time.perf_counter()
        results = runner.evaluate_many(reqs)
        wall = time.perf_counter() - t0
    ok = sum(r.status == "ok" for r in results)
    return {"workers": workers, "candidates": n, "ok": ok, "wall_s": wall, "per_minute": 60 * n / wall,
            "statuses": sorted({r.status for r in results})}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["repeat", "cost", "throughput"], action="append")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only or ["repeat", "cost", "throughput"])
    report: dict = {}
    with LocalRunner(workers=1, device="cuda") as runner:
        report["device"] = to_dict(runner.device_info())
        if "repeat" in only:
            report["repeatability"] = repeatability(runner, 3 if args.quick else 10)
            print(json.dumps(report["repeatability"], indent=1), flush=True)
            (out / "runner_checks.json").write_text(json.dumps(report, indent=1))
        if "cost" in only:
            report["cost"] = cost(runner, 2 if args.quick else 5)
            print(json.dumps(report["cost"], indent=1), flush=True)
            (out / "runner_checks.json").write_text(json.dumps(report, indent=1))
    if "throughput" in only:
        report["throughput"] = []
        for w in (1, 2, 4):
            report["throughput"].append(throughput(w, 12 if args.quick else 32))
            (out / "runner_checks.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report["throughput"], indent=1), flush=True)
    (out / "runner_checks.json").write_text(json.dumps(report, indent=1))
    print("\n## summary")
    for row in report.get("repeatability", []):
        if "error" in row:
            print(f"| {row['kernel']} | error: {row['error']} |")
        else:
            print(f"| {row['kernel']} | {row['runs']} | {row['median']:.4f} | {row['min']:.4f} | "
                  f"{row['max']:.4f} | {'pass' if row['ok'] else 'FAIL'} |")
    if "cost" in report:
        c = report["cost"]
        print(f"cost: eval {c['eval_wall_s']:.2f} s vs bare do_bench {c['bare_do_bench_wall_s']:.2f} s "
              f"= {c['ratio']:.2f}x")
    for t in report.get("throughput", []):
        print(f"throughput: {t['workers']} workers: {t['per_minute']:.1f}/min ({t['ok']}/{t['candidates']} ok)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
