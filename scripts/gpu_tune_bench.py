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

Over a folder of task files (TritonBench-G, or any ``geak bench`` format), within a time limit:

    python scripts/gpu_tune_bench.py --out DIR --tasks-dir .ext/tbg --tasks 'matmul*,softmax*' \
        --task-budget 30 --wall 420 --workers 14

Per task: ``geak optimize --strategy tune`` as ``geak bench`` runs it (``--task-budget`` seconds
each, and the whole run stops its tasks at ``--wall`` seconds, keeping what each verified), and
``@triton.autotune`` over the same space (the tuner's space after its arithmetic pruning, a seeded
sample of ``--max-configs`` with the original's config when larger; an autotuned kernel's own
list and its neighbours), evaluated against the original by the same evaluator: its search
seconds are that evaluation's worker seconds less the original's own check's (the autotuning
happens in its first calls). Columns: original ms, tuned ms (an improved row's both from the
confirmation's interleaved measurement), speedup, % of peak (original → tuned,
``agent.roofline``), search s, configs, the same for Triton's autotune, and a verdict.

Tasks run one at a time by default (``--jobs 1``): a task's budget is the wall time of a search
that has the GPU to itself. With more, the tasks' evaluations queue on the runner's device lock
(timing holds it alone), and each search gets a share of its budget's time; the header says how
long the GPU was held alone and shared, and each row keeps where its evaluations' time went
(``original_phases``, ``timeline``). The ``--workers`` are started before the first task, as a
running server has them, so that no task's budget pays for starting them (``started`` in the
JSON says how long that took). The JSON names the code measured (a digest of ``agent/`` and
``runner/``): ``--skip-done DIR...`` runs only the tasks earlier parts of the same code did not
measure (unstarted, or cut by ``--wall``), and ``--merge DIR...`` puts the parts into one table,
refusing parts of different code, settings or device. Writes DIR/tbg_tune_bench.json and
DIR/tbg_tune_bench.md.

On a machine of several GPUs, ``--gpus N`` runs the tasks on N of them at once: one harness per
GPU (``CUDA_VISIBLE_DEVICES``), each with its own ``--workers`` and its tasks one at a time, so
every task still has a GPU to itself. The tasks (after ``--skip-done`` and ``--first``) are dealt
round the GPUs in their order; GPU I's part is DIR/gpuI (the same settings, so ``--merge`` and
``--skip-done`` take the parts of every GPU alike), and its output is DIR/gpuI/run.log.

