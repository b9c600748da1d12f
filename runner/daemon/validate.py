"""Checks on what a client sends, shared by the HTTP API and the spool directory."""

from __future__ import annotations

import uuid

from ..schema import EvalRequest, SchemaError, check_schema, from_dict, to_json
from .store import ID_RE

MAX_FILES = 1000


class Invalid(ValueError):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def check_id(jid, where: str = "id") -> str:
    if not isinstance(jid, str) or not ID_RE.match(jid):
        raise Invalid(400, "bad_request", (f"{where} must be 1-128 characters of letters, digits, '.', '_' "
                                           f"or '-', starting with a letter or digit; got {jid!r}")[:300])
    return jid


def parse_request(data, where: str = "EvalRequest", jid: str = "") -> tuple[str, str]:
    """A parsed JSON value -> ``(job id, canonical request JSON)``; raises ``Invalid``.
    ``jid`` (from a spool file name) overrides the request's own id."""
    if not isinstance(data, dict):
        raise Invalid(400, "bad_request", f"{where}: expected a JSON object (an EvalRequest)")
    try:
        check_schema(data)
    except SchemaError as e:
        raise Invalid(400, "schema_mismatch", f"{where}: {e}") from None
    try:
        req = from_dict(EvalRequest, data, where)
    except SchemaError as e:
        raise Invalid(422, "invalid_request", str(e)) from None
    if len(req.files) + len(req.candidate_files) > MAX_FILES:
        raise Invalid(422, "invalid_request", f"{where}: more than {MAX_FILES} files")
    if jid:
        req.id = jid
    req.id = check_id(req.id, f"{where}.id") if req.id else uuid.uuid4().hex
    return req.id, to_json(req)
