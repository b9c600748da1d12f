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

from runner.schema import EvalRequest

from agent.deadline import Deadline
from agent.llm.evaluator import NO_CODE, PROVIDER_ERROR, candidate_request, outcome, speedup
from agent.llm.extract import NoCode, extract
from agent.llm.generator import Task
from agent.llm.lane import Lane
from agent.llm.ranking import choose
from agent.llm.providers import Provider, ProviderError, call
from agent.llm.records import Step
from agent.llm.reflector import compiled_feedback
from agent.llm.rundir import RunDir
from agent.llm.usage import BudgetExceeded, Usage


@dataclass
class LoopConfig:
    iterations: int = 5
    parallel: int = 1
    trap_after: int = 3
    """Failed attempts in a row on one line of attack before it is dropped (the debugging trap)."""
    target_speedup: Optional[float] = None
    max_failed_iterations: int = 2
    """Iterations in a row in which every model call failed before the run stops."""
    deadline: Optional[Deadline] = None
    """When the run's time is spent (``geak bench --time-budget``): no iteration starts after it."""


@dataclass
class LoopResult:
    steps: list[Step]
    stopped: str
    """iterations | target | budget | provider | unreachable | provider_errors | time budget"""
    iterations_run: int
    fatal: Optional[str] = None


def run_loop(task: Task, provider: Provider, runner, base: EvalRequest, cfg: LoopConfig, run: RunDir,
             usage: Usage, on_step: Callable[[Step], None] = lambda s: None,
             on_iteration: Callable[[int, list[Step]], None] = lambda i, s: None,
             original: Optional[list] = None) -> LoopResult:
    """The loop above. Candidates are evaluated with ``base``'s options, against its target.
    ``original``: the original's compile reports with listings (``base`` asks the same of each
    candidate), for the reflector's compiled difference."""
    loop = _Loop(task, provider, runner, base, cfg, run, usage, original or [])
    with concurrent.futures.ThreadPoolExecutor(max_workers=cfg.parallel) as pool:
        for it in range(cfg.iterations):
            todo = loop.todo(it)
            if not todo:  # done before a resume
                loop.ran = it + 1
                continue
            if loop.stops_before():
                break
            new, out_of_budget = loop.generate(pool, todo, it)  # 1. one prompt and one call per lane
            loop.evaluate(new)  # 2. every candidate of this iteration in one batch (the runner's cascade)
            loop.reflect(it, new, on_step)  # 3. each lane's next prompt is built from what it got
            on_iteration(it, loop.steps)
            if loop.stops_after(new, out_of_budget):
                break
    return LoopResult(loop.steps, loop.stopped, loop.ran, loop.fatal)


