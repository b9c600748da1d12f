"""A job's work, on its own thread: the runner's request for the document's text, the strategy
(benchmark, or optimize through ``agent.optimize``), the result merged into the text the job
started from (verified again as it will be written when that differs), and what changed in
compiled terms. Returns the ``Outcome``; the job keeps the merge, the edit's failures and the
compiled difference."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Optional

from . import strategies
from geak_lsp.edits import MergeError, merge
from geak_lsp.jobs import Job
from geak_lsp.projects import Projects
from geak_lsp.strategies import Failure, confirm

if TYPE_CHECKING:
    from agent.outcome import Outcome


def run(job: Job, projects: Projects, open_documents: Callable[[], Iterable[tuple[str, str]]],
        warn: Callable[[str], None]) -> "Outcome":
    s = job.settings
    job.root, job.rel = projects.project(job.uri)
    opts = projects.options(job.root, s)
    opts.trials = s.trials
    req = projects.request(job.uri, job.symbol, job.text, opts, open_documents())
    runner = projects.runner_for(s)
    job.ctx.check()
    if job.kind == "benchmark":
        out = strategies.benchmark(runner, req, s, job.ctx)
    else:
        out = strategies.optimize_target(runner, req, s, job.ctx, job.root)
    if out.source:
        prepare_edit(job, out, runner, req)
    if job.merge is not None and out.source and strategies.writes_for_a_gpu(runner, s):
        job.compiled = compiled_change(job, runner, req, warn)
    return out


def prepare_edit(job: Job, out: "Outcome", runner, req) -> None:
    """Merge the result into the text the job started from; if that text is not exactly
    what was verified, verify it as it will be written (and, when it was timed, it must
    still be verified faster)."""
    try:
        m = merge(job.text, out.source)
    except MergeError as e:
        job.edit_failures.append(Failure("the edit", str(e)))
        out.source = None
        return
    if m.text.rstrip("\n") != out.source.rstrip("\n"):
        r = confirm(runner, req, m.text, job.ctx)
        if not r.correct:
            job.edit_failures.append(Failure("the edit (the result merged into your file)", r.message))
            out.message += "; but the result merged into your file failed verification, so it is not offered"
            out.source = None
            return
        if out.speedup is not None:
            sp = r.verified_speedup()
            if sp is None:
                out.message += "; merged into your file it was not faster, so it is not offered"
                out.source = None
                return
            out.speedup = sp
    job.merge = m


def compiled_change(job: Job, runner, req, warn: Callable[[str], None]) -> Optional[dict]:
    """The results view's compiled difference for the offered result (best effort)."""
    try:
        return strategies.compiled_change(runner, req, job.merge.text, strategies.aot_arch(runner, job.settings),
                                          job.ctx)
    except strategies.Cancelled:
        raise
    except Exception as e:  # noqa: BLE001 - the result stands without its compiled figures
        warn(f"GEAK: {job.id}: the compiled difference was not made ({e})")
        return None
