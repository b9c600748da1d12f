"""``geak asm PATH::SYMBOL [--arch ARCH] [--stage STAGE]``: what the compiler made of each Triton
kernel the target launches, compiled with the signature, constexprs and launch options of its
recorded launches (as ``geak eval --arch`` compiles them), each run of instructions under the
kernel source line it came from; ``--json`` for tools."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runner.aot import ARCHS, DEFAULT_ARCH, STAGES  # standard library only: no torch in the client
from runner.config import ConfigError, phase_limits, project_options
from runner.serve.runners import open_runner
from runner.source import SourceError, build_request, find_project_root, parse_spec

from agent.asm import kernel_doc
from agent.console import Ticker
from agent.render import render_eval, render_listing
from . import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNVERIFIED, err, exit_code, runner_unavailable, tell_source_error, \
    tell_unavailable

ARCH_CHOICES = tuple(ARCHS)
STAGE_CHOICES = tuple(dict.fromkeys(s for stages in STAGES.values() for s in stages))


def add_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("target", metavar="PATH::SYMBOL")
    a.add_argument("--arch", default=DEFAULT_ARCH, choices=ARCH_CHOICES,
                   help=f"the GPU to compile for (default {DEFAULT_ARCH})")
    a.add_argument("--stage", choices=STAGE_CHOICES,
                   help="what to show: ttir, ttgir, llir, ptx or sass for NVIDIA; ttir, ttgir, llir or amdgcn "
                        "for AMD (default: sass for NVIDIA, amdgcn for AMD)")
    a.add_argument("--json", action="store_true",
                   help="print, per kernel and launch config, its resources and per source line its "
                        "instructions and their summary, as JSON")
    a.add_argument("--raw", action="store_true", help="print the stage's text as the compiler gave it")
    a.add_argument("--runner", default=None, metavar="local|URL",
                   help="where to run the target to record its launches (default: $GEAK_RUNNER_URL, else local)")
    a.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto",
                   help="local runner device (default: a GPU if torch sees one, else the Triton CPU interpreter)")
    a.add_argument("--cases", help="comma-separated input case indices whose launches to compile (default: all)")
    a.add_argument("--timeout", dest="eval_timeout", type=float, metavar="S",
                   help="time limit in seconds for each phase (import, run)")


def run(args) -> int:
    from runner.aot import ARCHS, STAGES  # noqa: imports no torch at module level
    known = STAGES[ARCHS[args.arch].backend]
    if args.stage and args.stage not in known:
        err(f"geak: no compile stage '{args.stage}' for {args.arch}: one of {', '.join(known)}")
        return EXIT_BAD_INPUT
    try:
        path, _ = parse_spec(args.target)
        root = find_project_root(Path(path))
        opts = project_options(root)
        opts.trials, opts.timing = 1, False
        opts.aot_arch, opts.aot_stage, opts.device = args.arch, args.stage or "default", args.device
        if args.cases:
            try:
                opts.cases = [int(x) for x in args.cases.split(",")]
            except ValueError:
                raise ConfigError("--cases takes comma-separated integers, e.g. 0,2") from None
        if args.eval_timeout is not None:
            opts.limits = phase_limits(opts.limits, args.eval_timeout)
        req, info, _ = build_request(args.target, None, opts, root=root)
        runner = open_runner(args.runner, args.device, 1)
    except SourceError as e:
        tell_source_error(e)
        return EXIT_BAD_INPUT
    except ConfigError as e:
        err(f"geak: {e}")
        return EXIT_BAD_INPUT
    err(f"compiling the kernels {req.target} launches for {args.arch} ...")
    try:
        with Ticker(f"recording the launches of {req.target}", req.options.limits):
            result = runner.evaluate(req)
    finally:
        runner.close()
    if runner_unavailable(result):
        tell_unavailable(result)
        return exit_code(result)
    launches = [r for r in result.resources if r.variant is None]
    if not launches:
        why = ("the target launched no Triton kernel" if result.ran else "the target did not run")
        err(f"geak: nothing to show: {why}")
        err(render_eval(result, str(req.target), None))
        return EXIT_UNVERIFIED if result.verified else exit_code(result)
    if args.json:
        doc = {"target": str(req.target), "arch": args.arch, "stage": launches[0].listing_stage,
               "status": result.status, "kernels": [kernel_doc(r, req.files) for r in launches]}
        print(json.dumps(doc, indent=2))
    else:
        print(render_listing(launches, req.files, raw=args.raw), flush=True)
    return EXIT_OK if all(not r.error for r in launches) else EXIT_UNVERIFIED
