"""The GEAK language server (pygls): the server object receives and sends, and keeps the
editor's state (settings, documents, findings, jobs); what it sends is made by one module per
concern (ARCHITECTURE.md names them), and ``handlers`` holds the thin handlers over them, as
jedi-language-server's are. Nothing here imports torch or triton: they live in the runner's
worker subprocesses. What runs on every keystroke or cursor move (code actions, hover, lenses)
works from the cached syntax tree only."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from lsprotocol import types as t
from pygls import uris
from pygls.lsp.server import LanguageServer

from . import __version__, compiled, finish, settings as settings_mod, work
from geak_lsp.diagnostics import Diagnostics, Finding
from geak_lsp.documents import DocumentIndex
from geak_lsp.edits import workspace_edit
from geak_lsp.errors import BadArguments, UserFacing, target_of
from geak_lsp.jobs import Job, JobManager, target_to_run
from geak_lsp.projects import Projects
from geak_lsp.protocol import GeakProtocol
from geak_lsp.settings import Settings
from geak_lsp.targets import TargetCache

if TYPE_CHECKING:
    from agent.outcome import Outcome

log = logging.getLogger("geak_lsp")
QUICK_WAIT_S = 0.3
"""How long a code action or hover waits for a large document's background parse."""


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
        self.pending: dict[str, finish.Pending] = {}
        self.jobs = JobManager(self.settings.max_jobs, self._job_progress, self._job_done,
                               lambda job: self.from_thread(self._job_status, job))
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.projects = Projects(lambda m: self.log(m, t.MessageType.Warning))
        self.compiled = compiled.CompiledViews(lambda req, target, text: compiled.compile_listing(
            self.projects, self.settings, req, target, text, self.open_texts()))
        self._shown_problems: list[str] = []
        self._sandbox_warned = False
        self.client_features: set[str] = set()
        """From ``capabilities.experimental`` (the VS Code extension's): geakShowResults,
        geakJobEnd, geakJobStatus, geakShowCompiled (docs/editor.md says what each one gets)."""

    def log(self, message: str, kind: t.MessageType = t.MessageType.Info) -> None:
        self.window_log_message(t.LogMessageParams(type=kind, message=message))

    def tell(self, message: str, kind: t.MessageType = t.MessageType.Warning) -> None:
        self.window_show_message(t.ShowMessageParams(type=kind, message=message))
        self.log(message, kind)

    def from_thread(self, fn, *args) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(fn, *args)

    def apply_settings(self, *docs: Any) -> None:
        s, problems = settings_mod.parse(self.init_options, *docs)
        self.settings = s
        self.jobs.resize(s.max_jobs)
        for p in problems:
            self.log("GEAK settings: " + p, t.MessageType.Warning)
        if problems and problems != self._shown_problems:
            self._shown_problems = problems
            self.window_show_message(t.ShowMessageParams(type=t.MessageType.Warning,
                                                         message="GEAK settings: " + " | ".join(problems)))


    def open_document(self, uri: str):
        """The document if the editor opened it, else None (pygls's ``get_text_document`` would
        read a URI that was never opened from disk)."""
        return self.workspace.text_documents.get(urllib.parse.unquote(uri))

    def open_texts(self) -> list[tuple[str, str]]:
        return [(d.uri, d.source) for d in list(self.workspace.text_documents.values())]

    async def doc_targets(self, uri: str):
        """The document and the targets of its current text (waiting for a background parse)."""
        doc = self.workspace.get_text_document(uri)
        found = await self.index.wait(uri, doc)
        if found is None:  # the parse failed (logged): say so rather than guess
            raise UserFacing(f"GEAK: could not read {Path(uris.to_fs_path(uri) or uri).name}; see the GEAK log")
        return doc, found

    async def quick_targets(self, uri: str):
        """(document, targets) for a handler on every cursor move: (None, None) when the document
        is not open; targets None while a large one is still being read."""
        doc = self.open_document(uri)
        return (doc, self.index.usable(uri, doc) or await self.index.wait(uri, doc, QUICK_WAIT_S)) if doc is not None else (None, None)

    def publish(self, uri: str) -> None:
        try:
            doc = self.workspace.get_text_document(uri)
            found = self.index.usable(uri, doc)
        except Exception:  # noqa: BLE001 - the document was closed
            found = None
        else:
            if found is None:
                return  # a large document still being read: published when it is (on_changed)
        self.text_document_publish_diagnostics(t.PublishDiagnosticsParams(uri=uri, diagnostics=self.diags.render(uri, found)))

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
                self.diags.set(uri, p.job.name, finish.applied(self.diags.findings(uri).get(p.job.name, []), p.result_hash))
        self.publish(uri)


    async def start_job(self, kind: str, arg: Any) -> dict:
        uri, name = target_of(f"geak.{kind}", arg)
        if self.open_document(uri) is None:
            raise BadArguments(f"geak.{kind}: {uri} is not open in the editor; GEAK works on open documents")
        doc, found = await self.doc_targets(uri)
        target = target_to_run(kind, name, found, Path(uris.to_fs_path(uri) or uri).name,
                               lambda symbol: self.jobs.find(uri, symbol))
        job = Job(kind=kind, uri=uri, name=name, symbol=target.evaluated, version=doc.version,
                  text=doc.source, source_hash=found.source_hash(target), settings=self.settings)
        caps = self.client_capabilities.window
        if caps is not None and caps.work_done_progress:
            try:
                await self.work_done_progress.create_async(f"geak-{job.id}")
                job.token = f"geak-{job.id}"
            except Exception as e:  # noqa: BLE001 - a client that refuses: run without a bar
                self.log(f"GEAK: progress not available ({e})", t.MessageType.Warning)
        if job.token:
            self.work_done_progress.begin(job.token, t.WorkDoneProgressBegin(
                title=job.title, cancellable=True, message="starting", percentage=0))
            fut = self.work_done_progress.tokens.get(job.token)
            if fut is not None:
                fut.add_done_callback(lambda f, jid=job.id: f.cancelled() and self.cancel_job(jid, "from the progress bar"))
        self.log(f"GEAK: {job.id} started: {kind} {name} ({job.symbol}) in {uri}")
        self.jobs.submit(job, lambda j: work.run(j, self.projects, self.open_texts,
                                                 lambda m: self.log(m, t.MessageType.Warning)))
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
                    self.work_done_progress.report(job.token, t.WorkDoneProgressReport(message=message,
                                                                                       percentage=percentage))
                self._job_status(job)
        self.from_thread(send)

    def _job_status(self, job: Job) -> None:
        """geak/jobStatus: where a job stands, as numbers, for a client that declares geakJobStatus."""
        if "geakJobStatus" in self.client_features:
            self.protocol.notify("geak/jobStatus", {"job": job.id, "token": job.token, "uri": job.uri, "name": job.name,
                                                    "kind": job.kind, "state": job.state, **job.ctx.status()})

    def _job_end(self, job: Job, outcome: str, message: str, results: bool) -> None:
        """geak/jobEnd: one notification per finished job, for a client that shows it itself."""
        self.protocol.notify("geak/jobEnd", {"job": job.id, "token": job.token, "uri": job.uri, "name": job.name,
                                             "kind": job.kind, "outcome": outcome, "message": message, "results": results})

    def _job_done(self, job: Job, outcome: Optional["Outcome"], exc: Optional[BaseException]) -> None:
        self.from_thread(lambda: asyncio.ensure_future(self._finish(job, outcome, exc)))

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
        text = finish.failed_text(job, exc)
        if not isinstance(exc, UserFacing):
            self.log(getattr(exc, "__geak_traceback__", ""), t.MessageType.Error)
        if job.token:
            self.work_done_progress.end(job.token, t.WorkDoneProgressEnd(message=text))
        if "geakJobEnd" in self.client_features:
            self.log(text, t.MessageType.Warning)
            self._job_end(job, "error", text, results=False)
        else:
            self.tell(text, t.MessageType.Warning if isinstance(exc, UserFacing) else t.MessageType.Error)
        self.diags.set(job.uri, job.name, [Finding(job.name, job.source_hash, finish.WARN, text, "error")])
        self.publish(job.uri)

    async def _finished(self, job: Job, out: "Outcome") -> None:
        """Record the run, offer the result (applied, or kept as a code action), say the end."""
        from agent.render import sandbox_warning
        warning = sandbox_warning(out.baseline)
        if warning and not self._sandbox_warned:  # once per server
            self._sandbox_warned = True
            self.tell("GEAK " + warning)
        findings = finish.findings(job, out)
        outcome = findings[0].code if findings else "no-improvement"
        result_hash = finish.record(self.projects.store(job.root), job, out, outcome)
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

    async def _offer(self, job: Job, out: "Outcome", findings: list[Finding], result_hash: str) -> tuple[str, bool]:
        """Apply the result if the document is still the job's text (the editor may ask the
        user first); else keep it as the "Apply GEAK result" action while the target is
        unchanged. Returns the job's end message and whether its progress is still open."""
        title = finish.apply_title(out)
        doc, found = await self.doc_targets(job.uri)
        if doc.source != job.text:
            pending, finding, why = finish.not_applied(job, out, found, result_hash, title)
            if pending is not None:
                self.pending[job.uri] = pending
            findings.append(finding)
            return why, bool(job.token)
        # The editor may now show a preview and wait for the user: the job's work is done.
        ready, progress_open = "result ready: review it, then apply or discard", bool(job.token)
        if job.token and "geakJobEnd" in self.client_features:
            # This client says the outcome itself (geak/jobEnd), after the choice.
            self.work_done_progress.end(job.token, t.WorkDoneProgressEnd(message=ready))
            progress_open = False
        elif job.token:
            self.work_done_progress.report(job.token, t.WorkDoneProgressReport(message=ready, percentage=100))
        if await self._apply(job, doc, title, out):
            findings[:] = finish.applied(findings, result_hash)
            return f"applied: {out.message}", progress_open
        self.pending[job.uri] = finish.Pending(job, out.source, title, job.source_hash, result_hash)
        findings.append(Finding(job.name, job.source_hash, finish.INFO,
                                f"the edit was not applied; use '{title}' to apply it", "not-applied"))
        return out.message, progress_open

    async def _apply(self, job: Job, doc, title: str, out: "Outcome") -> bool:
        edit = workspace_edit(job.uri, doc.version, doc.source, job.merge, title, out.message,
                              self.client_capabilities.workspace)
        try:
            res = await self.workspace_apply_edit_async(t.ApplyWorkspaceEditParams(edit=edit, label=title))
        except Exception as e:  # noqa: BLE001
            self.log(f"GEAK: the editor did not take the edit ({e})", t.MessageType.Warning)
            return False
        if not res.applied:
            self.log(f"GEAK: the editor did not apply the edit ({res.failure_reason or 'declined'})")
        return bool(res.applied)


server = GeakServer()
"""The one server; ``handlers`` registers what it answers, ``main`` runs it (``geak-lsp``)."""
