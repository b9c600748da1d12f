"""The ``geak`` command.

  geak eval PATH::SYMBOL [--candidate PATH::SYMBOL] [--runner local] [--json]

``--json`` prints one JSON document on stdout; people's output goes to stderr.
Exit codes: 0 success, 1 the work ran but found no verified result, 2 bad usage or bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from runner.config import ConfigError, options_from_settings, project_settings
from runner.schema import EvalOptions, EvalResult, Limits, Tolerance, to_json
from runner.source import SourceError, build_request, declared_case_count, find_project_root, parse_spec

EXIT_OK, EXIT_UNVERIFIED, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2, with the usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"geak: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="geak", description="Evaluate and optimize Triton / PyTorch kernels.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    e = sub.add_parser("eval", help="check a target (and a candidate) for correctness and speed",
                       description="Check PATH::SYMBOL on its own inputs; with --candidate, check "
                                   "that the candidate reproduces it and measure both.")
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
    o = sub.add_parser("optimize", help="search for a faster verified version of a target",
                       description="Search for a faster version of PATH::SYMBOL that is verified to "
                                   "compute the same thing. --strategy tune (the default) searches the "
                                   "launch settings of its Triton kernel.")
    o.add_argument("target", metavar="PATH::SYMBOL")
    o.add_argument("--strategy", choices=["tune", "llm"], default="tune")
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
    o.add_argument("--key", metavar="ARG,ARG",
                   help="with --emit autotune: the kernel arguments the choice is keyed on "
                        "(default: its integer size arguments, strides left out)")
    o.add_argument("--out", metavar="FILE", help="write the target file with the best config to FILE")
    o.add_argument("--preview", action="store_true",
                   help="show the edit as a diff (on stderr) without writing it; without a GPU, the "
                        "untimed edit (see --untimed)")
    o.add_argument("--untimed", action="store_true",
                   help="with --out, when nothing could be timed (no GPU): write the untimed edit, an "
                        "@triton.autotune over the original and verified-correct configs, for a GPU to "
                        "choose from at run time")
    o.add_argument("--eval-timeout", dest="eval_timeout", type=float, metavar="S",
                   help="time limit in seconds for each phase of every evaluation (import, run, timing); "
                        "default from [tool.geak.limits]: 120, 300, 300")
    o.add_argument("--json", action="store_true", help="print the optimize report as JSON on stdout")
    from agent.llm.options import add_llm_options
    add_llm_options(o)
    b = sub.add_parser("bench", help="run a benchmark suite and report the GEAK paper's metrics",
                       description="Run every task in DIR (geak, TritonBench-G, GEAK ROCm or KernelBench "
                                   "format) through a strategy and report call accuracy, execution "
                                   "accuracy, speedups, fast_p, pass@k and % of peak.")
    from agent.bench.command import add_bench_arguments
    add_bench_arguments(b)
    return p


# ----------------------------------------------------------------------------- output


def _err(msg: str = "") -> None:
    print(msg, file=sys.stderr)


def _fmt(x: Optional[float], spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _peak(t) -> str:
    """The candidate's share of the GPU's peak: compute when the file gives get_flops, else bandwidth."""
    if t is None:
        return "-"
    if t.cand_flops_pct_peak is not None:
        return f"{t.cand_flops_pct_peak:.0f}% FLOP ({t.cand_tflops:.0f} TF/s)"
    if t.cand_bw_pct_peak is not None:
        return f"{t.cand_bw_pct_peak:.0f}% BW"
    return "-"


def _without_status(message: str, status: str) -> str:
    """The result's message without a leading ``status:`` (the verdict already says it)."""
    head, sep, rest = message.partition(":")
    return rest.strip() if sep and head.strip().lower() == status.lower() and rest.strip() else message


