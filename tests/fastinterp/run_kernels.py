"""Run every suite task's function on its smallest input case under the Triton CPU interpreter,
plus kernels of the kinds the suite lacks, and print one JSON line: each output's bytes hashed,
and which names of ``triton.language`` hold a builtin after each launch.

    python tests/fastinterp/run_kernels.py [--fast] [--time]

``--fast``: with ``runner.worker.fastinterp`` installed first (as a worker installs it).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(Path(__file__).parent)]

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from runner.worker import guards  # noqa: E402

installed = False
if "--fast" in sys.argv:
    from runner.worker import fastinterp
    installed = fastinterp.install()
guards.patch_cuda_for_interpreter()
guards.patch_autotune_for_interpreter()


def builtins_now() -> dict:
    """Per namespace, the names that hold a builtin now (patched names hold a lambda)."""
    out = {}
    for label, pkg in (("tl", tl), ("tl.tensor", tl.tensor), ("tl.math", tl.math), ("tl.core", tl.core)):
        out[label] = sorted(n for n, m in inspect.getmembers(pkg) if tl.core.is_builtin(m))
    return out


def digest(obj) -> str:
    h = hashlib.sha256()

    def feed(o):
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu().contiguous().reshape(-1)
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(o, (list, tuple)):
            for x in o:
                feed(x)
        else:
            h.update(repr(o).encode())
    feed(obj)
    return h.hexdigest()[:16]


def smallest(cases: list) -> dict:
    def size(kw):
        return 1 if not kw else eval_size(kw)
    return min(cases, key=size)


def eval_size(kw: dict) -> int:
    n = 1
    for v in kw.values():
        if isinstance(v, int) and not isinstance(v, bool):
            n *= max(v, 1)
    return n


def main() -> int:
    results, states, seconds = {}, [], {}
    import extra_kernels
    tasks = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
    for name in tasks:
        mod = importlib.import_module(name)
        fn = getattr(mod, name, None)
        if fn is None or not hasattr(mod, "get_inputs"):
            continue
        kw = smallest(list(getattr(mod, "INPUT_CASES", [{}])))
        torch.manual_seed(0)
        with guards.InterpreterDevice():
            args = mod.get_inputs(**kw)
            t0 = time.perf_counter()
            out = fn(*args)
        seconds[name] = round(time.perf_counter() - t0, 3)
        results[name] = [digest(out), digest(args)]
        states.append(builtins_now())
    for name, run in extra_kernels.RUNS.items():
        torch.manual_seed(0)
        t0 = time.perf_counter()
        out = run()
        seconds[name] = round(time.perf_counter() - t0, 3)
        results[name] = [digest(out)]
        states.append(builtins_now())
    print(json.dumps({"installed": installed, "results": results, "states": states, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