class _Loop:
    """The loop's state: the steps so far (a resumed run's from disk), the lanes, why it stopped."""

    def __init__(self, task: Task, provider: Provider, runner, base: EvalRequest, cfg: LoopConfig,
                 run: RunDir, usage: Usage, original: list):
        self.task, self.provider, self.runner, self.base = task, provider, runner, base
        self.original = original
        self.cfg, self.run, self.usage = cfg, run, usage
        self.steps = run.steps()  # a resumed run goes on from what is on disk
        self.lanes = [Lane(i, cfg.trap_after) for i in range(cfg.parallel)]
        for s in sorted(self.steps, key=lambda s: (s.iteration, s.lane)):
            if s.lane < len(self.lanes):
                self.lanes[s.lane].observe(s)
        self.system = task.system()
        self.stopped, self.ran, self.failed_in_a_row, self.fatal = "iterations", 0, 0, None

    def todo(self, it: int) -> list[Lane]:
        return [lane for lane in self.lanes
                if not any(s.iteration == it and s.lane == lane.index and s.finished for s in self.steps)]

    def target_reached(self) -> bool:
        best = choose(self.steps)
        return bool(self.cfg.target_speedup and best and speedup(best.result) >= self.cfg.target_speedup)

    def stops_before(self) -> bool:
        if self.target_reached():
            self.stopped = "target"
        elif self.usage.spent:
            self.stopped = "budget"
        elif self.cfg.deadline is not None and self.cfg.deadline.passed:
            self.stopped = self.cfg.deadline.why
        return self.stopped != "iterations"

    def generate(self, pool, todo: list[Lane], it: int) -> tuple[list[Step], bool]:
        """The lanes' attempts of iteration ``it``, asked concurrently; whether the budget ran out."""
        known = list(self.steps)
        new = list(pool.map(lambda lane: self.attempt(lane, it, known), todo))
        return [s for s in new if s is not None], None in new

    def attempt(self, lane: Lane, it: int, known: list[Step]) -> Optional[Step]:
        old = next((s for s in known if s.iteration == it and s.lane == lane.index), None)
        if old is not None and old.source is not None and old.outcome is None:
            return old  # answered before an interruption: only the evaluation is left
        kind, prompt = lane.next_prompt(self.task, known)
        step = Step(id=f"i{it:02d}-c{lane.index}", iteration=it, lane=lane.index, kind=kind, prompt=prompt)
        t0 = time.monotonic()
        try:
            done = call(self.provider, self.usage, self.system, prompt)
        except BudgetExceeded:
            return None
        except ProviderError as e:
            step.error, step.error_kind, step.outcome = e.message, e.kind, PROVIDER_ERROR
        else:
            step.response, step.input_tokens, step.output_tokens = done.text, done.input_tokens, done.output_tokens
            step.truncated = done.finish_reason in ("length", "max_tokens")
            cut = " (the answer was cut off at the max-tokens limit: write less prose)" if step.truncated else ""
            try:
                code = extract(done.text, self.task.symbol)
                step.source, step.notes, step.extraction = code.source, code.notes, code.how + cut
            except NoCode as e:
                step.extraction, step.outcome = str(e) + cut, NO_CODE
        step.seconds = time.monotonic() - t0
        self.run.save(step)
        return step

    def evaluate(self, new: list[Step]) -> None:
        pending = [s for s in new if s.source is not None and s.outcome is None]
        reqs = [candidate_request(self.base, s.source, s.id) for s in pending]
        for s, r in zip(pending, self.runner.evaluate_many(reqs) if reqs else []):
            s.result, s.outcome = r, outcome(r)
            s.compiled = compiled_feedback(self.original, r)
            for k in r.resources:  # read: the run directory keeps the figures, not the listings
                k.listing = None
            self.run.save(s)

    def reflect(self, it: int, new: list[Step], on_step: Callable[[Step], None]) -> None:
        lanes = {n.lane for n in new}
        self.steps = [s for s in self.steps if not (s.iteration == it and s.lane in lanes)] + new
        for s in new:
            self.lanes[s.lane].observe(s)
            on_step(s)
        self.ran = it + 1

    def stops_after(self, new: list[Step], out_of_budget: bool) -> bool:
        """Stop on: a refusal (bad key, unknown model), a provider that no call of the run has
        reached (the SDK retried each), every call failing twice running, the target reached,
        the budget spent."""
        self.fatal = next((s.error for s in new if s.error_kind in ProviderError.FATAL), None)
        all_failed = bool(new) and all(s.outcome == PROVIDER_ERROR for s in new)
        self.failed_in_a_row = self.failed_in_a_row + 1 if all_failed else 0
        never_reached = all_failed and all(s.error_kind == "connection" for s in new) and \
            all(s.outcome == PROVIDER_ERROR and s.error_kind == "connection" for s in self.steps)
        more = self.ran < self.cfg.iterations
        if self.fatal is not None:
            self.stopped = "provider"
        elif never_reached:
            self.fatal, self.stopped = new[0].error, "unreachable"
        elif self.failed_in_a_row >= self.cfg.max_failed_iterations:
            self.stopped = "provider_errors"
        elif self.target_reached() and more:
            self.stopped = "target"
        elif out_of_budget or (self.usage.spent and more):
            self.stopped = "budget"
        return self.stopped != "iterations"