def render(result: EvalResult, target: str, candidate: Optional[str]) -> str:
    lines = []
    head = f"geak eval  {target}" + (f"  vs  {candidate}" if candidate else "  (against itself)")
    lines.append(head)
    d = result.device
    if d:
        lines.append(f"device     {d}"
                     + (f"   inputs: {result.inputs_convention}" if result.inputs_convention else ""))
    if result.cases:
        rows = [("case", "shapes", "result", "max abs", "max rel", "ref ms", "cand ms", "speedup", "% of peak")]
        for c in result.cases:
            status = "skipped" if c.skipped else ("pass" if c.passed else ("FAIL" if c.trials else "-"))
            t = c.timing
            # A case that failed with no numeric error failed on structure (shape, dtype, length,
            # mutation): an error of 0 would read as "equal".
            structural = not c.passed and c.trials and not (c.max_abs_err or c.max_rel_err)
            rows.append((c.label, c.shapes, status, "-" if structural else _fmt(c.max_abs_err),
                         "-" if structural else _fmt(c.max_rel_err),
                         _fmt(t.ref_ms, ".4f") if t else "-", _fmt(t.cand_ms, ".4f") if t else "-",
                         f"{t.speedup:.2f}x" if t else "-", _peak(t)))
        widths = [min(max(len(r[i]) for r in rows), 44) for i in range(len(rows[0]))]
        lines.append("")
        for r in rows:
            lines.append("  " + "  ".join(str(v)[:widths[i]].ljust(widths[i]) for i, v in enumerate(r)).rstrip())
        lines.append("")
        for c in result.cases:
            if c.skipped:
                lines.append(f"  skipped {c.label}: {c.skipped}")
            elif c.detail and not c.passed:
                lines.append(f"  {c.label}: {c.detail}")
    verdict = {"ok": "VERIFIED" if candidate else "OK"}.get(result.status, result.status.upper())
    lines.append(f"verdict    {verdict}: {_without_status(result.message, result.status)}")
    if result.timing:
        t = result.timing
        lines.append(f"timing     Σ ref {t.ref_ms:.4f} ms, Σ cand {t.cand_ms:.4f} ms, speedup "
                     f"{t.speedup:.3f}x (geomean {t.speedup_geomean:.3f}x), {t.method}, "
                     f"spread ±{t.spread_pct:.1f}%")
    elif result.timing_unavailable:
        lines.append(f"timing     unavailable: {result.timing_unavailable}")
    if result.resources:
        lines.append(f"ahead-of-time compile for {result.resources[0].arch} (per kernel and launch config):")
        rows = [("kernel", "config", "regs", "spills", "shared", "occupancy")]
        for k in result.resources:
            cfg = ", ".join(f"{n}={v}" for n, v in k.constexprs.items() if v != "None")
            cfg = (cfg + ", " if cfg else "") + f"warps={k.num_warps}, stages={k.num_stages}"
            ptrs = sorted({t[1:] for t in k.arg_types.split(", ") if t.startswith("*")})
            cfg += f" [{'/'.join(ptrs)}]" if ptrs else ""
            if k.error:
                rows.append((k.kernel, cfg, "-", "-", "-", k.error))
                continue
            rows.append((k.kernel, cfg, str(k.registers) if k.registers is not None else "?",
                         f"{k.spill_bytes} B" if k.spill_bytes is not None else "?",
                         f"{k.shared_bytes} B", f"{k.occupancy_pct:.0f}%" if k.occupancy_pct is not None else "?"))
        widths = [min(max(len(r[i]) for r in rows), 60) for i in range(len(rows[0]))]
        for r in rows:
            lines.append("  " + "  ".join(v[:widths[i]].ljust(widths[i]) for i, v in enumerate(r)).rstrip())
    for f in result.flags:
        if f.code == "limit_lowered":  # the runner's ceiling, not the candidate's doing
            lines.append(f"note       {f.message}")
        elif f.severity != "info" or result.status == "rejected":
            lines.append(f"{f.severity:<10} {f.code}: {f.message}")
    if result.error:
        e = result.error
        if e.hint:
            lines.append(f"what to do: {e.hint}")
        if e.traceback and e.traceback.strip() != e.message.strip():
            lines.append("")
            lines.extend("  " + ln for ln in e.traceback.strip().splitlines()[-25:])
    if result.log and result.status not in ("ok",):
        lines.append("")
        lines.append("output of the code (last lines):")
        lines.extend("  " + ln for ln in result.log.strip().splitlines()[-15:])
    return "\n".join(lines)


def exit_code(result: EvalResult) -> int:
    if result.status == "ok" and result.correct:
        return EXIT_OK
    if result.error and (result.error.side == "reference" or result.error.kind in (
            "bad_request", "syntax_error", "missing_symbol", "no_inputs", "bad_inputs",
            "signature_mismatch", "runner_unavailable")):
        return EXIT_BAD_INPUT
    return EXIT_UNVERIFIED


# ----------------------------------------------------------------------------- commands


def _options(args, root: Path) -> EvalOptions:
    opts = options_from_settings(project_settings(root), f"{root / 'pyproject.toml'} [tool.geak]")
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
    opts.device = args.device
    return opts


