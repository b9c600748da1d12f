"""What a job does, off the event loop: benchmark a target, or optimize it through
``agent.optimize`` (the tuner or the GEAK loop, exactly as ``geak optimize`` runs them, on the
editor's text). Everything here runs in a job thread and talks to the editor only through the
``JobContext``: progress in words, the job's status in numbers, cancellation.

The runner is watched (``agent.watch.Watched``, with the job's context as its cancel) so that a
cancelled job stops before its next evaluation starts;
evaluations already running finish in the background and are discarded. A job ends with the
agent's ``Outcome`` (a benchmark too: the original's measurement as its baseline); the words it
shows are the editor's own (``_worded``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from runner.schema import EvalRequest, EvalResult

from geak_lsp.settings import Settings
from geak_lsp.store import CandidateRecord, CaseRecord, case_records
from geak_lsp.wording import editor_words

if TYPE_CHECKING:  # the agent is imported in the job thread, on first use
    from agent.outcome import Outcome
    from agent.progress import Progress


class Cancelled(Exception):
    pass


class JobContext:
    """The job's side of the editor: ``report`` progress, ask ``cancelled``; and the job's
    status as numbers (``stage``, evaluated, verified, the best verified speedup, done of total)."""

    def __init__(self, report: Callable[[str, Optional[int]], None] = lambda m, p: None):
        self._report = report
        self._cancel = threading.Event()
        self.stage = ""
        self.message = ""
        self.best_speedup: Optional[float] = None
        self.evaluated = 0
        self.verified = 0
        self.done = 0
        self.total: Optional[int] = None
        self.percentage: Optional[int] = None

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check(self) -> None:
        if self._cancel.is_set():
            raise Cancelled()

    def report(self, message: str, percentage: Optional[int] = None) -> None:
        if not self._cancel.is_set():
            self.message = message
            self.percentage = percentage if percentage is not None else self.percentage
            self._report(message, percentage)

    def update(self, p: "Progress") -> None:
        """The numbers of an agent's ``Progress``."""
        self.stage = p.stage
        self.evaluated, self.verified = p.evaluated, p.verified
        self.best_speedup = p.best_speedup if p.best_speedup is not None else self.best_speedup
        self.done, self.total = p.done, p.total if p.total is not None else self.total

    def best_text(self) -> str:
        if self.best_speedup is not None:
            return f"best verified {self.best_speedup:.2f}x"
        return "no verified speedup yet" + (" (nothing timed)" if self.verified else "")

    def status(self) -> dict:
        return {"stage": self.stage, "message": self.message, "evaluated": self.evaluated,
                "verified": self.verified, "done": self.done, "total": self.total,
                "bestSpeedup": self.best_speedup, "percentage": self.percentage}


def watched(runner, ctx: JobContext):
    """The runner as the job's searches use it: stopped when the job is cancelled."""
    from agent.watch import Watched
    return Watched(runner, cancel=ctx)


@dataclass
class Failure:
    what: str
    reason: str


def reason(r: EvalResult) -> str:
    msg = r.message
    if r.error and r.error.hint:
        msg += f" — {r.error.hint}"
    return editor_words(msg)


def benchmark(runner, request: EvalRequest, settings: Settings, ctx: JobContext) -> "Outcome":
    """Measure only: the target against itself, with the compile report for ``geak.arch``."""
    from agent.outcome import Outcome
    opts = request.options
    opts.aot_arch = aot_arch(runner, settings)
    ctx.report(f"measuring {request.target.symbol} ...", 10)
    base = watched(runner, ctx).evaluate(request)
    out = Outcome(strategy="benchmark", baseline=base)
    if base.correct:
        passed = sum(1 for c in base.cases if c.passed)
        out.message = (f"correct on {passed} case(s) {base.device.on if base.device else 'on the runner'}; "
                       + (f"Σ {base.timing.ref_ms:.4f} ms" if base.timing else
                          f"not timed ({editor_words(base.timing_unavailable or 'no timing')})"))
    else:
        out.message = f"fails its own inputs: {reason(base)}"
    return out


def aot_arch(runner, settings: Settings) -> str:
    """The GPU compile reports are for: ``geak.arch``, else the runner's GPU, else sm_90."""
    from runner.aot import DEFAULT_ARCH
    return settings.arch or (DEFAULT_ARCH if interpreted(runner, settings) else "device")


def writes_for_a_gpu(runner, settings: Settings) -> bool:
    """There is a GPU to compile for: ``geak.arch``, or the runner's. On the CPU interpreter
    with no arch named, the compiled difference would be for a guessed GPU and costs two
    evaluations per offered result, so the results view goes without it (as the GEAK loop's
    reflector does, ``agent.optimize``)."""
    return bool(settings.arch) or not interpreted(runner, settings)


def interpreted(runner, settings: Settings) -> bool:
    if settings.device == "interpreter":
        return True
    return runner.device == "interpreter"


def _pytorch_only(request: EvalRequest) -> bool:
    """The target launches no Triton kernel of its file: a PyTorch function or module."""
    from agent.tune.knobs import find_launch_sites
    try:
        return not find_launch_sites(request.files[request.target.path], request.target.symbol)
    except Exception:  # noqa: BLE001  the tuner's own check says what is wrong
        return False


