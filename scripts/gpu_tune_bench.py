"""The tuner on a GPU, side by side with Triton's own ``@triton.autotune`` over the same space.

    python scripts/gpu_tune_bench.py --out DIR [--kernels add_relu,softmax] [--workers 4]

For each example kernel:

* ``geak``: ``tune()`` as ``geak optimize`` runs it (every config checked for correctness,
  AOT-pruned, timed interleaved against the original; coordinate descent when the space is
  larger than the budget), in both edit forms (``constants`` and ``autotune``); the reported
  speedup is the confirmation run's, on a fresh evaluation of the edited file.
* ``triton``: the kernel decorated with ``@triton.autotune`` over the same search space (a
  seeded sample of the same size as geak's budget when the space is larger), keyed on the
  same shape arguments. Its search time is the wall time of the first call per input case
  (benchmarking every config, compiles included) in a fresh process with an empty compile
  cache; the resulting kernel is then measured by the same evaluator against the original.

Every measurement starts with an empty Triton cache (``TRITON_CACHE_DIR``), so neither side
reuses the other's compiles. Writes DIR/tune_bench.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.tune.knobs import find_launch_sites, render_autotune_launch  # noqa: E402
from agent.tune.tuner import (_BYTES, DEFAULT_LAUNCH, dot_blocks, screen_part, search_space,  # noqa: E402
                              shape_key, static_limit, tune)
from runner.local import LocalRunner  # noqa: E402
from runner.schema import EvalOptions, Target, to_dict  # noqa: E402
from runner.source import build_request  # noqa: E402

KERNELS = {"add_relu": "add_relu", "softmax": "softmax", "rmsnorm": "rmsnorm",
           "layernorm": "layernorm", "matmul": "matmul"}

FIRST_CALLS = r'''
import importlib.util, json, sys, time, torch
spec = importlib.util.spec_from_file_location("tuned", sys.argv[1])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
orig = importlib.util.spec_from_file_location("orig", sys.argv[2])
om = importlib.util.module_from_spec(orig); orig.loader.exec_module(om)
fn = getattr(mod, sys.argv[3])
out = []
for case in om.INPUT_CASES:
    torch.manual_seed(0)
    args = om.get_inputs(**case)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    out.append(time.perf_counter() - t0)
print(json.dumps(out))
'''


def fresh_cache(tmp: Path, name: str) -> None:
    d = tmp / f"cache-{name}-{time.time_ns()}"
    d.mkdir()
    os.environ["TRITON_CACHE_DIR"] = str(d)


def peak(result) -> str:
    cases = [c.timing for c in result.cases if c.timing]
    flops = [t.cand_flops_pct_peak for t in cases if t.cand_flops_pct_peak is not None]
    if flops:
        return f"{max(flops):.0f}% FLOP"
    bw = [t.cand_bw_pct_peak for t in cases if t.cand_bw_pct_peak is not None]
    return f"{max(bw):.0f}% BW" if bw else "-"


def run_kernel(name: str, wrapper: str, args, tmp: Path) -> dict:
    spec = f"examples/{name}.py::{wrapper}"
    row: dict = {"kernel": spec}
    opts = EvalOptions(device="cuda")
    req, _, _ = build_request(spec, None, opts, root=ROOT, cwd=ROOT)
    text = req.files[req.target.path]

    for emit in args.emits.split(","):
        fresh_cache(tmp, f"geak-{emit}")
        runner = LocalRunner(workers=args.workers, device="cuda")
        try:
            base = runner.evaluate(req)
            runner.pool.warm(args.workers)  # started workers, as in a running server or daemon
            t0 = time.perf_counter()
            rep = tune(runner, req, base.device.arch, max_configs=args.max_configs, trials_per_case=2,
                       timed=True, emit=emit)
            wall = time.perf_counter() - t0
        finally:
            runner.close()
        conf = rep.confirmation
        phases: dict = {}
        for t in rep.trials:
            for k, v in t.phases.items():
                phases[k] = round(phases.get(k, 0.0) + v, 2)
        row[emit] = {
            "phases_s": phases, "screened": len(rep.screened), "seeds": rep.seeds,
            "screened_configs": [{"config": t.config, "why": t.pruned} for t in rep.screened],
            "tried_configs": [t.config for t in rep.trials],
            "improved": rep.improved, "message": rep.message, "space": rep.space_size, "tried": rep.tried,
            "verified": sum(t.correct for t in rep.trials), "search_s": round(wall, 1),
            "best": rep.best, "search_speedup": rep.search_speedup, "speedup": rep.best_speedup,
            "autotune_configs": rep.autotune_configs, "key": rep.autotune_key,
            "per_shape": [to_dict(c) for c in rep.per_shape],
            "ref_ms": conf.timing.ref_ms if conf and conf.timing else None,
            "tuned_ms": conf.timing.cand_ms if conf and conf.timing else None,
            "peak": peak(conf) if conf and conf.timing else None,
            "confirm_status": conf.status if conf else None,
            "incorrect_configs": [{"config": t.config, "status": t.status, "message": t.message[:500]}
                                  for t in rep.trials if not t.correct],
        }
        row["base_peak"] = peak(base) if base.timing else None
        row["device"] = f"{base.device.name} ({base.device.arch})"
        row["_trials"] = rep.trials
        print(f"  geak {emit}: {rep.message} [{wall:.1f}s; {rep.tried} run, {len(rep.screened)} screened out, "
              f"{rep.seeds} seeds; worker seconds per phase {phases}]", file=sys.stderr, flush=True)
        for t in rep.trials:
            if not t.correct:
                print(f"    not verified: {t.config}: {t.status}: {t.message[:300]}", file=sys.stderr, flush=True)

    if args.skip_triton:
        row.pop("_trials", None)
        return row
    # Triton's @triton.autotune over the same space (same budget when the space is larger).
    (site,) = find_launch_sites(text, wrapper)[:1]
    # @triton.autotune holds literal values: geak's computed knobs and kernel rewrites stay as
    # written on this side (its space is geak's literal axes).
    original = {**{k.name: k.value for k in site.knobs}, **site.axes_original()}
    site.exprs = []
    space = search_space(site, "cuda", "tl.dot" in text)
    trials = row.pop("_trials")
    blocks = dot_blocks(k.name for k in site.knobs) if "tl.dot" in text else None
    if blocks:  # the same static pruning as geak's, so both search the same set
        sizes = [_BYTES.get(ty.lstrip("*"), 4) for t in trials for r in t.resources if r.kernel == site.kernel
                 for ty in r.arg_types.split(", ") if ty.startswith("*")]
        elem = max(sizes) if sizes else 4
        base_cfg = {k.name: k.value for k in site.knobs}
        space = [c for c in space if static_limit({**base_cfg, **c}, blocks, "sm_90", elem, DEFAULT_LAUNCH["cuda"]) is None]
    sampled = len(space) > args.max_configs
    original = next((c for c in space if all(c.get(k.name) == k.value for k in site.knobs)), None)
    if sampled:  # the same budget as geak's search; the original's config always among them
        rest = [c for c in space if c != original]
        space = ([original] if original else []) + random.Random(0).sample(rest, args.max_configs - (1 if original else 0))
    key = shape_key(text, site, trials)
    row["triton"] = triton_autotune(name, wrapper, req, text, site, space, key, tmp)
    row["triton"]["sampled"] = sampled
    if args.triton_same and trials:
        # The same configs geak ran (its search's choice), so both sides time the same set.
        # (their literal part: an expression or a rewrite cannot go into an autotune config)
        lit = [screen_part(dict(t.config), original, hints=("eviction_policy", "input_precision", "num_ctas"))
               for t in trials]
        same = [c for i, c in enumerate(lit) if c and c not in lit[:i]]
        row["triton_same"] = triton_autotune(name, wrapper, req, text, site, same, key, tmp)
    return row


def triton_autotune(name, wrapper, req, text, site, space, key, tmp: Path) -> dict:
    """Search time (first call per input case, empty cache, fresh process) and the result of
    ``@triton.autotune`` over ``space``, measured by the same evaluator against the original."""
    at_src = render_autotune_launch(text, site, space, key)
    at_path = tmp / f"{name}_triton_autotune_{time.time_ns()}.py"
    at_path.write_text(at_src)
    fresh_cache(tmp, "triton")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", FIRST_CALLS, str(at_path), str(ROOT / req.target.path), wrapper],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=560)
    total = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    firsts = json.loads(p.stdout.strip().splitlines()[-1])
    # Measure the autotuned kernel with the same evaluator (its warm-up runs the autotuning).
    runner = LocalRunner(workers=1, device="cuda")
    try:
        import copy
        creq = copy.deepcopy(req)
        creq.candidate = Target(req.target.path, wrapper)
        creq.candidate_files = {req.target.path: at_src}
        creq.options.trials = 3
        r = runner.evaluate(creq)
    finally:
        runner.close()
    out = {
        "configs": len(space), "key": key, "search_s": round(sum(firsts), 1),
        "process_s": round(total, 1), "status": r.status, "correct": r.correct,
        "speedup": r.timing.speedup if r.timing else None,
        "tuned_ms": r.timing.cand_ms if r.timing else None, "peak": peak(r) if r.timing else None,
        "message": r.message,
    }
    print(f"  triton autotune ({len(space)} configs): {r.status} {out['speedup']} [{out['search_s']}s]",
          file=sys.stderr, flush=True)
    return out


def table(rows: list[dict]) -> str:
    out = ["| kernel | original ms | geak tuned ms | speedup (constants) | speedup (autotune edit) | % of peak (orig → tuned) "
           "| configs tried / space | geak search s | Triton autotune: speedup, search s (configs) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    sp = []
    for r in rows:
        c, t = r.get("constants") or r.get("autotune"), r.get("triton", {})
        a = r.get("autotune", {"improved": False, "speedup": None})
        s_c = c["speedup"] if c["improved"] else 1.0
        sp.append(s_c)
        out.append(
            f"| {r['kernel']} | {c['ref_ms'] or '-'} | {c['tuned_ms'] or '-'} | "
            f"{s_c:.3f}x{'' if c['improved'] else ' (kept)'} | "
            f"{(a['speedup'] if a['improved'] else 1.0):.3f}x{'' if a['improved'] else ' (kept)'} | "
            f"{r['base_peak']} → {c['peak'] or r['base_peak']} | {c['tried']} / {c['space']} | "
            f"{c['search_s']} | "
            + (f"{t['speedup']:.3f}x, {t['search_s']} s ({t['configs']}{' sampled' if t['sampled'] else ''})"
               if t.get("speedup") else t.get("error", t.get("message", "-"))[:80].replace("|", "/")) + " |")
    geo = math.exp(sum(math.log(x) for x in sp) / len(sp)) if sp else float("nan")
    out.append(f"\ngeomean speedup (constants edit): {geo:.3f}x over {len(sp)} kernels")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-configs", type=int, default=48)
    ap.add_argument("--skip-triton", action="store_true", help="geak's tuner only")
    ap.add_argument("--emits", default="constants,autotune", help="edit forms to run, comma-separated")
    ap.add_argument("--triton-same", action="store_true",
                    help="also run @triton.autotune over exactly the configs geak's search ran")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as t:
        for name in args.kernels.split(","):
            print(f"{name} ...", file=sys.stderr, flush=True)
            try:
                rows.append(run_kernel(name, KERNELS[name], args, Path(t)))
            except Exception as e:  # keep the other kernels' numbers
                import traceback
                rows.append({"kernel": name, "error": traceback.format_exc()})
                print(traceback.format_exc(), file=sys.stderr)
            (out / "tune_bench.json").write_text(json.dumps(rows, indent=2, default=str))
    ok = [r for r in rows if "error" not in r]
    md = table(ok)
    (out / "tune_bench.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
