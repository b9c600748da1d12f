"""The GEAK language server (pygls): thin handlers that fan out to one module per concern.

    protocol.py     under pygls: every request answered, cheap document changes, custom capabilities
    documents.py    the targets of open documents, large ones parsed off the event loop
    targets.py      syntax-tree discovery of kernels, wrappers, PyTorch functions and modules
    actions.py      code actions (Optimize / Benchmark with GEAK, Add GEAK inputs, Apply GEAK result)
    jobs.py         jobs off the event loop, a limit, cancellation
    strategies.py   what a job does: benchmark, or optimize through agent.optimize
    edits.py        a result module -> span edits of the document
    diagnostics.py  findings per target, marked stale when the code changes
    hover.py        the last measurement of a kernel or wrapper
    store.py        measurements and runs in .geak/, keyed by source hash + device
    settings.py     geak.* from initializationOptions and workspace/configuration, validated

Nothing here imports torch or triton: they live in the runner's worker subprocesses. Handlers
that run on every keystroke or cursor move (code actions, hover) work from the cached syntax
tree only.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from lsprotocol import types as t
from pygls import uris
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from . import __version__, actions, compiled, settings as settings_mod
from .diagnostics import Diagnostics, Finding
from .documents import DocumentIndex
from .edits import Merge, MergeError, describe, line_range, merge
from .hover import hover_text
from .jobs import Job, JobManager
from .protocol import GeakProtocol
from .settings import Settings
from .store import RunRecord, Store, case_records, device_name, record_from_result
from .strategies import Failure, candidate_records, confirm, failures

if TYPE_CHECKING:
    from agent.outcome import Outcome
from .targets import TargetCache, find_targets

log = logging.getLogger("geak_lsp")
ANNOTATION = "geak-result"
QUICK_WAIT_S = 0.3
"""How long a code action or hover waits for a large document's background parse."""
INFO, WARN, HINT = t.DiagnosticSeverity.Information, t.DiagnosticSeverity.Warning, t.DiagnosticSeverity.Hint


class UserFacing(Exception):
    """A problem the user can fix, in words (bad input, bad settings, no runner)."""


class BadArguments(UserFacing):
    """A geak command's arguments do not fit it: answered with JSON-RPC error -32602 (Invalid
    params), not a result, so that a client cannot mistake it for an answer."""


def _shown(arg: Any) -> str:
    """An argument as the client sent it (JSON), shortened."""
    try:
        text = json.dumps(arg)
    except (TypeError, ValueError):
        text = repr(arg)
    return text if len(text) <= 200 else text[:200] + "..."


TARGET = '{"uri": ..., "name": ...}'
"""The argument of geak.optimize, geak.benchmark and geak.results, in their error messages."""


def _target_argument(command: str, args: tuple) -> Any:
    """The one argument of a command that takes a target (None when there is none; its shape is
    checked where it is read)."""
    if len(args) > 1:
        raise BadArguments(f"{command}: expected one argument {TARGET}, got {len(args)} arguments")
    return args[0] if args else None


@dataclass
class Pending:
    """A verified result that was not applied (the document changed, or the edit was declined)."""
    job: Job
    source: str
    title: str
    start_hash: str
    result_hash: str