def phase_limits(limits: Limits, seconds: float, option: str = "--timeout") -> Limits:
    """``limits`` with every phase (import, run, timing) limited to ``seconds``."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{option} must be a positive number of seconds")
    return dataclasses.replace(limits, import_s=seconds, run_s=seconds, timing_s=seconds)


class TimeLimited:
    """A runner whose evaluations run under at most ``seconds`` per phase (``--eval-timeout``)."""

    def __init__(self, runner, seconds: float):
        self.runner, self.seconds = runner, seconds

    def _limit(self, req):
        lim = req.options.limits
        req.options.limits = dataclasses.replace(lim, **{k: min(getattr(lim, k), self.seconds)
                                                         for k in ("import_s", "run_s", "timing_s")})
        return req

    def evaluate(self, request):
        return self.runner.evaluate(self._limit(request))

    def evaluate_many(self, requests):
        return self.runner.evaluate_many([self._limit(r) for r in requests])

    def __getattr__(self, name):  # device_info, close, pool, ...
        return getattr(self.runner, name)


class Ticker:
    """While a call that may take long runs, say on stderr what is running and for how long:
    after ``first_s``, then every ``every_s`` (a terminal gets one line, updated each second)."""

    def __init__(self, what: str, limits: Optional[Limits] = None, option: str = "--timeout",
                 first_s: float = 5.0, every_s: float = 15.0, stream=None):
        self.what, self.first_s, self.every_s = what, first_s, every_s
        self.stream = stream or sys.stderr
        self.tail = ""
        if limits is not None:
            self.tail = (f" (limits per evaluation phase: import {limits.import_s:g} s, run {limits.run_s:g} s, "
                         f"timing {limits.timing_s:g} s; {option} S to change)")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._shown = False
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def _run(self):
        t0 = time.monotonic()
        if self._stop.wait(self.first_s):
            return
        last = 0.0
        while not self._stop.is_set():
            el = time.monotonic() - t0
            if self._tty:
                self.stream.write(f"\r\x1b[2K  ... {self.what}: {el:.0f} s so far{self.tail}"[:200])
                self.stream.flush()
                self._shown = True
                self._stop.wait(1.0)
            else:
                if not self._shown or el - last >= self.every_s:
                    print(f"  ... {self.what}: {el:.0f} s so far{self.tail}", file=self.stream, flush=True)
                    self._shown, last = True, el
                self._stop.wait(min(1.0, self.every_s))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)
        if self._tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()


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


def make_runner(spec: Optional[str], device: str, workers: int):
    from runner.runners import open_runner
    return open_runner(spec, device, workers)


def cmd_eval(args) -> int:
    try:
        path, _ = parse_spec(args.target)
        root = find_project_root(Path(path))
        opts = _options(args, root)
        req, info, flags = build_request(args.target, args.candidate, opts, root=root)
        check_cases(opts, req)
        runner = make_runner(args.runner, args.device, args.workers)
    except SourceError as e:
        _err(f"geak: {e.info.message}")
        if e.info.hint:
            _err(f"  what to do: {e.info.hint}")
        if args.json:
            print(to_json(EvalResult(status="compile_error" if e.info.kind != "bad_request" else "rejected",
                                     correct=False, message=e.info.message, error=e.info), indent=2))
        return EXIT_BAD_INPUT
    except ConfigError as e:
        _err(f"geak: {e}")
        return EXIT_BAD_INPUT
    if info.note:
        _err(f"note: {info.note}")
    what = f"evaluating {req.target}" + (f" against {req.candidate}" if req.candidate else "")
    _err(what + " ...")
    try:
        with Ticker(what, req.options.limits):
            result = runner.evaluate(req)
    finally:
        runner.close()
    _err(render(result, str(req.target), str(req.candidate) if req.candidate else None))
    if args.json:
        print(to_json(result, indent=2))
    return exit_code(result)


def render_tune(report) -> str:
    lines = [f"geak optimize  {report.target}  --strategy tune  (kernel {report.kernel}, arch {report.arch})"]
    if report.device:
        lines.append(f"device     {report.device}")
    if report.original:
        lines.append("original   " + ", ".join(f"{k}={v}" for k, v in sorted(report.original.items())))
    if report.trials or report.screened:
        rows = [("config", "result", "regs", "spills", "shared", "occupancy", "speedup")]

        def costliest(resources):  # what does not fit, else what spills most, else most registers
            return max(resources, key=lambda r: (not r.fits, r.spill_bytes or 0, r.registers or 0), default=None)

        k = costliest(report.original_resources)
        rows.append((", ".join(f"{n}={v}" for n, v in sorted(report.original.items())) or "as written",
                     "the original (reference)",
                     str(k.registers) if k and k.registers is not None else "-",
                     f"{k.spill_bytes} B" if k and k.spill_bytes is not None else "-",
                     f"{k.shared_bytes} B" if k and k.shared_bytes is not None else "-",
                     f"{k.occupancy_pct:.0f}%" if k and k.occupancy_pct is not None else "-",
                     "1.000x" if report.timed else "-"))
        # The configs that ran, fastest first, then those pruned unrun by the compile screen.
        order = sorted(report.trials, key=lambda t: -(t.speedup or 0.0)) + list(report.screened)
        for t in order:
            k = costliest(t.resources)
            rows.append((", ".join(f"{n}={v}" for n, v in sorted(t.config.items())),
                         ("pruned: " + t.pruned) if t.pruned and (t.correct or t.status == "pruned") else
                         ("correct" if t.correct else t.status),
                         str(k.registers) if k and k.registers is not None else "-",
                         f"{k.spill_bytes} B" if k and k.spill_bytes is not None else "-",
                         f"{k.shared_bytes} B" if k and k.shared_bytes is not None else "-",
                         f"{k.occupancy_pct:.0f}%" if k and k.occupancy_pct is not None else "-",
                         f"{t.speedup:.3f}x" if t.speedup is not None else "-"))
        widths = [min(max(len(r[i]) for r in rows), 90) for i in range(len(rows[0]))]
        lines.append("")
        for r in rows:
            lines.append("  " + "  ".join(v[:widths[i]].ljust(widths[i]) for i, v in enumerate(r)).rstrip())
        lines.append("")
    if report.per_shape:
        lines.append("best per input shape (speedup over the original, measured interleaved):")
        for c in report.per_shape:
            cfg = ", ".join(f"{n}={v}" for n, v in sorted(c.config.items())) if c.config else "the original"
            lines.append(f"  {c.case:<44} {cfg}  {c.speedup:.3f}x")
    if report.autotune_configs and report.source:
        lines.append(f"autotune   {len(report.autotune_configs)} config(s), key={report.autotune_key}")
    if report.confirmation is not None and report.confirmation.timing:
        t = report.confirmation.timing
        lines.append(f"confirmed  Σ ref {t.ref_ms:.4f} ms, Σ tuned {t.cand_ms:.4f} ms, {t.speedup:.3f}x "
                     f"(geomean {t.speedup_geomean:.3f}x), spread ±{t.spread_pct:.1f}%, {t.method}")
    for n in report.notes:
        lines.append(f"note       {n}")
    lines.append(f"verdict    {'IMPROVED' if report.improved else 'NO VERIFIED IMPROVEMENT'}: {report.message}")
    return "\n".join(lines)


def untimed_edit(runner, req, report, key: Optional[list[str]] = None) -> tuple[Optional[str], str]:
    from agent.tune.untimed import untimed_edit as edit
    return edit(runner, req, report, key)


def diff_text(old: str, new: str, path: str) -> str:
    import difflib
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}")).rstrip("\n")


def _optimize_llm(args) -> int:
    from agent.llm.command import run_llm_optimize
    if args.preview or args.untimed:
        _err("geak: --preview and --untimed are for --strategy tune")
        return EXIT_BAD_INPUT
    if args.eval_timeout is None:
        return run_llm_optimize(args)
    try:
        phase_limits(Limits(), args.eval_timeout, "--eval-timeout")
        runner = TimeLimited(make_runner(args.runner, args.device, args.workers), args.eval_timeout)
    except ConfigError as e:
        _err(f"geak: {e}")
        return EXIT_BAD_INPUT
    try:
        return run_llm_optimize(args, runner=runner)
    finally:
        runner.close()


def cmd_optimize(args) -> int:
    if args.strategy == "llm":
        return _optimize_llm(args)
    from agent.tune.knobs import find_launch_sites
    from agent.tune.tuner import tune
    from runner.aot import ARCHS, DEFAULT_ARCH
    from runner.schema import ErrorInfo, to_dict
    import json
    try:
        path, _ = parse_spec(args.target)
        root = find_project_root(Path(path))
        opts = options_from_settings(project_settings(root), f"{root / 'pyproject.toml'} [tool.geak]")
        opts.device = args.device
        if args.max_configs < 1 or args.trials < 1:
            raise ConfigError("--max-configs and --trials must be at least 1")
        if args.untimed and not args.out:
            raise ConfigError("--untimed goes with --out FILE (it says what to write there); --preview shows it")
        if args.eval_timeout is not None:
            opts.limits = phase_limits(opts.limits, args.eval_timeout, "--eval-timeout")
        req, info, _ = build_request(args.target, None, opts, root=root)
        if not find_launch_sites(req.files[req.target.path], req.target.symbol):
            where = req.target.path
            raise SourceError(ErrorInfo(
                kind="bad_request", side="reference", file=where,
                message=f"{req.target} launches no Triton kernel defined in {where}, so there is no launch "
                        "setting for --strategy tune (the default) to search",
                hint=f"to have a model write a Triton kernel for it: geak optimize {args.target} --strategy llm "
                     "--provider openai|anthropic --model M (the key from OPENAI_API_KEY or ANTHROPIC_API_KEY); "
                     "for a kernel launched from another file, name that file's wrapper"))
        if args.arch and args.arch not in ARCHS:
            raise ConfigError(f"unknown arch '{args.arch}': use one of {', '.join(sorted(ARCHS))}")
        runner = make_runner(args.runner, args.device, args.workers)
    except SourceError as e:
        _err(f"geak: {e.info.message}")
        if e.info.hint:
            _err(f"  what to do: {e.info.hint}")
        return EXIT_BAD_INPUT
    except ConfigError as e:
        _err(f"geak: {e}")
        return EXIT_BAD_INPUT
    untimed: Optional[tuple[Optional[str], str]] = None
    try:
        # The original must be right on its own inputs before anything is compared with it.
        with Ticker(f"checking the original {req.target}", opts.limits, "--eval-timeout"):
            base = runner.evaluate(req)
        if not base.correct:
            _err(render(base, str(req.target), None))
            if not (base.error and base.error.kind == "runner_unavailable"):
                _err("geak: the original does not pass its own check; fix it first")
            return exit_code(base) if base.error and base.error.kind == "runner_unavailable" else EXIT_BAD_INPUT
        arch = args.arch or (base.device.arch if base.device and base.device.arch in ARCHS else DEFAULT_ARCH)
        _err(f"tuning {req.target} for {arch} on {base.device.name if base.device else 'the runner'} ...")
        gpu = bool(base.device and base.device.backend != "interpreter" and base.timing)
        key = [k.strip() for k in args.key.split(",") if k.strip()] if args.key else None
        try:
            with Ticker(f"tuning {req.target}", opts.limits, "--eval-timeout"):
                report = tune(runner, req, arch, max_configs=args.max_configs, trials_per_case=args.trials,
                              timed=gpu, emit=args.emit, key=key)
        except ValueError as e:
            _err(f"geak: {e}")
            return EXIT_BAD_INPUT
        if not report.improved and not report.timed and report.trials and (args.preview or args.untimed):
            with Ticker("checking the untimed edit", opts.limits, "--eval-timeout"):
                untimed = untimed_edit(runner, req, report, key)
    finally:
        runner.close()
    _err(render_tune(report))
    text = req.files[req.target.path]
    if args.preview:
        if report.improved:
            _err("preview of the edit (--out FILE writes it):\n" + diff_text(text, report.source, req.target.path))
        elif untimed and untimed[0]:
            _err(f"preview of the untimed edit ({untimed[1]}; --untimed --out FILE writes it):\n"
                 + diff_text(text, untimed[0], req.target.path))
        else:
            _err("preview: no edit to show: " + (untimed[1] if untimed else "no config was verified faster"))
    if args.out:
        if report.improved:
            Path(args.out).write_text(report.source, encoding="utf-8")
            _err(f"wrote {args.out}")
        elif args.untimed and untimed and untimed[0]:
            Path(args.out).write_text(untimed[0], encoding="utf-8")
            _err(f"wrote {args.out}: {untimed[1]}")
        else:
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
            _err(f"geak: wrote nothing to {args.out}: {why}")
    if args.json:
        doc = to_dict(report)
        if untimed and untimed[0]:
            doc["untimed_source"] = untimed[0]
        print(json.dumps(doc, indent=2))
    return EXIT_OK if report.improved else EXIT_UNVERIFIED


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "optimize":
            return cmd_optimize(args)
        if args.command == "bench":
            from agent.bench.command import run_bench
            return run_bench(args)
    except KeyboardInterrupt:
        _err("geak: interrupted")
        return 130
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
