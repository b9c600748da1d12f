"""``geak eval PATH::SYMBOL [--candidate PATH::SYMBOL]``: check a target (and a candidate) for
correctness and speed, on the runner, and print the verdict."""

from __future__ import annotations

import argparse
from pathlib import Path

from runner.config import ConfigError, phase_limits, project_options
from runner.serve.runners import open_runner
from runner.schema import EvalOptions, EvalResult, Tolerance, to_json
from runner.source import SourceError, build_request, declared_case_count, find_project_root, parse_spec

from agent.console import Ticker
from agent.render import render_compiled_diff, render_eval, sandbox_warning
from . import EXIT_BAD_INPUT, err, exit_code, product, runner_unavailable, tell_source_error, tell_unavailable


def add_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("target", metavar="PATH::SYMBOL")
    e.add_argument("--candidate", metavar="PATH::SYMBOL")
    e.add_argument("--runner", default=None, metavar="local|URL",
                   help="where to evaluate (default: $GEAK_RUNNER_URL, else local)")
    e.add_argument("--json", action="store_true", help="print the EvalResult as JSON on stdout")
    e.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto",
                   help="local runner device (default: a GPU if torch sees one, else the "
                        "Triton CPU interpreter)")
    e.add_argument("--trials", type=int, help="fresh seeded inputs per case (default 3)")
    e.add_argument("--cases", help="comma-separated case indices to run (default: all)")
    e.add_argument("--atol", type=float, help="absolute tolerance for every float dtype")
    e.add_argument("--rtol", type=float, help="relative tolerance for every float dtype")
    e.add_argument("--no-timing", action="store_true", help="correctness only")
    e.add_argument("--timeout", "--eval-timeout", dest="eval_timeout", type=float, metavar="S",
                   help="time limit in seconds for each phase of the evaluation (import, run, timing); "
                        "default from [tool.geak.limits]: 120, 300, 300")
    e.add_argument("--workers", type=int, default=1, help="local worker processes (default 1)")
    e.add_argument("--arch", metavar="ARCH",
                   help="also compile the launched kernels ahead of time for sm_80, sm_90, gfx90a, "
                        "gfx942 or 'device', and show registers, spills, shared memory, occupancy")


def options(args, root: Path) -> EvalOptions:
    """The project's options, with what the command line says over them."""
    opts = project_options(root)
    if args.trials is not None:
        if args.trials < 1:
            raise ConfigError("--trials must be at least 1")
        opts.trials = args.trials
    if args.cases:
        try:
            opts.cases = [int(x) for x in args.cases.split(",")]
        except ValueError:
            raise ConfigError("--cases takes comma-separated integers, e.g. 0,2") from None
    if args.atol is not None or args.rtol is not None:
        opts.tolerance["default"] = Tolerance(atol=args.atol if args.atol is not None else 0.0,
                                              rtol=args.rtol if args.rtol is not None else 0.0)
    if args.no_timing:
        opts.timing = False
    if args.eval_timeout is not None:
        opts.limits = phase_limits(opts.limits, args.eval_timeout)
    if args.arch:
        opts.aot_arch = args.arch
        if args.candidate:  # the instruction mix of the compiled difference (render_compiled_diff)
            opts.aot_stage = "default"
    opts.device = args.device
    return opts


def check_cases(opts: EvalOptions, req, option: str = "--cases") -> None:
    """``--cases`` against the cases the target's file declares, where that can be told before
    running (a literal INPUT_CASES, or get_inputs() alone: one case)."""
    if opts.cases is None:
        return
    if any(i < 0 for i in opts.cases):
        raise ConfigError(f"{option} takes case indices from 0, e.g. 0,2")
    n = declared_case_count(req.files[req.target.path])
    bad = [i for i in opts.cases if n is not None and i >= n]
    if bad:
        which = f"INPUT_CASES, indices 0-{n - 1}" if n > 1 else "get_inputs() without INPUT_CASES: index 0"
        raise ConfigError(f"{option} {','.join(map(str, bad))}: {req.target.path} declares {n} input "
                          f"case{'s' if n != 1 else ''} ({which})")


def run(args) -> int:
    try:
        path, _ = parse_spec(args.target)
        root = find_project_root(Path(path))
        opts = options(args, root)
        req, info, _ = build_request(args.target, args.candidate, opts, root=root)
        check_cases(opts, req)
        runner = open_runner(args.runner, args.device, args.workers)
    except SourceError as e:
        tell_source_error(e)
        if args.json:
            print(to_json(EvalResult(status="compile_error" if e.info.kind != "bad_request" else "rejected",
                                     correct=False, message=e.info.message, error=e.info), indent=2))
        return EXIT_BAD_INPUT
    except ConfigError as e:
        err(f"geak: {e}")
        return EXIT_BAD_INPUT
    if info.note:
        err(f"note: {info.note}")
    what = f"evaluating {req.target}" + (f" against {req.candidate}" if req.candidate else "")
    err(what + " ...")
    original = None
    try:
        with Ticker(what, req.options.limits):
            result = runner.evaluate(req)
        if req.candidate and req.options.aot_arch and result.resources and not runner_unavailable(result):
            # The original's own compile, for the compiled difference: the target against itself.
            err(f"compiling {req.target}'s own kernels for {req.options.aot_arch} ...")
            with Ticker(f"recording the launches of {req.target}"):
                original = runner.evaluate(req.with_candidate(None, trials=1, timing=False))
    finally:
        runner.close()
    if runner_unavailable(result):  # the runner's doing, not the code's: no verdict on the code
        tell_unavailable(result)
    else:
        product(render_eval(result, str(req.target), str(req.candidate) if req.candidate else None), args.json)
        if original is not None and original.resources:
            product(render_compiled_diff(original.resources, result.resources), args.json)
    warning = sandbox_warning(result)
    if warning:
        err(warning)
    if args.json:
        print(to_json(result, indent=2))
    return exit_code(result)
