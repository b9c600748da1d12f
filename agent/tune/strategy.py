"""The tuner as a strategy of ``agent.optimize``: after the original's own check, tune the
launch (``tuner.tune``) on the arch, and read its report as an ``Outcome``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from runner.schema import EvalRequest, EvalResult

from agent.deadline import Deadline
from agent.outcome import Outcome, Tried
from agent.progress import Progress
from agent.watch import Watched
from agent.tune.knobs import config_text
from agent.tune.tuner import TuneReport, tune


@dataclass
class TuneSettings:
    max_configs: int = 48
    """Configs to evaluate at most."""
    trials: int = 2
    """Fresh seeded inputs per case and config."""
    emit: str = "constants"
    """constants (the best config written into the launch) | autotune (an @triton.autotune)."""
    key: Optional[list[str]] = None
    """With ``emit="autotune"``: the kernel arguments the choice is keyed on."""
    untimed_edit: bool = False
    """Where nothing could be timed, also write the untimed ``@triton.autotune`` edit."""
    budget_s: Optional[float] = None
    """The task's time budget in seconds, counted from the original's check: the search stops
    before a batch that would start after it, keeping its best verified config (``--task-budget``)."""


def tried_configs(report: TuneReport) -> list[Tried]:
    """The configs that ran, then the ones the compile report pruned unrun."""
    out = [Tried(label=config_text(t.config), verdict="verified" if t.correct else t.status, correct=t.correct,
                 speedup=t.speedup, message=t.pruned or t.message, case_speedups=dict(t.case_speedups),
                 chosen=report.source is not None and report.best == t.config)
           for t in report.trials]
    out += [Tried(label=config_text(t.config), verdict="pruned", message=t.pruned or t.message)
            for t in report.screened]
    return out


def plan_text(plan: dict) -> str:
    """What the search will run, before it runs it (``tune``'s ``on_plan``)."""
    n, batch, par = plan["configs"], plan["batch"], plan["parallel"]
    text = f"{'up to ' if plan['at_most'] else ''}{n} config(s) to check"
    if plan["space"] > n + plan["pruned"]:
        text += f" (of {plan['space']} in the space)"
    if plan["pruned"]:
        text += f", {plan['pruned']} more ruled out by the compile report"
    text += f"; {batch} at a time on {par} worker(s)" if batch and batch < n else f" on {par} worker(s)"
    return text + "; the first batch tells how long each takes"


def pace_text(done: int, total: int, elapsed: float, at_most: bool) -> str:
    """Where the search stands after a batch, and what is left at the pace measured so far."""
    text = f"{done} of {'up to ' if at_most else ''}{total} config(s) checked in {_duration(elapsed)}"
    if 0 < done < total:
        text += f"; about {_duration(elapsed / done * (total - done))} more at this pace"
    return text


def _duration(s: float) -> str:
    s = max(0, round(s))
    return f"{s} s" if s < 90 else f"{s // 60} min {s % 60:02d} s"


def run(runner: Watched, request: EvalRequest, baseline: EvalResult, arch: str, s: TuneSettings,
        say: Callable[[Progress], None], deadline: Optional[Deadline] = None) -> Outcome:
    d = baseline.device
    gpu = bool(d and d.is_gpu and baseline.timing)
    plan = {"configs": s.max_configs, "at_most": True, "t0": time.monotonic()}

    def on_plan(p: dict) -> None:
        plan.update(p, t0=time.monotonic(), before=runner.evaluated)
        say(runner.progress("plan", plan_text(p), done=0, total=p["configs"]))

    def on_batch(results) -> None:
        done = runner.evaluated - plan.get("before", 0)
        if done > plan["configs"]:  # the confirmation, or the untimed edit's check: not the search's
            return
        say(runner.progress(
            "batch", f"tuning batch {runner.batches}: {pace_text(done, plan['configs'], time.monotonic() - plan['t0'], plan['at_most'])}, "
                     f"{runner.verified} verified so far", done=done, total=plan["configs"]))

    runner.on_batch = on_batch
    say(runner.progress("search", f"tuning {request.target} for {arch} on {d.name if d else 'the runner'} ...",
                        device=d, arch=arch, total=s.max_configs))
    report = tune(runner, request, arch, max_configs=s.max_configs, trials_per_case=s.trials, timed=gpu,
                  emit=s.emit, key=s.key, deadline=deadline, original=baseline, on_plan=on_plan)
    out = Outcome(strategy="tune", baseline=baseline, report=report, timed=report.timed or gpu,
                  message=report.message, notes=list(report.notes), tried=tried_configs(report),
                  stopped=report.stopped)
    if report.improved and report.confirmation is not None:
        out.source, out.result, out.speedup = report.source, report.confirmation, report.best_speedup
    if s.untimed_edit and not report.improved and not report.timed and report.trials:
        from agent.tune.untimed import untimed_edit
        say(runner.progress("untimed", "checking the untimed edit"))
        out.untimed_edit, out.untimed_note = untimed_edit(runner, request, report, s.key)
    return out
