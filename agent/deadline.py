"""A time budget for an optimization, kept cooperatively.

A ``Deadline`` is a point in ``time.monotonic()``: ``geak optimize --task-budget S`` and
``geak bench --task-budget S`` set one per task, ``geak bench --time-budget S`` one for the
whole run, and a task keeps the earlier of the two. The strategies check it between batches of
evaluations (the tuner before each batch of configs, the GEAK loop before each iteration) and
stop there, keeping their best verified result so far. Nothing is killed: an evaluation already
running when the deadline passes finishes, but every request sent through ``agent.watch.Watched`` has
its phase limits (import, run, timing) lowered to the time left when its batch starts, so it
ends, as a ``timeout`` at worst, no later than that after the batch began (``limits.total_s``
bounds the whole evaluation, its phases and waits together). The runners have no
way to cancel one evaluation in flight (the daemon's cancel drops queued jobs only), so this is
the bound. Its waits are bounded the same way (``limits.wait_s``: for a free worker slot and for
the GPU while other evaluations run or time on it), so tasks sharing one GPU do not overrun
their budgets waiting for each other.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

from runner.schema import EvalRequest

MIN_EVAL_S = 1.0
"""The shortest phase limit a batch is sent with: less than this left, and no batch starts."""


@dataclasses.dataclass(frozen=True)
class Deadline:
    at: float
    """``time.monotonic()`` when the time is spent."""
    why: str = "time budget"
    """What set it, in the report's words: "task budget" (--task-budget), "time budget"
    (geak bench --time-budget)."""

    @classmethod
    def after(cls, seconds: float, why: str = "time budget") -> "Deadline":
        if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"a {why} must be a positive number of seconds, not {seconds!r}")
        return cls(time.monotonic() + float(seconds), why)

    def left(self) -> float:
        return self.at - time.monotonic()

    @property
    def passed(self) -> bool:
        """Too little left to start a batch."""
        return self.left() < MIN_EVAL_S

    def sooner(self, seconds: float) -> "Deadline":
        """The same deadline brought ``seconds`` earlier (time kept back for a later step)."""
        return Deadline(self.at - seconds, self.why)

    def limit(self, request: EvalRequest) -> tuple[EvalRequest, bool]:
        """``request`` with each phase limit at most the time left (at least ``MIN_EVAL_S``);
        whether any was lowered."""
        left = max(MIN_EVAL_S, self.left())
        lim = request.options.limits
        if max(lim.import_s, lim.run_s, lim.timing_s, lim.wait_s, lim.total_s) <= left:
            return request, False
        new = dataclasses.replace(lim, import_s=min(lim.import_s, left), run_s=min(lim.run_s, left),
                                  timing_s=min(lim.timing_s, left), wait_s=min(lim.wait_s, left),
                                  total_s=min(lim.total_s, left))
        return dataclasses.replace(request, options=dataclasses.replace(request.options, limits=new)), True


def earliest(*deadlines: Optional[Deadline]) -> Optional[Deadline]:
    given = [d for d in deadlines if d is not None]
    return min(given, key=lambda d: d.at) if given else None
