"""What a job does, off the event loop: benchmark a target, or optimize it with the tuner or the
GEAK loop. Everything here runs in a job thread and talks to the editor only through the
``JobContext`` (progress, cancellation).

The runner is wrapped so that every batch reports progress (the evaluations done, how many were
verified, the best verified speedup so far) and a cancelled job stops before its next
evaluation starts; evaluations already running finish in the background and are discarded.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from runner.schema import EvalOptions, EvalRequest, EvalResult, Target

from .settings import Settings
from .store import CandidateRecord, CaseRecord, case_records


class Cancelled(Exception):
    pass


class JobContext:
    """The job's side of the editor: ``report`` progress, ask ``cancelled``."""

    def __init__(self, report: Callable[[str, Optional[int]], None] = lambda m, p: None):
        self._report = report
        self._cancel = threading.Event()
        self.best_speedup: Optional[float] = None
        self.evaluated = 0
        self.verified = 0
        self.batches = 0
        self.candidates = 0
        self._verified_candidates = 0

    def verified_candidates(self, results) -> int:
        self._verified_candidates += sum(1 for r in results if r.correct)
        return self._verified_candidates

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
            self._report(message, percentage)

    def best_text(self) -> str:
        if self.best_speedup is not None:
            return f"best verified {self.best_speedup:.2f}x"
        return "no verified speedup yet" + ("" if self.batches == 0 else " (nothing timed)" if self.verified else "")


class ObservedRunner:
    """A runner that reports each batch to the job and stops when the job is cancelled."""

    def __init__(self, runner, ctx: JobContext, label: Callable[[int], str] = lambda n: f"batch {n}",
                 expected: Optional[int] = None):
        self.runner, self.ctx, self.label = runner, ctx, label
        self.expected = expected
        """Candidates the job expects to evaluate in all (for the progress percentage)."""
        self.parallel = getattr(getattr(runner, "pool", None), "size", 1)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.evaluate_many([request])[0]

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        self.ctx.check()
        if hasattr(self.runner, "pool") and len(requests) > 1:
            # The local runner: one evaluation at a time per worker, so a cancel stops the rest.
            lock, done = threading.Lock(), [0]

            def one(r):
                self.ctx.check()
                res = self.runner.evaluate(r)
                if r.candidate is not None:
                    with lock:
                        done[0] += 1
                        n = done[0]
                    self.ctx.report(f"{self.label(self.ctx.batches + 1)}: {n} of {len(requests)} evaluated "
                                    f"({self.ctx.best_text()})", self._pct(self.ctx.candidates + n))
                return res
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.parallel)) as ex:
                futures = [ex.submit(one, r) for r in requests]
                try:
                    results = [f.result() for f in futures]
                except Cancelled:
                    for f in futures:
                        f.cancel()
                    raise
        else:
            results = self.runner.evaluate_many(requests)
        self.ctx.check()
        ctx = self.ctx
        ctx.batches += 1
        ctx.evaluated += len(results)
        for r in results:
            if r.correct:
                ctx.verified += 1
                if requests[0].candidate is not None and r.timing is not None and r.timing.speedup == r.timing.speedup:
                    if ctx.best_speedup is None or r.timing.speedup > ctx.best_speedup:
                        ctx.best_speedup = r.timing.speedup
        if requests[0].candidate is not None:
            ctx.candidates += len(results)
            ctx.report(f"{self.label(ctx.batches)}: {ctx.candidates} candidate(s) evaluated, "
                       f"{ctx.verified_candidates(results)} verified so far, {ctx.best_text()}",
                       self._pct(ctx.candidates))
        return results

    def _pct(self, n: int) -> Optional[int]:
        return min(95, 15 + int(80 * n / self.expected)) if self.expected else None

    def device_info(self):
        return self.runner.device_info()

    def close(self):
        pass  # the server owns the runner


@dataclass
class Failure:
    what: str
    reason: str


