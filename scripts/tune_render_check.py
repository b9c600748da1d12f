"""Every launch of every task file, and the tuner's space at each: is every config written
into the file still Python? Nothing runs (no runner, no GPU); each rendered file is parsed.

    python scripts/tune_render_check.py TASKS_DIR [--format tritonbench] [--per-site 400]

A config that does not parse would come back from the runner as a compile error that the
original did not have: a tuner bug, found here over whole spaces rather than the configs one
search happens to sample. Spaces larger than ``--per-site`` are sampled (seed 0). Exits 1 when
any config does not parse, and names the first of each launch.
"""

from __future__ import annotations

import argparse
import ast
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tasks_dir")
    ap.add_argument("--format", default="tritonbench")
    ap.add_argument("--per-site", type=int, default=400)
    args = ap.parse_args()
    from agent.bench.tasks import load_suite
    from agent.tune.knobs import find_launch_sites
    from agent.tune.tuner import _Tuning, original_config
    from runner.config import project_options
    from runner.source import find_project_root
    tasks, _ = load_suite(Path(args.tasks_dir), args.format, None)
    opts = project_options(find_project_root(tasks[0].path))
    sites = rendered = bad = 0
    for t in tasks:
        if t.error:
            continue
        req = t.request(opts)
        text = req.files[req.target.path]
        for site in find_launch_sites(text, req.target.symbol):
            sites += 1
            tu = _Tuning(None, req, "sm_90", 1)  # the space and its rendering only: no runner is asked
            tu.site = site
            tu.report.kernel, tu.report.original = site.kernel, original_config(site)
            if not tu.build_space():
                continue
            space = tu.space if len(tu.space) <= args.per_site else random.Random(0).sample(tu.space, args.per_site)
            wrong = []
            for c in space:
                rendered += 1
                try:
                    ast.parse(tu.render(c))
                except (SyntaxError, ValueError) as e:
                    wrong.append((c, e))
            if wrong:
                bad += len(wrong)
                print(f"{t.name} ({site.kernel}, line {site.line}): {len(wrong)} of {len(space)} configs do not parse, "
                      f"e.g. {wrong[0][0]}: {wrong[0][1]}")
    print(f"{len(tasks)} task files, {sites} launches, {rendered} configs rendered, {bad} do not parse")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
