"""The runner as a search uses it: kept to a deadline, stopped when cancelled, and counted.

``Watched(runner, deadline=..., cancel=...)`` is the one thing that stands between a search (the
tuner, the GEAK loop, the compile path) and its runner, for every front end:

* **deadline**: each request is sent with its phase limits lowered to the time the deadline
  leaves (``Deadline.limit``); a result that then timed out says that the budget, not the code,
  ended it, and is counted in ``cut``.
* **cancel**: an object with ``check()`` (raises when the job is cancelled) and
  ``report(text)``; checked before and after each batch and before each evaluation of a batch
  (sent one at a time, ``parallelism`` at once), so a cancelled job starts no new one. The editor passes its job's context; the CLI and the harness pass none.
* **counts**: candidates evaluated, verified, the best verified speedup, batches, and an
  ``on_batch`` hook after each batch. ``within(deadline)`` gives a view with another deadline
  that shares the counts and the cancel (the tuner keeps time back for its confirmation).

It offers the ``Runner`` protocol's methods and attributes itself (``device``,
``parallelism``, ``device_info``, ``close``), nothing else: closing it does not close the
runner, whose owner closes it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Callable, Optional, Protocol

from runner.schema import DeviceInfo, EvalRequest, EvalResult

from agent.deadline import Deadline
from agent.progress import Progress


class Cancel(Protocol):
    def check(self) -> None:
        """Raise when the job is cancelled."""

    def report(self, message: str) -> None:
        """Progress in words, for the one-by-one evaluation of a batch."""


class Counts:
    """What a search's candidates came to so far (shared by the views of one ``Watched``)."""

    def __init__(self):
        self.evaluated = self.verified = self.batches = 0
        self.best_speedup: Optional[float] = None
        self.on_batch: Callable[[list[EvalResult]], None] = lambda results: None
        self.lock = threading.Lock()

    def add(self, candidates: list[EvalResult]) -> None:
        with self.lock:
            self.batches += 1
            self.evaluated += len(candidates)
            self.verified += sum(1 for r in candidates if r.correct)
            for r in candidates:
                sp = r.verified_speedup()
                if sp is not None and (self.best_speedup is None or sp > self.best_speedup):
                    self.best_speedup = sp
        self.on_batch(candidates)


class Watched:
    def __init__(self, runner, *, deadline: Optional[Deadline] = None, cancel: Optional[Cancel] = None,
                 counts: Optional[Counts] = None):
        if isinstance(runner, Watched):  # a view of a view: the same runner, counts and cancel
            counts, cancel, runner = counts or runner.counts, cancel or runner.cancel, runner.runner
        self.runner, self.deadline, self.cancel = runner, deadline, cancel
        self.counts = counts or Counts()
        self.cut = 0
        """Evaluations (of this view) that timed out under a limit the deadline lowered."""

    def within(self, deadline: Optional[Deadline]) -> "Watched":
        """This runner, its counts and its cancel, with requests kept to ``deadline`` instead."""
        return Watched(self.runner, deadline=deadline, cancel=self.cancel, counts=self.counts)

    # ------------------------------------------------------------------ the Runner protocol

    @property
    def device(self) -> str:
        return self.runner.device

    @property
    def parallelism(self) -> int:
        return self.runner.parallelism

    def device_info(self) -> DeviceInfo:
        return self.runner.device_info()

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        return self.runner.warm(n)

    def close(self) -> None:
        pass  # the runner's owner closes it

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.evaluate_many([request])[0]

    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]:
        if self.cancel is not None:
            self.cancel.check()
        sent = [self.deadline.limit(r) if self.deadline is not None else (r, False) for r in requests]
        results = self._send([r for r, _ in sent])
        for (req, lowered), res in zip(sent, results):
            if lowered and res.status == "timeout":
                self.cut += 1
                res.message = (f"stopped by the {self.deadline.why}: this evaluation's limits were lowered to the "
                               f"{req.options.limits.run_s:.0f} s left; " + res.message)
        if self.cancel is not None:
            self.cancel.check()
        candidates = [r for q, r in zip(requests, results) if q.candidate is not None]
        if candidates:
            self.counts.add(candidates)
        return results

    def _send(self, requests: list[EvalRequest]) -> list[EvalResult]:
        """The batch to the runner; with a cancel, one evaluation at a time (``parallelism`` at
        once), each started only if the job goes on."""
        if self.cancel is None or len(requests) < 2:
            return self.runner.evaluate_many(requests)
        cancel, lock, done = self.cancel, threading.Lock(), [0]

        def one(r: EvalRequest) -> EvalResult:
            cancel.check()
            res = self.runner.evaluate(r)
            if r.candidate is not None:
                with lock:
                    done[0] += 1
                    n = done[0]
                cancel.report(f"{n} of {len(requests)} evaluated in this batch ({self.best_text})")
            return res
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.parallelism)) as ex:
            futures = [ex.submit(one, r) for r in requests]
            try:
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    # ------------------------------------------------------------------ the counts

    @property
    def evaluated(self) -> int:
        return self.counts.evaluated

    @property
    def verified(self) -> int:
        return self.counts.verified

    @property
    def batches(self) -> int:
        return self.counts.batches

    @property
    def best_speedup(self) -> Optional[float]:
        return self.counts.best_speedup

    @property
    def on_batch(self) -> Callable[[list[EvalResult]], None]:
        return self.counts.on_batch

    @on_batch.setter
    def on_batch(self, fn: Callable[[list[EvalResult]], None]) -> None:
        self.counts.on_batch = fn

    @property
    def best_text(self) -> str:
        return self.progress("", "").best_text

    def progress(self, stage: str, message: str, **kw) -> Progress:
        return Progress(stage, message, evaluated=self.evaluated, verified=self.verified,
                        best_speedup=self.best_speedup, **kw)