Runs on a CPU too (the Triton interpreter): every config is verified there, but nothing is
timed, and the table says so.
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
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.tune.knobs import find_launch_sites, render_autotune_launch  # noqa: E402
from agent.tune.tuner import (ELEMENT_BYTES, DEFAULT_LAUNCH, dot_blocks, screen_part, search_space,  # noqa: E402
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
        sizes = [ELEMENT_BYTES.get(ty.lstrip("*"), 4) for t in trials for r in t.resources if r.kernel == site.kernel
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


# --------------------------------------------------------------------------- a folder of tasks


def _space_for_triton(text: str, site, rep_, max_configs: int):
    """The tuner's space as ``@triton.autotune`` configs and the source that holds them."""
    from agent.tune.knobs import find_autotune, render_autotune
    from agent.tune.tuner import autotune_space, backend_of
    backend, uses_dot = backend_of(rep_.arch), "tl.dot" in text
    at, _ = find_autotune(text, site.kernel)
    if at is not None:
        space = autotune_space(at, backend, uses_dot, site.has_loop)[:max_configs]
        return space, False, (lambda cfgs: render_autotune(text, at, cfgs)), "as the file writes it"
    # @triton.autotune holds literal values: computed knobs and kernel rewrites stay as written
    # on this side (the literal part of each of geak's configs, once each).
    original = {**{k.name: k.value for k in site.knobs}, **site.axes_original()}
    space = []
    for c in search_space(site, backend, uses_dot):
        lit = screen_part(c, original, hints=("eviction_policy", "input_precision", "num_ctas"))
        if lit and lit not in space:
            space.append(lit)
    blocks = dot_blocks(k.name for k in site.knobs) if uses_dot else None
    if blocks:  # the tuner's arithmetic pruning, with the element size it saw
        sizes = [ELEMENT_BYTES.get(ty.lstrip("*"), 4) for r in rep_.original_resources for ty in r.arg_types.split(", ")
                 if ty.startswith("*")]
        base_cfg = {k.name: k.value for k in site.knobs}
        space = [c for c in space if static_limit({**base_cfg, **c}, blocks, rep_.arch, max(sizes) if sizes else 4,
                                                  DEFAULT_LAUNCH[backend]) is None]
    sampled = len(space) > max_configs
    if sampled:
        original = next((c for c in space if all(c.get(k.name) == k.value for k in site.knobs)), None)
        rest = [c for c in space if c != original]
        space = ([original] if original else []) + random.Random(0).sample(rest, max_configs - (1 if original else 0))
    key = shape_key(text, site, rep_.trials)
    return space, sampled, (lambda cfgs: render_autotune_launch(text, site, cfgs, key)), key


def triton_over_the_same_space(req, out, runner, wall, max_configs: int, budget_s: float) -> dict:
    """``@triton.autotune`` over the tuner's space, evaluated against the original."""
    from agent.deadline import BudgetRunner, Deadline, earliest
    from agent.roofline import roofline
    rep_, text = out.report, req.files[req.target.path]
    sites = find_launch_sites(text, req.target.symbol)
    if not sites or not rep_ or not rep_.kernel:
        return {"skipped": "no launch to tune"}
    if wall.passed:
        return {"skipped": "the wall limit was reached"}
    space, sampled, render, key = _space_for_triton(text, sites[0], rep_, max_configs)
    if len(space) < 2:
        return {"skipped": "fewer than two configs"}
    try:
        src = render(space)
    except ValueError as e:
        return {"skipped": f"cannot write it as an @triton.autotune: {e}"}
    t0 = time.perf_counter()
    # Triton benchmarks every config at the first call of each shape: its side gets the task's
    # budget again on top of the original's check, so one slow task cannot hold the run.
    mine = earliest(wall, Deadline.after(budget_s + 30.0, "Triton's autotune budget"))
    r = BudgetRunner(runner, mine).evaluate(req.with_candidate(src, trials=3))
    wall_s = time.perf_counter() - t0
    worker = sum(v for k, v in r.phases.items() if k != "device_wait")
    base = sum(v for k, v in out.baseline.phases.items() if k != "device_wait")
    roof = roofline(r) if r.timing else None
    return {"configs": len(space), "sampled": sampled, "key": key, "status": r.status, "correct": r.correct,
            "speedup": r.timing.speedup if r.timing else None, "tuned_ms": r.timing.cand_ms if r.timing else None,
            "pct_peak": roof.pct if roof else None, "search_s": round(max(0.0, worker - base), 1),
            "eval_s": round(wall_s, 1), "message": r.message[:300]}


def _verdict(row: dict) -> str:
    g, t = row.get("speedup"), (row.get("triton") or {}).get("speedup")
    if row.get("verdict"):
        return row["verdict"]
    if g is None:
        why = ("timing needs a GPU" if "interpreter" in str(row.get("device")) else
               f"the original was not timed: {row['original_untimed']}" if row.get("original_untimed")
               else "the original was not timed")
        return f"untimed: {row['verified']} of {row['tried']} configs verified correct ({why})"
    if t is None:
        return "geak only (Triton's autotune: " + ((row.get("triton") or {}).get("skipped") or
                                                   (row.get("triton") or {}).get("status", "-")) + ")"
    if g > t * 1.01:
        return "geak faster than Triton's autotune"
    return "Triton's autotune faster" if t > g * 1.01 else "the same within 1%"


def tune_task(task, opts, runner, args, wall) -> dict:
    """One task: the tuner within its budget, then Triton's autotune over the same space."""
    from agent.optimize import OptimizeSettings, optimize
    from agent.tune.strategy import TuneSettings
    row: dict = {"task": task.name}
    if wall.passed:
        return {**row, "verdict": "not started: the wall limit was reached"}
    req = task.request(opts)
    t0 = time.perf_counter()
    try:
        out = optimize(req, "tune", runner, OptimizeSettings(
            arch=args.arch, root=task.root, deadline=wall,
            tune=TuneSettings(max_configs=args.max_configs, trials=2, budget_s=args.task_budget)))
    except ValueError as e:
        return {**row, "verdict": f"not tunable: {e}"}
    row["task_s"] = round(time.perf_counter() - t0, 1)
    if out.baseline is None or out.original_fails:
        return {**row, "verdict": out.message[:200]}
    rep_, base = out.report, out.baseline
    timed = base.timing is not None
    confirmed = out.result.timing if out.improved and out.result.timing else None
    row.update({
        # An improved row's two times are the confirmation's (one interleaved measurement, the
        # speedup's own); the original's check measured it apart (original_check_ms), and two
        # measurements of a few-microsecond kernel differ by more than the gains at stake.
        "original_ms": confirmed.ref_ms if confirmed else (base.timing.cand_ms if timed else None),
        "tuned_ms": confirmed.cand_ms if confirmed else (base.timing.cand_ms if timed else None),
        "original_check_ms": base.timing.cand_ms if timed else None,
        "speedup": out.speedup if out.improved else (1.0 if timed else None), "improved": out.improved,
        "pct_peak": [rep_.original_pct_peak, rep_.best_pct_peak if out.improved else rep_.original_pct_peak],
        "peak_basis": rep_.peak_basis, "search_s": round((rep_.search_s or 0) + (rep_.confirm_s or 0), 1),
        "confirm_s": rep_.confirm_s,  # of search_s: the confirmation's own seconds
        "tried": rep_.tried, "verified": sum(t.correct for t in rep_.trials), "space": rep_.space_size,
        "stopped": rep_.stopped, "stopped_after": rep_.stopped_after, "message": rep_.message[:300],
        "best": rep_.best, "device": str(base.device) if base.device else None,
        # Where the time went: the original's check and each finished config's evaluation.
        "original_phases": dict(base.phases), "original_s": base.duration_s, "timeline": rep_.timeline,
        "original_untimed": None if timed else base.timing_unavailable})
    if not rep_.kernel or not rep_.space_size:
        row["verdict"] = f"not tunable: {rep_.message[:160]}"
    elif not args.skip_triton:
        row["triton"] = triton_over_the_same_space(req, out, runner, wall, args.max_configs, args.task_budget)
    row["verdict"] = _verdict(row)
    return row


def _cell(v, spec=".4f", suffix=""):
    return "-" if v is None else format(v, spec) + suffix


def _pct(v) -> str:
    return "unknown" if v is None else f"{v:.0f}%"


def tasks_table(rows: list[dict], timed: bool) -> str:
    out = ["| task | original ms | tuned ms | speedup | % of peak (orig → tuned) | search s | configs run / space "
           "| Triton autotune: speedup, search s (configs) | verdict |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        t = r.get("triton") or {}
        peak = r.get("pct_peak") or [None, None]
        stop = f", stopped: {r['stopped']}" if r.get("stopped") else ""
        n = f"{t.get('configs', '-')}{' sampled' if t.get('sampled') else ''}"
        tri = (t.get("skipped", "-") if "status" not in t else
               f"{t['status']}{', correct' if t.get('correct') else ''}, untimed ({n})" if t.get("speedup") is None
               else f"{t['speedup']:.3f}x, {t.get('search_s', '-')} s ({n})")
        out.append(f"| {r['task']} | {_cell(r.get('original_ms'))} | {_cell(r.get('tuned_ms'))} | "
                   f"{_cell(r.get('speedup'), '.3f', 'x')} | "
                   + (f"{_pct(peak[0])} → {_pct(peak[1])}" if timed else "-") + " | "
                   f"{r.get('search_s', '-')} | {r.get('tried', '-')} / {r.get('space', '-')}{stop} | "
                   f"{tri.replace('|', '/')} | {r['verdict'].replace('|', '/')[:120]} |")
    sp = [r["speedup"] for r in rows if r.get("speedup")]
    if sp:
        out.append(f"\ngeomean speedup (geak, constants edit): "
                   f"{math.exp(sum(math.log(x) for x in sp) / len(sp)):.3f}x over {len(sp)} timed tasks")
    if not timed:
        out.append("\nNothing was timed (the CPU interpreter checks correctness only): original ms, tuned ms, "
                   "speedups and % of peak need a GPU.")
    return "\n".join(out)


def source_digest() -> str:
    """What code measured: a digest of the package sources (``agent/``, ``runner/``), so that
    parts run apart can be put in one table only when they ran the same code."""
    import hashlib
    h = hashlib.sha256()
    for f in sorted([*ROOT.glob("agent/**/*.py"), *ROOT.glob("runner/**/*.py")]):
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def header(n: int, what: str, device: str, settings: str, lock: dict, source: str) -> str:
    return (f"{n} task(s) from {what} on {device}; {settings}; code {source}; the GPU held alone (timing) "
            f"{lock['write']:.0f} s, shared (checks) {lock['read']:.0f} s of {lock['wall']:.0f} s")


def complete(row: dict) -> bool:
    """A row that measured its task: not left unstarted, cut by ``--wall`` or lost to the harness."""
    v = row.get("verdict", "")
    return not (v.startswith("not started") or v.startswith("harness error") or row.get("stopped") == "time budget"
                or "the time budget was spent" in v or "the wall limit was reached" in v)


def merge_parts(parts: list[dict]) -> list[dict]:
    """One row per task over ``parts`` (their JSON), by task name: a complete row over one that
    is not, then the later part's. Raises ValueError when the parts differ in code, settings or
    device: one table measures one thing."""
    for key in ("source", "settings", "device", "versions"):
        seen = {json.dumps(p.get(key), sort_keys=True) for p in parts if key != "versions" or key in p}
        if len(seen) > 1:
            raise ValueError(f"the parts differ in {key} ({', '.join(sorted(seen))}); one table needs one code, "
                             "settings and device")
    rows: dict[str, dict] = {}
    for p in parts:
        for r in p["rows"]:
            if complete(r) or not complete(rows.get(r["task"], {"verdict": "not started"})):
                rows[r["task"]] = r
    return [rows[k] for k in sorted(rows)]


def read_parts(dirs: list[str], option: str) -> list[dict]:
    parts = []
    for d in dirs:
        f = Path(d) / "tbg_tune_bench.json"
        try:
            p = json.loads(f.read_text())
            if not isinstance(p, dict) or not isinstance(p.get("rows"), list) or "source" not in p:
                raise ValueError("not a table this harness wrote with its code digest")
        except (OSError, ValueError) as e:
            raise SystemExit(f"{option} {d}: cannot read {f} ({e}); give the --out folder of a run over "
                             "--tasks-dir") from None
        parts.append(p)
    return parts


def merge_main(args) -> int:
    """Parts run apart (``--merge DIR ...``) in one table."""
    parts = read_parts(args.merge, "--merge")
    try:
        ordered = merge_parts(parts)
    except ValueError as e:
        print(f"--merge: {e}", file=sys.stderr)
        return 2
    lock = {k: sum(p["device_lock"][k] for p in parts) for k in ("wall", "write", "read", "writer_waiting")}
    timed = any(r.get("original_ms") is not None for r in ordered)
    md = header(len(ordered), f"{len(parts)} parts", parts[0]["device"], parts[0]["settings"], lock,
                parts[0]["source"]) + "\n\n" + tasks_table(ordered, timed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tbg_tune_bench.json").write_text(json.dumps(
        {"device": parts[0]["device"], "versions": parts[0].get("versions"), "settings": parts[0]["settings"],
         "source": parts[0]["source"], "device_lock": lock, "rows": ordered}, indent=2, default=str))
    (out / "tbg_tune_bench.md").write_text(md + "\n")
    print(md)
    return 0


def select(tasks: list, exclude: Optional[str], order: Optional[int]) -> list:
    """The tasks less those ``exclude`` names (globs, comma-separated), in a random order fixed
    by the seed ``order`` (by name when None): any first part of that order is a random sample."""
    import fnmatch
    pats = [x.strip() for x in (exclude or "").split(",") if x.strip()]
    out = sorted((t for t in tasks if not any(fnmatch.fnmatch(t.name, x) for x in pats)), key=lambda t: t.name)
    if order is not None:
        random.Random(order).shuffle(out)
    return out


def same_files(tasks: list) -> list[tuple[str, str]]:
    """Pairs of task names that evaluate the same thing (``Task.digest``; the first name, the
    copy's): a folder copied into an earlier copy of itself lists every file twice, and a table
    counts each file once."""
    seen: dict[str, str] = {}
    pairs = []
    for t in sorted((t for t in tasks if not t.error), key=lambda t: (t.name.count("/"), t.name)):
        if t.digest in seen:
            pairs.append((seen[t.digest], t.name))
        else:
            seen[t.digest] = t.name
    return pairs


def tasks_main(args) -> int:
    """Every task of ``--tasks-dir`` through the tuner and Triton's autotune, ``--jobs`` at a time."""
    import concurrent.futures

    from agent.bench.tasks import load_suite
    from agent.deadline import Deadline
    from runner.config import project_options
    from runner.source import find_project_root
    wall = Deadline.after(args.wall, "time budget")
    tasks, _ = load_suite(Path(args.tasks_dir), args.format, args.tasks)
    twice = same_files(tasks)
    if twice:
        shown = ", ".join(f"{a} and {b}" for a, b in twice[:3]) + (f" (and {len(twice) - 3} more)" if len(twice) > 3 else "")
        print(f"--tasks-dir {args.tasks_dir}: {len(twice)} file(s) are there twice, under two names ({shown}); "
              "a table counts each file once: remove the copies (a folder copied into an earlier copy of itself "
              "does this)", file=sys.stderr)
        return 2
    tasks = select(tasks, args.exclude, args.order)
    if args.skip_done:  # resume a table built in parts: what earlier parts of the same code measured
        parts = read_parts(args.skip_done, "--skip-done")
        mine = source_digest()
        other = sorted({str(p.get("source")) for p in parts} - {mine})
        if other:
            print(f"--skip-done: those parts measured other code ({', '.join(other)}; this is {mine}): "
                  "their rows would not belong in this table", file=sys.stderr)
            return 2
        done = {r["task"] for p in parts for r in p["rows"] if complete(r)}
        tasks = [t for t in tasks if t.name not in done]
        print(f"--skip-done: {len(done)} task(s) already measured; {len(tasks)} to run", file=sys.stderr)
        if not tasks:
            return 0
    if args.first:
        tasks = tasks[:args.first]
    if args.shard:
        i, n = args.shard
        tasks = tasks[i::n]
        print(f"--shard {i}/{n}: {len(tasks)} task(s): {', '.join(t.name for t in tasks)}", file=sys.stderr,
              flush=True)
    if args.gpus > 1:
        return on_gpus(args, len(tasks))
    if not tasks:
        return 0
    runnable = [t for t in tasks if not t.error]
    opts = project_options(find_project_root(runnable[0].path))
    opts.device, opts.trials = args.device, 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runner = LocalRunner(workers=args.workers, device=args.device)
    # Workers started before the first task, as in a running language server or daemon: else the
    # first task's budget pays for starting them (9-15 s on the H200 with 14 workers), and its
    # original's check looks that much slower than it is.
    t0 = time.perf_counter()
    try:
        runner.pool.warm(args.workers)
    except Exception as e:  # no worker starts on this device: nothing below could run either
        runner.close()
        print(f"--device {args.device}: the workers did not start ({e})", file=sys.stderr)
        return 2
    started = {"workers": args.workers, "s": round(time.perf_counter() - t0, 1)}
    rows: list[dict] = [{"task": t.name, "verdict": f"not loaded: {t.error}"} for t in tasks if t.error]
    settings = (f"--task-budget {args.task_budget} s, --jobs {args.jobs}, --max-configs {args.max_configs}"
                + (", no Triton side" if args.skip_triton else ""))
    source = source_digest()

    def part() -> dict:
        # Written after every task, so that a run its caller kills still leaves a part that
        # --skip-done and --merge read: the rows it finished, with what they measured.
        info = runner.device_info()
        return {"device": str(info), "versions": {"torch": info.torch, "triton": info.triton},
                "settings": settings, "source": source, "device_lock": runner.pool.device_lock.usage(),
                "started": started,
                "rows": sorted(rows, key=lambda r: r["task"])}

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
            futures = {ex.submit(tune_task, t, opts, runner, args, wall): t for t in runnable}
            for f in concurrent.futures.as_completed(futures):
                try:
                    row = f.result()
                except Exception as e:  # keep the other tasks' numbers
                    row = {"task": futures[f].name, "verdict": f"harness error: {type(e).__name__}: {e}"[:300]}
                rows.append(row)
                print(f"{row['task']}: {row['verdict']}", file=sys.stderr, flush=True)
                (out / "tbg_tune_bench.json").write_text(json.dumps(part(), indent=2, default=str))
        result = part()
    finally:
        runner.close()
    rows, device, lock = result["rows"], result["device"], result["device_lock"]
    timed = any(r.get("original_ms") is not None for r in rows)
    md = header(len(runnable), f"{args.tasks_dir} ({args.tasks or 'all'})", device,
                f"{settings}, --wall {args.wall} s, --workers {args.workers} (started before the first task, "
                f"in {started['s']} s)", lock, source) \
        + "\n\n" + tasks_table(rows, timed)
    (out / "tbg_tune_bench.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "tbg_tune_bench.md").write_text(md + "\n")
    print(md)
    return 0


def visible_gpus(n: int, device: str) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` value of each of ``n`` harnesses: the i-th GPU this process
    sees (an index, or the i-th of its own ``CUDA_VISIBLE_DEVICES``). Raises SystemExit when the
    machine has fewer. On the interpreter (a CPU test of the dealing) nothing is set."""
    if device == "interpreter":
        return [""] * n
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in seen.split(",") if x.strip()] if seen is not None else None
    if ids is None:
        import torch
        ids = [str(i) for i in range(torch.cuda.device_count())]
    if len(ids) < n:
        raise SystemExit(f"--gpus {n}: this machine shows {len(ids)} GPU(s)"
                         + (f" (CUDA_VISIBLE_DEVICES={seen})" if seen is not None else "")
                         + f"; ask for at most {len(ids)}")
    return ids[:n]


def on_gpus(args, n_tasks: int) -> int:
    """``--gpus N``: this harness again, once per GPU, each with ``--shard I/N`` and its own
    ``--out DIR/gpuI`` (the last of an option given twice is the one argparse keeps), waited for.
    Returns the worst of their exit codes."""
    ids = visible_gpus(args.gpus, args.device)[:n_tasks]  # no GPU left without a task
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not ids:
        print(f"--gpus {args.gpus}: nothing to run", file=sys.stderr)
        return 0
    procs = []
    for i, gpu in enumerate(ids):
        d = out / f"gpu{i}"
        d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if gpu:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        cmd = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:],
               "--gpus", "1", "--shard", f"{i}/{len(ids)}", "--out", str(d)]
        log = open(d / "run.log", "w")
        procs.append((i, gpu, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    worst = 0
    for i, gpu, p, log in procs:
        rc = p.wait()
        log.close()
        worst = max(worst, rc)
        print(f"gpu{i}" + (f" (CUDA_VISIBLE_DEVICES={gpu})" if gpu else "") + f": exit {rc}; its part and log "
              f"are in {out / f'gpu{i}'}", file=sys.stderr, flush=True)
    return worst


def shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give I/N, as 0/4") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"{text!r}: I must be at least 0 and less than N")
    return i, n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tasks-dir", metavar="DIR", help="a folder of task files (TritonBench-G, ...) instead of "
                                                         "the example kernels")
    ap.add_argument("--tasks", metavar="PATTERN", help="with --tasks-dir: task names (glob, comma-separated)")
    ap.add_argument("--exclude", metavar="PATTERN", help="with --tasks-dir: task names to leave out (glob, comma-separated)")
    ap.add_argument("--order", type=int, metavar="SEED",
                    help="with --tasks-dir: run the tasks in a random order fixed by SEED (default: by name)")
    ap.add_argument("--first", type=int, metavar="N",
                    help="with --tasks-dir: only the first N tasks in that order (after --skip-done)")
    ap.add_argument("--format", default="auto", help="with --tasks-dir: the task files' format (default auto)")
    ap.add_argument("--task-budget", type=float, default=60.0, help="with --tasks-dir: seconds per task (60)")
    ap.add_argument("--wall", type=float, default=420.0,
                    help="with --tasks-dir: the whole run's seconds; tasks still running stop there (420)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="with --tasks-dir: tasks at once (1: each alone on the GPU, as its budget assumes; "
                         "more share the GPU's device lock, and each search gets a share of the budget's time)")
    ap.add_argument("--skip-done", nargs="+", metavar="DIR",
                    help="with --tasks-dir: leave out the tasks these earlier runs (their --out folders, of the same "
                         "code) measured; the tasks they left unstarted or cut at --wall run again")
    ap.add_argument("--merge", nargs="+", metavar="DIR",
                    help="put the tables of runs made apart (their --out folders) into one, in --out")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "interpreter"])
    ap.add_argument("--gpus", type=int, default=1, metavar="N",
                    help="with --tasks-dir: run the tasks on N GPUs of this machine at once, one harness per GPU "
                         "(each task still alone on its GPU); parts in --out/gpuI")
    ap.add_argument("--shard", type=shard, metavar="I/N",
                    help="with --tasks-dir: only every N-th task from the I-th (0-based), after --skip-done and "
                         "--first (what --gpus gives each GPU)")
    ap.add_argument("--arch", default=None, help="with --tasks-dir: target arch (default: the runner's GPU)")
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-configs", type=int, default=48)
    ap.add_argument("--skip-triton", action="store_true", help="geak's tuner only")
    ap.add_argument("--emits", default="constants,autotune", help="edit forms to run, comma-separated")
    ap.add_argument("--triton-same", action="store_true",
                    help="also run @triton.autotune over exactly the configs geak's search ran")
    args = ap.parse_args()
    if args.gpus < 1 or (args.gpus > 1 and args.shard):
        ap.error("--gpus takes a number of at least 1, and is not given with --shard (it deals the shards itself)")
    if args.merge:
        return merge_main(args)
    if args.tasks_dir:
        return tasks_main(args)
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
