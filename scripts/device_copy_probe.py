"""How fast tensors leave the GPU, in a plain process and in a sandboxed worker of the runner.

    PYTHONPATH=<checkout> python scripts/device_copy_probe.py [--mb 512]

Copies one tensor of ``--mb`` MB from the device to host memory four ways (``storage.cpu()``,
as ``torch.save`` does it; into pinned memory; into new pageable memory; into pageable memory
written before), and times filling new host memory (page faults, apart from the copy), first
in this process, then inside a worker (the function below is evaluated as the original of a
task, and prints from there). Each line names the process's CPUs, its locked-memory limit and
its effective capabilities: a candidate's record and a test's timing inputs leave the device
the first way.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

TASK = '''
import os
import resource
import time

import torch

MB = {mb}


def probe(label):
    x = torch.randn(MB * 1024 * 1024 // 4, device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter(); s = x.untyped_storage().cpu(); a = time.perf_counter() - t
    t = time.perf_counter(); y = torch.empty(x.shape, dtype=x.dtype, pin_memory=True); y.copy_(x); b = time.perf_counter() - t
    t = time.perf_counter(); z = torch.empty(x.shape, dtype=x.dtype); z.copy_(x); c = time.perf_counter() - t
    t = time.perf_counter(); z.copy_(x); d = time.perf_counter() - t
    t = time.perf_counter(); w = torch.empty(x.shape, dtype=x.dtype); w.fill_(1.0); e = time.perf_counter() - t
    del s, y, z, w
    caps = [line for line in open("/proc/self/status").read().splitlines() if line.startswith(("CapEff", "VmLck"))]
    print(f"D2H {{label}}: {{MB}} MB: storage.cpu() {{a:.3f}} s, into pinned {{b:.3f}} s, into new pageable {{c:.3f}} s, "
          f"into written pageable {{d:.3f}} s, host fill of new memory {{e:.3f}} s; "
          f"{{len(os.sched_getaffinity(0))}} CPUs, {{torch.get_num_threads()}} threads; RLIMIT_MEMLOCK {{resource.getrlimit(resource.RLIMIT_MEMLOCK)}}, "
          f"{{caps}}", flush=True)


def f(x):
    probe("worker")
    return x + 1


def get_inputs():
    return [torch.randn(1024, device="cuda")]
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=512)
    args = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="geak-d2h-"))
    (tmp / "pyproject.toml").write_text("")
    (tmp / "task.py").write_text(TASK.format(mb=args.mb))
    ns: dict = {}
    exec(compile(TASK.format(mb=args.mb), str(tmp / "task.py"), "exec"), ns)
    ns["probe"]("plain")
    from runner.schema import EvalOptions
    from runner.serve.local import LocalRunner
    from runner.source import build_request
    r = LocalRunner(workers=2, device="cuda")
    try:
        req, _, _ = build_request("task.py::f", None, EvalOptions(trials=1, timing=False), root=tmp, cwd=tmp)
        res = r.evaluate(req)
    finally:
        r.close()
    print(res.status, res.message[:160])
    print("\n".join(line for line in res.log.splitlines() if line.startswith("D2H")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