@dataclass
class Outcome:
    kind: str
    """benchmark | optimize"""
    strategy: str = ""
    baseline: Optional[EvalResult] = None
    source: Optional[str] = None
    """The result module offered (verified), or None."""
    result: Optional[EvalResult] = None
    """The offered module's own EvalResult."""
    speedup: Optional[float] = None
    """Verified and timed; None when not timed."""
    timed: bool = False
    untimed: bool = False
    """``source`` is verified correct but was not timed (offered only with geak.applyUntimed)."""
    message: str = ""
    failures: list[Failure] = field(default_factory=list)
    verified: int = 0
    total: int = 0
    notes: list[str] = field(default_factory=list)
    root: Optional[Path] = None
    """The project the job ran in, and the target file's path in it (set by the server)."""
    rel: str = ""
    merge: Any = None
    """The ``edits.Merge`` of ``source`` into the job's text, once it is ready to offer."""
    candidates: list[CandidateRecord] = field(default_factory=list)
    """Every config or candidate evaluated, for the results view."""


def _reason(r: EvalResult) -> str:
    msg = r.message
    if r.error and r.error.hint:
        msg += f" — {r.error.hint}"
    return msg


def config_text(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items()))


def candidate_label(iteration: int, lane: int) -> str:
    """A GEAK-loop candidate as people read it (its run directory calls it i00-c0)."""
    return f"iteration {iteration + 1}, candidate {lane + 1}"


_OUTCOME_VERDICT = {"no_code": "no code", "provider_error": "model error"}


def tune_candidates(report) -> list[CandidateRecord]:
    """The tuner's configs: the ones run, then the ones its compile report pruned unrun."""
    out = []
    for tr in report.trials:
        cases = [CaseRecord(label=label, shapes="", passed=True, speedup=sp)
                 for label, sp in sorted(tr.case_speedups.items())]
        out.append(CandidateRecord(
            label=config_text(tr.config), verdict="verified" if tr.correct else tr.status, correct=tr.correct,
            speedup=tr.speedup, message=tr.pruned or tr.message, cases=cases,
            chosen=report.source is not None and report.best == tr.config))
    for tr in report.screened:
        out.append(CandidateRecord(label=config_text(tr.config), verdict="pruned", message=tr.pruned or tr.message))
    return out


def llm_candidates(steps, chosen) -> list[CandidateRecord]:
    from agent.llm.evaluator import speedup
    out = []
    for st in steps:
        r = st.result
        if st.outcome == "correct":
            verdict = "verified"
        elif r is not None:
            verdict = r.status
        else:
            verdict = _OUTCOME_VERDICT.get(st.outcome or "", st.outcome or "unfinished")
        msg = st.error or (r.message if r is not None else st.extraction) or ""
        out.append(CandidateRecord(label=candidate_label(st.iteration, st.lane), verdict=verdict,
                                   correct=st.outcome == "correct", speedup=speedup(r), message=msg,
                                   chosen=chosen is not None and st is chosen,
                                   cases=case_records(r, "candidate")))
    return out


def device_text(d) -> str:
    if d is None:
        return "the runner"
    if d.backend == "interpreter":
        return "the Triton CPU interpreter"
    return f"{d.name} ({d.backend}{', ' + d.arch if d.arch else ''})"


def benchmark(runner, request: EvalRequest, settings: Settings, ctx: JobContext) -> Outcome:
    opts = request.options
    opts.aot_arch = (settings.arch or "sm_90") if _interpreted(runner, settings) else (settings.arch or "device")
    ctx.report(f"measuring {request.target.symbol} ...", 10)
    base = ObservedRunner(runner, ctx).evaluate(request)
    out = Outcome(kind="benchmark", baseline=base, total=1, verified=int(base.correct))
    if base.correct:
        passed = sum(1 for c in base.cases if c.passed)
        out.message = (f"correct on {passed} case(s) on {device_text(base.device)}; "
                       + (f"Σ {base.timing.ref_ms:.4f} ms" if base.timing else
                          f"not timed ({base.timing_unavailable or 'no timing'})"))
    else:
        out.message = f"fails its own inputs: {_reason(base)}"
    return out


