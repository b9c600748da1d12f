"""The end of a job, as data: the findings on the target (diagnostics), the record of the run
(for hovers and the results view), and what becomes of a result that cannot be applied at once.
The server sends what these return."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from lsprotocol import types as t

from geak_lsp.diagnostics import Finding
from geak_lsp.errors import UserFacing
from geak_lsp.jobs import Job
from geak_lsp.store import RunRecord, Store, case_records, device_name, record_from_result
from geak_lsp.strategies import candidate_records, failures
from geak_lsp.targets import DocumentTargets, find_targets

if TYPE_CHECKING:
    from agent.outcome import Outcome

INFO, WARN, HINT = t.DiagnosticSeverity.Information, t.DiagnosticSeverity.Warning, t.DiagnosticSeverity.Hint
AFTER_APPLY_GONE = ("not-applied", "candidates-failed")
"""Findings that no longer say anything once the result is the code."""


@dataclass
class Pending:
    """A verified result that was not applied (the document changed, or the edit was declined)."""
    job: Job
    source: str
    title: str
    start_hash: str
    result_hash: str


def apply_title(out: "Outcome") -> str:
    if out.speedup is not None:
        return f"Apply GEAK result ({out.speedup:.2f}x faster)"
    return "Apply GEAK result (verified correct, not timed)"


def hash_in(text: str, job: Job) -> str:
    """The job's target's source hash in ``text``."""
    found = find_targets(text)
    t_ = found.by_name(job.name) or found.by_name(job.symbol)
    return found.source_hash(t_) if t_ else ""


def failed_text(job: Job, exc: BaseException) -> str:
    what = "optimizing" if job.kind == "optimize" else "benchmarking"
    return str(exc) if isinstance(exc, UserFacing) else f"GEAK: {what} {job.name} failed: {exc}"


def findings(job: Job, out: "Outcome") -> list[Finding]:
    h, name = job.source_hash, job.name
    base = out.baseline
    fs: list[Finding] = []
    if base is not None and not base.correct:
        reason = base.message + (f" — {base.error.hint}" if base.error and base.error.hint else "")
        fs.append(Finding(name, h, WARN, f"GEAK: {job.symbol} fails its own inputs: {reason}", "fails-own-inputs"))
        return fs
    if base is None:  # the job could not start (e.g. the provider's setup): a problem to fix
        fs.append(Finding(name, h, WARN, f"GEAK ({out.strategy}): {out.message}", "error"))
        return fs
    if job.kind == "benchmark":
        fs.append(Finding(name, h, INFO, f"GEAK benchmark: {out.message}", "benchmark"))
        return fs
    if out.source and out.speedup is not None:
        fs.append(Finding(name, h, INFO, f"GEAK ({out.strategy}): verified on every case, "
                          f"{out.speedup:.2f}x faster than the original; {out.verified} of {out.total} "
                          "candidates correct", "verified"))
    elif out.source and out.untimed:
        fs.append(Finding(name, h, INFO, f"GEAK ({out.strategy}): {out.message}", "not-timed"))
    else:
        fs.append(Finding(name, h, INFO, f"GEAK ({out.strategy}): {out.message}", "no-improvement"))
    failed = failures(out) + job.edit_failures
    if failed:
        shown = "; ".join(f"{f.what}: {f.reason[:200]}" for f in failed[:4])
        more = f" (and {len(failed) - 4} more)" if len(failed) > 4 else ""
        # About the candidates, not the user's code: a Hint (no squiggle, not in the Problems
        # panel), gone once a result is applied; the results view lists each one.
        fs.append(Finding(name, h, HINT, f"GEAK: {len(failed)} candidate(s) failed: {shown}{more}",
                          "candidates-failed"))
    return fs


def record(store: Store, job: Job, out: "Outcome", outcome: str) -> Optional[str]:
    """The measurements (for hovers) and the run (for the results view); returns the
    target's source hash once the offered result is the code."""
    base = out.baseline
    tgt = find_targets(job.text).by_name(job.symbol)
    kernels = tgt.kernels if tgt else []
    if base is not None:
        store.put(record_from_result(base, job.rel, job.symbol, job.source_hash, job.kind, kernels))
    m = job.merge
    result_hash = hash_in(m.text, job) if m is not None and out.source else None
    store.put_run(RunRecord(
        path=job.rel, symbol=job.symbol, name=job.name, source_hash=job.source_hash, kind=job.kind,
        strategy=out.strategy or job.kind, device=device_name(base.device if base is not None else None),
        started_at=job.started, finished_at=time.time(), outcome=outcome, message=out.message,
        speedup=out.speedup, original=case_records(base), candidates=candidate_records(out),
        notes=list(out.notes), job=job.id, result_hash=result_hash, compiled=job.compiled))
    if result_hash is not None and out.result is not None:  # what the result measured, once it is the code
        store.put(record_from_result(out.result, job.rel, job.symbol, result_hash, "optimize", kernels,
                                     side="candidate"))
    return result_hash


def not_applied(job: Job, out: "Outcome", found: DocumentTargets, result_hash: str,
                title: str) -> tuple[Optional[Pending], Finding, str]:
    """The document changed while the job ran: the result kept as a code action while the
    target itself is unchanged, else dropped; the finding and the job's end message say which."""
    cur = found.by_name(job.name) if not found.syntax_error else None
    if cur is not None and found.source_hash(cur) == job.source_hash:
        pending = Pending(job, out.source, title, job.source_hash, result_hash)
        why = f"not applied: the document changed while GEAK ran; '{title}' applies it to the current text"
    else:
        pending = None
        why = (f"not applied: {job.name} changed while GEAK ran, so the result no longer "
               "matches it; run Optimize with GEAK again")
    return pending, Finding(job.name, job.source_hash, WARN, why, "not-applied"), why


def applied(fs: list[Finding], result_hash: str) -> list[Finding]:
    """The findings once the result is the code: keyed to its hash, without those that no
    longer say anything."""
    return [Finding(f.name, result_hash, f.severity, f.message, f.code) for f in fs if f.code not in AFTER_APPLY_GONE]
