"""``geak bench DIR``: run a benchmark suite and report the paper's metrics.

Exit codes: 0 every task verified correct, 1 the suite ran and some task is not (a task file that
does not fit its format is a harness error in the report; the others run), 2 bad usage or bad
input (no tasks, no task of that name, only files that do not fit, a runner that cannot be
reached).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Optional

from runner.config import ConfigError, phase_limits, project_options
from runner.serve.runners import open_runner
from runner.source import SourceError, find_project_root

from agent.bench.baselines import KINDS, BaselineCache, default_cache
from agent.bench.formats import FORMATS
from agent.bench.suite import Bench, Settings, TaskRecord, document
from agent.bench.tasks import SuiteError, check_requests, load_suite
from . import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNVERIFIED, err, exit_code, product, tell_unavailable


def add_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("dir", metavar="DIR", help="folder of task files (searched recursively), or one file")
    b.add_argument("--format", choices=["auto", *FORMATS], default="auto",
                   help="task format (default auto: told apart per file)")
    b.add_argument("--strategy", choices=["none", "tune", "llm"], default="none",
                   help="none: evaluate the tasks (or --candidates) as they are; tune: the no-LLM "
                        "tuner per task; llm: the GEAK loop per task (needs --provider and --model)")
    b.add_argument("--candidates", metavar="CDIR",
                   help="candidate files: CDIR/<task>.py, or several samples CDIR/<task>/*.py (pass@k)")
    b.add_argument("--tasks", metavar="PATTERN", help="only tasks whose name matches (glob, comma-separated)")
    b.add_argument("--runner", default=None, metavar="local|URL",
                   help="where to evaluate (default: $GEAK_RUNNER_URL, else local)")
    b.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto")
    b.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    b.add_argument("--jobs", type=int, default=None,
                   help="tasks in flight at once (default for none: the runner's evaluation slots, "
                        "--workers here or actors x --workers on Ray; 1 for tune and llm)")
    b.add_argument("--trials", type=int, default=None, help="fresh seeded inputs per case (default 3)")
    b.add_argument("--no-timing", dest="no_timing", action="store_true",
                   help="correctness only: no timing, no speedups (strategy none)")
    b.add_argument("--eval-timeout", dest="eval_timeout", type=float, metavar="S",
                   help="time limit in seconds for each phase of every evaluation (import, run, timing); "
                        "default from [tool.geak.limits]: 120, 300, 300")
    b.add_argument("--arch", default=None, metavar="ARCH", help="tune: target arch (default: the runner's GPU)")
    b.add_argument("--max-configs", type=int, default=48, help="tune: configs per task at most (default 48)")
    b.add_argument("--emit", choices=["constants", "autotune"], default="constants", help="tune: the edit's form")
    b.add_argument("--task-budget", dest="task_budget", type=float, metavar="S", default=None,
                   help="tune: seconds per task; the search stops before a batch that would start after "
                        "them and keeps its best verified config")
    b.add_argument("--samples", type=int, default=1, help="llm: independent runs per task (for pass@k)")
    b.add_argument("--k", default="1", metavar="K,K", help="pass@k for these k (default 1)")
    b.add_argument("--baselines", default="", metavar="eager,compile",
                   help="also measure each task's first version against its PyTorch reference "
                        "(eager, torch.compile); timed baselines are cached per GPU")
    b.add_argument("--baseline-cache", metavar="FILE", default=None,
                   help=f"the per-GPU baseline cache (default {default_cache()})")
    b.add_argument("--out", metavar="DIR", default=None,
                   help="run directory: state.json and per-task results (default .geak/bench/<dir>-<strategy>)")
    b.add_argument("--time-budget", type=float, metavar="S", default=None,
                   help="after S seconds start no new task, and stop the tasks still running (tune and llm) "
                        "at their next batch, each keeping its best verified result; --resume runs the "
                        "rest; exit 1")
    b.add_argument("--resume", action="store_true",
                   help="keep the tasks already done in --out (same settings, unchanged task files)")
    b.add_argument("--json", metavar="FILE", default=None, help="write the results as JSON to FILE ('-': stdout)")
    b.add_argument("--report", metavar="FILE", default=None,
                   help="write a Markdown report to FILE, and the speedup plot next to it (FILE.png)")
    g = b.add_argument_group("--strategy llm (keys only from OPENAI_API_KEY / ANTHROPIC_API_KEY)")
    g.add_argument("--provider", choices=["openai", "anthropic"])
    g.add_argument("--model", metavar="M")
    g.add_argument("--iterations", type=int, metavar="N", help="sequential iterations per run (default 5)")
    g.add_argument("--parallel", type=int, metavar="K", help="candidates per iteration (default 1)")
    g.add_argument("--base-url", metavar="URL")
    g.add_argument("--temperature", type=float, metavar="T")
    g.add_argument("--budget-tokens", type=int, metavar="N", help="token budget per run")


def _settings(args) -> Settings:
    if args.trials is not None and args.trials < 1:
        raise ConfigError("--trials must be at least 1")
    if args.samples < 1 or args.max_configs < 1 or args.workers < 1 or (args.jobs is not None and args.jobs < 1):
        raise ConfigError("--samples, --max-configs, --workers and --jobs must be at least 1")
    for name, v in (("--task-budget", args.task_budget), ("--time-budget", args.time_budget)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ConfigError(f"{name} must be a positive number of seconds")
    if args.task_budget is not None and args.strategy != "tune":
        raise ConfigError("--task-budget is for --strategy tune (the GEAK loop has --budget-tokens and "
                          "--iterations; --time-budget limits the whole run)")
    kinds = [k.strip() for k in args.baselines.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ConfigError(f"--baselines: unknown kind '{bad[0]}'; use eager, compile or both")
    if args.strategy != "llm" and args.samples != 1:
        raise ConfigError("--samples is for --strategy llm; with --strategy none put several candidate "
                          "files in CDIR/<task>/ instead")
    if args.strategy == "llm":
        if not getattr(args, "provider", None) or not getattr(args, "model", None):
            raise ConfigError("--strategy llm needs --provider openai|anthropic and --model M")
    if args.no_timing and (args.strategy != "none" or args.baselines):
        raise ConfigError("--no-timing goes with --strategy none and no --baselines (tuning and the "
                          "baselines are measurements)")
    if args.candidates and args.strategy != "none":
        raise ConfigError("--candidates goes with --strategy none (the candidates are what is measured)")
    if args.arch:
        from runner.aot import ARCHS
        if args.arch not in ARCHS:
            raise ConfigError(f"unknown arch '{args.arch}': use one of {', '.join(sorted(ARCHS))}")
    llm = {}
    if args.strategy == "llm":
        import dataclasses

        from agent.llm.session import LLMSettings
        llm = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(LLMSettings)}
    return Settings(strategy=args.strategy, format=args.format, trials=args.trials or 3, timing=not args.no_timing,
                    arch=args.arch,
                    max_configs=args.max_configs, task_budget=args.task_budget, emit=args.emit,
                    samples=args.samples, baselines=kinds,
                    candidates=str(Path(args.candidates).resolve()) if args.candidates else None, llm=llm)


def run(args) -> int:
    """``geak bench``: load the suite, run every task, write the outputs, and exit 0 only when
    every task is verified."""
    ks = _ks(args.k)
    if ks is None:
        err("geak: --k takes comma-separated positive integers, e.g. 1,5")
        return EXIT_BAD_INPUT
    suite = Path(args.dir)
    try:
        settings, tasks, notes, broken, opts = _load(args, suite)
        runnable = [t for t in tasks if not t.error]
        if not runnable:
            return EXIT_BAD_INPUT
        runner = open_runner(args.runner, args.device, args.workers)
    except SuiteError as e:
        err(f"geak: {e}")
        if e.hint:
            err(f"  what to do: {e.hint}")
        return EXIT_BAD_INPUT
    except (ConfigError, SourceError) as e:
        err(f"geak: {e.info.message if isinstance(e, SourceError) else e}")
        return EXIT_BAD_INPUT
    name = suite.resolve().name or "suite"
    out = Path(args.out) if args.out else Path(".geak") / "bench" / f"{name}-{settings.strategy}"
    for n in notes:
        err(f"note: {n}")
    formats = sorted({t.format for t in runnable})
    err(f"geak bench: {len(runnable)} task(s) ({', '.join(formats)}) from {suite}, strategy {settings.strategy}, "
        f"run directory {out}" + (f"; {len(broken)} more not run (harness errors)" if broken else ""))
    bench, records, device = _run(args, runner, runnable, settings, opts, out)
    if bench.unavailable is not None:  # no task could get better: one message, and the runner's exit code
        tell_unavailable(bench.unavailable)
        if bench.not_run:
            err(f"  stopped before the other {len(bench.not_run)} task(s); nothing was scored")
        return exit_code(bench.unavailable)
    # Tasks whose files do not fit their format are harness errors in the report, in suite order.
    done = {r.name: r for r in records}
    done.update({t.name: TaskRecord(t.name, t.format, t.symbol, t.rel, t.digest, error=t.error) for t in broken})
    records = [done[t.name] for t in tasks if t.name in done]
    doc = _document(records, settings, device, suite, notes, ks, bench.not_started, bench.stopped())
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    product(summary_text(doc), args.json == "-")
    _write_outputs(args, doc)
    return _exit_code(records, bench)


def _ks(text: str) -> Optional[tuple[int, ...]]:
    try:
        ks = tuple(int(k) for k in text.split(",") if k.strip())
    except ValueError:
        return None
    return ks if ks and min(ks) >= 1 else None


def _load(args, suite: Path):
    """The settings, the tasks (those that do not fit their format reported as harness errors),
    the notes and the evaluation options."""
    settings = _settings(args)
    tasks, notes = load_suite(suite, args.format, args.tasks, Path(args.candidates) if args.candidates else None)
    root = find_project_root(tasks[0].path)
    opts = project_options(root)
    opts.device = args.device
    opts.trials = settings.trials
    opts.timing = settings.timing
    if args.eval_timeout is not None:
        opts.limits = phase_limits(opts.limits, args.eval_timeout, "--eval-timeout")
    broken = check_requests(tasks, opts)
    for t in broken:  # reported as harness errors; the other tasks run
        err(f"geak: harness error, not run: {t.error}")
    if broken:
        err("  what to do: fix the file, or leave it out with --tasks")
    return settings, tasks, notes, broken, opts


def _run(args, runner, tasks, settings: Settings, opts, out: Path):
    # A runner that knows its evaluation slots (a Ray cluster: actors x --workers) sets the default.
    jobs = args.jobs or ((getattr(runner, "slots", None) or args.workers) if settings.strategy == "none" else 1)
    cache = BaselineCache(Path(args.baseline_cache) if args.baseline_cache else default_cache())
    try:
        bench = Bench(runner, tasks, settings, opts, out, resume=args.resume, jobs=jobs, cache=cache,
                      time_budget_s=args.time_budget)
        if bench.state.stale:
            err(f"note: {bench.state.path} was made with other settings: every task runs again")
        records, _ = bench.run()
        try:
            device = bench.device()
        except Exception:  # the runner went away: the records say so
            device = None
    finally:
        runner.close()
    return bench, records, device


def _document(records, settings: Settings, device, suite: Path, notes: list[str], ks, not_started: list[str],
              stopped: list[str] = ()) -> dict:
    command = "geak bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else ""
    if not_started:
        notes = notes + [f"incomplete: the time budget was spent before {len(not_started)} task(s) "
                         f"started ({', '.join(not_started[:8])}{' ...' if len(not_started) > 8 else ''}); "
                         "run again with --resume"]
    if stopped:
        notes = notes + [f"stopped by the time budget while running: {len(stopped)} task(s) "
                         f"({', '.join(stopped[:8])}{' ...' if len(stopped) > 8 else ''}), each scored by what it had "
                         "verified by then (one with nothing verified is not scored); --resume runs them again"]
    doc = document(records, settings, device, str(suite), notes, ks, command)
    doc["incomplete"] = list(not_started)
    return doc


def _write_outputs(args, doc: dict) -> None:
    if args.report:
        from agent.bench.report import markdown, plot
        rp = Path(args.report)
        png = rp.with_suffix(".png")
        try:
            drew = plot(doc, png)
        except ImportError:
            drew = False
            err("note: no plot: matplotlib is not installed (pip install -e '.[bench]')")
        rp.parent.mkdir(parents=True, exist_ok=True)
        rp.write_text(markdown(doc, png.name if drew else None), encoding="utf-8")
        err(f"wrote {rp}" + (f" and {png}" if drew else " (no plot: nothing was timed)"))
    if args.json:
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(text, encoding="utf-8")
            err(f"wrote {args.json}")


def _exit_code(records, bench: Bench) -> int:
    unavailable = [r for r in records if r.error]
    if unavailable and len(unavailable) == len(records):
        err(f"geak: {unavailable[0].error}")
        return EXIT_BAD_INPUT
    if bench.not_started or bench.stopped():
        return EXIT_UNVERIFIED
    all_ok = all(r.error is None and (b := r.best()) is not None and b.correct and b.status == "ok" for r in records)
    return EXIT_OK if all_ok else EXIT_UNVERIFIED


def summary_text(doc: dict) -> str:
    s = doc["summary"]
    untimed = doc.get("settings", {}).get("timing") is False

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    def x(v):
        return "-" if v is None else f"{v:.3f}x"

    lines = [f"{'task':<24} {'result':<16} {'speedup':>9}  {'% of peak':>9}  cases run / all"]
    for t in doc["tasks"]:
        good = [sm for sm in t["samples"] if sm["correct"] and sm["status"] == "ok"]
        not_run = bool(t["samples"]) and all(sm.get("not_run") for sm in t["samples"])
        res = t["error"] and "harness error" or ("not run here" if not_run else (
            f"{len(good)}/{len(t['samples'])} correct" if len(t["samples"]) > 1 else
            ("correct" if good else (t["samples"][0]["status"] if t["samples"] else
                                     "stopped" if t.get("stopped") else "no sample"))))
        if t.get("stopped") and t["samples"]:
            res += " (stopped)"
        sp = max((sm["speedup"] for sm in good if sm["speedup"] is not None), default=None)
        best = max(good, key=lambda sm: sm["speedup"] or 0.0, default=None)
        peak = ("-" if best is None or not t.get("timed") else
                "unknown" if best.get("pct_peak") is None else f"{best['pct_peak']:.0f}%")
        run, skipped = t["cases_run"], t["cases_skipped"]
        cases = f"{run}/{run + skipped}" + (f" ({skipped} skipped: {t.get('skipped_why') or 'see the report'})"
                                             if skipped else "")
        lines.append(f"{t['name'][:24]:<24} {res:<16} {x(sp):>9}  {peak:>9}  {cases}")
    for t in doc["tasks"]:
        if t["error"]:
            lines.append(f"  {t['name']}: harness error: {t['error']}")
    pk = ", ".join(f"{k} {pct(v)}" for k, v in s["pass_at_k"].items())
    line = f"call accuracy {pct(s['call_accuracy'])}, execution accuracy {pct(s['execution_accuracy'])}"
    if s["timed"]:
        fp = ", ".join(f"{k} {pct(v)}" for k, v in s["fast_p"].items())
        line += f", speedup mean {x(s['speedup_mean'])} geomean {x(s['speedup_geomean'])} over {s['timed']} timed; {fp}"
    line += f"; {pk}"
    lines.append(line)
    if s.get("not_run_here"):
        lines.append(f"not run    {s['not_run_here']} task(s) not run here: no input case could run on this runner "
                     "(inputs too large for the CPU interpreter, or bf16 there); left out of every figure above")
    if untimed:
        lines.append("timing     none: --no-timing (correctness only): no speedups, fast_p or % of peak")
    elif s["timed"] == 0:
        lines.append("timing     none: the CPU interpreter checks correctness only (no speedups, fast_p or % of "
                     "peak); use a GPU runner (--runner URL) for them")
    return "\n".join(lines)