def _interpreted(runner, settings: Settings) -> bool:
    if settings.device == "interpreter":
        return True
    pool = getattr(runner, "pool", None)
    return getattr(pool, "device", None) == "interpreter"


def check_original(runner, request: EvalRequest, ctx: JobContext, kind: str, strategy: str) -> tuple[Optional[EvalResult], Optional[Outcome]]:
    ctx.report(f"checking the original {request.target.symbol} on its own inputs ...", 5)
    base = runner.evaluate(request)
    if not base.correct:
        return base, Outcome(kind=kind, strategy=strategy, baseline=base,
                             message=f"the original fails its own inputs: {_reason(base)}; fix it first")
    return base, None


def tune(runner, request: EvalRequest, settings: Settings, ctx: JobContext) -> Outcome:
    from agent.tune.tuner import tune as run_tuner
    from runner.aot import ARCHS, DEFAULT_ARCH

    observed = ObservedRunner(runner, ctx)
    base, failed = check_original(observed, request, ctx, "optimize", "tune")
    if failed:
        return failed
    arch = settings.arch or (base.device.arch if base.device and base.device.arch in ARCHS else DEFAULT_ARCH)
    gpu = bool(base.device and base.device.backend != "interpreter" and base.timing)

    observed.label = lambda n: f"tuning batch {n - 1}"
    observed.expected = settings.max_configs
    if gpu:
        ctx.report(f"tuning launch settings on {device_text(base.device)} ...", 15)
    else:  # no GPU: configs are checked for correctness, and compiled ahead of time for geak.arch
        ctx.report(f"checking launch settings on {device_text(base.device)} "
                   f"(compile report for {arch}, geak.arch) ...", 15)
    report = run_tuner(observed, request, arch, max_configs=settings.max_configs,
                       trials_per_case=settings.trials, timed=gpu, emit=settings.emit)
    out = Outcome(kind="optimize", strategy="tune", baseline=base, timed=report.timed or gpu,
                  total=len(report.trials), verified=sum(1 for t in report.trials if t.correct),
                  notes=list(report.notes), candidates=tune_candidates(report))
    for t in report.trials:
        if not t.correct:
            cfg = ", ".join(f"{k}={v}" for k, v in sorted(t.config.items()))
            out.failures.append(Failure(cfg, f"{t.status}: {t.message}"))
    if report.improved and report.confirmation is not None and report.confirmation.timing:
        out.source, out.result = report.source, report.confirmation
        out.speedup = report.confirmation.timing.speedup
    out.message = report.message
    if not gpu and not report.improved:
        out.message = (f"{out.verified} of {out.total} launch configs verified correct on "
                       f"{device_text(base.device)}; no verified improvement (timing needs a GPU)")
        if settings.apply_untimed:
            out.message += ("; geak.applyUntimed offers untimed results of the GEAK loop only: the tuner "
                            "chooses a config by its timing")
    return out


