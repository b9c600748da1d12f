"""The protocol layer under pygls: every request gets an answer, and document changes are cheap.

A request whose params do not fit its method's type is answered with JSON-RPC error -32602
(Invalid params), saying which field did not fit. pygls 2.1 turns a message into lsprotocol
types while it reads it; when that fails (``params: null`` for ``textDocument/codeAction``, a
``range`` that is not a range, a negative line) it logs the error, shows "Invalid Params" to the
user and sends nothing back, so the client waits forever. Here such a request becomes a
``BadRequest`` that is answered with the error instead.

``textDocument/didChange`` applies incremental changes by slicing the text
(``documents.apply_change``) instead of pygls's line-by-line rewrite.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote
from dataclasses import dataclass
from typing import Any

from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcInvalidParams
from lsprotocol import types
from pygls.protocol import JsonRPCRequestMessage, LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from geak_lsp.documents import apply_change

log = logging.getLogger("geak_lsp")

EXPERIMENTAL = {"geakResults": True, "geakJobEnd": True, "geakJobStatus": True, "geakCompiledCode": True}
"""What the server offers besides LSP (``ServerCapabilities.experimental``): the geak.results
and geak.compiledCode commands, and, for a client that declares them, the geak/jobEnd and
geak/jobStatus notifications and the compiled view's code lenses."""


@dataclass
class BadRequest:
    id: Any
    method: str
    reason: str
    jsonrpc: str = "2.0"


def _reason(exc: BaseException) -> str:
    """The first concrete cause of a structuring failure, in one line, with where it was
    ("params.range.start: TypeError: 'int' object is not subscriptable")."""
    cause, where = exc, []
    for _ in range(20):
        for note in getattr(cause, "__notes__", None) or []:
            m = re.match(r"Structuring class (\w+) @ attribute (\w+)", str(note))
            if m:
                where.append(m.group(2))
        subs = getattr(cause, "exceptions", None)
        if not subs:
            break
        cause = subs[0]
    prefix = ".".join(where) + ": " if where else ""
    return f"{prefix}{type(cause).__name__}: {cause}"[:400]


class GeakProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]):
        if isinstance(data, dict) and "jsonrpc" in data and "id" in data and "method" in data and "error" not in data:
            request_type = self.get_message_type(data["method"]) or JsonRPCRequestMessage
            try:
                return self._converter.structure(data, request_type)
            except Exception as exc:  # noqa: BLE001 - answered below, never dropped
                return BadRequest(id=data["id"], method=str(data["method"]), reason=_reason(exc))
        return super().structure_message(data)

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls's own, and the server's custom features in ``capabilities.experimental``."""
        result = yield from super().lsp_initialize(params)
        result.capabilities.experimental = dict(EXPERIMENTAL)
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        """pygls's own, with a faster incremental change (``documents.apply_change``)."""
        for change in params.content_changes:
            doc = self.workspace.text_documents.get(unquote(params.text_document.uri))
            if doc is not None and apply_change(doc, change):
                doc.version = params.text_document.version
            else:
                self.workspace.update_text_document(params.text_document, change)
        if (user_handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield user_handler, (params,), None

    def handle_message(self, message):
        if isinstance(message, BadRequest):
            log.warning("answered %s (id %r) with Invalid params: %s", message.method, message.id, message.reason)
            self._send_response(message.id, error=ResponseError(
                code=JsonRpcInvalidParams.CODE,
                message=f"Invalid params for {message.method}: {message.reason}"))
            return
        return super().handle_message(message)
