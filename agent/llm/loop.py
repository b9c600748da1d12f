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
            step.truncated = done.finish_reason in ("length", "max_tokens")
            cut = " (the answer was cut off at the max-tokens limit: write less prose)" if step.truncated else ""
            try:
                code = extract(done.text, task.symbol)
                step.source, step.notes, step.extraction = code.source, code.notes, code.how + cut
            except NoCode as e:
                step.extraction, step.outcome = str(e) + cut, NO_CODE
        step.seconds = time.monotonic() - t0
        run.save(step)
        return step

    def evaluate(new: list[Step]) -> None:
        pending = [s for s in new if s.source is not None and s.outcome is None]
        reqs = [candidate_request(base, s.source, options, s.id) for s in pending]
        for s, r in zip(pending, runner.evaluate_many(reqs) if reqs else []):
            s.result, s.outcome = r, outcome(r)
            run.save(s)

    def target_reached() -> bool:
        best = choose(steps)
        return bool(cfg.target_speedup and best and speedup(best.result) >= cfg.target_speedup)

    stopped, ran, failed_in_a_row, fatal = "iterations", 0, 0, None
    with concurrent.futures.ThreadPoolExecutor(max_workers=cfg.parallel) as pool:
        for it in range(cfg.iterations):
            todo = [lane for lane in lanes
                    if not any(s.iteration == it and s.lane == lane.index and s.finished for s in steps)]
            if not todo:  # done before a resume
                ran = it + 1
                continue
            if target_reached():
                stopped = "target"
                break
            if usage.spent:
                stopped = "budget"
                break
            # 1. Generate: one prompt and one model call per lane, concurrently.
            known = list(steps)
            new = list(pool.map(lambda lane: attempt(lane, it, known), todo))
            out_of_budget = None in new
            new = [s for s in new if s is not None]
            # 2. Evaluate: every candidate of this iteration in one batch (the runner's cascade).
            evaluate(new)
            # 3. Reflect: each lane's next prompt is built from what its candidate got.
            steps = [s for s in steps if not (s.iteration == it and s.lane in {n.lane for n in new})] + new
            for s in new:
                lanes[s.lane].observe(s)
                on_step(s)
            ran = it + 1
            on_iteration(it, steps)
            # Stop on: a refusal (bad key, unknown model), every call failing twice running,
            # the target reached, the budget spent.
            fatal = next((s.error for s in new if s.error_kind in ProviderError.FATAL), None)
            failed_in_a_row = failed_in_a_row + 1 if new and all(s.outcome == PROVIDER_ERROR for s in new) else 0
            more = ran < cfg.iterations
            if fatal is not None:
                stopped = "provider"
            elif failed_in_a_row >= cfg.max_failed_iterations:
                stopped = "provider_errors"
            elif target_reached() and more:
                stopped = "target"
            elif out_of_budget or (usage.spent and more):
                stopped = "budget"
            if stopped != "iterations":
                break
    return LoopResult(steps, stopped, ran, fatal)