class GeakServer(LanguageServer):
    def __init__(self):
        super().__init__("geak-lsp", __version__, text_document_sync_kind=t.TextDocumentSyncKind.Incremental,
                         protocol_cls=GeakProtocol)
        self.settings = Settings()
        self.init_options: Any = None
        self.targets = TargetCache()
        self.index = DocumentIndex(self.targets, lambda uri: self.workspace.get_text_document(uri),
                                   on_ready=self.on_changed)
        self.diags = Diagnostics()
        self.pending: dict[str, Pending] = {}
        self.jobs = JobManager(self.settings.max_jobs, self._job_progress, self._job_done, self._job_started)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._stores: dict[Path, Store] = {}
        self._roots: dict[str, tuple[Path, str]] = {}
        self._runner = None
        self._runner_key: Optional[tuple] = None
        self._runner_lock = threading.Lock()
        self._shown_problems: list[str] = []
        self.compiled = compiled.CompiledViews(self.compile_listing)
        self.client_features: set[str] = set()
        """Custom client features from ``capabilities.experimental`` (the VS Code extension's):
        ``geakShowResults`` (it has a geak.showResults command), ``geakJobEnd`` (it shows the
        end of each job itself, from the geak/jobEnd notification) and ``geakJobStatus`` (it
        reads each job's status as numbers, from the geak/jobStatus notification) and
        ``geakShowCompiled`` (it has a geak.showCompiled command that opens the compiled view)."""

    # ------------------------------------------------------------------ messages

    def log(self, message: str, kind: t.MessageType = t.MessageType.Info) -> None:
        self.window_log_message(t.LogMessageParams(type=kind, message=message))

    def tell(self, message: str, kind: t.MessageType = t.MessageType.Warning) -> None:
        self.window_show_message(t.ShowMessageParams(type=kind, message=message))
        self.log(message, kind)

    def from_thread(self, fn, *args) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(fn, *args)

    # ------------------------------------------------------------------ settings

    def apply_settings(self, *docs: Any) -> None:
        s, problems = settings_mod.parse(self.init_options, *docs)
        self.settings = s
        self.jobs.resize(s.max_jobs)
        for p in problems:
            self.log("GEAK settings: " + p, t.MessageType.Warning)
        if problems and problems != self._shown_problems:
            self._shown_problems = problems
            self.window_show_message(t.ShowMessageParams(
                type=t.MessageType.Warning,
                message="GEAK settings: " + " | ".join(problems)))

    # ------------------------------------------------------------------ documents

    def open_document(self, uri: str):
        """The document if the editor opened it, else None. pygls's ``get_text_document`` would
        read a URI that was never opened from disk (and fail when the file is not there); hovers
        and code actions are about open documents only."""
        return self.workspace.text_documents.get(urllib.parse.unquote(uri))

    def project(self, uri: str) -> tuple[Path, str]:
        """(project root, path of the document relative to it); cached per document."""
        hit = self._roots.get(uri)
        if hit is None:
            from runner.source import find_project_root
            path = uris.to_fs_path(uri)
            if not path:
                raise UserFacing(f"{uri}: GEAK works on files on disk; save the document first")
            f = Path(path).resolve()
            root = find_project_root(f)
            hit = (root, f.relative_to(root).as_posix())
            self._roots[uri] = hit
        return hit

    def store(self, root: Path) -> Store:
        st = self._stores.get(root)
        if st is None:
            st = self._stores[root] = Store(root)
            if st.problem:
                self.log("GEAK: " + st.problem, t.MessageType.Warning)
        return st

    async def doc_targets(self, uri: str):
        """The document and the targets of its current text (waiting for a background parse)."""
        doc = self.workspace.get_text_document(uri)
        found = await self.index.wait(uri, doc)
        if found is None:  # the parse failed (logged): say so rather than guess
            raise UserFacing(f"GEAK: could not read {Path(uris.to_fs_path(uri) or uri).name}; see the GEAK log")
        return doc, found

    def publish(self, uri: str) -> None:
        try:
            doc = self.workspace.get_text_document(uri)
            found = self.index.usable(uri, doc)
        except Exception:  # noqa: BLE001 - the document was closed
            found = None
        else:
            if found is None:
                return  # a large document still being read: published when it is (on_changed)
        diags = self.diags.render(uri, found)
        self.text_document_publish_diagnostics(t.PublishDiagnosticsParams(uri=uri, diagnostics=diags))

    # ------------------------------------------------------------------ runner

    def runner_for(self, s: Settings):
        key = (s.runner_url, s.device, s.workers)
        with self._runner_lock:
            if self._runner is not None and self._runner_key == key:
                return self._runner
            old = self._runner
            from runner.config import ConfigError
            from runner.runners import open_runner
            try:
                self._runner = open_runner(s.runner_url or "local", s.device, s.workers)
            except ConfigError as e:
                raise UserFacing(f"geak.runner.url: {e}") from None
            self._runner_key = key
        if old is not None:
            threading.Thread(target=old.close, daemon=True).start()
        return self._runner

    # ------------------------------------------------------------------ jobs

    async def start_job(self, kind: str, arg: Any) -> dict:
        if not isinstance(arg, dict) or not isinstance(arg.get("uri"), str) or not isinstance(arg.get("name"), str):
            raise BadArguments(f"geak.{kind}: expected one argument {TARGET}, got {_shown(arg)}")
        uri, name = arg["uri"], arg["name"]
        if self.open_document(uri) is None:
            raise BadArguments(f"geak.{kind}: {uri} is not open in the editor; GEAK works on open documents")
        doc, found = await self.doc_targets(uri)
        if found.syntax_error:
            raise UserFacing(f"GEAK: {Path(uris.to_fs_path(uri) or uri).name} does not parse "
                             f"({found.syntax_error}); nothing was run")
        target = found.by_name(name)
        if target is None:
            raise UserFacing(f"GEAK: no kernel, wrapper, PyTorch function or module named '{name}' in this file")
        if target.kind == "kernel" and not target.wrappers:
            raise UserFacing(f"GEAK: no function in this file launches {name}[grid](...); "
                             "write a wrapper that does, then run GEAK on it")
        busy = self.jobs.find(uri, target.evaluated)
        if busy:
            raise UserFacing(f"GEAK: a job is already running on {target.evaluated}")
        job = Job(kind=kind, uri=uri, name=name, symbol=target.evaluated, version=doc.version,
                  text=doc.source, source_hash=found.source_hash(target))
        job.settings = self.settings
        job.title = f"GEAK: {'optimizing' if kind == 'optimize' else 'benchmarking'} {name}"
        caps = self.client_capabilities.window
        if caps is not None and caps.work_done_progress:
            token = f"geak-{job.id}"
            try:
                await self.work_done_progress.create_async(token)
                job.token = token
            except Exception as e:  # noqa: BLE001 - a client that refuses: run without a bar
                self.log(f"GEAK: progress not available ({e})", t.MessageType.Warning)
        if job.token:
            self.work_done_progress.begin(job.token, t.WorkDoneProgressBegin(
                title=job.title, cancellable=True, message="starting", percentage=0))
            fut = self.work_done_progress.tokens.get(job.token)
            if fut is not None:
                fut.add_done_callback(lambda f, jid=job.id: f.cancelled() and self.cancel_job(jid, "from the progress bar"))
        self.log(f"GEAK: {job.id} started: {kind} {name} ({job.symbol}) in {uri}")
        self.jobs.submit(job, self._work)
        self._job_status(job)
        return {"job": job.id, "token": job.token}

    def cancel_job(self, job_id: str, how: str = "") -> bool:
        job = self.jobs.cancel(job_id)
        if job is None:
            return False
        if job.token:
            self.work_done_progress.end(job.token, t.WorkDoneProgressEnd(message="cancelled"))
        self._job_status(job)
        self.log(f"GEAK: {job.id} cancelled {how}".rstrip())
        return True

    def _job_progress(self, job: Job, message: str, percentage: Optional[int]) -> None:
        def send():
            if job.state in ("queued", "running"):
                if job.token:
                    self.work_done_progress.report(job.token, t.WorkDoneProgressReport(
                        message=message, percentage=percentage))
                self._job_status(job)
        self.from_thread(send)

    def _job_started(self, job: Job) -> None:
        self.from_thread(self._job_status, job)

    def _job_status(self, job: Job) -> None:
        """geak/jobStatus: where a job stands, as numbers (state, stage, counts, the best verified
        speedup), for a client that declares geakJobStatus; sent at each change."""
        if "geakJobStatus" in self.client_features:
            self.protocol.notify("geak/jobStatus", {
                "job": job.id, "token": job.token, "uri": job.uri, "name": job.name, "kind": job.kind,
                "state": job.state, **job.ctx.status()})

    def _job_done(self, job: Job, outcome: Optional["Outcome"], exc: Optional[BaseException]) -> None:
        self.from_thread(lambda: asyncio.ensure_future(self._finish(job, outcome, exc)))

    # The job thread --------------------------------------------------------

    def _work(self, job: Job) -> "Outcome":
        from runner.source import SourceError, build_request
        from . import strategies
        s: Settings = job.settings
        job.root, job.rel = self.project(job.uri)
        try:
            req, info, _ = build_request(f"{job.root / job.rel}::{job.symbol}", None, self._options(job),
                                         root=job.root, overrides=self._overrides(job), cwd=job.root)
        except SourceError as e:
            raise UserFacing(f"GEAK: {e.info.message}" + (f" — {e.info.hint}" if e.info.hint else "")) from None
        runner = self.runner_for(s)
        job.ctx.check()
        if job.kind == "benchmark":
            out = strategies.benchmark(runner, req, s, job.ctx)
        else:
            out = strategies.optimize_target(runner, req, s, job.ctx, job.root)
        if out.source:
            self._prepare_edit(job, out, runner, req)
        if job.merge is not None and out.source:
            job.compiled = self._compiled_change(job, runner, req)
        return out

    def _compiled_change(self, job: Job, runner, req) -> Optional[dict]:
        """The results view's compiled difference for the offered result (best effort)."""
        from . import strategies
        try:
            return strategies.compiled_change(runner, req, job.merge.text, strategies.aot_arch(runner, job.settings),
                                              job.ctx)
        except strategies.Cancelled:
            raise
        except Exception as e:  # noqa: BLE001 - the result stands without its compiled figures
            self.log(f"GEAK: {job.id}: the compiled difference was not made ({e})", t.MessageType.Warning)
            return None

    def _options(self, job: Job):
        """The project's options with the editor's device and trials."""
        opts = self.project_options(job.root, job.settings)
        opts.trials = job.settings.trials
        return opts

    def project_options(self, root: Path, s: Settings):
        from runner.config import ConfigError, project_options
        try:
            opts = project_options(root)
        except ConfigError as e:
            raise UserFacing(f"GEAK: {e}") from None
        opts.device = s.device
        return opts

    def _overrides(self, job: Job) -> dict[str, str]:
        return self.overrides(job.uri, job.root, job.rel, job.text)

    def overrides(self, uri: str, root: Path, rel: str, text: str) -> dict[str, str]:
        """The document's text, and the unsaved text of the project's other open documents."""
        overrides = {rel: text}
        for d in list(self.workspace.text_documents.values()):
            if d.uri != uri:
                try:
                    r2, p2 = self.project(d.uri)
                    if r2 == root:
                        overrides[p2] = d.source
                except (UserFacing, ValueError):
                    pass
        return overrides

    # The compiled view's thread ----------------------------------------------

    def compile_listing(self, req: "compiled.Request", target, text: str) -> "compiled.Listing":
        """Record the target's launches on its input cases and compile them for ``req.arch``
        (resolved by the caller), on the editor's runner."""
        from runner.source import SourceError, build_request
        root, rel = self.project(req.uri)
        opts = self.project_options(root, self.settings)
        opts.trials, opts.timing = 1, False
        opts.aot_arch, opts.aot_stage = req.arch, req.stage or "default"
        try:
            built, _, _ = build_request(f"{root / rel}::{target.evaluated}", None, opts, root=root,
                                        overrides=self.overrides(req.uri, root, rel, text), cwd=root)
        except SourceError as e:
            raise UserFacing(f"GEAK: {e.info.message}" + (f" — {e.info.hint}" if e.info.hint else "")) from None
        result = self.runner_for(self.settings).evaluate(built)
        if result.error is not None and result.error.kind == "runner_unavailable":
            raise UserFacing(f"GEAK: cannot run: {result.error.message}")
        return compiled.build_listing(req, target.evaluated, rel, built.files, result.resources,
                                      result.ran, result.message, req.arch)

    async def compiled_code(self, arg: Any) -> dict:
        """geak.compiledCode: the listing of a target (compiled on the view's thread, or cached)."""
        try:
            req = compiled.parse_request(arg)
        except ValueError as e:
            raise BadArguments(f"{compiled.CODE}: {e}") from None
        if self.open_document(req.uri) is None:
            raise BadArguments(f"{compiled.CODE}: {req.uri} is not open in the editor")
        doc, found = await self.doc_targets(req.uri)
        if found.syntax_error:
            raise UserFacing(f"GEAK: the file does not parse ({found.syntax_error}); nothing was compiled")
        target = found.by_name(req.name)
        if target is None:
            raise UserFacing(f"GEAK: no kernel, wrapper, PyTorch function or module named '{req.name}' in this file")
        if target.kind == "kernel" and not target.wrappers:
            raise UserFacing(f"GEAK: no function in this file launches {req.name}[grid](...), so its launches "
                             "(constexprs, signature) are not known; write a wrapper that does")
        from .strategies import interpreted
        req.arch = req.arch or compiled.default_arch(self.settings.arch,
                                                     interpreted(self.runner_for(self.settings), self.settings))
        listing = await asyncio.wrap_future(self.compiled.get(req, target, doc.source, req.arch))
        return listing.as_dict()

    def _prepare_edit(self, job: Job, out: "Outcome", runner, req) -> None:
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

    # Back on the loop --------------------------------------------------------

    async def _finish(self, job: Job, out: Optional["Outcome"], exc: Optional[BaseException]) -> None:
        try:
            if exc is not None:
                self._failed(job, exc)
            else:
                await self._finished(job, out)
        except Exception as e:  # noqa: BLE001 - never let a job's end take the server down
            log.exception("finishing %s", job.id)
            self.tell(f"GEAK: {job.id} ended with an internal error: {e}", t.MessageType.Error)
        finally:
            self._job_status(job)
            self.jobs.forget_finished()

    def _failed(self, job: Job, exc: BaseException) -> None:
        what = "optimizing" if job.kind == "optimize" else "benchmarking"
        text = str(exc) if isinstance(exc, UserFacing) else f"GEAK: {what} {job.name} failed: {exc}"
        if not isinstance(exc, UserFacing):
            self.log(getattr(exc, "__geak_traceback__", ""), t.MessageType.Error)
        if job.token:
            self.work_done_progress.end(job.token, t.WorkDoneProgressEnd(message=text))
        if "geakJobEnd" in self.client_features:
            self.log(text, t.MessageType.Warning)
            self._job_end(job, "error", text, results=False)
        else:
            self.tell(text, t.MessageType.Warning if isinstance(exc, UserFacing) else t.MessageType.Error)
        self.diags.set(job.uri, job.name, [Finding(job.name, job.source_hash, WARN, text, "error")])
        self.publish(job.uri)

    async def _finished(self, job: Job, out: "Outcome") -> None:
        """Record the run, offer the result (applied, or kept as a code action), say the end."""
        from agent.render import sandbox_warning
        warning = sandbox_warning(out.baseline)
        if warning and not getattr(self, "_sandbox_warned", False):  # once per server
            self._sandbox_warned = True
            self.tell("GEAK " + warning)
        findings = self._findings(job, out)
        outcome = findings[0].code if findings else "no-improvement"
        result_hash = self._record(job, out, outcome)
        end_msg, progress_open = out.message, bool(job.token)
        if job.merge is not None and out.source:
            end_msg, progress_open = await self._offer(job, out, findings, result_hash)
        if progress_open:
            self.work_done_progress.end(job.token, t.WorkDoneProgressEnd(message=end_msg))
        if "geakJobEnd" in self.client_features:
            self._job_end(job, outcome, end_msg, results=True)
        elif not job.token:  # no progress bar in this client: say it once
            self.window_show_message(t.ShowMessageParams(type=t.MessageType.Info, message=f"GEAK: {end_msg}"))
        self.log(f"GEAK: {job.id} done: {end_msg}")
        for n in out.notes:
            self.log(f"GEAK: {job.id}: {n}")
        self.diags.set(job.uri, job.name, findings)
        self.publish(job.uri)

    def _record(self, job: Job, out: "Outcome", outcome: str) -> Optional[str]:
        """The measurements (for hovers) and the run (for the results view); returns the
        target's source hash once the offered result is the code."""
        store, base = self.store(job.root), out.baseline
        tgt = find_targets(job.text).by_name(job.symbol)
        kernels = tgt.kernels if tgt else []
        if base is not None:
            store.put(record_from_result(base, job.rel, job.symbol, job.source_hash, job.kind, kernels))
        m = job.merge
        result_hash = _hash_in(m.text, job) if m is not None and out.source else None
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

    async def _offer(self, job: Job, out: "Outcome", findings: list[Finding], result_hash: str) -> tuple[str, bool]:
        """Apply the result if the document is still the job's text (the editor may ask the
        user first); else keep it as the "Apply GEAK result" action while the target is
        unchanged. Returns the job's end message and whether its progress is still open."""
        title = _apply_title(out)
        doc, found = await self.doc_targets(job.uri)
        if doc.source != job.text:
            cur = found.by_name(job.name) if not found.syntax_error else None
            if cur is not None and found.source_hash(cur) == job.source_hash:
                self.pending[job.uri] = Pending(job, out.source, title, job.source_hash, result_hash)
                why = f"not applied: the document changed while GEAK ran; '{title}' applies it to the current text"
            else:
                why = (f"not applied: {job.name} changed while GEAK ran, so the result no longer "
                       "matches it; run Optimize with GEAK again")
            findings.append(Finding(job.name, job.source_hash, WARN, why, "not-applied"))
            return why, bool(job.token)
        # The editor may now show a preview and wait for the user: the job's work is done.
        ready, progress_open = "result ready: review it, then apply or discard", bool(job.token)
        if job.token and "geakJobEnd" in self.client_features:
            # This client says the outcome itself (geak/jobEnd), after the choice.
            self.work_done_progress.end(job.token, t.WorkDoneProgressEnd(message=ready))
            progress_open = False
        elif job.token:
            self.work_done_progress.report(job.token, t.WorkDoneProgressReport(message=ready, percentage=100))
        if await self._apply(job.uri, doc.version, doc.source, job.merge, title, out):
            findings[:] = [Finding(f.name, result_hash, f.severity, f.message, f.code) for f in findings
                           if f.code not in AFTER_APPLY_GONE]
            return f"applied: {out.message}", progress_open
        self.pending[job.uri] = Pending(job, out.source, title, job.source_hash, result_hash)
        findings.append(Finding(job.name, job.source_hash, INFO,
                                f"the edit was not applied; use '{title}' to apply it", "not-applied"))
        return out.message, progress_open

    def _job_end(self, job: Job, outcome: str, message: str, results: bool) -> None:
        """geak/jobEnd: one notification per finished job, for a client that shows it itself."""
        self.protocol.notify("geak/jobEnd", {
            "job": job.id, "token": job.token, "uri": job.uri, "name": job.name, "kind": job.kind,
            "outcome": outcome, "message": message, "results": results})

    def results(self, arg: Any) -> dict:
        """geak.results {"uri", "name"}: the target's runs (newest first) and its last measurement."""
        if not isinstance(arg, dict) or not isinstance(arg.get("uri"), str) or not isinstance(arg.get("name"), str):
            raise BadArguments(f"geak.results: expected one argument {TARGET}, got {_shown(arg)}")
        uri, name = arg["uri"], arg["name"]
        root, rel = self.project(uri)
        found = self.targets.last(uri)
        target = found.by_name(name) if found is not None else None
        symbol = target.evaluated if target is not None else name
        st = self.store(root)
        runs = st.runs(rel, symbol)
        latest = st.latest(rel, symbol)
        current = found.source_hash(target) if target is not None and not found.syntax_error else None
        return {"uri": uri, "name": name, "symbol": symbol, "path": rel, "source_hash": current,
                "runs": [dataclasses.asdict(r) for r in runs[:5]],
                "measurement": dataclasses.asdict(latest) if latest is not None else None}

    def results_action(self, uri: str, found, line: int, diagnostics: list) -> Optional[t.CodeAction]:
        """"Show GEAK results" on a target that has runs (for a client with geak.showResults)."""
        if "geakShowResults" not in self.client_features:
            return None
        target = found.at_line(line)
        if target is None:
            return None
        try:
            root, rel = self.project(uri)
        except (UserFacing, ValueError):
            return None
        if not self.store(root).runs(rel, target.evaluated):
            return None
        mine = [d for d in diagnostics if d.source == "geak"]
        return t.CodeAction(title=f"Show GEAK results for {target.name}", kind=t.CodeActionKind.QuickFix,
                            diagnostics=mine or None,
                            command=t.Command(title="Show GEAK results", command="geak.showResults",
                                              arguments=[{"uri": uri, "name": target.name}]))

    def _findings(self, job: Job, out: "Outcome") -> list[Finding]:
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

    async def _apply(self, uri: str, version: Optional[int], text: str, m: Merge, title: str, out: "Outcome") -> bool:
        edit = self.workspace_edit(uri, version, text, m, title, out)
        try:
            res = await self.workspace_apply_edit_async(t.ApplyWorkspaceEditParams(edit=edit, label=title))
        except Exception as e:  # noqa: BLE001
            self.log(f"GEAK: the editor did not take the edit ({e})", t.MessageType.Warning)
            return False
        if not res.applied:
            self.log(f"GEAK: the editor did not apply the edit ({res.failure_reason or 'declined'})")
        return bool(res.applied)

    def workspace_edit(self, uri: str, version: Optional[int], text: str, m: Merge, title: str,
                       out: Optional["Outcome"], confirm: bool = True) -> t.WorkspaceEdit:
        lines = text.splitlines(keepends=True)
        plain = []
        for ed in m.edits:
            (sl, sc), (el, ec) = line_range(lines, ed.start, ed.end)
            plain.append((t.Range(start=t.Position(line=sl, character=sc), end=t.Position(line=el, character=ec)),
                          ed.text))
        caps = self.client_capabilities.workspace
        we = caps.workspace_edit if caps is not None else None
        doc_changes = bool(we and we.document_changes)
        annotations = bool(we and we.change_annotation_support is not None)
        desc = f"GEAK {describe(m)}" + (f": {out.message}" if out is not None else "")
        if doc_changes:
            if annotations:
                edits = [t.AnnotatedTextEdit(range=r, new_text=s, annotation_id=ANNOTATION) for r, s in plain]
            else:
                edits = [t.TextEdit(range=r, new_text=s) for r, s in plain]
            return t.WorkspaceEdit(
                document_changes=[t.TextDocumentEdit(
                    text_document=t.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                    edits=edits)],
                change_annotations={ANNOTATION: t.ChangeAnnotation(label=title, needs_confirmation=confirm,
                                                                   description=desc)} if annotations else None)
        return t.WorkspaceEdit(changes={uri: [t.TextEdit(range=r, new_text=s) for r, s in plain]})

    def apply_action(self, uri: str, doc, found) -> Optional[t.CodeAction]:
        p = self.pending.get(uri)
        if p is None or found.syntax_error:
            return None
        cur = found.by_name(p.job.name)
        if cur is None or found.source_hash(cur) != p.start_hash:
            return None
        try:
            m = merge(doc.source, p.source)
        except MergeError as e:
            self.log(f"GEAK: the pending result no longer merges: {e}")
            return None
        # Choosing the action is the confirmation (VS Code would open its refactor preview with
        # the edit unchecked for an annotation that needs confirmation).
        return t.CodeAction(title=p.title, kind=actions.KIND_GEAK, is_preferred=True,
                            edit=self.workspace_edit(uri, doc.version, doc.source, m, p.title, None, confirm=False))

    def on_changed(self, uri: str) -> None:
        p = self.pending.get(uri)
        if p is None and not self.diags.has(uri):
            return
        try:
            doc = self.workspace.get_text_document(uri)
        except Exception:  # noqa: BLE001 - closed
            return
        found = self.index.now(uri, doc)
        if found is None:
            return  # a large document being read: this runs again when it is
        if p is not None and not found.syntax_error:
            cur = found.by_name(p.job.name)
            if cur is not None and found.source_hash(cur) == p.result_hash:
                # The result was applied (from the code action): its findings hold for this text.
                self.pending.pop(uri, None)
                fs = self.diags.findings(uri).get(p.job.name, [])
                self.diags.set(uri, p.job.name, [Finding(f.name, p.result_hash, f.severity, f.message, f.code)
                                                 for f in fs if f.code not in AFTER_APPLY_GONE])
        self.publish(uri)