def llm(runner, request: EvalRequest, settings: Settings, ctx: JobContext, root: Path) -> Outcome:
    """The GEAK loop (agent/llm) on the editor's text, with the same pieces as
    ``geak optimize --strategy llm``; its run directory is ``.geak/runs`` as on the CLI."""
    from agent.llm import knowledge
    from agent.llm.evaluator import speedup
    from agent.llm.generator import Task
    from agent.llm.loop import LoopConfig, run_loop
    from agent.llm.optimizer import choose, verified
    from agent.llm.providers import ProviderConfig, ProviderError, make_provider
    from agent.llm.retrieval import Corpus, corpus_files
    from agent.llm.rundir import RunDir
    from agent.llm.usage import Usage

    try:
        provider = make_provider(ProviderConfig(provider=settings.provider, model=settings.model,
                                                max_retries=1, timeout_s=300.0))
    except ProviderError as e:
        return Outcome(kind="optimize", strategy="llm", message=f"the {settings.provider} provider: {e.message}")
    observed = ObservedRunner(runner, ctx, lambda n: f"iteration {n - 1}/{settings.iterations}",
                              expected=settings.iterations * settings.parallel)
    base, failed = check_original(observed, request, ctx, "optimize", "llm")
    if failed:
        return failed
    run = RunDir.create(root / ".geak" / "runs", request.target.symbol)
    run.write_request(request)
    run.write_baseline(base)
    text, names = knowledge.pick(base.device, settings.arch)
    task = Task(path=request.target.path, symbol=request.target.symbol, source=request.files[request.target.path],
                device=device_text(base.device) + (f"; write for {settings.arch}" if settings.arch else ""),
                knowledge=text, knowledge_names=names, instruction="",
                corpus=Corpus(corpus_files([root / "examples", root / "benchmarks"])))
    run.write_system(task.system())
    cfg = LoopConfig(iterations=settings.iterations, parallel=settings.parallel)
    usage = Usage(budget=None)

    def on_iteration(it: int, steps) -> None:
        best = choose(steps)
        ok = verified(steps)
        ctx.report(f"iteration {it + 1}/{cfg.iterations}: {len(ok)} of {len(steps)} verified, "
                   + (f"best verified {speedup(best.result):.2f}x" if best else ctx.best_text()),
                   10 + int(85 * (it + 1) / cfg.iterations))

    ctx.report(f"GEAK loop with {settings.provider} {settings.model}: iteration 1/{cfg.iterations} ...", 10)
    result = run_loop(task, provider, observed, request, cfg, run, usage,
                      on_iteration=on_iteration)
    steps = sorted(result.steps, key=lambda s: (s.iteration, s.lane))
    ok = verified(steps)
    out = Outcome(kind="optimize", strategy="llm", baseline=base, total=len(steps), verified=len(ok),
                  notes=[f"run directory {run.path}"])
    label = {id(s): candidate_label(s.iteration, s.lane) for s in steps}
    out.timed = any(speedup(s.result) is not None for s in ok)
    for s in steps:
        if s.outcome != "correct":
            out.failures.append(Failure(label[id(s)], (s.error or (s.result.message if s.result else s.extraction)
                                                       or s.outcome or "unfinished")))
    best = choose(steps)
    chosen = None
    if best is not None:
        chosen = best
        out.source, out.result, out.speedup = best.source, best.result, speedup(best.result)
        out.message = f"{label[id(best)]} is verified and {out.speedup:.2f}x faster than the original"
    elif ok and not out.timed and settings.apply_untimed:
        chosen = first = ok[0]
        out.source, out.result, out.untimed = first.source, first.result, True
        out.message = (f"{label[id(first)]} is verified correct on {device_text(base.device)} but not timed "
                       "(timing needs a GPU); offered because geak.applyUntimed is on")
    elif ok and not out.timed:
        out.message = (f"{len(ok)} of {len(steps)} candidates verified correct, none timed: "
                       "no verified improvement (timing needs a GPU)")
    elif ok:
        out.message = f"{len(ok)} of {len(steps)} candidates correct, none faster than the original beyond the spread"
    else:
        out.message = f"none of the {len(steps)} candidates was correct"
    out.candidates = llm_candidates(steps, chosen)
    if result.stopped not in ("iterations", "target"):
        out.notes.append(f"the loop stopped early: {result.stopped}" + (f" ({result.fatal})" if result.fatal else ""))
    return out


def confirm(runner, request: EvalRequest, merged: str, ctx: JobContext, timed: bool) -> EvalResult:
    """Evaluate the exact text the edit would write (when it differs from what was verified)."""
    opts = EvalOptions(**{**request.options.__dict__})
    opts.trials = max(opts.trials, 2)
    req = EvalRequest(target=request.target, files=request.files,
                      candidate=Target(request.target.path, request.target.symbol),
                      candidate_files={request.target.path: merged}, options=opts)
    ctx.report("verifying the merged edit ...", 97)
    return ObservedRunner(runner, ctx).evaluate(req)
