"""A small editor for the language-server tests, over pytest-lsp's client: it owns the
documents (text and version), applies ``workspace/applyEdit`` to them the way an editor does
(refusing an edit made for another version), and sends the resulting ``didChange``.

The server under test is the real ``python -m geak_lsp`` subprocess."""

from __future__ import annotations

import asyncio
import json
import concurrent.futures
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Optional, Union

import attrs
from lsprotocol import types as t
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import make_test_lsp_client

ROOT = Path(__file__).resolve().parents[2]


def apply_text_edits(text: str, edits: list) -> str:
    lines = text.splitlines(keepends=True)

    def offset(p: t.Position) -> int:
        if p.line >= len(lines):
            return len(text)
        return sum(len(x) for x in lines[:p.line]) + p.character  # ASCII test files

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        a, b = offset(e.range.start), offset(e.range.end)
        text = text[:a] + e.new_text + text[b:]
    return text


class Editor:
    def __init__(self, client: LanguageClient):
        self.client = client
        self.docs: dict[str, list] = {}  # uri -> [version, text]
        self.applied: list[t.ApplyWorkspaceEditParams] = []
        self.refused: list[t.ApplyWorkspaceEditParams] = []
        self.accept_edits = True
        self.initialize_result: Optional[t.InitializeResult] = None
        self.job_ends: list[dict] = []
        """geak/jobEnd notifications (sent to a client that declares geakJobEnd)."""
        self.job_statuses: list[dict] = []
        """geak/jobStatus notifications (sent to a client that declares geakJobStatus)."""

    # documents -------------------------------------------------------------

    def open(self, path: Path, text: Optional[str] = None) -> str:
        uri = path.resolve().as_uri()
        text = path.read_text() if text is None else text
        self.docs[uri] = [1, text]
        self.client.text_document_did_open(t.DidOpenTextDocumentParams(
            text_document=t.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri

    def text(self, uri: str) -> str:
        return self.docs[uri][1]

    def change(self, uri: str, text: str) -> None:
        self.docs[uri][0] += 1
        self.docs[uri][1] = text
        self.client.text_document_did_change(t.DidChangeTextDocumentParams(
            text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=self.docs[uri][0]),
            content_changes=[t.TextDocumentContentChangeWholeDocument(text=text)]))

    def apply(self, edit: t.WorkspaceEdit) -> bool:
        if edit.document_changes:
            for dc in edit.document_changes:
                uri = dc.text_document.uri
                if dc.text_document.version is not None and dc.text_document.version != self.docs[uri][0]:
                    return False
            for dc in edit.document_changes:
                uri = dc.text_document.uri
                self.change(uri, apply_text_edits(self.text(uri), list(dc.edits)))
        for uri, edits in (edit.changes or {}).items():
            self.change(uri, apply_text_edits(self.text(uri), list(edits)))
        return True

    # requests --------------------------------------------------------------

    async def actions(self, uri: str, line: int) -> list[t.CodeAction]:
        pos = t.Position(line=line, character=0)
        got = await self.client.text_document_code_action_async(t.CodeActionParams(
            text_document=t.TextDocumentIdentifier(uri=uri), range=t.Range(start=pos, end=pos),
            context=t.CodeActionContext(diagnostics=[])))
        return list(got or [])

    async def action(self, uri: str, line: int, title: str) -> t.CodeAction:
        acts = await self.actions(uri, line)
        hit = [a for a in acts if a.title.startswith(title)]
        assert hit, f"no code action {title!r} at line {line}: {[a.title for a in acts]}"
        return hit[0]

    async def execute(self, command: t.Command) -> Any:
        return await self.client.workspace_execute_command_async(t.ExecuteCommandParams(
            command=command.command, arguments=command.arguments))

    async def hover(self, uri: str, line: int) -> Optional[str]:
        h = await self.client.text_document_hover_async(t.HoverParams(
            text_document=t.TextDocumentIdentifier(uri=uri), position=t.Position(line=line, character=4)))
        return h.contents.value if h else None

    async def raw_request(self, method: str, params: Any, timeout: float = 10.0) -> Any:
        """Send ``params`` exactly as given (no lsprotocol types on the way out) and wait for the
        answer; an error answer raises pygls' JsonRpcException (with ``code``)."""
        proto = self.client.protocol
        msg_id = str(uuid.uuid4())
        fut: concurrent.futures.Future = concurrent.futures.Future()
        proto._request_futures[msg_id] = fut
        proto._result_types[msg_id] = None
        proto._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return await asyncio.wait_for(asyncio.wrap_future(fut), timeout)

    async def info(self) -> dict:
        return await self.client.workspace_execute_command_async(t.ExecuteCommandParams(
            command="geak.serverInfo", arguments=[]))

    def progress(self, token: str) -> list:
        return self.client.progress_reports.get(token, [])

    async def until(self, check, timeout: float = 60.0, what: str = "condition"):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            v = check()
            if v:
                return v
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    async def job_end(self, token: str, timeout: float = 90.0) -> t.WorkDoneProgressEnd:
        return await self.until(lambda: next((v for v in self.progress(token)
                                              if isinstance(v, t.WorkDoneProgressEnd)), None),
                                timeout, f"the end of progress {token}")

    def diagnostics(self, uri: str) -> list[t.Diagnostic]:
        return list(self.client.diagnostics.get(uri, []))


def _fix_code_action_union(client: LanguageClient) -> None:
    """lsprotocol would structure a CodeAction that has a ``command`` object as a Command."""
    conv = client.protocol._converter

    def hook(obj, _):
        if isinstance(obj.get("command"), str):
            return conv.structure(obj, t.Command)
        return conv.structure(obj, t.CodeAction)

    conv.register_structure_hook(Union[t.Command, t.CodeAction], hook)


def _plain(obj: Any) -> Any:
    """pygls hands a custom notification's params over as namedtuples: back to JSON values."""
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _factory():
    client = make_test_lsp_client()
    _fix_code_action_union(client)

    @client.feature(t.WORKSPACE_APPLY_EDIT)
    def apply_edit(ls, params: t.ApplyWorkspaceEditParams):
        ed: Editor = ls.editor
        if ed.accept_edits and ed.apply(params.edit):
            ed.applied.append(params)
            return t.ApplyWorkspaceEditResult(applied=True)
        ed.refused.append(params)
        return t.ApplyWorkspaceEditResult(applied=False, failure_reason="declined in the test editor")

    @client.feature("geak/jobEnd")
    def job_end(ls, params):
        ls.editor.job_ends.append(_plain(params))

    @client.feature("geak/jobStatus")
    def job_status(ls, params):
        ls.editor.job_statuses.append(_plain(params))

    return client


CAPABILITIES = t.ClientCapabilities(
    window=t.WindowClientCapabilities(work_done_progress=True),
    workspace=t.WorkspaceClientCapabilities(
        configuration=True, apply_edit=True,
        workspace_edit=t.WorkspaceEditClientCapabilities(
            document_changes=True,
            change_annotation_support=t.ChangeAnnotationsSupportOptions(groups_on_label=True))),
    text_document=t.TextDocumentClientCapabilities(
        code_action=t.CodeActionClientCapabilities(
            code_action_literal_support=t.ClientCodeActionLiteralOptions(
                code_action_kind=t.ClientCodeActionKindOptions(value_set=["refactor", "quickfix"])),
            disabled_support=True),
        hover=t.HoverClientCapabilities(content_format=[t.MarkupKind.Markdown])))

WIRE = json.loads((ROOT / "geak_lsp" / "wire.schema.json").read_text(encoding="utf-8"))
"""What the server sends the VS Code extension besides LSP (the extension's types come from it)."""


def check_wire(name: str, payload: Any) -> None:
    """``payload`` is a ``name`` of the wire schema (jsonschema.ValidationError says where not)."""
    import jsonschema
    jsonschema.validate(payload, {**WIRE, "$ref": f"#/$defs/{name}"})


VSCODE_EXTENSION = attrs.evolve(CAPABILITIES, experimental={"geakShowResults": True, "geakJobEnd": True,
                                                             "geakJobStatus": True, "geakShowCompiled": True})
"""What the GEAK VS Code extension declares besides: it has geak.showResults, it shows the end
of each job itself (geak/jobEnd), its status bar reads each job's status (geak/jobStatus), and
it has the compiled view (geak.showCompiled)."""


async def start(root: Path, init: Optional[dict] = None, configuration: Optional[dict] = None,
                env: Optional[dict] = None, capabilities: t.ClientCapabilities = CAPABILITIES,
                args: tuple[str, ...] = ()) -> Editor:
    server_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    cfg = ClientServerConfig(server_command=[sys.executable, "-m", "geak_lsp", *args], client_factory=_factory,
                             server_env=server_env)
    client = await cfg.start()
    editor = Editor(client)
    client.editor = editor
    if configuration is not None:
        client.set_configuration(configuration, section="geak")
    editor.initialize_result = await client.initialize_session(t.InitializeParams(
        capabilities=capabilities, root_uri=root.as_uri(), initialization_options=init,
        workspace_folders=[t.WorkspaceFolder(uri=root.as_uri(), name=root.name)]))
    return editor


async def stop(editor: Editor) -> None:
    await editor.client.shutdown_session()
