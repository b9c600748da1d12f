"""Jobs: benchmark or optimize runs, off the event loop, several at once up to a limit.

A job is submitted from the event loop and runs in a thread of this module's executor
(``geak.maxJobs`` threads; more jobs wait their turn, and say so in their progress). The thread
never touches the protocol: it calls the ``on_progress`` / ``on_done`` callbacks, which the
server marshals back onto the loop. Cancelling a job sets its context's flag; the job ends at
once for the editor, and its thread stops before its next evaluation.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from geak_lsp.strategies import Cancelled, JobContext

_ids = itertools.count(1)


@dataclass
class Job:
    kind: str
    """optimize | benchmark"""
    uri: str
    name: str
    """The target the user picked (kernel, wrapper, function or module)."""
    symbol: str
    """The symbol evaluated (a kernel's wrapper)."""
    version: Optional[int]
    text: str
    """The document's text when the job started: what is evaluated."""
    source_hash: str
    id: str = field(default_factory=lambda: f"job-{next(_ids)}")
    token: Optional[str] = None
    state: str = "queued"
    """queued | running | done | cancelled | failed"""
    started: float = field(default_factory=time.time)
    ctx: JobContext = field(default_factory=JobContext)
    future: Optional[concurrent.futures.Future] = None
    title: str = ""
    settings: Any = None
    """The ``Settings`` in force when the job was started (later changes do not affect it)."""
    root: Optional[Path] = None
    """The project the job runs in, and the document's path in it."""
    rel: str = ""
    merge: Any = None
    """The ``edits.Merge`` of the result into the job's text, once it is ready to offer."""
    edit_failures: list = field(default_factory=list)
    """Why the result could not be offered as an edit (``strategies.Failure``)."""
    compiled: Optional[dict] = None
    """The compiled difference between the original and the offered result (``strategies.compiled_change``)."""

    def __post_init__(self):
        if not self.title:
            self.title = f"GEAK: {'optimizing' if self.kind == 'optimize' else 'benchmarking'} {self.name}"


def target_to_run(kind: str, name: str, found, filename: str, running: Callable[[str], list]):
    """The document's target a job on ``name`` runs (a kernel: through its wrapper), or why
    none can (``running(symbol)``: the jobs already on a symbol)."""
    from geak_lsp.errors import UserFacing
    if found.syntax_error:
        raise UserFacing(f"GEAK: {filename} does not parse ({found.syntax_error}); nothing was run")
    target = found.by_name(name)
    if target is None:
        raise UserFacing(f"GEAK: no kernel, wrapper, PyTorch function or module named '{name}' in this file")
    if target.kind == "kernel" and not target.wrappers:
        raise UserFacing(f"GEAK: no function in this file launches {name}[grid](...); "
                         "write a wrapper that does, then run GEAK on it")
    if running(target.evaluated):
        raise UserFacing(f"GEAK: a job is already running on {target.evaluated}")
    return target


class JobManager:
    def __init__(self, max_jobs: int = 2,
                 on_progress: Callable[[Job, str, Optional[int]], None] = lambda j, m, p: None,
                 on_done: Callable[[Job, Any, Optional[BaseException]], None] = lambda j, r, e: None,
                 on_start: Callable[[Job], None] = lambda j: None):
        self.max_jobs = max_jobs
        self.on_progress, self.on_done, self.on_start = on_progress, on_done, on_start
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_jobs, thread_name_prefix="geak-job")
        self.jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def resize(self, max_jobs: int) -> None:
        """A new limit applies to jobs submitted from now on."""
        if max_jobs != self.max_jobs:
            old = self._executor
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_jobs, thread_name_prefix="geak-job")
            self.max_jobs = max_jobs
            old.shutdown(wait=False)

    def active(self) -> list[Job]:
        with self._lock:
            return [j for j in self.jobs.values() if j.state in ("queued", "running")]

    def find(self, uri: str, name: Optional[str] = None) -> list[Job]:
        return [j for j in self.active() if j.uri == uri and (name is None or name in (j.name, j.symbol))]

    def submit(self, job: Job, work: Callable[[Job], Any]) -> Job:
        job.ctx = JobContext(lambda msg, pct: self.on_progress(job, msg, pct))
        with self._lock:
            ahead = sum(1 for j in self.jobs.values() if j.state in ("queued", "running"))
            self.jobs[job.id] = job
        if ahead >= self.max_jobs:
            self.on_progress(job, f"queued: {ahead} GEAK job(s) ahead (geak.maxJobs = {self.max_jobs})", 0)

        def run():
            if job.ctx.cancelled:
                return
            job.state = "running"
            self.on_start(job)
            try:
                result = work(job)
            except Cancelled:
                return
            except Exception as e:  # noqa: BLE001 - reported to the user, never raised into the loop
                if job.ctx.cancelled:
                    return
                job.state = "failed"
                e.__geak_traceback__ = traceback.format_exc()  # type: ignore[attr-defined]
                self.on_done(job, None, e)
                return
            if job.ctx.cancelled:
                return
            job.state = "done"
            self.on_done(job, result, None)

        job.future = self._executor.submit(run)
        return job

    def cancel(self, job_id: str) -> Optional[Job]:
        with self._lock:
            job = self.jobs.get(job_id)
        if job is None or job.state not in ("queued", "running"):
            return None
        job.ctx.cancel()
        job.state = "cancelled"
        if job.future is not None:
            job.future.cancel()  # a queued job never starts
        return job

    def forget_finished(self, keep: int = 50) -> None:
        with self._lock:
            done = [j for j in self.jobs.values() if j.state not in ("queued", "running")]
            for j in sorted(done, key=lambda j: j.started)[:-keep] if len(done) > keep else []:
                self.jobs.pop(j.id, None)

    def shutdown(self) -> None:
        for j in self.active():
            j.ctx.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
