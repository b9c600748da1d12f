"""The GEAK language server (pygls): it receives and sends; what it sends comes from one module
per concern (thin handlers over domain modules, as jedi-language-server's are).

    protocol.py     under pygls: every request answered, cheap document changes, custom capabilities
    documents.py    the targets of open documents, large ones parsed off the event loop
    targets.py      syntax-tree discovery of kernels, wrappers, PyTorch functions and modules
    projects.py     a document's project, store, options, unsaved text; the runner
    actions.py      code actions (Optimize / Benchmark with GEAK, Add GEAK inputs, Apply GEAK result)
    jobs.py         jobs off the event loop, a limit, cancellation
    work.py         a job's work on its thread: the request, the strategy, the edit, the compiled difference
    strategies.py   what a strategy does for the editor: benchmark, or optimize through agent.optimize
    finish.py       a job's end as data: findings, the record, a result kept for later
    edits.py        a result module -> span edits of the document, and the LSP edit
    diagnostics.py  findings per target, marked stale when the code changes
    hover.py        the last measurement of a kernel or wrapper
    compiled.py     the compiled view: a listing mapped to source lines, cached; its hover and lenses
    results.py      what the results view shows
    store.py        measurements and runs in .geak/, keyed by source hash + device
    settings.py     geak.* from initializationOptions and workspace/configuration, validated
    main.py         the geak-lsp program: transports, the editor's process, leaving

Nothing here imports torch or triton: they live in the runner's worker subprocesses. Handlers
that run on every keystroke or cursor move (code actions, hover, lenses) work from the cached
syntax tree only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from lsprotocol import types as t
from pygls import uris
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from . import __version__, actions, compiled, finish, settings as settings_mod, work
from .diagnostics import Diagnostics, Finding
from .documents import DocumentIndex
from .edits import workspace_edit
from .errors import BadArguments, UserFacing, shown, target_argument, target_of
from .hover import hover_text
from .jobs import Job, JobManager, target_to_run
from .projects import Projects
from .protocol import GeakProtocol
from .results import results
from .settings import Settings
from .targets import TargetCache

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
        self.jobs = JobManager(self.settings.max_jobs, self._job_progress, self._job_done, self._job_started)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.projects = Projects(lambda m: self.log(m, t.MessageType.Warning))
        self.compiled = compiled.CompiledViews(lambda req, target, text: compiled.compile_listing(
            self.projects, self.settings, req, target, text, self.open_texts()))
        self._shown_problems: list[str] = []
        self._sandbox_warned = False
        self.client_features: set[str] = set()
        """Custom client features from ``capabilities.experimental`` (the VS Code extension's):
        ``geakShowResults`` (it has a geak.showResults command), ``geakJobEnd`` (it shows the
        end of each job itself, from the geak/jobEnd notification), ``geakJobStatus`` (it
        reads each job's status as numbers, from the geak/jobStatus notification) and
        ``geakShowCompiled`` (it has a geak.showCompiled command that opens the compiled view)."""

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

    # ------------------------------------------------------------------ documents

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
        if doc is None:
            return None, None
        return doc, self.index.usable(uri, doc) or await self.index.wait(uri, doc, QUICK_WAIT_S)

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

    # ------------------------------------------------------------------ jobs

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

    def _job_started(self, job: Job) -> None:
        self.from_thread(self._job_status, job)

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

    async def compiled_code(self, arg: Any) -> dict:
        """geak.compiledCode: the listing of a target (compiled on the view's thread, or cached)."""
        try:
            req = compiled.parse_request(arg)
        except ValueError as e:
            raise BadArguments(f"{compiled.CODE}: {e}") from None
        if self.open_document(req.uri) is None:
            raise BadArguments(f"{compiled.CODE}: {req.uri} is not open in the editor")
        doc, found = await self.doc_targets(req.uri)
        target = compiled.target_to_compile(req, found)
        from .strategies import aot_arch
        req.arch = req.arch or aot_arch(self.projects.runner_for(self.settings), self.settings)
        listing = await asyncio.wrap_future(self.compiled.get(req, target, doc.source, req.arch))
        return listing.as_dict()


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
        got = await ls.workspace_configuration_async(t.ConfigurationParams(items=[t.ConfigurationItem(section="geak")]))
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
    doc, found = await ls.quick_targets(uri)
    if doc is None:
        return None
    if found is None:
        return actions.only([actions.still_reading(len(doc.source))], params.context.only) or None
    line = params.range.start.line
    out = actions.target_actions(found, uri, line, [j.symbol for j in ls.jobs.find(uri)])
    target = found.at_line(line)
    if target is not None:
        out += [actions.cancel_action(j.id, target.name) for j in ls.jobs.find(uri, target.evaluated)]
    apply = actions.apply_pending(ls.pending.get(uri), uri, doc, found, ls.client_capabilities.workspace, ls.log)
    if apply is not None:
        out.insert(0, apply)
    if target is not None and "geakShowResults" in ls.client_features and _has_runs(ls, uri, target.evaluated):
        out.append(actions.show_results(uri, target, params.context.diagnostics))
    return actions.only(out, params.context.only) or None


def _has_runs(ls: GeakServer, uri: str, symbol: str) -> bool:
    try:
        root, rel = ls.projects.project(uri)
    except (UserFacing, ValueError):
        return False
    return bool(ls.projects.store(root).runs(rel, symbol))


def _command_link(command: str, arg: dict) -> str:
    return f"command:{command}?{urllib.parse.quote(json.dumps([arg]))}"


@server.feature(t.TEXT_DOCUMENT_HOVER)
async def on_hover(ls: GeakServer, params: t.HoverParams):
    uri, line = params.text_document.uri, params.position.line
    doc, found = await ls.quick_targets(uri)
    if found is None:
        return None
    target = found.at_header(line)
    if target is None:  # a kernel's body line: what it compiled to, from the compiled view's cache only
        kernel, hit = compiled.kernel_body_line(found, line), ls.compiled.for_line(uri, doc.source, line)
        if kernel is None or hit is None:
            return None
        link = _command_link(compiled.SHOW, {"uri": uri, "name": hit[0].name, "arch": hit[0].arch, "stage": hit[0].stage}) \
            if "geakShowCompiled" in ls.client_features else None
        text, lines = compiled.hover_text(hit[0], line, hit[1], link), (line, line)
    else:
        try:
            root, rel = ls.projects.project(uri)
        except (UserFacing, ValueError):
            return None
        show = "geakShowResults" in ls.client_features and ls.projects.store(root).runs(rel, target.evaluated)
        link = _command_link("geak.showResults", {"uri": uri, "name": target.name}) if show else None
        text, lines = hover_text(found, target, ls.projects.store(root), rel, results_link=link), \
            (target.header.start, target.header.end)
    return t.Hover(contents=t.MarkupContent(kind=t.MarkupKind.Markdown, value=text),
                   range=t.Range(start=t.Position(line=lines[0], character=0), end=t.Position(line=lines[1] + 1, character=0)))


@server.feature(t.TEXT_DOCUMENT_CODE_LENS, t.CodeLensOptions(resolve_provider=False))
async def on_code_lens(ls: GeakServer, params: t.CodeLensParams):
    """"GEAK: compiled code" above each Triton kernel, for a client with the compiled view."""
    doc, found = await ls.quick_targets(params.text_document.uri)
    if found is None or found.syntax_error or "geakShowCompiled" not in ls.client_features:
        return None
    from runner.aot import default_stage
    arch = ls.settings.arch
    return compiled.code_lenses(found, params.text_document.uri, f"{arch} {default_stage(arch)}" if arch else None) or None


async def _command(ls: GeakServer, kind: str, args) -> Any:
    """Arguments that do not fit are a JSON-RPC error (-32602); a job that cannot start on a
    well-formed target (the file does not parse, a job already runs on it) is said to the user
    and answered ``{"error": message}``."""
    try:
        return await ls.start_job(kind, target_argument(f"geak.{kind}", args))
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
        return results(target_argument("geak.results", args), ls.projects, ls.targets)
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
        raise JsonRpcInvalidParams('geak.cancel: expected a job id, {"uri": ...} or no argument (every job), got '
                                   + (shown(arg) if len(args) == 1 else f"{len(args)} arguments"))
    return {"cancelled": [i for i in ids if ls.cancel_job(i, "by geak.cancel")]}


@server.command(actions.SERVER_INFO)
def cmd_info(ls: GeakServer, *args):
    return {"version": __version__, "pid": os.getpid(),
            "imported": {m: m in sys.modules for m in ("torch", "triton", "numpy", "openai", "anthropic")},
            "settings": settings_mod.as_dict(ls.settings),
            "jobs": [{"id": j.id, "kind": j.kind, "name": j.name, "state": j.state} for j in ls.jobs.jobs.values()]}


@server.feature(t.SHUTDOWN)
def on_shutdown(ls: GeakServer, *args):
    ls.jobs.shutdown()
    ls.compiled.close()
    ls.projects.close()


def main(argv: Optional[list[str]] = None) -> int:
    """``geak-lsp`` (``geak_lsp.main``; kept here for installs whose entry point names this module)."""
    from .main import main as run
    return run(argv)
