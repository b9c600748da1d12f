"""The GEAK loop: generate -> evaluate -> reflect -> optimize, for N iterations of K lanes.

    for each iteration:
        for each lane, concurrently:           # K parallel candidates
            prompt = lane.next_prompt()         # generator / reflector / optimizer / debugging trap
            answer = model(system, prompt)      # providers.call: tokens counted, budget checked
            candidate = extract(answer)
        results = runner.evaluate_many(candidates)   # cascade: runs -> correct -> timed
        for each lane: lane.observe(its step)   # what the next prompt reflects on
        stop on: target speedup reached, token budget spent, the provider refusing (bad key,
                 unknown model) or failing every call twice running

Every step is written to the run directory as it happens (prompt, answer, candidate,
EvalResult), and the loop picks up from the steps it finds there (``--resume``).
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass
from typing import Callable, Optional

from runner.schema import EvalOptions, EvalRequest

from .evaluator import NO_CODE, PROVIDER_ERROR, candidate_request, outcome, speedup
from .extract import NoCode, extract
from .generator import Task
from .lane import Lane
from .optimizer import choose
from .providers import Provider, ProviderError, call
from .records import Step
from .rundir import RunDir
from .usage import BudgetExceeded, Usage


@dataclass
class LoopConfig:
    iterations: int = 5
    parallel: int = 1
    trap_after: int = 3
    """Failed attempts in a row on one line of attack before it is dropped (the debugging trap)."""
    target_speedup: Optional[float] = None
    max_failed_iterations: int = 2
    """Iterations in a row in which every model call failed before the run stops."""


@dataclass
class LoopResult:
    steps: list[Step]
    stopped: str
    """iterations | target | budget | provider | provider_errors"""
    iterations_run: int
    fatal: Optional[str] = None


def run_loop(task: Task, provider: Provider, runner, base: EvalRequest, options: EvalOptions,
             cfg: LoopConfig, run: RunDir, usage: Usage,
             on_step: Callable[[Step], None] = lambda s: None,
             on_iteration: Callable[[int, list[Step]], None] = lambda i, s: None) -> LoopResult:
    steps = run.steps()  # a resumed run goes on from what is on disk
    lanes = [Lane(i, cfg.trap_after) for i in range(cfg.parallel)]
    for s in sorted(steps, key=lambda s: (s.iteration, s.lane)):
        if s.lane < len(lanes):
            lanes[s.lane].observe(s)
    system = task.system()
    failed_iterations = 0

    def attempt(lane: Lane, it: int, known: list[Step]) -> Optional[Step]:
        old = next((s for s in known if s.iteration == it and s.lane == lane.index), None)
        if old is not None and old.source is not None and old.outcome is None:
            return old  # answered before an interruption: only the evaluation is left
        kind, prompt = lane.next_prompt(task, known)
        step = Step(id=f"i{it:02d}-c{lane.index}", iteration=it, lane=lane.index, kind=kind, prompt=prompt)
        t0 = time.monotonic()
        try:
            done = call(provider, usage, system, prompt)
        except BudgetExceeded:
            return None
        except ProviderError as e:
            step.error, step.error_kind, step.outcome = e.message, e.kind, PROVIDER_ERROR
        else:
            step.response, step.input_tokens, step.output_tokens = done.text, done.input_tokens, done.output_tokens
            try:
                code = extract(done.text, task.symbol)
                step.source, step.notes, step.extraction = code.source, code.notes, code.how
            except NoCode as e:
                step.extraction, step.outcome = str(e), NO_CODE
        step.seconds = time.monotonic() - t0
        run.save(step)
        return step

    stopped, ran = "iterations", 0
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=cfg.parallel)
    try:
        for it in range(cfg.iterations):
            best = choose(steps)
            if cfg.target_speedup and best and speedup(best.result) >= cfg.target_speedup:
                stopped = "target"
                break
            finished = {s.lane for s in steps if s.iteration == it and s.finished}
            todo = [lane for lane in lanes if lane.index not in finished]
            if not todo:
                ran = it + 1
                continue
            if usage.spent:
                stopped = "budget"
                break
            # 1. Generate: one prompt and one model call per lane, concurrently.
            known = list(steps)
            new = list(pool.map(lambda lane: attempt(lane, it, known), todo))
            out_of_budget = any(s is None for s in new)
            new = [s for s in new if s is not None]
            # 2. Evaluate every candidate of this iteration in one batch (the runner's cascade).
            pending = [s for s in new if s.source is not None and s.outcome is None]
            if pending:
                reqs = [candidate_request(base, s.source, options, s.id) for s in pending]
                for s, r in zip(pending, runner.evaluate_many(reqs)):
                    s.result, s.outcome = r, outcome(r)
                    run.save(s)
            # 3. Reflect: each lane's next prompt is built from what its candidate got.
            redone = {n.lane for n in new}
            steps = [s for s in steps if not (s.iteration == it and s.lane in redone)] + new
            for s in new:
                lanes[s.lane].observe(s)
                on_step(s)
            ran = it + 1
            on_iteration(it, steps)
            fatal = next((s for s in new if s.error_kind in ProviderError.FATAL), None)
            if fatal is not None:
                return LoopResult(steps, "provider", ran, fatal.error)
            if new and all(s.outcome == PROVIDER_ERROR for s in new):
                failed_iterations += 1
                if failed_iterations >= cfg.max_failed_iterations:
                    return LoopResult(steps, "provider_errors", ran)
            else:
                failed_iterations = 0
            best = choose(steps)
            if cfg.target_speedup and best and speedup(best.result) >= cfg.target_speedup:
                stopped = "target" if ran < cfg.iterations else stopped
                break
            if out_of_budget or (usage.spent and ran < cfg.iterations):
                stopped = "budget"
                break
    finally:
        pool.shutdown(wait=True)
    return LoopResult(steps, stopped, ran)
