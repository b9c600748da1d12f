"""The compile strategy over a folder of PyTorch problems (KernelBench's format: ``class Model``,
``get_inputs``, ``get_init_inputs``): the share that becomes a verified standalone Triton file.

    PYTHONPATH=$PWD python3 scripts/compile_share.py DIR OUT.json [--device interpreter] [--symbol Model]
        [--run-s S] [--resume]

Per problem: the original's own check, Inductor's code (``runner.worker.inductor``), the standalone file
(``agent.compile.standalone``), its verification against the original; the outcome and the
first line of why not. OUT.json is written after every problem; the summary is printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path


def stage(out) -> str:
    """Where a problem stopped."""
    if out.original_fails:
        return "original fails here"
    if out.source:
        return "verified"
    m = out.message
    if "one graph" in m:
        return "graph break"
    if "no Triton kernel" in m:
        return "no Triton to write"
    if m.startswith("no standalone"):
        return "not written"
    if "not verified" in m:
        return "written, timed out" if "timed out" in m else "written, not verified"
    return "no code from Inductor"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--device", default="interpreter")
    ap.add_argument("--symbol", default="Model")
    ap.add_argument("--only", default=None, help="a regular expression on file names")
    ap.add_argument("--run-s", type=float, default=None,
                    help="each evaluation's run phase limit in seconds (the interpreter on a slow kernel)")
    ap.add_argument("--resume", action="store_true", help="keep OUT.json's rows and run only the others")
    args = ap.parse_args()
    from agent.optimize import optimize
    from runner.serve.local import LocalRunner
    from runner.source import SourceError, build_request
    root = Path(args.dir).resolve()
    runner = LocalRunner(workers=2, device=args.device)
    rows = json.loads(Path(args.out).read_text()) if args.resume and Path(args.out).exists() else {}
    files = sorted(root.glob("*.py"), key=lambda p: (int(re.match(r"\d+", p.name).group()) if re.match(r"\d+", p.name) else 0, p.name))
    for f in files:
        if (args.only and not re.search(args.only, f.name)) or f.name in rows:
            continue
        t0 = time.time()
        try:
            req, _, _ = build_request(f"{f.name}::{args.symbol}", root=root, cwd=root)
            if args.run_s:
                req.options.limits.run_s = args.run_s
            out = optimize(req, "compile", runner)
            rows[f.name] = {"stage": stage(out), "message": out.message[:400],
                            "kernels": len(out.tried[0].label.split(",")) if out.tried else 0,
                            "s": round(time.time() - t0, 1)}
        except SourceError as e:
            rows[f.name] = {"stage": "not read", "message": str(e.info.message)[:400], "s": round(time.time() - t0, 1)}
        print(f.name, rows[f.name]["stage"], rows[f.name]["s"], rows[f.name]["message"][:160], flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
    runner.close()
    counts = Counter(r["stage"] for r in rows.values())
    print(f"{counts['verified']} of {len(rows)} verified;", dict(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
