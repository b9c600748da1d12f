"""One line of attack, and the debugging trap.

A lane decides its next prompt from what it last saw:

* nothing yet                      -> the generation prompt (or the optimizer's, when other
                                      lanes already have verified candidates);
* its last candidate was correct   -> reflection on the measurement + the optimizer prompt;
* it failed, fewer than N times    -> the reflector's prompt for that failure;
* it failed N times in a row       -> the debugging trap: drop this line of attack, restart
                                      from the best verified candidate (or the original).

``next_prompt`` is a pure function of the observed steps, so a resumed run rebuilds every lane
by observing the steps on disk again.
"""

from __future__ import annotations

from typing import Optional

from . import generator, prompts, reflector
from agent.llm.evaluator import CORRECT, PROVIDER_ERROR
from agent.llm.ranking import best_known, history_text, rank, verified
from agent.llm.records import Step


class Lane:
    def __init__(self, index: int, trap_after: int = 3):
        self.index, self.trap_after = index, trap_after
        self.last: Optional[Step] = None
        self.failures: list[str] = []  # outcomes since the last correct candidate or restart

    def observe(self, step: Step) -> None:
        if step.outcome == PROVIDER_ERROR or not step.finished:
            return  # the call failed: the same prompt is tried again
        if step.kind == "restart":
            self.failures = []
        self.last = step
        if step.outcome == CORRECT:
            self.failures = []
        else:
            self.failures.append(step.outcome)

    def next_prompt(self, task: generator.Task, steps: list[Step]) -> tuple[str, str]:
        last = self.last
        if last is None:
            if verified(steps):
                return "optimize", generator.improve(task, history_text(rank(steps)), "",
                                                     best_known(steps).source)
            return "generate", generator.first(task)
        if last.outcome == CORRECT:
            preamble = prompts.render("reflect_correct", measurement=reflector.measurement(last.result, last.compiled))
            return "optimize", generator.improve(task, history_text(rank(steps)), preamble, last.source)
        if len(self.failures) >= self.trap_after:
            best = best_known(steps)
            preamble = prompts.render("restart", attempts=str(len(self.failures)),
                                      failures=", ".join(f.replace("_", " ") for f in self.failures))
            return "restart", generator.improve(task, history_text(rank(steps)), preamble,
                                                best.source if best else task.source)
        return reflector.reflect(last, task.block(), task.symbol)
