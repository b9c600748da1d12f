"""``geak optimize PATH::SYMBOL --strategy llm``: set up a run, drive the loop, report.

The result is the fastest verified candidate (correct on every case and trial, and timed
faster than the original by more than the timing spread), or a clear "no verified
improvement" (exit 1). Under the CPU interpreter nothing is timed: the verified-correct
candidates are listed and the report says that timing needs a GPU. Bad usage or input exits 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from runner.config import ConfigError, options_from_settings, project_settings
from runner.schema import EvalResult, to_json
from runner.source import SourceError, build_request, find_project_root, parse_spec

from . import knowledge
from .evaluator import speedup
from .generator import Task
from .loop import LoopConfig, run_loop
from .optimizer import choose, rank, verified
from .progress import Progress
from .providers import PROVIDERS, ProviderConfig, ProviderError, make_provider
from .records import Candidate, Report, Step
from .retrieval import Corpus, corpus_files
from .rundir import RunDir, RunDirError
from .usage import Usage

EXIT_OK, EXIT_UNVERIFIED, EXIT_BAD_INPUT = 0, 1, 2

# Settings a run records in run.json; on --resume, what the command line leaves out comes from there.
DEFAULTS = dict(provider=None, model=None, iterations=5, parallel=1, temperature=None, max_tokens=8192,
                timeout=300.0, base_url=None, budget_tokens=None, target_speedup=None, fix_attempts=3,
                retries=2, corpus=None, instruction=None)


class UsageError(Exception):
    pass


def _err(msg: str = "") -> None:
    import sys
    print(msg, file=sys.stderr)


def _settings(args, recorded: dict) -> dict:
    s = {}
    for k, default in DEFAULTS.items():
        v = getattr(args, k, None)
        s[k] = v if v is not None else recorded.get(k, default)
    if s["provider"] not in PROVIDERS:
        raise UsageError("--strategy llm needs --provider openai or --provider anthropic")
    if not s["model"]:
        raise UsageError("--strategy llm needs --model (e.g. --model gpt-4.1, or the model name your "
                         "OpenAI-compatible server serves)")
    for k in ("iterations", "parallel", "max_tokens", "fix_attempts"):
        if s[k] < 1:
            raise UsageError(f"--{k.replace('_', '-')} must be at least 1")
    if s["retries"] < 0:
        raise UsageError("--retries must be 0 or more")
    if s["timeout"] <= 0:
        raise UsageError("--timeout must be positive")
    if s["budget_tokens"] is not None and s["budget_tokens"] < 1:
        raise UsageError("--budget-tokens must be at least 1")
    if s["temperature"] is not None and not 0 <= s["temperature"] <= 2:
        raise UsageError("--temperature must be between 0 and 2")
    if s["target_speedup"] is not None and s["target_speedup"] <= 1:
        raise UsageError("--target-speedup must be above 1 (e.g. 1.5)")
    if s["corpus"] and not Path(s["corpus"]).is_dir():
        raise UsageError(f"--corpus {s['corpus']}: no such directory")
    return s


def _device_text(d, arch: Optional[str]) -> str:
    if d is None:
        return "unknown"
    if d.backend == "interpreter":
        text = "Triton CPU interpreter (correctness only here; speed is measured on a GPU)"
    else:
        text = f"{d.name} ({d.backend}, {d.arch})"
        if d.peak_bandwidth_gbs:
            text += f", peak bandwidth {d.peak_bandwidth_gbs:.0f} GB/s"
    if arch:
        text += f"; write for {arch}"
    return text


def run_llm_optimize(args, runner=None) -> int:
    """The ``--strategy llm`` branch of ``geak optimize``. ``runner`` may be given (tests)."""
    from agent.cli import make_runner  # the CLI's runner choice (local, or a URL when available)

    progress = Progress(1)
    own_runner = runner is None
    try:
        recorded: dict = {}
        run: Optional[RunDir] = None
        if getattr(args, "resume", None):
            run = RunDir(Path(args.resume))
            recorded = run.read_config()
        s = _settings(args, recorded)
        if run is not None:
            base = run.read_request()
            path, sym = parse_spec(args.target)
            if recorded.get("target") not in (args.target, f"{base.target.path}::{sym}", str(base.target)):
                raise UsageError(f"--resume {args.resume} is a run for {recorded.get('target')}, "
                                 f"not {args.target}")
            root = Path(recorded.get("root") or find_project_root(Path(path)))
        else:
            path, _ = parse_spec(args.target)
            root = find_project_root(Path(path))
        opts = options_from_settings(project_settings(root), f"{root / 'pyproject.toml'} [tool.geak]")
        opts.device = args.device
        if args.trials is not None:
            if args.trials < 1:
                raise UsageError("--trials must be at least 1")
            opts.trials = args.trials
        if run is None:
            base, info, _ = build_request(args.target, None, opts, root=root)
        else:
            base.options = opts
        if args.arch:
            from runner.aot import ARCHS
            if args.arch not in ARCHS:
                raise UsageError(f"unknown arch '{args.arch}': use one of {', '.join(sorted(ARCHS))}")
        provider = make_provider(ProviderConfig(
            provider=s["provider"], model=s["model"], temperature=s["temperature"], max_tokens=s["max_tokens"],
            timeout_s=s["timeout"], base_url=s["base_url"], max_retries=s["retries"]))
        if runner is None:
            runner = make_runner(args.runner, args.device, args.workers)
    except SourceError as e:
        _err(f"geak: {e.info.message}")
        if e.info.hint:
            _err(f"  what to do: {e.info.hint}")
        return EXIT_BAD_INPUT
    except (ConfigError, UsageError, RunDirError) as e:
        _err(f"geak: {e}")
        return EXIT_BAD_INPUT
    except ProviderError as e:
        _err(f"geak: {e.message}")
        return EXIT_BAD_INPUT

    try:
        return _run(args, s, root, base, opts, provider, runner, run, progress)
    finally:
        progress.close()
        if own_runner:
            runner.close()


def _run(args, s, root, base, opts, provider, runner, run, progress) -> int:
    # The original must pass its own check first: every candidate is compared with it.
    _err(f"checking the original {base.target} ...")
    baseline = runner.evaluate(base)
    if not baseline.correct:
        from agent.cli import render
        _err(render(baseline, str(base.target), None))
        _err("geak: the original does not pass its own check; fix it first")
        return EXIT_BAD_INPUT
    resumed = run is not None
    if run is None:
        base_dir = Path(args.run_dir) if getattr(args, "run_dir", None) else root / ".geak" / "runs"
        run = RunDir.create(base_dir, base.target.symbol)
        run.write_request(base)
    config = {"target": str(base.target), "root": str(root), **s, "trials": opts.trials, "device": args.device,
              "arch": args.arch}
    run.write_config(config)
    run.write_baseline(baseline)

    text, names = knowledge.pick(baseline.device, args.arch)
    # The corpus: GEAK's own examples/ and benchmarks/, the user's project's, and --corpus DIR.
    files = corpus_files([root / "examples", root / "benchmarks"] + ([Path(s["corpus"])] if s["corpus"] else []))
    task = Task(path=base.target.path, symbol=base.target.symbol, source=base.files[base.target.path],
                device=_device_text(baseline.device, args.arch), knowledge=text, knowledge_names=names,
                instruction=s["instruction"] or "", corpus=Corpus(files))
    run.write_system(task.system())

    usage = Usage(budget=s["budget_tokens"])
    for st in run.steps():  # tokens already spent by a resumed run count against its budget
        usage.input_tokens += st.input_tokens
        usage.output_tokens += st.output_tokens
        usage.calls += 1 if st.response is not None else 0
    cfg = LoopConfig(iterations=s["iterations"], parallel=s["parallel"], trap_after=s["fix_attempts"],
                     target_speedup=s["target_speedup"])
    progress.total = cfg.iterations
    device = baseline.device
    _err(f"{'resuming' if resumed else 'optimizing'} {base.target} with {s['provider']} {s['model']}: "
         f"{cfg.iterations} iteration(s) x {cfg.parallel} candidate(s) on "
         f"{device.name if device else 'the runner'}; knowledge {', '.join(names)}; "
         f"corpus {len(task.corpus)} kernel(s)")
    _err(f"run directory {run.path}")

    def on_step(st: Step) -> None:
        sp = speedup(st.result)
        what = st.outcome.replace("_", " ")
        if sp is not None:
            what += f", {sp:.3f}x"
        elif st.outcome == "correct":
            what += ", not timed"
        detail = st.error or (st.extraction if st.outcome == "no_code" else (st.result.message if st.result else ""))
        progress.line(f"  {st.id}  {st.kind:<16} {what}" + (f": {detail[:160]}" if detail and st.outcome != "correct" else ""))

    def on_iteration(it: int, steps: list[Step]) -> None:
        best = choose(steps)
        status = (f"{len(verified(steps))} verified of {len(steps)}, "
                  + (f"best {speedup(best.result):.3f}x" if best else "no verified speedup yet")
                  + f", {usage.total} tokens")
        progress.bar(it + 1, status)

    result = run_loop(task, provider, runner, base, cfg, run, usage, on_step, on_iteration)
    progress.close()
    report = _report(base, s, run, baseline, names, result, usage, cfg)
    run.write_report(report)
    _err(render_llm(report))
    if report.improved and args.out:
        Path(args.out).write_text(report.source, encoding="utf-8")
        _err(f"wrote {args.out}")
    if args.json:
        print(to_json(report, indent=2))
    if result.stopped == "provider":
        return EXIT_BAD_INPUT
    return EXIT_OK if report.improved else EXIT_UNVERIFIED


def _report(base, s, run, baseline: EvalResult, names, result, usage: Usage, cfg: LoopConfig) -> Report:
    steps = sorted(result.steps, key=lambda st: (st.iteration, st.lane))
    d = baseline.device
    rep = Report(target=str(base.target), provider=s["provider"], model=s["model"], run_dir=str(run.path),
                 device=(d.name if d and d.backend == "interpreter" else
                         f"{d.name} ({d.backend}{', ' + d.arch if d.arch else ''})" if d else ""),
                 knowledge=names, iterations_run=result.iterations_run, parallel=cfg.parallel,
                 stopped=result.stopped, baseline=baseline, usage=usage.as_dict())
    for st in steps:
        r = st.result
        rep.candidates.append(Candidate(
            id=st.id, iteration=st.iteration, lane=st.lane, kind=st.kind, outcome=st.outcome or "unfinished",
            status=r.status if r else None, correct=bool(r and r.correct), speedup=speedup(r),
            spread_pct=r.timing.spread_pct if r and r.timing else None,
            message=st.error or (r.message if r else st.extraction)))
    ok = verified(steps)
    rep.timed = any(speedup(st.result) is not None for st in ok)
    rep.verified = [st.id for st in reversed(rank(steps, keep=0))] if rep.timed else [st.id for st in ok]
    best = choose(steps)
    stop = {"target": f"stopped at the target speedup {s['target_speedup']}x",
            "budget": f"stopped: token budget spent ({usage.total} of {usage.budget} tokens)",
            "provider": f"stopped: the provider refused the request ({result.fatal})",
            "provider_errors": "stopped: every model call failed in the last iterations (see the run "
                               "directory's step.json files)"}.get(result.stopped)
    if stop:
        rep.notes.append(stop)
    n = len(steps)
    if best is not None:
        rep.improved, rep.best, rep.best_speedup = True, best.id, speedup(best.result)
        rep.source, rep.result = best.source, best.result
        t = best.result.timing
        rep.message = (f"{best.id} is {t.speedup:.3f}x faster than the original (Σ {t.ref_ms:.4f} ms -> "
                       f"{t.cand_ms:.4f} ms, spread ±{t.spread_pct:.1f}%), verified on every case; "
                       f"{len(ok)} of {n} candidates correct")
        warn = [f for f in best.result.flags if f.severity == "warning"]
        if warn:
            rep.notes.append("look at this before using it: " + "; ".join(f"{f.code}: {f.message}" for f in warn))
    elif rep.timed:
        rep.message = (f"{len(ok)} of {n} candidates correct, none faster than the "
                       "original by more than the timing spread")
    elif ok:
        rep.message = (f"{len(ok)} of {n} candidates verified correct "
                       f"({', '.join(rep.verified)}) on {rep.device or 'the runner'}, but nothing was timed "
                       f"({ok[0].result.timing_unavailable or 'no timing'}); timing needs a GPU, so none is "
                       f"offered as faster. Their code is in {run.path}/steps/<id>/candidate.py")
    elif not any(st.source is not None for st in steps):
        failed = sum(st.outcome == "provider_error" for st in steps)
        rep.message = (f"the model gave no candidate: {failed} call(s) failed, "
                       f"{n - failed} answer(s) held no usable code" if n else "no attempt was made")
    else:
        rep.message = f"none of the {n} attempts gave a correct candidate"
    return rep


def render_llm(rep: Report) -> str:
    lines = [f"geak optimize  {rep.target}  --strategy llm  ({rep.provider} {rep.model}, "
             f"{rep.iterations_run} iteration(s) x {rep.parallel})"]
    if rep.device:
        lines.append(f"device     {rep.device}")
    lines.append(f"knowledge  {', '.join(rep.knowledge)}")
    if rep.candidates:
        rows = [("candidate", "prompt", "outcome", "speedup", "detail")]
        for c in rep.candidates:
            rows.append((c.id, c.kind, c.outcome.replace("_", " "),
                         f"{c.speedup:.3f}x" if c.speedup is not None else "-", (c.message or "")[:100]))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines.append("")
        for r in rows:
            lines.append("  " + "  ".join(v.ljust(widths[i]) for i, v in enumerate(r[:4])) + "  " + r[4])
        lines.append("")
    u = rep.usage
    lines.append(f"tokens     {u.get('input_tokens', 0)} in, {u.get('output_tokens', 0)} out, "
                 f"{u.get('calls', 0)} call(s)" + (f", {u['failed_calls']} failed" if u.get("failed_calls") else "")
                 + (f", budget {u['budget_tokens']}" if u.get("budget_tokens") else ""))
    lines.append(f"run dir    {rep.run_dir}")
    for n in rep.notes:
        lines.append(f"note       {n}")
    lines.append(f"verdict    {'IMPROVED' if rep.improved else 'NO VERIFIED IMPROVEMENT'}: {rep.message}")
    return "\n".join(lines)

