"""``geak optimize PATH::SYMBOL [--strategy tune|llm|compile]``: search for a faster verified version of
a target (``agent.optimize``) and say what was found; ``--out`` writes it, ``--json`` prints the
strategy's report.

Only a result verified faster than the original is offered (exit 0); otherwise "no verified
improvement" (exit 1). Bad usage or input, an original that fails its own check, a provider
that cannot be set up: exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Optional

from runner.config import ConfigError, phase_limits, project_options
from runner.serve.runners import open_runner
from runner.schema import EvalRequest, ErrorInfo, to_dict, to_json
from runner.source import SourceError, build_request, find_project_root, parse_spec

from agent.console import Bar, Ticker
from agent.llm.session import LLMSettings
from agent.optimize import OptimizeSettings, optimize
from agent.outcome import Outcome, summary
from agent.progress import Progress
from agent.render import diff_text, iteration_status, render_eval, render_llm, render_tune, sandbox_warning, step_line
from agent.tune.strategy import TuneSettings
from . import (EXIT_BAD_INPUT, EXIT_OK, EXIT_PROVIDER, EXIT_UNVERIFIED, err, exit_code, product,
               runner_unavailable, tell_source_error, tell_unavailable)


class UsageError(Exception):
    pass


def add_arguments(o: argparse.ArgumentParser) -> None:
    o.add_argument("target", metavar="PATH::SYMBOL")
    o.add_argument("--strategy", choices=["tune", "llm", "compile"], default="tune",
                   help="tune: search the launch settings of the target's Triton kernels (default); "
                        "llm: the GEAK loop; compile: for a PyTorch function or nn.Module, PyTorch's "
                        "compiler writes Triton kernels, made a standalone file and verified (no key)")
    o.add_argument("--arch", default=None, metavar="ARCH",
                   help="target GPU for the compile report and limits: sm_80, sm_90, gfx90a, gfx942 "
                        "(default: the runner's GPU, else sm_90)")
    o.add_argument("--runner", default=None, metavar="local|URL")
    o.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto")
    o.add_argument("--max-configs", type=int, default=48, help="configs to evaluate at most (default 48)")
    o.add_argument("--trials", type=int, default=2, help="fresh seeded inputs per case and config")
    o.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    o.add_argument("--emit", choices=["constants", "autotune"], default="constants",
                   help="how the tuned file says it: the best config written into the launch "
                        "(default), or an @triton.autotune holding the best config per input shape")
    o.add_argument("--task-budget", dest="task_budget", type=float, metavar="S",
                   help="tune: stop the search after S seconds (counted from the original's check), keeping "
                        "the best verified config; the confirmation runs in the last tenth of S")
    o.add_argument("--key", metavar="ARG,ARG",
                   help="with --emit autotune: the kernel arguments the choice is keyed on "
                        "(default: its integer size arguments, strides left out)")
    o.add_argument("--out", metavar="FILE", help="write the target file with the best config to FILE")
    o.add_argument("--preview", action="store_true",
                   help="show the edit as a diff (on stdout; the report then goes to stderr) without "
                        "writing it; without a GPU, the "
                        "untimed edit (see --untimed)")
    o.add_argument("--untimed", action="store_true",
                   help="with --out, when nothing could be timed (no GPU): write the untimed edit, an "
                        "@triton.autotune over the original and verified-correct configs, for a GPU to "
                        "choose from at run time")
    o.add_argument("--eval-timeout", dest="eval_timeout", type=float, metavar="S",
                   help="time limit in seconds for each phase of every evaluation (import, run, timing); "
                        "default from [tool.geak.limits]: 120, 300, 300")
    o.add_argument("--json", action="store_true", help="print the optimize report as JSON on stdout")
    add_llm_arguments(o)


def add_llm_arguments(parser: argparse.ArgumentParser) -> None:
    """The GEAK loop's options. Their defaults are ``LLMSettings``'s, applied in ``llm_settings``
    so that ``--resume`` can tell what the command line gave from what the run recorded."""
    g = parser.add_argument_group("--strategy llm (the GEAK loop; keys only from OPENAI_API_KEY / "
                                  "ANTHROPIC_API_KEY, base URLs from OPENAI_BASE_URL / ANTHROPIC_BASE_URL)")
    g.add_argument("--provider", choices=["openai", "anthropic"],
                   help="openai (also any OpenAI-compatible server: vLLM, Ollama, LM Studio) or anthropic")
    g.add_argument("--model", metavar="M", help="model name, as the provider knows it")
    g.add_argument("--iterations", type=int, metavar="N", help="sequential iterations (default 5)")
    g.add_argument("--parallel", type=int, metavar="K", help="candidates per iteration, generated "
                   "concurrently and evaluated as one batch (default 1)")
    g.add_argument("--base-url", metavar="URL", help="the provider's endpoint (OpenAI-compatible: "
                   "ends in /v1; Anthropic: without /v1); default from the environment")
    g.add_argument("--budget-tokens", type=int, metavar="N",
                   help="stop the run cleanly once N tokens (input + output) are spent")
    g.add_argument("--target-speedup", type=float, metavar="X",
                   help="stop early once a verified candidate is X times faster")
    g.add_argument("--temperature", type=float, metavar="T", help="sampling temperature (default: the model's)")
    g.add_argument("--max-tokens", type=int, metavar="N", help="longest answer per call (default 8192)")
    g.add_argument("--timeout", type=float, metavar="S", help="seconds per model call (default 300)")
    g.add_argument("--retries", type=int, metavar="N",
                   help="SDK retries of a failed call (rate limit, server error; default 2)")
    g.add_argument("--fix-attempts", type=int, metavar="N",
                   help="failed attempts in a row on one line of attack before it is dropped and the "
                        "loop restarts from the best verified candidate (default 3)")
    g.add_argument("--corpus", metavar="DIR", help="more Triton kernels for one-shot retrieval "
                   "(besides the project's examples/ and benchmarks/)")
    g.add_argument("--instruction", metavar="TEXT", help="what to optimize for, in words (default: speed)")
    g.add_argument("--run-dir", metavar="DIR", help="where runs are written (default .geak/runs)")
    g.add_argument("--resume", metavar="DIR", help="go on with the run in DIR (its settings, unless "
                   "given again here; --iterations is the new total)")


def llm_settings(args, recorded: dict) -> LLMSettings:
    """The command line over what a resumed run recorded, over the defaults; checked."""
    import dataclasses

    from agent.llm.providers import PROVIDERS
    given = {}
    for f in dataclasses.fields(LLMSettings):
        v = getattr(args, f.name, None)
        given[f.name] = v if v is not None else recorded.get(f.name, f.default)
    s = LLMSettings(**given)
    if s.provider not in PROVIDERS:
        raise UsageError("--strategy llm needs --provider openai or --provider anthropic")
    if not s.model:
        raise UsageError("--strategy llm needs --model (e.g. --model gpt-4.1, or the model name your "
                         "OpenAI-compatible server serves)")
    for k in ("iterations", "parallel", "max_tokens", "fix_attempts"):
        if getattr(s, k) < 1:
            raise UsageError(f"--{k.replace('_', '-')} must be at least 1")
    if s.retries < 0:
        raise UsageError("--retries must be 0 or more")
    if s.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if s.budget_tokens is not None and s.budget_tokens < 1:
        raise UsageError("--budget-tokens must be at least 1")
    if s.temperature is not None and not 0 <= s.temperature <= 2:
        raise UsageError("--temperature must be between 0 and 2")
    if s.target_speedup is not None and s.target_speedup <= 1:
        raise UsageError("--target-speedup must be above 1 (e.g. 1.5)")
    if s.corpus and not Path(s.corpus).is_dir():
        raise UsageError(f"--corpus {s.corpus}: no such directory")
    return s


# --------------------------------------------------------------------------- what to optimize


def _tune_request(args) -> tuple[EvalRequest, Path, OptimizeSettings]:
    from agent.tune.knobs import find_launch_sites
    if args.max_configs < 1 or args.trials < 1:
        raise ConfigError("--max-configs and --trials must be at least 1")
    if args.task_budget is not None and not (math.isfinite(args.task_budget) and args.task_budget > 0):
        raise ConfigError("--task-budget must be a positive number of seconds")
    if args.untimed and not args.out:
        raise ConfigError("--untimed goes with --out FILE (it says what to write there); --preview shows it")
    path, _ = parse_spec(args.target)
    root = find_project_root(Path(path))
    req, _, _ = build_request(args.target, None, _options(args, root), root=root)
    if not find_launch_sites(req.files[req.target.path], req.target.symbol):
        where = req.target.path
        raise SourceError(ErrorInfo(
            kind="bad_request", side="reference", file=where,
            message=f"{req.target} launches no Triton kernel defined in {where}, so there is no launch "
                    "setting for --strategy tune (the default) to search",
            hint=f"to have PyTorch's compiler write Triton for it, with no key: geak optimize {args.target} "
                 f"--strategy compile; to have a model write it: geak optimize {args.target} --strategy llm "
                 "--provider openai|anthropic --model M (the key from OPENAI_API_KEY or ANTHROPIC_API_KEY); "
                 "for a kernel launched from another file, name that file's wrapper"))
    key = [k.strip() for k in args.key.split(",") if k.strip()] if args.key else None
    tune = TuneSettings(max_configs=args.max_configs, trials=args.trials, emit=args.emit, key=key,
                        untimed_edit=bool(args.preview or args.untimed), budget_s=args.task_budget)
    return req, root, OptimizeSettings(arch=args.arch, root=root, tune=tune)


def _compile_request(args) -> tuple[EvalRequest, Path, OptimizeSettings]:
    from agent.tune.knobs import find_launch_sites
    if args.preview or args.untimed or args.task_budget is not None:
        raise UsageError("--preview, --untimed and --task-budget are for --strategy tune")
    path, _ = parse_spec(args.target)
    root = find_project_root(Path(path))
    req, _, _ = build_request(args.target, None, _options(args, root), root=root)
    if find_launch_sites(req.files[req.target.path], req.target.symbol):
        raise SourceError(ErrorInfo(
            kind="bad_request", side="reference", file=req.target.path,
            message=f"{req.target} already launches Triton kernels; --strategy compile writes Triton for "
                    "PyTorch code",
            hint=f"to tune its kernels: geak optimize {args.target} (--strategy tune)"))
    tune = TuneSettings(max_configs=args.max_configs, trials=args.trials)
    return req, root, OptimizeSettings(arch=args.arch, root=root, tune=tune)


def _llm_request(args) -> tuple[EvalRequest, Path, OptimizeSettings]:
    from agent.llm.rundir import RunDir
    if args.preview or args.untimed or args.task_budget is not None:
        raise UsageError("--preview, --untimed and --task-budget are for --strategy tune")
    run, recorded = None, {}
    if args.resume:
        run = RunDir(Path(args.resume))
        recorded = run.read_config()
    s = llm_settings(args, recorded)
    path, sym = parse_spec(args.target)
    if run is None:
        root = find_project_root(Path(path))
        base, _, _ = build_request(args.target, None, _options(args, root), root=root)
    else:
        base = run.read_request()
        if recorded.get("target") not in (args.target, f"{base.target.path}::{sym}", str(base.target)):
            raise UsageError(f"--resume {args.resume} is a run for {recorded.get('target')}, not {args.target}")
        root = Path(recorded.get("root") or find_project_root(Path(path)))
        base.options = _options(args, root)
    return base, root, OptimizeSettings(arch=args.arch, root=root, llm=s, resume=run.path if run else None,
                                        run_dir=Path(args.run_dir) if args.run_dir else None)


def _options(args, root: Path):
    opts = project_options(root)
    opts.device = args.device
    if args.strategy == "llm" and args.trials is not None:
        if args.trials < 1:
            raise UsageError("--trials must be at least 1")
        opts.trials = args.trials
    if args.eval_timeout is not None:
        opts.limits = phase_limits(opts.limits, args.eval_timeout, "--eval-timeout")
    return opts


def _check_arch(arch: Optional[str]) -> None:
    from runner.aot import ARCHS
    if arch and arch not in ARCHS:
        raise ConfigError(f"unknown arch '{arch}': use one of {', '.join(sorted(ARCHS))}")


# --------------------------------------------------------------------------- the run


class ProgressLines:
    """The optimization's progress on stderr: tickers while the tuner works; for the GEAK loop,
    a line per attempt and a bar of iterations."""

    def __init__(self, strategy: str, target: str, limits):
        self.strategy, self.target, self.limits = strategy, target, limits
        self.ticker: Optional[Ticker] = None
        self.bar = Bar(1)

    def __call__(self, p: Progress) -> None:
        if self.strategy == "tune":
            self._tune(p)
        elif p.stage in ("original", "search"):
            err(p.message)
        elif p.stage == "step":
            self.bar.line(step_line(p.step))
        elif p.stage == "iteration":
            self.bar.total = max(1, p.total or 1)
            self.bar.bar(p.done, iteration_status(p))

    def _tune(self, p: Progress) -> None:
        if p.stage == "original":
            self._tick(f"checking the original {self.target}")
        elif p.stage == "search":
            self.stop()
            err(p.message)
            self._tick(f"tuning {self.target}")
        elif p.stage in ("plan", "batch"):  # a line per batch: the ticker speaks only when one is slow
            self.stop()
            err(f"  {p.message}")
            self._tick(f"tuning {self.target}", first_s=15.0)
        elif p.stage == "untimed":
            self._tick("checking the untimed edit")

    def _tick(self, what: str, first_s: float = 5.0) -> None:
        self.stop()
        self.ticker = Ticker(what, self.limits, "--eval-timeout", first_s=first_s).__enter__()

    def stop(self) -> None:
        if self.ticker is not None:
            self.ticker.__exit__(None, None, None)
            if self.ticker.said_limits:
                self.limits = None  # said once, by the first ticker that showed
            self.ticker = None

    def close(self) -> None:
        self.stop()
        self.bar.close()


def run(args, runner=None) -> int:
    """``geak optimize``. ``runner``: given (tests), else opened from ``--runner``."""
    from agent.llm.providers import ProviderError
    from agent.llm.rundir import RunDirError
    own = runner is None
    try:
        req, root, settings = {"llm": _llm_request, "compile": _compile_request}.get(args.strategy, _tune_request)(args)
        _check_arch(args.arch)
        if own:
            runner = open_runner(args.runner, args.device, args.workers)
    except SourceError as e:
        tell_source_error(e)
        return EXIT_BAD_INPUT
    except (ConfigError, UsageError, RunDirError) as e:
        err(f"geak: {e}")
        return EXIT_BAD_INPUT
    shown = ProgressLines(args.strategy, str(req.target), req.options.limits)
    try:
        outcome = optimize(req, args.strategy, runner, settings, shown)
    except ProviderError as e:
        err(f"geak: {e.message}")
        return EXIT_BAD_INPUT
    except ValueError as e:
        err(f"geak: {e}")
        return EXIT_BAD_INPUT
    finally:
        shown.close()
        if own:
            runner.close()
    warning = sandbox_warning(outcome.baseline)  # once, for every evaluation of the search
    if warning:
        err(warning)
    if outcome.original_fails:
        return _original_fails(outcome, req)
    if outcome.baseline is None:  # the time budget ran out before the original was checked
        err(f"geak: {outcome.message}")
        return EXIT_UNVERIFIED
    code = {"llm": _report_llm, "compile": _report_compile}.get(args.strategy, _report_tune)(args, req, outcome)
    if args.strategy != "compile" and code in (EXIT_OK, EXIT_UNVERIFIED):
        err(f"geak: {summary(outcome)}")  # the line the editor shows for the same outcome
    return code


def _original_fails(outcome: Outcome, req: EvalRequest) -> int:
    base = outcome.baseline
    if runner_unavailable(base):  # the runner's doing: nothing ran, and there is nothing to fix in the code
        tell_unavailable(base)
        return exit_code(base)
    err(render_eval(base, str(req.target), None, head=f"geak optimize  {req.target}: the original's own check"))
    err("geak: the original does not pass its own check; fix it first")
    return EXIT_BAD_INPUT


def _report_llm(args, req: EvalRequest, outcome: Outcome) -> int:
    report = outcome.report
    if outcome.stopped in ("provider", "unreachable") and not outcome.verified:
        # Nothing was tried: the provider could not be used, which no further attempt would change.
        err(f"geak: cannot run: {report.provider_error or report.message}")
        err("  what to do: " + ("check that the server at the base URL (--base-url, or OPENAI_BASE_URL / "
                                "ANTHROPIC_BASE_URL) is running and reachable from here"
                                if outcome.stopped == "unreachable" else
                                "check the key in OPENAI_API_KEY / ANTHROPIC_API_KEY, and --model")
            + f"; the run directory is {report.run_dir}")
        if args.json:
            print(to_json(report, indent=2))
        return EXIT_PROVIDER
    product(render_llm(report), args.json)
    if report.improved and args.out:
        Path(args.out).write_text(report.source, encoding="utf-8")
        err(f"wrote {args.out}")
    if args.json:
        print(to_json(report, indent=2))
    if outcome.stopped in ("provider", "unreachable", "provider_errors") and not report.improved:
        return EXIT_PROVIDER
    return EXIT_OK if report.improved else EXIT_UNVERIFIED


def _report_tune(args, req: EvalRequest, outcome: Outcome) -> int:
    report = outcome.report
    # With --preview the diff is the product on stdout, and the report goes to stderr.
    product(render_tune(report), args.json or args.preview)
    untimed = (outcome.untimed_edit, outcome.untimed_note) if outcome.untimed_note else None
    if args.preview:
        _preview(req, report, untimed, args.json)
    if args.out:
        _write_out(args, report, untimed)
    if args.json:
        doc = to_dict(report)
        if outcome.untimed_edit:
            doc["untimed_source"] = outcome.untimed_edit
        print(json.dumps(doc, indent=2))
    return EXIT_OK if report.improved else EXIT_UNVERIFIED


def _report_compile(args, req: EvalRequest, outcome: Outcome) -> int:
    """The standalone file is the product: written to --out, else printed on stdout."""
    lines = [f"geak optimize  {req.target}  (strategy compile: PyTorch's compiler writes the Triton)"]
    for t in outcome.tried:
        lines.append(f"  {t.verdict:<10} {t.label}" + (f": {t.message}" if not t.correct else ""))
    lines += [f"  note: {n}" for n in outcome.notes]
    lines.append(("result: " if outcome.source else "no result: ") + outcome.message)
    err("\n".join(lines))
    if outcome.source:
        if args.out:
            Path(args.out).write_text(outcome.source, encoding="utf-8")
            err(f"wrote {args.out}")
        elif not args.json:
            product(outcome.source, False)
    if args.json:
        doc = {"strategy": "compile", "message": outcome.message, "notes": outcome.notes,
               "untimed": outcome.untimed, "speedup": outcome.speedup, "source": outcome.source,
               "result": to_dict(outcome.result) if outcome.result else None,
               "tried": [{"label": t.label, "verdict": t.verdict, "message": t.message} for t in outcome.tried]}
        print(json.dumps(doc, indent=2))
    return EXIT_OK if outcome.source else EXIT_UNVERIFIED


def _preview(req: EvalRequest, report, untimed, json_too: bool = False) -> None:
    text, path = req.files[req.target.path], req.target.path
    if report.improved:  # the diff is the product (stdout); what it is, a note (stderr)
        err("preview of the edit (--out FILE writes it):")
        product(diff_text(text, report.source, path), json_too)
    elif untimed and untimed[0]:
        err(f"preview of the untimed edit ({untimed[1]}; --untimed --out FILE writes it):")
        product(diff_text(text, untimed[0], path), json_too)
    else:
        err("preview: no edit to show: " + (untimed[1] if untimed else "no config was verified faster"))


def _write_out(args, report, untimed) -> None:
    if report.improved:
        Path(args.out).write_text(report.source, encoding="utf-8")
        err(f"wrote {args.out}")
        return
    if args.untimed and untimed and untimed[0]:
        Path(args.out).write_text(untimed[0], encoding="utf-8")
        err(f"wrote {args.out}: {untimed[1]}")
        return
    if report.timed:
        why = "no config was verified faster than the original"
    elif not report.trials:
        why = report.message
    elif args.untimed:
        why = "nothing could be timed here, and there is no untimed edit: " + (untimed[1] if untimed else "")
    else:
        why = ("nothing could be timed here (timing needs a GPU), so no config is known to be faster; "
               + ("--preview shows the untimed edit (an @triton.autotune over the original and verified "
                  "configs, for a GPU to choose from) and " if not args.preview else "")
               + "--untimed --out FILE writes the untimed edit")
    err(f"geak: wrote nothing to {args.out}: {why}")