AFTER_APPLY_GONE = ("not-applied", "candidates-failed")
"""Findings that no longer say anything once the result is the code."""


def _apply_title(out: "Outcome") -> str:
    if out.speedup is not None:
        return f"Apply GEAK result ({out.speedup:.2f}x faster)"
    return "Apply GEAK result (verified correct, not timed)"


def _hash_in(text: str, job: Job) -> str:
    found = find_targets(text)
    t_ = found.by_name(job.name) or found.by_name(job.symbol)
    return found.source_hash(t_) if t_ else ""


# ---------------------------------------------------------------------- handlers

server = GeakServer()


@server.feature(t.INITIALIZE)
def on_initialize(ls: GeakServer, params: t.InitializeParams):
    ls.loop = asyncio.get_running_loop()
    ls.init_options = params.initialization_options
    exp = params.capabilities.experimental
    ls.client_features = {k for k, v in exp.items() if v} if isinstance(exp, dict) else set()
    ls.apply_settings()


@server.feature(t.INITIALIZED)
async def on_initialized(ls: GeakServer, params: t.InitializedParams):
    ls.log(f"GEAK language server {__version__} ready (pid {os.getpid()}, "
           f"torch imported: {'torch' in sys.modules})")
    await pull_configuration(ls)


async def pull_configuration(ls: GeakServer) -> None:
    caps = ls.client_capabilities.workspace
    if caps is None or not caps.configuration:
        return
    try:
        got = await ls.workspace_configuration_async(
            t.ConfigurationParams(items=[t.ConfigurationItem(section="geak")]))
    except Exception as e:  # noqa: BLE001
        ls.log(f"GEAK: workspace/configuration failed ({e}); using initializationOptions", t.MessageType.Warning)
        return
    ls.apply_settings(got[0] if got else None)


