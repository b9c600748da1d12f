"""The protocol layer under pygls: every request gets an answer.

A request whose params do not fit its method's type is answered with JSON-RPC error -32602
(Invalid params), saying which field did not fit. pygls 2.1 turns a message into lsprotocol
types while it reads it; when that fails (``params: null`` for ``textDocument/codeAction``, a
``range`` that is not a range, a negative line) it logs the error, shows "Invalid Params" to the
user and sends nothing back, so the client waits forever. Here such a request becomes a
``BadRequest`` that is answered with the error instead.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcInvalidParams
from pygls.protocol import JsonRPCRequestMessage, LanguageServerProtocol

log = logging.getLogger("geak_lsp")


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

    def handle_message(self, message):
        if isinstance(message, BadRequest):
            log.warning("answered %s (id %r) with Invalid params: %s", message.method, message.id, message.reason)
            self._send_response(message.id, error=ResponseError(
                code=JsonRpcInvalidParams.CODE,
                message=f"Invalid params for {message.method}: {message.reason}"))
            return
        return super().handle_message(message)
