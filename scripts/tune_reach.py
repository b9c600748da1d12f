"""What the tuner reaches in a directory of task files, statically (nothing runs).

    python scripts/tune_reach.py DIR [--format tritonbench] [--code CHECKOUT] [--list]

For each task: its target (as ``geak bench`` picks it), the launches the tuner finds from it,
and for the launch it would tune (statically: the first with a knob) the knobs it can search:
literal, computed (``triton.next_power_of_2(n)``, ``min(...)``, a name bound to one, a
``@triton.heuristics`` lambda), the kernel's program rewrites for ``--arch`` and the options
it can add. ``--code`` measures another GEAK checkout's tuner (an older revision) on the same
files; fields it does not have count as empty.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(files: list[Path], fmt: str, arch: str) -> list[dict]:
    import ast

    from agent.bench.formats import FormatError, adapt
    from agent.tune import knobs, tuner
    rewrites = None
    try:
        from agent.tune import rewrites
    except ImportError:
        pass
    rows = []
    for f in files:
        text = f.read_text()
        try:
            a = adapt(text, str(f), fmt)
        except FormatError as e:
            rows.append({"task": f.stem, "error": str(e)})
            continue
        sites = knobs.find_launch_sites(a.text, a.symbol)
        pick = getattr(tuner, "pick_site", lambda s: s[0])
        site = pick(sites) if sites else None
        row = {"task": f.stem, "target": a.symbol, "launches": len(sites), "literal": [], "computed": [],
               "rewrites": [], "space": 0}
        if site is not None:
            row["literal"] = [k.name for k in site.knobs]
            row["computed"] = [e.name for e in getattr(site, "exprs", [])]
            kdef = next((n for n in ast.parse(a.text).body if isinstance(n, ast.FunctionDef) and n.name == site.kernel),
                        None)
            if rewrites is not None and kdef is not None:
                site.rewrites = rewrites.kernel_rewrites(kdef, tuner.backend_of(arch), arch)
                row["rewrites"] = [rw.name for rw in site.rewrites]
            at, _ = knobs.find_autotune(a.text, site.kernel)
            uses_dot = "tl.dot" in a.text
            row["space"] = (len(tuner.autotune_space(at, "cuda", uses_dot, site.has_loop)) if at is not None
                            else len(tuner.search_space(site, "cuda", uses_dot)))
            row["autotuned"] = at is not None
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--format", default="tritonbench")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--code", default=str(ROOT), help="the GEAK checkout whose tuner is measured")
    ap.add_argument("--list", action="store_true", help="one line per task")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.code).resolve()))
    rows = measure(sorted(Path(args.dir).glob("*.py")), args.format, args.arch)
    ok = [r for r in rows if "error" not in r]
    if args.list:
        for r in rows:
            print(r)
    n = len(rows)
    count = {
        "tasks": n,
        "format errors": n - len(ok),
        "a launch found": sum(r["launches"] > 0 for r in ok),
        "a literal knob": sum(bool(r["literal"]) for r in ok),
        "a computed knob": sum(bool(r["computed"]) for r in ok),
        "a knob (literal or computed)": sum(bool(r["literal"] or r["computed"]) for r in ok),
        "a knob or an autotune list": sum(bool(r["literal"] or r["computed"] or r.get("autotuned")) for r in ok),
        "a program rewrite": sum(bool(r["rewrites"]) for r in ok),
        "a non-empty search space": sum(r["space"] > 0 for r in ok),
    }
    for k, v in count.items():
        print(f"{k:>32}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