@server.feature(t.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_config(ls: GeakServer, params: t.DidChangeConfigurationParams):
    caps = ls.client_capabilities.workspace
    if caps is not None and caps.configuration:
        await pull_configuration(ls)
    else:
        ls.apply_settings(params.settings)


@server.feature(t.TEXT_DOCUMENT_DID_OPEN)
def on_open(ls: GeakServer, params: t.DidOpenTextDocumentParams):
    uri = params.text_document.uri
    ls.index.now(uri, ls.workspace.get_text_document(uri))  # parse once, up front (large: in the background)
    ls.on_changed(uri)


@server.feature(t.TEXT_DOCUMENT_DID_CHANGE)
def on_change(ls: GeakServer, params: t.DidChangeTextDocumentParams):
    ls.on_changed(params.text_document.uri)


@server.feature(t.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: GeakServer, params: t.DidCloseTextDocumentParams):
    ls.index.forget(params.text_document.uri)


@server.feature(t.TEXT_DOCUMENT_CODE_ACTION,
                t.CodeActionOptions(code_action_kinds=[actions.KIND_GEAK, t.CodeActionKind.QuickFix]))
async def on_code_action(ls: GeakServer, params: t.CodeActionParams):
    uri = params.text_document.uri
    doc = ls.open_document(uri)
    if doc is None:
        return None
    found = ls.index.usable(uri, doc) or await ls.index.wait(uri, doc, QUICK_WAIT_S)
    if found is None:
        out = [actions.still_reading(len(doc.source))]
    else:
        line = params.range.start.line
        running = [j.symbol for j in ls.jobs.find(uri)]
        out = actions.target_actions(found, uri, line, running)
        target = found.at_line(line)
        if target is not None:
            for j in ls.jobs.find(uri, target.evaluated):
                out.append(actions.cancel_action(j.id, target.name))
        apply = ls.apply_action(uri, doc, found)
        if apply is not None:
            out.insert(0, apply)
        shown = ls.results_action(uri, found, line, params.context.diagnostics)
        if shown is not None:
            out.append(shown)
    return actions.only(out, params.context.only) or None


@server.feature(t.TEXT_DOCUMENT_HOVER)
async def on_hover(ls: GeakServer, params: t.HoverParams):
    uri = params.text_document.uri
    doc = ls.open_document(uri)
    if doc is None:
        return None
    found = ls.index.usable(uri, doc) or await ls.index.wait(uri, doc, QUICK_WAIT_S)
    if found is None:
        return None
    line = params.position.line
    target = found.at_header(line)
    if target is None:
        return _compiled_hover(ls, uri, doc, found, line)
    if target.kind not in ("kernel", "wrapper", "function", "module"):
        return None
    try:
        root, rel = ls.project(uri)
    except (UserFacing, ValueError):
        return None
    link = None
    if "geakShowResults" in ls.client_features and ls.store(root).runs(rel, target.evaluated):
        args = urllib.parse.quote(json.dumps([{"uri": uri, "name": target.name}]))
        link = f"command:geak.showResults?{args}"
    text = hover_text(found, target, ls.store(root), rel, results_link=link)
    return t.Hover(contents=t.MarkupContent(kind=t.MarkupKind.Markdown, value=text),
                   range=t.Range(start=t.Position(line=target.header.start, character=0),
                                 end=t.Position(line=target.header.end + 1, character=0)))


def _compiled_hover(ls: GeakServer, uri: str, doc, found, line: int) -> Optional[t.Hover]:
    """A kernel body line: what it compiled to, from the compiled view's cache only."""
    kernel = compiled.kernel_body_line(found, line)
    if kernel is None:
        return None
    hit = ls.compiled.for_line(uri, doc.source, line)
    if hit is None:
        return None
    listing, per_config = hit
    link = None
    if "geakShowCompiled" in ls.client_features:
        arg = {"uri": uri, "name": listing.name, "arch": listing.arch, "stage": listing.stage}
        link = f"command:{compiled.SHOW}?{urllib.parse.quote(json.dumps([arg]))}"
    return t.Hover(contents=t.MarkupContent(kind=t.MarkupKind.Markdown,
                                            value=compiled.hover_text(listing, line, per_config, link)),
                   range=t.Range(start=t.Position(line=line, character=0), end=t.Position(line=line + 1, character=0)))


@server.feature(t.TEXT_DOCUMENT_CODE_LENS, t.CodeLensOptions(resolve_provider=False))
async def on_code_lens(ls: GeakServer, params: t.CodeLensParams):
    """"GEAK: compiled code" above each Triton kernel, for a client with the compiled view."""
    uri = params.text_document.uri
    doc = ls.open_document(uri)
    if doc is None or "geakShowCompiled" not in ls.client_features:
        return None
    found = ls.index.usable(uri, doc) or await ls.index.wait(uri, doc, QUICK_WAIT_S)
    if found is None or found.syntax_error:
        return None
    from runner.aot import default_stage
    arch = ls.settings.arch
    return compiled.code_lenses(found, uri, f"{arch} {default_stage(arch)}" if arch else None) or None


async def _command(ls: GeakServer, kind: str, args) -> Any:
    """Arguments that do not fit are a JSON-RPC error (-32602); a job that cannot start on a
    well-formed target (the file does not parse, a job already runs on it) is said to the user
    and answered ``{"error": message}``."""
    try:
        return await ls.start_job(kind, _target_argument(f"geak.{kind}", args))
    except BadArguments as e:
        raise JsonRpcInvalidParams(str(e)) from None
    except UserFacing as e:
        ls.tell(str(e))
        return {"error": str(e)}


@server.command(actions.OPTIMIZE)
async def cmd_optimize(ls: GeakServer, *args):
    return await _command(ls, "optimize", args)


@server.command(actions.BENCHMARK)
async def cmd_benchmark(ls: GeakServer, *args):
    return await _command(ls, "benchmark", args)


@server.command(actions.RESULTS)
def cmd_results(ls: GeakServer, *args):
    """geak.results {"uri", "name"}: what the results view shows. Every problem is with the
    argument (its shape, a URI that is not a file on disk): a JSON-RPC error -32602."""
    try:
        return ls.results(_target_argument("geak.results", args))
    except (UserFacing, ValueError) as e:
        raise JsonRpcInvalidParams(str(e)) from None


@server.command(compiled.CODE)
async def cmd_compiled(ls: GeakServer, *args):
    """geak.compiledCode {"uri", "name", "arch"?, "stage"?}: the compiled view's text and line
    map. A malformed argument is a JSON-RPC error -32602; a target that cannot be compiled is
    answered ``{"error": message}`` (the view shows it)."""
    try:
        return await ls.compiled_code(args[0] if len(args) == 1 else None)
    except BadArguments as e:
        raise JsonRpcInvalidParams(str(e)) from None
    except UserFacing as e:
        return {"error": str(e)}


@server.command(actions.CANCEL)
def cmd_cancel(ls: GeakServer, *args):
    """geak.cancel JOB_ID | {"uri": ..., "name"?: ...} | nothing (every job). Anything else is
    a JSON-RPC error -32602 and cancels nothing: a malformed argument used to mean "every job"."""
    arg = args[0] if len(args) == 1 else None
    if not args:
        ids = [j.id for j in ls.jobs.active()]
    elif isinstance(arg, str):
        ids = [arg]
    elif isinstance(arg, dict) and isinstance(arg.get("uri"), str) and isinstance(arg.get("name", ""), str):
        ids = [j.id for j in ls.jobs.find(arg["uri"], arg.get("name"))]
    else:
        raise JsonRpcInvalidParams(
            'geak.cancel: expected a job id, {"uri": ...} or no argument (every job), got '
            + (_shown(arg) if len(args) == 1 else f"{len(args)} arguments"))
    done = [i for i in ids if ls.cancel_job(i, "by geak.cancel")]
    return {"cancelled": done}


@server.command(actions.SERVER_INFO)
def cmd_info(ls: GeakServer, *args):
    return {"version": __version__, "pid": os.getpid(),
            "imported": {m: m in sys.modules for m in ("torch", "triton", "numpy", "openai", "anthropic")},
            "settings": settings_mod.as_dict(ls.settings),
            "jobs": [{"id": j.id, "kind": j.kind, "name": j.name, "state": j.state}
                     for j in ls.jobs.jobs.values()]}


@server.feature(t.SHUTDOWN)
def on_shutdown(ls: GeakServer, *args):
    ls.jobs.shutdown()
    ls.compiled.close()
    r = ls._runner
    if r is not None:
        threading.Thread(target=r.close, daemon=True).start()


# ---------------------------------------------------------------------- entry point


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="geak-lsp", description="The GEAK language server (stdio by default).",
        epilog="--stdio, --pipe=NAME, --socket=PORT and --clientProcessId=PID are the transport arguments "
               "that editors' client libraries (vscode-languageclient) pass; --tcp makes the server listen.")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    how.add_argument("--tcp", action="store_true", help="listen on TCP (--host, --port) instead of stdio")
    how.add_argument("--pipe", metavar="NAME", help="connect to the client's named pipe (a Unix socket path)")
    how.add_argument("--socket", metavar="PORT", type=int, help="connect to the client's TCP port on 127.0.0.1")
    p.add_argument("--clientProcessId", dest="client_pid", metavar="PID", type=int,
                   help="exit when this process (the editor) is gone")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=2087)
    p.add_argument("--log-file", help="write the server's own log here (default: stderr, warnings only)")
    args = p.parse_args(argv)
    logging.basicConfig(filename=args.log_file, level=logging.INFO if args.log_file else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.client_pid:
        _watch_client(args.client_pid)
    if args.tcp:
        server.start_tcp(args.host, args.port)
        _exit_now()
        return 0
    if args.pipe or args.socket:
        sock = _connect(args.pipe, args.socket)
        if sock is None:
            return 2
        server.start_io(sock.makefile("rb"), sock.makefile("wb"))
        _exit_now()
        return 0
    # stdout is the protocol: keep it for pygls and send anything else printed (by any library,
    # in any thread) to stderr, so a stray print can never corrupt a message.
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    server.start_io(sys.stdin.buffer, proto_out)
    _exit_now()
    return 0


def _connect(pipe: Optional[str], port: Optional[int]):
    """The client listens and the server connects (vscode-languageclient's pipe and socket
    transports). Returns the connected socket, or None after saying why."""
    import socket
    try:
        if pipe:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(pipe)
        else:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.settimeout(None)
        return sock
    except OSError as e:
        where = f"pipe {pipe}" if pipe else f"127.0.0.1:{port}"
        print(f"geak-lsp: cannot connect to the client at {where}: {e}", file=sys.stderr)
        return None


def _watch_client(pid: int, every_s: float = 3.0) -> None:
    """Exit when the editor process that started the server is gone (--clientProcessId)."""
    def watch():
        while True:
            time.sleep(every_s)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log.warning("the client process %d is gone; exiting", pid)
                _exit_now()
            except PermissionError:
                pass  # it exists, under another user

    threading.Thread(target=watch, name="geak-client-watch", daemon=True).start()


def _exit_now() -> None:
    """After ``exit``: cancel the jobs, let the runner stop its idle workers, and leave without
    waiting for job threads that are blocked in an evaluation (its worker ends with it)."""
    server.jobs.shutdown()
    r = server._runner
    if r is not None:
        done = threading.Thread(target=r.close, daemon=True)
        done.start()
        done.join(5.0)
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
