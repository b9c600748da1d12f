"""The compile strategy's standalone Triton files against eager PyTorch and torch.compile, on a
GPU, at each target's largest input case.

    PYTHONPATH=$PWD python3 scripts/compile_vs_torch.py OUT.json PATH::SYMBOL [PATH::SYMBOL ...]
        [--file SYMBOL=FILE ...]

Each target's standalone file is written as ``geak optimize --strategy compile`` writes it before
tuning (the runner asks Inductor, ``agent.compile.standalone`` writes the file), unless
``--file`` names one (e.g. a tuned file from ``geak optimize ... --out``). Times are
``triton.testing.do_bench`` medians in ms; the outputs are checked close to eager's first.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _size(kw: dict) -> int:
    n = 1
    for v in kw.values():
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            n *= v
        elif isinstance(v, (tuple, list)) and all(isinstance(x, int) for x in v):
            n *= math.prod(v)
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("targets", nargs="+")
    ap.add_argument("--file", action="append", default=[])
    args = ap.parse_args()
    import torch
    import triton

    from agent.compile.standalone import write
    from runner.serve.local import LocalRunner
    from runner.source import build_request
    given = dict(f.split("=", 1) for f in args.file)
    runner = LocalRunner(device="auto")
    out = {}
    for spec in args.targets:
        path, sym = spec.split("::")
        t0 = time.time()
        try:
            orig = _load(path, f"orig_{sym}")
            sa_path = given.get(sym)
            if sa_path is None:
                req, _, _ = build_request(spec)
                g = runner.evaluate(req.with_candidate(None, trials=1, timing=False, inductor=True))
                sa_path = f"/tmp/standalone_{sym}.py"
                Path(sa_path).write_text(write(Path(path).read_text(), sym, g.generated or {}).text)
            sa = _load(sa_path, f"sa_{sym}")
            cases = list(getattr(orig, "INPUT_CASES", None) or [{}])
            kw = max(cases, key=_size)
            torch.manual_seed(0)
            call = [a.cuda() if isinstance(a, torch.Tensor) else a for a in orig.get_inputs(**kw)]
            if isinstance(getattr(orig, sym), type):
                init = orig.get_init_inputs()
                torch.manual_seed(0)
                eager = getattr(orig, sym)(*init).cuda()
                torch.manual_seed(0)
                mine = getattr(sa, sym)(*init).cuda()
            else:
                eager, mine = getattr(orig, sym), getattr(sa, sym)
            with torch.no_grad():
                compiled = torch.compile(eager)
                ref, got = eager(*call), mine(*call)
                compiled(*call)
                close = torch.allclose(ref.float(), got.float(), atol=1e-2, rtol=1e-2)
                ms = {k: triton.testing.do_bench(lambda f=f: f(*call), warmup=25, rep=100)
                      for k, f in (("eager", eager), ("compile", compiled), ("standalone", mine))}
            out[spec] = {"case": {k: str(v) for k, v in kw.items()}, "ms": ms, "file": sa_path,
                         "vs_eager": ms["eager"] / ms["standalone"], "vs_compile": ms["compile"] / ms["standalone"],
                         "close": close, "s": round(time.time() - t0, 1)}
        except Exception as e:  # noqa: BLE001  one target's failure is its row
            out[spec] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(spec, json.dumps(out[spec]), flush=True)
    runner.close()
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
