"""``geak bench DIR``: run a benchmark suite and report the paper's metrics.

A run can be made in parts (``--order``, ``--first``, ``--shard``, ``--resume``), on several GPUs
of one machine at once (``--gpus N``: one ``geak bench`` per GPU, run here as subprocesses), and
its parts put into one table (``--merge``); ``agent.bench.parts`` holds how.

Exit codes: 0 every task verified correct, 1 the suite ran and some task is not (a task file that
does not fit its format is a harness error in the report; the others run), 2 bad usage or bad
input (no tasks, no task of that name, only files that do not fit, a runner that cannot be
reached, parts that cannot be one table).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Optional

from runner.config import ConfigError, phase_limits, project_options
from runner.serve.runners import open_runner
from runner.source import SourceError, find_project_root

from agent.bench.baselines import KINDS, BaselineCache, default_cache
from agent.bench.formats import FORMATS
from agent.bench.parts import (PartsError, code_digest, complete, deal, merge, parse_shard, read_part, run_parts,
                           same_files, select, visible_gpus)
from agent.bench.suite import Bench, Settings, State, TaskRecord, budget_spent, document, stopped_by_call
from agent.bench.tasks import SuiteError, check_requests, load_suite
from . import (EXIT_BAD_INPUT, EXIT_OK, EXIT_PROVIDER, EXIT_RUNNER, EXIT_UNVERIFIED, err, exit_code, product,
               tell_unavailable)


def add_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("dir", metavar="DIR", nargs="?",
                   help="folder of task files (searched recursively), or one file (not with --merge)")
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
    b.add_argument("--against-autotune", dest="against_autotune", action="store_true",
                   help="tune: also decorate each kernel with Triton's @triton.autotune over the tuner's space "
                        "(sampled to --max-configs), measure it against the original with the same evaluator, "
                        "and report both side by side")
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
                   help="keep the tasks already done in --out (same settings and code, unchanged task files); "
                        "the others run, those the time budget stopped again")
    p = b.add_argument_group("a run in parts, on several GPUs")
    p.add_argument("--exclude", metavar="PATTERN", help="leave out tasks whose name matches (glob, comma-separated)")
    p.add_argument("--order", type=int, metavar="SEED",
                   help="run the tasks in a random order fixed by SEED (default: by name): any first part of "
                        "it is a random sample")
    p.add_argument("--first", type=int, metavar="N",
                   help="only the first N tasks in that order not done yet (with --resume: not done in --out)")
    p.add_argument("--shard", metavar="I/N", help="only every N-th task from the I-th (0-based), after --first")
    p.add_argument("--gpus", type=int, default=1, metavar="N",
                   help="run on N GPUs of this machine at once: one geak bench per GPU (CUDA_VISIBLE_DEVICES), "
                        "the tasks dealt round them in their order, GPU I's run directory --out/gpuI; the parts "
                        "are merged into --out")
    p.add_argument("--merge", nargs="+", metavar="RUN_DIR",
                   help="put the run directories of parts run apart into one table in --out (no DIR), refusing "
                        "parts of other settings, code or device")
    p.add_argument("--task-list", dest="task_list", metavar="FILE", help=argparse.SUPPRESS)
    # --task-list: exactly the tasks FILE names, one a line, in that order: what --gpus gives each part.
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
    if args.against_autotune and args.strategy != "tune":
        raise ConfigError("--against-autotune goes with --strategy tune (it compares the tuner with Triton's autotune)")
    if args.gpus < 1 or (args.first is not None and args.first < 1):
        raise ConfigError("--gpus and --first must be at least 1")
    if args.gpus > 1 and args.shard:
        raise ConfigError("--gpus deals the tasks itself: give it without --shard")
    if args.gpus > 1 and (args.runner or os.environ.get("GEAK_RUNNER_URL") or "local") != "local":
        raise ConfigError("--gpus runs a local runner per GPU of this machine; a remote runner or a Ray cluster "
                          "spreads the tasks itself (--jobs)")
    if args.shard:
        try:
            parse_shard(args.shard)
        except ValueError as e:
            raise ConfigError(str(e)) from None
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
                    candidates=str(Path(args.candidates).resolve()) if args.candidates else None, llm=llm,
                    against_autotune=args.against_autotune)


def run(args) -> int:
    """``geak bench``: load the suite, run every task, write the outputs, and exit 0 only when
    every task is verified."""
    if args.merge:
        return _merge(args)
    if args.dir is None:
        err("geak bench: give DIR, the folder of task files (or --merge RUN_DIR ... to put parts into one table)")
        return EXIT_BAD_INPUT
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
        twice = same_files(runnable)
        if twice:
            shown = ", ".join(f"{a} and {b}" for a, b in twice[:3]) + (f" (and {len(twice) - 3} more)"
                                                                       if len(twice) > 3 else "")
            raise SuiteError(f"{suite}: {len(twice)} file(s) are there twice, under two names ({shown}); a table "
                             "counts each file once", "remove the copies (a folder copied into an earlier copy of "
                             "itself does this), or leave them out with --exclude")
        name = suite.resolve().name or "suite"
        out = Path(args.out) if args.out else Path(".geak") / "bench" / f"{name}-{settings.strategy}"
        code = code_digest()
        if args.gpus > 1:
            return _on_gpus(args, suite, tasks, broken, settings, notes, ks, out, code)
        done = set()
        if args.resume:  # what --first and --shard count from: the tasks not done yet
            state = State(out, settings, True, code)
            done = {t.name for t in runnable if state.done(t) is not None}
        chosen, to_run = _chosen(args, runnable, done)
        runner = open_runner(args.runner, args.device, args.workers)
    except SuiteError as e:
        err(f"geak: {e}")
        if e.hint:
            err(f"  what to do: {e.hint}")
        return EXIT_BAD_INPUT
    except (ConfigError, SourceError) as e:
        err(f"geak: {e.info.message if isinstance(e, SourceError) else e}")
        return EXIT_BAD_INPUT
    for n in notes:
        err(f"note: {n}")
    formats = sorted({t.format for t in runnable})
    part = len(chosen) != len(runnable) or args.task_list
    err(f"geak bench: {len(runnable)} task(s) ({', '.join(formats)}) from {suite}, strategy {settings.strategy}, "
        f"run directory {out}" + (f"; {len(broken)} more not run (harness errors)" if broken else "")
        + (f"; this part: {len(to_run)} to run" + (f", {len(chosen) - len(to_run)} done before" if done else "")
           if part else ""))
    if args.task_list and os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        err(f"note: a part of a --gpus run, on CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
    bench, records, device, extra = _run(args, runner, chosen, settings, opts, out, code)
    if bench.unavailable is not None:  # no task could get better: one message, and the runner's exit code
        tell_unavailable(bench.unavailable)
        if bench.not_run:
            err(f"  stopped before the other {len(bench.not_run)} task(s); nothing was scored")
        return exit_code(bench.unavailable)
    # Tasks whose files do not fit their format are harness errors in the report, in suite order.
    done_now = {r.name: r for r in records}
    done_now.update({t.name: TaskRecord(t.name, t.format, t.symbol, t.rel, t.digest, error=t.error) for t in broken})
    records = [done_now[t.name] for t in tasks if t.name in done_now]
    doc = _document(records, settings, device, suite, notes, ks, bench.not_started, bench.stopped())
    doc.update(code=code, **extra)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    product(summary_text(doc), args.json == "-")
    _write_outputs(args, doc)
    return _exit_code(records, bool(bench.not_started or bench.stopped()))


def _chosen(args, runnable: list, done: set[str]) -> tuple[list, list]:
    """The tasks this run keeps or runs, and of them those it runs: ``--exclude`` and ``--order``
    (or a part's ``--task-list``), then of the tasks not ``done``, ``--first`` and ``--shard``."""
    chosen = runnable
    if args.task_list:
        by_name = {t.name: t for t in runnable}
        try:
            names = [n.strip() for n in Path(args.task_list).read_text(encoding="utf-8").splitlines() if n.strip()]
        except OSError as e:
            raise SuiteError(f"--task-list: cannot read {args.task_list} ({e})") from None
        missing = [n for n in names if n not in by_name]
        if missing:
            raise SuiteError(f"--task-list {args.task_list}: no task {', '.join(missing[:5])} in {args.dir}")
        chosen = [by_name[n] for n in names]
    elif args.exclude or args.order is not None:
        chosen = select(runnable, args.exclude, args.order)
    to_run = [t for t in chosen if t.name not in done]
    if args.first:
        to_run = to_run[:args.first]
    if args.shard:
        i, n = parse_shard(args.shard)
        to_run = to_run[i::n]
    return [t for t in chosen if t.name in done] + to_run, to_run


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


def _run(args, runner, tasks, settings: Settings, opts, out: Path, code: Optional[str] = None):
    # As many tasks at once as the runner runs evaluations (a Ray cluster: actors x --workers).
    jobs = args.jobs or (runner.parallelism if settings.strategy == "none" else 1)
    cache = BaselineCache(Path(args.baseline_cache) if args.baseline_cache else default_cache())
    extra: dict = {}
    try:
        # A search's workers are started first, so that no task's budget pays for them (the time
        # budget counts from the first task), unless every task is done already.
        prior = State(out, settings, True, code) if args.resume else None
        if settings.strategy in ("tune", "llm") and (prior is None or any(prior.done(t) is None for t in tasks)):
            extra["started"] = _start_workers(runner, args.workers)
        bench = Bench(runner, tasks, settings, opts, out, resume=args.resume, jobs=jobs, cache=cache,
                      time_budget_s=args.time_budget, code=code)
        if bench.state.stale:
            err(f"note: {bench.state.path} was made with {bench.state.stale_why or 'other settings'}: "
                "every task runs again")
        records, _ = bench.run()
        try:
            device = bench.device()
        except Exception:  # the runner went away: the records say so
            device = None
        if extra.get("started") is None:
            extra.pop("started", None)
        device_time = getattr(runner, "device_time", None)  # a local runner's device lock
        if device_time is not None:
            extra["device_lock"] = device_time()
    finally:
        runner.close()
    return bench, records, device, extra


def _start_workers(runner, workers: int) -> Optional[dict]:
    """A local runner's workers started before the first task, as a running language server or
    daemon has them, so that no task's budget (nor its original's check) pays for starting them:
    how many, and the seconds it took. None when they did not start (the tasks then say why)."""
    t0 = time.perf_counter()
    try:
        runner.warm(workers)
    except Exception as e:
        err(f"note: the workers did not start before the first task ({e})")
        return None
    return {"workers": workers, "s": round(time.perf_counter() - t0, 1)}


PART_ONLY = {"dir", "out", "json", "report", "exclude", "order", "first", "shard", "gpus", "merge", "task_list"}
"""Options of a ``--gpus`` run that its parts do not get (each part gets its own ``--out`` and
``--task-list``)."""


def _part_argv(args, out: Path, task_list: Path) -> list[str]:
    """The ``geak bench`` arguments of one part of a ``--gpus`` run: this run's options, but its
    own run directory and exactly its tasks."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    argv = [str(args.dir)]
    for a in parser._actions:
        if not a.option_strings or a.dest in PART_ONLY:
            continue
        v = getattr(args, a.dest, a.default)
        if v is None or v == a.default:
            continue
        flag = next(o for o in a.option_strings if o.startswith("--"))
        argv += [flag] if a.nargs == 0 else [flag, *map(str, v)] if isinstance(v, list) else [flag, str(v)]
    return argv + ["--out", str(out), "--task-list", str(task_list)]


def _on_gpus(args, suite: Path, tasks, broken, settings: Settings, notes, ks, out: Path, code: str) -> int:
    """``--gpus N``: one ``geak bench`` per GPU, each a subprocess seeing its GPU alone
    (``CUDA_VISIBLE_DEVICES``) with its own workers and run directory ``OUT/gpuI``, the tasks
    dealt round them in their order; then the parts merged into OUT. With ``--resume`` the tasks
    done in OUT (and in its parts, should a run have ended before merging them) are kept."""
    runnable = [t for t in tasks if not t.error]
    digests = {t.name: t.digest for t in runnable}
    try:
        ids = visible_gpus(args.gpus, args.device)
        prior = _prior_parts(out, settings, code) if args.resume else []
        if not args.resume:  # start again, as a run without --resume does
            for f in [out / "state.json", *out.glob("gpu*/state.json")]:
                f.unlink(missing_ok=True)
        done = {r.name for r in merge(prior, digests) if complete(r)} if prior else set()
        chosen, to_run = _chosen(args, runnable, done)
    except (PartsError, SuiteError) as e:
        err(f"geak: {e}")
        return EXIT_BAD_INPUT
    for n in notes:
        err(f"note: {n}")
    hands = deal([t.name for t in to_run], len(ids))
    err(f"geak bench: {len(runnable)} task(s) from {suite}, strategy {settings.strategy}, run directory {out}; "
        f"{len(to_run)} to run" + (f" ({len(done)} done before)" if done else "")
        + f", dealt round {len(hands)} GPU(s): " + ", ".join(f"gpu{i} {len(h)}" for i, h in enumerate(hands)))
    pythonpath = str(Path(__file__).resolve().parents[2])
    commands = []
    for i, names in enumerate(hands):
        d = out / f"gpu{i}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "tasks.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (pythonpath, os.environ.get("PYTHONPATH")) if x)}
        if ids[i]:
            env["CUDA_VISIBLE_DEVICES"] = ids[i]
        commands.append(([sys.executable, "-m", "agent.cli", "bench", *_part_argv(args, d, d / "tasks.txt")],
                         env, d / "run.log"))
    rcs = run_parts(commands)
    for i, rc in enumerate(rcs):
        err(f"gpu{i}" + (f" (CUDA_VISIBLE_DEVICES={ids[i]})" if ids[i] else "") + f": {len(hands[i])} task(s), "
            f"exit {rc}; its run directory and log: {out / f'gpu{i}'}")
    try:
        parts = [read_part(out / f"gpu{i}") for i in range(len(hands)) if (out / f"gpu{i}" / "state.json").is_file()]
        kept = {r.name: r for r in merge(prior + parts, digests)}
    except PartsError as e:
        err(f"geak: {e}")
        return EXIT_BAD_INPUT
    kept.update({t.name: TaskRecord(t.name, t.format, t.symbol, t.rel, t.digest, error=t.error) for t in broken})
    names = {t.name for t in chosen} | {t.name for t in broken}
    records = [kept[t.name] for t in tasks if t.name in kept and t.name in names]
    device = next((p.device for p in reversed(prior + parts) if p.device), None)
    _write_state(out, settings, code, [r for r in records if r.name not in {t.name for t in broken}], device)
    not_started = [t.name for t in to_run if t.name not in kept]
    doc = _document(records, settings, device, suite, notes, ks, not_started, [r.name for r in records if stopped_by_call(r)])
    doc["code"] = code
    doc["parts"] = [{"run_directory": f"gpu{i}", "cuda_visible_devices": ids[i] or None, "tasks": len(hands[i]),
                     "exit": rcs[i], **{k: p.bench[k] for p in parts if p.path.name == f"gpu{i}"
                                        for k in ("started", "device_lock") if k in p.bench}}
                    for i in range(len(hands))]
    (out / "bench.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    product(summary_text(doc), args.json == "-")
    _write_outputs(args, doc)
    worst = max((rc for rc in rcs if rc in (EXIT_BAD_INPUT, EXIT_RUNNER, EXIT_PROVIDER)), default=None)
    return worst if worst is not None else _exit_code(records, bool(not_started or doc["stopped"]))


def _prior_parts(out: Path, settings: Settings, code: str) -> list:
    """What earlier runs in OUT measured, for --resume with --gpus: OUT's merged state, then each
    part's (a run that ended before merging them leaves only those); parts of other settings or
    code are left out, and said so."""
    found = []
    for d in [out, *sorted((p.parent for p in out.glob("gpu*/state.json")), key=lambda p: (len(p.name), p.name))]:
        if not (d / "state.json").is_file():
            continue
        part = read_part(d)
        if part.settings != settings.fingerprint() or part.code != code:
            err(f"note: {d / 'state.json'} was made with other settings or code: its tasks run again")
            continue
        found.append(part)
    return found


def _write_state(out: Path, settings: Settings, code: Optional[str], records: list, device) -> None:
    """OUT/state.json holding ``records``: what ``--resume`` keeps, and what ``--merge`` reads."""
    state = State(out, settings, False, code)
    state.records = {r.name: r for r in records}
    state.device = device
    out.mkdir(parents=True, exist_ok=True)
    state.write()


def _merge(args) -> int:
    """``--merge RUN_DIR ...``: the parts' records in one table in ``--out``, refused when the
    parts differ in settings, code or device."""
    import dataclasses

    from agent.bench.suite import record_from_dict
    if args.dir is not None or not args.out:
        err("geak bench: --merge RUN_DIR ... takes the run directories of the parts (their --out), no DIR, and "
            "--out OUT for the merged table")
        return EXIT_BAD_INPUT
    ks = _ks(args.k)
    if ks is None:
        err("geak: --k takes comma-separated positive integers, e.g. 1,5")
        return EXIT_BAD_INPUT
    try:
        parts = [read_part(Path(d)) for d in args.merge]
        records = merge(parts)
    except PartsError as e:
        err(f"geak bench --merge: {e}")
        return EXIT_BAD_INPUT
    known = {f.name for f in dataclasses.fields(Settings)}
    settings = Settings(**{k: v for k, v in parts[0].settings.items() if k in known})
    device = next((p.device for p in reversed(parts) if p.device), None)
    out = Path(args.out)
    _write_state(out, settings, parts[0].code, records, device)
    # Harness errors (files that did not fit their format) are in a part's report, not its state.
    names = {r.name for r in records}
    for p in parts:
        for t in p.bench.get("tasks") or []:
            if t.get("error") and t.get("name") not in names:
                records.append(record_from_dict(t))
                names.add(t["name"])
    records.sort(key=lambda r: r.name)
    suites = sorted({str(p.bench["suite"]) for p in parts if p.bench.get("suite")})
    suite = suites[0] if len(suites) == 1 else (" + ".join(suites) or "parts")
    stopped = [r.name for r in records if stopped_by_call(r)]
    doc = _document(records, settings, device, suite, [f"merged from {len(parts)} part(s): "
                                                       + ", ".join(str(p.path) for p in parts)], ks, [], stopped)
    doc["code"] = parts[0].code
    (out / "bench.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    err(f"geak bench --merge: {len(records)} task(s) from {len(parts)} part(s) into {out}")
    product(summary_text(doc), args.json == "-")
    _write_outputs(args, doc)
    return _exit_code(records, bool(stopped))


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
    spent = [r.name for r in records if budget_spent(r)]
    if spent:
        notes = notes + [f"the task budget was spent checking the original: {len(spent)} task(s) "
                         f"({', '.join(spent[:8])}{' ...' if len(spent) > 8 else ''}), nothing tried and not "
                         "scored; a larger --task-budget gives them room"]
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


def _exit_code(records, incomplete: bool) -> int:
    """0 every task verified; 1 not, or the time budget left tasks unstarted or stopped
    (``incomplete``); 2 every task a harness error."""
    unavailable = [r for r in records if r.error]
    if unavailable and len(unavailable) == len(records):
        err(f"geak: {unavailable[0].error}")
        return EXIT_BAD_INPUT
    if incomplete:
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
        unjudged = bool(t["samples"]) and all(sm.get("not_checkable") for sm in t["samples"])
        res = t["error"] and "harness error" or ("not run here" if not_run else "not checkable" if unjudged else (
            f"{len(good)}/{len(t['samples'])} correct" if len(t["samples"]) > 1 else
            ("correct" if good else (t["samples"][0]["status"] if t["samples"] else
                                     "stopped" if stopped_by_call(t) else
                                     "budget spent" if budget_spent(t) else "no sample"))))
        if stopped_by_call(t) and t["samples"]:
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
    if doc.get("against_autotune") is not None:
        from agent.bench.autotune import in_words
        lines.append(f"autotune   {in_words(doc['against_autotune'])}")
    if s.get("not_run_here"):
        lines.append(f"not run    {s['not_run_here']} task(s) not run here: no input case could run on this runner "
                     "(inputs too large for the CPU interpreter, or bf16 there); left out of every figure above")
    if s.get("not_checkable"):
        lines.append(f"unchecked  {s['not_checkable']} task(s) whose original cannot be checked here (its own results "
                     "differ between runs, or its own test fails on this device); left out of every figure above")
    if untimed:
        lines.append("timing     none: --no-timing (correctness only): no speedups, fast_p or % of peak")
    elif s["timed"] == 0:
        lines.append("timing     none: the CPU interpreter checks correctness only (no speedups, fast_p or % of "
                     "peak); use a GPU runner (--runner URL) for them")
    return "\n".join(lines)