def optimize_target(runner, request: EvalRequest, settings: Settings, ctx: JobContext, root: Path) -> "Outcome":
    """``agent.optimize`` with the editor's settings; its progress becomes the job's."""
    from agent.llm.providers import ProviderError
    from agent.llm.session import LLMSettings
    from agent.optimize import OptimizeSettings, optimize
    from agent.outcome import Outcome
    from agent.tune.strategy import TuneSettings
    strategy = settings.effective_strategy
    if settings.strategy == "auto" and strategy == "tune" and _pytorch_only(request):
        strategy = "compile"  # no key, no Triton kernel to tune: PyTorch's compiler writes one
    s = OptimizeSettings(arch=settings.arch, root=root, apply_untimed=settings.apply_untimed,
                         tune=TuneSettings(max_configs=settings.max_configs, trials=settings.trials,
                                           emit=settings.emit, budget_s=settings.task_budget),
                         llm=LLMSettings(provider=settings.provider, model=settings.model,
                                         iterations=settings.iterations, parallel=settings.parallel, retries=1))
    try:
        out = optimize(request, strategy, watched(runner, ctx), s,
                       _progress(ctx, settings, strategy, request.target.symbol))
    except ProviderError as e:
        return Outcome(strategy="llm", message=f"the {settings.provider} provider: {e.message}")
    out.message = editor_words(_worded(out, settings))
    return out


def _progress(ctx: JobContext, settings: Settings, strategy: str, symbol: str) -> Callable[["Progress"], None]:
    """The agent's progress, in the editor's words and percentages."""
    def on_progress(p: "Progress") -> None:
        ctx.update(p)
        if p.stage == "original":
            ctx.report(f"checking the original {symbol} on its own inputs ...", 5)
        elif p.stage == "search" and strategy == "llm":
            ctx.report(f"GEAK loop with {settings.provider} {settings.model}: iteration 1/{p.total} ...", 10)
        elif p.stage == "search" and p.device is not None and p.device.is_gpu:
            ctx.report(f"tuning launch settings {p.device.on if p.device else 'on the runner'} ...", 15)
        elif p.stage == "search":  # no GPU: configs are checked, and compiled ahead of time for geak.arch
            ctx.report(f"checking launch settings {p.device.on if p.device else 'on the runner'} "
                       f"(compile report for {p.arch}, geak.arch) ...", 15)
        elif p.stage == "batch":
            ctx.report(f"{p.message}, {ctx.best_text()}", min(95, 15 + int(80 * p.done / p.total)) if p.total else None)
        elif p.stage == "iteration":
            ctx.report(p.message, 10 + int(85 * p.done / p.total) if p.total else None)
    return on_progress


def _worded(out: "Outcome", settings: Settings) -> str:
    """What the editor says of an optimization: ``agent.outcome.summary``, as ``geak optimize``
    ends, in the editor's words."""
    from agent.outcome import summary
    if out.original_fails:
        return f"the original fails its own inputs: {reason(out.baseline)}; fix it first"
    text = editor_words(summary(out))
    if out.strategy == "tune" and not out.improved and not out.timed and settings.apply_untimed:
        text += ("; geak.applyUntimed offers untimed results of the GEAK loop only: the tuner chooses a config "
                 "by its timing")
    return text


def failures(out: "Outcome") -> list[Failure]:
    """The configs or candidates that ran and failed, with why."""
    return [Failure(t.label, editor_words(f"{t.verdict}: {t.message}" if out.strategy == "tune"
                                          else (t.message or t.verdict)))
            for t in out.tried if t.ran and not t.correct]


def candidate_records(out: "Outcome") -> list[CandidateRecord]:
    """Every config or candidate, as the results view keeps it."""
    return [CandidateRecord(label=t.label, verdict=t.verdict, correct=t.correct, speedup=t.speedup,
                            message=t.message, chosen=t.chosen,
                            cases=case_records(t.result, "candidate") if t.result is not None else
                            [CaseRecord(label=label, shapes="", passed=True, speedup=sp)
                             for label, sp in sorted(t.case_speedups.items())])
            for t in out.tried]


def confirm(runner, request: EvalRequest, merged: str, ctx: JobContext) -> EvalResult:
    """Evaluate the exact text the edit would write (when it differs from what was verified)."""
    ctx.report("verifying the merged edit ...", 97)
    return watched(runner, ctx).evaluate(request.with_candidate(merged, trials=max(request.options.trials, 2)))


def compiled_change(runner, request: EvalRequest, merged: str, arch: str, ctx: JobContext) -> Optional[dict]:
    """What the compiler made of the original and of the offered result (``merged``), for
    ``arch``, side by side (``agent.asm.compiled_difference``): both compiled with the launches
    they make on the input cases. None when neither launched a Triton kernel; a failure to
    compile is the figures' ``error``, never the job's."""
    from agent.asm import compiled_difference
    ctx.report(f"comparing the compiled code for {arch} ...", 98)
    both = [request.with_candidate(src, trials=1, timing=False, aot_arch=arch, aot_stage="default")
            for src in (None, merged)]
    original, result = watched(runner, ctx).evaluate_many(both)
    return compiled_difference([r for r in original.resources if r.variant is None],
                               [r for r in result.resources if r.variant is None])
