"""Optimize a target: the one entry for the CLI, the benchmark harness and the language server.

    outcome = optimize(request, "tune" | "llm", runner, OptimizeSettings(...), on_progress)

1. The original is checked against itself first: every candidate is compared with it, so it
   must pass its own inputs. If it does not, the outcome says so and nothing else runs.
2. The strategy searches: ``tune`` (agent/tune: the launch settings of its Triton kernel),
   ``llm`` (agent/llm: the GEAK loop) or ``compile`` (agent/compile: PyTorch's compiler writes
   Triton for a PyTorch function, made a standalone file), every candidate through the same runner.
3. The outcome offers a result only when it is verified faster than the original
   (``EvalResult.verified_speedup``), or, for the GEAK loop with ``apply_untimed``, verified
   correct where nothing can be timed, and labelled so.

``on_progress`` gets a ``Progress`` at each stage and after each evaluated batch. Raises
``ValueError`` for settings that cannot work (an unknown strategy or arch, a ``--key`` that is
not an argument of the kernel) and ``ProviderError`` when the GEAK loop's provider cannot be
set up (no key); nothing is evaluated then, except for ``--key``, which is checked against the
kernel after the original's check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from runner.schema import EvalRequest

from agent.llm.session import LLMSettings
from agent.outcome import Outcome
from agent.deadline import Deadline, earliest
from agent.progress import Progress
from agent.watch import Watched
from agent.tune.strategy import TuneSettings

STRATEGIES = ("tune", "llm", "compile")


@dataclass
class OptimizeSettings:
    arch: Optional[str] = None
    """The target GPU (sm_80, sm_90, gfx90a, gfx942): compile reports and limits, the GEAK loop's
    knowledge pack. None: the runner's GPU, else sm_90."""
    root: Optional[Path] = None
    """The project: the GEAK loop's corpus (its examples/ and benchmarks/) and .geak/runs."""
    apply_untimed: bool = False
    """The GEAK loop: where nothing can be timed, offer the first verified candidate, labelled so."""
    tune: TuneSettings = field(default_factory=TuneSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    run_dir: Optional[Path] = None
    """The GEAK loop: where its run directory is made (default ROOT/.geak/runs)."""
    resume: Optional[Path] = None
    """The GEAK loop: the run directory to go on with."""
    deadline: Optional[Deadline] = None
    """When the whole run's time is spent (``geak bench --time-budget``): the strategy stops
    before its next batch and keeps its best verified result. The tuner's own
    ``TuneSettings.budget_s`` is counted from the start of this call; the earlier one holds."""


def optimize(request: EvalRequest, strategy: str, runner, settings: Optional[OptimizeSettings] = None,
             on_progress: Optional[Callable[[Progress], None]] = None) -> Outcome:
    """Search for a faster verified version of ``request.target`` (a built request for the
    target alone) with ``strategy`` on ``runner``."""
    from runner.aot import ARCHS, DEFAULT_ARCH
    s = settings or OptimizeSettings()
    say = on_progress or (lambda p: None)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy '{strategy}': use one of {', '.join(STRATEGIES)}")
    if s.arch and s.arch not in ARCHS:
        raise ValueError(f"unknown arch '{s.arch}': use one of {', '.join(sorted(ARCHS))}")
    provider = _provider(s) if strategy == "llm" else None
    deadline = earliest(s.deadline, Deadline.after(s.tune.budget_s, "task budget")
                        if strategy == "tune" and s.tune.budget_s else None)
    watched = Watched(runner)
    say(Progress("original", f"checking the original {request.target} ..."))
    if deadline is not None and deadline.passed:
        return Outcome(strategy=strategy, stopped=deadline.why,
                       message=f"the {deadline.why} was spent before the original could be checked")
    check = watched.within(deadline)
    baseline = check.evaluate(request)
    if not baseline.correct:
        if check.cut:  # the budget ended the check, not the code
            return Outcome(strategy=strategy, stopped=deadline.why,
                           message=f"the {deadline.why} was spent while the original was checked; nothing was tried")
        return Outcome(strategy=strategy, baseline=baseline,
                       message=f"the original does not pass its own check: {baseline.message}")
    if strategy == "compile":
        from agent.compile import strategy as compiling
        d = baseline.device
        arch = s.arch or (d.arch if d and d.arch in ARCHS else DEFAULT_ARCH)
        return compiling.run(watched, request, baseline, arch, s, say, deadline)
    if strategy == "tune":
        from agent.tune import strategy as tuning
        d = baseline.device
        arch = s.arch or (d.arch if d and d.arch in ARCHS else DEFAULT_ARCH)
        return tuning.run(watched, request, baseline, arch, s.tune, say, deadline)
    return _geak_loop(watched, request, baseline, provider, s, say, deadline)


def _provider(s: OptimizeSettings):
    from agent.llm.session import open_provider
    return open_provider(s.llm)


def _geak_loop(runner: Watched, request: EvalRequest, baseline, provider, s: OptimizeSettings,
               say: Callable[[Progress], None], deadline: Optional[Deadline] = None) -> Outcome:
    from agent.llm.rundir import RunDir
    from agent.llm.session import Session
    original: list = []
    d = baseline.device
    if s.arch or (d is not None and d.is_gpu):  # a GPU to write for: the reflector's compiled feedback
        request, original = _compiled_for_reflection(runner, request, baseline, s.arch, say)
    session = Session(base=request, baseline=baseline, settings=s.llm, provider=provider,
                      root=Path(s.root or Path.cwd()), arch=s.arch, run_dir=s.run_dir,
                      run=RunDir(s.resume) if s.resume else None, original=original)
    task, cfg = session.open()
    cfg.deadline = deadline
    say(runner.progress("search", session.describe(s.resume is not None, task, cfg), device=baseline.device,
                        arch=s.arch, total=cfg.iterations))

    def on_step(st) -> None:
        say(runner.progress("step", st.id, step=st, done=st.iteration, total=cfg.iterations))

    def on_iteration(it: int, steps) -> None:
        from agent.llm.ranking import choose, verified
        best = choose(steps)
        p = Progress("iteration", "", evaluated=len(steps), verified=len(verified(steps)),
                     best_speedup=best.result.speedup if best else None, done=it + 1, total=cfg.iterations,
                     tokens=session.usage.total)
        p.message = f"iteration {it + 1}/{cfg.iterations}: {p.verified} of {p.evaluated} verified, {p.best_text}"
        say(p)

    report = session.loop(runner.within(deadline), task, cfg, on_step,
                          on_iteration)
    return session.outcome(report, s.apply_untimed)


def _compiled_for_reflection(runner, request: EvalRequest, baseline, arch: Optional[str],
                             say: Callable[[Progress], None]) -> tuple[EvalRequest, list]:
    """The GEAK loop's request with each candidate compiled ahead of time for the target GPU
    (``arch``, else the runner's) with its listing, and the original compiled the same way
    once: the reflector shows a slow or spilling candidate what the compiler made of it against
    the original. Only where there is a GPU to write for (the runner's, or ``--arch``): on the
    CPU interpreter with no arch named nothing is timed and the GPU would be a guess, so the
    loop does not pay a compile per candidate. Where the original's compile gives nothing (a
    runner without ahead-of-time compiles), the loop goes on without it."""
    from runner.aot import ARCHS, DEFAULT_ARCH
    d = baseline.device
    arch = arch or (d.arch if d and d.arch in ARCHS else DEFAULT_ARCH)
    compiled = request.with_candidate(None, aot_arch=arch, aot_stage="default")
    say(Progress("original", f"compiling the original's kernels for {arch} ..."))
    r = runner.evaluate(compiled.with_candidate(None, trials=1, timing=False))
    original = [k for k in r.resources if k.variant is None and k.listing]
    return (compiled, original) if original else (request, [])
